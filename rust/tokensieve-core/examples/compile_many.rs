//! Compiles every schema of a JSON-lines file once, each as a new grammar with its first mask,
//! in one process (as a server meets new schemas), and reports the distribution of times:
//! `cargo run --release -p tokensieve-core --example compile_many -- TOKENIZER_JSON SCHEMAS_JSONL`
//! Each line is a JSON Schema, or an object with the schema under "schema" (and an "id").
//! `REPEAT=n` runs the whole file n times (for profiling); `SLOWEST=k` lists the k slowest;
//! `FAILS=1` names the schemas that do not compile; `THRASH=1` and `SLEEP_MS=n` start each
//! compile with cold caches (see below); `ALLOCS=1` reports allocations per compile;
//! `PREPARE=0` leaves what the process keeps across compiles (formats, the any-JSON value) to
//! the first schema that needs it.
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokensieve_core::json_schema::JsonSchemaOptions;
use tokensieve_core::{Grammar, GrammarOptions, Vocabulary};

// The allocator the Python bindings use, counting allocations (reported with `ALLOCS=1`: each
// allocation of a compile is a cache miss when the caches are cold, see `SLEEP_MS`).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);

fn count(size: usize) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    ALLOCATED.fetch_add(size as u64, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size());
        unsafe { mimalloc::MiMalloc.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count(l.size());
        unsafe { mimalloc::MiMalloc.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, size: usize) -> *mut u8 {
        count(size);
        unsafe { mimalloc::MiMalloc.realloc(p, l, size) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { mimalloc::MiMalloc.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn pct(v: &[f64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p / 100.0).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    assert!(
        args.len() == 2,
        "usage: compile_many TOKENIZER_JSON SCHEMAS_JSONL"
    );
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(d)
    };
    let (repeat, slowest) = (env("REPEAT", 1).max(1), env("SLOWEST", 5));
    let json = std::fs::read_to_string(&args[0]).expect("read tokenizer.json");
    let v = Arc::new(Vocabulary::from_tokenizer_json(&json, None, None, &[]).expect("vocabulary"));
    // as the Python bindings do with their first vocabulary (PREPARE=0: not)
    if env("PREPARE", 1) != 0 {
        tokensieve_core::json_schema::prepare();
    }
    let mut schemas = Vec::new();
    for (i, line) in std::fs::read_to_string(&args[1])
        .expect("read schemas")
        .lines()
        .enumerate()
    {
        let mut x: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        let id = x.get("id").and_then(|s| s.as_str()).map(str::to_string);
        let s = match x.get_mut("schema") {
            Some(s) if id.is_some() => s.take(),
            _ => x,
        };
        schemas.push((id.unwrap_or_else(|| format!("line {}", i + 1)), s));
    }
    let (opts, gopts) = (JsonSchemaOptions::default(), GrammarOptions::default());
    let mut row = vec![0u32; v.mask_words()];
    // THRASH=1: read 64 MiB between schemas, so every compile starts with cold caches (as in
    // a server, where a forward pass runs between requests)
    let thrash = env("THRASH", 0) != 0;
    let junk: Vec<u64> = if thrash { vec![1; 8 << 20] } else { Vec::new() };
    let mut sink = 0u64;
    // PHASES=1: also time schema → expression and expression → lazy DFA (separately, after
    // another thrash)
    let phases = env("PHASES", 0) != 0;
    // SLEEP_MS=n: sleep n ms before each compile (a server idles between requests, and what
    // the caches held fades meanwhile)
    let sleep = std::time::Duration::from_millis(env("SLEEP_MS", 0) as u64);
    let (mut walk_ms, mut dfa_ms) = (Vec::new(), Vec::new());
    let mut times = Vec::new();
    // allocations (count, bytes) of each compile and first mask, in `times`' order
    let mut allocs: Vec<(u64, u64)> = Vec::new();
    let mut failed = 0;
    for _ in 0..repeat {
        for (id, s) in &schemas {
            if phases {
                sink = sink.wrapping_add(junk.iter().sum::<u64>());
                let t = Instant::now();
                if let Ok(c) = tokensieve_core::json_schema::compile(s, &opts) {
                    walk_ms.push(t.elapsed().as_secs_f64() * 1e3);
                    let t = Instant::now();
                    if c.into_dfa("schema", &gopts.regex).is_ok() {
                        dfa_ms.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                }
            }
            sink = sink.wrapping_add(junk.iter().sum::<u64>());
            if !sleep.is_zero() {
                std::thread::sleep(sleep);
            }
            let (n0, b0) = (
                ALLOCATIONS.load(Ordering::Relaxed),
                ALLOCATED.load(Ordering::Relaxed),
            );
            let t = Instant::now();
            match Grammar::from_json_schema(s, v.clone(), &opts, &gopts) {
                Ok(g) => {
                    let m = Arc::new(g).matcher();
                    m.fill_next_token_bitmask(&mut row).expect("mask");
                    times.push((t.elapsed().as_secs_f64() * 1e3, id.as_str()));
                    allocs.push((
                        ALLOCATIONS.load(Ordering::Relaxed) - n0,
                        ALLOCATED.load(Ordering::Relaxed) - b0,
                    ));
                }
                Err(e) => {
                    failed += 1;
                    // FAILS=1: name each schema that does not compile, with its error
                    if env("FAILS", 0) != 0 {
                        println!("  failed: {id}: {e}");
                    }
                }
            }
        }
    }
    let mut ms: Vec<f64> = times.iter().map(|t| t.0).collect();
    ms.sort_by(f64::total_cmp);
    if ms.is_empty() {
        println!("no schema compiled ({failed} failed)");
        return;
    }
    println!(
        "{} compiled, {failed} failed; first mask ms: p50 {:.3} p90 {:.3} p99 {:.3} max {:.3} sum {:.1}",
        ms.len(),
        pct(&ms, 50.0),
        pct(&ms, 90.0),
        pct(&ms, 99.0),
        ms[ms.len() - 1],
        ms.iter().sum::<f64>()
    );
    // ALLOCS=1: allocations per compile (they run on the compiling thread and the
    // background rule builder alike)
    if env("ALLOCS", 0) != 0 {
        let (mut n, mut b): (Vec<u64>, Vec<u64>) = allocs.iter().copied().unzip();
        n.sort_unstable();
        b.sort_unstable();
        let p = |v: &[u64], q: f64| v[((v.len() - 1) as f64 * q / 100.0).round() as usize];
        println!(
            "  allocations per compile: p50 {} p90 {} p99 {} sum {}; bytes p50 {} p99 {} sum {}",
            p(&n, 50.0),
            p(&n, 90.0),
            p(&n, 99.0),
            n.iter().sum::<u64>(),
            p(&b, 50.0),
            p(&b, 99.0),
            b.iter().sum::<u64>()
        );
    }
    for (name, mut v) in [
        ("schema → expression", walk_ms),
        ("expression → DFA", dfa_ms),
    ] {
        if !v.is_empty() {
            v.sort_by(f64::total_cmp);
            println!(
                "  {name}: p50 {:.3} p90 {:.3} p99 {:.3}",
                pct(&v, 50.0),
                pct(&v, 90.0),
                pct(&v, 99.0)
            );
        }
    }
    std::hint::black_box(sink);
    times.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (t, id) in times.iter().take(slowest) {
        println!("  {t:8.3} ms  {id}");
    }
}

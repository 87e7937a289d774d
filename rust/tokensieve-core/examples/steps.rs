//! Times a schema's compile and the first mask at given prefixes of an output, on fresh grammars:
//! `cargo run --release -p tokensieve-core --example steps -- TOKENIZER_JSON SCHEMA_JSON [PREFIX ...]`
//! Each round compiles the schema again and fills the masks in order; medians over 15 rounds.
use std::sync::Arc;
use std::time::Instant;

use tokensieve_core::json_schema::JsonSchemaOptions;
use tokensieve_core::{Grammar, GrammarOptions, Vocabulary};

// The allocator the Python bindings use.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    assert!(
        args.len() >= 2,
        "usage: steps TOKENIZER_JSON SCHEMA_JSON [PREFIX ...]"
    );
    let json = std::fs::read_to_string(&args[0]).expect("read tokenizer.json");
    let v = Arc::new(Vocabulary::from_tokenizer_json(&json, None, None, &[]).expect("vocabulary"));
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&args[1]).expect("read schema"))
            .expect("schema JSON");
    let mut prefixes: Vec<&str> = vec![""];
    prefixes.extend(args[2..].iter().map(|s| s.as_str()));
    let opts = JsonSchemaOptions::default();
    let mut row = vec![0u32; v.mask_words()];
    let mut compile = Vec::new();
    let mut masks: Vec<Vec<f64>> = vec![Vec::new(); prefixes.len()];
    let mut warm: Vec<Vec<f64>> = vec![Vec::new(); prefixes.len()];
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(15);
    for _ in 0..rounds {
        let t = Instant::now();
        let g = Arc::new(
            Grammar::from_json_schema(&schema, v.clone(), &opts, &GrammarOptions::default())
                .expect("compile"),
        );
        compile.push(t.elapsed().as_secs_f64() * 1e6);
        let start = g.matcher().state();
        for (i, p) in prefixes.iter().enumerate() {
            let s = g.dfa().walk(start, p.as_bytes()).expect("walk");
            let t = Instant::now();
            g.fill_mask(s, false, &mut row).expect("mask");
            masks[i].push(t.elapsed().as_secs_f64() * 1e6);
        }
        // The same walks again over the now warm DFA, with an empty mask cache.
        let idx = tokensieve_core::index::TokenIndex::new(1 << 30);
        for (i, p) in prefixes.iter().enumerate() {
            let s = g.dfa().walk(start, p.as_bytes()).expect("walk");
            if std::env::var("FLUSH").is_ok() {
                // evict the CPU caches, as a compile or other requests would
                let mut junk = vec![1u8; 64 << 20];
                for k in (0..junk.len()).step_by(64) {
                    junk[k] = junk[k].wrapping_add(k as u8);
                }
                std::hint::black_box(&junk);
            }
            let t = Instant::now();
            idx.mask(&v, g.dfa(), s).expect("mask");
            warm[i].push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    println!("compile {:9.1} us", med(&mut compile));
    for (i, p) in prefixes.iter().enumerate() {
        println!(
            "mask    {:9.1} us (warm DFA {:9.1} us)  after {:?}",
            med(&mut masks[i]),
            med(&mut warm[i]),
            p
        );
    }
}

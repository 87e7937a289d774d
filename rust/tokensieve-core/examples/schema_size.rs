//! Compile one JSON Schema and report where time and size go (schema → intermediate form →
//! NFA → first DFA state): `cargo run --release -p tokensieve-core --example schema_size -- schema.json`
//! `REPEAT=n` compiles it n times and reports the medians (for profiling).
use std::time::{Duration, Instant};

use tokensieve_core::json_schema::{compile, JsonSchemaOptions};
use tokensieve_core::regex::RegexOptions;

// The allocator the Python bindings use.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The median and the minimum.
fn median(mut v: Vec<Duration>) -> String {
    v.sort();
    format!("{:?} (min {:?})", v[v.len() / 2], v[0])
}

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: schema_size SCHEMA_JSON");
    let repeat: usize = std::env::var("REPEAT")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1)
        .max(1);
    let text = std::fs::read_to_string(&path).expect("read schema");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let (mut walk, mut build) = (Vec::new(), Vec::new());
    for _ in 0..repeat {
        let t = Instant::now();
        let c = match compile(&schema, &JsonSchemaOptions::default()) {
            Ok(c) => c,
            Err(e) => {
                println!("schema → expression failed after {:?}: {e}", t.elapsed());
                return;
            }
        };
        walk.push(t.elapsed());
        let weight = c.weight();
        let t = Instant::now();
        match c.into_dfa("schema", &RegexOptions::default()) {
            Ok(d) => {
                build.push(t.elapsed());
                if build.len() == repeat {
                    println!(
                        "schema → expression: {}, weight {weight}\nexpression → NFA + start \
                         state: {}, {} DFA states",
                        median(walk.clone()),
                        median(build.clone()),
                        d.num_states()
                    );
                }
            }
            Err(e) => {
                println!("expression → NFA failed after {:?}: {e}", t.elapsed());
                return;
            }
        }
    }
}

//! Compile one JSON Schema and report where time and size go (schema → intermediate form →
//! NFA → first DFA state): `cargo run --release -p tokensieve-core --example schema_size -- schema.json`
use std::time::Instant;

use tokensieve_core::json_schema::{compile, JsonSchemaOptions};
use tokensieve_core::regex::RegexOptions;

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: schema_size SCHEMA_JSON");
    let text = std::fs::read_to_string(&path).expect("read schema");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let t = Instant::now();
    let c = match compile(&schema, &JsonSchemaOptions::default()) {
        Ok(c) => c,
        Err(e) => {
            println!("schema → expression failed after {:?}: {e}", t.elapsed());
            return;
        }
    };
    println!(
        "schema → expression: {:?}, weight {}",
        t.elapsed(),
        c.weight()
    );
    let t = Instant::now();
    match c.dfa("schema", &RegexOptions::default()) {
        Ok(d) => println!(
            "expression → NFA + start state: {:?}, {} DFA states",
            t.elapsed(),
            d.num_states()
        ),
        Err(e) => println!("expression → NFA failed after {:?}: {e}", t.elapsed()),
    }
}

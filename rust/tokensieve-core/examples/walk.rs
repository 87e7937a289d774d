//! Times one unpruned trie walk (a JSON string body) on a real vocabulary:
//! `cargo run --release -p tokensieve-core --example walk -- path/to/tokenizer.json`
use std::sync::Arc;
use std::time::Instant;

use tokensieve_core::{Grammar, GrammarOptions, Vocabulary};

fn main() {
    let path = std::env::args().nth(1).expect("usage: walk TOKENIZER_JSON");
    let json = std::fs::read_to_string(&path).expect("read tokenizer.json");
    let t = Instant::now();
    let v = Arc::new(Vocabulary::from_tokenizer_json(&json, None, None, &[]).expect("vocabulary"));
    println!(
        "vocabulary: {:?}, trie nodes {}",
        t.elapsed(),
        v.trie().num_nodes()
    );
    let mut row = vec![0u32; v.mask_words()];
    for pattern in [r#""([^"\\\x00-\x1f]|\\.)*""#, r"[0-9]+", r"(?s:.)*"] {
        let g =
            Arc::new(Grammar::from_regex(pattern, v.clone(), &GrammarOptions::default()).unwrap());
        let mut best = f64::MAX;
        for _ in 0..20 {
            let g2 = Arc::new(
                Grammar::from_regex(pattern, v.clone(), &GrammarOptions::default()).unwrap(),
            );
            let mut m = g2.matcher();
            if pattern.starts_with('"') {
                m.accept_token(1).ok();
            }
            let t = Instant::now();
            g2.fill_mask(m.state(), false, &mut row).unwrap();
            best = best.min(t.elapsed().as_secs_f64());
        }
        let m = g.matcher();
        g.fill_mask(m.state(), false, &mut row).unwrap();
        let t = Instant::now();
        for _ in 0..1000 {
            g.fill_mask(m.state(), false, &mut row).unwrap();
        }
        let cached = t.elapsed().as_secs_f64() / 1000.0;
        println!(
            "{pattern:40} first walk (best of 20, incl. compile) {:8.1} us, cached {:6.2} us",
            best * 1e6,
            cached * 1e6
        );
    }
}

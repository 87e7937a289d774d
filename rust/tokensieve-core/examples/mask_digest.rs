//! Digest of the masks along seeded random walks over many JSON Schemas, for checking that a
//! change to the schema compiler leaves every mask byte-identical:
//!
//! ```text
//! zcat ../shared/data/jsonschemabench-dev.jsonl.gz > /tmp/dev.jsonl
//! cargo run --release -p tokensieve-core --example mask_digest -- \
//!     path/to/llama3/tokenizer.json /tmp/dev.jsonl [EVERY] > before.txt
//! # change the compiler, run again into after.txt, then: cmp before.txt after.txt
//! ```
//!
//! Input: one JSON object per line with a `schema` field (a schema object, or JSON text of
//! one). Every `EVERY`-th line (default 7, starting with line 0) is compiled with the default
//! options. For a schema that compiles, two walks of up to 48 tokens are made, each with its own
//! xorshift generator seeded by the line index and the walk number: at each step the mask is
//! filled, hashed (FNV-1a over its 32-bit words) and printed as `index walk step hash`; then a
//! random allowed token other than EOS is taken. A walk stops when only EOS is allowed (or
//! nothing). A schema that fails prints `index ERR <error>` (the error's debug form: its kind
//! and message on one line).
use std::io::{BufRead, Write};
use std::sync::Arc;

use tokensieve_core::{Grammar, GrammarOptions, JsonSchemaOptions, Vocabulary};

const WALKS: u64 = 2;
const STEPS: u32 = 48;

struct XorShift(u64);

impl XorShift {
    fn new(index: u64, walk: u64) -> XorShift {
        // splitmix64 of the seed, so that neighbouring seeds start far apart; never zero
        let mut z = index
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(walk.wrapping_mul(0xBF58_476D_1CE4_E5B9))
            .wrapping_add(1);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        XorShift(z | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

fn fnv(words: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in words {
        for b in w.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
    h
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: mask_digest TOKENIZER_JSON SCHEMAS_JSONL [EVERY]";
    let tok = args.next().expect(usage);
    let data = args.next().expect(usage);
    let every: usize = args.next().map_or(7, |s| s.parse().expect(usage));
    let json = std::fs::read_to_string(&tok).expect("read tokenizer.json");
    let vocab =
        Arc::new(Vocabulary::from_tokenizer_json(&json, None, None, &[]).expect("vocabulary"));
    let file = std::fs::File::open(&data).expect("open the schema lines");
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let mut row = vec![0u32; vocab.mask_words()];
    for (index, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.expect("read a line");
        if index % every != 0 || line.trim().is_empty() {
            continue;
        }
        let rec: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        let schema = match &rec["schema"] {
            serde_json::Value::String(text) => serde_json::from_str(text).expect("schema text"),
            v => v.clone(),
        };
        let grammar = match Grammar::from_json_schema(
            &schema,
            vocab.clone(),
            &JsonSchemaOptions::default(),
            &GrammarOptions::default(),
        ) {
            Ok(g) => Arc::new(g),
            Err(e) => {
                writeln!(out, "{index} ERR {e:?}").expect("write");
                continue;
            }
        };
        for walk in 0..WALKS {
            let mut rng = XorShift::new(index as u64, walk);
            let mut m = grammar.matcher();
            for step in 0..STEPS {
                let res = grammar.fill_mask(m.state(), m.is_finished(), &mut row);
                if let Err(e) = res {
                    writeln!(out, "{index} {walk} {step} ERR {e:?}").expect("write");
                    break;
                }
                writeln!(out, "{index} {walk} {step} {:016x}", fnv(&row)).expect("write");
                let allowed: Vec<u32> = (0..vocab.vocab_size() as u32)
                    .filter(|&t| row[(t >> 5) as usize] >> (t & 31) & 1 == 1 && !vocab.is_eos(t))
                    .collect();
                if allowed.is_empty() {
                    break;
                }
                let t = allowed[(rng.next() % allowed.len() as u64) as usize];
                if let Err(e) = m.accept_token(t) {
                    writeln!(out, "{index} {walk} {step} ERR {e:?}").expect("write");
                    break;
                }
            }
        }
    }
}

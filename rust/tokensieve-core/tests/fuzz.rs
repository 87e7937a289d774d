//! Bounded fuzzing that runs under `cargo test`: random regexes, random JSON Schema texts and
//! corrupted index files, each compiled or loaded for a small vocabulary and walked.
//!
//! Every input must end in `Ok` or a typed `Error` — never a panic, an abort or a compile past
//! its deadline. Inputs that compile are walked token by token, and each step is checked:
//! * the mask and `accept_token` agree on every token (the vocabulary is small: all of them);
//! * for regexes, EOS is allowed exactly when the bytes so far fully match the pattern by the
//!   `regex` crate (the same syntax, an independent matcher);
//! * for schemas, a finished output is one JSON document.
//!
//! The seed is fixed, so a run is reproducible; `TOKENSIEVE_FUZZ_CASES` (default 300 per
//! target) and `TOKENSIEVE_FUZZ_SEED` run more or other cases.

use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use tokensieve_core::{serialize, Error, Grammar, GrammarOptions, JsonSchemaOptions, Vocabulary};

const EOS: u32 = 0;

/// Walk steps checked so far (reported by each target).
static STEPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cases() -> usize {
    env_u64("TOKENSIEVE_FUZZ_CASES", 300) as usize
}

fn runner(salt: u8) -> TestRunner {
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&env_u64("TOKENSIEVE_FUZZ_SEED", 0x7453_6965_7665).to_le_bytes());
    seed[8] = salt;
    let config = Config {
        cases: cases() as u32,
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed))
}

/// EOS, every printable ASCII byte, newline, and tokens that cross UTF-8 and JSON boundaries.
fn vocab() -> Arc<Vocabulary> {
    let mut tokens: Vec<Vec<u8>> = vec![b"</s>".to_vec()];
    tokens.extend((0x20u8..0x7F).map(|b| vec![b]));
    for t in [
        "\n",
        "ab",
        "abc",
        "12",
        "-1",
        "0.5",
        "e+",
        "\u{e9}",
        "\u{3b1}",
        "\u{1F600}",
        "\"a",
        "\":",
        "\",\"",
        "{\"",
        "\"}",
        "[1",
        ",2]",
        "true",
        "null",
        "fa",
        "lse",
        " \"",
        "\\u00",
        "\\n",
    ] {
        tokens.push(t.as_bytes().to_vec());
    }
    tokens.push(vec![0xC3]); // half of a two-byte character
    tokens.push(vec![0xA9]);
    Arc::new(Vocabulary::new(tokens, vec![EOS], vec![], None).expect("vocabulary"))
}

fn options() -> GrammarOptions {
    let mut o = GrammarOptions::default();
    o.set("max_states", "20000").unwrap();
    o.set("max_nfa_bytes", &(8 << 20).to_string()).unwrap();
    o.set("max_compile_seconds", "2").unwrap();
    o
}

/// A compile ends by its deadline (with slack for one check interval and a loaded machine).
fn timed<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, TestCaseError> {
    let t = Instant::now();
    let out = f();
    let took = t.elapsed();
    if took > Duration::from_secs(10) {
        return Err(TestCaseError::fail(format!("{what} took {took:?}")));
    }
    Ok(out)
}

fn bit(row: &[u32], t: u32) -> bool {
    row[(t / 32) as usize] >> (t % 32) & 1 == 1
}

/// Walk `g` for up to `steps` tokens, choosing by `picks`; checks mask/accept agreement at every
/// step and calls `at_step(bytes so far, EOS allowed)`. Returns the bytes of a finished output.
fn walk(
    g: &Arc<Grammar>,
    picks: &[u16],
    steps: usize,
    mut at_step: impl FnMut(&[u8], bool) -> Result<(), TestCaseError>,
) -> Result<Option<Vec<u8>>, TestCaseError> {
    let v = g.vocab().clone();
    let mut m = g.matcher();
    let mut text: Vec<u8> = Vec::new();
    let mut row = vec![0u32; v.mask_words()];
    for k in 0..steps {
        match m.fill_next_token_bitmask(&mut row) {
            Ok(()) => {}
            Err(Error::Unspellable { .. } | Error::Budget(_)) => return Ok(None),
            Err(e) => return Err(TestCaseError::fail(format!("fill: {e}"))),
        }
        at_step(&text, bit(&row, EOS))?;
        STEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut allowed = Vec::new();
        for t in 0..v.vocab_size() as u32 {
            let mut probe = m.clone();
            let took = match probe.accept_token(t) {
                Ok(b) => b,
                Err(Error::Budget(_)) => return Ok(None),
                Err(e) => return Err(TestCaseError::fail(format!("accept_token: {e}"))),
            };
            prop_assert_eq!(took, bit(&row, t), "token {} after {:?}", t, text);
            if took {
                allowed.push(t);
            }
        }
        if allowed.is_empty() {
            return Err(TestCaseError::fail(format!("empty mask after {text:?}")));
        }
        // end (EOS) one time in eight when going on is possible, so walks get long
        let pick = picks.get(k).copied().unwrap_or(0) as usize;
        let go_on: Vec<u32> = allowed.iter().copied().filter(|&t| t != EOS).collect();
        let t = if !go_on.is_empty() && (!pick.is_multiple_of(8) || !bit(&row, EOS)) {
            go_on[(pick / 8) % go_on.len()]
        } else {
            allowed[pick % allowed.len()]
        };
        prop_assert!(m.accept_token(t).unwrap_or(false));
        if t == EOS {
            return Ok(Some(text));
        }
        text.extend_from_slice(v.token_bytes(t).unwrap_or_default());
    }
    Ok(None)
}

// ---- regexes ---------------------------------------------------------------------------------

fn regex_strategy() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        8 => proptest::sample::select(vec![
            "a", "b", "1", "\u{e9}", "\u{3b1}", "\"", "\\{", " ", "\\n", "\\.", "-", "x",
        ])
        .prop_map(String::from),
        4 => proptest::sample::select(vec![
            "[a-c]", "[^a]", "\\d", "\\w", "\\s", "\\p{L}", "\\p{Greek}", ".", "[\u{e0}-\u{fc}]",
            "\\x41", "\\u{1F600}", "[0-9a-f]", "(?i:ab)", "\\S", "[[:alpha:]]",
        ])
        .prop_map(String::from),
        1 => proptest::sample::select(vec![
            "^", "$", "\\A", "\\z", "\\b", "(?=a)", "\\1", "(?m)^", "[", ")", "a{2,1}", "\\p{Nope}",
        ])
        .prop_map(String::from),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 2..4).prop_map(|v| v.concat()),
            prop::collection::vec(inner.clone(), 2..4).prop_map(|v| format!("(?:{})", v.join("|"))),
            inner.clone().prop_map(|x| format!("({x})")),
            (inner.clone(), 0..4usize)
                .prop_map(|(x, k)| format!("(?:{x}){}", ["*", "+", "?", "*?"][k])),
            (inner, 0u32..5, 0u32..5).prop_map(|(x, a, b)| format!(
                "(?:{x}){{{},{}}}",
                a.min(b),
                a.max(b)
            )),
        ]
    })
}

#[test]
fn fuzz_regex_compile_and_walk() {
    let v = vocab();
    let opts = options();
    let compiled = std::cell::Cell::new(0usize);
    runner(1)
        .run(
            &(regex_strategy(), prop::collection::vec(any::<u16>(), 12)),
            |(pattern, picks)| {
                let g = timed(&pattern, || Grammar::from_regex(&pattern, v.clone(), &opts))?;
                let Ok(g) = g else { return Ok(()) };
                compiled.set(compiled.get() + 1);
                let g = Arc::new(g);
                let oracle = regex::bytes::Regex::new(&format!("^(?:{pattern})$")).ok();
                walk(&g, &picks, 12, |text, eos| {
                    if let Some(re) = &oracle {
                        prop_assert_eq!(
                            eos,
                            re.is_match(text),
                            "EOS allowed vs full match of {:?} on {:?}",
                            pattern,
                            String::from_utf8_lossy(text)
                        );
                    }
                    Ok(())
                })?;
                Ok(())
            },
        )
        .unwrap();
    let n = compiled.get();
    eprintln!(
        "regexes: {} cases, {n} compiled; walk steps so far {:?}",
        cases(),
        STEPS
    );
    assert!(
        n * 5 >= cases(),
        "only {n} regexes compiled: the generator is too hostile"
    );
}

// ---- JSON Schema texts -----------------------------------------------------------------------

fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        proptest::sample::select(vec![
            "0",
            "-1",
            "3",
            "2.5",
            "1e400",
            "-0",
            "18446744073709551617",
            "1e-5",
            "true",
            "false",
            "null",
            "\"a\"",
            "\"\"",
            "\"string\"",
            "\"integer\"",
            "\"number\"",
            "\"object\"",
            "\"array\"",
            "\"boolean\"",
            "\"null\"",
            "\"#/$defs/a\"",
            "\"#\"",
            "\"^a+$\"",
            "\"date-time\"",
            "\"email\"",
            "\"x-ts-notIn\"",
            "{}",
            "[]",
        ])
        .prop_map(String::from),
        (0i64..20).prop_map(|n| n.to_string()),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((keyword(), inner), 0..5).prop_map(|kv| {
                let body: Vec<String> = kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", body.join(","))
            }),
        ]
    })
}

/// A schema object: keywords with random values (sub-schemas, numbers, names, lists).
fn schema_text() -> impl Strategy<Value = String> {
    prop::collection::vec((keyword(), json_value()), 0..5).prop_map(|kv| {
        let body: Vec<String> = kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", body.join(","))
    })
}

fn keyword() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(vec![
        "type",
        "properties",
        "required",
        "items",
        "prefixItems",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "$ref",
        "$defs",
        "a",
        "additionalProperties",
        "minItems",
        "maxItems",
        "uniqueItems",
        "if",
        "then",
        "else",
        "patternProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "contains",
        "dependentRequired",
        "unevaluatedProperties",
        "nullable",
        "x-ts-notIn",
        "$id",
        "$anchor",
    ])
}

#[test]
fn fuzz_schema_compile_and_walk() {
    let v = vocab();
    let opts = options();
    let mut so = JsonSchemaOptions::default();
    so.set("max_nesting_depth", "2").unwrap();
    let compiled = std::cell::Cell::new(0usize);
    runner(2)
        .run(
            &(schema_text(), prop::collection::vec(any::<u16>(), 24)),
            |(text, picks)| {
                let Ok(schema) = tokensieve_core::json_schema::parse_text("schema", &text) else {
                    return Ok(());
                };
                let g = timed(&text, || {
                    Grammar::from_json_schema(&schema, v.clone(), &so, &opts)
                })?;
                let Ok(g) = g else { return Ok(()) };
                compiled.set(compiled.get() + 1);
                let g = Arc::new(g);
                if let Some(out) = walk(&g, &picks, 24, |_, _| Ok(()))? {
                    let parsed = serde_json::from_slice::<serde_json::Value>(&out);
                    prop_assert!(
                        parsed.is_ok(),
                        "schema {} produced {:?}, not one JSON document",
                        text,
                        String::from_utf8_lossy(&out)
                    );
                }
                Ok(())
            },
        )
        .unwrap();
    let n = compiled.get();
    eprintln!(
        "schemas: {} cases, {n} compiled; walk steps so far {:?}",
        cases(),
        STEPS
    );
    assert!(
        n * 5 >= cases(),
        "only {n} schemas compiled: the generator is too hostile"
    );
}

// ---- index files -----------------------------------------------------------------------------

#[test]
fn fuzz_index_file_load() {
    let v = vocab();
    let opts = options();
    let mut files = Vec::new();
    let g = Grammar::from_regex("(ab|[0-9]+)\u{e9}?", v.clone(), &opts).unwrap();
    files.push(serialize::save(&g).unwrap());
    let schema = serde_json::json!({"type": "object", "properties": {"a": {"enum": [1, "x"]}}});
    // any value below the object nests 3 levels: a complete automaton of a few hundred states
    let shallow = JsonSchemaOptions {
        max_nesting_depth: 3,
        ..Default::default()
    };
    let g = Grammar::from_json_schema(&schema, v.clone(), &shallow, &opts).unwrap();
    g.precompute().unwrap();
    files.push(serialize::save(&g).unwrap());
    for f in &files {
        assert!(
            serialize::load(f, v.clone()).is_ok(),
            "an intact file loads"
        );
    }
    let edit = (
        0usize..2,
        0usize..4,
        any::<usize>(),
        any::<u8>(),
        1usize..64,
    );
    runner(3)
        .run(
            &(
                prop::collection::vec(edit, 1..4),
                prop::collection::vec(any::<u16>(), 8),
            ),
            |(edits, picks)| {
                let mut bytes = files[edits[0].0].clone();
                for &(_, kind, at, byte, len) in &edits {
                    let at = at % (bytes.len() + 1);
                    match kind {
                        0 if at < bytes.len() => bytes[at] ^= byte.max(1),
                        1 => bytes.truncate(at),
                        2 => bytes
                            .splice(at..at, std::iter::repeat_n(byte, len))
                            .for_each(drop),
                        _ => {
                            let end = (at + len).min(bytes.len());
                            bytes.drain(at..end);
                        }
                    }
                }
                if let Ok(g) = serialize::load(&bytes, v.clone()) {
                    walk(&Arc::new(g), &picks, 8, |_, _| Ok(()))?;
                }
                Ok(())
            },
        )
        .unwrap();
}

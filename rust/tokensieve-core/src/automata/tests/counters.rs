//! Counters against copies: a large repetition compiled to a counter (one copy of its body, the
//! count kept by the lazy DFA) must have exactly the language of the same repetition copied once
//! per count, which is how every repetition was compiled before counters and how
//! [`crate::automata::hir::with_copies`] still compiles them.

use proptest::prelude::*;
use regex_syntax::hir::Hir;

use crate::automata::dfa::{LazyDfa, DEAD};
use crate::automata::expr::Expr;
use crate::automata::hir::{self, with_copies};
use crate::regex::RegexOptions;

/// `Err(input)` with an input on which the two automata disagree (acceptance or liveness), found
/// by a walk over every pair of states they reach on the same input, all 256 bytes at each step.
fn same_language(a: &LazyDfa, b: &LazyDfa) -> Result<usize, Vec<u8>> {
    let start = (a.start(), b.start());
    let mut seen = std::collections::HashSet::from([start]);
    let mut todo = vec![(start, Vec::<u8>::new())];
    let acc = |d: &LazyDfa, s: u32| s != DEAD && d.is_accepting(s);
    while let Some(((x, y), path)) = todo.pop() {
        if acc(a, x) != acc(b, y) || (x == DEAD) != (y == DEAD) {
            return Err(path);
        }
        if x == DEAD {
            continue;
        }
        for byte in 0..=255u8 {
            let next = (a.walk(x, &[byte]).unwrap(), b.walk(y, &[byte]).unwrap());
            if seen.insert(next) {
                let mut p = path.clone();
                p.push(byte);
                todo.push((next, p));
            }
        }
    }
    Ok(seen.len())
}

fn opts() -> RegexOptions {
    RegexOptions {
        max_states: 1_000_000,
        ..Default::default()
    }
}

fn check_expr(x: &Expr) {
    let counted = LazyDfa::from_expr("counted", x, &opts()).unwrap();
    let copied = with_copies(|| LazyDfa::from_expr("copied", x, &opts())).unwrap();
    if let Err(path) = same_language(&counted, &copied) {
        panic!(
            "counter and copies differ after {:?}",
            String::from_utf8_lossy(&path)
        );
    }
}

fn parse(p: &str) -> Hir {
    crate::regex::parse(p, 250).unwrap()
}

#[test]
fn regexes_with_large_repetitions() {
    for p in [
        "[a-c]{33,40}",
        "x(?:a|bc){0,35}y",
        "(?:a|aa){33,40}",
        "a{0,40}a{0,40}",
        "(?:a{33,35}|b{40}){1,3}",
        "(?:é|[x-z]){40}",
        "[0-9]{34,}",
        "(?:ab|[0-9]{2}){33}c?",
        "(?:[a-z]{40}-){2}",
        "\\A(?:q|rs){33,34}\\z",
    ] {
        let h = parse(p);
        assert!(hir::has_counter(&h), "{p} should count");
        check_expr(&Expr::Hir(h));
    }
}

#[test]
fn json_strings_with_length_bounds() {
    // every spelling of a character (escapes, surrogate pairs) is one count
    for (min, max) in [(0, Some(33)), (33, Some(33)), (35, Some(40)), (40, None)] {
        let body = hir::rep(crate::automata::spell::any_char(), min, max);
        let h = hir::concat(vec![hir::lit("\""), body, hir::lit("\"")]);
        assert!(hir::has_counter(&h));
        check_expr(&Expr::Hir(h));
    }
}

#[test]
fn schemas_with_large_counts() {
    let opts = crate::json_schema::JsonSchemaOptions::default();
    for s in [
        r#"{"type": "string", "maxLength": 40}"#,
        r#"{"type": ["string", "null"], "minLength": 34, "maxLength": 36}"#,
        r#"{"type": "string", "pattern": "^[a-f]+$", "maxLength": 38}"#,
        r#"{"type": "array", "items": {"enum": [1, "ab"]}, "minItems": 33, "maxItems": 36}"#,
        r#"{"type": "array", "items": {"type": "string", "maxLength": 35}, "maxItems": 2}"#,
        r#"{"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}},
            "required": ["a"], "additionalProperties": false}, "minItems": 34}"#,
        r#"{"type": "object", "properties": {"a": {"type": "string", "maxLength": 40},
            "b": {"type": "string", "maxLength": 33}}, "additionalProperties": false}"#,
    ] {
        let v: serde_json::Value = serde_json::from_str(s).unwrap();
        let c = crate::json_schema::compile(&v, &opts).unwrap();
        check_expr(&c.expr);
    }
}

#[test]
fn counted_weight_does_not_grow_with_the_bound() {
    let w = |n: u32| hir::weight(&hir::rep(crate::automata::spell::any_char(), 0, Some(n)));
    assert_eq!(w(1_000), w(u32::MAX));
    assert!(with_copies(|| w(1_000)) > 100 * w(1_000));
}

fn body() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "[a-c]", "a|bc", "é|[x-z]", "[0-9]{2}", "(?:ab)+", "a|aa", "[^\"]",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn counted_repetitions_match_copies(
        b in body(),
        min in 0u32..50,
        extra in prop::option::of(0u32..20),
        wrap in 0usize..4,
    ) {
        let max = extra.map(|e| (min + e).max(1));
        let bound = match max {
            Some(m) => format!("{{{min},{m}}}"),
            None => format!("{{{min},}}"),
        };
        let core = format!("(?:{b}){bound}");
        let p = match wrap {
            0 => core,
            1 => format!("x{core}y"),
            // a separator no body holds (otherwise the subsets are exponential either way)
            2 => format!("(?:{core}\"){{0,2}}"),
            _ => format!("{core}|a[0-9]"),
        };
        check_expr(&Expr::Hir(parse(&p)));
    }
}

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
pub(super) fn same_language(a: &LazyDfa, b: &LazyDfa) -> Result<usize, Vec<u8>> {
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

/// Every byte string over `alphabet` of at most `k` bytes.
fn strings(alphabet: &[u8], k: usize) -> Vec<Vec<u8>> {
    let mut out = vec![Vec::new()];
    let mut layer = vec![Vec::new()];
    for _ in 0..k {
        let mut next = Vec::new();
        for s in &layer {
            for &b in alphabet {
                let mut t: Vec<u8> = s.clone();
                t.push(b);
                next.push(t);
            }
        }
        out.extend(next.iter().cloned());
        layer = next;
    }
    out
}

/// Along seeded walks through counted automata, a state and its representative for tokens of
/// `k` bytes agree on acceptance and on which strings of at most `k` bytes stay live.
#[test]
fn representatives_agree_on_short_tokens() {
    let cases: [(&str, &[u8]); 5] = [
        ("(?:a|bc){40,60}\"", b"abc\""),
        ("x(?:a|aa){35,}y", b"axy"),
        ("[ab]{0,50}[ab]{0,40}c", b"abc"),
        ("(?:[ab]{45}-){0,3}", b"ab-"),
        ("a{33,34}(?:b{40})?", b"ab"),
    ];
    for (p, alphabet) in cases {
        let d = LazyDfa::new(p, &opts()).unwrap();
        representatives_agree(&d, p, alphabet, 0x9E37_79B9, 140);
    }
}

/// Along six seeded walks of up to `steps` bytes of `alphabet` through `d`, for k = 1, 3 and 4,
/// each state and its representative for tokens of `k` bytes agree on acceptance and on which
/// strings of at most `k` bytes stay live (`label` names the automaton in failures).
fn representatives_agree(d: &LazyDfa, label: &str, alphabet: &[u8], seed: u64, steps: usize) {
    for k in [1usize, 3, 4] {
        let tokens = strings(alphabet, k);
        let mut seed = seed ^ k as u64;
        for _walk in 0..6 {
            let mut s = d.start();
            for _step in 0..steps {
                let r = d.representative(s, k).unwrap();
                assert_eq!(d.is_accepting(s), d.is_accepting(r), "{label}: acceptance");
                for t in &tokens {
                    let (a, b) = (d.walk(s, t).unwrap(), d.walk(r, t).unwrap());
                    assert_eq!(a == DEAD, b == DEAD, "{label}, k={k}: {t:?}");
                }
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let live: Vec<u8> = alphabet
                    .iter()
                    .copied()
                    .filter(|&b| d.walk(s, &[b]).unwrap() != DEAD)
                    .collect();
                if live.is_empty() {
                    break;
                }
                s = d.walk(s, &[live[seed as usize % live.len()]]).unwrap();
            }
        }
    }
}

/// The index's masks inside a long counted string equal a brute force over the vocabulary at
/// every count of a walk (the middle of the string shares one mask).
#[test]
fn masks_of_counted_strings_match_brute_force() {
    use crate::index::TokenIndex;
    use crate::vocab::Vocabulary;
    let words = [
        "a", "b", "ab", "\"", "a\"", "abab", "\\n", "\\u00e9", "é", "bbbbb", "\"}",
    ];
    let mut toks: Vec<Vec<u8>> = words.iter().map(|w| w.as_bytes().to_vec()).collect();
    toks.push(b"<eos>".to_vec());
    let eos = (toks.len() - 1) as u32;
    let v = Vocabulary::new(toks, vec![eos], vec![], None).unwrap();
    for (min, max) in [
        (0, Some(70)),
        (36, Some(40)),
        (50, None),
        (0, Some(u32::MAX)),
    ] {
        let body = hir::rep(crate::automata::spell::any_char(), min, max);
        let h = hir::concat(vec![hir::lit("\""), body, hir::lit("\"}")]);
        let d = LazyDfa::from_hir("s", &h, &opts()).unwrap();
        let idx = TokenIndex::new(1 << 20);
        let mut s = d.start();
        for step in 0..90 {
            let m = idx.mask(&v, &d, s).unwrap();
            for t in 0..v.vocab_size() as u32 {
                let want = if v.is_eos(t) {
                    d.is_accepting(s)
                } else {
                    let b = v.token_bytes(t).unwrap_or(&[]);
                    !b.is_empty() && d.walk(s, b).unwrap() != DEAD
                };
                let got = m[(t >> 5) as usize] >> (t & 31) & 1 == 1;
                assert_eq!(got, want, "({min}, {max:?}) step {step} token {t}");
            }
            // one character per step ("a", then "é", alternating), stopping before the end
            let c: &[u8] = if step % 2 == 0 { b"a" } else { "é".as_bytes() };
            let next = d.walk(s, c).unwrap();
            if next == DEAD {
                break;
            }
            s = next;
        }
    }
}

/// A schema string under a format or pattern and length bounds past the counting threshold
/// (a character automaton with a counter beside it, see `expr::counted_char_dfa`) has exactly the
/// language of the product automaton built when nothing counts, dead states included; a
/// language whose completion lengths never settle (even lengths) is built as the product.
#[test]
fn sized_strings_match_products() {
    let opts = crate::json_schema::JsonSchemaOptions::default();
    let sized = |x: &Expr| {
        let mut found = false;
        fn visit(x: &Expr, found: &mut bool) {
            if let Expr::CharDfa(d) = x {
                *found |= d.len.is_some();
            }
            x.for_each_child(&mut |c| visit(c, found));
        }
        visit(x, &mut found);
        found
    };
    for (s, counted) in [
        (
            r#"{"type": "string", "format": "uri", "maxLength": 40}"#,
            true,
        ),
        (
            r#"{"type": "string", "format": "uri", "minLength": 36, "maxLength": 44}"#,
            true,
        ),
        (
            r#"{"type": "string", "format": "email", "minLength": 33, "maxLength": 38}"#,
            true,
        ),
        (
            r#"{"type": "string", "format": "hostname", "minLength": 34}"#,
            true,
        ),
        // completion lengths with gaps: `Z`, `+hh:mm`, `.d…`
        (
            r#"{"type": "string", "format": "date-time", "maxLength": 34}"#,
            true,
        ),
        (
            r#"{"type": "string", "format": "date-time", "minLength": 25, "maxLength": 33}"#,
            true,
        ),
        (
            r#"{"type": "string", "pattern": "^[a-z]+-[0-9]{3}$", "maxLength": 37}"#,
            true,
        ),
        (
            r#"{"type": "string", "pattern": "^(?:ab)+c?$", "minLength": 33, "maxLength": 36}"#,
            true,
        ),
        (
            r#"{"type": "string", "pattern": "^[^x]+x$", "minLength": 34, "maxLength": 36}"#,
            true,
        ),
        // some non-ASCII characters but not all (each range read apart), and `\s`
        (
            r#"{"type": "string", "pattern": "^[é-ü]+x$", "minLength": 34, "maxLength": 36}"#,
            true,
        ),
        (
            r#"{"type": "string", "pattern": "^(?:\\S+\\s){0,3}\\S+$", "minLength": 33, "maxLength": 35}"#,
            true,
        ),
        (
            r#"{"type": "string", "pattern": "^a*(?:bcd)?$", "maxLength": 35}"#,
            true,
        ),
        (
            r#"{"type": "string", "pattern": "^https", "format": "uri", "maxLength": 36}"#,
            true,
        ),
        (
            r#"{"type": "string", "maxLength": 34, "not": {"pattern": "^a"}}"#,
            true,
        ),
        (
            r#"{"type": "string", "maxLength": 33, "not": {"enum": ["abc", "abd"]}}"#,
            true,
        ),
        (
            r#"{"type": ["string", "null"], "format": "uuid", "maxLength": 35}"#,
            false,
        ),
        (
            r#"{"type": "string", "pattern": "^(?:ab)+$", "maxLength": 40}"#,
            false,
        ),
        (
            r#"{"type": "object", "properties": {"a": {"type": "string", "format": "email",
            "maxLength": 34}, "b": {"type": "string", "pattern": "^[0-9]+x$", "minLength": 33}},
            "additionalProperties": false}"#,
            true,
        ),
    ] {
        let v: serde_json::Value = serde_json::from_str(s).unwrap();
        let c = crate::json_schema::compile(&v, &opts).unwrap();
        assert_eq!(sized(&c.expr), counted, "{s}");
        let product = with_copies(|| crate::json_schema::compile(&v, &opts)).unwrap();
        assert!(!sized(&product.expr), "{s}");
        let a = LazyDfa::from_expr("sized", &c.expr, &opts_big()).unwrap();
        let b = with_copies(|| LazyDfa::from_expr("product", &product.expr, &opts_big())).unwrap();
        if let Err(path) = same_language(&a, &b) {
            panic!("{s}: differ after {:?}", String::from_utf8_lossy(&path));
        }
    }
}

fn opts_big() -> RegexOptions {
    RegexOptions {
        max_states: 4_000_000,
        ..Default::default()
    }
}

/// In a sized string, a state and its representative for tokens of `k` bytes agree on which
/// short strings stay live (completions of up to the region's settling length differ by state).
#[test]
fn sized_representatives_agree_on_short_tokens() {
    let opts = crate::json_schema::JsonSchemaOptions::default();
    for (s, alphabet) in [
        (
            r#"{"type": "string", "pattern": "^a*(?:bcd)?$", "minLength": 40, "maxLength": 70}"#,
            &b"abcd\""[..],
        ),
        (
            r#"{"type": "string", "pattern": "^[ab]*(?:c[ab]{3})?$", "maxLength": 60}"#,
            &b"abc\""[..],
        ),
    ] {
        let v: serde_json::Value = serde_json::from_str(s).unwrap();
        let c = crate::json_schema::compile(&v, &opts).unwrap();
        let d = LazyDfa::from_expr("sized", &c.expr, &opts_big()).unwrap();
        representatives_agree(&d, s, alphabet, 0x2545_F491, 90);
    }
}

/// Large length bounds beside a format compile without a product automaton, and count exactly.
#[test]
fn sized_strings_with_large_bounds() {
    let opts = crate::json_schema::JsonSchemaOptions::default();
    for max in [1_000u32, 65_535, u32::MAX >> 1] {
        let s = format!(r#"{{"type": "string", "format": "uri", "maxLength": {max}}}"#);
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        let c = crate::json_schema::compile(&v, &opts).unwrap();
        let d = LazyDfa::from_expr("uri", &c.expr, &opts_big()).unwrap();
        let accepts = |n: usize| {
            let text = format!("\"http://a.b/{}\"", "x".repeat(n));
            let s = d.walk(d.start(), text.as_bytes()).unwrap();
            s != DEAD && d.is_accepting(s)
        };
        // `http://a.b/` is 11 characters
        assert!(accepts(0) && accepts(989), "{max}");
        assert_eq!(accepts(990), max > 1_000, "{max}");
        // the last character that fits must end the string: a state past it is dead
        let text = format!("\"http://a.b/{}", "x".repeat(989));
        let at_max = d.walk(d.start(), text.as_bytes()).unwrap();
        assert_eq!(d.walk(at_max, b"x").unwrap() == DEAD, max == 1_000, "{max}");
    }
}

//! Tests of `const`/`enum`, numbers and strings (lengths, patterns, formats, spellings).

use serde_json::json;

use super::*;

#[test]
fn const_and_enum() {
    check(
        json!({"const": 1}),
        &["1", "1.0", "1.00"],
        &["2", "1e0", "01"],
    );
    check(json!({"const": 1.5}), &["1.5", "1.50"], &["1.51"]);
    // strings written in the schema: as written (json.dumps, with or without ensure_ascii)
    check(
        json!({"const": "a/é"}),
        &[r#""a/é""#, r#""a/\u00e9""#],
        &[
            r#""a/E""#,
            r#""a/\u00C9""#,
            r#""a\/\u00e9""#,
            r#""\u0061/\u00E9""#,
            r#""a/\u00E9""#,
        ],
    );
    // every spelling with literal_spelling = "any"
    let any = JsonSchemaOptions {
        literal_spelling: Spelling::Any,
        ..Default::default()
    };
    let r = lang_with(json!({"const": "a/é"}), &any);
    for t in [r#""a/é""#, r#""a\/\u00e9""#, r#""\u0061/\u00E9""#] {
        assert!(r.is_match(t), "{t}");
    }
    assert!(!r.is_match(r#""a/\u00C9""#));
    check(
        json!({"enum": ["x", 2, null, [1, "y"], {"k": false}]}),
        &[
            r#""x""#,
            "2",
            "null",
            r#"[1, "y"]"#,
            r#"[1,"y"]"#,
            r#"{"k": false}"#,
        ],
        &[r#""y""#, "3", "[1]", r#"{"k":true}"#],
    );
    check(
        json!({"type": "string", "enum": ["a", 1]}),
        &[r#""a""#],
        &["1"],
    );
    check(
        json!({"enum": ["ab", "abc"], "maxLength": 2}),
        &[r#""ab""#],
        &[r#""abc""#],
    );
    check(json!({"enum": [1, 5], "minimum": 2}), &["5"], &["1"]);
}

#[test]
fn strings() {
    check(
        json!({"type": "string", "minLength": 2, "maxLength": 3}),
        &[
            r#""ab""#,
            r#""a\nb""#,
            r#""\u00e9\u00E9\"""#,
            r#""😀😀""#,
            r#""\ud83d\ude00x""#,
        ],
        &[r#""a""#, r#""abcd""#, r#""\q""#, "\"a\u{1}\""],
    );
    check(
        json!({"type": "string", "pattern": "^[a-c]+$", "maxLength": 2}),
        &[r#""ab""#, r#""\u0061""#],
        &[r#""abc""#, r#""""#, r#""ad""#],
    );
    check(
        json!({"type": "string", "pattern": "b"}),
        &[r#""abc""#, r#""b""#],
        &[r#""ac""#],
    );
    check(
        json!({"type": "string", "pattern": "^\\d{2}$"}),
        &[r#""12""#],
        &[r#""1a""#],
    );
    check(
        json!({"type": "string", "format": "date"}),
        &[r#""2024-02-29""#],
        &[r#""2023-02-29""#, r#""2024-1-1""#],
    );
    check(
        json!({"type": "string", "format": "ipv4"}),
        &[r#""10.0.0.255""#],
        &[r#""256.1.1.1""#],
    );
    check(
        json!({"type": "string", "format": "uuid"}),
        &[r#""123e4567-e89b-12d3-a456-426614174000""#],
        &[r#""123e4567""#],
    );
    check(
        json!({"type": "string", "format": "no-such-format"}),
        &[r#""x""#],
        &["1"],
    );
    let ann = JsonSchemaOptions {
        formats: Formats::Annotate,
        ..Default::default()
    };
    assert!(lang_with(json!({"type": "string", "format": "date"}), &ann).is_match(r#""nope""#));
    let (k, p) = schema_err(
        json!({"properties": {"x": {"type": "string", "pattern": "(?=a)"}}}),
        &JsonSchemaOptions::default(),
    );
    assert_eq!((k.as_str(), p.as_str()), ("pattern", "/properties/x"));
    // a large bound stays linear
    let c = compile(
        &json!({"type": "string", "maxLength": 5000}),
        &JsonSchemaOptions::default(),
    );
    assert!(c.is_ok());
}

#[test]
fn numbers() {
    check(
        json!({"type": "integer", "minimum": -5, "exclusiveMaximum": 100}),
        &["-5", "0", "-0", "99"],
        &["-6", "100", "1000"],
    );
    check(
        json!({"type": "integer", "minimum": 3, "exclusiveMinimum": true, "maximum": 7}),
        &["4", "7"],
        &["3", "8"],
    );
    check(
        json!({"type": "number", "minimum": 0.5, "maximum": 2}),
        &["0.5", "1", "1.999", "2", "2.000"],
        &["0.49", "2.001", "-1", "1e0"],
    );
    check(
        json!({"type": "number", "multipleOf": 3}),
        &["0", "3", "-9", "3.0", "300"],
        &["1", "3.5", "3e0", "10"],
    );
    check(
        json!({"type": "number", "multipleOf": 0.25, "minimum": 0, "maximum": 1}),
        &["0", "0.25", "0.5", "0.750", "1"],
        &["0.1", "1.25", "-0.25"],
    );
    // allOf: the least common multiple; not: the other numbers
    check(
        json!({"type": "integer", "allOf": [{"multipleOf": 4}, {"multipleOf": 6}]}),
        &["12", "24", "0"],
        &["4", "6", "8"],
    );
    check(
        json!({"type": "integer", "not": {"multipleOf": 2}}),
        &["1", "-3", "7"],
        &["0", "2", "-4"],
    );
    let (k, _) = schema_err(
        json!({"type": "number", "multipleOf": 1234567.89}),
        &JsonSchemaOptions::default(),
    );
    assert_eq!(k, "multipleOf");
}

/// A union of terms (`allOf` over `anyOf`s) where some terms' divisors are refused together is
/// refused before any other term's remainder automaton is built; `lenient` still builds them
/// all and ignores the refused `multipleOf` only.
#[test]
fn a_refused_divisor_term_is_found_before_the_others_are_built() {
    use crate::json_schema::multiple::SPELLED_ASKED;
    // terms 33 or 77, ¬6 or 44, ¬11 or 13, ¬429: common moduli 858, 1716 and 6006 are taken,
    // 77 with 44 and 429 needs 12012 (over 4 digits): refused
    let schema = json!({"type": "integer", "allOf": [
        {"anyOf": [{"multipleOf": 33}, {"multipleOf": 77}]},
        {"anyOf": [{"not": {"multipleOf": 6}}, {"multipleOf": 44}]},
        {"anyOf": [{"not": {"multipleOf": 11}}, {"multipleOf": 13}]},
        {"not": {"multipleOf": 429}}
    ]});
    SPELLED_ASKED.with(|n| n.set(0));
    let (k, _) = schema_err(schema.clone(), &JsonSchemaOptions::default());
    assert_eq!(k, "multipleOf");
    assert_eq!(
        SPELLED_ASKED.with(|n| n.get()),
        1,
        "only the refused term was asked"
    );
    let lenient = JsonSchemaOptions {
        lenient: true,
        ..Default::default()
    };
    SPELLED_ASKED.with(|n| n.set(0));
    let c = compile(&schema, &lenient).unwrap();
    assert!(SPELLED_ASKED.with(|n| n.get()) >= 4);
    assert!(
        c.warnings.iter().any(|w| w.contains("multipleOf")),
        "{:?}",
        c.warnings
    );
    // a superset: the refused term's numbers without its divisors (every integer), and the
    // taken terms' numbers (77 and 13 but not 6 or 429: 1001)
    let r = Re::new(&c.expr);
    for t in ["1", "1001", "-4004"] {
        assert!(r.is_match(t), "{t}");
    }
}

#[test]
fn unknown_keywords_beside_enum_are_ignored() {
    let c = compile(
        &json!({"enum": ["a", "b"], "readonly": true}),
        &JsonSchemaOptions::default(),
    )
    .unwrap();
    assert!(
        c.warnings.iter().any(|w| w.contains("readonly")),
        "{:?}",
        c.warnings
    );
    let r = Re::new(&c.expr);
    assert!(r.is_match(r#""a""#) && !r.is_match(r#""c""#));
}

#[test]
fn any_char_matches_spell_class() {
    use crate::automata::spell::{any_char, spell_class};
    use crate::json_schema::test_util::Re;
    let a = Re::new(&any_char());
    let b = Re::new(&spell_class(&[(0, 0xD7FF), (0xE000, 0x10FFFF)]));
    let mut samples: Vec<String> = Vec::new();
    for c in [
        0u32, 0x1f, 0x20, 0x21, 0x22, 0x5c, 0x2f, 0x7f, 0xe9, 0xd7ff, 0xe000, 0xfffd, 0x1f600,
        0x10ffff,
    ] {
        if let Some(ch) = char::from_u32(c) {
            samples.push(ch.to_string());
        }
        samples.push(format!("\\u{c:04x}"));
        samples.push(format!("\\u{c:04X}"));
    }
    for e in [
        "\\\"",
        "\\\\",
        "\\/",
        "\\b",
        "\\f",
        "\\n",
        "\\r",
        "\\t",
        "\\a",
        "\\ud800",
        "\\udc00",
        "\\ud83d\\ude00",
        "\\uD83D\\uDE00",
        "\\ud83d\\u0041",
        "\\ue000",
        "\\uDbFf\\udFfF",
        "\\u12",
        "\"",
    ] {
        samples.push(e.to_string());
    }
    for c in 0..=0xFFFFu32 {
        samples.push(format!("\\u{c:04x}"));
        samples.push(format!("\\u{c:04X}"));
    }
    for c in (0..=0x10FFFFu32).step_by(97) {
        if let Some(ch) = char::from_u32(c) {
            samples.push(ch.to_string());
        }
    }
    for s in &samples {
        assert_eq!(a.is_match(s), b.is_match(s), "{s:?}");
    }
    // exactly, over all bytes; `encode` spells a class of every character as `any_char()`
    let all = spell_class(&[(0, 0xD7FF), (0xE000, 0x10FFFF)]);
    super::test_util::assert_same_language(&any_char(), &all);
    let dot = regex_syntax::hir::Hir::class(regex_syntax::hir::Class::Unicode(
        regex_syntax::hir::ClassUnicode::new([regex_syntax::hir::ClassUnicodeRange::new(
            '\0',
            '\u{10FFFF}',
        )]),
    ));
    super::test_util::assert_same_language(&crate::automata::spell::encode(&dot).unwrap(), &all);
}

#[test]
fn string_constraints_combined() {
    // pattern with length bounds the pattern does not fix
    check(
        json!({"type": "string", "pattern": "^a[0-9]*$", "maxLength": 3}),
        &[r#""a""#, r#""a12""#],
        &[r#""a123""#, r#""b1""#],
    );
    // two patterns (allOf), and a format with a pattern
    check(
        json!({"allOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"pattern": "x"}]}),
        &[r#""axb""#, r#""x""#],
        &[r#""ab""#, r#""aXb""#],
    );
    check(
        json!({"type": "string", "format": "date", "pattern": "^2024-"}),
        &[r#""2024-02-29""#],
        &[r#""2023-02-28""#, r#""2024-02-30""#],
    );
    // negated pattern and negated names together with other constraints
    check(
        json!({"type": "string", "minLength": 2, "not": {"pattern": "^x"}}),
        &[r#""ab""#, r#""yx""#],
        &[r#""xa""#, r#""a""#],
    );
    check(
        json!({"type": "string", "maxLength": 2, "not": {"enum": ["ab", "c"]}}),
        &[r#""a""#, r#""ba""#, r#""""#],
        &[r#""ab""#, r#""c""#, r#""abc""#, r#""\u0063""#],
    );
}

#[test]
fn non_integers_with_bounds() {
    check(
        json!({"oneOf": [{"type": "integer"}, {"minimum": 2}]}),
        &["1", "2.5", "-7"],
        &["3", "2", "1.5"],
    );
}

#[test]
fn spell_not_equals_the_spelled_complement() {
    use crate::automata::spell::{spell_class, spell_not};
    let mut samples: Vec<String> = Vec::new();
    for v in 0..=0xFFFFu32 {
        samples.push(format!("\\u{v:04x}"));
        samples.push(format!("\\u{v:04X}"));
    }
    for c in (0u32..0x200).chain([0xD7FF, 0xE000, 0xFFFF, 0x1F600]) {
        if let Some(ch) = char::from_u32(c) {
            samples.push(ch.to_string());
        }
    }
    for e in [
        "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\x", "\\",
    ] {
        samples.push(e.to_string());
    }
    for p in [
        "\\ud83d\\ude00",
        "\\uD800\\uDC00",
        "\\udbff\\udfff",
        "\\ud800",
        "\\udc00\\ud800",
        "\\ud800\\u0041",
    ] {
        samples.push(p.to_string());
    }
    let sets: Vec<Vec<char>> = vec![
        vec![],
        vec!['a'],
        vec!['S', 'T'],
        vec!['"', '\\', '\n', '/'],
        vec!['\u{D000}', '\u{D7FF}', '\u{E000}', '\u{FFFF}', '\u{0}'],
        vec!['a', '\u{1F600}'],
    ];
    for set in sets {
        let mut ranges = Vec::new();
        let mut next = 0u32;
        let mut codes: Vec<u32> = set.iter().map(|&c| c as u32).collect();
        codes.sort_unstable();
        for c in codes.into_iter().chain([0x110000]) {
            for (x, y) in [(next, c.min(0xD800)), (next.max(0xE000), c)] {
                if x < y {
                    ranges.push((x, y - 1));
                }
            }
            next = c + 1;
        }
        let fast = Re::new(&spell_not(&set));
        let slow = Re::new(&spell_class(&ranges));
        for s in &samples {
            assert_eq!(fast.is_match(s), slow.is_match(s), "{set:?}: {s:?}");
        }
    }
}

#[test]
fn any_string_content_compiles_to_the_same_language() {
    use crate::automata::spell::any_char;
    use regex_syntax::hir::Hir;
    // The list construct builds `any_char()*` straight into states; regex-automata's compiler
    // builds it from the HIR.
    let body = Hir::repetition(regex_syntax::hir::Repetition {
        min: 0,
        max: None,
        greedy: true,
        sub: Box::new(any_char()),
    });
    let quoted = Hir::concat(vec![Hir::literal(*b"\""), body, Hir::literal(*b"\"")]);
    let marked = crate::automata::expr::sep_list(quoted.clone().into(), Hir::literal(*b",").into());
    let plain = Hir::concat(vec![
        quoted.clone(),
        Hir::repetition(regex_syntax::hir::Repetition {
            min: 0,
            max: None,
            greedy: true,
            sub: Box::new(Hir::concat(vec![Hir::literal(*b","), quoted])),
        }),
    ]);
    assert!(!marked.is_plain());
    super::test_util::assert_same_language(&marked, &plain);
}

#[test]
fn string_dfas_compile_to_the_same_language_as_their_expressions() {
    use crate::automata::hir::{concat, lit, rep};
    use crate::automata::spell::{dot_all, encode};
    use crate::automata::strlang::{combine, combined_dfa};
    use crate::json_schema::compile::pattern_language;
    let quoted = |h: Hir| concat(vec![lit("\""), h, lit("\"")]);
    // (patterns that must match, length bounds, patterns that must not)
    type Case<'a> = (&'a [&'a str], (u32, Option<u32>), &'a [&'a str]);
    let cases: &[Case] = &[
        (&["^[a-c]+$"], (2, Some(4)), &[]),
        (&["^[a-z]+@[a-z]+\\.(com|org)$"], (0, Some(10)), &[]),
        // every non-ASCII character to one state (and control characters, escapes)
        (&["x"], (0, Some(3)), &[]),
        (&["^[^\"\\\\]*$"], (1, Some(3)), &["^ab$"]),
        (&["^[\\n\\t\"/\\\\]{1,2}$"], (0, None), &[]),
        (&["^\\d{2}-\\d{2}$", "1"], (0, None), &["00"]),
        // non-ASCII characters split between targets: read range by range, raw and escaped
        (&["^[a-zé]+$"], (0, Some(3)), &[]),
        (&["^\\S+\\s\\S$"], (0, Some(4)), &[]),
        (&["^[^é]{1,2}$"], (0, None), &["^\u{7ff}"]),
        // astral characters (surrogate pairs), a range across the BMP's end
        (&["^[😀-🙏a]{1,2}$"], (0, None), &[]),
        (
            &["^[\u{fff0}-\u{10010}\u{10fff0}-\u{10ffff}]$"],
            (0, None),
            &[],
        ),
        // ranges next to the surrogate block, and one across it
        (
            &["^([\u{d000}-\u{d7ff}]x|[\u{d7fe}-\u{e001}])$"],
            (0, None),
            &[],
        ),
        (&["^(é|ü)[^\u{100}-\u{fff}]?$"], (1, Some(2)), &[]),
    ];
    for (pats, (min, max), negs) in cases {
        let mut pos: Vec<Hir> = pats.iter().map(|p| pattern_language(p).unwrap()).collect();
        pos.push(rep(dot_all(), *min, *max));
        let neg: Vec<Hir> = negs.iter().map(|p| pattern_language(p).unwrap()).collect();
        let d = combined_dfa(&pos, &neg).unwrap().expect("not empty");
        let states = crate::automata::expr::char_dfa(&d).expect("a DFA");
        assert!(!states.is_plain());
        let expr = encode(&combine(&pos, &neg).unwrap().unwrap()).unwrap();
        let quoted_states = crate::automata::expr::concat(vec![
            crate::automata::expr::lit("\""),
            states,
            crate::automata::expr::lit("\""),
        ]);
        super::test_util::assert_same_language(&quoted_states, &quoted(expr));
    }
    // the split states are built as such (not one shared reader for non-ASCII)
    let d = combined_dfa(&[pattern_language("^[a-zé]+$").unwrap()], &[])
        .unwrap()
        .unwrap();
    let Some(Expr::CharDfa(c)) = crate::automata::expr::char_dfa(&d) else {
        panic!("a character DFA");
    };
    assert!(c
        .states
        .iter()
        .any(|s| !s.wide.is_empty() && s.rest.is_none()));
    // an empty combination
    let pos = [
        pattern_language("^a+$").unwrap(),
        pattern_language("^b+$").unwrap(),
    ];
    assert!(combined_dfa(&pos, &[]).unwrap().is_none());
}

#[test]
fn formats_with_length_bounds_compile() {
    // a format's own bounds (hostname labels) times a length bound: too large as an
    // expression, built as a DFA
    for (fmt, ok, bad) in [
        ("email", r#""ab@example.com""#, r#""@example.com""#),
        ("hostname", r#""a.example.com""#, r#""-a.com""#),
    ] {
        for max in [16u32, 64, 254] {
            let r = lang(json!({"type": "string", "format": fmt, "maxLength": max}));
            assert!(r.is_match(ok), "{fmt} {max}");
            assert!(!r.is_match(bad), "{fmt} {max}");
            // an address of exactly `n` characters: short labels
            let of_len = |n: usize| {
                let body: String = "bbbbbbbbb."
                    .repeat(n / 10 + 1)
                    .chars()
                    .take(n - 6)
                    .collect();
                format!("\"a@{body}x.co\"")
            };
            let (long, fits) = (of_len(max as usize + 1), of_len(max as usize));
            if fmt == "email" {
                assert!(!r.is_match(&long), "{fmt} {max}: {} chars", max + 1);
                assert!(r.is_match(&fits), "{fmt} {max}: {max} chars");
            }
        }
    }
}

#[test]
fn lower_bounds_above_upper_bounds_allow_nothing() {
    let o = JsonSchemaOptions::default();
    for schema in [
        json!({"type": "string", "minLength": 2, "maxLength": 0}),
        json!({"type": "string", "minLength": 3, "maxLength": 1}),
        json!({"type": "string", "pattern": "^a+$", "minLength": 3, "maxLength": 1}),
        json!({"type": "object", "minProperties": 3, "maxProperties": 1}),
        json!({"type": "object", "minProperties": 2, "maxProperties": 0}),
        json!({"type": "array", "items": {"type": "string", "minLength": 2},
               "contains": {"type": "string", "maxLength": 0}}),
    ] {
        assert_eq!(schema_err(schema, &o).0, "", "no value satisfies it");
    }
    // where other types remain, only the bounded type is empty
    check(
        json!({"type": ["string", "integer"], "minLength": 3, "maxLength": 1}),
        &["1"],
        &[r#""""#, r#""abc""#, r#""a""#],
    );
    check(
        json!({"type": ["object", "null"], "minProperties": 2, "maxProperties": 1}),
        &["null"],
        &["{}", r#"{"a": 1}"#, r#"{"a": 1, "b": 2}"#],
    );
}

#[test]
fn string_trie_is_the_union_of_its_members() {
    use crate::automata::hir::alt;
    use crate::automata::spell::{spell_any_of, spell_str, Spelling};
    let union = |xs: &[&str]| alt(xs.iter().map(|s| spell_str(s)).collect());
    let sets: Vec<Vec<&str>> = vec![
        vec!["a", "ab", "abc", "b", ""],
        vec![
            "member1",
            "member10",
            "member2",
            "mem",
            "x\"y",
            "é",
            "éa",
            "\u{1F600}",
        ],
        vec!["same", "same", "other"],
        vec!["", "\\", "\n", "/"],
    ];
    for set in &sets {
        let trie = spell_any_of(set, usize::MAX, Spelling::Any).unwrap();
        super::test_util::assert_same_language(&trie, &union(set));
    }
    // branching deeper than the trie's depth bound: the rest are plain alternatives
    let chain: Vec<String> = (0..700).map(|n| "a".repeat(n) + "b").collect();
    let chain: Vec<&str> = chain.iter().map(String::as_str).collect();
    let t = super::test_util::Re::new(&spell_any_of(&chain, usize::MAX, Spelling::Any).unwrap());
    for n in [0, 1, 511, 512, 513, 699] {
        assert!(t.is_match(&("a".repeat(n) + "b")), "{n}");
        assert!(!t.is_match(&"a".repeat(n + 1)), "{n}");
    }
    assert!(!t.is_match(&("a".repeat(700) + "b")));
    // the size bound counts the trie's characters (shared prefixes once)
    assert_eq!(
        spell_any_of(&["abc", "abd", "b"], 5, Spelling::Any).err(),
        None
    );
    assert_eq!(
        spell_any_of(&["abc", "abd", "b"], 4, Spelling::Any).err(),
        Some(5)
    );
}

/// Declared names and const/enum strings as written: exactly the spellings `json.dumps` gives
/// (ASCII: one; DEL and beyond: raw or lowercase `\uxxxx`), for every ASCII character and a
/// sample beyond, checked character by character against an independent spelling.
#[test]
fn literals_as_written() {
    use crate::automata::spell::spell_char;
    // what json.dumps(c) (ensure_ascii=True) writes, and what it writes with ensure_ascii=False
    fn dumps(c: char, ensure_ascii: bool) -> String {
        match c {
            '"' => "\\\"".into(),
            '\\' => "\\\\".into(),
            '\n' => "\\n".into(),
            '\r' => "\\r".into(),
            '\t' => "\\t".into(),
            '\u{8}' => "\\b".into(),
            '\u{c}' => "\\f".into(),
            c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32),
            c if (c as u32) < 0x7f || !ensure_ascii => c.to_string(),
            c => {
                let mut b = [0u16; 2];
                c.encode_utf16(&mut b)
                    .iter()
                    .map(|u| format!("\\u{u:04x}"))
                    .collect()
            }
        }
    }
    let sample = (0u32..0x80)
        .chain([0xe9, 0x7ff, 0x800, 0xfffd, 0x10000, 0x1f600, 0x10ffff])
        .filter_map(char::from_u32);
    for c in sample {
        let written = Re::new(&Spelling::AsWritten.char(c));
        let all = Re::new(&spell_char(c));
        let ok = [dumps(c, true), dumps(c, false)];
        for t in &ok {
            assert!(written.is_match(t), "{c:?} as written should accept {t:?}");
            assert!(all.is_match(t), "{t:?} is a spelling of {c:?}");
        }
        // every other spelling of the character is refused: the raw form, the short escape,
        // both hex cases, `\/`
        let mut others = vec![c.to_string(), format!("\\u{:04X}", c as u32)];
        if (c as u32) <= 0xffff {
            others.push(format!("\\u{:04x}", c as u32));
        }
        if c == '/' {
            others.push("\\/".into());
        }
        for t in others.iter().filter(|t| !ok.contains(t)) {
            if all.is_match(t) {
                assert!(!written.is_match(t), "{c:?} as written should refuse {t:?}");
            }
        }
    }
    // whole strings: property names and enum strings (the trie) go the same way
    check(
        json!({"type": "object", "properties": {"name": {"const": 1}}, "required": ["name"]}),
        &[r#"{"name": 1}"#],
        &[r#"{"\u006eame": 1}"#, r#"{"n\u0061me": 1}"#],
    );
    check(
        json!({"enum": ["tab\there", "quote\"", "é", "x"]}),
        &[
            r#""tab\there""#,
            r#""quote\"""#,
            r#""é""#,
            r#""\u00e9""#,
            r#""x""#,
        ],
        &[
            r#""tab\u0009here""#,
            r#""quote\u0022""#,
            r#""\u00E9""#,
            r#""\u0078""#,
        ],
    );
    check(
        json!({"const": {"k\u{1}": ["v/"]}}),
        &[r#"{"k\u0001": ["v/"]}"#],
        &[r#"{"k\u0001": ["v\/"]}"#, r#"{"\u006b\u0001": ["v/"]}"#],
    );
    // an additional property never decodes to a declared name, in any spelling
    check(
        json!({"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}}),
        &[r#"{"a": 1}"#, r#"{"a": 1, "b": "x"}"#],
        &[r#"{"\u0061": "x"}"#, r#"{"a": 1, "\u0061": "x"}"#],
    );
}

//! Tests of objects: properties, key languages, patternProperties, additionalProperties.

use serde_json::json;

use super::*;

/// An object declaring `names`, each `{"const": 1}`, those in `req_mask` required, and other
/// properties `{"const": 2}` when `extras` (else none).
fn const_members_schema(names: &[&str], req_mask: u32, extras: bool) -> Value {
    let props: serde_json::Map<String, Value> = names
        .iter()
        .map(|n| (n.to_string(), json!({"const": 1})))
        .collect();
    let required: Vec<&str> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| req_mask & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect();
    let additional = if extras {
        json!({"const": 2})
    } else {
        json!(false)
    };
    json!({"type": "object", "properties": props, "required": required,
           "additionalProperties": additional})
}

/// The members of [`const_members_schema`]'s texts: the names in `subset` (`"a": 1`, in
/// order), then `n_extra` other properties (`"x0": 2`, ...).
fn const_members(names: &[&str], subset: u32, n_extra: usize) -> Vec<String> {
    let mut members: Vec<String> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| subset & (1 << i) != 0)
        .map(|(_, n)| format!("\"{n}\": 1"))
        .collect();
    for k in 0..n_extra {
        members.push(format!("\"x{k}\": 2"));
    }
    members
}

/// Every order of `xs`.
fn permutations(xs: &[String]) -> Vec<Vec<String>> {
    if xs.is_empty() {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for i in 0..xs.len() {
        let mut rest = xs.to_vec();
        let x = rest.remove(i);
        for mut p in permutations(&rest) {
            p.insert(0, x.clone());
            out.push(p);
        }
    }
    out
}

#[test]
fn objects() {
    let s = json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
        "required": ["b"],
        "additionalProperties": false
    });
    check(
        s,
        &[
            r#"{"b": "x"}"#,
            r#"{"a": 1, "b": "x"}"#,
            r#"{"b":"x","c":true}"#,
            r#"{"a": 1, "b": "x", "c": false}"#,
        ],
        &[
            "{}",
            r#"{"a": 1}"#,
            r#"{"b": "x", "a": 1}"#,
            r#"{"b": "x", "d": 1}"#,
            r#"{"b":  "x"}"#,
            r#"{ "b": "x"}"#,
        ],
    );
    // optional properties in any combination
    let s = json!({"properties": {"a": {}, "b": {}, "c": {}}, "additionalProperties": false, "type": "object"});
    check(
        s,
        &[
            "{}",
            r#"{"a": 1}"#,
            r#"{"b": 1}"#,
            r#"{"c": 1}"#,
            r#"{"a": 1, "c": 2}"#,
            r#"{"b": 1, "c": 2}"#,
        ],
        &[r#"{, "b": 1}"#, r#"{"a": 1,}"#],
    );
    // spec default: extra properties allowed, after the declared ones, never a declared name
    let s = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    check(
        s.clone(),
        &[
            r#"{"a": 1, "z": [1, {"q": null}]}"#,
            r#"{"ab": "x"}"#,
            r#"{"b": 1, "c": 2}"#,
        ],
        &[
            r#"{"a": "x"}"#,
            r#"{"a": 1, "a": "x"}"#,
            r#"{"\u0061": "x"}"#,
        ],
    );
    let forbid = JsonSchemaOptions {
        additional_properties: AdditionalProperties::Forbid,
        ..Default::default()
    };
    let r = lang_with(s, &forbid);
    assert!(r.is_match(r#"{"a": 1}"#) && !r.is_match(r#"{"a": 1, "b": 2}"#));
    check(
        json!({"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}}),
        &[r#"{"a": "s", "b": 1}"#, r#"{"b": 1, "c": 2}"#],
        &[r#"{"b": "s"}"#],
    );
    check(
        json!({"type": "object", "required": ["x"], "additionalProperties": {"type": "integer"}}),
        &[r#"{"x": 1}"#, r#"{"x": 1, "y": 2}"#],
        &["{}", r#"{"x": "s"}"#],
    );
    check(
        json!({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1, "maxProperties": 2}),
        &[r#"{"x": 1}"#, r#"{"x": 1, "y": 2}"#],
        &["{}", r#"{"x": 1, "y": 2, "z": 3}"#],
    );
}

#[test]
fn many_optional_properties_stay_small() {
    // Optional properties after the first present one form a plain sequence of optional
    // groups; building it used to copy the tail twice per property (exponential).
    let mut props = serde_json::Map::new();
    for i in 0..40 {
        props.insert(
            format!("p{i}"),
            json!({"type": "integer", "minimum": 0, "maximum": 9}),
        );
    }
    let o = JsonSchemaOptions {
        additional_properties: AdditionalProperties::Forbid,
        ..Default::default()
    };
    let schema = json!({"type": "object", "properties": props});
    let c = compile(&schema, &o).unwrap();
    assert!(c.weight() < 200_000, "{}", c.weight());
    let r = Re::new(&c.expr);
    assert!(r.is_match("{}"));
    assert!(r.is_match(r#"{"p3": 1, "p17": 2, "p39": 9}"#));
    assert!(!r.is_match(r#"{"p17": 2, "p3": 1}"#));
    assert!(!r.is_match(r#"{, "p3": 1}"#));
}

/// Objects compile into a shared member sequence: every subset of the declared properties in
/// schema order (required ones present), then extras, each separated by exactly one comma.
#[test]
fn member_sequences_match_brute_force() {
    let names = ["a", "b", "c", "d"];
    for req_mask in 0u32..16 {
        for extras in [false, true] {
            let schema = const_members_schema(&names, req_mask, extras);
            let r = lang(schema.clone());
            for subset in 0u32..16 {
                for n_extra in 0..3 {
                    let members = const_members(&names, subset, n_extra);
                    let text = format!("{{{}}}", members.join(", "));
                    let ok = subset & req_mask == req_mask && (extras || n_extra == 0);
                    assert_eq!(r.is_match(&text), ok, "{schema} on {text}");
                    // a leading, trailing, doubled or missing comma is never accepted
                    if !members.is_empty() {
                        let inner = members.join(", ");
                        assert!(!r.is_match(&format!("{{, {inner}}}")), "{text}");
                        assert!(!r.is_match(&format!("{{{inner}, }}")), "{text}");
                    }
                    if members.len() >= 2 {
                        assert!(!r.is_match(&text.replacen(", ", ", , ", 1)), "{text}");
                        assert!(!r.is_match(&text.replacen(", ", " ", 1)), "{text}");
                    }
                }
            }
        }
    }
}

#[test]
fn pattern_properties_and_property_names() {
    let s = json!({"type": "object", "properties": {"id": {"type": "integer"}},
                   "patternProperties": {"^x-": {"type": "string"}, "n$": {"type": "boolean"}},
                   "additionalProperties": false});
    check(
        s,
        &[
            r#"{"id": 1}"#,
            r#"{"id": 1, "x-a": "s"}"#,
            r#"{"on": true}"#,
        ],
        // "x-n" matches both patterns: string and boolean at once is impossible
        &[
            r#"{"x-a": 1}"#,
            r#"{"other": 1}"#,
            r#"{"on": "s"}"#,
            r#"{"x-n": true}"#,
            r#"{"x-n": "a"}"#,
        ],
    );
    // a declared property that matches a pattern must satisfy both
    check(
        json!({"properties": {"x-y": {"minLength": 2}}, "patternProperties": {"^x-": {"type": "string"}}}),
        &[r#"{"x-y": "ab"}"#],
        &[r#"{"x-y": "a"}"#, r#"{"x-y": 12}"#],
    );
    check(
        json!({"type": "object", "propertyNames": {"pattern": "^[a-z]+$", "maxLength": 3}}),
        &["{}", r#"{"ab": 1}"#, r#"{"abc": [1]}"#],
        &[r#"{"abcd": 1}"#, r#"{"A": 1}"#],
    );
    check(
        json!({"propertyNames": false}),
        &["{}", "1"],
        &[r#"{"a": 1}"#],
    );
    // unevaluatedProperties sees patternProperties
    check(
        json!({"patternProperties": {"^a": true}, "unevaluatedProperties": false}),
        &[r#"{"ab": 1}"#],
        &[r#"{"b": 1}"#],
    );
}

/// A lone `patternProperties` pattern (no declared names to take away) is spelled as it is:
/// its counted repetition stays a count (bounds exact on both sides, escapes spelled), and an
/// unanchored pattern keeps its search semantics.
#[test]
fn lone_pattern_property_keys() {
    let key40 = "ab_c".repeat(10);
    let key41 = format!("{key40}a");
    let ok40 = format!(r#"{{"{key40}": 1}}"#);
    let bad41 = format!(r#"{{"{key41}": 1}}"#);
    check(
        json!({"type": "object", "patternProperties": {"^[a-c_]{1,40}$": {"type": "integer"}},
               "additionalProperties": false}),
        &["{}", r#"{"a": 1}"#, r#"{"\u0061b": 1, "c_": 2}"#, &ok40],
        &[r#"{"": 1}"#, r#"{"ad": 1}"#, r#"{"a": "x"}"#, &bad41],
    );
    check(
        json!({"type": "object", "patternProperties": {"b": {"type": "integer"}},
               "additionalProperties": false}),
        &["{}", r#"{"abc": 1}"#, r#"{"b": 1}"#, r#"{"x\u0062": 1}"#],
        &[r#"{"ac": 1}"#, r#"{"": 1}"#, r#"{"abc": true}"#],
    );
}

#[test]
fn spelled_not_in_equals_the_encoded_complement() {
    use crate::automata::spell::encode;
    use crate::json_schema::compile::{not_in, spelled_not_in};
    let pieces = [
        "a",
        "b",
        "x",
        "é",
        "\\u0061",
        "\\u00E9",
        "\\u00e9",
        "\\\"",
        "\"",
        "A",
        "/",
        "\\/",
        "\\\\",
        "\\n",
        "\\u000a",
        "\\u000A",
        "\\u0041",
        "\u{7f}",
        "\\u007F",
        "\\ud83d\\ude00",
        "\\ud83d",
        "\\uD7FF",
        "😀",
        "\\u1041",
        "\\u0141",
        "\\u0040",
        "\\",
    ];
    let mut samples = vec![String::new()];
    let mut layer = vec![String::new()];
    for _ in 0..3 {
        let mut next = Vec::new();
        for s in &layer {
            for p in pieces {
                next.push(format!("{s}{p}"));
            }
        }
        samples.extend(next.iter().cloned());
        layer = next;
    }
    let name_sets: Vec<Vec<&str>> = vec![
        vec!["ab", "a", "bé"],
        vec![""],
        vec!["x"],
        vec!["", "aa", "ab"],
        vec!["ab", "a", "b"],
        vec!["A", "a/", "\\", "\n\"", "\u{7f}"],
        vec!["/", "AA"],
    ];
    for names in name_sets {
        let chars: Vec<Vec<char>> = names.iter().map(|n| n.chars().collect()).collect();
        // all-ASCII name sets compile straight into states, others through the HIR
        let fast = Re::new(&spelled_not_in(&chars));
        let slow = Re::new(&encode(&not_in(&chars)).unwrap());
        for s in &samples {
            assert_eq!(fast.is_match(s), slow.is_match(s), "{names:?}: {s:?}");
        }
        super::test_util::assert_same_language(
            &spelled_not_in(&chars),
            &encode(&not_in(&chars)).unwrap(),
        );
    }
}

/// A negated `properties` keeps the other declared names declared, so a valid object in
/// schema order is produced whichever declared property makes it valid.
#[test]
fn negated_properties_keep_schema_order() {
    let p = json!({"a": {"type": "null"}, "b": {"type": "integer", "minimum": 7}});
    check(
        json!({"not": {"properties": p}}),
        &[
            r#"{"a": null, "b": 6}"#,
            r#"{"a": 1, "b": 7}"#,
            r#"{"a": 1}"#,
            r#"{"b": 6}"#,
        ],
        &[r#"{"a": null, "b": 7}"#, "{}", r#"{"a": null}"#, "null"],
    );
    // the same through an exclusive oneOf (a value in both branches is refused)
    check(
        json!({"oneOf": [{"properties": p}, {"required": ["c"]}]}),
        &[r#"{"a": null, "b": 6, "c": 1}"#, r#"{"a": null, "b": 7}"#],
        &[r#"{"a": null, "b": 7, "c": 1}"#],
    );
}

/// A name required twice (a dependency listing its own trigger, or `required` repeating a
/// name) is one required property; a negated dependency holds only for objects.
#[test]
fn dependencies_listing_their_trigger_and_negated_dependencies() {
    check(
        json!({"dependentRequired": {"b": ["b"]}}),
        &[r#"{"b": ""}"#, r#"{"b": 0}"#, "{}", "1"],
        &[r#"{"b": 0, "b": 1}"#],
    );
    check(
        json!({"required": ["a", "a"]}),
        &[r#"{"a": 1}"#],
        &["{}", r#"{"a": 1, "a": 2}"#],
    );
    check(
        json!({"not": {"dependentRequired": {"e": [""]}}}),
        &[r#"{"e": 1}"#],
        &["0", r#""""#, "[]", "null", "{}", r#"{"e": 1, "": 2}"#],
    );
    // (the dependency's schema applies to the whole object, which is never null)
    check(
        json!({"not": {"dependentSchemas": {"a": {"type": "null"}}}}),
        &[r#"{"a": 1}"#, r#"{"a": null}"#],
        &["false", "0", "{}", r#"{"b": 1}"#],
    );
    check(
        json!({"oneOf": [{"dependentSchemas": {"a": {"type": "null"}}}, {}]}),
        &[r#"{"a": 1}"#],
        &["false", "{}"],
    );
}

/// `unevaluatedProperties` beside a `$ref` in a branch sees only that branch's annotations,
/// not those of the schema the branch is merged with (found by the schema fuzzer).
#[test]
fn unevaluated_beside_a_ref_in_a_branch() {
    check(
        json!({"anyOf": [{"additionalProperties": {}, "oneOf": [{"$ref": "#/$defs/d1", "unevaluatedProperties": false}]}], "$defs": {"d1": {}}}),
        &["{}", "1"],
        &[r#"{"ab": {}}"#],
    );
    check(
        json!({"properties": {"a": {}}, "allOf": [{"$ref": "#/$defs/d1", "unevaluatedProperties": false}], "$defs": {"d1": {"properties": {"b": {}}}}}),
        &["{}", r#"{"b": 1}"#],
        &[r#"{"a": 1}"#, r#"{"a": 1, "b": 1}"#],
    );
}

/// Two conjuncts with the same `contains` keep both their counts: an explicit
/// `minContains: 0` on one side does not lift the other side's implicit minimum of 1 (found by
/// the schema fuzzer through a recursive schema negated inside `oneOf`).
#[test]
fn merged_contains_keep_both_counts() {
    check(
        json!({"allOf": [{"contains": {"const": 1}}, {"contains": {"const": 1}, "minContains": 0, "maxContains": 2}]}),
        &["[1]", "[1, 1]", "[2, 1]"],
        &["[]", "[2]", "[1, 1, 1]"],
    );
    check(
        json!({"allOf": [{"contains": {"const": 1}, "maxContains": 3}, {"contains": {"const": 1}, "minContains": 2, "maxContains": 2}]}),
        &["[1, 1]"],
        &["[1]", "[1, 1, 1]"],
    );
    let d = |prefix: Value| json!({"$defs": {"d0": {"prefixItems": [prefix], "contains": {"anyOf": [{"$ref": "#/$defs/d0"}]}}}, "$ref": "#/$defs/d0"});
    // d0([]) fails (nothing is contained), d0 of a non-array holds
    check(
        d(json!({"not": {"$ref": "#/$defs/d0"}})),
        &["[[], 1]"],
        &["[[]]", "[[[]]]", "[1]", "[]"],
    );
    check(
        d(json!({"oneOf": [{"$ref": "#/$defs/d0"}, {}]})),
        &["[[], 1]"],
        &["[[]]", "[[[]]]", "[1]", "[]"],
    );
    check(
        d(json!({"$ref": "#/$defs/d0"})),
        &["[1]", "[[1]]"],
        &["[[]]", "[[], 1]", "[]"],
    );
}

/// A negated `required` keeps the negated map's declared names declared too, so a valid
/// object in schema order is produced (found by the schema fuzzer).
#[test]
fn negated_required_keeps_schema_order() {
    check(
        json!({"not": {"properties": {"b": {}}, "required": ["a"]}, "required": ["d"]}),
        &[r#"{"b": "", "d": ""}"#, r#"{"d": ""}"#],
        &[r#"{"a": 1, "d": ""}"#, r#"{"b": ""}"#],
    );
    check(
        json!({"if": {"allOf": [{"properties": {"b": {}}, "required": ["a"]}]}, "else": {"required": ["d"]}}),
        &[r#"{"b": "", "d": ""}"#, r#"{"a": 1}"#],
        &[r#"{"b": ""}"#],
    );
}

fn any_order() -> JsonSchemaOptions {
    JsonSchemaOptions {
        property_order: PropertyOrder::Any,
        ..Default::default()
    }
}

/// Every order of every subset of the declared properties, with 0–2 extra properties placed
/// at every position among them, against the expected answer: required ones present, none
/// twice, extras only where allowed.
#[test]
fn any_order_members_match_brute_force() {
    let names = ["a", "b", "c"];
    for req_mask in 0u32..8 {
        for extras in [false, true] {
            let schema = const_members_schema(&names, req_mask, extras);
            let r = lang_with(schema.clone(), &any_order());
            for subset in 0u32..8 {
                for n_extra in 0..3 {
                    let members = const_members(&names, subset, n_extra);
                    let ok = subset & req_mask == req_mask && (extras || n_extra == 0);
                    for p in permutations(&members) {
                        let text = format!("{{{}}}", p.join(", "));
                        assert_eq!(r.is_match(&text), ok, "{schema} on {text}");
                        if !p.is_empty() {
                            let inner = p.join(", ");
                            assert!(!r.is_match(&format!("{{, {inner}}}")), "{text}");
                            assert!(!r.is_match(&format!("{{{inner}, }}")), "{text}");
                            // a declared property twice
                            let twice = format!("{{{inner}, {}}}", p[0]);
                            if p[0].starts_with("\"x") {
                                assert_eq!(r.is_match(&twice), ok, "{twice}");
                            } else {
                                assert!(!r.is_match(&twice), "{twice}");
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Every state of `schema`'s automaton (under `o`) reached from the start, over every byte,
/// can still reach an accepting state: no token can lead into a dead end.
fn assert_no_dead_ends(schema: Value, o: &JsonSchemaOptions, limit: usize) -> usize {
    use crate::automata::dfa::{LazyDfa, DEAD};
    use crate::regex::RegexOptions;
    let c = compile(&schema, o).unwrap();
    let d = LazyDfa::from_expr("test", &c.expr, &RegexOptions::default()).unwrap();
    let start = d.start();
    let mut seen = std::collections::HashMap::from([(start, 0usize)]);
    let mut order = vec![start];
    let mut edges: Vec<(u32, u32)> = Vec::new();
    let mut i = 0;
    while i < order.len() {
        let s = order[i];
        i += 1;
        for b in 0..=255u8 {
            let n = d.walk(s, &[b]).unwrap();
            if n == DEAD {
                continue;
            }
            edges.push((n, s));
            if !seen.contains_key(&n) {
                assert!(seen.len() < limit, "{schema}: more than {limit} states");
                seen.insert(n, order.len());
                order.push(n);
            }
        }
    }
    let mut live: std::collections::HashSet<u32> = order
        .iter()
        .copied()
        .filter(|&s| d.is_accepting(s))
        .collect();
    loop {
        let before = live.len();
        for &(to, from) in &edges {
            if live.contains(&to) {
                live.insert(from);
            }
        }
        if live.len() == before {
            break;
        }
    }
    for s in &order {
        if !live.contains(s) {
            // the shortest way there, for the message
            let mut path = Vec::new();
            let mut at = *s;
            while at != start {
                let &(to, from) = edges.iter().find(|e| e.0 == at).expect("reached");
                let b = (0..=255u8)
                    .find(|&b| d.walk(from, &[b]).unwrap() == to)
                    .unwrap();
                path.push(b);
                at = from;
            }
            path.reverse();
            let into: Vec<(u32, Vec<u8>)> = edges
                .iter()
                .filter(|e| e.0 == *s)
                .map(|e| {
                    (
                        e.1,
                        (0..=255u8)
                            .filter(|&b| d.walk(e.1, &[b]).unwrap() == *s)
                            .collect(),
                    )
                })
                .take(5)
                .collect();
            eprintln!("into {s}: {into:?}");
            let nx: Vec<(u8, u32)> = (0..=255u8)
                .map(|b| (b, d.walk(*s, &[b]).unwrap()))
                .filter(|x| x.1 != DEAD)
                .collect();
            panic!(
                "{schema}: the state {s} after {:?} cannot finish (accepting {}, next {nx:?})",
                String::from_utf8_lossy(&path),
                d.is_accepting(*s)
            );
        }
    }
    order.len()
}

#[test]
fn any_order_states_can_always_finish() {
    let o = any_order();
    assert_no_dead_ends(
        json!({"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"type": "boolean"},
               "c": {"allOf": [{"type": "integer"}, {"type": "string"}]}},
               "required": ["a", "b"], "additionalProperties": false}),
        &JsonSchemaOptions::default(),
        20_000,
    );
    // a required member with no value, an optional one with none
    assert_no_dead_ends(
        json!({"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"type": "boolean"},
               "c": {"allOf": [{"type": "integer"}, {"type": "string"}]}},
               "required": ["a", "b"], "additionalProperties": false}),
        &o,
        20_000,
    );
    // nested objects, each with its own set, and extras with their own value language
    assert_no_dead_ends(
        json!({"type": "object", "properties": {
            "p": {"type": "object", "properties": {"x": {"const": 1}, "y": {"const": 2}},
                  "required": ["y"], "additionalProperties": false},
            "q": {"const": true}},
            "required": ["p"], "additionalProperties": {"type": "null"}}),
        &o,
        20_000,
    );
    // recursion under a small stack bound: a required member that needs a call can only be
    // started where the call still fits
    for depth in 1..=4 {
        let o = JsonSchemaOptions {
            max_stack_depth: depth,
            ..any_order()
        };
        assert_no_dead_ends(
            json!({"$defs": {"t": {"type": "object",
                    "properties": {"v": {"const": 0}, "k": {"$ref": "#/$defs/t"},
                                   "n": {"enum": [null, 1]}},
                    "required": ["n"], "additionalProperties": false}},
                   "type": "object",
                   "properties": {"r": {"$ref": "#/$defs/t"}, "s": {"const": 1}},
                   "required": ["s", "r"], "additionalProperties": false}),
            &o,
            50_000,
        );
        // a required member that is itself a call: the deepest object it could open in
        // cannot be opened at all
        let s = json!({"$defs": {
            "w": {"type": "array", "items": {"$ref": "#/$defs/w"}, "maxItems": 1},
            "t": {"type": "object", "properties": {"k": {"$ref": "#/$defs/t"},
                  "w": {"$ref": "#/$defs/w"}}, "required": ["w"],
                  "additionalProperties": false}},
            "$ref": "#/$defs/t"});
        let n = assert_no_dead_ends(s.clone(), &o, 50_000);
        let ordered = JsonSchemaOptions {
            max_stack_depth: depth,
            ..Default::default()
        };
        assert_no_dead_ends(s.clone(), &ordered, 50_000);
        assert!(n >= 5, "{n}");
    }
}

#[test]
fn any_order_objects() {
    let o = any_order();
    let r = lang_with(
        json!({"type": "object", "properties": {"redirectOn": {"type": "string"},
               "places": {"type": "array", "items": {"type": "integer"}}},
               "required": ["places"]}),
        &o,
    );
    assert!(r.is_match(r#"{"places": [1], "redirectOn": "x"}"#));
    assert!(r.is_match(r#"{"redirectOn": "x", "places": [1]}"#));
    assert!(r.is_match(r#"{"z": 0, "places": [], "y": {"a": 1}}"#));
    assert!(!r.is_match(r#"{"redirectOn": "x"}"#));
    assert!(!r.is_match(r#"{"places": [], "places": []}"#));
    // const and enum objects match in any order too
    let r = lang_with(json!({"const": {"a": 1, "b": [1, 2]}}), &o);
    assert!(r.is_match(r#"{"b": [1, 2], "a": 1}"#));
    assert!(r.is_match(r#"{"a": 1, "b": [1, 2]}"#));
    assert!(!r.is_match(r#"{"a": 1}"#) && !r.is_match(r#"{"b": [2, 1], "a": 1}"#));
    // the schema order stays the default
    let r = lang(json!({"properties": {"a": {}, "b": {}}, "additionalProperties": false}));
    assert!(!r.is_match(r#"{"b": 1, "a": 2}"#));
    // the option is part of the canonical options only when set
    assert!(!JsonSchemaOptions::default()
        .canonical()
        .contains("property_order"));
    assert!(o.canonical().contains(r#""property_order":"any""#));
}

/// minProperties/maxProperties in general (a counter in the member set), in schema order and
/// in any order: every subset of three declared properties (every order where orders are free),
/// with 0–2 extras, against the expected answer; and no reachable dead end.
#[test]
fn member_counts_match_brute_force() {
    let names = ["a", "b", "c"];
    let mut checked = 0;
    for any in [false, true] {
        for req_mask in [0u32, 1, 5] {
            for extras in [false, true] {
                for (min, max) in [
                    (2, None),
                    (0, Some(1)),
                    (1, Some(2)),
                    (3, Some(3)),
                    (2, Some(4)),
                    (4, None),
                ] {
                    let mut schema = const_members_schema(&names, req_mask, extras);
                    schema["minProperties"] = json!(min);
                    if let Some(m) = max {
                        schema["maxProperties"] = json!(m);
                    }
                    let o = if any {
                        any_order()
                    } else {
                        JsonSchemaOptions::default()
                    };
                    // an unsatisfiable schema is an error: then no text may be expected
                    let r = compile(&schema, &o).ok().map(|c| Re::new(&c.expr));
                    for subset in 0u32..8 {
                        for n_extra in 0..3usize {
                            let members = const_members(&names, subset, n_extra);
                            let n = members.len();
                            let ok = subset & req_mask == req_mask
                                && (extras || n_extra == 0)
                                && n >= min
                                && max.is_none_or(|m| n <= m);
                            let orders = if any {
                                permutations(&members)
                            } else {
                                vec![members.clone()]
                            };
                            for p in orders {
                                let text = format!("{{{}}}", p.join(", "));
                                let got = r.as_ref().is_some_and(|r| r.is_match(&text));
                                assert_eq!(got, ok, "{schema} ({any}) on {text}");
                                checked += 1;
                            }
                        }
                    }
                    if r.is_some() {
                        assert_no_dead_ends(schema.clone(), &o, 20_000);
                    }
                }
            }
        }
    }
    assert!(checked > 1000, "{checked}");
}

/// A negated additionalProperties or patternProperties needs a witness: some member of the
/// kind with a value of the kind, among the declared members or the others, in either order.
/// Each case's texts accepted and rejected in both property orders, and no reachable state a
/// dead end (any-JSON values one level deep, so that every state can be visited).
fn check_both_orders(cases: Vec<(Value, Vec<&str>, Vec<&str>)>) {
    for (schema, ok, bad) in cases {
        for any in [false, true] {
            let o = if any {
                any_order()
            } else {
                JsonSchemaOptions::default()
            };
            let r = lang_with(schema.clone(), &o);
            for t in &ok {
                assert!(r.is_match(t), "{schema} ({any}) should accept {t}");
            }
            for t in &bad {
                assert!(!r.is_match(t), "{schema} ({any}) should reject {t}");
            }
            let shallow = JsonSchemaOptions {
                max_nesting_depth: 1,
                ..o
            };
            assert_no_dead_ends(schema.clone(), &shallow, 50_000);
        }
    }
}

#[test]
fn negated_object_keywords_need_a_witness() {
    let cases = vec![
        // at least one property not declared by the negated map (here: any property)
        (
            json!({"type": "object", "properties": {"a": {"type": "integer"}},
                   "not": {"additionalProperties": false}}),
            vec![r#"{"a": 1}"#, r#"{"z": 1}"#, r#"{"a": 1, "z": null}"#],
            vec!["{}", r#"{"a": "s"}"#],
        ),
        // some property other than `a` with a value that is not 1
        (
            json!({"type": "object", "properties": {"a": {}, "b": {"type": "integer"}},
                   "not": {"properties": {"a": {}}, "additionalProperties": {"const": 1}}}),
            vec![
                r#"{"b": 2}"#,
                r#"{"a": 1, "z": 2}"#,
                r#"{"a": 3, "b": 1, "z": true}"#,
            ],
            vec![
                "{}",
                r#"{"a": 5}"#,
                r#"{"b": 1}"#,
                r#"{"a": 1, "b": 1, "z": 1}"#,
            ],
        ),
        // some property whose key starts with x has a value that is not a string
        (
            json!({"type": "object", "properties": {"xa": {}, "b": {}},
                   "not": {"patternProperties": {"^x": {"type": "string"}}}}),
            vec![
                r#"{"xa": 1}"#,
                r#"{"b": 1, "xz": null}"#,
                r#"{"xa": "s", "xq": 2}"#,
            ],
            vec![
                "{}",
                r#"{"xa": "s"}"#,
                r#"{"b": 1}"#,
                r#"{"b": 1, "xq": "t"}"#,
            ],
        ),
        // the only possible witness is a declared member, whose other values are then refused
        (
            json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {}},
                   "additionalProperties": false,
                   "not": {"properties": {"b": {}}, "additionalProperties": {"not": {"const": 1}}}}),
            vec![r#"{"a": 1}"#, r#"{"a": 1, "b": 2}"#],
            vec!["{}", r#"{"a": 2}"#, r#"{"b": 1}"#, r#"{"a": 2, "b": 1}"#],
        ),
        // two witnesses, which the only member must both be
        (
            json!({"type": "object", "properties": {"a": {"type": "integer"}},
                   "additionalProperties": false,
                   "allOf": [{"not": {"additionalProperties": {"not": {"minimum": 5}}}},
                             {"not": {"additionalProperties": {"not": {"maximum": 7}}}}]}),
            vec![r#"{"a": 6}"#, r#"{"a": 5}"#],
            vec!["{}", r#"{"a": 4}"#, r#"{"a": 8}"#],
        ),
        // two witnesses among declared and other members
        (
            json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {}},
                   "additionalProperties": {"type": "integer"},
                   "allOf": [{"not": {"additionalProperties": {"not": {"minimum": 5}}}},
                             {"not": {"patternProperties": {"^z": {"maximum": 2}}}}]}),
            vec![
                r#"{"a": 6, "z1": 3}"#,
                r#"{"z1": 9}"#,
                r#"{"b": 7, "z": 4}"#,
            ],
            vec![
                "{}",
                r#"{"a": 6}"#,
                r#"{"z1": 2, "a": 9}"#,
                r#"{"a": 1, "z1": 4}"#,
            ],
        ),
        // not propertyNames: some key outside the names' language
        (
            json!({"type": "object", "properties": {"ab": {}},
                   "not": {"propertyNames": {"maxLength": 2}}}),
            vec![r#"{"abc": 1}"#, r#"{"ab": 1, "xyz": 2}"#],
            vec!["{}", r#"{"ab": 1}"#, r#"{"ab": 1, "q": 2}"#],
        ),
        (
            json!({"type": "object", "additionalProperties": false,
                   "properties": {"a": {}, "bb": {}},
                   "not": {"propertyNames": {"pattern": "^a"}}}),
            vec![r#"{"bb": 1}"#, r#"{"a": 1, "bb": 2}"#],
            vec!["{}", r#"{"a": 1}"#],
        ),
        // a oneOf of three branches that differ by patternProperties
        (
            json!({"type": "object", "additionalProperties": {"type": "integer"},
                   "oneOf": [{"patternProperties": {"^a": {"minimum": 10}}},
                             {"patternProperties": {"^b": {"minimum": 10}}},
                             {"patternProperties": {"^c": {"minimum": 10}}}]}),
            vec![r#"{"a1": 1, "b1": 1}"#, r#"{"a1": 10, "b1": 1, "c1": 1}"#],
            vec!["{}", r#"{"a1": 1}"#, r#"{"a1": 1, "b1": 1, "c1": 1}"#],
        ),
        // a oneOf whose branches differ by patternProperties
        (
            json!({"type": "object", "additionalProperties": {"type": "integer"},
                   "oneOf": [{"patternProperties": {"^a": {"minimum": 10}}},
                             {"patternProperties": {"^b": {"minimum": 10}}}]}),
            vec![r#"{"a1": 1}"#, r#"{"b1": 1}"#, r#"{"a1": 10, "b1": 1}"#],
            vec!["{}", r#"{"a1": 10}"#, r#"{"a1": 1, "b1": 2}"#],
        ),
    ];
    check_both_orders(cases);
}

/// `minProperties`/`maxProperties` beside negated object keywords: the member set counts the
/// members and keeps the witness kinds written, and a member (or a member's non-witness
/// branch) is taken only where both can still be met.
#[test]
fn witnesses_within_member_counts() {
    let cases = vec![
        // one property, which must not be declared by the negated map
        (
            json!({"type": "object", "properties": {"a": {}}, "maxProperties": 1,
                   "not": {"properties": {"a": {}}, "additionalProperties": false}}),
            vec![r#"{"z": 1}"#, r#"{"q": "s"}"#],
            vec![
                "{}",
                r#"{"a": 1}"#,
                r#"{"a": 1, "z": 1}"#,
                r#"{"z": 1, "y": 2}"#,
            ],
        ),
        // at least two, one of them with a key starting with x and a non-string value
        (
            json!({"type": "object", "minProperties": 2,
                   "not": {"patternProperties": {"^x": {"type": "string"}}}}),
            vec![r#"{"xa": 1, "b": 1}"#, r#"{"b": "s", "c": 2, "x": null}"#],
            vec![
                r#"{"xa": 1}"#,
                r#"{"b": 1, "c": 2}"#,
                r#"{"xa": "s", "b": 1}"#,
            ],
        ),
        // the only member is the witness: its non-witness values are refused
        (
            json!({"type": "object", "properties": {"a": {"type": "integer"}},
                   "additionalProperties": {"type": "integer"}, "maxProperties": 1,
                   "not": {"additionalProperties": {"not": {"minimum": 5}}}}),
            vec![r#"{"a": 6}"#, r#"{"z": 5}"#],
            vec!["{}", r#"{"a": 1}"#, r#"{"a": 1, "z": 7}"#],
        ),
        // two kinds within two members, a required one among them
        (
            json!({"type": "object", "properties": {"a": {"type": "integer"}},
                   "required": ["a"], "additionalProperties": {"type": "integer"},
                   "maxProperties": 2,
                   "allOf": [{"not": {"additionalProperties": {"not": {"minimum": 5}}}},
                             {"not": {"patternProperties": {"^z": {"maximum": 2}}}}]}),
            vec![r#"{"a": 6, "z1": 3}"#, r#"{"a": 1, "z1": 9}"#],
            vec![
                r#"{"a": 6}"#,
                r#"{"a": 1, "z1": 3}"#,
                r#"{"a": 6, "z1": 3, "q": 1}"#,
                r#"{"a": 1, "q": 7, "z1": 3}"#,
            ],
        ),
    ];
    check_both_orders(cases);
    // no count within the bounds has every witness: no object, an error at compile time
    for schema in [
        json!({"type": "object", "properties": {"a": {}}, "required": ["a"], "maxProperties": 1,
               "not": {"properties": {"a": {}}, "additionalProperties": false}}),
        json!({"type": "object", "properties": {"a": {}}, "additionalProperties": false,
               "minProperties": 2, "not": {"additionalProperties": false}}),
    ] {
        let e = compile(&schema, &JsonSchemaOptions::default()).err();
        assert!(
            e.is_some_and(|e| e.to_string().contains("no JSON value")),
            "{schema}"
        );
    }
}

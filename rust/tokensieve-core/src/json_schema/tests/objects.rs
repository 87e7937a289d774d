//! Tests of objects: properties, key languages, patternProperties, additionalProperties.

use serde_json::json;

use super::*;

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
            let schema = json!({"type": "object", "properties": props, "required": required,
                                "additionalProperties": if extras { json!({"const": 2}) } else { json!(false) }});
            let r = lang(schema.clone());
            for subset in 0u32..16 {
                for n_extra in 0..3 {
                    let mut members: Vec<String> = names
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| subset & (1 << i) != 0)
                        .map(|(_, n)| format!("\"{n}\": 1"))
                        .collect();
                    for k in 0..n_extra {
                        members.push(format!("\"x{k}\": 2"));
                    }
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

//! Per-keyword tests: each schema with JSON texts it must accept and reject.

use serde_json::{json, Value};

use super::test_util::Re;
use super::*;
use crate::error::Error;

fn lang(schema: Value) -> Re {
    lang_with(schema, &JsonSchemaOptions::default())
}

fn lang_with(schema: Value, o: &JsonSchemaOptions) -> Re {
    Re::new(&compile(&schema, o).unwrap().hir)
}

fn check(schema: Value, ok: &[&str], bad: &[&str]) {
    let r = lang(schema.clone());
    for t in ok {
        assert!(r.is_match(t), "{schema} should accept {t}");
    }
    for t in bad {
        assert!(!r.is_match(t), "{schema} should reject {t}");
    }
}

fn schema_err(schema: Value, o: &JsonSchemaOptions) -> (String, String) {
    match compile(&schema, o) {
        Err(Error::Schema {
            keyword, pointer, ..
        }) => (keyword, pointer),
        Err(e) => panic!("expected a schema error for {schema}, got {e}"),
        Ok(_) => panic!("expected a schema error for {schema}, got a grammar"),
    }
}

#[test]
fn types() {
    check(json!({"type": "null"}), &["null"], &["nul", "0"]);
    check(json!({"type": "boolean"}), &["true", "false"], &["null"]);
    check(
        json!({"type": "integer"}),
        &["0", "-12", "12"],
        &["1.5", "01", "1e3", "-"],
    );
    check(
        json!({"type": "number"}),
        &["0", "-1.5e-3", "2E+7", "0.25"],
        &["01", ".5", "1."],
    );
    check(
        json!({"type": ["string", "null"]}),
        &["null", "\"x\""],
        &["1"],
    );
    check(
        json!({"type": "string", "nullable": true}),
        &["null", "\"\""],
        &["true"],
    );
    check(json!(true), &["1", "{\"a\": [1, {}]}", "[]"], &["{a}"]);
    check(json!({}), &["null", "[1, 2]"], &["[1,,2]"]);
    assert!(matches!(
        compile(&json!(false), &JsonSchemaOptions::default()),
        Err(Error::Schema { .. })
    ));
}

#[test]
fn const_and_enum() {
    check(
        json!({"const": 1}),
        &["1", "1.0", "1.00"],
        &["2", "1e0", "01"],
    );
    check(json!({"const": 1.5}), &["1.5", "1.50"], &["1.51"]);
    check(
        json!({"const": "a/é"}),
        &[r#""a/é""#, r#""a\/\u00e9""#, r#""\u0061/\u00E9""#],
        &[r#""a/E""#, r#""a/\u00C9""#],
    );
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
fn arrays() {
    check(
        json!({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}),
        &["[1]", "[1, 2]", "[1,2,3]"],
        &["[]", "[1, 2, 3, 4]", "[1.5]", "[1 ,2]"],
    );
    check(
        json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false}),
        &["[]", r#"["a"]"#, r#"["a", 1]"#],
        &[r#"[1]"#, r#"["a", 1, 2]"#],
    );
    check(
        json!({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"}, "minItems": 2}),
        &[r#"["a", 1]"#, r#"["a", 1, 2]"#],
        &[r#"["a"]"#, r#"["a", "b"]"#],
    );
    check(
        json!({"type": "array", "items": [{"type": "null"}], "additionalItems": {"type": "boolean"}}),
        &["[]", "[null]", "[null, true, false]"],
        &["[true]"],
    );
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

#[test]
fn combinators() {
    check(
        json!({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]}),
        &["1", r#""a""#],
        &[r#""ab""#, "null"],
    );
    check(
        json!({"oneOf": [{"type": "integer"}, {"type": "string"}]}),
        &["1", r#""ab""#],
        &["null"],
    );
    check(
        json!({"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"], "additionalProperties": false},
            {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"], "additionalProperties": false}
        ]}),
        &[r#"{"kind": "a", "x": 1}"#, r#"{"kind": "b"}"#],
        &[r#"{"kind": "b", "x": 1}"#],
    );
    // required discriminators separate objects only: a number matches both branches
    check(
        json!({"oneOf": [
            {"required": ["k"], "properties": {"k": {"const": 1}}},
            {"required": ["k"], "properties": {"k": {"const": 2}}}
        ]}),
        &[r#"{"k": 1}"#, r#"{"k": 2}"#],
        &["5", r#""x""#, r#"{"k": 3}"#],
    );
    // overlapping branches: exactly one must match (integers match both)
    check(
        json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}),
        &["1.5", "-0.25"],
        &["1", "1.0", "null"],
    );
    let any = JsonSchemaOptions {
        one_of: OneOf::AnyOf,
        ..Default::default()
    };
    assert!(lang_with(
        json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}),
        &any
    )
    .is_match("1.5"));
    check(
        json!({"allOf": [
            {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}, "required": ["a"]},
            {"properties": {"a": {"maximum": 9}, "b": {"type": "string"}}, "required": ["b"], "additionalProperties": false}
        ]}),
        &[r#"{"a": 3, "b": "x"}"#],
        &[
            r#"{"a": 10, "b": "x"}"#,
            r#"{"a": 3}"#,
            r#"{"a": 3, "b": "x", "c": 1}"#,
        ],
    );
    // per the spec, a sibling `additionalProperties: false` sees no properties of its own
    let (k, _) = schema_err(
        json!({"allOf": [{"type": "object", "properties": {"a": {}}, "required": ["a"]}], "additionalProperties": false}),
        &JsonSchemaOptions::default(),
    );
    assert_eq!(k, "");
}

#[test]
fn refs_and_recursion() {
    let s = json!({
        "$defs": {"node": {"type": "object", "properties": {
            "v": {"type": "integer"},
            "next": {"$ref": "#/$defs/node"}
        }, "required": ["v"], "additionalProperties": false}},
        "$ref": "#/$defs/node"
    });
    let o = JsonSchemaOptions {
        max_recursion_depth: 2,
        ..Default::default()
    };
    let r = lang_with(s, &o);
    assert!(r.is_match(r#"{"v": 1}"#));
    assert!(r.is_match(r#"{"v": 1, "next": {"v": 2}}"#));
    assert!(!r.is_match(r#"{"v": 1, "next": {"v": 2, "next": {"v": 3}}}"#));
    // a required recursive field at the limit is an error, unless truncate_recursion
    let s = json!({
        "definitions": {"t": {"type": "object", "properties": {"kid": {"$ref": "#/definitions/t"}}, "required": ["kid"]}},
        "anyOf": [{"type": "null"}, {"$ref": "#/definitions/t"}]
    });
    let (k, _) = schema_err(s.clone(), &JsonSchemaOptions::default());
    assert_eq!(k, "$ref");
    let t = JsonSchemaOptions {
        truncate_recursion: true,
        ..Default::default()
    };
    assert!(lang_with(s, &t).is_match("null"));
    let (k, _) = schema_err(
        json!({"$ref": "http://x/y.json"}),
        &JsonSchemaOptions::default(),
    );
    assert_eq!(k, "$ref");
}

#[test]
fn unsupported_and_lenient() {
    let s = json!({"type": "object", "properties": {"a": {"type": "array", "items": {"$dynamicRef": "#x"}}}});
    let (k, p) = schema_err(s.clone(), &JsonSchemaOptions::default());
    assert_eq!(
        (k.as_str(), p.as_str()),
        ("$dynamicRef", "/properties/a/items")
    );
    let o = JsonSchemaOptions {
        lenient: true,
        ..Default::default()
    };
    let c = compile(&s, &o).unwrap();
    assert!(c.warnings.iter().any(|w| w.contains("$dynamicRef")));
    // annotations are ignored
    compile(&json!({"title": "t", "description": "d", "examples": [1], "type": "integer", "$comment": "c"}), &JsonSchemaOptions::default()).unwrap();
}

#[test]
fn whitespace_policies() {
    let s = json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}, "additionalProperties": false});
    let compact = JsonSchemaOptions {
        whitespace: Whitespace::Compact,
        ..Default::default()
    };
    let r = lang_with(s.clone(), &compact);
    assert!(r.is_match(r#"{"a":[1,2]}"#) && !r.is_match(r#"{"a": [1,2]}"#));
    let flex = JsonSchemaOptions {
        whitespace: Whitespace::Flexible,
        max_whitespace: 2,
        ..Default::default()
    };
    let r = lang_with(s.clone(), &flex);
    assert!(r.is_match("{\n \"a\" :\t[ 1 ,2 ]\n}") && !r.is_match("{   \"a\": []}"));
    let custom = JsonSchemaOptions {
        whitespace: Whitespace::Pattern("\\n?".into()),
        ..Default::default()
    };
    assert!(lang_with(s.clone(), &custom).is_match("{\n\"a\":\n[1,\n2\n]}"));
    let bad = JsonSchemaOptions {
        whitespace: Whitespace::Pattern("x".into()),
        ..Default::default()
    };
    assert!(matches!(compile(&s, &bad), Err(Error::InvalidArgument(_))));
}

#[test]
fn any_object_and_choice() {
    let r = Re::new(&any_object(&JsonSchemaOptions::default()).unwrap().hir);
    assert!(r.is_match(r#"{"a": [1, {"b": null}], "c": "d"}"#) && !r.is_match("[]"));
    let r = Re::new(&choice(&["yes", "no"]));
    assert!(r.is_match("yes") && !r.is_match("\"yes\""));
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
    assert!(hirs::weight(&c.hir) < 200_000, "{}", hirs::weight(&c.hir));
    let r = Re::new(&c.hir);
    assert!(r.is_match("{}"));
    assert!(r.is_match(r#"{"p3": 1, "p17": 2, "p39": 9}"#));
    assert!(!r.is_match(r#"{"p17": 2, "p3": 1}"#));
    assert!(!r.is_match(r#"{, "p3": 1}"#));
}

#[test]
fn oversized_schemas_fail_with_a_budget_error() {
    // Nested objects whose optional properties each repeat the rest: a clear error, early.
    // (The schema itself has 30^3 nodes; deeper nesting would make the test data huge.)
    let mut inner = json!({"type": "string"});
    for _ in 0..3 {
        let mut props = serde_json::Map::new();
        for i in 0..30 {
            props.insert(format!("k{i}"), inner.clone());
        }
        inner = json!({"type": "object", "properties": props});
    }
    match compile(&inner, &JsonSchemaOptions::default()) {
        Err(Error::Budget(m)) => assert!(m.contains("automaton nodes"), "{m}"),
        other => panic!("expected a budget error, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn all_of_lines_up_prefix_items_with_items() {
    // `items` of one branch still constrains the positions another branch's prefixItems cover.
    check(
        json!({"allOf": [{"prefixItems": [true]}, {"items": false}]}),
        &["[]"],
        &["[1]", "[1, 2]"],
    );
    check(
        json!({"allOf": [{"prefixItems": [{"minimum": 3}]}], "items": {"minimum": 5}}),
        &["[5]", "[7, 5]", "[]"],
        &["[3, 5]", "[5, 4]"],
    );
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
    let r = Re::new(&c.hir);
    assert!(r.is_match(r#""a""#) && !r.is_match(r#""c""#));
}

#[test]
fn deep_any_values_fail_with_a_budget_error() {
    let o = JsonSchemaOptions {
        max_nesting_depth: 20,
        ..Default::default()
    };
    match compile(&json!({"type": "object"}), &o) {
        Err(Error::Budget(m)) => assert!(m.contains("max_nesting_depth"), "{m}"),
        other => panic!("expected a budget error, got {:?}", other.map(|_| ())),
    }
    match any_object(&o) {
        Err(Error::Budget(_)) => {}
        other => panic!("expected a budget error, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn negation() {
    check(
        json!({"not": {"type": "integer"}}),
        &["1.5", r#""a""#, "null", "[]"],
        &["1", "-3", "1.0"],
    );
    check(
        json!({"type": "integer", "not": {"minimum": 3, "maximum": 5}}),
        &["2", "6", "-1"],
        &["3", "4", "5"],
    );
    check(
        json!({"type": "string", "not": {"enum": ["a", "b"]}}),
        &[r#""c""#, r#""ab""#, r#""""#],
        &[r#""a""#, r#""b""#, r#""\u0061""#],
    );
    check(
        json!({"type": "string", "not": {"minLength": 2}}),
        &[r#""a""#, r#""""#],
        &[r#""ab""#],
    );
    // forbidden property, and `not required`
    check(
        json!({"type": "object", "properties": {"a": {"type": "integer"}}, "not": {"required": ["a"]}}),
        &["{}", r#"{"b": 1}"#],
        &[r#"{"a": 1}"#],
    );
    check(
        json!({"not": {"type": "object", "properties": {"a": {"type": "string"}}}}),
        &[r#"{"a": 1}"#, "1"],
        &[r#"{"a": "x"}"#, "{}"],
    );
    // double negation and `not` of boolean schemas
    check(json!({"not": {"not": {"type": "null"}}}), &["null"], &["1"]);
    assert!(compile(&json!({"not": {}}), &JsonSchemaOptions::default()).is_err());
    check(json!({"type": "boolean", "not": false}), &["true"], &["1"]);
    // enum values are checked against their siblings, `not` included
    check(
        json!({"enum": [1, 2, "x"], "not": {"const": 2}}),
        &["1", r#""x""#],
        &["2"],
    );
}

#[test]
fn conditionals_and_dependencies() {
    let s = json!({"type": "integer", "if": {"minimum": 10}, "then": {"maximum": 20}, "else": {"maximum": 0}});
    check(s, &["10", "20", "0", "-5"], &["21", "5"]);
    check(
        json!({"type": "object", "properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}}),
        &["{}", r#"{"b": 1}"#, r#"{"a": 1, "b": 2}"#],
        &[r#"{"a": 1}"#],
    );
    check(
        json!({"type": "object", "properties": {"a": {}, "b": {"type": "integer"}}, "dependentSchemas": {"a": {"required": ["b"], "properties": {"b": {"minimum": 5}}}}}),
        &["{}", r#"{"b": 1}"#, r#"{"a": 1, "b": 5}"#],
        &[r#"{"a": 1}"#, r#"{"a": 1, "b": 4}"#],
    );
    // draft-4/7 `dependencies` in both forms
    check(
        json!({"type": "object", "properties": {"a": {}, "b": {}}, "dependencies": {"a": ["b"], "b": {"properties": {"a": {"type": "string"}}}}}),
        &[r#"{"a": "x", "b": 1}"#, r#"{"b": 1}"#],
        &[r#"{"a": "x"}"#, r#"{"a": 1, "b": 1}"#],
    );
}

#[test]
fn contains_counts() {
    let s = json!({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}, "minContains": 2, "maxContains": 3});
    check(
        s,
        &["[5, 6]", "[1, 5, 2, 6, 7]"],
        &["[]", "[5]", "[5, 6, 7, 8]", "[1, 2]"],
    );
    check(
        json!({"contains": {"const": 1}}),
        &["[1]", "[2, 1]", "{}", "3"],
        &["[]", "[2]"],
    );
    check(
        json!({"prefixItems": [{"type": "string"}], "contains": {"type": "integer"}, "minContains": 0, "maxContains": 1}),
        &[r#"["a"]"#, r#"["a", 1]"#, r#"["a", true, 2]"#],
        &[r#"["a", 1, 2]"#, "[1]"],
    );
}

#[test]
fn unevaluated() {
    let s = json!({"type": "object", "properties": {"a": {}}, "anyOf": [{"properties": {"b": {}}}, {"properties": {"c": {}}}], "unevaluatedProperties": false});
    check(
        s,
        &["{}", r#"{"a": 1, "b": 2}"#, r#"{"b": 1, "c": 2}"#],
        &[r#"{"d": 1}"#],
    );
    let s = json!({"prefixItems": [{"type": "integer"}], "allOf": [{"prefixItems": [true, {"type": "string"}]}], "unevaluatedItems": false});
    check(s, &["[1]", r#"[1, "a"]"#], &[r#"[1, "a", 2]"#]);
    // `not` produces no annotations
    let s = json!({"properties": {"a": {}}, "not": {"properties": {"b": {"const": 1}}, "required": ["b"]}, "unevaluatedProperties": false});
    check(
        s,
        &["{}", r#"{"a": 1}"#],
        &[r#"{"a": 1, "b": 2}"#, r#"{"b": 1}"#],
    );
}
#[test]
fn any_char_matches_spell_class() {
    use super::string::{any_char, spell_class};
    use super::test_util::Re;
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
    super::test_util::assert_same_language(&super::string::encode(&dot).unwrap(), &all);
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
fn unique_items_over_finite_domains() {
    check(
        json!({"type": "array", "items": {"type": "boolean"}, "uniqueItems": true}),
        &["[]", "[true]", "[false, true]"],
        &["[true, true]", "[false, true, false]"],
    );
    check(
        json!({"prefixItems": [{"enum": [1, 2]}, {"enum": [1, 2, 3]}], "items": false, "uniqueItems": true}),
        &["[1]", "[1, 2]", "[2, 3]", "[1.0, 3]"],
        &["[1, 1]", "[2, 2.0]", "[1, 2, 3]"],
    );
    // an unbounded domain is refused
    let (k, _) = schema_err(
        json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true}),
        &JsonSchemaOptions::default(),
    );
    assert_eq!(k, "uniqueItems");
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

#[test]
fn non_integers_with_bounds() {
    check(
        json!({"oneOf": [{"type": "integer"}, {"minimum": 2}]}),
        &["1", "2.5", "-7"],
        &["3", "2", "1.5"],
    );
}

/// Shallow schemas compile on the calling thread: 32 nested levels fit a 1 MiB stack.
#[test]
fn shallow_schemas_fit_small_stacks() {
    let mut s = json!({"type": "integer"});
    for _ in 0..15 {
        s = json!({"type": "object", "properties": {"a": s}, "required": ["a"]});
    }
    let h = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || compile(&s, &JsonSchemaOptions::default()).map(|c| c.hir))
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    let r = Re::new(&h);
    let mut t = "1".to_string();
    for _ in 0..15 {
        t = format!("{{\"a\": {t}}}");
    }
    assert!(r.is_match(&t));
}

#[test]
fn spell_not_equals_the_spelled_complement() {
    use super::string::{spell_class, spell_not};
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
fn spelled_not_in_equals_the_encoded_complement() {
    use super::compile::{not_in, spelled_not_in};
    use super::string::encode;
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

#[test]
fn any_string_content_compiles_to_the_same_language() {
    use super::string::any_char;
    use regex_syntax::hir::Hir;
    // The marked path builds `any_char()*` straight into states; regex-automata's compiler
    // builds it from the HIR.
    let body = Hir::repetition(regex_syntax::hir::Repetition {
        min: 0,
        max: None,
        greedy: true,
        sub: Box::new(any_char()),
    });
    let quoted = Hir::concat(vec![Hir::literal(*b"\""), body, Hir::literal(*b"\"")]);
    let marked = crate::nfa_build::sep_list(quoted.clone(), Hir::literal(*b","));
    let plain = Hir::concat(vec![
        quoted.clone(),
        Hir::repetition(regex_syntax::hir::Repetition {
            min: 0,
            max: None,
            greedy: true,
            sub: Box::new(Hir::concat(vec![Hir::literal(*b","), quoted])),
        }),
    ]);
    assert!(crate::nfa_build::has_marks(&marked) && !crate::nfa_build::has_marks(&plain));
    super::test_util::assert_same_language(&marked, &plain);
}

#[test]
fn one_of_branches_separated_by_closed_objects() {
    // With `one_of = AnyOf`, a warning says the branches were not provably disjoint.
    let proven = |schema: Value| {
        let o = JsonSchemaOptions {
            one_of: OneOf::AnyOf,
            ..Default::default()
        };
        let w = compile(&schema, &o).unwrap().warnings;
        !w.iter().any(|w| w.contains("not provably disjoint"))
    };
    let closed = |props: Value, required: Value| json!({"properties": props, "required": required, "additionalProperties": false});
    let a = closed(
        json!({"path": {"type": "string"}, "kind": {"enum": ["asset", "file"]}}),
        json!(["kind", "path"]),
    );
    let b = closed(
        json!({"family": {"type": "string"}, "style": {"type": "string"}}),
        json!(["style"]),
    );
    // each branch requires a property the other does not allow
    assert!(proven(json!({"type": "object", "oneOf": [a, b]})));
    // one such property is enough; the other branch may be open
    assert!(proven(
        json!({"type": "object", "oneOf": [a, {"required": ["style"]}]})
    ));
    // or forbid it with a `false` property schema
    assert!(proven(json!({"type": "object", "oneOf": [
        {"required": ["x"]}, {"properties": {"x": false}}
    ]})));
    // a required property of the schema holding the oneOf counts for every branch
    assert!(proven(
        json!({"type": "object", "required": ["style"], "oneOf": [
            a, {"properties": {"style": {}}}
        ]})
    ));
    // not proven: non-objects match both, the other branch declares the name, it is open,
    // or one of its patterns admits the name
    assert!(!proven(json!({"oneOf": [a, {"required": ["style"]}]})));
    assert!(!proven(json!({"type": "object", "oneOf": [
        a, closed(json!({"kind": {}, "path": {}, "style": {}}), json!([]))
    ]})));
    assert!(!proven(json!({"type": "object", "oneOf": [
        {"required": ["x"]}, {"required": ["y"]}
    ]})));
    assert!(!proven(json!({"type": "object", "oneOf": [
        {"required": ["x"]},
        {"additionalProperties": false, "patternProperties": {"x": {}}}
    ]})));
    assert!(proven(json!({"type": "object", "oneOf": [
        {"required": ["x"]},
        {"additionalProperties": false, "patternProperties": {"^y": {}}}
    ]})));
    // closed by patternProperties: a required name no pattern matches is not allowed ...
    let scale = json!({"type": "object", "patternProperties": {"^[0-9]+x$": {}},
        "additionalProperties": false, "minProperties": 1});
    let locale = json!({"type": "object", "patternProperties": {"^[a-z]{2,3}$": {}},
        "additionalProperties": false, "minProperties": 1});
    let platform = closed(json!({"ios": {}, "android": {}}), json!(["ios", "android"]));
    assert!(proven(json!({"oneOf": [platform, scale]})));
    // ... but "ios" is a locale key, and "android" is not: still separated
    assert!(proven(json!({"oneOf": [platform, locale]})));
    assert!(!proven(json!({"oneOf": [
        closed(json!({"ios": {}}), json!(["ios"])), locale
    ]})));
    // two closed branches whose key languages do not meet, and `{}` excluded
    assert!(proven(json!({"oneOf": [scale, locale]})));
    let open_min = |v: &Value| {
        let mut v = v.clone();
        v.as_object_mut().unwrap().remove("minProperties");
        v
    };
    assert!(!proven(
        json!({"oneOf": [open_min(&scale), open_min(&locale)]})
    ));
    assert!(proven(
        json!({"minProperties": 1, "oneOf": [open_min(&scale), open_min(&locale)]})
    ));
    // key languages that meet ("ab")
    assert!(!proven(json!({"type": "object", "oneOf": [
        {"patternProperties": {"^a": {}}, "additionalProperties": false, "minProperties": 1},
        {"patternProperties": {"b$": {}}, "additionalProperties": false, "minProperties": 1}
    ]})));
    // a name forbidden through a `false` pattern schema
    assert!(proven(json!({"type": "object", "oneOf": [
        {"required": ["ios"]}, {"patternProperties": {"^i": false}}
    ]})));
    check(
        json!({"oneOf": [platform, scale, locale]}),
        &[
            r#"{"ios": 1, "android": 2}"#,
            r#"{"2x": 1}"#,
            r#"{"en": 1, "fr": 2}"#,
            r#"{"ios": 1}"#,
        ],
        &[
            r#"{}"#,
            r#"{"2x": 1, "en": 2}"#,
            r#"{"android": 1}"#,
            r#"{"ios": 1, "android": 2, "en": 3}"#,
        ],
    );
    // the language: exactly one branch (here: either closed object, nothing mixed)
    check(
        json!({"type": "object", "oneOf": [a, b]}),
        &[
            r#"{"path": "/x", "kind": "file"}"#,
            r#"{"family": "Arial", "style": "bold"}"#,
            r#"{"style": "bold"}"#,
        ],
        &[
            r#"{"path": "/x", "kind": "file", "family": "Arial"}"#,
            r#"{"path": "/x", "kind": "file", "extra": 1}"#,
            r#"{"family": "Arial"}"#,
            "5",
        ],
    );
}

#[test]
fn string_dfas_compile_to_the_same_language_as_their_expressions() {
    use super::compile::pattern_language;
    use super::hirs::{concat, lit, rep};
    use super::string::{dot_all, encode};
    use super::strlang::{combine, combined_dfa};
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
    ];
    for (pats, (min, max), negs) in cases {
        let mut pos: Vec<Hir> = pats.iter().map(|p| pattern_language(p).unwrap()).collect();
        pos.push(rep(dot_all(), *min, *max));
        let neg: Vec<Hir> = negs.iter().map(|p| pattern_language(p).unwrap()).collect();
        let d = combined_dfa(&pos, &neg).unwrap().expect("not empty");
        let mark = crate::nfa_build::char_dfa_mark(&d).expect("uniform non-ASCII edges");
        assert!(crate::nfa_build::has_marks(&mark));
        let expr = encode(&combine(&pos, &neg).unwrap().unwrap()).unwrap();
        super::test_util::assert_same_language(&quoted(mark), &quoted(expr));
    }
    // some non-ASCII characters but not all: no mark (the expression is used)
    let d = combined_dfa(&[pattern_language("^[a-zé]+$").unwrap()], &[])
        .unwrap()
        .unwrap();
    assert!(crate::nfa_build::char_dfa_mark(&d).is_none());
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

//! Tests of `anyOf`/`oneOf`.

use serde_json::json;

use super::*;

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

//! Tests of `$ref`, recursion and `allOf` merging.

use serde_json::json;

use super::*;

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

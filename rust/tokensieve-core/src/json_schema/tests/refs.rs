//! Tests of `$ref`, recursion and `allOf` merging.

use serde_json::json;

use crate::json_schema::Recursion;

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
    // unrolled twice, or two calls open on the stack: the same language
    let unrolled = JsonSchemaOptions {
        recursion: Recursion::Unroll,
        max_recursion_depth: 2,
        ..Default::default()
    };
    let stacked = JsonSchemaOptions {
        max_stack_depth: 2,
        ..Default::default()
    };
    for o in [&unrolled, &stacked] {
        let r = lang_with(s.clone(), o);
        assert!(r.is_match(r#"{"v": 1}"#));
        assert!(r.is_match(r#"{"v": 1, "next": {"v": 2}}"#));
        assert!(!r.is_match(r#"{"v": 1, "next": {"v": 2, "next": {"v": 3}}}"#));
    }
    let deep = format!("{}{}", r#"{"v": 1, "next": "#.repeat(40), r#"{"v": 0}"#) + &"}".repeat(40);
    assert!(lang(s).is_match(&deep));
    // a required recursive field that never ends: through the stack the branch is simply
    // empty; unrolled, the cut is an error unless truncate_recursion
    let s = json!({
        "definitions": {"t": {"type": "object", "properties": {"kid": {"$ref": "#/definitions/t"}}, "required": ["kid"]}},
        "anyOf": [{"type": "null"}, {"$ref": "#/definitions/t"}]
    });
    let r = lang(s.clone());
    assert!(r.is_match("null"));
    assert!(!r.is_match(r#"{"kid": null}"#));
    let (k, _) = schema_err(s.clone(), &unrolled);
    assert_eq!(k, "$ref");
    let t = JsonSchemaOptions {
        truncate_recursion: true,
        ..unrolled.clone()
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

/// `schema` and `plain` (the same validation keywords without the annotations) accept and
/// reject the same texts, and those are `ok` and `bad`.
fn same_language(schema: Value, plain: Value, ok: &[&str], bad: &[&str]) {
    let (r, p) = (lang(schema.clone()), lang(plain.clone()));
    for t in ok.iter().chain(bad) {
        assert_eq!(
            r.is_match(t),
            p.is_match(t),
            "{schema} and {plain} differ on {t}"
        );
    }
    check(schema, ok, bad);
}

#[test]
fn all_of_keeps_one_of_two_different_annotations() {
    same_language(
        json!({"allOf": [
            {"type": "integer", "minimum": 1, "description": "one", "title": "A", "x-foo": 1},
            {"maximum": 5, "description": "two", "title": "B", "x-foo": [2]}
        ]}),
        json!({"type": "integer", "minimum": 1, "maximum": 5}),
        &["1", "3", "5"],
        &["0", "6", "2.5", "\"3\""],
    );
    // under a property, with the keys real schemas repeat (and an unknown keyword)
    same_language(
        json!({"type": "object", "properties": {"a": {"allOf": [
            {"type": "string", "x-intellij-html-description": "<b>a</b>", "examples": ["x"],
             "default": "x", "$comment": "c", "deprecated": true, "readOnly": true, "foo": 1},
            {"maxLength": 2, "x-intellij-html-description": "<i>a</i>", "examples": ["y"],
             "default": "y", "$comment": "d", "deprecated": false, "writeOnly": true, "foo": 2}
        ]}}, "required": ["a"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"a": {"type": "string", "maxLength": 2}},
               "required": ["a"], "additionalProperties": false}),
        &[r#"{"a": ""}"#, r#"{"a": "xy"}"#],
        &[r#"{"a": "xyz"}"#, r#"{"a": 1}"#, "{}"],
    );
    // a user's x-ts-* key is an annotation like any other x- key
    same_language(
        json!({"allOf": [{"type": "string", "x-ts-notIn": ["a"]}, {"x-ts-notIn": ["b"]}]}),
        json!({"type": "string"}),
        &["\"a\"", "\"b\"", "\"c\""],
        &["1", "null"],
    );
}

#[test]
fn all_of_still_merges_or_refuses_validation_keywords() {
    // two different `const`: nothing is valid (at the top an error, under a property the
    // property cannot be present)
    let (k, p) = schema_err(
        json!({"allOf": [{"const": 1, "title": "a"}, {"const": 2, "title": "b"}]}),
        &JsonSchemaOptions::default(),
    );
    assert_eq!((k.as_str(), p.as_str()), ("", ""));
    check(
        json!({"type": "object", "properties": {"a": {"allOf": [
            {"const": 1, "x-foo": "a"}, {"const": 2, "x-foo": "b"}
        ]}}}),
        &["{}"],
        &[r#"{"a": 1}"#, r#"{"a": 2}"#],
    );
    // a validity keyword that cannot be merged is still refused, annotations or not
    let (k, _) = schema_err(
        json!({"type": "string", "allOf": [
            {"format": "email", "x-foo": 1},
            {"format": "date", "x-foo": 2}
        ]}),
        &JsonSchemaOptions::default(),
    );
    assert_eq!(k, "format");
    // two different `contains` each keep their own count; `uniqueItems` true wins
    check(
        json!({"type": "array", "allOf": [
            {"contains": {"type": "integer"}, "maxContains": 1, "x-foo": 1},
            {"contains": {"type": "string"}, "minContains": 2, "x-foo": 2}
        ]}),
        &[r#"[1, "a", "b"]"#, r#"["a", null, "b", 2]"#],
        &[r#"[1, "a"]"#, r#"[1, 2, "a", "b"]"#, r#"["a", "b"]"#, "[]"],
    );
    check(
        json!({"type": "array", "items": {"enum": [1, 2]}, "maxItems": 3,
               "allOf": [{"uniqueItems": true}, {"uniqueItems": false}]}),
        &["[1, 2]", "[]"],
        &["[1, 1]"],
    );
}

#[test]
fn listed_values_are_checked_against_the_whole_schema() {
    // negations the algebra has no form for (patternProperties, an object const) are exact
    // when a const/enum of the conjunction lists the values: each is validated
    check(
        // valid: some name matching f.*o has a value that is no integer
        json!({"allOf": [{"enum": [{"foo": "bar", "fo": 1}, {"fo": 1}, {"x": "y"}, 3]},
            {"not": {"patternProperties": {"f.*o": {"type": "integer"}}}}]}),
        &[r#"{"foo": "bar", "fo": 1}"#],
        // 3 is no object: patternProperties holds, so its negation fails
        &[r#"{"fo": 1}"#, r#"{"x": "y"}"#, "3", "4", "{}"],
    );
    check(
        json!({"const": [1, {"a": 2}], "not": {"const": [1, {"a": 3}]}}),
        &[r#"[1, {"a": 2}]"#],
        &[r#"[1, {"a": 3}]"#, "[1]"],
    );
    // every listed value fails: nothing satisfies the schema
    let (k, _) = schema_err(
        json!({"enum": [{"x": 1}], "not": {"patternProperties": {"x": {"type": "integer"}}}}),
        &JsonSchemaOptions::default(),
    );
    assert_eq!(k, "");
}

#[test]
fn dynamic_refs_follow_the_dynamic_scope() {
    // to a $dynamicAnchor of the same resource: like $ref
    check(
        json!({"$id": "https://x.test/root", "type": "array",
            "items": {"$dynamicRef": "#items"},
            "$defs": {"foo": {"$dynamicAnchor": "items", "type": "string"}}}),
        &[r#"["a", "b"]"#, "[]"],
        &["[1]"],
    );
    // an extension re-points the anchor: the outermost resource in scope wins
    let tree = json!({"$id": "https://x.test/tree", "$dynamicAnchor": "node", "type": "object",
        "properties": {"data": true, "kids": {"type": "array", "items": {"$dynamicRef": "#node"}}}});
    let strict = json!({"$id": "https://x.test/strict", "$dynamicAnchor": "node",
        "$ref": "tree", "properties": {"data": {"type": "integer"}}});
    let o = JsonSchemaOptions {
        registry: vec![("https://x.test/tree".into(), tree.to_string())],
        ..Default::default()
    };
    let r = lang_with(strict, &o);
    assert!(r.is_match(r#"{"data": 1, "kids": [{"data": 2}]}"#));
    // the nested node is checked against the extension too
    assert!(!r.is_match(r#"{"data": 1, "kids": [{"data": "x"}]}"#));
    assert!(!r.is_match(r#"{"data": "x"}"#));
    // reached through if/then/else the scope is not tracked: an error, never a guess
    let (k, _) = schema_err(
        json!({"$id": "https://x.test/m", "if": true, "then": {"$ref": "#/$defs/l"},
            "$defs": {"l": {"$id": "l", "items": {"$dynamicRef": "#t"},
                "$defs": {"t": {"$dynamicAnchor": "t"}}}}}),
        &JsonSchemaOptions::default(),
    );
    assert_eq!(k, "$dynamicRef");
}

//! Tests of arrays: items, counts, uniqueItems, contains.

use serde_json::json;

use super::*;

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
    // an unbounded domain of other values than strings and numbers is refused
    let (k, _) = schema_err(
        json!({"type": "array", "items": {"type": "object"}, "uniqueItems": true}),
        &JsonSchemaOptions::default(),
    );
    assert_eq!(k, "uniqueItems");
    // and so are numbers whose values are counted (bounds that leave one value, a
    // `multipleOf` under bounds); bounds alone are enforced by the matcher
    for items in [
        json!({"type": "number", "minimum": 1, "maximum": 1.0}),
        json!({"type": "number", "minimum": 0, "maximum": 3, "multipleOf": 0.5}),
    ] {
        let (k, _) = schema_err(
            json!({"type": "array", "items": items, "uniqueItems": true}),
            &JsonSchemaOptions::default(),
        );
        assert_eq!(k, "uniqueItems");
    }
}

/// `uniqueItems` lists every array of distinct values: the listed arrays must still satisfy
/// `contains`, its counts, a negated `contains` and negated `items` (they were dropped).
#[test]
fn unique_items_keep_contains() {
    check(
        json!({"type": "array", "items": {"enum": [1, 2]}, "contains": {"const": 1}, "uniqueItems": true}),
        &["[1]", "[1, 2]", "[2, 1]"],
        &["[]", "[2]"],
    );
    check(
        json!({"items": {"type": "boolean"}, "contains": {"const": true}, "uniqueItems": true}),
        &["[true]", "[false, true]", "{}"],
        &["[]", "[false]"],
    );
    check(
        json!({"items": {"enum": [1, 2]}, "uniqueItems": true, "not": {"contains": {"const": 1}}}),
        &["[]", "[2]"],
        &["[1]", "[2, 1]", "[1, 2]"],
    );
    check(
        json!({"items": {"enum": [1, 2, 3]}, "uniqueItems": true, "contains": {"enum": [1, 2]}, "minContains": 2}),
        &["[1, 2]", "[3, 2, 1]"],
        &["[1]", "[1, 3]", "[3]"],
    );
    check(
        json!({"items": {"enum": [1, 2, 3]}, "uniqueItems": true, "contains": {"enum": [1, 2]}, "maxContains": 1}),
        &["[1]", "[3, 2]"],
        &["[]", "[3]", "[1, 2]", "[2, 3, 1]"],
    );
    check(
        json!({"prefixItems": [{"enum": [1, 2]}, {"enum": [1, 2, 3]}], "items": false, "uniqueItems": true, "contains": {"const": 3}}),
        &["[1, 3]", "[2, 3]"],
        &["[1]", "[1, 2]", "[2, 1]"],
    );
    check(
        json!({"items": {"enum": [1, 2]}, "uniqueItems": true, "not": {"items": {"const": 1}}}),
        &["[2]", "[1, 2]"],
        &["[]", "[1]"],
    );
}

/// A keyword that means nothing alone in its branch (`additionalItems` without a tuple
/// `items`, `minContains` without `contains`, a draft-4 `exclusiveMinimum: true` without
/// `minimum`) keeps meaning nothing when an `allOf` merges the branches.
#[test]
fn merged_branches_keep_idle_keywords_idle() {
    check(
        json!({"allOf": [{"items": [{"type": "integer"}]}, {"additionalItems": false}]}),
        &["[1, 2]", "[1]", r#"[1, "a"]"#],
        &[r#"["a"]"#],
    );
    check(
        json!({"allOf": [{"additionalItems": false}, {"items": [{"type": "integer"}], "additionalItems": {"type": "string"}}]}),
        &["[1]", r#"[1, "a"]"#],
        &["[1, 2]"],
    );
    check(
        json!({"allOf": [{"contains": {"const": 1}}, {"minContains": 2}]}),
        &["[1]", "[2, 1]"],
        &["[2]", "[]"],
    );
    check(
        json!({"allOf": [{"minimum": 5}, {"exclusiveMinimum": true}]}),
        &["5", "6"],
        &["4"],
    );
}

/// Counts written as integral decimals (`2.0`) are counts everywhere, also inside `not`.
#[test]
fn integral_decimal_counts_inside_not() {
    check(
        json!({"not": {"contains": {"const": 1}, "minContains": 2.0}}),
        &["[1]", "[]", "[2, 1]"],
        &["[1, 1]", "[1, 2, 1]"],
    );
    check(
        json!({"not": {"contains": {"const": 1}, "maxContains": 1.0}}),
        &["[]", "[1, 1]"],
        &["[1]", "[2, 1]"],
    );
}

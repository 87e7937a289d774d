//! Per-keyword tests: each schema with JSON texts it must accept and reject.

use serde_json::{json, Value};

use super::test_util::Re;
use super::*;
use crate::error::Error;

mod arrays;
mod objects;
mod one_of;
mod refs;
mod scalars;

fn lang(schema: Value) -> Re {
    lang_with(schema, &JsonSchemaOptions::default())
}

fn lang_with(schema: Value, o: &JsonSchemaOptions) -> Re {
    Re::new(&compile(&schema, o).unwrap().expr)
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
fn unsupported_and_lenient() {
    let s = json!({"type": "object", "properties": {"a": {"type": "array", "items": {"$recursiveRef": "#"}}}});
    let (k, p) = schema_err(s.clone(), &JsonSchemaOptions::default());
    assert_eq!(
        (k.as_str(), p.as_str()),
        ("$recursiveRef", "/properties/a/items")
    );
    // a $dynamicRef to nothing fails like a $ref to nothing
    let (k, _) = schema_err(
        json!({"items": {"$dynamicRef": "#x"}}),
        &JsonSchemaOptions::default(),
    );
    assert_eq!(k, "$ref");
    let o = JsonSchemaOptions {
        lenient: true,
        ..Default::default()
    };
    let c = compile(&s, &o).unwrap();
    assert!(c.warnings.iter().any(|w| w.contains("$recursiveRef")));
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
    let r = Re::new(&any_object(&JsonSchemaOptions::default()).unwrap().expr);
    assert!(r.is_match(r#"{"a": [1, {"b": null}], "c": "d"}"#) && !r.is_match("[]"));
    let r = Re::new(&choice(&["yes", "no"]));
    assert!(r.is_match("yes") && !r.is_match("\"yes\""));
}

#[test]
fn oversized_schemas_fail_with_a_budget_error() {
    // `levels` of nested objects of `width` string properties each
    let nested = |levels: usize, width: usize| {
        let mut inner = json!({"type": "string"});
        for _ in 0..levels {
            let mut props = serde_json::Map::new();
            for i in 0..width {
                props.insert(format!("k{i}"), inner.clone());
            }
            inner = json!({"type": "object", "properties": props});
        }
        inner
    };
    // 27,000 properties: no copies (one shared sequence of members per object), so within the
    // budgets, cut into rules
    assert!(compile(&nested(3, 30), &JsonSchemaOptions::default()).is_ok());
    // 160,000: past what one compile may hold (expression nodes), a clear error, early
    match compile(&nested(4, 20), &JsonSchemaOptions::default()) {
        Err(Error::Budget(m)) => assert!(m.contains("the schema expands to"), "{m}"),
        other => panic!("expected a budget error, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn deep_any_values_compile_small() {
    // one copy of the value, called through a stack: the size does not grow with the depth
    let at = |d: u32| {
        let o = JsonSchemaOptions {
            max_nesting_depth: d,
            ..Default::default()
        };
        let w = compile(&json!({"type": "object"}), &o).unwrap().weight();
        (w, any_object(&o).unwrap().weight())
    };
    assert_eq!(at(3), at(1_000_000));
    let re = Re::new(
        &any_object(&JsonSchemaOptions {
            max_nesting_depth: 20,
            ..Default::default()
        })
        .unwrap()
        .expr,
    );
    let nested = |n: usize| format!("{{\"a\": {}1{}}}", "[".repeat(n), "]".repeat(n));
    // the object's values nest 20 levels below it
    assert!(re.is_match(&nested(20)));
    assert!(!re.is_match(&nested(21)));
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

/// Shallow schemas compile on the calling thread: 32 nested levels fit a 1 MiB stack.
#[test]
fn shallow_schemas_fit_small_stacks() {
    let mut s = json!({"type": "integer"});
    for _ in 0..15 {
        s = json!({"type": "object", "properties": {"a": s}, "required": ["a"]});
    }
    let h = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || compile(&s, &JsonSchemaOptions::default()).map(|c| c.expr))
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

/// The constraints the algebra adds (excluded strings, negated patterns and multipleOf,
/// non-integral numbers, counted-from `contains`, some extra property) are typed, never
/// keywords: `x-ts-*` keys a user writes (the names they once had) are plain `x-` annotations
/// with no effect, at the root, inside sub-schemas, behind references or in registry documents,
/// and `x-ts-fraction` is an unknown type name.
#[test]
fn internal_keywords_cannot_be_forged() {
    check(
        json!({"type": "string", "x-ts-notIn": ["a"]}),
        &["\"a\"", "\"b\""],
        &["1"],
    );
    check(
        json!({"type": "number", "x-ts-notMultipleOf": 2}),
        &["4", "3", "0.5"],
        &["\"4\""],
    );
    check(
        json!({"type": "string", "x-ts-notPattern": ["^a"], "x-ts-allPatterns": ["^b"]}),
        &["\"abc\""],
        &["null"],
    );
    check(
        json!({"type": "array", "contains": {"const": 1}, "x-ts-containsFrom": 1}),
        &["[1]", "[1, 2]"],
        &["[2]"],
    );
    check(
        json!({"type": "object", "x-ts-someExtra": {"names": [], "patterns": [], "schema": true}}),
        &["{}"],
        &["[]"],
    );
    check(
        json!({"properties": {"a": {"$ref": "#/$defs/s"}}, "$defs": {"s": {"type": "string", "x-ts-notIn": ["x"]}}}),
        &["{\"a\": \"x\"}"],
        &["{\"a\": 1}"],
    );
    let o = JsonSchemaOptions {
        registry: vec![(
            "http://example.com/s.json".to_string(),
            r#"{"type": "string", "x-ts-notIn": ["x"]}"#.to_string(),
        )],
        ..JsonSchemaOptions::default()
    };
    let r = lang_with(json!({"$ref": "http://example.com/s.json"}), &o);
    assert!(r.is_match("\"x\""));
    for s in [
        json!({"type": ["x-ts-fraction"]}),
        json!({"type": "x-ts-fraction"}),
        json!({"items": {"type": ["integer", "x-ts-fraction"]}}),
    ] {
        let (k, _) = schema_err(s, &JsonSchemaOptions::default());
        assert_eq!(k, "type");
    }
    let (_, p) = schema_err(
        json!({"items": {"type": ["integer", "x-ts-fraction"]}}),
        &JsonSchemaOptions::default(),
    );
    assert_eq!(p, "/items");
    // beside the algebra's own constraints, a user's key still changes nothing
    check(
        json!({"allOf": [{"type": "string", "x-ts-notIn": ["a"]}, {"not": {"const": "b"}}]}),
        &["\"a\"", "\"c\""],
        &["\"b\"", "1"],
    );
}

/// Negations whose constraints sit inside a sub-schema (a property, a prefix item, the items a
/// negated `items` counts) keep their typed constraints there.
#[test]
fn typed_constraints_in_sub_schemas() {
    // `a` present and not "x": a string other than "x" (typed), or not a string
    check(
        json!({"not": {"properties": {"a": {"enum": ["x"]}}}}),
        &[
            "{\"a\": \"y\"}",
            "{\"a\": 1}",
            "{\"a\": \"y\", \"b\": \"x\"}",
        ],
        &["{\"a\": \"x\"}", "{}", "{\"b\": \"y\"}"],
    );
    check(
        json!({"type": "object", "properties": {"a": {"type": "string"}},
               "not": {"properties": {"a": {"pattern": "^x"}}}}),
        &["{\"a\": \"yx\"}"],
        &["{\"a\": \"xy\"}", "{\"a\": 1}", "{}"],
    );
    check(
        json!({"type": "array", "maxItems": 2,
               "not": {"prefixItems": [{"multipleOf": 2}]}}),
        &["[3]", "[3, 4]", "[1.5]"],
        &["[4]", "[]", "[4, 3]", "[\"a\"]"],
    );
    // a `const` whose value must satisfy a typed constraint, checked on the value
    check(
        json!({"allOf": [{"not": {"properties": {"a": {"enum": ["x"]}}}},
                         {"const": {"a": "y"}}]}),
        &["{\"a\": \"y\"}"],
        &["{\"a\": \"x\"}"],
    );
    // counting the items that violate `items` negates them again, here a typed violation (a
    // string other than "x"): negated once more, it is "x" again
    check(
        json!({"type": "array", "not": {"items": {"enum": ["x"]}}}),
        &["[\"y\"]", "[1]", "[\"x\", 2]", "[null, \"x\"]"],
        &["[]", "[\"x\"]", "[\"x\", \"x\"]"],
    );
}

/// A validity keyword whose value is not what the meta-schema allows is a `SchemaError`
/// naming it, wherever it stands (also where its type does not apply), never ignored.
#[test]
fn malformed_keyword_values_are_refused() {
    let o = JsonSchemaOptions::default();
    let cases = [
        ("uniqueItems", json!(5)),
        ("uniqueItems", json!("yes")),
        ("minItems", json!(-1)),
        ("maxLength", json!(1.5)),
        ("minContains", json!("2")),
        ("required", json!(true)),
        ("required", json!([1])),
        ("type", json!(3)),
        ("enum", json!("a")),
        ("properties", json!([])),
        ("properties", json!({"a": 1})),
        ("items", json!("x")),
        ("contains", json!(1)),
        ("not", json!([])),
        ("anyOf", json!({})),
        ("pattern", json!(1)),
        ("format", json!(false)),
        ("multipleOf", json!(0)),
        ("multipleOf", json!(-2)),
        ("minimum", json!("1")),
        ("exclusiveMaximum", json!(null)),
        ("dependentRequired", json!({"a": "b"})),
        ("dependencies", json!({"a": 1})),
        ("nullable", json!(1)),
    ];
    for (k, v) in cases {
        // beside a type it does not apply to, inside a property and inside `not`
        for s in [
            json!({"type": "string", k: v.clone()}),
            json!({"properties": {"p": {k: v.clone()}}}),
            json!({"not": {"type": "null", k: v.clone()}}),
        ] {
            let (kw, _) = schema_err(s, &o);
            assert_eq!(kw, k);
        }
    }
    // the forms the meta-schemas allow still compile
    for s in [
        json!({"minItems": 2.0, "uniqueItems": false, "exclusiveMinimum": true, "minimum": 1}),
        json!({"items": [{"type": "null"}], "additionalItems": false}),
        json!({"dependencies": {"a": ["b"], "c": {"required": ["d"]}}, "multipleOf": 0.5}),
    ] {
        compile(&s, &o).unwrap();
    }
}

/// `levels` of nesting: arrays inside an object's `const`, with brackets inside strings too.
fn nested_text(levels: usize) -> String {
    let inner = levels - 1; // the outer object is one level
    format!(
        r#"{{"description": "[[{{\"]", "const": {}"x]}}\\"{}}}"#,
        "[".repeat(inner),
        "]".repeat(inner)
    )
}

#[test]
fn schema_text_nests_at_most_128_levels() {
    assert_eq!(MAX_TEXT_DEPTH, 128);
    for levels in [1, 2, 127, 128] {
        let v = parse_text("the schema", &nested_text(levels)).unwrap();
        let mut depth = 0;
        let mut node = &v;
        while let Some(next) = node
            .as_object()
            .map(|o| &o["const"])
            .or(node.as_array().map(|a| &a[0]))
        {
            depth += 1;
            node = next;
        }
        assert_eq!(depth, levels, "{levels}");
    }
    for text in [nested_text(129), nested_text(100_000), "[".repeat(129)] {
        match parse_text("the schema", &text) {
            Err(Error::Schema { message, .. }) => {
                assert!(message.contains("more than 128 levels"), "{message}")
            }
            other => panic!("expected a schema error, got {other:?}"),
        }
    }
    // invalid JSON within the depth is still invalid JSON, and never deeper than the scan saw
    for text in [
        "[".repeat(128),
        "[1]]".to_string() + &"[".repeat(200),
        r#"{"a": "\"}"#.into(),
    ] {
        assert!(matches!(
            parse_text("the schema", &text),
            Err(Error::InvalidArgument(_)) | Err(Error::Schema { .. })
        ));
    }
    let exact = parse_text("s", r#"{"minimum": 1.00000000000000000001}"#).unwrap();
    assert_eq!(exact["minimum"].to_string(), "1.00000000000000000001");
}

#[test]
fn registry_documents_nest_at_most_128_levels() {
    for levels in [127, 128] {
        let mut o = JsonSchemaOptions::default();
        let doc = nested_text(levels);
        o.set("registry", &format!(r#"{{"urn:a": {doc}}}"#))
            .unwrap();
        assert_eq!(o.registry.len(), 1);
        // the canonical form (the cache key's) holds the document, not null
        assert!(o.canonical().contains("description"), "{levels}");
        // the document as stored reads back as it was written (compile_here reads it so)
        let stored = parse_text("registry document urn:a", &o.registry[0].1).unwrap();
        assert_eq!(stored, parse_text("the schema", &doc).unwrap());
    }
    let mut o = JsonSchemaOptions::default();
    match o.set("registry", &format!(r#"{{"urn:a": {}}}"#, nested_text(129))) {
        Err(Error::Schema { message, .. }) => {
            assert!(message.contains("more than 128 levels"), "{message}")
        }
        other => panic!("expected a schema error, got {other:?}"),
    }
}

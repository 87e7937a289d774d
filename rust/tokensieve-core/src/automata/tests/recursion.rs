//! Recursive `$ref`s through the stack against unrolling: a schema whose recursion goes through
//! one `$ref` target, compiled as calls on a stack bounded to `n` open calls, must have exactly
//! the language of the same schema unrolled to the same depth (the target copied into itself,
//! which is how every recursive `$ref` was compiled before the stack). The walk compares
//! acceptance and liveness at every pair of states, so it also checks that the stack's liveness
//! (`automata::depth`) kills exactly the states that cannot finish within the bound.

use serde_json::{json, Value};

use crate::automata::dfa::{LazyDfa, DEAD};
use crate::json_schema::{compile, AdditionalProperties, JsonSchemaOptions, Recursion};
use crate::regex::RegexOptions;

use super::counters::same_language;

pub(super) fn big() -> RegexOptions {
    RegexOptions {
        max_states: 2_000_000,
        ..Default::default()
    }
}

pub(super) fn dfa(schema: &Value, o: &JsonSchemaOptions) -> LazyDfa {
    compile(schema, o).unwrap().dfa("test", &big()).unwrap()
}

/// Schemas recursing through one target; `true` when the target is the root (unrolling then
/// allows one level more: the root itself is not counted as an expansion).
fn cases() -> Vec<(&'static str, Value, bool)> {
    vec![
        (
            "tree",
            json!({"type": "object", "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#"}}},
                "required": ["value"]}),
            true,
        ),
        (
            "linked list",
            json!({"$defs": {"node": {"type": "object", "properties": {
                "v": {"type": "string", "maxLength": 3},
                "next": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/node"}]}},
                "required": ["v", "next"]}},
                "$ref": "#/$defs/node"}),
            false,
        ),
        (
            "nested comments",
            json!({"type": "object", "properties": {"comments": {"type": "array",
                "items": {"$ref": "#/$defs/c"}}},
                "$defs": {"c": {"type": "object", "properties": {
                    "text": {"type": "string", "maxLength": 2},
                    "replies": {"type": "array", "items": {"$ref": "#/$defs/c"}, "maxItems": 2}},
                    "required": ["text"]}}}),
            false,
        ),
        (
            "meta-schema-like",
            json!({"$defs": {"s": {"type": "object", "properties": {
                "type": {"enum": ["string", "object", "array"]},
                "properties": {"type": "object", "additionalProperties": {"$ref": "#/$defs/s"}},
                "items": {"$ref": "#/$defs/s"}}}},
                "$ref": "#/$defs/s"}),
            false,
        ),
        (
            // an array needs an item, the item may be the array again: at the bound `[` is dead
            "required call",
            json!({"anyOf": [{"type": "integer"},
                {"type": "array", "items": {"$ref": "#"}, "minItems": 1, "maxItems": 2}]}),
            true,
        ),
        (
            // the call comes bytes after the choice that needs it: at the bound the inner
            // object's `{` is dead although a path through the graph goes on
            "call after a choice",
            json!({"type": "object", "properties": {"a": {"anyOf": [{"type": "null"},
                {"type": "object", "properties": {"b": {"$ref": "#"}}, "required": ["b"]}]}},
                "required": ["a"]}),
            true,
        ),
        (
            "several call sites",
            json!({"$defs": {"e": {"anyOf": [{"type": "integer"},
                {"type": "object", "properties": {
                    "op": {"enum": ["+", "*"]},
                    "l": {"$ref": "#/$defs/e"}, "r": {"$ref": "#/$defs/e"}},
                    "required": ["op", "l", "r"]}]}},
                "type": "array", "items": {"$ref": "#/$defs/e"}, "maxItems": 2}),
            false,
        ),
    ]
}

/// Panics unless `schema` has the same language through the stack and unrolled `k` times
/// (`root`: the recursion goes through the root, which unrolling does not count), with
/// `max_nesting_depth` `nesting`.
fn assert_stack_equals_unrolling(name: &str, schema: &Value, root: bool, k: u32, nesting: u32) {
    let unrolled = JsonSchemaOptions {
        additional_properties: AdditionalProperties::Forbid,
        recursion: Recursion::Unroll,
        max_recursion_depth: k,
        truncate_recursion: true,
        max_nesting_depth: nesting,
        ..Default::default()
    };
    let stacked = JsonSchemaOptions {
        recursion: Recursion::Stack,
        max_stack_depth: k + u32::from(root),
        ..unrolled.clone()
    };
    if let Err(path) = same_language(&dfa(schema, &stacked), &dfa(schema, &unrolled)) {
        panic!(
            "{name} at depth {k}: stack and unrolling differ after {:?}",
            String::from_utf8_lossy(&path)
        );
    }
}

#[test]
fn recursive_refs_through_the_stack_equal_unrolling() {
    let nesting = JsonSchemaOptions::default().max_nesting_depth;
    for (name, schema, root) in cases() {
        for k in [1u32, 2, 3, 6] {
            if k == 6 && name == "several call sites" {
                continue; // 2^6 copies of two-site recursion: the unrolled oracle is too large
            }
            assert_stack_equals_unrolling(name, &schema, root, k, nesting);
        }
    }
}

#[test]
fn any_values_inside_recursion_keep_their_own_nesting() {
    // an any-JSON value (its own recursion, bounded by max_nesting_depth) under a recursive
    // `$ref`: its nesting counts from where it starts, not from the stack's depth
    let schema = json!({"type": "object", "properties": {
        "data": {}, "kids": {"type": "array", "items": {"$ref": "#"}}}});
    for k in [1u32, 2, 3] {
        assert_stack_equals_unrolling("any values inside", &schema, true, k, 2);
    }
}

#[test]
fn deep_recursion_accepted_to_the_bound() {
    let tree = &cases()[0].1;
    let o = JsonSchemaOptions {
        additional_properties: AdditionalProperties::Forbid,
        max_stack_depth: 50,
        ..Default::default()
    };
    let d = dfa(tree, &o);
    let nested = |n: usize| {
        let mut s = r#"{"value":0}"#.to_string();
        for i in 1..n {
            s = format!(r#"{{"value":{i},"children":[{s},{{"value":7}}]}}"#);
        }
        s
    };
    let accepts = |s: &str| {
        let st = d.walk(d.start(), s.as_bytes()).unwrap();
        st != DEAD && d.is_accepting(st)
    };
    assert!(accepts(&nested(10)));
    assert!(accepts(&nested(50)));
    assert!(!accepts(&nested(51)));
    // at the bound a leaf can still be written, but `children` would need a deeper call: its
    // array may only be empty
    let at = d
        .walk(
            d.start(),
            r#"{"value":1,"children":["#.repeat(49).as_bytes(),
        )
        .unwrap();
    assert_ne!(at, DEAD);
    let leaf = d.walk(at, br#"{"value":2,"children":["#).unwrap();
    assert_ne!(leaf, DEAD);
    assert_eq!(d.walk(leaf, b"{").unwrap(), DEAD);
    assert_ne!(d.walk(leaf, b"]").unwrap(), DEAD);
    // the default bound (128) lets a tree of depth 100 through
    let d = dfa(tree, &JsonSchemaOptions::default());
    let st = d.walk(d.start(), nested(100).as_bytes()).unwrap();
    assert!(st != DEAD && d.is_accepting(st));
}

#[test]
fn a_call_needed_past_the_bound_kills_the_state_before_it() {
    // `{"a":{"b":` needs a call; at the bound the `{` that commits to it must already be dead
    let schema = &cases()[5].1;
    let o = JsonSchemaOptions {
        additional_properties: AdditionalProperties::Forbid,
        max_stack_depth: 3,
        ..Default::default()
    };
    let d = dfa(schema, &o);
    let two = d.walk(d.start(), br#"{"a":{"b":{"a":{"b":{"a":"#).unwrap();
    assert_ne!(two, DEAD);
    assert_ne!(d.walk(two, b"null}}}}}").unwrap(), DEAD);
    assert_eq!(d.walk(two, b"{").unwrap(), DEAD);
    // a recursion that never ends has no value at all
    let endless = json!({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]});
    assert_eq!(dfa(&endless, &o).start(), DEAD);
}

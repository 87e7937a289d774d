//! Shared parts called, against shared parts copied: an automaton in which the any-JSON value
//! occurs in several places builds it once and calls it from each (see
//! `automata::nfa::Compiler::call_part`); it must have exactly the language of the same
//! expression with a copy of the value in each place, which is how parts were built before and
//! how [`crate::automata::nfa::with_part_copies`] still builds them. The walk compares
//! acceptance and liveness at every pair of states, so a use whose return point cannot finish
//! (while the others can) is checked too.

use serde_json::{json, Value};

use crate::automata::dfa::LazyDfa;
use crate::automata::nfa::with_part_copies;
use crate::automata::rules::with_flat;
use crate::json_schema::{JsonSchemaOptions, Whitespace};

use super::counters::same_language;
use super::recursion::{big, dfa};

fn cases() -> Vec<(&'static str, Value)> {
    vec![
        (
            "several objects open to other members",
            json!({"type": "object", "properties": {
                "a": {"type": "object"},
                "b": {"type": "object", "properties": {"c": {}}, "required": ["c"]},
                "d": {"type": "integer"}}}),
        ),
        (
            "untyped items and values, one required",
            json!({"type": "object", "properties": {
                "x": {"type": "array"},
                "y": {},
                "z": {"type": "array", "items": {}, "maxItems": 2}},
                "required": ["y"], "additionalProperties": false}),
        ),
        (
            "a use whose continuation cannot finish beside uses that can",
            json!({"anyOf": [
                {"type": "array", "prefixItems": [{},
                    {"type": "string", "pattern": "^a$", "minLength": 2}], "minItems": 2},
                {"type": "object", "properties": {"k": {}, "m": {}}, "required": ["k"],
                 "additionalProperties": false},
                {"type": "array", "items": {"type": "integer"}}]}),
        ),
        (
            "inside a counted repetition (copied there) and outside it (called)",
            json!({"type": "object", "properties": {
                "many": {"type": "array", "items": {"type": "object",
                    "properties": {"v": {}}, "required": ["v"], "additionalProperties": false},
                    "minItems": 34, "maxItems": 36},
                "one": {}}, "required": ["many", "one"], "additionalProperties": false}),
        ),
        (
            "inside a recursion through the stack",
            json!({"type": "object", "properties": {
                "meta": {},
                "kids": {"type": "array", "items": {"$ref": "#"}}},
                "additionalProperties": {}}),
        ),
    ]
}

fn options() -> Vec<(&'static str, JsonSchemaOptions)> {
    let base = JsonSchemaOptions {
        max_nesting_depth: 2,
        max_stack_depth: 3,
        ..Default::default()
    };
    vec![
        ("default", base.clone()),
        (
            "compact",
            JsonSchemaOptions {
                whitespace: Whitespace::Compact,
                ..base.clone()
            },
        ),
        (
            "nesting 0",
            JsonSchemaOptions {
                max_nesting_depth: 0,
                ..base
            },
        ),
    ]
}

#[test]
fn calls_have_the_language_of_copies() {
    for (name, schema) in cases() {
        for (oname, o) in options() {
            // in one automaton (rules would build a copy of the part per rule)
            let called = with_flat(|| dfa(&schema, &o));
            let copied = with_flat(|| with_part_copies(|| dfa(&schema, &o)));
            if let Err(path) = same_language(&called, &copied) {
                panic!(
                    "{name} ({oname}): calls and copies differ after {:?}",
                    String::from_utf8_lossy(&path)
                );
            }
            // the test is about something: with nesting, the value is built once, not per use
            if oname != "nesting 0" {
                assert!(
                    called.nfa_states() < copied.nfa_states(),
                    "{name} ({oname}): {} states called, {} copied",
                    called.nfa_states(),
                    copied.nfa_states()
                );
            }
        }
    }
}

/// A use of the value whose continuation cannot finish (`,` then nothing), reached by the same
/// byte as a way on that can: built by hand, since the schema compiler removes such branches.
/// Copies make the whole use dead; calls must refuse the call, not enter the value.
#[test]
fn a_call_whose_return_cannot_finish_is_not_made() {
    use crate::automata::expr::{alt, concat, lit, Expr};
    use regex_syntax::hir::{Class, ClassBytes, Hir};
    let o = JsonSchemaOptions {
        max_nesting_depth: 2,
        ..Default::default()
    };
    let any = crate::json_schema::any_value_stacked(&o, 2);
    let never = Expr::Hir(Hir::class(Class::Bytes(ClassBytes::empty())));
    let x = alt(vec![
        concat(vec![
            lit("["),
            alt(vec![concat(vec![any.clone(), lit(","), never]), lit("1]")]),
        ]),
        concat(vec![lit("{"), any.clone(), lit("}")]),
        concat(vec![lit("("), any, lit(")")]),
    ]);
    let called = with_flat(|| LazyDfa::from_expr("called", &x, &big())).unwrap();
    let copied =
        with_flat(|| with_part_copies(|| LazyDfa::from_expr("copied", &x, &big()))).unwrap();
    assert!(called.nfa_states() < copied.nfa_states());
    if let Err(path) = same_language(&called, &copied) {
        panic!(
            "calls and copies differ after {:?}",
            String::from_utf8_lossy(&path)
        );
    }
    // after `[` only `1` is allowed
    let s = called.walk(called.start(), b"[").unwrap();
    let live: Vec<u8> = (0..=255u8)
        .filter(|&b| called.walk(s, &[b]).unwrap() != crate::automata::dfa::DEAD)
        .collect();
    assert_eq!(live, b"1");
}

//! Rules compiled on first entry, against the automaton built whole: a schema cut into rules
//! (see `automata::rules`) must have exactly the language of the same schema built as one NFA
//! ([`crate::automata::rules::with_flat`], how every schema was built before rules). The walk
//! compares acceptance and liveness at every pair of states reachable over all 256 bytes, so a
//! call that is entered where the whole automaton would be dead shows up too. Each schema is
//! cut at the default size and with every part that may be cut cut (weight 1).

use serde_json::{json, Value};

use crate::automata::dfa::{LazyDfa, DEAD};
use crate::automata::rules::{with_flat, with_min_weight};
use crate::json_schema::{JsonSchemaOptions, Whitespace};

use super::counters::same_language;
use super::recursion::dfa;

fn cases() -> Vec<(&'static str, Value)> {
    let person = json!({"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
        "required": ["name"]});
    vec![
        (
            "nested objects",
            json!({"type": "object", "properties": {
            "owner": person.clone(),
            "pets": {"type": "array", "items": person.clone()},
            "meta": {"type": "object", "properties": {"note": {"type": "string"}},
                     "additionalProperties": false}},
            "required": ["owner"]}),
        ),
        (
            "closed objects, all required",
            json!({"type": "object", "properties": {
            "a": person.clone(), "b": {"type": "boolean"}, "c": person.clone()},
            "required": ["a", "b", "c"], "additionalProperties": false}),
        ),
        (
            "anyOf of objects",
            json!({"anyOf": [person.clone(),
            {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            {"type": "array", "items": person.clone()}]}),
        ),
        (
            "oneOf of objects sharing a tail",
            json!({"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "x"}, "x": person.clone()},
             "required": ["kind"]},
            {"type": "object", "properties": {"kind": {"const": "y"}, "y": {"type": "number"}},
             "required": ["kind"]}]}),
        ),
        (
            "counted array of objects",
            json!({"type": "object", "properties": {
            "many": {"type": "array", "items": person.clone(), "minItems": 34, "maxItems": 36},
            "one": person.clone()}, "required": ["many"]}),
        ),
        (
            "any JSON values inside rules",
            json!({"type": "object", "properties": {
            "x": {"type": "object", "properties": {"free": {}, "n": {"type": "integer"}}},
            "y": {"type": "array", "items": {}}}}),
        ),
        (
            "members counted by minProperties",
            json!({"type": "object", "properties": {
            "p": person.clone(), "q": {"type": "string"}},
            "required": ["p", "q"], "minProperties": 3, "maxProperties": 4,
            "additionalProperties": person.clone()}),
        ),
        (
            "strings with patterns and formats",
            json!({"type": "object", "properties": {
            "when": {"type": "string", "format": "date-time"},
            "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"},
            "mail": {"type": "string", "format": "email"}}}),
        ),
        (
            "recursion through the stack (not cut)",
            json!({"type": "object", "properties": {
            "value": person.clone(),
            "kids": {"type": "array", "items": {"$ref": "#"}}}}),
        ),
        (
            "an optional part no value satisfies",
            json!({"type": "object", "properties": {
            "never": {"type": "string", "minLength": 3, "maxLength": 2},
            "ok": person.clone()}}),
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
                ..base
            },
        ),
    ]
}

#[test]
fn rules_have_the_language_of_the_whole_automaton() {
    let mut cut_somewhere = 0;
    for (name, schema) in cases() {
        for (oname, o) in options() {
            let whole = with_flat(|| dfa(&schema, &o));
            for w in [1, crate::automata::rules::MIN_RULE_WEIGHT] {
                let cut = with_min_weight(w, || dfa(&schema, &o));
                let (rules, _) = cut.rules_built();
                if rules > 0 {
                    cut_somewhere += 1;
                }
                if let Err(path) = same_language(&cut, &whole) {
                    panic!(
                        "{name} ({oname}, cut from weight {w}, {rules} rules): the rules and \
                         the whole automaton differ after {:?}",
                        String::from_utf8_lossy(&path)
                    );
                }
            }
        }
    }
    // the test is about something: most schemas are cut into rules
    assert!(cut_somewhere >= 16, "{cut_somewhere}");
}

/// Rules are compiled when a walk first enters them, not before: after the object opens, none
/// of its members' values is built; after one key, only what that value needs.
#[test]
fn rules_are_built_on_first_entry() {
    let value = |k: &str| {
        json!({"type": "object", "properties": {
            format!("{k}1"): {"type": "string", "pattern": "^[a-z]+[0-9]{2,4}$"},
            format!("{k}2"): {"type": "array", "items": {"type": "integer"}},
            format!("{k}3"): {"enum": ["one", "two", "three", "four"]}},
            "required": [format!("{k}1")]})
    };
    let schema = json!({"type": "object", "properties": {
        "alpha": value("a"), "beta": value("b"), "gamma": value("c")},
        "required": ["alpha", "beta", "gamma"], "additionalProperties": false});
    let o = JsonSchemaOptions::default();
    let d: LazyDfa = with_min_weight(1, || dfa(&schema, &o));
    let (rules, at_start) = d.rules_built();
    assert!(rules >= 6, "{rules} rules");
    let s = d.walk(d.start(), b"{\"alpha\": {\"a1\": \"x").unwrap();
    assert_ne!(s, DEAD);
    let (_, after) = d.rules_built();
    assert!(
        after > at_start && after < rules,
        "{at_start} built at the start, {after} after one member of {rules}"
    );
    // the rest of the document still walks through the calls and back
    let rest =
        b"yz12\"}, \"beta\": {\"b1\": \"q99\", \"b3\": \"two\"}, \"gamma\": {\"c1\": \"r123\"}}";
    let end = d.walk(s, rest).unwrap();
    assert!(d.is_accepting(end));
    assert_eq!(d.walk(s, b"yz1\"}").unwrap(), DEAD);
}

/// A call whose continuation cannot finish (`,` then nothing) beside a way on that can, reached
/// by the same byte: built by hand, since the schema compiler removes such branches. The whole
/// automaton is dead on that path; the rules must not enter the call either.
#[test]
fn a_rule_whose_return_cannot_finish_is_not_entered() {
    use crate::automata::expr::{alt, concat, lit, sep_list, Expr};
    use regex_syntax::hir::{Class, ClassBytes, Hir};
    let word = crate::automata::hir::rep(crate::automata::hir::class(&[('a', 'z')]), 1, None);
    // a list, so that the expression is not one plain leaf
    let value = concat(vec![
        lit("<"),
        sep_list(Expr::Hir(word), lit(";")),
        lit(">"),
    ]);
    let never = Expr::Hir(Hir::class(Class::Bytes(ClassBytes::empty())));
    let x = alt(vec![
        concat(vec![
            lit("["),
            alt(vec![
                concat(vec![value.clone(), lit(","), never]),
                lit("1]"),
            ]),
        ]),
        concat(vec![lit("{"), value, lit("}")]),
    ]);
    let opts = super::recursion::big();
    let cut = with_min_weight(1, || LazyDfa::from_expr("cut", &x, &opts)).unwrap();
    let whole = with_flat(|| LazyDfa::from_expr("whole", &x, &opts)).unwrap();
    assert!(cut.rules_built().0 > 0);
    assert_eq!(cut.walk(cut.start(), b"[<").unwrap(), DEAD);
    if let Err(path) = same_language(&cut, &whole) {
        panic!(
            "the rules and the whole automaton differ after {:?}",
            String::from_utf8_lossy(&path)
        );
    }
}

/// Parts built the same way are one rule: the three `format: uri` values (each its own rule)
/// are compiled once, when the first of them is entered.
#[test]
fn identical_parts_are_one_rule() {
    let uri = json!({"type": "string", "format": "uri"});
    let schema = json!({"type": "object", "properties": {"a": uri, "b": uri, "c": uri},
        "additionalProperties": false});
    let o = JsonSchemaOptions::default();
    let d = dfa(&schema, &o);
    let s = d.walk(d.start(), b"{\"a\": \"http://x\"").unwrap();
    assert_ne!(s, DEAD);
    let (rules, after_a) = d.rules_built();
    assert!(rules > 0);
    let s = d
        .walk(s, b", \"b\": \"http://y\", \"c\": \"ftp://z\"}")
        .unwrap();
    assert!(d.is_accepting(s));
    assert_eq!(
        d.rules_built().1,
        after_a,
        "no rule built for the other two values"
    );
    let whole = with_flat(|| dfa(&schema, &o));
    let s = whole
        .walk(whole.start(), b"{\"a\": \"http://x\", \"c\": \"ftp://z\"}")
        .unwrap();
    assert!(whole.is_accepting(s));
}

/// The background builder compiles the rules ahead of their first entry; entering them then
/// takes its work (the automaton's language unchanged), and the rules not reached stay with it.
#[test]
fn the_background_builder_compiles_rules_ahead() {
    let person = json!({"type": "object", "properties": {
        "name": {"type": "string", "format": "email"},
        "born": {"type": "string", "format": "date-time"}}, "required": ["name"]});
    let schema = json!({"type": "object", "properties": {"a": person, "b": {"type": "array",
        "items": {"type": "string", "format": "uri"}}}, "additionalProperties": false});
    // (the walk comparing every state below needs the any-JSON values shallow)
    let o = JsonSchemaOptions {
        max_nesting_depth: 8,
        ..Default::default()
    };
    let d = dfa(&schema, &o);
    let (rules, _) = d.rules_built();
    assert!(rules >= 3, "{rules} rules");
    d.build_rules_in_background();
    let t = std::time::Instant::now();
    while d.rules_ready() + d.rules_built().1 < rules {
        assert!(t.elapsed().as_secs() < 60, "the builder did not finish");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let ready = d.rules_ready();
    assert!(ready > 0);
    let s = d
        .walk(
            d.start(),
            b"{\"a\": {\"name\": \"x@y.org\"}, \"b\": [\"http://z\"]}",
        )
        .unwrap();
    assert!(d.is_accepting(s));
    assert!(
        d.rules_ready() < ready,
        "entering rules takes the builder's work"
    );
    let whole = with_flat(|| dfa(&schema, &o));
    if let Err(path) = same_language(&d, &whole) {
        panic!(
            "after background builds the rules and the whole automaton differ after {:?}",
            String::from_utf8_lossy(&path)
        );
    }
}

/// Structural tags over many tools, whose contents are marked to be cut whatever their weight
/// ([`crate::automata::expr::Expr::Cut`]): the same language as the tag built whole, and each
/// tool's content a rule of its own, not built until its begin is read.
#[test]
fn structural_tag_contents_cut_keep_the_language() {
    let tool = |i: usize| {
        json!({"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 3}, "n": {"enum": [i, i + 1]}},
            "required": ["city"], "additionalProperties": false})
    };
    let tags = |style: &str, n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| {
                json!({"type": "tag", "begin": format!("<f{i}>"),
                       "content": {"type": "json_schema", "json_schema": tool(i), "style": style},
                       "end": "</f>"})
            })
            .collect()
    };
    let formats = [
        (
            "triggered",
            json!({"type": "triggered_tags", "triggers": ["<f"], "tags": tags("json", 40)}),
        ),
        (
            "separated",
            json!({"type": "tags_with_separator", "tags": tags("json", 40), "separator": ",",
                   "at_least_one": true}),
        ),
        (
            "xml, first only",
            json!({"type": "triggered_tags", "triggers": ["<f"], "tags": tags("qwen_xml", 40),
                   "stop_after_first": true}),
        ),
    ];
    let opts = crate::regex::RegexOptions {
        max_states: 1_000_000,
        ..Default::default()
    };
    for (f, format) in formats {
        let text = json!({"type": "structural_tag", "format": format}).to_string();
        let build = || {
            let c =
                crate::structural_tag::compile(&text, &JsonSchemaOptions::default(), None).unwrap();
            LazyDfa::from_expr("tag", &c.expr, &opts).unwrap()
        };
        let whole = with_flat(build);
        let cut = build();
        // entering the tags does not build any tool's content
        let s = cut.walk(cut.start(), b"<f1").unwrap();
        assert_ne!(s, DEAD);
        let (rules, built) = cut.rules_built();
        assert!(rules >= 40, "{f}: {rules} rules");
        assert!(
            built < 10,
            "{f}: {built} of {rules} rules built after `<f1`"
        );
        if let Err(path) = same_language(&cut, &whole) {
            panic!(
                "{f}: the cut tag and the whole one differ after {:?}",
                String::from_utf8_lossy(&path)
            );
        }
    }
}

/// The trie of many tags' begin texts stays in the automaton that holds it
/// ([`crate::automata::expr::Expr::Inline`]): reading every tool's name from the point where
/// the names part, as one mask's walk does over the tokens, builds no rule (cut into rules,
/// the trie's branches were built one by one within that walk); a tag's content is built only
/// once its whole begin is read. The language is that of the tag built whole.
#[test]
fn structural_tag_begin_trie_stays_whole() {
    let n = 300;
    let tags: Vec<Value> = (0..n)
        .map(|i| {
            json!({"type": "tag", "begin": format!("{{\"name\": \"get_item_{i}\", \"parameters\": "),
                   "content": {"type": "json_schema", "json_schema": {"type": "object",
                       "properties": {format!("x{i}"): {"type": "integer"}},
                       "additionalProperties": false}},
                   "end": "}"})
        })
        .collect();
    let format = json!({"type": "triggered_tags", "triggers": ["{\"name\": "], "tags": tags});
    let text = json!({"type": "structural_tag", "format": format}).to_string();
    let opts = crate::regex::RegexOptions {
        max_states: 1_000_000,
        ..Default::default()
    };
    let build = || {
        let c = crate::structural_tag::compile(&text, &JsonSchemaOptions::default(), None).unwrap();
        LazyDfa::from_expr("tag", &c.expr, &opts).unwrap()
    };
    let d = build();
    // (what the start enters: the free text's own parts)
    let (rules, at_start) = d.rules_built();
    assert!(rules >= n, "{rules} rules: each content is one");
    let parted = d.walk(d.start(), b"{\"name\": \"get_item_").unwrap();
    assert_ne!(parted, DEAD);
    for i in 0..n {
        // (the begin but its last byte: from there its content is entered)
        let s = d
            .walk(parted, format!("{i}\", \"parameters\":").as_bytes())
            .unwrap();
        assert_ne!(s, DEAD, "tool {i}");
    }
    assert_eq!(d.rules_built().1, at_start, "reading the names built rules");
    let s = d.walk(parted, b"7\", \"parameters\": {\"x7\"").unwrap();
    assert_ne!(s, DEAD);
    assert_eq!(
        d.walk(parted, b"7\", \"parameters\": {\"x8\"").unwrap(),
        DEAD
    );
    let built = d.rules_built().1 - at_start;
    assert!(
        (1..=3).contains(&built),
        "{built} rules built for one content"
    );
    let whole = with_flat(build);
    if let Err(path) = same_language(&d, &whole) {
        panic!(
            "the tag and the one built whole differ after {:?}",
            String::from_utf8_lossy(&path)
        );
    }
}

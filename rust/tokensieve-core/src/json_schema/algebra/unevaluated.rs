//! `unevaluatedProperties`/`unevaluatedItems`: the constraints they add to one term of an
//! expansion, from the parts of that term that evaluate.

use serde_json::{Map, Value};

use super::{obj, part, Part, Term};
use crate::json_schema::compile::Compiler;

impl<'a> Compiler<'a> {
    /// Add the `unevaluated*` constraints of `m` to one term of its expansion.
    pub(super) fn apply_unevaluated(t: &mut Term, m: &Map<String, Value>) {
        if m.get("unevaluatedProperties") == Some(&Value::Bool(true)) {
            // evaluates every property (seen by enclosing unevaluatedProperties)
            t.push(part(
                obj(vec![("additionalProperties", Value::Bool(true))]),
                true,
            ));
        }
        if m.get("unevaluatedItems") == Some(&Value::Bool(true)) {
            t.push(part(obj(vec![("items", Value::Bool(true))]), true));
        }
        if let Some(u) = m.get("unevaluatedProperties") {
            if u != &Value::Bool(true) {
                let pos: Vec<&Part> = t.iter().filter(|p| p.eval).collect();
                let all = pos
                    .iter()
                    .any(|p| p.map.contains_key("additionalProperties"));
                if !all {
                    let mut names = Map::new();
                    let mut pats = Map::new();
                    for p in &pos {
                        if let Some(Value::Object(props)) = p.map.get("properties") {
                            for k in props.keys() {
                                names.insert(k.clone(), Value::Bool(true));
                            }
                        }
                        if let Some(Value::Object(pp)) = p.map.get("patternProperties") {
                            for k in pp.keys() {
                                pats.insert(k.clone(), Value::Bool(true));
                            }
                        }
                    }
                    let mut u_part = vec![
                        ("properties", Value::Object(names)),
                        ("additionalProperties", u.clone()),
                    ];
                    if !pats.is_empty() {
                        u_part.push(("patternProperties", Value::Object(pats)));
                    }
                    t.push(part(obj(u_part), true));
                }
            }
        }
        if let Some(u) = m.get("unevaluatedItems") {
            if u != &Value::Bool(true) {
                let pos: Vec<&Part> = t.iter().filter(|p| p.eval).collect();
                let all = pos.iter().any(|p| {
                    matches!(p.map.get("items"), Some(v) if !v.is_array())
                        || p.map.contains_key("additionalItems")
                });
                if !all {
                    let mut k = 0;
                    let mut contains = Vec::new();
                    for p in &pos {
                        for kw in ["prefixItems", "items"] {
                            if let Some(Value::Array(a)) = p.map.get(kw) {
                                k = k.max(a.len());
                            }
                        }
                        // (typed sub-schemas, `true` in the map, come from negation: those
                        // parts never evaluate)
                        if let Some(c) = p.map.get("contains") {
                            contains.push(c.clone());
                        }
                    }
                    let rest = if contains.is_empty() {
                        u.clone()
                    } else {
                        contains.insert(0, u.clone());
                        Value::Object(obj(vec![("anyOf", Value::Array(contains))]))
                    };
                    t.push(part(
                        obj(vec![
                            ("prefixItems", Value::Array(vec![Value::Bool(true); k])),
                            ("items", rest),
                        ]),
                        true,
                    ));
                }
            }
        }
    }
}

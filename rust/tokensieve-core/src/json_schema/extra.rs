//! Typed constraints that travel beside a schema's keyword map.
//!
//! The negation algebra (`algebra`) and the merging of `allOf` branches (`compile::refs`) need
//! constraints that no JSON Schema keyword spells: "a string other than these", "a number
//! that is not a multiple of d", "a number with a fraction part", `contains` counted from an
//! index, "some undeclared property whose value matches", and sub-schemas that are unions of
//! such conjunctions. They are an [`Extra`] next to the map of JSON keywords (together a
//! [`Built`] schema), never keys inside it: no JSON a user writes can express them, and a
//! user's `x-` keys are annotations like any other.

use serde_json::{Map, Value};

use super::algebra::Term;

/// Constraints of one keyword map that no JSON Schema keyword spells. The default constrains
/// nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Extra {
    /// Numbers must have a fraction part that is not all zeros (from `not: {type: integer}`);
    /// the map's `type` names `number` for them.
    pub fraction_only: bool,
    /// Strings other than these.
    pub not_in: Vec<Value>,
    /// Further ECMA patterns a string must match (from merging `allOf` branches).
    pub all_patterns: Vec<Value>,
    /// Strings matching none of these ECMA patterns.
    pub not_patterns: Vec<Value>,
    /// Strings of none of these asserted formats (by name).
    pub not_formats: Vec<Value>,
    /// Numbers that are a multiple of none of these.
    pub not_multiple_of: Vec<Value>,
    /// `contains` counts only the items from this index on.
    pub contains_from: Option<u64>,
    /// An object with at least one undeclared property whose value matches a schema.
    pub some_extra: Vec<SomeExtra>,
    /// Property schemas that are not plain JSON, by name. The map's `properties` holds `true`
    /// in their place (so that the declared names and their order stay in the map).
    pub properties: Vec<(String, Sub)>,
    /// `prefixItems` entries that are not plain JSON, by position (`true` in the map).
    pub prefix_items: Vec<(usize, Sub)>,
    /// A `contains` schema that is not plain JSON (`true` in the map).
    pub contains: Option<Sub>,
    /// Further `contains` counts of merged `allOf` branches whose `contains` differs from the
    /// map's.
    pub more_contains: Vec<MoreContains>,
    /// `allOf` branches whose view of the keys is kept apart from the map (see [`KeyView`]).
    pub key_views: Vec<KeyView>,
}

/// "Between `min` and `max` of the items from index `from` on match `schema`": the `contains`
/// of a merged `allOf` branch beside another one.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct MoreContains {
    pub schema: Sub,
    pub min: u64,
    pub max: Option<u64>,
    pub from: u64,
}

/// One `allOf` branch's constraints on an object's keys, kept apart from the merged map when
/// its `additionalProperties` would have to apply to keys matching only another branch's
/// `patternProperties` (one map cannot say that). A member `name: value` satisfies the view
/// when `value` matches every one of `patterns` that `name` matches, and, when `name` is
/// none of `names` and matches none of `patterns`, `additional`. The branch's `properties`
/// schemas stay in the map.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct KeyView {
    /// The names the branch's `properties` declares.
    pub names: Vec<String>,
    /// The branch's `patternProperties`: ECMA pattern, schema.
    pub patterns: Vec<(String, Value)>,
    /// The branch's `additionalProperties`.
    pub additional: Value,
}

/// "Some property whose key is of a kind has a value matching `schema`": the negation of
/// `additionalProperties` (a key none of `names` and matching none of `patterns`) or of one
/// `patternProperties` entry (a key matching `key`).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SomeExtra {
    /// The names `properties` declares.
    pub names: Vec<String>,
    /// The `patternProperties` patterns, when the schema had that keyword.
    pub patterns: Option<Vec<String>>,
    /// The pattern the key must match (ECMA, searched), for a negated `patternProperties`
    /// entry; then `names` and `patterns` are empty.
    pub key: Option<String>,
    /// Decoded key languages the key must be outside of, for a negated `propertyNames`
    /// (one of the languages it asks every key to be in).
    pub not_keys: Vec<regex_syntax::hir::Hir>,
    pub schema: Sub,
}

/// A sub-schema: JSON, or what the algebra built.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Sub {
    /// A schema as JSON.
    Json(Value),
    /// A union of conjunctions whose parts carry [`Extra`] constraints (see
    /// [`Sub::from_terms`]): compiled, checked and negated as `anyOf` of `allOf`s of the parts.
    Terms(Vec<Term>),
    /// Every one of these (as `allOf`).
    All(Vec<Sub>),
    /// Not this one (as `not`).
    Not(Box<Sub>),
}

impl Extra {
    /// Whether this constrains nothing.
    pub fn is_empty(&self) -> bool {
        *self == Extra::default()
    }

    /// The non-JSON schema of property `name`, if it has one.
    pub fn property(&self, name: &str) -> Option<&Sub> {
        self.properties
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s)
    }

    /// The non-JSON schema of prefix item `i`, if it has one.
    pub fn prefix_item(&self, i: usize) -> Option<&Sub> {
        self.prefix_items
            .iter()
            .find(|(j, _)| *j == i)
            .map(|(_, s)| s)
    }
}

impl Sub {
    /// A union of terms as a sub-schema: plain JSON (`anyOf` of `allOf`s of the parts' maps)
    /// when no part carries an [`Extra`] constraint, else the terms themselves. The `$ref`
    /// targets the parts were expanded in are dropped either way (the sub-schema is compiled
    /// where it is used).
    pub fn from_terms(terms: Vec<Term>) -> Sub {
        if terms.iter().flatten().all(|p| p.x.is_empty()) {
            return Sub::Json(terms_to_value(terms));
        }
        Sub::Terms(
            terms
                .into_iter()
                .map(|t| {
                    t.into_iter()
                        .map(|mut p| {
                            p.refs.clear();
                            p
                        })
                        .collect()
                })
                .collect(),
        )
    }

    /// The sub-schema `true`.
    pub fn any() -> Sub {
        Sub::Json(Value::Bool(true))
    }
}

/// Both `a` and `b` (the one when they are equal or the other is `true`).
pub(super) fn all_of_sub(a: Sub, b: Sub) -> Sub {
    if a == b || b == Sub::any() {
        return a;
    }
    if a == Sub::any() {
        return b;
    }
    Sub::All(vec![a, b])
}

/// A union of terms whose parts carry no [`Extra`] constraint as one JSON schema.
fn terms_to_value(terms: Vec<Term>) -> Value {
    let one = |k: &str, v: Value| {
        let mut m = Map::new();
        m.insert(k.to_string(), v);
        Value::Object(m)
    };
    let alts: Vec<Value> = terms
        .into_iter()
        .map(|t| {
            let all: Vec<Value> = t
                .into_iter()
                .map(|p| Value::Object(std::sync::Arc::unwrap_or_clone(p.map)))
                .collect();
            match all.len() {
                0 => Value::Bool(true),
                1 => all.into_iter().next().expect("one"),
                _ => one("allOf", Value::Array(all)),
            }
        })
        .collect();
    match alts.len() {
        0 => Value::Bool(false),
        1 => alts.into_iter().next().expect("one"),
        _ => one("anyOf", Value::Array(alts)),
    }
}

/// A keyword map with its typed constraints: a schema the compiler assembled.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Built {
    pub map: Map<String, Value>,
    pub x: Extra,
}

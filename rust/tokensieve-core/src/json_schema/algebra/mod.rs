//! The boolean structure of schemas.
//!
//! Applicators that are not plain merges — `not`, `if`/`then`/`else`, `oneOf` whose branches
//! may overlap, `dependentRequired`, `dependentSchemas`, draft-4/7 `dependencies`, and the
//! annotation-driven `unevaluatedProperties`/`unevaluatedItems` — are expanded into a union of
//! conjunctions (a DNF): each [`Term`] is a list of applicator-free keyword maps ([`Part`]s) that
//! are merged like `allOf` and compiled as one schema. Negation is pushed down to single
//! keywords (`not {minimum: 3}` is "a number below 3"; `not {required: [a]}` is "an object
//! without `a`"), so no automaton is ever complemented and the result stays exact.
//!
//! Constraints that no keyword spells ("a string other than these", "a number that is not a
//! multiple of d", sub-schemas that are unions of such conjunctions) are carried by the
//! typed [`Extra`] of each part, beside its keyword map (see `extra`).
//!
//! `unevaluated*` follow the annotation rules of 2020-12: a term remembers which of its parts
//! evaluate (parts produced under `not` never do), and in each term the properties (items) that
//! no evaluating part covers must satisfy the `unevaluated*` schema. `anyOf` is expanded over
//! the non-empty subsets of its branches while such a keyword is in scope, so that an instance
//! matching several branches sees the union of their annotations.
//!
//! Files: this one holds the [`Part`]/[`Term`] types, the routing test (`needs_algebra`), the
//! product and union of term lists and the compilation of a union of terms; `expand` the
//! expansion of a schema into terms, `unevaluated` the `unevaluated*` constraints added to a
//! term, `negate` the complement of a schema (negation pushed down to single keywords), `sub`
//! the sub-schemas the algebra builds (`Sub`: compiled, expanded and negated as the JSON they
//! stand for).

mod expand;
mod negate;
mod sub;
mod unevaluated;

use std::sync::Arc;

use serde_json::{Map, Value};

use super::compile::{normalize, schema_error, Compiler, Piece};
use super::extra::{Built, Extra};
use super::keywords::{bits_to_types, ALGEBRA, APPLICATORS, T_ALL};
use super::options::OneOf;
use crate::automata::expr::Expr;
use crate::error::{Error, Result};

/// One conjunct: an applicator-free keyword map with its typed constraints, and whether it
/// produces annotations. The map and the constraints are shared: products of unions copy
/// parts into many terms, and none of them changes a part's keywords.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Part {
    pub map: Arc<Map<String, Value>>,
    pub x: Arc<Extra>,
    pub eval: bool,
    /// `$ref` targets this part was expanded inside: they stay active (for the recursion
    /// limit) while the part's sub-schemas are compiled.
    pub refs: Vec<String>,
}

impl Part {
    /// The part's keywords and typed constraints as a schema of their own (a copy).
    pub(in crate::json_schema) fn to_built(&self) -> Built {
        Built {
            map: (*self.map).clone(),
            x: (*self.x).clone(),
        }
    }

    /// [`Part::to_built`], copying only what another term still shares.
    fn into_built(self) -> Built {
        Built {
            map: Arc::unwrap_or_clone(self.map),
            x: Arc::unwrap_or_clone(self.x),
        }
    }
}

/// A conjunction of parts; a schema expands into a union of terms.
pub(super) type Term = Vec<Part>;

/// Largest number of terms one product may produce (products multiply: each term of an
/// operand is copied into many).
const MAX_TERMS: usize = 512;

/// Most branches [`Compiler::needs_algebra`] looks at before it assumes the algebra is needed
/// (a bound on the scan, which follows `$ref` cycles too; each look is a few map lookups).
const SCAN_BRANCHES: usize = 16_384;

/// Largest number of terms of one union: a union only collects its operands' terms (an
/// `anyOf` of 4,000 `const` branches, a `oneOf` of disjoint ones), so it may be longer than a
/// product, each term compiled once.
const MAX_UNION_TERMS: usize = 4096;

/// Most pairs of terms one product looks at (those whose types exclude each other are left
/// out before [`MAX_TERMS`] applies).
const PRODUCT_PAIRS: usize = MAX_TERMS * 64;

fn part(map: Map<String, Value>, eval: bool) -> Part {
    Part {
        map: Arc::new(map),
        x: Arc::default(),
        eval,
        refs: Vec::new(),
    }
}

fn built_part(b: Built) -> Part {
    Part {
        map: Arc::new(b.map),
        x: Arc::new(b.x),
        eval: false,
        refs: Vec::new(),
    }
}

fn built(map: Map<String, Value>) -> Built {
    Built {
        map,
        x: Extra::default(),
    }
}

/// A conjunct allowing only the types in `bits`.
fn types(bits: u8) -> Built {
    let (t, fraction_only) = bits_to_types(bits);
    let mut b = built(obj(vec![("type", t)]));
    b.x.fraction_only = fraction_only;
    b
}

fn obj(pairs: Vec<(&str, Value)>) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn absent(name: &str) -> Map<String, Value> {
    let mut props = Map::new();
    props.insert(name.to_string(), Value::Bool(false));
    obj(vec![("properties", Value::Object(props))])
}

fn required(names: Vec<Value>) -> Map<String, Value> {
    obj(vec![("required", Value::Array(names))])
}

fn no_eval(terms: Vec<Term>) -> Vec<Term> {
    terms
        .into_iter()
        .map(|t| {
            t.into_iter()
                .map(|mut p| {
                    p.eval = false;
                    p
                })
                .collect()
        })
        .collect()
}

fn arr<'v>(v: &'v Value, kw: &str, ptr: &str) -> Result<&'v Vec<Value>> {
    v.as_array()
        .ok_or_else(|| schema_error(kw, ptr, format!("{kw} must be an array")))
}

/// The keywords of `m` other than the applicators, normalized: what one part holds.
fn core_keywords(m: &Map<String, Value>) -> Map<String, Value> {
    let mut core = m.clone();
    for k in APPLICATORS {
        core.remove(*k);
    }
    normalize(&mut core);
    core
}

/// Fails once the expansion or negation (its error reported at keyword `kw`) has followed
/// schema combinators more than 64 levels deep.
fn check_depth(kw: &str, ptr: &str, depth: u32) -> Result<()> {
    if depth > 64 {
        return Err(schema_error(
            kw,
            ptr,
            "schema combinators nest more than 64 levels (a $ref cycle?)",
        ));
    }
    Ok(())
}

/// The error for combinators at `ptr` that expand to more than [`MAX_TERMS`] terms.
fn too_many_terms(ptr: &str) -> Error {
    Error::Budget(format!(
        "the combinators at #{ptr} expand to more than {MAX_TERMS} alternatives \
         (anyOf/oneOf/not/if/dependencies multiply); simplify the schema"
    ))
}

/// The terms of a negation at `ptr`, none of them producing annotations; an error if there
/// are more than [`MAX_TERMS`].
fn negation_terms(out: Vec<Term>, ptr: &str) -> Result<Vec<Term>> {
    if out.len() > MAX_TERMS {
        return Err(Error::Budget(format!(
            "the negation at #{ptr} expands to more than {MAX_TERMS} alternatives"
        )));
    }
    Ok(no_eval(out))
}

impl<'a> Compiler<'a> {
    /// Whether `m` needs the DNF expansion rather than the direct walk.
    pub(super) fn needs_algebra(&self, m: &Map<String, Value>, ptr: &str) -> Result<bool> {
        if ALGEBRA.iter().any(|k| m.contains_key(*k)) {
            return Ok(true);
        }
        if m.contains_key("anyOf") && m.contains_key("oneOf") {
            return Ok(true);
        }
        if let Some(one) = m.get("oneOf") {
            let branches = arr(one, "oneOf", ptr)?;
            if self.opts.one_of == OneOf::Error && !self.disjoint(branches, m)? {
                return Ok(true);
            }
        }
        // In-place applicators (allOf/anyOf/oneOf branches, $ref targets merged with
        // siblings) carrying keywords that a plain merge cannot combine.
        let merging = m.contains_key("allOf") || (m.contains_key("$ref") && m.len() > 1);
        let mut todo: Vec<(&Value, bool)> = Vec::new();
        for kw in ["allOf", "anyOf", "oneOf"] {
            if let Some(list) = m.get(kw) {
                todo.extend(
                    arr(list, kw, ptr)?
                        .iter()
                        .map(|v| (v, merging || kw == "allOf")),
                );
            }
        }
        if let (Some(Value::String(r)), true) = (m.get("$ref"), m.len() > 1) {
            if let Ok((t, _)) = self.resolve(r, ptr) {
                todo.push((t, true));
            }
        }
        let mut seen = 0;
        while let Some((v, merged)) = todo.pop() {
            seen += 1;
            if seen > SCAN_BRANCHES {
                return Ok(true);
            }
            let Value::Object(b) = v else { continue };
            // the branch's own keywords first (beside a `$ref`, `unevaluated*` sees only the
            // branch's annotations, not those of what the branch is merged with), then its
            // `$ref` target's
            if ALGEBRA.iter().any(|k| b.contains_key(*k)) {
                return Ok(true);
            }
            if merged && (b.contains_key("anyOf") || b.contains_key("oneOf")) {
                return Ok(true);
            }
            for kw in ["allOf", "anyOf", "oneOf"] {
                if let Some(Value::Array(list)) = b.get(kw) {
                    todo.extend(list.iter().map(|x| (x, merged || kw == "allOf")));
                }
            }
            if let Some(r) = b.get("$ref").and_then(Value::as_str) {
                if let Ok((t, _)) = self.resolve(r, ptr) {
                    todo.push((t, merged || b.len() > 1));
                }
            }
        }
        Ok(false)
    }

    /// `a × b`: every term of `a` conjoined with every term of `b`.
    /// Whether the conjunction of `x` and `y` surely has no value: one of them lists its values
    /// (a part's `const` or `enum`) and the other's parts reject each of them. A check that
    /// cannot decide keeps the pair.
    fn pair_empty(&mut self, x: &Term, y: &Term) -> bool {
        // a property some part requires whose declared schemas across the pair admit no
        // common type, where the pair admits only objects (a `oneOf` branch's `"p": {"type": "string"}` against another branch's
        // negation "p present and not a string", or `"p": false`); a declared schema kept
        // typed beside the map (`true` in it) counts as any type
        // (`required` and `properties` constrain objects only: the pair is empty only when it
        // admits nothing but objects)
        let objects_only =
            self.term_types(x) & self.term_types(y) & !super::keywords::T_OBJECT == 0;
        let mut required: Vec<&str> = Vec::new();
        for p in x.iter().chain(y).filter(|_| objects_only) {
            if let Some(Value::Array(rs)) = p.map.get("required") {
                required.extend(rs.iter().filter_map(Value::as_str));
            }
        }
        for name in required {
            let mut bits = super::keywords::T_ALL;
            for p in x.iter().chain(y) {
                let Some(Value::Object(props)) = p.map.get("properties") else {
                    continue;
                };
                bits &= match props.get(name) {
                    Some(Value::Bool(false)) => 0,
                    Some(Value::Object(m)) => self
                        .type_bits_x(m, &Extra::default(), "")
                        .unwrap_or(super::keywords::T_ALL),
                    _ => super::keywords::T_ALL,
                };
            }
            if bits == 0 {
                return true;
            }
        }
        for (a, b) in [(x, y), (y, x)] {
            let listed = a
                .iter()
                .find_map(|p| match (p.map.get("const"), p.map.get("enum")) {
                    (Some(c), _) => Some(vec![c.clone()]),
                    (None, Some(Value::Array(vs))) if vs.len() <= 16 => Some(vs.clone()),
                    _ => None,
                });
            let Some(values) = listed else { continue };
            let kept = values.iter().any(|v| {
                b.iter().all(|p| {
                    // a part that evaluates or holds references is not decided here
                    !p.refs.is_empty()
                        || p.eval
                        || self.validates_map(v, &p.map, &p.x, "", 0).unwrap_or(true)
                })
            });
            if !kept {
                return true;
            }
        }
        false
    }

    fn product(&mut self, a: Vec<Term>, b: Vec<Term>, ptr: &str) -> Result<Vec<Term>> {
        // Pairs whose types exclude each other (an array's alternative and an object's) are
        // empty and left out; the limit holds for what is left, after at most
        // `PRODUCT_PAIRS` pairs looked at.
        if a.len().saturating_mul(b.len()) > PRODUCT_PAIRS {
            return Err(too_many_terms(ptr));
        }
        let (ta, tb): (Vec<u8>, Vec<u8>) = (
            a.iter().map(|t| self.term_types(t)).collect(),
            b.iter().map(|t| self.term_types(t)).collect(),
        );
        // a product may be as long as its longer side (a union of up to MAX_UNION_TERMS
        // narrowed by a few terms, most pairs excluded by their types); past that it
        // multiplies, and MAX_TERMS holds
        let limit = MAX_TERMS.max(a.len()).max(b.len());
        let mut out = Vec::new();
        for (x, bx) in a.iter().zip(&ta) {
            for (y, by) in b.iter().zip(&tb) {
                if bx & by == 0 {
                    continue;
                }
                // a listed value the other side rejects (`anyOf` of constants under `not`)
                if x.len() + y.len() <= 64 && self.pair_empty(x, y) {
                    continue;
                }
                if out.len() >= limit {
                    return Err(too_many_terms(ptr));
                }
                // a term can hold large sub-schemas: the clock is read per copy
                crate::budget::check("expanding schema combinators")?;
                let mut t = x.clone();
                t.extend(y.iter().cloned());
                out.push(t);
            }
        }
        Ok(out)
    }

    /// The types a value matching every part of `t` can have, as far as their `type`
    /// keywords say (all types where one is malformed: the compile reports it).
    fn term_types(&self, t: &Term) -> u8 {
        t.iter().fold(T_ALL, |acc, p| {
            acc & self.type_bits_x(&p.map, &p.x, "").unwrap_or(T_ALL)
        })
    }

    fn union(&self, mut a: Vec<Term>, b: Vec<Term>, ptr: &str) -> Result<Vec<Term>> {
        a.extend(b);
        if a.len() > MAX_UNION_TERMS {
            return Err(Error::Budget(format!(
                "the combinators at #{ptr} expand to more than {MAX_UNION_TERMS} alternatives \
                 in one union (anyOf/oneOf/not/if/dependencies); simplify the schema"
            )));
        }
        Ok(a)
    }

    /// Compile a union of terms: each term's parts are merged like `allOf`.
    ///
    /// Every term is merged before any is compiled, and (unless `lenient`) a term whose
    /// `multipleOf` divisors are refused ([`divisors_refused`]) is compiled first: it fails the
    /// whole compile, and the other terms' remainder automata can cost milliseconds each, so a
    /// refused schema is refused without building them. The union is the same in any order.
    pub(super) fn compile_terms(&mut self, terms: Vec<Term>, ptr: &str) -> Result<Option<Expr>> {
        let mut seen: Vec<Option<Built>> = Vec::new();
        let mut merged_terms: Vec<(Option<Built>, Vec<String>)> = Vec::new();
        for t in terms {
            crate::budget::check("merging the terms of schema combinators")?;
            // refs active for this term: each target as often as the deepest part needs it
            let mut refs: Vec<String> = Vec::new();
            for p in &t {
                for r in &p.refs {
                    let need = p.refs.iter().filter(|x| *x == r).count();
                    let have = refs.iter().filter(|x| *x == r).count();
                    if have < need {
                        refs.push(r.clone());
                    }
                }
            }
            let pieces: Vec<Piece> = t
                .into_iter()
                .map(|p| Piece::Built(Box::new(p.into_built())))
                .collect();
            let merged = self.merge_all(pieces, ptr)?;
            if seen.contains(&merged) {
                continue;
            }
            seen.push(merged.clone());
            if self.quick_empty(&merged) {
                continue;
            }
            merged_terms.push((merged, refs));
        }
        if !self.opts.lenient {
            // stable: the refused ones first, the others in their order
            merged_terms.sort_by_key(|(merged, _)| !self.divisors_refused(merged, ptr));
        }
        let mut alts = Vec::new();
        for (merged, refs) in merged_terms {
            crate::budget::check("compiling the terms of schema combinators")?;
            let n = self.stack.len();
            self.stack.extend(refs);
            let h = self.schema_built(&merged, ptr);
            self.stack.truncate(n);
            alts.push(h?);
        }
        Ok(crate::automata::expr::alt_opt(alts))
    }

    /// Whether a merged term's `multipleOf` divisors (its own and the negated ones from `not`,
    /// as [`Compiler::divisors`] reads them for the compile) are refused together
    /// ([`crate::json_schema::multiple::divisors_supported`]), a check that builds no
    /// automaton. A malformed divisor is left to the compile.
    fn divisors_refused(&self, merged: &Option<Built>, ptr: &str) -> bool {
        let Some(b) = merged else {
            return false;
        };
        self.divisors(&b.map, &b.x, ptr, false).is_ok_and(|d| {
            !d.is_empty() && crate::json_schema::multiple::divisors_supported(&d).is_err()
        })
    }
}

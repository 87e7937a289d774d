//! Sub-schemas the algebra built ([`Sub`]): compiled, expanded and negated as the JSON they
//! stand for.

use serde_json::{Map, Value};

use super::{
    built_part, check_depth, core_keywords, negation_terms, obj, too_many_terms, Part, Term,
    MAX_TERMS,
};
use crate::automata::expr::Expr;
use crate::error::Result;
use crate::json_schema::compile::{child, Compiler, Piece};
use crate::json_schema::extra::Sub;

impl<'a> Compiler<'a> {
    // ---- sub-schemas the algebra built -------------------------------------------------
    //
    // A `Sub` that is not JSON is compiled, expanded and negated exactly as the JSON it stands
    // for would be: `Terms` as `anyOf` of `allOf`s of the parts (one term as itself, one part
    // as its map), `All` as `allOf`, `Not` as `not`.

    /// Whether the JSON that `s` stands for would go to the expansion (see `needs_algebra`).
    fn sub_needs_algebra(&self, s: &Sub, ptr: &str) -> Result<bool> {
        match sub_shape(s) {
            Value::Object(m) => self.needs_algebra(&m, ptr),
            _ => Ok(false),
        }
    }

    /// Compile a sub-schema.
    pub(in crate::json_schema) fn compile_sub(
        &mut self,
        s: &Sub,
        ptr: &str,
    ) -> Result<Option<Expr>> {
        match s {
            Sub::Json(v) => self.schema(v, ptr),
            Sub::Terms(terms) => match terms.as_slice() {
                [] => Ok(None),
                [t] => self.compile_term(t, ptr),
                _ if self.sub_needs_algebra(s, ptr)? => {
                    let terms = self.expand_sub(s, ptr, 0)?;
                    self.compile_terms(terms, ptr)
                }
                _ => {
                    let mut alts = Vec::new();
                    for (i, t) in terms.iter().enumerate() {
                        alts.push(
                            self.compile_term(t, &child(&child(ptr, "anyOf"), &i.to_string()))?,
                        );
                    }
                    Ok(crate::automata::expr::alt_opt(alts))
                }
            },
            Sub::All(list) => {
                if self.sub_needs_algebra(s, ptr)? {
                    let terms = self.expand_sub(s, ptr, 0)?;
                    return self.compile_terms(terms, ptr);
                }
                let mut items: Vec<Piece> = list.iter().map(Piece::Sub).collect();
                items.push(Piece::Built(Box::default()));
                let merged = self.merge_all(items, &child(ptr, "allOf"))?;
                self.schema_built(&merged, ptr)
            }
            Sub::Not(_) => {
                let terms = self.expand_sub(s, ptr, 0)?;
                self.compile_terms(terms, ptr)
            }
        }
    }

    /// Compile one term (its parts as `allOf`).
    fn compile_term(&mut self, t: &Term, ptr: &str) -> Result<Option<Expr>> {
        match t.as_slice() {
            [] => self.schema(&Value::Bool(true), ptr),
            [p] => self.schema_built(&Some(p.to_built()), ptr),
            _ => {
                if self.sub_needs_algebra(&Sub::Terms(vec![t.clone()]), ptr)? {
                    return self.compile_terms(vec![t.clone()], ptr);
                }
                let mut items: Vec<Piece> = t
                    .iter()
                    .map(|p| Piece::Built(Box::new(p.to_built())))
                    .collect();
                items.push(Piece::Built(Box::default()));
                let merged = self.merge_all(items, &child(ptr, "allOf"))?;
                self.schema_built(&merged, ptr)
            }
        }
    }

    /// [`Compiler::expand`] of a sub-schema.
    pub(super) fn expand_sub(&mut self, s: &Sub, ptr: &str, depth: u32) -> Result<Vec<Term>> {
        crate::budget::check("expanding schema combinators")?;
        check_depth("allOf", ptr, depth)?;
        match s {
            Sub::Json(v) => self.expand(v, ptr, depth),
            Sub::Terms(terms) => {
                if terms.len() > MAX_TERMS {
                    return Err(too_many_terms(ptr));
                }
                // expanded again, the parts are the schema's own
                Ok(terms
                    .iter()
                    .map(|t| {
                        t.iter()
                            .map(|p| {
                                let mut p = p.clone();
                                p.eval = true;
                                p
                            })
                            .collect()
                    })
                    .collect())
            }
            Sub::All(list) => {
                let mut terms: Vec<Term> = vec![vec![]];
                for (i, b) in list.iter().enumerate() {
                    let sub = self.expand_sub(
                        b,
                        &child(&child(ptr, "allOf"), &i.to_string()),
                        depth + 1,
                    )?;
                    terms = self.product(terms, sub, ptr)?;
                }
                Ok(terms)
            }
            Sub::Not(c) => self.negate_sub(c, &child(ptr, "not"), depth + 1),
        }
    }

    /// [`Compiler::negate`] of a sub-schema.
    pub(super) fn negate_sub(&mut self, s: &Sub, ptr: &str, depth: u32) -> Result<Vec<Term>> {
        check_depth("not", ptr, depth)?;
        let out = match s {
            Sub::Json(v) => return self.negate(v, ptr, depth),
            Sub::Terms(terms) => match terms.as_slice() {
                [] => return Ok(vec![vec![]]),
                [t] => return self.negate_term(t, ptr, depth),
                _ => {
                    let mut acc: Vec<Term> = vec![vec![]];
                    for (i, t) in terms.iter().enumerate() {
                        let n = self.negate_term(
                            t,
                            &child(&child(ptr, "anyOf"), &i.to_string()),
                            depth + 1,
                        )?;
                        acc = self.product(acc, n, ptr)?;
                    }
                    acc
                }
            },
            Sub::All(list) => {
                let mut out = Vec::new();
                for (i, b) in list.iter().enumerate() {
                    let n = self.negate_sub(
                        b,
                        &child(&child(ptr, "allOf"), &i.to_string()),
                        depth + 1,
                    )?;
                    out = self.union(out, n, ptr)?;
                }
                out
            }
            Sub::Not(c) => self.expand_sub(c, &child(ptr, "not"), depth + 1)?,
        };
        negation_terms(out, ptr)
    }

    /// The negation of one term (its parts as `allOf`).
    fn negate_term(&mut self, t: &Term, ptr: &str, depth: u32) -> Result<Vec<Term>> {
        check_depth("not", ptr, depth)?;
        let out = match t.as_slice() {
            [] => return Ok(vec![]),
            [p] => return self.negate_part(p, ptr, depth),
            _ => {
                let mut out = Vec::new();
                for (i, p) in t.iter().enumerate() {
                    let n = self.negate_part(
                        p,
                        &child(&child(ptr, "allOf"), &i.to_string()),
                        depth + 1,
                    )?;
                    out = self.union(out, n, ptr)?;
                }
                out
            }
        };
        negation_terms(out, ptr)
    }

    /// The negation of one part (an applicator-free map with its typed constraints).
    fn negate_part(&mut self, p: &Part, ptr: &str, depth: u32) -> Result<Vec<Term>> {
        check_depth("not", ptr, depth)?;
        self.check_keywords(&p.map, ptr)?;
        let core = core_keywords(&p.map);
        let out: Vec<Term> = self
            .negate_core(&core, &p.x, ptr)?
            .into_iter()
            .map(|b| vec![built_part(b)])
            .collect();
        negation_terms(out, ptr)
    }
}

/// The JSON a sub-schema stands for, with each part's map left empty: enough to route it the
/// way that JSON would be routed (parts hold no applicators).
fn sub_shape(s: &Sub) -> Value {
    match s {
        Sub::Json(v) => v.clone(),
        Sub::Terms(terms) => {
            let alts: Vec<Value> = terms
                .iter()
                .map(|t| match t.len() {
                    0 => Value::Bool(true),
                    1 => Value::Object(Map::new()),
                    n => Value::Object(obj(vec![(
                        "allOf",
                        Value::Array(vec![Value::Object(Map::new()); n]),
                    )])),
                })
                .collect();
            match alts.len() {
                0 => Value::Bool(false),
                1 => alts.into_iter().next().expect("one"),
                _ => Value::Object(obj(vec![("anyOf", Value::Array(alts))])),
            }
        }
        Sub::All(list) => Value::Object(obj(vec![(
            "allOf",
            Value::Array(list.iter().map(sub_shape).collect()),
        )])),
        Sub::Not(c) => Value::Object(obj(vec![("not", sub_shape(c))])),
    }
}

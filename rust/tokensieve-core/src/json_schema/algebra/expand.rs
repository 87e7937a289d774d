//! The expansion of a schema into a union of terms (see the parent module).

use serde_json::{Map, Value};

use super::negate::{tags_apart, Tags};
use super::{absent, arr, check_depth, core_keywords, part, required, Term};
use crate::error::Result;
use crate::json_schema::compile::{child, schema_error, Compiler};
use crate::json_schema::extra::Extra;
use crate::json_schema::options::OneOf;

impl<'a> Compiler<'a> {
    pub(super) fn expand_ref(
        &mut self,
        r: &Value,
        ptr: &str,
        depth: u32,
        negate: bool,
    ) -> Result<Vec<Term>> {
        let r = r
            .as_str()
            .ok_or_else(|| schema_error("$ref", ptr, "$ref must be a string"))?;
        let (target, tptr) = self.resolve(r, ptr)?;
        let active = self.stack.iter().filter(|p| **p == tptr).count();
        if active >= self.opts.max_recursion_depth as usize {
            // Cutting drops values in either polarity: the language only shrinks.
            self.cuts += 1;
            return Ok(vec![]);
        }
        self.stack.push(tptr.clone());
        let out = if negate {
            self.negate(target, &tptr, depth + 1)
        } else {
            self.expand(target, &tptr, depth + 1)
        };
        self.stack.pop();
        let mut out = out?;
        for t in &mut out {
            for p in t.iter_mut() {
                p.refs.push(tptr.clone());
            }
        }
        Ok(out)
    }

    /// The schema `v` as a union of conjunctions of applicator-free parts.
    pub(super) fn expand(&mut self, v: &Value, ptr: &str, depth: u32) -> Result<Vec<Term>> {
        crate::budget::check("expanding schema combinators")?;
        check_depth("allOf", ptr, depth)?;
        match v {
            Value::Bool(true) => Ok(vec![vec![]]),
            Value::Bool(false) => Ok(vec![]),
            Value::Object(m) => self.expand_object(m, &Extra::default(), ptr, depth),
            _ => Err(schema_error(
                "",
                ptr,
                "a schema must be a JSON object or a boolean",
            )),
        }
    }

    /// [`Compiler::expand`] of a keyword map whose own conjunct also carries `x`.
    pub(in crate::json_schema) fn expand_object(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
        depth: u32,
    ) -> Result<Vec<Term>> {
        self.check_keywords(m, ptr)?;
        let tracking =
            m.contains_key("unevaluatedProperties") || m.contains_key("unevaluatedItems");
        if tracking {
            self.eval_scopes += 1;
        }
        let out = self.expand_map(m, x, ptr, depth);
        if tracking {
            self.eval_scopes -= 1;
        }
        let mut terms = out?;
        if tracking {
            for t in &mut terms {
                Self::apply_unevaluated(t, m);
            }
        }
        Ok(terms)
    }

    fn expand_map(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
        depth: u32,
    ) -> Result<Vec<Term>> {
        let core = core_keywords(m);
        let mut own = part(core, true);
        own.x = std::sync::Arc::new(x.clone());
        let mut terms: Vec<Term> = vec![vec![own]];
        if let Some(r) = m.get("$ref") {
            let sub = self.expand_ref(r, ptr, depth, false)?;
            terms = self.product(terms, sub, ptr)?;
        }
        if let Some(all) = m.get("allOf") {
            for (i, b) in arr(all, "allOf", ptr)?.iter().enumerate() {
                let sub =
                    self.expand(b, &child(&child(ptr, "allOf"), &i.to_string()), depth + 1)?;
                terms = self.product(terms, sub, ptr)?;
            }
        }
        if let Some(any) = m.get("anyOf") {
            let mut subs = Vec::new();
            for (i, b) in arr(any, "anyOf", ptr)?.iter().enumerate() {
                subs.push(self.expand(
                    b,
                    &child(&child(ptr, "anyOf"), &i.to_string()),
                    depth + 1,
                )?);
            }
            let alts = if self.eval_scopes > 0 && subs.len() > 1 && subs.len() <= 4 {
                // every non-empty subset of branches, so annotations of all matching
                // branches are seen together
                let mut alts = Vec::new();
                for mask in 1u32..(1 << subs.len()) {
                    let mut acc: Vec<Term> = vec![vec![]];
                    for (i, s) in subs.iter().enumerate() {
                        if mask & (1 << i) != 0 {
                            acc = self.product(acc, s.clone(), ptr)?;
                        }
                    }
                    alts = self.union(alts, acc, ptr)?;
                }
                alts
            } else {
                let mut alts = Vec::new();
                for s in subs {
                    alts = self.union(alts, s, ptr)?;
                }
                alts
            };
            terms = self.product(terms, alts, ptr)?;
        }
        if let Some(one) = m.get("oneOf") {
            let branches = arr(one, "oneOf", ptr)?;
            let exclusive = !self.disjoint(branches, m)?;
            if exclusive && self.opts.one_of == OneOf::AnyOf {
                self.warnings.push(format!(
                    "#{ptr}: oneOf compiled as anyOf (branches not provably disjoint)"
                ));
            }
            let exclusive = exclusive && self.opts.one_of == OneOf::Error;
            let mut pos = Vec::new();
            let mut neg = Vec::new();
            for (i, b) in branches.iter().enumerate() {
                let bptr = child(&child(ptr, "oneOf"), &i.to_string());
                pos.push(self.expand(b, &bptr, depth + 1)?);
                if exclusive {
                    neg.push(self.negate(b, &bptr, depth + 1)?);
                }
            }
            // a branch whose tag values exclude another's needs no negation of that one (see
            // `Compiler::tags`)
            let tags = if exclusive {
                self.tags(branches, ptr)?
            } else {
                None
            };
            // a branch the tag does not tell apart fails the tagged ones together: one
            // alternative per group of tag values, not a product over them
            let untagged = |i: usize| tags.as_ref().is_some_and(|(_, vals)| vals[i].is_none());
            let none_tagged = match &tags {
                Some((tag, vals)) if (0..branches.len()).any(untagged) => {
                    let (negs, vals): (Vec<Vec<Term>>, Tags) = neg
                        .iter()
                        .zip(vals)
                        .filter(|(_, v)| v.is_some())
                        .map(|(n, v)| (n.clone(), v.clone()))
                        .unzip();
                    Some(self.none_of(negs, Some(&(tag.clone(), vals)), ptr)?)
                }
                _ => None,
            };
            let mut alts = Vec::new();
            for (i, p) in pos.iter().enumerate() {
                let mut acc = p.clone();
                if exclusive {
                    if let (true, Some(none)) = (untagged(i), &none_tagged) {
                        acc = self.product(acc, none.clone(), ptr)?;
                    }
                    for (j, n) in neg.iter().enumerate() {
                        let skip = tags_apart(tags.as_ref(), i, j) || (untagged(i) && !untagged(j));
                        if j != i && !skip {
                            acc = self.product(acc, n.clone(), ptr)?;
                        }
                    }
                }
                alts = self.union(alts, acc, ptr)?;
            }
            terms = self.product(terms, alts, ptr)?;
        }
        if let Some(n) = m.get("not") {
            let neg = self.negate(n, &child(ptr, "not"), depth + 1)?;
            terms = self.product(terms, neg, ptr)?;
        }
        if let Some(i) = m.get("if") {
            if !m.contains_key("then") && !m.contains_key("else") && self.eval_scopes > 0 {
                // no effect on validity, but a matching `if` still evaluates
                let yes = self.expand(i, &child(ptr, "if"), depth + 1)?;
                let no = self.negate(i, &child(ptr, "if"), depth + 1)?;
                let alts = self.union(yes, no, ptr)?;
                terms = self.product(terms, alts, ptr)?;
            }
            if m.contains_key("then") || m.contains_key("else") {
                let t = m.get("then").cloned().unwrap_or(Value::Bool(true));
                let e = m.get("else").cloned().unwrap_or(Value::Bool(true));
                let yes = self.expand(i, &child(ptr, "if"), depth + 1)?;
                let then = self.expand(&t, &child(ptr, "then"), depth + 1)?;
                let no = self.negate(i, &child(ptr, "if"), depth + 1)?;
                let els = self.expand(&e, &child(ptr, "else"), depth + 1)?;
                let a = self.product(yes, then, ptr)?;
                let b = self.product(no, els, ptr)?;
                let alts = self.union(a, b, ptr)?;
                terms = self.product(terms, alts, ptr)?;
            }
        }
        let mut deps: Vec<(String, Value, &str)> = Vec::new();
        for kw in ["dependentRequired", "dependentSchemas", "dependencies"] {
            if let Some(d) = m.get(kw) {
                let d = d
                    .as_object()
                    .ok_or_else(|| schema_error(kw, ptr, format!("{kw} must be an object")))?;
                for (k, v) in d {
                    deps.push((k.clone(), v.clone(), kw));
                }
            }
        }
        for (name, dep, kw) in deps {
            let dptr = child(&child(ptr, kw), &name);
            let alts = match &dep {
                Value::Array(list) => {
                    if list.iter().any(|x| !x.is_string()) {
                        return Err(schema_error(
                            kw,
                            &dptr,
                            "a property dependency must list property names",
                        ));
                    }
                    let mut names = vec![Value::from(name.as_str())];
                    names.extend(list.iter().cloned());
                    vec![
                        vec![part(absent(&name), false)],
                        vec![part(required(names), true)],
                    ]
                }
                Value::Object(_) | Value::Bool(_) if kw != "dependentRequired" => {
                    let sub = self.expand(&dep, &dptr, depth + 1)?;
                    let has = vec![vec![part(required(vec![Value::from(name.as_str())]), true)]];
                    let with = self.product(has, sub, ptr)?;
                    self.union(vec![vec![part(absent(&name), false)]], with, ptr)?
                }
                _ => {
                    return Err(schema_error(
                        kw,
                        &dptr,
                        format!("{kw} values must be property lists or schemas"),
                    ))
                }
            };
            terms = self.product(terms, alts, ptr)?;
        }
        Ok(terms)
    }
}

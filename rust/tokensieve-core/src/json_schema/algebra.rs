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

use serde_json::{Map, Value};

use super::compile::{child, normalize, schema_error, Compiler, Piece};
use super::extra::{Built, Extra, SomeExtra, Sub};
use super::keywords::{
    bits_to_types, ALGEBRA, APPLICATORS, T_ALL, T_ARRAY, T_FRAC, T_INT, T_OBJECT,
};
use super::number::Dec;
use super::options::OneOf;
use crate::automata::expr::Expr;
use crate::error::{Error, Result};

/// One conjunct: an applicator-free keyword map with its typed constraints, and whether it
/// produces annotations.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Part {
    pub map: Map<String, Value>,
    pub x: Extra,
    pub eval: bool,
    /// `$ref` targets this part was expanded inside: they stay active (for the recursion
    /// limit) while the part's sub-schemas are compiled.
    pub refs: Vec<String>,
}

/// A conjunction of parts; a schema expands into a union of terms.
pub(super) type Term = Vec<Part>;

/// Largest number of terms one expansion may produce.
const MAX_TERMS: usize = 512;

fn part(map: Map<String, Value>, eval: bool) -> Part {
    Part {
        map,
        x: Extra::default(),
        eval,
        refs: Vec::new(),
    }
}

fn built_part(b: Built) -> Part {
    Part {
        map: b.map,
        x: b.x,
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
            if seen > 256 {
                return Ok(true);
            }
            let v = match v.get("$ref").and_then(Value::as_str) {
                Some(r) => match self.resolve(r, ptr) {
                    Ok((t, _)) => t,
                    Err(_) => continue,
                },
                None => v,
            };
            if let Value::Object(b) = v {
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
            }
        }
        Ok(false)
    }

    /// `a × b`: every term of `a` conjoined with every term of `b`.
    fn product(&self, a: Vec<Term>, b: Vec<Term>, ptr: &str) -> Result<Vec<Term>> {
        if a.len().saturating_mul(b.len()) > MAX_TERMS {
            return Err(Error::Budget(format!(
                "the combinators at #{ptr} expand to more than {MAX_TERMS} alternatives \
                 (anyOf/oneOf/not/if/dependencies multiply); simplify the schema"
            )));
        }
        let mut out = Vec::with_capacity(a.len() * b.len());
        for x in &a {
            for y in &b {
                let mut t = x.clone();
                t.extend(y.iter().cloned());
                out.push(t);
            }
        }
        Ok(out)
    }

    fn union(&self, mut a: Vec<Term>, b: Vec<Term>, ptr: &str) -> Result<Vec<Term>> {
        a.extend(b);
        if a.len() > MAX_TERMS {
            return Err(Error::Budget(format!(
                "the combinators at #{ptr} expand to more than {MAX_TERMS} alternatives \
                 (anyOf/oneOf/not/if/dependencies multiply); simplify the schema"
            )));
        }
        Ok(a)
    }

    fn expand_ref(&mut self, r: &Value, ptr: &str, depth: u32, negate: bool) -> Result<Vec<Term>> {
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
        if depth > 64 {
            return Err(schema_error(
                "allOf",
                ptr,
                "schema combinators nest more than 64 levels (a $ref cycle?)",
            ));
        }
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
    pub(super) fn expand_object(
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
        let mut core = m.clone();
        for k in APPLICATORS {
            core.remove(*k);
        }
        normalize(&mut core);
        let mut own = part(core, true);
        own.x = x.clone();
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
            let mut alts = Vec::new();
            for (i, p) in pos.iter().enumerate() {
                let mut acc = p.clone();
                if exclusive {
                    for (j, n) in neg.iter().enumerate() {
                        if j != i {
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

    /// Add the `unevaluated*` constraints of `m` to one term of its expansion.
    fn apply_unevaluated(t: &mut Term, m: &Map<String, Value>) {
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

    /// The complement of `v` (among all JSON values) as a union of terms. No part of it
    /// produces annotations.
    pub(super) fn negate(&mut self, v: &Value, ptr: &str, depth: u32) -> Result<Vec<Term>> {
        if depth > 64 {
            return Err(schema_error(
                "not",
                ptr,
                "schema combinators nest more than 64 levels (a $ref cycle?)",
            ));
        }
        let m = match v {
            Value::Bool(true) => return Ok(vec![]),
            Value::Bool(false) => return Ok(vec![vec![]]),
            Value::Object(m) => m,
            _ => {
                return Err(schema_error(
                    "",
                    ptr,
                    "a schema must be a JSON object or a boolean",
                ))
            }
        };
        self.check_keywords(m, ptr)?;
        let mut out: Vec<Term> = Vec::new();
        if let Some(r) = m.get("$ref") {
            let n = self.expand_ref(r, ptr, depth, true)?;
            out = self.union(out, n, ptr)?;
        }
        if let Some(all) = m.get("allOf") {
            for (i, b) in arr(all, "allOf", ptr)?.iter().enumerate() {
                let n = self.negate(b, &child(&child(ptr, "allOf"), &i.to_string()), depth + 1)?;
                out = self.union(out, n, ptr)?;
            }
        }
        if let Some(any) = m.get("anyOf") {
            let mut acc: Vec<Term> = vec![vec![]];
            for (i, b) in arr(any, "anyOf", ptr)?.iter().enumerate() {
                let n = self.negate(b, &child(&child(ptr, "anyOf"), &i.to_string()), depth + 1)?;
                acc = self.product(acc, n, ptr)?;
            }
            out = self.union(out, acc, ptr)?;
        }
        if let Some(one) = m.get("oneOf") {
            let branches = arr(one, "oneOf", ptr)?;
            let mut pos = Vec::new();
            let mut none: Vec<Term> = vec![vec![]];
            for (i, b) in branches.iter().enumerate() {
                let bptr = child(&child(ptr, "oneOf"), &i.to_string());
                let n = self.negate(b, &bptr, depth + 1)?;
                none = self.product(none, n, ptr)?;
                pos.push(self.expand(b, &bptr, depth + 1)?);
            }
            out = self.union(out, none, ptr)?;
            // two or more branches match
            for (i, a) in pos.iter().enumerate() {
                for b in &pos[i + 1..] {
                    let both = self.product(a.clone(), b.clone(), ptr)?;
                    out = self.union(out, both, ptr)?;
                }
            }
        }
        if let Some(n) = m.get("not") {
            let pos = self.expand(n, &child(ptr, "not"), depth + 1)?;
            out = self.union(out, pos, ptr)?;
        }
        if let Some(i) = m.get("if") {
            if let Some(t) = m.get("then") {
                let yes = self.expand(i, &child(ptr, "if"), depth + 1)?;
                let bad = self.negate(t, &child(ptr, "then"), depth + 1)?;
                let x = self.product(yes, bad, ptr)?;
                out = self.union(out, x, ptr)?;
            }
            if let Some(e) = m.get("else") {
                let no = self.negate(i, &child(ptr, "if"), depth + 1)?;
                let bad = self.negate(e, &child(ptr, "else"), depth + 1)?;
                let x = self.product(no, bad, ptr)?;
                out = self.union(out, x, ptr)?;
            }
        }
        for kw in ["dependentRequired", "dependentSchemas", "dependencies"] {
            let Some(d) = m.get(kw) else { continue };
            let d = d
                .as_object()
                .ok_or_else(|| schema_error(kw, ptr, format!("{kw} must be an object")))?;
            for (name, dep) in d {
                let has = vec![vec![part(
                    required(vec![Value::from(name.as_str())]),
                    false,
                )]];
                match dep {
                    Value::Array(list) => {
                        for b in list.iter().filter_map(Value::as_str) {
                            let x =
                                self.product(has.clone(), vec![vec![part(absent(b), false)]], ptr)?;
                            out = self.union(out, x, ptr)?;
                        }
                    }
                    s => {
                        let n = self.negate(s, &child(&child(ptr, kw), name), depth + 1)?;
                        let x = self.product(has, n, ptr)?;
                        out = self.union(out, x, ptr)?;
                    }
                }
            }
        }
        for kw in ["unevaluatedProperties", "unevaluatedItems"] {
            if m.get(kw).is_some_and(|u| u != &Value::Bool(true)) {
                self.unsupported(
                    kw,
                    ptr,
                    &format!("`{kw}` inside `not` (or a negated if/oneOf branch) is not supported"),
                )?;
            }
        }
        let mut core = m.clone();
        for k in APPLICATORS {
            core.remove(*k);
        }
        normalize(&mut core);
        for b in self.negate_core(&core, &Extra::default(), ptr)? {
            out.push(vec![built_part(b)]);
        }
        if out.len() > MAX_TERMS {
            return Err(Error::Budget(format!(
                "the negation at #{ptr} expands to more than {MAX_TERMS} alternatives"
            )));
        }
        Ok(no_eval(out))
    }

    /// One keyword map (no applicators) violated: the union of the ways to violate one of its
    /// keywords.
    /// The map's placeholders (`true` where `x` holds a sub-schema, see [`Extra`]) are read
    /// through `x`; `x`'s own constraints cannot be negated again.
    fn negate_core(&mut self, m: &Map<String, Value>, x: &Extra, ptr: &str) -> Result<Vec<Built>> {
        let mut out: Vec<Built> = Vec::new();
        let typed = |t: &str, pairs: Vec<(&str, Value)>| {
            let mut o = obj(pairs);
            o.insert("type".into(), Value::from(t));
            built(o)
        };
        let bits = self.type_bits_x(m, x, ptr)?;
        if bits != T_ALL {
            out.push(types(T_ALL & !bits));
        }
        // const / enum
        let values: Option<Vec<Value>> = match (m.get("const"), m.get("enum")) {
            (Some(c), _) => Some(vec![c.clone()]),
            (None, Some(Value::Array(e))) => Some(e.clone()),
            (None, Some(_)) => return Err(schema_error("enum", ptr, "enum must be an array")),
            (None, None) => None,
        };
        if let (Some(_), Some(Value::Array(e))) = (m.get("const"), m.get("enum")) {
            // both: violating either one
            let mut o = Map::new();
            o.insert("enum".into(), Value::Array(e.clone()));
            out.extend(self.negate_core(&o, &Extra::default(), ptr)?);
        }
        if let Some(vals) = values {
            let present = vals
                .iter()
                .fold(0u8, |a, v| a | super::keywords::value_bits(v));
            let missing = T_ALL & !present & !(T_INT | T_FRAC);
            let has_num = present & (T_INT | T_FRAC) != 0;
            let mut other = missing;
            if !has_num {
                other |= T_INT | T_FRAC;
            }
            if other != 0 {
                out.push(types(other));
            }
            let strings: Vec<Value> = vals.iter().filter(|v| v.is_string()).cloned().collect();
            if !strings.is_empty() {
                let mut b = typed("string", vec![]);
                b.x.not_in = strings;
                out.push(b);
            }
            let bools: Vec<bool> = vals.iter().filter_map(Value::as_bool).collect();
            if !bools.is_empty() {
                for b in [true, false] {
                    if !bools.contains(&b) {
                        out.push(built(obj(vec![("const", Value::Bool(b))])));
                    }
                }
            }
            if has_num {
                let mut nums: Vec<(Dec, Value)> = vals
                    .iter()
                    .filter_map(|v| v.as_number().map(|n| (Dec::from_json(n), v.clone())))
                    .collect();
                nums.sort_by(|a, b| a.0.cmp(&b.0));
                nums.dedup_by(|a, b| a.0 == b.0);
                let mut prev: Option<&Value> = None;
                for (_, d) in &nums {
                    let mut pairs = vec![("exclusiveMaximum", d.clone())];
                    if let Some(p) = prev {
                        pairs.push(("exclusiveMinimum", p.clone()));
                    }
                    out.push(typed("number", pairs));
                    prev = Some(d);
                }
                if let Some(p) = prev {
                    out.push(typed("number", vec![("exclusiveMinimum", p.clone())]));
                }
            }
            if vals.iter().any(|v| v.is_array() || v.is_object()) {
                let kw = if m.contains_key("const") {
                    "const"
                } else {
                    "enum"
                };
                self.unsupported(
                    kw,
                    ptr,
                    &format!("`not` of a `{kw}` holding arrays or objects is not supported"),
                )?;
                out.push(types(T_ARRAY | T_OBJECT));
            }
        }
        for (k, v) in m {
            let k = k.as_str();
            let num_v = || -> Result<Value> {
                if v.is_number() {
                    Ok(v.clone())
                } else {
                    Err(schema_error(k, ptr, format!("{k} must be a number")))
                }
            };
            let count = |delta: i64| -> Result<Option<Value>> {
                let n = v.as_u64().or_else(|| {
                    v.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                        .map(|f| f as u64)
                });
                let n = n.ok_or_else(|| {
                    schema_error(k, ptr, format!("{k} must be a non-negative integer"))
                })?;
                let r = n as i64 + delta;
                Ok((r >= 0).then(|| Value::from(r as u64)))
            };
            match k {
                "type" | "const" | "enum" => {}
                "minimum" => out.push(typed("number", vec![("exclusiveMaximum", num_v()?)])),
                "exclusiveMinimum" => out.push(typed("number", vec![("maximum", num_v()?)])),
                "maximum" => out.push(typed("number", vec![("exclusiveMinimum", num_v()?)])),
                "exclusiveMaximum" => out.push(typed("number", vec![("minimum", num_v()?)])),
                "multipleOf" => {
                    let mut b = typed("number", vec![]);
                    b.x.not_multiple_of = Some(num_v()?);
                    out.push(b);
                }
                "minLength" => {
                    if let Some(n) = count(-1)? {
                        out.push(typed("string", vec![("maxLength", n)]));
                    }
                }
                "maxLength" => {
                    out.push(typed("string", vec![("minLength", count(1)?.expect("+1"))]))
                }
                "minItems" => {
                    if let Some(n) = count(-1)? {
                        out.push(typed("array", vec![("maxItems", n)]));
                    }
                }
                "maxItems" => out.push(typed("array", vec![("minItems", count(1)?.expect("+1"))])),
                "minProperties" => {
                    if let Some(n) = count(-1)? {
                        out.push(typed("object", vec![("maxProperties", n)]));
                    }
                }
                "maxProperties" => out.push(typed(
                    "object",
                    vec![("minProperties", count(1)?.expect("+1"))],
                )),
                "pattern" => {
                    let mut b = typed("string", vec![]);
                    b.x.not_patterns = vec![v.clone()];
                    out.push(b);
                }
                "format" => {
                    if v.as_str().and_then(|f| self.asserted_format(f)).is_some() {
                        self.unsupported(
                            "format",
                            ptr,
                            "`not` of an asserted format is not supported (use formats=\"annotate\")",
                        )?;
                        out.push(built(obj(vec![("type", Value::from("string"))])));
                    }
                }
                "required" => {
                    for r in arr(v, "required", ptr)? {
                        let r = r.as_str().ok_or_else(|| {
                            schema_error("required", ptr, "required must be a list of strings")
                        })?;
                        let mut o = absent(r);
                        o.insert("type".into(), Value::from("object"));
                        out.push(built(o));
                    }
                }
                "properties" => {
                    let props = v.as_object().ok_or_else(|| {
                        schema_error("properties", ptr, "properties must be an object")
                    })?;
                    for (name, s) in props {
                        let pptr = child(&child(ptr, "properties"), name);
                        let n = match x.property(name) {
                            Some(sub) => self.negate_sub(&sub.clone(), &pptr, 1)?,
                            None => self.negate(s, &pptr, 1)?,
                        };
                        if n.is_empty() {
                            continue;
                        }
                        let mut p = Map::new();
                        let mut sx = Extra::default();
                        match Sub::from_terms(n) {
                            Sub::Json(v) => {
                                p.insert(name.clone(), v);
                            }
                            sub => {
                                p.insert(name.clone(), Value::Bool(true));
                                sx.properties.push((name.clone(), sub));
                            }
                        }
                        let mut b = typed(
                            "object",
                            vec![
                                ("required", Value::Array(vec![Value::from(name.as_str())])),
                                ("properties", Value::Object(p)),
                            ],
                        );
                        b.x = sx;
                        out.push(b);
                    }
                }
                // 2020-12 prefixItems and the draft-4 tuple form of items
                "prefixItems" | "items" if k == "prefixItems" || v.is_array() => {
                    for (i, s) in arr(v, k, ptr)?.iter().enumerate() {
                        let iptr = child(&child(ptr, k), &i.to_string());
                        let n = match x.prefix_item(i).filter(|_| k == "prefixItems") {
                            Some(sub) => self.negate_sub(&sub.clone(), &iptr, 1)?,
                            None => self.negate(s, &iptr, 1)?,
                        };
                        if n.is_empty() {
                            continue;
                        }
                        let mut pre = vec![Value::Bool(true); i];
                        let mut sx = Extra::default();
                        match Sub::from_terms(n) {
                            Sub::Json(v) => pre.push(v),
                            sub => {
                                pre.push(Value::Bool(true));
                                sx.prefix_items.push((i, sub));
                            }
                        }
                        let mut b = typed(
                            "array",
                            vec![
                                ("minItems", Value::from(i as u64 + 1)),
                                ("prefixItems", Value::Array(pre)),
                            ],
                        );
                        b.x = sx;
                        out.push(b);
                    }
                }
                "items" | "additionalItems" => {
                    if k == "additionalItems" && !matches!(m.get("items"), Some(Value::Array(_))) {
                        continue; // ignored without the tuple form
                    }
                    let start = match (m.get("prefixItems"), m.get("items")) {
                        (_, Some(Value::Array(a))) if k == "additionalItems" => a.len(),
                        (Some(Value::Array(p)), _) => p.len(),
                        _ => 0,
                    };
                    let n = self.negate(v, &child(ptr, k), 1)?;
                    if n.is_empty() {
                        continue;
                    }
                    let (c, sub) = match Sub::from_terms(n) {
                        Sub::Json(v) => (v, None),
                        sub => (Value::Bool(true), Some(sub)),
                    };
                    let mut b = typed("array", vec![("contains", c)]);
                    b.x.contains = sub;
                    b.x.contains_from = Some(start as u64);
                    out.push(b);
                }
                "contains" => {
                    let lo = m.get("minContains").and_then(Value::as_u64).unwrap_or(1);
                    let hi = m.get("maxContains").and_then(Value::as_u64);
                    // a placeholder `contains` keeps its schema in `x`
                    let with_contains = |mut b: Built| {
                        b.x.contains = x.contains.clone();
                        b
                    };
                    if lo > 0 {
                        out.push(with_contains(typed(
                            "array",
                            vec![
                                ("contains", v.clone()),
                                ("minContains", Value::from(0u64)),
                                ("maxContains", Value::from(lo - 1)),
                            ],
                        )));
                    }
                    if let Some(h) = hi {
                        out.push(with_contains(typed(
                            "array",
                            vec![("contains", v.clone()), ("minContains", Value::from(h + 1))],
                        )));
                    }
                }
                "minContains" | "maxContains" => {}
                "uniqueItems" if v == &Value::Bool(false) => {}
                "additionalProperties" => {
                    let n = self.negate(v, &child(ptr, k), 1)?;
                    if n.is_empty() {
                        continue;
                    }
                    let names: Vec<String> = match m.get("properties") {
                        Some(Value::Object(p)) => p.keys().cloned().collect(),
                        _ => vec![],
                    };
                    let patterns = m.get("patternProperties").map(|pp| {
                        pp.as_object()
                            .map(|o| o.keys().cloned().collect())
                            .unwrap_or_default()
                    });
                    let mut b = typed("object", vec![]);
                    b.x.some_extra = Some(SomeExtra {
                        names,
                        patterns,
                        schema: Sub::from_terms(n),
                    });
                    out.push(b);
                }
                k if !Self::is_validity(k) => {}
                _ => {
                    // Validity keywords without a negation here (uniqueItems, patternProperties,
                    // propertyNames, ...): refuse rather than guess. Lenient mode takes the
                    // whole type the keyword applies to (a superset).
                    self.unsupported(
                        k,
                        ptr,
                        &format!(
                            "`{k}` inside `not` (or a negated if/oneOf branch) is not supported"
                        ),
                    )?;
                    out.push(types(super::keywords::applies_to(k)));
                }
            }
        }
        // The typed constraints (the placeholders' sub-schemas were read above).
        for (present, what) in [
            (
                !x.not_in.is_empty(),
                "the strings a negated const/enum excludes",
            ),
            (!x.not_patterns.is_empty(), "a negated pattern"),
            (
                !x.all_patterns.is_empty(),
                "the patterns of merged allOf branches",
            ),
            (x.not_multiple_of.is_some(), "a negated multipleOf"),
            (
                x.contains_from.is_some(),
                "the items a negated items schema counts",
            ),
            (x.some_extra.is_some(), "a negated additionalProperties"),
        ] {
            if present {
                self.unsupported(
                    "not",
                    ptr,
                    &format!("a nested negation of {what} is not supported"),
                )?;
            }
        }
        Ok(out)
    }

    /// Compile a union of terms: each term's parts are merged like `allOf`.
    pub(super) fn compile_terms(&mut self, terms: Vec<Term>, ptr: &str) -> Result<Option<Expr>> {
        let mut seen: Vec<Option<Built>> = Vec::new();
        let mut alts = Vec::new();
        for t in terms {
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
                .map(|p| Piece::Built(Box::new(Built { map: p.map, x: p.x })))
                .collect();
            let merged = self.merge_all(pieces, ptr)?;
            if seen.contains(&merged) {
                continue;
            }
            seen.push(merged.clone());
            if self.quick_empty(&merged) {
                continue;
            }
            let n = self.stack.len();
            self.stack.extend(refs);
            let h = self.schema_built(&merged, ptr);
            self.stack.truncate(n);
            alts.push(h?);
        }
        Ok(crate::automata::expr::alt_opt(alts))
    }

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
    pub(super) fn compile_sub(&mut self, s: &Sub, ptr: &str) -> Result<Option<Expr>> {
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
            [p] => self.schema_built(
                &Some(Built {
                    map: p.map.clone(),
                    x: p.x.clone(),
                }),
                ptr,
            ),
            _ => {
                if self.sub_needs_algebra(&Sub::Terms(vec![t.clone()]), ptr)? {
                    return self.compile_terms(vec![t.clone()], ptr);
                }
                let mut items: Vec<Piece> = t
                    .iter()
                    .map(|p| {
                        Piece::Built(Box::new(Built {
                            map: p.map.clone(),
                            x: p.x.clone(),
                        }))
                    })
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
        if depth > 64 {
            return Err(schema_error(
                "allOf",
                ptr,
                "schema combinators nest more than 64 levels (a $ref cycle?)",
            ));
        }
        match s {
            Sub::Json(v) => self.expand(v, ptr, depth),
            Sub::Terms(terms) => {
                if terms.len() > MAX_TERMS {
                    return Err(Error::Budget(format!(
                        "the combinators at #{ptr} expand to more than {MAX_TERMS} alternatives \
                         (anyOf/oneOf/not/if/dependencies multiply); simplify the schema"
                    )));
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
        if depth > 64 {
            return Err(schema_error(
                "not",
                ptr,
                "schema combinators nest more than 64 levels (a $ref cycle?)",
            ));
        }
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
        if out.len() > MAX_TERMS {
            return Err(Error::Budget(format!(
                "the negation at #{ptr} expands to more than {MAX_TERMS} alternatives"
            )));
        }
        Ok(no_eval(out))
    }

    /// The negation of one term (its parts as `allOf`).
    fn negate_term(&mut self, t: &Term, ptr: &str, depth: u32) -> Result<Vec<Term>> {
        if depth > 64 {
            return Err(schema_error(
                "not",
                ptr,
                "schema combinators nest more than 64 levels (a $ref cycle?)",
            ));
        }
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
        if out.len() > MAX_TERMS {
            return Err(Error::Budget(format!(
                "the negation at #{ptr} expands to more than {MAX_TERMS} alternatives"
            )));
        }
        Ok(no_eval(out))
    }

    /// The negation of one part (an applicator-free map with its typed constraints).
    fn negate_part(&mut self, p: &Part, ptr: &str, depth: u32) -> Result<Vec<Term>> {
        if depth > 64 {
            return Err(schema_error(
                "not",
                ptr,
                "schema combinators nest more than 64 levels (a $ref cycle?)",
            ));
        }
        self.check_keywords(&p.map, ptr)?;
        let mut core = p.map.clone();
        for k in APPLICATORS {
            core.remove(*k);
        }
        normalize(&mut core);
        let out: Vec<Term> = self
            .negate_core(&core, &p.x, ptr)?
            .into_iter()
            .map(|b| vec![built_part(b)])
            .collect();
        if out.len() > MAX_TERMS {
            return Err(Error::Budget(format!(
                "the negation at #{ptr} expands to more than {MAX_TERMS} alternatives"
            )));
        }
        Ok(no_eval(out))
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

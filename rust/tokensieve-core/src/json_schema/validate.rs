//! A small validator for concrete values: `const`/`enum` values are kept only if they satisfy
//! every sibling keyword, so `{enum: [...], minLength: 3, not: {...}}` is exact. It covers the
//! keywords the compiler supports; anything else is an error rather than a guess.

use serde_json::{Map, Value};

use super::compile::{json_eq, schema_error, Compiler};
use super::extra::{Extra, Sub};
use super::keywords::T_INT;
use super::keywords::{type_bits, value_bits};
use super::number::Dec;
use crate::automata::dfa::{LazyDfa, DEAD};
use crate::error::Result;
use crate::regex::RegexOptions;

pub(super) fn full_match(h: &regex_syntax::hir::Hir, s: &str) -> Result<bool> {
    let d = LazyDfa::from_hir("value check", h, &RegexOptions::default())?;
    let st = d.walk(d.start(), s.as_bytes())?;
    Ok(st != DEAD && d.is_accepting(st))
}

/// Fails once checking a const/enum value has nested more than 64 levels (through `$ref`s and
/// sub-schemas).
fn check_depth(ptr: &str, depth: u32) -> Result<()> {
    if depth > 64 {
        return Err(schema_error(
            "$ref",
            ptr,
            "checking a const/enum value nests more than 64 levels",
        ));
    }
    Ok(())
}

/// `x` is an integer multiple of `d` (both exact decimals).
pub(super) fn is_multiple(x: &Dec, d: &Dec) -> Option<bool> {
    if d.is_zero() {
        return None;
    }
    // scale both to integers
    let k = x.frac.len().max(d.frac.len());
    let (a, b) = (x.scaled(k)?, d.scaled(k)?);
    Some(a % b == 0)
}

impl<'a> Compiler<'a> {
    /// Whether the concrete value `v` is valid against schema `s`.
    pub(super) fn validates(
        &mut self,
        v: &Value,
        s: &Value,
        ptr: &str,
        depth: u32,
    ) -> Result<bool> {
        check_depth(ptr, depth)?;
        match s {
            Value::Bool(b) => Ok(*b),
            Value::Object(m) => self.validates_map(v, m, &Extra::default(), ptr, depth),
            _ => Err(schema_error(
                "",
                ptr,
                "a schema must be a JSON object or a boolean",
            )),
        }
    }

    /// Whether `v` is valid against a keyword map with its typed constraints.
    pub(super) fn validates_map(
        &mut self,
        v: &Value,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
        depth: u32,
    ) -> Result<bool> {
        check_depth(ptr, depth)?;
        for (k, kv) in m {
            if !self.keyword_ok(v, k, kv, m, x, ptr, depth)? {
                return Ok(false);
            }
        }
        self.extra_ok(v, x, ptr, depth)
    }

    /// Whether `v` is valid against a sub-schema (`Terms` as `anyOf` of `allOf`s).
    pub(super) fn validates_sub(
        &mut self,
        v: &Value,
        s: &Sub,
        ptr: &str,
        depth: u32,
    ) -> Result<bool> {
        check_depth(ptr, depth)?;
        Ok(match s {
            Sub::Json(s) => self.validates(v, s, ptr, depth)?,
            Sub::Terms(terms) => {
                for t in terms {
                    let mut all = true;
                    for p in t {
                        if !self.validates_map(v, &p.map, &p.x, ptr, depth + 1)? {
                            all = false;
                            break;
                        }
                    }
                    if all {
                        return Ok(true);
                    }
                }
                false
            }
            Sub::All(list) => {
                for s in list {
                    if !self.validates_sub(v, s, ptr, depth + 1)? {
                        return Ok(false);
                    }
                }
                true
            }
            Sub::Not(s) => !self.validates_sub(v, s, ptr, depth + 1)?,
        })
    }

    /// The typed constraints of a map (its placeholders are read in `keyword_ok`).
    fn extra_ok(&mut self, v: &Value, x: &Extra, ptr: &str, depth: u32) -> Result<bool> {
        if x.not_in.iter().any(|n| json_eq(n, v)) {
            return Ok(false);
        }
        if let Value::Number(n) = v {
            for d in &x.not_multiple_of {
                let Value::Number(d) = d else { continue };
                let ok = is_multiple(&Dec::from_json(n), &Dec::from_json(d)).ok_or_else(|| {
                    schema_error(
                        "multipleOf",
                        ptr,
                        "multipleOf is out of the exactly checkable range",
                    )
                })?;
                if ok {
                    return Ok(false);
                }
            }
        }
        if let Value::String(s) = v {
            for p in &x.all_patterns {
                if !full_match(&self.pattern_hir(p, "pattern", ptr)?, s)? {
                    return Ok(false);
                }
            }
            for p in &x.not_patterns {
                if full_match(&self.pattern_hir(p, "pattern", ptr)?, s)? {
                    return Ok(false);
                }
            }
            for f in &x.not_formats {
                if let Some(h) = f.as_str().and_then(|f| self.asserted_format(f)) {
                    if full_match(&h, s)? {
                        return Ok(false);
                    }
                }
            }
        }
        if let Value::Array(a) = v {
            for c in &x.more_contains {
                let mut n = 0u64;
                for item in a.iter().skip(c.from as usize) {
                    n += u64::from(self.validates_sub(item, &c.schema, ptr, depth + 1)?);
                }
                if n < c.min || c.max.is_some_and(|h| n > h) {
                    return Ok(false);
                }
            }
        }
        if let Value::Object(o) = v {
            for view in &x.key_views {
                for (name, val) in o {
                    for s in self.view_constraints(view, name, ptr)? {
                        if !self.validates(val, &s, ptr, depth + 1)? {
                            return Ok(false);
                        }
                    }
                }
            }
        }
        for some in &x.some_extra {
            let Value::Object(o) = v else { return Ok(true) };
            if some.patterns.is_some() {
                return Err(schema_error(
                    "patternProperties",
                    ptr,
                    "checking const/enum values against patternProperties is not supported",
                ));
            }
            let mut witnessed = false;
            let key = match &some.key {
                Some(p) => {
                    Some(self.pattern_hir(&Value::from(p.as_str()), "patternProperties", ptr)?)
                }
                None => None,
            };
            for (name, val) in o {
                let mut kind = match &key {
                    Some(h) => crate::json_schema::validate::full_match(h, name)?,
                    None => !some.names.contains(name),
                };
                for h in &some.not_keys {
                    kind = kind && !crate::json_schema::validate::full_match(h, name)?;
                }
                if kind && self.validates_sub(val, &some.schema, ptr, depth + 1)? {
                    witnessed = true;
                    break;
                }
            }
            if !witnessed {
                return Ok(false);
            }
        }
        Ok(true)
    }

    #[allow(clippy::too_many_arguments)]
    fn keyword_ok(
        &mut self,
        v: &Value,
        k: &str,
        kv: &Value,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
        depth: u32,
    ) -> Result<bool> {
        let d = depth + 1;
        let num = |x: &Value| x.as_number().map(Dec::from_json);
        let count = |x: &Value| x.as_u64().or_else(|| x.as_f64().map(|f| f as u64));
        Ok(match k {
            "$ref" => {
                let r = kv
                    .as_str()
                    .ok_or_else(|| schema_error("$ref", ptr, "$ref must be a string"))?;
                let (t, tptr) = self.resolve(r, ptr)?;
                self.validates(v, t, &tptr, d)?
            }
            "allOf" => {
                for s in kv.as_array().into_iter().flatten() {
                    if !self.validates(v, s, ptr, d)? {
                        return Ok(false);
                    }
                }
                true
            }
            "anyOf" => {
                for s in kv.as_array().into_iter().flatten() {
                    if self.validates(v, s, ptr, d)? {
                        return Ok(true);
                    }
                }
                false
            }
            "oneOf" => {
                let mut n = 0;
                for s in kv.as_array().into_iter().flatten() {
                    if self.validates(v, s, ptr, d)? {
                        n += 1;
                    }
                }
                n == 1
            }
            "not" => !self.validates(v, kv, ptr, d)?,
            "if" => {
                if self.validates(v, kv, ptr, d)? {
                    match m.get("then") {
                        Some(t) => self.validates(v, t, ptr, d)?,
                        None => true,
                    }
                } else {
                    match m.get("else") {
                        Some(e) => self.validates(v, e, ptr, d)?,
                        None => true,
                    }
                }
            }
            "then" | "else" => true,
            "type" => {
                let bits = match kv {
                    Value::String(t) => type_bits(t).unwrap_or(0),
                    Value::Array(ts) => ts
                        .iter()
                        .map(|t| t.as_str().and_then(type_bits).unwrap_or(0))
                        .fold(0, |a, b| a | b),
                    _ => 0,
                };
                let bits = if x.fraction_only { bits & !T_INT } else { bits };
                let nullable = m.get("nullable") == Some(&Value::Bool(true));
                value_bits(v) & bits != 0 || (nullable && v.is_null())
            }
            "nullable" => true,
            "enum" => kv
                .as_array()
                .is_some_and(|a| a.iter().any(|x| json_eq(x, v))),
            "const" => json_eq(kv, v),
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
                let (Some(x), Some(b)) = (num(v), num(kv)) else {
                    // non-numbers, or the draft-4 boolean form (read with its partner)
                    if let (Some(x), Value::Bool(true)) = (num(v), kv) {
                        let partner = if k == "exclusiveMinimum" {
                            "minimum"
                        } else {
                            "maximum"
                        };
                        if let Some(b) = m.get(partner).and_then(num) {
                            return Ok(x != b);
                        }
                    }
                    return Ok(true);
                };
                match k {
                    "minimum" => x >= b,
                    "maximum" => x <= b,
                    "exclusiveMinimum" => x > b,
                    _ => x < b,
                }
            }
            "multipleOf" => {
                let (Some(x), Some(b)) = (num(v), num(kv)) else {
                    return Ok(true);
                };
                is_multiple(&x, &b).ok_or_else(|| {
                    schema_error(k, ptr, "multipleOf is out of the exactly checkable range")
                })?
            }
            "minLength" | "maxLength" => {
                let Value::String(s) = v else { return Ok(true) };
                let n = s.chars().count() as u64;
                let b = count(kv).unwrap_or(0);
                if k == "minLength" {
                    n >= b
                } else {
                    n <= b
                }
            }
            "pattern" => {
                let Value::String(s) = v else { return Ok(true) };
                full_match(&self.pattern_hir(kv, k, ptr)?, s)?
            }
            "format" => {
                let Value::String(s) = v else { return Ok(true) };
                match kv.as_str().and_then(|f| self.asserted_format(f)) {
                    None => true,
                    Some(h) => full_match(&h, s)?,
                }
            }
            "minItems" | "maxItems" => {
                let Value::Array(a) = v else { return Ok(true) };
                let b = count(kv).unwrap_or(0);
                if k == "minItems" {
                    a.len() as u64 >= b
                } else {
                    a.len() as u64 <= b
                }
            }
            "prefixItems" | "items" | "additionalItems" => {
                let Value::Array(a) = v else { return Ok(true) };
                let (start, sch): (usize, Option<&Value>) = match (k, kv) {
                    ("prefixItems", Value::Array(p)) | ("items", Value::Array(p)) => {
                        for (i, (item, s)) in a.iter().zip(p).enumerate() {
                            let ok = match x.prefix_item(i).filter(|_| k == "prefixItems") {
                                Some(sub) => self.validates_sub(item, sub, ptr, d)?,
                                None => self.validates(item, s, ptr, d)?,
                            };
                            if !ok {
                                return Ok(false);
                            }
                        }
                        return Ok(true);
                    }
                    ("items", s) => (
                        match m.get("prefixItems") {
                            Some(Value::Array(p)) => p.len(),
                            _ => 0,
                        },
                        Some(s),
                    ),
                    ("additionalItems", s) => match m.get("items") {
                        Some(Value::Array(p)) => (p.len(), Some(s)),
                        _ => (0, None),
                    },
                    _ => (0, None),
                };
                if let Some(s) = sch {
                    for item in a.iter().skip(start) {
                        if !self.validates(item, s, ptr, d)? {
                            return Ok(false);
                        }
                    }
                }
                true
            }
            "uniqueItems" => {
                let Value::Array(a) = v else { return Ok(true) };
                if kv != &Value::Bool(true) {
                    return Ok(true);
                }
                for i in 0..a.len() {
                    for j in i + 1..a.len() {
                        if json_eq(&a[i], &a[j]) {
                            return Ok(false);
                        }
                    }
                }
                true
            }
            "contains" => {
                let Value::Array(a) = v else { return Ok(true) };
                let from = x.contains_from.unwrap_or(0) as usize;
                let lo = m.get("minContains").and_then(count).unwrap_or(1);
                let hi = m.get("maxContains").and_then(count);
                let mut n = 0u64;
                for item in a.iter().skip(from) {
                    let ok = match &x.contains {
                        Some(sub) => self.validates_sub(item, sub, ptr, d)?,
                        None => self.validates(item, kv, ptr, d)?,
                    };
                    if ok {
                        n += 1;
                    }
                }
                n >= lo && hi.is_none_or(|h| n <= h)
            }
            "minContains" | "maxContains" => true,
            "required" => {
                let Value::Object(o) = v else { return Ok(true) };
                kv.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .all(|r| o.contains_key(r))
            }
            "minProperties" | "maxProperties" => {
                let Value::Object(o) = v else { return Ok(true) };
                let b = count(kv).unwrap_or(0);
                if k == "minProperties" {
                    o.len() as u64 >= b
                } else {
                    o.len() as u64 <= b
                }
            }
            "properties" => {
                let Value::Object(o) = v else { return Ok(true) };
                for (name, s) in kv.as_object().into_iter().flatten() {
                    if let Some(val) = o.get(name) {
                        let ok = match x.property(name) {
                            Some(sub) => self.validates_sub(val, sub, ptr, d)?,
                            None => self.validates(val, s, ptr, d)?,
                        };
                        if !ok {
                            return Ok(false);
                        }
                    }
                }
                true
            }
            "additionalProperties" | "patternProperties" => {
                let Value::Object(o) = v else { return Ok(true) };
                let declared = m.get("properties").and_then(Value::as_object);
                let mut pats = Vec::new();
                for (p, sch) in m
                    .get("patternProperties")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    pats.push((
                        self.pattern_hir(&Value::from(p.as_str()), "patternProperties", ptr)?,
                        sch,
                    ));
                }
                for (name, x) in o {
                    let mut matched = false;
                    for (h, sch) in &pats {
                        if full_match(h, name)? {
                            matched = true;
                            if k == "patternProperties" && !self.validates(x, sch, ptr, d)? {
                                return Ok(false);
                            }
                        }
                    }
                    if k == "additionalProperties"
                        && !matched
                        && !declared.is_some_and(|p| p.contains_key(name))
                        && !self.validates(x, kv, ptr, d)?
                    {
                        return Ok(false);
                    }
                }
                true
            }
            "propertyNames" => {
                let Value::Object(o) = v else { return Ok(true) };
                for name in o.keys() {
                    if !self.validates(&Value::from(name.as_str()), kv, ptr, d)? {
                        return Ok(false);
                    }
                }
                true
            }
            "dependentRequired" | "dependentSchemas" | "dependencies" => {
                let Value::Object(o) = v else { return Ok(true) };
                for (name, dep) in kv.as_object().into_iter().flatten() {
                    if !o.contains_key(name) {
                        continue;
                    }
                    let ok = match dep {
                        Value::Array(list) => list
                            .iter()
                            .filter_map(Value::as_str)
                            .all(|r| o.contains_key(r)),
                        s => self.validates(v, s, ptr, d)?,
                    };
                    if !ok {
                        return Ok(false);
                    }
                }
                true
            }
            "$defs" | "definitions" => true,
            "unevaluatedProperties" | "unevaluatedItems" if kv == &Value::Bool(true) => true,
            _ if !Self::is_validity(k) => true,
            _ => {
                return Err(schema_error(
                    k,
                    ptr,
                    format!("`{k}` together with const/enum is not supported"),
                ))
            }
        })
    }
}

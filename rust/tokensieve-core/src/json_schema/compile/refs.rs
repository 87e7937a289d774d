//! References (`$ref`), `allOf` flattening and the merging of schemas.

use serde_json::{Map, Value};

use super::scalars::pattern_language;
use super::{json_eq, schema_error, Compiler};
use crate::automata::expr::Expr;
use crate::error::Result;
use crate::json_schema::keywords::{
    bits_to_types, type_bits, ALL_PATTERNS, ANNOTATIONS, NOT_IN, NOT_PATTERN, T_ALL,
};
use crate::json_schema::number::Dec;

impl<'a> Compiler<'a> {
    /// Look up a `$ref` in the internal form `resolve::prepare` wrote: `#/pointer` into the
    /// root, `tsdoc:N#/pointer` into registry document `N`. Returns the target and a key
    /// naming it (for the recursion limit and messages).
    pub(in crate::json_schema) fn resolve(
        &self,
        r: &str,
        ptr: &str,
    ) -> Result<(&'a Value, String)> {
        let docs = self.docs;
        if let Some(why) = r.strip_prefix(crate::json_schema::resolve::UNRESOLVED) {
            return Err(schema_error("$ref", ptr, why));
        }
        let (doc, p) = if let Some(rest) = r.strip_prefix("tsdoc:") {
            let (n, p) = rest.split_once('#').unwrap_or((rest, ""));
            let n: usize = n.parse().unwrap_or(usize::MAX);
            (n, p)
        } else if let Some(p) = r.strip_prefix('#') {
            (0, p)
        } else {
            return Err(schema_error(
                "$ref",
                ptr,
                format!("$ref {r:?} could not be resolved"),
            ));
        };
        let target = docs
            .get(doc)
            .and_then(|d| if p.is_empty() { Some(d) } else { d.pointer(p) });
        match target {
            Some(v) => Ok((
                v,
                if doc == 0 {
                    p.to_string()
                } else {
                    r.to_string()
                },
            )),
            None => Err(schema_error(
                "$ref",
                ptr,
                format!("$ref {r:?} points at nothing"),
            )),
        }
    }

    pub(super) fn reference(&mut self, r: &str, ptr: &str) -> Result<Option<Expr>> {
        let (target, tptr) = self.resolve(r, ptr)?;
        let active = self.stack.iter().filter(|p| **p == tptr).count();
        if active >= self.opts.max_recursion_depth as usize {
            self.cuts += 1;
            return Ok(None);
        }
        self.stack.push(tptr.clone());
        let out = self.schema(target, &tptr);
        self.stack.pop();
        let out = out?;
        self.count_built(&out, &tptr)?;
        Ok(out)
    }

    // ---- allOf merging -----------------------------------------------------------------

    pub(super) fn flatten(
        &self,
        v: &Value,
        ptr: &str,
        depth: u32,
        out: &mut Vec<Map<String, Value>>,
    ) -> Result<bool> {
        if depth > 64 {
            return Err(schema_error(
                "allOf",
                ptr,
                "allOf/$ref nest more than 64 levels (a $ref cycle through allOf?)",
            ));
        }
        match v {
            Value::Bool(true) => Ok(true),
            Value::Bool(false) => Ok(false),
            Value::Object(m) => {
                let mut rest = m.clone();
                if let Some(r) = rest.remove("$ref") {
                    let r = r
                        .as_str()
                        .ok_or_else(|| schema_error("$ref", ptr, "$ref must be a string"))?;
                    let (t, tptr) = self.resolve(r, ptr)?;
                    if !self.flatten(t, &tptr, depth + 1, out)? {
                        return Ok(false);
                    }
                }
                if let Some(all) = rest.remove("allOf") {
                    let list = all
                        .as_array()
                        .ok_or_else(|| schema_error("allOf", ptr, "allOf must be an array"))?;
                    for b in list {
                        if !self.flatten(b, ptr, depth + 1, out)? {
                            return Ok(false);
                        }
                    }
                }
                normalize(&mut rest);
                out.push(rest);
                Ok(true)
            }
            _ => Err(schema_error(
                "allOf",
                ptr,
                "a schema must be an object or a boolean",
            )),
        }
    }

    pub(in crate::json_schema) fn merge_all(&self, items: &[Value], ptr: &str) -> Result<Value> {
        let mut parts = Vec::new();
        for it in items {
            if !self.flatten(it, ptr, 0, &mut parts)? {
                return Ok(Value::Bool(false));
            }
        }
        let mut acc = Map::new();
        for p in parts {
            acc = merge(acc, p, ptr)?;
        }
        Ok(Value::Object(acc))
    }

    // ---- oneOf -------------------------------------------------------------------------

    pub(in crate::json_schema) fn deref<'b>(&self, mut v: &'b Value, ptr: &str) -> Result<&'b Value>
    where
        'a: 'b,
    {
        for _ in 0..64 {
            match v.get("$ref").and_then(Value::as_str) {
                Some(r) => v = self.resolve(r, ptr)?.0,
                None => return Ok(v),
            }
        }
        Ok(v)
    }
}

/// Draft-4 forms and OpenAPI `nullable` rewritten into 2020-12 keywords, so that merging sees
/// one spelling of each constraint.
pub(in crate::json_schema) fn normalize(m: &mut Map<String, Value>) {
    for (ex, plain) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        match m.get(ex) {
            Some(Value::Bool(true)) => {
                if let Some(v) = m.remove(plain) {
                    m.insert(ex.to_string(), v);
                } else {
                    m.remove(ex);
                }
            }
            Some(Value::Bool(false)) => {
                m.remove(ex);
            }
            _ => {}
        }
    }
    if m.get("nullable") == Some(&Value::Bool(true)) {
        if let Some(t) = m.get_mut("type") {
            match t {
                Value::String(s) => {
                    *t = Value::Array(vec![Value::from(s.as_str()), Value::from("null")])
                }
                Value::Array(a) => a.push(Value::from("null")),
                _ => {}
            }
        }
    }
    m.remove("nullable");
    if !m.contains_key("contains") {
        m.remove("minContains");
        m.remove("maxContains");
    }
    for k in ANNOTATIONS {
        m.remove(*k);
    }
}

/// The least common multiple of two positive decimals, as JSON number text.
pub(super) fn lcm_dec(x: &Dec, y: &Dec) -> Option<String> {
    if x.neg || y.neg || x.is_zero() || y.is_zero() {
        return None;
    }
    let k = x.frac.len().max(y.frac.len());
    let (a, b) = (x.scaled(k)?, y.scaled(k)?);
    let gcd = |mut a: u128, mut b: u128| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let l = (a / gcd(a, b)).checked_mul(b)?;
    let digits = l.to_string();
    Some(if k == 0 {
        digits
    } else if digits.len() > k {
        format!(
            "{}.{}",
            &digits[..digits.len() - k],
            &digits[digits.len() - k..]
        )
    } else {
        format!("0.{}{}", "0".repeat(k - digits.len()), digits)
    })
}

pub(super) fn dec_of(v: &Value) -> Option<Dec> {
    v.as_number().map(Dec::from_json)
}

pub(super) fn all_of(a: Value, b: Value) -> Value {
    if a == b || b == Value::Bool(true) {
        return a;
    }
    if a == Value::Bool(true) {
        return b;
    }
    let mut m = Map::new();
    m.insert("allOf".into(), Value::Array(vec![a, b]));
    Value::Object(m)
}

/// `allOf` of two (normalized, `$ref`/`allOf`-free at the top) schemas as one schema.
/// Extend a 2020-12 `prefixItems` list to `n` entries with the schema's own `items` (which
/// governs the positions after its prefix; `true` when absent), so that two schemas' prefixes
/// line up position by position before they are merged.
pub(super) fn extend_prefix(m: &mut Map<String, Value>, n: usize) {
    if matches!(m.get("items"), Some(Value::Array(_))) {
        return; // draft-4 tuple form: merged as a whole or refused below
    }
    let rest = m.get("items").cloned().unwrap_or(Value::Bool(true));
    let mut prefix = match m.get("prefixItems") {
        Some(Value::Array(p)) => p.clone(),
        _ => Vec::new(),
    };
    while prefix.len() < n {
        prefix.push(rest.clone());
    }
    m.insert("prefixItems".into(), Value::Array(prefix));
}

pub(super) fn merge(
    mut out: Map<String, Value>,
    mut b: Map<String, Value>,
    ptr: &str,
) -> Result<Map<String, Value>> {
    let prefix_len = |m: &Map<String, Value>| match m.get("prefixItems") {
        Some(Value::Array(p)) => p.len(),
        _ => 0,
    };
    let n = prefix_len(&out).max(prefix_len(&b));
    if n > 0 {
        extend_prefix(&mut out, n);
        extend_prefix(&mut b, n);
    }
    let a_props: Vec<String> = match out.get("properties") {
        Some(Value::Object(p)) => p.keys().cloned().collect(),
        _ => vec![],
    };
    let b_props: Vec<String> = match b.get("properties") {
        Some(Value::Object(p)) => p.keys().cloned().collect(),
        _ => vec![],
    };
    let a_extra = out.get("additionalProperties").cloned();
    let b_extra = b.get("additionalProperties").cloned();
    let pattern_keys = |m: &Map<String, Value>| -> Vec<String> {
        match m.get("patternProperties") {
            Some(Value::Object(p)) => p.keys().cloned().collect(),
            _ => vec![],
        }
    };
    let (a_pats, b_pats) = (pattern_keys(&out), pattern_keys(&b));
    // One side's additionalProperties would have to apply to keys matching only the other
    // side's patterns: one merged map cannot say that.
    for (extra, mine, theirs) in [(&a_extra, &a_pats, &b_pats), (&b_extra, &b_pats, &a_pats)] {
        if extra.as_ref().is_some_and(|x| x != &Value::Bool(true))
            && theirs.iter().any(|p| !mine.contains(p))
        {
            return Err(schema_error(
                "patternProperties",
                ptr,
                "allOf: additionalProperties of one branch together with patternProperties of \
                 another is not supported",
            ));
        }
    }
    for (k, vb) in b {
        let Some(va) = out.get(&k).cloned() else {
            out.insert(k, vb);
            continue;
        };
        let merged =
            match k.as_str() {
                "type" => {
                    let bits = |v: &Value| -> u8 {
                        match v {
                            Value::String(t) => type_bits(t).unwrap_or(T_ALL),
                            Value::Array(ts) => ts
                                .iter()
                                .map(|t| t.as_str().and_then(type_bits).unwrap_or(T_ALL))
                                .fold(0, |x, y| x | y),
                            _ => T_ALL,
                        }
                    };
                    bits_to_types(bits(&va) & bits(&vb))
                }
                "properties" => {
                    let (Value::Object(mut pa), Value::Object(pb)) = (va, vb) else {
                        return Err(schema_error(
                            "properties",
                            ptr,
                            "properties must be an object",
                        ));
                    };
                    // in place: the first schema's property order is kept
                    for (pk, pv) in pb {
                        match pa.get_mut(&pk) {
                            Some(x) => *x = all_of(x.take(), pv),
                            None => {
                                pa.insert(pk, pv);
                            }
                        }
                    }
                    Value::Object(pa)
                }
                "required" => {
                    let mut r = va.as_array().cloned().unwrap_or_default();
                    for x in vb.as_array().cloned().unwrap_or_default() {
                        if !r.contains(&x) {
                            r.push(x);
                        }
                    }
                    Value::Array(r)
                }
                "minimum" | "exclusiveMinimum" | "minLength" | "minItems" | "minProperties" => {
                    match (dec_of(&va), dec_of(&vb)) {
                        (Some(x), Some(y)) => {
                            if y > x {
                                vb
                            } else {
                                va
                            }
                        }
                        _ => return Err(schema_error(&k, ptr, format!("{k} must be a number"))),
                    }
                }
                "maximum" | "exclusiveMaximum" | "maxLength" | "maxItems" | "maxProperties" => {
                    match (dec_of(&va), dec_of(&vb)) {
                        (Some(x), Some(y)) => {
                            if y < x {
                                vb
                            } else {
                                va
                            }
                        }
                        _ => return Err(schema_error(&k, ptr, format!("{k} must be a number"))),
                    }
                }
                "enum" => {
                    let ea = va.as_array().cloned().unwrap_or_default();
                    let eb = vb.as_array().cloned().unwrap_or_default();
                    Value::Array(
                        ea.into_iter()
                            .filter(|x| eb.iter().any(|y| json_eq(x, y)))
                            .collect(),
                    )
                }
                "const" => {
                    if json_eq(&va, &vb) {
                        va
                    } else {
                        out.insert("enum".into(), Value::Array(vec![]));
                        va
                    }
                }
                "items" | "additionalItems" | "additionalProperties"
                    if !va.is_array() && !vb.is_array() =>
                {
                    all_of(va, vb)
                }
                // Both lists were extended to the same length above.
                "prefixItems" => match (va, vb) {
                    (Value::Array(pa), Value::Array(pb)) if pa.len() == pb.len() => {
                        Value::Array(pa.into_iter().zip(pb).map(|(x, y)| all_of(x, y)).collect())
                    }
                    _ => {
                        return Err(schema_error(
                            "prefixItems",
                            ptr,
                            "allOf: prefixItems of different forms cannot be merged",
                        ))
                    }
                },
                "patternProperties" => {
                    let (Value::Object(mut pa), Value::Object(pb)) = (va, vb) else {
                        return Err(schema_error(&k, ptr, "patternProperties must be an object"));
                    };
                    for (pk, pv) in pb {
                        match pa.get_mut(&pk) {
                            Some(x) => *x = all_of(x.take(), pv),
                            None => {
                                pa.insert(pk, pv);
                            }
                        }
                    }
                    Value::Object(pa)
                }
                "propertyNames" => all_of(va, vb),
                "multipleOf" => match (dec_of(&va), dec_of(&vb)) {
                    (Some(x), Some(y)) => match lcm_dec(&x, &y) {
                        Some(l) => Value::Number(
                            l.parse::<serde_json::Number>()
                                .map_err(|_| schema_error(&k, ptr, "multipleOf out of range"))?,
                        ),
                        None => return Err(schema_error(
                            &k,
                            ptr,
                            "allOf: these multipleOf values have no representable common multiple",
                        )),
                    },
                    _ => return Err(schema_error(&k, ptr, "multipleOf must be a number")),
                },
                "pattern" => {
                    // both must match: keep one, list the other
                    let mut extra = out
                        .get(ALL_PATTERNS)
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    if !extra.contains(&vb) {
                        extra.push(vb);
                    }
                    out.insert(ALL_PATTERNS.into(), Value::Array(extra));
                    va
                }
                NOT_IN | NOT_PATTERN | ALL_PATTERNS => {
                    // both exclusions apply
                    let mut r = va.as_array().cloned().unwrap_or_default();
                    for x in vb.as_array().cloned().unwrap_or_default() {
                        if !r.contains(&x) {
                            r.push(x);
                        }
                    }
                    Value::Array(r)
                }
                "$defs" | "definitions" => va,
                _ if json_eq(&va, &vb) => va,
                _ => {
                    return Err(schema_error(
                        &k,
                        ptr,
                        format!(
                            "allOf: two different values of `{k}` cannot be merged in this version"
                        ),
                    ))
                }
            };
        out.insert(k, merged);
    }
    // Properties one side declares are "additional" for the other side.
    if let Some(Value::Object(props)) = out.get_mut("properties") {
        for (extra, others, mine, own_patterns) in [
            (&a_extra, &b_props, &a_props, &a_pats),
            (&b_extra, &a_props, &b_props, &b_pats),
        ] {
            if let Some(x) = extra {
                // a name matching one of this side's patterns is not additional for it (an
                // invalid pattern is reported when the merged schema is compiled)
                let matches_own = |name: &str| -> bool {
                    own_patterns.iter().any(|p| {
                        pattern_language(p).is_ok_and(|h| {
                            crate::json_schema::validate::full_match(&h, name).unwrap_or(false)
                        })
                    })
                };
                for p in others
                    .iter()
                    .filter(|p| !mine.contains(p) && !matches_own(p))
                {
                    if let Some(v) = props.get_mut(p) {
                        *v = all_of(v.take(), x.clone());
                    }
                }
            }
        }
    }
    Ok(out)
}

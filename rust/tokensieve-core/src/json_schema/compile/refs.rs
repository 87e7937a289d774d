//! References (`$ref`), `allOf` flattening and the merging of schemas.

use serde_json::{Map, Value};

use super::scalars::{count_in, pattern_language};
use super::{json_eq, schema_error, Compiler, RecTarget};
use crate::automata::expr::{concat, Expr};
use crate::error::Result;
use crate::json_schema::extra::{all_of_sub, Built, Extra, KeyView, MoreContains, Sub};
use crate::json_schema::keywords::{bits_to_types, type_bits, ANNOTATIONS, T_ALL};
use crate::json_schema::number::Dec;

/// The document and JSON pointer of a reference in the internal form `resolve::prepare`
/// writes: `#/pointer` into the root (document 0), `tsdoc:N#/pointer` into registry document
/// `N` (a malformed `N` names no document).
fn internal_parts(r: &str) -> Option<(usize, &str)> {
    if let Some(rest) = r.strip_prefix("tsdoc:") {
        let (n, p) = rest.split_once('#').unwrap_or((rest, ""));
        Some((n.parse().unwrap_or(usize::MAX), p))
    } else {
        Some((0, r.strip_prefix('#')?))
    }
}

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
        if let Some(rest) = r.strip_prefix(crate::json_schema::resolve::DYNAMIC) {
            if !self.dynamic_ok.get() || self.scope_lost > 0 {
                return Err(schema_error(
                    "$dynamicRef",
                    ptr,
                    "a $dynamicRef reached through if/then/else, not, oneOf, a const/enum check, \
                     or an allOf/$ref merge that enters a resource with dynamic anchors is not \
                     supported (the dynamic scope is not tracked there)",
                ));
            }
            return self.resolve(self.dynamic_choice(rest), ptr);
        }
        if let Some(why) = r.strip_prefix(crate::json_schema::resolve::UNRESOLVED) {
            return Err(schema_error("$ref", ptr, why));
        }
        let Some((doc, p)) = internal_parts(r) else {
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

    /// What the dynamic reference `rest` (`NAME|FALLBACK`, after [`resolve::DYNAMIC`]) names
    /// here: the outermost resource of the dynamic scope with a dynamic anchor NAME, else the
    /// static target FALLBACK.
    ///
    /// [`resolve::DYNAMIC`]: crate::json_schema::resolve::DYNAMIC
    fn dynamic_choice<'r>(&'r self, rest: &'r str) -> &'r str {
        let (name, fallback) = rest.split_once('|').unwrap_or((rest, ""));
        self.dyn_scope
            .iter()
            .find_map(|m| m.get(name)?.as_str())
            .unwrap_or(fallback)
    }

    /// The innermost schema resource with dynamic anchors that holds the target of internal
    /// reference `r` (entering the target enters that resource's dynamic scope).
    pub(super) fn scope_at(&self, r: &str) -> Option<&'a Map<String, Value>> {
        use crate::json_schema::resolve::{DYNAMIC, SCOPE};
        if let Some(rest) = r.strip_prefix(DYNAMIC) {
            return self.scope_at(self.dynamic_choice(rest));
        }
        let (doc, p) = internal_parts(r)?;
        let mut v: &'a Value = self.docs.get(doc)?;
        let mut found = None;
        let mut tokens = p.split('/').skip(1);
        loop {
            if let Some(Value::Object(m)) = v.get(SCOPE) {
                found = Some(m);
            }
            let Some(t) = tokens.next() else { break };
            let t = t.replace("~1", "/").replace("~0", "~");
            v = match v {
                Value::Object(m) => m.get(&t)?,
                Value::Array(a) => a.get(t.parse::<usize>().ok()?)?,
                _ => return found,
            };
        }
        found
    }

    /// A `$ref` to `r`. A target already being compiled as a recursive expression is called
    /// again (through the stack, at most `max_stack_depth` calls open); any other target is
    /// compiled in place, as a recursive expression when it turns out to call itself. Inside
    /// `unevaluated*` scopes recursion is unrolled instead (`max_recursion_depth` times), as the
    /// algebra does, since there a sub-schema's language depends on where it is used.
    pub(super) fn reference(&mut self, r: &str, ptr: &str) -> Result<Option<Expr>> {
        self.dynamic_ok.set(true);
        let resolved = self.resolve(r, ptr);
        self.dynamic_ok.set(false);
        let (target, tptr) = resolved?;
        if self.stack_recursion && self.eval_scopes == 0 {
            if let Some(t) = self.recs.iter_mut().rev().find(|t| t.ptr == tptr) {
                t.called = true;
                let id = t.id;
                return Ok(Some(concat(vec![
                    Expr::StackBelow(self.opts.max_stack_depth),
                    Expr::Recur(id),
                ])));
            }
        }
        let active = self.stack.iter().filter(|p| **p == tptr).count();
        if active >= self.opts.max_recursion_depth as usize {
            self.cuts += 1;
            return Ok(None);
        }
        self.stack.push(tptr.clone());
        let scope = self.scope_at(r);
        if let Some(m) = scope {
            self.dyn_scope.push(m.clone());
        }
        let out = self.recursive_target(&tptr, |c| {
            // the target describes the values where the `$ref` stands
            c.pass_path(None);
            c.schema(target, &tptr)
        });
        if scope.is_some() {
            self.dyn_scope.pop();
        }
        self.stack.pop();
        let out = out?;
        self.count_built(&out, &tptr)?;
        Ok(out)
    }

    /// `build` (the compilation of the `$ref` target `tptr`) as a recursive expression when a
    /// `$ref` inside it calls it again (see [`Compiler::reference`]).
    pub(super) fn recursive_target(
        &mut self,
        tptr: &str,
        build: impl FnOnce(&mut Self) -> Result<Option<Expr>>,
    ) -> Result<Option<Expr>> {
        if !self.stack_recursion || self.eval_scopes > 0 {
            return build(self);
        }
        let id = self.next_rec;
        self.next_rec += 1;
        self.recs.push(RecTarget {
            ptr: tptr.to_string(),
            id,
            called: false,
        });
        let regs = self.unique_regs;
        let out = build(self);
        let t = self.recs.pop().expect("pushed above");
        let out = out?;
        if t.called && self.unique_regs != regs {
            // one copy of the target serves every depth of the recursion, but a unique array
            // is registered at one instance path
            return Err(super::schema_error(
                "uniqueItems",
                tptr,
                "uniqueItems over strings or integers inside a recursive $ref is not supported",
            ));
        }
        Ok(match out {
            Some(body) if t.called => Some(Expr::Recursive {
                id,
                body: Box::new(body),
            }),
            out => out,
        })
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
                    if self.scope_at(r).is_some_and(|m| {
                        m.keys()
                            .any(|name| !self.dyn_scope.iter().any(|s| s.contains_key(name)))
                    }) {
                        // the merged map leaves behind a resource whose dynamic anchors the
                        // scope does not already settle (the outermost one wins)
                        self.lossy.set(true);
                    }
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

    /// `allOf` of `items` as one keyword map with its typed constraints (`None`: `false`).
    pub(in crate::json_schema) fn merge_all(
        &self,
        items: Vec<Piece<'_>>,
        ptr: &str,
    ) -> Result<Option<Built>> {
        let mut parts = Vec::new();
        for it in items {
            if !self.flatten_piece(it, ptr, 0, &mut parts)? {
                return Ok(None);
            }
        }
        let mut acc = Built::default();
        for p in parts {
            acc = merge(acc, p, ptr)?;
        }
        Ok(Some(acc))
    }

    /// [`Compiler::flatten`] of one piece of an `allOf`; typed constraints stay with the map
    /// that carried them.
    fn flatten_piece(
        &self,
        it: Piece<'_>,
        ptr: &str,
        depth: u32,
        out: &mut Vec<Built>,
    ) -> Result<bool> {
        let (v, x) = match it {
            Piece::Json(v) => (std::borrow::Cow::Borrowed(v), Extra::default()),
            Piece::Built(b) => (std::borrow::Cow::Owned(Value::Object(b.map)), b.x),
            Piece::Sub(s) => return self.flatten_sub(s, ptr, depth, out),
        };
        let mut maps = Vec::new();
        let ok = self.flatten(&v, ptr, depth, &mut maps)?;
        out.extend(maps.into_iter().map(|map| Built {
            map,
            x: Extra::default(),
        }));
        if ok && !x.is_empty() {
            // an object pushes its own keywords last
            if let Some(own) = out.last_mut() {
                own.x = x;
            }
        }
        Ok(ok)
    }

    /// [`Compiler::flatten`] of a sub-schema, read as the `anyOf` of `allOf`s (`Terms`) or the
    /// `allOf` (`All`) it stands for. Unions and negations are not flattened (a schema holding
    /// them goes to the algebra, see `compile_sub`).
    fn flatten_sub(&self, s: &Sub, ptr: &str, depth: u32, out: &mut Vec<Built>) -> Result<bool> {
        if depth > 64 {
            return Err(schema_error(
                "allOf",
                ptr,
                "allOf/$ref nest more than 64 levels (a $ref cycle through allOf?)",
            ));
        }
        match s {
            Sub::Json(v) => self.flatten_piece(Piece::Json(v), ptr, depth, out),
            Sub::Terms(terms) => match terms.as_slice() {
                [] => Ok(false),
                [t] if t.len() <= 1 => {
                    for p in t {
                        let b = p.to_built();
                        if !self.flatten_piece(Piece::Built(Box::new(b)), ptr, depth, out)? {
                            return Ok(false);
                        }
                    }
                    Ok(true)
                }
                [t] => {
                    for p in t {
                        let b = p.to_built();
                        if !self.flatten_piece(Piece::Built(Box::new(b)), ptr, depth + 1, out)? {
                            return Ok(false);
                        }
                    }
                    out.push(Built::default());
                    Ok(true)
                }
                _ => Err(schema_error(
                    "allOf",
                    ptr,
                    "a union inside a merged allOf is compiled by expansion, not merged",
                )),
            },
            Sub::All(list) => {
                for x in list {
                    if !self.flatten_sub(x, ptr, depth + 1, out)? {
                        return Ok(false);
                    }
                }
                out.push(Built::default());
                Ok(true)
            }
            Sub::Not(_) => Err(schema_error(
                "not",
                ptr,
                "a negation inside a merged allOf is compiled by expansion, not merged",
            )),
        }
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
    // `additionalItems` means something only beside the draft-4 tuple form of `items`: merged
    // with another schema's tuple it would wrongly apply to that one's tail
    if !matches!(m.get("items"), Some(Value::Array(_))) {
        m.remove("additionalItems");
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

/// `allOf` of two keyword maps with their typed constraints. A position whose schema either
/// side keeps in its [`Extra`] (a `true` placeholder in the map) gets the merged schema in the
/// result's `Extra`.
pub(super) fn merge(out: Built, b: Built, ptr: &str) -> Result<Built> {
    let Built {
        map: mut out,
        x: mut ox,
    } = out;
    let Built {
        map: mut b,
        x: mut bx,
    } = b;
    let prefix_len = |m: &Map<String, Value>| match m.get("prefixItems") {
        Some(Value::Array(p)) => p.len(),
        _ => 0,
    };
    let n = prefix_len(&out).max(prefix_len(&b));
    if n > 0 {
        extend_prefix(&mut out, n);
        extend_prefix(&mut b, n);
    }
    // the typed sub-schemas, merged with the other side's schema at the same position
    let both = |a: Option<Sub>, c: Option<Sub>| match (a, c) {
        (Some(a), Some(c)) => Some(all_of_sub(a, c)),
        (a, c) => a.or(c),
    };
    let prop_of = |m: &Map<String, Value>, x: &Extra, name: &str| {
        x.property(name).cloned().or_else(|| {
            m.get("properties")
                .and_then(|p| p.get(name))
                .cloned()
                .map(Sub::Json)
        })
    };
    let mut props_x: Vec<(String, Sub)> = Vec::new();
    for (name, _) in ox.properties.iter().chain(&bx.properties) {
        if props_x.iter().any(|(n, _)| n == name) {
            continue;
        }
        if let Some(s) = both(prop_of(&out, &ox, name), prop_of(&b, &bx, name)) {
            props_x.push((name.clone(), s));
        }
    }
    let item_of = |m: &Map<String, Value>, x: &Extra, i: usize| {
        x.prefix_item(i)
            .cloned()
            .or_else(|| match m.get("prefixItems") {
                Some(Value::Array(p)) => p.get(i).cloned().map(Sub::Json),
                _ => None,
            })
    };
    let mut items_x: Vec<(usize, Sub)> = Vec::new();
    for (i, _) in ox.prefix_items.iter().chain(&bx.prefix_items) {
        if items_x.iter().any(|(j, _)| j == i) {
            continue;
        }
        if let Some(s) = both(item_of(&out, &ox, *i), item_of(&b, &bx, *i)) {
            items_x.push((*i, s));
        }
    }
    let typed_contains = ox.contains.is_some() || bx.contains.is_some();
    let contains_x = {
        let a = ox
            .contains
            .clone()
            .or_else(|| out.get("contains").cloned().map(Sub::Json));
        let c = bx
            .contains
            .clone()
            .or_else(|| b.get("contains").cloned().map(Sub::Json));
        match (a, c) {
            (Some(a), Some(c))
                if a != c || ox.contains_from.unwrap_or(0) != bx.contains_from.unwrap_or(0) =>
            {
                // a different `contains` (or one counted from another index): its own count,
                // kept apart
                let min = count_in(&b, "minContains", ptr)?.unwrap_or(1);
                let max = count_in(&b, "maxContains", ptr)?;
                for k in ["contains", "minContains", "maxContains"] {
                    b.remove(k);
                }
                // counted from its own index (a negated `items` after `prefixItems`)
                let from = bx.contains_from.take().unwrap_or(0);
                if min > 0 || max.is_some() {
                    bx.more_contains.push(MoreContains {
                        schema: c,
                        min,
                        max,
                        from,
                    });
                }
                typed_contains.then_some(a)
            }
            // plain JSON on both sides stays in the map
            _ if !typed_contains => None,
            (Some(a), Some(_)) => {
                // the same schema on both sides, one typed: both maps hold its placeholder
                // (their counts are merged below)
                out.insert("contains".into(), Value::Bool(true));
                b.insert("contains".into(), Value::Bool(true));
                Some(a)
            }
            (a, c) => a.or(c),
        }
    };
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
    // side's patterns: one merged map cannot say that, so that side's view of the keys (its
    // names, patterns and additionalProperties) is kept apart (see `KeyView`).
    let view_of = |m: &mut Map<String, Value>, names: &[String]| -> Result<KeyView> {
        let patterns = match m.remove("patternProperties") {
            None => Vec::new(),
            Some(Value::Object(p)) => p.into_iter().collect(),
            Some(_) => {
                return Err(schema_error(
                    "patternProperties",
                    ptr,
                    "patternProperties must be an object",
                ))
            }
        };
        Ok(KeyView {
            names: names.to_vec(),
            patterns,
            additional: m
                .remove("additionalProperties")
                .unwrap_or(Value::Bool(true)),
        })
    };
    let apart = |extra: &Option<Value>, mine: &[String], theirs: &[String]| {
        extra.as_ref().is_some_and(|x| x != &Value::Bool(true))
            && theirs.iter().any(|p| !mine.contains(p))
    };
    let (a_apart, b_apart) = (
        apart(&a_extra, &a_pats, &b_pats),
        apart(&b_extra, &b_pats, &a_pats),
    );
    if a_apart {
        ox.key_views.push(view_of(&mut out, &a_props)?);
    }
    if b_apart {
        let v = view_of(&mut b, &b_props)?;
        ox.key_views.push(v);
    }
    // `contains` on both sides (one schema: different ones are refused below): both sides'
    // counts hold, a side without `minContains` counting at least 1
    if out.contains_key("contains") && b.contains_key("contains") {
        let one = Value::from(1u64);
        let lo_a = out.get("minContains").cloned().unwrap_or(one.clone());
        let lo_b = b.remove("minContains").unwrap_or(one);
        let lo = tighter("minContains", lo_a, lo_b, true, ptr)?;
        out.insert("minContains".into(), lo);
        if let Some(hb) = b.remove("maxContains") {
            let hi = match out.get("maxContains").cloned() {
                None => hb,
                Some(ha) => tighter("maxContains", ha, hb, false, ptr)?,
            };
            out.insert("maxContains".into(), hi);
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
                    let (t, fraction_only) = bits_to_types(bits(&va) & bits(&vb));
                    ox.fraction_only |= fraction_only;
                    t
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
                    tighter(&k, va, vb, true, ptr)?
                }
                "maximum" | "exclusiveMaximum" | "maxLength" | "maxItems" | "maxProperties" => {
                    tighter(&k, va, vb, false, ptr)?
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
                    if !ox.all_patterns.contains(&vb) {
                        ox.all_patterns.push(vb);
                    }
                    va
                }
                "$defs" | "definitions" => va,
                // both hold: distinct items when either asks for them
                "uniqueItems" if va.is_boolean() && vb.is_boolean() => {
                    Value::Bool(va == Value::Bool(true) || vb == Value::Bool(true))
                }
                _ if json_eq(&va, &vb) => va,
                // annotations, `x-` keys and unknown keywords constrain nothing: keep the first
                _ if !Compiler::is_validity(&k) => va,
                _ => return Err(cannot_merge(&k, ptr)),
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
                    if let Some((_, s)) = props_x.iter_mut().find(|(n, _)| n == p) {
                        *s = all_of_sub(s.clone(), Sub::Json(x.clone()));
                    } else if let Some(v) = props.get_mut(p) {
                        *v = all_of(v.take(), x.clone());
                    }
                }
            }
        }
    }
    // placeholders where the typed sub-schemas are
    if let Some(Value::Object(props)) = out.get_mut("properties") {
        for (name, _) in &props_x {
            if let Some(v) = props.get_mut(name) {
                *v = Value::Bool(true);
            }
        }
    }
    if let Some(Value::Array(items)) = out.get_mut("prefixItems") {
        for (i, _) in &items_x {
            if let Some(v) = items.get_mut(*i) {
                *v = Value::Bool(true);
            }
        }
    }
    if contains_x.is_some() {
        out.insert("contains".into(), Value::Bool(true));
    }
    // the other typed constraints
    ox.fraction_only |= bx.fraction_only;
    for (mine, theirs) in [
        (&mut ox.not_in, bx.not_in),
        (&mut ox.all_patterns, bx.all_patterns),
        (&mut ox.not_patterns, bx.not_patterns),
        (&mut ox.not_formats, bx.not_formats),
        (&mut ox.not_multiple_of, bx.not_multiple_of),
    ] {
        if mine.is_empty() {
            *mine = theirs;
        } else {
            for v in theirs {
                if !mine.contains(&v) {
                    mine.push(v);
                }
            }
        }
    }
    ox.key_views.extend(bx.key_views);
    for c in bx.more_contains {
        if !ox.more_contains.contains(&c) {
            ox.more_contains.push(c);
        }
    }
    match (ox.contains_from, bx.contains_from) {
        (Some(a), Some(c)) if a != c => return Err(cannot_merge("contains", ptr)),
        (None, c) => ox.contains_from = c,
        _ => {}
    }
    // each negated additionalProperties / patternProperties needs its own witness
    for c in bx.some_extra {
        if !ox.some_extra.contains(&c) {
            ox.some_extra.push(c);
        }
    }
    ox.properties = props_x;
    ox.prefix_items = items_x;
    ox.contains = contains_x;
    Ok(Built { map: out, x: ox })
}

/// The tighter of two bounds `k` (the larger lower bound, or the smaller upper bound).
fn tighter(k: &str, a: Value, b: Value, lower: bool, ptr: &str) -> Result<Value> {
    match (dec_of(&a), dec_of(&b)) {
        (Some(x), Some(y)) => Ok(if (lower && y > x) || (!lower && y < x) {
            b
        } else {
            a
        }),
        _ => Err(schema_error(k, ptr, format!("{k} must be a number"))),
    }
}

fn cannot_merge(k: &str, ptr: &str) -> crate::error::Error {
    schema_error(
        k,
        ptr,
        format!("allOf: two different values of `{k}` cannot be merged in this version"),
    )
}

/// One piece of an `allOf` being merged.
pub(in crate::json_schema) enum Piece<'v> {
    Json(&'v Value),
    /// A keyword map with typed constraints (they stay with the map's own keywords).
    Built(Box<Built>),
    Sub(&'v Sub),
}

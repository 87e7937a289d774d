//! `oneOf`: deciding whether branches are disjoint (so that `oneOf` compiles as `anyOf`).

use serde_json::{Map, Value};

use super::scalars::pattern_language;
use super::{literal_values, share_a_value, Compiler};
use crate::automata::charlang::{Lang, LangBudget};
use crate::error::Result;
use crate::json_schema::keywords::{type_bits, value_bits, T_ALL, T_NULL, T_OBJECT};

impl<'a> Compiler<'a> {
    /// What `disjoint` knows of one `oneOf` branch.
    pub(super) fn branch_info(
        &self,
        b: &Value,
        ptr: &str,
        also_required: &[&str],
    ) -> Result<BranchInfo> {
        let b = self.deref(b, ptr)?;
        let m = match b {
            Value::Bool(false) => return Ok(BranchInfo::nothing()),
            Value::Object(m) => m,
            _ => return Ok(BranchInfo::anything()),
        };
        let mut bits = match m.get("type") {
            Some(Value::String(t)) => type_bits(t).unwrap_or(T_ALL),
            Some(Value::Array(ts)) => ts
                .iter()
                .map(|t| t.as_str().and_then(type_bits).unwrap_or(T_ALL))
                .fold(0, |a, b| a | b),
            _ => T_ALL,
        };
        if m.get("nullable") == Some(&Value::Bool(true)) && m.contains_key("type") {
            bits |= T_NULL;
        }
        let values = literal_values(m);
        if let Some(vs) = &values {
            bits &= vs.iter().fold(0, |a, v| a | value_bits(v));
        }
        let mut required: Vec<String> = match m.get("required") {
            Some(Value::Array(req)) => req
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => vec![],
        };
        required.extend(also_required.iter().map(|s| s.to_string()));
        required.sort_unstable();
        required.dedup();
        let props = match m.get("properties") {
            Some(Value::Object(p)) => Some(p),
            _ => None,
        };
        let mut discr = Vec::new();
        let mut forbidden: Option<Lang> = None;
        if let Some(props) = props {
            for r in &required {
                if let Some(p) = props.get(r) {
                    if let Value::Object(pm) = self.deref(p, ptr)? {
                        if let Some(vs) = literal_values(pm) {
                            discr.push((r.clone(), vs));
                        }
                    }
                }
            }
            for (k, p) in props {
                if matches!(self.deref(p, ptr)?, Value::Bool(false)) {
                    forbidden = Some(or_lang(forbidden, Lang::literal(k)));
                }
            }
        }
        // Key languages of patternProperties; a pattern the compiler cannot read leaves the
        // branch's key set unknown (no verdict relies on it).
        let mut patterns: Option<Lang> = None;
        let mut readable = true;
        for (p, sch) in m
            .get("patternProperties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            match pattern_language(p)
                .ok()
                .and_then(|h| Lang::from_hir(&h).ok())
            {
                Some(l) => {
                    if matches!(self.deref(sch, ptr)?, Value::Bool(false)) {
                        forbidden = Some(or_lang(forbidden, l.clone()));
                    }
                    patterns = Some(or_lang(patterns, l));
                }
                None => readable = false,
            }
        }
        // `additionalProperties: false`: only the declared names and the patterns' keys.
        let closed =
            (m.get("additionalProperties") == Some(&Value::Bool(false)) && readable).then(|| {
                let names = props
                    .into_iter()
                    .flatten()
                    .fold(None, |acc, (k, _)| Some(or_lang(acc, Lang::literal(k))));
                match (names, patterns) {
                    (Some(a), Some(b)) => a.or(&b),
                    (Some(a), None) | (None, Some(a)) => a,
                    (None, None) => Lang::nothing(),
                }
            });
        let min_properties = m.get("minProperties").and_then(Value::as_u64).unwrap_or(0);
        Ok(BranchInfo {
            bits,
            values,
            discr,
            required,
            closed,
            forbidden,
            min_properties,
        })
    }

    /// Whether no instance that `parent` (the schema holding the `oneOf`, its other keywords)
    /// allows can match two of `branches`.
    pub(in crate::json_schema) fn disjoint(
        &self,
        branches: &[Value],
        parent: &Map<String, Value>,
    ) -> Result<bool> {
        let parent_bits = self.type_bits_of(parent, "").unwrap_or(T_ALL);
        let parent_required: Vec<&str> = match parent.get("required") {
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let parent_min = parent
            .get("minProperties")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let infos = branches
            .iter()
            .map(|b| self.branch_info(b, "", &parent_required))
            .collect::<Result<Vec<_>>>()?;
        for i in 0..infos.len() {
            for j in i + 1..infos.len() {
                let (a, b) = (&infos[i], &infos[j]);
                let common = a.bits & b.bits & parent_bits;
                if common == 0 {
                    continue;
                }
                if let (Some(x), Some(y)) = (&a.values, &b.values) {
                    if !share_a_value(x, y) {
                        continue;
                    }
                }
                // What follows separates objects only: any other value both branches allow
                // matches both.
                if common & !T_OBJECT != 0 {
                    return Ok(false);
                }
                // A required property with disjoint const/enum values in the two branches.
                let discr = a.discr.iter().any(|(k, xs)| {
                    b.discr
                        .iter()
                        .any(|(l, ys)| k == l && !share_a_value(xs, ys))
                });
                // A property one branch requires and the other forbids.
                if discr || a.excludes_required_of(b) || b.excludes_required_of(a) {
                    continue;
                }
                // Both closed, no name allowed by both, and `{}` excluded.
                let nonempty = parent_min > 0
                    || [a, b]
                        .iter()
                        .any(|x| x.min_properties > 0 || !x.required.is_empty());
                if nonempty {
                    if let (Some(x), Some(y)) = (&a.closed, &b.closed) {
                        if x.and(y).is_empty(&LangBudget::default()) == Ok(true) {
                            continue;
                        }
                    }
                }
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A `oneOf` branch as `Compiler::disjoint` sees it (after following `$ref`; the branch's
/// other keywords only narrow it, so ignoring some keeps the verdict safe).
pub(super) struct BranchInfo {
    /// JSON types it allows.
    bits: u8,
    /// Its finite value set (`const`/`enum`), if any.
    values: Option<Vec<Value>>,
    /// Required properties (its own and the parent's) whose values are a finite set.
    discr: Vec<(String, Vec<Value>)>,
    /// Required properties: its own and the parent's.
    required: Vec<String>,
    /// The property names an object may have, if `additionalProperties: false` closes it.
    closed: Option<Lang>,
    /// Names whose schema is `false` (in `properties` or `patternProperties`).
    forbidden: Option<Lang>,
    /// Its `minProperties`.
    min_properties: u64,
}

impl BranchInfo {
    fn nothing() -> Self {
        BranchInfo {
            bits: 0,
            values: None,
            discr: vec![],
            required: vec![],
            closed: None,
            forbidden: None,
            min_properties: 0,
        }
    }

    fn anything() -> Self {
        BranchInfo {
            bits: T_ALL,
            ..BranchInfo::nothing()
        }
    }

    /// Whether no object has a property that `other` requires and `self` still allows.
    fn excludes_required_of(&self, other: &BranchInfo) -> bool {
        other.required.iter().any(|k| {
            self.forbidden.as_ref().is_some_and(|f| f.matches(k))
                || self.closed.as_ref().is_some_and(|c| !c.matches(k))
        })
    }
}

pub(super) fn or_lang(acc: Option<Lang>, l: Lang) -> Lang {
    match acc {
        Some(a) => a.or(&l),
        None => l,
    }
}

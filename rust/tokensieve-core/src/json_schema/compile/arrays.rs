//! Arrays: items, prefixItems, counts, uniqueItems and contains.

use serde_json::{Map, Value};

use super::scalars::clamped;
use super::{child, json_eq, literal_values, schema_error, Compiler};
use crate::automata::expr::{alt, alt_opt, concat, opt, rep, star, Expr};
use crate::error::Result;
use crate::json_schema::extra::{Extra, Sub};
use crate::json_schema::keywords::{applies_to, T_ARRAY, T_BOOL, T_NULL};
use crate::json_schema::unique::{ItemLang, Kind, Step, UniqueArray};

/// One more case of a `contains` count unrolled over item positions: at most 4,096.
fn unroll_case(budget: &mut u64, ptr: &str) -> Result<()> {
    *budget += 1;
    if *budget > 4096 {
        return Err(schema_error(
            "contains",
            ptr,
            "contains with these item counts unrolls into too many cases",
        ));
    }
    Ok(())
}

/// Positions past the prefix unrolled one by one up to `minItems` (`min`, from position `i`):
/// at most 64.
fn unroll_to_min(min: u64, i: u64, ptr: &str) -> Result<()> {
    if min.saturating_sub(i) > 64 {
        return Err(schema_error(
            "contains",
            ptr,
            "contains together with a large minItems is not supported",
        ));
    }
    Ok(())
}

/// A `contains` count: its schema, `minContains`, `maxContains`, the index counting starts at.
type Counted = (Sub, u64, Option<u64>, u64);

impl<'a> Compiler<'a> {
    pub(super) fn array(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
    ) -> Result<Option<Expr>> {
        // Counts are 32-bit: bounds past 4,294,967,295 items act as that many (docs/limits.md).
        // A large bound on items is a counter when the item holds none (`automata::expr::counts`).
        let min = clamped(self.count(m, "minItems", ptr)?.unwrap_or(0));
        let max = self.count(m, "maxItems", ptr)?.map(clamped);
        if max.is_some_and(|mx| mx < min) {
            return Ok(None);
        }
        let (prefix, prefix_kw, rest, rest_kw): (&[Value], &str, Option<&Value>, &str) =
            match (m.get("prefixItems"), m.get("items")) {
                (Some(Value::Array(p)), items) => (p, "prefixItems", items, "items"),
                (Some(_), _) => {
                    return Err(schema_error(
                        "prefixItems",
                        ptr,
                        "prefixItems must be an array",
                    ))
                }
                (None, Some(Value::Array(p))) => {
                    (p, "items", m.get("additionalItems"), "additionalItems")
                }
                (None, items) => (&[], "items", items, "items"),
            };
        // prefix positions whose schema is typed (a placeholder in the map)
        let typed_items: Vec<Option<&Sub>> = (0..prefix.len())
            .map(|i| x.prefix_item(i).filter(|_| prefix_kw == "prefixItems"))
            .collect();
        if m.get("uniqueItems") == Some(&Value::Bool(true)) {
            match self.unique_array(m, x, prefix, &typed_items, rest, (min, max), ptr)? {
                Some(h) => return Ok(h),
                None => match self.unique_strings(m, x, prefix, rest, min, ptr)? {
                    // registered: the array is compiled as usual, its matchers keep it unique
                    Some(true) => {}
                    Some(false) => return Ok(None),
                    None => self.unsupported(
                        "uniqueItems",
                        ptr,
                        "uniqueItems: true is supported when every item comes from a small \
                         finite set of values (enum, const, boolean, null) and the length is \
                         bounded, or when the items are strings, integers, or numbers with \
                         no bounds, and the array (without prefixItems or contains) is reached \
                         from the root through properties, items, additionalProperties, \
                         non-recursive $ref, allOf, or the one container branch of an \
                         anyOf/oneOf of scalars; not over objects, arrays, bounded fractional \
                         numbers or mixed types, nor under not, if or patternProperties \
                         (docs/json-schema.md, Unique strings and integers)",
                    )?,
                },
            }
        }
        if !x.more_contains.is_empty() {
            // several different `contains` (merged allOf branches), each with its own count
            let mut cs: Vec<Counted> = Vec::new();
            if let Some(c) = m.get("contains") {
                let lo = self.count(m, "minContains", ptr)?.unwrap_or(1);
                let hi = self.count(m, "maxContains", ptr)?;
                if lo > 0 || hi.is_some() {
                    let c = x.contains.clone().unwrap_or_else(|| Sub::Json(c.clone()));
                    cs.push((c, lo, hi, x.contains_from.unwrap_or(0)));
                }
            }
            cs.extend(
                x.more_contains
                    .iter()
                    .map(|c| (c.schema.clone(), c.min, c.max, c.from)),
            );
            return self.array_contains_multi(prefix, &typed_items, rest, &cs, (min, max), ptr);
        }
        if let Some(c) = m.get("contains") {
            let lo = self.count(m, "minContains", ptr)?.unwrap_or(1);
            let hi = self.count(m, "maxContains", ptr)?;
            if lo > 0 || hi.is_some() {
                let from = x.contains_from.unwrap_or(0);
                let c = match &x.contains {
                    Some(sub) => sub.clone(),
                    None => Sub::Json(c.clone()),
                };
                return self.array_contains(
                    prefix,
                    &typed_items,
                    rest,
                    &c,
                    (lo, hi),
                    from,
                    (min, max),
                    ptr,
                );
            }
        }
        let mut pre = Vec::new();
        for (i, s) in prefix.iter().enumerate() {
            let iptr = child(&child(ptr, prefix_kw), &i.to_string());
            pre.push(match typed_items[i] {
                Some(sub) => self.compile_sub(sub, &iptr)?,
                None => self.schema(s, &iptr)?,
            });
        }
        let rest_h = match rest {
            None => Some(self.any_value(self.opts.max_nesting_depth)?),
            Some(s) => {
                if prefix.is_empty() {
                    // every item has this schema
                    self.pass_path(Some(Step::Item));
                }
                self.schema(s, &child(ptr, rest_kw))?
            }
        };
        let body = self.array_tail(&mut pre, rest_h, 0, min, max);
        Ok(body.map(|b| self.wrap("[", b, "]")))
    }

    /// The finite set of values a schema allows, when it names one (`enum`, `const`, only
    /// `boolean`/`null` types, `false`); `None` when it may be infinite.
    pub(super) fn finite_values(&mut self, s: &Value, ptr: &str) -> Result<Option<Vec<Value>>> {
        let t = self.deref(s, ptr)?;
        let cands = match t {
            Value::Bool(false) => return Ok(Some(vec![])),
            Value::Object(m) => match literal_values(m) {
                Some(vs) => Some(vs),
                None if m.contains_key("type") => {
                    let bits = self.type_bits_of(m, ptr)?;
                    if bits & !(T_NULL | T_BOOL) == 0 {
                        let mut v = Vec::new();
                        if bits & T_NULL != 0 {
                            v.push(Value::Null);
                        }
                        if bits & T_BOOL != 0 {
                            v.extend([Value::Bool(true), Value::Bool(false)]);
                        }
                        Some(v)
                    } else {
                        None
                    }
                }
                None => None,
            },
            _ => None,
        };
        let Some(cands) = cands else { return Ok(None) };
        let mut out: Vec<Value> = Vec::new();
        for v in cands {
            if self.validates(&v, s, ptr, 0)? && !out.iter().any(|o| json_eq(o, &v)) {
                out.push(v);
            }
        }
        Ok(Some(out))
    }

    /// [`Compiler::finite_values`] of a sub-schema (`Terms` read as the JSON it stands for:
    /// only a single part names a finite set).
    fn finite_values_sub(&mut self, s: &Sub, ptr: &str) -> Result<Option<Vec<Value>>> {
        let p = match s {
            Sub::Json(v) => return self.finite_values(v, ptr),
            Sub::Terms(terms) => match terms.as_slice() {
                [] => return Ok(Some(vec![])),
                [t] if t.len() == 1 => &t[0],
                _ => return Ok(None),
            },
            Sub::All(_) | Sub::Not(_) => return Ok(None),
        };
        let cands = match literal_values(&p.map) {
            Some(vs) => vs,
            None if p.map.contains_key("type") => {
                let bits = self.type_bits_x(&p.map, &p.x, ptr)?;
                if bits & !(T_NULL | T_BOOL) != 0 {
                    return Ok(None);
                }
                let mut v = Vec::new();
                if bits & T_NULL != 0 {
                    v.push(Value::Null);
                }
                if bits & T_BOOL != 0 {
                    v.extend([Value::Bool(true), Value::Bool(false)]);
                }
                v
            }
            None => return Ok(None),
        };
        let mut out: Vec<Value> = Vec::new();
        for v in cands {
            if self.validates_sub(&v, s, ptr, 0)? && !out.iter().any(|o| json_eq(o, &v)) {
                out.push(v);
            }
        }
        Ok(Some(out))
    }

    /// `uniqueItems: true` over strings, registered for the matchers to enforce
    /// ([`crate::unique`]): `Some(true)` when registered (or when no item is possible), then the
    /// array is compiled as if it had no `uniqueItems`; `Some(false)` when no array is possible
    /// (fewer distinct strings than `minItems`); `None` when it does not apply here: the items
    /// are not strings described by string keywords alone, the array has `prefixItems`,
    /// `contains` or typed constraints, or its instance path does not decide its schema
    /// (see [`Compiler::path`]).
    fn unique_strings(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        prefix: &[Value],
        rest: Option<&Value>,
        min: u64,
        ptr: &str,
    ) -> Result<Option<bool>> {
        use crate::automata::charlang::{Lang, LangBudget};
        use crate::automata::hir as hirs;
        use crate::automata::spell::dot_all;
        let Some(path) = self.path.clone() else {
            return Ok(None);
        };
        if !prefix.is_empty() || !x.is_empty() || m.contains_key("contains") {
            return Ok(None);
        }
        // the item schema, through `$ref`s that stand alone
        let Some(rest) = rest else { return Ok(None) };
        let Some(Value::Object(im)) = self.through_refs(rest, ptr)? else {
            return Ok(None);
        };
        let iptr = child(ptr, "items");
        if im.get("type").and_then(Value::as_str) == Some("integer") {
            return self.unique_integers(im, path, min, &iptr);
        }
        const NUMBER_KEYS: [&str; 5] = [
            "type",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
        ];
        // bounds that leave one value (`minimum` equal to `maximum`) are not counted: refused
        let one_value = match (im.get("minimum"), im.get("maximum")) {
            (Some(Value::Number(a)), Some(Value::Number(b))) => {
                crate::json_schema::number::Dec::from_json(a)
                    == crate::json_schema::number::Dec::from_json(b)
            }
            _ => false,
        };
        if im.get("type").and_then(Value::as_str) == Some("number")
            && im
                .keys()
                .all(|k| !Self::is_validity(k) || NUMBER_KEYS.contains(&k.as_str()))
            && !one_value
        {
            // numbers, compared by value (its spellings' language for the reader); with
            // bounds, a prefix at one of them has one value left (see `Kind::Num`)
            let Some(n) = self.number(im, &Extra::default(), &iptr, false)? else {
                return Ok(Some(true));
            };
            return self.register_unique(im, path, Kind::Num, n.char_dfa(), min, &iptr);
        }
        let mut strings = false;
        let mut pos = Vec::new();
        for (k, v) in im {
            if !Self::is_validity(k) {
                continue;
            }
            match k.as_str() {
                "type" => {
                    strings = v.as_str() == Some("string")
                        || matches!(v, Value::Array(t) if t.len() == 1 && t[0] == "string");
                    if !strings {
                        return Ok(None);
                    }
                }
                "pattern" => pos.push(self.pattern_hir(v, "pattern", &iptr)?),
                "format" => {
                    if let Some(h) = v.as_str().and_then(|f| self.asserted_format(f)) {
                        pos.push(h);
                    }
                }
                "minLength" | "maxLength" | "enum" | "const" => {}
                _ => return Ok(None),
            }
        }
        let lo = clamped(self.count(im, "minLength", &iptr)?.unwrap_or(0));
        let hi = self.count(im, "maxLength", &iptr)?.map(clamped);
        if lo > 0 || hi.is_some() {
            if lo > 4096 || hi.is_some_and(|h| h > 4096) {
                return Ok(None);
            }
            pos.push(hirs::rep(dot_all(), lo as u32, hi.map(|h| h as u32)));
        }
        let listed = literal_values(im);
        if listed.is_some() {
            strings = true;
        }
        if !strings {
            return Ok(None);
        }
        let dfa = match listed {
            // patterns, format and lengths alone: the process-wide cache of string automata
            // (a format met before is not determinized again)
            None => crate::automata::strlang::combined_dfa(&pos, &[]),
            Some(values) => {
                let mut lang = Lang::nothing();
                for v in values {
                    match v {
                        Value::String(s) => lang = lang.or(&Lang::literal(&s)),
                        _ if im.contains_key("type") => {}
                        _ => return Ok(None),
                    }
                }
                pos.iter()
                    .try_fold(lang, |l, h| Lang::from_hir(h).map(|x| l.and(&x)))
                    .and_then(|l| l.to_char_dfa(&LangBudget::default()))
            }
        };
        self.register_unique(im, path, Kind::Str, dfa, min, ptr)
    }

    /// [`Compiler::unique_strings`] for items `{"type": "integer"}` with bounds and
    /// `multipleOf` (`im`, at `iptr`): their spellings as the grammar writes them.
    fn unique_integers(
        &mut self,
        im: &Map<String, Value>,
        path: Vec<Step>,
        min: u64,
        iptr: &str,
    ) -> Result<Option<bool>> {
        const KEYS: [&str; 6] = [
            "type",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
        ];
        if im
            .keys()
            .any(|k| Self::is_validity(k) && !KEYS.contains(&k.as_str()))
        {
            return Ok(None);
        }
        let Some(n) = self.number(im, &Extra::default(), iptr, true)? else {
            return Ok(Some(true));
        };
        self.register_unique(im, path, Kind::Int, n.char_dfa(), min, iptr)
    }

    /// Register a unique array at `path` whose items (schema `im`) have the language `dfa`
    /// (`None`: no item at all, so `[]` alone, unique already; an error: an automaton too large
    /// to build, unsupported, or ignored under `lenient`); `Some(false)` when fewer than `min`
    /// distinct values exist.
    fn register_unique(
        &mut self,
        im: &Map<String, Value>,
        path: Vec<Step>,
        kind: Kind,
        dfa: std::result::Result<Option<crate::automata::charlang::CharDfa>, String>,
        min: u64,
        ptr: &str,
    ) -> Result<Option<bool>> {
        let dfa = match dfa {
            Ok(Some(d)) => d,
            Ok(None) => return Ok(Some(true)),
            Err(e) => {
                let why = format!("the items' language cannot be kept unique here: {e}");
                // lenient: compiled without uniqueness
                self.unsupported("uniqueItems", ptr, &why)?;
                return Ok(Some(true));
            }
        };
        let array = UniqueArray {
            path,
            kind,
            item: ItemLang::new(dfa),
        };
        if array.distinct().is_some_and(|n| n < min) {
            return Ok(Some(false));
        }
        self.unique_regs += 1;
        let key = Value::Object(im.clone()).to_string();
        match self.uniques.iter().find(|(_, a)| a.path == array.path) {
            Some((k, _)) if *k == key => {}
            Some(_) => {
                return Err(schema_error(
                    "uniqueItems",
                    ptr,
                    "two unique arrays with different items at the same place",
                ))
            }
            None => self.uniques.push((key, array)),
        }
        Ok(Some(true))
    }

    /// `uniqueItems: true` over finite item domains: every array of distinct values, listed.
    /// Each listed array is then checked against every array keyword of the map `m` (with its
    /// typed constraints `x`): `contains`, `minContains`/`maxContains`, a negated `contains`
    /// and whatever else applies to arrays hold exactly, not only the ones the listing reads.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn unique_array(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        prefix: &[Value],
        typed_items: &[Option<&Sub>],
        rest: Option<&Value>,
        len: (u64, Option<u64>),
        ptr: &str,
    ) -> Result<Option<Option<Expr>>> {
        const MAX_ARRAYS: usize = 4096;
        let mut doms: Vec<Vec<Value>> = Vec::new();
        for (s, t) in prefix.iter().zip(typed_items) {
            let d = match t {
                Some(sub) => self.finite_values_sub(sub, ptr)?,
                None => self.finite_values(s, ptr)?,
            };
            match d {
                Some(d) => doms.push(d),
                None => return Ok(None),
            }
        }
        let rest_dom = match rest {
            None => None,
            Some(s) => self.finite_values(s, ptr)?,
        };
        // longest possible array: the bound, else the prefix plus every distinct rest value
        let cap = match (&rest_dom, len.1) {
            (_, Some(mx)) => mx,
            (Some(d), None) => (prefix.len() + d.len()) as u64,
            (None, None) => return Ok(None),
        };
        let cap =
            cap.min((prefix.len() + rest_dom.as_ref().map_or(usize::MAX / 2, Vec::len)) as u64);
        if rest_dom.is_none() && cap > prefix.len() as u64 {
            return Ok(None);
        }
        let mut out: Vec<Value> = Vec::new();
        let mut seq: Vec<Value> = Vec::new();
        fn go(
            doms: &[Vec<Value>],
            rest: &Option<Vec<Value>>,
            len: (u64, u64),
            seq: &mut Vec<Value>,
            out: &mut Vec<Value>,
            limit: usize,
        ) -> bool {
            let i = seq.len();
            if i as u64 >= len.0 {
                if out.len() >= limit {
                    return false;
                }
                out.push(Value::Array(seq.clone()));
            }
            if i as u64 >= len.1 {
                return true;
            }
            let dom = match doms.get(i) {
                Some(d) => d,
                None => match rest {
                    Some(d) => d,
                    None => return true,
                },
            };
            for v in dom {
                if seq.iter().any(|x| json_eq(x, v)) {
                    continue;
                }
                seq.push(v.clone());
                let ok = go(doms, rest, len, seq, out, limit);
                seq.pop();
                if !ok {
                    return false;
                }
            }
            true
        }
        if !go(
            &doms,
            &rest_dom,
            (len.0, cap),
            &mut seq,
            &mut out,
            MAX_ARRAYS,
        ) {
            return Ok(None);
        }
        // every array keyword, checked on each listed array
        let arrays: Map<String, Value> = m
            .iter()
            .filter(|(k, _)| applies_to(k) == T_ARRAY)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut kept = Vec::new();
        for a in out {
            if self.validates_map(&a, &arrays, x, ptr, 0)? {
                kept.push(self.literal(&a));
            }
        }
        Ok(Some(if kept.is_empty() {
            None
        } else {
            Some(alt(kept))
        }))
    }

    /// Arrays with a `contains` count: every item is either a match (item schema ∧ contains)
    /// or not (item schema ∧ ¬contains), and the matches are counted. Positions before `from`
    /// are not counted.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn array_contains(
        &mut self,
        prefix: &[Value],
        typed_items: &[Option<&Sub>],
        rest: Option<&Value>,
        c: &Sub,
        counts: (u64, Option<u64>),
        from: u64,
        len: (u64, Option<u64>),
        ptr: &str,
    ) -> Result<Option<Expr>> {
        let cptr = child(ptr, "contains");
        // `allOf: [s, c]` and `allOf: [s, {not: c}]`: JSON when both are, else typed
        let both = |s: Sub, c: Sub| match (s, c) {
            (Sub::Json(s), Sub::Json(c)) => {
                let mut o = Map::new();
                o.insert("allOf".into(), Value::Array(vec![s, c]));
                Sub::Json(Value::Object(o))
            }
            (s, c) => Sub::All(vec![s, c]),
        };
        let not_c = match c {
            Sub::Json(c) => {
                let mut o = Map::new();
                o.insert("not".into(), c.clone());
                Sub::Json(Value::Object(o))
            }
            c => Sub::Not(Box::new(c.clone())),
        };
        let any = Value::Bool(true);
        // (non-matching, matching) item languages per prefix position, then for the rest
        let mut pairs: Vec<(Option<Expr>, Option<Expr>)> = Vec::new();
        for (i, s) in prefix.iter().enumerate() {
            let s = match typed_items[i] {
                Some(sub) => sub.clone(),
                None => Sub::Json(s.clone()),
            };
            if (i as u64) < from {
                pairs.push((self.compile_sub(&s, &cptr)?, None));
            } else {
                let x = self.compile_sub(&both(s.clone(), not_c.clone()), &cptr)?;
                let y = self.compile_sub(&both(s, c.clone()), &cptr)?;
                pairs.push((x, y));
            }
        }
        let r = rest.unwrap_or(&any);
        let rest_pair = (
            self.compile_sub(&both(Sub::Json(r.clone()), not_c.clone()), &cptr)?,
            self.compile_sub(&both(Sub::Json(r.clone()), c.clone()), &cptr)?,
        );
        if from > prefix.len() as u64 {
            // uncounted positions of the rest: unroll them as plain prefix positions
            let plain = self.schema(r, &cptr)?;
            while (pairs.len() as u64) < from {
                pairs.push((plain.clone(), None));
            }
        }
        let mut budget = 0u64;
        let body = self.contains_seq(&pairs, &rest_pair, 0, 0, counts, len, &mut budget, ptr)?;
        Ok(body.map(|b| self.wrap("[", b, "]")))
    }

    /// Arrays with several `contains` counts `cs` (schema, `minContains`, `maxContains`, the
    /// index counting starts at): each item is in the class of the subset of the `contains`
    /// schemas counting there that it matches (item schema ∧ those ∧ the negation of the
    /// others), and each count is kept, saturating at its minimum when it has no maximum.
    pub(super) fn array_contains_multi(
        &mut self,
        prefix: &[Value],
        typed_items: &[Option<&Sub>],
        rest: Option<&Value>,
        cs: &[Counted],
        len: (u64, Option<u64>),
        ptr: &str,
    ) -> Result<Option<Expr>> {
        const MAX_CONTAINS: usize = 6;
        if cs.len() > MAX_CONTAINS {
            return Err(schema_error(
                "contains",
                ptr,
                format!(
                    "more than {MAX_CONTAINS} different contains on one array are not supported"
                ),
            ));
        }
        let cptr = child(ptr, "contains");
        // the item classes of position `i` whose schema is `s`, by subset of `cs` (a mask; a
        // `contains` not counting there is in none)
        let classes = |c: &mut Self, s: Sub, i: u64| -> Result<Vec<Option<Expr>>> {
            let mut out = Vec::new();
            for mask in 0..1usize << cs.len() {
                let mut all = vec![s.clone()];
                let mut ok = true;
                for (k, (ck, _, _, from)) in cs.iter().enumerate() {
                    let set = mask >> k & 1 == 1;
                    if i < *from {
                        ok &= !set;
                    } else if set {
                        all.push(ck.clone());
                    } else {
                        all.push(Sub::Not(Box::new(ck.clone())));
                    }
                }
                out.push(if ok {
                    c.compile_sub(&Sub::All(all), &cptr)?
                } else {
                    None
                });
            }
            Ok(out)
        };
        let any = Value::Bool(true);
        let rest_s = Sub::Json(rest.unwrap_or(&any).clone());
        // the prefix, and the positions of the rest before every count has started
        let starts = cs.iter().map(|c| c.3).max().unwrap_or(0);
        let mut at: Vec<Vec<Option<Expr>>> = Vec::new();
        for i in 0..(prefix.len() as u64).max(starts) {
            let s = match (prefix.get(i as usize), typed_items.get(i as usize)) {
                (_, Some(Some(sub))) => (*sub).clone(),
                (Some(s), _) => Sub::Json(s.clone()),
                (None, _) => rest_s.clone(),
            };
            at.push(classes(self, s, i)?);
        }
        let tail = classes(self, rest_s, at.len() as u64)?;
        let counts: Vec<(u64, Option<u64>)> = cs.iter().map(|&(_, lo, hi, _)| (lo, hi)).collect();
        let start = vec![0u64; cs.len()];
        let mut budget = 0u64;
        let body = self.multi_seq(&at, &tail, &counts, 0, &start, len, &mut budget, ptr)?;
        Ok(body.map(|b| self.wrap("[", b, "]")))
    }

    /// [`Self::array_contains_multi`]'s items from position `i` on, with the counts `v` so
    /// far; past the prefix and any length bound, the rest in closed form: the items that
    /// change no count repeated, then one that changes some and what follows it.
    #[allow(clippy::too_many_arguments)]
    fn multi_seq(
        &self,
        at: &[Vec<Option<Expr>>],
        tail: &[Option<Expr>],
        counts: &[(u64, Option<u64>)],
        i: u64,
        v: &[u64],
        len: (u64, Option<u64>),
        budget: &mut u64,
        ptr: &str,
    ) -> Result<Option<Expr>> {
        unroll_case(budget, ptr)?;
        // the counts after an item of class `mask`, `None` past a maximum
        let step = |mask: usize| -> Option<Vec<u64>> {
            let mut n = v.to_vec();
            for (k, &(lo, hi)) in counts.iter().enumerate() {
                if mask >> k & 1 == 1 {
                    n[k] += 1;
                    match hi {
                        Some(h) if n[k] > h => return None,
                        Some(_) => {}
                        None => n[k] = n[k].min(lo),
                    }
                }
            }
            Some(n)
        };
        let done = counts.iter().zip(v).all(|(&(lo, _), &n)| n >= lo);
        let item = |e: &Expr| self.nth_item(i, e);
        let (min, max) = len;
        let in_prefix = (i as usize) < at.len();
        let classes = if in_prefix { &at[i as usize] } else { tail };
        if !in_prefix && i > 0 && min <= i && max.is_none() {
            let mut same = Vec::new();
            let mut alts = Vec::new();
            if done {
                alts.push(Some(Expr::empty()));
            }
            for (mask, e) in classes.iter().enumerate() {
                let (Some(e), Some(n)) = (e, step(mask)) else {
                    continue;
                };
                if n == v {
                    same.push(e.clone());
                } else if let Some(t) =
                    self.multi_seq(at, tail, counts, i + 1, &n, len, budget, ptr)?
                {
                    alts.push(Some(concat(vec![item(e), t])));
                }
            }
            let Some(after) = alt_opt(alts) else {
                return Ok(None);
            };
            return Ok(Some(if same.is_empty() {
                after
            } else {
                concat(vec![star(item(&alt(same))), after])
            }));
        }
        let mut alts: Vec<Option<Expr>> = Vec::new();
        if i >= min && done {
            alts.push(Some(Expr::empty()));
        }
        if max.is_none_or(|m| i < m) {
            if !in_prefix {
                unroll_to_min(min, i, ptr)?;
            }
            for (mask, e) in classes.iter().enumerate() {
                let (Some(e), Some(n)) = (e, step(mask)) else {
                    continue;
                };
                if let Some(t) = self.multi_seq(at, tail, counts, i + 1, &n, len, budget, ptr)? {
                    alts.push(Some(concat(vec![item(e), t])));
                }
            }
        }
        Ok(alt_opt(alts))
    }

    /// Item `e` at position `i` of an array (after a comma but the first).
    fn nth_item(&self, i: u64, e: &Expr) -> Expr {
        if i > 0 {
            concat(vec![self.comma(), e.clone()])
        } else {
            e.clone()
        }
    }

    /// Items from position `i` on, `c` matches so far.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn contains_seq(
        &self,
        pairs: &[(Option<Expr>, Option<Expr>)],
        rest: &(Option<Expr>, Option<Expr>),
        i: u64,
        c: u64,
        counts: (u64, Option<u64>),
        len: (u64, Option<u64>),
        budget: &mut u64,
        ptr: &str,
    ) -> Result<Option<Expr>> {
        unroll_case(budget, ptr)?;
        let (lo, hi) = counts;
        let (min, max) = len;
        let item = |e: &Expr| self.nth_item(i, e);
        let in_prefix = (i as usize) < pairs.len();
        // Closed form once past the prefix, past the first item and free of length bounds.
        if !in_prefix && i > 0 && min <= i && max.is_none() {
            let a = lo.saturating_sub(c);
            let b = hi.map(|h| h - c);
            if b.is_some_and(|b| b < a) {
                return Ok(None);
            }
            let xs = rest.0.as_ref().map(|x| star(item(x)));
            let yx = rest.1.as_ref().map(|y| {
                let mut v = vec![item(y)];
                if let Some(x) = &xs {
                    v.push(x.clone());
                }
                concat(v)
            });
            let mut parts = Vec::new();
            if let Some(x) = &xs {
                parts.push(x.clone());
            }
            match yx {
                Some(yx) => parts.push(rep(yx, a as u32, b.map(|b| b as u32))),
                None if a > 0 => return Ok(None),
                None => {}
            }
            return Ok(Some(concat(parts)));
        }
        let mut alts: Vec<Option<Expr>> = Vec::new();
        if i >= min && c >= lo {
            alts.push(Some(Expr::empty()));
        }
        if max.is_none_or(|m| i < m) {
            if !in_prefix {
                unroll_to_min(min, i, ptr)?;
            }
            let (x, y) = if in_prefix {
                pairs[i as usize].clone()
            } else {
                rest.clone()
            };
            if let Some(x) = x {
                if let Some(t) =
                    self.contains_seq(pairs, rest, i + 1, c, counts, len, budget, ptr)?
                {
                    alts.push(Some(concat(vec![item(&x), t])));
                }
            }
            if let Some(y) = y {
                if hi.is_none_or(|h| c < h) {
                    let c2 = if hi.is_none() { (c + 1).min(lo) } else { c + 1 };
                    if let Some(t) =
                        self.contains_seq(pairs, rest, i + 1, c2, counts, len, budget, ptr)?
                    {
                        alts.push(Some(concat(vec![item(&y), t])));
                    }
                }
            }
        }
        Ok(alt_opt(alts))
    }

    /// The items from index `i` on: the prefix items `pre` (each taken out when used: every
    /// one is used once), then `rest` for the others, `min..=max` items in all.
    pub(super) fn array_tail(
        &self,
        pre: &mut [Option<Expr>],
        rest: Option<Expr>,
        i: u64,
        min: u64,
        max: Option<u64>,
    ) -> Option<Expr> {
        if max.is_some_and(|mx| i >= mx) {
            return Some(Expr::empty());
        }
        let k = pre.len() as u64;
        if i < k {
            let e = pre[i as usize].take();
            let body = e.and_then(|e| {
                let tail = self.array_tail(pre, rest, i + 1, min, max)?;
                let mut v = Vec::new();
                if i > 0 {
                    v.push(self.comma());
                }
                v.push(e);
                v.push(tail);
                Some(concat(v))
            });
            return if i >= min {
                Some(body.map(opt).unwrap_or_else(Expr::empty))
            } else {
                body
            };
        }
        let a = min.saturating_sub(i);
        let b = max.map(|mx| mx - i);
        match rest {
            None => (a == 0).then(Expr::empty),
            Some(r) if i > 0 => Some(rep(
                concat(vec![self.comma(), r]),
                a as u32,
                b.map(|b| b as u32),
            )),
            Some(r) => Some(self.list(r, a, b)),
        }
    }
}

//! Objects: properties, required, key languages, patternProperties and additionalProperties.

use regex_syntax::hir::Hir;
use serde_json::{Map, Value};

use super::scalars::{spelled_combination, spelled_not_in};
use super::{child, literal_values, schema_error, Compiler, MAX_BUILT, MAX_WEIGHT};
use crate::automata::charlang::{Lang, LangBudget};
use crate::automata::expr::{alt, concat, lit, rep, Expr, MAX_WITNESS_KINDS};
use crate::automata::hir as hirs;
use crate::automata::spell::dot_all;
use crate::error::{Error, Result};
use crate::json_schema::extra::{Extra, KeyView, SomeExtra, Sub};
use crate::json_schema::keywords::T_STRING;
use crate::json_schema::options::{AdditionalProperties, PropertyOrder};
use crate::json_schema::unique::Step;

impl<'a> Compiler<'a> {
    pub(super) fn object(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
    ) -> Result<Option<Expr>> {
        // negated additionalProperties / patternProperties: for each, some member must be a
        // witness of its kind
        if x.some_extra.len() > MAX_WITNESS_KINDS {
            return Err(schema_error(
                "not",
                ptr,
                format!(
                    "more than {MAX_WITNESS_KINDS} negated additionalProperties/patternProperties \
                     apply to one object"
                ),
            ));
        }
        let mut kinds: Vec<WitnessKind> = Vec::new();
        for se in &x.some_extra {
            kinds.push(self.witness_kind(se, ptr)?);
        }
        let all_kinds: u32 = (1u32 << kinds.len()) - 1;
        let empty = Map::new();
        let props = match m.get("properties") {
            None => &empty,
            Some(Value::Object(p)) => p,
            Some(_) => {
                return Err(schema_error(
                    "properties",
                    ptr,
                    "properties must be an object",
                ))
            }
        };
        let mut required: Vec<&str> = Vec::new();
        match m.get("required") {
            None => {}
            Some(Value::Array(r)) => {
                for x in r {
                    let name = x.as_str().ok_or_else(|| {
                        schema_error("required", ptr, "required must be a list of strings")
                    })?;
                    // a name listed twice is required once (a dependency may list its trigger)
                    if !required.contains(&name) {
                        required.push(name);
                    }
                }
            }
            Some(_) => return Err(schema_error("required", ptr, "required must be an array")),
        }
        // Values allowed for undeclared properties.
        let extra: Option<Expr> = match m.get("additionalProperties") {
            None => match self.opts.additional_properties {
                AdditionalProperties::Allow => Some(self.any_value(self.opts.max_nesting_depth)?),
                AdditionalProperties::Forbid => None,
            },
            Some(s) => {
                // every key but the declared ones has this schema when no patternProperties
                // (nor merged views of other branches) claim some of them
                if x.is_empty() && !m.contains_key("patternProperties") {
                    self.pass_path(Some(Step::Other(props.keys().cloned().collect())));
                }
                self.schema(s, &child(ptr, "additionalProperties"))?
            }
        };
        // the same as a schema (for the views of merged allOf branches, see `KeyView`)
        let map_additional = match m.get("additionalProperties") {
            Some(v) => v.clone(),
            None => Value::Bool(matches!(
                self.opts.additional_properties,
                AdditionalProperties::Allow
            )),
        };
        // patternProperties: (decoded key language, value schema, the value schema's pointer)
        let mut patterns: Vec<(Hir, Value, String)> = Vec::new();
        if let Some(pp) = m.get("patternProperties") {
            let pp = pp.as_object().ok_or_else(|| {
                schema_error(
                    "patternProperties",
                    ptr,
                    "patternProperties must be an object",
                )
            })?;
            for (p, sch) in pp {
                let h = self.pattern_hir(&Value::from(p.as_str()), "patternProperties", ptr)?;
                let at = child(&child(ptr, "patternProperties"), p);
                patterns.push((h, sch.clone(), at));
            }
        }
        // propertyNames: the decoded language every key must be in
        let names_schema = m.get("propertyNames").filter(|v| **v != Value::Bool(true));
        let key_lang: Option<Vec<Hir>> = match names_schema {
            None => None,
            Some(pn) => Some(self.key_language(pn, &child(ptr, "propertyNames"))?),
        };
        // Declared properties in schema order, then required names the properties lack.
        let mut names: Vec<String> = props.keys().cloned().collect();
        let mut items: Vec<(Expr, bool)> = Vec::new();
        // the kinds some declared member can be a witness of (see `kinds`)
        let mut item_cover = 0u32;
        // each item's witness branches (their kinds), and whether it is required
        let mut item_kinds: Vec<(bool, Vec<u32>)> = Vec::new();
        let entries: Vec<(String, Option<&Value>)> = props
            .iter()
            .map(|(k, v)| (k.clone(), Some(v)))
            .chain(
                required
                    .iter()
                    .filter(|r| !props.contains_key(**r))
                    .map(|r| (r.to_string(), None)),
            )
            .collect();
        for (name, s) in entries {
            let is_req = required.contains(&name.as_str());
            let pptr = child(&child(ptr, "properties"), &name);
            let before = self.cuts;
            if !names.contains(&name) {
                names.push(name.clone());
            }
            // the patternProperties this name matches apply to it as well
            let mut matching: Vec<Value> = Vec::new();
            for (h, sch, _) in &patterns {
                if crate::json_schema::validate::full_match(h, &name)? {
                    matching.push(sch.clone());
                }
            }
            if !x.key_views.is_empty() {
                // this object's own additionalProperties, where no pattern of its own matched
                // a name it does not declare, goes with the views' constraints
                if s.is_none() && matching.is_empty() {
                    matching.push(map_additional.clone());
                }
                for view in &x.key_views {
                    matching.extend(self.view_constraints(view, &name, ptr)?);
                }
                matching.retain(|v| *v != Value::Bool(true));
            }
            let name_ok = match names_schema {
                Some(pn) => self.validates(&Value::from(name.as_str()), pn, ptr, 0)?,
                None => true,
            };
            // the witness branches of a declared name of some witness kind: for each set of
            // such kinds, the same constraint as a sub-schema with theirs
            let mut admitted = 0u32;
            for (k, w) in kinds.iter().enumerate() {
                if name_ok && w.admits(&name)? {
                    admitted |= 1 << k;
                }
            }
            let mut witness_values: Vec<(u32, Expr)> = Vec::new();
            for mask in 1..=admitted {
                if mask & admitted != mask {
                    continue;
                }
                let mut all = match (x.property(&name), s) {
                    (Some(sub), _) => vec![sub.clone()],
                    (None, Some(s)) => vec![Sub::Json(s.clone())],
                    (None, None) if matching.is_empty() => vec![Sub::Json(map_additional.clone())],
                    (None, None) => vec![],
                };
                all.extend(matching.iter().cloned().map(Sub::Json));
                for (k, w) in kinds.iter().enumerate() {
                    if mask >> k & 1 == 1 {
                        all.push(w.schema.clone());
                    }
                }
                if let Some(e) = self.compile_sub(&Sub::All(all), &pptr)? {
                    witness_values.push((mask, e));
                }
            }
            let v = if !name_ok {
                None
            } else if let Some(sub) = x.property(&name) {
                // the property's schema is typed (its map entry a placeholder)
                if matching.is_empty() {
                    self.compile_sub(sub, &pptr)?
                } else {
                    let mut all = vec![sub.clone()];
                    all.extend(matching.into_iter().map(Sub::Json));
                    self.compile_sub(&Sub::All(all), &pptr)?
                }
            } else {
                match (s, matching.is_empty()) {
                    (Some(s), true) => {
                        self.pass_path(Some(Step::Key(name.clone())));
                        self.schema(s, &pptr)?
                    }
                    (Some(s), false) => {
                        // the property's schema and the patternProperties matching its name
                        matching.insert(0, s.clone());
                        let mut o = Map::new();
                        o.insert("allOf".into(), Value::Array(matching));
                        self.pass_path(Some(Step::Key(name.clone())));
                        self.schema(&Value::Object(o), &pptr)?
                    }
                    (None, true) => extra.clone(),
                    (None, false) => {
                        let mut o = Map::new();
                        o.insert("allOf".into(), Value::Array(matching));
                        self.schema(&Value::Object(o), &pptr)?
                    }
                }
            };
            match v {
                Some(v) => {
                    let kv = concat(vec![
                        lit("\""),
                        self.spell_literal(&name),
                        lit("\""),
                        self.colon(),
                        v,
                    ]);
                    // this member is a witness of some kinds, or of none (then they must come
                    // from other members)
                    item_kinds.push((is_req, witness_values.iter().map(|w| w.0).collect()));
                    let kv = if witness_values.is_empty() {
                        kv
                    } else {
                        let mut branches = vec![concat(vec![Expr::Witness(0), kv])];
                        for (mask, w) in witness_values {
                            item_cover |= mask;
                            branches.push(concat(vec![
                                Expr::Witness(mask),
                                lit("\""),
                                self.spell_literal(&name),
                                lit("\""),
                                self.colon(),
                                w,
                            ]));
                        }
                        alt(branches)
                    };
                    items.push((kv, is_req));
                }
                None if is_req => {
                    if self.cuts > before && !self.opts.truncate_recursion {
                        return Err(schema_error(
                            "$ref",
                            &pptr,
                            format!(
                                "the required property {name:?} needs recursion deeper than \
                                 max_recursion_depth={}; raise max_recursion_depth, or set \
                                 truncate_recursion=True to drop values that need deeper \
                                 recursion (the grammar then accepts a subset)",
                                self.opts.max_recursion_depth
                            ),
                        ));
                    }
                    return Ok(None);
                }
                None => {}
            }
        }
        let extra_kv = if x.key_views.is_empty() {
            self.extra_members(&names, &patterns, key_lang.as_deref(), extra, ptr)?
        } else {
            self.extra_members_with_views(
                &names,
                &patterns,
                &map_additional,
                &x.key_views,
                key_lang.as_deref(),
                &[],
                ptr,
            )?
        };
        // the witness members among the undeclared ones, for each set of kinds
        let mut witness_kv: Vec<(u32, Expr)> = Vec::new();
        for mask in 1..=all_kinds {
            let ws: Vec<&WitnessKind> = (0..kinds.len())
                .filter(|k| mask >> k & 1 == 1)
                .map(|k| &kinds[k])
                .collect();
            if let Some(e) = self.extra_members_with_views(
                &names,
                &patterns,
                &map_additional,
                &x.key_views,
                key_lang.as_deref(),
                &ws,
                ptr,
            )? {
                witness_kv.push((mask, e));
            }
        }
        let n_req = items.iter().filter(|x| x.1).count() as u64;
        let n_opt = items.len() as u64 - n_req;
        let minp = self.count(m, "minProperties", ptr)?;
        let maxp = self.count(m, "maxProperties", ptr)?;
        // Bounds on the number of extra properties.
        let mut extra_bounds: (u64, Option<u64>) = (0, None);
        // Bounds on the number of all members, kept by a counter of the members written.
        let mut counted: Option<(u32, Option<u32>)> = None;
        let any_order = self.opts.property_order == PropertyOrder::Any;
        if minp.is_some() || maxp.is_some() {
            let lo = minp.unwrap_or(0);
            if maxp.is_some_and(|mx| mx < lo) {
                return Ok(None);
            }
            // undeclared members: the extra ones, and the witnesses of negated maps
            let no_extras = extra_kv.is_none() && witness_kv.is_empty();
            let trivially = lo <= n_req && maxp.is_none_or(|mx| no_extras && mx >= n_req + n_opt);
            if maxp.is_some_and(|mx| mx < n_req) || (no_extras && lo > n_req + n_opt) {
                return Ok(None);
            }
            if !trivially {
                if n_opt == 0 && extra_kv.is_some() && !any_order && kinds.is_empty() {
                    extra_bounds = (lo.saturating_sub(n_req), maxp.map(|mx| mx - n_req));
                } else {
                    let small = |x: u64| x.min(u64::from(u32::MAX - 1)) as u32;
                    counted = Some((small(lo), maxp.map(small)));
                }
            }
        }
        // Size of the body before building it: the tail after the first present property is
        // linear, but each leading optional property starts its own alternative holding a copy
        // of everything after it, so a property is copied once per optional property before it
        // (up to the first required one).
        // With no bounds on the extras the members compile into one shared sequence
        // (`automata::nfa::member_seq`), linear in the members.
        let shared = extra_bounds == (0, None);
        let mut estimate = 0u64;
        let mut held = 0u64;
        let mut leading_optional = 0u64;
        let mut all_optional = true;
        for (kv, req) in &items {
            let copies = if shared { 1 } else { 1 + leading_optional };
            estimate = estimate.saturating_add(kv.weight().saturating_mul(copies));
            held = held.saturating_add(kv.nodes().saturating_mul(copies));
            if *req {
                all_optional = false;
            } else if all_optional {
                leading_optional += 1;
            }
        }
        if let Some(kv) = &extra_kv {
            let copies = if shared { 1 } else { 2 + leading_optional };
            estimate = estimate.saturating_add(kv.weight().saturating_mul(copies));
            held = held.saturating_add(kv.nodes().saturating_mul(copies));
        }
        self.built = self.built.saturating_add(held);
        // Without copies (`shared`) the estimate is what the members hold themselves, each
        // within the limits where it was built: the schema's weight (`check_weight`), what the
        // compile holds (`MAX_BUILT`, below) and the automaton's `max_nfa_bytes` decide. With
        // copies it is what the copies multiply.
        if !shared && estimate > MAX_WEIGHT {
            let why = if shared || leading_optional == 0 {
                String::new()
            } else {
                format!(
                    "; with minProperties/maxProperties counting extra properties, each of the \
                     {leading_optional} optional properties before the first required one \
                     repeats what follows"
                )
            };
            return Err(Error::Budget(format!(
                "the object at #{ptr} expands to about {estimate} automaton nodes (limit \
                 {MAX_WEIGHT}{why}): lower max_nesting_depth / max_recursion_depth, mark \
                 properties required, or use additional_properties=\"forbid\""
            )));
        }
        if self.built > MAX_BUILT {
            return Err(Error::Budget(format!(
                "the schema expands to more than {MAX_BUILT} expression nodes while compiling \
                 (the object at #{ptr} adds about {held}): lower max_nesting_depth / \
                 max_recursion_depth, or use additional_properties=\"forbid\""
            )));
        }
        let body = if !kinds.is_empty() {
            let cover = witness_kv.iter().fold(item_cover, |a, w| a | w.0);
            if cover != all_kinds {
                // some kind has no member that can be its witness: no object is in the language
                return Ok(None);
            }
            if let Some((lo, hi)) = counted {
                // the fewest members that write every witness, and the most members there can
                // be: no count within the bounds between them, no object
                let tails: Vec<u32> = witness_kv.iter().map(|w| w.0).collect();
                let fewest = fewest_with_witnesses(&item_kinds, &tails, all_kinds);
                let most = if extra_kv.is_some() || !tails.is_empty() {
                    u64::MAX
                } else {
                    item_kinds.len() as u64
                };
                if fewest.is_none_or(|f| hi.is_some_and(|h| f > u64::from(h)))
                    || most < u64::from(lo)
                {
                    return Ok(None);
                }
            }
            crate::automata::expr::members_witnessed(
                items,
                self.comma(),
                extra_kv,
                any_order,
                counted,
                witness_kv,
                all_kinds,
            )
        } else if let Some(b) = counted {
            crate::automata::expr::members_counted(items, self.comma(), extra_kv, any_order, b)
        } else if shared && any_order {
            crate::automata::expr::member_set(items, self.comma(), extra_kv)
        } else if shared {
            crate::automata::expr::member_seq(items, self.comma(), extra_kv)
        } else {
            self.props_from(&items, 0, true, extra_kv.as_ref(), extra_bounds)
        };
        Ok(Some(self.wrap("{", body, "}")))
    }

    /// The witness kind of a negated `additionalProperties` / `patternProperties` (see
    /// [`SomeExtra`]) with its key patterns read.
    fn witness_kind(&mut self, se: &SomeExtra, ptr: &str) -> Result<WitnessKind> {
        let mut not_patterns = se.not_keys.clone();
        for p in se.patterns.iter().flatten() {
            not_patterns.push(self.pattern_hir(
                &Value::from(p.as_str()),
                "patternProperties",
                ptr,
            )?);
        }
        let key = match &se.key {
            Some(p) => {
                Some(self.pattern_hir(&Value::from(p.as_str()), "patternProperties", ptr)?)
            }
            None => None,
        };
        Ok(WitnessKind {
            names: se.names.clone(),
            not_patterns,
            key,
            schema: se.schema.clone(),
        })
    }

    /// The decoded language of keys allowed by a `propertyNames` schema (`pos` HIRs that must
    /// all match; an empty list for `false` is returned as one empty class).
    pub(in crate::json_schema) fn key_language(
        &mut self,
        pn: &Value,
        ptr: &str,
    ) -> Result<Vec<Hir>> {
        if needs_key_algebra(pn) || needs_key_algebra(self.deref(pn, ptr)?) {
            // combinators inside: the key language as a boolean combination of string
            // languages, turned back into one expression
            let l = self.key_lang(pn, ptr, 0);
            let r = l.and_then(|l| {
                crate::automata::strlang::lang_hir(&l, &LangBudget::default())
                    .map_err(|e| schema_error("propertyNames", ptr, e))
            });
            return match r {
                Ok(Some(h)) => Ok(vec![h]),
                Ok(None) => Ok(vec![Hir::fail()]),
                Err(Error::Schema { message, .. }) if self.opts.lenient => {
                    self.unsupported("propertyNames", ptr, &message)?;
                    Ok(vec![])
                }
                Err(e) => Err(e),
            };
        }
        let pn = self.deref(pn, ptr)?;
        let m = match pn {
            Value::Bool(false) => return Ok(vec![Hir::fail()]),
            Value::Bool(true) => return Ok(vec![]),
            Value::Object(m) => m,
            _ => {
                return Err(schema_error(
                    "propertyNames",
                    ptr,
                    "a schema must be an object",
                ))
            }
        };
        let mut pos = Vec::new();
        for (k, v) in m {
            match k.as_str() {
                "pattern" => pos.push(self.pattern_hir(v, "pattern", ptr)?),
                "minLength" | "maxLength" => {
                    let n = self.count(m, k, ptr)?.unwrap_or(0);
                    self.big(k, ptr, n)?;
                    let any = dot_all();
                    pos.push(if k == "minLength" {
                        hirs::rep(any, n as u32, None)
                    } else {
                        hirs::rep(any, 0, Some(n as u32))
                    });
                }
                "const" | "enum" => {
                    let vals = literal_values(m).unwrap_or_default();
                    let strs: Vec<Hir> = vals
                        .iter()
                        .filter_map(Value::as_str)
                        .map(|s| Hir::literal(s.as_bytes()))
                        .collect();
                    pos.push(hirs::alt(strs));
                }
                "format" => {
                    if let Some(h) = v.as_str().and_then(|f| self.asserted_format(f)) {
                        pos.push(h);
                    }
                }
                "type" => {
                    // keys are strings: a type without string allows no key
                    if self.type_bits_of(m, ptr)? & T_STRING == 0 {
                        pos.push(Hir::fail());
                    }
                }
                // keys are strings: keywords of other types hold for every key
                k if !Self::is_validity(k) || NOT_FOR_STRINGS.contains(&k) => {}
                k => self.unsupported(
                    "propertyNames",
                    ptr,
                    &format!("`{k}` inside propertyNames is not supported"),
                )?,
            }
        }
        Ok(pos)
    }

    /// The language of keys a `propertyNames` schema `pn` allows, with `not`, `allOf`,
    /// `anyOf`, `oneOf`, `if`/`then`/`else` and `$ref` (beside other keywords) read as the
    /// boolean combinations they are: keys are strings, so the string keywords decide and
    /// the keywords of other types hold for every key.
    fn key_lang(&mut self, pn: &Value, ptr: &str, depth: u32) -> Result<Lang> {
        if depth > 64 {
            return Err(schema_error(
                "propertyNames",
                ptr,
                "the key schema nests or refers to itself more than 64 levels deep",
            ));
        }
        let m = match pn {
            Value::Bool(true) => return Ok(Lang::any()),
            Value::Bool(false) => return Ok(Lang::nothing()),
            Value::Object(m) => m,
            _ => {
                return Err(schema_error(
                    "propertyNames",
                    ptr,
                    "a schema must be an object",
                ))
            }
        };
        let lang = |h: Hir| Lang::from_hir(&h).map_err(|e| schema_error("propertyNames", ptr, e));
        let subs = |k: &str| -> Result<&Vec<Value>> {
            m.get(k)
                .and_then(Value::as_array)
                .filter(|a| !a.is_empty())
                .ok_or_else(|| {
                    schema_error(k, ptr, format!("{k} must be a non-empty array of schemas"))
                })
        };
        let mut l = Lang::any();
        // the keywords of other types and annotations hold for every key
        let mut plain = Map::new();
        for (k, v) in m {
            let here = child(ptr, k);
            match k.as_str() {
                "$ref" => {
                    let r = v
                        .as_str()
                        .ok_or_else(|| schema_error("$ref", ptr, "$ref must be a string"))?;
                    let (target, tptr) = self.resolve(r, ptr)?;
                    l = l.and(&self.key_lang(target, &tptr, depth + 1)?);
                }
                "not" => l = l.and(&self.key_lang(v, &here, depth + 1)?.not()),
                "allOf" => {
                    for (i, x) in subs(k)?.iter().enumerate() {
                        l = l.and(&self.key_lang(x, &child(&here, &i.to_string()), depth + 1)?);
                    }
                }
                "anyOf" => {
                    let mut any = Lang::nothing();
                    for (i, x) in subs(k)?.iter().enumerate() {
                        any =
                            any.or(&self.key_lang(x, &child(&here, &i.to_string()), depth + 1)?);
                    }
                    l = l.and(&any);
                }
                "oneOf" => {
                    let mut bs = Vec::new();
                    for (i, x) in subs(k)?.iter().enumerate() {
                        bs.push(self.key_lang(x, &child(&here, &i.to_string()), depth + 1)?);
                    }
                    // exactly one branch: some branch, and no two
                    let mut two = Lang::nothing();
                    let mut some = Lang::nothing();
                    for b in &bs {
                        two = two.or(&some.and(b));
                        some = some.or(b);
                    }
                    l = l.and(&some.and(&two.not()));
                }
                "if" => {
                    let c = self.key_lang(v, &here, depth + 1)?;
                    let then = match m.get("then") {
                        Some(t) => self.key_lang(t, &child(ptr, "then"), depth + 1)?,
                        None => Lang::any(),
                    };
                    let other = match m.get("else") {
                        Some(e) => self.key_lang(e, &child(ptr, "else"), depth + 1)?,
                        None => Lang::any(),
                    };
                    l = l.and(&c.and(&then).or(&c.not().and(&other)));
                }
                "then" | "else" => {}
                _ => {
                    plain.insert(k.clone(), v.clone());
                }
            }
        }
        for k in NOT_FOR_STRINGS {
            plain.remove(*k);
        }
        for (k, v) in &plain {
            let ok = match k.as_str() {
                "pattern" | "minLength" | "maxLength" | "const" | "enum" | "type" => true,
                // a format's expression may approximate it, which a negation would turn
                // the other way
                "format" => v.as_str().and_then(|f| self.asserted_format(f)).is_none(),
                k => !Self::is_validity(k),
            };
            if !ok {
                return Err(schema_error(
                    k,
                    ptr,
                    format!(
                        "`{k}` inside propertyNames together with not/allOf/anyOf/oneOf/if is \
                         not supported"
                    ),
                ));
            }
        }
        if !plain.is_empty() {
            for h in self.key_language(&Value::Object(plain), ptr)? {
                l = l.and(&lang(h)?);
            }
        }
        Ok(l)
    }

    /// Members for undeclared keys: each combination of matched `patternProperties` gets its
    /// key language (matching exactly those patterns, not a declared name, inside
    /// `propertyNames`) and its value schema (those patterns' schemas, or
    /// `additionalProperties` when none matches).
    pub(super) fn extra_members(
        &mut self,
        names: &[String],
        patterns: &[(Hir, Value, String)],
        key_lang: Option<&[Hir]>,
        extra: Option<Expr>,
        ptr: &str,
    ) -> Result<Option<Expr>> {
        if patterns.is_empty() && key_lang.is_none() {
            return Ok(extra.map(|v| {
                let key = spelled_not_in(
                    &names
                        .iter()
                        .map(|s| s.chars().collect())
                        .collect::<Vec<Vec<char>>>(),
                );
                concat(vec![lit("\""), key, lit("\""), self.colon(), v])
            }));
        }
        if patterns.len() > 6 {
            self.unsupported(
                "patternProperties",
                ptr,
                "more than 6 patternProperties in one object are not supported",
            )?;
            return Ok(extra.map(|v| concat(vec![self.any_string(), self.colon(), v])));
        }
        let declared: Vec<Hir> = names.iter().map(|n| Hir::literal(n.as_bytes())).collect();
        let mut alts = Vec::new();
        for mask in 0u32..(1 << patterns.len()) {
            let mut pos: Vec<Hir> = key_lang.map(<[Hir]>::to_vec).unwrap_or_default();
            let mut neg = declared.clone();
            let mut schemas = Vec::new();
            let mut at = None;
            for (i, (h, sch, sptr)) in patterns.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    pos.push(h.clone());
                    schemas.push(sch.clone());
                    at = Some(sptr);
                } else {
                    neg.push(h.clone());
                }
            }
            let value = if schemas.is_empty() {
                match &extra {
                    Some(v) => v.clone(),
                    None => continue,
                }
            } else if let (1, Some(at)) = (schemas.len(), at) {
                // one pattern's schema, compiled where it stands: its `$ref`s are references
                // like any other (a recursion through it is a call on the stack, not unrolled
                // as the merge of several patterns' schemas unrolls it)
                match self.schema(&schemas[0], at)? {
                    Some(v) => v,
                    None => continue,
                }
            } else {
                let mut o = Map::new();
                o.insert("allOf".into(), Value::Array(schemas));
                match self.schema(&Value::Object(o), &child(ptr, "patternProperties"))? {
                    Some(v) => v,
                    None => continue,
                }
            };
            alts.extend(self.combination_member(&pos, &neg, value, ptr)?);
        }
        Ok(if alts.is_empty() {
            None
        } else {
            Some(alt(alts))
        })
    }

    /// A member whose key matches every one of `pos` and none of `neg` (a combination of
    /// patterns, see [`Compiler::extra_members`]) with `value`; `None` when no key does (or, in
    /// lenient mode, when the key language is unsupported).
    fn combination_member(
        &mut self,
        pos: &[Hir],
        neg: &[Hir],
        value: Expr,
        ptr: &str,
    ) -> Result<Option<Expr>> {
        let key = match spelled_combination(pos, neg) {
            Ok(Some(k)) => k,
            Ok(None) => return Ok(None),
            Err(e) => {
                self.unsupported("patternProperties", ptr, &e)?;
                return Ok(None);
            }
        };
        Ok(Some(concat(vec![
            lit("\""),
            key,
            lit("\""),
            self.colon(),
            value,
        ])))
    }

    /// The schemas `view` puts on the value of member `name`: those of its patterns `name`
    /// matches, or its `additionalProperties` when it matches none and is not declared there.
    pub(in crate::json_schema) fn view_constraints(
        &mut self,
        view: &KeyView,
        name: &str,
        ptr: &str,
    ) -> Result<Vec<Value>> {
        let mut out = Vec::new();
        for (p, s) in &view.patterns {
            let h = self.pattern_hir(&Value::from(p.as_str()), "patternProperties", ptr)?;
            if crate::json_schema::validate::full_match(&h, name)? {
                out.push(s.clone());
            }
        }
        if out.is_empty() && !view.names.iter().any(|n| n == name) {
            out.push(view.additional.clone());
        }
        Ok(out)
    }

    /// [`Compiler::extra_members`] when merged `allOf` branches keep their own view of the keys
    /// ([`KeyView`]): each combination of matched patterns, over this object's and the views'
    /// patterns together, gets the conjunction of every group's constraint (its matched
    /// patterns' schemas, or its `additionalProperties` when none of its patterns matched).
    ///
    /// With `witness`, only the members of every one of these witness kinds (see
    /// [`WitnessKind`]), each value also of their schemas: the witness members of negated
    /// `additionalProperties` / `patternProperties`.
    #[allow(clippy::too_many_arguments)]
    fn extra_members_with_views(
        &mut self,
        names: &[String],
        patterns: &[(Hir, Value, String)],
        map_additional: &Value,
        views: &[KeyView],
        key_lang: Option<&[Hir]>,
        witness: &[&WitnessKind],
        ptr: &str,
    ) -> Result<Option<Expr>> {
        // (key language, schema, group): group 0 is this object's own keywords
        let mut all: Vec<(Hir, Value, usize)> = patterns
            .iter()
            .map(|(h, s, _)| (h.clone(), s.clone(), 0))
            .collect();
        let mut additional = vec![map_additional.clone()];
        for (g, view) in views.iter().enumerate() {
            for (p, s) in &view.patterns {
                let h = self.pattern_hir(&Value::from(p.as_str()), "patternProperties", ptr)?;
                all.push((h, s.clone(), g + 1));
            }
            additional.push(view.additional.clone());
        }
        if all.len() > 6 {
            return Err(schema_error(
                "patternProperties",
                ptr,
                "allOf: more than 6 patternProperties across branches whose \
                 additionalProperties differ are not supported",
            ));
        }
        let mut declared: Vec<Hir> = names.iter().map(|n| Hir::literal(n.as_bytes())).collect();
        for w in witness {
            declared.extend(w.names.iter().map(|n| Hir::literal(n.as_bytes())));
            declared.extend(w.not_patterns.iter().cloned());
        }
        let mut alts = Vec::new();
        for mask in 0u32..(1 << all.len()) {
            let mut pos: Vec<Hir> = key_lang.map(<[Hir]>::to_vec).unwrap_or_default();
            pos.extend(witness.iter().filter_map(|w| w.key.clone()));
            let mut neg = declared.clone();
            let mut schemas = Vec::new();
            let mut hit = vec![false; additional.len()];
            for (i, (h, sch, g)) in all.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    pos.push(h.clone());
                    schemas.push(sch.clone());
                    hit[*g] = true;
                } else {
                    neg.push(h.clone());
                }
            }
            for (g, a) in additional.iter().enumerate() {
                if !hit[g] {
                    schemas.push(a.clone());
                }
            }
            let mut o = Map::new();
            o.insert("allOf".into(), Value::Array(schemas));
            let value = if witness.is_empty() {
                self.schema(&Value::Object(o), &child(ptr, "patternProperties"))?
            } else {
                let mut all = vec![Sub::Json(Value::Object(o))];
                all.extend(witness.iter().map(|w| w.schema.clone()));
                self.compile_sub(&Sub::All(all), &child(ptr, "patternProperties"))?
            };
            let Some(value) = value else {
                continue;
            };
            alts.extend(self.combination_member(&pos, &neg, value, ptr)?);
        }
        Ok(if alts.is_empty() {
            None
        } else {
            Some(alt(alts))
        })
    }

    pub(super) fn props_from(
        &self,
        items: &[(Expr, bool)],
        i: usize,
        first: bool,
        extra: Option<&Expr>,
        eb: (u64, Option<u64>),
    ) -> Expr {
        if i == items.len() {
            return match extra {
                None => Expr::empty(),
                Some(kv) if first => self.list(kv.clone(), eb.0, eb.1),
                Some(kv) => rep(
                    concat(vec![self.comma(), kv.clone()]),
                    eb.0 as u32,
                    eb.1.map(|b| b as u32),
                ),
            };
        }
        let (kv, req) = &items[i];
        if !first {
            // After the first present property every later one is `, kv`, present or not: a
            // plain sequence of optional groups, linear in the number of properties.
            let mut parts = Vec::with_capacity(items.len() - i + 1);
            for (kv, req) in &items[i..] {
                let group = concat(vec![self.comma(), kv.clone()]);
                parts.push(if *req { group } else { rep(group, 0, Some(1)) });
            }
            parts.push(self.props_from(items, items.len(), false, extra, eb));
            return concat(parts);
        }
        let with = concat(vec![
            kv.clone(),
            self.props_from(items, i + 1, false, extra, eb),
        ]);
        if *req {
            with
        } else {
            alt(vec![with, self.props_from(items, i + 1, true, extra, eb)])
        }
    }
}

/// The kind of member a negated `additionalProperties` / `patternProperties` needs one of
/// (see [`SomeExtra`]), its patterns read.
pub(super) struct WitnessKind {
    /// Keys it is not: these names, and keys matching these patterns.
    names: Vec<String>,
    not_patterns: Vec<Hir>,
    /// The pattern its key matches, when it has one.
    key: Option<Hir>,
    schema: Sub,
}

impl WitnessKind {
    /// Whether a member named `name` is of this kind.
    fn admits(&self, name: &str) -> Result<bool> {
        use crate::json_schema::validate::full_match;
        if self.names.iter().any(|n| n == name) {
            return Ok(false);
        }
        for h in &self.not_patterns {
            if full_match(h, name)? {
                return Ok(false);
            }
        }
        match &self.key {
            Some(h) => full_match(h, name),
            None => Ok(true),
        }
    }
}

/// Keywords that only constrain values other than strings: every key satisfies them.
const NOT_FOR_STRINGS: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "items",
    "prefixItems",
    "additionalItems",
    "contains",
    "minContains",
    "maxContains",
    "minItems",
    "maxItems",
    "uniqueItems",
    "unevaluatedItems",
    "properties",
    "patternProperties",
    "additionalProperties",
    "unevaluatedProperties",
    "required",
    "minProperties",
    "maxProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
];

/// Whether a `propertyNames` schema holds a combinator (at its top, or under a `$ref` with
/// siblings) that [`Compiler::key_lang`] reads.
fn needs_key_algebra(pn: &Value) -> bool {
    match pn {
        Value::Object(m) => {
            ["not", "allOf", "anyOf", "oneOf", "if"]
                .iter()
                .any(|k| m.contains_key(*k))
                || (m.contains_key("$ref") && m.len() > 1)
        }
        _ => false,
    }
}

/// The fewest members an object can have with a witness of every kind in `all` (a mask): each
/// required item is written anyway and can take one of its witness branches (`items`: required,
/// the kinds of each branch), an optional item or a witness member (`tails`, any number of
/// them) counts one more. `None` when no choice covers `all`.
fn fewest_with_witnesses(items: &[(bool, Vec<u32>)], tails: &[u32], all: u32) -> Option<u64> {
    let required = items.iter().filter(|i| i.0).count() as u64;
    let costs = items
        .iter()
        .map(|(req, masks)| (u64::from(!req), masks.iter().copied()));
    crate::automata::expr::witness_cover_cost(costs, tails, all).map(|c| c + required)
}

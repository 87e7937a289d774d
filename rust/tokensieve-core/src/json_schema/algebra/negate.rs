//! Negation: the complement of a schema as a union of terms, pushed down to single
//! keywords.

use serde_json::{Map, Value};

use super::{
    absent, arr, built, built_part, check_depth, core_keywords, negation_terms, obj, part,
    required, types, Term,
};
use crate::error::Result;
use crate::json_schema::compile::{
    child, count_in, json_eq, literal_values, schema_error, share_a_value, Compiler,
};
use crate::json_schema::extra::{Built, Extra, SomeExtra, Sub};
use crate::json_schema::keywords::{
    applies_to, value_bits, T_ALL, T_ARRAY, T_FRAC, T_INT, T_OBJECT,
};
use crate::json_schema::number::Dec;

/// Each branch's listed tag values (`None`: a branch the tag does not tell apart), see
/// [`Compiler::tags`].
pub(super) type Tags = Vec<Option<Vec<Value>>>;

/// Whether branches `i` and `j` are both tagged and list no tag value in common: no object
/// matches both.
pub(super) fn tags_apart(tags: Option<&(String, Tags)>, i: usize, j: usize) -> bool {
    match tags.map(|(_, vals)| (&vals[i], &vals[j])) {
        Some((Some(x), Some(y))) => !share_a_value(x, y),
        _ => false,
    }
}

impl<'a> Compiler<'a> {
    /// The complement of `v` (among all JSON values) as a union of terms. No part of it
    /// produces annotations.
    pub(super) fn negate(&mut self, v: &Value, ptr: &str, depth: u32) -> Result<Vec<Term>> {
        crate::budget::check("expanding schema combinators")?;
        check_depth("not", ptr, depth)?;
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
            let branches = arr(any, "anyOf", ptr)?;
            let tags = self.tags(branches, ptr)?;
            let negs = self.negate_each(branches, "anyOf", ptr, depth)?;
            let acc = self.none_of(negs, tags.as_ref(), ptr)?;
            out = self.union(out, acc, ptr)?;
        }
        if let Some(one) = m.get("oneOf") {
            let branches = arr(one, "oneOf", ptr)?;
            let tags = self.tags(branches, ptr)?;
            let negs = self.negate_each(branches, "oneOf", ptr, depth)?;
            let none = self.none_of(negs, tags.as_ref(), ptr)?;
            out = self.union(out, none, ptr)?;
            // two or more branches match (none of a pair whose tags exclude each other)
            let mut pos = Vec::new();
            for (i, b) in branches.iter().enumerate() {
                let bptr = child(&child(ptr, "oneOf"), &i.to_string());
                pos.push(self.expand(b, &bptr, depth + 1)?);
            }
            for (i, a) in pos.iter().enumerate() {
                for (j, b) in pos.iter().enumerate().skip(i + 1) {
                    if tags_apart(tags.as_ref(), i, j) {
                        continue;
                    }
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
                // an object holding the trigger (`required` alone also holds for non-objects,
                // which satisfy every dependency)
                let mut trigger = required(vec![Value::from(name.as_str())]);
                trigger.insert("type".into(), Value::from("object"));
                let has = vec![vec![part(trigger, false)]];
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
        let mut core = core_keywords(m);
        if let Some(Value::Array(vals)) = core.get("enum") {
            if several_compound(vals) {
                // none of several arrays (or objects): "not this one" for each (a union of the
                // ways to differ from it), all of them, beside "none of the other values"
                let (compound, rest): (Vec<Value>, Vec<Value>) = vals
                    .iter()
                    .cloned()
                    .partition(|v| v.is_array() || v.is_object());
                core.remove("enum");
                let eptr = child(ptr, "enum");
                let mut acc: Vec<Term> = if rest.is_empty() {
                    vec![vec![]]
                } else {
                    let o = Value::Object(obj(vec![("enum", Value::Array(rest))]));
                    self.negate(&o, &eptr, depth + 1)?
                };
                for c in distinct(&compound) {
                    let o = Value::Object(obj(vec![("const", c.clone())]));
                    let n = self.negate(&o, &eptr, depth + 1)?;
                    acc = self.product(acc, n, ptr)?;
                }
                out = self.union(out, acc, ptr)?;
            }
        }
        for b in self.negate_core(&core, &Extra::default(), ptr)? {
            out.push(vec![built_part(b)]);
        }
        negation_terms(out, ptr)
    }

    /// The negation of each of `branches` (of the applicator `kw` at `ptr`).
    fn negate_each(
        &mut self,
        branches: &[Value],
        kw: &str,
        ptr: &str,
        depth: u32,
    ) -> Result<Vec<Vec<Term>>> {
        let mut negs = Vec::with_capacity(branches.len());
        for (i, b) in branches.iter().enumerate() {
            negs.push(self.negate(b, &child(&child(ptr, kw), &i.to_string()), depth + 1)?);
        }
        Ok(negs)
    }

    /// No branch matches, from the branches' negations `negs`: their product, or, where
    /// branches are tagged (`tags`, see [`Compiler::tags`], by branch as `negs`), one
    /// alternative per group of tag values instead of a product over the tagged branches: a
    /// value that is not an object, or whose tag is absent or none of the listed values, matches
    /// no tagged branch; one whose tag has a listed value fails the tagged branches listing that
    /// value (their negations alone); the branches that are not tagged are negated beside, as
    /// before. The same language, with terms that grow with the tagged branches rather than
    /// multiply.
    pub(super) fn none_of(
        &mut self,
        negs: Vec<Vec<Term>>,
        tags: Option<&(String, Tags)>,
        ptr: &str,
    ) -> Result<Vec<Term>> {
        let Some((tag, vals)) = tags else {
            let mut acc: Vec<Term> = vec![vec![]];
            for n in negs {
                acc = self.product(acc, n, ptr)?;
            }
            return Ok(acc);
        };
        let with_tag = |tag_schema: Value, require: bool| -> Term {
            let mut props = Map::new();
            props.insert(tag.clone(), tag_schema);
            let mut o = obj(vec![
                ("type", Value::from("object")),
                ("properties", Value::Object(props)),
            ]);
            if require {
                o.insert(
                    "required".into(),
                    Value::Array(vec![Value::from(tag.as_str())]),
                );
            }
            vec![part(o, false)]
        };
        // every listed value, once, with the branches listing it
        let mut listed: Vec<(Value, Vec<usize>)> = Vec::new();
        for (i, vs) in vals.iter().enumerate() {
            for v in vs.iter().flatten() {
                match listed.iter_mut().find(|(w, _)| json_eq(v, w)) {
                    Some((_, bs)) => {
                        if !bs.contains(&i) {
                            bs.push(i);
                        }
                    }
                    None => listed.push((v.clone(), vec![i])),
                }
            }
        }
        let all: Vec<Value> = listed.iter().map(|(v, _)| v.clone()).collect();
        // failing the tagged branches: not an object, or an object whose tag is absent or none
        // of the listed values, or one failing the branches listing its tag's value
        let mut out: Vec<Term> = vec![
            vec![built_part(types(T_ALL & !T_OBJECT))],
            with_tag(
                Value::Object(obj(vec![(
                    "not",
                    Value::Object(obj(vec![("enum", Value::Array(all))])),
                )])),
                false,
            ),
        ];
        // the values grouped by the branches listing them
        let mut groups: Vec<(Vec<usize>, Vec<Value>)> = Vec::new();
        for (v, bs) in listed {
            match groups.iter_mut().find(|(g, _)| *g == bs) {
                Some((_, vs)) => vs.push(v),
                None => groups.push((bs, vec![v])),
            }
        }
        for (bs, vs) in groups {
            let mut acc = vec![with_tag(
                Value::Object(obj(vec![("enum", Value::Array(vs))])),
                true,
            )];
            for &i in &bs {
                acc = self.product(acc, negs[i].clone(), ptr)?;
            }
            out = self.union(out, acc, ptr)?;
        }
        // and failing each branch that is not tagged
        for (i, n) in negs.into_iter().enumerate() {
            if vals[i].is_none() {
                out = self.product(out, n, ptr)?;
            }
        }
        Ok(out)
    }

    /// A tag of `branches`: a property that at least two branches admit only objects holding,
    /// each with a value listed by `const`/`enum` in its `properties` (the branch's own
    /// keywords or its `$ref` target's, which only narrow it), as in a tagged union
    /// (`"type": {"const": "Point"}`). The property's name and each branch's listed values
    /// (`None` for a branch that is not so tagged); `None` when no property tags two branches.
    pub(super) fn tags(&self, branches: &[Value], ptr: &str) -> Result<Option<(String, Tags)>> {
        // the branches admitting only objects
        let mut maps = Vec::with_capacity(branches.len());
        for (i, b) in branches.iter().enumerate() {
            if let Value::Object(m) = self.deref(b, ptr)? {
                if self.type_bits_of(m, ptr).unwrap_or(T_ALL) == T_OBJECT {
                    maps.push((i, m));
                }
            }
        }
        if maps.len() < 2 {
            return Ok(None);
        }
        let listed = |m: &Map<String, Value>, name: &str| -> Result<Option<Vec<Value>>> {
            let required = match m.get("required") {
                Some(Value::Array(r)) => r.iter().any(|x| x.as_str() == Some(name)),
                _ => false,
            };
            let Some(p) = m.get("properties").and_then(|p| p.get(name)) else {
                return Ok(None);
            };
            match self.deref(p, ptr)? {
                Value::Object(pm) if required => Ok(literal_values(pm)),
                _ => Ok(None),
            }
        };
        // the required name tagging the most branches (at least two)
        let mut best: Option<(String, Tags, usize)> = None;
        let mut tried: Vec<&str> = Vec::new();
        for (_, m) in &maps {
            let Some(Value::Array(names)) = m.get("required") else {
                continue;
            };
            for name in names.iter().filter_map(Value::as_str) {
                if tried.contains(&name) || tried.len() >= 64 {
                    continue;
                }
                tried.push(name);
                let mut vals: Tags = vec![None; branches.len()];
                let mut n = 0;
                for (i, m) in &maps {
                    if let Some(vs) = listed(m, name)? {
                        vals[*i] = Some(vs);
                        n += 1;
                    }
                }
                if n >= 2 && best.as_ref().is_none_or(|b| n > b.2) {
                    best = Some((name.to_string(), vals, n));
                }
            }
        }
        Ok(best.map(|(name, vals, _)| (name, vals)))
    }

    /// One keyword map (no applicators) violated: the union of the ways to violate one of its
    /// keywords.
    /// The map's placeholders (`true` where `x` holds a sub-schema, see [`Extra`]) are read
    /// through `x`; `x`'s own constraints are negated too, except the object witnesses and
    /// key views (an error naming them).
    pub(super) fn negate_core(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
    ) -> Result<Vec<Built>> {
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
            let present = vals.iter().fold(0u8, |a, v| a | value_bits(v));
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
            // an array or object other than the one listed: the ways it can differ, each an
            // alternative (with several listed values of one of these types they would have to
            // be intersected: not supported)
            for (bit, is_t) in [
                (T_ARRAY, Value::is_array as fn(&Value) -> bool),
                (T_OBJECT, Value::is_object),
            ] {
                match distinct(vals.iter().filter(|v| is_t(v))).as_slice() {
                    [] => {}
                    [v] => out.extend(differing(v)),
                    _ => {
                        let kw = if m.contains_key("const") {
                            "const"
                        } else {
                            "enum"
                        };
                        self.unsupported(
                            kw,
                            ptr,
                            &format!(
                                "`not` of an `{kw}` holding several arrays or several objects is \
                                 not supported"
                            ),
                        )?;
                        out.push(types(bit));
                    }
                }
            }
        }
        // names of `required`, each an alternative "absent" unless a negated `properties`
        // entry took it in (`merged`)
        let required_names: Vec<&str> = match m.get("required") {
            Some(Value::Array(rs)) => rs.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let mut absent_names: Vec<String> = Vec::new();
        let mut merged: Vec<String> = Vec::new();
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
                let n = count_in(m, k, ptr)?.unwrap_or(0);
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
                    b.x.not_multiple_of.push(num_v()?);
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
                    // an asserted format's language is regular: where it is exact, its strings
                    // are excluded like a negated pattern's (an annotation excludes nothing)
                    let f = v.as_str().unwrap_or_default();
                    if self.asserted_format(f).is_some() {
                        if crate::json_schema::string::EXACT_FORMATS.contains(&f) {
                            let mut b = typed("string", vec![]);
                            b.x.not_formats = vec![v.clone()];
                            out.push(b);
                        } else {
                            self.unsupported(
                                "format",
                                ptr,
                                &format!(
                                    "`not` of the format {f:?} is not supported: its language here \
                                     approximates its definition, so its complement would admit \
                                     strings the definition calls {f} (negated formats: {}; or \
                                     use formats=\"annotate\")",
                                    crate::json_schema::string::EXACT_FORMATS.join(", ")
                                ),
                            )?;
                            out.push(built(obj(vec![("type", Value::from("string"))])));
                        }
                    }
                }
                "required" => {
                    for r in arr(v, "required", ptr)? {
                        let r = r.as_str().ok_or_else(|| {
                            schema_error("required", ptr, "required must be a list of strings")
                        })?;
                        absent_names.push(r.to_string());
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
                        // The other declared names stay declared (any value), in their
                        // order: a value in schema order keeps its order in this term (they
                        // would otherwise be additional properties, which come last).
                        let mut p = declared_any(Some(v));
                        let mut sx = Extra::default();
                        match Sub::from_terms(n) {
                            Sub::Json(v) => {
                                p.insert(name.clone(), v);
                            }
                            sub => {
                                sx.properties.push((name.clone(), sub));
                            }
                        }
                        // A required name: "absent" (from `required`) and "present and
                        // violating" are one alternative, "absent or violating", which the
                        // property's schema alone says (one term where there were two: a
                        // `oneOf` whose branches each require their own property negates
                        // each other branch into one term, not two that multiply).
                        let pairs = if required_names.contains(&name.as_str()) {
                            merged.push(name.clone());
                            vec![("properties", Value::Object(p))]
                        } else {
                            vec![
                                ("required", Value::Array(vec![Value::from(name.as_str())])),
                                ("properties", Value::Object(p)),
                            ]
                        };
                        let mut b = typed("object", pairs);
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
                    // (as compiled: `2.0` is 2, a malformed count an error)
                    let lo = self.count(m, "minContains", ptr)?.unwrap_or(1);
                    let hi = self.count(m, "maxContains", ptr)?;
                    // a placeholder `contains` keeps its schema in `x`
                    let with_contains = |mut b: Built| {
                        b.x.contains = x.contains.clone();
                        b.x.contains_from = x.contains_from;
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
                    b.x.some_extra = vec![SomeExtra {
                        names,
                        patterns,
                        key: None,
                        not_keys: Vec::new(),
                        schema: Sub::from_terms(n),
                    }];
                    out.push(b);
                }
                "propertyNames" => {
                    // some key outside one of the languages every key must be in (any value)
                    for h in self.key_language(v, &child(ptr, k))? {
                        out.push(witnessed(
                            m,
                            SomeExtra {
                                names: Vec::new(),
                                patterns: None,
                                key: None,
                                not_keys: vec![h],
                                schema: Sub::Json(Value::Bool(true)),
                            },
                        ));
                    }
                }
                "patternProperties" => {
                    let pp = v.as_object().ok_or_else(|| {
                        schema_error(
                            "patternProperties",
                            ptr,
                            "patternProperties must be an object",
                        )
                    })?;
                    for (p, s) in pp {
                        let n = self.negate(s, &child(&child(ptr, k), p), 1)?;
                        if n.is_empty() {
                            continue;
                        }
                        // some property whose key matches `p` breaks its schema
                        out.push(witnessed(
                            m,
                            SomeExtra {
                                names: Vec::new(),
                                patterns: None,
                                key: Some(p.clone()),
                                not_keys: Vec::new(),
                                schema: Sub::from_terms(n),
                            },
                        ));
                    }
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
                    out.push(types(applies_to(k)));
                }
            }
        }
        // `required` violated: a name absent (the declared names stay declared, any value, in
        // their order, as in a negated `properties`)
        for r in absent_names.iter().filter(|r| !merged.contains(r)) {
            let mut props = declared_any(m.get("properties"));
            props.insert(r.clone(), Value::Bool(false));
            let mut o = Map::new();
            o.insert("properties".into(), Value::Object(props));
            o.insert("type".into(), Value::from("object"));
            out.push(built(o));
        }
        // The typed constraints (the placeholders' sub-schemas were read above), each
        // violated on its own: a value they exclude, a string matching a pattern none may
        // match, one missing a pattern all must match, a multiple of an excluded divisor, a
        // further `contains` count missed.
        if !x.not_in.is_empty() {
            out.push(built(obj(vec![("enum", Value::Array(x.not_in.clone()))])));
        }
        for p in &x.not_patterns {
            out.push(typed("string", vec![("pattern", p.clone())]));
        }
        for f in &x.not_formats {
            out.push(typed("string", vec![("format", f.clone())]));
        }
        for p in &x.all_patterns {
            let mut b = typed("string", vec![]);
            b.x.not_patterns = vec![p.clone()];
            out.push(b);
        }
        for d in &x.not_multiple_of {
            out.push(typed("number", vec![("multipleOf", d.clone())]));
        }
        for c in &x.more_contains {
            let (v, sub) = match &c.schema {
                Sub::Json(v) => (v.clone(), None),
                s => (Value::Bool(true), Some(s.clone())),
            };
            let mut counts = Vec::new();
            if c.min > 0 {
                counts.push((0, Some(c.min - 1)));
            }
            if let Some(h) = c.max {
                counts.push((h + 1, None));
            }
            for (lo, hi) in counts {
                let mut pairs = vec![("contains", v.clone()), ("minContains", Value::from(lo))];
                if let Some(hi) = hi {
                    pairs.push(("maxContains", Value::from(hi)));
                }
                let mut b = typed("array", pairs);
                b.x.contains = sub.clone();
                b.x.contains_from = (c.from > 0).then_some(c.from);
                out.push(b);
            }
        }
        for (present, what) in [
            (
                !x.some_extra.is_empty(),
                "a negated additionalProperties or patternProperties",
            ),
            (
                !x.key_views.is_empty(),
                "an allOf branch's additionalProperties beside another's patternProperties",
            ),
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
}

/// An object with a witness of `some` (a negated `patternProperties` entry or `propertyNames`):
/// the declared names of the negated map `m` stay declared (any value), in their order, as in a
/// negated `properties`.
fn witnessed(m: &Map<String, Value>, some: SomeExtra) -> Built {
    let props = Value::Object(declared_any(m.get("properties")));
    let mut b = built(obj(vec![
        ("properties", props),
        ("type", Value::from("object")),
    ]));
    b.x.some_extra = vec![some];
    b
}

/// The values of `vals`, each once (compared as JSON values: `1` and `1.0` are one).
fn distinct<'v>(vals: impl IntoIterator<Item = &'v Value>) -> Vec<&'v Value> {
    let mut out: Vec<&Value> = Vec::new();
    for v in vals {
        if !out.iter().any(|d| json_eq(d, v)) {
            out.push(v);
        }
    }
    out
}

/// Whether `vals` lists two different arrays or two different objects (their negation is a
/// conjunction, built by [`Compiler::negate`]).
fn several_compound(vals: &[Value]) -> bool {
    [Value::is_array as fn(&Value) -> bool, Value::is_object]
        .iter()
        .any(|is_t| distinct(vals.iter().filter(|v| is_t(v))).len() > 1)
}

/// The arrays or objects other than `v` (one of them), as alternatives: another length, or an
/// item that differs (`not` of its `const`, so nested values are compared the same way);
/// another property, a property missing, or one whose value differs.
fn differing(v: &Value) -> Vec<Built> {
    let not_const = |x: &Value| {
        obj(vec![(
            "not",
            Value::Object(obj(vec![("const", x.clone())])),
        )])
    };
    let typed = |t: &str, mut pairs: Vec<(&str, Value)>| {
        pairs.push(("type", Value::from(t)));
        built(obj(pairs))
    };
    let mut out = Vec::new();
    match v {
        Value::Array(items) => {
            let n = items.len() as u64;
            out.push(typed("array", vec![("minItems", Value::from(n + 1))]));
            if n > 0 {
                out.push(typed("array", vec![("maxItems", Value::from(n - 1))]));
            }
            for (i, x) in items.iter().enumerate() {
                let mut prefix = vec![Value::Bool(true); i];
                prefix.push(Value::Object(not_const(x)));
                out.push(typed(
                    "array",
                    vec![
                        ("minItems", Value::from(i as u64 + 1)),
                        ("prefixItems", Value::Array(prefix)),
                    ],
                ));
            }
        }
        Value::Object(members) => {
            // every alternative declares the listed names in their order (any value), so that
            // in schema order an object keeps the listed order
            let names: Vec<String> = members.keys().cloned().collect();
            let with = |k: &str, s: Value| {
                let mut p: Map<String, Value> = names
                    .iter()
                    .map(|n| (n.clone(), Value::Bool(true)))
                    .collect();
                p.insert(k.to_string(), s);
                Value::Object(p)
            };
            // a property other than the listed ones, any value
            let all: Map<String, Value> = names
                .iter()
                .map(|n| (n.clone(), Value::Bool(true)))
                .collect();
            let mut other = typed("object", vec![("properties", Value::Object(all))]);
            other.x.some_extra = vec![SomeExtra {
                names: names.clone(),
                patterns: None,
                key: None,
                not_keys: Vec::new(),
                schema: Sub::Json(Value::Bool(true)),
            }];
            out.push(other);
            for (k, x) in members {
                out.push(typed(
                    "object",
                    vec![("properties", with(k, Value::Bool(false)))],
                ));
                out.push(typed(
                    "object",
                    vec![
                        ("required", Value::Array(vec![Value::from(k.as_str())])),
                        ("properties", with(k, Value::Object(not_const(x)))),
                    ],
                ));
            }
        }
        _ => {}
    }
    out
}

/// The names a `properties` value declares, in order, each allowing any value (the terms of
/// a negation keep them declared, so a value keeps its schema order).
fn declared_any(properties: Option<&Value>) -> Map<String, Value> {
    match properties {
        Some(Value::Object(p)) => p.keys().map(|k| (k.clone(), Value::Bool(true))).collect(),
        _ => Map::new(),
    }
}

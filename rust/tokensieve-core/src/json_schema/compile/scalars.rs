//! `const`/`enum`, `type`, numbers and strings (lengths, patterns, formats).

use regex_syntax::hir::Hir;
use serde_json::{Map, Value};

use super::{json_eq, schema_error, Compiler, MAX_COUNT, MAX_WEIGHT};
use crate::automata::expr::{alt, alt_opt, concat, lit, Expr};
use crate::automata::hir as hirs;
#[cfg(test)]
use crate::automata::hir::class;
use crate::automata::spell::{any_char, dot_all, encode, spell_any_of, spell_char, spell_not};
use crate::error::{Error, Result};
use crate::json_schema::extra::Extra;
use crate::json_schema::keywords::{
    type_bits, T_ALL, T_ARRAY, T_BOOL, T_FRAC, T_INT, T_NULL, T_OBJECT, T_STRING,
};
use crate::json_schema::multiple::{multiple_of_spelled, NumLang};
use crate::json_schema::number::{number_literal, number_range, Bound, Dec};
use crate::json_schema::options::{Formats, PropertyOrder};
use crate::json_schema::string::{char_len, search_form, translate_ecma};

/// Automaton nodes one character of a string literal costs, at most (all its JSON spellings).
const NODES_PER_CHAR: u64 = 8;
/// ... and one digit of a number literal.
const NODES_PER_DIGIT: u64 = 2;

/// Automaton nodes a literal value costs, about (nesting is bounded by
/// `resolve::MAX_DOCUMENT_DEPTH`); known before the literal is built.
fn literal_nodes(v: &Value) -> u64 {
    let chars = |s: &str| NODES_PER_CHAR.saturating_mul(s.chars().count() as u64);
    match v {
        Value::String(s) => chars(s),
        Value::Number(n) => {
            let d = Dec::from_json(n);
            NODES_PER_DIGIT * (1 + d.int.len() + d.frac.len()) as u64
        }
        Value::Array(xs) => xs.iter().map(literal_nodes).fold(1, u64::saturating_add),
        Value::Object(m) => m
            .iter()
            .map(|(k, x)| chars(k).saturating_add(literal_nodes(x)))
            .fold(1, u64::saturating_add),
        Value::Null | Value::Bool(_) => 1,
    }
}

impl<'a> Compiler<'a> {
    // ---- const / enum ------------------------------------------------------------------

    pub(super) fn values(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
    ) -> Result<Option<Expr>> {
        let mut vals: Vec<Value> = match m.get("enum") {
            Some(Value::Array(v)) => v.clone(),
            Some(_) => return Err(schema_error("enum", ptr, "enum must be an array")),
            None => vec![],
        };
        if let Some(c) = m.get("const") {
            if m.contains_key("enum") {
                vals.retain(|v| json_eq(v, c));
            } else {
                vals = vec![c.clone()];
            }
        }
        // Keep the values that satisfy every sibling keyword (checked on the value itself).
        // Every value is in `enum` and equals `const` already: leaving them out keeps the check
        // linear in the number of members.
        let mut siblings = m.clone();
        siblings.remove("enum");
        siblings.remove("const");
        let mut kept = Vec::new();
        let mut every = crate::budget::Every::default();
        for v in vals {
            every.tick("checking const/enum members")?;
            if self.validates_map(&v, &siblings, x, ptr, 0)? {
                kept.push(v);
            }
        }
        // Strings share one trie (an enum of many strings costs its distinct prefixes). The
        // size of every literal is known before anything is built: one too large for the
        // automaton budget is refused without allocating it.
        let strings: Vec<&str> = kept.iter().filter_map(Value::as_str).collect();
        let too_big = |nodes: u64| {
            Error::Budget(format!(
                "the const/enum values at #{ptr} need an automaton of about {nodes} nodes \
                 (limit {MAX_WEIGHT}); a grammar cannot hold literals this large"
            ))
        };
        let mut alts: Vec<Expr> = Vec::new();
        let mut nodes = 0u64;
        if !strings.is_empty() {
            let room = (MAX_WEIGHT / NODES_PER_CHAR) as usize;
            let trie = spell_any_of(&strings, room, self.opts.literal_spelling)
                .map_err(|chars| too_big(NODES_PER_CHAR.saturating_mul(chars as u64)))?;
            alts.push(concat(vec![lit("\""), trie.into(), lit("\"")]));
            nodes = alts[0].weight();
        }
        for v in kept.iter().filter(|v| !v.is_string()) {
            nodes = nodes.saturating_add(literal_nodes(v));
            if nodes > MAX_WEIGHT {
                return Err(too_big(nodes));
            }
            alts.push(self.literal(v));
        }
        Ok(if alts.is_empty() {
            None
        } else {
            Some(alt(alts))
        })
    }

    /// A string written in the schema (a property name, a `const`/`enum` string), without its
    /// quotes, spelled as [`JsonSchemaOptions::literal_spelling`] says.
    ///
    /// [`JsonSchemaOptions::literal_spelling`]: crate::json_schema::JsonSchemaOptions
    pub(super) fn spell_literal(&self, s: &str) -> Expr {
        self.opts.literal_spelling.str(s).into()
    }

    pub(super) fn literal(&self, v: &Value) -> Expr {
        match v {
            Value::Null => lit("null"),
            Value::Bool(true) => lit("true"),
            Value::Bool(false) => lit("false"),
            Value::Number(n) => number_literal(&Dec::from_json(n)).into(),
            Value::String(s) => concat(vec![lit("\""), self.spell_literal(s), lit("\"")]),
            Value::Array(xs) => {
                let mut items = Vec::new();
                for (i, x) in xs.iter().enumerate() {
                    if i > 0 {
                        items.push(self.comma());
                    }
                    items.push(self.literal(x));
                }
                self.wrap("[", concat(items), "]")
            }
            Value::Object(m) if m.len() > 1 && self.opts.property_order == PropertyOrder::Any => {
                let items = m
                    .iter()
                    .map(|(k, x)| {
                        let kv = concat(vec![
                            lit("\""),
                            self.spell_literal(k),
                            lit("\""),
                            self.colon(),
                            self.literal(x),
                        ]);
                        (kv, true)
                    })
                    .collect();
                let body = crate::automata::expr::member_set(items, self.comma(), None);
                self.wrap("{", body, "}")
            }
            Value::Object(m) => {
                let mut items = Vec::new();
                for (i, (k, x)) in m.iter().enumerate() {
                    if i > 0 {
                        items.push(self.comma());
                    }
                    items.push(concat(vec![lit("\""), self.spell_literal(k), lit("\"")]));
                    items.push(self.colon());
                    items.push(self.literal(x));
                }
                self.wrap("{", concat(items), "}")
            }
        }
    }

    // ---- typed values ------------------------------------------------------------------

    pub(in crate::json_schema) fn type_bits_of(
        &self,
        m: &Map<String, Value>,
        ptr: &str,
    ) -> Result<u8> {
        let bad = || schema_error("type", ptr, "type must be a type name or a list of them");
        let mut bits = match m.get("type") {
            None => return Ok(T_ALL),
            Some(Value::String(t)) => type_bits(t).ok_or_else(bad)?,
            Some(Value::Array(ts)) => {
                let mut b = 0;
                for t in ts {
                    b |= t.as_str().and_then(type_bits).ok_or_else(bad)?;
                }
                b
            }
            Some(_) => return Err(bad()),
        };
        if m.get("nullable") == Some(&Value::Bool(true)) {
            bits |= T_NULL;
        }
        Ok(bits)
    }

    /// [`Compiler::type_bits_of`] narrowed by the typed constraints `x`.
    pub(in crate::json_schema) fn type_bits_x(
        &self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
    ) -> Result<u8> {
        let bits = self.type_bits_of(m, ptr)?;
        Ok(if x.fraction_only { bits & !T_INT } else { bits })
    }

    pub(super) fn typed(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
    ) -> Result<Option<Expr>> {
        let bits = self.type_bits_x(m, x, ptr)?;
        if bits == T_ALL && x.is_empty() && !m.keys().any(|k| Self::is_validity(k) && k != "type") {
            return Ok(Some(self.any_value(self.opts.max_nesting_depth)?));
        }
        let mut alts = Vec::new();
        if bits & T_NULL != 0 {
            alts.push(Some(lit("null")));
        }
        if bits & T_BOOL != 0 {
            alts.push(Some(alt(vec![lit("true"), lit("false")])));
        }
        let nums = if bits & T_INT != 0 && bits & T_FRAC != 0 {
            Some(self.number(m, x, ptr, false)?)
        } else if bits & T_INT != 0 {
            Some(self.number(m, x, ptr, true)?)
        } else if bits & T_FRAC != 0 {
            Some(self.fraction(m, x, ptr)?)
        } else {
            None
        };
        if let Some(n) = nums {
            alts.push(num_expr(n, ptr)?);
        }
        if bits & T_STRING != 0 {
            alts.push(self.string(m, x, ptr)?);
        }
        if bits & T_ARRAY != 0 {
            alts.push(self.array(m, x, ptr)?);
        }
        if bits & T_OBJECT != 0 {
            alts.push(self.object(m, x, ptr)?);
        }
        Ok(alt_opt(alts))
    }

    pub(super) fn num(&self, m: &Map<String, Value>, k: &str, ptr: &str) -> Result<Option<Dec>> {
        match m.get(k) {
            None => Ok(None),
            // draft 4: `exclusiveMinimum`/`exclusiveMaximum` are flags on the plain bounds
            Some(Value::Bool(_)) if k.starts_with("exclusive") => Ok(None),
            Some(Value::Number(n)) => Ok(Some(Dec::from_json(n))),
            Some(_) => Err(schema_error(k, ptr, format!("{k} must be a number"))),
        }
    }

    /// The strongest lower and upper bounds (draft-4 boolean and 2020-12 numeric forms).
    pub(super) fn bounds(
        &self,
        m: &Map<String, Value>,
        ptr: &str,
    ) -> Result<(Option<Bound>, Option<Bound>)> {
        let ex_bool = |k: &str| m.get(k) == Some(&Value::Bool(true));
        let mut lo: Option<Bound> = None;
        let mut hi: Option<Bound> = None;
        let mut lower = |b: Bound| {
            if lo
                .as_ref()
                .is_none_or(|l| b.value > l.value || (b.value == l.value && !b.inclusive))
            {
                lo = Some(b);
            }
        };
        if let Some(v) = self.num(m, "minimum", ptr)? {
            lower(Bound {
                value: v,
                inclusive: !ex_bool("exclusiveMinimum"),
            });
        }
        if let Some(v) = self.num(m, "exclusiveMinimum", ptr)? {
            lower(Bound {
                value: v,
                inclusive: false,
            });
        }
        let mut upper = |b: Bound| {
            if hi
                .as_ref()
                .is_none_or(|h| b.value < h.value || (b.value == h.value && !b.inclusive))
            {
                hi = Some(b);
            }
        };
        if let Some(v) = self.num(m, "maximum", ptr)? {
            upper(Bound {
                value: v,
                inclusive: !ex_bool("exclusiveMaximum"),
            });
        }
        if let Some(v) = self.num(m, "exclusiveMaximum", ptr)? {
            upper(Bound {
                value: v,
                inclusive: false,
            });
        }
        Ok((lo, hi))
    }

    /// Non-integral numbers (from `not: {type: integer}`), spelled with a fraction part that is
    /// not all zeros and no exponent.
    pub(super) fn fraction(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
    ) -> Result<Option<NumLang>> {
        let int = hirs::alt(vec![
            hirs::lit("0"),
            hirs::concat(vec![hirs::digits(1, 9), hirs::star(hirs::digits(0, 9))]),
        ]);
        let frac = hirs::concat(vec![
            hirs::opt(hirs::lit("-")),
            int,
            hirs::lit("."),
            hirs::star(hirs::digits(0, 9)),
            hirs::digits(1, 9),
            hirs::star(hirs::digits(0, 9)),
        ]);
        let (lo, hi) = self.bounds(m, ptr)?;
        if lo.is_none()
            && hi.is_none()
            && !m.contains_key("multipleOf")
            && x.not_multiple_of.is_empty()
        {
            return Ok(Some(NumLang::Hir(frac)));
        }
        // the bounded (or multipleOf-constrained) numbers, intersected with the fractions:
        // number text is ASCII, so the character algebra applies directly
        let Some(nums) = self.number(m, x, ptr, false)? else {
            return Ok(None);
        };
        match nums.and(&frac) {
            Ok(n) => Ok(n),
            Err(e) => {
                self.unsupported("type", ptr, &e)?;
                self.number(m, x, ptr, false)
            }
        }
    }

    pub(super) fn number(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
        integer: bool,
    ) -> Result<Option<NumLang>> {
        let (lo, hi) = self.bounds(m, ptr)?;
        let divisors = self.divisors(m, x, ptr, integer)?;
        let range = || number_range(lo.as_ref(), hi.as_ref(), integer).map(NumLang::Hir);
        if divisors.is_empty() {
            return Ok(range());
        }
        match multiple_of_spelled(&divisors, lo.as_ref(), hi.as_ref(), integer) {
            Ok(n) => Ok(n),
            Err(e) => {
                self.unsupported("multipleOf", ptr, &e)?;
                Ok(range())
            }
        }
    }

    /// The conditions on a number's divisors, as `(divisor, negated)`: the map's `multipleOf`
    /// (none for `multipleOf: 1` on integers), then the negated ones from `not`.
    pub(in crate::json_schema) fn divisors(
        &self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
        integer: bool,
    ) -> Result<Vec<(Dec, bool)>> {
        let one = Dec::parse("1").expect("literal");
        let mut divisors: Vec<(Dec, bool)> = self
            .num(m, "multipleOf", ptr)?
            .filter(|d| !(integer && *d == one))
            .map(|d| (d, false))
            .into_iter()
            .collect();
        for v in &x.not_multiple_of {
            let Value::Number(n) = v else {
                return Err(schema_error(
                    "multipleOf",
                    ptr,
                    "multipleOf must be a number",
                ));
            };
            divisors.push((Dec::from_json(n), true));
        }
        Ok(divisors)
    }

    pub(in crate::json_schema) fn count(
        &self,
        m: &Map<String, Value>,
        k: &str,
        ptr: &str,
    ) -> Result<Option<u64>> {
        count_in(m, k, ptr)
    }

    pub(super) fn big(&self, k: &str, ptr: &str, n: u64) -> Result<()> {
        if n > MAX_COUNT {
            return Err(Error::Budget(format!(
                "{k}={n} at #{ptr} is larger than the counted-repeat limit {MAX_COUNT}: exact \
                 counting needs an automaton that grows with the bound"
            )));
        }
        Ok(())
    }

    /// The decoded-string language of `format` when formats are asserted and it is a known
    /// one; `None` when it constrains nothing.
    pub(in crate::json_schema) fn asserted_format(&self, name: &str) -> Option<Hir> {
        if self.opts.formats != Formats::Assert {
            return None;
        }
        crate::json_schema::string::format_hir(name)
    }

    /// The decoded-string language of an ECMA pattern (search semantics).
    pub(in crate::json_schema) fn pattern_hir(
        &self,
        p: &Value,
        kw: &str,
        ptr: &str,
    ) -> Result<Hir> {
        let p = p
            .as_str()
            .ok_or_else(|| schema_error(kw, ptr, "pattern must be a string"))?;
        pattern_language(p).map_err(|e| schema_error("pattern", ptr, e))
    }

    /// [`pattern_parts`] of a schema's `pattern` value.
    fn pattern_parts(&self, p: &Value, ptr: &str) -> Result<(Vec<Hir>, Vec<Hir>)> {
        let text = p
            .as_str()
            .ok_or_else(|| schema_error("pattern", ptr, "pattern must be a string"))?;
        pattern_parts(text).map_err(|e| schema_error("pattern", ptr, e))
    }

    pub(super) fn string(
        &mut self,
        m: &Map<String, Value>,
        x: &Extra,
        ptr: &str,
    ) -> Result<Option<Expr>> {
        let min = clamped(self.count(m, "minLength", ptr)?.unwrap_or(0));
        let max = self.count(m, "maxLength", ptr)?.map(clamped);
        if max.is_some_and(|mx| mx < min) {
            return Ok(None);
        }
        // decoded-string languages that must hold (pos) and must not (neg)
        let mut pos: Vec<(Hir, &str)> = Vec::new();
        let mut neg: Vec<Hir> = Vec::new();
        for p in m.get("pattern").into_iter().chain(&x.all_patterns) {
            let (yes, no) = self.pattern_parts(p, ptr)?;
            pos.extend(yes.into_iter().map(|h| (h, "pattern")));
            neg.extend(no);
        }
        if let Some(f) = m.get("format") {
            let f = f
                .as_str()
                .ok_or_else(|| schema_error("format", ptr, "format must be a string"))?;
            if let Some(h) = self.asserted_format(f) {
                pos.push((h, "format"));
            }
        }
        for p in &x.not_patterns {
            neg.push(self.pattern_hir(p, "pattern", ptr)?);
        }
        for f in &x.not_formats {
            if let Some(h) = f.as_str().and_then(|f| self.asserted_format(f)) {
                neg.push(h);
            }
        }
        let names: Vec<Vec<char>> = x
            .not_in
            .iter()
            .filter_map(Value::as_str)
            .map(|s| s.chars().collect())
            .collect();
        let content = if pos.is_empty() && neg.is_empty() && names.is_empty() {
            // A large bound is a counter (`automata::hir::counts`), never copies. Counts are
            // 32-bit: bounds past 4,294,967,295 characters act as that many (docs/limits.md).
            Some(hirs::rep(any_char(), clamp_count(min), max.map(clamp_count)).into())
        } else if pos.is_empty() && neg.is_empty() && min == 0 && max.is_none() {
            Some(spelled_not_in(&names))
        } else {
            // a single pattern or format whose lengths fit (or are one repeated class)
            let mut fast = None;
            if pos.len() == 1 && neg.is_empty() && names.is_empty() {
                let (h, what) = &pos[0];
                let (lo, hi) = char_len(h);
                let fits = lo >= min && max.is_none_or(|mx| hi.is_some_and(|h| h <= mx));
                let disjoint = hi.is_some_and(|h| h < min) || max.is_some_and(|mx| lo > mx);
                if fits {
                    // a lone format's spelled form is kept process-wide, like its language
                    let name = m.get("format").and_then(Value::as_str);
                    let spelled = match name {
                        Some(f) if *what == "format" => {
                            crate::json_schema::string::format_spelled(f)
                                .unwrap_or_else(|| encode(h))
                        }
                        _ => encode(h),
                    };
                    fast = Some(Some(
                        spelled.map_err(|e| schema_error(what, ptr, e))?.into(),
                    ));
                } else if disjoint {
                    fast = Some(None);
                } else if let Some(h2) = narrow_repetition(h, min, max) {
                    fast = Some(Some(
                        encode(&h2).map_err(|e| schema_error(what, ptr, e))?.into(),
                    ));
                }
            }
            match fast {
                Some(c) => c,
                None => {
                    // the decoded languages that must and must not hold, excluded names as
                    // literals taken away
                    let mut p: Vec<Hir> = pos.into_iter().map(|(h, _)| h).collect();
                    for n in &names {
                        neg.push(Hir::literal(n.iter().collect::<String>().into_bytes()));
                    }
                    match counted_lengths(&p, &neg, min, max) {
                        Some(c) => c,
                        None => {
                            // the general case: intersect and subtract the decoded languages
                            // (a length bound is a factor of the product automaton here)
                            self.big("minLength", ptr, min)?;
                            if let Some(mx) = max {
                                self.big("maxLength", ptr, mx)?;
                            }
                            if min > 0 || max.is_some() {
                                p.push(hirs::rep(dot_all(), min as u32, max.map(|x| x as u32)));
                            }
                            let kw = if m.contains_key("pattern") {
                                "pattern"
                            } else {
                                "format"
                            };
                            match spelled_combination(&p, &neg) {
                                Ok(c) => c,
                                Err(e) => {
                                    self.unsupported(kw, ptr, &e)?;
                                    Some(hirs::star(any_char()).into())
                                }
                            }
                        }
                    }
                }
            }
        };
        Ok(content.map(|c| concat(vec![lit("\""), c, lit("\"")])))
    }
}

/// Length bounds past [`hirs::COUNT_FROM`] beside other string constraints (`pos` must hold,
/// `neg` must not: formats, patterns, excluded names): their character automaton with a counter of
/// characters beside it (`expr::counted_char_dfa`), instead of a product automaton with a state
/// per state and length. `None` when that automaton cannot be built so (the product is tried
/// then, and reports what fails); `Some(None)` when no string is allowed.
fn counted_lengths(pos: &[Hir], neg: &[Hir], min: u64, max: Option<u64>) -> Option<Option<Expr>> {
    if !hirs::counting() || max.unwrap_or(min) <= u64::from(hirs::COUNT_FROM) {
        return None;
    }
    match crate::automata::strlang::combined_dfa(pos, neg) {
        Ok(None) => Some(None),
        Ok(Some(d)) => {
            crate::automata::expr::counted_char_dfa(&d, clamp_count(min), max.map(clamp_count))
        }
        Err(_) => None,
    }
}

/// The count keyword `k` of map `m` (`2.0` is 2); `None` when absent, an error naming it when
/// it is not a non-negative integer.
pub(in crate::json_schema) fn count_in(
    m: &Map<String, Value>,
    k: &str,
    ptr: &str,
) -> Result<Option<u64>> {
    match m.get(k) {
        None => Ok(None),
        Some(v) => match v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                .map(|f| f as u64)
        }) {
            Some(n) => Ok(Some(n)),
            None => Err(schema_error(
                k,
                ptr,
                format!("{k} must be a non-negative integer"),
            )),
        },
    }
}

/// A count bound as the 32-bit count an automaton keeps (larger bounds act as the largest).
pub(super) fn clamp_count(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A count bound read from a schema, kept within what [`clamp_count`] holds.
pub(super) fn clamped(n: u64) -> u64 {
    u64::from(clamp_count(n))
}

/// JSON string content (every spelling) whose decoded value is in `pos₁ ∩ … ∩ ¬neg₁ ∩ …`;
/// `None` when no string is. The minimal DFA is built straight into automaton states when it
/// can be (its regular expression can be exponentially larger, e.g. a format with a length
/// bound); otherwise it is turned back into an expression and spelled.
pub(super) fn spelled_combination(
    pos: &[Hir],
    neg: &[Hir],
) -> std::result::Result<Option<Expr>, String> {
    // One language and nothing to take away (a lone `patternProperties` key): spelled as it
    // is, as a lone `pattern` of a string value is, so that a large counted repetition in it
    // stays a counter instead of a state per count.
    if let ([h], []) = (pos, neg) {
        if h.properties().minimum_len().is_some() {
            return encode(h).map(|e| Some(e.into()));
        }
    }
    match crate::automata::strlang::combined_dfa(pos, neg)? {
        None => Ok(None),
        Some(d) => match crate::automata::expr::char_dfa(&d) {
            Some(states) => Ok(Some(states)),
            None => match crate::automata::strlang::combine(pos, neg)? {
                Some(h) => encode(&h).map(|e| Some(e.into())),
                None => Ok(None),
            },
        },
    }
}

/// The look-aheads at the very beginning of pattern `p` (after its `^`: `^(?!X)(?=Y)rest`) as
/// (negative, X) pairs, and the rest of the pattern after them; no pairs when `p` does not start
/// that way. X is the group's text up to its matching parenthesis (escapes and classes skipped).
pub(crate) fn leading_lookaheads(p: &str) -> (Vec<(bool, &str)>, &str) {
    let mut out = Vec::new();
    let Some(mut rest) = p.strip_prefix('^') else {
        return (out, p);
    };
    loop {
        let negative = if rest.starts_with("(?!") {
            true
        } else if rest.starts_with("(?=") {
            false
        } else {
            break;
        };
        // the group's closing parenthesis: back at the depth before its `(`
        let Some(end) = group_structure(&rest[3..], 1).find(|&(_, b, d)| b == b')' && d == 0)
        else {
            break; // not closed: the parser reports it
        };
        out.push((negative, &rest[3..3 + end.0]));
        rest = &rest[3 + end.0 + 1..];
    }
    // `^(?!X)a|b`: the look-ahead belongs to the first alternative only; not this form
    let top_level_bar = group_structure(rest, 0).any(|(_, b, d)| b == b'|' && d == 0);
    if out.is_empty() || top_level_bar {
        (Vec::new(), p)
    } else {
        (out, rest)
    }
}

/// The bytes of pattern text `p` that give it structure — outside character classes and not
/// escaped — with their offsets and the group depth after each, starting at `depth`.
fn group_structure(p: &str, depth: i32) -> impl Iterator<Item = (usize, u8, i32)> + '_ {
    let b = p.as_bytes();
    let (mut i, mut depth, mut class) = (0usize, depth, false);
    std::iter::from_fn(move || {
        while i < b.len() {
            let (at, c) = (i, b[i]);
            i += 1;
            match c {
                b'\\' => i += 1,
                b'[' if !class => class = true,
                b']' if class => class = false,
                _ if class => {}
                b'(' => {
                    depth += 1;
                    return Some((at, c, depth));
                }
                b')' => {
                    depth -= 1;
                    return Some((at, c, depth));
                }
                _ => return Some((at, c, depth)),
            }
        }
        None
    })
}

/// A string's `pattern` as languages the string must be in and languages it must not be in:
/// the pattern itself ([`pattern_language`]), or, when it starts with look-aheads at its
/// beginning (`^(?!X)`, `^(?=X)`, several in a row), the pattern without them, each `(?=X)`
/// adding `^X` (a string starting with X) to the first list and each `(?!X)` to the second:
/// the same language as the search, exact.
pub(crate) fn pattern_parts(text: &str) -> std::result::Result<(Vec<Hir>, Vec<Hir>), String> {
    let (heads, rest) = leading_lookaheads(text);
    if heads.is_empty() {
        return Ok((vec![pattern_language(text)?], Vec::new()));
    }
    let mut pos = vec![pattern_language(&format!("^{rest}"))?];
    let mut neg = Vec::new();
    for (negative, x) in heads {
        let h = pattern_language(&format!("^(?:{x})"))?;
        if negative {
            neg.push(h);
        } else {
            pos.push(h);
        }
    }
    Ok((pos, neg))
}

/// The decoded-string language of an ECMA pattern (search semantics); the error names the
/// pattern.
pub(crate) fn pattern_language(p: &str) -> std::result::Result<Hir, String> {
    let t = translate_ecma(p).map_err(|e| format!("{p:?}: {e}"))?;
    let h = crate::regex::parse(&t, 250).map_err(|e| format!("{p:?}: {e}"))?;
    let searched = search_form(&h);
    if !crate::json_schema::string::has_look(&searched) {
        return Ok(searched);
    }
    // anchors inside the pattern
    crate::json_schema::string::anchored_search(&h).map_err(|e| format!("{p:?}: {e}"))
}

/// Any decoded string except the given ones (a trie walk: leave the trie at the first character
/// that no name continues with).
#[cfg(test)]
pub(crate) fn not_in(names: &[Vec<char>]) -> Hir {
    let any = dot_all();
    if names.is_empty() {
        return hirs::star(any);
    }
    let mut parts = Vec::new();
    if !names.iter().any(|n| n.is_empty()) {
        parts.push(Hir::empty());
    }
    let mut firsts: Vec<char> = names.iter().filter_map(|n| n.first().copied()).collect();
    firsts.sort_unstable();
    firsts.dedup();
    for &c in &firsts {
        let tails: Vec<Vec<char>> = names
            .iter()
            .filter(|n| n.first() == Some(&c))
            .map(|n| n[1..].to_vec())
            .collect();
        parts.push(hirs::concat(vec![class(&[(c, c)]), not_in(&tails)]));
    }
    // characters no name starts with here
    let mut ranges = Vec::new();
    let mut next = 0u32;
    for &c in &firsts {
        let c = c as u32;
        if c > next {
            push_range(&mut ranges, next, c - 1);
        }
        next = c + 1;
    }
    if next <= 0x10FFFF {
        push_range(&mut ranges, next, 0x10FFFF);
    }
    if !ranges.is_empty() {
        parts.push(hirs::concat(vec![class(&ranges), hirs::star(any)]));
    }
    hirs::alt(parts)
}

/// The JSON spellings of every string but `names` (decoded characters), ready to stand between
/// quotes: the same language as `encode(&not_in(names))`, built with one shared copy of the
/// "any characters" tail instead of one per position in the names (see
/// [`crate::automata::expr::with_tail`]).
pub(crate) fn spelled_not_in(names: &[Vec<char>]) -> Expr {
    // (the rests of the names as slices: a copy per level would be quadratic in a long name)
    fn node(names: &[&[char]]) -> Expr {
        let mut parts = Vec::new();
        if !names.iter().any(|n| n.is_empty()) {
            parts.push(Expr::empty());
        }
        let mut firsts: Vec<char> = names.iter().filter_map(|n| n.first().copied()).collect();
        firsts.sort_unstable();
        firsts.dedup();
        for &c in &firsts {
            let tails: Vec<&[char]> = names
                .iter()
                .filter(|n| n.first() == Some(&c))
                .map(|n| &n[1..])
                .collect();
            parts.push(concat(vec![spell_char(c).into(), node(&tails)]));
        }
        parts.push(concat(vec![spell_not(&firsts).into(), Expr::Jump]));
        alt(parts)
    }
    if names.is_empty() {
        return hirs::star(any_char()).into();
    }
    if let Some(x) = crate::automata::expr::ascii_names_excluded(names) {
        return x;
    }
    let names: Vec<&[char]> = names.iter().map(Vec::as_slice).collect();
    crate::automata::expr::with_tail(node(&names), hirs::star(any_char()).into())
}

#[cfg(test)]
pub(super) fn push_range(out: &mut Vec<(char, char)>, a: u32, b: u32) {
    // skip the surrogate block, which holds no characters
    for (x, y) in [(a, b.min(0xD7FF)), (a.max(0xE000), b)] {
        if x <= y {
            if let (Some(x), Some(y)) = (char::from_u32(x), char::from_u32(y)) {
                out.push((x, y));
            }
        }
    }
}

/// If `h` is one character class repeated (`[a-z]{2,}`), intersect its count with the bounds.
pub(super) fn narrow_repetition(h: &Hir, min: u64, max: Option<u64>) -> Option<Hir> {
    use regex_syntax::hir::HirKind;
    let HirKind::Repetition(r) = h.kind() else {
        return None;
    };
    if char_len(&r.sub) != (1, Some(1)) {
        return None;
    }
    let lo = u64::from(r.min).max(min);
    let hi = match (r.max.map(u64::from), max) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if hi.is_some_and(|h| h < lo) {
        return Some(Hir::fail());
    }
    Some(hirs::rep(
        (*r.sub).clone(),
        clamp_count(lo),
        hi.map(clamp_count),
    ))
}

/// A number language as an expression (a DFA kept as one reads raw bytes).
fn num_expr(n: Option<NumLang>, ptr: &str) -> Result<Option<Expr>> {
    match n {
        None => Ok(None),
        Some(n) => n.into_expr().map(Some).ok_or_else(|| {
            schema_error(
                "multipleOf",
                ptr,
                "the numbers' automaton could not be read as number text",
            )
        }),
    }
}

//! The schema walker: JSON Schema (a `serde_json::Value`) → HIR over JSON text.
//!
//! Every function returns `Ok(None)` for an empty language (no JSON value satisfies that part:
//! `false`, an empty interval, or a `$ref` cut at the recursion limit) so that optional
//! properties, `anyOf` branches and array tails can be dropped exactly, and a required
//! property that was cut by the recursion limit can be reported instead of silently lost.

use regex_syntax::hir::Hir;
use serde_json::{Map, Value};

use super::charlang::{Lang, LangBudget};
use super::hirs::{alt, alt_opt, class, concat, lit, nodes, opt, rep, star, weight};
use super::number::{any_number, number_literal, number_range, Bound, Dec};
use super::options::{AdditionalProperties, Formats, JsonSchemaOptions, OneOf, Whitespace};
use super::string::{
    any_char, char_len, dot_all, encode, format_regex, search_form, spell_char, spell_not,
    spell_str, translate_ecma,
};
use crate::error::{Error, Result};

/// Keywords compiled by this module.
const SUPPORTED: &[&str] = &[
    "type",
    "enum",
    "const",
    "nullable",
    "properties",
    "required",
    "additionalProperties",
    "minProperties",
    "maxProperties",
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "uniqueItems",
    "anyOf",
    "oneOf",
    "allOf",
    "$ref",
    "$defs",
    "definitions",
    "contains",
    "minContains",
    "maxContains",
    "patternProperties",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "unevaluatedProperties",
    "unevaluatedItems",
    NOT_IN,
    NOT_PATTERN,
    ALL_PATTERNS,
    NOT_MULTIPLE,
    CONTAINS_FROM,
    SOME_EXTRA,
];

// Internal keywords produced by negation (see `algebra`); never read from user schemas.
/// Type name of non-integral numbers (spelled with a fraction part).
pub(super) const FRACTION: &str = "x-ts-fraction";
/// Strings other than the listed ones.
pub(super) const NOT_IN: &str = "x-ts-notIn";
/// Further ECMA patterns a string must match (from merging `allOf` branches).
pub(super) const ALL_PATTERNS: &str = "x-ts-allPatterns";
/// Strings matching none of the listed ECMA patterns.
pub(super) const NOT_PATTERN: &str = "x-ts-notPattern";
/// Numbers that are not a multiple of the value.
pub(super) const NOT_MULTIPLE: &str = "x-ts-notMultipleOf";
/// `contains` counts only items from this index on.
pub(super) const CONTAINS_FROM: &str = "x-ts-containsFrom";
/// An object with at least one undeclared property (`names`/`patterns` declared) whose value
/// matches `schema`.
pub(super) const SOME_EXTRA: &str = "x-ts-someExtra";

/// Keywords that never change validity.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "example",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "$id",
    "id",
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "$vocabulary",
    "discriminator",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
    "xml",
    "externalDocs",
];

/// Validity keywords this version does not compile.
const UNSUPPORTED: &[&str] = &["$dynamicRef", "$recursiveRef"];

/// Rough upper bound on the HIR size of one schema (see `hirs::weight`). A HIR node costs on
/// the order of 100 bytes, and the NFA built from it more, so this keeps a compile well below a
/// gigabyte; the NFA's own byte limit applies after it.
const MAX_WEIGHT: u64 = 2_000_000;

/// Upper bound on the summed size (`hirs::nodes`, copies included) of the sub-schema HIRs
/// built during one compile: the memory they take (the automaton they become is bounded by
/// `MAX_WEIGHT` per schema and by the NFA's byte limit).
const MAX_BUILT: u64 = 8_000_000;

/// Deepest nesting of sub-schema compiles (each level uses a few kilobytes of stack).
pub(super) const MAX_DEPTH: u32 = 2000;

/// Longest `minLength`/`maxLength`/`minItems`/`maxItems` bound compiled as a counted repeat.
const MAX_COUNT: u64 = 10_000;

pub(crate) fn schema_error(keyword: &str, pointer: &str, message: impl Into<String>) -> Error {
    Error::Schema {
        keyword: keyword.to_string(),
        pointer: pointer.to_string(),
        message: message.into(),
    }
}

pub(super) fn escape_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

pub(super) fn child(ptr: &str, key: &str) -> String {
    format!("{ptr}/{}", escape_token(key))
}

// Type bits: a value's JSON type, integers and non-integral numbers apart.
pub(super) const T_NULL: u8 = 1;
pub(super) const T_BOOL: u8 = 2;
pub(super) const T_INT: u8 = 4;
pub(super) const T_FRAC: u8 = 8;
pub(super) const T_STRING: u8 = 16;
pub(super) const T_ARRAY: u8 = 32;
pub(super) const T_OBJECT: u8 = 64;
pub(super) const T_ALL: u8 = 127;

pub(super) fn type_bits(name: &str) -> Option<u8> {
    Some(match name {
        FRACTION => T_FRAC,
        "null" => T_NULL,
        "boolean" => T_BOOL,
        "integer" => T_INT,
        "number" => T_INT | T_FRAC,
        "string" => T_STRING,
        "array" => T_ARRAY,
        "object" => T_OBJECT,
        _ => return None,
    })
}

pub(super) fn value_bits(v: &Value) -> u8 {
    match v {
        Value::Null => T_NULL,
        Value::Bool(_) => T_BOOL,
        Value::Number(n) => {
            if Dec::from_json(n).frac.is_empty() {
                T_INT
            } else {
                T_FRAC
            }
        }
        Value::String(_) => T_STRING,
        Value::Array(_) => T_ARRAY,
        Value::Object(_) => T_OBJECT,
    }
}

pub(super) fn bits_to_types(bits: u8) -> Value {
    let mut v = Vec::new();
    for (b, n) in [
        (T_NULL, "null"),
        (T_BOOL, "boolean"),
        (T_STRING, "string"),
        (T_ARRAY, "array"),
        (T_OBJECT, "object"),
    ] {
        if bits & b != 0 {
            v.push(Value::from(n));
        }
    }
    match (bits & T_INT != 0, bits & T_FRAC != 0) {
        (true, true) => v.push(Value::from("number")),
        (true, false) => v.push(Value::from("integer")),
        (false, true) => v.push(Value::from(FRACTION)),
        (false, false) => {}
    }
    Value::Array(v)
}

/// JSON equality as the spec defines it (numbers by value, objects unordered).
pub(crate) fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => Dec::from_json(x) == Dec::from_json(y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

pub(crate) struct Compiler<'a> {
    /// The root document (`docs[0]`).
    root: &'a Value,
    /// The root and the registry documents, `$ref`s rewritten (see `resolve`).
    docs: &'a [Value],
    pub(super) opts: &'a JsonSchemaOptions,
    /// After `:` and `,`.
    sep: Hir,
    /// Inside brackets and before `:` and `,`.
    inner: Hir,
    pub warnings: Vec<String>,
    pub(super) stack: Vec<String>,
    pub(super) cuts: u64,
    /// How many enclosing schemas being expanded have `unevaluated*` keywords.
    pub(super) eval_scopes: u32,
    /// Current nesting of `schema` calls.
    depth: u32,
    any_cache: Vec<Hir>,
    any_string: Hir,
    /// Total size (`hirs::nodes`) of the reference expansions and object member lists built so
    /// far (copies included): bounds the memory spent while compiling, before the final size
    /// check.
    built: u64,
}

fn ws_chars_only(h: &Hir) -> bool {
    use regex_syntax::hir::HirKind::*;
    let ok = |c: u32| matches!(c, 0x20 | 0x09 | 0x0A | 0x0D);
    match h.kind() {
        Empty => true,
        Look(_) => false,
        Literal(l) => l.0.iter().all(|&b| ok(u32::from(b))),
        Class(regex_syntax::hir::Class::Unicode(c)) => c
            .ranges()
            .iter()
            .all(|r| (r.start() as u32..=r.end() as u32).all(ok)),
        Class(regex_syntax::hir::Class::Bytes(c)) => c
            .ranges()
            .iter()
            .all(|r| (u32::from(r.start())..=u32::from(r.end())).all(ok)),
        Repetition(r) => ws_chars_only(&r.sub),
        Capture(c) => ws_chars_only(&c.sub),
        Concat(xs) | Alternation(xs) => xs.iter().all(ws_chars_only),
    }
}

impl<'a> Compiler<'a> {
    pub fn new(docs: &'a [Value], opts: &'a JsonSchemaOptions) -> Result<Compiler<'a>> {
        let root = &docs[0];
        let ws_class = class(&[('\t', '\n'), ('\r', '\r'), (' ', ' ')]);
        let (sep, inner) = match &opts.whitespace {
            Whitespace::Default => (opt(lit(" ")), Hir::empty()),
            Whitespace::Compact => (Hir::empty(), Hir::empty()),
            Whitespace::Flexible => {
                let w = rep(ws_class, 0, Some(opts.max_whitespace));
                (w.clone(), w)
            }
            Whitespace::Pattern(p) => {
                let h = crate::regex::parse(p, 250).map_err(|e| {
                    Error::InvalidArgument(format!("whitespace pattern {p:?}: {e}"))
                })?;
                if !ws_chars_only(&h) {
                    return Err(Error::InvalidArgument(format!(
                        "whitespace pattern {p:?} may match characters other than JSON \
                         whitespace (space, \\t, \\n, \\r)"
                    )));
                }
                (h.clone(), h)
            }
        };
        let any_string = concat(vec![lit("\""), star(any_char()), lit("\"")]);
        Ok(Compiler {
            root,
            docs,
            opts,
            sep,
            inner,
            warnings: Vec::new(),
            stack: Vec::new(),
            cuts: 0,
            eval_scopes: 0,
            depth: 0,
            any_cache: Vec::new(),
            any_string,
            built: 0,
        })
    }

    /// Compile the root schema.
    pub fn compile_root(&mut self) -> Result<Hir> {
        let root = self.root;
        let h = self.schema(root, "")?;
        let h = match h {
            Some(h) => h,
            None if self.cuts > 0 => {
                return Err(schema_error(
                    "$ref",
                    "",
                    format!(
                        "every value of this schema needs recursion deeper than \
                         max_recursion_depth={}; raise max_recursion_depth",
                        self.opts.max_recursion_depth
                    ),
                ))
            }
            None => return Err(schema_error("", "", "no JSON value satisfies this schema")),
        };
        self.check_weight(&h)?;
        Ok(h)
    }

    fn check_weight(&self, h: &Hir) -> Result<()> {
        let w = weight(h);
        if w > MAX_WEIGHT {
            return Err(Error::Budget(format!(
                "the schema expands to an automaton of about {w} nodes (limit {MAX_WEIGHT}): \
                 lower max_nesting_depth / max_recursion_depth, count bounds, or \
                 additional_properties=\"forbid\""
            )));
        }
        Ok(())
    }

    pub(super) fn unsupported(&mut self, keyword: &str, ptr: &str, why: &str) -> Result<()> {
        if self.opts.lenient {
            self.warnings.push(format!(
                "#{ptr}: `{keyword}` ignored ({why}); the grammar accepts a superset"
            ));
            Ok(())
        } else {
            Err(schema_error(keyword, ptr, why))
        }
    }

    fn colon(&self) -> Hir {
        concat(vec![self.inner.clone(), lit(":"), self.sep.clone()])
    }

    fn comma(&self) -> Hir {
        concat(vec![self.inner.clone(), lit(","), self.sep.clone()])
    }

    fn wrap(&self, open: &str, body: Hir, close: &str) -> Hir {
        concat(vec![
            lit(open),
            self.inner.clone(),
            body,
            self.inner.clone(),
            lit(close),
        ])
    }

    /// `first (, item){..}` lists: `a..=b` items, each `item`.
    fn list(&self, item: Hir, a: u64, b: Option<u64>) -> Hir {
        if b == Some(0) {
            return Hir::empty();
        }
        if b.is_none() && a <= 1 {
            // one copy of the item in the automaton (see `nfa_build`)
            let core = crate::nfa_build::sep_list(item, self.comma());
            return if a == 0 { opt(core) } else { core };
        }
        let more = rep(
            concat(vec![self.comma(), item.clone()]),
            a.saturating_sub(1) as u32,
            b.map(|b| (b - 1) as u32),
        );
        let core = concat(vec![item, more]);
        if a == 0 {
            opt(core)
        } else {
            core
        }
    }

    /// Any JSON value with at most `depth` levels of nested containers.
    /// Any JSON value nested at most `depth` levels: a shared part (see
    /// [`crate::nfa_build::share`]), so its automaton is built once per process and options.
    pub fn any_value(&mut self, depth: u32) -> Result<Hir> {
        let key = format!("any-value {depth} ({}) ({})", self.inner, self.sep);
        if let Some(m) = crate::nfa_build::shared_part(&key) {
            return Ok(m);
        }
        let h = self.any_value_hir(depth)?;
        crate::nfa_build::share(&key, h)
    }

    fn any_value_hir(&mut self, depth: u32) -> Result<Hir> {
        while self.any_cache.len() <= depth as usize {
            let d = self.any_cache.len();
            let mut parts = vec![
                lit("null"),
                lit("true"),
                lit("false"),
                any_number(false),
                self.any_string.clone(),
            ];
            if d > 0 {
                let v = self.any_cache[d - 1].clone();
                let arr = self.wrap("[", self.list(v.clone(), 0, None), "]");
                let kv = concat(vec![self.any_string.clone(), self.colon(), v]);
                let obj = self.wrap("{", self.list(kv, 0, None), "}");
                parts.push(arr);
                parts.push(obj);
            }
            let h = alt(parts);
            // Each level holds the one below several times over: the size grows geometrically
            // with the depth, so check it level by level, before it can exhaust memory.
            let w = weight(&h);
            if w > MAX_WEIGHT {
                return Err(Error::Budget(format!(
                    "an unconstrained JSON value nested {d} levels deep expands to about {w} \
                     automaton nodes (limit {MAX_WEIGHT}); lower max_nesting_depth (now {depth})"
                )));
            }
            self.any_cache.push(h);
        }
        Ok(self.any_cache[depth as usize].clone())
    }

    /// Any JSON object (values up to `max_nesting_depth` levels deep).
    pub fn any_object(&mut self) -> Result<Hir> {
        let v = self.any_value(self.opts.max_nesting_depth)?;
        let kv = concat(vec![self.any_string.clone(), self.colon(), v]);
        Ok(self.wrap("{", self.list(kv, 0, None), "}"))
    }

    pub fn schema(&mut self, s: &Value, ptr: &str) -> Result<Option<Hir>> {
        if self.depth >= MAX_DEPTH {
            return Err(schema_error(
                "",
                ptr,
                format!(
                    "the schema nests more than {MAX_DEPTH} levels deep (counting $ref \
                     expansions); lower max_recursion_depth or simplify the schema"
                ),
            ));
        }
        self.depth += 1;
        let h = self.schema_unchecked(s, ptr);
        self.depth -= 1;
        h
    }

    /// Add a reference expansion's size to the running total. Copies of a sub-schema only
    /// multiply through references (recursion unrolled level by level), so counting there
    /// stops a runaway expansion early without weighing every sub-schema at every level.
    fn count_built(&mut self, h: &Option<Hir>, ptr: &str) -> Result<()> {
        if let Some(h) = h {
            self.built = self.built.saturating_add(nodes(h));
            if self.built > MAX_BUILT {
                return Err(Error::Budget(format!(
                    "the schema expands to more than {MAX_BUILT} expression nodes while compiling \
                     (at #{ptr}): lower max_nesting_depth / max_recursion_depth, count bounds, \
                     or use additional_properties=\"forbid\""
                )));
            }
        }
        Ok(())
    }

    fn schema_unchecked(&mut self, s: &Value, ptr: &str) -> Result<Option<Hir>> {
        match s {
            Value::Bool(true) => Ok(Some(self.any_value(self.opts.max_nesting_depth)?)),
            Value::Bool(false) => Ok(None),
            Value::Object(m) => self.object_schema(m, ptr),
            _ => Err(schema_error(
                "",
                ptr,
                "a schema must be a JSON object or a boolean",
            )),
        }
    }

    pub(super) fn check_keywords(&mut self, m: &Map<String, Value>, ptr: &str) -> Result<()> {
        for (k, v) in m {
            let k = k.as_str();
            if SUPPORTED.contains(&k) || ANNOTATIONS.contains(&k) {
                let _ = v; // uniqueItems: decided where arrays are compiled
                continue;
            }
            if UNSUPPORTED.contains(&k) {
                self.unsupported(k, ptr, &format!("the keyword `{k}` is not supported"))?;
            } else if !k.starts_with("x-") {
                self.warnings
                    .push(format!("#{ptr}: unknown keyword `{k}` ignored"));
            }
        }
        Ok(())
    }

    /// A keyword that changes which values are valid. Unknown keywords are not: they are
    /// ignored with a warning (see `check_keywords`), wherever they appear.
    pub(super) fn is_validity(k: &str) -> bool {
        (SUPPORTED.contains(&k) || UNSUPPORTED.contains(&k))
            && !ANNOTATIONS.contains(&k)
            && k != "$defs"
            && k != "definitions"
    }

    fn object_schema(&mut self, m: &Map<String, Value>, ptr: &str) -> Result<Option<Hir>> {
        self.check_keywords(m, ptr)?;
        if self.needs_algebra(m, ptr)? {
            let terms = self.expand(&Value::Object(m.clone()), ptr, 0)?;
            return self.compile_terms(terms, ptr);
        }
        if let Some(r) = m.get("$ref") {
            let r = r
                .as_str()
                .ok_or_else(|| schema_error("$ref", ptr, "$ref must be a string"))?;
            let rest: Map<String, Value> = m
                .iter()
                .filter(|(k, _)| k.as_str() != "$ref" && Self::is_validity(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if rest.is_empty() {
                return self.reference(r, ptr);
            }
            let mut one = Map::new();
            one.insert("$ref".into(), Value::from(r));
            let merged = self.merge_all(&[Value::Object(one), Value::Object(rest)], ptr)?;
            return self.owned(merged, ptr);
        }
        if let Some(all) = m.get("allOf") {
            let branches = all
                .as_array()
                .ok_or_else(|| schema_error("allOf", ptr, "allOf must be an array"))?;
            let mut items: Vec<Value> = branches.clone();
            let rest: Map<String, Value> = m
                .iter()
                .filter(|(k, _)| k.as_str() != "allOf" && Self::is_validity(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            items.push(Value::Object(rest));
            let merged = self.merge_all(&items, &child(ptr, "allOf"))?;
            return self.owned(merged, ptr);
        }
        let any = m.get("anyOf");
        let one = m.get("oneOf");
        if any.is_some() || one.is_some() {
            // Both together, and a oneOf whose branches may overlap (under the default
            // one_of), were sent to the expansion by `needs_algebra`.
            let (kw, list) = match (any, one) {
                (Some(a), None) => ("anyOf", a),
                (None, Some(o)) => ("oneOf", o),
                _ => {
                    let terms = self.expand(&Value::Object(m.clone()), ptr, 0)?;
                    return self.compile_terms(terms, ptr);
                }
            };
            let branches = list
                .as_array()
                .ok_or_else(|| schema_error(kw, ptr, format!("{kw} must be an array")))?;
            if kw == "oneOf" && self.opts.one_of == OneOf::AnyOf && !self.disjoint(branches, m)? {
                self.warnings.push(format!(
                    "#{ptr}: oneOf compiled as anyOf (branches not provably disjoint)"
                ));
            }
            let rest: Map<String, Value> = m
                .iter()
                .filter(|(k, _)| k.as_str() != kw && Self::is_validity(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut alts = Vec::new();
            for (i, b) in branches.iter().enumerate() {
                let bptr = child(&child(ptr, kw), &i.to_string());
                let h = if rest.is_empty() {
                    self.schema(b, &bptr)?
                } else {
                    let merged =
                        self.merge_all(&[Value::Object(rest.clone()), b.clone()], &bptr)?;
                    self.owned(merged, &bptr)?
                };
                alts.push(h);
            }
            return Ok(alt_opt(alts));
        }
        if m.contains_key("enum") || m.contains_key("const") {
            return self.values(m, ptr);
        }
        self.typed(m, ptr)
    }

    /// A merged schema that is trivially empty (no type left, no value left).
    pub(super) fn quick_empty(&self, v: &Value) -> bool {
        match v {
            Value::Bool(b) => !b,
            Value::Object(m) => {
                matches!(m.get("type"), Some(Value::Array(a)) if a.is_empty())
                    || matches!(m.get("enum"), Some(Value::Array(a)) if a.is_empty())
            }
            _ => false,
        }
    }

    /// Compile a schema that was built here (merged).
    fn owned(&mut self, v: Value, ptr: &str) -> Result<Option<Hir>> {
        self.schema(&v, ptr)
    }

    /// Look up a `$ref` in the internal form `resolve::prepare` wrote: `#/pointer` into the
    /// root, `tsdoc:N#/pointer` into registry document `N`. Returns the target and a key
    /// naming it (for the recursion limit and messages).
    pub(super) fn resolve(&self, r: &str, ptr: &str) -> Result<(&'a Value, String)> {
        let docs = self.docs;
        if let Some(why) = r.strip_prefix(super::resolve::UNRESOLVED) {
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

    fn reference(&mut self, r: &str, ptr: &str) -> Result<Option<Hir>> {
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

    fn flatten(
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

    pub(super) fn merge_all(&self, items: &[Value], ptr: &str) -> Result<Value> {
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

    pub(super) fn deref<'b>(&self, mut v: &'b Value, ptr: &str) -> Result<&'b Value>
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

    /// What `disjoint` knows of one `oneOf` branch.
    fn branch_info(&self, b: &Value, ptr: &str, also_required: &[&str]) -> Result<BranchInfo> {
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
    pub(super) fn disjoint(&self, branches: &[Value], parent: &Map<String, Value>) -> Result<bool> {
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
                    if !x.iter().any(|p| y.iter().any(|q| json_eq(p, q))) {
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
                    b.discr.iter().any(|(l, ys)| {
                        k == l && !xs.iter().any(|p| ys.iter().any(|q| json_eq(p, q)))
                    })
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

    // ---- const / enum ------------------------------------------------------------------

    fn values(&mut self, m: &Map<String, Value>, ptr: &str) -> Result<Option<Hir>> {
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
        let whole = Value::Object(m.clone());
        let mut kept = Vec::new();
        for v in vals {
            if self.validates(&v, &whole, ptr, 0)? {
                kept.push(v);
            }
        }
        let vals = kept;
        let alts: Vec<Hir> = vals.iter().map(|v| self.literal(v)).collect();
        Ok(if alts.is_empty() {
            None
        } else {
            Some(alt(alts))
        })
    }

    fn literal(&self, v: &Value) -> Hir {
        match v {
            Value::Null => lit("null"),
            Value::Bool(true) => lit("true"),
            Value::Bool(false) => lit("false"),
            Value::Number(n) => number_literal(&Dec::from_json(n)),
            Value::String(s) => concat(vec![lit("\""), spell_str(s), lit("\"")]),
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
            Value::Object(m) => {
                let mut items = Vec::new();
                for (i, (k, x)) in m.iter().enumerate() {
                    if i > 0 {
                        items.push(self.comma());
                    }
                    items.push(concat(vec![lit("\""), spell_str(k), lit("\"")]));
                    items.push(self.colon());
                    items.push(self.literal(x));
                }
                self.wrap("{", concat(items), "}")
            }
        }
    }

    // ---- typed values ------------------------------------------------------------------

    pub(super) fn type_bits_of(&self, m: &Map<String, Value>, ptr: &str) -> Result<u8> {
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

    fn typed(&mut self, m: &Map<String, Value>, ptr: &str) -> Result<Option<Hir>> {
        let bits = self.type_bits_of(m, ptr)?;
        if bits == T_ALL && !m.keys().any(|k| Self::is_validity(k) && k != "type") {
            return Ok(Some(self.any_value(self.opts.max_nesting_depth)?));
        }
        let mut alts = Vec::new();
        if bits & T_NULL != 0 {
            alts.push(Some(lit("null")));
        }
        if bits & T_BOOL != 0 {
            alts.push(Some(alt(vec![lit("true"), lit("false")])));
        }
        if bits & T_INT != 0 && bits & T_FRAC != 0 {
            alts.push(self.number(m, ptr, false)?);
        } else if bits & T_INT != 0 {
            alts.push(self.number(m, ptr, true)?);
        } else if bits & T_FRAC != 0 {
            alts.push(self.fraction(m, ptr)?);
        }
        if bits & T_STRING != 0 {
            alts.push(self.string(m, ptr)?);
        }
        if bits & T_ARRAY != 0 {
            alts.push(self.array(m, ptr)?);
        }
        if bits & T_OBJECT != 0 {
            alts.push(self.object(m, ptr)?);
        }
        Ok(alt_opt(alts))
    }

    fn num(&self, m: &Map<String, Value>, k: &str, ptr: &str) -> Result<Option<Dec>> {
        match m.get(k) {
            None | Some(Value::Bool(_)) => Ok(None),
            Some(Value::Number(n)) => Ok(Some(Dec::from_json(n))),
            Some(_) => Err(schema_error(k, ptr, format!("{k} must be a number"))),
        }
    }

    /// The strongest lower and upper bounds (draft-4 boolean and 2020-12 numeric forms).
    fn bounds(&self, m: &Map<String, Value>, ptr: &str) -> Result<(Option<Bound>, Option<Bound>)> {
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
    fn fraction(&mut self, m: &Map<String, Value>, ptr: &str) -> Result<Option<Hir>> {
        let int = alt(vec![
            lit("0"),
            concat(vec![
                super::hirs::digits(1, 9),
                star(super::hirs::digits(0, 9)),
            ]),
        ]);
        let frac = concat(vec![
            opt(lit("-")),
            int,
            lit("."),
            star(super::hirs::digits(0, 9)),
            super::hirs::digits(1, 9),
            star(super::hirs::digits(0, 9)),
        ]);
        let (lo, hi) = self.bounds(m, ptr)?;
        if lo.is_none()
            && hi.is_none()
            && !m.contains_key("multipleOf")
            && !m.contains_key(NOT_MULTIPLE)
        {
            return Ok(Some(frac));
        }
        // the bounded (or multipleOf-constrained) numbers, intersected with the fractions:
        // number text is ASCII, so the character algebra applies directly
        let Some(nums) = self.number(m, ptr, false)? else {
            return Ok(None);
        };
        match super::strlang::combine(&[nums, frac], &[]) {
            Ok(h) => Ok(h),
            Err(e) => {
                self.unsupported("type", ptr, &e)?;
                self.number(m, ptr, false)
            }
        }
    }

    fn number(&mut self, m: &Map<String, Value>, ptr: &str, integer: bool) -> Result<Option<Hir>> {
        let (lo, hi) = self.bounds(m, ptr)?;
        let mul = self.num(m, "multipleOf", ptr)?;
        let not_mul = self.num(m, NOT_MULTIPLE, ptr)?;
        let one = Dec::parse("1").expect("literal");
        let mul = mul.filter(|d| !(integer && *d == one));
        let (div, negate) = match (mul, not_mul) {
            (None, None) => return Ok(number_range(lo.as_ref(), hi.as_ref(), integer)),
            (Some(d), None) => (d, false),
            (None, Some(d)) => (d, true),
            (Some(_), Some(_)) => {
                self.unsupported(
                    "multipleOf",
                    ptr,
                    "multipleOf together with a negated multipleOf is not supported",
                )?;
                return Ok(number_range(lo.as_ref(), hi.as_ref(), integer));
            }
        };
        match super::multiple::multiple_of(&div, lo.as_ref(), hi.as_ref(), integer, negate) {
            Ok(h) => Ok(h),
            Err(e) => {
                self.unsupported("multipleOf", ptr, &e)?;
                Ok(number_range(lo.as_ref(), hi.as_ref(), integer))
            }
        }
    }

    fn count(&self, m: &Map<String, Value>, k: &str, ptr: &str) -> Result<Option<u64>> {
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

    fn big(&self, k: &str, ptr: &str, n: u64) -> Result<()> {
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
    pub(super) fn asserted_format(&self, name: &str) -> Option<Hir> {
        if self.opts.formats != Formats::Assert {
            return None;
        }
        format_regex(name).map(|re| crate::regex::parse(re, 250).expect("built-in format regex"))
    }

    /// The decoded-string language of an ECMA pattern (search semantics).
    pub(super) fn pattern_hir(&self, p: &Value, kw: &str, ptr: &str) -> Result<Hir> {
        let p = p
            .as_str()
            .ok_or_else(|| schema_error(kw, ptr, "pattern must be a string"))?;
        pattern_language(p).map_err(|e| schema_error("pattern", ptr, e))
    }

    fn string(&mut self, m: &Map<String, Value>, ptr: &str) -> Result<Option<Hir>> {
        let min = self.count(m, "minLength", ptr)?.unwrap_or(0);
        let max = self.count(m, "maxLength", ptr)?;
        if max.is_some_and(|mx| mx < min) {
            return Ok(None);
        }
        self.big("minLength", ptr, min)?;
        if let Some(mx) = max {
            self.big("maxLength", ptr, mx)?;
        }
        // decoded-string languages that must hold (pos) and must not (neg)
        let mut pos: Vec<(Hir, &str)> = Vec::new();
        let mut neg: Vec<Hir> = Vec::new();
        if let Some(p) = m.get("pattern") {
            pos.push((self.pattern_hir(p, "pattern", ptr)?, "pattern"));
        }
        for p in m
            .get(ALL_PATTERNS)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            pos.push((self.pattern_hir(p, "pattern", ptr)?, "pattern"));
        }
        if let Some(f) = m.get("format") {
            let f = f
                .as_str()
                .ok_or_else(|| schema_error("format", ptr, "format must be a string"))?;
            if let Some(h) = self.asserted_format(f) {
                pos.push((h, "format"));
            }
        }
        for p in m
            .get(NOT_PATTERN)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            neg.push(self.pattern_hir(p, NOT_PATTERN, ptr)?);
        }
        let names: Vec<Vec<char>> = m
            .get(NOT_IN)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|s| s.chars().collect())
            .collect();
        let content = if pos.is_empty() && neg.is_empty() && names.is_empty() {
            Some(rep(any_char(), min as u32, max.map(|x| x as u32)))
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
                    fast = Some(Some(encode(h).map_err(|e| schema_error(what, ptr, e))?));
                } else if disjoint {
                    fast = Some(None);
                } else if let Some(h2) = narrow_repetition(h, min, max) {
                    fast = Some(Some(encode(&h2).map_err(|e| schema_error(what, ptr, e))?));
                }
            }
            match fast {
                Some(c) => c,
                None => {
                    // the general case: intersect and subtract the decoded languages
                    let mut p: Vec<Hir> = pos.into_iter().map(|(h, _)| h).collect();
                    if min > 0 || max.is_some() {
                        p.push(rep(dot_all(), min as u32, max.map(|x| x as u32)));
                    }
                    for n in &names {
                        neg.push(Hir::literal(n.iter().collect::<String>().into_bytes()));
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
                            Some(star(any_char()))
                        }
                    }
                }
            }
        };
        Ok(content.map(|c| concat(vec![lit("\""), c, lit("\"")])))
    }

    fn array(&mut self, m: &Map<String, Value>, ptr: &str) -> Result<Option<Hir>> {
        let min = self.count(m, "minItems", ptr)?.unwrap_or(0);
        let max = self.count(m, "maxItems", ptr)?;
        self.big("minItems", ptr, min)?;
        if let Some(mx) = max {
            self.big("maxItems", ptr, mx)?;
            if mx < min {
                return Ok(None);
            }
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
        if m.get("uniqueItems") == Some(&Value::Bool(true)) {
            match self.unique_array(prefix, rest, (min, max), ptr)? {
                Some(h) => return Ok(h),
                None => self.unsupported(
                    "uniqueItems",
                    ptr,
                    "uniqueItems: true is supported only when every item comes from a small \
                     finite set of values (enum, const, boolean, null) and the length is bounded",
                )?,
            }
        }
        if let Some(c) = m.get("contains") {
            let lo = self.count(m, "minContains", ptr)?.unwrap_or(1);
            let hi = self.count(m, "maxContains", ptr)?;
            if lo > 0 || hi.is_some() {
                let from = self.count(m, CONTAINS_FROM, ptr)?.unwrap_or(0);
                return self.array_contains(prefix, rest, c, (lo, hi), from, (min, max), ptr);
            }
        }
        let mut pre = Vec::new();
        for (i, s) in prefix.iter().enumerate() {
            pre.push(self.schema(s, &child(&child(ptr, prefix_kw), &i.to_string()))?);
        }
        let rest_h = match rest {
            None => Some(self.any_value(self.opts.max_nesting_depth)?),
            Some(s) => self.schema(s, &child(ptr, rest_kw))?,
        };
        let body = self.array_tail(&pre, rest_h.as_ref(), 0, min, max);
        Ok(body.map(|b| self.wrap("[", b, "]")))
    }

    /// The finite set of values a schema allows, when it names one (`enum`, `const`, only
    /// `boolean`/`null` types, `false`); `None` when it may be infinite.
    fn finite_values(&mut self, s: &Value, ptr: &str) -> Result<Option<Vec<Value>>> {
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

    /// `uniqueItems: true` over finite item domains: every array of distinct values, listed.
    fn unique_array(
        &mut self,
        prefix: &[Value],
        rest: Option<&Value>,
        len: (u64, Option<u64>),
        ptr: &str,
    ) -> Result<Option<Option<Hir>>> {
        const MAX_ARRAYS: usize = 4096;
        let mut doms: Vec<Vec<Value>> = Vec::new();
        for s in prefix {
            match self.finite_values(s, ptr)? {
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
        let mut out: Vec<Hir> = Vec::new();
        let mut seq: Vec<Value> = Vec::new();
        #[allow(clippy::too_many_arguments)]
        fn go(
            c: &Compiler<'_>,
            doms: &[Vec<Value>],
            rest: &Option<Vec<Value>>,
            len: (u64, u64),
            seq: &mut Vec<Value>,
            out: &mut Vec<Hir>,
            limit: usize,
        ) -> bool {
            let i = seq.len();
            if i as u64 >= len.0 {
                if out.len() >= limit {
                    return false;
                }
                out.push(c.literal(&Value::Array(seq.clone())));
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
                let ok = go(c, doms, rest, len, seq, out, limit);
                seq.pop();
                if !ok {
                    return false;
                }
            }
            true
        }
        if !go(
            self,
            &doms,
            &rest_dom,
            (len.0, cap),
            &mut seq,
            &mut out,
            MAX_ARRAYS,
        ) {
            return Ok(None);
        }
        Ok(Some(if out.is_empty() { None } else { Some(alt(out)) }))
    }

    /// Arrays with a `contains` count: every item is either a match (item schema ∧ contains)
    /// or not (item schema ∧ ¬contains), and the matches are counted. Positions before `from`
    /// are not counted.
    #[allow(clippy::too_many_arguments)]
    fn array_contains(
        &mut self,
        prefix: &[Value],
        rest: Option<&Value>,
        c: &Value,
        counts: (u64, Option<u64>),
        from: u64,
        len: (u64, Option<u64>),
        ptr: &str,
    ) -> Result<Option<Hir>> {
        let cptr = child(ptr, "contains");
        let both = |s: &Value, extra: Value| {
            let mut o = Map::new();
            o.insert("allOf".into(), Value::Array(vec![s.clone(), extra]));
            Value::Object(o)
        };
        let mut not_c = Map::new();
        not_c.insert("not".into(), c.clone());
        let not_c = Value::Object(not_c);
        let any = Value::Bool(true);
        // (non-matching, matching) item languages per prefix position, then for the rest
        let mut pairs: Vec<(Option<Hir>, Option<Hir>)> = Vec::new();
        for (i, s) in prefix.iter().enumerate() {
            if (i as u64) < from {
                pairs.push((self.schema(s, &cptr)?, None));
            } else {
                let x = self.schema(&both(s, not_c.clone()), &cptr)?;
                let y = self.schema(&both(s, c.clone()), &cptr)?;
                pairs.push((x, y));
            }
        }
        let r = rest.unwrap_or(&any);
        let rest_pair = (
            self.schema(&both(r, not_c.clone()), &cptr)?,
            self.schema(&both(r, c.clone()), &cptr)?,
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

    /// Items from position `i` on, `c` matches so far.
    #[allow(clippy::too_many_arguments)]
    fn contains_seq(
        &self,
        pairs: &[(Option<Hir>, Option<Hir>)],
        rest: &(Option<Hir>, Option<Hir>),
        i: u64,
        c: u64,
        counts: (u64, Option<u64>),
        len: (u64, Option<u64>),
        budget: &mut u64,
        ptr: &str,
    ) -> Result<Option<Hir>> {
        *budget += 1;
        if *budget > 4096 {
            return Err(schema_error(
                "contains",
                ptr,
                "contains with these item counts unrolls into too many cases",
            ));
        }
        let (lo, hi) = counts;
        let (min, max) = len;
        let item = |h: &Hir| {
            if i > 0 {
                concat(vec![self.comma(), h.clone()])
            } else {
                h.clone()
            }
        };
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
        let mut alts: Vec<Option<Hir>> = Vec::new();
        if i >= min && c >= lo {
            alts.push(Some(Hir::empty()));
        }
        if max.is_none_or(|m| i < m) {
            if !in_prefix && min.saturating_sub(i) > 64 {
                return Err(schema_error(
                    "contains",
                    ptr,
                    "contains together with a large minItems is not supported",
                ));
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

    fn array_tail(
        &self,
        pre: &[Option<Hir>],
        rest: Option<&Hir>,
        i: u64,
        min: u64,
        max: Option<u64>,
    ) -> Option<Hir> {
        if max.is_some_and(|mx| i >= mx) {
            return Some(Hir::empty());
        }
        let k = pre.len() as u64;
        if i < k {
            let e = pre[i as usize].as_ref();
            let body = e.and_then(|e| {
                let tail = self.array_tail(pre, rest, i + 1, min, max)?;
                let mut v = Vec::new();
                if i > 0 {
                    v.push(self.comma());
                }
                v.push(e.clone());
                v.push(tail);
                Some(concat(v))
            });
            return if i >= min {
                Some(body.map(opt).unwrap_or_else(Hir::empty))
            } else {
                body
            };
        }
        let a = min.saturating_sub(i);
        let b = max.map(|mx| mx - i);
        match rest {
            None => (a == 0).then(Hir::empty),
            Some(r) if i > 0 => Some(rep(
                concat(vec![self.comma(), r.clone()]),
                a as u32,
                b.map(|b| b as u32),
            )),
            Some(r) => Some(self.list(r.clone(), a, b)),
        }
    }

    fn object(&mut self, m: &Map<String, Value>, ptr: &str) -> Result<Option<Hir>> {
        if m.contains_key(SOME_EXTRA) {
            self.unsupported(
                "additionalProperties",
                ptr,
                "`not` of additionalProperties is not supported in this version",
            )?;
        }
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
                    required.push(x.as_str().ok_or_else(|| {
                        schema_error("required", ptr, "required must be a list of strings")
                    })?);
                }
            }
            Some(_) => return Err(schema_error("required", ptr, "required must be an array")),
        }
        // Values allowed for undeclared properties.
        let extra: Option<Hir> = match m.get("additionalProperties") {
            None => match self.opts.additional_properties {
                AdditionalProperties::Allow => Some(self.any_value(self.opts.max_nesting_depth)?),
                AdditionalProperties::Forbid => None,
            },
            Some(s) => self.schema(s, &child(ptr, "additionalProperties"))?,
        };
        // patternProperties: (decoded key language, value schema)
        let mut patterns: Vec<(Hir, Value)> = Vec::new();
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
                patterns.push((h, sch.clone()));
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
        let mut items: Vec<(Hir, bool)> = Vec::new();
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
            for (h, sch) in &patterns {
                if super::validate::full_match(h, &name)? {
                    matching.push(sch.clone());
                }
            }
            let name_ok = match names_schema {
                Some(pn) => self.validates(&Value::from(name.as_str()), pn, ptr, 0)?,
                None => true,
            };
            let v = if !name_ok {
                None
            } else {
                match (s, matching.is_empty()) {
                    (Some(s), true) => self.schema(s, &pptr)?,
                    (Some(s), false) => {
                        matching.insert(0, s.clone());
                        let mut o = Map::new();
                        o.insert("allOf".into(), Value::Array(matching));
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
                        spell_str(&name),
                        lit("\""),
                        self.colon(),
                        v,
                    ]);
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
        let extra_kv = self.extra_members(&names, &patterns, key_lang.as_deref(), extra, ptr)?;
        let n_req = items.iter().filter(|x| x.1).count() as u64;
        let n_opt = items.len() as u64 - n_req;
        let minp = self.count(m, "minProperties", ptr)?;
        let maxp = self.count(m, "maxProperties", ptr)?;
        // Bounds on the number of extra properties.
        let mut extra_bounds: (u64, Option<u64>) = (0, None);
        if minp.is_some() || maxp.is_some() {
            let lo = minp.unwrap_or(0);
            if maxp.is_some_and(|mx| mx < lo) {
                return Ok(None);
            }
            let trivially =
                lo <= n_req && maxp.is_none_or(|mx| extra_kv.is_none() && mx >= n_req + n_opt);
            if maxp.is_some_and(|mx| mx < n_req) || (extra_kv.is_none() && lo > n_req + n_opt) {
                return Ok(None);
            }
            if !trivially {
                if n_opt == 0 && extra_kv.is_some() {
                    extra_bounds = (lo.saturating_sub(n_req), maxp.map(|mx| mx - n_req));
                } else {
                    let kw = if minp.is_some_and(|l| l > n_req) {
                        "minProperties"
                    } else {
                        "maxProperties"
                    };
                    self.unsupported(
                        kw,
                        ptr,
                        "minProperties/maxProperties are supported only when implied by the \
                         declared properties, or with all declared properties required and \
                         additional properties allowed",
                    )?;
                }
            }
        }
        // Size of the body before building it: the tail after the first present property is
        // linear, but each leading optional property starts its own alternative holding a copy
        // of everything after it, so a property is copied once per optional property before it
        // (up to the first required one).
        // With no bounds on the extras the members compile into one shared sequence
        // (`nfa_build::member_seq`), linear in the members.
        let shared = extra_bounds == (0, None);
        let mut estimate = 0u64;
        let mut held = 0u64;
        let mut leading_optional = 0u64;
        let mut all_optional = true;
        for (kv, req) in &items {
            let copies = if shared { 1 } else { 1 + leading_optional };
            estimate = estimate.saturating_add(weight(kv).saturating_mul(copies));
            held = held.saturating_add(nodes(kv).saturating_mul(copies));
            if *req {
                all_optional = false;
            } else if all_optional {
                leading_optional += 1;
            }
        }
        if let Some(kv) = &extra_kv {
            let copies = if shared { 1 } else { 2 + leading_optional };
            estimate = estimate.saturating_add(weight(kv).saturating_mul(copies));
            held = held.saturating_add(nodes(kv).saturating_mul(copies));
        }
        self.built = self.built.saturating_add(held);
        if estimate > MAX_WEIGHT {
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
        let body = if shared {
            crate::nfa_build::member_seq(items, self.comma(), extra_kv)
        } else {
            self.props_from(&items, 0, true, extra_kv.as_ref(), extra_bounds)
        };
        Ok(Some(self.wrap("{", body, "}")))
    }

    /// The decoded language of keys allowed by a `propertyNames` schema (`pos` HIRs that must
    /// all match; an empty list for `false` is returned as one empty class).
    fn key_language(&mut self, pn: &Value, ptr: &str) -> Result<Vec<Hir>> {
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
                        rep(any, n as u32, None)
                    } else {
                        rep(any, 0, Some(n as u32))
                    });
                }
                "const" | "enum" => {
                    let vals = literal_values(m).unwrap_or_default();
                    let strs: Vec<Hir> = vals
                        .iter()
                        .filter_map(Value::as_str)
                        .map(|s| Hir::literal(s.as_bytes()))
                        .collect();
                    pos.push(alt(strs));
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
                k if !Self::is_validity(k) => {}
                k => self.unsupported(
                    "propertyNames",
                    ptr,
                    &format!("`{k}` inside propertyNames is not supported"),
                )?,
            }
        }
        Ok(pos)
    }

    /// Members for undeclared keys: each combination of matched `patternProperties` gets its
    /// key language (matching exactly those patterns, not a declared name, inside
    /// `propertyNames`) and its value schema (those patterns' schemas, or
    /// `additionalProperties` when none matches).
    fn extra_members(
        &mut self,
        names: &[String],
        patterns: &[(Hir, Value)],
        key_lang: Option<&[Hir]>,
        extra: Option<Hir>,
        ptr: &str,
    ) -> Result<Option<Hir>> {
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
            return Ok(extra.map(|v| concat(vec![self.any_string.clone(), self.colon(), v])));
        }
        let declared: Vec<Hir> = names.iter().map(|n| Hir::literal(n.as_bytes())).collect();
        let mut alts = Vec::new();
        for mask in 0u32..(1 << patterns.len()) {
            let mut pos: Vec<Hir> = key_lang.map(<[Hir]>::to_vec).unwrap_or_default();
            let mut neg = declared.clone();
            let mut schemas = Vec::new();
            for (i, (h, sch)) in patterns.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    pos.push(h.clone());
                    schemas.push(sch.clone());
                } else {
                    neg.push(h.clone());
                }
            }
            let value = if schemas.is_empty() {
                match &extra {
                    Some(v) => v.clone(),
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
            let key = match spelled_combination(&pos, &neg) {
                Ok(Some(k)) => k,
                Ok(None) => continue,
                Err(e) => {
                    self.unsupported("patternProperties", ptr, &e)?;
                    continue;
                }
            };
            alts.push(concat(vec![lit("\""), key, lit("\""), self.colon(), value]));
        }
        Ok(if alts.is_empty() {
            None
        } else {
            Some(alt(alts))
        })
    }

    fn props_from(
        &self,
        items: &[(Hir, bool)],
        i: usize,
        first: bool,
        extra: Option<&Hir>,
        eb: (u64, Option<u64>),
    ) -> Hir {
        if i == items.len() {
            return match extra {
                None => Hir::empty(),
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

/// JSON string content (every spelling) whose decoded value is in `pos₁ ∩ … ∩ ¬neg₁ ∩ …`;
/// `None` when no string is. The minimal DFA is built straight into automaton states when it
/// can be (its regular expression can be exponentially larger, e.g. a format with a length
/// bound); otherwise it is turned back into an expression and spelled.
fn spelled_combination(pos: &[Hir], neg: &[Hir]) -> std::result::Result<Option<Hir>, String> {
    match super::strlang::combined_dfa(pos, neg)? {
        None => Ok(None),
        Some(d) => match crate::nfa_build::char_dfa_mark(&d) {
            Some(mark) => Ok(Some(mark)),
            None => match super::strlang::combine(pos, neg)? {
                Some(h) => encode(&h).map(Some),
                None => Ok(None),
            },
        },
    }
}

/// The decoded-string language of an ECMA pattern (search semantics); the error names the
/// pattern.
pub(super) fn pattern_language(p: &str) -> std::result::Result<Hir, String> {
    let t = translate_ecma(p).map_err(|e| format!("{p:?}: {e}"))?;
    let h = crate::regex::parse(&t, 250).map_err(|e| format!("{p:?}: {e}"))?;
    Ok(search_form(&h))
}

/// Any decoded string except the given ones (a trie walk: leave the trie at the first character
/// that no name continues with).
#[cfg(test)]
pub(super) fn not_in(names: &[Vec<char>]) -> Hir {
    let any = dot_all();
    if names.is_empty() {
        return star(any);
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
        parts.push(concat(vec![class(&[(c, c)]), not_in(&tails)]));
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
        parts.push(concat(vec![class(&ranges), star(any)]));
    }
    alt(parts)
}

/// The JSON spellings of every string but `names` (decoded characters), ready to stand between
/// quotes: the same language as `encode(&not_in(names))`, built with one shared copy of the
/// "any characters" tail instead of one per position in the names (see
/// [`crate::nfa_build::with_tail`]).
pub(super) fn spelled_not_in(names: &[Vec<char>]) -> Hir {
    fn node(names: &[Vec<char>]) -> Hir {
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
            parts.push(concat(vec![spell_char(c), node(&tails)]));
        }
        parts.push(concat(vec![spell_not(&firsts), crate::nfa_build::jump()]));
        alt(parts)
    }
    if names.is_empty() {
        return star(any_char());
    }
    if let Some(h) = crate::nfa_build::ascii_names_excluded(names) {
        return h;
    }
    crate::nfa_build::with_tail(node(names), star(any_char()))
}

#[cfg(test)]
fn push_range(out: &mut Vec<(char, char)>, a: u32, b: u32) {
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
fn narrow_repetition(h: &Hir, min: u64, max: Option<u64>) -> Option<Hir> {
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
    Some(rep((*r.sub).clone(), lo as u32, hi.map(|h| h as u32)))
}

/// The types a validity keyword constrains (`T_ALL` when it is not type-specific).
pub(super) fn applies_to(k: &str) -> u8 {
    match k {
        "properties"
        | "required"
        | "additionalProperties"
        | "minProperties"
        | "maxProperties"
        | "patternProperties"
        | "propertyNames"
        | "dependentRequired"
        | "dependentSchemas"
        | SOME_EXTRA => T_OBJECT,
        "items" | "prefixItems" | "additionalItems" | "minItems" | "maxItems" | "uniqueItems"
        | "contains" | "minContains" | "maxContains" | CONTAINS_FROM => T_ARRAY,
        "pattern" | "format" | "minLength" | "maxLength" | NOT_IN | NOT_PATTERN | ALL_PATTERNS => {
            T_STRING
        }
        "multipleOf" | "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum"
        | NOT_MULTIPLE => T_INT | T_FRAC,
        _ => T_ALL,
    }
}

fn literal_values(m: &Map<String, Value>) -> Option<Vec<Value>> {
    match (m.get("const"), m.get("enum")) {
        (Some(c), Some(Value::Array(e))) => {
            Some(e.iter().filter(|v| json_eq(v, c)).cloned().collect())
        }
        (Some(c), _) => Some(vec![c.clone()]),
        (None, Some(Value::Array(e))) => Some(e.clone()),
        _ => None,
    }
}

/// Draft-4 forms and OpenAPI `nullable` rewritten into 2020-12 keywords, so that merging sees
/// one spelling of each constraint.
pub(super) fn normalize(m: &mut Map<String, Value>) {
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
fn lcm_dec(x: &Dec, y: &Dec) -> Option<String> {
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

fn dec_of(v: &Value) -> Option<Dec> {
    v.as_number().map(Dec::from_json)
}

fn all_of(a: Value, b: Value) -> Value {
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
fn extend_prefix(m: &mut Map<String, Value>, n: usize) {
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

fn merge(
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
                        pattern_language(p)
                            .is_ok_and(|h| super::validate::full_match(&h, name).unwrap_or(false))
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

/// A `oneOf` branch as `Compiler::disjoint` sees it (after following `$ref`; the branch's
/// other keywords only narrow it, so ignoring some keeps the verdict safe).
struct BranchInfo {
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

fn or_lang(acc: Option<Lang>, l: Lang) -> Lang {
    match acc {
        Some(a) => a.or(&l),
        None => l,
    }
}

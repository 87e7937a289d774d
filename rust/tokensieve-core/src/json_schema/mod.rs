//! JSON Schema → regular language over JSON text (a `regex_syntax` HIR), for
//! [`crate::Grammar::from_json_schema`].
//!
//! The HIR is built directly (no regex text, so nothing to escape). The language is the set of
//! JSON texts that validate against the schema *and* follow the documented restrictions:
//! properties in schema order, additional properties after the declared ones, the whitespace
//! policy of [`JsonSchemaOptions::whitespace`], recursion and nesting unrolled to fixed depths.
//! `docs/json-schema.md` states the language exactly; unsupported validity keywords are a
//! [`crate::Error::Schema`] naming the keyword and the JSON pointer (warnings when `lenient`).
//!
//! Submodules: [`options`] (the option table), `compile` (the schema walker, split by keyword
//! family: `refs` for `$ref` and `allOf` merging, `one_of` for `oneOf` disjointness, `scalars`,
//! `arrays`, `objects`), `algebra` (negation and the other boolean applicators, as unions of
//! conjunctions; split into `expand`, `negate`, `unevaluated` and `sub` for the sub-schemas it
//! builds), `extra` (the typed constraints that negation and merging add beside a keyword
//! map: no JSON keyword spells them), `keywords` (the keyword tables), `number` (exact
//! numeric-range regexes), `string` (JSON string spellings, ECMA-262 patterns, formats).

mod algebra;
pub(crate) mod compile;
mod extra;
mod keywords;
mod multiple;
mod number;
pub mod options;
pub(crate) mod resolve;
pub(crate) mod string;
pub(crate) mod unique;
mod validate;

use regex_syntax::hir::Hir;
use serde_json::Value;

use crate::automata::expr::Expr;
use crate::error::Result;
pub use options::{
    AdditionalProperties, Formats, JsonSchemaOptions, OneOf, PropertyOrder, Recursion, Spelling,
    Whitespace,
};
pub use string::{prepare_formats, ASSERTED_FORMATS};

/// Largest schema text (or registry document) accepted, in bytes.
pub const MAX_SCHEMA_BYTES: usize = 64 << 20;

/// Parse a schema document from JSON text, refusing texts over [`MAX_SCHEMA_BYTES`] before
/// parsing. Numbers keep their decimal text (read exactly by the compiler); nesting deeper than
/// [`MAX_TEXT_DEPTH`] levels is a `SchemaError`.
pub fn parse_text(what: &str, text: &str) -> Result<Value> {
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(crate::error::Error::Budget(format!(
            "{what} is {} bytes of JSON, more than the {} MiB accepted",
            text.len(),
            MAX_SCHEMA_BYTES >> 20
        )));
    }
    match parse_json_within(text, MAX_TEXT_DEPTH) {
        None => Err(too_deep()),
        Some(parsed) => parsed.map_err(|e| {
            crate::error::Error::InvalidArgument(format!("{what} is not valid JSON: {e}"))
        }),
    }
}

/// Deepest nesting of a schema document read from JSON text: `{}` is one level, `{"not": {}}`
/// two; 128 levels are read, 129 refused.
pub const MAX_TEXT_DEPTH: usize = 128;

/// Parse JSON text that nests at most `max_depth` levels of arrays and objects; `None` when it
/// nests deeper (found by a linear scan before parsing, so the parser, which recurses once per
/// level, never goes deeper). Numbers keep their decimal text.
///
/// serde_json's own recursion limit is not used: it refuses the 128th level.
pub(crate) fn parse_json_within(text: &str, max_depth: usize) -> Option<serde_json::Result<Value>> {
    use serde::Deserialize;
    if nests_deeper(text.as_bytes(), max_depth) {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    Some(Value::deserialize(&mut de).and_then(|v| de.end().map(|()| v)))
}

/// Whether `[`/`{` outside JSON strings nest deeper than `max_depth` levels in `text`. Exact
/// for valid JSON; for invalid JSON at least as deep as a parser gets before its first error
/// (up to there both see the same strings).
fn nests_deeper(text: &[u8], max_depth: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max_depth {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// The error for a schema nested past [`MAX_TEXT_DEPTH`] levels.
pub fn too_deep() -> crate::error::Error {
    crate::error::Error::Schema {
        keyword: String::new(),
        pointer: String::new(),
        message: format!("the schema nests more than {MAX_TEXT_DEPTH} levels deep"),
    }
}

/// A compiled schema: the language in the automata layer's intermediate form, and the
/// warnings collected on the way.
#[derive(Debug, Clone)]
pub struct CompiledSchema {
    pub(crate) expr: Expr,
    pub warnings: Vec<String>,
    /// The arrays with `uniqueItems` over strings, which matchers enforce beside the automaton.
    pub(crate) uniques: Vec<unique::UniqueArray>,
}

impl CompiledSchema {
    /// A rough size of the automaton (the measure the compiler's budgets use).
    pub fn weight(&self) -> u64 {
        self.expr.weight()
    }

    /// The lazy DFA of the schema's language (`label` is kept for messages).
    pub fn dfa(
        &self,
        label: &str,
        opts: &crate::automata::dfa::RegexOptions,
    ) -> Result<crate::automata::dfa::LazyDfa> {
        crate::automata::dfa::LazyDfa::from_expr(label, &self.expr, opts)
    }

    /// [`CompiledSchema::dfa`], taking the expression apart instead of copying it.
    pub fn into_dfa(
        self,
        label: &str,
        opts: &crate::automata::dfa::RegexOptions,
    ) -> Result<crate::automata::dfa::LazyDfa> {
        crate::automata::dfa::LazyDfa::from_owned(label, self.expr, opts)
    }
}

/// Compile `schema` into the language of its JSON texts.
///
/// The schema walker recurses once per nesting level of the schema (bounded by
/// `compile::MAX_DEPTH`). Schemas with references or deep nesting are compiled on a stack
/// segment of [`crate::budget::stack::BIG_STACK`] bytes switched to on the calling thread (mapped for the
/// call, its pages touched only as deep as the walk goes, a guard page below), so that they
/// get a clear error rather than exhausting the caller's stack; shallow ones without
/// references on the caller's own stack.
/// (A thread of its own with such a stack would cost a copy of the schema and a hand-over to
/// another core, whose caches then hold what the rest of the compile reads.)
pub fn compile(schema: &Value, opts: &JsonSchemaOptions) -> Result<CompiledSchema> {
    compile_on(schema, opts, needs_big_stack(schema, opts))
}

/// [`compile`] by a caller that has asked [`needs_big_stack`] already (`big`, its answer).
pub fn compile_on(schema: &Value, opts: &JsonSchemaOptions, big: bool) -> Result<CompiledSchema> {
    // Small shallow schemas without references recurse little: compile them right here.
    if !big {
        return compile_here(schema, opts);
    }
    crate::budget::stack::on_big_stack(crate::budget::stack::BIG_STACK, || {
        compile_here(schema, opts)
    })
}

/// Builds what the process keeps across compiles, ahead of the first schema that needs it:
/// every asserted format's automata ([`prepare_formats`]: the first `uri` schema of a process
/// pays about 1 ms for them, its first combination with a pattern about 1.5 ms more) and the
/// any-JSON value of the default options (the value of every undeclared key of an object,
/// built once per process and options: about 0.1 ms). Without this, a server's first schemas
/// pay for them. Idempotent; the Python bindings run it on a second thread while the process's
/// first vocabulary is built.
pub fn prepare() {
    prepare_formats();
    let _ = compile(
        &serde_json::json!({"type": "object"}),
        &JsonSchemaOptions::default(),
    );
}

fn compile_here(schema: &Value, opts: &JsonSchemaOptions) -> Result<CompiledSchema> {
    let registry = opts
        .registry
        .iter()
        .map(|(u, t)| parse_text(&format!("registry document {u}"), t).map(|v| (u.clone(), v)))
        .collect::<Result<Vec<(String, Value)>>>()?;
    let prepared = resolve::prepare(schema, &registry)?;
    let mut c = compile::Compiler::new(&prepared.docs, opts)?;
    if prepared.dynamic {
        c.unroll_recursion();
    }
    let expr = c.compile_root()?;
    Ok(CompiledSchema {
        expr,
        warnings: c.warnings,
        uniques: c.uniques.into_iter().map(|(_, a)| a).collect(),
    })
}

/// Whether `v` nests at most 32 levels and holds no `$ref`/`$dynamicRef`/`$recursiveRef` key.
/// Whether compiling `schema` may recurse deeply, anywhere from the schema walk to the
/// automaton of its rules: with references (recursion, expansions), nesting past 32 levels, or
/// values large enough that something is built one level per element — a string (a property
/// name excluded character by character, a `not` of a `const`) or an array (`prefixItems`, an
/// item after the next) or object of more than 1,024 elements, or a number of more than 64
/// characters or with an exponent past ±64 (its bound is spelled digit by digit). Such a schema is compiled on a
/// big stack ([`crate::budget::stack`]), and its rules are built on one too.
pub fn needs_big_stack(schema: &Value, opts: &JsonSchemaOptions) -> bool {
    !(opts.registry.is_empty() && small_without_refs(schema, 0))
}

/// Elements of a schema value past which [`needs_big_stack`] says yes.
const SMALL: usize = 1024;

fn small_without_refs(v: &Value, depth: usize) -> bool {
    if depth > 32 {
        return false;
    }
    match v {
        Value::Object(m) => {
            m.len() <= SMALL
                && m.iter().all(|(k, x)| {
                    k.len() <= SMALL
                        && !matches!(k.as_str(), "$ref" | "$dynamicRef" | "$recursiveRef")
                        && small_without_refs(x, depth + 1)
                })
        }
        Value::Array(xs) => {
            xs.len() <= SMALL && xs.iter().all(|x| small_without_refs(x, depth + 1))
        }
        Value::String(s) => s.len() <= SMALL,
        // a number's bounds are spelled digit by digit: a long mantissa or a large exponent
        // (`1e-9999`, 20,000 nines) nests one level per digit
        Value::Number(n) => {
            let t = n.as_str();
            let exponent = t
                .find(['e', 'E'])
                .and_then(|i| t[i + 1..].parse::<i64>().ok())
                .unwrap_or(0);
            t.len() <= 64 && exponent.unsigned_abs() <= 64
        }
        _ => true,
    }
}

/// Any JSON object (values nest up to `max_nesting_depth` levels), with the whitespace policy.
pub fn any_object(opts: &JsonSchemaOptions) -> Result<CompiledSchema> {
    let docs = [Value::Bool(true)];
    let mut c = compile::Compiler::new(&docs, opts)?;
    Ok(CompiledSchema {
        expr: c.any_object()?,
        warnings: vec![],
        uniques: vec![],
    })
}

/// Any JSON value nested at most `depth` levels, built with the stack and with a copy per level
/// (the differential tests' pair).
#[cfg(test)]
pub(crate) fn any_value_both(opts: &JsonSchemaOptions, depth: u32) -> (Expr, Expr) {
    let docs = [Value::Bool(true)];
    let mut c = compile::Compiler::new(&docs, opts).unwrap();
    let stacked = c.any_value(depth).unwrap();
    let copied = c.any_value_copies(depth).unwrap();
    (stacked, copied)
}

/// Any JSON value nested at most `depth` levels, built with the stack.
#[cfg(test)]
pub(crate) fn any_value_stacked(opts: &JsonSchemaOptions, depth: u32) -> Expr {
    let docs = [Value::Bool(true)];
    let mut c = compile::Compiler::new(&docs, opts).unwrap();
    c.any_value(depth).unwrap()
}

/// Exactly one of the given strings (raw text, not JSON).
pub fn choice<S: AsRef<str>>(choices: &[S]) -> Hir {
    Hir::alternation(
        choices
            .iter()
            .map(|c| Hir::literal(c.as_ref().as_bytes()))
            .collect(),
    )
}

#[cfg(test)]
pub(crate) mod test_util {
    use crate::automata::dfa::{LazyDfa, DEAD};
    use crate::automata::expr::Expr;
    use crate::regex::RegexOptions;

    /// Full-match tester over an expression (a HIR or the intermediate form), on the crate's
    /// own lazy DFA.
    pub struct Re(LazyDfa);

    impl Re {
        pub fn new<E: Clone + Into<Expr>>(h: &E) -> Re {
            let x: Expr = h.clone().into();
            Re(LazyDfa::from_expr("test", &x, &RegexOptions::default()).unwrap())
        }

        pub fn is_match(&self, s: &str) -> bool {
            let st = self.0.walk(self.0.start(), s.as_bytes()).unwrap();
            st != DEAD && self.0.is_accepting(st)
        }
    }

    /// Panics unless `a` and `b` have the same language over bytes: a walk over every pair of
    /// states the two automata reach on the same input, all 256 bytes at each step.
    pub fn assert_same_language<A: Clone + Into<Expr>, B: Clone + Into<Expr>>(a: &A, b: &B) {
        let (ra, rb) = (Re::new(a), Re::new(b));
        let start = (ra.0.start(), rb.0.start());
        let mut seen = std::collections::HashSet::from([start]);
        let mut todo = vec![(start, Vec::<u8>::new())];
        while let Some(((x, y), path)) = todo.pop() {
            let acc = |r: &Re, s: u32| s != DEAD && r.0.is_accepting(s);
            assert_eq!(acc(&ra, x), acc(&rb, y), "the languages differ on {path:?}");
            for byte in 0..=255u8 {
                let nx = if x == DEAD {
                    DEAD
                } else {
                    ra.0.walk(x, &[byte]).unwrap()
                };
                let ny = if y == DEAD {
                    DEAD
                } else {
                    rb.0.walk(y, &[byte]).unwrap()
                };
                if seen.insert((nx, ny)) {
                    let mut p = path.clone();
                    p.push(byte);
                    todo.push(((nx, ny), p));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

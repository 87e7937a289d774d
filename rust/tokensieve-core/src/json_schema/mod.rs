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
//! Submodules: [`options`] (the option table), `compile` (the schema walker, `allOf` merging,
//! `oneOf` disjointness), `number` (exact numeric-range regexes), `string` (JSON string
//! spellings, ECMA-262 patterns, formats).

mod algebra;
mod charlang;
mod compile;
mod hirs;
mod multiple;
mod number;
pub mod options;
pub(crate) mod resolve;
mod string;
mod strlang;
mod validate;

use regex_syntax::hir::Hir;
use serde_json::Value;

use crate::error::Result;
pub use options::{AdditionalProperties, Formats, JsonSchemaOptions, OneOf, Whitespace};

/// A compiled schema: the language as a HIR, and the warnings collected on the way.
#[derive(Debug, Clone)]
pub struct CompiledSchema {
    pub hir: Hir,
    pub warnings: Vec<String>,
}

/// Compile `schema` into the HIR of its JSON texts.
///
/// The schema walker recurses once per nesting level of the schema (bounded by
/// `compile::MAX_DEPTH`). Schemas with references or deep nesting are compiled on a thread with
/// a large stack, so that they get a clear error rather than exhausting the caller's stack;
/// shallow ones without references on the calling thread.
pub fn compile(schema: &Value, opts: &JsonSchemaOptions) -> Result<CompiledSchema> {
    let run = || -> Result<CompiledSchema> {
        let registry = opts
            .registry
            .iter()
            .map(|(u, t)| {
                serde_json::from_str(t)
                    .map(|v| (u.clone(), v))
                    .map_err(|e| crate::error::Error::InvalidArgument(format!("registry {u}: {e}")))
            })
            .collect::<Result<Vec<(String, Value)>>>()?;
        let prepared = resolve::prepare(schema, &registry)?;
        let mut c = compile::Compiler::new(&prepared.docs, opts)?;
        let hir = c.compile_root()?;
        Ok(CompiledSchema {
            hir,
            warnings: c.warnings,
        })
    };
    // Shallow schemas without references recurse little: compile them right here (a thread
    // costs about half a millisecond, a noticeable share of a small compile).
    if opts.registry.is_empty() && shallow_without_refs(schema, 0) {
        return run();
    }
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("tokensieve-schema".into())
            .stack_size(256 << 20)
            .spawn_scoped(s, run)
            .map_err(|e| {
                crate::error::Error::InvalidArgument(format!(
                    "cannot start the schema compiler thread: {e}"
                ))
            })?
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Whether `v` nests at most 32 levels and holds no `$ref`/`$dynamicRef`/`$recursiveRef` key.
fn shallow_without_refs(v: &Value, depth: usize) -> bool {
    if depth > 32 {
        return false;
    }
    match v {
        Value::Object(m) => m.iter().all(|(k, x)| {
            !matches!(k.as_str(), "$ref" | "$dynamicRef" | "$recursiveRef")
                && shallow_without_refs(x, depth + 1)
        }),
        Value::Array(xs) => xs.iter().all(|x| shallow_without_refs(x, depth + 1)),
        _ => true,
    }
}

/// Any JSON object (values nest up to `max_nesting_depth` levels), with the whitespace policy.
pub fn any_object(opts: &JsonSchemaOptions) -> Result<CompiledSchema> {
    let docs = [Value::Bool(true)];
    let mut c = compile::Compiler::new(&docs, opts)?;
    Ok(CompiledSchema {
        hir: c.any_object()?,
        warnings: vec![],
    })
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
    use regex_syntax::hir::Hir;

    use crate::regex::{LazyDfa, RegexOptions, DEAD};

    /// Full-match tester over a HIR, on the crate's own lazy DFA.
    pub struct Re(LazyDfa);

    impl Re {
        pub fn new(h: &Hir) -> Re {
            Re(LazyDfa::from_hir("test", h, &RegexOptions::default()).unwrap())
        }

        pub fn is_match(&self, s: &str) -> bool {
            let st = self.0.walk(self.0.start(), s.as_bytes()).unwrap();
            st != DEAD && self.0.is_accepting(st)
        }
    }
}

#[cfg(test)]
mod tests;

/// The size measure the compiler's budgets use (about one unit per HIR node or literal byte).
pub fn hir_weight(h: &Hir) -> u64 {
    hirs::weight(h)
}

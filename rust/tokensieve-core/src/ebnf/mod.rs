//! Grammars: GBNF / EBNF text → [`Expr`] over UTF-8 bytes (see `docs/grammars.md`).
//!
//! * `parse` — the text → rules whose bodies are [`parse::Node`] trees (literals, classes, `.`,
//!   sequences, alternatives, repetitions, rule references by name).
//! * `left` — left recursion (direct and indirect) rewritten into repetition, rule by rule
//!   within each group of mutually recursive rules, so that no rule can call itself again
//!   before reading a character.
//! * `lower` — the rules → one [`Expr`]: a rule that is not recursive is written in place where
//!   it is used (or, when large and used more than once, called), the recursive ones are the
//!   definitions of one [`Expr::Knot`], called through the lazy DFA's stack (at most
//!   `max_stack_depth` calls open) or, in tail position, continued without a frame.
//!
//! This front end builds on the automata layer only; the token side sees its [`Expr`] like a
//! JSON Schema's.

mod left;
mod lower;
pub(crate) mod parse;

use crate::automata::expr::Expr;
use crate::error::{Error, Result};

/// A position in the grammar text (1-based line and column, in characters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pos {
    pub line: u32,
    pub col: u32,
}

pub(crate) fn grammar_error(pos: Pos, message: &str) -> Error {
    Error::Grammar {
        line: pos.line,
        column: pos.col,
        message: message.to_string(),
    }
}

/// The options of a grammar that change its language.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EbnfOptions {
    /// The rule the output must match (default `root`).
    pub start: String,
    /// Most rule calls open at once (nested recursion); a string needing more is outside the
    /// language, and the masks never lead into it (default 1000).
    pub max_stack_depth: u32,
}

/// The names of the options [`EbnfOptions`] holds (a grammar's keyword arguments beside the
/// budgets of [`crate::GrammarOptions`]).
pub const EBNF_OPTION_NAMES: &[&str] = &["start", "max_stack_depth"];

/// Default [`EbnfOptions::max_stack_depth`].
pub const DEFAULT_MAX_STACK_DEPTH: u32 = 1000;

use crate::automata::depth::stack_depth_error;
pub use crate::automata::depth::{stack_depth_option, MAX_STACK_DEPTH};

impl Default for EbnfOptions {
    fn default() -> Self {
        EbnfOptions {
            start: "root".into(),
            max_stack_depth: DEFAULT_MAX_STACK_DEPTH,
        }
    }
}

impl EbnfOptions {
    /// The options as canonical JSON (the cache and index-file key).
    pub fn canonical(&self) -> String {
        serde_json::json!({"max_stack_depth": self.max_stack_depth, "start": self.start})
            .to_string()
    }

    /// Checks the options' ranges.
    pub fn validate(&self) -> Result<()> {
        if self.max_stack_depth == 0 || self.max_stack_depth > MAX_STACK_DEPTH {
            return Err(stack_depth_error(&self.max_stack_depth.to_string()));
        }
        if self.start.is_empty() {
            return Err(Error::InvalidArgument("start must name a rule".into()));
        }
        Ok(())
    }
}

/// A compiled grammar: its language and the warnings (unreachable rules).
pub(crate) struct Compiled {
    pub expr: Expr,
    pub warnings: Vec<String>,
}

#[cfg(test)]
/// Compiles a GBNF / EBNF grammar (see the module docs); naming a special token is an error.
pub(crate) fn compile(text: &str, opts: &EbnfOptions) -> Result<Compiled> {
    compile_with(text, opts, &mut crate::atoms::AtomList::new(None))
}

/// [`compile`], the special tokens the grammar names (`<[id]>`, `Token(...)`) resolved by and
/// added to `atoms` (see [`crate::atoms`]).
pub(crate) fn compile_with(
    text: &str,
    opts: &EbnfOptions,
    atoms: &mut crate::atoms::AtomList<'_>,
) -> Result<Compiled> {
    opts.validate()?;
    let list = std::mem::replace(atoms, crate::atoms::AtomList::new(None));
    let (rules, list) = parse::parse_with(text, list)?;
    *atoms = list;
    lower::lower(rules, opts)
}

/// Lowers rules built by another front end (Lark's, over its lexer's symbols) as a GBNF
/// grammar's are (see [`lower`]).
pub(crate) fn lower_rules(rules: Vec<parse::RuleText>, opts: &EbnfOptions) -> Result<Compiled> {
    lower::lower(rules, opts)
}

#[cfg(test)]
mod tests;

//! The automata layer, at the bottom of the core: everything about languages of bytes and
//! characters that knows nothing of a front end.
//!
//! * `hir` — constructors over `regex_syntax`'s HIR and the size measure the budgets use.
//! * `spell` — the JSON spellings of decoded characters (raw, short escape, `\uXXXX`).
//! * `charlang` — character-language automata (∩, ¬, minimal DFAs) and `strlang` — the
//!   conjunctions of positive and negated string languages built on them.
//! * `expr` — the typed intermediate form the front ends hand over: HIR leaves plus the
//!   constructs a HIR cannot share (separated lists, member sequences, shared tails, excluded
//!   names, character DFAs, parts compiled once per process).
//! * `rules` — a large expression cut into a root and rules compiled when first entered.
//! * `nfa` — intermediate form → Thompson NFA, one copy of each part of those constructs.
//! * [`dfa`] — the lazy DFA every grammar runs on, with stable state ids (and, for a lexed
//!   grammar, its pairs of a parser state and a lexer state).
//! * [`lexer`] — one DFA over a grammar's lexemes (Lark's terminals), read beside its parser.
//! * [`bytedfa`] — complete byte DFAs with intersection and complement (lexemes with `&`/`~`).
//!
//! Dependency rule: this layer imports only `crate::error`, itself, std and external crates.
//! The front ends (`crate::regex`, `crate::json_schema`) build on it; the token side
//! (`crate::index`, `crate::matcher`, `crate::serialize`) sits above both. The test
//! `layers_point_one_way` (in `crate::lib`'s tests) fails when a module imports upward.

pub mod bytedfa;
pub(crate) mod charlang;
pub(crate) mod depth;
pub mod dfa;
pub(crate) mod expr;
pub(crate) mod freetext;
pub(crate) mod hir;
pub mod lexer;
pub(crate) mod nfa;
pub(crate) mod rules;
pub(crate) mod spell;
pub(crate) mod strlang;

#[cfg(test)]
mod tests;

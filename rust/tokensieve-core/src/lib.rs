//! tokensieve core: regexes compiled into token-level FSM indexes, and packed token bitmasks.
//!
//! The data flow, module by module:
//!
//! * [`vocab`] — a tokenizer's tokens decoded to the bytes they emit; EOS and special ids.
//! * [`trie`] — those byte strings in one flat depth-first array.
//! * [`regex`] — a pattern parsed and determinized lazily into a byte-level DFA.
//! * [`index`] — per DFA state, the mask of allowed tokens (one pruned trie walk, memoized).
//! * [`json_schema`] — a JSON Schema compiled into the regular language of its JSON texts.
//! * [`matcher`] — compiled grammars, per-sequence matchers, and the batch bitmask fill.
//! * [`serialize`] — precompiled grammars written to and loaded from index files.
//!
//! This crate has no Python dependency; the bindings crate wraps it.

pub mod error;
pub mod index;
pub mod json_schema;
pub mod kernel;
pub mod matcher;
mod nfa_build;
pub mod regex;
pub mod serialize;
pub mod trie;
pub mod vocab;

pub use error::{Error, Result};
pub use index::IndexStats;
pub use json_schema::JsonSchemaOptions;
pub use matcher::{
    fill_next_token_bitmask_batch, ConstraintSource, Grammar, GrammarOptions, MaskRequest, Matcher,
};
pub use vocab::{VocabKind, Vocabulary};

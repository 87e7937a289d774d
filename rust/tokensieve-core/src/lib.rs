//! tokensieve core: regexes compiled into token-level FSM indexes, and packed token bitmasks.
//!
//! The layers, bottom up (each imports only the ones below it; `tests/layers.rs` enforces it):
//!
//! * [`error`] — the one error type.
//! * [`automata`] — languages of bytes and characters: HIR helpers, JSON character spellings,
//!   character-language automata, the Thompson NFA builder and the lazy DFA (stable state ids).
//! * [`trie`], [`vocab`] — a tokenizer's tokens decoded to the bytes they emit (EOS, specials),
//!   and those byte strings in one flat depth-first array. [`kernel`] — masks applied to logits.
//! * Front ends: [`regex`] — a pattern parsed (unsupported constructs rejected) and its
//!   options; [`json_schema`] — a JSON Schema compiled into the regular language of its texts.
//! * [`index`] — per DFA state, the mask of allowed tokens (one pruned trie walk, memoized).
//! * [`matcher`] — compiled grammars, per-sequence matchers, and the batch bitmask fill.
//! * [`serialize`] — precompiled grammars written to and loaded from index files.
//!
//! This crate has no Python dependency; the bindings crate wraps it.

pub mod atoms;
pub mod automata;
pub mod budget;
pub mod ebnf;
pub mod error;
pub mod fit;
pub mod index;
pub mod json_schema;
pub mod kernel;
pub mod lark;
pub mod matcher;
pub mod reasoning;
pub mod regex;
pub mod serialize;
pub mod structural_tag;
pub mod trie;
pub mod unique;
pub mod vocab;

pub use ebnf::EbnfOptions;
pub use error::{Error, Result};
pub use index::IndexStats;
pub use json_schema::JsonSchemaOptions;
pub use lark::LarkOptions;
pub use matcher::{
    fill_next_token_bitmask_batch, CompileOptions, ConstraintSource, Grammar, GrammarOptions,
    MaskRequest, Matcher,
};
pub use vocab::{VocabKind, Vocabulary};

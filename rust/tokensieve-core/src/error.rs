//! The one error type of the core crate.
//!
//! Every fallible operation returns [`Error`]; the Python bindings map each variant to one
//! Python exception class, so messages here are written for the person who called the API:
//! what was wrong, where, and what to do about it.

use thiserror::Error as ThisError;

/// Errors raised while building vocabularies, compiling constraints or stepping matchers.
#[derive(Debug, ThisError, Clone, PartialEq, Eq)]
pub enum Error {
    /// The regex could not be parsed or uses a construct the engine does not support.
    #[error("regex error at offset {offset}: {message}")]
    Regex {
        /// Byte offset into the pattern where the problem starts.
        offset: usize,
        message: String,
    },
    /// A compile-time or run-time budget (automaton states, memory, time) was exceeded.
    #[error("budget exceeded: {0}")]
    Budget(String),
    /// The vocabulary could not be built (bad tokenizer file, inconsistent ids, ...).
    #[error("vocabulary error: {0}")]
    Vocabulary(String),
    /// The grammar needs a byte sequence that no token of the vocabulary can produce.
    #[error("no token of the vocabulary can continue the output here: the grammar needs one of the bytes {bytes} next, and no allowed token starts with them")]
    Unspellable {
        /// A human-readable list of the bytes the grammar allows next.
        bytes: String,
    },
    /// A JSON Schema is invalid or uses a keyword (or a combination) that is not supported.
    #[error("schema error at `#{pointer}` (keyword `{keyword}`): {message}")]
    Schema {
        /// The keyword at fault (empty when the whole schema is).
        keyword: String,
        /// JSON pointer of the schema object holding it (empty for the root).
        pointer: String,
        message: String,
    },
    /// An argument was out of range or inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

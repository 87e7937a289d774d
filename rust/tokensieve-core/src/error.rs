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
    /// A grammar (GBNF / EBNF) is malformed or uses a construct that is not supported.
    #[error("grammar error at line {line}, column {column}: {message}")]
    Grammar {
        /// 1-based line of the grammar text where the problem is.
        line: u32,
        /// 1-based column (in characters).
        column: u32,
        message: String,
    },
    /// A structural tag is malformed or uses a format that is not supported; `path` is the
    /// JSON path of the node (`$.format.tags[0].content`).
    #[error("structural tag error at {path}: {message}")]
    StructuralTag { path: String, message: String },
    /// An argument was out of range or inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A bug: a panic inside tokensieve, caught at the API boundary by [`catch_panic`].
    #[error(
        "internal error (a bug in tokensieve; please report it with the input that caused it): \
         {0}"
    )]
    Internal(String),
}

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// An integer option from its text (the form shared by all front ends): an integer from 0 to
/// `max`, else an [`Error::InvalidArgument`] naming the option and that range.
pub fn uint_option(name: &str, value: &str, max: u64) -> Result<u64> {
    value
        .parse::<u64>()
        .ok()
        .filter(|&v| v <= max)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{name} must be an integer from 0 to {max}, got {value:?}"
            ))
        })
}

/// Run `f`, turning a panic inside it — on this thread or on a rayon worker it waited for
/// (rayon hands a worker's panic to the thread that joins it) — into [`Error::Internal`] with
/// the panic's message. The bindings run every entry point through it, so that a bug surfaces as
/// an exception a caller can catch, never as a Python `BaseException` or a dead process.
///
/// `f` is treated as unwind safe: state it was changing may be left half changed (a poisoned
/// lock, a partly filled buffer); the caller drops or resets what the failed call touched.
pub fn catch_panic<T>(f: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|payload| Error::Internal(panic_message(payload.as_ref())))
}

/// The message of a panic payload (`panic!` with a literal or a formatted message); a
/// placeholder for other payloads.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_options_name_their_range() {
        assert_eq!(uint_option("n", "7", 9), Ok(7));
        assert_eq!(uint_option("n", "9", 9), Ok(9));
        for bad in ["10", "-1", "18446744073709551616", "x", "1.5", ""] {
            let e = uint_option("n", bad, 9).unwrap_err().to_string();
            assert!(e.contains("n must be an integer from 0 to 9"), "{e}");
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn catch_panic_passes_values_and_turns_panics_into_internal_errors() {
        assert_eq!(catch_panic(|| 7), Ok(7));
        let r: Result<()> = catch_panic(|| panic!("boom"));
        assert_eq!(r, Err(Error::Internal("boom".into())));
        let n = 3;
        let r: Result<()> = catch_panic(|| panic!("index {n} out of range"));
        let e = r.unwrap_err();
        assert_eq!(e, Error::Internal("index 3 out of range".into()));
        assert!(e.to_string().starts_with("internal error"), "{e}");
        // a real out-of-bounds index, as the code paths it guards would hit
        let v: Vec<u8> = Vec::new();
        let i = usize::MAX;
        let r = catch_panic(|| v[i]);
        assert!(
            matches!(&r, Err(Error::Internal(m)) if m.contains("index out of bounds")),
            "{r:?}"
        );
        let r: Result<()> = catch_panic(|| std::panic::panic_any(5u8));
        assert_eq!(r, Err(Error::Internal("a panic without a message".into())));
    }

    #[test]
    fn catch_panic_catches_a_panic_on_a_rayon_worker() {
        use rayon::prelude::*;
        let r = catch_panic(|| {
            (0..64u32)
                .into_par_iter()
                .map(|i| if i == 37 { panic!("row {i} failed") } else { i })
                .sum::<u32>()
        });
        assert_eq!(r, Err(Error::Internal("row 37 failed".into())));
        // the pool still works afterwards
        assert_eq!(
            catch_panic(|| (0..4u32).into_par_iter().sum::<u32>()),
            Ok(6)
        );
    }
}

//! The one mapping from the core's error to Python exceptions.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;

use tokensieve_core as core;

create_exception!(
    _core,
    TokensieveError,
    PyException,
    "Base class of tokensieve errors."
);
create_exception!(
    _core,
    RegexError,
    TokensieveError,
    "A regex could not be compiled; `.offset` is the position."
);
create_exception!(
    _core,
    BudgetError,
    TokensieveError,
    "A state, memory or time budget was exceeded."
);
create_exception!(
    _core,
    VocabularyError,
    TokensieveError,
    "A vocabulary could not be built."
);
create_exception!(
    _core,
    SchemaError,
    TokensieveError,
    "A JSON Schema is invalid or unsupported; `.keyword` and `.pointer` say where."
);
create_exception!(
    _core,
    GrammarError,
    TokensieveError,
    "A GBNF / EBNF grammar is malformed or unsupported; `.line` and `.column` say where."
);
create_exception!(
    _core,
    InternalError,
    TokensieveError,
    "A bug in tokensieve (a Rust panic, caught): the message says where; please report it."
);
create_exception!(
    _core,
    UnspellableError,
    TokensieveError,
    "The grammar needs bytes no token can produce."
);

pub(crate) fn to_py(py: Python<'_>, e: core::Error) -> PyErr {
    let msg = e.to_string();
    match e {
        core::Error::Regex { offset, .. } => {
            let err = RegexError::new_err(msg);
            let _ = err.value(py).setattr("offset", offset);
            err
        }
        core::Error::Budget(_) => BudgetError::new_err(msg),
        core::Error::Vocabulary(_) => VocabularyError::new_err(msg),
        core::Error::Unspellable { .. } => UnspellableError::new_err(msg),
        core::Error::Schema {
            keyword, pointer, ..
        } => {
            let err = SchemaError::new_err(msg);
            let _ = err.value(py).setattr("keyword", keyword);
            let _ = err.value(py).setattr("pointer", pointer);
            err
        }
        core::Error::Grammar { line, column, .. } => {
            let err = GrammarError::new_err(msg);
            let _ = err.value(py).setattr("line", line);
            let _ = err.value(py).setattr("column", column);
            let _ = err.value(py).setattr("path", py.None());
            err
        }
        core::Error::StructuralTag { path, .. } => {
            let err = GrammarError::new_err(msg);
            let _ = err.value(py).setattr("line", py.None());
            let _ = err.value(py).setattr("column", py.None());
            let _ = err.value(py).setattr("path", path);
            err
        }
        core::Error::InvalidArgument(_) => PyValueError::new_err(msg),
        core::Error::Internal(_) => InternalError::new_err(msg),
    }
}

/// Run the body of one entry point, turning a Rust panic in it (a bug; on this thread, or on a
/// rayon worker or the core's own threads it waited for) into `InternalError`, an `Exception`,
/// instead of PyO3's `PanicException`, which derives from `BaseException` and passes a
/// server's `except Exception`. The panic's message is kept; the default hook still prints it
/// with its location on stderr.
pub(crate) fn guard<T>(py: Python<'_>, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    core::error::catch_panic(f).unwrap_or_else(|e| Err(to_py(py, e)))
}

pub(crate) trait IntoPyResult<T> {
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for core::Result<T> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

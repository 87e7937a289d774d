//! Python bindings for tokensieve (`tokensieve._core`).
//!
//! Thin wrappers over `tokensieve-core`: every method converts arguments (integers of any size,
//! [`args`]), releases the GIL for anything that walks the vocabulary, maps core errors to
//! Python exceptions, and turns a Rust panic (a bug) into `InternalError` ([`errors::guard`]). Bitmask
//! buffers are validated here ([`buffers`]: dtype, shape, contiguity, device, row width);
//! logits buffers arrive as raw addresses that `tokensieve.kernels` has validated, and this
//! crate re-checks what it can (row widths, row indices). Nothing is written outside
//! `rows × row_stride` words. The bindings never import the `tokensieve` Python package.
//!
//! One module per class: [`vocabulary`], [`grammar`] (with the constraint hash and index-file
//! headers), [`matcher`], [`buffers`] (bitmask validation and batch fills), [`kernels`]
//! (the CPU logits kernel), [`errors`] (the one core-error → exception mapping); this file only
//! registers them.

/// The allocator for everything the extension allocates (see Cargo.toml).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use pyo3::prelude::*;
use tokensieve_core as core;

use crate::buffers::fill_next_token_bitmask;
use crate::errors::{
    BudgetError, GrammarError, InternalError, RegexError, SchemaError, TokensieveError,
    UnspellableError, VocabularyError,
};
use crate::grammar::{constraint_hash, read_index_header, PyGrammar};
use crate::matcher::PyMatcher;
use crate::vocabulary::{PreparedVocabulary, PyVocabulary};

mod args;
mod buffers;
mod compile_pool;
mod errors;
mod grammar;
mod kernels;
mod matcher;
mod vocabulary;

/// The compile threads of `Grammar.compile_pending` (see `compile_pool`): `lanes` (how many
/// compiles run at once before a slow one leaves its lane), `in_lanes` and `waiting` now,
/// `most_in_lanes`, `moved_to_slow` and `submitted` (compiles handed to the threads) since the
/// process started.
#[pyfunction]
fn compile_pool_stats(py: Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyDict>> {
    let s = compile_pool::stats();
    let d = pyo3::types::PyDict::new(py);
    d.set_item("lanes", s.lanes)?;
    d.set_item("in_lanes", s.in_lanes)?;
    d.set_item("waiting", s.waiting)?;
    d.set_item("most_in_lanes", s.most_in_lanes)?;
    d.set_item("moved_to_slow", s.moved_to_slow)?;
    d.set_item("submitted", s.submitted)?;
    Ok(d)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyVocabulary>()?;
    m.add_class::<PreparedVocabulary>()?;
    m.add_class::<PyGrammar>()?;
    m.add_class::<grammar::PyPendingGrammar>()?;
    m.add_class::<PyMatcher>()?;
    m.add_function(wrap_pyfunction!(fill_next_token_bitmask, m)?)?;
    m.add_function(wrap_pyfunction!(read_index_header, m)?)?;
    m.add_function(wrap_pyfunction!(constraint_hash, m)?)?;
    m.add_function(wrap_pyfunction!(compile_pool_stats, m)?)?;
    m.add("TokensieveError", py.get_type::<TokensieveError>())?;
    m.add("RegexError", py.get_type::<RegexError>())?;
    m.add("BudgetError", py.get_type::<BudgetError>())?;
    m.add("VocabularyError", py.get_type::<VocabularyError>())?;
    m.add("UnspellableError", py.get_type::<UnspellableError>())?;
    m.add("SchemaError", py.get_type::<SchemaError>())?;
    m.add("GrammarError", py.get_type::<GrammarError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    m.add("MAX_VOCAB_SIZE", core::vocab::MAX_VOCAB_SIZE)?;
    m.add("MAX_TOKEN_BYTES", core::vocab::MAX_TOKEN_BYTES)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // option names, read from the core (the one place they are defined)
    m.add("GRAMMAR_OPTIONS", core::GrammarOptions::NAMES.to_vec())?;
    m.add("EBNF_OPTIONS", core::ebnf::EBNF_OPTION_NAMES.to_vec())?;
    let defaults = pyo3::types::PyDict::new(py);
    for (name, value) in core::GrammarOptions::default().values() {
        defaults.set_item(name, value)?;
    }
    m.add("GRAMMAR_OPTION_DEFAULTS", defaults)?;
    let schema_options: Vec<&str> = core::JsonSchemaOptions::option_names().collect();
    m.add("SCHEMA_OPTIONS", schema_options)?;
    kernels::register(m)?;
    Ok(())
}

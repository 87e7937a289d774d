//! `Matcher`: one sequence's position in a grammar.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use tokensieve_core as core;

use crate::args::{fitting, opt_uint};
use crate::buffers::{bitmask_of, fill_rows, row_index};
use crate::errors::{guard, IntoPyResult};
use crate::grammar::PyGrammar;

/// One sequence's position in a grammar.
#[pyclass(module = "tokensieve._core", name = "Matcher", subclass)]
pub(crate) struct PyMatcher {
    pub(crate) inner: core::Matcher,
    pub(crate) grammar: Py<PyGrammar>,
}

#[pymethods]
impl PyMatcher {
    #[getter]
    fn grammar(&self, py: Python<'_>) -> Py<PyGrammar> {
        self.grammar.clone_ref(py)
    }

    /// Consume a token; False (and no change) if it is not allowed (any integer that is not a
    /// token id of the vocabulary included).
    fn accept_token(&mut self, py: Python<'_>, token_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        guard(py, || match fitting::<u32>(token_id)? {
            Some(t) => self.inner.accept_token(t).py(py),
            None => Ok(false),
        })
    }

    /// Consume tokens until one is refused; returns how many were accepted.
    fn accept_tokens(&mut self, py: Python<'_>, token_ids: &Bound<'_, PyAny>) -> PyResult<usize> {
        guard(py, || {
            let items: Vec<Bound<'_, PyAny>> = token_ids.extract()?;
            for (i, t) in items.iter().enumerate() {
                let ok = match fitting::<u32>(t)? {
                    Some(t) => self.inner.accept_token(t).py(py)?,
                    None => false,
                };
                if !ok {
                    return Ok(i);
                }
            }
            Ok(items.len())
        })
    }

    /// Undo the last n accepted tokens (EOS included).
    fn rollback(&mut self, py: Python<'_>, n: &Bound<'_, PyAny>) -> PyResult<()> {
        guard(py, || {
            let Some(n) = fitting::<usize>(n)? else {
                return Err(PyValueError::new_err(format!(
                    "rollback: n must be an integer from 0 to {} (the tokens in the history), \
                     got {}",
                    self.inner.history_len(),
                    n.str()?
                )));
            };
            self.inner.rollback(n).py(py)
        })
    }

    /// Back to the start with an empty history.
    fn reset(&mut self) {
        self.inner.reset()
    }

    /// EOS was consumed.
    fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }

    /// EOS is allowed now.
    fn is_accepting(&self) -> bool {
        self.inner.is_accepting()
    }

    /// How many tokens can be rolled back.
    #[getter]
    fn history_len(&self) -> usize {
        self.inner.history_len()
    }

    /// The token budget the output must fit (None: none); settable.
    #[getter]
    fn max_tokens(&self) -> Option<u32> {
        self.inner.max_tokens()
    }

    #[setter]
    fn set_max_tokens(
        &mut self,
        py: Python<'_>,
        max_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        guard(py, || {
            let max_tokens = opt_uint::<u32>("max_tokens", max_tokens, u32::MAX)?;
            self.inner.set_max_tokens(max_tokens).py(py)
        })
    }

    /// The reasoning end marker the output starts with free text up to (None: no reasoning
    /// span).
    #[getter]
    fn reasoning_end(&self) -> Option<String> {
        self.inner
            .reasoning_end()
            .map(|m| String::from_utf8_lossy(m).into_owned())
    }

    /// Reasoning tokens after which the marker is forced (None: no budget).
    #[getter]
    fn thinking_budget(&self) -> Option<u32> {
        self.inner.thinking_budget()
    }

    /// Still inside the reasoning span: the grammar has not started.
    fn is_reasoning(&self) -> bool {
        self.inner.is_reasoning()
    }

    /// Tokens of the reasoning span so far.
    #[getter]
    fn reasoning_tokens(&self) -> u32 {
        self.inner.reasoning_tokens()
    }

    /// Tokens accepted since the start (EOS included).
    #[getter]
    fn consumed(&self) -> u32 {
        self.inner.consumed()
    }

    /// Tokens the output may still have under `max_tokens` (None without a budget).
    #[getter]
    fn tokens_left(&self) -> Option<u32> {
        self.inner.tokens_left()
    }

    /// Current automaton state id (stable for the grammar's lifetime).
    #[getter]
    fn state(&self) -> u32 {
        self.inner.state()
    }

    /// Overwrite row `index` of `bitmask` (int32 `[batch, ceil(vocab_size/32)]`, numpy or torch
    /// on the CPU, or one 1-D row) with the tokens allowed next.
    #[pyo3(signature = (bitmask, index=None), text_signature = "(self, bitmask, index=0)")]
    fn fill_next_token_bitmask(
        &self,
        py: Python<'_>,
        bitmask: &Bound<'_, PyAny>,
        index: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        guard(py, || {
            let buf = bitmask_of(bitmask)?;
            let index = match index {
                Some(i) => row_index(i, buf.rows)?,
                None => 0,
            };
            fill_rows(py, &[core::MaskRequest::from(&self.inner)], &[index], &buf)
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Matcher(state={}, reasoning={}, finished={}, accepting={}, history={})",
            self.inner.state(),
            self.inner.is_reasoning(),
            self.inner.is_finished(),
            self.inner.is_accepting(),
            self.inner.history_len()
        )
    }
}

//! Filling validated bitmask buffers for many matchers at once, GIL released.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use tokensieve_core as core;

use crate::errors::IntoPyResult;
use crate::matcher::PyMatcher;

pub(crate) fn fill_raw(
    py: Python<'_>,
    reqs: &[core::MaskRequest],
    indices: &[usize],
    address: usize,
    rows: usize,
    row_words: usize,
) -> PyResult<()> {
    if address == 0 || rows == 0 || row_words == 0 {
        return Err(PyValueError::new_err("empty or null bitmask"));
    }
    if !address.is_multiple_of(std::mem::align_of::<u32>()) {
        return Err(PyValueError::new_err(
            "bitmask memory is not 4-byte aligned",
        ));
    }
    for r in reqs {
        let need = r.grammar.vocab().mask_words();
        if need != row_words {
            return Err(PyValueError::new_err(format!(
                "bitmask rows have {row_words} int32 words but the vocabulary (vocab_size={}) needs \
                 {need}: allocate with allocate_token_bitmask(batch, vocab.vocab_size)",
                r.grammar.vocab().vocab_size()
            )));
        }
    }
    let total = rows
        .checked_mul(row_words)
        .ok_or_else(|| PyValueError::new_err("bitmask too large"))?;
    // SAFETY: the Python layer checked that `address` points at a writable, C-contiguous int32
    // buffer of exactly `rows × row_words` elements that stays alive for this call (the caller
    // holds a reference to it); u32 and i32 share size and alignment.
    let buf: &mut [u32] = unsafe { std::slice::from_raw_parts_mut(address as *mut u32, total) };
    py.detach(|| core::fill_next_token_bitmask_batch(reqs, indices, buf, row_words))
        .py(py)
}

/// Internal: fill rows `indices[k]` of a validated bitmask buffer for `matchers[k]`, in parallel
/// with the GIL released.
#[pyfunction]
pub(crate) fn _fill_next_token_bitmask(
    py: Python<'_>,
    matchers: Vec<PyRef<'_, PyMatcher>>,
    address: usize,
    rows: usize,
    row_words: usize,
    indices: Vec<usize>,
) -> PyResult<()> {
    let reqs: Vec<core::MaskRequest> = matchers
        .iter()
        .map(|m| core::MaskRequest::from(&m.inner))
        .collect();
    drop(matchers);
    fill_raw(py, &reqs, &indices, address, rows, row_words)
}

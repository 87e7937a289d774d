//! `_apply_token_bitmask_cpu`: the Rust logits-masking kernel over raw tensor memory.
//!
//! `tokensieve.kernels` validates the tensors (dtype, device, shapes, strides, indices) and
//! passes their addresses; this module re-checks everything it can (null, alignment, overlap of
//! the two buffers, sizes, index range) before building slices, and the core kernel never writes
//! outside `(rows - 1) * row_stride + vocab_cols` elements of the logits.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use tokensieve_core::kernel::{self, LogitsLayout};

/// `dtype_code`: 0 = float32, 1 = float16, 2 = bfloat16.
const DTYPE_F32: u8 = 0;
const DTYPE_F16: u8 = 1;
const DTYPE_BF16: u8 = 2;

fn err(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}

/// Internal: set disallowed logits to -inf in place (see `tokensieve.apply_token_bitmask_inplace`).
///
/// `logits_address` points at `rows` rows of `vocab_cols` elements, `row_stride` elements apart;
/// `bitmask_address` at `bitmask_rows × bitmask_words` contiguous int32 words. Row `i` of the
/// logits is masked by row `i` of the bitmask, for every row or for the rows in `indices`.
#[pyfunction]
#[pyo3(signature = (
    logits_address, dtype_code, rows, row_stride, vocab_cols,
    bitmask_address, bitmask_rows, bitmask_words, indices, vocab_size
))]
#[allow(clippy::too_many_arguments)]
fn _apply_token_bitmask_cpu(
    py: Python<'_>,
    logits_address: usize,
    dtype_code: u8,
    rows: usize,
    row_stride: usize,
    vocab_cols: usize,
    bitmask_address: usize,
    bitmask_rows: usize,
    bitmask_words: usize,
    indices: Option<Vec<usize>>,
    vocab_size: usize,
) -> PyResult<()> {
    let elem = match dtype_code {
        DTYPE_F32 => 4usize,
        DTYPE_F16 | DTYPE_BF16 => 2,
        other => return Err(err(format!("unknown logits dtype code {other}"))),
    };
    let row_stride = if rows <= 1 { vocab_cols } else { row_stride };
    let layout = LogitsLayout {
        rows,
        row_stride,
        cols: vocab_cols,
    };
    let logits_len = layout
        .required_len()
        .ok_or_else(|| err("logits layout overflows"))?;
    let mask_len = bitmask_rows
        .checked_mul(bitmask_words)
        .ok_or_else(|| err("bitmask size overflows"))?;
    if logits_len == 0 {
        return Ok(());
    }
    if mask_len == 0 {
        return Err(err("the bitmask is empty"));
    }
    if logits_address == 0 || bitmask_address == 0 {
        return Err(err("null tensor address"));
    }
    if logits_address & (elem - 1) != 0 {
        return Err(err("logits memory is not aligned to its element size"));
    }
    if bitmask_address & 3 != 0 {
        return Err(err("bitmask memory is not 4-byte aligned"));
    }
    let logits_bytes = logits_len
        .checked_mul(elem)
        .filter(|&b| b <= isize::MAX as usize && logits_address.checked_add(b).is_some())
        .ok_or_else(|| err("logits buffer too large"))?;
    let mask_bytes = mask_len
        .checked_mul(4)
        .filter(|&b| b <= isize::MAX as usize && bitmask_address.checked_add(b).is_some())
        .ok_or_else(|| err("bitmask buffer too large"))?;
    // A `&mut` logits slice must not alias the bitmask slice.
    if logits_address < bitmask_address + mask_bytes
        && bitmask_address < logits_address + logits_bytes
    {
        return Err(err("the logits and the bitmask share memory"));
    }
    // SAFETY: the Python layer checked that `bitmask_address` is a contiguous CPU int32 tensor of
    // `bitmask_rows × bitmask_words` elements, alive for this call (the caller holds it).
    let bitmask: &[i32] =
        unsafe { std::slice::from_raw_parts(bitmask_address as *const i32, mask_len) };
    let idx = indices.as_deref();
    crate::errors::guard(py, || {
        let result = if dtype_code == DTYPE_F32 {
            // SAFETY: the Python layer checked that `logits_address` is a writable CPU float32 tensor
            // whose rows are `row_stride` elements apart with unit column stride, so the span of
            // `logits_len` elements lies inside its storage; it does not overlap the bitmask (checked
            // above) and is alive for this call. Gaps between rows are never written.
            let logits: &mut [f32] =
                unsafe { std::slice::from_raw_parts_mut(logits_address as *mut f32, logits_len) };
            py.detach(|| {
                kernel::apply_token_bitmask_f32(
                    logits,
                    layout,
                    bitmask,
                    bitmask_rows,
                    bitmask_words,
                    idx,
                    vocab_size,
                )
            })
        } else {
            // SAFETY: as above, for a float16 / bfloat16 tensor viewed as its u16 bit patterns.
            let logits: &mut [u16] =
                unsafe { std::slice::from_raw_parts_mut(logits_address as *mut u16, logits_len) };
            py.detach(|| {
                if dtype_code == DTYPE_F16 {
                    kernel::apply_token_bitmask_f16(
                        logits,
                        layout,
                        bitmask,
                        bitmask_rows,
                        bitmask_words,
                        idx,
                        vocab_size,
                    )
                } else {
                    kernel::apply_token_bitmask_bf16(
                        logits,
                        layout,
                        bitmask,
                        bitmask_rows,
                        bitmask_words,
                        idx,
                        vocab_size,
                    )
                }
            })
        };
        result.map_err(|e| err(e.to_string()))
    })
}

/// Add the kernel functions to the `_core` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_apply_token_bitmask_cpu, m)?)?;
    Ok(())
}

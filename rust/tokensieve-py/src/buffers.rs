//! Bitmask buffers: validation of numpy arrays and CPU torch tensors, and filling them for many
//! matchers at once with the GIL released.
//!
//! The checks read only the buffer object's own attributes (numpy's `__array_interface__` and
//! flags, torch's dtype, device, contiguity and `data_ptr`); nothing here imports the Python
//! package, and nothing imports torch (a tensor exists only if torch is already loaded).

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

use tokensieve_core as core;

use crate::args::fitting;
use crate::errors::{guard, IntoPyResult};
use crate::matcher::PyMatcher;

/// A validated bitmask: a writable, C-contiguous int32 buffer of `rows × row_words` elements.
#[derive(Clone, Copy)]
pub(crate) struct Bitmask {
    address: usize,
    pub(crate) rows: usize,
    row_words: usize,
}

fn value_error<T>(msg: String) -> PyResult<T> {
    Err(PyValueError::new_err(msg))
}

static NDARRAY: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static NP_INT32: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static TENSOR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static TORCH_INT32: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `torch.Tensor` and `torch.int32` if torch is loaded (a tensor cannot exist otherwise);
/// cached once found, never imported here.
fn torch_types<'py>(py: Python<'py>) -> PyResult<Option<(Bound<'py, PyType>, Bound<'py, PyAny>)>> {
    if TENSOR.get(py).is_none() {
        let modules = py
            .import(intern!(py, "sys"))?
            .getattr(intern!(py, "modules"))?;
        let Some(torch) = modules
            .downcast::<PyDict>()?
            .get_item(intern!(py, "torch"))?
        else {
            return Ok(None);
        };
        let int32 = torch.getattr(intern!(py, "int32"))?.unbind();
        let tensor = torch
            .getattr(intern!(py, "Tensor"))?
            .downcast_into::<PyType>()?;
        let _ = TORCH_INT32.set(py, int32);
        let _ = TENSOR.set(py, tensor.unbind());
    }
    match (TENSOR.get(py), TORCH_INT32.get(py)) {
        (Some(t), Some(i)) => Ok(Some((t.bind(py).clone(), i.bind(py).clone()))),
        _ => Ok(None),
    }
}

/// Validate a numpy array or a CPU torch tensor (1-D is one row).
pub(crate) fn bitmask_of(obj: &Bound<'_, PyAny>) -> PyResult<Bitmask> {
    let py = obj.py();
    let ndarray = NDARRAY.import(py, "numpy", "ndarray")?;
    let (address, shape): (usize, Vec<usize>) = if obj.is_instance(ndarray)? {
        let np_int32 = NP_INT32.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            let numpy = py.import("numpy")?;
            Ok(numpy.getattr("dtype")?.call1(("int32",))?.unbind())
        })?;
        let dtype = obj.getattr(intern!(py, "dtype"))?;
        if !dtype.eq(np_int32.bind(py))? {
            return value_error(format!(
                "bitmask must have dtype int32, got {}",
                dtype.str()?
            ));
        }
        let shape = shape_of(obj)?;
        let flags = obj.getattr(intern!(py, "flags"))?;
        if !flags
            .getattr(intern!(py, "c_contiguous"))?
            .extract::<bool>()?
        {
            return value_error(
                "bitmask rows must be contiguous (C order); got a strided array".into(),
            );
        }
        if !flags.getattr(intern!(py, "writeable"))?.extract::<bool>()? {
            return value_error("bitmask is read-only".into());
        }
        let iface = obj.getattr(intern!(py, "__array_interface__"))?;
        let data = iface
            .downcast::<PyDict>()?
            .get_item(intern!(py, "data"))?
            .ok_or_else(|| PyValueError::new_err("bitmask has no data pointer"))?;
        (data.get_item(0)?.extract()?, shape)
    } else {
        let torch = torch_types(py)?;
        let int32 = match &torch {
            Some((tensor, int32)) if obj.is_instance(tensor)? => int32,
            _ => {
                let name = obj.get_type().name()?;
                return value_error(format!(
                    "bitmask must be a numpy array or a torch tensor, got {name}"
                ));
            }
        };
        let dtype = obj.getattr(intern!(py, "dtype"))?;
        if !dtype.is(int32) {
            return value_error(format!(
                "bitmask must have dtype torch.int32, got {}",
                dtype.str()?
            ));
        }
        let device = obj.getattr(intern!(py, "device"))?;
        if !device.getattr(intern!(py, "type"))?.eq("cpu")? {
            return value_error(format!(
                "bitmask must be on the CPU (got device {}); fill on the CPU and copy to the \
                 device with .to(device, non_blocking=True)",
                device.str()?
            ));
        }
        let shape = shape_of(obj)?;
        if !obj
            .call_method0(intern!(py, "is_contiguous"))?
            .extract::<bool>()?
        {
            return value_error("bitmask rows must be contiguous; call .contiguous() first".into());
        }
        if obj
            .getattr(intern!(py, "requires_grad"))?
            .extract::<bool>()?
        {
            return value_error("bitmask must not require grad".into());
        }
        (obj.call_method0(intern!(py, "data_ptr"))?.extract()?, shape)
    };
    let (rows, row_words) = match shape[..] {
        [w] => (1, w),
        [r, w] => (r, w),
        _ => unreachable!("checked by shape_of"),
    };
    if rows == 0 || row_words == 0 {
        return value_error(format!("bitmask is empty (shape {})", shape_text(&shape)));
    }
    Ok(Bitmask {
        address,
        rows,
        row_words,
    })
}

/// The shape of a buffer, checked to be 1-D (one row) or 2-D.
fn shape_of(obj: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    let shape: Vec<usize> = obj.getattr(intern!(obj.py(), "shape"))?.extract()?;
    if !(1..=2).contains(&shape.len()) {
        return value_error(format!(
            "bitmask must be 1-D or 2-D, got shape {}",
            shape_text(&shape)
        ));
    }
    Ok(shape)
}

/// Python's spelling of a shape tuple.
fn shape_text(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A row index of a bitmask with `rows` rows: a `ValueError` naming the range otherwise.
pub(crate) fn row_index(i: &Bound<'_, PyAny>, rows: usize) -> PyResult<usize> {
    match fitting::<usize>(i)? {
        Some(i) if i < rows => Ok(i),
        _ => value_error(format!(
            "index {} is out of range: the bitmask has {rows} rows (index 0 to {})",
            i.str()?,
            rows - 1
        )),
    }
}

/// Fill rows `indices[k]` of `bitmask` for `reqs[k]`, GIL released. Indices must be in range.
pub(crate) fn fill_rows(
    py: Python<'_>,
    reqs: &[core::MaskRequest],
    indices: &[usize],
    bitmask: &Bitmask,
) -> PyResult<()> {
    let Bitmask {
        address,
        rows,
        row_words,
    } = *bitmask;
    if address == 0 {
        return value_error("bitmask has a null data pointer".into());
    }
    if !address.is_multiple_of(std::mem::align_of::<u32>()) {
        return value_error("bitmask memory is not 4-byte aligned".into());
    }
    for r in reqs {
        let need = r.grammar.vocab().mask_words();
        if need != row_words {
            return value_error(format!(
                "bitmask rows have {row_words} int32 words but the vocabulary (vocab_size={}) needs \
                 {need}: allocate with allocate_token_bitmask(batch, vocab.vocab_size)",
                r.grammar.vocab().vocab_size()
            ));
        }
    }
    let total = rows
        .checked_mul(row_words)
        .ok_or_else(|| PyValueError::new_err("bitmask too large"))?;
    // SAFETY: `bitmask_of` checked that `address` points at a writable, C-contiguous int32
    // buffer of exactly `rows × row_words` elements; the caller holds a reference to the buffer
    // object for the whole call, so it stays alive; u32 and i32 share size and alignment.
    let buf: &mut [u32] = unsafe { std::slice::from_raw_parts_mut(address as *mut u32, total) };
    py.detach(|| core::fill_next_token_bitmask_batch(reqs, indices, buf, row_words))
        .py(py)
}

/// Fill one bitmask row per matcher, in parallel with the GIL released.
///
/// ``matchers[k]`` overwrites row ``indices[k]`` (row ``k`` when ``indices`` is None); other
/// rows are left alone. ``bitmask`` is an int32 numpy array or CPU torch tensor of shape
/// ``[rows, ceil(vocab_size / 32)]`` (1-D: one row). Raises ``ValueError`` for a wrong dtype,
/// shape or device, non-contiguous rows, out-of-range or duplicate indices, or rows narrower or
/// wider than the vocabulary needs.
#[pyfunction]
#[pyo3(signature = (matchers, bitmask, indices=None))]
pub(crate) fn fill_next_token_bitmask(
    py: Python<'_>,
    matchers: Vec<PyRef<'_, PyMatcher>>,
    bitmask: &Bound<'_, PyAny>,
    indices: Option<Vec<Bound<'_, PyAny>>>,
) -> PyResult<()> {
    guard(py, || {
        let buf = bitmask_of(bitmask)?;
        let rows = buf.rows;
        let idx: Vec<usize> = match indices {
            None => {
                if matchers.len() > rows {
                    return value_error(format!(
                        "{} matchers but the bitmask has only {rows} rows",
                        matchers.len()
                    ));
                }
                (0..matchers.len()).collect()
            }
            Some(indices) => {
                if indices.len() != matchers.len() {
                    return value_error(format!(
                        "{} matchers but {} indices",
                        matchers.len(),
                        indices.len()
                    ));
                }
                let mut seen = std::collections::HashSet::new();
                let mut out = Vec::with_capacity(indices.len());
                for i in &indices {
                    out.push(row_index(i, rows)?);
                }
                for &i in &out {
                    if !seen.insert(i) {
                        return value_error("indices contain duplicates".into());
                    }
                }
                out
            }
        };
        if matchers.is_empty() {
            return Ok(());
        }
        let reqs: Vec<core::MaskRequest> = matchers
            .iter()
            .map(|m| core::MaskRequest::from(&m.inner))
            .collect();
        drop(matchers);
        fill_rows(py, &reqs, &idx, &buf)
    })
}

//! Integer arguments. Any Python `int` is taken; one outside the range an argument allows is a
//! `ValueError` naming the argument and that range (never a bare `OverflowError` from the
//! conversion), and token ids outside every vocabulary are simply not tokens.

use std::fmt::Display;

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;

/// `v` as `T` when it is an integer that fits; `Ok(None)` for an integer that does not (too
/// large or negative); the conversion's own error (`TypeError`) for anything else.
pub(crate) fn fitting<'py, T: FromPyObject<'py>>(v: &Bound<'py, PyAny>) -> PyResult<Option<T>> {
    match v.extract::<T>() {
        Ok(x) => Ok(Some(x)),
        Err(e) if e.is_instance_of::<PyOverflowError>(v.py()) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The `ValueError` for an integer argument outside `0..=max`.
pub(crate) fn out_of_range(name: &str, v: &Bound<'_, PyAny>, max: impl Display) -> PyErr {
    PyValueError::new_err(format!(
        "{name} must be an integer from 0 to {max}, got {}",
        v.str().map(|s| s.to_string()).unwrap_or_default()
    ))
}

/// An integer argument that must fit `T` (`max` is `T::MAX`, for the message).
pub(crate) fn uint<'py, T: FromPyObject<'py>>(
    name: &str,
    v: &Bound<'py, PyAny>,
    max: impl Display,
) -> PyResult<T> {
    fitting(v)?.ok_or_else(|| out_of_range(name, v, max))
}

/// An optional integer argument that must fit `T` (None stays None).
pub(crate) fn opt_uint<'py, T: FromPyObject<'py>>(
    name: &str,
    v: Option<&Bound<'py, PyAny>>,
    max: impl Display,
) -> PyResult<Option<T>> {
    v.filter(|v| !v.is_none())
        .map(|v| uint(name, v, max))
        .transpose()
}

/// A list of token ids, each from 0 to `u32::MAX`.
pub(crate) fn token_ids(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    let items: Vec<Bound<'_, PyAny>> = v.extract()?;
    items
        .iter()
        .map(|x| {
            fitting::<u32>(x)?.ok_or_else(|| {
                PyValueError::new_err(format!(
                    "{name} must hold token ids from 0 to {}, got {}",
                    u32::MAX,
                    x.str().map(|s| s.to_string()).unwrap_or_default()
                ))
            })
        })
        .collect()
}

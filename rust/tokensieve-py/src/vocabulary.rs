//! `Vocabulary`: token id → bytes for a model's logits width, EOS and special ids.
//!
//! Constructors that read tokenizer objects or files through Python libraries
//! (`from_pretrained`, `from_tiktoken`, `from_tekken`) are classmethods of the Python subclass
//! `tokensieve.Vocabulary`; this class takes plain data only.
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyType};

use tokensieve_core as core;

use crate::args::{fitting, token_ids};
use crate::errors::{guard, IntoPyResult};

/// Token id → bytes for a model's whole logits width, with EOS and special ids.
#[pyclass(module = "tokensieve._core", name = "Vocabulary", frozen, subclass)]
pub(crate) struct PyVocabulary {
    pub(crate) inner: Arc<core::Vocabulary>,
}

/// A vocabulary already built by the core, handed to `Vocabulary.__new__` by
/// [`PyVocabulary::from_tokenizer_json`] so that subclasses get instances of their own type.
/// A `tokenizer.json` document given as `str` or as UTF-8 `bytes` (read from a file without
/// decoding it in Python); bytes that are not UTF-8 are a `ValueError`, as Python's decoding
/// would raise (a `UnicodeDecodeError` is one).
pub(crate) struct JsonText(String);

impl<'py> FromPyObject<'py> for JsonText {
    fn extract_bound(ob: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(b) = ob.downcast::<pyo3::types::PyBytes>() {
            return String::from_utf8(b.as_bytes().to_vec())
                .map(JsonText)
                .map_err(|e| {
                    pyo3::exceptions::PyValueError::new_err(format!(
                        "tokenizer.json is not UTF-8 text: {}",
                        e.utf8_error()
                    ))
                });
        }
        Ok(JsonText(ob.extract()?))
    }
}

#[pyclass(module = "tokensieve._core", name = "_PreparedVocabulary", frozen)]
pub(crate) struct PreparedVocabulary {
    inner: Arc<core::Vocabulary>,
}

/// Runs `build` (a vocabulary's construction). The first time in a process, a thread of its
/// own starts building what the process keeps across compiles ([`core::json_schema::prepare`]:
/// the asserted formats' automata, the default any-JSON value), so that no request pays for it
/// later (the first `uri` schema of a process: about 1 ms more, the first `uri` with a pattern
/// about 1.5 ms more). It is not waited for: a compile that needs one of them before it is
/// ready builds it (or waits for it) as before, and the vocabulary is not held up.
fn with_process_prepared<T>(build: impl FnOnce() -> T) -> T {
    static PREPARED: std::sync::Once = std::sync::Once::new();
    PREPARED.call_once(|| {
        let prepare = || {
            let _ = std::panic::catch_unwind(core::json_schema::prepare);
        };
        if std::thread::Builder::new()
            .name("tokensieve-prepare".into())
            .spawn(prepare)
            .is_err()
        {
            prepare();
        }
    });
    build()
}

#[pymethods]
impl PyVocabulary {
    #[new]
    #[pyo3(signature = (tokens, eos_token_ids, special_token_ids=None, vocab_size=None))]
    fn new(
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        eos_token_ids: &Bound<'_, PyAny>,
        special_token_ids: Option<&Bound<'_, PyAny>>,
        vocab_size: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(py, || {
            let eos_token_ids = token_ids("eos_token_ids", eos_token_ids)?;
            let special_token_ids = match special_token_ids {
                Some(s) if !s.is_none() => token_ids("special_token_ids", s)?,
                _ => Vec::new(),
            };
            let vocab_size = vocab_size_arg(py, vocab_size)?;
            if let Ok(ready) = tokens.downcast::<PreparedVocabulary>() {
                if !eos_token_ids.is_empty()
                    || !special_token_ids.is_empty()
                    || vocab_size.is_some()
                {
                    return Err(PyValueError::new_err(
                        "a prepared vocabulary takes no other arguments",
                    ));
                }
                return Ok(PyVocabulary {
                    inner: ready.get().inner.clone(),
                });
            }
            let tokens: Vec<Vec<u8>> = tokens.extract()?;
            let v = py
                .detach(|| {
                    with_process_prepared(|| {
                        core::Vocabulary::new(tokens, eos_token_ids, special_token_ids, vocab_size)
                    })
                })
                .py(py)?;
            Ok(PyVocabulary { inner: Arc::new(v) })
        })
    }

    /// Build from the text of a Hugging Face `tokenizer.json`. EOS ids: `eos_token_ids` if
    /// given, else the added tokens named in `eos_token_names`, else common EOS spellings.
    #[classmethod]
    #[pyo3(signature = (json, vocab_size=None, eos_token_ids=None, eos_token_names=Vec::new()))]
    fn from_tokenizer_json<'py>(
        cls: &Bound<'py, PyType>,
        json: JsonText,
        vocab_size: Option<&Bound<'py, PyAny>>,
        eos_token_ids: Option<&Bound<'py, PyAny>>,
        eos_token_names: Vec<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = cls.py();
        guard(py, || {
            let vocab_size = vocab_size_arg(py, vocab_size)?;
            let eos_token_ids = match eos_token_ids {
                Some(e) if !e.is_none() => Some(token_ids("eos_token_ids", e)?),
                _ => None,
            };
            let v = py
                .detach(|| {
                    with_process_prepared(|| {
                        core::Vocabulary::from_tokenizer_json(
                            &json.0,
                            vocab_size,
                            eos_token_ids,
                            &eos_token_names,
                        )
                    })
                })
                .py(py)?;
            let ready = PreparedVocabulary { inner: Arc::new(v) };
            cls.call1((ready, Vec::<u32>::new()))
        })
    }

    /// The model's logits width; bitmask rows have ceil(vocab_size / 32) words.
    #[getter]
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    /// Number of ids the tokenizer defines.
    #[getter]
    fn tokenizer_size(&self) -> usize {
        self.inner.tokenizer_size()
    }

    /// "byte_level", "sentencepiece" or "raw".
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind().name()
    }

    #[getter]
    fn eos_token_ids(&self) -> Vec<u32> {
        self.inner.eos_ids().to_vec()
    }

    #[getter]
    fn special_token_ids(&self) -> Vec<u32> {
        self.inner.special_ids().to_vec()
    }

    /// A stable 64-bit fingerprint of tokens, EOS ids, special ids and vocab_size (hex).
    #[getter]
    fn fingerprint(&self) -> String {
        format!("{:016x}", self.inner.fingerprint())
    }

    /// The bytes a regular token emits; None for special, padding and out-of-range ids.
    fn token_bytes<'py>(
        &self,
        py: Python<'py>,
        token_id: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        guard(py, || {
            Ok(fitting::<u32>(token_id)?
                .and_then(|t| self.inner.token_bytes(t))
                .map(|b| PyBytes::new(py, b)))
        })
    }

    fn __len__(&self) -> usize {
        self.inner.vocab_size()
    }

    fn __repr__(&self) -> String {
        format!(
            "Vocabulary(vocab_size={}, kind={:?}, eos_token_ids={:?})",
            self.inner.vocab_size(),
            self.inner.kind().name(),
            self.inner.eos_ids()
        )
    }
}

/// The `vocab_size` argument: an integer that does not fit `usize` is outside the supported
/// sizes, with the core's error for them.
fn vocab_size_arg(py: Python<'_>, v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<usize>> {
    match v {
        Some(v) if !v.is_none() => match fitting::<usize>(v)? {
            Some(n) => Ok(Some(n)),
            None => Err(core::vocab::vocab_size_error(&v.str()?.to_string())).py(py),
        },
        _ => Ok(None),
    }
}

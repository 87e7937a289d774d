//! `Vocabulary`: token id → bytes for a model's logits width, EOS and special ids.
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use tokensieve_core as core;

use crate::errors::IntoPyResult;

/// Token id → bytes for a model's whole logits width, with EOS and special ids.
#[pyclass(module = "tokensieve._core", name = "Vocabulary", frozen, subclass)]
pub(crate) struct PyVocabulary {
    pub(crate) inner: Arc<core::Vocabulary>,
}

#[pymethods]
impl PyVocabulary {
    #[new]
    #[pyo3(signature = (tokens, eos_token_ids, special_token_ids=Vec::new(), vocab_size=None))]
    fn new(
        py: Python<'_>,
        tokens: Vec<Vec<u8>>,
        eos_token_ids: Vec<u32>,
        special_token_ids: Vec<u32>,
        vocab_size: Option<usize>,
    ) -> PyResult<Self> {
        let v = py
            .detach(|| core::Vocabulary::new(tokens, eos_token_ids, special_token_ids, vocab_size))
            .py(py)?;
        Ok(PyVocabulary { inner: Arc::new(v) })
    }

    /// Build from the text of a Hugging Face `tokenizer.json`.
    #[staticmethod]
    #[pyo3(signature = (json, vocab_size=None, eos_token_ids=None, eos_token_names=Vec::new()))]
    fn _from_tokenizer_json(
        py: Python<'_>,
        json: String,
        vocab_size: Option<usize>,
        eos_token_ids: Option<Vec<u32>>,
        eos_token_names: Vec<String>,
    ) -> PyResult<Self> {
        let v = py
            .detach(|| {
                core::Vocabulary::from_tokenizer_json(
                    &json,
                    vocab_size,
                    eos_token_ids,
                    &eos_token_names,
                )
            })
            .py(py)?;
        Ok(PyVocabulary { inner: Arc::new(v) })
    }

    /// Build from a `transformers` tokenizer, a `tokenizers.Tokenizer`, a `tokenizer.json` path
    /// or a folder holding one. EOS ids default to the tokenizer's (generation_config.json, then
    /// tokenizer_config.json, then common EOS spellings).
    #[staticmethod]
    #[pyo3(signature = (tokenizer, vocab_size=None, eos_token_ids=None))]
    fn from_pretrained(
        py: Python<'_>,
        tokenizer: &Bound<'_, PyAny>,
        vocab_size: Option<usize>,
        eos_token_ids: Option<Vec<u32>>,
    ) -> PyResult<Self> {
        let src = py
            .import("tokensieve.tokenizers")?
            .getattr("tokenizer_json_source")?
            .call1((tokenizer,))?;
        let (json, ids, names): (String, Option<Vec<u32>>, Vec<String>) = src.extract()?;
        let eos = eos_token_ids.or(ids);
        let v = py
            .detach(|| core::Vocabulary::from_tokenizer_json(&json, vocab_size, eos, &names))
            .py(py)?;
        Ok(PyVocabulary { inner: Arc::new(v) })
    }

    /// Build from a tiktoken rank file (`base64-token rank` per line). `special_tokens` maps
    /// names to ids (placed after the ranks if their ids are larger).
    #[staticmethod]
    #[pyo3(signature = (path, eos_token_ids, special_token_ids=Vec::new(), vocab_size=None))]
    fn from_tiktoken(
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        eos_token_ids: Vec<u32>,
        special_token_ids: Vec<u32>,
        vocab_size: Option<usize>,
    ) -> PyResult<Self> {
        let tokens: Vec<Vec<u8>> = py
            .import("tokensieve.tokenizers")?
            .getattr("tiktoken_source")?
            .call1((path,))?
            .extract()?;
        Self::new(py, tokens, eos_token_ids, special_token_ids, vocab_size)
    }

    /// Build from a Mistral Tekken JSON (default: the one shipped in `mistral-common`).
    #[staticmethod]
    #[pyo3(signature = (path=None, vocab_size=None, eos_token_ids=None))]
    fn from_tekken(
        py: Python<'_>,
        path: Option<&Bound<'_, PyAny>>,
        vocab_size: Option<usize>,
        eos_token_ids: Option<Vec<u32>>,
    ) -> PyResult<Self> {
        let src = py
            .import("tokensieve.tokenizers")?
            .getattr("tekken_source")?
            .call1((path,))?;
        let (tokens, eos, special, size): (Vec<Vec<u8>>, Vec<u32>, Vec<u32>, usize) =
            src.extract()?;
        Self::new(
            py,
            tokens,
            eos_token_ids.unwrap_or(eos),
            special,
            Some(vocab_size.unwrap_or(size)),
        )
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
    fn token_bytes<'py>(&self, py: Python<'py>, token_id: i64) -> Option<Bound<'py, PyBytes>> {
        if token_id < 0 || token_id > u32::MAX as i64 {
            return None;
        }
        self.inner
            .token_bytes(token_id as u32)
            .map(|b| PyBytes::new(py, b))
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

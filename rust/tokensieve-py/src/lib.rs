//! Python bindings for tokensieve (`tokensieve._core`).
//!
//! Thin wrappers over `tokensieve-core`: every method converts arguments, releases the GIL for
//! anything that walks the vocabulary, and maps core errors to Python exceptions. Bitmask and
//! logits buffers arrive as raw addresses that the Python layer has already validated (dtype,
//! shape, contiguity, device); this crate re-checks what it can (row widths, row indices) and
//! never writes outside `rows × row_stride` words.

/// The allocator for everything the extension allocates (see Cargo.toml).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::Duration;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use tokensieve_core as core;
use tokensieve_core::regex::RegexOptions;

mod kernels;

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
    UnspellableError,
    TokensieveError,
    "The grammar needs bytes no token can produce."
);

fn to_py(py: Python<'_>, e: core::Error) -> PyErr {
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
        core::Error::InvalidArgument(_) => PyValueError::new_err(msg),
    }
}

trait IntoPyResult<T> {
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for core::Result<T> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

/// Token id → bytes for a model's whole logits width, with EOS and special ids.
#[pyclass(module = "tokensieve._core", name = "Vocabulary", frozen, subclass)]
struct PyVocabulary {
    inner: Arc<core::Vocabulary>,
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

/// A compiled constraint for one vocabulary; immutable and shareable across threads.
#[pyclass(module = "tokensieve._core", name = "Grammar", frozen, subclass)]
struct PyGrammar {
    inner: Arc<core::Grammar>,
    vocab: Py<PyVocabulary>,
}

fn grammar_options(
    max_states: Option<usize>,
    max_nfa_bytes: Option<usize>,
    mask_cache_bytes: Option<usize>,
    max_compile_seconds: Option<f64>,
) -> PyResult<core::GrammarOptions> {
    let mut o = core::GrammarOptions::default();
    let mut r = RegexOptions::default();
    if let Some(v) = max_states {
        r.max_states = v;
    }
    if let Some(v) = max_nfa_bytes {
        r.max_nfa_bytes = v;
    }
    o.regex = r;
    if let Some(v) = mask_cache_bytes {
        o.mask_cache_bytes = v;
    }
    if let Some(s) = max_compile_seconds {
        if !(s > 0.0 && s.is_finite()) {
            return Err(PyValueError::new_err(
                "max_compile_seconds must be a positive number",
            ));
        }
        o.max_compile_time = Duration::from_secs_f64(s);
    }
    Ok(o)
}

/// JSON text of a schema given as JSON text, a dict (or bool), or a pydantic model class.
fn schema_text(py: Python<'_>, schema: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = schema.extract::<String>() {
        return Ok(s);
    }
    let obj = if schema.hasattr("model_json_schema")? {
        schema.call_method0("model_json_schema")?
    } else {
        schema.clone()
    };
    py.import("json")?.call_method1("dumps", (obj,))?.extract()
}

/// Split keyword arguments into JSON Schema options and grammar budgets.
fn split_options(
    py: Python<'_>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<(core::JsonSchemaOptions, core::GrammarOptions)> {
    let mut so = core::JsonSchemaOptions::default();
    let (mut max_states, mut max_nfa_bytes, mut mask_cache_bytes, mut max_secs) =
        (None, None, None, None);
    if let Some(d) = options {
        for (k, v) in d.iter() {
            let k: String = k.extract()?;
            if v.is_none() {
                continue;
            }
            match k.as_str() {
                "max_states" => max_states = Some(v.extract()?),
                "max_nfa_bytes" => max_nfa_bytes = Some(v.extract()?),
                "mask_cache_bytes" => mask_cache_bytes = Some(v.extract()?),
                "max_compile_seconds" => max_secs = Some(v.extract()?),
                "registry" if !v.is_instance_of::<pyo3::types::PyString>() => {
                    // a mapping URI → schema (dict, JSON text, or a pydantic model class)
                    let d = v.downcast::<PyDict>().map_err(|_| {
                        PyValueError::new_err("registry must be a mapping of URIs to schemas")
                    })?;
                    let json = py.import("json")?;
                    let out = PyDict::new(py);
                    for (uri, doc) in d.iter() {
                        let uri: String = uri.extract().map_err(|_| {
                            PyValueError::new_err("registry keys must be URI strings")
                        })?;
                        let text = schema_text(py, &doc)?;
                        out.set_item(uri, json.call_method1("loads", (text,))?)?;
                    }
                    let text: String = json.call_method1("dumps", (out,))?.extract()?;
                    so.set("registry", &text).py(py)?;
                }
                _ => {
                    let text = if let Ok(b) = v.extract::<bool>() {
                        b.to_string()
                    } else if let Ok(i) = v.extract::<u64>() {
                        i.to_string()
                    } else if let Ok(s) = v.extract::<String>() {
                        s
                    } else {
                        return Err(PyValueError::new_err(format!(
                            "option {k}: expected a string, an int or a bool"
                        )));
                    };
                    so.set(&k, &text).py(py)?;
                }
            }
        }
    }
    let opts = grammar_options(max_states, max_nfa_bytes, mask_cache_bytes, max_secs)?;
    Ok((so, opts))
}

impl PyGrammar {
    /// Build a grammar for `vocab` with the GIL released and wrap it.
    fn build(
        py: Python<'_>,
        vocab: Py<PyVocabulary>,
        make: impl FnOnce(Arc<core::Vocabulary>) -> core::Result<core::Grammar> + Send,
    ) -> PyResult<Self> {
        let v = vocab.get().inner.clone();
        let g = py.detach(|| make(v)).py(py)?;
        Ok(PyGrammar {
            inner: Arc::new(g),
            vocab,
        })
    }

    fn to_bytes_inner(&self, py: Python<'_>) -> PyResult<Vec<u8>> {
        let g = self.inner.clone();
        py.detach(|| core::serialize::save(&g)).py(py)
    }
}

#[pymethods]
impl PyGrammar {
    /// Compile a regex (full-match semantics) for `vocab`.
    #[staticmethod]
    #[pyo3(signature = (pattern, vocab, *, max_states=None, max_nfa_bytes=None, mask_cache_bytes=None, max_compile_seconds=None))]
    fn from_regex(
        py: Python<'_>,
        pattern: String,
        vocab: Py<PyVocabulary>,
        max_states: Option<usize>,
        max_nfa_bytes: Option<usize>,
        mask_cache_bytes: Option<usize>,
        max_compile_seconds: Option<f64>,
    ) -> PyResult<Self> {
        let opts = grammar_options(
            max_states,
            max_nfa_bytes,
            mask_cache_bytes,
            max_compile_seconds,
        )?;
        Self::build(py, vocab, |v| core::Grammar::from_regex(&pattern, v, &opts))
    }

    /// Compile a JSON Schema: a dict, JSON text, or a pydantic model class. Keyword arguments
    /// are the JSON Schema options (see the README) and the grammar budgets of `from_regex`.
    #[staticmethod]
    #[pyo3(signature = (schema, vocab, **options))]
    fn from_json_schema(
        py: Python<'_>,
        schema: &Bound<'_, PyAny>,
        vocab: Py<PyVocabulary>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let (so, opts) = split_options(py, options)?;
        let text = schema_text(py, schema)?;
        let schema: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| PyValueError::new_err(format!("the schema is not valid JSON: {e}")))?;
        Self::build(py, vocab, |v| {
            core::Grammar::from_json_schema(&schema, v, &so, &opts)
        })
    }

    /// Any JSON object (nesting bounded by `max_nesting_depth`; whitespace options apply).
    #[staticmethod]
    #[pyo3(signature = (vocab, **options))]
    fn from_json_object(
        py: Python<'_>,
        vocab: Py<PyVocabulary>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let (so, opts) = split_options(py, options)?;
        Self::build(py, vocab, |v| {
            core::Grammar::from_json_object(v, &so, &opts)
        })
    }

    /// Exactly one of `choices` (raw text, not JSON-quoted).
    #[staticmethod]
    #[pyo3(signature = (choices, vocab, *, max_states=None, max_nfa_bytes=None, mask_cache_bytes=None, max_compile_seconds=None))]
    fn from_choice(
        py: Python<'_>,
        choices: Vec<String>,
        vocab: Py<PyVocabulary>,
        max_states: Option<usize>,
        max_nfa_bytes: Option<usize>,
        mask_cache_bytes: Option<usize>,
        max_compile_seconds: Option<f64>,
    ) -> PyResult<Self> {
        let opts = grammar_options(
            max_states,
            max_nfa_bytes,
            mask_cache_bytes,
            max_compile_seconds,
        )?;
        Self::build(py, vocab, |v| {
            core::Grammar::from_choice(&choices, v, &opts)
        })
    }

    /// Warnings collected while compiling (lenient schemas, unknown keywords).
    #[getter]
    fn warnings(&self) -> Vec<String> {
        self.inner.warnings().to_vec()
    }

    /// The vocabulary this grammar was compiled for.
    #[getter]
    fn vocab(&self, py: Python<'_>) -> Py<PyVocabulary> {
        self.vocab.clone_ref(py)
    }

    /// The regex the grammar was compiled from.
    #[getter]
    fn pattern(&self) -> String {
        self.inner.pattern().to_string()
    }

    /// Compute the mask of every state reachable by tokens (eager mode, parallel). Returns stats.
    fn precompute<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let g = self.inner.clone();
        py.detach(|| g.precompute()).py(py)?;
        self.stats(py)
    }

    /// Sizes of the index so far: states, distinct_masks, mask_bytes, dfa_states, precomputed.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("states", s.states)?;
        d.set_item("distinct_masks", s.distinct_masks)?;
        d.set_item("mask_bytes", s.mask_bytes)?;
        d.set_item("dfa_states", s.dfa_states)?;
        d.set_item("precomputed", self.inner.is_precomputed())?;
        Ok(d)
    }

    /// Write the full (eager) index to `path`, precomputing it first if needed.
    fn save(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        let bytes = self.to_bytes_inner(py)?;
        std::fs::write(&path, bytes)
            .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{}: {e}", path.display())))
    }

    /// The index file's bytes (see `save`).
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.to_bytes_inner(py)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Load an index file written by `save` for exactly this vocabulary (no recompilation).
    #[staticmethod]
    fn load(py: Python<'_>, path: std::path::PathBuf, vocab: Py<PyVocabulary>) -> PyResult<Self> {
        let bytes = std::fs::read(&path).map_err(|e| {
            pyo3::exceptions::PyOSError::new_err(format!("{}: {e}", path.display()))
        })?;
        Self::from_bytes(py, bytes, vocab)
    }

    /// Load an index from bytes (see `load`).
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: Vec<u8>, vocab: Py<PyVocabulary>) -> PyResult<Self> {
        Self::build(py, vocab, |v| core::serialize::load(&data, v))
    }

    /// What the grammar was compiled from: "regex", "json_schema", "choice" or "json_object".
    #[getter]
    fn constraint_kind(&self) -> String {
        self.inner.source().kind.clone()
    }

    /// The constraint's canonical text (pattern, or JSON keeping property order).
    #[getter]
    fn constraint(&self) -> String {
        self.inner.source().text.clone()
    }

    /// Hash of constraint kind, text and language options (hex); the key of caches and files.
    #[getter]
    fn source_hash(&self) -> String {
        format!("{:016x}", self.inner.source().hash())
    }

    /// A new matcher at the start of the grammar.
    #[pyo3(signature = (max_rollback=None))]
    fn matcher(slf: Bound<'_, Self>, max_rollback: Option<usize>) -> PyMatcher {
        let g = slf.get();
        PyMatcher {
            inner: core::Matcher::new(g.inner.clone(), max_rollback),
            grammar: slf.clone().unbind(),
        }
    }

    /// The constraint kind and its source text (cut after 200 bytes), never the automaton's
    /// internal rendering.
    fn __repr__(&self) -> String {
        let s = self.inner.stats();
        let src = self.inner.source();
        let t = &src.text;
        let text = if t.len() > 200 {
            let cut = (0..=200)
                .rev()
                .find(|&i| t.is_char_boundary(i))
                .unwrap_or(0);
            format!("{}...", &t[..cut])
        } else {
            t.clone()
        };
        format!(
            "Grammar(kind={:?}, source={:?}, dfa_states={}, cached_masks={})",
            src.kind, text, s.dfa_states, s.states
        )
    }
}

/// One sequence's position in a grammar.
#[pyclass(module = "tokensieve._core", name = "Matcher", subclass)]
struct PyMatcher {
    inner: core::Matcher,
    grammar: Py<PyGrammar>,
}

fn check_token(id: i64) -> Option<u32> {
    if (0..=u32::MAX as i64).contains(&id) {
        Some(id as u32)
    } else {
        None
    }
}

#[pymethods]
impl PyMatcher {
    #[getter]
    fn grammar(&self, py: Python<'_>) -> Py<PyGrammar> {
        self.grammar.clone_ref(py)
    }

    /// Consume a token; False (and no change) if it is not allowed.
    fn accept_token(&mut self, py: Python<'_>, token_id: i64) -> PyResult<bool> {
        match check_token(token_id) {
            Some(t) => self.inner.accept_token(t).py(py),
            None => Ok(false),
        }
    }

    /// Consume tokens until one is refused; returns how many were accepted.
    fn accept_tokens(&mut self, py: Python<'_>, token_ids: Vec<i64>) -> PyResult<usize> {
        for (i, &t) in token_ids.iter().enumerate() {
            let ok = match check_token(t) {
                Some(t) => self.inner.accept_token(t).py(py)?,
                None => false,
            };
            if !ok {
                return Ok(i);
            }
        }
        Ok(token_ids.len())
    }

    /// Undo the last n accepted tokens (EOS included).
    fn rollback(&mut self, py: Python<'_>, n: usize) -> PyResult<()> {
        self.inner.rollback(n).py(py)
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

    /// Current automaton state id (stable for the grammar's lifetime).
    #[getter]
    fn state(&self) -> u32 {
        self.inner.state()
    }

    /// Overwrite row `index` of `bitmask` (int32 `[batch, ceil(vocab_size/32)]`, numpy or torch
    /// on the CPU, or one 1-D row) with the tokens allowed next.
    #[pyo3(signature = (bitmask, index=0))]
    fn fill_next_token_bitmask(
        &self,
        py: Python<'_>,
        bitmask: &Bound<'_, PyAny>,
        index: usize,
    ) -> PyResult<()> {
        let (address, rows, row_words): (usize, usize, usize) = py
            .import("tokensieve.bitmask")?
            .getattr("_buffer")?
            .call1((bitmask,))?
            .extract()?;
        if index >= rows {
            return Err(PyValueError::new_err(format!(
                "index {index} is out of range for a bitmask with {rows} rows"
            )));
        }
        fill_raw(
            py,
            &[core::MaskRequest::from(&self.inner)],
            &[index],
            address,
            rows,
            row_words,
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "Matcher(state={}, finished={}, accepting={}, history={})",
            self.inner.state(),
            self.inner.is_finished(),
            self.inner.is_accepting(),
            self.inner.history_len()
        )
    }
}

fn fill_raw(
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
fn _fill_next_token_bitmask(
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

/// The hash a grammar compiled from this constraint would have (`Grammar.source_hash`),
/// computed without compiling: the key that finds a precompiled index file. `kind` is
/// "regex", "json_schema", "choice" or "json_object"; options as for the constructors (only
/// the JSON Schema options change the key).
#[pyfunction]
#[pyo3(signature = (kind, value=None, **options))]
fn constraint_hash(
    py: Python<'_>,
    kind: &str,
    value: Option<&Bound<'_, PyAny>>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    let (so, _) = split_options(py, options)?;
    let need = |what: &str| PyValueError::new_err(format!("a {kind} constraint needs {what}"));
    let src = match kind {
        "regex" => core::ConstraintSource::regex(
            &value
                .ok_or_else(|| need("a pattern"))?
                .extract::<String>()?,
        ),
        "json_schema" => {
            let text = schema_text(py, value.ok_or_else(|| need("a schema"))?)?;
            let schema: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| PyValueError::new_err(format!("the schema is not valid JSON: {e}")))?;
            core::ConstraintSource::json_schema(&schema, &so)
        }
        "choice" => core::ConstraintSource::choice(
            &value
                .ok_or_else(|| need("choices"))?
                .extract::<Vec<String>>()?,
        ),
        "json_object" => core::ConstraintSource::json_object(&so),
        other => {
            return Err(PyValueError::new_err(format!(
            "unknown constraint kind {other:?}; expected regex, json_schema, choice or json_object"
        )))
        }
    };
    Ok(format!("{:016x}", src.hash()))
}

/// The header of an index file, as a dict (format_version plus the `HEAD` fields).
#[pyfunction]
fn read_index_header<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
) -> PyResult<Bound<'py, PyDict>> {
    let bytes = std::fs::read(&path)
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{}: {e}", path.display())))?;
    let (version, h) = core::serialize::read_header(&bytes).py(py)?;
    let d = PyDict::new(py);
    d.set_item("format_version", version)?;
    d.set_item("tokensieve_version", h.tokensieve_version)?;
    d.set_item("constraint_kind", h.constraint_kind)?;
    d.set_item("constraint", h.constraint)?;
    d.set_item("options", h.options)?;
    d.set_item("source_hash", h.source_hash)?;
    d.set_item("vocab_fingerprint", h.vocab_fingerprint)?;
    d.set_item("vocab_size", h.vocab_size)?;
    d.set_item("states", h.states)?;
    d.set_item("classes", h.classes)?;
    d.set_item("masked_states", h.masked_states)?;
    d.set_item("distinct_masks", h.distinct_masks)?;
    d.set_item("mask_words", h.mask_words)?;
    d.set_item("file_bytes", bytes.len())?;
    Ok(d)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyVocabulary>()?;
    m.add_class::<PyGrammar>()?;
    m.add_class::<PyMatcher>()?;
    m.add_function(wrap_pyfunction!(_fill_next_token_bitmask, m)?)?;
    m.add_function(wrap_pyfunction!(read_index_header, m)?)?;
    m.add_function(wrap_pyfunction!(constraint_hash, m)?)?;
    m.add("TokensieveError", py.get_type::<TokensieveError>())?;
    m.add("RegexError", py.get_type::<RegexError>())?;
    m.add("BudgetError", py.get_type::<BudgetError>())?;
    m.add("VocabularyError", py.get_type::<VocabularyError>())?;
    m.add("UnspellableError", py.get_type::<UnspellableError>())?;
    m.add("SchemaError", py.get_type::<SchemaError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    kernels::register(m)?;
    Ok(())
}

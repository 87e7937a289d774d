//! `Grammar`: compiled constraints (regex, JSON Schema, choice, any JSON object), their
//! options, index files, and the constraint hash that finds a precompiled file.
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyString};

use tokensieve_core as core;

use crate::errors::IntoPyResult;
use crate::matcher::PyMatcher;
use crate::vocabulary::PyVocabulary;

/// A compiled constraint for one vocabulary; immutable and shareable across threads.
#[pyclass(module = "tokensieve._core", name = "Grammar", frozen, subclass)]
pub(crate) struct PyGrammar {
    pub(crate) inner: Arc<core::Grammar>,
    pub(crate) vocab: Py<PyVocabulary>,
}

/// The engine budgets given as keyword arguments of `from_regex` / `from_choice`.
fn budgets(
    py: Python<'_>,
    max_states: Option<usize>,
    max_nfa_bytes: Option<usize>,
    mask_cache_bytes: Option<usize>,
    max_compile_seconds: Option<f64>,
) -> PyResult<core::GrammarOptions> {
    let mut o = core::GrammarOptions::default();
    let ints = [
        ("max_states", max_states),
        ("max_nfa_bytes", max_nfa_bytes),
        ("mask_cache_bytes", mask_cache_bytes),
    ];
    for (name, v) in ints {
        if let Some(v) = v {
            o.set(name, &v.to_string()).py(py)?;
        }
    }
    if let Some(s) = max_compile_seconds {
        o.set("max_compile_seconds", &s.to_string()).py(py)?;
    }
    Ok(o)
}

/// JSON text of a schema given as JSON text, a dict (or bool), or a pydantic model class.
pub(crate) fn schema_text(py: Python<'_>, schema: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = schema.extract::<String>() {
        return Ok(s);
    }
    let obj = if schema.hasattr("model_json_schema")? {
        schema.call_method0("model_json_schema")?
    } else {
        schema.clone()
    };
    // Python's `json` writes integers with all their digits (the core reads numbers exactly);
    // NaN and infinities are not JSON and are refused here.
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("allow_nan", false)?;
    match py
        .import("json")?
        .call_method("dumps", (obj,), Some(&kwargs))
    {
        Ok(text) => text.extract(),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyRecursionError>(py) => {
            Err(core::json_schema::too_deep()).py(py)
        }
        Err(e) => Err(e),
    }
}

/// The text form of one keyword-argument value, as `CompileOptions::set` reads it.
fn option_text(name: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(b) = v.downcast::<PyBool>() {
        Ok(if b.is_true() { "true" } else { "false" }.to_string())
    } else if v.is_instance_of::<PyInt>() || v.is_instance_of::<PyFloat>() {
        Ok(v.str()?.to_string())
    } else if let Ok(s) = v.downcast::<PyString>() {
        Ok(s.to_string())
    } else {
        Err(PyValueError::new_err(format!(
            "option {name}: expected a string, a number or a bool, got {}",
            v.get_type().name()?
        )))
    }
}

/// Keyword arguments → compile options. Names and values are read by the core
/// (`CompileOptions::set`); only the registry's Python objects are turned into JSON here.
pub(crate) fn compile_options(
    py: Python<'_>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<core::CompileOptions> {
    let mut o = core::CompileOptions::default();
    let Some(d) = options else {
        return Ok(o);
    };
    for (k, v) in d.iter() {
        let k: String = k.extract()?;
        if v.is_none() {
            continue;
        }
        let text = if k == "registry" && !v.is_instance_of::<PyString>() {
            // a mapping URI → schema (dict, JSON text, or a pydantic model class)
            let d = v.downcast::<PyDict>().map_err(|_| {
                PyValueError::new_err("registry must be a mapping of URIs to schemas")
            })?;
            let json = py.import("json")?;
            let out = PyDict::new(py);
            for (uri, doc) in d.iter() {
                let uri: String = uri
                    .extract()
                    .map_err(|_| PyValueError::new_err("registry keys must be URI strings"))?;
                let text = schema_text(py, &doc)?;
                out.set_item(uri, json.call_method1("loads", (text,))?)?;
            }
            json.call_method1("dumps", (out,))?.extract()?
        } else {
            option_text(&k, &v)?
        };
        o.set(&k, &text).py(py)?;
    }
    Ok(o)
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

/// A compile running on its own thread (started without waiting for the GIL, so it overlaps
/// whatever the calling thread does next, GIL held or not).
#[pyclass(module = "tokensieve._core", name = "PendingGrammar", frozen)]
pub(crate) struct PyPendingGrammar {
    state: Mutex<Pending>,
    vocab: Py<PyVocabulary>,
}

enum Pending {
    Running(JoinHandle<core::Result<core::Grammar>>),
    Done(Result<Arc<core::Grammar>, PyErr>),
    Taken,
}

#[pymethods]
impl PyPendingGrammar {
    /// Whether the compile has finished (successfully or not).
    fn done(&self) -> bool {
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            Pending::Running(h) => h.is_finished(),
            _ => true,
        }
    }

    /// The grammar, waiting (GIL released) for the compile; raises what the compile raised.
    fn result(&self, py: Python<'_>) -> PyResult<PyGrammar> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Pending::Running(_) = &*st {
            let Pending::Running(h) = std::mem::replace(&mut *st, Pending::Taken) else {
                unreachable!("matched above")
            };
            let joined = py.detach(|| h.join());
            *st = Pending::Done(match joined {
                Ok(r) => r.map(Arc::new).py(py),
                Err(_) => Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "the compile thread panicked",
                )),
            });
        }
        match &*st {
            Pending::Done(Ok(g)) => Ok(PyGrammar {
                inner: g.clone(),
                vocab: self.vocab.clone_ref(py),
            }),
            Pending::Done(Err(e)) => Err(e.clone_ref(py)),
            _ => unreachable!("a finished compile is Done"),
        }
    }
}

#[pymethods]
impl PyGrammar {
    /// Start compiling a constraint on a new thread and return at once. `kind` is one of
    /// `"regex"`, `"json_schema"`, `"choice"`, `"json_object"`; `source` its pattern, schema
    /// (dict, JSON text or pydantic model), list of strings, or None; keyword arguments as for
    /// the matching `from_*`. Input errors (malformed options, schema text that is not JSON)
    /// are raised here; compile errors by `PendingGrammar.result()`.
    #[staticmethod]
    #[pyo3(signature = (kind, source, vocab, **options))]
    fn compile_pending(
        py: Python<'_>,
        kind: &str,
        source: &Bound<'_, PyAny>,
        vocab: Py<PyVocabulary>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyPendingGrammar> {
        let o = compile_options(py, options)?;
        let v = vocab.get().inner.clone();
        let make: Box<dyn FnOnce() -> core::Result<core::Grammar> + Send> = match kind {
            "regex" => {
                let pattern: String = source.extract()?;
                Box::new(move || core::Grammar::from_regex(&pattern, v, &o.grammar))
            }
            "json_schema" => {
                let text = schema_text(py, source)?;
                let schema = core::json_schema::parse_text("the schema", &text).py(py)?;
                Box::new(move || core::Grammar::from_json_schema(&schema, v, &o.schema, &o.grammar))
            }
            "choice" => {
                let choices: Vec<String> = source.extract()?;
                Box::new(move || core::Grammar::from_choice(&choices, v, &o.grammar))
            }
            "json_object" => {
                Box::new(move || core::Grammar::from_json_object(v, &o.schema, &o.grammar))
            }
            _ => {
                return Err(PyValueError::new_err(format!(
                "unknown constraint kind {kind:?}; use regex, json_schema, choice or json_object"
            )))
            }
        };
        let handle = std::thread::Builder::new()
            .name("tokensieve-compile".into())
            .spawn(make)
            .map_err(|e| {
                pyo3::exceptions::PyRuntimeError::new_err(format!(
                    "cannot start a compile thread: {e}"
                ))
            })?;
        Ok(PyPendingGrammar {
            state: Mutex::new(Pending::Running(handle)),
            vocab,
        })
    }

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
        let opts = budgets(
            py,
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
        let core::CompileOptions {
            schema: so,
            grammar: opts,
        } = compile_options(py, options)?;
        let text = schema_text(py, schema)?;
        let schema = core::json_schema::parse_text("the schema", &text).py(py)?;
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
        let o = compile_options(py, options)?;
        Self::build(py, vocab, |v| {
            core::Grammar::from_json_object(v, &o.schema, &o.grammar)
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
        let opts = budgets(
            py,
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

    /// A new matcher at the start of the grammar. With `max_tokens`, its masks keep the
    /// output finishable within that many tokens (EOS included). With `reasoning_end`, the
    /// output starts with free text up to that marker and the grammar starts right after it;
    /// `thinking_budget` forces the marker after that many reasoning tokens.
    #[pyo3(signature = (max_rollback=None, max_tokens=None, reasoning_end=None, thinking_budget=None))]
    fn matcher(
        slf: Bound<'_, Self>,
        max_rollback: Option<usize>,
        max_tokens: Option<u32>,
        reasoning_end: Option<&str>,
        thinking_budget: Option<u32>,
    ) -> PyResult<PyMatcher> {
        let py = slf.py();
        let g = slf.get();
        let mut inner = core::Matcher::new(g.inner.clone(), max_rollback);
        inner.set_max_tokens(max_tokens).py(py)?;
        let marker = reasoning_end.map(str::as_bytes);
        // the first use of a marker scans the vocabulary: without the GIL
        py.detach(|| inner.set_reasoning(marker, thinking_budget))
            .py(py)?;
        Ok(PyMatcher {
            inner,
            grammar: slf.clone().unbind(),
        })
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

/// The hash a grammar compiled from this constraint would have (`Grammar.source_hash`),
/// computed without compiling: the key that finds a precompiled index file. `kind` is
/// "regex", "json_schema", "choice" or "json_object"; options as for the constructors (only
/// the JSON Schema options change the key).
#[pyfunction]
#[pyo3(signature = (kind, value=None, **options))]
pub(crate) fn constraint_hash(
    py: Python<'_>,
    kind: &str,
    value: Option<&Bound<'_, PyAny>>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    let so = compile_options(py, options)?.schema;
    let need = |what: &str| PyValueError::new_err(format!("a {kind} constraint needs {what}"));
    let src = match kind {
        "regex" => core::ConstraintSource::regex(
            &value
                .ok_or_else(|| need("a pattern"))?
                .extract::<String>()?,
        ),
        "json_schema" => {
            let text = schema_text(py, value.ok_or_else(|| need("a schema"))?)?;
            let schema = core::json_schema::parse_text("the schema", &text).py(py)?;
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
pub(crate) fn read_index_header<'py>(
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

//! `Grammar`: compiled constraints (regex, JSON Schema, choice, any JSON object), their
//! options, index files, and the constraint hash that finds a precompiled file.
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyString};

use tokensieve_core as core;

use crate::args::opt_uint;
use crate::errors::{guard, IntoPyResult};
use crate::matcher::PyMatcher;
use crate::vocabulary::PyVocabulary;

/// A compiled constraint for one vocabulary; immutable and shareable across threads.
#[pyclass(module = "tokensieve._core", name = "Grammar", frozen, subclass)]
pub(crate) struct PyGrammar {
    pub(crate) inner: Arc<core::Grammar>,
    pub(crate) vocab: Py<PyVocabulary>,
}

/// The engine budgets given as keyword arguments of `from_regex` / `from_choice`: integers
/// of any size (the core names the range of one out of it), or None.
fn budgets(
    py: Python<'_>,
    max_states: Option<&Bound<'_, PyAny>>,
    max_nfa_bytes: Option<&Bound<'_, PyAny>>,
    mask_cache_bytes: Option<&Bound<'_, PyAny>>,
    max_compile_seconds: Option<f64>,
) -> PyResult<core::GrammarOptions> {
    let mut o = core::GrammarOptions::default();
    let ints = [
        ("max_states", max_states),
        ("max_nfa_bytes", max_nfa_bytes),
        ("mask_cache_bytes", mask_cache_bytes),
    ];
    for (name, v) in ints {
        if let Some(v) = v.filter(|v| !v.is_none()) {
            if !v.is_instance_of::<PyInt>() {
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "{name} must be an integer or None, got {}",
                    v.get_type().name()?
                )));
            }
            o.set(name, &v.str()?.to_string()).py(py)?;
        }
    }
    if let Some(s) = max_compile_seconds {
        o.set("max_compile_seconds", &format!("{s:?}")).py(py)?;
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
        // a value JSON has no form for (a set, bytes, an object): the schema is not JSON
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyTypeError>(py) => {
            Err(PyValueError::new_err(format!(
                "the schema is not JSON: {} (a schema holds dicts with string keys, lists, \
                 strings, finite numbers, booleans and None)",
                e.value(py)
            )))
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

/// A grammar's text from Python: a `str` that is valid Unicode. A lone surrogate (which
/// Python strings may hold and UTF-8 cannot) is a `GrammarError` at its line and column.
fn grammar_text(py: Python<'_>, source: &Bound<'_, PyAny>) -> PyResult<String> {
    let s = source.downcast::<PyString>().map_err(|_| {
        let name = source
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        pyo3::exceptions::PyTypeError::new_err(format!("a grammar is text (str), got {name}"))
    })?;
    if let Ok(t) = s.to_cow() {
        return Ok(t.into_owned());
    }
    let b: Vec<u8> = s
        .call_method1("encode", ("utf-8", "surrogatepass"))?
        .extract()?;
    // a surrogate's three-byte form starts ED A0..BF, which valid UTF-8 never has
    let at = b
        .windows(2)
        .position(|w| w[0] == 0xED && w[1] >= 0xA0)
        .unwrap_or(b.len());
    let before = String::from_utf8_lossy(&b[..at]);
    let line = 1 + before.matches('\n').count();
    let column = 1 + before.rsplit('\n').next().map_or(0, |l| l.chars().count());
    let unit = b.get(at..at + 3).map_or(0, |u| {
        (u32::from(u[0] & 0x0F) << 12) | (u32::from(u[1] & 0x3F) << 6) | u32::from(u[2] & 0x3F)
    });
    Err(crate::errors::to_py(
        py,
        core::Error::Grammar {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
            message: format!(
                "the text holds a lone surrogate U+{unit:04X}, which is not a Unicode character \
                 (write characters, or escapes such as \\uXXXX for real ones)"
            ),
        },
    ))
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

/// Keyword arguments of a GBNF / EBNF grammar → its options: `start`, `max_stack_depth` and
/// the grammar budgets (`GrammarOptions::NAMES`); any other name is an error naming the valid
/// ones (a JSON Schema option would change nothing here).
/// A Lark grammar's options: those of [`ebnf_options`], the start rule `start` by default.
pub(crate) fn lark_options(
    py: Python<'_>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<(core::LarkOptions, core::GrammarOptions)> {
    let named = match options {
        Some(d) => d.get_item("start")?.is_some_and(|v| !v.is_none()),
        None => false,
    };
    let (e, g) = ebnf_options(py, options)?;
    let l = core::LarkOptions {
        start: if named { e.start } else { "start".into() },
        max_stack_depth: e.max_stack_depth,
    };
    Ok((l, g))
}

pub(crate) fn ebnf_options(
    py: Python<'_>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<(core::EbnfOptions, core::GrammarOptions)> {
    let mut e = core::EbnfOptions::default();
    let mut g = core::GrammarOptions::default();
    let Some(d) = options else {
        return Ok((e, g));
    };
    for (k, v) in d.iter() {
        let k: String = k.extract()?;
        if v.is_none() {
            continue;
        }
        match k.as_str() {
            "start" => {
                e.start = v
                    .extract()
                    .map_err(|_| PyValueError::new_err("start must be a rule name (a string)"))?;
            }
            // read as a JSON Schema's is (the same range and message; a bool is no number)
            "max_stack_depth" => {
                e.max_stack_depth = core::ebnf::stack_depth_option(&option_text(&k, &v)?).py(py)?;
            }
            name if core::GrammarOptions::NAMES.contains(&name) => {
                g.set(name, &option_text(name, &v)?).py(py)?;
            }
            other => {
                let mut names = core::ebnf::EBNF_OPTION_NAMES.to_vec();
                names.extend(core::GrammarOptions::NAMES.iter().copied());
                return Err(PyValueError::new_err(format!(
                    "unknown option {other:?} for a grammar; options are {}",
                    names.join(", ")
                )));
            }
        }
    }
    e.validate().py(py)?;
    Ok((e, g))
}

impl PyGrammar {
    /// Build a grammar for `vocab` with the GIL released and wrap it.
    fn build(
        py: Python<'_>,
        vocab: Py<PyVocabulary>,
        make: impl FnOnce(Arc<core::Vocabulary>) -> core::Result<core::Grammar> + Send,
    ) -> PyResult<Self> {
        let v = vocab.get().inner.clone();
        let g = guard(py, || py.detach(|| make(v)).py(py))?;
        Ok(PyGrammar {
            inner: Arc::new(g),
            vocab,
        })
    }

    fn to_bytes_inner(&self, py: Python<'_>) -> PyResult<Vec<u8>> {
        let g = self.inner.clone();
        guard(py, || py.detach(|| core::serialize::save(&g)).py(py))
    }
}

impl PyGrammar {
    /// The body of `compile_pending` (run under `guard`).
    fn start_pending(
        py: Python<'_>,
        kind: &str,
        source: &Bound<'_, PyAny>,
        vocab: Py<PyVocabulary>,
        inline: Option<std::time::Duration>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyPendingGrammar> {
        let o = if kind == "ebnf" || kind == "lark" {
            core::CompileOptions::default()
        } else {
            compile_options(py, options)?
        };
        let v = vocab.get().inner.clone();
        let make: Compile = match kind {
            "regex" => {
                let pattern: String = source.extract()?;
                Arc::new(move || core::Grammar::from_regex(&pattern, v.clone(), &o.grammar))
            }
            "json_schema" => {
                let text = schema_text(py, source)?;
                let schema = core::json_schema::parse_text("the schema", &text).py(py)?;
                Arc::new(move || core::Grammar::from_json_schema(&schema, v.clone(), &o.schema, &o.grammar))
            }
            "choice" => {
                let choices: Vec<String> = source.extract()?;
                Arc::new(move || core::Grammar::from_choice(&choices, v.clone(), &o.grammar))
            }
            "structural_tag" => {
                let text = schema_text(py, source)?;
                Arc::new(move || {
                    core::Grammar::from_structural_tag(&text, v.clone(), &o.schema, &o.grammar)
                })
            }
            "json_object" => {
                Arc::new(move || core::Grammar::from_json_object(v.clone(), &o.schema, &o.grammar))
            }
            "ebnf" => {
                let text = grammar_text(py, source)?;
                let (e, g) = ebnf_options(py, options)?;
                Arc::new(move || core::Grammar::from_ebnf(&text, v.clone(), &e, &g))
            }
            "lark" => {
                let text = grammar_text(py, source)?;
                let (l, g) = lark_options(py, options)?;
                Arc::new(move || core::Grammar::from_lark(&text, v.clone(), &l, &g))
            }
            _ => {
                return Err(PyValueError::new_err(format!(
                "unknown constraint kind {kind:?}; use regex, json_schema, choice, json_object, ebnf, lark or structural_tag"
            )))
            }
        };
        let slot = Arc::new(Slot::default());
        let done = Finish(slot.clone());
        if let Some(limit) = inline.filter(|d| !d.is_zero()) {
            // First on this thread (GIL released), stopped after `limit` of this thread's CPU
            // time (at most INLINE_WALL_CAP times that of wall-clock time): no wait for a lane
            // or a compile thread, which on busy cores can cost more than the compile, and a
            // compile that needs little work is not stopped for the time its thread waited for
            // a core (it would be paid again from the start on a compile thread)
            let first = make.clone();
            let (r, seconds, stopped) = py.detach(move || {
                let started = std::time::Instant::now();
                let deadline =
                    core::budget::Deadline::cpu_after(limit, limit.saturating_mul(INLINE_WALL_CAP));
                let r = core::budget::scope(Some(deadline), || run(&first));
                // Once passed, the deadline may have stopped a step whose caller went on
                // without it (a fallback, or an error of another kind, such as a schema error
                // at the keyword): only a compile done before it passed is kept (it cannot
                // have passed during the compile and not after).
                (r, started.elapsed().as_secs_f64(), deadline.passed())
            });
            if !stopped {
                done.set(r, seconds);
                return Ok(PyPendingGrammar { slot, vocab });
            }
            // Not done within `limit`: compiled from the start on a compile thread, under its
            // own budgets (an error that came after `limit` comes again there).
        }
        crate::compile_pool::submit(Box::new(move || {
            let started = std::time::Instant::now();
            let r = run(&make);
            done.set(r, started.elapsed().as_secs_f64());
        }));
        Ok(PyPendingGrammar { slot, vocab })
    }
}

/// The wall-clock cap of a first try on the calling thread, in multiples of its CPU-time limit
/// (`inline_seconds`): a thread that gets a core a tenth of the time still finishes a compile
/// that is in time by CPU; one slower than that is handed to a compile thread.
const INLINE_WALL_CAP: u32 = 10;

/// A constraint's compile, callable more than once (a first try on the calling thread may be
/// stopped and the compile started again on a compile thread).
type Compile = Arc<dyn Fn() -> core::Result<core::Grammar> + Send + Sync>;

/// Run a compile, a panic inside it an internal error.
fn run(make: &Compile) -> core::Result<core::Grammar> {
    core::error::catch_panic(|| make()).and_then(|r| r)
}

/// A compile running on a compile thread (started without waiting for the GIL, so it overlaps
/// whatever the calling thread does next, GIL held or not). Any number of threads may wait for
/// it at once (a cache shares one compile among the requests for one constraint).
#[pyclass(module = "tokensieve._core", name = "PendingGrammar", frozen)]
pub(crate) struct PyPendingGrammar {
    slot: Arc<Slot>,
    vocab: Py<PyVocabulary>,
}

/// Where a compile thread leaves its result, and the waiters wait for it.
#[derive(Default)]
struct Slot {
    result: Mutex<Option<core::Result<Arc<core::Grammar>>>>,
    ready: std::sync::Condvar,
    /// How long the compile ran on its thread (not counting its wait for a lane), once done.
    seconds: std::sync::OnceLock<f64>,
}

/// The compile thread's end of a [`Slot`]: sets the result, or, dropped without one (a job that
/// never ran), the error of a compile thread gone.
struct Finish(Arc<Slot>);

impl Finish {
    fn set(self, r: core::Result<core::Grammar>, seconds: f64) {
        let _ = self.0.seconds.set(seconds);
        *self.0.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(r.map(Arc::new));
        self.0.ready.notify_all();
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        let mut result = self.0.result.lock().unwrap_or_else(|e| e.into_inner());
        if result.is_none() {
            *result = Some(Err(gone()));
            self.0.ready.notify_all();
        }
    }
}

/// The error of a compile whose thread went away without an answer.
fn gone() -> core::Error {
    core::Error::Internal("the compile thread ended without a result".into())
}

#[pymethods]
impl PyPendingGrammar {
    /// Whether the compile has finished (successfully or not).
    fn done(&self) -> bool {
        self.slot
            .result
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// How long the compile ran on its compile thread, in seconds (its wait for a lane not
    /// counted); `None` until it is done, and for a compile whose thread went away.
    #[getter]
    fn compile_seconds(&self) -> Option<f64> {
        self.slot.seconds.get().copied()
    }

    /// Wait (GIL released) at most `timeout` seconds for the compile to finish; whether it has.
    fn wait(&self, py: Python<'_>, timeout: f64) -> PyResult<bool> {
        if !(timeout >= 0.0 && timeout.is_finite()) {
            return Err(PyValueError::new_err(format!(
                "timeout must be a finite number of seconds >= 0, got {timeout}"
            )));
        }
        let slot = self.slot.clone();
        Ok(py.detach(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(timeout);
            let mut result = slot.result.lock().unwrap_or_else(|e| e.into_inner());
            while result.is_none() {
                let now = std::time::Instant::now();
                if now >= deadline {
                    return false;
                }
                result = slot
                    .ready
                    .wait_timeout(result, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            true
        }))
    }

    /// The grammar, waiting (GIL released) for the compile; raises what the compile raised.
    fn result(&self, py: Python<'_>) -> PyResult<PyGrammar> {
        let slot = self.slot.clone();
        let r = py.detach(move || {
            let mut result = slot.result.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(r) = result.as_ref() {
                    return r.clone();
                }
                result = slot.ready.wait(result).unwrap_or_else(|e| e.into_inner());
            }
        });
        Ok(PyGrammar {
            inner: r.py(py)?,
            vocab: self.vocab.clone_ref(py),
        })
    }
}

#[pymethods]
impl PyGrammar {
    /// Start compiling a constraint on a compile thread (when one of the compile lanes is free,
    /// first come first served; see `compile_pool`) and return at once. `kind` is one of
    /// `"regex"`, `"json_schema"`, `"choice"`, `"json_object"`; `source` its pattern, schema
    /// (dict, JSON text or pydantic model), list of strings, or None; keyword arguments as for
    /// the matching `from_*`. Input errors (malformed options, schema text that is not JSON)
    /// are raised here; compile errors by `PendingGrammar.result()`.
    ///
    /// With `inline_seconds` (seconds, > 0) the compile first runs on the calling thread (GIL
    /// released) for at most that much of the thread's CPU time (wall-clock time where the
    /// platform has no per-thread CPU clock), and never more than ten times that of wall-clock
    /// time: a compile done by then comes back done, without waiting for a lane or a compile
    /// thread; one that is not is started again from the start on a compile thread, under the
    /// constraint's own budgets, and comes back pending.
    #[staticmethod]
    #[pyo3(signature = (kind, source, vocab, *, inline_seconds=None, **options))]
    fn compile_pending(
        py: Python<'_>,
        kind: &str,
        source: &Bound<'_, PyAny>,
        vocab: Py<PyVocabulary>,
        inline_seconds: Option<f64>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyPendingGrammar> {
        let inline = match inline_seconds {
            None => None,
            Some(s) if (0.0..=60.0).contains(&s) => Some(std::time::Duration::from_secs_f64(s)),
            Some(s) => {
                return Err(PyValueError::new_err(format!(
                    "inline_seconds must be a number of seconds from 0 to 60, got {s}"
                )))
            }
        };
        guard(py, || {
            Self::start_pending(py, kind, source, vocab, inline, options)
        })
    }

    /// Compile a regex (full-match semantics) for `vocab`.
    #[staticmethod]
    #[pyo3(signature = (pattern, vocab, *, max_states=None, max_nfa_bytes=None, mask_cache_bytes=None, max_compile_seconds=None))]
    fn from_regex(
        py: Python<'_>,
        pattern: String,
        vocab: Py<PyVocabulary>,
        max_states: Option<&Bound<'_, PyAny>>,
        max_nfa_bytes: Option<&Bound<'_, PyAny>>,
        mask_cache_bytes: Option<&Bound<'_, PyAny>>,
        max_compile_seconds: Option<f64>,
    ) -> PyResult<Self> {
        guard(py, || {
            let opts = budgets(
                py,
                max_states,
                max_nfa_bytes,
                mask_cache_bytes,
                max_compile_seconds,
            )?;
            Self::build(py, vocab, |v| core::Grammar::from_regex(&pattern, v, &opts))
        })
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
        guard(py, || {
            let core::CompileOptions {
                schema: so,
                grammar: opts,
            } = compile_options(py, options)?;
            let text = schema_text(py, schema)?;
            let schema = core::json_schema::parse_text("the schema", &text).py(py)?;
            Self::build(py, vocab, |v| {
                core::Grammar::from_json_schema(&schema, v, &so, &opts)
            })
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
        guard(py, || {
            let o = compile_options(py, options)?;
            Self::build(py, vocab, |v| {
                core::Grammar::from_json_object(v, &o.schema, &o.grammar)
            })
        })
    }

    /// Compile a GBNF / EBNF grammar (see docs/grammars.md): the output must match the rule
    /// `start` (default "root"), with at most `max_stack_depth` rule calls open (default
    /// 1000). Other keyword arguments: the grammar budgets of `from_regex`.
    #[staticmethod]
    #[pyo3(signature = (text, vocab, **options))]
    fn from_ebnf(
        py: Python<'_>,
        text: &Bound<'_, PyAny>,
        vocab: Py<PyVocabulary>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        guard(py, || {
            let text = grammar_text(py, text)?;
            let (e, g) = ebnf_options(py, options)?;
            Self::build(py, vocab, |v| core::Grammar::from_ebnf(&text, v, &e, &g))
        })
    }

    /// Compile a Lark grammar (the dialect llguidance documents; see docs/grammars.md, *Lark*):
    /// terminals are lexed greedily and `%ignore`d lexemes may stand between any two. The
    /// output must match the rule `start` (default "start"), with at most `max_stack_depth`
    /// rule calls open (default 1000). Other keyword arguments: the grammar budgets of
    /// `from_regex`.
    #[staticmethod]
    #[pyo3(signature = (text, vocab, **options))]
    fn from_lark(
        py: Python<'_>,
        text: &Bound<'_, PyAny>,
        vocab: Py<PyVocabulary>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        guard(py, || {
            let text = grammar_text(py, text)?;
            let (l, g) = lark_options(py, options)?;
            Self::build(py, vocab, |v| core::Grammar::from_lark(&text, v, &l, &g))
        })
    }

    /// Compile a structural tag (the JSON object, or its text, that vLLM's and SGLang's tool
    /// calling send: `{"type": "structural_tag", "format": ...}` or the older
    /// `{"structures": [...], "triggers": [...]}`; see `docs/grammars.md`). Keyword arguments:
    /// the JSON Schema options (for its `json_schema` parts) and the grammar budgets.
    #[staticmethod]
    #[pyo3(signature = (tag, vocab, **options))]
    fn from_structural_tag(
        py: Python<'_>,
        tag: &Bound<'_, PyAny>,
        vocab: Py<PyVocabulary>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        guard(py, || {
            let core::CompileOptions {
                schema: so,
                grammar: opts,
            } = compile_options(py, options)?;
            let text = schema_text(py, tag)?;
            Self::build(py, vocab, |v| {
                core::Grammar::from_structural_tag(&text, v, &so, &opts)
            })
        })
    }

    /// Exactly one of `choices` (raw text, not JSON-quoted).
    #[staticmethod]
    #[pyo3(signature = (choices, vocab, *, max_states=None, max_nfa_bytes=None, mask_cache_bytes=None, max_compile_seconds=None))]
    fn from_choice(
        py: Python<'_>,
        choices: Vec<String>,
        vocab: Py<PyVocabulary>,
        max_states: Option<&Bound<'_, PyAny>>,
        max_nfa_bytes: Option<&Bound<'_, PyAny>>,
        mask_cache_bytes: Option<&Bound<'_, PyAny>>,
        max_compile_seconds: Option<f64>,
    ) -> PyResult<Self> {
        guard(py, || {
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
        guard(py, || py.detach(|| g.precompute()).py(py))?;
        self.stats(py)
    }

    /// Sizes of the index so far: states, distinct_masks, mask_bytes, dfa_states, precomputed
    /// (of the newest generation), and generations.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let newest = self.inner.newest();
        let s = guard(py, || Ok(newest.stats()))?;
        let d = PyDict::new(py);
        d.set_item("states", s.states)?;
        d.set_item("distinct_masks", s.distinct_masks)?;
        d.set_item("mask_bytes", s.mask_bytes)?;
        d.set_item("dfa_states", s.dfa_states)?;
        d.set_item("precomputed", newest.is_precomputed())?;
        d.set_item("generations", newest.generations())?;
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
    /// Its masks must fit `mask_cache_bytes` (default as for `precompute`).
    #[staticmethod]
    #[pyo3(signature = (path, vocab, *, mask_cache_bytes=None))]
    fn load(
        py: Python<'_>,
        path: std::path::PathBuf,
        vocab: Py<PyVocabulary>,
        mask_cache_bytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(py, || {
            let budget = mask_budget(mask_cache_bytes)?;
            let bytes = index_file::read_all(py, &path)?;
            Self::build(py, vocab, |v| {
                core::serialize::load_within(&bytes, v, budget)
                    .map_err(|e| index_file::at(&path, e))
            })
        })
    }

    /// Load an index from bytes (see `load`).
    #[staticmethod]
    #[pyo3(signature = (data, vocab, *, mask_cache_bytes=None))]
    fn from_bytes(
        py: Python<'_>,
        data: Vec<u8>,
        vocab: Py<PyVocabulary>,
        mask_cache_bytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        guard(py, || {
            let budget = mask_budget(mask_cache_bytes)?;
            Self::build(py, vocab, |v| {
                core::serialize::load_within(&data, v, budget)
            })
        })
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
        max_rollback: Option<&Bound<'_, PyAny>>,
        max_tokens: Option<&Bound<'_, PyAny>>,
        reasoning_end: Option<&str>,
        thinking_budget: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyMatcher> {
        let py = slf.py();
        guard(py, || {
            let max_rollback = opt_uint::<usize>("max_rollback", max_rollback, usize::MAX)?;
            let max_tokens = opt_uint::<u32>("max_tokens", max_tokens, u32::MAX)?;
            let thinking_budget = opt_uint::<u32>("thinking_budget", thinking_budget, u32::MAX)?;
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
    guard(py, || constraint_hash_of(py, kind, value, options))
}

fn constraint_hash_of(
    py: Python<'_>,
    kind: &str,
    value: Option<&Bound<'_, PyAny>>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    if kind == "ebnf" {
        let text = grammar_text(
            py,
            value.ok_or_else(|| {
                PyValueError::new_err("an ebnf constraint needs the grammar text")
            })?,
        )?;
        let (e, _) = ebnf_options(py, options)?;
        return Ok(format!(
            "{:016x}",
            core::ConstraintSource::ebnf(&text, &e).hash()
        ));
    }
    if kind == "lark" {
        let text = grammar_text(
            py,
            value
                .ok_or_else(|| PyValueError::new_err("a lark constraint needs the grammar text"))?,
        )?;
        let (l, _) = lark_options(py, options)?;
        return Ok(format!(
            "{:016x}",
            core::ConstraintSource::lark(&text, &l).hash()
        ));
    }
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
        "structural_tag" => core::ConstraintSource::structural_tag(
            &schema_text(py, value.ok_or_else(|| need("a tag"))?)?,
            &so,
        ),
        other => {
            return Err(PyValueError::new_err(format!(
            "unknown constraint kind {other:?}; expected regex, json_schema, choice, json_object, ebnf or structural_tag"
        )))
        }
    };
    Ok(format!("{:016x}", src.hash()))
}

/// The header of an index file, as a dict (format_version plus the `HEAD` fields). Reads only
/// the file's first bytes and its header section.
#[pyfunction]
pub(crate) fn read_index_header<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
) -> PyResult<Bound<'py, PyDict>> {
    guard(py, || {
        let (head, file_bytes) = index_file::read_head(py, &path)?;
        let (version, h) = core::serialize::read_header(&head)
            .map_err(|e| index_file::at(&path, e))
            .py(py)?;
        header_dict(py, version, h, file_bytes)
    })
}

fn header_dict<'py>(
    py: Python<'py>,
    version: u32,
    h: core::serialize::IndexHeader,
    file_bytes: u64,
) -> PyResult<Bound<'py, PyDict>> {
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
    d.set_item("file_bytes", file_bytes)?;
    Ok(d)
}

/// The `mask_cache_bytes` of a load: the default budget unless given.
fn mask_budget(v: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
    Ok(opt_uint::<usize>("mask_cache_bytes", v, usize::MAX)?
        .unwrap_or(core::GrammarOptions::default().mask_cache_bytes))
}

/// Reading index files from paths: only regular files (a device such as `/dev/zero` never
/// ends, a FIFO blocks), opened without blocking, their magic bytes and version checked on the
/// first bytes before the rest is read, and no more read than the size the file had when it
/// was opened. Errors name the path: `ValueError` (`InvalidArgument`) for a file that is not
/// an index file, `OSError` for one that cannot be opened or read.
mod index_file {
    use std::fs::File;
    use std::io::Read;
    use std::path::Path;

    use pyo3::{PyResult, Python};
    use tokensieve_core as core;

    use crate::errors::to_py;
    use tokensieve_core::serialize::PREFIX_LEN;

    /// `e` with the path in front of its message (for the errors of a file's contents).
    pub(super) fn at(path: &Path, e: core::Error) -> core::Error {
        match e {
            core::Error::InvalidArgument(m) => {
                core::Error::InvalidArgument(format!("{}: {m}", path.display()))
            }
            core::Error::Budget(m) => core::Error::Budget(format!("{}: {m}", path.display())),
            other => other,
        }
    }

    fn os_error(path: &Path, e: std::io::Error) -> pyo3::PyErr {
        pyo3::exceptions::PyOSError::new_err(format!("{}: {e}", path.display()))
    }

    /// What a file that is not a regular file is, for the message.
    fn what(t: std::fs::FileType) -> &'static str {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if t.is_fifo() {
                return "a FIFO";
            }
            if t.is_char_device() {
                return "a character device";
            }
            if t.is_block_device() {
                return "a block device";
            }
            if t.is_socket() {
                return "a socket";
            }
        }
        if t.is_dir() {
            "a folder"
        } else {
            "not a file"
        }
    }

    fn not_regular(path: &Path, t: std::fs::FileType) -> core::Error {
        core::Error::InvalidArgument(format!(
            "{}: not a regular file ({}); an index file is a regular file",
            path.display(),
            what(t)
        ))
    }

    /// Open `path` (a regular file) and check its first bytes; the file, positioned after
    /// them, its size, and those bytes.
    fn open(py: Python<'_>, path: &Path) -> PyResult<(File, u64, Vec<u8>)> {
        // stat first: it neither opens nor blocks
        let meta = std::fs::metadata(path).map_err(|e| os_error(path, e))?;
        if !meta.is_file() {
            return Err(to_py(py, not_regular(path, meta.file_type())));
        }
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        #[cfg(unix)]
        {
            // should the path have become a FIFO since, opening it must not wait for a writer
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NONBLOCK);
        }
        let mut file = options.open(path).map_err(|e| os_error(path, e))?;
        let meta = file.metadata().map_err(|e| os_error(path, e))?;
        if !meta.is_file() {
            return Err(to_py(py, not_regular(path, meta.file_type())));
        }
        let size = meta.len();
        let mut prefix = Vec::with_capacity(PREFIX_LEN);
        (&mut file)
            .take(PREFIX_LEN as u64)
            .read_to_end(&mut prefix)
            .map_err(|e| os_error(path, e))?;
        core::serialize::check_prefix(&prefix).map_err(|e| to_py(py, at(path, e)))?;
        Ok((file, size, prefix))
    }

    /// Append at most `n` more bytes of `file` to `out`.
    fn read_more(path: &Path, file: &mut File, n: u64, out: &mut Vec<u8>) -> PyResult<()> {
        out.try_reserve(usize::try_from(n).unwrap_or(usize::MAX))
            .map_err(|e| {
                pyo3::exceptions::PyMemoryError::new_err(format!("{}: {e}", path.display()))
            })?;
        file.take(n)
            .read_to_end(out)
            .map_err(|e| os_error(path, e))?;
        Ok(())
    }

    /// The whole index file (at most the size it had when opened).
    pub(super) fn read_all(py: Python<'_>, path: &Path) -> PyResult<Vec<u8>> {
        let (mut file, size, mut bytes) = open(py, path)?;
        let rest = size.saturating_sub(bytes.len() as u64);
        py.detach(|| read_more(path, &mut file, rest, &mut bytes))?;
        Ok(bytes)
    }

    /// The bytes of an index file up to the end of its `HEAD` section (or fewer when the file
    /// is shorter), and the file's size.
    pub(super) fn read_head(py: Python<'_>, path: &Path) -> PyResult<(Vec<u8>, u64)> {
        let (mut file, size, mut bytes) = open(py, path)?;
        // tag (4 bytes) and payload length (u64), then the payload and its CRC-32
        read_more(path, &mut file, 12, &mut bytes)?;
        if let Some(len) = bytes.get(PREFIX_LEN + 4..PREFIX_LEN + 12) {
            let len = u64::from_le_bytes(len.try_into().expect("8 bytes"));
            let left = size.saturating_sub(bytes.len() as u64);
            read_more(path, &mut file, len.saturating_add(4).min(left), &mut bytes)?;
        }
        Ok((bytes, size))
    }
}

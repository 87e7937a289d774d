//! Compiled grammars and per-sequence matchers.
//!
//! A [`Grammar`] is immutable from the outside and shared (`Arc`) by every sequence that decodes
//! under it: the DFA and the mask cache fill in lazily behind locks. A [`Matcher`] is one
//! sequence's position: the current DFA state, whether EOS was consumed, and the history needed
//! to roll back. [`fill_next_token_bitmask_batch`] fills many rows of a batch bitmask in parallel.
//!
//! ```
//! use std::sync::Arc;
//! use tokensieve_core::{Grammar, GrammarOptions, Vocabulary};
//! let v = Arc::new(Vocabulary::new(vec![b"1".to_vec(), b"2".to_vec(), b"x".to_vec(), b"".to_vec()], vec![3], vec![], None).unwrap());
//! let g = Arc::new(Grammar::from_regex("[12]+", v, &GrammarOptions::default()).unwrap());
//! let mut m = g.matcher();
//! let mut row = vec![0u32; 1];
//! m.fill_next_token_bitmask(&mut row).unwrap();
//! assert_eq!(row[0], 0b011); // "1" and "2"; no "x", no EOS yet
//! assert!(m.accept_token(0).unwrap());
//! assert!(m.is_accepting());
//! ```

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::automata::dfa::{LazyDfa, DEAD};
use crate::automata::expr::Expr;
use crate::budget::{self, Deadline};
use crate::error::{Error, Result};
use crate::fit::Fit;
use crate::index::{IndexStats, TokenIndex};
use crate::json_schema::JsonSchemaOptions;
use crate::reasoning::{Span, Step};
use crate::regex::RegexOptions;
use crate::unique::{Lex, Uniques};
use crate::vocab::Vocabulary;
use regex_syntax::hir::Hir;

/// Default `max_compile_seconds`: short enough that a compile inside a serving step cannot hold
/// the batch for long, ample for every schema of the dev set (the slowest lazy compile takes
/// about 0.3 s, the slowest `precompute` about 7 s).
pub const DEFAULT_COMPILE_SECONDS: u64 = 10;

/// Options for compiling a grammar.
#[derive(Debug, Clone)]
pub struct GrammarOptions {
    /// Automaton limits.
    pub regex: RegexOptions,
    /// Memory budget of the mask cache, in bytes.
    pub mask_cache_bytes: usize,
    /// Wall-clock budget (`max_compile_seconds`) of one compile — schema walk, automaton, start
    /// state and first mask — and of `precompute`; see [`crate::budget`].
    pub max_compile_time: Duration,
}

impl Default for GrammarOptions {
    fn default() -> Self {
        GrammarOptions {
            regex: RegexOptions::default(),
            mask_cache_bytes: 512 << 20,
            max_compile_time: Duration::from_secs(DEFAULT_COMPILE_SECONDS),
        }
    }
}

impl GrammarOptions {
    /// Run one compile under this options' deadline.
    fn compiling<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        budget::scope(Some(Deadline::after(self.max_compile_time)), f)
    }

    /// The names [`GrammarOptions::set`] takes.
    pub const NAMES: &'static [&'static str] = &[
        "max_states",
        "max_nfa_bytes",
        "mask_cache_bytes",
        "max_compile_seconds",
    ];

    /// Every option of [`GrammarOptions::NAMES`] with its value in `self`, as a number (the
    /// form the bindings export the defaults in).
    pub fn values(&self) -> [(&'static str, f64); 4] {
        [
            ("max_states", self.regex.max_states as f64),
            ("max_nfa_bytes", self.regex.max_nfa_bytes as f64),
            ("mask_cache_bytes", self.mask_cache_bytes as f64),
            ("max_compile_seconds", self.max_compile_time.as_secs_f64()),
        ]
    }

    /// Set an option from its name and text value (the form shared by all front ends):
    /// `max_states`, `max_nfa_bytes`, `mask_cache_bytes` (non-negative integers) and
    /// `max_compile_seconds` (a positive number).
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let int = |v: &str| -> Result<usize> {
            Ok(crate::error::uint_option(name, v, usize::MAX as u64)? as usize)
        };
        match name {
            "max_states" => self.regex.max_states = int(value)?,
            "max_nfa_bytes" => self.regex.max_nfa_bytes = int(value)?,
            "mask_cache_bytes" => self.mask_cache_bytes = int(value)?,
            "max_compile_seconds" => {
                let s = value
                    .parse::<f64>()
                    .ok()
                    .filter(|s| *s > 0.0 && s.is_finite());
                let s = s.ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "max_compile_seconds must be a positive number, got {value:?}"
                    ))
                })?;
                self.max_compile_time = Duration::try_from_secs_f64(s).map_err(|_| {
                    Error::InvalidArgument(format!(
                        "max_compile_seconds is too large, got {value:?}"
                    ))
                })?;
            }
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "unknown option {name:?}; options are {}",
                    GrammarOptions::NAMES.join(", ")
                )))
            }
        }
        Ok(())
    }
}

/// Every compile option of every constraint kind, routed by name: the engine's budgets to
/// [`GrammarOptions`], the JSON Schema language options to [`JsonSchemaOptions`]. The one place
/// option names are read; the bindings and the CLI pass names and text values through.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// JSON Schema (and any-JSON-object) language options.
    pub schema: JsonSchemaOptions,
    /// Budgets of every grammar.
    pub grammar: GrammarOptions,
}

impl CompileOptions {
    /// Set an option by name; an unknown name is an `InvalidArgument` error listing them all.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        if GrammarOptions::NAMES.contains(&name) {
            self.grammar.set(name, value)
        } else if JsonSchemaOptions::option_names().any(|n| n == name) {
            self.schema.set(name, value)
        } else {
            let all: Vec<&str> = GrammarOptions::NAMES
                .iter()
                .copied()
                .chain(JsonSchemaOptions::option_names())
                .collect();
            Err(Error::InvalidArgument(format!(
                "unknown option {name:?}; options are {}",
                all.join(", ")
            )))
        }
    }
}

/// A compiled constraint for one vocabulary.
pub struct Grammar {
    vocab: Arc<Vocabulary>,
    dfa: LazyDfa,
    index: TokenIndex,
    options: GrammarOptions,
    source: ConstraintSource,
    warnings: Vec<String>,
    /// Distances to acceptance, for matchers with a token budget.
    fit: Fit,
    /// Reasoning spans before the grammar, by end marker (built on first use).
    spans: Mutex<FxHashMap<Vec<u8>, Arc<Span>>>,
    /// The unique arrays of strings a JSON Schema registered ([`crate::unique`]).
    uniques: Option<Arc<Uniques>>,
    /// This grammar's place among its generations (see [`Grammar::current`]).
    lineage: Lineage,
    /// The rules not entered yet go to the background builder when a matcher of this grammar
    /// first accepts a token (see [`Grammar::advance`]): a grammar that only ever serves a
    /// first mask (a server's admission check) never spends a core on them.
    rules_later: AtomicBool,
}

/// A grammar's generations. Its lazily built states are shared by all its matchers and bounded
/// (`max_states`, the table's bytes); so that they never run out for good, a grammar whose
/// states have taken more than half of what was left when it was ready ([`LazyDfa::is_worn`])
/// hands new matchers to a fresh copy of itself, the next generation ([`LazyDfa::fresh`]: the
/// same automaton, none of the states), and a matcher that runs out of room on its generation
/// moves to a newer one by replaying its tokens there. The first generation (the grammar as
/// compiled, what callers hold) keeps the newest; a generation is dropped with its last
/// matcher.
#[derive(Default)]
struct Lineage {
    /// The first generation; `None` on the first itself.
    first: Option<Weak<Grammar>>,
    /// On the first generation: the newest, once there is a later one.
    newest: Mutex<Option<Arc<Grammar>>>,
    /// How many generations came before this one.
    number: u32,
}

/// What a grammar was compiled from, in canonical form (the key of caches and index files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConstraintSource {
    /// `"regex"`, `"json_schema"`, `"choice"`, `"json_object"`, `"ebnf"`, `"lark"`,
    /// `"structural_tag"`.
    pub kind: String,
    /// The constraint's text: the pattern, or canonical JSON (property order kept).
    pub text: String,
    /// Options that change the language, as canonical JSON (`{}` when none).
    pub options: String,
}

impl ConstraintSource {
    /// The source of a regex constraint.
    pub fn regex(pattern: &str) -> ConstraintSource {
        ConstraintSource {
            kind: "regex".into(),
            text: pattern.to_string(),
            options: "{}".into(),
        }
    }

    /// The source of a JSON Schema constraint (property order kept as given).
    pub fn json_schema(schema: &serde_json::Value, opts: &JsonSchemaOptions) -> ConstraintSource {
        ConstraintSource {
            kind: "json_schema".into(),
            text: schema.to_string(),
            options: opts.canonical(),
        }
    }

    /// The source of an any-JSON-object constraint.
    pub fn json_object(opts: &JsonSchemaOptions) -> ConstraintSource {
        ConstraintSource {
            kind: "json_object".into(),
            text: String::new(),
            options: opts.canonical(),
        }
    }

    /// The source of a choice constraint.
    pub fn choice<S: AsRef<str>>(choices: &[S]) -> ConstraintSource {
        let list: Vec<&str> = choices.iter().map(|c| c.as_ref()).collect();
        ConstraintSource {
            kind: "choice".into(),
            text: serde_json::to_string(&list).expect("strings serialize"),
            options: "{}".into(),
        }
    }

    /// The source of a GBNF / EBNF grammar constraint.
    pub fn ebnf(text: &str, opts: &crate::ebnf::EbnfOptions) -> ConstraintSource {
        ConstraintSource {
            kind: "ebnf".into(),
            text: text.to_string(),
            options: opts.canonical(),
        }
    }

    /// The source of a Lark grammar constraint.
    pub fn lark(text: &str, opts: &crate::lark::LarkOptions) -> ConstraintSource {
        ConstraintSource {
            kind: "lark".into(),
            text: text.to_string(),
            options: opts.canonical(),
        }
    }

    /// The source of a structural tag (its JSON, re-serialized with its key order kept; text
    /// that is not JSON as given), with the options of its schemas.
    pub fn structural_tag(text: &str, opts: &JsonSchemaOptions) -> ConstraintSource {
        let text = serde_json::from_str::<serde_json::Value>(text)
            .map_or_else(|_| text.to_string(), |v| v.to_string());
        ConstraintSource::structural_tag_written(text, opts)
    }

    /// [`ConstraintSource::structural_tag`] of a tag already read and written back (`text`).
    fn structural_tag_written(text: String, opts: &JsonSchemaOptions) -> ConstraintSource {
        ConstraintSource {
            kind: "structural_tag".into(),
            text,
            options: opts.canonical(),
        }
    }

    /// A stable 64-bit hash of kind, text and options.
    pub fn hash(&self) -> u64 {
        let mut h = 0xcbf29ce484222325u64;
        for part in [
            self.kind.as_bytes(),
            b"\0",
            self.text.as_bytes(),
            b"\0",
            self.options.as_bytes(),
        ] {
            for &b in part {
                h ^= b as u64;
                h = h.wrapping_mul(0x100000001b3);
            }
        }
        h
    }
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammar").field("dfa", &self.dfa).finish()
    }
}

impl Grammar {
    /// Compile a regex (full-match semantics) for `vocab`. The first mask is computed here, so
    /// a grammar the vocabulary cannot spell fails at compile time.
    pub fn from_regex(
        pattern: &str,
        vocab: Arc<Vocabulary>,
        opts: &GrammarOptions,
    ) -> Result<Grammar> {
        opts.compiling(|| {
            let hir = crate::regex::parse_full_match(pattern, opts.regex.nest_limit)?;
            Grammar::from_hir(pattern, &hir, vocab, opts)
        })
    }

    /// Compile a ready HIR (full-match semantics); `pattern` is kept for messages and
    /// [`Grammar::pattern`]. The first mask is computed here.
    pub fn from_hir(
        pattern: &str,
        hir: &Hir,
        vocab: Arc<Vocabulary>,
        opts: &GrammarOptions,
    ) -> Result<Grammar> {
        opts.compiling(|| {
            Grammar::from_dfa(LazyDfa::from_hir(pattern, hir, &opts.regex)?, vocab, opts)
        })
    }

    fn from_dfa(dfa: LazyDfa, vocab: Arc<Vocabulary>, opts: &GrammarOptions) -> Result<Grammar> {
        Grammar::with_atoms(dfa, vocab, opts, None)
    }

    /// [`Grammar::from_dfa`] for an automaton that reads the token atoms `atoms` (see
    /// [`crate::atoms`]).
    fn with_atoms(
        dfa: LazyDfa,
        vocab: Arc<Vocabulary>,
        opts: &GrammarOptions,
        atoms: Option<Arc<crate::atoms::Atoms>>,
    ) -> Result<Grammar> {
        let pattern = dfa.pattern().to_string();
        let g = Grammar {
            vocab,
            dfa,
            index: TokenIndex::new(opts.mask_cache_bytes).with_atoms(atoms),
            options: opts.clone(),
            source: ConstraintSource::regex(&pattern),
            warnings: Vec::new(),
            fit: Fit::default(),
            spans: Mutex::default(),
            uniques: None,
            lineage: Lineage::default(),
            rules_later: AtomicBool::new(false),
        };
        g.index.mask(&g.vocab, &g.dfa, g.dfa.start())?;
        g.dfa.mark_ready();
        Ok(g)
    }

    /// Assemble a grammar from loaded parts (see [`crate::serialize`]).
    pub(crate) fn from_loaded(
        vocab: Arc<Vocabulary>,
        dfa: LazyDfa,
        index: TokenIndex,
        source: ConstraintSource,
    ) -> Grammar {
        Grammar {
            vocab,
            dfa,
            index,
            options: GrammarOptions::default(),
            source,
            warnings: Vec::new(),
            fit: Fit::default(),
            spans: Mutex::default(),
            uniques: None,
            lineage: Lineage::default(),
            rules_later: AtomicBool::new(false),
        }
    }

    /// The generation new matchers start on (see [`Lineage`]): the newest, or a fresh one made
    /// now when the newest is worn. The grammar itself when it has no later generation, or
    /// cannot have one (loaded complete from an index file).
    pub fn current(self: &Arc<Self>) -> Arc<Grammar> {
        self.with_newest(|first, slot, cur| {
            if !cur.dfa.is_worn() {
                return cur;
            }
            match cur.next_generation(first) {
                Some(Ok(g)) => {
                    let g = Arc::new(g);
                    *slot = Some(g.clone());
                    g
                }
                _ => cur,
            }
        })
        .unwrap_or_else(|| self.clone())
    }

    /// Where a matcher of this generation goes after running out of room on it: a newer
    /// generation that is not worn, or a fresh one made now. `None` when this generation is not
    /// worn (the failure was not for lack of room) or cannot have a successor.
    fn renewed(self: &Arc<Self>) -> Option<Arc<Grammar>> {
        if !self.dfa.is_worn() {
            return None;
        }
        let renewed = self.with_newest(|first, slot, cur| {
            if !Arc::ptr_eq(&cur, self) && !cur.dfa.is_worn() {
                return Some(cur);
            }
            let g = Arc::new(self.next_generation(first)?.ok()?);
            *slot = Some(g.clone());
            Some(g)
        });
        match renewed {
            Some(g) => g,
            // the grammar the caller compiled is gone: a generation of its own
            None => Some(Arc::new(self.next_generation(self)?.ok()?)),
        }
    }

    /// `f` of the first generation, its slot for the newest (locked), and the newest (the
    /// first itself until there is a later one); `None` when the first generation is gone.
    fn with_newest<R>(
        self: &Arc<Self>,
        f: impl FnOnce(&Arc<Grammar>, &mut Option<Arc<Grammar>>, Arc<Grammar>) -> R,
    ) -> Option<R> {
        let first = self.first_generation()?;
        let mut slot = first
            .lineage
            .newest
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let cur = slot.clone().unwrap_or_else(|| first.clone());
        Some(f(&first, &mut slot, cur))
    }

    fn first_generation(self: &Arc<Self>) -> Option<Arc<Grammar>> {
        match &self.lineage.first {
            None => Some(self.clone()),
            Some(w) => w.upgrade(),
        }
    }

    /// This grammar's next generation (see [`Lineage`]); `None` when its automaton cannot be
    /// renewed.
    fn next_generation(&self, first: &Arc<Grammar>) -> Option<Result<Grammar>> {
        let dfa = match self.dfa.fresh()? {
            Ok(d) => d,
            Err(e) => return Some(Err(e)),
        };
        dfa.mark_ready();
        Some(Ok(Grammar {
            vocab: self.vocab.clone(),
            dfa,
            index: TokenIndex::new(self.options.mask_cache_bytes)
                .with_atoms(self.index.atoms_arc()),
            options: self.options.clone(),
            source: self.source.clone(),
            warnings: self.warnings.clone(),
            fit: Fit::default(),
            spans: Mutex::default(),
            uniques: self.uniques.clone(),
            lineage: Lineage {
                first: Some(Arc::downgrade(first)),
                newest: Mutex::default(),
                number: self.lineage.number + 1,
            },
            rules_later: AtomicBool::new(false),
        }))
    }

    /// How many generations this grammar has had (1 until its states first wore out; see
    /// [`Lineage`]).
    pub fn generations(self: &Arc<Self>) -> u32 {
        self.newest().lineage.number + 1
    }

    /// The newest generation (see [`Lineage`]), without making one.
    pub fn newest(self: &Arc<Self>) -> Arc<Grammar> {
        self.with_newest(|_, _, cur| cur)
            .unwrap_or_else(|| self.clone())
    }

    /// Whether the grammar has arrays with `uniqueItems` over strings, which its matchers
    /// enforce beside the automaton ([`crate::unique`]): [`Grammar::fill_mask`] and
    /// [`Grammar::advance`], which see the automaton alone, do not.
    pub fn has_unique_arrays(&self) -> bool {
        self.uniques.is_some()
    }

    /// What the grammar was compiled from.
    pub fn source(&self) -> &ConstraintSource {
        &self.source
    }

    /// The mask index.
    pub fn index(&self) -> &TokenIndex {
        &self.index
    }

    /// Compile a JSON Schema: the grammar accepts the JSON texts described in
    /// `docs/json-schema.md` (schema property order, the whitespace policy, bounded nesting).
    pub fn from_json_schema(
        schema: &serde_json::Value,
        vocab: Arc<Vocabulary>,
        schema_opts: &JsonSchemaOptions,
        opts: &GrammarOptions,
    ) -> Result<Grammar> {
        // a schema whose automaton may nest deeply is built on a big stack, from the schema walk
        // to the first mask, and so are its rules later (the small ones on this thread's stack)
        let big = crate::json_schema::needs_big_stack(schema, schema_opts);
        let run = || {
            opts.compiling(|| {
                let c = crate::json_schema::compile_on(schema, schema_opts, big)?;
                let label = schema_label(&c.expr);
                let dfa = LazyDfa::from_owned(&label, c.expr, &opts.regex)?;
                if big {
                    dfa.build_rules_on_big_stack();
                }
                if dfa.start() == DEAD {
                    // a recursion, or a string language that only its automaton shows empty
                    // (a pattern whose anchors no string satisfies), hides it from the compiler
                    return Err(Error::Schema {
                        keyword: "$ref".into(),
                        pointer: String::new(),
                        message: format!(
                            "no JSON value satisfies this schema with at most max_stack_depth={} \
                         recursive calls open (a recursion that never ends, or a pattern no \
                         string matches?)",
                            schema_opts.max_stack_depth
                        ),
                    });
                }
                let mut g = Grammar::from_dfa(dfa, vocab, opts)?;
                g.build_rules_later();
                g.warnings = c.warnings;
                if !c.uniques.is_empty() {
                    g.uniques = Some(Arc::new(Uniques::new(c.uniques)));
                }
                g.source = ConstraintSource::json_schema(schema, schema_opts);
                Ok(g)
            })
        };
        if big {
            budget::stack::on_big_stack(budget::stack::BIG_STACK, run)
        } else {
            run()
        }
    }

    /// Any JSON object (nesting bounded by `max_nesting_depth`).
    pub fn from_json_object(
        vocab: Arc<Vocabulary>,
        schema_opts: &JsonSchemaOptions,
        opts: &GrammarOptions,
    ) -> Result<Grammar> {
        opts.compiling(|| {
            let c = crate::json_schema::any_object(schema_opts)?;
            let label = schema_label(&c.expr);
            let mut g = Grammar::from_dfa(
                LazyDfa::from_owned(&label, c.expr, &opts.regex)?,
                vocab,
                opts,
            )?;
            g.source = ConstraintSource::json_object(schema_opts);
            Ok(g)
        })
    }

    /// Compile a GBNF / EBNF grammar (see `docs/grammars.md`): the output must match the rule
    /// `opts.start`, with at most `opts.max_stack_depth` recursive rule calls open. The first
    /// mask is computed here.
    pub fn from_ebnf(
        text: &str,
        vocab: Arc<Vocabulary>,
        ebnf_opts: &crate::ebnf::EbnfOptions,
        opts: &GrammarOptions,
    ) -> Result<Grammar> {
        // every stage recurses over the grammar's nesting (bounded by the front end, see
        // `ebnf`): all of them on a big stack, so a compile thread's small one is never the limit
        let big = budget::stack::BIG_STACK;
        budget::stack::on_big_stack(big, || {
            opts.compiling(|| {
                let mut atoms = crate::atoms::AtomList::new(Some(&vocab));
                let c = crate::ebnf::compile_with(text, ebnf_opts, &mut atoms)?;
                let atoms = crate::atoms::Atoms::new(atoms.into_ids()).map(Arc::new);
                let label = grammar_label(&c.expr);
                let dfa = LazyDfa::from_owned(&label, c.expr, &opts.regex)?;
                if dfa.start() == DEAD {
                    return Err(no_start(
                        &ebnf_opts.start,
                        ebnf_opts.max_stack_depth,
                        "string",
                    ));
                }
                let mut g = Grammar::with_atoms(dfa, vocab, opts, atoms)?;
                g.warnings = c.warnings;
                g.source = ConstraintSource::ebnf(text, ebnf_opts);
                Ok(g)
            })
        })
    }

    /// Compile a Lark grammar (the dialect llguidance documents, see `crate::lark`): its
    /// terminals lexed greedily, `%ignore`d lexemes between any two, the rules parsed over the
    /// lexemes. The first mask is computed here.
    pub fn from_lark(
        text: &str,
        vocab: Arc<Vocabulary>,
        lark_opts: &crate::lark::LarkOptions,
        opts: &GrammarOptions,
    ) -> Result<Grammar> {
        let big = budget::stack::BIG_STACK;
        budget::stack::on_big_stack(big, || {
            opts.compiling(|| {
                let mut atoms = crate::atoms::AtomList::new(Some(&vocab));
                let c =
                    crate::lark::compile(text, lark_opts, opts.regex.max_nfa_bytes, &mut atoms)?;
                let atoms = crate::atoms::Atoms::new(atoms.into_ids()).map(Arc::new);
                let label = format!("lark grammar ({} lexemes)", c.lexer.num_lexemes());
                let dfa = LazyDfa::from_lexed(&label, c.parser, c.lexer, &opts.regex)?;
                if dfa.start() == DEAD {
                    return Err(no_start(
                        &lark_opts.start,
                        lark_opts.max_stack_depth,
                        "text",
                    ));
                }
                let mut g = Grammar::with_atoms(dfa, vocab, opts, atoms)?;
                g.warnings = c.warnings;
                g.source = ConstraintSource::lark(text, lark_opts);
                Ok(g)
            })
        })
    }

    /// Compile a structural tag (the JSON text vLLM's and SGLang's tool calling send, see
    /// `crate::structural_tag`); `schema_opts` apply to its `json_schema` parts. The first mask
    /// is computed here.
    pub fn from_structural_tag(
        text: &str,
        vocab: Arc<Vocabulary>,
        schema_opts: &JsonSchemaOptions,
        opts: &GrammarOptions,
    ) -> Result<Grammar> {
        // its parts recurse over their own nesting (schemas, grammars): all on a big stack
        let big = budget::stack::BIG_STACK;
        budget::stack::on_big_stack(big, || {
            opts.compiling(|| {
                let c = crate::structural_tag::compile(text, schema_opts, Some(&vocab))?;
                let label = expr_label(&c.expr, "structural tag");
                let dfa = LazyDfa::from_owned(&label, c.expr, &opts.regex)?;
                dfa.build_rules_on_big_stack();
                if dfa.start() == DEAD {
                    return Err(Error::StructuralTag {
                        path: "$".into(),
                        message: "the structural tag matches no string".into(),
                    });
                }
                let atoms = crate::atoms::Atoms::new(c.atoms).map(Arc::new);
                let mut g = Grammar::with_atoms(dfa, vocab, opts, atoms)?;
                // the parts no first mask entered (each tool's), built before a call needs them
                g.build_rules_later();
                g.source = ConstraintSource::structural_tag_written(c.written, schema_opts);
                Ok(g)
            })
        })
    }

    /// Exactly one of `choices` (raw text).
    pub fn from_choice<S: AsRef<str>>(
        choices: &[S],
        vocab: Arc<Vocabulary>,
        opts: &GrammarOptions,
    ) -> Result<Grammar> {
        if choices.is_empty() {
            return Err(Error::InvalidArgument(
                "from_choice needs at least one choice".into(),
            ));
        }
        opts.compiling(|| {
            let hir = crate::json_schema::choice(choices);
            let mut g = Grammar::from_hir(&hir.to_string(), &hir, vocab, opts)?;
            g.source = ConstraintSource::choice(choices);
            Ok(g)
        })
    }

    /// Warnings collected while compiling (lenient schema compilation, unknown keywords).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// A fresh matcher at the start state (of the current generation, see [`Grammar::current`]).
    pub fn matcher(self: &Arc<Self>) -> Matcher {
        Matcher::new(self.clone(), None)
    }

    /// The vocabulary this grammar was compiled for.
    pub fn vocab(&self) -> &Arc<Vocabulary> {
        &self.vocab
    }

    /// The underlying automaton.
    pub fn dfa(&self) -> &LazyDfa {
        &self.dfa
    }

    /// The source regex; for a JSON Schema grammar, the compiled language written as a regex
    /// for inspection (shared parts appear as named groups), or only its size when large.
    pub fn pattern(&self) -> &str {
        self.dfa.pattern()
    }

    /// Compute the mask of every state reachable by tokens (eager mode), in parallel.
    pub fn precompute(&self) -> Result<IndexStats> {
        let deadline = Deadline::after(self.options.max_compile_time);
        let stats = budget::scope(Some(deadline), || {
            self.index
                .precompute(&self.vocab, &self.dfa, self.dfa.start(), Some(deadline))
        })?;
        self.dfa.mark_ready();
        Ok(stats)
    }

    /// Sizes of the index so far.
    pub fn stats(&self) -> IndexStats {
        self.index.stats(&self.dfa)
    }

    /// Whether the full index was precomputed.
    pub fn is_precomputed(&self) -> bool {
        self.index.is_precomputed()
    }

    /// Write the mask for (`state`, `finished`) into `out` (one row, `mask_words` long or
    /// longer; extra words are zeroed).
    pub fn fill_mask(&self, state: u32, finished: bool, out: &mut [u32]) -> Result<()> {
        let words = self.vocab.mask_words();
        if out.len() < words {
            return Err(Error::InvalidArgument(format!(
                "bitmask row has {} words, the vocabulary needs {words}",
                out.len()
            )));
        }
        if finished {
            out.fill(0);
            for &e in self.vocab.eos_ids() {
                out[(e >> 5) as usize] |= 1 << (e & 31);
            }
            return Ok(());
        }
        let m = self.index.mask(&self.vocab, &self.dfa, state)?;
        out[..words].copy_from_slice(&m);
        out[words..].fill(0);
        Ok(())
    }

    /// [`Grammar::fill_mask`], then, with `tokens_left` (the tokens the output may still
    /// have, the next one included), without the tokens after which no accepting state is
    /// reachable in time (see [`crate::fit`]).
    pub fn fill_mask_within(
        &self,
        state: u32,
        finished: bool,
        tokens_left: Option<u32>,
        out: &mut [u32],
    ) -> Result<()> {
        self.fill_mask(state, finished, out)?;
        match tokens_left {
            Some(n) if !finished => {
                let words = self.vocab.mask_words();
                self.fit
                    .restrict(&self.fit_parts(), state, n, &mut out[..words])
            }
            _ => Ok(()),
        }
    }

    /// The fewest tokens from `state` to an accepting state ([`crate::fit::UNREACHABLE`]
    /// when there is none).
    pub fn min_tokens_to_accept(&self, state: u32) -> Result<u32> {
        self.fit.distance(&self.fit_parts(), state)
    }

    fn fit_parts(&self) -> crate::fit::Parts<'_> {
        crate::fit::Parts {
            vocab: &self.vocab,
            dfa: &self.dfa,
            index: &self.index,
        }
    }

    /// The reasoning span ending at `marker` before this grammar (built once per marker).
    pub fn reasoning_span(&self, marker: &[u8]) -> Result<Arc<Span>> {
        let mut spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = spans.get(marker) {
            return Ok(s.clone());
        }
        let span = Arc::new(Span::new(
            marker,
            &self.vocab,
            &self.dfa,
            self.dfa.start(),
            self.index.atoms().is_some(),
        )?);
        spans.insert(marker.to_vec(), span.clone());
        Ok(span)
    }

    /// Hand the rules no mask has entered yet to the background builder once a matcher of
    /// this grammar accepts its first token (see [`Grammar::advance`]), not now: a grammar
    /// compiled only to check a request and fill its first mask never builds them, and a
    /// burst of new grammars does not spend the cores on parts no output has reached.
    fn build_rules_later(&self) {
        self.rules_later.store(true, Ordering::Relaxed);
    }

    /// The state after `token` from `state`, or `None` if the token is not allowed there.
    /// EOS is not handled here (see [`Matcher::accept_token`]).
    pub fn advance(&self, state: u32, token: u32) -> Result<Option<u32>> {
        if self.rules_later.load(Ordering::Relaxed)
            && self.rules_later.swap(false, Ordering::Relaxed)
        {
            self.dfa.build_rules_in_background();
        }
        let bytes = match self.index.atoms() {
            Some(a) => a.bytes(&self.vocab, token),
            None => self.vocab.token_bytes(token),
        };
        match bytes {
            None => Ok(None),
            Some(bytes) => {
                let s = self.dfa.walk(state, bytes)?;
                Ok(if s == DEAD { None } else { Some(s) })
            }
        }
    }
}

/// Where a matcher is inside its reasoning span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Think {
    /// Bytes of the end marker matched by the end of the output.
    matched: u32,
    /// Reasoning tokens so far.
    tokens: u32,
}

/// A matcher's position before a token: state, finished, reasoning position, reader.
type Before = (u32, bool, Option<Think>, Option<Arc<Lex>>);

/// One sequence's position in a grammar.
#[derive(Debug, Clone)]
pub struct Matcher {
    grammar: Arc<Grammar>,
    state: u32,
    finished: bool,
    /// (state, finished, reasoning position, reader) before each accepted token, oldest first.
    history: VecDeque<Before>,
    max_rollback: Option<usize>,
    /// The most tokens the output may have (EOS included), when the output must fit them.
    max_tokens: Option<u32>,
    /// Tokens accepted since the start (EOS included).
    consumed: u32,
    /// A reasoning span before the grammar ([`crate::reasoning`]) and its thinking budget.
    span: Option<(Arc<Span>, Option<u32>)>,
    /// Inside the reasoning span: how far; `None` once the grammar has started.
    think: Option<Think>,
    /// The reader of the output, when the grammar has unique arrays ([`crate::unique`]).
    lex: Option<Arc<Lex>>,
    /// The tokens accepted since the start (EOS included): what a move to a newer generation
    /// of the grammar replays (see [`Lineage`]).
    tokens: Arc<Vec<u32>>,
}

const THINK_START: Think = Think {
    matched: 0,
    tokens: 0,
};

impl Matcher {
    /// A matcher at the start state of the grammar's current generation (see
    /// [`Grammar::current`]); `max_rollback` bounds the history kept (None: unlimited).
    pub fn new(grammar: Arc<Grammar>, max_rollback: Option<usize>) -> Matcher {
        Matcher::on(grammar.current(), max_rollback)
    }

    fn on(grammar: Arc<Grammar>, max_rollback: Option<usize>) -> Matcher {
        let state = grammar.dfa.start();
        let lex = grammar.uniques.as_ref().map(|_| Arc::new(Lex::new()));
        Matcher {
            lex,
            grammar,
            state,
            finished: false,
            history: VecDeque::new(),
            max_rollback,
            max_tokens: None,
            consumed: 0,
            span: None,
            think: None,
            tokens: Arc::default(),
        }
    }

    /// After a budget error on the worn generation `from`: a matcher on a newer generation in
    /// the same position (the same settings, and the same tokens accepted there); `None` when
    /// there is no newer generation to move to (see [`Grammar::renewed`]).
    fn moved(
        from: &Arc<Grammar>,
        max_rollback: Option<usize>,
        max_tokens: Option<u32>,
        span: &Option<(Arc<Span>, Option<u32>)>,
        tokens: &Arc<Vec<u32>>,
    ) -> Option<Result<Matcher>> {
        let grammar = from.renewed()?;
        let replay = || {
            let mut m = Matcher::on(grammar, max_rollback);
            m.max_tokens = max_tokens;
            if let Some((span, budget)) = span {
                m.span = Some((m.grammar.reasoning_span(span.marker())?, *budget));
                m.think = Some(THINK_START);
            }
            for &t in tokens.iter() {
                if !m.accept_once(t)? {
                    return Err(Error::Internal(format!(
                        "token {t} was accepted by one generation of the grammar and refused by \
                         the next"
                    )));
                }
            }
            m.tokens = tokens.clone();
            Ok(m)
        };
        Some(replay())
    }

    /// Keep the output within `max_tokens` tokens (None: no budget): from then on a mask
    /// allows a token only if the output can still be finished within the tokens left
    /// ([`crate::fit`]). Not supported together with a reasoning span.
    pub fn set_max_tokens(&mut self, max_tokens: Option<u32>) -> Result<()> {
        if max_tokens.is_some() && self.span.is_some() {
            return Err(unsupported_fit_with_reasoning());
        }
        if max_tokens.is_some() && self.grammar.uniques.is_some() {
            return Err(unsupported_with_unique("a token budget (max_tokens)"));
        }
        self.max_tokens = max_tokens;
        Ok(())
    }

    /// Start the output with a reasoning span ending at `marker` (None: none), forced onto the
    /// marker once `thinking_budget` reasoning tokens are spent ([`crate::reasoning`]). Only
    /// before the first token.
    pub fn set_reasoning(
        &mut self,
        marker: Option<&[u8]>,
        thinking_budget: Option<u32>,
    ) -> Result<()> {
        if self.consumed > 0 {
            return Err(Error::InvalidArgument(
                "a reasoning span can only be set before the first token".into(),
            ));
        }
        match marker {
            None => {
                if thinking_budget.is_some() {
                    return Err(Error::InvalidArgument(
                        "a thinking budget needs a reasoning end marker".into(),
                    ));
                }
                self.span = None;
                self.think = None;
            }
            Some(marker) => {
                if self.max_tokens.is_some() {
                    return Err(unsupported_fit_with_reasoning());
                }
                if self.grammar.uniques.is_some() {
                    return Err(unsupported_with_unique("a reasoning span"));
                }
                self.span = Some((self.grammar.reasoning_span(marker)?, thinking_budget));
                self.think = Some(THINK_START);
            }
        }
        self.history.clear();
        Ok(())
    }

    /// The reasoning end marker, if the output starts with a reasoning span.
    pub fn reasoning_end(&self) -> Option<&[u8]> {
        self.span.as_ref().map(|(s, _)| s.marker())
    }

    /// The thinking budget, if any.
    pub fn thinking_budget(&self) -> Option<u32> {
        self.span.as_ref().and_then(|(_, b)| *b)
    }

    /// Still inside the reasoning span (the grammar has not started).
    pub fn is_reasoning(&self) -> bool {
        self.think.is_some()
    }

    /// Inside the reasoning span: the span, how far, and whether the thinking budget is spent
    /// (only tokens continuing the marker are allowed then).
    fn reasoning_position(&self) -> Option<(Arc<Span>, Think, bool)> {
        let (span, budget) = self.span.as_ref()?;
        let think = self.think?;
        let forced = budget.is_some_and(|b| think.tokens >= b);
        Some((span.clone(), think, forced))
    }

    /// Tokens of the reasoning span so far (the one that completed the marker not included).
    pub fn reasoning_tokens(&self) -> u32 {
        self.think.map_or(0, |t| t.tokens)
    }

    /// The token budget, if any.
    pub fn max_tokens(&self) -> Option<u32> {
        self.max_tokens
    }

    /// Tokens accepted since the start (EOS included).
    pub fn consumed(&self) -> u32 {
        self.consumed
    }

    /// Tokens the output may still have under the budget (the next one included).
    pub fn tokens_left(&self) -> Option<u32> {
        self.max_tokens.map(|m| m.saturating_sub(self.consumed))
    }

    /// The grammar.
    pub fn grammar(&self) -> &Arc<Grammar> {
        &self.grammar
    }

    /// Current DFA state id.
    pub fn state(&self) -> u32 {
        self.state
    }

    /// EOS was consumed.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// EOS is allowed now (the output so far is a complete match, or EOS was already consumed).
    pub fn is_accepting(&self) -> bool {
        self.finished || (self.think.is_none() && self.grammar.dfa.is_accepting(self.state))
    }

    /// How many tokens can be rolled back.
    pub fn history_len(&self) -> usize {
        self.history.len()
    }

    fn push_history(&mut self) {
        self.consumed = self.consumed.saturating_add(1);
        self.history
            .push_back((self.state, self.finished, self.think, self.lex.clone()));
        if let Some(max) = self.max_rollback {
            while self.history.len() > max {
                self.history.pop_front();
            }
        }
    }

    /// Consume one token. Returns `false`, leaving the state unchanged, if it is not allowed.
    pub fn accept_token(&mut self, token: u32) -> Result<bool> {
        let ok = match self.accept_once(token) {
            Err(e @ Error::Budget(_)) => match Matcher::moved(
                &self.grammar,
                self.max_rollback,
                self.max_tokens,
                &self.span,
                &self.tokens,
            ) {
                None => return Err(e),
                Some(m) => {
                    *self = m?;
                    self.accept_once(token)?
                }
            },
            r => r?,
        };
        if ok {
            Arc::make_mut(&mut self.tokens).push(token);
        }
        Ok(ok)
    }

    fn accept_once(&mut self, token: u32) -> Result<bool> {
        let vocab = &self.grammar.vocab;
        if (token as usize) >= vocab.vocab_size() {
            return Ok(false);
        }
        if vocab.is_eos(token) {
            if self.is_accepting() {
                self.push_history();
                self.finished = true;
                return Ok(true);
            }
            return Ok(false);
        }
        if self.finished {
            return Ok(false);
        }
        if let Some((span, think, forced)) = self.reasoning_position() {
            let Some(mv) = span.step(vocab, think.matched, token) else {
                return Ok(false);
            };
            if !span.allows(think.matched, &mv, forced) {
                return Ok(false);
            }
            self.push_history();
            match mv.step {
                Step::Partial(p) => {
                    self.think = Some(Think {
                        matched: p,
                        tokens: think.tokens.saturating_add(1),
                    });
                }
                Step::Complete(s) => {
                    self.think = None;
                    self.state = s;
                }
            }
            return Ok(true);
        }
        let Some(s) = self.grammar.advance(self.state, token)? else {
            return Ok(false);
        };
        let lex = match (&self.grammar.uniques, &self.lex) {
            (Some(u), Some(lex)) => {
                let mut l = Lex::clone(lex);
                if !(l.step(u, vocab.raw_bytes(token)) && l.live(u)) {
                    return Ok(false);
                }
                Some(Arc::new(l))
            }
            _ => None,
        };
        self.push_history();
        self.state = s;
        if lex.is_some() {
            self.lex = lex;
        }
        Ok(true)
    }

    /// Consume tokens in order until one is refused; returns how many were accepted.
    pub fn accept_tokens(&mut self, tokens: &[u32]) -> Result<usize> {
        for (i, &t) in tokens.iter().enumerate() {
            if !self.accept_token(t)? {
                return Ok(i);
            }
        }
        Ok(tokens.len())
    }

    /// Undo the last `n` accepted tokens (EOS included).
    pub fn rollback(&mut self, n: usize) -> Result<()> {
        if n > self.history.len() {
            return Err(Error::InvalidArgument(format!(
                "cannot roll back {n} tokens: only {} are in the history{}",
                self.history.len(),
                match self.max_rollback {
                    Some(m) => format!(" (max_rollback={m})"),
                    None => String::new(),
                }
            )));
        }
        for _ in 0..n {
            let (s, f, t, l) = self.history.pop_back().expect("checked length");
            self.state = s;
            self.finished = f;
            self.think = t;
            self.lex = l;
            self.consumed = self.consumed.saturating_sub(1);
        }
        let kept = self.tokens.len() - n;
        Arc::make_mut(&mut self.tokens).truncate(kept);
        Ok(())
    }

    /// Back to the start state with an empty history.
    pub fn reset(&mut self) {
        self.state = self.grammar.dfa.start();
        self.finished = false;
        self.history.clear();
        self.consumed = 0;
        self.think = self.span.as_ref().map(|_| THINK_START);
        self.lex = self.grammar.uniques.as_ref().map(|_| Arc::new(Lex::new()));
        self.tokens = Arc::default();
    }

    /// Overwrite `row` with the mask of tokens allowed next.
    pub fn fill_next_token_bitmask(&self, row: &mut [u32]) -> Result<()> {
        MaskRequest::from(self).fill(row)
    }
}

fn unsupported_with_unique(what: &str) -> Error {
    Error::InvalidArgument(format!(
        "{what} is not supported with a schema whose arrays have uniqueItems over strings or \
         integers"
    ))
}

fn unsupported_fit_with_reasoning() -> Error {
    Error::InvalidArgument(
        "a token budget (max_tokens) together with a reasoning span is not supported".into(),
    )
}

/// What a batch fill needs from one matcher: its grammar and position.
#[derive(Clone)]
pub struct MaskRequest {
    /// The grammar.
    pub grammar: Arc<Grammar>,
    /// DFA state.
    pub state: u32,
    /// EOS consumed.
    pub finished: bool,
    /// Tokens the output may still have, when it must fit a budget.
    pub tokens_left: Option<u32>,
    /// Inside a reasoning span: the span, the marker bytes matched, and whether the thinking
    /// budget is spent.
    pub reasoning: Option<(Arc<Span>, u32, bool)>,
    /// The matcher's reader of its output, when the grammar has unique arrays.
    pub unique: Option<Arc<Lex>>,
    /// What a move to a newer generation of the grammar needs (see [`Lineage`]): the
    /// matcher's token budget, reasoning span and thinking budget, and tokens.
    max_tokens: Option<u32>,
    span: Option<(Arc<Span>, Option<u32>)>,
    tokens: Arc<Vec<u32>>,
}

impl From<&Matcher> for MaskRequest {
    fn from(m: &Matcher) -> Self {
        let reasoning = m
            .reasoning_position()
            .map(|(span, t, forced)| (span, t.matched, forced));
        MaskRequest {
            grammar: m.grammar.clone(),
            state: m.state,
            finished: m.finished,
            tokens_left: m.tokens_left(),
            reasoning,
            unique: m.lex.clone(),
            max_tokens: m.max_tokens,
            span: m.span.clone(),
            tokens: m.tokens.clone(),
        }
    }
}

impl MaskRequest {
    /// Overwrite `row` with the mask of tokens allowed next.
    pub fn fill(&self, row: &mut [u32]) -> Result<()> {
        match self.fill_once(row) {
            Err(e @ Error::Budget(_)) => {
                // the generation is worn: the same position on a newer one (the matcher moves
                // there itself at its next token)
                let moved = Matcher::moved(
                    &self.grammar,
                    Some(0),
                    self.max_tokens,
                    &self.span,
                    &self.tokens,
                );
                match moved {
                    Some(m) => MaskRequest::from(&m?).fill_once(row),
                    None => Err(e),
                }
            }
            r => r,
        }
    }

    fn fill_once(&self, row: &mut [u32]) -> Result<()> {
        if let (Some((span, matched, forced)), false) = (&self.reasoning, self.finished) {
            let words = self.grammar.vocab.mask_words();
            if row.len() < words {
                return Err(Error::InvalidArgument(format!(
                    "bitmask row has {} words, the vocabulary needs {words}",
                    row.len()
                )));
            }
            row[..words].copy_from_slice(&span.mask(*matched, *forced));
            row[words..].fill(0);
            return Ok(());
        }
        self.grammar
            .fill_mask_within(self.state, self.finished, self.tokens_left, row)?;
        if let (Some(u), Some(lex), false) = (&self.grammar.uniques, &self.unique, self.finished) {
            crate::unique::filter(u, lex, &self.grammar.vocab, row);
            if row.iter().all(|&w| w == 0) {
                return Err(Error::Unspellable {
                    bytes: "(any that do not repeat an item of a uniqueItems array)".into(),
                });
            }
        }
        Ok(())
    }
}

/// Fill `bitmask` (row-major, `row_words` words per row) for many matchers in parallel:
/// request `k` overwrites row `rows[k]`. Rows must be distinct and in range.
pub fn fill_next_token_bitmask_batch(
    requests: &[MaskRequest],
    rows: &[usize],
    bitmask: &mut [u32],
    row_words: usize,
) -> Result<()> {
    if requests.len() != rows.len() {
        return Err(Error::InvalidArgument(format!(
            "{} matchers but {} row indices",
            requests.len(),
            rows.len()
        )));
    }
    if row_words == 0 || !bitmask.len().is_multiple_of(row_words) {
        return Err(Error::InvalidArgument(
            "bitmask length is not a multiple of the row width".into(),
        ));
    }
    let n_rows = bitmask.len() / row_words;
    let mut target: Vec<Option<usize>> = vec![None; n_rows];
    for (k, &r) in rows.iter().enumerate() {
        if r >= n_rows {
            return Err(Error::InvalidArgument(format!(
                "row index {r} is out of range for {n_rows} rows"
            )));
        }
        if target[r].is_some() {
            return Err(Error::InvalidArgument(format!(
                "row index {r} appears twice"
            )));
        }
        target[r] = Some(k);
    }
    if requests.len() == 1 {
        // One row: no thread pool round trip.
        let at = rows[0] * row_words;
        return requests[0].fill(&mut bitmask[at..at + row_words]);
    }
    bitmask
        .par_chunks_mut(row_words)
        .zip(target.par_iter())
        .with_min_len(1)
        .try_for_each(|(row, t)| match t {
            Some(k) => requests[*k].fill(row),
            None => Ok(()),
        })
}

/// A compiled schema's language as regex text for [`Grammar::pattern`] when it is a plain
/// regular expression of at most a few thousand nodes; otherwise only its size (writing out a
/// large automaton costs more than the rest of a compile and helps nobody, and the
/// intermediate form's shared constructs have no regex text of the same size).
/// The pattern text of a compiled expression: its regex when it is one small HIR, else a
/// line naming `what` it is (`"JSON Schema"`, `"grammar"`) and its size.
fn expr_label(x: &Expr, what: &str) -> String {
    let w = x.weight();
    match x.as_hir() {
        Some(h) if w <= 4096 => h.to_string(),
        _ => format!("(a {what} automaton of weight {w}; no regex text)"),
    }
}

fn grammar_label(x: &Expr) -> String {
    expr_label(x, "grammar")
}

fn schema_label(x: &Expr) -> String {
    expr_label(x, "JSON Schema")
}

/// A grammar whose start rule matches no `what` (string, text) within its stack bound.
fn no_start(start: &str, max_stack_depth: u32, what: &str) -> Error {
    Error::Grammar {
        line: 1,
        column: 1,
        message: format!(
            "the rule `{start}` matches no {what} with at most max_stack_depth={max_stack_depth} \
             rule calls open (a recursion that never ends, or a rule with nothing to match?)"
        ),
    }
}

#[cfg(test)]
mod tests;

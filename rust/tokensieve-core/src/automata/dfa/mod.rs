//! The lazy DFA every grammar runs on: a Thompson NFA determinized on demand, with state ids
//! that never change.
//!
//! A DFA state is the set of NFA states that consume a byte (plus an "accepting" marker),
//! interned once and given the next free id by subset construction. Ids are handed out in
//! creation order and never reused, so a matcher can keep a state id across calls and a mask
//! cache can key on it. The NFA comes from regex-automata's compiler for a plain regex, or from
//! `super::nfa` for expressions holding shared parts, counters or recursion; front ends
//! (`crate::regex`, `crate::json_schema`) only hand over a HIR or an expression.
//!
//! When the NFA holds marker states (`super::nfa::Count`), each NFA state of a subset carries
//! two registers: the count of the repetition it is in, and the top frame of its stack of
//! recursive calls (frames interned per automaton). The closure applies the markers to them, so
//! a large counted repetition needs one copy of its body and a recursion one copy of itself.
//!
//! An expression cut into rules (see [`super::rules`]) starts with the root's NFA only; a
//! rule's NFA is appended when a closure first reaches a call of it (or taken from the
//! background builder, which compiles the rules of a new grammar ahead of their first entry),
//! and a rule call is a frame of the same stack.
//!
//! The language is the *full match* of the HIR: the automaton starts anchored and a state is
//! accepting when the NFA can reach its match state at the end of the input. Because the NFA is
//! built over UTF-8 bytes, a state reached in the middle of a multi-byte character only
//! continues with its tail bytes.
//!
//! ```
//! use tokensieve_core::automata::dfa::{LazyDfa, DEAD};
//! use tokensieve_core::regex::RegexOptions;
//! let dfa = LazyDfa::new("[0-9]+", &RegexOptions::default()).unwrap();
//! let s = dfa.walk(dfa.start(), b"42").unwrap();
//! assert!(dfa.is_accepting(s));
//! assert_eq!(dfa.walk(dfa.start(), b"4x").unwrap(), DEAD);
//! ```
//!
//! Invariant relied on by the token index: every state other than [`DEAD`] is *live* — some
//! byte string leads from it to an accepting state. NFA states that cannot reach the match state
//! are pruned during the closure, so a set that is left empty and non-accepting is the dead state.
//!
//! The submodules: `graph` — the NFA the automaton runs on (the root's states, then the rules
//! appended as they are entered); `ruleset` — the rules of a split automaton and the background
//! builder; `analysis` — what the closure needs to know of each NFA state, computed once per
//! NFA; `determinize` — the transition table, the closure and the steps over a byte; `parts` —
//! complete tables exported for index files and loaded back. This module holds [`LazyDfa`]'s
//! construction and public API, and [`DfaView`].

mod analysis;
mod determinize;
mod graph;
mod parts;
mod ruleset;

use std::sync::{Arc, Mutex, MutexGuard};

use regex_automata::nfa::thompson::{self, NFA};
use regex_syntax::hir::Hir;

use crate::budget::Deadline;
use crate::error::{Error, Result};
use determinize::Table;
use graph::Graph;
use ruleset::{background, RuleSet};

use super::depth::Depths;
use super::expr::Expr;
use super::lexer::Lexer;
use super::nfa::Count;

pub use parts::DfaParts;

#[cfg(test)]
use super::depth::NONE;
#[cfg(test)]
use ruleset::Slot;

/// The state id of the dead state: no continuation can be accepted from it.
pub const DEAD: u32 = 0;
const UNKNOWN: u32 = u32::MAX;

/// Limits applied while compiling and determinizing a regex.
#[derive(Debug, Clone)]
pub struct RegexOptions {
    /// Largest number of DFA states before a compile or step fails with a budget error.
    pub max_states: usize,
    /// Largest NFA, in bytes of heap, that the Thompson compiler may build.
    pub max_nfa_bytes: usize,
    /// Deepest nesting of groups and repetitions accepted by the parser.
    pub nest_limit: u32,
}

impl Default for RegexOptions {
    fn default() -> Self {
        RegexOptions {
            max_states: 100_000,
            max_nfa_bytes: 64 << 20,
            nest_limit: 250,
        }
    }
}

/// A lazily determinized DFA over bytes. Shareable across threads: the transition table sits
/// behind a mutex and grows as states are visited.
pub struct LazyDfa {
    /// byte → equivalence class
    classes: [u8; 256],
    /// one representative byte per class
    reps: Vec<u8>,
    stride: usize,
    /// Whether the automaton is split into rules: its classes are then single bytes (rules not
    /// built yet may tell any two bytes apart), and a computed transition is stored for every
    /// byte that the subset's states cannot tell apart from the byte asked for.
    split: bool,
    /// At which stack depths each NFA state can still finish, when the automaton has a stack
    /// (see [`super::depth`]); never with rules.
    depths: Option<Arc<Depths>>,
    /// Whether each subset entry carries a count and a stack frame (the automaton has marker
    /// states, see [`super::nfa::Count`]).
    registers: bool,
    max_states: usize,
    table: Mutex<Table>,
    start: u32,
    /// The NFA state the start state is the closure of.
    start_nfa: u32,
    pattern: String,
    /// A lexed automaton's lexer (see [`LazyDfa::from_lexed`]); its public states are then
    /// pairs of a parser state and a lexer state.
    lexer: Option<Arc<Lexer>>,
}

impl std::fmt::Debug for LazyDfa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyDfa")
            .field("pattern", &self.pattern)
            .field("states", &self.num_states())
            .finish()
    }
}

impl LazyDfa {
    /// Compile an already parsed pattern. `pattern` is kept for messages only. Large counted
    /// repetitions become counters (see [`super::hir::counts`]) through this layer's NFA
    /// builder; everything else goes through regex-automata's compiler.
    pub fn from_hir(pattern: &str, hir: &Hir, opts: &RegexOptions) -> Result<LazyDfa> {
        if super::hir::has_counter(hir) {
            let built = super::nfa::build(&Expr::Hir(hir.clone()), opts.max_nfa_bytes)?;
            return Self::from_nfa(pattern, built.nfa, built.counts, None, 0, opts, None);
        }
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .which_captures(thompson::WhichCaptures::None)
                    .nfa_size_limit(Some(opts.max_nfa_bytes)),
            )
            .build_from_hir(hir)
            .map_err(|e| {
                Error::Budget(format!(
                    "the regex automaton is too large ({e}); large counted repetitions such \
                         as {{1000}} multiply the automaton size — lower the bounds or raise \
                         max_nfa_bytes"
                ))
            })?;
        Self::from_nfa(pattern, nfa, Vec::new(), None, 0, opts, None)
    }

    /// Compile an expression of the intermediate form (see [`super::expr`]): plain ones as
    /// [`LazyDfa::from_hir`] does, the others with this layer's NFA builder.
    pub(crate) fn from_expr(pattern: &str, x: &Expr, opts: &RegexOptions) -> Result<LazyDfa> {
        match x.as_hir() {
            Some(h) => Self::from_hir(pattern, h, opts),
            None => Self::from_owned(pattern, x.clone(), opts),
        }
    }

    /// [`LazyDfa::from_expr`] of an expression it may take apart: a large one is cut into
    /// rules compiled when first entered (see [`super::rules`]).
    pub(crate) fn from_owned(pattern: &str, x: Expr, opts: &RegexOptions) -> Result<LazyDfa> {
        if let Some(h) = x.as_hir() {
            return Self::from_hir(pattern, h, opts);
        }
        Self::from_owned_with(pattern, x, opts, None)
    }

    /// A lexed automaton: `parser` is a language over the lexer's symbols (each lexeme a byte
    /// class, [`Lexer::symbols_of`]), and the automaton reads text: a state is a pair of a
    /// parser state and a lexer state. A lexeme ends where the next byte cannot continue any
    /// lexeme the parser allows at its start (greedy, no backtracking); the parser then reads
    /// the symbol of the lexemes ending there, and the byte starts the next lexeme. The end of
    /// the input ends the lexeme being read. The parser's language decides everything else
    /// (where ignored lexemes may stand is part of it).
    pub(crate) fn from_lexed(
        pattern: &str,
        parser: Expr,
        lexer: Arc<Lexer>,
        opts: &RegexOptions,
    ) -> Result<LazyDfa> {
        Self::from_owned_with(pattern, parser, opts, Some(lexer))
    }

    fn from_owned_with(
        pattern: &str,
        x: Expr,
        opts: &RegexOptions,
        lexer: Option<Arc<Lexer>>,
    ) -> Result<LazyDfa> {
        let split = super::rules::split(x);
        let eager = split.eager();
        let mut rules = split.rules;
        let root = std::mem::replace(&mut rules[0], Expr::empty());
        // (rule 0, the root, stays in the set as an empty placeholder)
        let (built, next_rec) = super::nfa::build_with(&root, opts.max_nfa_bytes, 0, false)?;
        let rules =
            (rules.len() > 1).then(|| Arc::new(RuleSet::new(rules, &root, opts.max_nfa_bytes)));
        drop(root);
        let dfa = Self::from_nfa(
            pattern,
            built.nfa,
            built.counts,
            rules,
            next_rec,
            opts,
            lexer,
        )?;
        {
            let mut t = dfa.lock();
            for r in eager {
                t.enter(r)?;
            }
        }
        Ok(dfa)
    }

    fn from_nfa(
        pattern: &str,
        nfa: NFA,
        counts: Vec<Option<Count>>,
        rules: Option<Arc<RuleSet>>,
        next_rec: u32,
        opts: &RegexOptions,
        lexer: Option<Arc<Lexer>>,
    ) -> Result<LazyDfa> {
        let counts = if counts.iter().any(Option::is_some) {
            counts
        } else {
            Vec::new()
        };
        let split = rules.is_some();
        let mut classes = [0u8; 256];
        let mut reps = Vec::new();
        // a lexed automaton's rows serve both the parser's symbols and the text's bytes
        if split || lexer.is_some() {
            for b in 0..=255u8 {
                classes[b as usize] = b;
                reps.push(b);
            }
        } else {
            let bc = nfa.byte_classes();
            for b in 0..=255u8 {
                let c = bc.get(b);
                classes[b as usize] = c;
                if c as usize == reps.len() {
                    reps.push(b);
                }
            }
        }
        let stride = reps.len();
        let registers = !counts.is_empty();
        let mut g = Graph::new(nfa, counts, rules, next_rec)?;
        g.max_nfa_bytes = opts.max_nfa_bytes;
        let root = g.root.as_ref().expect("just built");
        let start_nfa = root.start_anchored().as_u32();
        // a split automaton holds no stack bound (see `super::rules`)
        let depths = if split {
            None
        } else {
            Depths::compute(root, &g.counts, &g.cont)?
        };
        let mut dfa = LazyDfa {
            classes,
            reps,
            stride,
            split,
            depths: depths.map(Arc::new),
            registers,
            max_states: opts.max_states.max(2),
            table: Mutex::new(Table::new(Graph::loaded())),
            start: DEAD,
            start_nfa,
            pattern: pattern.to_string(),
            lexer,
        };
        dfa.start_on(g)?;
        Ok(dfa)
    }

    /// Make `g` this automaton's NFA, with a table holding the dead state and the start state
    /// alone.
    fn start_on(&mut self, g: Graph) -> Result<()> {
        let mut table = Table::new(g);
        table.max_bytes = determinize::table_bytes(table.g.max_nfa_bytes);
        // State 0: dead (empty, non-accepting set); its row loops onto itself.
        table.sets.push(Box::new([]));
        table.accepting.push(false);
        table.trans.extend(std::iter::repeat_n(DEAD, self.stride));
        table.ids.insert(Box::new([]), DEAD);
        self.start = self.closure_intern(&mut table, &[(self.start_nfa, 0)], true)?;
        if self.lexer.is_some() && self.start != DEAD {
            self.start = self.intern_pair(&mut table, self.start, super::lexer::LEX_START, 0)?;
        }
        table.mark_ready();
        self.table = Mutex::new(table);
        Ok(())
    }

    /// The same automaton without the states built lazily so far: its NFA as it is now (the
    /// rules entered stay entered, the others are still entered on demand), a table holding
    /// the start state alone, the same limits. `None` for an automaton loaded complete from an
    /// index file (it builds nothing, so nothing wears).
    pub fn fresh(&self) -> Option<Result<LazyDfa>> {
        let g = {
            let t = self.lock();
            t.g.root.as_ref()?;
            t.g.clone()
        };
        let mut dfa = LazyDfa {
            classes: self.classes,
            reps: self.reps.clone(),
            stride: self.stride,
            split: self.split,
            depths: self.depths.clone(),
            registers: self.registers,
            max_states: self.max_states,
            table: Mutex::new(Table::new(Graph::loaded())),
            start: DEAD,
            start_nfa: self.start_nfa,
            pattern: self.pattern.clone(),
            lexer: self.lexer.clone(),
        };
        Some(dfa.start_on(g).map(|()| dfa))
    }

    /// Record that the automaton is ready for matchers (compiled, first mask computed, or
    /// precomputed): from now on its [`LazyDfa::is_worn`] counts the states built after.
    pub fn mark_ready(&self) {
        self.lock().mark_ready();
    }

    /// Whether the states built since [`LazyDfa::mark_ready`] hold more than half of what was
    /// left of `max_states` or of the table's byte budget then: matchers that start now should
    /// start on a [`LazyDfa::fresh`] copy, so that the ones running keep the other half.
    pub fn is_worn(&self) -> bool {
        let t = self.lock();
        let (s0, b0) = t.ready;
        let half =
            |now: usize, at: usize, max: usize| now.saturating_sub(at) > max.saturating_sub(at) / 2;
        half(t.sets.len(), s0, self.max_states) || half(t.bytes, b0, t.max_bytes)
    }

    /// The start state.
    pub fn start(&self) -> u32 {
        self.start
    }

    /// The source pattern.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Hand the rules not compiled yet to the background builder (one thread per process),
    /// which compiles them, the rules nearer the root first, until every rule is compiled or
    /// the automaton is dropped; entering a rule first still compiles it on the spot (or waits
    /// for the builder when it is on it). Nothing to do for an automaton without rules, or
    /// when the environment sets `TOKENSIEVE_BACKGROUND_RULES=0`.
    pub fn build_rules_in_background(&self) {
        let rules = self.lock().g.rules.clone();
        if let Some(rules) = rules {
            let Some(tx) = background() else { return };
            let _ = tx.send(Arc::downgrade(&rules));
        }
    }

    /// Compile the rules entered later on a big stack of their own (whatever thread enters
    /// them), for an expression whose parts nest deeply (a JSON Schema with long names or
    /// long lists, see `json_schema::needs_big_stack`). Nothing for an automaton without rules.
    pub fn build_rules_on_big_stack(&self) {
        if let Some(rules) = &self.lock().g.rules {
            rules.set_big_stack();
        }
    }

    /// The number of NFA states built so far (0 when loaded complete from a file).
    #[cfg(test)]
    pub(crate) fn nfa_states(&self) -> usize {
        self.lock().g.len()
    }

    /// The number of rules the automaton was cut into and how many of them are compiled so
    /// far (see [`super::rules`]).
    #[cfg(test)]
    pub(crate) fn rules_built(&self) -> (usize, usize) {
        let t = self.lock();
        let n = t.g.entries.len().saturating_sub(1);
        (n, t.g.entries.iter().filter(|&&e| e != NONE).count())
    }

    /// How many rules the background builder has compiled and not yet handed over.
    #[cfg(test)]
    pub(crate) fn rules_ready(&self) -> usize {
        let rules = self.lock().g.rules.clone();
        rules.map_or(0, |r| {
            r.slots()
                .iter()
                .filter(|s| matches!(s, Slot::Done(b) if b.is_ok()))
                .count()
        })
    }

    /// Number of DFA states created so far.
    pub fn num_states(&self) -> usize {
        self.lock().sets.len()
    }

    /// Whether subset entries carry counts or stack frames (only then can a state's
    /// [`LazyDfa::representative`] differ from it).
    pub fn has_registers(&self) -> bool {
        self.registers && self.lexer.is_none()
    }

    /// Number of byte equivalence classes.
    pub fn num_classes(&self) -> usize {
        self.stride
    }

    /// Whether `state` accepts the end of the input.
    pub fn is_accepting(&self, state: u32) -> bool {
        self.lock().accepting[state as usize]
    }

    /// Run the DFA over `bytes` from `state`; returns [`DEAD`] as soon as the input cannot
    /// be continued into a match.
    pub fn walk(&self, state: u32, bytes: &[u8]) -> Result<u32> {
        self.view().walk(state, bytes)
    }

    /// Lock the transition table for a sequence of steps (one trie walk, one token).
    pub fn view(&self) -> DfaView<'_> {
        DfaView {
            dfa: self,
            table: self.lock(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock cannot leave the table inconsistent in a way that
        // matters (every write is completed before the next read), so poisoning is ignored.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Determinize every state reachable from the start. Used by eager precomputation.
    ///
    /// When it fails (past `max_states` or the deadline), the states it added are forgotten
    /// again, so that the automaton keeps its whole state budget for the matchers after it:
    /// the table is locked throughout, so no one else has seen them.
    pub fn determinize_all(&self, deadline: Option<Deadline>) -> Result<usize> {
        let mut view = self.view();
        let before = view.table.sets.len();
        let mut all = || -> Result<()> {
            let mut i = 0usize;
            while i < view.table.sets.len() {
                if let Some(d) = deadline {
                    if i.is_multiple_of(256) {
                        d.check("determinizing the whole automaton")?;
                    }
                }
                for c in 0..self.stride {
                    let b = self.reps[c];
                    view.next(i as u32, b)?;
                }
                i += 1;
            }
            Ok(())
        };
        match all() {
            Ok(()) => Ok(view.table.sets.len()),
            Err(e) => {
                view.table.forget_from(before, self.stride);
                Err(e)
            }
        }
    }

    /// Byte values on which `state` has a live transition (for error messages).
    pub fn live_bytes(&self, state: u32) -> Result<Vec<u8>> {
        let mut view = self.view();
        let mut out = Vec::new();
        for b in 0..=255u8 {
            if view.next(state, b)? != DEAD {
                out.push(b);
            }
        }
        Ok(out)
    }

    /// A state with the same mask as `state` for tokens of at most `k` bytes, shared by every
    /// count far from its repetition's bounds; `state` itself when the automaton has no counter.
    ///
    /// A token of `k` bytes completes at most `k` repetitions (a counted body never matches the
    /// empty string), so from count `c` it reaches counts `c..=c+k` only, and what it may do
    /// depends on `c` only through `min - c` and `max - c`, each clamped to `0..=k+1`. Every
    /// count of a subset is replaced by the smallest count with the same two clamped distances
    /// (`min - k - 1` below the minimum, `min` between the bounds, itself near a bound): the
    /// masks agree, and a long bounded string needs one mask for its middle, not one per count.
    /// The result is a state of this automaton like any other (its transitions are exact).
    pub fn representative(&self, state: u32, k: usize) -> Result<u32> {
        if !self.has_registers() || state == DEAD {
            return Ok(state);
        }
        self.representative_in(&mut self.lock(), state, k)
    }
}

/// A locked view of the DFA's transition table: steps through bytes, determinizing on demand.
pub struct DfaView<'a> {
    dfa: &'a LazyDfa,
    table: MutexGuard<'a, Table>,
}

impl DfaView<'_> {
    /// The state after `byte`, computing it on first use.
    #[inline]
    pub fn next(&mut self, state: u32, byte: u8) -> Result<u32> {
        let class = self.dfa.classes[byte as usize] as usize;
        let t = self.table.trans[state as usize * self.dfa.stride + class];
        if t != UNKNOWN {
            return Ok(t);
        }
        self.dfa.compute_next(&mut self.table, state, class)
    }

    /// Whether `state` accepts the end of input.
    #[inline]
    pub fn is_accepting(&self, state: u32) -> bool {
        self.table.accepting[state as usize]
    }

    /// The state after `bytes` from `state` ([`DEAD`] as soon as a byte is refused).
    pub fn walk(&mut self, state: u32, bytes: &[u8]) -> Result<u32> {
        let mut s = state;
        for &b in bytes {
            s = self.next(s, b)?;
            if s == DEAD {
                break;
            }
        }
        Ok(s)
    }

    /// Raw access for hot loops: byte classes, stride and the transition table.
    #[inline]
    pub fn classes(&self) -> &[u8; 256] {
        &self.dfa.classes
    }

    /// Number of transitions per state.
    #[inline]
    pub fn stride(&self) -> usize {
        self.dfa.stride
    }

    /// The transition for a class, which may be unknown (`u32::MAX`).
    #[inline]
    pub fn raw(&self, state: u32, class: usize) -> u32 {
        self.table.trans[state as usize * self.dfa.stride + class]
    }

    /// Compute a transition the raw table did not have yet.
    #[cold]
    pub fn fill(&mut self, state: u32, class: usize) -> Result<u32> {
        self.dfa.compute_next(&mut self.table, state, class)
    }

    /// Number of states created so far.
    pub fn num_states(&self) -> usize {
        self.table.sets.len()
    }

    /// [`LazyDfa::representative`], through this view's lock.
    pub fn representative(&mut self, state: u32, k: usize) -> Result<u32> {
        self.dfa.representative_in(&mut self.table, state, k)
    }
}

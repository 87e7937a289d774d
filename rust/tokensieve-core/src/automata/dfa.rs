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

use crate::budget::Deadline;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

use regex_automata::nfa::thompson::{self, State, NFA};
use regex_automata::util::look::Look;
use regex_automata::util::primitives::StateID;
use regex_syntax::hir::Hir;
use rustc_hash::{FxHashMap, FxHashSet};

use super::depth::{Depths, MAX_FRAMES, NONE};
use super::expr::{Expr, LenSet};
use super::nfa::{Count, MARKER};
use crate::error::{Error, Result};

/// The state id of the dead state: no continuation can be accepted from it.
pub const DEAD: u32 = 0;
const UNKNOWN: u32 = u32::MAX;
const ACCEPT_MARK: u32 = u32::MAX;
/// The `rec` of a frame pushed by a rule call (see [`Count::Call`]); its `site` is the call
/// marker's state.
const RULE_CALL: u32 = u32::MAX;

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

/// One stack frame: the call on top of `parent`.
#[derive(Clone, Copy, Default)]
struct Frame {
    parent: u32,
    /// The recursive expression called (its marker number) and the call site; for a rule
    /// call, [`RULE_CALL`] and the `Call` marker's state.
    rec: u32,
    site: u32,
    /// Frames on the stack, this one included.
    depth: u32,
    /// Frames of `rec` on top of the stack, this one included.
    run: u32,
}

/// The NFA a lazy DFA runs on: the root's states, then those of the rules compiled so far (see
/// [`super::rules`]), each rule's ids shifted past the states before it; and what the closure
/// needs to know of each state.
struct Graph {
    /// `None` for a DFA loaded complete from an index file: nothing is left to determinize.
    root: Option<NFA>,
    root_len: u32,
    /// The states of the rules built so far, ids from `root_len` on.
    extra: Vec<State>,
    /// NFA state can still reach the match state (or its rule's end) after at least one byte
    /// was consumed.
    can_match: Vec<bool>,
    /// The counter instruction of each marker state (see [`super::nfa::Count`]); empty when
    /// the automaton has no marker. Then a subset's entries are NFA states; otherwise they are
    /// triples (NFA state, count, stack frame), flattened.
    counts: Vec<Option<Count>>,
    /// For each NFA state inside a counted body, that repetition's bounds (see
    /// [`LazyDfa::representative`]); shorter (or empty) past the last counted state.
    bounds: Vec<Option<(u32, Option<u32>)>>,
    /// Per NFA state inside a `sized` counted region (a character automaton under length
    /// bounds), [`NONE`] or an index into `len_sets`: the numbers of characters after which the
    /// region can still be left from it (see [`LengthSets`]); shorter (or empty) past the last.
    lens: Vec<u32>,
    len_sets: Vec<LenSet>,
    /// Per `Push` marker, the state its call returns to (see [`super::depth::returns`]);
    /// shorter (or empty) past the last `Push` marker.
    cont: Vec<u32>,
    /// Per NFA state, [`NONE`] or, for a union of `Pop` markers of one recursive expression
    /// (its return dispatch), an index into `dispatches`; shorter (or empty) past the last.
    dispatch_of: Vec<u32>,
    /// Each return dispatch: the expression's marker number and, per call site, its `Pop`
    /// marker.
    dispatches: Vec<Dispatch>,
    /// The rules (see [`super::rules`]; rule 0, the root, is built already); `None` without.
    rules: Option<Arc<RuleSet>>,
    /// Per rule, the state its calls enter ([`NONE`] until it is compiled).
    entries: Vec<u32>,
    /// The next free marker number of recursive expressions (each rule gets its own).
    next_rec: u32,
    /// Heap held by the NFAs compiled so far, and the limit (`max_nfa_bytes`).
    nfa_bytes: usize,
    max_nfa_bytes: usize,
}

impl Graph {
    /// The NFA state `s`.
    #[inline]
    fn state(&self, s: u32) -> &State {
        if s < self.root_len {
            self.root
                .as_ref()
                .expect("a complete DFA has no NFA states")
                .state(thompson_id(s))
        } else {
            &self.extra[(s - self.root_len) as usize]
        }
    }

    fn len(&self) -> usize {
        self.root_len as usize + self.extra.len()
    }

    /// The completion lengths of NFA state `s`, when it lies in a sized counted region.
    #[inline]
    fn len_set(&self, s: u32) -> Option<&LenSet> {
        match self.lens.get(s as usize) {
            Some(&k) if k != NONE => self.len_sets.get(k as usize),
            _ => None,
        }
    }

    /// The state after marker `s` (a call's return point).
    fn marker_next(&self, s: u32) -> u32 {
        match self.state(s) {
            State::Look { next, .. } => next.as_u32(),
            _ => NONE,
        }
    }

    /// A graph of one NFA (a plain regex's, or a split expression's root).
    fn new(
        nfa: NFA,
        counts: Vec<Option<Count>>,
        rules: Option<Arc<RuleSet>>,
        next_rec: u32,
    ) -> Result<Graph> {
        let Segment {
            nfa,
            counts,
            can_match,
            cont,
            dispatch_of,
            dispatches,
            bounds,
            lens,
            ..
        } = Segment::of(nfa, counts, 0)?;
        let entries = vec![NONE; rules.as_ref().map_or(0, |r| r.exprs.len())];
        Ok(Graph {
            root_len: nfa.states().len() as u32,
            nfa_bytes: nfa.memory_usage(),
            root: Some(nfa),
            extra: Vec::new(),
            can_match,
            counts,
            bounds,
            lens: lens.of,
            len_sets: lens.sets,
            cont,
            dispatch_of,
            dispatches,
            rules,
            entries,
            next_rec,
            max_nfa_bytes: usize::MAX,
        })
    }

    /// The graph of a DFA loaded complete (no NFA).
    fn loaded() -> Graph {
        Graph {
            root: None,
            root_len: 0,
            extra: Vec::new(),
            can_match: Vec::new(),
            counts: Vec::new(),
            bounds: Vec::new(),
            lens: Vec::new(),
            len_sets: Vec::new(),
            cont: Vec::new(),
            dispatch_of: Vec::new(),
            dispatches: Vec::new(),
            rules: None,
            entries: Vec::new(),
            next_rec: 0,
            nfa_bytes: 0,
            max_nfa_bytes: 0,
        }
    }

    /// The entry state of rule `r`, compiling the rule first when it has not been.
    fn enter(&mut self, r: u32) -> Result<u32> {
        let r = r as usize;
        match (self.entries.get(r), &self.rules) {
            (Some(&e), _) if e != NONE => return Ok(e),
            (Some(_), Some(_)) if r != 0 => {}
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "internal: a call of rule {r}, which the automaton does not have"
                )))
            }
        }
        let seg = self.rules.as_ref().expect("checked above").take(r)?;
        let entry = self.append(seg)?;
        self.entries[r] = entry;
        Ok(entry)
    }

    /// Add a rule's states after the others (its ids and marker numbers shifted past theirs);
    /// returns its entry.
    fn append(&mut self, seg: Segment) -> Result<u32> {
        let base = self.len() as u32;
        let n = seg.nfa.states().len();
        self.nfa_bytes = self.nfa_bytes.saturating_add(seg.nfa.memory_usage());
        if self.nfa_bytes > self.max_nfa_bytes {
            return Err(Error::Budget(format!(
                "the automaton is too large (its parts built so far hold more than {} bytes, \
                 max_nfa_bytes); raise max_nfa_bytes",
                self.max_nfa_bytes
            )));
        }
        u32::try_from(base as usize + n)
            .ok()
            .filter(|&end| end < NONE)
            .ok_or_else(|| Error::Budget("the automaton has too many states".into()))?;
        let recs = self.next_rec;
        self.next_rec = self
            .next_rec
            .checked_add(seg.recs)
            .ok_or_else(|| Error::Budget("too many recursive expressions".into()))?;
        let shift = |s: u32| if s == NONE { NONE } else { s + base };
        self.extra
            .extend(seg.nfa.states().iter().map(|st| shifted(st, base)));
        self.can_match.extend(seg.can_match);
        self.counts.resize(base as usize, None);
        self.counts.extend(seg.counts.iter().map(|c| match *c {
            Some(Count::Push { rec, site }) => Some(Count::Push {
                rec: rec + recs,
                site,
            }),
            Some(Count::Pop { rec, site }) => Some(Count::Pop {
                rec: rec + recs,
                site,
            }),
            c => c,
        }));
        if !seg.bounds.is_empty() {
            self.bounds.resize(base as usize, None);
            self.bounds.extend(seg.bounds);
        }
        if !seg.lens.of.is_empty() {
            let first = self.len_sets.len() as u32;
            self.lens.resize(base as usize, NONE);
            self.lens.extend(
                seg.lens
                    .of
                    .iter()
                    .map(|&k| if k == NONE { NONE } else { k + first }),
            );
            self.len_sets.extend(seg.lens.sets);
        }
        if !seg.cont.is_empty() {
            self.cont.resize(base as usize, NONE);
            self.cont.extend(seg.cont.iter().map(|&c| shift(c)));
        }
        if !seg.dispatches.is_empty() {
            let first = self.dispatches.len() as u32;
            self.dispatch_of.resize(base as usize, NONE);
            self.dispatch_of.extend(seg.dispatch_of.iter().map(|&d| {
                if d == NONE {
                    NONE
                } else {
                    d + first
                }
            }));
            self.dispatches
                .extend(seg.dispatches.into_iter().map(|(rec, pops)| {
                    (
                        rec + recs,
                        pops.into_iter().map(|(site, p)| (site, p + base)).collect(),
                    )
                }));
        }
        Ok(seg.nfa.start_anchored().as_u32() + base)
    }
}

/// An NFA compiled on its own — a rule's (ending in a `Return` marker, see [`Graph::append`])
/// or the root's (see [`Graph::new`]) — and what the closure needs of each state, in its own
/// state ids and marker numbers.
struct Segment {
    nfa: NFA,
    counts: Vec<Option<Count>>,
    can_match: Vec<bool>,
    cont: Vec<u32>,
    dispatch_of: Vec<u32>,
    dispatches: Vec<Dispatch>,
    /// Empty when the rule has no counter.
    bounds: Vec<Option<(u32, Option<u32>)>>,
    /// Empty when the rule has no `sized` counted region.
    lens: LengthSets,
    /// How many recursive-expression marker numbers it uses (from 1 on).
    recs: u32,
}

impl Segment {
    fn build(x: &Expr, max_nfa_bytes: usize) -> Result<Segment> {
        let (built, recs) = super::nfa::build_with(x, max_nfa_bytes, 0, true)?;
        let mut counts = built.counts;
        counts.resize(built.nfa.states().len(), None);
        Segment::of(built.nfa, counts, recs)
    }

    /// What the closure needs of each state of `nfa` (`counts` may be empty: no markers).
    fn of(nfa: NFA, counts: Vec<Option<Count>>, recs: u32) -> Result<Segment> {
        let cont = super::depth::returns(&nfa, &counts);
        let can_match = compute_can_match(&nfa, &counts, &cont);
        let (dispatch_of, dispatches) = find_dispatches(&nfa, &counts);
        let counted = counts.iter().any(|c| matches!(c, Some(Count::Take { .. })));
        let bounds = if counted {
            counted_bounds(&nfa, &counts)
        } else {
            Vec::new()
        };
        let lens = LengthSets::of(&nfa, &counts)?;
        Ok(Segment {
            nfa,
            counts,
            can_match,
            cont,
            dispatch_of,
            dispatches,
            bounds,
            lens,
            recs,
        })
    }
}

/// Where a rule's compilation stands (see [`RuleSet`]).
enum Slot {
    Todo,
    /// By the background builder of this process id (a process forked meanwhile has none).
    Building(u32),
    Done(Box<Result<Segment>>),
    Taken,
}

/// The rules of a split automaton (see [`super::rules`]), compiled when first entered or,
/// before that, by the background builder ([`RuleSet::prebuild`]); shared between the
/// automaton and that builder.
pub(crate) struct RuleSet {
    exprs: Vec<Expr>,
    /// The rules in the order the background builder takes them: breadth first from the root,
    /// each rule's calls in the order they occur (what an output is likely to enter first).
    order: Vec<u32>,
    slots: Mutex<Vec<Slot>>,
    ready: Condvar,
    max_nfa_bytes: usize,
}

impl RuleSet {
    fn new(exprs: Vec<Expr>, root: &Expr, max_nfa_bytes: usize) -> RuleSet {
        let slots = exprs.iter().map(|_| Slot::Todo).collect();
        let mut seen = vec![false; exprs.len()];
        let mut order = Vec::with_capacity(exprs.len());
        let mut calls = Vec::new();
        root.rules_called(&mut calls);
        let mut at = 0;
        loop {
            for &r in &calls {
                if let Some(s) = seen.get_mut(r as usize) {
                    if !*s {
                        *s = true;
                        order.push(r);
                    }
                }
            }
            calls.clear();
            let Some(&r) = order.get(at) else { break };
            exprs[r as usize].rules_called(&mut calls);
            at += 1;
        }
        RuleSet {
            order,
            exprs,
            slots: Mutex::new(slots),
            ready: Condvar::new(),
            max_nfa_bytes,
        }
    }

    fn slots(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rule `r` compiled, for the automaton to append: built here unless the background
    /// builder has it (then waited for). Each rule is taken once.
    fn take(&self, r: usize) -> Result<Segment> {
        let mut slots = self.slots();
        loop {
            match std::mem::replace(&mut slots[r], Slot::Taken) {
                Slot::Done(seg) => return *seg,
                Slot::Building(pid) if pid == std::process::id() => {
                    slots[r] = Slot::Building(pid);
                    slots = self.ready.wait(slots).unwrap_or_else(|e| e.into_inner());
                }
                // not started, or started by a builder this (forked) process does not have
                Slot::Todo | Slot::Building(_) => {
                    drop(slots);
                    return Segment::build(&self.exprs[r], self.max_nfa_bytes);
                }
                Slot::Taken => {
                    return Err(Error::InvalidArgument(format!(
                        "internal: rule {r} was taken twice"
                    )))
                }
            }
        }
    }

    /// Compile rule `r` ahead of its first entry, unless it is compiled or being compiled.
    fn prebuild(&self, r: usize) {
        {
            let mut slots = self.slots();
            if !matches!(slots[r], Slot::Todo) {
                return;
            }
            slots[r] = Slot::Building(std::process::id());
        }
        // a panic (a bug) is handed to the mask that enters the rule, as an internal error
        let built =
            crate::error::catch_panic(|| Segment::build(&self.exprs[r], self.max_nfa_bytes))
                .and_then(|built| built)
                .map_err(|e| match e {
                    Error::Internal(m) => Error::Internal(format!("compiling rule {r}: {m}")),
                    other => other,
                });
        self.slots()[r] = Slot::Done(Box::new(built));
        self.ready.notify_all();
    }
}

/// The background builder: one thread per process compiling the rules of new automata, parents
/// before the rules they call, while the automaton serves masks (see
/// [`LazyDfa::build_rules_in_background`]).
fn background() -> Option<std::sync::mpsc::Sender<Weak<RuleSet>>> {
    type Builder = Option<(u32, std::sync::mpsc::Sender<Weak<RuleSet>>)>;
    static BUILDER: Mutex<Builder> = Mutex::new(None);
    if std::env::var("TOKENSIEVE_BACKGROUND_RULES").is_ok_and(|v| v == "0") {
        return None;
    }
    let mut b = BUILDER.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    match &*b {
        // a forked process does not have its parent's thread: it starts its own
        Some((p, tx)) if *p == pid => Some(tx.clone()),
        _ => {
            let (tx, rx) = std::sync::mpsc::channel::<Weak<RuleSet>>();
            std::thread::Builder::new()
                .name("tokensieve-rules".into())
                .spawn(move || {
                    for job in rx {
                        let n = job.upgrade().map_or(0, |s| s.order.len());
                        for k in 0..n {
                            // stop as soon as the automaton is dropped
                            let Some(set) = job.upgrade() else { break };
                            set.prebuild(set.order[k] as usize);
                        }
                    }
                })
                .ok()?;
            *b = Some((pid, tx.clone()));
            Some(tx)
        }
    }
}

/// `st` with every state id it names moved up by `base`.
fn shifted(st: &State, base: u32) -> State {
    use regex_automata::nfa::thompson::{DenseTransitions, SparseTransitions, Transition};
    let up = |s: StateID| StateID::new_unchecked(s.as_usize() + base as usize);
    let tr = |t: &Transition| Transition {
        start: t.start,
        end: t.end,
        next: up(t.next),
    };
    match st {
        State::ByteRange { trans } => State::ByteRange { trans: tr(trans) },
        State::Sparse(sp) => State::Sparse(SparseTransitions {
            transitions: sp.transitions.iter().map(tr).collect(),
        }),
        State::Dense(d) => State::Dense(DenseTransitions {
            // `StateID::ZERO` is "no transition" there, and stays so
            transitions: d
                .transitions
                .iter()
                .map(|&s| if s == StateID::ZERO { s } else { up(s) })
                .collect(),
        }),
        State::Look { look, next } => State::Look {
            look: *look,
            next: up(*next),
        },
        State::Union { alternates } => State::Union {
            alternates: alternates.iter().map(|&a| up(a)).collect(),
        },
        State::BinaryUnion { alt1, alt2 } => State::BinaryUnion {
            alt1: up(*alt1),
            alt2: up(*alt2),
        },
        State::Capture {
            next,
            pattern_id,
            group_index,
            slot,
        } => State::Capture {
            next: up(*next),
            pattern_id: *pattern_id,
            group_index: *group_index,
            slot: *slot,
        },
        State::Fail => State::Fail,
        State::Match { pattern_id } => State::Match {
            pattern_id: *pattern_id,
        },
    }
}

struct Table {
    /// The NFA, growing as rules are entered.
    g: Graph,
    /// `states × stride` transitions; `UNKNOWN` until computed.
    trans: Vec<u32>,
    accepting: Vec<bool>,
    sets: Vec<Box<[u32]>>,
    ids: FxHashMap<Box<[u32]>, u32>,
    /// Scratch space for closures: (NFA state, count, past the end assertion).
    stack: Vec<(u32, u64, bool)>,
    seen: Vec<u32>,
    seen_gen: u32,
    /// With registers: the registers `seen` first recorded each entry with, in this closure.
    seen_first: Vec<u64>,
    /// With registers, the entries seen with other registers than their first (a state may be
    /// seen with several counts or stacks, rarely).
    seen_registers: FxHashSet<(u32, u64, bool)>,
    /// The stack frames of recursive expressions and rule calls (see
    /// [`super::nfa::Count::Push`], [`super::nfa::Count::Call`]), interned; frame 0 is the
    /// empty stack.
    frames: Vec<Frame>,
    frame_ids: FxHashMap<(u32, u32, u32), u32>,
}

impl Table {
    /// An empty table over `g`, with closure scratch space for its NFA states.
    fn new(g: Graph) -> Table {
        let registers = !g.counts.is_empty();
        let n = g.len();
        Table {
            g,
            trans: Vec::new(),
            accepting: Vec::new(),
            sets: Vec::new(),
            ids: FxHashMap::default(),
            stack: Vec::new(),
            seen: vec![0; n * 2],
            seen_gen: 0,
            seen_first: if registers {
                vec![0; n * 2]
            } else {
                Vec::new()
            },
            seen_registers: FxHashSet::default(),
            frames: vec![Frame::default()],
            frame_ids: FxHashMap::default(),
        }
    }

    /// The entry of rule `r` (compiled first when new), with the scratch space grown to match.
    fn enter(&mut self, r: u32) -> Result<u32> {
        let entry = self.g.enter(r)?;
        let n = self.g.len() * 2;
        if self.seen.len() < n {
            self.seen.resize(n, 0);
            if !self.seen_first.is_empty() {
                self.seen_first.resize(n, 0);
            }
        }
        Ok(entry)
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
    depths: Option<Depths>,
    /// Whether each subset entry carries a count and a stack frame (the automaton has marker
    /// states, see [`super::nfa::Count`]).
    registers: bool,
    max_states: usize,
    table: Mutex<Table>,
    start: u32,
    pattern: String,
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
            return Self::from_nfa(pattern, built.nfa, built.counts, None, 0, opts);
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
        Self::from_nfa(pattern, nfa, Vec::new(), None, 0, opts)
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
        let split = super::rules::split(x);
        let eager = split.eager();
        let mut rules = split.rules;
        let root = std::mem::replace(&mut rules[0], Expr::empty());
        // (rule 0, the root, stays in the set as an empty placeholder)
        let (built, next_rec) = super::nfa::build_with(&root, opts.max_nfa_bytes, 0, false)?;
        let rules =
            (rules.len() > 1).then(|| Arc::new(RuleSet::new(rules, &root, opts.max_nfa_bytes)));
        drop(root);
        let dfa = Self::from_nfa(pattern, built.nfa, built.counts, rules, next_rec, opts)?;
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
    ) -> Result<LazyDfa> {
        let counts = if counts.iter().any(Option::is_some) {
            counts
        } else {
            Vec::new()
        };
        let split = rules.is_some();
        let mut classes = [0u8; 256];
        let mut reps = Vec::new();
        if split {
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
        let mut table = Table::new(g);
        // State 0: dead (empty, non-accepting set); its row loops onto itself.
        table.sets.push(Box::new([]));
        table.accepting.push(false);
        table.trans.extend(std::iter::repeat_n(DEAD, stride));
        table.ids.insert(Box::new([]), DEAD);
        let mut dfa = LazyDfa {
            classes,
            reps,
            stride,
            split,
            depths,
            registers,
            max_states: opts.max_states.max(2),
            table: Mutex::new(Table::new(Graph::loaded())),
            start: DEAD,
            pattern: pattern.to_string(),
        };
        let start = dfa.closure_intern(&mut table, &[(start_nfa, 0)], true)?;
        dfa.start = start;
        dfa.table = Mutex::new(table);
        Ok(dfa)
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
        self.registers
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
    pub fn determinize_all(&self, deadline: Option<Deadline>) -> Result<usize> {
        let mut view = self.view();
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
        Ok(view.table.sets.len())
    }

    /// The complete transition table, if every transition of every state is known (after
    /// [`LazyDfa::determinize_all`]); `None` otherwise. Bytes whose transitions agree in every
    /// state share one class.
    pub fn export(&self) -> Option<DfaParts> {
        let t = self.lock();
        if t.trans.contains(&UNKNOWN) {
            return None;
        }
        let n = t.accepting.len();
        // The classes of the table itself: bytes whose columns agree in every state share one
        // (a split automaton's single-byte classes shrink back to what its states tell apart).
        let (trans_all, stride_all) = (&t.trans, self.stride);
        let column = |c: usize| (0..n).map(move |s| trans_all[s * stride_all + c]);
        let mut by_hash: FxHashMap<u64, Vec<usize>> = FxHashMap::default();
        let mut class_of = vec![0usize; self.stride];
        let mut firsts: Vec<usize> = Vec::new();
        for (c, class) in class_of.iter_mut().enumerate() {
            let h = column(c).fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
                (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01B3)
            });
            let group = by_hash.entry(h).or_default();
            match group.iter().find(|&&k| column(firsts[k]).eq(column(c))) {
                Some(&k) => *class = k,
                None => {
                    *class = firsts.len();
                    group.push(firsts.len());
                    firsts.push(c);
                }
            }
        }
        let mut classes = [0u8; 256];
        for b in 0..256 {
            classes[b] = class_of[self.classes[b] as usize] as u8;
        }
        let stride = firsts.len();
        let mut trans = Vec::with_capacity(n * stride);
        for s in 0..n {
            for &f in &firsts {
                trans.push(t.trans[s * self.stride + f]);
            }
        }
        Some(DfaParts {
            classes,
            stride,
            trans,
            accepting: t.accepting.clone(),
            start: self.start,
        })
    }

    /// Rebuild a complete DFA from exported parts (no NFA; nothing left to determinize).
    /// Checks that the parts are consistent, so a corrupted file cannot index out of bounds.
    pub fn from_parts(parts: DfaParts, pattern: String) -> Result<LazyDfa> {
        let DfaParts {
            classes,
            stride,
            trans,
            accepting,
            start,
        } = parts;
        let n = accepting.len();
        let bad = |m: &str| Error::InvalidArgument(format!("inconsistent automaton: {m}"));
        if stride == 0 || stride > 256 || n == 0 || trans.len() != n * stride {
            return Err(bad("table size does not match states × classes"));
        }
        if classes.iter().any(|&c| c as usize >= stride) {
            return Err(bad("byte class out of range"));
        }
        if trans.iter().any(|&t| t as usize >= n) || start as usize >= n {
            return Err(bad("transition to a state that does not exist"));
        }
        if trans[..stride].iter().any(|&t| t != DEAD) || accepting[0] {
            return Err(bad("state 0 must be the dead state"));
        }
        let mut reps = Vec::with_capacity(stride);
        for c in 0..stride {
            match (0..=255u8).find(|&b| classes[b as usize] as usize == c) {
                Some(b) => reps.push(b),
                None => return Err(bad("a byte class has no byte")),
            }
        }
        let table = Table {
            trans,
            accepting,
            sets: vec![Box::new([]); n],
            ..Table::new(Graph::loaded())
        };
        Ok(LazyDfa {
            classes,
            reps,
            stride,
            split: false,
            depths: None,
            registers: false,
            max_states: n,
            table: Mutex::new(table),
            start,
            pattern,
        })
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
        if !self.registers || state == DEAD {
            return Ok(state);
        }
        self.representative_in(&mut self.lock(), state, k)
    }

    /// [`LazyDfa::representative`] with the table locked.
    fn representative_in(&self, t: &mut Table, state: u32, k: usize) -> Result<u32> {
        if !self.registers || state == DEAD {
            return Ok(state);
        }
        let k1 = k as u64 + 1;
        let set = &t.sets[state as usize];
        let mut pairs: Vec<(u32, u64)> = Vec::with_capacity(set.len() / 3);
        let mut accepting = false;
        let mut changed = false;
        for e in set.chunks_exact(3) {
            let (s, reg) = (e[0], register(e[1], e[2]));
            let c = count(reg);
            if s == ACCEPT_MARK {
                accepting = true;
                continue;
            }
            let mut r = c;
            if let Some(Some((min, max))) = t.g.bounds.get(s as usize) {
                // in a sized region, completions of up to `settle` characters differ by state
                let k1 = k1 + t.g.len_set(s).map_or(0, |x| u64::from(x.settle));
                let (c64, min64) = (u64::from(c), u64::from(*min));
                if c64 + k1 <= min64 {
                    r = (min64 - k1) as u32;
                } else if c64 >= min64 && max.is_none_or(|m| c64 + k1 <= u64::from(m)) {
                    r = *min;
                }
            }
            changed |= r != c;
            pairs.push((s, with_count(reg, r)));
        }
        if !changed {
            return Ok(state);
        }
        pairs.sort_unstable();
        pairs.dedup();
        let mut key: Vec<u32> = pairs
            .iter()
            .flat_map(|&(s, r)| [s, count(r), frame(r)])
            .collect();
        if accepting {
            key.extend([ACCEPT_MARK, 0, 0]);
        }
        self.intern(t, key, accepting)
    }

    /// Epsilon closure of `seeds` (NFA state, registers: count and stack frame), pruned to states that can still reach a
    /// match; interned. Counter markers apply their instruction to the count on the way.
    fn closure_intern(&self, t: &mut Table, seeds: &[(u32, u64)], at_start: bool) -> Result<u32> {
        if t.g.root.is_none() {
            return Err(complete_without_nfa());
        }
        let registers = self.registers;
        if registers && !t.seen_registers.is_empty() {
            t.seen_registers.clear();
        }
        t.seen_gen = t.seen_gen.wrapping_add(1);
        if t.seen_gen == 0 {
            t.seen.iter_mut().for_each(|x| *x = 0);
            t.seen_gen = 1;
        }
        let gen = t.seen_gen;
        let mut set: Vec<(u32, u64)> = Vec::new();
        let mut accepting = false;
        t.stack.clear();
        for &(s, c) in seeds.iter().rev() {
            t.stack.push((s, c, false));
        }
        while let Some((s, c, past_end)) = t.stack.pop() {
            let key = s as usize * 2 + past_end as usize;
            if t.seen[key] != gen {
                t.seen[key] = gen;
                if registers {
                    t.seen_first[key] = c;
                }
            } else if !registers
                || t.seen_first[key] == c
                || !t.seen_registers.insert((s, c, past_end))
            {
                continue;
            }
            match t.g.state(s) {
                State::ByteRange { .. } | State::Sparse(_) | State::Dense(_) => {
                    if !past_end
                        && t.g.can_match[s as usize]
                        && self.finishes(t, s, c)
                        && length_fits(&t.g, s, c)
                    {
                        set.push((s, c));
                    }
                }
                State::Match { .. } => accepting = true,
                State::Fail => {}
                State::Union { alternates } => match t.g.dispatch_of.get(s as usize) {
                    // a return dispatch: only the `Pop` of the top frame's site passes
                    Some(&k) if k != NONE => {
                        let (rec, pops) = &t.g.dispatches[k as usize];
                        let top = t.frames[frame(c) as usize];
                        if frame(c) != 0 && top.rec == *rec {
                            if let Some(&pop) = pops.get(&top.site) {
                                t.stack.push((pop, c, past_end));
                            }
                        }
                    }
                    _ => {
                        for a in alternates.iter().rev() {
                            t.stack.push((a.as_u32(), c, past_end));
                        }
                    }
                },
                State::BinaryUnion { alt1, alt2 } => {
                    t.stack.push((alt2.as_u32(), c, past_end));
                    t.stack.push((alt1.as_u32(), c, past_end));
                }
                State::Capture { next, .. } => t.stack.push((next.as_u32(), c, past_end)),
                &State::Look { look, next } => {
                    let next = next.as_u32();
                    match look {
                        Look::Start if at_start => t.stack.push((next, c, past_end)),
                        Look::End => t.stack.push((next, c, true)),
                        MARKER if registers => self.apply_marker(t, s, next, c, past_end)?,
                        // `\A` away from the start is never satisfied. Other assertions are
                        // rejected by `parse`; an NFA built some other way with them is
                        // treated as never satisfied, which only ever removes strings.
                        _ => {}
                    }
                }
            }
        }
        set.sort_unstable();
        set.dedup();
        if set.is_empty() && !accepting {
            return Ok(DEAD);
        }
        let mut key: Vec<u32> = Vec::with_capacity(set.len() * (1 + 2 * registers as usize) + 3);
        for (s, c) in set {
            key.push(s);
            if registers {
                key.extend([count(c), frame(c)]);
            }
        }
        if accepting {
            key.push(ACCEPT_MARK);
            if registers {
                key.extend([0, 0]);
            }
        }
        self.intern(t, key, accepting)
    }

    /// In a closure, marker state `s` (followed by `next`) reached with registers `c`: push
    /// what it leads to, if anything.
    fn apply_marker(&self, t: &mut Table, s: u32, next: u32, c: u64, past_end: bool) -> Result<()> {
        let top = t.frames[frame(c) as usize];
        match t.g.counts[s as usize] {
            Some(Count::Enter) => t.stack.push((next, with_count(c, 0), past_end)),
            Some(Count::Take { max, .. }) if max.is_none_or(|m| count(c) < m) => {
                t.stack.push((next, c, past_end))
            }
            Some(Count::Incr(cap)) => {
                let n = count(c).saturating_add(1).min(cap);
                t.stack.push((next, with_count(c, n), past_end))
            }
            Some(Count::Leave(min)) if count(c) >= min => {
                t.stack.push((next, with_count(c, 0), past_end))
            }
            Some(Count::Push { rec, site }) if self.may_call(t, s, c) => {
                let f = push_frame(t, frame(c), rec, site)?;
                t.stack.push((next, with_frame(c, f), past_end))
            }
            Some(Count::Pop { rec, site })
                if frame(c) != 0 && top.rec == rec && top.site == site =>
            {
                t.stack.push((next, with_frame(c, top.parent), past_end))
            }
            Some(Count::RunBelow(n)) if top.run < n => t.stack.push((next, c, past_end)),
            Some(Count::StackBelow(n)) if top.depth < n => t.stack.push((next, c, past_end)),
            // a rule's language is never empty (see `super::rules`), so the call can finish
            // when its return point can (`can_match` of the marker says so)
            Some(Count::Call(r)) if t.g.can_match[s as usize] && top.depth < MAX_FRAMES => {
                let entry = t.enter(r)?;
                let f = push_frame(t, frame(c), RULE_CALL, s)?;
                t.stack.push((entry, with_frame(c, f), past_end))
            }
            Some(Count::Return) if frame(c) != 0 && top.rec == RULE_CALL => {
                let back = t.g.marker_next(top.site);
                t.stack.push((back, with_frame(c, top.parent), past_end))
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether NFA state `s`, with registers `c`, can still finish its body at its stack depth
    /// (always, without a stack; see [`super::depth`]).
    fn finishes(&self, t: &Table, s: u32, c: u64) -> bool {
        let Some(d) = &self.depths else {
            return true;
        };
        let depth = i64::from(t.frames[frame(c) as usize].depth);
        self.within(d, s, c, depth)
    }

    /// Whether state `s` (its region's count in `c`) can finish at `depth`.
    fn within(&self, d: &Depths, s: u32, c: u64, depth: i64) -> bool {
        if depth > d.best[s as usize] {
            return false;
        }
        match d.region[s as usize] {
            // the repetition is short of its minimum: one more body must fit too
            Some((take, min)) if u64::from(count(c)) + 1 < u64::from(min) => {
                depth <= d.best[take as usize]
            }
            _ => true,
        }
    }

    /// Whether the call at `Push` marker `s` (registers `c`) can be made: the callee can finish
    /// one level deeper and the caller can finish from the return point.
    fn may_call(&self, t: &Table, s: u32, c: u64) -> bool {
        let depth = t.frames[frame(c) as usize].depth;
        if depth >= MAX_FRAMES {
            return false;
        }
        // the callee's body and the return point can each be finished (the graph's answer,
        // which treats a body's end as finished: see `compute_can_match`)
        if !t.g.can_match[s as usize] {
            return false;
        }
        let Some(d) = &self.depths else {
            return true;
        };
        let depth = i64::from(depth);
        let ret = t.g.cont.get(s as usize).copied().unwrap_or(NONE);
        depth <= d.best[s as usize] && (ret == NONE || self.within(d, ret, c, depth))
    }

    /// The id of the subset `key` (with its accepting flag), created when new.
    fn intern(&self, t: &mut Table, key: Vec<u32>, accepting: bool) -> Result<u32> {
        if let Some(&id) = t.ids.get(key.as_slice()) {
            return Ok(id);
        }
        if t.sets.len() >= self.max_states {
            let why = if t
                .g
                .counts
                .iter()
                .any(|c| matches!(c, Some(Count::Push { .. })))
            {
                "; it holds a recursion (a recursive $ref, or a JSON value of any shape \
                 nesting up to max_nesting_depth levels), whose states multiply with each \
                 level: lower max_stack_depth or max_nesting_depth, compile recursive $refs \
                 with recursion=\"unroll\", or raise max_states"
            } else {
                ""
            };
            return Err(Error::Budget(format!(
                "the DFA for this constraint needs more than {} states (max_states); simplify \
                 the pattern or raise the limit{why}",
                self.max_states
            )));
        }
        crate::budget::check("determinizing the automaton")?;
        let id = t.sets.len() as u32;
        let key: Box<[u32]> = key.into_boxed_slice();
        t.ids.insert(key.clone(), id);
        t.sets.push(key);
        t.accepting.push(accepting);
        t.trans.extend(std::iter::repeat_n(UNKNOWN, self.stride));
        Ok(id)
    }

    fn compute_next(&self, t: &mut Table, state: u32, class: usize) -> Result<u32> {
        if t.g.root.is_none() {
            return Err(complete_without_nfa());
        }
        let b = self.reps[class];
        let width = 1 + 2 * self.registers as usize;
        let mut seeds: Vec<(u32, u64)> = Vec::new();
        // with single-byte classes: the bytes around `b` that every state of the subset treats
        // as it treats `b` (they get the same transition)
        let (mut lo, mut hi) = (0u8, 255u8);
        for e in t.sets[state as usize].chunks_exact(width) {
            let (s, c) = (e[0], if width == 3 { register(e[1], e[2]) } else { 0 });
            if s == ACCEPT_MARK {
                continue;
            }
            let st = t.g.state(s);
            if self.split {
                same_around(st, b, &mut lo, &mut hi);
            }
            let next = match st {
                State::ByteRange { trans } if trans.matches_byte(b) => Some(trans.next),
                State::Sparse(sp) => sp.matches_byte(b),
                State::Dense(d) => d.matches_byte(b),
                _ => None,
            };
            if let Some(next) = next {
                seeds.push((next.as_u32(), c));
            }
        }
        let next = if seeds.is_empty() {
            DEAD
        } else {
            self.closure_intern(t, &seeds, false)?
        };
        let row = state as usize * self.stride;
        if self.split {
            t.trans[row + lo as usize..=row + hi as usize].fill(next);
        } else {
            t.trans[row + class] = next;
        }
        Ok(next)
    }
}

/// Narrows `lo..=hi` (which holds `b`) to the bytes that NFA state `st` treats as it treats `b`
/// (the same transition, or none).
fn same_around(st: &State, b: u8, lo: &mut u8, hi: &mut u8) {
    let mut range = |start: u8, end: u8| {
        if b < start {
            *hi = (*hi).min(start - 1);
        } else if b > end {
            *lo = (*lo).max(end + 1);
        } else {
            *lo = (*lo).max(start);
            *hi = (*hi).min(end);
        }
    };
    match st {
        State::ByteRange { trans } => range(trans.start, trans.end),
        State::Sparse(sp) => {
            for t in sp.transitions.iter() {
                range(t.start, t.end);
            }
        }
        State::Dense(d) => {
            let at = d.transitions[b as usize];
            let (mut a, mut z) = (b, b);
            while a > *lo && d.transitions[a as usize - 1] == at {
                a -= 1;
            }
            while z < *hi && d.transitions[z as usize + 1] == at {
                z += 1;
            }
            *lo = a;
            *hi = z;
        }
        _ => {}
    }
}

fn complete_without_nfa() -> Error {
    Error::InvalidArgument(
        "this automaton was loaded complete from an index file and has no transition for the \
         requested state; the file is inconsistent"
            .into(),
    )
}

/// Liveness inside the `sized` counted regions of an NFA (a character automaton under length
/// bounds, see `super::nfa::Compiler::char_dfa`): the count alone no longer says whether a
/// state can finish, since the automaton's states need characters of their own. Per state of
/// such a region, the numbers of `Incr` markers on its ways to the region's `Leave`: `R(l)`,
/// the states with a way through exactly `l` of them, is found backwards from the `Incr`
/// markers into the heads of `H(l - 1)` (a head: the state after an `Incr`; `H(0)`: the heads
/// that reach a `Leave` through empty steps, `H(l)`: those whose `Take` leads into `R(l)`).
/// Once `H(l) = H(l - 1)`, every later step repeats; the compiler builds such regions only when
/// their character automaton settles within `expr::SETTLE_MAX` steps.
#[derive(Default)]
struct LengthSets {
    /// Per NFA state, an index into `sets` or [`NONE`] (empty without sized regions).
    of: Vec<u32>,
    sets: Vec<LenSet>,
}

impl LengthSets {
    fn of(nfa: &NFA, counts: &[Option<Count>]) -> Result<LengthSets> {
        let takes: Vec<u32> = (0..counts.len() as u32)
            .filter(|&i| matches!(counts[i as usize], Some(Count::Take { sized: true, .. })))
            .collect();
        if takes.is_empty() {
            return Ok(LengthSets::default());
        }
        let n = nfa.states().len();
        let marker = |s: u32| counts.get(s as usize).copied().flatten();
        let next_of = |s: u32| match nfa.state(thompson_id(s)) {
            State::Look { next, .. } => next.as_u32(),
            _ => NONE,
        };
        // the regions' states (from each Take, up to the next counter marker) and, backwards,
        // which of them lead straight into each
        let mut index = vec![NONE; n];
        let mut region: Vec<u32> = Vec::new();
        let mut incrs: Vec<u32> = Vec::new();
        let mut rev: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
        let mut stack: Vec<u32> = takes.iter().map(|&t| next_of(t)).collect();
        let mut succ = Vec::new();
        while let Some(s) = stack.pop() {
            if s == NONE || index[s as usize] != NONE {
                continue;
            }
            match marker(s) {
                Some(Count::Incr(_)) => {
                    index[s as usize] = u32::MAX - 1;
                    incrs.push(s);
                    continue;
                }
                Some(Count::Enter | Count::Take { .. } | Count::Leave(_)) => continue,
                Some(_) => {
                    return Err(Error::InvalidArgument(
                        "internal: a marker other than a counter's inside a sized region".into(),
                    ))
                }
                None => {}
            }
            index[s as usize] = region.len() as u32;
            region.push(s);
            succ.clear();
            super::depth::successors(nfa, s, &mut succ);
            for &t in &succ {
                rev.entry(t).or_default().push(s);
                stack.push(t);
            }
        }
        // each Incr's head: whether it can leave at once, and the Takes it reaches
        let mut leaves = Vec::with_capacity(incrs.len());
        let mut head_takes: Vec<Vec<u32>> = Vec::with_capacity(incrs.len());
        for &i in &incrs {
            let (mut leave, mut tk) = (false, Vec::new());
            let mut seen: Vec<u32> = Vec::new();
            let mut st = vec![next_of(i)];
            while let Some(s) = st.pop() {
                if s == NONE || seen.contains(&s) {
                    continue;
                }
                seen.push(s);
                match marker(s) {
                    Some(Count::Leave(_)) => leave = true,
                    Some(Count::Take { sized: true, .. }) => tk.push(next_of(s)),
                    Some(_) => {}
                    None => match nfa.state(thompson_id(s)) {
                        State::Union { .. } | State::BinaryUnion { .. } | State::Capture { .. } => {
                            super::depth::successors(nfa, s, &mut st)
                        }
                        _ => {}
                    },
                }
            }
            leaves.push(leave);
            head_takes.push(tk);
        }
        let words = (super::expr::SETTLE_MAX + 66) / 64;
        let mut bits = vec![0u64; region.len() * words];
        let mut heads: Vec<bool> = leaves.clone();
        let mut inr = vec![false; region.len()];
        let mut settled = None;
        for l in 1..=super::expr::SETTLE_MAX as u32 + 2 {
            // R(l): backwards from the Incrs into H(l - 1)
            inr.iter_mut().for_each(|x| *x = false);
            let mut st: Vec<u32> = incrs
                .iter()
                .zip(&heads)
                .filter(|(_, &h)| h)
                .flat_map(|(i, _)| rev.get(i).into_iter().flatten().copied())
                .collect();
            while let Some(s) = st.pop() {
                let k = index[s as usize] as usize;
                if inr[k] {
                    continue;
                }
                inr[k] = true;
                st.extend(rev.get(&s).into_iter().flatten().copied());
            }
            let next: Vec<bool> = head_takes
                .iter()
                .map(|tk| {
                    tk.iter()
                        .any(|&r| r != NONE && inr[index[r as usize] as usize])
                })
                .collect();
            if next == heads {
                settled = Some(l);
                break;
            }
            let (w, b) = ((l / 64) as usize, l % 64);
            for (k, _) in inr.iter().enumerate().filter(|(_, &x)| x) {
                bits[k * words + w] |= 1 << b;
            }
            heads = next;
        }
        let Some(settle) = settled else {
            return Err(Error::InvalidArgument(
                "internal: the lengths of a sized counted region do not settle".into(),
            ));
        };
        let mut of = vec![NONE; n];
        let mut sets: Vec<LenSet> = Vec::new();
        let mut ids: FxHashMap<LenSet, u32> = FxHashMap::default();
        let used = (settle as usize).div_ceil(64);
        for (k, &s) in region.iter().enumerate() {
            let set = LenSet {
                bits: bits[k * words..k * words + used].into(),
                settle,
                tail: inr[k],
            };
            let id = *ids.entry(set.clone()).or_insert_with(|| {
                sets.push(set);
                sets.len() as u32 - 1
            });
            of[s as usize] = id;
        }
        Ok(LengthSets { of, sets })
    }
}

/// Whether NFA state `s`, with registers `c`, can still leave its sized counted region within
/// the region's length bounds (always, outside such regions).
#[inline]
fn length_fits(g: &Graph, s: u32, c: u64) -> bool {
    match (g.len_set(s), g.bounds.get(s as usize)) {
        (Some(set), Some(Some((min, max)))) => set.meets(count(c), *min, *max),
        _ => true,
    }
}

type Dispatch = (u32, FxHashMap<u32, u32>);

/// A subset entry's registers: the count (low half) and the stack's top frame (high half).
fn register(count: u32, frame: u32) -> u64 {
    u64::from(frame) << 32 | u64::from(count)
}

fn count(r: u64) -> u32 {
    r as u32
}

fn frame(r: u64) -> u32 {
    (r >> 32) as u32
}

fn with_count(r: u64, c: u32) -> u64 {
    register(c, frame(r))
}

fn with_frame(r: u64, f: u32) -> u64 {
    register(count(r), f)
}

/// The frame for calling `rec` from `site` on top of `parent`, interned.
fn push_frame(t: &mut Table, parent: u32, rec: u32, site: u32) -> Result<u32> {
    if let Some(&f) = t.frame_ids.get(&(parent, rec, site)) {
        return Ok(f);
    }
    let p = t.frames[parent as usize];
    let run = if parent != 0 && p.rec == rec {
        p.run + 1
    } else {
        1
    };
    let f = u32::try_from(t.frames.len())
        .map_err(|_| Error::Budget("too many distinct recursion stacks".into()))?;
    t.frames.push(Frame {
        parent,
        rec,
        site,
        depth: p.depth + 1,
        run,
    });
    t.frame_ids.insert((parent, rec, site), f);
    Ok(f)
}

fn thompson_id(s: u32) -> regex_automata::util::primitives::StateID {
    regex_automata::util::primitives::StateID::new_unchecked(s as usize)
}

/// For every NFA state inside a counted body, the repetition's bounds: the states reached from
/// its `Take` marker without passing another counter marker (the body's end leads to its `Incr`
/// marker; bodies hold no other counter, no jump out and no recursive call, see
/// `super::expr::counts`; a whole recursive expression inside is entered and left through its
/// own markers, and its states carry the count too).
fn counted_bounds(nfa: &NFA, counts: &[Option<Count>]) -> Vec<Option<(u32, Option<u32>)>> {
    let n = nfa.states().len();
    let mut out = vec![None; n];
    for (i, op) in counts.iter().enumerate() {
        let Some(Count::Take { min, max, .. }) = *op else {
            continue;
        };
        let State::Look { next, .. } = nfa.state(thompson_id(i as u32)) else {
            continue;
        };
        let mut stack = vec![next.as_u32()];
        while let Some(s) = stack.pop() {
            let si = s as usize;
            let counter = matches!(
                counts.get(si),
                Some(Some(
                    Count::Enter | Count::Take { .. } | Count::Incr(_) | Count::Leave(_)
                ))
            );
            if out[si].is_some() || counter {
                continue;
            }
            out[si] = Some((min, max));
            super::depth::successors(nfa, s, &mut stack);
        }
    }
    out
}

/// For every NFA state: can a match be reached from it, in a position that is not the start of
/// the input? (`\A` is then never satisfied, `\z` only when nothing but empty steps follow.)
///
/// With calls (`Push`/`Pop` markers, `cont` from [`super::depth::returns`]) the question is
/// asked of each body separately: a `Pop` marker (a body's end) counts as reached, and a `Push`
/// marker can match when its callee's body can reach its end and its return point can match
/// (a path through a body never returns to another site). The lazy DFA makes a call only from
/// a `Push` marker that can match, so every frame on a stack returns to a point that can.
fn compute_can_match(nfa: &NFA, counts: &[Option<Count>], cont: &[u32]) -> Vec<bool> {
    let n = nfa.states().len();
    // Reverse edges as flat adjacency lists (one allocation each instead of one per state),
    // split into those usable before and after an end assertion.
    let mut edges: Vec<(u32, u32, bool, bool)> = Vec::with_capacity(n * 2);
    let mut seeds = Vec::new();
    // (Push marker, body entry, return point) and the Pop markers
    let mut calls: Vec<(u32, u32, u32)> = Vec::new();
    let mut ends: Vec<u32> = Vec::new();
    for (i, st) in nfa.states().iter().enumerate() {
        let from = i as u32;
        let mut add =
            |next: StateID, eps: bool, any: bool| edges.push((next.as_u32(), from, eps, any));
        match st {
            State::ByteRange { trans } => add(trans.next, false, true),
            State::Sparse(sp) => sp.transitions.iter().for_each(|t| add(t.next, false, true)),
            State::Dense(d) => {
                let mut last = None;
                for &t in d.transitions.iter() {
                    if last != Some(t) {
                        add(t, false, true);
                        last = Some(t);
                    }
                }
            }
            State::Union { alternates } => alternates.iter().for_each(|&a| add(a, true, true)),
            State::BinaryUnion { alt1, alt2 } => {
                add(*alt1, true, true);
                add(*alt2, true, true);
            }
            State::Capture { next, .. } => add(*next, true, true),
            // A counter's guards never keep a state from the match: a count stays within the
            // repetition's bounds, so from any count the loop can go on to its minimum and
            // leave (see `super::nfa::Count`).
            State::Look { look: MARKER, next } => match counts.get(i).copied().flatten() {
                Some(Count::Push { .. }) => calls.push((from, next.as_u32(), cont[i])),
                Some(Count::Pop { .. } | Count::Return) => ends.push(from),
                // a rule's language is never empty (see `super::rules`): the call can finish
                // when its return point can
                Some(Count::Call(_)) => add(*next, true, true),
                _ => add(*next, true, true),
            },
            State::Look {
                look: Look::End,
                next,
            } => add(*next, true, false),
            State::Look { .. } | State::Fail => {}
            State::Match { .. } => seeds.push(from),
        }
    }
    // Counting sort by target: rev[off[t]..off[t + 1]] are the (source, eps, any) edges into t.
    let mut off = vec![0u32; n + 1];
    for e in &edges {
        off[e.0 as usize + 1] += 1;
    }
    for i in 0..n {
        off[i + 1] += off[i];
    }
    let mut fill = off.clone();
    let mut rev: Vec<(u32, bool, bool)> = vec![(0, false, false); edges.len()];
    for &(to, from, eps, any) in &edges {
        let k = &mut fill[to as usize];
        rev[*k as usize] = (from, eps, any);
        *k += 1;
    }
    let into = |t: u32| &rev[off[t as usize] as usize..off[t as usize + 1] as usize];
    // eps_end: reaches Match through empty steps, end assertions allowed.
    let mut eps_end = vec![false; n];
    let mut stack = seeds.clone();
    for &s in &seeds {
        eps_end[s as usize] = true;
    }
    while let Some(s) = stack.pop() {
        for &(p, eps, _) in into(s) {
            if eps && !eps_end[p as usize] {
                eps_end[p as usize] = true;
                stack.push(p);
            }
        }
    }
    let mut can = eps_end.clone();
    let mut stack: Vec<u32> = (0..n as u32).filter(|&s| eps_end[s as usize]).collect();
    for &e in &ends {
        if !can[e as usize] {
            can[e as usize] = true;
            stack.push(e);
        }
    }
    // A call needs both its body's entry and its return point: each waits for the other.
    // Per state, the calls waiting on it.
    let mut waiting: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
    for (k, &(_, entry, ret)) in calls.iter().enumerate() {
        if ret == NONE {
            continue;
        }
        waiting.entry(entry).or_default().push(k as u32);
        waiting.entry(ret).or_default().push(k as u32);
    }
    while let Some(s) = stack.pop() {
        for &(p, _, any) in into(s) {
            if any && !can[p as usize] {
                can[p as usize] = true;
                stack.push(p);
            }
        }
        if let Some(ks) = waiting.get(&s) {
            for &k in ks {
                let (push, entry, ret) = calls[k as usize];
                if !can[push as usize] && can[entry as usize] && can[ret as usize] {
                    can[push as usize] = true;
                    stack.push(push);
                }
            }
        }
    }
    can
}

/// The return dispatches of `nfa` (unions of at least three `Pop` markers of one recursive
/// expression, one per call site): see [`LazyDfa::dispatch_of`].
fn find_dispatches(nfa: &NFA, counts: &[Option<Count>]) -> (Vec<u32>, Vec<Dispatch>) {
    let mut of = Vec::new();
    let mut out: Vec<Dispatch> = Vec::new();
    if counts.is_empty() {
        return (of, out);
    }
    for (i, st) in nfa.states().iter().enumerate() {
        let State::Union { alternates } = st else {
            continue;
        };
        let mut rec_of = None;
        let mut pops = FxHashMap::default();
        let all_pops =
            alternates
                .iter()
                .all(|a| match counts.get(a.as_usize()).copied().flatten() {
                    Some(Count::Pop { rec, site }) if rec_of.is_none_or(|r| r == rec) => {
                        rec_of = Some(rec);
                        pops.insert(site, a.as_u32());
                        true
                    }
                    _ => false,
                });
        if let (true, Some(rec)) = (all_pops && alternates.len() >= 3, rec_of) {
            if of.is_empty() {
                of = vec![NONE; nfa.states().len()];
            }
            of[i] = out.len() as u32;
            out.push((rec, pops));
        }
    }
    (of, out)
}

/// A complete DFA table, as exported for index files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DfaParts {
    /// byte → class
    pub classes: [u8; 256],
    /// classes per state
    pub stride: usize,
    /// `states × stride` transitions
    pub trans: Vec<u32>,
    /// accepting flag per state
    pub accepting: Vec<bool>,
    /// start state
    pub start: u32,
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

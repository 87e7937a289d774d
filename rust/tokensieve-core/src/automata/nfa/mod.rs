//! The typed intermediate form ([`super::expr::Expr`]) → Thompson NFA, with one copy of each
//! part of the constructs a HIR cannot share (separated lists, member sequences, shared tails,
//! excluded names, character DFAs) and the registry of parts compiled once per process.
//! Plain expressions keep regex-automata's own compiler (see [`super::dfa::LazyDfa::from_expr`]).
//!
//! The submodules: `compiler` — the builder calls and the constructs of HIR and the intermediate
//! form; `chars` — characters in every JSON string spelling (unconstrained contents, excluded
//! names, character DFAs); `parts` — the registry of parts compiled once per process, their
//! recorded builder calls replayed, and shared recursive parts called from each place they
//! occur. This module holds the entry points ([`build`], [`build_with`]) and the markers
//! ([`Count`], [`MARKER`]) the lazy DFA reads.

mod chars;
mod compiler;
mod parts;

use regex_automata::nfa::thompson::{Builder, State, NFA};
use regex_automata::util::look::Look;
use rustc_hash::FxHashMap;

use super::expr::Expr;
use crate::error::{Error, Result};
use compiler::{budget, Compiler};

pub(crate) use parts::{share, shared_part, Part};

#[cfg(test)]
pub(crate) use parts::with_part_copies;

/// A counter instruction. A counted repetition (see [`super::expr::counts`], [`super::hir::counts`]) compiles to one
/// copy of its body and four marker states carrying these; the lazy DFA keeps a count beside
/// each NFA state of its subsets and applies them in the epsilon closure
/// (`super::dfa`). Counted regions never nest, so one count per NFA state is enough. Recursive expressions
/// compile to one copy of their body entered through `Push` markers and left through `Pop`
/// markers: the DFA keeps a stack of call sites beside each NFA state of its subsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Count {
    /// Entering the repetition: the count starts at zero.
    Enter,
    /// The start of the body: another repetition may start only while the count is below
    /// `max`. Both bounds are kept here for the lazy DFA, which reads the bounds of a counted
    /// region from the states reached from this marker.
    Take {
        min: u32,
        max: Option<u32>,
        /// The body is a character automaton under length bounds (see `Compiler::char_dfa`):
        /// whether a count can still finish depends on the automaton's state, which the lazy
        /// DFA checks from the completion lengths of each state of the region.
        sized: bool,
    },
    /// One repetition done: the count goes up by one, saturating at this (the largest count
    /// that matters: the maximum, or the minimum when there is none).
    Incr(u32),
    /// Leaving the repetition needs at least this count; the count is dropped (back to zero).
    Leave(u32),
    /// A call of recursive expression `rec` (see [`super::expr::Expr::Recursive`]): push a
    /// frame naming the call site (0: the expression's entry from outside; `i`: its `i`-th
    /// [`super::expr::Expr::Recur`]).
    Push { rec: u32, site: u32 },
    /// The return from `rec` to a call site: allowed only when the top frame names it; pops it.
    Pop { rec: u32, site: u32 },
    /// Allowed only while fewer than this many frames of the current recursive expression are
    /// open on top of the stack (see [`super::expr::Expr::DepthBelow`]).
    RunBelow(u32),
    /// Allowed only while the stack holds fewer than this many frames in all.
    StackBelow(u32),
    /// A call of rule `r` (see [`super::rules`]): push a frame naming this marker and continue
    /// at the rule's entry, compiling the rule first when it is entered for the first time.
    /// The marker's own next state is where the call returns.
    Call(u32),
    /// The end of a rule: pop the call frame on top and continue after its `Call` marker.
    Return,
    /// The start of member set `group` (an object's members, see
    /// [`super::expr::Expr::Members`]): push a frame holding the members written (none, count
    /// 0). With `any_order`, the members come in any order and the frame keeps which were
    /// written; `min`/`max` bound their number, tail members included (`max` `u32::MAX`:
    /// none; without bounds nothing is counted). Allowed only when the set can still be
    /// finished from here: every required member can be written and finished at the stack's
    /// depth, and the bounds can be met (the NFA's graph and the depth analysis let a set end
    /// at any time; its end waits for these).
    ///
    /// With `witness` (a mask of kinds), each kind needs a witness member (see
    /// [`super::expr::Expr::Members`]): the frame keeps the kinds written, and the set opens
    /// only where the others still can be.
    SetOpen {
        group: u32,
        any_order: bool,
        min: u32,
        max: u32,
        witness: u32,
    },
    /// Before a separator of a set in any order: allowed only when some member can still follow
    /// (one not written yet, or a tail member) with the set still finishable after it.
    SetMore { group: u32 },
    /// Before the separator of member `bit` of a set in schema order (`u32::MAX`: of a tail
    /// member, `u32::MAX - 1 - i`: of the `i`-th kind of witness member): allowed only when
    /// that member can follow with the set still finishable.
    SetSep { group: u32, bit: u32 },
    /// Member `bit` of set `group` starts: allowed only when the set can still be finished
    /// with it (in any order: only when it was not written yet); counts it (in any order,
    /// records it). Required members have the bits below the `SetFinish` marker's `required`
    /// in a set in any order; in schema order, bits are positions.
    SetMark {
        group: u32,
        bit: u32,
        required: bool,
    },
    /// A tail member of set `group` starts (any number of them): counted, where the set has
    /// bounds, and allowed only where they can still be met.
    SetTail { group: u32 },
    /// A witness member of set `group` of the kinds in `mask` starts (a tail member kind, any
    /// number of times): records them (and counts it, where the set has bounds); allowed only
    /// where the other kinds still missing can still come.
    SetWitness { group: u32, mask: u32 },
    /// Item `bit` of set `group` takes its branch that is a witness of the kinds in `mask`:
    /// records them; allowed only where the other kinds still missing can still come.
    SetFlag { group: u32, bit: u32, mask: u32 },
    /// Item `bit` of set `group` takes a branch that is no witness: allowed only while the
    /// kinds still missing can still come from later members.
    SetPlain { group: u32, bit: u32 },
    /// The end of the members: allowed only when the frame on top is a member set holding bits
    /// `0..required` (in any order) and at least the set's `min` members; pops it.
    SetFinish { group: u32, required: u32 },
}

impl Count {
    /// `self` with the member set number of a set marker replaced by `f` of it.
    pub(crate) fn map_set_group(self, mut f: impl FnMut(u32) -> u32) -> Count {
        match self {
            Count::SetOpen {
                group,
                any_order,
                min,
                max,
                witness,
            } => Count::SetOpen {
                group: f(group),
                any_order,
                min,
                max,
                witness,
            },
            Count::SetWitness { group, mask } => Count::SetWitness {
                group: f(group),
                mask,
            },
            Count::SetFlag { group, bit, mask } => Count::SetFlag {
                group: f(group),
                bit,
                mask,
            },
            Count::SetPlain { group, bit } => Count::SetPlain {
                group: f(group),
                bit,
            },
            Count::SetMore { group } => Count::SetMore { group: f(group) },
            Count::SetSep { group, bit } => Count::SetSep {
                group: f(group),
                bit,
            },
            Count::SetMark {
                group,
                bit,
                required,
            } => Count::SetMark {
                group: f(group),
                bit,
                required,
            },
            Count::SetTail { group } => Count::SetTail { group: f(group) },
            Count::SetFinish { group, required } => Count::SetFinish {
                group: f(group),
                required,
            },
            c => c,
        }
    }
}

/// The look-around kind the builder gives marker states. [`crate::regex::parse`] refuses it and
/// the schema compiler never writes it, so every state of this kind is a marker.
pub(crate) const MARKER: Look = Look::WordUnicodeNegate;

/// An NFA and the counter instruction of each marker state (indexed by NFA state id).
pub(crate) struct Built {
    pub nfa: NFA,
    pub counts: Vec<Option<Count>>,
}

/// Compile `x` into an anchored NFA.
pub(crate) fn build(x: &Expr, max_nfa_bytes: usize) -> Result<Built> {
    build_with(x, max_nfa_bytes, 0, false).map(|(b, _)| b)
}

/// Compile `x` into an anchored NFA, numbering its recursive expressions from `first_rec` on;
/// returns it and the next free number. A `rule` (see [`super::rules`]) ends in a
/// [`Count::Return`] marker (then the match state, which the lazy DFA never reaches through
/// it): its end returns to the caller.
pub(crate) fn build_with(
    x: &Expr,
    max_nfa_bytes: usize,
    first_rec: u32,
    rule: bool,
) -> Result<(Built, u32)> {
    let mut c = Compiler {
        b: Builder::new(),
        log: None,
        tails: Vec::new(),
        every: Default::default(),
        marks: Vec::new(),
        recs: Vec::new(),
        knots: Vec::new(),
        next_rec: first_rec,
        last_rec: None,
        called: FxHashMap::default(),
        in_counted: 0,
        next_set: 0,
        sets: Vec::new(),
    };
    c.b.set_size_limit(Some(max_nfa_bytes)).map_err(budget)?;
    c.b.start_pattern().map_err(budget)?;
    let (start, end) = c.e(x)?;
    let m = c.b.add_match().map_err(budget)?;
    let end_to = if rule { c.mark(Count::Return, m)? } else { m };
    c.patch(end, end_to)?;
    c.b.finish_pattern(start).map_err(budget)?;
    let nfa = c.b.build(start, start).map_err(budget)?;
    // The builder keeps every look-around state and their order (it only drops empty states),
    // so the markers are the states of the marker kind, in creation order.
    let mut counts = vec![None; nfa.states().len()];
    let mut marks = c.marks.iter();
    for (i, st) in nfa.states().iter().enumerate() {
        if let State::Look { look: MARKER, .. } = st {
            counts[i] = Some(*marks.next().ok_or_else(lost_marker)?);
        }
    }
    if marks.next().is_some() {
        return Err(lost_marker());
    }
    Ok((Built { nfa, counts }, c.next_rec))
}

fn lost_marker() -> Error {
    Error::InvalidArgument("internal: the counter markers of an automaton do not match".into())
}

//! The NFA a lazy DFA runs on ([`Graph`]): the root's states and those of the rules appended as
//! they are entered, with what the closure needs to know of each state; a [`Segment`] is one
//! NFA compiled on its own, before it is appended.

use std::sync::Arc;

use regex_automata::nfa::thompson::{State, NFA};
use regex_automata::util::primitives::StateID;

use super::analysis::{
    compute_can_match, counted_bounds, find_dispatches, set_groups, Dispatch, LengthSets, SetGroup,
};
use super::ruleset::RuleSet;
use crate::automata::depth::NONE;
use crate::automata::expr::{Expr, LenSet};
use crate::automata::nfa::Count;
use crate::error::{Error, Result};

/// The NFA a lazy DFA runs on: the root's states, then those of the rules compiled so far (see
/// [`crate::automata::rules`]), each rule's ids shifted past the states before it; and what the closure
/// needs to know of each state.
#[derive(Clone)]
pub(super) struct Graph {
    /// `None` for a DFA loaded complete from an index file: nothing is left to determinize.
    pub(super) root: Option<NFA>,
    pub(super) root_len: u32,
    /// The states of the rules built so far, ids from `root_len` on.
    pub(super) extra: Vec<State>,
    /// NFA state can still reach the match state (or its rule's end) after at least one byte
    /// was consumed.
    pub(super) can_match: Vec<bool>,
    /// The counter instruction of each marker state (see [`crate::automata::nfa::Count`]); empty when
    /// the automaton has no marker. Then a subset's entries are NFA states; otherwise they are
    /// triples (NFA state, count, stack frame), flattened.
    pub(super) counts: Vec<Option<Count>>,
    /// For each NFA state inside a counted body, that repetition's bounds (see
    /// [`super::LazyDfa::representative`]); shorter (or empty) past the last counted state.
    pub(super) bounds: Vec<Option<(u32, Option<u32>)>>,
    /// Per NFA state inside a `sized` counted region (a character automaton under length
    /// bounds), [`NONE`] or an index into `len_sets`: the numbers of characters after which the
    /// region can still be left from it (see [`LengthSets`]); shorter (or empty) past the last.
    pub(super) lens: Vec<u32>,
    pub(super) len_sets: Vec<LenSet>,
    /// Per `Push` marker, the state its call returns to (see [`crate::automata::depth::returns`]);
    /// shorter (or empty) past the last `Push` marker.
    pub(super) cont: Vec<u32>,
    /// Per NFA state, [`NONE`] or, for a union of `Pop` markers of one recursive expression
    /// (its return dispatch), an index into `dispatches`; shorter (or empty) past the last.
    pub(super) dispatch_of: Vec<u32>,
    /// Each return dispatch: the expression's marker number and, per call site, its `Pop`
    /// marker.
    pub(super) dispatches: Vec<Dispatch>,
    /// The member sets, by group number (see [`crate::automata::nfa::Count::SetOpen`]; each
    /// rule's numbers shifted past those before it).
    pub(super) set_groups: Vec<SetGroup>,
    /// The rules (see [`crate::automata::rules`]; rule 0, the root, is built already); `None` without.
    pub(super) rules: Option<Arc<RuleSet>>,
    /// Per rule, the state its calls enter ([`NONE`] until it is compiled).
    pub(super) entries: Vec<u32>,
    /// The next free marker number of recursive expressions (each rule gets its own).
    pub(super) next_rec: u32,
    /// Heap held by the NFAs compiled so far, and the limit (`max_nfa_bytes`).
    pub(super) nfa_bytes: usize,
    pub(super) max_nfa_bytes: usize,
}

impl Graph {
    /// The NFA state `s`.
    #[inline]
    pub(super) fn state(&self, s: u32) -> &State {
        if s < self.root_len {
            self.root
                .as_ref()
                .expect("a complete DFA has no NFA states")
                .state(thompson_id(s))
        } else {
            &self.extra[(s - self.root_len) as usize]
        }
    }

    pub(super) fn len(&self) -> usize {
        self.root_len as usize + self.extra.len()
    }

    /// The completion lengths of NFA state `s`, when it lies in a sized counted region.
    #[inline]
    pub(super) fn len_set(&self, s: u32) -> Option<&LenSet> {
        match self.lens.get(s as usize) {
            Some(&k) if k != NONE => self.len_sets.get(k as usize),
            _ => None,
        }
    }

    /// The state after marker `s` (a call's return point).
    pub(super) fn marker_next(&self, s: u32) -> u32 {
        match self.state(s) {
            State::Look { next, .. } => next.as_u32(),
            _ => NONE,
        }
    }

    /// A graph of one NFA (a plain regex's, or a split expression's root).
    pub(super) fn new(
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
            set_groups,
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
            set_groups,
            rules,
            entries,
            next_rec,
            max_nfa_bytes: usize::MAX,
        })
    }

    /// The graph of a DFA loaded complete (no NFA).
    pub(super) fn loaded() -> Graph {
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
            set_groups: Vec::new(),
            rules: None,
            entries: Vec::new(),
            next_rec: 0,
            nfa_bytes: 0,
            max_nfa_bytes: 0,
        }
    }

    /// The entry state of rule `r`, compiling the rule first when it has not been.
    pub(super) fn enter(&mut self, r: u32) -> Result<u32> {
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
        let sets = self.set_groups.len() as u32;
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
            Some(c) => Some(c.map_set_group(|g| g + sets)),
            None => None,
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
        self.set_groups.extend(seg.set_groups.into_iter().map(|g| {
            SetGroup {
                marks: g.marks.iter().map(|&(b, m, r)| (b, m + base, r)).collect(),
                tail: g.tail.map(|m| m + base),
                witness_tails: g
                    .witness_tails
                    .iter()
                    .map(|&(k, m)| (k, m + base))
                    .collect(),
                flags: g.flags.iter().map(|&(b, k, m)| (b, k, m + base)).collect(),
                ..g
            }
        }));
        Ok(seg.nfa.start_anchored().as_u32() + base)
    }
}

/// An NFA compiled on its own — a rule's (ending in a `Return` marker, see [`Graph::append`])
/// or the root's (see [`Graph::new`]) — and what the closure needs of each state, in its own
/// state ids and marker numbers.
pub(super) struct Segment {
    nfa: NFA,
    counts: Vec<Option<Count>>,
    can_match: Vec<bool>,
    cont: Vec<u32>,
    dispatch_of: Vec<u32>,
    dispatches: Vec<Dispatch>,
    set_groups: Vec<SetGroup>,
    /// Empty when the rule has no counter.
    bounds: Vec<Option<(u32, Option<u32>)>>,
    /// Empty when the rule has no `sized` counted region.
    lens: LengthSets,
    /// How many recursive-expression marker numbers it uses (from 1 on).
    recs: u32,
}

impl Segment {
    pub(super) fn build(x: &Expr, max_nfa_bytes: usize) -> Result<Segment> {
        let (built, recs) = crate::automata::nfa::build_with(x, max_nfa_bytes, 0, true)?;
        let mut counts = built.counts;
        counts.resize(built.nfa.states().len(), None);
        Segment::of(built.nfa, counts, recs)
    }

    /// What the closure needs of each state of `nfa` (`counts` may be empty: no markers).
    fn of(nfa: NFA, counts: Vec<Option<Count>>, recs: u32) -> Result<Segment> {
        let cont = crate::automata::depth::returns(&nfa, &counts);
        let can_match = compute_can_match(&nfa, &counts, &cont);
        let (dispatch_of, dispatches) = find_dispatches(&nfa, &counts);
        let counted = counts.iter().any(|c| matches!(c, Some(Count::Take { .. })));
        let bounds = if counted {
            counted_bounds(&nfa, &counts)
        } else {
            Vec::new()
        };
        let lens = LengthSets::of(&nfa, &counts)?;
        let set_groups = set_groups(&counts)?;
        Ok(Segment {
            nfa,
            counts,
            can_match,
            cont,
            dispatch_of,
            dispatches,
            set_groups,
            bounds,
            lens,
            recs,
        })
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

pub(super) fn thompson_id(s: u32) -> regex_automata::util::primitives::StateID {
    regex_automata::util::primitives::StateID::new_unchecked(s as usize)
}

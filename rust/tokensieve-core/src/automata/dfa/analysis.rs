//! What the closure needs to know of each state of an NFA, computed once per NFA: whether a
//! match can still be reached ([`compute_can_match`]), the bounds of the counted repetition a
//! state is in ([`counted_bounds`]), the completion lengths inside sized counted regions
//! ([`LengthSets`]) and the return dispatches of recursive expressions ([`find_dispatches`]).

use regex_automata::nfa::thompson::{State, NFA};
use regex_automata::util::look::Look;
use regex_automata::util::primitives::StateID;
use rustc_hash::FxHashMap;

use super::graph::thompson_id;
use crate::automata::depth::{self, NONE};
use crate::automata::expr::{LenSet, SETTLE_MAX};
use crate::automata::nfa::{Count, MARKER};
use crate::error::{Error, Result};

/// Liveness inside the `sized` counted regions of an NFA (a character automaton under length
/// bounds, see `crate::automata::nfa`'s `Compiler::char_dfa`): the count alone no longer says whether a
/// state can finish, since the automaton's states need characters of their own. Per state of
/// such a region, the numbers of `Incr` markers on its ways to the region's `Leave`: `R(l)`,
/// the states with a way through exactly `l` of them, is found backwards from the `Incr`
/// markers into the heads of `H(l - 1)` (a head: the state after an `Incr`; `H(0)`: the heads
/// that reach a `Leave` through empty steps, `H(l)`: those whose `Take` leads into `R(l)`).
/// Once `H(l) = H(l - 1)`, every later step repeats; the compiler builds such regions only when
/// their character automaton settles within `expr::SETTLE_MAX` steps.
#[derive(Default)]
pub(super) struct LengthSets {
    /// Per NFA state, an index into `sets` or [`NONE`] (empty without sized regions).
    pub(super) of: Vec<u32>,
    pub(super) sets: Vec<LenSet>,
}

impl LengthSets {
    pub(super) fn of(nfa: &NFA, counts: &[Option<Count>]) -> Result<LengthSets> {
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
            depth::successors(nfa, s, &mut succ);
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
                            depth::successors(nfa, s, &mut st)
                        }
                        _ => {}
                    },
                }
            }
            leaves.push(leave);
            head_takes.push(tk);
        }
        let words = (SETTLE_MAX + 66) / 64;
        let mut bits = vec![0u64; region.len() * words];
        let mut heads: Vec<bool> = leaves.clone();
        let mut inr = vec![false; region.len()];
        let mut settled = None;
        for l in 1..=SETTLE_MAX as u32 + 2 {
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

pub(super) type Dispatch = (u32, FxHashMap<u32, u32>);

/// For every NFA state inside a counted body, the repetition's bounds: the states reached from
/// its `Take` marker without passing another counter marker (the body's end leads to its `Incr`
/// marker; bodies hold no other counter, no jump out and no recursive call, see
/// `crate::automata::expr::counts`; a whole recursive expression inside is entered and left through its
/// own markers, and its states carry the count too).
pub(super) fn counted_bounds(
    nfa: &NFA,
    counts: &[Option<Count>],
) -> Vec<Option<(u32, Option<u32>)>> {
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
            depth::successors(nfa, s, &mut stack);
        }
    }
    out
}

/// For every NFA state: can a match be reached from it, in a position that is not the start of
/// the input? (`\A` is then never satisfied, `\z` only when nothing but empty steps follow.)
///
/// With calls (`Push`/`Pop` markers, `cont` from [`depth::returns`]) the question is
/// asked of each body separately: a `Pop` marker (a body's end) counts as reached, and a `Push`
/// marker can match when its callee's body can reach its end and its return point can match
/// (a path through a body never returns to another site). The lazy DFA makes a call only from
/// a `Push` marker that can match, so every frame on a stack returns to a point that can.
pub(super) fn compute_can_match(nfa: &NFA, counts: &[Option<Count>], cont: &[u32]) -> Vec<bool> {
    let n = nfa.states().len();
    // Reverse edges, flat and grouped by target (`into`): counted in a first pass over the
    // states, filled in a second, so the only allocations are the arrays themselves (a
    // schema's NFA has thousands of states, and this runs on every new grammar).
    let mut seeds = Vec::new();
    // (Push marker, body entry, return point) and the Pop markers
    let mut calls: Vec<(u32, u32, u32)> = Vec::new();
    let mut ends: Vec<u32> = Vec::new();
    let mut off = vec![0u32; n + 1];
    for (i, st) in nfa.states().iter().enumerate() {
        let from = i as u32;
        match st {
            State::Look { look: MARKER, next } => match counts.get(i).copied().flatten() {
                Some(Count::Push { .. }) => calls.push((from, next.as_u32(), cont[i])),
                Some(Count::Pop { .. } | Count::Return) => ends.push(from),
                _ => {}
            },
            State::Match { .. } => seeds.push(from),
            _ => {}
        }
        reverse_edges(st, counts.get(i).copied().flatten(), |to, _| {
            off[to.as_usize() + 1] += 1;
        });
    }
    for i in 0..n {
        off[i + 1] += off[i];
    }
    // sources into `src`, their kinds (`EPS`, `ANY`) into `flags`; `off[t]` walks from the
    // start of t's edges to its end
    let total = off[n] as usize;
    let mut src = vec![0u32; total];
    let mut flags = vec![0u8; total];
    for (i, st) in nfa.states().iter().enumerate() {
        reverse_edges(st, counts.get(i).copied().flatten(), |to, f| {
            let k = &mut off[to.as_usize()];
            src[*k as usize] = i as u32;
            flags[*k as usize] = f;
            *k += 1;
        });
    }
    // (each `off[t]` is now where t's edges end, i.e. where t + 1's start)
    off.copy_within(0..n, 1);
    off[0] = 0;
    let into = |t: u32| {
        let r = off[t as usize] as usize..off[t as usize + 1] as usize;
        src[r.clone()].iter().copied().zip(flags[r].iter().copied())
    };
    // eps_end: reaches Match through empty steps, end assertions allowed.
    let mut eps_end = vec![false; n];
    let mut stack = seeds.clone();
    for &s in &seeds {
        eps_end[s as usize] = true;
    }
    while let Some(s) = stack.pop() {
        for (p, f) in into(s) {
            if f & EPS != 0 && !eps_end[p as usize] {
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
        for (p, f) in into(s) {
            if f & ANY != 0 && !can[p as usize] {
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

/// An edge [`compute_can_match`] follows through empty steps only (`\z` assertions included).
const EPS: u8 = 1;
/// An edge it follows from a state that has read input: any step but an end assertion.
const ANY: u8 = 2;

/// Calls `edge(target, flags)` for each edge out of `st` (whose marker, if it is one, is
/// `count`) that [`compute_can_match`] follows backwards. A `Push` marker's edge is handled as a
/// call, and a `Pop` or `Return` marker ends a body: neither is an edge here.
fn reverse_edges(st: &State, count: Option<Count>, mut edge: impl FnMut(StateID, u8)) {
    match st {
        State::ByteRange { trans } => edge(trans.next, ANY),
        State::Sparse(sp) => sp.transitions.iter().for_each(|t| edge(t.next, ANY)),
        State::Dense(d) => {
            let mut last = None;
            for &t in d.transitions.iter() {
                if last != Some(t) {
                    edge(t, ANY);
                    last = Some(t);
                }
            }
        }
        State::Union { alternates } => alternates.iter().for_each(|&a| edge(a, EPS | ANY)),
        State::BinaryUnion { alt1, alt2 } => {
            edge(*alt1, EPS | ANY);
            edge(*alt2, EPS | ANY);
        }
        State::Capture { next, .. } => edge(*next, EPS | ANY),
        // A counter's guards never keep a state from the match: a count stays within the
        // repetition's bounds, so from any count the loop can go on to its minimum and leave
        // (see `crate::automata::nfa::Count`). A rule's language is never empty (see
        // `crate::automata::rules`): a call can finish when its return point can.
        State::Look { look: MARKER, next } => match count {
            Some(Count::Push { .. } | Count::Pop { .. } | Count::Return) => {}
            _ => edge(*next, EPS | ANY),
        },
        State::Look {
            look: Look::End,
            next,
        } => edge(*next, EPS),
        State::Look { .. } | State::Fail | State::Match { .. } => {}
    }
}

/// The return dispatches of `nfa` (unions of at least three `Pop` markers of one recursive
/// expression, one per call site): see [`super::graph::Graph::dispatch_of`].
pub(super) fn find_dispatches(nfa: &NFA, counts: &[Option<Count>]) -> (Vec<u32>, Vec<Dispatch>) {
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

/// The members of one member set (see [`Count::SetOpen`]), by their marker states.
#[derive(Clone, Debug, Default)]
pub(super) struct SetGroup {
    pub(super) any_order: bool,
    /// Bounds on the number of members (`max` `u32::MAX`: none); `(0, u32::MAX)`: nothing
    /// counted.
    pub(super) min: u32,
    pub(super) max: u32,
    /// Every `SetMark` marker: (bit, state, required), by bit.
    pub(super) marks: Vec<(u32, u32, bool)>,
    /// The `SetTail` marker, when tail members may follow.
    pub(super) tail: Option<u32>,
    /// The witness kinds needed (a mask); the `SetWitness` markers of the witness members
    /// (mask, state), in order; and the `SetFlag` markers of the items' witness branches
    /// (bit, mask, state), by bit.
    pub(super) witness: u32,
    pub(super) witness_tails: Vec<(u32, u32)>,
    pub(super) flags: Vec<(u32, u32, u32)>,
}

impl SetGroup {
    /// Whether the set counts its members.
    pub(super) fn counted(&self) -> bool {
        self.min > 0 || self.max != u32::MAX
    }
}

/// The member sets of an NFA whose marker states carry `counts`, indexed by group number.
pub(super) fn set_groups(counts: &[Option<Count>]) -> Result<Vec<SetGroup>> {
    let mut groups: Vec<SetGroup> = Vec::new();
    let mut opens: Vec<u32> = Vec::new();
    let at = |groups: &mut Vec<SetGroup>, opens: &mut Vec<u32>, g: u32| -> usize {
        let g = g as usize;
        if groups.len() <= g {
            groups.resize(g + 1, SetGroup::default());
            opens.resize(g + 1, 0);
        }
        g
    };
    for (s, c) in counts.iter().enumerate() {
        let s = s as u32;
        match *c {
            Some(Count::SetOpen {
                group,
                any_order,
                min,
                max,
                witness,
            }) => {
                let g = at(&mut groups, &mut opens, group);
                opens[g] += 1;
                groups[g].any_order = any_order;
                groups[g].min = min;
                groups[g].max = max;
                groups[g].witness = witness;
            }
            Some(Count::SetWitness { group, mask }) => {
                let g = at(&mut groups, &mut opens, group);
                groups[g].witness_tails.push((mask, s));
            }
            Some(Count::SetFlag { group, bit, mask }) => {
                let g = at(&mut groups, &mut opens, group);
                groups[g].flags.push((bit, mask, s));
            }
            Some(Count::SetMark {
                group,
                bit,
                required,
            }) => {
                let g = at(&mut groups, &mut opens, group);
                groups[g].marks.push((bit, s, required));
            }
            Some(Count::SetTail { group }) => {
                let g = at(&mut groups, &mut opens, group);
                if groups[g].tail.replace(s).is_some() {
                    return Err(set_numbering());
                }
            }
            _ => {}
        }
    }
    if opens.iter().any(|&k| k != 1) {
        return Err(set_numbering());
    }
    for g in &mut groups {
        g.marks.sort_unstable();
        g.flags.sort_unstable();
        if g.marks.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(set_numbering());
        }
    }
    Ok(groups)
}

fn set_numbering() -> Error {
    Error::InvalidArgument("internal: the member sets of an automaton are numbered twice".into())
}

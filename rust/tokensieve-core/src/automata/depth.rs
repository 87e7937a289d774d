//! Liveness under a stack: at which stack depths an NFA state can still finish.
//!
//! An automaton with recursive expressions (see [`super::nfa::Count::Push`]) runs with a stack
//! of open calls, and some calls are refused past a depth ([`Count::StackBelow`]). A state can
//! then look alive in the NFA's graph (a path to the match exists) while every such path needs
//! a call deeper than allowed. The lazy DFA keeps only live states (the token index relies on
//! it), so it needs, for each NFA state `s`, [`Depths::best`]: the largest number of open frames
//! at which the rest of `s`'s own body (the recursive expression it lies in, or the whole
//! expression at the top level) can still be finished. A configuration (state `s`, stack of
//! `d` frames) can reach the match exactly when `d ≤ best[s]` and each frame's return point
//! can finish at the depth it returns to; the second part is checked once, when the frame is
//! pushed (see [`super::dfa`]).
//!
//! `best` is a fixpoint over the NFA: a byte or empty step takes the best successor; a guard
//! `StackBelow(n)` caps at `n - 1`; a call is `min(best[entry] - 1, best[return point])`; the
//! end of a recursive body and the match are unbounded.
//!
//! Two refinements keep it exact:
//! - Counted repetitions: a path may leave a repetition only once its count reaches the
//!   minimum. `Enter` of a repetition with a minimum takes its body's value, and a state in a
//!   body whose count is still short of the minimum must also be able to do the body once more
//!   ([`Depths::region`], checked by the DFA with the count at hand).
//! - Nesting guards ([`Count::RunBelow`], the any-JSON value's depth limit) depend on how many
//!   frames of one recursion are on top, which `best` does not track. They are allowed only
//!   where they never decide liveness: `best` is computed with every such guard open and with
//!   every such guard shut, and the two must agree on every state the DFA asks about.

use regex_automata::nfa::thompson::{State, NFA};
use regex_automata::util::look::Look;
use regex_automata::util::primitives::StateID;
use rustc_hash::FxHashMap;

use super::nfa::{Count, MARKER};
use crate::error::{Error, Result};

/// `best` of a state that cannot finish at any depth.
pub(crate) const NEVER: i64 = i64::MIN / 4;
/// `best` of a state that can finish at any depth.
const ANY: i64 = 1 << 40;
/// No state (in [`returns`]).
pub(crate) const NONE: u32 = u32::MAX;
/// The deepest stack any automaton may build, whatever its guards say.
pub(crate) const MAX_FRAMES: u32 = 1 << 20;

/// The largest `max_stack_depth`, of a grammar and of a JSON Schema alike: the deepest stack the
/// automaton tracks ([`MAX_FRAMES`]).
pub const MAX_STACK_DEPTH: u32 = MAX_FRAMES;

pub(crate) fn stack_depth_error(value: &str) -> crate::error::Error {
    Error::InvalidArgument(format!(
        "max_stack_depth must be an integer from 1 to {MAX_STACK_DEPTH}, got {value:?}"
    ))
}

/// `max_stack_depth` read from its text (a grammar's and a JSON Schema's option): an integer
/// from 1 to [`MAX_STACK_DEPTH`].
pub fn stack_depth_option(value: &str) -> Result<u32> {
    value
        .parse::<u32>()
        .ok()
        .filter(|v| (1..=MAX_STACK_DEPTH).contains(v))
        .ok_or_else(|| stack_depth_error(value))
}

/// See the module docs.
pub(crate) struct Depths {
    /// Per NFA state: the largest stack depth at which its body can still be finished
    /// ([`NEVER`]: at none).
    pub best: Vec<i64>,
    /// Per NFA state lying directly in the body of a counted repetition (not in a call made
    /// from it): the repetition's `Take` marker and its minimum.
    pub region: Vec<Option<(u32, u32)>>,
}

fn id(s: u32) -> StateID {
    StateID::new_unchecked(s as usize)
}

impl Depths {
    /// The depths of `nfa` whose marker states carry `counts` (`cont`: see [`returns`]);
    /// `None` when it has no stack bound (`StackBelow`).
    pub(crate) fn compute(
        nfa: &NFA,
        counts: &[Option<Count>],
        cont: &[u32],
    ) -> Result<Option<Depths>> {
        // Without a stack bound every recursion is one whose states can always finish (the
        // any-JSON value: a scalar or a closing bracket is always a way on, and its nesting
        // guards only the openings), so the NFA's graph decides liveness on its own; the
        // stacked any-JSON value is checked against copies, dead states included.
        let bounded = counts
            .iter()
            .any(|c| matches!(c, Some(Count::StackBelow(_))));
        if !bounded {
            return Ok(None);
        }
        let n = nfa.states().len();
        let marker = |s: u32| counts.get(s as usize).copied().flatten();
        let next_of = |s: u32| marker_next(nfa, s);
        if nfa.states().iter().any(|st| {
            matches!(
                st,
                State::Look {
                    look: Look::End,
                    ..
                }
            )
        }) {
            return Err(Error::InvalidArgument(
                "an end-of-input assertion in an automaton with recursion is not supported".into(),
            ));
        }
        // each Enter marker's Take marker and minimum
        let mut enter: Vec<Option<(u32, u32)>> = vec![None; n];
        for s in 0..n as u32 {
            if let Some(Count::Enter) = marker(s) {
                enter[s as usize] = find_take(nfa, counts, next_of(s));
            }
        }
        let region = regions(nfa, counts, cont);
        let graph = Graph::new(nfa, counts, cont, &enter);
        let open = fixpoint(&graph, true)?;
        let guarded = counts.iter().any(|c| matches!(c, Some(Count::RunBelow(_))));
        let shut = if guarded {
            fixpoint(&graph, false)?
        } else {
            open.clone()
        };
        for s in 0..n {
            let asked = match nfa.state(id(s as u32)) {
                State::ByteRange { .. } | State::Sparse(_) | State::Dense(_) => true,
                State::Look { look: MARKER, .. } => matches!(
                    counts.get(s).copied().flatten(),
                    Some(Count::Push { .. } | Count::Take { .. })
                ),
                _ => false,
            };
            if asked && open[s] != shut[s] {
                return Err(Error::InvalidArgument(
                    "internal: a nesting guard is the only way on from some state of this \
                     automaton, which its liveness check does not cover"
                        .into(),
                ));
            }
        }
        Ok(Some(Depths { best: open, region }))
    }
}

/// The state after marker (look-around) state `s`; [`NONE`] for any other kind of state.
fn marker_next(nfa: &NFA, s: u32) -> u32 {
    match nfa.state(id(s)) {
        State::Look { next, .. } => next.as_u32(),
        _ => NONE,
    }
}

/// Per NFA state: for a `Push` marker, the state its call returns to (the state after the `Pop`
/// marker of the same expression and site; [`NONE`] when there is none); [`NONE`] for every
/// other state. Empty when the automaton has no `Push` marker.
pub(crate) fn returns(nfa: &NFA, counts: &[Option<Count>]) -> Vec<u32> {
    if !counts.iter().any(|c| matches!(c, Some(Count::Push { .. }))) {
        return Vec::new();
    }
    let n = nfa.states().len();
    let mut pops: FxHashMap<(u32, u32), u32> = FxHashMap::default();
    for (s, c) in counts.iter().enumerate() {
        if let Some(Count::Pop { rec, site }) = c {
            pops.insert((*rec, *site), marker_next(nfa, s as u32));
        }
    }
    let mut cont = vec![NONE; n];
    for (s, c) in counts.iter().enumerate() {
        if let Some(Count::Push { rec, site }) = c {
            cont[s] = pops.get(&(*rec, *site)).copied().unwrap_or(NONE);
        }
    }
    cont
}

/// The `Take` marker reached from `from` through empty steps (the head of a counted loop),
/// with its minimum.
fn find_take(nfa: &NFA, counts: &[Option<Count>], from: u32) -> Option<(u32, u32)> {
    let mut stack = vec![from];
    let mut seen = Vec::new();
    while let Some(s) = stack.pop() {
        if s == NONE || seen.contains(&s) {
            continue;
        }
        seen.push(s);
        if let Some(Count::Take { min, .. }) = counts.get(s as usize).copied().flatten() {
            return Some((s, min));
        }
        match nfa.state(id(s)) {
            State::Union { alternates } => stack.extend(alternates.iter().map(|a| a.as_u32())),
            State::BinaryUnion { alt1, alt2 } => stack.extend([alt1.as_u32(), alt2.as_u32()]),
            State::Capture { next, .. } => stack.push(next.as_u32()),
            _ => {}
        }
    }
    None
}

/// [`Depths::region`]: from each `Take` marker, the states reached without passing another
/// counter marker, stepping over calls (from a `Push` marker straight to its return point).
fn regions(nfa: &NFA, counts: &[Option<Count>], cont: &[u32]) -> Vec<Option<(u32, u32)>> {
    let n = nfa.states().len();
    let mut out = vec![None; n];
    for t in 0..n as u32 {
        let Some(Count::Take { min, .. }) = counts[t as usize] else {
            continue;
        };
        let State::Look { next, .. } = nfa.state(id(t)) else {
            continue;
        };
        let mut stack = vec![next.as_u32()];
        while let Some(s) = stack.pop() {
            let si = s as usize;
            if s == NONE || out[si].is_some() {
                continue;
            }
            match counts.get(si).copied().flatten() {
                Some(Count::Enter | Count::Take { .. } | Count::Incr(_) | Count::Leave(_)) => {
                    continue
                }
                Some(Count::Push { .. }) => {
                    out[si] = Some((t, min));
                    stack.push(cont[si]);
                    continue;
                }
                _ => {}
            }
            out[si] = Some((t, min));
            successors(nfa, s, &mut stack);
        }
    }
    out
}

/// The states NFA state `s` leads to (by a byte or an empty step), appended to `out`.
pub(crate) fn successors(nfa: &NFA, s: u32, out: &mut Vec<u32>) {
    match nfa.state(id(s)) {
        State::ByteRange { trans } => out.push(trans.next.as_u32()),
        State::Sparse(sp) => out.extend(sp.transitions.iter().map(|t| t.next.as_u32())),
        State::Dense(d) => out.extend(d.transitions.iter().map(|t| t.as_u32())),
        State::Union { alternates } => out.extend(alternates.iter().map(|a| a.as_u32())),
        State::BinaryUnion { alt1, alt2 } => out.extend([alt1.as_u32(), alt2.as_u32()]),
        State::Capture { next, .. } | State::Look { next, .. } => out.push(next.as_u32()),
        State::Match { .. } | State::Fail => {}
    }
}

/// How a state's `best` follows from what it reads (see [`Graph`]).
#[derive(Clone, Copy)]
enum Rule {
    /// The best of what it reads (bytes, empty steps, markers that pass the depth on).
    Max,
    /// A call: `min(best[entry] - 1, best[return point])` (reads entry, then return point).
    Call,
    /// `min(best[next], k - 1)`.
    Cap(i64),
    /// A nesting guard: passes the depth on when guards are open, else never.
    Guard,
    /// Unbounded (a match, or a body's end).
    Any,
    /// Never (a failure, an assertion that does not hold here).
    Never,
}

/// The NFA as the fixpoint reads it: per state its rule and what it reads, flat.
struct Graph {
    rule: Vec<Rule>,
    off: Vec<u32>,
    reads: Vec<u32>,
    /// The states whose value reads each state (the reverse of `reads`), flat.
    roff: Vec<u32>,
    readers: Vec<u32>,
}

impl Graph {
    fn new(
        nfa: &NFA,
        counts: &[Option<Count>],
        cont: &[u32],
        enter: &[Option<(u32, u32)>],
    ) -> Graph {
        let n = nfa.states().len();
        let mut rule = Vec::with_capacity(n);
        let mut off = Vec::with_capacity(n + 1);
        let mut reads: Vec<u32> = Vec::with_capacity(n * 2);
        off.push(0);
        let mut succ = Vec::new();
        for s in 0..n as u32 {
            succ.clear();
            let r = match nfa.state(id(s)) {
                State::Match { .. } => Rule::Any,
                State::Fail => Rule::Never,
                // `\A` past the start and the other assertions never hold inside
                State::Look { look, .. } if *look != MARKER => Rule::Never,
                State::Dense(d) => {
                    let mut last = None;
                    for &t in d.transitions.iter() {
                        if last != Some(t) {
                            succ.push(t.as_u32());
                            last = Some(t);
                        }
                    }
                    Rule::Max
                }
                _ => match counts.get(s as usize).copied().flatten() {
                    Some(Count::Pop { .. }) => Rule::Any,
                    Some(Count::Push { .. }) => {
                        successors(nfa, s, &mut succ);
                        succ.push(cont[s as usize]);
                        Rule::Call
                    }
                    Some(Count::StackBelow(k)) => {
                        successors(nfa, s, &mut succ);
                        Rule::Cap(i64::from(k))
                    }
                    Some(Count::RunBelow(_)) => {
                        successors(nfa, s, &mut succ);
                        Rule::Guard
                    }
                    Some(Count::Enter) => {
                        match enter[s as usize] {
                            Some((take, min)) if min > 0 => succ.push(take),
                            _ => successors(nfa, s, &mut succ),
                        }
                        Rule::Max
                    }
                    _ => {
                        successors(nfa, s, &mut succ);
                        Rule::Max
                    }
                },
            };
            rule.push(r);
            reads.extend(&succ);
            off.push(reads.len() as u32);
        }
        // reverse: counting sort by the state read
        let mut roff = vec![0u32; n + 1];
        for &t in &reads {
            if t != NONE {
                roff[t as usize + 1] += 1;
            }
        }
        for i in 0..n {
            roff[i + 1] += roff[i];
        }
        let mut fill = roff.clone();
        let mut readers = vec![0u32; roff[n] as usize];
        for s in 0..n {
            for &t in &reads[off[s] as usize..off[s + 1] as usize] {
                if t != NONE {
                    let k = &mut fill[t as usize];
                    readers[*k as usize] = s as u32;
                    *k += 1;
                }
            }
        }
        Graph {
            rule,
            off,
            reads,
            roff,
            readers,
        }
    }
}

/// `best` for every state (see the module docs), with nesting guards open or shut.
fn fixpoint(g: &Graph, guards_open: bool) -> Result<Vec<i64>> {
    let n = g.rule.len();
    let at = |b: &[i64], t: u32| if t == NONE { NEVER } else { b[t as usize] };
    let value = |b: &[i64], s: usize| -> i64 {
        let r = &g.reads[g.off[s] as usize..g.off[s + 1] as usize];
        let max = || r.iter().map(|&t| at(b, t)).max().unwrap_or(NEVER);
        match g.rule[s] {
            Rule::Any => ANY,
            Rule::Never => NEVER,
            Rule::Max => max(),
            Rule::Guard if guards_open => max(),
            Rule::Guard => NEVER,
            Rule::Cap(k) => max().min(k - 1),
            Rule::Call => {
                // reads: the entry (the marker's next), then the return point
                let entry = r.first().map_or(NEVER, |&t| at(b, t));
                let ret = r.last().map_or(NEVER, |&t| at(b, t));
                (entry - 1).min(ret).max(NEVER)
            }
        }
    };
    let mut b = vec![NEVER; n];
    let mut work: Vec<u32> = (0..n as u32).collect();
    let mut queued = vec![true; n];
    let mut steps: u64 = 0;
    let limit = 64 * (n as u64 + 16) * 64;
    while let Some(s) = work.pop() {
        let s = s as usize;
        queued[s] = false;
        steps += 1;
        if steps & 4095 == 0 {
            crate::budget::check("checking the automaton's recursion")?;
        }
        if steps > limit {
            return Err(Error::Budget(
                "the automaton's recursion is too intricate to check (liveness did not settle)"
                    .into(),
            ));
        }
        let v = value(&b, s).clamp(NEVER, ANY);
        if v > b[s] {
            b[s] = v;
            for &p in &g.readers[g.roff[s] as usize..g.roff[s + 1] as usize] {
                if !queued[p as usize] {
                    queued[p as usize] = true;
                    work.push(p);
                }
            }
        }
    }
    Ok(b)
}

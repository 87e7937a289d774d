//! Subset construction on demand: the transition table ([`Table`]) with its interned subsets
//! and stack frames, the epsilon closure (counter and call markers applied to each entry's
//! registers), the step from a subset over one byte, and the representatives that let counts
//! far from their bounds share a mask.

use regex_automata::nfa::thompson::State;
use regex_automata::util::look::Look;
use rustc_hash::{FxHashMap, FxHashSet};

use super::analysis::SetGroup;
use super::graph::Graph;
use super::{LazyDfa, DEAD, UNKNOWN};
use crate::automata::depth::{Depths, MAX_FRAMES, NONE};
use crate::automata::lexer::{Lexer, Sym};
use crate::automata::nfa::{Count, MARKER};
use crate::error::{Error, Result};

const ACCEPT_MARK: u32 = u32::MAX;
/// The `rec` of a frame pushed by a rule call (see [`Count::Call`]); its `site` is the call
/// marker's state.
const RULE_CALL: u32 = u32::MAX;
/// The `rec` of a frame holding the members of an object written so far (see
/// [`Count::SetOpen`]); its `site` names the set (an index into `Table::member_sets`). Such a
/// frame adds nothing to the depth: the depth analysis knows only calls.
const MEMBER_SET: u32 = u32::MAX - 1;

/// One stack frame: the call on top of `parent`.
#[derive(Clone, Copy, Default)]
pub(super) struct Frame {
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

pub(super) struct Table {
    /// The NFA, growing as rules are entered.
    pub(super) g: Graph,
    /// `states × stride` transitions; `UNKNOWN` until computed.
    pub(super) trans: Vec<u32>,
    pub(super) accepting: Vec<bool>,
    pub(super) sets: Vec<Box<[u32]>>,
    pub(super) ids: FxHashMap<Box<[u32]>, u32>,
    /// Scratch space for closures: (NFA state, count, past the end assertion).
    pub(super) stack: Vec<(u32, u64, bool)>,
    pub(super) seen: Vec<u32>,
    pub(super) seen_gen: u32,
    /// With registers: the registers `seen` first recorded each entry with, in this closure.
    pub(super) seen_first: Vec<u64>,
    /// With registers, the entries seen with other registers than their first (a state may be
    /// seen with several counts or stacks, rarely).
    pub(super) seen_registers: FxHashSet<(u32, u64, bool)>,
    /// The stack frames of recursive expressions and rule calls (see
    /// [`Count::Push`], [`Count::Call`]), interned; frame 0 is the
    /// empty stack.
    pub(super) frames: Vec<Frame>,
    pub(super) frame_ids: FxHashMap<(u32, u32, u32), u32>,
    /// The member sets of [`MEMBER_SET`] frames, interned: word 0 the number of members
    /// written (counted sets only), then bit `i` of the words after it: member `i` written (sets
    /// in any order only); set 0 is the empty set.
    pub(super) member_sets: Vec<Box<[u64]>>,
    pub(super) member_set_ids: FxHashMap<Box<[u64]>, u32>,
    /// About how many bytes the states, frames and member sets hold (within `max_bytes`).
    pub(super) bytes: usize,
    /// See [`table_bytes`].
    pub(super) max_bytes: usize,
    /// The states and bytes held when the automaton was ready for matchers (see
    /// [`super::LazyDfa::mark_ready`]): its wear is what was built after.
    pub(super) ready: (usize, usize),
}

/// Most bytes the lazily built part of one automaton may hold: its states' subsets and
/// transitions, its recorded stack frames and member sets (each counted in its vector and its
/// index): four times `max_nfa_bytes`, at least 512 MiB. A state's subset grows with the
/// automaton (an object of 2,000 properties in any order holds a trie of their keys in many
/// of its states), so `max_states` alone does not bound the memory.
pub(super) fn table_bytes(max_nfa_bytes: usize) -> usize {
    max_nfa_bytes.saturating_mul(4).max(512 << 20)
}

/// The cost of one entry of a table's vectors and maps beside its own bytes.
const ENTRY_BYTES: usize = 48;

impl Table {
    /// Count `n` more bytes, or the `BudgetError` past `max_bytes`.
    pub(super) fn hold(&mut self, n: usize) -> Result<()> {
        let after = self.bytes.saturating_add(n);
        if after > self.max_bytes {
            return Err(Error::Budget(format!(
                "the automaton's states hold more than {} MiB (their subsets, stack frames and \
                 member sets grow with the constraint's size and with the variety of the outputs \
                 it has read; four times max_nfa_bytes, at least 512 MiB); simplify the \
                 constraint or raise max_nfa_bytes",
                self.max_bytes >> 20
            )));
        }
        self.bytes = after;
        Ok(())
    }
}

impl Table {
    /// An empty table over `g`, with closure scratch space for its NFA states.
    pub(super) fn new(g: Graph) -> Table {
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
            member_sets: vec![Box::new([0])],
            member_set_ids: FxHashMap::from_iter([(Box::new([0u64]) as Box<[u64]>, 0)]),
            bytes: 0,
            max_bytes: table_bytes(0),
            ready: (0, 0),
        }
    }

    /// Count what the table holds now as ready (see [`super::LazyDfa::is_worn`]).
    pub(super) fn mark_ready(&mut self) {
        self.ready = (self.sets.len(), self.bytes);
    }

    /// Forgets the states from `n` on: their subsets, and every transition into them (computed
    /// again when asked for). Only for states no one outside the table has seen.
    pub(super) fn forget_from(&mut self, n: usize, stride: usize) {
        if self.sets.len() <= n {
            return;
        }
        for key in self.sets.drain(n..) {
            self.ids.remove(&key);
            self.bytes = self
                .bytes
                .saturating_sub(2 * ENTRY_BYTES + 8 * key.len() + 4 * stride);
        }
        self.accepting.truncate(n);
        self.trans.truncate(n * stride);
        for t in self.trans.iter_mut() {
            if *t != UNKNOWN && *t as usize >= n {
                *t = UNKNOWN;
            }
        }
    }

    /// The entry of rule `r` (compiled first when new), with the scratch space grown to match.
    pub(super) fn enter(&mut self, r: u32) -> Result<u32> {
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

impl LazyDfa {
    /// [`LazyDfa::representative`] with the table locked.
    pub(super) fn representative_in(&self, t: &mut Table, state: u32, k: usize) -> Result<u32> {
        if !self.has_registers() || state == DEAD {
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
    pub(super) fn closure_intern(
        &self,
        t: &mut Table,
        seeds: &[(u32, u64)],
        at_start: bool,
    ) -> Result<u32> {
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
        // one closure can grow large (a recursion reached along many stacks): keep the
        // compile deadline within it too
        let mut every = crate::budget::Every::default();
        let mut steps = 0usize;
        while let Some((s, c, past_end)) = t.stack.pop() {
            if registers {
                every.tick("determinizing the automaton")?;
                steps += 1;
                if steps > MAX_CLOSURE_STEPS || set.len() > MAX_SUBSET {
                    return Err(too_many_stacks());
                }
            }
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
            // a rule's language is never empty (see `crate::automata::rules`), so the call can finish
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
            Some(Count::SetOpen { group, .. })
                if t.g
                    .set_groups
                    .get(group as usize)
                    .is_some_and(|g| self.set_viable(t, g, &[0], Taking::Nothing, c)) =>
            {
                let f = push_frame(t, frame(c), MEMBER_SET, 0)?;
                t.stack.push((next, with_frame(c, f), past_end))
            }
            Some(Count::SetMore { group })
                if frame(c) != 0
                    && top.rec == MEMBER_SET
                    && self.another_can_follow(t, group, top.site, c) =>
            {
                t.stack.push((next, c, past_end))
            }
            Some(Count::SetSep { group, bit })
                if frame(c) != 0
                    && top.rec == MEMBER_SET
                    && self.this_can_follow(t, group, top.site, bit, c) =>
            {
                t.stack.push((next, c, past_end))
            }
            Some(
                op @ (Count::SetTail { group }
                | Count::SetWitness { group, .. }
                | Count::SetMark { group, .. }
                | Count::SetFlag { group, .. }),
            ) if frame(c) != 0 && top.rec == MEMBER_SET => {
                let taking = match op {
                    Count::SetTail { .. } => Taking::Tail,
                    Count::SetWitness { mask, .. } => Taking::Witness(mask),
                    Count::SetMark { bit, .. } => Taking::Mark(bit),
                    Count::SetFlag { bit, mask, .. } => Taking::Flag(bit, mask),
                    _ => Taking::Nothing,
                };
                if let Some(id) = self.set_take(t, group, top.site, taking, c)? {
                    let f = push_frame(t, top.parent, MEMBER_SET, id)?;
                    t.stack.push((next, with_frame(c, f), past_end))
                }
            }
            Some(Count::SetPlain { group, bit })
                if frame(c) != 0
                    && top.rec == MEMBER_SET
                    && t.g.set_groups.get(group as usize).is_some_and(|g| {
                        let set = &t.member_sets[top.site as usize];
                        !takes_are_checked(g, set)
                            || self.set_viable(t, g, set, Taking::Flag(bit, 0), c)
                    }) =>
            {
                t.stack.push((next, c, past_end))
            }
            Some(Count::SetFinish { group, required })
                if frame(c) != 0 && top.rec == MEMBER_SET && {
                    let set = &t.member_sets[top.site as usize];
                    (0..required).all(|b| has_bit(set, b))
                        && t.g.set_groups.get(group as usize).is_some_and(|g| {
                            count_of(set) >= u64::from(g.min) && missing(g, set) == 0
                        })
                } =>
            {
                t.stack.push((next, with_frame(c, top.parent), past_end))
            }
            _ => {}
        }
        Ok(())
    }

    /// Member set `group` after member set `set` takes `taking`: the new set's id, or `None`
    /// when it cannot take it (in any order, a member written already; with bounds, one the
    /// set could not be finished after; a member after which no witness can come).
    fn set_take(
        &self,
        t: &mut Table,
        group: u32,
        set: u32,
        taking: Taking,
        c: u64,
    ) -> Result<Option<u32>> {
        let Some(g) = t.g.set_groups.get(group as usize) else {
            return Ok(None);
        };
        let written = &t.member_sets[set as usize];
        if let (Taking::Mark(bit), true) = (taking, g.any_order) {
            if has_bit(written, bit) {
                return Ok(None);
            }
        }
        let counted = g.counted();
        if takes_are_checked(g, written) && !self.set_viable(t, g, written, taking, c) {
            return Ok(None);
        }
        let mut new = written.to_vec();
        if counted && matches!(taking, Taking::Mark(_) | Taking::Tail | Taking::Witness(_)) {
            let cap = if g.max == u32::MAX { g.min } else { g.max };
            let n = (count_of(written) + 1).min(u64::from(cap));
            new[0] = n | (new[0] & FLAGS);
        }
        if let Taking::Witness(mask) | Taking::Flag(_, mask) = taking {
            new[0] |= u64::from(mask) << FLAG_SHIFT;
        }
        if let (Taking::Mark(bit), true) = (taking, g.any_order) {
            let word = 1 + bit as usize / 64;
            if new.len() <= word {
                new.resize(word + 1, 0);
            }
            new[word] |= 1 << (bit % 64);
        }
        if new.as_slice() == written.as_ref() {
            return Ok(Some(set));
        }
        intern_member_set(t, new).map(Some)
    }

    /// Whether member set `g`, having written `written`, can still be finished once it takes
    /// `taking`: every required member still to come can be written and finished at the
    /// current depth (registers `c`); a witness of each kind still missing can come; and the
    /// bounds can be met — at most `max` with the required members and the fewest further
    /// members the missing witnesses need, at least `min` with every member still possible (a
    /// tail or witness member: any number). Each member returns to the depth it started at;
    /// from the fewest members that finish the set, any further possible member can be added
    /// one at a time without undoing a witness, so the counts that can be reached are every
    /// count between those two, and this is exact.
    fn set_viable(&self, t: &Table, g: &SetGroup, written: &[u64], taking: Taking, c: u64) -> bool {
        let n = count_of(written)
            + u64::from(matches!(
                taking,
                Taking::Mark(_) | Taking::Tail | Taking::Witness(_)
            ));
        let (mut must, mut can) = (0u64, 0u64);
        let remaining = |bit: u32| remaining(g, written, taking, bit);
        let counted = g.counted();
        for &(bit, m, required) in &g.marks {
            if !remaining(bit) || !(required || counted) {
                continue;
            }
            let ok = self.marker_can_finish(t, m, c);
            if required {
                if !ok {
                    return false;
                }
                must += 1;
            }
            can += u64::from(ok);
        }
        let mut extra = 0;
        let mut need = missing(g, written);
        if need != 0 {
            let ahead = match taking {
                Taking::Mark(b) => Ahead::From(b),
                Taking::Flag(b, mask) => {
                    need &= !mask;
                    Ahead::After(b)
                }
                Taking::Witness(mask) => {
                    need &= !mask;
                    Ahead::Tail
                }
                Taking::Tail => Ahead::Tail,
                Taking::Nothing => Ahead::All,
            };
            match self.witness_cost(t, g, written, need, ahead, c) {
                Some(k) => extra = k,
                None => return false,
            }
        }
        if !counted {
            return true;
        }
        let unbounded = g
            .tail
            .into_iter()
            .chain(g.witness_tails.iter().map(|w| w.1));
        if unbounded
            .into_iter()
            .any(|m| self.marker_can_finish(t, m, c))
        {
            can = u64::MAX / 2;
        }
        n + must + extra <= u64::from(g.max) && n + can >= u64::from(g.min)
    }

    /// The fewest members, beyond those that come anyway (required items still to come, and
    /// the item being taken now), with which set `g` (having written `written`) can still
    /// write a witness of every kind in `need`: witness members (any number of them, one
    /// member each) and at most one witness branch of each item still to come (`ahead`; an
    /// optional one counts one member). `None` when no choice covers `need`. Found over the
    /// subsets of `need` (at most 16), item by item.
    fn witness_cost(
        &self,
        t: &Table,
        g: &SetGroup,
        written: &[u64],
        need: u32,
        ahead: Ahead,
        c: u64,
    ) -> Option<u64> {
        if need == 0 {
            return Some(0);
        }
        let tails: Vec<u32> = g
            .witness_tails
            .iter()
            .filter(|&&(mask, m)| mask & need != 0 && self.marker_can_finish(t, m, c))
            .map(|&(mask, _)| mask)
            .collect();
        // the items' witness branches that can still come, by item (`flags` is by bit)
        let mut items: Vec<(u64, Vec<u32>, u32)> = Vec::new();
        for &(bit, mask, m) in &g.flags {
            let open = match (ahead, g.any_order) {
                (Ahead::Tail, false) => false,
                (Ahead::All, _) => true,
                (Ahead::From(b), false) => bit >= b,
                (Ahead::After(b), false) => bit > b,
                (Ahead::From(b), true) => bit == b || !has_bit(written, bit),
                (Ahead::After(_) | Ahead::Tail, true) => !has_bit(written, bit),
            };
            if !open || mask & need == 0 || !self.marker_can_finish(t, m, c) {
                continue;
            }
            // an item that comes anyway (required, or being taken now) costs nothing more
            let free = matches!(ahead, Ahead::From(b) if b == bit)
                || g.marks
                    .binary_search_by_key(&bit, |x| x.0)
                    .is_ok_and(|k| g.marks[k].2);
            match items.last_mut() {
                Some(last) if last.2 == bit => last.1.push(mask),
                _ => items.push((u64::from(!free), vec![mask], bit)),
            }
        }
        crate::automata::expr::witness_cover_cost(
            items.into_iter().map(|(cost, masks, _)| (cost, masks)),
            &tails,
            need,
        )
    }

    /// Whether some member of set `group` (in any order) not in member set `set`, or a tail or
    /// witness member, can follow a separator now, the set still finishable after it.
    fn another_can_follow(&self, t: &Table, group: u32, set: u32, c: u64) -> bool {
        let Some(g) = t.g.set_groups.get(group as usize) else {
            return false;
        };
        let written = &t.member_sets[set as usize];
        let checks = takes_are_checked(g, written);
        let ok = |taking| !checks || self.set_viable(t, g, written, taking, c);
        g.tail
            .is_some_and(|m| self.marker_can_finish(t, m, c) && ok(Taking::Tail))
            || g.witness_tails
                .iter()
                .any(|&(mask, m)| self.marker_can_finish(t, m, c) && ok(Taking::Witness(mask)))
            || g.marks.iter().any(|&(bit, m, _)| {
                !has_bit(written, bit) && self.marker_can_finish(t, m, c) && ok(Taking::Mark(bit))
            })
    }

    /// Whether member `bit` of set `group` in schema order (`u32::MAX`: a tail member,
    /// `u32::MAX - 1`: a witness member) can follow its separator now, the set still
    /// finishable after it.
    fn this_can_follow(&self, t: &Table, group: u32, set: u32, bit: u32, c: u64) -> bool {
        let Some(g) = t.g.set_groups.get(group as usize) else {
            return false;
        };
        let written = &t.member_sets[set as usize];
        let (m, taking) = if bit == u32::MAX {
            (g.tail, Taking::Tail)
        } else if bit >= u32::MAX - 64 {
            match g.witness_tails.get((u32::MAX - 1 - bit) as usize) {
                Some(&(mask, m)) => (Some(m), Taking::Witness(mask)),
                None => (None, Taking::Tail),
            }
        } else {
            let at = g.marks.binary_search_by_key(&bit, |x| x.0).ok();
            (at.map(|i| g.marks[i].1), Taking::Mark(bit))
        };
        let checks = takes_are_checked(g, written);
        m.is_some_and(|m| {
            self.marker_can_finish(t, m, c)
                && (!checks || self.set_viable(t, g, written, taking, c))
        })
    }

    /// Whether what follows marker state `m` can be finished at the current depth.
    fn marker_can_finish(&self, t: &Table, m: u32, c: u64) -> bool {
        t.g.can_match[m as usize]
            && self.depths.as_ref().is_none_or(|d| {
                let depth = i64::from(t.frames[frame(c) as usize].depth);
                self.within(d, m, c, depth)
            })
    }

    /// Whether NFA state `s`, with registers `c`, can still finish its body at its stack depth
    /// (always, without a stack; see [`crate::automata::depth`]).
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
        // which treats a body's end as finished: see `super::analysis::compute_can_match`)
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
                "; it holds a recursion (a grammar's recursive rules, a recursive $ref, or a \
                 JSON value of any shape nesting up to max_nesting_depth levels), whose states \
                 multiply with each level: lower max_stack_depth or max_nesting_depth, compile \
                 recursive $refs with recursion=\"unroll\", or raise max_states"
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
        t.hold(2 * ENTRY_BYTES + 8 * key.len() + 4 * self.stride)?;
        let id = t.sets.len() as u32;
        let key: Box<[u32]> = key.into_boxed_slice();
        t.ids.insert(key.clone(), id);
        t.sets.push(key);
        t.accepting.push(accepting);
        t.trans.extend(std::iter::repeat_n(UNKNOWN, self.stride));
        Ok(id)
    }

    pub(super) fn compute_next(&self, t: &mut Table, state: u32, class: usize) -> Result<u32> {
        if t.g.root.is_none() {
            return Err(complete_without_nfa());
        }
        if let Some(lx) = &self.lexer {
            if let Some(x) = pair_of(&t.sets[state as usize]) {
                let lx = lx.clone();
                return self.lexed_next(&lx, t, state, x, class);
            }
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

/// The first word of a lexed automaton's pair state (no NFA state has this id).
const PAIR_MARK: u32 = u32::MAX - 1;
/// A pair state's flags: a lexeme was read already (skipped or not).
const STARTED: u32 = 1;
/// A pair state's flags: the last lexeme read was skipped.
const SKIPPED_LAST: u32 = 2;

/// A text read both as a skipped lexeme and as one the parser reads, where what may follow
/// depends on which: not supported.
fn skip_and_lexeme() -> Error {
    Error::InvalidArgument(
        "a skipped lexeme that can end where another lexeme ends is not supported in a grammar \
         with `%json` values or `ignore_once` (what may follow would depend on the reading)"
            .into(),
    )
}

/// A lexed automaton's pair state, as its key holds it: the parser state, the lexer state, the
/// flags, and per external lexeme (see [`Lexer::externals`]) the state of its automaton in the
/// lexeme being read ([`DEAD`]: not reading it; all [`DEAD`] at the lexeme's start).
struct Pair {
    p: u32,
    q: u32,
    f: u32,
    js: Vec<u32>,
}

/// The pair state of a key, or `None` for a state of the parser (or of an external lexeme).
fn pair_of(key: &[u32]) -> Option<Pair> {
    match key {
        [PAIR_MARK, p, q, f, js @ ..] => Some(Pair {
            p: *p,
            q: *q,
            f: *f,
            js: js.to_vec(),
        }),
        _ => None,
    }
}

impl LazyDfa {
    /// The state after class `c` from a state that is not a pair (the parser's, an external
    /// lexeme's), computed on first use.
    fn plain_step(&self, t: &mut Table, s: u32, c: usize) -> Result<u32> {
        let known = t.trans[s as usize * self.stride + c];
        if known != UNKNOWN {
            Ok(known)
        } else {
            self.compute_next(t, s, c)
        }
    }

    /// The parser's state after symbol `sym` from parser state `p` (its one or two bytes,
    /// each transition cached in the table).
    fn parser_step(&self, lx: &Lexer, t: &mut Table, p: u32, sym: Sym) -> Result<u32> {
        let (bytes, n) = lx.spell(sym);
        let mut p = p;
        for &b in &bytes[..n] {
            p = self.plain_step(t, p, b as usize)?;
            if p == DEAD {
                break;
            }
        }
        Ok(p)
    }

    /// The start state of external lexeme `k`'s automaton: the parser's start state after
    /// the lexeme's entry symbol (see [`Lexer::externals`]).
    fn external_start(&self, lx: &Lexer, t: &mut Table, k: usize) -> Result<u32> {
        let p0 = match pair_of(&t.sets[self.start as usize]) {
            Some(start) => start.p,
            None => self.start,
        };
        self.parser_step(lx, t, p0, lx.entry(k))
    }

    /// Whether parser state `p` allows some lexeme of `words` next (through its probes).
    fn parser_allows(&self, lx: &Lexer, t: &mut Table, p: u32, words: &[u64]) -> Result<bool> {
        for i in crate::automata::lexer::members(words) {
            if self.parser_step(lx, t, p, lx.probe(i))? != DEAD {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether a skipped lexeme may be read at (`p`, flags `f`): the parser allows some lexeme
    /// next, and the policy allows a skip here.
    fn skip_allowed(&self, lx: &Lexer, t: &mut Table, p: u32, f: u32) -> Result<bool> {
        let policy = lx.policy();
        if (f & STARTED == 0 && !policy.at_start) || (policy.once && f & SKIPPED_LAST != 0) {
            return Ok(false);
        }
        self.parser_allows(lx, t, p, lx.main_class())
    }

    /// Whether some lexeme of `viable` may be read next at (`p`, `f`).
    fn allows_any(
        &self,
        lx: &Lexer,
        t: &mut Table,
        p: u32,
        f: u32,
        viable: &[u64],
    ) -> Result<bool> {
        // right after a skipped lexeme, only a lexeme of the main class may come (never a
        // `%json` value), as llguidance reads it
        let narrowed: Vec<u64>;
        let viable = if f & SKIPPED_LAST != 0 && lx.has_own_class() {
            narrowed = viable
                .iter()
                .zip(lx.main_class())
                .map(|(a, b)| a & b)
                .collect();
            &narrowed[..]
        } else {
            viable
        };
        if lx.any_skipped(viable) && self.skip_allowed(lx, t, p, f)? {
            return Ok(true);
        }
        self.parser_allows(lx, t, p, viable)
    }

    /// The parser state and flags after the lexemes of end set `sym` at (`p`, `f`): the parser
    /// reads them, and, where one is skipped and a skip is allowed, the parser also stays as
    /// it is (the union of both readings).
    fn read_lexeme(
        &self,
        lx: &Lexer,
        t: &mut Table,
        p: u32,
        f: u32,
        sym: Sym,
    ) -> Result<(u32, u32)> {
        let read = self.parser_step(lx, t, p, sym)?;
        let skip = lx.skips(sym) && self.skip_allowed(lx, t, p, f)?;
        Ok(match (read != DEAD, skip) {
            (_, false) => (read, STARTED),
            (false, true) => (p, STARTED | SKIPPED_LAST),
            // (never with "once": the lexer refuses end sets mixing both then)
            (true, true) => {
                if lx.has_own_class() {
                    // whether a `%json` value may come next would depend on the reading
                    return Err(skip_and_lexeme());
                }
                (self.union_states(t, read, p)?, STARTED)
            }
        })
    }

    /// The parser state and flags after the lexemes ending at pair state `x`: those of the
    /// lexer's state ([`LazyDfa::read_lexeme`]) and the external ones whose automaton accepts,
    /// each read by the parser, the readings united; `None` when none ends there or no
    /// reading is live.
    fn read_ends(&self, lx: &Lexer, t: &mut Table, x: &Pair) -> Result<Option<(u32, u32)>> {
        let mut out: Option<(u32, u32)> = None;
        let mut add = |this: &Self, t: &mut Table, (p2, f2): (u32, u32)| -> Result<()> {
            if p2 == DEAD {
                return Ok(());
            }
            out = Some(match out {
                None => (p2, f2),
                Some((p1, f1)) => {
                    let f = if f1 == f2 {
                        f1
                    } else if lx.policy().once || lx.has_own_class() {
                        // whether the last lexeme was skipped (what may follow) would depend on
                        // the reading
                        return Err(skip_and_lexeme());
                    } else {
                        STARTED
                    };
                    (this.union_states(t, p1, p2)?, f)
                }
            });
            Ok(())
        };
        if let Some(sym) = lx.ends(x.q) {
            let r = self.read_lexeme(lx, t, x.p, x.f, sym)?;
            add(self, t, r)?;
        }
        for (k, &j) in x.js.iter().enumerate() {
            if j != DEAD && t.accepting[j as usize] {
                let p2 = self.parser_step(lx, t, x.p, lx.external_end(k))?;
                add(self, t, (p2, STARTED))?;
            }
        }
        Ok(out)
    }

    /// The parser state holding the entries of parser states `a` and `b` (each closed, so
    /// the union is closed too).
    fn union_states(&self, t: &mut Table, a: u32, b: u32) -> Result<u32> {
        if a == b || b == DEAD {
            return Ok(a);
        }
        if a == DEAD {
            return Ok(b);
        }
        let width = 1 + 2 * self.registers as usize;
        let mut entries: Vec<&[u32]> = Vec::new();
        let mut accepting = false;
        let (ka, kb) = (t.sets[a as usize].clone(), t.sets[b as usize].clone());
        for e in ka.chunks_exact(width).chain(kb.chunks_exact(width)) {
            if e[0] == ACCEPT_MARK {
                accepting = true;
            } else {
                entries.push(e);
            }
        }
        entries.sort_unstable();
        entries.dedup();
        let mut key: Vec<u32> = entries.concat();
        if accepting {
            key.push(ACCEPT_MARK);
            if self.registers {
                key.extend([0, 0]);
            }
        }
        self.intern(t, key, accepting)
    }

    /// The pair state (`p`, lexer state `q`, flags `f`, nothing of an external lexeme read)
    /// (see [`LazyDfa::intern_pair_with`]).
    pub(super) fn intern_pair(&self, t: &mut Table, p: u32, q: u32, f: u32) -> Result<u32> {
        let n = self.lexer.as_ref().map_or(0, |lx| lx.externals().len());
        self.intern_pair_with(
            t,
            Pair {
                p,
                q,
                f,
                js: vec![DEAD; n],
            },
        )
    }

    /// The pair state `x`: accepting when nothing of a lexeme is read and the parser accepts,
    /// or when the lexemes ending there take the parser to an accepting state.
    fn intern_pair_with(&self, t: &mut Table, x: Pair) -> Result<u32> {
        let mut key = Vec::with_capacity(4 + x.js.len());
        key.extend([PAIR_MARK, x.p, x.q, x.f]);
        key.extend_from_slice(&x.js);
        if let Some(&id) = t.ids.get(&key[..]) {
            return Ok(id);
        }
        let lx = self.lexer.clone().expect("a lexed automaton");
        let accepting = if x.q == crate::automata::lexer::LEX_START {
            t.accepting[x.p as usize]
        } else {
            match self.read_ends(&lx, t, &x)? {
                Some((p2, _)) => t.accepting[p2 as usize],
                None => false,
            }
        };
        self.intern(t, key, accepting)
    }

    /// The pair state for `x`, just reached: where a lazy lexeme the parser allows ends at its
    /// lexer state, it ends right there (only the lazy ones are read) and the next lexeme
    /// starts; else `x`.
    fn enter(&self, lx: &Lexer, t: &mut Table, x: Pair) -> Result<u32> {
        if let Some(sym) = lx.lazy_ends(x.q) {
            let (p2, f2) = self.read_lexeme(lx, t, x.p, x.f, sym)?;
            if p2 != DEAD {
                return self.intern_pair(t, p2, crate::automata::lexer::LEX_START, f2);
            }
        }
        self.intern_pair_with(t, x)
    }

    /// The lexeme being read at `x` continued by byte `b` (begun, when `x` is at a lexeme's
    /// start): the lexer's state, if some lexeme the parser allows can still end from it, and
    /// each external lexeme's automaton still live; `None` when none can go on.
    fn go_on(&self, lx: &Lexer, t: &mut Table, x: &Pair, b: u8) -> Result<Option<Pair>> {
        use crate::automata::lexer::{LEX_DEAD, LEX_START};
        let mut q2 = lx.next(x.q, b);
        if q2 != LEX_DEAD && !self.allows_any(lx, t, x.p, x.f, lx.viable(q2))? {
            q2 = LEX_DEAD;
        }
        let mut js = x.js.clone();
        let mut live = false;
        for (k, &i) in lx.externals().iter().enumerate() {
            let from = if x.q == LEX_START {
                // (never right after a skipped lexeme)
                if x.f & SKIPPED_LAST != 0 || self.parser_step(lx, t, x.p, lx.probe(i))? == DEAD {
                    DEAD
                } else {
                    self.external_start(lx, t, k)?
                }
            } else {
                js[k]
            };
            js[k] = if from == DEAD {
                DEAD
            } else {
                self.plain_step(t, from, b as usize)?
            };
            live |= js[k] != DEAD;
        }
        Ok((q2 != LEX_DEAD || live).then_some(Pair {
            p: x.p,
            q: q2,
            f: x.f,
            js,
        }))
    }

    /// The transition of pair state `state` = `x` on byte `class` (classes are bytes in a
    /// lexed automaton): the lexeme goes on when some lexeme allowed at its start can still
    /// end after the byte; else the lexemes ending at `x` are read and the byte starts the
    /// next lexeme.
    fn lexed_next(
        &self,
        lx: &Lexer,
        t: &mut Table,
        state: u32,
        x: Pair,
        class: usize,
    ) -> Result<u32> {
        use crate::automata::lexer::LEX_START;
        let b = self.reps[class];
        let next = if let Some(y) = self.go_on(lx, t, &x, b)? {
            self.enter(lx, t, y)?
        } else if let Some((p2, f2)) = self.read_ends(lx, t, &x)? {
            let start = Pair {
                p: p2,
                q: LEX_START,
                f: f2,
                js: vec![DEAD; x.js.len()],
            };
            match self.go_on(lx, t, &start, b)? {
                Some(y) => self.enter(lx, t, y)?,
                None => DEAD,
            }
        } else {
            DEAD
        };
        // without external lexemes, the transition depends on the byte only through the
        // lexer's class of it: one computation serves the whole class (an external lexeme's
        // automaton tells bytes apart on its own)
        let row = state as usize * self.stride;
        if lx.externals().is_empty() {
            for other in lx.same_as(b) {
                t.trans[row + other as usize] = next;
            }
        }
        t.trans[row + class] = next;
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

/// Whether NFA state `s`, with registers `c`, can still leave its sized counted region within
/// the region's length bounds (always, outside such regions).
#[inline]
fn length_fits(g: &Graph, s: u32, c: u64) -> bool {
    match (g.len_set(s), g.bounds.get(s as usize)) {
        (Some(set), Some(Some((min, max)))) => set.meets(count(c), *min, *max),
        _ => true,
    }
}

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
/// Most (NFA state, registers) entries one DFA state may hold, most steps one closure may take,
/// and most distinct stack frames one automaton may record: an ambiguous recursion (a grammar
/// whose parses of one prefix multiply with its length) would otherwise grow them without end
/// while decoding, where no compile deadline is in force.
const MAX_SUBSET: usize = 250_000;
const MAX_CLOSURE_STEPS: usize = 4_000_000;
const MAX_FRAME_RECORDS: usize = 2_000_000;

fn too_many_stacks() -> Error {
    Error::Budget(
        "the automaton's recursion stacks multiply past their limit here (an ambiguous \
         recursion, e.g. a grammar in which one prefix has many parses nesting differently); \
         make the grammar less ambiguous or lower max_stack_depth"
            .into(),
    )
}

fn push_frame(t: &mut Table, parent: u32, rec: u32, site: u32) -> Result<u32> {
    if let Some(&f) = t.frame_ids.get(&(parent, rec, site)) {
        return Ok(f);
    }
    let p = t.frames[parent as usize];
    let run = if rec == MEMBER_SET {
        0
    } else if parent != 0 && p.rec == rec {
        p.run + 1
    } else {
        1
    };
    let depth = if rec == MEMBER_SET {
        p.depth
    } else {
        p.depth + 1
    };
    if t.frames.len() >= MAX_FRAME_RECORDS {
        return Err(too_many_stacks());
    }
    t.hold(2 * ENTRY_BYTES)?;
    let f = u32::try_from(t.frames.len()).map_err(|_| too_many_stacks())?;
    t.frames.push(Frame {
        parent,
        rec,
        site,
        depth,
        run,
    });
    t.frame_ids.insert((parent, rec, site), f);
    Ok(f)
}

/// What a member set takes (see `LazyDfa::set_viable`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Taking {
    Nothing,
    Mark(u32),
    Tail,
    /// A witness member of the kinds in the mask.
    Witness(u32),
    /// Item `bit`'s witness branch of the kinds in the mask (the item was taken at its mark).
    Flag(u32, u32),
}

/// Which items' witness branches are still ahead (see `LazyDfa::witness_ahead`): all of them,
/// from item `b` on (it being taken now), after item `b`, or none (among the tail members).
#[derive(Clone, Copy)]
enum Ahead {
    All,
    From(u32),
    After(u32),
    Tail,
}

/// Whether item `bit` is still to come in set `g` (having written `written`) once it takes
/// `taking`.
fn remaining(g: &SetGroup, written: &[u64], taking: Taking, bit: u32) -> bool {
    match (g.any_order, taking) {
        (true, Taking::Mark(b)) => bit != b && !has_bit(written, bit),
        (true, _) => !has_bit(written, bit),
        (false, Taking::Mark(b) | Taking::Flag(b, _)) => bit > b,
        (false, Taking::Nothing) => true,
        (false, _) => false,
    }
}

/// Word 0 of a member set: the number of members written, and from this bit on the witness
/// kinds written (at most 8).
const FLAG_SHIFT: u32 = 56;
const FLAGS: u64 = 0xff << FLAG_SHIFT;

fn count_of(set: &[u64]) -> u64 {
    set[0] & !FLAGS
}

/// Whether a member set `g`, having written `set`, must check that it can still be finished
/// after taking a member: with bounds, or with witness kinds missing. (Without either, taking
/// a member changes nothing its opening did not check: each required member still to come
/// could be finished then, at the same depth.)
fn takes_are_checked(g: &SetGroup, set: &[u64]) -> bool {
    g.counted() || missing(g, set) != 0
}

/// The witness kinds set `g` still needs, having written `set`.
fn missing(g: &SetGroup, set: &[u64]) -> u32 {
    g.witness & !((set[0] >> FLAG_SHIFT) as u32)
}

/// Whether bit `b` of a member set is set.
fn has_bit(set: &[u64], b: u32) -> bool {
    set.get(1 + b as usize / 64)
        .is_some_and(|w| w >> (b % 64) & 1 == 1)
}

/// The id of member set `set`, interned.
fn intern_member_set(t: &mut Table, set: Vec<u64>) -> Result<u32> {
    if let Some(&id) = t.member_set_ids.get(set.as_slice()) {
        return Ok(id);
    }
    if t.member_sets.len() >= MAX_FRAME_RECORDS {
        return Err(too_many_stacks());
    }
    t.hold(2 * ENTRY_BYTES + 16 * set.len())?;
    let id = t.member_sets.len() as u32;
    let set: Box<[u64]> = set.into_boxed_slice();
    t.member_set_ids.insert(set.clone(), id);
    t.member_sets.push(set);
    Ok(id)
}

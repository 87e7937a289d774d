//! Outputs that fit a token budget: which allowed tokens still leave room to finish.
//!
//! With `n` tokens left (the one chosen now included), a token may be taken only if an
//! accepting state is reachable from the state it leads to within `n - 1` more tokens. Let
//! `d(s)` be the fewest tokens from `s` to an accepting state over the grammar's own token
//! transitions. A token is kept when `d(s) <= n - 1` for the state `s` it leads to, decided
//! from bounds on `d` where they settle it and by search where they do not:
//!
//! * an upper bound from one completion spelled in tokens: the shortest byte string from `s`
//!   to acceptance that a narrow breadth-first search over the automaton finds (at most
//!   [`SPELL_BEAM`] states per length), cut into the fewest regular tokens that spell it. Any
//!   spelling of a completion is a token path the grammar allows, so `d(s)` is at most its
//!   length. This settles almost every state when the budget is not nearly spent, without
//!   looking at a single mask;
//! * a lower bound: a search that found no accepting state within `k` tokens proves
//!   `d(s) > k`;
//! * otherwise a breadth-first search over token transitions (a state's successors are the
//!   distinct states its allowed tokens lead to, computed once per state from its mask), no
//!   deeper than the budget, which stops at the first state whose known bounds finish in time
//!   and does not expand a state whose lower bound cannot.
//!
//! Bounds, distances and each state's successors are cached per grammar, so a state far from
//! the budget costs one lookup.
//!
//! When no token fits (the budget is already too small for any ending), the mask is left as
//! the grammar alone gives it: the output is then cut by the budget, as it would be without
//! this option. A search that would visit more than [`MAX_SEARCH_STATES`] states, or walk more
//! than [`MAX_SEARCH_TOKENS`] tokens, gives up and keeps the token.

use std::sync::{Arc, Mutex};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::atoms::ESCAPE;
use crate::automata::dfa::{LazyDfa, DEAD};
use crate::error::Result;
use crate::index::TokenIndex;
use crate::trie::NO_TOKEN;
use crate::vocab::Vocabulary;

/// No accepting state is reachable.
pub const UNREACHABLE: u32 = u32::MAX;

/// States one search may visit (each costs a pass over its allowed tokens); past it the
/// search gives up and the token is kept.
pub const MAX_SEARCH_STATES: usize = 4096;

/// Tokens one search may walk through the automaton (its states' allowed tokens, together);
/// past it the search gives up and the token is kept.
pub const MAX_SEARCH_TOKENS: usize = 1 << 21;

/// States kept per byte length by the search for a completion to spell.
pub const SPELL_BEAM: usize = 16;

/// The longest completion (in bytes) spelled for an upper bound.
pub const SPELL_MAX_BYTES: usize = 4096;

#[derive(Default)]
struct Cache {
    /// d(s) for states whose distance is known exactly.
    dist: FxHashMap<u32, u32>,
    /// An upper bound on d(s) from a spelled completion (UNREACHABLE: none was found).
    upper: FxHashMap<u32, u32>,
    /// A proven lower bound on d(s).
    lower: FxHashMap<u32, u32>,
    /// The distinct states the allowed (non-EOS) tokens of a state lead to.
    ends: FxHashMap<u32, Arc<[u32]>>,
    /// A budget (tokens after the current one) within which every allowed token of a state
    /// is known to leave room to finish.
    room_ok: FxHashMap<u32, u32>,
}

/// The grammar's automaton, vocabulary and masks, as the distance search reads them.
pub struct Parts<'a> {
    /// The vocabulary.
    pub vocab: &'a Vocabulary,
    /// The automaton.
    pub dfa: &'a LazyDfa,
    /// The token masks.
    pub index: &'a TokenIndex,
}

/// Per-grammar distances to acceptance, computed on first use.
#[derive(Default)]
pub struct Fit {
    cache: Mutex<Cache>,
}

/// (token, the state it leads to) for every allowed non-EOS token of `row` at `state`.
fn token_ends(p: &Parts<'_>, state: u32, row: &[u32]) -> Result<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    let mut view = p.dfa.view();
    for (w, &word) in row.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            let t = (w as u32) * 32 + bits.trailing_zeros();
            bits &= bits - 1;
            if p.vocab.is_eos(t) {
                continue;
            }
            let bytes = match p.index.atoms() {
                Some(a) => a.bytes(p.vocab, t),
                None => p.vocab.token_bytes(t),
            };
            let Some(bytes) = bytes else {
                continue;
            };
            let s = view.walk(state, bytes)?;
            if s != DEAD {
                out.push((t, s));
            }
        }
    }
    Ok(out)
}

/// What a bounded search found out about `d(s) <= limit`.
enum Found {
    /// Yes (an accepting state, or a state whose bound finishes in time, within `limit`).
    Within,
    /// No: `d(s) > limit`.
    Beyond,
    /// The search hit its limits.
    GaveUp,
}

impl Fit {
    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `d(state)`: the fewest tokens from `state` to an accepting state ([`UNREACHABLE`] when
    /// there is none; 0 when the search gave up).
    pub fn distance(&self, p: &Parts<'_>, state: u32) -> Result<u32> {
        let mut cache = self.lock();
        distance(p, &mut cache, state)
    }

    /// Clear from `row` (the grammar's mask at `state`) every token after which the output
    /// cannot be finished within `tokens_left - 1` further tokens. EOS bits are left as they
    /// are. A row left with no bit set gets its original bits back (nothing fits).
    pub fn restrict(
        &self,
        p: &Parts<'_>,
        state: u32,
        tokens_left: u32,
        row: &mut [u32],
    ) -> Result<()> {
        if tokens_left == 0 {
            return Ok(());
        }
        let room = tokens_left - 1;
        let mut cache = self.lock();
        if cache.room_ok.get(&state).is_some_and(|&r| r <= room) {
            return Ok(());
        }
        let ends = token_ends(p, state, row)?;
        // each distinct end state decided once
        let mut verdict: FxHashMap<u32, bool> = FxHashMap::default();
        let mut too_far: Vec<u32> = Vec::new();
        for &(t, s) in &ends {
            let fits = match verdict.get(&s) {
                Some(&f) => f,
                None => {
                    let f = fits(p, &mut cache, s, room)?;
                    verdict.insert(s, f);
                    f
                }
            };
            if !fits {
                too_far.push(t);
            }
        }
        if too_far.is_empty() {
            let r = cache.room_ok.entry(state).or_insert(room);
            *r = (*r).min(room);
            return Ok(());
        }
        drop(cache);
        let allowed: u32 = row.iter().map(|w| w.count_ones()).sum();
        if too_far.len() as u32 == allowed {
            return Ok(()); // nothing fits: the grammar's own mask stays
        }
        for t in too_far {
            row[(t >> 5) as usize] &= !(1 << (t & 31));
        }
        Ok(())
    }
}

/// Whether `d(s) <= room` (true also when the search gave up: the token is kept).
fn fits(p: &Parts<'_>, cache: &mut Cache, s: u32, room: u32) -> Result<bool> {
    if let Some(&d) = cache.dist.get(&s) {
        return Ok(d <= room);
    }
    if cache.lower.get(&s).is_some_and(|&lo| lo > room) {
        return Ok(false);
    }
    let up = match cache.upper.get(&s) {
        Some(&u) => u,
        None => {
            let u = spelled_bound(p, s)?;
            cache.upper.insert(s, u);
            u
        }
    };
    if up <= room {
        return Ok(true);
    }
    Ok(match search_within(p, cache, s, room)? {
        Found::Within | Found::GaveUp => true,
        Found::Beyond => false,
    })
}

/// Breadth-first search over token transitions from `s`, at most `limit` tokens deep, for a
/// state that is accepting or whose known bounds finish within what is left. States whose
/// lower bound cannot finish in time are not expanded. Records `d(s) > limit` when no such
/// state exists (exactly [`UNREACHABLE`] when no state was left out and none accepts).
fn search_within(p: &Parts<'_>, cache: &mut Cache, s: u32, limit: u32) -> Result<Found> {
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    seen.insert(s);
    let mut frontier = vec![s];
    let mut depth = 0u32;
    let mut walked = 0usize;
    let mut pruned = false;
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for &q in &frontier {
            if p.dfa.is_accepting(q) {
                return Ok(Found::Within);
            }
            let left = limit - depth;
            if let Some(&dq) = cache.dist.get(&q) {
                if dq <= left {
                    return Ok(Found::Within);
                }
                pruned |= dq != UNREACHABLE;
                continue;
            }
            if cache.upper.get(&q).is_some_and(|&u| u <= left) {
                return Ok(Found::Within);
            }
            if depth == limit || cache.lower.get(&q).is_some_and(|&lo| lo > left) {
                pruned = true;
                continue;
            }
            let ends = ends_of(p, cache, q, &mut walked)?;
            for &r in ends.iter() {
                if seen.insert(r) {
                    next.push(r);
                }
            }
            if seen.len() > MAX_SEARCH_STATES || walked > MAX_SEARCH_TOKENS {
                return Ok(Found::GaveUp);
            }
        }
        frontier = next;
        depth += 1;
    }
    if pruned {
        let lo = cache.lower.entry(s).or_insert(0);
        *lo = (*lo).max(limit.saturating_add(1));
    } else {
        cache.dist.insert(s, UNREACHABLE);
    }
    Ok(Found::Beyond)
}

/// The distinct successor states of `q` over its allowed tokens (cached); `walked` counts
/// the tokens walked to find them.
fn ends_of(p: &Parts<'_>, cache: &mut Cache, q: u32, walked: &mut usize) -> Result<Arc<[u32]>> {
    if let Some(e) = cache.ends.get(&q) {
        return Ok(e.clone());
    }
    // one walk of the trie, when every successor is a regular token's: no atoms, and no EOS
    // that is regular text (an EOS ends the output, it leads nowhere)
    let eos_is_text = p
        .vocab
        .eos_ids()
        .iter()
        .any(|&e| p.vocab.token_bytes(e).is_some());
    if p.index.atoms().is_none() && !eos_is_text {
        let (states, allowed) = crate::index::token_successors(p.vocab, p.dfa, q)?;
        *walked += allowed;
        let e: Arc<[u32]> = states.into();
        cache.ends.insert(q, e.clone());
        return Ok(e);
    }
    let mask = p.index.mask(p.vocab, p.dfa, q)?;
    *walked += mask.iter().map(|w| w.count_ones() as usize).sum::<usize>();
    let mut states: Vec<u32> = token_ends(p, q, &mask)?
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    states.sort_unstable();
    states.dedup();
    let e: Arc<[u32]> = states.into();
    cache.ends.insert(q, e.clone());
    Ok(e)
}

/// An upper bound on `d(s)`: a short completion found by a breadth-first search over bytes
/// that keeps [`SPELL_BEAM`] states per length, spelled in the fewest regular tokens
/// ([`UNREACHABLE`] when none is found or none spells it).
fn spelled_bound(p: &Parts<'_>, s: u32) -> Result<u32> {
    if p.dfa.is_accepting(s) {
        return Ok(0);
    }
    let Some(text) = short_completion(p.dfa, s)? else {
        return Ok(UNREACHABLE);
    };
    Ok(fewest_tokens(p.vocab, &text, p.index.atoms().is_some()))
}

/// The order in which the search for a completion to spell tries bytes: ASCII punctuation
/// first (what closes a string, an object or a tag, and what opens a literal), then digits,
/// letters, whitespace, the other control bytes and the bytes above ASCII, so that the states
/// it keeps are those a structure moves on through, not the many of a text's body.
static SPELL_ORDER: [u8; 256] = {
    let mut order = [0u8; 256];
    let mut n = 0;
    let mut pass = 0;
    while pass < 6 {
        let mut b = 0usize;
        while b < 256 {
            let c = b as u8;
            let class = if c.is_ascii_punctuation() {
                0
            } else if c.is_ascii_digit() {
                1
            } else if c.is_ascii_alphabetic() {
                2
            } else if c == b' ' || c == b'\n' || c == b'\t' || c == b'\r' {
                3
            } else if c < 0x80 {
                4
            } else {
                5
            };
            if class == pass {
                order[n] = c;
                n += 1;
            }
            b += 1;
        }
        pass += 1;
    }
    order
};

/// A byte string leading from `s` to an accepting state: the first found by a breadth-first
/// search over bytes that keeps at most [`SPELL_BEAM`] new states of each length (None within
/// [`SPELL_MAX_BYTES`]). The states kept are taken fairly from the states before them (the
/// first new successor of each, then the second of each, ...), each one's successors in
/// [`SPELL_ORDER`]; a state with a live ASCII byte is not followed over its other bytes.
fn short_completion(dfa: &LazyDfa, s: u32) -> Result<Option<Vec<u8>>> {
    // (state, parent index, byte) per kept state
    let mut nodes: Vec<(u32, u32, u8)> = vec![(s, u32::MAX, 0)];
    let mut score: Vec<u32> = vec![0];
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    seen.insert(s);
    let mut level: Vec<u32> = vec![0];
    let text_to = |nodes: &[(u32, u32, u8)], mut k: u32| {
        let mut text = Vec::new();
        while nodes[k as usize].1 != u32::MAX {
            text.push(nodes[k as usize].2);
            k = nodes[k as usize].1;
        }
        text.reverse();
        text
    };
    let mut view = dfa.view();
    for _ in 0..SPELL_MAX_BYTES {
        // each state's new successors, in byte order
        let mut children: Vec<Vec<(u32, u8)>> = Vec::with_capacity(level.len());
        for &i in &level {
            let q = nodes[i as usize].0;
            let mut mine: Vec<(u32, u8)> = Vec::new();
            let mut ascii_live = false;
            for &b in SPELL_ORDER.iter() {
                if b >= 0x80 && ascii_live {
                    break; // (the bytes above ASCII come last)
                }
                let r = view.next(q, b)?;
                if r == DEAD {
                    continue;
                }
                ascii_live |= b < 0x80;
                if mine.iter().any(|&(x, _)| x == r) || seen.contains(&r) {
                    continue;
                }
                if view.is_accepting(r) {
                    nodes.push((r, i, b));
                    return Ok(Some(text_to(&nodes, (nodes.len() - 1) as u32)));
                }
                mine.push((r, b));
            }
            children.push(mine);
        }
        // the fewest detours first: a state's score is the sum of the ranks, among its
        // parent's new successors, along its path
        let mut cands: Vec<(u32, usize, u32, u8)> = Vec::new();
        for (j, mine) in children.iter().enumerate() {
            let base = score[level[j] as usize];
            for (rank, &(r, b)) in mine.iter().enumerate() {
                cands.push((base.saturating_add(rank as u32), j, r, b));
            }
        }
        cands.sort_by_key(|&(sc, j, _, _)| (sc, j));
        let mut next: Vec<u32> = Vec::new();
        for (sc, j, r, b) in cands {
            if next.len() >= SPELL_BEAM {
                break;
            }
            if seen.insert(r) {
                nodes.push((r, level[j], b));
                score.push(sc);
                next.push((nodes.len() - 1) as u32);
            }
        }
        if next.is_empty() {
            return Ok(None);
        }
        level = next;
    }
    Ok(None)
}

/// The fewest non-EOS tokens whose concatenation is `text` ([`UNREACHABLE`] when none
/// spells it). With `atoms`, an atom's three bytes are one token (its special token) and no
/// regular token holding their first byte is used ([`crate::atoms`]).
fn fewest_tokens(vocab: &Vocabulary, text: &[u8], atoms: bool) -> u32 {
    let nodes = vocab.trie().nodes();
    let n = text.len();
    let mut cost = vec![UNREACHABLE; n + 1];
    cost[0] = 0;
    for i in 0..n {
        if cost[i] == UNREACHABLE {
            continue;
        }
        if atoms && text[i] == ESCAPE {
            if i + 3 <= n {
                cost[i + 3] = cost[i + 3].min(cost[i] + 1);
            }
            continue;
        }
        // walk the trie from the root along text[i..]
        let mut node = 0usize;
        for (k, &b) in text[i..].iter().enumerate() {
            if atoms && b == ESCAPE {
                break;
            }
            let end = node + nodes[node].subtree as usize;
            let mut c = node + 1;
            let mut found = None;
            while c < end {
                if nodes[c].byte == b {
                    found = Some(c);
                    break;
                }
                if nodes[c].byte > b {
                    break;
                }
                c += nodes[c].subtree as usize;
            }
            let Some(c) = found else { break };
            node = c;
            let t = nodes[c].token;
            if t != NO_TOKEN && !vocab.is_eos(t) {
                let j = i + k + 1;
                cost[j] = cost[j].min(cost[i] + 1);
            }
        }
    }
    cost[n]
}

/// Breadth-first search from `state` over token transitions; a state whose distance is
/// already known ends its branch with that distance added.
fn distance(p: &Parts<'_>, cache: &mut Cache, state: u32) -> Result<u32> {
    if let Some(&d) = cache.dist.get(&state) {
        return Ok(d);
    }
    let mut best = UNREACHABLE;
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    seen.insert(state);
    let mut frontier = vec![state];
    let mut depth = 0u32;
    let mut walked = 0usize;
    while !frontier.is_empty() && depth < best {
        let mut next = Vec::new();
        for &q in &frontier {
            if p.dfa.is_accepting(q) {
                best = best.min(depth);
                continue;
            }
            // (the start state's distance is not known: checked above)
            if let Some(&dq) = cache.dist.get(&q) {
                if dq != UNREACHABLE {
                    best = best.min(depth.saturating_add(dq));
                }
                continue;
            }
            if depth + 1 >= best {
                continue; // a successor cannot improve on what is known
            }
            for &r in ends_of(p, cache, q, &mut walked)?.iter() {
                if seen.insert(r) {
                    next.push(r);
                }
            }
            if seen.len() > MAX_SEARCH_STATES || walked > MAX_SEARCH_TOKENS {
                return Ok(0); // not cached: a later search may start closer
            }
        }
        frontier = next;
        depth += 1;
    }
    cache.dist.insert(state, best);
    Ok(best)
}

//! Outputs that fit a token budget: which allowed tokens still leave room to finish.
//!
//! With `n` tokens left (the one chosen now included), a token may be taken only if an
//! accepting state is reachable from the state it leads to within `n - 1` more tokens. That
//! is decided exactly: `d(s)` is the fewest tokens from `s` to an accepting state, found
//! breadth-first over the grammar's own token transitions (a state's successors are the
//! distinct states its allowed tokens lead to, computed once per state from its mask), reusing
//! distances already known. Distances and each state's largest distance over its allowed
//! tokens are cached per state, so a state far from the budget costs one lookup.
//!
//! When no token fits (the budget is already too small for any ending), the mask is left as
//! the grammar alone gives it: the output is then cut by the budget, as it would be without
//! this option. A search that would visit more than [`MAX_SEARCH_STATES`] states gives up and
//! keeps the token (counted as distance 0).

use std::sync::{Arc, Mutex};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::automata::dfa::{LazyDfa, DEAD};
use crate::error::Result;
use crate::index::TokenIndex;
use crate::vocab::Vocabulary;

/// No accepting state is reachable.
pub const UNREACHABLE: u32 = u32::MAX;

/// States one distance search may visit (each costs a pass over its allowed tokens); past it
/// the search gives up and the distance counts as 0 (the token is kept).
pub const MAX_SEARCH_STATES: usize = 4096;

#[derive(Default)]
struct Cache {
    /// d(s) for states whose distance is known exactly.
    dist: FxHashMap<u32, u32>,
    /// The distinct states the allowed (non-EOS) tokens of a state lead to.
    ends: FxHashMap<u32, Arc<[u32]>>,
    /// The largest d over the ends of the allowed tokens of a state.
    worst: FxHashMap<u32, u32>,
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
        if let Some(&w) = cache.worst.get(&state) {
            if w <= room {
                return Ok(());
            }
        }
        let ends = token_ends(p, state, row)?;
        let mut worst = 0u32;
        let mut too_far: Vec<u32> = Vec::new();
        for &(t, s) in &ends {
            let d = distance(p, &mut cache, s)?;
            worst = worst.max(d);
            if d > room {
                too_far.push(t);
            }
        }
        cache.worst.insert(state, worst);
        drop(cache);
        if too_far.is_empty() {
            return Ok(());
        }
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

/// The distinct successor states of `q` over its allowed tokens (cached).
fn ends_of(p: &Parts<'_>, cache: &mut Cache, q: u32) -> Result<Arc<[u32]>> {
    if let Some(e) = cache.ends.get(&q) {
        return Ok(e.clone());
    }
    let mask = p.index.mask(p.vocab, p.dfa, q)?;
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
            for &r in ends_of(p, cache, q)?.iter() {
                if seen.insert(r) {
                    next.push(r);
                }
            }
            if seen.len() > MAX_SEARCH_STATES {
                return Ok(0); // not cached: a later search may start closer
            }
        }
        frontier = next;
        depth += 1;
    }
    cache.dist.insert(state, best);
    Ok(best)
}

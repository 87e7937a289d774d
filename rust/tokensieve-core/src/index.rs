//! The token-level FSM index: for a DFA state, the packed mask of tokens that may come next.
//!
//! A mask is found by one walk of the vocabulary's [`TokenTrie`] against the DFA: a node whose
//! byte kills the automaton is skipped with its whole subtree, and a token is allowed when the
//! state after its last byte is not dead (every non-dead state is live, see [`crate::regex`]).
//! EOS ids are allowed exactly in accepting states. Masks are memoized per state and identical
//! masks are stored once; the cache has a memory budget, past which it is emptied and refilled
//! on demand (the lazy path stays correct, only slower).
//!
//! String bodies: a state is *closed* when every character a JSON string may hold unescaped
//! leads it back to itself (the inside of an unconstrained string). Before walking from `state`,
//! each first byte `b` is checked: if the state after `b` is closed, every string-body token
//! starting with `b` (see [`crate::trie`]) is allowed, so the trie's ready mask for `b` is taken
//! and the walk below `b` skips every subtree holding only such tokens. The mask of an open
//! string, or of a key position where extra property names are allowed, then costs a walk over
//! the few tokens with quotes, backslashes, control characters or partial UTF-8 instead of the
//! whole vocabulary.
//!
//! Advancing a state by a token runs the DFA over the token's bytes, so the index needs no
//! per-token transition table. Eager mode ([`TokenIndex::precompute`]) determinizes the whole
//! DFA, then walks every state reachable by tokens in parallel with rayon.
//!
//! Mask layout: word `t / 32`, bit `t % 32` (lowest bit first), 1 = allowed.

use crate::budget::Deadline;
use std::sync::{Arc, RwLock};

use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::automata::dfa::{DfaView, LazyDfa, DEAD};
use crate::error::{Error, Result};
use crate::trie::{TextClass, ALL_STRING_BODY, BODY_LEN_MASKS, NO_TOKEN, SHORT_TOKEN_BYTES};
use crate::vocab::Vocabulary;

const UNKNOWN: u32 = u32::MAX;

/// A state, its mask and the states its allowed tokens lead to.
type Walked = (u32, Vec<u32>, FxHashSet<u32>);

/// Transitions used by a trie walk: the lazy, locked DFA or a frozen snapshot of a complete one.
trait Step {
    fn classes(&self) -> &[u8; 256];
    fn step(&mut self, state: u32, class: usize) -> Result<u32>;
    fn accepting(&self, state: u32) -> bool;
}

impl Step for DfaView<'_> {
    #[inline]
    fn classes(&self) -> &[u8; 256] {
        DfaView::classes(self)
    }
    #[inline]
    fn step(&mut self, state: u32, class: usize) -> Result<u32> {
        let t = self.raw(state, class);
        if t != UNKNOWN {
            Ok(t)
        } else {
            self.fill(state, class)
        }
    }
    #[inline]
    fn accepting(&self, state: u32) -> bool {
        self.is_accepting(state)
    }
}

/// A lazy walk's steps with every state reached replaced by its representative for tokens of up
/// to `k` bytes (`k` = the longest token; see [`LazyDfa::representative`]): from there, every
/// string of at most `k` bytes dies exactly when it dies from the state itself, so a walk that
/// only asks which tokens survive gets the same answer, while counts far from their bounds stay
/// one state (a counted string's body is then as closed as an unbounded one's, and no state is
/// made per count a token reaches). Not for walks that collect successor states.
struct Reps<'v, 'a> {
    view: &'v mut DfaView<'a>,
    k: usize,
    /// Direct-mapped memo of (state, representative).
    memo: Box<[(u32, u32); REPS_MEMO]>,
}

const REPS_MEMO: usize = 256;

impl<'v, 'a> Reps<'v, 'a> {
    fn new(view: &'v mut DfaView<'a>, k: usize) -> Self {
        Reps {
            view,
            k,
            memo: Box::new([(DEAD, DEAD); REPS_MEMO]),
        }
    }
}

impl Step for Reps<'_, '_> {
    #[inline]
    fn classes(&self) -> &[u8; 256] {
        self.view.classes()
    }
    #[inline]
    fn step(&mut self, state: u32, class: usize) -> Result<u32> {
        let t = Step::step(self.view, state, class)?;
        if t == DEAD {
            return Ok(t);
        }
        let slot = &mut self.memo[t as usize % REPS_MEMO];
        if slot.0 == t {
            return Ok(slot.1);
        }
        let r = self.view.representative(t, self.k)?;
        self.memo[t as usize % REPS_MEMO] = (t, r);
        Ok(r)
    }
    #[inline]
    fn accepting(&self, state: u32) -> bool {
        self.view.is_accepting(state)
    }
}

/// A complete DFA's transition table, read without locks by parallel walks.
struct Frozen {
    classes: [u8; 256],
    stride: usize,
    trans: Vec<u32>,
    accepting: Vec<bool>,
}

impl Step for &Frozen {
    #[inline]
    fn classes(&self) -> &[u8; 256] {
        &self.classes
    }
    #[inline]
    fn step(&mut self, state: u32, class: usize) -> Result<u32> {
        Ok(self.trans[state as usize * self.stride + class])
    }
    #[inline]
    fn accepting(&self, state: u32) -> bool {
        self.accepting[state as usize]
    }
}

/// UTF-8 encodings of the non-ASCII scalar values, as byte ranges per position.
const UTF8_MULTI: &[&[(u8, u8)]] = &[
    &[(0xC2, 0xDF), (0x80, 0xBF)],
    &[(0xE0, 0xE0), (0xA0, 0xBF), (0x80, 0xBF)],
    &[(0xE1, 0xEC), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xED, 0xED), (0x80, 0x9F), (0x80, 0xBF)],
    &[(0xEE, 0xEF), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xF0, 0xF0), (0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xF1, 0xF3), (0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF)],
    &[(0xF4, 0xF4), (0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF)],
];

/// Whether every character a JSON string holds unescaped (any scalar value but `"`, `\` and
/// U+0000–U+001F) leads `state` back to `state`. Then every string-body token is allowed there
/// and leads back to it.
fn string_body_closed<S: Step>(dfa: &mut S, state: u32) -> Result<bool> {
    if state == DEAD {
        return Ok(false);
    }
    let classes = *dfa.classes();
    // Common letters first, so most states fail at once.
    for b in [b'a', b' ', b'0'].into_iter().chain(0x20u8..0x80) {
        if b == b'"' || b == b'\\' {
            continue;
        }
        if dfa.step(state, classes[b as usize] as usize)? != state {
            return Ok(false);
        }
    }
    Ok(after_non_ascii(dfa, state)? == Some(state))
}

/// The state every non-ASCII character leads `state` to, if it is one and the same (possibly
/// dead) state.
fn after_non_ascii<S: Step>(dfa: &mut S, state: u32) -> Result<Option<u32>> {
    fn rest<S: Step>(
        dfa: &mut S,
        classes: &[u8; 256],
        at: u32,
        seq: &[(u8, u8)],
        end: &mut Option<u32>,
    ) -> Result<bool> {
        let Some((&(lo, hi), tail)) = seq.split_first() else {
            return Ok(*end.get_or_insert(at) == at);
        };
        let mut done = [false; 256];
        // what follows depends only on the state reached: each is checked once (with
        // single-byte classes, many bytes of a range reach one state)
        let mut reached: Vec<u32> = Vec::new();
        for b in lo..=hi {
            let c = classes[b as usize] as usize;
            if std::mem::replace(&mut done[c], true) {
                continue;
            }
            let next = dfa.step(at, c)?;
            if reached.contains(&next) {
                continue;
            }
            reached.push(next);
            let same = if next == DEAD {
                *end.get_or_insert(DEAD) == DEAD
            } else {
                rest(dfa, classes, next, tail, end)?
            };
            if !same {
                return Ok(false);
            }
        }
        Ok(true)
    }
    let classes = *dfa.classes();
    let mut end = None;
    for seq in UTF8_MULTI {
        if !rest(dfa, &classes, state, seq, &mut end)? {
            return Ok(None);
        }
    }
    Ok(end)
}

/// The state every character a JSON string holds unescaped leads `state` to, if it is one and
/// the same (possibly dead) state.
fn uniform_next<S: Step>(dfa: &mut S, state: u32) -> Result<Option<u32>> {
    let classes = *dfa.classes();
    let mut done = [false; 256];
    let mut target = None;
    for b in 0x20u8..0x80 {
        let c = classes[b as usize] as usize;
        if b == b'"' || b == b'\\' || std::mem::replace(&mut done[c], true) {
            continue;
        }
        let t = dfa.step(state, c)?;
        if *target.get_or_insert(t) != t {
            return Ok(None);
        }
    }
    let rest = after_non_ascii(dfa, state)?;
    Ok(if rest.is_some() && rest == target {
        rest
    } else {
        None
    })
}

/// Most ASCII bytes a free-text state may set apart (see [`free_text_closed`]).
const FREE_TEXT_APART: u32 = 16;

/// Free text: when every character but a few ASCII bytes (at most [`FREE_TEXT_APART`]) leads
/// `state` to one live state `q`, and every character but a few ASCII bytes (as many) leads `q`
/// back to itself, returns the bytes `state` sets apart, those `q` sets apart (bit `b` for byte
/// `b`) and `q`. Then every token whose first character is not one of the first set and whose
/// other characters are not of the second is allowed from `state` and leads to `q` (the inside
/// of a raw value or of text between tool calls, where only the first bytes of its end, its
/// triggers and its excluded strings move on; a trigger begun, where the next byte of the
/// trigger also moves on).
fn free_text_closed<S: Step>(dfa: &mut S, state: u32) -> Result<Option<(u128, u128, u32)>> {
    let classes = *dfa.classes();
    let mut by_class = [UNKNOWN; 256];
    let mut target = [DEAD; 128];
    // (state, how many ASCII bytes lead there), for the most common one
    let mut counts: Vec<(u32, u32)> = Vec::new();
    for b in 0..128usize {
        let c = classes[b] as usize;
        if by_class[c] == UNKNOWN {
            by_class[c] = dfa.step(state, c)?;
        }
        let t = by_class[c];
        target[b] = t;
        match counts.iter_mut().find(|(s, _)| *s == t) {
            Some((_, n)) => *n += 1,
            None => counts.push((t, 1)),
        }
    }
    let Some(&(q, n)) = counts.iter().max_by_key(|&&(s, n)| (n, s != DEAD)) else {
        return Ok(None);
    };
    if q == DEAD || 128 - n > FREE_TEXT_APART {
        return Ok(None);
    }
    let apart = (0..128u32)
        .filter(|&b| target[b as usize] != q)
        .fold(0u128, |m, b| m | 1 << b);
    if after_non_ascii(dfa, state)? != Some(q) {
        return Ok(None);
    }
    let mut looped = apart;
    if q != state {
        looped = 0;
        for (b, &c) in classes[..128].iter().enumerate() {
            if dfa.step(q, c as usize)? != q {
                looped |= 1 << b;
                if looped.count_ones() > FREE_TEXT_APART {
                    return Ok(None);
                }
            }
        }
        if after_non_ascii(dfa, q)? != Some(q) {
            return Ok(None);
        }
    }
    Ok(Some((apart, looped, q)))
}

/// How long a run of string characters `state` takes, and where each length leads, when every
/// string character leads each state of the run to one and the same next state (the inside of
/// a string with a length bound, or with none): `(limit, states, dies)` where every run of at
/// most `limit` characters (`usize::MAX`: any) stays live, and `dies` says that every longer
/// run dies (the run ends because every string character leads to the dead state, as at a
/// length bound). `None` when the first step already depends on the character.
fn body_run<S: Step>(dfa: &mut S, state: u32) -> Result<Option<(usize, Vec<u32>, bool)>> {
    let mut states = Vec::new();
    let mut at = state;
    for k in 1..=BODY_LEN_MASKS {
        match uniform_next(dfa, at)? {
            Some(t) if t == at => {
                states.push(at);
                return Ok(Some((usize::MAX, states, false)));
            }
            Some(DEAD) => return Ok(Some((k - 1, states, true))),
            Some(t) => {
                states.push(t);
                at = t;
            }
            None => return Ok((k > 1).then_some((k - 1, states, false))),
        }
    }
    Ok(Some((BODY_LEN_MASKS, states, false)))
}

/// Set the string-body tokens whose first byte leads `state` to a closed state (see the module
/// docs) in `out`, which starts all zero. Returns, per first byte, the length in characters up
/// to which the walk may skip subtrees of string-body tokens below that byte (0: none, 127:
/// any), and whether every string-body token of up to `BODY_LEN_MASKS` characters is set, so
/// that only the trie's other tokens are left to walk.
fn body_prefill<S: Step>(
    vocab: &Vocabulary,
    dfa: &mut S,
    state: u32,
    out: &mut [u32],
    mut successors: Option<&mut FxHashSet<u32>>,
) -> Result<([u8; 256], bool)> {
    let trie = vocab.trie();
    let mut first_skip = [0u8; 256];
    if trie.body_mask().is_empty() {
        return Ok((first_skip, false));
    }
    // Every string character leads to one next state: the body tokens up to the run's length.
    // When every longer run dies, the longer body tokens die too: only the other tokens (and
    // the body tokens too long for the ready masks, all in the small trie) are left to walk.
    if let Some((limit, states, dies)) = body_run(dfa, state)? {
        if limit > 0 {
            let (mask, skip) = if limit == usize::MAX {
                (trie.body_mask(), 127)
            } else {
                (trie.body_upto_mask(limit), limit as u8)
            };
            for (o, &w) in out.iter_mut().zip(mask) {
                *o = w;
            }
            first_skip.fill(skip);
        }
        if let Some(s) = successors.as_deref_mut() {
            s.extend(states);
        }
        return Ok((first_skip, limit >= BODY_LEN_MASKS || dies));
    }
    let classes = *dfa.classes();
    let mut memo: Vec<(u32, bool)> = Vec::new();
    let mut closed = |dfa: &mut S, s: u32| -> Result<bool> {
        if let Some(&(_, c)) = memo.iter().find(|&&(m, _)| m == s) {
            return Ok(c);
        }
        let c = string_body_closed(dfa, s)?;
        memo.push((s, c));
        Ok(c)
    };
    // Slots whose tokens exist, and which of them lead to a closed state.
    let mut used = Vec::new();
    let mut taken = Vec::new();
    for slot in 0..=128usize {
        if trie.body_first_mask(slot).is_empty() {
            continue;
        }
        used.push(slot);
        let after = if slot < 128 {
            dfa.step(state, classes[slot] as usize)?
        } else {
            // Every non-ASCII first character must lead to one closed state.
            after_non_ascii(dfa, state)?.unwrap_or(DEAD)
        };
        if after != DEAD && closed(dfa, after)? {
            taken.push(slot);
            if let Some(s) = successors.as_deref_mut() {
                s.insert(after);
            }
            if slot < 128 {
                first_skip[slot] = 127;
            } else {
                first_skip[0x80..].fill(127);
            }
        }
    }
    if taken.is_empty() {
        return Ok((first_skip, false));
    }
    if taken.len() * 2 > used.len() {
        // Fewer masks to take away than to add.
        for (o, &w) in out.iter_mut().zip(trie.body_mask()) {
            *o = w;
        }
        for &slot in used.iter().filter(|s| !taken.contains(s)) {
            for (o, &w) in out.iter_mut().zip(trie.body_first_mask(slot)) {
                *o &= !w;
            }
        }
    } else {
        for &slot in &taken {
            for (o, &w) in out.iter_mut().zip(trie.body_first_mask(slot)) {
                *o |= w;
            }
        }
    }
    Ok((first_skip, false))
}

/// Sets the bits of `ids` in the packed mask `out`.
fn set_ids(out: &mut [u32], ids: &[u32]) {
    for &id in ids {
        out[(id >> 5) as usize] |= 1 << (id & 31);
    }
}

/// States kept by the closed-state memo of [`walk_nodes`] (direct-mapped by state).
const CLOSED_MEMO: usize = 64;

/// Walk the subtrees of `nodes` (a preorder trie) below the first bytes in `first`, from the
/// state in `stack[0]`: set each token the DFA survives. Below first byte `b`, subtrees of
/// string-body tokens of at most `skip[b]` characters are skipped (already set).
/// `body_below` is the trie when `nodes` is its whole node array: then, below a closed state
/// (see [`string_body_closed`]), a subtree of string-body tokens is set at once from the
/// trie's list of them, not walked.
#[allow(clippy::too_many_arguments)]
fn walk_nodes<S: Step>(
    nodes: &[crate::trie::Node],
    roots: &[(u8, u32)],
    first: &[bool; 256],
    skip_len: &[u8; 256],
    dfa: &mut S,
    stack: &mut [u32],
    out: &mut [u32],
    successors: &mut Option<&mut FxHashSet<u32>>,
    mut sub: Option<&mut SubtreeCache>,
    body_below: Option<&crate::trie::TokenTrie>,
) -> Result<()> {
    let classes = *dfa.classes();
    let mut record: Vec<u32> = Vec::new();
    // Per depth, whether the state there is closed (0: not known yet, 1: no, 2: yes), and a
    // small memo of the answer by state.
    let mut closed_at = vec![0u8; stack.len()];
    let mut memo = [(DEAD, false); CLOSED_MEMO];
    for &(b, at) in roots {
        if !first[b as usize] {
            continue;
        }
        let q = dfa.step(stack[0], classes[b as usize] as usize)?;
        if q == DEAD {
            continue;
        }
        // The first byte's subtree, in preorder.
        let skip = skip_len[b as usize];
        // What the subtree allows depends only on the state after its first byte: reuse it
        // when an earlier walk reached the same state (unless tokens were set beforehand).
        let sub = match sub.as_deref_mut() {
            Some(c) if skip == 0 && successors.is_none() => {
                if let Some(ids) = c.map.get(&(b, q)) {
                    c.hits += 1;
                    set_ids(out, ids);
                    continue;
                }
                record.clear();
                Some(c)
            }
            _ => None,
        };
        let mut i = at as usize;
        let end = i + nodes[i].subtree as usize;
        while i < end {
            let n = nodes[i];
            let d = n.depth as usize;
            if n.flags & ALL_STRING_BODY != 0 {
                // a subtree of string-body tokens no longer than the first byte allows
                if n.flags >> 1 <= skip {
                    i += n.subtree as usize;
                    continue;
                }
                // A subtree of string-body tokens starting on a character's first byte, below
                // a closed state: each token's rest is whole string characters, each leading
                // the state back to itself, so every one is allowed (and ends there).
                if let Some(t) = body_below {
                    if d >= 2 && !(0x80..0xC0).contains(&n.byte) {
                        let parent = stack[d - 1];
                        let c = match closed_at[d - 1] {
                            0 => {
                                let slot = &mut memo[parent as usize % CLOSED_MEMO];
                                let c = if slot.0 == parent {
                                    slot.1
                                } else {
                                    let c = string_body_closed(dfa, parent)?;
                                    *slot = (parent, c);
                                    c
                                };
                                closed_at[d - 1] = 1 + c as u8;
                                c
                            }
                            v => v == 2,
                        };
                        if c {
                            let ids = t.body_ids_below(i);
                            set_ids(out, ids);
                            if sub.is_some() {
                                record.extend_from_slice(ids);
                            }
                            if let Some(s) = successors.as_deref_mut() {
                                s.insert(parent);
                            }
                            i += n.subtree as usize;
                            continue;
                        }
                    }
                }
            }
            let next = dfa.step(stack[d - 1], classes[n.byte as usize] as usize)?;
            if next == DEAD {
                i += n.subtree as usize;
                continue;
            }
            stack[d] = next;
            closed_at[d] = 0;
            if n.token != NO_TOKEN {
                out[(n.token >> 5) as usize] |= 1 << (n.token & 31);
                if let Some(s) = successors.as_deref_mut() {
                    s.insert(next);
                }
                if sub.is_some() {
                    record.push(n.token);
                }
            }
            i += 1;
        }
        if let Some(c) = sub {
            c.insert((b, q), &record);
        }
    }
    Ok(())
}

/// The tokens allowed below a first byte, by that byte and the DFA state after it (the rest of
/// the walk below it depends on nothing else), for masks walked lazily; at most `cap` bytes
/// (an eighth of the mask cache's budget, at most [`SUBTREE_CACHE_BYTES`]), emptied when full.
#[derive(Default)]
pub(crate) struct SubtreeCache {
    map: FxHashMap<(u8, u32), Arc<[u32]>>,
    bytes: usize,
    cap: usize,
    /// Subtrees reused so far.
    hits: u64,
}

/// The most a grammar's [`SubtreeCache`] holds.
const SUBTREE_CACHE_BYTES: usize = 16 << 20;

impl SubtreeCache {
    /// Accounts for an entry of `ids`, emptying the cache first when it would not fit.
    fn make_room(&mut self, ids: &[u32]) {
        let size = ids.len() * 4 + 32;
        if self.bytes + size > self.cap {
            self.map.clear();
            self.bytes = 0;
        }
        self.bytes += size;
    }

    fn insert(&mut self, key: (u8, u32), ids: &[u32]) {
        self.make_room(ids);
        self.map.insert(key, ids.into());
    }
}

/// The distinct states the tokens allowed at `state` lead to (regular tokens only: no
/// atoms, EOS walked like any regular token), with the number of allowed tokens: one walk of
/// the trie, where a text class's or a string body's tokens add their common state once.
pub(crate) fn token_successors(
    vocab: &Vocabulary,
    dfa: &LazyDfa,
    state: u32,
) -> Result<(Vec<u32>, usize)> {
    let mut out = vec![0u32; vocab.mask_words()];
    let mut succ: FxHashSet<u32> = FxHashSet::default();
    let mut view = dfa.view();
    walk(vocab, &mut view, state, &mut out, Some(&mut succ), None)?;
    succ.remove(&DEAD);
    let allowed = out.iter().map(|w| w.count_ones() as usize).sum();
    let mut states: Vec<u32> = succ.into_iter().collect();
    states.sort_unstable();
    Ok((states, allowed))
}

/// See [`free_text_class`].
type FreeText = (Arc<TextClass>, Option<Arc<[u32]>>, u128, u32);

/// The text class a free-text `state` takes its tokens from (see [`free_text_closed`]): the
/// class, the mask of its tokens allowed from `state` when it is not the class's own, the first bytes whose tokens are walked
/// in the full trie (bit `b` for byte `b`), and the state they all lead to. The class of both
/// sets of bytes together when it is useful (its mask as it is, no byte to walk); else, when
/// `state` sets apart bytes its loop does not (a trigger begun: the byte that goes on with it,
/// such as a space, begins too many tokens), the loop's class with the tokens beginning with
/// those bytes taken out of its mask and walked.
fn free_text_class<S: Step>(
    vocab: &Vocabulary,
    dfa: &mut S,
    state: u32,
) -> Result<Option<FreeText>> {
    let Some((first, looped, q)) = free_text_closed(dfa, state)? else {
        return Ok(None);
    };
    let both = vocab.text_class(first | looped);
    if both.useful {
        return Ok(Some((both, None, 0, q)));
    }
    let only_first = first & !looped;
    if only_first == 0 {
        return Ok(None);
    }
    let (class, mask) = vocab.text_class_without_first(looped, only_first);
    if !class.useful {
        return Ok(None);
    }
    Ok(Some((class, Some(mask), only_first, q)))
}

/// Walk the trie from `state`, writing the allowed-token mask into `out` (fully overwritten).
/// When `successors` is given, the states reached after each allowed token are added to it.
fn walk<S: Step>(
    vocab: &Vocabulary,
    dfa: &mut S,
    state: u32,
    out: &mut [u32],
    mut successors: Option<&mut FxHashSet<u32>>,
    sub: Option<&mut SubtreeCache>,
) -> Result<()> {
    out.fill(0);
    let trie = vocab.trie();
    let nodes = trie.nodes();
    let mut stack = vec![DEAD; trie.max_depth() + 1];
    stack[0] = state;
    if state != DEAD {
        let (first_skip, rest_only) =
            body_prefill(vocab, dfa, state, out, successors.as_deref_mut())?;
        if !rest_only && first_skip.iter().all(|&k| k == 0) {
            // no string-body token was taken: free text takes its tokens from a text class
            if let Some(found) = free_text_class(vocab, dfa, state)? {
                let (class, filtered, first, q) = found;
                let mask: &[u32] = filtered.as_deref().unwrap_or(&class.mask);
                for (o, &w) in out.iter_mut().zip(mask.iter()) {
                    *o |= w;
                }
                if let Some(s) = successors.as_deref_mut() {
                    if mask.iter().any(|&w| w != 0) {
                        s.insert(q);
                    }
                }
                // the class's other tokens; those that begin with a byte set apart from
                // `state` only are walked with every token that begins so, in the full trie
                let mut not_first = [true; 256];
                for (b, f) in not_first.iter_mut().enumerate().take(128) {
                    *f = first >> b & 1 == 0;
                }
                walk_nodes(
                    &class.rest,
                    &class.rest_roots,
                    &not_first,
                    &[0u8; 256],
                    dfa,
                    &mut stack,
                    out,
                    &mut successors,
                    None,
                    None,
                )?;
                if first != 0 {
                    let mut is_first = not_first;
                    is_first.iter_mut().for_each(|f| *f = !*f);
                    walk_nodes(
                        nodes,
                        trie.roots(),
                        &is_first,
                        &[0u8; 256],
                        dfa,
                        &mut stack,
                        out,
                        &mut successors,
                        None,
                        None,
                    )?;
                }
                set_duplicates_and_eos(vocab, out, dfa.accepting(state));
                if out.iter().all(|&w| w == 0) {
                    return Err(unspellable(state));
                }
                return Ok(());
            }
        }
        // First bytes below which every string-body token is set already: only the small trie
        // of the other tokens is left to walk there.
        let mut in_rest = [rest_only; 256];
        if !rest_only {
            for (r, &k) in in_rest.iter_mut().zip(&first_skip) {
                *r = k == 127;
            }
        }
        // Below a first byte whose next state is closed, every string-body token is set
        // already, whatever its length: only the tokens that are not string-body tokens are
        // left to walk there. (Near a length bound, `TokenIndex::mask` has taken the short
        // tokens from a representative before any walk.)
        let closed_all = rest_only && first_skip.iter().all(|&k| k == 127);
        let rest = if closed_all || (!rest_only && in_rest.iter().any(|&r| r)) {
            Some(trie.other_nodes())
        } else if rest_only {
            Some((trie.rest_nodes(), trie.rest_roots()))
        } else {
            None
        };
        if let Some((nodes, roots)) = rest {
            walk_nodes(
                nodes,
                roots,
                &in_rest,
                &[0u8; 256],
                dfa,
                &mut stack,
                out,
                &mut successors,
                None,
                None,
            )?;
        }
        if !rest_only {
            let mut others = in_rest;
            others.iter_mut().for_each(|r| *r = !*r);
            if others.iter().any(|&r| r) {
                walk_nodes(
                    nodes,
                    trie.roots(),
                    &others,
                    &first_skip,
                    dfa,
                    &mut stack,
                    out,
                    &mut successors,
                    sub,
                    Some(trie),
                )?;
            }
        }
        set_duplicates_and_eos(vocab, out, dfa.accepting(state));
    }
    if out.iter().all(|&w| w == 0) {
        return Err(unspellable(state));
    }
    Ok(())
}

/// The mask of `state` into `out` for [`TokenIndex::mask`]: from the last mask made when few
/// first bytes differ (see [`delta_walk`]), else by a walk.
fn lazy_walk<S: Step>(
    vocab: &Vocabulary,
    dfa: &mut S,
    last: Option<(u32, &[u32])>,
    state: u32,
    out: &mut Vec<u32>,
    sub: Option<&mut SubtreeCache>,
) -> Result<()> {
    if let Some((prev, pm)) = last {
        if let Some(d) = delta_walk(vocab, dfa, prev, pm, state)? {
            #[cfg(test)]
            DELTAS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            *out = d;
            return Ok(());
        }
    }
    walk(vocab, dfa, state, out, None, sub)
}

/// Replaces in `out` (the mask of a state that agrees with `state` on every token of at most
/// [`SHORT_TOKEN_BYTES`] bytes) the tokens longer than that by those allowed from `state`; EOS
/// and duplicates are set for `state`.
fn long_tokens<S: Step>(
    vocab: &Vocabulary,
    dfa: &mut S,
    state: u32,
    out: &mut [u32],
) -> Result<()> {
    let trie = vocab.trie();
    for &t in trie.long_ids() {
        out[(t >> 5) as usize] &= !(1 << (t & 31));
    }
    let (nodes, roots) = trie.long_nodes();
    let mut stack = vec![DEAD; trie.max_depth() + 1];
    stack[0] = state;
    walk_nodes(
        nodes,
        roots,
        &[true; 256],
        &[0u8; 256],
        dfa,
        &mut stack,
        out,
        &mut None,
        None,
        None,
    )?;
    set_duplicates_and_eos(vocab, out, dfa.accepting(state));
    if out.iter().all(|&w| w == 0) {
        return Err(unspellable(state));
    }
    Ok(())
}

/// Masks made by [`delta_walk`], counted for the tests.
#[cfg(test)]
static DELTAS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// At most this many first bytes may differ for [`delta_walk`] to be tried, and their subtrees
/// hold at most this fraction (1/`DELTA_NODES_PART`) of the trie's nodes (or 4,096 nodes).
const DELTA_BYTES: usize = 32;
const DELTA_NODES_PART: usize = 16;

/// The mask of `state` from the mask of another state `prev`: a token's bit depends only on its
/// first byte `b` and the state after it, so where `state` and `prev` go to the same state on
/// `b`, the tokens starting with `b` are allowed exactly as for `prev`. Only the first bytes on
/// which they differ are cleared and walked again (then the duplicates and EOS are set from
/// scratch). `None` when more than [`DELTA_BYTES`] first bytes differ, or their subtrees are
/// large, or the mask is empty.
fn delta_walk<S: Step>(
    vocab: &Vocabulary,
    dfa: &mut S,
    prev: u32,
    prev_mask: &[u32],
    state: u32,
) -> Result<Option<Vec<u32>>> {
    if state == DEAD || prev == DEAD {
        return Ok(None);
    }
    let trie = vocab.trie();
    let classes = *dfa.classes();
    let mut by_class: [Option<bool>; 256] = [None; 256];
    let mut differs = [false; 256];
    let mut n = 0usize;
    let mut nodes = 0usize;
    let budget = (trie.nodes().len() / DELTA_NODES_PART).max(4096);
    for &(b, at) in trie.roots() {
        let c = classes[b as usize] as usize;
        let d = match by_class[c] {
            Some(d) => d,
            None => {
                let d = dfa.step(state, c)? != dfa.step(prev, c)?;
                by_class[c] = Some(d);
                d
            }
        };
        if d {
            differs[b as usize] = true;
            n += 1;
            nodes += trie.nodes()[at as usize].subtree as usize;
            if n > DELTA_BYTES || nodes > budget {
                return Ok(None);
            }
        }
    }
    // clear the tokens below the differing first bytes (their duplicates and EOS are set again
    // at the end): no more nodes than the walk below visits anyway
    let mut out = prev_mask.to_vec();
    trie.clear_below_first(|b| differs[b as usize], &mut out);
    if n > 0 {
        let mut stack = vec![DEAD; trie.max_depth() + 1];
        stack[0] = state;
        walk_nodes(
            trie.nodes(),
            trie.roots(),
            &differs,
            &[0u8; 256],
            dfa,
            &mut stack,
            &mut out,
            &mut None,
            None,
            Some(trie),
        )?;
    }
    set_duplicates_and_eos(vocab, &mut out, dfa.accepting(state));
    Ok(out.iter().any(|&w| w != 0).then_some(out))
}

/// The tokens outside the trie, from the trie's: each duplicate exactly when its primary token
/// (same bytes) is allowed, EOS exactly when the state is `accepting`.
fn set_duplicates_and_eos(vocab: &Vocabulary, out: &mut [u32], accepting: bool) {
    fn set(out: &mut [u32], t: u32, on: bool) {
        let w = &mut out[(t >> 5) as usize];
        if on {
            *w |= 1 << (t & 31);
        } else {
            *w &= !(1 << (t & 31));
        }
    }
    vocab.trie().copy_duplicate_bits(out);
    for &e in vocab.eos_ids() {
        set(out, e, accepting);
    }
}

fn unspellable(state: u32) -> Error {
    // The caller fills in the byte list when it has the DFA at hand.
    Error::Unspellable {
        bytes: format!("(state {state})"),
    }
}

fn describe_bytes(bytes: &[u8]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let mut j = i;
        while j + 1 < bytes.len() && bytes[j + 1] == bytes[j] + 1 {
            j += 1;
        }
        let show = |b: u8| {
            if b.is_ascii_graphic() || b == b' ' {
                format!("{:?} (0x{b:02X})", b as char)
            } else {
                format!("0x{b:02X}")
            }
        };
        if i == j {
            parts.push(show(bytes[i]));
        } else {
            parts.push(format!("{}-{}", show(bytes[i]), show(bytes[j])));
        }
        i = j + 1;
        if parts.len() >= 12 {
            parts.push("...".into());
            break;
        }
    }
    format!("[{}]", parts.join(", "))
}

#[derive(Default)]
struct MaskCache {
    by_state: FxHashMap<u32, u32>,
    masks: Vec<Arc<[u32]>>,
    dedup: FxHashMap<Arc<[u32]>, u32>,
    bytes: usize,
}

/// `(state, mask id)` pairs sorted by state, and the distinct masks.
pub type MaskTable = (Vec<(u32, u32)>, Vec<Arc<[u32]>>);

/// Memoized masks of one grammar.
pub struct TokenIndex {
    cache: RwLock<MaskCache>,
    /// Subtree results shared by lazily walked masks (see [`SubtreeCache`]); a walk that finds
    /// it in use goes without.
    subtrees: std::sync::Mutex<SubtreeCache>,
    /// The state whose mask was walked last, and that mask: the next walk starts from it when
    /// few first bytes differ (see [`delta_walk`]).
    last: std::sync::Mutex<Option<(u32, Arc<[u32]>)>>,
    /// Whether walks may start from the last mask (tests turn it off to reach the other paths).
    use_last: bool,
    budget_bytes: usize,
    precomputed: std::sync::atomic::AtomicBool,
    /// The grammar's token atoms (see [`crate::atoms`]): each mask made is completed with
    /// them before it is kept.
    atoms: Option<std::sync::Arc<crate::atoms::Atoms>>,
    /// Masks this index made from a representative for short tokens (see
    /// [`TokenIndex::mask`]), counted for the tests.
    #[cfg(test)]
    short_reps: std::sync::atomic::AtomicUsize,
}

/// Sizes of an index, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexStats {
    /// DFA states with a cached mask.
    pub states: usize,
    /// Distinct masks stored.
    pub distinct_masks: usize,
    /// Bytes held by the stored masks.
    pub mask_bytes: usize,
    /// DFA states created so far.
    pub dfa_states: usize,
}

impl TokenIndex {
    /// An empty index whose mask cache holds at most `budget_bytes` of masks.
    pub fn new(budget_bytes: usize) -> TokenIndex {
        TokenIndex {
            cache: RwLock::new(MaskCache::default()),
            subtrees: std::sync::Mutex::new(SubtreeCache {
                cap: (budget_bytes / 8).min(SUBTREE_CACHE_BYTES),
                ..Default::default()
            }),
            last: Default::default(),
            use_last: true,
            budget_bytes,
            precomputed: std::sync::atomic::AtomicBool::new(false),
            atoms: None,
            #[cfg(test)]
            short_reps: Default::default(),
        }
    }

    /// This index for a grammar with token atoms (before any mask is made).
    pub fn with_atoms(mut self, atoms: Option<std::sync::Arc<crate::atoms::Atoms>>) -> Self {
        self.atoms = atoms;
        self
    }

    /// The grammar's token atoms, if any.
    pub fn atoms(&self) -> Option<&crate::atoms::Atoms> {
        self.atoms.as_deref()
    }

    /// The grammar's token atoms, shared.
    pub fn atoms_arc(&self) -> Option<std::sync::Arc<crate::atoms::Atoms>> {
        self.atoms.clone()
    }

    /// A walk's result completed with the atoms readable at `state` (a text walk that found
    /// no token is no error when an atom can follow).
    fn completed(
        &self,
        walked: Result<()>,
        vocab: &Vocabulary,
        dfa: &LazyDfa,
        state: u32,
        buf: &mut [u32],
    ) -> Result<()> {
        let Some(a) = &self.atoms else {
            return walked.map_err(|e| fill_bytes(e, dfa, state));
        };
        match walked {
            Err(Error::Unspellable { .. }) => buf.fill(0),
            r => r?,
        }
        a.complete(vocab, dfa, state, buf)?;
        if buf.iter().all(|&w| w == 0) {
            return Err(fill_bytes(unspellable(state), dfa, state));
        }
        Ok(())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, MaskCache> {
        self.cache.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, MaskCache> {
        self.cache.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The mask of `state`, computed on first use.
    pub fn mask(&self, vocab: &Vocabulary, dfa: &LazyDfa, state: u32) -> Result<Arc<[u32]>> {
        if let Some(m) = {
            let c = self.read();
            c.by_state
                .get(&state)
                .map(|&id| c.masks[id as usize].clone())
        } {
            return Ok(m);
        }
        // Counts far from their bounds share one state's mask (see `LazyDfa::representative`);
        // an atom reads three bytes.
        let depth = vocab
            .trie()
            .max_depth()
            .max(if self.atoms.is_some() { 3 } else { 0 });
        let rep = dfa.representative(state, depth)?;
        if rep != state {
            let m = self.mask(vocab, dfa, rep)?;
            let mut c = self.write();
            // the representative's entry, unless the cache was emptied in between
            if let Some(&id) = c.by_state.get(&rep) {
                c.by_state.insert(state, id);
                return Ok(m);
            }
            return Ok(self.insert(&mut c, state, m.to_vec()));
        }
        // Counts near a bound but more than one short token's length from it: the tokens of up
        // to `SHORT_TOKEN_BYTES` bytes are allowed as from the representative for that length
        // (whose mask is usually known already), only the long tokens are walked from here.
        let short_rep = dfa.representative(state, SHORT_TOKEN_BYTES)?;
        if short_rep != state {
            #[cfg(test)]
            self.short_reps
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let m = self.mask(vocab, dfa, short_rep)?;
            let mut buf = m.to_vec();
            let walked = {
                let mut view = dfa.view();
                long_tokens(vocab, &mut view, state, &mut buf)
            };
            self.completed(walked, vocab, dfa, state, &mut buf)?;
            let mut c = self.write();
            return Ok(self.insert(&mut c, state, buf));
        }
        let last = if self.use_last {
            self.last
                .try_lock()
                .ok()
                .and_then(|l| l.as_ref().map(|(s, m)| (*s, m.clone())))
        } else {
            None
        };
        let mut buf = vec![0u32; vocab.mask_words()];
        let walked = {
            let mut view = dfa.view();
            let mut sub = self.subtrees.try_lock().ok();
            let last = last.as_ref().map(|(p, m)| (*p, &m[..]));
            if dfa.has_registers() {
                let mut reps = Reps::new(&mut view, vocab.trie().max_depth());
                lazy_walk(vocab, &mut reps, last, state, &mut buf, sub.as_deref_mut())
            } else {
                lazy_walk(vocab, &mut view, last, state, &mut buf, sub.as_deref_mut())
            }
        };
        // The view's lock is released before the error path inspects the DFA again.
        self.completed(walked, vocab, dfa, state, &mut buf)?;
        let mut c = self.write();
        let m = self.insert(&mut c, state, buf);
        drop(c);
        if let Ok(mut l) = self.last.try_lock() {
            *l = Some((state, m.clone()));
        }
        Ok(m)
    }

    fn insert(&self, c: &mut MaskCache, state: u32, buf: Vec<u32>) -> Arc<[u32]> {
        if let Some(&id) = c.by_state.get(&state) {
            return c.masks[id as usize].clone();
        }
        let id = match c.dedup.get(buf.as_slice()) {
            Some(&id) => id,
            None => {
                let size = buf.len() * 4;
                if c.bytes + size > self.budget_bytes
                    && !self.precomputed.load(std::sync::atomic::Ordering::Relaxed)
                {
                    *c = MaskCache::default();
                }
                let arc: Arc<[u32]> = buf.into();
                let id = c.masks.len() as u32;
                c.masks.push(arc.clone());
                c.dedup.insert(arc, id);
                c.bytes += size;
                id
            }
        };
        c.by_state.insert(state, id);
        c.masks[id as usize].clone()
    }

    /// Compute the mask of every state reachable from `start` by whole tokens, in parallel.
    /// Fails if the masks do not fit the budget or the deadline passes.
    pub fn precompute(
        &self,
        vocab: &Vocabulary,
        dfa: &LazyDfa,
        start: u32,
        deadline: Option<Deadline>,
    ) -> Result<IndexStats> {
        if self.atoms.is_some() {
            return Err(Error::InvalidArgument(
                "precomputing every mask is not supported for a grammar with token atoms (its \
                 masks are made as the output reaches them)"
                    .into(),
            ));
        }
        dfa.determinize_all(deadline)?;
        let frozen = {
            let view = dfa.view();
            let n = view.num_states();
            let stride = view.stride();
            let mut trans = Vec::with_capacity(n * stride);
            let mut accepting = Vec::with_capacity(n);
            for s in 0..n as u32 {
                for c in 0..stride {
                    trans.push(view.raw(s, c));
                }
                accepting.push(view.is_accepting(s));
            }
            Frozen {
                classes: *view.classes(),
                stride,
                trans,
                accepting,
            }
        };
        let mut seen: FxHashSet<u32> = FxHashSet::default();
        seen.insert(start);
        let mut frontier = vec![start];
        let words = vocab.mask_words();
        while !frontier.is_empty() {
            if let Some(d) = deadline {
                d.check(&format!(
                    "precomputing the index, {} states done",
                    seen.len()
                ))?;
            }
            let results: Vec<Result<Walked>> = frontier
                .par_iter()
                .map(|&s| {
                    let mut buf = vec![0u32; words];
                    let mut succ = FxHashSet::default();
                    let mut f = &frozen;
                    walk(vocab, &mut f, s, &mut buf, Some(&mut succ), None)
                        .map_err(|e| fill_bytes(e, dfa, s))?;
                    Ok((s, buf, succ))
                })
                .collect();
            let mut next = Vec::new();
            let mut c = self.write();
            for r in results {
                let (s, buf, succ) = r?;
                let size = buf.len() * 4;
                if !c.dedup.contains_key(buf.as_slice()) && c.bytes + size > self.budget_bytes {
                    return Err(Error::Budget(format!(
                        "the precomputed index needs more than {} MiB of distinct masks \
                         (mask cache budget); raise the budget or use lazy masks",
                        self.budget_bytes >> 20
                    )));
                }
                self.insert(&mut c, s, buf);
                for t in succ {
                    if seen.insert(t) {
                        next.push(t);
                    }
                }
            }
            drop(c);
            next.sort_unstable();
            frontier = next;
        }
        self.precomputed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(self.stats(dfa))
    }

    /// The cached masks: `(state → mask id, masks)`, state-sorted. Used to write index files.
    pub fn export(&self) -> MaskTable {
        let c = self.read();
        let mut by_state: Vec<(u32, u32)> = c.by_state.iter().map(|(&s, &m)| (s, m)).collect();
        by_state.sort_unstable();
        (by_state, c.masks.clone())
    }

    /// An index filled from an index file; marked precomputed (never evicted).
    pub fn from_parts(
        by_state: Vec<(u32, u32)>,
        masks: Vec<Arc<[u32]>>,
        budget_bytes: usize,
    ) -> TokenIndex {
        let mut c = MaskCache::default();
        for (i, m) in masks.iter().enumerate() {
            c.bytes += m.len() * 4;
            c.dedup.insert(m.clone(), i as u32);
        }
        c.masks = masks;
        c.by_state = by_state.into_iter().collect();
        TokenIndex {
            cache: RwLock::new(c),
            subtrees: Default::default(),
            last: Default::default(),
            use_last: true,
            budget_bytes,
            precomputed: std::sync::atomic::AtomicBool::new(true),
            atoms: None,
            #[cfg(test)]
            short_reps: Default::default(),
        }
    }

    /// Whether [`TokenIndex::precompute`] completed.
    pub fn is_precomputed(&self) -> bool {
        self.precomputed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Current sizes.
    pub fn stats(&self, dfa: &LazyDfa) -> IndexStats {
        let c = self.read();
        IndexStats {
            states: c.by_state.len(),
            distinct_masks: c.masks.len(),
            mask_bytes: c.bytes,
            dfa_states: dfa.num_states(),
        }
    }
}

fn fill_bytes(e: Error, dfa: &LazyDfa, state: u32) -> Error {
    match e {
        Error::Unspellable { .. } => match dfa.live_bytes(state) {
            Ok(b) if b.is_empty() => Error::Unspellable {
                bytes: "[] (the grammar cannot continue)".into(),
            },
            Ok(b) => Error::Unspellable {
                bytes: describe_bytes(&b),
            },
            Err(e) => e,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regex::RegexOptions;

    fn vocab(tokens: &[&str]) -> Vocabulary {
        let mut t: Vec<Vec<u8>> = tokens.iter().map(|s| s.as_bytes().to_vec()).collect();
        t.push(b"<eos>".to_vec());
        let eos = (t.len() - 1) as u32;
        Vocabulary::new(t, vec![eos], vec![], None).unwrap()
    }

    fn allowed(mask: &[u32]) -> Vec<u32> {
        (0..mask.len() as u32 * 32)
            .filter(|&t| mask[(t >> 5) as usize] >> (t & 31) & 1 == 1)
            .collect()
    }

    #[test]
    fn mask_matches_brute_force() {
        let v = vocab(&["a", "b", "ab", "ba", "c", "aa", "abc"]);
        let dfa = LazyDfa::new("(ab)*c?", &RegexOptions::default()).unwrap();
        let idx = TokenIndex::new(1 << 20);
        let m = idx.mask(&v, &dfa, dfa.start()).unwrap();
        // a, ab, c, abc, and EOS (empty string matches)
        assert_eq!(allowed(&m), vec![0, 2, 4, 6, 7]);
    }

    fn brute_force(v: &Vocabulary, dfa: &LazyDfa, state: u32) -> Vec<u32> {
        let mut out = Vec::new();
        for t in 0..v.vocab_size() as u32 {
            if v.is_eos(t) {
                if dfa.is_accepting(state) {
                    out.push(t);
                }
            } else if let Some(b) = v.token_bytes(t) {
                if !b.is_empty() && dfa.walk(state, b).unwrap() != DEAD {
                    out.push(t);
                }
            }
        }
        out
    }

    /// Masks that reuse the subtrees of earlier walks (states whose first bytes lead to the
    /// same states: a pattern searched for anywhere, progress lost on other characters) equal
    /// a brute force, at every prefix of a few strings, in an order that fills the cache first.
    #[test]
    fn subtree_reuse_matches_brute_force() {
        let v = vocab(&[
            "a", "b", "ab", "ba", "abc", "c", "ca", "cab", "x", "xa", "xab", "abx", "bca", "\"",
            "a\"", "c\"", "bc", "cc", "aab", "abca",
        ]);
        let dfa = LazyDfa::new("\"[a-cx]*abc[a-cx]*\"", &RegexOptions::default()).unwrap();
        let mut idx = TokenIndex::new(1 << 20);
        idx.use_last = false;
        let mut checked = 0;
        for text in ["\"xxabcxa\"", "\"abababc\"", "\"aabcab\"", "\"cabcabc\""] {
            for k in 0..text.len() {
                let s = dfa.walk(dfa.start(), &text.as_bytes()[..k]).unwrap();
                if s == DEAD {
                    continue;
                }
                let m = idx.mask(&v, &dfa, s).unwrap();
                assert_eq!(
                    allowed(&m),
                    brute_force(&v, &dfa, s),
                    "after {:?}",
                    &text[..k]
                );
                checked += 1;
            }
        }
        assert!(checked > 20);
        // the cache was used: some first byte led two different states to one state
        assert!(idx.subtrees.lock().unwrap().hits > 0);
    }

    /// Inside a string with length bounds (a counter), near a bound, the short tokens are
    /// allowed as from the state's representative for tokens of that many bytes and the long
    /// ones walked from the state itself: the masks equal a brute force at every count, near
    /// both bounds and between them.
    #[test]
    fn counted_strings_near_bounds_match_brute_force() {
        let long_body = "abcdefghijklmnopqrstu"; // 21 characters, past the ready masks
        let long_other = "abcdefghijklmnopqr\",1"; // 21 bytes, past the short trie
        let v = vocab(&[
            "a",
            "b",
            "ab",
            "abc",
            "abcd",
            "\"",
            "a\"",
            "ab\"",
            "\",",
            "\",1",
            "b\",1",
            "\\n",
            "a\\t",
            "aaaaaaaaaaaaaaaa",
            long_body,
            long_other,
            ",1",
            ",",
            "abcdefghij\"",
            "abcdefgh\\t\",",
        ]);
        let dfa = LazyDfa::new(
            "\"(?:[^\"\\\\\\x00-\\x1f]|\\\\[nt]){5,60}\"(?:,1)?",
            &RegexOptions::default(),
        )
        .unwrap();
        let mut idx = TokenIndex::new(1 << 20);
        idx.use_last = false;
        let mut text = String::from("\"");
        let mut checked = 0;
        for k in 0..70 {
            let s = dfa.walk(dfa.start(), text.as_bytes()).unwrap();
            if s == DEAD {
                break;
            }
            let m = idx.mask(&v, &dfa, s).unwrap();
            assert_eq!(
                allowed(&m),
                brute_force(&v, &dfa, s),
                "after {k} characters"
            );
            checked += 1;
            text.push(if k % 7 == 3 { 'q' } else { 'a' });
        }
        assert!(checked >= 60, "{checked}");
        assert!(
            idx.short_reps.load(std::sync::atomic::Ordering::Relaxed) > 0,
            "masks near the bound were made from representatives for short tokens"
        );
    }

    /// In a string under a format-like pattern and length bounds, near a bound, the short tokens
    /// come from the state's representative for short tokens and the long ones are walked: every
    /// count equals a brute force, with tokens longer than the short walks on both sides.
    #[test]
    fn sized_strings_near_bounds_match_brute_force() {
        let a20 = "a".repeat(20);
        let a30q = format!("{}\"", "a".repeat(30));
        let a17bcd = format!("{}bcd", "a".repeat(17));
        let a18bcdq = format!("{}bcd\"", "a".repeat(18));
        let v = vocab(&[
            "a",
            "aa",
            "aaaa",
            "b",
            "bc",
            "bcd",
            "bcd\"",
            "c",
            "d",
            "\"",
            "a\"",
            "\\u0061",
            "aaaaaaaaaaaaaaaa",
            &a20,
            &a30q,
            &a17bcd,
            &a18bcdq,
        ]);
        let opts = crate::json_schema::JsonSchemaOptions::default();
        for schema in [
            r#"{"type": "string", "pattern": "^a*(?:bcd)?$", "minLength": 40, "maxLength": 70}"#,
            r#"{"type": "string", "pattern": "^a*(?:bcd)?$", "maxLength": 45}"#,
        ] {
            let x: serde_json::Value = serde_json::from_str(schema).unwrap();
            let c = crate::json_schema::compile(&x, &opts).unwrap();
            let dfa = LazyDfa::from_expr("sized", &c.expr, &RegexOptions::default()).unwrap();
            for use_last in [false, true] {
                let mut idx = TokenIndex::new(1 << 20);
                idx.use_last = use_last;
                let mut text = String::from("\"");
                for k in 0..75 {
                    let s = dfa.walk(dfa.start(), text.as_bytes()).unwrap();
                    if s == DEAD {
                        break;
                    }
                    let m = idx.mask(&v, &dfa, s).unwrap();
                    assert_eq!(
                        allowed(&m),
                        brute_force(&v, &dfa, s),
                        "{schema}: {k} characters"
                    );
                    text.push('a');
                }
                assert!(
                    idx.short_reps.load(std::sync::atomic::Ordering::Relaxed) > 0,
                    "{schema}: masks near a bound were made from representatives"
                );
            }
        }
    }

    /// Masks made from the previous state's mask (few first bytes differ) equal a brute force
    /// and the masks of fresh indexes, along walks through a pattern searched for anywhere and
    /// through keys and values of a small object.
    #[test]
    fn delta_masks_match_brute_force() {
        let v = vocab(&[
            "a", "b", "ab", "ba", "abc", "c", "ca", "cab", "x", "xa", "xab", "abx", "bca", "\"",
            "a\"", "c\"", "bc", "cc", "aab", "abca", "{", "}", ":", ",", "\":", "{\"", "1", "12",
            "aa", "bb", "xx", "xxx", "\",\"",
        ]);
        let before = DELTAS.load(std::sync::atomic::Ordering::Relaxed);
        let cases = [
            (
                "\"[a-cx]*abc[a-cx]*\"",
                vec!["\"xxabcxa\"", "\"abababc\"", "\"aabcab\"", "\"cabcabc\""],
            ),
            (
                "\\{(\"(ab|abc|ca)\":(1|12|\"[a-c]*\"),)*\"x+\":1\\}",
                vec!["{\"ab\":1,\"abc\":\"ab\",\"xx\":1}", "{\"ca\":12,\"x\":1}"],
            ),
        ];
        for (re, texts) in cases {
            let dfa = LazyDfa::new(re, &RegexOptions::default()).unwrap();
            let idx = TokenIndex::new(1 << 20);
            for text in texts {
                for k in 0..text.len() {
                    let s = dfa.walk(dfa.start(), &text.as_bytes()[..k]).unwrap();
                    if s == DEAD {
                        continue;
                    }
                    let m = idx.mask(&v, &dfa, s).unwrap();
                    let fresh = TokenIndex::new(1 << 20).mask(&v, &dfa, s).unwrap();
                    assert_eq!(
                        allowed(&m),
                        brute_force(&v, &dfa, s),
                        "{re} after {:?}",
                        &text[..k]
                    );
                    assert_eq!(m, fresh);
                }
            }
        }
        assert!(DELTAS.load(std::sync::atomic::Ordering::Relaxed) > before);
    }

    #[test]
    fn string_body_walk_matches_brute_force() {
        let toks = [
            "a",
            "ab",
            "a\"",
            "\"",
            "\",",
            "\\",
            "\\n",
            "é",
            "日本",
            "x\n",
            " ",
            "\u{1F600}",
            "ab\"}",
            "z",
            "\"a",
            "}",
            "S",
            "SO",
            "SOURCE",
            "SOURCE\"",
            "Sx",
            "éa",
            "日",
            "a\u{1F600}",
        ];
        let mut t: Vec<Vec<u8>> = toks.iter().map(|s| s.as_bytes().to_vec()).collect();
        // partial UTF-8: the first byte of "é", a lone continuation byte, and a 4-byte prefix
        t.push(vec![0xC3]);
        t.push(vec![0xA9]);
        t.push(vec![0xF0, 0x9F]);
        t.push(b"<eos>".to_vec());
        let eos = (t.len() - 1) as u32;
        let v = Vocabulary::new(t, vec![eos], vec![], None).unwrap();
        let pats = [
            r#""([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"(,|\})"#,
            r#""[^"\\\x00-\x1f]{0,3}""#,
            r#""([^"\\\x00-\x1f]|\\n)*x""#,
            r#""[^"\\\x00-\x1fé]*""#,
            r#""(SOURCE|[^"S\\\x00-\x1f][^"\\\x00-\x1f]*|S[^"O\\\x00-\x1f][^"\\\x00-\x1f]*)":"#,
            r#""(é|[^"\\\x00-\x1fé][^"\\\x00-\x1f]*)""#,
            r#""(日[^"\\\x00-\x1f]*|[^"\\\x00-\x1f日]x*)""#,
            r#""[^"\\\x00-\x1f]{0,30}""#,
            r#""[^"\\\x00-\x1f]{2,5}x?"\}"#,
            r#""[^"\\\x00-\x1f]{0,2}[^"\\\x00-\x1f]*""#,
        ];
        for pat in pats {
            let dfa = LazyDfa::new(pat, &RegexOptions::default()).unwrap();
            for prefix in ["\"", "\"a", "\"ab", "\"é"] {
                let s = dfa.walk(dfa.start(), prefix.as_bytes()).unwrap();
                if s == DEAD {
                    continue;
                }
                let idx = TokenIndex::new(1 << 20);
                let m = idx.mask(&v, &dfa, s).unwrap();
                assert_eq!(
                    allowed(&m),
                    brute_force(&v, &dfa, s),
                    "{pat} after {prefix}"
                );
            }
        }
        // The first pattern's open string is closed under string characters: the slice is used.
        let dfa = LazyDfa::new(pats[0], &RegexOptions::default()).unwrap();
        let s = dfa.walk(dfa.start(), b"\"").unwrap();
        assert!(string_body_closed(&mut dfa.view(), s).unwrap());
        let s2 = dfa.walk(dfa.start(), b"\"").unwrap();
        let dfa2 = LazyDfa::new(pats[1], &RegexOptions::default()).unwrap();
        let s3 = dfa2.walk(dfa2.start(), b"\"").unwrap();
        assert!(!string_body_closed(&mut dfa2.view(), s3).unwrap());
        assert_eq!(s, s2);
    }

    /// Walks that take string-body tokens by subtree below a closed state (deeper than the first
    /// byte: a key trie's declared names, a choice between a literal and any string) and that
    /// walk only the tokens that are not string-body tokens after a closed first byte (long
    /// body tokens are set already) equal a brute force, lazily and precomputed; a length bound
    /// still cuts the long ones.
    #[test]
    fn closed_subtrees_match_brute_force() {
        let long = "abcdefghijklmnopqrstuvwx"; // 24 characters, longer than the ready masks
        let toks: Vec<String> = [
            "n", "na", "name", "name\"", "name\":", "nx", "nxy", "nxyz\"", "no", "nom", "nomé",
            "n\n", "é", "éa", "a", "ab", "\"", "\",", "\":", ":", " ", "x\n", "日本", "ab\"}", "S",
            "SOURCE", "SOURCE\"", "1", "\":1", "}", "e", "m", "o",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([
            long.to_string(),
            format!("n{long}"),
            format!("{long}\""),
            format!("na{long}"),
            format!("x{long}\"}}"),
        ])
        .collect();
        let mut t: Vec<Vec<u8>> = toks.iter().map(|s| s.as_bytes().to_vec()).collect();
        t.push(vec![b'n', 0xC3]); // ends inside a character
        t.push(vec![0xA9]); // and one that continues it
        t.push(b"<eos>".to_vec());
        let eos = (t.len() - 1) as u32;
        let v = Vocabulary::new(t, vec![eos], vec![], None).unwrap();
        let body = r#"[^"\\\x00-\x1f]"#;
        let pats = [
            // declared names "name" and "nom" beside any other key
            format!(
                r#""(name|nom|[^"n\\\x00-\x1f]{body}*|n[^"ao\\\x00-\x1f]{body}*|na[^"m\\\x00-\x1f]{body}*|no[^"m\\\x00-\x1f]{body}*|nam[^"e\\\x00-\x1f]{body}*|n|na|no|nam|(name|nom){body}+)":[0-9]"#
            ),
            // declared names only
            r#""(name|nom)":[0-9]"#.to_string(),
            // a literal or any string
            format!(r#""(SOURCE|{body}*)"(,|\}})"#),
            format!(r#""{body}*"\}}"#),
            format!(r#""{body}{{0,30}}""#),
            format!(r#""{body}{{0,20}}x?""#),
        ];
        for pat in &pats {
            let lazy = LazyDfa::new(pat, &RegexOptions::default()).unwrap();
            let eager = LazyDfa::new(pat, &RegexOptions::default()).unwrap();
            let eager_idx = TokenIndex::new(1 << 20);
            eager_idx
                .precompute(&v, &eager, eager.start(), None)
                .unwrap();
            for prefix in ["\"", "\"n", "\"na", "\"x", "\"nx", "\"S", "\"é", "\"ab"] {
                let s = lazy.walk(lazy.start(), prefix.as_bytes()).unwrap();
                let s2 = eager.walk(eager.start(), prefix.as_bytes()).unwrap();
                assert_eq!(s == DEAD, s2 == DEAD);
                if s == DEAD {
                    continue;
                }
                let want = brute_force(&v, &lazy, s);
                let idx = TokenIndex::new(1 << 20);
                let m = idx.mask(&v, &lazy, s).unwrap();
                assert_eq!(allowed(&m), want, "{pat} after {prefix}");
                let m2 = eager_idx.mask(&v, &eager, s2).unwrap();
                assert_eq!(allowed(&m2), want, "{pat} after {prefix}, precomputed");
            }
        }
    }

    /// Free text (every character but a few ASCII bytes leads back to one state: text between
    /// tool calls, a raw value up to its closing tag) takes its plain tokens from a text class
    /// and walks only the others; masks equal a brute force, lazily and precomputed, with
    /// non-ASCII and partial UTF-8 tokens, and a state that every plain character leaves for
    /// another one (the start) as well as one it leads back to itself.
    #[test]
    fn free_text_walk_matches_brute_force() {
        let toks: Vec<String> = [
            "a",
            "ab",
            "<",
            "</",
            "</p",
            "</p>",
            "<t",
            "<tool>",
            "{",
            "{\"",
            "{\"n",
            "x{",
            "a<",
            "é",
            "日本",
            "\n",
            "\n<",
            " ",
            "p>",
            ">",
            "tool",
            "<to",
            "\"",
            "\\",
            "\t",
            "ab<t",
            "\u{1F600}",
            "z",
            "}",
            "{\"name\": ",
            "o",
            "l",
            "x",
            "m",
            "e",
            "n",
            ":",
            "t",
            "/",
            "p",
        ]
        .iter()
        .map(|s| s.to_string())
        // plain words, so that a class setting `<` and `{` apart keeps most tokens
        .chain((0..60u8).map(|i| format!("w{}{i}", (b'a' + i % 26) as char)))
        // and words after a space, so that a class setting the space apart is not used
        .chain((0..60u8).map(|i| format!(" v{i}")))
        .chain(
            [" ", " b", " x", "{\"", "{\"n", "\" "]
                .iter()
                .map(|s| s.to_string()),
        )
        .collect();
        let mut t: Vec<Vec<u8>> = toks.iter().map(|s| s.as_bytes().to_vec()).collect();
        t.push(vec![0xC3]); // the first byte of "é" alone
        t.push(vec![0xA9]); // and one that continues it
        t.push(vec![0xA8]); // or another character
        t.push(vec![0xFF]);
        t.push(b"<eos>".to_vec());
        let eos = (t.len() - 1) as u32;
        let v = Vocabulary::new(t, vec![eos], vec![], None).unwrap();
        let pats = [
            // free text up to a closing tag
            r"([^<]|<[^/]|</[^p]|</p[^>])*</p>",
            // free text, then at most one call by its trigger
            r#"[^<{]*(<tool>[a-z]*</tool>|\{"name": "[a-z]+"\})?"#,
            // any text but a trigger, then the trigger
            r"[^<{]*<tool>x",
            // the start differs from the loop: a first character, then free text
            r"x[^<]*<",
            r"([^<]+)<t",
            // every character leads on, but not back: a bounded run, walked as before
            r"[^<]{2}<",
            r"[^<]{1,3}<",
            r"[^<][^\x00-\x7f]*<",
            // a non-ASCII character set apart: walked as before
            r"[^<é]*<",
            r"x[^<é]*<",
            // too many bytes set apart: walked as before
            r"[a-z]*<",
            // a class setting apart more than a quarter of the tokens is not used
            r"[^<w]*<",
            // a trigger begun: its next byte (a space) begins too many tokens for a class of
            // its own, so the loop's class is used without the tokens that begin with it
            r"([^<]|<[^a<]|<a[^ <])*<a x",
            r#"([^{<]|\{[^"{<]|\{"[^n{<]|\{"n[^"{<]|\{"n"[^ {<])*\{"n" x"#,
        ];
        let mut used = 0;
        let mut split = 0;
        for pat in pats {
            let lazy = LazyDfa::new(pat, &RegexOptions::default()).unwrap();
            let eager = LazyDfa::new(pat, &RegexOptions::default()).unwrap();
            let eager_idx = TokenIndex::new(1 << 20);
            eager_idx
                .precompute(&v, &eager, eager.start(), None)
                .unwrap();
            for prefix in [
                "", "a", "ab", "x", "xa", "<", "</", "{", "é", "ab<t", "<to", "a\n", "<a", "x<a",
                "{\"n", "{\"n\"", "ab{\"n\"",
            ] {
                let s = lazy.walk(lazy.start(), prefix.as_bytes()).unwrap();
                let s2 = eager.walk(eager.start(), prefix.as_bytes()).unwrap();
                assert_eq!(s == DEAD, s2 == DEAD);
                if s == DEAD {
                    continue;
                }
                if let Some((_, _, first, _)) = free_text_class(&v, &mut lazy.view(), s).unwrap() {
                    used += 1;
                    split += (first != 0) as usize;
                }
                let want = brute_force(&v, &lazy, s);
                let idx = TokenIndex::new(1 << 20);
                if want.is_empty() {
                    // (no token of this small vocabulary spells what may come next)
                    assert!(idx.mask(&v, &lazy, s).is_err());
                    continue;
                }
                let m = idx.mask(&v, &lazy, s).unwrap();
                assert_eq!(allowed(&m), want, "{pat} after {prefix:?}");
                let m2 = eager_idx.mask(&v, &eager, s2).unwrap();
                assert_eq!(allowed(&m2), want, "{pat} after {prefix:?}, precomputed");
            }
        }
        assert!(used >= 20, "the text classes were used {used} times");
        assert!(
            split >= 4,
            "classes without some first bytes were used {split} times"
        );
        let dfa = LazyDfa::new(r"[^<w]*<", &RegexOptions::default()).unwrap();
        let (apart, looped, _) = free_text_closed(&mut dfa.view(), dfa.start())
            .unwrap()
            .unwrap();
        assert!(!v.text_class(apart | looped).useful);
        assert!(v.text_class(1 << b'<' | 1 << b'{').useful);
        let dfa = LazyDfa::new(pats[5], &RegexOptions::default()).unwrap();
        assert!(free_text_closed(&mut dfa.view(), dfa.start())
            .unwrap()
            .is_none());
    }

    #[test]
    fn unspellable_state_is_an_error() {
        let v = vocab(&["a", "ab"]);
        let dfa = LazyDfa::new("ac", &RegexOptions::default()).unwrap();
        let idx = TokenIndex::new(1 << 20);
        let s = dfa.walk(dfa.start(), b"a").unwrap();
        let e = idx.mask(&v, &dfa, s).unwrap_err();
        assert!(e.to_string().contains("'c' (0x63)"), "{e}");
    }

    #[test]
    fn precompute_equals_lazy() {
        let v = vocab(&["1", "2", "12", "-", ".", "5", "e", "00"]);
        let pat = "-?(0|[1-9][0-9]*)(\\.[0-9]+)?";
        let d1 = LazyDfa::new(pat, &RegexOptions::default()).unwrap();
        let d2 = LazyDfa::new(pat, &RegexOptions::default()).unwrap();
        let lazy = TokenIndex::new(1 << 20);
        let eager = TokenIndex::new(1 << 20);
        let stats = eager.precompute(&v, &d2, d2.start(), None).unwrap();
        assert!(stats.states >= 3);
        for text in ["", "-", "-1", "12.5", "0.00", "1e", "-0.", "5"] {
            let s1 = d1.walk(d1.start(), text.as_bytes()).unwrap();
            let s2 = d2.walk(d2.start(), text.as_bytes()).unwrap();
            assert_eq!(s1 == DEAD, s2 == DEAD, "{text}");
            if s1 != DEAD {
                assert_eq!(
                    lazy.mask(&v, &d1, s1).unwrap(),
                    eager.mask(&v, &d2, s2).unwrap(),
                    "{text}"
                );
            }
        }
    }
}

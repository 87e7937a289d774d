//! Free text among triggers and excluded strings: the languages "text in which no trigger
//! or excluded string is complete yet" and, per trigger, "text that ends where that trigger is
//! first complete", over all characters, read as raw UTF-8. One character automaton over the
//! words (Aho–Corasick) gives both; an excluded string complete first ends the text for good,
//! and where several triggers are complete at once the longest counts. Used by structural tags
//! (`any_text`, `triggered_tags`, `dispatch`) and by xgrammar's `TagDispatch` in EBNF.

use std::collections::BTreeMap;

use super::charlang::{coreachable, CharDfa};
use super::expr::{self, Expr};
use crate::error::{Error, Result};

/// Most triggers and excluded strings one free text may have, and the most characters they
/// may hold together (the free-text automaton has one state per character).
pub(crate) const MAX_WORDS: usize = 1024;
pub(crate) const MAX_WORD_CHARS: usize = 65_536;

/// Most moves (character, target) the free-text automata of one free text may have: words
/// with many different characters make every state move on each of them.
pub(crate) const MAX_FREE_EDGES: usize = 1_000_000;

/// The free-text automaton of a set of triggers and excluded strings (Aho–Corasick over their
/// characters): which word, if any, is first complete at each point of a text.
pub(crate) struct FreeText {
    /// What is complete at each node, the fail chain included: an excluded string, else the
    /// longest trigger (by index), else nothing.
    done: Vec<Done>,
    /// The automaton's moves out of each trie node (of the words, by character): the characters
    /// with an edge on its fail chain and where each leads (any other character leads to the
    /// root). Built breadth first from the fail node's, at most [`MAX_FREE_EDGES`] in all.
    moves: Vec<BTreeMap<u32, usize>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Done {
    Nothing,
    Excluded,
    Trigger(usize),
}

impl FreeText {
    /// The automaton of `triggers` and `excludes`; a sentence (`Error::InvalidArgument`) when
    /// they are too many or too varied.
    pub(crate) fn new(triggers: &[String], excludes: &[String]) -> Result<FreeText> {
        let words = triggers.len() + excludes.len();
        let chars: usize = triggers
            .iter()
            .chain(excludes)
            .map(|w| w.chars().count())
            .sum();
        if words > MAX_WORDS || chars > MAX_WORD_CHARS {
            return Err(Error::InvalidArgument(format!(
                "too many triggers and excluded strings ({words}, {chars} characters; at most \
                 {MAX_WORDS} and {MAX_WORD_CHARS})"
            )));
        }
        let mut next: Vec<BTreeMap<u32, usize>> = vec![BTreeMap::new()];
        let mut word_at: Vec<Option<(Done, usize)>> = vec![None];
        let mut add = |w: &str, d: Done| {
            let mut s = 0;
            for c in w.chars() {
                let c = c as u32;
                s = match next[s].get(&c) {
                    Some(&t) => t,
                    None => {
                        next.push(BTreeMap::new());
                        word_at.push(None);
                        let t = next.len() - 1;
                        next[s].insert(c, t);
                        t
                    }
                };
            }
            let len = w.chars().count();
            let better = match (word_at[s], d) {
                (None, _) => true,
                (Some((Done::Excluded, _)), _) => false,
                (Some(_), Done::Excluded) => true,
                (Some((_, l)), _) => len > l,
            };
            if better {
                word_at[s] = Some((d, len));
            }
        };
        for (k, t) in triggers.iter().enumerate() {
            add(t, Done::Trigger(k));
        }
        for e in excludes {
            add(e, Done::Excluded);
        }
        // failure links, breadth first
        let n = next.len();
        let mut fail = vec![0usize; n];
        let mut done: Vec<Done> = word_at
            .iter()
            .map(|w| w.map_or(Done::Nothing, |x| x.0))
            .collect();
        let mut order = std::collections::VecDeque::new();
        order.push_back(0);
        while let Some(s) = order.pop_front() {
            let f = fail[s];
            // an excluded string complete through the fail chain wins; a trigger complete at
            // the node itself is longer than one through the chain
            match (done[s], done[f]) {
                (_, Done::Excluded) => done[s] = Done::Excluded,
                (Done::Nothing, d) => done[s] = d,
                _ => {}
            }
            let edges: Vec<(u32, usize)> = next[s].iter().map(|(&c, &t)| (c, t)).collect();
            for (c, t) in edges {
                // the longest proper suffix of `t`'s word that is a node
                let mut g = f;
                fail[t] = loop {
                    if s != 0 {
                        if let Some(&x) = next[g].get(&c) {
                            break x;
                        }
                    }
                    if g == 0 || s == 0 {
                        break 0;
                    }
                    g = fail[g];
                };
                order.push_back(t);
            }
        }
        // the moves, breadth first (a node's fail node is shallower, so done before it)
        let mut moves: Vec<BTreeMap<u32, usize>> = vec![BTreeMap::new(); n];
        let mut order = std::collections::VecDeque::from([0usize]);
        let mut edges = 0usize;
        let mut every = crate::budget::Every::default();
        while let Some(s) = order.pop_front() {
            every.tick("building a free-text automaton")?;
            let mut m = if s == 0 {
                BTreeMap::new()
            } else {
                moves[fail[s]].clone()
            };
            for (&c, &t) in &next[s] {
                m.insert(c, t);
                order.push_back(t);
            }
            edges += m.len();
            // one automaton for the text without a trigger, one per trigger
            if edges > MAX_FREE_EDGES || edges * (triggers.len() + 1) > 16 * MAX_FREE_EDGES {
                return Err(Error::InvalidArgument(format!(
                    "the triggers and excluded strings of this free text make an automaton of \
                     more than {MAX_FREE_EDGES} moves (too many different characters)"
                )));
            }
            moves[s] = m;
        }
        Ok(FreeText { done, moves })
    }

    /// The character DFA over the nodes where nothing is complete yet (the free text so far),
    /// plus, when `exit` is given, the nodes where that trigger is first complete (accepting,
    /// with no way on). Other nodes are left out.
    fn dfa(&self, exit: Option<usize>) -> Result<CharDfa> {
        let n = self.moves.len();
        let keep = |s: usize| match self.done[s] {
            Done::Nothing => true,
            Done::Trigger(k) => Some(k) == exit,
            Done::Excluded => false,
        };
        let mut id = vec![usize::MAX; n];
        let mut states = Vec::new();
        for (s, slot) in id.iter_mut().enumerate() {
            if keep(s) {
                *slot = states.len();
                states.push(s);
            }
        }
        let mut accept = Vec::with_capacity(states.len());
        let mut edges = Vec::with_capacity(states.len());
        let mut every = crate::budget::Every::default();
        for &s in &states {
            every.tick("building a free-text automaton")?;
            let open = self.done[s] == Done::Nothing;
            accept.push(if exit.is_some() { !open } else { open });
            let mut out: Vec<(u32, u32, usize)> = Vec::new();
            if open {
                // the characters with a move of their own; any other one leads to the root
                let mut lo = 0u32;
                let root = id[0];
                for (&c, &t) in &self.moves[s] {
                    if c > lo && root != usize::MAX {
                        out.push((lo, c - 1, root));
                    }
                    if keep(t) {
                        out.push((c, c, id[t]));
                    }
                    lo = c + 1;
                }
                if lo <= 0x10FFFF && root != usize::MAX {
                    out.push((lo, 0x10FFFF, root));
                }
            }
            edges.push(out);
        }
        Ok(CharDfa {
            start: id[0],
            accept,
            edges,
        })
    }

    /// Free text with no trigger or excluded string complete in it (it may end anywhere).
    pub(crate) fn end(&self) -> Result<Expr> {
        if self.done[0] != Done::Nothing {
            return Err(Error::InvalidArgument(
                "an empty trigger or excluded string".into(),
            ));
        }
        dfa_expr(trim(self.dfa(None)?))
    }

    /// [`FreeText::end`] of `min..=max` characters.
    pub(crate) fn end_within(&self, min: u32, max: Option<u32>) -> Result<Expr> {
        if self.done[0] != Done::Nothing {
            return Err(Error::InvalidArgument(
                "an empty trigger or excluded string".into(),
            ));
        }
        match expr::raw_counted_text_dfa(&trim(self.dfa(None)?), min, max) {
            Some(Some(e)) => Ok(e),
            Some(None) => Ok(Expr::empty()),
            None => Err(Error::InvalidArgument(
                "a bound on characters over these excluded strings is not supported".into(),
            )),
        }
    }

    /// Free text that ends where trigger `k` is first complete (`None`: no text does).
    pub(crate) fn to_trigger(&self, k: usize) -> Result<Option<Expr>> {
        let d = trim(self.dfa(Some(k))?);
        if d.accept.is_empty() {
            return Ok(None);
        }
        dfa_expr(d).map(Some)
    }
}

fn dfa_expr(d: CharDfa) -> Result<Expr> {
    expr::raw_text_dfa(&d)
        .ok_or_else(|| Error::Internal("a free-text automaton did not build".into()))
}

/// `d` with only the states that can reach acceptance (an empty automaton when none, the
/// start included, can).
fn trim(d: CharDfa) -> CharDfa {
    let n = d.accept.len();
    let arcs = (d.edges.iter().enumerate()).flat_map(|(s, es)| es.iter().map(move |e| (s, e.2)));
    let live = coreachable(&d.accept, arcs);
    if d.start >= n || !live[d.start] {
        return CharDfa {
            start: 0,
            accept: Vec::new(),
            edges: Vec::new(),
        };
    }
    let mut id = vec![usize::MAX; n];
    let mut k = 0;
    for (s, slot) in id.iter_mut().enumerate() {
        if live[s] {
            *slot = k;
            k += 1;
        }
    }
    let mut accept = Vec::with_capacity(k);
    let mut edges = Vec::with_capacity(k);
    for s in 0..n {
        if live[s] {
            accept.push(d.accept[s]);
            edges.push(
                d.edges[s]
                    .iter()
                    .filter(|&&(_, _, t)| live[t])
                    .map(|&(a, b, t)| (a, b, id[t]))
                    .collect(),
            );
        }
    }
    CharDfa {
        start: id[d.start],
        accept,
        edges,
    }
}

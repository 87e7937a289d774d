//! Complete DFAs over bytes with the Boolean operations a regex lacks: intersection and
//! complement, and concatenation, union and repetition of such languages (for lexemes written
//! with `&` and `~`, see [`super::lexer::LexLang`]). Built whole, within a state budget.
//!
//! A [`ByteDfa`] is complete: every state has a transition on every byte (a dead state is a
//! state like any other, with no accepting state reachable). The complement of a language is
//! over all byte strings, so it may hold text that is not UTF-8.

use regex_automata::nfa::thompson::{self, State};
use regex_automata::util::primitives::StateID;
use regex_syntax::hir::Hir;
use rustc_hash::FxHashMap;

use crate::error::{Error, Result};

/// Most states one DFA of these operations may have.
pub const MAX_BYTE_DFA_STATES: usize = 20_000;
/// Most states of the NFA combining DFAs (a repetition copies its body).
const MAX_ENFA_STATES: usize = 200_000;

/// A complete DFA over bytes.
#[derive(Clone, Debug)]
pub struct ByteDfa {
    /// `states × 256`
    trans: Vec<u32>,
    accept: Vec<bool>,
    start: u32,
}

/// An NFA with epsilon moves, for combining DFAs (each state: byte edges and epsilons).
#[derive(Default)]
struct Enfa {
    edges: Vec<Vec<(u8, u8, u32)>>,
    eps: Vec<Vec<u32>>,
    accept: Vec<bool>,
}

impl Enfa {
    fn add(&mut self) -> u32 {
        self.edges.push(Vec::new());
        self.eps.push(Vec::new());
        self.accept.push(false);
        (self.edges.len() - 1) as u32
    }

    /// Copies `d` in: (its start, its accepting states).
    fn embed(&mut self, d: &ByteDfa) -> Result<(u32, Vec<u32>)> {
        if self.edges.len() + d.accept.len() > MAX_ENFA_STATES {
            return Err(too_large());
        }
        let base = self.edges.len() as u32;
        let n = d.accept.len();
        for _ in 0..n {
            self.add();
        }
        let live = d.live();
        for s in 0..n {
            if !live[s] {
                continue;
            }
            let row = &d.trans[s * 256..(s + 1) * 256];
            let mut b = 0usize;
            while b < 256 {
                let t = row[b];
                let mut e = b;
                while e + 1 < 256 && row[e + 1] == t {
                    e += 1;
                }
                if live[t as usize] {
                    self.edges[base as usize + s].push((b as u8, e as u8, base + t));
                }
                b = e + 1;
            }
        }
        let acc = (0..n)
            .filter(|&s| d.accept[s])
            .map(|s| base + s as u32)
            .collect();
        Ok((base + d.start, acc))
    }

    fn closure(&self, set: &mut Vec<u32>) {
        let mut seen: rustc_hash::FxHashSet<u32> = set.iter().copied().collect();
        let mut stack = set.clone();
        while let Some(s) = stack.pop() {
            for &t in &self.eps[s as usize] {
                if seen.insert(t) {
                    set.push(t);
                    stack.push(t);
                }
            }
        }
        set.sort_unstable();
        set.dedup();
    }

    /// Subset construction from `start`.
    fn determinize(&self, start: u32) -> Result<ByteDfa> {
        let mut first = vec![start];
        self.closure(&mut first);
        let mut ids: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
        let mut sets = vec![first.clone()];
        ids.insert(first, 0);
        let mut trans = Vec::new();
        let mut accept = Vec::new();
        let mut i = 0;
        while i < sets.len() {
            if sets.len() > MAX_BYTE_DFA_STATES {
                return Err(too_large());
            }
            crate::budget::check("building a lexeme's DFA")?;
            let set = sets[i].clone();
            accept.push(set.iter().any(|&s| self.accept[s as usize]));
            // the targets of each byte, gathered edge by edge
            let mut by_byte: Vec<Vec<u32>> = vec![Vec::new(); 256];
            for &s in &set {
                for &(lo, hi, t) in &self.edges[s as usize] {
                    for b in lo..=hi {
                        by_byte[b as usize].push(t);
                    }
                }
            }
            for mut next in by_byte {
                self.closure(&mut next);
                let id = match ids.get(&next) {
                    Some(&id) => id,
                    None => {
                        let id = sets.len() as u32;
                        ids.insert(next.clone(), id);
                        sets.push(next);
                        id
                    }
                };
                trans.push(id);
            }
            i += 1;
        }
        Ok(ByteDfa {
            trans,
            accept,
            start: 0,
        })
    }
}

fn too_large() -> Error {
    Error::Budget(format!(
        "a lexeme built as a DFA (written with `&` or `~`, a `%regex` substring) needs more \
         than {MAX_BYTE_DFA_STATES} states"
    ))
}

impl ByteDfa {
    /// The DFA of a HIR's language (full match).
    pub fn from_hir(h: &Hir, nfa_bytes: usize) -> Result<ByteDfa> {
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .which_captures(thompson::WhichCaptures::None)
                    .utf8(false)
                    .nfa_size_limit(Some(nfa_bytes)),
            )
            .build_from_hir(h)
            .map_err(|e| Error::Budget(format!("a lexeme's automaton is too large ({e})")))?;
        // the NFA as an epsilon NFA
        let mut e = Enfa::default();
        for _ in 0..nfa.states().len() {
            e.add();
        }
        for (i, st) in nfa.states().iter().enumerate() {
            match st {
                State::ByteRange { trans } => {
                    e.edges[i].push((trans.start, trans.end, trans.next.as_u32()))
                }
                State::Sparse(sp) => {
                    for t in sp.transitions.iter() {
                        e.edges[i].push((t.start, t.end, t.next.as_u32()));
                    }
                }
                State::Dense(d) => {
                    for (b, t) in d.transitions.iter().enumerate() {
                        if *t != StateID::ZERO {
                            e.edges[i].push((b as u8, b as u8, t.as_u32()));
                        }
                    }
                }
                State::Union { alternates } => {
                    e.eps[i].extend(alternates.iter().map(|a| a.as_u32()))
                }
                State::BinaryUnion { alt1, alt2 } => {
                    e.eps[i].extend([alt1.as_u32(), alt2.as_u32()])
                }
                State::Capture { next, .. } => e.eps[i].push(next.as_u32()),
                State::Look { .. } => {
                    return Err(Error::InvalidArgument(
                        "anchors and word boundaries cannot stand in a lexeme".into(),
                    ))
                }
                State::Match { .. } => e.accept[i] = true,
                State::Fail => {}
            }
        }
        e.determinize(nfa.start_anchored().as_u32())
    }

    /// The contiguous runs of `chunks` (`chunks[i..j]` joined, for any `i <= j`, the empty
    /// string included): a chain of the chunks entered at any point and left at any point.
    pub fn substrings(chunks: &[String]) -> Result<ByteDfa> {
        let mut e = Enfa::default();
        let start = e.add();
        let mut at = e.add();
        e.eps[start as usize].push(at);
        e.accept[at as usize] = true;
        for c in chunks {
            if e.edges.len() + c.len() > MAX_ENFA_STATES {
                return Err(too_large());
            }
            for &b in c.as_bytes() {
                let next = e.add();
                e.edges[at as usize].push((b, b, next));
                at = next;
            }
            e.eps[start as usize].push(at);
            e.accept[at as usize] = true;
        }
        e.determinize(start)
    }

    /// The strings in both.
    pub fn and(&self, o: &ByteDfa) -> Result<ByteDfa> {
        let mut ids: FxHashMap<(u32, u32), u32> = FxHashMap::default();
        let mut pairs = vec![(self.start, o.start)];
        ids.insert(pairs[0], 0);
        let (mut trans, mut accept) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < pairs.len() {
            if pairs.len() > MAX_BYTE_DFA_STATES {
                return Err(too_large());
            }
            crate::budget::check("building a lexeme's DFA")?;
            let (a, b) = pairs[i];
            accept.push(self.accept[a as usize] && o.accept[b as usize]);
            for c in 0..256 {
                let p = (
                    self.trans[a as usize * 256 + c],
                    o.trans[b as usize * 256 + c],
                );
                let id = *ids.entry(p).or_insert_with(|| {
                    pairs.push(p);
                    (pairs.len() - 1) as u32
                });
                trans.push(id);
            }
            i += 1;
        }
        Ok(ByteDfa {
            trans,
            accept,
            start: 0,
        })
    }

    /// Every byte string not in it.
    pub fn not(&self) -> ByteDfa {
        ByteDfa {
            trans: self.trans.clone(),
            accept: self.accept.iter().map(|a| !a).collect(),
            start: self.start,
        }
    }

    /// The concatenation of `parts`.
    pub fn concat(parts: &[ByteDfa]) -> Result<ByteDfa> {
        let mut e = Enfa::default();
        let start = e.add();
        let mut ends = vec![start];
        for d in parts {
            let (s, acc) = e.embed(d)?;
            for &x in &ends {
                e.eps[x as usize].push(s);
            }
            ends = acc;
        }
        for x in ends {
            e.accept[x as usize] = true;
        }
        e.determinize(start)
    }

    /// The union of `parts`.
    pub fn alt(parts: &[ByteDfa]) -> Result<ByteDfa> {
        let mut e = Enfa::default();
        let start = e.add();
        for d in parts {
            let (s, acc) = e.embed(d)?;
            e.eps[start as usize].push(s);
            for x in acc {
                e.accept[x as usize] = true;
            }
        }
        e.determinize(start)
    }

    /// `min` to `max` (unbounded: `None`) copies.
    pub fn rep(&self, min: u32, max: Option<u32>) -> Result<ByteDfa> {
        let copies = max.unwrap_or(min).max(min) as usize;
        if copies > 1_000 {
            return Err(too_large());
        }
        let mut e = Enfa::default();
        let start = e.add();
        let mut ends = vec![start];
        let mut out: Vec<u32> = if min == 0 { vec![start] } else { Vec::new() };
        for k in 1..=copies.max(1) {
            let (s, acc) = e.embed(self)?;
            for &x in &ends {
                e.eps[x as usize].push(s);
            }
            if max.is_none() && k == copies.max(1) {
                // the last copy loops
                for &x in &acc {
                    e.eps[x as usize].push(s);
                }
            }
            if k as u32 >= min {
                out.extend(&acc);
            }
            ends = acc;
        }
        for x in out {
            e.accept[x as usize] = true;
        }
        e.determinize(start)
    }

    /// Whether each state can reach an accepting one.
    pub fn live(&self) -> Vec<bool> {
        let n = self.accept.len();
        let mut live = self.accept.clone();
        loop {
            let mut changed = false;
            for s in 0..n {
                if !live[s]
                    && self.trans[s * 256..(s + 1) * 256]
                        .iter()
                        .any(|&t| live[t as usize])
                {
                    live[s] = true;
                    changed = true;
                }
            }
            if !changed {
                return live;
            }
        }
    }

    /// The start state.
    pub fn start(&self) -> u32 {
        self.start
    }

    /// The state after `b`.
    pub fn next(&self, s: u32, b: u8) -> u32 {
        self.trans[s as usize * 256 + b as usize]
    }

    /// Whether `s` accepts.
    pub fn accepts(&self, s: u32) -> bool {
        self.accept[s as usize]
    }

    /// Number of states.
    pub fn len(&self) -> usize {
        self.accept.len()
    }

    /// Whether it has no state (never: a DFA has its start).
    pub fn is_empty(&self) -> bool {
        self.accept.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dfa(p: &str) -> ByteDfa {
        ByteDfa::from_hir(&regex_syntax::Parser::new().parse(p).unwrap(), 1 << 20).unwrap()
    }

    fn run(d: &ByteDfa, s: &str) -> bool {
        let mut q = d.start();
        for &b in s.as_bytes() {
            q = d.next(q, b);
        }
        d.accepts(q)
    }

    #[test]
    fn boolean_and_regular_operations() {
        let both = dfa("[a-z]+").and(&dfa("[abcABC]+")).unwrap();
        assert!(run(&both, "abc") && !run(&both, "abd") && !run(&both, "A") && !run(&both, ""));
        let no_ab = dfa("[abcd]+")
            .and(&dfa("(?s:.*)[ab](?s:.*)").not())
            .unwrap();
        assert!(run(&no_ab, "cdc") && !run(&no_ab, "cad"));
        let cat = ByteDfa::concat(&[dfa("a"), no_ab.clone()]).unwrap();
        assert!(run(&cat, "acd") && !run(&cat, "aab"));
        let r = dfa("ab").rep(2, Some(3)).unwrap();
        assert!(!run(&r, "ab") && run(&r, "abab") && run(&r, "ababab") && !run(&r, "abababab"));
        let star = dfa("ab").rep(0, None).unwrap();
        assert!(run(&star, "") && run(&star, "ababab") && !run(&star, "aba"));
        let u = ByteDfa::alt(&[dfa("x"), dfa("y+")]).unwrap();
        assert!(run(&u, "x") && run(&u, "yyy") && !run(&u, "xy"));
    }
}

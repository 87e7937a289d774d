//! A boolean algebra on regular languages over decoded characters (Unicode scalar values:
//! `0..=0x10FFFF` without the surrogate block).
//!
//! String constraints are first built as a HIR over decoded characters (see `string.rs`);
//! this module intersects, complements and tests such languages for emptiness, and turns the
//! result back into a character HIR that `string::encode` accepts.
//!
//! A [`Lang`] is a lazily evaluated expression tree: leaves are character HIRs, literals,
//! length ranges and explicit [`CharDfa`]s; inner nodes are `and`, `or`, `not`. Nothing is
//! built until [`Lang::is_empty`] or [`Lang::to_hir`]:
//!
//! 1. every HIR / literal / DFA leaf becomes a Thompson NFA whose transitions are labelled by
//!    character sets;
//! 2. the alphabet is split into *minterms*: the classes of characters that no set in the
//!    whole expression distinguishes (characters mentioned nowhere form one class, so
//!    complements stay exact);
//! 3. the tree is evaluated bottom-up into complete DFAs over those classes: subset
//!    construction for leaves, reachable product for `and`/`or`, flipped acceptance for `not`,
//!    each result minimized (Hopcroft);
//! 4. for `to_hir`, states that cannot reach acceptance are dropped and the DFA is turned into
//!    an expression by state elimination, always eliminating the state with the fewest
//!    `in × out` edges; parallel edges merge into one character class, self-loops become `*`,
//!    and a few rewrites keep the result small (`x x{a,b}` → `x{a+1,b+1}`, `ε | x x{0,k}` →
//!    `x{0,k+1}`, common prefixes and suffixes of alternatives factored out).
//!
//! Every construction is bounded by a [`LangBudget`] and fails with a message instead of
//! growing without bound.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;
use std::sync::Arc;

use regex_syntax::hir::{Class, Hir, HirKind};
use rustc_hash::FxHashMap;

use super::hirs;

const MAX_CHAR: u32 = 0x10FFFF;
const SURROGATE_LO: u32 = 0xD800;
const SURROGATE_HI: u32 = 0xDFFF;
/// Largest transition table (states × character classes) built at once.
const MAX_CELLS: usize = 1 << 22;

/// Limits for building automata and the output expression.
#[derive(Debug, Clone)]
pub(crate) struct LangBudget {
    /// Largest automaton built at any step: every DFA (a leaf's subset construction, each
    /// product before minimization). NFAs of leaves may have up to 16 times as many states.
    pub max_states: usize,
    /// Largest `hirs::weight` of the HIR returned by `to_hir`.
    pub max_weight: u64,
    /// Deepest nesting (concatenations, alternations, repetitions) of the returned HIR.
    pub max_depth: u32,
}

impl Default for LangBudget {
    fn default() -> Self {
        LangBudget {
            max_states: 4096,
            max_weight: 200_000,
            max_depth: 250,
        }
    }
}

/// An explicit DFA over characters, for callers that build automata directly.
///
/// `edges[s]` lists `(lo, hi, target)`: characters `lo..=hi` (code points; the surrogate
/// block is ignored) lead from `s` to `target`. A character with no edge leads to a dead
/// state. Overlapping ranges with different targets are read as a nondeterministic choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CharDfa {
    pub start: usize,
    pub accept: Vec<bool>,
    pub edges: Vec<Vec<(u32, u32, usize)>>,
}

/// A regular language over characters, as a lazily evaluated expression.
#[derive(Debug, Clone)]
pub(crate) struct Lang(Arc<Node>);

#[derive(Debug)]
enum Node {
    Any,
    Nothing,
    Hir(Hir),
    Lit(Vec<char>),
    Len(u64, Option<u64>),
    Dfa(CharDfa),
    And(Lang, Lang),
    Or(Lang, Lang),
    Not(Lang),
}

fn check_hir(h: &Hir) -> Result<(), String> {
    match h.kind() {
        HirKind::Empty => Ok(()),
        HirKind::Literal(l) => std::str::from_utf8(&l.0)
            .map(|_| ())
            .map_err(|_| "a literal is not valid UTF-8".to_string()),
        HirKind::Class(Class::Unicode(_)) => Ok(()),
        HirKind::Class(Class::Bytes(b)) => {
            if b.ranges().iter().any(|r| r.end() > 0x7F) {
                Err("byte classes beyond ASCII are not characters".into())
            } else {
                Ok(())
            }
        }
        HirKind::Look(_) => Err(
            "anchors and word boundaries cannot be combined with other string constraints".into(),
        ),
        HirKind::Repetition(r) => check_hir(&r.sub),
        HirKind::Capture(c) => check_hir(&c.sub),
        HirKind::Concat(xs) | HirKind::Alternation(xs) => xs.iter().try_for_each(check_hir),
    }
}

impl Lang {
    fn node(n: Node) -> Lang {
        Lang(Arc::new(n))
    }

    /// The language of a HIR over decoded characters (no look-around).
    pub fn from_hir(h: &Hir) -> Result<Lang, String> {
        check_hir(h)?;
        Ok(Lang::node(Node::Hir(h.clone())))
    }

    /// The language accepted by an explicit character DFA.
    pub fn from_dfa(d: &CharDfa) -> Result<Lang, String> {
        let n = d.edges.len();
        if d.accept.len() != n {
            return Err(format!(
                "a character DFA has {} states but {} acceptance flags",
                n,
                d.accept.len()
            ));
        }
        if d.start >= n {
            return Err("a character DFA's start state does not exist".into());
        }
        for es in &d.edges {
            for &(lo, hi, t) in es {
                if lo > hi || hi > MAX_CHAR || t >= n {
                    return Err(format!(
                        "a character DFA has an invalid edge ({lo:#x}, {hi:#x}, {t})"
                    ));
                }
            }
        }
        Ok(Lang::node(Node::Dfa(d.clone())))
    }

    /// Every string.
    pub fn any() -> Lang {
        Lang::node(Node::Any)
    }

    /// No string.
    pub fn nothing() -> Lang {
        Lang::node(Node::Nothing)
    }

    /// Exactly `s`.
    pub fn literal(s: &str) -> Lang {
        Lang::node(Node::Lit(s.chars().collect()))
    }

    /// Every string of `min..=max` characters (`max: None`: no upper bound).
    pub fn len_between(min: u64, max: Option<u64>) -> Lang {
        match max {
            Some(m) if m < min => Lang::nothing(),
            None if min == 0 => Lang::any(),
            _ => Lang::node(Node::Len(min, max)),
        }
    }

    pub fn and(&self, o: &Lang) -> Lang {
        match (&*self.0, &*o.0) {
            (Node::Nothing, _) | (_, Node::Any) => self.clone(),
            (_, Node::Nothing) | (Node::Any, _) => o.clone(),
            _ => Lang::node(Node::And(self.clone(), o.clone())),
        }
    }

    pub fn or(&self, o: &Lang) -> Lang {
        match (&*self.0, &*o.0) {
            (Node::Any, _) | (_, Node::Nothing) => self.clone(),
            (_, Node::Any) | (Node::Nothing, _) => o.clone(),
            _ => Lang::node(Node::Or(self.clone(), o.clone())),
        }
    }

    pub fn not(&self) -> Lang {
        match &*self.0 {
            Node::Any => Lang::nothing(),
            Node::Nothing => Lang::any(),
            Node::Not(x) => x.clone(),
            _ => Lang::node(Node::Not(self.clone())),
        }
    }

    /// Whether `s` is in the language (evaluated directly on the expression, no automaton).
    pub fn matches(&self, s: &str) -> bool {
        let cs: Vec<char> = s.chars().collect();
        self.matches_chars(&cs)
    }

    fn matches_chars(&self, cs: &[char]) -> bool {
        match &*self.0 {
            Node::Any => true,
            Node::Nothing => false,
            Node::Hir(h) => {
                let mut from = vec![false; cs.len() + 1];
                from[0] = true;
                hir_step(h, cs, &from)[cs.len()]
            }
            Node::Lit(l) => l.as_slice() == cs,
            Node::Len(min, max) => {
                let n = cs.len() as u64;
                n >= *min && max.is_none_or(|m| n <= m)
            }
            Node::Dfa(d) => {
                let mut cur = vec![false; d.edges.len()];
                cur[d.start] = true;
                for &c in cs {
                    let c = c as u32;
                    let mut next = vec![false; d.edges.len()];
                    for (s, _) in cur.iter().enumerate().filter(|x| *x.1) {
                        for &(lo, hi, t) in &d.edges[s] {
                            if lo <= c && c <= hi {
                                next[t] = true;
                            }
                        }
                    }
                    cur = next;
                }
                cur.iter().zip(&d.accept).any(|(a, b)| *a && *b)
            }
            Node::And(a, b) => a.matches_chars(cs) && b.matches_chars(cs),
            Node::Or(a, b) => a.matches_chars(cs) || b.matches_chars(cs),
            Node::Not(a) => !a.matches_chars(cs),
        }
    }

    /// Whether the language has no string at all.
    pub fn is_empty(&self, b: &LangBudget) -> Result<bool, String> {
        let d = Ctx::build(self, b)?;
        Ok(!d.dfa.accept.iter().any(|&a| a))
    }

    /// A HIR over decoded characters (Unicode classes and literals, concatenation,
    /// alternation, repetition; no look-around) of the same language.
    pub fn to_hir(&self, b: &LangBudget) -> Result<Hir, String> {
        let d = Ctx::build(self, b)?;
        dfa_hir(&d.dfa, &d.alpha, b)
    }
}

impl Lang {
    /// The minimal DFA of the language, without states that cannot reach acceptance (so a
    /// character with no edge ends every match); `None` when the language is empty. Edges of a
    /// state are sorted and disjoint.
    pub fn to_char_dfa(&self, b: &LangBudget) -> Result<Option<CharDfa>, String> {
        let d = Ctx::build(self, b)?;
        let (dfa, alpha) = (&d.dfa, &d.alpha);
        let n = dfa.n();
        let live = live_states(dfa);
        if !live[0] {
            return Ok(None);
        }
        let mut id = vec![usize::MAX; n];
        let mut order = Vec::new();
        for s in (0..n).filter(|&s| live[s]) {
            id[s] = order.len();
            order.push(s);
        }
        let mut edges = Vec::with_capacity(order.len());
        for &s in &order {
            let mut e: Vec<(u32, u32, usize)> = Vec::new();
            for c in 0..dfa.k {
                let t = dfa.next(s, c);
                if live[t] {
                    e.extend(
                        alpha.class_ranges[c]
                            .iter()
                            .map(|&(lo, hi)| (lo, hi, id[t])),
                    );
                }
            }
            e.sort_unstable();
            // join adjacent ranges into the same state
            let mut joined: Vec<(u32, u32, usize)> = Vec::with_capacity(e.len());
            for (lo, hi, t) in e {
                match joined.last_mut() {
                    Some(l)
                        if l.2 == t
                            && (l.1 + 1 == lo
                                || (l.1 + 1 == SURROGATE_LO && lo == SURROGATE_HI + 1)) =>
                    {
                        l.1 = hi
                    }
                    _ => joined.push((lo, hi, t)),
                }
            }
            edges.push(joined);
        }
        Ok(Some(CharDfa {
            start: id[0],
            accept: order.iter().map(|&s| dfa.accept[s]).collect(),
            edges,
        }))
    }
}

/// The HIR (over decoded characters) of the language of an explicit character DFA, minimized
/// first. Errors when the budget is exceeded or the DFA is malformed.
pub(crate) fn dfa_to_hir(d: &CharDfa, b: &LangBudget) -> Result<Hir, String> {
    Lang::from_dfa(d)?.to_hir(b)
}

// ---------------------------------------------------------------------------------------------
// HIR membership (for `matches`): the set of end positions reachable from a set of start
// positions.

fn hir_step(h: &Hir, cs: &[char], from: &[bool]) -> Vec<bool> {
    let n = cs.len();
    let mut out = vec![false; n + 1];
    match h.kind() {
        HirKind::Empty => out.copy_from_slice(from),
        HirKind::Literal(l) => {
            let lit: Vec<char> = String::from_utf8_lossy(&l.0).chars().collect();
            for i in (0..=n).filter(|&i| from[i]) {
                if cs[i..].starts_with(&lit) {
                    out[i + lit.len()] = true;
                }
            }
        }
        HirKind::Class(c) => {
            for i in (0..n).filter(|&i| from[i]) {
                let ch = cs[i];
                let hit = match c {
                    Class::Unicode(u) => {
                        u.ranges().iter().any(|r| r.start() <= ch && ch <= r.end())
                    }
                    Class::Bytes(b) => b.ranges().iter().any(|r| {
                        u32::from(r.start()) <= ch as u32 && ch as u32 <= u32::from(r.end())
                    }),
                };
                if hit {
                    out[i + 1] = true;
                }
            }
        }
        HirKind::Look(_) => {}
        HirKind::Capture(c) => return hir_step(&c.sub, cs, from),
        HirKind::Concat(xs) => {
            let mut cur = from.to_vec();
            for x in xs {
                cur = hir_step(x, cs, &cur);
            }
            return cur;
        }
        HirKind::Alternation(xs) => {
            for x in xs {
                for (o, v) in out.iter_mut().zip(hir_step(x, cs, from)) {
                    *o |= v;
                }
            }
        }
        HirKind::Repetition(r) => {
            // The step is a union-distributive function of the position set, and it either
            // accepts the empty string (then sets only grow) or strictly advances positions
            // (then sets die out), so both loops stop after at most n + 2 rounds.
            let mut cur = from.to_vec();
            for _ in 0..r.min {
                if !cur.iter().any(|&x| x) {
                    return cur;
                }
                let next = hir_step(&r.sub, cs, &cur);
                if next == cur {
                    break;
                }
                cur = next;
            }
            let mut acc = cur.clone();
            let extra = r.max.map(|m| m.saturating_sub(r.min));
            let mut i = 0u32;
            while extra.is_none_or(|e| i < e) {
                cur = hir_step(&r.sub, cs, &cur);
                let mut changed = false;
                for (a, &v) in acc.iter_mut().zip(&cur) {
                    if v && !*a {
                        *a = true;
                        changed = true;
                    }
                }
                if !changed {
                    break;
                }
                i += 1;
            }
            return acc;
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Character sets and the alphabet partition.

/// Sorted, merged, surrogate-free inclusive ranges.
fn norm(mut v: Vec<(u32, u32)>) -> Vec<(u32, u32)> {
    v.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        for (x, y) in [(a, b.min(SURROGATE_LO - 1)), (a.max(SURROGATE_HI + 1), b)] {
            if x > y {
                continue;
            }
            match out.last_mut() {
                Some(l) if x <= l.1.saturating_add(1) => l.1 = l.1.max(y),
                _ => out.push((x, y)),
            }
        }
    }
    out
}

#[derive(Default)]
struct Sets {
    list: Vec<Vec<(u32, u32)>>,
    ids: HashMap<Vec<(u32, u32)>, u32>,
}

impl Sets {
    fn intern(&mut self, ranges: Vec<(u32, u32)>) -> u32 {
        let r = norm(ranges);
        if let Some(&i) = self.ids.get(&r) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(r.clone());
        self.ids.insert(r, i);
        i
    }
}

/// The alphabet split into classes of characters that no set distinguishes.
struct Alphabet {
    k: usize,
    /// class → its characters (normalized ranges)
    class_ranges: Vec<Vec<(u32, u32)>>,
    /// set id → the classes it contains
    set_classes: Vec<Vec<u32>>,
}

fn partition(sets: &[Vec<(u32, u32)>]) -> Alphabet {
    let mut bounds = vec![0, SURROGATE_LO, SURROGATE_HI + 1, MAX_CHAR + 1];
    for s in sets {
        for &(a, b) in s {
            bounds.push(a);
            bounds.push(b + 1);
        }
    }
    bounds.sort_unstable();
    bounds.dedup();
    // elementary intervals [bounds[i], bounds[i+1]), without the surrogate block
    let ivs: Vec<(u32, u32)> = bounds
        .windows(2)
        .map(|w| (w[0], w[1] - 1))
        .filter(|&(a, _)| a != SURROGATE_LO)
        .collect();
    let mut sig: Vec<Vec<u32>> = vec![Vec::new(); ivs.len()];
    for (si, s) in sets.iter().enumerate() {
        for &(a, b) in s {
            let mut i = ivs.partition_point(|iv| iv.0 < a);
            while i < ivs.len() && ivs[i].1 <= b {
                sig[i].push(si as u32);
                i += 1;
            }
        }
    }
    let mut ids: HashMap<&[u32], u32> = HashMap::new();
    let mut class_of = Vec::with_capacity(ivs.len());
    let mut class_ranges: Vec<Vec<(u32, u32)>> = Vec::new();
    for (i, s) in sig.iter().enumerate() {
        let c = *ids.entry(s.as_slice()).or_insert_with(|| {
            class_ranges.push(Vec::new());
            (class_ranges.len() - 1) as u32
        });
        class_ranges[c as usize].push(ivs[i]);
        class_of.push(c);
    }
    let class_ranges: Vec<_> = class_ranges.into_iter().map(norm).collect();
    let mut set_classes: Vec<Vec<u32>> = vec![Vec::new(); sets.len()];
    for (i, s) in sig.iter().enumerate() {
        for &si in s {
            set_classes[si as usize].push(class_of[i]);
        }
    }
    for v in &mut set_classes {
        v.sort_unstable();
        v.dedup();
    }
    Alphabet {
        k: class_ranges.len(),
        class_ranges,
        set_classes,
    }
}

// ---------------------------------------------------------------------------------------------
// NFAs of leaves.

struct Nfa {
    eps: Vec<Vec<u32>>,
    /// (set id, target)
    tr: Vec<Vec<(u32, u32)>>,
    start: u32,
    end: u32,
}

struct NfaBuilder<'a> {
    eps: Vec<Vec<u32>>,
    tr: Vec<Vec<(u32, u32)>>,
    limit: usize,
    sets: &'a mut Sets,
}

impl NfaBuilder<'_> {
    fn state(&mut self) -> Result<u32, String> {
        if self.eps.len() >= self.limit {
            return Err(format!(
                "a regular expression among these string constraints needs more than {} NFA \
                 states (counted repetitions are expanded)",
                self.limit
            ));
        }
        self.eps.push(Vec::new());
        self.tr.push(Vec::new());
        Ok((self.eps.len() - 1) as u32)
    }

    fn eps(&mut self, a: u32, b: u32) {
        self.eps[a as usize].push(b);
    }

    fn set(&mut self, ranges: Vec<(u32, u32)>) -> Result<(u32, u32), String> {
        let a = self.state()?;
        let b = self.state()?;
        let id = self.sets.intern(ranges);
        self.tr[a as usize].push((id, b));
        Ok((a, b))
    }

    fn chars(&mut self, cs: &[char]) -> Result<(u32, u32), String> {
        let start = self.state()?;
        let mut cur = start;
        for &c in cs {
            let next = self.state()?;
            let id = self.sets.intern(vec![(c as u32, c as u32)]);
            self.tr[cur as usize].push((id, next));
            cur = next;
        }
        Ok((start, cur))
    }

    /// A fragment (entry, exit) for `h`; every fragment has at least one fresh state.
    fn hir(&mut self, h: &Hir) -> Result<(u32, u32), String> {
        match h.kind() {
            HirKind::Empty | HirKind::Look(_) => {
                let s = self.state()?;
                Ok((s, s))
            }
            HirKind::Literal(l) => {
                let cs: Vec<char> = String::from_utf8_lossy(&l.0).chars().collect();
                self.chars(&cs)
            }
            HirKind::Class(Class::Unicode(u)) => self.set(
                u.ranges()
                    .iter()
                    .map(|r| (r.start() as u32, r.end() as u32))
                    .collect(),
            ),
            HirKind::Class(Class::Bytes(b)) => self.set(
                b.ranges()
                    .iter()
                    .map(|r| (u32::from(r.start()), u32::from(r.end())))
                    .collect(),
            ),
            HirKind::Capture(c) => self.hir(&c.sub),
            HirKind::Concat(xs) => {
                let start = self.state()?;
                let mut cur = start;
                for x in xs {
                    let (a, b) = self.hir(x)?;
                    self.eps(cur, a);
                    cur = b;
                }
                Ok((start, cur))
            }
            HirKind::Alternation(xs) => {
                let start = self.state()?;
                let end = self.state()?;
                for x in xs {
                    let (a, b) = self.hir(x)?;
                    self.eps(start, a);
                    self.eps(b, end);
                }
                Ok((start, end))
            }
            HirKind::Repetition(r) => {
                let start = self.state()?;
                let mut cur = start;
                for _ in 0..r.min {
                    let (a, b) = self.hir(&r.sub)?;
                    self.eps(cur, a);
                    cur = b;
                }
                match r.max {
                    None => {
                        // a loop state: cur → hub ⇄ sub
                        let hub = self.state()?;
                        self.eps(cur, hub);
                        let (a, b) = self.hir(&r.sub)?;
                        self.eps(hub, a);
                        self.eps(b, hub);
                        Ok((start, hub))
                    }
                    Some(max) => {
                        // nested optionals: every skip jumps straight to the end, so closures
                        // stay small (x{0,3} = (x(x(x)?)?)?)
                        let end = self.state()?;
                        for _ in r.min..max {
                            let (a, b) = self.hir(&r.sub)?;
                            self.eps(cur, end);
                            self.eps(cur, a);
                            cur = b;
                        }
                        self.eps(cur, end);
                        Ok((start, end))
                    }
                }
            }
        }
    }

    fn finish(self, (start, end): (u32, u32)) -> Nfa {
        Nfa {
            eps: self.eps,
            tr: self.tr,
            start,
            end,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// DFAs over the alphabet classes.

/// A complete DFA over `k` classes; the start state is 0.
#[derive(Debug, Clone)]
struct Dfa {
    k: usize,
    trans: Vec<u32>,
    accept: Vec<bool>,
}

impl Dfa {
    fn n(&self) -> usize {
        self.accept.len()
    }

    fn next(&self, s: usize, c: usize) -> usize {
        self.trans[s * self.k + c] as usize
    }

    fn constant(k: usize, accept: bool) -> Dfa {
        Dfa {
            k,
            trans: vec![0; k],
            accept: vec![accept],
        }
    }
}

fn too_many_states(b: &LangBudget) -> String {
    format!(
        "the combination of these string constraints needs more than {} automaton states",
        b.max_states
    )
}

fn check_cells(n: usize, k: usize) -> Result<(), String> {
    if n.saturating_mul(k) > MAX_CELLS {
        return Err(format!(
            "the combination of these string constraints distinguishes too many character \
             classes ({k}) for an automaton of {n} states"
        ));
    }
    Ok(())
}

fn closure(nfa: &Nfa, seeds: &[u32], seen: &mut [u32], gen: u32, stack: &mut Vec<u32>) -> Vec<u32> {
    let mut out = Vec::new();
    for &s in seeds {
        if seen[s as usize] != gen {
            seen[s as usize] = gen;
            stack.push(s);
        }
    }
    while let Some(s) = stack.pop() {
        out.push(s);
        for &t in &nfa.eps[s as usize] {
            if seen[t as usize] != gen {
                seen[t as usize] = gen;
                stack.push(t);
            }
        }
    }
    out.sort_unstable();
    out
}

/// Subset construction (complete: the empty subset is the dead state).
fn determinize(nfa: &Nfa, alpha: &Alphabet, b: &LangBudget) -> Result<Dfa, String> {
    let k = alpha.k;
    let max_entries = b.max_states.saturating_mul(1024);
    let mut seen = vec![0u32; nfa.eps.len()];
    let mut gen = 1u32;
    let mut stack = Vec::new();
    let mut ids: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
    let mut subsets: Vec<Vec<u32>> = Vec::new();
    let start = closure(nfa, &[nfa.start], &mut seen, gen, &mut stack);
    let mut entries = start.len();
    ids.insert(start.clone(), 0);
    subsets.push(start);
    let mut trans: Vec<u32> = Vec::new();
    let mut accept = Vec::new();
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); k];
    let mut i = 0;
    while i < subsets.len() {
        check_cells(i + 1, k)?;
        accept.push(subsets[i].binary_search(&nfa.end).is_ok());
        for &s in &subsets[i] {
            for &(set, t) in &nfa.tr[s as usize] {
                for &c in &alpha.set_classes[set as usize] {
                    buckets[c as usize].push(t);
                }
            }
        }
        for bucket in buckets.iter_mut() {
            gen += 1;
            let target = closure(nfa, bucket, &mut seen, gen, &mut stack);
            bucket.clear();
            let id = match ids.get(&target) {
                Some(&id) => id,
                None => {
                    if subsets.len() >= b.max_states {
                        return Err(too_many_states(b));
                    }
                    entries += target.len();
                    if entries > max_entries {
                        return Err(too_many_states(b));
                    }
                    let id = subsets.len() as u32;
                    ids.insert(target.clone(), id);
                    subsets.push(target);
                    id
                }
            };
            trans.push(id);
        }
        i += 1;
    }
    Ok(Dfa { k, trans, accept })
}

/// The reachable product of two complete DFAs, accepting by `f`.
fn product(a: &Dfa, b: &Dfa, f: fn(bool, bool) -> bool, bud: &LangBudget) -> Result<Dfa, String> {
    let k = a.k;
    let mut ids: FxHashMap<(u32, u32), u32> = FxHashMap::default();
    let mut pairs = vec![(0u32, 0u32)];
    ids.insert((0, 0), 0);
    let mut trans = Vec::new();
    let mut accept = Vec::new();
    let mut i = 0;
    while i < pairs.len() {
        check_cells(i + 1, k)?;
        let (x, y) = pairs[i];
        accept.push(f(a.accept[x as usize], b.accept[y as usize]));
        for c in 0..k {
            let t = (a.trans[x as usize * k + c], b.trans[y as usize * k + c]);
            let id = match ids.get(&t) {
                Some(&id) => id,
                None => {
                    if pairs.len() >= bud.max_states {
                        return Err(too_many_states(bud));
                    }
                    let id = pairs.len() as u32;
                    ids.insert(t, id);
                    pairs.push(t);
                    id
                }
            };
            trans.push(id);
        }
        i += 1;
    }
    Ok(Dfa { k, trans, accept })
}

/// Renumber the states reachable from `start` in breadth-first order (start = 0).
fn canonical(d: &Dfa, start: usize) -> Dfa {
    let k = d.k;
    let mut map = vec![u32::MAX; d.n()];
    let mut order = vec![start];
    map[start] = 0;
    let mut i = 0;
    while i < order.len() {
        let s = order[i];
        for c in 0..k {
            let t = d.next(s, c);
            if map[t] == u32::MAX {
                map[t] = order.len() as u32;
                order.push(t);
            }
        }
        i += 1;
    }
    let mut trans = Vec::with_capacity(order.len() * k);
    for &s in &order {
        for c in 0..k {
            trans.push(map[d.next(s, c)]);
        }
    }
    Dfa {
        k,
        trans,
        accept: order.iter().map(|&s| d.accept[s]).collect(),
    }
}

/// Hopcroft's partition refinement; the result is the minimal complete DFA (start = 0).
fn minimize(d: &Dfa) -> Dfa {
    let n = d.n();
    let k = d.k;
    if n <= 1 {
        return d.clone();
    }
    // inverse transitions: sources of (class c, target t) at src[off[c*n+t]..off[c*n+t+1]]
    let mut off = vec![0u32; n * k + 1];
    for s in 0..n {
        for c in 0..k {
            off[c * n + d.next(s, c) + 1] += 1;
        }
    }
    for i in 1..off.len() {
        off[i] += off[i - 1];
    }
    let mut fill = off.clone();
    let mut src = vec![0u32; n * k];
    for s in 0..n {
        for c in 0..k {
            let slot = &mut fill[c * n + d.next(s, c)];
            src[*slot as usize] = s as u32;
            *slot += 1;
        }
    }
    drop(fill);

    let mut elems: Vec<u32> = (0..n as u32).filter(|&s| d.accept[s as usize]).collect();
    let n_acc = elems.len();
    elems.extend((0..n as u32).filter(|&s| !d.accept[s as usize]));
    let mut pos = vec![0usize; n];
    for (i, &s) in elems.iter().enumerate() {
        pos[s as usize] = i;
    }
    let mut block_of = vec![0usize; n];
    let mut bstart: Vec<usize> = Vec::new();
    let mut bend: Vec<usize> = Vec::new();
    for (a, b) in [(0, n_acc), (n_acc, n)] {
        if a < b {
            let id = bstart.len();
            bstart.push(a);
            bend.push(b);
            for &s in &elems[a..b] {
                block_of[s as usize] = id;
            }
        }
    }
    let mut in_work = vec![false; bstart.len()];
    let mut work = Vec::new();
    if bstart.len() == 2 {
        let smaller = if n_acc <= n - n_acc { 0 } else { 1 };
        in_work[smaller] = true;
        work.push(smaller);
    }
    let mut mcount = vec![0usize; bstart.len()];
    let mut marked = vec![false; n];
    let mut marked_list: Vec<u32> = Vec::new();
    let mut touched: Vec<usize> = Vec::new();
    while let Some(bl) = work.pop() {
        in_work[bl] = false;
        let members: Vec<u32> = elems[bstart[bl]..bend[bl]].to_vec();
        for c in 0..k {
            for &t in &members {
                let i = c * n + t as usize;
                for &s in &src[off[i] as usize..off[i + 1] as usize] {
                    let su = s as usize;
                    if marked[su] {
                        continue;
                    }
                    marked[su] = true;
                    marked_list.push(s);
                    let b = block_of[su];
                    let (i, j) = (pos[su], bstart[b] + mcount[b]);
                    elems.swap(i, j);
                    pos[elems[i] as usize] = i;
                    pos[elems[j] as usize] = j;
                    if mcount[b] == 0 {
                        touched.push(b);
                    }
                    mcount[b] += 1;
                }
            }
            for b in touched.drain(..) {
                let m = mcount[b];
                mcount[b] = 0;
                let size = bend[b] - bstart[b];
                if m == size {
                    continue;
                }
                // the new block takes the smaller part
                let nb = bstart.len();
                let mid = bstart[b] + m;
                if m <= size - m {
                    bstart.push(bstart[b]);
                    bend.push(mid);
                    bstart[b] = mid;
                } else {
                    bstart.push(mid);
                    bend.push(bend[b]);
                    bend[b] = mid;
                }
                for &s in &elems[bstart[nb]..bend[nb]] {
                    block_of[s as usize] = nb;
                }
                mcount.push(0);
                in_work.push(true);
                work.push(nb);
            }
            for s in marked_list.drain(..) {
                marked[s as usize] = false;
            }
        }
    }
    let nb = bstart.len();
    let mut trans = vec![0u32; nb * k];
    let mut accept = vec![false; nb];
    for b in 0..nb {
        let rep = elems[bstart[b]] as usize;
        accept[b] = d.accept[rep];
        for c in 0..k {
            trans[b * k + c] = block_of[d.next(rep, c)] as u32;
        }
    }
    canonical(&Dfa { k, trans, accept }, block_of[0])
}

// ---------------------------------------------------------------------------------------------
// Evaluation of an expression.

struct Built {
    dfa: Dfa,
    alpha: Alphabet,
}

struct Ctx<'b> {
    b: &'b LangBudget,
    alpha: Alphabet,
    nfas: HashMap<*const Node, Nfa>,
    memo: HashMap<*const Node, Rc<Dfa>>,
}

impl<'b> Ctx<'b> {
    fn build(l: &Lang, b: &'b LangBudget) -> Result<Built, String> {
        let mut sets = Sets::default();
        let mut nfas = HashMap::new();
        collect_nfas(l, b, &mut sets, &mut nfas)?;
        let alpha = partition(&sets.list);
        let mut ctx = Ctx {
            b,
            alpha,
            nfas,
            memo: HashMap::new(),
        };
        let d = ctx.eval(l)?;
        let dfa = Rc::try_unwrap(d).unwrap_or_else(|d| (*d).clone());
        Ok(Built {
            dfa,
            alpha: ctx.alpha,
        })
    }

    fn eval(&mut self, l: &Lang) -> Result<Rc<Dfa>, String> {
        let key = Arc::as_ptr(&l.0);
        if let Some(d) = self.memo.get(&key) {
            return Ok(d.clone());
        }
        let k = self.alpha.k;
        let d = match &*l.0 {
            Node::Any => Dfa::constant(k, true),
            Node::Nothing => Dfa::constant(k, false),
            Node::Hir(_) | Node::Lit(_) | Node::Dfa(_) => {
                let nfa = &self.nfas[&key];
                minimize(&determinize(nfa, &self.alpha, self.b)?)
            }
            Node::Len(min, max) => {
                // states 0..=top count characters; top loops (unbounded) or is dead
                let top = match max {
                    Some(m) => m.saturating_add(1),
                    None => *min,
                };
                if top >= self.b.max_states as u64 {
                    return Err(too_many_states(self.b));
                }
                let top = top as usize;
                check_cells(top + 1, k)?;
                let mut trans = Vec::with_capacity((top + 1) * k);
                let mut accept = Vec::with_capacity(top + 1);
                for s in 0..=top {
                    trans.extend(std::iter::repeat_n((s + 1).min(top) as u32, k));
                    let s = s as u64;
                    accept.push(s >= *min && max.is_none_or(|m| s <= m));
                }
                Dfa { k, trans, accept }
            }
            Node::And(a, b) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                minimize(&product(&a, &b, |x, y| x && y, self.b)?)
            }
            Node::Or(a, b) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                minimize(&product(&a, &b, |x, y| x || y, self.b)?)
            }
            Node::Not(a) => {
                let mut d = (*self.eval(a)?).clone();
                for x in &mut d.accept {
                    *x = !*x;
                }
                d
            }
        };
        let d = Rc::new(d);
        self.memo.insert(key, d.clone());
        Ok(d)
    }
}

fn collect_nfas(
    l: &Lang,
    b: &LangBudget,
    sets: &mut Sets,
    out: &mut HashMap<*const Node, Nfa>,
) -> Result<(), String> {
    let key = Arc::as_ptr(&l.0);
    if out.contains_key(&key) {
        return Ok(());
    }
    match &*l.0 {
        Node::Any | Node::Nothing | Node::Len(..) => return Ok(()),
        Node::And(x, y) | Node::Or(x, y) => {
            collect_nfas(x, b, sets, out)?;
            return collect_nfas(y, b, sets, out);
        }
        Node::Not(x) => return collect_nfas(x, b, sets, out),
        Node::Hir(_) | Node::Lit(_) | Node::Dfa(_) => {}
    }
    let mut nb = NfaBuilder {
        eps: Vec::new(),
        tr: Vec::new(),
        limit: b.max_states.saturating_mul(16),
        sets,
    };
    let nfa = match &*l.0 {
        Node::Hir(h) => {
            let f = nb.hir(h)?;
            nb.finish(f)
        }
        Node::Lit(cs) => {
            let f = nb.chars(cs)?;
            nb.finish(f)
        }
        Node::Dfa(d) => {
            let n = d.edges.len();
            if n + 1 > nb.limit {
                return Err(too_many_states(b));
            }
            for _ in 0..=n {
                nb.state()?;
            }
            let end = n as u32;
            for (s, es) in d.edges.iter().enumerate() {
                for &(lo, hi, t) in es {
                    let id = nb.sets.intern(vec![(lo, hi)]);
                    nb.tr[s].push((id, t as u32));
                }
                if d.accept[s] {
                    nb.eps(s as u32, end);
                }
            }
            nb.finish((d.start as u32, end))
        }
        _ => unreachable!("inner nodes return above"),
    };
    out.insert(key, nfa);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Expressions for state elimination.

#[derive(Debug, Clone, PartialEq, Eq)]
struct R(Rc<RNode>);

#[derive(Debug, PartialEq, Eq)]
struct RNode {
    kind: RKind,
    /// an estimate of `hirs::weight` of the HIR
    weight: u64,
    depth: u32,
}

#[derive(Debug, PartialEq, Eq)]
enum RKind {
    Eps,
    Set(Vec<(u32, u32)>),
    Cat(Vec<R>),
    Alt(Vec<R>),
    Rep(R, u32, Option<u32>),
}

impl R {
    fn mk(kind: RKind) -> R {
        let (weight, depth) = match &kind {
            RKind::Eps => (1, 1),
            RKind::Set(r) => {
                let w = if r.len() == 1 && r[0].0 == r[0].1 {
                    char::from_u32(r[0].0).map_or(2, |c| c.len_utf8() as u64)
                } else {
                    2
                };
                (w, 1)
            }
            RKind::Cat(xs) | RKind::Alt(xs) => (
                xs.iter().fold(1u64, |a, x| a.saturating_add(x.w())),
                1 + xs.iter().map(|x| x.0.depth).max().unwrap_or(0),
            ),
            RKind::Rep(x, min, max) => (
                u64::from(max.unwrap_or(*min).max(1))
                    .saturating_mul(x.w())
                    .saturating_add(1),
                1 + x.0.depth,
            ),
        };
        R(Rc::new(RNode {
            kind,
            weight,
            depth,
        }))
    }

    fn w(&self) -> u64 {
        self.0.weight
    }

    fn kind(&self) -> &RKind {
        &self.0.kind
    }

    fn eps() -> R {
        R::mk(RKind::Eps)
    }

    fn is_eps(&self) -> bool {
        matches!(self.kind(), RKind::Eps)
    }

    /// `(base, min, max)`: a repetition's parts, or `(self, 1, 1)`.
    fn as_rep(&self) -> (R, u32, Option<u32>) {
        match self.kind() {
            RKind::Rep(x, a, b) => (x.clone(), *a, *b),
            _ => (self.clone(), 1, Some(1)),
        }
    }

    /// The items of a concatenation (a single item otherwise).
    fn seq(&self) -> Vec<R> {
        match self.kind() {
            RKind::Cat(xs) => xs.clone(),
            RKind::Eps => vec![],
            _ => vec![self.clone()],
        }
    }
}

fn rep(x: R, min: u32, max: Option<u32>) -> R {
    if max == Some(0) || x.is_eps() {
        return R::eps();
    }
    if min == 1 && max == Some(1) {
        return x;
    }
    if let RKind::Rep(y, a, b) = x.kind() {
        let (a, b) = (*a, *b);
        // (y*)*, (y+)*, (y*){0,k} → y*
        if b.is_none() && a <= 1 && min == 0 {
            return rep(y.clone(), 0, None);
        }
        // (y?)*, (y?)+ → y*
        if a == 0 && b == Some(1) && max.is_none() {
            return rep(y.clone(), 0, None);
        }
        // (y{0|1,b})? → y{0,b}
        if min == 0 && max == Some(1) && a <= 1 {
            return rep(y.clone(), 0, b);
        }
    }
    R::mk(RKind::Rep(x, min, max))
}

fn opt(x: R) -> R {
    rep(x, 0, Some(1))
}

fn star(x: R) -> R {
    rep(x, 0, None)
}

type Counted = (R, u32, Option<u32>);

fn add_counts(x: &Counted, y: &Counted) -> Option<(u32, Option<u32>)> {
    let lo = x.1.checked_add(y.1)?;
    let hi = match (x.2, y.2) {
        (Some(a), Some(b)) => Some(a.checked_add(b)?),
        _ => None,
    };
    Some((lo, hi))
}

fn is_plain(x: &Counted) -> bool {
    (x.1, x.2) == (1, Some(1))
}

/// Whether the items of `flat[at..]` start with the concatenation `ys`.
fn spells(flat: &[Counted], at: usize, ys: &[R]) -> bool {
    flat.len() >= at + ys.len()
        && ys
            .iter()
            .zip(&flat[at..])
            .all(|(y, e)| *y == rep(e.0.clone(), e.1, e.2))
}

/// Append `x` to a concatenation, folding repeats into counted repetitions:
/// `x x{a,b}` → `x{a+1,b+1}`, `x{a,b} x{c,d}` → `x{a+c,b+d}`, `y z (yz){a,b}` → `(yz){a+1,b+1}`.
fn push_fold(flat: &mut Vec<Counted>, x: R) {
    flat.push(x.as_rep());
    loop {
        let n = flat.len();
        if n < 2 {
            return;
        }
        let (y, z) = (&flat[n - 2], &flat[n - 1]);
        if y.0 == z.0 && !(is_plain(y) && is_plain(z)) {
            if let Some((lo, hi)) = add_counts(y, z) {
                flat.pop();
                flat[n - 2].1 = lo;
                flat[n - 2].2 = hi;
                continue;
            }
        }
        // y z (yz){a,b}
        if let RKind::Cat(ys) = flat[n - 1].0.kind() {
            let m = ys.len();
            if n > m && spells(flat, n - 1 - m, ys) {
                let e = flat.pop().expect("non-empty");
                if let Some((lo, hi)) = add_counts(&e, &(e.0.clone(), 1, Some(1))) {
                    flat.truncate(n - 1 - m);
                    flat.push((e.0, lo, hi));
                    continue;
                }
                flat.push(e);
            }
        }
        // (yz){a,b} y z
        let mut folded = false;
        for j in (n.saturating_sub(33)..n - 1).rev() {
            if let RKind::Cat(ys) = flat[j].0.kind() {
                if ys.len() == n - 1 - j && spells(flat, j + 1, ys) {
                    let e = flat[j].clone();
                    if let Some((lo, hi)) = add_counts(&e, &(e.0.clone(), 1, Some(1))) {
                        flat.truncate(j);
                        flat.push((e.0, lo, hi));
                        folded = true;
                    }
                    break;
                }
            }
        }
        if !folded {
            return;
        }
    }
}

fn cat(items: Vec<R>) -> R {
    let mut flat: Vec<Counted> = Vec::new();
    for it in items {
        match it.kind() {
            RKind::Eps => {}
            RKind::Cat(xs) => xs.iter().for_each(|x| push_fold(&mut flat, x.clone())),
            _ => push_fold(&mut flat, it),
        }
    }
    let mut out: Vec<R> = flat.into_iter().map(|(x, a, b)| rep(x, a, b)).collect();
    match out.len() {
        0 => R::eps(),
        1 => out.pop().expect("one item"),
        _ => R::mk(RKind::Cat(out)),
    }
}

fn union_ranges(a: &[(u32, u32)], b: &[(u32, u32)]) -> Vec<(u32, u32)> {
    norm(a.iter().chain(b).copied().collect())
}

/// Whether two (non-alternation) expressions share a first or last item.
fn shares_end(a: &R, b: &R) -> bool {
    if matches!(a.kind(), RKind::Alt(_)) || matches!(b.kind(), RKind::Alt(_)) {
        return false;
    }
    let (x, y) = (a.seq(), b.seq());
    (!x.is_empty() && !y.is_empty()) && (x[0] == y[0] || x[x.len() - 1] == y[y.len() - 1])
}

fn alt2(e: R, x: R) -> R {
    if e == x {
        return e;
    }
    if e.is_eps() {
        return opt(x);
    }
    if x.is_eps() {
        return opt(e);
    }
    if let RKind::Rep(y, 0, Some(1)) = e.kind() {
        return opt(alt2(y.clone(), x));
    }
    if let RKind::Rep(y, 0, Some(1)) = x.kind() {
        return opt(alt2(e, y.clone()));
    }
    if let (RKind::Set(a), RKind::Set(b)) = (e.kind(), x.kind()) {
        return R::mk(RKind::Set(union_ranges(a, b)));
    }
    if shares_end(&e, &x) {
        let (a, b) = (e.seq(), x.seq());
        let m = a.len().min(b.len());
        let mut p = 0;
        while p < m && a[p] == b[p] {
            p += 1;
        }
        let mut s = 0;
        while s < m - p && a[a.len() - 1 - s] == b[b.len() - 1 - s] {
            s += 1;
        }
        let mid = alt2(
            cat(a[p..a.len() - s].to_vec()),
            cat(b[p..b.len() - s].to_vec()),
        );
        let mut items = a[..p].to_vec();
        items.push(mid);
        items.extend_from_slice(&a[a.len() - s..]);
        return cat(items);
    }
    let mut list: Vec<R> = match e.kind() {
        RKind::Alt(xs) => xs.clone(),
        _ => vec![e.clone()],
    };
    let news: Vec<R> = match x.kind() {
        RKind::Alt(xs) => xs.clone(),
        _ => vec![x.clone()],
    };
    for m in news {
        if list.contains(&m) {
            continue;
        }
        let merge = list.iter().position(|y| {
            matches!((y.kind(), m.kind()), (RKind::Set(_), RKind::Set(_))) || shares_end(y, &m)
        });
        match merge {
            Some(i) => {
                let y = list[i].clone();
                list[i] = alt2(y, m);
            }
            None => list.push(m),
        }
    }
    if list.len() == 1 {
        list.pop().expect("one item")
    } else {
        R::mk(RKind::Alt(list))
    }
}

fn r_to_hir(r: &R) -> Hir {
    match r.kind() {
        RKind::Eps => Hir::empty(),
        RKind::Set(rs) => {
            if rs.len() == 1 && rs[0].0 == rs[0].1 {
                if let Some(c) = char::from_u32(rs[0].0) {
                    return hirs::lit(c.encode_utf8(&mut [0; 4]));
                }
            }
            let chars: Vec<(char, char)> = rs
                .iter()
                .filter_map(|&(a, b)| Some((char::from_u32(a)?, char::from_u32(b)?)))
                .collect();
            hirs::class(&chars)
        }
        RKind::Cat(xs) => hirs::concat(xs.iter().map(r_to_hir).collect()),
        RKind::Alt(xs) => hirs::alt(xs.iter().map(r_to_hir).collect()),
        RKind::Rep(x, a, b) => hirs::rep(r_to_hir(x), *a, *b),
    }
}

fn too_big(b: &LangBudget) -> String {
    format!(
        "the regular expression for the combination of these string constraints would exceed \
         the size budget (weight {})",
        b.max_weight
    )
}

fn too_deep(b: &LangBudget) -> String {
    format!(
        "the regular expression for the combination of these string constraints would nest \
         deeper than {} levels",
        b.max_depth
    )
}

/// The states of `d` from which an accepting state can be reached.
fn live_states(d: &Dfa) -> Vec<bool> {
    let n = d.n();
    let mut rev: Vec<Vec<u32>> = vec![Vec::new(); n];
    for s in 0..n {
        for c in 0..d.k {
            rev[d.next(s, c)].push(s as u32);
        }
    }
    let mut live = d.accept.clone();
    let mut stack: Vec<usize> = (0..n).filter(|&s| live[s]).collect();
    while let Some(t) = stack.pop() {
        for &s in &rev[t] {
            if !live[s as usize] {
                live[s as usize] = true;
                stack.push(s as usize);
            }
        }
    }
    live
}

/// State elimination on the live part of a minimal DFA.
fn dfa_hir(d: &Dfa, alpha: &Alphabet, b: &LangBudget) -> Result<Hir, String> {
    let n = d.n();
    let k = d.k;
    // live: can reach acceptance (all states are reachable from 0)
    let live = live_states(d);
    if !live[0] {
        return Ok(hirs::alt(vec![]));
    }
    // node ids: DFA states 0..n (dead ones unused), S = n, F = n + 1
    let (start, fin) = (n, n + 1);
    let mut out: Vec<BTreeMap<usize, R>> = vec![BTreeMap::new(); n + 2];
    let mut inn: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n + 2];
    let mut total: u64 = 0;
    for s in (0..n).filter(|&s| live[s]) {
        let mut by_target: BTreeMap<usize, Vec<(u32, u32)>> = BTreeMap::new();
        for c in 0..k {
            let t = d.next(s, c);
            if live[t] {
                by_target
                    .entry(t)
                    .or_default()
                    .extend_from_slice(&alpha.class_ranges[c]);
            }
        }
        for (t, ranges) in by_target {
            let r = R::mk(RKind::Set(norm(ranges)));
            total += r.w();
            out[s].insert(t, r);
            inn[t].insert(s);
        }
        if d.accept[s] {
            out[s].insert(fin, R::eps());
            inn[fin].insert(s);
            total += 1;
        }
    }
    out[start].insert(0, R::eps());
    inn[0].insert(start);
    let limit = b.max_weight.saturating_mul(4);
    let mut remaining: Vec<usize> = (0..n).filter(|&s| live[s]).collect();
    while !remaining.is_empty() {
        // the state with the fewest in × out edges (self-loops aside)
        let (idx, &s) = remaining
            .iter()
            .enumerate()
            .min_by_key(|(_, &s)| {
                let loops = usize::from(out[s].contains_key(&s));
                let i = inn[s].len() - loops;
                let o = out[s].len() - loops;
                // ties: states far from the start first (chains fold into x{0,k})
                (i * o, i + o, std::cmp::Reverse(s))
            })
            .expect("non-empty");
        remaining.swap_remove(idx);
        let lp = out[s].remove(&s);
        inn[s].remove(&s);
        if let Some(l) = &lp {
            total -= l.w().min(total);
        }
        let mid = lp.map(star);
        let ins: Vec<(usize, R)> = std::mem::take(&mut inn[s])
            .into_iter()
            .map(|p| (p, out[p].remove(&s).expect("edge")))
            .collect();
        let outs: Vec<(usize, R)> = std::mem::take(&mut out[s]).into_iter().collect();
        for (q, r) in &outs {
            inn[*q].remove(&s);
            total -= r.w().min(total);
        }
        for (_, r) in &ins {
            total -= r.w().min(total);
        }
        for (p, rp) in &ins {
            for (q, rq) in &outs {
                let mut items = vec![rp.clone()];
                items.extend(mid.clone());
                items.push(rq.clone());
                let new = cat(items);
                let merged = match out[*p].remove(q) {
                    Some(e) => {
                        total -= e.w().min(total);
                        alt2(e, new)
                    }
                    None => new,
                };
                total = total.saturating_add(merged.w());
                if total > limit || merged.w() > limit {
                    return Err(too_big(b));
                }
                // edges only get wrapped further, so a deep one stays deep (and recursion over
                // the expression stays bounded)
                if merged.0.depth > b.max_depth {
                    return Err(too_deep(b));
                }
                out[*p].insert(*q, merged);
                inn[*q].insert(*p);
            }
        }
    }
    let r = match out[start].remove(&fin) {
        Some(r) => r,
        None => return Ok(hirs::alt(vec![])),
    };
    if r.0.depth > b.max_depth {
        return Err(too_deep(b));
    }
    if r.w() > limit {
        return Err(too_big(b));
    }
    let h = r_to_hir(&r);
    if hirs::weight(&h) > b.max_weight {
        return Err(too_big(b));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use proptest::prelude::*;

    use super::*;
    use crate::json_schema::compile::not_in;
    use crate::json_schema::string::{encode, search_form, translate_ecma};
    use crate::json_schema::test_util::Re;

    const ALPHA: [char; 5] = ['a', 'b', 'c', 'é', '😀'];

    /// Small regexes over (mostly) the test alphabet.
    const PATS: [&str; 22] = [
        "a*",
        "(ab|c)+",
        "[a-c]{1,2}",
        "é?😀*",
        "(a|é)*b",
        "[^a]*",
        "",
        "😀{2}",
        "a{0,3}",
        "(?:ab)*c?",
        "[b-é]+",
        ".",
        "(?i)A+B?",
        "[^😀]{2,}",
        r"\w{1,3}",
        "(a|b)*a(a|b)",
        ".*é.*",
        "[a😀]*c[a😀]*",
        "(é|😀)(é|😀)*",
        "b{2,}|c{0,1}",
        "(a|bc|😀é)*",
        "[^abc]",
    ];

    fn parse(p: &str) -> Hir {
        crate::regex::parse(p, 250).unwrap()
    }

    fn pat(p: &str) -> Lang {
        Lang::from_hir(&parse(p)).unwrap()
    }

    fn pat_res() -> &'static Vec<Re> {
        static RES: OnceLock<Vec<Re>> = OnceLock::new();
        RES.get_or_init(|| PATS.iter().map(|p| Re::new(&parse(p))).collect())
    }

    fn strings(max_len: usize) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut layer = vec![String::new()];
        for _ in 0..max_len {
            let mut next = Vec::new();
            for s in &layer {
                for c in ALPHA {
                    let mut t = s.clone();
                    t.push(c);
                    next.push(t);
                }
            }
            all.extend(next.iter().cloned());
            layer = next;
        }
        all
    }

    fn test_strings() -> &'static Vec<String> {
        static S: OnceLock<Vec<String>> = OnceLock::new();
        S.get_or_init(|| strings(4))
    }

    /// Output HIRs are over characters: no look-around, no non-ASCII byte classes.
    fn assert_char_hir(h: &Hir) {
        match h.kind() {
            HirKind::Look(_) => panic!("look-around in output"),
            HirKind::Class(Class::Bytes(b)) => {
                assert!(b.ranges().iter().all(|r| r.end() <= 0x7F), "byte class")
            }
            HirKind::Repetition(r) => assert_char_hir(&r.sub),
            HirKind::Capture(c) => assert_char_hir(&c.sub),
            HirKind::Concat(xs) | HirKind::Alternation(xs) => xs.iter().for_each(assert_char_hir),
            _ => {}
        }
    }

    fn to_hir(l: &Lang) -> Hir {
        let h = l.to_hir(&LangBudget::default()).unwrap();
        assert_char_hir(&h);
        encode(&h).expect("encode accepts the output");
        h
    }

    fn empty(l: &Lang) -> bool {
        l.is_empty(&LangBudget::default()).unwrap()
    }

    /// Exact equivalence, decided on automata.
    fn equivalent(a: &Lang, b: &Lang) -> bool {
        empty(&a.and(&b.not()).or(&b.and(&a.not())))
    }

    /// `matches`, the output HIR and `reference` agree on `strs`; the output HIR is equivalent.
    fn check(l: &Lang, reference: impl Fn(&str) -> bool, strs: &[String]) {
        let h = to_hir(l);
        let re = Re::new(&h);
        for s in strs {
            let want = reference(s);
            assert_eq!(l.matches(s), want, "matches({s:?}) for {l:?}");
            assert_eq!(re.is_match(s), want, "to_hir {h:?} on {s:?} for {l:?}");
        }
        let back = Lang::from_hir(&h).unwrap();
        assert!(
            equivalent(l, &back),
            "to_hir output {h:?} is not equivalent"
        );
    }

    #[derive(Debug, Clone)]
    enum E {
        Pat(usize),
        Lit(String),
        Len(u64, Option<u64>),
        Any,
        Nothing,
        And(Box<E>, Box<E>),
        Or(Box<E>, Box<E>),
        Not(Box<E>),
    }

    impl E {
        fn lang(&self) -> Lang {
            match self {
                E::Pat(i) => pat(PATS[*i]),
                E::Lit(s) => Lang::literal(s),
                E::Len(a, b) => Lang::len_between(*a, *b),
                E::Any => Lang::any(),
                E::Nothing => Lang::nothing(),
                E::And(a, b) => a.lang().and(&b.lang()),
                E::Or(a, b) => a.lang().or(&b.lang()),
                E::Not(a) => a.lang().not(),
            }
        }

        /// Brute-force membership: leaves by the crate's byte-level regex engine.
        fn member(&self, s: &str) -> bool {
            match self {
                E::Pat(i) => pat_res()[*i].is_match(s),
                E::Lit(t) => s == t,
                E::Len(a, b) => {
                    let n = s.chars().count() as u64;
                    n >= *a && b.is_none_or(|b| n <= b)
                }
                E::Any => true,
                E::Nothing => false,
                E::And(a, b) => a.member(s) && b.member(s),
                E::Or(a, b) => a.member(s) || b.member(s),
                E::Not(a) => !a.member(s),
            }
        }
    }

    fn expr() -> impl Strategy<Value = E> {
        let leaf = prop_oneof![
            6 => (0..PATS.len()).prop_map(E::Pat),
            2 => "[abcé😀]{0,3}".prop_map(E::Lit),
            2 => (0u64..4, prop::option::of(0u64..5)).prop_map(|(a, b)| E::Len(a, b)),
            1 => Just(E::Any),
            1 => Just(E::Nothing),
        ];
        leaf.prop_recursive(4, 24, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(a, b)| E::And(Box::new(a), Box::new(b))),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| E::Or(Box::new(a), Box::new(b))),
                inner.prop_map(|a| E::Not(Box::new(a))),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        #[test]
        fn random_expressions_agree_with_brute_force(e in expr()) {
            let l = e.lang();
            check(&l, |s| e.member(s), test_strings());
            let is_empty = empty(&l);
            let some = test_strings().iter().any(|s| e.member(s));
            prop_assert!(!(is_empty && some), "is_empty but {:?} has members", e);
        }

        #[test]
        fn random_dfas_agree_with_walking(
            n in 1usize..6,
            raw in prop::collection::vec((0usize..6, 0usize..8, 0usize..6), 0..20),
            acc in prop::collection::vec(any::<bool>(), 6),
        ) {
            // ranges over and around the test alphabet (some overlapping the surrogates)
            const RANGES: [(u32, u32); 8] = [
                ('a' as u32, 'a' as u32),
                ('b' as u32, 'c' as u32),
                ('c' as u32, 'é' as u32),
                ('é' as u32, 'é' as u32),
                (0x1F600, 0x1F600),
                (0, 0x10FFFF),
                (0xD000, 0xE100),
                ('a' as u32, 'b' as u32),
            ];
            let mut d = CharDfa { start: 0, accept: acc[..n].to_vec(), edges: vec![Vec::new(); n] };
            // keep it deterministic: one target per (state, range) and disjoint ranges per state
            for (s, r, t) in raw {
                let (s, t) = (s % n, t % n);
                let (lo, hi) = RANGES[r];
                if d.edges[s].iter().all(|&(a, b, _)| hi < a || b < lo) {
                    d.edges[s].push((lo, hi, t));
                }
            }
            let l = Lang::from_dfa(&d).unwrap();
            let h = dfa_to_hir(&d, &LangBudget::default()).unwrap();
            assert_char_hir(&h);
            let re = Re::new(&h);
            for s in test_strings() {
                prop_assert_eq!(re.is_match(s), l.matches(s), "{:?} on {:?}", d, s);
            }
            prop_assert!(equivalent(&l, &Lang::from_hir(&h).unwrap()));
        }
    }

    #[test]
    fn complement_of_names_is_not_in() {
        let names = ["ab", "a", "é😀", "", "abc"];
        let set = names
            .iter()
            .fold(Lang::nothing(), |acc, n| acc.or(&Lang::literal(n)));
        let not = set.not();
        let reference = Re::new(&not_in(
            &names
                .iter()
                .map(|n| n.chars().collect())
                .collect::<Vec<_>>(),
        ));
        check(&not, |s| !names.contains(&s), test_strings());
        for s in test_strings() {
            assert_eq!(not.matches(s), reference.is_match(s), "{s:?}");
        }
        // characters far away from the alphabet, next to the surrogate block, at the end
        for s in ["\u{D7FF}", "\u{E000}", "\u{10FFFF}", "a\u{10FFFF}", "\0"] {
            assert!(not.matches(s));
            assert!(Re::new(&to_hir(&not)).is_match(s), "{s:?}");
            assert!(reference.is_match(s));
        }
        // without the empty name
        let not2 = Lang::literal("x").or(&Lang::literal("yz")).not();
        assert!(not2.matches(""));
        assert!(equivalent(
            &not2,
            &Lang::from_hir(&not_in(&[vec!['x'], vec!['y', 'z']])).unwrap()
        ));
    }

    fn ecma(p: &str) -> Lang {
        let h = crate::regex::parse(&translate_ecma(p).unwrap(), 250).unwrap();
        Lang::from_hir(&search_form(&h)).unwrap()
    }

    #[test]
    fn pattern_and_length() {
        let l = ecma("^[a-c]+é?$").and(&Lang::len_between(2, Some(3)));
        check(
            &l,
            |s| {
                let n = s.chars().count();
                (2..=3).contains(&n)
                    && s.trim_end_matches('é').chars().all(|c| "abc".contains(c))
                    && s.matches('é').count() <= 1
                    && !s.starts_with('é')
            },
            test_strings(),
        );
        // unanchored search semantics
        let l = ecma("ab").and(&Lang::len_between(0, Some(3)));
        check(
            &l,
            |s| s.contains("ab") && s.chars().count() <= 3,
            test_strings(),
        );
        // a long bound stays compact: [a-z]{1,300} with a counted repetition
        let l = ecma("^[a-z]*$").and(&Lang::len_between(1, Some(300)));
        let h = to_hir(&l);
        assert!(hirs::weight(&h) < 1000, "{h:?}");
        let re = Re::new(&h);
        assert!(re.is_match(&"q".repeat(300)));
        assert!(!re.is_match(&"q".repeat(301)));
        assert!(!re.is_match(""));
        // minimum only
        let l = ecma("^a*$").and(&Lang::len_between(3, None));
        check(
            &l,
            |s| s.len() >= 3 && s.chars().all(|c| c == 'a'),
            test_strings(),
        );
    }

    #[test]
    fn emptiness() {
        assert!(empty(&pat("a+").and(&pat("b+"))));
        assert!(!empty(&pat("a+").and(&pat("[ab]+"))));
        assert!(empty(&Lang::any().not()));
        assert!(!empty(&Lang::any()));
        assert!(empty(&Lang::nothing()));
        assert!(empty(&Lang::len_between(3, Some(2))));
        assert!(empty(&pat("[^a]").and(&pat("a"))));
        assert!(!empty(&pat("").not().not()));
        assert!(empty(&pat("a{3}").and(&Lang::len_between(0, Some(2)))));
        assert!(empty(&pat(r"\p{Greek}+").and(&pat(r"[a-z]+"))));
        assert!(!empty(&pat(r"\p{L}+").and(&pat(r"\P{Latin}+"))));
        // an empty language becomes a HIR matching nothing
        let h = to_hir(&pat("a+").and(&pat("b+")));
        let re = Re::new(&h);
        assert!(test_strings().iter().all(|s| !re.is_match(s)));
    }

    #[test]
    fn complement_of_nothing_is_any() {
        // built through the automaton: not(a+ ∩ b+)
        let l = pat("a+").and(&pat("b+")).not();
        check(&l, |_| true, test_strings());
        assert!(equivalent(&l, &Lang::any()));
        let h = to_hir(&l);
        let re = Re::new(&h);
        for s in ["\u{10FFFF}", "\0\n", "日本語"] {
            assert!(re.is_match(s));
        }
        assert!(equivalent(&Lang::nothing().not(), &Lang::any()));
        assert!(equivalent(&pat("(?s:.)*"), &Lang::any()));
        assert!(!equivalent(&pat(".*"), &Lang::any()), "'.' excludes \\n");
    }

    #[test]
    fn double_negation() {
        for p in PATS {
            let x = pat(p);
            // ¬(¬x ∪ (a+ ∩ b+)) = x, through the automata (no syntactic shortcut)
            let y = x.not().or(&pat("a+").and(&pat("b+"))).not();
            let r = &pat_res()[PATS.iter().position(|q| *q == p).unwrap()];
            check(&y, |s| r.is_match(s), test_strings());
            assert!(equivalent(&x, &y), "{p}");
        }
    }

    #[test]
    fn budget_errors() {
        let b = LangBudget::default();
        let e = pat("(?s:.){0,5000}").to_hir(&b).unwrap_err();
        assert!(e.contains("4096 automaton states"), "{e}");
        let e = pat("(a|b)*a(a|b){20}").is_empty(&b).unwrap_err();
        assert!(e.contains("automaton states"), "{e}");
        let small = LangBudget {
            max_states: 1000,
            ..LangBudget::default()
        };
        let e = pat(".{0,2000}").to_hir(&small).unwrap_err();
        assert!(e.contains("1000 automaton states"), "{e}");
        let e = pat("((a{100}){100}){100}").to_hir(&b).unwrap_err();
        assert!(e.contains("NFA states"), "{e}");
        let e = Lang::len_between(0, Some(10_000)).to_hir(&b).unwrap_err();
        assert!(e.contains("automaton states"), "{e}");
        // products are bounded too
        let a = pat("(?s:.){0,3000}b");
        let c = pat("a(?s:.){0,3000}");
        let e = a.and(&c).not().to_hir(&b).unwrap_err();
        assert!(e.contains("automaton states"), "{e}");
        // the output size
        let tiny = LangBudget {
            max_weight: 20,
            ..LangBudget::default()
        };
        let e = pat("(abc|def|ghi){5}")
            .and(&pat("[a-i]*"))
            .to_hir(&tiny)
            .unwrap_err();
        assert!(e.contains("size budget"), "{e}");
        // a state-elimination blow-up is caught by the weight budget, not by memory
        let e = pat("(a|b)*a(a|b){9}").not().to_hir(&b).unwrap_err();
        assert!(
            e.contains("size budget") || e.contains("nest deeper"),
            "{e}"
        );
        // within budget: .{0,2000} comes back as one counted repetition
        let h = pat("(?s:.){0,2000}").to_hir(&b).unwrap();
        assert!(hirs::weight(&h) < 10_000, "{h:?}");
        let re = Re::new(&h);
        assert!(re.is_match(&"é".repeat(2000)));
        assert!(!re.is_match(&"é".repeat(2001)));
    }

    #[test]
    fn explicit_dfa_divisible_by_seven() {
        // state 7 = no digit read yet; state r = value mod 7
        let mut d = CharDfa {
            start: 7,
            accept: vec![false; 8],
            edges: vec![Vec::new(); 8],
        };
        d.accept[0] = true;
        for r in 0..8usize {
            let base = if r == 7 { 0 } else { r };
            for dig in 0..10u32 {
                let t = (base * 10 + dig as usize) % 7;
                let ch = '0' as u32 + dig;
                d.edges[r].push((ch, ch, t));
            }
        }
        let h = dfa_to_hir(&d, &LangBudget::default()).unwrap();
        assert_char_hir(&h);
        let re = Re::new(&h);
        for n in 0..3000u32 {
            assert_eq!(re.is_match(&n.to_string()), n % 7 == 0, "{n}");
            assert_eq!(re.is_match(&format!("0{n}")), n % 7 == 0, "0{n}");
        }
        assert!(!re.is_match(""));
        assert!(!re.is_match("7a"));
        // and combined with a pattern: no leading zeros
        let l = Lang::from_dfa(&d).unwrap().and(&pat("0|[1-9][0-9]*"));
        let re = Re::new(&to_hir(&l));
        assert!(re.is_match("0") && re.is_match("14") && !re.is_match("014") && !re.is_match("15"));
        // malformed DFAs are refused
        let bad = CharDfa {
            start: 0,
            accept: vec![true],
            edges: vec![vec![(0, 10, 3)]],
        };
        assert!(dfa_to_hir(&bad, &LangBudget::default()).is_err());
    }

    #[test]
    fn unicode_classes_and_matches() {
        let l = pat(r"\p{L}+").and(&pat(".*[a-z].*").not());
        let h = to_hir(&l);
        let re = Re::new(&h);
        for (s, want) in [
            ("É", true),
            ("日本", true),
            ("aé", false),
            ("", false),
            ("1", false),
        ] {
            assert_eq!(l.matches(s), want, "{s}");
            assert_eq!(re.is_match(s), want, "{s}");
        }
        assert!(Lang::any().matches("😀\u{10FFFF}"));
        assert!(Lang::literal("é😀").matches("é😀"));
        assert!(!Lang::literal("é😀").matches("é"));
        assert!(Lang::len_between(2, Some(2)).matches("😀😀"));
        assert!(!Lang::len_between(2, Some(2)).matches("😀"));
        // case-insensitive and ASCII byte classes
        let l = pat("(?i)k").and(&pat("(?-u:[a-z])").not());
        let re = Re::new(&to_hir(&l));
        assert!(re.is_match("K") && re.is_match("\u{212A}") && !re.is_match("k"));
        assert!(Lang::from_hir(&parse("^a")).is_err());
        let word = Hir::look(regex_syntax::hir::Look::WordAscii);
        assert!(Lang::from_hir(&hirs::concat(vec![hirs::lit("a"), word])).is_err());
    }

    /// Prints sample outputs (`--ignored --nocapture`), to eyeball their shape.
    #[test]
    #[ignore]
    fn show_outputs() {
        for p in PATS {
            let x = pat(p);
            println!("{p:?}  not: {}", hir_text(&to_hir(&x.not())));
            println!(
                "{p:?}  and [abc]{{0,3}}: {}",
                hir_text(&to_hir(&x.and(&pat("[abc]{0,3}"))))
            );
        }
    }

    /// Prints timings of large cases (`--ignored --nocapture`).
    #[test]
    #[ignore]
    fn stress_timing() {
        let b = LangBudget::default();
        let t = std::time::Instant::now();
        let mut names = Vec::new();
        let mut x: u64 = 12345;
        for _ in 0..2000 {
            let mut w = String::new();
            for _ in 0..(3 + x % 8) {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                w.push((b'a' + ((x >> 33) % 26) as u8) as char);
            }
            names.push(w);
        }
        let set = names
            .iter()
            .fold(Lang::nothing(), |a, n| a.or(&Lang::literal(n)));
        let r = set.not().to_hir(&b);
        println!(
            "not(2000 names): {:?} weight {:?} {:?}",
            r.is_ok(),
            r.as_ref().map(hirs::weight),
            t.elapsed()
        );
        let t = std::time::Instant::now();
        let r = pat(r"\w{1,40}")
            .and(&pat(".*[0-9].*").not())
            .and(&pat(r"\p{L}.*"))
            .to_hir(&b);
        println!(
            "unicode: {:?} {:?}",
            r.as_ref().map(hirs::weight),
            t.elapsed()
        );
        let t = std::time::Instant::now();
        let r = pat("(a|b)*a(a|b){9}").not().to_hir(&b);
        println!(
            "dense: {:?} {:?}",
            r.as_ref().map(hirs::weight),
            t.elapsed()
        );
        let t = std::time::Instant::now();
        let r = pat("(a|b)*a(a|b){11}").is_empty(&b);
        println!("dense 4096 emptiness: {:?} {:?}", r, t.elapsed());
        let t = std::time::Instant::now();
        let r = pat("[a-z0-9]{0,4000}").and(&pat(".*[0-9]{3}.*")).to_hir(&b);
        println!(
            "long: {:?} {:?}",
            r.as_ref().map(hirs::weight).map_err(|e| e.len()),
            t.elapsed()
        );
        let t = std::time::Instant::now();
        let r = pat(r"[\p{L}\p{N}]{0,1000}")
            .and(&pat(r"(?i)[a-zé]+.*"))
            .and(&pat(r".*[\p{Greek}\p{Han}].*").not())
            .to_hir(&b);
        println!(
            "classes: {:?} {:?}",
            r.as_ref().map(hirs::weight).map_err(|e| e.clone()),
            t.elapsed()
        );
    }

    fn hir_text(h: &Hir) -> String {
        h.to_string()
    }

    #[test]
    fn counted_sequences_fold() {
        for (p, max_weight) in [
            // each comes back as the same counted repetition
            ("(?:ab){0,1000}", 2001),
            ("(?:ab|c){0,300}", 1201),
            ("x(?:abé){2,700}y", 2804),
            ("[a-c]{3,900}", 1801),
        ] {
            let l = pat(p).and(&pat("(?s:.)*"));
            let h = to_hir(&l);
            assert!(hirs::weight(&h) <= max_weight, "{p}: {h}");
            assert!(equivalent(&l, &Lang::from_hir(&h).unwrap()), "{p}: {h}");
        }
        let h = to_hir(&pat("(?:ab){0,1000}").and(&Lang::any()).and(&pat("[ab]*")));
        let re = Re::new(&h);
        assert!(re.is_match(&"ab".repeat(1000)) && !re.is_match(&"ab".repeat(1001)));
    }

    #[test]
    fn automata_are_minimal() {
        let b = LangBudget::default();
        let states = |l: &Lang| Ctx::build(l, &b).unwrap().dfa.n();
        // the last four characters matter: 16 live states plus the dead one (non-[ab])
        assert_eq!(states(&pat("(a|b)*a(a|b){3}")), 17);
        assert_eq!(states(&pat("(a|b)*a(a|b){3}").not()), 17);
        assert_eq!(states(&pat("(a*b*)*")), 2);
        assert_eq!(states(&pat("(a|b)*").and(&pat("(a*b*)*"))), 2);
        assert_eq!(states(&Lang::len_between(2, Some(5))), 7);
        assert_eq!(states(&pat("a+").and(&pat("b+"))), 1);
    }

    #[test]
    fn outputs_are_compact() {
        // parallel edges merge into one class; self-loops are stars
        let h = to_hir(&pat("[a-c]*").and(&pat("[b-d]*")));
        assert_eq!(h, parse("[bc]*"), "{h:?}");
        let h = to_hir(&pat("a+").or(&pat("a*")));
        assert_eq!(h, parse("a*"), "{h:?}");
        let h = to_hir(&pat("abc|abd"));
        assert!(hirs::weight(&h) <= 6, "{h:?}");
    }
}

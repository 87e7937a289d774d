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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;
use std::sync::Arc;

use regex_syntax::hir::{Class, Hir, HirKind};
use rustc_hash::FxHashMap;

use super::hir;

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
    /// Largest `hir::weight` of the HIR returned by `to_hir`.
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

/// The states of an automaton with `accept.len()` states and the transitions `arcs`
/// (`(from, to)`) from which an accepting state can be reached.
pub(crate) fn coreachable(
    accept: &[bool],
    arcs: impl IntoIterator<Item = (usize, usize)>,
) -> Vec<bool> {
    let mut rev: Vec<Vec<usize>> = vec![Vec::new(); accept.len()];
    for (from, to) in arcs {
        rev[to].push(from);
    }
    let mut live = accept.to_vec();
    let mut stack: Vec<usize> = (0..accept.len()).filter(|&s| accept[s]).collect();
    while let Some(t) = stack.pop() {
        for &s in &rev[t] {
            if !live[s] {
                live[s] = true;
                stack.push(s);
            }
        }
    }
    live
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
        "the combination of these constraints (on a string's or a number's spelling) needs more \
         than {} automaton states",
        b.max_states
    )
}

fn check_cells(n: usize, k: usize) -> Result<(), String> {
    if n.saturating_mul(k) > MAX_CELLS {
        return Err(format!(
            "the combination of these constraints (on a string's or a number's spelling) \
             distinguishes too many character classes ({k}) for an automaton of {n} states"
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

/// The complete DFA over the alphabet's classes of an explicit DFA leaf `d` whose edges from
/// each state are disjoint (a minimal DFA kept from an earlier build): its states, plus a dead
/// one, read straight off its edges (`nfa` is its NFA, with the same state numbers) instead of
/// a subset construction. `None` when two edges of a state overlap with different targets (a
/// nondeterministic `d`: the subset construction handles it).
fn direct(nfa: &Nfa, d: &CharDfa, alpha: &Alphabet) -> Result<Option<Dfa>, String> {
    let (n, k) = (d.edges.len(), alpha.k);
    check_cells(n + 1, k)?;
    let dead = n as u32;
    let mut trans = vec![dead; (n + 1) * k];
    for s in 0..n {
        for &(set, t) in &nfa.tr[s] {
            for &c in &alpha.set_classes[set as usize] {
                let cell = &mut trans[s * k + c as usize];
                if *cell == dead {
                    *cell = t;
                } else if *cell != t {
                    return Ok(None);
                }
            }
        }
    }
    let mut accept = d.accept.clone();
    accept.push(false);
    Ok(Some(canonical(&Dfa { k, trans, accept }, d.start)))
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
    // the targets already met from the current subset, and the empty subset's id
    let mut local: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
    let mut dead: Option<u32> = None;
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
        // many classes lead to the same states (or to none): each distinct set of targets is
        // closed and looked up once per subset
        local.clear();
        for bucket in buckets.iter_mut() {
            if bucket.is_empty() {
                if let Some(d) = dead {
                    trans.push(d);
                    continue;
                }
            } else {
                bucket.sort_unstable();
                bucket.dedup();
                if let Some(&id) = local.get(bucket.as_slice()) {
                    bucket.clear();
                    trans.push(id);
                    continue;
                }
            }
            gen += 1;
            let target = closure(nfa, bucket, &mut seen, gen, &mut stack);
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
            if bucket.is_empty() {
                dead = Some(id);
            } else {
                local.insert(std::mem::take(bucket), id);
            }
            trans.push(id);
        }
        i += 1;
    }
    Ok(Dfa { k, trans, accept })
}

/// Largest pair table of [`product`] (entries; above it, pairs are numbered through a map).
const PRODUCT_TABLE: usize = 1 << 20;

/// The reachable product of two complete DFAs, accepting by `f`.
fn product(a: &Dfa, b: &Dfa, f: fn(bool, bool) -> bool, bud: &LangBudget) -> Result<Dfa, String> {
    let k = a.k;
    // pairs numbered through a table when it is small, a map otherwise
    let nb = b.n();
    let mut table: Vec<u32> = if a.n().saturating_mul(nb) <= PRODUCT_TABLE {
        vec![u32::MAX; a.n() * nb]
    } else {
        Vec::new()
    };
    let mut ids: FxHashMap<(u32, u32), u32> = FxHashMap::default();
    let mut pairs = vec![(0u32, 0u32)];
    if table.is_empty() {
        ids.insert((0, 0), 0);
    } else {
        table[0] = 0;
    }
    let mut trans = Vec::new();
    let mut accept = Vec::new();
    let mut i = 0;
    while i < pairs.len() {
        check_cells(i + 1, k)?;
        let (x, y) = pairs[i];
        accept.push(f(a.accept[x as usize], b.accept[y as usize]));
        for c in 0..k {
            let t = (a.trans[x as usize * k + c], b.trans[y as usize * k + c]);
            let known = if table.is_empty() {
                ids.get(&t).copied()
            } else {
                Some(table[t.0 as usize * nb + t.1 as usize]).filter(|&id| id != u32::MAX)
            };
            let id = match known {
                Some(id) => id,
                None => {
                    if pairs.len() >= bud.max_states {
                        return Err(too_many_states(bud));
                    }
                    let id = pairs.len() as u32;
                    if table.is_empty() {
                        ids.insert(t, id);
                    } else {
                        table[t.0 as usize * nb + t.1 as usize] = id;
                    }
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
            Node::Dfa(cd) => {
                let nfa = &self.nfas[&key];
                match direct(nfa, cd, &self.alpha)? {
                    Some(d) => minimize(&d),
                    None => minimize(&determinize(nfa, &self.alpha, self.b)?),
                }
            }
            Node::Hir(_) | Node::Lit(_) => {
                let nfa = &self.nfas[&key];
                minimize(&determinize(nfa, &self.alpha, self.b)?)
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
        Node::Any | Node::Nothing => return Ok(()),
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

mod to_hir;
use to_hir::{dfa_hir, live_states};

#[cfg(test)]
mod tests;

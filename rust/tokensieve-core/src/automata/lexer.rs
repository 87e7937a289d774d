//! A greedy lexer as a DFA over bytes, for grammars whose terminals are lexed (Lark): the
//! lexeme languages (one HIR each) → one subset-constructed DFA whose states know which
//! lexemes end there ([`Lexer::ends`]) and which can still end later ([`Lexer::viable`]).
//!
//! The lexer does not decide by itself when a lexeme ends: that depends on the lexemes the
//! parser allows at that point (see [`super::dfa::LazyDfa::from_lexed`], which runs this DFA
//! beside the parser's). The parser reads *symbols*, one byte each: the distinct sets of
//! lexemes that end together in some state (a lexeme of several spellings, a keyword that is
//! also an identifier) are numbered `0..num_sets()`, and lexeme `i` also has a probe symbol
//! `num_sets() + i`, which no input ever carries: the parser allows it exactly where it allows
//! lexeme `i` next, which is how the product asks "may lexeme `i` come here?". A lexeme's
//! occurrence in the parser's grammar reads one of [`Lexer::symbols_of`]: one byte each, or
//! two (high, low) when there are more than 256 symbols ([`Lexer::spell`]).

use std::sync::Arc;

use regex_automata::nfa::thompson::{self, State, NFA};

use super::bytedfa::ByteDfa;
use regex_automata::util::primitives::StateID;
use regex_syntax::hir::Hir;
use rustc_hash::FxHashMap;

use crate::error::{Error, Result};

/// A parser symbol: an end set's number, or a lexeme's probe (see [`Lexer::spell`]).
pub type Sym = u16;
/// Most symbols (end sets and probes together).
pub const MAX_SYMBOLS: usize = 1 << 16;

/// The dead lexer state (no lexeme can be continued).
pub const LEX_DEAD: u32 = 0;
/// The lexer's start state (nothing read of the current lexeme).
pub const LEX_START: u32 = 1;
const NO_SET: u32 = u32::MAX;
/// The lexeme number of the start state's marker entry.
const START_MARK: u32 = u32::MAX - 1;

/// Most states the lexer's DFA may have.
pub const MAX_LEXER_STATES: usize = 50_000;

/// The lexer DFA (see the module docs).
#[derive(Debug)]
pub struct Lexer {
    classes: [u8; 256],
    stride: usize,
    /// `states × stride`
    trans: Vec<u32>,
    /// per state: the set of lexemes ending there ([`NO_SET`] when none)
    ends: Vec<u32>,
    /// per state: the set of lazy lexemes ending there ([`NO_SET`] when none)
    lazy_ends: Vec<u32>,
    /// per state: `words` words, bit `i` = lexeme `i` can still end from here
    viable: Vec<u64>,
    /// the distinct end sets, `words` words each
    sets: Vec<u64>,
    words: usize,
    lexemes: usize,
    /// bit per lexeme: skipped (read between others and dropped, Lark's `%ignore`)
    skipped: Vec<u64>,
    /// bit per lexeme: its language held the empty string
    nullable: Vec<u64>,
    /// bit per lexeme: of the main class (whose possible coming allows a skip)
    main: Vec<u64>,
    /// the end sets holding a skipped lexeme
    set_skips: Vec<bool>,
    /// how skipped lexemes may stand
    policy: SkipPolicy,
    /// the external lexemes, in order (see [`Lexer::externals`])
    externals: Vec<usize>,
    /// whether some lexeme is of a class of its own
    own_classes: bool,
}

/// Where skipped lexemes may stand: always between two lexemes the parser reads (a skipped
/// lexeme is read only where the parser allows some lexeme next), also at the start when
/// `at_start`, and one at most in a row when `once`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkipPolicy {
    pub at_start: bool,
    pub once: bool,
}

fn bit(words: &[u64], i: usize) -> bool {
    words[i / 64] >> (i % 64) & 1 == 1
}

/// A lexeme's language.
#[derive(Clone, Debug)]
pub enum LexLang {
    /// a regex's (bytes of UTF-8 text)
    Hir(Hir),
    /// a complete DFA's (written with `&` or `~`: any bytes)
    Dfa(Arc<ByteDfa>),
    /// a language no finite automaton holds (a JSON value of any depth): the lexer's DFA does
    /// not read it; the automaton running the lexer reads it beside the lexer, in an
    /// automaton of its own (see [`Lexer::externals`])
    External,
}

/// One lexeme as the lexer takes it.
#[derive(Clone, Debug)]
pub struct LexemeSpec {
    /// its language
    pub lang: LexLang,
    /// how errors name it
    pub name: String,
    /// skipped (read between others and dropped)
    pub skipped: bool,
    /// lazy: it ends as soon as it matches, whatever could follow (see [`Lexer::lazy_ends`])
    pub lazy: bool,
    /// of a lexeme class of its own (a JSON value inside a grammar): a skipped lexeme may
    /// stand before it only where a lexeme of the main class may come too
    pub own_class: bool,
}

impl Lexer {
    /// The lexer of `lexemes`. A lexeme whose language holds the empty string is taken
    /// without it ([`Lexer::nullable`] tells which: the front end makes its uses optional).
    /// Fails past [`MAX_LEXER_STATES`] states, or when the symbols (end sets and probes)
    /// would not fit one byte each.
    pub fn build(lexemes: &[LexemeSpec], policy: SkipPolicy, nfa_bytes: usize) -> Result<Lexer> {
        let n = lexemes.len();
        let words = n.div_ceil(64).max(1);
        let mut nfas = Vec::with_capacity(n);
        let mut budget = nfa_bytes;
        // (an external lexeme is read as the empty language: the lexer's DFA never holds it)
        let nothing = Hir::fail();
        for l in lexemes {
            let m = match &l.lang {
                LexLang::Hir(_) | LexLang::External => {
                    let h = match &l.lang {
                        LexLang::Hir(h) => h,
                        _ => &nothing,
                    };
                    let nfa = thompson::Compiler::new()
                        .configure(
                            thompson::Config::new()
                                .which_captures(thompson::WhichCaptures::None)
                                .utf8(false)
                                .nfa_size_limit(Some(budget)),
                        )
                        .build_from_hir(h)
                        .map_err(|e| {
                            Error::Budget(format!(
                                "the lexeme {}'s automaton is too large ({e})",
                                l.name
                            ))
                        })?;
                    budget = budget.saturating_sub(nfa.memory_usage());
                    Machine::Nfa(nfa)
                }
                LexLang::Dfa(d) => {
                    let live = d.live();
                    // bytes whose columns agree in every state
                    let mut col_ids: FxHashMap<Vec<u32>, u8> = FxHashMap::default();
                    let mut cls = [0u8; 256];
                    for b in 0..=255u8 {
                        let col: Vec<u32> = (0..d.len() as u32).map(|s| d.next(s, b)).collect();
                        let next = col_ids.len() as u8;
                        cls[b as usize] = *col_ids.entry(col).or_insert(next);
                    }
                    Machine::Dfa(d.clone(), live, Box::new(cls))
                }
            };
            nfas.push(m);
        }
        // byte classes: bytes every lexeme's automaton treats alike
        let mut classes = [0u8; 256];
        let mut reps = Vec::new();
        {
            let mut ids: FxHashMap<Vec<u8>, u8> = FxHashMap::default();
            for b in 0..=255u8 {
                let sig: Vec<u8> = nfas.iter().map(|m| m.class(b)).collect();
                let next = ids.len() as u8;
                let c = *ids.entry(sig).or_insert_with(|| {
                    reps.push(b);
                    next
                });
                classes[b as usize] = c;
            }
        }
        let stride = reps.len();
        let lazy: Vec<bool> = lexemes.iter().map(|l| l.lazy).collect();
        let mut b = Builder {
            nfas: &nfas,
            lexemes,
            lazy: &lazy,
            words,
            ids: FxHashMap::default(),
            keys: Vec::new(),
            ends_raw: Vec::new(),
            seen: nfas
                .iter()
                .map(|m| match m {
                    Machine::Nfa(nf) => vec![false; nf.states().len()],
                    Machine::Dfa(d, ..) => vec![false; d.len()],
                })
                .collect(),
        };
        // state 0: dead; state 1: start (no lexeme ends there: a nullable one is taken
        // without its empty string)
        // (the dead state's key holds no real entry, so that an empty start stays apart)
        b.intern(vec![(u32::MAX, u32::MAX)], vec![0; words]);
        let seeds: Vec<(u32, u32)> = nfas
            .iter()
            .enumerate()
            .map(|(i, m)| (i as u32, m.start()))
            .collect();
        let (mut key, nullable) = b.closure(&seeds, false)?;
        // a marker entry keeps the start apart from every state reached after a byte (one
        // with the same NFA states would otherwise be the start again: "nothing read")
        key.push((START_MARK, 0));
        let start = b.intern(key, vec![0; words]);
        debug_assert_eq!(start, LEX_START);
        let mut trans: Vec<u32> = Vec::new();
        let mut i = 0usize;
        while i < b.keys.len() {
            if b.keys.len() > MAX_LEXER_STATES {
                return Err(Error::Budget(format!(
                    "the lexer's DFA needs more than {MAX_LEXER_STATES} states: simplify the \
                     lexemes (large counted repetitions, many overlapping patterns)"
                )));
            }
            crate::budget::check("building the lexer")?;
            let key = if i == LEX_DEAD as usize {
                Vec::new()
            } else {
                b.keys[i].clone()
            };
            for &r in &reps {
                let mut seeds = Vec::new();
                for &(l, s) in key.iter().filter(|(l, _)| *l < START_MARK) {
                    if let Some(next) = nfas[l as usize].step(s, r) {
                        seeds.push((l, next));
                    }
                }
                let t = if seeds.is_empty() {
                    LEX_DEAD
                } else {
                    let (k, e) = b.closure(&seeds, true)?;
                    if k.is_empty() && e.iter().all(|&w| w == 0) {
                        LEX_DEAD
                    } else {
                        b.intern(k, e)
                    }
                };
                trans.push(t);
            }
            i += 1;
        }
        let states = b.keys.len();
        // viable: the lexemes that end here or in a state reachable from here (fixpoint)
        let mut viable = vec![0u64; states * words];
        viable.copy_from_slice(&b.ends_raw);
        loop {
            let mut changed = false;
            for s in (1..states).rev() {
                for c in 0..stride {
                    let t = trans[s * stride + c] as usize;
                    if t == 0 {
                        continue;
                    }
                    for w in 0..words {
                        let add = viable[t * words + w] & !viable[s * words + w];
                        if add != 0 {
                            viable[s * words + w] |= add;
                            changed = true;
                        }
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let mut lazy_bits = vec![0u64; words];
        let mut skip_bits = vec![0u64; words];
        for (i, l) in lexemes.iter().enumerate() {
            if l.lazy {
                lazy_bits[i / 64] |= 1 << (i % 64);
            }
            if l.skipped {
                skip_bits[i / 64] |= 1 << (i % 64);
            }
        }
        // end sets, numbered: every state's ends, and its lazy ends
        let mut set_ids: FxHashMap<Vec<u64>, u32> = FxHashMap::default();
        let mut sets = Vec::new();
        let mut number = |e: &[u64]| -> u32 {
            if e.iter().all(|&w| w == 0) {
                return NO_SET;
            }
            let next = set_ids.len() as u32;
            *set_ids.entry(e.to_vec()).or_insert_with(|| {
                sets.extend_from_slice(e);
                next
            })
        };
        let mut ends = Vec::with_capacity(states);
        let mut lazy_ends = Vec::with_capacity(states);
        for s in 0..states {
            let e = &b.ends_raw[s * words..(s + 1) * words];
            ends.push(number(e));
            let le: Vec<u64> = e.iter().zip(&lazy_bits).map(|(a, b)| a & b).collect();
            lazy_ends.push(number(&le));
        }
        // an external lexeme's end is a set of its own (the lexer's DFA never reaches it)
        let externals: Vec<usize> = (0..n)
            .filter(|&i| matches!(lexemes[i].lang, LexLang::External))
            .collect();
        for &i in &externals {
            let mut e = vec![0u64; words];
            e[i / 64] |= 1 << (i % 64);
            sets.extend_from_slice(&e);
        }
        let set_skips: Vec<bool> = sets
            .chunks_exact(words)
            .map(|set| set.iter().zip(&skip_bits).any(|(a, b)| a & b != 0))
            .collect();
        if policy.once {
            let mixed = sets.chunks_exact(words).any(|set| {
                set.iter().zip(&skip_bits).any(|(a, b)| a & b != 0)
                    && set.iter().zip(&skip_bits).any(|(a, b)| a & !b != 0)
            });
            if mixed {
                return Err(Error::InvalidArgument(
                    "skipping at most once in a row is not supported when a skipped lexeme can \
                     end where another lexeme ends"
                        .into(),
                ));
            }
        }
        let lx = Lexer {
            main: {
                let mut m = vec![0u64; words];
                for i in (0..n).filter(|&i| !lexemes[i].own_class) {
                    m[i / 64] |= 1 << (i % 64);
                }
                m
            },
            skipped: skip_bits,
            nullable,
            set_skips,
            policy,
            classes,
            stride,
            trans,
            ends,
            lazy_ends,
            viable,
            sets,
            words,
            lexemes: n,
            externals,
            own_classes: lexemes.iter().any(|l| l.own_class),
        };
        if lx.num_symbols() > MAX_SYMBOLS {
            return Err(Error::Budget(format!(
                "the grammar has {n} lexemes that end together in {} different combinations: \
                 more than {MAX_SYMBOLS} together are not supported",
                lx.num_sets()
            )));
        }
        Ok(lx)
    }

    /// Whether end set `sym` holds a skipped lexeme.
    #[inline]
    pub fn skips(&self, sym: Sym) -> bool {
        self.set_skips[sym as usize]
    }

    /// Whether some lexeme of `words` is skipped.
    #[inline]
    pub fn any_skipped(&self, words: &[u64]) -> bool {
        words.iter().zip(&self.skipped).any(|(a, b)| a & b != 0)
    }

    /// Whether lexeme `i`'s language held the empty string (the lexer takes it without).
    pub fn nullable(&self, i: usize) -> bool {
        bit(&self.nullable, i)
    }

    /// Where skipped lexemes may stand.
    pub fn policy(&self) -> SkipPolicy {
        self.policy
    }

    /// The lexemes of the main class: a skipped lexeme may be read where one of them may
    /// come next.
    pub fn main_class(&self) -> &[u64] {
        &self.main
    }

    /// Whether some lexeme is of a class of its own (a `%json` value).
    #[inline]
    pub fn has_own_class(&self) -> bool {
        self.own_classes
    }

    /// Number of lexemes.
    pub fn num_lexemes(&self) -> usize {
        self.lexemes
    }

    /// Number of distinct end sets (the symbols `0..num_sets()`).
    pub fn num_sets(&self) -> usize {
        self.sets.len() / self.words
    }

    /// Number of states.
    pub fn num_states(&self) -> usize {
        self.ends.len()
    }

    /// The bytes the lexer treats as it treats `byte` (its byte class, `byte` among them).
    pub fn same_as(&self, byte: u8) -> impl Iterator<Item = u8> + '_ {
        let c = self.classes[byte as usize];
        (0..=255u8).filter(move |&b| self.classes[b as usize] == c)
    }

    /// The state after `byte`.
    #[inline]
    pub fn next(&self, state: u32, byte: u8) -> u32 {
        self.trans[state as usize * self.stride + self.classes[byte as usize] as usize]
    }

    /// The symbol of the lexemes ending at `state`, if any end there.
    #[inline]
    pub fn ends(&self, state: u32) -> Option<Sym> {
        let e = self.ends[state as usize];
        (e != NO_SET).then_some(e as Sym)
    }

    /// The symbol of the lazy lexemes ending at `state`, if any: where the parser allows one
    /// of them, the lexeme ends right there, those lazy ones are read, and nothing else.
    #[inline]
    pub fn lazy_ends(&self, state: u32) -> Option<Sym> {
        let e = self.lazy_ends[state as usize];
        (e != NO_SET).then_some(e as Sym)
    }

    /// The lexemes that can still end from `state` (bit per lexeme).
    #[inline]
    pub fn viable(&self, state: u32) -> &[u64] {
        &self.viable[state as usize * self.words..(state as usize + 1) * self.words]
    }

    /// The probe symbol of lexeme `i`.
    #[inline]
    pub fn probe(&self, i: usize) -> Sym {
        (self.num_sets() + i) as Sym
    }

    /// Whether symbols take two bytes (more than 256 of them): high byte, then low byte.
    #[inline]
    pub fn wide(&self) -> bool {
        self.num_symbols() > 256
    }

    /// Number of symbols: end sets, probes, and an entry symbol per external lexeme.
    fn num_symbols(&self) -> usize {
        self.num_sets() + self.lexemes + self.externals.len()
    }

    /// The external lexemes (a language no finite automaton holds, [`LexLang::External`]),
    /// in order. The lexer's DFA does not read them: the automaton running the lexer reads
    /// external lexeme `k` beside it in an automaton of its own, which the parser's language
    /// holds behind [`Lexer::entry`]`(k)` (no other path reads that symbol); where it ends,
    /// the parser reads [`Lexer::external_end`]`(k)`, an end set holding that lexeme alone.
    pub fn externals(&self) -> &[usize] {
        &self.externals
    }

    /// The end set of external lexeme `k` alone (see [`Lexer::externals`]).
    #[inline]
    pub fn external_end(&self, k: usize) -> Sym {
        (self.num_sets() - self.externals.len() + k) as Sym
    }

    /// The symbol that leads from the parser's start into the automaton of external lexeme
    /// `k` (see [`Lexer::externals`]).
    #[inline]
    pub fn entry(&self, k: usize) -> Sym {
        (self.num_sets() + self.lexemes + k) as Sym
    }

    /// The bytes the parser reads for symbol `sym`.
    #[inline]
    pub fn spell(&self, sym: Sym) -> ([u8; 2], usize) {
        if self.wide() {
            ([(sym >> 8) as u8, sym as u8], 2)
        } else {
            ([sym as u8, 0], 1)
        }
    }

    /// The symbols the parser reads for lexeme `i`: each end set holding it, and its probe.
    pub fn symbols_of(&self, i: usize) -> Vec<Sym> {
        let mut out: Vec<Sym> = (0..self.num_sets())
            .filter(|&s| bit(&self.sets[s * self.words..(s + 1) * self.words], i))
            .map(|s| s as Sym)
            .collect();
        out.push(self.probe(i));
        out
    }
}

/// The lexemes set in `words` (bit per lexeme), in order.
pub fn members(words: &[u64]) -> impl Iterator<Item = usize> + '_ {
    words.iter().enumerate().flat_map(|(w, &x)| {
        (0..64)
            .filter(move |b| x >> b & 1 == 1)
            .map(move |b| w * 64 + b)
    })
}

/// One lexeme's automaton: a Thompson NFA, or a complete DFA (with its live states and its
/// byte classes).
enum Machine {
    Nfa(NFA),
    Dfa(Arc<ByteDfa>, Vec<bool>, Box<[u8; 256]>),
}

impl Machine {
    fn class(&self, b: u8) -> u8 {
        match self {
            Machine::Nfa(n) => n.byte_classes().get(b),
            Machine::Dfa(_, _, cls) => cls[b as usize],
        }
    }

    fn start(&self) -> u32 {
        match self {
            Machine::Nfa(n) => n.start_anchored().as_u32(),
            Machine::Dfa(d, ..) => d.start(),
        }
    }

    /// The state after byte `b` from reading state `s`, if any.
    fn step(&self, s: u32, b: u8) -> Option<u32> {
        match self {
            Machine::Nfa(n) => step(n.state(StateID::new_unchecked(s as usize)), b),
            Machine::Dfa(d, live, _) => {
                let t = d.next(s, b);
                live[t as usize].then_some(t)
            }
        }
    }
}

fn step(st: &State, b: u8) -> Option<u32> {
    match st {
        State::ByteRange { trans } if trans.matches_byte(b) => Some(trans.next.as_u32()),
        State::Sparse(sp) => sp.matches_byte(b).map(|s| s.as_u32()),
        State::Dense(d) => d.matches_byte(b).map(|s| s.as_u32()),
        _ => None,
    }
}

/// A subset: (lexeme, NFA state) pairs, sorted.
type Subset = Vec<(u32, u32)>;

struct Builder<'a> {
    nfas: &'a [Machine],
    lexemes: &'a [LexemeSpec],
    lazy: &'a [bool],
    words: usize,
    ids: FxHashMap<(Subset, Vec<u64>), u32>,
    keys: Vec<Subset>,
    ends_raw: Vec<u64>,
    seen: Vec<Vec<bool>>,
}

impl Builder<'_> {
    /// The reading states of the closure of `seeds` (lexeme, NFA state; sorted) and the
    /// lexemes ending there. A lazy lexeme that ends stops there (its states are dropped);
    /// `after_byte` false (the start) keeps every lexeme going.
    fn closure(&mut self, seeds: &[(u32, u32)], after_byte: bool) -> Result<(Subset, Vec<u64>)> {
        let mut out = Vec::new();
        let mut ends = vec![0u64; self.words];
        let mut stack: Vec<(u32, u32)> = seeds.iter().rev().copied().collect();
        let mut visited = Vec::new();
        let mut failed = None;
        while let Some((l, s)) = stack.pop() {
            if std::mem::replace(&mut self.seen[l as usize][s as usize], true) {
                continue;
            }
            visited.push((l, s));
            let nfa = match &self.nfas[l as usize] {
                Machine::Nfa(nfa) => nfa,
                Machine::Dfa(d, live, _) => {
                    // a DFA state reads (when live) and ends its lexeme (when accepting)
                    if d.accepts(s) {
                        ends[l as usize / 64] |= 1 << (l as usize % 64);
                    }
                    if live[s as usize] {
                        out.push((l, s));
                    }
                    continue;
                }
            };
            match nfa.state(StateID::new_unchecked(s as usize)) {
                State::ByteRange { .. } | State::Sparse(_) | State::Dense(_) => out.push((l, s)),
                State::Match { .. } => {
                    let i = l as usize;
                    ends[i / 64] |= 1 << (i % 64);
                }
                State::Union { alternates } => {
                    stack.extend(alternates.iter().rev().map(|a| (l, a.as_u32())));
                }
                State::BinaryUnion { alt1, alt2 } => {
                    stack.push((l, alt2.as_u32()));
                    stack.push((l, alt1.as_u32()));
                }
                State::Capture { next, .. } => stack.push((l, next.as_u32())),
                State::Look { .. } => {
                    failed = Some(l);
                    break;
                }
                State::Fail => {}
            }
        }
        for (l, s) in visited {
            self.seen[l as usize][s as usize] = false;
        }
        if let Some(l) = failed {
            return Err(Error::InvalidArgument(format!(
                "the lexeme {} uses an anchor or a word boundary: lexemes are read without \
                 look-around",
                self.lexemes[l as usize].name
            )));
        }
        if after_byte {
            // a lazy lexeme that ended goes no further
            out.retain(|&(l, _)| !(self.lazy[l as usize] && bit(&ends, l as usize)));
        }
        out.sort_unstable();
        Ok((out, ends))
    }

    fn intern(&mut self, key: Subset, ends: Vec<u64>) -> u32 {
        let k = (key, ends);
        if let Some(&id) = self.ids.get(&k) {
            return id;
        }
        let id = self.keys.len() as u32;
        self.keys.push(k.0.clone());
        self.ends_raw.extend_from_slice(&k.1);
        self.ids.insert(k, id);
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(p: &str, name: &str) -> LexemeSpec {
        LexemeSpec {
            lang: LexLang::Hir(regex_syntax::Parser::new().parse(p).unwrap()),
            name: name.into(),
            skipped: false,
            lazy: false,
            own_class: false,
        }
    }

    #[test]
    fn keyword_and_identifier_end_together_and_apart() {
        let lx = Lexer::build(
            &[spec("if", "IF"), spec("[a-z]+", "ID")],
            SkipPolicy::default(),
            1 << 20,
        )
        .unwrap();
        let s = lx.next(LEX_START, b'i');
        let s2 = lx.next(s, b'f');
        let both = lx.ends(s2).unwrap();
        let only_id = lx.ends(s).unwrap();
        assert_ne!(both, only_id);
        assert_eq!(lx.symbols_of(0), vec![both, lx.probe(0)]);
        assert!(!lx.wide());
        let id_syms = lx.symbols_of(1);
        assert!(id_syms.contains(&both) && id_syms.contains(&only_id));
        assert_eq!(members(lx.viable(s2)).collect::<Vec<_>>(), vec![0, 1]);
        let s3 = lx.next(s2, b'x');
        assert_eq!(members(lx.viable(s3)).collect::<Vec<_>>(), vec![1]);
        assert_eq!(lx.next(LEX_START, b'1'), LEX_DEAD);
    }

    #[test]
    fn an_empty_match_is_left_out_and_reported() {
        let lx = Lexer::build(&[spec("a*", "A")], SkipPolicy::default(), 1 << 20).unwrap();
        assert!(lx.nullable(0));
        assert_eq!(lx.ends(LEX_START), None);
        assert!(lx.ends(lx.next(LEX_START, b'a')).is_some());
    }

    #[test]
    fn a_lazy_lexeme_stops_where_it_first_ends() {
        let mut l = spec("a+", "A");
        l.lazy = true;
        let lx = Lexer::build(&[l, spec("a+b", "B")], SkipPolicy::default(), 1 << 20).unwrap();
        let s = lx.next(LEX_START, b'a');
        assert!(lx.lazy_ends(s).is_some());
        let s2 = lx.next(s, b'a');
        // only B goes on
        assert_eq!(members(lx.viable(s2)).collect::<Vec<_>>(), vec![1]);
        assert_eq!(lx.ends(s2), None);
    }
}

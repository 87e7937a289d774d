//! HIR → Thompson NFA for the JSON Schema compiler, with one construct a HIR cannot share:
//! the separated list `item (sep item)*`.
//!
//! Written as a regular expression, a list repeats its item (`item (sep item)*`), and JSON
//! nests lists: an unconstrained JSON value nested three levels deep holds each level's item
//! twice per array and twice per object, so the HIR grows by a factor of about seven per level.
//! As an NFA the list needs one copy of the item: after the item, either the separator leads
//! back to the item's start, or the list ends. [`sep_list`] marks such a list inside an ordinary
//! HIR (a capture group with a reserved name, which nothing else produces), and [`build`] turns
//! the HIR into an NFA with the regex-automata builder, compiling each marked list with a single
//! copy of its item. HIRs without marks keep using regex-automata's own compiler.

use std::sync::{Arc, Mutex, OnceLock};

use regex_automata::nfa::thompson::{Builder, Transition, NFA};
use regex_automata::util::primitives::StateID;
use regex_syntax::hir::{Capture, Class, Hir, HirKind};
use regex_syntax::utf8::Utf8Sequences;
use rustc_hash::FxHashMap;

use crate::error::{Error, Result};

const LIST: &str = "\u{0}tokensieve:list";
const ITEM: &str = "\u{0}tokensieve:item";
const SEP: &str = "\u{0}tokensieve:sep";

fn mark(name: &str, sub: Hir) -> Hir {
    Hir::capture(Capture {
        index: 1,
        name: Some(name.into()),
        sub: Box::new(sub),
    })
}

/// `item (sep item)*`, compiled with one copy of `item` (see the module docs).
pub(crate) fn sep_list(item: Hir, sep: Hir) -> Hir {
    mark(LIST, Hir::concat(vec![mark(ITEM, item), mark(SEP, sep)]))
}

const SEQ: &str = "\u{0}tokensieve:seq";
const REQ: &str = "\u{0}tokensieve:req";
const OPT: &str = "\u{0}tokensieve:opt";
const TAIL: &str = "\u{0}tokensieve:tail";

/// The members of an object: `items` (each `(member, required)`) in order, separated by `sep`
/// where two are present, then any number of `tail` members (also separated). Compiled with
/// one copy of each member; as a plain regex every optional member before the first required
/// one would repeat all that follows it.
pub(crate) fn member_seq(items: Vec<(Hir, bool)>, sep: Hir, tail: Option<Hir>) -> Hir {
    let mut parts: Vec<Hir> = items
        .into_iter()
        .map(|(h, req)| mark(if req { REQ } else { OPT }, h))
        .collect();
    parts.push(mark(SEP, sep));
    parts.push(mark(TAIL, tail.unwrap_or_else(Hir::fail)));
    mark(SEQ, Hir::concat(parts))
}

/// The parts of a member-sequence mark: members, separator, tail (`None` when absent).
#[allow(clippy::type_complexity)]
fn as_seq(h: &Hir) -> Option<(Vec<(&Hir, bool)>, &Hir, Option<&Hir>)> {
    let HirKind::Capture(c) = h.kind() else {
        return None;
    };
    if c.name.as_deref() != Some(SEQ) {
        return None;
    }
    let xs: Vec<&Hir> = match c.sub.kind() {
        HirKind::Concat(xs) => xs.iter().collect(),
        _ => vec![&*c.sub],
    };
    let mut items = Vec::new();
    let mut sep = None;
    let mut tail = None;
    for x in xs {
        let HirKind::Capture(m) = x.kind() else {
            return None;
        };
        match m.name.as_deref() {
            Some(REQ) => items.push((&*m.sub, true)),
            Some(OPT) => items.push((&*m.sub, false)),
            Some(SEP) => sep = Some(&*m.sub),
            Some(TAIL) => {
                tail = match m.sub.kind() {
                    HirKind::Class(Class::Bytes(b)) if b.ranges().is_empty() => None,
                    HirKind::Class(Class::Unicode(u)) if u.ranges().is_empty() => None,
                    _ => Some(&*m.sub),
                }
            }
            _ => return None,
        }
    }
    Some((items, sep?, tail))
}

/// The item and separator of a list mark.
pub(crate) fn as_list(h: &Hir) -> Option<(&Hir, &Hir)> {
    let HirKind::Capture(c) = h.kind() else {
        return None;
    };
    if c.name.as_deref() != Some(LIST) {
        return None;
    }
    let HirKind::Concat(xs) = c.sub.kind() else {
        return None;
    };
    match (xs.first().map(Hir::kind), xs.get(1).map(Hir::kind)) {
        (Some(HirKind::Capture(i)), Some(HirKind::Capture(s))) if xs.len() == 2 => {
            Some((&i.sub, &s.sub))
        }
        _ => None,
    }
}

const SHARED: &str = "\u{0}tokensieve:shared";
const JUMP: &str = "\u{0}tokensieve:jump";

/// `body` in which every [`jump`] leaf continues with one shared copy of `tail`: the language
/// of `body`'s paths that end normally, plus each path to a jump followed by `tail`. As a plain
/// regex the tail would be repeated at every jump.
pub(crate) fn with_tail(body: Hir, tail: Hir) -> Hir {
    mark(
        SHARED,
        Hir::concat(vec![mark(ITEM, body), mark(TAIL, tail)]),
    )
}

/// A leaf of the innermost enclosing [`with_tail`] body: continue with its tail.
pub(crate) fn jump() -> Hir {
    mark(JUMP, Hir::empty())
}

/// The body and tail of a shared-tail mark.
fn as_shared(h: &Hir) -> Option<(&Hir, &Hir)> {
    let HirKind::Capture(c) = h.kind() else {
        return None;
    };
    if c.name.as_deref() != Some(SHARED) {
        return None;
    }
    let HirKind::Concat(xs) = c.sub.kind() else {
        return None;
    };
    match (xs.first().map(Hir::kind), xs.get(1).map(Hir::kind)) {
        (Some(HirKind::Capture(b)), Some(HirKind::Capture(t))) if xs.len() == 2 => {
            Some((&b.sub, &t.sub))
        }
        _ => None,
    }
}

fn is_jump(h: &Hir) -> bool {
    matches!(h.kind(), HirKind::Capture(c) if c.name.as_deref() == Some(JUMP))
}

const KEYS: &str = "\u{0}tokensieve:keys";

/// Ends each name in the literal of a [`ascii_names_excluded`] mark (never an ASCII byte).
const NAME_END: u8 = 0xFF;

/// The JSON string contents (the text between the quotes, in every spelling JSON allows:
/// raw, short escapes, `\uXXXX` in either case, surrogate pairs) whose decoded value is none
/// of `names`; `None` unless every name is ASCII. The language of
/// `encode(not_in(names))`, compiled straight into automaton states (see
/// `Compiler::names_excluded`): a trie over the names whose nodes read one character in any
/// spelling, and one shared "any characters" loop for every character that leaves the trie.
/// The same language built from a HIR costs several times the states and the time, and
/// undeclared keys of an object with extra properties allowed take this path in almost
/// every schema.
pub(crate) fn ascii_names_excluded(names: &[Vec<char>]) -> Option<Hir> {
    if !names.iter().all(|n| n.iter().all(char::is_ascii)) {
        return None;
    }
    let mut bytes = Vec::new();
    for n in names {
        bytes.extend(n.iter().map(|&c| c as u8));
        bytes.push(NAME_END);
    }
    // about the states it compiles to, for the compiler's budgets
    let weight = 64 + 12 * bytes.len() as u64;
    Some(Hir::capture(Capture {
        index: weight.min(u64::from(u32::MAX)) as u32,
        name: Some(KEYS.into()),
        sub: Box::new(Hir::literal(bytes)),
    }))
}

const CHAR_DFA: &str = "\u{0}tokensieve:dfa";

const FIRST_NON_ASCII: u32 = 0x80;

/// The JSON string contents whose decoded value is in the language of `d` (a DFA over
/// characters, see [`super::charlang::CharDfa`], without dead states), compiled
/// straight into automaton states (see `Compiler::char_dfa`): one state per DFA state reading
/// one character in any spelling. The same language as `encode` of the DFA's regular
/// expression, without the expression: state elimination can grow exponentially (a format
/// with a length bound). `None` unless every state sends either all non-ASCII characters to
/// one state or none of them (what formats and most patterns do).
pub(crate) fn char_dfa_mark(d: &super::charlang::CharDfa) -> Option<Hir> {
    let n = d.accept.len();
    if d.start >= n || d.edges.len() != n {
        return None;
    }
    let mut bytes = Vec::new();
    let put = |bytes: &mut Vec<u8>, x: u32| bytes.extend_from_slice(&x.to_le_bytes());
    put(&mut bytes, n as u32);
    put(&mut bytes, d.start as u32);
    let mut weight: u64 = 16;
    for (s, edges) in d.edges.iter().enumerate() {
        let mut ascii: Vec<(u32, u32, usize)> = Vec::new();
        let mut rest: Option<usize> = None;
        let mut covered: u64 = 0;
        for &(lo, hi, t) in edges {
            if t >= n || lo > hi {
                return None;
            }
            if lo < FIRST_NON_ASCII {
                ascii.push((lo, hi.min(FIRST_NON_ASCII - 1), t));
            }
            if hi >= FIRST_NON_ASCII {
                if rest.is_some_and(|r| r != t) {
                    return None;
                }
                rest = Some(t);
                covered += non_ascii_chars(lo.max(FIRST_NON_ASCII), hi);
            }
        }
        if rest.is_some() && covered != non_ascii_chars(FIRST_NON_ASCII, 0x10FFFF) {
            return None;
        }
        bytes.push(u8::from(d.accept[s]));
        put(&mut bytes, rest.map_or(u32::MAX, |r| r as u32));
        put(&mut bytes, ascii.len() as u32);
        for (lo, hi, t) in ascii {
            bytes.push(lo as u8);
            bytes.push(hi as u8);
            put(&mut bytes, t as u32);
        }
        weight += 12 + if rest.is_some() { 24 } else { 0 };
    }
    Some(Hir::capture(Capture {
        index: weight.min(u64::from(u32::MAX)) as u32,
        name: Some(CHAR_DFA.into()),
        sub: Box::new(Hir::literal(bytes)),
    }))
}

/// Characters in `lo..=hi`, not counting surrogates.
fn non_ascii_chars(lo: u32, hi: u32) -> u64 {
    let all = u64::from(hi) + 1 - u64::from(lo);
    let (a, b) = (lo.max(0xD800), hi.min(0xDFFF));
    all - if a <= b { u64::from(b - a) + 1 } else { 0 }
}

/// A decoded [`char_dfa_mark`]: per state (accepting, non-ASCII target, ASCII ranges).
#[allow(clippy::type_complexity)]
fn decode_char_dfa(
    enc: &[u8],
) -> Option<(usize, Vec<(bool, Option<usize>, Vec<(u8, u8, usize)>)>)> {
    let mut at = 0usize;
    let u32_at = |enc: &[u8], at: &mut usize| -> Option<u32> {
        let b = enc.get(*at..*at + 4)?;
        *at += 4;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let n = u32_at(enc, &mut at)? as usize;
    let start = u32_at(enc, &mut at)? as usize;
    let mut states = Vec::with_capacity(n);
    for _ in 0..n {
        let accept = *enc.get(at)? == 1;
        at += 1;
        let rest = u32_at(enc, &mut at)?;
        let rest = (rest != u32::MAX).then_some(rest as usize);
        let m = u32_at(enc, &mut at)? as usize;
        let mut ascii = Vec::with_capacity(m);
        for _ in 0..m {
            let (lo, hi) = (*enc.get(at)?, *enc.get(at + 1)?);
            at += 2;
            ascii.push((lo, hi, u32_at(enc, &mut at)? as usize));
        }
        states.push((accept, rest, ascii));
    }
    (at == enc.len() && start < n).then_some((start, states))
}

/// The states a character read in any spelling continues through, all ending in `to`: the
/// last one to three hex digits of a `\uXXXX` escape, the rest of a surrogate pair, the
/// continuation bytes of a raw UTF-8 character.
struct CharTails {
    to: StateID,
    hex: [StateID; 3],
    /// after `\u` and `d`: `[0-7]` and two more digits, or a high surrogate's rest and its low
    /// surrogate
    d: StateID,
    cont: [StateID; 3],
    e0: StateID,
    ed: StateID,
    f0: StateID,
    f4: StateID,
}

/// The characters with a short JSON escape, and the letter after the backslash.
const SHORT_ESCAPES: [(u8, u8); 8] = [
    (b'"', b'"'),
    (b'\\', b'\\'),
    (b'/', b'/'),
    (0x08, b'b'),
    (0x0C, b'f'),
    (0x0A, b'n'),
    (0x0D, b'r'),
    (0x09, b't'),
];

impl CharTails {
    /// Sends the lead byte of every raw multi-byte UTF-8 character to its continuation.
    fn utf8_leads(&self, raw: &mut [Option<StateID>; 256]) {
        for (a, b, next) in [
            (0xC2, 0xDF, self.cont[0]),
            (0xE0, 0xE0, self.e0),
            (0xE1, 0xEC, self.cont[1]),
            (0xED, 0xED, self.ed),
            (0xEE, 0xEF, self.cont[1]),
            (0xF0, 0xF0, self.f0),
            (0xF1, 0xF3, self.cont[2]),
            (0xF4, 0xF4, self.f4),
        ] {
            for x in a..=b {
                raw[x as usize] = Some(next);
            }
        }
    }
}

/// Whether `h` is [`super::spell::any_char`]'s HIR.
fn is_any_char(h: &Hir) -> bool {
    thread_local! {
        static ANY: Hir = super::spell::any_char();
    }
    matches!(h.kind(), HirKind::Alternation(xs) if xs.len() == 2) && ANY.with(|a| a == h)
}

fn hex_digit_bytes(d: u8) -> impl Iterator<Item = u8> {
    let (a, b) = if d < 10 {
        (b'0' + d, b'0' + d)
    } else {
        (b'a' + d - 10, b'A' + d - 10)
    };
    [a, b].into_iter()
}

const PART: &str = "\u{0}tokensieve:part";

/// Shared parts registered in this process, at most this many (each a few hundred kB at most).
const MAX_PARTS: usize = 64;

fn parts() -> &'static Mutex<FxHashMap<String, Arc<Fragment>>> {
    static PARTS: OnceLock<Mutex<FxHashMap<String, Arc<Fragment>>>> = OnceLock::new();
    PARTS.get_or_init(|| Mutex::new(FxHashMap::default()))
}

fn part_mark(key: &str, weight: u64) -> Hir {
    Hir::capture(Capture {
        index: weight.min(u64::from(u32::MAX)) as u32,
        name: Some(PART.into()),
        sub: Box::new(Hir::literal(key.as_bytes())),
    })
}

/// A leaf standing for the part registered under `key`, if there is one. Parts are
/// sub-automata that occur in many grammars (an unconstrained JSON value): compiled once per
/// process, then copied state by state into each automaton that holds their mark, without
/// building or compiling their HIR again. `key` must determine the part's language.
pub(crate) fn shared_part(key: &str) -> Option<Hir> {
    let reg = parts().lock().unwrap_or_else(|e| e.into_inner());
    reg.get(key).map(|f| part_mark(key, f.weight))
}

/// Register `h` as the part `key` and return its mark; when the registry is full, `h` itself.
pub(crate) fn share(key: &str, h: Hir) -> Result<Hir> {
    if let Some(m) = shared_part(key) {
        return Ok(m);
    }
    if parts().lock().unwrap_or_else(|e| e.into_inner()).len() >= MAX_PARTS {
        return Ok(h);
    }
    let mut c = Compiler {
        b: Builder::new(),
        log: Some(Vec::new()),
        tails: Vec::new(),
    };
    let (entry, exit) = c.c(&h)?;
    let ops = c.log.take().unwrap_or_default();
    let states = ops.iter().filter(|o| !matches!(o, Op::Patch(..))).count();
    let weight = super::hir::weight(&h);
    let f = Arc::new(Fragment {
        ops,
        states,
        entry: entry.as_u32(),
        exit: exit.as_u32(),
        weight,
    });
    parts()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.to_string())
        .or_insert(f);
    Ok(part_mark(key, weight))
}

/// The weight recorded in a shared-part or excluded-names mark (see
/// [`super::hir::weight`]).
pub(crate) fn part_weight(c: &Capture) -> Option<u64> {
    matches!(c.name.as_deref(), Some(PART) | Some(KEYS) | Some(CHAR_DFA))
        .then_some(u64::from(c.index))
}

/// Whether `h` holds a list mark.
pub(crate) fn has_marks(h: &Hir) -> bool {
    match h.kind() {
        HirKind::Capture(c) => {
            matches!(
                c.name.as_deref(),
                Some(LIST) | Some(SEQ) | Some(SHARED) | Some(PART) | Some(KEYS) | Some(CHAR_DFA)
            ) || has_marks(&c.sub)
        }
        HirKind::Repetition(r) => has_marks(&r.sub),
        HirKind::Concat(xs) | HirKind::Alternation(xs) => xs.iter().any(has_marks),
        _ => false,
    }
}

/// A fragment: its entry state and an `Empty` exit state still to be patched.
type Frag = (StateID, StateID);

/// One builder call of a recorded fragment; state ids are the fragment's own, in creation order.
#[derive(Debug)]
enum Op {
    Empty,
    Fail,
    Range(u8, u8, u32),
    Sparse(Vec<(u8, u8, u32)>),
    Union(Vec<u32>),
    Patch(u32, u32),
}

/// The builder calls that compiled one shared part, to be replayed wherever the part occurs.
#[derive(Debug)]
struct Fragment {
    ops: Vec<Op>,
    states: usize,
    entry: u32,
    exit: u32,
    /// The part's HIR weight, for the compiler's budgets.
    weight: u64,
}

struct Compiler {
    b: Builder,
    /// The builder calls made so far, when recording a fragment.
    log: Option<Vec<Op>>,
    /// Entry states of the tails of the enclosing shared-tail marks, innermost last.
    tails: Vec<StateID>,
}

fn budget(e: impl std::fmt::Display) -> Error {
    Error::Budget(format!(
        "the automaton is too large ({e}); lower count bounds, nesting or recursion depth, or \
         raise max_nfa_bytes"
    ))
}

impl Compiler {
    fn log(&mut self, op: Op) {
        if let Some(l) = self.log.as_mut() {
            l.push(op);
        }
    }

    fn empty(&mut self) -> Result<StateID> {
        self.log(Op::Empty);
        self.b.add_empty().map_err(budget)
    }

    fn fail(&mut self) -> Result<StateID> {
        self.log(Op::Fail);
        self.b.add_fail().map_err(budget)
    }

    fn sparse(&mut self, trans: Vec<Transition>) -> Result<StateID> {
        self.log(Op::Sparse(
            trans
                .iter()
                .map(|t| (t.start, t.end, t.next.as_u32()))
                .collect(),
        ));
        self.b.add_sparse(trans).map_err(budget)
    }

    fn range(&mut self, start: u8, end: u8, next: StateID) -> Result<StateID> {
        self.log(Op::Range(start, end, next.as_u32()));
        self.b
            .add_range(Transition { start, end, next })
            .map_err(budget)
    }

    fn patch(&mut self, from: StateID, to: StateID) -> Result<()> {
        self.log(Op::Patch(from.as_u32(), to.as_u32()));
        self.b.patch(from, to).map_err(budget)
    }

    fn union(&mut self, alts: Vec<StateID>) -> Result<StateID> {
        self.log(Op::Union(alts.iter().map(|a| a.as_u32()).collect()));
        self.b.add_union(alts).map_err(budget)
    }

    /// Add a recorded fragment's states again (logged too, when recording); returns its entry
    /// and exit.
    fn replay(&mut self, f: &Fragment) -> Result<Frag> {
        let mut map: Vec<StateID> = Vec::with_capacity(f.states);
        for op in &f.ops {
            match op {
                Op::Empty => map.push(self.empty()?),
                Op::Fail => map.push(self.fail()?),
                Op::Range(start, end, next) => {
                    let id = self.range(*start, *end, map[*next as usize])?;
                    map.push(id);
                }
                Op::Sparse(ts) => {
                    let trans = ts
                        .iter()
                        .map(|&(start, end, next)| Transition {
                            start,
                            end,
                            next: map[next as usize],
                        })
                        .collect();
                    map.push(self.sparse(trans)?);
                }
                Op::Union(alts) => {
                    let alts = alts.iter().map(|&a| map[a as usize]).collect();
                    map.push(self.union(alts)?);
                }
                Op::Patch(from, to) => self.patch(map[*from as usize], map[*to as usize])?,
            }
        }
        Ok((map[f.entry as usize], map[f.exit as usize]))
    }

    /// A chain of byte ranges ending in `next`; returns the first state.
    fn chain(&mut self, ranges: &[(u8, u8)], next: StateID) -> Result<StateID> {
        let mut next = next;
        for &(start, end) in ranges.iter().rev() {
            next = self.range(start, end, next)?;
        }
        Ok(next)
    }

    /// A state whose byte transitions are `t` (bytes mapped to `None` have none).
    fn table(&mut self, t: &[Option<StateID>; 256]) -> Result<StateID> {
        let mut trans = Vec::new();
        let mut b = 0usize;
        while b < 256 {
            let Some(next) = t[b] else {
                b += 1;
                continue;
            };
            let mut e = b;
            while e + 1 < 256 && t[e + 1] == Some(next) {
                e += 1;
            }
            trans.push(Transition {
                start: b as u8,
                end: e as u8,
                next,
            });
            b = e + 1;
        }
        if trans.is_empty() {
            self.fail()
        } else {
            self.sparse(trans)
        }
    }

    /// A state reading the bytes in `ranges` into `next`.
    fn on(&mut self, ranges: &[(u8, u8)], next: StateID) -> Result<StateID> {
        let mut t = [None; 256];
        for &(a, b) in ranges {
            for x in a..=b {
                t[x as usize] = Some(next);
            }
        }
        self.table(&t)
    }

    fn char_tails(&mut self, to: StateID) -> Result<CharTails> {
        const HEX: [(u8, u8); 3] = [(b'0', b'9'), (b'A', b'F'), (b'a', b'f')];
        let h1 = self.on(&HEX, to)?;
        let h2 = self.on(&HEX, h1)?;
        let h3 = self.on(&HEX, h2)?;
        // a high surrogate's last three digits, then `\u` and a low surrogate
        let low = self.on(&[(b'C', b'F'), (b'c', b'f')], h2)?;
        let low = self.on(&[(b'D', b'D'), (b'd', b'd')], low)?;
        let low = self.on(&[(b'u', b'u')], low)?;
        let low = self.on(&[(b'\\', b'\\')], low)?;
        let high = self.on(&HEX, low)?;
        let high = self.on(&HEX, high)?;
        let mut t = [None; 256];
        for x in b'0'..=b'7' {
            t[x as usize] = Some(h2);
        }
        for x in [b'8', b'9', b'a', b'b', b'A', b'B'] {
            t[x as usize] = Some(high);
        }
        let d = self.table(&t)?;
        let c1 = self.on(&[(0x80, 0xBF)], to)?;
        let c2 = self.on(&[(0x80, 0xBF)], c1)?;
        let c3 = self.on(&[(0x80, 0xBF)], c2)?;
        let e0 = self.on(&[(0xA0, 0xBF)], c1)?;
        let ed = self.on(&[(0x80, 0x9F)], c1)?;
        let f0 = self.on(&[(0x90, 0xBF)], c2)?;
        let f4 = self.on(&[(0x80, 0x8F)], c2)?;
        Ok(CharTails {
            to,
            hex: [h1, h2, h3],
            d,
            cont: [c1, c2, c3],
            e0,
            ed,
            f0,
            f4,
        })
    }

    /// A state reading one character in any JSON string spelling: the ASCII characters of
    /// `kids` continue in their own states, every other character in `t.to`.
    fn one_char(&mut self, kids: &[(u8, StateID)], t: &CharTails) -> Result<StateID> {
        let kid = |c: u8| kids.iter().find(|k| k.0 == c).map(|k| k.1);
        // `\u` and four hex digits: a trie over the kids' codes (`00XY`)
        let mut u = [None; 256];
        for d in 0..16u8 {
            for b in hex_digit_bytes(d) {
                u[b as usize] = Some(if d == 0xD { t.d } else { t.hex[2] });
            }
        }
        if !kids.is_empty() {
            let mut third = [None; 256];
            for d in 0..16u8 {
                for b in hex_digit_bytes(d) {
                    third[b as usize] = Some(t.hex[0]);
                }
            }
            let mut highs: Vec<u8> = kids.iter().map(|k| k.0 >> 4).collect();
            highs.dedup();
            for h in highs {
                let mut fourth = [None; 256];
                for d in 0..16u8 {
                    let next = kid(h << 4 | d).unwrap_or(t.to);
                    for b in hex_digit_bytes(d) {
                        fourth[b as usize] = Some(next);
                    }
                }
                let s = self.table(&fourth)?;
                for b in hex_digit_bytes(h) {
                    third[b as usize] = Some(s);
                }
            }
            let third = self.table(&third)?;
            let mut second = [None; 256];
            for d in 0..16u8 {
                for b in hex_digit_bytes(d) {
                    second[b as usize] = Some(if d == 0 { third } else { t.hex[1] });
                }
            }
            let second = self.table(&second)?;
            u[b'0' as usize] = Some(second);
        }
        let u = self.table(&u)?;
        let mut esc = [None; 256];
        for (code, e) in SHORT_ESCAPES {
            esc[e as usize] = Some(kid(code).unwrap_or(t.to));
        }
        esc[b'u' as usize] = Some(u);
        let esc = self.table(&esc)?;
        let mut raw = [None; 256];
        for c in 0x20..0x80u8 {
            raw[c as usize] = Some(kid(c).unwrap_or(t.to));
        }
        raw[b'"' as usize] = None;
        raw[b'\\' as usize] = Some(esc);
        t.utf8_leads(&mut raw);
        self.table(&raw)
    }

    /// The trie node after reading some prefix of the names: `names` are what is left of the
    /// names with that prefix. The string may end here unless a name does.
    fn name_node(&mut self, names: &[&[u8]], t: &CharTails, end: StateID) -> Result<StateID> {
        let mut firsts: Vec<u8> = names.iter().filter_map(|n| n.first().copied()).collect();
        firsts.sort_unstable();
        firsts.dedup();
        let mut kids = Vec::with_capacity(firsts.len());
        for c in firsts {
            let rest: Vec<&[u8]> = names
                .iter()
                .filter(|n| n.first() == Some(&c))
                .map(|n| &n[1..])
                .collect();
            kids.push((c, self.name_node(&rest, t, end)?));
        }
        let read = self.one_char(&kids, t)?;
        if names.iter().any(|n| n.is_empty()) {
            Ok(read)
        } else {
            self.union(vec![read, end])
        }
    }

    /// See [`ascii_names_excluded`]; `enc` is its literal.
    fn names_excluded(&mut self, enc: &[u8]) -> Result<Frag> {
        let mut names: Vec<&[u8]> = enc.split(|&b| b == NAME_END).collect();
        // the piece after the last name's end
        names.pop();
        let (_, end, t) = self.any_chars()?;
        let entry = self.name_node(&names, &t, end)?;
        Ok((entry, end))
    }

    /// See [`char_dfa_mark`]; `enc` is its literal.
    fn char_dfa(&mut self, enc: &[u8]) -> Result<Frag> {
        let Some((start, states)) = decode_char_dfa(enc) else {
            return Err(Error::InvalidArgument("a malformed DFA mark".into()));
        };
        let end = self.empty()?;
        let heads = (0..states.len())
            .map(|_| self.empty())
            .collect::<Result<Vec<_>>>()?;
        let mut tails: FxHashMap<usize, CharTails> = FxHashMap::default();
        for (s, (accept, rest, ascii)) in states.iter().enumerate() {
            let mut to = [None; 128];
            for &(lo, hi, t) in ascii {
                for c in lo..=hi {
                    to[c as usize] = Some(heads[t]);
                }
            }
            if let Some(r) = *rest {
                if let std::collections::hash_map::Entry::Vacant(e) = tails.entry(r) {
                    e.insert(self.char_tails(heads[r])?);
                }
            }
            let read = self.one_char_of(&to, rest.and_then(|r| tails.get(&r)))?;
            let node = if *accept {
                self.union(vec![read, end])?
            } else {
                read
            };
            self.patch(heads[s], node)?;
        }
        Ok((heads[start], end))
    }

    /// A state reading one character in any JSON string spelling: an ASCII character `c`
    /// continues in `to[c]` (none: not allowed), every other character in `rest.to` (none:
    /// not allowed).
    fn one_char_of(
        &mut self,
        to: &[Option<StateID>; 128],
        rest: Option<&CharTails>,
    ) -> Result<StateID> {
        // `\u` and four hex digits: `00` and an ASCII code, or (rest) any other code
        let mut third = [None; 256];
        for h in 0..8u8 {
            let mut fourth = [None; 256];
            for d in 0..16u8 {
                if let Some(next) = to[usize::from(h << 4 | d)] {
                    for b in hex_digit_bytes(d) {
                        fourth[b as usize] = Some(next);
                    }
                }
            }
            if fourth.iter().any(Option::is_some) {
                let s = self.table(&fourth)?;
                for b in hex_digit_bytes(h) {
                    third[b as usize] = Some(s);
                }
            }
        }
        if let Some(t) = rest {
            for h in 8..16u8 {
                for b in hex_digit_bytes(h) {
                    third[b as usize] = Some(t.hex[0]);
                }
            }
        }
        let third = self.table(&third)?;
        let mut second = [None; 256];
        for b in hex_digit_bytes(0) {
            second[b as usize] = Some(third);
        }
        if let Some(t) = rest {
            for d in 1..16u8 {
                for b in hex_digit_bytes(d) {
                    second[b as usize] = Some(t.hex[1]);
                }
            }
        }
        let second = self.table(&second)?;
        let mut u = [None; 256];
        for b in hex_digit_bytes(0) {
            u[b as usize] = Some(second);
        }
        if let Some(t) = rest {
            for d in 1..16u8 {
                for b in hex_digit_bytes(d) {
                    u[b as usize] = Some(if d == 0xD { t.d } else { t.hex[2] });
                }
            }
        }
        let u = self.table(&u)?;
        let mut esc = [None; 256];
        for (code, e) in SHORT_ESCAPES {
            esc[e as usize] = to[code as usize];
        }
        esc[b'u' as usize] = Some(u);
        let esc = self.table(&esc)?;
        let mut raw = [None; 256];
        for c in 0x20..0x80u8 {
            raw[c as usize] = to[c as usize];
        }
        raw[b'"' as usize] = None;
        raw[b'\\' as usize] = Some(esc);
        if let Some(t) = rest {
            t.utf8_leads(&mut raw);
        }
        self.table(&raw)
    }

    /// Any characters in any spelling (`any_char()*`): the loop's head and exit, and the tails
    /// leading back to the head.
    fn any_chars(&mut self) -> Result<(StateID, StateID, CharTails)> {
        let end = self.empty()?;
        let head = self.empty()?;
        let t = self.char_tails(head)?;
        let any = self.one_char(&[], &t)?;
        let u = self.union(vec![any, end])?;
        self.patch(head, u)?;
        Ok((head, end, t))
    }

    /// Members in order: `none` is "nothing written yet", `some` "something written" (the
    /// next member needs a separator). Each member is compiled once and entered from both.
    fn seq(&mut self, items: &[(&Hir, bool)], sep: &Hir, tail: Option<&Hir>) -> Result<Frag> {
        let entry = self.empty()?;
        let mut none = Some(entry);
        let mut some: Option<StateID> = None;
        for &(item, req) in items {
            let (is, ie) = self.c(item)?;
            let next_some = self.empty()?;
            self.patch(ie, next_some)?;
            let mut next_none = None;
            if let Some(n) = none {
                if req {
                    self.patch(n, is)?;
                } else {
                    let skip = self.empty()?;
                    let u = self.union(vec![is, skip])?;
                    self.patch(n, u)?;
                    next_none = Some(skip);
                }
            }
            if let Some(s) = some {
                let (ss, se) = self.c(sep)?;
                self.patch(se, is)?;
                if req {
                    self.patch(s, ss)?;
                } else {
                    let u = self.union(vec![ss, next_some])?;
                    self.patch(s, u)?;
                }
            }
            none = next_none;
            some = Some(next_some);
        }
        let end = self.empty()?;
        match tail {
            None => {
                for st in [none, some].into_iter().flatten() {
                    self.patch(st, end)?;
                }
            }
            Some(t) => {
                // `after` loops: separator + tail member, or the end
                let (ts, te) = self.c(t)?;
                let after = match some {
                    Some(s) => s,
                    None => self.empty()?,
                };
                let (ss, se) = self.c(sep)?;
                self.patch(se, ts)?;
                let u = self.union(vec![ss, end])?;
                self.patch(after, u)?;
                self.patch(te, after)?;
                if let Some(n) = none {
                    let u = self.union(vec![ts, end])?;
                    self.patch(n, u)?;
                }
            }
        }
        Ok((entry, end))
    }

    fn c(&mut self, h: &Hir) -> Result<Frag> {
        match h.kind() {
            HirKind::Empty => {
                let e = self.empty()?;
                Ok((e, e))
            }
            HirKind::Literal(l) => {
                let end = self.empty()?;
                let ranges: Vec<(u8, u8)> = l.0.iter().map(|&b| (b, b)).collect();
                let start = self.chain(&ranges, end)?;
                Ok((start, end))
            }
            HirKind::Class(Class::Bytes(c)) => {
                let end = self.empty()?;
                let trans: Vec<Transition> = c
                    .ranges()
                    .iter()
                    .map(|r| Transition {
                        start: r.start(),
                        end: r.end(),
                        next: end,
                    })
                    .collect();
                let start = if trans.is_empty() {
                    self.fail()?
                } else {
                    self.sparse(trans)?
                };
                Ok((start, end))
            }
            HirKind::Class(Class::Unicode(c)) => {
                let end = self.empty()?;
                let mut alts = Vec::new();
                for r in c.ranges() {
                    for seq in Utf8Sequences::new(r.start(), r.end()) {
                        let ranges: Vec<(u8, u8)> =
                            seq.as_slice().iter().map(|x| (x.start, x.end)).collect();
                        alts.push(self.chain(&ranges, end)?);
                    }
                }
                let start = match alts.len() {
                    0 => self.fail()?,
                    1 => alts[0],
                    _ => self.union(alts)?,
                };
                Ok((start, end))
            }
            HirKind::Look(_) => Err(Error::InvalidArgument(
                "assertions are not supported in a marked schema automaton".into(),
            )),
            HirKind::Capture(_) if as_list(h).is_some() => {
                let (item, sep) = as_list(h).expect("checked");
                let (is, ie) = self.c(item)?;
                let (ss, se) = self.c(sep)?;
                let end = self.empty()?;
                let u = self.union(vec![ss, end])?;
                self.patch(ie, u)?;
                self.patch(se, is)?;
                Ok((is, end))
            }
            HirKind::Capture(c) if c.name.as_deref() == Some(PART) => {
                let HirKind::Literal(key) = c.sub.kind() else {
                    return Err(Error::InvalidArgument(
                        "a malformed shared-part mark".into(),
                    ));
                };
                let key = std::str::from_utf8(&key.0).unwrap_or_default();
                let part = parts()
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(key)
                    .cloned();
                let Some(part) = part else {
                    return Err(Error::InvalidArgument(format!(
                        "the shared part {key:?} is not registered"
                    )));
                };
                self.replay(&part)
            }
            HirKind::Capture(c) if c.name.as_deref() == Some(CHAR_DFA) => {
                let HirKind::Literal(enc) = c.sub.kind() else {
                    return Err(Error::InvalidArgument("a malformed DFA mark".into()));
                };
                self.char_dfa(&enc.0)
            }
            HirKind::Capture(c) if c.name.as_deref() == Some(KEYS) => {
                let HirKind::Literal(enc) = c.sub.kind() else {
                    return Err(Error::InvalidArgument(
                        "a malformed excluded-names mark".into(),
                    ));
                };
                self.names_excluded(&enc.0)
            }
            HirKind::Capture(_) if as_shared(h).is_some() => {
                let (body, tail) = as_shared(h).expect("checked");
                let (ts, te) = self.c(tail)?;
                self.tails.push(ts);
                let body = self.c(body);
                self.tails.pop();
                let (bs, be) = body?;
                let end = self.empty()?;
                self.patch(be, end)?;
                self.patch(te, end)?;
                Ok((bs, end))
            }
            HirKind::Capture(_) if is_jump(h) => {
                let Some(&to) = self.tails.last() else {
                    return Err(Error::InvalidArgument(
                        "a jump outside a shared-tail mark".into(),
                    ));
                };
                let e = self.empty()?;
                self.patch(e, to)?;
                // The fragment never ends normally: its exit is an unreachable empty state.
                let never = self.empty()?;
                Ok((e, never))
            }
            HirKind::Capture(_) if as_seq(h).is_some() => {
                let (items, sep, tail) = as_seq(h).expect("checked");
                self.seq(&items, sep, tail)
            }
            HirKind::Capture(c) => self.c(&c.sub),
            HirKind::Concat(xs) => {
                let mut it = xs.iter();
                let Some(first) = it.next() else {
                    let e = self.empty()?;
                    return Ok((e, e));
                };
                let (start, mut end) = self.c(first)?;
                for x in it {
                    let (s, e) = self.c(x)?;
                    self.patch(end, s)?;
                    end = e;
                }
                Ok((start, end))
            }
            HirKind::Alternation(xs) => {
                let end = self.empty()?;
                let mut starts = Vec::with_capacity(xs.len());
                for x in xs {
                    let (s, e) = self.c(x)?;
                    self.patch(e, end)?;
                    starts.push(s);
                }
                let start = self.union(starts)?;
                Ok((start, end))
            }
            HirKind::Repetition(r) if r.min == 0 && r.max.is_none() && is_any_char(&r.sub) => {
                // an unconstrained string's content: about a third of the states of the HIR's
                let (head, end, _) = self.any_chars()?;
                Ok((head, end))
            }
            HirKind::Repetition(r) => {
                let (min, max) = (r.min, r.max);
                let entry = self.empty()?;
                let mut end = entry;
                for _ in 0..min {
                    let (s, e) = self.c(&r.sub)?;
                    self.patch(end, s)?;
                    end = e;
                }
                match max {
                    None => {
                        // a loop: union → sub → back to the union, or out
                        let (s, e) = self.c(&r.sub)?;
                        let out = self.empty()?;
                        let u = self.union(vec![s, out])?;
                        self.patch(end, u)?;
                        self.patch(e, u)?;
                        Ok((entry, out))
                    }
                    Some(max) => {
                        let out = self.empty()?;
                        for _ in min..max {
                            let (s, e) = self.c(&r.sub)?;
                            let u = self.union(vec![s, out])?;
                            self.patch(end, u)?;
                            end = e;
                        }
                        self.patch(end, out)?;
                        Ok((entry, out))
                    }
                }
            }
        }
    }
}

/// Compile `h` (which may hold list marks) into an anchored NFA.
pub(crate) fn build(h: &Hir, max_nfa_bytes: usize) -> Result<NFA> {
    let mut c = Compiler {
        b: Builder::new(),
        log: None,
        tails: Vec::new(),
    };
    c.b.set_size_limit(Some(max_nfa_bytes)).map_err(budget)?;
    c.b.start_pattern().map_err(budget)?;
    let (start, end) = c.c(h)?;
    let m = c.b.add_match().map_err(budget)?;
    c.patch(end, m)?;
    c.b.finish_pattern(start).map_err(budget)?;
    c.b.build(start, start).map_err(budget)
}

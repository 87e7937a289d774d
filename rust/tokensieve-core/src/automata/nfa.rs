//! The typed intermediate form ([`super::expr::Expr`]) → Thompson NFA, with one copy of each
//! part of the constructs a HIR cannot share (separated lists, member sequences, shared tails,
//! excluded names, character DFAs) and the registry of parts compiled once per process.
//! Plain expressions keep regex-automata's own compiler (see [`super::dfa::LazyDfa::from_expr`]).

use std::sync::{Arc, Mutex, OnceLock};

use regex_automata::nfa::thompson::{Builder, State, Transition, NFA};
use regex_automata::util::look::Look;
use regex_automata::util::primitives::StateID;
use regex_syntax::hir::{Class, Hir, HirKind};
use regex_syntax::utf8::Utf8Sequences;
use rustc_hash::FxHashMap;

use super::expr::{CharStates, Expr, Names};
use crate::error::{Error, Result};

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

impl CharTails {
    /// The lead bytes of raw multi-byte UTF-8 characters and their continuations, after
    /// every ASCII byte.
    fn utf8_lead_runs(&self, raw: &mut Runs) {
        for (a, b, next) in self.leads() {
            raw.push(a, next);
            if let Some(last) = raw.0.last_mut() {
                last.end = b;
            }
        }
    }

    fn leads(&self) -> [(u8, u8, StateID); 8] {
        [
            (0xC2, 0xDF, self.cont[0]),
            (0xE0, 0xE0, self.e0),
            (0xE1, 0xEC, self.cont[1]),
            (0xED, 0xED, self.ed),
            (0xEE, 0xEF, self.cont[1]),
            (0xF0, 0xF0, self.f0),
            (0xF1, 0xF3, self.cont[2]),
            (0xF4, 0xF4, self.f4),
        ]
    }
}

/// The hex digit bytes in increasing order, with their values.
const HEX_BYTES: [(u8, u8); 22] = [
    (b'0', 0),
    (b'1', 1),
    (b'2', 2),
    (b'3', 3),
    (b'4', 4),
    (b'5', 5),
    (b'6', 6),
    (b'7', 7),
    (b'8', 8),
    (b'9', 9),
    (b'A', 10),
    (b'B', 11),
    (b'C', 12),
    (b'D', 13),
    (b'E', 14),
    (b'F', 15),
    (b'a', 10),
    (b'b', 11),
    (b'c', 12),
    (b'd', 13),
    (b'e', 14),
    (b'f', 15),
];

/// [`SHORT_ESCAPES`] by the letter after the backslash, in increasing order: (letter,
/// character).
const ESCAPES_BY_LETTER: [(u8, u8); 8] = [
    (b'"', b'"'),
    (b'/', b'/'),
    (b'\\', b'\\'),
    (b'b', 0x08),
    (b'f', 0x0C),
    (b'n', 0x0A),
    (b'r', 0x0D),
    (b't', 0x09),
];

/// Byte transitions given in increasing byte order, runs of neighbouring bytes with one
/// target merged into one range.
#[derive(Default)]
struct Runs(Vec<Transition>);

impl Runs {
    fn push(&mut self, b: u8, next: StateID) {
        if let Some(last) = self.0.last_mut() {
            if last.next == next && last.end.checked_add(1) == Some(b) {
                last.end = b;
                return;
            }
        }
        self.0.push(Transition {
            start: b,
            end: b,
            next,
        });
    }
}

/// Whether `h` is [`super::spell::any_char`]'s HIR.
fn is_any_char(h: &Hir) -> bool {
    thread_local! {
        static ANY: Hir = super::spell::any_char();
    }
    matches!(h.kind(), HirKind::Alternation(xs) if xs.len() == 2) && ANY.with(|a| a == h)
}

/// Shared parts registered in this process, at most this many (each a few hundred kB at most).
const MAX_PARTS: usize = 64;

/// A sub-automaton that occurs in many grammars (an unconstrained JSON value), compiled once
/// per process and copied state by state into each automaton that holds it (see [`share`]).
#[derive(Debug)]
pub(crate) struct Part {
    fragment: Fragment,
    /// Whether the part holds a counter (see [`Count`]).
    counted: bool,
    /// Whether every string of the part's language is non-empty.
    nonempty: bool,
    /// Whether some string is surely in the part's language.
    inhabited: bool,
}

impl Part {
    /// The weight of the expression it was compiled from, for the compiler's budgets.
    pub(crate) fn weight(&self) -> u64 {
        self.fragment.weight
    }

    pub(crate) fn counted(&self) -> bool {
        self.counted
    }

    pub(crate) fn nonempty(&self) -> bool {
        self.nonempty
    }

    pub(crate) fn inhabited(&self) -> bool {
        self.inhabited
    }
}

/// A counter instruction. A counted repetition (see [`super::expr::counts`], [`super::hir::counts`]) compiles to one
/// copy of its body and four marker states carrying these; the lazy DFA keeps a count beside
/// each NFA state of its subsets and applies them in the epsilon closure
/// (`super::dfa`). Counted regions never nest, so one count per NFA state is enough. Recursive expressions
/// compile to one copy of their body entered through `Push` markers and left through `Pop`
/// markers: the DFA keeps a stack of call sites beside each NFA state of its subsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Count {
    /// Entering the repetition: the count starts at zero.
    Enter,
    /// The start of the body: another repetition may start only while the count is below
    /// `max`. Both bounds are kept here for the lazy DFA, which reads the bounds of a counted
    /// region from the states reached from this marker.
    Take {
        min: u32,
        max: Option<u32>,
        /// The body is a character automaton under length bounds (see `Compiler::char_dfa`):
        /// whether a count can still finish depends on the automaton's state, which the lazy
        /// DFA checks from the completion lengths of each state of the region.
        sized: bool,
    },
    /// One repetition done: the count goes up by one, saturating at this (the largest count
    /// that matters: the maximum, or the minimum when there is none).
    Incr(u32),
    /// Leaving the repetition needs at least this count; the count is dropped (back to zero).
    Leave(u32),
    /// A call of recursive expression `rec` (see [`super::expr::Expr::Recursive`]): push a
    /// frame naming the call site (0: the expression's entry from outside; `i`: its `i`-th
    /// [`super::expr::Expr::Recur`]).
    Push { rec: u32, site: u32 },
    /// The return from `rec` to a call site: allowed only when the top frame names it; pops it.
    Pop { rec: u32, site: u32 },
    /// Allowed only while fewer than this many frames of the current recursive expression are
    /// open on top of the stack (see [`super::expr::Expr::DepthBelow`]).
    RunBelow(u32),
    /// Allowed only while the stack holds fewer than this many frames in all.
    StackBelow(u32),
    /// A call of rule `r` (see [`super::rules`]): push a frame naming this marker and continue
    /// at the rule's entry, compiling the rule first when it is entered for the first time.
    /// The marker's own next state is where the call returns.
    Call(u32),
    /// The end of a rule: pop the call frame on top and continue after its `Call` marker.
    Return,
}

/// The look-around kind the builder gives marker states. [`crate::regex::parse`] refuses it and
/// the schema compiler never writes it, so every state of this kind is a marker.
pub(crate) const MARKER: Look = Look::WordUnicodeNegate;

/// An NFA and the counter instruction of each marker state (indexed by NFA state id).
pub(crate) struct Built {
    pub nfa: NFA,
    pub counts: Vec<Option<Count>>,
}

fn parts() -> &'static Mutex<FxHashMap<String, Arc<Part>>> {
    static PARTS: OnceLock<Mutex<FxHashMap<String, Arc<Part>>>> = OnceLock::new();
    PARTS.get_or_init(|| Mutex::new(FxHashMap::default()))
}

/// The part registered under `key`, if there is one. `key` must determine the part's language.
pub(crate) fn shared_part(key: &str) -> Option<Expr> {
    let reg = parts().lock().unwrap_or_else(|e| e.into_inner());
    reg.get(key).map(|p| Expr::Part(p.clone()))
}

/// Register `e` as the part `key` and return it as a part; when the registry is full, `e`
/// itself.
pub(crate) fn share(key: &str, e: Expr) -> Result<Expr> {
    if let Some(p) = shared_part(key) {
        return Ok(p);
    }
    if parts().lock().unwrap_or_else(|e| e.into_inner()).len() >= MAX_PARTS {
        return Ok(e);
    }
    let mut c = Compiler {
        b: Builder::new(),
        log: Some(Vec::new()),
        tails: Vec::new(),
        every: Default::default(),
        marks: Vec::new(),
        recs: Vec::new(),
        next_rec: 0,
        last_rec: None,
        called: FxHashMap::default(),
        in_counted: 0,
    };
    let (entry, exit) = c.e(&e)?;
    let call = match (&e, c.last_rec) {
        (Expr::Recursive { .. }, Some((body, dispatch, rec, sites))) => Some(Callable {
            body: body.as_u32(),
            dispatch: dispatch.as_u32(),
            rec,
            sites,
        }),
        _ => None,
    };
    let counted = c.marks.contains(&Count::Enter);
    let ops = c.log.take().unwrap_or_default();
    let states = ops.iter().filter(|o| !matches!(o, Op::Patch(..))).count();
    let part = Arc::new(Part {
        fragment: Fragment {
            ops,
            states,
            entry: entry.as_u32(),
            exit: exit.as_u32(),
            weight: e.weight(),
            call,
        },
        counted,
        nonempty: e.surely_nonempty(),
        inhabited: super::rules::inhabited(&e),
    });
    let p = parts()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.to_string())
        .or_insert(part)
        .clone();
    Ok(Expr::Part(p))
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
    Mark(Count, u32),
    Look(Look, u32),
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
    /// When the part is a recursive expression at its top (the any-JSON value): how to call
    /// its one copy again from another place (see [`Compiler::call_part`]).
    call: Option<Callable>,
}

/// The states of a recorded recursive expression that another call site needs, in the
/// fragment's own ids: its body's entry, the dispatch of its returns (a union of `Pop`
/// markers), its marker number, and how many call sites it already has.
#[derive(Debug, Clone, Copy)]
struct Callable {
    body: u32,
    dispatch: u32,
    rec: u32,
    sites: u32,
}

/// A shared part called in the automaton being built: its marker number there, its body's
/// entry and return dispatch, and the site number the next call gets.
#[derive(Debug, Clone, Copy)]
struct Called {
    rec: u32,
    body: StateID,
    dispatch: StateID,
    next_site: u32,
}

struct Compiler {
    b: Builder,
    /// The builder calls made so far, when recording a fragment.
    log: Option<Vec<Op>>,
    /// Entry states of the tails of the enclosing `WithTail` expressions, innermost last.
    tails: Vec<StateID>,
    /// The compile deadline, checked every so many builder calls.
    every: crate::budget::Every,
    /// The counter instruction of each marker state, in creation order.
    marks: Vec<Count>,
    /// The enclosing `Recursive` expressions, innermost last: the expression's id, its marker
    /// number, the body's entry and the return point of each call site built so far.
    recs: Vec<(u32, u32, StateID, Vec<StateID>)>,
    /// The number the next recursive expression built gets in its markers: every copy of a
    /// recursive expression (a copied shared part included) has its own.
    next_rec: u32,
    /// The outermost recursive expression built last: body entry, return dispatch, marker
    /// number, call sites (what a shared part needs to be called, see [`Callable`]).
    last_rec: Option<(StateID, StateID, u32, u32)>,
    /// The shared parts called so far, by address (see [`Compiler::call_part`]).
    called: FxHashMap<usize, Called>,
    /// How many counted repetition bodies enclose what is being built: a shared part is
    /// copied there, since a count travels through its states (see `super::dfa`).
    in_counted: u32,
}

fn budget(e: impl std::fmt::Display) -> Error {
    Error::Budget(format!(
        "the automaton is too large ({e}); lower count bounds, nesting or recursion depth, or \
         raise max_nfa_bytes"
    ))
}

impl Compiler {
    fn log(&mut self, op: Op) -> Result<()> {
        if let Some(l) = self.log.as_mut() {
            l.push(op);
        }
        self.every.tick("building the automaton")
    }

    fn empty(&mut self) -> Result<StateID> {
        self.log(Op::Empty)?;
        self.b.add_empty().map_err(budget)
    }

    fn fail(&mut self) -> Result<StateID> {
        self.log(Op::Fail)?;
        self.b.add_fail().map_err(budget)
    }

    fn sparse(&mut self, trans: Vec<Transition>) -> Result<StateID> {
        self.log(Op::Sparse(
            trans
                .iter()
                .map(|t| (t.start, t.end, t.next.as_u32()))
                .collect(),
        ))?;
        self.b.add_sparse(trans).map_err(budget)
    }

    fn range(&mut self, start: u8, end: u8, next: StateID) -> Result<StateID> {
        self.log(Op::Range(start, end, next.as_u32()))?;
        self.b
            .add_range(Transition { start, end, next })
            .map_err(budget)
    }

    fn patch(&mut self, from: StateID, to: StateID) -> Result<()> {
        self.log(Op::Patch(from.as_u32(), to.as_u32()))?;
        self.b.patch(from, to).map_err(budget)
    }

    fn fresh_rec(&mut self) -> u32 {
        self.next_rec += 1;
        self.next_rec
    }

    /// A marker state carrying `op`, then `next`.
    fn mark(&mut self, op: Count, next: StateID) -> Result<StateID> {
        self.log(Op::Mark(op, next.as_u32()))?;
        self.marks.push(op);
        self.b.add_look(next, MARKER).map_err(budget)
    }

    /// A look-around state (`\A`, `\z`), then `next`.
    fn look(&mut self, look: Look, next: StateID) -> Result<StateID> {
        self.log(Op::Look(look, next.as_u32()))?;
        self.b.add_look(next, look).map_err(budget)
    }

    fn union(&mut self, alts: Vec<StateID>) -> Result<StateID> {
        self.log(Op::Union(alts.iter().map(|a| a.as_u32()).collect()))?;
        self.b.add_union(alts).map_err(budget)
    }

    /// Add a recorded fragment's states again (logged too, when recording); returns its entry
    /// and exit.
    fn replay(&mut self, f: &Fragment) -> Result<Frag> {
        self.replay_numbered(f).map(|(frag, _, _)| frag)
    }

    /// [`Compiler::replay`], also returning the new id of every fragment state and the new
    /// number of every recursive expression.
    fn replay_numbered(
        &mut self,
        f: &Fragment,
    ) -> Result<(Frag, Vec<StateID>, FxHashMap<u32, u32>)> {
        let mut map: Vec<StateID> = Vec::with_capacity(f.states);
        // each replay's recursive expressions get numbers of their own
        let mut recs: FxHashMap<u32, u32> = FxHashMap::default();
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
                Op::Mark(op, next) => {
                    let op = match *op {
                        Count::Push { rec, site } => Count::Push {
                            rec: *recs.entry(rec).or_insert_with(|| self.fresh_rec()),
                            site,
                        },
                        Count::Pop { rec, site } => Count::Pop {
                            rec: *recs.entry(rec).or_insert_with(|| self.fresh_rec()),
                            site,
                        },
                        op => op,
                    };
                    let id = self.mark(op, map[*next as usize])?;
                    map.push(id);
                }
                Op::Look(look, next) => {
                    let id = self.look(*look, map[*next as usize])?;
                    map.push(id);
                }
            }
        }
        Ok(((map[f.entry as usize], map[f.exit as usize]), map, recs))
    }

    /// A shared part that is a recursive expression, built once per automaton and called from
    /// each place it occurs: the first occurrence copies it (entered from outside as site 0,
    /// as any copy is); each later one is one more call site of that copy — a `Push` of a new
    /// site into its body, and a `Pop` of that site, added to its return dispatch, to a new
    /// return point. The language is that of copies: each call's frame names where it returns,
    /// as a copy's own site-0 frame did, and no frame of another occurrence can be below it
    /// with the same marker number (a part never holds another occurrence of itself).
    fn call_part(&mut self, p: &Arc<Part>, call: Callable) -> Result<Frag> {
        let key = Arc::as_ptr(p) as usize;
        if let Some(c) = self.called.get_mut(&key) {
            let (rec, body, dispatch, site) = (c.rec, c.body, c.dispatch, c.next_site);
            c.next_site += 1;
            let ret = self.empty()?;
            let pop = self.mark(Count::Pop { rec, site }, ret)?;
            self.patch(dispatch, pop)?;
            let push = self.mark(Count::Push { rec, site }, body)?;
            return Ok((push, ret));
        }
        let (frag, map, recs) = self.replay_numbered(&p.fragment)?;
        let Some(&rec) = recs.get(&call.rec) else {
            return Err(lost_marker());
        };
        self.called.insert(
            key,
            Called {
                rec,
                body: map[call.body as usize],
                dispatch: map[call.dispatch as usize],
                next_site: call.sites,
            },
        );
        Ok(frag)
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

    /// A state whose byte transitions are `r` (none: the fail state).
    fn runs(&mut self, r: Runs) -> Result<StateID> {
        if r.0.is_empty() {
            self.fail()
        } else {
            self.sparse(r.0)
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
    /// `kids` (sorted by character) continue in their own states, every other character in
    /// `t.to`.
    fn one_char(&mut self, kids: &[(u8, StateID)], t: &CharTails) -> Result<StateID> {
        let mut kid = [None; 128];
        for &(c, s) in kids {
            kid[c as usize] = Some(s);
        }
        // `\u` and four hex digits: a trie over the kids' codes (`00XY`)
        let mut u = Runs::default();
        for (b, d) in HEX_BYTES {
            if d == 0 && !kids.is_empty() {
                let mut second = Runs::default();
                for (b2, d2) in HEX_BYTES {
                    let next = if d2 == 0 {
                        let mut third = Runs::default();
                        for (b3, h) in HEX_BYTES {
                            let has_kid = h < 8
                                && kid[usize::from(h) << 4..][..16].iter().any(Option::is_some);
                            let next = if has_kid {
                                let mut fourth = Runs::default();
                                for (b4, d4) in HEX_BYTES {
                                    fourth.push(b4, kid[usize::from(h << 4 | d4)].unwrap_or(t.to));
                                }
                                self.runs(fourth)?
                            } else {
                                t.hex[0]
                            };
                            third.push(b3, next);
                        }
                        self.runs(third)?
                    } else {
                        t.hex[1]
                    };
                    second.push(b2, next);
                }
                u.push(b, self.runs(second)?);
            } else {
                u.push(b, if d == 0xD { t.d } else { t.hex[2] });
            }
        }
        let u = self.runs(u)?;
        let mut esc = Runs::default();
        for (e, code) in ESCAPES_BY_LETTER {
            esc.push(e, kid[code as usize].unwrap_or(t.to));
        }
        esc.push(b'u', u);
        let esc = self.runs(esc)?;
        let mut raw = Runs::default();
        for c in 0x20..0x80u8 {
            match c {
                b'"' => {}
                b'\\' => raw.push(c, esc),
                _ => raw.push(c, kid[c as usize].unwrap_or(t.to)),
            }
        }
        t.utf8_lead_runs(&mut raw);
        self.runs(raw)
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

    /// See [`super::expr::ascii_names_excluded`].
    fn names_excluded(&mut self, n: &Names) -> Result<Frag> {
        let names: Vec<&[u8]> = n.names.iter().map(Vec::as_slice).collect();
        let (_, end, t) = self.any_chars()?;
        let entry = self.name_node(&names, &t, end)?;
        Ok((entry, end))
    }

    /// See [`super::expr::char_dfa`].
    ///
    /// With length bounds (`d.len`), the characters are counted as a counted repetition's
    /// bodies are (see [`Count`]): entering counts zero, each state reads a character only while
    /// the count is below the maximum (its `Take` marker, flagged `sized`) and every character
    /// read counts one on its way into its target state (one `Incr` marker per target); an
    /// accepting state leaves once the count is at the minimum. Which counts can still finish
    /// from a state depends on the state here (a format's remaining parts have lengths of their
    /// own): the lazy DFA checks it (`dfa::LengthSets`).
    fn char_dfa(&mut self, d: &CharStates) -> Result<Frag> {
        let (start, states) = (d.start, &d.states);
        let end = self.empty()?;
        let heads = (0..states.len())
            .map(|_| self.empty())
            .collect::<Result<Vec<_>>>()?;
        // where a character read leads: the target's head, or its `Incr` marker when counted
        let into = match d.len {
            None => heads.clone(),
            Some((min, max)) => {
                let cap = max.unwrap_or(min);
                heads
                    .iter()
                    .map(|&h| self.mark(Count::Incr(cap), h))
                    .collect::<Result<Vec<_>>>()?
            }
        };
        let leave = match d.len {
            Some((min, _)) => self.mark(Count::Leave(min), end)?,
            None => end,
        };
        let mut tails: FxHashMap<usize, CharTails> = FxHashMap::default();
        for (s, st) in states.iter().enumerate() {
            let (accept, rest) = (st.accept, st.rest);
            let mut to = [None; 128];
            for &(lo, hi, t) in &st.ascii {
                for c in lo..=hi {
                    to[c as usize] = Some(into[t]);
                }
            }
            if let Some(r) = rest {
                if let std::collections::hash_map::Entry::Vacant(e) = tails.entry(r) {
                    e.insert(self.char_tails(into[r])?);
                }
            }
            let mut read = self.one_char_of(&to, rest.and_then(|r| tails.get(&r)))?;
            if let Some((min, max)) = d.len {
                read = self.mark(
                    Count::Take {
                        min,
                        max,
                        sized: true,
                    },
                    read,
                )?;
            }
            let node = if accept {
                self.union(vec![read, leave])?
            } else {
                read
            };
            self.patch(heads[s], node)?;
        }
        match d.len {
            Some(_) => Ok((self.mark(Count::Enter, heads[start])?, end)),
            None => Ok((heads[start], end)),
        }
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
        let mut fourths: [Option<StateID>; 8] = [None; 8];
        for (h, slot) in fourths.iter_mut().enumerate() {
            let mut fourth = Runs::default();
            for (b, d) in HEX_BYTES {
                if let Some(next) = to[h << 4 | usize::from(d)] {
                    fourth.push(b, next);
                }
            }
            if !fourth.0.is_empty() {
                *slot = Some(self.runs(fourth)?);
            }
        }
        let mut third = Runs::default();
        for (b, h) in HEX_BYTES {
            if h < 8 {
                if let Some(s) = fourths[h as usize] {
                    third.push(b, s);
                }
            } else if let Some(t) = rest {
                third.push(b, t.hex[0]);
            }
        }
        let third = self.runs(third)?;
        let mut second = Runs::default();
        for (b, d) in HEX_BYTES {
            if d == 0 {
                second.push(b, third);
            } else if let Some(t) = rest {
                second.push(b, t.hex[1]);
            }
        }
        let second = self.runs(second)?;
        let mut u = Runs::default();
        for (b, d) in HEX_BYTES {
            if d == 0 {
                u.push(b, second);
            } else if let Some(t) = rest {
                u.push(b, if d == 0xD { t.d } else { t.hex[2] });
            }
        }
        let u = self.runs(u)?;
        let mut esc = Runs::default();
        for (e, code) in ESCAPES_BY_LETTER {
            if let Some(next) = to[code as usize] {
                esc.push(e, next);
            }
        }
        esc.push(b'u', u);
        let esc = self.runs(esc)?;
        let mut raw = Runs::default();
        for c in 0x20..0x80u8 {
            match c {
                b'"' => {}
                b'\\' => raw.push(c, esc),
                _ => {
                    if let Some(next) = to[c as usize] {
                        raw.push(c, next);
                    }
                }
            }
        }
        if let Some(t) = rest {
            t.utf8_lead_runs(&mut raw);
        }
        self.runs(raw)
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
    fn seq(&mut self, items: &[(Expr, bool)], sep: &Expr, tail: Option<&Expr>) -> Result<Frag> {
        let entry = self.empty()?;
        let mut none = Some(entry);
        let mut some: Option<StateID> = None;
        for (item, req) in items {
            let req = *req;
            let (is, ie) = self.e(item)?;
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
                let (ss, se) = self.e(sep)?;
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
                let (ts, te) = self.e(t)?;
                let after = match some {
                    Some(s) => s,
                    None => self.empty()?,
                };
                let (ss, se) = self.e(sep)?;
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
            HirKind::Look(l) => {
                let look = match l {
                    regex_syntax::hir::Look::Start => Look::Start,
                    regex_syntax::hir::Look::End => Look::End,
                    _ => {
                        return Err(Error::InvalidArgument(
                            "only \\A and \\z assertions are supported here".into(),
                        ))
                    }
                };
                let end = self.empty()?;
                let start = self.look(look, end)?;
                Ok((start, end))
            }
            HirKind::Capture(c) => self.c(&c.sub),
            HirKind::Concat(xs) => self.sequence(xs, Self::c),
            HirKind::Alternation(xs) => self.alternation(xs, Self::c),
            HirKind::Repetition(r) if r.min == 0 && r.max.is_none() && is_any_char(&r.sub) => {
                // an unconstrained string's content: about a third of the states of the HIR's
                let (head, end, _) = self.any_chars()?;
                Ok((head, end))
            }
            HirKind::Repetition(r) if super::hir::counts(r) => {
                self.counted(r.min, r.max, |c| c.c(&r.sub))
            }
            HirKind::Repetition(r) => self.repeat(r.min, r.max, |c| c.c(&r.sub)),
        }
    }

    /// `sub{min,max}` with one copy of `sub` and a counter (see [`Count`]): enter (count 0),
    /// then at the loop's head either another repetition (while the count is below `max`) or
    /// the exit (once it is at least `min`); each repetition's end counts one.
    fn counted(
        &mut self,
        min: u32,
        max: Option<u32>,
        sub: impl FnOnce(&mut Self) -> Result<Frag>,
    ) -> Result<Frag> {
        let head = self.empty()?;
        let out = self.empty()?;
        self.in_counted += 1;
        let built = sub(self);
        self.in_counted -= 1;
        let (s, e) = built?;
        let take = self.mark(
            Count::Take {
                min,
                max,
                sized: false,
            },
            s,
        )?;
        let leave = self.mark(Count::Leave(min), out)?;
        let u = self.union(vec![take, leave])?;
        self.patch(head, u)?;
        let incr = self.mark(Count::Incr(max.unwrap_or(min)), head)?;
        self.patch(e, incr)?;
        let entry = self.mark(Count::Enter, head)?;
        Ok((entry, out))
    }

    /// `sub{min,max}`, each copy built by `sub`.
    fn repeat(
        &mut self,
        min: u32,
        max: Option<u32>,
        mut sub: impl FnMut(&mut Self) -> Result<Frag>,
    ) -> Result<Frag> {
        let entry = self.empty()?;
        let mut end = entry;
        for _ in 0..min {
            let (s, e) = sub(self)?;
            self.patch(end, s)?;
            end = e;
        }
        match max {
            None => {
                // a loop: union → sub → back to the union, or out
                let (s, e) = sub(self)?;
                let out = self.empty()?;
                let u = self.union(vec![s, out])?;
                self.patch(end, u)?;
                self.patch(e, u)?;
                Ok((entry, out))
            }
            Some(max) => {
                let out = self.empty()?;
                for _ in min..max {
                    let (s, e) = sub(self)?;
                    let u = self.union(vec![s, out])?;
                    self.patch(end, u)?;
                    end = e;
                }
                self.patch(end, out)?;
                Ok((entry, out))
            }
        }
    }

    /// The fragments of `xs` (each built by `part`) in sequence.
    fn sequence<T>(
        &mut self,
        xs: &[T],
        mut part: impl FnMut(&mut Self, &T) -> Result<Frag>,
    ) -> Result<Frag> {
        let Some((first, rest)) = xs.split_first() else {
            let e = self.empty()?;
            return Ok((e, e));
        };
        let (start, mut end) = part(self, first)?;
        for x in rest {
            let (s, e) = part(self, x)?;
            self.patch(end, s)?;
            end = e;
        }
        Ok((start, end))
    }

    /// The union of the fragments of `xs` (each built by `part`), joined at one end state.
    fn alternation<T>(
        &mut self,
        xs: &[T],
        mut part: impl FnMut(&mut Self, &T) -> Result<Frag>,
    ) -> Result<Frag> {
        let end = self.empty()?;
        let mut starts = Vec::with_capacity(xs.len());
        for x in xs {
            let (s, e) = part(self, x)?;
            self.patch(e, end)?;
            starts.push(s);
        }
        let start = self.union(starts)?;
        Ok((start, end))
    }

    fn e(&mut self, x: &Expr) -> Result<Frag> {
        match x {
            Expr::Hir(h) => self.c(h),
            Expr::Concat(xs) => self.sequence(xs, Self::e),
            Expr::Alt(xs) => self.alternation(xs, Self::e),
            Expr::Repeat { sub, min, max } if super::expr::counts(sub, *min, *max) => {
                self.counted(*min, *max, |c| c.e(sub))
            }
            Expr::Repeat { sub, min, max } => self.repeat(*min, *max, |c| c.e(sub)),
            Expr::List { item, sep } => {
                let (is, ie) = self.e(item)?;
                let (ss, se) = self.e(sep)?;
                let end = self.empty()?;
                let u = self.union(vec![ss, end])?;
                self.patch(ie, u)?;
                self.patch(se, is)?;
                Ok((is, end))
            }
            Expr::Members {
                items, sep, tail, ..
            } => self.seq(items, sep, tail.as_deref()),
            Expr::WithTail { body, tail } => {
                let (ts, te) = self.e(tail)?;
                self.tails.push(ts);
                let body = self.e(body);
                self.tails.pop();
                let (bs, be) = body?;
                let end = self.empty()?;
                self.patch(be, end)?;
                self.patch(te, end)?;
                Ok((bs, end))
            }
            Expr::Jump => {
                let Some(&to) = self.tails.last() else {
                    return Err(Error::InvalidArgument(
                        "a jump outside a shared-tail expression".into(),
                    ));
                };
                let e = self.empty()?;
                self.patch(e, to)?;
                // The fragment never ends normally: its exit is an unreachable empty state.
                let never = self.empty()?;
                Ok((e, never))
            }
            Expr::NamesExcluded(n) => self.names_excluded(n),
            Expr::CharDfa(d) => self.char_dfa(d),
            Expr::Part(p) => match p.fragment.call {
                Some(call) if self.log.is_none() && self.in_counted == 0 && share_calls() => {
                    self.call_part(p, call)
                }
                _ => self.replay(&p.fragment),
            },
            Expr::Recursive { id, body } => {
                // calls jump to `entry`; the body's end returns to the site on top of the stack.
                // A jump inside the body cannot leave it (its path would skip the return).
                let rec = self.fresh_rec();
                let entry = self.empty()?;
                let tails = std::mem::take(&mut self.tails);
                self.recs.push((*id, rec, entry, Vec::new()));
                let built = self.e(body);
                let (_, _, _, rets) = self.recs.pop().expect("pushed above");
                self.tails = tails;
                let (bs, be) = built?;
                self.patch(entry, bs)?;
                let exit = self.empty()?;
                let mut outs = vec![self.mark(Count::Pop { rec, site: 0 }, exit)?];
                for (i, r) in rets.into_iter().enumerate() {
                    let site = i as u32 + 1;
                    outs.push(self.mark(Count::Pop { rec, site }, r)?);
                }
                let sites = outs.len() as u32;
                let u = self.union(outs)?;
                self.patch(be, u)?;
                let start = self.mark(Count::Push { rec, site: 0 }, entry)?;
                if self.recs.is_empty() {
                    self.last_rec = Some((entry, u, rec, sites));
                }
                Ok((start, exit))
            }
            Expr::Recur(id) => {
                let Some(k) = self.recs.iter().rposition(|r| r.0 == *id) else {
                    return Err(Error::InvalidArgument(
                        "a recursive call outside its recursive expression".into(),
                    ));
                };
                let (_, rec, entry, _) = self.recs[k];
                let site = self.recs[k].3.len() as u32 + 1;
                let ret = self.empty()?;
                self.recs[k].3.push(ret);
                let call = self.mark(Count::Push { rec, site }, entry)?;
                Ok((call, ret))
            }
            Expr::DepthBelow(n) => {
                let e = self.empty()?;
                let guard = self.mark(Count::RunBelow(*n), e)?;
                Ok((guard, e))
            }
            Expr::StackBelow(n) => {
                let e = self.empty()?;
                let guard = self.mark(Count::StackBelow(*n), e)?;
                Ok((guard, e))
            }
            Expr::Rule(id) => {
                let ret = self.empty()?;
                let call = self.mark(Count::Call(*id), ret)?;
                Ok((call, ret))
            }
        }
    }
}

/// Compile `x` into an anchored NFA.
pub(crate) fn build(x: &Expr, max_nfa_bytes: usize) -> Result<Built> {
    build_with(x, max_nfa_bytes, 0, false).map(|(b, _)| b)
}

/// Compile `x` into an anchored NFA, numbering its recursive expressions from `first_rec` on;
/// returns it and the next free number. A `rule` (see [`super::rules`]) ends in a
/// [`Count::Return`] marker (then the match state, which the lazy DFA never reaches through
/// it): its end returns to the caller.
pub(crate) fn build_with(
    x: &Expr,
    max_nfa_bytes: usize,
    first_rec: u32,
    rule: bool,
) -> Result<(Built, u32)> {
    let mut c = Compiler {
        b: Builder::new(),
        log: None,
        tails: Vec::new(),
        every: Default::default(),
        marks: Vec::new(),
        recs: Vec::new(),
        next_rec: first_rec,
        last_rec: None,
        called: FxHashMap::default(),
        in_counted: 0,
    };
    c.b.set_size_limit(Some(max_nfa_bytes)).map_err(budget)?;
    c.b.start_pattern().map_err(budget)?;
    let (start, end) = c.e(x)?;
    let m = c.b.add_match().map_err(budget)?;
    let end_to = if rule { c.mark(Count::Return, m)? } else { m };
    c.patch(end, end_to)?;
    c.b.finish_pattern(start).map_err(budget)?;
    let nfa = c.b.build(start, start).map_err(budget)?;
    // The builder keeps every look-around state and their order (it only drops empty states),
    // so the markers are the states of the marker kind, in creation order.
    let mut counts = vec![None; nfa.states().len()];
    let mut marks = c.marks.iter();
    for (i, st) in nfa.states().iter().enumerate() {
        if let State::Look { look: MARKER, .. } = st {
            counts[i] = Some(*marks.next().ok_or_else(lost_marker)?);
        }
    }
    if marks.next().is_some() {
        return Err(lost_marker());
    }
    Ok((Built { nfa, counts }, c.next_rec))
}

fn lost_marker() -> Error {
    Error::InvalidArgument("internal: the counter markers of an automaton do not match".into())
}

#[cfg(test)]
thread_local! {
    static PART_COPIES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a shared recursive part is called from each place it occurs (always, except inside
/// [`with_part_copies`]).
fn share_calls() -> bool {
    #[cfg(test)]
    if PART_COPIES.with(std::cell::Cell::get) {
        return false;
    }
    true
}

/// Runs `f` with every shared part copied wherever it occurs, as before parts were called: the
/// differential tests' oracle. Applies to NFAs built on this thread during `f`.
#[cfg(test)]
pub(crate) fn with_part_copies<T>(f: impl FnOnce() -> T) -> T {
    let before = PART_COPIES.with(|c| c.replace(true));
    let out = f();
    PART_COPIES.with(|c| c.set(before));
    out
}

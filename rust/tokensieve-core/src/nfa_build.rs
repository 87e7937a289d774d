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

use regex_automata::nfa::thompson::{Builder, Transition, NFA};
use regex_automata::util::primitives::StateID;
use regex_syntax::hir::{Capture, Class, Hir, HirKind};
use regex_syntax::utf8::Utf8Sequences;

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

/// Whether `h` holds a list mark.
pub(crate) fn has_marks(h: &Hir) -> bool {
    match h.kind() {
        HirKind::Capture(c) => {
            matches!(c.name.as_deref(), Some(LIST) | Some(SEQ)) || has_marks(&c.sub)
        }
        HirKind::Repetition(r) => has_marks(&r.sub),
        HirKind::Concat(xs) | HirKind::Alternation(xs) => xs.iter().any(has_marks),
        _ => false,
    }
}

/// A fragment: its entry state and an `Empty` exit state still to be patched.
type Frag = (StateID, StateID);

struct Compiler {
    b: Builder,
}

fn budget(e: impl std::fmt::Display) -> Error {
    Error::Budget(format!(
        "the automaton is too large ({e}); lower count bounds, nesting or recursion depth, or \
         raise max_nfa_bytes"
    ))
}

impl Compiler {
    fn empty(&mut self) -> Result<StateID> {
        self.b.add_empty().map_err(budget)
    }

    fn patch(&mut self, from: StateID, to: StateID) -> Result<()> {
        self.b.patch(from, to).map_err(budget)
    }

    fn union(&mut self, alts: Vec<StateID>) -> Result<StateID> {
        self.b.add_union(alts).map_err(budget)
    }

    /// A chain of byte ranges ending in `next`; returns the first state.
    fn chain(&mut self, ranges: &[(u8, u8)], next: StateID) -> Result<StateID> {
        let mut next = next;
        for &(start, end) in ranges.iter().rev() {
            next = self
                .b
                .add_range(Transition { start, end, next })
                .map_err(budget)?;
        }
        Ok(next)
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
                    self.b.add_fail().map_err(budget)?
                } else {
                    self.b.add_sparse(trans).map_err(budget)?
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
                    0 => self.b.add_fail().map_err(budget)?,
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
    let mut c = Compiler { b: Builder::new() };
    c.b.set_size_limit(Some(max_nfa_bytes)).map_err(budget)?;
    c.b.start_pattern().map_err(budget)?;
    let (start, end) = c.c(h)?;
    let m = c.b.add_match().map_err(budget)?;
    c.patch(end, m)?;
    c.b.finish_pattern(start).map_err(budget)?;
    c.b.build(start, start).map_err(budget)
}

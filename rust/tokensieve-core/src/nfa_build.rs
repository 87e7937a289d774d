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
        HirKind::Capture(c) => c.name.as_deref() == Some(LIST) || has_marks(&c.sub),
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

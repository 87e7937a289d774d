//! The NFA compiler ([`Compiler`]): the builder calls (recorded too while compiling a shared
//! part), HIR and the intermediate form's constructs (lists, member sequences, shared tails,
//! counted repetitions with one copy of their body, recursive expressions, rule calls).

use regex_automata::nfa::thompson::{Builder, Transition};
use regex_automata::util::look::Look;
use regex_automata::util::primitives::StateID;
use regex_syntax::hir::{Class, Hir, HirKind};
use regex_syntax::utf8::Utf8Sequences;
use rustc_hash::FxHashMap;

use super::parts::{share_calls, Called, Op};
use super::{Count, MARKER};
use crate::automata::expr::{self, Expr};
use crate::automata::hir;
use crate::automata::hir::is_any_char;
use crate::error::{Error, Result};

/// A fragment: its entry state and an `Empty` exit state still to be patched.
pub(super) type Frag = (StateID, StateID);

pub(super) struct Compiler {
    pub(super) b: Builder,
    /// The builder calls made so far, when recording a fragment.
    pub(super) log: Option<Vec<Op>>,
    /// Entry states of the tails of the enclosing `WithTail` expressions, innermost last.
    pub(super) tails: Vec<StateID>,
    /// The compile deadline, checked every so many builder calls.
    pub(super) every: crate::budget::Every,
    /// The counter instruction of each marker state, in creation order.
    pub(super) marks: Vec<Count>,
    /// The enclosing `Recursive` expressions, innermost last: the expression's id, its marker
    /// number, the body's entry and the return point of each call site built so far.
    pub(super) recs: Vec<(u32, u32, StateID, Vec<StateID>)>,
    /// The enclosing `Knot` expressions, innermost last (see [`KnotFrame`]).
    pub(super) knots: Vec<KnotFrame>,
    /// The number the next recursive expression built gets in its markers: every copy of a
    /// recursive expression (a copied shared part included) has its own.
    pub(super) next_rec: u32,
    /// The outermost recursive expression built last: body entry, return dispatch, marker
    /// number, call sites (what a shared part needs to be called, see [`super::parts::Callable`]).
    pub(super) last_rec: Option<(StateID, StateID, u32, u32)>,
    /// The shared parts called so far, by address (see [`Compiler::call_part`]).
    pub(super) called: FxHashMap<usize, Called>,
    /// How many counted repetition bodies enclose what is being built: a shared part is
    /// copied there, since a count travels through its states (see `crate::automata::dfa`).
    pub(super) in_counted: u32,
    /// The number of the next member set built (see [`Count::SetOpen`]).
    pub(super) next_set: u32,
    /// The member sets whose items are being built, innermost last: the set's number and the
    /// item's bit (what an [`Expr::Witness`] marks).
    pub(super) sets: Vec<(u32, u32)>,
}

/// What [`Compiler::set`] and [`Compiler::seq`] build (see [`Expr::Members`]).
struct MemberParts<'a> {
    items: &'a [(Expr, bool)],
    sep: &'a Expr,
    tail: Option<&'a Expr>,
    bounds: Option<(u32, Option<u32>)>,
    witness: &'a [(u32, Expr)],
    needs_witness: u32,
}

/// A `Knot` being built: its ids `base..base + entries.len()`, its marker number, each
/// definition's entry state and the return point of each call site built so far.
pub(super) struct KnotFrame {
    base: u32,
    rec: u32,
    entries: Vec<StateID>,
    rets: Vec<StateID>,
}

impl KnotFrame {
    fn entry(&self, id: u32) -> Option<StateID> {
        let i = id.checked_sub(self.base)? as usize;
        self.entries.get(i).copied()
    }
}

pub(super) fn budget(e: impl std::fmt::Display) -> Error {
    Error::Budget(format!(
        "the automaton is too large ({e}); lower count bounds, nesting or recursion depth, or \
         raise max_nfa_bytes"
    ))
}

impl Compiler {
    /// Records the builder call `op` makes (when a shared part is being recorded) and counts
    /// it against the time budget. `op` is built only when recording: building it allocates.
    fn log(&mut self, op: impl FnOnce() -> Op) -> Result<()> {
        if let Some(l) = self.log.as_mut() {
            l.push(op());
        }
        self.every.tick("building the automaton")
    }

    pub(super) fn empty(&mut self) -> Result<StateID> {
        self.log(|| Op::Empty)?;
        self.b.add_empty().map_err(budget)
    }

    pub(super) fn fail(&mut self) -> Result<StateID> {
        self.log(|| Op::Fail)?;
        self.b.add_fail().map_err(budget)
    }

    pub(super) fn sparse(&mut self, trans: Vec<Transition>) -> Result<StateID> {
        self.log(|| {
            Op::Sparse(
                trans
                    .iter()
                    .map(|t| (t.start, t.end, t.next.as_u32()))
                    .collect(),
            )
        })?;
        self.b.add_sparse(trans).map_err(budget)
    }

    pub(super) fn range(&mut self, start: u8, end: u8, next: StateID) -> Result<StateID> {
        self.log(|| Op::Range(start, end, next.as_u32()))?;
        self.b
            .add_range(Transition { start, end, next })
            .map_err(budget)
    }

    pub(super) fn patch(&mut self, from: StateID, to: StateID) -> Result<()> {
        self.log(|| Op::Patch(from.as_u32(), to.as_u32()))?;
        self.b.patch(from, to).map_err(budget)
    }

    pub(super) fn fresh_rec(&mut self) -> u32 {
        self.next_rec += 1;
        self.next_rec
    }

    /// A marker state carrying `op`, then `next`.
    pub(super) fn mark(&mut self, op: Count, next: StateID) -> Result<StateID> {
        self.log(|| Op::Mark(op, next.as_u32()))?;
        self.marks.push(op);
        self.b.add_look(next, MARKER).map_err(budget)
    }

    /// A look-around state (`\A`, `\z`), then `next`.
    pub(super) fn look(&mut self, look: Look, next: StateID) -> Result<StateID> {
        self.log(|| Op::Look(look, next.as_u32()))?;
        self.b.add_look(next, look).map_err(budget)
    }

    pub(super) fn union(&mut self, alts: Vec<StateID>) -> Result<StateID> {
        self.log(|| Op::Union(alts.iter().map(|a| a.as_u32()).collect()))?;
        self.b.add_union(alts).map_err(budget)
    }

    /// A chain of byte ranges ending in `next`; returns the first state.
    fn chain(&mut self, ranges: &[(u8, u8)], next: StateID) -> Result<StateID> {
        let mut next = next;
        for &(start, end) in ranges.iter().rev() {
            next = self.range(start, end, next)?;
        }
        Ok(next)
    }

    /// Members in any order (see [`Count::SetOpen`]): `open` pushes an empty member set, then
    /// either the end or a first member; after each member, the end or (`SetMore`) a separator
    /// and another member. Every item starts with its `SetMark` (required items numbered
    /// first), tail members with `SetTail`, witness members with `SetWitness`; one `SetFinish`
    /// checks the required ones (and the witness) and pops the set.
    fn set(&mut self, m: &MemberParts<'_>) -> Result<Frag> {
        let items = m.items;
        let required = items.iter().filter(|x| x.1).count();
        let bits = u32::try_from(items.len())
            .map_err(|_| Error::Budget("an object with too many properties".into()))?;
        let group = self.next_set;
        self.next_set += 1;
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by_key(|&i| !items[i].1);
        // a jump inside a member cannot leave it (its path would skip the set's end)
        let tails = std::mem::take(&mut self.tails);
        let built = (|| -> Result<(Vec<StateID>, StateID)> {
            let after = self.empty()?;
            let mut starts = Vec::with_capacity(items.len() + 2);
            for (bit, &i) in (0..bits).zip(&order) {
                let (item, req) = &items[i];
                self.sets.push((group, bit));
                let built = self.e(item);
                self.sets.pop();
                let (is, ie) = built?;
                self.patch(ie, after)?;
                starts.push(self.mark(
                    Count::SetMark {
                        group,
                        bit,
                        required: *req,
                    },
                    is,
                )?);
            }
            if let Some(t) = m.tail {
                let (ts, te) = self.e(t)?;
                self.patch(te, after)?;
                starts.push(self.mark(Count::SetTail { group }, ts)?);
            }
            for (mask, w) in m.witness {
                let (ws, we) = self.e(w)?;
                self.patch(we, after)?;
                starts.push(self.mark(Count::SetWitness { group, mask: *mask }, ws)?);
            }
            Ok((starts, after))
        })();
        self.tails = tails;
        let (starts, after) = built?;
        let choose = self.union(starts)?;
        let end = self.empty()?;
        let finish = self.mark(
            Count::SetFinish {
                group,
                required: required as u32,
            },
            end,
        )?;
        let (ss, se) = self.e(m.sep)?;
        self.patch(se, choose)?;
        let another = self.mark(Count::SetMore { group }, ss)?;
        let more = self.union(vec![finish, another])?;
        self.patch(after, more)?;
        let first = self.union(vec![finish, choose])?;
        let (min, max) = set_bounds(m.bounds);
        let open = self.mark(
            Count::SetOpen {
                group,
                any_order: true,
                min,
                max,
                witness: m.needs_witness,
            },
            first,
        )?;
        Ok((open, end))
    }

    /// Members in schema order: `none` is "nothing written yet", `some` "something written"
    /// (the next member needs a separator). Each item is compiled once and entered from both;
    /// tail members (and witness members) loop after the items. With `set` (bounds on their
    /// number, or witnesses to write; see [`Count::SetOpen`]) a member set keeps count: each
    /// item starts with its `SetMark` (bit: its position), each separator before an item with
    /// its `SetSep`, tail members with `SetTail` and witness members with `SetWitness` (their
    /// separators: `SetSep` of bits `u32::MAX` and `u32::MAX - 1 - i`), and every way out goes
    /// through one `SetFinish`.
    fn seq(&mut self, m: &MemberParts<'_>, set: bool) -> Result<Frag> {
        let group = self.next_set;
        if set {
            self.next_set += 1;
            u32::try_from(m.items.len())
                .ok()
                .filter(|&n| n < u32::MAX - 64)
                .ok_or_else(|| Error::Budget("an object with too many properties".into()))?;
        }
        // a jump inside a member of a set cannot leave it (its path would skip the set's end)
        let tails = if set {
            std::mem::take(&mut self.tails)
        } else {
            Vec::new()
        };
        let built = (|| -> Result<Frag> {
            let entry = self.empty()?;
            let mut none = Some(entry);
            let mut some: Option<StateID> = None;
            for (bit, (item, req)) in (0u32..).zip(m.items) {
                let req = *req;
                if set {
                    self.sets.push((group, bit));
                }
                let built = self.e(item);
                if set {
                    self.sets.pop();
                }
                let (is, ie) = built?;
                let required = req;
                let mk = self.mark_if(
                    set,
                    Count::SetMark {
                        group,
                        bit,
                        required,
                    },
                    is,
                )?;
                let next_some = self.empty()?;
                self.patch(ie, next_some)?;
                let mut next_none = None;
                if let Some(n) = none {
                    if req {
                        self.patch(n, mk)?;
                    } else {
                        let skip = self.empty()?;
                        let u = self.union(vec![mk, skip])?;
                        self.patch(n, u)?;
                        next_none = Some(skip);
                    }
                }
                if let Some(s) = some {
                    let (ss, se) = self.e(m.sep)?;
                    self.patch(se, mk)?;
                    let gate = self.mark_if(set, Count::SetSep { group, bit }, ss)?;
                    if req {
                        self.patch(s, gate)?;
                    } else {
                        let u = self.union(vec![gate, next_some])?;
                        self.patch(s, u)?;
                    }
                }
                none = next_none;
                some = Some(next_some);
            }
            let end = self.empty()?;
            let fin = self.mark_if(set, Count::SetFinish { group, required: 0 }, end)?;
            // tail and witness members, each any number of times, after the items
            let mut kinds: Vec<(&Expr, Count, u32)> = Vec::new();
            if let Some(t) = m.tail {
                kinds.push((t, Count::SetTail { group }, u32::MAX));
            }
            for (i, (mask, w)) in (0u32..).zip(m.witness) {
                let op = Count::SetWitness { group, mask: *mask };
                kinds.push((w, op, u32::MAX - 1 - i));
            }
            if kinds.is_empty() {
                for st in [none, some].into_iter().flatten() {
                    self.patch(st, fin)?;
                }
            } else {
                let after = match some {
                    Some(s) => s,
                    None => self.empty()?,
                };
                let mut from_after = Vec::with_capacity(kinds.len() + 1);
                let mut from_none = Vec::with_capacity(kinds.len() + 1);
                for (x, op, bit) in kinds {
                    let (xs, xe) = self.e(x)?;
                    let start = self.mark_if(set, op, xs)?;
                    self.patch(xe, after)?;
                    let (ss, se) = self.e(m.sep)?;
                    self.patch(se, start)?;
                    from_after.push(self.mark_if(set, Count::SetSep { group, bit }, ss)?);
                    from_none.push(start);
                }
                from_after.push(fin);
                from_none.push(fin);
                let u = self.union(from_after)?;
                self.patch(after, u)?;
                if let Some(n) = none {
                    let u = self.union(from_none)?;
                    self.patch(n, u)?;
                }
            }
            if !set {
                return Ok((entry, end));
            }
            let (min, max) = set_bounds(m.bounds);
            let open = self.mark(
                Count::SetOpen {
                    group,
                    any_order: false,
                    min,
                    max,
                    witness: m.needs_witness,
                },
                entry,
            )?;
            Ok((open, end))
        })();
        if set {
            self.tails = tails;
        }
        built
    }

    /// A marker state carrying `op`, then `next`, when `set`; else `next` itself.
    fn mark_if(&mut self, set: bool, op: Count, next: StateID) -> Result<StateID> {
        if set {
            self.mark(op, next)
        } else {
            Ok(next)
        }
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
            HirKind::Repetition(r) if hir::counts(r) => self.counted(r.min, r.max, |c| c.c(&r.sub)),
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

    pub(super) fn e(&mut self, x: &Expr) -> Result<Frag> {
        match x {
            Expr::Hir(h) => self.c(h),
            // (not cut: compiled in place)
            Expr::Cut(x) | Expr::Inline(x) => self.e(x),
            Expr::Concat(xs) => self.sequence(xs, Self::e),
            Expr::Alt(xs) => self.alternation(xs, Self::e),
            Expr::Repeat { sub, min, max } if expr::counts(sub, *min, *max) => {
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
                items,
                sep,
                tail,
                any_order,
                bounds,
                witness,
                needs_witness,
                ..
            } => {
                let m = MemberParts {
                    items,
                    sep,
                    tail: tail.as_deref(),
                    bounds: *bounds,
                    witness,
                    needs_witness: *needs_witness,
                };
                if *any_order {
                    self.set(&m)
                } else {
                    self.seq(&m, bounds.is_some() || *needs_witness != 0)
                }
            }
            Expr::Witness(w) => {
                let Some(&(group, bit)) = self.sets.last() else {
                    return Err(Error::InvalidArgument(
                        "a witness branch outside the items of its member set".into(),
                    ));
                };
                let e = self.empty()?;
                let op = if *w != 0 {
                    Count::SetFlag {
                        group,
                        bit,
                        mask: *w,
                    }
                } else {
                    Count::SetPlain { group, bit }
                };
                let m = self.mark(op, e)?;
                Ok((m, e))
            }
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
                self.jump_to(to)
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
                let (exit, u, sites) = self.return_dispatch(rec, rets)?;
                self.patch(be, u)?;
                let start = self.mark(Count::Push { rec, site: 0 }, entry)?;
                if self.recs.is_empty() {
                    self.last_rec = Some((entry, u, rec, sites));
                }
                Ok((start, exit))
            }
            Expr::Knot { defs, base } => self.knot(defs, *base),
            Expr::Goto(id) => {
                let Some(entry) = self.knots.last().and_then(|k| k.entry(*id)) else {
                    return Err(Error::InvalidArgument(
                        "a tail call outside its definitions".into(),
                    ));
                };
                self.jump_to(entry)
            }
            Expr::Recur(id) if self.knots.last().is_some_and(|k| k.entry(*id).is_some()) => {
                let k = self.knots.last_mut().expect("checked");
                let (rec, entry) = (k.rec, k.entry(*id).expect("checked"));
                let site = k.rets.len() as u32 + 1;
                let ret = self.empty()?;
                self.knots.last_mut().expect("checked").rets.push(ret);
                let call = self.mark(Count::Push { rec, site }, entry)?;
                Ok((call, ret))
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

impl Compiler {
    /// An [`Expr::Knot`]: one entry state per definition, each body built once; every body's
    /// end leads to one return dispatch (a `Pop` per call site, site 0 leaving the knot), so a
    /// tail call ([`Expr::Goto`]) is a plain step to the definition's entry.
    fn knot(&mut self, defs: &[Expr], base: u32) -> Result<Frag> {
        if defs.is_empty() {
            return Err(Error::InvalidArgument("a knot without definitions".into()));
        }
        let rec = self.fresh_rec();
        let mut entries = Vec::with_capacity(defs.len());
        for _ in defs {
            entries.push(self.empty()?);
        }
        // a jump inside a definition cannot leave it (its path would skip the return)
        let tails = std::mem::take(&mut self.tails);
        self.knots.push(KnotFrame {
            base,
            rec,
            entries: entries.clone(),
            rets: Vec::new(),
        });
        let mut ends = Vec::with_capacity(defs.len());
        let mut failed = None;
        for (d, &entry) in defs.iter().zip(&entries) {
            match self
                .e(d)
                .and_then(|(s, e)| self.patch(entry, s).map(|()| e))
            {
                Ok(e) => ends.push(e),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let frame = self.knots.pop().expect("pushed above");
        self.tails = tails;
        if let Some(e) = failed {
            return Err(e);
        }
        let (exit, dispatch, _) = self.return_dispatch(rec, frame.rets)?;
        for e in ends {
            self.patch(e, dispatch)?;
        }
        let start = self.mark(Count::Push { rec, site: 0 }, entries[0])?;
        Ok((start, exit))
    }

    /// A fragment that continues at `to` and never ends normally (its exit is an unreachable
    /// empty state).
    fn jump_to(&mut self, to: StateID) -> Result<Frag> {
        let e = self.empty()?;
        self.patch(e, to)?;
        let never = self.empty()?;
        Ok((e, never))
    }

    /// The return dispatch of recursive marker number `rec`: a `Pop` of site 0 to a new exit
    /// state (leaving the recursion), and one per call site `i + 1` to its return point
    /// `rets[i]`. Returns the exit, the dispatch and the number of sites.
    fn return_dispatch(&mut self, rec: u32, rets: Vec<StateID>) -> Result<(StateID, StateID, u32)> {
        let exit = self.empty()?;
        let mut outs = vec![self.mark(Count::Pop { rec, site: 0 }, exit)?];
        for (i, r) in rets.into_iter().enumerate() {
            let site = i as u32 + 1;
            outs.push(self.mark(Count::Pop { rec, site }, r)?);
        }
        let sites = outs.len() as u32;
        Ok((exit, self.union(outs)?, sites))
    }
}

/// The `min`/`max` of a [`Count::SetOpen`] (`max` `u32::MAX`: none).
fn set_bounds(bounds: Option<(u32, Option<u32>)>) -> (u32, u32) {
    match bounds {
        Some((min, max)) => (min, max.map_or(u32::MAX, |m| m.min(u32::MAX - 1))),
        None => (0, u32::MAX),
    }
}

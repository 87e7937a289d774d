//! The typed intermediate form between the front ends and the NFA builder: a regular expression
//! over bytes whose leaves are `regex_syntax` HIRs, plus the constructs a HIR cannot share.
//!
//! A JSON Schema becomes an [`Expr`]; [`super::nfa::build`] turns it into a Thompson NFA and
//! [`super::dfa::LazyDfa::from_expr`] runs it. An expression made only of HIR is kept as one
//! [`Expr::Hir`] leaf (the constructors below merge them), so plain regular parts and plain
//! regexes keep regex-automata's own compiler; only the constructs below need this layer's
//! builder.
//!
//! Why the constructs exist: written as a regular expression, JSON repeats. A list
//! `item (sep item)*` holds its item twice, and nesting lists multiplies the copies; the members
//! of an object, written out, repeat everything after each optional member; "any string but
//! these names" repeats its "any characters" tail at every position of every name. Each
//! construct below is compiled with one copy of each part.

use std::sync::Arc;

use regex_syntax::hir::Hir;

use super::charlang::CharDfa;
use super::hir;

/// A language over bytes (see the module docs).
#[derive(Clone, Debug)]
pub(crate) enum Expr {
    /// A plain regular expression.
    Hir(Hir),
    /// At least two parts, not all plain (see [`concat`]).
    Concat(Vec<Expr>),
    /// At least two branches, not all plain (see [`alt`]).
    Alt(Vec<Expr>),
    /// `sub{min,max}` of a sub-expression that is not plain (see [`rep`]).
    Repeat {
        sub: Box<Expr>,
        min: u32,
        max: Option<u32>,
    },
    /// `item (sep item)*`, with one copy of `item`.
    List { item: Box<Expr>, sep: Box<Expr> },
    /// The members of an object: `items` (each `(member, required)`) in order, separated by
    /// `sep` where two are present, then any number of `tail` members (also separated). One
    /// copy of each member; as a plain regex every optional member before the first required
    /// one would repeat all that follows it.
    ///
    /// With `any_order`, the items come in any order, each at most once and every required one
    /// present, with tail members anywhere among them: the NFA builder keeps the items already
    /// written in a stack frame of the lazy DFA (see [`super::nfa::Count::SetOpen`]), so only
    /// the sets of items a prefix reaches are ever built.
    ///
    /// With `bounds` (`min`, `max` members in all, tail members included: `minProperties`,
    /// `maxProperties`), the same frame counts the members written, and each member, the
    /// separator before it and the end are allowed only where the bounds can still be met.
    ///
    /// With `needs_witness` (a mask of witness kinds, at most [`MAX_WITNESS_KINDS`]), for each
    /// kind some member must be a *witness* of it (the negation of `additionalProperties` or
    /// `patternProperties`: some property with a key and a value of a kind): a `witness`
    /// member of a mask holding the kind (a tail member, any number of times) or an item
    /// taking a branch [`Expr::Witness`]`(mask)` holding it.
    Members {
        items: Vec<(Expr, bool)>,
        sep: Box<Expr>,
        tail: Option<Box<Expr>>,
        any_order: bool,
        bounds: Option<(u32, Option<u32>)>,
        witness: Vec<(u32, Expr)>,
        needs_witness: u32,
        /// [`Expr::weight`] and [`Expr::nodes`] as built, kept so that enclosing objects do
        /// not weigh every member again at every level (see [`member_seq`]).
        size: (u64, u64),
    },
    /// `body` in which every [`Expr::Jump`] leaf continues with one shared copy of `tail`: the
    /// language of `body`'s paths that end normally, plus each path to a jump followed by
    /// `tail`.
    WithTail { body: Box<Expr>, tail: Box<Expr> },
    /// A leaf of the innermost enclosing [`Expr::WithTail`] body: continue with its tail.
    Jump,
    /// JSON string contents whose decoded value is none of the names (see
    /// [`ascii_names_excluded`]).
    NamesExcluded(Arc<Names>),
    /// JSON string contents whose decoded value a character DFA accepts (see [`char_dfa`]).
    CharDfa(Arc<CharStates>),
    /// A sub-automaton compiled once per process (see [`super::nfa::share`]).
    Part(Arc<super::nfa::Part>),
    /// A language defined in terms of itself: `body`, in which every [`Expr::Recur`] leaf with
    /// this `id` stands for the whole expression again. Compiled with one copy of `body` and a
    /// stack of return points kept by the lazy DFA (see [`super::nfa::Count`]).
    Recursive { id: u32, body: Box<Expr> },
    /// A leaf of the innermost enclosing [`Expr::Recursive`] body with this id: the whole of
    /// it, again.
    Recur(u32),
    /// The empty string, allowed only while fewer than this many levels of the innermost
    /// enclosing [`Expr::Recursive`] are open on top of the stack (its outermost level counts
    /// one): what bounds the nesting of one recursive value. Such a guard must never be the
    /// only way on (the lazy DFA checks that it is not, see [`super::dfa`]).
    DepthBelow(u32),
    /// The empty string, allowed only while fewer than this many recursive calls are open in
    /// all: the safety bound of a recursion's depth.
    StackBelow(u32),
    /// The whole language of rule `id` of the automaton's rule table, compiled into its own
    /// part of the NFA when first entered (see [`super::rules`]). Only the lazy DFA's rule
    /// table holds these; its language is never empty.
    Rule(u32),
    /// Mutually recursive definitions (a grammar's rules): the language of `defs[0]`, in which
    /// every [`Expr::Recur`] leaf `base + i` calls `defs[i]` through the stack and every
    /// [`Expr::Goto`] leaf `base + i` continues with `defs[i]` in place of what is left of the
    /// current definition (a tail call: no frame). All definitions share one stack marker
    /// number and one return dispatch, so a definition entered by a tail call returns to where
    /// the definition it replaced was called from.
    Knot { defs: Vec<Expr>, base: u32 },
    /// At the start of a branch of an item of the innermost enclosing [`Expr::Members`] that
    /// needs witnesses: the branch makes the item a witness of the kinds in this mask; `0`, of
    /// none (allowed only while the witnesses can still come from elsewhere).
    Witness(u32),
    /// A tail call of definition `id` of the innermost enclosing [`Expr::Knot`]: only at the
    /// end of a definition, never inside a repetition (the fragment never ends normally).
    Goto(u32),
    /// The language of its body, cut into a rule of its own wherever a part may be cut (see
    /// [`super::rules`]), however light: a front end's mark on a part that is rarely entered
    /// (one tool's arguments among many), so that entering what holds it does not build it.
    /// Where nothing is cut, the body is compiled in place.
    Cut(Box<Expr>),
    /// The language of its body, kept whole where it stands: neither it, nor any part of it,
    /// nor any expression holding it (up to the nearest [`Expr::Cut`]) is cut into a rule,
    /// whatever its weight; the [`Expr::Cut`] marks inside it still are. A front end's mark on
    /// a part that one mask walks into whole: the trie of many tags' begin texts, where a walk
    /// from the point the names diverge enters every branch at once (built as rules, a
    /// 1,000-tool tag built nine rules of 111 names each within one mask).
    Inline(Box<Expr>),
}

/// The names of an [`Expr::NamesExcluded`], each ASCII.
#[derive(Debug)]
pub(crate) struct Names {
    pub names: Vec<Vec<u8>>,
    /// About the states it compiles to, for the compiler's budgets.
    pub weight: u64,
}

/// One state of an [`Expr::CharDfa`].
#[derive(Debug)]
pub(crate) struct CharState {
    pub accept: bool,
    /// Where every non-ASCII character leads (`None`: nowhere, or as `wide` says).
    pub rest: Option<usize>,
    /// ASCII ranges and their targets.
    pub ascii: Vec<(u8, u8, usize)>,
    /// Where non-ASCII characters lead when they do not all lead to one state: disjoint
    /// ranges of code points (`0x80..=0x10FFFF`, surrogates ignored) in increasing order and
    /// their targets; empty when `rest` says it all.
    pub wide: Vec<(u32, u32, usize)>,
}

/// The states of an [`Expr::CharDfa`].
#[derive(Debug)]
pub(crate) struct CharStates {
    pub start: usize,
    pub states: Vec<CharState>,
    pub weight: u64,
    /// Length bounds (`min`, `max` characters) kept by a counter beside the states instead of
    /// multiplying them (see [`counted_char_dfa`]); `None`: the states alone.
    pub len: Option<(u32, Option<u32>)>,
    /// The characters read as their UTF-8 bytes, not in a JSON string's spellings (no
    /// escapes): number text (see [`raw_ascii_dfa`]), a structural tag's free text (see
    /// [`raw_text_dfa`]).
    pub raw: bool,
}

impl From<Hir> for Expr {
    fn from(h: Hir) -> Expr {
        Expr::Hir(h)
    }
}

impl Expr {
    pub(crate) fn empty() -> Expr {
        Expr::Hir(Hir::empty())
    }

    /// The HIR, when the expression is plain.
    pub(crate) fn as_hir(&self) -> Option<&Hir> {
        match self {
            Expr::Hir(h) => Some(h),
            _ => None,
        }
    }

    /// Whether the expression holds a construct only this layer's builder compiles.
    pub(crate) fn is_plain(&self) -> bool {
        matches!(self, Expr::Hir(_))
    }

    /// Calls `f` on each direct sub-expression (none for leaves).
    pub(crate) fn for_each_child(&self, f: &mut dyn FnMut(&Expr)) {
        match self {
            Expr::Concat(xs) | Expr::Alt(xs) => xs.iter().for_each(f),
            Expr::Repeat { sub, .. } | Expr::Cut(sub) | Expr::Inline(sub) => f(sub),
            Expr::List { item, sep } => {
                f(item);
                f(sep);
            }
            Expr::Members {
                items,
                sep,
                tail,
                witness,
                ..
            } => {
                items.iter().for_each(|(x, _)| f(x));
                f(sep);
                if let Some(t) = tail {
                    f(t);
                }
                for (_, w) in witness {
                    f(w);
                }
            }
            Expr::WithTail { body, tail } => {
                f(body);
                f(tail);
            }
            Expr::Hir(_)
            | Expr::Jump
            | Expr::NamesExcluded(_)
            | Expr::CharDfa(_)
            | Expr::Part(_)
            | Expr::Recur(_)
            | Expr::DepthBelow(_)
            | Expr::StackBelow(_)
            | Expr::Witness(_)
            | Expr::Rule(_) => {}
            Expr::Recursive { body, .. } => f(body),
            Expr::Knot { defs, .. } => defs.iter().for_each(f),
            Expr::Goto(_) => {}
        }
    }

    /// The rules its [`Expr::Rule`] leaves name, in the order they occur (repeats included).
    pub(crate) fn rules_called(&self, out: &mut Vec<u32>) {
        match self {
            Expr::Rule(r) => out.push(*r),
            Expr::Hir(_) | Expr::Part(_) => {}
            _ => self.for_each_child(&mut |x| x.rules_called(out)),
        }
    }

    /// One for this node plus `measure` of each child.
    fn one_plus_children(&self, measure: fn(&Expr) -> u64) -> u64 {
        let mut total = 1u64;
        self.for_each_child(&mut |x| total = total.saturating_add(measure(x)));
        total
    }

    /// A rough size of the automaton the expression becomes (repetitions counted by their
    /// bound; a construct counts each part once), used for the compiler's size budget.
    pub(crate) fn weight(&self) -> u64 {
        match self {
            Expr::Hir(h) => hir::weight(h),
            Expr::Repeat { sub, min, max } if counts(sub, *min, *max) => {
                sub.weight().saturating_add(hir::COUNTER_WEIGHT)
            }
            Expr::Repeat { sub, min, max } => {
                let k = u64::from(max.unwrap_or(*min).max(1));
                k.saturating_mul(sub.weight()).saturating_add(1)
            }
            Expr::Jump
            | Expr::Recur(_)
            | Expr::Goto(_)
            | Expr::DepthBelow(_)
            | Expr::StackBelow(_)
            | Expr::Witness(_)
            | Expr::Rule(_) => 1,
            Expr::NamesExcluded(n) => n.weight,
            Expr::CharDfa(d) => d.weight,
            Expr::Part(p) => p.weight(),
            Expr::Members { size, .. } => size.0,
            _ => self.one_plus_children(Expr::weight),
        }
    }

    /// Whether every string of the language is non-empty (`false` when not known).
    pub(crate) fn surely_nonempty(&self) -> bool {
        match self {
            Expr::Hir(h) => h.properties().minimum_len().is_some_and(|n| n > 0),
            Expr::Concat(xs) => xs.iter().any(Expr::surely_nonempty),
            Expr::Alt(xs) => xs.iter().all(Expr::surely_nonempty),
            Expr::Repeat { sub, min, .. } => *min > 0 && sub.surely_nonempty(),
            Expr::List { item, .. } => item.surely_nonempty(),
            Expr::Members { items, .. } => items.iter().any(|(x, r)| *r && x.surely_nonempty()),
            Expr::CharDfa(d) => {
                d.len.is_some_and(|(min, _)| min > 0)
                    || !d.states.get(d.start).is_none_or(|s| s.accept)
            }
            Expr::Part(p) => p.nonempty(),
            Expr::Recursive { body, .. } | Expr::Cut(body) | Expr::Inline(body) => {
                body.surely_nonempty()
            }
            Expr::Knot { defs, .. } => defs[0].surely_nonempty(),
            Expr::WithTail { .. }
            | Expr::Goto(_)
            | Expr::Jump
            | Expr::NamesExcluded(_)
            | Expr::Recur(_)
            | Expr::DepthBelow(_)
            | Expr::StackBelow(_)
            | Expr::Witness(_)
            | Expr::Rule(_) => false,
        }
    }

    /// Whether the expression holds a counter, a jump out of it or a recursive call (each keeps
    /// it from being a counted body: counters do not nest, a jump would leave the count behind,
    /// and a call could enter the same counter again before this count is done).
    fn holds_counter_or_jump(&self) -> bool {
        match self {
            Expr::Hir(h) => hir::has_counter(h),
            // (the body looked at once: `counts` would look at it again)
            Expr::Repeat { sub, min, max } => {
                sub.holds_counter_or_jump() || counts_unless_inner(sub, *min, *max)
            }
            // a rule is never entered from a counted body (see `super::rules`)
            Expr::Jump | Expr::Recur(_) | Expr::Goto(_) | Expr::Rule(_) => true,
            Expr::Part(p) => p.counted(),
            Expr::CharDfa(d) => d.len.is_some(),
            _ => {
                let mut any = false;
                self.for_each_child(&mut |x| any = any || x.holds_counter_or_jump());
                any
            }
        }
    }

    /// Nodes held in memory: a repetition counts its sub-expression once, a compiled leaf
    /// (names, character DFA, shared part) one node (unlike [`Expr::weight`], which estimates
    /// the automaton).
    pub(crate) fn nodes(&self) -> u64 {
        match self {
            Expr::Hir(h) => hir::nodes(h),
            Expr::Members { size, .. } => size.1,
            _ => self.one_plus_children(Expr::nodes),
        }
    }
}

/// Whether `sub{min,max}` compiles to a counter (see [`hir::counts`], the same rule for
/// expressions that are not plain).
pub(crate) fn counts(sub: &Expr, min: u32, max: Option<u32>) -> bool {
    counts_unless_inner(sub, min, max) && !sub.holds_counter_or_jump()
}

/// [`counts`] but for what its body holds (the caller knows).
fn counts_unless_inner(sub: &Expr, min: u32, max: Option<u32>) -> bool {
    hir::counting()
        && max.unwrap_or(min) > hir::COUNT_FROM
        && max.is_none_or(|m| min <= m)
        && sub.surely_nonempty()
}

/// The bytes of `s`, literally.
pub(crate) fn lit(s: &str) -> Expr {
    Expr::Hir(hir::lit(s))
}

/// The concatenation of `items`: one plain leaf when every item is plain; otherwise nested
/// concatenations are flattened and runs of plain items merged into one leaf.
pub(crate) fn concat(items: Vec<Expr>) -> Expr {
    if items.iter().all(Expr::is_plain) {
        return Expr::Hir(hir::concat(items.into_iter().map(into_hir).collect()));
    }
    let mut out: Vec<Expr> = Vec::with_capacity(items.len());
    let mut run: Vec<Hir> = Vec::new();
    let flush = |out: &mut Vec<Expr>, run: &mut Vec<Hir>| {
        if !run.is_empty() {
            out.push(Expr::Hir(hir::concat(std::mem::take(run))));
        }
    };
    for x in items.into_iter().flat_map(|x| match x {
        Expr::Concat(xs) => xs,
        x => vec![x],
    }) {
        match x {
            Expr::Hir(h) => run.push(h),
            x => {
                flush(&mut out, &mut run);
                out.push(x);
            }
        }
    }
    flush(&mut out, &mut run);
    if out.len() == 1 {
        return out.pop().expect("one item");
    }
    Expr::Concat(out)
}

/// The alternation of `items` (the empty alternation matches nothing): one plain leaf when
/// every branch is plain; otherwise nested alternations are flattened.
pub(crate) fn alt(items: Vec<Expr>) -> Expr {
    if items.iter().all(Expr::is_plain) {
        return Expr::Hir(hir::alt(items.into_iter().map(into_hir).collect()));
    }
    let mut out: Vec<Expr> = Vec::with_capacity(items.len());
    for x in items {
        match x {
            Expr::Alt(xs) => out.extend(xs),
            x => out.push(x),
        }
    }
    if out.len() == 1 {
        return out.pop().expect("one branch");
    }
    Expr::Alt(out)
}

/// `Some(alternation)` of the present items, `None` when there is none.
pub(crate) fn alt_opt(items: Vec<Option<Expr>>) -> Option<Expr> {
    let v: Vec<Expr> = items.into_iter().flatten().collect();
    (!v.is_empty()).then(|| alt(v))
}

pub(crate) fn rep(sub: Expr, min: u32, max: Option<u32>) -> Expr {
    match sub {
        Expr::Hir(h) => Expr::Hir(hir::rep(h, min, max)),
        _ if max == Some(0) => Expr::empty(),
        sub if min == 1 && max == Some(1) => sub,
        sub => Expr::Repeat {
            sub: Box::new(sub),
            min,
            max,
        },
    }
}

pub(crate) fn opt(sub: Expr) -> Expr {
    rep(sub, 0, Some(1))
}

pub(crate) fn star(sub: Expr) -> Expr {
    rep(sub, 0, None)
}

fn into_hir(x: Expr) -> Hir {
    match x {
        Expr::Hir(h) => h,
        _ => unreachable!("checked plain"),
    }
}

/// `item (sep item)*`, compiled with one copy of `item`.
pub(crate) fn sep_list(item: Expr, sep: Expr) -> Expr {
    Expr::List {
        item: Box::new(item),
        sep: Box::new(sep),
    }
}

/// See [`Expr::Members`]: the items in this order.
pub(crate) fn member_seq(items: Vec<(Expr, bool)>, sep: Expr, tail: Option<Expr>) -> Expr {
    members(items, sep, tail, false, None)
}

/// See [`Expr::Members`]: the items in any order, each at most once.
pub(crate) fn member_set(items: Vec<(Expr, bool)>, sep: Expr, tail: Option<Expr>) -> Expr {
    members(items, sep, tail, true, None)
}

/// See [`Expr::Members`]: in order or not, with at least `min` and at most `max` members.
pub(crate) fn members_counted(
    items: Vec<(Expr, bool)>,
    sep: Expr,
    tail: Option<Expr>,
    any_order: bool,
    bounds: (u32, Option<u32>),
) -> Expr {
    members(items, sep, tail, any_order, Some(bounds))
}

/// The most witness kinds one [`Expr::Members`] may need.
pub(crate) const MAX_WITNESS_KINDS: usize = 4;

/// The least cost of covering the witness kinds `need` (a mask within [`MAX_WITNESS_KINDS`]
/// bits): each of `items` (its cost, the kinds of each of its branches) used at most once,
/// with one branch; each of `tails` (kinds) any number of times, costing one each. `None` when
/// no choice covers `need`. Found over the subsets of `need`, item by item.
pub(crate) fn witness_cover_cost<I, B>(items: I, tails: &[u32], need: u32) -> Option<u64>
where
    I: IntoIterator<Item = (u64, B)>,
    B: IntoIterator<Item = u32>,
{
    const NONE: u64 = u64::MAX;
    const SETS: usize = 1 << MAX_WITNESS_KINDS;
    // cost[s]: the least cost of covering the kinds `s` (within `need`) so far
    fn relax(from: &[u64; SETS], into: &mut [u64; SETS], mask: u32, step: u64) {
        for (s, &c) in from.iter().enumerate() {
            if c != NONE {
                let to = s | mask as usize;
                into[to] = into[to].min(c + step);
            }
        }
    }
    let mut cost = [NONE; SETS];
    cost[0] = 0;
    for (step, branches) in items {
        let mut next = cost;
        for mask in branches {
            relax(&cost, &mut next, mask & need, step);
        }
        cost = next;
    }
    for _ in 0..MAX_WITNESS_KINDS {
        for &mask in tails {
            let from = cost;
            relax(&from, &mut cost, mask & need, 1);
        }
    }
    let best = cost
        .iter()
        .enumerate()
        .filter(|&(s, _)| s as u32 & need == need)
        .map(|(_, &c)| c)
        .min()
        .unwrap_or(NONE);
    (best != NONE).then_some(best)
}

/// See [`Expr::Members`]: members among which each kind of `kinds` (a mask) needs a witness —
/// a member of `witness` (by the kinds it is a witness of), or an item's
/// [`Expr::Witness`] branch — within `bounds` on the number of members, when given.
pub(crate) fn members_witnessed(
    items: Vec<(Expr, bool)>,
    sep: Expr,
    tail: Option<Expr>,
    any_order: bool,
    bounds: Option<(u32, Option<u32>)>,
    witness: Vec<(u32, Expr)>,
    kinds: u32,
) -> Expr {
    let mut x = members(items, sep, tail, any_order, bounds);
    if let Expr::Members {
        witness: w,
        needs_witness,
        size,
        ..
    } = &mut x
    {
        for (_, e) in &witness {
            size.0 = size.0.saturating_add(e.weight());
            size.1 = size.1.saturating_add(e.nodes());
        }
        *w = witness;
        *needs_witness = kinds;
    }
    x
}

fn members(
    items: Vec<(Expr, bool)>,
    sep: Expr,
    tail: Option<Expr>,
    any_order: bool,
    bounds: Option<(u32, Option<u32>)>,
) -> Expr {
    let mut size = (1u64, 1u64);
    for x in items
        .iter()
        .map(|(x, _)| x)
        .chain([&sep])
        .chain(tail.as_ref())
    {
        size.0 = size.0.saturating_add(x.weight());
        size.1 = size.1.saturating_add(x.nodes());
    }
    Expr::Members {
        items,
        sep: Box::new(sep),
        tail: tail.map(Box::new),
        any_order,
        bounds,
        witness: Vec::new(),
        needs_witness: 0,
        size,
    }
}

/// See [`Expr::WithTail`].
pub(crate) fn with_tail(body: Expr, tail: Expr) -> Expr {
    Expr::WithTail {
        body: Box::new(body),
        tail: Box::new(tail),
    }
}

/// The JSON string contents (the text between the quotes, in every spelling JSON allows:
/// raw, short escapes, `\uXXXX` in either case, surrogate pairs) whose decoded value is none
/// of `names`; `None` unless every name is ASCII. Compiled straight into automaton states: a
/// trie over the names whose nodes read one character in any spelling, and one shared "any
/// characters" loop for every character that leaves the trie. The same language built from a
/// HIR costs several times the states and the time, and undeclared keys of an object with
/// extra properties allowed take this path in almost every schema.
pub(crate) fn ascii_names_excluded(names: &[Vec<char>]) -> Option<Expr> {
    if !names.iter().all(|n| n.iter().all(char::is_ascii)) {
        return None;
    }
    let names: Vec<Vec<u8>> = names
        .iter()
        .map(|n| n.iter().map(|&c| c as u8).collect())
        .collect();
    let bytes: usize = names.iter().map(|n| n.len() + 1).sum();
    let weight = 64 + 12 * bytes as u64;
    Some(Expr::NamesExcluded(Arc::new(Names { names, weight })))
}

const FIRST_NON_ASCII: u32 = 0x80;

/// The JSON string contents whose decoded value is in the language of `d` (a DFA over
/// characters without dead states), compiled straight into automaton states: one state per
/// DFA state reading one character in any spelling. The same language as `encode` of the
/// DFA's regular expression, without the expression: state elimination can grow
/// exponentially (a format with a length bound). A state that sends all non-ASCII characters
/// to one state (what formats and most patterns do) reads them through shared states; one
/// that splits them (`\s`, `[^é]`, a Unicode class) reads each range's spellings apart.
/// `None` when `d` is malformed (overlapping ranges with different targets).
pub(crate) fn char_dfa(d: &CharDfa) -> Option<Expr> {
    let n = d.accept.len();
    if d.start >= n || d.edges.len() != n {
        return None;
    }
    let mut weight: u64 = 16;
    let mut states = Vec::with_capacity(n);
    for (s, edges) in d.edges.iter().enumerate() {
        let mut ascii: Vec<(u8, u8, usize)> = Vec::new();
        let mut wide: Vec<(u32, u32, usize)> = Vec::new();
        for &(lo, hi, t) in edges {
            if t >= n || lo > hi {
                return None;
            }
            if lo < FIRST_NON_ASCII {
                ascii.push((lo as u8, hi.min(FIRST_NON_ASCII - 1) as u8, t));
            }
            if hi >= FIRST_NON_ASCII {
                // surrogates are no characters: cut them out
                let lo = lo.max(FIRST_NON_ASCII);
                for (a, b) in [(lo, hi.min(0xD7FF)), (lo.max(0xE000), hi.min(0x10FFFF))] {
                    if a <= b {
                        wide.push((a, b, t));
                    }
                }
            }
        }
        wide.sort_unstable();
        let mut merged: Vec<(u32, u32, usize)> = Vec::with_capacity(wide.len());
        for (a, b, t) in wide {
            match merged.last_mut() {
                Some(last) if a <= last.1 => {
                    if last.2 != t {
                        return None;
                    }
                    last.1 = last.1.max(b);
                }
                // neighbours (the surrogate block between counts as no gap) with one target
                Some(last)
                    if last.2 == t && (a == last.1 + 1 || (last.1 == 0xD7FF && a == 0xE000)) =>
                {
                    last.1 = b
                }
                _ => merged.push((a, b, t)),
            }
        }
        let rest = match merged.as_slice() {
            [(FIRST_NON_ASCII, 0x10FFFF, t)] => Some(*t),
            _ => None,
        };
        if rest.is_some() {
            merged.clear();
        }
        // a split state reads each range in raw UTF-8 and in `\u` escapes
        weight += 12 + if rest.is_some() { 24 } else { 0 } + 48 * merged.len() as u64;
        states.push(CharState {
            accept: d.accept[s],
            rest,
            ascii,
            wide: merged,
        });
    }
    Some(Expr::CharDfa(Arc::new(CharStates {
        start: d.start,
        states,
        weight,
        len: None,
        raw: false,
    })))
}

/// The language of an ASCII character DFA read byte for byte (each character its own byte, no
/// escapes): number text whose regular expression would be too large (see
/// `json_schema::multiple`). `None` when `d` is malformed or reads a character past ASCII.
pub(crate) fn raw_ascii_dfa(d: &CharDfa) -> Option<Expr> {
    let Some(Expr::CharDfa(c)) = char_dfa(d) else {
        return None;
    };
    let mut c = Arc::try_unwrap(c).ok()?;
    if c.states
        .iter()
        .any(|s| s.rest.is_some() || !s.wide.is_empty())
    {
        return None;
    }
    c.raw = true;
    Some(Expr::CharDfa(Arc::new(c)))
}

/// Raw text (not a JSON string's contents) that the character DFA `d` accepts: every character
/// read as its UTF-8 bytes, with no escapes (`"`, `\\` and control characters are characters
/// like any other). `None` when [`char_dfa`] cannot build `d`.
pub(crate) fn raw_text_dfa(d: &CharDfa) -> Option<Expr> {
    let Some(Expr::CharDfa(c)) = char_dfa(d) else {
        return None;
    };
    let mut c = Arc::try_unwrap(c).ok()?;
    c.raw = true;
    Some(Expr::CharDfa(Arc::new(c)))
}

/// [`raw_text_dfa`] with `min..=max` characters (see [`counted_char_dfa`] for what `None` and
/// `Some(None)` mean).
pub(crate) fn raw_counted_text_dfa(
    d: &CharDfa,
    min: u32,
    max: Option<u32>,
) -> Option<Option<Expr>> {
    match counted_char_dfa(d, min, max)? {
        None => Some(None),
        Some(Expr::CharDfa(c)) => {
            let mut c = Arc::try_unwrap(c).ok()?;
            c.raw = true;
            Some(Some(Expr::CharDfa(Arc::new(c))))
        }
        Some(_) => None,
    }
}

/// The longest a character DFA's completion lengths may take to settle for
/// [`counted_char_dfa`] (see [`completion_lengths`]).
pub(crate) const SETTLE_MAX: usize = 256;

/// The strings of `d`'s language with `min..=max` characters, as [`char_dfa`] with a counter of
/// characters beside the states (one state per DFA state instead of one per DFA state and
/// length). `None` when `char_dfa` cannot build `d`, or when its completion lengths do not
/// settle within [`SETTLE_MAX`] characters (the lazy DFA's liveness check needs them to);
/// `Some(None)` when no string of `d` has an allowed length.
pub(crate) fn counted_char_dfa(d: &CharDfa, min: u32, max: Option<u32>) -> Option<Option<Expr>> {
    if max.is_some_and(|m| m < min) {
        return Some(None);
    }
    let lens = completion_lengths(&d.accept, &d.edges, d.start)?;
    if !lens.meets(0, min, max) {
        return Some(None);
    }
    let Some(Expr::CharDfa(c)) = char_dfa(d) else {
        return None;
    };
    let mut c = Arc::try_unwrap(c).ok()?;
    c.len = Some((min, max));
    c.weight += 8 * c.states.len() as u64;
    Some(Some(Expr::CharDfa(Arc::new(c))))
}

/// The numbers of further characters after which a string can end, from one state: each
/// number below `settle` by its bit, every number from `settle` on when `tail`. Built for a
/// character DFA's start by [`completion_lengths`] and for each NFA state of a sized region by
/// the lazy DFA (`dfa::LengthSets`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct LenSet {
    pub bits: Box<[u64]>,
    pub settle: u32,
    pub tail: bool,
}

impl LenSet {
    /// Whether some `x` of the set has `min <= count + x <= max`.
    pub(crate) fn meets(&self, count: u32, min: u32, max: Option<u32>) -> bool {
        let lo = u64::from(min.saturating_sub(count));
        let hi = match max {
            Some(m) if count > m => return false,
            Some(m) => u64::from(m - count),
            None => u64::MAX,
        };
        let settle = u64::from(self.settle);
        if self.tail && hi >= lo.max(settle) {
            return true;
        }
        let top = hi.min(settle.saturating_sub(1));
        (settle > 0 && lo <= top)
            && (lo..=top).any(|x| self.bits[(x / 64) as usize] >> (x % 64) & 1 == 1)
    }
}

/// The completion lengths of `start` in a DFA over characters (`accept`, `edges` as
/// `(lo, hi, target)` ranges): `H(l)`, the states that can end after exactly `l` more
/// characters, is `accept` for 0 and the states with an edge into `H(l-1)` after; once
/// `H(l+1) = H(l)` it stays so. `None` when that takes more than [`SETTLE_MAX`] steps (a
/// periodic language such as even lengths).
pub(crate) fn completion_lengths(
    accept: &[bool],
    edges: &[Vec<(u32, u32, usize)>],
    start: usize,
) -> Option<LenSet> {
    let n = accept.len();
    let mut h: Vec<bool> = accept.to_vec();
    let mut bits = vec![0u64; SETTLE_MAX.div_ceil(64) + 1];
    for l in 0..=SETTLE_MAX {
        let next: Vec<bool> = (0..n)
            .map(|s| edges[s].iter().any(|&(_, _, t)| t < n && h[t]))
            .collect();
        if next == h {
            bits.truncate(l.div_ceil(64));
            return Some(LenSet {
                bits: bits.into(),
                settle: l as u32,
                tail: h[start],
            });
        }
        if h[start] {
            bits[l / 64] |= 1 << (l % 64);
        }
        h = next;
    }
    None
}

impl Expr {
    /// A hash of the expression's structure: equal for [`Expr::same_as`] expressions (shared
    /// parts by identity, everything else by content).
    pub(crate) fn structure_hash(&self) -> u64 {
        let mut h = rustc_hash::FxHasher::default();
        self.hash_into(&mut h);
        std::hash::Hasher::finish(&h)
    }

    fn hash_into(&self, h: &mut rustc_hash::FxHasher) {
        use std::hash::Hash;
        std::mem::discriminant(self).hash(h);
        match self {
            Expr::Hir(x) => hash_hir(x, h),
            Expr::Repeat { min, max, .. } => (min, max).hash(h),
            Expr::Members {
                items,
                tail,
                any_order,
                bounds,
                witness,
                needs_witness,
                ..
            } => {
                items.iter().for_each(|(_, r)| r.hash(h));
                (
                    tail.is_some(),
                    any_order,
                    bounds,
                    witness.iter().map(|w| w.0).collect::<Vec<u32>>(),
                    needs_witness,
                )
                    .hash(h);
            }
            Expr::NamesExcluded(n) => n.names.hash(h),
            Expr::CharDfa(d) => {
                (d.start, d.len, d.raw).hash(h);
                for s in &d.states {
                    (s.accept, s.rest, &s.ascii, &s.wide).hash(h);
                }
            }
            Expr::Part(p) => (Arc::as_ptr(p) as usize).hash(h),
            Expr::Recursive { id, .. } => id.hash(h),
            Expr::Recur(n)
            | Expr::Goto(n)
            | Expr::DepthBelow(n)
            | Expr::StackBelow(n)
            | Expr::Rule(n) => n.hash(h),
            Expr::Witness(b) => b.hash(h),
            Expr::Knot { defs, base } => (defs.len(), base).hash(h),
            Expr::Concat(xs) | Expr::Alt(xs) => xs.len().hash(h),
            Expr::List { .. }
            | Expr::WithTail { .. }
            | Expr::Jump
            | Expr::Cut(_)
            | Expr::Inline(_) => {}
        }
        self.for_each_child(&mut |x| x.hash_into(h));
    }

    /// Whether the two expressions are built the same way (and so have one language): shared
    /// parts are the same part, everything else equal in content.
    pub(crate) fn same_as(&self, other: &Expr) -> bool {
        let all = |a: &[Expr], b: &[Expr]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_as(y))
        };
        match (self, other) {
            (Expr::Hir(a), Expr::Hir(b)) => a == b,
            (Expr::Concat(a), Expr::Concat(b)) | (Expr::Alt(a), Expr::Alt(b)) => all(a, b),
            (
                Expr::Repeat { sub, min, max },
                Expr::Repeat {
                    sub: s2,
                    min: m2,
                    max: x2,
                },
            ) => min == m2 && max == x2 && sub.same_as(s2),
            (Expr::List { item, sep }, Expr::List { item: i2, sep: s2 }) => {
                item.same_as(i2) && sep.same_as(s2)
            }
            (
                Expr::Members {
                    items,
                    sep,
                    tail,
                    any_order,
                    bounds,
                    witness,
                    needs_witness,
                    ..
                },
                Expr::Members {
                    items: i2,
                    sep: s2,
                    tail: t2,
                    any_order: o2,
                    bounds: b2,
                    witness: w2,
                    needs_witness: n2,
                    ..
                },
            ) => {
                any_order == o2
                    && bounds == b2
                    && needs_witness == n2
                    && witness.len() == w2.len()
                    && witness
                        .iter()
                        .zip(w2)
                        .all(|((m, a), (q, b))| m == q && a.same_as(b))
                    && items.len() == i2.len()
                    && items
                        .iter()
                        .zip(i2)
                        .all(|((x, r), (y, q))| r == q && x.same_as(y))
                    && sep.same_as(s2)
                    && match (tail, t2) {
                        (Some(a), Some(b)) => a.same_as(b),
                        (None, None) => true,
                        _ => false,
                    }
            }
            (Expr::WithTail { body, tail }, Expr::WithTail { body: b2, tail: t2 }) => {
                body.same_as(b2) && tail.same_as(t2)
            }
            (Expr::Jump, Expr::Jump) => true,
            (Expr::NamesExcluded(a), Expr::NamesExcluded(b)) => a.names == b.names,
            (Expr::CharDfa(a), Expr::CharDfa(b)) => {
                a.start == b.start
                    && a.len == b.len
                    && a.raw == b.raw
                    && a.states.len() == b.states.len()
                    && a.states.iter().zip(&b.states).all(|(x, y)| {
                        x.accept == y.accept
                            && x.rest == y.rest
                            && x.ascii == y.ascii
                            && x.wide == y.wide
                    })
            }
            (Expr::Part(a), Expr::Part(b)) => Arc::ptr_eq(a, b),
            (Expr::Recursive { id, body }, Expr::Recursive { id: i2, body: b2 }) => {
                id == i2 && body.same_as(b2)
            }
            (Expr::Cut(a), Expr::Cut(b)) | (Expr::Inline(a), Expr::Inline(b)) => a.same_as(b),
            (Expr::Knot { defs, base }, Expr::Knot { defs: d2, base: b2 }) => {
                base == b2 && all(defs, d2)
            }
            (Expr::Recur(a), Expr::Recur(b))
            | (Expr::Goto(a), Expr::Goto(b))
            | (Expr::DepthBelow(a), Expr::DepthBelow(b))
            | (Expr::StackBelow(a), Expr::StackBelow(b))
            | (Expr::Rule(a), Expr::Rule(b)) => a == b,
            _ => false,
        }
    }
}

/// Hashes the structure of a HIR (what `Hir`'s equality compares).
fn hash_hir(x: &Hir, h: &mut rustc_hash::FxHasher) {
    use regex_syntax::hir::{Class, HirKind};
    use std::hash::Hash;
    match x.kind() {
        HirKind::Empty => 0u8.hash(h),
        HirKind::Literal(l) => (1u8, &l.0).hash(h),
        HirKind::Class(Class::Unicode(c)) => {
            2u8.hash(h);
            for r in c.ranges() {
                (r.start(), r.end()).hash(h);
            }
        }
        HirKind::Class(Class::Bytes(c)) => {
            3u8.hash(h);
            for r in c.ranges() {
                (r.start(), r.end()).hash(h);
            }
        }
        HirKind::Look(l) => (4u8, l.as_repr()).hash(h),
        HirKind::Repetition(r) => {
            (5u8, r.min, r.max, r.greedy).hash(h);
            hash_hir(&r.sub, h);
        }
        HirKind::Capture(c) => {
            (6u8, c.index).hash(h);
            hash_hir(&c.sub, h);
        }
        HirKind::Concat(xs) | HirKind::Alternation(xs) => {
            (
                7u8 + matches!(x.kind(), HirKind::Alternation(_)) as u8,
                xs.len(),
            )
                .hash(h);
            xs.iter().for_each(|x| hash_hir(x, h));
        }
    }
}

//! Left recursion rewritten into repetition.
//!
//! A rule that can call itself again before reading a character (`expr ::= expr "+" term`,
//! or through other rules, or after parts that can match the empty string) would push frames
//! without end on a stack machine. For each group of mutually recursive rules holding such a
//! cycle, the rules are put in order and rewritten the textbook way (Paull's algorithm), on
//! alternatives whose first item is a reference to a rule of the group or cannot lead into one:
//! 1. [`expand`] opens what stands in front of a leading reference (groups, optional and
//!    repeated items, rules that can match the empty string and are not in the group) into
//!    separate alternatives, so that every alternative either starts with a reference to a
//!    rule of the group or cannot reach one before reading a character;
//! 2. in order, an alternative of rule *i* starting with rule *j < i* is replaced by rule
//!    *j*'s alternatives followed by the rest;
//! 3. rule *i*'s alternatives `i α₁ | … | i αₖ | β₁ | … | βₘ` become
//!    `(β₁ | … | βₘ) (α₁ | … | αₖ)*`.
//!
//! Before that, [`split_empty`] splits the empty string off the group's rules that can match it
//! (the ordering needs rules that cannot), and a repetition whose body can be empty is opened as
//! `ε | x⁺ x*` with `x⁺` the body without its empty string ([`NonEmpty`]).
//!
//! The language of every rule is unchanged. What the rewriting cannot open (a recursive rule of
//! another group that can match the empty string, in front of the recursion) is a
//! [`crate::Error::Grammar`] naming it; the rewriting is bounded in size and steps.

use rustc_hash::FxHashMap;

use super::lower::Rules;
use super::parse::Node;
use super::{grammar_error, Pos};
use crate::error::Result;

/// Most nodes the rewritten bodies of one group may hold.
const MAX_NODES: usize = 200_000;
/// Most alternatives [`expand`] may look at for one rewriting step.
const MAX_STEPS: usize = 100_000;

pub(super) struct Group<'a> {
    pub rules: &'a Rules,
    pub nullable: &'a [bool],
    pub recursive: &'a [bool],
    /// Rule → its place in the group's order.
    pub order: FxHashMap<usize, usize>,
}

impl Group<'_> {
    fn in_group(&self, r: usize) -> bool {
        self.order.contains_key(&r)
    }

    fn nullable(&self, n: &Node) -> bool {
        nullable(n, self.nullable)
    }

    /// Whether `n` can reach a reference to a rule of the group before reading a character.
    fn left_reach(&self, n: &Node) -> bool {
        match n {
            Node::Lit(_)
            | Node::Class { .. }
            | Node::Any
            | Node::Regex { .. }
            | Node::Text { .. } => false,
            Node::Ref { rule, .. } => self.in_group(*rule),
            Node::Seq(xs) => self.left_reach_seq(xs),
            Node::Alt(xs) => xs.iter().any(|x| self.left_reach(x)),
            Node::Rep { sub, max, .. } => *max != Some(0) && self.left_reach(sub),
        }
    }

    fn left_reach_seq(&self, xs: &[Node]) -> bool {
        for x in xs {
            if self.left_reach(x) {
                return true;
            }
            if !self.nullable(x) {
                return false;
            }
        }
        false
    }

    /// The alternatives of the sequence `start`, opened until each starts with a reference to a
    /// rule of the group or cannot reach one before reading a character (see the module docs).
    fn expand(&self, start: Vec<Node>, at: Pos) -> Result<Vec<Vec<Node>>> {
        let mut out = Vec::new();
        let mut queue = vec![start];
        let mut steps = 0usize;
        let mut every = crate::budget::Every::default();
        while let Some(mut s) = queue.pop() {
            steps += 1;
            every.tick("rewriting the grammar's left recursion")?;
            if steps > MAX_STEPS {
                return Err(grammar_error(
                    at,
                    "the left recursion here opens into too many alternatives to rewrite",
                ));
            }
            if !self.left_reach_seq(&s) {
                out.push(s);
                continue;
            }
            let first = s.remove(0);
            match first {
                Node::Ref { rule, .. } if self.in_group(rule) => {
                    s.insert(0, first);
                    out.push(s);
                }
                Node::Ref {
                    rule,
                    pos,
                    ref name,
                } => {
                    // outside the group, so it cannot lead into it: it can match the empty
                    // string, and the recursion lies after it
                    if self.recursive[rule] {
                        return Err(empty_recursive(name, pos));
                    }
                    s.insert(0, self.rules.bodies[rule].clone());
                    queue.push(s);
                }
                Node::Seq(xs) => {
                    let mut v = xs;
                    v.extend(s);
                    queue.push(v);
                }
                Node::Alt(xs) => {
                    for x in xs.into_iter().rev() {
                        let mut v = Vec::with_capacity(s.len() + 1);
                        v.push(x);
                        v.extend(s.iter().cloned());
                        queue.push(v);
                    }
                }
                Node::Rep { sub, min, max } => {
                    if max == Some(0) {
                        queue.push(s);
                        continue;
                    }
                    if self.nullable(&sub) {
                        // with an empty body possible, `x{m,n}` is `ε | x⁺ x{0,n-1}`, where `x⁺`
                        // is `x` without the empty string
                        let first = NonEmpty {
                            rules: self.rules,
                            nullable: self.nullable,
                            recursive: self.recursive,
                            plus: &FxHashMap::default(),
                            depth: Default::default(),
                            built: Default::default(),
                        }
                        .of(&sub, at)?;
                        queue.push(s.clone());
                        let mut v = vec![
                            first,
                            Node::Rep {
                                sub,
                                min: 0,
                                max: max.map(|m| m - 1),
                            },
                        ];
                        v.extend(s);
                        queue.push(v);
                        continue;
                    }
                    let rest = Node::Rep {
                        sub: sub.clone(),
                        min: min.saturating_sub(1),
                        max: max.map(|m| m - 1),
                    };
                    if min == 0 {
                        queue.push(s.clone());
                    }
                    let mut v = vec![*sub, rest];
                    v.extend(s);
                    queue.push(v);
                }
                other => {
                    // a literal: the empty one is skipped (a non-empty one cannot be here)
                    if !matches!(&other, Node::Lit(l) if l.is_empty()) {
                        s.insert(0, other);
                        out.push(s);
                        continue;
                    }
                    queue.push(s);
                }
            }
        }
        Ok(out)
    }
}

/// A language without its empty string, as a node (see [`split_empty`]).
struct NonEmpty<'a> {
    rules: &'a Rules,
    nullable: &'a [bool],
    recursive: &'a [bool],
    /// Rule → the rule holding its language without the empty string.
    plus: &'a FxHashMap<usize, usize>,
    /// How many rules [`NonEmpty::of`] has followed into, now; and the nodes it has built.
    /// Both bounded: a chain of rules that can match the empty string is written out in place
    /// (each level a copy of the next one's non-empty form), so it is kept short and small.
    depth: std::cell::Cell<u32>,
    built: std::cell::Cell<usize>,
}

/// Most rules that can match the empty string [`NonEmpty::of`] follows one into another.
const MAX_EMPTY_CHAIN: u32 = 64;

impl NonEmpty<'_> {
    /// `n` with each reference to a split rule `A` read as `(A⁺)?`.
    fn subst(&self, n: &Node) -> Node {
        match n {
            Node::Ref { name, rule, pos } => match self.plus.get(rule) {
                Some(&p) => Node::Alt(vec![
                    Node::Lit(String::new()),
                    Node::Ref {
                        name: name.clone(),
                        rule: p,
                        pos: *pos,
                    },
                ]),
                None => n.clone(),
            },
            Node::Seq(xs) => Node::Seq(xs.iter().map(|x| self.subst(x)).collect()),
            Node::Alt(xs) => Node::Alt(xs.iter().map(|x| self.subst(x)).collect()),
            Node::Rep { sub, min, max } => Node::Rep {
                sub: Box::new(self.subst(sub)),
                min: *min,
                max: *max,
            },
            _ => n.clone(),
        }
    }

    /// The strings of `n` but the empty one.
    fn of(&self, n: &Node, at: Pos) -> Result<Node> {
        crate::budget::check("rewriting the grammar's left recursion")?;
        self.built.set(self.built.get() + n.size());
        if self.built.get() > MAX_NODES {
            return Err(grammar_error(
                at,
                &format!(
                    "the parts that can match the empty string in front of the left recursion \
                     here open into more than {MAX_NODES} nodes; write them so that they \
                     match at least one character and mark their uses optional"
                ),
            ));
        }
        if !nullable(n, self.nullable) {
            return Ok(self.subst(n));
        }
        Ok(match n {
            Node::Lit(_) => Node::fail(),
            Node::Class { .. } | Node::Any => n.clone(),
            Node::Regex { .. } => {
                return Err(grammar_error(
                    at,
                    "a `Regex(...)` that can match the empty string stands in front of a left \
                     recursion here; make its pattern match at least one character and mark \
                     its use optional",
                ))
            }
            Node::Text { .. } => {
                return Err(grammar_error(
                    at,
                    "a `TagDispatch(...)` stands in front of a left recursion here (its free \
                     text can be empty)",
                ))
            }
            Node::Ref { name, rule, pos } => match self.plus.get(rule) {
                Some(&p) => Node::Ref {
                    name: name.clone(),
                    rule: p,
                    pos: *pos,
                },
                None if self.recursive[*rule] => return Err(empty_recursive(name, *pos)),
                None => {
                    if self.depth.get() >= MAX_EMPTY_CHAIN {
                        return Err(grammar_error(
                            *pos,
                            &format!(
                                "left recursion behind more than {MAX_EMPTY_CHAIN} nested rules \
                                 that can match the empty string (through `{name}`) is not \
                                 rewritten; make them match at least one character and mark \
                                 their uses optional"
                            ),
                        ));
                    }
                    self.depth.set(self.depth.get() + 1);
                    let out = self.of(&self.rules.bodies[*rule], at);
                    self.depth.set(self.depth.get() - 1);
                    out?
                }
            },
            // every item can be empty: the first non-empty one is some item
            Node::Seq(xs) => {
                let mut alts = Vec::with_capacity(xs.len());
                for i in 0..xs.len() {
                    let mut v = vec![self.of(&xs[i], at)?];
                    v.extend(xs[i + 1..].iter().map(|x| self.subst(x)));
                    alts.push(seq(v));
                }
                alt(alts)
            }
            Node::Alt(xs) => {
                let mut alts = Vec::with_capacity(xs.len());
                for x in xs {
                    alts.push(self.of(x, at)?);
                }
                alt(alts)
            }
            Node::Rep { max: Some(0), .. } => Node::fail(),
            Node::Rep { sub, min, max } if nullable(sub, self.nullable) => {
                let _ = min;
                seq(vec![
                    self.of(sub, at)?,
                    Node::Rep {
                        sub: Box::new(self.subst(sub)),
                        min: 0,
                        max: max.map(|m| m - 1),
                    },
                ])
            }
            Node::Rep { sub, max, .. } => Node::Rep {
                sub: Box::new(self.subst(sub)),
                min: 1,
                max: *max,
            },
        })
    }
}

/// The members of `group` that can match the empty string, split off before the rewriting
/// (which needs rules that cannot): each such `A` gets a new rule `A⁺` (same name) holding
/// its strings but the empty one, and becomes `"" | A⁺`; inside the group every use of `A`
/// reads `(A⁺)?`. Returns the group to rewrite: its other members and the new rules.
pub(super) fn split_empty(
    rules: &mut Rules,
    nul: &mut Vec<bool>,
    recursive: &mut Vec<bool>,
    group: &[usize],
) -> Result<Vec<usize>> {
    let empty: Vec<usize> = group.iter().copied().filter(|&r| nul[r]).collect();
    if empty.is_empty() {
        return Ok(group.to_vec());
    }
    let mut plus = FxHashMap::default();
    for &a in &empty {
        let p = rules.names.len();
        rules.names.push(rules.names[a].clone());
        rules.pos.push(rules.pos[a]);
        rules.bodies.push(Node::fail());
        nul.push(false);
        recursive.push(true);
        plus.insert(a, p);
    }
    let mut bodies = Vec::with_capacity(group.len());
    {
        let ne = NonEmpty {
            rules,
            nullable: nul,
            recursive,
            plus: &plus,
            depth: Default::default(),
            built: Default::default(),
        };
        for &b in group {
            let at = rules.pos[b];
            bodies.push(match plus.get(&b) {
                Some(_) => ne.of(&rules.bodies[b], at)?,
                None => ne.subst(&rules.bodies[b]),
            });
        }
    }
    let mut out = Vec::with_capacity(group.len());
    for (&b, body) in group.iter().zip(bodies) {
        match plus.get(&b) {
            Some(&p) => {
                rules.bodies[p] = body;
                rules.bodies[b] = Node::Alt(vec![
                    Node::Lit(String::new()),
                    Node::Ref {
                        name: rules.names[b].clone(),
                        rule: p,
                        pos: rules.pos[b],
                    },
                ]);
                out.push(p);
            }
            None => {
                rules.bodies[b] = body;
                out.push(b);
            }
        }
    }
    Ok(out)
}

/// The refusal of left recursion behind rule `name`, recursive elsewhere and able to match the
/// empty string.
fn empty_recursive(name: &str, pos: Pos) -> crate::error::Error {
    grammar_error(
        pos,
        &format!(
            "left recursion through `{name}`, which can match the empty string and is recursive \
             itself, is not supported; make `{name}` match at least one character here"
        ),
    )
}

pub(crate) fn nullable(n: &Node, rules: &[bool]) -> bool {
    match n {
        Node::Lit(s) => s.is_empty(),
        Node::Class { .. } | Node::Any => false,
        Node::Regex { nullable, .. } | Node::Text { nullable, .. } => *nullable,
        Node::Ref { rule, .. } => rules[*rule],
        Node::Seq(xs) => xs.iter().all(|x| nullable(x, rules)),
        Node::Alt(xs) => xs.iter().any(|x| nullable(x, rules)),
        Node::Rep { sub, min, max } => *min == 0 || *max == Some(0) || nullable(sub, rules),
    }
}

fn top_alternatives(n: &Node) -> Vec<Vec<Node>> {
    match n {
        Node::Alt(xs) => xs.iter().map(as_seq).collect(),
        x => vec![as_seq(x)],
    }
}

fn as_seq(n: &Node) -> Vec<Node> {
    match n {
        Node::Seq(xs) => xs.clone(),
        x => vec![x.clone()],
    }
}

fn seq(mut xs: Vec<Node>) -> Node {
    if xs.len() == 1 {
        xs.pop().expect("one")
    } else {
        Node::Seq(xs)
    }
}

fn alt(mut xs: Vec<Node>) -> Node {
    if xs.len() == 1 {
        xs.pop().expect("one")
    } else {
        Node::Alt(xs)
    }
}

fn starts_with(a: &[Node]) -> Option<usize> {
    match a.first() {
        Some(Node::Ref { rule, .. }) => Some(*rule),
        _ => None,
    }
}

/// Rewrites the left recursion of the group `members` (in this order) into repetition; returns
/// the new bodies, in the members' order.
pub(super) fn rewrite(g: &Group<'_>, members: &[usize]) -> Result<Vec<Node>> {
    let names = &g.rules.names;
    let mut alts: Vec<Vec<Vec<Node>>> = Vec::with_capacity(members.len());
    for &m in members {
        let at = g.rules.pos[m];
        let mut out = Vec::new();
        for a in top_alternatives(&g.rules.bodies[m]) {
            out.extend(g.expand(a, at)?);
        }
        alts.push(out);
    }
    let too_large = |at: Pos, name: &str| {
        grammar_error(
            at,
            &format!(
                "rewriting the left recursion through `{name}` grows past {MAX_NODES} nodes; \
                 write the recursion with repetition (`a (op b)*`) instead"
            ),
        )
    };
    let size_of = |a: &[Vec<Node>]| -> usize { a.iter().flatten().map(Node::size).sum() };
    // the nodes of every rule of the group together, kept within MAX_NODES at every step
    let mut total: usize = alts.iter().map(|a| size_of(a)).sum();
    if total > MAX_NODES {
        let at = g.rules.pos[members[0]];
        return Err(too_large(at, &names[members[0]]));
    }
    for i in 0..members.len() {
        let at = g.rules.pos[members[i]];
        let mut rounds = 0usize;
        loop {
            let mut changed = false;
            let mut next = Vec::new();
            let others = total.saturating_sub(size_of(&alts[i]));
            let mut size = others;
            for a in std::mem::take(&mut alts[i]) {
                match starts_with(&a).and_then(|r| g.order.get(&r).copied()) {
                    Some(j) if j < i => {
                        changed = true;
                        for b in &alts[j] {
                            let mut s = b.clone();
                            s.extend(a[1..].iter().cloned());
                            for x in g.expand(s, at)? {
                                size += x.iter().map(Node::size).sum::<usize>();
                                if size > MAX_NODES {
                                    return Err(too_large(at, &names[members[i]]));
                                }
                                next.push(x);
                            }
                        }
                    }
                    _ => {
                        size += a.iter().map(Node::size).sum::<usize>();
                        next.push(a);
                    }
                }
            }
            if size > MAX_NODES {
                return Err(too_large(at, &names[members[i]]));
            }
            total = size;
            alts[i] = next;
            rounds += 1;
            if !changed {
                break;
            }
            if rounds > members.len() + 64 {
                return Err(grammar_error(
                    at,
                    &format!(
                        "the left recursion through `{}` could not be rewritten",
                        names[members[i]]
                    ),
                ));
            }
        }
        let me = members[i];
        let others = total.saturating_sub(size_of(&alts[i]));
        let (lr, other): (Vec<_>, Vec<_>) = std::mem::take(&mut alts[i])
            .into_iter()
            .partition(|a| starts_with(a) == Some(me));
        alts[i] = if lr.is_empty() {
            other
        } else {
            let tails: Vec<Node> = lr.into_iter().map(|a| seq(a[1..].to_vec())).collect();
            // with no way out of the recursion, the rule matches nothing
            let head = if other.is_empty() {
                Node::fail()
            } else {
                alt(other.into_iter().map(seq).collect())
            };
            vec![vec![
                head,
                Node::Rep {
                    sub: Box::new(alt(tails)),
                    min: 0,
                    max: None,
                },
            ]]
        };
        total = others + size_of(&alts[i]);
    }
    Ok(alts
        .into_iter()
        .map(|a| alt(a.into_iter().map(seq).collect()))
        .collect())
}

/// The rules of the group that `n` can call before reading a character.
pub(super) fn left_calls(n: &Node, nullable_rules: &[bool], out: &mut Vec<usize>) -> bool {
    match n {
        Node::Lit(s) => s.is_empty(),
        Node::Class { .. } | Node::Any => false,
        Node::Regex { nullable, .. } | Node::Text { nullable, .. } => *nullable,
        Node::Ref { rule, .. } => {
            out.push(*rule);
            nullable_rules[*rule]
        }
        Node::Seq(xs) => {
            for x in xs {
                if !left_calls(x, nullable_rules, out) {
                    return false;
                }
            }
            true
        }
        Node::Alt(xs) => {
            let mut any = false;
            for x in xs {
                any |= left_calls(x, nullable_rules, out);
            }
            any
        }
        Node::Rep { sub, min, max } => {
            if *max == Some(0) {
                return true;
            }
            let n = left_calls(sub, nullable_rules, out);
            *min == 0 || n
        }
    }
}

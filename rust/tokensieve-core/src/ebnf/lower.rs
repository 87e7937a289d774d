//! The rules → one [`Expr`] (see the module docs of [`super`]).

use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, Hir};
use rustc_hash::FxHashMap;

use super::left::{self, Group};
use super::parse::{Node, RuleText};
use super::{grammar_error, Compiled, EbnfOptions, Pos};
use crate::automata::expr::{self, Expr};
use crate::error::Result;

/// A rule that is not recursive, used more than once and at least this heavy
/// ([`Expr::weight`]) is called where it is used instead of written out in each place.
const SHARE_WEIGHT: u64 = 2048;

/// Most rules a grammar may define.
pub(crate) const MAX_RULES: usize = 100_000;

/// The rules, their references resolved to indices.
pub(crate) struct Rules {
    pub names: Vec<String>,
    pub pos: Vec<Pos>,
    pub bodies: Vec<Node>,
}

fn resolve(texts: Vec<RuleText>) -> Result<Rules> {
    if texts.len() > MAX_RULES {
        return Err(grammar_error(
            texts[MAX_RULES].pos,
            &format!("the grammar defines more than {MAX_RULES} rules"),
        ));
    }
    let mut index: FxHashMap<String, usize> = FxHashMap::default();
    let mut rules = Rules {
        names: Vec::new(),
        pos: Vec::new(),
        bodies: Vec::new(),
    };
    for t in texts {
        if let Some(&k) = index.get(&t.name) {
            let first = rules.pos[k];
            return Err(grammar_error(
                t.pos,
                &format!(
                    "the rule `{}` is defined twice (first at line {}, column {})",
                    t.name, first.line, first.col
                ),
            ));
        }
        index.insert(t.name.clone(), rules.names.len());
        rules.names.push(t.name);
        rules.pos.push(t.pos);
        rules.bodies.push(t.body);
    }
    for b in rules.bodies.iter_mut() {
        bind(b, &index)?;
    }
    Ok(rules)
}

fn bind(n: &mut Node, index: &FxHashMap<String, usize>) -> Result<()> {
    match n {
        Node::Ref { name, rule, pos } => match index.get(name.as_str()) {
            Some(&k) => *rule = k,
            None => {
                return Err(grammar_error(
                    *pos,
                    &format!("the rule `{name}` is used but never defined"),
                ))
            }
        },
        Node::Seq(xs) | Node::Alt(xs) => {
            for x in xs {
                bind(x, index)?;
            }
        }
        Node::Rep { sub, .. } => bind(sub, index)?,
        _ => {}
    }
    Ok(())
}

fn callees(n: &Node) -> Vec<usize> {
    let mut out = Vec::new();
    n.refs(&mut |r, _| out.push(r));
    out
}

/// Strongly connected components of the rules reachable from `start`, each listed after every
/// component it calls (Tarjan's order), iteratively.
fn components(rules: &Rules, start: usize) -> Vec<Vec<usize>> {
    let n = rules.bodies.len();
    let edges: Vec<Vec<usize>> = rules.bodies.iter().map(callees).collect();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0usize; n];
    let mut on = vec![false; n];
    let mut stack = Vec::new();
    let mut out = Vec::new();
    let mut next = 0usize;
    // (rule, next edge to look at)
    let mut work: Vec<(usize, usize)> = vec![(start, 0)];
    index[start] = next;
    low[start] = next;
    next += 1;
    stack.push(start);
    on[start] = true;
    while let Some(&mut (v, ref mut e)) = work.last_mut() {
        if let Some(&w) = edges[v].get(*e) {
            *e += 1;
            if index[w] == usize::MAX {
                index[w] = next;
                low[w] = next;
                next += 1;
                stack.push(w);
                on[w] = true;
                work.push((w, 0));
            } else if on[w] {
                low[v] = low[v].min(index[w]);
            }
            continue;
        }
        work.pop();
        if let Some(&(u, _)) = work.last() {
            low[u] = low[u].min(low[v]);
        }
        if low[v] == index[v] {
            let mut comp = Vec::new();
            loop {
                let w = stack.pop().expect("on the stack");
                on[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            comp.reverse();
            out.push(comp);
        }
    }
    out
}

/// Per rule: whether it is in a group of `comps` that calls itself (unreached rules: no).
fn recursive_rules(rules: &Rules, comps: &[Vec<usize>]) -> Vec<bool> {
    let mut out = vec![false; rules.names.len()];
    for c in comps {
        let rec = c.len() > 1 || callees(&rules.bodies[c[0]]).contains(&c[0]);
        for &r in c {
            out[r] = rec;
        }
    }
    out
}

/// Per rule: whether it can match the empty string. A worklist: a rule is looked at again only
/// when a rule it calls has just been found nullable (each rule at most once per callee), so a
/// chain of rules defined in any order costs its length, not its square.
fn nullable_rules(rules: &Rules) -> Result<Vec<bool>> {
    let n = rules.bodies.len();
    let mut nul = vec![false; n];
    let mut callers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (r, b) in rules.bodies.iter().enumerate() {
        b.refs(&mut |k, _| callers[k].push(r));
    }
    for c in &mut callers {
        c.sort_unstable();
        c.dedup();
    }
    let mut work: Vec<usize> = (0..n).rev().collect();
    let mut every = crate::budget::Every::default();
    while let Some(r) = work.pop() {
        every.tick("finding the grammar's rules that can match nothing")?;
        if !nul[r] && left::nullable(&rules.bodies[r], &nul) {
            nul[r] = true;
            work.extend(callers[r].iter().copied().filter(|&c| !nul[c]));
        }
    }
    Ok(nul)
}

/// Whether the rules of `comp` can call one another in a cycle before reading a character.
fn left_cycle(rules: &Rules, comp: &[usize], nul: &[bool]) -> Option<Vec<usize>> {
    let inside: FxHashMap<usize, usize> = comp.iter().enumerate().map(|(i, &r)| (r, i)).collect();
    let edges: Vec<Vec<usize>> = comp
        .iter()
        .map(|&r| {
            let mut out = Vec::new();
            left::left_calls(&rules.bodies[r], nul, &mut out);
            out.into_iter()
                .filter_map(|c| inside.get(&c).copied())
                .collect()
        })
        .collect();
    // depth-first search for a cycle: 0 new, 1 on the path, 2 done
    let mut state = vec![0u8; comp.len()];
    for s in 0..comp.len() {
        if state[s] != 0 {
            continue;
        }
        let mut path: Vec<(usize, usize)> = vec![(s, 0)];
        state[s] = 1;
        while let Some(&mut (v, ref mut e)) = path.last_mut() {
            if let Some(&w) = edges[v].get(*e) {
                *e += 1;
                if state[w] == 1 {
                    let from = path.iter().position(|p| p.0 == w).expect("on the path");
                    return Some(path[from..].iter().map(|p| comp[p.0]).collect());
                }
                if state[w] == 0 {
                    state[w] = 1;
                    path.push((w, 0));
                }
                continue;
            }
            state[v] = 2;
            path.pop();
        }
    }
    None
}

struct Lower<'a> {
    rules: &'a Rules,
    /// Rule → its definition in the knot.
    def_of: Vec<Option<u32>>,
    defs: Vec<Option<Expr>>,
    /// Rule → its expression and the expression's height, for the rules written in place
    /// (taken out by its last use).
    inline: Vec<Option<(Expr, u32)>>,
    /// Rule → how many uses of a rule written in place are still to be lowered.
    uses_left: Vec<u32>,
    /// Whether this lowering is the one kept: uses are counted down, and the last one takes
    /// the rule's expression instead of copying it (a chain of rules used once each is then
    /// built once, not once per rule above it).
    keep: bool,
    base: u32,
    max_stack: u32,
    every: crate::budget::Every,
}

/// A rule that is not recursive and whose expression would be higher than this where it is
/// written is called instead (so a chain of thousands of rules nests no expression deeper
/// than this plus [`super::parse::MAX_HEIGHT`], for every walk over it).
const INLINE_HEIGHT: u32 = 256;

impl Lower<'_> {
    fn new_def(&mut self, rule: usize) -> u32 {
        let d = self.defs.len() as u32;
        self.defs.push(None);
        self.def_of[rule] = Some(d);
        d
    }

    /// The height of the expression of `n` (an upper bound: the expression helpers flatten,
    /// never add levels).
    fn height(&self, n: &Node) -> u32 {
        n.height_with(&|rule| match (&self.def_of[rule], &self.inline[rule]) {
            (Some(_), _) => 2,
            (None, Some((_, h))) => *h,
            (None, None) => 1,
        })
    }

    /// Counts down the uses of the rules `n` writes in place, as a kept lowering would have.
    fn forget_uses(&mut self, n: &Node) {
        let mut refs = Vec::new();
        n.refs(&mut |r, _| refs.push(r));
        for r in refs {
            if self.def_of[r].is_none() {
                self.uses_left[r] = self.uses_left[r].saturating_sub(1);
                if self.uses_left[r] == 0 {
                    self.inline[r] = None;
                }
            }
        }
    }

    /// `n` as an expression; `tail`: nothing of the current definition follows it (a call
    /// there continues without a frame).
    fn node(&mut self, n: &Node, tail: bool) -> Result<Expr> {
        self.every.tick("compiling the grammar")?;
        Ok(match n {
            Node::Lit(s) => expr::lit(s),
            Node::Class { ranges, negated } => {
                let mut c =
                    ClassUnicode::new(ranges.iter().map(|&(a, b)| ClassUnicodeRange::new(a, b)));
                if *negated {
                    c.negate();
                }
                Expr::Hir(Hir::class(Class::Unicode(c)))
            }
            Node::Any => Expr::Hir(Hir::class(Class::Unicode(ClassUnicode::new([
                ClassUnicodeRange::new('\0', char::MAX),
            ])))),
            Node::Regex { hir, .. } => Expr::Hir((**hir).clone()),
            Node::Text { expr, .. } => (**expr).clone(),
            Node::Seq(xs) => {
                let last = xs.len().saturating_sub(1);
                let mut parts = Vec::with_capacity(xs.len());
                for (i, x) in xs.iter().enumerate() {
                    parts.push(self.node(x, tail && i == last)?);
                }
                expr::concat(parts)
            }
            Node::Alt(xs) => {
                let mut parts = Vec::with_capacity(xs.len());
                for x in xs {
                    parts.push(self.node(x, tail)?);
                }
                expr::alt(parts)
            }
            Node::Rep {
                sub,
                min: 0,
                max: Some(1),
            } => expr::opt(self.node(sub, tail)?),
            // (its body is never read, and may name a rule that is not lowered)
            Node::Rep { max: Some(0), .. } => Expr::empty(),
            Node::Rep { sub, min, max } => expr::rep(self.node(sub, false)?, *min, *max),
            Node::Ref { rule, .. } => match self.def_of[*rule] {
                Some(d) if tail => Expr::Goto(self.base + d),
                Some(d) => expr::concat(vec![
                    Expr::StackBelow(self.max_stack),
                    Expr::Recur(self.base + d),
                ]),
                None => {
                    let r = *rule;
                    if self.keep {
                        self.uses_left[r] = self.uses_left[r].saturating_sub(1);
                    }
                    let last = self.keep && self.uses_left[r] == 0;
                    let e = if last {
                        self.inline[r].take().map(|(e, _)| e)
                    } else {
                        self.inline[r].as_ref().map(|(e, _)| e.clone())
                    };
                    e.expect("a rule written in place is lowered before its users")
                }
            },
        })
    }
}

/// The group's left recursion rewritten in the order that gives the smallest rules (Paull's
/// algorithm substitutes earlier rules into later ones, so the order decides how much is
/// copied, and copies make the automaton track more stacks at once). Tried: rules called first
/// by fewer of the group's rules first (a rule many others start with — `postfix` under
/// `member ::= postfix "." name`, `call ::= postfix "(" ... ")"` — goes last, where the others
/// are substituted into it once each and its own recursion becomes one loop), the written
/// order, and its reverse.
fn rewrite_best(
    rules: &Rules,
    nul: &[bool],
    recursive: &[bool],
    members: &[usize],
) -> Result<(Vec<usize>, Vec<Node>)> {
    let inside: FxHashMap<usize, usize> =
        members.iter().enumerate().map(|(i, &r)| (r, i)).collect();
    let mut callers = vec![0usize; members.len()];
    for &r in members {
        let mut out = Vec::new();
        left::left_calls(&rules.bodies[r], nul, &mut out);
        out.sort_unstable();
        out.dedup();
        for c in out {
            if let Some(&k) = inside.get(&c) {
                callers[k] += 1;
            }
        }
    }
    let mut by_callers: Vec<usize> = (0..members.len()).collect();
    by_callers.sort_by_key(|&k| callers[k]);
    let by_callers: Vec<usize> = by_callers.into_iter().map(|k| members[k]).collect();
    let written = members.to_vec();
    let reversed: Vec<usize> = members.iter().rev().copied().collect();
    let mut best: Option<(usize, Vec<usize>, Vec<Node>)> = None;
    let mut first_err = None;
    for order in [by_callers, written, reversed] {
        if best.as_ref().is_some_and(|b| b.1 == order) {
            continue;
        }
        let group = Group {
            rules,
            nullable: nul,
            recursive,
            order: order.iter().enumerate().map(|(i, &r)| (r, i)).collect(),
        };
        match left::rewrite(&group, &order) {
            Ok(bodies) => {
                let size: usize = bodies.iter().map(Node::size).sum();
                if best.as_ref().is_none_or(|b| size < b.0) {
                    best = Some((size, order, bodies));
                }
            }
            Err(e @ crate::error::Error::Budget(_)) => return Err(e),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match best {
        Some((_, order, bodies)) => Ok((order, bodies)),
        None => Err(first_err.expect("an order was tried")),
    }
}

pub(super) fn lower(texts: Vec<RuleText>, opts: &EbnfOptions) -> Result<Compiled> {
    let mut rules = resolve(texts)?;
    let Some(start) = rules.names.iter().position(|n| *n == opts.start) else {
        return Err(grammar_error(
            Pos { line: 1, col: 1 },
            &format!("the grammar has no rule `{}` (the start rule)", opts.start),
        ));
    };
    let comps = components(&rules, start);
    let mut reachable = vec![false; rules.names.len()];
    comps.iter().flatten().for_each(|&r| reachable[r] = true);
    let warnings: Vec<String> = (0..rules.names.len())
        .filter(|&r| !reachable[r])
        .map(|r| {
            format!(
                "the rule `{}` (line {}) is never used from `{}`",
                rules.names[r], rules.pos[r].line, opts.start
            )
        })
        .collect();
    let nul = nullable_rules(&rules)?;
    let mut recursive = recursive_rules(&rules, &comps);
    // left recursion → repetition, group by group (splitting off the empty string of the
    // members that can match it first)
    let mut nul = nul;
    let mut rewritten = false;
    for c in &comps {
        if !recursive[c[0]] || left_cycle(&rules, c, &nul).is_none() {
            continue;
        }
        rewritten = true;
        let members = left::split_empty(&mut rules, &mut nul, &mut recursive, c)?;
        let (order, bodies) = rewrite_best(&rules, &nul, &recursive, &members)?;
        for (&r, b) in order.iter().zip(bodies) {
            // what the rewriting wrote in front of the recursion keeps every later walk within
            // twice the bound of a rule as written
            if b.height() > 2 * super::parse::MAX_HEIGHT {
                return Err(grammar_error(
                    rules.pos[r],
                    &format!(
                        "rewriting the left recursion through `{}` nests its rule more than {} \
                         levels deep; write the recursion with repetition (`a (op b)*`) instead",
                        rules.names[r],
                        2 * super::parse::MAX_HEIGHT
                    ),
                ));
            }
            rules.bodies[r] = b;
        }
    }
    let comps = if rewritten {
        let comps = components(&rules, start);
        recursive = recursive_rules(&rules, &comps);
        comps
    } else {
        comps
    };
    for c in &comps {
        if !recursive[c[0]] {
            continue;
        }
        if let Some(cycle) = left_cycle(&rules, c, &nul) {
            let names: Vec<String> = cycle
                .iter()
                .map(|&r| format!("`{}`", rules.names[r]))
                .collect();
            return Err(grammar_error(
                rules.pos[cycle[0]],
                &format!(
                    "the left recursion through {} could not be rewritten",
                    names.join(", ")
                ),
            ));
        }
    }
    // how often each rule is used (for sharing)
    let mut uses = vec![0u32; rules.names.len()];
    for c in &comps {
        for &r in c {
            rules.bodies[r].refs(&mut |k, _| uses[k] = uses[k].saturating_add(1));
        }
    }
    let mut lw = Lower {
        rules: &rules,
        def_of: vec![None; rules.names.len()],
        defs: vec![None],
        inline: vec![None; rules.names.len()],
        uses_left: uses,
        keep: true,
        base: 0,
        max_stack: opts.max_stack_depth,
        every: crate::budget::Every::default(),
    };
    let mut root = None;
    for c in &comps {
        if recursive[c[0]] {
            for &r in c {
                if r == start {
                    lw.def_of[r] = Some(0);
                } else {
                    lw.new_def(r);
                }
            }
            for &r in c {
                let body = lw.node(&lw.rules.bodies[r], true)?;
                let d = lw.def_of[r].expect("assigned above") as usize;
                lw.defs[d] = Some(body);
            }
            continue;
        }
        let r = c[0];
        if r == start {
            root = Some(lw.node(&lw.rules.bodies[r], true)?);
            continue;
        }
        let height = lw.height(&lw.rules.bodies[r]);
        let called = if height > INLINE_HEIGHT {
            true
        } else if lw.uses_left[r] >= 2 {
            // large and used in several places: called; weighed on a copy first
            lw.keep = false;
            let e = lw.node(&lw.rules.bodies[r], false);
            lw.keep = true;
            let e = e?;
            if e.weight() >= SHARE_WEIGHT {
                true
            } else {
                lw.forget_uses(&lw.rules.bodies[r]);
                lw.inline[r] = Some((e, height));
                continue;
            }
        } else {
            false
        };
        if called {
            let d = lw.new_def(r) as usize;
            lw.defs[d] = Some(lw.node(&lw.rules.bodies[r], true)?);
        } else {
            let e = lw.node(&lw.rules.bodies[r], false)?;
            lw.inline[r] = Some((e, height));
        }
    }
    let expr = if lw.defs.len() == 1 && lw.defs[0].is_none() {
        // nothing is called: the start rule's expression, with no tail calls in it
        root.expect("the start rule is lowered")
    } else {
        if lw.defs[0].is_none() {
            lw.defs[0] = root;
        }
        Expr::Knot {
            defs: lw
                .defs
                .into_iter()
                .map(|d| d.expect("every definition is lowered"))
                .collect(),
            base: lw.base,
        }
    };
    Ok(Compiled { expr, warnings })
}

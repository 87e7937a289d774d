//! llguidance's parametric rules: `name::_` rules over a 64-bit parameter, alternatives kept
//! or dropped by `%if` conditions on it, and references `name::expr` that compute the
//! parameter of the rule they call (llguidance's `docs/parametric.md`).
//!
//! Such a grammar is context-free: each parametric rule stands for one rule per parameter
//! value. [`expand`] makes those rules, for the values the grammar reaches from its plain
//! rules (at most [`MAX_INSTANCES`]), before anything else reads the grammar: an instance is
//! an ordinary rule named `name::0x…` (a name no grammar can write), its alternatives those
//! whose condition holds for its value (none: the empty language).

use rustc_hash::{FxHashMap, FxHashSet};

use super::parse::{Def, Ex, Text};
use crate::ebnf::{grammar_error, Pos};
use crate::error::{Error, Result};

/// Most rules the parametric rules of one grammar may expand to.
pub(crate) const MAX_INSTANCES: usize = 10_000;
/// Most expression nodes all instances together may hold (each instance copies its rule's
/// body: a large body times many values is refused before it is built).
pub(crate) const MAX_EXPANDED_NODES: usize = 2_000_000;

/// A bit range `[lo:hi]` of the parameter (`_` is `[0:64]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub lo: u32,
    pub hi: u32,
}

impl Range {
    fn mask(self) -> u64 {
        let w = self.hi - self.lo;
        if w >= 64 {
            u64::MAX
        } else {
            (1u64 << w) - 1
        }
    }
    fn get(self, p: u64) -> u64 {
        (p >> self.lo) & self.mask()
    }
}

/// The parameter a reference passes (`p`: the referring rule's own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PExpr {
    /// a literal
    Lit(u64),
    /// `_`: `p`
    Same,
    /// `set_bit(k)`: `p | 1 << k`
    SetBit(u32),
    /// `clear_bit(k)`: `p & !(1 << k)`
    ClearBit(u32),
    /// `bit_and(v)`
    And(u64),
    /// `bit_or(v)`
    Or(u64),
    /// `incr([x:y])`: the range plus one, saturating
    Incr(Range),
    /// `decr([x:y])`: the range minus one, saturating at zero
    Decr(Range),
}

impl PExpr {
    pub(crate) fn eval(&self, p: u64) -> u64 {
        match *self {
            PExpr::Lit(v) => v,
            PExpr::Same => p,
            PExpr::SetBit(k) => p | 1 << k,
            PExpr::ClearBit(k) => p & !(1 << k),
            PExpr::And(v) => p & v,
            PExpr::Or(v) => p | v,
            PExpr::Incr(r) => {
                if r.get(p) == r.mask() {
                    p
                } else {
                    p.wrapping_add(1 << r.lo)
                }
            }
            PExpr::Decr(r) => {
                if r.get(p) == 0 {
                    p
                } else {
                    p.wrapping_sub(1 << r.lo)
                }
            }
        }
    }
}

/// How a condition compares (unsigned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    pub(crate) fn from_suffix(s: &str) -> Option<Cmp> {
        Some(match s {
            "eq" => Cmp::Eq,
            "ne" => Cmp::Ne,
            "lt" => Cmp::Lt,
            "le" => Cmp::Le,
            "gt" => Cmp::Gt,
            "ge" => Cmp::Ge,
            _ => return None,
        })
    }
    fn holds(self, a: u64, b: u64) -> bool {
        match self {
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
        }
    }
}

/// An `%if` condition on the parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cond {
    True,
    /// the range compared with a value (`bit_clear(k)` is `eq([k:k+1], 0)`, `is_ones` the
    /// range equal to all ones, ...)
    Value(Cmp, Range, u64),
    /// the number of set bits of the range compared with a count
    Count(Cmp, Range, u64),
    /// `is_ones([x:y])`
    Ones(Range),
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
    Not(Box<Cond>),
}

impl Cond {
    pub(crate) fn holds(&self, p: u64) -> bool {
        match self {
            Cond::True => true,
            Cond::Value(c, r, v) => c.holds(r.get(p), *v),
            Cond::Count(c, r, k) => c.holds(u64::from(r.get(p).count_ones()), *k),
            Cond::Ones(r) => r.get(p) == r.mask(),
            Cond::And(a, b) => a.holds(p) && b.holds(p),
            Cond::Or(a, b) => a.holds(p) || b.holds(p),
            Cond::Not(a) => !a.holds(p),
        }
    }
}

fn instance_name(name: &str, v: u64) -> String {
    format!("{name}::{v:#x}")
}

struct Expander<'a> {
    /// the parametric rules, by name
    defs: FxHashMap<String, &'a Def>,
    seen: FxHashSet<(String, u64)>,
    queue: Vec<(String, u64)>,
    /// expression nodes copied into instances so far
    nodes: usize,
}

/// The number of nodes of `x`.
fn size(x: &Ex) -> usize {
    match x {
        Ex::Seq(xs) | Ex::Alt(xs) | Ex::And(xs) => 1 + xs.iter().map(size).sum::<usize>(),
        Ex::Rep(sub, ..) | Ex::Not(sub) | Ex::If(sub, ..) => 1 + size(sub),
        _ => 1,
    }
}

impl Expander<'_> {
    /// `x` with every reference `name::expr` replaced by its instance's name (`p`: the value
    /// of the rule being instantiated, `None` in a plain rule).
    fn rewrite(&mut self, x: &Ex, p: Option<u64>) -> Result<Ex> {
        let all = |s: &mut Self, xs: &[Ex]| -> Result<Vec<Ex>> {
            xs.iter().map(|x| s.rewrite(x, p)).collect()
        };
        Ok(match x {
            Ex::Seq(xs) => Ex::Seq(all(self, xs)?),
            Ex::Alt(xs) => Ex::Alt(all(self, xs)?),
            Ex::And(xs) => Ex::And(all(self, xs)?),
            Ex::Rep(sub, a, b) => Ex::Rep(Box::new(self.rewrite(sub, p)?), *a, *b),
            Ex::Not(sub) => Ex::Not(Box::new(self.rewrite(sub, p)?)),
            Ex::Name(n, pos) if self.defs.contains_key(n) => {
                return Err(grammar_error(
                    *pos,
                    &format!(
                        "the parametric rule `{n}` is used without a parameter (write \
                         `{n}::value`)"
                    ),
                ))
            }
            Ex::Call(n, e, pos) => {
                if !self.defs.contains_key(n) {
                    return Err(grammar_error(
                        *pos,
                        &format!("`{n}::...` names no parametric rule (`{n}::_: ...`)"),
                    ));
                }
                let v = match (e, p) {
                    (PExpr::Lit(v), _) => *v,
                    (e, Some(p)) => e.eval(p),
                    (_, None) => {
                        return Err(grammar_error(
                            *pos,
                            "only a number can be passed outside a parametric rule (there is \
                             no `_` to compute from)",
                        ))
                    }
                };
                let key = (n.clone(), v);
                if self.seen.insert(key.clone()) {
                    if self.seen.len() > MAX_INSTANCES {
                        return Err(Error::Budget(format!(
                            "the parametric rules expand to more than {MAX_INSTANCES} rules \
                             (one per rule and parameter value reached)"
                        )));
                    }
                    self.queue.push(key);
                }
                Ex::Name(instance_name(n, v), *pos)
            }
            Ex::If(_, _, pos) => return Err(misplaced_if(*pos)),
            other => other.clone(),
        })
    }

    /// The body of parametric rule `d` for parameter `v`: the alternatives whose condition
    /// holds.
    fn instantiate(&mut self, d: &Def, v: u64) -> Result<Ex> {
        let alts: Vec<&Ex> = match &d.body {
            Ex::Alt(xs) => xs.iter().collect(),
            x => vec![x],
        };
        let mut kept = Vec::new();
        for a in alts {
            match a {
                Ex::If(x, c, _) => {
                    if c.holds(v) {
                        kept.push(self.rewrite(x, Some(v))?);
                    }
                }
                x => kept.push(self.rewrite(x, Some(v))?),
            }
        }
        Ok(if kept.len() == 1 {
            kept.pop().unwrap_or(Ex::Alt(Vec::new()))
        } else {
            // (no alternative kept: the empty language)
            Ex::Alt(kept)
        })
    }
}

/// Replace the parametric rules of `g` by their instances (see the module docs).
pub(crate) fn expand(g: &mut Text) -> Result<()> {
    if !g.rules.iter().any(|d| d.param) && !has_calls(g) {
        return Ok(());
    }
    let rules = std::mem::take(&mut g.rules);
    let (params, plain): (Vec<Def>, Vec<Def>) = rules.into_iter().partition(|d| d.param);
    let mut e = Expander {
        defs: params.iter().map(|d| (d.name.clone(), d)).collect(),
        seen: FxHashSet::default(),
        queue: Vec::new(),
        nodes: 0,
    };
    let mut out = Vec::with_capacity(plain.len());
    for d in plain {
        let body = e.rewrite(&d.body, None)?;
        let suffix = d.suffix.as_ref().map(|s| e.rewrite(s, None)).transpose()?;
        out.push(Def { body, suffix, ..d });
    }
    for d in &g.terminals {
        refuse_calls(&d.body)?;
    }
    let mut ignore = Vec::new();
    for (x, pos) in &g.ignore {
        ignore.push((e.rewrite(x, None)?, *pos));
    }
    g.ignore = ignore;
    while let Some((name, v)) = e.queue.pop() {
        crate::budget::check("expanding parametric rules")?;
        let d = e.defs[&name];
        e.nodes += size(&d.body);
        if e.nodes > MAX_EXPANDED_NODES {
            return Err(Error::Budget(format!(
                "the parametric rules expand to more than {MAX_EXPANDED_NODES} expression nodes \
                 (each rule's body once per parameter value reached)"
            )));
        }
        let body = e.instantiate(d, v)?;
        out.push(Def {
            name: instance_name(&name, v),
            pos: d.pos,
            body,
            lazy: false,
            suffix: None,
            param: false,
        });
    }
    g.rules = out;
    Ok(())
}

fn has_calls(g: &Text) -> bool {
    fn any(x: &Ex) -> bool {
        match x {
            Ex::Call(..) | Ex::If(..) => true,
            Ex::Seq(xs) | Ex::Alt(xs) | Ex::And(xs) => xs.iter().any(any),
            Ex::Rep(sub, ..) | Ex::Not(sub) => any(sub),
            _ => false,
        }
    }
    g.rules.iter().chain(&g.terminals).any(|d| any(&d.body)) || g.ignore.iter().any(|(x, _)| any(x))
}

/// An `%if` anywhere but at the end of a parametric rule's alternative.
pub(crate) fn misplaced_if(pos: Pos) -> Error {
    grammar_error(
        pos,
        "`%if` stands only at the end of an alternative of a parametric rule",
    )
}

/// A parametric rule `n` used in a terminal.
pub(crate) fn call_in_terminal(n: &str, pos: Pos) -> Error {
    grammar_error(
        pos,
        &format!("the terminal uses the parametric rule `{n}`: terminals hold terminals only"),
    )
}

/// Terminals hold terminals only: no parametric rule either.
fn refuse_calls(x: &Ex) -> Result<()> {
    match x {
        Ex::Call(n, _, pos) => Err(call_in_terminal(n, *pos)),
        Ex::If(_, _, pos) => Err(misplaced_if(*pos)),
        Ex::Seq(xs) | Ex::Alt(xs) | Ex::And(xs) => xs.iter().try_for_each(refuse_calls),
        Ex::Rep(sub, ..) | Ex::Not(sub) => refuse_calls(sub),
        _ => Ok(()),
    }
}

//! Parts compiled once per process ([`Part`]): the registry ([`share`], [`shared_part`]), the
//! builder calls recorded while compiling a part and replayed wherever it occurs, and a shared
//! recursive part called from each place it occurs (one copy per automaton).

use std::sync::{Arc, Mutex, OnceLock};

use regex_automata::nfa::thompson::{Builder, Transition};
use regex_automata::util::look::Look;
use regex_automata::util::primitives::StateID;
use rustc_hash::FxHashMap;

use super::compiler::{Compiler, Frag};
use super::{lost_marker, Count};
use crate::automata::expr::Expr;
use crate::error::Result;

/// Shared parts registered in this process, at most this many (each a few hundred kB at most).
const MAX_PARTS: usize = 64;

/// A sub-automaton that occurs in many grammars (an unconstrained JSON value), compiled once
/// per process and copied state by state into each automaton that holds it (see [`share`]).
#[derive(Debug)]
pub(crate) struct Part {
    pub(super) fragment: Fragment,
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
        knots: Vec::new(),
        next_rec: 0,
        last_rec: None,
        called: FxHashMap::default(),
        in_counted: 0,
        next_set: 0,
        sets: Vec::new(),
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
        inhabited: crate::automata::rules::inhabited(&e),
    });
    let p = parts()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.to_string())
        .or_insert(part)
        .clone();
    Ok(Expr::Part(p))
}

/// One builder call of a recorded fragment; state ids are the fragment's own, in creation order.
#[derive(Debug)]
pub(super) enum Op {
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
pub(super) struct Fragment {
    ops: Vec<Op>,
    states: usize,
    entry: u32,
    exit: u32,
    /// The part's HIR weight, for the compiler's budgets.
    weight: u64,
    /// When the part is a recursive expression at its top (the any-JSON value): how to call
    /// its one copy again from another place (see [`Compiler::call_part`]).
    pub(super) call: Option<Callable>,
}

/// The states of a recorded recursive expression that another call site needs, in the
/// fragment's own ids: its body's entry, the dispatch of its returns (a union of `Pop`
/// markers), its marker number, and how many call sites it already has.
#[derive(Debug, Clone, Copy)]
pub(super) struct Callable {
    body: u32,
    dispatch: u32,
    rec: u32,
    sites: u32,
}

/// A shared part called in the automaton being built: its marker number there, its body's
/// entry and return dispatch, and the site number the next call gets.
#[derive(Debug, Clone, Copy)]
pub(super) struct Called {
    rec: u32,
    body: StateID,
    dispatch: StateID,
    next_site: u32,
}

impl Compiler {
    /// Add a recorded fragment's states again (logged too, when recording); returns its entry
    /// and exit.
    pub(super) fn replay(&mut self, f: &Fragment) -> Result<Frag> {
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
        let mut sets: FxHashMap<u32, u32> = FxHashMap::default();
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
                        // a replayed member set is a set of its own
                        op => op.map_set_group(|g| {
                            *sets.entry(g).or_insert_with(|| {
                                self.next_set += 1;
                                self.next_set - 1
                            })
                        }),
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
    pub(super) fn call_part(&mut self, p: &Arc<Part>, call: Callable) -> Result<Frag> {
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
}

#[cfg(test)]
thread_local! {
    static PART_COPIES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a shared recursive part is called from each place it occurs (always, except inside
/// [`with_part_copies`]).
pub(super) fn share_calls() -> bool {
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
    crate::budget::with_setting(&PART_COPIES, true, f)
}

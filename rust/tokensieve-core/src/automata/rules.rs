//! Rules: the parts of an expression compiled into the automaton only when first entered.
//!
//! [`split`] cuts a large expression (a JSON Schema's) into a root and a table of rules: each
//! cut sub-expression is moved into the table and replaced by an [`Expr::Rule`] leaf. The NFA
//! builder compiles a rule leaf into a `Call` marker (see [`super::nfa::Count::Call`]), and the
//! lazy DFA compiles the rule's own NFA the first time its closure reaches that marker (unless
//! its background builder has compiled it already), then
//! enters it with a stack frame naming the call, and returns through the rule's `Return` marker
//! to the call's continuation (see [`super::dfa`]). A first mask then costs the root's
//! automaton, not the whole schema's; the members of an object are built when a key leads
//! into them.
//!
//! The language is exactly the one of the expression uncut. Three rules keep it so:
//! - a cut sub-expression is *self-contained*: it holds no jump to a shared tail outside it,
//!   no recursive call, nesting guard or stack bound, and no look-around (what those mean
//!   depends on where they are built);
//! - nothing inside a counted repetition's body is cut (a count travels through the body's
//!   states, and a rule leaf keeps its repetition from being counted, see
//!   [`super::expr::counts`]);
//! - a cut sub-expression's language is surely not empty ([`Info::inhabited`]), so a call
//!   can be taken to be finishable without building its rule: liveness (every DFA state can
//!   still reach acceptance) needs no look ahead into rules not yet built.
//!
//! An expression holding a stack bound (recursive `$ref`s through the stack) is not cut at
//! all: its liveness fixpoint (`super::depth`) needs the whole automaton.

use super::expr::{self, Expr};
use super::hir;

/// Size (the residual [`Expr::weight`], after the rules inside were cut) from which a
/// sub-expression becomes a rule of its own. Smaller parts stay inline, where one DFA is
/// fastest.
pub(crate) const MIN_RULE_WEIGHT: u64 = 256;

/// An expression lighter than this is not cut at all: its whole automaton is built in a
/// fraction of a millisecond even with cold caches. From this size on, building everything up
/// front costs more than the first mask needs: with the caches cold, as they are when a
/// server meets a new schema between forward passes, most of a schema's compile is the
/// cache misses of allocating its automaton, and the parts no first mask enters (the members
/// of nested objects, the readers of undeclared keys) are then built by the background
/// builder instead. Measured on the JSONSchemaBench sample (Llama 3): with 8,192, the first
/// masks of Kubernetes schemas built their whole NFAs (about 3,800 states for one, at
/// 0.9–1.6 ms cold); with 1,024, a few hundred (0.5 ms).
pub(crate) const MIN_SPLIT_WEIGHT: u64 = 1024;

/// A rule whose own size is at least this is compiled with the root, not on first entry: such
/// a part cannot be cut further (a large pattern or format with length bounds, a long list of
/// values), and building it up front keeps its budget errors at compile time, where building
/// the whole automaton reported them.
pub(crate) const EAGER_RULE_WEIGHT: u64 = 100_000;

/// When the rules together are at least this large, every rule is compiled with the root:
/// their NFAs share one `max_nfa_bytes` budget, and what exceeds it is then reported at
/// compile time too.
pub(crate) const EAGER_TOTAL_WEIGHT: u64 = 500_000;

/// An expression cut into rules: `rules[0]` is the root, every other entry a rule that an
/// [`Expr::Rule`] leaf of some entry names.
pub(crate) struct Split {
    pub rules: Vec<Expr>,
    /// Each rule's own [`Expr::weight`] (the rules cut from it counted as one).
    pub weights: Vec<u64>,
}

impl Split {
    /// The rules to compile with the root (see [`EAGER_RULE_WEIGHT`], [`EAGER_TOTAL_WEIGHT`]).
    pub(crate) fn eager(&self) -> Vec<u32> {
        let total = self.weights.iter().fold(0u64, |a, &w| a.saturating_add(w));
        (1..self.rules.len() as u32)
            .filter(|&r| {
                total >= EAGER_TOTAL_WEIGHT || self.weights[r as usize] >= EAGER_RULE_WEIGHT
            })
            .collect()
    }
}

/// What the cutting needs to know of a sub-expression.
#[derive(Clone, Copy)]
struct Info {
    /// [`Expr::weight`], with the rules cut below counted as one.
    weight: u64,
    /// Some string is surely in the language (`false` when not known).
    inhabited: bool,
    /// Holds a jump whose shared tail is outside it.
    free_jump: bool,
    /// Holds an [`Expr::Witness`] of a member set outside it (its marker acts on that set's
    /// frame, which a rule call would hide).
    free_witness: bool,
    /// Holds a recursive expression or call, a nesting guard, a stack bound or a look-around.
    pinned: bool,
    /// Holds an [`Expr::Inline`] mark not inside a rule: not cut unless marked [`Expr::Cut`].
    inline: bool,
}

impl Info {
    fn leaf(weight: u64, inhabited: bool) -> Info {
        Info {
            weight,
            inhabited,
            free_jump: false,
            free_witness: false,
            pinned: false,
            inline: false,
        }
    }

    fn pinned(weight: u64, inhabited: bool) -> Info {
        Info {
            pinned: true,
            ..Info::leaf(weight, inhabited)
        }
    }

    /// The info of a node made of `parts` (all required for `inhabited` when `all`, one
    /// otherwise).
    fn of(parts: &[Info], all: bool) -> Info {
        let mut out = Info::leaf(1, all);
        for p in parts {
            out.weight = out.weight.saturating_add(p.weight);
            out.inhabited = if all {
                out.inhabited && p.inhabited
            } else {
                out.inhabited || p.inhabited
            };
            out.free_jump |= p.free_jump;
            out.free_witness |= p.free_witness;
            out.pinned |= p.pinned;
            out.inline |= p.inline;
        }
        out
    }
}

/// Where a node is.
#[derive(Clone, Copy)]
struct Ctx {
    /// Inside a counted repetition's body, or not cutting at all.
    frozen: bool,
    /// Whether the tail a jump here continues with is surely inhabited.
    jump_inhabited: bool,
    /// Inside an [`Expr::Inline`] mark: only [`Expr::Cut`] marks are cut.
    inline: bool,
}

struct Cutter {
    rules: Vec<Expr>,
    weights: Vec<u64>,
    min_weight: u64,
    /// The rules cut so far by [`Expr::structure_hash`].
    by_hash: rustc_hash::FxHashMap<u64, Vec<u32>>,
}

/// Cut `root` into rules (see the module docs); `Split { rules: vec![root] }` when nothing is
/// worth cutting or the expression may not be cut.
pub(crate) fn split(mut root: Expr) -> Split {
    let mut c = Cutter {
        rules: vec![Expr::empty()],
        weights: vec![0],
        min_weight: min_weight(),
        by_hash: Default::default(),
    };
    // (tests that cut below the default size cut small expressions too)
    let heavy = c.min_weight < MIN_RULE_WEIGHT || root.weight() >= MIN_SPLIT_WEIGHT;
    if heavy && cuttable(&root) && c.min_weight < u64::MAX {
        let ctx = Ctx {
            frozen: false,
            jump_inhabited: false,
            inline: false,
        };
        c.weights[0] = c.children(&mut root, ctx).weight;
    }
    c.rules[0] = root;
    Split {
        rules: c.rules,
        weights: c.weights,
    }
}

/// Whether sub-expressions of `x` may be cut at all: not when it holds a stack bound.
fn cuttable(x: &Expr) -> bool {
    match x {
        Expr::StackBelow(_) => false,
        Expr::Hir(_)
        | Expr::Jump
        | Expr::NamesExcluded(_)
        | Expr::CharDfa(_)
        | Expr::Part(_)
        | Expr::Recur(_)
        | Expr::Goto(_)
        | Expr::DepthBelow(_)
        | Expr::Witness(_)
        | Expr::Rule(_) => true,
        // a grammar's definitions are called through the stack from anywhere in them
        Expr::Knot { .. } => false,
        Expr::Concat(xs) | Expr::Alt(xs) => xs.iter().all(cuttable),
        Expr::Repeat { sub, .. } => cuttable(sub),
        Expr::List { item, sep } => cuttable(item) && cuttable(sep),
        Expr::Members {
            items,
            sep,
            tail,
            witness,
            ..
        } => {
            items.iter().all(|(x, _)| cuttable(x))
                && cuttable(sep)
                && tail.as_deref().is_none_or(cuttable)
                && witness.iter().all(|(_, w)| cuttable(w))
        }
        Expr::WithTail { body, tail } => cuttable(body) && cuttable(tail),
        Expr::Recursive { body, .. } | Expr::Cut(body) | Expr::Inline(body) => cuttable(body),
    }
}

/// Whether some string is surely in the language of `x` (`false` when not known).
pub(crate) fn inhabited(x: &Expr) -> bool {
    let mut c = Cutter {
        rules: Vec::new(),
        weights: Vec::new(),
        min_weight: u64::MAX,
        by_hash: Default::default(),
    };
    let mut x = x.clone();
    c.visit(
        &mut x,
        Ctx {
            frozen: true,
            jump_inhabited: false,
            inline: false,
        },
    )
    .inhabited
}

impl Cutter {
    /// Visits `x`'s children (cutting where worth it), then returns `x`'s info; `x` itself is
    /// replaced by a rule leaf when it qualifies.
    fn visit(&mut self, x: &mut Expr, ctx: Ctx) -> Info {
        if let Expr::Cut(body) = x {
            // a front end's mark: cut whatever the weight (where parts are cut at all), also
            // inside an `Inline` mark; what it holds is cut as anywhere else
            *x = std::mem::replace(&mut **body, Expr::empty());
            let inner = Ctx {
                inline: false,
                ..ctx
            };
            let info = self.children(x, inner);
            let least = if self.min_weight < u64::MAX {
                0
            } else {
                u64::MAX
            };
            return self.cut_from(
                x,
                Info {
                    inline: false,
                    ..info
                },
                inner,
                least,
            );
        }
        let info = self.children(x, ctx);
        self.cut(x, info, ctx)
    }

    /// `x`, whose children were visited (its info `info`), replaced by a rule leaf when it
    /// qualifies; returns its info as its parent sees it.
    fn cut(&mut self, x: &mut Expr, info: Info, ctx: Ctx) -> Info {
        self.cut_from(x, info, ctx, self.min_weight)
    }

    /// [`Cutter::cut`] of a part that qualifies from weight `least` on.
    fn cut_from(&mut self, x: &mut Expr, info: Info, ctx: Ctx, least: u64) -> Info {
        if !ctx.frozen
            && !ctx.inline
            && !info.inline
            && !info.free_jump
            && !info.free_witness
            && !info.pinned
            && info.inhabited
            && info.weight >= least
        {
            // a rule built the same way as one cut before is that rule (a `$ref` target or a
            // format used in several places is compiled once)
            let h = x.structure_hash();
            let same = self.by_hash.get(&h).and_then(|ids| {
                ids.iter()
                    .copied()
                    .find(|&id| self.rules[id as usize].same_as(x))
            });
            let id = match same {
                Some(id) => id,
                None => {
                    let id = self.rules.len() as u32;
                    self.by_hash.entry(h).or_default().push(id);
                    self.rules.push(Expr::empty());
                    self.weights.push(info.weight);
                    id
                }
            };
            let body = std::mem::replace(x, Expr::Rule(id));
            if same.is_none() {
                self.rules[id as usize] = body;
            }
            return Info::leaf(1, true);
        }
        info
    }

    /// The children of `x`, an [`Expr::Hir`] whose weights are `w`, visited. A large plain
    /// concatenation or alternation (an object member with its key, a format) is opened into
    /// expression nodes, so that its large parts can be cut and its small ones (a key) stay
    /// where they decide the way on; the weights of its parts were computed with its own, once
    /// (weighing each opened level again would be quadratic in the nesting).
    fn hir(&mut self, x: &mut Expr, w: Weights, ctx: Ctx) -> Info {
        let Expr::Hir(h) = x else {
            unreachable!("called on plain leaves")
        };
        // in tests, every weight computed in one pass is checked against weighing the part
        #[cfg(test)]
        assert_eq!(
            w.w,
            hir::weight(h),
            "the weight of a part computed with its parent"
        );
        let Some(kids) = w.kids else {
            let p = h.properties();
            return Info {
                pinned: !p.look_set().is_empty(),
                ..Info::leaf(w.w, p.minimum_len().is_some())
            };
        };
        let Expr::Hir(h) = std::mem::replace(x, Expr::empty()) else {
            unreachable!("matched above")
        };
        let (concat, subs) = open(h);
        let mut parts = Vec::with_capacity(subs.len());
        let mut exprs = Vec::with_capacity(subs.len());
        for (sub, kw) in subs.into_iter().zip(kids) {
            let mut e = Expr::Hir(sub);
            let info = self.hir(&mut e, kw, ctx);
            parts.push(self.cut(&mut e, info, ctx));
            exprs.push(e);
        }
        *x = if concat {
            Expr::Concat(exprs)
        } else {
            Expr::Alt(exprs)
        };
        Info::of(&parts, concat)
    }

    /// Visits `x`'s children (cutting where worth it) and returns `x`'s info.
    fn children(&mut self, x: &mut Expr, ctx: Ctx) -> Info {
        match x {
            Expr::Hir(h) if !ctx.frozen && self.min_weight < u64::MAX => {
                let w = Weights::of(h, self.min_weight);
                self.hir(x, w, ctx)
            }
            Expr::Hir(h) => {
                let p = h.properties();
                Info {
                    pinned: !p.look_set().is_empty(),
                    ..Info::leaf(hir::weight(h), p.minimum_len().is_some())
                }
            }
            Expr::Concat(xs) => {
                let parts: Vec<Info> = xs.iter_mut().map(|x| self.visit(x, ctx)).collect();
                Info::of(&parts, true)
            }
            Expr::Alt(xs) => {
                let parts: Vec<Info> = xs.iter_mut().map(|x| self.visit(x, ctx)).collect();
                Info::of(&parts, false)
            }
            Expr::Repeat { sub, min, max } => {
                let (min, max) = (*min, *max);
                let counted = expr::counts(sub, min, max);
                let inner = Ctx {
                    frozen: ctx.frozen || counted,
                    ..ctx
                };
                let s = self.visit(sub, inner);
                let weight = if counted {
                    s.weight.saturating_add(hir::COUNTER_WEIGHT)
                } else {
                    let k = u64::from(max.unwrap_or(min).max(1));
                    k.saturating_mul(s.weight).saturating_add(1)
                };
                Info {
                    weight,
                    inhabited: min == 0 || s.inhabited,
                    ..s
                }
            }
            Expr::List { item, sep } => {
                let i = self.visit(item, ctx);
                let s = self.visit(sep, ctx);
                Info {
                    inhabited: i.inhabited,
                    ..Info::of(&[i, s], true)
                }
            }
            Expr::Members {
                items,
                sep,
                tail,
                size,
                bounds,
                witness,
                needs_witness,
                ..
            } => {
                let mut parts = Vec::with_capacity(items.len() + 2);
                let mut inhabited = true;
                // members surely writable, and how many must be
                let (mut can, mut must) = (0u64, 0u64);
                for (x, required) in items.iter_mut() {
                    let i = self.visit(x, ctx);
                    inhabited &= !*required || i.inhabited;
                    can += u64::from(i.inhabited);
                    must += u64::from(*required);
                    parts.push(i);
                }
                let s = self.visit(sep, ctx);
                inhabited &= s.inhabited;
                parts.push(s);
                if let Some(t) = tail {
                    let i = self.visit(t, ctx);
                    if i.inhabited {
                        can = u64::MAX;
                    }
                    parts.push(i);
                }
                if *needs_witness != 0 {
                    // surely inhabited when the witness members cover every kind, with at most
                    // one item's branch
                    let mut cover = 0u32;
                    for (mask, w) in witness.iter_mut() {
                        let i = self.visit(w, ctx);
                        if i.inhabited {
                            cover |= *mask;
                        }
                        parts.push(i);
                    }
                    let all = *needs_witness;
                    let mut ok = cover & all == all;
                    for (x, _) in items.iter() {
                        let mut masks = Vec::new();
                        witness_branches(x, &mut masks);
                        ok |= masks.iter().any(|m| (cover | m) & all == all);
                    }
                    inhabited &= ok;
                }
                if let Some((min, max)) = *bounds {
                    inhabited &= can >= u64::from(min)
                        && max
                            .is_none_or(|m| must <= u64::from(m) && u64::from(min) <= u64::from(m));
                }
                let info = Info {
                    inhabited,
                    ..Info::of(&parts, true)
                };
                // what is left of it (the rules cut from it count as one)
                size.0 = info.weight;
                // its items' witness markers act on its own frame
                Info {
                    free_witness: false,
                    ..info
                }
            }
            Expr::WithTail { body, tail } => {
                let t = self.visit(tail, ctx);
                let b = self.visit(
                    body,
                    Ctx {
                        jump_inhabited: t.inhabited,
                        ..ctx
                    },
                );
                // the body's jumps end here; the tail's continue outward
                Info {
                    weight: 1u64.saturating_add(b.weight).saturating_add(t.weight),
                    inhabited: b.inhabited,
                    free_jump: t.free_jump,
                    free_witness: b.free_witness || t.free_witness,
                    pinned: b.pinned || t.pinned,
                    inline: b.inline || t.inline,
                }
            }
            Expr::Jump => Info {
                free_jump: true,
                ..Info::leaf(1, ctx.jump_inhabited)
            },
            Expr::NamesExcluded(n) => Info::leaf(n.weight, true),
            Expr::CharDfa(d) => Info::leaf(d.weight, char_dfa_inhabited(d)),
            Expr::Part(p) => Info::leaf(p.weight(), p.inhabited()),
            Expr::Recursive { .. } | Expr::Knot { .. } => Info::pinned(x.weight(), false),
            Expr::Recur(_) | Expr::Goto(_) | Expr::DepthBelow(_) | Expr::StackBelow(_) => {
                Info::pinned(1, false)
            }
            Expr::Rule(_) => Info::leaf(1, true),
            // (reached only as the root: `visit` opens a mark)
            Expr::Cut(body) => self.children(body, ctx),
            Expr::Inline(body) => {
                let inner = Ctx {
                    inline: true,
                    ..ctx
                };
                Info {
                    inline: true,
                    ..self.children(body, inner)
                }
            }
            Expr::Witness(_) => Info {
                free_witness: true,
                ..Info::leaf(1, true)
            },
        }
    }
}

/// The weight of a plain expression ([`hir::weight`]) and, where it is at least the weight
/// from which parts are cut and it is a concatenation or an alternation (inside capture
/// groups), those of its parts, computed in one pass.
struct Weights {
    w: u64,
    kids: Option<Vec<Weights>>,
}

impl Weights {
    fn of(h: &regex_syntax::hir::Hir, min: u64) -> Weights {
        use regex_syntax::hir::HirKind;
        match h.kind() {
            HirKind::Capture(c) => Weights::of(&c.sub, min),
            HirKind::Concat(xs) | HirKind::Alternation(xs) => {
                let kids: Vec<Weights> = xs.iter().map(|x| Weights::of(x, min)).collect();
                let w = kids.iter().fold(1u64, |a, k| a.saturating_add(k.w));
                Weights {
                    w,
                    kids: (w >= min).then_some(kids),
                }
            }
            _ => Weights {
                w: hir::weight(h),
                kids: None,
            },
        }
    }
}

/// The parts of a concatenation (`true`) or an alternation (inside capture groups).
fn open(h: regex_syntax::hir::Hir) -> (bool, Vec<regex_syntax::hir::Hir>) {
    use regex_syntax::hir::HirKind;
    match h.into_kind() {
        HirKind::Concat(xs) => (true, xs),
        HirKind::Alternation(xs) => (false, xs),
        HirKind::Capture(c) => open(*c.sub),
        _ => unreachable!("opened only where Weights kept the parts"),
    }
}

/// Whether a character DFA accepts some string (an accepting state is reachable).
fn char_dfa_inhabited(d: &expr::CharStates) -> bool {
    let n = d.states.len();
    if d.start >= n {
        return false;
    }
    let mut seen = vec![false; n];
    let mut stack = vec![d.start];
    seen[d.start] = true;
    while let Some(s) = stack.pop() {
        let st = &d.states[s];
        if st.accept {
            return true;
        }
        let nexts = st.ascii.iter().map(|&(_, _, t)| t).chain(st.rest);
        let nexts = nexts.chain(st.wide.iter().map(|&(_, _, t)| t));
        for t in nexts {
            if t < n && !seen[t] {
                seen[t] = true;
                stack.push(t);
            }
        }
    }
    false
}

#[cfg(test)]
thread_local! {
    static MIN_WEIGHT: std::cell::Cell<u64> = const { std::cell::Cell::new(MIN_RULE_WEIGHT) };
}

/// The weight from which a sub-expression is cut ([`MIN_RULE_WEIGHT`], except inside
/// [`with_flat`] and [`with_min_weight`]); `u64::MAX`: nothing is cut.
fn min_weight() -> u64 {
    #[cfg(test)]
    return MIN_WEIGHT.with(std::cell::Cell::get);
    #[cfg(not(test))]
    MIN_RULE_WEIGHT
}

/// Runs `f` with sub-expressions cut from `w` on (1: every part that may be cut is); applies
/// to automata built on this thread during `f`.
#[cfg(test)]
pub(crate) fn with_min_weight<T>(w: u64, f: impl FnOnce() -> T) -> T {
    crate::budget::with_setting(&MIN_WEIGHT, w, f)
}

/// Runs `f` with no expression cut into rules (one NFA built whole, as before rules): the
/// differential tests' oracle. Applies to automata built on this thread during `f`.
#[cfg(test)]
pub(crate) fn with_flat<T>(f: impl FnOnce() -> T) -> T {
    with_min_weight(u64::MAX, f)
}

/// The masks of the witness branches of an item of a member set (see [`Expr::Witness`]).
fn witness_branches(x: &Expr, out: &mut Vec<u32>) {
    match x {
        Expr::Witness(m) if *m != 0 => out.push(*m),
        Expr::Concat(xs) => {
            if let Some(first) = xs.first() {
                witness_branches(first, out);
            }
        }
        Expr::Alt(xs) => xs.iter().for_each(|x| witness_branches(x, out)),
        _ => {}
    }
}

//! The rules of a split automaton ([`RuleSet`]): each compiled when first entered or, ahead of
//! that, by the background builder (one thread per process), and handed to the automaton once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, Weak};

use super::graph::Segment;
use crate::automata::expr::Expr;
use crate::error::{Error, Result};

/// Where a rule's compilation stands (see [`RuleSet`]).
pub(super) enum Slot {
    Todo,
    /// By the background builder of this process id (a process forked meanwhile has none).
    Building(u32),
    Done(Box<Result<Segment>>),
    Taken,
}

/// The rules of a split automaton (see [`crate::automata::rules`]), compiled when first entered or,
/// before that, by the background builder ([`RuleSet::prebuild`]); shared between the
/// automaton and that builder.
pub(crate) struct RuleSet {
    pub(super) exprs: Vec<Expr>,
    /// The rules in the order the background builder takes them: breadth first from the root,
    /// each rule's calls in the order they occur (what an output is likely to enter first).
    order: Vec<u32>,
    slots: Mutex<Vec<Slot>>,
    ready: Condvar,
    max_nfa_bytes: usize,
    /// Whether rules are compiled on a big stack of their own (see
    /// [`super::LazyDfa::build_rules_on_big_stack`]): on whatever thread enters them first.
    big_stack: AtomicBool,
}

impl RuleSet {
    pub(super) fn new(exprs: Vec<Expr>, root: &Expr, max_nfa_bytes: usize) -> RuleSet {
        let slots = exprs.iter().map(|_| Slot::Todo).collect();
        let mut seen = vec![false; exprs.len()];
        let mut order = Vec::with_capacity(exprs.len());
        let mut calls = Vec::new();
        root.rules_called(&mut calls);
        let mut at = 0;
        loop {
            for &r in &calls {
                if let Some(s) = seen.get_mut(r as usize) {
                    if !*s {
                        *s = true;
                        order.push(r);
                    }
                }
            }
            calls.clear();
            let Some(&r) = order.get(at) else { break };
            exprs[r as usize].rules_called(&mut calls);
            at += 1;
        }
        RuleSet {
            order,
            exprs,
            slots: Mutex::new(slots),
            ready: Condvar::new(),
            big_stack: AtomicBool::new(false),
            max_nfa_bytes,
        }
    }

    pub(super) fn set_big_stack(&self) {
        self.big_stack.store(true, Ordering::Relaxed);
    }

    /// Rule `r` compiled into a segment, on a big stack when the set asks for one.
    fn build(&self, r: usize) -> Result<Segment> {
        let build = || Segment::build(&self.exprs[r], self.max_nfa_bytes);
        if self.big_stack.load(Ordering::Relaxed) {
            crate::budget::stack::on_big_stack(crate::budget::stack::BIG_STACK, build)
        } else {
            build()
        }
    }

    pub(super) fn slots(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rule `r` compiled, for the automaton to append: built here unless the background
    /// builder has it (then waited for). Each rule is taken once.
    pub(super) fn take(&self, r: usize) -> Result<Segment> {
        let mut slots = self.slots();
        loop {
            match std::mem::replace(&mut slots[r], Slot::Taken) {
                Slot::Done(seg) => return *seg,
                Slot::Building(pid) if pid == std::process::id() => {
                    slots[r] = Slot::Building(pid);
                    slots = self.ready.wait(slots).unwrap_or_else(|e| e.into_inner());
                }
                // not started, or started by a builder this (forked) process does not have
                Slot::Todo | Slot::Building(_) => {
                    drop(slots);
                    return self.build(r);
                }
                Slot::Taken => {
                    return Err(Error::InvalidArgument(format!(
                        "internal: rule {r} was taken twice"
                    )))
                }
            }
        }
    }

    /// Compile rule `r` ahead of its first entry, unless it is compiled or being compiled.
    fn prebuild(&self, r: usize) {
        {
            let mut slots = self.slots();
            if !matches!(slots[r], Slot::Todo) {
                return;
            }
            slots[r] = Slot::Building(std::process::id());
        }
        // a panic (a bug) is handed to the mask that enters the rule, as an internal error
        let built = crate::error::catch_panic(|| self.build(r))
            .and_then(|built| built)
            .map_err(|e| match e {
                Error::Internal(m) => Error::Internal(format!("compiling rule {r}: {m}")),
                other => other,
            });
        self.slots()[r] = Slot::Done(Box::new(built));
        self.ready.notify_all();
    }
}

/// The background builder: one thread per process compiling the rules of new automata, parents
/// before the rules they call, while the automaton serves masks (see
/// [`super::LazyDfa::build_rules_in_background`]). It runs at the lowest scheduling priority:
/// its work is ahead of need, and on a busy server the cores belong to the forward passes,
/// the compiles requests wait for and the masks (a rule it has not reached is built when a
/// mask enters it, as without it).
pub(super) fn background() -> Option<std::sync::mpsc::Sender<Weak<RuleSet>>> {
    type Builder = Option<(u32, std::sync::mpsc::Sender<Weak<RuleSet>>)>;
    static BUILDER: Mutex<Builder> = Mutex::new(None);
    if std::env::var("TOKENSIEVE_BACKGROUND_RULES").is_ok_and(|v| v == "0") {
        return None;
    }
    let mut b = BUILDER.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    match &*b {
        // a forked process does not have its parent's thread: it starts its own
        Some((p, tx)) if *p == pid => Some(tx.clone()),
        _ => {
            let (tx, rx) = std::sync::mpsc::channel::<Weak<RuleSet>>();
            std::thread::Builder::new()
                .name("tokensieve-rules".into())
                .spawn(move || {
                    // its work is ahead of need: the last the OS runs when the cores are busy
                    crate::budget::priority::set_batch();
                    if let Some(me) = crate::budget::priority::current_thread() {
                        crate::budget::priority::set_nice(me, 19);
                    }
                    for job in rx {
                        let n = job.upgrade().map_or(0, |s| s.order.len());
                        for k in 0..n {
                            // stop as soon as the automaton is dropped
                            let Some(set) = job.upgrade() else { break };
                            set.prebuild(set.order[k] as usize);
                        }
                    }
                })
                .ok()?;
            *b = Some((pid, tx.clone()));
            Some(tx)
        }
    }
}

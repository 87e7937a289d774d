//! The threads that run `Grammar.compile_pending`'s compiles: a few lanes, first come first
//! served, and a slow lane.
//!
//! A burst of new constraints (a server's cold start, a client sending many schemas at once)
//! used to start one thread per compile. On a machine with few cores they then all share the
//! cores and all finish late together, the threads past the few kept idle start with the
//! compiler's per-thread caches empty (2-3 times slower), and the process's other threads (a
//! server's event loop) get a small share of the cores while they run. Here at most
//! [`lanes`] compiles run at once, in the order they were asked for, so the first ones finish
//! early and the rest wait without taking the cores. A compile that has run for
//! [`SLOW_AFTER`] leaves its lane (it goes on, on the slow lane, which has no bound), so one
//! slow or hostile constraint (each is bounded by its own compile deadline) never holds up the
//! others for longer than that. On Linux a compile still running after [`LOWER_AFTER`] (a
//! hostile or very large constraint, not a large one on busy cores) also drops its thread to a
//! low scheduling priority ([`SLOW_NICE`]): while the cores are busy (a server's forward
//! passes, the other compiles), it gets what they leave, so it delays its own request, not
//! everyone else's. A thread so lowered ends with its compile (a thread cannot raise its
//! priority back without privileges), and the threads after it are started at the priority of
//! the pool. On Linux the compile threads run under the batch scheduling policy
//! ([`priority::set_batch`]): a thread handed a job waits for a core instead of preempting the
//! thread that handed it over, which in a server holds the GIL (vLLM's event loop, renderer or
//! scheduler thread) and would otherwise stop, GIL held, for the length of the compile.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{mpsc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tokensieve_core::budget::priority;

pub(crate) type CompileJob = Box<dyn FnOnce() + Send>;

/// How long a compile holds its lane before it moves to the slow lane.
pub(crate) const SLOW_AFTER: Duration = Duration::from_millis(10);

/// How long a compile runs before its thread's priority is lowered (Linux; see [`SLOW_NICE`]).
/// The largest compiles of real schemas take a few milliseconds alone and a few tens on cores
/// busy with a server's forward passes; those keep their priority.
const LOWER_AFTER: Duration = Duration::from_millis(100);

/// The nice value a compile's thread gets once the compile has run for [`LOWER_AFTER`]: it
/// then gets about a tenth of the share of a thread at the default priority while both want a
/// core, and a core to itself when one is idle.
const SLOW_NICE: i32 = 10;

/// At most this many idle compile threads are kept (a kept thread's per-thread caches stay
/// warm; starting a thread costs about 0.2 ms).
const MAX_IDLE: usize = 8;

/// The environment variable that sets the number of lanes.
pub(crate) const LANES_VAR: &str = "TOKENSIEVE_COMPILE_THREADS";

/// How many compiles run at once before a slow one leaves its lane: `TOKENSIEVE_COMPILE_THREADS`
/// when it is a positive integer, else one less than the cores this process may use (at least
/// one): the thread that asked for the compiles (a server's event loop, an engine's scheduler)
/// keeps a core.
pub(crate) fn lanes() -> usize {
    static LANES: OnceLock<usize> = OnceLock::new();
    *LANES.get_or_init(|| {
        std::env::var(LANES_VAR)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                cores.saturating_sub(1).max(1)
            })
    })
}

/// Running compiles by ticket: when each started and, once its worker has taken it, the
/// worker's thread id (to lower its priority).
type Running = HashMap<u64, (Instant, Option<i32>)>;

/// A job handed to a worker, with the ticket that stands for its lane.
type Handed = (CompileJob, u64);

#[derive(Default)]
struct State {
    /// Compiles waiting for a lane, oldest first.
    queue: VecDeque<CompileJob>,
    /// The running compiles that hold a lane.
    lanes: Running,
    /// The compiles moved to the slow lane whose thread's priority is not lowered yet.
    slow: Running,
    /// Workers whose compile ran past [`LOWER_AFTER`] and whose priority was lowered: each ends
    /// when its compile does.
    lowered: HashSet<i32>,
    next_ticket: u64,
    /// Idle workers, the most recently idle last (its caches are the warmest).
    idle: Vec<mpsc::Sender<Handed>>,
    keeper: bool,
    /// The most compiles that held lanes at once, and how many moved to the slow lane, since the
    /// process started.
    most_in_lanes: usize,
    moved_to_slow: u64,
    /// Compiles handed to the pool since the process started.
    submitted: u64,
}

/// What the pool is doing now (`tokensieve._core.compile_pool_stats`).
pub(crate) struct Stats {
    pub lanes: usize,
    pub in_lanes: usize,
    pub waiting: usize,
    pub most_in_lanes: usize,
    pub moved_to_slow: u64,
    pub submitted: u64,
}

pub(crate) fn stats() -> Stats {
    let st = lock(pool());
    Stats {
        lanes: lanes(),
        in_lanes: st.lanes.len(),
        waiting: st.queue.len(),
        most_in_lanes: st.most_in_lanes,
        moved_to_slow: st.moved_to_slow,
        submitted: st.submitted,
    }
}

struct Pool {
    state: Mutex<State>,
    /// Wakes the keeper: a compile took a lane.
    waiting: Condvar,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: Mutex::new(State::default()),
        waiting: Condvar::new(),
    })
}

fn lock(p: &Pool) -> MutexGuard<'_, State> {
    p.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Queue `job`; it runs on a compile thread when a lane is free.
pub(crate) fn submit(job: CompileJob) {
    let p = pool();
    let mut st = lock(p);
    st.submitted += 1;
    st.queue.push_back(job);
    pump(&mut st);
    if !st.keeper {
        st.keeper = start_keeper();
    }
    p.waiting.notify_one();
}

/// Start waiting compiles while lanes are free. With the pool's lock held.
fn pump(st: &mut State) {
    while st.lanes.len() < lanes() {
        let Some(job) = st.queue.pop_front() else {
            return;
        };
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.lanes.insert(ticket, (Instant::now(), None));
        st.most_in_lanes = st.most_in_lanes.max(st.lanes.len());
        let mut handed = (job, ticket);
        loop {
            match st.idle.pop() {
                Some(tx) => match tx.send(handed) {
                    Ok(()) => break,
                    Err(mpsc::SendError(h)) => handed = h, // that worker ended: another one
                },
                None => {
                    if let Err(h) = start_worker(handed) {
                        // no thread could be started: the job is dropped, and its waiters get
                        // the error of a compile thread gone
                        st.lanes.remove(&h.1);
                        drop(h);
                    }
                    break;
                }
            }
        }
    }
}

/// A new worker thread running `first`, then whatever it is handed while idle.
fn start_worker(first: Handed) -> Result<(), Handed> {
    let (tx, rx) = mpsc::channel::<Handed>();
    let own = tx.clone();
    let first = std::sync::Arc::new(Mutex::new(Some(first)));
    let taken = first.clone();
    let spawned = std::thread::Builder::new()
        .name("tokensieve-compile".into())
        .spawn(move || {
            let me = priority::current_thread();
            // handed a job, it waits for the core rather than taking it from the thread that
            // handed it over (which may hold the GIL: the event loop, vLLM's scheduler)
            priority::set_batch();
            let mut next = taken.lock().unwrap_or_else(|e| e.into_inner()).take();
            while let Some((job, ticket)) = next {
                {
                    let mut st = lock(pool());
                    let st = &mut *st;
                    if let Some(lane) = st.lanes.get_mut(&ticket).or(st.slow.get_mut(&ticket)) {
                        lane.1 = me;
                    }
                }
                job();
                let p = pool();
                let mut st = lock(p);
                st.lanes.remove(&ticket);
                st.slow.remove(&ticket);
                if me.is_some_and(|t| st.lowered.remove(&t)) {
                    // its priority was lowered: it ends (the keeper starts what waits)
                    return;
                }
                if st.idle.len() >= MAX_IDLE && st.queue.is_empty() {
                    return;
                }
                st.idle.push(own.clone());
                pump(&mut st);
                drop(st);
                next = rx.recv().ok();
            }
        });
    match spawned {
        Ok(_) => {
            drop(tx);
            Ok(())
        }
        Err(_) => Err(first
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("the job of a thread that never started")),
    }
}

/// The keeper: while compiles run, it moves each compile that has held its lane for
/// [`SLOW_AFTER`] to the slow lane and starts a waiting one in its place, and lowers the
/// priority of each that has run for [`LOWER_AFTER`]. Returns whether it started.
fn start_keeper() -> bool {
    std::thread::Builder::new()
        .name("tokensieve-compile-keeper".into())
        .spawn(|| {
            let p = pool();
            let mut st = lock(p);
            loop {
                if st.lanes.is_empty() && st.slow.is_empty() {
                    st = p.waiting.wait(st).unwrap_or_else(|e| e.into_inner());
                    continue;
                }
                let now = Instant::now();
                let past = |m: &Running, d: Duration| {
                    m.iter()
                        .filter(|&(_, &(t, _))| now.duration_since(t) >= d)
                        .map(|(&k, _)| k)
                        .collect::<Vec<u64>>()
                };
                for k in past(&st.lanes, SLOW_AFTER) {
                    if let Some(lane) = st.lanes.remove(&k) {
                        st.slow.insert(k, lane);
                    }
                    st.moved_to_slow += 1;
                }
                for k in past(&st.slow, LOWER_AFTER) {
                    if let Some((_, Some(tid))) = st.slow.remove(&k) {
                        if priority::set_nice(tid, SLOW_NICE) {
                            st.lowered.insert(tid);
                        }
                    }
                }
                pump(&mut st);
                let next = |m: &Running, d: Duration| {
                    m.values()
                        .map(|l| d.saturating_sub(now.duration_since(l.0)))
                        .min()
                };
                let wait = match (next(&st.lanes, SLOW_AFTER), next(&st.slow, LOWER_AFTER)) {
                    (Some(a), Some(b)) => a.min(b),
                    (a, b) => a.or(b).unwrap_or(SLOW_AFTER),
                };
                st = p
                    .waiting
                    .wait_timeout(st, wait.max(Duration::from_millis(1)))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        })
        .is_ok()
}

//! The compile deadline: one wall-clock limit per compile (`max_compile_seconds`), checked inside
//! the long loops of every stage — the schema walk, `const`/`enum` members, the NFA builder,
//! determinization and mask computation — so that no input holds the caller past it.
//!
//! A compile runs its stages under [`scope`], which holds the deadline for the current thread;
//! a stage that moves to another thread carries it with [`current`]. Outside a compile (a
//! matcher computing a mask during decoding) nothing is checked.
//!
//! A deadline made by [`Deadline::cpu_after`] counts the CPU time of the thread that made it
//! instead (with a wall-clock cap): a first try at a compile on a caller's thread that should
//! stop after a little work, not after a little time on cores busy with other work.

pub mod priority;
pub mod stack;

use std::cell::Cell;
use std::thread::{LocalKey, ThreadId};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A point in time a compile must finish by, and the limit it came from (for messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    /// Wall-clock: the deadline passes here; CPU time: the clock is looked at from here on.
    at: Instant,
    limit: Duration,
    cpu: Option<CpuTime>,
}

/// The CPU-time part of a deadline from [`Deadline::cpu_after`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CpuTime {
    /// The thread whose CPU time counts (on any other thread the deadline passes at `at`).
    thread: ThreadId,
    /// That thread's CPU time at which the deadline passes.
    until: Duration,
    /// The wall-clock point at which it passes whatever the CPU time.
    cap: Instant,
}

impl Deadline {
    /// `limit` from now (a limit too large to represent never passes).
    pub fn after(limit: Duration) -> Deadline {
        let now = Instant::now();
        Deadline {
            at: later(now, limit),
            limit,
            cpu: None,
        }
    }

    /// Once this thread has run for `limit` of CPU time from now, or at `cap` of wall-clock
    /// time from now, whichever comes first: time the thread spends waiting for a core does
    /// not count. Checked on another thread, or where the platform has no per-thread CPU
    /// clock, it is [`Deadline::after`]`(limit)`.
    pub fn cpu_after(limit: Duration, cap: Duration) -> Deadline {
        let wall = Deadline::after(limit);
        let Some(used) = thread_cpu_time() else {
            return wall;
        };
        let now = Instant::now();
        Deadline {
            cpu: Some(CpuTime {
                thread: std::thread::current().id(),
                until: used.saturating_add(limit),
                cap: later(now, cap.max(limit)),
            }),
            ..wall
        }
    }

    /// Whether the deadline has passed (for a CPU-time deadline, on the thread that made it,
    /// by that thread's CPU time).
    pub fn passed(&self) -> bool {
        self.next_look().is_none()
    }

    /// `Err(Error::Budget)` naming `stage` once the deadline has passed.
    pub fn check(&self, stage: &str) -> Result<()> {
        if self.passed() {
            return Err(self.error(stage));
        }
        Ok(())
    }

    /// One deadline that passes when `self` or `other` passes: the earlier of two wall-clock
    /// deadlines; a CPU-time deadline that can pass before a wall-clock one takes that one's
    /// point as its cap (its clock may let it run past its own `at`, never past the other's).
    fn either(self, other: Deadline) -> Deadline {
        let capped = |c: Deadline, w: Deadline| match c.cpu {
            Some(t) if w.cpu.is_none() && c.at < w.at => Some(Deadline {
                cpu: Some(CpuTime {
                    cap: t.cap.min(w.at),
                    ..t
                }),
                ..c
            }),
            _ => None,
        };
        capped(self, other)
            .or_else(|| capped(other, self))
            .unwrap_or(if self.at <= other.at { self } else { other })
    }

    /// `None` once passed; otherwise the wall-clock point before which it cannot pass (a
    /// CPU-time deadline's clock need not be read again until then).
    fn next_look(&self) -> Option<Instant> {
        let now = Instant::now();
        if now <= self.at {
            return Some(self.at);
        }
        let c = self.cpu?;
        if now > c.cap || std::thread::current().id() != c.thread {
            return None;
        }
        let left = c.until.checked_sub(thread_cpu_time()?)?;
        (!left.is_zero()).then(|| later(now, left).min(c.cap))
    }

    fn error(&self, stage: &str) -> Error {
        Error::Budget(format!(
            "compiling took longer than max_compile_seconds={} (stopped while {stage}); raise \
             max_compile_seconds or simplify the constraint",
            self.limit.as_secs_f64()
        ))
    }
}

/// `now + d`, or a century on when that cannot be represented.
fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

/// The CPU time the calling thread has run, where the platform has a per-thread clock.
fn thread_cpu_time() -> Option<Duration> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes only the timespec it is given; a clock the system
        // lacks is its return value.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
            return Some(Duration::new(
                u64::try_from(ts.tv_sec).ok()?,
                u32::try_from(ts.tv_nsec).ok()?,
            ));
        }
    }
    None
}

thread_local! {
    static CURRENT: Cell<Option<Deadline>> = const { Cell::new(None) };
}

/// Run `f` with `deadline` in force on this thread (with the one already in force, whichever
/// passes first: [`Deadline::either`]); the previous deadline is restored afterwards, also on
/// unwinding.
pub fn scope<T>(deadline: Option<Deadline>, f: impl FnOnce() -> T) -> T {
    let prev = CURRENT.with(Cell::get);
    let next = match (prev, deadline) {
        (Some(p), Some(d)) => Some(p.either(d)),
        (p, d) => d.or(p),
    };
    with_setting(&CURRENT, next, f)
}

/// Run `f` with the thread-local setting `cell` set to `value`; the previous value is restored
/// afterwards, also on unwinding (a compile may run on a caller's thread that compiles again).
pub(crate) fn with_setting<T: Copy + 'static, R>(
    cell: &'static LocalKey<Cell<T>>,
    value: T,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore<T: Copy + 'static>(&'static LocalKey<Cell<T>>, T);
    impl<T: Copy + 'static> Drop for Restore<T> {
        fn drop(&mut self) {
            self.0.with(|c| c.set(self.1));
        }
    }
    let _restore = Restore(cell, cell.with(|c| c.replace(value)));
    f()
}

/// The deadline in force on this thread, if a compile is running.
pub fn current() -> Option<Deadline> {
    CURRENT.with(Cell::get)
}

/// Check the deadline in force on this thread (nothing to check outside a compile).
pub fn check(stage: &str) -> Result<()> {
    let Some(d) = current() else {
        return Ok(());
    };
    match d.next_look() {
        // a CPU-time deadline not passed yet: its clock is read again only from `at` on
        Some(at) if at != d.at => {
            CURRENT.with(|c| c.set(Some(Deadline { at, ..d })));
            Ok(())
        }
        Some(_) => Ok(()),
        None => Err(d.error(stage)),
    }
}

/// A check every 1,024 calls, for loops whose single step is cheaper than reading the clock.
#[derive(Default)]
pub struct Every(u32);

impl Every {
    pub fn tick(&mut self, stage: &str) -> Result<()> {
        self.0 = self.0.wrapping_add(1);
        if self.0 & 1023 == 0 {
            check(stage)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_nests_keeps_the_earlier_deadline_and_restores() {
        assert_eq!(current(), None);
        let long = Deadline::after(Duration::from_secs(3600));
        let short = Deadline::after(Duration::ZERO);
        scope(Some(long), || {
            assert_eq!(current(), Some(long));
            assert!(check("a").is_ok());
            scope(Some(short), || {
                std::thread::sleep(Duration::from_millis(2));
                let e = check("walking").unwrap_err().to_string();
                assert!(
                    e.contains("max_compile_seconds=0") && e.contains("walking"),
                    "{e}"
                );
            });
            scope(None, || assert_eq!(current(), Some(long)));
            assert_eq!(current(), Some(long));
        });
        assert_eq!(current(), None);
        assert!(check("outside").is_ok());
        assert!(Deadline::after(Duration::MAX).check("x").is_ok());
    }

    /// Spin until this thread has run `d` more of CPU time.
    fn burn(d: Duration) {
        let start = thread_cpu_time().expect("a per-thread CPU clock");
        while thread_cpu_time().unwrap() - start < d {
            std::hint::black_box(0u64);
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_cpu_deadline_counts_this_threads_cpu_time_up_to_its_cap() {
        // waiting (here: asleep) does not count, work does
        let d = Deadline::cpu_after(Duration::from_millis(20), Duration::from_secs(600));
        std::thread::sleep(Duration::from_millis(60));
        assert!(!d.passed());
        assert!(d.check("x").is_ok());
        scope(Some(d), || {
            assert!(check("asleep").is_ok());
            // the next look is put off by the CPU time left, at most
            let at = current().unwrap().at;
            assert!(
                at > d.at && at <= Instant::now() + Duration::from_millis(20),
                "{at:?}"
            );
            burn(Duration::from_millis(25));
            let e = check("working").unwrap_err().to_string();
            assert!(
                e.contains("max_compile_seconds=0.02") && e.contains("working"),
                "{e}"
            );
        });
        assert!(d.passed());

        // the cap is wall-clock
        let capped = Deadline::cpu_after(Duration::from_millis(20), Duration::from_millis(500));
        std::thread::sleep(Duration::from_millis(30));
        assert!(!capped.passed());
        std::thread::sleep(Duration::from_millis(500));
        assert!(capped.passed());
        // a cap below the limit is the limit
        let at_least = Deadline::cpu_after(Duration::from_millis(500), Duration::ZERO);
        std::thread::sleep(Duration::from_millis(20));
        assert!(!at_least.passed());

        // inside a wall-clock deadline it passes by then at the latest; a wall-clock deadline
        // earlier than the CPU-time one's first look is kept as it is
        let cpu = Deadline::cpu_after(Duration::from_millis(20), Duration::from_secs(600));
        let wall = Deadline::after(Duration::from_millis(400));
        scope(Some(cpu), || {
            scope(Some(wall), || {
                std::thread::sleep(Duration::from_millis(40));
                assert!(check("asleep, before the wall-clock deadline").is_ok());
                std::thread::sleep(Duration::from_millis(400));
                assert!(check("asleep, past it").is_err());
            });
        });
        let long = Deadline::cpu_after(Duration::from_secs(10), Duration::from_secs(600));
        let early = Deadline::after(Duration::from_millis(5));
        scope(Some(long), || {
            scope(Some(early), || assert_eq!(current(), Some(early)));
        });

        // on another thread it is a wall-clock deadline
        let here = Deadline::cpu_after(Duration::from_millis(20), Duration::from_secs(600));
        std::thread::sleep(Duration::from_millis(30));
        assert!(!here.passed());
        assert!(std::thread::spawn(move || here.passed()).join().unwrap());
    }
}

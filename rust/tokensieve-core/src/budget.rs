//! The compile deadline: one wall-clock limit per compile (`max_compile_seconds`), checked inside
//! the long loops of every stage — the schema walk, `const`/`enum` members, the NFA builder,
//! determinization and mask computation — so that no input holds the caller past it.
//!
//! A compile runs its stages under [`scope`], which holds the deadline for the current thread;
//! a stage that moves to another thread carries it with [`current`]. Outside a compile (a
//! matcher computing a mask during decoding) nothing is checked.

pub mod priority;
pub mod stack;

use std::cell::Cell;
use std::thread::LocalKey;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A point in time a compile must finish by, and the limit it came from (for messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    at: Instant,
    limit: Duration,
}

impl Deadline {
    /// `limit` from now (a limit too large to represent never passes).
    pub fn after(limit: Duration) -> Deadline {
        let now = Instant::now();
        let at = now
            .checked_add(limit)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400));
        Deadline { at, limit }
    }

    /// `Err(Error::Budget)` naming `stage` once the deadline has passed.
    pub fn check(&self, stage: &str) -> Result<()> {
        if Instant::now() <= self.at {
            return Ok(());
        }
        Err(Error::Budget(format!(
            "compiling took longer than max_compile_seconds={} (stopped while {stage}); raise \
             max_compile_seconds or simplify the constraint",
            self.limit.as_secs_f64()
        )))
    }
}

thread_local! {
    static CURRENT: Cell<Option<Deadline>> = const { Cell::new(None) };
}

/// Run `f` with `deadline` in force on this thread (the earlier one when a deadline already
/// is); the previous deadline is restored afterwards, also on unwinding.
pub fn scope<T>(deadline: Option<Deadline>, f: impl FnOnce() -> T) -> T {
    let prev = CURRENT.with(Cell::get);
    let next = match (prev, deadline) {
        (Some(p), Some(d)) => Some(if p.at <= d.at { p } else { d }),
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
    match current() {
        Some(d) => d.check(stage),
        None => Ok(()),
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
}

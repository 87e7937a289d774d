//! A large stack for the compiles that recurse over client-controlled structure (deep schema
//! walks, grammars), switched to on the calling thread.
//!
//! The region is mapped for the call (its pages are committed only as deep as the walk goes)
//! with an inaccessible guard page below it, so that running past it faults instead of
//! writing over other memory, and unmapped afterwards. Nothing here asks where the thread's
//! own stack ends: finding that out reads `/proc/self/maps` on Linux, about a millisecond in a
//! process with many libraries loaded, paid once per thread by a generic stack-growing helper.

/// The stack of a compile that may recurse deeply: 256 MiB of address space, committed only as
/// deep as the recursion goes.
pub const BIG_STACK: usize = 256 << 20;

/// Run `f` on a stack of its own of at least `size` bytes; a panic inside `f` continues on the
/// caller's stack. Where the region cannot be mapped, the generic helper runs it instead.
#[cfg(unix)]
pub fn on_big_stack<R>(size: usize, f: impl FnOnce() -> R) -> R {
    if ON_BIG.with(std::cell::Cell::get) >= size {
        // already on one at least this large (a compile inside a compile): its room is enough
        // for each of the walks run on it, which do not add up
        return f();
    }
    let Some(region) = Region::map(size) else {
        return stacker::grow(size, f);
    };
    // SAFETY: the stack is page-aligned (more than any target's stack alignment), its length a
    // multiple of the page size and far below isize::MAX; the callback never unwinds (a panic
    // is caught and resumed after switching back); the mapping outlives the call.
    let out = unsafe {
        psm::on_stack(region.stack, region.usable, move || {
            let outer = ON_BIG.with(|c| c.replace(size));
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            ON_BIG.with(|c| c.set(outer));
            out
        })
    };
    drop(region);
    match out {
        Ok(r) => r,
        Err(p) => std::panic::resume_unwind(p),
    }
}

#[cfg(unix)]
thread_local! {
    /// The size of the big stack this thread runs on (0: its own stack).
    static ON_BIG: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Elsewhere: the generic helper.
#[cfg(not(unix))]
pub fn on_big_stack<R>(size: usize, f: impl FnOnce() -> R) -> R {
    stacker::grow(size, f)
}

/// A stack mapping: an inaccessible guard page, then `usable` readable and writable bytes
/// from `stack`; unmapped when dropped.
#[cfg(unix)]
struct Region {
    base: *mut libc::c_void,
    total: usize,
    stack: *mut u8,
    usable: usize,
}

#[cfg(unix)]
impl Region {
    /// At least `size` usable bytes, or `None` where the system refuses them.
    fn map(size: usize) -> Option<Region> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096);
        let usable = size.div_ceil(page) * page;
        let total = usable.checked_add(page)?;
        // SAFETY: an anonymous private mapping of `total` bytes, checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANON,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: `base + page .. base + total` lies inside the mapping just made.
        let stack = unsafe { base.cast::<u8>().add(page) };
        let region = Region {
            base,
            total,
            stack,
            usable,
        };
        // SAFETY: the range above the guard page, inside the mapping (dropped on failure).
        let rw = unsafe {
            libc::mprotect(
                stack.cast::<libc::c_void>(),
                usable,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        (rw == 0).then_some(region)
    }
}

#[cfg(unix)]
impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `Region::map`, no longer in use.
        unsafe {
            libc::munmap(self.base, self.total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::on_big_stack;

    /// `n` nested calls, each with a 256-byte frame kept alive across the call (no tail call
    /// for the compiler to turn into a loop).
    fn depth(n: u32) -> u32 {
        let pad = std::hint::black_box([n as u8; 256]);
        if n == 0 {
            u32::from(pad[0])
        } else {
            1 + depth(n - 1) + u32::from(pad[1]) - u32::from(pad[1])
        }
    }

    /// Recursion far deeper than the calling thread's 256 KiB stack allows (about 30 MB of
    /// frames) fits, and the thread goes on afterwards.
    #[test]
    fn deep_recursion_fits() {
        let n = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(|| on_big_stack(64 << 20, || depth(100_000)))
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(n, 100_000);
    }

    /// A panic on the big stack reaches the caller as a panic.
    #[test]
    fn panics_come_back() {
        let r = std::panic::catch_unwind(|| on_big_stack(1 << 20, || panic!("inside")));
        let msg = r.unwrap_err();
        assert_eq!(msg.downcast_ref::<&str>(), Some(&"inside"));
        assert_eq!(on_big_stack(1 << 20, || 7), 7);
    }
}

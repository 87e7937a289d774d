//! A large stack for the compiles that recurse over client-controlled structure (deep schema
//! walks, grammars), switched to on the calling thread.
//!
//! The region is mapped with an inaccessible guard page below it, so that running past it
//! faults instead of writing over other memory; its pages are committed only as deep as the
//! walk goes. Each thread keeps its last region for its next call, with the pages of its top
//! [`KEEP`] bytes: mapping a fresh one per compile had every compile fault its first stack
//! pages in anew (with transparent huge pages, zeroing 2 MiB each time: about a quarter of a
//! small schema's compile). Below that top, pages are given back after each call, so a deep
//! walk does not leave its stack resident. Nothing here asks where the thread's
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
    let kept = SPARE.with(|c| c.borrow_mut().take());
    let region = match kept {
        Some(r) if r.usable >= size => r,
        _ => match Region::map(size) {
            Some(r) => r,
            None => return stacker::grow(size, f),
        },
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
    region.trim();
    // kept for the next call on this thread (the larger one, after a nested call)
    SPARE.with(|c| {
        let mut c = c.borrow_mut();
        if c.as_ref().is_none_or(|k| k.usable < region.usable) {
            *c = Some(region);
        }
    });
    match out {
        Ok(r) => r,
        Err(p) => std::panic::resume_unwind(p),
    }
}

#[cfg(unix)]
thread_local! {
    /// The size of the big stack this thread runs on (0: its own stack).
    static ON_BIG: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// The region of this thread's last call, unmapped when the thread ends.
    static SPARE: std::cell::RefCell<Option<Region>> = const { std::cell::RefCell::new(None) };
}

/// The top of a kept region whose pages stay committed between calls: as deep as most
/// compiles go.
#[cfg(unix)]
const KEEP: usize = 1 << 20;

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
        if rw != 0 {
            return None;
        }
        // a stack gains nothing from huge pages: without this, its first touch zeroes 2 MiB
        #[cfg(target_os = "linux")]
        // SAFETY: advice on a range of this mapping only
        unsafe {
            libc::madvise(stack.cast::<libc::c_void>(), usable, libc::MADV_NOHUGEPAGE);
        }
        Some(region)
    }

    /// Give back the pages below the top [`KEEP`] bytes (the stack grows down from the top).
    fn trim(&self) {
        let below = self.usable.saturating_sub(KEEP);
        if below > 0 {
            // SAFETY: the range lies inside the mapping and is page-aligned (KEEP is a multiple
            // of the page size); nothing runs on this stack now and its contents are not needed
            unsafe {
                libc::madvise(
                    self.stack.cast::<libc::c_void>(),
                    below,
                    libc::MADV_DONTNEED,
                );
            }
        }
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

    /// Minor page faults of the calling thread so far.
    #[cfg(target_os = "linux")]
    fn thread_faults() -> i64 {
        let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes a whole rusage
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, u.as_mut_ptr()) };
        assert_eq!(rc, 0);
        // SAFETY: written above
        unsafe { u.assume_init() }.ru_minflt
    }

    /// The second call on a thread runs on the first call's region, whose top pages are still
    /// there: a shallow walk faults no page in (a fresh region faults at least its first page).
    #[cfg(target_os = "linux")]
    #[test]
    fn the_region_is_kept_for_the_next_call() {
        std::thread::spawn(|| {
            let shallow = || depth(1_000); // about 300 KB of frames, below KEEP
            let before = thread_faults();
            on_big_stack(super::BIG_STACK, shallow);
            let first = thread_faults() - before;
            let before = thread_faults();
            on_big_stack(super::BIG_STACK, shallow);
            let second = thread_faults() - before;
            assert!(first > 0, "a fresh region faults its pages in");
            assert_eq!(second, 0, "the kept region's top pages are reused");
        })
        .join()
        .unwrap();
    }

    /// After a deep walk the kept region holds no page below its top `KEEP` bytes.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_deep_walk_gives_its_pages_back() {
        std::thread::spawn(|| {
            assert_eq!(on_big_stack(64 << 20, || depth(100_000)), 100_000);
            super::SPARE.with(|c| {
                let c = c.borrow();
                let r = c.as_ref().expect("the region is kept");
                let below = r.usable - super::KEEP;
                let page = 4096;
                let mut resident = vec![0u8; below.div_ceil(page)];
                // SAFETY: the range lies inside the mapping; the vector has a byte per page
                let rc = unsafe {
                    libc::mincore(r.stack.cast::<libc::c_void>(), below, resident.as_mut_ptr())
                };
                assert_eq!(rc, 0);
                let n = resident.iter().filter(|&&b| b & 1 != 0).count();
                assert_eq!(n, 0, "{n} pages below the kept top are still resident");
                // and the top was used: the walk ran on this region
                let mut top = vec![0u8; super::KEEP / page];
                // SAFETY: as above, for the top KEEP bytes
                let rc = unsafe {
                    libc::mincore(
                        r.stack.add(below).cast::<libc::c_void>(),
                        super::KEEP,
                        top.as_mut_ptr(),
                    )
                };
                assert_eq!(rc, 0);
                assert!(top.iter().any(|&b| b & 1 != 0));
            });
        })
        .join()
        .unwrap();
    }
}

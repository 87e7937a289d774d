//! Thread scheduling priority: the background work that serving must not wait behind (the
//! rule builder, a compile that has run long) gives the cores to everything else while they
//! are busy, and a compile thread handed a job does not take the core from the thread that
//! handed it over ([`set_batch`]). Linux only; elsewhere nothing changes.

/// The calling thread's id, as [`set_nice`] takes it (`None` off Linux).
pub fn current_thread() -> Option<i32> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions.
        i32::try_from(unsafe { libc::syscall(libc::SYS_gettid) }).ok()
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Give thread `tid` of this process the nice value `nice`; whether it took. An unprivileged
/// thread cannot lower its nice value again, so a thread raised this way stays there.
pub fn set_nice(tid: i32, nice: i32) -> bool {
    #[cfg(target_os = "linux")]
    {
        let Ok(who) = libc::id_t::try_from(tid) else {
            return false;
        };
        // SAFETY: setpriority on a thread of this process changes only its nice value; an id
        // no longer in use makes it fail, reported by its return value.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, who, nice) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (tid, nice);
        false
    }
}

/// Put the calling thread under the batch policy (`SCHED_BATCH`, its nice value kept); whether
/// it took. A batch thread that wakes up does not preempt the thread running on its core: a
/// compile thread handed a job by a thread that holds Python's GIL (a server's event loop,
/// vLLM's scheduler) starts when that thread waits or its time slice ends, instead of stopping
/// it, GIL held, for the length of the compile.
pub fn set_batch() -> bool {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: sched_setscheduler with pid 0 (the calling thread) and a valid param changes
        // only its policy; SCHED_BATCH needs no privilege; failure is its return value.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    false
}

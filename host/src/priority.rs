//! Background work yields the CPU to the control plane.
//!
//! A node's Raft heartbeats, lease renewals, the leader's expiry decisions and the lease
//! deadline's timers run on the node's runtime. Plugin code, loading the plugins folder
//! and compiling are background work, on threads of their own (`node::PluginThreads`
//! and the compile child). When the cores are busy (a plugin that spins, a folder of
//! 10,000 plugins loading, thousands of plugins starting at once, several nodes on one
//! machine) a heartbeat that waits for a core as long as an election timeout starts an
//! election, and a renewal that waits costs every plugin of the node its lease. So
//! background threads run 10 nice levels below the node's own: Linux's scheduler then
//! gives a runnable control thread about nine times the share of a busy background
//! thread (weights 1024 and 110), and background work still gets every core the control
//! plane does not want.
//!
//! On Linux the nice value belongs to a thread: `setpriority(PRIO_PROCESS, 0, …)` sets
//! the calling thread's, and threads and processes it starts inherit it. Raising a nice
//! value needs no privilege. The level is relative to the node's main thread, so a node
//! an operator started at nice 5 runs its plugins at 15.

/// How many nice levels background threads run below the node's own.
pub const BACKGROUND_NICE: i32 = 10;

/// The highest nice value Linux has.
const LOWEST_PRIORITY: i32 = 19;

/// Puts the calling thread [`BACKGROUND_NICE`] levels below the node's main thread (at
/// most at 19). A thread started by a background thread inherits its nice value and is
/// left as it is. Best effort: a failure leaves the thread as it was, with a warning.
pub fn lower_this_thread() {
    // SAFETY: getpid has no preconditions.
    let main = unsafe { libc::getpid() } as libc::id_t;
    let (Some(base), Some(now)) = (nice_of(main), nice_of(0)) else {
        return;
    };
    let nice = (base + BACKGROUND_NICE).min(LOWEST_PRIORITY);
    if now >= nice {
        return;
    }
    // SAFETY: setpriority changes only the calling thread's nice value.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0 {
        let error = std::io::Error::last_os_error();
        tracing::warn!(%error, "cannot lower this thread's priority; background work runs at the node's");
    }
}

/// The nice value of thread `tid` (0: the calling thread; the process id: its main
/// thread).
fn nice_of(tid: libc::id_t) -> Option<i32> {
    // SAFETY: errno is thread-local and writable; getpriority only reads, and since -1
    // is a valid nice value it reports errors only through errno.
    let nice = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, tid)
    };
    let error = std::io::Error::last_os_error();
    if nice == -1 && error.raw_os_error().is_some_and(|e| e != 0) {
        tracing::warn!(%error, "cannot read a thread's priority; background work runs at the node's");
        return None;
    }
    Some(nice)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_background_thread_runs_ten_levels_below_the_main_thread_and_others_keep_theirs() {
        // SAFETY: getpid has no preconditions.
        let main = nice_of(unsafe { libc::getpid() } as libc::id_t).unwrap();
        let before = nice_of(0).unwrap();
        let (once, twice, inherited) = std::thread::spawn(|| {
            lower_this_thread();
            let once = nice_of(0).unwrap();
            lower_this_thread();
            let twice = nice_of(0).unwrap();
            let inherited = std::thread::spawn(|| {
                lower_this_thread();
                nice_of(0).unwrap()
            })
            .join()
            .unwrap();
            (once, twice, inherited)
        })
        .join()
        .unwrap();
        let expected = (main + BACKGROUND_NICE).min(LOWEST_PRIORITY);
        assert_eq!(once, expected, "ten levels below the main thread");
        assert_eq!(twice, expected, "lowering again changes nothing");
        assert_eq!(
            inherited, expected,
            "a thread a background thread started stays at its level"
        );
        assert_eq!(nice_of(0).unwrap(), before, "other threads keep theirs");
    }
}

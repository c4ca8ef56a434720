//! The lease as plugin instances see it: the one check every effect asks, and the time
//! at which the engine itself stops an instance.
//!
//! docs/design.md §5: a node's plugins must not execute, and must not act on the world, once
//! the node's lease deadline D has passed, because from then on a successor may own the
//! slot. Two things here make that hold without relying on any task being polled:
//! - [`NodeLease`] holds the node's current session and D in atomics. The session task
//!   publishes every change; nothing else writes them.
//! - Every store's epoch callback (`store.rs`) reads them at each epoch tick. An
//!   instance running `start` (or being instantiated for it) traps at the first tick at
//!   or after D, or at its own interrupt time ([`Signals`]) when a stop was requested.
//!   After a SIGSTOP longer than the lease, the first tick after SIGCONT sees D passed
//!   and the instance traps at once, whatever the supervisor is doing.
//!
//! [`InstanceContext::may_act`](super::InstanceContext::may_act) is the one check for
//! effects (`state.save` and every capability beside it): the instance's grant belongs
//! to the node's current session, D has not passed, and the instance's own interrupt
//! time has not come.
//!
//! Times are nanoseconds on `CLOCK_BOOTTIME` ([`now`]), which keeps counting while the
//! machine is suspended, so they fit one atomic word and a suspended-then-woken owner
//! traps at once, as its peers' clocks expect.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// "Never": an interrupt time not set.
const NEVER: u64 = u64::MAX;

/// Why an instance may not act now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The node's lease deadline has passed, or the node holds no lease for the grant's
    /// session (it expired or was replaced).
    #[error("the node's lease on this slot has expired")]
    LeaseExpired,
    /// The instance is past its interrupt time (a stop was requested and its grace is up).
    #[error("the plugin is being stopped")]
    Stopping,
}

/// The node's session and lease deadline, shared by every instance on the node.
#[derive(Debug)]
pub struct NodeLease {
    /// The current session id; 0 when there is none (ids are log indexes, never 0).
    session: AtomicU64,
    /// D in [`nanos`]; 0 when no renewal of the session has been acknowledged.
    deadline: AtomicU64,
    /// Whether D is enforced (always, except in the fault checker's deliberately
    /// broken build).
    enforced: bool,
}

impl NodeLease {
    /// A node lease with no session yet. `enforced` false is for the fault checker's
    /// broken build only: instances then neither trap at D nor have effects refused.
    pub fn new(enforced: bool) -> Self {
        Self {
            session: AtomicU64::new(0),
            deadline: AtomicU64::new(0),
            enforced,
        }
    }

    /// Publishes the node's session and deadline. The deadline is cleared before the
    /// session changes, so a reader never pairs a new session with an old deadline.
    pub fn publish(&self, session: Option<u64>, deadline: Option<Instant>) {
        let session = session.unwrap_or(0);
        let deadline = deadline.map_or(0, nanos);
        if self.session.load(Ordering::Acquire) != session {
            self.deadline.store(0, Ordering::Release);
            self.session.store(session, Ordering::Release);
        }
        self.deadline.store(deadline, Ordering::Release);
    }

    /// Whether D is enforced (false only in the fault checker's broken build).
    pub fn enforced(&self) -> bool {
        self.enforced
    }

    /// Whether an instance of a grant under `session` may act at `now` (in [`nanos`]).
    pub fn check(&self, session: u64, now: u64) -> Result<(), Refusal> {
        if !self.enforced {
            return Ok(());
        }
        let deadline = self.deadline.load(Ordering::Acquire);
        if self.session.load(Ordering::Acquire) != session || now >= deadline {
            return Err(Refusal::LeaseExpired);
        }
        Ok(())
    }

    /// D, if the node holds a lease.
    pub fn deadline(&self) -> Option<Instant> {
        match self.deadline.load(Ordering::Acquire) {
            0 => None,
            d => Some(instant(d)),
        }
    }

    /// The time left until D at `now`, for bounding an effect (zero if D has passed or
    /// there is no lease; `None` when D is not enforced).
    pub fn time_left(&self, now: Instant) -> Option<Duration> {
        if !self.enforced {
            return None;
        }
        Some(
            self.deadline()
                .map_or(Duration::ZERO, |d| d.saturating_duration_since(now)),
        )
    }

    /// The time in [`nanos`] at which an instance bound to the lease of `session` must
    /// trap: D, or at once when the session is no longer the node's.
    fn interrupt_at(&self, session: u64) -> u64 {
        if !self.enforced {
            return NEVER;
        }
        let deadline = self.deadline.load(Ordering::Acquire);
        if self.session.load(Ordering::Acquire) != session {
            return 0;
        }
        deadline
    }
}

/// Stop and interrupt state shared between a supervisor and the instances it runs.
#[derive(Clone, Debug)]
pub struct Signals {
    stop: tokio::sync::watch::Sender<bool>,
    inner: std::sync::Arc<Times>,
}

#[derive(Debug)]
struct Times {
    /// When the instance must trap, in [`nanos`]; [`NEVER`] until a stop sets it.
    interrupt_at: AtomicU64,
    /// Whether the instance also traps at the node's lease deadline: true while it is
    /// instantiated for and runs `start`; false for `cleanup`, which may run after a
    /// lease loss (it is bounded by its own budget, and its effects are still refused).
    bound_to_lease: AtomicBool,
}

impl Default for Signals {
    fn default() -> Self {
        Self::new()
    }
}

impl Signals {
    pub fn new() -> Self {
        Self {
            stop: tokio::sync::watch::Sender::new(false),
            inner: std::sync::Arc::new(Times {
                interrupt_at: AtomicU64::new(NEVER),
                bound_to_lease: AtomicBool::new(true),
            }),
        }
    }

    /// Asks the plugin to stop (`sleep` returns `stop-requested` from now on) and sets
    /// the absolute time at which it traps if it has not returned. An earlier interrupt
    /// time already set is kept.
    pub fn request_stop(&self, interrupt_at: Instant) {
        self.stop.send_replace(true);
        self.inner
            .interrupt_at
            .fetch_min(nanos(interrupt_at), Ordering::AcqRel);
    }

    /// Makes the instance trap at its next epoch tick.
    pub fn interrupt(&self) {
        self.inner.interrupt_at.store(0, Ordering::Release);
    }

    /// Frees the instance from the node's lease deadline (for `cleanup`), and gives it
    /// until `until` instead.
    pub fn unbind_from_lease(&self, until: Instant) {
        self.inner.bound_to_lease.store(false, Ordering::Release);
        self.inner
            .interrupt_at
            .store(nanos(until), Ordering::Release);
    }

    pub fn stop_requested(&self) -> bool {
        *self.stop.borrow()
    }

    /// Whether the instance's interrupt time has come at `now` (in [`nanos`]).
    pub fn interrupted_at(&self, now: u64) -> bool {
        now >= self.inner.interrupt_at.load(Ordering::Acquire)
    }

    /// Whether an interrupt time has been set and reached.
    pub fn interrupted(&self) -> bool {
        self.interrupted_at(now())
    }

    /// The time at which the instance traps, given the node's lease and the grant's
    /// session.
    pub(super) fn trap_at(&self, lease: &NodeLease, session: u64) -> u64 {
        let own = self.inner.interrupt_at.load(Ordering::Acquire);
        if self.inner.bound_to_lease.load(Ordering::Acquire) {
            own.min(lease.interrupt_at(session))
        } else {
            own
        }
    }

    /// Resolves once a stop is requested.
    pub(super) async fn stopping(&self) {
        let mut rx = self.stop.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

/// Now, in nanoseconds on the clock the lease is enforced by: `CLOCK_BOOTTIME` on Linux,
/// which keeps counting while the machine is suspended (the other nodes' clocks do too,
/// so a deadline must not stand still across a suspend), else the monotonic clock.
pub fn now() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_BOOTTIME exists on every Linux
        // since 2.6.39, and the call has no other preconditions.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        if rc == 0 {
            return (ts.tv_sec as u64)
                .saturating_mul(1_000_000_000)
                .saturating_add(ts.tv_nsec as u64)
                .max(1);
        }
    }
    (base().elapsed().as_nanos() as u64).max(1)
}

/// `at` on the lease clock (see [`now`]): at least 1, so 0 can mean "none" or "at once".
/// The node's timers run on `Instant`s; they are converted here, at the moment they are
/// published, by their distance from now.
pub fn nanos(at: Instant) -> u64 {
    let (instant, clock) = (Instant::now(), now());
    let converted = if at >= instant {
        clock.saturating_add((at - instant).as_nanos() as u64)
    } else {
        clock.saturating_sub((instant - at).as_nanos() as u64)
    };
    converted.max(1)
}

/// The `Instant` of lease-clock time `nanos`, for timers.
fn instant(nanos: u64) -> Instant {
    let (instant, clock) = (Instant::now(), now());
    if nanos >= clock {
        instant + Duration::from_nanos(nanos - clock)
    } else {
        instant
            .checked_sub(Duration::from_nanos(clock - nanos))
            .unwrap_or(instant)
    }
}

/// The fallback clock's origin (only where there is no `CLOCK_BOOTTIME`).
fn base() -> &'static Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn effects_need_the_current_session_and_time_before_the_deadline() {
        let lease = NodeLease::new(true);
        let now = Instant::now();
        assert_eq!(lease.check(7, nanos(now)), Err(Refusal::LeaseExpired));
        lease.publish(Some(7), None);
        assert_eq!(lease.check(7, nanos(now)), Err(Refusal::LeaseExpired));
        lease.publish(Some(7), Some(now + ms(100)));
        assert_eq!(lease.check(7, nanos(now)), Ok(()));
        assert_eq!(lease.check(6, nanos(now)), Err(Refusal::LeaseExpired));
        // (A millisecond past D: two conversions of one instant may differ by nanoseconds.)
        assert_eq!(
            lease.check(7, nanos(now + ms(101))),
            Err(Refusal::LeaseExpired)
        );
        // A new session: the old session's grants may no longer act, even before the
        // old deadline.
        lease.publish(Some(9), None);
        assert_eq!(lease.check(7, nanos(now)), Err(Refusal::LeaseExpired));
    }

    /// Two lease-clock times that stand for the same instant (each conversion reads the
    /// two clocks a few nanoseconds apart).
    fn same(a: u64, b: u64) -> bool {
        a.abs_diff(b) < 1_000_000
    }

    #[test]
    fn an_instance_traps_at_the_earlier_of_its_stop_time_and_the_deadline() {
        let lease = NodeLease::new(true);
        let now = Instant::now();
        lease.publish(Some(3), Some(now + ms(1000)));
        let signals = Signals::new();
        assert!(same(signals.trap_at(&lease, 3), nanos(now + ms(1000))));
        signals.request_stop(now + ms(300));
        assert!(same(signals.trap_at(&lease, 3), nanos(now + ms(300))));
        // A later stop request does not postpone the interrupt.
        signals.request_stop(now + ms(900));
        assert!(same(signals.trap_at(&lease, 3), nanos(now + ms(300))));
        // Another session's instance traps at once.
        assert_eq!(Signals::new().trap_at(&lease, 2), 0);
        // Cleanup is bound by its own budget only.
        let cleanup = Signals::new();
        cleanup.unbind_from_lease(now + ms(5000));
        lease.publish(Some(4), None);
        assert!(same(cleanup.trap_at(&lease, 3), nanos(now + ms(5000))));
    }

    #[test]
    fn the_lease_clock_converts_instants_both_ways() {
        let at = Instant::now() + ms(250);
        let back = instant(nanos(at));
        assert!(back.max(at) - back.min(at) < ms(1));
        assert!(now() < nanos(at));
    }

    #[test]
    fn an_unenforced_lease_never_interrupts_or_refuses() {
        let lease = NodeLease::new(false);
        assert_eq!(lease.check(1, nanos(Instant::now())), Ok(()));
        assert_eq!(Signals::new().trap_at(&lease, 1), NEVER);
    }
}

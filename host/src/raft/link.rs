//! Whether a Raft peer is reachable: the gate in front of every Raft message to it.
//!
//! openraft sends a heartbeat to every peer every `heartbeat` (50 ms) and gives it that
//! long to answer; it backs off only when told the peer is *unreachable*. A dead peer's
//! address gets no answer at all (a dial to an unbound UDP port times out), so without a
//! gate every heartbeat would start a dial, be cut off after 50 ms, and be logged.
//!
//! So each peer has a [`Link`]:
//! - **Up**: calls go through.
//! - **Unknown** (never reached) or **Down** (the last call failed without an answer):
//!   one call at a time goes through as a *probe*, and only once the backoff since the
//!   last failure has passed (100 ms, then 200 ms, then 250 ms: a restarted peer must be
//!   reached well within `rejoin::HOLD`); every other call is refused
//!   at once as unreachable, with no I/O. A probe runs to the end of its own bounds in a
//!   task of its own (see `network.rs`), so a slow handshake on a loaded machine still
//!   completes and leaves a cached connection behind.
//!
//! A change of the peer's address (a node that rejoined from elsewhere) resets the link.
//!
//! **Logging.** The transition to down is one warning (rate-limited per peer: a flapping
//! link cannot flood the log), the recovery one info line if its failure was reported;
//! repeated failures while down are debug lines. openraft's own per-RPC error lines are
//! filtered by [`super::LOG_FILTER`].

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::ratelimit::RateLimiter;

/// The first wait after a failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between probes of a down peer.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_millis(250);

/// The backoff after `failures` consecutive failures: 100 ms doubling up to 250 ms.
pub(crate) fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(10);
    FIRST_BACKOFF
        .saturating_mul(1 << doublings)
        .min(MAX_BACKOFF)
}

/// One peer's reachability.
pub(crate) struct Link {
    name: String,
    state: Mutex<State>,
}

struct State {
    /// The address this state is about.
    addr: String,
    status: Status,
    /// A probe is in flight.
    probing: bool,
    /// Whether the current outage was logged (so its end is too).
    announced: bool,
    warnings: RateLimiter,
}

enum Status {
    Unknown,
    Up,
    Down {
        since: Instant,
        failures: u32,
        retry_at: Instant,
        error: String,
    },
}

/// How a call may proceed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// The peer answered last time.
    Up,
    /// The peer is down or unknown and this call is the one probe.
    Probe,
}

impl Link {
    pub(crate) fn new(name: &str, addr: &str) -> Link {
        Link {
            name: name.to_owned(),
            state: Mutex::new(State {
                addr: addr.to_owned(),
                status: Status::Unknown,
                probing: false,
                announced: false,
                warnings: RateLimiter::new(3, Duration::from_secs(60)),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a call to `addr` may go out now; `Err` says why the peer counts as
    /// unreachable.
    pub(crate) fn admit(&self, addr: &str, now: Instant) -> Result<Admission, String> {
        let mut state = self.lock();
        if state.addr != addr {
            state.addr = addr.to_owned();
            state.status = Status::Unknown;
            state.probing = false;
        }
        match &state.status {
            Status::Up => Ok(Admission::Up),
            _ if state.probing => Err(format!(
                "{} at {addr}: a connection attempt is in progress",
                self.name
            )),
            Status::Unknown => {
                state.probing = true;
                Ok(Admission::Probe)
            }
            Status::Down {
                since,
                retry_at,
                error,
                ..
            } => {
                if now >= *retry_at {
                    state.probing = true;
                    Ok(Admission::Probe)
                } else {
                    Err(format!(
                        "{} at {addr} unreachable for {:.1?} ({error}); next attempt in {:.0?}",
                        self.name,
                        now.saturating_duration_since(*since),
                        retry_at.saturating_duration_since(now)
                    ))
                }
            }
        }
    }

    /// Records the outcome of a call to `addr`: `Ok` if the peer answered (even with an
    /// error), `Err(why)` if it could not be reached.
    pub(crate) fn record(&self, addr: &str, outcome: Result<(), &str>, now: Instant) {
        let mut state = self.lock();
        if state.addr != addr {
            return; // about an address the peer has left
        }
        state.probing = false;
        match outcome {
            Ok(()) => {
                if let Status::Down { since, .. } = state.status
                    && std::mem::take(&mut state.announced)
                {
                    tracing::info!(
                        event = crate::events::CLUSTER_PEER,
                        peer = %self.name, %addr,
                        "raft peer reachable again after {:.1?}",
                        now.saturating_duration_since(since)
                    );
                }
                state.status = Status::Up;
            }
            Err(error) => {
                let (since, failures) = match state.status {
                    Status::Down {
                        since, failures, ..
                    } => (since, failures.saturating_add(1)),
                    Status::Up | Status::Unknown => (now, 1),
                };
                if failures == 1 {
                    if let Some(held) = state.warnings.admit(now) {
                        state.announced = true;
                        tracing::warn!(
                            event = crate::events::CLUSTER_PEER,
                            peer = %self.name, %addr, error,
                            "raft peer unreachable; retrying with backoff up to {MAX_BACKOFF:?}{}",
                            if held > 0 { format!(" ({held} earlier outages not logged)") } else { String::new() }
                        );
                    }
                } else {
                    tracing::debug!(event = crate::events::CLUSTER_PEER, peer = %self.name, %addr, error, failures, "raft peer still unreachable");
                }
                state.status = Status::Down {
                    since,
                    failures,
                    retry_at: now + backoff(failures),
                    error: error.to_owned(),
                };
            }
        }
    }

    /// Whether the last call reached the peer.
    pub(crate) fn is_up(&self) -> bool {
        matches!(self.lock().status, Status::Up)
    }

    /// How long the peer has been unreachable at `now`: since the first failed call of
    /// the current outage. `None` while it answers, or before any call.
    pub(crate) fn down_for(&self, now: Instant) -> Option<Duration> {
        match self.lock().status {
            Status::Down { since, .. } => Some(now.saturating_duration_since(since)),
            Status::Up | Status::Unknown => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn one_probe_at_a_time_and_backoff_between_probes() {
        let t0 = Instant::now();
        let link = Link::new("n2", "a:1");
        assert_eq!(link.admit("a:1", t0), Ok(Admission::Probe));
        assert!(link.admit("a:1", t0).is_err(), "a probe is in flight");
        link.record("a:1", Err("dial timeout"), t0);
        assert!(link.admit("a:1", t0 + 99 * MS).is_err());
        assert_eq!(link.admit("a:1", t0 + 100 * MS), Ok(Admission::Probe));
        link.record("a:1", Err("dial timeout"), t0 + 100 * MS);
        assert!(
            link.admit("a:1", t0 + 299 * MS).is_err(),
            "200 ms after the 2nd"
        );
        assert_eq!(link.admit("a:1", t0 + 300 * MS), Ok(Admission::Probe));
        link.record("a:1", Ok(()), t0 + 301 * MS);
        assert!(link.is_up());
        assert_eq!(link.admit("a:1", t0 + 301 * MS), Ok(Admission::Up));
        assert_eq!(link.admit("a:1", t0 + 301 * MS), Ok(Admission::Up));
    }

    #[test]
    fn a_new_address_resets_the_link_and_stale_outcomes_are_ignored() {
        let t0 = Instant::now();
        let link = Link::new("n2", "a:1");
        assert_eq!(link.admit("a:1", t0), Ok(Admission::Probe));
        link.record("a:1", Err("dial timeout"), t0);
        assert_eq!(link.admit("b:2", t0), Ok(Admission::Probe));
        link.record("a:1", Ok(()), t0);
        assert!(!link.is_up(), "an answer from the old address says nothing");
        link.record("b:2", Ok(()), t0);
        assert!(link.is_up());
    }

    #[test]
    fn backoff_doubles_up_to_a_second() {
        let got: Vec<_> = (1..=7).map(|n| backoff(n).as_millis()).collect();
        assert_eq!(got, [100, 200, 250, 250, 250, 250, 250]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}

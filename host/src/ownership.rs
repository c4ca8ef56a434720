//! Ownership as the node sees it: the grants it holds and the lease that bounds them.
//!
//! A [`Grant`] is one slot of one resource, granted to this node with a fencing token
//! (the Raft log index of the granting entry) in a Raft term.
//!
//! A [`Lease`] is the node's local view of its session (docs/design.md §5.4, "Sessions and leases"):
//! with T the TTL and m = T/20 the clock-rate margin, the deadline is
//! `D = send time of the last acknowledged renewal + T − m` on the monotonic clock. The
//! leader acknowledges a renewal only after a quorum round that began after it arrived,
//! and expires the session no earlier than `receive time of the last renewal + T`, so
//! with clock rates within m/T of each other D comes before any successor can start.
//! The node asks its plugins to stop at `D − grace`, interrupts them at D, and refuses
//! host calls with an external effect from D on.
//!
//! This module does no I/O and reads no clock: instants come in as arguments, so the
//! arithmetic is tested directly.

use std::time::{Duration, Instant};

/// One grant of a slot to a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub resource: String,
    /// The ticket: `0..tickets`.
    pub slot: u32,
    /// The owning node's name.
    pub node: String,
    /// Fencing token: strictly greater for every grant of the slot.
    pub token: u64,
    /// The Raft term in which the grant was committed.
    pub term: u64,
    /// The node's session the grant is bound to: it dies with it.
    pub session: u64,
}

/// Lease timing derived from the TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    /// T: how long a session lives without renewals.
    pub ttl: Duration,
}

impl LeaseTiming {
    /// The shortest TTL accepted.
    pub const MIN_TTL: Duration = Duration::from_millis(300);
    /// The longest TTL accepted.
    pub const MAX_TTL: Duration = Duration::from_secs(60);
    /// The default TTL.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(2);

    /// r = T/4: how often the node renews.
    pub fn renew_every(&self) -> Duration {
        self.ttl / 4
    }

    /// m = T/20: the clock-rate margin taken off the node's deadline.
    pub fn margin(&self) -> Duration {
        self.ttl / 20
    }

    /// The longest stop grace that works with this TTL: a quarter of it. With renewals
    /// acknowledged every T/4, D − now stays above T − m − T/4 − (round trip), so a stop
    /// requested at D − grace never comes before the acknowledgement that set D.
    pub fn max_stop_grace(&self) -> Duration {
        self.ttl / 4
    }
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self {
            ttl: Self::DEFAULT_TTL,
        }
    }
}

/// The node's lease on its current session.
#[derive(Clone, Debug)]
pub struct Lease {
    timing: LeaseTiming,
    /// The session this lease is for.
    session: Option<u64>,
    /// D, once a renewal of this session was acknowledged.
    deadline: Option<Instant>,
}

impl Lease {
    pub fn new(timing: LeaseTiming) -> Self {
        Self {
            timing,
            session: None,
            deadline: None,
        }
    }

    pub fn timing(&self) -> LeaseTiming {
        self.timing
    }

    /// A new session was opened: nothing is valid until its first renewal is acked.
    pub fn opened(&mut self, session: u64) {
        self.session = Some(session);
        self.deadline = None;
    }

    /// The session is known to be gone (expired or replaced): no renewal can revive it.
    /// The deadline stays, so plugins still stop by it.
    pub fn ended(&mut self) {
        self.session = None;
    }

    /// A renewal of `session` sent at `sent_at` was acknowledged. Returns the deadline.
    pub fn acked(&mut self, session: u64, sent_at: Instant) -> Option<Instant> {
        if self.session != Some(session) {
            return self.deadline;
        }
        let candidate = sent_at + self.timing.ttl - self.timing.margin();
        self.deadline = Some(self.deadline.map_or(candidate, |d| d.max(candidate)));
        self.deadline
    }

    pub fn session(&self) -> Option<u64> {
        self.session
    }

    /// D, if any renewal was acknowledged for the current (or last) session.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the node may act for `session` at `now`: the session is current and
    /// `now` is before D.
    pub fn valid_for(&self, session: u64, now: Instant) -> bool {
        self.session == Some(session) && self.deadline.is_some_and(|d| now < d)
    }
}

/// When a plugin with stop grace `grace` must be asked to stop, for deadline D.
pub fn stop_at(deadline: Instant, grace: Duration) -> Instant {
    deadline.checked_sub(grace).unwrap_or(deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_deadline_is_the_last_acked_send_time_plus_ttl_minus_margin() {
        let t0 = Instant::now();
        let timing = LeaseTiming { ttl: ms(2000) };
        assert_eq!(timing.renew_every(), ms(500));
        assert_eq!(timing.margin(), ms(100));
        let mut lease = Lease::new(timing);
        assert!(!lease.valid_for(7, t0), "no session yet");
        lease.opened(7);
        assert!(!lease.valid_for(7, t0), "not valid before the first ack");
        assert_eq!(lease.acked(7, t0), Some(t0 + ms(1900)));
        assert!(lease.valid_for(7, t0 + ms(1899)));
        assert!(!lease.valid_for(7, t0 + ms(1900)));
        // A late ack of an older renewal never moves the deadline back.
        lease.acked(7, t0 + ms(500));
        assert_eq!(lease.acked(7, t0 + ms(200)), Some(t0 + ms(2400)));
    }

    #[test]
    fn acks_for_another_session_and_ended_sessions_do_not_extend() {
        let t0 = Instant::now();
        let mut lease = Lease::new(LeaseTiming { ttl: ms(1000) });
        lease.opened(3);
        lease.acked(3, t0);
        assert_eq!(lease.acked(2, t0 + ms(500)), Some(t0 + ms(950)));
        lease.ended();
        assert!(!lease.valid_for(3, t0));
        assert_eq!(lease.acked(3, t0 + ms(500)), Some(t0 + ms(950)));
        assert_eq!(
            lease.deadline(),
            Some(t0 + ms(950)),
            "plugins still stop by D"
        );
        lease.opened(9);
        assert_eq!(lease.deadline(), None);
    }

    #[test]
    fn stop_comes_a_grace_before_the_deadline() {
        let t0 = Instant::now() + ms(10_000);
        assert_eq!(stop_at(t0, ms(500)), t0 - ms(500));
    }
}

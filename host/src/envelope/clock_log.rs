//! Reporting a peer whose wall clock is off, instead of refusing its messages.
//!
//! Every envelope carries its sender's wall-clock send time. The gate once refused an
//! envelope more than 30 s from the receiver's clock, so two voters on a bad time source
//! cut themselves off and took the quorum with them. Safety does not need the clocks to
//! agree (leases run on each node's monotonic clock; replay protection rests on the
//! incarnation and the sequence), so an offset is now something to tell the operator,
//! with its size, in a `clock.skew` warning naming the peer.
//!
//! What an offset still affects, none of it safety: times in logs and `tenure status`;
//! certificate validity, which each node checks against its own clock (an offset beyond a
//! certificate's start margin fails handshakes with a new certificate); and a few
//! decisions that compare a time one node wrote into the replicated state with another
//! node's clock: how long a slot has been owned (rebalancing waits for older slots), a
//! plugin's give-up cooldown, and the ten minutes in which a new leader finishes a
//! revocation's removal. Fix the time source the warning names.
//!
//! One envelope's `sent_at − received_at` is the offset minus the time the envelope spent
//! in flight and in queues, which on a loaded machine can itself exceed a second. So the
//! log keeps, per peer, the **largest** difference over a [`SAMPLE_PERIOD`]: the envelope
//! that waited least, whose difference is closest to the true offset (a delay only ever
//! makes the difference smaller). At the end of each period that estimate is compared
//! with [`OFF_BY`]; a peer is warned about at most once per [`WARN_EVERY`], and once more
//! (at INFO) when its clock is back within bounds.
//!
//! Memory is bounded like the gate's replay table: at most [`MAX_PEERS`] peers, and a full
//! table is cleared (peers are authenticated members and operators; only someone holding
//! thousands of certificates fills it, and the cost is a repeated warning).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::events::CLOCK_SKEW;

/// How far a peer's clock may be from this node's before it is reported.
pub const OFF_BY: Duration = Duration::from_secs(1);
/// How long the log gathers one peer's differences before it judges the offset.
pub const SAMPLE_PERIOD: Duration = Duration::from_secs(5);
/// How often one peer's offset is reported at most while it stays off.
pub const WARN_EVERY: Duration = Duration::from_secs(60);
/// How many peers the log remembers.
pub const MAX_PEERS: usize = 4096;

/// Per-peer clock offsets, for `clock.skew` warnings; one per node.
#[derive(Debug, Default)]
pub struct ClockLog {
    peers: Mutex<HashMap<String, PeerClock>>,
}

#[derive(Debug)]
struct PeerClock {
    /// When the current sample period began.
    since: Instant,
    /// The largest `sent − received` of the period, in ms.
    best_ms: i64,
    /// When the peer was last reported off, while it still is.
    warned: Option<Instant>,
}

/// What [`ClockLog::observe`] concluded about a peer at the end of a sample period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Off by more than [`OFF_BY`], reported now (`offset_ms`: the peer's clock minus ours).
    Off { offset_ms: i64 },
    /// Back within [`OFF_BY`] after a report.
    Back { offset_ms: i64 },
}

impl ClockLog {
    /// Takes one accepted envelope of `peer`, sent at `sent_at_ms` by its clock and
    /// received at `received_ms` by ours (both unix ms), at monotonic time `now`; writes a
    /// `clock.skew` line when a period ends with the peer off (and returns what it wrote).
    pub fn observe(
        &self,
        peer: &str,
        sent_at_ms: u64,
        received_ms: u64,
        now: Instant,
    ) -> Option<Verdict> {
        let difference = i64::try_from(sent_at_ms)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(received_ms).unwrap_or(i64::MAX));
        let verdict = {
            let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
            if peers.len() >= MAX_PEERS && !peers.contains_key(peer) {
                peers.clear();
            }
            let clock = peers.entry(peer.to_owned()).or_insert(PeerClock {
                since: now,
                best_ms: difference,
                warned: None,
            });
            clock.observe(difference, now)
        };
        match verdict {
            Some(Verdict::Off { offset_ms }) => tracing::warn!(
                event = CLOCK_SKEW,
                peer,
                offset_ms,
                "the clock of {peer} is {} this node's: its messages are still accepted (no lease \
                 or fencing token depends on the clocks agreeing), but times in its logs and \
                 answers, rebalancing and cooldowns are off by as much; check its time source \
                 (NTP)",
                describe(offset_ms)
            ),
            Some(Verdict::Back { offset_ms }) => tracing::info!(
                event = CLOCK_SKEW,
                peer,
                offset_ms,
                "the clock of {peer} is back within {} ms of this node's",
                OFF_BY.as_millis()
            ),
            None => {}
        }
        verdict
    }
}

impl PeerClock {
    fn observe(&mut self, difference: i64, now: Instant) -> Option<Verdict> {
        self.best_ms = self.best_ms.max(difference);
        if now.saturating_duration_since(self.since) < SAMPLE_PERIOD {
            return None;
        }
        let offset_ms = self.best_ms;
        self.since = now;
        self.best_ms = i64::MIN;
        let off = offset_ms.unsigned_abs() > OFF_BY.as_millis() as u64;
        match (off, self.warned) {
            (true, Some(at)) if now.saturating_duration_since(at) < WARN_EVERY => None,
            (true, _) => {
                self.warned = Some(now);
                Some(Verdict::Off { offset_ms })
            }
            (false, Some(_)) => {
                self.warned = None;
                Some(Verdict::Back { offset_ms })
            }
            (false, None) => None,
        }
    }
}

/// "3.2 s ahead of", "1.5 s behind".
fn describe(offset_ms: i64) -> String {
    let seconds = offset_ms.unsigned_abs() as f64 / 1000.0;
    if offset_ms > 0 {
        format!("{seconds:.1} s ahead of")
    } else {
        format!("{seconds:.1} s behind")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000_000;

    #[test]
    fn a_peer_ahead_is_reported_once_per_warn_every_with_its_offset() {
        let log = ClockLog::default();
        let t0 = Instant::now();
        // The envelope that waited least (10 ms) sets the estimate, whatever came first.
        assert_eq!(log.observe("n3", MS + 60_000 - 300, MS, t0), None);
        assert_eq!(
            log.observe("n3", MS + 60_000 - 10, MS, t0 + Duration::from_secs(1)),
            None
        );
        let at = t0 + SAMPLE_PERIOD;
        assert_eq!(
            log.observe("n3", MS + 60_000 - 50, MS, at),
            Some(Verdict::Off { offset_ms: 59_990 })
        );
        // Still off a period later: not reported again within WARN_EVERY...
        let later = at + SAMPLE_PERIOD;
        assert_eq!(log.observe("n3", MS + 60_000, MS, later), None);
        // ... and again after it.
        let much_later = at + WARN_EVERY;
        assert_eq!(
            log.observe("n3", MS + 60_000, MS, much_later),
            Some(Verdict::Off { offset_ms: 60_000 })
        );
        // Back in bounds: said once.
        let fixed = much_later + SAMPLE_PERIOD;
        assert_eq!(
            log.observe("n3", MS, MS + 5, fixed),
            Some(Verdict::Back { offset_ms: -5 })
        );
        assert_eq!(log.observe("n3", MS, MS, fixed + SAMPLE_PERIOD), None);
    }

    #[test]
    fn queueing_alone_is_not_an_offset() {
        // A peer whose clock agrees, on a loaded machine: most envelopes waited 1.5 s, but
        // one in the period went through at once.
        let log = ClockLog::default();
        let t0 = Instant::now();
        for i in 0..10 {
            log.observe("n2", MS, MS + 1_500, t0 + Duration::from_millis(i * 100));
        }
        log.observe("n2", MS, MS + 3, t0 + Duration::from_secs(2));
        assert_eq!(log.observe("n2", MS, MS + 1_500, t0 + SAMPLE_PERIOD), None);
    }

    #[test]
    fn a_peer_behind_is_reported_with_a_negative_offset() {
        let log = ClockLog::default();
        let t0 = Instant::now();
        log.observe("n1", MS - 45_000, MS, t0);
        assert_eq!(
            log.observe("n1", MS - 45_000, MS + 2, t0 + SAMPLE_PERIOD),
            Some(Verdict::Off { offset_ms: -45_000 })
        );
        assert_eq!(describe(-45_000), "45.0 s behind");
        assert_eq!(describe(1_500), "1.5 s ahead of");
    }

    #[test]
    fn the_table_is_bounded() {
        let log = ClockLog::default();
        let t0 = Instant::now();
        for i in 0..MAX_PEERS + 10 {
            log.observe(&format!("p{i}"), MS, MS, t0);
        }
        assert!(log.peers.lock().unwrap().len() <= MAX_PEERS);
    }
}

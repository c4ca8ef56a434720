//! Counting and reporting rejected envelopes without letting a peer flood the log.
//!
//! Every rejection is counted, per [`Reason`], in atomics that a metrics endpoint can read
//! at any time. Every rejection is also worth a `security.rejected` warning, but a peer can
//! send thousands of bad envelopes a second, so lines go through a rate limit (10 per
//! second overall by default): past it they are counted, not written, and the next line
//! written carries `suppressed = N`. The limit is global, not per peer, because what it
//! protects (the disk, the reader's attention) is global; the counters keep the full picture.
//!
//! The line's fields: `event = "security.rejected"`, `peer` (the TLS peer's name), `reason`
//! (the stable code), `error` (the message), and `suppressed` when lines were held back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{Reason, Rejection};
use crate::ratelimit::RateLimiter;

use crate::events::SECURITY_REJECTED;

/// How many `security.rejected` lines [`RejectLog::default`] writes per second at most.
pub const DEFAULT_LINES_PER_SECOND: u32 = 10;

/// What [`RejectLog::record`] did with a rejection's log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logged {
    /// Written, noting how many lines had been suppressed since the previous one written.
    Written {
        /// Lines suppressed just before this one.
        suppressed: u64,
    },
    /// Not written, because of the rate limit; counted towards the next line's `suppressed`.
    Suppressed,
}

/// Rejection counters per reason and a rate-limited warning per rejection; one per node.
#[derive(Debug)]
pub struct RejectLog {
    counts: [AtomicU64; Reason::ALL.len()],
    suppressed: AtomicU64,
    limiter: Mutex<RateLimiter>,
}

impl RejectLog {
    /// A log that writes at most `lines` lines in any `period`.
    pub fn new(lines: u32, period: Duration) -> RejectLog {
        RejectLog {
            counts: [const { AtomicU64::new(0) }; Reason::ALL.len()],
            suppressed: AtomicU64::new(0),
            limiter: Mutex::new(RateLimiter::new(lines, period)),
        }
    }

    /// Counts `rejection` of an envelope from `peer` (the TLS peer's name) and writes a
    /// `security.rejected` warning for it at monotonic time `now`, unless the rate limit
    /// says otherwise.
    pub fn record(&self, peer: &str, rejection: &Rejection, now: Instant) -> Logged {
        self.counts[rejection.kind().index()].fetch_add(1, Ordering::Relaxed);
        let admitted = self
            .limiter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(now);
        let Some(suppressed) = admitted else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return Logged::Suppressed;
        };
        let reason = rejection.reason();
        if suppressed == 0 {
            tracing::warn!(
                event = SECURITY_REJECTED,
                peer,
                reason,
                error = %rejection,
                "envelope rejected"
            );
        } else {
            tracing::warn!(
                event = SECURITY_REJECTED,
                peer,
                reason,
                error = %rejection,
                suppressed,
                "envelope rejected ({suppressed} similar lines suppressed)"
            );
        }
        Logged::Written { suppressed }
    }

    /// How many rejections for `reason` were recorded.
    pub fn count(&self, reason: Reason) -> u64 {
        self.counts[reason.index()].load(Ordering::Relaxed)
    }

    /// Every reason with its count, in the order of [`Reason::ALL`] (for a metrics
    /// endpoint: `reason.as_str()` is the label).
    pub fn counts(&self) -> [(Reason, u64); Reason::ALL.len()] {
        Reason::ALL.map(|reason| (reason, self.count(reason)))
    }

    /// How many rejections were recorded, whatever the reason.
    pub fn total(&self) -> u64 {
        Reason::ALL.iter().map(|&reason| self.count(reason)).sum()
    }

    /// How many lines the rate limit suppressed, in all.
    pub fn suppressed_lines(&self) -> u64 {
        self.suppressed.load(Ordering::Relaxed)
    }
}

impl Default for RejectLog {
    /// [`DEFAULT_LINES_PER_SECOND`] lines per second.
    fn default() -> RejectLog {
        RejectLog::new(DEFAULT_LINES_PER_SECOND, Duration::from_secs(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn writes_at_most_the_limit_per_second_and_reports_the_rest() {
        let log = RejectLog::default();
        let t0 = Instant::now();
        let bad = Rejection::BadSignature;
        let replay = Rejection::Replay {
            incarnation: 1,
            seq: 1,
            why: "already accepted",
        };
        let mut written = 0;
        for i in 0..100u32 {
            let rejection = if i % 2 == 0 { &bad } else { &replay };
            match log.record("n9", rejection, t0 + i * MS) {
                Logged::Written { suppressed } => {
                    assert_eq!(suppressed, 0);
                    written += 1;
                }
                Logged::Suppressed => {}
            }
        }
        assert_eq!(written, DEFAULT_LINES_PER_SECOND);
        assert_eq!(log.suppressed_lines(), 90);
        // Everything is counted, written or not.
        assert_eq!(log.count(Reason::BadSignature), 50);
        assert_eq!(log.count(Reason::Replay), 50);
        assert_eq!(log.total(), 100);
        assert_eq!(
            log.counts()[Reason::Malformed.index()],
            (Reason::Malformed, 0)
        );

        // A second later the next line carries the suppressed count, then counting restarts.
        let t1 = t0 + Duration::from_secs(1) + 100 * MS;
        assert_eq!(
            log.record("n9", &bad, t1),
            Logged::Written { suppressed: 90 }
        );
        assert_eq!(
            log.record("n9", &bad, t1),
            Logged::Written { suppressed: 0 }
        );
    }
}

//! What the transport writes to the event log, and how often.
//!
//! Every line carries an `event` field with one of the names below (they belong with the
//! others in `crate::events`; they live here until the transport is wired into the node).
//! Refusals are logged through a [`LogLimiter`]: a peer that hammers us with bad handshakes
//! or garbage streams must not be able to turn our log into its amplifier. Refusals are
//! always *counted* (see `stats.rs`); only the lines are limited, and the first line after
//! a quiet spell says how many were suppressed.
//!
//! Reload and expiry lines are not limited: they are rare by construction (once per file
//! version, once per certificate).

use std::sync::Mutex;
use std::time::Instant;

/// A handshake, connection or stream refused for a transport reason (limit reached,
/// malformed or oversized frame, too slow, peer aborted the handshake).
pub const TRANSPORT_REJECTED: &str = "transport.rejected";
/// A peer refused for a security reason: its certificate does not verify (unknown CA,
/// expired, not yet valid, wrong name), it names no acceptable identity, or its connection
/// was closed because its CA was removed from the bundle.
pub const SECURITY_REJECTED: &str = "security.rejected";
/// The node's certificate and key, or the CA bundle, were reloaded from their files.
pub const TLS_RELOADED: &str = "tls.reloaded";
/// A changed certificate, key or CA bundle could not be loaded; the previous one stays.
pub const TLS_RELOAD_FAILED: &str = "tls.reload_failed";
/// The node's own certificate expires soon, has expired, or is not valid yet.
pub const TLS_EXPIRING: &str = "tls.expiring";

/// Lines per second a [`LogLimiter`] lets through in the long run (and its burst).
pub(crate) const REJECTION_LINES_PER_SECOND: u32 = 10;

/// A token bucket for log lines: at most `rate` lines per second on average, bursts of up
/// to `rate` lines.
pub(crate) struct LogLimiter {
    rate: f64,
    bucket: Mutex<Bucket>,
}

struct Bucket {
    tokens: f64,
    last: Instant,
    suppressed: u64,
}

impl LogLimiter {
    /// A full bucket of `rate` tokens, refilled at `rate` per second.
    pub(crate) fn new(rate: u32) -> LogLimiter {
        LogLimiter {
            rate: f64::from(rate),
            bucket: Mutex::new(Bucket {
                tokens: f64::from(rate),
                last: Instant::now(),
                suppressed: 0,
            }),
        }
    }

    /// Whether a line may be written now: `Some(n)` with the number of lines suppressed
    /// since the last one admitted, or `None` to stay silent.
    pub(crate) fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.last = now.max(b.last);
        b.tokens = (b.tokens + elapsed * self.rate).min(self.rate);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Some(std::mem::take(&mut b.suppressed))
        } else {
            b.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bursts_then_limits_then_reports_what_it_suppressed() {
        let limiter = LogLimiter::new(10);
        let start = Instant::now();
        let admitted = (0..100)
            .filter(|_| limiter.admit_at(start).is_some())
            .count();
        assert_eq!(admitted, 10);
        // A tenth of a second later one more line is due, and it reports the 90 it dropped.
        assert_eq!(
            limiter.admit_at(start + Duration::from_millis(100)),
            Some(90)
        );
        assert_eq!(limiter.admit_at(start + Duration::from_millis(100)), None);
        // After a long quiet spell the bucket is full again, but never fuller.
        let later = start + Duration::from_secs(60);
        let admitted = (0..100)
            .filter(|_| limiter.admit_at(later).is_some())
            .count();
        assert_eq!(admitted, 10);
    }
}

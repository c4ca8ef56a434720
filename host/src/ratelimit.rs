//! A rate limit for log lines that holds over every window, not just aligned ones. Used
//! for every line a remote peer can cause (`security.rejected`, `transport.rejected`).
//!
//! A peer sending garbage must not be able to fill the disk with warnings, yet the first
//! lines of an incident are the ones worth reading. So the limiter lets `limit` lines
//! through in any `period` and counts the rest, and the next line that gets through says
//! how many were held back. It remembers the times of the last `limit` lines it let
//! through: a fixed window (reset every second) would allow twice the limit across a
//! boundary, a token bucket a burst on top of the rate.
//!
//! Time comes in as an argument; an `Instant` earlier than one already seen counts as the
//! same moment, so a caller's clock can never make the limiter let more through.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Lets at most `limit` events through in any `period`.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    limit: usize,
    period: Duration,
    /// When the last (at most `limit`) events were let through, oldest first.
    recent: VecDeque<Instant>,
    /// Events held back since the last one let through.
    held_back: u64,
}

impl RateLimiter {
    /// A limiter for `limit` events per `period`; a limit of 0 holds everything back.
    pub fn new(limit: u32, period: Duration) -> RateLimiter {
        RateLimiter {
            limit: limit as usize,
            period,
            recent: VecDeque::new(),
            held_back: 0,
        }
    }

    /// Whether an event at `now` may go through: `Some(n)` if so, `n` being how many were
    /// held back since the last one that went through; `None` if it is held back.
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        while let Some(&oldest) = self.recent.front() {
            if now.saturating_duration_since(oldest) >= self.period {
                self.recent.pop_front();
            } else {
                break;
            }
        }
        if self.recent.len() < self.limit {
            self.recent.push_back(now);
            Some(std::mem::take(&mut self.held_back))
        } else {
            self.held_back = self.held_back.saturating_add(1);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn lets_the_limit_through_then_reports_what_it_held_back() {
        let t0 = Instant::now();
        let mut l = RateLimiter::new(3, Duration::from_secs(1));
        let got: Vec<_> = (0..5).map(|i| l.admit(t0 + i * MS)).collect();
        assert_eq!(got, [Some(0), Some(0), Some(0), None, None]);
        // One second after the first line, one more may go, carrying the count.
        assert_eq!(l.admit(t0 + 999 * MS), None);
        assert_eq!(l.admit(t0 + 1000 * MS), Some(3));
        assert_eq!(l.admit(t0 + 1000 * MS), None);
        assert_eq!(l.admit(t0 + 1002 * MS), Some(1));
    }

    #[test]
    fn no_sliding_window_sees_more_than_the_limit() {
        let t0 = Instant::now();
        let mut l = RateLimiter::new(10, Duration::from_secs(1));
        let mut passed = Vec::new();
        let mut held = 0;
        let mut reported = 0;
        // An event every 7 ms for 5 s: about 143 per second offered.
        for i in 0..715u32 {
            let t = t0 + i * 7 * MS;
            match l.admit(t) {
                Some(n) => {
                    reported += n;
                    passed.push(t);
                }
                None => held += 1,
            }
        }
        for (i, &start) in passed.iter().enumerate() {
            let in_window = passed[i..]
                .iter()
                .take_while(|&&t| t < start + Duration::from_secs(1))
                .count();
            assert!(in_window <= 10, "{in_window} lines in the second from {i}");
        }
        assert!(passed.len() >= 50, "{}", passed.len());
        // Every held-back event is reported by a later line, except the last run's.
        assert_eq!(reported + l.held_back, held);
    }

    #[test]
    fn time_going_backwards_lets_nothing_more_through() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut l = RateLimiter::new(2, Duration::from_secs(1));
        assert!(l.admit(t0).is_some());
        assert!(l.admit(t0).is_some());
        assert!(l.admit(t0 - Duration::from_secs(5)).is_none());
        assert_eq!(l.admit(t0 + Duration::from_secs(1)), Some(1));
    }

    #[test]
    fn a_zero_limit_holds_everything_back() {
        let mut l = RateLimiter::new(0, Duration::from_secs(1));
        let t0 = Instant::now();
        assert!(l.admit(t0).is_none());
        assert!(l.admit(t0 + Duration::from_secs(60)).is_none());
    }
}

//! When this node last heard a leader, per term: the voter's half of the lease handoff.
//!
//! A renewal the old leader acknowledged was received at some time a, and acknowledged
//! only after a quorum heartbeat round that began after a: every voter of that quorum
//! accepted an append from the old leader at or after a (and the old leader itself acted
//! as leader then). A new leader asks a majority how long ago each last heard a leader of
//! an older term; that majority contains a voter of every such quorum, so the latest of
//! the answers is no earlier than a, and a session clock started there expires no
//! session before its owner's deadline (`node/handoff.rs` has the whole argument).
//!
//! Recorded here: every AppendEntries this node accepted (any answer but "higher vote":
//! a conflict still accepts the sender as leader of its term), and every quorum round
//! this node confirmed as leader before acknowledging a renewal. Times are monotonic
//! (`Instant`), so they mean nothing across a restart: a restarted node has heard no one,
//! and the asker then takes the most cautious answer.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Terms remembered; older ones are dropped (only the latest below an asker's term
/// matters, and terms only grow).
const TERMS_KEPT: usize = 8;

#[derive(Default)]
pub(crate) struct Heard {
    /// term → the latest time a leader of that term was heard (or this node led it).
    last: Mutex<BTreeMap<u64, Instant>>,
}

impl Heard {
    /// Records that a leader of `term` was heard at `at`.
    pub(crate) fn record(&self, term: u64, at: Instant) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let entry = last.entry(term).or_insert(at);
        *entry = (*entry).max(at);
        while last.len() > TERMS_KEPT {
            last.pop_first();
        }
    }

    /// How long before `now` a leader of a term below `term` was last heard; `None` if
    /// none was since this process started.
    pub(crate) fn since_below(&self, term: u64, now: Instant) -> Option<Duration> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let latest = last.range(..term).map(|(_, at)| *at).max()?;
        Some(now.saturating_duration_since(latest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_older_terms_count_and_the_latest_of_them() {
        let heard = Heard::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(heard.since_below(5, t0), None);
        heard.record(3, t0);
        heard.record(3, t0 + ms(100));
        heard.record(3, t0 + ms(50));
        heard.record(4, t0 + ms(30));
        // The new leader's own term (5) does not count against itself.
        heard.record(5, t0 + ms(400));
        assert_eq!(heard.since_below(5, t0 + ms(500)), Some(ms(400)));
        assert_eq!(heard.since_below(4, t0 + ms(500)), Some(ms(400)));
        assert_eq!(heard.since_below(6, t0 + ms(500)), Some(ms(100)));
        assert_eq!(heard.since_below(3, t0 + ms(500)), None);
    }
}

//! What a receiver remembers about each sender, in bounded memory.
//!
//! Per sender: the highest incarnation accepted and its [`SeqWindow`]. The table holds at
//! most `max_senders` entries and forgets the least recently accepted sender to make room
//! for a new one; the module essay explains why that is safe, through the watermark kept
//! here: the newest `sent_at_ms` of any sender forgotten so far. Entries made after a
//! forgetting are floored at the watermark, so that no envelope accepted before it can be
//! accepted again after it.
//!
//! Finding the least recently used entry scans the table. That happens only when a sender
//! the table does not know arrives while the table is full, which takes thousands of
//! certified senders; in exchange, the common path (a known sender) only bumps a counter.

use std::collections::HashMap;

use super::Rejection;
use super::window::SeqWindow;

/// The replay state of every sender heard from recently.
#[derive(Debug)]
pub(super) struct ReplayTable {
    senders: HashMap<String, SenderState>,
    max_senders: usize,
    /// Counts admissions; an entry's `last_used` is the count at its last admission.
    tick: u64,
    /// The newest `sent_at_ms` accepted from any sender since forgotten; `None` until the
    /// first forgetting.
    watermark_ms: Option<u64>,
}

/// One sender's replay state.
#[derive(Debug)]
struct SenderState {
    incarnation: u64,
    window: SeqWindow,
    /// The newest `sent_at_ms` accepted, which becomes the watermark if this is forgotten.
    newest_sent_at_ms: u64,
    /// Envelopes sent at or before this are refused: the watermark when this entry was made.
    floor_ms: Option<u64>,
    last_used: u64,
}

impl ReplayTable {
    /// An empty table for at most `max_senders` senders (at least one).
    pub fn new(max_senders: usize) -> ReplayTable {
        ReplayTable {
            senders: HashMap::new(),
            max_senders: max_senders.max(1),
            tick: 0,
            watermark_ms: None,
        }
    }

    /// Accepts `(incarnation, seq)` from `sender` if it is new, and remembers it. The
    /// caller has already checked everything else about the envelope.
    pub fn admit(
        &mut self,
        sender: &str,
        incarnation: u64,
        seq: u64,
        sent_at_ms: u64,
    ) -> Result<(), Rejection> {
        self.tick = self.tick.wrapping_add(1);
        let tick = self.tick;
        if let Some(state) = self.senders.get_mut(sender) {
            state.admit(incarnation, seq, sent_at_ms)?;
            state.last_used = tick;
            return Ok(());
        }
        // The floor is the watermark before making room: the sender about to be forgotten
        // is not this one, so its envelopes need not hold this one back.
        let floor_ms = self.watermark_ms;
        check_floor(floor_ms, incarnation, seq, sent_at_ms)?;
        if self.senders.len() >= self.max_senders {
            self.forget_least_recently_used();
        }
        self.senders.insert(
            sender.to_owned(),
            SenderState {
                incarnation,
                window: SeqWindow::starting_at(seq),
                newest_sent_at_ms: sent_at_ms,
                floor_ms,
                last_used: tick,
            },
        );
        Ok(())
    }

    /// Forgets `sender` without raising the watermark: for a member the cluster removed
    /// (see the module essay of `envelope`, "A removed member").
    pub fn forget(&mut self, sender: &str) {
        self.senders.remove(sender);
    }

    /// How many senders the table remembers.
    pub fn len(&self) -> usize {
        self.senders.len()
    }

    fn forget_least_recently_used(&mut self) {
        let victim = self
            .senders
            .iter()
            .min_by_key(|(_, state)| state.last_used)
            .map(|(name, _)| name.clone());
        if let Some(state) = victim.and_then(|name| self.senders.remove(&name)) {
            let newest = state.newest_sent_at_ms;
            self.watermark_ms = Some(self.watermark_ms.map_or(newest, |w| w.max(newest)));
        }
    }
}

impl SenderState {
    fn admit(&mut self, incarnation: u64, seq: u64, sent_at_ms: u64) -> Result<(), Rejection> {
        check_floor(self.floor_ms, incarnation, seq, sent_at_ms)?;
        if incarnation < self.incarnation {
            return Err(Rejection::StaleIncarnation {
                incarnation,
                current: self.incarnation,
            });
        }
        if incarnation > self.incarnation {
            // The sender restarted: its numbering starts over.
            self.incarnation = incarnation;
            self.window = SeqWindow::starting_at(seq);
        } else {
            self.window.check(seq).map_err(|why| Rejection::Replay {
                incarnation,
                seq,
                why,
            })?;
            self.window.accept(seq);
        }
        self.newest_sent_at_ms = self.newest_sent_at_ms.max(sent_at_ms);
        Ok(())
    }
}

/// Refuses an envelope sent no later than `floor_ms`, which this table may have accepted
/// before it forgot the sender.
fn check_floor(
    floor_ms: Option<u64>,
    incarnation: u64,
    seq: u64,
    sent_at_ms: u64,
) -> Result<(), Rejection> {
    match floor_ms {
        Some(floor) if sent_at_ms <= floor => Err(Rejection::Replay {
            incarnation,
            seq,
            why: "sent before this node last forgot a sender's replay state",
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(result: Result<(), Rejection>) -> &'static str {
        match result {
            Err(Rejection::Replay { why, .. }) => why,
            Err(Rejection::StaleIncarnation { .. }) => "stale",
            other => panic!("expected a replay or stale rejection, got {other:?}"),
        }
    }

    #[test]
    fn incarnations_order_and_restart_the_window() {
        let mut t = ReplayTable::new(8);
        t.admit("n1", 5, 100, 1_000).unwrap();
        t.admit("n1", 5, 99, 1_000).unwrap();
        assert_eq!(why(t.admit("n1", 5, 99, 1_000)), "already accepted");
        assert_eq!(why(t.admit("n1", 4, 1_000, 1_000)), "stale");
        // A restart numbers from 1 again.
        t.admit("n1", 6, 1, 2_000).unwrap();
        assert_eq!(why(t.admit("n1", 5, 101, 2_000)), "stale");
        assert_eq!(why(t.admit("n1", 6, 1, 2_000)), "already accepted");
        // Senders are independent.
        t.admit("n2", 1, 1, 2_000).unwrap();
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn the_table_is_bounded_and_forgets_the_least_recently_used() {
        let mut t = ReplayTable::new(3);
        t.admit("a", 1, 1, 10).unwrap();
        t.admit("b", 1, 1, 20).unwrap();
        t.admit("c", 1, 1, 30).unwrap();
        // Using `a` makes `b` the least recently used.
        t.admit("a", 1, 2, 40).unwrap();
        t.admit("d", 1, 1, 50).unwrap();
        assert_eq!(t.len(), 3);
        assert!(t.senders.contains_key("a") && !t.senders.contains_key("b"));
        assert_eq!(t.watermark_ms, Some(20));
        for i in 0..1000 {
            t.admit(&format!("x{i}"), 1, 1, 100 + i).unwrap();
            assert!(t.len() <= 3);
        }
    }

    #[test]
    fn a_forgotten_sender_cannot_replay_what_was_accepted_before() {
        let mut t = ReplayTable::new(1);
        t.admit("a", 1, 1, 1_000).unwrap();
        t.admit("a", 1, 3, 1_010).unwrap();
        t.admit("b", 1, 1, 1_020).unwrap(); // forgets `a`; watermark 1010
        // Both of `a`'s envelopes, and anything sent at the same time, are refused...
        assert_eq!(
            why(t.admit("a", 1, 1, 1_000)),
            "sent before this node last forgot a sender's replay state"
        );
        assert!(t.admit("a", 1, 3, 1_010).is_err());
        assert!(t.admit("a", 1, 2, 1_005).is_err());
        // ... but `a`'s later envelopes are welcome, and make a floored entry.
        t.admit("a", 1, 4, 1_011).unwrap();
        assert_eq!(t.senders["a"].floor_ms, Some(1_010));
        assert_eq!(t.watermark_ms, Some(1_020));
        // The floored entry keeps refusing what was sent before the forgetting, even a
        // number its window has never seen...
        assert!(t.admit("a", 1, 2, 1_005).is_err());
        // ... and accepts the rest as usual.
        t.admit("a", 1, 5, 1_012).unwrap();
        assert_eq!(why(t.admit("a", 1, 5, 1_012)), "already accepted");
    }

    #[test]
    fn a_removed_sender_is_forgotten_without_a_watermark() {
        // n3 ran with its clock an hour ahead; its data dir was lost, it was removed, and
        // it comes back with a correct clock: a lower incarnation and earlier send times.
        let mut t = ReplayTable::new(8);
        t.admit("n3", 3_600_000_000, 5, 3_600_000).unwrap();
        assert_eq!(why(t.admit("n3", 1_000, 1, 1)), "stale");
        t.forget("n3");
        t.admit("n3", 1_000, 1, 1).unwrap();
        assert_eq!(t.watermark_ms, None);
        assert_eq!(why(t.admit("n3", 1_000, 1, 1)), "already accepted");
    }

    #[test]
    fn rejections_leave_no_trace() {
        let mut t = ReplayTable::new(4);
        t.admit("a", 2, 10, 100).unwrap();
        assert!(t.admit("a", 1, 11, 100).is_err());
        assert!(t.admit("a", 2, 10, 100).is_err());
        assert_eq!(t.senders["a"].incarnation, 2);
        assert_eq!(t.senders["a"].window.highest(), 10);
    }
}

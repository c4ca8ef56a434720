//! The anti-replay sliding window of one incarnation of one sender.
//!
//! Envelopes arrive out of order (one QUIC stream per request), so the window remembers
//! not just the highest sequence number accepted but which of the [`REPLAY_WINDOW`]
//! numbers below it were accepted too: any of those not yet seen is still welcome, once.
//! This is the scheme of IPsec (RFC 4303 §3.4.3) and DTLS (RFC 6347 §4.1.2.6).
//!
//! The bitmap is a ring indexed by `seq % REPLAY_WINDOW`: moving the window forward
//! clears the positions that now stand for new numbers, instead of shifting every word.
//! The window covers `highest - 1023 ..= highest`, 1024 distinct positions of the ring.

use super::REPLAY_WINDOW;

/// Bits per bitmap word.
const WORD: u64 = u64::BITS as u64;

/// How many words hold the window's bits.
const WORDS: usize = (REPLAY_WINDOW / WORD) as usize;

/// The highest sequence number accepted and which of the ones below it were.
#[derive(Clone, Debug)]
pub(super) struct SeqWindow {
    highest: u64,
    seen: [u64; WORDS],
}

impl SeqWindow {
    /// A window whose first accepted sequence number is `seq`.
    pub fn starting_at(seq: u64) -> SeqWindow {
        let mut window = SeqWindow {
            highest: seq,
            seen: [0; WORDS],
        };
        window.set(seq);
        window
    }

    /// Whether `seq` may be accepted; if not, why (the `why` of a replay rejection).
    pub fn check(&self, seq: u64) -> Result<(), &'static str> {
        if seq > self.highest {
            return Ok(());
        }
        if self.highest - seq >= REPLAY_WINDOW {
            return Err("too old for the replay window");
        }
        if self.is_set(seq) {
            return Err("already accepted");
        }
        Ok(())
    }

    /// Records `seq` as accepted. Call only after [`SeqWindow::check`] passed.
    pub fn accept(&mut self, seq: u64) {
        if seq > self.highest {
            let advance = seq - self.highest;
            if advance >= REPLAY_WINDOW {
                self.seen = [0; WORDS];
            } else {
                // The positions of highest+1 ..= seq held numbers that have now fallen out
                // of the window (or were never set); at most 1023 of them.
                for s in self.highest + 1..=seq {
                    self.clear(s);
                }
            }
            self.highest = seq;
        }
        self.set(seq);
    }

    /// The highest sequence number accepted.
    #[cfg(test)]
    pub fn highest(&self) -> u64 {
        self.highest
    }

    fn position(seq: u64) -> (usize, u64) {
        let bit = seq % REPLAY_WINDOW;
        ((bit / WORD) as usize, 1 << (bit % WORD))
    }

    fn is_set(&self, seq: u64) -> bool {
        let (word, mask) = Self::position(seq);
        self.seen[word] & mask != 0
    }

    fn set(&mut self, seq: u64) {
        let (word, mask) = Self::position(seq);
        self.seen[word] |= mask;
    }

    fn clear(&mut self, seq: u64) {
        let (word, mask) = Self::position(seq);
        self.seen[word] &= !mask;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    /// Checks and, if allowed, accepts.
    fn offer(window: &mut SeqWindow, seq: u64) -> Result<(), &'static str> {
        window.check(seq)?;
        window.accept(seq);
        Ok(())
    }

    #[test]
    fn reordered_numbers_are_accepted_once() {
        let mut w = SeqWindow::starting_at(10);
        assert_eq!(offer(&mut w, 12), Ok(()));
        assert_eq!(offer(&mut w, 11), Ok(()));
        assert_eq!(offer(&mut w, 11), Err("already accepted"));
        assert_eq!(offer(&mut w, 10), Err("already accepted"));
        assert_eq!(offer(&mut w, 12), Err("already accepted"));
        assert_eq!(offer(&mut w, 9), Ok(()));
        assert_eq!(w.highest(), 12);
    }

    #[test]
    fn the_window_edge_is_exact() {
        let mut w = SeqWindow::starting_at(5000);
        assert_eq!(
            offer(&mut w, 5000 - 1024),
            Err("too old for the replay window")
        );
        assert_eq!(offer(&mut w, 5000 - 1023), Ok(()));
        assert_eq!(offer(&mut w, 5000 - 1023), Err("already accepted"));
        // Moving forward by one drops the oldest position out of the window.
        assert_eq!(offer(&mut w, 5001), Ok(()));
        assert_eq!(offer(&mut w, 5001 - 1023), Ok(()));
        assert_eq!(
            offer(&mut w, 5000 - 1023),
            Err("too old for the replay window")
        );
    }

    #[test]
    fn a_long_jump_forgets_everything_below() {
        let mut w = SeqWindow::starting_at(1);
        for s in 2..=100 {
            offer(&mut w, s).unwrap();
        }
        offer(&mut w, 100 + 5 * REPLAY_WINDOW).unwrap();
        assert_eq!(offer(&mut w, 100), Err("too old for the replay window"));
        // A position reused by the ring after the jump is not mistaken for an old one.
        assert_eq!(offer(&mut w, 100 + 4 * REPLAY_WINDOW + 1), Ok(()));
    }

    #[test]
    fn extremes_do_not_overflow() {
        let mut w = SeqWindow::starting_at(0);
        assert_eq!(offer(&mut w, u64::MAX), Ok(()));
        assert_eq!(offer(&mut w, u64::MAX), Err("already accepted"));
        assert_eq!(offer(&mut w, u64::MAX - 1023), Ok(()));
        assert_eq!(offer(&mut w, 0), Err("too old for the replay window"));
    }

    /// The window's rule, stated naively: remember every number ever accepted.
    struct Model {
        highest: u64,
        accepted: BTreeSet<u64>,
    }

    impl Model {
        fn offer(&mut self, seq: u64) -> Result<(), &'static str> {
            if seq <= self.highest && self.highest - seq >= REPLAY_WINDOW {
                return Err("too old for the replay window");
            }
            if !self.accepted.insert(seq) {
                return Err("already accepted");
            }
            self.highest = self.highest.max(seq);
            Ok(())
        }
    }

    proptest! {
        /// Random walks around the window's edges agree with the naive model.
        #[test]
        fn agrees_with_a_model_that_remembers_everything(
            start in 0u64..3000,
            steps in prop::collection::vec(-1100i64..1100, 1..400),
        ) {
            let mut window = SeqWindow::starting_at(start);
            let mut model = Model { highest: start, accepted: BTreeSet::from([start]) };
            let mut cursor = start as i64;
            for step in steps {
                cursor = (cursor + step).max(0);
                let seq = cursor as u64;
                prop_assert_eq!(offer(&mut window, seq), model.offer(seq), "seq {}", seq);
            }
        }
    }
}

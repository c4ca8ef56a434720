//! The proposer's half of "a retried command never applies twice" (`cluster/once.rs`):
//! this run's command numbers, and which of them are still in flight.
//!
//! A command gets its number once, when `propose` is called, and keeps it through every
//! retry, so every copy of it that reaches the log carries the same number and the state
//! machine applies the first and answers the others from it. `low` is the lowest number
//! still in flight: every number below it has its answer (or its proposer gave up), so
//! the state machine may forget those answers and refuse any copy that comes later.
//!
//! The state machine keeps at most `cluster::MAX_ANSWERS` answers per run; so that it
//! never has to forget an answer a proposer still waits for, a run never has more numbers
//! than that between its lowest in flight and its next: [`Stamps::take`] waits for room.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

use crate::cluster::MAX_ANSWERS;

/// This run's numbering.
#[derive(Debug)]
pub(super) struct Stamps {
    inner: Arc<Mutex<Inner>>,
}

impl Inner {
    /// Whether `count` more numbers keep the run within [`MAX_ANSWERS`] of its lowest in
    /// flight (always, with none in flight).
    fn has_room(&self, count: usize) -> bool {
        let low = self.in_flight.first().copied().unwrap_or(self.next);
        self.in_flight.is_empty() || self.next + count as u64 - low <= MAX_ANSWERS as u64
    }
}

#[derive(Debug)]
struct Inner {
    /// The next number to give.
    next: u64,
    in_flight: BTreeSet<u64>,
    /// Woken when numbers are settled.
    settled: Arc<Notify>,
}

impl Default for Stamps {
    fn default() -> Self {
        Stamps {
            inner: Arc::new(Mutex::new(Inner {
                next: 1,
                in_flight: BTreeSet::new(),
                settled: Arc::new(Notify::new()),
            })),
        }
    }
}

impl Stamps {
    /// `count` new numbers, in flight until the returned [`Numbers`] is dropped; `None`
    /// if there was no room for them by `deadline` (the run's oldest number in flight is
    /// [`MAX_ANSWERS`] behind). A run with nothing in flight always has room.
    pub(super) async fn take(&self, count: usize, deadline: Instant) -> Option<Numbers> {
        loop {
            let settled = {
                let mut inner = self.lock();
                if inner.has_room(count) {
                    let first = inner.next;
                    inner.next += count as u64;
                    let seqs: Vec<u64> = (first..inner.next).collect();
                    inner.in_flight.extend(&seqs);
                    return Some(Numbers {
                        seqs,
                        inner: self.inner.clone(),
                    });
                }
                inner.settled.clone()
            };
            // Registered before the second look, so a settlement in between wakes it.
            let woken = settled.notified();
            if self.lock().has_room(count) {
                continue;
            }
            if tokio::time::timeout_at(deadline.into(), woken)
                .await
                .is_err()
            {
                return None;
            }
        }
    }

    /// The lowest number in flight (the next one to give when none is).
    pub(super) fn low(&self) -> u64 {
        let inner = self.lock();
        inner.in_flight.first().copied().unwrap_or(inner.next)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Numbers in flight: settled when dropped (the proposal returned, whatever its result).
#[derive(Debug)]
pub(super) struct Numbers {
    pub(super) seqs: Vec<u64>,
    inner: Arc<Mutex<Inner>>,
}

impl Drop for Numbers {
    fn drop(&mut self) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for seq in &self.seqs {
            inner.in_flight.remove(seq);
        }
        inner.settled.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soon() -> Instant {
        Instant::now() + std::time::Duration::from_secs(5)
    }

    #[tokio::test]
    async fn low_is_the_lowest_number_in_flight() {
        let stamps = Stamps::default();
        assert_eq!(stamps.low(), 1);
        let a = stamps.take(2, soon()).await.unwrap();
        let b = stamps.take(1, soon()).await.unwrap();
        assert_eq!(
            (a.seqs.as_slice(), b.seqs.as_slice()),
            (&[1, 2][..], &[3][..])
        );
        assert_eq!(stamps.low(), 1);
        drop(a);
        assert_eq!(stamps.low(), 3);
        drop(b);
        assert_eq!(stamps.low(), 4, "none in flight: the next");
    }

    /// A run never spans more numbers than the state machine keeps answers for: a take
    /// that would waits until the oldest number in flight is settled, or gives up at its
    /// deadline.
    #[tokio::test]
    async fn a_take_waits_for_room_behind_the_oldest_number_in_flight() {
        let stamps = Arc::new(Stamps::default());
        let oldest = stamps.take(1, soon()).await.unwrap();
        let rest = stamps.take(MAX_ANSWERS - 1, soon()).await.unwrap();
        let late = Instant::now() + std::time::Duration::from_millis(50);
        assert!(stamps.take(1, late).await.is_none(), "no room: gave up");
        let waiting = {
            let stamps = stamps.clone();
            tokio::spawn(async move { stamps.take(1, soon()).await.map(|n| n.seqs.clone()) })
        };
        tokio::task::yield_now().await;
        drop(oldest);
        let seqs = waiting.await.unwrap().unwrap();
        assert_eq!(seqs, [MAX_ANSWERS as u64 + 1]);
        drop(rest);
        // With nothing in flight, a batch larger than the window is taken all the same.
        assert!(stamps.take(MAX_ANSWERS + 5, soon()).await.is_some());
    }
}

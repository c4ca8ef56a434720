//! Per-kind counters of signed calls: sent, failed, served.
//!
//! Plain relaxed atomics, one row per message kind below [`KINDS`] and one shared row for
//! every higher kind, so counting never allocates or locks on the call path. What the
//! kinds mean is not this module's business (`crate::raft` numbers them); a snapshot
//! lists only kinds that saw traffic. Like the transport's counters, each value is exact
//! on its own, a snapshot is not a consistent cut across them, and nothing is persisted.

use std::sync::atomic::{AtomicU64, Ordering};

/// Kinds `0..KINDS` are counted apart; higher kinds share the row of kind `KINDS`.
pub const KINDS: u16 = 128;

/// The counters of one message kind since the endpoint was bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindCount {
    /// The message kind; [`KINDS`] stands for every kind at or above it.
    pub kind: u16,
    /// Calls this node made (one per [`super::Rpc::call`], whatever the retries).
    pub sent: u64,
    /// Of those, calls that returned an error (unreachable, refused, rejected answer).
    pub failed: u64,
    /// Requests from peers that passed the envelope gate and went to the service.
    pub served: u64,
}

#[derive(Default)]
struct Row {
    sent: AtomicU64,
    failed: AtomicU64,
    served: AtomicU64,
}

/// The live counters behind [`KindCount`].
pub(crate) struct Counts {
    rows: Box<[Row]>,
}

impl Default for Counts {
    fn default() -> Self {
        Self {
            rows: (0..=KINDS).map(|_| Row::default()).collect(),
        }
    }
}

impl Counts {
    fn row(&self, kind: u16) -> &Row {
        &self.rows[usize::from(kind.min(KINDS))]
    }

    pub(crate) fn sent(&self, kind: u16) {
        self.row(kind).sent.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn failed(&self, kind: u16) {
        self.row(kind).failed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn served(&self, kind: u16) {
        self.row(kind).served.fetch_add(1, Ordering::Relaxed);
    }

    /// The kinds that saw any traffic, in kind order.
    pub(crate) fn snapshot(&self) -> Vec<KindCount> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        self.rows
            .iter()
            .zip(0u16..)
            .map(|(row, kind)| KindCount {
                kind,
                sent: get(&row.sent),
                failed: get(&row.failed),
                served: get(&row.served),
            })
            .filter(|c| c.sent + c.served > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_counted_apart_and_high_kinds_share_a_row() {
        let counts = Counts::default();
        counts.sent(1);
        counts.sent(1);
        counts.failed(1);
        counts.served(20);
        counts.served(500);
        counts.sent(u16::MAX);
        assert_eq!(
            counts.snapshot(),
            [
                KindCount {
                    kind: 1,
                    sent: 2,
                    failed: 1,
                    served: 0
                },
                KindCount {
                    kind: 20,
                    sent: 0,
                    failed: 0,
                    served: 1
                },
                KindCount {
                    kind: KINDS,
                    sent: 1,
                    failed: 0,
                    served: 1
                },
            ]
        );
    }
}

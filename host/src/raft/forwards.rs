//! A cap on the proposals a node forwards to the leader at once.
//!
//! A follower that gives up thousands of slots at once (a rebalance moved them away, or
//! its plugins all stopped) proposes a release for each, and each is one forwarded call.
//! All at once they take every stream the connection to the leader allows, and the calls
//! that keep the node alive wait behind them for stream credit: its lease renewals go to
//! the leader on the same connection. In the 10,000-resource bench a node that released
//! about 4,000 slots in a few seconds had its releases time out after 5 s and lost its
//! lease. So at most [`FORWARDS`] proposals are forwarded at a time; the others wait
//! here, before anything is sent, so a wait that runs out is a proposal certainly not
//! appended (retried, then refused with the wait as the reason), never one that may have
//! been. [`FORWARDS`] is a quarter of the streams a connection allows
//! (`transport::TransportConfig`'s default), which leaves the rest to renewals and to
//! answering the leader's own calls.

use std::time::Instant;

use tokio::sync::{Semaphore, SemaphorePermit};

/// How many proposals one node forwards to the leader at once.
pub(super) const FORWARDS: usize = 16;

/// The forwarding slots.
pub(super) struct Forwards {
    permits: Semaphore,
    /// The most forwards seen in flight at once (the tests check the cap).
    #[cfg(test)]
    most: std::sync::atomic::AtomicUsize,
}

impl Default for Forwards {
    fn default() -> Self {
        Self {
            permits: Semaphore::new(FORWARDS),
            #[cfg(test)]
            most: Default::default(),
        }
    }
}

impl Forwards {
    /// Waits for a slot until `deadline`; `None` if none came free by then.
    pub(super) async fn slot(&self, deadline: Instant) -> Option<SemaphorePermit<'_>> {
        let permit = tokio::time::timeout_at(deadline.into(), self.permits.acquire())
            .await
            .ok()?
            .expect("the semaphore is never closed");
        #[cfg(test)]
        self.most.fetch_max(
            FORWARDS - self.permits.available_permits(),
            std::sync::atomic::Ordering::Relaxed,
        );
        Some(permit)
    }

    /// The most forwards in flight at once so far.
    #[cfg(test)]
    pub(super) fn most(&self) -> usize {
        self.most.load(std::sync::atomic::Ordering::Relaxed)
    }
}

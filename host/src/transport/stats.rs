//! Counters of what the transport refused, retired, retried and reloaded.
//!
//! Log lines about refusals are rate-limited; these counters are not, so they are the
//! truthful record (for metrics, and for tests that must see a refusal happen). They are
//! plain relaxed atomics: each is exact on its own, a [`TransportStats`] snapshot is not a
//! consistent cut across them, and nothing here is persisted.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the transport's counters since it was bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Incoming handshakes we refused for a security reason (certificate, identity).
    pub handshakes_rejected: u64,
    /// Incoming handshakes that failed otherwise (peer aborted, timed out, bad ALPN).
    pub handshakes_failed: u64,
    /// Initials answered with a QUIC Retry (their address was not yet validated);
    /// nothing is kept for them.
    pub retries: u64,
    /// Handshakes in progress abandoned for a newer one because `max_handshakes` were
    /// in progress.
    pub handshakes_evicted: u64,
    /// Authenticated connections refused because `max_connections` was reached or the
    /// peer's identity held `max_connections_per_peer` already.
    pub connections_refused: u64,
    /// Connections retired because the peer's certificate no longer verifies.
    pub connections_retired: u64,
    /// Incoming streams closed for a bad or oversized frame, or for being too slow.
    pub streams_rejected: u64,
    /// Requests sent again on a new connection after a refusal that promised they had
    /// not been processed.
    pub requests_retried: u64,
    /// Handshakes refused, and established connections closed, because the peer's
    /// certificate is revoked (see `Transport::set_revoked`).
    pub revoked: u64,
    /// Successful reloads of the node certificate or the CA bundle.
    pub reloads: u64,
    /// Reload attempts that failed (each failing file version counts once).
    pub reload_failures: u64,
}

/// The live counters behind [`TransportStats`].
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) handshakes_rejected: AtomicU64,
    pub(crate) handshakes_failed: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) handshakes_evicted: AtomicU64,
    pub(crate) connections_refused: AtomicU64,
    pub(crate) connections_retired: AtomicU64,
    pub(crate) streams_rejected: AtomicU64,
    pub(crate) requests_retried: AtomicU64,
    pub(crate) revoked: AtomicU64,
    pub(crate) reloads: AtomicU64,
    pub(crate) reload_failures: AtomicU64,
}

impl Counters {
    /// Adds one to `counter`.
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The current values.
    pub(crate) fn snapshot(&self) -> TransportStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TransportStats {
            handshakes_rejected: get(&self.handshakes_rejected),
            handshakes_failed: get(&self.handshakes_failed),
            retries: get(&self.retries),
            handshakes_evicted: get(&self.handshakes_evicted),
            connections_refused: get(&self.connections_refused),
            connections_retired: get(&self.connections_retired),
            streams_rejected: get(&self.streams_rejected),
            requests_retried: get(&self.requests_retried),
            revoked: get(&self.revoked),
            reloads: get(&self.reloads),
            reload_failures: get(&self.reload_failures),
        }
    }
}

//! What a stranger, and what one certificate, may hold of a server: its budgets.
//!
//! Three budgets, each counted apart, so that using one up cannot take another:
//! - **Handshakes** ([`Handshakes`]): at most `max_handshakes` in progress at once. Only
//!   addresses that proved they receive our packets get one (`serve.rs` answers every
//!   other Initial with a stateless QUIC Retry). When all are taken, the **oldest** is
//!   abandoned for the newcomer: a handshake of a real peer finishes within a round trip
//!   or two, so it is never the oldest for long, while a handshake that stalls on purpose
//!   ages out as soon as newer ones arrive. Refusing the newcomer instead would hand the
//!   budget to whoever filled it first.
//! - **Established connections**: at most `max_connections` authenticated ones (a plain
//!   semaphore in [`super::Shared`]); checked after the handshake, when the peer's
//!   certificate is known.
//! - **Per identity** ([`PeerShares`]): one node or operator (whatever certificate it
//!   presents) holds at most `max_connections_per_peer` of those connections and has at
//!   most `max_requests_per_peer` requests being read or handled at once across them;
//!   its further streams wait unread at the QUIC layer, inside the receive windows.
//!
//! What it does not do: rate-limit by address (every peer of a test cluster, and every
//! client behind one NAT, shares one), or tell a real peer's handshake from a stalled one
//! (nothing about the peer is known until its certificate arrives, which is the end of
//! the handshake).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Semaphore, oneshot};

use crate::pki::Identity;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The handshakes in progress, oldest first.
pub(crate) struct Handshakes {
    max: usize,
    state: Arc<Mutex<Pending>>,
}

#[derive(Default)]
struct Pending {
    next: u64,
    /// Handshake number → the sender whose drop tells that handshake to give up.
    slots: BTreeMap<u64, oneshot::Sender<()>>,
}

/// One handshake's place in the budget; dropping it frees the place.
pub(crate) struct HandshakeSlot {
    id: u64,
    state: Arc<Mutex<Pending>>,
    evicted: oneshot::Receiver<()>,
}

impl Handshakes {
    pub(crate) fn new(max: usize) -> Handshakes {
        Handshakes {
            max,
            state: Arc::default(),
        }
    }

    /// A place for a new handshake. If every place is taken, the oldest handshake is told
    /// to give up and `true` comes back with the place.
    pub(crate) fn enter(&self) -> (HandshakeSlot, bool) {
        let mut pending = lock(&self.state);
        let mut evicted = false;
        while pending.slots.len() >= self.max {
            // Dropping the sender wakes that handshake's `evicted()`.
            pending.slots.pop_first();
            evicted = true;
        }
        let id = pending.next;
        pending.next += 1;
        let (tx, rx) = oneshot::channel();
        pending.slots.insert(id, tx);
        let slot = HandshakeSlot {
            id,
            state: self.state.clone(),
            evicted: rx,
        };
        (slot, evicted)
    }

    /// How many handshakes are in progress.
    #[cfg(test)]
    pub(crate) fn in_progress(&self) -> usize {
        lock(&self.state).slots.len()
    }
}

impl HandshakeSlot {
    /// Resolves when this handshake was abandoned for a newer one.
    pub(crate) async fn evicted(&mut self) {
        let _ = (&mut self.evicted).await;
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        lock(&self.state).slots.remove(&self.id);
    }
}

/// Each identity's connections and requests.
pub(crate) struct PeerShares {
    max_connections: usize,
    max_requests: usize,
    map: Arc<Mutex<HashMap<Identity, Share>>>,
}

struct Share {
    connections: usize,
    requests: Arc<Semaphore>,
}

/// One connection's hold on its identity's share; dropping it gives the connection back.
pub(crate) struct PeerShare {
    identity: Identity,
    map: Arc<Mutex<HashMap<Identity, Share>>>,
    /// The identity's requests, shared by all its connections.
    pub(crate) requests: Arc<Semaphore>,
}

impl PeerShares {
    pub(crate) fn new(max_connections: usize, max_requests: usize) -> PeerShares {
        PeerShares {
            max_connections,
            max_requests,
            map: Arc::default(),
        }
    }

    /// A place for one more connection of `identity`, or how many it holds already.
    pub(crate) fn admit(&self, identity: &Identity) -> Result<PeerShare, usize> {
        let mut map = lock(&self.map);
        let share = map.entry(identity.clone()).or_insert_with(|| Share {
            connections: 0,
            requests: Arc::new(Semaphore::new(self.max_requests)),
        });
        if share.connections >= self.max_connections {
            return Err(share.connections);
        }
        share.connections += 1;
        Ok(PeerShare {
            identity: identity.clone(),
            map: self.map.clone(),
            requests: share.requests.clone(),
        })
    }
}

impl Drop for PeerShare {
    fn drop(&mut self) {
        let mut map = lock(&self.map);
        if let Some(share) = map.get_mut(&self.identity) {
            share.connections -= 1;
            if share.connections == 0 {
                map.remove(&self.identity);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::Kind;

    #[tokio::test]
    async fn the_oldest_handshake_gives_way_to_a_newcomer() {
        let handshakes = Handshakes::new(2);
        let (mut first, evicted) = handshakes.enter();
        assert!(!evicted);
        let (second, evicted) = handshakes.enter();
        assert!(!evicted);
        let (_third, evicted) = handshakes.enter();
        assert!(evicted);
        first.evicted().await;
        assert_eq!(handshakes.in_progress(), 2);
        // A finished handshake frees its place: no eviction for the next one.
        drop(second);
        let (_fourth, evicted) = handshakes.enter();
        assert!(!evicted);
        drop(first);
        assert_eq!(handshakes.in_progress(), 2);
    }

    #[test]
    fn an_identity_holds_at_most_its_share() {
        let shares = PeerShares::new(2, 8);
        let n3 = Identity {
            kind: Kind::Node,
            name: "n3".into(),
        };
        let ops = Identity {
            kind: Kind::Operator,
            name: "n3".into(),
        };
        let a = shares.admit(&n3).unwrap();
        let b = shares.admit(&n3).unwrap();
        assert_eq!(shares.admit(&n3).err(), Some(2));
        // Another identity (even with the same name) has its own share.
        let _c = shares.admit(&ops).unwrap();
        // The identity's connections share one request budget.
        assert!(Arc::ptr_eq(&a.requests, &b.requests));
        drop(a);
        let _d = shares.admit(&n3).unwrap();
    }
}

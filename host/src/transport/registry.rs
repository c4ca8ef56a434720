//! The live connections, with their peers' chains, and how a connection is retired.
//!
//! Every established connection, dialed or accepted, is registered here with the peer
//! chain its handshake verified. When the CA bundle changes, each chain is verified again
//! against the new bundle ([`Registry::reverify`]); a connection that fails is **retired**:
//! no new request goes out on it or is taken from it (new incoming streams are refused with
//! `STREAM_REFUSED`, which tells the dialer it may retry elsewhere), requests already in
//! flight finish, and the connection closes with `CLOSE_RETIRED` the moment none is left
//! (or with `CLOSE_RETIRED_FORCED` after a grace period). Closing cleanly is what lets a
//! CA rotation run under load with no failed request, while the peer whose CA was removed
//! is still cut off within one request's time.
//!
//! A handshake that completes while a bundle is being installed could have been verified
//! against the old bundle after [`Registry::reverify`] ran; [`Registry::admit`] notices the
//! generation change under the same lock and verifies that chain itself.
//!
//! Our own certificate is tracked the same way. Each connection records the [`Local`]
//! identity its handshake presented; [`Registry::admit`] refuses a connection whose
//! handshake overlapped a certificate reload (the own-certificate generation changed), so
//! no connection is ever used without knowing which key the peer verifies us with. After a
//! reload, [`Registry::retire_all`] retires every connection, so that traffic moves to
//! connections presenting the new certificate; admit and retire_all take the same lock,
//! and the resolver serves the new certificate before retire_all runs, so no connection
//! with the old certificate can slip in between.
//!
//! **Revocation.** The registry also holds the set of revoked key fingerprints
//! ([`Registry::set_revoked`]; a peer is revoked when its leaf's key is). [`Registry::admit`] refuses a connection whose peer is in
//! it, and `set_revoked` returns the live connections whose peer is, under the same lock:
//! so a handshake that completes while the set changes is either refused by `admit` or
//! found by `set_revoked`, never neither. Which fingerprints are revoked is decided above
//! this layer (the replicated state); the transport only enforces the set it is given.
//!
//! **Keys seen.** The registry remembers, since the endpoint was bound, which key and
//! certificate each admitted peer presented ([`Registry::seen`], at most [`SEEN_MAX`]):
//! so that a revocation can be checked against the keys members and operators actually
//! used, and a typo, or a certificate's fingerprint given for its key's, is caught.
//!
//! Not here: which connection serves which peer name (that cache is `dial.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;
use quinn::Connection;
use rustls_pki_types::CertificateDer;

use super::PeerInfo;
use super::resolver::Local;
use super::tls::{TlsState, TrustGen};
use super::wire;

/// Who opened a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// We dialed the peer; our requests travel on it.
    Dialed,
    /// The peer dialed us; its requests travel on it.
    Accepted,
}

/// One established connection.
pub(crate) struct Live {
    pub(crate) conn: Connection,
    pub(crate) peer: PeerInfo,
    pub(crate) chain: Vec<CertificateDer<'static>>,
    pub(crate) direction: Direction,
    /// What we presented in this connection's handshake.
    pub(crate) local: Local,
    /// The own-certificate generation `local` belongs to.
    pub(crate) own_generation: u64,
    state: Mutex<LiveState>,
}

/// Why [`Registry::admit`] refused a connection.
pub(crate) enum Refused {
    /// The peer's chain no longer verifies against a bundle installed during the handshake.
    Untrusted(rustls::Error),
    /// Our certificate was reloaded during the handshake: which one the peer saw is unknown.
    OwnChanged,
    /// The peer's certificate is revoked.
    Revoked,
}

#[derive(Default)]
struct LiveState {
    in_flight: usize,
    retiring: bool,
}

/// A request in flight on a connection; dropping it ends the request.
pub(crate) struct InFlight {
    live: Arc<Live>,
}

impl InFlight {
    pub(crate) fn live(&self) -> &Arc<Live> {
        &self.live
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.live.lock();
        state.in_flight -= 1;
        if state.retiring && state.in_flight == 0 {
            self.live.conn.close(wire::CLOSE_RETIRED, b"retired");
        }
    }
}

impl Live {
    pub(crate) fn new(
        conn: Connection,
        peer: PeerInfo,
        chain: Vec<CertificateDer<'static>>,
        direction: Direction,
        local: Local,
        own_generation: u64,
    ) -> Live {
        Live {
            conn,
            peer,
            chain,
            direction,
            local,
            own_generation,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LiveState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a request on this connection, unless it is retiring or closed.
    pub(crate) fn begin(self: &Arc<Self>) -> Option<InFlight> {
        let mut state = self.lock();
        if state.retiring || self.conn.close_reason().is_some() {
            return None;
        }
        state.in_flight += 1;
        Some(InFlight { live: self.clone() })
    }

    /// Whether the connection is retiring.
    pub(crate) fn is_retiring(&self) -> bool {
        self.lock().retiring
    }

    /// Retires the connection: no new requests; closes cleanly once the requests in flight
    /// are done, or forcibly after `grace`. Returns false if it was already retiring.
    pub(crate) fn retire(self: &Arc<Self>, grace: Duration) -> bool {
        let mut state = self.lock();
        if state.retiring {
            return false;
        }
        state.retiring = true;
        if state.in_flight == 0 {
            self.conn.close(wire::CLOSE_RETIRED, b"retired");
        } else {
            let conn = self.conn.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = conn.closed() => {}
                    _ = tokio::time::sleep(grace) => {
                        conn.close(wire::CLOSE_RETIRED_FORCED, b"retired with requests in flight");
                    }
                }
            });
        }
        true
    }

    /// A stable key for the registry.
    fn id(&self) -> usize {
        self.conn.stable_id()
    }
}

/// The most keys [`Registry::seen`] remembers: far more than a cluster's members and
/// operators, few enough that a flood of certificates cannot grow it without bound.
pub(crate) const SEEN_MAX: usize = 4096;

/// A key a peer presented, with the identity and certificate it came with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenKey {
    /// Who the certificate speaks for.
    pub identity: crate::pki::Identity,
    /// The key's fingerprint (`pki::key_fingerprint`).
    pub key: String,
    /// The certificate's fingerprint (`pki::fingerprint`), the latest one seen with it.
    pub certificate: String,
}

/// All live connections, the revoked fingerprints and the keys seen.
#[derive(Default)]
pub(crate) struct Registry {
    map: Mutex<HashMap<usize, Arc<Live>>>,
    /// Changed only with `map` locked, so `admit` and `set_revoked` see one order.
    revoked: ArcSwap<BTreeSet<String>>,
    /// key fingerprint → what came with it; see the module doc.
    seen: Mutex<BTreeMap<String, SeenKey>>,
}

impl Registry {
    fn lock(&self) -> MutexGuard<'_, HashMap<usize, Arc<Live>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a connection whose handshake began under bundle `generation` and own
    /// certificate `live.own_generation`. If another bundle has been installed since, its
    /// chain is verified against that one first; if our certificate was reloaded since,
    /// the connection is refused (it may have presented either certificate).
    pub(crate) fn admit(
        &self,
        live: &Arc<Live>,
        generation: u64,
        tls: &TlsState,
    ) -> Result<(), Refused> {
        let mut map = self.lock();
        if tls.own.current().generation != live.own_generation {
            return Err(Refused::OwnChanged);
        }
        if self.revoked.load().contains(&live.peer.key) {
            return Err(Refused::Revoked);
        }
        let current = tls.current();
        if current.generation != generation {
            current
                .trust
                .check(live.direction, &live.peer.identity.name, &live.chain)
                .map_err(Refused::Untrusted)?;
        }
        map.insert(live.id(), live.clone());
        drop(map);
        self.remember(&live.peer);
        Ok(())
    }

    fn remember(&self, peer: &PeerInfo) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() >= SEEN_MAX && !seen.contains_key(&peer.key) {
            return;
        }
        seen.insert(
            peer.key.clone(),
            SeenKey {
                identity: peer.identity.clone(),
                key: peer.key.clone(),
                certificate: peer.fingerprint.clone(),
            },
        );
    }

    /// The keys peers presented since the endpoint was bound (see the module doc).
    pub(crate) fn seen(&self) -> Vec<SeenKey> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.values().cloned().collect()
    }

    /// Forgets a closed connection.
    pub(crate) fn remove(&self, live: &Live) {
        self.lock().remove(&live.id());
    }

    /// The connections whose peer chain does not verify against `trust`, with the reason.
    /// Called after `trust` was installed; holds the lock that [`Registry::admit`] takes.
    pub(crate) fn reverify(&self, trust: &TrustGen) -> Vec<(Arc<Live>, rustls::Error)> {
        self.lock()
            .values()
            .filter(|live| !live.is_retiring())
            .filter_map(|live| {
                trust
                    .trust
                    .check(live.direction, &live.peer.identity.name, &live.chain)
                    .err()
                    .map(|e| (live.clone(), e))
            })
            .collect()
    }

    /// Every connection not yet retiring, for retirement after our certificate changed.
    /// Called after the new certificate was installed; holds the lock that
    /// [`Registry::admit`] takes.
    pub(crate) fn retire_all(&self) -> Vec<Arc<Live>> {
        self.lock()
            .values()
            .filter(|live| !live.is_retiring())
            .cloned()
            .collect()
    }

    /// Replaces the revoked fingerprints and returns the connections (not yet closed)
    /// whose peer is in the new set; the caller closes them. Holds the lock that
    /// [`Registry::admit`] takes.
    pub(crate) fn set_revoked(&self, fingerprints: BTreeSet<String>) -> Vec<Arc<Live>> {
        let map = self.lock();
        let found = map
            .values()
            .filter(|live| live.conn.close_reason().is_none())
            .filter(|live| fingerprints.contains(&live.peer.key))
            .cloned()
            .collect();
        self.revoked.store(Arc::new(fingerprints));
        found
    }

    /// All live connections.
    pub(crate) fn all(&self) -> Vec<Arc<Live>> {
        self.lock().values().cloned().collect()
    }
}

//! The dialing side: one cached connection per peer name, one stream per request.
//!
//! A request finds the peer's cached connection or dials one (concurrent requests to a
//! peer without a connection wait for a single dial, and share its failure rather than
//! each dialing again), opens a bidirectional stream, writes one frame, and reads the
//! status and one frame back. All of it is bounded by `request_timeout`, the dial by
//! `dial_timeout`: a dial to an address where nothing listens gets no answer at all, so
//! only a short per-attempt bound makes a dead peer fail fast.
//!
//! After any failure or timeout the connection is dropped from the cache (and retired, so
//! it closes once its other requests are done): the next request dials afresh, which is
//! how a dead or restarted peer is noticed within one request. A failure is retried, at
//! most twice and each time on a new connection (`MAX_RETRIES`), only when the peer
//! promised it had not processed the request (see `wire.rs`); that is what keeps a CA rotation free of failed requests. The body is
//! made per attempt by the caller's closure, with the [`Local`] identity of the connection
//! used, so a signed body is always signed with the key the peer sees on that connection;
//! and only once the attempt holds a stream, so that a signed body's sequence number is
//! never taken long before it can be sent (see `exchange`).
//!
//! What it deliberately does not do: retry anything else (a request that may have run is
//! the caller's to resend, with the envelope layer's replay protection), back off, or
//! resolve names (the caller passes the address; the name is what TLS checks).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::error::{self, Failure, explain_tls};
use super::registry::{Direction, InFlight, Live, Refused};
use super::resolver::Local;
use super::stats::Counters;
use super::{PeerInfo, Shared, TransportError, frame, peer, wire};
use crate::events::SECURITY_REJECTED;
use crate::pki::{self, Identity, Kind};

/// How many times a request refused unprocessed is sent again, each time on a new
/// connection. Two, not one: a request refused by a connection retired for a rotation can
/// meet, on its new connection, a handshake that raced the peer's next certificate reload
/// (both nodes of a CA rotation reload within a poll of each other). Safe because only
/// refusals that promise the request did not run are retried.
const MAX_RETRIES: u32 = 2;

/// The connection cache: peer name → slot.
#[derive(Default)]
pub(crate) struct Peers {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
}

/// One peer's cached connection, and the lock that serializes dials to it.
#[derive(Default)]
struct Slot {
    cached: Mutex<Option<(SocketAddr, Arc<Live>)>>,
    dialing: tokio::sync::Mutex<Option<DialFailure>>,
}

/// The last failed dial of a slot, shared with the requests that waited for it.
struct DialFailure {
    at: Instant,
    addr: SocketAddr,
    error: TransportError,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Peers {
    fn slot(&self, peer: &str) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        match slots.get(peer) {
            Some(slot) => slot.clone(),
            None => slots.entry(peer.to_owned()).or_default().clone(),
        }
    }

    /// Drops `live` from `peer`'s slot if it is the cached connection.
    pub(crate) fn forget(&self, peer: &str, live: &Arc<Live>) {
        let slot = lock(&self.slots).get(peer).cloned();
        if let Some(slot) = slot {
            let mut cached = lock(&slot.cached);
            if cached.as_ref().is_some_and(|(_, c)| Arc::ptr_eq(c, live)) {
                *cached = None;
            }
        }
    }
}

impl Slot {
    /// Starts a request on the cached connection to `addr`, if there is a usable one. A
    /// cached connection to another address (the peer moved) is retired.
    fn reuse(&self, addr: SocketAddr, shared: &Shared) -> Option<InFlight> {
        let mut cached = lock(&self.cached);
        let (cached_addr, live) = cached.as_ref()?;
        if *cached_addr == addr
            && let Some(flight) = live.begin()
        {
            return Some(flight);
        }
        if let Some((_, old)) = cached.take() {
            old.retire(shared.config.request_timeout);
        }
        None
    }
}

impl Shared {
    /// Sends the body `make_body` makes for the connection in use to node `peer` at `addr`
    /// and returns its response body and the peer that answered.
    pub(crate) async fn request(
        self: &Arc<Self>,
        peer: &str,
        addr: SocketAddr,
        make_body: &(dyn Fn(&Local) -> Vec<u8> + Send + Sync),
    ) -> Result<(Vec<u8>, PeerInfo), TransportError> {
        if self.is_closing() {
            return Err(TransportError::Closed);
        }
        pki::validate_name(peer).map_err(|e| TransportError::InvalidPeer {
            peer: peer.to_owned(),
            reason: e.to_string(),
        })?;
        let used = Mutex::new(None);
        let timeout = self.config.request_timeout;
        // Bound to a variable so that a timed-out attempt, and the request slot it holds,
        // is dropped before the connection is abandoned.
        let outcome =
            tokio::time::timeout(timeout, self.attempt(peer, addr, make_body, &used)).await;
        match outcome {
            Ok(result) => result,
            Err(_) => {
                if let Some(live) = lock(&used).take() {
                    self.abandon(peer, &live);
                }
                Err(TransportError::Timeout {
                    peer: peer.to_owned(),
                    timeout,
                })
            }
        }
    }

    /// The request on a connection, and again on a new one (at most [`MAX_RETRIES`] times)
    /// if the peer refused it unprocessed. The body is made afresh for each connection,
    /// with what we presented on it, once the attempt's stream is open. Records the
    /// connection in use in `used` for the timeout path.
    async fn attempt(
        self: &Arc<Self>,
        peer: &str,
        addr: SocketAddr,
        make_body: &(dyn Fn(&Local) -> Vec<u8> + Send + Sync),
        used: &Mutex<Option<Arc<Live>>>,
    ) -> Result<(Vec<u8>, PeerInfo), TransportError> {
        let mut retries = 0;
        loop {
            let failure = match self.connection(peer, addr).await {
                Err(failure) => failure,
                Ok(flight) => {
                    let live = flight.live().clone();
                    *lock(used) = Some(live.clone());
                    let max = self.config.max_frame;
                    match exchange(&flight, peer, make_body, max).await {
                        Ok(answer) => return answer.map(|response| (response, live.peer.clone())),
                        Err(failure) => {
                            drop(flight);
                            self.abandon(peer, &live);
                            failure
                        }
                    }
                }
            };
            let Failure {
                error,
                retry_elsewhere,
            } = failure;
            if retry_elsewhere && retries < MAX_RETRIES {
                retries += 1;
                Counters::bump(&self.counters.requests_retried);
                tracing::debug!(peer, %error, "request refused unprocessed; retrying on a new connection");
                continue;
            }
            return Err(error);
        }
    }

    /// Stops using `live` for `peer`: out of the cache, closed once its requests are done.
    fn abandon(&self, peer: &str, live: &Arc<Live>) {
        self.peers.forget(peer, live);
        live.retire(self.config.request_timeout);
    }

    /// A request slot on a usable connection to `peer` at `addr`, dialing if needed.
    async fn connection(
        self: &Arc<Self>,
        peer: &str,
        addr: SocketAddr,
    ) -> Result<InFlight, Failure> {
        let slot = self.peers.slot(peer);
        if let Some(flight) = slot.reuse(addr, self) {
            return Ok(flight);
        }
        let waiting_since = Instant::now();
        let mut dialing = slot.dialing.lock().await;
        if let Some(flight) = slot.reuse(addr, self) {
            return Ok(flight);
        }
        if let Some(failed) = dialing.as_ref()
            && failed.addr == addr
            && failed.at >= waiting_since
        {
            return Err(Failure::maybe_processed(failed.error.clone()));
        }
        match self.dial(peer, addr).await {
            Ok(live) => {
                // A server that refuses our certificate does so just after our side of
                // the handshake completed: report its reason, not a lost connection. A
                // server whose certificate changed during the handshake retires the
                // connection unused: that is worth a retry.
                let flight = live.begin().ok_or_else(|| match live.conn.close_reason() {
                    Some(reason) => error::lost(peer, &reason),
                    None => Failure::maybe_processed(TransportError::ConnectionLost {
                        peer: peer.to_owned(),
                        reason: "closed right after the handshake".into(),
                    }),
                })?;
                *lock(&slot.cached) = Some((addr, live));
                *dialing = None;
                Ok(flight)
            }
            Err(error) => {
                *dialing = Some(DialFailure {
                    at: Instant::now(),
                    addr,
                    error: error.clone(),
                });
                Err(Failure::maybe_processed(error))
            }
        }
    }

    /// Dials `peer` at `addr`, checks that its certificate is node `peer`'s, and registers
    /// the connection. A handshake during which our own certificate was reloaded is closed
    /// and made again once: we could not tell which certificate it presented.
    async fn dial(
        self: &Arc<Self>,
        peer: &str,
        addr: SocketAddr,
    ) -> Result<Arc<Live>, TransportError> {
        if let Some(live) = self.dial_once(peer, addr).await? {
            return Ok(live);
        }
        tracing::debug!(
            peer,
            "our certificate changed during the handshake; dialing again"
        );
        self.dial_once(peer, addr)
            .await?
            .ok_or_else(|| TransportError::ConnectionLost {
                peer: peer.to_owned(),
                reason: "our certificate changed during two handshakes in a row".into(),
            })
    }

    /// One dial: the registered connection, or `None` if our certificate was reloaded
    /// during the handshake (the connection is then closed unused).
    async fn dial_once(
        self: &Arc<Self>,
        peer: &str,
        addr: SocketAddr,
    ) -> Result<Option<Arc<Live>>, TransportError> {
        // Noted before the handshake asks the resolver for our certificate.
        let own = self.tls.own.current();
        let current = self.tls.current();
        let connecting = self
            .endpoint
            .connect_with(current.client.clone(), addr, peer)
            .map_err(|e| error::connect_error(peer, addr, e))?;
        let conn = match tokio::time::timeout(self.config.dial_timeout, connecting).await {
            Err(_) => {
                return Err(TransportError::DialTimeout {
                    peer: peer.to_owned(),
                    addr,
                    timeout: self.config.dial_timeout,
                });
            }
            Ok(Err(e)) => {
                let error = error::dial_error(peer, addr, &e);
                if matches!(
                    error,
                    TransportError::PeerRejected { .. } | TransportError::RejectedByPeer { .. }
                ) {
                    let who = format!("node {peer}");
                    self.log_rejection(SECURITY_REJECTED, &who, addr, &error.to_string());
                }
                return Err(error);
            }
            Ok(Ok(conn)) => conn,
        };
        let refuse = |error: TransportError| {
            conn.close(wire::CLOSE_IDENTITY, error.to_string().as_bytes());
            let who = format!("node {peer}");
            self.log_rejection(SECURITY_REJECTED, &who, addr, &error.to_string());
            error
        };
        let (chain, info) = match peer::authenticate(&conn) {
            Ok(found) => found,
            Err(reason) => {
                return Err(refuse(TransportError::PeerRejected {
                    peer: peer.to_owned(),
                    reason,
                }));
            }
        };
        let expected = Identity {
            kind: Kind::Node,
            name: peer.to_owned(),
        };
        if info.identity != expected {
            return Err(refuse(TransportError::WrongPeer {
                expected: peer.to_owned(),
                actual: info.identity.to_string(),
            }));
        }
        let live = Arc::new(Live::new(
            conn.clone(),
            info,
            chain,
            Direction::Dialed,
            own.local.clone(),
            own.generation,
        ));
        match self.registry.admit(&live, current.generation, &self.tls) {
            Ok(()) => {}
            Err(Refused::OwnChanged) => {
                conn.close(
                    wire::CLOSE_RETIRED,
                    b"our certificate changed during the handshake",
                );
                return Ok(None);
            }
            Err(Refused::Untrusted(e)) => {
                return Err(refuse(TransportError::PeerRejected {
                    peer: peer.to_owned(),
                    reason: explain_tls(&e.to_string()),
                }));
            }
            Err(Refused::Revoked) => {
                Counters::bump(&self.counters.revoked);
                let fingerprint = &live.peer.key;
                let reason = format!("its key {fingerprint} is revoked");
                conn.close(wire::CLOSE_IDENTITY, b"your certificate is revoked");
                self.log_revoked(&format!("node {peer}"), addr, fingerprint, "dial refused");
                return Err(TransportError::PeerRejected {
                    peer: peer.to_owned(),
                    reason,
                });
            }
        }
        tokio::spawn(forget_when_closed(
            self.clone(),
            peer.to_owned(),
            live.clone(),
        ));
        Ok(Some(live))
    }
}

/// Removes a dialed connection from the registry and the cache once it closes, whoever
/// closed it: a peer that shuts down is noticed here, before the next request.
async fn forget_when_closed(shared: Arc<Shared>, peer: String, live: Arc<Live>) {
    let reason = live.conn.closed().await;
    shared.registry.remove(&live);
    shared.peers.forget(&peer, &live);
    tracing::debug!(peer, %reason, "connection closed");
}

/// One request on one stream. `Ok` is the request's outcome for the caller: the response
/// body, the remote handler's error, or a body too large to send (the connection is fine
/// either way); `Err` is a failure of the stream or connection.
///
/// The body is made only once the stream is open, never before: opening waits for the
/// peer's stream credit (`max_streams_per_connection`), and a signed body carries a
/// sequence number that the peer's replay window must still cover when it arrives. Made
/// earlier, a burst of requests beyond the credit would queue here sealed, and the ones
/// that waited longest would arrive after more than `REPLAY_WINDOW` later numbers and be
/// refused as replays (see `crate::envelope`). Made here, only requests holding a stream
/// carry a number not yet delivered, and the credit bounds how many those are.
async fn exchange(
    flight: &InFlight,
    peer: &str,
    make_body: &(dyn Fn(&Local) -> Vec<u8> + Send + Sync),
    max: usize,
) -> Result<Result<Vec<u8>, TransportError>, Failure> {
    let live = flight.live();
    let (mut send, mut recv) = live
        .conn
        .open_bi()
        .await
        .map_err(|e| error::lost(peer, &e))?;
    let body = make_body(&live.local);
    if body.len() > max {
        // Nothing of it is sent. A stream dropped unwritten would be finished, which the
        // peer reads as an empty, malformed request: reset it instead (the peer drops a
        // reset stream quietly), and keep the connection.
        let _ = send.reset(wire::STREAM_TOO_LARGE);
        let _ = recv.stop(wire::STREAM_TOO_LARGE);
        return Ok(Err(TransportError::TooLarge {
            len: body.len(),
            max,
        }));
    }
    let fail = |e| error::frame_failure(peer, e);
    frame::write_frame(&mut send, &[], &body)
        .await
        .map_err(fail)?;
    // Finishing only fails if the stream was already reset; the read below reports that.
    let _ = send.finish();
    let status = frame::read_byte(&mut recv).await.map_err(fail)?;
    let payload = frame::read_frame(&mut recv, max).await.map_err(fail)?;
    frame::read_end(&mut recv).await.map_err(fail)?;
    match status {
        wire::STATUS_OK => Ok(Ok(payload)),
        wire::STATUS_ERROR => Ok(Err(TransportError::Remote {
            peer: peer.to_owned(),
            message: String::from_utf8_lossy(&payload).into_owned(),
        })),
        other => Err(Failure {
            error: TransportError::Protocol {
                peer: peer.to_owned(),
                reason: format!("unknown response status {other}"),
            },
            retry_elsewhere: false,
        }),
    }
}

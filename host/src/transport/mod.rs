//! The transport: requests between nodes over QUIC with mutual TLS. The only module that
//! touches quinn and rustls.
//!
//! **Protocol** (ALPN `tenure/N`, versioned in `crate::version`, TLS 1.3 only, ring provider). Every node is a QUIC server
//! and a client on one UDP socket. Both sides authenticate with certificates from the
//! cluster CA bundle (docs/design.md §5): the dialer checks that the server's certificate is
//! valid for the node name it dialed (`DNS:` SAN) and that its `tenure://node/NAME` URI SAN
//! names that node; the server accepts any node or operator whose certificate chains to
//! the bundle and hands the identity to the handler. A request is one bidirectional
//! stream: one length-prefixed frame up (`u32` big-endian length, at most `max_frame`
//! bytes), a status byte and one frame down. There is one cached connection per peer.
//!
//! **Rotation without restart.** The certificate, key and CA bundle files are polled
//! (`watch.rs`). A new certificate is presented by every later handshake (`resolver.rs`),
//! and every established connection is then retired, because signed envelopes are
//! verified with the certificate of the connection they travel on: each connection knows
//! the [`Local`] identity it presented, and [`Transport::request_with`] and the
//! [`Handler`] sign with it. A new bundle takes effect for every later handshake (`tls.rs`), and established
//! connections whose peer no longer verifies against it are retired: closed as soon as
//! their in-flight requests are answered, with a refusal that tells the dialer to retry on
//! a new connection (`registry.rs`, `wire.rs`). So a CA can be rotated under load (add the
//! new CA everywhere, reissue certificates, remove the old CA) without a failed request,
//! and a peer left with a certificate from the removed CA is cut off.
//!
//! **Bounds.** What a stranger or one certificate can make a node hold is bounded
//! (`serve.rs`, `budget.rs`, [`TransportConfig`]):
//! - an Initial from an address that has not proved it receives our packets is answered
//!   with a stateless QUIC Retry and forgotten, so a flood of Initials from fresh (or
//!   spoofed) source ports holds nothing and costs no TLS work; every new connection pays
//!   one extra round trip for it (the measured cost is in BENCHMARKS.md, "The cost of
//!   Retry");
//! - handshakes have their own budget (`max_handshakes`), apart from established
//!   connections (`max_connections`): when it is full the oldest handshake gives way, so
//!   handshakes that stall on purpose cannot keep a completing one out, and cannot take
//!   the slots authenticated peers and operators use;
//! - one identity holds at most `max_connections_per_peer` connections and has at most
//!   `max_requests_per_peer` requests read or handled at once, across its connections;
//! - bytes: QUIC receive windows of one frame per stream and two per connection, and
//!   frames checked against `max_frame` before anything is allocated, their buffers
//!   grown with the bytes that arrive, never from the announced length;
//! - streams per connection, request delivery, handlers and dials have limits too
//!   (`dial.rs`).
//!
//! Refusals are counted ([`TransportStats`]) and logged at a limited rate
//! (`Shared::log_rejection`).
//!
//! **Shutdown** ([`Transport::close`]): the watcher is told to stop, the endpoint closes
//! every connection (`CLOSE_SHUTDOWN`), then `close` waits for the endpoint to go idle and
//! for the accept loop and the watcher to end. Dropping a `Transport` without `close` does
//! the same without waiting.
//!
//! What it deliberately does not do:
//! - interpret bodies: they are opaque (signed envelopes; `crate::envelope` checks sender,
//!   recipient, cluster and replay, reports clock skew, and uses [`PeerInfo::cert`] to verify signatures);
//! - authorize: the handler sees [`PeerInfo::identity`] (node or operator) and decides;
//! - decide revocation: revoked key fingerprints live in the replicated state, above this
//!   layer, which hands the set to [`Transport::set_revoked`] (and to
//!   [`TransportConfig::revoked`] before the first handshake); the transport enforces it
//!   (handshakes with a revoked key are refused both ways, live connections are closed);
//! - retry a request that may have run (only refusals that promise it did not), resolve
//!   names, or back off: callers pass the address and own the retry policy.

mod budget;
mod config;
mod dial;
mod error;
mod frame;
mod handler;
mod peer;
mod registry;
mod reset;
mod resolver;
mod serve;
mod stats;
mod tls;
mod trust;
mod watch;
mod wire;

#[cfg(test)]
pub(crate) mod tests;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

pub use config::{MAX_FRAME_LIMIT, MAX_STREAMS_PER_CONNECTION, TlsFiles, TransportConfig};
pub use error::TransportError;
pub use handler::Handler;
pub use peer::PeerInfo;
pub use registry::{Direction, SeenKey};
pub use reset::ResetKey;
pub use resolver::Local;
pub use stats::TransportStats;

use crate::pki::Identity;
use dial::Peers;

use crate::ratelimit::RateLimiter;
use registry::Registry;
use stats::Counters;
use tls::TlsState;

/// A bound QUIC endpoint that serves requests with a [`Handler`] and sends requests to
/// other nodes. Share it with an `Arc`; call [`Transport::close`] to shut it down.
pub struct Transport {
    shared: Arc<Shared>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// What our TLS identity and trust are right now (after any reloads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsInfo {
    /// Who our certificate speaks for.
    pub identity: Identity,
    /// Our certificate's fingerprint: what new handshakes present.
    pub fingerprint: String,
    /// Its key's fingerprint ([`crate::pki::key_fingerprint`]), under which it would be
    /// revoked.
    pub key: String,
    /// End of our certificate's validity.
    pub not_after: SystemTime,
    /// The fingerprints of the CAs new handshakes trust, in bundle order.
    pub ca_fingerprints: Vec<String>,
    /// Those CAs' fingerprints with the end of each one's validity, in bundle order.
    pub ca_expiries: Vec<(String, SystemTime)>,
}

/// One live connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// The authenticated peer.
    pub peer: PeerInfo,
    /// Who dialed.
    pub direction: Direction,
    /// Whether it is being retired (no new requests; closes when the last one is done).
    pub retiring: bool,
}

impl Transport {
    /// Loads the TLS files, binds `config.listen`, and starts serving with `handler` and
    /// watching the files. Fails if a file does not load, the configuration is
    /// inconsistent, or the address cannot be bound (an address still held by a closed
    /// endpoint is retried for `config.bind_retry`).
    pub async fn bind(
        config: TransportConfig,
        files: TlsFiles,
        handler: Arc<dyn Handler>,
    ) -> Result<Transport, TransportError> {
        config.validate()?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (watch, own, trust) =
            watch::Watch::start(files, provider.clone(), config.reload_interval)?;
        let own = Arc::new(resolver::OwnCert::new(own));
        let (tls, server_config) = TlsState::new(&config, provider, own, trust)?;
        let endpoint = bind_endpoint(&config, server_config).await?;
        let (closing, closing_rx) = tokio::sync::watch::channel(false);
        let registry = Registry::default();
        // Before the accept loop starts: no connection exists to be found.
        registry.set_revoked(config.revoked.clone());
        let shared = Arc::new(Shared {
            permits: Arc::new(Semaphore::new(config.max_connections)),
            handshakes: budget::Handshakes::new(config.max_handshakes),
            shares: budget::PeerShares::new(
                config.max_connections_per_peer,
                config.max_requests_per_peer,
            ),
            config,
            endpoint,
            handler,
            tls,
            registry,
            peers: Peers::default(),
            counters: Counters::default(),
            limiter: std::sync::Mutex::new(RateLimiter::new(
                REJECTION_LINES_PER_SECOND,
                std::time::Duration::from_secs(1),
            )),
            closing,
        });
        let tasks = vec![
            tokio::spawn(serve::accept_loop(shared.clone())),
            tokio::spawn(watch::run(shared.clone(), watch, closing_rx)),
        ];
        Ok(Transport {
            shared,
            tasks: Mutex::new(tasks),
        })
    }

    /// Sends `body` to node `peer` at `addr` and returns the response body. Reuses the
    /// cached connection to `peer` or dials one; see [`TransportError`] for what a failure
    /// says about whether the request ran. For unsigned bodies; signed ones need
    /// [`Transport::request_with`].
    pub async fn request(
        &self,
        peer: &str,
        addr: SocketAddr,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, TransportError> {
        let make = move |_: &Local| body.clone();
        self.request_with(peer, addr, make)
            .await
            .map(|(response, _)| response)
    }

    /// Like [`Transport::request`], but the body is made by `make_body` for each attempt,
    /// with the [`Local`] identity we presented on the connection that attempt uses (a
    /// request refused unprocessed is sent again on a new connection, which may present a
    /// newer certificate, so a signed body must be signed afresh). It is made once the
    /// attempt's stream is open, right before it is written: a request waiting for the
    /// peer's stream credit has no body yet, so a signed body's sequence number is never
    /// overtaken by more requests than the peer lets run at once
    /// ([`TransportConfig::max_streams_per_connection`]). Returns the response and the peer
    /// that answered, whose certificate verifies a signed response.
    pub async fn request_with(
        &self,
        peer: &str,
        addr: SocketAddr,
        make_body: impl Fn(&Local) -> Vec<u8> + Send + Sync,
    ) -> Result<(Vec<u8>, PeerInfo), TransportError> {
        self.shared.request(peer, addr, &make_body).await
    }

    /// The address the endpoint is bound to (with the port chosen for port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, TransportError> {
        self.shared
            .endpoint
            .local_addr()
            .map_err(|e| TransportError::Bind {
                addr: self.shared.config.listen,
                os: Arc::new(e),
            })
    }

    /// Our current certificate and trusted CAs.
    pub fn tls_info(&self) -> TlsInfo {
        let own = self.shared.tls.own.current();
        TlsInfo {
            identity: own.identity.clone(),
            fingerprint: own.fingerprint.clone(),
            key: own
                .key
                .cert
                .first()
                .and_then(|leaf| crate::pki::key_fingerprint(leaf).ok())
                .unwrap_or_default(),
            not_after: own.not_after,
            ca_fingerprints: self.shared.tls.current().trust.ca_fingerprints.clone(),
            ca_expiries: self.shared.tls.current().trust.ca_expiries.clone(),
        }
    }

    /// The live connections, dialed and accepted (not those already closing).
    pub fn connections(&self) -> Vec<ConnectionInfo> {
        self.shared
            .registry
            .all()
            .into_iter()
            .filter(|live| live.conn.close_reason().is_none())
            .map(|live| ConnectionInfo {
                peer: live.peer.clone(),
                direction: live.direction,
                retiring: live.is_retiring(),
            })
            .collect()
    }

    /// The keys peers presented in handshakes since `bind`, one entry per key (at most
    /// `registry::SEEN_MAX`): what a revocation is checked against.
    pub fn seen_keys(&self) -> Vec<SeenKey> {
        self.shared.registry.seen()
    }

    /// Replaces the set of revoked key fingerprints ([`crate::pki::key_fingerprint`],
    /// `sha256:<hex>` of the leaf's SubjectPublicKeyInfo). From now on a handshake, dialed
    /// or accepted, whose peer leaf's key is in the set is refused (whatever certificate
    /// carries the key), and every live connection to or
    /// from such a peer is closed at once (its requests in flight fail): a revoked key
    /// gets no grace. Each refusal and closure is logged as `security.rejected` with
    /// reason `revoked` and counted in [`TransportStats::revoked`]. A smaller set lets a
    /// certificate no longer in it connect again.
    pub fn set_revoked(&self, fingerprints: BTreeSet<String>) {
        for live in self.shared.registry.set_revoked(fingerprints) {
            let reason = format!("key {} is revoked", live.peer.key);
            live.conn.close(wire::CLOSE_IDENTITY, reason.as_bytes());
            Counters::bump(&self.shared.counters.revoked);
            self.shared.log_revoked(
                &live.peer.identity.to_string(),
                live.peer.remote,
                &live.peer.key,
                "connection closed",
            );
        }
    }

    /// The counters since `bind`.
    pub fn stats(&self) -> TransportStats {
        self.shared.counters.snapshot()
    }

    /// Shuts down: stops the watcher, closes every connection, waits until the endpoint is
    /// idle and the accept loop and watcher have ended. Requests in flight fail with
    /// [`TransportError::Closed`] or a lost connection. Idempotent.
    pub async fn close(&self) {
        self.shared.shut();
        self.shared.endpoint.wait_idle().await;
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for task in tasks {
            let _ = task.await;
        }
    }

    /// Shuts down without waiting: closes every connection and stops the watcher, but
    /// neither waits for the connections to drain nor for the tasks to end. For a
    /// one-shot client about to exit whose dials nobody answered: QUIC keeps such a
    /// connection draining for three probe timeouts (1.1 to 1.7 s after a 2 to 3 s dial)
    /// to tell a peer that never spoke that it is closed.
    pub fn close_now(&self) {
        self.shared.shut();
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.shared.shut();
    }
}

/// The state every task of one transport shares.
pub(crate) struct Shared {
    pub(crate) config: TransportConfig,
    pub(crate) endpoint: quinn::Endpoint,
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) tls: TlsState,
    pub(crate) registry: Registry,
    pub(crate) peers: Peers,
    pub(crate) counters: Counters,
    pub(crate) limiter: std::sync::Mutex<RateLimiter>,
    /// One per established accepted connection (`max_connections`).
    pub(crate) permits: Arc<Semaphore>,
    /// The handshakes in progress (`max_handshakes`).
    pub(crate) handshakes: budget::Handshakes,
    /// Each identity's accepted connections and requests.
    pub(crate) shares: budget::PeerShares,
    /// Set once, when the transport shuts down.
    pub(crate) closing: tokio::sync::watch::Sender<bool>,
}

impl Shared {
    pub(crate) fn is_closing(&self) -> bool {
        *self.closing.borrow()
    }

    fn shut(&self) {
        self.closing.send_replace(true);
        self.endpoint.close(wire::CLOSE_SHUTDOWN, b"shutting down");
    }

    /// Logs a refusal, at most [`REJECTION_LINES_PER_SECOND`] lines a second: a peer that
    /// hammers us with bad handshakes or garbage streams must not turn our log into its
    /// amplifier. Refusals are always counted (`stats.rs`); only the lines are limited, and
    /// each line says how many were suppressed before it. (Reload and expiry lines are not
    /// limited: they come once per file version or certificate.)
    pub(crate) fn log_rejection(
        &self,
        event: &'static str,
        peer: &str,
        remote: SocketAddr,
        reason: &str,
    ) {
        let admitted = self
            .limiter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .admit(Instant::now());
        if let Some(suppressed) = admitted {
            tracing::warn!(event, peer, %remote, reason, suppressed, "refused");
        }
    }

    /// Logs a refusal or closure for revocation (rate-limited with the other refusal
    /// lines): `security.rejected` with `reason = "revoked"`, so that an audit can count
    /// them apart from certificate-validation failures, and the key's fingerprint.
    pub(crate) fn log_revoked(
        &self,
        peer: &str,
        remote: SocketAddr,
        key: &str,
        action: &'static str,
    ) {
        let admitted = self
            .limiter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .admit(Instant::now());
        if let Some(suppressed) = admitted {
            tracing::warn!(
                event = crate::events::SECURITY_REJECTED,
                peer,
                %remote,
                reason = "revoked",
                key,
                action,
                suppressed,
                "refused: the peer's key is revoked"
            );
        }
    }
}

/// Refusal lines per second the transport writes at most.
const REJECTION_LINES_PER_SECOND: u32 = 10;

/// Binds the endpoint, retrying for a while if the address is still held.
async fn bind_endpoint(
    config: &TransportConfig,
    server_config: quinn::ServerConfig,
) -> Result<quinn::Endpoint, TransportError> {
    let deadline = Instant::now() + config.bind_retry;
    let endpoint_config = reset::endpoint_config(config.reset_key.as_ref());
    let runtime: Arc<dyn quinn::Runtime> = Arc::new(quinn::TokioRuntime);
    loop {
        let endpoint = std::net::UdpSocket::bind(config.listen).and_then(|socket| {
            quinn::Endpoint::new(
                endpoint_config.clone(),
                Some(server_config.clone()),
                socket,
                runtime.clone(),
            )
        });
        match endpoint {
            Ok(endpoint) => return Ok(endpoint),
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && config.listen.port() != 0
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                return Err(TransportError::Bind {
                    addr: config.listen,
                    os: Arc::new(e),
                });
            }
        }
    }
}

//! The transport's settings: one typed struct, defaults in one place, checked once.
//!
//! Protocol timings live here rather than in constants so that tests can shrink them.
//! Defaults suit nodes on one LAN; every field says what it bounds. The file paths of the
//! node's TLS material are a separate [`TlsFiles`], because they are watched, not read once.
//!
//! This does not parse files or flags: the node's config (`crate::config`) owns that and
//! fills these structs in.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::TransportError;
use super::reset::ResetKey;

/// Settings of a [`super::Transport`]. Start from `TransportConfig::default()` and set
/// what differs.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    /// UDP address to listen on; port 0 picks a free port (see `Transport::local_addr`).
    pub listen: SocketAddr,
    /// Largest request or response body sent or accepted, in bytes (default 1 MiB, the
    /// bound of docs/design.md §6). An incoming frame announcing more is refused before
    /// anything is allocated; a request body over it fails locally with nothing sent. It
    /// also sizes the QUIC receive windows: one frame per stream, two per connection.
    pub max_frame: usize,
    /// Bound on one request as the caller sees it: dialing if needed, sending, the remote
    /// handler, the response (default 5 s). Also bounds a remote handler on the server side.
    pub request_timeout: Duration,
    /// Bound on one connection attempt, QUIC and TLS handshake together, both when we dial
    /// and when a peer dials us (default 1 s: a handshake takes a few round trips). A dial
    /// to an unbound UDP port gets no answer at all, so this is what makes a dead peer fail
    /// fast, and it bounds how long a peer that restarts mid-dial waits to be reached.
    /// It also sets the RTT assumed before one is measured, a sixteenth of it, so that a
    /// lost first handshake packet is resent well inside it (`tls.rs`, `initial_rtt`).
    pub dial_timeout: Duration,
    /// The RTT assumed before one is measured, if not a sixteenth of `dial_timeout`. A
    /// transport closed and bound again on its port soon after its dials takes a shorter
    /// one (a node asking its peers before its Raft starts, `node/new_member.rs`): a dial
    /// nobody answered drains for three probe timeouts of it (nine times it) before the
    /// port is free, 560 ms at the default.
    pub initial_rtt: Option<Duration>,
    /// Time an incoming stream has to deliver its whole request (default 5 s); a slower
    /// stream is closed and counted.
    pub stream_read_timeout: Duration,
    /// Incoming streams a peer may have open at once on one connection (default 64, at
    /// most [`MAX_STREAMS_PER_CONNECTION`]); QUIC flow control makes its further requests
    /// wait at the peer, not pile up here. It is also how many of a peer's requests on one
    /// connection can be in flight, out of order, at once: the dialer makes (signs and
    /// numbers) a body only once it holds a stream.
    pub max_streams_per_connection: u32,
    /// Established incoming connections (authenticated) at once (default 256); a
    /// connection over it is closed right after its handshake. Handshakes have a budget
    /// of their own, `max_handshakes`, so they cannot use this one up.
    pub max_connections: usize,
    /// Incoming handshakes in progress at once (default 64), from addresses validated by
    /// a QUIC Retry. When all are in progress, the oldest is abandoned for a new one: a
    /// handshake that completes needs a round trip or two, one that stalls ages out.
    pub max_handshakes: usize,
    /// Established incoming connections one identity (node or operator name) may hold
    /// (default 16), so that one certificate cannot take every connection.
    pub max_connections_per_peer: usize,
    /// Requests of one identity read or handled at once, across all its connections
    /// (default 64); its further streams wait, unread, inside the receive windows. With
    /// the windows this bounds what one identity can make us buffer: about
    /// `max_requests_per_peer × max_frame + max_connections_per_peer × 2 × max_frame`.
    pub max_requests_per_peer: usize,
    /// A connection that hears nothing (keep-alives included) for this long is dead
    /// (default 10 s).
    pub idle_timeout: Duration,
    /// Keep-alive interval (default 2 s); must be shorter than `idle_timeout`.
    pub keep_alive: Duration,
    /// How often the certificate, key and CA bundle files are checked for changes
    /// (default 500 ms).
    pub reload_interval: Duration,
    /// How long `bind` keeps retrying an address still held by a previous endpoint on a
    /// fixed port (default 3 s; quinn keeps a closed endpoint's port for about 2 s).
    pub bind_retry: Duration,
    /// The secret behind QUIC stateless resets (default: a random one per endpoint). A
    /// node keeps it across restarts, so that a peer still holding a connection to its
    /// previous run is told at its next packet that the connection is gone, rather than
    /// sending into it until `idle_timeout` (RFC 9000 §10.3).
    pub reset_key: Option<ResetKey>,
    /// Key fingerprints refused from the first handshake on (see
    /// `Transport::set_revoked`, which replaces them later). A node passes the set its
    /// replica held when it stopped, so a restart serves no revoked peer, not even before
    /// the replica is read again (default: none).
    pub revoked: BTreeSet<String>,
}

impl Default for TransportConfig {
    fn default() -> TransportConfig {
        TransportConfig {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            max_frame: 1 << 20,
            request_timeout: Duration::from_secs(5),
            dial_timeout: Duration::from_secs(1),
            initial_rtt: None,
            stream_read_timeout: Duration::from_secs(5),
            max_streams_per_connection: 64,
            max_connections: 256,
            max_handshakes: 64,
            max_connections_per_peer: 16,
            max_requests_per_peer: 64,
            idle_timeout: Duration::from_secs(10),
            keep_alive: Duration::from_secs(2),
            reload_interval: Duration::from_millis(500),
            bind_retry: Duration::from_secs(3),
            reset_key: None,
            revoked: BTreeSet::new(),
        }
    }
}

/// The largest `max_frame` accepted: frames carry a `u32` length, and a limit far above
/// docs/design.md's 1 MiB is more likely a typo than a plan.
pub const MAX_FRAME_LIMIT: usize = 64 << 20;

/// The largest `max_streams_per_connection` accepted. A signed request is numbered when it
/// gets its stream, so the streams a connection allows bound how many numbers a receiver
/// can see out of order from it; the receiver's replay window
/// ([`crate::envelope::REPLAY_WINDOW`], 1024) must cover them with room to spare, or
/// genuine requests are refused as replays. A quarter of the window covers the two
/// connections a node's numbers to one peer travel on (its requests on the one it dialed,
/// its responses on the one the peer dialed), each with a retiring predecessor still
/// draining; `crate::rpc` checks this at compile time.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 256;

impl TransportConfig {
    /// Checks the settings against each other; `bind` calls this.
    pub fn validate(&self) -> Result<(), TransportError> {
        let bad = |msg: String| Err(TransportError::Config(msg));
        if self.max_frame == 0 || self.max_frame > MAX_FRAME_LIMIT {
            return bad(format!(
                "max_frame is {} bytes; expected 1 to {MAX_FRAME_LIMIT}",
                self.max_frame
            ));
        }
        for (name, value) in [
            ("request_timeout", self.request_timeout),
            ("dial_timeout", self.dial_timeout),
            ("stream_read_timeout", self.stream_read_timeout),
            ("idle_timeout", self.idle_timeout),
            ("keep_alive", self.keep_alive),
            ("reload_interval", self.reload_interval),
        ] {
            if value.is_zero() {
                return bad(format!("{name} must not be zero"));
            }
        }
        if self.keep_alive >= self.idle_timeout {
            return bad(format!(
                "keep_alive ({:?}) must be shorter than idle_timeout ({:?})",
                self.keep_alive, self.idle_timeout
            ));
        }
        if self.max_streams_per_connection > MAX_STREAMS_PER_CONNECTION {
            return bad(format!(
                "max_streams_per_connection is {}; expected 1 to {MAX_STREAMS_PER_CONNECTION} \
                 (more requests in flight at once than a peer's replay window can cover)",
                self.max_streams_per_connection
            ));
        }
        for (name, value) in [
            (
                "max_streams_per_connection",
                self.max_streams_per_connection as usize,
            ),
            ("max_connections", self.max_connections),
            ("max_handshakes", self.max_handshakes),
            ("max_connections_per_peer", self.max_connections_per_peer),
            ("max_requests_per_peer", self.max_requests_per_peer),
        ] {
            if value == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        Ok(())
    }
}

/// Where the node's TLS material lives. All three files are watched and reloaded.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The trust bundle: one or more CA certificates (PEM).
    pub ca: PathBuf,
    /// The node's (or operator's) certificate chain, leaf first (PEM).
    pub cert: PathBuf,
    /// The private key of that certificate (PEM, PKCS#8 or SEC1).
    pub key: PathBuf,
}

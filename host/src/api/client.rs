//! The operator's side: one admin request to one node, and failures explained.
//!
//! [`AdminClient::new`] binds a transport on an ephemeral local port with the operator's
//! certificate (the transport treats an operator identity like a node's for dialing; a
//! node that dials it back would be refused, and its own handler refuses everything).
//! [`AdminClient::request`] dials the node at `addr`, checking that its certificate names
//! `node`, and sends one [`AdminRequest`] as an operator request.
//!
//! Every failure becomes an [`AdminError`] that says what to do, because the person
//! reading it is at a terminal: a missing file names the path and how to make one, an
//! unreachable node names the address and the time waited, a certificate refused by
//! either side says which side and why, and a node certificate used in place of an
//! operator's is told so by the node.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{AdminRequest, AdminResponse, Status, StatusQuery, decode_response, encode, merge};
use crate::future::BoxFuture;
use crate::rpc::{NODE_CERT_REFUSAL, operator_request};
use crate::terminal::escape;
use crate::transport::{
    Handler, Local, PeerInfo, TlsFiles, Transport, TransportConfig, TransportError,
};

/// How to make an operator certificate, for messages.
const MAKE_ONE: &str = "make one with `tenure certs issue --ca DIR --operator NAME` and pass \
     --cert and --key (a single-node default node makes tenure-data/certs/operator.pem on \
     its first start)";

/// The longest an admin command waits for a node to answer its connection attempt.
const MAX_DIAL: Duration = Duration::from_secs(3);

/// How many times a request follows [`AdminResponse::Leader`].
const MAX_REDIRECTS: usize = 4;
/// How many times a status is read again from its first page when the node dropped the
/// snapshot its pages come from.
const MAX_RESTARTS: usize = 3;

/// The first socket address of `addr` (`host:port`).
async fn resolve(addr: &str) -> Result<SocketAddr, String> {
    tokio::net::lookup_host(addr)
        .await
        .map_err(|e| format!("cannot resolve {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr} resolves to no address"))
}

/// Why an admin request failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// A certificate, key or CA file does not exist.
    #[error("no {what} at {}: {hint}", path.display())]
    MissingFile {
        /// Which file: "operator certificate", "operator key" or "CA bundle".
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// How to get one.
        hint: &'static str,
    },
    /// The files exist but cannot be used (unreadable, not PEM, mismatched, no identity).
    #[error("cannot use {} and {}: {source}; {MAKE_ONE}", cert.display(), key.display())]
    BadFiles {
        cert: PathBuf,
        key: PathBuf,
        /// The transport's (PKI's) error, naming the file.
        source: TransportError,
    },
    /// The node did not answer the handshake, or the address refused it.
    #[error(
        "cannot reach node {node} at {addr}: {reason}; is it running and listening there? \
         (--addr, or TENURE_ADMIN_ADDR)"
    )]
    Unreachable {
        node: String,
        addr: SocketAddr,
        reason: String,
    },
    /// The node's certificate is not signed by a CA in our bundle.
    #[error(
        "the node at {addr} presented a certificate we do not trust: {reason}; is {} the \
         CA bundle of its cluster? (--ca)",
        ca.display()
    )]
    UntrustedNode {
        addr: SocketAddr,
        ca: PathBuf,
        reason: String,
    },
    /// The certificate at `addr` is valid but not that of node `node`.
    #[error(
        "the node at {addr} is not {node}: {reason}; pass the name of the node at that \
         address with --node (TENURE_ADMIN_NODE)"
    )]
    WrongNode {
        node: String,
        addr: SocketAddr,
        reason: String,
    },
    /// The node refused our certificate in the handshake.
    #[error("node {node} refused the certificate {}: {reason}; {hint}", cert.display())]
    CertificateRefused {
        node: String,
        cert: PathBuf,
        reason: String,
        hint: &'static str,
    },
    /// A node certificate was used: nodes refuse admin requests from nodes.
    #[error(
        "node {node} refused: {NODE_CERT_REFUSAL} ({} is a node certificate; {MAKE_ONE})",
        cert.display()
    )]
    NodeCertificate { node: String, cert: PathBuf },
    /// The node refused the request, or failed to carry it out.
    #[error("{node}: {message}")]
    Refused { node: String, message: String },
    /// The connection failed while the request was under way: it may have been carried out.
    #[error(
        "the request to node {node} at {addr} did not complete: {reason}; it may or may \
         not have taken effect (check with `tenure status`)"
    )]
    Interrupted {
        node: String,
        addr: SocketAddr,
        reason: String,
    },
    /// The node's answer could not be read.
    #[error("node {node} answered with something unreadable: {reason}")]
    Protocol { node: String, reason: String },
}

/// An operator's connection to the cluster, for a request or a few.
pub struct AdminClient {
    transport: Transport,
    files: TlsFiles,
    /// How the dial's bound was chosen, for messages: the operator should be able to
    /// match the wait they saw with what they asked for.
    dial_rule: String,
    /// Whether any node answered a dial (any outcome but [`TransportError::DialTimeout`]):
    /// only then has [`AdminClient::close`] a connection to wind down.
    answered: AtomicBool,
}

impl AdminClient {
    /// Loads the operator's `files` and binds a transport on an ephemeral port of the
    /// address family of `dial` (the address the requests will go to). Each request,
    /// dialing included, must complete within `timeout`.
    pub async fn new(
        files: TlsFiles,
        dial: SocketAddr,
        timeout: Duration,
    ) -> Result<AdminClient, AdminError> {
        Self::with_idle(
            files,
            dial,
            timeout,
            TransportConfig::default().idle_timeout,
        )
        .await
    }

    /// [`AdminClient::new`] whose connections are declared dead after `idle` without a
    /// packet, and so send keep-alives every quarter of it. A watch's long poll waits on
    /// a node that may have died: QUIC's keep-alives, not the request's bound, are what
    /// notice that (a killed node sends no close).
    pub async fn with_idle(
        files: TlsFiles,
        dial: SocketAddr,
        timeout: Duration,
        idle: Duration,
    ) -> Result<AdminClient, AdminError> {
        for (what, path, hint) in [
            ("operator certificate", &files.cert, MAKE_ONE),
            ("operator key", &files.key, MAKE_ONE),
            (
                "CA bundle",
                &files.ca,
                "pass the cluster's ca.pem with --ca (TENURE_ADMIN_CA)",
            ),
        ] {
            if !path.exists() {
                return Err(AdminError::MissingFile {
                    what,
                    path: path.clone(),
                    hint,
                });
            }
        }
        // Below the request's own bound, so that a node that does not answer the
        // handshake is reported as unreachable (nothing sent), not as a request that may
        // have run: with equal bounds the two timers raced. And below a short idle
        // timeout (a watch's), which would otherwise end the handshake first with a bare
        // "timed out".
        let share = (timeout / 2).min(MAX_DIAL);
        let (dial_timeout, dial_rule) = if idle * 3 / 4 < share {
            (
                idle * 3 / 4,
                format!(
                    "three quarters of the {} a watch lets a connection stay silent",
                    humantime::format_duration(idle)
                ),
            )
        } else {
            (
                share,
                format!(
                    "the share of --timeout {} given to connecting: half, at most {}",
                    humantime::format_duration(timeout),
                    humantime::format_duration(MAX_DIAL)
                ),
            )
        };
        let listen = if dial.is_ipv4() {
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
        } else {
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
        };
        let config = TransportConfig {
            listen,
            request_timeout: timeout,
            dial_timeout,
            // A one-shot client has no use for reloads; keep the watcher quiet.
            reload_interval: Duration::from_secs(60),
            idle_timeout: idle,
            keep_alive: idle / 4,
            ..TransportConfig::default()
        };
        let transport = Transport::bind(config, files.clone(), Arc::new(Refuse))
            .await
            .map_err(|source| match source {
                TransportError::Pki(_) | TransportError::Tls(_) => AdminError::BadFiles {
                    cert: files.cert.clone(),
                    key: files.key.clone(),
                    source,
                },
                other => AdminError::Unreachable {
                    node: "(none)".into(),
                    addr: dial,
                    reason: format!("cannot open a local socket: {other}"),
                },
            })?;
        Ok(AdminClient {
            transport,
            files,
            dial_rule,
            answered: AtomicBool::new(false),
        })
    }

    /// Sends `request` to node `node` at `addr` and returns its answer. An action sent to
    /// a node that is not the leader is sent on to the leader it names (a few times at
    /// most: leadership may move meanwhile).
    pub async fn request(
        &self,
        node: &str,
        addr: SocketAddr,
        request: &AdminRequest,
    ) -> Result<AdminResponse, AdminError> {
        let (mut node, mut addr) = (node.to_owned(), addr);
        for _ in 0..MAX_REDIRECTS {
            match self.request_once(&node, addr, request).await? {
                AdminResponse::Leader {
                    node: leader,
                    addr: leader_addr,
                } => {
                    addr =
                        resolve(&leader_addr)
                            .await
                            .map_err(|reason| AdminError::Unreachable {
                                node: escape(&leader).into_owned(),
                                addr,
                                reason: format!(
                                    "{} names {} at {} as the leader, which only answers \
                                 actions: {}",
                                    escape(&node),
                                    escape(&leader),
                                    escape(&leader_addr),
                                    escape(&reason)
                                ),
                            })?;
                    node = leader;
                }
                answer => return Ok(answer),
            }
        }
        Err(AdminError::Refused {
            node: escape(&node).into_owned(),
            message: format!(
                "the leader moved {MAX_REDIRECTS} times while the request was sent; retry"
            ),
        })
    }

    /// The status as node `node` at `addr` sees it, narrowed to `filter`'s resource and
    /// node, asked page by page (`pages.rs`) and put back together. A node that dropped
    /// the snapshot meanwhile starts a new one, and the pages are asked again from the
    /// first (a few times at most).
    pub async fn status(
        &self,
        node: &str,
        addr: SocketAddr,
        filter: &StatusQuery,
    ) -> Result<Status, AdminError> {
        let refused = |message: String| AdminError::Refused {
            node: escape(node).into_owned(),
            message,
        };
        let mut query = StatusQuery {
            snapshot: None,
            after: None,
            ..filter.clone()
        };
        let mut whole: Option<Status> = None;
        let mut restarts = 0;
        loop {
            let request = AdminRequest::StatusPage(query.clone());
            let page = match self.request_once(node, addr, &request).await? {
                AdminResponse::StatusPage(page) => page,
                other => return Err(refused(format!("answered a status page with {other:?}"))),
            };
            if query.snapshot.is_some_and(|asked| asked != page.snapshot) {
                restarts += 1;
                if restarts > MAX_RESTARTS {
                    return Err(refused(format!(
                        "the status snapshot expired {MAX_RESTARTS} times while its pages \
                         were read; retry"
                    )));
                }
                whole = None;
            }
            match &mut whole {
                None => whole = Some(page.status),
                Some(status) => merge(status, page.status),
            }
            match page.next {
                Some(next) => {
                    query.snapshot = Some(page.snapshot);
                    query.after = Some(next);
                }
                None => return Ok(whole.expect("a page was read")),
            }
        }
    }

    /// Sends `request` to node `node` at `addr` and returns its answer as is.
    async fn request_once(
        &self,
        node: &str,
        addr: SocketAddr,
        request: &AdminRequest,
    ) -> Result<AdminResponse, AdminError> {
        let body = encode(request).map_err(|reason| AdminError::Protocol {
            node: escape(node).into_owned(),
            reason,
        })?;
        let answer = self
            .transport
            .request(node, addr, operator_request(&body))
            .await;
        if !matches!(answer, Err(TransportError::DialTimeout { .. })) {
            self.answered.store(true, Ordering::Relaxed);
        }
        let answer = answer.map_err(|e| self.explain(node, addr, e))?;
        decode_response(&answer).map_err(|reason| AdminError::Protocol {
            node: escape(node).into_owned(),
            reason: escape(&reason).into_owned(),
        })
    }

    /// Closes the transport: its connections are closed and, if a node answered, drained
    /// as QUIC asks. If no node ever answered a dial (a wrong --addr, a node down), there
    /// is no one to tell and it returns at once, so the command ends when its message
    /// says it gave up rather than 1.1 to 1.7 s later.
    pub async fn close(&self) {
        if self.answered.load(Ordering::Relaxed) {
            self.transport.close().await;
        } else {
            self.transport.close_now();
        }
    }

    /// A transport failure in the operator's terms.
    fn explain(&self, node: &str, addr: SocketAddr, e: TransportError) -> AdminError {
        // Names, reasons and messages may come from the peer (its certificate, its error
        // answer): shown escaped, so they cannot drive the operator's terminal.
        let node_s = escape(node).into_owned();
        let clean = |text: String| escape(&text).into_owned();
        match e {
            TransportError::DialTimeout { timeout, .. } => AdminError::Unreachable {
                node: node_s,
                addr,
                // The dial's own bound and how it was chosen, so the wait the operator
                // saw matches the message.
                reason: format!(
                    "no answer to the connection attempt within {} ({})",
                    seconds(timeout),
                    self.dial_rule
                ),
            },
            TransportError::Connect { reason, .. } => AdminError::Unreachable {
                node: node_s,
                addr,
                reason: clean(reason),
            },
            TransportError::InvalidPeer { reason, .. } => AdminError::WrongNode {
                node: node_s,
                addr,
                reason: clean(reason),
            },
            TransportError::WrongPeer { actual, .. } => AdminError::WrongNode {
                node: node_s,
                addr,
                reason: format!("its certificate is that of {}", escape(&actual.to_string())),
            },
            TransportError::PeerRejected { reason, .. }
                if reason.contains("not valid for name") =>
            {
                AdminError::WrongNode {
                    node: node_s,
                    addr,
                    reason: clean(reason),
                }
            }
            TransportError::PeerRejected { reason, .. } => AdminError::UntrustedNode {
                addr,
                ca: self.files.ca.clone(),
                reason: clean(reason),
            },
            TransportError::RejectedByPeer { reason, .. } => AdminError::CertificateRefused {
                node: node_s,
                cert: self.files.cert.clone(),
                hint: if reason.contains("revoked") {
                    "it has been revoked; have a new operator certificate issued"
                } else {
                    "is it issued by this cluster's CA, and still valid?"
                },
                reason: clean(reason),
            },
            TransportError::Remote { message, .. } if message == NODE_CERT_REFUSAL => {
                AdminError::NodeCertificate {
                    node: node_s,
                    cert: self.files.cert.clone(),
                }
            }
            TransportError::Remote { message, .. } => AdminError::Refused {
                node: node_s,
                message: clean(message),
            },
            TransportError::ConnectionLost { reason, .. } => AdminError::Interrupted {
                node: node_s,
                addr,
                reason: clean(reason),
            },
            e @ (TransportError::Timeout { .. }
            | TransportError::Protocol { .. }
            | TransportError::Closed) => AdminError::Interrupted {
                node: node_s,
                addr,
                reason: clean(e.to_string()),
            },
            e @ (TransportError::Config(_)
            | TransportError::Pki(_)
            | TransportError::Tls(_)
            | TransportError::Bind { .. }
            | TransportError::TooLarge { .. }) => AdminError::Protocol {
                node: node_s,
                reason: clean(e.to_string()),
            },
        }
    }
}

/// A wait in seconds for messages: `3s`, `1.5s`.
fn seconds(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{}s", (ms as f64 / 1000.0))
    }
}

/// An operator's endpoint serves nothing.
struct Refuse;

impl Handler for Refuse {
    fn handle(
        &self,
        _peer: PeerInfo,
        _local: Local,
        _body: Vec<u8>,
    ) -> BoxFuture<Result<Vec<u8>, String>> {
        Box::pin(async { Err("an operator's endpoint serves no requests".to_owned()) })
    }
}

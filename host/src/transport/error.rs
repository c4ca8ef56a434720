//! The one error type of the transport boundary, and how quinn's errors map onto it.
//!
//! Callers need three answers from a failed request: whose fault it is (the peer's
//! certificate, ours, the network, the remote handler), whether trying again later may
//! help ([`TransportError::is_retryable`]), and whether the request may have run anyway
//! (documented per variant: the envelope layer's replay protection is what makes a retry
//! of such a request safe). The mapping from quinn's connection, read and write errors
//! lives here so that dialing, serving and requesting classify failures the same way.
//!
//! What it does not do: log. The place that sees an error decides whether it is worth a
//! (rate-limited) line.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::{ConnectError, ConnectionError, ReadError, VarInt, WriteError};

use super::frame::FrameError;
use super::wire;
use crate::pki::PkiError;

/// Everything that can go wrong binding the transport or making a request.
#[derive(Clone, Debug, thiserror::Error)]
pub enum TransportError {
    /// The settings are inconsistent (see `TransportConfig::validate`).
    #[error("invalid transport configuration: {0}")]
    Config(String),

    /// The node's certificate, key or CA bundle could not be loaded at start-up.
    #[error("cannot load the TLS files: {0}")]
    Pki(Arc<PkiError>),

    /// rustls or quinn refused the loaded material when building a configuration.
    #[error("cannot build the TLS configuration: {0}")]
    Tls(String),

    /// The UDP socket could not be bound.
    // The OS error is part of the message, not a `source`: a printed error chain would
    // otherwise say it twice ("in use: in use").
    #[error("cannot bind {addr}: {os}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's error.
        os: Arc<io::Error>,
    },

    /// The peer name is not a valid node name (so it cannot be a TLS server name).
    #[error("cannot dial {peer:?}: {reason}")]
    InvalidPeer {
        /// The name as given.
        peer: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The request body exceeds `max_frame`; nothing was sent.
    #[error("request body of {len} bytes exceeds the frame limit of {max} bytes")]
    TooLarge {
        /// The body's length.
        len: usize,
        /// The limit.
        max: usize,
    },

    /// No handshake completed within `dial_timeout`: the peer is down, the address is
    /// wrong, or packets are lost. Nothing was sent.
    #[error("dialing {peer} at {addr}: no handshake within {timeout:?}")]
    DialTimeout {
        /// The peer dialed.
        peer: String,
        /// The address dialed.
        addr: SocketAddr,
        /// The limit that ran out.
        timeout: Duration,
    },

    /// The connection attempt failed for a reason other than certificates (refused at the
    /// peer's connection limit, reset, protocol mismatch). Nothing was sent.
    #[error("dialing {peer} at {addr}: {reason}")]
    Connect {
        /// The peer dialed.
        peer: String,
        /// The address dialed.
        addr: SocketAddr,
        /// What happened.
        reason: String,
    },

    /// We refused the peer's certificate: not signed by a CA in our bundle, expired, not
    /// yet valid, not valid for the name dialed, or naming no Tenure node. Nothing was sent.
    #[error("refused the certificate of {peer}: {reason}")]
    PeerRejected {
        /// The peer dialed.
        peer: String,
        /// Why, in rustls's words plus a hint.
        reason: String,
    },

    /// The peer refused us, typically our certificate (its CA not in the peer's bundle,
    /// expired, not yet valid). The request was not processed.
    #[error("{peer} refused our handshake: {reason}")]
    RejectedByPeer {
        /// The peer dialed.
        peer: String,
        /// The TLS alert or close reason the peer sent.
        reason: String,
    },

    /// The certificate verified for the name dialed but its URI SAN names someone else.
    #[error("dialed node {expected} but the peer's certificate is that of {actual}")]
    WrongPeer {
        /// The node we meant to reach.
        expected: String,
        /// Who the certificate speaks for.
        actual: String,
    },

    /// The connection failed while the request was in flight (peer closed or crashed,
    /// network lost, idle timeout). The request may or may not have been processed.
    #[error("connection to {peer} lost: {reason}")]
    ConnectionLost {
        /// The peer.
        peer: String,
        /// What happened.
        reason: String,
    },

    /// The request did not complete within `request_timeout`. It may or may not have been
    /// processed.
    #[error("request to {peer} timed out after {timeout:?}")]
    Timeout {
        /// The peer.
        peer: String,
        /// The limit that ran out.
        timeout: Duration,
    },

    /// The peer broke the protocol: a malformed or oversized response, or it reset the
    /// stream. The request may or may not have been processed.
    #[error("protocol error with {peer}: {reason}")]
    Protocol {
        /// The peer.
        peer: String,
        /// What was wrong.
        reason: String,
    },

    /// The peer's handler returned an error; the transport did its job.
    #[error("{peer} failed the request: {message}")]
    Remote {
        /// The peer.
        peer: String,
        /// The handler's message.
        message: String,
    },

    /// The transport has been closed.
    #[error("the transport is closed")]
    Closed,
}

impl From<PkiError> for TransportError {
    fn from(e: PkiError) -> TransportError {
        TransportError::Pki(Arc::new(e))
    }
}

impl TransportError {
    /// Whether the same request may succeed if tried again later without anyone changing
    /// anything: the network or the peer's availability was at fault. Certificate
    /// refusals, protocol violations, handler errors and local mistakes are not.
    pub fn is_retryable(&self) -> bool {
        match self {
            TransportError::DialTimeout { .. }
            | TransportError::Connect { .. }
            | TransportError::ConnectionLost { .. }
            | TransportError::Timeout { .. } => true,
            TransportError::Config(_)
            | TransportError::Pki(_)
            | TransportError::Tls(_)
            | TransportError::Bind { .. }
            | TransportError::InvalidPeer { .. }
            | TransportError::TooLarge { .. }
            | TransportError::PeerRejected { .. }
            | TransportError::RejectedByPeer { .. }
            | TransportError::WrongPeer { .. }
            | TransportError::Protocol { .. }
            | TransportError::Remote { .. }
            | TransportError::Closed => false,
        }
    }
}

/// A request failure, and whether it may be sent again on a new connection: only when the
/// peer promised it did not process the request because the connection was retiring.
pub(crate) struct Failure {
    pub(crate) error: TransportError,
    pub(crate) retry_elsewhere: bool,
}

impl Failure {
    pub(crate) fn maybe_processed(error: TransportError) -> Failure {
        Failure {
            error,
            retry_elsewhere: false,
        }
    }
}

/// The QUIC transport error codes reserved for TLS alerts: 0x100 + alert.
fn tls_alert(code: quinn::TransportErrorCode) -> Option<u8> {
    let code = u64::from(code);
    (0x100..0x200).contains(&code).then(|| (code - 0x100) as u8)
}

/// A TLS alert by name, e.g. `CertificateExpired`.
fn alert_name(alert: u8) -> String {
    format!("{:?}", rustls::AlertDescription::from(alert))
}

/// rustls's words for a certificate problem, with a hint where it is terse.
pub(crate) fn explain_tls(reason: &str) -> String {
    if reason.contains("UnknownIssuer") {
        format!("{reason} (its certificate is not signed by any CA in our trust bundle)")
    } else if reason.contains("BadSignature") {
        // Every Tenure CA has the same name, so webpki finds a CA of that name in the
        // bundle and then fails on the signature rather than on the name.
        format!(
            "{reason} (its certificate is not signed by any CA in our trust bundle: \
             from another cluster's CA, or from a CA removed from the bundle)"
        )
    } else if reason.contains("no certificates") || reason.contains("CertificateRequired") {
        format!("{reason} (no client certificate was presented)")
    } else {
        reason.to_owned()
    }
}

/// How a failed handshake looks from the side that observed it.
pub(crate) enum HandshakeFailure {
    /// We refused the peer's certificate (our verifier failed).
    WeRefused(String),
    /// The peer refused us (it sent a TLS alert or refused our identity).
    TheyRefused(String),
    /// Anything else: refused connection, reset, timeout, protocol mismatch.
    Other(String),
    /// Our own endpoint is closing.
    Closing,
}

/// Classifies a connection error seen during or right after a handshake.
pub(crate) fn handshake_failure(e: &ConnectionError) -> HandshakeFailure {
    match e {
        ConnectionError::TransportError(te) => match tls_alert(te.code) {
            Some(_) => HandshakeFailure::WeRefused(explain_tls(&te.reason)),
            None => HandshakeFailure::Other(te.to_string()),
        },
        ConnectionError::ConnectionClosed(cc) => match tls_alert(cc.error_code) {
            Some(alert) => {
                let text = String::from_utf8_lossy(&cc.reason);
                HandshakeFailure::TheyRefused(if text.is_empty() {
                    format!("TLS alert {}", alert_name(alert))
                } else {
                    format!("TLS alert {}: {}", alert_name(alert), explain_tls(&text))
                })
            }
            None => HandshakeFailure::Other(format!("closed by the peer: {cc}")),
        },
        ConnectionError::ApplicationClosed(ac) if ac.error_code == wire::CLOSE_IDENTITY => {
            HandshakeFailure::TheyRefused(format!(
                "{}: {}",
                wire::close_code_name(ac.error_code),
                String::from_utf8_lossy(&ac.reason)
            ))
        }
        ConnectionError::LocallyClosed => HandshakeFailure::Closing,
        ConnectionError::TimedOut => HandshakeFailure::Other("timed out".into()),
        other => HandshakeFailure::Other(other.to_string()),
    }
}

/// The error for a failed dial of `peer` at `addr`.
pub(crate) fn dial_error(peer: &str, addr: SocketAddr, e: &ConnectionError) -> TransportError {
    match handshake_failure(e) {
        HandshakeFailure::WeRefused(reason) => TransportError::PeerRejected {
            peer: peer.to_owned(),
            reason,
        },
        HandshakeFailure::TheyRefused(reason) => TransportError::RejectedByPeer {
            peer: peer.to_owned(),
            reason,
        },
        HandshakeFailure::Other(reason) => TransportError::Connect {
            peer: peer.to_owned(),
            addr,
            reason,
        },
        HandshakeFailure::Closing => TransportError::Closed,
    }
}

/// The error for `connect_with` refusing to start.
pub(crate) fn connect_error(peer: &str, addr: SocketAddr, e: ConnectError) -> TransportError {
    match e {
        ConnectError::EndpointStopping => TransportError::Closed,
        ConnectError::InvalidServerName(name) => TransportError::InvalidPeer {
            peer: name,
            reason: "not a valid TLS server name".into(),
        },
        ConnectError::InvalidRemoteAddress(addr) => TransportError::InvalidPeer {
            peer: peer.to_owned(),
            reason: format!(
                "address {addr} cannot be reached from this endpoint (IPv4 and IPv6 mixed?)"
            ),
        },
        other => TransportError::Connect {
            peer: peer.to_owned(),
            addr,
            reason: other.to_string(),
        },
    }
}

/// A connection lost while a request was on it.
pub(crate) fn lost(peer: &str, e: &ConnectionError) -> Failure {
    let peer_s = peer.to_owned();
    match e {
        ConnectionError::ApplicationClosed(ac) if ac.error_code == wire::CLOSE_RETIRED => Failure {
            error: TransportError::ConnectionLost {
                peer: peer_s,
                reason: "the peer retired the connection before taking the request".into(),
            },
            retry_elsewhere: true,
        },
        ConnectionError::LocallyClosed => {
            Failure::maybe_processed(TransportError::ConnectionLost {
                peer: peer_s,
                reason: "closed locally".into(),
            })
        }
        ConnectionError::TimedOut => Failure::maybe_processed(TransportError::ConnectionLost {
            peer: peer_s,
            reason: "idle timeout: the peer stopped answering".into(),
        }),
        ConnectionError::ApplicationClosed(ac) => {
            let error = if ac.error_code == wire::CLOSE_IDENTITY {
                TransportError::RejectedByPeer {
                    peer: peer_s,
                    reason: String::from_utf8_lossy(&ac.reason).into_owned(),
                }
            } else {
                TransportError::ConnectionLost {
                    peer: peer_s,
                    reason: format!(
                        "closed by the peer ({}: {})",
                        wire::close_code_name(ac.error_code),
                        String::from_utf8_lossy(&ac.reason)
                    ),
                }
            };
            Failure::maybe_processed(error)
        }
        other => match handshake_failure(other) {
            // A TLS 1.3 server refuses a client certificate after the client considers the
            // handshake done, so the refusal shows up on the first stream.
            HandshakeFailure::TheyRefused(reason) => {
                Failure::maybe_processed(TransportError::RejectedByPeer {
                    peer: peer_s,
                    reason,
                })
            }
            HandshakeFailure::WeRefused(reason) => {
                Failure::maybe_processed(TransportError::PeerRejected {
                    peer: peer_s,
                    reason,
                })
            }
            HandshakeFailure::Closing => Failure::maybe_processed(TransportError::Closed),
            HandshakeFailure::Other(reason) => {
                Failure::maybe_processed(TransportError::ConnectionLost {
                    peer: peer_s,
                    reason,
                })
            }
        },
    }
}

/// A stream stopped or reset by the peer with `code`.
fn stream_refused(peer: &str, code: VarInt) -> Failure {
    if code == wire::STREAM_REFUSED {
        Failure {
            error: TransportError::ConnectionLost {
                peer: peer.to_owned(),
                reason: "the peer refused the request: its connection is being retired".into(),
            },
            retry_elsewhere: true,
        }
    } else {
        Failure::maybe_processed(TransportError::Protocol {
            peer: peer.to_owned(),
            reason: format!(
                "the peer closed the stream with code {code} ({})",
                wire::stream_code_name(code)
            ),
        })
    }
}

/// A failure while reading a response or writing a request.
pub(crate) fn frame_failure(peer: &str, e: FrameError) -> Failure {
    match e {
        FrameError::Read(ReadError::Reset(code)) | FrameError::Write(WriteError::Stopped(code)) => {
            stream_refused(peer, code)
        }
        FrameError::Read(ReadError::ConnectionLost(e))
        | FrameError::Write(WriteError::ConnectionLost(e)) => lost(peer, &e),
        other => Failure::maybe_processed(TransportError::Protocol {
            peer: peer.to_owned(),
            reason: format!("bad response: {other}"),
        }),
    }
}

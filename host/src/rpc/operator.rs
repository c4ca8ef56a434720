//! Operator requests: what an operator (a person or tool with an operator certificate)
//! may send a node, and how a node answers them.
//!
//! Operators do not sign envelopes: mutual TLS is their authentication, and the peer's
//! [`PeerInfo`] (kind `operator`, name, certificate fingerprint) is what the node checks
//! and logs. An operator request is a transport request whose body starts with
//! [`OPERATOR_PREFIX`]; the rest is handed, unchanged, to the node's
//! [`OperatorService`], and its answer goes back unchanged (an `Err` becomes the
//! transport's error answer). What the bytes mean is the service's business (`crate::api`
//! encodes admin commands with postcard).
//!
//! **Why a prefix.** A node answers every peer on one endpoint, and a node certificate
//! used by mistake for an admin command (an operator pointed `--cert` at a node's files)
//! deserves a plain answer rather than "envelope rejected: malformed". The prefix starts
//! with a zero byte, which a sealed envelope never does (it starts with the varint length
//! of a non-empty body), so the two kinds of request cannot be confused and a node's
//! admin attempt is recognised, without counting as an envelope rejection, and handed to
//! the service with the node's identity: the service refuses it with
//! [`NODE_CERT_REFUSAL`], unless it asks to drain or undrain that very node (what a node's
//! own certificate may do: `tenure drain --self`, `crate::api`).
//!
//! A node registers its service after binding ([`super::Rpc::serve_operators`]); until
//! then operator requests are refused with a message saying so.

use crate::future::BoxFuture;
use crate::transport::PeerInfo;

/// The first bytes of every operator request body (protocol version
/// [`crate::version::ADMIN_VERSION`]; the golden tests check that the two agree).
pub const OPERATOR_PREFIX: &[u8] = b"\0tenure-operator/8\0";

/// What every version's prefix starts with: a request of another version is answered
/// with both versions named rather than as a malformed envelope.
pub const OPERATOR_PREFIX_ANY: &[u8] = b"\0tenure-operator/";

/// What a node answers when a node certificate sends an operator request.
pub const NODE_CERT_REFUSAL: &str =
    "node certificates cannot run admin commands; use an operator certificate";

/// Answers operator requests. Only peers whose certificate passed TLS (and is not
/// revoked) reach it: operators, and nodes, whose requests it must check by
/// `operator.identity.kind`.
pub trait OperatorService: Send + Sync + 'static {
    /// Answers one request `body` (without the prefix) from `operator`.
    fn call(&self, operator: &PeerInfo, body: Vec<u8>) -> BoxFuture<Result<Vec<u8>, String>>;
}

/// The transport body of an operator request carrying `body`.
pub fn operator_request(body: &[u8]) -> Vec<u8> {
    let mut wire = Vec::with_capacity(OPERATOR_PREFIX.len() + body.len());
    wire.extend_from_slice(OPERATOR_PREFIX);
    wire.extend_from_slice(body);
    wire
}

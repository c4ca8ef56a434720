//! Why a signed call failed.
//!
//! One type for the caller, so it can decide what to do without looking into the layers:
//! [`RpcError::is_retryable`] says whether trying again later, unchanged, may succeed.

use crate::envelope::{Reason, Rejection};
use crate::pki::Identity;
use crate::transport::TransportError;

/// A failed [`super::Rpc`] operation.
#[derive(Clone, Debug, thiserror::Error)]
pub enum RpcError {
    /// The transport failed (binding, dialing, sending, or the connection was lost).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// Our certificate is not a node's: only nodes seal envelopes.
    #[error("{identity} cannot make signed calls: only nodes can")]
    NotANode {
        /// Who the certificate speaks for.
        identity: Identity,
    },
    /// The peer's certificate gives no usable verifier (it passed TLS, so this is a bug or
    /// an unsupported key).
    #[error("no verifier for the certificate of {peer}: {reason}")]
    Verifier {
        /// The peer.
        peer: String,
        /// Why.
        reason: String,
    },
    /// The peer's response envelope failed a check; it was counted and logged.
    #[error("the response of {peer} was rejected ({}): {rejection}", rejection.reason())]
    Rejected {
        /// The peer.
        peer: String,
        /// What failed.
        rejection: Rejection,
    },
    /// The peer answered with an error: it rejected our envelope, or its service failed.
    #[error("{peer} answered with an error: {message}")]
    Remote {
        /// The peer.
        peer: String,
        /// Its message.
        message: String,
    },
    /// The peer answered with an envelope of another kind than the call's.
    #[error("{peer} answered a call of kind {sent} with kind {received}")]
    WrongKind {
        /// The peer.
        peer: String,
        /// The call's kind.
        sent: u16,
        /// The response's kind.
        received: u16,
    },
}

impl RpcError {
    /// Whether the same call may succeed if made again later without anyone changing
    /// anything: only transport failures of the network or the peer's availability.
    pub fn is_retryable(&self) -> bool {
        match self {
            RpcError::Transport(e) => e.is_retryable(),
            RpcError::NotANode { .. }
            | RpcError::Verifier { .. }
            | RpcError::Rejected { .. }
            | RpcError::Remote { .. }
            | RpcError::WrongKind { .. } => false,
        }
    }

    /// The rejection reason, if our side rejected the response envelope.
    pub fn rejection(&self) -> Option<Reason> {
        match self {
            RpcError::Rejected { rejection, .. } => Some(rejection.kind()),
            _ => None,
        }
    }
}

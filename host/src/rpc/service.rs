//! What a node answers signed calls with.
//!
//! A [`Service`] sees only what passed the gate: the authenticated node peer, the
//! envelope's `kind` and its payload. Its answer is sealed for the caller by the RPC layer;
//! an `Err` travels back as an (unsigned) error message. Authorization by kind is the
//! service's business, from the [`PeerInfo`] it gets.

use crate::future::BoxFuture;
use crate::transport::PeerInfo;

/// Answers verified calls.
pub trait Service: Send + Sync + 'static {
    /// Answers one call of `kind` with `payload` from node `from`.
    fn call(
        &self,
        from: &PeerInfo,
        kind: u16,
        payload: Vec<u8>,
    ) -> BoxFuture<Result<Vec<u8>, String>>;
}

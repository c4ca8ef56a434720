//! The server side's single extension point: what to do with a request.
//!
//! The transport hands the [`Handler`] opaque bytes and the authenticated peer, and sends
//! back whatever bytes (or error message) it returns. It does not decode, authorize or
//! deduplicate anything: the envelope layer checks signatures, recipients and replays, and
//! decides what a node or an operator may ask for, from the [`super::PeerInfo`] it gets.
//!
//! The handler also gets the [`super::Local`] identity we presented on the connection the
//! request arrived on: the peer verifies a signed response with that certificate, so that
//! is the key to sign it with (after a rotation, old and new connections differ).
//!
//! A handler runs in its own task, bounded by `request_timeout`; a handler that panics or
//! overruns costs its caller an error response, never the endpoint.

use super::{Local, PeerInfo};
use crate::future::BoxFuture;

/// Answers requests arriving over the transport.
pub trait Handler: Send + Sync + 'static {
    /// Handles one request `body` from `peer`, on a connection where we presented `local`.
    /// `Ok` bytes are the response body (at most
    /// `max_frame` bytes, or the caller gets an error instead); `Err` is a message the
    /// caller receives as [`super::TransportError::Remote`].
    fn handle(
        &self,
        peer: PeerInfo,
        local: Local,
        body: Vec<u8>,
    ) -> BoxFuture<Result<Vec<u8>, String>>;
}

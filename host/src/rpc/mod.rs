//! Signed calls between nodes: the envelope layer joined to the transport.
//!
//! A call is one transport request whose body is an envelope sealed by the caller for the
//! callee, answered by an envelope sealed by the callee for the caller. Both directions go
//! through a [`Gate`](crate::envelope::Gate) with the verifier of the TLS peer of the
//! connection the envelope travelled on: the sender must be that peer (docs/design.md §5).
//!
//! **Which key signs.** A receiver verifies with the certificate it saw in the handshake
//! of that very connection, and a node may be presenting an older certificate on an
//! older connection than on a newer one (the transport hot-reloads certificates). So
//! nothing here keeps "the current key": the caller seals each attempt inside
//! [`Transport::request_with`](crate::transport::Transport::request_with) with the
//! [`Local`](crate::transport::Local) signer of the connection that attempt uses, and the
//! server seals its response with the `Local` of the connection the request came on. A
//! retried attempt is sealed again, with a new sequence number, so the receiver's replay
//! window never sees the same envelope twice from the transport's own retry. After a
//! rotation the transport retires every connection, so traffic moves to the new key
//! without a failed call.
//!
//! **When it is sealed.** Each attempt is sealed only once it holds a stream, and the
//! answer once the service answered: a burst of calls beyond the peer's stream limit waits
//! unsealed, so the numbers in flight to a peer, out of order, are bounded by the stream
//! limit, which `client.rs` checks at compile time against the replay window
//! ([`REPLAY_WINDOW`](crate::envelope::REPLAY_WINDOW)).
//!
//! **Who may send.** Only node peers send envelopes (names of nodes and operators share
//! one namespace in the gate, so an operator envelope is refused before any check).
//! Operators authenticate by mutual TLS alone and send operator requests
//! (`operator.rs`): a prefixed body that goes, unsigned, to the [`OperatorService`] a node
//! registers with [`Rpc::serve_operators`]. A node peer's operator request goes there too,
//! with the node's identity: the service refuses it ("use an operator certificate")
//! unless it is that node's own drain or undrain (`crate::api::node_may_ask`).
//!
//! **Rejections** are answered with an error (the service is not called), counted per
//! [`Reason`](crate::envelope::Reason) and logged at a limited rate
//! ([`RejectLog`](crate::envelope::RejectLog)); a rejected response is counted the same
//! way and returned as [`RpcError::Rejected`]. Error answers themselves are not signed:
//! they carry no data a node acts on beyond "this call failed".
//!
//! Files: `error.rs` ([`RpcError`]), `service.rs` (the [`Service`] trait), `verifiers.rs`
//! (a bounded cache of verifiers by certificate fingerprint), `counts.rs` (calls sent,
//! failed and served per kind), `server.rs` (the transport handler), `client.rs` ([`Rpc`]
//! and its calls), `operator.rs` (operator requests), `decode.rs` ([`decode()`]: postcard
//! with a nesting limit, for every payload and answer a peer sends).

mod client;
mod counts;
mod decode;
mod error;
mod operator;
mod server;
mod service;
mod verifiers;

#[cfg(test)]
mod tests;

pub use client::Rpc;
pub use counts::{KINDS, KindCount};
pub use decode::{DecodeError, MAX_DEPTH, from_bytes as decode, with_tail as decode_with_tail};
pub use error::RpcError;
pub use operator::{NODE_CERT_REFUSAL, OPERATOR_PREFIX, OperatorService, operator_request};
pub use service::Service;

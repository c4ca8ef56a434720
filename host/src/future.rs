//! The boxed future that object-safe async traits return (a plugin's state backend, an
//! RPC service, an operator API handler). One low module owns it, so that a layer that
//! needs it (the QUIC transport, Raft's service) depends on nothing above it for it.

/// A boxed, sendable future.
pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

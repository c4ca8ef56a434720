//! The openraft type configuration and the names we use for openraft's generic types.
//!
//! openraft is generic over a type configuration; everything it stores, sends and answers
//! is parameterised by it. Every type is spelled out here, because the macro's defaults
//! are not ours (its default `SnapshotData` is an unqualified `Cursor`, its default node a
//! bare address). The aliases below fix the generic parameters once, so the rest of the
//! module reads `LogId` rather than `openraft::LogId<u64>`.
//!
//! **Node ids.** openraft identifies nodes by a number; Tenure by certificate name. The id
//! is derived from the name ([`node_id`]), so every node computes the same id for a peer
//! without asking anyone, and a node keeps its id across restarts and address changes.
//! The [`Peer`] (name and address) is what the membership stores for each id; the name is
//! what TLS and the envelope layer authenticate.

use openraft::error::Infallible;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;

/// A member of the Raft group as the membership records it: the node's certificate name
/// and the address its peers dial (`host:port`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    /// The node name (its certificate's).
    pub name: String,
    /// The address peers dial, `host:port`; resolved at each connection attempt.
    pub addr: String,
}

impl Peer {
    /// A peer named `name` reachable at `addr`.
    pub fn new(name: impl Into<String>, addr: impl Into<String>) -> Peer {
        Peer {
            name: name.into(),
            addr: addr.into(),
        }
    }

    /// This peer's Raft node id.
    pub fn id(&self) -> NodeId {
        node_id(&self.name)
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.addr)
    }
}

openraft::declare_raft_types!(
    /// The type configuration of Tenure's Raft group.
    pub TypeConfig:
        D = crate::cluster::Proposal,
        R = crate::cluster::Outcome,
        NodeId = u64,
        Node = Peer,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = super::snapshot_data::SnapshotData,
        AsyncRuntime = openraft::TokioRuntime,
        Responder = openraft::impls::OneshotResponder<TypeConfig>,
);

/// A Raft node id: see [`node_id`].
pub type NodeId = u64;

/// The Raft node id of the node named `name`: the first 8 bytes (big-endian) of the
/// SHA-256 of the name. Stable across restarts and address changes; a collision between
/// two names of one cluster is as likely as a 64-bit hash collision.
pub fn node_id(name: &str) -> NodeId {
    let digest = Sha256::digest(name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The running Raft instance.
pub type Raft = openraft::Raft<TypeConfig>;
/// What Raft reports about itself, streamed by [`super::Control::metrics`].
pub type Metrics = openraft::RaftMetrics<NodeId, Peer>;

pub(crate) type LogId = openraft::LogId<NodeId>;
pub(crate) type Vote = openraft::Vote<NodeId>;
pub(crate) type Entry = openraft::Entry<TypeConfig>;
pub(crate) type StoredMembership = openraft::StoredMembership<NodeId, Peer>;
pub(crate) type SnapshotMeta = openraft::SnapshotMeta<NodeId, Peer>;
pub(crate) type Snapshot = openraft::Snapshot<TypeConfig>;
pub(crate) type LogState = openraft::LogState<TypeConfig>;

pub(crate) type StorageError = openraft::StorageError<NodeId>;
pub(crate) type StorageIOError = openraft::StorageIOError<NodeId>;
pub(crate) type Fatal = openraft::error::Fatal<NodeId>;
pub(crate) type RaftError<E = Infallible> = openraft::error::RaftError<NodeId, E>;
pub(crate) type RpcError<E = Infallible> = openraft::error::RPCError<NodeId, Peer, RaftError<E>>;
pub(crate) type ClientWriteError = openraft::error::ClientWriteError<NodeId, Peer>;
pub(crate) type CheckIsLeaderError = openraft::error::CheckIsLeaderError<NodeId, Peer>;
pub(crate) type InitializeError = openraft::error::InitializeError<NodeId, Peer>;
pub(crate) type InstallSnapshotError = openraft::error::InstallSnapshotError;

pub(crate) type AppendEntriesRequest = openraft::raft::AppendEntriesRequest<TypeConfig>;
pub(crate) type AppendEntriesResponse = openraft::raft::AppendEntriesResponse<NodeId>;
pub(crate) type VoteRequest = openraft::raft::VoteRequest<NodeId>;
pub(crate) type VoteResponse = openraft::raft::VoteResponse<NodeId>;
pub(crate) type InstallSnapshotRequest = openraft::raft::InstallSnapshotRequest<TypeConfig>;
pub(crate) type InstallSnapshotResponse = openraft::raft::InstallSnapshotResponse<NodeId>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_stable_and_distinct() {
        // The first 8 bytes of sha256("n1"), big-endian: a change here renumbers every
        // existing cluster.
        let digest = Sha256::digest(b"n1");
        assert_eq!(node_id("n1").to_be_bytes(), digest[..8]);
        assert_eq!(node_id("n1"), Peer::new("n1", "x:1").id());
        assert_ne!(node_id("n1"), node_id("n2"));
    }
}

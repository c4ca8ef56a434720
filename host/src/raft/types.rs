//! The openraft type configuration and the names we use for openraft's generic types.
//!
//! openraft is generic over a type configuration; everything it stores, sends and answers
//! is parameterised by it. Every type is spelled out here, because the macro's defaults
//! are not ours (its default `SnapshotData` is an unqualified `Cursor`, its default node a
//! bare address). The aliases below fix the generic parameters once, so the rest of the
//! module reads `LogId` rather than `openraft::LogId<u64>`.
//!
//! **Member ids.** openraft identifies members by a number; Tenure's operators by
//! certificate name. A member's id belongs to its Raft store, not to its name: a store
//! made by this build takes [`member_id`] of its node's name and its store id (the format
//! record says so, `format.rs`), so a node that lost its disk comes back with a new store
//! and so a new id, never the id of the member that forgot its votes and log (issue 24).
//! A store made before keeps the id its member always had, [`node_id`] of the name. Both
//! are computed, never assigned: a receiver checks that a message's claimed sender id is
//! the authenticated name's (its name id, or the id of its name and the store the message
//! names, `service.rs`), with no look-up. The [`Peer`] (name and address) is what the
//! membership stores for each id; the name is what TLS and the envelope layer
//! authenticate, and it is unique among the members (`membership.rs`), so a name finds
//! at most one id ([`id_of`]).

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

/// The member id of the store `store` of the node named `name`: the first 8 bytes
/// (big-endian) of the SHA-256 of a label, the name and the store id. A store made by this
/// build takes it (`format.rs`); every member can compute it from the name TLS
/// authenticated and the store a message names.
pub fn member_id(name: &str, store: crate::cluster::StoreId) -> NodeId {
    let mut hash = Sha256::new();
    hash.update(b"tenure member id\0");
    hash.update((name.len() as u64).to_be_bytes());
    hash.update(name.as_bytes());
    hash.update(store.bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// Whether `id` may be the member id of node `name`, sending from store `store` if the
/// message names one: its name id (a store made before member ids), or the id of its name
/// and that store.
pub fn may_be(name: &str, store: Option<crate::cluster::StoreId>, id: NodeId) -> bool {
    id == node_id(name) || store.is_some_and(|store| id == member_id(name, store))
}

/// The id of the member named `name` in `membership`, if it has one.
pub fn id_of(membership: &openraft::Membership<NodeId, Peer>, name: &str) -> Option<NodeId> {
    membership
        .nodes()
        .find(|(_, peer)| peer.name == name)
        .map(|(id, _)| *id)
}

/// The seat in `membership` that a message of node `name` claiming member id `id` (already
/// checked to be the name's: [`may_be`]) speaks for: the id's own; or, for an id of the
/// name and a store (which passed the check only with that store named, on an addressed
/// message) when the name sits under another id, that seat. That is a new store of the
/// name whose replacement this replica has not applied yet (`replace.rs`): with ids of
/// names it held the same seat, and a voter that missed the replacement must still follow
/// it and vote for it, or it never catches up (issue 24, item 3). It cannot answer for the
/// old member: what this replica sends the seat names the old store, which the new node
/// refuses (`service.rs`). A name's id not in the membership speaks for no seat: the
/// retired process of a name now seated under a store's id, sending the plain kinds.
pub fn seat(
    membership: &openraft::Membership<NodeId, Peer>,
    name: &str,
    id: NodeId,
) -> Option<NodeId> {
    match membership.get_node(&id) {
        Some(peer) if peer.name == name => Some(id),
        Some(_) => None,
        None if id != node_id(name) => id_of(membership, name),
        None => None,
    }
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
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn node_ids_are_stable_and_distinct() {
        // The first 8 bytes of sha256("n1"), big-endian: a change here renumbers every
        // existing cluster.
        let digest = Sha256::digest(b"n1");
        assert_eq!(node_id("n1").to_be_bytes(), digest[..8]);
        assert_ne!(node_id("n1"), node_id("n2"));
    }

    #[test]
    fn a_new_store_is_a_new_member_id_which_only_its_name_may_claim() {
        let (a, b) = (
            crate::cluster::StoreId::random(),
            crate::cluster::StoreId::random(),
        );
        assert_eq!(member_id("n1", a), member_id("n1", a));
        assert_ne!(member_id("n1", a), member_id("n1", b));
        assert_ne!(member_id("n1", a), member_id("n2", a));
        assert_ne!(member_id("n1", a), node_id("n1"));
        assert!(may_be("n1", Some(a), member_id("n1", a)));
        assert!(may_be("n1", None, node_id("n1")));
        assert!(may_be("n1", Some(b), node_id("n1")));
        // Another store's id, or another name's, or a derived id with no store named.
        assert!(!may_be("n1", Some(b), member_id("n1", a)));
        assert!(!may_be("n2", Some(a), member_id("n1", a)));
        assert!(!may_be("n1", None, member_id("n1", a)));
    }

    /// A new store of a name whose replacement a replica missed speaks for the name's seat
    /// there (issue 24, item 3); no message speaks for another name's seat.
    #[test]
    fn a_new_store_of_a_seated_name_speaks_for_its_seat() {
        let (old, new) = (
            crate::cluster::StoreId::random(),
            crate::cluster::StoreId::random(),
        );
        let seats = BTreeMap::from([
            (member_id("n2", old), Peer::new("n2", "a:1")),
            (node_id("n1"), Peer::new("n1", "b:1")),
        ]);
        let voters = BTreeSet::from([member_id("n2", old), node_id("n1")]);
        let membership = openraft::Membership::new(vec![voters], seats);
        assert_eq!(
            seat(&membership, "n2", member_id("n2", new)),
            Some(member_id("n2", old))
        );
        assert_eq!(
            seat(&membership, "n2", member_id("n2", old)),
            Some(member_id("n2", old))
        );
        assert_eq!(seat(&membership, "n1", node_id("n1")), Some(node_id("n1")));
        // Another name's seat, or a name with none.
        assert_eq!(seat(&membership, "n3", node_id("n1")), None);
        assert_eq!(seat(&membership, "n3", node_id("n3")), None);
        // The name's id, when the name sits under a store's id: no seat.
        assert_eq!(seat(&membership, "n2", node_id("n2")), None);
    }
}

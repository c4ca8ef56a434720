//! The message kinds of the control plane and the payloads of its own requests.
//!
//! Every signed call carries a `kind` (`u16`). The numbers are allocated here, in one
//! place, so that no two users of the node's one RPC endpoint collide:
//!
//! | kinds | owner |
//! |---|---|
//! | 1..=9 | Raft's own messages (this module) |
//! | 10..=19 | the control plane's requests: propose, join, store info, replica hashes, replace (this module) |
//! | 20..=99 | the node's own kinds (sessions, …): [`super::RaftService`] hands them to the fallback service |
//! | 100.. | unallocated; also handed to the fallback |
//!
//! Payloads and answers are postcard. Raft messages answer
//! `Result<openraft response, openraft error>`; the control plane's requests answer the
//! enums below, which say whether the request was carried out, refused, or must go to
//! another node. An `Err` answer of the RPC layer means the request could not even be
//! read (or was refused by the envelope gate): never "maybe done".

use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};

use super::types::Peer;
use crate::cluster::Outcome;

/// Raft AppendEntries (also the heartbeat): `AppendEntriesRequest` →
/// `Result<AppendEntriesResponse, Fatal>`.
pub const APPEND_ENTRIES: u16 = 1;
/// Raft RequestVote: `VoteRequest` → `Result<VoteResponse, Fatal>`.
pub const VOTE: u16 = 2;
/// Raft InstallSnapshot, one chunk: `InstallSnapshotRequest` →
/// `Result<InstallSnapshotResponse, RaftError<InstallSnapshotError>>`.
pub const INSTALL_SNAPSHOT: u16 = 3;
/// [`APPEND_ENTRIES`], naming the store it is for: `Addressed<AppendEntriesRequest>`,
/// the same answer. Sent from cluster version [`crate::version::ADDRESSED`]; the three
/// `_TO` kinds are refused by a node of another store (`service.rs`).
pub const APPEND_ENTRIES_TO: u16 = 4;
/// [`VOTE`], naming the store it is for: `Addressed<VoteRequest>`, the same answer.
pub const VOTE_TO: u16 = 5;
/// [`INSTALL_SNAPSHOT`], naming the store it is for: `Addressed<InstallSnapshotRequest>`,
/// the same answer.
pub const INSTALL_SNAPSHOT_TO: u16 = 6;
/// A [`crate::cluster::Proposal`] for the leader to commit → [`ProposeReply`]. The
/// leader refuses a payload over `ControlOptions::max_command` unread.
pub const PROPOSE: u16 = 10;
/// A node asks to join: [`Peer`] (its name and the address to dial it at), then, from
/// this build on, its store's [`crate::cluster::StoreId`] (a tail that 0.2.0 does not
/// read: `rpc::decode_with_tail`) → [`JoinReply`]. A non-leader answers with the leader
/// to ask; only the node named may send it.
pub const JOIN: u16 = 11;
/// A node with a new Raft store asks what the answering node knows of the cluster
/// (`forming.rs`): an empty payload → [`super::forming::StoreInfo`]. Any node may ask.
pub const STORE_INFO: u16 = 12;
/// The leader asks a member for its replica's recent hashes (`checksums.rs`): an empty
/// payload → `Vec<checksums::Hashed>`. Any member may ask.
pub const REPLICA_HASHES: u16 = 13;
/// A node with a new store that the cluster knows as a member asks the leader to remove
/// its old member, so that it can join as a new one (`replace.rs`): its new store's
/// [`crate::cluster::StoreId`] → [`super::replace::ReplaceReply`]. Only the node itself
/// may ask: the sender's authenticated name is the member meant.
pub const REPLACE: u16 = 14;
/// Kinds the node allocates for itself; never interpreted here.
pub const NODE_KINDS: RangeInclusive<u16> = 20..=99;

/// Whether `kind` is one the control plane answers itself.
pub(crate) fn is_control(kind: u16) -> bool {
    matches!(
        kind,
        APPEND_ENTRIES
            | VOTE
            | INSTALL_SNAPSHOT
            | APPEND_ENTRIES_TO
            | VOTE_TO
            | INSTALL_SNAPSHOT_TO
            | PROPOSE
            | JOIN
            | STORE_INFO
            | REPLICA_HASHES
            | REPLACE
    )
}

/// The plain kind of a Raft message's addressed kind (the same message, for metrics and
/// tests); any other kind as it is.
pub fn plain(kind: u16) -> u16 {
    match kind {
        APPEND_ENTRIES_TO => APPEND_ENTRIES,
        VOTE_TO => VOTE,
        INSTALL_SNAPSHOT_TO => INSTALL_SNAPSHOT,
        other => other,
    }
}

/// The addressed kind of a plain Raft message's kind ([`plain`] undoes it).
pub(crate) fn addressed(kind: u16) -> u16 {
    match kind {
        APPEND_ENTRIES => APPEND_ENTRIES_TO,
        VOTE => VOTE_TO,
        INSTALL_SNAPSHOT => INSTALL_SNAPSHOT_TO,
        other => other,
    }
}

/// A Raft message for the member of one store, from the member of one store: `to` is
/// the store the sender's replica records for the recipient's name
/// ([`crate::cluster::Cluster::stores`]), `None` while it records none (the member has
/// not opened a session since the cluster reached [`crate::version::ADDRESSED`]). A node
/// under that name with another store refuses it: it is not the member the sender means,
/// only its successor under the same name. `from` is the sender's own store: a node
/// refuses a message from a store its replica has retired (the name was removed with it,
/// `Cluster::retired`), so a process still running on a removed member's data dir cannot
/// speak for the member its name now is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Addressed<T> {
    pub to: Option<crate::cluster::StoreId>,
    pub from: crate::cluster::StoreId,
    pub request: T,
}

/// The answer to [`PROPOSE`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProposeReply {
    /// Committed and applied on the leader, at log `index`; the state machine's answer.
    /// The proposer waits until its own replica has applied `index` too.
    Applied { response: Outcome, index: u64 },
    /// The receiver is not the leader, and did not append the command. `leader` is the
    /// one it knows of, if any.
    NotLeader { leader: Option<Peer> },
    /// Refused without being appended (e.g. the sender is not a member).
    Refused(String),
    /// Raft failed while the command was in flight: it may or may not be committed.
    Failed(String),
    /// Not appended, and may be once the leader has applied what it committed: a
    /// stamped proposal that reached a leader still below the cluster version that
    /// allows stamps (the proposer's replica applied the raise first). Retried.
    NotYet(String),
}

/// The answer to [`JOIN`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JoinReply {
    /// The node is a member (learner or voter) at the address it gave.
    Joined { voter: bool },
    /// The receiver is not the leader; `leader` is the one it knows of, to ask instead.
    NotLeader { leader: Option<Peer> },
    /// Refused (e.g. a node asking for another's name), or Raft failed.
    Refused(String),
    /// Never with this store: a member of the name was removed with it
    /// (`membership.rs`); `why` says what to do, and `leader` is the leader the answering
    /// node knows of, for the joiner to ask too (it stops only when most of the nodes it
    /// asked say so). Only answered to a JOIN that named its store, so never to a 0.2.0
    /// node.
    Removed { why: String, leader: Option<Peer> },
}

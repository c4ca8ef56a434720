//! [`RaftService`]: answers the control plane's message kinds on the node's RPC endpoint.
//!
//! The RPC layer has already checked the envelope: the sender is an authenticated node.
//! What is checked here is what only Raft can know:
//! - a Raft message must come from the node it names as its sender (the leader id in an
//!   AppendEntries or InstallSnapshot, the candidate in a vote: the name's id, or the id
//!   of the name and the sender's store the message names, `types.rs`), so one node
//!   cannot speak for another, and from a member this node knows of (a voter or learner of its
//!   membership, or a member of its replica; not only the voters, so that a node that
//!   missed membership changes still votes for the new voters): a removed member or any
//!   other holder of a node certificate cannot win a vote or rewrite a follower's log
//!   with a higher term (a node with no membership yet takes the first leader that
//!   reaches it);
//! - a Raft message that names the store it is for (its `_TO` kind, from cluster version
//!   7: `kinds.rs`) must name this node's: a node whose disk was wiped or replaced and
//!   that rejoined under its old name is another member, and a replica that has not yet
//!   applied its rejoin still means the old one (whose vote and log are gone);
//! - a proposal must come from a member of the group; it is committed marked with the
//!   sender's name and applied with that member's rights only (`cluster/authorize.rs`);
//!   a proposal over the size bound of local ones is refused before it is decoded;
//! - a join must name the node that sends it, and a node asks only for its own old
//!   member to be replaced (`replace.rs`);
//! - any message (control plane or the node's own kinds) must come over a connection that
//!   speaks the cluster's version: an older build is refused, join included
//!   (`crate::version`).
//!
//! Refusals of members' messages are counted and logged at a bounded rate
//! (`refusals.rs`).
//!
//! Raft messages go to the local openraft instance and their answers go back as postcard
//! `Result`s (a Raft error, such as "shutting down", is an answer, not a failed call).
//! A payload that cannot be decoded, or a forbidden sender, is an `Err` of the call: the
//! request was not acted on. Every kind this module does not own goes to the fallback
//! service the node provided (its sessions and other kinds, `kinds::NODE_KINDS`).

use std::cmp::Ordering;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Shared;
use super::error::ProposeError;
use super::kinds::{
    self, APPEND_ENTRIES, APPEND_ENTRIES_TO, Addressed, INSTALL_SNAPSHOT, INSTALL_SNAPSHOT_TO,
    JOIN, PROPOSE, REPLACE, REPLICA_HASHES, STORE_INFO, VOTE, VOTE_TO,
};
use super::kinds::{JoinReply, ProposeReply};
use super::refusals::Refusal;
use super::types::{
    AppendEntriesRequest, AppendEntriesResponse, Fatal, InstallSnapshotRequest, NodeId, Peer,
    RaftError, VoteRequest, may_be,
};
use crate::cluster::{Proposal, StoreId};
use crate::future::BoxFuture;
use crate::rpc::Service;
use crate::transport::PeerInfo;

/// The node's RPC service with the control plane in front of the node's own.
pub struct RaftService {
    shared: Arc<Shared>,
    fallback: Arc<dyn Service>,
}

impl RaftService {
    pub(crate) fn new(shared: Arc<Shared>, fallback: Arc<dyn Service>) -> RaftService {
        RaftService { shared, fallback }
    }
}

impl Service for RaftService {
    fn call(
        &self,
        from: &PeerInfo,
        kind: u16,
        payload: Vec<u8>,
    ) -> BoxFuture<Result<Vec<u8>, String>> {
        if let Err(error) = self.shared.check_version(from, kind) {
            self.shared
                .refusals
                .record(Refusal::OlderVersion, &from.identity.name, &error);
            return Box::pin(std::future::ready(Err(error)));
        }
        if !kinds::is_control(kind) {
            return self.fallback.call(from, kind, payload);
        }
        let shared = self.shared.clone();
        let from = from.identity.name.clone();
        Box::pin(async move { shared.answer(&from, kind, &payload).await })
    }
}

impl Shared {
    /// Refuses every message of a node whose connection speaks less than the cluster's
    /// version: it may not understand what the cluster commits (`crate::version`). This
    /// covers a join too, so a node of an older build never becomes a member.
    ///
    /// A join is also held to the version this node, as leader, is about to raise the
    /// cluster to (`Control::raising`): every member speaks it, and a node of an older
    /// build admitted between the decision and the commit would be a learner that stops
    /// at the raise and holds every later one up.
    fn check_version(&self, from: &PeerInfo, kind: u16) -> Result<(), String> {
        use std::sync::atomic::Ordering::Relaxed;
        let cluster = self.cluster_version.load(Relaxed);
        let floor = if kind == JOIN {
            cluster.max(self.raising.load(Relaxed))
        } else {
            cluster
        };
        if from.version >= floor {
            return Ok(());
        }
        let state = if floor > cluster {
            format!(
                "this cluster's leader is raising its version to {floor} (every member speaks tenure/{floor})"
            )
        } else {
            format!(
                "this cluster runs at version {floor} (raised once every member spoke tenure/{floor}, and never lowered)"
            )
        };
        Err(format!(
            "{state}; {} speaks tenure/{} at most: run a build that speaks tenure/{floor} on it (docs/operating.md, \"Upgrading\")",
            from.identity, from.version
        ))
    }

    /// Answers one control plane message of `kind` from node `from`.
    async fn answer(
        self: &Arc<Self>,
        from: &str,
        kind: u16,
        payload: &[u8],
    ) -> Result<Vec<u8>, String> {
        match kind {
            APPEND_ENTRIES => {
                let request = decode_from_leader(kind, payload)?;
                self.append(from, None, None, request).await
            }
            APPEND_ENTRIES_TO => {
                let addressed: Addressed<_> = decode_from_leader(kind, payload)?;
                self.check_sender_store(from, addressed.from, "AppendEntries")?;
                self.append(from, Some(addressed.from), addressed.to, addressed.request)
                    .await
            }
            VOTE => self.vote(from, None, None, decode(kind, payload)?).await,
            VOTE_TO => {
                let addressed: Addressed<_> = decode(kind, payload)?;
                self.check_sender_store(from, addressed.from, "vote request")?;
                self.vote(from, Some(addressed.from), addressed.to, addressed.request)
                    .await
            }
            INSTALL_SNAPSHOT => {
                let request = decode_from_leader(kind, payload)?;
                self.snapshot(from, None, None, request).await
            }
            INSTALL_SNAPSHOT_TO => {
                let addressed: Addressed<_> = decode_from_leader(kind, payload)?;
                self.check_sender_store(from, addressed.from, "snapshot chunk")?;
                self.snapshot(from, Some(addressed.from), addressed.to, addressed.request)
                    .await
            }
            PROPOSE => {
                // The bound a local proposal meets (`Shared::propose`), checked on the
                // payload before it is decoded: the proposer's own check cannot be relied on.
                let max = self.options.max_command();
                if payload.len() > max {
                    let too_large = ProposeError::TooLarge {
                        len: payload.len(),
                        max,
                    };
                    tracing::warn!(event = crate::events::CONTROL_ERROR, %from, len = payload.len(), max, "refused an oversized proposal");
                    return encode(&ProposeReply::Refused(too_large.to_string()));
                }
                let proposal: Proposal = decode(kind, payload)?;
                encode(&self.serve_propose(from, proposal).await)
            }
            JOIN => {
                let (peer, joiner): (Peer, Option<(StoreId, NodeId)>) =
                    crate::rpc::decode_with_tail(payload)
                        .map_err(|e| format!("unreadable payload of kind {kind}: {e}"))?;
                let id = super::membership::joiner_id(&peer.name, joiner);
                match self.serve_join(from, peer, joiner).await {
                    // From this build on, the id it was seated under follows (a tail
                    // 0.2.0 does not send): the joiner checks it is its own.
                    joined @ JoinReply::Joined { .. } => encode(&(joined, id)),
                    other => encode(&other),
                }
            }
            STORE_INFO => self
                .store_info(from)
                .encode()
                .map_err(|e| format!("cannot encode the answer: {e}")),
            REPLACE => {
                let store: crate::cluster::StoreId = decode(kind, payload)?;
                encode(&self.serve_replace(from, store).await)
            }
            REPLICA_HASHES => {
                self.check_member(from, None, "replica check")?;
                encode(&self.checksums.list())
            }
            other => Err(format!("kind {other} is not a control plane message")),
        }
    }

    /// An AppendEntries from `from` of store `sender`, for the store `to`, where the
    /// message names them.
    async fn append(
        &self,
        from: &str,
        sender: Option<StoreId>,
        to: Option<StoreId>,
        request: AppendEntriesRequest,
    ) -> Result<Vec<u8>, String> {
        self.screen(from, (sender, to), &request.vote, "AppendEntries", true)?;
        self.appends.send_modify(|n| *n += 1);
        let term = request.vote.leader_id().get_term();
        // In flight from before Raft sees it until recorded (`heard.rs`).
        let hearing = self.heard.hearing().await;
        let answer = self.raft.append_entries(request).await.map_err(fatal);
        // Accepted as leader of its term (a conflict too): heard, for the handoff.
        if matches!(&answer, Ok(a) if !matches!(a, AppendEntriesResponse::HigherVote(_))) {
            self.heard.record(term, std::time::Instant::now());
        }
        drop(hearing);
        encode(&answer)
    }

    /// A vote request from `from` of store `sender`, for the store `to`, where the
    /// message names them.
    async fn vote(
        &self,
        from: &str,
        sender: Option<StoreId>,
        to: Option<StoreId>,
        request: VoteRequest,
    ) -> Result<Vec<u8>, String> {
        self.screen(from, (sender, to), &request.vote, "vote request", false)?;
        let theirs = request.last_log_id;
        let answer = self.raft.vote(request).await.map_err(fatal);
        if let Ok(answer) = &answer {
            self.step_back.refused(theirs, answer);
        }
        encode(&answer)
    }

    /// A snapshot chunk from `from` of store `sender`, for the store `to`, where the
    /// message names them.
    async fn snapshot(
        &self,
        from: &str,
        sender: Option<StoreId>,
        to: Option<StoreId>,
        request: InstallSnapshotRequest,
    ) -> Result<Vec<u8>, String> {
        self.screen(from, (sender, to), &request.vote, "snapshot chunk", true)?;
        let vote = request.vote;
        let hearing = self.heard.hearing().await;
        let answer = self.raft.install_snapshot(request).await;
        // Taken from the leader of its term (its vote is at least this node's):
        // heard, for the handoff, as an append is.
        if matches!(&answer, Ok(a) if a.vote.partial_cmp(&vote) != Some(Ordering::Greater)) {
            self.heard
                .record(vote.leader_id().get_term(), std::time::Instant::now());
        }
        drop(hearing);
        encode(&answer)
    }

    /// The checks a Raft message passes before Raft sees it (see the module doc), in this
    /// order: its claimed sender is `from` (of the store it names, `stores.0`), this node
    /// is not forming, `from` is a member here, the message is for this node's store
    /// (`stores.1`), and (`higher_term`: appends and snapshots) a term above this node's
    /// comes from a voter.
    fn screen(
        &self,
        from: &str,
        stores: (Option<StoreId>, Option<StoreId>),
        vote: &super::types::Vote,
        what: &str,
        higher_term: bool,
    ) -> Result<(), String> {
        let id = check_sender(from, stores.0, vote.leader_id().voted_for(), what)?;
        refuse_while_forming(self)?;
        self.check_member(from, Some(id), what)?;
        self.check_addressee(from, stores.1, what)?;
        if higher_term {
            self.check_term(from, id, vote.leader_id().get_term(), what)?;
        }
        Ok(())
    }

    /// Refuses a Raft message meant for another store of this node's name. Most often
    /// the sender's replica has not yet applied this node's rejoin after its old store
    /// was lost: answering would be answering for the old member (its vote, its log). A
    /// leader whose replica lags its own log can name an old store briefly too, so the
    /// message says what it saw, not why.
    fn check_addressee(&self, from: &str, to: Option<StoreId>, what: &str) -> Result<(), String> {
        match to {
            Some(store) if store != self.store => {
                let error = format!(
                    "a {what} from {from} for {name} of store {store}, as {from}'s replica records it; this node is {name} of store {mine}",
                    name = self.name,
                    mine = self.store
                );
                self.refusals.record(Refusal::Misaddressed, from, &error);
                Err(error)
            }
            _ => Ok(()),
        }
    }

    /// Refuses a Raft message from a store this node's replica has retired: the process
    /// of a member removed with that store, still running under the name a new store of
    /// it has since joined as (`Cluster::retired`).
    fn check_sender_store(&self, from: &str, store: StoreId, what: &str) -> Result<(), String> {
        let retired = {
            let cluster = self.cluster.read().unwrap_or_else(|e| e.into_inner());
            cluster.is_retired(from, store)
        };
        if !retired {
            return Ok(());
        }
        let error = format!(
            "a {what} from {from} of store {store}, which was removed from the cluster with \
             that store: that process must stop (a new member under the name {from} may \
             run elsewhere)"
        );
        self.refusals.record(Refusal::RemovedStore, from, &error);
        Err(error)
    }

    /// Refuses a Raft message from a node that is not a member here (`Shared::may_lead`);
    /// `id` is the member id it claims, checked to be `from`'s.
    fn check_member(&self, from: &str, id: Option<NodeId>, what: &str) -> Result<(), String> {
        if self.may_lead(from, id) {
            return Ok(());
        }
        let error = format!("a {what} from {from}, which is not a member this node knows of");
        self.refusals.record(Refusal::NotAMember, from, &error);
        Err(error)
    }
}

impl Shared {
    /// Refuses an append or snapshot of a higher term than this node's from a node that is
    /// not a voter here: a learner's vote requests are taken (a voter that missed its
    /// promotion must elect it), and once elected it leads in the term this node took
    /// when it voted; a higher term from a non-voter could only be forged, and would
    /// depose the leader and truncate this node's log.
    fn check_term(&self, from: &str, id: NodeId, term: u64, what: &str) -> Result<(), String> {
        let current = self.metrics.borrow().current_term;
        if term <= current || self.is_voter_here(from, id) {
            return Ok(());
        }
        let error = format!(
            "a {what} of term {term} from {from}, which is not a voter here, above this \
             node's term {current}"
        );
        self.refusals.record(Refusal::NotAMember, from, &error);
        Err(error)
    }
}

/// Refuses Raft's messages while this node's new store has not yet formed or joined the
/// cluster (`forming.rs`).
fn refuse_while_forming(shared: &Shared) -> Result<(), String> {
    match super::forming::refuses_raft(shared) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// A Raft error without an API part is a fatal one.
fn fatal(e: RaftError) -> Fatal {
    match e {
        RaftError::Fatal(f) => f,
        RaftError::APIError(never) => match never {},
    }
}

/// Refuses a Raft message whose claimed sender is not the node that sent it: the id must
/// be `from`'s name id, or the id of `from` and the store the message names (`types.rs`);
/// a message that names no store (the plain kinds) may claim the name id only. Returns
/// the id.
fn check_sender(
    from: &str,
    store: Option<StoreId>,
    claimed: Option<NodeId>,
    what: &str,
) -> Result<NodeId, String> {
    match claimed {
        Some(id) if may_be(from, store, id) => Ok(id),
        _ => Err(format!(
            "a {what} from {from} names member id {claimed:?} as its sender, which is not {from}'s (of store {})",
            store.map_or_else(|| "unnamed".to_owned(), |s| s.to_string())
        )),
    }
}

/// Decodes a request's payload. The transport has bounded its size; postcard allocates
/// in proportion to the bytes it reads; [`crate::rpc::decode`] bounds the nesting.
pub(super) fn decode<T: DeserializeOwned>(kind: u16, payload: &[u8]) -> Result<T, String> {
    crate::rpc::decode(payload).map_err(|e| format!("unreadable payload of kind {kind}: {e}"))
}

/// As [`decode`], for what a leader replicates: entries this build cannot read most
/// likely come from a leader of a newer build whose cluster's version was raised past
/// what this one speaks (the raise in the same message cannot be reached to stop on).
/// Said here once per run, as well as in the answer.
fn decode_from_leader<T: DeserializeOwned>(kind: u16, payload: &[u8]) -> Result<T, String> {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    decode(kind, payload).map_err(|e| {
        let why = format!(
            "{e}: a leader of a newer build may be sending what this build (which speaks {}) cannot read; run a build that speaks the cluster's version on this node (docs/operating.md, \"Upgrading\")",
            crate::version::describe_window(&crate::version::protocols())
        );
        if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(event = crate::events::CONTROL_ERROR, error = %why, "cannot read the leader's message");
        }
        why
    })
}

fn encode<T: Serialize>(answer: &T) -> Result<Vec<u8>, String> {
    postcard::to_allocvec(answer).map_err(|e| format!("cannot encode the answer: {e}"))
}

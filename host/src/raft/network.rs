//! Raft's messages over the node's signed calls (openraft's `RaftNetworkFactory` and
//! `RaftNetwork`).
//!
//! Each Raft message is one [`Rpc::call`] of its kind (`kinds.rs`) with a postcard
//! payload, to the peer's name (which TLS and the envelope layer authenticate) at its
//! membership address (resolved with `lookup_host` at each call; the first address wins).
//!
//! **Late binding.** The RPC endpoint answers with a service that dispatches into Raft, so
//! it can only be bound after Raft exists, and Raft needs its network first. The network
//! therefore holds an [`Endpoint`]: empty until `Control::attach` fills it, emptied again
//! at shutdown (which also breaks the reference cycle endpoint → service → Raft →
//! network → endpoint). Until then every message fails as unreachable.
//!
//! **Failures** map onto what openraft does next:
//! - the peer could not be reached (dial or connection failure, no answer in time from a
//!   peer not known to be up, a gated call, see `link.rs`) → `Unreachable`: replication
//!   backs off ([`RaftNetwork::backoff`], 100 ms doubling to 250 ms);
//! - no answer in time from a peer that is up → `Timeout`: retried at the next heartbeat;
//! - an answer that is an error or unreadable → `Network`; a Raft error the peer
//!   returned (it is shutting down, its storage failed) → `RemoteError`;
//! - an AppendEntries message over the size limit → `PayloadTooLarge` with half the
//!   entries, which openraft retries at once (the log store's read budget normally keeps
//!   messages far below it).
//!
//! Each call runs in a task of its own and waits for it for three quarters of openraft's
//! timeout: openraft drops a call at its deadline, and a dial dropped halfway never
//! completes, while a task runs to the transport's own bounds and records the outcome in
//! the peer's [`Link`].
//!
//! **Addressed.** From cluster version [`crate::version::ADDRESSED`], each message goes as
//! its `_TO` kind (`kinds.rs`) and names the store the replica records for the peer's
//! name: a node that lost its disk and rejoined under its old name refuses what was
//! meant for its old self (`service.rs`), so a replica that missed its rejoin cannot
//! count its vote as the old member's. Each also names the sender's own store, which a
//! receiver refuses once its replica has retired it (the name was removed with it). A node
//! whose member id is of its name and store (a store made by 0.3.0, `types.rs`) sends
//! addressed messages whatever the version: a receiver checks that id against the store.
//!
//! Snapshots go as chunks (openraft's default `full_snapshot`, one INSTALL_SNAPSHOT call
//! per `snapshot_max_chunk_size` bytes), each well below the transport's frame limit.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use openraft::error::{NetworkError, PayloadTooLarge, RemoteError, Timeout, Unreachable};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::{RPCTypes, error::RPCError};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::kinds::{self, Addressed};
use super::link::{self, Admission, Link};
use super::types::{
    AppendEntriesRequest, AppendEntriesResponse, Fatal, InstallSnapshotError,
    InstallSnapshotRequest, InstallSnapshotResponse, NodeId, Peer, RaftError, RpcError, TypeConfig,
    VoteRequest, VoteResponse,
};
use crate::cluster::{Cluster, StoreId};
use crate::rpc::{self, Rpc};
use crate::transport::TransportError;

/// The node's RPC endpoint and its own peer entry, once attached.
#[derive(Clone)]
pub(crate) struct Attached {
    pub(crate) rpc: Arc<Rpc>,
    pub(crate) me: Peer,
}

/// The late-bound endpoint (see the module doc). Clones share it.
#[derive(Clone, Default)]
pub(crate) struct Endpoint(Arc<RwLock<Option<Attached>>>);

impl Endpoint {
    pub(crate) fn get(&self) -> Option<Attached> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set(&self, attached: Option<Attached>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = attached;
    }
}

/// Each peer's [`Link`], by node id: kept across clients and leader terms, and read by
/// the leader's voter upkeep (`autopilot.rs`).
pub(crate) type Links = Arc<Mutex<HashMap<NodeId, Arc<Link>>>>;

/// Makes a [`Client`] per peer; keeps one [`Link`] per peer across clients.
pub(crate) struct Network {
    me: NodeId,
    /// This node's store, which its addressed messages name as their sender's.
    store: StoreId,
    /// Every message goes addressed, whatever the cluster's version: `me` is of this
    /// node's name and store (`types.rs`), which a receiver can check only against the
    /// store a message names.
    always_addressed: bool,
    /// Told when a voter's answer shows this node's log is behind (`step_back.rs`).
    step_back: Arc<super::step_back::StepBack>,
    endpoint: Endpoint,
    links: Links,
    max_payload: usize,
    cluster: Arc<RwLock<Cluster>>,
}

impl Network {
    /// The network of node `me`, sending messages of at most `max_payload` bytes, with
    /// its links in `links`; `cluster` is its replica, which says whom a message is for.
    pub(crate) fn new(
        (me, store, always_addressed): (NodeId, StoreId, bool),
        step_back: Arc<super::step_back::StepBack>,
        endpoint: Endpoint,
        links: Links,
        max_payload: usize,
        cluster: Arc<RwLock<Cluster>>,
    ) -> Network {
        Network {
            me,
            store,
            always_addressed,
            step_back,
            endpoint,
            links,
            max_payload,
            cluster,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Client;

    async fn new_client(&mut self, target: NodeId, node: &Peer) -> Client {
        let link = self
            .links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(target)
            .or_insert_with(|| Arc::new(Link::new(&node.name, &node.addr)))
            .clone();
        Client {
            me: self.me,
            store: self.store,
            always_addressed: self.always_addressed,
            step_back: self.step_back.clone(),
            target,
            peer: node.clone(),
            link,
            endpoint: self.endpoint.clone(),
            max_payload: self.max_payload,
            cluster: self.cluster.clone(),
        }
    }
}

/// Test-only: the messages tests drop before they are sent, by (sender's address,
/// receiver's address, kind): a partition of one kind of message in one direction, which
/// revoking a key cannot make (`once_tests.rs`). A test's nodes have addresses of their
/// own, so tests running at once do not meet here.
#[cfg(test)]
pub(crate) static DROPPED: std::sync::Mutex<std::collections::BTreeSet<(String, String, u16)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Test-only: whether a message of `kind` from `from` to `to` is dropped ([`DROPPED`]).
#[cfg(test)]
pub(crate) fn dropped(from: &str, to: &str, kind: u16) -> bool {
    // A test names the plain kind; its addressed form is the same message.
    let kind = kinds::plain(kind);
    DROPPED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(&(from.to_string(), to.to_string(), kind))
}

/// Sends Raft messages to one peer.
pub(crate) struct Client {
    me: NodeId,
    store: StoreId,
    always_addressed: bool,
    step_back: Arc<super::step_back::StepBack>,
    target: NodeId,
    peer: Peer,
    link: Arc<Link>,
    endpoint: Endpoint,
    max_payload: usize,
    cluster: Arc<RwLock<Cluster>>,
}

/// Why a call failed, in the terms openraft distinguishes.
#[derive(Debug)]
enum Failure {
    Unreachable(String),
    Network(String),
    Timeout(Duration),
}

/// An error carrying a message, for openraft's error wrappers.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Message(String);

impl Client {
    /// Whom this peer's messages are for, once the cluster's version has them name it
    /// (or this node's member id needs its store named, [`Network::always_addressed`]):
    /// `Some(store)` (`None` while the replica records no store for the name); `None`
    /// before the version, when they go as the plain kinds (see the module doc).
    fn addressee(&self) -> Option<Option<StoreId>> {
        let cluster = self.cluster.read().unwrap_or_else(PoisonError::into_inner);
        (cluster.version >= crate::version::ADDRESSED || self.always_addressed)
            .then(|| cluster.stores.get(&self.peer.name).copied())
    }

    /// Sends Raft message `request` of the plain kind `plain`, as its addressed kind once
    /// the cluster's version has messages name their recipient ([`Client::addressee`]),
    /// and decodes the answer as [`Client::request`] does.
    async fn send<Req, T, W, E>(
        &self,
        plain: u16,
        action: RPCTypes,
        request: &Req,
        option: RPCOption,
    ) -> Result<T, RpcError<E>>
    where
        Req: Serialize,
        T: DeserializeOwned,
        W: DeserializeOwned + Into<RaftError<E>>,
        E: std::error::Error,
    {
        let ttl = option.hard_ttl();
        match self.addressee() {
            Some(to) => {
                let addressed = Addressed {
                    to,
                    from: self.store,
                    request,
                };
                self.request::<_, T, W, E>(kinds::addressed(plain), action, &addressed, ttl)
                    .await
            }
            None => {
                self.request::<_, T, W, E>(plain, action, request, ttl)
                    .await
            }
        }
    }

    /// Sends one message of `kind` and returns the answer's payload. Waits at most 3/4 of
    /// `ttl` (openraft's own deadline for the message).
    async fn call(&self, kind: u16, body: Vec<u8>, ttl: Duration) -> Result<Vec<u8>, Failure> {
        let Some(attached) = self.endpoint.get() else {
            return Err(Failure::Unreachable(
                "the RPC endpoint is not attached (starting or shutting down)".into(),
            ));
        };
        #[cfg(test)]
        if dropped(&attached.me.addr, &self.peer.addr, kind) {
            return Err(Failure::Unreachable("dropped by the test".into()));
        }
        let admission = self
            .link
            .admit(&self.peer.addr, Instant::now())
            .map_err(Failure::Unreachable)?;
        let task = tokio::spawn(exchange(
            attached.rpc,
            self.peer.clone(),
            self.link.clone(),
            kind,
            body,
        ));
        let wait = ttl.mul_f64(0.75);
        match tokio::time::timeout(wait, task).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => Err(Failure::Network(format!("the call task failed: {e}"))),
            Err(_) => Err(match admission {
                Admission::Up => Failure::Timeout(wait),
                Admission::Probe => Failure::Unreachable(format!(
                    "{} at {}: no answer within {wait:?} (still trying)",
                    self.peer.name, self.peer.addr
                )),
            }),
        }
    }

    /// Sends `request` as `kind` and decodes the answer `Result<T, W>`; a remote error `W`
    /// becomes openraft's `RemoteError`.
    async fn request<Req, T, W, E>(
        &self,
        kind: u16,
        action: RPCTypes,
        request: &Req,
        ttl: Duration,
    ) -> Result<T, RpcError<E>>
    where
        Req: Serialize,
        T: DeserializeOwned,
        W: DeserializeOwned + Into<RaftError<E>>,
        E: std::error::Error,
    {
        let body = postcard::to_allocvec(request)
            .map_err(|e| self.failed(Failure::Network(format!("cannot encode: {e}")), action))?;
        if body.len() > self.max_payload {
            return Err(self.failed(
                Failure::Network(format!(
                    "a {action} message of {} bytes exceeds the limit of {}",
                    body.len(),
                    self.max_payload
                )),
                action,
            ));
        }
        let answer = self
            .call(kind, body, ttl)
            .await
            .map_err(|f| self.failed(f, action))?;
        let reply: Result<T, W> = read_answer(&answer).map_err(|e| {
            self.failed(
                Failure::Network(format!("unreadable {action} answer: {e}")),
                action,
            )
        })?;
        reply.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.peer.clone(),
                e.into(),
            ))
        })
    }

    fn failed<E: std::error::Error>(&self, failure: Failure, action: RPCTypes) -> RpcError<E> {
        match failure {
            Failure::Unreachable(m) => RPCError::Unreachable(Unreachable::new(&Message(m))),
            Failure::Network(m) => RPCError::Network(NetworkError::new(&Message(m))),
            Failure::Timeout(timeout) => RPCError::Timeout(Timeout {
                action,
                id: self.me,
                target: self.target,
                timeout,
            }),
        }
    }
}

/// Decodes a peer's answer to a Raft message: openraft's response, or its error. The
/// nesting limit matters here: openraft's errors carry `AnyError`, which nests itself.
pub(super) fn read_answer<T: DeserializeOwned, W: DeserializeOwned>(
    answer: &[u8],
) -> Result<Result<T, W>, String> {
    rpc::decode(answer).map_err(|e| e.to_string())
}

/// One call, run to the transport's own bounds; records whether the peer was reached.
async fn exchange(
    rpc: Arc<Rpc>,
    peer: Peer,
    link: Arc<Link>,
    kind: u16,
    body: Vec<u8>,
) -> Result<Vec<u8>, Failure> {
    let result = match resolve(&peer.addr).await {
        Ok(addr) => rpc
            .call(&peer.name, addr, kind, body)
            .await
            .map_err(classify),
        Err(e) => Err((Failure::Unreachable(e), false)),
    };
    let now = Instant::now();
    match result {
        Ok(answer) => {
            link.record(&peer.addr, Ok(()), now);
            Ok(answer)
        }
        Err((failure, reached)) => {
            let why = match &failure {
                Failure::Unreachable(m) | Failure::Network(m) => m.clone(),
                Failure::Timeout(d) => format!("timed out after {d:?}"),
            };
            link.record(&peer.addr, if reached { Ok(()) } else { Err(&why) }, now);
            Err(failure)
        }
    }
}

/// The first address `addr` (`host:port`) resolves to.
pub(crate) async fn resolve(addr: &str) -> Result<SocketAddr, String> {
    match tokio::net::lookup_host(addr).await {
        Ok(mut found) => found
            .next()
            .ok_or_else(|| format!("{addr} resolves to no address")),
        Err(e) => Err(format!("cannot resolve {addr}: {e}")),
    }
}

/// What a failed call means for Raft, and whether the peer answered at all.
fn classify(e: rpc::RpcError) -> (Failure, bool) {
    match e {
        rpc::RpcError::Remote { .. } => (Failure::Network(e.to_string()), true),
        rpc::RpcError::Transport(ref t)
            if t.is_retryable() || matches!(t, TransportError::Closed) =>
        {
            (Failure::Unreachable(e.to_string()), false)
        }
        // Certificate refusals and broken answers: the peer is not usable, but retrying
        // at once will not help either; the link's backoff spaces the attempts.
        other => (Failure::Network(other.to_string()), false),
    }
}

impl RaftNetwork<TypeConfig> for Client {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse, RpcError> {
        let entries = rpc.entries.len() as u64;
        if entries > 1 {
            let size = postcard::experimental::serialized_size(&rpc).unwrap_or(usize::MAX);
            if size > self.max_payload {
                return Err(RPCError::PayloadTooLarge(
                    PayloadTooLarge::new_entries_hint((entries / 2).max(1)),
                ));
            }
        }
        self.send::<_, _, Fatal, _>(kinds::APPEND_ENTRIES, RPCTypes::AppendEntries, &rpc, option)
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse, RpcError<InstallSnapshotError>> {
        self.send::<_, _, RaftError<InstallSnapshotError>, _>(
            kinds::INSTALL_SNAPSHOT,
            RPCTypes::InstallSnapshot,
            &rpc,
            option,
        )
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest,
        option: RPCOption,
    ) -> Result<VoteResponse, RpcError> {
        let answer = self
            .send::<_, _, Fatal, _>(kinds::VOTE, RPCTypes::Vote, &rpc, option)
            .await;
        if let Ok(answer) = &answer {
            self.step_back.answered(rpc.last_log_id, answer);
        }
        answer
    }

    fn backoff(&self) -> Backoff {
        Backoff::new((1..).map(link::backoff))
    }
}

//! The admin API: what an operator may ask a node, and how it travels.
//!
//! An operator (a person or tool holding an operator certificate of the cluster CA) runs
//! `tenure status`, `watch`, `move`, `drain`, `undrain`, `release` or `revoke`. Each is one
//! [`AdminRequest`] sent over the cluster transport as an operator request (see
//! `crate::rpc`'s `operator.rs`): mutual TLS authenticates the operator, there is no
//! envelope, and the node answers with one [`AdminResponse`] or an error message. Both
//! are encoded with postcard; enums are encoded by variant index, so new variants go at
//! the end.
//!
//! The node implements [`Admin`] (it owns the replicated state and the Raft handle) and
//! registers it with `Rpc::serve_operators(AdminService::new(admin))`. What this module
//! provides around that:
//! - `actions.rs`: [`command_for`], the pure translation of an action into the
//!   [`Command`](crate::cluster::Command) to propose, with every check an operator
//!   deserves a plain answer to (unknown resource, vacant slot, target without a
//!   session, …), and [`describe`], the sentence that tells the operator what happens next;
//! - `status.rs`: [`Status`], what `tenure status` shows, built from the replicated state
//!   and the node's view of Raft, with a text form ([`Status::render`]) and JSON (serde);
//! - `watch.rs`: the watch protocol, a long poll any node answers from its replica (a
//!   listing, then the changes after a log index), and [`Resume`], the client's side
//!   that neither loses nor repeats a change when it moves between nodes;
//! - `client.rs`: [`AdminClient`], the operator's side: binds a transport with the
//!   operator certificate, sends one request, and turns every failure into a message that
//!   says what to do.
//!
//! A node's own certificate may send one kind of request: to drain or undrain that node
//! ([`node_may_ask`]; `tenure drain --self`, which a Kubernetes `preStop` hook runs), so
//! that a pod needs no operator certificate to leave cleanly. Everything else from a node
//! certificate is refused with `NODE_CERT_REFUSAL`.
//!
//! Actions go to the leader: a node that is not the leader answers
//! [`AdminResponse::Leader`] and the client asks that node instead. Operator commands
//! are never forwarded between nodes, because the leader accepts them only from an
//! operator it authenticated itself (`cluster/authorize.rs`); a member cannot pass one
//! off as an operator's.
//!
//! What it deliberately does not do: decide anything. Whether a request is allowed for
//! this operator (all operators may do everything for now), proposing the command, and
//! waiting for it to commit are the node's business; placement then carries moves out.

mod actions;
mod client;
mod pages;
mod status;
mod watch;

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use crate::raft::{MemberList, MemberRow};
pub use actions::{command_for, describe, parse_fingerprint, winning_advert};
pub use client::{AdminClient, AdminError};
pub use pages::{PAGE_BYTES, StatusPage, StatusQuery, merge, page};
pub use status::{
    CertificateView, DivergedView, FailureView, HistoryView, NodeView, PluginView, RaftView,
    ReleasingView, ResourceView, RevokedView, Role, SessionView, SlotState, SlotView, Status,
};
pub use watch::{
    Batch, Event, HOLD, Resume, Since, Taken, WatchAnswer, WatchEvent, last_change, listing, since,
};

use crate::future::BoxFuture;
use crate::rpc::OperatorService;
use crate::transport::PeerInfo;

/// What an operator asks a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminRequest {
    /// The cluster as the answering node sees it.
    Status,
    /// Hand slot `slot` of `resource` (the only granted one if `None`) over to node `to`.
    Move {
        resource: String,
        slot: Option<u32>,
        to: String,
    },
    /// Move every slot away from `node` and give it no new ones.
    Drain { node: String },
    /// Let `node` take slots again.
    Undrain { node: String },
    /// Have the owner of a slot stop, clean up and give it up; placement then grants it
    /// again (possibly to the same node).
    Release { resource: String, slot: Option<u32> },
    /// Refuse the key with this fingerprint (`sha256:<hex>` of its SubjectPublicKeyInfo)
    /// everywhere, for good, whatever certificate carries it. `certificate` (its
    /// fingerprint) and `node` are what the operator named, when they named a certificate
    /// file: that node leaves the Raft membership too, unless it uses another key now.
    /// A key given alone must be one a member or an operator presented, unless `force`.
    Revoke {
        key: String,
        certificate: Option<String>,
        node: Option<String>,
        force: bool,
    },
    /// Remove node `node` from the cluster (its session, its slots, its Raft seat): for a
    /// member that is gone for good.
    Remove { node: String },
    /// One page of the status (`pages.rs`): what `tenure status` asks, since a large
    /// cluster's status does not fit in one answer. [`AdminService`] answers it from the
    /// [`AdminRequest::Status`] the node gives.
    StatusPage(StatusQuery),
    /// The slots (of `resource`, if given) and their changes (`watch.rs`): with `after`
    /// `None`, a listing; else the changes after that log index, waiting up to
    /// [`HOLD`] for one. Any node answers from its replica.
    Watch {
        resource: Option<String>,
        after: Option<u64>,
    },
    /// A page of a snapshot of the replicated state (`tenure snapshot save`): from
    /// `offset` of the snapshot `id` names, or of a new one when `id` is `None` or that
    /// one is no longer kept (then from the start).
    Snapshot { id: Option<u64>, offset: u64 },
    /// The Raft members, their lag and reachability (`tenure member list`): the leader
    /// answers.
    Members,
    /// Make learner `node` a voter now (`tenure member promote`).
    Promote { node: String },
}

/// A node's answer to an [`AdminRequest`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum AdminResponse {
    /// The answer to [`AdminRequest::Status`].
    Status(Status),
    /// An action was committed; the message says what happens next, for people.
    Done(String),
    /// The node is not the leader, which alone accepts actions from operators (it
    /// authenticates them itself): ask node `node` at `addr`. [`AdminClient::request`]
    /// follows it.
    Leader { node: String, addr: String },
    /// The answer to [`AdminRequest::StatusPage`].
    StatusPage(StatusPage),
    /// The answer to [`AdminRequest::Watch`].
    Watch(WatchAnswer),
    /// The answer to [`AdminRequest::Snapshot`].
    Snapshot(SnapshotPage),
    /// The answer to [`AdminRequest::Members`].
    Members(MemberList),
}

/// A page of a snapshot: `bytes` from `offset` of an image of `total` bytes, described by
/// `header` (a snapshot file's JSON header line).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotPage {
    /// The snapshot, to ask for its next page.
    pub id: u64,
    pub header: String,
    pub offset: u64,
    pub total: u64,
    pub bytes: Vec<u8>,
}

/// The node's side of the admin API.
pub trait Admin: Send + Sync + 'static {
    /// Answers `request` from the operator named `operator`. An `Err` is a message for
    /// the operator (refused, or failed), shown as is.
    fn handle(
        &self,
        operator: &str,
        request: AdminRequest,
    ) -> BoxFuture<Result<AdminResponse, String>>;

    /// Answers `request` from the node `node`, authenticated with its own node
    /// certificate. [`AdminService`] passes only [`AdminRequest::Drain`] and
    /// [`AdminRequest::Undrain`] naming `node` itself: what a node's certificate may ask
    /// (a node drains itself before it stops, and undrains itself once it is back).
    fn handle_node(
        &self,
        node: &str,
        request: AdminRequest,
    ) -> BoxFuture<Result<AdminResponse, String>> {
        let _ = (node, request);
        Box::pin(async { Err(crate::rpc::NODE_CERT_REFUSAL.to_owned()) })
    }
}

/// Whether the node certificate of `node` may send `request`: a drain or undrain of
/// `node` itself, and nothing else (least privilege for the credentials a node's pod or
/// host already holds; every other request needs an operator certificate).
pub fn node_may_ask(node: &str, request: &AdminRequest) -> bool {
    matches!(request, AdminRequest::Drain { node: n } | AdminRequest::Undrain { node: n } if n == node)
}

/// Serves an [`Admin`] as the node's [`OperatorService`]: decodes requests, encodes answers.
pub struct AdminService {
    admin: Arc<dyn Admin>,
    snapshots: Arc<pages::Snapshots>,
}

impl AdminService {
    /// The service for `admin`, ready for `Rpc::serve_operators`.
    pub fn new(admin: Arc<dyn Admin>) -> Arc<AdminService> {
        Arc::new(AdminService {
            admin,
            snapshots: Arc::default(),
        })
    }
}

impl OperatorService for AdminService {
    fn call(&self, operator: &PeerInfo, body: Vec<u8>) -> BoxFuture<Result<Vec<u8>, String>> {
        let request = decode_request(&body);
        let admin = self.admin.clone();
        let snapshots = self.snapshots.clone();
        let name = operator.identity.name.clone();
        let from_node = operator.identity.kind == crate::pki::Kind::Node;
        Box::pin(async move {
            let request = request?;
            if from_node {
                if !node_may_ask(&name, &request) {
                    return Err(crate::rpc::NODE_CERT_REFUSAL.to_owned());
                }
                return encode(&admin.handle_node(&name, request).await?);
            }
            let response = match request {
                AdminRequest::StatusPage(query) => {
                    AdminResponse::StatusPage(status_page(&*admin, &snapshots, &name, query).await?)
                }
                request => admin.handle(&name, request).await?,
            };
            encode(&response)
        })
    }
}

/// The page `query` asks for: cut from the snapshot it names if that is still kept, else
/// from a new one, from the start.
async fn status_page(
    admin: &dyn Admin,
    snapshots: &pages::Snapshots,
    operator: &str,
    mut query: StatusQuery,
) -> Result<StatusPage, String> {
    let kept = query.snapshot.and_then(|id| Some((id, snapshots.get(id)?)));
    let (snapshot, full) = match kept {
        Some(kept) => kept,
        None => {
            let full = match admin.handle(operator, AdminRequest::Status).await? {
                AdminResponse::Status(status) => Arc::new(status),
                other => return Err(format!("the node answered status with {other:?}")),
            };
            query.after = None;
            (snapshots.keep(full.clone()), full)
        }
    };
    let (status, next) = page(&full, &query);
    Ok(StatusPage {
        snapshot,
        status,
        next,
    })
}

/// The postcard bytes of `value`.
pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    postcard::to_stdvec(value).map_err(|e| format!("cannot encode the admin message: {e}"))
}

/// Decodes an admin request, with a message a mismatched client understands.
pub(crate) fn decode_request(body: &[u8]) -> Result<AdminRequest, String> {
    crate::rpc::decode(body).map_err(|e| {
        format!(
            "cannot decode the admin request ({e}): is the tenure command older or newer \
             than this node?"
        )
    })
}

/// Decodes an admin response.
pub(crate) fn decode_response(body: &[u8]) -> Result<AdminResponse, String> {
    crate::rpc::decode(body).map_err(|e| {
        format!(
            "cannot decode the node's answer ({e}): is the tenure command older or newer \
             than the node?"
        )
    })
}

/// Splits `RESOURCE[/SLOT]` as typed on the command line.
pub fn parse_slot_ref(text: &str) -> Result<(String, Option<u32>), String> {
    let (resource, slot) = match text.rsplit_once('/') {
        Some((resource, slot)) => {
            let slot = slot.parse::<u32>().map_err(|_| {
                format!("{text:?}: the slot after '/' must be a number, as in {resource}/0")
            })?;
            (resource, Some(slot))
        }
        None => (text, None),
    };
    crate::catalog::manifest::check_resource_name(resource)?;
    Ok((resource.to_owned(), slot))
}

impl fmt::Display for AdminRequest {
    /// The request as a command line would say it, for logs and messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let slot = |resource: &str, slot: &Option<u32>| match slot {
            Some(n) => format!("{resource}/{n}"),
            None => resource.to_owned(),
        };
        match self {
            AdminRequest::Status => f.write_str("status"),
            AdminRequest::Move {
                resource,
                slot: n,
                to,
            } => {
                write!(f, "move {} --to {to}", slot(resource, n))
            }
            AdminRequest::Drain { node } => write!(f, "drain {node}"),
            AdminRequest::Undrain { node } => write!(f, "undrain {node}"),
            AdminRequest::Release { resource, slot: n } => {
                write!(f, "release {}", slot(resource, n))
            }
            AdminRequest::Revoke { key, force, .. } => {
                write!(f, "revoke --fingerprint {key}")?;
                if *force {
                    f.write_str(" --force")?;
                }
                Ok(())
            }
            AdminRequest::Remove { node } => write!(f, "remove {node}"),
            AdminRequest::Snapshot { .. } => write!(f, "snapshot save"),
            AdminRequest::Members => write!(f, "member list"),
            AdminRequest::Promote { node } => write!(f, "member promote {node}"),
            AdminRequest::StatusPage(query) => {
                f.write_str("status")?;
                if let Some(resource) = &query.resource {
                    write!(f, " --resource {resource}")?;
                }
                if let Some(node) = &query.node {
                    write!(f, " --on {node}")?;
                }
                Ok(())
            }
            AdminRequest::Watch { resource, after } => {
                f.write_str("watch")?;
                if let Some(resource) = resource {
                    write!(f, " {resource}")?;
                }
                match after {
                    Some(index) => write!(f, " after {index}"),
                    None => Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod actions_tests;
#[cfg(test)]
mod fixture;
#[cfg(test)]
mod status_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod watch_tests;

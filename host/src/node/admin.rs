//! Operator requests (`tenure status`, `watch`, `move`, `drain`, `undrain`, `release`,
//! `revoke`, `member`): status and watch are answered by any node from its replica; actions only by
//! the leader, which proposes them itself (another node names the leader, and the client
//! asks it). A node's own certificate may ask only for its drain or undrain
//! ([`NodeAdmin::answer_node`], `self_drain.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use super::shared::{Shared, now_ms};
use crate::api::{
    Admin, AdminRequest, AdminResponse, Batch, CertificateView, HOLD, RaftView, Since, Status,
    WatchAnswer,
};
use crate::cluster::{Cluster, Command, Response};
use crate::events;
use crate::future::BoxFuture;
use crate::pki::Identity;
use crate::placement;
use crate::raft::ProposeError;

#[derive(Clone)]
struct NodeAdmin {
    shared: Arc<Shared>,
    snapshots: Arc<super::backup::Kept>,
    /// The file that says this node's drain is its own (`self_drain.rs`).
    own_drain: PathBuf,
}

/// The operator handler the node's endpoint serves; `own_drain` is the data dir's
/// `self_drain::MARKER`.
pub fn adapter(shared: Arc<Shared>, own_drain: PathBuf) -> Arc<dyn crate::rpc::OperatorService> {
    crate::api::AdminService::new(Arc::new(NodeAdmin {
        shared,
        snapshots: Arc::default(),
        own_drain,
    }))
}

impl Admin for NodeAdmin {
    fn handle(
        &self,
        operator: &str,
        request: AdminRequest,
    ) -> BoxFuture<Result<AdminResponse, String>> {
        let shared = self.shared.clone();
        let snapshots = self.snapshots.clone();
        let operator = operator.to_owned();
        Box::pin(async move {
            let now = now_ms();
            if request == AdminRequest::Status {
                return Ok(AdminResponse::Status(status(&shared, now)));
            }
            if let AdminRequest::Watch { resource, after } = &request {
                return watch(&shared, resource.as_deref(), *after).await;
            }
            if let AdminRequest::Snapshot { id, offset } = request {
                let page = super::backup::page(&shared, &snapshots, id, offset).await?;
                return Ok(AdminResponse::Snapshot(page));
            }
            if request == AdminRequest::Members {
                return match shared.control.member_list() {
                    Some(list) => Ok(AdminResponse::Members(list)),
                    None => leader_or_wait(shared.control.leader()),
                };
            }
            if let AdminRequest::Promote { node } = &request {
                if !shared.control.is_leader() {
                    return leader_or_wait(shared.control.leader());
                }
                tracing::info!(event = events::ADMIN_REQUEST, operator = %operator, request = %request, "operator request");
                return shared.control.promote(node).await.map(AdminResponse::Done);
            }
            let (command, message) = shared.read(|c| {
                crate::api::command_for(&request, c, now)
                    .map(|command| (command.clone(), crate::api::describe(&command, c)))
            })?;
            if !shared.control.is_leader() {
                return leader_or_wait(shared.control.leader());
            }
            tracing::info!(event = events::ADMIN_REQUEST, operator = %operator, request = %request, "operator request");
            let (command, message, leaving) = match &command {
                Command::Revoke { .. } => {
                    let vetted = super::revocations::vet(&shared, &request, command)?;
                    let mut message = shared.read(|c| crate::api::describe(&vetted.command, c));
                    if let Some(note) = vetted.note {
                        message = format!("{message}; {note}");
                    }
                    (vetted.command, message, vetted.leaving)
                }
                // Out of the Raft membership first, then out of the members: the order
                // `remove_for_good` explains.
                Command::Remove { node, .. } => {
                    return match shared.control.remove_for_good(node).await {
                        Ok(()) => Ok(AdminResponse::Done(message)),
                        Err(why) if !shared.control.is_leader() => {
                            Err(format!("{why}; this node no longer leads: retry"))
                        }
                        Err(why) => Err(why),
                    };
                }
                _ => (command, message, None),
            };
            match shared.control.propose_here(command).await {
                Ok(Response::Done) => {
                    // The member is gone from the replicated state; its Raft seat goes
                    // too (a revoked node could not use it; a dead one would count
                    // against the quorum).
                    if let Some(node) = leaving
                        && let Err(e) = super::revocations::take_out(&shared, &node).await
                    {
                        return Err(format!(
                            "{message}; but {node} is still in the Raft membership ({e}): run \
                             `tenure member remove {node}` once its session has expired (`tenure \
                             status` shows it)"
                        ));
                    }
                    Ok(AdminResponse::Done(message))
                }
                Ok(Response::Stale) => {
                    Err("the slot changed hands meanwhile; check `tenure status` and retry".into())
                }
                Ok(Response::Refused(why) | Response::Forbidden(why)) => Err(why),
                Ok(other) => Err(format!("unexpected answer {other:?}")),
                Err(ProposeError::NotLeader { leader }) => {
                    leader_or_wait(leader.map(|p| (p.name, p.addr)))
                }
                Err(e) => Err(e.to_string()),
            }
        })
    }

    fn handle_node(
        &self,
        node: &str,
        request: AdminRequest,
    ) -> BoxFuture<Result<AdminResponse, String>> {
        let this = self.clone();
        let node = node.to_owned();
        Box::pin(async move { this.answer_node(&node, request).await })
    }
}

impl NodeAdmin {
    /// A drain or undrain of node `node` asked with its own certificate
    /// (`api::node_may_ask` let only these through). At this node, from its own
    /// certificate: `tenure drain --self`, which `self_drain.rs` carries out. From another
    /// node: that node asks the leader to propose its drain or undrain.
    async fn answer_node(
        &self,
        node: &str,
        request: AdminRequest,
    ) -> Result<AdminResponse, String> {
        let shared = &self.shared;
        if node == shared.me {
            return match request {
                AdminRequest::Drain { .. } => {
                    super::self_drain::drain(shared, &self.own_drain).await
                }
                _ => super::self_drain::undrain(shared, &self.own_drain)
                    .await
                    .map(AdminResponse::Done),
            };
        }
        let (command, message) = shared.read(|c| {
            crate::api::command_for(&request, c, now_ms())
                .map(|command| (command.clone(), crate::api::describe(&command, c)))
        })?;
        if !shared.control.is_leader() {
            return leader_or_wait(shared.control.leader());
        }
        tracing::info!(event = events::ADMIN_REQUEST, node = %node, request = %request, "a node's request about itself");
        match shared.control.propose_here(command).await {
            Ok(Response::Done) => Ok(AdminResponse::Done(message)),
            Ok(other) => Err(other.to_string()),
            Err(ProposeError::NotLeader { leader }) => {
                leader_or_wait(leader.map(|p| (p.name, p.addr)))
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

/// This node's certificate and those of the nodes and operators connected to it, once
/// each, by name.
fn certificates(shared: &Shared) -> Vec<CertificateView> {
    let transport = shared.rpc().transport();
    let own = transport.tls_info();
    let view = |identity: &Identity, key: &str, certificate: &str, own: bool| CertificateView {
        name: identity.name.clone(),
        kind: identity.kind.as_str().into(),
        key: key.to_owned(),
        certificate: certificate.to_owned(),
        own,
    };
    let mut seen: BTreeSet<CertificateView> = transport
        .connections()
        .iter()
        .map(|c| view(&c.peer.identity, &c.peer.key, &c.peer.fingerprint, false))
        .collect();
    seen.insert(view(&own.identity, &own.key, &own.fingerprint, true));
    seen.into_iter().collect()
}

/// The slots placement leaves vacant, with its reasons, as this node sees them now.
fn pending(cluster: &Cluster, now: u64) -> BTreeMap<(String, u32), String> {
    placement::plan(cluster, now, &placement::Options::default())
        .pending
        .into_iter()
        .map(|p| ((p.resource, p.slot), p.reason))
        .collect()
}

/// Answers a watch from the replica (`api/watch.rs`): a listing, or the changes after
/// `after` as soon as there is one, or none after [`HOLD`]. The applied index is marked
/// seen before each look at the state, so a change applied in between wakes the wait.
async fn watch(
    shared: &Shared,
    resource: Option<&str>,
    after: Option<u64>,
) -> Result<AdminResponse, String> {
    let answer = |c: &Cluster, batch: Batch, upto: u64, events| WatchAnswer {
        node: shared.me.clone(),
        batch,
        upto,
        events,
        members: c
            .members
            .iter()
            .map(|(name, m)| (name.clone(), m.addr.clone()))
            .collect(),
    };
    let list = |c: &Cluster, batch: Batch| {
        crate::api::listing(c, resource, &pending(c, now_ms()))
            .map(|events| answer(c, batch, crate::api::last_change(c), events))
    };
    let Some(after) = after else {
        return shared
            .read(|c| list(c, Batch::Listing))
            .map(AdminResponse::Watch);
    };
    let deadline = tokio::time::Instant::now() + HOLD;
    let mut applied = shared.control.applied();
    loop {
        applied.borrow_and_update();
        // Ok: an answer to send now; Err: nothing new yet, and the answer that says so.
        let look = shared.read(|c| match crate::api::since(c, resource, after) {
            Since::Compacted => Ok(list(c, Batch::Resync)),
            Since::Changes { events, upto } if events.is_empty() => {
                Err(answer(c, Batch::Changes, upto, events))
            }
            Since::Changes { events, upto } => Ok(Ok(answer(c, Batch::Changes, upto, events))),
        });
        let quiet = match look {
            Ok(found) => return found.map(AdminResponse::Watch),
            Err(quiet) => quiet,
        };
        // Wait for the next applied entry, until the hold ends (or the node stops
        // applying, as it shuts down), then say there is nothing new.
        match tokio::time::timeout_at(deadline, applied.changed()).await {
            Ok(Ok(())) => continue,
            Ok(Err(_)) | Err(_) => return Ok(AdminResponse::Watch(quiet)),
        }
    }
}

/// The cluster as this node sees it at wall-clock `now` (ms): `tenure status`, and the
/// metrics listener's `/status`.
pub fn status(shared: &Shared, now: u64) -> Status {
    let members = shared.control.members();
    let view = RaftView {
        node: shared.me.clone(),
        leader: shared.control.leader().map(|(name, _)| name),
        term: shared.control.term(),
        voters: members.voters.into_keys().collect(),
        learners: members.learners.into_keys().collect(),
    };
    let status = shared.read(|c| {
        let pending = pending(c, now).into_iter().map(|((r, s), why)| (r, s, why));
        Status::build(c, view, pending.collect(), now)
    });
    Status {
        certificates: certificates(shared),
        diverged: shared
            .control
            .diverged()
            .into_iter()
            .map(|(node, index)| crate::api::DivergedView { node, index })
            .collect(),
        ..status
    }
    .with_failures(&shared.failures.all())
}

/// The answer of a node that is not the leader: ask the leader it knows of.
fn leader_or_wait(leader: Option<(String, String)>) -> Result<AdminResponse, String> {
    match leader {
        Some((node, addr)) => Ok(AdminResponse::Leader { node, addr }),
        None => Err(
            "no leader is known right now (an election may be under way); retry in a moment".into(),
        ),
    }
}

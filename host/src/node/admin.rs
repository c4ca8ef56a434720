//! Operator requests (`tenure status`, `move`, `drain`, `undrain`, `release`, `revoke`):
//! status is answered by any node from its replica; actions only by the leader, which
//! proposes them itself (another node names the leader, and the client asks it).

use std::sync::Arc;

use super::shared::{Shared, now_ms};
use crate::api::{Admin, AdminRequest, AdminResponse, RaftView, Status};
use crate::cluster::{Command, Response};
use crate::events;
use crate::placement;
use crate::raft::ProposeError;
use crate::runtime::BoxFuture;

struct NodeAdmin {
    shared: Arc<Shared>,
}

/// The operator handler the node's endpoint serves.
pub fn adapter(shared: Arc<Shared>) -> Arc<dyn crate::rpc::OperatorService> {
    crate::api::AdminService::new(Arc::new(NodeAdmin { shared }))
}

impl Admin for NodeAdmin {
    fn handle(
        &self,
        operator: &str,
        request: AdminRequest,
    ) -> BoxFuture<Result<AdminResponse, String>> {
        let shared = self.shared.clone();
        let operator = operator.to_owned();
        Box::pin(async move {
            let now = now_ms();
            if request == AdminRequest::Status {
                return Ok(AdminResponse::Status(status(&shared, now)));
            }
            let (command, message) = shared.read(|c| {
                crate::api::command_for(&request, c, now)
                    .map(|command| (command.clone(), crate::api::describe(&command, c)))
            })?;
            if !shared.control.is_leader() {
                return leader_or_wait(shared.control.leader());
            }
            tracing::info!(event = events::ADMIN_REQUEST, operator = %operator, request = ?request, "operator request");
            let leaving = match &command {
                Command::Revoke { node, .. } => node.clone(),
                Command::Remove { node, .. } => Some(node.clone()),
                _ => None,
            };
            match shared.control.propose_here(command).await {
                Ok(Response::Done) => {
                    // The member is gone from the replicated state; its Raft seat goes
                    // too (a revoked node could not use it; a dead one would count
                    // against the quorum).
                    if let Some(node) = leaving
                        && let Err(e) = shared.control.remove_member(&node).await
                    {
                        return Err(format!(
                            "{message}; but {node} is still in the Raft membership ({e}): run \
                             `tenure remove {node}` once its session has expired (`tenure \
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
    shared.read(|c| {
        let pending = placement::plan(c, now, &placement::Options::default())
            .pending
            .into_iter()
            .map(|p| (p.resource, p.slot, p.reason))
            .collect();
        Status::build(c, view, pending, now)
    })
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

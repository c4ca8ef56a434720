//! Operator requests (`tenure status`, `move`, `drain`, `undrain`, `release`, `revoke`),
//! answered by any node: status from its replica, actions proposed through the leader.

use std::sync::Arc;

use super::shared::{Shared, now_ms};
use crate::api::{Admin, AdminRequest, AdminResponse, RaftView, Status};
use crate::cluster::Response;
use crate::events;
use crate::placement;
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
                let members = shared.control.members();
                let view = RaftView {
                    node: shared.me.clone(),
                    leader: shared.control.leader().map(|(name, _)| name),
                    term: shared.control.term(),
                    voters: members.voters.into_keys().collect(),
                    learners: members.learners.into_keys().collect(),
                };
                let status = shared.read(|c| {
                    let pending = placement::plan(c, now, &placement::Options::default())
                        .pending
                        .into_iter()
                        .map(|p| (p.resource, p.slot, p.reason))
                        .collect();
                    Status::build(c, view, pending, now)
                });
                return Ok(AdminResponse::Status(status));
            }
            let (command, message) = shared.read(|c| {
                crate::api::command_for(&request, c, now)
                    .map(|command| (command.clone(), crate::api::describe(&command, c)))
            })?;
            tracing::info!(event = events::ADMIN_REQUEST, operator = %operator, request = ?request, "operator request");
            match shared.propose(command).await? {
                Response::Done => Ok(AdminResponse::Done(message)),
                Response::Stale => {
                    Err("the slot changed hands meanwhile; check `tenure status` and retry".into())
                }
                Response::Refused(why) => Err(why),
                other => Err(format!("unexpected answer {other:?}")),
            }
        })
    }
}

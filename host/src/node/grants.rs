//! The control plane behind a supervisor: restarts, releases and give-ups as Raft
//! commands, and the `state` import as fenced `SaveState` commands.
//!
//! A state save is lease-checked by the instance before it gets here
//! (`InstanceContext::may_act`, docs/design.md, invariant 2), and a restart checks the lease
//! itself: after the deadline a paused or partitioned owner can no longer save state or
//! restart, whatever its plugin does. The token check in `Cluster::apply` then fences
//! anything that slips past the lease check (a save proposed just before the deadline
//! and committed after a successor was granted).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::shared::Shared;
use crate::cluster::{Command, Response};
use crate::events;
use crate::future::BoxFuture;
use crate::ownership::Grant;
use crate::runtime::{CleanupReason, StateBackend, StateError};
use crate::supervisor::Grants;

/// How long a node that gave a slot up is skipped for that resource.
pub const GIVE_UP_COOLDOWN: Duration = Duration::from_secs(60);

/// [`Grants`] and [`StateBackend`] over the node's control-plane handle.
#[derive(Clone)]
pub struct ClusterGrants {
    pub(super) shared: Arc<Shared>,
    /// The node's runtime. Supervisors run on the plugin threads, but control-plane
    /// calls belong here: a connection dialled from a task spawns its driver on that
    /// task's runtime, and the plugin threads are for plugin code.
    pub(super) node: tokio::runtime::Handle,
}

impl ClusterGrants {
    /// Runs `work` on the node's runtime and awaits it from wherever the caller runs.
    fn on_node<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
        if_lost: fn() -> T,
    ) -> BoxFuture<T> {
        let task = self.node.spawn(work);
        Box::pin(async move { task.await.unwrap_or_else(|_| if_lost()) })
    }
}

impl Grants for ClusterGrants {
    fn regrant(&self, plugin: &str, grant: &Grant) -> BoxFuture<Option<Grant>> {
        let shared = self.shared.clone();
        let (plugin, grant) = (plugin.to_owned(), grant.clone());
        self.on_node(async move {
            if !shared.lease_valid(Instant::now()) {
                return None;
            }
            let command = Command::Regrant {
                resource: grant.resource.clone(),
                slot: grant.slot,
                token: grant.token,
                at_ms: super::shared::now_ms(),
            };
            match shared.propose(command).await {
                Ok(Response::Granted { token, term }) => Some(Grant {
                    token,
                    term,
                    ..grant
                }),
                Ok(other) => {
                    tracing::info!(event = events::CONTROL_ERROR, %plugin, resource = %grant.resource, slot = grant.slot, token = grant.token, answer = %other, "the slot cannot be restarted under a new token: {other}");
                    None
                }
                Err(error) => {
                    tracing::warn!(event = events::CONTROL_ERROR, %plugin, resource = %grant.resource, slot = grant.slot, %error, "cannot restart the slot");
                    None
                }
            }
        }, || None)
    }

    fn release(&self, plugin: &str, grant: &Grant, reason: CleanupReason) -> BoxFuture<()> {
        let shared = self.shared.clone();
        let (plugin, grant) = (plugin.to_owned(), grant.clone());
        self.on_node(async move {
            if reason == CleanupReason::LeaseLost {
                // The session's expiry (or its replacement) vacates the slot.
                return;
            }
            let command = Command::Release {
                resource: grant.resource.clone(),
                slot: grant.slot,
                token: grant.token,
                at_ms: super::shared::now_ms(),
            };
            // A failure is retried by the owner's reconciliation, which releases
            // releasing slots nothing runs.
            if let Err(error) = shared.propose(command).await {
                tracing::warn!(event = events::CONTROL_ERROR, %plugin, resource = %grant.resource, slot = grant.slot, token = grant.token, %error, "cannot release the slot yet; will retry");
            }
        }, || ())
    }

    fn give_up(&self, plugin: &str, grant: &Grant) -> BoxFuture<()> {
        let shared = self.shared.clone();
        let (plugin, grant) = (plugin.to_owned(), grant.clone());
        self.on_node(async move {
            let now = super::shared::now_ms();
            let command = Command::GiveUp {
                resource: grant.resource.clone(),
                slot: grant.slot,
                token: grant.token,
                until_ms: now + GIVE_UP_COOLDOWN.as_millis() as u64,
                at_ms: now,
            };
            if let Err(error) = shared.propose(command).await {
                tracing::warn!(event = events::CONTROL_ERROR, %plugin, resource = %grant.resource, slot = grant.slot, token = grant.token, %error, "cannot give the slot up");
            }
        }, || ())
    }
}

impl StateBackend for ClusterGrants {
    fn load(&self, grant: &Grant) -> BoxFuture<Result<Option<Vec<u8>>, StateError>> {
        // The local replica has applied this node's grant, and with it every save and
        // release of the previous owners that came before it in the log.
        let data = self
            .shared
            .read(|cluster| cluster.state.get(&grant.resource).map(|b| b.data.clone()));
        Box::pin(async move { Ok(data) })
    }

    fn save(&self, grant: &Grant, data: Vec<u8>) -> BoxFuture<Result<(), StateError>> {
        let command = Command::SaveState {
            resource: grant.resource.clone(),
            slot: grant.slot,
            token: grant.token,
            data,
        };
        self.save_as(command)
    }
}

/// The `state` import of a plugin that keeps one blob per slot (a manifest's `state =
/// "per-slot"`): each slot loads what the slot's earlier owners saved, and nothing of
/// the other slots'. The node advertises such a plugin only once the cluster's version
/// allows [`Command::SaveSlotState`] (`node/plugins.rs`), so no owner of it runs before.
#[derive(Clone)]
pub struct SlotState(pub ClusterGrants);

impl StateBackend for SlotState {
    fn load(&self, grant: &Grant) -> BoxFuture<Result<Option<Vec<u8>>, StateError>> {
        let data = self.0.shared.read(|cluster| {
            let blob = cluster.slot_state.get(&grant.resource)?.get(&grant.slot)?;
            Some(blob.data.clone())
        });
        Box::pin(async move { Ok(data) })
    }

    fn save(&self, grant: &Grant, data: Vec<u8>) -> BoxFuture<Result<(), StateError>> {
        let version = self.0.shared.read(|c| c.version);
        let needs = crate::version::SLOT_STATE;
        if version < needs {
            let why = format!("a state per slot needs cluster version {needs}; it is {version}");
            return Box::pin(async move { Err(StateError::Unavailable(why)) });
        }
        let command = Command::SaveSlotState {
            resource: grant.resource.clone(),
            slot: grant.slot,
            token: grant.token,
            data,
        };
        self.0.save_as(command)
    }
}

impl ClusterGrants {
    /// Proposes a state save (`command`, fenced by its token) and says how it went.
    fn save_as(&self, command: Command) -> BoxFuture<Result<(), StateError>> {
        let shared = self.shared.clone();
        // The lease was checked by the instance (`InstanceContext::may_act`, the one
        // check every effect asks) just before this call.
        self.on_node(
            async move {
                // Never block the plugin past the deadline: the interrupt at D cannot reach
                // code waiting in a host call, so the call itself gives up at D (a save
                // still in flight then may or may not commit; its token fences it).
                let Some(deadline) = *shared.deadline().borrow() else {
                    return Err(StateError::LeaseExpired);
                };
                let proposed = tokio::time::timeout_at(deadline.into(), shared.propose(command));
                match proposed.await {
                    Err(_) => Err(StateError::LeaseExpired),
                    Ok(Ok(Response::Done)) => Ok(()),
                    Ok(Ok(Response::Stale)) => Err(StateError::StaleToken),
                    Ok(Ok(other)) => Err(StateError::Unavailable(format!("{other:?}"))),
                    Ok(Err(error)) => Err(StateError::Unavailable(error.to_string())),
                }
            },
            || Err(StateError::Unavailable("the node is shutting down".into())),
        )
    }
}

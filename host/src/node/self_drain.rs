//! A node that drains itself before it stops, and undrains itself once it is back.
//!
//! Kubernetes runs a pod's `preStop` hook before it sends SIGTERM. Tenure's is `tenure
//! drain --self`, which asks the node, with the node's own certificate, to drain itself
//! ([`drain`]): the node is marked draining in the cluster (the same `SetDraining` an
//! operator's `tenure drain` proposes, so `tenure status` shows it), placement hands each
//! of its slots to another node, and the answer comes once the node holds none. SIGTERM
//! then finds nothing left to hand over.
//!
//! **Whose drain it is.** A drain the node put on itself is lifted by the node: it writes
//! [`MARKER`] in its data dir once its drain is committed, and once it is ready again
//! after the restart (what `/readyz` means), it undrains itself and removes the file
//! ([`lift_when_back`]), so a rolling restart does not leave every node drained. A drain
//! an operator asked for stays: a node that was already draining when asked to drain
//! itself writes no file, and an undrain seen while the file is there (an operator lifted
//! the drain) removes it ([`Watch`]), so a later operator drain is not taken for the
//! node's own. Not told apart: an operator's `tenure drain` of a node that drained itself
//! and has not come back yet changes nothing in the cluster (the node is already
//! draining), so the node lifts it with its own; drain it again once it is ready.
//!
//! The file is the node's own, not replicated: only this node ever lifts its drain, and
//! no stored or sent format changes for it.
//!
//! **Who proposes it.** Only the leader proposes a drain (`cluster/authorize.rs` forbids a
//! member's `SetDraining`). A node that is not the leader sends the leader the request an
//! operator would (`Drain` or `Undrain` of itself) over its own connection, authenticated
//! by its node certificate; a leader accepts that request from a node about itself only
//! (`api::node_may_ask`), so a pod needs no operator certificate to leave cleanly.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::shared::Shared;
use crate::api::{AdminRequest, AdminResponse};
use crate::cluster::{Command, Response};
use crate::events;
use crate::raft::ProposeError;

/// The file in the data dir that says the node's drain is its own.
pub(super) const MARKER: &str = "drained-itself";

/// How long a self-drain waits for the node's slots to move before it says which remain.
/// The caller's `--timeout` is usually shorter (a preStop hook has the pod's grace period).
const SLOTS_WAIT: Duration = Duration::from_secs(300);

/// How many times a drain or undrain is tried when the leader changes or cannot be
/// reached, and how long apart.
const ATTEMPTS: u32 = 20;
const RETRY: Duration = Duration::from_millis(250);

/// The node drains itself (`tenure drain --self`): see the module documentation. Answers
/// once it holds no slot, or with the slots left after [`SLOTS_WAIT`].
pub(super) async fn drain(shared: &Shared, marker: &Path) -> Result<AdminResponse, String> {
    let me = shared.me.clone();
    let Some(draining) = own_flag(shared) else {
        return Err(format!(
            "{me} is not a member of the cluster yet: it holds no slots, nothing to drain"
        ));
    };
    let whose = if !draining {
        set_draining(shared, true).await?;
        crate::private_files::write_atomic(marker, b"drained itself; undrains once ready\n")
            .map_err(|e| {
                format!(
                    "{me} is draining, but it could not note that the drain is its own ({}: \
                     {e}), so it will not undrain itself: run `tenure undrain {me}` once it is \
                     back",
                    marker.display()
                )
            })?;
        tracing::info!(
            event = events::NODE_DRAINED_ITSELF,
            node = %me,
            "{me} drained itself: its slots move to other nodes; it undrains itself once it is ready again"
        );
        "it drained itself, and undrains itself once it is ready again after a restart".to_owned()
    } else if marker.exists() {
        "it had drained itself already, and undrains itself once it is ready again".to_owned()
    } else {
        format!(
            "an operator drained it, so it stays drained after a restart, until `tenure \
             undrain {me}`"
        )
    };
    let held = slots_gone(shared).await;
    if held == 0 {
        Ok(AdminResponse::Done(format!(
            "node {me} is draining ({whose}); it holds no slots"
        )))
    } else {
        Err(format!(
            "node {me} is draining ({whose}), but still holds {held} slot(s) after {}: see \
             `tenure status`",
            humantime::format_duration(SLOTS_WAIT)
        ))
    }
}

/// The node undrains itself and forgets that the drain was its own.
pub(super) async fn undrain(shared: &Shared, marker: &Path) -> Result<String, String> {
    let me = shared.me.clone();
    let said = match own_flag(shared) {
        Some(true) => {
            set_draining(shared, false).await?;
            format!("node {me} undrained itself: it takes slots again")
        }
        _ => format!("node {me} was not draining; nothing changes"),
    };
    forget(marker);
    Ok(said)
}

/// Once the node is ready after a start, lifts the drain it put on itself before it
/// stopped, if any; tries again every second until it is done or the node stops.
pub(super) async fn lift_when_back(
    shared: Arc<Shared>,
    marker: PathBuf,
    mut stop: watch::Receiver<bool>,
) {
    if !marker.exists() {
        return;
    }
    let mut warned = false;
    loop {
        match undrain(&shared, &marker).await {
            Ok(said) => {
                tracing::info!(event = events::NODE_UNDRAINED_ITSELF, node = %shared.me, "{said} (it had drained itself before it stopped)");
                return;
            }
            Err(e) if !warned => {
                warned = true;
                tracing::warn!(
                    event = events::NODE_UNDRAINED_ITSELF,
                    node = %shared.me,
                    error = %e,
                    "{} drained itself before it stopped and cannot undrain itself yet: {e}; trying again every second",
                    shared.me
                );
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Follows this node's draining flag as the replica applies it: an undrain while
/// [`MARKER`] is there means someone else lifted the node's own drain, which then is no
/// longer the node's to lift at its next start.
#[derive(Default)]
pub(super) struct Watch {
    was: Option<bool>,
}

impl Watch {
    pub(super) fn observe(&mut self, shared: &Shared, marker: &Path) {
        let now = own_flag(shared);
        if self.was == Some(true) && now == Some(false) && marker.exists() {
            forget(marker);
        }
        self.was = now;
    }
}

/// Whether this node is draining, per its replica (`None`: not a member).
fn own_flag(shared: &Shared) -> Option<bool> {
    shared.read(|c| c.members.get(&shared.me).map(|m| m.draining))
}

/// Removes [`MARKER`]; a failure is logged (the node would lift an operator's drain at
/// its next start).
fn forget(marker: &Path) {
    match std::fs::remove_file(marker) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(
            event = events::NODE_UNDRAINED_ITSELF,
            path = %marker.display(),
            error = %e,
            "cannot remove {}: {e}; remove it by hand, or the node undrains itself at its next start",
            marker.display()
        ),
    }
}

/// Waits until this node holds no slot (a slot being handed over is still held), at most
/// [`SLOTS_WAIT`]; returns how many it still holds.
async fn slots_gone(shared: &Shared) -> usize {
    let held = || {
        shared.read(|c| {
            c.resources
                .values()
                .flat_map(|slots| slots.values())
                .filter(|slot| slot.owner == shared.me)
                .count()
        })
    };
    let mut applied = shared.control.applied();
    let _ = tokio::time::timeout(SLOTS_WAIT, async {
        loop {
            applied.borrow_and_update();
            if held() == 0 {
                return;
            }
            let _ = applied.changed().await;
        }
    })
    .await;
    held()
}

/// Has the leader propose `SetDraining` for this node: itself if it leads, else by
/// asking the leader with the node's own certificate. Retried while leadership moves.
async fn set_draining(shared: &Shared, draining: bool) -> Result<(), String> {
    let me = shared.me.clone();
    let request = if draining {
        AdminRequest::Drain { node: me.clone() }
    } else {
        AdminRequest::Undrain { node: me.clone() }
    };
    let mut last = "no leader is known (an election may be under way)".to_owned();
    for _ in 0..ATTEMPTS {
        if shared.control.is_leader() {
            let command = Command::SetDraining {
                node: me.clone(),
                draining,
            };
            match shared.control.propose_here(command).await {
                Ok(Response::Done) => return Ok(()),
                Ok(other) => return Err(format!("the cluster refused: {other}")),
                Err(ProposeError::NotLeader { .. }) => {}
                Err(e) => last = e.to_string(),
            }
        } else if let Some((leader, addr)) = shared.control.leader()
            && leader != me
        {
            // (A node that names itself leader but is not one yet or any more waits for
            // the election to settle rather than ask itself.)
            match ask_leader(shared, &leader, &addr, &request).await {
                Ok(AdminResponse::Done(_)) => return Ok(()),
                Ok(AdminResponse::Leader { .. }) => {}
                Ok(other) => return Err(format!("the leader {leader} answered {other:?}")),
                Err(e) => last = format!("the leader {leader} at {addr}: {e}"),
            }
        }
        tokio::time::sleep(RETRY).await;
    }
    Err(last)
}

/// Sends `request` to the leader as an operator request from this node's certificate.
async fn ask_leader(
    shared: &Shared,
    leader: &str,
    addr: &str,
    request: &AdminRequest,
) -> Result<AdminResponse, String> {
    let resolved = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| format!("cannot resolve {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr} resolves to no address"))?;
    let body = crate::api::encode(request)?;
    let answer = shared
        .rpc()
        .transport()
        .request(leader, resolved, crate::rpc::operator_request(&body))
        .await
        .map_err(|e| e.to_string())?;
    crate::api::decode_response(&answer)
}

//! Revocation as the operator meant it (`tenure revoke`).
//!
//! A revocation names a key; every node refuses every certificate that carries it. Three
//! things about it are decided here, on the leader, because only the transport knows
//! which keys peers present:
//! - **Does the node leave?** A certificate file names its node. After `tenure certs
//!   rotate` the node presents a new key, and revoking the old certificate (as a rotation
//!   runbook says) must not take a live node out of the cluster. So the node leaves the
//!   Raft membership at once only if it is seen on the revoked key; one not connected
//!   leaves once its session has ended (it cannot renew on a revoked key) unless it
//!   comes back on another key first.
//! - **Is the key real?** A key given alone (`--fingerprint`) must be one that a member
//!   or an operator presented to this leader since it started, or `--force` is needed:
//!   a typo, or a certificate's fingerprint given for its key's, would otherwise revoke
//!   nothing and report success.
//! - **Who takes the node out?** A leader whose own key is revoked is refused by every
//!   node at once, so it cannot replicate its own removal. Taking revoked nodes out of
//!   the membership is therefore a duty of whichever node leads ([`Removals`]): a Raft
//!   member that a revocation of the last [`RECENT`] names, that has no session, and
//!   that no live connection shows on another key, is removed. openraft 0.9 has no
//!   leadership transfer, so this is how the removal finishes once the next leader is
//!   elected. The window keeps an old revocation from removing, years later, a node
//!   that was given a new key and restarts; revocation times are the proposers' clocks.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::shared::Shared;
use crate::api::AdminRequest;
use crate::cluster::Command;
use crate::events;

/// A revocation as the leader will propose it, with what the operator should be told
/// besides the command's own description.
pub struct Vetted {
    pub command: Command,
    /// Said after the description: why the node stays, or who finishes its removal.
    pub note: Option<String>,
    /// The node whose Raft seat this leader takes away once the revocation commits.
    pub leaving: Option<String>,
}

/// Checks a `revoke` request on the leader and settles whether its node leaves (see the
/// module doc). `command` is what [`crate::api::command_for`] made of `request`.
pub fn vet(shared: &Shared, request: &AdminRequest, command: Command) -> Result<Vetted, String> {
    let (
        AdminRequest::Revoke {
            certificate, force, ..
        },
        Command::Revoke { key, node, .. },
    ) = (request, &command)
    else {
        return Ok(Vetted {
            command,
            note: None,
            leaving: None,
        });
    };
    if certificate.is_none() && !force {
        known(shared, key)?;
    }
    let Some(name) = node.clone() else {
        return Ok(Vetted {
            command,
            note: None,
            leaving: None,
        });
    };
    if name == shared.me {
        return Ok(Vetted {
            command,
            note: Some(format!(
                "{name} leads now, and every node refuses it from the moment the revocation \
                 commits, so it cannot take itself out of the voters: the next leader does"
            )),
            leaving: None,
        });
    }
    let in_use = keys_in_use(shared, &name);
    if in_use.is_empty() {
        // Not connected: it may be restarting on a new key. The leader's duty removes it
        // once its session has ended, if it has not come back by then.
        return Ok(Vetted {
            command,
            note: Some(format!(
                "{name} is not connected now: it leaves the Raft membership once its \
                 session has ended, unless it comes back on another key first"
            )),
            leaving: None,
        });
    }
    if !in_use.contains(key) {
        let keys: Vec<&str> = in_use.iter().map(String::as_str).collect();
        let mut command = command;
        if let Command::Revoke { node, .. } = &mut command {
            *node = None;
        }
        return Ok(Vetted {
            command,
            note: Some(format!(
                "{name} uses another key now (key {}): it stays a member and keeps its slots",
                keys.join(", key ")
            )),
            leaving: None,
        });
    }
    Ok(Vetted {
        command,
        note: None,
        leaving: Some(name),
    })
}

/// Refuses a key that no member or operator presented to this node since it started,
/// naming the key when the value is a certificate's fingerprint.
fn known(shared: &Shared, key: &str) -> Result<(), String> {
    let transport = shared.rpc().transport();
    let own = transport.tls_info();
    let mut seen = transport.seen_keys();
    seen.push(crate::transport::SeenKey {
        identity: own.identity,
        key: own.key,
        certificate: own.fingerprint,
    });
    if seen.iter().any(|s| s.key == key) {
        return Ok(());
    }
    if let Some(s) = seen.iter().find(|s| s.certificate == key) {
        return Err(format!(
            "{key} is the fingerprint of {}'s certificate, not of its key; revocation is by \
             key: run `tenure revoke --fingerprint {}` (or give the certificate file)",
            s.identity, s.key
        ));
    }
    Err(format!(
        "key {key} is not the key of any certificate a member or an operator presented to \
         {} (the leader) since it started; check the value (`tenure status` lists keys under \
         `key`, and a certificate file can be given instead), or add --force to revoke it \
         anyway",
        shared.me
    ))
}

/// The keys node `name` presents now, as this node sees them: its own if it is this node,
/// else those of its live connections that are not being retired. Empty if unknown.
fn keys_in_use(shared: &Shared, name: &str) -> BTreeSet<String> {
    let transport = shared.rpc().transport();
    if name == shared.me {
        return BTreeSet::from([transport.tls_info().key]);
    }
    transport
        .connections()
        .into_iter()
        .filter(|c| {
            !c.retiring
                && c.peer.identity.kind == crate::pki::Kind::Node
                && c.peer.identity.name == name
        })
        .map(|c| c.peer.key)
        .collect()
}

/// How long after a revocation the leader's duty may remove its node.
const RECENT: Duration = Duration::from_secs(600);

/// How long [`take_out`] tries.
const TAKE_OUT_WITHIN: Duration = Duration::from_secs(5);

/// On the leader: takes node `name` out of the Raft membership, retrying while another
/// membership change (such as [`Removals`]' own removal of it) is under way, until it is
/// out or [`TAKE_OUT_WITHIN`] has passed.
pub async fn take_out(shared: &Shared, name: &str) -> Result<(), String> {
    let deadline = Instant::now() + TAKE_OUT_WITHIN;
    loop {
        let members = shared.control.members();
        if !members.voters.contains_key(name) && !members.learners.contains_key(name) {
            return Ok(());
        }
        let error = match shared.control.remove_member(name).await {
            Ok(()) => return Ok(()),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline || !shared.control.is_leader() {
            return Err(error);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The leader's duty to take revoked nodes out of the Raft membership (see the module
/// doc), one removal at a time.
#[derive(Default)]
pub struct Removals {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Removals {
    /// On the leader: starts the removal of one revoked member, if one is due and none is
    /// under way.
    pub fn tick(&mut self, shared: &Arc<Shared>) {
        if self.task.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let Some(name) = due(shared) else {
            return;
        };
        let shared = shared.clone();
        self.task = Some(tokio::spawn(async move {
            match take_out(&shared, &name).await {
                Ok(()) => tracing::info!(
                    event = events::CLUSTER_MEMBERSHIP,
                    peer = %name,
                    "took {name} out of the raft membership: its key is revoked"
                ),
                Err(error) => tracing::warn!(
                    event = events::CONTROL_ERROR,
                    peer = %name,
                    %error,
                    "cannot take revoked {name} out of the raft membership yet; retrying"
                ),
            }
        }));
    }
}

/// A Raft member other than this node that a recent revocation names, that has no
/// session, and that is not connected.
fn due(shared: &Shared) -> Option<String> {
    let members = shared.control.members();
    let since = super::shared::now_ms().saturating_sub(RECENT.as_millis() as u64);
    let candidates: Vec<String> = shared.read(|c| {
        members
            .voters
            .keys()
            .chain(members.learners.keys())
            .filter(|name| **name != shared.me)
            .filter(|name| {
                let recent = c
                    .revoked
                    .values()
                    .any(|r| r.node.as_deref() == Some(name.as_str()) && r.at_ms >= since);
                let session = c.members.get(*name).is_some_and(|m| m.session.is_some());
                recent && !session
            })
            .cloned()
            .collect()
    });
    candidates
        .into_iter()
        .find(|name| keys_in_use(shared, name).is_empty())
}

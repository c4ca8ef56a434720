//! The owner's rules as a pure function: which of this node's slots start, stop or are
//! handed back, given what the replica grants it, what runs here and whether its lease
//! holds ([`decide`]). `owner.rs` gathers the [`View`] and carries the [`Action`]s out
//! (spawning supervisors, proposing releases, logging). Nothing here reads a clock or
//! does I/O: `now` comes in with the view, so the rules are checked as scenarios
//! (`decide_tests.rs`) rather than only end to end.
//!
//! For each slot granted to this node under its current session:
//! - something runs it: stop it if the slot is marked releasing (a handover: the plugin
//!   is told why), or if the folder now holds other files under the version it runs (a
//!   changed manifest or new secret values: `plugin-updated`, and the slot is granted
//!   again under a new token once it has ended);
//! - nothing runs it and it is marked releasing: release it (the handover's successor
//!   waits for that), at most once per [`RELEASE_RETRY`];
//! - its supervisor already ended under this token: never start it again under the
//!   same token (a start means a new fencing token); hand it back while the lease holds,
//!   so placement grants it again;
//! - otherwise, while starts are allowed and the lease holds: start it if its plugin
//!   version is loaded here, else report once that it is missing.
//!
//! Whatever runs a slot that is no longer this node's (the session expired, or was
//! replaced) is stopped with `lease-lost`. Each supervisor also stops on its own at the
//! lease deadline (`owner.rs` `stop_signal`): these rules never keep a plugin running.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::cluster::{Handover, Slot};
use crate::runtime::CleanupReason;

/// A slot: its resource and number.
pub(super) type Key = (String, u32);

/// How often a release of a slot nothing runs here is proposed again.
pub(super) const RELEASE_RETRY: Duration = Duration::from_secs(1);

/// What a loaded plugin version runs on: what tells whether a running instance still
/// runs the files the folder holds.
pub(super) trait Files: Clone {
    /// The version's digest (the wasm and the manifest's run terms).
    fn digest(&self) -> &str;
    /// Whether the secret values read with it are those read with `other`.
    fn same_secrets(&self, other: &Self) -> bool;
}

/// An instance running here.
pub(super) struct Runs<P> {
    /// The loaded version it runs.
    pub loaded: P,
    /// It was already asked to stop.
    pub stopping: bool,
}

/// What the owner knows when it decides.
pub(super) struct View<'a, P> {
    /// The slots granted to this node that it may run (those of its current session).
    pub mine: &'a [(Key, Slot)],
    /// What runs here, by slot.
    pub running: &'a BTreeMap<Key, Runs<P>>,
    /// The token of the last supervisor that ended, by slot.
    pub ended: &'a BTreeMap<Key, u64>,
    /// When a release was last proposed for a slot nothing runs here.
    pub release_proposed: &'a BTreeMap<Key, Instant>,
    /// Slots (with their token) whose missing plugin version was already reported.
    pub reported: &'a BTreeSet<(String, u32, u64)>,
    /// The loaded plugin versions, by (resource, digest).
    pub plugins: &'a BTreeMap<(String, String), P>,
    /// The folder published another set of plugins since the last decision: only then
    /// are running instances compared with it (a decision runs on every applied entry).
    pub republished: bool,
    /// New starts are allowed (not while shutting down).
    pub start: bool,
    /// The lease is valid at `now`.
    pub valid: bool,
    pub now: Instant,
}

/// What changed under the version an instance runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Changed {
    Manifest,
    Secrets,
}

impl Changed {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Changed::Manifest => "manifest",
            Changed::Secrets => "secrets",
        }
    }
}

/// One thing the owner does.
#[derive(Debug, PartialEq)]
pub(super) enum Action<P> {
    /// Start a supervisor for the slot's grant with this loaded version.
    Start { key: Key, slot: Slot, loaded: P },
    /// Ask the running instance to stop, telling it `reason`; `changed` when its files
    /// changed under the same version (said in the log, with the slot's token).
    Stop {
        key: Key,
        reason: CleanupReason,
        changed: Option<(Changed, u64)>,
    },
    /// Propose the release of the slot (granted under `token`) that nothing runs here.
    Release { key: Key, token: u64 },
    /// The slot's plugin version (`digest`) is not loaded here: say so once.
    Missing {
        key: Key,
        token: u64,
        digest: String,
    },
}

/// The rules of the module doc, over `view`.
pub(super) fn decide<P: Files>(view: &View<'_, P>) -> Vec<Action<P>> {
    let mut actions = Vec::new();
    for (key, slot) in view.mine {
        let version = (key.0.clone(), slot.digest.clone());
        if let Some(runs) = view.running.get(key) {
            let changed = view
                .republished
                .then(|| view.plugins.get(&version))
                .flatten()
                .and_then(|now| changed(&runs.loaded, now));
            let reason = match (&slot.releasing, changed) {
                (Some(releasing), _) => Some(cleanup_reason(releasing.reason)),
                (None, Some(_)) => Some(CleanupReason::PluginUpdated),
                (None, None) => None,
            };
            if let Some(reason) = reason
                && !runs.stopping
            {
                actions.push(Action::Stop {
                    key: key.clone(),
                    reason,
                    changed: changed
                        .filter(|_| slot.releasing.is_none())
                        .map(|what| (what, slot.token)),
                });
            }
            continue;
        }
        if slot.releasing.is_some() {
            if may_propose_release(view, key) {
                actions.push(Action::Release {
                    key: key.clone(),
                    token: slot.token,
                });
            }
            continue;
        }
        if view.ended.get(key) == Some(&slot.token) {
            // Its supervisor ended but the slot is still granted here: after a lease
            // lapse the session survived (a renewal was acknowledged in time), or a
            // release or give-up was lost.
            if view.valid && may_propose_release(view, key) {
                actions.push(Action::Release {
                    key: key.clone(),
                    token: slot.token,
                });
            }
            continue;
        }
        if !view.start || !view.valid {
            continue;
        }
        match view.plugins.get(&version) {
            Some(loaded) => actions.push(Action::Start {
                key: key.clone(),
                slot: slot.clone(),
                loaded: loaded.clone(),
            }),
            None => {
                if !view.reported.contains(&(key.0.clone(), key.1, slot.token)) {
                    actions.push(Action::Missing {
                        key: key.clone(),
                        token: slot.token,
                        digest: slot.digest.clone(),
                    });
                }
            }
        }
    }
    let mine: BTreeSet<&Key> = view.mine.iter().map(|(key, _)| key).collect();
    for (key, runs) in view.running {
        if !mine.contains(key) && !runs.stopping {
            actions.push(Action::Stop {
                key: key.clone(),
                reason: CleanupReason::LeaseLost,
                changed: None,
            });
        }
    }
    actions
}

/// What the folder's version `now` changed under the one an instance runs (`was`):
/// another manifest of the same wasm (beside 0.2.0, where a version is named by its wasm
/// alone), or new secret values (which the cluster never sees: `catalog::version_digest`).
fn changed<P: Files>(was: &P, now: &P) -> Option<Changed> {
    if now.digest() != was.digest() {
        Some(Changed::Manifest)
    } else if !now.same_secrets(was) {
        Some(Changed::Secrets)
    } else {
        None
    }
}

/// Whether no release of `key` was proposed within [`RELEASE_RETRY`] before `now`.
fn may_propose_release<P>(view: &View<'_, P>, key: &Key) -> bool {
    view.release_proposed
        .get(key)
        .is_none_or(|at| view.now.saturating_duration_since(*at) >= RELEASE_RETRY)
}

/// The cleanup reason a plugin is told for a handover.
pub fn cleanup_reason(handover: Handover) -> CleanupReason {
    match handover {
        Handover::Moved | Handover::Drained | Handover::Rebalanced => CleanupReason::Moved,
        Handover::PluginUpdated => CleanupReason::PluginUpdated,
        Handover::PluginRemoved => CleanupReason::PluginRemoved,
        Handover::Released => CleanupReason::Released,
        Handover::Shutdown => CleanupReason::Shutdown,
    }
}

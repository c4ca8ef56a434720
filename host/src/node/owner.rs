//! The owner side: turns the slots the replicated state grants this node into running
//! supervisors, and stops them when the state (or the lease) says so.
//!
//! Reconciliation runs whenever the local replica applies an entry, the lease deadline
//! moves, the loaded plugins change, and once a second. For each slot granted to this
//! node under its current session:
//! - not running, not releasing, lease valid, plugin version present → start a
//!   supervisor with the slot's token and term;
//! - running and marked releasing → stop it with the handover's reason (it cleans up,
//!   then releases; only then is a successor assigned);
//! - releasing but nothing runs it → release it (retried at most once a second);
//! - a supervisor already ended under this token → never restarted under it; the slot is
//!   released (retried at most once a second) so it is granted again with a new token.
//!
//! A running supervisor whose slot is no longer this node's (the session expired or was
//! replaced) is stopped with `lease-lost`. Independently of all that, each supervisor's
//! stop future fires at `D − stop_grace` and the supervisor interrupts by D, so a node cut
//! off from the cluster stops its plugins on its own clock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::shared::{Shared, now_ms};
use crate::cluster::{Command, Handover, Slot};
use crate::events;
use crate::ownership::{Grant, stop_at};
use crate::runtime::CleanupReason;
use crate::supervisor::{self, Deps, Loaded, SlotEnd};

/// Loaded plugin versions, by (resource, digest).
pub type Plugins = Arc<BTreeMap<(String, String), Arc<Loaded>>>;

/// How often a release of a releasing slot nothing runs is retried.
const RELEASE_RETRY: Duration = Duration::from_secs(1);

/// The owner's view of its running slots.
pub struct Owner {
    shared: Arc<Shared>,
    deps: Deps,
    /// The threads plugin code runs on (see [`PluginThreads`](super::PluginThreads)).
    plugin_threads: tokio::runtime::Handle,
    running: BTreeMap<(String, u32), Running>,
    /// The last token of supervisors that ended, per slot.
    ended: BTreeMap<(String, u32), u64>,
    /// When a release was last proposed for a slot nothing runs.
    releasing: BTreeMap<(String, u32), Instant>,
    /// Slots whose plugin version is missing here, already reported.
    reported: BTreeSet<(String, u32, u64)>,
    /// The loaded plugins the running instances were last compared with: they are
    /// compared again only when the folder published another set (a reconciliation runs
    /// on every applied entry; the files change seldom).
    compared: Option<Plugins>,
    /// Whether plugins stop on their own at the lease deadline (always, except in the
    /// checker's deliberately broken run: [`UNSAFE_NO_SELF_DEMOTION`]).
    self_demotion: bool,
}

struct Running {
    stop: watch::Sender<Option<CleanupReason>>,
    task: JoinHandle<(SlotEnd, u64)>,
    /// The loaded plugin it runs: its secret values are compared with the folder's.
    loaded: Arc<Loaded>,
}

impl Owner {
    pub fn new(shared: Arc<Shared>, deps: Deps, plugin_threads: tokio::runtime::Handle) -> Self {
        let self_demotion = std::env::var_os(UNSAFE_NO_SELF_DEMOTION).is_none();
        if !self_demotion {
            tracing::error!(
                event = events::NODE_UNSAFE,
                "{UNSAFE_NO_SELF_DEMOTION} is set: plugins do NOT stop at the lease deadline; this node is unsafe on purpose (fault-checker runs only)"
            );
        }
        Self {
            shared,
            deps,
            plugin_threads,
            running: BTreeMap::new(),
            ended: BTreeMap::new(),
            releasing: BTreeMap::new(),
            reported: BTreeSet::new(),
            compared: None,
            self_demotion,
        }
    }

    /// How many supervisors run (or ended since the last reconciliation).
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Whether any supervisor still runs.
    pub fn idle(&self) -> bool {
        self.running.is_empty()
    }

    /// Stops every supervisor with `reason`, without waiting for the control plane
    /// (the fallback when handovers cannot be committed at shutdown).
    pub fn stop_all(&self, reason: CleanupReason) {
        for running in self.running.values() {
            running
                .stop
                .send_if_modified(|r| r.is_none() && r.replace(reason).is_none());
        }
    }

    /// One reconciliation pass; `start` is false while shutting down (nothing new starts).
    pub async fn reconcile(&mut self, plugins: &Plugins, start: bool) {
        self.reap().await;
        let me = self.shared.me.clone();
        let session = self.shared.session();
        let valid = self.shared.lease_valid(Instant::now());
        // Without self-demotion (the broken build), a node whose lease lapsed keeps its
        // plugins until the replicated state it sees takes the slots away.
        let lapsed_but_kept = !self.self_demotion && session.is_none();
        let mine: Vec<(String, u32, Slot)> = self.shared.read(|c| {
            c.slots_of(&me)
                .filter(|(_, _, s)| lapsed_but_kept || Some(s.session) == session)
                .map(|(r, n, s)| (r.to_owned(), n, s.clone()))
                .collect()
        });
        let keys: BTreeSet<(String, u32)> = mine.iter().map(|(r, n, _)| (r.clone(), *n)).collect();
        let republished = !self
            .compared
            .as_ref()
            .is_some_and(|seen| Arc::ptr_eq(seen, plugins));
        self.compared = Some(plugins.clone());

        for (resource, number, slot) in mine {
            let key = (resource.clone(), number);
            if let Some(running) = self.running.get(&key) {
                // The files this grant's digest names now, when they are not the ones
                // the instance runs: new secret values under the same version, or,
                // beside 0.2.0 (where a version is named by its wasm alone), another
                // manifest of the same wasm.
                let changed = republished
                    .then(|| plugins.get(&(resource.clone(), slot.digest.clone())))
                    .flatten()
                    .and_then(|now| {
                        let was = &running.loaded.entry;
                        if now.entry.digest != was.digest {
                            Some("manifest")
                        } else if now.entry.secrets != was.secrets {
                            Some("secrets")
                        } else {
                            None
                        }
                    });
                let reason = match (&slot.releasing, changed) {
                    (Some(releasing), _) => Some(cleanup_reason(releasing.reason)),
                    (None, Some(_)) => Some(CleanupReason::PluginUpdated),
                    (None, None) => None,
                };
                if let Some(reason) = reason
                    && running
                        .stop
                        .send_if_modified(|r| r.is_none() && r.replace(reason).is_none())
                    && let (None, Some(what)) = (&slot.releasing, changed)
                {
                    // The instance stops and cleans up, and the slot is released once it
                    // has ended (as below), so it is granted again under a new token; its
                    // next instance reads the files of the node it is granted to. (The
                    // cluster never sees secret values: `catalog::version_digest`.)
                    tracing::info!(event = events::PLUGIN_FILES_CHANGED, plugin = %running.loaded.entry.name, resource = %resource, slot = number, token = slot.token, what, "the {what} of {} changed under the same version: its instance stops, and the slot is granted again under a new token", running.loaded.entry.name);
                }
                continue;
            }
            if slot.releasing.is_some() {
                self.release_unattended(&key, slot.token);
                continue;
            }
            if self.ended.get(&key) == Some(&slot.token) {
                // Its supervisor ended but the slot is still granted here: after a
                // lease lapse the session survived (a renewal was acked in time), or a
                // release or give-up was lost. Hand it back, so placement grants it
                // again under a new token.
                if valid {
                    self.release_unattended(&key, slot.token);
                }
                continue;
            }
            if !start || !valid {
                continue;
            }
            match plugins.get(&(resource.clone(), slot.digest.clone())) {
                Some(loaded) => self.start(loaded.clone(), &key, &slot),
                None => {
                    if self.reported.insert((resource.clone(), number, slot.token)) {
                        tracing::warn!(event = events::RESOURCE_PENDING, resource = %resource, slot = number, token = slot.token, digest = %slot.digest, "granted a plugin version this node does not have loaded; waiting for it or for a handover");
                    }
                }
            }
        }

        for (key, running) in &self.running {
            if !keys.contains(key) {
                running.stop.send_if_modified(|r| {
                    r.is_none() && r.replace(CleanupReason::LeaseLost).is_none()
                });
            }
        }
        self.ended.retain(|key, _| keys.contains(key));
        self.releasing.retain(|key, _| keys.contains(key));
    }

    /// Collects supervisors that ended.
    async fn reap(&mut self) {
        let done: Vec<(String, u32)> = self
            .running
            .iter()
            .filter(|(_, r)| r.task.is_finished())
            .map(|(k, _)| k.clone())
            .collect();
        for key in done {
            if let Some(running) = self.running.remove(&key)
                && let Ok((_, token)) = running.task.await
            {
                self.ended.insert(key, token);
            }
        }
    }

    fn start(&mut self, loaded: Arc<Loaded>, key: &(String, u32), slot: &Slot) {
        let grant = Grant {
            resource: key.0.clone(),
            slot: key.1,
            node: self.shared.me.clone(),
            token: slot.token,
            term: slot.term,
            session: slot.session,
        };
        let (stop_tx, stop_rx) = watch::channel(None);
        let grace = loaded.stop_grace;
        let stop = stop_signal(stop_rx, self.shared.deadline(), grace, self.self_demotion);
        let task = self.plugin_threads.spawn(supervisor::run(
            loaded.clone(),
            grant,
            self.deps.clone(),
            stop,
        ));
        self.running.insert(
            key.clone(),
            Running {
                stop: stop_tx,
                task,
                loaded,
            },
        );
    }

    /// Releases a slot marked releasing that no supervisor runs here.
    fn release_unattended(&mut self, key: &(String, u32), token: u64) {
        if self
            .releasing
            .get(key)
            .is_some_and(|at| at.elapsed() < RELEASE_RETRY)
        {
            return;
        }
        self.releasing.insert(key.clone(), Instant::now());
        let shared = self.shared.clone();
        let command = Command::Release {
            resource: key.0.clone(),
            slot: key.1,
            token,
            at_ms: now_ms(),
        };
        tokio::spawn(async move {
            if let Err(error) = shared.propose(command).await {
                tracing::debug!(event = events::CONTROL_ERROR, %error, "cannot release a slot yet");
            }
        });
    }
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

/// The environment variable that switches the local self-demotion off. For the fault
/// checker's "make it fail first" run only: with it, a cut-off owner keeps running past
/// its deadline, which is exactly the bug the checker must catch. Never set it otherwise.
pub const UNSAFE_NO_SELF_DEMOTION: &str = "TENURE_UNSAFE_NO_SELF_DEMOTION";

/// Resolves with the reason sent on `stop`, or with `lease-lost` at `D − grace` (unless
/// self-demotion is switched off).
async fn stop_signal(
    mut stop: watch::Receiver<Option<CleanupReason>>,
    mut deadline: watch::Receiver<Option<Instant>>,
    grace: Duration,
    self_demotion: bool,
) -> CleanupReason {
    loop {
        let at = (*deadline.borrow_and_update())
            .filter(|_| self_demotion)
            .map(|d| stop_at(d, grace));
        let lease_end = async {
            match at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            reason = stop.wait_for(Option::is_some) => {
                return reason.ok().and_then(|r| *r).unwrap_or(CleanupReason::Shutdown);
            }
            _ = lease_end => return CleanupReason::LeaseLost,
            changed = deadline.changed() => if changed.is_err() {
                return CleanupReason::LeaseLost;
            },
        }
    }
}

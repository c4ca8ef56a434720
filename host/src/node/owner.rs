//! The owner side: turns the slots the replicated state grants this node into running
//! supervisors, and stops them when the state (or the lease) says so.
//!
//! Reconciliation runs whenever the local replica applies an entry, the lease deadline
//! moves, the loaded plugins change, and once a second. Its rules (what starts, stops or
//! is released) are a pure function in `decide.rs`; this file gathers what they need and
//! carries their actions out.
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

use super::decide::{Action, Files, Key, Runs, View, decide};
use super::shared::{Shared, now_ms};
use crate::cluster::{Command, Slot};
use crate::events;
use crate::ownership::{Grant, stop_at};
use crate::runtime::CleanupReason;
use crate::supervisor::{self, Deps, Loaded, SlotEnd};

/// Loaded plugin versions, by (resource, digest).
pub type Plugins = Arc<BTreeMap<(String, String), Arc<Loaded>>>;

/// The owner's view of its running slots.
pub struct Owner {
    shared: Arc<Shared>,
    deps: Deps,
    /// The threads plugin code runs on (see [`PluginThreads`](super::PluginThreads)).
    plugin_threads: tokio::runtime::Handle,
    running: BTreeMap<Key, Running>,
    /// The last token of supervisors that ended, per slot.
    ended: BTreeMap<Key, u64>,
    /// When a release was last proposed for a slot nothing runs.
    releasing: BTreeMap<Key, Instant>,
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
        let now = Instant::now();
        let valid = self.shared.lease_valid(now);
        // Without self-demotion (the broken build), a node whose lease lapsed keeps its
        // plugins until the replicated state it sees takes the slots away.
        let lapsed_but_kept = !self.self_demotion && session.is_none();
        let mine: Vec<(Key, Slot)> = self.shared.read(|c| {
            c.slots_of(&me)
                .filter(|(_, _, s)| lapsed_but_kept || Some(s.session) == session)
                .map(|(r, n, s)| ((r.to_owned(), n), s.clone()))
                .collect()
        });
        let republished = !self
            .compared
            .as_ref()
            .is_some_and(|seen| Arc::ptr_eq(seen, plugins));
        self.compared = Some(plugins.clone());
        let running: BTreeMap<Key, Runs<Arc<Loaded>>> = self
            .running
            .iter()
            .map(|(key, r)| {
                let runs = Runs {
                    loaded: r.loaded.clone(),
                    stopping: r.stop.borrow().is_some(),
                };
                (key.clone(), runs)
            })
            .collect();
        let actions = decide(&View {
            mine: &mine,
            running: &running,
            ended: &self.ended,
            release_proposed: &self.releasing,
            reported: &self.reported,
            plugins,
            republished,
            start,
            valid,
            now,
        });
        for action in actions {
            match action {
                Action::Start { key, slot, loaded } => self.start(loaded, &key, &slot),
                Action::Stop {
                    key,
                    reason,
                    changed,
                } => {
                    if let Some(running) = self.running.get(&key)
                        && running
                            .stop
                            .send_if_modified(|r| r.is_none() && r.replace(reason).is_none())
                        && let Some((what, token)) = changed
                    {
                        // The instance stops and cleans up, and the slot is released once
                        // it has ended, so it is granted again under a new token; its next
                        // instance reads the files of the node it is granted to.
                        let what = what.as_str();
                        tracing::info!(event = events::PLUGIN_FILES_CHANGED, plugin = %running.loaded.entry.name, resource = %key.0, slot = key.1, token, what, "the {what} of {} changed under the same version: its instance stops, and the slot is granted again under a new token", running.loaded.entry.name);
                    }
                }
                Action::Release { key, token } => self.propose_release(key, token, now),
                Action::Missing { key, token, digest } => {
                    tracing::warn!(event = events::RESOURCE_PENDING, resource = %key.0, slot = key.1, token, digest = %digest, "granted a plugin version this node does not have loaded; waiting for it or for a handover");
                    self.reported.insert((key.0, key.1, token));
                }
            }
        }
        // Forget what is no longer granted here.
        let keys: BTreeSet<&Key> = mine.iter().map(|(key, _)| key).collect();
        self.ended.retain(|key, _| keys.contains(key));
        self.releasing.retain(|key, _| keys.contains(key));
    }

    /// Collects supervisors that ended.
    async fn reap(&mut self) {
        let done: Vec<Key> = self
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

    fn start(&mut self, loaded: Arc<Loaded>, key: &Key, slot: &Slot) {
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

    /// Proposes the release of a slot (granted under `token`) that no supervisor runs
    /// here, and notes when (`decide.rs` proposes it again after
    /// [`RELEASE_RETRY`](super::decide::RELEASE_RETRY)).
    fn propose_release(&mut self, key: Key, token: u64, now: Instant) {
        self.releasing.insert(key.clone(), now);
        let shared = self.shared.clone();
        let command = Command::Release {
            resource: key.0,
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

/// A loaded version's files, as `decide.rs` compares them.
impl Files for Arc<Loaded> {
    fn digest(&self) -> &str {
        &self.entry.digest
    }

    fn same_secrets(&self, other: &Self) -> bool {
        self.entry.secrets == other.entry.secrets
    }
}

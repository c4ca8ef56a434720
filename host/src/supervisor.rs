//! The supervisor: one task per owned slot, running the plugin's lifecycle.
//!
//! ```text
//! loaded → starting → running → stopping → cleaning → stopped
//!              ↑                    │
//!              └── backoff ← failed start (trap, err, out of memory)  → … → failed
//! ```
//!
//! The supervisor is handed a grant (a slot with its fencing token) and writes
//! `plugin.started`, then calls `start`. Then:
//! - **Stop** (the caller's `stop` future resolves with a reason): the stop flag is set,
//!   so `sleep` returns `stop-requested`; after the manifest's `stop_grace` (or at the
//!   lease deadline, if that comes first) the instance is interrupted at its next epoch
//!   tick. `plugin.stopped` is written once the instance can no longer run, then
//!   `cleanup(reason)`, then the grant is released through [`Grants`].
//! - **Start returned `ok`**: the task is done but the slot is still owned; the instance
//!   stays loaded and `cleanup` runs on it when the stop comes.
//! - **Start failed** (`err`, trap, out of memory): `cleanup(failed)`, then after an
//!   exponential backoff a new grant of the same slot (a new, greater token) and a new
//!   start. More than `max_restarts` failures within `restart_window` and the supervisor
//!   gives the slot up: `plugin.failed`.
//!
//! Cleanup runs exactly once per start, bounded by `cleanup_timeout`: on the same
//! instance if `start` returned and was never interrupted, otherwise on a fresh instance
//! (a trap or interrupt leaves the old one unusable). Its stop flag is clear, so `sleep`
//! sleeps; the budget is what bounds it.
//!
//! The supervisor never panics on plugin behaviour and never waits unboundedly on it.
//! It does not decide whether the node should own the slot: the node does, and says so
//! through `stop`.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::catalog::Entry;
use crate::catalog::manifest::StateScope;
use crate::events;
use crate::failures::{Failures, LastFailure};
use crate::future::BoxFuture;
use crate::ownership::Grant;
use crate::runtime::{
    CleanupReason, Failure, Instance, InstanceContext, NodeLease, Plugin, Signals, StateBackend,
};

/// After an interrupt, how long to wait for the call to unwind before abandoning it.
const INTERRUPT_BACKSTOP: Duration = Duration::from_secs(1);
/// First restart delay; doubles with every failure in the window.
const BACKOFF_BASE: Duration = Duration::from_millis(200);
/// Longest restart delay.
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// A compiled plugin version together with the files it came from.
pub struct Loaded {
    pub entry: Entry,
    pub plugin: Plugin,
    /// The stop grace this node gives the plugin: the manifest's, at most
    /// [`LeaseTiming::max_stop_grace`](crate::ownership::LeaseTiming::max_stop_grace).
    pub stop_grace: Duration,
    /// What the manifest grants the plugin's instances (with the secret values).
    pub granted: Arc<crate::runtime::Granted>,
}

/// The control plane as a supervisor sees it.
pub trait Grants: Send + Sync + 'static {
    /// A new grant of the same slot to the same node after a failed start, or `None` if
    /// the slot is no longer this node's to restart.
    /// `plugin` (the plugin's name) is for the log lines that say why it failed.
    fn regrant(&self, plugin: &str, grant: &Grant) -> BoxFuture<Option<Grant>>;
    /// Gives the slot back after cleanup (a no-op when the lease was lost: the session's
    /// expiry vacates it).
    fn release(&self, plugin: &str, grant: &Grant, reason: CleanupReason) -> BoxFuture<()>;
    /// Gives the slot up after repeated failures: the node is skipped for the resource
    /// for a while.
    fn give_up(&self, plugin: &str, grant: &Grant) -> BoxFuture<()>;
}

/// What a supervisor needs from the node.
#[derive(Clone)]
pub struct Deps {
    pub grants: Arc<dyn Grants>,
    /// The `state` import of a plugin whose slots share one blob (the default).
    pub state: Arc<dyn StateBackend>,
    /// The `state` import of a plugin that keeps one blob per slot (`state = "per-slot"`).
    pub slot_state: Arc<dyn StateBackend>,
    /// The node's lease: every instance running `start` traps at its deadline D (the
    /// engine enforces it), and no start begins without it.
    pub lease: Arc<NodeLease>,
    /// Instances that may still execute `start`, counted so the node opens a new
    /// session only once the old one's are all stopped.
    pub live: LiveStarts,
    /// Where each failed start is recorded, with what comes next, for `tenure status`.
    pub failures: Arc<Failures>,
}

/// Counts instances that may still execute `start`: from just before `plugin.started`
/// until just after `plugin.stopped`.
#[derive(Clone, Default)]
pub struct LiveStarts(Arc<watch::Sender<usize>>);

/// One counted instance; dropping it (after `plugin.stopped` is written, or when the
/// supervisor's task is dropped, which drops the instance too) uncounts it.
pub struct Live(Arc<watch::Sender<usize>>);

impl LiveStarts {
    fn enter(&self) -> Live {
        self.0.send_modify(|n| *n += 1);
        Live(self.0.clone())
    }

    /// How many instances may execute `start` now.
    pub fn count(&self) -> usize {
        *self.0.borrow()
    }

    /// Resolves once no instance may execute `start`.
    pub async fn none(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// How supervision of a slot ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotEnd {
    /// Stopped on request; cleanup has run and the grant is released.
    Stopped(CleanupReason),
    /// Gave up after too many failed starts (or the slot could not be granted again).
    Failed,
}

/// The kebab-case name of a cleanup reason, as in the WIT and the event log.
pub fn reason_name(reason: CleanupReason) -> &'static str {
    match reason {
        CleanupReason::Moved => "moved",
        CleanupReason::LeaseLost => "lease-lost",
        CleanupReason::Shutdown => "shutdown",
        CleanupReason::PluginUpdated => "plugin-updated",
        CleanupReason::PluginRemoved => "plugin-removed",
        CleanupReason::Released => "released",
        CleanupReason::Failed => "failed",
    }
}

/// Supervises the slot of `grant` until `stop` resolves or the plugin fails for good.
/// Returns how it ended and the last token it held.
pub async fn run(
    loaded: Arc<Loaded>,
    grant: Grant,
    deps: Deps,
    stop: impl Future<Output = CleanupReason>,
) -> (SlotEnd, u64) {
    let mut last = grant.token;
    let end = supervise(loaded, grant, deps, stop, &mut last).await;
    (end, last)
}

async fn supervise(
    loaded: Arc<Loaded>,
    mut grant: Grant,
    deps: Deps,
    stop: impl Future<Output = CleanupReason>,
    last: &mut u64,
) -> SlotEnd {
    let mut stop = std::pin::pin!(stop);
    let mut failures: VecDeque<Instant> = VecDeque::new();
    let limits = loaded.entry.manifest.limits.clone();
    loop {
        acquired(&grant);
        let run = Run::new(&loaded, grant.clone(), &deps);
        let (outcome, error) = match run.once(&mut stop).await {
            Ended::Stopped(reason) => {
                deps.grants
                    .release(&loaded.entry.name, &grant, reason)
                    .await;
                lost(&grant, reason_name(reason));
                return SlotEnd::Stopped(reason);
            }
            Ended::NoLease => {
                lost(&grant, reason_name(CleanupReason::LeaseLost));
                return SlotEnd::Stopped(CleanupReason::LeaseLost);
            }
            Ended::Failed { outcome, error } => (outcome, error),
        };

        let now = Instant::now();
        failures.push_back(now);
        while failures
            .front()
            .is_some_and(|t| now.duration_since(*t) > limits.restart_window)
        {
            failures.pop_front();
        }
        let restarts = failures.len() as u32;
        // What `tenure status` shows of it (`failures.rs`); the restart time is set below.
        let mut failure = LastFailure {
            plugin: loaded.entry.name.clone(),
            slot: grant.slot,
            token: grant.token,
            outcome: outcome.to_owned(),
            error: error.clone(),
            at_ms: crate::envelope::unix_ms(std::time::SystemTime::now()),
            restart_ms: None,
            failures: restarts,
            max_restarts: limits.max_restarts,
        };
        if restarts > limits.max_restarts {
            deps.failures.record(&grant.resource, failure);
            tracing::error!(
                event = events::PLUGIN_FAILED,
                plugin = %loaded.entry.name,
                resource = %grant.resource,
                slot = grant.slot,
                token = grant.token,
                restarts = limits.max_restarts,
                window = %humantime::format_duration(limits.restart_window),
                "plugin failed {} times within {}; giving the slot up",
                restarts,
                humantime::format_duration(limits.restart_window),
            );
            deps.grants.give_up(&loaded.entry.name, &grant).await;
            lost(&grant, "failed");
            return SlotEnd::Failed;
        }
        let backoff = BACKOFF_BASE
            .saturating_mul(1 << (restarts - 1).min(16))
            .min(BACKOFF_MAX);
        failure.restart_ms = Some(failure.at_ms + backoff.as_millis() as u64);
        deps.failures.record(&grant.resource, failure);
        tracing::warn!(
            event = events::PLUGIN_RESTARTING,
            plugin = %loaded.entry.name,
            resource = %grant.resource,
            slot = grant.slot,
            attempt = restarts,
            backoff_ms = backoff.as_millis() as u64,
            "restarting the plugin after a failed start",
        );
        tokio::select! {
            biased;
            reason = stop.as_mut() => {
                deps.grants.release(&loaded.entry.name, &grant, reason).await;
                lost(&grant, reason_name(reason));
                return SlotEnd::Stopped(reason);
            }
            _ = tokio::time::sleep(backoff) => {}
        }
        let next = tokio::select! {
            biased;
            reason = stop.as_mut() => {
                deps.grants.release(&loaded.entry.name, &grant, reason).await;
                lost(&grant, reason_name(reason));
                return SlotEnd::Stopped(reason);
            }
            next = deps.grants.regrant(&loaded.entry.name, &grant) => next,
        };
        lost(&grant, "restarting");
        match next {
            Some(next) => {
                *last = next.token;
                grant = next;
            }
            None => return SlotEnd::Failed,
        }
    }
}

fn acquired(grant: &Grant) {
    tracing::info!(
        event = events::OWNERSHIP_ACQUIRED,
        resource = %grant.resource,
        slot = grant.slot,
        token = grant.token,
        term = grant.term,
        node = %grant.node,
        "acquired the slot",
    );
}

fn lost(grant: &Grant, reason: &str) {
    tracing::info!(
        event = events::OWNERSHIP_LOST,
        resource = %grant.resource,
        slot = grant.slot,
        token = grant.token,
        node = %grant.node,
        reason,
        "the slot is no longer held under this token",
    );
}

/// How one start ended, from the loop's point of view.
enum Ended {
    Stopped(CleanupReason),
    /// The start failed: how (`plugin.stopped`'s outcome) and the error in words.
    Failed {
        outcome: &'static str,
        error: String,
    },
    /// Not started: the node held no valid lease for the grant at the moment of starting.
    NoLease,
}

/// One start of the plugin under one grant, from `plugin.started` to the release.
struct Run<'a> {
    loaded: &'a Loaded,
    deps: &'a Deps,
    ctx: Arc<InstanceContext>,
}

impl<'a> Run<'a> {
    fn new(loaded: &'a Loaded, grant: Grant, deps: &'a Deps) -> Self {
        let ctx = Arc::new(
            InstanceContext::new(
                loaded.entry.name.clone(),
                grant,
                deps.lease.clone(),
                match loaded.entry.manifest.state {
                    StateScope::Shared => deps.state.clone(),
                    StateScope::PerSlot => deps.slot_state.clone(),
                },
                loaded.entry.manifest.limits.memory as usize,
            )
            .with_granted(loaded.granted.clone()),
        );
        Self { loaded, deps, ctx }
    }

    async fn once(self, stop: &mut Pin<&mut impl Future<Output = CleanupReason>>) -> Ended {
        let stop_grace = self.loaded.stop_grace;
        let grant = &self.ctx.grant;
        // No start without a valid lease at the moment of starting: a grant (or a
        // regrant after a failure) that arrives after the deadline, or under a session
        // the node no longer holds, is dropped. The engine enforces the same deadline
        // from here on, so the check and the start cannot drift apart.
        if self.ctx.may_act().is_err() {
            tracing::info!(event = events::PLUGIN_NOT_STARTED, plugin = %self.loaded.entry.name, resource = %grant.resource, slot = grant.slot, token = grant.token, node = %grant.node, "not starting the plugin: the node's lease on the slot has expired");
            return Ended::NoLease;
        }
        let live = self.deps.live.enter();
        tracing::info!(
            event = events::PLUGIN_STARTED,
            plugin = %self.loaded.entry.name,
            resource = %grant.resource,
            slot = grant.slot,
            token = grant.token,
            node = %grant.node,
            version = %self.loaded.entry.manifest.version,
            digest = %self.loaded.entry.digest,
            "starting the plugin",
        );
        // Instantiation runs the component's own initialisation: the engine bounds it by
        // the lease deadline like `start`.
        let mut instance = match self.loaded.plugin.instantiate(self.ctx.clone()).await {
            Ok(instance) => instance,
            Err(failure) => {
                let (outcome, error) = (failure.outcome(), failure.describe());
                self.stopped(live, outcome, Some(error.clone()));
                self.cleanup(None, CleanupReason::Failed).await;
                return Ended::Failed { outcome, error };
            }
        };

        let (requested, result) = {
            let call = instance.start();
            let mut call = std::pin::pin!(call);
            tokio::select! {
                // A stop that is due wins over a call that is also ready.
                biased;
                reason = stop.as_mut() => {
                    // Interrupt times are absolute: a grace from the request, and never
                    // past the lease deadline (the engine traps there on its own).
                    let mut until = Instant::now() + stop_grace;
                    if let Some(deadline) = self.deps.lease.deadline() {
                        until = until.min(deadline);
                    }
                    self.ctx.signals.request_stop(until);
                    (Some(reason), bounded(call, &self.ctx.signals, until).await)
                }
                result = call.as_mut() => (None, result),
            }
        };
        // The instance can be reused for cleanup only if its call returned and it was
        // never told to trap.
        let reusable = result.is_ok() && !self.ctx.signals.interrupted();
        let instance = reusable.then_some(instance);
        match (requested, result) {
            (Some(reason), Ok(returned)) => {
                self.stopped(live, "stopped", returned.err());
                self.cleanup(instance, reason).await;
                Ended::Stopped(reason)
            }
            (Some(reason), Err(failure)) => {
                self.stopped(live, failure.outcome(), Some(failure.describe()));
                self.cleanup(None, reason).await;
                Ended::Stopped(reason)
            }
            (None, Ok(Ok(()))) => {
                // Done, but still the owner: keep the instance until the stop.
                self.stopped(live, "returned", None);
                let reason = stop.as_mut().await;
                self.cleanup(instance, reason).await;
                Ended::Stopped(reason)
            }
            (None, Ok(Err(error))) => {
                self.stopped(live, "returned", Some(error.clone()));
                self.cleanup(instance, CleanupReason::Failed).await;
                Ended::Failed {
                    outcome: "returned",
                    error,
                }
            }
            (None, Err(Failure::Interrupted)) if self.ctx.may_act().is_err() => {
                // The engine trapped it at the lease deadline before the stop request
                // was seen (the node was frozen past its lease, say): a lease loss, not
                // a failed start.
                self.stopped(live, "interrupted", Some("the node's lease expired".into()));
                self.cleanup(None, CleanupReason::LeaseLost).await;
                Ended::Stopped(CleanupReason::LeaseLost)
            }
            (None, Err(failure)) => {
                let (outcome, error) = (failure.outcome(), failure.describe());
                self.stopped(live, outcome, Some(error.clone()));
                self.cleanup(None, CleanupReason::Failed).await;
                Ended::Failed { outcome, error }
            }
        }
    }

    /// Writes `plugin.stopped`: the instance can no longer run `start`. Then it is no
    /// longer counted as live.
    fn stopped(&self, live: Live, outcome: &'static str, error: Option<String>) {
        let grant = &self.ctx.grant;
        macro_rules! stopped {
            ($lvl:ident) => {
                tracing::$lvl!(
                    event = events::PLUGIN_STOPPED,
                    plugin = %self.loaded.entry.name,
                    resource = %grant.resource,
                    slot = grant.slot,
                    token = grant.token,
                    node = %grant.node,
                    outcome,
                    error = error.as_deref(),
                    "the plugin stopped ({outcome})",
                )
            };
        }
        if error.is_some() {
            stopped!(warn);
        } else {
            stopped!(info);
        }
        drop(live);
    }

    /// Runs `cleanup(reason)` once, within the budget.
    async fn cleanup(&self, instance: Option<Instance>, reason: CleanupReason) {
        let started = Instant::now();
        let budget = self.loaded.entry.manifest.limits.cleanup_timeout;
        let until = started + budget;
        // Cleanup may run after a lease loss (it is for local resources): its budget
        // bounds it, not the lease, and its effects are still refused after the deadline.
        let (outcome, error) = match instance {
            Some(mut instance) => {
                let signals = self.ctx.signals.clone();
                signals.unbind_from_lease(until);
                classify_cleanup(
                    bounded(std::pin::pin!(instance.cleanup(reason)), &signals, until).await,
                )
            }
            None => {
                let ctx = Arc::new(self.ctx.fresh());
                let signals = ctx.signals.clone();
                signals.unbind_from_lease(until);
                let fresh = async {
                    let mut instance = self.loaded.plugin.instantiate(ctx).await?;
                    instance.cleanup(reason).await
                };
                classify_cleanup(bounded(std::pin::pin!(fresh), &signals, until).await)
            }
        };
        let grant = &self.ctx.grant;
        let duration_ms = started.elapsed().as_millis() as u64;
        let reason_name = reason_name(reason);
        macro_rules! cleaned {
            ($lvl:ident) => {
                tracing::$lvl!(
                    event = events::PLUGIN_CLEANUP,
                    plugin = %self.loaded.entry.name,
                    resource = %grant.resource,
                    slot = grant.slot,
                    token = grant.token,
                    node = %grant.node,
                    reason = reason_name,
                    outcome,
                    duration_ms,
                    error = error.as_deref(),
                    "cleanup finished ({outcome}) in {duration_ms} ms",
                )
            };
        }
        if outcome == "ok" {
            cleaned!(info);
        } else {
            cleaned!(warn);
        }
    }
}

fn classify_cleanup(result: Result<(), Failure>) -> (&'static str, Option<String>) {
    match result {
        Ok(()) => ("ok", None),
        Err(Failure::Interrupted) => ("timeout", None),
        Err(failure) => ("trapped", Some(failure.describe())),
    }
}

/// Waits for `call` until `until` (the engine traps it there on its own); then sets the
/// interrupt (in case it was not set) and waits up to [`INTERRUPT_BACKSTOP`] more; then
/// abandons it (dropping the call discards the instance) and reports an interrupt.
async fn bounded<T>(
    mut call: Pin<&mut impl Future<Output = Result<T, Failure>>>,
    signals: &Signals,
    until: Instant,
) -> Result<T, Failure> {
    if let Ok(result) = tokio::time::timeout_at(until.into(), call.as_mut()).await {
        return result;
    }
    signals.interrupt();
    match tokio::time::timeout(INTERRUPT_BACKSTOP, call.as_mut()).await {
        Ok(result) => result,
        Err(_) => Err(Failure::Interrupted),
    }
}

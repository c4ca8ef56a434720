//! The node: wiring, reconciliation and shutdown order.
//!
//! On the single-node default the node owns every resource it can run: one slot per
//! resource (a node holds at most one slot of a resource; the others stay pending until
//! there are more nodes). The node turns the plugins folder into running slots:
//!
//! 1. The catalog reports changes in the folder.
//! 2. A new or changed plugin is compiled (or loaded from the compile cache). If that
//!    fails the plugin is reported and the version already running, if any, keeps
//!    running: a bad deploy does not take a working task down.
//! 3. Reconciliation decides which plugin serves each resource (two plugins naming the
//!    same resource: the first by file name wins, the other is reported) and whether
//!    this node may own it (`[placement] require` against the node's labels).
//! 4. Each resource has a controller task that runs the supervisor for the plugin it is
//!    told to run; a new plugin version stops the old one (`cleanup(plugin-updated)`)
//!    before the new one starts, a removed plugin stops with `cleanup(plugin-removed)`.
//!
//! Shutdown is ordered: stop taking changes, tell every controller (their plugins stop
//! and run `cleanup(shutdown)` concurrently, each within its own bounds), wait for all
//! of them, then close the store and write `node.stopped`.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::catalog::{self, Change, Entry};
use crate::config::Config;
use crate::events;
use crate::runtime::{CleanupReason, Runtime};
use crate::store::LocalStore;
use crate::supervisor::{self, Deps, Loaded, SlotEnd};

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cannot create the {what} folder {path}: {source}")]
    Folder {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
}

/// Runs the node until `shutdown` resolves, then shuts down in order.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), NodeError> {
    for (what, path) in [("data", &config.data_dir), ("plugins", &config.plugins_dir)] {
        std::fs::create_dir_all(path).map_err(|source| NodeError::Folder {
            what,
            path: path.clone(),
            source,
        })?;
    }
    let store = LocalStore::open(&config.data_dir.join("tenure.redb"))?;
    let runtime = Arc::new(Runtime::new(Some(&config.data_dir.join("cache")))?);
    tracing::info!(
        event = events::NODE_STARTED,
        node = %config.name,
        data_dir = %config.data_dir.display(),
        plugins_dir = %config.plugins_dir.display(),
        pooling = runtime.pooling(),
        "node started (single-node cluster: this node owns every resource it can run)",
    );

    let (changes_tx, mut changes) = mpsc::channel(64);
    let watcher = tokio::spawn(catalog::watch(config.plugins_dir.clone(), changes_tx));
    let (shutdown_tx, _) = watch::channel(false);
    let mut node = Node {
        deps: Deps {
            node: config.name.clone(),
            store,
        },
        config,
        runtime,
        loaded: BTreeMap::new(),
        controllers: BTreeMap::new(),
        shutdown: shutdown_tx,
        reported: BTreeSet::new(),
    };

    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            _ = shutdown.as_mut() => break,
            change = changes.recv() => match change {
                Some(change) => node.apply(change).await,
                None => break,
            },
        }
    }

    tracing::info!(
        event = events::NODE_STOPPING,
        node = %node.config.name,
        "shutting down: stopping every plugin"
    );
    watcher.abort();
    let name = node.config.name.clone();
    node.shutdown().await;
    tracing::info!(event = events::NODE_STOPPED, node = %name, "node stopped");
    Ok(())
}

/// The node's view of the folder and of its running slots.
struct Node {
    config: Config,
    runtime: Arc<Runtime>,
    deps: Deps,
    /// The compiled plugins, by plugin name.
    loaded: BTreeMap<String, Arc<Loaded>>,
    /// One controller per resource ever run, by resource.
    controllers: BTreeMap<String, Controller>,
    shutdown: watch::Sender<bool>,
    /// Conflicts and pending resources already reported, so they are said once.
    reported: BTreeSet<String>,
}

/// The handle on a resource's controller task.
struct Controller {
    want: watch::Sender<Option<Arc<Loaded>>>,
    task: JoinHandle<()>,
}

impl Node {
    async fn apply(&mut self, change: Change) {
        match change {
            Change::Upsert(entry) => {
                if self.loaded.get(&entry.name).is_some_and(|l| {
                    l.entry.digest == entry.digest && l.entry.manifest == entry.manifest
                }) {
                    return;
                }
                if let Some(loaded) = self.load(entry).await {
                    self.loaded.insert(loaded.entry.name.clone(), loaded);
                    self.reconcile();
                }
            }
            Change::Removed(name) => {
                if self.loaded.remove(&name).is_some() {
                    tracing::info!(event = events::CATALOG_REMOVED, plugin = %name, "plugin removed from the folder");
                    self.reconcile();
                }
            }
            Change::Rejected { name, path, error } => {
                let keeps = if self.loaded.contains_key(&name) {
                    "; the version already loaded keeps running"
                } else {
                    ""
                };
                tracing::error!(
                    event = events::CATALOG_REJECTED,
                    plugin = %name,
                    path = %path.display(),
                    %error,
                    "{}: {error}{keeps}",
                    path.display(),
                );
            }
            Change::InitialScanComplete => {
                tracing::info!(
                    event = events::NODE_READY,
                    node = %self.config.name,
                    plugins = self.loaded.len(),
                    "node ready",
                );
            }
        }
    }

    /// Compiles a plugin (or loads it from the cache) on a blocking thread.
    async fn load(&self, entry: Entry) -> Option<Arc<Loaded>> {
        let runtime = self.runtime.clone();
        let wasm = entry.wasm.clone();
        let compiled = tokio::task::spawn_blocking(move || runtime.load(&wasm)).await;
        let error = match compiled {
            Ok(Ok(plugin)) => {
                tracing::info!(
                    event = events::PLUGIN_LOADED,
                    plugin = %entry.name,
                    resource = %entry.manifest.resource,
                    version = %entry.manifest.version,
                    digest = %plugin.digest,
                    cache = plugin.cache.as_str(),
                    load_us = plugin.load_time.as_micros() as u64,
                    "plugin loaded",
                );
                return Some(Arc::new(Loaded { entry, plugin }));
            }
            Ok(Err(err)) => err.to_string(),
            Err(err) => format!("the compiler thread failed: {err}"),
        };
        let keeps = if self.loaded.contains_key(&entry.name) {
            "; the version already loaded keeps running"
        } else {
            ""
        };
        tracing::error!(
            event = events::CATALOG_REJECTED,
            plugin = %entry.name,
            path = %entry.wasm_path.display(),
            %error,
            "{}: {error}{keeps}",
            entry.wasm_path.display(),
        );
        None
    }

    /// Points every resource's controller at the plugin that should run it now.
    fn reconcile(&mut self) {
        let mut wanted: BTreeMap<String, Arc<Loaded>> = BTreeMap::new();
        for loaded in self.loaded.values() {
            let manifest = &loaded.entry.manifest;
            if let Some(winner) = wanted.get(&manifest.resource) {
                if self.reported.insert(format!(
                    "conflict {} {}",
                    loaded.entry.name, loaded.entry.digest
                )) {
                    tracing::error!(
                        event = events::CATALOG_REJECTED,
                        plugin = %loaded.entry.name,
                        path = %loaded.entry.wasm_path.display(),
                        error = %format!("resource {:?} is already served by plugin {:?}", manifest.resource, winner.entry.name),
                        "{}: resource {:?} is already served by plugin {:?}",
                        loaded.entry.wasm_path.display(), manifest.resource, winner.entry.name,
                    );
                }
                continue;
            }
            let unmet: Vec<String> = manifest
                .require
                .iter()
                .filter(|(k, v)| self.config.labels.get(*k) != Some(*v))
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            if !unmet.is_empty() {
                if self.reported.insert(format!(
                    "unplaced {} {}",
                    loaded.entry.name, loaded.entry.digest
                )) {
                    tracing::warn!(
                        event = events::RESOURCE_PENDING,
                        resource = %manifest.resource,
                        reason = %format!("this node lacks the required labels {}", unmet.join(", ")),
                        "resource {} is pending: this node lacks the required labels {}",
                        manifest.resource, unmet.join(", "),
                    );
                }
                continue;
            }
            let tickets_key = format!("tickets {} {}", manifest.resource, manifest.tickets);
            if manifest.tickets > 1 && self.reported.insert(tickets_key) {
                tracing::info!(
                    event = events::RESOURCE_PENDING,
                    resource = %manifest.resource,
                    slots = %format!("1..{}", manifest.tickets),
                    reason = "a node holds at most one slot of a resource; the others wait for more nodes",
                    "resource {}: slot 0 runs here; slots 1..{} wait for more nodes",
                    manifest.resource, manifest.tickets,
                );
            }
            wanted.insert(manifest.resource.clone(), loaded.clone());
        }

        for (resource, controller) in &self.controllers {
            let next = wanted.remove(resource);
            controller.want.send_if_modified(|current| {
                let same = match (&*current, &next) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    (None, None) => true,
                    _ => false,
                };
                if !same {
                    *current = next;
                }
                !same
            });
        }
        for (resource, loaded) in wanted {
            let (want, rx) = watch::channel(Some(loaded));
            let task = tokio::spawn(control(rx, self.shutdown.subscribe(), self.deps.clone()));
            self.controllers.insert(resource, Controller { want, task });
        }
    }

    /// Stops every controller and waits for them, within a bound.
    async fn shutdown(self) {
        self.shutdown.send_replace(true);
        let bound = self
            .loaded
            .values()
            .map(|l| l.entry.manifest.limits.stop_grace + l.entry.manifest.limits.cleanup_timeout)
            .max()
            .unwrap_or_default()
            + SHUTDOWN_SLACK;
        let all = futures_join(self.controllers.into_values().map(|c| c.task));
        if tokio::time::timeout(bound, all).await.is_err() {
            tracing::error!(
                event = events::NODE_SHUTDOWN_OVERRUN,
                bound_ms = bound.as_millis() as u64,
                "some plugins did not stop within the shutdown bound; exiting anyway"
            );
        }
    }
}

/// Added to the longest stop grace plus cleanup timeout to bound shutdown: covers the
/// interrupt backstops and the store writes.
const SHUTDOWN_SLACK: Duration = Duration::from_secs(5);

async fn futures_join(tasks: impl Iterator<Item = JoinHandle<()>>) {
    for task in tasks {
        let _ = task.await;
    }
}

/// A resource's controller: runs whichever plugin the node wants for the resource, one
/// at a time, until shutdown.
async fn control(
    mut want: watch::Receiver<Option<Arc<Loaded>>>,
    mut shutdown: watch::Receiver<bool>,
    deps: Deps,
) {
    loop {
        let loaded = loop {
            if *shutdown.borrow() {
                return;
            }
            if let Some(loaded) = want.borrow_and_update().clone() {
                break loaded;
            }
            tokio::select! {
                changed = want.changed() => if changed.is_err() { return },
                _ = shutdown.changed() => {},
            }
        };
        let stop = async {
            tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => CleanupReason::Shutdown,
                changed = want.changed() => match (changed, want.borrow().is_some()) {
                    (Err(_), _) => CleanupReason::Shutdown,
                    (Ok(()), true) => CleanupReason::PluginUpdated,
                    (Ok(()), false) => CleanupReason::PluginRemoved,
                },
            }
        };
        match supervisor::run(loaded, 0, deps.clone(), stop).await {
            SlotEnd::Stopped(CleanupReason::Shutdown) => return,
            SlotEnd::Stopped(_) => {}
            SlotEnd::Failed => {
                // Wait for a new version (or removal) before trying again.
                tokio::select! {
                    changed = want.changed() => if changed.is_err() { return },
                    _ = shutdown.wait_for(|stop| *stop) => return,
                }
            }
        }
    }
}

//! The node's plugins: the folder, compiled, and what the node advertises to the cluster.
//!
//! 1. The catalog reports changes in the folder.
//! 2. A new or changed plugin is compiled (or loaded from the compile cache). If that
//!    fails the plugin is reported and the version already loaded, if any, stays: a bad
//!    deploy does not take a working task down.
//! 3. Each resource is served by one plugin here: two plugins naming the same resource,
//!    the first by file name wins and the other is reported.
//! 4. The result is published twice: the compiled versions by (resource, digest), which
//!    the owner starts when granted a slot, and the adverts (resource → version, digest,
//!    tickets, labels) which the node proposes to the cluster so that placement knows
//!    what it can run. A changed file becomes a new advert; placement then moves the
//!    slots to the new version by handover.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use super::owner::Plugins;
use crate::catalog::{Change, Entry};
use crate::cluster::Advert;
use crate::events;
use crate::ownership::LeaseTiming;
use crate::runtime::Runtime;
use crate::supervisor::Loaded;

/// The compiled plugins of the folder.
pub struct Folder {
    runtime: Arc<Runtime>,
    timing: LeaseTiming,
    /// The compiled plugins, by plugin name.
    loaded: BTreeMap<String, Arc<Loaded>>,
    /// Conflicts already reported, so they are said once.
    reported: BTreeSet<String>,
}

impl Folder {
    pub fn new(runtime: Arc<Runtime>, timing: LeaseTiming) -> Self {
        Self {
            runtime,
            timing,
            loaded: BTreeMap::new(),
            reported: BTreeSet::new(),
        }
    }

    /// The number of plugins loaded.
    pub fn len(&self) -> usize {
        self.loaded.len()
    }

    /// Applies one change; returns whether the loaded set changed.
    pub async fn apply(&mut self, change: Change) -> bool {
        match change {
            Change::Upsert(entry) => {
                if self.loaded.get(&entry.name).is_some_and(|l| {
                    l.entry.digest == entry.digest && l.entry.manifest == entry.manifest
                }) {
                    return false;
                }
                match self.load(*entry).await {
                    Some(loaded) => {
                        self.loaded.insert(loaded.entry.name.clone(), loaded);
                        true
                    }
                    None => false,
                }
            }
            Change::Removed(name) => {
                let removed = self.loaded.remove(&name).is_some();
                if removed {
                    tracing::info!(event = events::CATALOG_REMOVED, plugin = %name, "plugin removed from the folder");
                }
                removed
            }
            Change::Rejected { name, path, error } => {
                let keeps = if self.loaded.contains_key(&name) {
                    "; the version already loaded stays"
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
                false
            }
            Change::InitialScanComplete => false,
        }
    }

    /// The compiled versions, by (resource, digest).
    pub fn plugins(&self) -> Plugins {
        Arc::new(
            self.loaded
                .values()
                .map(|l| {
                    (
                        (l.entry.manifest.resource.clone(), l.entry.digest.clone()),
                        l.clone(),
                    )
                })
                .collect(),
        )
    }

    /// What this node can run, by resource: one plugin per resource, the first by name.
    pub fn adverts(&mut self) -> BTreeMap<String, Advert> {
        let mut adverts: BTreeMap<String, Advert> = BTreeMap::new();
        for loaded in self.loaded.values() {
            let manifest = &loaded.entry.manifest;
            if let Some(winner) = adverts.get(&manifest.resource) {
                if self.reported.insert(format!(
                    "conflict {} {}",
                    loaded.entry.name, loaded.entry.digest
                )) {
                    let error = format!(
                        "resource {:?} is already served by plugin {:?}",
                        manifest.resource, winner.plugin
                    );
                    tracing::error!(
                        event = events::CATALOG_REJECTED,
                        plugin = %loaded.entry.name,
                        path = %loaded.entry.wasm_path.display(),
                        %error,
                        "{}: {error}",
                        loaded.entry.wasm_path.display(),
                    );
                }
                continue;
            }
            adverts.insert(
                manifest.resource.clone(),
                Advert {
                    plugin: loaded.entry.name.clone(),
                    version: manifest.version.clone(),
                    digest: loaded.entry.digest.clone(),
                    tickets: manifest.tickets,
                    require: manifest.require.clone(),
                },
            );
        }
        adverts
    }

    /// The longest stop grace plus cleanup timeout of the loaded plugins.
    pub fn longest_stop(&self) -> Duration {
        self.loaded
            .values()
            .map(|l| l.stop_grace + l.entry.manifest.limits.cleanup_timeout)
            .max()
            .unwrap_or_default()
    }

    /// The manifest's stop grace, clamped to what the lease allows (a quarter of the
    /// TTL), with a warning naming the plugin when it had to be.
    fn stop_grace(&self, entry: &Entry) -> Duration {
        let asked = entry.manifest.limits.stop_grace;
        let most = self.timing.max_stop_grace();
        if asked <= most {
            return asked;
        }
        tracing::warn!(
            event = events::CATALOG_CLAMPED,
            plugin = %entry.name,
            path = %entry.wasm_path.display(),
            asked_ms = asked.as_millis() as u64,
            stop_grace_ms = most.as_millis() as u64,
            "{}: limits.stop_grace {} is more than a quarter of the lease TTL ({}); using {}",
            entry.name,
            humantime::format_duration(asked),
            humantime::format_duration(self.timing.ttl),
            humantime::format_duration(most),
        );
        most
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
                    // The version's digest (wasm and secrets), as adverts, status and
                    // `plugin.started` show it; the compile cache keys on the wasm alone.
                    digest = %entry.digest,
                    cache = plugin.cache.as_str(),
                    load_us = plugin.load_time.as_micros() as u64,
                    "plugin loaded",
                );
                let stop_grace = self.stop_grace(&entry);
                let granted = Arc::new(crate::runtime::Granted::new(
                    &entry.manifest.capabilities,
                    &entry.secrets,
                ));
                return Some(Arc::new(Loaded {
                    entry,
                    plugin,
                    stop_grace,
                    granted,
                }));
            }
            Ok(Err(err)) => err.to_string(),
            Err(err) => format!("the compiler thread failed: {err}"),
        };
        let keeps = if self.loaded.contains_key(&entry.name) {
            "; the version already loaded stays"
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
}

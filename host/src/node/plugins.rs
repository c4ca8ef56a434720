//! The node's plugins: the folder, compiled, and what the node advertises to the cluster.
//!
//! 1. The catalog reports changes in the folder.
//! 2. A new or changed plugin is compiled (or loaded from the compile cache) in a task
//!    of its own, on the plugin threads, off the node's loop: each plugin is published
//!    once its own version is ready (within 100 ms while other loads go on, see
//!    `PUBLISH_EVERY` in `node/mod.rs`), so a plugin that loads in milliseconds does not
//!    wait for one that compiles for seconds. A newer change to the same file, or its removal,
//!    abandons the load under way; so does shutdown ([`Folder::abandon`]), which kills
//!    any compiler process. If a load fails the plugin is reported and the version
//!    already loaded, if any, stays: a bad deploy does not take a working task down. A
//!    manifest memory limit below the component's initial memory is such a failure.
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

use tokio::task::{AbortHandle, Id, JoinSet};

use super::owner::Plugins;
use crate::catalog::manifest::StateScope;
use crate::catalog::{Change, Entry};
use crate::cluster::Advert;
use crate::events;
use crate::ownership::LeaseTiming;
use crate::runtime::{LoadError, Plugin, Runtime};
use crate::supervisor::Loaded;

/// The compiled plugins of the folder.
pub struct Folder {
    runtime: Arc<Runtime>,
    timing: LeaseTiming,
    /// The compiled plugins, by plugin name.
    loaded: BTreeMap<String, Arc<Loaded>>,
    /// Conflicts already reported, so they are said once.
    reported: BTreeSet<String>,
    /// The loads under way, each the newest version of its plugin.
    loading: BTreeMap<String, Pending>,
    tasks: JoinSet<Loading>,
    /// Where loads run: the plugin threads, below the control plane's priority.
    threads: tokio::runtime::Handle,
}

/// What a load task returns: the plugin's entry and the load's outcome.
type Loading = (Entry, Result<Plugin, LoadError>);

/// A load under way: which version, and its task.
struct Pending {
    /// The files being loaded (the wasm bytes are shared, not copied).
    entry: Entry,
    task: AbortHandle,
}

impl Folder {
    pub fn new(
        runtime: Arc<Runtime>,
        timing: LeaseTiming,
        threads: tokio::runtime::Handle,
    ) -> Self {
        Self {
            runtime,
            timing,
            threads,
            loaded: BTreeMap::new(),
            reported: BTreeSet::new(),
            loading: BTreeMap::new(),
            tasks: JoinSet::new(),
        }
    }

    /// Whether loads are under way.
    pub fn loading(&self) -> bool {
        !self.loading.is_empty()
    }

    /// The number of plugins loaded.
    pub fn len(&self) -> usize {
        self.loaded.len()
    }

    /// Applies one change; returns whether the loaded set changed. A new or changed
    /// plugin only starts loading: [`Folder::next_loaded`] publishes it.
    pub fn apply(&mut self, change: Change) -> bool {
        match change {
            Change::Upsert(entry) => {
                if self
                    .loading
                    .get(&entry.name)
                    .is_some_and(|p| p.entry.same_files(&entry))
                {
                    return false;
                }
                self.cancel(&entry.name);
                if self
                    .loaded
                    .get(&entry.name)
                    .is_some_and(|l| l.entry.same_files(&entry))
                {
                    return false;
                }
                self.start_load(*entry);
                false
            }
            Change::Removed(name) => {
                self.cancel(&name);
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
                // The error is said once, in its field (the text log prints it after the
                // message).
                tracing::error!(
                    event = events::CATALOG_REJECTED,
                    plugin = %name,
                    path = %path.display(),
                    %error,
                    "{} is rejected{keeps}",
                    path.display(),
                );
                false
            }
            Change::InitialScanComplete => false,
        }
    }

    /// The compiled versions, by (resource, digest), that this node may run at
    /// `cluster_version`: a plugin that keeps its state per slot only once the version
    /// allows it (a grant that came from an advert of before is not started: see
    /// [`Folder::adverts`]). Of two files with one digest for one resource (the same
    /// wasm under two manifests), the first by name, as the adverts choose: the node runs
    /// the manifest it advertised.
    pub fn plugins(&self, cluster_version: u32) -> Plugins {
        let mut plugins = BTreeMap::new();
        for loaded in self
            .loaded
            .values()
            .filter(|l| runs_at(&l.entry.manifest, cluster_version))
        {
            // Under its version's digest, and under the name it is advertised by at
            // `cluster_version` (the wasm's digest beside 0.2.0: [`Entry::digest_at`]).
            // Only those: from version 7 a grant under the wasm's digest is one of the
            // same wasm without manifest terms, which this file may not be, so it is
            // handed over rather than started with this file's terms.
            let resource = &loaded.entry.manifest.resource;
            let names = [
                loaded.entry.digest.clone(),
                loaded.entry.digest_at(cluster_version),
            ];
            for digest in names {
                let key = (resource.clone(), digest);
                plugins.entry(key).or_insert_with(|| loaded.clone());
            }
        }
        Arc::new(plugins)
    }

    /// What this node can run, by resource: one plugin per resource, the first by name;
    /// a plugin that keeps its state per slot only once `cluster_version` allows it.
    pub fn adverts(&mut self, cluster_version: u32) -> BTreeMap<String, Advert> {
        let mut adverts: BTreeMap<String, Advert> = BTreeMap::new();
        for loaded in self.loaded.values() {
            let manifest = &loaded.entry.manifest;
            let needs = crate::version::SLOT_STATE;
            if !runs_at(manifest, cluster_version) {
                if self.reported.insert(format!(
                    "waiting {} {}",
                    loaded.entry.name, loaded.entry.digest
                )) {
                    tracing::info!(
                        event = events::PLUGIN_WAITING,
                        plugin = %loaded.entry.name,
                        version = cluster_version,
                        needs,
                        "{} keeps its state per slot, which needs cluster version {needs} (every member on 0.3.0 or newer); the cluster is at {cluster_version}: not advertised until it is raised",
                        loaded.entry.name
                    );
                }
                continue;
            }
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
                        "{} is not advertised",
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
                    digest: loaded.entry.digest_at(cluster_version),
                    tickets: manifest.tickets,
                    require: manifest.require.clone(),
                    footprint: loaded.plugin.footprint.pool(),
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

    /// Starts loading `entry` in a task of its own.
    fn start_load(&mut self, entry: Entry) {
        let runtime = self.runtime.clone();
        let (name, pending) = (entry.name.clone(), entry.clone());
        let task = self.tasks.spawn_on(
            async move {
                let loaded = runtime
                    .load_off_thread(&entry.name, entry.wasm.clone(), &entry.wasm_digest)
                    .await;
                (entry, loaded)
            },
            &self.threads,
        );
        self.loading.insert(
            name,
            Pending {
                entry: pending,
                task,
            },
        );
    }

    /// Abandons the load of `name` under way, if any (its compiler process is killed).
    fn cancel(&mut self, name: &str) {
        if let Some(pending) = self.loading.remove(name) {
            pending.task.abort();
        }
    }

    /// Waits for the next load to end, then takes every other load that has ended too,
    /// and publishes them; returns whether the loaded set changed. Pending forever when
    /// nothing is loading.
    ///
    /// Taking all that ended at once matters for a large folder: each return makes the
    /// node rebuild its plugin list and adverts (O(plugins)) and reconcile its slots, so
    /// returning once per plugin made loading 10,000 plugins quadratic.
    pub async fn next_loaded(&mut self) -> bool {
        let Some(first) = self.tasks.join_next_with_id().await else {
            return std::future::pending().await;
        };
        let mut changed = self.take(first);
        while let Some(ended) = self.tasks.try_join_next_with_id() {
            changed |= self.take(ended);
        }
        changed
    }

    /// Publishes one ended load if it is still the current version of its plugin;
    /// returns whether the loaded set changed.
    fn take(&mut self, ended: Result<(Id, Loading), tokio::task::JoinError>) -> bool {
        let (entry, loaded) = match ended {
            Ok((_, done)) => done,
            // Abandoned: a newer version or a removal replaced it.
            Err(e) if e.is_cancelled() => return false,
            Err(e) => {
                // A bug in the load path; the plugin is reported, not retried.
                let id = e.id();
                if let Some(name) = self.name_of(id) {
                    self.loading.remove(&name);
                    tracing::error!(event = events::CATALOG_REJECTED, plugin = %name, error = %e, "{name}: the load failed");
                }
                return false;
            }
        };
        let current = self
            .loading
            .get(&entry.name)
            .is_some_and(|p| p.entry.same_files(&entry));
        if !current {
            return false;
        }
        self.loading.remove(&entry.name);
        match self.finish(entry, loaded) {
            Some(loaded) => {
                self.loaded.insert(loaded.entry.name.clone(), loaded);
                true
            }
            None => false,
        }
    }

    /// The plugin whose load is the task `id`.
    fn name_of(&self, id: Id) -> Option<String> {
        self.loading
            .iter()
            .find(|(_, p)| p.task.id() == id)
            .map(|(name, _)| name.clone())
    }

    /// Abandons every load under way (shutdown): compiler processes are killed and
    /// leave no cache entry.
    pub async fn abandon(&mut self) {
        for name in std::mem::take(&mut self.loading).into_keys() {
            tracing::info!(event = events::PLUGIN_ABANDONED, plugin = %name, "shutting down: the plugin's load is abandoned");
        }
        self.tasks.abort_all();
        // The aborted tasks end at once (their futures are dropped, which kills the
        // children and removes their temporary files); waiting here makes that happen
        // before the node exits.
        while self.tasks.join_next().await.is_some() {}
    }

    /// The loaded plugin, or the reported reason it cannot be.
    fn finish(&self, entry: Entry, loaded: Result<Plugin, LoadError>) -> Option<Arc<Loaded>> {
        let limit = entry.manifest.limits.memory;
        let refused = |plugin: &Plugin| plugin.footprint.refuses(limit);
        let error = match loaded {
            Ok(plugin) if refused(&plugin).is_none() => {
                tracing::info!(
                    event = events::PLUGIN_LOADED,
                    plugin = %entry.name,
                    resource = %entry.manifest.resource,
                    version = %entry.manifest.version,
                    // The version's digest (the wasm and the manifest's run terms), as
                    // adverts and status show it from cluster version 7 (before it, the
                    // wasm's alone: `Entry::digest_at`); the compile cache keys on the
                    // wasm alone.
                    digest = %entry.digest,
                    cache = plugin.cache.as_str(),
                    load_us = plugin.load_time.as_micros() as u64,
                    // Functions the compile took from the incremental cache, took from
                    // an identical one it compiled itself, and compiled.
                    reused_functions = plugin.reuse.hits,
                    repeated_functions = plugin.reuse.repeats,
                    compiled_functions = plugin.reuse.misses,
                    initial_memory = plugin.footprint.initial_memory,
                    memories = plugin.footprint.memories,
                    core_instances = plugin.footprint.core_instances,
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
            Ok(plugin) => refused(&plugin).unwrap_or_default(),
            Err(err) => err.to_string(),
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
            "{} is rejected{keeps}",
            entry.wasm_path.display(),
        );
        None
    }
}

/// Whether a plugin with `manifest` may run (and so be advertised) at the cluster's
/// `version`: one that keeps its state per slot only from [`crate::version::SLOT_STATE`].
fn runs_at(manifest: &crate::catalog::Manifest, version: u32) -> bool {
    manifest.state == StateScope::Shared || version >= crate::version::SLOT_STATE
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Manifest, Secrets};

    /// A folder entry whose wasm is not wasm: its load ends at once, refused.
    fn bad_entry(name: &str) -> Entry {
        Entry {
            name: name.to_owned(),
            wasm_path: format!("{name}.wasm").into(),
            wasm: Arc::from(&b"not wasm"[..]),
            digest: format!("sha256:{name}"),
            wasm_digest: name.to_owned(),
            manifest: Manifest::parse(name, "").expect("an empty manifest is the defaults"),
            secrets: Secrets::default(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_load_that_has_ended_is_taken_in_one_pass() {
        let runtime = Arc::new(Runtime::new(None).expect("an engine"));
        let mut folder = Folder::new(
            runtime,
            LeaseTiming::default(),
            tokio::runtime::Handle::current(),
        );
        for k in 0..50 {
            folder.apply(Change::Upsert(Box::new(bad_entry(&format!("p{k:02}")))));
        }
        assert!(folder.loading());
        // Wait (bounded) until every load task has ended, then take them: one call.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !folder.loading.values().all(|p| p.task.is_finished()) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "loads did not end within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!folder.next_loaded().await, "refused loads change nothing");
        assert!(
            !folder.loading(),
            "{} of 50 ended loads were left for later passes",
            folder.loading.len()
        );
    }

    /// Two files for one resource with the same wasm (so one digest) and different
    /// manifests: the node runs the one it advertises, the first by name, with its
    /// manifest's capabilities, not the other's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_plugin_run_for_a_resource_is_the_one_advertised() {
        let wasm: Arc<[u8]> = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/plugin-0.1.0/counter.wasm"
        ))
        .unwrap()
        .into();
        let entry = |name: &str, value: &str| Entry {
            name: name.to_owned(),
            wasm_path: format!("{name}.wasm").into(),
            wasm: wasm.clone(),
            digest: "sha256:same".into(),
            wasm_digest: "same".into(),
            manifest: Manifest::parse(
                name,
                &format!("resource = \"r\"\n[capabilities]\nenv = {{ WHO = \"{value}\" }}\n"),
            )
            .unwrap(),
            secrets: Secrets::default(),
        };
        let runtime = Arc::new(Runtime::new(None).expect("an engine"));
        let mut folder = Folder::new(
            runtime,
            LeaseTiming::default(),
            tokio::runtime::Handle::current(),
        );
        folder.apply(Change::Upsert(Box::new(entry("a", "a"))));
        folder.apply(Change::Upsert(Box::new(entry("b", "b"))));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while folder.loading() {
            assert!(tokio::time::Instant::now() < deadline, "loads did not end");
            folder.next_loaded().await;
        }
        assert_eq!(folder.loaded.len(), 2, "both loaded");
        let adverts = folder.adverts(crate::version::SLOT_STATE);
        assert_eq!(adverts["r"].plugin, "a");
        let plugins = folder.plugins(crate::version::SLOT_STATE);
        let run = &plugins[&("r".to_string(), "sha256:same".to_string())];
        assert_eq!(run.entry.name, "a", "the plugin run is the one advertised");
    }

    /// Beside 0.2.0 (version 6) a plugin is advertised and found under its wasm's digest,
    /// as 0.2.0 names it; from version 7 under its version's digest only, so a grant
    /// under the wasm's digest (the same wasm without manifest terms) never starts this
    /// file with its terms (the reviewer's case: before, the wasm's digest named it at
    /// every version).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_plugin_with_manifest_terms_is_named_by_its_wasm_only_beside_0_2_0() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("a.wasm");
        std::fs::copy(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../tests/fixtures/plugin-0.1.0/counter.wasm"
            ),
            &wasm,
        )
        .unwrap();
        let toml = dir.path().join("a.toml");
        std::fs::write(
            &toml,
            "resource = \"r\"\n[capabilities]\nenv = { X = \"1\" }\n",
        )
        .unwrap();
        let entry = crate::catalog::read_plugin(&wasm, Some(&toml)).unwrap();
        let (full, bare) = (
            entry.digest.clone(),
            format!("sha256:{}", entry.wasm_digest),
        );
        assert_ne!(full, bare);
        let runtime = Arc::new(Runtime::new(None).expect("an engine"));
        let mut folder = Folder::new(
            runtime,
            LeaseTiming::default(),
            tokio::runtime::Handle::current(),
        );
        folder.apply(Change::Upsert(Box::new(entry)));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while folder.loading() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the load did not end"
            );
            folder.next_loaded().await;
        }
        let key = |digest: &str| ("r".to_string(), digest.to_string());
        let beside = crate::version::WIRE_OLDEST;
        assert_eq!(folder.adverts(beside)["r"].digest, bare);
        let plugins = folder.plugins(beside);
        assert!(plugins.contains_key(&key(&bare)) && plugins.contains_key(&key(&full)));
        let raised = crate::version::INSTALL_ORDER;
        assert_eq!(folder.adverts(raised)["r"].digest, full);
        let plugins = folder.plugins(raised);
        assert!(plugins.contains_key(&key(&full)));
        assert!(
            !plugins.contains_key(&key(&bare)),
            "named by its wasm at version 7"
        );
    }
}

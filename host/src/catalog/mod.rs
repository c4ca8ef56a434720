//! The plugins folder: `<name>.wasm` plus an optional `<name>.toml` manifest.
//!
//! **Seeing changes.** inotify ([`inotify`], through the `notify` crate) says the folder
//! changed; the watch then looks at it (lists it and stats the files). Without an event
//! it looks every [`WatchOptions::poll`] (1 s) anyway: that slow poll is all there is
//! where inotify cannot be had, and elsewhere a safety net for what inotify does not see
//! (a secret file in a subfolder, a network filesystem changed from another machine).
//! Two looks are at least [`WatchOptions::settle`] (100 ms) apart, so a flood of events
//! (a log file written in the folder) costs at most ten looks a second.
//!
//! **Read once stable.** A plugin is read only once its files have kept the same size and
//! modification time across two looks, `settle` apart, so a file still being copied in
//! is not mistaken for a bad one (installing by writing elsewhere and renaming in is
//! still the way to be sure: a writer that pauses longer than `settle` mid-file gets its
//! half file read, rejected, and read again once complete). While a plugin is unsettled
//! the watch looks again after `settle` without waiting for an event, so a new plugin is
//! read about 100 ms after it is written. Each plugin is then reported as an [`Change`]:
//! a new or changed plugin (`Upsert`), a removed one (`Removed`), or one whose files are
//! bad (`Rejected`, with the path and what is wrong). A rejected plugin is reported once
//! per version of its files, not at every poll.
//!
//! This module reads files and parses manifests. It does not compile wasm (the runtime
//! does) and does not decide what runs (the node does).

pub mod capabilities;
mod inotify;
pub mod manifest;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

pub use manifest::Manifest;

/// The folder watch's timings (see the module doc). Tests stretch and shrink them.
#[derive(Clone, Copy, Debug)]
pub struct WatchOptions {
    /// How long a plugin's files must stay unchanged before they are read; also the
    /// shortest time between two looks at the folder.
    pub settle: Duration,
    /// How often the folder is looked at when no event says it changed.
    pub poll: Duration,
    /// Whether to ask for inotify events at all (without them, changes are seen at the
    /// slow poll).
    pub inotify: bool,
}

impl Default for WatchOptions {
    fn default() -> WatchOptions {
        WatchOptions {
            settle: Duration::from_millis(100),
            poll: Duration::from_secs(1),
            inotify: true,
        }
    }
}

/// One plugin as found in the folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The file stem: `heartbeat` for `heartbeat.wasm`.
    pub name: String,
    pub wasm_path: PathBuf,
    /// The wasm bytes, read once so that what is hashed is what is compiled.
    pub wasm: Arc<[u8]>,
    /// What identifies this version of the plugin: `sha256:<hex>` of the wasm bytes, or,
    /// when the manifest grants capabilities, sets limits or keeps the state per slot, of
    /// the wasm bytes' digest with those ([`version_digest`]). So a changed grant, limit,
    /// environment value or secret path, or a switch between a shared and a per-slot
    /// state, is a new version, rolled out by handover like a changed wasm file. A
    /// secret's contents are not in it (see there).
    pub digest: String,
    /// The SHA-256 of the wasm bytes, in hex: what the runtime's compile cache and its
    /// shared builds are keyed by.
    pub wasm_digest: String,
    pub manifest: Manifest,
    /// The values of the manifest's `secrets`, read when the plugin was read.
    pub secrets: Secrets,
}

impl Entry {
    /// The digest the node advertises and runs this plugin under at cluster version
    /// `version`: [`Entry::digest`], except at a version below
    /// [`crate::version::INSTALL_ORDER`] that a leader has raised (6: 0.2.0 members may
    /// run beside this build), where it is the wasm's alone. 0.2.0 names a plugin
    /// without secrets by its wasm, so a half-upgraded cluster agrees on each plugin's
    /// build and its slots run on every node; a manifest's terms count from the raise,
    /// when each node advertises its plugins again (one handover of each plugin whose
    /// manifest sets any). A new cluster (version 0 until its first leader raises it)
    /// uses [`Entry::digest`] from the start: it goes from 0 to this build's version.
    /// (0.2.0 hashed secret values into its digest; this build never does, so a plugin
    /// with secrets runs only on one side of a half-upgraded cluster.)
    pub fn digest_at(&self, version: u32) -> String {
        if (1..crate::version::INSTALL_ORDER).contains(&version) {
            format!("sha256:{}", self.wasm_digest)
        } else {
            self.digest.clone()
        }
    }

    /// Whether `other` is what these files held when read before: the same version, the
    /// same manifest and the same secret values. Anything else is loaded again (a new
    /// secret value under the same digest included: see [`version_digest`]).
    pub fn same_files(&self, other: &Entry) -> bool {
        self.digest == other.digest
            && self.manifest == other.manifest
            && self.secrets == other.secrets
    }
}

/// Secret values by variable name. Its `Debug` shows the names only, so a secret cannot
/// reach a log line or an error through a formatted `Entry`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets(BTreeMap<String, String>);

impl Secrets {
    /// `(name, value)` pairs, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, "<redacted>")))
            .finish()
    }
}

/// The digest that names a plugin version (see [`Entry::digest`]): the wasm bytes'
/// SHA-256 alone while the manifest gives the instance nothing beyond the defaults
/// (so a plain plugin's digest is what it always was), and otherwise a SHA-256 over that
/// digest and every term of the manifest that changes what an instance may do or sees
/// ([`run_terms`]), each length-prefixed so that no two manifests hash the same input.
///
/// What it leaves out: the resource's spec (`resource`, `tickets`, `version`,
/// `[placement]`), which the advert carries beside the digest and which no running
/// instance sees; and the contents of secret files. The digest enters the replicated
/// state through the adverts, and a secret must not, not even as a hash (a guess could be
/// checked against it); a secret file's path is in the digest, its contents are not. A
/// node whose secret file changes under the same digest restarts its own instances of
/// the plugin (`node/owner.rs`), so the new value is in use without the cluster ever
/// learning anything of it.
fn version_digest(wasm_digest: &[u8], manifest: &Manifest) -> String {
    let terms = run_terms(manifest);
    if terms.is_empty() {
        return format!("sha256:{}", hex::encode(wasm_digest));
    }
    let mut hash = Sha256::new();
    hash.update(b"tenure plugin version with its manifest\0");
    hash.update(wasm_digest);
    for (key, value) in &terms {
        for field in [key.as_bytes(), value.as_bytes()] {
            hash.update((field.len() as u64).to_le_bytes());
            hash.update(field);
        }
    }
    format!("sha256:{}", hex::encode(hash.finalize()))
}

/// The manifest's terms that an instance runs under, as `(key, value)` text in one
/// canonical order, leaving out each that has its default value (so writing a default
/// out is not a new version): the state's scope, the limits, the outbound hosts (sorted:
/// their order grants nothing), the environment and the secrets' names and paths.
fn run_terms(manifest: &Manifest) -> Vec<(String, String)> {
    let mut terms = Vec::new();
    if manifest.state == manifest::StateScope::PerSlot {
        terms.push(("state".into(), "per-slot".into()));
    }
    let (limits, default) = (&manifest.limits, manifest::Limits::default());
    let mut limit = |key: &str, value: String, default: String| {
        if value != default {
            terms.push((format!("limits.{key}"), value));
        }
    };
    limit(
        "memory",
        limits.memory.to_string(),
        default.memory.to_string(),
    );
    let nanos = |d: std::time::Duration| d.as_nanos().to_string();
    limit(
        "stop_grace",
        nanos(limits.stop_grace),
        nanos(default.stop_grace),
    );
    let cleanup = nanos(limits.cleanup_timeout);
    limit("cleanup_timeout", cleanup, nanos(default.cleanup_timeout));
    let restarts = limits.max_restarts.to_string();
    limit("max_restarts", restarts, default.max_restarts.to_string());
    let window = nanos(limits.restart_window);
    limit("restart_window", window, nanos(default.restart_window));
    let capabilities = &manifest.capabilities;
    let mut hosts: Vec<String> = capabilities
        .allowed_outbound_hosts
        .iter()
        .map(ToString::to_string)
        .collect();
    hosts.sort();
    hosts.dedup();
    terms.extend(
        hosts
            .into_iter()
            .map(|h| ("allowed_outbound_host".into(), h)),
    );
    for (name, value) in &capabilities.env {
        terms.push((format!("env.{name}"), value.clone()));
    }
    for (name, path) in &capabilities.secrets {
        // `secrets/x` and `./secrets/x` name one file (capabilities.rs allows no `..`).
        let parts: Vec<_> = path
            .components()
            .filter(|c| matches!(c, std::path::Component::Normal(_)))
            .map(|c| c.as_os_str().to_string_lossy())
            .collect();
        terms.push((format!("secrets.{name}"), parts.join("/")));
    }
    terms
}

/// Reads the manifest's secret files, relative to `dir` (the plugins folder). An error
/// names the key and the path, never a value.
fn read_secrets(dir: &Path, manifest: &Manifest) -> Result<Secrets, (PathBuf, String)> {
    let mut values = BTreeMap::new();
    for (name, relative) in &manifest.capabilities.secrets {
        let path = dir.join(relative);
        let fail = |why: String| {
            (
                path.clone(),
                format!(
                    "capabilities.secrets.{name}: cannot read the secret file {}: {why}",
                    path.display()
                ),
            )
        };
        let bytes = std::fs::read(&path).map_err(|e| fail(e.to_string()))?;
        let mut text = String::from_utf8(bytes)
            .map_err(|_| fail("it is not UTF-8 text (environment values are strings)".into()))?;
        // One final line break is what `echo value > file` adds, not part of the secret.
        if text.ends_with('\n') {
            text.pop();
            if text.ends_with('\r') {
                text.pop();
            }
        }
        if text.contains('\0') {
            return Err(fail("it contains a NUL byte".into()));
        }
        values.insert(name.clone(), text);
    }
    Ok(Secrets(values))
}

/// What changed in the folder.
#[derive(Debug)]
pub enum Change {
    /// A new plugin, or new files for a known one (boxed: an entry is large beside the
    /// other variants).
    Upsert(Box<Entry>),
    /// The plugin's wasm file is gone.
    Removed(String),
    /// The plugin's files are unusable; `path` is the file at fault.
    Rejected {
        name: String,
        path: PathBuf,
        error: String,
    },
    /// Everything present at the first look has been reported.
    InitialScanComplete,
}

/// Size and modification time of a plugin's files (the wasm, the manifest, and the secret
/// files its manifest named when it was last read): what "changed" means.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fingerprint {
    wasm: (u64, Option<SystemTime>),
    manifest: Option<(u64, Option<SystemTime>)>,
    /// `None` for a secret file that is missing.
    secrets: Vec<Option<(u64, Option<SystemTime>)>>,
}

/// The secret files a manifest names, for the fingerprint (empty if it cannot be read or
/// parsed: that is reported when the plugin is read).
fn secret_files(dir: &Path, name: &str, manifest_path: Option<&Path>) -> Vec<PathBuf> {
    let Some(text) = manifest_path.and_then(|p| std::fs::read_to_string(p).ok()) else {
        return Vec::new();
    };
    Manifest::parse(name, &text).map_or_else(
        |_| Vec::new(),
        |m| {
            m.capabilities
                .secrets
                .values()
                .map(|p| dir.join(p))
                .collect()
        },
    )
}

fn stat(path: &Path) -> Option<(u64, Option<SystemTime>)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()))
}

/// Reads one plugin's files into an [`Entry`].
pub fn read_plugin(
    wasm_path: &Path,
    manifest_path: Option<&Path>,
) -> Result<Entry, (PathBuf, String)> {
    let name = wasm_path
        .file_stem()
        .and_then(|s| s.to_str())
        .ok_or_else(|| {
            (
                wasm_path.to_path_buf(),
                "the file name is not valid UTF-8".to_string(),
            )
        })?
        .to_string();
    let wasm: Arc<[u8]> = std::fs::read(wasm_path)
        .map_err(|e| (wasm_path.to_path_buf(), format!("cannot read: {e}")))?
        .into();
    let manifest = match manifest_path {
        None => {
            manifest::check_resource_name(&name).map_err(|e| {
                (
                    wasm_path.to_path_buf(),
                    format!("the file stem is used as the resource name, and {e}; name the resource in {name}.toml"),
                )
            })?;
            Manifest::defaults(&name)
        }
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| (path.to_path_buf(), format!("cannot read: {e}")))?;
            Manifest::parse(&name, &text).map_err(|e| (path.to_path_buf(), e))?
        }
    };
    let dir = wasm_path.parent().unwrap_or(Path::new("."));
    let secrets = read_secrets(dir, &manifest)?;
    let wasm_digest = Sha256::digest(&wasm);
    Ok(Entry {
        digest: version_digest(&wasm_digest, &manifest),
        wasm_digest: hex::encode(wasm_digest),
        name,
        wasm_path: wasm_path.to_path_buf(),
        wasm,
        manifest,
        secrets,
    })
}

/// Watches `dir` until `changes` is closed. The first look reports every plugin present,
/// followed by [`Change::InitialScanComplete`].
pub async fn watch(dir: PathBuf, changes: mpsc::Sender<Change>) {
    watch_with(dir, changes, WatchOptions::default()).await;
}

/// [`watch`] with the given timings. Returns how many times it looked at the folder (the
/// flood test bounds it).
async fn watch_with(dir: PathBuf, changes: mpsc::Sender<Change>, options: WatchOptions) -> u64 {
    let mut events = if options.inotify {
        inotify::FolderEvents::new()
            .inspect_err(|error| {
                tracing::warn!(
                    event = crate::events::CATALOG_POLLING,
                    path = %dir.display(),
                    %error,
                    "cannot use inotify; polling the plugins folder instead"
                )
            })
            .ok()
    } else {
        None
    };
    let mut watcher = Watcher::default();
    let mut first = true;
    let mut looks = 0;
    loop {
        if changes.is_closed() {
            return looks;
        }
        // Watch before looking, so that a change made after this look wakes the next.
        if let Some(events) = &mut events {
            events.follow(&dir);
        }
        looks += 1;
        // A look reads and hashes every new or changed plugin (10,000 files in a large
        // folder): on a blocking thread, so that it does not hold the node's runtime,
        // where Raft's heartbeats and the lease renewals run.
        let looked = tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || {
                let batch = watcher.poll(&dir, first);
                (watcher, batch)
            }
        })
        .await;
        let mut batch;
        (watcher, batch) = match looked {
            Ok(looked) => looked,
            // The look panicked (a bug): the watch ends, as the panic would have ended it.
            Err(error) => {
                tracing::error!(event = crate::events::CATALOG_REJECTED, path = %dir.display(), %error, "the watch of the plugins folder failed");
                return looks;
            }
        };
        if first {
            batch.push(Change::InitialScanComplete);
            first = false;
        }
        for change in batch {
            if changes.send(change).await.is_err() {
                return looks;
            }
        }
        // The floor between two looks, and the stability window of an unsettled plugin.
        tokio::time::sleep(options.settle).await;
        if watcher.settled() {
            let changed = async {
                match &events {
                    Some(events) => events.changed().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep(options.poll.saturating_sub(options.settle)) => {}
                () = changes.closed() => return looks,
            }
        }
    }
}

/// Poll-to-poll memory of the folder.
#[derive(Default)]
struct Watcher {
    /// What each plugin's files looked like at the previous poll.
    last_seen: BTreeMap<String, Fingerprint>,
    /// The fingerprint last reported (upserted or rejected) for each plugin.
    reported: BTreeMap<String, Fingerprint>,
    /// Whether the folder's absence was reported.
    missing_reported: bool,
    /// The secret files each plugin's manifest named when it was last read.
    secret_files: BTreeMap<String, Vec<PathBuf>>,
}

impl Watcher {
    /// Whether every plugin seen at the last look was reported as it looked then: if
    /// not, one is new or changing and must be looked at again to be read.
    fn settled(&self) -> bool {
        self.last_seen
            .iter()
            .all(|(name, print)| self.reported.get(name) == Some(print))
    }

    /// One look at the folder. On the first poll files are read at once (nothing is
    /// being copied in while the node was down, or if it is, the next poll fixes it).
    fn poll(&mut self, dir: &Path, first: bool) -> Vec<Change> {
        let mut changes = Vec::new();
        let now = match list(dir) {
            Ok(mut now) => {
                for (name, print) in &mut now {
                    if let Some(files) = self.secret_files.get(name) {
                        print.secrets = files.iter().map(|f| stat(f)).collect();
                    }
                }
                self.missing_reported = false;
                now
            }
            Err(error) => {
                if !self.missing_reported {
                    self.missing_reported = true;
                    changes.push(Change::Rejected {
                        name: String::new(),
                        path: dir.to_path_buf(),
                        error: format!("cannot read the plugins folder: {error}"),
                    });
                }
                // An unreadable folder removes nothing: a transient error must not
                // stop every plugin.
                return changes;
            }
        };
        for (name, print) in &now {
            let stable = first || self.last_seen.get(name) == Some(print);
            if !stable || self.reported.get(name) == Some(print) {
                continue;
            }
            let wasm_path = dir.join(format!("{name}.wasm"));
            let manifest_path = print
                .manifest
                .as_ref()
                .map(|_| dir.join(format!("{name}.toml")));
            // Remember the secret files this manifest names, and fingerprint them now, so
            // that a change to one of them (or a missing one appearing) is seen next time.
            let files = secret_files(dir, name, manifest_path.as_deref());
            let mut print = print.clone();
            print.secrets = files.iter().map(|f| stat(f)).collect();
            self.secret_files.insert(name.clone(), files);
            self.reported.insert(name.clone(), print.clone());
            changes.push(match read_plugin(&wasm_path, manifest_path.as_deref()) {
                Ok(entry) => Change::Upsert(Box::new(entry)),
                Err((path, error)) => Change::Rejected {
                    name: name.clone(),
                    path,
                    error,
                },
            });
        }
        for name in self.reported.keys() {
            if !now.contains_key(name) {
                changes.push(Change::Removed(name.clone()));
            }
        }
        self.reported.retain(|name, _| now.contains_key(name));
        self.secret_files.retain(|name, _| now.contains_key(name));
        self.last_seen = now;
        changes
    }
}

/// The plugins in `dir` with their fingerprints.
fn list(dir: &Path) -> std::io::Result<BTreeMap<String, Fingerprint>> {
    let mut wasm = BTreeMap::new();
    let mut toml = BTreeMap::new();
    for item in std::fs::read_dir(dir)? {
        let item = item?;
        let path = item.path();
        let (Some(stem), Some(ext)) = (
            path.file_stem().and_then(|s| s.to_str()),
            path.extension().and_then(|s| s.to_str()),
        ) else {
            continue;
        };
        let Ok(meta) = item.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let print = (meta.len(), meta.modified().ok());
        match ext {
            "wasm" => {
                wasm.insert(stem.to_string(), print);
            }
            "toml" => {
                toml.insert(stem.to_string(), print);
            }
            _ => {}
        }
    }
    Ok(wasm
        .into_iter()
        .map(|(name, print)| {
            let manifest = toml.get(&name).copied();
            (
                name,
                Fingerprint {
                    wasm: print,
                    manifest,
                    secrets: Vec::new(),
                },
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(changes: &[Change]) -> Vec<String> {
        changes
            .iter()
            .map(|c| match c {
                Change::Upsert(e) => format!("upsert {}", e.name),
                Change::Removed(n) => format!("removed {n}"),
                Change::Rejected { path, .. } => {
                    format!("rejected {}", path.file_name().unwrap().to_string_lossy())
                }
                Change::InitialScanComplete => "initial scan complete".to_string(),
            })
            .collect()
    }

    #[test]
    fn a_new_file_is_read_once_it_is_stable_and_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Watcher::default();
        assert!(w.poll(dir.path(), true).is_empty());
        std::fs::write(dir.path().join("a.wasm"), b"\0asm\x0d\0\x01\0").unwrap();
        // Seen for the first time: wait for the next poll.
        assert!(w.poll(dir.path(), false).is_empty());
        assert_eq!(names(&w.poll(dir.path(), false)), ["upsert a"]);
        assert!(w.poll(dir.path(), false).is_empty());
        std::fs::write(dir.path().join("a.toml"), b"bogus = 1").unwrap();
        assert!(w.poll(dir.path(), false).is_empty());
        let changes = w.poll(dir.path(), false);
        assert_eq!(names(&changes), ["rejected a.toml"]);
        // A rejection is not repeated while the files stay the same.
        assert!(w.poll(dir.path(), false).is_empty());
        std::fs::remove_file(dir.path().join("a.wasm")).unwrap();
        assert_eq!(names(&w.poll(dir.path(), false)), ["removed a"]);
    }

    #[test]
    fn secrets_are_read_at_load_stay_out_of_the_version_and_never_print() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("a.wasm");
        let toml = dir.path().join("a.toml");
        std::fs::write(&wasm, b"\0asm\x0d\0\x01\0").unwrap();
        std::fs::write(
            &toml,
            "[capabilities]\nsecrets = { API_TOKEN = \"secrets/token\" }\n",
        )
        .unwrap();

        // A missing secret file: the error names the key and the path.
        let (path, error) = read_plugin(&wasm, Some(&toml)).unwrap_err();
        assert_eq!(path, dir.path().join("secrets/token"));
        assert!(error.contains("capabilities.secrets.API_TOKEN"), "{error}");
        assert!(error.contains("secrets/token"), "{error}");

        std::fs::create_dir(dir.path().join("secrets")).unwrap();
        std::fs::write(dir.path().join("secrets/token"), "hunter2\n").unwrap();
        let entry = read_plugin(&wasm, Some(&toml)).unwrap();
        assert_eq!(
            entry.secrets.iter().collect::<Vec<_>>(),
            [("API_TOKEN", "hunter2")]
        );
        let debug = format!("{entry:?}");
        assert!(
            !debug.contains("hunter2") && debug.contains("API_TOKEN"),
            "{debug}"
        );
        let plain = read_plugin(&wasm, None).unwrap();
        assert_ne!(entry.digest, plain.digest);
        assert_eq!(
            plain.digest,
            format!("sha256:{}", hex::encode(Sha256::digest(&*plain.wasm)))
        );

        // Another value is the same version (the digest is replicated; the value must
        // not be, even hashed), but not the same files: the node loads it again.
        std::fs::write(dir.path().join("secrets/token"), "hunter3").unwrap();
        let changed = read_plugin(&wasm, Some(&toml)).unwrap();
        assert_eq!(changed.digest, entry.digest);
        assert!(!changed.same_files(&entry));
        // The same file written another way is the same version.
        std::fs::write(
            &toml,
            "[capabilities]\nsecrets = { API_TOKEN = \"./secrets//token\" }\n",
        )
        .unwrap();
        assert_eq!(
            read_plugin(&wasm, Some(&toml)).unwrap().digest,
            changed.digest
        );
        // Another path is another version.
        std::fs::write(dir.path().join("secrets/other"), "hunter3").unwrap();
        std::fs::write(
            &toml,
            "[capabilities]\nsecrets = { API_TOKEN = \"secrets/other\" }\n",
        )
        .unwrap();
        let moved = read_plugin(&wasm, Some(&toml)).unwrap();
        assert_ne!(moved.digest, changed.digest);
    }

    /// Issue 26 item 6: what the manifest gives an instance is part of its version, what
    /// only the placement reads is not, and a default written out changes nothing.
    #[test]
    fn a_changed_grant_limit_or_environment_is_another_version() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("a.wasm");
        let toml = dir.path().join("a.toml");
        std::fs::write(&wasm, b"\0asm\x0d\0\x01\0").unwrap();
        let plain = read_plugin(&wasm, None).unwrap().digest;
        let digest = |text: &str| {
            std::fs::write(&toml, text).unwrap();
            read_plugin(&wasm, Some(&toml)).unwrap().digest
        };
        let granted = "[capabilities]\nallowed_outbound_hosts = [\"http://a.example\", \"https://b.example\"]\nenv = { X = \"1\" }\n";
        let base = digest(granted);
        assert_ne!(base, plain);
        // Spec only, or defaults written out: the same version.
        assert_eq!(
            digest(&format!(
                "tickets = 3\nversion = \"2.0.0\"\n[placement]\nrequire = {{ zone = \"a\" }}\n[limits]\nmemory = \"64MiB\"\nmax_restarts = 3\n{granted}"
            )),
            base
        );
        // The hosts' order grants nothing.
        assert_eq!(
            digest(
                "[capabilities]\nallowed_outbound_hosts = [\"https://b.example\", \"http://a.example\"]\nenv = { X = \"1\" }\n"
            ),
            base
        );
        let others = [
            // A narrowed grant, another value, another variable, another limit.
            "[capabilities]\nallowed_outbound_hosts = [\"http://a.example\"]\nenv = { X = \"1\" }\n",
            "[capabilities]\nallowed_outbound_hosts = [\"http://a.example\", \"https://b.example\"]\nenv = { X = \"2\" }\n",
            "[capabilities]\nallowed_outbound_hosts = [\"http://a.example\", \"https://b.example\"]\nenv = { Y = \"1\" }\n",
            &format!("[limits]\nmemory = \"32MiB\"\n{granted}"),
            &format!("[limits]\nstop_grace = \"1s\"\n{granted}"),
            &format!("[limits]\ncleanup_timeout = \"1s\"\n{granted}"),
            &format!("[limits]\nmax_restarts = 4\n{granted}"),
            &format!("[limits]\nrestart_window = \"1m\"\n{granted}"),
        ];
        // Beside 0.2.0 (version 6) the wasm's digest alone, as 0.2.0 names it; in a new
        // cluster (0) and from the raise (7) the whole version.
        let entry = read_plugin(&wasm, Some(&toml)).unwrap();
        assert_eq!(entry.digest_at(6), plain);
        assert_eq!(entry.digest_at(0), entry.digest);
        assert_eq!(entry.digest_at(crate::version::INSTALL_ORDER), entry.digest);
        let mut seen = std::collections::BTreeSet::from([base, plain]);
        for text in others {
            assert!(seen.insert(digest(text)), "not a new version: {text}");
        }
    }

    #[test]
    fn a_state_per_slot_is_another_version_of_the_same_wasm() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("a.wasm");
        let toml = dir.path().join("a.toml");
        std::fs::write(&wasm, b"\0asm\x0d\0\x01\0").unwrap();
        let plain = read_plugin(&wasm, None).unwrap();
        std::fs::write(&toml, "state = \"shared\"\n").unwrap();
        let shared = read_plugin(&wasm, Some(&toml)).unwrap();
        std::fs::write(&toml, "state = \"per-slot\"\n").unwrap();
        let per_slot = read_plugin(&wasm, Some(&toml)).unwrap();
        // A shared state's digest is what it always was; a per-slot one's is another.
        assert_eq!(shared.digest, plain.digest);
        assert_ne!(per_slot.digest, plain.digest);
    }

    #[test]
    fn a_changed_or_appearing_secret_file_is_a_change() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.wasm"), b"\0asm\x0d\0\x01\0").unwrap();
        std::fs::write(
            dir.path().join("a.toml"),
            "[capabilities]\nsecrets = { KEY = \"key.txt\" }\n",
        )
        .unwrap();
        let mut w = Watcher::default();
        assert_eq!(names(&w.poll(dir.path(), true)), ["rejected key.txt"]);
        assert!(w.poll(dir.path(), false).is_empty());
        std::fs::write(dir.path().join("key.txt"), "one").unwrap();
        assert!(w.poll(dir.path(), false).is_empty());
        let changes = w.poll(dir.path(), false);
        assert_eq!(names(&changes), ["upsert a"]);
        let Change::Upsert(first) = &changes[0] else {
            unreachable!()
        };
        assert!(w.poll(dir.path(), false).is_empty());
        std::fs::write(dir.path().join("key.txt"), "second").unwrap();
        assert!(w.poll(dir.path(), false).is_empty());
        let changes = w.poll(dir.path(), false);
        assert_eq!(names(&changes), ["upsert a"]);
        let Change::Upsert(second) = &changes[0] else {
            unreachable!()
        };
        assert!(!first.same_files(second));
        assert!(w.poll(dir.path(), false).is_empty());
    }

    /// Far longer than any bound below: a change seen within a bound was not seen by
    /// the slow poll.
    const NEVER: Duration = Duration::from_secs(600);
    /// Generous bound for a change to be reported.
    const WAIT: Duration = Duration::from_secs(20);

    /// A folder watch on `dir` with the given timings, past its initial scan.
    async fn watching(
        dir: &Path,
        options: WatchOptions,
    ) -> (mpsc::Receiver<Change>, tokio::task::JoinHandle<u64>) {
        let (tx, mut rx) = mpsc::channel(64);
        let task = tokio::spawn(watch_with(dir.to_path_buf(), tx, options));
        let change = next(&mut rx).await;
        assert!(matches!(change, Change::InitialScanComplete), "{change:?}");
        (rx, task)
    }

    async fn next(rx: &mut mpsc::Receiver<Change>) -> Change {
        tokio::time::timeout(WAIT, rx.recv())
            .await
            .expect("a change is reported within the bound")
            .expect("the watch is running")
    }

    /// Installs `name.wasm` the safe way: written beside, renamed in.
    fn install(dir: &Path, name: &str, bytes: &[u8]) {
        let temp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&temp, bytes).unwrap();
        std::fs::rename(&temp, dir.join(format!("{name}.wasm"))).unwrap();
    }

    /// A look reads every new plugin's files, 10,000 of them in a large folder: that must
    /// not hold the node's runtime, which also runs Raft's heartbeats and the lease
    /// renewals. The look is made to wait on a file read (a secret that is a named pipe,
    /// nobody writing yet), on a runtime with one thread; another task on it must still run,
    /// and only then is the pipe written.
    #[test]
    fn a_look_at_the_folder_does_not_hold_the_runtime() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.wasm"), b"\0asm\x0d\0\x01\0").unwrap();
        std::fs::write(
            dir.path().join("a.toml"),
            "[capabilities]\nsecrets = { TOKEN = \"token\" }\n",
        )
        .unwrap();
        let pipe = dir.path().join("token");
        let c_path = std::ffi::CString::new(pipe.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);

        let (ran_tx, ran_rx) = std::sync::mpsc::channel();
        // Writes the pipe once a task ran beside the look, or after the bound (so the test
        // ends either way), and says which.
        let writer = std::thread::spawn(move || {
            let ran = ran_rx.recv_timeout(WAIT).is_ok();
            std::fs::write(&pipe, "hunter2\n").unwrap();
            ran
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let entry = runtime.block_on(async {
            let (tx, mut rx) = mpsc::channel(64);
            let _watch = tokio::spawn(watch_with(
                dir.path().to_path_buf(),
                tx,
                WatchOptions::default(),
            ));
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                let _ = ran_tx.send(());
            });
            next(&mut rx).await
        });
        assert!(
            writer.join().unwrap(),
            "no other task ran while the look at the folder waited on a file"
        );
        let Change::Upsert(entry) = entry else {
            panic!("expected an upsert, got {entry:?}")
        };
        assert_eq!(
            entry.secrets.iter().collect::<Vec<_>>(),
            [("TOKEN", "hunter2")]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn inotify_reports_changes_long_before_the_slow_poll() {
        let dir = tempfile::tempdir().unwrap();
        let options = WatchOptions {
            poll: NEVER,
            ..WatchOptions::default()
        };
        let (mut rx, _task) = watching(dir.path(), options).await;

        install(dir.path(), "a", b"one");
        let Change::Upsert(entry) = next(&mut rx).await else {
            panic!("expected an upsert")
        };
        assert_eq!((entry.name.as_str(), &*entry.wasm), ("a", &b"one"[..]));

        // Rewritten in place, then removed.
        std::fs::write(dir.path().join("a.wasm"), b"two!").unwrap();
        let Change::Upsert(entry) = next(&mut rx).await else {
            panic!("expected an upsert")
        };
        assert_eq!(&*entry.wasm, b"two!");
        std::fs::remove_file(dir.path().join("a.wasm")).unwrap();
        assert!(matches!(next(&mut rx).await, Change::Removed(n) if n == "a"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_inotify_the_slow_poll_sees_changes() {
        let dir = tempfile::tempdir().unwrap();
        let options = WatchOptions {
            poll: Duration::from_millis(300),
            inotify: false,
            ..WatchOptions::default()
        };
        let (mut rx, _task) = watching(dir.path(), options).await;
        install(dir.path(), "a", b"one");
        assert!(matches!(next(&mut rx).await, Change::Upsert(e) if e.name == "a"));
        std::fs::remove_file(dir.path().join("a.wasm")).unwrap();
        assert!(matches!(next(&mut rx).await, Change::Removed(n) if n == "a"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_folder_missing_at_start_is_watched_once_it_exists() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("plugins");
        let (tx, mut rx) = mpsc::channel(64);
        let options = WatchOptions {
            poll: Duration::from_millis(300),
            ..WatchOptions::default()
        };
        let _task = tokio::spawn(watch_with(dir.clone(), tx, options));
        assert!(matches!(next(&mut rx).await, Change::Rejected { path, .. } if path == dir));
        assert!(matches!(next(&mut rx).await, Change::InitialScanComplete));
        std::fs::create_dir(&dir).unwrap();
        install(&dir, "a", b"one");
        assert!(matches!(next(&mut rx).await, Change::Upsert(e) if e.name == "a"));
        install(&dir, "b", b"two");
        assert!(matches!(next(&mut rx).await, Change::Upsert(e) if e.name == "b"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_being_written_is_not_read_until_it_stops_changing() {
        let dir = tempfile::tempdir().unwrap();
        // A long window, so that only a writer stalled for half a second could be read
        // early; the writer below writes every 10 ms.
        let options = WatchOptions {
            settle: Duration::from_millis(500),
            poll: NEVER,
            inotify: true,
        };
        let (mut rx, _task) = watching(dir.path(), options).await;
        let path = dir.path().join("a.wasm");
        let mut file = std::fs::File::create(&path).unwrap();
        let mut written = Vec::new();
        for chunk in 0..150u32 {
            use std::io::Write as _;
            let bytes = chunk.to_le_bytes();
            file.write_all(&bytes).unwrap();
            written.extend_from_slice(&bytes);
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert!(
                rx.try_recv().is_err(),
                "nothing is read while the file grows (chunk {chunk})"
            );
        }
        drop(file);
        let Change::Upsert(entry) = next(&mut rx).await else {
            panic!("expected an upsert")
        };
        assert_eq!(&*entry.wasm, &written[..], "the whole file was read");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flood_of_events_costs_at_most_one_look_per_settle() {
        let dir = tempfile::tempdir().unwrap();
        let settle = Duration::from_millis(50);
        let options = WatchOptions {
            settle,
            poll: NEVER,
            inotify: true,
        };
        let began = std::time::Instant::now();
        let (mut rx, task) = watching(dir.path(), options).await;
        // A writer appending to a log file in the folder as fast as it can.
        let noise = dir.path().join("noise.log");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = std::thread::spawn({
            let stop = stop.clone();
            move || {
                use std::io::Write as _;
                let mut file = std::fs::File::create(noise).unwrap();
                let mut writes = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    file.write_all(b"x").unwrap();
                    writes += 1;
                }
                writes
            }
        });
        // Changes are still seen in the flood.
        install(dir.path(), "a", b"one");
        assert!(matches!(next(&mut rx).await, Change::Upsert(e) if e.name == "a"));
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let writes = writer.join().unwrap();
        drop(rx);
        let looks = tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
        let elapsed = began.elapsed();
        let bound = (elapsed.as_millis() / settle.as_millis()) as u64 + 2;
        assert!(writes > 1000, "a flood: {writes} writes");
        assert!(
            looks <= bound,
            "{looks} looks in {elapsed:?} of {writes} writes (at most {bound})"
        );
    }

    #[test]
    fn a_missing_folder_is_reported_once_and_removes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let plugins = dir.path().join("plugins");
        std::fs::create_dir(&plugins).unwrap();
        std::fs::write(plugins.join("a.wasm"), b"x").unwrap();
        let mut w = Watcher::default();
        assert_eq!(names(&w.poll(&plugins, true)), ["upsert a"]);
        std::fs::rename(&plugins, dir.path().join("elsewhere")).unwrap();
        assert_eq!(names(&w.poll(&plugins, false)), ["rejected plugins"]);
        assert!(w.poll(&plugins, false).is_empty());
    }
}

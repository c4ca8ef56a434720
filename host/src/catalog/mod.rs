//! The plugins folder: `<name>.wasm` plus an optional `<name>.toml` manifest.
//!
//! The folder is polled every [`POLL_INTERVAL`]. A plugin is read only once its files
//! have kept the same size and modification time across two polls, so a file still being
//! copied in is not mistaken for a bad one (installing by writing elsewhere and renaming
//! in is still the way to be sure). Each plugin is then reported as an [`Change`]:
//! a new or changed plugin (`Upsert`), a removed one (`Removed`), or one whose files are
//! bad (`Rejected`, with the path and what is wrong). A rejected plugin is reported once
//! per version of its files, not at every poll.
//!
//! This module reads files and parses manifests. It does not compile wasm (the runtime
//! does) and does not decide what runs (the node does).

pub mod capabilities;
pub mod manifest;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

pub use manifest::Manifest;

/// How often the folder is looked at.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// One plugin as found in the folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The file stem: `heartbeat` for `heartbeat.wasm`.
    pub name: String,
    pub wasm_path: PathBuf,
    /// The wasm bytes, read once so that what is hashed is what is compiled.
    pub wasm: Arc<[u8]>,
    /// What identifies this version of the plugin: `sha256:<hex>` of the wasm bytes, or,
    /// when the manifest names secrets, of the wasm bytes' digest followed by every secret
    /// name and value ([`version_digest`]). So a changed secret file is a new version, rolled
    /// out by handover like a changed wasm file.
    pub digest: String,
    pub manifest: Manifest,
    /// The values of the manifest's `secrets`, read when the plugin was read.
    pub secrets: Secrets,
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

/// The digest that names a plugin version (see [`Entry::digest`]). Each field is
/// length-prefixed, so no two different sets of secrets hash the same input.
pub fn version_digest(wasm: &[u8], secrets: &Secrets) -> String {
    let wasm_digest = Sha256::digest(wasm);
    if secrets.is_empty() {
        return format!("sha256:{}", hex::encode(wasm_digest));
    }
    let mut hash = Sha256::new();
    hash.update(b"tenure plugin version with secrets\0");
    hash.update(wasm_digest);
    for (name, value) in secrets.iter() {
        for field in [name.as_bytes(), value.as_bytes()] {
            hash.update((field.len() as u64).to_le_bytes());
            hash.update(field);
        }
    }
    format!("sha256:{}", hex::encode(hash.finalize()))
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
    Ok(Entry {
        digest: version_digest(&wasm, &secrets),
        name,
        wasm_path: wasm_path.to_path_buf(),
        wasm,
        manifest,
        secrets,
    })
}

/// Watches `dir` until `changes` is closed. The first poll reports every plugin present,
/// followed by [`Change::InitialScanComplete`].
pub async fn watch(dir: PathBuf, changes: mpsc::Sender<Change>) {
    let mut watcher = Watcher::default();
    let mut first = true;
    loop {
        let mut batch = watcher.poll(&dir, first);
        if first {
            batch.push(Change::InitialScanComplete);
            first = false;
        }
        for change in batch {
            if changes.send(change).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(POLL_INTERVAL).await;
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
    fn secrets_are_read_at_load_make_the_version_and_never_print() {
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

        // Another value is another version.
        std::fs::write(dir.path().join("secrets/token"), "hunter3").unwrap();
        let changed = read_plugin(&wasm, Some(&toml)).unwrap();
        assert_ne!(changed.digest, entry.digest);
        assert!(!changed.digest.contains("hunter"));
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
        assert_ne!(first.digest, second.digest);
        assert!(w.poll(dir.path(), false).is_empty());
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

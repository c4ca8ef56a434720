//! The compile cache: compiled components on disk, so that a restart never recompiles.
//!
//! The key is the sha256 of the wasm bytes plus a digest of the engine's
//! `precompile_compatibility_hash` (wasmtime version, compiler settings, target CPU
//! features). A compiled component is native code that wasmtime loads without checking
//! it, so an entry is only trusted if this node wrote it: each file is
//! `MAGIC || HMAC-SHA256(HMAC-SHA256(key, file name), body) || body`, where the key is a secret
//! made once per node (`DATA_DIR/cache.key`, 0600, beside the `cache/` dir, so a copied
//! or shared cache dir does not carry it) and the body is `Component::serialize`'s output.
//! The file is read into memory once and the tag checked (in constant time) before
//! wasmtime sees a byte, so a file swapped in between cannot slip through. Binding the
//! name means a genuine entry of another component renamed over this one fails too.
//!
//! An entry that fails (foreign, tampered, written by an older build, truncated, or
//! refused by the engine) is deleted, reported with one `cache.error` line, and the
//! component compiled again. Files are written owner-only to a temporary name, flushed
//! and renamed, so a crash never leaves a half-written entry under a real key; the
//! temporary files of a writer that died are removed when the cache is opened. On a node
//! the writer is the compiler process (`compiler.rs`), which gets the key on its stdin.
//!
//! Not covered: someone who can read the key (the node's user, or root) can forge
//! entries; the cache protects against files planted or copied into `cache/`, not
//! against the node's own account.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use ring::hmac;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::{LoadError, RuntimeError, compile};

/// Where a plugin's compiled code came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheUse {
    /// Loaded from the cache: no compilation.
    Hit,
    /// Compiled, then stored in the cache.
    Miss,
    /// Compiled; no cache in use.
    Off,
    /// The component another loaded plugin file with the same wasm already holds: no
    /// compilation, no second copy of its code.
    Shared,
}

impl CacheUse {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheUse::Hit => "hit",
            CacheUse::Miss => "miss",
            CacheUse::Off => "off",
            CacheUse::Shared => "shared",
        }
    }
}

pub(super) struct CompileCache {
    dir: PathBuf,
    engine_key: String,
    /// The node's cache key: authenticates the entries it wrote. Kept raw as well, to
    /// hand to the compiler process (through its stdin, never its arguments).
    key: hmac::Key,
    raw_key: [u8; 32],
}

/// Hex sha256 of `bytes`.
pub(super) fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl CompileCache {
    /// Opens the cache in `dir` (made 0700 if missing), with its key in `dir` + `.key`.
    /// Temporary files of writers that were killed before their rename are removed.
    pub(super) fn open(dir: &Path, engine: &Engine) -> Result<Self, RuntimeError> {
        crate::private_files::create_dir(dir).map_err(|source| RuntimeError::Cache {
            path: dir.to_path_buf(),
            source,
        })?;
        crate::private_files::remove_dead_temps(dir);
        let key_path = dir.with_extension("key");
        let raw_key =
            crate::private_files::secret(&key_path).map_err(|why| RuntimeError::Cache {
                path: key_path.clone(),
                source: std::io::Error::other(why),
            })?;
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hex::encode(&hasher.0.finalize()[..8]);
        Ok(Self {
            dir: dir.to_path_buf(),
            engine_key,
            key: hmac::Key::new(hmac::HMAC_SHA256, &raw_key),
            raw_key,
        })
    }

    /// The secret that authenticates entries, for the compiler process.
    pub(super) fn raw_key(&self) -> &[u8; 32] {
        &self.raw_key
    }

    /// Where the entry for the wasm with hex sha256 `digest` lives.
    pub(super) fn path_of(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}-{}.cwasm", self.engine_key))
    }

    /// The cached component for `digest`, if there is a usable entry. An unusable one is
    /// deleted and reported.
    pub(super) fn get(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.path_of(digest);
        match std::fs::read(&path) {
            Ok(file) => match load(engine, &self.key, &entry_name(&path), &file) {
                Ok(component) => return Some(component),
                Err(why) => {
                    tracing::warn!(event = crate::events::CACHE_ERROR, path = %path.display(), error = %why, "discarding an unusable compile cache entry; compiling again");
                    let _ = std::fs::remove_file(&path);
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(event = crate::events::CACHE_ERROR, path = %path.display(), error = %e, "cannot read a compile cache entry; compiling again");
            }
        }
        None
    }

    /// The cached component, or one compiled here and stored (for callers that compile
    /// in process: `tenure plugin check`, tests and benchmarks).
    pub(super) fn get_or_compile(
        &self,
        engine: &Engine,
        digest: &str,
        wasm: &[u8],
    ) -> Result<(Component, CacheUse), LoadError> {
        if let Some(component) = self.get(engine, digest) {
            return Ok((component, CacheUse::Hit));
        }
        let component = compile(engine, wasm)?;
        let path = self.path_of(digest);
        if let Err(err) = store(&self.raw_key, &path, &component) {
            // The plugin still runs; only the next start pays for compiling again.
            tracing::warn!(event = crate::events::CACHE_ERROR, path = %path.display(), error = %err, "cannot write the compile cache");
        }
        Ok((component, CacheUse::Miss))
    }
}

/// The name an entry's tag is bound to: its file name.
fn entry_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The component in `file` (an entry named `name`) if `key` authenticates it and the
/// engine accepts it.
fn load(engine: &Engine, key: &hmac::Key, name: &str, file: &[u8]) -> Result<Component, String> {
    let body = file
        .strip_prefix(MAGIC)
        .filter(|rest| rest.len() >= TAG_LEN)
        .ok_or("not an entry written by this version of tenure")?;
    let (tag, body) = body.split_at(TAG_LEN);
    hmac::verify(&entry_key(key, name), body, tag)
        .map_err(|_| "not authenticated by this node's cache key (cache.key)")?;
    // SAFETY: the bytes are exactly what `Component::serialize` wrote under this name
    // for a holder of this node's key (the tag above proves it, and they are checked in
    // memory, not re-read), for an engine with this compatibility hash (it is in the
    // name); deserialize checks the header and engine settings again.
    unsafe { Component::deserialize(engine, body) }.map_err(|e| format!("{e:#}"))
}

/// The key that authenticates the entry named `name`: derived from the node's cache key
/// and the name, so an entry is valid under its own name only.
fn entry_key(key: &hmac::Key, name: &str) -> hmac::Key {
    let derived = hmac::sign(key, name.as_bytes());
    hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref())
}

/// Writes `component` as the entry at `path`, authenticated with `raw_key`: atomically
/// (a temporary file renamed), so a writer killed midway leaves no entry. The compiler
/// process calls it too.
pub(super) fn store(raw_key: &[u8; 32], path: &Path, component: &Component) -> anyhow::Result<()> {
    let body = component
        .serialize()
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, raw_key);
    let tag = hmac::sign(&entry_key(&key, &entry_name(path)), &body);
    let mut file = Vec::with_capacity(MAGIC.len() + TAG_LEN + body.len());
    file.extend_from_slice(MAGIC);
    file.extend_from_slice(tag.as_ref());
    file.extend_from_slice(&body);
    crate::private_files::write_atomic(path, &file)?;
    Ok(())
}

/// The first bytes of every entry (the format's version).
const MAGIC: &[u8] = b"tenure-cache-1\n";
/// Length of an HMAC-SHA256 tag.
const TAG_LEN: usize = 32;

/// Feeds `Hash` input into sha256, so the key is stable across processes (unlike
/// `DefaultHasher`, whose output is only promised within one).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().expect("sha256 has 32 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two different, valid components: an empty one and one holding an empty module.
    fn two_components() -> (Vec<u8>, Vec<u8>) {
        let empty = wasm_encoder::Component::new().finish();
        let mut with_module = wasm_encoder::Component::new();
        with_module.section(&wasm_encoder::ModuleSection(&wasm_encoder::Module::new()));
        (empty, with_module.finish())
    }

    fn engine() -> Engine {
        Engine::new(&super::super::engine_config(false)).unwrap()
    }

    /// The one entry file in `dir` for `wasm`.
    fn entry_of(dir: &Path, wasm: &[u8]) -> PathBuf {
        let prefix = digest(wasm);
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&prefix)
            })
            .expect("an entry for the component")
    }

    #[test]
    fn a_cache_entry_replaced_by_another_valid_component_is_not_loaded() {
        let engine = engine();
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("cache");
        let cache = CompileCache::open(&cache_dir, &engine).unwrap();
        let (a, b) = two_components();
        let use_of = |wasm: &[u8]| {
            cache
                .get_or_compile(&engine, &digest(wasm), wasm)
                .unwrap()
                .1
        };
        assert_eq!(use_of(&a), CacheUse::Miss);
        assert_eq!(use_of(&b), CacheUse::Miss);
        assert_eq!(use_of(&a), CacheUse::Hit, "a genuine entry is loaded");

        // B's entry, valid for B, under A's name.
        let (entry_a, entry_b) = (entry_of(&cache_dir, &a), entry_of(&cache_dir, &b));
        std::fs::copy(&entry_b, &entry_a).unwrap();
        assert_eq!(
            use_of(&a),
            CacheUse::Miss,
            "another component's entry was loaded"
        );
        assert_eq!(use_of(&a), CacheUse::Hit, "the entry was written again");

        // A bare serialized component (what an attacker can make), under A's name.
        let foreign = Component::new(&engine, &b).unwrap().serialize().unwrap();
        std::fs::write(&entry_a, foreign).unwrap();
        assert_eq!(
            use_of(&a),
            CacheUse::Miss,
            "a foreign serialized component was loaded"
        );
    }

    #[test]
    fn a_tampered_cache_entry_is_not_loaded() {
        let engine = engine();
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("cache");
        let cache = CompileCache::open(&cache_dir, &engine).unwrap();
        let (_, wasm) = two_components();
        let use_of = || {
            cache
                .get_or_compile(&engine, &digest(&wasm), &wasm)
                .unwrap()
                .1
        };
        assert_eq!(use_of(), CacheUse::Miss);
        let entry = entry_of(&cache_dir, &wasm);
        let mut bytes = std::fs::read(&entry).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        std::fs::write(&entry, &bytes).unwrap();
        assert_eq!(use_of(), CacheUse::Miss, "a tampered entry was loaded");
        assert_eq!(use_of(), CacheUse::Hit);
    }

    #[test]
    fn the_cache_and_its_key_are_private_files() {
        use std::os::unix::fs::PermissionsExt;
        let engine = engine();
        let dir = tempfile::tempdir().unwrap();
        let cache_dir = dir.path().join("cache");
        let cache = CompileCache::open(&cache_dir, &engine).unwrap();
        let (wasm, _) = two_components();
        cache
            .get_or_compile(&engine, &digest(&wasm), &wasm)
            .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&cache_dir), 0o700);
        assert_eq!(mode(&dir.path().join("cache.key")), 0o600);
        assert_eq!(mode(&entry_of(&cache_dir, &wasm)), 0o600);
    }
}

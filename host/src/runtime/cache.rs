//! The compile cache: compiled components on disk, so that a restart never recompiles.
//!
//! The key is the sha256 of the wasm bytes plus a digest of the engine's
//! `precompile_compatibility_hash` (wasmtime version, compiler settings, target CPU
//! features). A file that no longer loads (a truncated write, a foreign file) is removed
//! and the component compiled again. Files are written to a temporary name and renamed,
//! so a crash never leaves a half-written entry under a real key.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

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
}

impl CacheUse {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheUse::Hit => "hit",
            CacheUse::Miss => "miss",
            CacheUse::Off => "off",
        }
    }
}

pub(super) struct CompileCache {
    dir: PathBuf,
    engine_key: String,
}

/// Hex sha256 of `bytes`.
pub(super) fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl CompileCache {
    pub(super) fn open(dir: &Path, engine: &Engine) -> Result<Self, RuntimeError> {
        std::fs::create_dir_all(dir).map_err(|source| RuntimeError::Cache {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut hasher = Sha256Hasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = hex::encode(&hasher.0.finalize()[..8]);
        Ok(Self {
            dir: dir.to_path_buf(),
            engine_key,
        })
    }

    pub(super) fn get_or_compile(
        &self,
        engine: &Engine,
        digest: &str,
        wasm: &[u8],
    ) -> Result<(Component, CacheUse), LoadError> {
        let path = self.dir.join(format!("{digest}-{}.cwasm", self.engine_key));
        if path.exists() {
            // SAFETY: the file was written by `Component::serialize` for an engine with
            // this compatibility hash (it is in the name), into the node's own data
            // directory. deserialize_file checks the header and engine settings again;
            // a file that fails is deleted below and recompiled.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(component) => return Ok((component, CacheUse::Hit)),
                Err(err) => {
                    tracing::warn!(event = crate::events::CACHE_ERROR, path = %path.display(), error = %err, "discarding an unusable compile cache entry");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let component = compile(engine, wasm)?;
        if let Err(err) = self.store(&path, &component) {
            // The plugin still runs; only the next start pays for compiling again.
            tracing::warn!(event = crate::events::CACHE_ERROR, path = %path.display(), error = %err, "cannot write the compile cache");
        }
        Ok((component, CacheUse::Miss))
    }

    fn store(&self, path: &Path, component: &Component) -> anyhow::Result<()> {
        let bytes = component
            .serialize()
            .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    }
}

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

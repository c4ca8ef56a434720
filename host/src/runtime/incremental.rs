//! The incremental compilation cache: Cranelift's compiled functions on disk, so that a
//! component sharing most of its code with one compiled before compiles only the rest.
//!
//! A Python or JavaScript plugin embeds its interpreter (CPython, SpiderMonkey): two
//! Python plugins, or two versions of one, share nearly all their functions. wasmtime's
//! `Config::enable_incremental_compilation` asks a [`CacheStore`] for each function by a
//! key Cranelift computes (a SHA-256 of the function's IR and the target's flags, so a
//! key never matches across compiler versions or CPUs), and stores what it compiled on a
//! miss. This module is that store, kept in `DATA_DIR/incremental/` (0700).
//!
//! **Packs.** One compile asks for some 20,000 functions; a file per function would cost
//! 20,000 opens per compile. So the store is a folder of *packs*: each compile that
//! compiled something writes one new pack holding what it compiled, atomically (a
//! temporary file renamed, so a reader never sees half a pack, and children compiling side
//! by side never write the same file). A pack is never changed after its rename. A compile
//! reads every pack into memory first (the size cap bounds that), indexes their keys, and
//! answers Cranelift from memory.
//!
//! **Authenticated like the compile cache.** A value is machine code that wasmtime links
//! without checking it against the wasm, so a pack is only used if this node wrote it:
//! `MAGIC || HMAC-SHA256(HMAC-SHA256(key, "incremental/" + file name), body) || body`, the
//! key being the compile cache's (`DATA_DIR/cache.key`, handed to the compiler process on
//! its stdin). A pack is checked once, in memory, before the first value is taken from it;
//! a pack that fails (tampered, truncated, foreign, renamed, of another format) is deleted,
//! reported, and its functions compiled again. Its keys are looked up before the check,
//! but nothing of it is handed to Cranelift unless the check passes.
//!
//! **Least recently used goes first.** A compile that took functions from a pack sets the
//! pack's modification time to now; a new pack is born now. When the packs together
//! exceed the cap (`[compile] incremental_cache_mib`), the packs with the oldest times are
//! deleted until they fit. "Used" means used by a compile: a plugin loaded from the compile
//! cache does not touch the packs it was compiled from.
//!
//! Caveats: wasmtime 48 gives some functions a different key on each compile, even for
//! the same bytes (500 to 1,100 of a Python or JavaScript component's 20,000, BENCHMARKS.md),
//! so those are compiled every time and each compile adds a small pack of them. Translating the wasm
//! to Cranelift IR, which the key is computed from, runs for every function, hit or not.
//!
//! Not done: sharing packs between nodes. Compiled code is never taken from a peer (it
//! cannot be checked against the wasm without compiling it, and a member certificate must
//! not be a way to run code on other nodes); each node compiles, and this cache makes that
//! cheap.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use ring::hmac;
use wasmtime::CacheStore;

/// The first bytes of every pack (the format's version).
const MAGIC: &[u8] = b"tenure-incremental-1\n";
/// Length of an HMAC-SHA256 tag.
const TAG_LEN: usize = 32;
/// The file name ending of a pack.
const PACK_SUFFIX: &str = ".pack";

/// The store one compile uses: every pack read at [`IncrementalCache::open`], the
/// functions compiled since, and what to report.
pub(super) struct IncrementalCache {
    dir: PathBuf,
    key: hmac::Key,
    /// The packs' bytes, their checks and whether this compile used them.
    packs: Vec<Pack>,
    /// Key → (pack, value's range in the pack's file).
    index: HashMap<Vec<u8>, (usize, std::ops::Range<usize>)>,
    /// What Cranelift compiled and asked to keep, by key.
    new: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
    /// The cap on all packs together, in bytes.
    cap: u64,
    hits: AtomicUsize,
    repeats: AtomicUsize,
    misses: AtomicUsize,
    /// Packs found unusable: (path, why), for the compile's report.
    discarded: Mutex<Vec<(PathBuf, String)>>,
}

struct Pack {
    path: PathBuf,
    file: Vec<u8>,
    /// Whether the tag is valid, decided at the first lookup that lands here.
    authentic: OnceLock<bool>,
    used: AtomicBool,
}

/// What one compile got from the cache and what it wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Functions taken from the packs of earlier compiles.
    pub hits: usize,
    /// Functions identical to one compiled earlier in this compile, taken from it.
    pub repeats: usize,
    /// Functions compiled.
    pub misses: usize,
    /// Bytes all packs take after this compile's pack and eviction.
    pub bytes: u64,
    /// Packs deleted to stay under the cap.
    pub evicted: usize,
    /// Packs found unusable and deleted, with why.
    pub discarded: Vec<(PathBuf, String)>,
}

impl std::fmt::Debug for IncrementalCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncrementalCache")
            .field("dir", &self.dir)
            .field("packs", &self.packs.len())
            .field("cap", &self.cap)
            .finish_non_exhaustive()
    }
}

impl IncrementalCache {
    /// Reads every pack in `dir` (made 0700 if missing), authenticated with `raw_key`
    /// when first used. Packs that cannot be parsed are deleted and reported; the
    /// temporary files of writers that were killed before their rename are removed.
    pub(super) fn open(dir: &Path, raw_key: &[u8; 32], cap: u64) -> std::io::Result<Self> {
        crate::private_files::create_dir(dir)?;
        crate::private_files::remove_dead_temps(dir);
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir)?.flatten() {
            let path = entry.path();
            if !is_pack(&path) {
                continue;
            }
            // A pack evicted by another compile meanwhile is simply not there.
            let Ok(meta) = entry.metadata() else { continue };
            found.push((meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), path));
        }
        // Most recently used first: a key in several packs is taken from the freshest,
        // so the others age out.
        found.sort_by_key(|p| std::cmp::Reverse(p.0));
        let mut cache = Self {
            dir: dir.to_path_buf(),
            key: hmac::Key::new(hmac::HMAC_SHA256, raw_key),
            packs: Vec::new(),
            index: HashMap::new(),
            new: Mutex::default(),
            cap,
            hits: AtomicUsize::new(0),
            repeats: AtomicUsize::new(0),
            misses: AtomicUsize::new(0),
            discarded: Mutex::default(),
        };
        for (_, path) in found {
            let file = match std::fs::read(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let entries = match parse(&file) {
                Ok(entries) => entries,
                Err(why) => {
                    cache.discard(&path, why.to_string());
                    continue;
                }
            };
            let at = cache.packs.len();
            for (key, value) in entries {
                cache.index.entry(file[key].to_vec()).or_insert((at, value));
            }
            cache.packs.push(Pack {
                path,
                file,
                authentic: OnceLock::new(),
                used: AtomicBool::new(false),
            });
        }
        Ok(cache)
    }

    /// Writes what this compile compiled as a new pack, marks the packs it used as
    /// used now, and deletes the least recently used packs beyond the cap. Errors are
    /// the caller's to report: the compile itself succeeded.
    pub(super) fn finish(&self) -> std::io::Result<Outcome> {
        let new = std::mem::take(&mut *self.new.lock().unwrap_or_else(|e| e.into_inner()));
        if !new.is_empty() {
            let path = self.dir.join(format!("{}{PACK_SUFFIX}", fresh_name()));
            let body = encode(&new);
            let tag = hmac::sign(&pack_key(&self.key, &path), &body);
            let mut file = Vec::with_capacity(MAGIC.len() + TAG_LEN + body.len());
            file.extend_from_slice(MAGIC);
            file.extend_from_slice(tag.as_ref());
            file.extend_from_slice(&body);
            crate::private_files::write_atomic(&path, &file)?;
        }
        let now = SystemTime::now();
        for pack in self.packs.iter().filter(|p| p.used.load(Ordering::Relaxed)) {
            // Gone meanwhile (another compile evicted it): nothing to mark.
            if let Ok(file) = std::fs::File::options().write(true).open(&pack.path) {
                let _ = file.set_modified(now);
            }
        }
        let (bytes, evicted) = evict(&self.dir, self.cap)?;
        Ok(Outcome {
            hits: self.hits.load(Ordering::Relaxed),
            repeats: self.repeats.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes,
            evicted,
            discarded: std::mem::take(
                &mut *self.discarded.lock().unwrap_or_else(|e| e.into_inner()),
            ),
        })
    }

    fn discard(&self, path: &Path, why: String) {
        let _ = std::fs::remove_file(path);
        self.discarded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((path.to_path_buf(), why));
    }

    /// Whether `pack`'s tag is valid (checked once; a failing pack is deleted).
    fn authentic(&self, pack: &Pack) -> bool {
        *pack.authentic.get_or_init(|| {
            let body = &pack.file[MAGIC.len()..];
            let (tag, body) = body.split_at(TAG_LEN);
            let valid = hmac::verify(&pack_key(&self.key, &pack.path), body, tag).is_ok();
            if !valid {
                self.discard(
                    &pack.path,
                    "not authenticated by this node's cache key (cache.key)".into(),
                );
            }
            valid
        })
    }
}

impl CacheStore for IncrementalCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let found = self
            .index
            .get(key)
            .and_then(|(at, range)| {
                let pack = &self.packs[*at];
                self.authentic(pack).then(|| {
                    pack.used.store(true, Ordering::Relaxed);
                    Cow::Borrowed(&pack.file[range.clone()])
                })
            })
            .map(|value| (value, &self.hits))
            // A component holds many identical functions (a Python one about 9,800 of
            // its 22,800): one compiled earlier in this same compile is reused too.
            .or_else(|| {
                let new = self.new.lock().unwrap_or_else(|e| e.into_inner());
                let value = new.get(key)?.clone();
                Some((Cow::Owned(value), &self.repeats))
            });
        let (value, counter) = match found {
            Some((value, counter)) => (Some(value), counter),
            None => (None, &self.misses),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        value
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        self.new
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_vec(), value);
        true
    }
}

fn is_pack(path: &Path) -> bool {
    path.file_name()
        .map(|n| n.to_string_lossy())
        .is_some_and(|n| !n.starts_with('.') && n.ends_with(PACK_SUFFIX))
}

/// The key that authenticates the pack at `path`: derived from the node's cache key and
/// the pack's file name, so a pack is valid under its own name only, and never as a
/// compile cache entry (whose names carry no `incremental/`).
fn pack_key(key: &hmac::Key, path: &Path) -> hmac::Key {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let derived = hmac::sign(key, format!("incremental/{name}").as_bytes());
    hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref())
}

/// A name no other writer picks: 16 random bytes in hex.
fn fresh_name() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    // The pid and the clock keep names apart even if the random source failed.
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes[..8].copy_from_slice(&(nanos as u64).to_le_bytes());
        bytes[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    hex::encode(bytes)
}

/// The body of a pack: `(u32 LE length, key, u32 LE length, value)` per entry.
fn encode(entries: &HashMap<Vec<u8>, Vec<u8>>) -> Vec<u8> {
    let size = entries.iter().map(|(k, v)| 8 + k.len() + v.len()).sum();
    let mut body = Vec::with_capacity(size);
    for (key, value) in entries {
        for part in [key, value] {
            body.extend_from_slice(&(part.len() as u32).to_le_bytes());
            body.extend_from_slice(part);
        }
    }
    body
}

/// The ranges (in `file`) of each entry's key and value: the framing only, not yet
/// whether the pack is authentic.
type Ranges = Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>;

fn parse(file: &[u8]) -> Result<Ranges, &'static str> {
    if !file.starts_with(MAGIC) || file.len() < MAGIC.len() + TAG_LEN {
        return Err("not a pack written by this version of tenure");
    }
    let mut at = MAGIC.len() + TAG_LEN;
    let take = |at: &mut usize| -> Result<std::ops::Range<usize>, &'static str> {
        let len = file
            .get(*at..*at + 4)
            .ok_or("truncated")?
            .try_into()
            .map(u32::from_le_bytes)
            .map_err(|_| "truncated")? as usize;
        let start = *at + 4;
        let end = start
            .checked_add(len)
            .filter(|&e| e <= file.len())
            .ok_or("truncated")?;
        *at = end;
        Ok(start..end)
    };
    let mut entries = Vec::new();
    while at < file.len() {
        let key = take(&mut at)?;
        let value = take(&mut at)?;
        entries.push((key, value));
    }
    Ok(entries)
}

/// Deletes the least recently used packs in `dir` until all fit in `cap` bytes; the
/// bytes left and the packs deleted.
fn evict(dir: &Path, cap: u64) -> std::io::Result<(u64, usize)> {
    let mut packs: Vec<(SystemTime, u64, PathBuf)> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| is_pack(&e.path()))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((
                meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                meta.len(),
                e.path(),
            ))
        })
        .collect();
    packs.sort();
    let mut total: u64 = packs.iter().map(|p| p.1).sum();
    let mut evicted = 0;
    for (_, len, path) in packs {
        if total <= cap {
            break;
        }
        // Already gone (another compile evicted it): it no longer counts either way.
        let _ = std::fs::remove_file(&path);
        total -= len;
        evicted += 1;
    }
    Ok((total, evicted))
}

#[cfg(test)]
#[path = "incremental_tests.rs"]
mod tests;

//! The Raft store's file: `DATA_DIR/raft.redb`, its tables, and the glue every access needs.
//!
//! The log, the vote, the committed pointer and the last snapshot live in one redb file of
//! their own, apart from the node's local store (`tenure.redb`), so that Raft's write
//! pattern (an fsync per append) and its lifetime (it is the cluster's history, not the
//! node's) stay separate. Values are postcard bytes: openraft's types serialize with serde
//! and round-trip through postcard, and the tables stay agnostic of their shape.
//!
//! redb calls block on disk I/O. Writes go through [`blocking`] (the blocking thread
//! pool), so an fsync never stalls a runtime worker that Raft's heartbeats share; short
//! reads run inline.
//!
//! Tables:
//! - `log`: index → entry;
//! - `meta`: `vote`, `committed`, `purged` → a postcard value;
//! - `snapshot`: `current` → the last snapshot built or installed (meta and data).

// openraft's storage traits fix the error type to its `StorageError` (224 bytes); the
// helpers here return the same type rather than convert at every call.
#![allow(clippy::result_large_err)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::AnyError;
use redb::{Database, DatabaseError, TableDefinition};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::ControlError;
use super::format;
use super::types::{StorageError, StorageIOError};

/// The file name under the data directory.
pub(crate) const FILE: &str = "raft.redb";

pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
pub(crate) const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("snapshot");

pub(crate) const VOTE: &str = "vote";
pub(crate) const COMMITTED: &str = "committed";
pub(crate) const PURGED: &str = "purged";
pub(crate) const CURRENT: &str = "current";

/// How long [`open`] waits for a previous instance in this process to let go of the file
/// (its tasks drop their handles as they end, just after a shutdown).
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// Opens (or creates) `dir/raft.redb` and its tables, after checking its format and
/// migrating an older one (`format.rs`).
pub(crate) async fn open(dir: &Path) -> Result<Arc<Database>, ControlError> {
    let path = dir.join(FILE);
    let failed = |reason: String| ControlError::Storage {
        path: path.clone(),
        reason,
    };
    // Before the file is opened for writing: a newer store must stay as it is, and an
    // older one is copied aside while it is still untouched.
    let plan = {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || format::prepare(&dir))
            .await
            .map_err(|e| failed(format!("the format check failed: {e}")))??
    };
    crate::private_files::create_dir(dir)
        .map_err(|e| failed(format!("cannot create the directory: {e}")))?;
    // Made empty and owner-only here, so that redb (which creates files under the umask)
    // initializes it in place with that mode; an existing store is opened as it is.
    crate::private_files::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| failed(format!("cannot create the file: {e}")))?;
    let deadline = Instant::now() + RELEASE_WAIT;
    let db = loop {
        let attempt = path.clone();
        let result = tokio::task::spawn_blocking(move || Database::create(attempt))
            .await
            .map_err(|e| failed(format!("the opening task failed: {e}")))?;
        match result {
            Ok(db) => break db,
            Err(DatabaseError::DatabaseAlreadyOpen) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(failed(e.to_string())),
        }
    };
    let db = Arc::new(db);
    let init = db.clone();
    let plan = blocking(move || {
        let tx = init.begin_write().map_err(write)?;
        tx.open_table(LOG).map_err(write)?;
        tx.open_table(META).map_err(write)?;
        tx.open_table(SNAPSHOT).map_err(write)?;
        format::apply(&plan, &tx).map_err(write)?;
        tx.commit().map_err(write)?;
        Ok(plan)
    })
    .await
    .map_err(|e| failed(e.to_string()))?;
    if let format::Plan::Migrate { from, backup } = plan {
        tracing::warn!(
            event = crate::events::STORE_MIGRATED,
            path = %path.display(),
            from,
            to = format::STORE_FORMAT,
            backup = %backup.display(),
            "migrated the Raft store {} from format {from} to format {}; the store as it was is kept at {} for a disaster only (putting it back rolls this voter's log and votes back; see docs/operating.md's \"Upgrading\"); delete it once this build runs well",
            path.display(),
            format::STORE_FORMAT,
            backup.display(),
        );
    }
    Ok(db)
}

/// The path of the Raft store under `dir`, for messages.
pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// Runs `work` on the blocking thread pool.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| write(format!("the storage task failed: {e}")))?
}

/// Encodes a value for a table.
pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, StorageError> {
    postcard::to_allocvec(value).map_err(|e| write(format!("cannot encode: {e}")))
}

/// Decodes a value read from a table.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StorageError> {
    postcard::from_bytes(bytes).map_err(|e| read(format!("cannot decode a stored value: {e}")))
}

/// A failed read, as openraft wants it.
pub(crate) fn read(e: impl ToString) -> StorageError {
    StorageIOError::read(AnyError::error(e.to_string())).into()
}

/// A failed write, as openraft wants it.
pub(crate) fn write(e: impl ToString) -> StorageError {
    StorageIOError::write(AnyError::error(e.to_string())).into()
}

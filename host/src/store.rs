//! The node's durable local store (redb, in `DATA_DIR/tenure.redb`): fencing tokens,
//! current grants and plugin state blobs.
//!
//! This is the single-node backend of the ownership and `state` contracts:
//! - **Tokens.** `grant` takes the next value of one durable counter, so tokens strictly
//!   increase for every grant, across restarts.
//! - **Fencing.** A state save is accepted only if its `(resource, slot, token)` is the
//!   slot's current grant. A released or regranted slot refuses the old token.
//! - **Durability.** Every write transaction commits with redb's immediate durability
//!   (fsync) before the call returns, so an acknowledged save survives a crash.
//!
//! Grants do not survive a restart: opening the store clears them, because the process
//! that held them is gone. Tokens and state do survive.
//!
//! Calls block on disk I/O; async callers go through `spawn_blocking`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::ownership::Grant;
use crate::runtime::{BoxFuture, StateBackend, StateError};

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const GRANTS: TableDefinition<(&str, u32), u64> = TableDefinition::new("grants");
const STATE: TableDefinition<&str, (u64, &[u8])> = TableDefinition::new("state");
const LAST_TOKEN: &str = "last_token";

/// A failure of the local store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database file could not be opened (another node using the same data
    /// directory, permissions, corruption).
    #[error("cannot open the store at {path}: {reason}")]
    Open { path: PathBuf, reason: String },
    /// A read or write failed.
    #[error("store I/O failed: {0}")]
    Io(String),
}

impl From<redb::Error> for StoreError {
    fn from(err: redb::Error) -> Self {
        StoreError::Io(err.to_string())
    }
}

/// Converts any redb error into [`StoreError::Io`].
fn io<E: Into<redb::Error>>(err: E) -> StoreError {
    StoreError::from(err.into())
}

/// The node's durable store. Cheap to clone.
#[derive(Clone)]
pub struct LocalStore {
    db: Arc<Database>,
}

impl LocalStore {
    /// Opens (or creates) the store and clears the grants of any previous process.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let db = Database::create(path).map_err(|e| StoreError::Open {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let store = Self { db: Arc::new(db) };
        let tx = store.db.begin_write().map_err(io)?;
        {
            tx.open_table(META).map_err(io)?;
            tx.open_table(STATE).map_err(io)?;
            let mut grants = tx.open_table(GRANTS).map_err(io)?;
            grants.retain(|_, _| false).map_err(io)?;
        }
        tx.commit().map_err(io)?;
        Ok(store)
    }

    /// Grants `(resource, slot)` anew: a fresh token, recorded as the slot's current grant.
    pub fn grant(&self, resource: &str, slot: u32) -> Result<u64, StoreError> {
        let tx = self.db.begin_write().map_err(io)?;
        let token = {
            let mut meta = tx.open_table(META).map_err(io)?;
            let token = meta.get(LAST_TOKEN).map_err(io)?.map_or(0, |v| v.value()) + 1;
            meta.insert(LAST_TOKEN, token).map_err(io)?;
            let mut grants = tx.open_table(GRANTS).map_err(io)?;
            grants.insert((resource, slot), token).map_err(io)?;
            token
        };
        tx.commit().map_err(io)?;
        Ok(token)
    }

    /// Ends the grant `token` of `(resource, slot)`, if it is still the current one.
    pub fn release(&self, resource: &str, slot: u32, token: u64) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(io)?;
        {
            let mut grants = tx.open_table(GRANTS).map_err(io)?;
            let current = grants.get((resource, slot)).map_err(io)?.map(|v| v.value());
            if current == Some(token) {
                grants.remove((resource, slot)).map_err(io)?;
            }
        }
        tx.commit().map_err(io)?;
        Ok(())
    }

    /// The resource's last saved blob.
    pub fn load(&self, resource: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let tx = self.db.begin_read().map_err(io)?;
        let table = tx.open_table(STATE).map_err(io)?;
        let value = table.get(resource).map_err(io)?;
        Ok(value.map(|v| v.value().1.to_vec()))
    }

    /// Saves the resource's blob if `grant` is its slot's current grant.
    pub fn save(&self, grant: &Grant, data: &[u8]) -> Result<(), StateError> {
        let unavailable = |e: StoreError| StateError::Unavailable(e.to_string());
        let tx = self.db.begin_write().map_err(io).map_err(unavailable)?;
        {
            let grants = tx.open_table(GRANTS).map_err(io).map_err(unavailable)?;
            let current = grants
                .get((grant.resource.as_str(), grant.slot))
                .map_err(io)
                .map_err(unavailable)?
                .map(|v| v.value());
            if current != Some(grant.token) {
                // Dropping the transaction aborts it: nothing changes.
                return Err(StateError::StaleToken);
            }
            let mut state = tx.open_table(STATE).map_err(io).map_err(unavailable)?;
            state
                .insert(grant.resource.as_str(), (grant.token, data))
                .map_err(io)
                .map_err(unavailable)?;
        }
        tx.commit().map_err(io).map_err(unavailable)?;
        Ok(())
    }
}

impl StateBackend for LocalStore {
    fn load(&self, grant: &Grant) -> BoxFuture<Result<Option<Vec<u8>>, StateError>> {
        let store = self.clone();
        let resource = grant.resource.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || store.load(&resource))
                .await
                .map_err(|e| StateError::Unavailable(e.to_string()))?
                .map_err(|e| StateError::Unavailable(e.to_string()))
        })
    }

    fn save(&self, grant: &Grant, data: Vec<u8>) -> BoxFuture<Result<(), StateError>> {
        let store = self.clone();
        let grant = grant.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || store.save(&grant, &data))
                .await
                .map_err(|e| StateError::Unavailable(e.to_string()))?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(resource: &str, slot: u32, token: u64) -> Grant {
        Grant {
            resource: resource.into(),
            slot,
            node: "n1".into(),
            token,
            term: 0,
        }
    }

    #[test]
    fn tokens_increase_across_reopen_and_grants_do_not_survive_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.redb");
        let store = LocalStore::open(&path).unwrap();
        let a = store.grant("r", 0).unwrap();
        let b = store.grant("r", 1).unwrap();
        assert!(b > a);
        store.save(&grant("r", 0, a), b"x").unwrap();
        drop(store);

        let store = LocalStore::open(&path).unwrap();
        assert_eq!(store.load("r").unwrap().as_deref(), Some(&b"x"[..]));
        // The grant held before the restart is gone: its token is stale now.
        assert_eq!(
            store.save(&grant("r", 0, a), b"y"),
            Err(StateError::StaleToken)
        );
        let c = store.grant("r", 0).unwrap();
        assert!(c > b);
    }

    #[test]
    fn a_save_with_a_stale_token_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::open(&dir.path().join("t.redb")).unwrap();
        let old = store.grant("r", 0).unwrap();
        store.save(&grant("r", 0, old), b"old").unwrap();
        let new = store.grant("r", 0).unwrap();
        assert_eq!(
            store.save(&grant("r", 0, old), b"zombie"),
            Err(StateError::StaleToken)
        );
        assert_eq!(store.load("r").unwrap().as_deref(), Some(&b"old"[..]));
        store.save(&grant("r", 0, new), b"new").unwrap();
        store.release("r", 0, new).unwrap();
        assert_eq!(
            store.save(&grant("r", 0, new), b"after release"),
            Err(StateError::StaleToken)
        );
        assert_eq!(store.load("r").unwrap().as_deref(), Some(&b"new"[..]));
    }
}

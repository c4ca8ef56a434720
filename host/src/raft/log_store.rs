//! The Raft log, the vote and the committed pointer, on redb (openraft's `RaftLogStorage`).
//!
//! **Durability is the point.** Raft's safety rests on two promises a node makes only
//! after they are on disk: "I have these entries" (an append acknowledged to the leader)
//! and "I voted for this candidate in this term". So [`LogStore::append`] commits with
//! `Durability::Immediate` (fsync) *before* it reports the entries flushed, and
//! `save_vote` before it returns. (openraft's rocksdb example acknowledges appends without
//! flushing; a crash there can lose an entry a quorum counted on.)
//!
//! The committed pointer is different: it only tells a restarting node how far it may
//! re-apply its own log without asking the leader, and it is safe for it to lag. So
//! `save_committed` commits without an fsync; the next append's fsync persists it too.
//! That saves an fsync per commit while still letting a restart replay most of the log.
//!
//! Purging removes entries up to an index and records the purged log id in the same
//! transaction, so there is never a hole: openraft purges only entries a snapshot covers.
//!
//! Reads are bounded for replication ([`LogStore::limited_get_log_entries`]): at most
//! `read_budget` bytes of entries (but always at least one), so an AppendEntries message
//! stays below the transport's frame limit whatever the entries hold.

// openraft's storage traits fix the error type to its `StorageError` (224 bytes); the
// helpers here return the same type rather than convert at every call.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::Arc;

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use redb::{Database, Durability, ReadableDatabase, ReadableTable};

use super::db::{self, COMMITTED, LOG, META, PURGED, VOTE};
use super::types::{Entry, LogId, LogState, StorageError, TypeConfig, Vote};

/// The log store; clones share the file and serve as the log readers of replication.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
    read_budget: usize,
}

impl LogStore {
    /// A log store on `db`; replication reads at most `read_budget` bytes of entries at once.
    pub(crate) fn new(db: Arc<Database>, read_budget: usize) -> LogStore {
        LogStore { db, read_budget }
    }

    /// The entries in `range`, stopping before the one that would exceed `budget` bytes
    /// (the first entry is always included).
    fn read_range(
        &self,
        range: impl RangeBounds<u64>,
        budget: usize,
    ) -> Result<Vec<Entry>, StorageError> {
        let tx = self.db.begin_read().map_err(db::read)?;
        let table = tx.open_table(LOG).map_err(db::read)?;
        let mut entries = Vec::new();
        let mut size = 0usize;
        for item in table.range(range).map_err(db::read)? {
            let (_, value) = item.map_err(db::read)?;
            let bytes = value.value();
            size = size.saturating_add(bytes.len());
            if !entries.is_empty() && size > budget {
                break;
            }
            entries.push(db::decode::<Entry>(bytes)?);
        }
        Ok(entries)
    }

    /// A value of the `meta` table.
    fn meta<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StorageError> {
        let tx = self.db.begin_read().map_err(db::read)?;
        let table = tx.open_table(META).map_err(db::read)?;
        let value = table.get(key).map_err(db::read)?;
        value.map(|v| db::decode(v.value())).transpose()
    }

    /// Writes a value of the `meta` table with `durability`.
    async fn put_meta(
        &self,
        key: &'static str,
        bytes: Vec<u8>,
        durability: Durability,
    ) -> Result<(), StorageError> {
        let db = self.db.clone();
        db::blocking(move || {
            let mut tx = db.begin_write().map_err(db::write)?;
            tx.set_durability(durability).map_err(db::write)?;
            {
                let mut table = tx.open_table(META).map_err(db::write)?;
                table.insert(key, bytes.as_slice()).map_err(db::write)?;
            }
            tx.commit().map_err(db::write)
        })
        .await
    }

    /// Removes the entries in `range`, and records `purged` if given, in one durable
    /// transaction.
    async fn remove(
        &self,
        range: impl RangeBounds<u64> + Send + 'static,
        purged: Option<Vec<u8>>,
    ) -> Result<(), StorageError> {
        let db = self.db.clone();
        db::blocking(move || {
            let mut tx = db.begin_write().map_err(db::write)?;
            tx.set_durability(Durability::Immediate)
                .map_err(db::write)?;
            {
                let mut log = tx.open_table(LOG).map_err(db::write)?;
                log.retain_in(range, |_, _| false).map_err(db::write)?;
                if let Some(purged) = purged {
                    let mut meta = tx.open_table(META).map_err(db::write)?;
                    meta.insert(PURGED, purged.as_slice()).map_err(db::write)?;
                }
            }
            tx.commit().map_err(db::write)
        })
        .await
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read_range(range, usize::MAX)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read_range(start..end, self.read_budget)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState, StorageError> {
        let purged: Option<LogId> = self.meta(PURGED)?;
        let last = {
            let tx = self.db.begin_read().map_err(db::read)?;
            let table = tx.open_table(LOG).map_err(db::read)?;
            match table.last().map_err(db::read)? {
                Some((_, value)) => Some(db::decode::<Entry>(value.value())?.log_id),
                None => None,
            }
        };
        Ok(LogState {
            last_log_id: last.or(purged),
            last_purged_log_id: purged,
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.put_meta(VOTE, db::encode(vote)?, Durability::Immediate)
            .await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.meta(VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not fsynced on purpose: see the module doc.
        self.put_meta(COMMITTED, db::encode(&committed)?, Durability::None)
            .await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.meta::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let encoded = entries
            .into_iter()
            .map(|entry| Ok((entry.log_id.index, db::encode(&entry)?)))
            .collect::<Result<Vec<_>, StorageError>>()?;
        let db = self.db.clone();
        let written = db::blocking(move || {
            let mut tx = db.begin_write().map_err(db::write)?;
            tx.set_durability(Durability::Immediate)
                .map_err(db::write)?;
            {
                let mut log = tx.open_table(LOG).map_err(db::write)?;
                for (index, bytes) in &encoded {
                    log.insert(*index, bytes.as_slice()).map_err(db::write)?;
                }
            }
            tx.commit().map_err(db::write)
        })
        .await;
        // Reported only now: the entries are on disk (or the write failed).
        match &written {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        written
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.remove(log_id.index.., None).await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let purged = db::encode(&log_id)?;
        self.remove(..=log_id.index, Some(purged)).await
    }
}

//! The replicated [`Cluster`] as openraft's state machine, with snapshots on redb.
//!
//! **In memory, snapshotted to disk.** The applied `Cluster` lives in memory behind an
//! `RwLock` that the node reads (placement, status, the plugin state backend). Applying an
//! entry writes nothing to disk: the log already holds it. What is persisted is the
//! snapshot: `(last applied log id, last membership, Cluster)` in postcard, written to the
//! `snapshot` table of `raft.redb` whenever openraft builds one (every
//! `snapshot_logs` entries) or installs one sent by the leader. A snapshot is received
//! into a [`SnapshotData`] that takes chunks only in order and up to a cap. On open, the last snapshot
//! is loaded; openraft then re-applies the log after it (up to the persisted committed
//! pointer, and the rest once the leader confirms it). Because [`Cluster::apply`] is
//! deterministic, the replay rebuilds exactly the state the node had, fencing tokens
//! (log indexes) included.
//!
//! openraft purges only log entries that a snapshot covers, so a snapshot plus the log
//! after it is always the whole history.
//!
//! **Applied index.** A `watch` channel carries the index of the last applied entry, so
//! the node can wait for "my proposal, or a change, has been applied here" without
//! polling.
//!
//! Blank and membership entries change no `Cluster` state and answer `Response::Done`;
//! a membership entry is remembered as the last membership, which openraft asks for.

// openraft's storage traits fix the error type to its `StorageError` (224 bytes); the
// helpers here return the same type rather than convert at every call.
#![allow(clippy::result_large_err)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use openraft::AnyError;
use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use redb::{Database, Durability, ReadableDatabase};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::checksums::Checksums;
use super::db::{self, CURRENT, SNAPSHOT};
use super::snapshot_data::SnapshotData;
use super::types::{
    Entry, LogId, Snapshot, SnapshotMeta, StorageError, StorageIOError, StoredMembership,
    TypeConfig,
};
use crate::cluster::{Cluster, ClusterCell, Outcome, Response};

/// The applied state, shared with the readers of [`super::Control`].
pub struct StateMachine {
    db: Arc<Database>,
    cluster: Arc<RwLock<Cluster>>,
    applied_index: watch::Sender<u64>,
    applied: Option<LogId>,
    membership: StoredMembership,
    /// The largest snapshot received from a leader (`ControlOptions::max_snapshot`).
    max_snapshot: usize,
    /// The cluster's id once the replica has one, for the envelope layer.
    cluster_id: ClusterCell,
    /// The replica's recent state hashes (`checksums.rs`).
    checksums: Arc<Checksums>,
    /// The test-only broken replica ([`super::checksums::UNSAFE_CORRUPT_REPLICA`]).
    corrupt: bool,
    /// The cluster's version as applied, for the check every message meets
    /// (`service.rs`) without the state's lock.
    version: Arc<AtomicU32>,
}

/// A snapshot's content: everything needed to resume applying after it.
#[derive(Serialize, Deserialize)]
pub(super) struct Image {
    pub(super) applied: Option<LogId>,
    pub(super) membership: StoredMembership,
    pub(super) cluster: Cluster,
}

/// Encodes an image as [`Cluster::encode`] ends it: without the stamped answers while
/// there are none, so that builds before them read it and [`Image::decode`] reads it back.
pub(super) fn encode_image(
    applied: &Option<LogId>,
    membership: &StoredMembership,
    cluster: &Cluster,
) -> Result<Vec<u8>, postcard::Error> {
    let mut bytes = postcard::to_allocvec(&ImageRef {
        applied,
        membership,
        cluster,
    })?;
    crate::cluster::drop_empty_tail(&mut bytes, cluster);
    Ok(bytes)
}

impl Image {
    /// Decodes an image. One that ends where [`Cluster::applied`], [`Cluster::slot_state`]
    /// or [`Cluster::stores`] would begin has none of them (or of those after): those maps are left out of
    /// the encoding while empty (`cluster::drop_empty_tail`), and builds before them never
    /// wrote them, so an image without them is read the same from this build's store, an
    /// older build's, a leader of either build, or a backup.
    pub(super) fn decode(bytes: &[u8]) -> Result<Image, postcard::Error> {
        let mut with_empty = bytes.to_vec();
        for _ in 0..=crate::cluster::TAIL_MAPS {
            match postcard::from_bytes::<Image>(&with_empty) {
                Err(postcard::Error::DeserializeUnexpectedEnd) => with_empty.push(0),
                // Only an image that ended exactly where the left-out maps begin: written
                // back, it is the same bytes (a truncated one is not).
                Ok(image) if with_empty.len() > bytes.len() => {
                    return match encode_image(&image.applied, &image.membership, &image.cluster) {
                        Ok(again) if again == bytes => Ok(image),
                        _ => Err(postcard::Error::DeserializeUnexpectedEnd),
                    };
                }
                decoded => return decoded,
            }
        }
        Err(postcard::Error::DeserializeUnexpectedEnd)
    }
}

/// [`Image`] borrowing the cluster, to serialize it under the read lock without a copy
/// (the same postcard layout).
#[derive(Serialize)]
struct ImageRef<'a> {
    applied: &'a Option<LogId>,
    membership: &'a StoredMembership,
    cluster: &'a Cluster,
}

/// What the `snapshot` table holds.
#[derive(Serialize, Deserialize)]
pub(super) struct Stored {
    pub(super) meta: SnapshotMeta,
    pub(super) data: Vec<u8>,
}

impl StateMachine {
    /// Opens the state machine on `db`, restoring the last snapshot if there is one;
    /// snapshots received from a leader may be at most `max_snapshot` bytes.
    pub(crate) fn open(
        db: Arc<Database>,
        max_snapshot: usize,
        checksums: Arc<Checksums>,
    ) -> Result<StateMachine, StorageError> {
        let stored = load(&db)?;
        let (applied, membership, cluster) = match stored {
            Some(stored) => {
                let image = Image::decode(&stored.data)
                    .map_err(|e| db::read(format!("cannot decode the stored snapshot: {e}")))?;
                (image.applied, image.membership, image.cluster)
            }
            None => (None, StoredMembership::default(), Cluster::default()),
        };
        // A backstop: a store whose state runs at a version this build does not speak is
        // refused before it is used (the format record's check normally comes first).
        let speaks = crate::version::protocols();
        if cluster.version > *speaks.end() {
            return Err(db::read(not_spoken(cluster.version, &speaks)));
        }
        let version = Arc::new(AtomicU32::new(cluster.version));
        let (applied_index, _) = watch::channel(applied.as_ref().map_or(0, |id| id.index));
        let cluster_id = ClusterCell::default();
        if let Some(id) = cluster.id {
            let _ = cluster_id.set(id);
        }
        Ok(StateMachine {
            db,
            cluster: Arc::new(RwLock::new(cluster)),
            applied_index,
            applied,
            membership,
            max_snapshot,
            cluster_id,
            checksums,
            corrupt: corrupt(),
            version,
        })
    }

    /// The cluster's version as applied (`crate::version`).
    pub(crate) fn version(&self) -> Arc<AtomicU32> {
        self.version.clone()
    }

    /// The cluster's id, set once the replica has one (`cluster/identity.rs`).
    pub(crate) fn cluster_id(&self) -> ClusterCell {
        self.cluster_id.clone()
    }

    /// The applied cluster state.
    pub(crate) fn cluster(&self) -> Arc<RwLock<Cluster>> {
        self.cluster.clone()
    }

    /// The index of the last applied entry, updated after each applied batch.
    pub(crate) fn applied_index(&self) -> watch::Receiver<u64> {
        self.applied_index.subscribe()
    }

    /// The cluster's version rose to `version` in the entries just applied: recorded in
    /// the format record, so that a build that does not speak it refuses this data dir at
    /// start (`format.rs`). A process that does not speak it itself (it was replaced by
    /// an older build after the raise was committed, before it applied it) stops here
    /// with a fatal storage error, before it applies anything it may not understand.
    async fn version_raised(&self, version: u32) -> Result<(), StorageError> {
        let db = self.db.clone();
        db::blocking(move || {
            super::format::record_cluster_version(&db, version).map_err(db::write)
        })
        .await?;
        let speaks = crate::version::protocols();
        if version > *speaks.end() {
            return Err(db::read(not_spoken(version, &speaks)));
        }
        tracing::info!(
            event = crate::events::CLUSTER_VERSION,
            version,
            "the cluster's version is {version} (tenure/{version}) from this entry on"
        );
        Ok(())
    }

    fn publish(&self) {
        if self.cluster_id.get().is_none()
            && let Some(id) = self
                .cluster
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .id
        {
            // Set once: an id never changes (`Command::Identify`).
            let _ = self.cluster_id.set(id);
        }
        self.version.store(
            self.cluster
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .version,
            Ordering::Relaxed,
        );
        let index = self.applied.as_ref().map_or(0, |id| id.index);
        self.applied_index.send_replace(index);
    }
}

/// Why a process stops (or a store is refused) when its cluster runs at `version`.
fn not_spoken(version: u32, speaks: &std::ops::RangeInclusive<u32>) -> String {
    format!(
        "the cluster's version is {version} (tenure/{version}, raised once every member spoke it); this build speaks {}: run a build that speaks tenure/{version} on this node (docs/operating.md, \"Upgrading\")",
        crate::version::describe_window(speaks)
    )
}

/// Whether this replica runs the test-only broken apply (`checksums.rs`); said at ERROR.
fn corrupt() -> bool {
    let on = std::env::var_os(super::checksums::UNSAFE_CORRUPT_REPLICA).is_some();
    if on {
        tracing::error!(
            event = crate::events::NODE_UNSAFE,
            "{} is set: this replica drops every saved state it applies, so it differs from the others on purpose (the replica check's test only)",
            super::checksums::UNSAFE_CORRUPT_REPLICA
        );
    }
    on
}

/// The stored snapshot, if any.
fn load(db: &Database) -> Result<Option<Stored>, StorageError> {
    let tx = db.begin_read().map_err(db::read)?;
    let table = tx.open_table(SNAPSHOT).map_err(db::read)?;
    let value = table.get(CURRENT).map_err(db::read)?;
    value.map(|v| db::decode(v.value())).transpose()
}

/// Stores `stored` as the current snapshot, durably.
async fn save(db: Arc<Database>, stored: &Stored) -> Result<(), StorageError> {
    let bytes = db::encode(stored)?;
    db::blocking(move || {
        let mut tx = db.begin_write().map_err(db::write)?;
        tx.set_durability(Durability::Immediate)
            .map_err(db::write)?;
        {
            let mut table = tx.open_table(SNAPSHOT).map_err(db::write)?;
            table.insert(CURRENT, bytes.as_slice()).map_err(db::write)?;
        }
        tx.commit().map_err(db::write)
    })
    .await
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Builder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut responses = Vec::new();
        // The states to hash (`checksums.rs`): encoded under the lock, hashed after it.
        let mut to_hash = Vec::new();
        let raised;
        // A raise of the cluster's version past what this build speaks: nothing from it
        // on is applied (the entries after it may follow rules this build does not know).
        let mut unspoken = None;
        let newest = *crate::version::protocols().end();
        {
            let mut cluster = self.cluster.write().unwrap_or_else(PoisonError::into_inner);
            let version_before = cluster.version;
            for entry in entries {
                let log_id = entry.log_id;
                if let EntryPayload::Normal(proposal) = &entry.payload
                    && let Some(to) = proposal.raises_to().filter(|to| *to > newest)
                {
                    unspoken = Some((log_id, to));
                    break;
                }
                let response = match entry.payload {
                    EntryPayload::Blank => Outcome::One(Response::Done),
                    EntryPayload::Normal(proposal) => {
                        cluster.apply_proposal(log_id.index, log_id.leader_id.term, proposal)
                    }
                    EntryPayload::Membership(membership) => {
                        self.membership = StoredMembership::new(Some(log_id), membership);
                        Outcome::One(Response::Done)
                    }
                };
                if self.corrupt {
                    cluster.state.clear();
                }
                if Checksums::due(log_id.index)
                    && let Ok(encoded) = cluster.encode()
                {
                    to_hash.push((log_id.index, encoded));
                }
                self.applied = Some(log_id);
                responses.push(response);
            }
            raised = (cluster.version > version_before).then_some(cluster.version);
        }
        if let Some(version) = raised {
            self.version_raised(version).await?;
        }
        self.publish();
        if let Some((log_id, to)) = unspoken {
            // Recorded, so that this build refuses the data dir at its next start; then
            // the node stops on the fatal error.
            let db = self.db.clone();
            db::blocking(move || super::format::record_cluster_version(&db, to).map_err(db::write))
                .await?;
            let speaks = crate::version::protocols();
            return Err(
                StorageIOError::apply(log_id, AnyError::error(not_spoken(to, &speaks))).into(),
            );
        }
        if !to_hash.is_empty() {
            let checksums = self.checksums.clone();
            tokio::task::spawn_blocking(move || {
                for (index, encoded) in to_hash {
                    checksums.record(index, &encoded);
                }
            });
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Builder {
        // Serialized now, under the read lock: the snapshot is the state at this point,
        // whatever is applied while it is being written.
        let data = {
            let cluster = self.cluster.read().unwrap_or_else(PoisonError::into_inner);
            encode_image(&self.applied, &self.membership, &cluster)
                .map_err(|e| db::write(format!("cannot encode the snapshot: {e}")))
        };
        Builder {
            db: self.db.clone(),
            applied: self.applied,
            membership: self.membership.clone(),
            data,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageError> {
        Ok(Box::new(SnapshotData::receiving(self.max_snapshot)))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        // A leader of a newer build may send an image this build cannot read (the
        // cluster's version was raised past it): said, rather than a bare decode error.
        let image = Image::decode(&data).map_err(|e| {
            db::read(format!(
                "{e}: the leader's snapshot may be of a newer build than this one (which speaks {}); run a build that speaks the cluster's version on this node (docs/operating.md, \"Upgrading\")",
                crate::version::describe_window(&crate::version::protocols())
            ))
        })?;
        if image.applied != meta.last_log_id {
            return Err(db::read(format!(
                "the snapshot's data is at {:?} but its metadata says {:?}",
                image.applied, meta.last_log_id
            )));
        }
        // A replica's cluster id never changes (`cluster/identity.rs`): a snapshot of
        // another cluster (or one without the id this replica already applied) can only
        // come from a mix-up that the envelope check could not see (a sender without an
        // id). Refused before anything is written.
        if let Some(&ours) = self.cluster_id.get()
            && image.cluster.id != Some(ours)
        {
            return Err(db::read(format!(
                "refusing a snapshot of {}: this replica is of cluster {ours}",
                image
                    .cluster
                    .id
                    .map_or("a cluster without an id".to_string(), |id| format!(
                        "cluster {id}"
                    ))
            )));
        }
        let version_before = self
            .cluster
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .version;
        if image.cluster.version > version_before {
            self.version_raised(image.cluster.version).await?;
        }
        save(
            self.db.clone(),
            &Stored {
                meta: meta.clone(),
                data,
            },
        )
        .await?;
        *self.cluster.write().unwrap_or_else(PoisonError::into_inner) = image.cluster;
        self.checksums.replaced();
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.publish();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        Ok(load(&self.db)?.map(|stored| Snapshot {
            meta: stored.meta,
            snapshot: Box::new(SnapshotData::holding(stored.data)),
        }))
    }
}

/// Writes a snapshot of the state captured by `get_snapshot_builder`.
pub struct Builder {
    db: Arc<Database>,
    applied: Option<LogId>,
    membership: StoredMembership,
    data: Result<Vec<u8>, StorageError>,
}

/// Distinguishes snapshots built at the same log id (openraft uses the id to tell
/// transfers apart).
static BUILT: AtomicU64 = AtomicU64::new(0);

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let data = std::mem::replace(&mut self.data, Ok(Vec::new()))?;
        let at = match &self.applied {
            Some(id) => format!("{}-{}", id.leader_id.term, id.index),
            None => "0-0".to_owned(),
        };
        let meta = SnapshotMeta {
            last_log_id: self.applied,
            last_membership: self.membership.clone(),
            snapshot_id: format!("{at}-{}", BUILT.fetch_add(1, Ordering::Relaxed)),
        };
        let stored = Stored { meta, data };
        save(self.db.clone(), &stored).await?;
        Ok(Snapshot {
            meta: stored.meta,
            snapshot: Box::new(SnapshotData::holding(stored.data)),
        })
    }
}

//! The Raft store's format record, and the migration of older stores at start.
//!
//! `raft.redb` holds postcard encodings of log entries, the vote and snapshots. postcard is
//! positional: a field added to a struct, or an enum variant inserted before another,
//! changes what old bytes mean. So the store says which encoding it holds, in a table of
//! its own (`format`) that is read before anything else and whose layout never changes:
//! string keys, and values in fixed encodings that do not depend on postcard or serde.
//!
//! | key | value |
//! |---|---|
//! | `version` | the store format, a `u32`, 4 bytes little-endian |
//! | `writer` | the build that last opened the store for writing, UTF-8 (`tenure 0.1.0`) |
//! | `store` | the store's id (`cluster/identity.rs`), its 16 bytes; since format 4 |
//! | `cluster_version` | the cluster's version as this replica last applied it (`crate::version`), a `u32`, 4 bytes little-endian; written when a raise applies, since format 5 |
//! | `member_ids` | how this store's member id is made, one byte: `1`, of the node's name and the store id (`types::member_id`); written when a new store is opened for a node that joins as a new member, since format 6. Absent: the name's id (`types::node_id`), as every initial member's and every store of before has |
//!
//! Keys may be added later without a new format (a reader ignores keys it does not
//! know); a value's encoding never changes.
//!
//! **Formats.** Every format a build can read is listed in [`FORMATS`]; this build writes
//! [`STORE_FORMAT`]. The golden-byte tests (`crate::golden`) pin the bytes of every stored
//! type to the format they belong to, so a change of encoding fails CI until it comes with
//! a new format number and its migration here.
//!
//! **At start** ([`inspect`], then [`prepare`]): a store of a newer format, or of a cluster
//! whose version is newer than this build speaks (a downgrade after the cluster's version
//! was raised), is refused with both versions named, and nothing on disk is touched (the record is read through redb's
//! read-only mode, or from a copy outside the data dir when the file needs redb's repair
//! after a crash). A store of an older format is copied aside (`raft.redb.format-N`,
//! fsynced) before anything is written, then migrated once, in the same write transaction
//! that records the new format: a crash during a migration leaves the old store as it was.
//! A store without a record was written before records existed: format 1.
//!
//! What this module deliberately does not do: version the node's other files (the compile
//! cache is keyed by the engine and re-made at will; the incarnation and reset-key files
//! are plain values), or convert a store to an older format: putting back the copy set aside
//! would roll a voter's log and votes back, so it is for a disaster only
//! (docs/operating.md, "Upgrading").

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use redb::{
    Database, DatabaseError, ReadOnlyDatabase, ReadableDatabase, TableDefinition, TableError,
    WriteTransaction,
};

use super::db::FILE;

/// The newest store format this build writes: once its replica's cluster runs at
/// [`crate::version::STAMPS`] or above ([`format_for`]).
pub const STORE_FORMAT: u32 = 6;

/// The format this build writes while the cluster's version is below
/// [`crate::version::STAMPS`]. Format 6 adds only what appears from that version on
/// (stamped log entries, stamped answers in the snapshot image), so until then a store
/// stays in format 5, which 0.2.0 opens: a node can go back to 0.2.0 during a rolling
/// upgrade until the cluster's version is raised, and the raise is what moves the store
/// on (with the record's cluster version, which 0.2.0 refuses anyway).
pub const BEFORE_STAMPS: u32 = 5;

/// The store format of a replica whose cluster runs at `cluster_version`.
pub fn format_for(cluster_version: u32) -> u32 {
    if cluster_version >= crate::version::STAMPS {
        STORE_FORMAT
    } else {
        BEFORE_STAMPS
    }
}

/// Every store format this build reads, oldest first, with what it is.
pub const FORMATS: &[(u32, &str)] = &[
    (
        1,
        "no format record (commit 262d90b and earlier): postcard log entries, vote, committed and purged log ids, and snapshots",
    ),
    (
        2,
        "format 1 and a format record (the encodings of format 1 are unchanged)",
    ),
    (
        3,
        "format 2, the cluster id as the snapshot image's last field, and the log entry that sets it (`Identify`)",
    ),
    (
        4,
        "format 3, the store id in the format record, the session processes as the snapshot image's last field, and the log entry that opens a session naming its process (`OpenSessionOf`)",
    ),
    (
        5,
        "format 4, the cluster version as the snapshot image's last field, the log entries that raise it (`RaiseVersion`) and the version gate's test command (`Probe`), and the cluster version in the format record",
    ),
    (
        6,
        "format 5, stamped log entries (`Proposal::Stamped`, `StampedFrom`) and the stamped commands' answers as the snapshot image's last field (left out while there are none), and member ids of a name and a store (`member_ids` in the record); written once the cluster's version is 7, or when a new member's store records its member id, a store stays in format 5 until then",
    ),
];

/// The table of the format record.
pub(crate) const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("format");
const VERSION: &str = "version";
const WRITER: &str = "writer";
const STORE: &str = "store";
const CLUSTER_VERSION: &str = "cluster_version";
const MEMBER_IDS: &str = "member_ids";
/// [`MEMBER_IDS`]: of the name and the store.
const OF_NAME_AND_STORE: u8 = 1;

/// The build, as the record names it.
pub fn writer() -> String {
    format!("tenure {}", env!("CARGO_PKG_VERSION"))
}

/// What a data dir's `raft.redb` says of its format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// There is no store yet (or an empty file): it will be made in [`STORE_FORMAT`].
    Absent,
    /// A store with a record.
    Record {
        version: u32,
        /// The build that last wrote it; empty if the record has none.
        writer: String,
        /// The cluster's version as the replica last applied it; 0 if never raised.
        cluster_version: u32,
    },
    /// A store without a record: written before records existed, format 1.
    Unversioned,
}

impl Found {
    /// The store's format; `None` for no store.
    pub fn version(&self) -> Option<u32> {
        match self {
            Found::Absent => None,
            Found::Record { version, .. } => Some(*version),
            Found::Unversioned => Some(1),
        }
    }
}

/// Why a store's format cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FormatError {
    /// The store was written by a newer build.
    #[error(
        "the Raft store {} is in format {found} (written by {writer}), newer than this build ({this}) can read (formats {oldest} to {newest}); nothing was changed: run that build (or a newer one) on this data dir; a store is never taken back to an older format (docs/operating.md's \"Upgrading\" says why)",
        path.display(), this = self::writer(), oldest = FORMATS[0].0, newest = STORE_FORMAT
    )]
    Newer {
        path: PathBuf,
        found: u32,
        writer: String,
    },
    /// The record is not one any build writes (a truncated value, a format 0).
    #[error("the Raft store {} has a damaged format record: {why}; nothing was changed", path.display())]
    Damaged { path: PathBuf, why: String },
    /// The replica's cluster runs a newer protocol version than this build speaks.
    #[error(
        "the Raft store {} belongs to a cluster that runs at version {cluster_version} (tenure/{cluster_version}, raised once every member spoke it, and never lowered); this build ({this}) speaks {speaks}; nothing was changed: run a build that speaks tenure/{cluster_version} on this node (docs/operating.md, \"Upgrading\": downgrades are not supported once the cluster's version was raised)",
        path.display(), this = self::writer(), speaks = crate::version::describe_window(&crate::version::protocols())
    )]
    ClusterNewer { path: PathBuf, cluster_version: u32 },
    /// The file cannot be read at all.
    #[error("cannot read the format of the Raft store {}: {why}", path.display())]
    Unreadable { path: PathBuf, why: String },
}

/// Reads the format of `dir/raft.redb` without writing to the data dir.
pub fn inspect(dir: &Path) -> Result<Found, FormatError> {
    let path = dir.join(FILE);
    let unreadable = |why: String| FormatError::Unreadable {
        path: path.clone(),
        why,
    };
    match fs::metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Absent),
        Err(e) => return Err(unreadable(e.to_string())),
        // `db::open` makes the file empty before redb initializes it: a crash in between
        // leaves an empty file, which holds nothing yet.
        Ok(meta) if meta.len() == 0 => return Ok(Found::Absent),
        Ok(_) => {}
    }
    match ReadOnlyDatabase::open(&path) {
        Ok(db) => read(&db, &path),
        // The file was not closed cleanly (a crash, kill -9): redb repairs it on its next
        // writable open. The record is read from a repaired copy outside the data dir, so
        // that a refused start leaves the file exactly as it was.
        Err(DatabaseError::RepairAborted) => {
            let copy = ScratchCopy::of(&path).map_err(|e| {
                unreadable(format!(
                    "it needs a repair after a crash, and copying it to {} for that failed: {e}",
                    std::env::temp_dir().display()
                ))
            })?;
            let db = Database::open(&copy.0).map_err(|e| unreadable(e.to_string()))?;
            read(&db, &path)
        }
        Err(e) => Err(unreadable(e.to_string())),
    }
}

/// Refuses a format this build cannot read.
pub fn check(found: &Found, dir: &Path) -> Result<(), FormatError> {
    match found {
        Found::Record {
            version, writer, ..
        } if *version > STORE_FORMAT => Err(FormatError::Newer {
            path: dir.join(FILE),
            found: *version,
            writer: if writer.is_empty() {
                "an unknown build".into()
            } else {
                writer.clone()
            },
        }),
        Found::Record { version: 0, .. } => Err(FormatError::Damaged {
            path: dir.join(FILE),
            why: "format 0 does not exist".into(),
        }),
        Found::Record {
            cluster_version, ..
        } if *cluster_version > *crate::version::protocols().end() => {
            Err(FormatError::ClusterNewer {
                path: dir.join(FILE),
                cluster_version: *cluster_version,
            })
        }
        _ => Ok(()),
    }
}

/// What opening the store will do, decided before it is opened for writing.
#[derive(Debug)]
pub(crate) enum Plan {
    /// A new store: write the record.
    Create,
    /// The store is current: update the writer only.
    Current,
    /// Migrate from `from`; the file as it was is at `backup`.
    Migrate { from: u32, backup: PathBuf },
}

/// Inspects `dir/raft.redb`, refuses a newer format, and sets an older store aside.
/// Blocking (file copies and fsyncs): run it off the runtime's workers.
pub(crate) fn prepare(dir: &Path) -> Result<Plan, FormatError> {
    let found = inspect(dir)?;
    check(&found, dir)?;
    match found {
        Found::Absent => Ok(Plan::Create),
        // Format 5 is current too: it becomes 6 when the cluster's version allows stamps.
        Found::Record { version, .. } if version >= BEFORE_STAMPS => Ok(Plan::Current),
        found => {
            let from = found.version().unwrap_or(STORE_FORMAT);
            let backup = set_aside(dir, from).map_err(|e| FormatError::Unreadable {
                path: dir.join(FILE),
                why: format!("cannot copy it aside before migrating it from format {from}: {e}"),
            })?;
            Ok(Plan::Migrate { from, backup })
        }
    }
}

/// Carries out `plan` in the store's first write transaction: migrates the encodings from
/// an older format and writes the record. The caller commits; a crash before that leaves
/// the store as it was.
///
/// The migrations, each from the format before:
/// - 1 → 2: none (the record is added);
/// - 2 → 3: the stored snapshot's image gains the cluster id, `None` (see [`image_from`]).
///   Log entries need nothing: `Identify` is a new command kind, after every older one.
/// - 3 → 4: the image gains the session processes, empty; the record gains the store
///   id, chosen here (a new store gets one too). Log entries need nothing:
///   `OpenSessionOf` is a new command kind.
/// - 4 → 5: the image gains the cluster version, 0 (raised by the first leader of the
///   upgraded cluster). Log entries need nothing: `RaiseVersion` and `Probe` are new
///   command kinds. The record's `cluster_version` key is written when a raise applies.
/// - 5 → 6: nothing is rewritten: the record says 6 once a raise to
///   [`crate::version::STAMPS`] applies ([`set_cluster_version`]). The image's stamped
///   answers and per-slot state blobs are left out while empty, and an image without
///   them reads as having none (`state_machine::Image::decode`); stamped entries are new
///   proposal kinds, `SaveSlotState` a new command kind.
///
/// A new or migrated store is written in [`BEFORE_STAMPS`]: its cluster's version is not
/// known yet (a restore or a recovery records it with [`set_cluster_version`]).
pub(crate) fn apply(plan: &Plan, tx: &WriteTransaction) -> Result<(), String> {
    if let Plan::Migrate { from, .. } = plan {
        migrate_snapshot(*from, tx)
            .map_err(|e| format!("cannot migrate the stored snapshot from format {from}: {e}"))?;
    }
    let mut table = tx.open_table(TABLE).map_err(|e| e.to_string())?;
    if !matches!(plan, Plan::Current) {
        table
            .insert(VERSION, BEFORE_STAMPS.to_le_bytes().as_slice())
            .map_err(|e| e.to_string())?;
    }
    table
        .insert(WRITER, writer().as_bytes())
        .map_err(|e| e.to_string())?;
    if redb::ReadableTable::get(&table, STORE)
        .map_err(|e| e.to_string())?
        .is_none()
    {
        let id = crate::cluster::StoreId::random();
        table
            .insert(STORE, id.bytes().as_slice())
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Records, durably, that the store's member id is of its node's name and its store id
/// (`types.rs`): for a new store of a node that joins as a new member. The store moves to
/// [`STORE_FORMAT`] with it, which 0.2.0 refuses: it would take the name's id, another
/// member's.
pub(crate) fn record_member_ids(db: &Database) -> Result<(), String> {
    let mut tx = db.begin_write().map_err(|e| e.to_string())?;
    tx.set_durability(redb::Durability::Immediate)
        .map_err(|e| e.to_string())?;
    {
        let mut table = tx.open_table(TABLE).map_err(|e| e.to_string())?;
        table
            .insert(MEMBER_IDS, [OF_NAME_AND_STORE].as_slice())
            .map_err(|e| e.to_string())?;
        let format = redb::ReadableTable::get(&table, VERSION)
            .map_err(|e| e.to_string())?
            .and_then(|v| <[u8; 4]>::try_from(v.value()).ok())
            .map_or(0, u32::from_le_bytes);
        if format < STORE_FORMAT {
            table
                .insert(VERSION, STORE_FORMAT.to_le_bytes().as_slice())
                .map_err(|e| e.to_string())?;
        }
    }
    tx.commit().map_err(|e| e.to_string())
}

/// The member id of node `name` on the open store `db`, of store id `store`: of the
/// name and the store for a store made by this build, the name's for one made before
/// (`types.rs`).
pub(crate) fn member_id(
    db: &impl ReadableDatabase,
    name: &str,
    store: crate::cluster::StoreId,
) -> Result<super::types::NodeId, String> {
    let tx = db.begin_read().map_err(|e| e.to_string())?;
    let table = tx.open_table(TABLE).map_err(|e| e.to_string())?;
    let ids = table.get(MEMBER_IDS).map_err(|e| e.to_string())?;
    match ids.as_ref().map(|v| v.value()) {
        None => Ok(super::types::node_id(name)),
        Some([OF_NAME_AND_STORE]) => Ok(super::types::member_id(name, store)),
        Some(other) => Err(format!(
            "the format record says its member ids are made in a way this build does not know ({other:?}): a newer build made this store"
        )),
    }
}

/// The store id in the record of an open store (every store has one once [`apply`] ran).
pub(crate) fn store_id(db: &impl ReadableDatabase) -> Result<crate::cluster::StoreId, String> {
    let tx = db.begin_read().map_err(|e| e.to_string())?;
    let table = tx.open_table(TABLE).map_err(|e| e.to_string())?;
    let value = table
        .get(STORE)
        .map_err(|e| e.to_string())?
        .ok_or("the format record has no store id")?;
    let bytes: [u8; 16] = value
        .value()
        .try_into()
        .map_err(|_| format!("the store id has {} bytes, not 16", value.value().len()))?;
    Ok(crate::cluster::StoreId::from_bytes(bytes))
}

/// Records the cluster's version as this replica applied it, durably, so that a build
/// that does not speak it refuses the data dir before it changes anything ([`check`]).
pub(crate) fn record_cluster_version(db: &Database, version: u32) -> Result<(), String> {
    let mut tx = db.begin_write().map_err(|e| e.to_string())?;
    tx.set_durability(redb::Durability::Immediate)
        .map_err(|e| e.to_string())?;
    set_cluster_version(&tx, version)?;
    tx.commit().map_err(|e| e.to_string())
}

/// Writes the record's cluster version in `tx`, and the store format that version
/// allows ([`format_for`]; a format is never lowered).
pub(crate) fn set_cluster_version(tx: &WriteTransaction, version: u32) -> Result<(), String> {
    let mut table = tx.open_table(TABLE).map_err(|e| e.to_string())?;
    table
        .insert(CLUSTER_VERSION, version.to_le_bytes().as_slice())
        .map_err(|e| e.to_string())?;
    if format_for(version) == STORE_FORMAT {
        table
            .insert(VERSION, STORE_FORMAT.to_le_bytes().as_slice())
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A snapshot image (`state_machine::Image`) encoded in store format `from`, in this
/// build's format. Format 3 added the cluster id as the image's last field (the last
/// field of its last field, `Cluster`); postcard encodes a `None` as one zero byte, and
/// positional decoding reads the fields before it exactly as format 2 wrote them, so an
/// older image is the new one without that byte.
pub(crate) fn image_from(from: u32, mut image: Vec<u8>) -> Vec<u8> {
    if from < 3 {
        image.push(0);
    }
    // Format 4 added the session processes after it: an empty map is one zero byte too.
    if from < 4 {
        image.push(0);
    }
    // Format 5 added the cluster version after them: a 0 is one zero byte as well.
    if from < 5 {
        image.push(0);
    }
    image
}

fn migrate_snapshot(from: u32, tx: &WriteTransaction) -> Result<(), String> {
    use redb::ReadableTable;

    use super::db::{CURRENT, SNAPSHOT};
    use super::state_machine::Stored;
    let mut table = tx.open_table(SNAPSHOT).map_err(|e| e.to_string())?;
    let Some(bytes) = table
        .get(CURRENT)
        .map_err(|e| e.to_string())?
        .map(|v| v.value().to_vec())
    else {
        return Ok(());
    };
    let mut stored: Stored = postcard::from_bytes(&bytes).map_err(|e| e.to_string())?;
    stored.data = image_from(from, stored.data);
    let bytes = postcard::to_allocvec(&stored).map_err(|e| e.to_string())?;
    table
        .insert(CURRENT, bytes.as_slice())
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Reads the record of an open store.
fn read(db: &impl ReadableDatabase, path: &Path) -> Result<Found, FormatError> {
    let damaged = |why: String| FormatError::Damaged {
        path: path.to_path_buf(),
        why,
    };
    let unreadable = |e: &dyn std::fmt::Display| FormatError::Unreadable {
        path: path.to_path_buf(),
        why: e.to_string(),
    };
    let tx = db.begin_read().map_err(|e| unreadable(&e))?;
    let table = match tx.open_table(TABLE) {
        Ok(table) => table,
        Err(TableError::TableDoesNotExist(_)) => return Ok(Found::Unversioned),
        Err(e) => return Err(unreadable(&e)),
    };
    // A `u32` value of the record, 4 bytes little-endian, if the key is there.
    let number = |key: &str, what: &str| -> Result<Option<u32>, FormatError> {
        let Some(value) = table.get(key).map_err(|e| unreadable(&e))? else {
            return Ok(None);
        };
        let bytes: [u8; 4] = value.value().try_into().map_err(|_| {
            damaged(format!(
                "its {what} is {} bytes, not 4",
                value.value().len()
            ))
        })?;
        Ok(Some(u32::from_le_bytes(bytes)))
    };
    let Some(version) = number(VERSION, "version")? else {
        return Err(damaged("it has no version".into()));
    };
    let writer = match table.get(WRITER).map_err(|e| unreadable(&e))? {
        Some(value) => String::from_utf8_lossy(value.value()).into_owned(),
        None => String::new(),
    };
    let cluster_version = number(CLUSTER_VERSION, "cluster version")?.unwrap_or(0);
    Ok(Found::Record {
        version,
        writer,
        cluster_version,
    })
}

/// Copies `dir/raft.redb` to `dir/raft.redb.format-{from}`, fsynced, through a temporary
/// name, so that a crash never leaves a half copy under the final name.
fn set_aside(dir: &Path, from: u32) -> io::Result<PathBuf> {
    let source = dir.join(FILE);
    let backup = dir.join(format!("{FILE}.format-{from}"));
    let partial = dir.join(format!("{FILE}.format-{from}.partial"));
    {
        let mut input = fs::File::open(&source)?;
        let mut output = crate::private_files::options()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&partial)?;
        io::copy(&mut input, &mut output)?;
        output.flush()?;
        output.sync_all()?;
    }
    fs::rename(&partial, &backup)?;
    fs::File::open(dir)?.sync_all()?;
    Ok(backup)
}

/// A copy of a store in the temporary dir, removed when dropped.
struct ScratchCopy(PathBuf);

impl ScratchCopy {
    fn of(path: &Path) -> io::Result<ScratchCopy> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let copy = std::env::temp_dir().join(format!(
            "tenure-format-check-{}-{nanos}.redb",
            std::process::id()
        ));
        let mut input = fs::File::open(path)?;
        let mut output = crate::private_files::options()
            .create_new(true)
            .write(true)
            .open(&copy)?;
        io::copy(&mut input, &mut output)?;
        Ok(ScratchCopy(copy))
    }
}

impl Drop for ScratchCopy {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

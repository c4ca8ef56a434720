//! The format record and the migration, on real stores: the data dirs written by commit
//! 262d90b (`tests/fixtures/format-1`, store format 1), and stores edited to a newer
//! format.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use openraft::RaftLogReader;
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use redb::Database;
use tempfile::TempDir;

use super::db;
use super::format::{self, FormatError, Found, STORE_FORMAT};
use super::log_store::LogStore;
use super::state_machine::StateMachine;
use crate::cluster::Cluster;

/// The fixture unpacked into a temp dir: `n1/data`, `n2/data`, `n3/data`, `status-before.json`.
fn fixture() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let archive =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/format-1/cluster.tar.gz");
    let status = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(dir.path())
        .status()
        .expect("running tar");
    assert!(status.success(), "tar -xzf {} failed", archive.display());
    dir
}

/// Every file under `dir` with its bytes.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
    out
}

/// Opens the store in `dir` (migrating it), then replays it as a restarting node does:
/// the last snapshot, then every log entry after it. Returns the state, the snapshot's
/// index and the last log index.
async fn replay(dir: &Path) -> (Cluster, u64, u64) {
    let db = db::open(dir).await.expect("opening the store");
    let mut sm =
        StateMachine::open(db.clone(), 1 << 30, Default::default()).expect("loading the snapshot");
    let snapshot_index = *sm.applied_index().borrow();
    let mut log = LogStore::new(db.clone(), usize::MAX);
    let state = log.get_log_state().await.unwrap();
    let last = state.last_log_id.map_or(0, |id| id.index);
    let entries = log
        .try_get_log_entries(snapshot_index + 1..=last)
        .await
        .unwrap();
    assert_eq!(
        entries.len() as u64,
        last - snapshot_index,
        "a hole in the log"
    );
    sm.apply(entries).await.unwrap();
    let cluster = sm.cluster().read().unwrap().clone();
    (cluster, snapshot_index, last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stores_of_262d90b_are_migrated_once_and_keep_every_value() {
    let fixture = fixture();
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture.path().join("status-before.json")).unwrap())
            .unwrap();
    for node in ["n1", "n2", "n3"] {
        let dir = fixture.path().join(node).join("data");
        let before = std::fs::read(dir.join("raft.redb")).unwrap();
        assert_eq!(format::inspect(&dir).unwrap(), Found::Unversioned);
        let (cluster, snapshot, last) = replay(&dir).await;
        // The fixture is what it claims: a snapshot, and a log after it.
        assert!(snapshot >= 4000, "{node}: snapshot at {snapshot}");
        assert!(last > snapshot, "{node}: no log after the snapshot");
        assert_eq!(
            std::fs::read(dir.join("raft.redb.format-1")).unwrap(),
            before,
            "{node}: the store as it was is set aside"
        );
        assert_eq!(
            format::inspect(&dir).unwrap(),
            Found::Record {
                version: format::BEFORE_STAMPS,
                writer: format::writer(),
                cluster_version: 0,
            }
        );
        assert_eq!(
            cluster.members.keys().collect::<Vec<_>>(),
            ["n1", "n2", "n3"],
            "{node}"
        );
        // Its member keeps the id it had: the name's (`types.rs`).
        let db = db::open(&dir).await.unwrap();
        let store = format::store_id(&*db).unwrap();
        assert_eq!(
            format::member_id(&*db, node, store),
            Ok(super::types::node_id(node))
        );
        drop(db);
        assert_eq!(
            cluster.id, None,
            "{node}: no id until the first leader after the upgrade"
        );
        let revoked = status["revoked"][0]["key"].as_str().unwrap();
        assert!(
            cluster.revoked.contains_key(revoked),
            "{node}: revocation kept"
        );
        let count = cluster.state["counter"].data.clone();
        let count = u64::from_le_bytes(count.try_into().unwrap());
        assert!(count >= 300, "{node}: the counter's state holds {count}");
        assert!(cluster.history.len() >= 20, "{node}: history kept");
        if node == "n3" {
            // n3 answered the status just before it was killed: its replica is that status.
            assert_eq!(
                cluster.members["n3"].session.as_ref().map(|s| s.id),
                status["nodes"][2]["session"]["id"].as_u64()
            );
            for resource in status["resources"].as_array().unwrap() {
                for slot in resource["slots"].as_array().unwrap() {
                    let granted = cluster.slot(
                        resource["name"].as_str().unwrap(),
                        slot["slot"].as_u64().unwrap() as u32,
                    );
                    assert_eq!(granted.map(|s| s.token), slot["token"].as_u64());
                }
            }
            let shown: Vec<u64> = status["history"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h["index"].as_u64().unwrap())
                .collect();
            let kept: Vec<u64> = cluster.history.iter().map(|h| h.index).collect();
            assert!(
                kept.ends_with(&shown),
                "{node}: history {kept:?} ends with {shown:?}"
            );
            assert_eq!(
                cluster.history.len() as u64,
                status["history_len"].as_u64().unwrap()
            );
        }
        // Opened again: nothing more to migrate, and the copy set aside is not replaced.
        std::fs::write(dir.join("raft.redb.format-1"), b"kept").unwrap();
        let (again, _, _) = replay(&dir).await;
        assert_eq!(
            again, cluster,
            "{node}: the migrated store replays to the same state"
        );
        assert_eq!(
            std::fs::read(dir.join("raft.redb.format-1")).unwrap(),
            b"kept"
        );
    }
}

/// A store whose record says `version`.
fn store_of_format(version: u32) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    drop(runtime.block_on(db::open(dir.path())).unwrap());
    let db = Database::open(dir.path().join(db::FILE)).unwrap();
    let tx = db.begin_write().unwrap();
    {
        let mut table = tx.open_table(format::TABLE).unwrap();
        table
            .insert("version", version.to_le_bytes().as_slice())
            .unwrap();
        table.insert("writer", b"tenure 9.0.0".as_slice()).unwrap();
    }
    tx.commit().unwrap();
    dir
}

#[test]
fn a_store_of_a_newer_format_is_refused_naming_both_and_left_as_it_was() {
    let dir = store_of_format(STORE_FORMAT + 1);
    let before = files(dir.path());
    let found = format::inspect(dir.path()).unwrap();
    let refused = format::check(&found, dir.path()).unwrap_err();
    let message = refused.to_string();
    assert!(matches!(refused, FormatError::Newer { .. }), "{message}");
    for part in [
        format!("format {}", STORE_FORMAT + 1),
        "tenure 9.0.0".to_string(),
        format!("formats 1 to {STORE_FORMAT}"),
        "nothing was changed".to_string(),
    ] {
        assert!(message.contains(&part), "{part:?} not in: {message}");
    }
    // Opening it as the node would is refused the same way, before anything is written.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let opened = runtime.block_on(db::open(dir.path()));
    assert!(
        matches!(
            opened,
            Err(super::ControlError::Format(FormatError::Newer { .. }))
        ),
        "{:?}",
        opened.err()
    );
    assert_eq!(files(dir.path()), before, "the data dir changed");
}

/// A data dir whose replica applied a raise of the cluster's version past what this build
/// speaks (a downgrade after the raise) is refused with both versions named, untouched.
#[test]
fn a_store_of_a_cluster_at_a_newer_version_is_refused_and_left_as_it_was() {
    let dir = store_of_format(STORE_FORMAT);
    let newer = crate::version::protocols().end() + 1;
    {
        let db = redb::Database::open(dir.path().join(db::FILE)).unwrap();
        format::record_cluster_version(&db, newer).unwrap();
    }
    let before = files(dir.path());
    let found = format::inspect(dir.path()).unwrap();
    let refused = format::check(&found, dir.path()).unwrap_err();
    let message = refused.to_string();
    assert!(
        matches!(refused, FormatError::ClusterNewer { .. }),
        "{message}"
    );
    for part in [
        format!("runs at version {newer}"),
        format!(
            "speaks {}",
            crate::version::describe_window(&crate::version::protocols())
        ),
        "nothing was changed".to_string(),
    ] {
        assert!(message.contains(&part), "{part:?} not in: {message}");
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let opened = runtime.block_on(db::open(dir.path()));
    assert!(
        matches!(
            opened,
            Err(super::ControlError::Format(
                FormatError::ClusterNewer { .. }
            ))
        ),
        "{:?}",
        opened.err()
    );
    assert_eq!(files(dir.path()), before, "the data dir changed");
}

/// A format-5 store (0.2.0's) is opened as it is, not migrated: nothing is set aside and
/// its record still says 5, so 0.2.0 can open it again (a rollback during a rolling
/// upgrade). The raise to the stamps' version moves it to format 6, which 0.2.0 refuses.
#[test]
fn a_format_5_store_stays_in_format_5_until_the_cluster_allows_stamps() {
    let dir = store_of_format(5);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    drop(runtime.block_on(db::open(dir.path())).unwrap());
    assert!(
        !std::fs::read_dir(dir.path()).unwrap().any(|f| f
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".format-")),
        "nothing set aside"
    );
    let version = |dir: &Path| format::inspect(dir).unwrap().version();
    assert_eq!(version(dir.path()), Some(5));
    let raise = |to: u32| {
        let db = Database::open(dir.path().join(db::FILE)).unwrap();
        format::record_cluster_version(&db, to).unwrap();
    };
    raise(crate::version::STAMPS - 1);
    assert_eq!(version(dir.path()), Some(5));
    raise(crate::version::STAMPS);
    assert_eq!(version(dir.path()), Some(STORE_FORMAT));
    assert_eq!(STORE_FORMAT, 6);
}

#[test]
fn a_record_without_a_valid_version_is_damaged() {
    let dir = store_of_format(0);
    let found = format::inspect(dir.path()).unwrap();
    assert!(matches!(
        format::check(&found, dir.path()),
        Err(FormatError::Damaged { .. })
    ));
}

#[test]
fn a_store_left_unclean_by_a_crash_is_inspected_without_touching_it() {
    let fixture = fixture();
    // n3 was killed with SIGKILL: redb's read-only mode refuses its file until repaired.
    let dir = fixture.path().join("n3/data");
    assert!(matches!(
        redb::ReadOnlyDatabase::open(dir.join(db::FILE)),
        Err(redb::DatabaseError::RepairAborted)
    ));
    let before = files(&dir);
    assert_eq!(format::inspect(&dir).unwrap(), Found::Unversioned);
    assert_eq!(files(&dir), before);
}

#[test]
fn a_new_store_is_made_in_the_current_format() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(format::inspect(dir.path()).unwrap(), Found::Absent);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    drop(runtime.block_on(db::open(dir.path())).unwrap());
    assert_eq!(
        format::inspect(dir.path()).unwrap(),
        Found::Record {
            version: format::BEFORE_STAMPS,
            writer: format::writer(),
            cluster_version: 0,
        }
    );
    assert!(!dir.path().join("raft.redb.format-1").exists());
    // Its member id is its name's, until it records that it joins as a new member: then
    // of its name and store, in a format 0.2.0 refuses (`types.rs`).
    let db = runtime.block_on(db::open(dir.path())).unwrap();
    let store = format::store_id(&*db).unwrap();
    assert_eq!(
        format::member_id(&*db, "n1", store),
        Ok(super::types::node_id("n1"))
    );
    format::record_member_ids(&db).unwrap();
    assert_eq!(
        format::member_id(&*db, "n1", store),
        Ok(super::types::member_id("n1", store))
    );
    drop(db);
    assert!(matches!(
        format::inspect(dir.path()).unwrap(),
        Found::Record { version, .. } if version == format::STORE_FORMAT
    ));
}

/// The snapshot image of the golden samples as store format `from` recorded it (kept in
/// `tests/fixtures/format-N`), read in this build after [`format::image_from`]. Asserts
/// first that the old bytes do not read as they are (else the migration is pointless).
fn migrated_fixture(from: u32) -> super::state_machine::Image {
    let old = fixture_image(from);
    assert!(
        super::state_machine::Image::decode(&old).is_err(),
        "format {from}'s bytes read as they are: the migration would be pointless"
    );
    super::state_machine::Image::decode(&format::image_from(from, old)).unwrap()
}

/// The bytes of `tests/fixtures/format-N/snapshot-image.hex`.
fn fixture_image(from: u32) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../tests/fixtures/format-{from}/snapshot-image.hex"
    ));
    let hex: String = std::fs::read_to_string(path)
        .unwrap()
        .split_whitespace()
        .collect();
    hex::decode(hex).unwrap()
}

/// Format 5's image (0.2.0's) is format 6's without stamped answers: this build reads it
/// as it is, and writes the state back byte for byte, so 0.2.0 reads what this build
/// writes while the cluster's version is below 7 (snapshots a leader of either build
/// sends, and the stores a rollback would open) and both hash a state alike.
#[test]
fn a_format_5_snapshot_image_reads_as_it_is_and_is_written_back_the_same() {
    use super::state_machine::{Image, encode_image};
    let old = fixture_image(5);
    let image = Image::decode(&old).unwrap();
    // Format 5's samples raised the version to 7 (the probe's version then).
    let mut expected = crate::golden::samples::cluster_after(23);
    expected.version = 7;
    // Nor did they record members' stores or installs (the raise does now, from
    // version 7).
    expected.stores.clear();
    expected.installed.clear();
    assert!(image.cluster.applied.is_empty());
    assert_eq!(image.cluster, expected);
    assert_eq!(
        encode_image(&image.applied, &image.membership, &image.cluster).unwrap(),
        old
    );
    // The image ends with the state: a replica hashes the same bytes.
    assert!(old.ends_with(&image.cluster.encode().unwrap()));
}

/// The maps that end an image (stamped answers, per-slot state, members' stores, removed
/// stores, then installs) are left out while empty, from the end: every combination reads back
/// as written, and an image cut short by one byte more is refused, not read as another
/// state.
#[test]
fn an_image_s_empty_tail_is_left_out_and_read_back() {
    use super::state_machine::{Image, encode_image};
    let full = crate::golden::samples::cluster();
    assert!(
        !full.applied.is_empty()
            && !full.slot_state.is_empty()
            && !full.stores.is_empty()
            && !full.retired.is_empty()
            && !full.installed.is_empty()
    );
    let image = fixture_image(5);
    let base = Image::decode(&image).unwrap();
    for kept in 0..32u8 {
        let keep = |bit: u8| kept & (1 << bit) != 0;
        let mut cluster = full.clone();
        if !keep(0) {
            cluster.applied.clear();
        }
        if !keep(1) {
            cluster.slot_state.clear();
        }
        if !keep(2) {
            cluster.stores.clear();
        }
        if !keep(3) {
            cluster.retired.clear();
        }
        if !keep(4) {
            cluster.installed.clear();
        }
        // Empty maps from the end are left out, up to the first that is not empty.
        let left_out = (0..5).rev().take_while(|bit| !keep(*bit)).count();
        let bytes = encode_image(&base.applied, &base.membership, &cluster).unwrap();
        let whole = postcard::to_allocvec(&Image {
            applied: base.applied,
            membership: base.membership.clone(),
            cluster: cluster.clone(),
        })
        .unwrap();
        let case =
            format!("maps kept: {kept:05b} (installed, retired, stores, slot state, applied)");
        assert_eq!(bytes.len() + left_out, whole.len(), "{case}");
        let read = Image::decode(&bytes).unwrap();
        assert_eq!(read.cluster, cluster, "{case}");
        assert!(
            Image::decode(&bytes[..bytes.len() - 1]).is_err(),
            "{case}: one byte short"
        );
        // The whole encoding reads too (an image written with its empty maps).
        assert_eq!(Image::decode(&whole).unwrap().cluster, cluster, "{case}");
    }
}

/// Format 2's image reads as the same state, without a cluster id.
#[test]
fn a_format_2_snapshot_image_reads_after_its_migration() {
    // Format 2's samples were the first 19 commands (`Identify` came with format 3).
    let expected = crate::golden::samples::cluster_after(19);
    assert!(expected.id.is_none());
    assert_eq!(migrated_fixture(2).cluster, expected);
}

/// Format 3's image reads as the same state, with no session processes (format 4).
#[test]
fn a_format_3_snapshot_image_reads_after_its_migration() {
    // Format 3's samples were the first 20 commands (`OpenSessionOf` came with format 4).
    let expected = crate::golden::samples::cluster_after(20);
    assert!(expected.id.is_some() && expected.session_processes.is_empty());
    assert_eq!(migrated_fixture(3).cluster, expected);
}

/// Format 4's image reads as the same state, with cluster version 0 (format 5).
#[test]
fn a_format_4_snapshot_image_reads_after_its_migration() {
    // Format 4's samples were the first 21 commands (`RaiseVersion` came with format 5).
    let expected = crate::golden::samples::cluster_after(21);
    assert!(!expected.session_processes.is_empty() && expected.version == 0);
    assert_eq!(migrated_fixture(4).cluster, expected);
}

/// A process that applies a raise of the cluster's version past what it speaks (an older
/// build put back on a node before the raise reached it) applies nothing after the raise
/// in the same batch, records the version, and stops with an error naming both versions;
/// the data dir is then refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raise_this_build_does_not_speak_stops_apply_before_anything_after_it() {
    use crate::cluster::{Command, Proposal};
    use openraft::{CommittedLeaderId, EntryPayload, LogId};
    let dir = tempfile::tempdir().unwrap();
    let newer = crate::version::protocols().end() + 1;
    let join = |node: &str| Command::Join {
        node: node.into(),
        addr: "127.0.0.1:1".into(),
        labels: BTreeMap::new(),
    };
    let entry = |index: u64, command: Command| super::types::Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Proposal::One(command)),
    };
    {
        let db = db::open(dir.path()).await.unwrap();
        let mut sm = StateMachine::open(db.clone(), 1 << 30, Default::default()).unwrap();
        let applied = sm
            .apply(vec![
                entry(1, join("n1")),
                entry(2, Command::RaiseVersion { to: newer }),
                entry(3, join("n2")),
            ])
            .await;
        let error = applied.unwrap_err().to_string();
        assert!(
            error.contains(&format!("version is {newer}"))
                && error.contains(&format!(
                    "speaks {}",
                    crate::version::describe_window(&crate::version::protocols())
                )),
            "{error}"
        );
        let cluster = sm.cluster().read().unwrap().clone();
        assert!(cluster.members.contains_key("n1"));
        assert!(
            !cluster.members.contains_key("n2"),
            "an entry after the unspoken raise was applied"
        );
        assert_eq!(cluster.version, 0);
        assert_eq!(*sm.applied_index().borrow(), 1);
    }
    let found = format::inspect(dir.path()).unwrap();
    assert!(matches!(
        format::check(&found, dir.path()),
        Err(FormatError::ClusterNewer { .. })
    ));
}

/// `snapshot restore` of a snapshot whose cluster runs at a version this build does not
/// speak is refused naming both, before the data dir gets a store: the restored cluster
/// would refuse every node of this build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_a_newer_cluster_version_is_not_restored() {
    let newer = crate::version::protocols().end() + 1;
    let (_files, file) = snapshot_file(Cluster {
        version: newer,
        ..Cluster::default()
    });
    let data = tempfile::tempdir().unwrap();
    let me = super::types::Peer::new("n1", "127.0.0.1:1");
    let refused = super::recover::restore(data.path(), &file, &me, 0, 0)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(&format!("runs at version {newer}"))
            && refused.contains("nothing was changed"),
        "{refused}"
    );
    assert!(!data.path().join(db::FILE).exists(), "a store was made");
}

/// A restored cluster records no member's store: the backup's are those of the old
/// cluster's processes, and the restoring node has a new store. Kept, they would have
/// the new cluster's leaders address the restoring node as its old store, which it
/// would refuse (`service.rs`), and the node could never follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_cluster_records_no_member_s_old_store() {
    let mut cluster = crate::golden::samples::cluster();
    cluster.version = crate::version::ADDRESSED;
    let old = crate::cluster::StoreId::from_bytes([0x77; 16]);
    cluster.stores.insert("n1".into(), old);
    cluster.stores.insert("n2".into(), old);
    let (_files, file) = snapshot_file(cluster);
    let data = tempfile::tempdir().unwrap();
    let me = super::types::Peer::new("n1", "127.0.0.1:1");
    super::recover::restore(data.path(), &file, &me, 0, 0)
        .await
        .unwrap();
    let db = db::open(data.path()).await.unwrap();
    let sm = super::state_machine::StateMachine::open(db, 1 << 30, Default::default()).unwrap();
    let stores = sm.cluster().read().unwrap().stores.clone();
    assert!(stores.is_empty(), "{stores:?}");
}

/// A snapshot file of a cluster in `cluster`'s state, in a temporary directory.
fn snapshot_file(cluster: Cluster) -> (tempfile::TempDir, std::path::PathBuf) {
    use super::backup::{FILE_FORMAT, Header, Taken, sha256, write_file};
    use super::state_machine::Image;
    let image = postcard::to_allocvec(&Image {
        applied: None,
        membership: Default::default(),
        cluster,
    })
    .unwrap();
    let files_dir = tempfile::tempdir().unwrap();
    let file = files_dir.path().join("snap");
    write_file(
        &file,
        &Taken {
            header: Header {
                file_format: FILE_FORMAT,
                store_format: STORE_FORMAT,
                index: 0,
                term: 0,
                voters: vec![],
                taken_by: "n1".into(),
                taken_ms: 0,
                writer: format::writer(),
                bytes: image.len() as u64,
                sha256: sha256(&image),
                cluster: None,
            },
            image,
        },
    )
    .unwrap();
    (files_dir, file)
}

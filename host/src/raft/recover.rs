//! `tenure recover`: a surviving node made the only voter when a majority of voters is
//! gone for good, like etcd's `--force-new-cluster` or Consul's `peers.json`.
//!
//! Raft cannot commit anything without a majority of its voters, so when most of them
//! are lost for good, nothing an online command could do would help: the survivor's own
//! store is rewritten while it is stopped. [`recover`] applies everything in the
//! survivor's log (committed or not: it is the best history left), then replaces the
//! log by one snapshot whose membership has this node as the only voter:
//! - **Tokens are bumped.** Fencing tokens are log indexes. The lost majority may have
//!   committed grants this node never saw, with indexes above its own last one, so the
//!   snapshot is placed `bump` indexes further on (default [`DEFAULT_BUMP`]): every token
//!   granted after the recovery is above every token the old cluster can have granted,
//!   and a downstream that keeps the highest token accepts the new owners.
//! - **A new cluster id.** The recovered node is a new cluster (`cluster/identity.rs`):
//!   a lost node that comes back after all is refused, not merged.
//! - **Every session ends, and every other member is forgotten.** The lost nodes come
//!   back as new members (`join`), as a node that lost its disk does. No member's store
//!   is recorded any more (`Cluster::stores`): each is recorded again at its next session.
//! - **Nothing is granted for a full TTL after the recovered node leads.** The lost
//!   nodes' plugins may still run for all the survivor knows (a node "lost" may only be
//!   cut off), and their leases last at most a TTL from their last renewal: the store
//!   carries a hold ([`hold`]) that the node honours once it leads (`node/leader.rs`),
//!   then clears.
//!
//! The vote keeps its term, so the node's next election is in a higher term than any it
//! took part in. The store's lock (`node/preflight.rs`) keeps this from running beside
//! the node.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use openraft::{CommittedLeaderId, EntryPayload, Membership};
use redb::{Database, Durability, ReadableDatabase, TableDefinition};

use super::db::{self, COMMITTED, CURRENT, LOG, META, PURGED, SNAPSHOT, VOTE};
use super::error::ControlError;
use super::state_machine::{Image, Stored};
use super::types::{Entry, LogId, Peer, SnapshotMeta, StoredMembership, Vote};
use crate::cluster::{Cluster, ClusterId, Command, Proposal};

/// How far on the recovered store's first index is placed by default: far above what a
/// cluster commits while a survivor is cut off from it (a busy cluster commits about a
/// thousand entries a second; this is 11 days of that).
pub const DEFAULT_BUMP: u64 = 1_000_000_000;

/// The smallest bump taken: below it, new tokens could fall among those a lost majority
/// granted in a few minutes.
pub const MIN_BUMP: u64 = 1_000_000;

/// The table that holds the hold, apart from the format record.
const RECOVERY: TableDefinition<&str, &[u8]> = TableDefinition::new("recovery");
const HOLD: &str = "hold";

/// What [`recover`] changed, for the operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// The last entry of the survivor's log before the recovery.
    pub last: Option<(u64, u64)>,
    /// The index of the snapshot written: every new token is above it.
    pub index: u64,
    /// The term of the vote kept.
    pub term: u64,
    /// Sessions ended.
    pub sessions: Vec<String>,
    /// Members forgotten (every one but this node).
    pub forgotten: Vec<String>,
    /// The voters before.
    pub voters_before: Vec<String>,
    /// The cluster's id before (`None` for a store of a build without ids), and the new
    /// cluster's.
    pub cluster_before: Option<ClusterId>,
    pub cluster: ClusterId,
}

/// Rewrites the store in `data_dir` so that `me` is the only voter; see the module doc.
/// The node must not run (the caller holds the data dir's lock). `now_ms` stamps the
/// history entries it adds.
pub async fn recover(
    data_dir: &Path,
    me: &Peer,
    bump: u64,
    now_ms: u64,
) -> Result<Recovered, ControlError> {
    let path = db::path(data_dir);
    let storage = |e: &dyn std::fmt::Display| ControlError::Storage {
        path: path.clone(),
        reason: e.to_string(),
    };
    if !path.exists() {
        return Err(storage(&"no Raft store here: nothing to recover"));
    }
    let db = db::open(data_dir).await?;
    let (image, entries, vote) = read(&db).map_err(|e| storage(&e))?;
    rewrite(&db, image, entries, vote, me, bump, now_ms).map_err(|e| storage(&e))
}

/// Seeds a new cluster in the empty `data_dir` from the snapshot file `file`, with `me`
/// as its only voter: as [`recover`] does from a survivor's own store (sessions ended,
/// other members forgotten, tokens `bump` further on, a hold on grants).
pub async fn restore(
    data_dir: &Path,
    file: &Path,
    me: &Peer,
    bump: u64,
    now_ms: u64,
) -> Result<Recovered, ControlError> {
    let path = db::path(data_dir);
    if path.exists() {
        return Err(ControlError::Storage {
            path,
            reason: "this data dir already has a Raft store; restore seeds a new cluster \
                     into an empty data dir (give the node a new one)"
                .into(),
        });
    }
    let (_, image) = super::backup::read_file(file).map_err(ControlError::Options)?;
    // Refused before the data dir gets a store: a cluster restored at a version this
    // build does not speak would refuse every node of this build.
    spoken(image.cluster.version).map_err(ControlError::Options)?;
    let db = db::open(data_dir).await?;
    rewrite(&db, image, Vec::new(), None, me, bump, now_ms).map_err(|e| ControlError::Storage {
        path,
        reason: e.to_string(),
    })
}

/// Applies `entries` after `image`, then writes the one-voter snapshot (see the module
/// doc).
fn rewrite(
    db: &Database,
    image: Image,
    entries: Vec<Entry>,
    vote: Option<Vote>,
    me: &Peer,
    bump: u64,
    now_ms: u64,
) -> Result<Recovered, redb::Error> {
    let Image {
        applied,
        membership,
        mut cluster,
    } = image;
    let mut last = applied;
    let mut membership = membership;
    for entry in entries {
        match entry.payload {
            EntryPayload::Blank => {}
            EntryPayload::Normal(proposal) => {
                cluster.apply_proposal(entry.log_id.index, entry.log_id.leader_id.term, proposal);
            }
            EntryPayload::Membership(m) => {
                membership = StoredMembership::new(Some(entry.log_id), m);
            }
        }
        last = Some(entry.log_id);
    }
    // The survivor's log may hold a raise it had not applied yet.
    spoken(cluster.version).map_err(redb::Error::Corrupted)?;
    let voters_before: Vec<String> = membership
        .membership()
        .voter_ids()
        .filter_map(|id| {
            membership
                .membership()
                .get_node(&id)
                .map(|p| p.name.clone())
        })
        .collect();
    let term = last
        .map_or(0, |l| l.leader_id.term)
        .max(vote.map_or(0, |v| v.leader_id().get_term()));
    let index = last
        .map_or(0, |l| l.index)
        .saturating_add(bump.max(MIN_BUMP));
    let (sessions, forgotten) = forget(&mut cluster, &me.name, index, term, now_ms);
    // A new cluster: the lost nodes of the old one are refused should they come back
    // (`cluster/identity.rs`).
    let old_id = cluster.id.replace(ClusterId::random());
    let new_id = cluster.id;

    // A wildcard listen address is no address to dial: keep the one the cluster knew.
    let unspecified = me
        .addr
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_unspecified());
    // This store's member id (`types.rs`): the survivor's own, or the new store's of a
    // restore.
    let me_id = super::format::store_id(db)
        .and_then(|store| super::format::member_id(db, &me.name, store))
        .map_err(redb::Error::Corrupted)?;
    let me = match membership.membership().get_node(&me_id) {
        Some(known) if unspecified => known.clone(),
        _ => me.clone(),
    };
    let me = &me;
    let log_id = LogId::new(CommittedLeaderId::new(term, me_id), index);
    let only_me = Membership::new(
        vec![BTreeSet::from([me_id])],
        BTreeMap::from([(me_id, me.clone())]),
    );
    let membership = StoredMembership::new(Some(log_id), only_me);
    let cluster_version = cluster.version;
    let data = super::state_machine::encode_image(&Some(log_id), &membership, &cluster)
        .map_err(|e| redb::Error::Corrupted(format!("cannot encode the snapshot: {e}")))?;
    let stored = Stored {
        meta: SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: membership,
            snapshot_id: format!("recovered-{index}"),
        },
        data,
    };
    write(
        db,
        &stored,
        log_id,
        Vote::new(term, me_id),
        now_ms,
        cluster_version,
    )?;
    Ok(Recovered {
        last: last.map(|l| (l.leader_id.term, l.index)),
        index,
        term,
        sessions,
        forgotten,
        voters_before,
        cluster_before: old_id,
        cluster: new_id.expect("set above"),
    })
}

/// Refuses a state whose cluster runs at a version this build does not speak.
fn spoken(version: u32) -> Result<(), String> {
    let speaks = crate::version::protocols();
    if version <= *speaks.end() {
        return Ok(());
    }
    Err(format!(
        "the state is of a cluster that runs at version {version} (tenure/{version}); this build speaks {}: run this with a build that speaks tenure/{version}; nothing was changed",
        crate::version::describe_window(&speaks)
    ))
}

/// Ends every session and forgets every member but `me`, as committed commands would.
fn forget(
    cluster: &mut Cluster,
    me: &str,
    index: u64,
    term: u64,
    now_ms: u64,
) -> (Vec<String>, Vec<String>) {
    let sessions: Vec<(String, u64)> = cluster
        .members
        .iter()
        .filter_map(|(name, m)| Some((name.clone(), m.session.as_ref()?.id)))
        .collect();
    for (node, session) in &sessions {
        cluster.apply_proposal(
            index,
            term,
            Proposal::One(Command::EndSession {
                node: node.clone(),
                session: *session,
                expired_in: Some(term),
                at_ms: now_ms,
            }),
        );
    }
    let others: Vec<String> = cluster
        .members
        .keys()
        .filter(|name| *name != me)
        .cloned()
        .collect();
    for node in &others {
        cluster.apply_proposal(
            index,
            term,
            Proposal::One(Command::Remove {
                node: node.clone(),
                at_ms: now_ms,
            }),
        );
    }
    // The stores recorded are the old cluster's processes'; a restore runs on a new
    // store, and each member's is recorded again when it next opens a session. Kept,
    // the new cluster's leaders would address this node as its old store, and it would
    // refuse them (`service.rs`). The retired stores go too: the removals just applied
    // retired every other member's store, and those members are to come back (wiped, as
    // the recovery runbook says, or on their old data dirs, which the new cluster id
    // refuses anyway).
    cluster.stores.clear();
    cluster.retired.clear();
    (sessions.into_iter().map(|(n, _)| n).collect(), others)
}

type Contents = (Image, Vec<Entry>, Option<Vote>);

/// The last snapshot (or an empty state), the log after it, and the vote.
fn read(db: &Database) -> Result<Contents, redb::Error> {
    let tx = db.begin_read()?;
    let snapshot = tx.open_table(SNAPSHOT)?;
    let image = match snapshot.get(CURRENT)? {
        Some(value) => {
            let stored: Stored = decode(value.value())?;
            Image::decode(&stored.data)
                .map_err(|e| redb::Error::Corrupted(format!("unreadable snapshot: {e}")))?
        }
        None => Image {
            applied: None,
            membership: StoredMembership::default(),
            cluster: Cluster::default(),
        },
    };
    let after = image.applied.map_or(0, |id| id.index + 1);
    let log = tx.open_table(LOG)?;
    let mut entries = Vec::new();
    for row in log.range(after..)? {
        let (_, value) = row?;
        entries.push(decode::<Entry>(value.value())?);
    }
    let meta = tx.open_table(META)?;
    let vote = match meta.get(VOTE)? {
        Some(value) => Some(decode::<Vote>(value.value())?),
        None => None,
    };
    Ok((image, entries, vote))
}

// `db::decode`/`db::encode` answer openraft's `StorageError`; these answer redb's, so that
// the redb calls of this offline rewrite chain with `?` under one error type.
fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, redb::Error> {
    postcard::from_bytes(bytes)
        .map_err(|e| redb::Error::Corrupted(format!("unreadable Raft store value: {e}")))
}

fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, redb::Error> {
    postcard::to_allocvec(value)
        .map_err(|e| redb::Error::Corrupted(format!("cannot encode a Raft store value: {e}")))
}

/// Replaces the log by `stored`, in one durable transaction with the vote, the purged
/// and committed pointers and the hold.
fn write(
    db: &Database,
    stored: &Stored,
    log_id: LogId,
    vote: Vote,
    now_ms: u64,
    cluster_version: u32,
) -> Result<(), redb::Error> {
    let mut tx = db.begin_write()?;
    tx.set_durability(Durability::Immediate)?;
    super::format::set_cluster_version(&tx, cluster_version).map_err(redb::Error::Corrupted)?;
    {
        let mut snapshot = tx.open_table(SNAPSHOT)?;
        snapshot.insert(CURRENT, encode(stored)?.as_slice())?;
        let mut log = tx.open_table(LOG)?;
        log.retain(|_, _| false)?;
        let mut meta = tx.open_table(META)?;
        meta.insert(VOTE, encode(&vote)?.as_slice())?;
        meta.insert(PURGED, encode(&log_id)?.as_slice())?;
        meta.insert(COMMITTED, encode(&Some(log_id))?.as_slice())?;
        let mut recovery = tx.open_table(RECOVERY)?;
        recovery.insert(HOLD, now_ms.to_le_bytes().as_slice())?;
    }
    tx.commit()?;
    Ok(())
}

/// Whether the store carries a recovery's hold: grant nothing until a full TTL after
/// this node first leads.
pub(crate) fn hold(db: &Database) -> Result<bool, redb::Error> {
    let tx = db.begin_read()?;
    match tx.open_table(RECOVERY) {
        Ok(table) => Ok(table.get(HOLD)?.is_some()),
        Err(redb::TableError::TableDoesNotExist(_)) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Clears the hold once it has been honoured.
pub(crate) fn clear_hold(db: &Arc<Database>) -> Result<(), redb::Error> {
    let tx = db.begin_write()?;
    {
        let mut table = tx.open_table(RECOVERY)?;
        table.remove(HOLD)?;
    }
    tx.commit()?;
    Ok(())
}

//! The control plane: Raft (openraft 0.9) replicating the [`Cluster`] state. The only
//! openraft user.
//!
//! Every node runs one Raft instance. Commands ([`crate::cluster::Command`]) are
//! proposed to the leader, appended to its log, replicated to a quorum of voters,
//! committed, and applied in log order to every node's in-memory [`Cluster`]
//! ([`Cluster::apply`] is deterministic, so all nodes agree, and a command's log index
//! is its fencing token). This module is the glue between openraft and the rest of
//! Tenure; the decisions (what to propose) are the node's.
//!
//! **Pieces** (one file each): `types.rs` (the type configuration, [`node_id`]),
//! `db.rs` (the `raft.redb` file), `format.rs` (its format record, and the migration of
//! an older store), `log_store.rs` (log and vote, fsynced before they are
//! acknowledged), `state_machine.rs` (the applied `Cluster` and snapshots), `network.rs`
//! and `link.rs` (Raft messages over signed calls; unreachable peers are gated and backed
//! off), `kinds.rs` (message kinds), `service.rs` (answering them), `propose.rs`
//! (forwarding commands to the leader), `stamps.rs` (numbering them, so that a retry
//! applies once), `membership.rs` (joining, promotion),
//! `rejoin.rs` (a restarted voter holds its elections until a leader reaches it),
//! `forming.rs` (a node with a new store takes no part in Raft until the nodes it was
//! given answer that it is not a member that forgot), `error.rs`.
//!
//! **Lifecycle.** [`Control::open`] opens the store and starts Raft, and returns the
//! [`Service`] that answers the control plane's message kinds (others go to the node's
//! fallback service). The node binds its [`Rpc`] with that service, then hands the
//! endpoint back with [`Control::attach`]. A node whose store was new first asks the nodes
//! it was given (`forming.rs`) inside `bootstrap` or `join`. A node listed in the initial `peers` then
//! calls [`Control::bootstrap`] with the same member set as every other initial node (it
//! is a no-op on a node whose log is not fresh, and any member but the first waits to be
//! reached by a leader before forming it, `rejoin.rs`); a node added later calls
//! [`Control::join`], which asks members in turn until the leader adds it as a learner.
//! The leader promotes caught-up learners to voters while there are fewer than
//! `voters` (default: the largest odd number up to the member count, at most 5; 1, 3, 5
//! or 7), and replaces or sheds voters that stay unreachable (`autopilot.rs`). A single
//! node is a one-voter cluster: the same path.
//! [`Control::shutdown`] stops Raft and releases the store; the node closes the endpoint
//! after it (docs/design.md's shutdown order, invariant 5).
//!
//! **Reading.** [`Control::state`] is the applied state (possibly behind the leader);
//! [`Control::applied`] streams the applied index to wait on. [`Control::ensure_leadership`]
//! runs a heartbeat round to a quorum that starts after the call: the leader acks session
//! renewals only after one (docs/design.md §5.4, "Sessions and leases").
//!
//! **Logging.** openraft logs every failed message to an unreachable peer at ERROR; the
//! node adds [`LOG_FILTER`] to its filter, and this module logs reachability changes
//! itself (once per outage, rate-limited).
//!
//! What it deliberately does not do: remove members or demote voters (a dead voter stays
//! a voter until an operator action exists), use PreVote (openraft 0.9 has none: a node
//! returning from a partition may force one election; a *restarted* one does not, nor
//! does a fresh initial member that starts after the others formed the cluster, see
//! `rejoin.rs`), or decide anything about the
//! cluster state.

mod autopilot;
mod backup;
mod checksums;
mod db;
mod error;
mod format;
mod forming;
mod forwards;
mod heard;
mod kinds;
mod link;
mod log_store;
mod membership;
mod network;
mod propose;
mod recover;
mod refusals;
mod rejoin;
mod removed;
mod replace;
mod rounds;
mod service;
mod snapshot_data;
mod stamps;
mod state_machine;
mod step_back;
mod types;

#[cfg(test)]
mod addressed_tests;
#[cfg(test)]
mod attack_tests;
#[cfg(test)]
mod decode_proptests;
#[cfg(test)]
mod format_tests;
#[cfg(test)]
mod forming_tests;
#[cfg(test)]
mod golden;
#[cfg(test)]
mod healing_tests;
#[cfg(test)]
mod once_tests;
#[cfg(test)]
mod replace_tests;
#[cfg(test)]
mod retired_tests;
#[cfg(test)]
pub(crate) use golden::{golden_store_samples, golden_wire_samples};
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use openraft::error::RaftError as OpenRaftError;
use openraft::{ServerState, SnapshotPolicy};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use backup::{
    FILE_FORMAT as SNAPSHOT_FILE_FORMAT, Header as SnapshotHeader, Taken as TakenSnapshot,
    read_header as read_snapshot_header, sha256 as snapshot_sha256,
    write_file as write_snapshot_file,
};
pub use checksums::{DEFAULT_CHECK_EVERY as DEFAULT_REPLICA_CHECK, Hashed, UNSAFE_CORRUPT_REPLICA};
pub use error::{ControlError, ProposeError};
pub use format::{
    BEFORE_STAMPS, FORMATS, FormatError, Found, STORE_FORMAT, check as check_format,
    inspect as inspect_format,
};
pub use forming::{fresh_store_info, knows_me};
pub use kinds::{
    APPEND_ENTRIES, APPEND_ENTRIES_TO, INSTALL_SNAPSHOT, INSTALL_SNAPSHOT_TO, JOIN, JoinReply,
    NODE_KINDS, PROPOSE, ProposeReply, REPLACE, REPLICA_HASHES, STORE_INFO, VOTE, VOTE_TO,
    plain as plain_kind,
};
pub use recover::{DEFAULT_BUMP, MIN_BUMP, Recovered, recover, restore};
pub use refusals::Refusal;
pub use service::RaftService;
pub use types::{Metrics, NodeId, Peer, TypeConfig, node_id};

use crate::cluster::{Cluster, Command, Outcome, Proposal, Response};
use crate::rpc::{Rpc, Service};
use log_store::LogStore;

/// How long opening waits for openraft to replay the log up to its committed entry.
const REPLAY_BOUND: Duration = Duration::from_secs(10);
pub use autopilot::{MemberList, MemberRow};
use network::{Attached, Endpoint, Network};
use state_machine::StateMachine;
use types::{CheckIsLeaderError, InitializeError, Raft};

/// The tracing directives a node adds to its filter: openraft logs each failed message to
/// an unreachable peer (every heartbeat, and on every leadership check) at ERROR from
/// these two modules; this module reports reachability itself (`link.rs`) and Raft's
/// fatal errors from its metrics. Everything else openraft logs at ERROR still shows.
pub const LOG_FILTER: &str =
    "openraft=error,openraft::replication=off,openraft::core::raft_core=off";

/// The largest number of voters.
pub const MAX_VOTERS: usize = 7;

/// The control plane's settings. Start from [`ControlOptions::new`] and change what
/// differs; tests shrink the timings and the snapshot threshold.
#[derive(Clone, Debug)]
pub struct ControlOptions {
    /// Where `raft.redb` lives (the node's data directory).
    pub data_dir: PathBuf,
    /// This node's name: its certificate's, the same as its RPC endpoint's.
    pub name: String,
    /// This node joins as a new member (it was given `join`, or its cluster knows its
    /// name already: its data dir was lost): a store that is new at open takes a member
    /// id of its name and store, never its name's (`types.rs`). Default false: an
    /// initial member, known by its name's id.
    pub new_member: bool,
    /// When this node's run began, if before [`Control::open`]: it takes no Raft
    /// message before its Raft starts, so a node that heard no leader since answers the
    /// time since then (`heard.rs`, *Started*). Taken once the run holds its data dir, so
    /// no other run of this store can hear anything after it. Default: at open.
    pub started: Option<std::time::Instant>,
    /// How many voters the leader keeps (1, 3, 5 or 7); `None` (the default): the
    /// largest odd number up to the members that are not gone, at most 5
    /// (`autopilot.rs`).
    pub voters: Option<usize>,
    /// A voter the leader could not reach for this long is replaced by a caught-up
    /// learner, or the voters shrink (default 3 minutes; `autopilot.rs`).
    pub replace_voter_after: Duration,
    /// The leader's heartbeat interval (default 50 ms); also openraft's deadline for an
    /// AppendEntries message.
    pub heartbeat: Duration,
    /// A follower that hears no leader for `election_max` (openraft's leader lease, during
    /// which it also refuses votes) plus a time between `election_min` and
    /// `election_max` drawn once per start (default 150–300 ms), checked every 1.5
    /// heartbeats, starts an election. [`ControlOptions::paced_for`] sets all three from
    /// the lease TTL.
    pub election_min: Duration,
    /// See `election_min`.
    pub election_max: Duration,
    /// A snapshot is built every this many applied entries (default 5000).
    pub snapshot_logs: u64,
    /// Log entries a snapshot covers that are kept anyway (default 500), so a follower a
    /// little behind catches up from the log rather than a whole snapshot.
    pub keep_logs: u64,
    /// Bound on [`Control::propose`], retries across leader changes included (default 5 s).
    pub propose_timeout: Duration,
    /// How long the leader lets a joining node catch up before answering its JOIN (default
    /// 2 s); a learner not caught up by then is promoted later.
    pub join_catch_up: Duration,
    /// Bound on [`Control::join`] (default 30 s).
    pub join_timeout: Duration,
    /// The largest Raft message payload (default 1 MiB − 16 KiB: the transport's frame
    /// limit with room for the envelope). Snapshot chunks and replication batches are
    /// half of it; a command may be a quarter.
    pub max_payload: usize,
    /// The largest snapshot this node receives from a leader (default 1 GiB); chunks past
    /// it, or out of order, are refused (`snapshot_data.rs`). A snapshot is the whole
    /// [`Cluster`] in postcard, held in memory on every node; plugin state, at most
    /// 64 KiB per resource, dominates it, so 1 GiB is some 16,000 resources at the largest
    /// state each: far above what one in-memory state is meant to carry, while still a
    /// bound on what a peer can make this node hold.
    pub max_snapshot: usize,
    /// How often the leader compares the members' replicas with its own (default 30 s;
    /// `checksums.rs`).
    pub replica_check: Duration,
}

impl ControlOptions {
    /// The defaults (docs/design.md §6) for node `name` with its data in `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>, name: impl Into<String>) -> ControlOptions {
        ControlOptions {
            data_dir: data_dir.into(),
            name: name.into(),
            new_member: false,
            started: None,
            voters: None,
            replace_voter_after: Duration::from_secs(180),
            heartbeat: Duration::from_millis(50),
            election_min: Duration::from_millis(150),
            election_max: Duration::from_millis(300),
            snapshot_logs: 5000,
            keep_logs: 500,
            propose_timeout: Duration::from_secs(5),
            join_catch_up: Duration::from_secs(2),
            join_timeout: Duration::from_secs(30),
            max_payload: (1 << 20) - (16 << 10),
            max_snapshot: 1 << 30,
            replica_check: DEFAULT_REPLICA_CHECK,
        }
    }

    /// Raft's timings for a lease TTL of `ttl`: the defaults from 2 s up, shorter below.
    ///
    /// Why: when the leader dies, no renewal is acknowledged until a new leader is elected,
    /// so every other node's lease runs on. A node renews every T/4 and asks its plugins
    /// to stop a stop grace (at most T/4) before its deadline, T − T/20 after its last
    /// acknowledged renewal was sent. So the election and one renewal must fit in about
    /// T − T/4 − T/20 − T/4 − (round trips) = 0.45 T, or losing the leader stops every
    /// plugin in the cluster. openraft detects a dead leader `election_max` +
    /// (`election_min` to `election_max`) after its last heartbeat, plus up to one tick
    /// (1.5 heartbeats): 450–675 ms at the defaults, which fits 2 s (0.9 s) but not 500 ms
    /// (225 ms). Here the heartbeat is T/25 (20 to 50 ms), `election_max` 3T/20 (at least
    /// three heartbeats, at most 300 ms) and `election_min` half of it (at least 1.5
    /// heartbeats): at T = 500 ms, 20 ms and 37–75 ms, so a dead leader is noticed
    /// 112–180 ms after its last heartbeat, and a follower must miss 112 ms of heartbeats
    /// to start an election. Below 500 ms the window is shorter than openraft can be
    /// paced for on a loaded machine: an election there can cost the other nodes their
    /// leases (docs/design.md §5.4, "Leader loss").
    pub fn paced_for(mut self, ttl: Duration) -> Self {
        let ms = Duration::from_millis;
        self.heartbeat = (ttl / 25).clamp(ms(20), ms(50));
        self.election_max = (ttl * 3 / 20).clamp(self.heartbeat * 3, ms(300));
        self.election_min = (self.election_max / 2).max(self.heartbeat * 3 / 2);
        self
    }

    /// The largest encoded command [`Control::propose`] accepts.
    pub fn max_command(&self) -> usize {
        self.max_payload / 4
    }

    fn validate(&self) -> Result<(), ControlError> {
        let bad = |m: String| Err(ControlError::Options(m));
        crate::pki::validate_name(&self.name)
            .or_else(|e| bad(format!("name {:?}: {e}", self.name)))?;
        if let Some(voters) = self.voters
            && !(1..=MAX_VOTERS).contains(&voters)
        {
            return bad(format!("voters is {voters}; expected 1 to {MAX_VOTERS}"));
        }
        if self.heartbeat.is_zero() || self.election_min <= self.heartbeat {
            return bad(format!(
                "the election timeout ({:?}) must be longer than the heartbeat ({:?}), which must not be zero",
                self.election_min, self.heartbeat
            ));
        }
        if self.election_max <= self.election_min {
            return bad(format!(
                "election_max ({:?}) must be longer than election_min ({:?})",
                self.election_max, self.election_min
            ));
        }
        if self.snapshot_logs == 0 {
            return bad("snapshot_logs must be at least 1".into());
        }
        if self.max_payload < 64 << 10 {
            return bad(format!(
                "max_payload is {} bytes; expected at least 64 KiB",
                self.max_payload
            ));
        }
        Ok(())
    }

    fn raft_config(&self) -> Result<openraft::Config, ControlError> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        openraft::Config {
            cluster_name: "tenure".into(),
            heartbeat_interval: ms(self.heartbeat),
            election_timeout_min: ms(self.election_min),
            election_timeout_max: ms(self.election_max),
            // Per snapshot chunk, and for installing the last one; chunks are small, but
            // installing fsyncs the whole state.
            install_snapshot_timeout: 3000,
            // Small, so that `add_learner(blocking)` waits until a learner is really
            // caught up (STACK-NOTES): promotion follows the same threshold.
            replication_lag_threshold: LAG_THRESHOLD,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_logs),
            snapshot_max_chunk_size: (self.max_payload / 2) as u64,
            max_in_snapshot_log_to_keep: self.keep_logs,
            // Turned on by `Control::open` (at once, or once a leader reached a
            // restarted voter: `rejoin.rs`).
            enable_elect: false,
            ..openraft::Config::default()
        }
        .validate()
        .map_err(|e| ControlError::Options(e.to_string()))
    }
}

/// How far (in entries) a learner may lag and still count as caught up.
const LAG_THRESHOLD: u64 = 50;

/// The voters and learners of the Raft group, by name, with their addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Members {
    pub voters: BTreeMap<String, String>,
    pub learners: BTreeMap<String, String>,
}

/// The control plane of one node. See the module doc for the lifecycle.
pub struct Control {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The store, to wait at shutdown until every Raft task has let go of it.
    db: Weak<redb::Database>,
}

/// What the handle, the service and the background tasks share.
pub(crate) struct Shared {
    raft: Raft,
    me: NodeId,
    name: String,
    options: ControlOptions,
    endpoint: Endpoint,
    metrics: watch::Receiver<Metrics>,
    cluster: Arc<RwLock<Cluster>>,
    /// The cluster's id once the replica has one (`cluster/identity.rs`).
    cluster_id: crate::cluster::ClusterCell,
    /// The names of the initial members this node was started with (`peers`), once
    /// `bootstrap` is called; said in STORE_INFO answers, so that initial members given
    /// different lists refuse to form (`forming.rs`).
    initial_peers: std::sync::OnceLock<Vec<String>>,
    /// The cluster's version as applied (`crate::version`).
    cluster_version: Arc<std::sync::atomic::AtomicU32>,
    /// The version this node, as leader, decided to raise the cluster to
    /// ([`Control::raising`]); joins are held to it (`service.rs`).
    raising: std::sync::atomic::AtomicU32,
    /// This node's store's id, from its format record (`format.rs`).
    store: crate::cluster::StoreId,
    applied: watch::Receiver<u64>,
    /// Counts AppendEntries received: a leader has reached this node (`rejoin.rs`).
    appends: watch::Sender<u64>,
    /// When a leader of each recent term was last heard: the voter's half of the lease
    /// handoff (`heard.rs`).
    heard: heard::Heard,
    /// Members' messages refused as not their business (`refusals.rs`).
    refusals: refusals::Refusals,
    /// Leadership rounds, one at a time and shared (`rounds.rs`).
    rounds: rounds::Rounds,
    /// Held on the leader while a name joins or is removed for good
    /// (`membership.rs`), so that the two never interleave.
    renaming: Arc<tokio::sync::Mutex<()>>,
    /// The store was new at open and this node has not yet formed or joined the cluster:
    /// it refuses Raft's messages (`forming.rs`).
    forming: std::sync::atomic::AtomicBool,
    /// The store was recovered (`recover.rs`) and the hold not yet honoured: grant
    /// nothing until a full TTL after this node first leads.
    hold: std::sync::atomic::AtomicBool,
    /// Proposals in flight (at most `forwards::FORWARDS`), and single commands waiting
    /// to be combined into batches.
    forwards: forwards::Forwards<propose::Attempt>,
    /// This run's command numbers and which are in flight (`stamps.rs`).
    stamps: stamps::Stamps,
    /// Each peer's reachability, as this node's Raft messages found it (`link.rs`).
    links: network::Links,
    /// Why each member's last voter change was made, as this node made it while leading
    /// (`autopilot.rs`), for `tenure member list`.
    replaced: Mutex<BTreeMap<String, String>>,
    /// Why this node was taken out of the cluster, once it learns so (`removed.rs`).
    removed: watch::Sender<Option<String>>,
    /// The term this node leads in, and when it saw itself begin to lead
    /// (`autopilot.rs`).
    leading: Mutex<Option<(u64, Instant)>>,
    /// This replica's recent state hashes, and the members whose replicas differ from
    /// this leader's (`checksums.rs`).
    checksums: Arc<checksums::Checksums>,
    /// Told when a vote shows a voter with a longer log in this node's way (`step_back.rs`).
    step_back: Arc<step_back::StepBack>,
}

impl Control {
    /// Opens the Raft store in `options.data_dir` and starts Raft. Returns the handle and
    /// the service to bind the node's [`Rpc`] with: it answers the control plane's kinds
    /// and hands every other kind to `fallback`. Raft sends nothing until
    /// [`Control::attach`].
    pub async fn open(
        options: ControlOptions,
        fallback: Arc<dyn Service>,
    ) -> Result<(Control, Arc<dyn Service>), ControlError> {
        options.validate()?;
        let config = options.raft_config()?;
        let db = db::open(&options.data_dir).await?;
        let checksums = Arc::new(checksums::Checksums::default());
        let sm = StateMachine::open(db.clone(), options.max_snapshot, checksums.clone()).map_err(
            |e| ControlError::Storage {
                path: db::path(&options.data_dir),
                reason: e.to_string(),
            },
        )?;
        let store = format::store_id(&*db).map_err(|reason| ControlError::Storage {
            path: db::path(&options.data_dir),
            reason,
        })?;
        let cluster = sm.cluster();
        let cluster_id = sm.cluster_id();
        let cluster_version = sm.version();
        let applied = sm.applied_index();
        let mut log_store = LogStore::new(db.clone(), options.max_payload / 2);
        let committed = openraft::storage::RaftLogStorage::read_committed(&mut log_store)
            .await
            .map_err(|e| ControlError::Storage {
                path: db::path(&options.data_dir),
                reason: e.to_string(),
            })?
            .map_or(0, |id| id.index);
        // A new store: no vote, no log, no snapshot (`forming.rs`).
        let fresh = {
            let unreadable = |e: types::StorageError| ControlError::Storage {
                path: db::path(&options.data_dir),
                reason: e.to_string(),
            };
            let state = openraft::storage::RaftLogStorage::get_log_state(&mut log_store)
                .await
                .map_err(unreadable)?;
            let vote = openraft::storage::RaftLogStorage::read_vote(&mut log_store)
                .await
                .map_err(unreadable)?;
            state.last_log_id.is_none() && vote.is_none() && *applied.borrow() == 0
        };
        let hold = recover::hold(&db).map_err(|e| ControlError::Storage {
            path: db::path(&options.data_dir),
            reason: format!("cannot read the recovery hold: {e}"),
        })?;
        // A new member's new store takes an id of its own, before Raft (which takes the
        // id once) starts: a node that lost its disk never comes back as its old id.
        if fresh && options.new_member {
            format::record_member_ids(&db).map_err(|reason| ControlError::Storage {
                path: db::path(&options.data_dir),
                reason,
            })?;
        }
        let me = format::member_id(&*db, &options.name, store).map_err(|reason| {
            ControlError::Storage {
                path: db::path(&options.data_dir),
                reason,
            }
        })?;
        let weak = Arc::downgrade(&db);
        drop(db);
        let endpoint = Endpoint::default();
        let links = network::Links::default();
        let step_back = Arc::new(step_back::StepBack::default());
        let network = Network::new(
            (me, store, me != node_id(&options.name)),
            step_back.clone(),
            endpoint.clone(),
            links.clone(),
            options.max_payload,
            cluster.clone(),
        );
        let raft = Raft::new(me, Arc::new(config), network, log_store, sm)
            .await
            .map_err(|e| ControlError::Start(e.to_string()))?;
        // openraft replays the log up to the stored committed pointer on its own; wait for
        // it, so that what the node does first (refusing revoked keys, `status`) rests on
        // the state it had when it stopped, not on its last snapshot.
        let mut replay = applied.clone();
        let replayed = tokio::time::timeout(REPLAY_BOUND, replay.wait_for(|at| *at >= committed))
            .await
            .is_ok_and(|r| r.is_ok());
        if !replayed {
            tracing::warn!(
                event = crate::events::CONTROL_ERROR,
                committed,
                applied = *applied.borrow(),
                "the log was not replayed up to its committed entry in time; going on"
            );
        }
        let heard = match options.started {
            Some(started) => heard::Heard::started_at(started),
            None => heard::Heard::new(),
        };
        let shared = Arc::new(Shared {
            metrics: raft.metrics(),
            raft,
            me,
            name: options.name.clone(),
            options,
            endpoint,
            cluster,
            cluster_id,
            cluster_version,
            raising: std::sync::atomic::AtomicU32::new(0),
            store,
            applied,
            appends: watch::Sender::new(0),
            heard,
            refusals: refusals::Refusals::default(),
            rounds: rounds::Rounds::default(),
            initial_peers: std::sync::OnceLock::new(),
            renaming: Arc::new(tokio::sync::Mutex::new(())),
            forwards: forwards::Forwards::default(),
            stamps: stamps::Stamps::default(),
            forming: std::sync::atomic::AtomicBool::new(fresh),
            hold: std::sync::atomic::AtomicBool::new(hold),
            links,
            replaced: Mutex::default(),
            removed: watch::Sender::new(None),
            leading: Mutex::default(),
            checksums,
            step_back: step_back.clone(),
        });
        let (stop, stopped) = watch::channel(false);
        let mut tasks = vec![
            tokio::spawn(membership::housekeeping(shared.clone(), stopped.clone())),
            tokio::spawn(removed::watch_membership(shared.clone(), stopped.clone())),
            tokio::spawn(checksums::check(
                shared.clone(),
                shared.options.replica_check,
                stopped.clone(),
            )),
            tokio::spawn(step_back::keep(shared.clone(), step_back, stopped.clone())),
        ];
        // Elections start off (`raft_config`); see `rejoin.rs`.
        if rejoin::should_hold(&shared).await {
            shared
                .step_back
                .hold(&shared.raft, step_back::Hold::Rejoin, true);
            tasks.push(tokio::spawn(rejoin::release(shared.clone(), stopped)));
        } else {
            shared.raft.runtime_config().elect(true);
        }
        let service: Arc<dyn Service> = Arc::new(RaftService::new(shared.clone(), fallback));
        let control = Control {
            shared,
            stop,
            tasks: Mutex::new(tasks),
            db: weak,
        };
        Ok((control, service))
    }

    /// Whether the store carries a recovery's hold (`recover.rs`): the node grants nothing
    /// until a full TTL after it first leads, then calls [`Control::end_hold`].
    pub fn hold(&self) -> bool {
        self.shared.hold.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Clears the recovery's hold, in the store too (a restart during the hold holds
    /// again, from its own first lead).
    pub async fn end_hold(&self) -> Result<(), ControlError> {
        let Some(db) = self.db.upgrade() else {
            return Err(ControlError::Stopped("the store is closed".into()));
        };
        tokio::task::spawn_blocking(move || recover::clear_hold(&db))
            .await
            .map_err(|e| ControlError::Stopped(e.to_string()))?
            .map_err(|e| ControlError::Stopped(format!("cannot clear the recovery hold: {e}")))?;
        self.shared
            .hold
            .store(false, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Hands the node's RPC endpoint to Raft; `advertise` is the address peers dial this
    /// node at (`host:port`). Replaces an earlier endpoint.
    pub fn attach(&self, rpc: Arc<Rpc>, advertise: impl Into<String>) -> Result<(), ControlError> {
        if rpc.me() != self.shared.name {
            return Err(ControlError::Options(format!(
                "the RPC endpoint is node {}'s, not {}'s",
                rpc.me(),
                self.shared.name
            )));
        }
        let me = Peer::new(self.shared.name.clone(), advertise);
        self.shared.endpoint.set(Some(Attached { rpc, me }));
        Ok(())
    }

    /// Forms the cluster from `members` (name → address), if this node's log is fresh.
    /// Every initial member calls it with the same set; on a node that was already
    /// initialized (a restart, or a cluster formed by another member first) it does
    /// nothing. Only the member with the lowest node id forms it at once, and only while
    /// no peer answered (`forming.rs`) that it formed the cluster already; any other first
    /// waits up to `rejoin::HOLD` (2 s) for a leader to reach it, and then does nothing
    /// (`rejoin.rs`).
    pub async fn bootstrap(&self, members: &BTreeMap<String, String>) -> Result<(), ControlError> {
        let shared = &self.shared;
        shared.attached()?;
        if !members.contains_key(&shared.name) {
            return Err(ControlError::Bootstrap(format!(
                "this node ({}) is not among the members {:?}",
                shared.name,
                members.keys().collect::<Vec<_>>()
            )));
        }
        if members.len() > MAX_VOTERS {
            return Err(ControlError::Bootstrap(format!(
                "{} initial members; at most {MAX_VOTERS} can vote",
                members.len()
            )));
        }
        // Initial members are known by their names' ids (`types.rs`), which every member
        // computes without asking: a member that has not started yet is a voter too.
        let nodes: BTreeMap<NodeId, Peer> = members
            .iter()
            .map(|(name, addr)| (node_id(name), Peer::new(name.clone(), addr.clone())))
            .collect();
        if nodes.len() != members.len() {
            return Err(ControlError::Bootstrap(
                "two member names have the same node id".into(),
            ));
        }
        let peers: Vec<(String, String)> = members
            .iter()
            .map(|(name, addr)| (name.clone(), addr.clone()))
            .collect();
        let _ = shared
            .initial_peers
            .set(members.keys().cloned().collect::<Vec<String>>());
        let decided = forming::decide(shared, &peers, false).await?;
        if decided.replaced {
            // Its old member was removed for it: it joins as a new one, never forms.
            return membership::join(shared, &peers).await;
        }
        let peers_formed = decided.formed;
        let initialized = shared
            .raft
            .is_initialized()
            .await
            .map_err(|e| ControlError::Stopped(e.to_string()))?;
        if initialized {
            return Ok(());
        }
        // Only the first member campaigns at once, and only if no peer formed the cluster
        // yet; the others wait to be reached by the leader it elects, or by one that
        // exists already (`rejoin.rs`).
        if peers_formed || !rejoin::campaigns_first(shared.me, nodes.keys().copied()) {
            let started = Instant::now();
            if rejoin::reached(shared).await {
                tracing::info!(
                    event = crate::events::CLUSTER_REACHED,
                    after_ms = started.elapsed().as_millis() as u64,
                    leader = %self.leader().map_or_else(|| "unknown".to_owned(), |(name, _)| name),
                    "a leader reached this node before it bootstrapped; joined its group without a campaign"
                );
                return Ok(());
            }
            tracing::info!(
                event = crate::events::CLUSTER_REACHED,
                after_ms = started.elapsed().as_millis() as u64,
                "no leader reached this node in {:?}; it bootstraps and campaigns itself",
                rejoin::HOLD
            );
        }
        match shared.raft.initialize(nodes).await {
            Ok(()) => {
                tracing::info!(event = crate::events::CLUSTER_BOOTSTRAPPED, members = %members.keys().cloned().collect::<Vec<_>>().join(", "), "raft cluster initialized");
                Ok(())
            }
            Err(OpenRaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(OpenRaftError::APIError(e)) => Err(ControlError::Bootstrap(e.to_string())),
            Err(OpenRaftError::Fatal(e)) => Err(ControlError::Stopped(e.to_string())),
        }
    }

    /// Joins an existing cluster through `via` (member name, address): asks each in turn
    /// (the one asked forwards to the leader) until this node is a member at its
    /// advertised address, retrying with backoff up to `join_timeout`. Also how a node
    /// whose address changed updates it. Idempotent.
    pub async fn join(&self, via: &[(String, String)]) -> Result<(), ControlError> {
        forming::decide(&self.shared, via, true).await?;
        membership::join(&self.shared, via).await
    }

    /// Commits `command` and returns the state machine's answer: directly when this node
    /// leads, else through the leader (forwarded, and retried across leader changes for
    /// up to `propose_timeout` while it certainly was not applied). Commands proposed at
    /// once on this node share log entries (`forwards.rs`); each gets its own answer.
    pub async fn propose(&self, command: Command) -> Result<Response, ProposeError> {
        match self.shared.propose(Proposal::One(command)).await? {
            Outcome::One(response) => Ok(response),
            Outcome::Batch(_) => Err(ProposeError::Unknown(
                "a single command was answered as a batch".into(),
            )),
        }
    }

    /// Commits `command` on this node, which must be the leader, and returns the state
    /// machine's answer; never forwarded ([`ProposeError::NotLeader`] otherwise). For
    /// commands the leader accepts from no other member, only from an operator it
    /// authenticated itself (`cluster/authorize.rs`).
    pub async fn propose_here(&self, command: Command) -> Result<Response, ProposeError> {
        match self.shared.propose_here(Proposal::One(command)).await? {
            Outcome::One(response) => Ok(response),
            Outcome::Batch(_) => Err(ProposeError::Unknown(
                "a single command was answered as a batch".into(),
            )),
        }
    }

    /// On the leader: the Raft members, their lag and reachability (`autopilot.rs`);
    /// `None` on any other node.
    pub fn member_list(&self) -> Option<MemberList> {
        self.shared.member_list()
    }

    /// On the leader: makes learner `name` a voter now (`autopilot.rs`).
    pub async fn promote(&self, name: &str) -> Result<String, String> {
        self.shared.promote(name).await
    }

    /// On the leader: takes node `name` out of the Raft membership (see
    /// `membership.rs`). For a node an operator removed or whose key was revoked.
    pub async fn remove_member(&self, name: &str) -> Result<(), ControlError> {
        self.shared.remove_member(name).await
    }

    /// On the leader: takes member `name` out of the cluster for good, out of the Raft
    /// membership and then out of the members; refused while it has a live session
    /// (`membership.rs`, `Shared::remove_for_good`).
    pub async fn remove_for_good(&self, name: &str) -> Result<(), String> {
        self.shared.remove_for_good(name).await
    }

    /// Says that this node, as leader, is about to raise the cluster's version to `to`:
    /// from now on it admits no join of a node that speaks less (`service.rs`).
    pub fn raising(&self, to: u32) {
        self.shared
            .raising
            .fetch_max(to, std::sync::atomic::Ordering::Relaxed);
    }

    /// Commits `commands` as one log entry, applied in order, and returns one answer per
    /// command; otherwise as [`Control::propose`]. The batch must fit the same size bound
    /// as one command.
    pub async fn propose_batch(
        &self,
        commands: Vec<Command>,
    ) -> Result<Vec<Response>, ProposeError> {
        match self.shared.propose(Proposal::Batch(commands)).await? {
            Outcome::Batch(responses) => Ok(responses),
            Outcome::One(_) => Err(ProposeError::Unknown(
                "a batch was answered as a single command".into(),
            )),
        }
    }

    /// The cluster's id, set once the replica has one: the envelope layer stamps and
    /// checks it (`cluster/identity.rs`).
    pub fn cluster_id(&self) -> crate::cluster::ClusterCell {
        self.shared.cluster_id.clone()
    }

    /// This node's store's id (`format.rs`): with the incarnation, the process that opens
    /// the node's session (`cluster/sessions.rs`).
    pub fn store_id(&self) -> crate::cluster::StoreId {
        self.shared.store
    }

    /// This node's Raft member id (`types.rs`).
    pub fn member_id(&self) -> NodeId {
        self.shared.me
    }

    /// The member id node `name` holds a seat under in this node's Raft membership.
    pub fn id_of_name(&self, name: &str) -> Option<NodeId> {
        self.shared.id_of(name)
    }

    /// The applied cluster state. Hold the lock briefly: applying waits for it.
    pub fn state(&self) -> Arc<RwLock<Cluster>> {
        self.shared.cluster.clone()
    }

    /// The index of the last entry applied to [`Control::state`].
    pub fn applied(&self) -> watch::Receiver<u64> {
        self.shared.applied.clone()
    }

    /// The most proposals this node has had in flight at once (forwarded, or its own
    /// combined batches while it leads).
    #[cfg(test)]
    pub(crate) fn most_forwarded(&self) -> usize {
        self.shared.forwards.most()
    }

    /// Members' messages this node refused, per reason (`refusals.rs`).
    pub fn refusals(&self) -> Vec<(Refusal, u64)> {
        self.shared.refusals.counts()
    }

    /// The leader this node knows of: name and address.
    pub fn leader(&self) -> Option<(String, String)> {
        self.shared.leader().map(|(_, p)| (p.name, p.addr))
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.shared.metrics.borrow().current_term
    }

    /// [`Control::ensure_leadership`] for a renewal that arrived before this call,
    /// recorded first as this node hearing a leader of `term`, itself (the handoff's
    /// record, `heard.rs`): the record is made after the renewal arrived and before the
    /// round that may acknowledge it starts, and a round that Raft takes after this node
    /// adopted a higher term fails, so no answer this node gives in that term can miss a
    /// round that acknowledged anything. A failed round leaves a record too, which only
    /// makes later answers more cautious.
    pub async fn confirm_leadership(&self, term: u64) -> Result<(), ControlError> {
        self.shared.heard.record(term, Instant::now());
        self.ensure_leadership().await
    }

    /// How long ago this node last heard a leader of a term below `term` (accepted its
    /// append or snapshot, or was it and started a quorum round), or, if it heard none since
    /// it started and dropped no record of one, how long ago it started; `None` if it
    /// cannot bound the past (`heard.rs`). Waits for the hearings in flight first.
    ///
    /// With it, per session of `sessions`, how long ago a renewal of it reached the leader
    /// of the latest term below `term` this node heard, as that leader's renewal round
    /// reported it; `None` where this node cannot say (`heard.rs`, "Renewals").
    pub async fn since_leader_below(
        &self,
        term: u64,
        sessions: &[u64],
    ) -> (Option<Duration>, Vec<Option<Duration>>) {
        self.shared.heard.settle().await;
        let now = Instant::now();
        let since = self.shared.heard.since_below(term, now);
        let config = self.config_index();
        let renewals = self
            .shared
            .heard
            .renewals_below(term, config, sessions, now);
        tracing::debug!(term, ?since, "lease handoff: answered");
        (since.elapsed(), renewals)
    }

    /// On the leader of `term`: records the receive times of the renewals its renewal
    /// round is about to confirm (`node/renewal_round.rs`), as its voters will, before the
    /// round starts. Only while this node still leads `term`, checked and recorded under
    /// the gate its handoff answers settle (`heard.rs`): once it has moved to a higher
    /// term and may have answered that term's leader, it records (and confirms) nothing
    /// of `term`.
    pub async fn record_renewals(
        &self,
        term: u64,
        renewals: &[(u64, Instant)],
    ) -> Result<(), String> {
        let hearing = self.shared.heard.hearing().await;
        let leads = {
            let metrics = self.shared.metrics.borrow();
            metrics.current_term == term && metrics.current_leader == Some(self.shared.me)
        };
        if !leads {
            return Err(format!("no longer the leader of term {term}"));
        }
        let config = self.config_index();
        self.shared
            .heard
            .record_renewals(term, config, Instant::now(), renewals);
        drop(hearing);
        Ok(())
    }

    /// The log index of this node's membership configuration (0 before it has one): a
    /// renewal record counts only under the membership it was made under (`heard.rs`).
    fn config_index(&self) -> u64 {
        let metrics = self.shared.metrics.borrow();
        metrics.membership_config.log_id().map_or(0, |id| id.index)
    }

    /// A voter's side of a renewal round: taken only from the leader this node follows
    /// in `term`, so once this node has moved to a higher term (as it has before it
    /// answers that term's leader's handoff question) it takes no more of the old
    /// leader's rounds. `renewals` are, per session, how long before sending the round
    /// the leader received its renewal; each is shrunk by the clock-rate margin (1/20, as
    /// the handoff's answers are), so a leader whose clock runs fast cannot place a
    /// renewal later than it was. Recorded as a hearing in flight is (`heard.rs`). Waits
    /// up to `bound` to learn who leads `term`.
    pub async fn take_renewals(
        &self,
        from: &str,
        term: u64,
        renewals: &[(u64, Duration)],
        bound: Duration,
    ) -> Result<(), String> {
        // A round can arrive before the append that tells this node who leads `term`:
        // wait for that first (outside the gate, which a handoff answer may be waiting
        // to take), then check again under it.
        let mut metrics = self.shared.metrics.clone();
        let known = |m: &types::Metrics| {
            m.current_term > term || (m.current_term == term && m.current_leader.is_some())
        };
        let _ = tokio::time::timeout(bound, metrics.wait_for(known)).await;
        let hearing = self.shared.heard.hearing().await;
        let now = Instant::now();
        {
            let metrics = self.shared.metrics.borrow();
            let membership = metrics.membership_config.membership();
            let leader = metrics
                .current_leader
                .and_then(|id| membership.get_node(&id))
                .map(|peer| peer.name.as_str());
            if metrics.current_term != term || leader != Some(from) {
                return Err(format!(
                    "a renewal round of term {term} from {from}; this node is in term {} and follows {}",
                    metrics.current_term,
                    leader.unwrap_or("no leader")
                ));
            }
        }
        let received: Vec<(u64, Instant)> = renewals
            .iter()
            .map(|&(session, ago)| {
                let ago = ago - ago / 20;
                (session, now.checked_sub(ago).unwrap_or(now))
            })
            .collect();
        let config = self.config_index();
        self.shared
            .heard
            .record_renewals(term, config, now, &received);
        drop(hearing);
        Ok(())
    }

    /// Whether this node is the leader (as far as it knows: see
    /// [`Control::ensure_leadership`]).
    pub fn is_leader(&self) -> bool {
        self.shared.is_leader()
    }

    /// On the leader: the members whose replicas differ from its own, with the first log
    /// index found to differ (`checksums.rs`); empty on other nodes.
    pub fn diverged(&self) -> BTreeMap<String, u64> {
        self.shared
            .checksums
            .diverged()
            .into_iter()
            .map(|(name, d)| (name, d.index))
            .collect()
    }

    /// Raft's metrics, as they change.
    pub fn metrics(&self) -> watch::Receiver<Metrics> {
        self.shared.metrics.clone()
    }

    /// Resolves when Raft has stopped on its own: on a fatal error (its store failed, for
    /// instance a full disk), with the cause, or when its core ended (a panic in it drops
    /// the metrics). Never while Raft runs; [`Control::shutdown`] resolves it too, so it is
    /// for a node that has not asked Raft to stop.
    /// A node whose replica is frozen must not go on owning slots (`node/mod.rs`).
    /// Also when this node learns it was removed from the cluster (`removed.rs`).
    pub async fn failed(&self) -> String {
        let mut metrics = self.shared.metrics.clone();
        let mut removed = self.shared.removed.subscribe();
        loop {
            if let Err(fatal) = &metrics.borrow_and_update().running_state {
                return fatal.to_string();
            }
            if let Some(why) = removed.borrow_and_update().clone() {
                return why;
            }
            tokio::select! {
                changed = metrics.changed() => if changed.is_err() {
                    return "the Raft core ended".into();
                },
                _ = removed.changed() => {}
            }
        }
    }

    /// The voters and learners, by name, with their addresses.
    pub fn members(&self) -> Members {
        let metrics = self.shared.metrics.borrow();
        let membership = metrics.membership_config.membership();
        let voters: Vec<NodeId> = membership.voter_ids().collect();
        let mut members = Members::default();
        for (id, peer) in membership.nodes() {
            let side = if voters.contains(id) {
                &mut members.voters
            } else {
                &mut members.learners
            };
            side.insert(peer.name.clone(), peer.addr.clone());
        }
        members
    }

    /// The voter sets whose majorities make a quorum, by name: one set, or two during a
    /// joint membership change (a quorum is then a majority of each).
    pub fn voter_sets(&self) -> Vec<BTreeSet<String>> {
        let metrics = self.shared.metrics.borrow();
        let membership = metrics.membership_config.membership();
        let name = |id: &NodeId| membership.get_node(id).map(|p| p.name.clone());
        membership
            .get_joint_config()
            .iter()
            .map(|config| config.iter().filter_map(name).collect())
            .collect()
    }

    /// Confirms that this node is still the leader with a heartbeat round to a quorum of
    /// voters that starts after this call, and that its state has applied everything
    /// committed before it. A partitioned or deposed leader gets an error. Concurrent
    /// callers share rounds, one in flight at a time (`rounds.rs`).
    pub async fn ensure_leadership(&self) -> Result<(), ControlError> {
        self.shared.ensure_leadership().await
    }

    /// How many leadership rounds have run ([`Control::ensure_leadership`]'s, renewals',
    /// and those a join waits for: `membership.rs`).
    pub fn leadership_rounds(&self) -> u64 {
        self.shared.rounds.run()
    }

    /// Stops Raft and the background tasks, detaches the RPC endpoint and waits (up to
    /// 5 s) until the store is released, so the data directory can be opened again.
    /// Close the endpoint after this. Idempotent.
    pub async fn shutdown(&self) {
        self.stop.send_replace(true);
        if let Err(e) = self.shared.raft.shutdown().await {
            tracing::warn!(event = crate::events::CONTROL_ERROR, error = %e, "the raft task ended abnormally");
        }
        self.shared.endpoint.set(None);
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner));
        for task in tasks {
            let _ = task.await;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.db.strong_count() > 0 {
            if Instant::now() >= deadline {
                tracing::warn!(
                    event = crate::events::CONTROL_ERROR,
                    dir = %self.shared.options.data_dir.display(),
                    "raft tasks still hold the store 5 s after shutdown"
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Shared {
    /// See [`Control::ensure_leadership`].
    pub(crate) async fn ensure_leadership(&self) -> Result<(), ControlError> {
        let called = Instant::now();
        self.rounds.confirm(called, self.round()).await
    }

    /// One heartbeat round to a quorum, then the wait until this node's state has
    /// applied what was committed before it, bounded in time together. A slow one is
    /// reported with its two parts (`control.slow_round`): a renewal waits for it, so it
    /// is the first thing to look at when leases are lost under load.
    async fn round(&self) -> Result<(), ControlError> {
        let bound = self.options.election_max * 4;
        let started = Instant::now();
        let deadline = tokio::time::Instant::from_std(started + bound);
        let late = || {
            ControlError::NotLeader(format!(
                "no quorum confirmed the leadership within {bound:?}"
            ))
        };
        let (read, applied) =
            match tokio::time::timeout_at(deadline, self.raft.get_read_log_id()).await {
                Ok(Ok(ids)) => ids,
                Ok(Err(OpenRaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)))) => {
                    return Err(ControlError::NotLeader(match f.leader_node {
                        Some(peer) => format!("the leader is {peer}"),
                        None => "no leader is known".into(),
                    }));
                }
                Ok(Err(OpenRaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q)))) => {
                    // Its Display carries openraft's Debug of the membership (issue 28).
                    return Err(ControlError::NotLeader(format!(
                        "no quorum of voters answered the leadership round ({} answered)",
                        q.got.len()
                    )));
                }
                Ok(Err(OpenRaftError::Fatal(f))) => {
                    return Err(ControlError::Stopped(f.to_string()));
                }
                Err(_) => return Err(late()),
            };
        let heard = started.elapsed();
        let (read, applied) = (read.map_or(0, |l| l.index), applied.map_or(0, |l| l.index));
        if read > applied {
            let wait = self.raft.wait(None);
            let waiting = wait.applied_index_at_least(Some(read), "leadership round");
            match tokio::time::timeout_at(deadline, waiting).await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => return Err(ControlError::Stopped("raft is shutting down".into())),
                Err(_) => return Err(late()),
            }
        }
        let took = started.elapsed();
        if took >= self.options.election_max {
            tracing::info!(
                event = crate::events::CONTROL_SLOW_ROUND,
                quorum_ms = heard.as_millis() as u64,
                apply_ms = (took - heard).as_millis() as u64,
                entries_behind = read.saturating_sub(applied),
                "a leadership round took {} ms: {} ms for a quorum to answer, {} ms to apply {} committed entries",
                took.as_millis(),
                heard.as_millis(),
                (took - heard).as_millis(),
                read.saturating_sub(applied)
            );
        }
        Ok(())
    }

    /// The attached endpoint.
    fn attached(&self) -> Result<Attached, ControlError> {
        self.endpoint.get().ok_or(ControlError::NotAttached)
    }

    /// The leader this node knows of, with its id.
    fn leader(&self) -> Option<(NodeId, Peer)> {
        let metrics = self.metrics.borrow();
        let id = metrics.current_leader?;
        let peer = metrics
            .membership_config
            .membership()
            .get_node(&id)?
            .clone();
        Some((id, peer))
    }

    fn is_leader(&self) -> bool {
        self.leads(&self.metrics.borrow())
    }

    /// Whether `metrics` say this node leads. (Takes them borrowed: a second `borrow`
    /// of the watch while one is held can deadlock against a send.)
    fn leads(&self, metrics: &Metrics) -> bool {
        metrics.state == ServerState::Leader && metrics.current_leader == Some(self.me)
    }

    /// Whether node `name` may send this node Raft votes, appends and snapshots: it is a
    /// voter or a learner of its membership. Not only the voters: a node that missed the
    /// entries that promoted a learner and removed a voter holds an old membership, and
    /// must still vote for the new voters and take their appends, or the cluster can
    /// wedge with a majority of the new voters alive (Raft's own rule: servers accept
    /// messages from servers outside their configuration). A non-voter's append must
    /// also be of no higher term than this node's (`service.rs`). A node that has no
    /// membership yet (it has asked to join, or awaits the bootstrap) knows no members,
    /// and takes them from whoever leads: the first append brings the membership.
    ///
    /// Also the leader this node already follows in its current term, when the
    /// membership that leaves it out is older than that term: a snapshot it took from
    /// that leader can hold such a membership (a leader that was removed and joined again
    /// after its disk was lost, `replace.rs`, sends the snapshot it was itself caught up
    /// with). Refused, the leader could never send the entries that list it, and the node
    /// would follow no one. A membership of the current term that leaves the leader out
    /// is its own removal: refused from then on, or a removed leader could go on
    /// appending in its term.
    ///
    /// `id` is the member id the message claims for its sender, checked to be `name`'s
    /// (`service.rs`); `None` for a message that claims none: then the name's seat in the
    /// membership.
    fn may_lead(&self, name: &str, id: Option<NodeId>) -> bool {
        let metrics = self.metrics.borrow();
        let membership = metrics.membership_config.membership();
        if membership.nodes().next().is_none() {
            return true;
        }
        let Some(id) = id.or_else(|| types::id_of(membership, name)) else {
            return false;
        };
        let older = metrics
            .membership_config
            .log_id()
            .is_none_or(|at| at.leader_id.term < metrics.current_term);
        if metrics.current_leader == Some(id) && older {
            return true;
        }
        types::seat(membership, name, id).is_some()
    }

    /// Whether node `name`, as member `id` (checked to be the name's), holds a voter's
    /// seat in this node's membership (either side of a joint one, `types::seat`), or this
    /// node has no membership yet.
    fn is_voter_here(&self, name: &str, id: NodeId) -> bool {
        let metrics = self.metrics.borrow();
        let membership = metrics.membership_config.membership();
        if membership.nodes().next().is_none() {
            return true;
        }
        let Some(seat) = types::seat(membership, name, id) else {
            return false;
        };
        membership
            .get_joint_config()
            .iter()
            .any(|voters| voters.contains(&seat))
    }

    /// Whether node `name` is in the membership (voter or learner).
    fn is_member(&self, name: &str) -> bool {
        let metrics = self.metrics.borrow();
        types::id_of(metrics.membership_config.membership(), name).is_some()
    }

    /// The member id of node `name` in this node's membership, if it has a seat.
    pub(crate) fn id_of(&self, name: &str) -> Option<NodeId> {
        types::id_of(self.metrics.borrow().membership_config.membership(), name)
    }
}

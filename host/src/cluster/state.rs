//! The types of the replicated state and of the commands that change it.
//!
//! Everything here is serialized with postcard into the Raft log and snapshots, and with
//! serde_json into `tenure status --json`, so maps are keyed by strings or integers only.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

/// How many ownership changes [`Cluster::history`] keeps.
pub const HISTORY_LEN: usize = 1000;

/// The whole replicated state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    /// Every node that ever joined, by name.
    pub members: BTreeMap<String, Member>,
    /// Slots that are granted (or being handed over), by resource, then slot number.
    /// A slot absent here is vacant.
    pub resources: BTreeMap<String, BTreeMap<u32, Slot>>,
    /// Plugin state blobs, by resource.
    pub state: BTreeMap<String, Blob>,
    /// Revoked keys, by key fingerprint (`crate::pki::key_fingerprint`): every
    /// certificate carrying one of them is refused.
    pub revoked: BTreeMap<String, Revocation>,
    /// Nodes skipped for a resource after its plugin kept failing there: resource →
    /// node → until (proposer wall clock, ms since the Unix epoch).
    pub cooldown: BTreeMap<String, BTreeMap<String, u64>>,
    /// Where a vacant slot should go next, set by the release of an operator `move`:
    /// resource → slot → node. Placement honours it if that node is eligible; a grant of
    /// the slot clears it.
    pub preferred: BTreeMap<String, BTreeMap<u32, String>>,
    /// The last [`HISTORY_LEN`] ownership changes, oldest first.
    pub history: VecDeque<HistoryEntry>,
    /// The cluster's id, committed by its first leader ([`Command::Identify`]); `None`
    /// until then. The last field, so that a format-2 snapshot image is this one without
    /// it (`raft/format.rs` migrates by appending `None`).
    #[serde(default)]
    pub id: Option<super::ClusterId>,
    /// The process behind each member's open session, by member name, for sessions opened
    /// with [`Command::OpenSessionOf`] (a session opened before, with
    /// [`Command::OpenSession`], has none). Kept beside `members` rather than in
    /// [`Session`], and last, so that a format-3 snapshot image is this one without it
    /// (`raft/format.rs` migrates by appending an empty map).
    #[serde(default)]
    pub session_processes: BTreeMap<String, SessionProcess>,
    /// The cluster's version: the newest node protocol every member speaks, raised by the
    /// leader ([`Command::RaiseVersion`]) and never lowered (`crate::version`). 0 until
    /// its first raise; every member speaks [`crate::version::WIRE_OLDEST`] or newer
    /// then anyway. Last, so that a format-4 snapshot image is this one without it
    /// (`raft/format.rs` migrates by appending a 0).
    #[serde(default)]
    pub version: u32,
    /// The answers to each member's recent stamped commands ([`Proposal::Stamped`]), by
    /// member name: a command proposed again (a retry after an answer that did not say
    /// whether it was appended) is answered from here instead of applied twice
    /// (`once.rs`). Last, and left out of snapshot images and state hashes while empty
    /// (as it is until the cluster's version allows stamps: [`Cluster::encode`]), so
    /// that a state without any is byte for byte what 0.2.0 writes and hashes, and
    /// builds of both versions read each other's snapshots.
    #[serde(default)]
    pub applied: BTreeMap<String, Applied>,
    /// The state blobs of plugins that keep one per slot (a manifest's `state =
    /// "per-slot"`), by resource, then slot number. Last, and left out of images and
    /// hashes while empty, as `applied` is.
    #[serde(default)]
    pub slot_state: BTreeMap<String, BTreeMap<u32, Blob>>,
    /// Which store each member's name belongs to: the store of the process that last
    /// opened its session (`sessions.rs`), recorded from cluster version
    /// [`crate::version::ADDRESSED`]. Raft's messages to a member name this store, and a
    /// node under that name with another store (a wiped or replaced disk that rejoined)
    /// refuses them (`raft/service.rs`): it never answers for its old self. Kept when
    /// the session ends, dropped with the member. Last, and left out of images and
    /// hashes while empty, as `applied` and `slot_state` are.
    #[serde(default)]
    pub stores: BTreeMap<String, super::StoreId>,
    /// Every store each name had when a member of it was removed (`Command::Remove`)
    /// with its store recorded: a process of such a store is a member no more. Its
    /// numbered commands are refused (`once.rs`) and its joins too
    /// (`raft/membership.rs`), so an old process that comes back after its name rejoined
    /// with a new store (a wiped disk, `raft/replace.rs`) cannot act as the member. Only
    /// ever grows (a store id is never made again), except that `recover` and `snapshot
    /// restore` clear it with `stores`. Last, and left out of images and hashes while
    /// empty.
    #[serde(default)]
    pub retired: BTreeMap<String, BTreeSet<super::StoreId>>,
    /// When each member last installed something new for each resource it advertised,
    /// by member, then resource; recorded from cluster version
    /// [`crate::version::INSTALL_ORDER`]. Of two adverts of one plugin version that
    /// differ (another manifest, another build), the one installed last runs
    /// (`placement/winner.rs`): the operator's latest edit, not the greater digest.
    ///
    /// Kept when the advert is withdrawn (a node withdraws every advert when it shuts
    /// down), so a node that comes back with the files it had is not taken for one that
    /// installed them anew. (One with no record, down when the version was reached or
    /// removed and joined again, is recorded when it advertises.) Dropped with the
    /// member. Last, and left out of images and hashes while empty.
    #[serde(default)]
    pub installed: BTreeMap<String, BTreeMap<String, Installed>>,
}

/// When a member installed what it advertises for a resource ([`Cluster::installed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Installed {
    /// The log index of the advert that first said it.
    pub at: u64,
    /// What it was: [`Advert::installed`] of that advert.
    pub what: u64,
}

/// One member's run's recent stamped commands and their answers (`once.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The run whose commands these are: a command of a newer run (or of another store
    /// under the member's name) starts afresh; one of an older run is refused.
    pub run: super::Process,
    /// Every sequence number below this one the run has settled (answered, or given up
    /// on): its answer is forgotten, and a command that arrives with it is refused.
    pub low: u64,
    /// The answer to each sequence number applied at or above `low`.
    pub answers: BTreeMap<u64, Response>,
}

/// Which process opened a member's session, and whether a newer run of its store has
/// asked for the session since (`sessions.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionProcess {
    /// The session it opened ([`Session::id`]).
    pub session: u64,
    /// `None` for a session opened by a build before store ids, once a newer run asked.
    pub process: Option<super::Process>,
    /// A newer run of the same store asked to open a session: the leader acknowledges
    /// no renewal of this one any more, and it expires by the ordinary rule.
    pub superseded_by: Option<super::Process>,
}

/// What an operator revoked, besides the key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocation {
    /// The fingerprint of the certificate the operator named (`crate::pki::fingerprint`),
    /// if the key was revoked from a certificate file.
    pub certificate: Option<String>,
    /// The node that certificate was for; it was removed from the cluster with it.
    pub node: Option<String>,
    /// When (proposer wall clock, ms since the Unix epoch).
    pub at_ms: u64,
}

/// A node of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// The address peers dial (`host:port`).
    pub addr: String,
    pub labels: BTreeMap<String, String>,
    /// Drained: gets no new slots, and its slots are moved away.
    pub draining: bool,
    /// The plugins the node can run, by resource.
    pub plugins: BTreeMap<String, Advert>,
    /// The node's live session, if any. A node without one owns nothing.
    pub session: Option<Session>,
}

/// A node's liveness lease as the replicated state sees it. Renewals are not in the log:
/// the leader keeps their receive times in memory and proposes [`Command::EndSession`] with `expired_in`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The log index of the entry that opened it: unique, and older sessions are smaller.
    pub id: u64,
    /// When it was opened (proposer wall clock, ms since the Unix epoch).
    pub opened_ms: u64,
}

/// One plugin a node has in its plugins folder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Advert {
    /// The plugin's file stem.
    pub plugin: String,
    pub version: semver::Version,
    /// `sha256:<hex>` of the wasm bytes.
    pub digest: String,
    pub tickets: u32,
    /// Labels a node must carry to own the resource.
    pub require: BTreeMap<String, String>,
    /// What one instance of this build takes from a node's instance pool, as the
    /// advertising node's runtime counted it (a property of the digest). Placement
    /// reads it clamped ([`super::Pool::clamped`]).
    pub footprint: super::Pool,
}

impl Advert {
    /// What a node installed, as a number: the first 8 bytes of a SHA-256 over the
    /// plugin's name, version, digest and spec (tickets, require), each length-prefixed.
    /// The footprint is left out: it is what the advertising runtime counted, not what
    /// was installed.
    pub fn installed(&self) -> u64 {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        let version = self.version.to_string();
        let tickets = self.tickets.to_le_bytes();
        let mut fields = vec![self.plugin.as_bytes(), version.as_bytes()];
        fields.extend([self.digest.as_bytes(), &tickets[..]]);
        for (key, value) in &self.require {
            fields.extend([key.as_bytes(), value.as_bytes()]);
        }
        for field in fields {
            hash.update((field.len() as u64).to_le_bytes());
            hash.update(field);
        }
        let mut first = [0u8; 8];
        first.copy_from_slice(&hash.finalize()[..8]);
        u64::from_le_bytes(first)
    }
}

/// One granted slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    pub owner: String,
    /// The owner's session the grant is bound to: it dies with it.
    pub session: u64,
    /// Fencing token: the log index of the granting entry.
    pub token: u64,
    /// The Raft term of the granting entry.
    pub term: u64,
    /// When it was granted (proposer wall clock, ms since the Unix epoch).
    pub since_ms: u64,
    /// The plugin version and digest the owner runs.
    pub version: semver::Version,
    pub digest: String,
    /// Set when a graceful handover has begun: the owner stops, cleans up, then releases.
    pub releasing: Option<Releasing>,
}

/// A handover in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Releasing {
    pub reason: Handover,
    /// The node the slot should go to next (an operator `move`), if any.
    pub to: Option<String>,
    pub at_ms: u64,
}

/// Why a slot is handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Handover {
    /// An operator moved it.
    Moved,
    /// Its owner is being drained.
    Drained,
    /// Placement evens out the slot counts.
    Rebalanced,
    /// A newer plugin version runs elsewhere.
    PluginUpdated,
    /// The owner no longer has the plugin, or no node does.
    PluginRemoved,
    /// An operator released it.
    Released,
    /// The owner is shutting down.
    Shutdown,
}

/// A plugin state blob and the token that wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blob {
    pub token: u64,
    pub data: Vec<u8>,
}

/// One ownership change, for `tenure status` and audits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// The log index of the change.
    pub index: u64,
    pub at_ms: u64,
    pub resource: String,
    pub slot: u32,
    pub node: String,
    pub token: u64,
    pub what: HistoryKind,
    /// The Raft term of the grant `token` names (`tenure watch` shows it with the token).
    pub term: u64,
}

/// What happened to a slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HistoryKind {
    Granted,
    Regranted,
    HandoverBegun(Handover),
    Released,
    GaveUp,
    /// The owner's session expired.
    Expired,
}

/// What one Raft log entry carries: one command, or several applied in order.
///
/// A batch holds plain [`Command`]s, never another batch. The types have no recursion, so
/// decoding an entry (from a peer's PROPOSE, the log, a snapshot or replication) and
/// applying it take a bounded stack whatever the bytes say. When `Command` could hold
/// itself, a PROPOSE of a few thousand nested batches overflowed the stack while decoding
/// and aborted the node, and a shallower one overflowed `apply` on every node, again at
/// each restart's replay (issue 13).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Proposal {
    One(Command),
    Batch(Vec<Command>),
    /// A command a member sent the leader (kind PROPOSE), with the member's authenticated
    /// name: applied only as far as that member may (`authorize.rs`). The leader makes
    /// these; it refuses a PROPOSE that already is one.
    OneFrom {
        by: String,
        command: Command,
    },
    /// A batch a member sent the leader, as [`Proposal::OneFrom`].
    BatchFrom {
        by: String,
        commands: Vec<Command>,
    },
    /// Commands that member `member`'s run `run` numbered (`seq`, one each): each is
    /// applied once, and the same number again is answered with the first answer
    /// (`once.rs`). `low` is the run's lowest number still waiting for an answer. The
    /// leader's own proposals are this; one a member sends becomes a
    /// [`Proposal::StampedFrom`]. Proposed only from cluster version
    /// [`crate::version::STAMPS`] on, which a build before it cannot read.
    Stamped {
        member: String,
        run: super::Process,
        low: u64,
        commands: Vec<(u64, Command)>,
    },
    /// Stamped commands a member sent the leader: applied with that member's rights, as
    /// [`Proposal::BatchFrom`].
    StampedFrom {
        by: String,
        run: super::Process,
        low: u64,
        commands: Vec<(u64, Command)>,
    },
}

impl Proposal {
    /// The version a [`Command::RaiseVersion`] in it raises the cluster to, if any (the
    /// highest, for a batch). Only the leader's own proposals count: a member's is
    /// forbidden, and changes nothing (`authorize.rs`).
    pub fn raises_to(&self) -> Option<u32> {
        let commands: Vec<&Command> = match self {
            Proposal::One(command) => vec![command],
            Proposal::Batch(commands) => commands.iter().collect(),
            Proposal::Stamped { commands, .. } => commands.iter().map(|(_, c)| c).collect(),
            Proposal::OneFrom { .. }
            | Proposal::BatchFrom { .. }
            | Proposal::StampedFrom { .. } => Vec::new(),
        };
        commands
            .into_iter()
            .filter_map(|c| match c {
                Command::RaiseVersion { to } => Some(*to),
                _ => None,
            })
            .max()
    }

    /// The cluster version a build must speak to read this: [`crate::version::STAMPS`]
    /// for a stamped one, [`crate::version::SLOT_STATE`] for one that saves a slot's
    /// state, else 0 (every build reads it). A leader appends nothing the cluster's
    /// version does not reach (`raft/propose.rs`).
    pub fn needs_version(&self) -> u32 {
        let (stamped, commands): (bool, Vec<&Command>) = match self {
            Proposal::One(command) | Proposal::OneFrom { command, .. } => (false, vec![command]),
            Proposal::Batch(commands) | Proposal::BatchFrom { commands, .. } => {
                (false, commands.iter().collect())
            }
            Proposal::Stamped { commands, .. } | Proposal::StampedFrom { commands, .. } => {
                (true, commands.iter().map(|(_, c)| c).collect())
            }
        };
        let saves_a_slot = commands
            .iter()
            .any(|c| matches!(c, Command::SaveSlotState { .. }));
        let mut needs = 0;
        if stamped {
            needs = needs.max(crate::version::STAMPS);
        }
        if saves_a_slot {
            needs = needs.max(crate::version::SLOT_STATE);
        }
        needs
    }

    /// The same commands, marked as proposed by member `by`. `None` for a proposal that is
    /// marked already, or stamped with another member's name: a member cannot name the
    /// proposer itself.
    pub fn from_member(self, by: &str) -> Option<Proposal> {
        match self {
            Proposal::Stamped {
                member,
                run,
                low,
                commands,
            } => (member == by).then(|| Proposal::StampedFrom {
                by: member,
                run,
                low,
                commands,
            }),
            Proposal::One(command) => Some(Proposal::OneFrom {
                by: by.to_owned(),
                command,
            }),
            Proposal::Batch(commands) => Some(Proposal::BatchFrom {
                by: by.to_owned(),
                commands,
            }),
            Proposal::OneFrom { .. }
            | Proposal::BatchFrom { .. }
            | Proposal::StampedFrom { .. } => None,
        }
    }
}

/// The answer to a [`Proposal`], once applied: one [`Response`] per command, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    One(Response),
    Batch(Vec<Response>),
}

/// A change to the cluster state: one Raft log entry (a [`Proposal::One`]) or part of a
/// [`Proposal::Batch`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Adds a member or updates its address and labels.
    Join {
        node: String,
        addr: String,
        labels: BTreeMap<String, String>,
    },
    /// Replaces the list of plugins a node can run (an empty list withdraws them all).
    Advertise {
        node: String,
        plugins: BTreeMap<String, Advert>,
    },
    /// Changes part of that list: `set` adds or replaces adverts, `remove` withdraws the
    /// adverts of those resources. A node advertises its folder in commands of this kind
    /// small enough for one log entry each, however many plugins it holds.
    AdvertiseChanges {
        node: String,
        set: BTreeMap<String, Advert>,
        remove: Vec<String>,
    },
    /// Opens a new session for a node (closing any previous one and vacating its slots).
    /// Answered with [`Response::Session`]. Proposed by builds before format 4; applied
    /// as it always was, for the logs they wrote. This build proposes
    /// [`Command::OpenSessionOf`].
    OpenSession { node: String, at_ms: u64 },
    /// Ends a session: its slots become vacant. Proposed by the leader when renewals
    /// stopped (`expired_in`: the term of the leader that saw them stop), or by the node
    /// itself on a clean leave (`None`).
    ///
    /// An expiry is valid only in the term that decided it: the renewal receive times it
    /// rests on are that leader's memory. Applied from an entry of another term (a deposed
    /// leader's proposal forwarded to its successor, or a leader that lost and regained
    /// leadership in between), it is refused as [`Response::Stale`].
    EndSession {
        node: String,
        session: u64,
        expired_in: Option<u64>,
        at_ms: u64,
    },
    /// Grants a vacant slot to a node with a live session. Answered with
    /// [`Response::Granted`]: the token is this entry's log index.
    Assign {
        resource: String,
        slot: u32,
        node: String,
        session: u64,
        version: semver::Version,
        digest: String,
        at_ms: u64,
    },
    /// The owner restarts its plugin after a failure: same owner, a new token.
    Regrant {
        resource: String,
        slot: u32,
        token: u64,
        at_ms: u64,
    },
    /// Begins a graceful handover of a granted slot.
    BeginHandover {
        resource: String,
        slot: u32,
        token: u64,
        reason: Handover,
        to: Option<String>,
        at_ms: u64,
    },
    /// The owner has stopped and cleaned up: the slot becomes vacant.
    Release {
        resource: String,
        slot: u32,
        token: u64,
        at_ms: u64,
    },
    /// The owner's plugin kept failing: the slot becomes vacant and the node is skipped
    /// for the resource until `until_ms`.
    GiveUp {
        resource: String,
        slot: u32,
        token: u64,
        until_ms: u64,
        at_ms: u64,
    },
    /// Saves a resource's plugin state, fenced by the writer's token.
    SaveState {
        resource: String,
        slot: u32,
        token: u64,
        data: Vec<u8>,
    },
    /// Sets or clears a node's draining flag.
    SetDraining { node: String, draining: bool },
    /// Revokes a key (`key`: its fingerprint) for good. `certificate` and `node` say what
    /// the operator named, if they named a certificate. The node's session is not ended
    /// here: it expires when its renewals stop, as every node then refuses its key.
    Revoke {
        key: String,
        certificate: Option<String>,
        node: Option<String>,
        at_ms: u64,
    },
    /// Forgets a member that has no session (a node gone for good, whose lease is over);
    /// refused while it has one. The leader also takes it out of the Raft membership. A
    /// node that comes back joins again.
    Remove { node: String, at_ms: u64 },
    /// Gives the cluster its id: proposed by a leader that finds none (the first leader
    /// of a new cluster, or of one upgraded from a store without ids). Applied only while
    /// the cluster has none: an id never changes (`identity.rs`).
    Identify { cluster: super::ClusterId },
    /// Opens a session for a node, naming the process that asks (its store and run) and
    /// the session this process held before and knows is over (its deadline passed and
    /// its plugins stopped), if any. Answered with [`Response::Session`]; a repeated
    /// request of the same process is answered with the session it opened, and a request
    /// of another process while the session lives is refused (`sessions.rs`).
    OpenSessionOf {
        node: String,
        at_ms: u64,
        process: super::Process,
        ended: Option<u64>,
    },
    /// Raises the cluster's version to `to` (a no-op if it is there already or above):
    /// proposed by the leader once every member speaks it (`node/cluster_version.rs`).
    RaiseVersion { to: u32 },
    /// The version gate's test command: applied only once the cluster's version is
    /// [`crate::version::PROBE_VERSION`] or above, refused before. Only a process acting
    /// as the next build (`crate::version::UNSAFE_NEXT_PROTOCOL`) proposes it, and only
    /// once the cluster's version allows it (`node/next_protocol.rs`).
    Probe { node: String },
    /// Saves the state of one slot of a plugin that keeps one blob per slot, fenced by
    /// the writer's token as [`Command::SaveState`] is. Refused before the cluster's
    /// version is [`crate::version::SLOT_STATE`] (builds before it cannot read it).
    SaveSlotState {
        resource: String,
        slot: u32,
        token: u64,
        data: Vec<u8>,
    },
}

/// The answer to a command, once applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Done,
    /// A session was opened.
    Session(u64),
    /// A slot was granted.
    Granted {
        token: u64,
        term: u64,
    },
    /// The command's token is not the slot's current one (or the slot is vacant).
    Stale,
    /// The command does not apply to the current state; the message says why.
    Refused(String),
    /// The member that proposed the command may not (`authorize.rs`); nothing changed.
    Forbidden(String),
}

impl Outcome {
    /// One answer as [`Outcome::One`], any other number as a batch's: the shape the
    /// proposer of that many commands expects (`raft/propose.rs`).
    pub fn of(mut answers: Vec<Response>) -> Outcome {
        if answers.len() == 1 {
            Outcome::One(answers.pop().expect("one answer"))
        } else {
            Outcome::Batch(answers)
        }
    }

    /// The answers, in order.
    pub fn responses(&self) -> impl Iterator<Item = &Response> {
        match self {
            Outcome::One(response) => std::slice::from_ref(response).iter(),
            Outcome::Batch(responses) => responses.iter(),
        }
    }
}

/// In words, for log lines (never Rust's debug output at INFO and above).
impl std::fmt::Display for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Response::Done => f.write_str("done"),
            Response::Session(id) => write!(f, "session {id} opened"),
            Response::Granted { token, term } => write!(f, "granted, token {token} (term {term})"),
            Response::Stale => f.write_str("stale: the token is not the slot's current one"),
            Response::Refused(why) => write!(f, "refused: {why}"),
            Response::Forbidden(why) => write!(f, "forbidden: {why}"),
        }
    }
}

impl Response {
    /// Why the command was forbidden, if it was.
    pub fn forbidden(&self) -> Option<&str> {
        match self {
            Response::Forbidden(why) => Some(why),
            _ => None,
        }
    }
}

impl Handover {
    /// The name used in logs and `tenure status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Handover::Moved => "moved",
            Handover::Drained => "drained",
            Handover::Rebalanced => "rebalanced",
            Handover::PluginUpdated => "plugin-updated",
            Handover::PluginRemoved => "plugin-removed",
            Handover::Released => "released",
            Handover::Shutdown => "shutdown",
        }
    }
}

/// How many maps end [`Cluster`]'s encoding that [`drop_empty_tail`] may leave out:
/// [`Cluster::applied`], [`Cluster::slot_state`], [`Cluster::stores`],
/// [`Cluster::retired`], then [`Cluster::installed`].
pub(crate) const TAIL_MAPS: usize = 5;

/// Leaves out the empty maps at the end of `bytes`, the postcard encoding of an image or
/// state that ends with `cluster`: [`Cluster::installed`] if empty, then
/// [`Cluster::retired`], [`Cluster::stores`], [`Cluster::slot_state`] and
/// [`Cluster::applied`], each while all after it were empty too. An empty map is one zero byte, its length.
/// So a state that uses none of them is byte for byte what a build before them writes and
/// hashes; a reader appends the zeros back (`raft/state_machine.rs`, `Image::decode`).
pub(crate) fn drop_empty_tail(bytes: &mut Vec<u8>, cluster: &Cluster) {
    for empty in [
        cluster.installed.is_empty(),
        cluster.retired.is_empty(),
        cluster.stores.is_empty(),
        cluster.slot_state.is_empty(),
        cluster.applied.is_empty(),
    ] {
        if !empty {
            return;
        }
        let length = bytes.pop();
        debug_assert_eq!(length, Some(0), "an empty map's length, last");
    }
}

impl Cluster {
    /// The state's postcard encoding as snapshot images end with it and replicas hash it
    /// (`raft/state_machine.rs`, `raft/checksums.rs`), with its empty tail left out
    /// ([`drop_empty_tail`]).
    pub fn encode(&self) -> Result<Vec<u8>, postcard::Error> {
        let mut bytes = postcard::to_allocvec(self)?;
        drop_empty_tail(&mut bytes, self);
        Ok(bytes)
    }

    /// The slot `(resource, slot)`, if granted.
    pub fn slot(&self, resource: &str, slot: u32) -> Option<&Slot> {
        self.resources.get(resource)?.get(&slot)
    }

    /// Every granted slot, with its resource and number.
    pub fn slots(&self) -> impl Iterator<Item = (&str, u32, &Slot)> {
        self.resources
            .iter()
            .flat_map(|(r, slots)| slots.iter().map(move |(n, s)| (r.as_str(), *n, s)))
    }

    /// The slots held by `node` under its current session.
    pub fn slots_of<'a>(&'a self, node: &'a str) -> impl Iterator<Item = (&'a str, u32, &'a Slot)> {
        self.slots().filter(move |(_, _, s)| s.owner == node)
    }
}

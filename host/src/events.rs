//! The names of the event log's events: the audit trail external checkers read.
//!
//! With `--log-format json` every log line is one JSON object, and every line Tenure
//! writes carries `event` with one of these names (a line from a library Tenure uses,
//! such as a wasmtime warning, may lack it). Keep them stable: they are a public contract
//! (docs/design.md §3, "Event log").

pub const NODE_STARTED: &str = "node.started";
pub const NODE_READY: &str = "node.ready";
pub const NODE_STOPPING: &str = "node.stopping";
/// The node drained itself (`tenure drain --self`, a Kubernetes preStop hook): its slots
/// move away, and it undrains itself once it is ready after its restart.
pub const NODE_DRAINED_ITSELF: &str = "node.drained_itself";
/// The node lifted the drain it put on itself before it stopped (INFO), or cannot yet
/// (WARN, `error`; it tries again every second).
pub const NODE_UNDRAINED_ITSELF: &str = "node.undrained_itself";
pub const NODE_STOPPED: &str = "node.stopped";
pub const NODE_ABORTED: &str = "node.aborted";
/// The control plane stopped on a fatal error (`cause`): the node stops renewing, stops
/// its plugins and exits non-zero.
pub const NODE_FAILED: &str = "node.failed";
pub const NODE_SHUTDOWN_OVERRUN: &str = "node.shutdown_overrun";
/// A notification to systemd (`NOTIFY_SOCKET`) could not be sent (`error`); said once.
pub const NODE_NOTIFY_FAILED: &str = "node.notify_failed";
pub const CATALOG_REJECTED: &str = "catalog.rejected";
pub const CATALOG_REMOVED: &str = "catalog.removed";
/// A manifest setting this node cannot honour was clamped (a stop grace longer than a
/// quarter of the lease TTL).
pub const CATALOG_CLAMPED: &str = "catalog.clamped";
/// The plugins folder cannot be watched with inotify; it is polled (`path`, `error`).
pub const CATALOG_POLLING: &str = "catalog.polling";
pub const RESOURCE_PENDING: &str = "resource.pending";
/// A plugin's wasm was in neither the compile cache nor a loaded plugin: a compile began
/// (`wasm_digest`, `bytes`, `child`: whether in a child process). `plugin.loaded` or
/// `catalog.rejected` follows, unless the node stops first (the compile is abandoned).
pub const PLUGIN_COMPILING: &str = "plugin.compiling";
pub const PLUGIN_LOADED: &str = "plugin.loaded";
/// The node stopped while the plugin was loading: the load (and any compile) is abandoned.
pub const PLUGIN_ABANDONED: &str = "plugin.abandoned";
/// A loaded plugin is not advertised yet: it keeps its state per slot, and the cluster's
/// version does not allow that yet (`version`, `needs`). Said once per plugin version.
pub const PLUGIN_WAITING: &str = "plugin.waiting";
pub const PLUGIN_STARTED: &str = "plugin.started";
/// The files of a running plugin changed under the same version (`what`: `secrets`, a
/// secret file's value, which no version includes; or `manifest`, beside 0.2.0, where a
/// version is named by its wasm alone): its instance stops (cleanup `plugin-updated`)
/// and the slot is granted again under a new token; the next instance reads the files
/// of the node it is granted to (`plugin`, `resource`, `slot`, `token`, `what`).
pub const PLUGIN_FILES_CHANGED: &str = "plugin.files_changed";
/// A grant was not started: the node held no valid lease for it at the moment of starting.
pub const PLUGIN_NOT_STARTED: &str = "plugin.not_started";
pub const PLUGIN_LOG: &str = "plugin.log";
pub const PLUGIN_LOG_SUPPRESSED: &str = "plugin.log_suppressed";
pub const PLUGIN_STOPPED: &str = "plugin.stopped";
pub const PLUGIN_CLEANUP: &str = "plugin.cleanup";
pub const PLUGIN_RESTARTING: &str = "plugin.restarting";
pub const PLUGIN_FAILED: &str = "plugin.failed";
/// An effect of a plugin was refused or aborted (`effect`, `host`, `reason`: not-allowed,
/// lease-expired or stopping; `in_flight` when a request already sent was cut at the
/// lease deadline).
pub const PLUGIN_EFFECT_REFUSED: &str = "plugin.effect_refused";
/// An outbound request or connection of a plugin failed on the network (`effect`: http
/// or tcp, `host`, `error` in words): a connection refused or reset, a failed TLS
/// handshake, a broken HTTP exchange.
/// The plugin sees the error too; the line counts against its log budget.
pub const PLUGIN_EFFECT_FAILED: &str = "plugin.effect_failed";
pub const OWNERSHIP_ACQUIRED: &str = "ownership.acquired";
pub const OWNERSHIP_LOST: &str = "ownership.lost";

/// A handshake, connection or stream refused for a transport reason (limit reached,
/// malformed or oversized frame, too slow, peer aborted the handshake).
pub const TRANSPORT_REJECTED: &str = "transport.rejected";
/// A peer or message refused for a security reason: a certificate that does not verify
/// (unknown CA, expired, not yet valid, wrong name), no acceptable identity, a connection
/// closed because its CA was removed, or an envelope that failed its checks.
pub const SECURITY_REJECTED: &str = "security.rejected";
/// The leader found a member's replica different from its own at a log index (ERROR,
/// with `node` and `index`), or the same again (INFO) (`raft/checksums.rs`).
pub const REPLICA_DIVERGED: &str = "replica.diverged";
/// A peer's wall clock is more than a second off this node's (WARN, with `peer` and
/// `offset_ms`, the peer's clock minus ours), or back within it (INFO). Its messages are
/// accepted either way (`envelope/clock_log.rs`).
pub const CLOCK_SKEW: &str = "clock.skew";
/// The node's certificate and key, or the CA bundle, were reloaded from their files.
pub const TLS_RELOADED: &str = "tls.reloaded";
/// A changed certificate, key or CA bundle could not be loaded; the previous one stays.
pub const TLS_RELOAD_FAILED: &str = "tls.reload_failed";
/// The node's own certificate expires soon, has expired, or is not valid yet.
pub const TLS_EXPIRING: &str = "tls.expiring";
/// A compile cache entry could not be used (unreadable, not authenticated by this node's
/// cache key, or refused by the engine) and was discarded, or could not be written.
pub const CACHE_ERROR: &str = "cache.error";
/// The data dir gave group or others access (`path`, `mode`): it was narrowed to 0700
/// (`action`: tightened), or left as is because it is not evidently the node's own
/// (`action`: left, with `why`).
pub const DATA_DIR_MODE: &str = "node.data_dir_mode";
/// A configured private key file can be read by group or others (`path`, `mode`); the
/// node still starts.
pub const KEY_FILE_MODE: &str = "tls.key_file_mode";
pub const RUNTIME_ON_DEMAND: &str = "runtime.on_demand";

/// The metrics endpoint is listening (`addr`).
pub const METRICS_LISTENING: &str = "metrics.listening";
/// The metrics endpoint could not accept a connection (e.g. out of file descriptors).
pub const METRICS_ERROR: &str = "metrics.error";

/// This node saw a new Raft leader (`node`, `term`).
pub const CLUSTER_LEADER: &str = "cluster.leader";
/// The leader committed the cluster's id (`cluster`): a new cluster's first leader, or
/// the first after an upgrade from a store without one (`cluster/identity.rs`).
pub const CLUSTER_IDENTIFIED: &str = "cluster.identified";
/// This replica applied a raise of the cluster's version (`version`): commands and rules of
/// that node protocol may be used from then on (`crate::version`).
pub const CLUSTER_VERSION: &str = "cluster.version";
/// The leader raised the cluster's version (`from`, `to`): every member speaks it.
pub const CLUSTER_VERSION_RAISED: &str = "cluster.version_raised";
/// The leader keeps the cluster's version (`version`) because a member (`member`) speaks
/// less or has no live connection (INFO), or a member speaks less than the cluster's
/// version already (WARN: an older build put back on it); said once per reason.
pub const CLUSTER_VERSION_WAITING: &str = "cluster.version_waiting";
/// A process acting as the next build (`crate::version::UNSAFE_NEXT_PROTOCOL`) waits
/// for the cluster's version to allow its probe (`waiting`), or had it applied (`applied`).
pub const VERSION_PROBE: &str = "version.probe";
/// A restarted voter turned its elections on (`heard`: whether a leader reached it first,
/// or the hold ran out).
pub const CLUSTER_REJOINED: &str = "cluster.rejoined";
/// This node opened a session (`session`).
pub const SESSION_OPENED: &str = "session.opened";
/// This node may not open a session yet (`reason`): another process under its name holds
/// one (an earlier run of its store, whose session must expire first, or another data
/// dir), or this process was superseded by a newer run (`cluster/sessions.rs`).
pub const SESSION_WAITING: &str = "session.waiting";
/// The leader committed the expiry of a node's session: its slots are vacant.
pub const SESSION_EXPIRED: &str = "session.expired";
/// A new leader learned from a majority of voters where the session clocks of its term
/// start (`term`, `base_ms_ago`, and `from`: `answers` when every answer bounded the past,
/// `election` when one could not and the clocks start at the election): the lease handoff.
/// `renewals` sessions start earlier, at their own last renewal as the old leader's
/// renewal rounds reported it (`node/renewal_round.rs`), the earliest `earliest_ms_ago`.
pub const LEASE_INHERITED: &str = "lease.inherited";
/// This node's lease deadline passed, or the leader no longer knows its session: its
/// plugins are stopped and a new session is opened.
pub const LEASE_LOST: &str = "lease.lost";
/// A renewal was acknowledged later than the renewal interval after it was sent (`ms`).
pub const LEASE_SLOW_RENEWAL: &str = "lease.slow_renewal";
/// A renewal failed or was not answered in time (`error`, `after_ms`); the next one is
/// already on its way.
pub const LEASE_RENEWAL_FAILED: &str = "lease.renewal_failed";
/// A control-plane call failed (a proposal, a renewal); it is retried.
pub const CONTROL_ERROR: &str = "control.error";
/// A leadership round (a renewal waits for one) took longer than the election timeout.
pub const CONTROL_SLOW_ROUND: &str = "control.slow_round";
/// The Raft store was migrated from an older format at start (`from`, `to`, `backup`:
/// where the store as it was is kept).
pub const STORE_MIGRATED: &str = "store.migrated";
/// An operator request was accepted for proposal (`operator`, `request`).
pub const ADMIN_REQUEST: &str = "admin.request";
/// No `[tls]` was configured, and development certificates were made in the data dir.
pub const DEV_CERTS: &str = "node.dev_certs";
/// This node's Raft store is new and it waits for the nodes it was given to answer before
/// it forms or joins the cluster (`waiting_for`).
pub const CLUSTER_WAITING: &str = "cluster.waiting";
/// This node initialized the Raft group with the initial members (`members`).
pub const CLUSTER_BOOTSTRAPPED: &str = "cluster.bootstrapped";
/// A fresh initial member other than the first (or the first, when a peer had formed the
/// cluster already) waited to be reached before bootstrapping
/// (`after_ms`): `leader` names the leader that reached it, or is absent when none did in
/// time and it bootstraps itself.
pub const CLUSTER_REACHED: &str = "cluster.reached";
/// A recovered node (`tenure recover`) leads and holds every grant for a full TTL
/// (`phase = "start"`), or the hold is over (`phase = "end"`).
pub const CLUSTER_RECOVERY_HOLD: &str = "cluster.recovery_hold";
/// This node joined an existing cluster (`via`, `voter`).
pub const CLUSTER_JOINED: &str = "cluster.joined";
/// The leader changed the Raft membership: a learner added or promoted, a member's
/// address updated, a member removed (`peer`), or its voter upkeep took a step (`step`:
/// a voter replaced, the voters shrunk, a learner promoted; `raft/autopilot.rs`).
pub const CLUSTER_MEMBERSHIP: &str = "cluster.membership";
/// A Raft peer became unreachable, or reachable again (`peer`, `addr`).
pub const CLUSTER_PEER: &str = "cluster.peer";
/// The node runs with a safety mechanism switched off on purpose (the fault checker's
/// deliberately broken run).
pub const NODE_UNSAFE: &str = "node.unsafe";

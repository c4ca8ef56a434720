//! The node: wiring, the main loop and the shutdown order.
//!
//! A node is a member of a Raft cluster (on the single-node default, a one-voter cluster
//! on the same code path). Its parts, each in its own file:
//! - `plugins.rs`: the plugins folder compiled, and the adverts (what it can run);
//! - `adverts.rs`: the adverts proposed to the cluster, as differences in bounded parts;
//! - `session.rs`: its session, renewed with the leader, and the lease deadline;
//! - `leader.rs`: while it leads, session expiry and the placement plan;
//! - `owner.rs`: the slots granted to it, run by supervisors;
//! - `grants.rs`: restarts, releases and fenced state saves as Raft commands;
//! - `admin.rs`: operator requests; `revocations.rs`: what `revoke` does to a node;
//!   `backup.rs`: `snapshot save` pages; `recovery.rs`: `recover` and `snapshot restore`.
//!
//! Shutdown is ordered (docs/design.md, invariant 5): stop taking folder changes → withdraw the
//! adverts and hand every slot over (`releasing: shutdown`) in one command → each plugin
//! stops, runs `cleanup(shutdown)` and releases → end the session → stop the control
//! plane → close the endpoint. If the cluster cannot commit the handover (no quorum), the
//! plugins are stopped locally instead; their slots then move when the session expires.

mod admin;
mod adverts;
mod backup;
mod cluster_version;
mod datadir;
mod decide;
#[cfg(test)]
mod decide_tests;
mod grants;
mod handoff;
mod leader;
mod new_member;
mod next_protocol;
mod notify;
mod owner;
mod plugins;
mod preflight;
mod probe;
mod recovery;
mod renewal_round;
mod revocations;
mod self_drain;
mod session;
mod shared;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::catalog::{self, Change};
use crate::cluster::{Command, Handover};
use crate::config::Config;
use crate::events;
use crate::ownership::LeaseTiming;
use crate::raft::{Control, ControlOptions};
use crate::rpc::Rpc;
use crate::runtime::{CleanupReason, Incremental, Runtime};
use crate::supervisor::Deps;
use crate::transport::{ResetKey, TlsFiles, TransportConfig};

pub use grants::GIVE_UP_COOLDOWN;
#[cfg(test)]
pub(crate) use handoff::{Ask, Heard, LEADER_HEARD};
use leader::Liveness;
use owner::Owner;
pub use owner::UNSAFE_NO_SELF_DEMOTION;
use plugins::Folder;
pub use recovery::{recover, restore};
#[cfg(test)]
pub(crate) use renewal_round::{Carried, RENEWAL_ROUND};
use session::Renewals;
#[cfg(test)]
pub(crate) use session::{RENEW, Renew, Renewed};
use shared::{Shared, now_ms};

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("cannot create the {what} folder {path}: {source}")]
    Folder {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid listen address {0:?}: expected HOST:PORT with an IP address")]
    Listen(String),
    #[error(transparent)]
    Refused(#[from] preflight::Refused),
    #[error("cannot keep the transport's reset key in {path}: {why}")]
    ResetKey { path: PathBuf, why: String },
    #[error("cannot record this run in {path}: {source}")]
    Incarnation {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Certificates(#[from] crate::pki::PkiError),
    #[error(transparent)]
    Raft(#[from] crate::raft::ControlError),
    #[error(transparent)]
    Rpc(#[from] crate::rpc::RpcError),
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    #[error("cannot start the plugin threads: {0}")]
    PluginThreads(std::io::Error),
    #[error("cannot serve metrics on {addr}: {source}")]
    Metrics {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Added to the longest stop grace plus cleanup timeout to bound shutdown: covers the
/// interrupt backstops and the control-plane round trips.
const SHUTDOWN_SLACK: Duration = Duration::from_secs(5);

/// While other loads go on, loaded plugins are published at most this often. Each
/// publication rebuilds the plugin list and the adverts (O(plugins)) and the advertiser
/// compares them with what is committed (O(plugins) again); in a folder of 10,000 plugins
/// loads end by the thousand per second, and publishing each batch as it ended spent
/// about 30 % of the node's CPU while it loaded (perf), on the runtime Raft's heartbeats share.
/// When nothing else is loading, a plugin is published as soon as its load ends.
const PUBLISH_EVERY: Duration = Duration::from_millis(100);
/// How long shutdown waits for the cluster to commit a step before going on without it.
const SHUTDOWN_COMMIT: Duration = Duration::from_secs(3);

/// Runs the node until `shutdown` resolves, then shuts down in order.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), NodeError> {
    // Nothing is written before these checks pass: a refused start changes nothing.
    let listen: SocketAddr = config
        .listen
        .parse()
        .map_err(|_| NodeError::Listen(config.listen.clone()))?;
    preflight::addresses_free(listen, config.metrics)?;
    preflight::tls_usable(config.tls.as_ref(), &config.name)?;
    preflight::data_dir_free(&config.data_dir)?;
    preflight::store_format(&config.data_dir)?;
    preflight::disk_space(&config.data_dir)?;
    if let Some(tls) = &config.tls {
        datadir::warn_if_key_readable(&tls.key);
    }
    // The data dir is owner-only (0700), and so is everything made in it (0600).
    datadir::prepare(&config.data_dir).map_err(|source| NodeError::Folder {
        what: "data",
        path: config.data_dir.clone(),
        source,
    })?;
    std::fs::create_dir_all(&config.plugins_dir).map_err(|source| NodeError::Folder {
        what: "plugins",
        path: config.plugins_dir.clone(),
        source,
    })?;
    // Held until the node ends: a second node on this data dir is refused.
    let _data_dir_lock = preflight::lock_data_dir(&config.data_dir)?;
    // From here no other run of this store can take a Raft message; this one takes none
    // until its Raft starts, which can wait for peers (`new_member.rs`): the time a voter
    // that heard no leader answers is counted from now (`raft/heard.rs`).
    let started = std::time::Instant::now();
    let files = tls_files(&config)?;
    // Cache misses compile in a child process of this same binary (runtime/compiler.rs).
    // /proc/self/exe runs this process's own image even if the file was replaced since.
    // Their functions are kept in the incremental cache (runtime/incremental.rs), so the
    // next plugin of a language compiles only what it does not share with earlier ones.
    let incremental = (config.incremental_cache > 0).then(|| Incremental {
        dir: config.data_dir.join("incremental"),
        cap: config.incremental_cache,
    });
    let runtime = Arc::new(
        Runtime::new(Some(&config.data_dir.join("cache")))?
            .compile_in_child(PathBuf::from("/proc/self/exe"), incremental),
    );
    let timing = LeaseTiming { ttl: config.ttl };

    // The endpoint serves Raft and renewals, so those exist (unattached) before it.
    let renewals = Arc::new(Renewals::new());
    let mut options =
        ControlOptions::new(config.data_dir.clone(), config.name.clone()).paced_for(config.ttl);
    options.started = Some(started);
    // Served from here: deciding what this node is, forming and joining can wait for
    // peers for as long as they are away, and `/livez` must answer meanwhile.
    let late_probe = Arc::new(probe::LateProbe::new(config.name.clone()));
    let _metrics = probe::serve(config.metrics, late_probe.clone()).await?;
    // A stop asked meanwhile ends the node cleanly (nothing runs yet), as it would later.
    let mut shutdown = std::pin::pin!(shutdown);
    options.new_member = match new_member::is_new_member(
        &config,
        &files,
        listen,
        shutdown.as_mut(),
        &late_probe,
    )
    .await?
    {
        Some(new_member) => new_member,
        None => {
            tracing::info!(event = events::NODE_STOPPED, node = %config.name, "stopped before it formed or joined the cluster");
            return Ok(());
        }
    };
    // After the question's transport (which took one): peers take a node's newest.
    let incarnation = next_incarnation(&config.data_dir)?;
    options.voters = config.voters;
    options.replace_voter_after = config.replace_voter_after;
    options.replica_check = config.replica_check;
    let (control, service) = Control::open(options, renewals.clone()).await?;
    // Revocations in force when this node last stopped hold from its first handshake.
    let mut revoked: BTreeSet<String> = {
        let state = control.state();
        let cluster = state.read().unwrap_or_else(|p| p.into_inner());
        cluster.revoked.keys().cloned().collect()
    };
    // The members as this replica knows them, to see one removed (the main loop).
    let mut members: BTreeSet<String> = {
        let state = control.state();
        let cluster = state.read().unwrap_or_else(|p| p.into_inner());
        cluster.members.keys().cloned().collect()
    };
    let transport = TransportConfig {
        listen,
        reset_key: Some(reset_key(&config.data_dir)?),
        revoked: revoked.clone(),
        ..TransportConfig::default()
    };
    let rpc =
        Arc::new(Rpc::bind(transport, files, incarnation, control.cluster_id(), service).await?);
    let bound = rpc.local_addr()?;
    let advertise = config
        .advertise
        .clone()
        .unwrap_or_else(|| advertised(bound).to_string());
    control.attach(rpc.clone(), advertise.clone())?;

    // Only the fault checker's deliberately broken build runs without self-demotion.
    let enforced = std::env::var_os(UNSAFE_NO_SELF_DEMOTION).is_none();
    let shared = Arc::new(Shared::new(
        config.name.clone(),
        control,
        timing,
        enforced,
        incarnation,
    ));
    let plugin_threads = PluginThreads::start()?;
    shared.set_rpc(rpc.clone());
    let liveness = Arc::new(Liveness::default());
    renewals.attach(shared.clone(), liveness.clone());
    let own_drain = config.data_dir.join(self_drain::MARKER);
    rpc.serve_operators(admin::adapter(shared.clone(), own_drain.clone()));
    let metrics_probe = Arc::new(probe::NodeProbe::new(shared.clone()));
    late_probe.set(metrics_probe.clone());

    let formed = async {
        if config.join.is_empty() {
            let mut members: BTreeMap<String, String> = config
                .peers
                .iter()
                .map(|p| (p.name.clone(), p.addr.clone()))
                .collect();
            members.insert(config.name.clone(), advertise.clone());
            shared.control.bootstrap(&members).await
        } else {
            let via: Vec<(String, String)> = config
                .join
                .iter()
                .map(|p| (p.name.clone(), p.addr.clone()))
                .collect();
            shared.control.join(&via).await
        }
    };
    tokio::select! {
        formed = formed => formed?,
        _ = shutdown.as_mut() => {
            tracing::info!(event = events::NODE_STOPPED, node = %config.name, "stopped before it formed or joined the cluster");
            shared.control.shutdown().await;
            rpc.close().await;
            return Ok(());
        }
    }

    tracing::info!(
        event = events::NODE_STARTED,
        node = %config.name,
        listen = %bound,
        advertise = %advertise,
        data_dir = %config.data_dir.display(),
        store = %shared.process.store,
        incarnation = shared.process.incarnation,
        plugins_dir = %config.plugins_dir.display(),
        pooling = runtime.pooling(),
        ttl_ms = config.ttl.as_millis() as u64,
        single_node = config.peers.is_empty() && config.join.is_empty(),
        "node started",
    );

    let (stop_tx, stop) = watch::channel(false);
    // The session opens once the member is recorded (an unknown node cannot open one).
    let session = tokio::spawn({
        let (shared, liveness, stop) = (shared.clone(), liveness.clone(), stop.clone());
        let labels = config.labels.clone();
        async move {
            introduce(&shared, advertise, labels).await;
            session::keep(shared, liveness, stop).await;
        }
    });
    let leader = tokio::spawn(leader::lead(shared.clone(), liveness, stop.clone()));
    let raising = tokio::spawn(cluster_version::keep_raised(shared.clone(), stop.clone()));
    let probing = next_protocol::enabled()
        .then(|| tokio::spawn(next_protocol::probe(shared.clone(), stop.clone())));
    let (adverts_tx, adverts_rx) = watch::channel(None);
    let advertiser = tokio::spawn(adverts::advertise_loop(shared.clone(), adverts_rx));

    let (changes_tx, mut changes) = mpsc::channel(64);
    let watcher = plugin_threads
        .handle()
        .spawn(catalog::watch(config.plugins_dir.clone(), changes_tx));
    let grants = grants::ClusterGrants {
        shared: shared.clone(),
        node: tokio::runtime::Handle::current(),
    };
    let deps = Deps {
        grants: Arc::new(grants.clone()),
        state: Arc::new(grants.clone()),
        slot_state: Arc::new(grants::SlotState(grants)),
        lease: shared.node_lease.clone(),
        live: shared.live.clone(),
        failures: shared.failures.clone(),
    };
    let mut owner = Owner::new(shared.clone(), deps, plugin_threads.handle());
    let mut folder = Folder::new(runtime, timing, plugin_threads.handle());
    let mut plugins = folder.plugins(shared.read(|c| c.version));
    let mut applied = shared.control.applied();
    let mut deadline = shared.deadline();
    let mut systemd = notify::Notifier::from_env();

    // `node.ready` is said once the initial scan is done and its loads have ended.
    let (mut scanned, mut ready) = (false, false);
    // A drain this node put on itself before it stopped is lifted once it is ready
    // (`self_drain.rs`); `own_drain_watch` notices an operator lifting it meanwhile.
    let mut lifting = None;
    let mut own_drain_watch = self_drain::Watch::default();
    // Loaded or removed plugins not yet in `plugins` and the adverts (see `PUBLISH_EVERY`).
    let mut unpublished = false;
    let mut published_at = tokio::time::Instant::now();
    // The cluster version the adverts were last computed at (`Folder::adverts`).
    let mut advertised_at = shared.read(|c| c.version);
    // A node whose Raft stopped on a fatal error (its store failed) has a frozen replica:
    // handovers never reach it and its saves time out, while the leader would go on
    // renewing its session. It stops renewing, stops its plugins and exits with the cause.
    let mut raft_failed = std::pin::pin!(shared.control.failed());
    let mut failure = None;
    loop {
        tokio::select! {
            _ = shutdown.as_mut() => break,
            cause = raft_failed.as_mut() => {
                tracing::error!(
                    event = events::NODE_FAILED,
                    node = %config.name,
                    cause = %cause,
                    "the control plane stopped: {cause}; this node stops renewing its session, stops its plugins and exits"
                );
                stop_tx.send_replace(true);
                failure = Some(cause);
                break;
            }
            change = changes.recv() => match change {
                Some(first) => {
                    // Every change already queued is applied before the plugins and
                    // adverts are recomputed and the slots reconciled: a folder of
                    // thousands of plugins is handled in one pass, not one per plugin.
                    let mut changed = false;
                    let mut next = Some(first);
                    while let Some(change) = next {
                        match change {
                            Change::InitialScanComplete => scanned = true,
                            change => changed |= folder.apply(change),
                        }
                        next = changes.try_recv().ok();
                    }
                    unpublished |= changed;
                }
                None => break,
            },
            // Each plugin is published once its own load ends.
            changed = folder.next_loaded(), if folder.loading() => unpublished |= changed,
            _ = tokio::time::sleep_until(published_at + PUBLISH_EVERY), if unpublished => {}
            _ = applied.changed() => {}
            _ = deadline.changed() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        // A plugin with a state per slot is advertised once the version allows it.
        let version = shared.read(|c| c.version);
        if version != advertised_at {
            advertised_at = version;
            unpublished = true;
        }
        if unpublished && (!folder.loading() || published_at.elapsed() >= PUBLISH_EVERY) {
            plugins = folder.plugins(version);
            adverts_tx.send_replace(Some(folder.adverts(version)));
            published_at = tokio::time::Instant::now();
            unpublished = false;
        }
        if scanned && !ready && !folder.loading() {
            ready = true;
            tracing::info!(event = events::NODE_READY, node = %config.name, plugins = folder.len(), "node ready");
            metrics_probe.set_loaded();
        }
        // READY=1 once the node is ready as /readyz means it (node.ready included).
        if ready && !systemd.ready_sent() && metrics_probe.ready() {
            systemd.ready();
        }
        own_drain_watch.observe(&shared, &own_drain);
        if ready && lifting.is_none() && metrics_probe.ready() {
            lifting = Some(tokio::spawn(self_drain::lift_when_back(
                shared.clone(),
                own_drain.clone(),
                stop.clone(),
            )));
        }
        systemd.tick();
        owner.reconcile(&plugins, true).await;
        metrics_probe.set_running(owner.running());
        let now_revoked: BTreeSet<String> = shared.read(|c| c.revoked.keys().cloned().collect());
        if now_revoked != revoked {
            rpc.transport().set_revoked(now_revoked.clone());
            revoked = now_revoked;
        }
        // A member the cluster removed may come back as a new member on an empty data dir,
        // under a lower incarnation: forget its old run's replay state (`envelope`).
        let now_members: BTreeSet<String> = shared.read(|c| c.members.keys().cloned().collect());
        for gone in members.difference(&now_members) {
            rpc.forget_sender(gone);
        }
        members = now_members;
    }

    tracing::info!(event = events::NODE_STOPPING, node = %config.name, "shutting down: handing every slot over");
    systemd.stopping();
    watcher.abort();
    advertiser.abort();
    raising.abort();
    if let Some(probing) = &probing {
        probing.abort();
    }
    folder.abandon().await;
    let bound = folder.longest_stop() + SHUTDOWN_SLACK;
    if failure.is_some() {
        owner.stop_all(CleanupReason::Shutdown);
    } else {
        hand_over_all(&shared, &owner).await;
    }
    let drained = tokio::time::timeout(bound, async {
        while !owner.idle() {
            owner.reconcile(&plugins, false).await;
            tokio::select! {
                _ = applied.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::error!(
            event = events::NODE_SHUTDOWN_OVERRUN,
            bound_ms = bound.as_millis() as u64,
            "some plugins did not stop within the shutdown bound; exiting anyway"
        );
    }
    // Ending the session vacates its slots at once: only once every plugin has stopped.
    // Otherwise the session expires by the ordinary rule, after the engine's deadline.
    if drained.is_ok() {
        end_session(&shared).await;
    }
    stop_tx.send_replace(true);
    if let Some(lifting) = lifting {
        lifting.abort();
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = session.await;
        let _ = leader.await;
    })
    .await;
    shared.control.shutdown().await;
    rpc.close().await;
    // Whatever still runs there (an abandoned call past its backstops) is dropped.
    drop(plugin_threads);
    tracing::info!(event = events::NODE_STOPPED, node = %config.name, "node stopped");
    match failure {
        Some(cause) => Err(NodeError::Raft(crate::raft::ControlError::Stopped(cause))),
        None => Ok(()),
    }
}

/// The threads plugin code runs on, and the loading of the plugins folder: a runtime of
/// its own, so that busy plugins (each yields only at epoch ticks) cannot hold the
/// threads of the node's runtime, where Raft, renewals and the deadline timers run, and
/// at a lower priority (`crate::priority`), so that they cannot take its cores either.
/// The engine enforces the lease deadline whatever these threads do.
/// Dropped, it lets go of whatever still runs there without waiting (a runtime cannot
/// be dropped the ordinary way inside another one).
struct PluginThreads(Option<tokio::runtime::Runtime>);

impl PluginThreads {
    fn start() -> Result<Self, NodeError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tenure-plugin")
            .on_thread_start(crate::priority::lower_this_thread)
            .enable_all()
            .build()
            .map_err(NodeError::PluginThreads)?;
        Ok(Self(Some(runtime)))
    }

    fn handle(&self) -> tokio::runtime::Handle {
        self.0
            .as_ref()
            .expect("present until dropped")
            .handle()
            .clone()
    }
}

impl Drop for PluginThreads {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Withdraws this node's adverts and marks its slots releasing, in one command; stops
/// the plugins locally if the cluster cannot commit it.
async fn hand_over_all(shared: &Arc<Shared>, owner: &Owner) {
    let Some(session) = shared.session() else {
        owner.stop_all(CleanupReason::Shutdown);
        return;
    };
    let at_ms = now_ms();
    let mut commands = vec![Command::Advertise {
        node: shared.me.clone(),
        plugins: BTreeMap::new(),
    }];
    shared.read(|c| {
        for (resource, slot, held) in c.slots_of(&shared.me) {
            if held.session == session && held.releasing.is_none() {
                commands.push(Command::BeginHandover {
                    resource: resource.to_owned(),
                    slot,
                    token: held.token,
                    reason: Handover::Shutdown,
                    to: None,
                    at_ms,
                });
            }
        }
    });
    let committed = tokio::time::timeout(SHUTDOWN_COMMIT, shared.propose_batch(commands)).await;
    if !matches!(committed, Ok(Ok(_))) {
        tracing::warn!(
            event = events::CONTROL_ERROR,
            "cannot commit the shutdown handover; stopping the plugins locally"
        );
        owner.stop_all(CleanupReason::Shutdown);
    }
}

/// Ends the session cleanly, so the leader need not wait for it to expire.
async fn end_session(shared: &Arc<Shared>) {
    let Some(session) = shared.session() else {
        return;
    };
    let command = Command::EndSession {
        node: shared.me.clone(),
        session,
        expired_in: None,
        at_ms: now_ms(),
    };
    let _ = tokio::time::timeout(SHUTDOWN_COMMIT, shared.propose(command)).await;
}

/// Records this node's address and labels in the cluster state (retried until done).
async fn introduce(shared: &Shared, addr: String, labels: BTreeMap<String, String>) {
    let command = Command::Join {
        node: shared.me.clone(),
        addr,
        labels,
    };
    loop {
        match shared.propose(command.clone()).await {
            Ok(_) => return,
            Err(error) => {
                tracing::debug!(event = events::CONTROL_ERROR, %error, "cannot record this member yet")
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The address peers dial when none is configured: the bound address, with loopback
/// in place of an unspecified IP.
fn advertised(bound: SocketAddr) -> SocketAddr {
    let mut addr = bound;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    addr
}

/// The node's certificate files: configured, or development certificates made in the
/// data dir for the single-node default.
fn tls_files(config: &Config) -> Result<TlsFiles, NodeError> {
    if let Some(tls) = &config.tls {
        return Ok(TlsFiles {
            ca: tls.ca.clone(),
            cert: tls.cert.clone(),
            key: tls.key.clone(),
        });
    }
    let dir = config.data_dir.join("certs");
    let dev = crate::pki::ensure_dev_certs(&dir, &config.name)?;
    if dev.created {
        tracing::warn!(
            event = events::DEV_CERTS,
            dir = %dir.display(),
            "no [tls] configured: made DEVELOPMENT certificates in {} (a local CA, a node certificate and an operator certificate for `tenure status` and friends); configure [tls] for a real cluster",
            dir.display()
        );
    }
    Ok(dev.node)
}

/// The node's QUIC stateless-reset secret, made once and kept in the data dir, so that
/// after a restart a peer's connection to the previous run is reset at its next packet
/// instead of timing out (a leader killed and restarted is otherwise unreachable on that
/// connection for the whole idle timeout).
fn reset_key(data_dir: &Path) -> Result<ResetKey, NodeError> {
    let path = data_dir.join("reset.key");
    crate::private_files::secret(&path)
        .map(ResetKey)
        .map_err(|why| NodeError::ResetKey { path, why })
}

/// Returns this run's incarnation: one more than the last run's, recorded durably so
/// that peers can tell a restarted node's envelopes from replays of old ones.
fn next_incarnation(data_dir: &Path) -> Result<u64, NodeError> {
    let path = data_dir.join("incarnation");
    let error = |source| NodeError::Incarnation {
        path: path.clone(),
        source,
    };
    let last = match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse::<u64>().unwrap_or(0),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(error(e)),
    };
    // Never below the wall clock in microseconds: a lost file cannot bring an old
    // incarnation back.
    let next = (last + 1).max(now_ms() * 1000);
    crate::private_files::write_atomic(&path, next.to_string().as_bytes()).map_err(error)?;
    Ok(next)
}

//! What the metrics endpoint reads from a node ([`crate::metrics::Probe`]).
//!
//! Everything is read fresh on each scrape from what the node already keeps: the RPC
//! endpoint's counters, Raft's metrics (whether Raft runs, the membership, the log
//! entries held but not yet applied), the local replica of the cluster state and the
//! lease; `/readyz` judges the same sample (`Sample::readiness`). `/status` is the
//! operator's `tenure status`, built by the same function. The values the node pushes are
//! the number of running supervisors, which only the owner loop knows (stored after each
//! reconciliation, at least once a second), and whether its plugins folder's first scan
//! and loads have ended (`node.ready`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::NodeError;
use super::session::RENEW;
use super::shared::Shared;
use crate::events;
use crate::metrics::{MetricsServer, Probe, Sample};
use crate::raft::{APPEND_ENTRIES, INSTALL_SNAPSHOT, JOIN, PROPOSE, VOTE};

pub struct NodeProbe {
    shared: Arc<Shared>,
    running: AtomicUsize,
    /// Whether `node.ready` was said: the plugins folder's first scan and loads ended.
    loaded: AtomicBool,
}

impl NodeProbe {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            running: AtomicUsize::new(0),
            loaded: AtomicBool::new(false),
        }
    }

    /// Whether the node is ready as `/readyz` says it (for systemd's READY=1).
    pub fn ready(&self) -> bool {
        self.sample().readiness().is_ok()
    }

    /// Records that the plugins folder's first scan and its loads have ended.
    pub fn set_loaded(&self) {
        self.loaded.store(true, Ordering::Relaxed);
    }

    /// Records how many supervisors run, after a reconciliation.
    pub fn set_running(&self, running: usize) {
        self.running.store(running, Ordering::Relaxed);
    }
}

/// The name of a message kind, for the `name` label.
fn kind_name(kind: u16) -> &'static str {
    // A message's addressed kind is the same message (`raft/kinds.rs`).
    match crate::raft::plain_kind(kind) {
        APPEND_ENTRIES => "append_entries",
        VOTE => "vote",
        INSTALL_SNAPSHOT => "install_snapshot",
        PROPOSE => "propose",
        JOIN => "join",
        RENEW => "renew",
        _ => "other",
    }
}

impl Probe for NodeProbe {
    fn sample(&self) -> Sample {
        let shared = &self.shared;
        let rpc = shared.rpc();
        let control = &shared.control;
        let members = control.members();
        let me = shared.me.as_str();
        let session = shared.session();
        let deadline = *shared.deadline().borrow();
        let (raft_stopped, unapplied) = {
            let raft = control.metrics();
            let raft = raft.borrow();
            let applied = raft.last_applied.map_or(0, |id| id.index);
            (
                raft.running_state
                    .as_ref()
                    .err()
                    .map(|fatal| fatal.to_string()),
                raft.last_log_index.unwrap_or(0).saturating_sub(applied),
            )
        };
        let member = members.voters.contains_key(me) || members.learners.contains_key(me);
        let mut sample = Sample {
            node: shared.me.clone(),
            rejections: rpc.rejections().to_vec(),
            control_refused: control.refusals(),
            term: control.term(),
            leader: control.leader().map(|(name, _)| name),
            is_leader: control.is_leader(),
            applied: *control.applied().borrow(),
            voters: members.voters.len(),
            learners: members.learners.len(),
            plugins_running: self.running.load(Ordering::Relaxed),
            session,
            lease_remaining: deadline.map(|d| d.saturating_duration_since(Instant::now())),
            raft_stopped,
            member,
            unapplied,
            loaded: self.loaded.load(Ordering::Relaxed),
            diverged: control.diverged(),
            ..Sample::default()
        };
        read_endpoint(&mut sample, rpc);
        shared.read(|c| {
            sample.members = c.members.len();
            sample.sessions = c.members.values().filter(|m| m.session.is_some()).count();
            let advertised: std::collections::BTreeSet<&String> =
                c.members.values().flat_map(|m| m.plugins.keys()).collect();
            sample.resources = advertised.len();
            sample.slots_assigned = c.slots().count();
            sample.slots_owned = c
                .slots_of(me)
                .filter(|(_, _, s)| Some(s.session) == session)
                .count();
        });
        sample
    }

    fn status(&self) -> crate::api::Status {
        super::admin::status(&self.shared, super::shared::now_ms())
    }
}

/// The probe the endpoint serves from the node's start: the node's own ([`NodeProbe`])
/// once it exists, and before that (a node on a new data dir can wait for its peers
/// before its Raft starts, `new_member.rs`) a node with no leader: `/livez` answers, and
/// `/readyz` says not ready, so an orchestrator's liveness probe never restarts a node
/// that is waiting for its peers.
pub struct LateProbe {
    name: String,
    node: OnceLock<Arc<NodeProbe>>,
    /// The transport a node on a new data dir asks its peers through, while it asks: its
    /// certificates and calls are this node's meanwhile.
    asking: std::sync::Mutex<Option<Arc<crate::rpc::Rpc>>>,
}

impl LateProbe {
    pub fn new(name: String) -> Self {
        Self {
            name,
            node: OnceLock::new(),
            asking: std::sync::Mutex::new(None),
        }
    }

    /// The transport the node asks its peers through (`None` once it is closed).
    pub fn asking(&self, rpc: Option<Arc<crate::rpc::Rpc>>) {
        *self.asking.lock().unwrap_or_else(|e| e.into_inner()) = rpc;
    }

    /// Serves `node` from now on.
    pub fn set(&self, node: Arc<NodeProbe>) {
        let _ = self.node.set(node);
    }
}

impl Probe for LateProbe {
    fn sample(&self) -> Sample {
        match self.node.get() {
            Some(node) => node.sample(),
            None => {
                let mut sample = Sample {
                    node: self.name.clone(),
                    ..Sample::default()
                };
                let asking = self.asking.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(rpc) = asking.as_ref() {
                    read_endpoint(&mut sample, rpc);
                }
                sample
            }
        }
    }

    fn status(&self) -> crate::api::Status {
        match self.node.get() {
            Some(node) => node.status(),
            None => crate::api::Status {
                node: self.name.clone(),
                at_ms: super::shared::now_ms(),
                leader: None,
                term: 0,
                cluster: None,
                version: 0,
                nodes: Vec::new(),
                resources: Vec::new(),
                revoked: Vec::new(),
                certificates: Vec::new(),
                history: Vec::new(),
                history_len: 0,
                diverged: Vec::new(),
            },
        }
    }
}

/// Reads into `sample` what the endpoint `rpc` says of this node: its calls per kind, its
/// connections, and the certificates it presents and trusts in new handshakes.
fn read_endpoint(sample: &mut Sample, rpc: &crate::rpc::Rpc) {
    let tls = rpc.transport().tls_info();
    sample.rpc = rpc
        .counts()
        .into_iter()
        .map(|c| (c, kind_name(c.kind)))
        .collect();
    sample.transport = rpc.transport().stats();
    sample.certificate = Some((tls.fingerprint, unix_secs(tls.not_after)));
    sample.ca_certificates = tls
        .ca_expiries
        .into_iter()
        .map(|(fingerprint, at)| (fingerprint, unix_secs(at)))
        .collect();
}

/// Starts the metrics endpoint on `addr`, if one is configured, and logs
/// `metrics.listening` with the bound address. Keep the server: dropping it stops it.
pub async fn serve(
    addr: Option<std::net::SocketAddr>,
    probe: Arc<LateProbe>,
) -> Result<Option<MetricsServer>, NodeError> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let server = MetricsServer::bind(addr, probe)
        .await
        .map_err(|source| NodeError::Metrics { addr, source })?;
    tracing::info!(
        event = events::METRICS_LISTENING,
        addr = %server.local_addr(),
        "metrics on http://{}/metrics (also /, /status, /livez, /readyz)",
        server.local_addr()
    );
    Ok(Some(server))
}

/// Seconds since the Unix epoch (0 before it).
fn unix_secs(at: std::time::SystemTime) -> u64 {
    crate::envelope::unix_ms(at) / 1000
}

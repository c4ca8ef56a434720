//! The metrics listener: Prometheus `/metrics`, `/livez` (`/healthz`), `/readyz`, the cluster's
//! status as JSON at `/status`, and a live read-only page at `/`, over plain HTTP/1.1.
//!
//! Configured with `[metrics] listen = "127.0.0.1:9464"` (or `TENURE_METRICS_LISTEN`,
//! `--metrics-listen`); off unless configured. It serves:
//! - `GET /metrics`: the node's counters and gauges in the Prometheus text format 0.0.4
//!   (every name starts with `tenure_`; see [`exposition::render`] for the list);
//! - `GET /livez` (and its older name `/healthz`): `200 ok` while the process runs (a
//!   liveness probe). It never looks at the cluster: a probe that restarts a node because
//!   the cluster has no leader turns a lost quorum into a restart storm (etcd's probes
//!   in kubeadm learnt this);
//! - `GET /readyz`: `200 ready` when the node can act ([`Sample::readiness`]: its Raft runs,
//!   a leader is known, it is a member, its replica has applied what it holds, its plugins
//!   folder is loaded and it holds a valid lease), else `503` with the reason (a readiness
//!   probe: a node that cannot act is not ready);
//! - `GET /status`: what `tenure status --json` shows, from this node's replica (names,
//!   addresses, labels, plugin digests, slots, tokens, history: nothing secret);
//! - `GET /`: a page that polls `/status` every second ([`page`]);
//! - `404` for any other path, `405` for any other method (`HEAD` is answered like `GET`
//!   without the body); malformed requests get hyper's `4xx`.
//!
//! **What it deliberately is not.** No TLS and no authentication: bind it to loopback or
//! a private interface; it shows the cluster's layout but never keys or secrets, and
//! changes nothing. The server ([`server`]) is hyper's, with bounds on connections,
//! request heads and timeouts; nothing a client sends can panic it or stop its accept
//! loop.
//!
//! The values come from a [`Probe`] (the node implements it over its shared state), read
//! fresh on every request (`/status` at most once per 500 ms); this module only formats
//! and serves them, so it is tested with a fixed [`Sample`] and [`Status`].

use std::time::Duration;

use crate::api::Status;
use crate::envelope::Reason;
use crate::rpc::KindCount;
use crate::transport::TransportStats;

pub mod exposition;
pub mod page;
pub mod server;

pub use exposition::render;
pub use server::{Limits, MAX_REQUEST, MetricsServer};

/// Where the values come from: read on every scrape, readiness check and status.
pub trait Probe: Send + Sync + 'static {
    /// The node's counters and gauges, for `/metrics` and `/readyz`.
    fn sample(&self) -> Sample;
    /// The cluster as this node sees it, as `tenure status` shows it.
    fn status(&self) -> Status;
}

/// One reading of the node.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// This node's name.
    pub node: String,
    /// Signed calls per message kind, with the kind's name.
    pub rpc: Vec<(KindCount, &'static str)>,
    /// Envelopes rejected, per reason.
    pub rejections: Vec<(Reason, u64)>,
    /// Members' control plane messages refused as not their business, per reason.
    pub control_refused: Vec<(crate::raft::Refusal, u64)>,
    pub transport: TransportStats,
    /// The Raft term.
    pub term: u64,
    /// The leader this node knows of.
    pub leader: Option<String>,
    /// Whether this node is the leader.
    pub is_leader: bool,
    /// The last Raft log index applied to the local state.
    pub applied: u64,
    /// Raft voters and learners.
    pub voters: usize,
    pub learners: usize,
    /// Members in the replicated state.
    pub members: usize,
    /// Members with an open session in the replicated state.
    pub sessions: usize,
    /// Resources some member advertises a plugin for.
    pub resources: usize,
    /// Slots with an owner in the replicated state, cluster-wide.
    pub slots_assigned: usize,
    /// Slots the replicated state gives this node under its current session.
    pub slots_owned: usize,
    /// Supervisors running here (as of the node's last reconciliation).
    pub plugins_running: usize,
    /// This node's current session.
    pub session: Option<u64>,
    /// Time left before this node's lease deadline; zero when it passed, `None` before
    /// the first acknowledged renewal.
    pub lease_remaining: Option<Duration>,
    /// Why this node's Raft stopped (a fatal error: its store failed), if it did.
    pub raft_stopped: Option<String>,
    /// Whether this node is in the Raft membership (a voter or a learner).
    pub member: bool,
    /// Log entries this node holds that its state has not applied yet.
    pub unapplied: u64,
    /// Whether the plugins folder's first scan and its loads have ended (`node.ready`).
    pub loaded: bool,
    /// The certificate this node presents in new handshakes: its fingerprint and the end
    /// of its validity (seconds since the Unix epoch).
    pub certificate: Option<(String, u64)>,
    /// The CAs this node trusts in new handshakes: each one's fingerprint and the end of
    /// its validity (seconds since the Unix epoch), in bundle order.
    pub ca_certificates: Vec<(String, u64)>,
    /// On the leader: the members whose replicas differ from its own, with the first log
    /// index found to differ (`raft/checksums.rs`).
    pub diverged: std::collections::BTreeMap<String, u64>,
}

/// More log entries than this held but not applied, and the replica is behind: not ready.
pub const MAX_UNAPPLIED: u64 = 100;

impl Sample {
    /// Whether the node has a session whose lease deadline has not passed.
    pub fn lease_valid(&self) -> bool {
        self.session.is_some() && self.lease_remaining.is_some_and(|left| !left.is_zero())
    }

    /// Whether the node can act, else why not: its Raft runs, it knows a leader, it is a
    /// member, its replica is caught up with what it received, its plugins folder is
    /// loaded, and it holds a session whose lease an acknowledged renewal keeps valid.
    /// (The lease is the strongest of these: a renewal is acknowledged only after a
    /// quorum round of the current leader, so a node cut off from a majority loses it
    /// within a TTL.)
    pub fn readiness(&self) -> Result<(), String> {
        if let Some(cause) = &self.raft_stopped {
            return Err(format!("the control plane stopped: {cause}"));
        }
        if self.leader.is_none() {
            return Err("no leader known".into());
        }
        if !self.member {
            return Err("not a member of the cluster yet".into());
        }
        if self.unapplied > MAX_UNAPPLIED {
            return Err(format!(
                "the replica is behind: {} log entries not applied yet",
                self.unapplied
            ));
        }
        if !self.loaded {
            return Err("the plugins folder is still being loaded".into());
        }
        if self.session.is_none() {
            return Err("no session".into());
        }
        match self.lease_remaining {
            None => Err("no renewal of the session acknowledged yet".into()),
            Some(left) if left.is_zero() => Err("the lease deadline passed".into()),
            Some(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;

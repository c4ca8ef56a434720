//! What `tenure status` shows: the cluster as one node sees it, for people and for tools.
//!
//! [`Status::build`] is pure: the replicated state, the answering node's view of Raft
//! (who leads, the term, voters and learners), the slots placement left pending with its
//! reasons, and the wall clock, in; a [`Status`] out. It goes to the operator as is, over
//! postcard, and the CLI prints it with [`Status::render`] or as JSON (`--json`, serde).
//! Because one struct serves both encodings it uses only what postcard can carry: no
//! flattened fields, no internally tagged enums, no skipped fields; absent values are
//! `null` in JSON.
//!
//! A follower answers from its own copy of the state, which may lag the leader by a few
//! entries; `node` says who answered and `leader` who leads.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::actions::short;
use crate::cluster::{Cluster, HistoryKind};
use crate::failures::LastFailure;
use crate::placement;
use crate::terminal::escape;

/// How many of the most recent ownership changes a status carries.
pub const HISTORY_SHOWN: usize = 20;
/// Up to this many slots the text form lists every resource and slot; above, it sums up.
pub const DETAIL_SLOTS: usize = 50;
/// How many slots that need a look the summary lists.
pub const PROBLEMS_SHOWN: usize = 20;
/// Up to this many plugins a node's row lists them; above, it counts them.
const PLUGINS_LISTED: usize = 6;

/// The answering node's view of Raft, given to [`Status::build`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RaftView {
    /// The node answering.
    pub node: String,
    /// The current leader, if known.
    pub leader: Option<String>,
    /// The current term.
    pub term: u64,
    /// The voting members.
    pub voters: Vec<String>,
    /// The non-voting members (learners).
    pub learners: Vec<String>,
}

/// The cluster as one node sees it: the answer to `tenure status`, and its `--json` form.
/// A revoked key, as `tenure status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokedView {
    /// The key's fingerprint (`sha256:` of its SubjectPublicKeyInfo).
    pub key: String,
    /// The fingerprint of the certificate it was revoked from, if any.
    pub certificate: Option<String>,
    /// The node that certificate was for, if any.
    pub node: Option<String>,
    pub at_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The node that answered.
    pub node: String,
    /// When it answered: its wall clock, ms since the Unix epoch. Every `age_ms` is
    /// relative to it.
    pub at_ms: u64,
    /// The Raft leader as that node knows it; `null` during an election or when it is cut
    /// off from the others.
    pub leader: Option<String>,
    /// The Raft term.
    pub term: u64,
    /// The cluster's id (`cluster/identity.rs`); `null` until its first leader commits
    /// one.
    pub cluster: Option<crate::cluster::ClusterId>,
    /// The cluster's version: the newest node protocol every member speaks (`tenure/N`),
    /// never lowered; 0 until its first leader raises it (`crate::version`).
    pub version: u32,
    /// Every member and every Raft voter or learner, by name.
    pub nodes: Vec<NodeView>,
    /// Every resource that a live node has a plugin for or that has a granted slot, by
    /// name.
    pub resources: Vec<ResourceView>,
    /// Revoked keys, by key fingerprint.
    pub revoked: Vec<RevokedView>,
    /// The certificates in use that the answering node sees: its own, and those of the
    /// nodes and operators connected to it, by name; their key fingerprints are what
    /// `tenure revoke --fingerprint` takes.
    pub certificates: Vec<CertificateView>,
    /// The most recent ownership changes (at most [`HISTORY_SHOWN`]), oldest first.
    pub history: Vec<HistoryView>,
    /// How many ownership changes the cluster remembers in all (`history` is the tail).
    pub history_len: usize,
    /// The members whose replicas differ from the leader's (`raft/checksums.rs`), as the
    /// answering node found them while it led; empty on other nodes.
    #[serde(default)]
    pub diverged: Vec<DivergedView>,
}

/// A member whose replica differs from the leader's: an alarm.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DivergedView {
    pub node: String,
    /// The first log index at which its state's hash differed from the leader's.
    pub index: u64,
}

/// A certificate in use.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CertificateView {
    /// The name it speaks for.
    pub name: String,
    /// `node` or `operator`.
    pub kind: String,
    /// Its key's fingerprint (`sha256:` of the SubjectPublicKeyInfo): what revocation
    /// refuses.
    pub key: String,
    /// The certificate's own fingerprint (`sha256:` of its DER).
    pub certificate: String,
    /// Whether it is the answering node's own; else a peer connected to it.
    pub own: bool,
}

/// One node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    pub name: String,
    /// The address peers dial; empty for a Raft member that has not joined the state yet.
    pub addr: String,
    /// Its place in Raft.
    pub role: Role,
    /// Its live session, if any: a node without one owns nothing.
    pub session: Option<SessionView>,
    pub labels: BTreeMap<String, String>,
    /// Drained: gets no new slots, and its slots are moved away.
    pub draining: bool,
    /// How many slots it holds.
    pub slots: usize,
    /// The plugins in its plugins folder, by resource.
    pub plugins: Vec<PluginView>,
}

/// A node's place in Raft.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Votes in elections and commits.
    Voter,
    /// Receives the log, does not vote.
    Learner,
    /// In the replicated state but not in the Raft membership (removed, or not added yet).
    Outside,
}

/// A live session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionView {
    /// Its id: the log index that opened it (older sessions are smaller).
    pub id: u64,
    /// When it was opened (the proposer's wall clock, ms since the Unix epoch).
    pub opened_ms: u64,
    /// How long ago that was, at `Status::at_ms`.
    pub age_ms: u64,
}

/// A plugin a node advertises (or, in a [`ResourceView`], the one that runs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginView {
    pub resource: String,
    /// The plugin's file stem.
    pub plugin: String,
    pub version: semver::Version,
    /// `sha256:<hex>` of the wasm bytes.
    pub digest: String,
    pub tickets: u32,
    /// Until when the node cools down for the resource, after it gave a slot up because
    /// the plugin kept failing (ms since the Unix epoch, the giving-up node's clock): it
    /// gets no slot of it until then, and may again after (or as soon as it advertises
    /// another build). From the replicated state, so any node knows it of every node;
    /// `null` when not cooling down now, and in a resource's row.
    pub cooldown_until_ms: Option<u64>,
    /// The plugin's last failed start on that node. Only the node itself knows it
    /// (`crate::failures`): a status fills it in on the answering node's rows, and
    /// `tenure status` asks each other node that cools down for a resource for its own;
    /// `null` otherwise, and while the plugin never failed there since the node started.
    pub last_failure: Option<FailureView>,
}

/// A plugin's last failed start on a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureView {
    /// How it ended, as the node's `plugin.stopped` says: `trapped`, `returned` (an
    /// error), `oom` or `interrupted`.
    pub outcome: String,
    /// The error, in words (the plugin's own text for `returned`).
    pub error: String,
    /// When (the node's clock, ms since the Unix epoch).
    pub at_ms: u64,
    pub slot: u32,
    /// The token of the grant it failed under.
    pub token: u64,
    /// When the node starts the plugin again after its backoff (ms since the Unix
    /// epoch); `null` once it gave the slot up (see `cooldown_until_ms`).
    pub restart_ms: Option<u64>,
    /// Failures within the manifest's restart window, this one included, and the
    /// restarts the manifest allows in it: one more failure than that gives the slot up.
    pub failures: u32,
    pub max_restarts: u32,
}

/// One resource and its slots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceView {
    pub name: String,
    /// The plugin that runs: the winning advert among live nodes (highest version, then
    /// greatest digest, as placement decides); `null` when no live node has a plugin for
    /// it any more.
    pub plugin: Option<PluginView>,
    /// Labels a node must carry to own it.
    pub require: BTreeMap<String, String>,
    /// Tickets: the winning plugin's, else one past the highest granted slot.
    pub tickets: u32,
    /// Slot 0 to `tickets - 1`, and any granted slot beyond (tickets were lowered).
    pub slots: Vec<SlotView>,
}

/// One slot. Owner fields are set for `owned` and `releasing` slots; `pending` holds the
/// reason for a `pending` one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotView {
    pub slot: u32,
    pub state: SlotState,
    pub owner: Option<String>,
    /// The fencing token of the grant.
    pub token: Option<u64>,
    /// The Raft term of the grant.
    pub term: Option<u64>,
    /// When it was granted (ms since the Unix epoch).
    pub since_ms: Option<u64>,
    /// The plugin version and digest the owner runs.
    pub version: Option<semver::Version>,
    pub digest: Option<String>,
    /// The handover in progress, for a `releasing` slot.
    pub releasing: Option<ReleasingView>,
    /// Why no node holds it, for a `pending` slot.
    pub pending: Option<String>,
}

/// What a slot is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlotState {
    /// Granted; the owner runs the plugin.
    Owned,
    /// Granted, and being handed over: the owner stops, cleans up, then releases.
    Releasing,
    /// Vacant.
    Pending,
}

/// A handover in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasingView {
    /// moved, drained, rebalanced, plugin-updated, plugin-removed, released or shutdown.
    pub reason: String,
    /// Where it goes next (an operator's `move`), if anywhere in particular.
    pub to: Option<String>,
    /// When the handover began (ms since the Unix epoch).
    pub at_ms: u64,
}

/// One ownership change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryView {
    /// The log index of the change.
    pub index: u64,
    /// When (ms since the Unix epoch).
    pub at_ms: u64,
    pub resource: String,
    pub slot: u32,
    pub node: String,
    pub token: u64,
    /// granted, regranted, handover-begun, released, gave-up or expired (the owner's
    /// session expired; the text form and the page say `session-expired`, as `tenure
    /// watch` does, while this field keeps the value scripts have matched since 0.1.0).
    pub what: String,
    /// The handover's reason, for `handover-begun`.
    pub reason: Option<String>,
}

impl Status {
    /// The status of `cluster` as node `raft.node` sees it at wall-clock `now_ms`, with
    /// the slots placement left `pending` as (resource, slot, reason).
    pub fn build(
        cluster: &Cluster,
        raft: RaftView,
        pending: Vec<(String, u32, String)>,
        now_ms: u64,
    ) -> Status {
        let pending: BTreeMap<(String, u32), String> = pending
            .into_iter()
            .map(|(resource, slot, reason)| ((resource, slot), reason))
            .collect();
        let history = cluster
            .history
            .iter()
            .skip(cluster.history.len().saturating_sub(HISTORY_SHOWN))
            .map(|h| {
                let (what, reason) = match &h.what {
                    HistoryKind::Granted => ("granted", None),
                    HistoryKind::Regranted => ("regranted", None),
                    HistoryKind::HandoverBegun(r) => ("handover-begun", Some(r.as_str().into())),
                    HistoryKind::Released => ("released", None),
                    HistoryKind::GaveUp => ("gave-up", None),
                    HistoryKind::Expired => ("expired", None),
                };
                HistoryView {
                    index: h.index,
                    at_ms: h.at_ms,
                    resource: h.resource.clone(),
                    slot: h.slot,
                    node: h.node.clone(),
                    token: h.token,
                    what: what.into(),
                    reason,
                }
            })
            .collect();
        Status {
            nodes: nodes(cluster, &raft, now_ms),
            resources: resources(cluster, &pending),
            revoked: cluster
                .revoked
                .iter()
                .map(|(key, r)| RevokedView {
                    key: key.clone(),
                    certificate: r.certificate.clone(),
                    node: r.node.clone(),
                    at_ms: r.at_ms,
                })
                .collect(),
            certificates: vec![],
            history,
            history_len: cluster.history.len(),
            diverged: vec![],
            node: raft.node,
            at_ms: now_ms,
            leader: raft.leader,
            term: raft.term,
            cluster: cluster.id,
            version: cluster.version,
        }
    }

    /// This status with the answering node's plugins' last failed starts on its own
    /// rows: only the node itself knows them (`crate::failures`).
    pub fn with_failures(mut self, failures: &BTreeMap<String, LastFailure>) -> Status {
        let me = self.node.clone();
        for node in self.nodes.iter_mut().filter(|n| n.name == me) {
            for plugin in &mut node.plugins {
                plugin.last_failure = failures.get(&plugin.resource).map(|f| FailureView {
                    outcome: f.outcome.clone(),
                    error: f.error.clone(),
                    at_ms: f.at_ms,
                    slot: f.slot,
                    token: f.token,
                    restart_ms: f.restart_ms,
                    failures: f.failures,
                    max_restarts: f.max_restarts,
                });
            }
        }
        self
    }

    /// The nodes other than the answering one that cool down for a resource now and
    /// whose last failure there this status does not know: whom `tenure status` asks.
    pub fn cooling_elsewhere(&self) -> Vec<(String, String)> {
        self.nodes
            .iter()
            .filter(|n| n.name != self.node && n.session.is_some())
            .filter(|n| {
                n.plugins
                    .iter()
                    .any(|p| p.cooldown_until_ms.is_some() && p.last_failure.is_none())
            })
            .map(|n| (n.name.clone(), n.addr.clone()))
            .collect()
    }

    /// Takes the last failures that `theirs`, a status answered by another node, shows
    /// on that node's own rows.
    pub fn take_failures_of(&mut self, theirs: &Status) {
        let Some(source) = theirs.nodes.iter().find(|n| n.name == theirs.node) else {
            return;
        };
        let Some(node) = self.nodes.iter_mut().find(|n| n.name == theirs.node) else {
            return;
        };
        for plugin in &mut node.plugins {
            if let Some(known) = source
                .plugins
                .iter()
                .find(|p| p.resource == plugin.resource)
                .and_then(|p| p.last_failure.clone())
            {
                plugin.last_failure = Some(known);
            }
        }
    }

    /// The text form: a summary line, then aligned tables like `kubectl get`: nodes,
    /// plugins that failed or cool down, resources and slots, revoked keys, certificates in use and recent changes.
    ///
    /// A large cluster (more than [`DETAIL_SLOTS`] slots) gets a summary instead of the
    /// resource and slot tables: the slots that need a look first (pending, being handed
    /// over, or on an older plugin version than the resource's), at most
    /// [`PROBLEMS_SHOWN`] of them, then the counts per state. `--resource` and `--node`
    /// narrow the status down to a size that is shown whole.
    ///
    /// Every name, label, address and reason in it comes from peers, manifests or configs:
    /// control characters are shown escaped ([`crate::terminal::escape`]), so none can
    /// drive the operator's terminal or forge a line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let node = escape(&self.node);
        let leader = match &self.leader {
            Some(leader) => format!("leader {}, term {}", escape(leader), self.term),
            None => format!(
                "no leader known (term {}): an election is under way, or {node} is cut off \
                 from the others",
                self.term
            ),
        };
        // A cluster gets its id from its first leader: only a new one (or one just
        // upgraded) has none.
        let id = match (self.cluster, self.version) {
            (None, _) => String::new(),
            (Some(id), 0) => format!("cluster {id}: "),
            (Some(id), version) => format!("cluster {id} at version {version}: "),
        };
        let _ = writeln!(out, "{id}{leader}; answered by {node}");
        for d in &self.diverged {
            let _ = writeln!(
                out,
                "ALARM: the replica of {} differs from the leader's at log index {} (replica.diverged in the leader's log)",
                d.node, d.index
            );
        }
        let slots = self.resources.iter().map(|r| r.slots.len()).sum::<usize>();
        let large = slots > DETAIL_SLOTS;
        if large {
            self.render_problems(&mut out);
        }

        out.push('\n');
        let rows = self.nodes.iter().map(|n| {
            let (session, age) = match &n.session {
                Some(s) => (s.id.to_string(), age(s.age_ms)),
                None => ("-".into(), "-".into()),
            };
            let state = match (&n.session, n.draining) {
                (_, true) => "draining",
                (Some(_), false) => "ready",
                (None, false) => "down",
            };
            let plugins = if n.plugins.len() > PLUGINS_LISTED {
                format!("{} plugins", n.plugins.len())
            } else {
                list(
                    n.plugins
                        .iter()
                        .map(|p| format!("{}@{}", p.resource, p.version)),
                )
            };
            vec![
                n.name.clone(),
                dash(&n.addr),
                n.role.as_str().into(),
                state.into(),
                session,
                age,
                n.slots.to_string(),
                labels(&n.labels),
                plugins,
            ]
        });
        let header = [
            "NODE", "ADDRESS", "ROLE", "STATE", "SESSION", "AGE", "SLOTS", "LABELS", "PLUGINS",
        ];
        out.push_str(&table(&header, rows, "no nodes"));
        self.render_failures(&mut out);

        out.push('\n');
        if large {
            self.render_counts(&mut out, slots);
        } else {
            self.render_resources(&mut out);
        }
        self.render_disagreements(&mut out);

        if !self.revoked.is_empty() {
            out.push('\n');
            let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
            let rows = self
                .revoked
                .iter()
                .map(|r| vec![r.key.clone(), dash(&r.certificate), dash(&r.node)]);
            out.push_str(&table(&["REVOKED KEY", "CERTIFICATE", "NODE"], rows, ""));
        }

        if !self.certificates.is_empty() {
            out.push('\n');
            let rows = self.certificates.iter().map(|c| {
                let seen = if c.own {
                    "own".to_owned()
                } else {
                    format!("connected to {}", self.node)
                };
                vec![c.name.clone(), c.kind.clone(), c.key.clone(), seen]
            });
            out.push_str(&table(&["CERTIFICATE OF", "KIND", "KEY", "SEEN"], rows, ""));
        }

        if !self.history.is_empty() {
            out.push('\n');
            let rows = self.history.iter().map(|h| {
                let what = match &h.reason {
                    Some(reason) => format!("{} ({reason})", word(&h.what)),
                    None => word(&h.what).to_owned(),
                };
                vec![
                    age(self.at_ms.saturating_sub(h.at_ms)),
                    format!("{}/{}", h.resource, h.slot),
                    h.node.clone(),
                    h.token.to_string(),
                    what,
                ]
            });
            let header = ["CHANGED", "SLOT", "NODE", "TOKEN", "CHANGE"];
            out.push_str(&table(&header, rows, ""));
            if self.history_len > self.history.len() {
                let _ = writeln!(
                    out,
                    "(the last {} of {} ownership changes)",
                    self.history.len(),
                    self.history_len
                );
            }
        }
        out
    }

    /// The plugins that failed on a node or that a node cools down for: when, the
    /// error, and when the node runs it again (at most [`PROBLEMS_SHOWN`] rows).
    fn render_failures(&self, out: &mut String) {
        let rows: Vec<Vec<String>> = self
            .nodes
            .iter()
            .flat_map(|n| n.plugins.iter().map(move |p| (n, p)))
            .filter(|(_, p)| p.last_failure.is_some() || p.cooldown_until_ms.is_some())
            .map(|(n, p)| {
                let (failed, error) = match &p.last_failure {
                    Some(f) => (
                        format!("{} ago", age(self.at_ms.saturating_sub(f.at_ms))),
                        format!("{}: {}", f.outcome, f.error),
                    ),
                    None => (
                        "-".into(),
                        format!("not known to {}: see {}'s log", self.node, n.name),
                    ),
                };
                vec![
                    n.name.clone(),
                    p.resource.clone(),
                    format!("{}@{}", p.plugin, p.version),
                    failed,
                    error,
                    self.next_try(p),
                ]
            })
            .collect();
        if rows.is_empty() {
            return;
        }
        let more = rows.len().saturating_sub(PROBLEMS_SHOWN);
        out.push('\n');
        let header = ["NODE", "RESOURCE", "PLUGIN", "FAILED", "ERROR", "NEXT TRY"];
        out.push_str(&table(&header, rows.into_iter().take(PROBLEMS_SHOWN), ""));
        if more > 0 {
            let _ = writeln!(out, "(and {more} more: `tenure status --json`)");
        }
    }

    /// When a node runs a plugin that failed there again, in words.
    fn next_try(&self, p: &PluginView) -> String {
        if let Some(until) = p.cooldown_until_ms {
            return format!(
                "gave the slot up; cooling down until {}, then eligible again",
                placement::when(until, self.at_ms)
            );
        }
        match &p.last_failure {
            Some(f) => match f.restart_ms {
                Some(at) if at > self.at_ms => format!(
                    "restart {} of {} in {}",
                    f.failures,
                    f.max_restarts,
                    age(at.saturating_sub(self.at_ms).div_ceil(1000) * 1000)
                ),
                Some(_) => "restarted".into(),
                None => "gave the slot up; eligible again".into(),
            },
            None => "-".into(),
        }
    }

    /// The resources table, then every slot.
    fn render_resources(&self, out: &mut String) {
        let rows = self.resources.iter().map(|r| {
            let (plugin, version, digest) = match &r.plugin {
                Some(p) => (
                    p.plugin.clone(),
                    p.version.to_string(),
                    short(&p.digest).into(),
                ),
                None => ("-".into(), "-".into(), "(no live node has it)".into()),
            };
            vec![
                r.name.clone(),
                plugin,
                version,
                digest,
                r.tickets.to_string(),
                labels(&r.require),
            ]
        });
        let header = [
            "RESOURCE", "PLUGIN", "VERSION", "DIGEST", "TICKETS", "REQUIRE",
        ];
        out.push_str(&table(&header, rows, "no resources"));
        if self.resources.iter().any(|r| !r.slots.is_empty()) {
            out.push('\n');
            let rows = self
                .resources
                .iter()
                .flat_map(|r| r.slots.iter().map(move |s| self.slot_row(r, s)));
            out.push_str(&table(&SLOT_HEADER, rows, ""));
        }
    }

    /// A warning per resource whose live nodes have different files for its running
    /// version (another build or another manifest of it; issue 26 item 6): the one
    /// installed last runs, and the nodes with other files get none of its slots, which
    /// an operator who meant to install the same files everywhere needs to hear. Nodes on
    /// another version are a rollout under way, not a disagreement. At most
    /// [`PROBLEMS_SHOWN`] resources.
    fn render_disagreements(&self, out: &mut String) {
        let live = || self.nodes.iter().filter(|n| n.session.is_some());
        let mut warnings = self.resources.iter().filter_map(|r| {
            let runs = r.plugin.as_ref()?;
            let what = |p: &PluginView| format!("{} tickets={}", short(&p.digest), p.tickets);
            let mut other_build = false;
            let differ: Vec<String> = live()
                .filter_map(|n| {
                    let p = n.plugins.iter().find(|p| p.resource == r.name)?;
                    if p.version != runs.version {
                        return None;
                    }
                    other_build |= p.digest != runs.digest;
                    (p.digest != runs.digest || p.tickets != runs.tickets)
                        .then(|| format!("{} has {}", escape(&n.name), what(p)))
                })
                .collect();
            let why = if self.version >= crate::version::INSTALL_ORDER {
                "installed last"
            } else {
                "by digest, then tickets, until the cluster's version is raised"
            };
            // A node with another spec of the build runs it (with the winner's spec); one
            // with another build runs nothing of it.
            let idle = if other_build {
                " Nodes with another digest get none of its slots."
            } else {
                ""
            };
            (!differ.is_empty()).then(|| {
                format!(
                    "warning: the nodes disagree on {} {}: {}; {} runs ({why}).{idle} \
                     Install the same plugin and manifest on every node.",
                    escape(&r.name),
                    runs.version,
                    differ.join(", "),
                    what(runs),
                )
            })
        });
        let mut first = true;
        for warning in warnings.by_ref().take(PROBLEMS_SHOWN) {
            if first {
                out.push('\n');
                first = false;
            }
            let _ = writeln!(out, "{warning}");
        }
        let more = warnings.count();
        if more > 0 {
            let _ = writeln!(out, "(and {more} more resources whose nodes disagree)");
        }
    }

    /// The slots that need a look, at most [`PROBLEMS_SHOWN`].
    fn render_problems(&self, out: &mut String) {
        let problems: Vec<(&ResourceView, &SlotView)> = self
            .resources
            .iter()
            .flat_map(|r| r.slots.iter().map(move |s| (r, s)))
            .filter(|(r, s)| s.state != SlotState::Owned || behind(r, s))
            .collect();
        out.push('\n');
        if problems.is_empty() {
            out.push_str("every slot is owned, on its resource's plugin version\n");
            return;
        }
        let rows = problems
            .iter()
            .take(PROBLEMS_SHOWN)
            .map(|(r, s)| self.slot_row(r, s));
        out.push_str(&table(&SLOT_HEADER, rows, ""));
        if problems.len() > PROBLEMS_SHOWN {
            let _ = writeln!(
                out,
                "(and {} more: `tenure status --json`, or narrow with --resource or --node)",
                problems.len() - PROBLEMS_SHOWN
            );
        }
    }

    /// Resources and slots counted by state.
    fn render_counts(&self, out: &mut String, slots: usize) {
        let all = self
            .resources
            .iter()
            .flat_map(|r| r.slots.iter().map(move |s| (r, s)));
        let count = |state: SlotState| all.clone().filter(|(_, s)| s.state == state).count();
        let behind = all.clone().filter(|(r, s)| behind(r, s)).count();
        let _ = writeln!(
            out,
            "{} resources, {slots} slots: {} owned, {} releasing, {} pending; {behind} on an \
             older plugin version (`tenure status --resource NAME` shows one resource whole)",
            self.resources.len(),
            count(SlotState::Owned),
            count(SlotState::Releasing),
            count(SlotState::Pending),
        );
    }

    /// A row of the slots table.
    fn slot_row(&self, r: &ResourceView, s: &SlotView) -> Vec<String> {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        let mut notes = Vec::new();
        match (&s.releasing, &s.pending) {
            (Some(h), _) => notes.push(match &h.to {
                Some(to) => format!("{} → {to}", h.reason),
                None => h.reason.clone(),
            }),
            (None, Some(reason)) => notes.push(reason.clone()),
            (None, None) => {}
        }
        if behind(r, s)
            && let Some(p) = &r.plugin
        {
            notes.push(format!("older version: the plugin is now {}", p.version));
        }
        vec![
            format!("{}/{}", r.name, s.slot),
            s.state.as_str().into(),
            opt(s.owner.clone()),
            opt(s.token.map(|t| t.to_string())),
            opt(s.term.map(|t| t.to_string())),
            opt(s.version.as_ref().map(|v| v.to_string())),
            opt(s.since_ms.map(|t| age(self.at_ms.saturating_sub(t)))),
            notes.join("; "),
        ]
    }
}

/// The columns of a slots table.
const SLOT_HEADER: [&str; 8] = [
    "SLOT", "STATE", "OWNER", "TOKEN", "TERM", "VERSION", "HELD", "NOTE",
];

/// Whether slot `s` runs another plugin than the one its resource now runs (a rollout
/// not yet done).
fn behind(r: &ResourceView, s: &SlotView) -> bool {
    match (&r.plugin, &s.digest) {
        (Some(p), Some(digest)) => &p.digest != digest,
        _ => false,
    }
}

impl Role {
    /// `voter`, `learner` or `-`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Voter => "voter",
            Role::Learner => "learner",
            Role::Outside => "-",
        }
    }
}

impl SlotState {
    /// `owned`, `releasing` or `pending`.
    pub fn as_str(self) -> &'static str {
        match self {
            SlotState::Owned => "owned",
            SlotState::Releasing => "releasing",
            SlotState::Pending => "pending",
        }
    }
}

/// Members, then Raft members that are not (yet) in the state, by name.
fn nodes(cluster: &Cluster, raft: &RaftView, now_ms: u64) -> Vec<NodeView> {
    let names: BTreeSet<&str> = cluster
        .members
        .keys()
        .chain(&raft.voters)
        .chain(&raft.learners)
        .map(String::as_str)
        .collect();
    names
        .into_iter()
        .map(|name| {
            let role = if raft.voters.iter().any(|v| v == name) {
                Role::Voter
            } else if raft.learners.iter().any(|l| l == name) {
                Role::Learner
            } else {
                Role::Outside
            };
            let member = cluster.members.get(name);
            NodeView {
                name: name.to_owned(),
                addr: member.map(|m| m.addr.clone()).unwrap_or_default(),
                role,
                session: member
                    .and_then(|m| m.session.as_ref())
                    .map(|s| SessionView {
                        id: s.id,
                        opened_ms: s.opened_ms,
                        age_ms: now_ms.saturating_sub(s.opened_ms),
                    }),
                labels: member.map(|m| m.labels.clone()).unwrap_or_default(),
                draining: member.is_some_and(|m| m.draining),
                slots: cluster.slots_of(name).count(),
                plugins: member
                    .map(|m| {
                        m.plugins
                            .iter()
                            .map(|(resource, a)| PluginView {
                                cooldown_until_ms: cluster
                                    .cooldown
                                    .get(resource)
                                    .and_then(|skipped| skipped.get(name))
                                    .filter(|&&until| until > now_ms)
                                    .copied(),
                                ..plugin_view(resource, a)
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        })
        .collect()
}

fn plugin_view(resource: &str, a: &crate::cluster::Advert) -> PluginView {
    PluginView {
        resource: resource.to_owned(),
        plugin: a.plugin.clone(),
        version: a.version.clone(),
        digest: a.digest.clone(),
        tickets: a.tickets,
        cooldown_until_ms: None,
        last_failure: None,
    }
}

/// Every resource a live node advertises, that has a granted slot, or that placement
/// reports a pending slot of; with its slots.
pub(super) fn resources(
    cluster: &Cluster,
    pending: &BTreeMap<(String, u32), String>,
) -> Vec<ResourceView> {
    let names: BTreeSet<&str> = cluster
        .members
        .values()
        .filter(|m| m.session.is_some())
        .flat_map(|m| m.plugins.keys())
        .chain(cluster.resources.keys())
        .chain(pending.keys().map(|(r, _)| r))
        .map(String::as_str)
        .collect();
    let winners = placement::winning(cluster);
    names
        .into_iter()
        .map(|name| {
            let wins = winners.get(name).map(|w| &w.advert);
            let granted = cluster.resources.get(name);
            let tickets = match wins {
                Some(a) => a.tickets,
                None => granted
                    .and_then(|g| g.keys().next_back())
                    .map_or(0, |last| last + 1),
            };
            let numbers: BTreeSet<u32> = (0..tickets)
                .chain(granted.into_iter().flat_map(|g| g.keys().copied()))
                .chain(
                    pending
                        .keys()
                        .filter(|(r, _)| r == name)
                        .map(|(_, slot)| *slot),
                )
                .collect();
            let slots = numbers
                .into_iter()
                .map(|n| match granted.and_then(|g| g.get(&n)) {
                    Some(s) => SlotView {
                        slot: n,
                        state: if s.releasing.is_some() {
                            SlotState::Releasing
                        } else {
                            SlotState::Owned
                        },
                        owner: Some(s.owner.clone()),
                        token: Some(s.token),
                        term: Some(s.term),
                        since_ms: Some(s.since_ms),
                        version: Some(s.version.clone()),
                        digest: Some(s.digest.clone()),
                        releasing: s.releasing.as_ref().map(|r| ReleasingView {
                            reason: r.reason.as_str().into(),
                            to: r.to.clone(),
                            at_ms: r.at_ms,
                        }),
                        pending: None,
                    },
                    None => SlotView {
                        slot: n,
                        state: SlotState::Pending,
                        owner: None,
                        token: None,
                        term: None,
                        since_ms: None,
                        version: None,
                        digest: None,
                        releasing: None,
                        pending: Some(
                            pending
                                .get(&(name.to_owned(), n))
                                .cloned()
                                .unwrap_or_else(|| "waiting for placement".into()),
                        ),
                    },
                })
                .collect();
            ResourceView {
                name: name.to_owned(),
                plugin: wins.map(|a| plugin_view(name, a)),
                require: wins.map(|a| a.require.clone()).unwrap_or_default(),
                tickets,
                slots,
            }
        })
        .collect()
}

/// Columns padded to their widest cell, two spaces apart, no trailing blanks; `empty`
/// (if not empty) under the header when there are no rows.
/// Cells are escaped here, all in one place: each holds untrusted text.
fn table(header: &[&str], rows: impl Iterator<Item = Vec<String>>, empty: &str) -> String {
    let rows: Vec<Vec<String>> = rows
        .map(|row| row.iter().map(|cell| escape(cell).into_owned()).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (cell, w) in cells.zip(&widths) {
            let _ = write!(text, "{cell:<w$}  ");
        }
        text.trim_end().to_owned() + "\n"
    };
    let mut out = line(&mut header.iter().copied());
    for row in &rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    if rows.is_empty() && !empty.is_empty() {
        out.push_str(empty);
        out.push('\n');
    }
    out
}

/// A duration for people, like kubectl's ages: `42s`, `3m20s`, `45m`, `5h`, `3d`.
pub(crate) fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..120 => format!("{s}s"),
        120..600 => format!("{}m{}s", s / 60, s % 60),
        600..10_800 => format!("{}m", s / 60),
        10_800..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// The word people read for a change's `what`: one word for one reason across status,
/// watch and page, as `tenure watch` prints them (`session-expired`; `granted
/// (restarted)` for a restart under a new token); the JSON keeps `expired` and
/// `regranted`.
fn word(what: &str) -> &str {
    match what {
        "expired" => "session-expired",
        "regranted" => "granted (restarted)",
        other => other,
    }
}

fn dash(text: &str) -> String {
    if text.is_empty() {
        "-".into()
    } else {
        text.to_owned()
    }
}

fn labels(labels: &BTreeMap<String, String>) -> String {
    list(labels.iter().map(|(k, v)| format!("{k}={v}")))
}

fn list(items: impl Iterator<Item = String>) -> String {
    dash(&items.collect::<Vec<_>>().join(","))
}

#[cfg(test)]
mod words {
    /// The text says what `tenure watch` says for the same change (issue 28): before,
    /// `expired` and `regranted`, where the watch says `session-expired` and `granted …
    /// reason=restarted`.
    #[test]
    fn a_change_reads_as_the_watch_words_it() {
        assert_eq!(super::word("expired"), "session-expired");
        assert_eq!(super::word("regranted"), "granted (restarted)");
        assert_eq!(super::word("granted"), "granted");
    }
}

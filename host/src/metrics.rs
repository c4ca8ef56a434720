//! The metrics endpoint: Prometheus `/metrics`, `/healthz` and `/readyz` over plain HTTP.
//!
//! Configured with `[metrics] listen = "127.0.0.1:9464"` (or `TENURE_METRICS_LISTEN`,
//! `--metrics-listen`); off unless configured. It serves:
//! - `GET /metrics`: the node's counters and gauges in the Prometheus text format 0.0.4
//!   (every name starts with `tenure_`; see [`render`] for the list);
//! - `GET /healthz`: `200 ok` while the process runs (a liveness probe);
//! - `GET /readyz`: `200 ready` when the node knows a leader and holds a valid lease,
//!   else `503` with the reason (a readiness probe: a node that cannot act is not ready);
//! - `404` for any other path, `405` for any other method (`HEAD` is answered like `GET`
//!   without the body), `400` for a request that is not HTTP/1.x.
//!
//! **What it deliberately is not.** A web server: one request per connection (the answer
//! closes it), no keep-alive, no chunked bodies, no TLS and no authentication: bind it to
//! loopback or a private interface; it exposes counters, never cluster data. The request
//! head is read up to [`MAX_REQUEST`] bytes within [`READ_TIMEOUT`], at most
//! [`MAX_CONNECTIONS`] connections are served at once (more are closed at once), and each
//! connection is one task. Nothing a client sends can panic it or stop the accept loop.
//!
//! The values come from a [`Probe`] (the node implements it over its shared state), read
//! fresh on every scrape; this module only formats and serves them, so it is tested with
//! a fixed [`Sample`].

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::envelope::Reason;
use crate::ratelimit::RateLimiter;
use crate::rpc::KindCount;
use crate::transport::TransportStats;

/// The longest request head read (request line and headers); longer requests get `431`.
pub const MAX_REQUEST: usize = 8 << 10;
/// How long a client may take to send its request head; then the connection is closed.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long writing the answer may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; more are closed without an answer.
pub const MAX_CONNECTIONS: usize = 32;

/// The content type of the text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Where the values come from: read on every scrape and readiness check.
pub trait Probe: Send + Sync + 'static {
    fn sample(&self) -> Sample;
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
}

impl Sample {
    /// Whether the node has a session whose lease deadline has not passed.
    pub fn lease_valid(&self) -> bool {
        self.session.is_some() && self.lease_remaining.is_some_and(|left| !left.is_zero())
    }

    /// Whether the node can act: a leader known and a valid lease; else why not.
    pub fn readiness(&self) -> Result<(), String> {
        if self.leader.is_none() {
            return Err("no leader known".into());
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

/// The running endpoint. Dropping it stops accepting; connections already accepted
/// finish within their timeouts.
pub struct MetricsServer {
    addr: SocketAddr,
    accept: JoinHandle<()>,
}

impl MetricsServer {
    /// Binds `addr` (port 0: any free port) and serves `probe` until dropped.
    pub async fn bind(addr: SocketAddr, probe: Arc<dyn Probe>) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let accept = tokio::spawn(accept_loop(listener, probe));
        Ok(Self { addr, accept })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, probe: Arc<dyn Probe>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut warnings = RateLimiter::new(3, Duration::from_secs(60));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors and the like: wait rather than spin.
                if let Some(held) = warnings.admit(std::time::Instant::now()) {
                    tracing::warn!(event = crate::events::METRICS_ERROR, %error, suppressed = held, "metrics: cannot accept a connection");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            continue; // Too many at once: dropping the stream closes it.
        };
        let probe = probe.clone();
        tokio::spawn(async move {
            serve(stream, probe.as_ref()).await;
            drop(permit);
        });
    }
}

/// Answers one request on `stream`, then closes it.
async fn serve(mut stream: TcpStream, probe: &dyn Probe) {
    let answer = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(head)) => respond(&head, probe),
        Ok(Err(Refusal::TooLarge)) => Answer::plain(431, "request header too large\n"),
        Ok(Err(Refusal::Closed)) | Err(_) => return,
    };
    let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
        stream.write_all(&answer.encode()).await?;
        stream.shutdown().await
    })
    .await;
}

enum Refusal {
    TooLarge,
    Closed,
}

/// Reads until the blank line that ends the head, at most [`MAX_REQUEST`] bytes.
async fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, Refusal> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.map_err(|_| Refusal::Closed)?;
        if n == 0 {
            // A client that half-closes after a bare request line still gets an answer.
            return if head.is_empty() {
                Err(Refusal::Closed)
            } else {
                Ok(head)
            };
        }
        // Look for the end only in what is new (and the 3 bytes before it).
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..n]);
        if head.len() > MAX_REQUEST {
            return Err(Refusal::TooLarge);
        }
        if ends_head(&head[from..]) {
            return Ok(head);
        }
    }
}

fn ends_head(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n")
}

/// The answer to a request head.
fn respond(head: &[u8], probe: &dyn Probe) -> Answer {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else {
        return Answer::plain(400, "bad request\n");
    };
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Answer::plain(400, "bad request\n");
    };
    if !version.starts_with("HTTP/1.") {
        return Answer::plain(400, "bad request: HTTP/1.x only\n");
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Answer::plain(405, "method not allowed\n").allow(),
    };
    let path = target.split('?').next().unwrap_or_default();
    let answer = match path {
        "/metrics" => {
            let mut body = String::with_capacity(8 << 10);
            render(&probe.sample(), &mut body);
            Answer {
                status: 200,
                content_type: PROMETHEUS_TEXT,
                body,
                allow: false,
                head_only: false,
            }
        }
        "/healthz" => Answer::plain(200, "ok\n"),
        "/readyz" => match probe.sample().readiness() {
            Ok(()) => Answer::plain(200, "ready\n"),
            Err(reason) => Answer::plain(503, format!("not ready: {reason}\n")),
        },
        _ => Answer::plain(404, "not found: try /metrics, /healthz or /readyz\n"),
    };
    if head_only {
        answer.without_body()
    } else {
        answer
    }
}

struct Answer {
    status: u16,
    content_type: &'static str,
    body: String,
    allow: bool,
    head_only: bool,
}

impl Answer {
    fn plain(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
            allow: false,
            head_only: false,
        }
    }

    fn allow(mut self) -> Self {
        self.allow = true;
        self
    }

    /// For `HEAD`: the same headers (`Content-Length` included), no body.
    fn without_body(mut self) -> Self {
        self.head_only = true;
        self
    }

    fn encode(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            431 => "Request Header Fields Too Large",
            503 => "Service Unavailable",
            _ => "",
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            self.content_type,
            self.body.len()
        );
        if self.allow {
            out.push_str("Allow: GET, HEAD\r\n");
        }
        out.push_str("\r\n");
        if !self.head_only {
            out.push_str(&self.body);
        }
        out.into_bytes()
    }
}

/// Writes `sample` in the Prometheus text format. The names:
///
/// | name | type | labels |
/// |---|---|---|
/// | `tenure_node_info` | gauge (1) | `node` |
/// | `tenure_rpc_sent_total`, `tenure_rpc_failed_total`, `tenure_rpc_served_total` | counter | `kind`, `name` |
/// | `tenure_envelope_rejections_total` | counter | `reason` |
/// | `tenure_control_refused_total` (forbidden, not-a-voter, join-for-another) | counter | `reason` |
/// | `tenure_transport_<counter>_total` (retries, handshakes_evicted, handshakes_rejected, handshakes_failed, connections_refused, connections_retired, streams_rejected, requests_retried, revoked, reloads, reload_failures) | counter | |
/// | `tenure_raft_term`, `tenure_raft_is_leader`, `tenure_raft_leader_known`, `tenure_raft_applied_index`, `tenure_raft_voters`, `tenure_raft_learners` | gauge | |
/// | `tenure_cluster_members`, `tenure_cluster_sessions`, `tenure_cluster_resources`, `tenure_cluster_slots_assigned` | gauge | |
/// | `tenure_slots_owned`, `tenure_plugins_running` | gauge | |
/// | `tenure_session_open`, `tenure_lease_valid`, `tenure_lease_remaining_seconds`, `tenure_ready` | gauge | |
pub fn render(sample: &Sample, out: &mut String) {
    let mut w = Writer { out };
    w.family("tenure_node_info", "gauge", "This node's name, as a label.");
    w.value("tenure_node_info", &[("node", &sample.node)], 1);

    let rpc = [
        (
            "tenure_rpc_sent_total",
            "Signed calls this node made, per message kind.",
        ),
        (
            "tenure_rpc_failed_total",
            "Signed calls this node made that failed, per message kind.",
        ),
        (
            "tenure_rpc_served_total",
            "Signed calls from peers that passed the envelope gate, per message kind.",
        ),
    ];
    for (i, (name, help)) in rpc.into_iter().enumerate() {
        w.family(name, "counter", help);
        for (count, kind_name) in &sample.rpc {
            let value = [count.sent, count.failed, count.served][i];
            let kind = count.kind.to_string();
            w.value(name, &[("kind", &kind), ("name", kind_name)], value);
        }
    }

    let name = "tenure_envelope_rejections_total";
    w.family(name, "counter", "Envelopes rejected, per reason.");
    for (reason, count) in &sample.rejections {
        w.value(name, &[("reason", reason.as_str())], *count);
    }

    let name = "tenure_control_refused_total";
    w.family(
        name,
        "counter",
        "Members' control plane messages refused as not their business, per reason.",
    );
    for (reason, count) in &sample.control_refused {
        w.value(name, &[("reason", reason.as_str())], *count);
    }

    let t = &sample.transport;
    for (field, value, help) in [
        (
            "retries",
            t.retries,
            "Initials from unvalidated addresses answered with a QUIC Retry.",
        ),
        (
            "handshakes_evicted",
            t.handshakes_evicted,
            "Handshakes in progress abandoned for a newer one at the handshake limit.",
        ),
        (
            "handshakes_rejected",
            t.handshakes_rejected,
            "Incoming handshakes refused for a security reason.",
        ),
        (
            "handshakes_failed",
            t.handshakes_failed,
            "Incoming handshakes that failed otherwise.",
        ),
        (
            "connections_refused",
            t.connections_refused,
            "Authenticated connections refused at the node's or the identity's connection limit.",
        ),
        (
            "connections_retired",
            t.connections_retired,
            "Connections retired because the peer's certificate no longer verifies.",
        ),
        (
            "streams_rejected",
            t.streams_rejected,
            "Incoming streams closed for a bad or oversized frame, or for being too slow.",
        ),
        (
            "requests_retried",
            t.requests_retried,
            "Requests sent again on a new connection.",
        ),
        (
            "revoked",
            t.revoked,
            "Handshakes refused and connections closed for a revoked certificate.",
        ),
        (
            "reloads",
            t.reloads,
            "Reloads of the node certificate or the CA bundle.",
        ),
        (
            "reload_failures",
            t.reload_failures,
            "Failed reload attempts.",
        ),
    ] {
        let name = format!("tenure_transport_{field}_total");
        w.family(&name, "counter", help);
        w.value(&name, &[], value);
    }

    let gauges = [
        ("tenure_raft_term", sample.term, "The current Raft term."),
        (
            "tenure_raft_is_leader",
            u64::from(sample.is_leader),
            "1 if this node is the Raft leader.",
        ),
        (
            "tenure_raft_leader_known",
            u64::from(sample.leader.is_some()),
            "1 if this node knows a leader.",
        ),
        (
            "tenure_raft_applied_index",
            sample.applied,
            "The last log index applied to this node's replica.",
        ),
        (
            "tenure_raft_voters",
            sample.voters as u64,
            "Raft voters in the membership.",
        ),
        (
            "tenure_raft_learners",
            sample.learners as u64,
            "Raft learners in the membership.",
        ),
        (
            "tenure_cluster_members",
            sample.members as u64,
            "Members in the replicated state.",
        ),
        (
            "tenure_cluster_sessions",
            sample.sessions as u64,
            "Members with an open session.",
        ),
        (
            "tenure_cluster_resources",
            sample.resources as u64,
            "Resources some member advertises a plugin for.",
        ),
        (
            "tenure_cluster_slots_assigned",
            sample.slots_assigned as u64,
            "Slots with an owner, cluster-wide.",
        ),
        (
            "tenure_slots_owned",
            sample.slots_owned as u64,
            "Slots granted to this node under its current session.",
        ),
        (
            "tenure_plugins_running",
            sample.plugins_running as u64,
            "Plugin supervisors running on this node.",
        ),
        (
            "tenure_session_open",
            u64::from(sample.session.is_some()),
            "1 if this node has a session.",
        ),
        (
            "tenure_lease_valid",
            u64::from(sample.lease_valid()),
            "1 if this node has a session and its lease deadline has not passed.",
        ),
        (
            "tenure_ready",
            u64::from(sample.readiness().is_ok()),
            "1 if /readyz answers 200: a leader known and a valid lease.",
        ),
    ];
    for (name, value, help) in gauges {
        w.family(name, "gauge", help);
        w.value(name, &[], value);
    }
    let name = "tenure_lease_remaining_seconds";
    w.family(
        name,
        "gauge",
        "Time left before this node's lease deadline (0 when none).",
    );
    let left = sample.lease_remaining.unwrap_or_default().as_secs_f64();
    let _ = writeln!(w.out, "{name} {left:.3}");
}

struct Writer<'a> {
    out: &'a mut String,
}

impl Writer<'_> {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn value(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, label)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{key}=\"");
                escape(label, self.out);
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// Escapes a label value: backslash, double quote and line feed.
fn escape(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests;

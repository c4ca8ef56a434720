//! The Prometheus text format (0.0.4) of one [`Sample`], written by `prometheus-client`.
//!
//! Why `prometheus-client` (the Prometheus project's own Rust client) rather than the
//! `prometheus` crate: it has no protobuf dependency, and its [`Collector`] is made for
//! values read at scrape time, which is all this node has (the counters live in the RPC
//! endpoint, Raft and the replica; nothing here increments a metric of its own). Each
//! scrape builds a registry holding one collector over a fresh [`Sample`]; the library
//! writes the names, the `_total` suffix of counters, the HELP and TYPE lines and the
//! label escaping.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use super::Sample;

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Writes `sample` in the Prometheus text format. The names (counters are registered
/// without `_total`, which the encoder appends):
///
/// | name | type | labels |
/// |---|---|---|
/// | `tenure_node_info` | gauge (1) | `node` |
/// | `tenure_rpc_sent_total`, `tenure_rpc_failed_total`, `tenure_rpc_served_total` | counter | `kind`, `name` |
/// | `tenure_envelope_rejections_total` | counter | `reason` |
/// | `tenure_control_refused_total` (forbidden, not-a-member, join-for-another, older-version, misaddressed, removed-store) | counter | `reason` |
/// | `tenure_transport_<counter>_total` (retries, handshakes_evicted, handshakes_rejected, handshakes_failed, connections_refused, connections_retired, streams_rejected, requests_retried, revoked, reloads, reload_failures) | counter | |
/// | `tenure_raft_term`, `tenure_raft_is_leader`, `tenure_raft_leader_known`, `tenure_raft_applied_index`, `tenure_raft_voters`, `tenure_raft_learners` | gauge | |
/// | `tenure_cluster_members`, `tenure_cluster_sessions`, `tenure_cluster_resources`, `tenure_cluster_slots_assigned` | gauge | |
/// | `tenure_slots_owned`, `tenure_plugins_running` | gauge | |
/// | `tenure_session_open`, `tenure_lease_valid`, `tenure_lease_remaining_seconds`, `tenure_ready` | gauge | |
/// | `tenure_certificate_expiry_timestamp_seconds` (the node's own certificate: alert on it minus `time()`) | gauge | `fingerprint` |
/// | `tenure_ca_certificate_expiry_timestamp_seconds` (each CA the node trusts) | gauge | `fingerprint` |
/// | `tenure_replica_diverged` (on the leader: 1 per member whose replica differs from its own; alert on any) | gauge | `node` |
pub fn render(sample: &Sample) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SampleCollector(sample.clone())));
    let mut out = String::with_capacity(8 << 10);
    // Writing to a String cannot fail, and every value here is encodable.
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
        .expect("the text format of a sample");
    out
}

/// One sample, as a collector: the registry calls it once, on [`render`].
#[derive(Debug)]
struct SampleCollector(Sample);

impl Collector for SampleCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sample = &self.0;
        // An info metric: the encoder names it `tenure_node_info`, of type gauge, value 1.
        let info = Info::new([("node", sample.node.as_str())]);
        info.encode(encoder.encode_descriptor(
            "tenure_node",
            "This node's name, as a label.",
            None,
            info.metric_type(),
        )?)?;

        let rpc = [
            (
                "tenure_rpc_sent",
                "Signed calls this node made, per message kind.",
            ),
            (
                "tenure_rpc_failed",
                "Signed calls this node made that failed, per message kind.",
            ),
            (
                "tenure_rpc_served",
                "Signed calls from peers that passed the envelope gate, per message kind.",
            ),
        ];
        for (i, (name, help)) in rpc.into_iter().enumerate() {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (count, kind_name) in &sample.rpc {
                let value = [count.sent, count.failed, count.served][i];
                let kind = count.kind.to_string();
                let labels = [("kind", kind.as_str()), ("name", kind_name)];
                ConstCounter::new(value).encode(metric.encode_family(&labels)?)?;
            }
        }

        let mut metric = encoder.encode_descriptor(
            "tenure_envelope_rejections",
            "Envelopes rejected, per reason.",
            None,
            MetricType::Counter,
        )?;
        for (reason, count) in &sample.rejections {
            let labels = [("reason", reason.as_str())];
            ConstCounter::new(*count).encode(metric.encode_family(&labels)?)?;
        }

        let mut metric = encoder.encode_descriptor(
            "tenure_control_refused",
            "Members' control plane messages refused as not their business, per reason.",
            None,
            MetricType::Counter,
        )?;
        for (reason, count) in &sample.control_refused {
            let labels = [("reason", reason.as_str())];
            ConstCounter::new(*count).encode(metric.encode_family(&labels)?)?;
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
            let name = format!("tenure_transport_{field}");
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(
                &name,
                help,
                None,
                counter.metric_type(),
            )?)?;
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
                "1 if /readyz answers 200: Raft runs, a leader known, a member caught up, plugins loaded, a valid lease.",
            ),
        ];
        for (name, value, help) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        if let Some((fingerprint, not_after)) = &sample.certificate {
            let mut metric = encoder.encode_descriptor(
                "tenure_certificate_expiry_timestamp_seconds",
                "When the certificate this node presents expires (seconds since the Unix epoch).",
                None,
                MetricType::Gauge,
            )?;
            let labels = [("fingerprint", fingerprint.as_str())];
            ConstGauge::new(*not_after as i64).encode(metric.encode_family(&labels)?)?;
        }
        if !sample.ca_certificates.is_empty() {
            let mut metric = encoder.encode_descriptor(
                "tenure_ca_certificate_expiry_timestamp_seconds",
                "When each CA this node trusts expires (seconds since the Unix epoch): after it, no certificate it signed is accepted.",
                None,
                MetricType::Gauge,
            )?;
            for (fingerprint, not_after) in &sample.ca_certificates {
                let labels = [("fingerprint", fingerprint.as_str())];
                ConstGauge::new(*not_after as i64).encode(metric.encode_family(&labels)?)?;
            }
        }
        if !sample.diverged.is_empty() {
            let mut metric = encoder.encode_descriptor(
                "tenure_replica_diverged",
                "On the leader: 1 for each member whose replica differs from the leader's at a log index (raft/checksums.rs).",
                None,
                MetricType::Gauge,
            )?;
            for node in sample.diverged.keys() {
                let labels = [("node", node.as_str())];
                ConstGauge::new(1).encode(metric.encode_family(&labels)?)?;
            }
        }
        let left = ConstGauge::new(sample.lease_remaining.unwrap_or_default().as_secs_f64());
        left.encode(encoder.encode_descriptor(
            "tenure_lease_remaining_seconds",
            "Time left before this node's lease deadline (0 when none).",
            None,
            left.metric_type(),
        )?)?;
        Ok(())
    }
}

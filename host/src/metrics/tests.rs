//! The exposition format from a fixed sample, and the server over real TCP on loopback:
//! every path, keep-alive, the bounds (connections, idle and silent clients, oversized
//! heads), and requests that are malformed, binary or cut short, after each of which
//! the server still answers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;
use crate::api::RaftView;

/// A probe whose sample the test sets, and which counts the statuses it built.
#[derive(Default)]
struct Fixed(Mutex<Sample>, AtomicUsize);

impl Probe for Fixed {
    fn sample(&self) -> Sample {
        self.0.lock().unwrap().clone()
    }

    fn status(&self) -> Status {
        let built = self.1.fetch_add(1, Ordering::SeqCst) as u64;
        let view = RaftView {
            node: "<b>n1</b>".into(),
            leader: Some("n2".into()),
            term: built,
            voters: vec!["<b>n1</b>".into(), "n2".into()],
            learners: vec![],
        };
        Status::build(&crate::cluster::Cluster::default(), view, vec![], 1_000)
    }
}

fn fixed(sample: Sample) -> Arc<Fixed> {
    Arc::new(Fixed(Mutex::new(sample), AtomicUsize::new(0)))
}

fn ready_sample() -> Sample {
    Sample {
        node: "n\"1".into(),
        rpc: vec![(
            KindCount {
                kind: 1,
                sent: 10,
                failed: 2,
                served: 7,
            },
            "append_entries",
        )],
        rejections: vec![(Reason::Replay, 3), (Reason::OtherCluster, 0)],
        control_refused: vec![(crate::raft::Refusal::Forbidden, 2)],
        transport: TransportStats {
            requests_retried: 4,
            ..TransportStats::default()
        },
        term: 5,
        leader: Some("n2".into()),
        is_leader: false,
        applied: 42,
        voters: 3,
        learners: 0,
        members: 3,
        sessions: 3,
        resources: 2,
        slots_assigned: 2,
        slots_owned: 1,
        plugins_running: 1,
        session: Some(9),
        lease_remaining: Some(Duration::from_millis(1500)),
        raft_stopped: None,
        member: true,
        unapplied: 3,
        loaded: true,
        certificate: Some(("sha256:ab".into(), 1_900_000_000)),
        ca_certificates: vec![
            ("sha256:c1".into(), 2_000_000_000),
            ("sha256:c2".into(), 2_100_000_000),
        ],
        diverged: [("n3".to_owned(), 48)].into(),
    }
}

#[test]
fn the_text_format_has_one_help_and_type_per_family_and_escapes_labels() {
    let text = render(&ready_sample());
    for line in [
        "tenure_node_info{node=\"n\\\"1\"} 1",
        "tenure_rpc_sent_total{kind=\"1\",name=\"append_entries\"} 10",
        "tenure_rpc_failed_total{kind=\"1\",name=\"append_entries\"} 2",
        "tenure_rpc_served_total{kind=\"1\",name=\"append_entries\"} 7",
        "tenure_envelope_rejections_total{reason=\"replay\"} 3",
        "tenure_envelope_rejections_total{reason=\"other_cluster\"} 0",
        "tenure_transport_requests_retried_total 4",
        "tenure_raft_term 5",
        "tenure_raft_is_leader 0",
        "tenure_raft_leader_known 1",
        "tenure_raft_applied_index 42",
        "tenure_raft_voters 3",
        "tenure_cluster_sessions 3",
        "tenure_cluster_slots_assigned 2",
        "tenure_slots_owned 1",
        "tenure_plugins_running 1",
        "tenure_lease_valid 1",
        "tenure_ready 1",
        "tenure_lease_remaining_seconds 1.5",
        "tenure_certificate_expiry_timestamp_seconds{fingerprint=\"sha256:ab\"} 1900000000",
        "tenure_ca_certificate_expiry_timestamp_seconds{fingerprint=\"sha256:c1\"} 2000000000",
        "tenure_ca_certificate_expiry_timestamp_seconds{fingerprint=\"sha256:c2\"} 2100000000",
        "tenure_replica_diverged{node=\"n3\"} 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    let mut families = std::collections::BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap();
            assert!(families.insert(name.to_owned()), "{name} declared twice");
            assert!(name.starts_with("tenure_"), "{name}");
        } else if !line.starts_with("# HELP ") {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(families.contains(name), "{name} has no TYPE before it");
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}

#[test]
fn readiness_needs_raft_a_leader_membership_a_caught_up_replica_plugins_and_a_lease() {
    assert!(ready_sample().readiness().is_ok());
    let reason = |change: fn(&mut Sample)| {
        let mut sample = ready_sample();
        change(&mut sample);
        sample.readiness().unwrap_err()
    };
    assert_eq!(reason(|s| s.leader = None), "no leader known");
    assert!(reason(|s| s.raft_stopped = Some("disk full".into())).contains("stopped: disk full"));
    assert_eq!(
        reason(|s| s.member = false),
        "not a member of the cluster yet"
    );
    assert!(reason(|s| s.unapplied = MAX_UNAPPLIED + 1).contains("replica is behind"));
    assert!(reason(|s| s.loaded = false).contains("plugins folder"));
    assert_eq!(reason(|s| s.session = None), "no session");
    assert!(reason(|s| s.lease_remaining = None).contains("acknowledged"));
    assert!(reason(|s| s.lease_remaining = Some(Duration::ZERO)).contains("passed"));
}

/// Sends `request` on a new connection and returns its one answer (or what came before
/// the server closed the connection: nothing, for a request it drops).
async fn fetch(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    read_answer(&mut stream).await
}

async fn get(addr: SocketAddr, path: &str) -> String {
    fetch(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
    .await
}

fn status(answer: &str) -> &str {
    answer.split(' ').nth(1).unwrap_or("(none)")
}

fn body(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

#[tokio::test]
async fn every_path_answers_and_bad_requests_do_not_stop_it() {
    let probe = fixed(Sample::default());
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), probe.clone())
        .await
        .unwrap();
    let addr = server.local_addr();

    // Liveness says nothing of the cluster: 200 while no leader is known.
    for path in ["/livez", "/healthz"] {
        let live = get(addr, path).await;
        assert_eq!((status(&live), body(&live)), ("200", "ok\n"), "{path}");
    }
    let readyz = get(addr, "/readyz").await;
    assert_eq!(status(&readyz), "503", "{readyz}");
    assert!(body(&readyz).contains("no leader known"), "{readyz}");

    *probe.0.lock().unwrap() = ready_sample();
    let readyz = get(addr, "/readyz").await;
    assert_eq!(status(&readyz), "200", "{readyz}");
    let metrics = get(addr, "/metrics?x=1").await;
    assert_eq!(status(&metrics), "200");
    assert!(
        header(&metrics, "content-type").starts_with("text/plain; version=0.0.4"),
        "{metrics}"
    );
    assert!(body(&metrics).contains("\ntenure_raft_term 5\n"));
    let length: usize = header(&metrics, "content-length").parse().unwrap();
    assert_eq!(length, body(&metrics).len());

    // HTTP/1.0 without keep-alive: the server closes after the answer.
    let head = fetch(addr, b"HEAD /metrics HTTP/1.0\r\n\r\n").await;
    assert_eq!((status(&head), body(&head)), ("200", ""));
    assert_eq!(header(&head, "content-length"), length.to_string());
    assert_eq!(status(&get(addr, "/nope").await), "404");
    let post = fetch(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
    assert_eq!(status(&post), "405");
    assert_eq!(header(&post, "allow"), "GET, HEAD");

    // Malformed and binary requests get a 4xx or 5xx and the connection is closed.
    for bad in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET /metrics\r\n\r\n",
        b"GET /metrics HTTP/2.0\r\n\r\n",
        b"GET  /metrics HTTP/1.1\r\n\r\n",
        b"\xff\xfe\x00\x01\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nBad\x01Header: 1\r\n\r\n",
    ] {
        let answer = fetch(addr, bad).await;
        let code = status(&answer);
        assert!(
            code.starts_with('4') || code.starts_with('5'),
            "{:?}: {answer}",
            String::from_utf8_lossy(bad)
        );
    }
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(MAX_REQUEST)
    );
    assert_eq!(status(&fetch(addr, huge.as_bytes()).await), "431");
    drop(TcpStream::connect(addr).await.unwrap());
    let _silent = TcpStream::connect(addr).await.unwrap();
    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial.write_all(b"GET /met").await.unwrap();
    // A client that half-closes after a request cut short gets no answer, and the
    // server goes on.
    let mut cut = TcpStream::connect(addr).await.unwrap();
    cut.write_all(b"GET /healthz HTTP/1.1").await.unwrap();
    cut.shutdown().await.unwrap();

    // The silent, partial and cut-short clients hold their tasks; others are still served.
    assert_eq!(status(&get(addr, "/healthz").await), "200");
    assert_eq!(status(&get(addr, "/metrics").await), "200");
    drop(server);
    assert!(
        tokio::time::timeout(Duration::from_secs(1), async {
            loop {
                if TcpStream::connect(addr).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .is_ok(),
        "dropping the server stops accepting"
    );
}

/// The value of header `name` (lower case) in an answer; empty when absent.
fn header(answer: &str, name: &str) -> String {
    let head = answer.split_once("\r\n\r\n").map_or(answer, |(h, _)| h);
    head.lines()
        .filter_map(|l| l.split_once(": "))
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.to_owned())
        .unwrap_or_default()
}

/// Reads one answer (head and `Content-Length` body) from a connection; returns early
/// with what it has when the server closes the connection.
async fn read_answer(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((_, body)) = text.split_once("\r\n\r\n") {
            let length = header(&text, "content-length").parse().unwrap_or(0);
            if body.len() >= length {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("an answer, or the connection closed, within 10 s")
            .unwrap_or(0);
        if n == 0 {
            return text;
        }
        got.extend_from_slice(&chunk[..n]);
    }
}

/// Whether the server closes `stream` within `bound` (reads nothing more, or fails).
async fn closed_within(stream: &mut TcpStream, bound: Duration) -> bool {
    let mut chunk = [0u8; 1024];
    tokio::time::timeout(bound, async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn two_requests_on_one_kept_alive_connection_are_both_answered() {
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), fixed(ready_sample()))
        .await
        .unwrap();
    let mut stream = TcpStream::connect(server.local_addr()).await.unwrap();
    for path in ["/healthz", "/metrics", "/status"] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let answer = read_answer(&mut stream).await;
        assert_eq!(
            status(&answer),
            "200",
            "{path} on the kept-alive connection: {answer:?}"
        );
    }
}

#[tokio::test]
async fn the_page_and_the_status_are_served() {
    let probe = fixed(ready_sample());
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), probe.clone())
        .await
        .unwrap();
    let addr = server.local_addr();
    let page = get(addr, "/").await;
    assert_eq!(status(&page), "200", "{page}");
    assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
    assert_eq!(
        header(&page, "content-security-policy"),
        *page::CONTENT_SECURITY_POLICY
    );
    assert_eq!(body(&page), page::HTML);

    let answer = get(addr, "/status").await;
    assert_eq!(status(&answer), "200", "{answer}");
    assert_eq!(header(&answer, "content-type"), "application/json");
    assert_eq!(header(&answer, "cache-control"), "no-store");
    let json: serde_json::Value = serde_json::from_str(body(&answer)).unwrap();
    let expected = serde_json::to_value(probe.status()).unwrap();
    // The same data as `tenure status --json` (the term counts the builds).
    assert_eq!(json["node"], expected["node"]);
    assert_eq!(json["nodes"], expected["nodes"]);
    assert_eq!(json["leader"], "n2");
}

#[tokio::test]
async fn the_status_is_built_at_most_once_per_interval() {
    let probe = fixed(ready_sample());
    let limits = Limits {
        status_every: Duration::from_secs(3600),
        ..Limits::default()
    };
    let server = MetricsServer::bind_with("127.0.0.1:0".parse().unwrap(), probe.clone(), limits)
        .await
        .unwrap();
    for _ in 0..5 {
        assert_eq!(status(&get(server.local_addr(), "/status").await), "200");
    }
    assert_eq!(
        probe.1.load(Ordering::SeqCst),
        1,
        "five requests, one build"
    );
}

#[tokio::test]
async fn silent_idle_and_surplus_connections_are_closed() {
    let limits = Limits {
        connections: 2,
        head_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let server = MetricsServer::bind_with(
        "127.0.0.1:0".parse().unwrap(),
        fixed(ready_sample()),
        limits,
    )
    .await
    .unwrap();
    let addr = server.local_addr();

    // Two silent clients take both places (the server accepts connections in the order
    // they were made): a third connection is closed unanswered.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut trickle = TcpStream::connect(addr).await.unwrap();
    trickle
        .write_all(b"GET /metrics HTTP/1.1\r\n")
        .await
        .unwrap();
    let mut surplus = TcpStream::connect(addr).await.unwrap();
    let _ = surplus.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").await;
    let answer = read_answer(&mut surplus).await;
    assert_eq!(
        answer, "",
        "a connection beyond the limit is closed unanswered"
    );
    // The silent one and the one whose head never ends are closed by the timeouts.
    assert!(
        closed_within(&mut silent, Duration::from_secs(5)).await,
        "silent client"
    );
    assert!(
        closed_within(&mut trickle, Duration::from_secs(5)).await,
        "unfinished head"
    );

    // An idle kept-alive connection is closed too, after its answer.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(status(&read_answer(&mut idle).await), "200");
    assert!(
        closed_within(&mut idle, Duration::from_secs(5)).await,
        "idle client"
    );
    // Their places are free again.
    assert_eq!(status(&get(addr, "/healthz").await), "200");
}

//! The exposition format from a fixed sample, and the server over real TCP on loopback:
//! every path, and requests that are malformed, oversized, binary, silent or cut short,
//! after each of which the server still answers.

use std::sync::Mutex;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// A probe whose sample the test sets.
#[derive(Default)]
struct Fixed(Mutex<Sample>);

impl Probe for Fixed {
    fn sample(&self) -> Sample {
        self.0.lock().unwrap().clone()
    }
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
        rejections: vec![(Reason::Replay, 3), (Reason::Skew, 0)],
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
    }
}

#[test]
fn the_text_format_has_one_help_and_type_per_family_and_escapes_labels() {
    let mut text = String::new();
    render(&ready_sample(), &mut text);
    for line in [
        "tenure_node_info{node=\"n\\\"1\"} 1",
        "tenure_rpc_sent_total{kind=\"1\",name=\"append_entries\"} 10",
        "tenure_rpc_failed_total{kind=\"1\",name=\"append_entries\"} 2",
        "tenure_rpc_served_total{kind=\"1\",name=\"append_entries\"} 7",
        "tenure_envelope_rejections_total{reason=\"replay\"} 3",
        "tenure_envelope_rejections_total{reason=\"skew\"} 0",
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
        "tenure_lease_remaining_seconds 1.500",
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
fn readiness_needs_a_leader_a_session_and_time_left() {
    assert!(ready_sample().readiness().is_ok());
    let reason = |change: fn(&mut Sample)| {
        let mut sample = ready_sample();
        change(&mut sample);
        sample.readiness().unwrap_err()
    };
    assert_eq!(reason(|s| s.leader = None), "no leader known");
    assert_eq!(reason(|s| s.session = None), "no session");
    assert!(reason(|s| s.lease_remaining = None).contains("acknowledged"));
    assert!(reason(|s| s.lease_remaining = Some(Duration::ZERO)).contains("passed"));
}

/// Sends `request` on a new connection and returns the whole answer.
async fn fetch(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    // Half-close, as `curl` does not but a client cut short would: the server answers
    // what it got.
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the server answers and closes")
        .unwrap();
    String::from_utf8(answer).unwrap()
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
    let probe = Arc::new(Fixed::default());
    let server = MetricsServer::bind("127.0.0.1:0".parse().unwrap(), probe.clone())
        .await
        .unwrap();
    let addr = server.local_addr();

    let healthz = get(addr, "/healthz").await;
    assert_eq!((status(&healthz), body(&healthz)), ("200", "ok\n"));
    let readyz = get(addr, "/readyz").await;
    assert_eq!(status(&readyz), "503", "{readyz}");
    assert!(body(&readyz).contains("no leader known"), "{readyz}");

    *probe.0.lock().unwrap() = ready_sample();
    let readyz = get(addr, "/readyz").await;
    assert_eq!(status(&readyz), "200", "{readyz}");
    let metrics = get(addr, "/metrics?x=1").await;
    assert_eq!(status(&metrics), "200");
    assert!(metrics.contains("Content-Type: text/plain; version=0.0.4"));
    assert!(body(&metrics).contains("\ntenure_raft_term 5\n"));
    let length: usize = metrics
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(length, body(&metrics).len());

    let head = fetch(addr, b"HEAD /metrics HTTP/1.0\r\n\r\n").await;
    assert_eq!((status(&head), body(&head)), ("200", ""));
    assert!(head.contains(&format!("Content-Length: {length}\r\n")));
    assert_eq!(status(&get(addr, "/nope").await), "404");
    let post = fetch(addr, b"POST /metrics HTTP/1.1\r\n\r\n").await;
    assert_eq!(status(&post), "405");
    assert!(post.contains("Allow: GET, HEAD"));

    // Malformed, binary, oversized, cut short, and silent clients.
    for bad in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET /metrics\r\n\r\n",
        b"GET /metrics HTTP/2.0\r\n\r\n",
        b"GET  /metrics HTTP/1.1\r\n\r\n",
        b"\xff\xfe\x00\x01\r\n\r\n",
        b"GET /healthz HTTP/1.1", // the client half-closes without the blank line
    ] {
        let answer = fetch(addr, bad).await;
        let expected = if bad.starts_with(b"GET /healthz") {
            "200"
        } else {
            "400"
        };
        assert_eq!(
            status(&answer),
            expected,
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

    // The silent and partial clients hold their tasks; others are still served.
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

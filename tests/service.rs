//! Running a node as a service, against the real binary: the probes an orchestrator uses.
//! `/livez` answers 200 while the node has no leader and `/readyz` does not (a liveness
//! probe that followed the leader would restart every node of a cluster that lost its
//! quorum).

mod support;

use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use support::cluster::Cluster;
use support::*;

/// A free TCP port on loopback for a metrics listener.
fn free_metrics_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// One plain HTTP/1.1 GET: the status code and the body.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        return (0, "(no connection)".into());
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let code = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (code, body)
}

/// Polls `path` until its status is `code`; returns the body. Fails after `bound`.
fn wait_code(addr: SocketAddr, path: &str, code: u16, bound: Duration) -> String {
    let deadline = Instant::now() + bound;
    loop {
        let (got, body) = get(addr, path);
        if got == code {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{path} did not answer {code} within {bound:?}; last: {got} {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn livez_stays_200_while_the_node_has_no_leader_and_readyz_does_not() {
    let mut cluster = Cluster::builder(3).build();
    let metrics = free_metrics_addr();
    cluster
        .node_mut(0)
        .set_env("TENURE_METRICS_LISTEN", &metrics.to_string());

    eprintln!("phase: n1 alone waits for the others: alive, not ready");
    cluster.spawn(0);
    wait_code(metrics, "/livez", 200, WAIT);
    let (code, body) = get(metrics, "/readyz");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("no leader known"), "{body}");
    assert_eq!(
        get(metrics, "/healthz").0,
        200,
        "/healthz is /livez's alias"
    );

    eprintln!("phase: the others start: n1 becomes ready");
    cluster.spawn(1);
    cluster.spawn(2);
    cluster.wait_formed();
    wait_code(metrics, "/readyz", 200, Duration::from_secs(60));

    eprintln!("phase: the others die: n1 loses its lease and leader, stays alive");
    cluster.kill(1);
    cluster.kill(2);
    let why = wait_code(metrics, "/readyz", 503, Duration::from_secs(60));
    eprintln!("/readyz: {why}");
    assert!(why.starts_with("not ready: "), "{why}");
    for _ in 0..5 {
        assert_eq!(get(metrics, "/livez").0, 200);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(cluster.alive(0), "{}", cluster.node(0).tail());

    eprintln!("phase: one comes back: n1 is ready again");
    cluster.spawn(1);
    wait_code(metrics, "/readyz", 200, Duration::from_secs(60));
    cluster.stop_all();
}

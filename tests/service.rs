//! Running a node as a service, against the real binary.
//! - systemd's notifications, on a `NOTIFY_SOCKET` this test binds: READY=1 after
//!   `node.ready` and once `/readyz` says ready, WATCHDOG=1 when `WATCHDOG_USEC` is set,
//!   STOPPING=1 on SIGTERM.
//! - The probes an orchestrator uses: `/livez` answers 200 while the node has no leader and
//!   `/readyz` does not (a liveness probe that followed the leader would restart every node
//!   of a cluster that lost its quorum).
//! - A clean stop (SIGTERM) says nothing at ERROR: openraft's complaints about its own
//!   core having stopped are not errors once the node is stopping.

mod support;

use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant, SystemTime};

use support::cluster::Cluster;
use support::*;

/// A free TCP port on loopback for a metrics listener.
fn free_metrics_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Polls `path` until its status is `code`; returns the body. Fails after `bound`.
fn wait_code(addr: SocketAddr, path: &str, code: u16, bound: Duration) -> String {
    let deadline = Instant::now() + bound;
    loop {
        let (got, body) = http_get(addr, path);
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

/// The notifications received on `socket` until `until` matches one, or `bound` passes.
fn receive_until(
    socket: &UnixDatagram,
    bound: Duration,
    until: impl Fn(&str) -> bool,
) -> Vec<(SystemTime, String)> {
    let deadline = Instant::now() + bound;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no such notification within {bound:?}; received: {got:?}"
        );
        socket.set_read_timeout(Some(left)).unwrap();
        let Ok(n) = socket.recv(&mut buf) else {
            continue;
        };
        let message = String::from_utf8_lossy(&buf[..n]).into_owned();
        let done = until(&message);
        got.push((SystemTime::now(), message));
        if done {
            return got;
        }
    }
}

fn says(message: &str, line: &str) -> bool {
    message.lines().any(|l| l == line)
}

#[test]
fn systemd_hears_ready_after_node_ready_watchdog_pings_and_stopping_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    let metrics = free_metrics_addr();
    let mut node = Node::new("systemd");
    node.install("heartbeat.wasm", plugins().heartbeat_bytes());
    node.set_env("NOTIFY_SOCKET", socket_path.to_str().unwrap());
    node.set_env("WATCHDOG_USEC", "2000000");
    node.set_env("TENURE_METRICS_LISTEN", &metrics.to_string());
    node.spawn();

    eprintln!("phase: READY=1 arrives, after node.ready, when /readyz says ready");
    let before = receive_until(&socket, Duration::from_secs(60), |m| says(m, "READY=1"));
    let (ready_at, _) = before.last().unwrap().clone();
    let (code, body) = http_get(metrics, "/readyz");
    assert_eq!((code, body.as_str()), (200, "ready\n"));
    let node_ready = node.wait_for("node.ready", is("node.ready").f(), WAIT);
    let written = timestamp_us(&node_ready);
    assert!(
        written <= system_time_us(ready_at),
        "READY=1 came before node.ready: {node_ready}"
    );

    eprintln!("phase: WATCHDOG=1 every second (WATCHDOG_USEC = 2 s)");
    let started = Instant::now();
    let pings = receive_until(&socket, Duration::from_secs(10), {
        let seen = std::cell::Cell::new(0);
        move |m| {
            if says(m, "WATCHDOG=1") {
                seen.set(seen.get() + 1);
            }
            seen.get() == 3
        }
    });
    let elapsed = started.elapsed();
    eprintln!("three pings in {elapsed:?}: {pings:?}");
    // Three pings span two intervals of 1 s; the bound leaves room for a loaded machine,
    // and a ping later than 2 s apart would have made systemd restart the node.
    assert!(
        elapsed < Duration::from_secs(6),
        "pings too slow: {elapsed:?}"
    );
    for pair in pings.windows(2) {
        let gap = pair[1].0.duration_since(pair[0].0).unwrap_or_default();
        assert!(
            gap < Duration::from_secs(2),
            "a gap of {gap:?} between pings: {pings:?}"
        );
    }

    eprintln!("phase: SIGTERM: STOPPING=1, then a clean exit");
    node.signal(libc::SIGTERM);
    receive_until(&socket, Duration::from_secs(30), |m| says(m, "STOPPING=1"));
    let status = node.wait_exit(WAIT);
    assert!(status.success(), "{status:?}\n{}", node.tail());
    // No second READY=1 ever (it is said once).
    assert_eq!(
        before.iter().filter(|(_, m)| says(m, "READY=1")).count(),
        1,
        "{before:?}"
    );
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
    let (code, body) = http_get(metrics, "/readyz");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("no leader known"), "{body}");
    assert_eq!(
        http_get(metrics, "/healthz").0,
        200,
        "/healthz is /livez's alias"
    );

    eprintln!("phase: /metrics shows when n1's certificate expires (issued for 90 days)");
    let (code, metrics_text) = http_get(metrics, "/metrics");
    assert_eq!(code, 200);
    let expiry: u64 = metrics_text
        .lines()
        .find(|l| {
            l.starts_with("tenure_certificate_expiry_timestamp_seconds{fingerprint=\"sha256:")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no certificate expiry in\n{metrics_text}"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let days = (expiry.saturating_sub(now)) / 86_400;
    assert!((88..=90).contains(&days), "expires in {days} days");
    // And its CA's (`tenure certs init`'s default validity).
    let ca_expiry: u64 = metrics_text
        .lines()
        .find(|l| {
            l.starts_with("tenure_ca_certificate_expiry_timestamp_seconds{fingerprint=\"sha256:")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no CA expiry in\n{metrics_text}"));
    let ca_days = (ca_expiry.saturating_sub(now)) / 86_400;
    let made = tenure::pki::DEFAULT_CA_VALIDITY_DAYS as u64;
    assert!(
        (made - 2..=made).contains(&ca_days),
        "the CA expires in {ca_days} days, not {made}"
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
        assert_eq!(http_get(metrics, "/livez").0, 200);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(cluster.alive(0), "{}", cluster.node(0).tail());

    eprintln!("phase: one comes back: n1 is ready again");
    cluster.spawn(1);
    wait_code(metrics, "/readyz", 200, Duration::from_secs(60));
    cluster.stop_all();
}

#[test]
fn a_clean_stop_of_a_follower_or_the_leader_logs_no_error_lines() {
    // openraft logs at ERROR a call that reaches its core after `Raft::shutdown` (a
    // leader's AppendEntries arriving in the moment between the core's stop and the RPC
    // endpoint's close). It is a race (seen in 2 of 14 stops of a follower by hand, 0 of
    // 8 in a first run of this test), so the followers are stopped many times while the
    // counter writes its state and the leader sends heartbeats every 50 ms.
    const FOLLOWER_STOPS: usize = 24;
    let mut cluster = counting_cluster(Duration::from_secs(2));
    let mut errors: Vec<String> = Vec::new();
    let stop = |cluster: &mut Cluster, i: usize, errors: &mut Vec<String>| {
        let signalled = system_time_us(SystemTime::now());
        let status = cluster.stop(i);
        assert!(status.success(), "{status}\n{}", cluster.node(i).tail());
        errors.extend(
            cluster
                .node(i)
                .events()
                .iter()
                .filter(|e| e["level"] == "ERROR" && timestamp_us(e) >= signalled)
                .map(|e| format!("{}: {e}", cluster.name(i))),
        );
    };
    for round in 0..FOLLOWER_STOPS {
        let leader = cluster.wait_leader();
        let followers: Vec<usize> = (0..cluster.len())
            .filter(|&i| cluster.name(i) != leader)
            .collect();
        let follower = followers[round % followers.len()];
        eprintln!(
            "phase: round {round}: SIGTERM to the follower {}",
            cluster.name(follower)
        );
        stop(&mut cluster, follower, &mut errors);
        cluster.spawn(follower);
        cluster.wait_formed();
    }
    let leader = cluster.index(&cluster.wait_leader());
    eprintln!("phase: SIGTERM to the leader {}", cluster.name(leader));
    stop(&mut cluster, leader, &mut errors);
    cluster.stop_all();
    assert!(
        errors.is_empty(),
        "{} ERROR lines after a SIGTERM:\n{}",
        errors.len(),
        errors.join("\n")
    );
}

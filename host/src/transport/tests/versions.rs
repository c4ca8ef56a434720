//! The node protocol's version window at the handshake (`crate::version`): a peer of
//! another build is refused with both versions named, on real QUIC connections. The
//! other build is a raw quinn endpoint holding a valid node certificate that offers only
//! the ALPN labels that build offered: `tenure/5` for every build before 0.2.0.

use super::*;

/// A node of today's unversioned build (ALPN `tenure/5` only) dials this build: the
/// handshake completes, then this node closes the connection saying what to do, and the
/// dialer reads that reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialer_of_a_build_before_versions_is_refused_naming_both_versions() {
    init_logs();
    let certs = Certs::new();
    let n1 = Node::start("n1", certs.node("n1")).await;
    let (provider, own, trust) = tls_parts(&certs.node("n2"));
    let (client, _) = tls::configs_speaking(&provider, &own, &trust, &[b"tenure/5"]);
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let conn = endpoint
        .connect_with(client, n1.addr, "n1")
        .unwrap()
        .await
        .expect("the handshake completes: both list tenure/5");
    let reason = match conn.closed().await {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(close.error_code, wire::CLOSE_IDENTITY);
            String::from_utf8_lossy(&close.reason).into_owned()
        }
        other => panic!("closed otherwise: {other}"),
    };
    println!("old dialer: {reason}");
    assert!(reason.contains("tenure/5"), "{reason}");
    assert!(
        reason.contains(&format!("tenure/{}", crate::version::WIRE_VERSION)),
        "{reason}"
    );
    assert!(reason.contains("stop every node"), "{reason}");
    wait_until("n1 to count the refusal", || {
        n1.transport.stats().handshakes_rejected >= 1
    })
    .await;
    assert!(!n1.connected_to("n2"));
}

/// This build dials a node of the unversioned build: it refuses the connection itself,
/// and its error names both versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dialing_a_node_of_a_build_before_versions_fails_naming_both_versions() {
    init_logs();
    let certs = Certs::new();
    let n1 = Node::start("n1", certs.node("n1")).await;
    let (provider, own, trust) = tls_parts(&certs.node("n2"));
    let (_, server) = tls::configs_speaking(&provider, &own, &trust, &[b"tenure/5"]);
    let old = quinn::Endpoint::server(server, "127.0.0.1:0".parse().unwrap()).unwrap();
    let old_addr = old.local_addr().unwrap();
    let accepting = tokio::spawn(async move {
        let conn = old.accept().await.unwrap().await;
        (old, conn)
    });
    let err = n1
        .transport
        .request("n2", old_addr, b"hi".to_vec())
        .await
        .unwrap_err();
    let text = err.to_string();
    println!("dialing an old node: {text}");
    assert!(
        matches!(err, TransportError::PeerRejected { .. }),
        "{err:?}"
    );
    assert!(text.contains("tenure/5"), "{text}");
    assert!(text.contains("stop every node"), "{text}");
    drop(accepting);
}

/// Two nodes of this build negotiate its newest version, and the connection says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_of_this_build_negotiate_its_newest_version() {
    init_logs();
    let certs = Certs::new();
    let n1 = Node::start("n1", certs.node("n1")).await;
    let n2 = Node::start("n2", certs.node("n2")).await;
    n1.assert_serves(&n2).await;
    let versions: Vec<u32> = n1
        .transport
        .connections()
        .iter()
        .map(|c| c.peer.version)
        .collect();
    assert_eq!(versions, [crate::version::WIRE_VERSION]);
}

//! Signed calls over the real transport, in process, on loopback, with certificates from
//! the PKI module (the helpers are the transport tests'). Every rejection test checks the
//! reason counted on the receiver and that the receiver then still serves a good call. The
//! rotation test runs signed calls both ways while a certificate and then the CA are
//! rotated, and requires that none fails. Conditions are polled, never slept for.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::*;
use crate::envelope::{Reason, Sealer};
use crate::future::BoxFuture;
use crate::pki::{self, Subject};
use crate::transport::tests::{
    Certs, Load, config, fingerprint_of, init_logs, wait_until, write_atomically,
};
use crate::transport::{
    Handler, Local, PeerInfo, TlsFiles, Transport, TransportConfig, TransportError,
};

const KIND: u16 = 7;

/// Echoes `name kind payload`; remembers the last certificate of every caller.
#[derive(Default)]
struct Echo {
    seen: Mutex<HashMap<String, String>>,
}

impl Echo {
    fn last(&self, peer: &str) -> Option<String> {
        self.seen.lock().unwrap().get(peer).cloned()
    }
}

impl Service for Echo {
    fn call(
        &self,
        from: &PeerInfo,
        kind: u16,
        payload: Vec<u8>,
    ) -> BoxFuture<Result<Vec<u8>, String>> {
        self.seen
            .lock()
            .unwrap()
            .insert(from.identity.name.clone(), from.fingerprint.clone());
        let mut reply = format!("{} {kind} ", from.identity.name).into_bytes();
        reply.extend_from_slice(&payload);
        Box::pin(async move { Ok(reply) })
    }
}

struct Node {
    name: String,
    rpc: Rpc,
    addr: SocketAddr,
    files: TlsFiles,
    echo: Arc<Echo>,
}

impl Node {
    async fn start(name: &str, files: TlsFiles, incarnation: u64) -> Node {
        Node::start_with(config(), name, files, incarnation).await
    }

    async fn start_with(
        config: TransportConfig,
        name: &str,
        files: TlsFiles,
        incarnation: u64,
    ) -> Node {
        let echo = Arc::new(Echo::default());
        let rpc = Rpc::bind(
            config,
            files.clone(),
            incarnation,
            Default::default(),
            echo.clone(),
        )
        .await
        .unwrap();
        let addr = rpc.local_addr().unwrap();
        Node {
            name: name.to_owned(),
            rpc,
            addr,
            files,
            echo,
        }
    }

    async fn call(&self, to: &Node, payload: &[u8]) -> Result<Vec<u8>, RpcError> {
        self.rpc
            .call(&to.name, to.addr, KIND, payload.to_vec())
            .await
    }

    /// Asserts a signed round trip to `to` works.
    async fn assert_serves(&self, to: &Node) {
        let reply = self.call(to, b"ping").await.unwrap();
        assert_eq!(reply, format!("{} {KIND} ping", self.name).into_bytes());
    }

    /// Sends `make`'s bytes, made with the signer of the connection, to `to` over this
    /// node's transport, unchecked.
    async fn send_raw(
        &self,
        to: &Node,
        make: impl Fn(&Local) -> Vec<u8> + Send + Sync,
    ) -> Result<Vec<u8>, TransportError> {
        self.rpc
            .transport()
            .request_with(&to.name, to.addr, make)
            .await
            .map(|(response, _)| response)
    }

    fn sealer(&self) -> &Sealer {
        &self.rpc.core.sealer
    }
}

/// Asserts `result` is the receiver's refusal of our envelope.
fn assert_refused(result: Result<Vec<u8>, TransportError>, reason: Reason) {
    match result {
        Err(TransportError::Remote { message, .. }) => {
            assert!(message.contains(reason.as_str()), "{message}")
        }
        other => panic!("expected a refusal for {reason}, got {other:?}"),
    }
}

fn total(rpc: &Rpc) -> u64 {
    rpc.rejections().iter().map(|(_, n)| n).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_calls_round_trip_in_both_directions() {
    init_logs();
    let certs = Certs::new();
    let n1 = Node::start("n1", certs.node("n1"), 1).await;
    let n2 = Node::start("n2", certs.node("n2"), 1).await;
    for _ in 0..3 {
        n1.assert_serves(&n2).await;
        n2.assert_serves(&n1).await;
    }
    assert_eq!(n2.echo.last("n1"), Some(fingerprint_of(&n1.files.cert)));
    assert_eq!(n1.echo.last("n2"), Some(fingerprint_of(&n2.files.cert)));
    assert_eq!((total(&n1.rpc), total(&n2.rpc)), (0, 0));
    assert_eq!(n1.rpc.core.verifiers.len(), 1);
    let counted = KindCount {
        kind: KIND,
        sent: 3,
        failed: 0,
        served: 3,
    };
    assert_eq!(n1.rpc.counts(), [counted]);
    assert_eq!(n2.rpc.counts(), [counted]);
    n1.rpc.close().await;
    n2.rpc.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_envelopes_are_counted_and_refused_and_good_calls_carry_on() {
    init_logs();
    let certs = Certs::new();
    let n1 = Node::start("n1", certs.node("n1"), 10).await;
    let n2 = Node::start("n2", certs.node("n2"), 1).await;
    let n3 = Node::start("n3", certs.node("n3"), 1).await;
    n1.assert_serves(&n2).await;
    let now = SystemTime::now;

    // A tampered payload: the signature no longer matches.
    let tampered = n1
        .send_raw(&n2, |local| {
            let mut wire = n1
                .sealer()
                .seal(&local.signer, "n2", KIND, b"tamper-me", now());
            let at = wire.windows(9).position(|w| w == b"tamper-me").unwrap();
            wire[at] ^= 1;
            wire
        })
        .await;
    assert_refused(tampered, Reason::BadSignature);
    assert_eq!(n2.rpc.rejected(Reason::BadSignature), 1);
    n1.assert_serves(&n2).await;

    // Addressed to another node.
    let misdirected = n1
        .send_raw(&n2, |local| {
            n1.sealer().seal(&local.signer, "n3", KIND, b"x", now())
        })
        .await;
    assert_refused(misdirected, Reason::WrongRecipient);
    assert_eq!(n2.rpc.rejected(Reason::WrongRecipient), 1);
    n1.assert_serves(&n2).await;

    // The same sealed bytes twice: accepted once.
    // (n1's certificate has not changed, so its current key is every connection's.)
    let n1_key = pki::load_identity(&n1.files.cert, &n1.files.key).unwrap();
    let once = n1.sealer().seal(&n1_key.signer, "n2", KIND, b"once", now());
    n1.send_raw(&n2, |_| once.clone()).await.unwrap();
    assert_refused(n1.send_raw(&n2, |_| once.clone()).await, Reason::Replay);
    assert_eq!(n2.rpc.rejected(Reason::Replay), 1);
    n1.assert_serves(&n2).await;

    // n3 relays an envelope n1 signed: not signed by the TLS peer's key.
    let relayed = Sealer::new("n1".into(), 10).seal(&n1_key.signer, "n2", KIND, b"r", now());
    assert_refused(
        n3.send_raw(&n2, |_| relayed.clone()).await,
        Reason::BadSignature,
    );
    assert_eq!(n2.rpc.rejected(Reason::BadSignature), 2);
    // n3 signs with its own key but names n1 as the sender.
    let forged = n3_forges_n1();
    assert_refused(
        n3.send_raw(&n2, move |local| forged(local)).await,
        Reason::SenderMismatch,
    );
    assert_eq!(n2.rpc.rejected(Reason::SenderMismatch), 1);
    n3.assert_serves(&n2).await;
    n1.assert_serves(&n2).await;

    // A second run of n1 with a lower incarnation than the one n2 has heard from.
    let stale = Node::start("n1", n1.files.clone(), 5).await;
    match stale.call(&n2, b"old").await {
        Err(RpcError::Remote { message, .. }) => {
            assert!(message.contains("stale_incarnation"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(n2.rpc.rejected(Reason::StaleIncarnation), 1);
    n1.assert_serves(&n2).await;
    let newer = Node::start("n1", n1.files.clone(), 20).await;
    newer.assert_serves(&n2).await;

    // Nothing else was counted, and the callers never rejected a response.
    assert_eq!(total(&n2.rpc), 6);
    assert_eq!(total(&n1.rpc) + total(&n3.rpc), 0);
    for node in [&n1, &n2, &n3, &stale, &newer] {
        node.rpc.close().await;
    }
}

/// An envelope naming n1 as sender, signed with the key n3 presents.
fn n3_forges_n1() -> impl Fn(&Local) -> Vec<u8> + Send + Sync + 'static {
    let forger = Sealer::new("n1".into(), 10);
    move |local: &Local| forger.seal(&local.signer, "n2", KIND, b"forged", SystemTime::now())
}

/// A burst of concurrent calls from one node to one peer, far more than the peer's stream
/// limit lets run at once and more than the replay window is wide: every call is answered,
/// none is refused as a replay. (Envelopes sealed before their stream was open used to
/// wait for stream credit while later ones went first, until they fell out of the window.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_beyond_the_stream_limit_and_the_replay_window_is_answered() {
    const CALLS: usize = 3 * crate::envelope::REPLAY_WINDOW as usize;
    init_logs();
    let certs = Certs::new();
    // The request timeout covers the wait for a stream: generous, so that a loaded machine
    // slows the burst down without failing it. This test is about replay, not speed.
    let patient = TransportConfig {
        request_timeout: std::time::Duration::from_secs(60),
        ..config()
    };
    let n1 = Arc::new(Node::start_with(patient.clone(), "n1", certs.node("n1"), 1).await);
    let n2 = Arc::new(Node::start_with(patient, "n2", certs.node("n2"), 1).await);
    assert!(CALLS > 10 * config().max_streams_per_connection as usize);
    n1.assert_serves(&n2).await;

    let mut calls = tokio::task::JoinSet::new();
    for i in 0..CALLS {
        let (from, to) = (n1.clone(), n2.clone());
        calls.spawn(async move {
            let payload = format!("call {i}");
            let expected = format!("n1 {KIND} {payload}").into_bytes();
            match from.call(&to, payload.as_bytes()).await {
                Ok(reply) if reply == expected => Ok(()),
                Ok(_) => Err(format!("call {i}: wrong reply")),
                Err(e) => Err(format!("call {i}: {e}")),
            }
        });
    }
    let mut failures = Vec::new();
    while let Some(outcome) = calls.join_next().await {
        if let Err(e) = outcome.unwrap() {
            failures.push(e);
        }
    }
    let replays = n2.rpc.rejected(Reason::Replay);
    assert!(
        failures.is_empty(),
        "{} of {CALLS} calls failed ({replays} refused as replays), e.g. {:#?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    assert_eq!((total(&n1.rpc), total(&n2.rpc)), (0, 0));
    n1.rpc.close().await;
    n2.rpc.close().await;
}

/// Answers every request with an error: stands in for an operator's handler.
struct Nothing;

impl Handler for Nothing {
    fn handle(
        &self,
        _peer: PeerInfo,
        _local: Local,
        _body: Vec<u8>,
    ) -> BoxFuture<Result<Vec<u8>, String>> {
        Box::pin(async { Err("nothing here".to_owned()) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_cannot_send_envelopes_yet() {
    init_logs();
    let certs = Certs::new();
    let n2 = Node::start("n2", certs.node("n2"), 1).await;
    let alice = certs.files(Subject::Operator("alice".into()));
    match Rpc::bind(
        config(),
        alice.clone(),
        1,
        Default::default(),
        Arc::new(Echo::default()),
    )
    .await
    {
        Err(e @ RpcError::NotANode { .. }) => assert!(!e.is_retryable()),
        other => panic!("expected NotANode, got {:?}", other.err()),
    }
    let operator = Transport::bind(config(), alice.clone(), Arc::new(Nothing))
        .await
        .unwrap();
    let alice_key = pki::load_identity(&alice.cert, &alice.key).unwrap();
    let wire = Sealer::new("alice".into(), 1).seal(
        &alice_key.signer,
        "n2",
        KIND,
        b"hi",
        SystemTime::now(),
    );
    match operator.request("n2", n2.addr, wire).await {
        Err(TransportError::Remote { message, .. }) => {
            assert!(message.contains("only nodes"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // A client of another operator protocol version is told which versions differ.
    let old = b"\0tenure-operator/1\0status".to_vec();
    match operator.request("n2", n2.addr, old).await {
        Err(TransportError::Remote { message, .. }) => assert!(
            message.contains(&format!(
                "tenure-operator/{}, the client tenure-operator/1",
                crate::version::ADMIN_VERSION
            )),
            "{message}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(total(&n2.rpc), 0);
    operator.close().await;
    n2.rpc.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_calls_survive_certificate_and_ca_rotation_under_load() {
    init_logs();
    let old = Certs::new();
    let new = Certs::new();
    let both = old.ca_pem() + &new.ca_pem();
    let a = Arc::new(Node::start("n1", old.node("n1"), 1).await);
    let b = Arc::new(Node::start("n2", old.node("n2"), 1).await);
    a.assert_serves(&b).await;
    b.assert_serves(&a).await;

    // Four callers, two each way, in loops until told to stop.
    let (ca, cb) = (a.clone(), b.clone());
    let load = Load::start(4, move |i, n| {
        let (from, to) = if i % 2 == 0 {
            (ca.clone(), cb.clone())
        } else {
            (cb.clone(), ca.clone())
        };
        async move {
            let payload = format!("caller {i} call {n}");
            let expected = format!("{} {KIND} {payload}", from.name).into_bytes();
            match from.call(&to, payload.as_bytes()).await {
                Ok(reply) if reply == expected => Ok(()),
                Ok(_) => Err("wrong reply".to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
    });
    load.progress("traffic to flow").await;

    // (a) Rotate n1's key and certificate.
    let a_before = a.rpc.transport().tls_info().fingerprint;
    pki::rotate(&old.ca_dir(), "n1", &a.files.cert, &a.files.key, 30).unwrap();
    let a_rotated = fingerprint_of(&a.files.cert);
    assert_ne!(a_rotated, a_before);
    wait_until("n1 to load its rotated certificate", || {
        a.rpc.transport().tls_info().fingerprint == a_rotated
    })
    .await;
    load.progress("traffic after the rotation").await;
    wait_until("n2 to see n1's rotated certificate", || {
        b.echo.last("n1") == Some(a_rotated.clone())
    })
    .await;

    // (b) Rotate the CA: add the new one everywhere...
    for node in [&a, &b] {
        write_atomically(&node.files.ca, &both);
    }
    wait_until("both nodes to trust both CAs", || {
        [&a, &b]
            .iter()
            .all(|n| n.rpc.transport().tls_info().ca_fingerprints.len() == 2)
    })
    .await;
    load.progress("traffic after adding the new CA").await;
    // ...reissue both certificates from it...
    let a_new = new.node("n1");
    let b_new = new.node("n2");
    std::fs::copy(&a_new.cert, &a.files.cert).unwrap();
    std::fs::copy(&a_new.key, &a.files.key).unwrap();
    std::fs::copy(&b_new.key, &b.files.key).unwrap();
    std::fs::copy(&b_new.cert, &b.files.cert).unwrap();
    let (a_fp, b_fp) = (fingerprint_of(&a.files.cert), fingerprint_of(&b.files.cert));
    wait_until("both nodes to load their new certificates", || {
        a.rpc.transport().tls_info().fingerprint == a_fp
            && b.rpc.transport().tls_info().fingerprint == b_fp
    })
    .await;
    load.progress("traffic after reissuing").await;
    // ...and remove the old CA.
    for node in [&a, &b] {
        write_atomically(&node.files.ca, &new.ca_pem());
    }
    let new_only = vec![new.ca_fingerprint()];
    wait_until("both nodes to trust only the new CA", || {
        [&a, &b]
            .iter()
            .all(|n| n.rpc.transport().tls_info().ca_fingerprints == new_only)
    })
    .await;
    load.progress("traffic after removing the old CA").await;
    // The callers' peers see the new certificates.
    wait_until("calls to carry the new certificates", || {
        b.echo.last("n1") == Some(a_fp.clone()) && a.echo.last("n2") == Some(b_fp.clone())
    })
    .await;

    let (done, failures) = load.finish().await;
    println!(
        "signed rotation under load: {done} calls, {} failed; n1 {:?}; n2 {:?}",
        failures.len(),
        a.rpc.transport().stats(),
        b.rpc.transport().stats()
    );
    assert!(failures.is_empty(), "failed calls: {failures:#?}");
    assert_eq!(total(&a.rpc) + total(&b.rpc), 0);
    for node in [&a, &b] {
        assert!(
            node.rpc
                .transport()
                .connections()
                .iter()
                .all(|c| c.retiring || c.peer.fingerprint == a_fp || c.peer.fingerprint == b_fp)
        );
    }
    a.assert_serves(&b).await;
    b.assert_serves(&a).await;
    a.rpc.close().await;
    b.rpc.close().await;
}

/// Certificates made by the openssl command line work exactly as ours do: a CA and two
/// node certificates from `openssl req` / `openssl x509`, for both key types, carry signed
/// calls both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_made_by_openssl_carry_signed_calls() {
    use crate::pki::openssl_tests::{ED25519, P256, openssl_ca, openssl_leaf};
    init_logs();
    for keygen in [ED25519, P256] {
        let dir = tempfile::TempDir::new().unwrap();
        openssl_ca(dir.path(), keygen);
        let mut files = Vec::new();
        for name in ["n1", "n2"] {
            let ext = format!(
                "subjectAltName=URI:tenure://node/{name},DNS:{name}\n\
                 extendedKeyUsage=serverAuth,clientAuth\n\
                 keyUsage=critical,digitalSignature\n\
                 basicConstraints=critical,CA:FALSE\n"
            );
            let (cert, key) = openssl_leaf(dir.path(), keygen, name, &ext);
            files.push(TlsFiles {
                ca: dir.path().join("ca.pem"),
                cert,
                key,
            });
        }
        let n1 = Node::start("n1", files[0].clone(), 1).await;
        let n2 = Node::start("n2", files[1].clone(), 1).await;
        n1.assert_serves(&n2).await;
        n2.assert_serves(&n1).await;
        assert_eq!(n2.echo.last("n1"), Some(fingerprint_of(&n1.files.cert)));
        assert_eq!((total(&n1.rpc), total(&n2.rpc)), (0, 0));
        n1.rpc.close().await;
        n2.rpc.close().await;
    }
}

//! The admin wire path in process: a node's `Rpc` serving a fake [`Admin`] (a stand-in for
//! the node's real one, which needs Raft), and [`AdminClient`]s with operator, node,
//! foreign, revoked and missing certificates. Each refusal says what the operator needs to
//! know; the node keeps serving its peers' signed calls throughout.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::fixture::{T0, three_nodes};
use super::*;
use crate::cluster::Cluster;
use crate::pki::{self, Subject};
use crate::rpc::{Rpc, Service, operator_request};
use crate::transport::tests::{Certs, config, init_logs, write_atomically};
use crate::transport::{TlsFiles, Transport, TransportError};

const NOW: u64 = T0 + 60_000;
const TIMEOUT: Duration = Duration::from_secs(5);

/// Answers Status from the fixture cluster and actions with `command_for`; remembers
/// who asked what.
struct Fake {
    cluster: Cluster,
    seen: Mutex<Vec<(String, AdminRequest)>>,
}

impl Admin for Fake {
    fn handle(
        &self,
        operator: &str,
        request: AdminRequest,
    ) -> BoxFuture<Result<AdminResponse, String>> {
        self.seen
            .lock()
            .unwrap()
            .push((operator.to_owned(), request.clone()));
        let answer = match request {
            AdminRequest::Status => Ok(AdminResponse::Status(Status::build(
                &self.cluster,
                raft_n1(),
                vec![],
                NOW,
            ))),
            other => command_for(&other, &self.cluster, NOW)
                .map(|c| AdminResponse::Done(describe(&c, &self.cluster))),
        };
        Box::pin(async move { answer })
    }

    fn handle_node(
        &self,
        node: &str,
        request: AdminRequest,
    ) -> BoxFuture<Result<AdminResponse, String>> {
        self.seen
            .lock()
            .unwrap()
            .push((format!("node {node}"), request.clone()));
        Box::pin(async move { Ok(AdminResponse::Done(format!("asked: {request}"))) })
    }
}

/// Raft as n1, the leader and only voter, sees it.
fn raft_n1() -> RaftView {
    RaftView {
        node: "n1".into(),
        leader: Some("n1".into()),
        term: 2,
        voters: vec!["n1".into()],
        learners: vec![],
    }
}

/// Echoes signed calls: the node's peers keep being served.
struct Echo;

impl Service for Echo {
    fn call(
        &self,
        _from: &crate::transport::PeerInfo,
        _kind: u16,
        payload: Vec<u8>,
    ) -> BoxFuture<Result<Vec<u8>, String>> {
        Box::pin(async move { Ok(payload) })
    }
}

/// A node `n1` serving the fake, and a peer node `n2`.
struct Setup {
    certs: Certs,
    n1: Rpc,
    n2: Rpc,
    addr: SocketAddr,
    fake: Arc<Fake>,
}

impl Setup {
    async fn start() -> Setup {
        let certs = Certs::new();
        let n1 = Rpc::bind(
            config(),
            certs.node("n1"),
            1,
            Default::default(),
            Arc::new(Echo),
        )
        .await
        .unwrap();
        let n2 = Rpc::bind(
            config(),
            certs.node("n2"),
            1,
            Default::default(),
            Arc::new(Echo),
        )
        .await
        .unwrap();
        let fake = Arc::new(Fake {
            cluster: three_nodes().cluster,
            seen: Mutex::default(),
        });
        let addr = n1.local_addr().unwrap();
        Setup {
            certs,
            n1,
            n2,
            addr,
            fake,
        }
    }

    fn serve(&self) {
        self.n1
            .serve_operators(AdminService::new(self.fake.clone()));
    }

    /// One request from a client with `files` to n1.
    async fn ask(
        &self,
        files: TlsFiles,
        request: AdminRequest,
    ) -> Result<AdminResponse, AdminError> {
        let client = AdminClient::new(files, self.addr, TIMEOUT).await?;
        let answer = client.request("n1", self.addr, &request).await;
        client.close().await;
        answer
    }

    /// n2's signed call to n1 still works.
    async fn peers_served(&self) {
        let reply = self
            .n2
            .call("n1", self.addr, 1, b"ping".to_vec())
            .await
            .unwrap();
        assert_eq!(reply, b"ping");
    }

    async fn close(self) {
        self.n1.close().await;
        self.n2.close().await;
    }
}

fn operator(certs: &Certs, name: &str) -> TlsFiles {
    certs.files(Subject::Operator(name.into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_gets_status_and_actions_answered() {
    init_logs();
    let s = Setup::start().await;
    s.serve();
    let alice = operator(&s.certs, "alice");

    let AdminResponse::Status(status) = s.ask(alice.clone(), AdminRequest::Status).await.unwrap()
    else {
        panic!("not a status")
    };
    assert_eq!(status.leader.as_deref(), Some("n1"));
    assert_eq!(status.resources.len(), 2);

    let moved = AdminRequest::Move {
        resource: "echo".into(),
        slot: Some(0),
        to: "c".into(),
    };
    match s.ask(alice.clone(), moved.clone()).await.unwrap() {
        AdminResponse::Done(message) => assert!(message.contains("from a to c"), "{message}"),
        other => panic!("{other:?}"),
    }
    // A refused action comes back as the node's message.
    let bad = AdminRequest::Drain { node: "zz".into() };
    let err = s.ask(alice, bad).await.unwrap_err();
    println!("{err}");
    assert!(
        matches!(&err, AdminError::Refused { node, message } if node == "n1" && message.contains("unknown node \"zz\"")),
        "{err}"
    );
    let seen = s.fake.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|(who, _)| who == "alice"));
    assert_eq!(seen[1].1, moved);
    s.peers_served().await;
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_certificate_is_told_to_use_an_operator_certificate() {
    init_logs();
    let s = Setup::start().await;
    s.serve();
    let n3 = s.certs.node("n3");
    let err = s.ask(n3.clone(), AdminRequest::Status).await.unwrap_err();
    println!("{err}");
    assert!(matches!(err, AdminError::NodeCertificate { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains(crate::rpc::NODE_CERT_REFUSAL), "{message}");
    assert!(
        message.contains(&n3.cert.display().to_string()),
        "{message}"
    );
    assert!(
        message.contains("tenure certs issue --ca DIR --operator NAME"),
        "{message}"
    );
    assert!(s.fake.seen.lock().unwrap().is_empty());
    // Not counted as a rejected envelope.
    assert_eq!(s.n1.rejections().iter().map(|(_, n)| n).sum::<u64>(), 0);

    // But for its own drain and undrain (`tenure drain --self`): only those reach the
    // admin, as the node's request.
    for other in [
        AdminRequest::Drain { node: "n1".into() },
        AdminRequest::Undrain { node: "n2".into() },
        AdminRequest::Release {
            resource: "echo".into(),
            slot: Some(0),
        },
    ] {
        let err = s.ask(n3.clone(), other.clone()).await.unwrap_err();
        assert!(
            matches!(err, AdminError::NodeCertificate { .. }),
            "{other}: {err}"
        );
    }
    assert!(s.fake.seen.lock().unwrap().is_empty());
    for own in [
        AdminRequest::Drain { node: "n3".into() },
        AdminRequest::Undrain { node: "n3".into() },
    ] {
        let answer = s.ask(n3.clone(), own.clone()).await.unwrap();
        assert_eq!(answer, AdminResponse::Done(format!("asked: {own}")));
    }
    let seen = s.fake.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (
                "node n3".to_owned(),
                AdminRequest::Drain { node: "n3".into() }
            ),
            (
                "node n3".to_owned(),
                AdminRequest::Undrain { node: "n3".into() }
            ),
        ]
    );
    s.peers_served().await;
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_of_another_ca_are_refused_by_either_side() {
    init_logs();
    let s = Setup::start().await;
    s.serve();
    let other = Certs::new();

    // Our bundle holds only the other CA: we refuse the node.
    let mallory = operator(&other, "mallory");
    let err = s
        .ask(mallory.clone(), AdminRequest::Status)
        .await
        .unwrap_err();
    println!("{err}");
    assert!(matches!(err, AdminError::UntrustedNode { .. }), "{err}");
    assert!(err.to_string().contains("not signed by any CA"), "{err}");

    // Our bundle trusts the cluster's CA too: the node refuses us.
    write_atomically(&mallory.ca, &(other.ca_pem() + &s.certs.ca_pem()));
    let err = s.ask(mallory, AdminRequest::Status).await.unwrap_err();
    println!("{err}");
    assert!(
        matches!(err, AdminError::CertificateRefused { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("issued by this cluster's CA"),
        "{err}"
    );
    assert!(s.fake.seen.lock().unwrap().is_empty());
    s.peers_served().await;
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_service_operators_are_told_the_node_does_not_serve_them() {
    init_logs();
    let s = Setup::start().await;
    let err = s
        .ask(operator(&s.certs, "alice"), AdminRequest::Status)
        .await
        .unwrap_err();
    println!("{err}");
    assert!(
        matches!(&err, AdminError::Refused { message, .. } if message.contains("does not serve operator requests")),
        "{err}"
    );
    s.serve();
    s.ask(operator(&s.certs, "alice"), AdminRequest::Status)
        .await
        .unwrap();
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bytes_and_envelopes_from_operators_get_clear_errors() {
    init_logs();
    let s = Setup::start().await;
    s.serve();
    let alice = operator(&s.certs, "alice");
    let raw = Transport::bind(config(), alice, Arc::new(Echo2))
        .await
        .unwrap();
    for garbage in [&b""[..], b"\xff\xff\xff\xff\xff", b"\x09"] {
        let err = raw
            .request("n1", s.addr, operator_request(garbage))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, TransportError::Remote { message, .. } if message.contains("cannot decode the admin request")),
            "{err}"
        );
    }
    // Without the operator prefix: operators send no envelopes.
    let err = raw
        .request("n1", s.addr, b"hello".to_vec())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, TransportError::Remote { message, .. } if message.contains("only nodes")),
        "{err}"
    );
    raw.close().await;
    s.peers_served().await;
    s.close().await;
}

/// A transport handler that refuses everything (the raw operator endpoint serves nothing).
struct Echo2;

impl crate::transport::Handler for Echo2 {
    fn handle(
        &self,
        _peer: crate::transport::PeerInfo,
        _local: crate::transport::Local,
        _body: Vec<u8>,
    ) -> BoxFuture<Result<Vec<u8>, String>> {
        Box::pin(async { Err("no".to_owned()) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_operator_is_refused_and_an_unrevoked_one_served() {
    init_logs();
    let s = Setup::start().await;
    s.serve();
    let alice = operator(&s.certs, "alice");
    s.n1.set_revoked(BTreeSet::from([crate::transport::tests::key_of(
        &alice.cert,
    )]));
    let err = s
        .ask(alice.clone(), AdminRequest::Status)
        .await
        .unwrap_err();
    println!("{err}");
    assert!(
        matches!(&err, AdminError::CertificateRefused { reason, .. } if reason.contains("revoked")),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("have a new operator certificate issued"),
        "{err}"
    );
    s.n1.set_revoked(BTreeSet::new());
    s.ask(alice, AdminRequest::Status).await.unwrap();
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_files_a_wrong_name_and_a_silent_address_are_explained() {
    init_logs();
    let s = Setup::start().await;
    s.serve();
    let alice = operator(&s.certs, "alice");

    let mut missing = alice.clone();
    missing.cert = s.certs.dir.path().join("nowhere/operator.pem");
    let err = s.ask(missing, AdminRequest::Status).await.unwrap_err();
    println!("{err}");
    assert!(matches!(
        err,
        AdminError::MissingFile {
            what: "operator certificate",
            ..
        }
    ));
    assert!(err.to_string().contains("nowhere/operator.pem"), "{err}");
    assert!(
        err.to_string()
            .contains("tenure certs issue --ca DIR --operator NAME"),
        "{err}"
    );

    let mut no_ca = alice.clone();
    no_ca.ca = s.certs.dir.path().join("nowhere/ca.pem");
    let err = s.ask(no_ca, AdminRequest::Status).await.unwrap_err();
    assert!(
        matches!(
            err,
            AdminError::MissingFile {
                what: "CA bundle",
                ..
            }
        ),
        "{err}"
    );

    // Files that exist but are not a certificate and key.
    let mut garbage = alice.clone();
    garbage.key = s.certs.dir.path().join("garbage.key");
    std::fs::write(&garbage.key, "not a key").unwrap();
    let err = s.ask(garbage, AdminRequest::Status).await.unwrap_err();
    println!("{err}");
    assert!(matches!(err, AdminError::BadFiles { .. }), "{err}");
    assert!(err.to_string().contains("garbage.key"), "{err}");

    // n1's address, but the name of another node.
    let client = AdminClient::new(alice.clone(), s.addr, TIMEOUT)
        .await
        .unwrap();
    let err = client
        .request("n2", s.addr, &AdminRequest::Status)
        .await
        .unwrap_err();
    println!("{err}");
    assert!(matches!(err, AdminError::WrongNode { .. }), "{err}");
    assert!(err.to_string().contains("--node"), "{err}");

    // A UDP port nobody listens on: the dial times out.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let nowhere = silent.local_addr().unwrap();
    drop(silent);
    let client = AdminClient::new(alice, nowhere, Duration::from_millis(500))
        .await
        .unwrap();
    let err = client
        .request("n1", nowhere, &AdminRequest::Status)
        .await
        .unwrap_err();
    println!("{err}");
    assert!(matches!(err, AdminError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains(&nowhere.to_string()), "{err}");
    client.close().await;
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_development_certificates_carry_admin_requests() {
    init_logs();
    let dir = tempfile::TempDir::new().unwrap();
    let dev = pki::ensure_dev_certs(&dir.path().join("certs"), "local").unwrap();
    let node = Rpc::bind(
        config(),
        dev.node.clone(),
        1,
        Default::default(),
        Arc::new(Echo),
    )
    .await
    .unwrap();
    let fake = Arc::new(Fake {
        cluster: three_nodes().cluster,
        seen: Mutex::default(),
    });
    node.serve_operators(AdminService::new(fake.clone()));
    let addr = node.local_addr().unwrap();
    let client = AdminClient::new(dev.operator.clone(), addr, TIMEOUT)
        .await
        .unwrap();
    let answer = client.request("local", addr, &AdminRequest::Status).await;
    assert!(matches!(answer, Ok(AdminResponse::Status(_))), "{answer:?}");
    assert_eq!(fake.seen.lock().unwrap()[0].0, pki::DEV_OPERATOR);
    client.close().await;
    node.close().await;
}

#[test]
fn requests_round_trip_and_print_as_commands() {
    let requests = [
        (AdminRequest::Status, "status"),
        (
            AdminRequest::Move {
                resource: "r".into(),
                slot: Some(1),
                to: "n2".into(),
            },
            "move r/1 --to n2",
        ),
        (AdminRequest::Drain { node: "n1".into() }, "drain n1"),
        (AdminRequest::Undrain { node: "n1".into() }, "undrain n1"),
        (
            AdminRequest::Release {
                resource: "r".into(),
                slot: None,
            },
            "release r",
        ),
        (
            AdminRequest::Revoke {
                key: "sha256:00".into(),
                certificate: None,
                node: None,
                force: false,
            },
            "revoke --fingerprint sha256:00",
        ),
        (AdminRequest::Remove { node: "n4".into() }, "remove n4"),
    ];
    for (request, text) in requests {
        assert_eq!(request.to_string(), text);
        let bytes = encode(&request).unwrap();
        assert_eq!(decode_request(&bytes).unwrap(), request);
    }
    assert!(decode_response(b"\xff").is_err());
}

#[test]
fn slot_references_parse() {
    assert_eq!(
        parse_slot_ref("billing-sync").unwrap(),
        ("billing-sync".into(), None)
    );
    assert_eq!(
        parse_slot_ref("billing-sync/2").unwrap(),
        ("billing-sync".into(), Some(2))
    );
    for bad in ["r/x", "r/", "/1", "a b", "r/-1"] {
        let message = parse_slot_ref(bad).unwrap_err();
        println!("{bad}: {message}");
    }
}

/// The answer for 10,000 resources on five nodes is several MiB, more than a frame
/// carries: the client pages through it and puts the same status back together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_of_ten_thousand_resources_arrives_whole() {
    init_logs();
    let mut s = Setup::start().await;
    let cluster = super::fixture::many_resources(10_000).cluster;
    let expected = Status::build(&cluster, raft_n1(), vec![], NOW);
    s.fake = Arc::new(Fake {
        cluster,
        seen: Mutex::default(),
    });
    s.serve();
    let client = AdminClient::new(operator(&s.certs, "alice"), s.addr, TIMEOUT)
        .await
        .unwrap();
    let status = client
        .status("n1", s.addr, &StatusQuery::default())
        .await
        .unwrap();
    assert_eq!(status.resources.len(), 10_000);
    assert!(status.nodes.iter().all(|n| n.plugins.len() == 10_000));
    assert_eq!(status, expected);
    let pages = s.fake.seen.lock().unwrap().len();
    println!("10,000 resources in {pages} pages");
    assert!(
        pages == 1,
        "one snapshot serves every page, built once: {pages}"
    );

    let one = StatusQuery {
        resource: Some("r00042".into()),
        ..StatusQuery::default()
    };
    let status = client.status("n1", s.addr, &one).await.unwrap();
    assert_eq!(status.resources.len(), 1);
    assert_eq!(status.resources[0].slots[0].owner.as_deref(), Some("n3"));
    assert!(status.nodes.iter().all(|n| n.plugins.len() == 1));

    let node = StatusQuery {
        node: Some("n2".into()),
        ..StatusQuery::default()
    };
    let status = client.status("n1", s.addr, &node).await.unwrap();
    assert_eq!(status.nodes.len(), 1);
    assert_eq!(
        status.nodes[0].plugins.len(),
        10_000,
        "n2 advertises them all"
    );
    client.close().await;
    s.close().await;
}

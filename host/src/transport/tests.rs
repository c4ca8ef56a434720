//! Tests of the transport, in process, on loopback. Certificates come from the PKI module
//! (`init_ca`, `issue`, `rotate`), and from rcgen directly for validity windows it refuses
//! to make (expired, not yet valid). Every refusal test also checks that the refusing
//! side keeps serving a good client. Nothing waits a fixed time for something to happen:
//! conditions are polled with generous bounds. The certificate helpers are shared with the
//! RPC tests.

use std::collections::HashMap;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::string::Ia5String;
use rcgen::{
    CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use tempfile::TempDir;
use time::OffsetDateTime;

use super::*;
use crate::future::BoxFuture;
use crate::pki::{self, Algo, IfExists, Kind, Subject};

mod budgets;
mod versions;

/// Generous bound for anything polled.
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

/// Log lines go to the test's output when `RUST_LOG` asks for them.
pub(crate) fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Settings shrunk for tests.
pub(crate) fn config() -> TransportConfig {
    TransportConfig {
        request_timeout: Duration::from_secs(5),
        dial_timeout: Duration::from_millis(500),
        stream_read_timeout: Duration::from_millis(500),
        reload_interval: Duration::from_millis(100),
        idle_timeout: Duration::from_secs(5),
        keep_alive: Duration::from_secs(1),
        ..TransportConfig::default()
    }
}

/// A CA in a temporary directory, and the certificates it issues.
pub(crate) struct Certs {
    pub(crate) dir: TempDir,
}

impl Certs {
    pub(crate) fn new() -> Certs {
        Certs::with(Algo::Ed25519)
    }

    /// A CA whose key (and so whose signatures) use `algo`.
    pub(crate) fn with(algo: Algo) -> Certs {
        let dir = TempDir::new().unwrap();
        pki::init_ca(&dir.path().join("ca"), algo, 3650, IfExists::Refuse).unwrap();
        Certs { dir }
    }

    pub(crate) fn ca_dir(&self) -> PathBuf {
        self.dir.path().join("ca")
    }

    pub(crate) fn ca_pem(&self) -> String {
        fs::read_to_string(self.ca_dir().join(pki::CA_CERT_FILE)).unwrap()
    }

    pub(crate) fn ca_fingerprint(&self) -> String {
        fingerprint_of(&self.ca_dir().join(pki::CA_CERT_FILE))
    }

    /// Issues (or reissues) `subject`'s certificate into `certs/`, with a bundle file of
    /// its own holding this CA.
    pub(crate) fn files(&self, subject: Subject) -> TlsFiles {
        let name = subject.name().to_owned();
        let (cert, key) = pki::issue(
            &self.ca_dir(),
            &subject,
            &self.dir.path().join("certs"),
            30,
            None,
            IfExists::Overwrite,
        )
        .unwrap();
        let ca = self.dir.path().join(format!("{name}-bundle.pem"));
        write_atomically(&ca, &self.ca_pem());
        TlsFiles { ca, cert, key }
    }

    pub(crate) fn node(&self, name: &str) -> TlsFiles {
        self.files(Subject::Node(name.into()))
    }

    /// A node certificate valid from `not_before` to `not_after`, made with rcgen because
    /// `pki::issue` only makes certificates valid from now.
    fn node_with_window(
        &self,
        name: &str,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> TlsFiles {
        let ca_key = fs::read_to_string(self.ca_dir().join(pki::CA_KEY_FILE)).unwrap();
        let ca_key = KeyPair::from_pem_and_sign_algo(&ca_key, &rcgen::PKCS_ED25519).unwrap();
        let issuer = Issuer::from_ca_cert_pem(&self.ca_pem(), ca_key).unwrap();
        let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
        params.subject_alt_names.push(SanType::URI(
            Ia5String::try_from(format!("tenure://node/{name}")).unwrap(),
        ));
        params.not_before = not_before;
        params.not_after = not_after;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        let dir = self.dir.path().join("odd");
        fs::create_dir_all(&dir).unwrap();
        let files = TlsFiles {
            ca: dir.join(format!("{name}-bundle.pem")),
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key")),
        };
        fs::write(&files.cert, cert.pem()).unwrap();
        fs::write(&files.key, key.serialize_pem()).unwrap();
        fs::write(&files.ca, self.ca_pem()).unwrap();
        files
    }
}

/// Replaces a file the way careful tools do: a temporary file, then a rename.
pub(crate) fn write_atomically(path: &Path, contents: &str) {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, contents).unwrap();
    fs::rename(&tmp, path).unwrap();
}

/// The fingerprint of the first certificate in a PEM file.
pub(crate) fn fingerprint_of(path: &Path) -> String {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    pki::fingerprint(&CertificateDer::from_pem_file(path).unwrap())
}

/// The [`pki::key_fingerprint`] of the certificate in a PEM file.
pub(crate) fn key_of(path: &Path) -> String {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    pki::key_fingerprint(&CertificateDer::from_pem_file(path).unwrap()).unwrap()
}

/// The twin of a certificate signed with ECDSA P-256: the same contents with the
/// signature (r, s) replaced by (r, n − s), which verifies as well (ECDSA signatures are
/// malleable; webpki does not require a low s). Another DER, so another certificate
/// fingerprint, for the same key and the same identity.
pub(crate) fn ecdsa_twin(der: &[u8]) -> Vec<u8> {
    /// The order of the P-256 group.
    const N: [u8; 32] = [
        0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63,
        0x25, 0x51,
    ];
    /// A DER element at the start of `bytes`: (tag, content, the rest).
    fn element(bytes: &[u8]) -> (u8, &[u8], &[u8]) {
        let (tag, first) = (bytes[0], bytes[1]);
        let (len, header) = if first < 0x80 {
            (first as usize, 2)
        } else {
            let n = (first & 0x7f) as usize;
            let len = bytes[2..2 + n]
                .iter()
                .fold(0usize, |acc, b| acc << 8 | *b as usize);
            (len, 2 + n)
        };
        (tag, &bytes[header..header + len], &bytes[header + len..])
    }
    fn encode(tag: u8, content: &[u8]) -> Vec<u8> {
        let len = content.len();
        let mut out = vec![tag];
        if len < 0x80 {
            out.push(len as u8);
        } else {
            let bytes: Vec<u8> = len
                .to_be_bytes()
                .into_iter()
                .skip_while(|b| *b == 0)
                .collect();
            out.push(0x80 | bytes.len() as u8);
            out.extend(bytes);
        }
        out.extend_from_slice(content);
        out
    }
    /// A positive DER INTEGER of the big-endian `value`.
    fn integer(value: &[u8]) -> Vec<u8> {
        let mut digits: Vec<u8> = value.iter().copied().skip_while(|b| *b == 0).collect();
        if digits.first().is_none_or(|b| b & 0x80 != 0) {
            digits.insert(0, 0);
        }
        encode(0x02, &digits)
    }
    let (_, certificate, _) = element(der);
    let (_, _, rest) = element(certificate);
    let tbs = &certificate[..certificate.len() - rest.len()];
    let (_, _, after_algorithm) = element(rest);
    let algorithm = &rest[..rest.len() - after_algorithm.len()];
    let (tag, bits, _) = element(after_algorithm);
    assert_eq!((tag, bits[0]), (0x03, 0), "a BIT STRING signature");
    let (_, pair, _) = element(&bits[1..]);
    let (_, r, after_r) = element(pair);
    let (_, s, _) = element(after_r);
    // n − s, on 32-byte big-endian numbers.
    let mut s32 = [0u8; 32];
    let s = &s[s.len().saturating_sub(32)..];
    s32[32 - s.len()..].copy_from_slice(s);
    let mut twin = [0u8; 32];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let d = N[i] as i16 - s32[i] as i16 - borrow;
        (twin[i], borrow) = if d < 0 {
            ((d + 256) as u8, 1)
        } else {
            (d as u8, 0)
        };
    }
    let mut signature = integer(r);
    signature.extend(integer(&twin));
    let mut bit_string = vec![0u8];
    bit_string.extend(encode(0x30, &signature));
    let mut body = tbs.to_vec();
    body.extend_from_slice(algorithm);
    body.extend(encode(0x03, &bit_string));
    encode(0x30, &body)
}

/// Answers `whoami` with the peer's identity, `fail` with an error, `big` with more than
/// a frame, anything else with the body; remembers the last `PeerInfo` of every peer.
#[derive(Default)]
struct Recorder {
    seen: Mutex<HashMap<String, PeerInfo>>,
}

impl Recorder {
    fn last(&self, peer: &str) -> Option<PeerInfo> {
        self.seen.lock().unwrap().get(peer).cloned()
    }
}

impl Handler for Recorder {
    fn handle(
        &self,
        peer: PeerInfo,
        _local: Local,
        body: Vec<u8>,
    ) -> BoxFuture<Result<Vec<u8>, String>> {
        self.seen
            .lock()
            .unwrap()
            .insert(peer.identity.name.clone(), peer.clone());
        let reply = match body.as_slice() {
            b"whoami" => Ok(peer.identity.to_string().into_bytes()),
            b"fail" => Err("boom".to_owned()),
            b"big" => Ok(vec![7; (1 << 20) + 1]),
            _ => Ok(body),
        };
        Box::pin(async move { reply })
    }
}

/// A running transport with its files and handler.
struct Node {
    name: String,
    transport: Arc<Transport>,
    addr: SocketAddr,
    files: TlsFiles,
    recorder: Arc<Recorder>,
}

impl Node {
    async fn start(name: &str, files: TlsFiles) -> Node {
        Node::start_with(name, files, config()).await
    }

    async fn start_with(name: &str, files: TlsFiles, config: TransportConfig) -> Node {
        let recorder = Arc::new(Recorder::default());
        let transport = Transport::bind(config, files.clone(), recorder.clone())
            .await
            .unwrap();
        let addr = transport.local_addr().unwrap();
        Node {
            name: name.to_owned(),
            transport: Arc::new(transport),
            addr,
            files,
            recorder,
        }
    }

    async fn ask(&self, to: &Node, body: &[u8]) -> Result<Vec<u8>, TransportError> {
        self.transport
            .request(&to.name, to.addr, body.to_vec())
            .await
    }

    /// Asserts a round trip to `to` works.
    async fn assert_serves(&self, to: &Node) {
        let body = format!("hello {} from {}", to.name, self.name).into_bytes();
        assert_eq!(self.ask(to, &body).await.unwrap(), body);
    }

    fn connected_to(&self, peer: &str) -> bool {
        self.transport
            .connections()
            .iter()
            .any(|c| c.peer.identity.name == peer)
    }
}

/// Polls `condition` until it holds; panics naming `what` after [`PATIENCE`].
pub(crate) async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Callers in loops until stopped, counting calls and keeping every failure: the load the
/// rotation tests keep up while certificates and CAs change under it.
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    loops: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// Starts `callers` loops; loop `i` calls `call(i, n)` for n = 0, 1, … until
    /// [`Load::finish`]. A call returns `Err(what went wrong)` on failure.
    pub(crate) fn start<F, Fut>(callers: usize, call: F) -> Load
    where
        F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
    {
        let call = Arc::new(call);
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let loops = (0..callers)
            .map(|i| {
                let (call, stop) = (call.clone(), stop.clone());
                let (done, failures) = (done.clone(), failures.clone());
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if let Err(e) = call(i, n).await {
                            failures.lock().unwrap().push(format!("{i}/{n}: {e}"));
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                        n += 1;
                    }
                })
            })
            .collect();
        Load {
            stop,
            done,
            failures,
            loops,
        }
    }

    /// Waits until 200 more calls have completed (the load is still flowing).
    pub(crate) async fn progress(&self, what: &str) {
        let target = self.done.load(Ordering::Relaxed) + 200;
        wait_until(what, || self.done.load(Ordering::Relaxed) >= target).await;
    }

    /// Stops the loops, waits for them, and returns the calls made and the failures.
    pub(crate) async fn finish(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.loops {
            task.await.unwrap();
        }
        let failures = self.failures.lock().unwrap().clone();
        (self.done.load(Ordering::Relaxed), failures)
    }
}

/// A quinn client with a certificate of our making but none of the transport's logic.
async fn raw_connection(files: &TlsFiles, server: &Node) -> (quinn::Endpoint, quinn::Connection) {
    let (endpoint, connecting) = raw_connect(files, server.addr, &server.name);
    (endpoint, connecting.await.unwrap())
}

/// The crypto provider, own certificate and trust the transport would build from `files`.
fn tls_parts(
    files: &TlsFiles,
) -> (
    Arc<rustls::crypto::CryptoProvider>,
    Arc<resolver::OwnCert>,
    trust::Trust,
) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let own = resolver::Own::new(
        pki::load_identity(&files.cert, &files.key).unwrap(),
        &provider,
    )
    .unwrap();
    let trust =
        trust::Trust::from_bundle(&pki::load_ca_bundle(&files.ca).unwrap(), &provider).unwrap();
    (provider, Arc::new(resolver::OwnCert::new(own)), trust)
}

/// Asserts that `err` is the peer refusing us because our key is revoked.
fn assert_refused_as_revoked(err: &TransportError) {
    assert!(
        matches!(err, TransportError::RejectedByPeer { reason, .. } if reason.contains("revoked")),
        "{err}"
    );
}

/// Starts a raw connection to `name` at `addr` (see [`raw_connection`]).
fn raw_connect(
    files: &TlsFiles,
    addr: SocketAddr,
    name: &str,
) -> (quinn::Endpoint, quinn::Connecting) {
    let (provider, own, trust) = tls_parts(files);
    let client = tls::raw_client_config(&provider, &own, &trust);
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let connecting = endpoint.connect_with(client, addr, name).unwrap();
    (endpoint, connecting)
}

/// Sends raw `bytes` on a new stream (finishing it if `finish`) and returns how the
/// server answered: the reset code, or the bytes it sent.
async fn raw_exchange(
    conn: &quinn::Connection,
    bytes: &[u8],
    finish: bool,
) -> Result<Vec<u8>, quinn::VarInt> {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(bytes).await.unwrap();
    if finish {
        send.finish().unwrap();
    }
    match recv.read_to_end(1 << 21).await {
        Ok(data) => Ok(data),
        Err(quinn::ReadToEndError::Read(quinn::ReadError::Reset(code))) => Err(code),
        Err(e) => panic!("unexpected stream error: {e}"),
    }
}

fn request_frame(body: &[u8]) -> Vec<u8> {
    let mut bytes = frame::header(body.len()).to_vec();
    bytes.extend_from_slice(body);
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_round_trip_in_both_directions() {
    init_logs();
    let certs = Certs::new();
    let n1 = Node::start("n1", certs.node("n1")).await;
    let n2 = Node::start("n2", certs.node("n2")).await;

    n1.assert_serves(&n2).await;
    n2.assert_serves(&n1).await;
    assert_eq!(n1.ask(&n2, b"whoami").await.unwrap(), b"node n1");
    assert_eq!(n2.ask(&n1, b"whoami").await.unwrap(), b"node n2");

    // The handler sees the peer's leaf certificate: the one in the peer's files.
    let seen = n2.recorder.last("n1").unwrap();
    assert_eq!(seen.identity.kind, Kind::Node);
    assert_eq!(seen.fingerprint, fingerprint_of(&n1.files.cert));
    assert_eq!(pki::fingerprint(&seen.cert), seen.fingerprint);
    pki::Verifier::from_cert(&seen.cert).unwrap();

    // Large bodies, an empty body, the handler's error, a response over the limit.
    let big = vec![42u8; 1 << 20];
    assert_eq!(n1.ask(&n2, &big).await.unwrap(), big);
    assert_eq!(n1.ask(&n2, b"").await.unwrap(), b"");
    let err = n1.ask(&n2, b"fail").await.unwrap_err();
    assert!(
        matches!(&err, TransportError::Remote { message, .. } if message == "boom"),
        "{err}"
    );
    let err = n1.ask(&n2, b"big").await.unwrap_err();
    assert!(
        matches!(&err, TransportError::Remote { message, .. } if message.contains("exceeds")),
        "{err}"
    );
    // A body over the limit fails locally, with nothing sent.
    let err = n1.ask(&n2, &vec![0u8; (1 << 20) + 1]).await.unwrap_err();
    assert!(matches!(err, TransportError::TooLarge { .. }), "{err}");
    assert!(!err.is_retryable());
    // Its stream (opened before the body is made) was reset, not sent empty: the server
    // saw no malformed request, and the connection carries on.
    assert_eq!(n1.ask(&n2, b"after").await.unwrap(), b"after");
    assert_eq!(n2.transport.stats().streams_rejected, 0);

    // Concurrent requests share one cached connection per direction.
    let mut tasks = Vec::new();
    for i in 0..32u32 {
        let t = n1.transport.clone();
        let addr = n2.addr;
        tasks.push(tokio::spawn(async move {
            let body = i.to_be_bytes().to_vec();
            assert_eq!(t.request("n2", addr, body.clone()).await.unwrap(), body);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let dialed = |n: &Node| {
        n.transport
            .connections()
            .iter()
            .filter(|c| c.direction == Direction::Dialed)
            .count()
    };
    assert_eq!(dialed(&n1), 1);
    assert_eq!(dialed(&n2), 1);

    n1.transport.close().await;
    n2.transport.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_an_unknown_ca_is_refused_both_ways() {
    init_logs();
    let ours = Certs::new();
    let theirs = Certs::new();
    let n1 = Node::start("n1", ours.node("n1")).await;
    let good = Node::start("n3", ours.node("n3")).await;

    // A stranger that trusts only its own CA refuses our server's certificate.
    let stranger = Node::start("n2", theirs.node("n2")).await;
    let err = stranger.ask(&n1, b"hi").await.unwrap_err();
    println!("unknown CA, as the refusing client sees it: {err}");
    // All Tenure CAs share one name, so webpki reports the signature, not the issuer.
    assert!(
        matches!(&err, TransportError::PeerRejected { reason, .. }
            if reason.contains("not signed by any CA in our trust bundle")),
        "{err}"
    );
    assert!(!err.is_retryable());

    // A stranger that trusts our CA too is refused by our server.
    let files = theirs.node("n4");
    write_atomically(&files.ca, &(theirs.ca_pem() + &ours.ca_pem()));
    let stranger = Node::start("n4", files).await;
    let err = stranger.ask(&n1, b"hi").await.unwrap_err();
    assert!(
        matches!(&err, TransportError::RejectedByPeer { .. }),
        "{err}"
    );
    println!("unknown CA, as the refused client sees it: {err}");
    wait_until("the server to count the refusal", || {
        n1.transport.stats().handshakes_rejected >= 1
    })
    .await;
    assert!(!stranger.connected_to("n1"));
    good.assert_serves(&n1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_certificate_is_refused() {
    init_logs();
    let certs = Certs::new();
    let n1 = Node::start("n1", certs.node("n1")).await;
    let good = Node::start("n2", certs.node("n2")).await;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let trust =
        trust::Trust::from_bundle(&pki::load_ca_bundle(&n1.files.ca).unwrap(), &provider).unwrap();
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_webpki_verifier(trust.servers.clone())
        .with_no_client_auth();
    tls.alpn_protocols = crate::version::alpn_labels();
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(Arc::new(tls)).unwrap();
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    // TLS 1.3: the client believes the handshake done; the refusal arrives on the stream.
    let outcome = async {
        let conn = endpoint
            .connect_with(quinn::ClientConfig::new(Arc::new(crypto)), n1.addr, "n1")
            .unwrap()
            .await?;
        let (mut send, mut recv) = conn.open_bi().await?;
        send.write_all(&request_frame(b"hi")).await.ok();
        send.finish().ok();
        match recv.read_to_end(1024).await {
            Ok(data) => panic!("served without a client certificate: {data:?}"),
            Err(quinn::ReadToEndError::Read(quinn::ReadError::ConnectionLost(e))) => {
                Err::<(), _>(e)
            }
            Err(e) => panic!("unexpected stream error: {e}"),
        }
    }
    .await;
    let lost: quinn::ConnectionError = outcome.unwrap_err();
    let refusal = match error::handshake_failure(&lost) {
        error::HandshakeFailure::TheyRefused(reason) => reason,
        _ => panic!("not a TLS refusal: {lost}"),
    };
    println!("no client certificate: {refusal}");
    assert!(refusal.contains("CertificateRequired"), "{refusal}");
    wait_until("the server to count the refusal", || {
        n1.transport.stats().handshakes_rejected >= 1
    })
    .await;
    good.assert_serves(&n1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dialing_a_node_under_the_wrong_name_is_refused() {
    init_logs();
    let certs = Certs::new();
    let n1 = Node::start("n1", certs.node("n1")).await;
    let n2 = Node::start("n2", certs.node("n2")).await;

    // n2's address, but we expect n3 there.
    let err = n1
        .transport
        .request("n3", n2.addr, b"hi".to_vec())
        .await
        .unwrap_err();
    println!("wrong name: {err}");
    assert!(
        matches!(&err, TransportError::PeerRejected { reason, .. } if reason.contains("not valid for name \"n3\"")),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert!(!n1.connected_to("n2"));
    assert!(n2.recorder.last("n1").is_none(), "n2 ran a request");
    n1.assert_serves(&n2).await;

    // A name that cannot be a node's is refused before dialing.
    let err = n1
        .transport
        .request("N3!", n2.addr, b"hi".to_vec())
        .await
        .unwrap_err();
    assert!(matches!(err, TransportError::InvalidPeer { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_is_served_and_named_as_an_operator() {
    init_logs();
    let certs = Certs::new();
    let n1 = Node::start("n1", certs.node("n1")).await;
    let alice = Node::start("alice", certs.files(Subject::Operator("alice".into()))).await;

    assert_eq!(alice.ask(&n1, b"whoami").await.unwrap(), b"operator alice");
    let seen = n1.recorder.last("alice").unwrap();
    assert_eq!(seen.identity.kind, Kind::Operator);
    assert_eq!(seen.fingerprint, fingerprint_of(&alice.files.cert));

    // An operator's certificate cannot serve: a node dialing it refuses it.
    let err = n1.ask(&alice, b"hi").await.unwrap_err();
    println!("dialing an operator: {err}");
    assert!(matches!(err, TransportError::PeerRejected { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_and_not_yet_valid_certificates_are_refused() {
    init_logs();
    let certs = Certs::new();
    let n1 = Node::start("n1", certs.node("n1")).await;
    let good = Node::start("n2", certs.node("n2")).await;
    let now = OffsetDateTime::now_utc();
    let day = time::Duration::days(1);
    let windows = [
        ("expired", now - 10 * day, now - day, "expired"),
        ("not yet valid", now + day, now + 10 * day, "not valid yet"),
    ];
    for (case, not_before, not_after, words) in windows {
        // As a client: the server refuses us.
        let bad = Node::start("n5", certs.node_with_window("n5", not_before, not_after)).await;
        let before = n1.transport.stats().handshakes_rejected;
        let err = bad.ask(&n1, b"hi").await.unwrap_err();
        println!("{case} client certificate: {err}");
        assert!(
            matches!(&err, TransportError::RejectedByPeer { .. }),
            "{case}: {err}"
        );
        wait_until("the server to count the refusal", || {
            n1.transport.stats().handshakes_rejected > before
        })
        .await;
        good.assert_serves(&n1).await;

        // As a server: we refuse it, saying why.
        let err = n1.ask(&bad, b"hi").await.unwrap_err();
        println!("{case} server certificate: {err}");
        assert!(
            matches!(&err, TransportError::PeerRejected { reason, .. } if reason.contains(words)),
            "{case}: {err}"
        );
        assert!(bad.recorder.last("n1").is_none());
        n1.assert_serves(&good).await;
        bad.transport.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_streams_are_refused_and_nobody_else_notices() {
    init_logs();
    let certs = Certs::new();
    let mut cfg = config();
    cfg.max_streams_per_connection = 4;
    let n1 = Node::start_with("n1", certs.node("n1"), cfg).await;
    let good = Node::start("n2", certs.node("n2")).await;
    let (_endpoint, conn) = raw_connection(&certs.node("n3"), &n1).await;

    // A well-formed request on the raw connection works.
    let ok = raw_exchange(&conn, &request_frame(b"ping"), true)
        .await
        .unwrap();
    assert_eq!(ok[0], wire::STATUS_OK);
    assert_eq!(&ok[1 + frame::HEADER_LEN..], b"ping");

    // A frame announcing 4 GiB is refused before anything is allocated.
    let code = raw_exchange(&conn, &[0xff, 0xff, 0xff, 0xff, 1, 2, 3], false)
        .await
        .unwrap_err();
    assert_eq!(code, wire::STREAM_TOO_LARGE);
    // Just over the limit, too.
    let code = raw_exchange(&conn, &frame::header((1 << 20) + 1), false)
        .await
        .unwrap_err();
    assert_eq!(code, wire::STREAM_TOO_LARGE);
    // Garbage: text read as a length, a frame cut short, bytes after the frame.
    let code = raw_exchange(&conn, b"GET / HTTP/1.1\r\n\r\n", true)
        .await
        .unwrap_err();
    assert_eq!(code, wire::STREAM_TOO_LARGE);
    let code = raw_exchange(&conn, &[0, 0, 0, 10, 1, 2], true)
        .await
        .unwrap_err();
    assert_eq!(code, wire::STREAM_MALFORMED);
    let mut trailing = request_frame(b"ping");
    trailing.extend_from_slice(b"junk");
    let code = raw_exchange(&conn, &trailing, true).await.unwrap_err();
    assert_eq!(code, wire::STREAM_MALFORMED);
    // A stream that never finishes is closed after stream_read_timeout.
    let code = raw_exchange(&conn, &[0, 0], false).await.unwrap_err();
    assert_eq!(code, wire::STREAM_TOO_SLOW);
    assert_eq!(n1.transport.stats().streams_rejected, 6);

    // At most 4 streams at once per connection: a fifth waits for stream credit, which
    // comes back when the server gives up on a stalled one.
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let (mut send, recv) = conn.open_bi().await.unwrap();
        send.write_all(&[0]).await.unwrap();
        stalled.push((send, recv));
    }
    let fifth = tokio::time::timeout(Duration::from_millis(200), conn.open_bi()).await;
    assert!(fifth.is_err(), "a fifth stream opened while four were open");
    // Meanwhile everyone else, on other connections, is served.
    good.assert_serves(&n1).await;
    // The server gives up on the stalled streams; once this client lets go of them (QUIC
    // wants it to answer the server's STOP_SENDING with a reset, which quinn does when the
    // stream is dropped), the credit comes back.
    for (send, mut recv) in stalled {
        let read = tokio::time::timeout(PATIENCE, recv.read_to_end(16))
            .await
            .unwrap();
        assert!(
            matches!(read, Err(quinn::ReadToEndError::Read(quinn::ReadError::Reset(code))) if code == wire::STREAM_TOO_SLOW),
            "{read:?}"
        );
        drop(send);
    }
    let (_fifth_send, _fifth_recv) = tokio::time::timeout(PATIENCE, conn.open_bi())
        .await
        .expect("stream credit came back")
        .unwrap();

    // The raw connection itself survived all of it.
    let ok = raw_exchange(&conn, &request_frame(b"still here"), true)
        .await
        .unwrap();
    assert_eq!(&ok[1 + frame::HEADER_LEN..], b"still here");
    good.assert_serves(&n1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_peer_fails_fast_and_is_dialed_again_when_it_returns() {
    init_logs();
    let certs = Certs::new();
    let n1 = Node::start("n1", certs.node("n1")).await;
    let n2 = Node::start("n2", certs.node("n2")).await;
    n1.assert_serves(&n2).await;
    assert!(n1.connected_to("n2"));

    let Node {
        transport,
        files,
        addr,
        ..
    } = n2;
    transport.close().await;
    drop(transport);
    // The close reaches n1, which drops the connection from its cache.
    wait_until("n1 to drop its connection to n2", || !n1.connected_to("n2")).await;
    let started = Instant::now();
    let err = n1
        .transport
        .request("n2", addr, b"hi".to_vec())
        .await
        .unwrap_err();
    let took = started.elapsed();
    println!("request to a stopped peer: {err} after {took:?}");
    assert!(err.is_retryable(), "{err}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert!(!n1.connected_to("n2"));

    // n2 comes back on another port.
    let back = Node::start("n2", files).await;
    assert_ne!(back.addr, addr);
    n1.assert_serves(&back).await;
    assert!(n1.connected_to("n2"));
}

/// A dial that races the peer's bind lands within the dial timeout: its first Initial,
/// sent to a port nobody holds yet, is lost, and the resend must come well before the
/// timeout (issue 30: at quinn's default initial RTT of 333 ms it came after about 1 s,
/// just as a 1 s dial gave up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dial_that_races_the_peer_s_bind_lands() {
    init_logs();
    let certs = Certs::new();
    let settings = TransportConfig {
        dial_timeout: Duration::from_secs(1),
        ..config()
    };
    let n1 = Node::start_with("n1", certs.node("n1"), settings.clone()).await;
    // A port that is free now; n2 binds it only after n1 has sent its first Initial.
    let addr = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dial = {
        let transport = n1.transport.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let result = transport.request("n2", addr, b"hi".to_vec()).await;
            (result, started.elapsed())
        })
    };
    // The scenario, not a wait for a condition: the peer starts 100 ms after the dial.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let n2 = Node::start_with(
        "n2",
        certs.node("n2"),
        TransportConfig {
            listen: addr,
            ..settings
        },
    )
    .await;
    let (result, took) = dial.await.unwrap();
    println!("a dial that raced the peer's bind: {result:?} after {took:?}");
    assert_eq!(result.unwrap(), b"hi", "the dial did not land");
    n1.assert_serves(&n2).await;
}

/// A peer that crashes (no close sent) and comes back on the same port with the same
/// reset key resets our connection to its previous run at our next packet, so we redial
/// at once instead of sending into a dead connection until the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_peer_back_on_its_port_resets_the_old_connection() {
    init_logs();
    let certs = Certs::new();
    let settings = TransportConfig {
        // Far beyond PATIENCE: only a stateless reset can end the old connection in time.
        idle_timeout: Duration::from_secs(120),
        request_timeout: Duration::from_secs(120),
        reset_key: Some(ResetKey([7; 32])),
        ..config()
    };
    let n1 = Node::start_with("n1", certs.node("n1"), settings.clone()).await;
    let n2 = Node::start_with("n2", certs.node("n2"), settings.clone()).await;
    n1.assert_serves(&n2).await;
    let old = n1
        .transport
        .shared
        .registry
        .all()
        .into_iter()
        .find(|live| live.peer.identity.name == "n2" && live.direction == Direction::Dialed)
        .expect("n1 dialed n2")
        .conn
        .clone();

    // n2 "crashes": its endpoint moves to a socket that talks only to a sink nobody
    // reads, so n1 never hears from it again and no close is ever sent.
    // quinn keeps the previous socket until traffic arrives on the new one, so rebind
    // twice: the second rebind lets go of the port.
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..2 {
        let blackhole = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        blackhole.connect(sink.local_addr().unwrap()).unwrap();
        n2.transport.shared.endpoint.rebind(blackhole).unwrap();
    }
    let back = Node::start_with(
        "n2",
        n2.files.clone(),
        TransportConfig {
            listen: n2.addr,
            ..settings
        },
    )
    .await;
    assert_eq!(back.addr, n2.addr);

    // The next request goes out on the old connection; the new run answers it with a
    // stateless reset. Neither the request nor the connection would time out within
    // PATIENCE, so the old connection ends in time only if the reset works.
    let n1 = Arc::new(n1);
    let asking = {
        let (n1, to, addr) = (n1.clone(), back.name.clone(), back.addr);
        tokio::spawn(async move { n1.transport.request(&to, addr, b"hi".to_vec()).await })
    };
    wait_until("the old connection to be reset", || {
        old.close_reason().is_some()
    })
    .await;
    let _ = asking.await.unwrap();
    n1.assert_serves(&back).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_reload_keeps_the_previous_identity() {
    init_logs();
    let certs = Certs::new();
    let n1 = Node::start("n1", certs.node("n1")).await;
    let n2 = Node::start("n2", certs.node("n2")).await;
    let before = n1.transport.tls_info();

    // Not a certificate at all; then another node's certificate.
    write_atomically(&n1.files.cert, "garbage\n");
    wait_until("the failure to be noticed", || {
        n1.transport.stats().reload_failures >= 1
    })
    .await;
    let other = certs.node("n9");
    fs::copy(&other.cert, &n1.files.cert).unwrap();
    fs::copy(&other.key, &n1.files.key).unwrap();
    wait_until("the second failure to be noticed", || {
        n1.transport.stats().reload_failures >= 2
    })
    .await;
    assert_eq!(n1.transport.tls_info(), before);
    n1.assert_serves(&n2).await;
    n2.assert_serves(&n1).await;
    // Logged (and counted) once per file version, not once per poll.
    let failures = n1.transport.stats().reload_failures;
    let polls_later = Instant::now() + Duration::from_millis(500);
    wait_until("a few polls", || Instant::now() > polls_later).await;
    assert_eq!(n1.transport.stats().reload_failures, failures);

    // A good pair is picked up.
    let fresh = certs.node("n1");
    assert_eq!(fresh.cert, n1.files.cert);
    wait_until("the new certificate to be loaded", || {
        n1.transport.tls_info().fingerprint == fingerprint_of(&n1.files.cert)
    })
    .await;
    assert_ne!(n1.transport.tls_info().fingerprint, before.fingerprint);
    assert_eq!(n1.transport.tls_info().identity, before.identity);

    // A key that goes missing looks like a rotation in progress at first; when it stays
    // missing for ten polls it is reported again, as a warning, and the node keeps going.
    let failures = n1.transport.stats().reload_failures;
    let loaded = n1.transport.tls_info();
    fs::remove_file(&n1.files.key).unwrap();
    wait_until("the missing key to be reported twice", || {
        n1.transport.stats().reload_failures == failures + 2
    })
    .await;
    assert_eq!(n1.transport.tls_info(), loaded);
    // New handshakes still work: the loaded key is in memory.
    let newcomer = Node::start("n7", certs.node("n7")).await;
    newcomer.assert_serves(&n1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_and_cas_rotate_under_load_without_a_failed_request() {
    init_logs();
    let old = Certs::new();
    let new = Certs::new();
    let both = old.ca_pem() + &new.ca_pem();
    let a = Node::start("n1", old.node("n1")).await;
    let b = Node::start("n2", old.node("n2")).await;
    // A node that will keep its certificate from the old CA (and trusts both CAs).
    let d_files = old.node("n3");
    write_atomically(&d_files.ca, &both);
    let d = Node::start("n3", d_files).await;
    d.assert_serves(&b).await;
    assert!(b.connected_to("n3"));

    // Four clients, two each way, in loops until told to stop.
    let (ta, tb, a_addr, b_addr) = (a.transport.clone(), b.transport.clone(), a.addr, b.addr);
    let load = Load::start(4, move |i, n| {
        let (from, to, addr) = if i % 2 == 0 {
            (ta.clone(), "n2", b_addr)
        } else {
            (tb.clone(), "n1", a_addr)
        };
        async move {
            let body = format!("client {i} request {n}").into_bytes();
            match from.request(to, addr, body.clone()).await {
                Ok(response) if response == body => Ok(()),
                Ok(_) => Err("wrong response".to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
    });
    load.progress("traffic to flow").await;

    // 1. Rotate n1's certificate (same CA).
    let a_before = a.transport.tls_info().fingerprint;
    pki::rotate(&old.ca_dir(), "n1", &a.files.cert, &a.files.key, 30).unwrap();
    let a_rotated = fingerprint_of(&a.files.cert);
    assert_ne!(a_rotated, a_before);
    wait_until("n1 to load its rotated certificate", || {
        a.transport.tls_info().fingerprint == a_rotated
    })
    .await;
    load.progress("traffic after the rotation").await;
    // A new handshake presents the rotated certificate.
    a.assert_serves(&d).await;
    assert_eq!(d.recorder.last("n1").unwrap().fingerprint, a_rotated);

    // 2. Rotate the CA: add the new CA everywhere...
    for node in [&a, &b] {
        write_atomically(&node.files.ca, &both);
    }
    wait_until("both nodes to trust both CAs", || {
        [&a, &b]
            .iter()
            .all(|n| n.transport.tls_info().ca_fingerprints.len() == 2)
    })
    .await;
    load.progress("traffic after adding the new CA").await;
    // ...reissue both nodes' certificates from it...
    let a_new = new.node("n1");
    let b_new = new.node("n2");
    fs::copy(&a_new.cert, &a.files.cert).unwrap();
    fs::copy(&a_new.key, &a.files.key).unwrap();
    fs::copy(&b_new.key, &b.files.key).unwrap();
    fs::copy(&b_new.cert, &b.files.cert).unwrap();
    let (a_fp, b_fp) = (fingerprint_of(&a.files.cert), fingerprint_of(&b.files.cert));
    wait_until("both nodes to load their new certificates", || {
        a.transport.tls_info().fingerprint == a_fp && b.transport.tls_info().fingerprint == b_fp
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
            .all(|n| n.transport.tls_info().ca_fingerprints == new_only)
    })
    .await;
    // Connections made with old certificates are replaced: peers now see the new ones.
    wait_until("new handshakes with the new certificates", || {
        b.recorder.last("n1").is_some_and(|p| p.fingerprint == a_fp)
            && a.recorder.last("n2").is_some_and(|p| p.fingerprint == b_fp)
    })
    .await;
    // The connection of the node left with an old certificate was closed, on both ends.
    wait_until("n3's connection to be closed", || {
        !b.connected_to("n3") && !d.connected_to("n2")
    })
    .await;
    load.progress("traffic after removing the old CA").await;

    let (done, failures) = load.finish().await;
    println!(
        "rotation under load: {done} requests, {} failed; n1 {:?}; n2 {:?}",
        failures.len(),
        a.transport.stats(),
        b.transport.stats()
    );
    assert!(failures.is_empty(), "failed requests: {failures:#?}");
    // Only connections from before the certificates were reissued were retired.
    for node in [&a, &b] {
        assert!(
            node.transport
                .connections()
                .iter()
                .all(|c| c.peer.fingerprint == a_fp || c.peer.fingerprint == b_fp || c.retiring)
        );
    }

    // The node with the old CA's certificate is refused from now on.
    let err = d.ask(&b, b"hi").await.unwrap_err();
    println!("old-CA client after the rotation: {err}");
    assert!(
        matches!(err, TransportError::RejectedByPeer { .. }),
        "{err}"
    );
    assert!(b.transport.stats().connections_retired >= 1);
    wait_until("n2 to count the refusal", || {
        b.transport.stats().handshakes_rejected >= 1
    })
    .await;
    a.assert_serves(&b).await;
    b.assert_serves(&a).await;
}

/// A revoked node is refused as a client and as a server, its open connections (both
/// directions) are closed, others carry on, and a smaller set lets it back in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_certificate_is_refused_both_ways_and_cut_off() {
    init_logs();
    let certs = Certs::new();
    let n1 = Node::start("n1", certs.node("n1")).await;
    let n2 = Node::start("n2", certs.node("n2")).await;
    let n3 = Node::start("n3", certs.node("n3")).await;
    n1.assert_serves(&n2).await;
    n2.assert_serves(&n1).await;
    let n2_fingerprint = fingerprint_of(&n2.files.cert);
    let to_n2 = |n: &Node| {
        n.transport
            .connections()
            .iter()
            .filter(|c| c.peer.fingerprint == n2_fingerprint)
            .count()
    };
    assert_eq!(to_n2(&n1), 2, "one connection each way");

    n1.transport
        .set_revoked(std::collections::BTreeSet::from([key_of(&n2.files.cert)]));
    assert_eq!(n1.transport.stats().revoked, 2);
    wait_until("n1 to drop both connections with n2", || to_n2(&n1) == 0).await;
    wait_until("n2 to see both connections closed", || {
        !n2.connected_to("n1")
    })
    .await;

    // As a client: n1 refuses n2's handshake.
    let err = n2.ask(&n1, b"hi").await.unwrap_err();
    println!("revoked, as the refused client sees it: {err}");
    assert!(
        matches!(&err, TransportError::RejectedByPeer { reason, .. } if reason.contains("revoked")),
        "{err}"
    );
    // As a server: n1 refuses n2's certificate when it dials.
    let err = n1.ask(&n2, b"hi").await.unwrap_err();
    println!("revoked, as the refusing client sees it: {err}");
    assert!(
        matches!(&err, TransportError::PeerRejected { reason, .. } if reason.contains("revoked")),
        "{err}"
    );
    assert!(!err.is_retryable());
    wait_until("n1 to count the refusals", || {
        n1.transport.stats().revoked >= 4
    })
    .await;
    assert!(n1.transport.stats().handshakes_rejected >= 1);
    assert!(
        n2.recorder.last("n1").is_some(),
        "n2 served n1 before the revocation only"
    );
    n3.assert_serves(&n1).await;
    n1.assert_serves(&n3).await;

    // Unrevoked: a smaller set lets n2 connect again, both ways.
    n1.transport.set_revoked(std::collections::BTreeSet::new());
    n2.assert_serves(&n1).await;
    n1.assert_serves(&n2).await;
    for node in [&n1, &n2, &n3] {
        node.transport.close().await;
    }
}

/// Revocation is by key: the (r, n − s) twin of a revoked P-256 certificate carries the
/// same key, so it is refused too, although its DER (and certificate fingerprint) differ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ecdsa_twin_of_a_revoked_certificate_is_refused() {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    init_logs();
    let certs = Certs::with(Algo::P256);
    let n1 = Node::start("n1", certs.node("n1")).await;
    let files = certs.node("n2");
    let original = CertificateDer::from_pem_file(&files.cert).unwrap();
    let twin = ecdsa_twin(&original);
    assert_ne!(pki::fingerprint(&twin), pki::fingerprint(&original));
    assert!(pki::identity_of(&twin).is_ok(), "the twin parses");
    assert_eq!(
        pki::key_fingerprint(&twin).unwrap(),
        pki::key_fingerprint(&original).unwrap()
    );
    let twin_files = TlsFiles {
        cert: certs.dir.path().join("n2-twin.pem"),
        ..files.clone()
    };
    let pem = pem::encode(&pem::Pem::new("CERTIFICATE", twin));
    fs::write(&twin_files.cert, pem).unwrap();
    // The twin is a valid certificate: served before the revocation.
    let n2 = Node::start("n2", twin_files).await;
    n2.assert_serves(&n1).await;

    // The operator revokes the certificate file they have, the original.
    n1.transport
        .set_revoked(std::collections::BTreeSet::from([key_of(&files.cert)]));
    wait_until("n1 to cut the twin off", || !n2.connected_to("n1")).await;
    assert_refused_as_revoked(&n2.ask(&n1, b"hi").await.unwrap_err());
    for node in [&n1, &n2] {
        node.transport.close().await;
    }
}

/// Keys revoked in the configuration are refused from the first handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_revoked_at_bind_are_refused_from_the_first_handshake() {
    init_logs();
    let certs = Certs::new();
    let n2 = Node::start("n2", certs.node("n2")).await;
    let config = TransportConfig {
        revoked: std::collections::BTreeSet::from([key_of(&n2.files.cert)]),
        ..config()
    };
    let n1 = Node::start_with("n1", certs.node("n1"), config).await;
    assert_refused_as_revoked(&n2.ask(&n1, b"hi").await.unwrap_err());
    for node in [&n1, &n2] {
        node.transport.close().await;
    }
}

#[test]
fn settings_are_checked() {
    assert!(TransportConfig::default().validate().is_ok());
    let widest = TransportConfig {
        max_streams_per_connection: MAX_STREAMS_PER_CONNECTION,
        ..TransportConfig::default()
    };
    assert!(widest.validate().is_ok());
    let bad = [
        TransportConfig {
            max_frame: 0,
            ..TransportConfig::default()
        },
        TransportConfig {
            keep_alive: Duration::from_secs(20),
            ..TransportConfig::default()
        },
        TransportConfig {
            dial_timeout: Duration::ZERO,
            ..TransportConfig::default()
        },
        TransportConfig {
            max_streams_per_connection: MAX_STREAMS_PER_CONNECTION + 1,
            ..TransportConfig::default()
        },
    ];
    for config in bad {
        assert!(matches!(config.validate(), Err(TransportError::Config(_))));
    }
}

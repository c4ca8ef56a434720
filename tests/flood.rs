//! Strangers on the network, against the real binary: a flood of QUIC Initial packets
//! from fresh source ports, none of which ever completes a handshake, must not keep an
//! operator with a valid certificate from reaching the node (issue 13, "a stranger
//! without a certificate locks operators out").
//!
//! The flood is made with quinn-proto's sans-IO client: each Initial is a real QUIC v1
//! Initial packet carrying a real TLS ClientHello (so the node cannot tell it from a
//! client's first packet), sent from a UDP socket of its own that never sends anything
//! else. The sockets are kept open for a while (the last [`KEEP_SOCKETS`]) and read, so
//! that whatever the node answers lands somewhere and is counted: that count is how the
//! test knows the flood is reaching the node, rather than assuming it.

mod support;

use std::collections::VecDeque;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use support::*;

/// Initials per second the flood aims at. The report that found the lockout used about
/// 400 a second; this is well above it.
const FLOOD_RATE: u64 = 1_000;

/// How many of the flood's latest sockets stay open (and are read).
const KEEP_SOCKETS: usize = 512;

/// A thread sending QUIC Initials to `target`, each from a new UDP socket.
struct Flood {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    answered: Arc<AtomicU64>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Flood {
    fn start(target: SocketAddr, ca: &Path, server_name: &str) -> Flood {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(ca).expect("reading the CA"))
            .unwrap();
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = tenure::version::alpn_labels();
        let crypto = quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let client = quinn_proto::ClientConfig::new(Arc::new(crypto));
        let server_name = server_name.to_owned();

        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let answered = Arc::new(AtomicU64::new(0));
        let (stop2, sent2, answered2) = (stop.clone(), sent.clone(), answered.clone());
        let thread = thread::spawn(move || {
            let mut endpoint = quinn_proto::Endpoint::new(
                Arc::new(quinn_proto::EndpointConfig::default()),
                None,
                false,
                None,
            );
            let mut sockets: VecDeque<UdpSocket> = VecDeque::new();
            let mut buf = Vec::with_capacity(1500);
            let mut incoming = [0u8; 1500];
            let began = Instant::now();
            let mut n = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                let now = Instant::now();
                let (_, mut conn) = endpoint
                    .connect(now, client.clone(), target, &server_name)
                    .unwrap();
                buf.clear();
                let transmit = conn.poll_transmit(now, 1, &mut buf).expect("an Initial");
                let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
                socket.set_nonblocking(true).unwrap();
                if socket.send_to(&buf[..transmit.size], target).is_ok() {
                    sent2.fetch_add(1, Ordering::Relaxed);
                }
                sockets.push_back(socket);
                if sockets.len() > KEEP_SOCKETS {
                    sockets.pop_front();
                }
                n += 1;
                if n.is_multiple_of(32) {
                    for socket in &sockets {
                        while socket.recv(&mut incoming).is_ok() {
                            answered2.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                // Pacing, not waiting for anything: the n-th Initial goes at n / rate.
                let due = began + Duration::from_micros(n * 1_000_000 / FLOOD_RATE);
                if let Some(ahead) = due.checked_duration_since(Instant::now()) {
                    thread::sleep(ahead);
                }
            }
        });
        Flood {
            stop,
            sent,
            answered,
            thread: Some(thread),
        }
    }

    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Waits (bounded by [`WAIT`]) until the node has answered `n` more of the flood's
    /// packets than it had so far.
    fn wait_answered(&self, n: u64) {
        let target = self.answered() + n;
        let deadline = Instant::now() + WAIT;
        while self.answered() < target {
            assert!(
                Instant::now() < deadline,
                "the node answered only {} of {} flood packets",
                self.answered(),
                self.sent()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn an_initial_flood_from_strangers_does_not_lock_operators_out() {
    let mut cluster = Cluster::builder(1).build();
    cluster.start();
    let addr: SocketAddr = cluster.member(0).addr.parse().unwrap();

    let flood = Flood::start(addr, &cluster.ca_dir().join("ca.pem"), cluster.name(0));
    // The flood is reaching the node (a second's worth of its Initials were answered)
    // before the operator tries.
    flood.wait_answered(FLOOD_RATE / 2);
    let (sent_before, began) = (flood.sent(), Instant::now());

    let mut failures = Vec::new();
    const CALLS: usize = 6;
    for call in 0..CALLS {
        let output = cluster.admin(&["status", "--json"]);
        if !output.status.success() {
            failures.push(format!(
                "call {call}: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
    }
    let elapsed = began.elapsed();
    let sent = flood.sent() - sent_before;
    let rate = sent as f64 / elapsed.as_secs_f64();
    eprintln!(
        "[flood] {sent} Initials in {elapsed:?} ({rate:.0}/s) during {CALLS} status calls; \
         {} answered in all",
        flood.answered()
    );
    drop(flood);
    assert!(
        failures.is_empty(),
        "{} of {CALLS} status calls failed under the flood:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Not vacuous: the flood ran at the rate that locked operators out before.
    assert!(
        rate >= 400.0,
        "the flood ran at only {rate:.0} Initials a second"
    );
    // And the node itself still serves: a status once the flood stopped, too.
    let status = cluster.status();
    assert!(status.get("leader").is_some(), "{status}");
}

//! Transport benchmarks: what a signed, mutually authenticated request costs.
//!
//! Run with `cargo bench -p tenure --bench transport` from the workspace root. For each
//! key algorithm (Ed25519, ECDSA P-256) a CA and node certificates `n1` and `n2` are made
//! with `pki::init_ca` / `pki::issue` in a temporary directory, then:
//!
//! 1. **Sign and verify** a [`MESSAGE_LEN`]-byte message (`Signer::sign`,
//!    `Verifier::verify`), [`CRYPTO_N`] times each after [`CRYPTO_WARMUP`] warm-up rounds.
//! 2. **Envelope seal and open** (`Sealer::seal`, `Gate::open`, a fresh sequence number
//!    each round) for each payload in [`PAYLOADS`], [`ENVELOPE_N`] rounds after
//!    [`ENVELOPE_WARMUP`].
//! 3. **Requests on loopback**, `n1` asking `n2`, whose handler echoes the body:
//!    - the first request over a fresh pair of transports, mTLS handshake included
//!      ([`HANDSHAKE_RUNS`] pairs, after one unmeasured pair);
//!    - the round trip on the cached connection for each body in [`BODIES`],
//!      [`RTT_N`] sequential requests after [`RTT_WARMUP`];
//!    - the throughput of [`REQUESTERS`] concurrent requesters (64-byte bodies) for
//!      [`THROUGHPUT_FOR`].
//!
//! Nothing here asserts anything about timing: it prints figures and a summary table, and
//! fails only when something does not work (a rejected envelope, a failed request, an
//! echo that differs). Figures from a small, shared machine are noisy: compare medians.

mod common;

use common::{Summary, micros, millis, print_machine};
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, ensure};
use tempfile::TempDir;
use tenure::envelope::{Gate, Sealer};
use tenure::future::BoxFuture;
use tenure::pki::{self, Algo, IfExists, Signer, Subject, Verifier};
use tenure::transport::{Handler, Local, PeerInfo, TlsFiles, Transport, TransportConfig};

const ALGOS: [Algo; 2] = [Algo::Ed25519, Algo::P256];
/// Length of the message signed and verified.
const MESSAGE_LEN: usize = 256;
const CRYPTO_N: usize = 5000;
const CRYPTO_WARMUP: usize = 500;
/// Envelope payload lengths.
const PAYLOADS: [usize; 2] = [256, 64 << 10];
const ENVELOPE_N: usize = 2000;
const ENVELOPE_WARMUP: usize = 100;
/// Fresh transport pairs whose first request is timed (`TENURE_BENCH_HANDSHAKES`
/// overrides it, e.g. to measure the handshake's cost alone with more samples).
const HANDSHAKE_RUNS: usize = 10;
/// Request body lengths for the steady-state round trip.
const BODIES: [usize; 2] = [64, 64 << 10];
const RTT_N: usize = 2000;
const RTT_WARMUP: usize = 100;
const REQUESTERS: usize = 8;
const THROUGHPUT_FOR: Duration = Duration::from_secs(3);
/// The envelope kind sealed (any number does).
const KIND: u16 = 1;

fn main() -> anyhow::Result<()> {
    print_machine("before");
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    let mut columns = Vec::new();
    for algo in ALGOS {
        println!("\n======== {algo} ========");
        let certs = Certs::new(algo)?;
        let mut figures = crypto_section(&certs)?;
        figures.extend(envelope_section(&certs)?);
        // Measured on a worker thread, where the node's request paths run.
        let (n1, n2) = (certs.n1.clone(), certs.n2.clone());
        let requests = tokio.block_on(tokio.spawn(transport_section(n1, n2)));
        figures.extend(requests.context("the transport task panicked")??);
        columns.push((algo, figures));
    }
    drop(tokio);
    print_machine("after");
    print_table(&columns);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------------------

/// A CA of one algorithm and the files of nodes `n1` and `n2`, in a temporary directory.
struct Certs {
    _dir: TempDir,
    n1: TlsFiles,
    n2: TlsFiles,
    /// `n1`'s key, and the verifier `n2` builds from `n1`'s certificate.
    signer: Arc<Signer>,
    verifier: Verifier,
}

impl Certs {
    fn new(algo: Algo) -> anyhow::Result<Certs> {
        let dir = TempDir::new().context("creating a temp dir")?;
        let ca_dir = dir.path().join("ca");
        pki::init_ca(&ca_dir, algo, 3650, IfExists::Refuse)?;
        let node = |name: &str| -> anyhow::Result<TlsFiles> {
            let subject = Subject::Node(name.to_owned());
            let out = dir.path().join("certs");
            let (cert, key) = pki::issue(&ca_dir, &subject, &out, 30, None, IfExists::Refuse)?;
            let ca = ca_dir.join(pki::CA_CERT_FILE);
            Ok(TlsFiles { ca, cert, key })
        };
        let (n1, n2) = (node("n1")?, node("n2")?);
        let identity = pki::load_identity(&n1.cert, &n1.key)?;
        let verifier = Verifier::from_cert(identity.leaf())?;
        ensure!(
            identity.signer.algorithm() == algo,
            "n1's key is not {algo}"
        );
        Ok(Certs {
            _dir: dir,
            n1,
            n2,
            signer: Arc::new(identity.signer),
            verifier,
        })
    }
}

// ---------------------------------------------------------------------------------------
// 1. Sign and verify
// ---------------------------------------------------------------------------------------

fn crypto_section(certs: &Certs) -> anyhow::Result<Vec<Figure>> {
    println!("\n== sign / verify, {MESSAGE_LEN}-byte message ==");
    let msg = pattern(MESSAGE_LEN);
    let signer = &certs.signer;
    let sign = sample(CRYPTO_WARMUP, CRYPTO_N, || {
        black_box(signer.sign(black_box(&msg)));
        Ok(())
    })?;
    let sig = signer.sign(&msg);
    let verify = sample(CRYPTO_WARMUP, CRYPTO_N, || {
        certs
            .verifier
            .verify(black_box(&msg), black_box(&sig))
            .context("a good signature did not verify")
    })?;
    Ok(vec![
        Figure::timed("sign 256 B", Summary::of(sign), "µs", 2),
        Figure::timed("verify 256 B", Summary::of(verify), "µs", 2),
    ])
}

/// Times `warmup + n` calls of `f` and returns the last `n`, in µs.
fn sample(
    warmup: usize,
    n: usize,
    mut f: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<Vec<f64>> {
    let mut times = Vec::with_capacity(n);
    for round in 0..warmup + n {
        let began = Instant::now();
        f()?;
        let took = began.elapsed();
        if round >= warmup {
            times.push(micros(took));
        }
    }
    Ok(times)
}

// ---------------------------------------------------------------------------------------
// 2. Envelope seal and open
// ---------------------------------------------------------------------------------------

fn envelope_section(certs: &Certs) -> anyhow::Result<Vec<Figure>> {
    println!("\n== envelope: Sealer::seal (n1 → n2), Gate::open (at n2) ==");
    let incarnation = tenure::envelope::unix_ms(SystemTime::now());
    let sealer = Sealer::new("n1".into(), incarnation);
    let gate = Gate::new("n2".into());
    let mut figures = Vec::new();
    for len in PAYLOADS {
        let payload = pattern(len);
        let mut seal = Vec::with_capacity(ENVELOPE_N);
        let mut open = Vec::with_capacity(ENVELOPE_N);
        for round in 0..ENVELOPE_WARMUP + ENVELOPE_N {
            let now = SystemTime::now();
            let began = Instant::now();
            let wire = sealer.seal(&certs.signer, "n2", KIND, black_box(&payload), now);
            let sealed = Instant::now();
            let envelope = gate
                .open(black_box(&wire), "n1", &certs.verifier)
                .context("a fresh envelope was rejected")?;
            let opened = Instant::now();
            ensure!(envelope.payload == payload, "the payload changed");
            if round >= ENVELOPE_WARMUP {
                seal.push(micros(sealed - began));
                open.push(micros(opened - sealed));
            }
        }
        let size = size_name(len);
        let decimals = if len > 1024 { 1 } else { 2 };
        figures.push(Figure::timed(
            &format!("seal {size}"),
            Summary::of(seal),
            "µs",
            decimals,
        ));
        figures.push(Figure::timed(
            &format!("open {size}"),
            Summary::of(open),
            "µs",
            decimals,
        ));
    }
    Ok(figures)
}

// ---------------------------------------------------------------------------------------
// 3. Requests on loopback
// ---------------------------------------------------------------------------------------

/// Answers every request with its body.
struct Echo;

impl Handler for Echo {
    fn handle(
        &self,
        _peer: PeerInfo,
        _local: Local,
        body: Vec<u8>,
    ) -> BoxFuture<Result<Vec<u8>, String>> {
        Box::pin(async move { Ok(body) })
    }
}

/// Two transports on loopback: `n1` asks, `n2` echoes.
struct Pair {
    n1: Arc<Transport>,
    n2: Arc<Transport>,
    n2_addr: SocketAddr,
}

impl Pair {
    async fn bind(n1: &TlsFiles, n2: &TlsFiles) -> anyhow::Result<Pair> {
        let bind = |files: &TlsFiles| {
            Transport::bind(TransportConfig::default(), files.clone(), Arc::new(Echo))
        };
        let n1 = Arc::new(bind(n1).await.context("binding n1")?);
        let n2 = Arc::new(bind(n2).await.context("binding n2")?);
        let n2_addr = n2.local_addr()?;
        Ok(Pair { n1, n2, n2_addr })
    }

    async fn close(self) {
        self.n1.close().await;
        self.n2.close().await;
    }
}

/// Sends `body` from n1 to n2 and checks the echo; returns the round trip (the copy kept
/// for the check is made before the clock starts).
async fn round_trip(n1: &Transport, n2_addr: SocketAddr, body: &[u8]) -> anyhow::Result<Duration> {
    let sent = body.to_vec();
    let began = Instant::now();
    let reply = n1.request("n2", n2_addr, sent).await;
    let took = began.elapsed();
    ensure!(
        reply.context("a request failed")? == body,
        "the echo differs"
    );
    Ok(took)
}

async fn transport_section(n1: TlsFiles, n2: TlsFiles) -> anyhow::Result<Vec<Figure>> {
    println!("\n== request n1 → n2 (echo) on loopback ==");
    let mut figures = Vec::new();

    let small = pattern(BODIES[0]);
    let runs = std::env::var("TENURE_BENCH_HANDSHAKES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(HANDSHAKE_RUNS);
    let mut first = Vec::with_capacity(runs);
    for run in 0..=runs {
        let pair = Pair::bind(&n1, &n2).await?;
        let took = round_trip(&pair.n1, pair.n2_addr, &small).await?;
        pair.close().await;
        if run > 0 {
            first.push(millis(took));
        }
    }
    let first = Summary::of(first);
    figures.push(Figure::timed("1st request (mTLS)", first, "ms", 2));

    let pair = Pair::bind(&n1, &n2).await?;
    round_trip(&pair.n1, pair.n2_addr, &small).await?;
    for len in BODIES {
        let body = pattern(len);
        let mut times = Vec::with_capacity(RTT_N);
        for round in 0..RTT_WARMUP + RTT_N {
            let took = round_trip(&pair.n1, pair.n2_addr, &body).await?;
            if round >= RTT_WARMUP {
                times.push(micros(took));
            }
        }
        let name = format!("RTT {}", size_name(len));
        figures.push(Figure::timed(&name, Summary::of(times), "µs", 1));
    }

    let connections = pair.n1.connections();
    ensure!(
        connections.len() == 1 && connections[0].peer.identity.name == "n2",
        "expected n1 to hold one cached connection, to n2: {connections:?}"
    );
    let per_second = throughput(&pair, &small).await?;
    figures.push(Figure {
        name: format!("throughput, {REQUESTERS} requesters"),
        unit: "req/s",
        n: format!("{}s", THROUGHPUT_FOR.as_secs()),
        median: per_second,
        p99: None,
        decimals: 0,
    });
    pair.close().await;
    Ok(figures)
}

/// Runs [`REQUESTERS`] tasks that each send `body` back to back for [`THROUGHPUT_FOR`];
/// returns completed requests per second.
async fn throughput(pair: &Pair, body: &[u8]) -> anyhow::Result<f64> {
    let began = Instant::now();
    let deadline = began + THROUGHPUT_FOR;
    let tasks: Vec<_> = (0..REQUESTERS)
        .map(|_| {
            let (n1, addr, body) = (pair.n1.clone(), pair.n2_addr, body.to_vec());
            tokio::spawn(async move {
                let mut done = 0u64;
                while Instant::now() < deadline {
                    round_trip(&n1, addr, &body).await?;
                    done += 1;
                }
                anyhow::Ok(done)
            })
        })
        .collect();
    let mut counts = Vec::with_capacity(REQUESTERS);
    for task in tasks {
        counts.push(task.await.context("a requester panicked")??);
    }
    let elapsed = began.elapsed().as_secs_f64();
    let total: u64 = counts.iter().sum();
    let per_second = total as f64 / elapsed;
    let (low, high) = (counts.iter().min(), counts.iter().max());
    println!(
        "throughput, {REQUESTERS} requesters × {:.2} s: {total} requests, {per_second:.0} req/s \
         (per requester {}–{})",
        elapsed,
        low.unwrap_or(&0),
        high.unwrap_or(&0)
    );
    Ok(per_second)
}

// ---------------------------------------------------------------------------------------
// Statistics and the report
// ---------------------------------------------------------------------------------------

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

fn size_name(len: usize) -> String {
    if len >= 1024 {
        format!("{} KiB", len / 1024)
    } else {
        format!("{len} B")
    }
}

/// One figure of one algorithm, for the table.
struct Figure {
    name: String,
    unit: &'static str,
    n: String,
    median: f64,
    p99: Option<f64>,
    decimals: usize,
}

impl Figure {
    /// A timed figure; prints its line as well.
    fn timed(name: &str, s: Summary, unit: &'static str, decimals: usize) -> Figure {
        println!("{name:<20} {}", s.describe(unit, decimals));
        Figure {
            name: name.to_owned(),
            unit,
            n: s.n.to_string(),
            median: s.median,
            p99: Some(s.p99),
            decimals,
        }
    }

    fn cell(&self) -> String {
        let d = self.decimals;
        match self.p99 {
            Some(p99) => format!("{:.d$} (p99 {:.d$})", self.median, p99),
            None => format!("{:.d$}", self.median),
        }
    }
}

/// The figures side by side, one column per algorithm.
fn print_table(columns: &[(Algo, Vec<Figure>)]) {
    let mut rows = vec![vec!["figure".to_owned(), "unit".into(), "N".into()]];
    rows[0].extend(columns.iter().map(|(algo, _)| algo.to_string()));
    let Some((_, first)) = columns.first() else {
        return;
    };
    for (i, figure) in first.iter().enumerate() {
        let mut row = vec![figure.name.clone(), figure.unit.into(), figure.n.clone()];
        row.extend(columns.iter().map(|(_, figures)| figures[i].cell()));
        rows.push(row);
    }
    let mut widths = vec![0; rows[0].len()];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    println!("\n== summary (median, p99 in brackets) ==");
    for (r, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            let pad = " ".repeat(width - cell.chars().count());
            if i < 2 {
                line.push_str(&format!("{cell}{pad}  "));
            } else {
                line.push_str(&format!("{pad}{cell}  "));
            }
        }
        println!("{}", line.trim_end());
        if r == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            println!("{}", rule.join("  "));
        }
    }
}

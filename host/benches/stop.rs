//! Stop latency: from a stop request to the end of `start`, for sync and async plugins.
//!
//! Run with `cargo bench -p tenure --bench stop` from the workspace root. The benchmark
//! builds the Rust plugins it measures (`wasm32-wasip2`, `plugin` profile, into the same
//! target dir) and runs each in process, [`ROUNDS`] times:
//! - `misbehave`, resource `cooperative`: synchronous, waits in the host's `sleep`
//!   (100 ms ticks);
//! - `heartbeat`: synchronous, waits in the host's `sleep` (1 s);
//! - `wstd-poller`: async with `wstd` alone, waits 5 s in `wasi:io/poll` on a
//!   monotonic-clock timer and checks `stop-requested` after each wait;
//! - `sdk-js` (JavaScript, `sdk/js/tenure.js`): an async `start` that `fetch`es a local
//!   HTTP server in this process and waits 1 s with the SDK's `sleep` (`setTimeout`, so
//!   in `wasi:io/poll` too);
//! - `sdk-py` (Python, `sdk/python/tenure.py`): requests the same server with
//!   `tenure.http` and waits 1 s with `tenure.sleep` (the host's `sleep`).
//!
//! The JavaScript and Python plugins are built by their build scripts (they need node,
//! npm, python3; the pinned tools install into `TENURE_TOOLS_DIR`) and compiled here once
//! each (seconds).
//!
//! Each round instantiates the plugin, runs `start` until it first waits, lets it wait a
//! little more (a different offset each round, so the stop lands at different points of
//! its wait), then requests a stop with a grace far beyond the run, and times how long
//! `start` takes to return. On a node, the supervisor writes `plugin.stopped` as soon as
//! `start` returns, so this is the stop request → `plugin.stopped` time without the
//! node's own scheduling. A plugin that does not return cleanly fails the benchmark:
//! before issue 26, the async one never returned here (on a node it was interrupted at
//! the stop grace plus the supervisor's one-second backstop).
//!
//! Nothing here asserts anything about timing: it prints figures. Figures from a small,
//! shared machine are noisy: compare medians across runs.

#[allow(
    dead_code,
    reason = "the shared helpers include some this bench does not use"
)]
mod common;
#[allow(
    dead_code,
    unused_imports,
    reason = "the shared helpers include some this bench does not use"
)]
#[path = "common/plugins.rs"]
mod plugins;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use common::{Summary, millis, print_machine};
use plugins::{
    NoState, build_rust, build_script, context, ensure_stopped_cleanly, request_stop, target_dir,
};
use tenure::catalog::{Manifest, Secrets};
use tenure::runtime::{Granted, InstanceContext, Plugin, Runtime, StateBackend};

/// Stops measured per plugin.
const ROUNDS: usize = 30;

/// How a measured plugin is built.
enum Build {
    /// A Rust package of the workspace.
    Rust(&'static str),
    /// `plugins/NAME/build.sh`.
    Script(&'static str),
}

/// The plugins measured: a label, how it is built, and the resource name it runs under.
const CASES: [(&str, Build, &str); 5] = [
    (
        "sync, host sleep 100 ms",
        Build::Rust("misbehave"),
        "cooperative",
    ),
    (
        "sync, host sleep 1 s",
        Build::Rust("heartbeat"),
        "heartbeat",
    ),
    ("async wstd, poll 5 s", Build::Rust("wstd-poller"), "poller"),
    ("async JS (sdk-js), 1 s", Build::Script("sdk-js"), "sdk-js"),
    ("Python (sdk-py), 1 s", Build::Script("sdk-py"), "sdk-py"),
];

fn main() -> anyhow::Result<()> {
    print_machine("before");
    let target = target_dir()?;
    let packages: Vec<&str> = CASES
        .iter()
        .filter_map(|(_, build, _)| match build {
            Build::Rust(package) => Some(*package),
            Build::Script(_) => None,
        })
        .collect();
    let mut rust = build_rust(&target, &packages)?.into_iter();
    let server = answer_every_request()?;
    let runtime = Runtime::new(None)?;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    let mut results = Vec::new();
    for (label, build, resource) in CASES.iter() {
        let (path, name) = match build {
            Build::Rust(package) => (rust.next().context("a built package")?, *package),
            Build::Script(name) => (build_script(&target, name)?, *name),
        };
        let wasm = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let plugin = Arc::new(runtime.load(&wasm)?);
        let granted = Arc::new(granted(resource, &server)?);
        let times = tokio.block_on(time_stops(plugin, name, resource, granted))?;
        let summary = Summary::of(times);
        println!("{label:<26} {}", summary.describe("ms", 2));
        results.push((label, summary));
    }
    print_machine("after");
    println!("\nstop request → start returned (ms), N = {ROUNDS} each:");
    println!("| plugin | median | min | max |");
    println!("|---|---|---|---|");
    for (label, s) in results {
        println!(
            "| {label} | {:.2} | {:.2} | {:.2} |",
            s.median, s.min, s.max
        );
    }
    Ok(())
}

/// What the SDK plugins are granted: `server` as `TARGET_URL`, a 1 s interval.
fn granted(resource: &str, server: &str) -> anyhow::Result<Granted> {
    let manifest = format!(
        "resource = \"{resource}\"\n[capabilities]\n\
         allowed_outbound_hosts = [\"{server}\"]\n\
         env = {{ TARGET_URL = \"{server}/bench\", INTERVAL_MS = \"1000\" }}\n"
    );
    let manifest = Manifest::parse(resource, &manifest).map_err(anyhow::Error::msg)?;
    Ok(Granted::new(&manifest.capabilities, &Secrets::default()))
}

/// A local HTTP server that answers every request `200 OK` with an empty body and closes
/// the connection; its base URL.
fn answer_every_request() -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let base = format!("http://{}", listener.local_addr()?);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            // The plugins send a GET without a body: the head fits one read.
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    Ok(base)
}

/// Stops `plugin` [`ROUNDS`] times at different points of its wait; the times in ms.
async fn time_stops(
    plugin: Arc<Plugin>,
    package: &str,
    resource: &str,
    granted: Arc<Granted>,
) -> anyhow::Result<Vec<f64>> {
    let state: Arc<dyn StateBackend> = Arc::new(NoState);
    let mut times = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let ctx = context(package, resource, round as u64 + 1, &state, 128 << 20);
        let ctx = Arc::new(
            InstanceContext::new(
                ctx.plugin.clone(),
                ctx.grant.clone(),
                ctx.lease.clone(),
                state.clone(),
                ctx.memory_limit,
            )
            .with_granted(granted.clone()),
        );
        let (parked_tx, parked) = tokio::sync::oneshot::channel();
        // On a worker thread, where the supervisor runs plugins.
        let run = tokio::spawn(plugins::run_until_stopped(
            plugin.clone(),
            ctx.clone(),
            move |_, _| {
                let _ = parked_tx.send(());
            },
        ));
        parked
            .await
            .with_context(|| format!("{package} ended before it first waited"))?;
        // 0 to 87 ms after it first waited (for the SDK plugins, that may be in their
        // first request), a different offset each round.
        tokio::time::sleep(Duration::from_millis((round as u64 * 29) % 90)).await;
        let asked = Instant::now();
        request_stop(&ctx);
        let returned = tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .with_context(|| format!("{package} did not return within 30 s of the stop"))?
            .context("the plugin task panicked")?;
        times.push(millis(asked.elapsed()));
        ensure_stopped_cleanly(&returned)?;
    }
    Ok(times)
}

//! Stop latency: from a stop request to the end of `start`, for sync and async plugins.
//!
//! Run with `cargo bench -p tenure --bench stop` from the workspace root. The benchmark
//! builds the Rust plugins it measures (`wasm32-wasip2`, `plugin` profile, into the same
//! target dir) and runs each in process, [`ROUNDS`] times:
//! - `misbehave`, resource `cooperative`: synchronous, waits in the host's `sleep`
//!   (100 ms ticks);
//! - `heartbeat`: synchronous, waits in the host's `sleep` (1 s);
//! - `wstd-poller`: async with `wstd` alone, waits 5 s in `wasi:io/poll` on a
//!   monotonic-clock timer and checks `stop-requested` after each wait.
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

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use common::{Summary, millis, print_machine};
use plugins::{NoState, build_rust, context, ensure_stopped_cleanly, request_stop, target_dir};
use tenure::runtime::{Plugin, Runtime, StateBackend};

/// Stops measured per plugin.
const ROUNDS: usize = 30;

/// The plugins measured: a label, the package, and the resource name it runs under.
const CASES: [(&str, &str, &str); 3] = [
    ("sync, host sleep 100 ms", "misbehave", "cooperative"),
    ("sync, host sleep 1 s", "heartbeat", "heartbeat"),
    ("async wstd, poll 5 s", "wstd-poller", "poller"),
];

fn main() -> anyhow::Result<()> {
    print_machine("before");
    let target = target_dir()?;
    let packages: Vec<&str> = CASES.iter().map(|(_, package, _)| *package).collect();
    let paths = build_rust(&target, &packages)?;
    let runtime = Runtime::new(None)?;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    let mut results = Vec::new();
    for ((label, package, resource), path) in CASES.iter().zip(&paths) {
        let wasm = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let plugin = Arc::new(runtime.load(&wasm)?);
        let times = tokio.block_on(time_stops(plugin, package, resource))?;
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

/// Stops `plugin` [`ROUNDS`] times at different points of its wait; the times in ms.
async fn time_stops(
    plugin: Arc<Plugin>,
    package: &str,
    resource: &str,
) -> anyhow::Result<Vec<f64>> {
    let state: Arc<dyn StateBackend> = Arc::new(NoState);
    let mut times = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let ctx = context(package, resource, round as u64 + 1, &state, 64 << 20);
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
        // 0 to 87 ms into its wait, a different offset each round.
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

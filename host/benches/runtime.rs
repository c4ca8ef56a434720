//! Runtime benchmarks: the figures the plugin runtime is judged by.
//!
//! Run with `cargo bench -p tenure --bench runtime` from the workspace root. The
//! benchmark builds the guest plugins itself (`heartbeat` and `misbehave`, for
//! `wasm32-wasip2` with the `plugin` profile, into the same target dir), then measures:
//!
//! 1. **Instantiate + start latency** (target: ≤ 100 µs with a warm cache). The
//!    `misbehave` fixture with resource `returns` (its `start` logs and returns `Ok` at
//!    once) is instantiated and started [`LATENCY_ITERATIONS`] times after
//!    [`LATENCY_WARMUP`] warm-up rounds, each with a fresh grant. Instantiation alone and
//!    instantiation plus `start` are reported as median, p99, min and max.
//! 2. **Resident memory per idle running plugin** (target: ≤ 1 MiB). K `heartbeat`
//!    instances (each a tokio task parked inside `start`, in the host's `sleep`) are
//!    spawned; the growth of the process's RSS (`/proc/self/statm`) divided by K is
//!    reported, for each K in [`IDLE_COUNTS`], [`IDLE_REPEATS`] times.
//! 3. **Outbound HTTP: the fence's added cost.** The same GET to a local HTTP server,
//!    [`HTTP_ROUNDS`] times each way, interleaved: sent directly with wasmtime-wasi-http's
//!    `default_send_request`, and through `runtime::http::outgoing` (the path every plugin
//!    request takes: allow-list, the lease check, the `tenure-*` headers, bounded
//!    timeouts, the watch for D, and our own sender, whose socket resets a connection
//!    abandoned at D: `runtime/http/connect.rs`). Both open a fresh connection per
//!    request; the difference of the medians is the fence's cost with our sender's.
//! 4. **Startup with a warm compile cache.** `Runtime::load` of `heartbeat` with an empty
//!    cache (compiles) and with a filled one (deserializes), [`LOAD_RUNS`] times each;
//!    then the whole process: the real `tenure run` binary, from spawn to its first
//!    `plugin.started` event, once with an empty data dir and [`WARM_RESTARTS`] times
//!    more on the same data dir (its compile cache filled).
//!
//! Nothing here asserts anything about timing: the benchmark prints figures, and a
//! table comparing them with the targets at the end. It fails only when something
//! does not work at all (a plugin that does not start, a node that does not stop).
//! Figures from a small, shared machine are noisy: compare medians across runs.

mod common;
#[allow(
    dead_code,
    reason = "the shared helpers include some this bench does not use"
)]
#[path = "common/plugins.rs"]
mod plugins;

use common::{Summary, micros, millis, print_machine};
use plugins::{NoState, context, mib, rss_bytes, settled_rss, target_dir, trim_heap};
use std::future::Future;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use tempfile::TempDir;
use tenure::runtime::{CacheUse, Failure, InstanceContext, Plugin, Runtime, StateBackend};
use tokio::task::JoinHandle;

/// Instantiate+start rounds measured, after the warm-up.
const LATENCY_ITERATIONS: usize = 2000;
/// Instantiate+start rounds run first and not measured.
const LATENCY_WARMUP: usize = 100;
/// How many idle instances run at once in the memory measurement.
const IDLE_COUNTS: [usize; 2] = [100, 500];
/// How many times each idle count is measured.
const IDLE_REPEATS: usize = 3;
/// Idle instances run once, unmeasured, before the memory measurement.
const IDLE_WARMUP: usize = 20;
/// `Runtime::load` runs per cache state.
const LOAD_RUNS: usize = 10;
/// Requests sent each way in the outbound HTTP comparison, after [`HTTP_WARMUP`] each.
const HTTP_ROUNDS: usize = 2000;
const HTTP_WARMUP: usize = 100;
/// Node restarts on a filled data dir.
const WARM_RESTARTS: usize = 5;
/// Every instance's memory cap.
const MEMORY_LIMIT: usize = 64 << 20;
/// The bound on any wait for something that should happen (tasks parking, a node
/// starting or stopping); reaching it is an error, not a figure.
const WAIT: Duration = Duration::from_secs(60);
fn main() -> anyhow::Result<()> {
    print_machine("before");
    let wasm = build_plugins()?;
    let scratch = TempDir::new().context("creating a temp dir")?;
    let state: Arc<dyn StateBackend> = Arc::new(NoState);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    let mut table = Table::default();

    let runtime = Runtime::new(Some(&scratch.path().join("cache")))?;
    println!("pooling allocator: {}", runtime.pooling());
    tokio.block_on(latency_section(&runtime, &wasm, &state, &mut table))?;
    tokio.block_on(idle_section(&runtime, &wasm, &state, &mut table))?;
    tokio.block_on(outbound_section(&state, &mut table))?;
    drop(runtime);
    load_section(&wasm, &mut table)?;
    process_section(&wasm, &mut table)?;

    print_machine("after");
    table.print();
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Plugins
// ---------------------------------------------------------------------------------------

/// The plugins under test: bytes to load, and the path to install in a node.
struct Wasm {
    misbehave: Vec<u8>,
    heartbeat: Vec<u8>,
    heartbeat_path: PathBuf,
}

/// Builds `heartbeat` and `misbehave` with the cargo running this benchmark, into this
/// benchmark's target dir, and reads them.
fn build_plugins() -> anyhow::Result<Wasm> {
    let workspace = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let target_dir = target_dir()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    print!("building the plugins into {} ... ", target_dir.display());
    std::io::stdout().flush()?;
    let started = Instant::now();
    let output = Command::new(&cargo)
        .args(["build", "--target", "wasm32-wasip2", "--profile", "plugin"])
        .args(["-p", "heartbeat", "-p", "misbehave"])
        .current_dir(workspace)
        .env("CARGO_TARGET_DIR", &target_dir)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cargo}"))?;
    if !output.status.success() {
        bail!(
            "building the plugins failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    println!("done in {:.1} s", started.elapsed().as_secs_f64());
    let dir = target_dir.join("wasm32-wasip2").join("plugin");
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
    };
    Ok(Wasm {
        misbehave: read("misbehave.wasm")?,
        heartbeat: read("heartbeat.wasm")?,
        heartbeat_path: dir.join("heartbeat.wasm"),
    })
}

// ---------------------------------------------------------------------------------------
// 1. Instantiate + start latency
// ---------------------------------------------------------------------------------------

async fn latency_section(
    runtime: &Runtime,
    wasm: &Wasm,
    state: &Arc<dyn StateBackend>,
    table: &mut Table,
) -> anyhow::Result<()> {
    println!("\n== instantiate + start latency (misbehave, resource \"returns\") ==");
    // The first load compiles and fills the cache; the second comes from it, as after
    // a restart.
    runtime.load(&wasm.misbehave)?;
    let plugin = Arc::new(runtime.load(&wasm.misbehave)?);
    ensure!(
        plugin.cache == CacheUse::Hit,
        "the second load missed the cache"
    );
    let state = state.clone();
    // Measured on a worker thread, where the supervisor runs plugins.
    let (instantiate, total) = tokio::spawn(async move { time_starts(&plugin, &state).await })
        .await
        .context("the latency task panicked")??;
    let (instantiate, total) = (Summary::of(instantiate), Summary::of(total));
    println!("instantiate         {}", instantiate.describe("µs", 1));
    println!("instantiate + start {}", total.describe("µs", 1));
    table.percentiles("instantiate", &instantiate, "µs", None);
    table.percentiles(
        "instantiate + start",
        &total,
        "µs",
        Some(Target::at_most(100.0, "≤ 100 µs")),
    );
    Ok(())
}

/// Instantiates and starts `plugin` repeatedly; returns the instantiate and the
/// instantiate+start times of the measured rounds, in µs.
async fn time_starts(
    plugin: &Plugin,
    state: &Arc<dyn StateBackend>,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let mut instantiate = Vec::with_capacity(LATENCY_ITERATIONS);
    let mut total = Vec::with_capacity(LATENCY_ITERATIONS);
    for round in 0..LATENCY_WARMUP + LATENCY_ITERATIONS {
        let ctx = context(
            "misbehave",
            "returns",
            round as u64 + 1,
            state,
            MEMORY_LIMIT,
        );
        let began = Instant::now();
        let mut instance = plugin.instantiate(ctx).await.map_err(failed)?;
        let instantiated = Instant::now();
        let returned = instance.start().await;
        let ended = Instant::now();
        ensure!(
            returned == Ok(Ok(())),
            "start did not return Ok: {returned:?}"
        );
        drop(instance);
        if round >= LATENCY_WARMUP {
            instantiate.push(micros(instantiated - began));
            total.push(micros(ended - began));
        }
    }
    Ok((instantiate, total))
}

fn failed(failure: Failure) -> anyhow::Error {
    anyhow::anyhow!("the plugin failed: {}", failure.describe())
}

// ---------------------------------------------------------------------------------------
// Outbound HTTP: the fence's added cost
// ---------------------------------------------------------------------------------------

async fn outbound_section(state: &Arc<dyn StateBackend>, table: &mut Table) -> anyhow::Result<()> {
    use http_body_util::{BodyExt, Empty};
    use tenure::catalog::Secrets;
    use tenure::catalog::capabilities::{AllowedHost, Capabilities};
    use tenure::runtime::Granted;

    println!("\n== outbound HTTP: direct vs through the fence (GET, fresh connection each) ==");
    let addr = serve_http()?;
    let base = format!("http://{addr}");
    let capabilities = Capabilities {
        allowed_outbound_hosts: vec![AllowedHost::parse(&base).map_err(anyhow::Error::msg)?],
        ..Capabilities::default()
    };
    let granted = Arc::new(Granted::new(&capabilities, &Secrets::default()));
    let ctx = Arc::new(
        Arc::into_inner(context("bench", "outbound", 1, state, MEMORY_LIMIT))
            .context("the context is shared")?
            .with_granted(granted),
    );
    let request = || {
        http::Request::builder()
            .uri(format!("{base}/"))
            .body(
                Empty::new()
                    .map_err(|never: std::convert::Infallible| match never {})
                    .boxed_unsync(),
            )
            .expect("a valid request")
    };
    // Sends one request either way and reads the whole response; its duration in µs.
    let once = |fenced: bool| {
        let ctx = ctx.clone();
        let request = request();
        async move {
            let began = Instant::now();
            let (response, connection) = if fenced {
                let sent = Box::into_pin(tenure::runtime::http::outgoing(ctx, request, None));
                let (response, connection) = sent.await.map_err(|e| anyhow::anyhow!("{e:?}"))?;
                (response, tokio::spawn(Box::into_pin(connection)))
            } else {
                let sent = wasmtime_wasi_http::default_send_request(request, None).await;
                let (response, connection) = sent.map_err(|e| anyhow::anyhow!("{e:?}"))?;
                (
                    response.map(BodyExt::boxed_unsync),
                    tokio::spawn(connection),
                )
            };
            let body = response.into_body().collect().await;
            let took = micros(began.elapsed());
            ensure!(body.is_ok(), "reading the response failed");
            connection.abort();
            anyhow::Ok(took)
        }
    };
    let (mut direct, mut fenced) = (Vec::new(), Vec::new());
    for round in 0..HTTP_WARMUP + HTTP_ROUNDS {
        // Alternate which goes first, so neither always follows the other.
        let (d, f) = if round % 2 == 0 {
            (once(false).await?, once(true).await?)
        } else {
            let f = once(true).await?;
            (once(false).await?, f)
        };
        if round >= HTTP_WARMUP {
            direct.push(d);
            fenced.push(f);
        }
    }
    let (direct, fenced) = (Summary::of(direct), Summary::of(fenced));
    println!("direct              {}", direct.describe("µs", 1));
    println!("through the fence   {}", fenced.describe("µs", 1));
    println!(
        "added (median, p99) {:.1} µs, {:.1} µs",
        fenced.median - direct.median,
        fenced.p99 - direct.p99
    );
    table.percentiles("HTTP request, direct", &direct, "µs", None);
    table.percentiles("HTTP request, fenced", &fenced, "µs", None);
    Ok(())
}

/// A minimal HTTP/1.1 server on 127.0.0.1 answering every request with `200 ok`, one
/// thread per connection; its address.
fn serve_http() -> anyhow::Result<std::net::SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut writer = match stream.try_clone() {
                    Ok(writer) => writer,
                    Err(_) => return,
                };
                let mut reader = BufReader::new(stream);
                loop {
                    // A request without a body: its head ends with an empty line.
                    let mut line = String::new();
                    loop {
                        line.clear();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if writer.write_all(answer).is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(addr)
}

// ---------------------------------------------------------------------------------------
// 2. Resident memory per idle plugin
// ---------------------------------------------------------------------------------------

async fn idle_section(
    runtime: &Runtime,
    wasm: &Wasm,
    state: &Arc<dyn StateBackend>,
    table: &mut Table,
) -> anyhow::Result<()> {
    println!("\n== resident memory per idle heartbeat (RSS growth / K) ==");
    let plugin = Arc::new(runtime.load(&wasm.heartbeat)?);
    // One unmeasured round pays the one-time costs (lazy initialisation, thread pools).
    idle_rss(&plugin, state, IDLE_WARMUP).await?;
    for k in IDLE_COUNTS {
        let mut per_instance = Vec::with_capacity(IDLE_REPEATS);
        for run in 1..=IDLE_REPEATS {
            let (before, after) = idle_rss(&plugin, state, k).await?;
            let kib = after.saturating_sub(before) as f64 / k as f64 / 1024.0;
            println!(
                "K = {k:>3}, run {run}: {kib:6.1} KiB per instance (RSS {:.1} → {:.1} MiB)",
                mib(before),
                mib(after)
            );
            per_instance.push(kib);
        }
        let summary = Summary::of(per_instance);
        table.range(
            &format!("RSS per idle heartbeat, K = {k}"),
            &summary,
            "KiB",
            0,
            format!("{IDLE_REPEATS} × {k}"),
            Some(Target::at_most(1024.0, "≤ 1 MiB")),
        );
    }
    Ok(())
}

/// Runs `k` heartbeats until all are parked in `start` and returns the RSS before they
/// were spawned and once they all run (bytes); then stops them.
async fn idle_rss(
    plugin: &Arc<Plugin>,
    state: &Arc<dyn StateBackend>,
    k: usize,
) -> anyhow::Result<(u64, u64)> {
    let parked = Arc::new(AtomicUsize::new(0));
    let mut fleet = Fleet(Vec::with_capacity(k));
    trim_heap();
    let before = rss_bytes()?;
    for i in 0..k {
        let ctx = context("heartbeat", "heartbeat", i as u64 + 1, state, MEMORY_LIMIT);
        let task = tokio::spawn(run_idle(plugin.clone(), ctx.clone(), parked.clone()));
        fleet.0.push((ctx, task));
    }
    wait_parked(&fleet, &parked, k).await?;
    let after = settled_rss().await?;
    fleet.stop().await?;
    Ok((before, after))
}

/// Instantiates the plugin and runs `start`, counting in `parked` the first time the
/// call waits (normally in the host's `sleep`).
async fn run_idle(
    plugin: Arc<Plugin>,
    ctx: Arc<InstanceContext>,
    parked: Arc<AtomicUsize>,
) -> StartResult {
    let mut instance = plugin.instantiate(ctx).await?;
    let mut call = std::pin::pin!(instance.start());
    let mut counted = false;
    std::future::poll_fn(|cx| {
        let poll = call.as_mut().poll(cx);
        if poll.is_pending() && !counted {
            counted = true;
            parked.fetch_add(1, Ordering::SeqCst);
        }
        poll
    })
    .await
}

/// How a call into a plugin ended, as `Instance::start` reports it.
type StartResult = Result<Result<(), String>, Failure>;

/// Running idle instances; asks them all to stop when dropped.
struct Fleet(Vec<(Arc<InstanceContext>, JoinHandle<StartResult>)>);

impl Fleet {
    /// Asks every instance to stop and checks each returned `Ok`.
    async fn stop(mut self) -> anyhow::Result<()> {
        self.request_stop();
        for (_, task) in std::mem::take(&mut self.0) {
            let returned = task.await.context("an idle task panicked")?;
            ensure!(
                returned == Ok(Ok(())),
                "heartbeat did not stop cleanly: {returned:?}"
            );
        }
        Ok(())
    }

    fn request_stop(&self) {
        // With a grace far beyond the benchmark: the plugins stop cooperatively.
        let interrupt_at = Instant::now() + Duration::from_secs(3600);
        for (ctx, _) in &self.0 {
            ctx.signals.request_stop(interrupt_at);
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.request_stop();
    }
}

/// Waits until `k` instances are parked; fails if one ends first or it takes too long.
async fn wait_parked(fleet: &Fleet, parked: &AtomicUsize, k: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    while parked.load(Ordering::SeqCst) < k {
        if fleet.0.iter().any(|(_, task)| task.is_finished()) {
            bail!("a heartbeat ended before the others were running");
        }
        ensure!(
            Instant::now() < deadline,
            "only {} of {k} heartbeats were running after {WAIT:?}",
            parked.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 3. Startup: compile cache, and the whole process
// ---------------------------------------------------------------------------------------

fn load_section(wasm: &Wasm, table: &mut Table) -> anyhow::Result<()> {
    println!("\n== Runtime::load(heartbeat): compile cache miss vs hit ==");
    let miss = Summary::of(load_misses(&wasm.heartbeat)?);
    let hit = Summary::of(load_hits(&wasm.heartbeat)?);
    println!("miss (compile)     {}", miss.describe("ms", 2));
    println!("hit (deserialize)  {}", hit.describe("ms", 2));
    let runs = LOAD_RUNS.to_string();
    table.range("load, cache miss", &miss, "ms", 2, runs.clone(), None);
    table.range("load, cache hit", &hit, "ms", 2, runs, None);
    Ok(())
}

/// Times loads into a fresh, empty cache dir each (ms).
fn load_misses(wasm: &[u8]) -> anyhow::Result<Vec<f64>> {
    let mut times = Vec::with_capacity(LOAD_RUNS);
    for _ in 0..LOAD_RUNS {
        let dir = TempDir::new()?;
        let runtime = Runtime::new(Some(dir.path()))?;
        let began = Instant::now();
        let plugin = runtime.load(wasm)?;
        times.push(millis(began.elapsed()));
        ensure!(plugin.cache == CacheUse::Miss, "an empty cache hit");
    }
    Ok(times)
}

/// Times loads from a cache dir already holding the compiled plugin (ms).
fn load_hits(wasm: &[u8]) -> anyhow::Result<Vec<f64>> {
    let dir = TempDir::new()?;
    let runtime = Runtime::new(Some(dir.path()))?;
    runtime.load(wasm)?;
    let mut times = Vec::with_capacity(LOAD_RUNS);
    for _ in 0..LOAD_RUNS {
        let began = Instant::now();
        let plugin = runtime.load(wasm)?;
        times.push(millis(began.elapsed()));
        ensure!(plugin.cache == CacheUse::Hit, "a filled cache missed");
    }
    Ok(times)
}

fn process_section(wasm: &Wasm, table: &mut Table) -> anyhow::Result<()> {
    println!("\n== tenure run: spawn → first plugin.started (heartbeat) ==");
    let dirs = NodeDirs::new(&wasm.heartbeat_path)?;
    let cold = time_node_start(&dirs)?;
    println!("cold (empty data dir):  {:7.1} ms", cold);
    let mut warm = Vec::with_capacity(WARM_RESTARTS);
    for run in 1..=WARM_RESTARTS {
        let ms = time_node_start(&dirs)?;
        println!("warm restart {run}:         {ms:7.1} ms");
        warm.push(ms);
    }
    let warm = Summary::of(warm);
    table.range(
        "process start → plugin.started, cold",
        &Summary::of(vec![cold]),
        "ms",
        1,
        "1".into(),
        None,
    );
    table.range(
        "process start → plugin.started, warm",
        &warm,
        "ms",
        1,
        WARM_RESTARTS.to_string(),
        None,
    );
    Ok(())
}

/// A node's folders: an (initially empty) data dir, and a plugins dir with heartbeat.
struct NodeDirs {
    root: TempDir,
}

impl NodeDirs {
    fn new(heartbeat: &Path) -> anyhow::Result<Self> {
        let root = TempDir::new()?;
        std::fs::create_dir(root.path().join("data"))?;
        std::fs::create_dir(root.path().join("plugins"))?;
        std::fs::copy(heartbeat, root.path().join("plugins/heartbeat.wasm"))
            .context("installing heartbeat.wasm")?;
        Ok(Self { root })
    }

    fn data(&self) -> PathBuf {
        self.root.path().join("data")
    }

    fn plugins(&self) -> PathBuf {
        self.root.path().join("plugins")
    }
}

/// Starts the node, times spawn → `plugin.started`, and stops it with SIGINT (ms).
/// Also checks that the compile cache was used as expected.
fn time_node_start(dirs: &NodeDirs) -> anyhow::Result<f64> {
    let cache_filled = std::fs::read_dir(dirs.data().join("cache"))
        .is_ok_and(|mut entries| entries.next().is_some());
    let expected_cache = if cache_filled { "hit" } else { "miss" };
    let mut node = NodeProcess::spawn(dirs)?;
    let mut cache = None;
    let started = loop {
        let (at, event) = node.next_event()?;
        match event["event"].as_str() {
            Some("plugin.loaded") => cache = event["cache"].as_str().map(str::to_string),
            Some("plugin.started") => break at,
            _ => {}
        }
    };
    let elapsed = millis(started - node.spawned);
    let status = node.interrupt_and_wait()?;
    ensure!(status.success(), "the node exited with {status}");
    ensure!(
        cache.as_deref() == Some(expected_cache),
        "expected a compile cache {expected_cache}, the node reported {cache:?}"
    );
    Ok(elapsed)
}

/// A running `tenure run --log-format json`; killed if dropped while still running.
struct NodeProcess {
    child: Child,
    spawned: Instant,
    /// Stdout lines with the time each was read.
    lines: mpsc::Receiver<(Instant, String)>,
    stderr: Option<thread::JoinHandle<String>>,
}

impl NodeProcess {
    fn spawn(dirs: &NodeDirs) -> anyhow::Result<Self> {
        let mut command = plugins::tenure_run(dirs.root.path(), &dirs.data(), &dirs.plugins());
        command.stderr(Stdio::piped());
        let spawned = Instant::now();
        let mut child = command.spawn().context("spawning tenure")?;
        let lines = plugins::timed_lines(child.stdout.take().context("no stdout pipe")?);
        let mut stderr = child.stderr.take().context("no stderr pipe")?;
        let stderr = thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Ok(Self {
            child,
            spawned,
            lines,
            stderr: Some(stderr),
        })
    }

    /// The next JSON event on stdout, with when it was read.
    fn next_event(&mut self) -> anyhow::Result<(Instant, serde_json::Value)> {
        let deadline = self.spawned + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, line)) => {
                    if let Ok(event) = serde_json::from_str(&line) {
                        return Ok((at, event));
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!("no plugin.started within {WAIT:?}")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait()?;
                    bail!(
                        "the node exited ({status}) before plugin.started:\n{}",
                        self.stderr_text()
                    )
                }
            }
        }
    }

    /// Sends SIGINT and waits for the node to exit.
    fn interrupt_and_wait(&mut self) -> anyhow::Result<ExitStatus> {
        let pid = libc::pid_t::try_from(self.child.id()).context("pid out of range")?;
        // SAFETY: kill only sends a signal, to our own child, which has not been reaped.
        if unsafe { libc::kill(pid, libc::SIGINT) } != 0 {
            bail!(
                "cannot signal the node: {}",
                std::io::Error::last_os_error()
            );
        }
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            ensure!(
                Instant::now() < deadline,
                "the node did not exit within {WAIT:?} of SIGINT"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// What the node wrote to stderr (it must have exited).
    fn stderr_text(&mut self) -> String {
        self.stderr
            .take()
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Statistics and the report
// ---------------------------------------------------------------------------------------

/// A target from the issue: the median should be at most `max`.
struct Target {
    max: f64,
    text: &'static str,
}

impl Target {
    fn at_most(max: f64, text: &'static str) -> Self {
        Self { max, text }
    }
}

/// One line of the final table.
struct Row {
    figure: String,
    median: String,
    spread: String,
    unit: &'static str,
    n: String,
    target: String,
    met: &'static str,
}

impl Row {
    /// A row with the median and the min–max range of `s`, to `decimals` places.
    fn new(
        figure: &str,
        s: &Summary,
        decimals: usize,
        unit: &'static str,
        n: String,
        target: Option<Target>,
    ) -> Self {
        let d = decimals;
        let met = match &target {
            Some(t) if s.median <= t.max => "yes",
            Some(_) => "NO",
            None => "",
        };
        Self {
            figure: figure.to_string(),
            median: format!("{:.d$}", s.median),
            spread: format!("{:.d$}–{:.d$}", s.min, s.max),
            unit,
            n,
            target: target.map_or_else(|| "—".to_string(), |t| t.text.to_string()),
            met,
        }
    }
}

#[derive(Default)]
struct Table(Vec<Row>);

impl Table {
    /// A row with the median, the p99 and the min–max range, to 1 decimal place.
    fn percentiles(&mut self, figure: &str, s: &Summary, unit: &'static str, t: Option<Target>) {
        let mut row = Row::new(figure, s, 1, unit, s.n.to_string(), t);
        row.spread = format!("p99 {:.1}, {}", s.p99, row.spread);
        self.0.push(row);
    }

    /// A row with the median and the min–max range.
    fn range(
        &mut self,
        figure: &str,
        s: &Summary,
        unit: &'static str,
        decimals: usize,
        n: String,
        t: Option<Target>,
    ) {
        self.0.push(Row::new(figure, s, decimals, unit, n, t));
    }

    fn print(&self) {
        let header = ["figure", "median", "spread", "unit", "N", "target", "met"];
        let cells: Vec<[&str; 7]> = self
            .0
            .iter()
            .map(|r| {
                let (fig, med, spr) = (&r.figure, &r.median, &r.spread);
                [fig, med, spr, r.unit, &r.n, &r.target, r.met]
            })
            .collect();
        let mut widths = header.map(|h| h.chars().count());
        for row in &cells {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        println!("\n== summary (median of each figure; targets from the issue) ==");
        print_row(&header, &widths);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        print_row(
            &rule.iter().map(String::as_str).collect::<Vec<_>>(),
            &widths,
        );
        for row in &cells {
            print_row(row, &widths);
        }
    }
}

/// One table line: the first column left-aligned, numbers right-aligned.
fn print_row(cells: &[&str], widths: &[usize]) {
    let mut line = String::new();
    for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
        let pad = " ".repeat(width - cell.chars().count());
        match i {
            0 | 5 | 6 => line.push_str(&format!("{cell}{pad}  ")),
            _ => line.push_str(&format!("{pad}{cell}  ")),
        }
    }
    println!("{}", line.trim_end());
}

//! Loading plugins in Rust, Python and JavaScript into the real node: what compiles cost,
//! and what stays in the node afterwards.
//!
//! Run with `cargo bench -p tenure --bench compile` from the workspace root. It builds
//! `heartbeat` (Rust, `wasm32-wasip2`, `plugin` profile) and the Python and JavaScript
//! counters (plugins/counter-{py,js}/build.sh; python3 with venv, node and npm), then, with
//! the real `tenure run` binary, for each language [`RUNS`] times:
//!
//! 1. **Cold load**: a fresh data dir and one plugin: spawn → `plugin.loaded` (a cache
//!    miss: the compile, in the node's compiler process), then the node's VmRSS once the
//!    plugin has started.
//! 2. **Warm load**: the same node restarted: the `load_us` of `plugin.loaded` (a cache
//!    hit), and the VmRSS with the one plugin running.
//! 3. **Ten plugins**: ten files of the same wasm (ten resources) on the warm cache: the
//!    VmRSS with all ten running; (rss10 - rss1) / 9 is the resident cost of one more
//!    running instance. The same wasm, not ten different plugins: the node shares one
//!    compiled component between files with the same digest, so this isolates what a
//!    running instance costs (ten different components would each add their code, about
//!    what one costs after its compile, on top).
//! 4. **In process** (this benchmark's own process, with the node's runtime: pooling
//!    allocator, compile cache): `Runtime::load` on a cache miss and a hit; then
//!    [`INSTANCE_ROUNDS`] times, instantiate → the plugin's `start` waiting for the first
//!    time (its own start-up work done: for the counters, a `state.load`, a
//!    `state.save`, a log line; the state backend holds nothing); then [`IDLE`] instances
//!    parked at once, the growth of VmRSS and of RssAnon (the process's own written
//!    pages; VmRSS also counts, once per instance, the pages of the component's memory
//!    image that an instance maps copy-on-write but never writes) divided by [`IDLE`].
//!
//! Then, once each: a folder with `heartbeat` and the cold Python and JavaScript
//! plugins (spawn → heartbeat's `plugin.started`, and → each `plugin.loaded`), and a
//! SIGTERM sent once the Python compile has begun (signal → exit).
//!
//! Then the incremental compilation cache (issue 29), [`RUNS`] times per language and per
//! setting (the default cache, and `[compile] incremental_cache_mib = 0`): a node on a
//! fresh data dir loads a first plugin of the language (`counter-py`, `counter-js`: a
//! cold compile), then a second, different one (`sdk-py`, `sdk-js`) is dropped into the
//! folder (its wasm and manifest renamed in): the drop → the second's `plugin.started`,
//! the CPU its compile took (the node's children's user + system time, from
//! /proc/PID/stat once the compiler process is reaped), the functions reused and
//! compiled, and the disk the incremental cache takes afterwards.
//!
//! `TENURE_BENCH` picks sections (comma-separated: `languages`, `mixed`, `sigterm`,
//! `incremental`; default all).
//!
//! It prints figures and asserts nothing about them; it fails only if something does not
//! work at all. The machine is small and shared: compare medians across runs.

#[allow(
    dead_code,
    reason = "the shared helpers include some this bench does not use"
)]
mod common;
#[allow(
    dead_code,
    reason = "the shared helpers include some this bench does not use"
)]
#[path = "common/plugins.rs"]
mod plugins;

use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use common::{Summary, micros, millis, print_machine};
use plugins::{
    NoState, build_rust, build_script, context, mib, request_stop, rss_bytes, target_dir,
};
use serde_json::Value;
use tempfile::TempDir;
use tenure::runtime::{CacheUse, Runtime, StateBackend};

/// Runs of each measurement per language.
const RUNS: usize = 3;
/// Plugin files in the "ten plugins" measurement.
const MANY: usize = 10;
/// The bound on any wait (a cold compile on a busy machine included).
const WAIT: Duration = Duration::from_secs(240);
/// Instantiate+start rounds measured per language, after [`INSTANCE_WARMUP`].
const INSTANCE_ROUNDS: usize = 100;
const INSTANCE_WARMUP: usize = 5;
/// Idle instances running at once for the resident-memory figure, and how often.
const IDLE: usize = 10;
const IDLE_REPEATS: usize = 3;
/// Every in-process instance's linear-memory cap (the Python component starts at
/// about 12 MiB).
const MEMORY_LIMIT: usize = 256 << 20;

fn main() -> anyhow::Result<()> {
    print_machine("before");
    let target = target_dir()?;
    let languages = [
        (
            "rust (heartbeat)",
            build_rust(&target, &["heartbeat"])?.remove(0),
        ),
        ("python (counter-py)", build_script(&target, "counter-py")?),
        (
            "javascript (counter-js)",
            build_script(&target, "counter-js")?,
        ),
    ];
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let picked = std::env::var("TENURE_BENCH").unwrap_or_default();
    let run = |section: &str| picked.is_empty() || picked.split(',').any(|p| p == section);
    if run("languages") {
        for (language, wasm) in &languages {
            language_section(language, wasm)?;
            instance_section(&tokio, language, wasm)?;
        }
    }
    if run("mixed") {
        mixed_section(&languages[0].1, &languages[1].1, &languages[2].1)?;
    }
    if run("sigterm") {
        sigterm_section(&languages[1].1)?;
    }
    if run("incremental") {
        incremental_section("python", &languages[1].1, &build_script(&target, "sdk-py")?)?;
        incremental_section(
            "javascript",
            &languages[2].1,
            &build_script(&target, "sdk-js")?,
        )?;
    }
    print_machine("after");
    Ok(())
}

/// The figures of one drop of a second plugin.
struct Drop2 {
    /// The first plugin's spawn → `plugin.started` (a cold compile), ms.
    first: f64,
    /// The second plugin's drop → `plugin.started`, ms.
    second: f64,
    /// CPU seconds of the second plugin's compile.
    cpu: f64,
    reused: f64,
    compiled: f64,
    /// MiB in `data/incremental` after both compiles.
    disk: f64,
}

fn incremental_section(language: &str, first: &Path, second: &Path) -> anyhow::Result<()> {
    let name = |p: &Path| {
        p.file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    };
    println!(
        "\n== {language}: {} dropped after {} (incremental compilation cache) ==",
        name(second),
        name(first)
    );
    for (setting, cap_mib) in [("on (256 MiB)", None), ("off (0 MiB)", Some(0))] {
        let mut runs = Vec::new();
        for _ in 0..RUNS {
            runs.push(drop_second(first, second, cap_mib)?);
        }
        let column = |f: fn(&Drop2) -> f64| runs.iter().map(f).collect::<Vec<_>>();
        println!("-- incremental cache {setting} --");
        let row = |what: &str, values: Vec<f64>, unit: &str, d: usize| {
            println!("{what:<44} {}", Summary::of(values).describe(unit, d));
        };
        row(
            "first plugin: spawn → plugin.started",
            column(|r| r.first),
            "ms",
            0,
        );
        row(
            "second plugin: drop → plugin.started",
            column(|r| r.second),
            "ms",
            0,
        );
        row(
            "second plugin: compile CPU (user+sys)",
            column(|r| r.cpu),
            "s",
            2,
        );
        row(
            "second plugin: functions reused",
            column(|r| r.reused),
            "",
            0,
        );
        row(
            "second plugin: functions compiled",
            column(|r| r.compiled),
            "",
            0,
        );
        row("data/incremental after both", column(|r| r.disk), "MiB", 1);
    }
    Ok(())
}

/// One node on a fresh data dir: `first` loaded at start, then `second` dropped in.
fn drop_second(first: &Path, second: &Path, cap_mib: Option<u64>) -> anyhow::Result<Drop2> {
    let dirs = Dirs::new()?;
    dirs.install("first", first)?;
    let config = dirs.root.path().join("tenure.toml");
    std::fs::write(
        &config,
        match cap_mib {
            Some(mib) => format!("[compile]\nincremental_cache_mib = {mib}\n"),
            None => String::new(),
        },
    )?;
    let mut node = NodeProcess::spawn_with(&dirs, Some(&config))?;
    let (at, _) = node.wait(|e| is(e, "plugin.started") && e["resource"] == "first")?;
    let first_ms = millis(at - node.spawned);
    let cpu_before = node.children_cpu()?;
    let dropped = dirs.drop_in("second", second)?;
    let (_, loaded) = node.wait(|e| is(e, "plugin.loaded") && e["plugin"] == "second")?;
    ensure!(
        loaded["cache"] == "miss",
        "the second plugin did not compile: {loaded}"
    );
    let (at, _) = node.wait(|e| is(e, "plugin.started") && e["resource"] == "second")?;
    let cpu = node.children_cpu()? - cpu_before;
    let field = |k: &str| loaded[k].as_f64().unwrap_or_default();
    let disk = dir_bytes(&dirs.root.path().join("data/incremental")) as f64 / (1 << 20) as f64;
    node.stop()?;
    Ok(Drop2 {
        first: first_ms,
        second: millis(at - dropped),
        cpu,
        reused: field("reused_functions"),
        compiled: field("compiled_functions"),
        disk,
    })
}

/// The bytes of the files in `dir` (0 if it does not exist).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn language_section(language: &str, wasm: &Path) -> anyhow::Result<()> {
    let size = std::fs::metadata(wasm)?.len();
    println!(
        "\n== {language}: {:.2} MiB ({size} bytes) component ==",
        size as f64 / (1 << 20) as f64
    );
    let (mut cold, mut cold_rss, mut hit, mut warm_rss, mut many_rss, mut per) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut warm_anon, mut many_anon, mut per_anon) = (vec![], vec![], vec![]);
    for _ in 0..RUNS {
        let dirs = Dirs::new()?;
        dirs.install("p0", wasm)?;
        let mut node = NodeProcess::spawn(&dirs)?;
        let (at, loaded) = node.wait(|e| is(e, "plugin.loaded"))?;
        ensure!(loaded["cache"] == "miss", "a cold load hit: {loaded}");
        cold.push(millis(at - node.spawned));
        node.wait(|e| is(e, "plugin.started"))?;
        cold_rss.push(node.rss_mib()?);
        node.stop()?;

        let mut node = NodeProcess::spawn(&dirs)?;
        let (_, loaded) = node.wait(|e| is(e, "plugin.loaded"))?;
        ensure!(loaded["cache"] == "hit", "a warm load missed: {loaded}");
        hit.push(loaded["load_us"].as_f64().unwrap_or_default() / 1000.0);
        node.wait(|e| is(e, "plugin.started"))?;
        let one = node.rss_mib()?;
        let one_anon = node.status_mib("RssAnon")?;
        warm_rss.push(one);
        warm_anon.push(one_anon);
        node.stop()?;

        for i in 1..MANY {
            dirs.install(&format!("p{i}"), wasm)?;
        }
        let mut node = NodeProcess::spawn(&dirs)?;
        let mut started = 0;
        while started < MANY {
            node.wait(|e| is(e, "plugin.started"))?;
            started += 1;
        }
        let ten = node.rss_mib()?;
        let ten_anon = node.status_mib("RssAnon")?;
        many_rss.push(ten);
        many_anon.push(ten_anon);
        per.push((ten - one) / (MANY - 1) as f64);
        per_anon.push((ten_anon - one_anon) / (MANY - 1) as f64);
        node.stop()?;
    }
    let row = |what: &str, values: Vec<f64>, unit: &str| {
        println!("{what:<44} {}", Summary::of(values).describe(unit, 1));
    };
    row("spawn → plugin.loaded, cold (compile)", cold, "ms");
    row(
        "node VmRSS, 1 plugin running, after compile",
        cold_rss,
        "MiB",
    );
    row("plugin.loaded load_us, cache hit", hit, "ms");
    row("node VmRSS, 1 plugin running, warm start", warm_rss, "MiB");
    row(
        &format!("node VmRSS, {MANY} plugins running, warm"),
        many_rss,
        "MiB",
    );
    row("VmRSS per further running instance", per, "MiB");
    row("node RssAnon, 1 plugin running, warm", warm_anon, "MiB");
    row(
        &format!("node RssAnon, {MANY} plugins running, warm"),
        many_anon,
        "MiB",
    );
    row("RssAnon per further running instance", per_anon, "MiB");
    Ok(())
}

/// In this process, with the node's runtime (pooling allocator, compile cache): the
/// in-process compile and cache hit, then instantiate → `start` waiting for the first
/// time ([`INSTANCE_ROUNDS`] rounds, each a fresh instance asked to stop once parked),
/// then [`IDLE`] instances parked at once: RSS growth / [`IDLE`].
fn instance_section(
    tokio: &tokio::runtime::Runtime,
    language: &str,
    wasm: &Path,
) -> anyhow::Result<()> {
    println!("-- {language}, in process --");
    let bytes = std::fs::read(wasm)?;
    let scratch = TempDir::new()?;
    let runtime = Runtime::new(Some(&scratch.path().join("cache")))?;
    let began = Instant::now();
    let plugin = runtime.load(&bytes)?;
    let miss = millis(began.elapsed());
    ensure!(plugin.cache == CacheUse::Miss, "an empty cache hit");
    drop(plugin);
    let began = Instant::now();
    let plugin = Arc::new(runtime.load(&bytes)?);
    let hit = millis(began.elapsed());
    ensure!(plugin.cache == CacheUse::Hit, "a filled cache missed");
    println!(
        "{:<44} {miss:.0} ms (N = 1)",
        "Runtime::load, cache miss (compile here)"
    );
    println!("{:<44} {hit:.1} ms (N = 1)", "Runtime::load, cache hit");
    println!(
        "{:<44} {} memories, {} tables, initial memory {:.1} MiB",
        "footprint",
        plugin.footprint.memories,
        plugin.footprint.tables,
        mib(plugin.footprint.initial_memory)
    );
    let state: Arc<dyn StateBackend> = Arc::new(NoState);
    let (instantiate, started) = tokio.block_on(time_parks(&plugin, &state))?;
    println!(
        "{:<44} {}",
        "instantiate",
        Summary::of(instantiate).describe("ms", 2)
    );
    println!(
        "{:<44} {}",
        "instantiate + start (until it first waits)",
        Summary::of(started).describe("ms", 2)
    );
    let (mut rss, mut anon) = (Vec::new(), Vec::new());
    for _ in 0..IDLE_REPEATS {
        let (r, a) = tokio.block_on(idle_cost(&plugin, &state))?;
        rss.push(r);
        anon.push(a);
    }
    println!(
        "{:<44} {}",
        format!("VmRSS per idle instance ({IDLE} at once)"),
        Summary::of(rss).describe("KiB", 0)
    );
    println!(
        "{:<44} {}",
        format!("RssAnon per idle instance ({IDLE} at once)"),
        Summary::of(anon).describe("KiB", 0)
    );
    Ok(())
}

/// Instantiates and starts `plugin` [`INSTANCE_WARMUP`] + [`INSTANCE_ROUNDS`] times, one
/// at a time, stopping each once it waits; the instantiate and the instantiate+start
/// times of the measured rounds (ms).
async fn time_parks(
    plugin: &Arc<tenure::runtime::Plugin>,
    state: &Arc<dyn StateBackend>,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let (mut instantiate, mut started) = (Vec::new(), Vec::new());
    for round in 0..INSTANCE_WARMUP + INSTANCE_ROUNDS {
        let ctx = context("bench", "bench", round as u64 + 1, state, MEMORY_LIMIT);
        let (tx, rx) = tokio::sync::oneshot::channel();
        // On a worker thread, where the node runs plugins.
        let task = tokio::spawn(plugins::run_until_stopped(
            plugin.clone(),
            ctx.clone(),
            move |i, s| {
                let _ = tx.send((i, s));
            },
        ));
        let parked = tokio::time::timeout(WAIT, rx).await;
        request_stop(&ctx);
        let returned = task.await.context("the instance task panicked")?;
        plugins::ensure_stopped_cleanly(&returned)?;
        let (i, s) = parked
            .context("the plugin never waited")?
            .context("the plugin ended before it waited")?;
        if round >= INSTANCE_WARMUP {
            instantiate.push(micros(i) / 1000.0);
            started.push(micros(s) / 1000.0);
        }
    }
    Ok((instantiate, started))
}

/// Runs [`IDLE`] instances until all wait in `start`; the growth of this process's
/// VmRSS and RssAnon per instance (KiB). Then stops them.
async fn idle_cost(
    plugin: &Arc<tenure::runtime::Plugin>,
    state: &Arc<dyn StateBackend>,
) -> anyhow::Result<(f64, f64)> {
    plugins::trim_heap();
    let before = rss_bytes()?;
    let anon_before = plugins::anon_bytes()?;
    let mut running = Vec::new();
    let mut parked = Vec::new();
    for i in 0..IDLE {
        let ctx = context("bench", "bench", i as u64 + 1, state, MEMORY_LIMIT);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(plugins::run_until_stopped(
            plugin.clone(),
            ctx.clone(),
            move |_, _| {
                let _ = tx.send(());
            },
        ));
        running.push((ctx, task));
        parked.push(rx);
    }
    for rx in parked {
        tokio::time::timeout(WAIT, rx)
            .await
            .context("an idle instance never waited")?
            .context("an idle instance ended before it waited")?;
    }
    let after = plugins::settled_rss().await?;
    let anon_after = plugins::anon_bytes()?;
    for (ctx, _) in &running {
        request_stop(ctx);
    }
    for (_, task) in running {
        let returned = task.await.context("an idle task panicked")?;
        plugins::ensure_stopped_cleanly(&returned)?;
    }
    let per = |b: u64, a: u64| a.saturating_sub(b) as f64 / 1024.0 / IDLE as f64;
    Ok((per(before, after), per(anon_before, anon_after)))
}

fn mixed_section(heartbeat: &Path, python: &Path, javascript: &Path) -> anyhow::Result<()> {
    println!("\n== heartbeat beside cold Python and JavaScript plugins ==");
    let (mut first, mut py, mut js) = (vec![], vec![], vec![]);
    for _ in 0..RUNS {
        let dirs = Dirs::new()?;
        dirs.install("heartbeat", heartbeat)?;
        dirs.install("counter-py", python)?;
        dirs.install("counter-js", javascript)?;
        let mut node = NodeProcess::spawn(&dirs)?;
        let (mut h, mut p, mut j) = (None, None, None);
        while h.is_none() || p.is_none() || j.is_none() {
            let (at, e) = node.wait(|e| {
                is(e, "plugin.loaded") || is(e, "plugin.started") && e["resource"] == "heartbeat"
            })?;
            let ms = Some(millis(at - node.spawned));
            match (e["event"].as_str(), e["plugin"].as_str()) {
                (Some("plugin.started"), _) => h = h.or(ms),
                (Some("plugin.loaded"), Some("counter-py")) => p = ms,
                (Some("plugin.loaded"), Some("counter-js")) => j = ms,
                _ => {}
            }
        }
        first.extend(h);
        py.extend(p);
        js.extend(j);
        node.stop()?;
    }
    println!(
        "spawn → heartbeat plugin.started    {}",
        Summary::of(first).describe("ms", 0)
    );
    println!(
        "spawn → counter-py plugin.loaded    {}",
        Summary::of(py).describe("ms", 0)
    );
    println!(
        "spawn → counter-js plugin.loaded    {}",
        Summary::of(js).describe("ms", 0)
    );
    Ok(())
}

fn sigterm_section(python: &Path) -> anyhow::Result<()> {
    println!("\n== SIGTERM during a cold Python compile ==");
    let mut exits = vec![];
    for _ in 0..RUNS {
        let dirs = Dirs::new()?;
        dirs.install("counter-py", python)?;
        let mut node = NodeProcess::spawn(&dirs)?;
        node.wait(|e| is(e, "plugin.compiling"))?;
        let signalled = Instant::now();
        node.signal(libc::SIGTERM)?;
        node.wait_exit()?;
        exits.push(millis(signalled.elapsed()));
        let left = std::fs::read_dir(dirs.root.path().join("data/cache"))?.count();
        ensure!(left == 0, "{left} files left in the cache dir");
    }
    println!(
        "SIGTERM → exit                      {}",
        Summary::of(exits).describe("ms", 0)
    );
    Ok(())
}

fn is(event: &Value, name: &str) -> bool {
    event["event"] == name
}

/// A node's data and plugins dirs.
struct Dirs {
    root: TempDir,
}

impl Dirs {
    fn new() -> anyhow::Result<Self> {
        let root = TempDir::new()?;
        std::fs::create_dir(root.path().join("data"))?;
        std::fs::create_dir(root.path().join("plugins"))?;
        Ok(Self { root })
    }

    /// Installs `wasm` as plugin `name` serving resource `name`.
    fn install(&self, name: &str, wasm: &Path) -> anyhow::Result<()> {
        let plugins = self.root.path().join("plugins");
        std::fs::write(
            plugins.join(format!("{name}.toml")),
            format!("resource = \"{name}\"\ntickets = 1\nversion = \"1.0.0\"\n"),
        )?;
        std::fs::copy(wasm, plugins.join(format!("{name}.wasm")))?;
        Ok(())
    }

    /// Drops plugin `name` into the running node's folder: its wasm and manifest written
    /// beside it and renamed in, the manifest last; when the last rename was done.
    fn drop_in(&self, name: &str, wasm: &Path) -> anyhow::Result<Instant> {
        let staged = self.root.path().join("staged");
        std::fs::create_dir_all(&staged)?;
        let plugins = self.root.path().join("plugins");
        std::fs::copy(wasm, staged.join(format!("{name}.wasm")))?;
        std::fs::write(
            staged.join(format!("{name}.toml")),
            format!("resource = \"{name}\"\ntickets = 1\nversion = \"1.0.0\"\n"),
        )?;
        for file in [format!("{name}.wasm"), format!("{name}.toml")] {
            std::fs::rename(staged.join(&file), plugins.join(&file))?;
        }
        Ok(Instant::now())
    }
}

/// A running `tenure run --log-format json`; killed if dropped while running.
struct NodeProcess {
    child: Child,
    spawned: Instant,
    lines: mpsc::Receiver<(Instant, String)>,
}

impl NodeProcess {
    fn spawn(dirs: &Dirs) -> anyhow::Result<Self> {
        Self::spawn_with(dirs, None)
    }

    /// [`NodeProcess::spawn`] with `--config FILE`.
    fn spawn_with(dirs: &Dirs, config: Option<&Path>) -> anyhow::Result<Self> {
        let root = dirs.root.path();
        let mut command = plugins::tenure_run(root, &root.join("data"), &root.join("plugins"));
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        command
            .env("TENURE_LISTEN", "127.0.0.1:0")
            .stderr(Stdio::null());
        let spawned = Instant::now();
        let mut child = command.spawn().context("spawning tenure")?;
        let lines = plugins::timed_lines(child.stdout.take().context("no stdout pipe")?);
        Ok(Self {
            child,
            spawned,
            lines,
        })
    }

    /// The next event matching `f`, with when it was read.
    fn wait(&mut self, f: impl Fn(&Value) -> bool) -> anyhow::Result<(Instant, Value)> {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, line) = self
                .lines
                .recv_timeout(left)
                .context("the awaited event did not come")?;
            if let Ok(event) = serde_json::from_str::<Value>(&line) {
                if is(&event, "catalog.rejected") {
                    bail!("a plugin was rejected: {event}");
                }
                if f(&event) {
                    return Ok((at, event));
                }
            }
        }
    }

    /// CPU seconds (user + system) of the node's children it has reaped: its compiler
    /// processes.
    fn children_cpu(&self) -> anyhow::Result<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))?;
        // Fields after the command (which may hold spaces), from the state (field 3) on:
        // cutime and cstime are fields 16 and 17.
        let after = stat.rsplit_once(')').context("no ) in stat")?.1;
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks: f64 = fields[13].parse::<f64>()? + fields[14].parse::<f64>()?;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        Ok(ticks / hz)
    }

    fn rss_mib(&self) -> anyhow::Result<f64> {
        self.status_mib("VmRSS")
    }

    /// A memory line of the node's /proc/PID/status (`VmRSS`, `RssAnon`...), in MiB.
    fn status_mib(&self, field: &str) -> anyhow::Result<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("no {field} line"))?;
        Ok(kib / 1024.0)
    }

    fn signal(&self, signal: libc::c_int) -> anyhow::Result<()> {
        let pid = libc::pid_t::try_from(self.child.id())?;
        // SAFETY: kill only sends a signal, to our own child, which has not been reaped.
        if unsafe { libc::kill(pid, signal) } != 0 {
            bail!("kill: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn wait_exit(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + WAIT;
        while self.child.try_wait()?.is_none() {
            ensure!(Instant::now() < deadline, "the node did not exit");
            thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    fn stop(&mut self) -> anyhow::Result<()> {
        self.signal(libc::SIGINT)?;
        self.wait_exit()
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

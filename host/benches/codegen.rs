//! What Cranelift's optimization level and the incremental cache do to compile times,
//! in process, on the example plugins (issue 29).
//!
//! Run with `cargo bench -p tenure --bench codegen`. It builds `heartbeat` (Rust) and the
//! Python and JavaScript counters and SDK examples (their build.sh scripts), then, [`RUNS`]
//! times, for `OptLevel::Speed` (what the node uses) and `OptLevel::None`:
//!
//! 1. **Cold**: each of heartbeat, counter-py and counter-js compiled by a fresh engine
//!    with no cache: wall time, this process's CPU time (user + system, from
//!    `getrusage`; the compile runs on every core), and the serialized code's size.
//! 2. **Second plugin of a language**: one engine with an incremental cache in memory
//!    (not the node's packs: this isolates the compiler from reading and writing them)
//!    compiles counter-py, sdk-py, counter-py again (the same bytes), then counter-js,
//!    sdk-js, counter-js again: the same figures for each, the functions taken from the
//!    cache and compiled, and the cache's size.
//!
//! 3. **Strategies** (issue 29, item 3): for each way the runtime can make code
//!    ([`Codegen`]: Cranelift at `Speed`, what the node uses; Cranelift at `None`; and
//!    Winch in a build with `--features winch`), a runtime of the node's (pooling
//!    allocator, no compile cache) loads heartbeat, the Python and JavaScript counters,
//!    and the same counters with one line that does a loop of work before the first
//!    count (`work-py`: a generator over 300,000 integers; `work-js`: a `for` loop of
//!    1,000,000): the load's wall and CPU time (the compile, and checking the component
//!    against the world), then [`ROUNDS`] times instantiate → the end of the plugin's
//!    start-up: for the counters their first `state.save` (after a `state.load` and the
//!    loop of work, if any), for heartbeat its first wait. The work's cost is the
//!    difference between `work-*` and the counter.
//!
//! `TENURE_BENCH` picks sections (comma-separated: `levels` for 1 and 2, `strategies`;
//! default both). It prints figures and asserts nothing about them.

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

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::{Summary, millis, print_machine};
use plugins::{
    NoState, build_rust, build_script, context, ensure_stopped_cleanly, request_stop,
    run_until_stopped, target_dir,
};
use std::path::PathBuf;
use tenure::future::BoxFuture;
use tenure::ownership::Grant;
use tenure::runtime::{Codegen, Runtime, StateBackend, StateError};
use wasmtime::component::Component;
use wasmtime::{CacheStore, Config, Engine, OptLevel};

/// Runs of each measurement.
const RUNS: usize = 2;

fn main() -> anyhow::Result<()> {
    print_machine("before");
    let target = target_dir()?;
    let heartbeat = build_rust(&target, &["heartbeat"])?.remove(0);
    let [counter_py, sdk_py, counter_js, sdk_js] =
        ["counter-py", "sdk-py", "counter-js", "sdk-js"].map(|name| build_script(&target, name));
    let (counter_py, sdk_py, counter_js, sdk_js) = (counter_py?, sdk_py?, counter_js?, sdk_js?);
    let sections = std::env::var("TENURE_BENCH").unwrap_or_default();
    let wanted = |name: &str| sections.is_empty() || sections.split(',').any(|s| s == name);
    if wanted("strategies") {
        let work_py = edited(&target, "counter-py", "app.py", PY_FROM, PY_TO)?;
        let work_js = edited(&target, "counter-js", "app.js", JS_FROM, JS_TO)?;
        let plugins = [
            ("heartbeat", &heartbeat),
            ("counter-py", &counter_py),
            ("work-py", &work_py),
            ("counter-js", &counter_js),
            ("work-js", &work_js),
        ];
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        for run in 1..=RUNS {
            for codegen in CODEGENS {
                println!("\n== run {run}, {codegen:?}: load (compile) and instantiate + start ==");
                for (name, wasm) in plugins {
                    strategy(&tokio, codegen, name, wasm)?;
                }
            }
            print_machine("now");
        }
    }
    if !wanted("levels") {
        return Ok(());
    }
    for run in 1..=RUNS {
        for (level, opt) in [("Speed", OptLevel::Speed), ("None", OptLevel::None)] {
            println!("\n== run {run}, OptLevel::{level}, cold, no cache ==");
            for wasm in [&heartbeat, &counter_py, &counter_js] {
                let engine =
                    Engine::new(&config(opt, None)).map_err(|e| anyhow::anyhow!("{e:#}"))?;
                compile(&engine, wasm, None)?;
            }
            println!("== run {run}, OptLevel::{level}, one incremental cache in memory ==");
            let store = Arc::new(Memory::default());
            let engine = Engine::new(&config(opt, Some(store.clone())))
                .map_err(|e| anyhow::anyhow!("{e:#}"))?;
            // Each counter once more at the end: the byte-identical wasm again.
            for wasm in [
                &counter_py,
                &sdk_py,
                &counter_py,
                &counter_js,
                &sdk_js,
                &counter_js,
            ] {
                compile(&engine, wasm, Some(&store))?;
            }
        }
        print_machine("now");
    }
    Ok(())
}

/// The ways of making code compared in the strategies section.
#[cfg(feature = "winch")]
const CODEGENS: [Codegen; 3] = [Codegen::Speed, Codegen::Unoptimized, Codegen::Winch];
#[cfg(not(feature = "winch"))]
const CODEGENS: [Codegen; 2] = [Codegen::Speed, Codegen::Unoptimized];

/// Instantiate + start rounds per plugin and strategy.
const ROUNDS: usize = 10;

/// The line of counter-py that `work-py` changes, and what it becomes: a loop of work
/// before the first count (its result is 0, so the plugin counts as before).
const PY_FROM: &str = "n = load_count()";
const PY_TO: &str = "n = load_count() + 0 * sum(i * i % 7 for i in range(300_000))";
/// The same for counter-js.
const JS_FROM: &str = "let n = loadCount();";
const JS_TO: &str = "let n = loadCount(); { let w = 0; for (let i = 0; i < 1000000; i++) { w = (w + i * i) % 7; } if (w < 0) { n = 0n; } }";

/// Builds `plugins/NAME` with one line of its app replaced (`from` → `to`) from a copy
/// of its folder, with the plugin's own build script (which keeps the result under the
/// digest of its inputs: a second run is quick).
fn edited(target: &Path, name: &str, app: &str, from: &str, to: &str) -> anyhow::Result<PathBuf> {
    let plugin = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins")).join(name);
    let dir = target.join("polyglot").join(format!("{name}-work"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    for entry in std::fs::read_dir(&plugin)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), dir.join(entry.file_name()))?;
        }
    }
    let source = std::fs::read_to_string(dir.join(app))?;
    anyhow::ensure!(source.contains(from), "{name}/{app} has no {from:?}");
    std::fs::write(dir.join(app), source.replacen(from, to, 1))?;
    let out = dir.with_extension("wasm");
    let status = std::process::Command::new("bash")
        .arg(plugin.join("build.sh"))
        .arg(&out)
        .arg(&dir)
        .stdin(std::process::Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "building {name} with {to:?} failed");
    Ok(out)
}

/// Loads `wasm` into a fresh runtime making code with `codegen` (a compile in this
/// process), then instantiates and starts it [`ROUNDS`] times; prints the figures.
fn strategy(
    tokio: &tokio::runtime::Runtime,
    codegen: Codegen,
    name: &str,
    wasm: &Path,
) -> anyhow::Result<()> {
    let bytes = std::fs::read(wasm)?;
    let runtime = Runtime::with_codegen(None, codegen)?;
    let cpu = cpu_seconds();
    let began = Instant::now();
    let plugin = Arc::new(runtime.load(&bytes)?);
    let wall = began.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    let mut started = Vec::new();
    for round in 0..ROUNDS {
        // The counters save their first count once their start-up (and the loop of
        // work) is done: that save is the moment measured. Not the call's first
        // `Pending`: the epoch interrupts a long loop and yields well before it ends.
        // heartbeat saves nothing; its first wait is its start-up's end.
        let (saved_tx, saved_rx) = tokio::sync::oneshot::channel();
        let saves = name != "heartbeat";
        let state: Arc<dyn StateBackend> = if saves {
            Arc::new(FirstSave(std::sync::Mutex::new(Some(saved_tx))))
        } else {
            Arc::new(NoState)
        };
        let ctx = context("bench", "bench", round as u64 + 1, &state, 1 << 30);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let began = Instant::now();
        let (parked, saved, returned) = tokio.block_on(async {
            let task = tokio::spawn(run_until_stopped(
                plugin.clone(),
                ctx.clone(),
                move |_, s| {
                    let _ = tx.send(s);
                },
            ));
            let limit = std::time::Duration::from_secs(120);
            let parked = tokio::time::timeout(limit, rx).await;
            let saved = if saves {
                Some(tokio::time::timeout(limit, saved_rx).await)
            } else {
                None
            };
            request_stop(&ctx);
            let returned = task.await?;
            anyhow::Ok((parked, saved, returned))
        })?;
        ensure_stopped_cleanly(&returned)?;
        let elapsed = match saved {
            Some(saved) => saved??.duration_since(began),
            None => parked??,
        };
        started.push(millis(elapsed));
    }
    println!(
        "{name:<12} load wall {wall:6.2} s  cpu {cpu:6.2} s   instantiate + start-up {}",
        Summary::of(started).describe("ms", 2)
    );
    Ok(())
}

/// A state backend that holds nothing and tells when the first save comes.
struct FirstSave(std::sync::Mutex<Option<tokio::sync::oneshot::Sender<Instant>>>);

impl StateBackend for FirstSave {
    fn load(&self, _: &Grant) -> BoxFuture<Result<Option<Vec<u8>>, StateError>> {
        Box::pin(async { Ok(None) })
    }
    fn save(&self, _: &Grant, _: Vec<u8>) -> BoxFuture<Result<(), StateError>> {
        let now = Instant::now();
        if let Some(tx) = self.0.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = tx.send(now);
        }
        Box::pin(async { Ok(()) })
    }
}

/// The node's compiler settings (`runtime::engine_config` without pooling) at `opt`.
fn config(opt: OptLevel, store: Option<Arc<Memory>>) -> Config {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .cranelift_opt_level(opt);
    if let Some(store) = store {
        config
            .enable_incremental_compilation(store)
            .expect("the cranelift feature is on");
    }
    config
}

fn compile(engine: &Engine, wasm: &Path, store: Option<&Memory>) -> anyhow::Result<()> {
    let bytes = std::fs::read(wasm)?;
    if let Some(store) = store {
        store.hits.store(0, Ordering::Relaxed);
        store.misses.store(0, Ordering::Relaxed);
    }
    let cpu = cpu_seconds();
    let began = Instant::now();
    let component = Component::new(engine, &bytes).map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let wall = began.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    let code = component
        .serialize()
        .map_err(|e| anyhow::anyhow!("{e:#}"))?
        .len();
    let name = wasm.file_name().unwrap_or_default().to_string_lossy();
    print!(
        "{name:<16} wall {wall:6.2} s  cpu {cpu:6.2} s  code {:5.1} MiB",
        mib(code)
    );
    if let Some(store) = store {
        let map = store.map.lock().unwrap_or_else(|e| e.into_inner());
        print!(
            "  reused {:5}  compiled {:5}  cache {:5.1} MiB",
            store.hits.load(Ordering::Relaxed),
            store.misses.load(Ordering::Relaxed),
            mib(map.values().map(Vec::len).sum())
        );
    }
    println!();
    Ok(())
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// This process's CPU time so far (user + system), in seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes the struct we pass and nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// An incremental cache in memory.
#[derive(Debug, Default)]
struct Memory {
    map: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
    hits: AtomicUsize,
    misses: AtomicUsize,
}

impl CacheStore for Memory {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let found = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned();
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found.map(Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_vec(), value);
        true
    }
}

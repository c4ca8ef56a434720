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
//! Instantiation and running code compiled at each level are not measured here.
//! It prints figures and asserts nothing about them.

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

use common::print_machine;
use plugins::{build_rust, build_script, target_dir};
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

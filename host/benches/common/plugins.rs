//! What the runtime and compile benchmarks share about running plugins in process:
//! building the example plugins, an instance context with a lease that holds for the
//! whole run and a state backend that holds nothing, timing an instance from
//! instantiation until its `start` first waits, and reading the process's resident
//! memory.
//!
//! Included with `#[path = "common/plugins.rs"] mod plugins;` by the benchmarks that use
//! it (common/mod.rs is shared with benchmarks that do not link the runtime).

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use tenure::future::BoxFuture;
use tenure::ownership::Grant;
use tenure::runtime::{Failure, InstanceContext, NodeLease, Plugin, StateBackend, StateError};

/// RSS is taken once two readings this far apart differ by at most [`RSS_STABLE`].
const RSS_SAMPLE: Duration = Duration::from_millis(100);
const RSS_STABLE: u64 = 64 << 10;
/// The most RSS readings taken while waiting for it to settle.
const RSS_MAX_SAMPLES: usize = 30;

/// The plugins measured here never keep state: instances get a backend that holds
/// nothing (`load` finds nothing, `save` succeeds), so the figures are the runtime's and
/// the guest's alone.
pub struct NoState;

impl StateBackend for NoState {
    fn load(&self, _: &Grant) -> BoxFuture<Result<Option<Vec<u8>>, StateError>> {
        Box::pin(async { Ok(None) })
    }
    fn save(&self, _: &Grant, _: Vec<u8>) -> BoxFuture<Result<(), StateError>> {
        Box::pin(async { Ok(()) })
    }
}

/// A context for one instance of `plugin`, granted `resource` slot 0 with `token`, with
/// a linear-memory cap of `memory` bytes.
pub fn context(
    plugin: &str,
    resource: &str,
    token: u64,
    state: &Arc<dyn StateBackend>,
    memory: usize,
) -> Arc<InstanceContext> {
    let grant = Grant {
        resource: resource.to_string(),
        slot: 0,
        node: "bench".to_string(),
        token,
        term: 0,
        session: 1,
    };
    // A lease that holds for the whole run, enforced as on a node (the engine checks it
    // at every epoch tick).
    let lease = Arc::new(NodeLease::new(true));
    lease.publish(
        Some(1),
        Some(Instant::now() + Duration::from_secs(24 * 3600)),
    );
    Arc::new(InstanceContext::new(
        plugin.to_string(),
        grant,
        lease,
        state.clone(),
        memory,
    ))
}

/// Asks the instance of `ctx` to stop, cooperatively (the grace is far beyond any run).
pub fn request_stop(ctx: &InstanceContext) {
    ctx.signals
        .request_stop(Instant::now() + Duration::from_secs(3600));
}

/// How a call into a plugin ended, as `Instance::start` reports it.
pub type StartResult = Result<Result<(), String>, Failure>;

/// Instantiates `plugin` for `ctx` and runs `start` to its end. `parked` is called once,
/// with the instantiation time and the time from instantiation until `start` first
/// waited (a plugin's first host `sleep`, once its own start-up work is done).
pub async fn run_until_stopped(
    plugin: Arc<Plugin>,
    ctx: Arc<InstanceContext>,
    parked: impl FnOnce(Duration, Duration),
) -> StartResult {
    let began = Instant::now();
    let mut instance = plugin.instantiate(ctx).await?;
    let instantiated = began.elapsed();
    let mut call = std::pin::pin!(instance.start());
    let mut parked = Some(parked);
    std::future::poll_fn(|cx| {
        let poll = call.as_mut().poll(cx);
        if poll.is_pending()
            && let Some(parked) = parked.take()
        {
            parked(instantiated, began.elapsed());
        }
        poll
    })
    .await
}

/// Fails unless `returned` is a clean return from `start`.
pub fn ensure_stopped_cleanly(returned: &StartResult) -> anyhow::Result<()> {
    ensure!(
        matches!(returned, Ok(Ok(()))),
        "the plugin did not stop cleanly: {}",
        match returned {
            Ok(Ok(())) => "Ok".to_string(),
            Ok(Err(e)) => format!("start returned Err({e})"),
            Err(failure) => failure.describe(),
        }
    );
    Ok(())
}

/// The RSS once two readings [`RSS_SAMPLE`] apart agree within [`RSS_STABLE`] (or the
/// last of [`RSS_MAX_SAMPLES`] readings).
pub async fn settled_rss() -> anyhow::Result<u64> {
    let mut last = rss_bytes()?;
    for _ in 0..RSS_MAX_SAMPLES {
        tokio::time::sleep(RSS_SAMPLE).await;
        let now = rss_bytes()?;
        if now.abs_diff(last) <= RSS_STABLE {
            return Ok(now);
        }
        last = now;
    }
    Ok(last)
}

/// The process's resident set size in bytes, from `/proc/self/statm`.
pub fn rss_bytes() -> anyhow::Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").context("reading /proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .context("no resident field in /proc/self/statm")?
        .parse()
        .context("parsing /proc/self/statm")?;
    Ok(pages * page_size())
}

/// The process's anonymous resident memory in bytes (`RssAnon` in `/proc/self/status`):
/// what it wrote itself. VmRSS also counts, once per mapping, the pages of a file or
/// memfd it maps (a component's memory image, mapped copy-on-write by every instance),
/// which are shared.
pub fn anon_bytes() -> anyhow::Result<u64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no RssAnon line in /proc/self/status")?;
    Ok(kib * 1024)
}

fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

/// Returns freed heap memory to the system, so that what an earlier round freed does not
/// hide what the next one allocates.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory held by the allocator.
    unsafe {
        libc::malloc_trim(0);
    }
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

pub use super::common::target_dir;

fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Builds the Rust plugins `packages` (`wasm32-wasip2`, `plugin` profile) into `target`
/// with the cargo running this benchmark; the path of each `.wasm`.
pub fn build_rust(target: &Path, packages: &[&str]) -> anyhow::Result<Vec<PathBuf>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut command = Command::new(&cargo);
    command.args(["build", "--target", "wasm32-wasip2", "--profile", "plugin"]);
    for package in packages {
        command.args(["-p", package]);
    }
    let output = command
        .current_dir(workspace())
        .env("CARGO_TARGET_DIR", target)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cargo}"))?;
    ensure!(
        output.status.success(),
        "building {packages:?} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let dir = target.join("wasm32-wasip2").join("plugin");
    Ok(packages
        .iter()
        .map(|p| dir.join(format!("{}.wasm", p.replace('-', "_"))))
        .collect())
}

/// Builds `plugins/NAME` with its `build.sh` (counter-py, counter-js) into `target`.
pub fn build_script(target: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let out = target.join("polyglot").join(format!("{name}.wasm"));
    std::fs::create_dir_all(out.parent().context("no parent")?)?;
    let status = Command::new("bash")
        .arg(workspace().join("plugins").join(name).join("build.sh"))
        .arg(&out)
        .stdin(Stdio::null())
        .status()?;
    ensure!(status.success(), "plugins/{name}/build.sh failed");
    Ok(out)
}

/// `tenure run --log-format json` in `dir`, with its data dir and plugins folder, and
/// without the developer's own `TENURE_*` and `RUST_LOG` settings (they must not change
/// the node's behaviour); stdin closed, stdout piped. The caller sets the rest.
pub fn tenure_run(dir: &Path, data: &Path, plugins: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenure"));
    command.args(["run", "--log-format", "json"]);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("TENURE_") || key == "RUST_LOG" {
            command.env_remove(&*key);
        }
    }
    command
        .env("TENURE_DATA_DIR", data)
        .env("TENURE_PLUGINS_DIR", plugins)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    command
}

/// The lines of a node's stdout, each with the time it was read, from a thread of its own.
pub fn timed_lines(stdout: ChildStdout) -> mpsc::Receiver<(Instant, String)> {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    lines
}

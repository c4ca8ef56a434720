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
//!    running instance.
//!
//! Then, once each: a folder with `heartbeat` and the cold Python and JavaScript
//! plugins (spawn → heartbeat's `plugin.started`, and → each `plugin.loaded`), and a
//! SIGTERM sent once the Python compile has begun (signal → exit).
//!
//! It prints figures and asserts nothing about them; it fails only if something does not
//! work at all. The machine is small and shared: compare medians across runs.

#[allow(
    dead_code,
    reason = "the shared helpers include some this bench does not use"
)]
mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use common::{Summary, millis, print_machine};
use serde_json::Value;
use tempfile::TempDir;

/// Runs of each measurement per language.
const RUNS: usize = 3;
/// Plugin files in the "ten plugins" measurement.
const MANY: usize = 10;
/// The bound on any wait (a cold compile on a busy machine included).
const WAIT: Duration = Duration::from_secs(240);

fn main() -> anyhow::Result<()> {
    print_machine("before");
    let target = target_dir()?;
    let languages = [
        ("rust (heartbeat)", build_heartbeat(&target)?),
        ("python (counter-py)", build_script(&target, "counter-py")?),
        (
            "javascript (counter-js)",
            build_script(&target, "counter-js")?,
        ),
    ];
    for (language, wasm) in &languages {
        language_section(language, wasm)?;
    }
    mixed_section(&languages[0].1, &languages[1].1, &languages[2].1)?;
    sigterm_section(&languages[1].1)?;
    print_machine("after");
    Ok(())
}

fn language_section(language: &str, wasm: &Path) -> anyhow::Result<()> {
    let size = std::fs::metadata(wasm)?.len();
    println!(
        "\n== {language}: {:.1} MiB component ==",
        size as f64 / (1 << 20) as f64
    );
    let (mut cold, mut cold_rss, mut hit, mut warm_rss, mut many_rss, mut per) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
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
        warm_rss.push(one);
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
        many_rss.push(ten);
        per.push((ten - one) / (MANY - 1) as f64);
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
    Ok(())
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
}

/// A running `tenure run --log-format json`; killed if dropped while running.
struct NodeProcess {
    child: Child,
    spawned: Instant,
    lines: mpsc::Receiver<(Instant, String)>,
}

impl NodeProcess {
    fn spawn(dirs: &Dirs) -> anyhow::Result<Self> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tenure"));
        command.args(["run", "--log-format", "json"]);
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("TENURE_") || key == "RUST_LOG" {
                command.env_remove(&*key);
            }
        }
        command
            .env("TENURE_DATA_DIR", dirs.root.path().join("data"))
            .env("TENURE_PLUGINS_DIR", dirs.root.path().join("plugins"))
            .env("TENURE_LISTEN", "127.0.0.1:0")
            .current_dir(dirs.root.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let spawned = Instant::now();
        let mut child = command.spawn().context("spawning tenure")?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
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

    fn rss_mib(&self) -> anyhow::Result<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("no VmRSS")?;
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

/// The target dir: this benchmark runs as `<target>/<profile>/deps/<bench>`.
fn target_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.ancestors()
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
        .context("no target dir above the benchmark")
}

fn build_heartbeat(target: &Path) -> anyhow::Result<PathBuf> {
    let workspace = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = Command::new(&cargo)
        .args(["build", "--target", "wasm32-wasip2", "--profile", "plugin"])
        .args(["-p", "heartbeat"])
        .current_dir(workspace)
        .env("CARGO_TARGET_DIR", target)
        .stdin(Stdio::null())
        .status()?;
    ensure!(status.success(), "building heartbeat failed");
    Ok(target.join("wasm32-wasip2/plugin/heartbeat.wasm"))
}

fn build_script(target: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let workspace = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let out = target.join("polyglot").join(format!("{name}.wasm"));
    std::fs::create_dir_all(out.parent().context("no parent")?)?;
    let status = Command::new("bash")
        .arg(workspace.join("plugins").join(name).join("build.sh"))
        .arg(&out)
        .stdin(Stdio::null())
        .status()?;
    ensure!(status.success(), "plugins/{name}/build.sh failed");
    Ok(out)
}

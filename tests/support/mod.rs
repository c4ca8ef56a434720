//! The harness for tests that run the real `tenure` binary.
//!
//! A test builds the guest plugins once ([`plugins`]), makes a [`Node`] (a temp dir with
//! `data/` and `plugins/`), puts plugins in its folder, spawns `tenure run --log-format
//! json` and then reads the node's event log: every stdout line is parsed as one JSON
//! object and kept, in order, so a test can wait for an event ([`Node::wait_for`]) and
//! check orderings and counts afterwards ([`Node::events`], [`index_of`]).
//!
//! Rules the harness follows so that tests stay honest and quick:
//! - Nothing sleeps to let something happen: every wait is for a condition on the log,
//!   with a generous bound ([`WAIT`]), and a wait fails at once when the node exits.
//! - A failed wait says what it waited for and shows the last lines the node wrote.
//! - The child process is killed when the [`Node`] is dropped, so a failing test leaves
//!   nothing running.
//!
//! Clusters of several nodes are built on top of [`Node`] in [`cluster`]; the network
//! namespaces that partition them, in [`netns`].

#![allow(
    dead_code,
    reason = "each test file uses a different part of the harness"
)]

use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use tempfile::TempDir;

pub mod checker;
pub mod cluster;
pub mod netns;
pub mod previous;
pub mod recorder;

#[allow(
    unused_imports,
    reason = "the single-node test files use none of the cluster harness"
)]
pub use cluster::*;

/// Manifest limits that keep fixture tests quick: a short stop grace and cleanup budget.
pub const FAST_LIMITS: &str =
    "memory = \"16MiB\"\nstop_grace = \"200ms\"\ncleanup_timeout = \"1s\"\n";

/// The bound for one wait on the node: generous, because tests run in parallel on a
/// small machine and a passing wait returns as soon as its condition holds.
pub const WAIT: Duration = Duration::from_secs(30);

/// How many of the node's last output lines a failure message shows.
const TAIL_LINES: usize = 40;

/// The guest plugins, built for `wasm32-wasip2`.
#[derive(Debug)]
pub struct Plugins {
    /// The `heartbeat` example: logs `tick {n} token={token}` every second.
    pub heartbeat: PathBuf,
    /// The `counter` example: a count kept in the resource's state.
    pub counter: PathBuf,
    /// The `misbehave` fixture: the behaviour is chosen by the resource name.
    pub misbehave: PathBuf,
    /// The `webhook` example: POSTs its lease to `TARGET_URL` every `INTERVAL_MS`.
    pub webhook: PathBuf,
    /// The `wstd-poller` fixture: async with `wstd` alone, GETs `TARGET_URL` and waits
    /// `INTERVAL_MS` in `wasi:io/poll` between requests.
    pub wstd_poller: PathBuf,
    /// The `sdk-poller` fixture: written with the Rust SDK (`sdk/rust`), GETs
    /// `TARGET_URL` every `INTERVAL_MS` (default 100).
    pub sdk_poller: PathBuf,
}

impl Plugins {
    pub fn heartbeat_bytes(&self) -> Vec<u8> {
        read(&self.heartbeat)
    }

    pub fn counter_bytes(&self) -> Vec<u8> {
        read(&self.counter)
    }

    pub fn misbehave_bytes(&self) -> Vec<u8> {
        read(&self.misbehave)
    }

    pub fn webhook_bytes(&self) -> Vec<u8> {
        read(&self.webhook)
    }

    pub fn wstd_poller_bytes(&self) -> Vec<u8> {
        read(&self.wstd_poller)
    }

    pub fn sdk_poller_bytes(&self) -> Vec<u8> {
        read(&self.sdk_poller)
    }
}

fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The manifest of a fixture that requests `TARGET_URL` (`wstd-poller`, `sdk-poller`,
/// `sdk-js`, `sdk-py`): [`FAST_LIMITS`] with `memory` instead, `granted` (a base URL) as
/// its one outbound host, `TARGET_URL` = `target`, and the `env` entries (TOML
/// inline-table entries, e.g. `INTERVAL_MS = "100"`).
pub fn requesting_manifest(
    resource: &str,
    memory: &str,
    granted: &str,
    target: &str,
    env: &str,
) -> String {
    let limits = FAST_LIMITS.replace("memory = \"16MiB\"", &format!("memory = \"{memory}\""));
    format!(
        "resource = \"{resource}\"\n\n[limits]\n{limits}\n[capabilities]\n\
         allowed_outbound_hosts = [\"{granted}\"]\n\
         env = {{ TARGET_URL = \"{target}\", {env} }}\n"
    )
}

/// What a requesting fixture logs when it returns on a stop request, and when its
/// `cleanup` runs on the instance that ran `start` at shutdown.
pub const RETURNED_ON_STOP: [&str; 2] = [
    "stop requested: returning",
    "cleanup reason=shutdown fresh_instance=false",
];

/// SIGINT, then: `resource`'s start under `token` ends `stopped` (not `interrupted`), the
/// fixture logs [`RETURNED_ON_STOP`], and the node exits 0. The node's events.
pub fn assert_stops_cooperatively(node: &mut Node, resource: &str, token: u64) -> Vec<Value> {
    node.signal(libc::SIGINT);
    let stopped = node.wait_for(
        "plugin.stopped",
        is("plugin.stopped")
            .with("resource", resource)
            .with("token", token)
            .f(),
        WAIT,
    );
    assert_eq!(stopped["outcome"], "stopped", "{stopped}");
    for line in RETURNED_ON_STOP {
        node.wait_for(line, log_exact(resource, line), WAIT);
    }
    let status = node.wait_exit(WAIT);
    assert!(
        status.success(),
        "the node exited with {status}\n{}",
        node.tail()
    );
    node.events()
}

/// Builds the plugins, once per test process, and returns their paths.
///
/// Runs the same cargo that runs the tests, in the workspace root, with the test's own
/// target dir, so the plugins share the build cache with everything else.
pub fn plugins() -> &'static Plugins {
    static PLUGINS: OnceLock<Plugins> = OnceLock::new();
    PLUGINS.get_or_init(|| {
        let workspace = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        let target_dir = target_dir();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        eprintln!(
            "[harness] building the plugins into {}",
            target_dir.display()
        );
        let started = Instant::now();
        let output = Command::new(&cargo)
            .args(["build", "--target", "wasm32-wasip2", "--profile", "plugin"])
            .args([
                "-p",
                "heartbeat",
                "-p",
                "counter",
                "-p",
                "misbehave",
                "-p",
                "webhook",
                "-p",
                "wstd-poller",
                "-p",
                "sdk-poller",
            ])
            .current_dir(workspace)
            .env("CARGO_TARGET_DIR", &target_dir)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cargo}: {e}"));
        if !output.status.success() {
            panic!(
                "building the plugins failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        eprintln!("[harness] plugins built in {:?}", started.elapsed());
        let dir = target_dir.join("wasm32-wasip2").join("plugin");
        let plugins = Plugins {
            heartbeat: dir.join("heartbeat.wasm"),
            counter: dir.join("counter.wasm"),
            misbehave: dir.join("misbehave.wasm"),
            webhook: dir.join("webhook.wasm"),
            wstd_poller: dir.join("wstd_poller.wasm"),
            sdk_poller: dir.join("sdk_poller.wasm"),
        };
        for path in [
            &plugins.heartbeat,
            &plugins.counter,
            &plugins.misbehave,
            &plugins.webhook,
            &plugins.wstd_poller,
            &plugins.sdk_poller,
        ] {
            assert!(path.is_file(), "cargo built no {}", path.display());
        }
        plugins
    })
}

/// The counter example in Python and in JavaScript, built from source by their own build
/// scripts (`plugins/counter-py/build.sh`, `plugins/counter-js/build.sh`), which install
/// the pinned componentize-py and componentize-js on first use.
#[derive(Debug)]
pub struct PolyglotPlugins {
    /// `plugins/counter-py`, built with componentize-py.
    pub counter_py: PathBuf,
    /// `plugins/counter-js`, built with componentize-js's defaults.
    pub counter_js: PathBuf,
    /// `plugins/sdk-js`, written with the JavaScript SDK (`sdk/js/tenure.js`).
    pub sdk_js: PathBuf,
    /// `plugins/sdk-py`, written with the Python SDK (`sdk/python/tenure.py`).
    pub sdk_py: PathBuf,
    /// A compile cache for nodes to share ([`Node::share_compile_cache`]): these
    /// components take seconds to compile, so only the first node pays for it.
    pub compile_cache: PathBuf,
}

/// Builds the Python and JavaScript plugins, once per test process, and returns their
/// paths. A missing toolchain (python3, node, npm) fails the test with the build script's
/// message naming what to install: these tests never skip.
pub fn polyglot_plugins() -> &'static PolyglotPlugins {
    static PLUGINS: OnceLock<PolyglotPlugins> = OnceLock::new();
    PLUGINS.get_or_init(|| {
        let workspace = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        let dir = target_dir().join("polyglot");
        let build = |name: &str| {
            let script = workspace.join("plugins").join(name).join("build.sh");
            let out = dir.join(format!("{name}.wasm"));
            let started = Instant::now();
            let output = Command::new("bash")
                .arg(&script)
                .arg(&out)
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
            if !output.status.success() {
                panic!(
                    "{} failed ({}); the Python and JavaScript plugin tests need python3 \
                     (with venv), node and npm, and PyPI and npm reachable:\n{}{}",
                    script.display(),
                    output.status,
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            eprintln!(
                "[harness] {} in {:?}",
                String::from_utf8_lossy(&output.stdout).trim(),
                started.elapsed()
            );
            assert!(
                out.is_file(),
                "{} wrote no {}",
                script.display(),
                out.display()
            );
            out
        };
        // One after the other: each build is multi-threaded, and the machine is small.
        let plugins = PolyglotPlugins {
            counter_py: build("counter-py"),
            counter_js: build("counter-js"),
            sdk_js: build("sdk-js"),
            sdk_py: build("sdk-py"),
            compile_cache: dir.join("compile-cache"),
        };
        fs::create_dir_all(&plugins.compile_cache).expect("creating the shared compile cache");
        warm_compile_cache(&plugins);
        plugins
    })
}

/// Runs one node that loads the components into the shared compile cache, so that the
/// tests' nodes (five at once) do not all compile them side by side on a cold cache.
fn warm_compile_cache(plugins: &PolyglotPlugins) {
    let started = Instant::now();
    let mut node = Node::new("compile-cache");
    node.share_compile_cache(&plugins.compile_cache);
    node.install("warm-py.wasm", read(&plugins.counter_py));
    node.install("warm-js.wasm", read(&plugins.counter_js));
    node.install("warm-sdk-js.wasm", read(&plugins.sdk_js));
    node.install("warm-sdk-py.wasm", read(&plugins.sdk_py));
    node.spawn();
    node.wait_for(
        "the initial scan to load the components",
        is("node.ready").f(),
        Duration::from_secs(180),
    );
    node.signal(libc::SIGTERM);
    node.wait_exit(WAIT);
    let loaded: Vec<String> = node
        .events()
        .iter()
        .filter(|e| is("plugin.loaded").matches(e))
        .map(|e| format!("{} {}", e["plugin"], e["cache"]))
        .collect();
    assert_eq!(
        loaded.len(),
        4,
        "every component loads: {loaded:?}\n{}",
        node.tail()
    );
    eprintln!(
        "[harness] compile cache warm ({}) in {:?}",
        loaded.join(", "),
        started.elapsed()
    );
}

/// The target dir this test binary was built in: it runs as
/// `<target>/[<triple>/]<profile>/deps/<test>`, and cargo marks `<target>` with a
/// `CACHEDIR.TAG` file.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the deps dir");
    let profile = deps.parent().expect("the profile dir");
    let candidate = profile.parent().expect("the target dir");
    if candidate.join("CACHEDIR.TAG").exists() {
        return candidate.to_path_buf();
    }
    match candidate.parent() {
        Some(above) if above.join("CACHEDIR.TAG").exists() => above.to_path_buf(),
        _ => candidate.to_path_buf(),
    }
}

/// Runs `tenure ARGS` to completion (bounded by [`WAIT`]) with a clean environment.
pub fn tenure(args: &[&str], cwd: &Path) -> Output {
    tenure_within(args, cwd, WAIT)
}

/// Runs `tenure ARGS` like [`tenure`], bounded by `timeout` (e.g. a `plugin check` that
/// compiles a large component while other tests build).
pub fn tenure_within(args: &[&str], cwd: &Path, timeout: Duration) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenure"));
    command.args(args).current_dir(cwd);
    clean_env(&mut command);
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning tenure");
    wait_output(child, timeout, &format!("tenure {}", args.join(" ")))
}

/// Runs `tenure ARGS` like [`tenure`], but with its stdout a pipe whose reading end is
/// already closed, as in `tenure ARGS | head -0` once `head` has gone: every write fails
/// with EPIPE (or raises SIGPIPE). The returned stdout is empty.
pub fn tenure_into_closed_pipe(args: &[&str], cwd: &Path) -> Output {
    let (reader, writer) = std::io::pipe().expect("making a pipe");
    drop(reader);
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenure"));
    command.args(args).current_dir(cwd);
    clean_env(&mut command);
    let child = command
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning tenure");
    wait_output(
        child,
        WAIT,
        &format!("tenure {} | (closed)", args.join(" ")),
    )
}

/// Waits for a child to exit and collects its output (what is piped of it); kills it and
/// panics after `timeout`.
fn wait_output(mut child: Child, timeout: Duration, what: &str) -> Output {
    let stdout = child.stdout.take();
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut stdout) = stdout {
            let _ = stdout.read_to_end(&mut buf);
        }
        buf
    });
    let err = thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let Some(status) = wait_child(&mut child, timeout) else {
        let _ = child.kill();
        let _ = child.wait();
        let stdout = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        panic!(
            "`{what}` did not exit within {timeout:?}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        )
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Polls a child until it exits or `timeout` passes.
fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("waiting for the child") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Removes what the developer's shell may have set that would change the node's
/// behaviour: Tenure's own settings and the log filter.
fn clean_env(command: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let key_str = key.to_string_lossy();
        if key_str.starts_with("TENURE_") || key_str == "RUST_LOG" {
            command.env_remove(&key);
        }
    }
}

/// The node is killed (SIGKILL) when the thread that spawned it ends, so an interrupted
/// or crashed test run leaves no node running: [`Drop`] covers a test that fails, this
/// covers one whose process is killed. The signal survives the `ip netns exec` wrapper's
/// exec.
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl,
    // which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// What one run of the node wrote, shared with the reader threads.
struct Capture {
    state: Mutex<Captured>,
    changed: Condvar,
}

#[derive(Default)]
struct Captured {
    /// Every line, as written, for failure messages.
    lines: Vec<(Stream, String)>,
    /// The stdout lines that parsed as JSON objects: the event log.
    events: Vec<Value>,
    /// How many of stdout and stderr are still open.
    open: usize,
}

impl Capture {
    fn new() -> Arc<Self> {
        Arc::new(Capture {
            state: Mutex::new(Captured {
                open: 2,
                ..Captured::default()
            }),
            changed: Condvar::new(),
        })
    }

    fn read(self: Arc<Self>, stream: Stream, source: impl Read + Send + 'static) {
        thread::spawn(move || {
            let mut reader = BufReader::new(source);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let line = String::from_utf8_lossy(&buf)
                    .trim_end_matches(['\n', '\r'])
                    .to_string();
                let event = match stream {
                    Stream::Stdout => serde_json::from_str::<Value>(&line)
                        .ok()
                        .filter(Value::is_object),
                    Stream::Stderr => None,
                };
                let mut state = self.state.lock().unwrap();
                state.lines.push((stream, line));
                if let Some(event) = event {
                    state.events.push(event);
                }
                drop(state);
                self.changed.notify_all();
            }
            self.state.lock().unwrap().open -= 1;
            self.changed.notify_all();
        });
    }

    fn tail(&self) -> String {
        let state = self.state.lock().unwrap();
        tail_of(&state.lines)
    }
}

fn tail_of(lines: &[(Stream, String)]) -> String {
    let start = lines.len().saturating_sub(TAIL_LINES);
    let mut text = String::new();
    for (stream, line) in &lines[start..] {
        let tag = match stream {
            Stream::Stdout => "out",
            Stream::Stderr => "err",
        };
        text.push_str(&format!("  {tag}| {line}\n"));
    }
    if text.is_empty() {
        text.push_str("  (no output)\n");
    }
    text
}

/// One running `tenure` process and what it wrote.
struct Run {
    child: Child,
    capture: Arc<Capture>,
    exit: Option<ExitStatus>,
    /// The wall-clock time at which the harness knew the process was gone (after it
    /// reaped it): a bound on when its plugins last ran, for runs without `node.stopped`.
    exited_at: Option<SystemTime>,
}

impl Run {
    fn record_exit(&mut self, status: ExitStatus) {
        if self.exit.is_none() {
            self.exit = Some(status);
            self.exited_at = Some(SystemTime::now());
        }
    }
}

/// The harness's own event at the end of a run that the harness saw exit: `event` is
/// [`EXITED`], `timestamp` when the process was known to be gone.
fn exit_event(at: SystemTime) -> Value {
    serde_json::json!({
        "timestamp": format_rfc3339_utc(at),
        "event": EXITED,
        "level": "INFO",
        "message": "the harness saw the process exit",
    })
}

/// The name of the harness's synthetic end-of-run event (see [`Node::all_events`]).
pub const EXITED: &str = "harness.exited";

/// A single node: its directories and, once spawned, its process.
pub struct Node {
    name: String,
    dir: TempDir,
    config: Option<PathBuf>,
    /// A command that runs the node, e.g. `ip netns exec NS`: `tenure` becomes its argument.
    wrapper: Vec<OsString>,
    /// Extra environment for the node's process (set after the harness clears `TENURE_*`).
    env: Vec<(OsString, OsString)>,
    /// The `tenure` binary it runs, if not this tree's (an earlier release's).
    binary: Option<PathBuf>,
    run: Option<Run>,
    /// The events of earlier runs, each run closed by an [`EXITED`] event.
    history: Vec<Value>,
}

impl Node {
    /// A node with empty `data/` and `plugins/` dirs, not yet running. `name` only labels
    /// the harness's narration.
    pub fn new(name: &str) -> Node {
        let dir = tempfile::Builder::new()
            .prefix(&format!("tenure-{name}-"))
            .tempdir()
            .expect("creating the node's temp dir");
        fs::create_dir(dir.path().join("data")).unwrap();
        fs::create_dir(dir.path().join("plugins")).unwrap();
        Node {
            name: name.to_string(),
            dir,
            config: None,
            wrapper: Vec::new(),
            env: Vec::new(),
            binary: None,
            run: None,
            history: Vec::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn plugins_dir(&self) -> PathBuf {
        self.dir.path().join("plugins")
    }

    /// Makes the node's compile cache (`data/cache`) a link to `dir`, which other nodes
    /// may share: entries are keyed by the wasm's digest and the engine, and written to a
    /// temporary name and renamed, so nodes never see each other's half-written files.
    /// The cache's key (`data/cache.key`, which authenticates its entries) is shared the
    /// same way: a link to `dir` + `.key`, made here once.
    pub fn share_compile_cache(&self, dir: &Path) {
        std::os::unix::fs::symlink(dir, self.data_dir().join("cache"))
            .unwrap_or_else(|e| panic!("linking {}/cache: {e}", self.data_dir().display()));
        let key = dir.with_extension("key");
        shared_cache_key(&key);
        std::os::unix::fs::symlink(&key, self.data_dir().join("cache.key"))
            .unwrap_or_else(|e| panic!("linking {}/cache.key: {e}", self.data_dir().display()));
    }

    /// Runs the node with `--config FILE` from now on.
    pub fn set_config(&mut self, file: PathBuf) {
        self.config = Some(file);
    }

    /// Runs the node under `wrapper` (e.g. `["ip", "netns", "exec", "ns1"]`) from now
    /// on. The wrapper must exec `tenure` in place, so that signals reach the node.
    pub fn set_wrapper(&mut self, wrapper: Vec<OsString>) {
        self.wrapper = wrapper;
    }

    /// Runs the node with `key=value` in its environment from now on (e.g. the test-only
    /// `TENURE_UNSAFE_NO_SELF_DEMOTION`).
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.push((key.into(), value.into()));
    }

    /// Runs the node without `key` in its environment from now on.
    pub fn remove_env(&mut self, key: &str) {
        self.env.retain(|(k, _)| k != key);
    }

    /// Runs `binary` instead of this tree's `tenure` from now on (`None`: this tree's),
    /// as a node of an earlier release would (`previous::release`).
    pub fn set_binary(&mut self, binary: Option<PathBuf>) {
        self.binary = binary;
    }

    /// A command for the `tenure` binary, under the wrapper if there is one.
    pub fn command(&self) -> Command {
        let binary = self
            .binary
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_tenure")));
        match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(binary);
                command
            }
            None => Command::new(binary),
        }
    }

    /// Starts `tenure run --log-format json` on this node's dirs.
    pub fn spawn(&mut self) {
        assert!(self.run.is_none(), "node {} is already running", self.name);
        let mut command = self.command();
        command.arg("run").args(["--log-format", "json"]);
        clean_env(&mut command);
        match &self.config {
            Some(config) => {
                command.arg("--config").arg(config);
            }
            // Tests run in parallel: a node without a config listens on any free port
            // rather than the default 7400.
            None => {
                command.env("TENURE_LISTEN", "127.0.0.1:0");
            }
        }
        for (key, value) in &self.env {
            command.env(key, value);
        }
        command
            .env("TENURE_DATA_DIR", self.data_dir())
            .env("TENURE_PLUGINS_DIR", self.plugins_dir())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_parent(&mut command);
        let mut child = command.spawn().expect("spawning tenure run");
        eprintln!("[{}] spawned tenure run (pid {})", self.name, child.id());
        let capture = Capture::new();
        capture
            .clone()
            .read(Stream::Stdout, child.stdout.take().unwrap());
        capture
            .clone()
            .read(Stream::Stderr, child.stderr.take().unwrap());
        self.run = Some(Run {
            child,
            capture,
            exit: None,
            exited_at: None,
        });
    }

    /// Spawns the node again on the same dirs, after it exited (it is killed first if
    /// not). Events of the previous run leave [`Node::events`], which then shows only
    /// the new process's, and are kept for [`Node::all_events`].
    pub fn restart(&mut self) {
        if self.run.is_some() {
            self.kill();
            self.drain_output();
            let run = self.run.take().expect("a run");
            self.history
                .extend(run.capture.state.lock().unwrap().events.iter().cloned());
            self.history
                .push(exit_event(run.exited_at.unwrap_or_else(SystemTime::now)));
        }
        eprintln!("[{}] restarting on the same dirs", self.name);
        self.spawn();
    }

    /// The events of every run so far, oldest first; each run that ended is closed by
    /// an [`EXITED`] event stamped when the harness saw the process gone.
    pub fn all_events(&self) -> Vec<Value> {
        let mut events = self.history.clone();
        if let Some(run) = &self.run {
            events.extend(run.capture.state.lock().unwrap().events.iter().cloned());
            if let Some(at) = run.exited_at {
                events.push(exit_event(at));
            }
        }
        events
    }

    /// Whether the node was ever spawned.
    pub fn spawned(&self) -> bool {
        self.run.is_some()
    }

    /// Whether the current run's process is (as far as the harness knows) still there:
    /// not reaped, and its output still open. A stopped (SIGSTOP) process is alive.
    pub fn alive(&self) -> bool {
        match &self.run {
            Some(run) => run.exit.is_none() && run.capture.state.lock().unwrap().open > 0,
            None => false,
        }
    }

    fn run(&self) -> &Run {
        self.run
            .as_ref()
            .unwrap_or_else(|| panic!("node {} was never spawned", self.name))
    }

    /// The events (stdout JSON objects) of the current run so far, in order.
    pub fn events(&self) -> Vec<Value> {
        self.run().capture.state.lock().unwrap().events.clone()
    }

    /// How many events of the current run match.
    pub fn count(&self, predicate: impl Fn(&Value) -> bool) -> usize {
        let state = self.run().capture.state.lock().unwrap();
        state.events.iter().filter(|e| predicate(e)).count()
    }

    /// Every line the current run wrote, stdout and stderr, as text.
    pub fn lines(&self) -> Vec<(Stream, String)> {
        self.run().capture.state.lock().unwrap().lines.clone()
    }

    /// The stderr of the current run, as text.
    pub fn stderr(&self) -> String {
        let state = self.run().capture.state.lock().unwrap();
        let lines: Vec<&str> = state
            .lines
            .iter()
            .filter(|(s, _)| *s == Stream::Stderr)
            .map(|(_, l)| l.as_str())
            .collect();
        lines.join("\n")
    }

    /// Waits for the first event that matches and returns it.
    pub fn wait_for(
        &self,
        description: &str,
        predicate: impl Fn(&Value) -> bool,
        timeout: Duration,
    ) -> Value {
        self.wait_for_from(description, 0, predicate, timeout).1
    }

    /// Waits for the first event at index `from` or later that matches, and returns its
    /// index and the event.
    pub fn wait_for_from(
        &self,
        description: &str,
        from: usize,
        predicate: impl Fn(&Value) -> bool,
        timeout: Duration,
    ) -> (usize, Value) {
        let mut found = None;
        self.wait_until(
            description,
            |events| {
                found = events
                    .iter()
                    .enumerate()
                    .skip(from)
                    .find(|(_, e)| predicate(e))
                    .map(|(i, e)| (i, e.clone()));
                found.is_some()
            },
            timeout,
        );
        found.expect("the condition held")
    }

    /// Waits until a condition on all the events so far holds.
    pub fn wait_until(
        &self,
        description: &str,
        mut condition: impl FnMut(&[Value]) -> bool,
        timeout: Duration,
    ) {
        let capture = &self.run().capture;
        let deadline = Instant::now() + timeout;
        let mut state = capture.state.lock().unwrap();
        loop {
            if condition(&state.events) {
                return;
            }
            if state.open == 0 {
                let tail = tail_of(&state.lines);
                drop(state);
                panic!(
                    "[{}] the node exited while waiting for: {description}\nlast output:\n{tail}",
                    self.name
                );
            }
            let now = Instant::now();
            if now >= deadline {
                let tail = tail_of(&state.lines);
                drop(state);
                panic!(
                    "[{}] timed out after {timeout:?} waiting for: {description}\nlast output:\n{tail}",
                    self.name
                );
            }
            state = capture
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap()
                .0;
        }
    }

    /// Writes a file into the plugins folder atomically: the watcher never sees it
    /// half-written, because it is written under a name that is neither `.wasm` nor
    /// `.toml` and then renamed.
    pub fn install(&self, file_name: &str, bytes: impl AsRef<[u8]>) {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = self.plugins_dir();
        let temp = dir.join(format!(
            ".{file_name}.{}.partial",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::write(&temp, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", temp.display()));
        fs::rename(&temp, dir.join(file_name)).unwrap();
        eprintln!("[{}] installed plugins/{file_name}", self.name);
    }

    /// Installs the `misbehave` fixture as `<behaviour>.wasm` with a manifest naming the
    /// resource `behaviour` (which selects the behaviour) and the given `[limits]` lines.
    /// The manifest goes first, so the watcher never sees the wasm without it.
    pub fn install_fixture(&self, behaviour: &str, limits: &str) {
        self.install(
            &format!("{behaviour}.toml"),
            format!("resource = \"{behaviour}\"\n\n[limits]\n{limits}"),
        );
        self.install(&format!("{behaviour}.wasm"), plugins().misbehave_bytes());
    }

    /// Removes a file from the plugins folder.
    pub fn remove(&self, file_name: &str) {
        fs::remove_file(self.plugins_dir().join(file_name)).unwrap();
        eprintln!("[{}] removed plugins/{file_name}", self.name);
    }

    /// The node's process id.
    pub fn pid(&self) -> u32 {
        self.run().child.id()
    }

    /// Sends a signal (e.g. `libc::SIGINT`) to the node.
    pub fn signal(&self, signal: libc::c_int) {
        let pid = self.run().child.id() as libc::pid_t;
        eprintln!("[{}] sending signal {signal} to pid {pid}", self.name);
        // SAFETY: `kill` has no memory-safety preconditions; the pid is our own child,
        // which has not been reaped yet (we hold its `Child`), so it cannot be reused.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
    }

    /// Waits for the node to exit and returns its status; panics after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let name = self.name.clone();
        let run = self
            .run
            .as_mut()
            .unwrap_or_else(|| panic!("node {name} was never spawned"));
        let status = match run.exit {
            Some(status) => status,
            None => {
                let Some(status) = wait_child(&mut run.child, timeout) else {
                    panic!(
                        "[{name}] did not exit within {timeout:?}\nlast output:\n{}",
                        run.capture.tail()
                    );
                };
                run.record_exit(status);
                status
            }
        };
        self.drain_output();
        eprintln!("[{name}] exited: {status}");
        status
    }

    /// After the process exited: lets the readers take in what it wrote before.
    fn drain_output(&self) {
        let Some(run) = &self.run else { return };
        let capture = run.capture.clone();
        let deadline = Instant::now() + WAIT;
        let mut state = capture.state.lock().unwrap();
        while state.open > 0 && Instant::now() < deadline {
            state = capture
                .changed
                .wait_timeout(state, Duration::from_millis(100))
                .unwrap()
                .0;
        }
    }

    /// Kills the node at once (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(run) = self.run.as_mut()
            && run.exit.is_none()
        {
            let _ = run.child.kill();
            if let Ok(status) = run.child.wait() {
                run.record_exit(status);
            }
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.run.as_mut() {
            Some(run) if run.exit.is_none() => match run.child.try_wait() {
                Ok(Some(status)) => {
                    run.record_exit(status);
                    false
                }
                _ => true,
            },
            _ => false,
        }
    }

    /// The last lines the current run wrote, for assertion messages.
    pub fn tail(&self) -> String {
        match &self.run {
            Some(run) => run.capture.tail(),
            None => "  (never spawned)\n".to_string(),
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if thread::panicking()
            && let Some(run) = &self.run
        {
            eprintln!(
                "[{}] test failed; the node's last output:\n{}",
                self.name,
                run.capture.tail()
            );
        }
        self.kill();
    }
}

/// The preload library that shifts a process's wall clock (Debian's `libfaketime`, which
/// `.ci/run` installs): the real clock calls of a real `tenure` process, not a test switch.
pub const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// A wrapper (for [`Node::set_wrapper`]) that runs the node with its wall clock shifted by
/// `offset` (libfaketime's syntax: `+60s`, `+1h`); its monotonic clock, which the leases
/// use, is left alone.
pub fn clock_shifted(offset: &str) -> Vec<std::ffi::OsString> {
    assert!(
        Path::new(FAKETIME).exists(),
        "{FAKETIME} is missing: install Debian's faketime package (`apt-get install faketime`; .ci/run does)"
    );
    [
        "env".to_string(),
        format!("LD_PRELOAD={FAKETIME}"),
        format!("FAKETIME={offset}"),
        "FAKETIME_DONT_FAKE_MONOTONIC=1".to_string(),
    ]
    .into_iter()
    .map(Into::into)
    .collect()
}

// ---- Reading events -------------------------------------------------------------------

/// A predicate on events: `is("plugin.stopped").with("resource", "busy")`.
#[derive(Debug, Clone)]
pub struct Filter {
    event: String,
    fields: Vec<(String, Value)>,
}

/// Matches events named `event`.
pub fn is(event: &str) -> Filter {
    Filter {
        event: event.to_string(),
        fields: Vec::new(),
    }
}

impl Filter {
    /// Also requires `key` to equal `value`.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Filter {
        self.fields.push((key.to_string(), value.into()));
        self
    }

    pub fn matches(&self, event: &Value) -> bool {
        event["event"] == self.event.as_str()
            && self.fields.iter().all(|(key, value)| &event[key] == value)
    }

    /// As a closure, for [`Node::wait_for`] and friends.
    pub fn f(self) -> impl Fn(&Value) -> bool {
        move |event| self.matches(event)
    }
}

/// A `plugin.log` event of `resource` whose message starts with `prefix`.
pub fn log_starting(resource: &str, prefix: &str) -> impl Fn(&Value) -> bool {
    let resource = resource.to_string();
    let prefix = prefix.to_string();
    move |e| {
        e["event"] == "plugin.log"
            && e["resource"] == resource.as_str()
            && message(e).starts_with(&prefix)
    }
}

/// A `plugin.log` event of `resource` whose message is exactly `text`.
pub fn log_exact(resource: &str, text: &str) -> impl Fn(&Value) -> bool {
    let resource = resource.to_string();
    let text = text.to_string();
    move |e| e["event"] == "plugin.log" && e["resource"] == resource.as_str() && message(e) == text
}

/// The `n` in a counter line `count={n} token={t}` (the counter examples, in every
/// language, log that).
pub fn count_of(event: &Value) -> Option<u64> {
    message(event)
        .strip_prefix("count=")?
        .split(' ')
        .next()?
        .parse()
        .ok()
}

/// The counter's counts in a log (a node's, or a merged one), in order.
pub fn counts(events: &[Value]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| log_starting("counter", "count=")(e))
        .filter_map(count_of)
        .collect()
}

/// The event's `message`, or "".
pub fn message(event: &Value) -> &str {
    event["message"].as_str().unwrap_or("")
}

/// A string field, panicking with the event when it is missing.
pub fn str_field<'a>(event: &'a Value, key: &str) -> &'a str {
    event[key]
        .as_str()
        .unwrap_or_else(|| panic!("event has no string `{key}`: {event}"))
}

/// A number field, panicking with the event when it is missing.
pub fn u64_field(event: &Value, key: &str) -> u64 {
    event[key]
        .as_u64()
        .unwrap_or_else(|| panic!("event has no number `{key}`: {event}"))
}

/// The event's fencing token.
pub fn token(event: &Value) -> u64 {
    u64_field(event, "token")
}

/// The highest token any plugin was started with in `events` (panics if none started).
pub fn highest_token(events: &[Value]) -> u64 {
    events
        .iter()
        .filter(|e| is("plugin.started").matches(e))
        .map(token)
        .max()
        .expect("a plugin.started")
}

/// The index of the first event equal to `event`.
pub fn index_of(events: &[Value], event: &Value) -> usize {
    events
        .iter()
        .position(|e| e == event)
        .unwrap_or_else(|| panic!("event not in the log: {event}"))
}

/// The indices and events that match.
pub fn all<'a>(
    events: &'a [Value],
    predicate: impl Fn(&Value) -> bool + 'a,
) -> impl Iterator<Item = (usize, &'a Value)> + 'a {
    events.iter().enumerate().filter(move |(_, e)| predicate(e))
}

/// The event's `timestamp` in microseconds since the Unix epoch. Accepts RFC 3339 in
/// UTC (`2026-11-22T03:50:12.123456Z`), with any number of fraction digits.
pub fn timestamp_us(event: &Value) -> i64 {
    let text = str_field(event, "timestamp");
    parse_rfc3339_utc(text).unwrap_or_else(|| panic!("not an RFC 3339 UTC timestamp: {text}"))
}

fn parse_rfc3339_utc(text: &str) -> Option<i64> {
    let text = text
        .strip_suffix('Z')
        .or_else(|| text.strip_suffix("+00:00"))?;
    let (date, time) = text.split_once(['T', 't', ' '])?;
    let mut date = date.splitn(3, '-');
    let year: i64 = date.next()?.parse().ok()?;
    let month: i64 = date.next()?.parse().ok()?;
    let day: i64 = date.next()?.parse().ok()?;
    let (hms, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut hms = hms.splitn(3, ':');
    let hour: i64 = hms.next()?.parse().ok()?;
    let minute: i64 = hms.next()?.parse().ok()?;
    let second: i64 = hms.next()?.parse().ok()?;
    let mut micros: i64 = 0;
    for (i, digit) in fraction.chars().take(6).enumerate() {
        micros += i64::from(digit.to_digit(10)?) * 10_i64.pow(5 - i as u32);
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hour) * 60 + minute) * 60_000_000 + second * 1_000_000 + micros)
}

/// `at` as RFC 3339 UTC with microseconds, the event log's format.
pub fn format_rfc3339_utc(at: SystemTime) -> String {
    let us = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("a time after 1970")
        .as_micros() as i64;
    let (days, rest) = (us.div_euclid(86_400_000_000), us.rem_euclid(86_400_000_000));
    // Civil date from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let seconds = rest / 1_000_000;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60,
        rest % 1_000_000
    )
}

/// `at` in microseconds since the Unix epoch, comparable with [`timestamp_us`].
pub fn system_time_us(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .expect("a time after 1970")
        .as_micros() as i64
}

/// Milliseconds from event `a` to event `b`, by their timestamps.
pub fn ms_between(a: &Value, b: &Value) -> i64 {
    (timestamp_us(b) - timestamp_us(a)) / 1000
}

/// Checks the contract "cleanup at most once per start" on a whole log: for every token
/// that had a `plugin.started` and a `plugin.stopped`, exactly one `plugin.cleanup`, after
/// the stop; and never a cleanup for a token that was not started.
pub fn assert_cleanup_once_per_start(events: &[Value]) {
    let started: Vec<(usize, &Value)> = all(events, is("plugin.started").f()).collect();
    for (started_at, start) in &started {
        let t = token(start);
        let resource = str_field(start, "resource");
        let stopped: Vec<usize> = all(events, |e| {
            e["event"] == "plugin.stopped" && e["token"] == t && e["resource"] == resource
        })
        .map(|(i, _)| i)
        .collect();
        let cleanups: Vec<usize> = all(events, |e| {
            e["event"] == "plugin.cleanup" && e["token"] == t && e["resource"] == resource
        })
        .map(|(i, _)| i)
        .collect();
        assert!(
            stopped.len() <= 1,
            "{resource} token {t}: {} plugin.stopped events",
            stopped.len()
        );
        if let Some(&stopped_at) = stopped.first() {
            assert!(
                stopped_at > *started_at,
                "{resource} token {t}: stopped before started"
            );
            assert_eq!(
                cleanups.len(),
                1,
                "{resource} token {t}: expected exactly one plugin.cleanup, got {}",
                cleanups.len()
            );
            assert!(
                cleanups[0] > stopped_at,
                "{resource} token {t}: plugin.cleanup came before plugin.stopped"
            );
        } else {
            assert!(
                cleanups.len() <= 1,
                "{resource} token {t}: {} plugin.cleanup events",
                cleanups.len()
            );
        }
    }
    for (_, cleanup) in all(events, is("plugin.cleanup").f()) {
        let t = token(cleanup);
        assert!(
            started
                .iter()
                .any(|(_, s)| s["token"] == t && s["resource"] == cleanup["resource"]),
            "plugin.cleanup for a token that never started: {cleanup}"
        );
    }
}

/// After a clean shutdown: every start was stopped once and cleaned up once, and all of
/// that happened before `node.stopped`.
pub fn assert_every_start_cleaned_up(events: &[Value]) {
    assert_cleanup_once_per_start(events);
    let node_stopped = events
        .iter()
        .position(|e| is("node.stopped").matches(e))
        .expect("a node.stopped event");
    for (_, start) in all(events, is("plugin.started").f()) {
        let t = token(start);
        let resource = str_field(start, "resource");
        for kind in ["plugin.stopped", "plugin.cleanup"] {
            let found: Vec<usize> = all(events, |e| {
                e["event"] == kind && e["token"] == t && e["resource"] == resource
            })
            .map(|(i, _)| i)
            .collect();
            assert_eq!(
                found.len(),
                1,
                "{resource} token {t}: {} {kind} events",
                found.len()
            );
            assert!(
                found[0] < node_stopped,
                "{resource} token {t}: {kind} after node.stopped"
            );
        }
    }
}

/// Makes the shared compile cache's key at `path` if it is not there yet: written under a
/// temporary name and linked into place, so concurrent tests never see half a key.
fn shared_cache_key(path: &Path) {
    if path.exists() {
        return;
    }
    let temp = path.with_extension(format!(
        "key-{}-{:?}",
        std::process::id(),
        thread::current().id()
    ));
    let key: Vec<u8> = (0..32u8)
        .map(|i| i.wrapping_mul(73) ^ (std::process::id() as u8))
        .collect();
    fs::write(&temp, key).expect("writing the shared cache key");
    match fs::hard_link(&temp, path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("linking {}: {e}", path.display()),
    }
    let _ = fs::remove_file(&temp);
}

/// One plain HTTP/1.1 GET to a node's metrics listener: the status code (0 when nothing
/// answered) and the body. The request asks the server to close, so the answer ends
/// with the connection.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use std::io::Write as _;
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        return (0, "(no connection)".into());
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    if write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return (0, "(the connection closed)".into());
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let code = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (code, body)
}

/// What a command wrote to stdout, as text.
pub fn stdout_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// What a command wrote to stderr, as text.
pub fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::{format_rfc3339_utc, parse_rfc3339_utc, system_time_us};

    #[test]
    fn parses_rfc3339() {
        assert_eq!(parse_rfc3339_utc("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_utc("1970-01-02T00:00:01.5Z"),
            Some(86_401_500_000)
        );
        // 2026-11-22T03:50:12.123456Z, from `date -u -d ... +%s`: 1795319412.
        assert_eq!(
            parse_rfc3339_utc("2026-11-22T03:50:12.123456Z"),
            Some(1_795_319_412_123_456)
        );
    }

    #[test]
    fn formats_rfc3339_as_it_parses() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_micros(1_795_319_412_123_456);
        assert_eq!(format_rfc3339_utc(at), "2026-11-22T03:50:12.123456Z");
        let now = SystemTime::now();
        assert_eq!(
            parse_rfc3339_utc(&format_rfc3339_utc(now)),
            Some(system_time_us(now))
        );
    }
}

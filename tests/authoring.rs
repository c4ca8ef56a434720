//! `tenure plugin new` for each language, end to end: the project it writes builds with
//! its one command and the real toolchain, `tenure plugin check` passes on what it built,
//! and a node runs it: it starts, ticks under its grant's token, stops cooperatively on
//! SIGINT with one `cleanup reason=shutdown`, and after a restart goes on from the count
//! it saved. Then the project's own `tenure plugin test` passes (handovers and a crash on
//! a local cluster), and a script step that does not hold fails it, saying why.
//!
//! The builds reuse what the other tests build with, so CI installs each language's tools
//! once: the Rust project builds into this test's own target dir (its dependencies are
//! those of `sdk-poller`), the Python and JavaScript projects through the checkout's
//! `sdk/python/build.sh` and `sdk/js/build.sh`, which are `plugins/counter-py/build.sh`
//! and `plugins/counter-js/build.sh` with their pinned installs in `$TENURE_TOOLS_DIR`.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// The bound for a build (a fresh Rust build of the SDK's dependencies, or the first
/// install of componentize-py or componentize-js) and for a node's first compile of a
/// Python or JavaScript component: minutes when tests build in parallel on two cores.
const BUILD_WAIT: Duration = Duration::from_secs(600);
const COMPILE_WAIT: Duration = Duration::from_secs(180);
/// The bound of a whole `tenure plugin test`: two nodes compile the plugin at its start.
const PLUGIN_TEST_WAIT: Duration = Duration::from_secs(400);

/// The Tenure checkout the test binary was built from, as `tenure plugin new` finds it.
fn checkout() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .canonicalize()
        .expect("the checkout")
}

/// Runs `tenure plugin new NAME --lang LANG` in a temp dir; returns the dir and the
/// project's path.
fn new_project(name: &str, lang: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("tenure-authoring-")
        .tempdir()
        .expect("a temp dir");
    let output = tenure(&["plugin", "new", name, "--lang", lang], dir.path());
    assert!(
        output.status.success(),
        "tenure plugin new failed:\n{}",
        stderr_of(&output)
    );
    let out = stdout_of(&output);
    let from = format!("SDK from {}", checkout().display());
    assert!(out.contains(&from), "names the checkout it uses: {out}");
    let project = dir.path().join(name);
    for file in ["README.md", "build.sh", &format!("{name}.toml")] {
        assert!(project.join(file).is_file(), "no {file} in:\n{out}");
    }
    (dir, project)
}

/// Runs the project's build command (as its README says) to completion.
fn build(project: &Path, program: &str, args: &[&str]) {
    let started = Instant::now();
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(project)
        .env("CARGO_TARGET_DIR", target_dir())
        .stdin(Stdio::null());
    // The pinned tools' install dir stays what CI and the other tests use: this
    // process's TENURE_TOOLS_DIR, or the build scripts' default.
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        output.status.success(),
        "`{program} {}` in {} failed ({}):\n{}{}",
        args.join(" "),
        project.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        started.elapsed() < BUILD_WAIT,
        "the build took {:?}",
        started.elapsed()
    );
    eprintln!(
        "[authoring] {} built in {:?}",
        project.display(),
        started.elapsed()
    );
}

/// `tenure plugin check NAME.wasm` in the project passes and reads the manifest beside it.
fn check(project: &Path, name: &str) {
    let wasm = format!("{name}.wasm");
    // It compiles the component: seconds alone, far more beside the other tests' builds.
    let output = tenure_within(&["plugin", "check", &wasm], project, COMPILE_WAIT);
    let out = stdout_of(&output);
    assert!(
        output.status.success(),
        "tenure plugin check failed:\n{out}{}",
        stderr_of(&output)
    );
    assert!(
        out.contains(&format!("manifest   {name}.toml"))
            && out.contains(&format!("resource   {name} (tickets 1, version 0.1.0)")),
        "{out}"
    );
}

/// Waits for `name`'s start in the current run and its tick `n` under that start's token;
/// returns the token.
fn wait_ticking(node: &Node, name: &str, n: u64) -> u64 {
    let start = node.wait_for(
        "the plugin to start",
        is("plugin.started").with("resource", name).f(),
        COMPILE_WAIT,
    );
    let t = token(&start);
    let line = format!("tick {n} token={t}");
    node.wait_for(&line, log_exact(name, &line), WAIT);
    t
}

/// SIGINT: the start ends `stopped` (not interrupted), cleanup runs once with reason
/// shutdown, and the node exits 0.
fn stop(node: &mut Node, name: &str, t: u64) {
    node.signal(libc::SIGINT);
    let stopped = node.wait_for(
        "plugin.stopped",
        is("plugin.stopped")
            .with("resource", name)
            .with("token", t)
            .f(),
        WAIT,
    );
    assert_eq!(stopped["outcome"], "stopped", "{stopped}");
    let status = node.wait_exit(WAIT);
    assert!(
        status.success(),
        "the node exited with {status}\n{}",
        node.tail()
    );
    let cleanups: Vec<Value> = node
        .events()
        .into_iter()
        .filter(|e| log_starting(name, "cleanup ")(e))
        .collect();
    assert_eq!(cleanups.len(), 1, "one cleanup: {cleanups:?}");
    assert_eq!(message(&cleanups[0]), "cleanup reason=shutdown");
}

/// Makes, builds, checks and runs a project of `lang`.
fn made_project_builds_checks_and_runs(name: &str, lang: &str, program: &str, args: &[&str]) {
    let (_dir, project) = new_project(name, lang);
    build(&project, program, args);
    if lang == "rust" {
        // What the template writes is what rustfmt would: a user's first `cargo fmt`
        // changes nothing.
        let fmt = Command::new("cargo")
            .args(["fmt", "--check"])
            .current_dir(&project)
            .output()
            .expect("running cargo fmt");
        assert!(
            fmt.status.success(),
            "cargo fmt --check:\n{}",
            String::from_utf8_lossy(&fmt.stdout)
        );
    }
    check(&project, name);

    let mut node = Node::new(name);
    node.install(
        &format!("{name}.toml"),
        std::fs::read(project.join(format!("{name}.toml"))).unwrap(),
    );
    node.install(
        &format!("{name}.wasm"),
        std::fs::read(project.join(format!("{name}.wasm"))).unwrap(),
    );
    node.spawn();
    let first = wait_ticking(&node, name, 1);
    assert!(
        node.count(log_exact(name, &format!("started token={first} count=0"))) == 1,
        "the first start begins from no state:\n{}",
        node.tail()
    );
    stop(&mut node, name, first);

    // The count it saved carries over to the next start, under a newer token.
    node.restart();
    let second = wait_ticking(&node, name, 2);
    assert!(second > first, "tokens increase: {first} then {second}");
    stop(&mut node, name, second);
    drop(node);

    plugin_test_passes(&project);
}

/// The project's own `tenure plugin test` (its test.toml: start, handovers, a crash, a
/// restart, and the checks of cleanups, state and tokens) passes, saying so per step.
fn plugin_test_passes(project: &Path) {
    let started = Instant::now();
    let output = tenure_within(&["plugin", "test"], project, PLUGIN_TEST_WAIT);
    let out = stdout_of(&output);
    assert!(
        output.status.success(),
        "tenure plugin test failed:\n{out}{}",
        stderr_of(&output)
    );
    for line in [
        "[1/18] start: ok: ",
        "[3/18] handover: ok: moved from ",
        "[7/18] crash-owner: ok: killed ",
        "[13/18] lose-lease: ok: froze ",
        "[14/18] expect-cleanup reason=lease-lost count=1: ok: ",
        "[15/18] change-manifest ./faster.toml: ok: installed ./faster.toml on both plugin nodes",
        "[16/18] expect-cleanup reason=plugin-updated count=1: ok: ",
        "[18/18] expect-tokens-increase: ok: 6 starts, tokens ",
        "passed: 18 steps in ",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    eprintln!(
        "[authoring] tenure plugin test in {} passed in {:?}",
        project.display(),
        started.elapsed()
    );
}

#[test]
fn a_new_rust_project_builds_checks_and_runs() {
    made_project_builds_checks_and_runs("my-rust-task", "rust", "./build.sh", &[]);
}

/// A step that does not hold fails the run: the step, what it expected, what it found,
/// both plugin nodes' last lines, exit 1. Here the task is moved, and the script wrongly
/// expects its cleanup to say `released`.
#[test]
fn a_plugin_test_step_that_does_not_hold_fails_with_what_was_expected() {
    let (_dir, project) = new_project("wrong-expectation", "rust");
    build(&project, "./build.sh", &[]);
    std::fs::write(
        project.join("wrong.toml"),
        "plugin = \"wrong-expectation.wasm\"\n\
         [[step]]\ndo = \"start\"\n\
         [[step]]\ndo = \"handover\"\n\
         [[step]]\ndo = \"expect-cleanup\"\nreason = \"released\"\n\
         [[step]]\ndo = \"expect-tokens-increase\"\n",
    )
    .unwrap();
    let output = tenure_within(
        &["plugin", "test", "wrong.toml"],
        &project,
        PLUGIN_TEST_WAIT,
    );
    let (out, err) = (stdout_of(&output), stderr_of(&output));
    assert_eq!(output.status.code(), Some(1), "{out}{err}");
    for line in [
        "[2/4] handover: ok: moved from ",
        "[3/4] expect-cleanup reason=released count=1: FAILED\n",
        "  expected: 1 cleanup(s) of the start on ",
        ", reason released, outcome ok\n",
        "  found:    1 cleanup(s): reason moved, outcome ok\n",
        "last lines of n1:\n",
        "last lines of n2:\n",
        "plugin.cleanup resource=wrong-expectation slot=0 token=",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    assert!(
        !out.contains("[4/4]"),
        "no step runs after a failure:\n{out}"
    );
    assert!(
        err.contains("tenure: step 3 (expect-cleanup) failed"),
        "{err}"
    );

    // A script that does not parse is refused before any node starts.
    std::fs::write(
        project.join("typo.toml"),
        "plugin = \"wrong-expectation.wasm\"\n[[step]]\ndo = \"strat\"\n",
    )
    .unwrap();
    let output = tenure(&["plugin", "test", "typo.toml"], &project);
    let (out, err) = (stdout_of(&output), stderr_of(&output));
    assert_eq!(output.status.code(), Some(1), "{out}{err}");
    assert!(out.is_empty(), "nothing ran: {out}");
    assert!(
        err.contains("typo.toml") && err.contains("unknown variant `strat`"),
        "{err}"
    );
}

/// Issue 26 item 5: `tenure plugin test` with a recording HTTP server. The SDK's poller
/// GETs the recorder every 100 ms; the script checks after a start, a handover and a lease
/// lost while alive (a frozen owner) that every request carried its owner's
/// `tenure-token` and none of an owner arrived after a newer owner started. A plugin that
/// sends elsewhere fails `expect-requests`, saying what arrived. The manifest names a
/// secret file, which the test copies to its nodes (before, the nodes refused the plugin:
/// the file was missing in their folders).
#[test]
fn plugin_test_records_the_plugin_s_requests_and_checks_their_fence() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(dir.path().join("poller.wasm"), plugins().sdk_poller_bytes()).unwrap();
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/token"), "s3cret\n").unwrap();
    let manifest = |target: &str| {
        format!(
            "resource = \"poller\"\n[limits]\nstop_grace = \"200ms\"\ncleanup_timeout = \"1s\"\n\
             [capabilities]\nallowed_outbound_hosts = [\"http://127.0.0.1:{port}\", \"http://127.0.0.1:9\"]\n\
             env = {{ TARGET_URL = \"{target}\", INTERVAL_MS = \"100\" }}\n\
             secrets = {{ API_TOKEN = \"secrets/token\" }}\n"
        )
    };
    std::fs::write(
        dir.path().join("poller.toml"),
        manifest(&format!("http://127.0.0.1:{port}/hook")),
    )
    .unwrap();
    let script = format!(
        "plugin = \"poller.wasm\"\nrecord_http = \"127.0.0.1:{port}\"\n\
         [[step]]\ndo = \"start\"\n\
         [[step]]\ndo = \"expect-requests\"\n\
         [[step]]\ndo = \"handover\"\n\
         [[step]]\ndo = \"expect-requests\"\n\
         [[step]]\ndo = \"lose-lease\"\n\
         [[step]]\ndo = \"expect-cleanup\"\nreason = \"lease-lost\"\n\
         [[step]]\ndo = \"expect-requests\"\n\
         [[step]]\ndo = \"expect-tokens-increase\"\n"
    );
    std::fs::write(dir.path().join("test.toml"), &script).unwrap();
    let output = tenure_within(&["plugin", "test"], dir.path(), PLUGIN_TEST_WAIT);
    let (out, err) = (stdout_of(&output), stderr_of(&output));
    assert!(output.status.success(), "{out}{err}");
    for line in [
        &format!("recording HTTP requests to http://127.0.0.1:{port}\n"),
        "[2/8] expect-requests: ok: ",
        "[5/8] lose-lease: ok: froze ",
        "[7/8] expect-requests: ok: ",
        "none after a newer owner started",
        "passed: 8 steps in ",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }

    // Sending elsewhere (granted, but not the recorder): nothing arrives with the token.
    std::fs::write(
        dir.path().join("poller.toml"),
        manifest("http://127.0.0.1:9/hook"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("test.toml"),
        format!(
            "plugin = \"poller.wasm\"\nrecord_http = \"127.0.0.1:{port}\"\n\
             [[step]]\ndo = \"start\"\n\
             [[step]]\ndo = \"expect-requests\"\nwithin = \"2s\"\n"
        ),
    )
    .unwrap();
    let output = tenure_within(&["plugin", "test"], dir.path(), PLUGIN_TEST_WAIT);
    let (out, err) = (stdout_of(&output), stderr_of(&output));
    assert_eq!(output.status.code(), Some(1), "{out}{err}");
    assert!(out.contains("[2/2] expect-requests: FAILED\n"), "{out}");
    assert!(
        out.contains(&format!(
            "  expected: a request to 127.0.0.1:{port} carrying tenure-token "
        )),
        "{out}"
    );
    assert!(out.contains("0 request(s) in 2s, none with it"), "{out}");

    // A script that asks for requests without a recorder is refused before anything runs.
    std::fs::write(
        dir.path().join("test.toml"),
        "plugin = \"poller.wasm\"\n[[step]]\ndo = \"start\"\n[[step]]\ndo = \"expect-requests\"\n",
    )
    .unwrap();
    let output = tenure(&["plugin", "test"], dir.path());
    let err = stderr_of(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(
        err.contains("expect-requests needs a recording server"),
        "{err}"
    );
}

/// `--watch` builds and runs the script at once, and again when a source changes: here
/// the start loop's log line changes, and the rebuilt plugin fails the script that waits
/// for the old line; then it waits for the next change.
#[test]
fn plugin_test_watch_builds_and_runs_again_on_a_change() {
    let (_dir, project) = new_project("watched-task", "rust");
    std::fs::write(
        project.join("quick.toml"),
        "plugin = \"watched-task.wasm\"\nbuild = \"./build.sh\"\n\
         [[step]]\ndo = \"start\"\n\
         [[step]]\ndo = \"wait-log\"\nline = \"tick 1 token={token}\"\nwithin = \"10s\"\n",
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenure"));
    command
        .args(["plugin", "test", "--watch", "quick.toml"])
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", target_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut watcher = Watched::spawn(command);
    watcher.wait_for("[2/2] wait-log \"tick 1 token={token}\": ok: ", BUILD_WAIT);
    watcher.wait_for("passed: 2 steps", WAIT);
    watcher.wait_for("watching ", WAIT);

    let lib = project.join("src/lib.rs");
    let code = std::fs::read_to_string(&lib).unwrap();
    assert!(code.contains("\"tick {count} token={}\""), "{code}");
    std::fs::write(&lib, code.replace("\"tick {count}", "\"step {count}")).unwrap();
    watcher.wait_for("changed: building and testing again", WAIT);
    watcher.wait_for("[1/2] start: ok: ", BUILD_WAIT);
    watcher.wait_for("[2/2] wait-log \"tick 1 token={token}\": FAILED", WAIT);
    watcher.wait_for("step 2 (wait-log) failed", WAIT);
    watcher.wait_for("watching ", WAIT);
}

/// A `tenure plugin test --watch` process, its stdout read line by line; killed on drop.
struct Watched {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: String,
}

impl Watched {
    fn spawn(mut command: Command) -> Watched {
        let mut child = command
            .spawn()
            .expect("spawning tenure plugin test --watch");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Watched {
            child,
            lines,
            seen: String::new(),
        }
    }

    /// Waits for a line containing `needle` after the lines already waited past.
    fn wait_for(&mut self, needle: &str, bound: Duration) {
        let deadline = Instant::now() + bound;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push_str(&line);
                    self.seen.push('\n');
                    if line.contains(needle) {
                        return;
                    }
                }
                Err(e) => panic!("no line with {needle:?} ({e}); the output:\n{}", self.seen),
            }
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_new_python_project_builds_checks_and_runs() {
    made_project_builds_checks_and_runs("my-python-task", "python", "./build.sh", &[]);
}

#[test]
fn a_new_javascript_project_builds_checks_and_runs() {
    made_project_builds_checks_and_runs("my-js-task", "js", "npm", &["run", "build"]);
}

#[test]
fn a_project_is_not_written_over_an_existing_directory_nor_under_a_bad_name() {
    let dir = tempfile::tempdir().unwrap();
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("notes.txt"), "mine").unwrap();
    let output = tenure(&["plugin", "new", "taken", "--lang", "rust"], dir.path());
    assert!(!output.status.success());
    let err = stderr_of(&output);
    assert!(
        err.contains("taken: the directory exists and is not empty"),
        "{err}"
    );
    let output = tenure(&["plugin", "new", "My Task", "--lang", "js"], dir.path());
    assert!(!output.status.success());
    let err = stderr_of(&output);
    assert!(err.contains("use lowercase letters"), "{err}");
    let output = tenure(
        &["plugin", "new", "other", "--lang", "python", "--sdk", "/"],
        dir.path(),
    );
    assert!(!output.status.success());
    let err = stderr_of(&output);
    assert!(err.contains("not a Tenure checkout"), "{err}");
    // Nothing was written: the taken dir as it was, and nothing beside it.
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["taken"]);
    assert_eq!(
        std::fs::read_dir(&taken).unwrap().count(),
        1,
        "the taken dir is untouched"
    );
}

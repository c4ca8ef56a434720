//! Compiles off the node's critical path (issue 11), against the real binary and the real
//! Python and JavaScript components (built by plugins/counter-{py,js}/build.sh).
//!
//! - A Rust plugin in a folder with cold Python and JavaScript plugins starts before
//!   they finish compiling: each plugin starts as soon as its own version is ready; a
//!   second file with the same wasm shares the first one's compile and component.
//! - SIGTERM during a compile exits without waiting for it and leaves no cache entry.
//! - A node SIGKILLed during a compile takes its compiler process with it.
//! - The compiler's memory does not stay in the node.
//! - A manifest memory limit below the component's initial memory is refused at load.
//! - `tenure plugin check` reports size, imports, footprint, compile time and a limit.
//!
//! Every node here starts with its own, cold compile cache (on purpose: the compile is
//! what is under test), so the bounds are generous: two cores shared with other tests.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::*;

/// The bound for cold compiles of the Python and JavaScript components side by side on
/// a busy two-core machine (each takes about 4–5 s alone).
const COMPILE_WAIT: Duration = Duration::from_secs(240);

fn loaded(plugin: &str) -> impl Fn(&Value) -> bool {
    is("plugin.loaded").with("plugin", plugin).f()
}

/// A node whose folder holds `name.wasm` (the bytes of `wasm`) with a default manifest
/// for resource `name`, plus `extra` manifest lines under `[limits]`.
fn install(node: &Node, name: &str, wasm: &[u8], limits: &str) {
    node.install(
        &format!("{name}.toml"),
        format!(
            "resource = \"{name}\"\ntickets = 1\nversion = \"1.0.0\"\n\n[limits]\n\
             stop_grace = \"200ms\"\ncleanup_timeout = \"1s\"\n{limits}"
        ),
    );
    node.install(&format!("{name}.wasm"), wasm);
}

/// The files in the node's compile cache dir (entries and temporary files alike).
fn cache_files(node: &Node) -> Vec<String> {
    match std::fs::read_dir(node.data_dir().join("cache")) {
        Ok(dir) => dir
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The node's resident memory in KiB (VmRSS).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

#[test]
fn a_rust_plugin_starts_before_cold_python_and_javascript_plugins_finish_compiling() {
    let poly = polyglot_plugins();
    let mut node = Node::new("mixed");
    install(
        &node,
        "counter-py",
        &std::fs::read(&poly.counter_py).unwrap(),
        "",
    );
    install(
        &node,
        "counter-js",
        &std::fs::read(&poly.counter_js).unwrap(),
        "",
    );
    install(&node, "heartbeat", &plugins().heartbeat_bytes(), "");
    // The same wasm under a second name: one compile, one component for both.
    install(&node, "heartbeat-2", &plugins().heartbeat_bytes(), "");
    node.spawn();

    node.wait_for("the Python component", loaded("counter-py"), COMPILE_WAIT);
    node.wait_for(
        "the JavaScript component",
        loaded("counter-js"),
        COMPILE_WAIT,
    );
    let events = node.events();
    let position = |what: &str, f: &dyn Fn(&Value) -> bool| {
        events
            .iter()
            .position(f)
            .unwrap_or_else(|| panic!("no {what}\n{}", node.tail()))
    };
    let heartbeat = position(
        "start of heartbeat",
        &is("plugin.started").with("resource", "heartbeat").f(),
    );
    for plugin in ["counter-py", "counter-js"] {
        let at = position(plugin, &loaded(plugin));
        assert_eq!(
            events[at]["cache"], "miss",
            "a cold compile: {}",
            events[at]
        );
        // What placement counts against the node's pool (tests/polyglot.rs checks it
        // against the pool itself).
        let core_instances = if plugin == "counter-py" { 14 } else { 4 };
        assert_eq!(
            events[at]["core_instances"], core_instances,
            "{}",
            events[at]
        );
        assert!(
            heartbeat < at,
            "heartbeat started (event {heartbeat}) only after {plugin} finished compiling \
             (event {at})\n{}",
            node.tail()
        );
    }
    let heartbeats: Vec<&Value> = events
        .iter()
        .filter(|e| {
            is("plugin.loaded").matches(e) && str_field(e, "plugin").starts_with("heartbeat")
        })
        .collect();
    assert_eq!(heartbeats.len(), 2, "{}", node.tail());
    assert_eq!(
        heartbeats.iter().filter(|e| e["cache"] == "shared").count(),
        1,
        "the second file with the same wasm shares the first one's component: {heartbeats:?}"
    );
    let compiles = events
        .iter()
        .filter(|e| {
            is("plugin.compiling").matches(e) && str_field(e, "plugin").starts_with("heartbeat")
        })
        .count();
    assert_eq!(compiles, 1, "one compile for both heartbeat files");
    node.signal(libc::SIGTERM);
    assert!(node.wait_exit(WAIT).success());
}

#[test]
fn sigterm_during_a_compile_exits_without_waiting_and_leaves_no_cache_entry() {
    let mut node = compiling_python("sigterm");
    node.signal(libc::SIGTERM);
    let status = node.wait_exit(WAIT);
    assert!(status.success(), "the node exits 0 on SIGTERM: {status}");
    let events = node.events();
    assert!(
        !events.iter().any(loaded("counter-py")),
        "the node waited for the compile to finish before exiting\n{}",
        node.tail()
    );
    assert!(events.iter().any(is("node.stopped").f()), "{}", node.tail());
    assert_eq!(
        cache_files(&node),
        Vec::<String>::new(),
        "an abandoned compile leaves nothing in the cache dir"
    );
}

#[test]
fn the_node_gives_the_compilers_memory_back_after_a_python_compile() {
    let poly = polyglot_plugins();
    let mut node = Node::new("rss");
    install(
        &node,
        "counter-py",
        &std::fs::read(&poly.counter_py).unwrap(),
        "",
    );
    node.spawn();
    let at = node.wait_for("the Python component", loaded("counter-py"), COMPILE_WAIT);
    assert_eq!(at["cache"], "miss", "a cold compile: {at}");
    let rss = rss_kib(node.pid());
    eprintln!("node VmRSS after a cold Python compile: {} MiB", rss / 1024);
    assert!(
        rss < 200 * 1024,
        "the node holds {} MiB after a Python compile",
        rss / 1024
    );
    node.signal(libc::SIGTERM);
    assert!(node.wait_exit(WAIT).success());
}

#[test]
fn a_memory_limit_below_the_components_initial_memory_is_refused_at_load() {
    let poly = polyglot_plugins();
    let mut node = Node::new("small-limit");
    node.share_compile_cache(&poly.compile_cache);
    // The Python component's main memory starts at about 12 MiB.
    install(
        &node,
        "counter-py",
        &std::fs::read(&poly.counter_py).unwrap(),
        "memory = \"8MiB\"\n",
    );
    node.spawn();
    let rejected = node.wait_for(
        "the plugin to be refused",
        is("catalog.rejected").with("plugin", "counter-py").f(),
        COMPILE_WAIT,
    );
    let error = str_field(&rejected, "error");
    assert!(
        error.contains("limits.memory") && error.contains("initial memory"),
        "the error names the limit and the component's initial memory: {error}"
    );
    node.wait_for("the node to be ready", is("node.ready").f(), WAIT);
    assert_eq!(
        node.count(is("plugin.started").f()),
        0,
        "a refused plugin never starts\n{}",
        node.tail()
    );
    node.signal(libc::SIGTERM);
    assert!(node.wait_exit(WAIT).success());
}

#[test]
fn plugin_check_reports_size_imports_footprint_compile_time_and_a_limit() {
    let poly = polyglot_plugins();
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("counter-py.wasm");
    std::fs::copy(&poly.counter_py, &wasm).unwrap();
    // Not `tenure()`: its bound does not cover a Python compile on a busy machine.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["plugin", "check", wasm.to_str().unwrap()])
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawning tenure plugin check");
    let deadline = std::time::Instant::now() + COMPILE_WAIT;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("tenure plugin check did not exit within {COMPILE_WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for field in [
        "size",
        "compiled",
        "imports",
        "footprint",
        "memories",
        "suggested",
    ] {
        assert!(stdout.contains(field), "no {field:?} in:\n{stdout}");
    }
    // A Python instance makes 14 core instances: they, not the 3,600 instances, bound
    // how many fit a node (14,400 / 14).
    assert!(
        stdout.contains("core instances 14,"),
        "the core instances in:\n{stdout}"
    );
    assert!(
        stdout.contains(
            "per node   1,028 instances of it at most (placement gives a node 14,400 core \
             instances, 14 per instance)"
        ),
        "how many fit a node, in:\n{stdout}"
    );
    let compiled = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("compiled"))
        .unwrap_or_default();
    assert!(
        compiled.contains(" once,"),
        "the check compiles once:\n{stdout}"
    );
}

/// The pids of the running processes whose command line holds `needle` (a /proc scan).
/// A zombie (exited, not yet reaped by whoever adopted it) has an empty command line, so
/// it is not counted: it holds no memory and burns no CPU.
fn processes_with(needle: &str) -> Vec<u32> {
    let Ok(proc) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| String::from_utf8_lossy(&line).contains(needle))
        })
        .collect()
}

/// How many bytes process `pid` has read so far (`rchar` in /proc/PID/io; 0 once gone).
fn bytes_read(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("rchar:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A node SIGKILLed during a compile cannot kill its compiler process (`kill_on_drop`
/// never runs): the child must notice and die by itself, not compile on for minutes with
/// up to 4 GiB.
#[test]
fn a_compiler_process_dies_with_a_node_killed_during_the_compile() {
    let mut node = compiling_python("orphan");
    // The child's command line is `tenure __compile <data dir>/cache/<digest>`: the data
    // dir is this test's own, so no other test's compiler matches.
    let needle = node.data_dir().join("cache").display().to_string();
    let found = std::time::Instant::now() + WAIT;
    let children = loop {
        let pids = processes_with(&needle);
        if !pids.is_empty() {
            break pids;
        }
        assert!(
            std::time::Instant::now() < found,
            "no compiler process with {needle} in its command line\n{}",
            node.tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Killed while the node still feeds it the wasm, the child would read a truncated
    // input and fail by itself: wait until it has read the key and all of the wasm, and
    // so compiles (`rchar` counts every byte its reads returned).
    let wasm_len = std::fs::metadata(&polyglot_plugins().counter_py)
        .unwrap()
        .len();
    let fed = std::time::Instant::now() + COMPILE_WAIT;
    while children.iter().map(|pid| bytes_read(*pid)).max() < Some(32 + wasm_len) {
        assert!(
            std::time::Instant::now() < fed,
            "the compiler process never read its input\n{}",
            node.tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !node.events().iter().any(loaded("counter-py")),
        "the compile ended before the node could be killed: the test proves nothing"
    );
    node.kill();
    let killed = std::time::Instant::now();
    // Generous: the child only has to notice; a Python compile alone takes seconds.
    let gone = killed + Duration::from_secs(30);
    loop {
        let left = processes_with(&needle);
        if left.is_empty() {
            eprintln!(
                "[orphan] the compiler process was gone {:?} after the node's SIGKILL",
                killed.elapsed()
            );
            break;
        }
        if std::time::Instant::now() > gone {
            for pid in &left {
                // SAFETY: kill only sends a signal; these are the orphans this test made.
                unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
            }
            panic!(
                "the compiler process {left:?} (was {children:?}) still ran 30 s after its \
                 node was killed"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The compiler process refuses to run for a node that is not its parent (the node died
/// before the child asked to die with it: the death signal would never come), or when
/// no node handed it a pid at all; it writes nothing either way.
#[test]
fn a_compiler_process_whose_node_is_gone_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("entry.cwasm");
    let run = |parent: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"));
        command
            .arg("__compile")
            .arg(&out)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if let Some(pid) = parent {
            command.env("TENURE_COMPILE_PARENT", pid);
        }
        let output = command.output().expect("running tenure __compile");
        (
            output.status,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    // Pid 1 is never this test: as if the node had died and the child been adopted.
    let (status, stderr) = run(Some("1"));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is gone"), "{stderr}");
    let (status, stderr) = run(None);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("run by the node only"), "{stderr}");
    assert!(!out.exists(), "nothing is written");
}

/// A node of its own, named `name`, with the Python counter in its folder and a cold
/// cache: spawned, and compiling it.
fn compiling_python(name: &str) -> Node {
    let mut node = Node::new(name);
    install(
        &node,
        "counter-py",
        &std::fs::read(&polyglot_plugins().counter_py).unwrap(),
        "",
    );
    node.spawn();
    node.wait_for(
        "the compile to begin",
        is("plugin.compiling").with("plugin", "counter-py").f(),
        WAIT,
    );
    node
}

/// Issue 29: a second plugin compiles only the functions it does not share with the
/// first, which the incremental cache in the data dir keeps across a restart; a plugin
/// loaded from the compile cache compiles nothing.
#[test]
fn a_second_plugin_reuses_the_functions_the_first_one_compiled_across_a_restart() {
    let plugins = plugins();
    let mut node = Node::new("incremental");
    install(&node, "heartbeat", &plugins.heartbeat_bytes(), "");
    node.spawn();
    let first = node.wait_for("heartbeat's compile", loaded("heartbeat"), COMPILE_WAIT);
    assert_eq!(first["cache"], "miss", "{first}");
    assert!(u64_field(&first, "compiled_functions") > 0, "{first}");
    let incremental = node.data_dir().join("incremental");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&incremental).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o700, "the incremental cache is owner-only");
    let packs = std::fs::read_dir(&incremental).unwrap().count();
    assert_eq!(packs, 1, "one pack for the one compile");

    node.restart();
    let warm = node.wait_for("heartbeat from the cache", loaded("heartbeat"), WAIT);
    assert_eq!(warm["cache"], "hit", "{warm}");
    assert_eq!(u64_field(&warm, "compiled_functions"), 0, "{warm}");
    // Another Rust plugin: std's formatting, allocator and panic machinery are the same
    // functions as heartbeat's.
    install(&node, "counter", &plugins.counter_bytes(), "");
    let second = node.wait_for("counter's compile", loaded("counter"), COMPILE_WAIT);
    assert_eq!(second["cache"], "miss", "{second}");
    assert!(
        u64_field(&second, "reused_functions") > 0,
        "nothing of heartbeat's compile was reused: {second}"
    );
    node.signal(libc::SIGTERM);
    assert!(node.wait_exit(WAIT).success());
}

/// `[compile] incremental_cache_mib = 0` turns the incremental cache off: every compile
/// compiles everything, and nothing is written for it.
#[test]
fn an_incremental_cache_of_zero_mib_is_off() {
    let plugins = plugins();
    let mut node = Node::new("incremental-off");
    let config = node.dir().join("tenure.toml");
    std::fs::write(
        &config,
        "listen = \"127.0.0.1:0\"\n[compile]\nincremental_cache_mib = 0\n",
    )
    .unwrap();
    node.set_config(config);
    install(&node, "heartbeat", &plugins.heartbeat_bytes(), "");
    node.spawn();
    let first = node.wait_for("heartbeat's compile", loaded("heartbeat"), COMPILE_WAIT);
    install(&node, "counter", &plugins.counter_bytes(), "");
    let second = node.wait_for("counter's compile", loaded("counter"), COMPILE_WAIT);
    for loaded in [first, second] {
        assert_eq!(loaded["cache"], "miss", "{loaded}");
        assert_eq!(u64_field(&loaded, "reused_functions"), 0, "{loaded}");
    }
    assert!(!node.data_dir().join("incremental").exists());
    node.signal(libc::SIGTERM);
    assert!(node.wait_exit(WAIT).success());
}

/// A node where no /proc is mounted (a bare chroot) cannot start its compiler, which it
/// runs as /proc/self/exe; the rejection says /proc is missing, not that the file
/// /proc/self/exe is (issue 28). /proc is hidden under an empty tmpfs in a mount
/// namespace of the node's own (needs root and util-linux's `unshare`).
#[test]
fn a_node_without_proc_says_proc_is_not_mounted() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: hiding /proc in a mount namespace needs root");
        return;
    }
    let mut node = Node::new("no-proc");
    node.set_wrapper(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -t tmpfs none /proc && exec \"$0\" \"$@\"",
        ]
        .map(Into::into)
        .to_vec(),
    );
    node.install("heartbeat.wasm", plugins().heartbeat_bytes());
    node.spawn();
    let rejected = node.wait_for(
        "catalog.rejected",
        is("catalog.rejected").with("plugin", "heartbeat").f(),
        WAIT,
    );
    assert_eq!(
        rejected["error"],
        "cannot compile: cannot start the compiler process: /proc is not mounted (the node \
         runs its compiler as /proc/self/exe, its own binary); mount /proc where the node \
         runs, as container runtimes do",
        "{rejected}"
    );
    node.signal(libc::SIGTERM);
    assert!(node.wait_exit(WAIT).success(), "{}", node.tail());
}

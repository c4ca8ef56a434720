//! The node as a whole, seen from outside: what survives a restart (the resource's state,
//! the compile cache, the growth of fencing tokens), the order of a clean shutdown with
//! several plugins, the shape of the JSON event log, and strict config parsing.

mod support;

use serde_json::Value;
use support::*;

#[test]
fn state_survives_a_restart() {
    let mut node = Node::new("state");
    node.install("counter.wasm", plugins().counter_bytes());
    node.spawn();

    eprintln!("phase: count to at least 2");
    let first_start = node.wait_for(
        "counter started",
        is("plugin.started").with("resource", "counter").f(),
        WAIT,
    );
    node.wait_for("count=2", log_starting("counter", "count=2 "), WAIT);
    node.signal(libc::SIGINT);
    assert!(node.wait_exit(WAIT).success(), "{}", node.tail());
    let before = counts(&node.events());
    let last_before = *before.iter().max().expect("counts before the restart");
    assert_eq!(
        before,
        (1..=last_before).collect::<Vec<_>>(),
        "the first run counts up from 1"
    );

    eprintln!("phase: restart on the same data dir; the count goes on");
    node.restart();
    let second_start = node.wait_for(
        "counter started again",
        is("plugin.started").with("resource", "counter").f(),
        WAIT,
    );
    assert!(
        token(&second_start) > token(&first_start),
        "fencing tokens grow across restarts: {} then {}",
        token(&first_start),
        token(&second_start)
    );
    let first_after = node.wait_for(
        "a count after the restart",
        log_starting("counter", "count="),
        WAIT,
    );
    let n = count_of(&first_after).expect("a count");
    assert!(
        n > last_before,
        "the count restarted at {n}, the last saved was {last_before}"
    );
    node.signal(libc::SIGINT);
    assert!(node.wait_exit(WAIT).success());
}

/// The node's threads by name (`comm`, at most 15 bytes), each with its nice value.
fn threads_of(pid: u32) -> Vec<(String, i32)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("the node's threads") {
        let dir = task.unwrap().path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue; // the thread ended meanwhile
        };
        // After the name in parentheses: state, then fields 4.. ; nice is field 19.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .collect();
        threads.push((comm.trim().to_owned(), fields[16].parse().unwrap()));
    }
    threads
}

/// Plugin code runs on threads ten nice levels below the node's runtime, where Raft's
/// heartbeats and the lease renewals run: a busy plugin (or ten thousand starting) yields
/// the cores to them.
#[test]
fn plugins_run_on_threads_that_yield_the_cpu_to_the_control_plane() {
    let mut node = Node::new("priority");
    node.install("counter.wasm", plugins().counter_bytes());
    node.spawn();
    node.wait_for("a count", log_starting("counter", "count="), WAIT);
    let threads = threads_of(node.pid());
    let nice_of = |name: &str| -> Vec<i32> {
        threads
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, nice)| *nice)
            .collect()
    };
    let (control, plugin) = (nice_of("tokio-rt-worker"), nice_of("tenure-plugin"));
    assert!(
        !control.is_empty() && !plugin.is_empty(),
        "threads: {threads:?}"
    );
    assert!(
        control.iter().all(|&n| n == 0),
        "the node's runtime threads: {threads:?}"
    );
    assert!(
        plugin.iter().all(|&n| n == 10),
        "the plugin threads run 10 nice levels lower: {threads:?}"
    );
    node.signal(libc::SIGINT);
    assert!(node.wait_exit(WAIT).success());
}

#[test]
fn compiled_plugins_are_cached_across_restarts() {
    let mut node = Node::new("cache");
    node.install("heartbeat.wasm", plugins().heartbeat_bytes());
    node.spawn();

    let first = node.wait_for(
        "plugin.loaded",
        is("plugin.loaded").with("plugin", "heartbeat").f(),
        WAIT,
    );
    assert_eq!(
        first["cache"], "miss",
        "a fresh data dir has no cache: {first}"
    );
    node.wait_for(
        "heartbeat started",
        is("plugin.started").with("resource", "heartbeat").f(),
        WAIT,
    );
    node.signal(libc::SIGINT);
    assert!(node.wait_exit(WAIT).success());

    eprintln!("phase: restart; the same wasm is loaded from the cache");
    node.restart();
    let second = node.wait_for(
        "plugin.loaded again",
        is("plugin.loaded").with("plugin", "heartbeat").f(),
        WAIT,
    );
    assert_eq!(second["cache"], "hit", "{second}");
    assert_eq!(second["digest"], first["digest"], "same bytes, same digest");
    node.wait_for(
        "heartbeat started from the cache",
        is("plugin.started").with("resource", "heartbeat").f(),
        WAIT,
    );
    node.signal(libc::SIGINT);
    assert!(node.wait_exit(WAIT).success());
}

#[test]
fn clean_shutdown_cleans_up_every_plugin_before_the_node_stops() {
    let mut node = Node::new("shutdown");
    node.install("heartbeat.wasm", plugins().heartbeat_bytes());
    node.install("counter.wasm", plugins().counter_bytes());
    node.install_fixture("cooperative", FAST_LIMITS);
    node.install_fixture("returns", FAST_LIMITS);
    node.spawn();

    eprintln!("phase: four plugins start");
    let ready = node.wait_for("node.ready", is("node.ready").f(), WAIT);
    for resource in ["heartbeat", "counter", "cooperative", "returns"] {
        node.wait_for(
            &format!("{resource} started"),
            is("plugin.started").with("resource", resource).f(),
            WAIT,
        );
    }
    node.wait_for(
        "returns returned",
        is("plugin.stopped").with("resource", "returns").f(),
        WAIT,
    );

    eprintln!("phase: SIGTERM");
    node.signal(libc::SIGTERM);
    let status = node.wait_exit(WAIT);
    assert!(status.success(), "exit status {status}\n{}", node.tail());
    let events = node.events();
    assert_every_start_cleaned_up(&events);
    for (_, cleanup) in all(&events, is("plugin.cleanup").f()) {
        assert_eq!(cleanup["reason"], "shutdown", "{cleanup}");
        assert_eq!(cleanup["outcome"], "ok", "{cleanup}");
    }
    assert_eq!(node.count(is("plugin.cleanup").f()), 4);

    eprintln!("phase: the event log's order and shape");
    let started_at = events
        .iter()
        .position(|e| is("node.started").matches(e))
        .expect("node.started");
    let stopped_at = events
        .iter()
        .position(|e| is("node.stopped").matches(e))
        .expect("node.stopped");
    assert!(started_at < index_of(&events, &ready));
    let stopped = &events[stopped_at];
    assert_eq!(stopped["node"], ready["node"], "{stopped}");
    assert!(
        events[stopped_at + 1..]
            .iter()
            .all(|e| !e["event"].as_str().unwrap_or("").starts_with("plugin.")),
        "plugin events after node.stopped"
    );
    let node_started = &events[started_at];
    assert!(node_started["data_dir"].is_string(), "{node_started}");
    assert!(node_started["plugins_dir"].is_string(), "{node_started}");
    for (stream, line) in node.lines() {
        if stream != Stream::Stdout {
            continue;
        }
        let event: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("a stdout line is not JSON ({e}): {line}"));
        // Every line Tenure writes names its event (docs/design.md §3, "Event log").
        for key in ["timestamp", "level", "event", "message"] {
            assert!(event[key].is_string(), "no string `{key}`: {line}");
        }
        assert!(
            str_field(&event, "timestamp").ends_with('Z'),
            "timestamps are UTC: {line}"
        );
        timestamp_us(&event);
        assert!(
            ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&str_field(&event, "level")),
            "{line}"
        );
    }
}

#[test]
fn an_unknown_config_key_is_an_error_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tenure.toml");
    std::fs::write(&config, "bogus = 1\n").unwrap();
    let config = config.to_str().unwrap();
    let output = tenure(&["run", "--config", config], dir.path());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !output.status.success(),
        "the node accepted `bogus`:\n{said}"
    );
    assert!(
        said.contains("bogus") && said.contains(config),
        "the error names the key and the file:\n{said}"
    );
}

/// The names, sizes and contents of the files directly in `dir` (not `raft.redb`, which a
/// live node itself keeps writing).
fn files_of(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .map(|name| {
            let contents = if name == "raft.redb" {
                Vec::new()
            } else {
                std::fs::read(dir.join(&name)).unwrap_or_default()
            };
            (name, contents)
        })
        .collect()
}

fn said(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn a_node_refused_on_a_live_node_s_data_dir_says_so_and_changes_nothing_there() {
    let mut live = Node::new("live");
    live.spawn();
    live.wait_for("node.started", is("node.started").f(), WAIT);
    let before = files_of(&live.data_dir());
    let other = tempfile::tempdir().unwrap();
    let data = live.data_dir();
    let output = tenure(
        &[
            "run",
            "--data-dir",
            data.to_str().unwrap(),
            "--plugins-dir",
            other.path().join("plugins").to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        other.path(),
    );
    let said = said(&output);
    assert!(!output.status.success(), "a second node started:\n{said}");
    assert!(
        said.contains("another node") && said.contains(data.to_str().unwrap()),
        "the error names the shared data dir:\n{said}"
    );
    assert_eq!(
        files_of(&live.data_dir()),
        before,
        "the refused node changed the live node's data dir"
    );
    assert!(live.alive(), "the live node died");
}

#[test]
fn a_node_that_cannot_bind_its_address_creates_nothing() {
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (data, plugins) = (dir.path().join("data"), dir.path().join("plugins"));
    let output = tenure(
        &[
            "run",
            "--data-dir",
            data.to_str().unwrap(),
            "--plugins-dir",
            plugins.to_str().unwrap(),
            "--listen",
            &addr,
        ],
        dir.path(),
    );
    let said = said(&output);
    assert!(!output.status.success(), "the node started:\n{said}");
    assert!(said.contains(&addr), "the error names the address:\n{said}");
    assert!(
        !data.exists() && !plugins.exists(),
        "a refused start created its folders:\n{said}"
    );
}

#[test]
fn a_node_whose_certificate_is_missing_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tenure.toml");
    std::fs::write(
        &config,
        "name = \"n1\"\nlisten = \"127.0.0.1:0\"\ndata_dir = \"data\"\nplugins_dir = \"plugins\"\n\
         [tls]\nca = \"ca.pem\"\ncert = \"n1.pem\"\nkey = \"n1.key\"\n",
    )
    .unwrap();
    let output = tenure(&["run", "--config", config.to_str().unwrap()], dir.path());
    let said = said(&output);
    assert!(!output.status.success(), "the node started:\n{said}");
    assert!(said.contains("n1.pem"), "the error names the file:\n{said}");
    assert!(
        !dir.path().join("data").exists() && !dir.path().join("plugins").exists(),
        "a refused start created its folders:\n{said}"
    );
}

/// A node named n1 given n2's certificate (or an operator's) would start and then fail
/// every handshake; it is refused at once, told which certificate carries which name and
/// the two ways out, and creates nothing.
#[test]
fn a_node_whose_certificate_names_another_is_told_both_fixes_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ok = |args: &[&str]| {
        let output = tenure(args, dir.path());
        assert!(output.status.success(), "{args:?}: {}", said(&output));
    };
    ok(&["certs", "init", "--out", "ca"]);
    ok(&["certs", "issue", "--ca", "ca", "--node", "n2", "--out", "."]);
    ok(&[
        "certs",
        "issue",
        "--ca",
        "ca",
        "--operator",
        "ops",
        "--out",
        ".",
    ]);
    for (cert, carries) in [("n2", "node n2"), ("ops", "operator ops")] {
        let config = dir.path().join("tenure.toml");
        std::fs::write(
            &config,
            format!(
                "name = \"n1\"\nlisten = \"127.0.0.1:0\"\ndata_dir = \"data\"\n\
                 plugins_dir = \"plugins\"\n[tls]\nca = \"ca/ca.pem\"\ncert = \"{cert}.pem\"\n\
                 key = \"{cert}.key\"\n"
            ),
        )
        .unwrap();
        let output = tenure(&["run", "--config", config.to_str().unwrap()], dir.path());
        let said = said(&output);
        println!("{said}");
        assert!(!output.status.success(), "the node started:\n{said}");
        assert!(
            said.contains(&format!("{cert}.pem")) && said.contains(carries),
            "the error says which certificate carries which name:\n{said}"
        );
        assert!(
            said.contains("tenure certs issue") && said.contains("--node n1"),
            "and how to get a certificate for n1:\n{said}"
        );
        assert!(
            !dir.path().join("data").exists() && !dir.path().join("plugins").exists(),
            "a refused start created its folders:\n{said}"
        );
    }
}

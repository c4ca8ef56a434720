//! The plugins folder, seen from outside: a running node picks up added, changed and
//! removed plugins; it reports bad files (broken wasm, core modules, components of another
//! world, bad manifests) and carries on; and `tenure plugin check` says the same about a
//! file before it is installed.

mod support;

use serde_json::Value;
use support::*;

/// A core wasm module: the magic and version 1, nothing else. Valid wasm, not a component.
const CORE_MODULE: &[u8] = b"\0asm\x01\0\0\0";

/// An empty component (magic, version 0x0d, layer 1): a valid component that exports
/// neither `start` nor `cleanup`, so it is not of the `owned-task` world.
const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

/// A running node with an empty plugins folder, past its initial scan.
fn ready_node(name: &str) -> Node {
    let mut node = Node::new(name);
    node.spawn();
    let ready = node.wait_for("node.ready", is("node.ready").f(), WAIT);
    let plugins = &ready["plugins"];
    assert!(
        *plugins == 0 || plugins.as_array().is_some_and(Vec::is_empty),
        "the folder is empty: {ready}"
    );
    node
}

fn started(resource: &str) -> impl Fn(&Value) -> bool {
    is("plugin.started").with("resource", resource).f()
}

/// A `catalog.rejected` event whose path is the given file in the plugins folder.
fn rejected(node: &Node, file_name: &str) -> impl Fn(&Value) -> bool + use<> {
    let dir = node.plugins_dir();
    let file_name = file_name.to_string();
    move |e| {
        e["event"] == "catalog.rejected"
            && e["path"].as_str().is_some_and(|p| {
                std::path::Path::new(p).file_name() == Some(file_name.as_ref())
                    && std::path::Path::new(p)
                        .parent()
                        .is_some_and(|parent| same_dir(parent, &dir))
            })
    }
}

/// Whether two paths name the same directory (the node may report it canonicalized).
fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    a == b || a.canonicalize().ok() == b.canonicalize().ok()
}

/// Checks a rejection event: level WARN or ERROR and a non-empty error, said once (not
/// again in the message) and on one line (a text log shows a newline as a literal `\n`).
fn assert_rejection(event: &Value) {
    assert!(
        event["level"] == "WARN" || event["level"] == "ERROR",
        "a rejection is a warning or an error: {event}"
    );
    let error = event["error"].as_str().unwrap_or_default();
    assert!(!error.is_empty(), "a rejection says what is wrong: {event}");
    assert!(
        !message(event).contains(error),
        "the error is said twice, in the message and its field: {event}"
    );
    assert!(!error.contains('\n'), "the error spans lines: {event}");
}

/// Installs heartbeat under `name` and waits for it to start: proof the node still works.
fn assert_still_serving(node: &Node, name: &str) {
    node.install(&format!("{name}.wasm"), plugins().heartbeat_bytes());
    let start = node.wait_for("a valid plugin to start", started(name), WAIT);
    node.wait_for(
        "its first tick",
        log_exact(name, &format!("tick 1 token={}", token(&start))),
        WAIT,
    );
    assert_eq!(node.count(is("node.stopped").f()), 0);
}

#[test]
fn hot_add_starts_a_new_plugin() {
    let mut node = ready_node("hot-add");
    eprintln!("phase: install heartbeat into the running node");
    node.install("heartbeat.wasm", plugins().heartbeat_bytes());
    let loaded = node.wait_for(
        "plugin.loaded",
        is("plugin.loaded").with("plugin", "heartbeat").f(),
        WAIT,
    );
    assert!(
        loaded["digest"].as_str().is_some_and(|d| !d.is_empty()),
        "{loaded}"
    );
    assert!(loaded["load_us"].is_u64(), "{loaded}");
    let acquired = node.wait_for(
        "ownership.acquired",
        is("ownership.acquired").with("resource", "heartbeat").f(),
        WAIT,
    );
    let start = node.wait_for("plugin.started", started("heartbeat"), WAIT);
    assert_eq!(start["plugin"], "heartbeat", "{start}");
    assert_eq!(start["token"], acquired["token"], "{start} vs {acquired}");
    node.wait_for(
        "the first tick",
        log_exact("heartbeat", &format!("tick 1 token={}", token(&start))),
        WAIT,
    );
    node.signal(libc::SIGINT);
    assert!(node.wait_exit(WAIT).success());
}

#[test]
fn hot_update_cleans_up_the_old_version_before_starting_the_new() {
    let mut node = Node::new("hot-update");
    node.install_fixture("cooperative", FAST_LIMITS);
    node.spawn();

    eprintln!("phase: the misbehave build runs as `cooperative`");
    let old = node.wait_for("the old version started", started("cooperative"), WAIT);
    let old_token = token(&old);
    node.wait_for(
        "the old version ticking",
        log_exact("cooperative", &format!("tick token={old_token}")),
        WAIT,
    );
    let old_loaded = node.wait_for(
        "the old plugin.loaded",
        is("plugin.loaded").with("plugin", "cooperative").f(),
        WAIT,
    );

    eprintln!("phase: replace cooperative.wasm with the heartbeat build");
    node.install("cooperative.wasm", plugins().heartbeat_bytes());
    let cleanup = node.wait_for(
        "the old version's cleanup",
        is("plugin.cleanup")
            .with("resource", "cooperative")
            .with("token", old_token)
            .f(),
        WAIT,
    );
    assert_eq!(cleanup["reason"], "plugin-updated", "{cleanup}");
    assert_eq!(cleanup["outcome"], "ok", "{cleanup}");
    node.wait_for(
        "the old instance's cleanup log line",
        log_exact(
            "cooperative",
            "cleanup reason=plugin-updated fresh_instance=false",
        ),
        WAIT,
    );
    let new = node.wait_for(
        "the new version started",
        |e| started("cooperative")(e) && e["token"].as_u64().is_some_and(|t| t > old_token),
        WAIT,
    );
    let new_token = token(&new);
    node.wait_for(
        "the new version (heartbeat) ticking",
        log_exact("cooperative", &format!("tick 1 token={new_token}")),
        WAIT,
    );

    let events = node.events();
    assert!(
        index_of(&events, &cleanup) < index_of(&events, &new),
        "the new version started before the old one was cleaned up"
    );
    let stopped = all(&events, is("plugin.stopped").with("token", old_token).f())
        .next()
        .map(|(_, e)| e.clone())
        .expect("the old version's plugin.stopped");
    assert_eq!(stopped["outcome"], "stopped", "{stopped}");
    let new_loaded = all(
        &events,
        is("plugin.loaded").with("plugin", "cooperative").f(),
    )
    .map(|(_, e)| e)
    .last()
    .expect("the new plugin.loaded");
    assert_ne!(
        new_loaded["digest"], old_loaded["digest"],
        "the new version has a new digest"
    );
    node.signal(libc::SIGINT);
    assert!(node.wait_exit(WAIT).success());
    assert_cleanup_once_per_start(&node.events());
}

#[test]
fn hot_remove_stops_the_plugin_and_gives_the_slot_up() {
    let mut node = Node::new("hot-remove");
    // No manifest: the resource is the file stem, `cooperative`.
    node.install("cooperative.wasm", plugins().misbehave_bytes());
    node.spawn();
    let start = node.wait_for("started", started("cooperative"), WAIT);
    let t = token(&start);
    node.wait_for(
        "ticking",
        log_exact("cooperative", &format!("tick token={t}")),
        WAIT,
    );

    eprintln!("phase: remove cooperative.wasm");
    node.remove("cooperative.wasm");
    let cleanup = node.wait_for(
        "the cleanup",
        is("plugin.cleanup").with("token", t).f(),
        WAIT,
    );
    assert_eq!(cleanup["reason"], "plugin-removed", "{cleanup}");
    assert_eq!(cleanup["outcome"], "ok", "{cleanup}");
    node.wait_for(
        "the cleanup log line",
        log_exact(
            "cooperative",
            "cleanup reason=plugin-removed fresh_instance=false",
        ),
        WAIT,
    );
    let lost = node.wait_for(
        "ownership.lost",
        is("ownership.lost").with("resource", "cooperative").f(),
        WAIT,
    );
    assert_eq!(lost["token"], t, "{lost}");
    assert!(
        lost["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{lost}"
    );
    assert_eq!(node.count(started("cooperative")), 1);
    assert!(node.is_running());
    node.signal(libc::SIGINT);
    assert!(node.wait_exit(WAIT).success());
}

#[test]
fn invalid_wasm_is_rejected_and_the_node_keeps_running() {
    let node = ready_node("invalid-wasm");
    node.install("bad.wasm", b"this is not webassembly at all");
    let event = node.wait_for("bad.wasm rejected", rejected(&node, "bad.wasm"), WAIT);
    assert_rejection(&event);
    assert_still_serving(&node, "heartbeat");
}

#[test]
fn invalid_manifests_are_rejected_naming_the_file_and_the_key() {
    let node = ready_node("invalid-manifest");
    eprintln!("phase: a manifest with an unknown key");
    node.install(
        "unknown-key.toml",
        "resource = \"unknown-key\"\nbogus_key = 1\n",
    );
    node.install("unknown-key.wasm", plugins().heartbeat_bytes());
    let event = node.wait_for(
        "unknown-key.toml rejected",
        rejected(&node, "unknown-key.toml"),
        WAIT,
    );
    assert_rejection(&event);
    assert!(
        str_field(&event, "error").contains("bogus_key"),
        "the error names the key: {event}"
    );

    eprintln!("phase: a manifest with a bad duration");
    node.install(
        "bad-duration.toml",
        "resource = \"bad-duration\"\n\n[limits]\nstop_grace = \"soon\"\n",
    );
    node.install("bad-duration.wasm", plugins().heartbeat_bytes());
    let event = node.wait_for(
        "bad-duration.toml rejected",
        rejected(&node, "bad-duration.toml"),
        WAIT,
    );
    assert_rejection(&event);
    assert!(
        str_field(&event, "error").contains("stop_grace"),
        "the error names the key: {event}"
    );

    assert_still_serving(&node, "heartbeat");
}

#[test]
fn wasm_that_is_not_an_owned_task_component_is_rejected() {
    let node = ready_node("wrong-world");
    eprintln!("phase: a core module");
    node.install("core.wasm", CORE_MODULE);
    let event = node.wait_for("core.wasm rejected", rejected(&node, "core.wasm"), WAIT);
    assert_rejection(&event);

    eprintln!("phase: a component of another (empty) world");
    node.install("empty.wasm", EMPTY_COMPONENT);
    let event = node.wait_for("empty.wasm rejected", rejected(&node, "empty.wasm"), WAIT);
    assert_rejection(&event);

    assert_eq!(node.count(is("plugin.started").f()), 0);
    assert_still_serving(&node, "heartbeat");
}

#[test]
fn plugin_check_accepts_good_files_and_explains_bad_ones() {
    let plugins = plugins();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_string()
    };
    let heartbeat = file("heartbeat.wasm", &plugins.heartbeat_bytes());
    let good_manifest = file(
        "heartbeat.toml",
        b"resource = \"beat\"\ntickets = 1\nversion = \"1.2.3\"\n\n[limits]\nmemory = \"16MiB\"\nstop_grace = \"200ms\"\ncleanup_timeout = \"1s\"\nmax_restarts = 3\nrestart_window = \"5m\"\n",
    );
    let garbage = file("garbage.wasm", b"not wasm");
    let core = file("core.wasm", CORE_MODULE);
    let empty = file("empty.wasm", EMPTY_COMPONENT);
    let bad_manifest = file("bad.toml", b"resource = \"beat\"\nbogus_key = 1\n");
    let text = |output: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };

    eprintln!("phase: good component, with and without a manifest");
    let out = tenure(&["plugin", "check", &heartbeat], dir.path());
    assert!(out.status.success(), "check failed:\n{}", text(&out));
    assert!(!out.stdout.is_empty(), "check prints a summary");
    let out = tenure(
        &["plugin", "check", &heartbeat, "--manifest", &good_manifest],
        dir.path(),
    );
    assert!(out.status.success(), "check failed:\n{}", text(&out));

    eprintln!("phase: bad files");
    for (bad, why) in [
        (&garbage, "not wasm"),
        (&core, "a core module"),
        (&empty, "a component of another world"),
    ] {
        let out = tenure(&["plugin", "check", bad], dir.path());
        assert!(
            !out.status.success(),
            "check accepted {why}:\n{}",
            text(&out)
        );
        assert!(
            text(&out).contains(bad.as_str()),
            "the error names the file ({why}):\n{}",
            text(&out)
        );
    }
    let out = tenure(
        &["plugin", "check", &heartbeat, "--manifest", &bad_manifest],
        dir.path(),
    );
    assert!(!out.status.success(), "check accepted a bad manifest");
    let said = text(&out);
    assert!(
        said.contains(bad_manifest.as_str()) && said.contains("bogus_key"),
        "the error names the manifest and the key:\n{said}"
    );
    let missing = dir.path().join("missing.wasm");
    let out = tenure(&["plugin", "check", missing.to_str().unwrap()], dir.path());
    assert!(!out.status.success(), "check accepted a missing file");
}

#[test]
fn plugin_check_shows_the_capabilities_asked_for_and_granted() {
    let dir = tempfile::tempdir().unwrap();
    let webhook = dir.path().join("webhook.wasm");
    std::fs::write(&webhook, plugins().webhook_bytes()).unwrap();
    let webhook = webhook.to_str().unwrap();
    let stdout = |output: &std::process::Output| {
        assert!(
            output.status.success(),
            "check failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).to_string()
    };

    eprintln!("phase: no manifest: wasi:http imported, nothing granted");
    let said = stdout(&tenure(&["plugin", "check", webhook], dir.path()));
    assert!(
        said.contains("imported: wasi:http/outgoing-handler; granted: nothing"),
        "{said}"
    );
    assert!(
        said.contains("warning: imports wasi:http/outgoing-handler"),
        "{said}"
    );

    eprintln!("phase: a manifest granting a host, env and a secret");
    std::fs::write(dir.path().join("token"), "very-secret-value").unwrap();
    std::fs::write(
        dir.path().join("webhook.toml"),
        "[capabilities]\nallowed_outbound_hosts = [\"https://api.example.com\"]\n\
         env = { TARGET_URL = \"https://api.example.com/hook\" }\n\
         secrets = { API_TOKEN = \"token\" }\n",
    )
    .unwrap();
    let said = stdout(&tenure(&["plugin", "check", webhook], dir.path()));
    assert!(
        said.contains("granted: https://api.example.com:443"),
        "{said}"
    );
    assert!(said.contains("TARGET_URL, API_TOKEN (secret)"), "{said}");
    assert!(!said.contains("warning: imports wasi:http"), "{said}");
    assert!(!said.contains("very-secret-value"), "{said}");
}

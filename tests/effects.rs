//! Plugins acting on the world, seen from outside: the real `tenure` binary runs the
//! `webhook` example against a real HTTP server in this process ([`Recorder`]), and each
//! test checks one promise of a manifest's `[capabilities]` (DESIGN.md, "Plugins folder"
//! and "WIT world"): an allowed host receives requests stamped with the lease's fencing
//! token; a host not listed receives nothing and the plugin sees the refusal; a secret
//! reaches the plugin's environment and no log line; a missing secret file is reported
//! with its path while the node runs its other plugins.

mod support;

use serde_json::Value;
use support::recorder::Recorder;
use support::*;

/// Installs `webhook.wasm` with a manifest whose `[capabilities]` are `capabilities`.
fn install_webhook(node: &Node, capabilities: &str) {
    node.install(
        "webhook.toml",
        format!(
            "resource = \"webhook\"\n\n[limits]\n{FAST_LIMITS}\n[capabilities]\n{capabilities}"
        ),
    );
    node.install("webhook.wasm", plugins().webhook_bytes());
}

fn started(resource: &str) -> impl Fn(&Value) -> bool {
    is("plugin.started").with("resource", resource).f()
}

/// Stops the node with SIGINT and waits for it to exit cleanly.
fn shut_down(node: &mut Node) {
    node.signal(libc::SIGINT);
    let status = node.wait_exit(WAIT);
    assert!(
        status.success(),
        "the node exited with {status}\n{}",
        node.tail()
    );
}

#[test]
fn an_allowed_host_gets_requests_carrying_the_lease_and_the_secret_stays_out_of_the_log() {
    let server = Recorder::start();
    let mut node = Node::new("allowed");
    // A value no log line could contain by accident.
    let secret = format!("s3cret-{}", std::process::id());
    std::fs::create_dir(node.plugins_dir().join("secrets")).unwrap();
    std::fs::write(
        node.plugins_dir().join("secrets/api-token"),
        format!("{secret}\n"),
    )
    .unwrap();
    install_webhook(
        &node,
        &format!(
            "allowed_outbound_hosts = [\"{base}\"]\n\
             env = {{ TARGET_URL = \"{base}/hook\", INTERVAL_MS = \"100\" }}\n\
             secrets = {{ API_TOKEN = \"secrets/api-token\" }}\n",
            base = server.base()
        ),
    );
    node.spawn();

    eprintln!("phase: the webhook starts and posts");
    let start = node.wait_for("webhook started", started("webhook"), WAIT);
    let t = token(&start);
    let name = str_field(&start, "node").to_string();
    let requests = server.wait_for(3, WAIT);
    node.wait_for(
        "a posted log line",
        log_starting("webhook", "posted seq=1 status=200"),
        WAIT,
    );

    eprintln!("phase: every request carries the lease's fencing headers and the secret");
    for (i, request) in requests.iter().enumerate() {
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/hook");
        assert_eq!(
            request.header("tenure-token"),
            Some(t.to_string().as_str()),
            "{request:?}"
        );
        assert_eq!(
            request.header("tenure-resource"),
            Some("webhook"),
            "{request:?}"
        );
        assert_eq!(request.header("tenure-slot"), Some("0"), "{request:?}");
        assert_eq!(
            request.header("tenure-node"),
            Some(name.as_str()),
            "{request:?}"
        );
        let expected_auth = format!("Bearer {secret}");
        assert_eq!(
            request.header("authorization"),
            Some(expected_auth.as_str())
        );
        let body = request.json();
        assert_eq!(body["token"], t, "{body}");
        assert_eq!(body["resource"], "webhook", "{body}");
        assert_eq!(body["slot"], 0, "{body}");
        assert_eq!(body["node"], name.as_str(), "{body}");
        assert_eq!(body["seq"], i as u64 + 1, "{body}");
    }

    shut_down(&mut node);
    eprintln!("phase: the secret appears in no line the node wrote");
    for (_, line) in node.lines() {
        assert!(!line.contains(&secret), "the secret leaked into: {line}");
    }
}

#[test]
fn a_host_not_listed_gets_nothing_and_the_plugin_sees_the_refusal() {
    let allowed = Recorder::start();
    let other = Recorder::start();
    let mut node = Node::new("refused");
    install_webhook(
        &node,
        &format!(
            "allowed_outbound_hosts = [\"{}\"]\n\
             env = {{ TARGET_URL = \"{}/hook\", INTERVAL_MS = \"100\" }}\n",
            allowed.base(),
            other.base()
        ),
    );
    node.spawn();

    let start = node.wait_for("webhook started", started("webhook"), WAIT);
    let refusal = node.wait_for(
        "plugin.effect_refused",
        is("plugin.effect_refused").with("resource", "webhook").f(),
        WAIT,
    );
    assert_eq!(refusal["reason"], "not-allowed", "{refusal}");
    assert_eq!(refusal["effect"], "http", "{refusal}");
    assert_eq!(
        refusal["host"],
        format!("127.0.0.1:{}", other.port()),
        "{refusal}"
    );
    assert_eq!(refusal["token"], start["token"], "{refusal}");
    let logged = node.wait_for(
        "the plugin's third failed post, denied",
        |e| {
            log_starting("webhook", "post seq=3 failed: ")(e)
                && message(e).contains("HttpRequestDenied")
        },
        WAIT,
    );
    assert_eq!(logged["level"], "WARN", "{logged}");
    assert!(other.requests().is_empty(), "{:?}", other.requests());
    assert!(allowed.requests().is_empty());
    shut_down(&mut node);
    assert!(other.requests().is_empty(), "{:?}", other.requests());
}

#[test]
fn a_missing_secret_file_is_reported_with_its_path_and_the_other_plugins_run() {
    let mut node = Node::new("missing-secret");
    install_webhook(
        &node,
        "env = { TARGET_URL = \"http://127.0.0.1:9/hook\" }\n\
         secrets = { API_TOKEN = \"secrets/nowhere\" }\n",
    );
    node.install("heartbeat.wasm", plugins().heartbeat_bytes());
    node.spawn();

    let rejected = node.wait_for(
        "catalog.rejected for the secret file",
        |e| e["event"] == "catalog.rejected" && e["plugin"] == "webhook",
        WAIT,
    );
    let path = str_field(&rejected, "path");
    assert!(path.ends_with("plugins/secrets/nowhere"), "{rejected}");
    let error = str_field(&rejected, "error");
    assert!(
        error.contains("capabilities.secrets.API_TOKEN"),
        "{rejected}"
    );
    assert!(error.contains("secrets/nowhere"), "{rejected}");

    node.wait_for("heartbeat started", started("heartbeat"), WAIT);
    node.wait_for("a heartbeat", log_starting("heartbeat", "tick 2 "), WAIT);
    assert_eq!(node.count(started("webhook")), 0);

    eprintln!("phase: the secret file appears, and the webhook starts");
    std::fs::create_dir(node.plugins_dir().join("secrets")).unwrap();
    std::fs::write(node.plugins_dir().join("secrets/nowhere"), "now-here").unwrap();
    node.wait_for("webhook started", started("webhook"), WAIT);
    shut_down(&mut node);
}

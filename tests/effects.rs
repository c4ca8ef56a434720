//! Plugins acting on the world, seen from outside: the real `tenure` binary runs the
//! `webhook` example against a real HTTP server in this process ([`Recorder`]), and each
//! test checks one promise of a manifest's `[capabilities]` (docs/design.md §3, "Plugins folder"
//! and "WIT world"): an allowed host receives requests stamped with the lease's fencing
//! token; a host not listed receives nothing and the plugin sees the refusal; a secret
//! reaches the plugin's environment and no log line; a missing secret file is reported
//! with its path while the node runs its other plugins.

mod support;

use std::time::{Duration, Instant, SystemTime};

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

/// Waits until the webhook's instance under `old_token` cleaned up for `plugin-updated`
/// and the next one started under a higher token; returns that start.
fn updated_after(node: &Node, old_token: u64) -> Value {
    let cleanup = node.wait_for(
        "the old instance's cleanup",
        is("plugin.cleanup").with("token", old_token).f(),
        WAIT,
    );
    assert_eq!(cleanup["reason"], "plugin-updated", "{cleanup}");
    node.wait_for(
        "the next instance started",
        |e| started("webhook")(e) && e["token"].as_u64().is_some_and(|t| t > old_token),
        WAIT,
    )
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

/// Issue 26 item 6: a manifest change is a new version. Narrowing
/// `allowed_outbound_hosts` hands the running plugin over (cleanup `plugin-updated`, a
/// new token), the new version has a new digest, and from then on the withdrawn host is
/// refused. Before, the node reloaded the manifest under the same digest and the running
/// instance kept reaching the withdrawn host until an operator released it.
#[test]
fn narrowing_a_grant_hands_the_plugin_over_and_the_withdrawn_host_is_refused() {
    let server = Recorder::start();
    let mut node = Node::new("narrowed");
    let env = format!(
        "env = {{ TARGET_URL = \"{}/hook\", INTERVAL_MS = \"100\" }}\n",
        server.base()
    );
    install_webhook(
        &node,
        &format!("allowed_outbound_hosts = [\"{}\"]\n{env}", server.base()),
    );
    node.spawn();
    let old = node.wait_for("webhook started", started("webhook"), WAIT);
    let old_token = token(&old);
    server.wait_for(2, WAIT);
    let old_loaded = node.wait_for(
        "plugin.loaded",
        is("plugin.loaded").with("plugin", "webhook").f(),
        WAIT,
    );

    eprintln!("phase: the grant is withdrawn from the manifest");
    install_webhook(&node, &format!("allowed_outbound_hosts = []\n{env}"));
    let new_token = token(&updated_after(&node, old_token));
    let refusal = node.wait_for(
        "the withdrawn host refused",
        is("plugin.effect_refused").with("token", new_token).f(),
        WAIT,
    );
    assert_eq!(refusal["reason"], "not-allowed", "{refusal}");
    let seen = server.requests().len();
    node.wait_for(
        "the new instance's third post, denied",
        |e| {
            log_starting("webhook", "post seq=3 failed: ")(e)
                && e["token"].as_u64() == Some(new_token)
        },
        WAIT,
    );
    let events = node.events();
    let new_loaded = all(&events, is("plugin.loaded").with("plugin", "webhook").f())
        .map(|(_, e)| e)
        .last()
        .expect("the new plugin.loaded");
    assert_ne!(
        new_loaded["digest"], old_loaded["digest"],
        "the narrowed manifest is a new version"
    );
    shut_down(&mut node);
    let requests = server.requests();
    assert_eq!(
        requests.len(),
        seen,
        "requests after the refusal: {requests:?}"
    );
    for request in &requests {
        assert_eq!(
            request.header("tenure-token"),
            Some(old_token.to_string().as_str()),
            "only the old grant reached the host: {request:?}"
        );
    }
}

/// Issue 26 item 6: a secret's new value is used without ever entering the replicated
/// state. The version (digest) does not change, since the digest is replicated and a
/// hash of the value would let anyone who reads it check a guess; the node that runs
/// the plugin restarts its own instance instead (cleanup `plugin-updated`,
/// `plugin.files_changed`), and the next instance, under a new token, sends the new
/// value.
#[test]
fn a_new_secret_value_restarts_the_instance_under_the_same_version() {
    let server = Recorder::start();
    let mut node = Node::new("secret-changed");
    std::fs::create_dir(node.plugins_dir().join("secrets")).unwrap();
    let secret = node.plugins_dir().join("secrets/api-token");
    std::fs::write(&secret, "first\n").unwrap();
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
    let old = node.wait_for("webhook started", started("webhook"), WAIT);
    let old_token = token(&old);
    server.wait_for(2, WAIT);

    eprintln!("phase: the secret file gets a new value");
    let temp = node.plugins_dir().join("secrets/.api-token.partial");
    std::fs::write(&temp, "second\n").unwrap();
    std::fs::rename(&temp, &secret).unwrap();
    let changed = node.wait_for(
        "plugin.files_changed",
        is("plugin.files_changed").with("token", old_token).f(),
        WAIT,
    );
    assert_eq!(changed["resource"], "webhook", "{changed}");
    assert_eq!(changed["what"], "secrets", "{changed}");
    let new_token = token(&updated_after(&node, old_token)).to_string();
    let deadline = Instant::now() + WAIT;
    while !server
        .requests()
        .iter()
        .any(|r| r.header("tenure-token") == Some(new_token.as_str()))
    {
        assert!(
            Instant::now() < deadline,
            "no request from the next instance"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let events = node.events();
    let digests: Vec<&Value> = all(&events, is("plugin.loaded").with("plugin", "webhook").f())
        .map(|(_, e)| &e["digest"])
        .collect();
    assert_eq!(
        digests.len(),
        2,
        "loaded again for the new value: {digests:?}"
    );
    assert_eq!(
        digests[0], digests[1],
        "the version does not depend on the value"
    );
    shut_down(&mut node);
    for request in server.requests() {
        let auth = request.header("authorization");
        let token = request.header("tenure-token");
        if token == Some(new_token.as_str()) {
            assert_eq!(auth, Some("Bearer second"), "{request:?}");
        } else {
            assert_eq!(token, Some(old_token.to_string().as_str()), "{request:?}");
            assert_eq!(auth, Some("Bearer first"), "{request:?}");
        }
    }
}

/// Issue 28: a request to a granted host where nothing listens fails in the plugin as
/// before, and the node's line about it names the plugin, its resource, slot and the
/// host, with the error in words (before: `WARN connect error: Os { code: 111, kind:
/// ConnectionRefused, message: "Connection refused" }`, from wasmtime-wasi-http, naming
/// nothing).
#[test]
fn a_refused_connection_is_logged_with_the_plugin_and_the_host_in_words() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut node = Node::new("connect-refused");
    install_webhook(
        &node,
        &format!(
            "allowed_outbound_hosts = [\"{base}\"]\n\
             env = {{ TARGET_URL = \"{base}/hook\", INTERVAL_MS = \"100\" }}\n"
        ),
    );
    node.spawn();
    let start = node.wait_for("webhook started", started("webhook"), WAIT);
    node.wait_for(
        "the plugin's second failed post",
        log_starting("webhook", "post seq=2 failed: "),
        WAIT,
    );
    shut_down(&mut node);
    let events = node.events();
    let failures: Vec<&Value> = events
        .iter()
        .filter(|e| is("plugin.effect_failed").matches(e))
        .collect();
    assert!(
        failures.len() >= 2,
        "one plugin.effect_failed per failed post: {failures:?}\n{}",
        node.tail()
    );
    let host = base.trim_start_matches("http://");
    for failure in &failures {
        assert_eq!(failure["level"], "WARN", "{failure}");
        assert_eq!(failure["plugin"], "webhook", "{failure}");
        assert_eq!(failure["resource"], "webhook", "{failure}");
        assert_eq!(failure["slot"], 0, "{failure}");
        assert_eq!(failure["token"], start["token"], "{failure}");
        assert_eq!(failure["effect"], "http", "{failure}");
        assert_eq!(failure["host"], host, "{failure}");
        assert_eq!(
            failure["error"], "cannot connect: Connection refused (os error 111)",
            "{failure}"
        );
        assert_eq!(
            message(failure),
            format!(
                "an outbound HTTP request to {host} failed: cannot connect: Connection \
                 refused (os error 111)"
            )
        );
    }
    // Every line of Tenure's own carries `event`; a library's line does not.
    let unnamed: Vec<&Value> = events
        .iter()
        .filter(|e| e["level"] == "WARN" || e["level"] == "ERROR")
        .filter(|e| e.get("event").is_none())
        .collect();
    assert!(
        unnamed.is_empty(),
        "warnings of a library, naming no plugin: {unnamed:?}"
    );
}

/// The same for a raw TCP connection (wasi:sockets): a connect to a granted address where
/// nothing listens fails in the plugin, and the node's line names the plugin's grant and
/// the address (before: nothing was logged for it).
#[test]
fn a_refused_tcp_connection_is_logged_with_the_plugin_and_the_address() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap().to_string();
    drop(closed);
    let mut node = Node::new("tcp-refused");
    node.install(
        "tcp-hold.toml",
        format!(
            "resource = \"tcp-hold\"\n\n[limits]\n{FAST_LIMITS}\n[capabilities]\n\
             allowed_outbound_hosts = [\"tcp://{addr}\"]\n\
             env = {{ TCP_TARGET = \"{addr}\" }}\n"
        ),
    );
    node.install("tcp-hold.wasm", plugins().misbehave_bytes());
    node.spawn();
    node.wait_for(
        "the plugin's failed connect",
        log_starting("tcp-hold", "tcp connect failed: "),
        WAIT,
    );
    let failure = node.wait_for(
        "plugin.effect_failed",
        is("plugin.effect_failed").with("resource", "tcp-hold").f(),
        WAIT,
    );
    shut_down(&mut node);
    assert_eq!(failure["level"], "WARN", "{failure}");
    assert_eq!(failure["plugin"], "tcp-hold", "{failure}");
    assert_eq!(failure["slot"], 0, "{failure}");
    assert_eq!(failure["effect"], "tcp", "{failure}");
    assert_eq!(failure["host"], addr.as_str(), "{failure}");
    assert_eq!(failure["error"], "connection refused", "{failure}");
    assert_eq!(
        message(&failure),
        format!("an outbound TCP connection to {addr} failed: connection refused")
    );
}

/// Issue 26: plugins built against `tenure:plugin@0.1.0` (the `counter` and `webhook`
/// examples as built before 0.2.0, checked in under tests/fixtures/plugin-0.1.0) run
/// unchanged on this host: the webhook's requests carry its grant's token, the counter
/// saves its count through the 0.1.0 `state` import, and both stop cooperatively and
/// clean up with the right reason.
#[test]
fn plugins_built_for_0_1_0_run_unchanged() {
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/plugin-0.1.0");
    let fixture = |name: &str| std::fs::read(fixtures.join(name)).unwrap();
    let server = Recorder::start();
    let mut node = Node::new("v0-1-0");
    node.install(
        "webhook.toml",
        format!(
            "resource = \"webhook\"\n\n[limits]\n{FAST_LIMITS}\n[capabilities]\n\
             allowed_outbound_hosts = [\"{base}\"]\n\
             env = {{ TARGET_URL = \"{base}/hook\", INTERVAL_MS = \"100\" }}\n",
            base = server.base()
        ),
    );
    node.install("webhook.wasm", fixture("webhook.wasm"));
    node.install(
        "counter.toml",
        format!("resource = \"counter\"\n\n[limits]\n{FAST_LIMITS}"),
    );
    node.install("counter.wasm", fixture("counter.wasm"));
    node.spawn();

    eprintln!("phase: the 0.1.0 webhook posts, fenced by its token");
    let webhook = node.wait_for("webhook started", started("webhook"), WAIT);
    let t = token(&webhook);
    for request in server.wait_for(3, WAIT) {
        assert_eq!(
            request.header("tenure-token"),
            Some(t.to_string().as_str()),
            "{request:?}"
        );
        assert_eq!(request.json()["token"], t, "{request:?}");
    }

    eprintln!("phase: the 0.1.0 counter loads and saves its count");
    let counter = node.wait_for("counter started", started("counter"), WAIT);
    let c = token(&counter);
    node.wait_for(
        "the counter's third count",
        log_exact("counter", &format!("count=3 token={c}")),
        WAIT,
    );

    eprintln!("phase: both stop when asked and clean up on their instance");
    shut_down(&mut node);
    let events = node.events();
    for (resource, token) in [("webhook", t), ("counter", c)] {
        let stopped = events
            .iter()
            .find(|e| {
                is("plugin.stopped")
                    .with("resource", resource)
                    .with("token", token)
                    .matches(e)
            })
            .unwrap_or_else(|| panic!("no plugin.stopped for {resource}\n{}", node.tail()));
        assert_eq!(stopped["outcome"], "stopped", "{stopped}");
    }
    assert!(
        events
            .iter()
            .any(|e| log_exact("counter", "cleanup reason=CleanupReason::Shutdown")(e)),
        "the 0.1.0 counter's cleanup did not see reason shutdown\n{}",
        node.tail()
    );
}

/// Issue 26: a plugin written with the Rust SDK (`sdk/rust`: async `start`, wstd's HTTP
/// client, the SDK's `sleep`) requests every 100 ms; every request carries its grant's
/// token, a stop ends it cooperatively, and cleanup runs on the same instance. A request
/// to a host not granted is refused, and `start` fails with the error's message.
#[test]
fn a_plugin_written_with_the_rust_sdk_is_fenced_and_stops_when_asked() {
    let server = Recorder::start();
    let other = Recorder::start();
    let mut node = Node::new("sdk-rust");
    for (resource, target) in [("sdk", server.base()), ("sdk-refused", other.base())] {
        node.install(
            &format!("{resource}.toml"),
            requesting_manifest(
                resource,
                "16MiB",
                &server.base(),
                &format!("{target}/sdk"),
                "INTERVAL_MS = \"100\"",
            ),
        );
        node.install(&format!("{resource}.wasm"), plugins().sdk_poller_bytes());
    }
    node.spawn();

    eprintln!("phase: requests every 100 ms, each with the grant's token");
    let start = node.wait_for("sdk started", started("sdk"), WAIT);
    let t = token(&start);
    node.wait_for(
        "the fifth request's log line",
        log_exact("sdk", "request seq=5 status=200"),
        WAIT,
    );
    for request in server.wait_for(5, WAIT) {
        assert_eq!(request.path, "/sdk", "{request:?}");
        assert_eq!(
            request.header("tenure-token"),
            Some(t.to_string().as_str()),
            "{request:?}"
        );
        assert_eq!(
            request.header("tenure-resource"),
            Some("sdk"),
            "{request:?}"
        );
    }

    eprintln!("phase: a host not granted: refused, and start fails with a message");
    let refusal = node.wait_for(
        "sdk-refused's refusal",
        is("plugin.effect_refused")
            .with("resource", "sdk-refused")
            .f(),
        WAIT,
    );
    assert_eq!(refusal["reason"], "not-allowed", "{refusal}");
    let failed = node.wait_for(
        "sdk-refused's failed start",
        |e| {
            is("plugin.stopped")
                .with("resource", "sdk-refused")
                .matches(e)
        },
        WAIT,
    );
    assert_eq!(failed["outcome"], "returned", "{failed}");
    // wstd's client reports the refusal as the failure of the request body's stream
    // ("connection reset"), which it sees first; the message is the error's own.
    assert!(!str_field(&failed, "error").is_empty(), "{failed}");
    assert!(other.requests().is_empty(), "{:?}", other.requests());

    eprintln!("phase: a stop ends it cooperatively, cleanup on the same instance");
    assert_stops_cooperatively(&mut node, "sdk", t);
}

/// Issue 26: a raw socket to a host the manifest grants for HTTP only is refused like any
/// host not granted (`not-allowed`), and the refusal says to send HTTP through wasi:http,
/// which the host fences (a socket would carry no `tenure-token`).
#[test]
fn a_socket_to_a_host_granted_for_http_only_is_refused_with_a_hint() {
    let server = support::recorder::LineServer::start();
    let port = server.port();
    let mut node = Node::new("http-only");
    node.install(
        "tcp-hold.toml",
        format!(
            "resource = \"tcp-hold\"\n\n[limits]\n{FAST_LIMITS}\n[capabilities]\n\
             allowed_outbound_hosts = [\"http://localhost:{port}\"]\n\
             env = {{ TCP_TARGET = \"localhost:{port}\" }}\n"
        ),
    );
    node.install("tcp-hold.wasm", plugins().misbehave_bytes());
    node.spawn();
    let refusal = node.wait_for(
        "the socket's refusal",
        is("plugin.effect_refused").with("resource", "tcp-hold").f(),
        WAIT,
    );
    assert_eq!(refusal["effect"], "tcp", "{refusal}");
    assert_eq!(refusal["reason"], "not-allowed", "{refusal}");
    assert!(
        message(&refusal).contains("granted for HTTP only")
            && message(&refusal).contains("wasi:http"),
        "{refusal}"
    );
    assert!(
        server.connections().is_empty(),
        "the socket reached the host"
    );
    shut_down(&mut node);
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

/// Cluster tests with short leases take turns: three nodes compiling and electing at once
/// on a small machine would blur what each checks.
static CLUSTERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How late after SIGCONT a request the frozen owner had already sent may still arrive.
const RESUME_ALLOWANCE: Duration = Duration::from_millis(50);

#[test]
fn the_downstream_sees_only_its_owners_tokens_and_nothing_stale_after_a_freeze_or_a_kill() {
    let _turn = CLUSTERS.lock().unwrap_or_else(|e| e.into_inner());
    let server = Recorder::start();
    let mut c = Cluster::builder(3).ttl(Duration::from_secs(1)).build();
    c.install_plugin_everywhere(
        "webhook",
        &format!(
            "resource = \"webhook\"\n[limits]\n{FAST_LIMITS}\n[capabilities]\n\
             allowed_outbound_hosts = [\"{base}\"]\n\
             env = {{ TARGET_URL = \"{base}/hook\", INTERVAL_MS = \"20\" }}\n",
            base = server.base()
        ),
        &plugins().webhook_bytes(),
    );
    c.start();
    let with_token = |token: u64| {
        move |r: &support::recorder::Recorded| r.header("tenure-token") == Some(&token.to_string())
    };
    let wait_request = |token: u64| {
        let deadline = Instant::now() + WAIT;
        while !server.requests().iter().any(with_token(token)) {
            assert!(Instant::now() < deadline, "no request with token {token}");
            server.wait_for(server.requests().len() + 1, WAIT);
        }
    };

    // The owner writes; then it freezes for longer than its lease.
    let first = c.wait_owners("webhook", 1, |_| true).remove(0);
    wait_request(first.token);
    let i = c.index(&first.node);
    c.pause(i);
    std::thread::sleep(c.ttl() * 2 + Duration::from_millis(300));
    let resumed = SystemTime::now();
    c.resume(i);
    let second = c
        .wait_owners("webhook", 1, |o| o[0].token > first.token)
        .remove(0);
    wait_request(second.token);

    // The next owner dies at once: its successor writes with a greater token.
    let killed = c.kill(c.index(&second.node));
    let third = c
        .wait_owners("webhook", 1, |o| o[0].token > second.token)
        .remove(0);
    wait_request(third.token);
    c.stop_all();

    let requests = server.requests();
    // Nothing the frozen owner sent after its deadline: at most what was on the wire when
    // it froze, arriving just after SIGCONT.
    let stale: Vec<_> = requests
        .iter()
        .filter(|r| with_token(first.token)(r) && r.at > resumed + RESUME_ALLOWANCE)
        .collect();
    assert!(
        stale.is_empty(),
        "the frozen owner wrote after SIGCONT: {stale:?}"
    );
    let after_kill: Vec<_> = requests
        .iter()
        .filter(|r| with_token(second.token)(r) && r.at > killed + RESUME_ALLOWANCE)
        .collect();
    assert!(
        after_kill.is_empty(),
        "the killed owner wrote after kill -9: {after_kill:?}"
    );
    // Every request carries a token its sender held, in its own name.
    let held: Vec<(String, u64)> = c
        .merged()
        .iter()
        .filter(|e| is("plugin.started").with("resource", "webhook").matches(e))
        .map(|e| (str_field(e, "node").to_string(), token(e)))
        .collect();
    for r in &requests {
        let sender = (
            r.header("tenure-node").unwrap_or_default().to_string(),
            r.header("tenure-token")
                .and_then(|t| t.parse().ok())
                .unwrap_or(0),
        );
        assert!(
            held.contains(&sender),
            "{sender:?} never held the slot: {r:?}"
        );
        assert_eq!(
            r.json()["token"],
            sender.1,
            "the body's token is the header's: {r:?}"
        );
    }
    // At the downstream, tokens never go backwards (beyond the frozen owner's allowance).
    let mut highest = 0;
    for r in &requests {
        let token: u64 = r.header("tenure-token").unwrap().parse().unwrap();
        assert!(
            token >= highest || (token == first.token && r.at <= resumed + RESUME_ALLOWANCE),
            "token {token} arrived after {highest}: {r:?}"
        );
        highest = highest.max(token);
    }
    eprintln!(
        "{} requests; tokens {} (frozen) -> {} (killed) -> {}",
        requests.len(),
        first.token,
        second.token,
        third.token
    );
}

/// Outbound TCP at the level of one instance: the real runtime runs the misbehave
/// fixture's `tcp-hold` against a real TCP server in this process ([`LineServer`]), under
/// a lease whose deadline the test sets, so the deadline's effect is seen on its own.
///
/// [`LineServer`]: support::recorder::LineServer
mod tcp {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use tenure::catalog::{Manifest, Secrets};
    use tenure::future::BoxFuture;
    use tenure::ownership::Grant;
    use tenure::runtime::{
        Failure, Granted, Instance, InstanceContext, NodeLease, Runtime, StateBackend, StateError,
    };

    use super::support::plugins;
    use super::support::recorder::LineServer;

    struct NoState;

    impl StateBackend for NoState {
        fn load(&self, _: &Grant) -> BoxFuture<Result<Option<Vec<u8>>, StateError>> {
            Box::pin(async { Ok(None) })
        }
        fn save(&self, _: &Grant, _: Vec<u8>) -> BoxFuture<Result<(), StateError>> {
            Box::pin(async { Ok(()) })
        }
    }

    /// Compiles the fixture, then instantiates it as `tcp-hold` with `capabilities`
    /// under a lease valid for `valid` from then; the instance, and the deadline.
    async fn instance(capabilities: &str, valid: Duration) -> (Instance, Instant) {
        let runtime = Runtime::new(None).unwrap();
        let plugin = runtime.load(&plugins().misbehave_bytes()).unwrap();
        let manifest = format!("resource = \"tcp-hold\"\n[capabilities]\n{capabilities}");
        let manifest = Manifest::parse("tcp-hold", &manifest).expect("the manifest parses");
        let granted = Granted::new(&manifest.capabilities, &Secrets::default());
        let lease = Arc::new(NodeLease::new(true));
        let deadline = Instant::now() + valid;
        lease.publish(Some(4), Some(deadline));
        let grant = Grant {
            resource: "tcp-hold".into(),
            slot: 0,
            node: "n1".into(),
            token: 9,
            term: 1,
            session: 4,
        };
        let ctx =
            InstanceContext::new("tcp-hold".into(), grant, lease, Arc::new(NoState), 64 << 20)
                .with_granted(Arc::new(granted));
        let instance = plugin
            .instantiate(Arc::new(ctx))
            .await
            .expect("instantiates");
        (instance, deadline)
    }

    fn block_on<T>(future: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn a_connection_the_plugin_holds_is_shut_down_at_the_deadline() {
        let server = LineServer::start();
        let port = server.port();
        // Through a name, so the lookup path is the one that grants the address.
        let capabilities = format!(
            "allowed_outbound_hosts = [\"tcp://localhost:{port}\"]\n\
             env = {{ TCP_TARGET = \"localhost:{port}\" }}\n"
        );
        block_on(async {
            let (mut instance, deadline) =
                instance(&capabilities, Duration::from_millis(1500)).await;
            let started = instance.start().await;
            // `start` ended at D: the plugin's sleep woke and said stop, or the engine
            // trapped it. The instance, and the store holding the plugin's socket, live
            // on: only the fence can have closed the connection.
            assert!(
                matches!(started, Ok(Ok(())) | Err(Failure::Interrupted)),
                "{started:?}"
            );
            let connections = server.wait_until("the connection's end", super::WAIT, |c| {
                c.first().is_some_and(|c| c.ended.is_some())
            });
            assert_eq!(connections.len(), 1, "{connections:?}");
            let connection = &connections[0];
            let ended = connection.ended.unwrap();
            assert!(
                ended + Duration::from_millis(20) >= deadline,
                "the connection ended {:?} before D",
                deadline - ended
            );
            assert!(
                connection
                    .lines
                    .iter()
                    .any(|(_, l)| l.starts_with("token=9 ")),
                "{connection:?}"
            );
            // Nothing the plugin wrote arrived after D (beyond the loopback's delivery).
            let late: Vec<_> = connection
                .lines
                .iter()
                .filter(|(at, _)| *at > deadline + Duration::from_millis(50))
                .collect();
            assert!(late.is_empty(), "lines arrived after D: {late:?}");
            drop(instance);
        });
    }

    #[test]
    fn a_port_not_granted_and_a_name_not_granted_are_refused() {
        let granted = LineServer::start();
        let other = LineServer::start();
        let (a, b) = (granted.port(), other.port());
        for (target, refused) in [
            // The host is granted, the port is not.
            (format!("127.0.0.1:{b}"), &other),
            // Only the IP literal is granted: the name may not even be looked up.
            (format!("localhost:{a}"), &granted),
        ] {
            let capabilities = format!(
                "allowed_outbound_hosts = [\"tcp://127.0.0.1:{a}\"]\n\
                 env = {{ TCP_TARGET = \"{target}\" }}\n"
            );
            block_on(async {
                let (mut instance, _) = instance(&capabilities, Duration::from_secs(60)).await;
                let started = instance.start().await;
                match started {
                    Ok(Err(error)) => assert!(error.contains(&target), "{error}"),
                    other => panic!("{target}: expected a refused connect, got {other:?}"),
                }
            });
            assert!(refused.connections().is_empty(), "{target} was reached");
        }
    }
}

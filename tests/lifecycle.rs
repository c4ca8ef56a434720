//! The plugin lifecycle, seen from outside: the real `tenure` binary runs the `misbehave`
//! fixture under different resource names, and each test reads the event log to check one
//! promise of the contract in `wit/owned-task.wit`: how `start` ends (stopped,
//! interrupted, out of memory, trapped, returned), that `cleanup` runs exactly once per
//! start with the right reason and on the right instance, restarts with backoff, and that
//! one misbehaving plugin never holds up the others or the node's shutdown.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

/// A `plugin.started` event of `resource`.
fn started(resource: &str) -> impl Fn(&Value) -> bool {
    is("plugin.started").with("resource", resource).f()
}

/// An event of kind `event` for the start with token `t`.
fn of_token(event: &str, resource: &str, t: u64) -> impl Fn(&Value) -> bool {
    is(event).with("resource", resource).with("token", t).f()
}

/// Sends SIGINT and checks the node shuts down cleanly (see [`finish`]).
fn shut_down(node: &mut Node) -> Vec<Value> {
    node.signal(libc::SIGINT);
    finish(node)
}

/// After the one shutdown signal (a second one means "exit now"), checks the node shuts
/// down cleanly: exit code 0, `node.stopped`, and every start cleaned up once before it.
fn finish(node: &mut Node) -> Vec<Value> {
    let status = node.wait_exit(WAIT);
    assert!(
        status.success(),
        "the node exited with {status}\n{}",
        node.tail()
    );
    let events = node.events();
    assert!(
        events.iter().any(|e| is("node.stopped").matches(e)),
        "no node.stopped event\n{}",
        node.tail()
    );
    assert_every_start_cleaned_up(&events);
    events
}

#[test]
fn cooperative_plugin_stops_when_asked_and_cleans_up_on_the_same_instance() {
    let mut node = Node::new("cooperative");
    node.install_fixture("cooperative", FAST_LIMITS);
    node.spawn();

    eprintln!("phase: the plugin starts and ticks");
    let start = node.wait_for("cooperative started", started("cooperative"), WAIT);
    let t = token(&start);
    let tick = node.wait_for(
        "a tick log line",
        log_exact("cooperative", &format!("tick token={t}")),
        WAIT,
    );
    assert_eq!(tick["stream"], "log", "{tick}");
    assert_eq!(tick["level"], "INFO", "{tick}");
    assert_eq!(tick["token"], t, "{tick}");
    assert_eq!(tick["slot"], start["slot"], "{tick}");
    assert_eq!(tick["node"], start["node"], "{tick}");

    eprintln!("phase: SIGINT asks it to stop");
    node.signal(libc::SIGINT);
    let stopped = node.wait_for(
        "plugin.stopped",
        of_token("plugin.stopped", "cooperative", t),
        WAIT,
    );
    assert_eq!(stopped["outcome"], "stopped", "{stopped}");
    let cleanup = node.wait_for(
        "plugin.cleanup",
        of_token("plugin.cleanup", "cooperative", t),
        WAIT,
    );
    assert_eq!(cleanup["reason"], "shutdown", "{cleanup}");
    assert_eq!(cleanup["outcome"], "ok", "{cleanup}");
    let cleanup_log = node.wait_for(
        "the plugin's cleanup log line",
        log_exact(
            "cooperative",
            "cleanup reason=shutdown fresh_instance=false",
        ),
        WAIT,
    );

    let events = finish(&mut node);
    let at = |e: &Value| index_of(&events, e);
    let start_log = events
        .iter()
        .find(|e| log_starting("cooperative", "start behaviour=cooperative")(e))
        .expect("the start log line");
    assert!(
        at(&start) < at(start_log),
        "plugin.started must precede start"
    );
    assert!(
        at(&stopped) < at(&cleanup_log),
        "cleanup ran before start ended"
    );
    assert!(
        at(&cleanup_log) < at(&cleanup),
        "plugin.cleanup before cleanup ran"
    );
}

/// Issue 26: a plugin written async with `wstd` alone waits between requests in
/// `wasi:io/poll` (a monotonic-clock pollable), not in the host's `sleep`. A stop request
/// must end that wait at once, so the plugin sees `stop-requested` and returns: outcome
/// `stopped`, and `cleanup` on the same instance, long before its 5 s wait would end.
#[test]
fn async_plugin_blocked_in_poll_stops_when_asked_and_cleans_up_on_the_same_instance() {
    let server = support::recorder::Recorder::start();
    let mut node = Node::new("wstd-poller");
    let base = server.base();
    let target = format!("{base}/poll");
    node.install(
        "poller.toml",
        requesting_manifest("poller", "16MiB", &base, &target, "INTERVAL_MS = \"5000\""),
    );
    node.install("poller.wasm", plugins().wstd_poller_bytes());
    node.spawn();

    eprintln!("phase: the plugin starts, makes its first request and waits 5 s in poll");
    let start = node.wait_for("poller started", started("poller"), WAIT);
    let t = token(&start);
    node.wait_for(
        "the first request's log line",
        log_exact("poller", "request seq=1 status=200"),
        WAIT,
    );
    let first = server.wait_for(1, WAIT).remove(0);
    assert_eq!(
        first.header("tenure-token"),
        Some(t.to_string().as_str()),
        "{first:?}"
    );

    eprintln!("phase: SIGINT asks it to stop while it waits");
    let events = assert_stops_cooperatively(&mut node, "poller", t);
    assert_every_start_cleaned_up(&events);
    assert_eq!(
        server.requests().len(),
        1,
        "the plugin made another request after its wait was ended by the stop"
    );
    assert_eq!(
        all(&events, of_token("plugin.cleanup", "poller", t)).count(),
        1,
        "cleanup ran once"
    );
}

/// Issue 26: `host.subscribe-stop` (0.2.0) gives a pollable that becomes ready on a stop
/// request: a plugin blocked in `wasi:io/poll` on it alone returns cooperatively.
#[test]
fn a_plugin_waiting_on_the_stop_pollable_returns_when_asked() {
    let mut node = Node::new("wait-stop");
    node.install_fixture("wait-stop", FAST_LIMITS);
    node.spawn();
    let start = node.wait_for("wait-stop started", started("wait-stop"), WAIT);
    let t = token(&start);
    node.wait_for(
        "the start log line",
        log_starting("wait-stop", "start behaviour=wait-stop"),
        WAIT,
    );
    node.signal(libc::SIGINT);
    let stopped = node.wait_for(
        "plugin.stopped",
        of_token("plugin.stopped", "wait-stop", t),
        WAIT,
    );
    assert_eq!(stopped["outcome"], "stopped", "{stopped}");
    node.wait_for(
        "the plugin's log line after its wait",
        log_exact("wait-stop", "stop pollable ready"),
        WAIT,
    );
    node.wait_for(
        "cleanup on the same instance",
        log_exact("wait-stop", "cleanup reason=shutdown fresh_instance=false"),
        WAIT,
    );
    finish(&mut node);
}

#[test]
fn busy_loop_is_interrupted_and_cleaned_up_on_a_fresh_instance() {
    let mut node = Node::new("busy");
    node.install_fixture("busy", FAST_LIMITS);
    node.spawn();

    eprintln!("phase: the plugin spins without host calls");
    let start = node.wait_for("busy started", started("busy"), WAIT);
    let t = token(&start);
    node.wait_for("the spinning log line", log_exact("busy", "spinning"), WAIT);

    eprintln!("phase: SIGINT; after stop_grace (200ms) it must be interrupted");
    let signalled = Instant::now();
    node.signal(libc::SIGINT);
    let stopped = node.wait_for(
        "plugin.stopped",
        of_token("plugin.stopped", "busy", t),
        WAIT,
    );
    let to_interrupt = signalled.elapsed();
    assert_eq!(stopped["outcome"], "interrupted", "{stopped}");
    assert!(
        to_interrupt < Duration::from_secs(10),
        "the interrupt took {to_interrupt:?} with stop_grace 200ms"
    );
    let cleanup = node.wait_for(
        "plugin.cleanup",
        of_token("plugin.cleanup", "busy", t),
        WAIT,
    );
    assert_eq!(cleanup["reason"], "shutdown", "{cleanup}");
    assert_eq!(cleanup["outcome"], "ok", "{cleanup}");
    node.wait_for(
        "cleanup on a fresh instance",
        log_exact("busy", "cleanup reason=shutdown fresh_instance=true"),
        WAIT,
    );

    finish(&mut node);
    let total = signalled.elapsed();
    assert!(
        total < Duration::from_secs(15),
        "shutdown took {total:?} with a busy plugin"
    );
}

#[test]
fn out_of_memory_is_contained() {
    let mut node = Node::new("oom");
    node.install_fixture("oom", &format!("{FAST_LIMITS}max_restarts = 1\n"));
    node.install_fixture("cooperative", FAST_LIMITS);
    node.spawn();

    eprintln!("phase: oom allocates past its 16MiB limit");
    let stopped = node.wait_for(
        "oom's plugin.stopped",
        is("plugin.stopped").with("resource", "oom").f(),
        WAIT,
    );
    assert_eq!(stopped["outcome"], "oom", "{stopped}");
    assert!(
        stopped["error"].as_str().is_some_and(|e| !e.is_empty()),
        "an oom stop carries an error: {stopped}"
    );
    let t = token(&stopped);
    let cleanup = node.wait_for(
        "oom's plugin.cleanup",
        of_token("plugin.cleanup", "oom", t),
        WAIT,
    );
    assert_eq!(cleanup["reason"], "failed", "{cleanup}");
    node.wait_for(
        "oom's cleanup on a fresh instance",
        log_exact("oom", "cleanup reason=failed fresh_instance=true"),
        WAIT,
    );

    eprintln!("phase: the node and the other plugin carry on");
    let after = index_of(&node.events(), &stopped);
    node.wait_for_from(
        "a cooperative tick after the oom",
        after + 1,
        log_starting("cooperative", "tick token="),
        WAIT,
    );
    assert!(node.is_running(), "the node died after the oom");
    assert_eq!(node.count(is("node.stopped").f()), 0);

    shut_down(&mut node);
}

#[test]
fn trap_is_cleaned_up_and_restarted_with_backoff_until_it_fails() {
    let mut node = Node::new("trap");
    node.install_fixture(
        "trap",
        &format!("{FAST_LIMITS}max_restarts = 2\nrestart_window = \"5m\"\n"),
    );
    // A companion that ticks every 100ms: a clock made of events, to watch for a while.
    node.install_fixture("cooperative", FAST_LIMITS);
    node.spawn();

    eprintln!("phase: three starts trap, two restarts, then the node gives up");
    let failed = node.wait_for(
        "plugin.failed",
        is("plugin.failed").with("resource", "trap").f(),
        WAIT,
    );
    assert_eq!(failed["restarts"], 2, "{failed}");
    let events = node.events();
    let failed_at = index_of(&events, &failed);

    let starts: Vec<(usize, &Value)> = all(&events, started("trap")).collect();
    let restarts: Vec<(usize, &Value)> = all(
        &events,
        is("plugin.restarting").with("resource", "trap").f(),
    )
    .collect();
    assert_eq!(starts.len(), 3, "max_restarts 2 means 3 starts");
    assert_eq!(restarts.len(), 2, "max_restarts 2 means 2 restarts");

    let mut previous_token = 0;
    for (n, &(start_at, start)) in starts.iter().enumerate() {
        let t = token(start);
        assert!(
            t > previous_token,
            "tokens must increase: {t} after {previous_token}"
        );
        previous_token = t;
        let (stopped_at, stopped) = all(&events, of_token("plugin.stopped", "trap", t))
            .next()
            .unwrap_or_else(|| panic!("no plugin.stopped for token {t}"));
        assert_eq!(stopped["outcome"], "trapped", "{stopped}");
        assert!(
            stopped["error"].as_str().is_some_and(|e| !e.is_empty()),
            "a trap carries an error: {stopped}"
        );
        let (cleanup_at, cleanup) = all(&events, of_token("plugin.cleanup", "trap", t))
            .next()
            .unwrap_or_else(|| panic!("no plugin.cleanup for token {t}"));
        assert_eq!(cleanup["reason"], "failed", "{cleanup}");
        assert_eq!(cleanup["outcome"], "ok", "{cleanup}");
        assert!(
            start_at < stopped_at && stopped_at < cleanup_at,
            "token {t}: started, stopped and cleaned up out of order"
        );
        if let Some(&(restart_at, restart)) = restarts.get(n) {
            assert_eq!(restart["attempt"], n as u64 + 1, "{restart}");
            assert!(cleanup_at < restart_at, "restarting before cleanup(failed)");
            let (next_at, next) = starts[n + 1];
            assert!(restart_at < next_at, "a start before its restarting event");
            // The backoff is honoured, give or take the timestamps' rounding.
            let waited = ms_between(restart, next);
            let backoff = u64_field(restart, "backoff_ms") as i64;
            assert!(
                waited + 50 >= backoff,
                "restarted after {waited}ms, backoff was {backoff}ms"
            );
        } else {
            assert!(
                cleanup_at < failed_at,
                "plugin.failed before the last cleanup"
            );
        }
    }
    let backoffs: Vec<u64> = restarts
        .iter()
        .map(|(_, r)| u64_field(r, "backoff_ms"))
        .collect();
    assert!(
        backoffs.windows(2).all(|w| w[0] < w[1]),
        "backoff must increase: {backoffs:?}"
    );
    // Traps leave nothing to trust, so each cleanup(failed) runs on a fresh instance.
    assert_eq!(
        node.count(log_exact(
            "trap",
            "cleanup reason=failed fresh_instance=true"
        )),
        3
    );

    eprintln!("phase: watch for twice the last backoff; no start may follow plugin.failed");
    let window_ticks = (2 * backoffs.last().copied().unwrap_or(0) / 100 + 10) as usize;
    node.wait_until(
        &format!("{window_ticks} cooperative ticks after plugin.failed"),
        |events| {
            events
                .iter()
                .skip(failed_at + 1)
                .filter(|e| log_starting("cooperative", "tick token=")(e))
                .count()
                >= window_ticks
        },
        WAIT + Duration::from_millis(200 * window_ticks as u64),
    );
    let events = shut_down(&mut node);
    let late_starts = all(&events, started("trap"))
        .filter(|(i, _)| *i > failed_at)
        .count();
    assert_eq!(late_starts, 0, "trap started again after plugin.failed");
}

#[test]
fn a_plugin_that_keeps_failing_shows_its_last_error_and_when_it_is_tried_again() {
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut node = Node::new("failing");
    node.set_env("TENURE_METRICS_LISTEN", &metrics.to_string());
    node.install_fixture(
        "trap",
        &format!("{FAST_LIMITS}max_restarts = 1\nrestart_window = \"5m\"\n"),
    );
    node.spawn();

    eprintln!("phase: two starts trap, then the node gives the slot up");
    let failed = node.wait_for(
        "plugin.failed",
        is("plugin.failed").with("resource", "trap").f(),
        WAIT,
    );
    let events = node.events();
    let (_, last_stop) = all(&events, |e| {
        is("plugin.stopped").with("resource", "trap").matches(e)
    })
    .last()
    .expect("a plugin.stopped of trap");
    let failed_ms = (timestamp_us(&failed) / 1000) as u64;

    eprintln!("phase: the status (its JSON, as /status serves it) shows why and until when");
    let deadline = Instant::now() + WAIT;
    let row = loop {
        let (code, body) = http_get(metrics, "/status");
        if code == 200 {
            let status: Value = serde_json::from_str(&body).unwrap();
            let row = status["nodes"][0]["plugins"]
                .as_array()
                .and_then(|p| p.iter().find(|p| p["resource"] == "trap").cloned());
            // The skip is replicated: wait until this node has applied the give-up.
            if let Some(row) = row.filter(|r| !r["cooldown_until_ms"].is_null()) {
                break row;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no trap row cooling down in /status: {code} {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("row: {row}");
    let failure = &row["last_failure"];
    assert_eq!(failure["outcome"], "trapped", "{row}");
    assert_eq!(failure["error"], last_stop["error"], "{row}");
    assert_eq!(failure["token"], last_stop["token"], "{row}");
    assert_eq!(failure["failures"], 2, "{row}");
    assert_eq!(failure["max_restarts"], 1, "{row}");
    assert!(
        failure["restart_ms"].is_null(),
        "gave up: no restart: {row}"
    );
    // Cooling down for 60 s from the give-up, as the node does (its own clock).
    let until = row["cooldown_until_ms"].as_u64().unwrap();
    assert!(
        until.abs_diff(failed_ms + 60_000) < 2_000,
        "cooling down until {until}, gave up at {failed_ms}: {row}"
    );
    let at = failure["at_ms"].as_u64().unwrap();
    assert!(at.abs_diff(failed_ms) < 2_000, "{row}");

    shut_down(&mut node);
}

#[test]
fn error_return_is_a_failure_cleaned_up_on_the_same_instance() {
    let mut node = Node::new("error");
    node.install_fixture(
        "error",
        &format!("{FAST_LIMITS}max_restarts = 1\nrestart_window = \"5m\"\n"),
    );
    node.spawn();

    let failed = node.wait_for(
        "plugin.failed",
        is("plugin.failed").with("resource", "error").f(),
        WAIT,
    );
    assert_eq!(failed["restarts"], 1, "{failed}");
    let events = node.events();
    let starts: Vec<&Value> = all(&events, started("error")).map(|(_, e)| e).collect();
    assert_eq!(starts.len(), 2, "max_restarts 1 means 2 starts");
    assert!(token(starts[0]) < token(starts[1]), "tokens must increase");
    for start in &starts {
        let t = token(start);
        let (_, stopped) = all(&events, of_token("plugin.stopped", "error", t))
            .next()
            .unwrap_or_else(|| panic!("no plugin.stopped for token {t}"));
        assert_eq!(stopped["outcome"], "returned", "{stopped}");
        assert_eq!(stopped["error"], "deliberate error", "{stopped}");
        let (_, cleanup) = all(&events, of_token("plugin.cleanup", "error", t))
            .next()
            .unwrap_or_else(|| panic!("no plugin.cleanup for token {t}"));
        assert_eq!(cleanup["reason"], "failed", "{cleanup}");
        assert_eq!(cleanup["outcome"], "ok", "{cleanup}");
    }
    let restarts = node.count(is("plugin.restarting").with("resource", "error").f());
    assert_eq!(restarts, 1);
    // `start` returned, so cleanup runs on the instance it returned from.
    assert_eq!(
        node.count(log_exact(
            "error",
            "cleanup reason=failed fresh_instance=false"
        )),
        2
    );
    shut_down(&mut node);
}

#[test]
fn cleanup_runs_exactly_once_per_start_across_every_ending() {
    let mut node = Node::new("once");
    let restart_once = format!("{FAST_LIMITS}max_restarts = 1\nrestart_window = \"5m\"\n");
    for behaviour in ["trap", "error", "oom"] {
        node.install_fixture(behaviour, &restart_once);
    }
    for behaviour in ["cooperative", "returns", "busy", "cleanup-trap"] {
        node.install_fixture(behaviour, FAST_LIMITS);
    }
    node.spawn();

    eprintln!("phase: the failing plugins run out of restarts");
    for behaviour in ["trap", "error", "oom"] {
        node.wait_for(
            &format!("{behaviour} plugin.failed"),
            is("plugin.failed").with("resource", behaviour).f(),
            WAIT,
        );
    }
    node.wait_for(
        "returns returned",
        is("plugin.stopped").with("resource", "returns").f(),
        WAIT,
    );
    node.wait_for("busy spinning", log_exact("busy", "spinning"), WAIT);
    node.wait_for(
        "cleanup-trap ticking",
        log_starting("cleanup-trap", "tick token="),
        WAIT,
    );

    eprintln!("phase: shutdown ends the others");
    let events = shut_down(&mut node);
    let cleanups = events
        .iter()
        .filter(|e| is("plugin.cleanup").matches(e))
        .count();
    let starts = events
        .iter()
        .filter(|e| is("plugin.started").matches(e))
        .count();
    assert_eq!(cleanups, starts, "one cleanup per start");
}

#[test]
fn cleanup_trap_is_reported_and_the_node_still_exits_cleanly() {
    let mut node = Node::new("cleanup-trap");
    node.install_fixture("cleanup-trap", FAST_LIMITS);
    node.spawn();
    let start = node.wait_for("started", started("cleanup-trap"), WAIT);
    let t = token(&start);
    node.wait_for("a tick", log_starting("cleanup-trap", "tick token="), WAIT);

    node.signal(libc::SIGINT);
    let stopped = node.wait_for(
        "plugin.stopped",
        of_token("plugin.stopped", "cleanup-trap", t),
        WAIT,
    );
    assert_eq!(stopped["outcome"], "stopped", "{stopped}");
    let cleanup = node.wait_for(
        "plugin.cleanup",
        of_token("plugin.cleanup", "cleanup-trap", t),
        WAIT,
    );
    assert_eq!(cleanup["reason"], "shutdown", "{cleanup}");
    assert_eq!(cleanup["outcome"], "trapped", "{cleanup}");
    finish(&mut node);
}

#[test]
fn cleanup_hang_times_out_within_its_budget_and_the_node_still_exits_cleanly() {
    let mut node = Node::new("cleanup-hang");
    node.install_fixture("cleanup-hang", FAST_LIMITS);
    node.spawn();
    let start = node.wait_for("started", started("cleanup-hang"), WAIT);
    let t = token(&start);
    node.wait_for("a tick", log_starting("cleanup-hang", "tick token="), WAIT);

    let signalled = Instant::now();
    node.signal(libc::SIGINT);
    let cleanup = node.wait_for(
        "plugin.cleanup",
        of_token("plugin.cleanup", "cleanup-hang", t),
        WAIT,
    );
    assert_eq!(cleanup["reason"], "shutdown", "{cleanup}");
    assert_eq!(cleanup["outcome"], "timeout", "{cleanup}");
    // cleanup_timeout is 1s: the budget is used up, and not much more.
    let duration = u64_field(&cleanup, "duration_ms");
    assert!(
        (900..=4000).contains(&duration),
        "cleanup took {duration}ms with a 1s budget: {cleanup}"
    );
    finish(&mut node);
    let total = signalled.elapsed();
    assert!(total < Duration::from_secs(15), "shutdown took {total:?}");
}

#[test]
fn returned_start_keeps_its_instance_until_shutdown() {
    let mut node = Node::new("returns");
    node.install_fixture("returns", FAST_LIMITS);
    node.install_fixture("cooperative", FAST_LIMITS);
    node.spawn();

    eprintln!("phase: start returns Ok at once");
    let start = node.wait_for("returns started", started("returns"), WAIT);
    let t = token(&start);
    let stopped = node.wait_for(
        "plugin.stopped",
        of_token("plugin.stopped", "returns", t),
        WAIT,
    );
    assert_eq!(stopped["outcome"], "returned", "{stopped}");
    assert!(
        stopped["error"].is_null(),
        "an ok return has no error: {stopped}"
    );

    eprintln!("phase: for a while (20 cooperative ticks) nothing else happens to it");
    let stopped_at = index_of(&node.events(), &stopped);
    node.wait_until(
        "20 cooperative ticks after returns returned",
        |events| {
            events
                .iter()
                .skip(stopped_at)
                .filter(|e| log_starting("cooperative", "tick token=")(e))
                .count()
                >= 20
        },
        WAIT,
    );
    assert_eq!(
        node.count(is("plugin.cleanup").with("resource", "returns").f()),
        0
    );
    assert_eq!(
        node.count(is("plugin.restarting").with("resource", "returns").f()),
        0
    );
    assert_eq!(node.count(started("returns")), 1);

    eprintln!("phase: shutdown cleans it up on the instance start returned from");
    let events = shut_down(&mut node);
    let (_, cleanup) = all(&events, of_token("plugin.cleanup", "returns", t))
        .next()
        .expect("a cleanup for returns");
    assert_eq!(cleanup["reason"], "shutdown", "{cleanup}");
    assert_eq!(cleanup["outcome"], "ok", "{cleanup}");
    assert_eq!(
        node.count(log_exact(
            "returns",
            "cleanup reason=shutdown fresh_instance=false"
        )),
        1
    );
}

#[test]
fn busy_plugin_does_not_delay_another() {
    let mut node = Node::new("fairness");
    node.install_fixture("busy", FAST_LIMITS);
    node.install_fixture("cooperative", FAST_LIMITS);
    node.spawn();

    let spinning = node.wait_for("busy spinning", log_exact("busy", "spinning"), WAIT);
    let from = index_of(&node.events(), &spinning);
    eprintln!("phase: busy spins; cooperative must keep its 100ms rhythm");
    node.wait_until(
        "10 cooperative ticks while busy spins",
        |events| {
            events
                .iter()
                .skip(from)
                .filter(|e| log_starting("cooperative", "tick token=")(e))
                .count()
                >= 10
        },
        WAIT,
    );
    let events = node.events();
    let ticks: Vec<&Value> = all(&events, log_starting("cooperative", "tick token="))
        .filter(|(i, _)| *i > from)
        .map(|(_, e)| e)
        .take(10)
        .collect();
    let gaps: Vec<i64> = ticks.windows(2).map(|w| ms_between(w[0], w[1])).collect();
    let worst = gaps.iter().copied().max().unwrap_or(0);
    assert!(
        worst < 2000,
        "a 100ms tick was held up for {worst}ms by a busy plugin: {gaps:?}"
    );
    assert_eq!(
        node.count(is("plugin.stopped").with("resource", "busy").f()),
        0,
        "busy must still be running"
    );
    shut_down(&mut node);
}

#[test]
fn stdout_and_stderr_are_captured_without_terminal_escapes() {
    let mut node = Node::new("noisy");
    node.install_fixture("noisy", FAST_LIMITS);
    node.spawn();

    let plain = node.wait_for(
        "the plain stdout line",
        log_exact("noisy", "plain stdout line"),
        WAIT,
    );
    assert_eq!(plain["stream"], "stdout", "{plain}");
    assert_eq!(plain["level"], "INFO", "{plain}");
    let stderr = node.wait_for("the stderr line", log_exact("noisy", "stderr line"), WAIT);
    assert_eq!(stderr["stream"], "stderr", "{stderr}");
    assert_eq!(stderr["level"], "WARN", "{stderr}");
    let coloured = node.wait_for(
        "the coloured line, escapes stripped",
        log_exact("noisy", "red text end"),
        WAIT,
    );
    assert_eq!(coloured["stream"], "stdout", "{coloured}");
    let tick = node.wait_for("a tick", log_starting("noisy", "tick token="), WAIT);
    assert_eq!(tick["stream"], "log", "{tick}");

    let events = shut_down(&mut node);
    for event in all(&events, is("plugin.log").with("resource", "noisy").f()).map(|(_, e)| e) {
        let text = message(event);
        assert!(
            !text.contains(['\u{1b}', '\u{7}']) && !text.contains("title"),
            "an escape sequence got through: {event}"
        );
    }
}

/// A field of `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`).
fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// A plugin hands `state.save` and `log` 48 MiB of its memory, far over the 64 KiB a
/// state blob may hold and the 4 KiB a log line keeps: the host refuses (or cuts) from
/// the length and copies nothing. Measured as the node's peak resident memory, reset once
/// the plugin runs (`/proc/PID/clear_refs`); a host that copies first takes 48 MiB for
/// each call.
#[test]
fn a_huge_save_or_log_line_is_refused_without_copying_it() {
    let mut node = Node::new("huge");
    node.install_fixture(
        "save-huge",
        "memory = \"128MiB\"\nstop_grace = \"200ms\"\ncleanup_timeout = \"1s\"\n",
    );
    node.spawn();
    let refused = log_starting("save-huge", "save-huge refused");
    let first = node.wait_for("a first refused save", &refused, WAIT);
    assert!(
        message(&first).contains("TooLarge(65536)"),
        "{}",
        message(&first)
    );
    let pid = node.pid();
    // Resets the peak (VmHWM) to the current resident size.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let base = proc_status_kib(pid, "VmRSS");
    let seen = node.count(&refused);
    node.wait_until(
        "five more refused saves",
        |events| events.iter().filter(|e| refused(e)).count() >= seen + 5,
        WAIT,
    );
    let peak = proc_status_kib(pid, "VmHWM");
    println!("resident before the calls {base} KiB, peak during them {peak} KiB");
    assert!(
        peak < base + 16 * 1024,
        "the node's peak grew by {} KiB over five calls",
        peak.saturating_sub(base)
    );
    node.kill();
}

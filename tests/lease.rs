//! The lease holds inside the engine (DESIGN.md §4): a successor never runs before the
//! predecessor's plugin can no longer execute. Real nodes on loopback, the `misbehave`
//! fixture as `busy` (it spins and ignores stop requests, so only the engine can stop it):
//! - a frozen-then-resumed owner's plugin is stopped by the engine at its deadline, and
//!   the node opens its next session (which vacates its old slots, so a successor may
//!   start) only after that plugin stopped;
//! - at the shortest useful lease (TTL 500 ms) with the default manifest, owners keep
//!   their slots in calm instead of being stopped by their own stop grace;
//! - a node reads its own writes: `state.load` right after an acknowledged `state.save`
//!   returns what was saved, on followers too (their saves are forwarded to the leader).

mod support;

use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use support::*;

/// How long a resumed owner's plugin may execute after SIGCONT: it traps at the first
/// epoch tick (10 ms) after the resume; the rest is for a loaded 2-core machine. The same
/// allowance as the fault checker's.
const RESUME_ALLOWANCE_MS: i64 = 50;

/// Events of node `i` in its current run after the `n`th, with their positions.
fn events_after(c: &Cluster, i: usize, n: usize) -> Vec<Value> {
    c.node(i).events().into_iter().skip(n).collect()
}

#[test]
fn a_resumed_owner_s_plugin_stops_before_its_node_opens_a_new_session() {
    let mut c = Cluster::builder(3).ttl(Duration::from_secs(1)).build();
    c.install_plugin_everywhere(
        "busy",
        "resource = \"busy\"\n[limits]\nstop_grace = \"200ms\"\ncleanup_timeout = \"1s\"\n",
        &plugins().misbehave_bytes(),
    );
    c.start();

    let mut frozen: Vec<(String, u64, i64)> = Vec::new();
    // Three freezes: of the owner wherever it is, leader or not. Each freeze outlasts
    // the lease, so a successor is granted the slot while, or just after, it is frozen.
    for round in 0..3 {
        let owner = c.wait_owners("busy", 1, |_| true).remove(0);
        let i = c.index(&owner.node);
        let leader = c.settled_leader().map(|(n, _)| n);
        let seen = c.node(i).events().len();
        let frozen_for = c.ttl() * 2 + Duration::from_millis(300 * round);
        eprintln!(
            "phase {round}: freeze {} (token {}, leader {leader:?}) for {frozen_for:?}",
            owner.node, owner.token
        );
        frozen.push((owner.node.clone(), owner.token, us(SystemTime::now())));
        c.pause(i);
        std::thread::sleep(frozen_for);
        let resumed = SystemTime::now();
        c.resume(i);

        // The resumed node's next session, and the old run's end before it.
        let opened = c.wait("the resumed node's next session", WAIT, |c| {
            events_after(c, i, seen)
                .into_iter()
                .find(|e| is("session.opened").matches(e))
        });
        let after = events_after(&c, i, seen);
        let stopped = after
            .iter()
            .position(|e| {
                is("plugin.stopped")
                    .with("resource", "busy")
                    .with("token", owner.token)
                    .matches(e)
            })
            .unwrap_or_else(|| {
                panic!(
                    "round {round}: {} opened a new session ({opened}) but its plugin \
                     (token {}) never stopped",
                    owner.node, owner.token
                )
            });
        let opened_at = index_of(&after, &opened);
        let stop = &after[stopped];
        let after_resume_ms = (timestamp_us(stop) - us(resumed)) / 1000;
        eprintln!(
            "round {round}: plugin.stopped ({}) {after_resume_ms} ms after SIGCONT",
            str_field(stop, "outcome")
        );
        assert!(
            stopped < opened_at,
            "round {round}: {} opened its next session before its plugin of the old one \
             stopped:\n  {opened}\n  {stop}",
            owner.node
        );
        assert!(
            after_resume_ms <= RESUME_ALLOWANCE_MS,
            "round {round}: the resumed owner's plugin ran {after_resume_ms} ms after \
             SIGCONT (allowed {RESUME_ALLOWANCE_MS} ms): {stop}"
        );
        // A successor runs again before the next round.
        c.wait_owners("busy", 1, |o| o[0].token > owner.token);
    }

    c.stop_all();
    // No two runs overlap once each frozen run is cut at its freeze (the rounds above
    // checked that it stopped within the allowance of its resume).
    let mut runs = intervals(&c.merged(), "busy");
    for run in &mut runs {
        if let Some((_, _, paused)) = frozen
            .iter()
            .find(|(node, token, _)| *node == run.node && *token == run.token)
        {
            run.end_us = Some(*paused);
        }
    }
    for (k, a) in runs.iter().enumerate() {
        for b in &runs[k + 1..] {
            let apart = a.end_us.is_some_and(|e| e <= b.start_us)
                || b.end_us.is_some_and(|e| e <= a.start_us);
            assert!(apart, "two runs of busy overlap:\n  {a:?}\n  {b:?}");
        }
    }
}

#[test]
fn a_short_lease_with_the_default_stop_grace_keeps_its_owners() {
    // TTL 500 ms and no [limits]: the default stop grace (500 ms) is longer than the
    // whole deadline window, so a node would ask its plugin to stop at once, every time.
    let mut c = Cluster::builder(3).ttl(Duration::from_millis(500)).build();
    c.install_plugin_everywhere(
        "calm",
        "resource = \"cooperative\"\ntickets = 2\n",
        &plugins().misbehave_bytes(),
    );
    c.start();
    let owners = c.wait_owners("cooperative", 2, |_| true);
    let calm = Duration::from_secs(
        std::env::var("TENURE_CALM_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(15),
    );
    eprintln!("phase: {calm:?} of calm; owners {owners:?}");
    let before: usize = (0..3)
        .map(|i| c.node(i).count(is("plugin.started").f()))
        .sum();
    let started = Instant::now();
    while started.elapsed() < calm {
        std::thread::sleep(Duration::from_millis(500));
        let now: usize = (0..3)
            .map(|i| c.node(i).count(is("plugin.started").f()))
            .sum();
        assert_eq!(
            now,
            before,
            "a slot moved or restarted in calm after {:?}:\n{}",
            started.elapsed(),
            c.tails()
        );
    }
    let after = c.owners("cooperative");
    assert_eq!(
        after.iter().map(|o| (&o.node, o.token)).collect::<Vec<_>>(),
        owners
            .iter()
            .map(|o| (&o.node, o.token))
            .collect::<Vec<_>>(),
        "the owners changed in calm"
    );
    let clamped = (0..3)
        .map(|i| c.node(i).count(is("catalog.clamped").f()))
        .sum::<usize>();
    assert_eq!(clamped, 3, "each node warns once about the stop grace");
    c.stop_all();
    assert_safe(&c.merged(), "cooperative", 2);
}

#[test]
fn a_follower_reads_its_own_state_writes() {
    // Three resources with a state each, one per node (placement labels): the saves of
    // the two that followers own are forwarded to the leader.
    let mut c = Cluster::builder(3)
        .label(0, "box", "0")
        .label(1, "box", "1")
        .label(2, "box", "2")
        .build();
    let resources = ["read-back-0", "read-back-1", "read-back-2"];
    for (i, r) in resources.iter().enumerate() {
        c.install_plugin_everywhere(
            r,
            &format!(
                "resource = \"{r}\"\n[limits]\nstop_grace = \"200ms\"\n\
                 [placement]\nrequire = {{ box = \"{i}\" }}\n"
            ),
            &plugins().misbehave_bytes(),
        );
    }
    c.start();
    for (i, r) in resources.iter().enumerate() {
        c.wait_owners(r, 1, |o| o[0].node == c.name(i));
    }
    // Each plugin saves and reads back every 20 ms: wait for 100 confirmed read-backs of
    // each, enough that a replica lagging the leader would show.
    for r in resources {
        c.wait(&format!("100 read-backs of {r}"), WAIT, |c| {
            c.merged()
                .iter()
                .any(|e| log_exact(r, "read back n=100")(e))
                .then_some(())
        });
    }
    c.stop_all();
    let stale: Vec<Value> = c
        .merged()
        .into_iter()
        .filter(|e| resources.iter().any(|r| log_starting(r, "stale read")(e)))
        .collect();
    assert!(
        stale.is_empty(),
        "{} stale reads, e.g. {}",
        stale.len(),
        stale[0]
    );
}

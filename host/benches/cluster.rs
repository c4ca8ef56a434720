//! Cluster benchmarks: real `tenure run` processes on loopback, timed from their event logs
//! and their `/metrics` endpoints.
//!
//! Run with `cargo bench -p tenure --bench cluster` from the workspace root (several
//! minutes). Pick sections with `TENURE_BENCH`, a comma-separated list of `failover`,
//! `peers`, `calm`, `handover`, `traffic`, `convergence`, `reach`, `early`, `restart` (default: all; `peers` needs
//! `scripts/bench-peers-setup` run once); `TENURE_BENCH_CALM_S` the length of `calm`
//! (default 600: the 10 minutes); `TENURE_BENCH_TRIALS` sets the trials of
//! failover, peers and handover (default 20), `TENURE_BENCH_RESOURCES` the resource
//! count of `convergence` (default 10000), `TENURE_BENCH_SETTLE_MS` a pause after the
//! killed node is back before the next failover trial (default 0; 11000 lets the peers'
//! dead connections to its previous run time out first). E.g.
//! `TENURE_BENCH=failover,handover cargo bench -p tenure --bench cluster`.
//!
//! Every node is a real process with its own certificate (made with `tenure certs`), a
//! config listing the others as `peers`, `[tls]`, `[lease] ttl` and `[metrics] listen`
//! (port 0: the bound address is read from its `metrics.listening` event), run with
//! `--log-format json`. All nodes run on this machine, so the `timestamp` of one node's
//! event and another's, and the benchmark's own wall clock, come from one clock.
//!
//! 1. **Failover** (3 nodes; TTL 2 s and 500 ms; target p99 ≤ TTL + 150 ms). A `heartbeat`
//!    resource with one ticket; each trial kills its owner with SIGKILL and times the
//!    wall clock taken just before the signal → the successor's `plugin.started`, after a
//!    random pause of up to a TTL (so the kill falls at a random point of the renewals). The
//!    killed node is restarted on its data dir, and the next trial waits until it has a
//!    session again and every node is ready (`/readyz`). Trials where the owner was also
//!    the Raft leader (an election comes first) are shown apart as well.
//!    **Peers** (`common/peers.rs`, which says exactly what runs): the same experiment
//!    against etcd (one server; and 3 members, one beside each contender) and ZooKeeper
//!    (one server, kazoo), 3 contenders each, at the same TTLs where the peer allows
//!    them: kill -9 of the lock holder → the next holder's acquisition.
//!    **Calm** (the failover set-up at TTL 500 ms, nothing killed, `TENURE_BENCH_CALM_S`):
//!    moves and restarts (`plugin.started` after the first), sessions expired, leases
//!    lost and elections (the growth of the Raft term); target: no move.
//! 2. **Handover** (3 nodes; target p99 ≤ 20 ms). `tenure move hb --to NODE` with the
//!    operator certificate; timed: the predecessor's `plugin.cleanup` (written when
//!    cleanup ended) → the successor's `plugin.started`, and the command → each.
//! 3. **Control traffic** (5 nodes, 10 resources): signed calls sent and served per node
//!    per second at steady state, from two `/metrics` scrapes 10 s apart.
//! 4. **Convergence** (5 nodes, `TENURE_BENCH_RESOURCES` resources, one plugin file per
//!    resource: hard links of `heartbeat.wasm` named `r00000.wasm`…, so one digest and
//!    one compile per node): first one node alone, spawn → `node.ready` (the fair
//!    measure of loading per node); then the five: spawn → every node's `node.ready`,
//!    then → every slot owned (the sum over nodes of `tenure_slots_owned`, each node's
//!    own count of the slots the replicated state grants its current session); plugins
//!    actually running and failed starts are reported beside it. Then the control
//!    traffic at that size, as in 3 (it must not grow with the resource count), and
//!    kill -9 of one node (not the leader) → every slot owned again by the others.
//! 5. **Reach** (3 nodes started together on fresh data dirs, `TENURE_BENCH_TRIALS`
//!    times): the first spawn → the moment every node has been reached by a leader (the
//!    last node's first `cluster.leader`), and the Raft term then (how many elections the
//!    formation took). A first QUIC Initial sent before the peer has bound its port is
//!    lost; how soon it is resent decides whether the first dial lands (issue 30).
//!    **Early** (`TENURE_BENCH_TRIALS` fresh clusters of 3 at each failover TTL): the
//!    failover section's kill, but of the first owner as soon as its plugin started,
//!    during the formation (the kill's time from the first spawn is shown); timed the
//!    same, with the new leader's `lease.inherited` (`from`: what its base rested on)
//!    when the owner led.
//!    **Restart** (3 nodes at each failover TTL, `TENURE_BENCH_TRIALS` trials): another
//!    node than the owner is killed and restarted on its data dir, and the owner is
//!    killed as soon as that node's `node.started` is seen (it has not been reached by a
//!    leader yet); timed as in the failover section, with the restarted node's role and
//!    the new leader's `lease.inherited` when the owner led.
//!
//! `TENURE_BENCH_TTLS_MS` sets the TTLs of the failover section (default `2000,500`).
//! `TENURE_BENCH_RUST_LOG` adds log directives to the nodes' filter. Each node's output is in `<bench dir>/nN/output.log`; the bench dirs (under `TMPDIR`,
//! default `/var/tmp`) are removed at the end unless `TENURE_BENCH_KEEP` is set.
//!
//! Plugin log lines (heartbeat's `tick`, one per plugin per second) are filtered out with
//! `RUST_LOG`, so the log pipe carries the host's events only. Nothing here asserts
//! anything about timing: the benchmark prints figures and, at the end, a table with the
//! targets and the load average at the time of each figure. It fails only when
//! something does not work at all, and every process it spawned is killed when it ends,
//! on error too. Figures from a small, shared machine are noisy: compare medians across
//! runs, and read them beside the load.

mod common;
#[path = "common/peers.rs"]
mod peers;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use common::{Summary, load_average, micros, millis, print_machine, target_dir};
use serde_json::Value;
use tempfile::TempDir;

/// The operator certificate's name.
const OPERATOR: &str = "ops";
/// The one-ticket resource of the failover and handover sections.
const HB: &str = "hb";
/// How often conditions are polled. Figures come from event timestamps, not from when
/// a poll saw them, so this only bounds how soon the next step starts.
const POLL: Duration = Duration::from_millis(20);
/// The bound on waiting for a node to start, a cluster to be ready, a trial to finish.
const WAIT: Duration = Duration::from_secs(60);
/// The window of a traffic measurement.
const TRAFFIC_WINDOW: Duration = Duration::from_secs(10);
/// The events kept in memory (the rest are only counted).
const KEEP: &[&str] = &[
    "node.started",
    "node.ready",
    "metrics.listening",
    "session.opened",
    "session.expired",
    "lease.lost",
    "cluster.leader",
    "lease.inherited",
    "plugin.started",
    "plugin.stopped",
    "plugin.cleanup",
    "plugin.failed",
    "plugin.restarting",
    "catalog.rejected",
];

fn main() -> anyhow::Result<()> {
    let sections = env_list(
        "TENURE_BENCH",
        &[
            "failover",
            "peers",
            "calm",
            "handover",
            "traffic",
            "convergence",
            "reach",
            "early",
            "restart",
        ],
    )?;
    let trials = env_usize("TENURE_BENCH_TRIALS", 20)?;
    let settle = Duration::from_millis(env_usize("TENURE_BENCH_SETTLE_MS", 0)? as u64);
    let resources = env_usize("TENURE_BENCH_RESOURCES", 10_000)?;
    print_machine("before");
    let heartbeat = build_heartbeat()?;
    let mut table = Table::default();
    let has = |s: &str| sections.iter().any(|x| x == s);
    // Before anything runs: a missing tool should not cost the sections before it.
    let peer_tools = has("peers").then(peers::Tools::find).transpose()?;
    if has("failover") {
        for ttl in env_list_ms("TENURE_BENCH_TTLS_MS", &[2000, 500])? {
            failover_section(&heartbeat, ttl, trials, settle, &mut table)?;
        }
    }
    if let Some(tools) = &peer_tools {
        peers::peers_section(tools, trials, &mut table)?;
    }
    if has("calm") {
        let calm = Duration::from_secs(env_usize("TENURE_BENCH_CALM_S", 600)? as u64);
        calm_section(&heartbeat, Duration::from_millis(500), calm, &mut table)?;
    }
    if has("handover") {
        handover_section(&heartbeat, trials, &mut table)?;
    }
    if has("traffic") {
        traffic_section(&heartbeat, 10, &mut table)?;
    }
    if has("convergence") {
        convergence_section(&heartbeat, resources, &mut table)?;
    }
    if has("reach") {
        reach_section(trials, &mut table)?;
    }
    if has("early") {
        for ttl in env_list_ms("TENURE_BENCH_TTLS_MS", &[2000, 500])? {
            early_section(&heartbeat, ttl, trials, &mut table)?;
        }
    }
    if has("restart") {
        for ttl in env_list_ms("TENURE_BENCH_TTLS_MS", &[2000, 500])? {
            restart_section(&heartbeat, ttl, trials, &mut table)?;
        }
    }
    print_machine("after");
    table.print();
    Ok(())
}

fn env_list(name: &str, all: &[&str]) -> anyhow::Result<Vec<String>> {
    let Ok(text) = std::env::var(name) else {
        return Ok(all.iter().map(|s| s.to_string()).collect());
    };
    let picked: Vec<String> = text
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    for s in &picked {
        ensure!(
            all.contains(&s.as_str()),
            "{name}: unknown section {s:?}; expected some of {all:?}"
        );
    }
    Ok(picked)
}

/// A comma-separated list of milliseconds, e.g. `TENURE_BENCH_TTLS_MS=500`.
fn env_list_ms(name: &str, default: &[u64]) -> anyhow::Result<Vec<Duration>> {
    let Ok(text) = std::env::var(name) else {
        return Ok(default
            .iter()
            .map(|&ms| Duration::from_millis(ms))
            .collect());
    };
    text.split(',')
        .map(|s| {
            s.trim()
                .parse()
                .map(Duration::from_millis)
                .with_context(|| format!("{name}={text:?}: {s:?} is not a number of ms"))
        })
        .collect()
}

fn env_usize(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .with_context(|| format!("{name}={text:?} is not a number")),
        Err(_) => Ok(default),
    }
}

// ---------------------------------------------------------------------------------------
// 1. Failover
// ---------------------------------------------------------------------------------------

fn failover_section(
    heartbeat: &Path,
    ttl: Duration,
    trials: usize,
    settle: Duration,
    table: &mut Table,
) -> anyhow::Result<()> {
    let ttl_ms = millis(ttl);
    println!(
        "\n== failover: kill -9 of the owner → successor's plugin.started (3 nodes, TTL {ttl_ms:.0} ms) =="
    );
    let mut cluster = Cluster::new(3, ttl)?;
    // The default stop grace (500 ms) is asked for at D − grace; with a short TTL the
    // lease deadline D is never more than T − m ahead, so a grace that long stops every
    // start at once. A fifth of the TTL leaves room.
    let grace = (ttl / 5).min(Duration::from_millis(500));
    let manifest = format!(
        "resource = \"hb\"\ntickets = 1\n[limits]\nstop_grace = \"{}ms\"\n",
        grace.as_millis()
    );
    println!("  (manifest: stop_grace = {} ms)", grace.as_millis());
    cluster.install_everywhere(HB, Some(&manifest), heartbeat)?;
    cluster.start_all()?;
    let mut all = Vec::new();
    let mut leader_killed = Vec::new();
    let mut follower_killed = Vec::new();
    let mut expiry = Vec::new();
    let mut elections = Vec::new();
    for trial in 0..trials {
        cluster.wait_ready(WAIT)?;
        let (owner, token) = cluster.wait_single_owner(HB, WAIT)?;
        // As for the peers: the kill falls at a random point of the owner's renewals.
        thread::sleep(peers::random_phase(ttl)?);
        let Failover {
            was_leader,
            killed_us,
            latency,
            successor,
            inherited,
        } = kill_owner(&mut cluster, owner, token, ttl)?;
        // The leader's decision: the committed expiry of the killed node's session.
        let expired = cluster.find_event(|_, e| {
            (e.name == "session.expired"
                && e.str("node") == Some(cluster.name(owner))
                && e.at_us > killed_us)
                .then(|| (e.at_us - killed_us) as f64 / 1000.0)
        });
        // When the owner led: a survivor's `cluster.leader` naming the next leader.
        let elected = if was_leader {
            cluster.find_event(|_, e| {
                (e.name == "cluster.leader"
                    && e.str("node") != Some(cluster.name(owner))
                    && e.at_us > killed_us)
                    .then(|| (e.at_us - killed_us) as f64 / 1000.0)
            })
        } else {
            None
        };
        println!(
            "  trial {:2}: killed {} ({}), {} started after {latency:.1} ms{}{}{}",
            trial + 1,
            cluster.name(owner),
            if was_leader { "leader" } else { "follower" },
            successor,
            expired.map_or(String::new(), |ms| format!(
                " (expiry committed at {ms:.1} ms)"
            )),
            elected.map_or(String::new(), |ms| format!(" (new leader at {ms:.1} ms)")),
            inherited.filter(|_| was_leader).unwrap_or_default(),
        );
        elections.extend(elected);
        all.push(latency);
        if was_leader {
            leader_killed.push(latency);
        } else {
            follower_killed.push(latency);
        }
        expiry.extend(expired);
        cluster.spawn(owner)?;
        cluster.wait_session(owner, WAIT)?;
        thread::sleep(settle);
    }
    let load = load_average();
    let target = format!("p99 ≤ {:.0} ms", ttl_ms + 150.0);
    let settled = if settle.is_zero() {
        String::new()
    } else {
        format!(", {} ms settle", settle.as_millis())
    };
    let label = format!("failover, TTL {ttl_ms:.0} ms{settled}");
    let summary = Summary::of(all);
    println!("{label}: {} (target {target})", summary.describe("ms", 1));
    table.row(&label, &summary, "ms", 1, &target, &load);
    for (what, sample) in [
        ("the owner led", leader_killed),
        ("the owner followed", follower_killed),
        ("kill → expiry committed", expiry),
        ("kill → a new leader named (the owner led)", elections),
    ] {
        if !sample.is_empty() {
            let summary = Summary::of(sample);
            let label = format!("failover, TTL {ttl_ms:.0} ms{settled}, {what}");
            println!("{label}: {}", summary.describe("ms", 1));
            table.row(&label, &summary, "ms", 1, "", &load);
        }
    }
    cluster.check_no_failures()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Reach
// ---------------------------------------------------------------------------------------

/// Three fresh nodes started together, `trials` times: the first spawn → every node
/// reached by a leader (its first `cluster.leader`), and the term at that moment.
fn reach_section(trials: usize, table: &mut Table) -> anyhow::Result<()> {
    println!("\n== reach: 3 fresh nodes started together → every node reached by a leader ==");
    let mut reached = Vec::new();
    let mut terms = Vec::new();
    for trial in 0..trials {
        let mut cluster = Cluster::new(3, Duration::from_secs(2))?;
        let spawned_us = system_us(SystemTime::now());
        for i in 0..cluster.len() {
            cluster.spawn(i)?;
        }
        // Each node's first `cluster.leader`: when it first knew a leader.
        let firsts = cluster.wait("every node reached by a leader", WAIT, |c| {
            (0..c.len())
                .map(|i| {
                    let log = c.nodes[i].log.lock().unwrap();
                    log.events
                        .iter()
                        .find(|e| e.name == "cluster.leader")
                        .map(|e| (e.at_us, e.field("term").and_then(Value::as_u64)))
                })
                .collect::<Option<Vec<_>>>()
        })?;
        let (last_us, term) = firsts
            .iter()
            .max_by_key(|(at, _)| *at)
            .copied()
            .context("no node")?;
        let ms = (last_us - spawned_us) as f64 / 1000.0;
        let term = term.unwrap_or(0);
        let each: Vec<String> = firsts
            .iter()
            .enumerate()
            .map(|(i, (at, _))| {
                format!(
                    "{} {:.0}",
                    cluster.name(i),
                    (at - spawned_us) as f64 / 1000.0
                )
            })
            .collect();
        println!(
            "  trial {:2}: every node reached after {ms:.1} ms (term {term}; {} ms)",
            trial + 1,
            each.join(", ")
        );
        reached.push(ms);
        terms.push(term as f64);
    }
    let load = load_average();
    let over = reached.iter().filter(|ms| **ms > 1000.0).count();
    let summary = Summary::of(reached);
    let label = "reach: spawn → every node reached by a leader";
    println!("{label}: {} ({over} over 1 s)", summary.describe("ms", 1));
    table.row(label, &summary, "ms", 1, "", &load);
    let summary = Summary::of(terms);
    let label = "reach: the term then (elections of the formation)";
    println!("{label}: {}", summary.describe("", 0));
    table.row(label, &summary, "", 0, "", &load);
    Ok(())
}

/// Fresh clusters of 3 whose first owner of `hb` is killed as soon as its plugin started:
/// kill → the successor's `plugin.started`, as in [`failover_section`].
fn early_section(
    heartbeat: &Path,
    ttl: Duration,
    trials: usize,
    table: &mut Table,
) -> anyhow::Result<()> {
    let ttl_ms = millis(ttl);
    println!(
        "\n== early: kill -9 of the first owner during formation → successor's plugin.started (3 nodes, TTL {ttl_ms:.0} ms) =="
    );
    let grace = (ttl / 5).min(Duration::from_millis(500));
    let manifest = format!(
        "resource = \"hb\"\ntickets = 1\n[limits]\nstop_grace = \"{}ms\"\n",
        grace.as_millis()
    );
    let mut all = Vec::new();
    let mut led = Vec::new();
    for trial in 0..trials {
        let mut cluster = Cluster::new(3, ttl)?;
        cluster.install_everywhere(HB, Some(&manifest), heartbeat)?;
        let spawned_us = system_us(SystemTime::now());
        for i in 0..cluster.len() {
            cluster.spawn(i)?;
        }
        let (owner, token) = cluster.wait_single_owner(HB, WAIT)?;
        let Failover {
            was_leader,
            killed_us,
            latency,
            successor,
            inherited,
        } = kill_owner(&mut cluster, owner, token, ttl)?;
        println!(
            "  trial {:2}: killed {} ({}) {:.0} ms after the first spawn, {} started after {latency:.1} ms{}",
            trial + 1,
            cluster.name(owner),
            if was_leader { "leader" } else { "follower" },
            (killed_us - spawned_us) as f64 / 1000.0,
            successor,
            inherited.unwrap_or_default(),
        );
        all.push(latency);
        if was_leader {
            led.push(latency);
        }
    }
    report_failovers(
        &format!("early failover, TTL {ttl_ms:.0} ms"),
        ttl_ms,
        all,
        led,
        table,
    );
    Ok(())
}

/// Prints and tables the failovers of a section against the target TTL + 150 ms, and
/// apart those where the owner led.
fn report_failovers(label: &str, ttl_ms: f64, all: Vec<f64>, led: Vec<f64>, table: &mut Table) {
    let load = load_average();
    let target = format!("worst ≤ {:.0} ms", ttl_ms + 150.0);
    let summary = Summary::of(all);
    println!("{label}: {} (target {target})", summary.describe("ms", 1));
    table.row(label, &summary, "ms", 1, &target, &load);
    if !led.is_empty() {
        let label = format!("{label}, the owner led");
        let summary = Summary::of(led);
        println!("{label}: {}", summary.describe("ms", 1));
        table.row(&label, &summary, "ms", 1, "", &load);
    }
}

/// A timed failover: the owner was killed at `killed_us`, and `successor` started the
/// plugin `latency` ms later.
struct Failover {
    was_leader: bool,
    killed_us: i64,
    latency: f64,
    successor: String,
    /// Where the new leader's session clocks started, as its `lease.inherited` says.
    inherited: Option<String>,
}

/// Kills `owner` (holding `HB` with `token`) and waits for another node's start of it.
fn kill_owner(
    cluster: &mut Cluster,
    owner: usize,
    token: u64,
    ttl: Duration,
) -> anyhow::Result<Failover> {
    let was_leader = cluster.is_leader(owner)?;
    let killed_us = system_us(cluster.kill(owner));
    let started = cluster.wait_event(ttl * 5 + WAIT, |i, e| {
        (i != owner
            && e.name == "plugin.started"
            && e.resource() == Some(HB)
            && e.token() > Some(token)
            && e.at_us > killed_us)
            .then(|| e.clone())
    })?;
    let inherited = cluster.find_event(|_, e| {
        (e.name == "lease.inherited" && e.at_us > killed_us).then(|| {
            format!(
                " (new leader's base from {}, {} ms before its lease.inherited; {} session(s) \
                 at their own renewal, the earliest {} ms before)",
                e.str("from").unwrap_or("?"),
                e.field("base_ms_ago").and_then(Value::as_u64).unwrap_or(0),
                e.field("renewals").and_then(Value::as_u64).unwrap_or(0),
                e.field("earliest_ms_ago")
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
            )
        })
    });
    Ok(Failover {
        was_leader,
        killed_us,
        latency: (started.at_us - killed_us) as f64 / 1000.0,
        successor: started.node,
        inherited,
    })
}

/// A cluster of 3 whose owner of `hb` is killed right after another node restarted:
/// kill → the successor's `plugin.started`, as in [`failover_section`].
fn restart_section(
    heartbeat: &Path,
    ttl: Duration,
    trials: usize,
    table: &mut Table,
) -> anyhow::Result<()> {
    let ttl_ms = millis(ttl);
    println!(
        "\n== restart: another node restarted, then kill -9 of the owner → successor's plugin.started (3 nodes, TTL {ttl_ms:.0} ms) =="
    );
    let grace = (ttl / 5).min(Duration::from_millis(500));
    let manifest = format!(
        "resource = \"hb\"\ntickets = 1\n[limits]\nstop_grace = \"{}ms\"\n",
        grace.as_millis()
    );
    let mut cluster = Cluster::new(3, ttl)?;
    cluster.install_everywhere(HB, Some(&manifest), heartbeat)?;
    cluster.start_all()?;
    let mut all = Vec::new();
    let mut led = Vec::new();
    for trial in 0..trials {
        cluster.wait_ready(WAIT)?;
        let (owner, token) = cluster.wait_single_owner(HB, WAIT)?;
        // The restarted node: one of the other two, by turns.
        let others: Vec<usize> = (0..cluster.len()).filter(|&i| i != owner).collect();
        let restarted = others[trial % others.len()];
        let restarted_led = cluster.is_leader(restarted)?;
        cluster.kill(restarted);
        cluster.spawn(restarted)?;
        let up_us = cluster.wait_event(WAIT, |i, e| {
            (i == restarted && e.name == "node.started").then_some(e.at_us)
        })?;
        let Failover {
            was_leader,
            killed_us,
            latency,
            successor,
            inherited,
        } = kill_owner(&mut cluster, owner, token, ttl)?;
        println!(
            "  trial {:2}: restarted {} ({}), killed {} ({}) {:.0} ms after its node.started, {} started after {latency:.1} ms{}",
            trial + 1,
            cluster.name(restarted),
            if restarted_led { "leader" } else { "follower" },
            cluster.name(owner),
            if was_leader { "leader" } else { "follower" },
            (killed_us - up_us) as f64 / 1000.0,
            successor,
            inherited.unwrap_or_default(),
        );
        all.push(latency);
        if was_leader {
            led.push(latency);
        }
        cluster.spawn(owner)?;
        cluster.wait_session(owner, WAIT)?;
    }
    report_failovers(
        &format!("failover after a restart, TTL {ttl_ms:.0} ms"),
        ttl_ms,
        all,
        led,
        table,
    );
    cluster.check_no_failures()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Calm
// ---------------------------------------------------------------------------------------

/// Nothing is killed for `calm`: the failover set-up (3 nodes, `hb` with one ticket) left
/// alone. Any `plugin.started` after the first owner is a spurious move or restart, any
/// `session.expired` or `lease.lost` a spurious loss, and the term's growth counts the
/// elections (target at 500 ms: no spurious move in 10 minutes).
fn calm_section(
    heartbeat: &Path,
    ttl: Duration,
    calm: Duration,
    table: &mut Table,
) -> anyhow::Result<()> {
    let ttl_ms = millis(ttl);
    println!(
        "\n== calm: {} s at TTL {ttl_ms:.0} ms, 3 nodes, nothing killed ==",
        calm.as_secs()
    );
    let mut cluster = Cluster::new(3, ttl)?;
    let grace = (ttl / 5).min(Duration::from_millis(500));
    let manifest = format!(
        "resource = \"hb\"\ntickets = 1\n[limits]\nstop_grace = \"{}ms\"\n",
        grace.as_millis()
    );
    cluster.install_everywhere(HB, Some(&manifest), heartbeat)?;
    cluster.start_all()?;
    cluster.wait_ready(WAIT)?;
    let (owner, token) = cluster.wait_single_owner(HB, WAIT)?;
    println!(
        "  owner {} (token {token}); watching for {} s",
        cluster.name(owner),
        calm.as_secs()
    );
    let counts =
        |c: &Cluster| ["plugin.started", "session.expired", "lease.lost"].map(|e| c.count_all(e));
    let term = |c: &Cluster| -> anyhow::Result<f64> {
        (0..3)
            .map(|i| Ok(c.scrape(i)?.sum("tenure_raft_term")))
            .try_fold(0f64, |max, t: anyhow::Result<f64>| Ok(max.max(t?)))
    };
    let before = counts(&cluster);
    let term_before = term(&cluster)?;
    let started = Instant::now();
    while started.elapsed() < calm {
        thread::sleep(Duration::from_secs(1).min(calm - started.elapsed()));
        if started.elapsed().as_secs().is_multiple_of(60) {
            let now = counts(&cluster);
            println!(
                "  {:4} s: starts +{}, expiries +{}, leases lost +{}",
                started.elapsed().as_secs(),
                now[0] - before[0],
                now[1] - before[1],
                now[2] - before[2]
            );
        }
    }
    let after = counts(&cluster);
    let elections = term(&cluster)? - term_before;
    let load = load_average();
    let label = format!("calm, TTL {ttl_ms:.0} ms, {} s", calm.as_secs());
    let text = format!(
        "{} moves or restarts, {} sessions expired, {} leases lost, {elections:.0} elections",
        after[0] - before[0],
        after[1] - before[1],
        after[2] - before[2]
    );
    println!("{label}: {text} (target: no move)");
    table.rows.push([label, text, "0 moves".into(), load]);
    cluster.check_no_failures()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 2. Handover
// ---------------------------------------------------------------------------------------

fn handover_section(heartbeat: &Path, trials: usize, table: &mut Table) -> anyhow::Result<()> {
    println!(
        "\n== handover: tenure move → predecessor's cleanup end → successor's plugin.started (3 nodes) =="
    );
    let mut cluster = Cluster::new(3, Duration::from_secs(2))?;
    cluster.install_everywhere(HB, Some("resource = \"hb\"\ntickets = 1\n"), heartbeat)?;
    cluster.start_all()?;
    let (mut gap, mut to_cleanup, mut to_start) = (Vec::new(), Vec::new(), Vec::new());
    for trial in 0..trials {
        cluster.wait_ready(WAIT)?;
        let (owner, token) = cluster.wait_single_owner(HB, WAIT)?;
        let target = (owner + 1 + trial % 2) % cluster.len();
        // A node that just started may not have advertised its plugins yet: the move is
        // refused until it has, and asked again.
        let retry_until = Instant::now() + Duration::from_secs(15);
        let asked_at = loop {
            let asked_at = system_us(SystemTime::now());
            let output = cluster.admin(target, &["move", HB, "--to", cluster.name(target)])?;
            if output.status.success() {
                break asked_at;
            }
            let error = String::from_utf8_lossy(&output.stderr).to_string();
            ensure!(
                error.contains("does not have the plugin") && Instant::now() < retry_until,
                "tenure move failed: {error}"
            );
            thread::sleep(Duration::from_millis(200));
        };
        let started = cluster.wait_event(WAIT, |i, e| {
            (i == target
                && e.name == "plugin.started"
                && e.resource() == Some(HB)
                && e.token() > Some(token))
            .then(|| e.clone())
        })?;
        let cleanup = cluster
            .find_event(|i, e| {
                (i == owner
                    && e.name == "plugin.cleanup"
                    && e.resource() == Some(HB)
                    && e.token() == Some(token))
                .then(|| e.clone())
            })
            .context("the successor started but the predecessor wrote no plugin.cleanup")?;
        let ms = |a: i64, b: i64| (b - a) as f64 / 1000.0;
        let g = ms(cleanup.at_us, started.at_us);
        println!(
            "  trial {:2}: {} → {}: cleanup ended {:.1} ms after the command ({}), started {g:.3} ms after cleanup",
            trial + 1,
            cluster.name(owner),
            cluster.name(target),
            ms(asked_at, cleanup.at_us),
            cleanup.str("reason").unwrap_or("?"),
        );
        if g < 0.0 {
            println!("  !! the successor started BEFORE the predecessor's cleanup ended");
        }
        gap.push(g);
        to_cleanup.push(ms(asked_at, cleanup.at_us));
        to_start.push(ms(asked_at, started.at_us));
    }
    let load = load_average();
    for (label, sample, target) in [
        ("handover, cleanup end → plugin.started", gap, "p99 ≤ 20 ms"),
        ("handover, command → cleanup end", to_cleanup, ""),
        ("handover, command → plugin.started", to_start, ""),
    ] {
        let summary = Summary::of(sample);
        println!("{label}: {}", summary.describe("ms", 2));
        table.row(label, &summary, "ms", 2, target, &load);
    }
    cluster.check_no_failures()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 3. Control traffic
// ---------------------------------------------------------------------------------------

fn traffic_section(heartbeat: &Path, resources: usize, table: &mut Table) -> anyhow::Result<()> {
    println!("\n== control traffic: 5 nodes, {resources} resources ==");
    let mut cluster = Cluster::new(5, Duration::from_secs(2))?;
    cluster.install_many(resources, heartbeat)?;
    cluster.start_all()?;
    cluster.wait_owned(resources, WAIT, "every slot owned")?;
    thread::sleep(Duration::from_secs(5));
    measure_traffic(&cluster, resources, table)
}

/// Scrapes every node twice, [`TRAFFIC_WINDOW`] apart, and reports calls per node per
/// second (sent and served), per node and per message kind.
fn measure_traffic(cluster: &Cluster, resources: usize, table: &mut Table) -> anyhow::Result<()> {
    let alive: Vec<usize> = (0..cluster.len()).filter(|&i| cluster.alive(i)).collect();
    let first: Vec<Scrape> = alive
        .iter()
        .map(|&i| cluster.scrape(i))
        .collect::<anyhow::Result<_>>()?;
    let cpu_before: Vec<Option<f64>> = alive
        .iter()
        .map(|&i| cluster.nodes[i].cpu_seconds())
        .collect();
    let started = Instant::now();
    thread::sleep(TRAFFIC_WINDOW);
    let cpu_after: Vec<Option<f64>> = alive
        .iter()
        .map(|&i| cluster.nodes[i].cpu_seconds())
        .collect();
    let second: Vec<Scrape> = alive
        .iter()
        .map(|&i| cluster.scrape(i))
        .collect::<anyhow::Result<_>>()?;
    let secs = started.elapsed().as_secs_f64();
    let mut per_node = Vec::new();
    let mut kinds: BTreeMap<String, f64> = BTreeMap::new();
    let mut cpu = Vec::new();
    for (k, ((&i, a), b)) in alive.iter().zip(&first).zip(&second).enumerate() {
        let rate = |metric: &str| (b.sum(metric) - a.sum(metric)) / secs;
        let busy = match (cpu_before[k], cpu_after[k]) {
            (Some(x), Some(y)) => (y - x) / secs * 100.0,
            _ => f64::NAN,
        };
        cpu.push(busy);
        let (t0, t1) = (a.sum("tenure_raft_term"), b.sum("tenure_raft_term"));
        if t0 != t1 {
            println!(
                "  !! {}: the term moved from {t0} to {t1} during the window: not a steady state",
                cluster.name(i)
            );
        }
        let (sent, served) = (
            rate("tenure_rpc_sent_total"),
            rate("tenure_rpc_served_total"),
        );
        let leader = b.sum("tenure_raft_is_leader") > 0.0;
        println!(
            "  {}{}: {sent:.1} calls sent/s, {served:.1} served/s, {:.1} failed/s; CPU {busy:.0}% of one core",
            cluster.name(i),
            if leader { " (leader)" } else { "" },
            rate("tenure_rpc_failed_total"),
        );
        per_node.push(sent + served);
        for (key, value) in &b.lines {
            if key.starts_with("tenure_rpc_sent_total{")
                || key.starts_with("tenure_rpc_served_total{")
            {
                let before = a.lines.get(key).copied().unwrap_or(0.0);
                *kinds.entry(key.clone()).or_default() += (value - before) / secs;
            }
        }
    }
    for (key, rate) in &kinds {
        println!("    cluster-wide {key}: {rate:.1}/s");
    }
    let cpu = Summary::of(cpu);
    let label = format!("CPU per node at steady state, {resources} resources");
    println!("{label}: {}", cpu.describe("% of a core", 0));
    table.row(&label, &cpu, "% of a core", 0, "", &load_average());
    let summary = Summary::of(per_node);
    let label =
        format!("control traffic, {resources} resources, calls (sent + served) per node per s");
    println!("{label}: {}", summary.describe("/s", 1));
    table.row(
        &label,
        &summary,
        "/s",
        1,
        "flat in the resource count",
        &load_average(),
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 4. Convergence
// ---------------------------------------------------------------------------------------

fn convergence_section(
    heartbeat: &Path,
    resources: usize,
    table: &mut Table,
) -> anyhow::Result<()> {
    println!("\n== convergence: 5 nodes, {resources} resources (one plugin file each) ==");
    let bound = Duration::from_secs(600);
    load_alone(heartbeat, resources, bound, table)?;
    let mut cluster = Cluster::new(5, Duration::from_secs(2))?;
    let linking = Instant::now();
    cluster.install_many(resources, heartbeat)?;
    println!(
        "  {resources} plugin files linked into each node's folder in {:.1} s",
        linking.elapsed().as_secs_f64()
    );
    let spawned = system_us(SystemTime::now());
    for i in 0..cluster.len() {
        cluster.spawn(i)?;
    }

    // Loading: spawn → node.ready (the initial folder scan applied).
    let mut loaded = Vec::new();
    for i in 0..cluster.len() {
        let ready = cluster.wait_event(bound, |j, e| {
            (j == i && e.name == "node.ready").then(|| e.clone())
        })?;
        let ms = (ready.at_us - spawned) as f64 / 1000.0;
        println!(
            "  {} loaded {} plugins: node.ready {ms:.0} ms after spawn",
            cluster.name(i),
            ready.field("plugins").and_then(Value::as_u64).unwrap_or(0)
        );
        loaded.push(ms);
    }
    let last_ready = spawned + (loaded.iter().cloned().fold(0.0, f64::max) * 1000.0) as i64;
    let load = load_average();
    let summary = Summary::of(loaded);
    let label = format!("convergence, {resources} plugins: spawn → node.ready, per node");
    println!("{label}: {}", summary.describe("ms", 0));
    table.row(&label, &summary, "ms", 0, "", &load);

    // What the control plane knows: the resources some node advertises. Converged: the
    // slots of every resource the cluster knows are owned, and either that is all of
    // them or the known count has not moved for 20 s.
    let (advertised, owned_at, balanced_at) =
        match cluster.wait_converged(resources, Duration::from_secs(20), bound) {
            Ok(found) => found,
            Err(e) => {
                println!("  !! not measured: {}", first_line(&e));
                report_running(&cluster, resources)?;
                table.note(
                    &format!("convergence, {resources} resources"),
                    "not reached: see the output",
                );
                return Ok(());
            }
        };
    let target = advertised.min(resources);
    if advertised < resources {
        println!(
            "  !! only {advertised} of {resources} resources are advertised in the replicated state \
             (see the nodes' `cannot advertise the plugins yet` debug lines). Convergence below is \
             measured for the {advertised} resources the control plane knows, NOT {resources}."
        );
    }
    let owned_us = system_us(owned_at);
    let from_spawn = (owned_us - spawned) as f64 / 1000.0;
    let from_ready = (owned_us - last_ready) as f64 / 1000.0;
    println!(
        "  all {target} slots owned {from_spawn:.0} ms after spawn, {from_ready:.0} ms after the last node.ready"
    );
    let load = load_average();
    let what = if target < resources {
        format!("{resources} resources ({target} advertised)")
    } else {
        format!("{resources} resources")
    };
    table.single(
        &format!("convergence, {what}: last node.ready → all slots owned"),
        from_ready,
        "ms",
        &load,
    );
    table.single(
        &format!("convergence, {what}: spawn → all slots owned"),
        from_spawn,
        "ms",
        &load,
    );
    report_running(&cluster, target)?;
    let balanced = match balanced_at {
        Some(at) => Ok(at),
        None => cluster.wait_balanced(target, Duration::from_secs(120)),
    };
    match balanced {
        Ok(balanced) => {
            let ms = (system_us(balanced) - owned_us) as f64 / 1000.0;
            println!("  balanced (every node within one slot of the others) {ms:.0} ms after that");
            table.single(
                &format!("convergence, {what}: all slots owned → balanced"),
                ms,
                "ms",
                &load_average(),
            );
        }
        Err(e) => println!("  !! not balanced within 120 s: {}", first_line(&e)),
    }
    match cluster.status_owned() {
        Ok(owned) => println!("  `tenure status --json` agrees: {owned} slots owned"),
        Err(e) => println!(
            "  !! `tenure status --json` failed at this size: {}",
            first_line(&e)
        ),
    }

    // Steady state: let start failures (if any) settle first, then measure.
    thread::sleep(Duration::from_secs(10));
    measure_traffic(&cluster, resources, table)?;

    // Node loss: kill a follower; every slot owned again by the others.
    let victim = (0..cluster.len())
        .find(|&i| !cluster.is_leader(i).unwrap_or(true))
        .context("no follower to kill")?;
    let held = cluster.scrape(victim)?.sum("tenure_slots_owned");
    let killed = system_us(cluster.kill(victim));
    println!(
        "  kill -9 {} (a follower, holding {held:.0} slots)",
        cluster.name(victim)
    );
    match cluster.wait_owned_or_settled(target, Duration::from_secs(20), bound) {
        Ok((owned, again)) => {
            let ms = (system_us(again) - killed) as f64 / 1000.0;
            if owned == target {
                println!("  all {target} slots owned again {ms:.0} ms after the kill");
            } else {
                println!(
                    "  !! {owned} of {target} slots owned again {ms:.0} ms after the kill, and no more \
                     for 20 s: {} slots stay vacant (only the dead node advertised their resources)",
                    target - owned
                );
            }
            table.single(
                &format!(
                    "convergence, {what}: kill -9 of a node → {owned} of {target} slots owned again"
                ),
                ms,
                "ms",
                &load_average(),
            );
        }
        Err(e) => println!("  !! not measured: {}", first_line(&e)),
    }
    report_running(&cluster, target)?;
    Ok(())
}

/// Loading the folder with one node alone (a one-node cluster: it also starts the plugins
/// it is granted while it loads, as any node does): spawn → `node.ready`. The fair
/// measure of "per node", beside the five loading at once on the same two cores.
fn load_alone(
    heartbeat: &Path,
    resources: usize,
    bound: Duration,
    table: &mut Table,
) -> anyhow::Result<()> {
    let mut alone = Cluster::new(1, Duration::from_secs(2))?;
    alone.install_many(resources, heartbeat)?;
    let spawned = system_us(SystemTime::now());
    alone.spawn(0)?;
    let ready = alone.wait_event(bound, |_, e| (e.name == "node.ready").then(|| e.clone()))?;
    let ms = (ready.at_us - spawned) as f64 / 1000.0;
    println!(
        "  one node alone loaded {} plugins: node.ready {ms:.0} ms after spawn",
        ready.field("plugins").and_then(Value::as_u64).unwrap_or(0)
    );
    table.single(
        &format!("convergence, {resources} plugins: spawn → node.ready, one node alone"),
        ms,
        "ms",
        &load_average(),
    );
    Ok(())
}

/// The first line of an error (the rest is every node's last output).
fn first_line(e: &anyhow::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

/// Prints how many plugins run and how many starts failed, beside the owned count.
fn report_running(cluster: &Cluster, resources: usize) -> anyhow::Result<()> {
    let mut running = 0.0;
    for i in (0..cluster.len()).filter(|&i| cluster.alive(i)) {
        let scrape = cluster.scrape(i)?;
        let (owned, run) = (
            scrape.sum("tenure_slots_owned"),
            scrape.sum("tenure_plugins_running"),
        );
        println!(
            "  {}: {owned:.0} slots owned, {run:.0} plugins running",
            cluster.name(i)
        );
        running += run;
    }
    let failed = cluster.count_all("plugin.failed");
    let restarting = cluster.count_all("plugin.restarting");
    println!(
        "  plugins running: {running:.0} of {resources}; plugin.restarting {restarting}, plugin.failed {failed} so far"
    );
    if running < resources as f64 {
        println!(
            "  !! not every owned slot runs its plugin: see the first failure below; the owned count is the control plane's (the replicated state)"
        );
        if let Some(e) = cluster.find_event(|_, e| {
            (e.name == "plugin.stopped" && e.str("outcome") == Some("trapped")).then(|| e.clone())
        }) {
            println!("     first failure on {}: {}", e.node, e.raw);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The cluster of processes
// ---------------------------------------------------------------------------------------

/// One event of a node's log.
#[derive(Clone, Debug)]
struct Event {
    node: String,
    name: String,
    at_us: i64,
    raw: Value,
}

impl Event {
    fn field(&self, key: &str) -> Option<&Value> {
        self.raw.get(key)
    }
    fn str(&self, key: &str) -> Option<&str> {
        self.field(key).and_then(Value::as_str)
    }
    fn resource(&self) -> Option<&str> {
        self.str("resource")
    }
    fn token(&self) -> Option<u64> {
        self.field("token").and_then(Value::as_u64)
    }
}

/// What a node's output readers collect, across its runs.
#[derive(Default)]
struct Log {
    /// Kept events of the current run.
    events: Vec<Event>,
    /// Every event name seen, all runs, counted.
    counts: HashMap<String, u64>,
    /// The last lines of output, for error messages.
    tail: VecDeque<String>,
    /// Every line, all runs: `<node dir>/output.log`.
    file: Option<std::io::LineWriter<std::fs::File>>,
}

impl Log {
    fn line(&mut self, node: &str, line: String) {
        if let Ok(raw) = serde_json::from_str::<Value>(&line)
            && let Some(name) = raw.get("event").and_then(Value::as_str)
        {
            let name = name.to_string();
            *self.counts.entry(name.clone()).or_default() += 1;
            if KEEP.contains(&name.as_str()) {
                let at_us = raw
                    .get("timestamp")
                    .and_then(Value::as_str)
                    .and_then(parse_rfc3339_us)
                    .unwrap_or(0);
                self.events.push(Event {
                    node: node.to_string(),
                    name,
                    at_us,
                    raw,
                });
            }
        }
        if let Some(file) = self.file.as_mut() {
            let _ = writeln!(file, "{line}");
        }
        if self.tail.len() == 40 {
            self.tail.pop_front();
        }
        self.tail.push_back(line);
    }
}

struct Proc {
    name: String,
    dir: PathBuf,
    child: Option<Child>,
    log: Arc<Mutex<Log>>,
    readers: Vec<thread::JoinHandle<()>>,
}

impl Proc {
    fn spawn(&mut self) -> anyhow::Result<()> {
        ensure!(self.child.is_none(), "{} is running", self.name);
        {
            let mut log = self.log.lock().unwrap();
            log.events.clear();
            if log.file.is_none() {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.dir.join("output.log"))?;
                log.file = Some(std::io::LineWriter::new(file));
            }
        }
        let mut command = Command::new(env!("CARGO_BIN_EXE_tenure"));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("TENURE_") {
                command.env_remove(key);
            }
        }
        command
            .args(["run", "--config", "tenure.toml", "--log-format", "json"])
            .current_dir(&self.dir)
            .env("RUST_LOG", log_filter())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().context("spawning tenure run")?;
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let (log, name) = (self.log.clone(), self.name.clone());
            self.readers.push(thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    log.lock().unwrap().line(&name, line);
                }
            }));
        }
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL and reap; returns the wall clock taken just before the signal.
    fn kill(&mut self) -> SystemTime {
        let before = SystemTime::now();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        before
    }

    fn alive(&self) -> bool {
        self.child.is_some()
    }

    /// CPU time (user + system) the process has used, from `/proc/PID/stat`.
    fn cpu_seconds(&self) -> Option<f64> {
        let pid = self.child.as_ref()?.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces): state is the first;
        // utime and stime are the 12th and 13th.
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // SAFETY: sysconf only reads a configuration value.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
        Some(ticks as f64 / per_second as f64)
    }

    fn tail(&self) -> String {
        let log = self.log.lock().unwrap();
        log.tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `RUST_LOG` of every node: the node's default filter, without plugin log lines.
/// `TENURE_BENCH_RUST_LOG` adds directives (e.g. `tenure::node=debug`).
fn log_filter() -> String {
    let extra = std::env::var("TENURE_BENCH_RUST_LOG").map_or(String::new(), |x| format!(",{x}"));
    format!(
        "info,tenure::runtime::output=warn,wasmtime=warn,cranelift=warn,wasmtime_wasi=warn,{}{extra}",
        tenure::raft::LOG_FILTER
    )
}

struct Cluster {
    /// Holds the CA, the certificates and every node's folder; removed on drop, after
    /// the processes (fields drop in order).
    nodes: Vec<Proc>,
    root: TempDir,
}

impl Cluster {
    /// Makes the certificates and configs of `n` nodes on free loopback ports.
    fn new(n: usize, ttl: Duration) -> anyhow::Result<Cluster> {
        let root = bench_dir("tenure-bench-")?;
        let ca = root.path().join("ca");
        let certs = root.path().join("certs");
        tenure_cmd(root.path(), &["certs", "init", "--out", path_str(&ca)?])?;
        tenure_cmd(
            root.path(),
            &[
                "certs",
                "issue",
                "--ca",
                path_str(&ca)?,
                "--operator",
                OPERATOR,
                "--out",
                path_str(&certs)?,
            ],
        )?;
        let addrs: Vec<String> = free_udp_ports(n)?
            .into_iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let mut nodes = Vec::new();
        for (i, addr) in addrs.iter().enumerate() {
            let name = format!("n{}", i + 1);
            tenure_cmd(
                root.path(),
                &[
                    "certs",
                    "issue",
                    "--ca",
                    path_str(&ca)?,
                    "--node",
                    &name,
                    "--out",
                    path_str(&certs)?,
                ],
            )?;
            let dir = root.path().join(&name);
            std::fs::create_dir_all(dir.join("plugins"))?;
            let peers: Vec<String> = (0..n)
                .filter(|&j| j != i)
                .map(|j| format!("\"n{}@{}\"", j + 1, addrs[j]))
                .collect();
            let config = format!(
                "name = \"{name}\"\ndata_dir = \"data\"\nplugins_dir = \"plugins\"\nlisten = \"{addr}\"\n\
                 peers = [{}]\n\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n\n[lease]\nttl = \"{}ms\"\n\n\
                 [metrics]\nlisten = \"127.0.0.1:0\"\n",
                peers.join(", "),
                path_str(&ca.join("ca.pem"))?,
                path_str(&certs.join(format!("{name}.pem")))?,
                path_str(&certs.join(format!("{name}.key")))?,
                ttl.as_millis(),
            );
            std::fs::write(dir.join("tenure.toml"), config)?;
            nodes.push(Proc {
                name,
                dir,
                child: None,
                log: Arc::default(),
                readers: Vec::new(),
            });
        }
        Ok(Cluster { nodes, root })
    }

    fn len(&self) -> usize {
        self.nodes.len()
    }

    fn name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    fn alive(&self, i: usize) -> bool {
        self.nodes[i].alive()
    }

    /// Installs `<stem>.toml` (if given) then `<stem>.wasm` on every node.
    fn install_everywhere(
        &self,
        stem: &str,
        manifest: Option<&str>,
        wasm: &Path,
    ) -> anyhow::Result<()> {
        for node in &self.nodes {
            let plugins = node.dir.join("plugins");
            if let Some(manifest) = manifest {
                std::fs::write(plugins.join(format!("{stem}.toml")), manifest)?;
            }
            std::fs::copy(wasm, plugins.join(format!("{stem}.wasm")))?;
        }
        Ok(())
    }

    /// Installs `count` plugins `r00000.wasm`… on every node: hard links of one file
    /// (one digest; no manifest, so each is its own one-ticket resource).
    fn install_many(&self, count: usize, wasm: &Path) -> anyhow::Result<()> {
        let source = self.root.path().join("heartbeat.wasm");
        std::fs::copy(wasm, &source)?;
        for node in &self.nodes {
            let plugins = node.dir.join("plugins");
            for k in 0..count {
                std::fs::hard_link(&source, plugins.join(format!("r{k:05}.wasm")))
                    .context("linking a plugin file")?;
            }
        }
        Ok(())
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        self.nodes[i].spawn()
    }

    fn kill(&mut self, i: usize) -> SystemTime {
        self.nodes[i].kill()
    }

    /// Spawns every node and waits until each is ready.
    fn start_all(&mut self) -> anyhow::Result<()> {
        for i in 0..self.len() {
            self.spawn(i)?;
        }
        self.wait_ready(WAIT)
    }

    /// Fails with every node's last lines if a node that should run has exited.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        for node in &mut self.nodes {
            if let Some(child) = node.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("{} exited ({status}):\n{}", node.name, node.tail());
            }
        }
        Ok(())
    }

    /// Polls `probe` until it returns a value, for up to `bound`.
    fn wait<T>(
        &mut self,
        what: &str,
        bound: Duration,
        mut probe: impl FnMut(&Cluster) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(value) = probe(self) {
                return Ok(value);
            }
            self.check_alive()?;
            if Instant::now() >= deadline {
                let tails: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| format!("--- {} ---\n{}", n.name, n.tail()))
                    .collect();
                bail!(
                    "timed out after {bound:?} waiting for {what}\n{}",
                    tails.join("\n")
                );
            }
            thread::sleep(POLL);
        }
    }

    /// The first kept event (of the nodes' current runs) `pick` accepts.
    fn find_event<T>(&self, mut pick: impl FnMut(usize, &Event) -> Option<T>) -> Option<T> {
        for (i, node) in self.nodes.iter().enumerate() {
            let log = node.log.lock().unwrap();
            if let Some(found) = log.events.iter().find_map(|e| pick(i, e)) {
                return Some(found);
            }
        }
        None
    }

    fn wait_event<T>(
        &mut self,
        bound: Duration,
        mut pick: impl FnMut(usize, &Event) -> Option<T>,
    ) -> anyhow::Result<T> {
        self.wait("an event", bound, |c| c.find_event(&mut pick))
    }

    fn count_all(&self, event: &str) -> u64 {
        self.nodes
            .iter()
            .map(|n| {
                n.log
                    .lock()
                    .unwrap()
                    .counts
                    .get(event)
                    .copied()
                    .unwrap_or(0)
            })
            .sum()
    }

    /// The metrics address of node `i`'s current run.
    fn metrics_addr(&self, i: usize) -> Option<SocketAddr> {
        let log = self.nodes[i].log.lock().unwrap();
        log.events
            .iter()
            .rev()
            .find(|e| e.name == "metrics.listening")
            .and_then(|e| e.str("addr")?.parse().ok())
    }

    fn scrape(&self, i: usize) -> anyhow::Result<Scrape> {
        let addr = self
            .metrics_addr(i)
            .with_context(|| format!("{} has no metrics address", self.name(i)))?;
        let (status, body) = http_get(addr, "/metrics")?;
        ensure!(
            status == 200,
            "/metrics of {} answered {status}",
            self.name(i)
        );
        Ok(Scrape::parse(&body))
    }

    fn is_leader(&self, i: usize) -> anyhow::Result<bool> {
        Ok(self.scrape(i)?.sum("tenure_raft_is_leader") > 0.0)
    }

    /// Waits until every running node answers `/readyz` with 200 and all agree on the
    /// leader.
    fn wait_ready(&mut self, bound: Duration) -> anyhow::Result<()> {
        self.wait("every node ready", bound, |c| {
            let mut terms = Vec::new();
            for i in (0..c.len()).filter(|&i| c.alive(i)) {
                let addr = c.metrics_addr(i)?;
                let (status, _) = http_get(addr, "/readyz").ok()?;
                if status != 200 {
                    return None;
                }
                let scrape = c.scrape(i).ok()?;
                terms.push(scrape.sum("tenure_raft_term"));
            }
            terms.windows(2).all(|w| w[0] == w[1]).then_some(())
        })
    }

    /// Waits until node `i` has opened a session in its current run, then until every
    /// node is ready.
    fn wait_session(&mut self, i: usize, bound: Duration) -> anyhow::Result<()> {
        self.wait_event(bound, |j, e| {
            (j == i && e.name == "session.opened").then_some(())
        })?;
        self.wait_ready(bound)
    }

    /// Waits until exactly one running node runs `resource` (its last `plugin.started`
    /// not followed by a `plugin.stopped` of the same token); returns it and the token.
    fn wait_single_owner(
        &mut self,
        resource: &str,
        bound: Duration,
    ) -> anyhow::Result<(usize, u64)> {
        self.wait("a single owner", bound, |c| {
            let owners: Vec<(usize, u64)> = (0..c.len())
                .filter(|&i| c.alive(i))
                .filter_map(|i| {
                    let log = c.nodes[i].log.lock().unwrap();
                    let started =
                        log.events.iter().rev().find(|e| {
                            e.name == "plugin.started" && e.resource() == Some(resource)
                        })?;
                    let token = started.token()?;
                    let stopped = log.events.iter().any(|e| {
                        e.name == "plugin.stopped"
                            && e.resource() == Some(resource)
                            && e.token() == Some(token)
                    });
                    (!stopped).then_some((i, token))
                })
                .collect();
            (owners.len() == 1).then(|| owners[0])
        })
    }

    /// Waits until the running nodes own `count` slots in all, or own fewer and that
    /// number has not moved for `quiet`; returns it and when it was first reached.
    fn wait_owned_or_settled(
        &mut self,
        count: usize,
        quiet: Duration,
        bound: Duration,
    ) -> anyhow::Result<(usize, SystemTime)> {
        let mut last: Option<(usize, SystemTime, Instant)> = None;
        self.wait("every slot owned again", bound, |c| {
            let mut owned = 0.0;
            for i in (0..c.len()).filter(|&i| c.alive(i)) {
                owned += c.scrape(i).ok()?.sum("tenure_slots_owned");
            }
            let owned = owned as usize;
            if owned == count {
                return Some((owned, SystemTime::now()));
            }
            match last {
                Some((n, at, since)) if n == owned => {
                    (since.elapsed() >= quiet).then_some((owned, at))
                }
                _ => {
                    last = Some((owned, SystemTime::now(), Instant::now()));
                    None
                }
            }
        })
    }

    /// Waits until the running nodes' own counts of owned slots add up to `count`;
    /// returns when that was first seen.
    fn wait_owned(
        &mut self,
        count: usize,
        bound: Duration,
        what: &str,
    ) -> anyhow::Result<SystemTime> {
        let mut last_print = Instant::now();
        self.wait(what, bound, |c| {
            let mut owned = 0.0;
            for i in (0..c.len()).filter(|&i| c.alive(i)) {
                owned += c.scrape(i).ok()?.sum("tenure_slots_owned");
            }
            if last_print.elapsed() >= Duration::from_secs(10) {
                println!(
                    "    … {owned:.0} of {count} slots owned (load {})",
                    load_average()
                );
                last_print = Instant::now();
            }
            (owned as usize == count).then(SystemTime::now)
        })
    }

    /// Waits until the slots of every resource the cluster knows (the leader's
    /// `tenure_cluster_resources`) are owned (the sum of the nodes' `tenure_slots_owned`),
    /// and either all `count` resources are known or the known count has not moved for
    /// `quiet`. Returns the known count and when they were first all owned.
    fn wait_converged(
        &mut self,
        count: usize,
        quiet: Duration,
        bound: Duration,
    ) -> anyhow::Result<(usize, SystemTime, Option<SystemTime>)> {
        let mut known: Option<(f64, Instant)> = None;
        let mut owned_since: Option<SystemTime> = None;
        let mut balanced_since: Option<SystemTime> = None;
        let mut last_print = Instant::now();
        self.wait("every known slot owned", bound, |c| {
            let leader = (0..c.len()).find(|&i| c.alive(i) && c.is_leader(i).unwrap_or(false))?;
            let resources = c.scrape(leader).ok()?.sum("tenure_cluster_resources");
            let mut per_node = Vec::new();
            for i in (0..c.len()).filter(|&i| c.alive(i)) {
                per_node.push(c.scrape(i).ok()?.sum("tenure_slots_owned"));
            }
            let owned: f64 = per_node.iter().sum();
            let spread = per_node.iter().cloned().fold(f64::MIN, f64::max)
                - per_node.iter().cloned().fold(f64::MAX, f64::min);
            let now = SystemTime::now();
            if resources > 0.0 && owned == resources {
                owned_since.get_or_insert(now);
                if spread <= 1.0 {
                    balanced_since.get_or_insert(now);
                } else {
                    balanced_since = None;
                }
            } else {
                owned_since = None;
                balanced_since = None;
            }
            if known.is_none_or(|(k, _)| k != resources) {
                known = Some((resources, Instant::now()));
            }
            if last_print.elapsed() >= Duration::from_secs(10) {
                println!(
                    "    … {owned:.0} slots owned of {resources:.0} resources known (load {})",
                    load_average()
                );
                last_print = Instant::now();
            }
            let settled = known.is_some_and(|(_, since)| since.elapsed() >= quiet);
            let all = resources as usize == count;
            owned_since
                .filter(|_| all || settled)
                .map(|at| (resources as usize, at, balanced_since))
        })
    }

    /// Waits until the running nodes own `count` slots in all, no two more than one
    /// apart; returns when that was first seen.
    fn wait_balanced(&mut self, count: usize, bound: Duration) -> anyhow::Result<SystemTime> {
        self.wait("balanced slots", bound, |c| {
            let mut owned = Vec::new();
            for i in (0..c.len()).filter(|&i| c.alive(i)) {
                owned.push(c.scrape(i).ok()?.sum("tenure_slots_owned") as usize);
            }
            let (min, max) = (owned.iter().min()?, owned.iter().max()?);
            (owned.iter().sum::<usize>() == count && max - min <= 1).then(SystemTime::now)
        })
    }

    /// Runs an admin command as the operator against node `i`.
    fn admin(&self, i: usize, args: &[&str]) -> anyhow::Result<Output> {
        let addr = self.node_addr(i)?;
        let certs = self.root.path().join("certs");
        let mut command = Command::new(env!("CARGO_BIN_EXE_tenure"));
        command
            .args(args)
            .args(["--addr", &addr, "--node", self.name(i)])
            .arg("--ca")
            .arg(self.root.path().join("ca").join("ca.pem"))
            .arg("--cert")
            .arg(certs.join(format!("{OPERATOR}.pem")))
            .arg("--key")
            .arg(certs.join(format!("{OPERATOR}.key")))
            .current_dir(self.root.path())
            .stdin(Stdio::null());
        command.output().context("running the admin command")
    }

    fn node_addr(&self, i: usize) -> anyhow::Result<String> {
        let config = std::fs::read_to_string(self.nodes[i].dir.join("tenure.toml"))?;
        let line = config
            .lines()
            .find_map(|l| l.strip_prefix("listen = \""))
            .context("no listen in the config")?;
        Ok(line.trim_end_matches('"').to_string())
    }

    /// The number of slots with an owner per `tenure status --json` (asked of a live node).
    fn status_owned(&self) -> anyhow::Result<usize> {
        let i = (0..self.len())
            .find(|&i| self.alive(i))
            .context("no live node")?;
        let output = self.admin(i, &["status", "--json", "--timeout", "30s"])?;
        ensure!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
        let status: Value = serde_json::from_slice(&output.stdout)?;
        let nodes = status["nodes"]
            .as_array()
            .context("no nodes in the status")?;
        Ok(nodes
            .iter()
            .filter_map(|n| n["slots"].as_u64())
            .sum::<u64>() as usize)
    }

    /// Fails if a plugin failed for good anywhere (a sign the figures are not about
    /// healthy plugins).
    fn check_no_failures(&self) -> anyhow::Result<()> {
        let failed = self.count_all("plugin.failed");
        ensure!(failed == 0, "{failed} plugin.failed events");
        Ok(())
    }
}

/// One `/metrics` answer: every sample line, by name with labels.
struct Scrape {
    lines: BTreeMap<String, f64>,
}

impl Scrape {
    fn parse(body: &str) -> Scrape {
        let lines = body
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (key, value) = l.rsplit_once(' ')?;
                Some((key.to_string(), value.parse().ok()?))
            })
            .collect();
        Scrape { lines }
    }

    /// The sum of every line of metric `name`, whatever its labels.
    fn sum(&self, name: &str) -> f64 {
        self.lines
            .iter()
            .filter(|(key, _)| key.split('{').next() == Some(name))
            .map(|(_, v)| v)
            .sum()
    }
}

/// A plain HTTP/1.1 GET; returns the status and the body.
fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("not an HTTP answer")?;
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.to_string()))
}

/// A fresh dir under `TMPDIR` (default `/var/tmp`), removed on drop unless
/// `TENURE_BENCH_KEEP` is set.
fn bench_dir(prefix: &str) -> anyhow::Result<TempDir> {
    let mut dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(std::env::var_os("TMPDIR").unwrap_or_else(|| "/var/tmp".into()))
        .context("creating the bench dir")?;
    if std::env::var_os("TENURE_BENCH_KEEP").is_some() {
        dir.disable_cleanup(true);
        println!("  (keeping {})", dir.path().display());
    }
    Ok(dir)
}

fn free_udp_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    // Held together, so the ports are distinct; released just before the nodes bind.
    let sockets: Vec<UdpSocket> = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    sockets.iter().map(|s| Ok(s.local_addr()?.port())).collect()
}

fn tenure_cmd(cwd: &Path, args: &[&str]) -> anyhow::Result<()> {
    let output = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()?;
    ensure!(
        output.status.success(),
        "tenure {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

fn path_str(path: &Path) -> anyhow::Result<&str> {
    path.to_str().context("a non-UTF-8 temp path")
}

/// Microseconds since the Unix epoch (exact: below 2^53 until the year 2255).
fn system_us(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| micros(d).round() as i64)
}

/// Microseconds since the Unix epoch of an RFC 3339 UTC timestamp
/// (`2026-11-22T07:24:37.604481Z`), as the event log writes them.
fn parse_rfc3339_us(text: &str) -> Option<i64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (h, min, s) = (t.next()??, t.next()??, t.next()??);
    let digits = fraction.len().min(6);
    let mut micros: i64 = fraction.get(..digits)?.parse().ok()?;
    for _ in digits..6 {
        micros *= 10;
    }
    // Days from the civil date (H. Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + h * 3600 + min * 60 + s) * 1_000_000) + micros)
}

// ---------------------------------------------------------------------------------------
// Plugins
// ---------------------------------------------------------------------------------------

/// Builds `heartbeat` with the cargo running this benchmark, into its target dir.
fn build_heartbeat() -> anyhow::Result<PathBuf> {
    let workspace = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let target_dir = target_dir()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    print!("building heartbeat into {} ... ", target_dir.display());
    std::io::stdout().flush()?;
    let started = Instant::now();
    let output = Command::new(&cargo)
        .args([
            "build",
            "--target",
            "wasm32-wasip2",
            "--profile",
            "plugin",
            "-p",
            "heartbeat",
        ])
        .current_dir(workspace)
        .env("CARGO_TARGET_DIR", &target_dir)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cargo}"))?;
    if !output.status.success() {
        bail!(
            "building heartbeat failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    println!("done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(target_dir
        .join("wasm32-wasip2")
        .join("plugin")
        .join("heartbeat.wasm"))
}

// ---------------------------------------------------------------------------------------
// The table printed at the end
// ---------------------------------------------------------------------------------------

#[derive(Default)]
struct Table {
    rows: Vec<[String; 4]>,
}

impl Table {
    fn row(
        &mut self,
        label: &str,
        summary: &Summary,
        unit: &str,
        d: usize,
        target: &str,
        load: &str,
    ) {
        self.rows.push([
            label.to_string(),
            summary.describe(unit, d),
            target.to_string(),
            load.to_string(),
        ]);
    }

    fn note(&mut self, label: &str, text: &str) {
        self.rows.push([
            label.to_string(),
            text.to_string(),
            String::new(),
            load_average(),
        ]);
    }

    fn single(&mut self, label: &str, value: f64, unit: &str, load: &str) {
        self.rows.push([
            label.to_string(),
            format!("{value:.0} {unit} (N = 1)"),
            String::new(),
            load.to_string(),
        ]);
    }

    fn print(&self) {
        println!("\n== summary ==");
        for [label, figure, target, load] in &self.rows {
            let target = if target.is_empty() {
                String::new()
            } else {
                format!("; target {target}")
            };
            println!("{label}: {figure}{target}; load {load}");
        }
    }
}

//! Fault injection: a seeded run of five real nodes under kills, pauses, shutdowns,
//! certificate rotations, plugin rollouts and partitions, checked afterwards by
//! `support/checker.rs`; the checker's own tests on hand-made logs; and a deliberately
//! broken build (`TENURE_UNSAFE_NO_SELF_DEMOTION=1`) that the checker must catch.
//!
//! `TENURE_FAULT_SEED` picks the seed (default [`DEFAULT_SEED`]), `TENURE_FAULT_SECONDS`
//! the duration (default [`DEFAULT_SECONDS`], the run CI does). A soak:
//! `TENURE_FAULT_SECONDS=3600 cargo test --release --test faults seeded_fault_run -- --nocapture`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use support::checker::{self, Expect, Fault, Resource, Schedule};
use support::netns::Net;
use support::*;

const DEFAULT_SEED: u64 = 0x7E4E_5EED;
const DEFAULT_SECONDS: u64 = 120;
const TTL: Duration = Duration::from_secs(1);
/// Property 4's bound after the faults stop: TTL + 2 s.
const RECOVERY: Duration = Duration::from_secs(3);

/// The fault kinds the seed picks from. The last three take links down, so they run only
/// in namespace mode; loopback mode picks from the first [`LOOPBACK_KINDS`].
const KINDS: [&str; 9] = [
    "kill-owner",
    "kill-leader",
    "pause",
    "shutdown",
    "rotate-cert",
    "rollout",
    "partition",
    "isolate-leader",
    "flap",
];
const LOOPBACK_KINDS: usize = 6;

/// The two tests that run clusters take turns: a second cluster's start-up load would
/// stretch the first one's recovery times.
static CLUSTERS: Mutex<()> = Mutex::new(());

/// xorshift64: a tiny deterministic PRNG.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

fn env_u64(key: &str, default: u64) -> u64 {
    match std::env::var(key) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("{key}={v} is not a number"))
        }
        Err(_) => default,
    }
}

fn now_us() -> i64 {
    us(SystemTime::now())
}

fn resources() -> Vec<Resource> {
    vec![
        Resource {
            name: "t1".into(),
            tickets: 1,
            counter: false,
        },
        Resource {
            name: "t2".into(),
            tickets: 2,
            counter: false,
        },
        Resource {
            name: "counter".into(),
            tickets: 1,
            counter: true,
        },
    ]
}

/// The component a resource runs (before any rollout).
fn plugin_bytes(r: &Resource) -> Vec<u8> {
    if r.counter {
        plugins().counter_bytes()
    } else {
        plugins().heartbeat_bytes()
    }
}

fn install(c: &Cluster) {
    for r in resources() {
        let manifest = manifest(&r.name, r.tickets as u32, "1.0.0");
        c.install_plugin_everywhere(&r.name, &manifest, &plugin_bytes(&r));
    }
}

/// Waits (bounded by [`WAIT`]) until the cluster is formed and every slot is owned, by a
/// run of the resource's latest rollout (`1.0.N`, N from `versions`; `1.0.0` before any);
/// returns how long that took.
fn recover(c: &Cluster, versions: &BTreeMap<&str, u32>) -> Duration {
    let started = Instant::now();
    c.wait_formed();
    for r in resources() {
        let version = format!("1.0.{}", versions.get(r.name.as_str()).unwrap_or(&0));
        c.wait(
            &format!("every slot of {} owned on {version}", r.name),
            WAIT,
            |c| {
                let owners = c.owners(&r.name);
                let slots: BTreeSet<u64> = owners.iter().map(|o| o.slot).collect();
                let current = owners.iter().all(|o| o.version == version);
                (owners.len() == r.tickets && slots.len() == r.tickets && current).then_some(())
            },
        );
    }
    started.elapsed()
}

/// The node index running the most recent grant of `resource`, if any.
fn owner_of(c: &Cluster, resource: &str) -> Option<usize> {
    c.owners(resource).first().map(|o| c.index(&o.node))
}

#[test]
fn seeded_fault_run() {
    let _turn = CLUSTERS.lock().unwrap_or_else(|e| e.into_inner());
    let seed = env_u64("TENURE_FAULT_SEED", DEFAULT_SEED);
    let seconds = env_u64("TENURE_FAULT_SECONDS", DEFAULT_SECONDS);
    let n = 5;
    let net = match Net::unavailable() {
        None => match Net::create(n) {
            Ok(net) => Some(net),
            Err(why) => {
                eprintln!("[faults] no namespaces ({why})");
                None
            }
        },
        Some(why) => {
            eprintln!("[faults] no namespaces ({why})");
            None
        }
    };
    eprintln!(
        "[faults] seed={seed} (TENURE_FAULT_SEED) duration={seconds}s (TENURE_FAULT_SECONDS) nodes={n} ttl={TTL:?} mode={}",
        if net.is_some() {
            format!("namespaces: {}", KINDS.join(", "))
        } else {
            format!(
                "loopback (no partitions): {}",
                KINDS[..LOOPBACK_KINDS].join(", ")
            )
        }
    );
    let mut builder = Cluster::builder(n).ttl(TTL);
    if let Some(net) = &net {
        builder = builder
            .hosts((0..n).map(|i| net.ip(i)).collect())
            .wrappers((0..n).map(|i| net.wrapper(i)).collect());
    }
    // Declared after `net`: the nodes die before their namespaces go.
    let mut c = builder.build();
    install(&c);
    c.start();
    recover(&c, &BTreeMap::new());

    let mut rng = Rng::new(seed);
    let mut schedule = Schedule {
        seed,
        faults: Vec::new(),
    };
    let mut versions: BTreeMap<&str, u32> = BTreeMap::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut slowest = Duration::ZERO;
    let mut recovered_at = now_us();
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut episodes = 0;
    while Instant::now() < end {
        episodes += 1;
        let kinds = if net.is_some() {
            KINDS.len()
        } else {
            LOOPBACK_KINDS
        };
        let kind = KINDS[rng.below(kinds as u64) as usize];
        let random_node = rng.below(n as u64) as usize;
        let resource = ["t1", "t2", "counter"][rng.below(3) as usize];
        let down = rng.ms(200, 1500);
        let long = rng.ms(1500, 3000);
        let owner = owner_of(&c, resource);
        let leader = c.settled_leader().map(|(name, _)| c.index(&name));
        eprintln!(
            "[faults] episode {episodes}: {kind}, resource {resource} (owner {:?}, leader {:?})",
            owner.map(|i| c.name(i)),
            leader.map(|i| c.name(i)),
        );
        match kind {
            "kill-owner" | "kill-leader" => {
                let target = if kind == "kill-owner" { owner } else { leader };
                let target = target.unwrap_or(random_node);
                let name = c.name(target).to_string();
                schedule.record(now_us(), &name, kind);
                c.kill(target);
                thread::sleep(down);
                c.spawn(target);
                schedule.record(now_us(), &name, "spawn");
            }
            "pause" => {
                let target = owner.unwrap_or(random_node);
                let name = c.name(target).to_string();
                eprintln!("[faults] SIGSTOP {name} for {long:?}");
                c.pause(target);
                schedule.record(now_us(), &name, Fault::PAUSE);
                thread::sleep(long);
                schedule.record(now_us(), &name, Fault::RESUME);
                c.resume(target);
            }
            "shutdown" => {
                let target = random_node;
                let name = c.name(target).to_string();
                schedule.record(now_us(), &name, "stop");
                let status = c.stop(target);
                assert!(status.success(), "{name} exited with {status} on SIGTERM");
                thread::sleep(down);
                c.spawn(target);
                schedule.record(now_us(), &name, "spawn");
            }
            "rotate-cert" => {
                let target = random_node;
                let name = c.name(target).to_string();
                let from = c.node(target).events().len();
                c.rotate_cert(target);
                schedule.record(now_us(), &name, kind);
                c.wait_event(target, "the rotated certificate reloaded", from, |e| {
                    is("tls.reloaded").with("what", "certificate").matches(e)
                });
            }
            "rollout" => {
                let version = versions.entry(resource).or_default();
                *version += 1;
                let version = format!("1.0.{version}");
                let spec = resources()
                    .into_iter()
                    .find(|r| r.name == resource)
                    .unwrap();
                let wasm =
                    with_custom_section(&plugin_bytes(&spec), "tenure-fault", version.as_bytes());
                let manifest = manifest(resource, spec.tickets as u32, &version);
                let mut order: Vec<usize> = (0..n).collect();
                for i in (1..n).rev() {
                    order.swap(i, rng.below(i as u64 + 1) as usize);
                }
                for i in order {
                    c.install_plugin(i, resource, &manifest, &wasm);
                    schedule.record(
                        now_us(),
                        c.name(i),
                        &format!("rollout {resource} {version}"),
                    );
                    thread::sleep(rng.ms(100, 800));
                }
            }
            "partition" | "isolate-leader" => {
                let net = net.as_ref().expect("partitions need namespaces");
                let target = if kind == "partition" { owner } else { leader };
                let target = target.unwrap_or(random_node);
                let name = c.name(target).to_string();
                net.cut(target);
                schedule.record(now_us(), &name, "cut");
                thread::sleep(long);
                schedule.record(now_us(), &name, "heal");
                net.heal(target);
            }
            "flap" => {
                let net = net.as_ref().expect("partitions need namespaces");
                let target = owner.unwrap_or(random_node);
                let name = c.name(target).to_string();
                for _ in 0..3 + rng.below(4) {
                    net.cut(target);
                    schedule.record(now_us(), &name, "cut");
                    thread::sleep(rng.ms(100, 700));
                    schedule.record(now_us(), &name, "heal");
                    net.heal(target);
                    thread::sleep(rng.ms(100, 700));
                }
            }
            other => unreachable!("fault kind {other}"),
        }
        *counts.entry(kind).or_default() += 1;
        recovered_at = now_us();
        let took = recover(&c, &versions);
        slowest = slowest.max(took);
        thread::sleep(rng.ms(0, 1000));
    }
    // Faults stopped at `recovered_at` (the last step's end). Let the logs run on a bit
    // past property 4's deadline before the nodes stop.
    let deadline = Duration::from_micros(
        (recovered_at + RECOVERY.as_micros() as i64 - now_us()).max(0) as u64,
    );
    thread::sleep(deadline + Duration::from_millis(500));
    c.stop_all();

    let events = c.merged();
    let expect = Expect {
        resources: resources(),
        recovered: Some((recovered_at, RECOVERY.as_micros() as i64)),
    };
    let violations = checker::check(&events, &schedule, &expect);
    let starts = events
        .iter()
        .filter(|e| e["event"] == "plugin.started")
        .count();
    eprintln!(
        "[faults] seed={seed} seconds={seconds} episodes={episodes} faults={counts:?} plugin.started={starts} events={} slowest recovery={slowest:?} violations={}",
        events.len(),
        violations.len()
    );
    let report: String = violations.iter().map(|v| v.render(&schedule)).collect();
    assert!(
        violations.is_empty(),
        "seed {seed}: {} violation(s)\n{report}",
        violations.len()
    );
}

/// A node that keeps running its plugin past its lease deadline (the test-only switch)
/// is cut off; the majority starts a successor; the checker must report the overlap.
#[test]
fn broken_build_is_caught() {
    let _turn = CLUSTERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(why) = Net::unavailable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let net = match Net::create(3) {
        Ok(net) => net,
        Err(why) => {
            eprintln!("SKIPPED: cannot create network namespaces: {why}");
            return;
        }
    };
    let mut c = Cluster::builder(3)
        .ttl(TTL)
        .hosts((0..3).map(|i| net.ip(i)).collect())
        .wrappers((0..3).map(|i| net.wrapper(i)).collect())
        .build();
    for i in 0..3 {
        c.node_mut(i).set_env("TENURE_UNSAFE_NO_SELF_DEMOTION", "1");
    }
    c.install_plugin_everywhere(
        "solo",
        &manifest("solo", 1, "1.0.0"),
        &plugins().heartbeat_bytes(),
    );
    c.start();
    let owner = c.wait_owners("solo", 1, |_| true).remove(0);
    let x = c.index(&owner.node);
    let mut schedule = Schedule {
        seed: 0,
        faults: Vec::new(),
    };
    net.cut(x);
    let cut_at = now_us();
    schedule.record(cut_at, &owner.node, "cut");
    c.wait("a successor on the majority side", WAIT, |c| {
        c.owners("solo")
            .into_iter()
            .find(|o| o.node != owner.node && timestamp_us(&o.started) > cut_at)
    });
    thread::sleep(Duration::from_secs(1));
    schedule.record(now_us(), &owner.node, "heal");
    net.heal(x);
    thread::sleep(Duration::from_secs(2));
    for i in c.alive_nodes() {
        c.kill(i);
    }
    let expect = Expect {
        resources: vec![Resource {
            name: "solo".into(),
            tickets: 1,
            counter: false,
        }],
        recovered: None,
    };
    let violations = checker::check(&c.merged(), &schedule, &expect);
    for v in &violations {
        eprintln!("{}", v.render(&schedule));
    }
    assert!(
        violations.iter().any(|v| v.kind == "overlap"),
        "the checker missed the broken build's overlap: {violations:?}"
    );
}

// ---- The checker on hand-made logs ------------------------------------------------------

fn at(ms: i64) -> String {
    format_rfc3339_utc(UNIX_EPOCH + Duration::from_millis(ms as u64))
}

fn ev(node: &str, ms: i64, event: &str, res: &str, slot: u64, token: u64) -> Value {
    json!({"_node": node, "timestamp": at(ms), "event": event, "resource": res,
           "slot": slot, "token": token})
}

/// A run with its stop and cleanup.
fn run(node: &str, res: &str, slot: u64, token: u64, from: i64, to: i64) -> Vec<Value> {
    vec![
        ev(node, from, "plugin.started", res, slot, token),
        ev(node, to, "plugin.stopped", res, slot, token),
        ev(node, to + 1, "plugin.cleanup", res, slot, token),
    ]
}

fn count(node: &str, ms: i64, n: u64, token: u64) -> Value {
    json!({"_node": node, "timestamp": at(ms), "event": "plugin.log",
           "resource": "counter", "message": format!("count={n} token={token}")})
}

fn exited(node: &str, ms: i64) -> Value {
    json!({"_node": node, "timestamp": at(ms), "event": EXITED})
}

fn sorted(mut events: Vec<Value>) -> Vec<Value> {
    events.sort_by_key(timestamp_us);
    events
}

fn kinds(
    events: Vec<Value>,
    schedule: &Schedule,
    tickets: usize,
    counter: bool,
) -> Vec<&'static str> {
    let res = if counter { "counter" } else { "t" };
    let expect = Expect {
        resources: vec![Resource {
            name: res.into(),
            tickets,
            counter,
        }],
        recovered: None,
    };
    let v = checker::check(&sorted(events), schedule, &expect);
    for x in &v {
        eprintln!("{}", x.render(schedule));
    }
    v.iter().map(|x| x.kind).collect()
}

fn schedule() -> Schedule {
    Schedule {
        seed: 42,
        faults: Vec::new(),
    }
}

#[test]
fn checker_accepts_a_clean_log() {
    let mut log = run("n1", "t", 0, 5, 0, 1000);
    log.extend(run("n2", "t", 0, 9, 1200, 3000));
    assert_eq!(kinds(log, &schedule(), 1, false), Vec::<&str>::new());
}

#[test]
fn checker_reports_an_overlap() {
    let mut log = run("n1", "t", 0, 5, 0, 2000);
    log.extend(run("n2", "t", 0, 9, 1000, 3000));
    assert!(kinds(log, &schedule(), 1, false).contains(&"overlap"));
    // Two tickets, three runs at once.
    let mut log = run("n1", "t", 0, 5, 0, 2000);
    log.extend(run("n2", "t", 1, 6, 100, 3000));
    log.extend(run("n3", "t", 1, 9, 1000, 3000));
    assert!(kinds(log, &schedule(), 2, false).contains(&"overlap"));
}

#[test]
fn checker_clips_a_paused_run_only_when_it_stops_promptly() {
    let mut s = schedule();
    s.record(500_000, "n1", Fault::PAUSE);
    s.record(2_500_000, "n1", Fault::RESUME);
    let mut log = run("n1", "t", 0, 5, 0, 2700);
    log.extend(run("n2", "t", 0, 9, 2000, 4000));
    assert_eq!(kinds(log, &s, 1, false), Vec::<&str>::new());
    let mut log = run("n1", "t", 0, 5, 0, 5000);
    log.extend(run("n2", "t", 0, 9, 2000, 6000));
    assert!(kinds(log, &s, 1, false).contains(&"overlap"));
}

#[test]
fn checker_reports_a_token_that_does_not_grow() {
    let mut log = run("n1", "t", 0, 9, 0, 1000);
    log.extend(run("n2", "t", 0, 7, 1500, 2000));
    assert!(kinds(log, &schedule(), 1, false).contains(&"token"));
    // The same token again on the same node after it died.
    let mut log = vec![ev("n1", 0, "plugin.started", "t", 0, 9), exited("n1", 1000)];
    log.extend(run("n1", "t", 0, 9, 1500, 2000));
    assert!(kinds(log, &schedule(), 1, false).contains(&"token"));
}

#[test]
fn checker_reports_a_lost_save() {
    let mut log = run("n1", "counter", 0, 5, 0, 2000);
    log.extend([
        count("n1", 100, 1, 5),
        count("n1", 600, 2, 5),
        count("n1", 1100, 3, 5),
    ]);
    log.extend(run("n2", "counter", 0, 9, 2500, 4000));
    log.extend([count("n2", 2600, 3, 9)]);
    assert!(kinds(log, &schedule(), 1, true).contains(&"lost-save"));
}

#[test]
fn checker_reports_a_slot_left_unowned() {
    let log = sorted(run("n1", "t", 0, 5, 0, 1000));
    let expect = Expect {
        resources: vec![Resource {
            name: "t".into(),
            tickets: 1,
            counter: false,
        }],
        recovered: Some((1_500_000, 3_000_000)),
    };
    let v = checker::check(&log, &schedule(), &expect);
    assert!(v.iter().any(|v| v.kind == "recovery"), "{v:?}");
}

#[test]
fn checker_reports_a_missing_or_double_cleanup() {
    let log = vec![
        ev("n1", 0, "plugin.started", "t", 0, 5),
        ev("n1", 1000, "plugin.stopped", "t", 0, 5),
    ];
    assert!(kinds(log, &schedule(), 1, false).contains(&"cleanup"));
    let mut log = run("n1", "t", 0, 5, 0, 1000);
    log.push(ev("n1", 1100, "plugin.cleanup", "t", 0, 5));
    assert!(kinds(log, &schedule(), 1, false).contains(&"cleanup"));
    // A node that died right after the stop owes no cleanup.
    let log = vec![
        ev("n1", 0, "plugin.started", "t", 0, 5),
        ev("n1", 1000, "plugin.stopped", "t", 0, 5),
        exited("n1", 1010),
    ];
    assert_eq!(kinds(log, &schedule(), 1, false), Vec::<&str>::new());
}

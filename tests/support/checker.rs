//! The fault-injection safety checker: a pure function over a merged event log (see
//! [`super::Cluster::merged`]) and the fault schedule that produced it. It returns every
//! violation it finds instead of panicking on the first, so that a run reports all of
//! them, each with the seed, the offending runs and the faults around them.
//!
//! The properties (README "What ownership guarantees", docs/design.md §5):
//! 1. `overlap`: at no instant do more than `tickets` runs of a resource overlap (a run is
//!    `plugin.started` .. `plugin.stopped`, or .. the node's death).
//! 2. `token`: per slot, in start order, every `plugin.started` has a token greater than
//!    every earlier one for that slot; the same token again is accepted only on the same
//!    node in the same process run (a plugin restarted by its supervisor).
//! 3. `lost-save`: the counter plugin logs `count=N` after each accepted save; the first
//!    count of a new run must be greater than every count logged before by another run.
//! 4. `recovery`: at `recovered_at + ttl + 2 s` every slot of every resource that stays
//!    owned ([`Resource::recovers`]) is owned.
//! 5. `cleanup`: every `plugin.stopped` on a node that did not die right after is followed
//!    by exactly one `plugin.cleanup` of the same token on that node.
//! 6. `stale-write` ([`downstream`], over what a plugin's downstream service received):
//!    per slot, in arrival order, the `tenure-token` never goes backwards, except for a
//!    write that was on the wire when its node froze or was cut off (its connection open
//!    before the cut).
//! 7. `replica`: no leader ever found a member's replica different from its own
//!    (`replica.diverged` at ERROR).
//!
//! Pauses: a process frozen with SIGSTOP writes nothing, so its `plugin.stopped` is logged
//! only after SIGCONT, although the plugin could not run while frozen and every host call
//! with an effect checks the local lease first (docs/design.md, invariant 2). A run that was
//! frozen by a scheduled pause counts as ended at the SIGSTOP when, after the SIGCONT, it
//! wrote nothing (no `plugin.log` of its token before its stop) and logged its stop
//! within [`PAUSE_STOP_BOUND_US`]. A run that wrote anything after the SIGCONT ran on
//! while its successor may have run, and is not clipped: a pause outlasts the lease, so
//! the engine must interrupt the plugin at the first epoch tick it runs after SIGCONT,
//! busy or not, before the guest can write a line. [`pause_stops`] measures how long each
//! frozen run took to log its stop.
//!
//! Why silence and not a few milliseconds: the time from SIGCONT to `plugin.stopped` is
//! the continued process's backlog (every timer due at once, two cores shared by five
//! nodes and other tests' clusters), not guest execution. CI's fresh-clone runs saw 67 and
//! 84 ms, and a local run under the same load 57 and 84 ms after the node's own
//! `lease.lost`, with nothing written by either plugin. The bound still catches a plugin
//! the engine fails to stop: it would run on, silently or not, for its whole stop grace.
//! Writes that reach a downstream are judged by [`downstream`], with a tighter allowance.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use std::time::{Duration, SystemTime};

use super::{EXITED, Interval, format_rfc3339_utc, intervals, timestamp_us};

/// How soon after SIGCONT a frozen run that wrote nothing must log its stop to count as
/// ended at SIGSTOP: 500 ms, about five times the slowest seen on a loaded machine, and
/// half the fault run's TTL.
pub const PAUSE_STOP_BOUND_US: i64 = 500_000;

/// How long after SIGCONT a downstream write counts as held up on the wire by the pause,
/// not sent after it, and how late after a cut began the recorder may have accepted a
/// connection the kernel had opened before it (the recorder's thread reads the clock
/// after `accept` returns): 50 ms.
pub const HELD_UP_SLACK_US: i64 = 50_000;

/// How long after a heal the bytes a node wrote while cut off may still arrive: the cut
/// took the carrier away, which flushed the node's neighbour (ARP) entries, so what the
/// node sent then waits in the queue of an unresolved neighbour, where a reset of the
/// socket does not reach it (`partition.rs` shows this on real namespaces: about 1 s after
/// the heal, at the next ARP probe). The kernel drops that queue when the neighbour fails,
/// `mcast_solicit` × `retrans_time` after it began resolving (3 × 1 s by default), and it
/// began before the heal.
pub const NEIGHBOUR_HOLD_US: i64 = 3_000_000;

/// How far around a violation the report lists faults.
const NEARBY_US: i64 = 5_000_000;

/// One injected fault or recovery step, as the runner did it.
#[derive(Clone, Debug)]
pub struct Fault {
    pub at_us: i64,
    /// The node's name (`n1`…), or `*` for the whole cluster.
    pub node: String,
    /// `kill`, `spawn`, `pause`, `resume`, `cut`, `heal`, `stop`, … (see [`Fault::PAUSE`]).
    pub action: String,
}

impl Fault {
    pub const PAUSE: &str = "pause";
    pub const RESUME: &str = "resume";
}

/// The faults of one run and the seed that chose them.
#[derive(Clone, Debug, Default)]
pub struct Schedule {
    pub seed: u64,
    pub faults: Vec<Fault>,
}

impl Schedule {
    pub fn record(&mut self, at_us: i64, node: &str, action: &str) {
        self.faults.push(Fault {
            at_us,
            node: node.to_string(),
            action: action.to_string(),
        });
    }

    /// Every node's pauses: (SIGSTOP, SIGCONT) times.
    fn pauses(&self) -> Vec<(String, i64, i64)> {
        self.episodes(Fault::PAUSE, Fault::RESUME)
    }

    /// Every node's episodes from a `start` action to the next `end` action on it.
    fn episodes(&self, start: &str, end: &str) -> Vec<(String, i64, i64)> {
        let mut open: BTreeMap<&str, i64> = BTreeMap::new();
        let mut out = Vec::new();
        for f in &self.faults {
            if f.action == start {
                open.insert(&f.node, f.at_us);
            } else if f.action == end
                && let Some(p0) = open.remove(f.node.as_str())
            {
                out.push((f.node.clone(), p0, f.at_us));
            }
        }
        out
    }
}

/// A resource and its tickets.
#[derive(Clone, Debug)]
pub struct Resource {
    pub name: String,
    pub tickets: usize,
    /// Whether it runs the `counter` plugin (property 3).
    pub counter: bool,
    /// Whether its slots stay owned once the faults stop, so that property 4 requires
    /// them owned at the recovery deadline (and the runner waits for them). False for a
    /// plugin that fails at every start (`misbehave` as `trap`): each node restarts it
    /// until `max_restarts`, then gives the slot up and sits out a cooldown, so the slot
    /// is vacant much of the time. Properties 1, 2 and 5 apply to every resource.
    pub recovers: bool,
}

/// What to check beyond the log itself.
#[derive(Clone, Debug)]
pub struct Expect {
    pub resources: Vec<Resource>,
    /// When the faults stopped (network healed, every process running), and the bound:
    /// property 4 is checked at `recovered_at + within`. `None` skips property 4.
    pub recovered: Option<(i64, i64)>,
}

/// One broken promise.
#[derive(Clone, Debug)]
pub struct Violation {
    /// `overlap`, `token`, `lost-save`, `recovery`, `cleanup` or `stale-write`.
    pub kind: &'static str,
    pub resource: String,
    pub at_us: i64,
    pub detail: String,
    pub runs: Vec<Interval>,
}

impl Violation {
    /// The violation with the seed, its runs and the faults within 5 s of it.
    pub fn render(&self, schedule: &Schedule) -> String {
        let mut s = String::new();
        writeln!(
            s,
            "VIOLATION [{}] {} at {} (seed {}): {}",
            self.kind,
            self.resource,
            time(self.at_us),
            schedule.seed,
            self.detail
        )
        .unwrap();
        for r in &self.runs {
            writeln!(s, "  run {}", describe(r)).unwrap();
        }
        writeln!(s, "  faults within 5 s:").unwrap();
        for f in schedule
            .faults
            .iter()
            .filter(|f| (f.at_us - self.at_us).abs() <= NEARBY_US)
        {
            writeln!(
                s,
                "    {:+} ms {} {}",
                (f.at_us - self.at_us) / 1000,
                f.action,
                f.node
            )
            .unwrap();
        }
        s
    }
}

/// A run, with its times in the event log's format.
pub fn describe(r: &Interval) -> String {
    format!(
        "{} slot {} token {} [{} .. {}]",
        r.node,
        r.slot,
        r.token,
        time(r.start_us),
        r.end_us.map_or("running".to_string(), time)
    )
}

/// µs since the epoch as RFC 3339 UTC.
pub fn time(us: i64) -> String {
    format_rfc3339_utc(SystemTime::UNIX_EPOCH + Duration::from_micros(us.max(0) as u64))
}

/// Checks all five properties; an empty list means the run was safe.
/// One write a plugin's downstream service received, with the fencing headers it carried.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// When the whole request had arrived.
    pub at_us: i64,
    /// When its connection was accepted.
    pub connected_us: i64,
    pub node: String,
    pub resource: String,
    pub slot: u64,
    pub token: u64,
}

/// Property 6, at a plugin's downstream: a slot's tokens never go backwards in arrival
/// order, except for a write that was on the wire when its node froze or was cut off.
/// Held up by a pause: it arrives while the node is frozen or within
/// [`HELD_UP_SLACK_US`] of its SIGCONT. Held up by a cut: its connection was open before
/// the cut (within [`HELD_UP_SLACK_US`]), and it arrives after the cut began and within
/// [`NEIGHBOUR_HOLD_US`] of the heal. A connection of a cut-off node cannot open during
/// the cut, and one it opened after the heal carries nothing written before it. Anything
/// else is a stale owner acting after its lease (`stale-write`).
///
/// A held-up write left its node while the node still held its lease; that it arrives
/// after the successor's writes is why a downstream checks `tenure-token`.
pub fn downstream(deliveries: &[Delivery], schedule: &Schedule) -> Vec<Violation> {
    let pauses = schedule.pauses();
    let cuts = schedule.episodes("cut", "heal");
    let excused = |d: &Delivery| {
        let paused = pauses.iter().any(|(node, from, to)| {
            *node == d.node && *from <= d.at_us && d.at_us <= to + HELD_UP_SLACK_US
        });
        let cut = cuts.iter().any(|(node, from, to)| {
            *node == d.node
                && d.connected_us <= from + HELD_UP_SLACK_US
                && *from <= d.at_us
                && d.at_us <= to + NEIGHBOUR_HOLD_US
        });
        paused || cut
    };
    let mut sorted: Vec<&Delivery> = deliveries.iter().collect();
    sorted.sort_by_key(|d| d.at_us);
    let mut highest: BTreeMap<(&str, u64), &Delivery> = BTreeMap::new();
    let mut out = Vec::new();
    for d in sorted {
        let key = (d.resource.as_str(), d.slot);
        match highest.get(&key) {
            Some(top) if d.token < top.token => {
                if !excused(d) {
                    out.push(Violation {
                        kind: "stale-write",
                        resource: d.resource.clone(),
                        at_us: d.at_us,
                        detail: format!(
                            "slot {}: a write from {} with token {} arrived after one from {} with token {} (at {})",
                            d.slot,
                            d.node,
                            d.token,
                            top.node,
                            top.token,
                            time(top.at_us)
                        ),
                        runs: Vec::new(),
                    });
                }
            }
            _ => {
                highest.insert(key, d);
            }
        }
    }
    out
}

pub fn check(events: &[Value], schedule: &Schedule, expect: &Expect) -> Vec<Violation> {
    let mut out = Vec::new();
    let pauses = schedule.pauses();
    for res in &expect.resources {
        let runs = intervals(events, &res.name);
        let resource_events: Vec<&Value> = events
            .iter()
            .filter(|e| e["resource"] == res.name.as_str())
            .collect();
        check_overlap(
            &res.name,
            res.tickets,
            &runs,
            &pauses,
            &resource_events,
            &mut out,
        );
        check_tokens(events, &res.name, &mut out);
        if res.counter {
            check_counter(events, &res.name, &mut out);
        }
        if let Some((at, within)) = expect.recovered
            && res.recovers
        {
            check_recovery(&res.name, res.tickets, &runs, at + within, &mut out);
        }
    }
    check_cleanup(events, &mut out);
    check_replicas(events, &mut out);
    out
}

/// Property: replicas agree. Every replica applies the same entries to the same state, so
/// a leader's `replica.diverged` alarm (`raft/checksums.rs`) under any fault is a bug.
fn check_replicas(events: &[Value], out: &mut Vec<Violation>) {
    for e in events {
        if e["event"] == "replica.diverged" && e["level"] == "ERROR" {
            out.push(Violation {
                kind: "replica",
                resource: String::new(),
                at_us: timestamp_us(e),
                detail: format!(
                    "{} found the replica of {} different at log index {}",
                    e["_node"], e["node"], e["index"]
                ),
                runs: Vec::new(),
            });
        }
    }
}

/// A run that a scheduled pause froze, and when it logged its stop.
#[derive(Clone, Debug)]
pub struct PauseStop {
    pub node: String,
    pub resource: String,
    pub token: u64,
    /// SIGCONT → `plugin.stopped` in µs; `None` when the node died (or the log ended)
    /// before the run logged its stop.
    pub after_resume_us: Option<i64>,
    /// The `plugin.stopped` event's `outcome` (`interrupted`, `stopped`, …).
    pub outcome: String,
}

/// Every run that was running on a node when a scheduled pause froze it, with how long
/// after the SIGCONT it logged `plugin.stopped`: the latency that [`PAUSE_STOP_BOUND_US`]
/// bounds. A run whose stop is stamped before the SIGCONT (it stopped as the SIGSTOP was
/// being sent) was not frozen and is left out.
pub fn pause_stops(events: &[Value], schedule: &Schedule) -> Vec<PauseStop> {
    let mut out = Vec::new();
    for (node, p0, p1) in schedule.pauses() {
        // The node's runs open at the SIGSTOP: (resource, slot, token).
        let mut open: Vec<(String, u64, u64)> = Vec::new();
        let mut frozen: Vec<(String, u64, u64)> = Vec::new();
        let mut snapshot = false;
        for e in events.iter().filter(|e| e["_node"] == node.as_str()) {
            let at = timestamp_us(e);
            if !snapshot && at >= p0 {
                frozen = open.clone();
                snapshot = true;
            }
            let key = || {
                (
                    e["resource"].as_str().unwrap_or("").to_string(),
                    e["slot"].as_u64().unwrap_or(0),
                    e["token"].as_u64().unwrap_or(0),
                )
            };
            let ev = e["event"].as_str().unwrap_or("");
            if !snapshot {
                match ev {
                    "plugin.started" => open.push(key()),
                    "plugin.stopped" => open.retain(|k| *k != key()),
                    EXITED => open.clear(),
                    _ => {}
                }
                continue;
            }
            match ev {
                EXITED => break,
                "plugin.stopped" => {
                    let k = key();
                    if let Some(i) = frozen.iter().position(|f| *f == k) {
                        frozen.remove(i);
                        if at >= p1 {
                            out.push(PauseStop {
                                node: node.clone(),
                                resource: k.0,
                                token: k.2,
                                after_resume_us: Some(at - p1),
                                outcome: e["outcome"].as_str().unwrap_or("").to_string(),
                            });
                        }
                    }
                }
                _ => {}
            }
        }
        if !snapshot {
            frozen = open;
        }
        out.extend(frozen.into_iter().map(|(resource, _, token)| PauseStop {
            node: node.clone(),
            resource,
            token,
            after_resume_us: None,
            outcome: String::new(),
        }));
    }
    out
}

/// The end that counts for overlaps: see the module's note on pauses. `events` are the
/// resource's.
fn effective_end(run: &Interval, pauses: &[(String, i64, i64)], events: &[&Value]) -> Option<i64> {
    let end = run.end_us?;
    for (node, p0, p1) in pauses {
        if *node == run.node
            && run.start_us < *p0
            && end >= *p1
            && end <= p1 + PAUSE_STOP_BOUND_US
            && !wrote(events, run, *p1, end)
        {
            return Some(*p0);
        }
    }
    Some(end)
}

/// Whether `run` wrote anything (a `plugin.log` of its node and token) in `[from, to)`.
fn wrote(events: &[&Value], run: &Interval, from: i64, to: i64) -> bool {
    events.iter().any(|e| {
        e["event"] == "plugin.log"
            && e["_node"] == run.node.as_str()
            && e["token"].as_u64() == Some(run.token)
            && (from..to).contains(&timestamp_us(e))
    })
}

fn check_overlap(
    resource: &str,
    tickets: usize,
    runs: &[Interval],
    pauses: &[(String, i64, i64)],
    events: &[&Value],
    out: &mut Vec<Violation>,
) {
    let eff: Vec<(i64, Option<i64>)> = runs
        .iter()
        .map(|r| (r.start_us, effective_end(r, pauses, events)))
        .collect();
    // Ends before starts at equal instants.
    let mut points: Vec<(i64, i32)> = Vec::new();
    for (start, end) in &eff {
        points.push((*start, 1));
        if let Some(end) = end {
            points.push((*end, -1));
        }
    }
    points.sort();
    let mut now = 0;
    let mut reported_until = i64::MIN;
    for (at, delta) in points {
        now += delta;
        if now as usize > tickets && at > reported_until {
            let live: Vec<Interval> = runs
                .iter()
                .zip(&eff)
                .filter(|(_, (s, e))| *s <= at && e.is_none_or(|e| e > at))
                .map(|(r, _)| r.clone())
                .collect();
            // One report per episode: until the earliest of these runs ends.
            reported_until = eff
                .iter()
                .filter(|(s, e)| *s <= at && e.is_none_or(|e| e > at))
                .filter_map(|(_, e)| *e)
                .min()
                .unwrap_or(i64::MAX);
            out.push(Violation {
                kind: "overlap",
                resource: resource.to_string(),
                at_us: at,
                detail: format!("{now} runs at once with {tickets} ticket(s)"),
                runs: live,
            });
        }
    }
    // Two runs of one slot at once, even within the ticket count (with one ticket the
    // sweep above already reported it).
    if tickets < 2 {
        return;
    }
    for (i, a) in runs.iter().enumerate() {
        for (j, b) in runs.iter().enumerate().skip(i + 1) {
            let (sa, ea) = eff[i];
            let (sb, eb) = eff[j];
            let overlap = ea.is_none_or(|e| e > sb) && eb.is_none_or(|e| e > sa);
            if overlap && a.slot == b.slot {
                out.push(Violation {
                    kind: "overlap",
                    resource: resource.to_string(),
                    at_us: sa.max(sb),
                    detail: format!("two runs of slot {} at once", a.slot),
                    runs: vec![a.clone(), b.clone()],
                });
            }
        }
    }
}

fn check_tokens(events: &[Value], resource: &str, out: &mut Vec<Violation>) {
    // Per slot: (token, node, run number of that node) of every grant seen.
    let mut grants: BTreeMap<u64, Vec<(u64, String, usize)>> = BTreeMap::new();
    let mut run_no: BTreeMap<String, usize> = BTreeMap::new();
    for e in events {
        let node = e["_node"].as_str().unwrap_or("").to_string();
        if e["event"] == EXITED {
            *run_no.entry(node).or_default() += 1;
            continue;
        }
        if e["event"] != "plugin.started" || e["resource"] != resource {
            continue;
        }
        let (Some(slot), Some(t)) = (e["slot"].as_u64(), e["token"].as_u64()) else {
            continue;
        };
        let run = *run_no.entry(node.clone()).or_default();
        let seen = grants.entry(slot).or_default();
        let run_of = |n: &str, t: u64| Interval {
            node: n.to_string(),
            slot,
            token: t,
            start_us: timestamp_us(e),
            end_us: None,
        };
        if let Some((last, last_node, last_run)) = seen.last()
            && *last == t
        {
            if *last_node != node || *last_run != run {
                out.push(Violation {
                    kind: "token",
                    resource: resource.to_string(),
                    at_us: timestamp_us(e),
                    detail: format!(
                        "slot {slot}: token {t} reused by {node} (run {run}) after {last_node} (run {last_run})"
                    ),
                    runs: vec![run_of(&node, t)],
                });
            }
            continue;
        }
        if let Some(max) = seen.iter().map(|(t, _, _)| *t).max()
            && max >= t
        {
            out.push(Violation {
                kind: "token",
                resource: resource.to_string(),
                at_us: timestamp_us(e),
                detail: format!("slot {slot}: token {t} on {node} after token {max}"),
                runs: vec![run_of(&node, t)],
            });
        }
        seen.push((t, node, run));
    }
}

/// `count=N token=T` → (N, T).
fn parse_count(message: &str) -> Option<(u64, u64)> {
    let mut parts = message.split_whitespace();
    let n = parts.next()?.strip_prefix("count=")?.parse().ok()?;
    let t = parts.next()?.strip_prefix("token=")?.parse().ok()?;
    Some((n, t))
}

fn check_counter(events: &[Value], resource: &str, out: &mut Vec<Violation>) {
    // The greatest count logged so far, and by which run (node, token).
    let mut best: Option<(u64, String, u64, i64)> = None;
    let mut seen_runs: Vec<(String, u64)> = Vec::new();
    for e in events {
        if e["event"] != "plugin.log" || e["resource"] != resource {
            continue;
        }
        let Some((n, t)) = e["message"].as_str().and_then(parse_count) else {
            continue;
        };
        let node = e["_node"].as_str().unwrap_or("").to_string();
        let at = timestamp_us(e);
        let key = (node.clone(), t);
        let first_of_run = !seen_runs.contains(&key);
        if first_of_run {
            seen_runs.push(key);
        }
        if let Some((max, max_node, max_token, max_at)) = &best
            && n <= *max
            && (first_of_run || *max_node != node || *max_token != t)
        {
            out.push(Violation {
                kind: "lost-save",
                resource: resource.to_string(),
                at_us: at,
                detail: format!(
                    "{node} token {t} logged count={n}, but {max_node} token {max_token} had logged count={max} at {}",
                    time(*max_at)
                ),
                runs: Vec::new(),
            });
        }
        if best.as_ref().is_none_or(|(max, ..)| n > *max) {
            best = Some((n, node, t, at));
        }
    }
}

fn check_recovery(
    resource: &str,
    tickets: usize,
    runs: &[Interval],
    deadline: i64,
    out: &mut Vec<Violation>,
) {
    let owned: Vec<&Interval> = runs
        .iter()
        .filter(|r| r.start_us <= deadline && r.end_us.is_none_or(|e| e > deadline))
        .collect();
    for slot in 0..tickets as u64 {
        if !owned.iter().any(|r| r.slot == slot) {
            out.push(Violation {
                kind: "recovery",
                resource: resource.to_string(),
                at_us: deadline,
                detail: format!("slot {slot} not owned by the recovery deadline"),
                runs: owned.iter().map(|r| (*r).clone()).collect(),
            });
        }
    }
}

fn check_cleanup(events: &[Value], out: &mut Vec<Violation>) {
    for (i, stop) in events.iter().enumerate() {
        if stop["event"] != "plugin.stopped" {
            continue;
        }
        let node = &stop["_node"];
        let later = &events[i + 1..];
        let died = later
            .iter()
            .position(|e| e["_node"] == *node && e["event"] == EXITED);
        let window = &later[..died.unwrap_or(later.len())];
        let cleanups = window
            .iter()
            .filter(|e| {
                e["_node"] == *node
                    && e["event"] == "plugin.cleanup"
                    && e["resource"] == stop["resource"]
                    && e["token"] == stop["token"]
            })
            .count();
        if cleanups == 1 || (cleanups == 0 && died.is_some()) {
            continue;
        }
        out.push(Violation {
            kind: "cleanup",
            resource: stop["resource"].as_str().unwrap_or("").to_string(),
            at_us: timestamp_us(stop),
            detail: format!(
                "{} token {}: {cleanups} plugin.cleanup after plugin.stopped and before the node died",
                node.as_str().unwrap_or(""),
                stop["token"]
            ),
            runs: Vec::new(),
        });
    }
}

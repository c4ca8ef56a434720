//! Runs a script's steps on the local cluster, one after the other, and says what each
//! did or why it failed.
//!
//! The runner reads the cluster only through what the nodes write (their JSON event
//! logs) and what the admin API answers, like an operator would. It keeps the list of
//! the plugin's starts it saw, in order: the *current* start is the last one, the
//! *previous* one the start before it, which is what the assertions about an owner that
//! lost its slot (its cleanup, its last state) look at.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::cluster::{Cluster, PLUGIN_NODES, took};
use super::node::WaitError;
use super::pattern::Pattern;
use super::recorder::Recorder;
use super::script::Step;

/// One start of the plugin: on which node, under which token, and where its
/// `plugin.started` is in that node's events.
#[derive(Clone, Copy, Debug)]
struct Start {
    node: usize,
    token: u64,
    at: usize,
}

/// Why a step failed: what it expected, and what it found instead.
#[derive(Debug)]
pub struct Failure {
    pub expected: String,
    pub found: String,
}

fn fail<T>(expected: impl Into<String>, found: impl Into<String>) -> Result<T, Failure> {
    Err(Failure {
        expected: expected.into(),
        found: found.into(),
    })
}

/// The state of a run: the cluster, the resource, the starts seen.
pub struct Runner {
    pub cluster: Cluster,
    resource: String,
    starts: Vec<Start>,
    crashed: Vec<usize>,
    /// The recording HTTP server, if the script has one.
    recorder: Option<Recorder>,
}

/// How often a wait on several nodes looks again.
const POLL: Duration = Duration::from_millis(25);
/// How often the cluster's status is asked again (each time a new admin connection).
const ADVERT_POLL: Duration = Duration::from_millis(100);
/// The bound of the state check's wait for the current start's first line.
const FIRST_LINE_WITHIN: Duration = Duration::from_secs(30);

impl Runner {
    pub fn new(cluster: Cluster, resource: &str, recorder: Option<Recorder>) -> Runner {
        Runner {
            cluster,
            resource: resource.to_string(),
            starts: Vec::new(),
            crashed: Vec::new(),
            recorder,
        }
    }

    /// Runs one step; on success, says what happened in a sentence.
    pub fn step(&mut self, step: &Step) -> Result<String, Failure> {
        match step {
            Step::Start { within } => self.start(*within),
            Step::WaitLog { line, within } => self.wait_log(line, *within),
            Step::Handover { within } => self.handover(*within),
            Step::CrashOwner { within } => self.crash_owner(*within),
            Step::Restart { within } => self.restart(*within),
            Step::LoseLease { within } => self.lose_lease(*within),
            Step::ChangeManifest { manifest, within } => self.change_manifest(manifest, *within),
            Step::ExpectRequests { within } => self.expect_requests(*within),
            Step::ExpectCleanup {
                reason,
                count,
                within,
            } => self.expect_cleanup(reason, *count, *within),
            Step::ExpectTokensIncrease => self.expect_tokens_increase(),
            Step::ExpectStateCarried { last, first } => self.expect_state_carried(last, first),
        }
    }

    fn name(&self, node: usize) -> &str {
        &self.cluster.nodes[node].name
    }

    fn current(&self) -> Start {
        *self.starts.last().expect("`start` is the first step")
    }

    fn previous(&self, step: &str) -> Result<Start, Failure> {
        match self.starts.len() {
            0 | 1 => fail(
                format!(
                    "{step} looks at the start before the current one: put it after a \
                     handover or crash-owner"
                ),
                "one start so far",
            ),
            n => Ok(self.starts[n - 2]),
        }
    }

    /// Whether `event` is `name` of this resource, with `token` if given.
    fn of(&self, event: &Value, name: &str, token: Option<u64>) -> bool {
        event["event"] == name
            && event["resource"] == self.resource.as_str()
            && token.is_none_or(|t| event["token"] == t)
    }

    fn start(&mut self, within: Duration) -> Result<String, Failure> {
        let began = Instant::now();
        for i in 0..self.cluster.nodes.len() {
            if let Err(e) = self.cluster.spawn(i) {
                return fail("the nodes to start", format!("{e:#}"));
            }
        }
        let deadline = began + within;
        for i in 0..self.cluster.nodes.len() {
            self.wait_ready(i, 0, deadline)?;
        }
        self.wait_advertised(began, within)?;
        let froms = vec![0; PLUGIN_NODES];
        let start = self.wait_started(&froms, 0, (began, within), "the plugin to start")?;
        Ok(format!(
            "the cluster formed and the plugin started on {} (token {}) after {}",
            self.name(start.node),
            start.token,
            took(began)
        ))
    }

    /// Waits until node `i` is ready and holds a session (events from `from` on).
    fn wait_ready(&self, i: usize, from: usize, deadline: Instant) -> Result<(), Failure> {
        let node = &self.cluster.nodes[i];
        let bound = deadline.saturating_duration_since(Instant::now());
        node.wait(from, bound, |events, _| {
            let has = |name: &str| events.iter().any(|e| e["event"] == name);
            (has("node.ready") && has("session.opened")).then_some(())
        })
        .or_else(|e| {
            fail(
                format!(
                    "{} to be ready with a session (node.ready, session.opened)",
                    node.name
                ),
                e.to_string(),
            )
        })
    }

    /// Waits until the cluster knows the plugin on every running plugin node: before
    /// that, a move to one of them is refused (a node is ready once it loaded its
    /// plugins; its advert is committed a moment later).
    fn wait_advertised(&self, began: Instant, within: Duration) -> Result<(), Failure> {
        let wanted: Vec<&str> = self.cluster.nodes[..PLUGIN_NODES]
            .iter()
            .filter(|n| n.running())
            .map(|n| n.name.as_str())
            .collect();
        loop {
            let last = match self.cluster.advertising(&self.resource) {
                Ok(nodes) if wanted.iter().all(|w| nodes.iter().any(|n| n == w)) => {
                    return Ok(());
                }
                Ok(nodes) => format!("the cluster knows it on: {}", nodes.join(", ")),
                Err(e) => crate::cli::describe_error(&e),
            };
            if began.elapsed() >= within {
                return fail(
                    format!(
                        "the cluster to know the plugin of {} on {} (`tenure status`)",
                        self.resource,
                        wanted.join(" and ")
                    ),
                    format!("not within {within:?}: {last}"),
                );
            }
            std::thread::sleep(ADVERT_POLL);
        }
    }

    /// Waits for a `plugin.started` of the resource with a token above `above` on a
    /// running plugin node (node `i`'s events from `froms[i]` on); records the start.
    fn wait_started(
        &mut self,
        froms: &[usize],
        above: u64,
        (began, within): (Instant, Duration),
        what: &str,
    ) -> Result<Start, Failure> {
        loop {
            for (node, &from) in froms.iter().enumerate() {
                if !self.cluster.nodes[node].running() {
                    continue;
                }
                let events = self.cluster.nodes[node].events_from(from);
                let found = events.iter().enumerate().find_map(|(k, e)| {
                    let token = e["token"].as_u64()?;
                    (self.of(e, "plugin.started", None) && token > above).then_some(Start {
                        node,
                        token,
                        at: from + k,
                    })
                });
                if let Some(start) = found {
                    self.starts.push(start);
                    return Ok(start);
                }
            }
            if began.elapsed() >= within {
                return fail(
                    format!(
                        "{what} (plugin.started of {} above token {above})",
                        self.resource
                    ),
                    format!("no such start: {}", WaitError::Timeout(within)),
                );
            }
            std::thread::sleep(POLL);
        }
    }

    fn wait_log(&mut self, line: &Pattern, within: Duration) -> Result<String, Failure> {
        let began = Instant::now();
        let s = self.current();
        let node = &self.cluster.nodes[s.node];
        let found = node.wait(s.at, within, |events, _| {
            events.iter().find_map(|e| {
                let text = e["message"].as_str()?;
                (self.of(e, "plugin.log", Some(s.token)) && line.find(text, s.token).is_some())
                    .then(|| text.to_string())
            })
        });
        match found {
            Ok(text) => Ok(format!(
                "{} logged {text:?} under token {} after {}",
                node.name,
                s.token,
                took(began)
            )),
            Err(e) => fail(
                format!(
                    "a log line of the start on {} (token {}) containing {line}",
                    node.name, s.token
                ),
                e.to_string(),
            ),
        }
    }

    /// The plugin node that is not the owner.
    fn other(&self, s: Start, step: &str) -> Result<usize, Failure> {
        let other = 1 - s.node;
        if !self.cluster.nodes[other].running() {
            return fail(
                format!(
                    "{step}: {} to be running, to take the slot",
                    self.name(other)
                ),
                format!(
                    "{} was crashed by the script: add a `restart` step before",
                    self.name(other)
                ),
            );
        }
        Ok(other)
    }

    /// For a step that moves the slot to the other plugin node: the current start, the
    /// node that is to take the slot, and where to look for its start (only that node's
    /// events, from now on).
    fn to_other(&self, step: &str) -> Result<(Start, usize, Vec<usize>), Failure> {
        let s = self.current();
        let to = self.other(s, step)?;
        let mut froms = vec![usize::MAX; PLUGIN_NODES];
        froms[to] = self.cluster.nodes[to].len();
        Ok((s, to, froms))
    }

    fn handover(&mut self, within: Duration) -> Result<String, Failure> {
        let began = Instant::now();
        let (s, to, froms) = self.to_other("handover")?;
        let to_name = self.name(to).to_string();
        match self.cluster.move_slot(&self.resource, &to_name) {
            Ok(_) => {}
            Err(e) => {
                return fail(
                    format!(
                        "the cluster to accept `move {} --to {to_name}`",
                        self.resource
                    ),
                    crate::cli::describe_error(&e),
                );
            }
        }
        let start = self.wait_started(
            &froms,
            s.token,
            (began, within),
            &format!("the plugin to start on {to_name} after the move"),
        )?;
        Ok(format!(
            "moved from {} to {to_name}: it started there with token {} after {}",
            self.name(s.node),
            start.token,
            took(began)
        ))
    }

    fn crash_owner(&mut self, within: Duration) -> Result<String, Failure> {
        let began = Instant::now();
        let (s, to, froms) = self.to_other("crash-owner")?;
        self.cluster.nodes[s.node].kill();
        self.crashed.push(s.node);
        let start = self.wait_started(
            &froms,
            s.token,
            (began, within),
            &format!("the slot to start on {} after the crash", self.name(to)),
        )?;
        Ok(format!(
            "killed {} (SIGKILL); the slot started on {} with token {} after {}",
            self.name(s.node),
            self.name(to),
            start.token,
            took(began)
        ))
    }

    fn lose_lease(&mut self, within: Duration) -> Result<String, Failure> {
        let began = Instant::now();
        let (s, to, froms) = self.to_other("lose-lease")?;
        let frozen = self.name(s.node).to_string();
        if !self.cluster.nodes[s.node].signal(libc::SIGSTOP) {
            return fail(
                format!("{frozen} to be frozen (SIGSTOP)"),
                "it does not run",
            );
        }
        let started = self.wait_started(
            &froms,
            s.token,
            (began, within),
            &format!(
                "the slot to start on {} while {frozen} is frozen",
                self.name(to)
            ),
        );
        // Let it go on whatever happened: a frozen node would hold up every later step.
        let woke = self.cluster.nodes[s.node].len();
        let resumed = self.cluster.nodes[s.node].signal(libc::SIGCONT);
        let start = started?;
        if !resumed {
            return fail(format!("{frozen} to go on (SIGCONT)"), "it does not run");
        }
        // Back in the cluster before the next step: its plugin stopped, it opened a new
        // session and its plugin is advertised again (a move to it needs that).
        let node = &self.cluster.nodes[s.node];
        let deadline = Instant::now() + within;
        let rejoined = node.wait(woke, within, |events, _| {
            events
                .iter()
                .any(|e| e["event"] == "session.opened")
                .then_some(())
        });
        if let Err(e) = rejoined {
            return fail(
                format!("{frozen} to open a new session after it went on"),
                e.to_string(),
            );
        }
        let left = deadline.saturating_duration_since(Instant::now());
        self.wait_advertised(Instant::now(), left)?;
        Ok(format!(
            "froze {frozen} (SIGSTOP); its lease ran out and the slot started on {} with \
             token {} after {}; {frozen} went on (SIGCONT) and is back with a new session",
            self.name(to),
            start.token,
            took(began)
        ))
    }

    fn change_manifest(
        &mut self,
        manifest: &std::path::Path,
        within: Duration,
    ) -> Result<String, Failure> {
        let began = Instant::now();
        let s = self.current();
        let text = match std::fs::read(manifest) {
            Ok(text) => text,
            Err(e) => {
                return fail(
                    format!("the manifest {} to read", manifest.display()),
                    e.to_string(),
                );
            }
        };
        let parsed = std::str::from_utf8(&text)
            .map_err(|e| e.to_string())
            .and_then(|text| crate::catalog::Manifest::parse(&self.cluster.stem, text));
        match parsed {
            Ok(m) if m.resource == self.resource && m.tickets == 1 => {}
            Ok(m) => {
                return fail(
                    format!(
                        "{} to name resource {} with tickets = 1",
                        manifest.display(),
                        self.resource
                    ),
                    format!("resource {}, tickets = {}", m.resource, m.tickets),
                );
            }
            Err(e) => return fail(format!("{} to be a manifest", manifest.display()), e),
        }
        if self.cluster.installed_manifest().as_deref() == Some(&text[..]) {
            return fail(
                format!(
                    "{} to differ from the installed manifest",
                    manifest.display()
                ),
                "the same bytes: nothing would change",
            );
        }
        let was = self.digest_of(s);
        let froms: Vec<usize> = self.cluster.nodes[..PLUGIN_NODES]
            .iter()
            .map(|n| n.len())
            .collect();
        if let Err(e) = self.cluster.replace_manifest(&text) {
            return fail("the new manifest in both plugin folders", format!("{e:#}"));
        }
        // A start of another version: one of the old manifest (a node that had not read
        // the new one yet) does not count.
        let start = loop {
            let start = self.wait_started(
                &froms,
                self.current().token,
                (began, within),
                &format!("the plugin to start again under {}", manifest.display()),
            )?;
            if self.digest_of(start) != was {
                break start;
            }
        };
        Ok(format!(
            "installed {} on both plugin nodes; the plugin started again on {} with token {} \
             after {}",
            manifest.display(),
            self.name(start.node),
            start.token,
            took(began)
        ))
    }

    /// Every start of the resource the nodes wrote (restarts after a failure included),
    /// with when it began, by token; an event without a token or a readable time is an
    /// error, not skipped (skipping it could only hide a stale request).
    fn started_at(&self) -> Result<Vec<(u64, std::time::SystemTime)>, Failure> {
        let mut starts = Vec::new();
        for node in &self.cluster.nodes[..PLUGIN_NODES] {
            for e in node.events_from(0) {
                if !self.of(&e, "plugin.started", None) {
                    continue;
                }
                let token = e["token"].as_u64();
                let at = e["timestamp"]
                    .as_str()
                    .and_then(|t| humantime::parse_rfc3339(t).ok());
                match (token, at) {
                    (Some(token), Some(at)) => starts.push((token, at)),
                    _ => {
                        return fail(
                            "each plugin.started to have a token and an RFC 3339 timestamp",
                            format!("on {}: {e}", node.name),
                        );
                    }
                }
            }
        }
        starts.sort();
        Ok(starts)
    }

    fn expect_requests(&mut self, within: Duration) -> Result<String, Failure> {
        let began = Instant::now();
        let s = self.current();
        let Some(recorder) = &self.recorder else {
            return fail("a recording server (`record_http`)", "none");
        };
        let addr = recorder.addr;
        let requests = loop {
            let requests = recorder.requests();
            if requests.iter().any(|r| r.token == Some(s.token)) {
                break requests;
            }
            if began.elapsed() >= within {
                return fail(
                    format!(
                        "a request to {addr} carrying tenure-token {} (the start on {})",
                        s.token,
                        self.name(s.node)
                    ),
                    format!(
                        "{} request(s) in {within:?}, none with it (is http://{addr} granted \
                         in the manifest, and does the plugin send to it?)",
                        requests.len()
                    ),
                );
            }
            std::thread::sleep(POLL);
        };
        if let Some(r) = requests.iter().find(|r| r.token.is_none()) {
            return fail(
                "every request to carry a numeric tenure-token (the host stamps every \
                 request made through its HTTP)",
                format!(
                    "{} {} arrived without one: a request that goes around the host's HTTP \
                     (a raw socket) is not fenced",
                    r.method, r.path
                ),
            );
        }
        let starts = self.started_at()?;
        // The host writes no byte of a request once the instance may no longer act
        // (`runtime/http/socket.rs`), and a successor starts only after that: so on one
        // machine every request of an owner arrives before a newer owner's start began.
        for r in &requests {
            let token = r.token.unwrap_or_default();
            if !starts.iter().any(|(t, _)| *t == token) {
                return fail(
                    "every request's tenure-token to be one of this run's starts",
                    format!(
                        "{} {} carried token {token}, which no start had",
                        r.method, r.path
                    ),
                );
            }
            let newer = starts.iter().find(|(t, _)| *t > token);
            if let Some((newer, at)) = newer
                && r.at > *at
            {
                let late = r.at.duration_since(*at).unwrap_or_default();
                return fail(
                    "no request of an owner after a newer owner started",
                    format!(
                        "{} {} under token {token} arrived {late:?} after the start under \
                         token {newer} began",
                        r.method, r.path
                    ),
                );
            }
        }
        let mine = requests.iter().filter(|r| r.token == Some(s.token)).count();
        Ok(format!(
            "{} request(s) to {addr}, each with its owner's tenure-token, none after a newer \
             owner started; {mine} from the start on {} (token {})",
            requests.len(),
            self.name(s.node),
            s.token
        ))
    }

    /// The version digest a start ran (its `plugin.started`).
    fn digest_of(&self, s: Start) -> String {
        let events = self.cluster.nodes[s.node].events_from(s.at);
        let started = events.first().and_then(|e| e["digest"].as_str());
        started.unwrap_or_default().to_string()
    }

    fn restart(&mut self, within: Duration) -> Result<String, Failure> {
        let began = Instant::now();
        if self.crashed.is_empty() {
            return fail("a node crashed by an earlier crash-owner step", "none");
        }
        let mut names = Vec::new();
        for i in std::mem::take(&mut self.crashed) {
            let from = self.cluster.nodes[i].len();
            if let Err(e) = self.cluster.spawn(i) {
                return fail(format!("{} to start again", self.name(i)), format!("{e:#}"));
            }
            self.wait_ready(i, from, began + within)?;
            names.push(self.name(i).to_string());
        }
        self.wait_advertised(began, within)?;
        Ok(format!(
            "{} ran again on its data, ready with a session after {}",
            names.join(", "),
            took(began)
        ))
    }

    fn expect_cleanup(
        &mut self,
        reason: &str,
        count: u32,
        within: Duration,
    ) -> Result<String, Failure> {
        let p = self.previous("expect-cleanup")?;
        let node = &self.cluster.nodes[p.node];
        let cleanups = |events: &[Value]| -> Vec<(String, String)> {
            events
                .iter()
                .filter(|e| self.of(e, "plugin.cleanup", Some(p.token)))
                .map(|e| {
                    let text = |k: &str| e[k].as_str().unwrap_or("?").to_string();
                    (text("reason"), text("outcome"))
                })
                .collect()
        };
        // The cleanup has normally ended before the next start began; the wait only
        // covers a slow one. A node that died runs none: its log is complete.
        let _ = node.wait(p.at, within, |events, _| {
            (cleanups(events).len() >= count as usize).then_some(())
        });
        let found = cleanups(&node.events_from(p.at));
        let expected = format!(
            "{count} cleanup(s) of the start on {} (token {}), reason {reason}, outcome ok",
            node.name, p.token
        );
        let right =
            found.len() == count as usize && found.iter().all(|(r, o)| r == reason && o == "ok");
        if !right {
            let list: Vec<String> = found
                .iter()
                .map(|(r, o)| format!("reason {r}, outcome {o}"))
                .collect();
            return fail(
                expected,
                format!("{} cleanup(s): {}", found.len(), list.join("; ")),
            );
        }
        Ok(match count {
            0 => format!(
                "the start on {} (token {}) had no cleanup",
                node.name, p.token
            ),
            _ => format!(
                "the start on {} (token {}) had {count} cleanup(s), reason {reason}",
                node.name, p.token
            ),
        })
    }

    fn expect_tokens_increase(&mut self) -> Result<String, Failure> {
        let mut starts: Vec<(String, u64, String)> = Vec::new();
        for node in &self.cluster.nodes[..PLUGIN_NODES] {
            for e in node.events_from(0) {
                if self.of(&e, "plugin.started", None) {
                    let time = e["timestamp"].as_str().unwrap_or("").to_string();
                    let token = e["token"].as_u64().unwrap_or(0);
                    starts.push((time, token, node.name.clone()));
                }
            }
        }
        // One clock (this machine's) and one format: RFC 3339 UTC sorts as text.
        starts.sort();
        let list: Vec<String> = starts
            .iter()
            .map(|(_, t, n)| format!("{t} ({n})"))
            .collect();
        if starts.windows(2).any(|w| w[1].1 <= w[0].1) {
            return fail(
                "every start's token above the one before",
                format!("tokens in start order: {}", list.join(", ")),
            );
        }
        Ok(format!(
            "{} starts, tokens {}",
            starts.len(),
            list.join(" < ")
        ))
    }

    fn expect_state_carried(&mut self, last: &Pattern, first: &Pattern) -> Result<String, Failure> {
        let p = self.previous("expect-state-carried")?;
        let c = self.current();
        let matching = |pattern: &Pattern, s: Start| -> Vec<(String, u64)> {
            self.cluster.nodes[s.node]
                .events_from(s.at)
                .iter()
                .filter(|e| self.of(e, "plugin.log", Some(s.token)))
                .filter_map(|e| {
                    let text = e["message"].as_str()?;
                    pattern.find(text, s.token).map(|n| (text.to_string(), n))
                })
                .collect()
        };
        let Some((last_line, before)) = matching(last, p).pop() else {
            return fail(
                format!(
                    "a line of the previous start ({}, token {}) containing {last}",
                    self.name(p.node),
                    p.token
                ),
                "none",
            );
        };
        let node = &self.cluster.nodes[c.node];
        let first_line = node.wait(c.at, FIRST_LINE_WITHIN, |events, _| {
            events.iter().find_map(|e| {
                let text = e["message"].as_str()?;
                if !self.of(e, "plugin.log", Some(c.token)) {
                    return None;
                }
                first.find(text, c.token).map(|n| (text.to_string(), n))
            })
        });
        let (first_line, after) = match first_line {
            Ok(found) => found,
            Err(e) => {
                return fail(
                    format!(
                        "a line of the current start ({}, token {}) containing {first}",
                        node.name, c.token
                    ),
                    e.to_string(),
                );
            }
        };
        if after < before {
            return fail(
                format!("the current start to go on from at least {before} ({last_line:?})"),
                format!("{after} ({first_line:?})"),
            );
        }
        Ok(format!(
            "{} logged {last_line:?} last, then {} {first_line:?} first ({before} → {after})",
            self.name(p.node),
            node.name
        ))
    }
}

//! A small scenario language for placement tests: a cluster is set up, planned and
//! advanced line by line, and expectations read like the plan they check.
//!
//! ```text
//! # setting up (each line applies real commands through Cluster::apply)
//! node a zone=a              # join and open a session (sessions are opened in line order)
//! node c draining            # ... then drain it; `down`: join without a session
//! plugin r on a b version=1.0.0 tickets=2 require=zone=a digest=x
//! plugin r on a core=14 memories=2 tables=5   # its footprint (default core=3 memories=1 tables=1)
//! plugins py 1100 on a core=14   # py0000 … py1099, with the flags of `plugin`
//! unplug r from a            # a no longer advertises r
//! grant r/0 a since=0        # Assign with a's advert of r, granted at `since` (default now)
//! handover r/0 moved to=b    # BeginHandover at the slot's current token
//! release r/0 | release all  # Release handed-over slots
//! giveup r/0 until=60000     # GiveUp: a cooldown for the owner
//! drain a | undrain a | kill a | start a     # kill ends the session, start opens one
//! time 20000 | advance 1000  # the leader's clock, ms
//! options min_term=10000 max_moves=2 instances=3   # capacity: instances= core_instances= memories= tables=
//!
//! # planning
//! plan                       # the plan at the current time
//! expect assign r/0 a        # the plan has this command (each expect consumes one)
//! expect handover r/0 drained [to=b]
//! expect pending r/1 "every eligible node" "c is draining"   # the reason has each text
//! expect count handover=2 assign=0             # counts by kind; consumes that kind
//! ...                        # the rest of this plan is not checked
//! apply                      # apply the plan; every command must be accepted
//! round                      # plan, apply, release all (the plan is not checked)
//! converge within=20 step=1000   # rounds until a plan is empty, advancing the clock
//!
//! # checking the state
//! expect owners r a -        # r/0 owned by a, r/1 vacant
//! expect load a=2 b=1        # slots held per node
//! expect balanced            # live non-draining nodes' loads differ by at most one
//! expect nothing             # the last plan is empty, no pending slots either
//! ```
//!
//! Every command and pending slot of a plan must be matched by an `expect` (or waved
//! through with `...`) before the next `plan`, `apply`, `round` or the end: a scenario
//! says everything its plan does.

use std::collections::BTreeMap;

use crate::cluster::{Advert, Cluster, Command, Handover, Pool, Response};

use super::{Options, Plan, plan};

/// Runs `script`; panics with the line and the state on the first failed expectation.
pub fn run(script: &str) -> Sim {
    let mut sim = Sim::default();
    sim.run(script);
    sim
}

#[derive(Default)]
pub struct Sim {
    pub cluster: Cluster,
    pub now_ms: u64,
    pub options: Options,
    /// The last plan.
    pub plan: Plan,
    index: u64,
    /// Lines of the last plan no `expect` has matched yet.
    unchecked: Vec<String>,
    line: String,
}

impl Sim {
    /// Runs more of a script on this simulation.
    pub fn run(&mut self, script: &str) {
        for (number, line) in script.lines().enumerate() {
            let line = line.split(" #").next().unwrap_or("").trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            self.line = format!("line {}: {line}", number + 1);
            let words = split(line);
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            self.step(&words);
        }
        self.check_all_expected();
    }

    fn step(&mut self, words: &[&str]) {
        let (args, flags) = args(&words[1..]);
        match words[0] {
            "node" => self.node(&args, &flags),
            "plugin" => self.plugin(&args, &flags),
            "plugins" => self.plugins(&args, &flags),
            "unplug" => {
                for node in &args[2..] {
                    let mut plugins = self.member(node).plugins.clone();
                    plugins.remove(args[0]);
                    self.apply(Command::Advertise {
                        node: node.to_string(),
                        plugins,
                    });
                }
            }
            "grant" => self.grant(&args, &flags),
            "handover" => {
                let (resource, slot) = self.slot_name(args[0]);
                let token = self.token(&resource, slot);
                self.apply(Command::BeginHandover {
                    resource,
                    slot,
                    token,
                    reason: reason(args[1]),
                    to: flags.get("to").map(|s| s.to_string()),
                    at_ms: self.now_ms,
                });
            }
            "release" if args == ["all"] => self.release_all(),
            "release" => {
                let (resource, slot) = self.slot_name(args[0]);
                self.release(resource, slot);
            }
            "giveup" => {
                let (resource, slot) = self.slot_name(args[0]);
                let token = self.token(&resource, slot);
                let until_ms = self.number(flags["until"]);
                self.apply(Command::GiveUp {
                    resource,
                    slot,
                    token,
                    until_ms,
                    at_ms: self.now_ms,
                });
            }
            "drain" | "undrain" => self.apply(Command::SetDraining {
                node: args[0].into(),
                draining: words[0] == "drain",
            }),
            "kill" => {
                let session = self.session(args[0]);
                self.apply(Command::EndSession {
                    node: args[0].into(),
                    session,
                    expired_in: Some(1),
                    at_ms: self.now_ms,
                });
            }
            "start" => self.apply(Command::OpenSession {
                node: args[0].into(),
                at_ms: self.now_ms,
            }),
            "time" => self.now_ms = self.number(args[0]),
            "advance" => self.now_ms += self.number(args[0]),
            "options" => {
                if let Some(v) = flags.get("min_term") {
                    self.options.min_term_ms = self.number(v);
                }
                if let Some(v) = flags.get("max_moves") {
                    self.options.max_moves = self.number(v) as usize;
                }
                let capacity = &mut self.options.capacity;
                for (flag, dimension) in [
                    ("instances", &mut capacity.instances),
                    ("core_instances", &mut capacity.core_instances),
                    ("memories", &mut capacity.memories),
                    ("tables", &mut capacity.tables),
                ] {
                    if let Some(v) = flags.get(flag) {
                        *dimension = v
                            .parse()
                            .unwrap_or_else(|_| panic!("{flag}={v:?} is not a number"));
                    }
                }
            }
            "plan" => {
                self.check_all_expected();
                self.replan();
            }
            "apply" => {
                self.check_all_expected();
                self.apply_plan();
            }
            "round" => {
                self.check_all_expected();
                self.round();
            }
            "converge" => self.converge(&flags),
            "..." => self.unchecked.clear(),
            "expect" => self.expect(&args, &flags),
            other => self.fail(&format!("unknown command {other:?}")),
        }
    }

    fn node(&mut self, args: &[&str], flags: &BTreeMap<&str, &str>) {
        let node = args[0].to_string();
        let labels = flags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.apply(Command::Join {
            node: node.clone(),
            addr: format!("{node}:7400"),
            labels,
        });
        if !args.contains(&"down") {
            self.apply(Command::OpenSession {
                node: node.clone(),
                at_ms: self.now_ms,
            });
        }
        if args.contains(&"draining") {
            self.apply(Command::SetDraining {
                node,
                draining: true,
            });
        }
    }

    /// `plugin R on N... [version=] [digest=] [tickets=] [require=k=v,k=v] [core=]
    /// [memories=] [tables=]`.
    fn plugin(&mut self, args: &[&str], flags: &BTreeMap<&str, &str>) {
        let advert = self.advert(args[0], flags);
        for node in &args[2..] {
            let mut plugins = self.member(node).plugins.clone();
            plugins.insert(args[0].to_owned(), advert.clone());
            self.apply(Command::Advertise {
                node: node.to_string(),
                plugins,
            });
        }
    }

    /// `plugins PREFIX COUNT on N... [flags of plugin]`: COUNT plugins named PREFIX0000
    /// and up, in one advert per node.
    fn plugins(&mut self, args: &[&str], flags: &BTreeMap<&str, &str>) {
        let count = self.number(args[1]);
        for node in &args[3..] {
            let mut plugins = self.member(node).plugins.clone();
            for i in 0..count {
                let name = format!("{}{i:04}", args[0]);
                plugins.insert(name.clone(), self.advert(&name, flags));
            }
            self.apply(Command::Advertise {
                node: node.to_string(),
                plugins,
            });
        }
    }

    fn advert(&self, plugin: &str, flags: &BTreeMap<&str, &str>) -> Advert {
        let version: semver::Version = flags
            .get("version")
            .unwrap_or(&"1.0.0")
            .parse()
            .unwrap_or_else(|e| self.fail(&format!("bad version: {e}")));
        let digest = match flags.get("digest") {
            Some(d) => d.to_string(),
            None => format!("sha256:{version}"),
        };
        let require = flags
            .get("require")
            .into_iter()
            .flat_map(|r| r.split(','))
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let count =
            |flag: &str, default: u32| flags.get(flag).map_or(default, |n| self.number(n) as u32);
        Advert {
            plugin: plugin.to_owned(),
            version,
            digest,
            tickets: count("tickets", 1),
            require,
            footprint: Pool {
                instances: 1,
                core_instances: count("core", 3),
                memories: count("memories", 1),
                tables: count("tables", 1),
            },
        }
    }

    fn grant(&mut self, args: &[&str], flags: &BTreeMap<&str, &str>) {
        let (resource, slot) = self.slot_name(args[0]);
        let node = args[1];
        let advert = self.member(node).plugins.get(&resource).cloned();
        let (version, digest) = advert
            .map_or((semver::Version::new(1, 0, 0), String::new()), |a| {
                (a.version, a.digest)
            });
        let at_ms = flags.get("since").map_or(self.now_ms, |s| self.number(s));
        let session = self.session(node);
        self.apply(Command::Assign {
            resource,
            slot,
            node: node.into(),
            session,
            version,
            digest,
            at_ms,
        });
    }

    fn replan(&mut self) {
        self.plan = plan(&self.cluster, self.now_ms, &self.options);
        self.unchecked = lines(&self.plan);
    }

    fn apply_plan(&mut self) {
        for command in self.plan.commands.clone() {
            self.apply(command);
        }
    }

    fn round(&mut self) {
        self.replan();
        self.unchecked.clear();
        self.apply_plan();
        self.release_all();
    }

    /// Rounds until a plan has no commands; `within` bounds them, `step` advances the
    /// clock after each.
    fn converge(&mut self, flags: &BTreeMap<&str, &str>) {
        self.check_all_expected();
        let within = flags.get("within").map_or(50, |w| self.number(w));
        let step = flags.get("step").map_or(1_000, |s| self.number(s));
        for _ in 0..within {
            self.round();
            if self.plan.is_empty() {
                return;
            }
            self.now_ms += step;
        }
        self.fail(&format!("no fixed point within {within} rounds"));
    }

    fn release_all(&mut self) {
        let releasing: Vec<(String, u32)> = self
            .cluster
            .slots()
            .filter(|(_, _, s)| s.releasing.is_some())
            .map(|(r, n, _)| (r.to_owned(), n))
            .collect();
        for (resource, slot) in releasing {
            self.release(resource, slot);
        }
    }

    fn release(&mut self, resource: String, slot: u32) {
        let token = self.token(&resource, slot);
        self.apply(Command::Release {
            resource,
            slot,
            token,
            at_ms: self.now_ms,
        });
    }

    fn expect(&mut self, args: &[&str], flags: &BTreeMap<&str, &str>) {
        match args.first().copied() {
            Some("assign" | "handover") => {
                let mut want = args.join(" ");
                if let Some(to) = flags.get("to") {
                    want.push_str(&format!(" to={to}"));
                }
                self.consume(|line| line == want, &want);
            }
            Some("pending") => {
                let prefix = format!("pending {}: ", args[1]);
                let texts = &args[2..];
                self.consume(
                    |line| line.starts_with(&prefix) && texts.iter().all(|t| line.contains(t)),
                    &format!("{prefix}…{}…", texts.join("…")),
                );
            }
            Some("count") => {
                for (kind, want) in flags {
                    let want = self.number(want) as usize;
                    let prefix = format!("{kind} ");
                    let got = lines(&self.plan)
                        .iter()
                        .filter(|l| l.starts_with(&prefix))
                        .count();
                    if got != want {
                        self.fail(&format!("{got} {kind} in the plan, expected {want}"));
                    }
                    self.unchecked.retain(|l| !l.starts_with(&prefix));
                }
            }
            Some("nothing") => {
                if !lines(&self.plan).is_empty() {
                    self.fail("expected an empty plan");
                }
            }
            Some("owners") => {
                let (resource, owners) = (args[1], &args[2..]);
                let got: Vec<String> = (0..owners.len() as u32)
                    .map(|n| {
                        self.cluster
                            .slot(resource, n)
                            .map_or("-".to_owned(), |s| s.owner.clone())
                    })
                    .collect();
                let extra = self
                    .cluster
                    .resources
                    .get(resource)
                    .is_some_and(|s| s.keys().any(|&n| n as usize >= owners.len()));
                if got != owners || extra {
                    self.fail(&format!("owners of {resource}: {got:?}"));
                }
            }
            Some("load") => {
                for (node, want) in flags {
                    let got = self.cluster.slots_of(node).count() as u64;
                    if got != self.number(want) {
                        self.fail(&format!("{node} holds {got} slots, expected {want}"));
                    }
                }
            }
            Some("balanced") => {
                let loads: Vec<usize> = self
                    .cluster
                    .members
                    .iter()
                    .filter(|(_, m)| m.session.is_some() && !m.draining)
                    .map(|(name, _)| self.cluster.slots_of(name).count())
                    .collect();
                let (min, max) = (loads.iter().min(), loads.iter().max());
                if max.zip(min).is_some_and(|(max, min)| max - min > 1) {
                    self.fail(&format!("unbalanced loads {loads:?}"));
                }
            }
            _ => self.fail("unknown expectation"),
        }
    }

    /// Removes the first unchecked plan line that `matches`.
    fn consume(&mut self, matches: impl Fn(&str) -> bool, want: &str) {
        match self.unchecked.iter().position(|l| matches(l)) {
            Some(at) => {
                self.unchecked.remove(at);
            }
            None => self.fail(&format!("the plan has no unchecked {want:?}")),
        }
    }

    fn check_all_expected(&mut self) {
        if !self.unchecked.is_empty() {
            let rest = self.unchecked.join("\n  ");
            self.fail(&format!("the plan has unexpected lines:\n  {rest}"));
        }
    }

    fn apply(&mut self, command: Command) {
        self.index += 1;
        let response = self.cluster.apply(self.index, 1, command.clone());
        if !matches!(
            response,
            Response::Done | Response::Granted { .. } | Response::Session(_)
        ) {
            self.fail(&format!("{command:?} was not accepted: {response:?}"));
        }
    }

    fn member(&self, node: &str) -> &crate::cluster::Member {
        self.cluster
            .members
            .get(node)
            .unwrap_or_else(|| self.fail(&format!("no node {node}")))
    }

    fn session(&self, node: &str) -> u64 {
        self.member(node)
            .session
            .as_ref()
            .map(|s| s.id)
            .unwrap_or_else(|| self.fail(&format!("{node} has no session")))
    }

    fn token(&self, resource: &str, slot: u32) -> u64 {
        self.cluster
            .slot(resource, slot)
            .map(|s| s.token)
            .unwrap_or_else(|| self.fail(&format!("{resource}/{slot} is vacant")))
    }

    fn slot_name(&self, name: &str) -> (String, u32) {
        name.split_once('/')
            .and_then(|(r, n)| Some((r.to_owned(), n.parse().ok()?)))
            .unwrap_or_else(|| self.fail(&format!("{name:?} is not RESOURCE/SLOT")))
    }

    fn number(&self, text: &str) -> u64 {
        text.parse()
            .unwrap_or_else(|_| self.fail(&format!("{text:?} is not a number")))
    }

    fn fail(&self, message: &str) -> ! {
        let plan = lines(&self.plan).join("\n  ");
        panic!(
            "{}\n{message}\nlast plan:\n  {plan}\nslots:\n  {}",
            self.line,
            slots(&self.cluster).join("\n  ")
        )
    }
}

/// The plan as lines: `assign r/0 a`, `handover r/0 drained to=b`, `pending r/1: why`.
pub fn lines(plan: &Plan) -> Vec<String> {
    let mut lines: Vec<String> = plan
        .commands
        .iter()
        .map(|command| match command {
            Command::Assign {
                resource,
                slot,
                node,
                ..
            } => format!("assign {resource}/{slot} {node}"),
            Command::BeginHandover {
                resource,
                slot,
                reason,
                to,
                ..
            } => {
                let to = to.as_ref().map_or(String::new(), |to| format!(" to={to}"));
                format!("handover {resource}/{slot} {}{to}", reason.as_str())
            }
            other => format!("{other:?}"),
        })
        .collect();
    lines.extend(
        plan.pending
            .iter()
            .map(|p| format!("pending {}/{}: {}", p.resource, p.slot, p.reason)),
    );
    lines
}

/// The granted slots as lines, for failure messages.
fn slots(cluster: &Cluster) -> Vec<String> {
    cluster
        .slots()
        .map(|(r, n, s)| {
            let releasing = s.releasing.as_ref().map_or(String::new(), |h| {
                format!(" releasing ({})", h.reason.as_str())
            });
            format!(
                "{r}/{n} {} {} since={}{releasing}",
                s.owner, s.version, s.since_ms
            )
        })
        .collect()
}

fn reason(name: &str) -> Handover {
    [
        Handover::Moved,
        Handover::Drained,
        Handover::Rebalanced,
        Handover::PluginUpdated,
        Handover::PluginRemoved,
        Handover::Released,
        Handover::Shutdown,
    ]
    .into_iter()
    .find(|h| h.as_str() == name)
    .unwrap_or_else(|| panic!("unknown handover reason {name:?}"))
}

/// Splits words on spaces; a `"quoted text"` is one word, quotes kept (see [`args`]).
fn split(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').unwrap_or(quoted.len());
            words.push(format!("\"{}", &quoted[..end]));
            rest = quoted.get(end + 1..).unwrap_or("").trim_start();
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            words.push(rest[..end].to_owned());
            rest = rest[end..].trim_start();
        }
    }
    words
}

/// Positional words (a quoted one without its opening quote), and `key=value` flags
/// (the first '=' splits them, so `require=zone=a` is the flag `require` = `zone=a`).
fn args<'w>(words: &[&'w str]) -> (Vec<&'w str>, BTreeMap<&'w str, &'w str>) {
    let mut positional = Vec::new();
    let mut flags = BTreeMap::new();
    for word in words {
        if let Some(quoted) = word.strip_prefix('"') {
            positional.push(quoted);
        } else if let Some((k, v)) = word.split_once('=') {
            flags.insert(k, v);
        } else {
            positional.push(*word);
        }
    }
    (positional, flags)
}

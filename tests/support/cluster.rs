//! A cluster of real `tenure run` processes on one machine, and the checks that read
//! their merged event logs.
//!
//! [`Cluster::builder`] makes a CA, a certificate for every node and one operator
//! certificate with the real `tenure certs` commands, picks free UDP ports on loopback
//! (or takes fixed addresses, for nodes in network namespaces), and writes each node's
//! config: `peers` lists the others, `[lease] ttl` and labels as asked. Nothing runs
//! until [`Cluster::start`]; plugins can be installed first.
//!
//! The harness reads the cluster only through what the nodes write (the event log) and
//! what the admin CLI answers:
//! - [`Cluster::merged`] is every node's events (earlier runs included) in one list,
//!   each tagged with `_node` (the node's name) and ordered by timestamp. All nodes run
//!   on this machine, so their timestamps come from one clock.
//! - [`Cluster::owners`] is who runs a resource now: per live node, its last
//!   `plugin.started` not followed by a `plugin.stopped` of the same token.
//! - [`Cluster::wait`] polls a condition on the cluster with a bound, and fails at once,
//!   with every node's last output, when a node that should run has exited.
//! - [`assert_safe`] checks a merged log against the promises of docs/design.md §5: no more
//!   than `tickets` nodes run a resource at once, a slot runs on one node at a time, a
//!   node runs one slot of a resource, and fencing tokens grow per slot.
//!
//! A run that the harness saw end (killed, stopped, crashed) is closed in the log by a
//! synthetic [`EXITED`] event stamped when the harness knew the process was gone: a
//! killed node writes no `plugin.stopped`, but its plugins cannot run past its death.
//!
//! Every process is killed when the [`Cluster`] is dropped (each [`Node`] kills its own).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use tempfile::TempDir;

use super::{
    EXITED, Node, WAIT, clean_env, is, str_field, system_time_us, timestamp_us, token, u64_field,
    wait_output,
};

/// The operator certificate's name.
pub const OPERATOR: &str = "ops";

/// How often [`Cluster::wait`] looks again.
const POLL: Duration = Duration::from_millis(25);

/// What to build: see [`Cluster::builder`].
pub struct ClusterBuilder {
    nodes: usize,
    ttl: Duration,
    labels: BTreeMap<usize, BTreeMap<String, String>>,
    hosts: Option<Vec<String>>,
    wrappers: Option<Vec<Vec<OsString>>>,
    extra: String,
    /// A CA to issue the certificates with instead of a new one.
    ca: Option<PathBuf>,
}

impl ClusterBuilder {
    /// Issues this cluster's certificates with the CA in `dir` (another cluster's
    /// [`Cluster::ca_dir`]) instead of a CA of its own: two clusters that trust one CA.
    pub fn ca_of(mut self, dir: PathBuf) -> Self {
        self.ca = Some(dir);
        self
    }

    /// Appends `toml` to every node's config file (nodes added later too): tables such
    /// as `[voters]` that the harness does not write itself.
    pub fn config(mut self, toml: &str) -> Self {
        self.extra.push_str(toml);
        self
    }

    /// The session lease TTL (default 2 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Gives node `i` (0-based) the label `key = value`.
    pub fn label(mut self, i: usize, key: &str, value: &str) -> Self {
        self.labels
            .entry(i)
            .or_default()
            .insert(key.to_string(), value.to_string());
        self
    }

    /// Node `i` listens on `hosts[i]:7401` instead of a free loopback port.
    pub fn hosts(mut self, hosts: Vec<String>) -> Self {
        assert_eq!(hosts.len(), self.nodes, "one host per node");
        self.hosts = Some(hosts);
        self
    }

    /// Node `i` runs under `wrappers[i]` (see [`Node::set_wrapper`]); so does the admin
    /// CLI when it talks to node `i`.
    pub fn wrappers(mut self, wrappers: Vec<Vec<OsString>>) -> Self {
        assert_eq!(wrappers.len(), self.nodes, "one wrapper per node");
        self.wrappers = Some(wrappers);
        self
    }

    /// Makes the certificates, the dirs and the configs. Nothing runs yet.
    pub fn build(self) -> Cluster {
        let pki = tempfile::Builder::new()
            .prefix("tenure-pki-")
            .tempdir()
            .expect("creating the PKI temp dir");
        let ca = pki.path().join("ca");
        let certs = pki.path().join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        let cwd = pki.path().to_path_buf();
        match &self.ca {
            Some(theirs) => {
                std::fs::create_dir_all(&ca).unwrap();
                for file in std::fs::read_dir(theirs).unwrap() {
                    let file = file.unwrap().path();
                    std::fs::copy(&file, ca.join(file.file_name().unwrap())).unwrap();
                }
            }
            None => certs_cmd(&cwd, &["certs", "init", "--out", path_str(&ca)]),
        }
        certs_cmd(
            &cwd,
            &[
                "certs",
                "issue",
                "--ca",
                path_str(&ca),
                "--operator",
                OPERATOR,
                "--out",
                path_str(&certs),
            ],
        );
        let addrs = match &self.hosts {
            Some(hosts) => hosts.iter().map(|h| format!("{h}:7401")).collect(),
            None => free_ports(self.nodes)
                .into_iter()
                .map(|p| format!("127.0.0.1:{p}"))
                .collect::<Vec<_>>(),
        };
        let mut cluster = Cluster {
            members: Vec::new(),
            pki,
            ttl: self.ttl,
            extra: self.extra,
        };
        for (i, addr) in addrs.iter().enumerate() {
            let peers: Vec<String> = (0..self.nodes)
                .filter(|&j| j != i)
                .map(|j| format!("n{}@{}", j + 1, addrs[j]))
                .collect();
            let labels = self.labels.get(&i).cloned().unwrap_or_default();
            let wrapper = self
                .wrappers
                .as_ref()
                .map(|w| w[i].clone())
                .unwrap_or_default();
            cluster.add_member(addr.clone(), &peers, &[], labels, wrapper);
        }
        cluster
    }
}

/// One node of the cluster.
pub struct Member {
    /// `n1`, `n2`, … (also its certificate's name).
    pub name: String,
    /// What its events are tagged with (`_node`): its name, or `NAME'` for a second
    /// process under the same name ([`Cluster::add_twin`]).
    pub label: String,
    /// The address it listens on and peers dial.
    pub addr: String,
    pub node: Node,
    /// Whether the harness expects it to be running (spawned, and not killed or stopped
    /// since): a member that exits on its own fails the current wait.
    expected: bool,
}

/// The nodes, their certificates, and the way to read them as one.
pub struct Cluster {
    /// Dropped first, so that every process is killed before its certificates go.
    members: Vec<Member>,
    pki: TempDir,
    ttl: Duration,
    /// Appended to every node's config ([`ClusterBuilder::config`]).
    extra: String,
}

/// A node that runs a resource's plugin now, per its event log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub node: String,
    pub slot: u64,
    pub token: u64,
    pub version: String,
    pub digest: String,
    /// The `plugin.started` event.
    pub started: Value,
}

impl Cluster {
    /// A cluster of `nodes` nodes named `n1`…; see [`ClusterBuilder`].
    pub fn builder(nodes: usize) -> ClusterBuilder {
        ClusterBuilder {
            nodes,
            ttl: Duration::from_secs(2),
            labels: BTreeMap::new(),
            hosts: None,
            wrappers: None,
            extra: String::new(),
            ca: None,
        }
    }

    /// The lease TTL the nodes run with.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn member(&self, i: usize) -> &Member {
        &self.members[i]
    }

    pub fn node(&self, i: usize) -> &Node {
        &self.members[i].node
    }

    /// Node `i`, to change how it is spawned next (e.g. [`Node::set_env`]).
    pub fn node_mut(&mut self, i: usize) -> &mut Node {
        &mut self.members[i].node
    }

    /// Node `i`'s name.
    pub fn name(&self, i: usize) -> &str {
        &self.members[i].name
    }

    /// The index of the node called `name`.
    pub fn index(&self, name: &str) -> usize {
        self.members
            .iter()
            .position(|m| m.name == name)
            .unwrap_or_else(|| panic!("no node named {name}"))
    }

    /// The folder holding `ca.pem`.
    pub fn ca_dir(&self) -> PathBuf {
        self.pki.path().join("ca")
    }

    /// The folder holding every `NAME.pem` and `NAME.key`.
    pub fn certs_dir(&self) -> PathBuf {
        self.pki.path().join("certs")
    }

    /// Rotates node `i`'s key and certificate in place with `tenure certs rotate`, as an
    /// operator would while the node runs (it reloads them from its files).
    pub fn rotate_cert(&self, i: usize) {
        let name = self.name(i);
        let certs = self.certs_dir();
        let cert = certs.join(format!("{name}.pem"));
        let key = certs.join(format!("{name}.key"));
        certs_cmd(
            self.pki.path(),
            &[
                "certs",
                "rotate",
                "--ca",
                path_str(&self.ca_dir()),
                "--node",
                name,
                "--cert",
                path_str(&cert),
                "--key",
                path_str(&key),
            ],
        );
    }

    /// Adds a node that joins through every current member (`join = [...]`), with its
    /// own certificate and a free loopback port, and returns its index. It does not run
    /// until [`Cluster::spawn`].
    pub fn add_joiner(&mut self) -> usize {
        let port = free_ports(1)[0];
        let join: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}@{}", m.name, m.addr))
            .collect();
        self.add_member(
            format!("127.0.0.1:{port}"),
            &[],
            &join,
            BTreeMap::new(),
            Vec::new(),
        )
    }

    fn add_member(
        &mut self,
        addr: String,
        peers: &[String],
        join: &[String],
        labels: BTreeMap<String, String>,
        wrapper: Vec<OsString>,
    ) -> usize {
        let i = self.members.len();
        let name = format!("n{}", i + 1);
        certs_cmd(
            self.pki.path(),
            &[
                "certs",
                "issue",
                "--ca",
                path_str(&self.ca_dir()),
                "--node",
                &name,
                "--out",
                path_str(&self.certs_dir()),
            ],
        );
        let mut node = Node::new(&name);
        let q = |s: &str| serde_json::to_string(s).unwrap();
        let list = |items: &[String]| {
            let quoted: Vec<String> = items.iter().map(|s| q(s)).collect();
            format!("[{}]", quoted.join(", "))
        };
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{} = {}", q(k), q(v)))
            .collect();
        let certs = self.certs_dir();
        let mut config = String::new();
        writeln!(config, "name = {}", q(&name)).unwrap();
        writeln!(config, "data_dir = \"data\"").unwrap();
        writeln!(config, "plugins_dir = \"plugins\"").unwrap();
        writeln!(config, "listen = {}", q(&addr)).unwrap();
        writeln!(config, "labels = {{ {} }}", labels.join(", ")).unwrap();
        if !peers.is_empty() {
            writeln!(config, "peers = {}", list(peers)).unwrap();
        }
        if !join.is_empty() {
            writeln!(config, "join = {}", list(join)).unwrap();
        }
        writeln!(config, "\n[tls]").unwrap();
        writeln!(
            config,
            "ca = {}",
            q(path_str(&self.ca_dir().join("ca.pem")))
        )
        .unwrap();
        writeln!(
            config,
            "cert = {}",
            q(path_str(&certs.join(format!("{name}.pem"))))
        )
        .unwrap();
        writeln!(
            config,
            "key = {}",
            q(path_str(&certs.join(format!("{name}.key"))))
        )
        .unwrap();
        writeln!(config, "\n[lease]").unwrap();
        writeln!(config, "ttl = \"{}ms\"", self.ttl.as_millis()).unwrap();
        writeln!(config, "{}", self.extra).unwrap();
        let file = node.dir().join("tenure.toml");
        std::fs::write(&file, &config).unwrap();
        node.set_config(file);
        node.set_wrapper(wrapper);
        self.members.push(Member {
            label: name.clone(),
            name,
            addr,
            node,
            expected: false,
        });
        i
    }

    // ---- Plugins ------------------------------------------------------------------------

    /// Installs `<stem>.toml` (the manifest) then `<stem>.wasm` on node `i`. Both land
    /// within one poll of the plugins folder, so the node reads them together.
    pub fn install_plugin(&self, i: usize, stem: &str, manifest: &str, wasm: &[u8]) {
        let node = &self.members[i].node;
        node.install(&format!("{stem}.toml"), manifest);
        node.install(&format!("{stem}.wasm"), wasm);
    }

    /// [`Cluster::install_plugin`] on every node.
    pub fn install_plugin_everywhere(&self, stem: &str, manifest: &str, wasm: &[u8]) {
        for i in 0..self.members.len() {
            self.install_plugin(i, stem, manifest, wasm);
        }
    }

    // ---- Processes ------------------------------------------------------------------------

    /// Spawns every node and waits until they agree on a leader and each is ready (its
    /// plugins folder read) and has opened a session.
    pub fn start(&mut self) -> String {
        for i in 0..self.members.len() {
            self.spawn(i);
        }
        self.wait_formed()
    }

    /// Waits until every running node applied the raise of the cluster's version to
    /// `version` or more (`cluster.version`), as in a cluster whose members all run this
    /// build: from then on each member's store is recorded, and the leader replaces a
    /// member that lost its disk (`raft/replace.rs`).
    pub fn wait_version(&self, version: u64) {
        for i in self.alive_nodes() {
            self.wait_event(i, "the cluster's version raised", 0, |e| {
                is("cluster.version").matches(e) && e["version"].as_u64() >= Some(version)
            });
        }
    }

    /// Waits until the running nodes agree on a leader and each is ready and has opened
    /// a session in its current run; returns the leader's name.
    pub fn wait_formed(&self) -> String {
        let leader = self.wait_leader();
        self.wait("every running node ready with a session", WAIT, |c| {
            c.members
                .iter()
                .filter(|m| m.node.alive())
                .all(|m| {
                    let events = m.node.events();
                    events.iter().any(|e| is("node.ready").matches(e))
                        && events.iter().any(|e| is("session.opened").matches(e))
                })
                .then_some(())
        });
        leader
    }

    /// Spawns node `i` (again, if it ran before: earlier runs' events are kept).
    pub fn spawn(&mut self, i: usize) {
        let member = &mut self.members[i];
        if member.node.alive() {
            panic!("{} is already running", member.name);
        }
        member.expected = true;
        if member.node.spawned() {
            member.node.restart();
        } else {
            member.node.spawn();
        }
    }

    /// Kills node `i` with SIGKILL and reaps it. Returns the time just before the
    /// signal: the node did nothing after it.
    pub fn kill(&mut self, i: usize) -> SystemTime {
        let member = &mut self.members[i];
        member.expected = false;
        let before = SystemTime::now();
        eprintln!("[cluster] kill -9 {}", member.name);
        member.node.kill();
        before
    }

    /// Sends SIGTERM to node `i` and waits for it to exit; returns its status.
    pub fn stop(&mut self, i: usize) -> ExitStatus {
        let member = &mut self.members[i];
        member.expected = false;
        eprintln!("[cluster] SIGTERM {}", member.name);
        member.node.signal(libc::SIGTERM);
        member.node.wait_exit(WAIT)
    }

    /// Sends SIGTERM to every running node at once, then waits for each to exit; asserts
    /// that each exits successfully.
    pub fn stop_all(&mut self) {
        let running: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].node.alive())
            .collect();
        for &i in &running {
            self.members[i].expected = false;
            self.members[i].node.signal(libc::SIGTERM);
        }
        for &i in &running {
            let status = self.members[i].node.wait_exit(WAIT);
            assert!(
                status.success(),
                "{} exited with {status}\n{}",
                self.members[i].name,
                self.members[i].node.tail()
            );
        }
    }

    /// Kills node `i` if it runs, then spawns it again on the same dirs.
    pub fn restart(&mut self, i: usize) {
        if self.members[i].node.alive() {
            self.kill(i);
        }
        self.spawn(i);
    }

    /// Waits for node `i`, which is expected to refuse to start, to exit by itself;
    /// returns its exit status and what it wrote to stderr.
    pub fn wait_refused(&mut self, i: usize) -> (ExitStatus, String) {
        let member = &mut self.members[i];
        member.expected = false;
        let status = member.node.wait_exit(WAIT);
        (status, member.node.stderr())
    }

    /// Empties node `i`'s data dir, as a lost disk or a new volume would leave it. The
    /// node must not run.
    pub fn wipe(&mut self, i: usize) {
        let member = &self.members[i];
        assert!(!member.node.alive(), "{} runs: stop it first", member.name);
        let data = member.node.data_dir();
        eprintln!("[cluster] wiping {}", data.display());
        std::fs::remove_dir_all(&data).unwrap();
        std::fs::create_dir(&data).unwrap();
    }

    /// Rewrites node `i`'s config to `join` the other members instead of naming them as
    /// initial `peers`: how an operator brings back a node that lost its data dir.
    pub fn switch_to_join(&mut self, i: usize) {
        let file = self.members[i].node.dir().join("tenure.toml");
        let config = std::fs::read_to_string(&file).unwrap();
        let config = config.replace("\npeers = ", "\njoin = ");
        assert!(
            config.contains("\njoin = "),
            "no peers to switch in {config}"
        );
        std::fs::write(&file, config).unwrap();
    }

    /// Rewrites node `i`'s `join` list to `members` (`NAME@HOST:PORT` each).
    pub fn set_join(&mut self, i: usize, members: &[String]) {
        let file = self.members[i].node.dir().join("tenure.toml");
        let config = std::fs::read_to_string(&file).unwrap();
        let list: Vec<String> = members
            .iter()
            .map(|m| serde_json::to_string(m).unwrap())
            .collect();
        let (before, rest) = config.split_once("\njoin = ").expect("a join list");
        let (_, after) = rest.split_once('\n').unwrap();
        let config = format!("{before}\njoin = [{}]\n{after}", list.join(", "));
        std::fs::write(&file, config).unwrap();
    }

    /// Makes node `i` listen on (and advertise) `addr` from its next start, as a node
    /// moved to another machine or given another address would. The node must not run.
    pub fn set_listen(&mut self, i: usize, addr: &str) {
        let member = &mut self.members[i];
        assert!(!member.node.alive(), "{} runs: stop it first", member.name);
        let file = member.node.dir().join("tenure.toml");
        let config = std::fs::read_to_string(&file).unwrap();
        let old = format!("listen = {}", serde_json::to_string(&member.addr).unwrap());
        assert!(config.contains(&old), "no {old} in {config}");
        let new = format!("listen = {}", serde_json::to_string(addr).unwrap());
        std::fs::write(&file, config.replace(&old, &new)).unwrap();
        member.addr = addr.to_string();
    }

    /// A second process for node `i`'s name: a new member of the harness (returned)
    /// whose data dir and plugins are copies of node `i`'s, taken now, with the same
    /// name, certificate and config, listening on a port of its own. Its events are tagged
    /// `NAME'` so that a merged log keeps the two processes apart. How a machine that took
    /// over a node's disk, or a copy of its data dir started by mistake, looks to the
    /// cluster. Node `i` should be paused or stopped while its files are copied.
    pub fn add_twin(&mut self, i: usize) -> usize {
        let port = free_ports(1)[0];
        let addr = format!("127.0.0.1:{port}");
        let original = &self.members[i];
        let mut node = Node::new(&format!("{}-twin", original.name));
        copy_dir(&original.node.data_dir(), &node.data_dir());
        copy_dir(&original.node.plugins_dir(), &node.plugins_dir());
        let config = std::fs::read_to_string(original.node.dir().join("tenure.toml")).unwrap();
        let old = format!(
            "listen = {}",
            serde_json::to_string(&original.addr).unwrap()
        );
        assert!(config.contains(&old), "no {old} in {config}");
        let config = config.replace(
            &old,
            &format!("listen = {}", serde_json::to_string(&addr).unwrap()),
        );
        let file = node.dir().join("tenure.toml");
        std::fs::write(&file, config).unwrap();
        node.set_config(file);
        let name = original.name.clone();
        self.members.push(Member {
            label: format!("{name}'"),
            name,
            addr,
            node,
            expected: false,
        });
        self.members.len() - 1
    }

    /// Freezes node `i` (SIGSTOP). It keeps its sockets but does nothing.
    pub fn pause(&self, i: usize) {
        self.members[i].node.signal(libc::SIGSTOP);
    }

    /// Lets a paused node go on (SIGCONT).
    pub fn resume(&self, i: usize) {
        self.members[i].node.signal(libc::SIGCONT);
    }

    /// Whether node `i`'s process is there (a paused one is).
    pub fn alive(&self, i: usize) -> bool {
        self.members[i].node.alive()
    }

    /// The indices of the nodes whose process is there.
    pub fn alive_nodes(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].node.alive())
            .collect()
    }

    // ---- Admin CLI ------------------------------------------------------------------------

    /// Removes member `name` with `tenure member remove` as the operator, asking again
    /// until it succeeds: it is refused while the member's session lives (a TTL after
    /// the node stopped) or while no leader is known.
    pub fn remove_member(&self, name: &str) {
        self.wait(&format!("{name} removed as a member"), WAIT, |c| {
            c.admin(&["member", "remove", name])
                .status
                .success()
                .then_some(())
        });
    }

    /// Runs `tenure ARGS` as the operator against the first running node.
    pub fn admin(&self, args: &[&str]) -> Output {
        let at = *self.alive_nodes().first().expect("a running node");
        self.admin_as(at, OPERATOR, args)
    }

    /// Runs `tenure ARGS --addr … --node …` against node `at`, authenticated with the
    /// certificate called `identity` (`ops`, or a node's name to use a node certificate).
    pub fn admin_as(&self, at: usize, identity: &str, args: &[&str]) -> Output {
        let member = &self.members[at];
        let certs = self.certs_dir();
        let mut command = member.node.command();
        command
            .args(args)
            .args(["--addr", &member.addr, "--node", &member.name])
            .arg("--ca")
            .arg(self.ca_dir().join("ca.pem"))
            .arg("--cert")
            .arg(certs.join(format!("{identity}.pem")))
            .arg("--key")
            .arg(certs.join(format!("{identity}.key")))
            .current_dir(self.pki.path());
        clean_env(&mut command);
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning tenure");
        let what = format!(
            "tenure {} (as {identity}, via {})",
            args.join(" "),
            member.name
        );
        let output = wait_output(child, WAIT, &what);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let shown: String = stdout.trim().chars().take(200).collect();
        eprintln!(
            "[cluster] {what}: {}\n  stdout: {shown}{}\n  stderr: {}",
            output.status,
            if stdout.trim().len() > shown.len() {
                "…"
            } else {
                ""
            },
            String::from_utf8_lossy(&output.stderr).trim()
        );
        output
    }

    /// `tenure status --json` as the operator, which must succeed, parsed.
    pub fn status(&self) -> Value {
        self.status_via(*self.alive_nodes().first().expect("a running node"))
    }

    /// The cluster's id as node `at` reports it (`tenure status --json`), once it has one.
    pub fn cluster_id(&self, at: usize) -> Option<String> {
        self.status_via(at)["cluster"].as_str().map(str::to_string)
    }

    /// `tenure status --json` as the operator, asked of node `at`, parsed.
    pub fn status_via(&self, at: usize) -> Value {
        let output = self.admin_as(at, OPERATOR, &["status", "--json"]);
        assert!(
            output.status.success(),
            "tenure status --json failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "tenure status --json printed no JSON ({e}):\n{}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
    }

    // ---- Reading the cluster ----------------------------------------------------------------

    /// Node `i`'s events, every run, each tagged with `_node`.
    pub fn events_of(&self, i: usize) -> Vec<Value> {
        let name = &self.members[i].label;
        let mut events = self.members[i].node.all_events();
        for event in &mut events {
            if let Some(object) = event.as_object_mut() {
                object.insert("_node".into(), Value::from(name.as_str()));
            }
        }
        events
    }

    /// Every node's events (every run), tagged with `_node` and ordered by timestamp; a
    /// node's own order is kept among equal timestamps.
    pub fn merged(&self) -> Vec<Value> {
        let mut all: Vec<Value> = (0..self.members.len())
            .flat_map(|i| self.events_of(i))
            .collect();
        all.sort_by_key(ts_or_zero);
        all
    }

    /// Who runs `resource` now: per running node, its last `plugin.started` of the
    /// resource in the current run that no `plugin.stopped` of the same token followed.
    /// Sorted by slot.
    pub fn owners(&self, resource: &str) -> Vec<Owner> {
        let mut owners = Vec::new();
        for member in &self.members {
            if !member.node.alive() {
                continue;
            }
            let events = member.node.events();
            let Some(at) = events
                .iter()
                .rposition(|e| is("plugin.started").matches(e) && e["resource"] == resource)
            else {
                continue;
            };
            let start = &events[at];
            let stopped = events[at + 1..].iter().any(|e| {
                is("plugin.stopped").matches(e)
                    && e["resource"] == resource
                    && e["token"] == start["token"]
            });
            if !stopped {
                owners.push(Owner {
                    node: member.name.clone(),
                    slot: u64_field(start, "slot"),
                    token: token(start),
                    version: start["version"].as_str().unwrap_or("").to_string(),
                    digest: start["digest"].as_str().unwrap_or("").to_string(),
                    started: start.clone(),
                });
            }
        }
        owners.sort_by_key(|o| (o.slot, o.node.clone()));
        owners
    }

    /// The names of [`Cluster::owners`].
    pub fn owner_names(&self, resource: &str) -> BTreeSet<String> {
        self.owners(resource).into_iter().map(|o| o.node).collect()
    }

    /// Waits until `resource` runs on exactly `n` nodes, on `n` distinct slots, and
    /// `accept` holds for them; returns them.
    pub fn wait_owners(
        &self,
        resource: &str,
        n: usize,
        accept: impl Fn(&[Owner]) -> bool,
    ) -> Vec<Owner> {
        self.wait(&format!("{resource} running on {n} node(s)"), WAIT, |c| {
            let owners = c.owners(resource);
            let slots: BTreeSet<u64> = owners.iter().map(|o| o.slot).collect();
            (owners.len() == n && slots.len() == n && accept(&owners)).then_some(owners)
        })
    }

    /// The newest `cluster.leader` any node wrote (greatest term, then latest): the
    /// leader's name and term. It may be dead.
    pub fn leader(&self) -> Option<(String, u64)> {
        self.merged()
            .iter()
            .filter(|e| is("cluster.leader").matches(e))
            .filter_map(|e| Some((e["node"].as_str()?.to_string(), e["term"].as_u64()?)))
            .max_by_key(|(_, term)| *term)
    }

    /// The leader every running node last named (same node and term, in their current
    /// runs), when they agree and it runs.
    pub fn settled_leader(&self) -> Option<(String, u64)> {
        let mut agreed: Option<(String, u64)> = None;
        for member in self.members.iter().filter(|m| m.node.alive()) {
            let events = member.node.events();
            let last = events
                .iter()
                .rev()
                .find(|e| is("cluster.leader").matches(e))?;
            let seen = (last["node"].as_str()?.to_string(), last["term"].as_u64()?);
            match &agreed {
                None => agreed = Some(seen),
                Some(a) if *a == seen => {}
                Some(_) => return None,
            }
        }
        let (name, term) = agreed?;
        let i = self.members.iter().position(|m| m.name == name)?;
        self.members[i].node.alive().then_some((name, term))
    }

    /// Waits for [`Cluster::settled_leader`] and returns its name.
    pub fn wait_leader(&self) -> String {
        self.wait("the running nodes to agree on a leader", WAIT, |c| {
            c.settled_leader()
        })
        .0
    }

    /// Polls `probe` until it returns `Some`, for at most `timeout`. Fails at once when a
    /// node the harness expects to run has exited, and on timeout; both with every
    /// node's last output.
    pub fn wait<T>(
        &self,
        description: &str,
        timeout: Duration,
        mut probe: impl FnMut(&Cluster) -> Option<T>,
    ) -> T {
        let started = Instant::now();
        let deadline = started + timeout;
        loop {
            if let Some(value) = probe(self) {
                eprintln!("[cluster] {description}: after {:?}", started.elapsed());
                return value;
            }
            for member in &self.members {
                if member.expected && !member.node.alive() {
                    panic!(
                        "{} exited while waiting for: {description}\n{}",
                        member.name,
                        self.tails()
                    );
                }
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for: {description}\n{}",
                    self.tails()
                );
            }
            thread::sleep(POLL);
        }
    }

    /// Waits for the first event on node `i`, in its current run at index `from` or
    /// later, that matches.
    pub fn wait_event(
        &self,
        i: usize,
        description: &str,
        from: usize,
        predicate: impl Fn(&Value) -> bool,
    ) -> Value {
        self.members[i]
            .node
            .wait_for_from(description, from, predicate, WAIT)
            .1
    }

    /// Every node's last output lines.
    pub fn tails(&self) -> String {
        let mut text = String::new();
        for member in &self.members {
            writeln!(text, "--- {} ({}):", member.name, member.addr).unwrap();
            text.push_str(&member.node.tail());
        }
        text
    }
}

impl Drop for Cluster {
    /// On a failure, before the nodes are killed: asks a running node for the status and
    /// writes every node's whole output, merged by time, to a file, since the failure
    /// message shows only the last lines.
    fn drop(&mut self) {
        if !thread::panicking() {
            return;
        }
        let mut text = String::new();
        if let Some(&at) = self.alive_nodes().first() {
            let output = self.admin_as(at, OPERATOR, &["status", "--timeout", "3s"]);
            writeln!(
                text,
                "=== tenure status via {}:\n{}{}",
                self.members[at].name,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
            .unwrap();
        }
        writeln!(text, "=== every event, merged by time:").unwrap();
        for event in self.merged() {
            writeln!(text, "{event}").unwrap();
        }
        for member in &self.members {
            if !member.node.spawned() {
                continue;
            }
            writeln!(
                text,
                "=== stderr of {}:\n{}",
                member.name,
                member.node.stderr()
            )
            .unwrap();
        }
        let file = std::env::temp_dir().join(format!(
            "tenure-cluster-failure-{}-{}.log",
            std::process::id(),
            self.pki
                .path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        match std::fs::write(&file, text) {
            Ok(()) => eprintln!("[cluster] the whole log is in {}", file.display()),
            Err(e) => eprintln!("[cluster] cannot write {}: {e}", file.display()),
        }
    }
}

// ---- The safety checker -------------------------------------------------------------------

/// One run of a plugin on one node: from its `plugin.started` to its `plugin.stopped`,
/// or to the node's death; `end_us` is `None` while it still runs.
#[derive(Clone, Debug)]
pub struct Interval {
    pub node: String,
    pub slot: u64,
    pub token: u64,
    pub start_us: i64,
    pub end_us: Option<i64>,
}

impl Interval {
    fn overlaps(&self, other: &Interval) -> bool {
        let ends_after = |end: Option<i64>, start: i64| end.is_none_or(|e| e > start);
        ends_after(self.end_us, other.start_us) && ends_after(other.end_us, self.start_us)
    }
}

/// The plugin runs of `resource` in a merged log (see [`Cluster::merged`]), in start
/// order. Each node's events are read in its own order.
pub fn intervals(events: &[Value], resource: &str) -> Vec<Interval> {
    let mut done: Vec<Interval> = Vec::new();
    // Per node: its runs not yet ended.
    let mut open: BTreeMap<String, Vec<Interval>> = BTreeMap::new();
    for event in events {
        let node = event["_node"].as_str().unwrap_or_else(|| {
            panic!("intervals() reads a merged log; this event has no _node: {event}")
        });
        let kind = event["event"].as_str().unwrap_or("");
        if kind == EXITED {
            for mut run in open.remove(node).unwrap_or_default() {
                run.end_us = Some(timestamp_us(event));
                done.push(run);
            }
            continue;
        }
        if event["resource"] != resource {
            continue;
        }
        match kind {
            "plugin.started" => open.entry(node.to_string()).or_default().push(Interval {
                node: node.to_string(),
                slot: u64_field(event, "slot"),
                token: token(event),
                start_us: timestamp_us(event),
                end_us: None,
            }),
            "plugin.stopped" => {
                let runs = open.entry(node.to_string()).or_default();
                let t = token(event);
                let slot = u64_field(event, "slot");
                match runs.iter().position(|r| r.token == t && r.slot == slot) {
                    Some(at) => {
                        let mut run = runs.remove(at);
                        run.end_us = Some(timestamp_us(event));
                        done.push(run);
                    }
                    None => panic!("{resource}: plugin.stopped without a plugin.started: {event}"),
                }
            }
            _ => {}
        }
    }
    done.extend(open.into_values().flatten());
    done.sort_by_key(|r| r.start_us);
    done
}

/// Checks the safety promises for `resource` with `tickets` slots on a merged log:
/// - at no instant do more than `tickets` plugin runs overlap, nor two runs of one slot,
///   nor two runs on one node;
/// - per slot, in the order of `plugin.started`, each new grant has a greater fencing
///   token than every earlier one (a restart of the current grant repeats its token on
///   the same node).
///
/// Returns the runs, for further checks.
pub fn assert_safe(events: &[Value], resource: &str, tickets: usize) -> Vec<Interval> {
    let runs = intervals(events, resource);
    let describe = |r: &Interval| {
        format!(
            "{} slot {} token {} [{} .. {}]",
            r.node,
            r.slot,
            r.token,
            r.start_us,
            r.end_us.map_or("running".to_string(), |e| e.to_string())
        )
    };
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            if !a.overlaps(b) {
                continue;
            }
            assert!(
                a.slot != b.slot,
                "{resource}: two runs of one slot overlap:\n  {}\n  {}",
                describe(a),
                describe(b)
            );
            assert!(
                a.node != b.node,
                "{resource}: one node runs two slots at once:\n  {}\n  {}",
                describe(a),
                describe(b)
            );
        }
    }
    // The most runs at once: sweep the boundaries, ends before starts at equal instants
    // (a run that ended at t does not overlap one that starts at t).
    let mut points: Vec<(i64, i32)> = Vec::new();
    for run in &runs {
        points.push((run.start_us, 1));
        if let Some(end) = run.end_us {
            points.push((end, -1));
        }
    }
    points.sort();
    let mut now = 0;
    for (at, delta) in points {
        now += delta;
        assert!(
            now <= tickets as i32,
            "{resource}: {now} runs at once at {at} with {tickets} tickets; runs:\n{}",
            runs.iter()
                .map(|r| format!("  {}\n", describe(r)))
                .collect::<String>()
        );
    }

    let mut grants: BTreeMap<u64, Vec<(u64, String)>> = BTreeMap::new();
    for start in events
        .iter()
        .filter(|e| is("plugin.started").matches(e) && e["resource"] == resource)
    {
        let slot = u64_field(start, "slot");
        let t = token(start);
        let node = str_field(start, "_node").to_string();
        let seen = grants.entry(slot).or_default();
        if let Some((last, last_node)) = seen.last()
            && *last == t
        {
            assert_eq!(
                *last_node, node,
                "{resource}/{slot}: token {t} granted to two nodes"
            );
            continue;
        }
        assert!(
            seen.iter().all(|(earlier, _)| *earlier < t),
            "{resource}/{slot}: token {t} on {node} after tokens {:?}",
            seen
        );
        seen.push((t, node));
    }
    eprintln!(
        "[check] {resource}: {} runs, grants per slot {:?}: safe",
        runs.len(),
        grants
            .iter()
            .map(|(slot, g)| (
                *slot,
                g.iter()
                    .map(|(t, n)| format!("{n}:{t}"))
                    .collect::<Vec<_>>()
            ))
            .collect::<Vec<_>>()
    );
    runs
}

/// The event's timestamp in µs, 0 if it has none (never the case for Tenure's lines).
fn ts_or_zero(event: &Value) -> i64 {
    if event["timestamp"].is_string() {
        timestamp_us(event)
    } else {
        0
    }
}

/// `at` in µs since the epoch (see [`system_time_us`]).
pub fn us(at: SystemTime) -> i64 {
    system_time_us(at)
}

// ---- Plugins and wasm -----------------------------------------------------------------------

/// A manifest for `resource` with `tickets` and `version`, and quick limits: a cooperative
/// plugin stops within the stop grace.
pub fn manifest(resource: &str, tickets: u32, version: &str) -> String {
    format!(
        "resource = \"{resource}\"\ntickets = {tickets}\nversion = \"{version}\"\n\n\
         [limits]\nstop_grace = \"200ms\"\ncleanup_timeout = \"1s\"\n"
    )
}

/// `wasm` with a custom section appended: the same component (custom sections do not
/// change behaviour) with a different digest.
pub fn with_custom_section(wasm: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
    let mut content = leb128(name.len() as u64);
    content.extend_from_slice(name.as_bytes());
    content.extend_from_slice(payload);
    let mut out = wasm.to_vec();
    out.push(0);
    out.extend(leb128(content.len() as u64));
    out.extend(content);
    out
}

fn leb128(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

// ---- Helpers ------------------------------------------------------------------------------

/// Runs a `tenure certs` command, which must succeed.
fn certs_cmd(cwd: &Path, args: &[&str]) {
    let output = super::tenure(args, cwd);
    assert!(
        output.status.success(),
        "tenure {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temp path")
}

/// `n` distinct free UDP ports on loopback: bound together (so they differ), then
/// released for the nodes to take.
fn free_ports(n: usize) -> Vec<u16> {
    let sockets: Vec<UdpSocket> = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0").expect("binding a UDP port"))
        .collect();
    sockets
        .iter()
        .map(|s| s.local_addr().unwrap().port())
        .collect()
}

/// Runs `command` with a bound; for callers that build their own (e.g. under a wrapper).
pub fn run_bounded(mut command: Command, what: &str) -> Output {
    clean_env(&mut command);
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {what}: {e}"));
    wait_output(child, WAIT, what)
}

/// Three nodes with lease TTL `ttl` running `counter` (one slot) and `pair` (two slots,
/// heartbeat), started, once the counter has counted to 3 and both pair slots are owned:
/// the cluster the disaster tests (`recover`, `snapshot`) lose and bring back.
pub fn counting_cluster(ttl: std::time::Duration) -> Cluster {
    let mut c = Cluster::builder(3).ttl(ttl).build();
    c.install_plugin_everywhere(
        "counter",
        &manifest("counter", 1, "1.0.0"),
        &super::plugins().counter_bytes(),
    );
    c.install_plugin_everywhere(
        "pair",
        &manifest("pair", 2, "1.0.0"),
        &super::plugins().heartbeat_bytes(),
    );
    c.start();
    c.wait("the counter counts to 3", super::WAIT, |c| {
        (super::counts(&c.merged()).len() >= 3).then_some(())
    });
    c.wait_owners("pair", 2, |_| true);
    c
}

/// Copies the files under `from` into `to` (made if missing), recursively.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

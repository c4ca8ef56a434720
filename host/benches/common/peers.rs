//! The `peers` section of the cluster bench: section 1's failover experiment run against
//! etcd and ZooKeeper on this machine, in the same run, so Tenure's figures have the
//! field's beside them under the same load (issue 14). `scripts/bench-peers-setup`
//! installs them.
//!
//! Each experiment has 3 contenders for one lock or election. A trial kills the current
//! holder with SIGKILL (its whole process group: etcdctl runs the holder's command as a
//! child) and times the wall clock taken just before the signal → the next holder's
//! `acquired <µs since the epoch>` line, which the contender writes with the machine's
//! wall clock, the clock of Tenure's event timestamps. The killed contender is started
//! again, and the next trial waits until three are queued at the server, then a random
//! part of a TTL (so the kill falls at a random point of the holder's renewals).
//!
//! - **etcd, one server**: `etcdctl lock --ttl N bench -- sh -c 'echo acquired …; exec
//!   sleep …'`. etcd lease TTLs are whole seconds, and a server raises a TTL below its
//!   minimum (1.5 × election timeout, rounded up to a second: 2 s at the default 1 s) to
//!   that minimum, so there is no 500 ms run; the table says so.
//! - **etcd colocated**: 3 members, one per "machine", with a contender beside each that
//!   talks to its own member only, as when etcd shares the application's machines (as
//!   Tenure's nodes do). A trial kills the holder's machine: the contender and its member,
//!   which is restarted on its data dir with the contender. Split by whether that member
//!   led etcd's Raft: a new etcd leader gives every lease a full TTL from its election.
//! - **ZooKeeper, one server**: standalone, `tickTime` 250 ms so a session may last 500 ms
//!   to 5 s (2 and 20 ticks); contenders are `kazoo_contender.py` (kazoo's Election
//!   recipe) with the session timeout N; the server's `cons` answer confirms every session
//!   got N.
//!
//! The servers otherwise run with their defaults (etcd: heartbeat 100 ms, election 1 s),
//! on free loopback ports, with their data in the bench dir.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail, ensure};
use serde_json::Value;

use crate::common::Summary;
use crate::{POLL, Table, WAIT, bench_dir, load_average, path_str, system_us};

/// The script that installs everything this section runs.
const SETUP: &str = "scripts/bench-peers-setup";
/// The contenders of every experiment, as in Tenure's failover section (3 nodes).
const CONTENDERS: usize = 3;
/// The etcd lock and the ZooKeeper election path.
const LOCK: &str = "bench";
const ELECTION: &str = "/bench/election";
/// ZooKeeper's tick: sessions may be 2 to 20 ticks long.
const ZK_TICK: Duration = Duration::from_millis(250);
/// How often a server is asked something while waiting. Each etcd question is an
/// `etcdctl` process: started every `POLL`, they would load the machine the contenders'
/// keep-alives and the servers run on. Figures come from the contenders' timestamps, so
/// this only bounds how soon the next step starts.
const ASK_EVERY: Duration = Duration::from_millis(250);
/// The kazoo contender, written into the bench dir.
const KAZOO_CONTENDER: &str = include_str!("kazoo_contender.py");

/// Runs every experiment at Tenure's two TTLs (where the peer allows it) and adds the
/// figures to the bench's table.
pub fn peers_section(tools: &Tools, trials: usize, table: &mut Table) -> anyhow::Result<()> {
    println!(
        "\n== peers: etcd and ZooKeeper, kill -9 of the holder → next holder's acquisition (3 contenders) =="
    );
    for ttl in [Duration::from_secs(2), Duration::from_millis(500)] {
        let ttl_ms = ttl.as_millis();
        // etcd leases take whole seconds only.
        if ttl.subsec_nanos() == 0 {
            let mut etcd = EtcdOne::start(tools, ttl)?;
            trials_of(
                &mut etcd,
                &format!("etcd, one server, TTL {ttl_ms} ms"),
                ttl,
                trials,
                table,
            )?;
            let mut etcd = EtcdColocated::start(tools, ttl)?;
            let label = format!("etcd colocated, 3 members, TTL {ttl_ms} ms");
            trials_of(&mut etcd, &label, ttl, trials, table)?;
        } else {
            let why = "not possible: etcd lease TTLs are whole seconds (and at least 2 s with etcd's default 1 s election timeout)";
            for what in ["etcd, one server", "etcd colocated, 3 members"] {
                println!("{what}, TTL {ttl_ms} ms: {why}");
                table.note(&format!("{what}, TTL {ttl_ms} ms"), why);
            }
        }
        let mut zookeeper = Zookeeper::start(tools, ttl)?;
        let label = format!("ZooKeeper, one server, TTL {ttl_ms} ms");
        trials_of(&mut zookeeper, &label, ttl, trials, table)?;
    }
    Ok(())
}

/// One lock service under test: how to start contender `i`, and what it can tell.
trait Peer {
    /// Starts contender `i`, and whatever of its machine died with it.
    fn start(&mut self, i: usize) -> anyhow::Result<Proc>;
    /// How many contenders the server has queued (holder included); fails if a server
    /// has exited.
    fn queued(&mut self) -> anyhow::Result<usize>;
    /// Whether contender `i`'s machine hosts the service's Raft leader, where that means
    /// anything.
    fn leads(&mut self, _i: usize) -> anyhow::Result<Option<bool>> {
        Ok(None)
    }
    /// Kills what dies with contender `i`'s machine besides the contender.
    fn kill_machine(&mut self, _i: usize) {}
}

/// Runs `trials` failovers of `peer` and adds its figures to `table`.
fn trials_of(
    peer: &mut dyn Peer,
    label: &str,
    ttl: Duration,
    trials: usize,
    table: &mut Table,
) -> anyhow::Result<()> {
    println!("\n-- {label} --");
    let mut contenders = Contenders::start(peer)?;
    let (mut all, mut led, mut followed) = (Vec::new(), Vec::new(), Vec::new());
    for trial in 0..trials {
        contenders
            .wait_queued(peer, ttl)
            .with_context(|| format!("{label}, trial {}", trial + 1))?;
        thread::sleep(random_phase(ttl)?);
        let holder = wait_until("a holder", WAIT, POLL, || {
            contenders.revive(peer)?;
            Ok(contenders.holder())
        })?;
        let leads = peer.leads(holder)?;
        let killed_us = system_us(contenders.procs[holder].kill());
        peer.kill_machine(holder);
        let (next, at) = wait_until("the next holder", ttl * 5 + WAIT, POLL, || {
            contenders.revive(peer)?;
            Ok((0..CONTENDERS).find_map(|i| {
                let at = contenders.procs[i].last_acquired()?;
                (i != holder && at > killed_us).then_some((i, at))
            }))
        })?;
        let latency = (at - killed_us) as f64 / 1000.0;
        let role = match leads {
            Some(true) => " (its machine led)",
            Some(false) => " (its machine followed)",
            None => "",
        };
        println!(
            "  trial {:2}: killed c{}{role}, c{} acquired after {latency:.1} ms",
            trial + 1,
            holder + 1,
            next + 1
        );
        all.push(latency);
        match leads {
            Some(true) => led.push(latency),
            Some(false) => followed.push(latency),
            None => {}
        }
        contenders.replace(holder, peer)?;
    }
    let load = load_average();
    let summary = Summary::of(all);
    println!("{label}: {}", summary.describe("ms", 1));
    table.row(label, &summary, "ms", 1, "", &load);
    for (what, sample) in [
        ("the holder's member led", led),
        ("the holder's member followed", followed),
    ] {
        if !sample.is_empty() {
            let summary = Summary::of(sample);
            let label = format!("{label}, {what}");
            println!("{label}: {}", summary.describe("ms", 1));
            table.row(&label, &summary, "ms", 1, "", &load);
        }
    }
    // One acquisition per trial plus the first; any more followed a lost session.
    let spurious = contenders.acquisitions().saturating_sub(trials + 1);
    if spurious > 0 || contenders.lost > 0 {
        let text = format!(
            "{spurious} acquisitions no kill caused; {} contenders restarted after losing their session",
            contenders.lost
        );
        println!("{label}: {text}");
        table.note(&format!("{label}, sessions lost"), &text);
    }
    Ok(())
}

/// The contenders of one experiment, with what is counted across their restarts.
struct Contenders {
    procs: Vec<Proc>,
    /// Acquisitions by contenders no longer running.
    earlier: usize,
    /// Contenders that lost their session without being killed, and were restarted.
    lost: usize,
}

impl Contenders {
    fn start(peer: &mut dyn Peer) -> anyhow::Result<Contenders> {
        Ok(Contenders {
            procs: (0..CONTENDERS)
                .map(|i| peer.start(i))
                .collect::<anyhow::Result<_>>()?,
            earlier: 0,
            lost: 0,
        })
    }

    /// Kills contender `i` (if it still runs) and starts it again.
    fn replace(&mut self, i: usize, peer: &mut dyn Peer) -> anyhow::Result<()> {
        self.procs[i].kill();
        self.earlier += self.procs[i].acquisitions().len();
        self.procs[i] = peer.start(i)?;
        Ok(())
    }

    /// Starts again any contender that exited by itself (an error in etcdctl or kazoo):
    /// counted with the lost sessions, and the experiment goes on.
    fn revive(&mut self, peer: &mut dyn Peer) -> anyhow::Result<()> {
        for i in 0..CONTENDERS {
            if let Err(e) = self.procs[i].check_running() {
                println!("  c{} exited by itself, starting it again: {e:#}", i + 1);
                self.lost += 1;
                self.replace(i, peer)?;
            }
        }
        Ok(())
    }

    /// The contender that acquired last.
    fn holder(&self) -> Option<usize> {
        (0..CONTENDERS)
            .filter_map(|i| self.procs[i].last_acquired().map(|at| (at, i)))
            .max()
            .map(|(_, i)| i)
    }

    fn acquisitions(&self) -> usize {
        self.earlier
            + self
                .procs
                .iter()
                .map(|c| c.acquisitions().len())
                .sum::<usize>()
    }

    /// Waits until all are queued at the server. A waiter whose session lapsed (seen with
    /// etcd's 3 members on a loaded machine, after the leader's machine was killed)
    /// waits on without a place in the queue (`etcdctl lock` does not watch its session
    /// while it waits, nor while the command it runs as holder does), so after a while
    /// every contender but the holder is restarted, once.
    fn wait_queued(&mut self, peer: &mut dyn Peer, ttl: Duration) -> anyhow::Result<()> {
        let bound = ttl * 3 + Duration::from_secs(10);
        for attempt in 0..2 {
            let deadline = Instant::now() + bound;
            let mut queued;
            loop {
                self.revive(peer)?;
                queued = peer.queued()?;
                if queued == CONTENDERS {
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    break;
                }
                thread::sleep(ASK_EVERY);
            }
            ensure!(
                attempt == 0,
                "{queued} of {CONTENDERS} contenders queued after restarting the waiters and {bound:?} more"
            );
            println!(
                "  {queued} of {CONTENDERS} contenders queued after {bound:?}: restarting the waiters"
            );
            let holder = self.holder();
            for i in (0..CONTENDERS).filter(|&i| Some(i) != holder) {
                self.lost += 1;
                self.replace(i, peer)?;
            }
        }
        unreachable!("the second attempt returns")
    }
}

/// A random pause in [0, `ttl`) before a kill, so that it falls at a random point of the
/// holder's renewal cycle. Without it the trials keep a rhythm of their own (each begins
/// as soon as the last successor is in and the killed contender queued again) and can
/// hit one phase again and again: etcd's single server took either 1929–1953 ms or
/// 2435–2479 ms in 37 of 40 trials over two runs, and mostly 1687–1724 ms (median 1720)
/// in a run where only how often the bench polls had changed.
pub fn random_phase(ttl: Duration) -> anyhow::Result<Duration> {
    let mut bytes = [0u8; 4];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| anyhow::anyhow!("no random bytes from the system"))?;
    Ok(ttl.mul_f64(f64::from(u32::from_le_bytes(bytes)) / 2f64.powi(32)))
}

/// Polls `probe` every `every` until it returns a value, for up to `bound`.
fn wait_until<T>(
    what: &str,
    bound: Duration,
    every: Duration,
    mut probe: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(value) = probe()? {
            return Ok(value);
        }
        ensure!(
            Instant::now() < deadline,
            "timed out after {bound:?} waiting for {what}"
        );
        thread::sleep(every);
    }
}

// ---------------------------------------------------------------------------------------
// The tools and the processes
// ---------------------------------------------------------------------------------------

/// What `scripts/bench-peers-setup` installs.
pub struct Tools {
    etcd: PathBuf,
    etcdctl: PathBuf,
    java: PathBuf,
    zookeeper_jar: PathBuf,
    python: PathBuf,
}

impl Tools {
    /// Fails, naming the set-up script, if anything is missing.
    pub fn find() -> anyhow::Result<Tools> {
        let tools_dir =
            std::env::var_os("TENURE_TOOLS_DIR").unwrap_or_else(|| "/var/tmp/tenure-tools".into());
        let venv = Path::new(&tools_dir).join("bench-peers-venv");
        let found = |name: &str| on_path(name).with_context(|| format!("{name} is not on PATH"));
        let tools = || -> anyhow::Result<Tools> {
            let zookeeper_jar = PathBuf::from("/usr/share/java/zookeeper.jar");
            ensure!(
                zookeeper_jar.is_file(),
                "{} is missing",
                zookeeper_jar.display()
            );
            ensure!(
                venv.join(".installed").is_file(),
                "no kazoo venv at {}",
                venv.display()
            );
            Ok(Tools {
                etcd: found("etcd")?,
                etcdctl: found("etcdctl")?,
                java: found("java")?,
                zookeeper_jar,
                python: venv.join("bin/python"),
            })
        };
        tools().with_context(|| {
            format!("the peers section needs etcd, ZooKeeper and kazoo: run `sudo {SETUP}` once (it installs them on Debian)")
        })
    }
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// A process in a group of its own, so a kill takes its children too. Its stdout lines
/// are kept when `keep` (a contender's), else appended to its log file with stderr.
struct Proc {
    name: String,
    log: PathBuf,
    child: Option<Child>,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<thread::JoinHandle<()>>,
}

impl Proc {
    fn spawn(name: &str, mut command: Command, log: PathBuf, keep: bool) -> anyhow::Result<Proc> {
        let file = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .with_context(|| format!("opening {}", log.display()))
        };
        // A group of its own (one signal takes its children too), and SIGKILL when the
        // bench dies without dropping it (killed itself, or a panic that aborts).
        // SAFETY: the closure only makes one async-signal-safe system call.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        command
            .process_group(0)
            .stdin(Stdio::null())
            .stderr(file()?)
            .stdout(if keep { Stdio::piped() } else { file()?.into() });
        let mut child = command
            .spawn()
            .with_context(|| format!("spawning {name}: {command:?}"))?;
        let lines = Arc::<Mutex<Vec<String>>>::default();
        let reader = child.stdout.take().map(|stdout| {
            let lines = lines.clone();
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    lines.lock().unwrap().push(line);
                }
            })
        });
        Ok(Proc {
            name: name.to_string(),
            log,
            child: Some(child),
            lines,
            reader,
        })
    }

    /// SIGKILL to the whole group, then reap; returns the wall clock taken just before
    /// the signal.
    fn kill(&mut self) -> SystemTime {
        let before = SystemTime::now();
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) with the group this process leads (process_group(0)).
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        before
    }

    fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Fails, with the end of its log, if the process has exited by itself.
    fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(child) = self.child.as_mut()
            && let Some(status) = child.try_wait()?
        {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!(
                "{} exited ({status}); the end of {}:\n{}",
                self.name,
                self.log.display(),
                tail.join("\n")
            );
        }
        Ok(())
    }

    /// The wall-clock times (µs since the epoch) of its `acquired` lines.
    fn acquisitions(&self) -> Vec<i64> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .filter_map(|line| line.strip_prefix("acquired ")?.trim().parse().ok())
            .collect()
    }

    fn last_acquired(&self) -> Option<i64> {
        self.acquisitions().last().copied()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `n` distinct free TCP ports on loopback (held together, released before use).
fn free_tcp_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

// ---------------------------------------------------------------------------------------
// etcd
// ---------------------------------------------------------------------------------------

/// etcd members of one cluster (one, or one per machine), each on its own client and
/// peer port with its data dir in the bench dir.
struct Etcd {
    /// Before `dir`: fields drop in order, and the members must die before their data.
    members: Vec<Option<Proc>>,
    dir: tempfile::TempDir,
    etcd: PathBuf,
    etcdctl: PathBuf,
    ttl_s: u64,
    /// `host:port` of each member's client listener.
    clients: Vec<String>,
    peers: Vec<String>,
}

impl Etcd {
    fn start(tools: &Tools, ttl: Duration, members: usize) -> anyhow::Result<Etcd> {
        let ports = free_tcp_ports(2 * members)?;
        let mut etcd = Etcd {
            dir: bench_dir("tenure-bench-etcd-")?,
            etcd: tools.etcd.clone(),
            etcdctl: tools.etcdctl.clone(),
            ttl_s: ttl.as_secs(),
            clients: ports[..members]
                .iter()
                .map(|p| format!("127.0.0.1:{p}"))
                .collect(),
            peers: ports[members..]
                .iter()
                .map(|p| format!("127.0.0.1:{p}"))
                .collect(),
            members: (0..members).map(|_| None).collect(),
        };
        for m in 0..members {
            etcd.spawn_member(m)?;
        }
        for m in 0..members {
            etcd.wait_healthy(m)?;
        }
        Ok(etcd)
    }

    /// Starts member `m` (again, on its data dir: the cluster flags then do nothing).
    fn spawn_member(&mut self, m: usize) -> anyhow::Result<()> {
        let cluster: Vec<String> = (0..self.peers.len())
            .map(|k| format!("m{}=http://{}", k + 1, self.peers[k]))
            .collect();
        let (client, peer) = (
            format!("http://{}", self.clients[m]),
            format!("http://{}", self.peers[m]),
        );
        let data = self.dir.path().join(format!("m{}", m + 1));
        let mut command = Command::new(&self.etcd);
        command
            .arg(format!("--name=m{}", m + 1))
            .arg(format!("--data-dir={}", path_str(&data)?))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster={}", cluster.join(",")))
            .arg("--initial-cluster-token=tenure-bench")
            .arg("--initial-cluster-state=new");
        let log = self.dir.path().join(format!("m{}.log", m + 1));
        self.members[m] = Some(Proc::spawn(
            &format!("etcd m{}", m + 1),
            command,
            log,
            false,
        )?);
        Ok(())
    }

    fn etcdctl(&self, endpoint: &str, args: &[&str]) -> Command {
        let mut command = Command::new(&self.etcdctl);
        command
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoint}"))
            .args(args);
        command
    }

    /// Runs etcdctl against member `m`; its stdout, or None if it failed.
    fn ask(&mut self, m: usize, args: &[&str]) -> anyhow::Result<Option<String>> {
        for member in self.members.iter_mut().flatten() {
            member.check_running()?;
        }
        let output = self
            .etcdctl(&self.clients[m], args)
            .stdin(Stdio::null())
            .output()
            .context("running etcdctl")?;
        Ok(output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).into_owned()))
    }

    fn wait_healthy(&mut self, m: usize) -> anyhow::Result<()> {
        wait_until(&format!("etcd m{} healthy", m + 1), WAIT, ASK_EVERY, || {
            Ok(self.ask(m, &["endpoint", "health"])?.map(|_| ()))
        })
    }

    /// A contender talking to member `m` only.
    fn contender(&self, i: usize, m: usize) -> anyhow::Result<Proc> {
        let ttl = self.ttl_s.to_string();
        // The hold outlives any trial; bounded so that, should the bench die without
        // killing it, it does not stay for long (only etcdctl gets the parent-death signal).
        let hold = "echo acquired $(date +%s%6N); exec sleep 3600";
        let command = self.etcdctl(
            &self.clients[m],
            &["lock", "--ttl", &ttl, LOCK, "--", "sh", "-c", hold],
        );
        let log = self.dir.path().join(format!("c{}.log", i + 1));
        Proc::spawn(&format!("contender c{}", i + 1), command, log, true)
    }

    /// The lock's keys: one per queued contender.
    fn queued(&mut self, m: usize) -> anyhow::Result<usize> {
        let prefix = format!("{LOCK}/");
        let keys = self.ask(m, &["get", "--prefix", "--keys-only", &prefix])?;
        Ok(keys.map_or(0, |k| k.lines().filter(|l| !l.trim().is_empty()).count()))
    }
}

/// One etcd server, 3 contenders.
struct EtcdOne(Etcd);

impl EtcdOne {
    fn start(tools: &Tools, ttl: Duration) -> anyhow::Result<EtcdOne> {
        Ok(EtcdOne(Etcd::start(tools, ttl, 1)?))
    }
}

impl Peer for EtcdOne {
    fn start(&mut self, i: usize) -> anyhow::Result<Proc> {
        self.0.contender(i, 0)
    }

    fn queued(&mut self) -> anyhow::Result<usize> {
        self.0.queued(0)
    }
}

/// 3 etcd members, contender `i` beside member `i`.
struct EtcdColocated(Etcd);

impl EtcdColocated {
    fn start(tools: &Tools, ttl: Duration) -> anyhow::Result<EtcdColocated> {
        Ok(EtcdColocated(Etcd::start(tools, ttl, CONTENDERS)?))
    }
}

impl Peer for EtcdColocated {
    fn start(&mut self, i: usize) -> anyhow::Result<Proc> {
        if !self.0.members[i].as_ref().is_some_and(Proc::running) {
            self.0.spawn_member(i)?;
            self.0.wait_healthy(i)?;
        }
        self.0.contender(i, i)
    }

    fn queued(&mut self) -> anyhow::Result<usize> {
        self.0.queued(0)
    }

    fn leads(&mut self, i: usize) -> anyhow::Result<Option<bool>> {
        let status = self
            .0
            .ask(i, &["endpoint", "status", "-w", "json"])?
            .with_context(|| format!("etcd m{} did not answer `endpoint status`", i + 1))?;
        let status: Value =
            serde_json::from_str(&status).context("etcdctl endpoint status -w json")?;
        let status = &status[0]["Status"];
        let (me, leader) = (&status["header"]["member_id"], &status["leader"]);
        ensure!(
            me.is_u64() && leader.is_u64(),
            "no member_id or leader in etcd's status: {status}"
        );
        Ok(Some(me == leader))
    }

    fn kill_machine(&mut self, i: usize) {
        if let Some(member) = self.0.members[i].as_mut() {
            member.kill();
        }
    }
}

// ---------------------------------------------------------------------------------------
// ZooKeeper
// ---------------------------------------------------------------------------------------

/// One standalone ZooKeeper server, 3 kazoo contenders.
struct Zookeeper {
    /// Before `dir`: fields drop in order.
    server: Proc,
    dir: tempfile::TempDir,
    python: PathBuf,
    ttl: Duration,
    client: String,
    /// Every contender started since the last check of the sessions' timeouts.
    unchecked: bool,
}

impl Zookeeper {
    fn start(tools: &Tools, ttl: Duration) -> anyhow::Result<Zookeeper> {
        let dir = bench_dir("tenure-bench-zookeeper-")?;
        let port = free_tcp_ports(1)?[0];
        let config = dir.path().join("zoo.cfg");
        std::fs::write(
            &config,
            format!(
                "tickTime={}\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
                 admin.enableServer=false\n4lw.commands.whitelist=cons,dump,ruok\n",
                ZK_TICK.as_millis(),
                path_str(&dir.path().join("data"))?,
            ),
        )?;
        std::fs::write(dir.path().join("kazoo_contender.py"), KAZOO_CONTENDER)?;
        let mut command = Command::new(&tools.java);
        command
            .arg("-cp")
            .arg(&tools.zookeeper_jar)
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(&config);
        let server = Proc::spawn(
            "zookeeper",
            command,
            dir.path().join("zookeeper.log"),
            false,
        )?;
        let mut zookeeper = Zookeeper {
            dir,
            python: tools.python.clone(),
            ttl,
            client: format!("127.0.0.1:{port}"),
            unchecked: true,
            server,
        };
        wait_until("ZooKeeper to answer ruok", WAIT, ASK_EVERY, || {
            zookeeper.server.check_running()?;
            Ok(zookeeper
                .four_letters("ruok")
                .ok()
                .filter(|a| a == "imok")
                .map(|_| ()))
        })?;
        Ok(zookeeper)
    }

    /// A four-letter command's answer.
    fn four_letters(&self, command: &str) -> anyhow::Result<String> {
        let mut stream = TcpStream::connect(&self.client)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(command.as_bytes())?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer)
    }

    /// The session timeouts (`to=` in ms) the server gave its client connections.
    fn session_timeouts(&self) -> anyhow::Result<Vec<u64>> {
        let cons = self.four_letters("cons")?;
        Ok(cons
            .lines()
            .filter_map(|line| {
                let start = line.find(",to=")? + 4;
                let digits: String = line[start..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().ok()
            })
            .collect())
    }
}

impl Peer for Zookeeper {
    fn start(&mut self, i: usize) -> anyhow::Result<Proc> {
        let mut command = Command::new(&self.python);
        command
            .arg(self.dir.path().join("kazoo_contender.py"))
            .arg(&self.client)
            .arg(ELECTION)
            .arg(format!("{}", self.ttl.as_secs_f64()));
        let log = self.dir.path().join(format!("c{}.log", i + 1));
        self.unchecked = true;
        Proc::spawn(&format!("contender c{}", i + 1), command, log, true)
    }

    /// The election's ephemeral nodes, from the server's `dump`; once all are there after
    /// a start, also checks that every session has the timeout asked for.
    fn queued(&mut self) -> anyhow::Result<usize> {
        self.server.check_running()?;
        let dump = self.four_letters("dump")?;
        let prefix = format!("{ELECTION}/");
        let queued = dump
            .lines()
            .filter(|l| l.trim().starts_with(&prefix))
            .count();
        if queued == CONTENDERS && self.unchecked {
            let want = self.ttl.as_millis() as u64;
            let timeouts = self.session_timeouts()?;
            ensure!(
                timeouts.len() >= CONTENDERS && timeouts.iter().all(|&to| to == want),
                "ZooKeeper gave the contenders' sessions timeouts {timeouts:?} ms, not {want} ms (tickTime {} ms)",
                ZK_TICK.as_millis()
            );
            self.unchecked = false;
        }
        Ok(queued)
    }
}

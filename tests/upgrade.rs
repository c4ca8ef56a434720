//! Upgrades with the real binary: the data dirs an earlier build wrote run on this one,
//! and a store this build cannot read is refused without a change.
//!
//! The earlier build's data dirs are `tests/fixtures/format-1/cluster.tar.gz`: three nodes
//! of commit 262d90b (store format 1, no format record), written once by that build
//! (`make.sh` beside it says how, and what the cluster went through). Upgrading is what
//! an operator of 262d90b does: stop the nodes, install this build, start them again.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Node, WAIT, count_of, is, log_starting, tenure, u64_field};
use tempfile::TempDir;

/// The fixture's loopback ports (fixed: the members' addresses are in the stores).
const PORTS: [u16; 3] = [17471, 17472, 17473];

fn unpack() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let archive =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/format-1/cluster.tar.gz");
    let status = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(dir.path())
        .status()
        .expect("running tar");
    assert!(status.success(), "tar -xzf {} failed", archive.display());
    dir
}

/// `last_count` and `max_token` from the fixture's `facts.txt`.
fn facts(fixture: &Path) -> BTreeMap<String, u64> {
    fs::read_to_string(fixture.join("facts.txt"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Every file under `dir`, with its bytes and mode.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        if path.is_dir() {
            out.insert(path.clone(), (Vec::new(), mode));
            out.extend(snapshot(&path));
        } else {
            out.insert(path.clone(), (fs::read(&path).unwrap(), mode));
        }
    }
    out
}

/// Node `k` (1-based) of the fixture, on this build: its data and plugins copied into a
/// harness node, its config pointing at the fixture's certificates.
fn node_of(fixture: &Path, k: usize) -> Node {
    let name = format!("n{k}");
    let mut node = Node::new(&name);
    copy_dir(&fixture.join(&name).join("data"), &node.data_dir());
    copy_dir(&fixture.join(&name).join("plugins"), &node.plugins_dir());
    let peers: Vec<String> = (1..=3)
        .filter(|&j| j != k)
        .map(|j| format!("\"n{j}@127.0.0.1:{}\"", PORTS[j - 1]))
        .collect();
    let config = node.dir().join("config.toml");
    fs::write(
        &config,
        format!(
            "name = \"{name}\"\nlisten = \"127.0.0.1:{}\"\npeers = [{}]\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
            PORTS[k - 1],
            peers.join(", "),
            fixture.join("ca/ca.pem").display(),
            fixture.join(format!("certs/{name}.pem")).display(),
            fixture.join(format!("certs/{name}.key")).display(),
        ),
    )
    .unwrap();
    node.set_config(config);
    node
}

/// `tenure status --json` through node `k`, as the fixture's operator.
fn status(fixture: &Path, k: usize) -> Option<Value> {
    let addr = format!("127.0.0.1:{}", PORTS[k - 1]);
    let node = format!("n{k}");
    let out = tenure(
        &[
            "status",
            "--json",
            "--addr",
            &addr,
            "--node",
            &node,
            "--ca",
            "ca/ca.pem",
            "--cert",
            "certs/ops.pem",
            "--key",
            "certs/ops.key",
        ],
        fixture,
    );
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).unwrap())
}

/// Waits until `condition` holds, polling; panics after `bound`.
fn await_that(what: &str, bound: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {bound:?} waiting for: {what}"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_cluster_of_262d90b_runs_on_this_build_with_everything_kept() {
    let fixture = unpack();
    let fixture = fixture.path();
    let facts = facts(fixture);
    let before: Value =
        serde_json::from_slice(&fs::read(fixture.join("status-before.json")).unwrap()).unwrap();
    let mut nodes: Vec<Node> = (1..=3).map(|k| node_of(fixture, k)).collect();
    for node in &mut nodes {
        node.spawn();
    }
    for (k, node) in nodes.iter().enumerate() {
        let migrated = node.wait_for(
            "the store migrated from format 1",
            is("store.migrated")
                .with("from", 1)
                .with("to", tenure::raft::STORE_FORMAT)
                .f(),
            WAIT,
        );
        let backup = PathBuf::from(migrated["backup"].as_str().unwrap());
        assert_eq!(
            fs::read(&backup).unwrap(),
            fs::read(fixture.join(format!("n{}/data/raft.redb", k + 1))).unwrap(),
            "the store as it was is kept at {}",
            backup.display()
        );
    }

    // The counter goes on from its saved count, under a token above every earlier one.
    let last_count = facts["last_count"];
    let max_token = facts["max_token"];
    let counting = |n: &Node| {
        n.events()
            .into_iter()
            .filter(|e| log_starting("counter", "count=")(e))
            .collect::<Vec<_>>()
    };
    await_that("the counter counts on this build", WAIT, || {
        nodes.iter().any(|n| !counting(n).is_empty())
    });
    let first = nodes.iter().flat_map(counting).next().unwrap();
    let count = count_of(&first).unwrap();
    assert!(
        count > last_count,
        "the counter went on at {count}, after {last_count} before the upgrade"
    );
    for node in &nodes {
        for started in node
            .events()
            .iter()
            .filter(|e| is("plugin.started").matches(e))
        {
            assert!(
                u64_field(started, "token") > max_token,
                "a grant after the upgrade has token {}, not above {max_token}: {started}",
                started["token"]
            );
        }
    }

    // Members, the revocation and the history are those of before.
    let mut after = None;
    await_that("a status with a leader", WAIT, || {
        after = status(fixture, 1).filter(|s| !s["leader"].is_null());
        after.is_some()
    });
    let after = after.unwrap();
    let names = |s: &Value| -> Vec<String> {
        s["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&after), names(&before));
    assert_eq!(after["revoked"], before["revoked"]);
    assert!(
        after["history_len"].as_u64().unwrap() >= before["history_len"].as_u64().unwrap(),
        "history: {} changes before, {} after",
        before["history_len"],
        after["history_len"]
    );

    // A restart finds the current format: nothing more is migrated.
    nodes[0].restart();
    nodes[0].wait_for("n1 ready again", is("node.ready").f(), WAIT);
    assert!(
        !nodes[0]
            .events()
            .iter()
            .any(|e| is("store.migrated").matches(e))
    );
}

#[test]
fn a_data_dir_of_a_newer_format_is_refused_naming_both_and_left_as_it_was() {
    // A data dir this build made, then marked as written by a later format.
    let mut node = Node::new("newer");
    node.spawn();
    node.wait_for("ready", is("node.ready").f(), WAIT);
    node.signal(libc::SIGTERM);
    assert!(node.wait_exit(WAIT).success());
    let store = node.data_dir().join("raft.redb");
    {
        let db = redb::Database::open(&store).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let table: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("format");
            let mut table = tx.open_table(table).unwrap();
            table
                .insert("version", 99u32.to_le_bytes().as_slice())
                .unwrap();
            table.insert("writer", b"tenure 9.9.9".as_slice()).unwrap();
        }
        tx.commit().unwrap();
    }
    let before = snapshot(node.dir());
    node.restart();
    let status = node.wait_exit(WAIT);
    assert!(
        !status.success(),
        "the node started on a store of format 99"
    );
    let stderr = node.stderr();
    for part in [
        "format 99",
        "tenure 9.9.9",
        &format!("formats 1 to {}", tenure::raft::STORE_FORMAT),
        "nothing was changed",
    ] {
        assert!(stderr.contains(part), "{part:?} not in: {stderr}");
    }
    assert!(snapshot(node.dir()) == before, "the data dir changed");
}

#[test]
fn version_names_the_formats_and_protocols() {
    let out = tenure(&["--version"], Path::new("."));
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for part in [
        concat!("tenure ", env!("CARGO_PKG_VERSION")),
        "store format 6 (reads formats 1 to 6; writes format 5 until the cluster's version is 7)",
        "node protocol tenure/7 (speaks tenure/6 to tenure/7)",
        "operator protocol tenure-operator/8",
    ] {
        assert!(text.contains(part), "{part:?} not in: {text}");
    }
}

/// The highest count the counter logged on any of the first three nodes.
fn highest_count(c: &support::Cluster) -> u64 {
    (0..3)
        .flat_map(|i| support::counts(&c.events_of(i)))
        .max()
        .unwrap_or(0)
}

/// The cluster's version as node `at` reports it (`tenure status --json`).
fn cluster_version(c: &support::Cluster, at: usize) -> u64 {
    c.status_via(at)["version"]
        .as_u64()
        .expect("status has a version")
}

/// The version gate (issue 25, item 3) on real processes, until a tagged release gives a
/// real older build: a cluster of this build is replaced one node at a time by processes
/// acting as the next build (`TENURE_UNSAFE_NEXT_PROTOCOL`: they speak one version more,
/// `PROBE_VERSION`, and know its probe command). The probe must not be applied anywhere
/// before the last node is replaced, and is applied on every replica after it; the
/// cluster's version follows (this build's newest, then the next). Then the downgrades: a node put back on this build refuses to start with
/// both versions named and its data dir untouched, and a fresh node of this build is
/// refused at join. The counter runs throughout and keeps its count.
#[test]
fn a_rolling_upgrade_uses_a_new_command_only_once_every_member_speaks_it() {
    const NEXT: &str = tenure::version::UNSAFE_NEXT_PROTOCOL;
    let now = u64::from(tenure::version::WIRE_VERSION);
    let next = u64::from(tenure::version::PROBE_VERSION);
    let mut c = support::Cluster::builder(3).build();
    let counter = support::plugins().counter_bytes();
    c.install_plugin_everywhere(
        "counter",
        &support::manifest("counter", 1, "1.0.0"),
        &counter,
    );
    c.start();
    await_that(
        "the cluster's version to be this build's newest",
        WAIT,
        || cluster_version(&c, 0) == now,
    );
    await_that("the counter to count to 3", WAIT, || highest_count(&c) >= 3);

    // n1 and n2 first: the next build waits, and nothing of the next version is applied.
    for i in [0, 1] {
        assert!(c.stop(i).success());
        c.node_mut(i).set_env(NEXT, "1");
        c.spawn(i);
        c.wait_event(i, "the probe waiting for the next version", 0, |e| {
            is("version.probe").with("phase", "waiting").matches(e)
        });
        // One node at a time, each back with a session before the next (docs/operating.md, "Upgrading").
        c.wait_event(i, "a session of the new run", 0, is("session.opened").f());
    }
    // The leader's decision: a next-build leader says it waits for n3; a leader on this
    // build (n3) has nothing newer to raise to.
    await_that(
        "the leader to keep this version because of n3",
        WAIT,
        || {
            let (leader, _) = c.settled_leader().unwrap_or_default();
            leader == "n3"
                || (0..2).any(|i| {
                    c.node(i).count(|e| {
                        is("cluster.version_waiting")
                            .with("member", "n3")
                            .matches(e)
                    }) > 0
                })
        },
    );
    assert_eq!(
        cluster_version(&c, 0),
        now,
        "raised while n3 speaks only this build's newest"
    );
    for e in c.merged() {
        if is("cluster.version_waiting").matches(&e) {
            eprintln!("[upgrade] {}: {}", e["_node"], support::message(&e));
        }
    }
    let n3_replaced_at = support::system_time_us(std::time::SystemTime::now());

    // The last one: every member speaks the next, so the leader raises, and each next-build
    // process has its probe applied.
    assert!(c.stop(2).success());
    c.node_mut(2).set_env(NEXT, "1");
    c.spawn(2);
    for i in 0..3 {
        c.wait_event(i, "the probe applied", 0, |e| {
            is("version.probe").with("phase", "applied").matches(e)
        });
        c.wait_event(i, "the next version applied", 0, |e| {
            is("cluster.version").with("version", next).matches(e)
        });
    }
    assert_eq!(cluster_version(&c, 0), next);
    for e in c.merged() {
        if is("cluster.version_raised").matches(&e) {
            eprintln!(
                "[upgrade] {}: {} ({} ms after n3 was stopped)",
                e["_node"],
                support::message(&e),
                (support::timestamp_us(&e) - n3_replaced_at) / 1000
            );
        }
    }
    for i in 0..3 {
        for e in c.events_of(i) {
            if is("version.probe").with("phase", "applied").matches(&e)
                || is("cluster.version").with("version", next).matches(&e)
            {
                assert!(
                    support::timestamp_us(&e) > n3_replaced_at,
                    "tenure/{next} was used before the last member spoke it: {e}"
                );
            }
        }
    }

    // A downgrade after the raise: n2 back on this build refuses to start, naming both
    // versions, and changes nothing on disk.
    assert!(c.stop(1).success());
    c.node_mut(1).remove_env(NEXT);
    let before = snapshot(c.node(1).dir());
    c.spawn(1);
    let (status, stderr) = c.wait_refused(1);
    assert!(
        !status.success(),
        "n2 started on a build that does not speak {next}"
    );
    assert!(
        stderr.contains(&format!("runs at version {next}"))
            && stderr.contains(&format!("to tenure/{now}")),
        "{stderr}"
    );
    assert!(snapshot(c.node(1).dir()) == before, "the data dir changed");
    c.node_mut(1).set_env(NEXT, "1");
    c.spawn(1);

    // A fresh node of this build is refused at join, with both versions named.
    let joiner = c.add_joiner();
    c.spawn(joiner);
    c.wait_event(joiner, "the join refused for its version", 0, |e| {
        let text = e.to_string();
        text.contains(&format!("runs at version {next}"))
            && text.contains(&format!("tenure/{now} at most"))
    });
    c.kill(joiner);

    // The counter kept its count through every replacement: it saves before it logs, so
    // the counts of every owner in turn, in time order, only ever go up.
    let before = highest_count(&c);
    await_that("the counter to count past its count so far", WAIT, || {
        highest_count(&c) > before
    });
    c.stop_all();
    let counts = support::counts(&c.merged());
    assert!(
        counts.windows(2).all(|w| w[1] > w[0]),
        "the count went backwards or repeated: {counts:?}"
    );
}

/// The rolling upgrade from the previous release (issue 25, item 4), which CI runs on
/// every change: three nodes of the release `tests/fixtures/previous-release` names
/// (built from its commit, `support::previous`) run `counter` and a resource of three
/// tickets. First a rollback: n1 runs this build, then the release again on the same data
/// dir. Then one at a time, each is stopped (SIGTERM: it hands its slots over), given this
/// tree's binary and started again, and the next waits until it has a session and every
/// slot is owned; the cluster's version then rises to this build's. The fault checker finds nothing: no more runs of a resource at once
/// than its tickets, a slot's tokens only increase, no save is lost, every stop cleaned
/// up; and the counter's count only goes up.
#[test]
fn a_rolling_upgrade_from_the_previous_release_keeps_every_owner_token_and_count() {
    use support::checker::{self, Expect, Resource, Schedule};
    let release = support::previous::named();
    let previous = support::previous::binary().to_path_buf();
    let mut c = support::Cluster::builder(3).build();
    for i in 0..3 {
        c.node_mut(i).set_binary(Some(previous.clone()));
    }
    let counter = support::plugins().counter_bytes();
    let heartbeat = support::plugins().heartbeat_bytes();
    c.install_plugin_everywhere(
        "counter",
        &support::manifest("counter", 1, "1.0.0"),
        &counter,
    );
    c.install_plugin_everywhere("trio", &support::manifest("trio", 3, "1.0.0"), &heartbeat);
    c.start();
    let version = tenure(&["--version"], Path::new("."));
    eprintln!(
        "[upgrade] from {} ({}) to this tree: {}",
        release.tag,
        release.commit,
        String::from_utf8_lossy(&version.stdout)
            .lines()
            .next()
            .unwrap_or("")
    );
    c.wait_owners("trio", 3, |_| true);
    c.wait_owners("counter", 1, |_| true);
    await_that("the counter to count to 3", WAIT, || highest_count(&c) >= 3);

    let mut schedule = Schedule::default();
    let now_us = || support::system_time_us(std::time::SystemTime::now());
    // A rollback before the cluster's version is raised: n1 on this build, then back on
    // the release, which opens the store this build wrote (format 5 until the raise).
    schedule.record(now_us(), "n1", "stop");
    assert!(c.stop(0).success(), "n1 did not stop cleanly");
    c.node_mut(0).set_binary(None);
    schedule.record(now_us(), "n1", "spawn");
    c.spawn(0);
    c.wait_event(
        0,
        "a session of this build's run",
        0,
        is("session.opened").f(),
    );
    schedule.record(now_us(), "n1", "stop");
    assert!(c.stop(0).success(), "n1 did not stop cleanly");
    c.node_mut(0).set_binary(Some(previous.clone()));
    schedule.record(now_us(), "n1", "spawn");
    c.spawn(0);
    c.wait_event(0, "a session of n1 back on the release", 0, |e| {
        is("session.opened").matches(e)
    });
    c.wait_owners("counter", 1, |_| true);
    let started = Instant::now();
    for i in 0..3 {
        let name = c.name(i).to_string();
        schedule.record(now_us(), &name, "stop");
        assert!(c.stop(i).success(), "{name} did not stop cleanly");
        c.node_mut(i).set_binary(None);
        schedule.record(now_us(), &name, "spawn");
        c.spawn(i);
        c.wait_event(
            i,
            "a session of this build's run",
            0,
            is("session.opened").f(),
        );
        c.wait_owners("trio", 3, |_| true);
        c.wait_owners("counter", 1, |_| true);
    }
    eprintln!(
        "[upgrade] three nodes replaced one at a time in {:?}",
        started.elapsed()
    );
    // Every member now speaks this build's newest version: the leader raises the
    // cluster to it, and from then on proposals are stamped (`cluster/once.rs`); the
    // counter goes on counting on the stamped path.
    let newest = u64::from(tenure::version::WIRE_VERSION);
    await_that(
        "the cluster's version to be this build's newest",
        WAIT,
        || cluster_version(&c, 0) == newest,
    );
    let before = highest_count(&c);
    await_that("the counter to count past its count so far", WAIT, || {
        highest_count(&c) > before
    });
    c.stop_all();

    let events = c.merged();
    let expect = Expect {
        resources: vec![
            Resource {
                name: "counter".into(),
                tickets: 1,
                counter: true,
                recovers: true,
            },
            Resource {
                name: "trio".into(),
                tickets: 3,
                counter: false,
                recovers: true,
            },
        ],
        recovered: None,
    };
    let violations = checker::check(&events, &schedule, &expect);
    let report: String = violations.iter().map(|v| v.render(&schedule)).collect();
    assert!(
        violations.is_empty(),
        "{} violation(s)\n{report}",
        violations.len()
    );
    let counts = support::counts(&events);
    assert!(
        counts.windows(2).all(|w| w[1] > w[0]),
        "the count went backwards or repeated: {counts:?}"
    );
}

//! Identity: a node that lost its data dir never comes back as its old self (issue 24).
//!
//! Raft's safety needs voters that never forget their votes and log. A node whose data
//! dir was emptied and that starts again under the same name and config has forgotten
//! both; were it to vote as its old self, a node that missed committed entries could be
//! elected and the cluster would lose them. These tests run the real binary.

mod support;

use std::time::Duration;

use support::*;

fn assert_increasing(counts: &[u64]) {
    for pair in counts.windows(2) {
        assert!(
            pair[1] > pair[0],
            "the count went from {} back to {}: committed saves were lost ({counts:?})",
            pair[0],
            pair[1]
        );
    }
}

/// One node (not the counter's owner) is frozen while the two others commit more saves;
/// one of those loses its disk; the other (the keeper) dies; the frozen node resumes and
/// the wiped one starts again with its old config. With the wiped node's vote, the frozen
/// node (which lacks the last saves) could lead and the counter would go back: the wiped
/// node must not answer as its old self, and waits to be replaced instead. Once the
/// keeper, which kept every entry, is back, the counter goes on; the leader removes the
/// wiped node's old member once its session has ended, and the node comes back as a new
/// member on its own (`raft/replace.rs`), with no operator.
#[test]
fn a_wiped_voter_never_votes_as_its_old_self_and_rejoins_as_a_new_member() {
    let mut cluster = Cluster::builder(3).ttl(Duration::from_secs(2)).build();
    cluster.install_plugin_everywhere(
        "counter",
        &manifest("counter", 1, "1.0.0"),
        &plugins().counter_bytes(),
    );
    cluster.start();
    cluster.wait("the counter counts", WAIT, |c| {
        (counts(&c.merged()).len() >= 2).then_some(())
    });
    // A cluster that runs: every member on this build, so its version was raised and
    // each member's store is recorded (the leader replaces a member only then).
    cluster.wait_version(7);

    // The frozen node must not own the counter: a frozen owner's run lasts, in its event
    // log, until it is thawed, and the safety check would count it beside its successor.
    let owner = cluster.index(cluster.owner_names("counter").iter().next().unwrap());
    let frozen = (0..3).find(|&i| i != owner).unwrap();
    let wiped = (0..3).find(|&i| i != frozen).unwrap();
    let keeper = (0..3).find(|&i| i != frozen && i != wiped).unwrap();
    let name = cluster.name(wiped).to_string();
    let old_id = cluster.wait("the wiped node's member id", WAIT, |c| member_id(c, &name));
    cluster.pause(frozen);
    let at_pause = *counts(&cluster.merged()).last().unwrap();
    // Saves committed by the two others only.
    cluster.wait("six more counts without the frozen node", WAIT, |c| {
        counts(&c.merged())
            .last()
            .is_some_and(|&n| n >= at_pause + 6)
            .then_some(())
    });
    cluster.kill(wiped);
    cluster.wipe(wiped);
    let before_loss = *counts(&cluster.merged()).last().unwrap();
    cluster.kill(keeper);
    cluster.resume(frozen);
    cluster.spawn(wiped);
    cluster.wait_event(wiped, "the wiped node asks to be replaced", 0, |e| {
        is("cluster.waiting").matches(e)
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("waiting for the leader to remove its old member"))
    });
    assert!(cluster.alive(wiped), "the wiped {name} exited");

    // The keeper kept every entry: with it back, a leader is elected and the counter goes on.
    cluster.spawn(keeper);
    cluster.wait("the counter counts again after the loss", WAIT, |c| {
        counts(&c.merged())
            .last()
            .is_some_and(|&n| n > before_loss)
            .then_some(())
    });
    assert_increasing(&counts(&cluster.merged()));

    // No operator: its old session ends, the leader removes the old member, and the
    // node joins as a new one.
    cluster.wait_event(wiped, "joined as a new member", 0, is("cluster.joined").f());
    cluster.wait("a member again with a session", WAIT, |c| {
        let status = c.status();
        status["nodes"]
            .as_array()?
            .iter()
            .find(|n| n["name"] == name.as_str())
            .filter(|n| !n["session"].is_null())
            .map(|_| ())
    });
    // A member id of its own (issue 24, item 1): never the old member's, which voted
    // and held a log it no longer has.
    let new_id = cluster.wait("the new member listed", WAIT, |c| member_id(c, &name));
    assert_ne!(new_id, old_id, "{name} came back under its old member's id");
    assert_increasing(&counts(&cluster.merged()));
    assert_safe(&cluster.merged(), "counter", 1);
}

/// A node whose disk was replaced while its whole cluster was down starts first, alone:
/// no peer can say whether the cluster knows it. It waits until they answer, and comes
/// back as a new member under an id of its own, never its old member's (issue 24, items
/// 1 and 2). Before, a node no peer answered within a second kept its name's id, the id
/// of the member that had voted and held a log it no longer has.
#[test]
fn a_node_wiped_while_its_cluster_was_down_still_comes_back_under_an_id_of_its_own() {
    let mut cluster = Cluster::builder(3).ttl(Duration::from_secs(2)).build();
    cluster.start();
    // Every member on this build: the version was raised, so new members get ids of
    // their own and stores are recorded.
    cluster.wait_version(7);
    let wiped = 1;
    let name = cluster.name(wiped).to_string();
    let old_id = cluster.wait("the member id of n2", WAIT, |c| member_id(c, &name));
    for i in 0..3 {
        cluster.kill(i);
    }
    cluster.wipe(wiped);
    cluster.spawn(wiped);
    cluster.wait_event(
        wiped,
        "the wiped node waits for its peers",
        0,
        is("cluster.waiting").f(),
    );
    for i in (0..3).filter(|&i| i != wiped) {
        cluster.spawn(i);
    }
    cluster.wait_event(wiped, "joined as a new member", 0, is("cluster.joined").f());
    let new_id = cluster.wait("the new member listed", WAIT, |c| member_id(c, &name));
    assert_ne!(
        new_id, old_id,
        "{name} came back under its old member's id after its peers were away"
    );
}

/// The Raft member id `tenure member list` gives node `name`, if it lists it.
fn member_id(cluster: &Cluster, name: &str) -> Option<u64> {
    let out = cluster.admin(&["member", "list", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    list["members"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name)?["id"]
        .as_u64()
}

/// A node that waits for its peers (here, a majority of initial members that is not
/// there) stops cleanly when asked: exit 0, not killed by the signal, since nothing runs
/// yet. Systemd and Kubernetes stop nodes that are still forming.
#[test]
fn a_node_waiting_for_its_peers_stops_cleanly_when_asked() {
    let mut cluster = Cluster::builder(2).build();
    cluster.spawn(0);
    cluster.wait_event(0, "n1 to wait for its peers", 0, is("cluster.waiting").f());
    let status = cluster.stop(0);
    assert!(
        status.success(),
        "a forming node asked to stop exited with {status}"
    );
}

/// Two clusters trust one CA and use the same node names (staging and production on a
/// company CA). One of B's nodes comes back on the address A's n2 had (a reused IP), so
/// A's leader, replicating to "n2", reaches it. Its appends and votes are those of a
/// member B knows by name; before cluster ids, B's node took them and the two clusters'
/// logs mixed on it. Now it refuses them, naming both ids, and neither cluster's state
/// takes anything of the other's (issue 24, item 1).
#[test]
fn a_node_of_another_cluster_on_a_reused_address_is_refused_and_nothing_mixes() {
    let mut a = Cluster::builder(3).build();
    a.install_plugin_everywhere(
        "counter",
        &manifest("counter", 1, "1.0.0"),
        &plugins().counter_bytes(),
    );
    a.start();
    let mut b = Cluster::builder(3).ca_of(a.ca_dir()).build();
    b.start();
    let id_a = a.wait("A has its id", WAIT, |c| c.cluster_id(0));
    let id_b = b.wait("B has its id", WAIT, |c| c.cluster_id(0));
    assert_ne!(id_a, id_b);
    a.wait("A's counter counts", WAIT, |c| {
        (counts(&c.merged()).len() >= 2).then_some(())
    });

    // A's n2 is gone; B's n2 comes back on its address.
    let reused = a.member(1).addr.clone();
    a.kill(1);
    b.kill(1);
    b.set_listen(1, &reused);
    b.spawn(1);

    // A's leader reaches B's n2 within a heartbeat or two, and B's n2 refuses it, naming
    // both ids. Before ids, B's n2 took A's appends and its replica became A's:
    // that is checked on every look, so the test fails as soon as the two mix.
    let refused = |c: &Cluster, i: usize, theirs: &str, ours: &str| {
        c.events_of(i).iter().any(|e| {
            e["event"] == "security.rejected"
                && e["reason"] == "other_cluster"
                && e["error"]
                    .as_str()
                    .is_some_and(|m| m.contains(theirs) && m.contains(ours))
        })
    };
    let mut looks = 0;
    b.wait(
        "B's n2 refuses A's leader as another cluster's",
        WAIT,
        |c| {
            looks += 1;
            if looks % 40 == 0 {
                let status = c.status_via(1);
                assert!(
                    status["resources"]
                        .as_array()
                        .is_none_or(|r| r.iter().all(|r| r["name"] != "counter")),
                    "B's n2 holds A's state: {status}"
                );
            }
            refused(c, 1, &id_a, &id_b).then_some(())
        },
    );

    // Neither state took anything of the other's, and both clusters work on.
    let status_b = b.status_via(1);
    assert_eq!(status_b["cluster"], id_b.as_str());
    assert!(
        status_b["resources"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["name"] != "counter"),
        "B's n2 holds A's state: {status_b}"
    );
    b.wait("B's n2 is B's member again, with a session", WAIT, |c| {
        let status = c.status_via(0);
        status["nodes"]
            .as_array()?
            .iter()
            .find(|n| n["name"] == "n2" && n["addr"] == reused.as_str())
            .filter(|n| !n["session"].is_null())
            .map(|_| ())
    });
    let before = *counts(&a.merged()).last().unwrap();
    a.wait("A's counter counts on", WAIT, |c| {
        counts(&c.merged())
            .last()
            .is_some_and(|&n| n > before)
            .then_some(())
    });
    assert_eq!(a.status_via(0)["cluster"], id_a.as_str());

    // A new node whose `join` list names a node of each cluster joins neither: it
    // refuses to start, naming both clusters.
    let joiner = a.add_joiner();
    let b3 = format!("n3@{}", b.member(2).addr);
    let a1 = format!("n1@{}", a.member(0).addr);
    a.set_join(joiner, &[a1, b3]);
    a.spawn(joiner);
    let (status, stderr) = a.wait_refused(joiner);
    assert!(!status.success(), "it joined: {stderr}");
    for part in [
        "belong to more than one cluster",
        &format!("cluster {id_a} (n1)"),
        &format!("cluster {id_b} (n3)"),
    ] {
        assert!(stderr.contains(part), "{part:?} not in: {stderr}");
    }
    assert_increasing(&counts(&a.merged()));
    assert_safe(&a.merged(), "counter", 1);
}

/// The member list's learners (`tenure member list --json`, any live node).
fn learners(cluster: &Cluster) -> Option<Vec<String>> {
    let out = cluster.admin(&["member", "list", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let members = list["members"].as_array()?;
    let voters = members.iter().filter(|m| m["voter"] == true).count();
    (voters == 3 && members.len() == 4).then(|| {
        members
            .iter()
            .filter(|m| m["voter"] == false)
            .filter_map(|m| m["name"].as_str().map(str::to_owned))
            .collect()
    })
}

/// One process per name (issue 24, item 7). A node (a learner, so that two copies of its
/// Raft store do not vote) is frozen while it runs a slot, and a second process starts on
/// a copy of its data dir, as when a machine takes over a disk whose old machine may
/// still run. The second process is a newer run of the same store: it must not get the
/// node's session until the old one has expired by the ordinary rule, so the slot moves
/// only after the old process's deadline, and the old process, once resumed, stops its
/// plugin first. Before, the second process's session vacated the slot at once and a
/// successor ran while the old process still held its lease.
#[test]
fn a_second_run_of_a_store_gets_no_session_until_the_first_ones_has_expired() {
    // A long TTL: the old process is resumed once the second one is refused, and it must
    // still be within its lease then (a process frozen past its deadline logs its stop
    // only when it resumes, which the checker would count as running on).
    let mut cluster = Cluster::builder(3).ttl(Duration::from_secs(6)).build();
    cluster.start();
    // A fourth node joins: the voters stay three, so it is a learner.
    let old = cluster.add_joiner();
    cluster.spawn(old);
    cluster.install_plugin_everywhere(
        "beat",
        &manifest("beat", 4, "1.0.0"),
        &plugins().heartbeat_bytes(),
    );
    cluster.wait_owners("beat", 4, |_| true);
    let learner = cluster.wait("three voters and a learner", WAIT, |c| {
        learners(c).and_then(|l| l.into_iter().next())
    });
    assert_eq!(learner, cluster.name(old));
    cluster.pause(old);
    let twin = cluster.add_twin(old);
    cluster.spawn(twin);
    // The second process either waits for the session (the rule) or gets it, and a
    // successor starts while the old process is frozen (before the rule).
    let waited = cluster.wait("the second process to wait or to run a slot", WAIT, |c| {
        let events = c.events_of(twin);
        if events.iter().any(|e| is("session.waiting").matches(e)) {
            return Some(true);
        }
        events
            .iter()
            .any(|e| is("plugin.started").matches(e))
            .then_some(false)
    });
    cluster.resume(old);
    let waiting = cluster.events_of(twin);
    let told = waiting
        .iter()
        .find(|e| is("session.waiting").matches(e))
        .map(|e| e["reason"].as_str().unwrap_or("").to_owned());
    // Now the old process loses its lease (no renewal is acknowledged), its session
    // expires, and the second process gets the session and a slot.
    cluster.wait("the second process to run a slot", WAIT, |c| {
        c.events_of(twin)
            .iter()
            .any(|e| is("plugin.started").matches(e))
            .then_some(())
    });
    assert_safe(&cluster.merged(), "beat", 4);
    assert!(
        waited,
        "the second process ran a slot without waiting for the old session"
    );
    let told = told.expect("the second process said why it waits");
    assert!(
        told.contains("earlier run") && told.contains("expires a TTL after its last renewal"),
        "{told}"
    );
    // The old process's lease ran out (its renewals were refused: every node that heard
    // the newer run refuses the older one's envelopes) before the newer run's session.
    let merged = cluster.merged();
    let at = |label: &str, event: &str| {
        merged
            .iter()
            .position(|e| e["_node"] == label && is(event).matches(e))
            .unwrap_or_else(|| panic!("{label} wrote no {event}"))
    };
    let name = cluster.name(old).to_owned();
    assert!(
        at(&name, "lease.lost") < at(&format!("{name}'"), "session.opened"),
        "the second process opened its session before the first one lost its lease"
    );
}

/// A node whose wall clock ran an hour ahead (a warning now, not a partition) loses its
/// data dir and comes back, its clock fixed, as a new member. Its new run's incarnation
/// (microseconds of its clock at start) is below the old run's, which every other node
/// remembers: once the old member is removed, they must forget that, or they refuse the
/// new run as a stale incarnation of the old one until its clock catches up (an hour).
#[test]
fn a_wiped_node_whose_old_clock_ran_ahead_rejoins_once_its_old_member_is_removed() {
    let mut c = Cluster::builder(3)
        .wrappers(vec![Vec::new(), Vec::new(), clock_shifted("+1h")])
        .build();
    c.start();
    c.kill(2);
    c.wipe(2);
    c.node_mut(2).set_wrapper(Vec::new());
    c.remove_member("n3");
    c.switch_to_join(2);
    c.spawn(2);
    c.wait_event(2, "n3 joined as a new member", 0, is("cluster.joined").f());
    c.wait_formed();
}

/// A node comes back (as a new member, after its data dir was lost) with a `join` list
/// that names the leader at an address the leader no longer has, as after a machine was
/// replaced and the list was not updated everywhere. The members it reaches name the
/// leader at its real address: the node must ask it there, not give up on the name.
#[test]
fn a_join_list_with_the_leader_at_a_stale_address_still_joins() {
    let mut c = Cluster::builder(3).build();
    let leader = c.start();
    let l = c.index(&leader);
    let w = (0..3).find(|&i| i != l).unwrap();
    let other = (0..3).find(|&i| i != l && i != w).unwrap();
    let name = c.name(w).to_string();
    c.kill(w);
    c.wipe(w);
    c.remove_member(&name);
    c.switch_to_join(w);
    let stale = format!("{leader}@127.0.0.1:1");
    let through = format!("{}@{}", c.name(other), c.member(other).addr);
    c.set_join(w, &[stale, through]);
    c.spawn(w);
    c.wait_event(w, "joined through the leader's real address", 0, |e| {
        is("cluster.joined").matches(e)
    });
}

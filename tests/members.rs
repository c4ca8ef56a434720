//! Voters that follow the cluster (issue 24): real `tenure run` processes, with the
//! leader's voter upkeep (`raft/autopilot.rs`) and `tenure member` read from outside.
//!
//! With the voters fixed at three, a five-node cluster survived the loss of one voter,
//! not two. Now five nodes vote; voters that are gone past `[voters] replace_after` step
//! down (the voters shrink to three), new members are promoted back up to five, and each
//! step keeps the owners running.

mod support;

use std::collections::BTreeSet;

use serde_json::Value;
use support::*;

/// `tenure member list --json`, asked of any live node (the client follows the leader).
fn member_list(cluster: &Cluster) -> Option<Value> {
    let out = cluster.admin(&["member", "list", "--json"]);
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// The voters' names in a member list.
fn voters(list: &Value) -> BTreeSet<String> {
    list["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["voter"] == true)
        .filter_map(|m| m["name"].as_str().map(str::to_owned))
        .collect()
}

/// Waits until the counter has counted `more` times past its last count.
fn counts_on(cluster: &Cluster, what: &str, more: u64) {
    let at = counts(&cluster.merged()).last().copied().unwrap_or(0);
    cluster.wait(what, WAIT, |c| {
        counts(&c.merged())
            .last()
            .is_some_and(|&n| n >= at + more)
            .then_some(())
    });
}

#[test]
fn five_voters_shrink_to_three_when_two_are_gone_and_grow_back_as_nodes_join() {
    let mut cluster = Cluster::builder(5)
        .config("\n[voters]\nreplace_after = \"3s\"\n")
        .build();
    cluster.install_plugin_everywhere(
        "counter",
        &manifest("counter", 1, "1.0.0"),
        &plugins().counter_bytes(),
    );
    cluster.start();
    let all: BTreeSet<String> = (0..5).map(|i| cluster.name(i).to_owned()).collect();
    cluster.wait("five voters", WAIT, |c| {
        member_list(c).filter(|l| voters(l) == all).map(|_| ())
    });
    counts_on(&cluster, "the counter counts", 2);

    // Two voters die for good (neither the leader, so the test also sees the leader's
    // own upkeep rather than an election); a majority of five remains.
    let leader = cluster.wait_leader();
    let gone: Vec<usize> = (0..5)
        .filter(|&i| cluster.name(i) != leader)
        .take(2)
        .collect();
    let killed = std::time::Instant::now();
    for &i in &gone {
        cluster.kill(i);
    }
    let gone_names: BTreeSet<String> = gone.iter().map(|&i| cluster.name(i).to_owned()).collect();
    let list = cluster.wait("the voters shrink to the three that remain", WAIT, |c| {
        member_list(c).filter(|l| voters(l).len() == 3 && voters(l).is_disjoint(&gone_names))
    });
    let shrunk = killed.elapsed();
    // The ones gone stay members, as learners the leader cannot reach, with the reason.
    for name in &gone_names {
        let row = list["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} is no longer listed: {list}"));
        assert!(row["unreachable_ms"].as_u64().is_some(), "{row}");
        let note = row["note"].as_str().unwrap_or_default();
        assert!(note.contains("voters shrank to 3"), "{row}");
    }
    counts_on(&cluster, "the counter counts with three voters", 2);

    // Two new nodes join; with five members present the target is five again.
    let joiners = [cluster.add_joiner(), cluster.add_joiner()];
    let joined = std::time::Instant::now();
    for &i in &joiners {
        cluster.spawn(i);
    }
    let new_names: BTreeSet<String> = joiners
        .iter()
        .map(|&i| cluster.name(i).to_owned())
        .collect();
    cluster.wait("the joiners are promoted: five voters again", WAIT, |c| {
        member_list(c)
            .filter(|l| voters(l).len() == 5 && new_names.is_subset(&voters(l)))
            .map(|_| ())
    });

    eprintln!(
        "replace_after 3s: two voters killed -> three voters after {:.1} s; two joiners \
         spawned -> five voters after {:.1} s",
        shrunk.as_secs_f64(),
        joined.elapsed().as_secs_f64()
    );
    // A further voter loss is survived: four of five remain.
    let leader = cluster.wait_leader();
    let another = (0..cluster.len())
        .find(|&i| cluster.alive(i) && cluster.name(i) != leader)
        .expect("a live follower");
    cluster.kill(another);
    counts_on(&cluster, "the counter counts after a third loss", 2);

    let text = cluster.admin(&["member", "list"]);
    assert!(text.status.success(), "{}", stderr_of(&text));
    let text = stdout_of(&text);
    assert!(text.starts_with("leader "), "{text}");
    assert!(
        text.contains("learner") && text.contains("unreachable for"),
        "{text}"
    );
    assert_safe(&cluster.merged(), "counter", 1);
    cluster.stop_all();
}

/// A node removed while it was down comes back with its old store: it must not campaign
/// for ever. It learns from the other voters that it was removed, says so with how to
/// rejoin, and exits non-zero without running anything.
#[test]
fn a_removed_node_that_comes_back_is_told_so_and_exits() {
    removed_while_down_comes_back(false, |name| {
        vec![
            format!("this node ({name}) was removed from the cluster"),
            format!("tenure member remove {name}"),
            "empty its data dir".to_string(),
            "join".to_string(),
        ]
    });
}

/// A node configured with `join`, removed while it was down, comes back on its old data
/// dir. Before, the leader admitted it again on that data dir and it ran as the member.
/// The leader now refuses the store for good, as etcd refuses a removed member: the node
/// says what happened and what to do, and exits non-zero without running anything.
#[test]
fn a_removed_join_node_that_comes_back_on_its_old_data_dir_is_refused_and_exits() {
    removed_while_down_comes_back(true, |name| {
        vec![
            format!("{name}'s member was removed from the cluster with this data dir"),
            "empty its data dir".to_string(),
        ]
    });
}

/// Three nodes; a follower is killed, removed with `tenure member remove`, and started
/// again on its old data dir (with `join` instead of its `peers` if `with_join`, once the
/// cluster records stores: version 7). It must exit non-zero saying each of
/// `said(name)`, and not be listed again.
fn removed_while_down_comes_back(with_join: bool, said: impl Fn(&str) -> Vec<String>) {
    let mut cluster = Cluster::builder(3).build();
    cluster.start();
    if with_join {
        cluster.wait_version(7);
    }
    let leader = cluster.wait_leader();
    let victim = (0..3).find(|&i| cluster.name(i) != leader).unwrap();
    let name = cluster.name(victim).to_owned();
    cluster.kill(victim);
    cluster.remove_member(&name);
    if with_join {
        cluster.switch_to_join(victim);
    }
    cluster.spawn(victim);
    let (status, stderr) = cluster.wait_refused(victim);
    assert!(!status.success(), "{name} exited 0: {stderr}");
    for part in said(&name) {
        assert!(stderr.contains(&part), "{part:?} not in: {stderr}");
    }
    let list = member_list(&cluster).expect("a member list");
    assert!(
        !list.to_string().contains(&format!("\"{name}\"")),
        "{name} is listed again: {list}"
    );
    cluster.stop_all();
}

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
/// the wiped one starts again. With the wiped node's vote, the frozen node (which lacks
/// the last saves) could lead and the counter would go back: the wiped node must refuse
/// instead. Once the keeper, which kept every entry, is back, the counter goes on; the
/// wiped node comes back as a new member through `tenure member remove` and `join`, as its
/// refusal says.
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

    // The frozen node must not own the counter: a frozen owner's run lasts, in its event
    // log, until it is thawed, and the safety check would count it beside its successor.
    let owner = cluster.index(cluster.owner_names("counter").iter().next().unwrap());
    let frozen = (0..3).find(|&i| i != owner).unwrap();
    let wiped = (0..3).find(|&i| i != frozen).unwrap();
    let keeper = (0..3).find(|&i| i != frozen && i != wiped).unwrap();
    let name = cluster.name(wiped).to_string();
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
    let (status, stderr) = cluster.wait_refused(wiped);
    assert!(
        !status.success(),
        "the wiped {name} started as its old self"
    );
    for part in [
        format!("node {name} has run in this cluster before"),
        format!("tenure member remove {name}"),
        "join".to_string(),
    ] {
        assert!(stderr.contains(&part), "{part:?} not in: {stderr}");
    }

    // The keeper kept every entry: with it back, a leader is elected and the counter goes on.
    cluster.spawn(keeper);
    cluster.wait("the counter counts again after the loss", WAIT, |c| {
        counts(&c.merged())
            .last()
            .is_some_and(|&n| n > before_loss)
            .then_some(())
    });
    assert_increasing(&counts(&cluster.merged()));

    // The operator's way back: remove the old member, then join as a new one.
    cluster.wait("the old member removed", WAIT, |c| {
        let out = c.admin(&["member", "remove", &name]);
        out.status.success().then_some(())
    });
    cluster.switch_to_join(wiped);
    cluster.spawn(wiped);
    cluster.wait_event(wiped, "joined", 0, is("cluster.joined").f());
    cluster.wait("a member again with a session", WAIT, |c| {
        let status = c.status();
        status["nodes"]
            .as_array()?
            .iter()
            .find(|n| n["name"] == name.as_str())
            .filter(|n| !n["session"].is_null())
            .map(|_| ())
    });
    assert_increasing(&counts(&cluster.merged()));
    assert_safe(&cluster.merged(), "counter", 1);
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

//! Identity: a node that lost its data dir never comes back as its old self (issue 24).
//!
//! Raft's safety needs voters that never forget their votes and log. A node whose data
//! dir was emptied and that starts again under the same name and config has forgotten
//! both; were it to vote as its old self, a node that missed committed entries could be
//! elected and the cluster would lose them. These tests run the real binary.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::*;

/// The counter's counts in a merged log, in time order.
fn counts(events: &[Value]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| log_starting("counter", "count=")(e))
        .filter_map(count_of)
        .collect()
}

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

/// n1 is frozen while n2 and n3 commit more saves; n2 loses its disk; n3 dies; n1
/// resumes and the wiped n2 starts again. With n2's vote, n1 (which lacks the last saves)
/// could lead and the counter would go back: n2 must refuse instead. Once n3, which kept
/// every entry, is back, the counter goes on; n2 comes back as a new member through
/// `tenure remove` and `join`, as its refusal says.
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

    cluster.pause(0);
    let at_pause = *counts(&cluster.merged()).last().unwrap();
    // Saves committed by n2 and n3 only (n1's slot, if it had it, moves once its lease
    // has run out).
    cluster.wait("six more counts without n1", WAIT, |c| {
        counts(&c.merged())
            .last()
            .is_some_and(|&n| n >= at_pause + 6)
            .then_some(())
    });
    cluster.kill(1);
    cluster.wipe(1);
    let before_loss = *counts(&cluster.merged()).last().unwrap();
    cluster.kill(2);
    cluster.resume(0);
    cluster.spawn(1);
    let (status, stderr) = cluster.wait_refused(1);
    assert!(!status.success(), "the wiped n2 started as its old self");
    for part in [
        "node n2 has run in this cluster before",
        "tenure remove n2",
        "join",
    ] {
        assert!(stderr.contains(part), "{part:?} not in: {stderr}");
    }

    // n3 kept every entry: with it back, a leader is elected and the counter goes on.
    cluster.spawn(2);
    cluster.wait("the counter counts again after the loss", WAIT, |c| {
        counts(&c.merged())
            .last()
            .is_some_and(|&n| n > before_loss)
            .then_some(())
    });
    assert_increasing(&counts(&cluster.merged()));

    // The operator's way back for n2: remove the old member, then join as a new one.
    cluster.wait("n2 removed", WAIT, |c| {
        let out = c.admin(&["remove", "n2"]);
        out.status.success().then_some(())
    });
    cluster.switch_to_join(1);
    cluster.spawn(1);
    cluster.wait_event(1, "n2 joined", 0, is("cluster.joined").f());
    cluster.wait("n2 is a member again with a session", WAIT, |c| {
        let status = c.status();
        status["nodes"]
            .as_array()?
            .iter()
            .find(|n| n["name"] == "n2")
            .filter(|n| !n["session"].is_null())
            .map(|_| ())
    });
    assert_increasing(&counts(&cluster.merged()));
    assert_safe(&cluster.merged(), "counter", 1);
}

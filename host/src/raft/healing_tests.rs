//! Membership that heals (issue 24, item 3): a voter that missed membership changes
//! still takes part in the next election.
//!
//! A voter accepts Raft traffic from every member it knows (voters and learners of its
//! membership, and the members of its replica), not only from the voters of the
//! membership it happens to hold: Raft's own rule, since a server that missed the entries
//! that changed the membership cannot know the new voters otherwise. Strangers (no
//! member under that name) are still refused (`attack_tests.rs`).

use std::collections::BTreeSet;

use openraft::ChangeMembers;

use super::tests::Group;
use crate::cluster::{Command, Response};
use crate::transport::tests::{init_logs, wait_until};

/// Cuts node `name` off from every other running node of `group` (each refuses its
/// key), or reconnects it (`cut = false`): a partition as the nodes see it.
fn cut(group: &Group, name: &str, others: &[&str], cut: bool) {
    let key = group.node(name).rpc.transport().tls_info().key;
    for other in others {
        let set = if cut {
            BTreeSet::from([key.clone()])
        } else {
            BTreeSet::new()
        };
        group.node(other).rpc.transport().set_revoked(set);
    }
}

/// A voter (w) is cut off while the leader replaces the other follower (v) with a
/// learner (n4) in one joint change; then v and the leader are stopped for good. The
/// surviving voters of the new membership, w and n4, are a majority of it, but w still
/// holds the old membership, in which n4 is only a learner: w must vote for n4 (and take
/// its appends) for a leader to be elected without an operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_that_missed_membership_changes_votes_for_the_new_voters() {
    init_logs();
    let mut group = Group::new();
    group.bootstrap(&["n1", "n2", "n3"], 3).await;
    let leader = group.leader(&["n1", "n2", "n3"]).await;
    group.raise(&leader).await;
    let mut followers = ["n1", "n2", "n3"].into_iter().filter(|n| *n != leader);
    let (v, w) = (followers.next().unwrap(), followers.next().unwrap());
    let options = group.options("n4");
    group.start("n4", options).await;
    group
        .control("n4")
        .join(&group.via(&[&leader]))
        .await
        .unwrap();
    group.converge(&["n1", "n2", "n3", "n4"]).await;
    assert!(group.control(w).members().learners.contains_key("n4"));

    // w is cut off; the leader makes {leader, w, n4} the voters (a quorum of the old
    // voters, leader and v, and of the new ones, leader and n4, commits it).
    cut(&group, w, &[&leader, v, "n4"], true);
    let voters = [leader.as_str(), w, "n4"]
        .map(|n| group.control(n).member_id())
        .into();
    group
        .control(&leader)
        .shared
        .raft
        .change_membership(ChangeMembers::ReplaceAllVoters(voters), false)
        .await
        .unwrap();
    let answer = group
        .control(&leader)
        .propose(super::tests::join_command("n4"))
        .await;
    assert_eq!(answer, Ok(Response::Done));
    group.converge(&[&leader, "n4"]).await;
    assert!(
        !group.control(w).members().voters.contains_key("n4"),
        "w missed the change"
    );

    // v and the leader are gone for good; w comes back.
    group.stop(v).await;
    group.stop(&leader).await;
    cut(&group, w, &["n4"], false);
    wait_until("w and n4 to elect a leader", || {
        ["n4", w].iter().all(|n| {
            group
                .control(n)
                .leader()
                .is_some_and(|(l, _)| l == "n4" || l == w)
        })
    })
    .await;
    // The new leader commits, and w learns the membership it missed.
    let new = group.leader(&["n4", w]).await;
    let answer = group
        .control(&new)
        .propose(Command::SetDraining {
            node: "n4".into(),
            draining: false,
        })
        .await;
    assert_eq!(answer, Ok(Response::Done));
    group.converge(&["n4", w]).await;
    assert!(group.control(w).members().voters.contains_key("n4"));
    group.shutdown().await;
}

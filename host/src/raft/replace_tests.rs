//! A node that lost its disk and starts again with its old config comes back as a new
//! member on its own (issue 24, item 2): the leader removes its old member once that
//! member's session has ended, never before (`replace.rs`).

use super::replace::{self, Asked};
use super::tests::{Followed, Group, join_command};
use crate::cluster::{Command, Response};
use crate::transport::tests::{init_logs, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_node_started_with_its_old_peers_is_replaced_once_its_session_ended() {
    init_logs();
    let followed = Followed::new().await;
    let members = followed.members();
    let Followed {
        mut group,
        all,
        leader,
        name: wiped,
        store: old_store,
        session,
    } = followed;

    let seat = |group: &Group| {
        let metrics = group.control(&leader).metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        super::types::id_of(membership, wiped)
    };
    let old_id = seat(&group).expect("the node holds a seat");

    // The disk is lost; the node starts again with the same name, address and peers, as
    // a new member (its peers know its name: `node/new_member.rs`).
    let data_dir = group.options(wiped).data_dir.clone();
    let addr = group.node(wiped).addr.clone();
    group.stop(wiped).await;
    std::fs::remove_dir_all(&data_dir).unwrap();
    let mut options = group.options(wiped);
    options.new_member = true;
    group.start_at(wiped, options, &addr).await;
    assert_ne!(group.control(wiped).store_id(), old_store);

    // While the old session is live, its process may still run plugins: the leader
    // does not replace it.
    let shared = group.control(wiped).shared.clone();
    let attached = shared.attached().unwrap();
    let asked = replace::ask(&shared, &attached, &group.via(&[leader.as_str()])).await;
    assert!(
        matches!(&asked, Asked::Wait(why) if why.contains(&format!("old session {session} is live"))),
        "{asked:?}"
    );
    // The store the cluster knows for the name is not replaced.
    let forged = control_refuses_its_own_store(&group, &leader, wiped, old_store).await;
    assert!(forged.contains("did not lose its disk"), "{forged}");

    // The node starts as it was configured (its old `peers`), and waits; meanwhile the
    // session ends, as the leader decides once the old process stops renewing.
    let ending = async {
        let state = group.control(&leader).state();
        assert!(
            state.read().unwrap().members[wiped].session.is_some(),
            "the old session is live"
        );
        group
            .control(&leader)
            .propose(Command::EndSession {
                node: wiped.to_string(),
                session,
                expired_in: None,
                at_ms: 2,
            })
            .await
    };
    let (started, ended) = tokio::join!(group.control(wiped).bootstrap(&members), ending);
    assert_eq!(ended, Ok(Response::Done));
    started.unwrap();

    // A new member: caught up as a learner, then a voter again (the target is 3).
    wait_until("the new node to be a voter again", || {
        group
            .control(&leader)
            .member_list()
            .is_some_and(|list| list.members.iter().any(|m| m.name == wiped && m.voter))
    })
    .await;
    // A new member id: the old member's, which voted and held a log, is never reused
    // (issue 24, item 1).
    let new_id = seat(&group).expect("the new node holds a seat");
    assert_ne!(new_id, old_id, "the new node took the old member's id");
    assert_eq!(new_id, group.control(wiped).member_id());
    let state = group.control(&leader).state();
    let cluster = state.read().unwrap().clone();
    assert!(
        !cluster.stores.contains_key(wiped),
        "the old store was forgotten with the old member"
    );
    group.converge(&all).await;
    group.shutdown().await;
}

/// What the leader answers a replacement asked for `name` with the store the cluster
/// knows for it (the leader's rule, called directly).
async fn control_refuses_its_own_store(
    group: &Group,
    leader: &str,
    name: &str,
    store: crate::cluster::StoreId,
) -> String {
    match group
        .control(leader)
        .shared
        .serve_replace(name, store)
        .await
    {
        replace::ReplaceReply::Refused(why) => why,
        other => format!("{other:?}"),
    }
}

/// A node that was removed and joined again (its disk was lost) was caught up with a
/// snapshot taken while it was out, so its own latest snapshot holds a membership without
/// it. Once it leads, a node that joins gets that snapshot, and must still take the
/// leader's appends that follow, or it follows no one (seen in the seeded fault run,
/// seed 2119065325: the joiner refused every append as "not a member this node knows
/// of", and the cluster never agreed on a leader again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_follows_a_leader_that_its_snapshot_does_not_list() {
    init_logs();
    let mut group = Group::new();
    let all = ["n1", "n2", "n3"];
    let small = |group: &Group, name: &str| {
        let mut options = group.small_snapshots(name);
        options.voters = Some(3);
        options
    };
    group.bootstrap_with(&all, small).await;
    let first = group.leader(&all).await;
    group.raise(&first).await;
    let others: Vec<&str> = all.iter().copied().filter(|n| *n != first).collect();
    let (wiped, other) = (others[0], others[1]);

    // The wiped node is taken out; the others build snapshots (and purge) past that.
    let data_dir = group.options(wiped).data_dir.clone();
    group.stop(wiped).await;
    std::fs::remove_dir_all(&data_dir).unwrap();
    group.control(&first).remove_for_good(wiped).await.unwrap();
    let out_at = super::tests::last_applied(group.control(&first));
    let purged = |group: &Group, name: &str| {
        let metrics = group.control(name).metrics().borrow().clone();
        metrics.purged.as_ref().map_or(0, |id| id.index)
    };
    let mut i = 0;
    let started = std::time::Instant::now();
    while [first.as_str(), other]
        .iter()
        .any(|n| purged(&group, n) <= out_at)
    {
        i += 1;
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "no purge past {out_at} after {i} entries"
        );
        let answer = group
            .control(&first)
            .propose(join_command(&format!("a{i}")))
            .await;
        assert_eq!(answer, Ok(Response::Done));
    }

    // It joins again, from the leader's snapshot (which does not list it), and is
    // promoted back to voter.
    let before_join = group
        .control(&first)
        .metrics()
        .borrow()
        .last_log_index
        .unwrap_or(0);
    let options = small(&group, wiped);
    group.start(wiped, options).await;
    group
        .control(wiped)
        .join(&group.via(&[first.as_str(), other]))
        .await
        .unwrap();
    // A voter again, on every node, the change complete (not a joint membership: with
    // the first leader gone, its old half could not elect anyone).
    let id = group.control(wiped).member_id();
    wait_until("the rejoined node to be a voter again everywhere", || {
        [first.as_str(), wiped, other].iter().all(|n| {
            let metrics = group.control(n).metrics().borrow().clone();
            let membership = metrics.membership_config.membership();
            membership.get_joint_config().len() == 1 && membership.voter_ids().any(|v| v == id)
        })
    })
    .await;
    // Its snapshot is older than every membership that lists it.
    let snapshot_predates_its_join = |group: &Group| {
        let metrics = group.control(wiped).metrics().borrow().clone();
        metrics
            .snapshot
            .is_some_and(|id| id.index > out_at && id.index <= before_join)
    };
    assert!(
        snapshot_predates_its_join(&group),
        "the case is not made: {:?}",
        group.control(wiped).metrics().borrow().snapshot
    );

    // It leads: the other node does not campaign, and the first leader stops once the
    // rejoined node holds every entry (the other's vote needs it).
    group.converge(&[first.as_str(), wiped, other]).await;
    group
        .control(other)
        .shared
        .raft
        .runtime_config()
        .elect(false);
    group.stop(&first).await;
    let leader = group.leader(&[wiped, other]).await;
    assert_eq!(leader, wiped);

    assert!(
        snapshot_predates_its_join(&group),
        "the case is not made: it built a newer snapshot"
    );

    // A new node joins through it, and must follow it.
    let options = small(&group, "n4");
    group.start("n4", options).await;
    group
        .control("n4")
        .join(&group.via(&[wiped, other]))
        .await
        .unwrap();
    group.converge(&[wiped, other, "n4"]).await;
    group.shutdown().await;
}

/// The other side of [`a_joiner_follows_a_leader_that_its_snapshot_does_not_list`]: a
/// leader that removed itself is refused in its own term, although the followers still
/// follow it (no one else has campaigned). Were it taken as the leader they follow, a
/// removed leader (its key not revoked) could go on appending in its term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_removed_itself_is_refused_in_its_own_term() {
    use super::kinds::APPEND_ENTRIES_TO;
    use super::types::{AppendEntriesRequest, Vote};
    init_logs();
    let mut group = Group::new();
    let all = ["n1", "n2", "n3"];
    group.bootstrap(&all, 3).await;
    let leader = group.leader(&all).await;
    let followers: Vec<&str> = all.iter().copied().filter(|n| *n != leader).collect();
    for f in &followers {
        group.control(f).shared.raft.runtime_config().elect(false);
    }
    let term = group.control(&leader).metrics().borrow().current_term;
    let _ = group.control(&leader).shared.remove_member(&leader).await;
    let id = group.control(&leader).member_id();
    let follower = followers[0];
    wait_until(
        "the follower to hold the membership without the leader",
        || {
            let metrics = group.control(follower).metrics().borrow().clone();
            let membership = metrics.membership_config.membership();
            membership.get_joint_config().len() == 1 && membership.get_node(&id).is_none()
        },
    )
    .await;
    let metrics = group.control(follower).metrics().borrow().clone();
    assert_eq!(
        (metrics.current_leader, metrics.current_term),
        (Some(id), term),
        "the follower still follows the removed leader in its term"
    );

    // The removed leader appends in its term.
    let last = metrics.last_applied;
    let forged = AppendEntriesRequest {
        vote: Vote::new_committed(term, id),
        prev_log_id: last,
        entries: vec![],
        leader_commit: last,
    };
    let answer = group
        .node(&leader)
        .rpc
        .call(
            follower,
            group.node(follower).addr.parse().unwrap(),
            APPEND_ENTRIES_TO,
            super::tests::from_store_of(&group, &leader, forged),
        )
        .await;
    let error = answer
        .expect_err("the removed leader's append was taken")
        .to_string();
    assert!(error.contains("not a member this node knows of"), "{error}");
    group.shutdown().await;
}

/// The leader removed a wiped node's old member, but the node did not hear so (the
/// answer was lost, or came after the node stopped waiting for it; or a replica that had
/// not yet applied the removal sent it to ask again): it asks again with the same new
/// store, and is told the old member is out, so it joins. The leader answered that the
/// cluster did not know the name's store, and the node refused to start (seen in the
/// seeded fault run, seed 2119065325: "the wiped node joined as a new member" never came).
/// The old store, retired with its member, is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_asked_again_after_the_removal_is_answered_removed() {
    init_logs();
    let Followed {
        mut group,
        leader,
        name: wiped,
        store: old_store,
        session,
        ..
    } = Followed::new().await;
    let addr = group.node(wiped).addr.clone();
    let data_dir = group.options(wiped).data_dir.clone();
    group.stop(wiped).await;
    std::fs::remove_dir_all(&data_dir).unwrap();
    super::tests::end_session(&group, &leader, wiped, session).await;

    let options = group.options(wiped);
    group.start_at(wiped, options, &addr).await;
    let shared = group.control(wiped).shared.clone();
    let attached = shared.attached().unwrap();
    let via = group.via(&[leader.as_str()]);
    let asked = replace::ask(&shared, &attached, &via).await;
    assert!(matches!(asked, Asked::Replaced { .. }), "{asked:?}");
    let again = replace::ask(&shared, &attached, &via).await;
    assert!(matches!(again, Asked::Replaced { .. }), "{again:?}");

    let old = control_refuses_its_own_store(&group, &leader, wiped, old_store).await;
    assert!(old.contains("retired"), "{old}");
    drop((shared, attached));
    group.shutdown().await;
}

/// A name that holds a Raft seat and never registered (a joiner wiped before its
/// registration committed) is not answered `Removed`: its old member is still in the
/// Raft membership, and the node would wait for ever, asking (found in review: the
/// shortcut for a replacement asked again looked at the members only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seated_name_that_never_registered_is_not_answered_removed() {
    init_logs();
    let (group, leader) = n3_joined(false).await;
    assert!(group.control(&leader).id_of_name("n3").is_some());
    let answer = group
        .control(&leader)
        .shared
        .serve_replace("n3", crate::cluster::StoreId::random())
        .await;
    assert!(
        matches!(&answer, replace::ReplaceReply::Refused(why) if why.contains("does not know which store")),
        "{answer:?}"
    );
    group.shutdown().await;
}

/// A new member that stopped before any entry reached it (its store still counts as new)
/// asks to be replaced at its next start: its name's seat is its own store's, so it is
/// answered `Removed` and its JOIN finds the seat. It was refused ("does not know which
/// store"), and the node refused to start (found in review).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_member_asking_about_its_own_seat_is_answered_removed() {
    init_logs();
    let (group, leader) = n3_joined(true).await;
    let store = group.control("n3").store_id();
    assert_eq!(
        group.control(&leader).id_of_name("n3"),
        Some(super::types::member_id("n3", store))
    );
    let answer = group
        .control(&leader)
        .shared
        .serve_replace("n3", store)
        .await;
    assert_eq!(answer, replace::ReplaceReply::Removed);
    group.shutdown().await;
}

/// A group of n1 and n2 at the version new members join at, and n3 joined to it (as a new
/// member, with a member id of its store, if `new_member`); the group and its leader.
async fn n3_joined(new_member: bool) -> (Group, String) {
    let mut group = Group::new();
    group.bootstrap(&["n1", "n2"], 2).await;
    let leader = group.leader(&["n1", "n2"]).await;
    group.raise(&leader).await;
    let mut options = group.options("n3");
    options.new_member = new_member;
    group.start("n3", options).await;
    group
        .control("n3")
        .join(&group.via(&[leader.as_str()]))
        .await
        .unwrap();
    (group, leader)
}

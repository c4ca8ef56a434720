//! A member removed with its store recorded is never taken back with that store (issue
//! 24, items 2 and 7): `Cluster::retired`, the leader's JOIN rule (`membership.rs`) and
//! the removed node's own check (`removed.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::error::ControlError;
use super::replace;
use super::tests::{Followed, Group, end_session, join_command};
use crate::cluster::{Command, Process, Response};
use crate::transport::tests::{init_logs, wait_until};

/// A member removed while it was down comes back on its old data dir. Before, with
/// `join`, it was admitted again and promoted, and every command of its store was then
/// refused (were it to lead, no grant or expiry would commit): now it is refused and
/// stops. Its name then rejoins from a new store; the old data dir is refused again, and,
/// started with `peers` (which never asks to join), it learns from the voters that its
/// name is another store's now, and stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_member_s_store_is_refused_for_good() {
    init_logs();
    let followed = Followed::new().await;
    let Followed {
        mut group,
        all,
        leader,
        name: gone,
        store: old_store,
        session,
    } = followed;
    let via = group.via(&[leader.as_str()]);
    let addr = group.node(gone).addr.clone();
    let data_dir = group.options(gone).data_dir.clone();

    // Down, its session ended, and removed by an operator.
    group.stop(gone).await;
    end_session(&group, &leader, gone, session).await;
    group.control(&leader).remove_for_good(gone).await.unwrap();
    let retired = |group: &Group| {
        let state = group.control(&leader).state();
        let cluster = state.read().unwrap();
        (
            cluster.is_retired(gone, old_store),
            cluster.stores.get(gone).copied(),
        )
    };
    assert_eq!(retired(&group), (true, None));

    // Back on its old data dir, with `join`: refused for good, never admitted.
    let options = group.options(gone);
    group.start_at(gone, options, &addr).await;
    let joined = group.control(gone).join(&via).await;
    assert!(
        matches!(&joined, Err(ControlError::Removed { why, .. }) if why.contains("removed from the cluster with this data dir")),
        "{joined:?}"
    );
    let listed = |group: &Group| {
        group
            .control(&leader)
            .member_list()
            .is_some_and(|list| list.members.iter().any(|m| m.name == gone))
    };
    assert!(!listed(&group), "admitted to the Raft membership");

    // The name rejoins from a new store (the old data dir is kept aside), and opens a
    // session: the cluster records the new store.
    group.stop(gone).await;
    let old_dir = data_dir.with_extension("old");
    std::fs::rename(&data_dir, &old_dir).unwrap();
    let options = group.options(gone);
    group.start_at(gone, options, &addr).await;
    group.control(gone).join(&via).await.unwrap();
    let new_store = group.control(gone).store_id();
    let registered = group.control(&leader).propose(join_command(gone)).await;
    assert_eq!(registered, Ok(Response::Done));
    let opened = group
        .control(&leader)
        .propose(Command::OpenSessionOf {
            node: gone.to_string(),
            at_ms: 3,
            process: Process {
                store: new_store,
                incarnation: 1,
            },
            ended: None,
        })
        .await;
    assert!(matches!(opened, Ok(Response::Session(_))), "{opened:?}");
    assert_eq!(retired(&group), (true, Some(new_store)));
    group.converge(&all).await;

    // A Raft message of the name that names the retired store as its sender's (as the
    // old process, still running elsewhere, sends them) is refused; the new store's is
    // not refused for it.
    let target = all
        .iter()
        .copied()
        .find(|n| *n != gone && *n != leader)
        .unwrap();
    let from_old = vote_as(&group, gone, old_store, target).await;
    assert!(
        matches!(&from_old, Err(why) if why.contains("removed from the cluster with that store")),
        "{from_old:?}"
    );
    let refused = group.control(target).shared.refusals.counts();
    assert!(
        refused
            .iter()
            .any(|(why, n)| *why == super::refusals::Refusal::RemovedStore && *n > 0),
        "{refused:?}"
    );
    let from_new = vote_as(&group, gone, new_store, target).await;
    assert!(
        !matches!(&from_new, Err(why) if why.contains("removed from the cluster")),
        "{from_new:?}"
    );

    // The old process again, elsewhere (a machine that was only paused comes back), while
    // the new one is away: with `join`, refused.
    group.stop(gone).await;
    let mut old = group.options(gone);
    old.data_dir = old_dir;
    group.start(gone, old).await;
    assert_eq!(group.control(gone).store_id(), old_store);
    let joined = group.control(gone).join(&via).await;
    assert!(
        matches!(&joined, Err(ControlError::Removed { why, .. }) if why.contains("removed from the cluster with this data dir")),
        "{joined:?}"
    );
    assert!(
        new_node_listed_at(&group, &leader, gone, &addr),
        "the name's Raft address moved to the old process"
    );

    // With `peers`, it does not ask to join (its store is not new): it hears no leader,
    // asks the voters, and stops, told that its name is another store's now.
    let members: BTreeMap<String, String> = all
        .iter()
        .map(|n| (n.to_string(), group.node(n).addr.clone()))
        .collect();
    group.control(gone).bootstrap(&members).await.unwrap();
    let why = tokio::time::timeout(Duration::from_secs(60), group.control(gone).failed())
        .await
        .expect("the old process never learned that it is not the member");
    assert!(
        why.contains(&format!("{gone} is now a member on another data dir")),
        "{why}"
    );
    group.shutdown().await;
}

/// Sends `to` a vote request of the current term from node `name`'s endpoint, naming
/// `store` as the sender's store: the answer's bytes, or the refusal.
async fn vote_as(
    group: &Group,
    name: &str,
    store: crate::cluster::StoreId,
    to: &str,
) -> Result<Vec<u8>, String> {
    let control = group.control(name);
    let term = control.metrics().borrow().current_term;
    let request = super::kinds::Addressed {
        to: Some(group.control(to).store_id()),
        from: store,
        request: super::types::VoteRequest {
            vote: openraft::Vote::new(term, super::types::member_id(name, store)),
            last_log_id: None,
        },
    };
    let rpc = control.shared.endpoint.get().unwrap().rpc;
    let addr = group.node(to).addr.parse().unwrap();
    let payload = postcard::to_allocvec(&request).unwrap();
    rpc.call(to, addr, super::kinds::VOTE_TO, payload)
        .await
        .map_err(|e| e.to_string())
}

/// Whether the leader's Raft membership lists `name` at `addr` (the new node's address,
/// not the old process's).
fn new_node_listed_at(group: &Group, leader: &str, name: &str, addr: &str) -> bool {
    let metrics = group.control(leader).metrics().borrow().clone();
    metrics
        .membership_config
        .membership()
        .nodes()
        .any(|(_, peer)| peer.name == name && peer.addr == addr)
}

/// A process admitted while its own removal was under way (or by a leader whose replica
/// had not applied it) is a Raft member whose every command is refused: once its own
/// replica applies the removal of its store, it stops, rather than stay a member (a voter,
/// perhaps the leader) through which nothing commits. Made here by committing the removal
/// while the member is still in the Raft membership, the order `remove_for_good` avoids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_applies_the_removal_of_its_own_store_stops() {
    init_logs();
    let followed = Followed::new().await;
    let Followed {
        group,
        all: _,
        leader,
        name: gone,
        store: _,
        session,
    } = followed;
    end_session(&group, &leader, gone, session).await;
    let removed = group
        .control(&leader)
        .propose_here(Command::Remove {
            node: gone.to_string(),
            at_ms: 3,
        })
        .await;
    assert_eq!(removed, Ok(Response::Done));
    let why = tokio::time::timeout(Duration::from_secs(30), group.control(gone).failed())
        .await
        .expect("the node went on as a member whose commands are all refused");
    assert!(
        why.contains(&format!(
            "{gone}'s member was removed from the cluster with this data dir"
        )),
        "{why}"
    );
    group.shutdown().await;
}

/// A node whose old member was replaced (`replace.rs`) and that stopped before it had
/// joined as the new member finds, at its next start, a cluster formed without it. With
/// `peers` it refused to start as "not an initial member"; the cluster now says that it
/// removed the name's old member with its store, and the node joins as a new member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_node_that_stopped_before_it_joined_rejoins_with_its_peers() {
    init_logs();
    let followed = Followed::new().await;
    let members = followed.members();
    let Followed {
        mut group,
        all,
        leader,
        name: wiped,
        store: _,
        session,
    } = followed;
    let addr = group.node(wiped).addr.clone();
    let data_dir = group.options(wiped).data_dir.clone();
    group.stop(wiped).await;
    std::fs::remove_dir_all(&data_dir).unwrap();
    end_session(&group, &leader, wiped, session).await;

    // Started on a new disk, it has its old member removed, and stops before it joins.
    let options = group.options(wiped);
    group.start_at(wiped, options, &addr).await;
    let shared = group.control(wiped).shared.clone();
    let attached = shared.attached().unwrap();
    let asked = replace::ask(&shared, &attached, &group.via(&[leader.as_str()])).await;
    assert!(
        matches!(asked, replace::Asked::Replaced { .. }),
        "{asked:?}"
    );
    drop((shared, attached));
    group.stop(wiped).await;

    // Its next start, with the same `peers`.
    let options = group.options(wiped);
    group.start_at(wiped, options, &addr).await;
    let started = group.control(wiped).bootstrap(&members).await;
    assert!(started.is_ok(), "{started:?}");
    wait_until("the node to be a voter again", || {
        group
            .control(&leader)
            .member_list()
            .is_some_and(|list| list.members.iter().any(|m| m.name == wiped && m.voter))
    })
    .await;
    group.converge(&all).await;
    group.shutdown().await;
}

/// A voter that comes back at a new address while another voter is down joins again (an
/// address change). The leader's quorum needs it, so nothing may wait for a round first:
/// its old address no longer answers (a first version of the rule above waited for one,
/// and the join failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_that_moved_rejoins_while_another_voter_is_down() {
    init_logs();
    let Followed {
        mut group,
        all,
        leader,
        name: moved,
        ..
    } = Followed::new().await;
    let down = *all.iter().find(|n| **n != leader && **n != moved).unwrap();
    group.stop(down).await;
    group.stop(moved).await;
    let options = group.options(moved);
    group.start(moved, options).await;
    let joined = tokio::time::timeout(
        Duration::from_secs(60),
        group.control(moved).join(&group.via(&[leader.as_str()])),
    )
    .await
    .expect("the join hung");
    assert!(joined.is_ok(), "{joined:?}");
    group.converge(&[leader.as_str(), moved]).await;
    group.shutdown().await;
}

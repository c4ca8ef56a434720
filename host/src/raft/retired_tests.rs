//! A member removed with its store recorded is never taken back with that store (issue
//! 24, items 2 and 7): `Cluster::retired`, the leader's JOIN rule (`membership.rs`) and
//! the removed node's own check (`removed.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::error::ControlError;
use super::tests::{Group, addressed_with_a_session, join_command};
use crate::cluster::{Command, Process, Response};
use crate::transport::tests::init_logs;

/// A member removed while it was down comes back on its old data dir. Before, with
/// `join`, it was admitted again and promoted, and every command of its store was then
/// refused (were it to lead, no grant or expiry would commit): now it is refused and
/// stops. Its name then rejoins from a new store; the old data dir is refused again, and,
/// started with `peers` (which never asks to join), it learns from the voters that its
/// name is another store's now, and stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_member_s_store_is_refused_for_good() {
    init_logs();
    let mut group = Group::new();
    let all = ["n1", "n2", "n3"];
    group.bootstrap(&all, 3).await;
    let leader = group.leader(&all).await;
    let gone = *all.iter().find(|n| **n != leader).unwrap();
    let (old_store, session) = addressed_with_a_session(&group, &leader, gone).await;
    group.converge(&all).await;
    let via = group.via(&[leader.as_str()]);
    let addr = group.node(gone).addr.clone();
    let data_dir = group.options(gone).data_dir.clone();

    // Down, its session ended, and removed by an operator.
    group.stop(gone).await;
    let ended = group
        .control(&leader)
        .propose(Command::EndSession {
            node: gone.to_string(),
            session,
            expired_in: None,
            at_ms: 2,
        })
        .await;
    assert_eq!(ended, Ok(Response::Done));
    group.control(&leader).remove_for_good(gone).await.unwrap();
    let retired = |group: &Group| {
        let state = group.control(&leader).state();
        let cluster = state.read().unwrap();
        (
            cluster.retired.get(gone).copied(),
            cluster.stores.get(gone).copied(),
        )
    };
    assert_eq!(retired(&group), (Some(old_store), None));

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
    assert_eq!(retired(&group), (Some(old_store), Some(new_store)));
    group.converge(&all).await;

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

/// Whether the leader's Raft membership lists `name` at `addr` (the new node's address,
/// not the old process's).
fn new_node_listed_at(group: &Group, leader: &str, name: &str, addr: &str) -> bool {
    let metrics = group.control(leader).metrics().borrow().clone();
    metrics
        .membership_config
        .membership()
        .get_node(&super::types::node_id(name))
        .is_some_and(|peer| peer.addr == addr)
}

//! Raft's messages name the store they are for (issue 24, item 3): a node whose disk
//! was wiped and that rejoined under its old name refuses a vote request meant for its
//! old self, from a replica that missed its removal and rejoin.

use super::kinds::{APPEND_ENTRIES, INSTALL_SNAPSHOT, VOTE};
use super::network::DROPPED;
use super::refusals::Refusal;
use super::tests::{Group, addressed_with_a_session};
use crate::cluster::{Command, Response};
use crate::transport::tests::{init_logs, wait_until};

/// Drops the Raft messages (appends, votes, snapshots) from `from` to `to`, by address.
fn drop_between(from: &str, to: &str) {
    let mut dropped = DROPPED.lock().unwrap();
    for kind in [APPEND_ENTRIES, VOTE, INSTALL_SNAPSHOT] {
        dropped.insert((from.to_string(), to.to_string(), kind));
    }
}

/// The store `name`'s replica records for `of`.
fn recorded(group: &Group, name: &str, of: &str) -> Option<crate::cluster::StoreId> {
    let state = group.control(name).state();
    let cluster = state.read().unwrap();
    cluster.stores.get(of).copied()
}

/// How many Raft messages `name` refused as meant for another store.
fn misaddressed(group: &Group, name: &str) -> u64 {
    let counts = group.control(name).shared.refusals.counts();
    counts
        .iter()
        .find(|(why, _)| *why == Refusal::Misaddressed)
        .map_or(0, |(_, n)| *n)
}

/// Five voters at the version that addresses messages. One node (`wiped`) opens a
/// session, so every replica records its store; another (`stale`) is then cut off. The
/// wiped node's session ends, it is stopped and removed (`remove_for_good`, as `tenure
/// member remove` does), its data dir is emptied, and it joins again as a new member,
/// with a log still empty (no append reaches it yet), as a node is before it catches up. The stale node, which missed all of it and still counts
/// the old store as a voter, campaigns; only its vote requests to the new node get
/// through. Without the address, the new node grants its vote as though it were the old
/// member, whose vote and log the stale node's majority would need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_request_meant_for_the_old_store_of_a_rejoined_node_is_refused() {
    init_logs();
    let mut group = Group::new();
    let all = ["n1", "n2", "n3", "n4", "n5"];
    group.bootstrap(&all, 5).await;
    let leader = group.leader(&all).await;
    let others: Vec<&str> = all.iter().copied().filter(|n| *n != leader).collect();
    let (wiped, stale) = (others[0], others[1]);
    let rest: Vec<&str> = all
        .iter()
        .copied()
        .filter(|n| *n != wiped && *n != stale)
        .collect();
    let (old_store, session) = addressed_with_a_session(&group, &leader, wiped).await;
    let control = group.control(&leader);
    group.converge(&all).await;
    assert_eq!(recorded(&group, stale, wiped), Some(old_store));

    let stale_addr = group.node(stale).addr.clone();
    for other in all.iter().filter(|n| **n != stale) {
        let addr = &group.node(other).addr;
        drop_between(&stale_addr, addr);
        drop_between(addr, &stale_addr);
    }
    assert_eq!(
        control
            .propose(Command::EndSession {
                node: wiped.to_string(),
                session,
                expired_in: None,
                at_ms: 2,
            })
            .await,
        Ok(Response::Done)
    );
    let data_dir = group.options(wiped).data_dir.clone();
    let old_addr = group.node(wiped).addr.clone();
    group.stop(wiped).await;
    let control = group.control(&leader);
    control.remove_for_good(wiped).await.unwrap();
    assert_eq!(
        recorded(&group, &leader, wiped),
        None,
        "removed with the member"
    );
    assert_eq!(
        recorded(&group, stale, wiped),
        Some(old_store),
        "the stale replica missed it"
    );

    std::fs::remove_dir_all(&data_dir).unwrap();
    // Back at its address, as a machine whose disk was replaced comes back: the
    // stale node reaches it there.
    let options = group.options(wiped);
    group.start_at(wiped, options, &old_addr).await;
    let new_addr = old_addr.clone();
    for other in all.iter().filter(|n| **n != wiped) {
        drop_between(&group.node(other).addr, &new_addr);
    }
    // Only the stale node's vote requests reach the new node.
    DROPPED
        .lock()
        .unwrap()
        .remove(&(stale_addr.clone(), new_addr.clone(), VOTE));
    group.control(wiped).join(&group.via(&rest)).await.unwrap();
    assert_ne!(group.control(wiped).store_id(), old_store);

    let voted_for_stale = || {
        group
            .control(wiped)
            .metrics()
            .borrow()
            .vote
            .leader_id()
            .voted_for()
            == Some(group.control(stale).member_id())
    };
    let _ = group.control(stale).shared.raft.trigger().elect().await;
    wait_until(
        "the new node to answer the stale node's vote request",
        || voted_for_stale() || misaddressed(&group, wiped) > 0,
    )
    .await;
    assert!(
        !voted_for_stale(),
        "the new node voted as the old member's store"
    );
    assert!(misaddressed(&group, wiped) > 0);

    // The leader's replica records no store for the name since the removal: its
    // messages reach the new node, which catches up.
    for other in &rest {
        let addr = group.node(other).addr.clone();
        DROPPED
            .lock()
            .unwrap()
            .retain(|(from, to, _)| !(*from == addr && *to == new_addr));
    }
    let applied = *group.control(&leader).applied().borrow();
    wait_until("the new node to catch up", || {
        *group.control(wiped).applied().borrow() >= applied
    })
    .await;
    let addrs: Vec<String> = all.iter().map(|n| group.node(n).addr.clone()).collect();
    DROPPED
        .lock()
        .unwrap()
        .retain(|(from, to, _)| !addrs.contains(from) && !addrs.contains(to));
    group.shutdown().await;
}

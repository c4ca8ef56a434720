//! A node that lost its disk and starts again with its old config comes back as a new
//! member on its own (issue 24, item 2): the leader removes its old member once that
//! member's session has ended, never before (`replace.rs`).

use std::collections::BTreeMap;

use super::replace::{self, Asked};
use super::tests::{Group, join_command};
use crate::cluster::{Command, Process, Response};
use crate::transport::tests::{init_logs, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_node_started_with_its_old_peers_is_replaced_once_its_session_ended() {
    init_logs();
    let mut group = Group::new();
    let all = ["n1", "n2", "n3"];
    group.bootstrap(&all, 3).await;
    let leader = group.leader(&all).await;
    let wiped = *all.iter().find(|n| **n != leader).unwrap();
    let control = group.control(&leader);
    assert_eq!(
        control
            .propose_here(Command::RaiseVersion {
                to: crate::version::ADDRESSED,
            })
            .await,
        Ok(Response::Done)
    );
    assert_eq!(
        control.propose(join_command(wiped)).await,
        Ok(Response::Done)
    );
    let old_store = group.control(wiped).store_id();
    let opened = control
        .propose(Command::OpenSessionOf {
            node: wiped.to_string(),
            at_ms: 1,
            process: Process {
                store: old_store,
                incarnation: 1,
            },
            ended: None,
        })
        .await;
    let Ok(Response::Session(session)) = opened else {
        panic!("{opened:?}");
    };
    group.converge(&all).await;
    let members: BTreeMap<String, String> = all
        .iter()
        .map(|n| (n.to_string(), group.node(n).addr.clone()))
        .collect();

    // The disk is lost; the node starts again with the same name, address and peers.
    let data_dir = group.options(wiped).data_dir.clone();
    let addr = group.node(wiped).addr.clone();
    group.stop(wiped).await;
    std::fs::remove_dir_all(&data_dir).unwrap();
    let options = group.options(wiped);
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

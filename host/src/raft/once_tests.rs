//! Stamped commands over real Raft (issue 24 item 8): two copies of one command in the
//! log, as a retry after an answer that did not say whether the command was appended
//! makes them, are applied once on every replica, before and after a restart; stamps
//! wait for the cluster's version; and a burst of stamped proposals is answered in place.

use std::time::{Duration, Instant};

use super::propose::Attempt;
use super::tests::{Group, join_command};
use crate::cluster::{Command, Outcome, Process, Proposal, Response};
use crate::transport::tests::init_logs;

/// Raises the group's version to the stamps' on its leader, and waits until every node
/// of `all` applied it (each node stamps by its own replica's version).
async fn allow_stamps(group: &Group, leader: &str, all: &[&str]) {
    group.raise_to(leader, crate::version::STAMPS).await;
    group.converge(all).await;
}

/// Three nodes whose cluster's version allows stamps, and their leader.
async fn three_that_stamp() -> (Group, [&'static str; 3], String) {
    let mut group = Group::new();
    let all = ["n1", "n2", "n3"];
    group.bootstrap(&all, 3).await;
    let leader = group.leader(&all).await;
    allow_stamps(&group, &leader, &all).await;
    (group, all, leader)
}

/// The index of the last entry in `name`'s log.
fn last_index(group: &Group, name: &str) -> u64 {
    group
        .control(name)
        .metrics()
        .borrow()
        .last_log_index
        .unwrap_or(0)
}

/// `name`'s run, as its proposals stamp it.
fn run_of(group: &Group, name: &str) -> Process {
    Process {
        store: group.control(name).store_id(),
        incarnation: group.node(name).rpc.incarnation(),
    }
}

/// Forwards `proposal` from `from` to the leader as a PROPOSE, the real call a proposer
/// makes (and makes again on a retry).
async fn forward(group: &Group, from: &str, leader: &str, proposal: &Proposal) -> Attempt {
    let shared = &group.control(from).shared;
    let peer = shared.leader().map(|(_, p)| p).unwrap();
    assert_eq!(peer.name, leader);
    shared
        .forward(&peer, proposal, Instant::now() + Duration::from_secs(10))
        .await
}

fn answer(attempt: Attempt) -> Result<Outcome, String> {
    match attempt {
        Attempt::Done(result) => result.map_err(|e| e.to_string()),
        Attempt::Retry(why) => Err(format!("retry: {why}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_sent_twice_with_one_stamp_is_applied_once_on_every_replica() {
    init_logs();
    let mut group = Group::new();
    let all = ["n1", "n2", "n3"];
    group.bootstrap(&all, 3).await;
    let leader = group.leader(&all).await;
    let follower = all.iter().find(|n| **n != leader).unwrap().to_string();
    assert_eq!(
        group
            .control(&leader)
            .propose(join_command(&follower))
            .await,
        Ok(Response::Done)
    );
    // Opening a session twice is two sessions: the command a doubled retry hurt most.
    // (A member may open only its own.)
    let stamped = Proposal::Stamped {
        member: follower.clone(),
        run: run_of(&group, &follower),
        low: 1,
        commands: vec![(
            1,
            Command::OpenSession {
                node: follower.clone(),
                at_ms: 1,
            },
        )],
    };

    // Before the cluster's version allows stamps, the leader does not append a stamped
    // proposal (members of the older build could not read it); the proposer may retry.
    let before = *group.control(&leader).applied().borrow();
    let early = answer(forward(&group, &follower, &leader, &stamped).await);
    assert!(
        matches!(&early, Err(m) if m.starts_with("retry: ") && m.contains("needs cluster version")),
        "{early:?}"
    );
    assert_eq!(*group.control(&leader).applied().borrow(), before);

    allow_stamps(&group, &leader, &all).await;
    // A member cannot stamp for another.
    let Proposal::Stamped {
        run, low, commands, ..
    } = stamped.clone()
    else {
        unreachable!()
    };
    let other = Proposal::Stamped {
        member: leader.clone(),
        run,
        low,
        commands,
    };
    let forged = answer(forward(&group, &follower, &leader, &other).await);
    assert!(
        matches!(&forged, Err(m) if m.contains(&format!("stamped as {leader}'s"))),
        "{forged:?}"
    );

    // Two copies, two log entries: the second is answered with the first's answer.
    let first = answer(forward(&group, &follower, &leader, &stamped).await).unwrap();
    let Outcome::One(Response::Session(session)) = first else {
        panic!("{first:?}");
    };
    let second = answer(forward(&group, &follower, &leader, &stamped).await).unwrap();
    assert_eq!(second, Outcome::One(Response::Session(session)));
    assert!(
        *group.control(&leader).applied().borrow() > session,
        "the second copy is an entry of its own"
    );
    group.converge(&all).await;
    let opened = |group: &Group, name: &str| {
        let state = group.control(name).state();
        let state = state.read().unwrap();
        (
            state.members[&follower].session.as_ref().map(|s| s.id),
            state.applied[&follower].answers.get(&1).cloned(),
        )
    };
    for name in all {
        assert_eq!(
            opened(&group, name),
            (Some(session), Some(Response::Session(session))),
            "{name}"
        );
    }

    // A restarted replica replays both copies from its log to the same state.
    let restarted = all
        .iter()
        .find(|n| **n != leader && **n != follower)
        .unwrap();
    group.stop(restarted).await;
    let options = group.options(restarted);
    group.start(restarted, options).await;
    group.converge(&all).await;
    assert_eq!(
        opened(&group, restarted),
        (Some(session), Some(Response::Session(session)))
    );
    group.shutdown().await;
}

/// Once the version allows stamps, a burst from a follower and from the leader itself is
/// stamped (each proposer's run has a record), combined into a few entries, and each
/// proposer gets its own command's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stamped_burst_is_combined_and_answered_in_place() {
    init_logs();
    let (group, all, leader) = three_that_stamp().await;
    let follower = all.iter().find(|n| **n != leader).unwrap().to_string();
    for proposer in [follower, leader.clone()] {
        super::tests::burst_in_few_entries(&group, &leader, &proposer).await;
        let control = group.control(&proposer);
        // A batch of one is answered as a batch (the leader's expiries are proposed so).
        assert_eq!(
            control.propose_batch(vec![join_command(&proposer)]).await,
            Ok(vec![Response::Done])
        );
        let state = group.control(&leader).state();
        let record = state.read().unwrap().applied.get(&proposer).cloned();
        let record = record.unwrap_or_else(|| panic!("{proposer}'s proposals were not stamped"));
        assert_eq!(record.run, run_of(&group, &proposer));
    }
    group.shutdown().await;
}

/// The retry after openraft's `ForwardToLeader` whose entry still commits (the Raft
/// paper's figure 8), on five real nodes, with chosen kinds of message dropped in one
/// direction (`network::DROPPED`):
/// 1. the leader L appends E (an `OpenSession` of its own) and reaches only F with it:
///    two of five, not committed;
/// 2. W is elected by A and B (only W may campaign: openraft's elections are off on the
///    others), and its first entry reaches L only: L truncates E and answers its
///    proposer `ForwardToLeader`; the proposer sends E again, and keeps it (its PROPOSE
///    to W is dropped: "not sent", retried);
/// 3. W stops; F, whose log holds E, is elected by A and B and commits E; the proposer's
///    copy reaches F and commits after it.
///
/// Both copies are applied in order on every replica: the copy must be answered with E's
/// answer, the session E opened (before stamps: a second session, at the copy's index).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_forward_to_leader_whose_entry_still_commits_applies_once() {
    use super::kinds::{APPEND_ENTRIES, PROPOSE};
    use super::network::DROPPED;
    init_logs();
    let mut group = Group::new();
    let all = ["n1", "n2", "n3", "n4", "n5"];
    group
        .bootstrap_with(&all, |group, name| {
            let mut options = group.options(name);
            options.voters = Some(5);
            options.propose_timeout = Duration::from_secs(60);
            options
        })
        .await;
    let l = group.leader(&all).await;
    allow_stamps(&group, &l, &all).await;
    assert_eq!(
        group.control(&l).propose(join_command(&l)).await,
        Ok(Response::Done)
    );
    group.converge(&all).await;
    let others: Vec<&str> = all.iter().copied().filter(|n| *n != l.as_str()).collect();
    let (l, f, w, a, b) = (l.as_str(), others[0], others[1], others[2], others[3]);
    let addrs: Vec<String> = all.iter().map(|n| group.node(n).addr.clone()).collect();
    let addr = |n: &str| addrs[all.iter().position(|x| *x == n).unwrap()].clone();
    let drop = |from: &str, to: &str, kind: u16, on: bool| {
        let mut dropped = DROPPED.lock().unwrap();
        let key = (addr(from), addr(to), kind);
        if on {
            dropped.insert(key);
        } else {
            dropped.remove(&key);
        }
    };
    // Who may campaign is chosen at each step: no one but the leader yet.
    let elect =
        |group: &Group, n: &str, on: bool| group.control(n).shared.raft.runtime_config().elect(on);
    for n in all {
        elect(&group, n, false);
    }
    for to in [w, a, b] {
        drop(l, to, APPEND_ENTRIES, true);
    }
    for to in [f, a, b] {
        drop(w, to, APPEND_ENTRIES, true);
    }
    drop(l, w, PROPOSE, true);
    let last = |n: &str| last_index(&group, n);
    let k = last(l);
    eprintln!("[f8] L={l} F={f} W={w} A={a} B={b}, k={k}");

    // 1. E on L and F only.
    let proposer = group.control(l).shared.clone();
    let me = l.to_string();
    let answer = tokio::spawn(async move {
        proposer
            .propose(Proposal::One(Command::OpenSession { node: me, at_ms: 1 }))
            .await
    });
    crate::transport::tests::wait_until("E on F", || last(f) == k + 1).await;
    eprintln!("[f8] E on F");

    // 2. W is elected; its first entry reaches L alone.
    elect(&group, w, true);
    eprintln!("[f8] W may campaign");
    crate::transport::tests::wait_until("L to follow W", || {
        group.control(l).leader().is_some_and(|(name, _)| name == w)
    })
    .await;
    crate::transport::tests::wait_until("W's entry on L", || {
        let metrics = group.control(w).metrics().borrow().clone();
        metrics.replication.as_ref().is_some_and(|r| {
            r.get(&group.control(l).member_id())
                .and_then(|m| m.as_ref())
                .is_some_and(|m| m.index == k + 1)
        }) && metrics.current_leader == Some(group.control(w).member_id())
    })
    .await;

    // 3. W stops; F is elected and commits E, then the proposer's copy.
    group.stop(w).await;
    elect(&group, f, true);
    let rest: Vec<&str> = all.iter().copied().filter(|n| *n != w).collect();
    let answer = tokio::time::timeout(Duration::from_secs(60), answer)
        .await
        .expect("the proposal was answered")
        .unwrap();
    DROPPED
        .lock()
        .unwrap()
        .retain(|(from, _, _)| !addrs.contains(from));
    group.converge(&rest).await;
    let state = group.control(f).state();
    let session = state.read().unwrap().members[l].session.clone();
    assert_eq!(
        answer,
        Ok(Outcome::One(Response::Session(k + 1))),
        "E was appended at {}; the session now is {session:?}",
        k + 1
    );
    assert_eq!(session.map(|s| s.id), Some(k + 1));
    group.shutdown().await;
}

/// A forwarded stamped proposal whose answer is lost (the leader it reached stopped after
/// appending it) is asked again of the next leader, not given up as "unknown": the stamp
/// makes a second copy harmless (answered with the first answer, or applied once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stamped_proposal_whose_answer_was_lost_is_asked_again_and_applied_once() {
    use super::kinds::APPEND_ENTRIES;
    use super::network::DROPPED;
    init_logs();
    let (mut group, all, l) = three_that_stamp().await;
    let others: Vec<&str> = all.iter().copied().filter(|n| *n != l.as_str()).collect();
    let (l, f) = (l.as_str(), others[0]);
    assert_eq!(
        group.control(f).propose(join_command(f)).await,
        Ok(Response::Done)
    );
    group.converge(&all).await;
    // L appends what it is sent but can commit nothing.
    let addrs: Vec<String> = all.iter().map(|n| group.node(n).addr.clone()).collect();
    let addr = |n: &str| addrs[all.iter().position(|x| *x == n).unwrap()].clone();
    for to in &others {
        DROPPED
            .lock()
            .unwrap()
            .insert((addr(l), addr(to), APPEND_ENTRIES));
    }
    let last = |n: &str| last_index(&group, n);
    let k = last(l);
    let proposer = group.control(f).shared.clone();
    let me = f.to_string();
    let answer = tokio::spawn(async move {
        proposer
            .propose(Proposal::One(Command::OpenSession { node: me, at_ms: 1 }))
            .await
    });
    crate::transport::tests::wait_until("the proposal on L", || last(l) == k + 1).await;
    // L goes away with the proposal appended and unanswered.
    group.stop(l).await;
    DROPPED
        .lock()
        .unwrap()
        .retain(|(from, _, _)| *from != addr(l));
    let answer = tokio::time::timeout(Duration::from_secs(30), answer)
        .await
        .expect("the proposal was answered")
        .unwrap();
    group.converge(&others).await;
    let session = group.control(f).state().read().unwrap().members[f]
        .session
        .clone()
        .map(|s| s.id);
    assert!(
        matches!(answer, Ok(Outcome::One(Response::Session(id))) if Some(id) == session),
        "{answer:?}; {f}'s session is {session:?}"
    );
    group.shutdown().await;
}

/// A command that needs a cluster version above the one applied is appended by no one,
/// the leader's own proposals included: members of an older build could not read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_beyond_the_cluster_s_version_is_not_appended_even_by_the_leader() {
    init_logs();
    let mut group = Group::new();
    let all = ["n1", "n2", "n3"];
    group.bootstrap(&all, 3).await;
    let leader = group.leader(&all).await;
    let control = group.control(&leader);
    let before = control.metrics().borrow().last_log_index;
    let save = Command::SaveSlotState {
        resource: "r".into(),
        slot: 1,
        token: 1,
        data: b"x".to_vec(),
    };
    let answer = control.propose_here(save).await;
    assert!(
        matches!(&answer, Err(e) if e.to_string().contains("needs cluster version 7")),
        "{answer:?}"
    );
    assert_eq!(control.metrics().borrow().last_log_index, before);
    group.shutdown().await;
}

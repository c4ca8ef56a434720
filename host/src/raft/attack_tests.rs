//! Attacks on the control plane by a peer holding a valid node certificate: messages
//! crafted to crash a node or make it allocate without bound. Each is sent over the real
//! signed QUIC calls to a real Raft instance, and the test checks that the message is
//! refused and that the node still works afterwards (RELIABILITY.md, "Attack matrix").

use std::collections::BTreeMap;

use openraft::{CommittedLeaderId, LogId};

use super::kinds::{APPEND_ENTRIES_TO, VOTE_TO};
use super::network;
use super::tests::{Group, join_command, last_applied};
use super::types::{
    AppendEntriesResponse, Fatal, InstallSnapshotError, InstallSnapshotRequest,
    InstallSnapshotResponse, RaftError, SnapshotMeta, StoredMembership, Vote,
};
use super::*;
use crate::cluster::{Command, Proposal, Response};
use crate::transport::tests::init_logs;

/// The answer to an INSTALL_SNAPSHOT call.
type SnapshotAnswer = Result<InstallSnapshotResponse, RaftError<InstallSnapshotError>>;

/// The variant tag `Command::Batch` would have today (it was 13 before issue 13, a tag
/// `Command::Remove` has since, 14 is `Command::Identify`, 15 `Command::OpenSessionOf`, 16
/// `Command::RaiseVersion`, 17 `Command::Probe` and 18 `Command::SaveSlotState`): one past
/// the last command.
const BATCH_TAG: u8 = 19;

/// The PROPOSE payload of `depth` batches nested in one another, in the layout
/// `Command::Batch(Vec<Command>)` had before issue 13: the variant tag of `Batch` and a
/// one-element length, `depth` times, then an empty batch. Two bytes per level: 100,000
/// levels fit in one message, far more than any thread's stack can decode recursively.
/// Today no type can hold such a nesting; the bytes stay the attack.
pub(super) fn nested_batches(depth: usize) -> Vec<u8> {
    let mut bytes = [BATCH_TAG, 1].repeat(depth);
    bytes.extend_from_slice(&[BATCH_TAG, 0]);
    bytes
}

/// The same nesting under today's layout: a `Proposal::Batch` (tag 1) of one element that
/// claims to be a batch again.
pub(super) fn nested_proposal(depth: usize) -> Vec<u8> {
    let mut bytes = vec![1u8, 1];
    bytes.extend(nested_batches(depth));
    bytes
}

/// `from` sends `payload` as `kind` to `to` over the real transport.
async fn send(
    group: &Group,
    from: &str,
    to: &str,
    kind: u16,
    payload: Vec<u8>,
) -> Result<Vec<u8>, crate::rpc::RpcError> {
    let addr = group.node(to).addr.parse().unwrap();
    group.node(from).rpc.call(to, addr, kind, payload).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeply_nested_batch_is_refused_and_the_node_survives() {
    init_logs();
    let mut group = Group::new();
    group.bootstrap(&["n1", "n2"], 2).await;
    let leader = group.leader(&["n1", "n2"]).await;
    let follower = if leader == "n1" { "n2" } else { "n1" };

    for payload in [nested_batches(100_000), nested_proposal(100_000)] {
        let answer = send(&group, follower, &leader, PROPOSE, payload).await;
        let message = match answer {
            Err(crate::rpc::RpcError::Remote { message, .. }) => message,
            other => panic!("a nested batch must be refused unread, got {other:?}"),
        };
        assert!(message.contains("unreadable payload"), "{message}");
    }

    // The leader is alive and still commits.
    let before = last_applied(group.control(&leader));
    group
        .control(follower)
        .propose(join_command("n9"))
        .await
        .unwrap();
    assert!(last_applied(group.control(&leader)) > before);
    group.shutdown().await;
}

/// One snapshot chunk from `leader` (whose vote it carries) at `offset`.
fn chunk(leader: &str, offset: u64, data: Vec<u8>) -> Vec<u8> {
    let id = node_id(leader);
    let request = InstallSnapshotRequest {
        vote: Vote::new_committed(1, id),
        meta: SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(1, id), 10)),
            last_membership: StoredMembership::default(),
            snapshot_id: "attack".into(),
        },
        offset,
        data,
        done: false,
    };
    postcard::to_allocvec(&request).unwrap()
}

/// A fresh node n1 that takes snapshots of at most `max_snapshot` bytes, and n2 to send
/// them. n1 has voted for no one: a committed vote of term 1 from n2 is at least its own,
/// so it takes n2's chunks.
async fn receiver(max_snapshot: usize) -> Group {
    let mut group = Group::new();
    for name in ["n1", "n2"] {
        let mut options = group.options(name);
        options.max_snapshot = max_snapshot;
        group.start(name, options).await;
    }
    // As once the nodes it was given have answered (`forming.rs`): a new store takes no
    // chunk before that, and these tests are about what it does with them after.
    group
        .control("n1")
        .shared
        .forming
        .store(false, std::sync::atomic::Ordering::SeqCst);
    group
}

async fn send_chunk(group: &Group, offset: u64, data: Vec<u8>) -> SnapshotAnswer {
    let answer = send(
        group,
        "n2",
        "n1",
        INSTALL_SNAPSHOT,
        chunk("n2", offset, data),
    )
    .await
    .expect("the chunk is read and answered");
    postcard::from_bytes(&answer).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_chunk_at_a_huge_offset_is_refused_without_allocating() {
    init_logs();
    let group = receiver(ControlOptions::new("unused", "n1").max_snapshot).await;
    send_chunk(&group, 0, vec![7; 1000]).await.unwrap();

    // 1 TiB ahead of what was received: a receiver that seeks and writes there
    // zero-fills (or fails to allocate) a terabyte.
    let refused = send_chunk(&group, 1 << 40, vec![7; 10]).await;
    let error = refused.expect_err("a chunk past the bytes received is refused");
    assert!(error.to_string().contains("out of order"), "{error}");

    // The transfer goes on from where it really was.
    send_chunk(&group, 1000, vec![7; 1000]).await.unwrap();
    group.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_past_the_cap_is_refused() {
    init_logs();
    let group = receiver(100_000).await;
    send_chunk(&group, 0, vec![7; 60_000]).await.unwrap();
    let refused = send_chunk(&group, 60_000, vec![7; 60_000]).await;
    let error = refused.expect_err("a chunk past the cap is refused");
    assert!(
        error.to_string().contains("limit of 100000 bytes"),
        "{error}"
    );
    // A resend from the start fits again.
    send_chunk(&group, 0, vec![7; 60_000]).await.unwrap();
    group.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_proposal_over_the_size_bound_is_refused() {
    init_logs();
    let mut group = Group::new();
    group.bootstrap(&["n1", "n2"], 2).await;
    let leader = group.leader(&["n1", "n2"]).await;
    let follower = if leader == "n1" { "n2" } else { "n1" };
    let max = group.options(&leader).max_command();

    // Larger than a local proposal may be, but within the transport's frame limit: only
    // the leader's own check stands between it and the log.
    let command = Command::SaveState {
        resource: "r".into(),
        slot: 0,
        token: 1,
        data: vec![0; max + 1],
    };
    let answer = send(
        &group,
        follower,
        &leader,
        PROPOSE,
        postcard::to_allocvec(&Proposal::One(command)).unwrap(),
    )
    .await
    .expect("the leader answers");
    match postcard::from_bytes::<ProposeReply>(&answer).unwrap() {
        ProposeReply::Refused(message) => assert!(message.contains("the limit is"), "{message}"),
        other => panic!("an oversized forwarded proposal must be refused, got {other:?}"),
    }
    group.shutdown().await;
}

/// A follower's answer to AppendEntries: a storage error whose `anyerror::AnyError` has a
/// `source` nested `depth` deep (`Option<Box<AnyError>>`: three bytes a level).
pub(super) fn nested_error_answer(depth: usize) -> Vec<u8> {
    use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageIOError};
    let io = StorageIOError::<NodeId>::new(
        ErrorSubject::Store,
        ErrorVerb::Read,
        AnyError::error("MARK"),
    );
    let answer: Result<AppendEntriesResponse, Fatal> = Err(Fatal::StorageError(io.into()));
    let mut bytes = postcard::to_allocvec(&answer).unwrap();
    let at = bytes.windows(4).position(|w| w == b"MARK").unwrap() + 4;
    assert_eq!(bytes[at], 0, "the source: None");
    bytes[at] = 1;
    // Levels 1 to depth - 1: no type, an empty message, a source; the last one none;
    // then each level's empty context and no backtrace.
    let mut chain = [0u8, 0, 1].repeat(depth - 1);
    chain.extend([0, 0, 0]);
    chain.extend([0u8, 0].repeat(depth));
    bytes.splice(at + 1..at + 1, chain);
    bytes
}

#[test]
fn a_deeply_nested_error_in_a_raft_answer_is_refused() {
    let bytes = nested_error_answer(100_000);
    // On a stack the size of a tokio worker's, where the leader reads the answer.
    let decoded = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || network::read_answer::<AppendEntriesResponse, Fatal>(&bytes).map(|_| ()))
        .unwrap()
        .join()
        .unwrap();
    let error = decoded.expect_err("a nested error is refused unread");
    assert!(error.contains("nested"), "{error}");
    // A shallow one still reads.
    let shallow = nested_error_answer(3);
    assert!(matches!(
        network::read_answer::<AppendEntriesResponse, Fatal>(&shallow),
        Ok(Err(Fatal::StorageError(_)))
    ));
}

/// The forbidden refusals counted by `control`.
fn forbidden(control: &Control) -> u64 {
    control
        .refusals()
        .into_iter()
        .find(|(why, _)| *why == Refusal::Forbidden)
        .map_or(0, |(_, n)| n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_proposing_commands_about_another_node_is_refused_and_counted() {
    init_logs();
    let mut group = Group::new();
    let all = ["n1", "n2", "n3"];
    group.bootstrap(&all, 3).await;
    let leader = group.leader(&all).await;
    let others: Vec<&str> = all.iter().copied().filter(|n| *n != leader).collect();
    let (attacker, victim) = (others[0], others[1]);
    let propose = |command| group.control(attacker).propose(command);
    // Members join themselves into the replicated state, as nodes do.
    for name in all {
        let answer = group.control(name).propose(join_command(name)).await;
        assert_eq!(answer, Ok(Response::Done), "{name} joins itself");
    }
    group.converge(&all).await;
    let before = group.control(victim).state().read().unwrap().clone();

    // Each of these took effect when any member could propose anything.
    let attacks = [
        Command::Join {
            node: victim.into(),
            addr: "attacker.example:7400".into(),
            labels: BTreeMap::new(),
        },
        Command::OpenSession {
            node: victim.into(),
            at_ms: 1,
        },
        Command::Revoke {
            key: format!("sha256:{}", "00".repeat(32)),
            certificate: None,
            node: None,
            at_ms: 1,
        },
        Command::SetDraining {
            node: victim.into(),
            draining: true,
        },
    ];
    for attack in attacks.clone() {
        let answer = propose(attack.clone()).await;
        assert!(
            matches!(answer, Ok(Response::Forbidden(_))),
            "{attack:?} from {attacker}: {answer:?}"
        );
    }
    // A batch is judged command by command.
    let answers = group
        .control(attacker)
        .propose_batch(vec![join_command(attacker), attacks[0].clone()])
        .await
        .unwrap();
    assert_eq!(answers[0], Response::Done);
    assert!(matches!(answers[1], Response::Forbidden(_)), "{answers:?}");

    // Nothing changed anywhere; the leader counted each refusal, the replicas none.
    group.converge(&all).await;
    for name in all {
        assert_eq!(
            *group.control(name).state().read().unwrap(),
            before,
            "{name}'s state"
        );
    }
    assert_eq!(forbidden(group.control(&leader)), 5);
    assert_eq!(forbidden(group.control(victim)), 0);

    // A proposal that names its proposer is refused unread by the state machine.
    let marked = Proposal::OneFrom {
        by: victim.into(),
        command: attacks[2].clone(),
    };
    let answer = send(
        &group,
        attacker,
        &leader,
        PROPOSE,
        postcard::to_allocvec(&marked).unwrap(),
    )
    .await
    .expect("the leader answers");
    assert!(
        matches!(
            postcard::from_bytes::<ProposeReply>(&answer),
            Ok(ProposeReply::Refused(_))
        ),
        "{answer:?}"
    );
    assert!(
        group
            .control(&leader)
            .state()
            .read()
            .unwrap()
            .revoked
            .is_empty()
    );
    group.shutdown().await;
}

/// An AppendEntries (or vote request) of `sender` as its member (its store and member
/// id), with a committed vote of `term`.
fn append(group: &Group, sender: &str, term: u64) -> Vec<u8> {
    let request = super::types::AppendEntriesRequest {
        vote: Vote::new_committed(term, group.control(sender).member_id()),
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    };
    super::tests::from_store_of(group, sender, request)
}

fn vote_request(group: &Group, sender: &str, term: u64) -> Vec<u8> {
    let request = super::types::VoteRequest {
        vote: Vote::new(term, group.control(sender).member_id()),
        last_log_id: None,
    };
    super::tests::from_store_of(group, sender, request)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_messages_from_a_stranger_and_a_learner_s_forged_term_are_refused() {
    init_logs();
    let mut group = Group::new();
    group.bootstrap(&["n1", "n2"], 2).await;
    let leader = group.leader(&["n1", "n2"]).await;
    group.raise(&leader).await;
    let follower = if leader == "n1" { "n2" } else { "n1" };
    // n3 joins but stays a learner (the group wants 2 voters); n4 never joins. A learner
    // is a member: its vote requests reach Raft (`healing_tests.rs` says why), but not an
    // append of a higher term (only a forged vote could make one); n4's messages do not.
    for name in ["n3", "n4"] {
        let options = group.options(name);
        group.start(name, options).await;
    }
    group
        .control("n3")
        .join(&group.via(&[&leader]))
        .await
        .unwrap();
    let term = group.control(follower).term();

    let refused = [
        (
            "n4",
            APPEND_ENTRIES_TO,
            append(&group, "n4", term + 10),
            "not a member",
        ),
        (
            "n4",
            VOTE_TO,
            vote_request(&group, "n4", term + 10),
            "not a member",
        ),
        (
            "n3",
            APPEND_ENTRIES_TO,
            append(&group, "n3", term + 10),
            "not a voter here",
        ),
    ];
    for (sender, kind, payload, why) in refused {
        {
            let answer = send(&group, sender, follower, kind, payload).await;
            match answer {
                Err(crate::rpc::RpcError::Remote { message, .. }) => {
                    assert!(message.contains(why), "{message}")
                }
                other => panic!("kind {kind} from {sender} must be refused, got {other:?}"),
            }
        }
    }
    // The follower's term did not move, and it still follows the same leader.
    assert_eq!(group.control(follower).term(), term);
    let not_a_member = group
        .control(follower)
        .refusals()
        .into_iter()
        .find(|(why, _)| *why == Refusal::NotAMember)
        .unwrap()
        .1;
    assert_eq!(not_a_member, 3);
    assert_eq!(group.leader(&["n1", "n2"]).await, leader);
    group.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_naming_another_node_is_refused() {
    init_logs();
    let mut group = Group::new();
    group.bootstrap(&["n1", "n2"], 2).await;
    let leader = group.leader(&["n1", "n2"]).await;
    let follower = if leader == "n1" { "n2" } else { "n1" };
    let members = group.control(&leader).members();

    // A member asks, to the leader and to a follower, for a node it names to join at an
    // address it chose (the follower used to forward it): neither adds it.
    let stranger = Peer {
        name: "n9".into(),
        addr: "127.0.0.1:9".into(),
    };
    for to in [leader.as_str(), follower] {
        let from = if to == "n1" { "n2" } else { "n1" };
        let answer = send(
            &group,
            from,
            to,
            JOIN,
            postcard::to_allocvec(&stranger).unwrap(),
        )
        .await
        .expect("answered");
        match postcard::from_bytes::<JoinReply>(&answer) {
            Ok(JoinReply::Refused(why)) => assert!(why.contains("only a node itself"), "{why}"),
            other => panic!("a join for another node must be refused, got {other:?}"),
        }
    }
    assert_eq!(group.control(&leader).members(), members);
    group.shutdown().await;
}

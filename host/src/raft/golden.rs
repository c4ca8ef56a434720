//! The control plane's samples for the golden-byte tests (`crate::golden`): what
//! `raft.redb` holds (the `store` domain) and the Raft and control-plane messages (part of
//! the `wire` domain). Here because the stored shapes ([`Image`], [`Stored`]) are this
//! module's own.

use std::collections::{BTreeMap, BTreeSet};

use openraft::{CommittedLeaderId, EntryPayload, Membership};

use super::kinds::{Addressed, JoinReply, ProposeReply};
use super::replace::ReplaceReply;
use super::state_machine::{Image, Stored};
use super::types::{
    AppendEntriesRequest, AppendEntriesResponse, Entry, Fatal, InstallSnapshotRequest,
    InstallSnapshotResponse, LogId, Peer, RaftError, SnapshotMeta, StoredMembership, Vote,
    VoteRequest, VoteResponse, node_id,
};
use crate::golden::Sample;
use crate::golden::samples::{cluster, commands, outcomes, proposals};

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, node_id("n1")), index)
}

fn membership() -> Membership<u64, Peer> {
    let voters = BTreeSet::from([node_id("n1"), node_id("n2")]);
    let nodes = BTreeMap::from([
        (node_id("n1"), Peer::new("n1", "10.0.0.1:7400")),
        (node_id("n2"), Peer::new("n2", "10.0.0.2:7400")),
        (node_id("n3"), Peer::new("n3", "10.0.0.3:7400")),
    ]);
    Membership::new(vec![voters], nodes)
}

fn snapshot_meta() -> SnapshotMeta {
    SnapshotMeta {
        last_log_id: Some(log_id(3, 19)),
        last_membership: StoredMembership::new(Some(log_id(1, 1)), membership()),
        snapshot_id: "3-19-7".into(),
    }
}

fn entry(term: u64, index: u64, payload: EntryPayload<super::TypeConfig>) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload,
    }
}

/// Every value `raft.redb` holds: a log entry of every command kind and of every shape,
/// the vote, log ids, and a snapshot.
pub(crate) fn golden_store_samples() -> Vec<Sample> {
    let mut samples = Vec::new();
    for (i, command) in commands().into_iter().enumerate() {
        let name = format!("{:?}", command);
        let kind = name
            .split([' ', '{', '('])
            .next()
            .unwrap_or("command")
            .to_lowercase();
        let index = i as u64 + 1;
        samples.push(Sample::of(
            format!("entry-{index:02}-{kind}"),
            &entry(
                3,
                index,
                EntryPayload::Normal(crate::cluster::Proposal::One(command)),
            ),
        ));
    }
    for (name, proposal) in proposals() {
        samples.push(Sample::of(
            format!("entry-proposal-{name}"),
            &entry(3, 20, EntryPayload::Normal(proposal)),
        ));
    }
    samples.push(Sample::of("entry-blank", &entry(2, 1, EntryPayload::Blank)));
    samples.push(Sample::of(
        "entry-membership",
        &entry(1, 1, EntryPayload::Membership(membership())),
    ));
    samples.push(Sample::of("meta-vote", &Vote::new(3, node_id("n1"))));
    samples.push(Sample::of(
        "meta-vote-committed",
        &Vote::new_committed(3, node_id("n1")),
    ));
    samples.push(Sample::of("meta-committed", &Some(log_id(3, 19))));
    samples.push(Sample::of("meta-purged", &log_id(3, 12)));
    let image = Image {
        applied: Some(log_id(3, 19)),
        membership: StoredMembership::new(Some(log_id(1, 1)), membership()),
        cluster: cluster(),
    };
    let data = postcard::to_allocvec(&image).unwrap();
    samples.push(Sample::of("snapshot-image", &image));
    // As written while there are no stamped answers: format 5's bytes
    // (`format_tests.rs` reads format 5's fixture so).
    let mut before =
        crate::golden::samples::cluster_after(crate::golden::samples::BEFORE_SLOT_STATE);
    // Nor members' stores: format 5 never records them (the samples' raise does now).
    before.stores.clear();
    samples.push(Sample::raw(
        "snapshot-image-without-stamps",
        super::state_machine::encode_image(&image.applied, &image.membership, &before).unwrap(),
        |bytes| {
            let image = Image::decode(bytes).map_err(|e| e.to_string())?;
            super::state_machine::encode_image(&image.applied, &image.membership, &image.cluster)
                .map_err(|e| e.to_string())
        },
    ));
    samples.push(Sample::of(
        "snapshot-stored",
        &Stored {
            meta: snapshot_meta(),
            data,
        },
    ));
    samples
}

/// The control plane's messages: Raft's three (plain and addressed), PROPOSE, JOIN,
/// STORE_INFO and REPLACE, each request and answer (an addressed kind's answer is its plain kind's).
pub(crate) fn golden_wire_samples() -> Vec<Sample> {
    let vote = Vote::new_committed(3, node_id("n1"));
    let mut samples = vec![
        Sample::of(
            "append-entries-1-request",
            &AppendEntriesRequest {
                vote,
                prev_log_id: Some(log_id(3, 18)),
                entries: vec![entry(3, 19, EntryPayload::Blank)],
                leader_commit: Some(log_id(3, 18)),
            },
        ),
        Sample::of(
            "append-entries-1-answer-success",
            &Ok::<_, Fatal>(AppendEntriesResponse::Success),
        ),
        Sample::of(
            "append-entries-1-answer-partial",
            &Ok::<_, Fatal>(AppendEntriesResponse::PartialSuccess(Some(log_id(3, 19)))),
        ),
        Sample::of(
            "append-entries-1-answer-conflict",
            &Ok::<_, Fatal>(AppendEntriesResponse::Conflict),
        ),
        Sample::of(
            "append-entries-1-answer-higher-vote",
            &Ok::<_, Fatal>(AppendEntriesResponse::HigherVote(Vote::new(
                4,
                node_id("n2"),
            ))),
        ),
        Sample::of(
            "append-entries-1-answer-fatal",
            &Err::<AppendEntriesResponse, _>(Fatal::Stopped),
        ),
        Sample::of(
            "vote-2-request",
            &VoteRequest {
                vote: Vote::new(4, node_id("n2")),
                last_log_id: Some(log_id(3, 19)),
            },
        ),
        Sample::of(
            "vote-2-answer",
            &Ok::<_, Fatal>(VoteResponse {
                vote: Vote::new(4, node_id("n2")),
                vote_granted: true,
                last_log_id: Some(log_id(3, 19)),
            }),
        ),
        Sample::of(
            "install-snapshot-3-request",
            &InstallSnapshotRequest {
                vote,
                meta: snapshot_meta(),
                offset: 0,
                data: vec![1, 2, 3, 4],
                done: true,
            },
        ),
        Sample::of(
            "install-snapshot-3-answer",
            &Ok::<_, RaftError<openraft::error::InstallSnapshotError>>(InstallSnapshotResponse {
                vote,
            }),
        ),
        Sample::of(
            "append-entries-to-4-request",
            &Addressed {
                to: Some(crate::cluster::StoreId::from_bytes([0x5b; 16])),
                from: crate::cluster::StoreId::from_bytes([0x1a; 16]),
                request: AppendEntriesRequest {
                    vote,
                    prev_log_id: Some(log_id(3, 18)),
                    entries: vec![entry(3, 19, EntryPayload::Blank)],
                    leader_commit: Some(log_id(3, 18)),
                },
            },
        ),
        Sample::of(
            "vote-to-5-request",
            &Addressed {
                to: None,
                from: crate::cluster::StoreId::from_bytes([0x2a; 16]),
                request: VoteRequest {
                    vote: Vote::new(4, node_id("n2")),
                    last_log_id: Some(log_id(3, 19)),
                },
            },
        ),
        Sample::of(
            "install-snapshot-to-6-request",
            &Addressed {
                to: Some(crate::cluster::StoreId::from_bytes([0x5b; 16])),
                from: crate::cluster::StoreId::from_bytes([0x1a; 16]),
                request: InstallSnapshotRequest {
                    vote,
                    meta: snapshot_meta(),
                    offset: 0,
                    data: vec![1, 2, 3, 4],
                    done: true,
                },
            },
        ),
        Sample::of("join-11-request", &Peer::new("n3", "10.0.0.3:7400")),
        // From this build on, the joiner's store and member id follow (a tail 0.2.0 does
        // not read).
        Sample::of(
            "join-11-request-with-store",
            &(
                Peer::new("n3", "10.0.0.3:7400"),
                (
                    crate::cluster::StoreId::from_bytes([0x5d; 16]),
                    0x0123_4567_89ab_cdef_u64,
                ),
            ),
        ),
        Sample::of("join-11-answer-joined", &JoinReply::Joined { voter: false }),
        // From this build on, the id the joiner was seated under follows.
        Sample::of(
            "join-11-answer-joined-with-id",
            &(
                JoinReply::Joined { voter: false },
                0x0123_4567_89ab_cdef_u64,
            ),
        ),
        Sample::of(
            "join-11-answer-not-leader",
            &JoinReply::NotLeader {
                leader: Some(Peer::new("n1", "10.0.0.1:7400")),
            },
        ),
        Sample::of(
            "join-11-answer-refused",
            &JoinReply::Refused("n3 may only join as itself".into()),
        ),
        Sample::of(
            "join-11-answer-removed",
            &JoinReply::Removed {
                why: "n3's member was removed with this data dir".into(),
                leader: Some(Peer::new("n1", "10.0.0.1:7400")),
            },
        ),
    ];
    samples.push(Sample::of(
        "replace-14-request",
        &crate::cluster::StoreId::from_bytes([0x5c; 16]),
    ));
    for (name, answer) in [
        ("removed", ReplaceReply::Removed),
        (
            "not-leader",
            ReplaceReply::NotLeader {
                leader: Some(Peer::new("n1", "10.0.0.1:7400")),
            },
        ),
        (
            "wait",
            ReplaceReply::Wait("n2's old session 21 is live".into()),
        ),
        (
            "refused",
            ReplaceReply::Refused("that member did not lose its disk".into()),
        ),
    ] {
        samples.push(Sample::of(format!("replace-14-answer-{name}"), &answer));
    }
    samples.push(Sample::of("store-info-12-request", &()));
    samples.push(Sample::of(
        "store-info-12-answer",
        &super::forming::StoreInfo {
            formed: true,
            raft_members: vec!["n1".into(), "n2".into(), "n3".into()],
            members: vec!["n1".into(), "n2".into()],
            cluster: Some(crate::cluster::ClusterId::from_bytes([0x5a; 16])),
            yours: None,
            yours_removed: false,
            peers: Vec::new(),
        },
    ));
    // From this build on, what the cluster records of the asker's name follows.
    let with_yours = super::forming::StoreInfo {
        formed: true,
        raft_members: vec!["n1".into(), "n2".into(), "n3".into()],
        members: vec!["n1".into(), "n2".into(), "n3".into()],
        cluster: Some(crate::cluster::ClusterId::from_bytes([0x5a; 16])),
        yours: Some(crate::cluster::StoreId::from_bytes([0x5e; 16])),
        yours_removed: true,
        peers: Vec::new(),
    };
    samples.push(Sample::of(
        "store-info-12-answer-with-yours",
        &(
            with_yours.clone(),
            super::forming::AboutYou {
                recorded: with_yours.yours,
                removed: with_yours.yours_removed,
                peers: vec!["n1".into(), "n2".into(), "n3".into()],
            },
        ),
    ));
    for (name, proposal) in proposals() {
        samples.push(Sample::of(format!("propose-10-request-{name}"), &proposal));
    }
    for (name, outcome) in outcomes() {
        samples.push(Sample::of(
            format!("propose-10-answer-applied-{name}"),
            &ProposeReply::Applied {
                response: outcome,
                index: 19,
            },
        ));
    }
    samples.push(Sample::of(
        "propose-10-answer-not-leader",
        &ProposeReply::NotLeader { leader: None },
    ));
    samples.push(Sample::of(
        "propose-10-answer-refused",
        &ProposeReply::Refused("n9 is not a member".into()),
    ));
    samples.push(Sample::of(
        "propose-10-answer-failed",
        &ProposeReply::Failed("raft stopped".into()),
    ));
    samples.push(Sample::of(
        "propose-10-answer-not-yet",
        &ProposeReply::NotYet("a stamped proposal needs cluster version 7".into()),
    ));
    samples
}

//! The sample values of the golden-byte tests: one of every command kind, a cluster state
//! reached by applying them, and the messages of the wire and admin domains.
//!
//! Values are fixed (no clock, no randomness): a sample must encode to the same bytes on
//! every run. Ed25519 signatures are deterministic, so even a sealed envelope is.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use super::Sample;
use crate::api::{
    AdminRequest, AdminResponse, Batch, FailureView, RaftView, Status, StatusPage, StatusQuery,
    WatchAnswer, listing,
};
use crate::cluster::{
    Advert, Cluster, ClusterId, Command, Handover, Outcome, Pool, Process, Proposal, Response,
    StoreId,
};
use crate::envelope::{Envelope, Sealer};
use crate::node::{Ask, Carried, Heard, LEADER_HEARD, RENEW, RENEWAL_ROUND, Renew, Renewed};
use crate::pki::{Algo, Signer};

/// The wall clock the samples carry: 2026-01-01T00:00:00Z in ms.
pub(crate) const T0: u64 = 1_767_225_600_000;

fn digest(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

fn advert(plugin: &str, version: &str, tickets: u32, c: char) -> Advert {
    Advert {
        plugin: plugin.into(),
        version: version.parse().unwrap(),
        digest: digest(c),
        tickets,
        require: BTreeMap::from([("zone".to_string(), "a".to_string())]),
        footprint: Pool::default(),
    }
}

/// One command of every kind, in an order that applies cleanly from an empty cluster at
/// log indexes 1, 2, …: the grants get the tokens 9 (`counter/0`) and 10 (`pair/1`).
pub(crate) fn commands() -> Vec<Command> {
    vec![
        // 1
        Command::Join {
            node: "n1".into(),
            addr: "10.0.0.1:7400".into(),
            labels: BTreeMap::from([("zone".to_string(), "a".to_string())]),
        },
        // 2
        Command::Join {
            node: "n2".into(),
            addr: "10.0.0.2:7400".into(),
            labels: BTreeMap::from([("zone".to_string(), "a".to_string())]),
        },
        // 3
        Command::OpenSession {
            node: "n1".into(),
            at_ms: T0,
        },
        // 4
        Command::OpenSession {
            node: "n2".into(),
            at_ms: T0 + 1,
        },
        // 5
        Command::Advertise {
            node: "n1".into(),
            plugins: BTreeMap::from([
                ("counter".to_string(), advert("counter", "1.2.3", 1, 'c')),
                ("pair".to_string(), advert("pair", "0.1.0-rc.1", 2, 'p')),
            ]),
        },
        // 6
        Command::AdvertiseChanges {
            node: "n2".into(),
            set: BTreeMap::from([
                ("counter".to_string(), advert("counter", "1.2.3", 1, 'c')),
                ("pair".to_string(), advert("pair", "0.1.0-rc.1", 2, 'p')),
            ]),
            remove: vec!["gone".into()],
        },
        // 7
        Command::SetDraining {
            node: "n2".into(),
            draining: true,
        },
        // 8
        Command::SetDraining {
            node: "n2".into(),
            draining: false,
        },
        // 9: token 9
        Command::Assign {
            resource: "counter".into(),
            slot: 0,
            node: "n1".into(),
            session: 3,
            version: "1.2.3".parse().unwrap(),
            digest: digest('c'),
            at_ms: T0 + 9,
        },
        // 10: token 10
        Command::Assign {
            resource: "pair".into(),
            slot: 1,
            node: "n2".into(),
            session: 4,
            version: "0.1.0-rc.1".parse().unwrap(),
            digest: digest('p'),
            at_ms: T0 + 10,
        },
        // 11
        Command::SaveState {
            resource: "counter".into(),
            slot: 0,
            token: 9,
            data: 18u64.to_le_bytes().to_vec(),
        },
        // 12: counter/0 gets token 12
        Command::Regrant {
            resource: "counter".into(),
            slot: 0,
            token: 9,
            at_ms: T0 + 12,
        },
        // 13
        Command::BeginHandover {
            resource: "pair".into(),
            slot: 1,
            token: 10,
            reason: Handover::Moved,
            to: Some("n1".into()),
            at_ms: T0 + 13,
        },
        // 14
        Command::Release {
            resource: "pair".into(),
            slot: 1,
            token: 10,
            at_ms: T0 + 14,
        },
        // 15
        Command::GiveUp {
            resource: "counter".into(),
            slot: 0,
            token: 12,
            until_ms: T0 + 60_000,
            at_ms: T0 + 15,
        },
        // 16
        Command::Revoke {
            key: digest('9'),
            certificate: Some(digest('8')),
            node: Some("n4".into()),
            at_ms: T0 + 16,
        },
        // 17
        Command::EndSession {
            node: "n2".into(),
            session: 4,
            expired_in: Some(3),
            at_ms: T0 + 17,
        },
        // 18
        Command::Remove {
            node: "n2".into(),
            at_ms: T0 + 18,
        },
        // 19
        Command::EndSession {
            node: "n1".into(),
            session: 3,
            expired_in: None,
            at_ms: T0 + 19,
        },
        // 20
        Command::Identify {
            cluster: CLUSTER_ID,
        },
        // 21: n1's session 3 ended at 19, so this opens session 21.
        Command::OpenSessionOf {
            node: "n1".into(),
            at_ms: T0 + 21,
            process: Process {
                store: StoreId::from_bytes([0x5b; 16]),
                incarnation: 1_767_225_600_000_000,
            },
            ended: Some(3),
        },
        // 22
        Command::RaiseVersion { to: 8 },
        // 23: applied (the version is 8 now), so its answer is `done`.
        Command::Probe { node: "n1".into() },
        // 24: pair/1 (vacated when n2 was removed) to n1's session 21: token 24
        Command::Assign {
            resource: "pair".into(),
            slot: 1,
            node: "n1".into(),
            session: 21,
            version: "0.1.0-rc.1".parse().unwrap(),
            digest: digest('p'),
            at_ms: T0 + 24,
        },
        // 25
        Command::SaveSlotState {
            resource: "pair".into(),
            slot: 1,
            token: 24,
            data: 7u64.to_le_bytes().to_vec(),
        },
        // 26: n1's process opens a new session after its session 21 ended: at version 8
        // its store is recorded (`Cluster::stores`).
        Command::OpenSessionOf {
            node: "n1".into(),
            at_ms: T0 + 26,
            process: Process {
                store: StoreId::from_bytes([0x5b; 16]),
                incarnation: 1_767_225_600_000_000,
            },
            ended: Some(21),
        },
        // 27: n1 installs another build of `pair` at version 8: recorded as installed
        // at 27 (`Cluster::installed`).
        Command::AdvertiseChanges {
            node: "n1".into(),
            set: BTreeMap::from([("pair".to_string(), advert("pair", "0.1.0-rc.1", 2, 'q'))]),
            remove: Vec::new(),
        },
    ]
}

/// How many of [`commands`] the admin samples' state and the image without stamps were
/// recorded from (admin 8, store 5): the commands before the per-slot state's.
pub(crate) const BEFORE_SLOT_STATE: usize = 23;

/// The cluster id of the samples.
const CLUSTER_ID: ClusterId = ClusterId::from_bytes([
    0x5a, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xf0,
]);

/// The cluster after [`commands`] (each applied alone at its index, in term 3), and the
/// answers, checked so that the samples stay states `apply` reaches; then the stamped
/// proposal of [`proposals`], so that the state holds stamped answers.
pub(crate) fn cluster() -> Cluster {
    let mut cluster = cluster_after(commands().len());
    let index = commands().len() as u64 + 1;
    let (_, stamped) = proposals().remove(4);
    let outcome = cluster.apply_proposal(index, 3, stamped);
    assert!(
        !outcome.responses().any(|r| matches!(
            r,
            Response::Refused(_) | Response::Stale | Response::Forbidden(_)
        )),
        "the stamped sample was not applied: {outcome:?}"
    );
    // n2 was removed before the cluster recorded stores; as if it had been after.
    cluster
        .retired
        .insert("n2".into(), [StoreId::from_bytes([0x5d; 16])].into());
    cluster
}

/// The run of the samples' stamped proposals.
const RUN: Process = Process {
    store: StoreId::from_bytes([0x5b; 16]),
    incarnation: 1_767_225_600_000_000,
};

/// The cluster after the first `n` of [`commands`]: the samples of an older format, which
/// had fewer kinds (`raft/format_tests.rs`).
pub(crate) fn cluster_after(n: usize) -> Cluster {
    let mut cluster = Cluster::default();
    for (i, command) in commands().into_iter().take(n).enumerate() {
        let index = i as u64 + 1;
        let response = cluster.apply(index, 3, command.clone());
        assert!(
            !matches!(
                response,
                Response::Refused(_) | Response::Stale | Response::Forbidden(_)
            ),
            "sample command {index} ({command:?}) was not applied: {response:?}"
        );
    }
    cluster
}

/// Every answer a command can get.
pub(crate) fn responses() -> Vec<Response> {
    vec![
        Response::Done,
        Response::Session(3),
        Response::Granted { token: 9, term: 3 },
        Response::Stale,
        Response::Refused("the slot is vacant".into()),
        Response::Forbidden("n2 may not speak for n1".into()),
    ]
}

/// Proposals of every shape.
pub(crate) fn proposals() -> Vec<(&'static str, Proposal)> {
    let one = commands()[0].clone();
    let two = vec![commands()[2].clone(), commands()[10].clone()];
    vec![
        ("one", Proposal::One(one.clone())),
        ("batch", Proposal::Batch(two.clone())),
        (
            "one-from",
            Proposal::OneFrom {
                by: "n2".into(),
                command: one,
            },
        ),
        (
            "batch-from",
            Proposal::BatchFrom {
                by: "n2".into(),
                commands: two.clone(),
            },
        ),
        (
            "stamped",
            Proposal::Stamped {
                member: "n1".into(),
                run: RUN,
                low: 7,
                commands: vec![
                    (
                        7,
                        Command::SetDraining {
                            node: "n1".into(),
                            draining: true,
                        },
                    ),
                    (
                        9,
                        Command::Join {
                            node: "n3".into(),
                            addr: "10.0.0.3:7400".into(),
                            labels: BTreeMap::new(),
                        },
                    ),
                ],
            },
        ),
        (
            "stamped-from",
            Proposal::StampedFrom {
                by: "n2".into(),
                run: RUN,
                low: 300,
                commands: vec![(301, two[0].clone())],
            },
        ),
    ]
}

/// Outcomes of both shapes.
pub(crate) fn outcomes() -> Vec<(&'static str, Outcome)> {
    vec![
        ("one", Outcome::One(Response::Granted { token: 9, term: 3 })),
        ("batch", Outcome::Batch(responses())),
    ]
}

/// A signer with a fixed Ed25519 key (PKCS#8 v1 of the seed 1, 2, …, 32).
fn signer() -> Signer {
    let mut pkcs8 = hex::decode("302e020100300506032b657004220420").unwrap();
    pkcs8.extend(1..=32u8);
    Signer::from_pkcs8(Algo::Ed25519, &pkcs8).expect("a fixed Ed25519 key")
}

/// The node-to-node samples outside Raft: the sealed envelope and the node's own kinds.
pub(super) fn wire() -> Vec<Sample> {
    let sealer =
        Sealer::new("n1".into(), 1_767_225_600_123).in_cluster(Arc::new(CLUSTER_ID.into()));
    let sent = UNIX_EPOCH + Duration::from_millis(T0 + 5);
    let payload = postcard::to_allocvec(&Renew { session: 3 }).unwrap();
    let sealed = sealer.seal(&signer(), "n2", RENEW, &payload, sent);
    assert_eq!(RENEW, 20);
    assert_eq!(LEADER_HEARD, 21);
    assert_eq!(RENEWAL_ROUND, 22);
    vec![
        Sample::raw("envelope-sealed", sealed, |bytes| {
            crate::envelope::reencode_sealed(bytes).map_err(|e| e.to_string())
        }),
        Sample::of(
            "envelope-body",
            &Envelope {
                sender: "n1".into(),
                recipient: "n2".into(),
                cluster: Some(CLUSTER_ID),
                incarnation: 7,
                seq: 42,
                sent_at_ms: T0,
                kind: RENEW,
                payload: vec![1, 2, 3],
            },
        ),
        Sample::of("renew-20-request", &Renew { session: 3 }),
        Sample::of("renew-20-answer-ok", &Renewed::Ok),
        Sample::of("renew-20-answer-unknown", &Renewed::UnknownSession),
        Sample::of("leader-heard-21-request", &Ask { term: 5 }),
        Sample::of(
            "leader-heard-21-answer",
            &Heard {
                elapsed_us: Some(1_500_000),
            },
        ),
        Sample::of("leader-heard-21-answer-none", &Heard { elapsed_us: None }),
        // From version 7: the sessions asked about follow the question, and one answer
        // per session follows the answer (`node/handoff.rs`).
        Sample::of(
            "leader-heard-21-request-sessions",
            &(Ask { term: 5 }, vec![3u64, 4]),
        ),
        Sample::of(
            "leader-heard-21-answer-sessions",
            &(
                Heard {
                    elapsed_us: Some(1_500_000),
                },
                vec![Some(1_700_000u64), None],
            ),
        ),
        Sample::of(
            "renewal-round-22-request",
            &Carried {
                term: 5,
                renewals: vec![(3, 1_200), (4, 350)],
            },
        ),
        Sample::of("renewal-round-22-answer", &()),
        Sample::of(
            "replica-hashes-13-answer",
            &vec![
                crate::raft::Hashed {
                    index: 16,
                    sha256: [0x16; 32],
                },
                crate::raft::Hashed {
                    index: 32,
                    sha256: [0x32; 32],
                },
            ],
        ),
    ]
}

/// What operators and nodes say to each other: every request and every answer.
pub(super) fn admin() -> Vec<Sample> {
    let (requests, responses) = admin_values();
    let mut samples: Vec<Sample> = requests
        .iter()
        .map(|(name, r)| Sample::of(format!("request-{name}"), r))
        .collect();
    samples.extend(
        responses
            .iter()
            .map(|(name, r)| Sample::of(format!("answer-{name}"), r)),
    );
    samples
}

/// Every admin request and answer, named.
type AdminValues = (
    Vec<(&'static str, AdminRequest)>,
    Vec<(&'static str, AdminResponse)>,
);

fn admin_values() -> AdminValues {
    // The state the admin samples were recorded from (admin 8): the commands' state
    // before the stamped sample, at version 7 (the samples raised it to 7 then). The
    // status view shows neither the stamped answers nor anything else new.
    let mut cluster = cluster_after(BEFORE_SLOT_STATE);
    cluster.version = 7;
    let raft = RaftView {
        node: "n1".into(),
        leader: Some("n1".into()),
        term: 3,
        voters: vec!["n1".into()],
        learners: vec![],
    };
    let pending = vec![("pair".to_string(), 0, "no eligible node".to_string())];
    let mut status = Status::build(&cluster, raft, pending.clone(), T0 + 60_000);
    // A plugin row that failed and is skipped, so that both fields carry a value.
    let row = status
        .nodes
        .iter_mut()
        .flat_map(|n| n.plugins.iter_mut())
        .next()
        .expect("a node of the sample advertises a plugin");
    row.cooldown_until_ms = Some(T0 + 90_000);
    row.last_failure = Some(FailureView {
        outcome: "trapped".into(),
        error: "wasm trap: wasm `unreachable` instruction executed".into(),
        at_ms: T0 + 30_000,
        slot: 0,
        token: 12,
        restart_ms: None,
        failures: 3,
        max_restarts: 2,
    });
    status.diverged = vec![crate::api::DivergedView {
        node: "n3".into(),
        index: 48,
    }];
    let pending: BTreeMap<(String, u32), String> = pending
        .into_iter()
        .map(|(r, s, why)| ((r, s), why))
        .collect();
    let requests = vec![
        ("status", AdminRequest::Status),
        (
            "move",
            AdminRequest::Move {
                resource: "pair".into(),
                slot: Some(1),
                to: "n2".into(),
            },
        ),
        ("drain", AdminRequest::Drain { node: "n2".into() }),
        ("undrain", AdminRequest::Undrain { node: "n2".into() }),
        (
            "release",
            AdminRequest::Release {
                resource: "counter".into(),
                slot: None,
            },
        ),
        (
            "revoke",
            AdminRequest::Revoke {
                key: digest('9'),
                certificate: Some(digest('8')),
                node: Some("n4".into()),
                force: false,
            },
        ),
        ("remove", AdminRequest::Remove { node: "n2".into() }),
        (
            "status-page",
            AdminRequest::StatusPage(StatusQuery {
                resource: Some("pair".into()),
                node: Some("n1".into()),
                snapshot: Some(2),
                after: Some("counter".into()),
            }),
        ),
        (
            "watch",
            AdminRequest::Watch {
                resource: Some("pair".into()),
                after: Some(12),
            },
        ),
        (
            "snapshot",
            AdminRequest::Snapshot {
                id: Some(3),
                offset: 262_144,
            },
        ),
        ("members", AdminRequest::Members),
        ("promote", AdminRequest::Promote { node: "n4".into() }),
    ];
    let responses = vec![
        ("status", AdminResponse::Status(status.clone())),
        ("done", AdminResponse::Done("n2 drains".into())),
        (
            "leader",
            AdminResponse::Leader {
                node: "n1".into(),
                addr: "10.0.0.1:7400".into(),
            },
        ),
        (
            "status-page",
            AdminResponse::StatusPage(StatusPage {
                snapshot: 2,
                status,
                next: Some("pair".into()),
            }),
        ),
        (
            "watch",
            AdminResponse::Watch(WatchAnswer {
                node: "n1".into(),
                batch: Batch::Listing,
                upto: 19,
                events: listing(&cluster, None, &pending).unwrap(),
                members: vec![("n1".into(), "10.0.0.1:7400".into())],
            }),
        ),
        (
            "snapshot",
            AdminResponse::Snapshot(crate::api::SnapshotPage {
                id: 3,
                header: "{\"index\":12}".into(),
                offset: 4,
                total: 9,
                bytes: vec![1, 2, 3],
            }),
        ),
        (
            "members",
            AdminResponse::Members(crate::api::MemberList {
                leader: "n1".into(),
                term: 4,
                last_index: 120,
                target: 3,
                members: vec![crate::api::MemberRow {
                    name: "n5".into(),
                    id: 0x0123_4567_89ab_cdef,
                    addr: "10.0.0.5:7400".into(),
                    voter: false,
                    matched: Some(90),
                    unreachable_ms: Some(200_500),
                    note: Some("voters shrank to 3".into()),
                }],
            }),
        ),
    ];
    (requests, responses)
}

/// Which kind `command` is: the match has no wildcard, so a new kind of command does not
/// compile until it is listed here, and [`every_kind_has_a_sample`] then asks for its sample.
fn command_kind(command: &Command) -> &'static str {
    match command {
        Command::Join { .. } => "join",
        Command::Advertise { .. } => "advertise",
        Command::AdvertiseChanges { .. } => "advertise-changes",
        Command::OpenSession { .. } => "open-session",
        Command::EndSession { .. } => "end-session",
        Command::Assign { .. } => "assign",
        Command::Regrant { .. } => "regrant",
        Command::BeginHandover { .. } => "begin-handover",
        Command::Release { .. } => "release",
        Command::GiveUp { .. } => "give-up",
        Command::SaveState { .. } => "save-state",
        Command::SetDraining { .. } => "set-draining",
        Command::Revoke { .. } => "revoke",
        Command::Remove { .. } => "remove",
        Command::Identify { .. } => "identify",
        Command::OpenSessionOf { .. } => "open-session-of",
        Command::RaiseVersion { .. } => "raise-version",
        Command::Probe { .. } => "probe",
        Command::SaveSlotState { .. } => "save-slot-state",
    }
}

/// As [`command_kind`], for the answers.
fn response_kind(response: &Response) -> &'static str {
    match response {
        Response::Done => "done",
        Response::Session(_) => "session",
        Response::Granted { .. } => "granted",
        Response::Stale => "stale",
        Response::Refused(_) => "refused",
        Response::Forbidden(_) => "forbidden",
    }
}

/// As [`command_kind`], for operator requests.
fn request_kind(request: &AdminRequest) -> &'static str {
    match request {
        AdminRequest::Status => "status",
        AdminRequest::Move { .. } => "move",
        AdminRequest::Drain { .. } => "drain",
        AdminRequest::Undrain { .. } => "undrain",
        AdminRequest::Release { .. } => "release",
        AdminRequest::Revoke { .. } => "revoke",
        AdminRequest::Remove { .. } => "remove",
        AdminRequest::StatusPage(_) => "status-page",
        AdminRequest::Watch { .. } => "watch",
        AdminRequest::Snapshot { .. } => "snapshot",
        AdminRequest::Members => "members",
        AdminRequest::Promote { .. } => "promote",
    }
}

/// As [`command_kind`], for the answers to operators.
fn answer_kind(answer: &AdminResponse) -> &'static str {
    match answer {
        AdminResponse::Status(_) => "status",
        AdminResponse::Done(_) => "done",
        AdminResponse::Leader { .. } => "leader",
        AdminResponse::StatusPage(_) => "status-page",
        AdminResponse::Watch(_) => "watch",
        AdminResponse::Snapshot(_) => "snapshot",
        AdminResponse::Members(_) => "members",
    }
}

#[test]
fn every_kind_has_a_sample() {
    use std::collections::BTreeSet;
    let commands: BTreeSet<_> = commands().iter().map(command_kind).collect();
    assert_eq!(
        commands.len(),
        19,
        "command kinds with a sample: {commands:?}"
    );
    let responses: BTreeSet<_> = responses().iter().map(response_kind).collect();
    assert_eq!(
        responses.len(),
        6,
        "response kinds with a sample: {responses:?}"
    );
    let (requests, answers) = admin_values();
    let requests: BTreeSet<_> = requests.iter().map(|(_, r)| request_kind(r)).collect();
    assert_eq!(
        requests.len(),
        12,
        "admin requests with a sample: {requests:?}"
    );
    let answers: BTreeSet<_> = answers.iter().map(|(_, a)| answer_kind(a)).collect();
    assert_eq!(answers.len(), 7, "admin answers with a sample: {answers:?}");
}

//! The whole path, sealer to gate, with real node keys of both algorithms: one test per
//! way an envelope can be refused, and the ways it must not be.

use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tempfile::TempDir;

use super::seal::seal_envelope;
use super::wire::{self, EnvelopeRef};
use super::*;
use crate::pki::{self, Algo, IfExists, Signer, Subject, Verifier};

pub(super) const ALGOS: [Algo; 2] = [Algo::Ed25519, Algo::P256];

/// A wall-clock time in November 2023, in Unix milliseconds.
pub(super) const NOW_MS: u64 = 1_700_000_000_000;

/// `ms` Unix milliseconds as a `SystemTime`.
pub(super) fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// A node's signing key and the verifier built from its certificate.
pub(super) struct Node {
    pub signer: Arc<Signer>,
    pub verifier: Verifier,
}

/// Three nodes of one cluster, with keys of one algorithm.
pub(super) struct Keys {
    pub n1: Node,
    pub n2: Node,
    pub n3: Node,
}

/// The test cluster for `algo`, made once per test binary: key generation and certificate
/// files are the slow part of these tests.
pub(super) fn keys(algo: Algo) -> &'static Keys {
    static ED25519: OnceLock<Keys> = OnceLock::new();
    static P256: OnceLock<Keys> = OnceLock::new();
    let cell = match algo {
        Algo::Ed25519 => &ED25519,
        Algo::P256 => &P256,
    };
    cell.get_or_init(|| make_keys(algo))
}

fn make_keys(algo: Algo) -> Keys {
    let dir = TempDir::new().unwrap();
    let ca = dir.path().join("ca");
    pki::init_ca(&ca, algo, pki::DEFAULT_CA_VALIDITY_DAYS, IfExists::Refuse).unwrap();
    let node = |name: &str| {
        let (cert, key) = pki::issue(
            &ca,
            &Subject::Node(name.into()),
            &dir.path().join("certs"),
            pki::DEFAULT_LEAF_VALIDITY_DAYS,
            None,
            IfExists::Refuse,
        )
        .unwrap();
        let identity = pki::load_identity(&cert, &key).unwrap();
        assert_eq!(identity.signer.algorithm(), algo);
        let verifier = Verifier::from_cert(identity.leaf()).unwrap();
        Node {
            signer: Arc::new(identity.signer),
            verifier,
        }
    };
    Keys {
        n1: node("n1"),
        n2: node("n2"),
        n3: node("n3"),
    }
}

/// A gate for `me`.
pub(super) fn gate(me: &str) -> Gate {
    Gate::new(me.into())
}

/// An envelope with chosen numbers, signed by `signer` whoever it claims to be from.
pub(super) fn craft(
    signer: &Signer,
    sender: &str,
    recipient: &str,
    (incarnation, seq): (u64, u64),
    sent_at_ms: u64,
) -> Vec<u8> {
    seal_envelope(
        signer,
        &EnvelopeRef {
            sender,
            recipient,
            cluster: None,
            incarnation,
            seq,
            sent_at_ms,
            kind: 1,
            payload: b"payload",
        },
    )
}

/// Opens `wire` at `gate` as if it came from n1 at time [`NOW_MS`].
fn open_from_n1(gate: &Gate, keys: &Keys, wire: &[u8]) -> Result<Envelope, Rejection> {
    gate.open(wire, "n1", &keys.n1.verifier)
}

/// The `why` of a replay rejection.
fn replay_why(result: Result<Envelope, Rejection>) -> &'static str {
    match result {
        Err(Rejection::Replay { why, .. }) => why,
        other => panic!("expected a replay, got {other:?}"),
    }
}

#[test]
fn sealed_envelopes_open_with_both_algorithms() {
    for algo in ALGOS {
        let k = keys(algo);
        let sealer = Sealer::new("n1".into(), 42);
        let g = gate("n2");
        let payload = vec![0xA5; 100_000];
        for (i, payload) in [&b"vote"[..], &[][..], &payload].into_iter().enumerate() {
            let wire = sealer.seal(&k.n1.signer, "n2", 3, payload, at(NOW_MS + i as u64));
            let envelope = open_from_n1(&g, k, &wire).unwrap();
            assert_eq!(
                envelope,
                Envelope {
                    sender: "n1".into(),
                    recipient: "n2".into(),
                    cluster: None,
                    incarnation: 42,
                    seq: i as u64 + 1,
                    sent_at_ms: NOW_MS + i as u64,
                    kind: 3,
                    payload: payload.to_vec(),
                },
                "{algo}"
            );
        }
        assert_eq!(g.tracked_senders(), 1);
    }
}

#[test]
fn the_largest_envelope_opens_and_one_byte_more_does_not() {
    let k = keys(Algo::Ed25519);
    let sealer = Sealer::new("n1".into(), 1);
    let overhead = sealer.seal(&k.n1.signer, "n2", 0, &[], at(NOW_MS)).len();
    // A payload length of three varint bytes instead of one, and a body length of three
    // bytes instead of one, make the four extra bytes of overhead.
    let payload = vec![7; MAX_WIRE_LEN - overhead - 4];
    let wire = sealer.seal(&k.n1.signer, "n2", 0, &payload, at(NOW_MS));
    assert_eq!(wire.len(), MAX_WIRE_LEN);
    assert!(open_from_n1(&gate("n2"), k, &wire).is_ok());
    let wire = sealer.seal(
        &k.n1.signer,
        "n2",
        0,
        &[payload, vec![7]].concat(),
        at(NOW_MS),
    );
    assert!(matches!(
        open_from_n1(&gate("n2"), k, &wire),
        Err(Rejection::Malformed { .. })
    ));
}

#[test]
fn tampering_with_the_payload_or_the_signature_is_caught() {
    for algo in ALGOS {
        let k = keys(algo);
        let wire = craft(&k.n1.signer, "n1", "n2", (1, 1), NOW_MS);
        let (body, signature) = wire::decode_sealed(&wire).unwrap();

        let mut body_tampered = body.to_vec();
        *body_tampered.last_mut().unwrap() ^= 0x01; // the payload's last byte
        let tampered = wire::encode_sealed(&body_tampered, signature);
        assert_eq!(
            open_from_n1(&gate("n2"), k, &tampered),
            Err(Rejection::BadSignature),
            "{algo}"
        );

        let mut sig_tampered = signature.to_vec();
        sig_tampered[10] ^= 0x40;
        let tampered = wire::encode_sealed(body, &sig_tampered);
        assert_eq!(
            open_from_n1(&gate("n2"), k, &tampered),
            Err(Rejection::BadSignature),
            "{algo}"
        );

        // A signature over the body without the domain prefix is not an envelope signature.
        let undomained = wire::encode_sealed(body, &k.n1.signer.sign(body));
        assert_eq!(
            open_from_n1(&gate("n2"), k, &undomained),
            Err(Rejection::BadSignature),
            "{algo}"
        );
    }
}

#[test]
fn a_signature_by_another_nodes_key_is_caught() {
    for algo in ALGOS {
        let k = keys(algo);
        // n2 signs an envelope in n1's name and it arrives over n1's connection.
        let forged = craft(&k.n2.signer, "n1", "n3", (1, 1), NOW_MS);
        assert_eq!(
            gate("n3").open(&forged, "n1", &k.n1.verifier),
            Err(Rejection::BadSignature),
            "{algo}"
        );
        // n1's genuine envelope relayed over n2's connection.
        let genuine = craft(&k.n1.signer, "n1", "n3", (1, 1), NOW_MS);
        assert_eq!(
            gate("n3").open(&genuine, "n2", &k.n2.verifier),
            Err(Rejection::BadSignature),
            "{algo}"
        );
    }
    // A key of the other algorithm.
    let forged = craft(&keys(Algo::P256).n1.signer, "n1", "n2", (1, 1), NOW_MS);
    assert_eq!(
        open_from_n1(&gate("n2"), keys(Algo::Ed25519), &forged),
        Err(Rejection::BadSignature)
    );
}

#[test]
fn a_sender_other_than_the_tls_peer_is_refused() {
    for algo in ALGOS {
        let k = keys(algo);
        // n2 signs with its own key but names n1 as the sender.
        let wire = craft(&k.n2.signer, "n1", "n3", (1, 1), NOW_MS);
        assert_eq!(
            gate("n3").open(&wire, "n2", &k.n2.verifier),
            Err(Rejection::SenderMismatch {
                sender: "n1".into(),
                tls_peer: "n2".into()
            }),
            "{algo}"
        );
    }
}

#[test]
fn an_envelope_for_another_node_is_refused() {
    for algo in ALGOS {
        let k = keys(algo);
        let sealer = Sealer::new("n1".into(), 1);
        let wire = sealer.seal(&k.n1.signer, "n3", 0, b"x", at(NOW_MS));
        assert_eq!(
            open_from_n1(&gate("n2"), k, &wire),
            Err(Rejection::WrongRecipient {
                recipient: "n3".into(),
                me: "n2".into()
            }),
            "{algo}"
        );
    }
}

#[test]
fn an_exact_replay_is_refused() {
    for algo in ALGOS {
        let k = keys(algo);
        let g = gate("n2");
        let wire = Sealer::new("n1".into(), 1).seal(&k.n1.signer, "n2", 0, b"append", at(NOW_MS));
        open_from_n1(&g, k, &wire).unwrap();
        let rejection = open_from_n1(&g, k, &wire).unwrap_err();
        assert_eq!(rejection.reason(), "replay");
        assert_eq!(replay_why(Err(rejection)), "already accepted");
    }
}

#[test]
fn reordered_envelopes_are_accepted_once_each() {
    for algo in ALGOS {
        let k = keys(algo);
        let sealer = Sealer::new("n1".into(), 1);
        let wires: Vec<_> = (0..6)
            .map(|i| sealer.seal(&k.n1.signer, "n2", 0, &[i], at(NOW_MS)))
            .collect();
        let g = gate("n2");
        for i in [3, 0, 5, 1, 4, 2] {
            let envelope = open_from_n1(&g, k, &wires[i]).unwrap();
            assert_eq!(envelope.seq, i as u64 + 1);
        }
        for wire in &wires {
            assert_eq!(replay_why(open_from_n1(&g, k, wire)), "already accepted");
        }
    }
}

#[test]
fn envelopes_older_than_the_window_are_refused() {
    for algo in ALGOS {
        let k = keys(algo);
        let g = gate("n2");
        let seq = |s| craft(&k.n1.signer, "n1", "n2", (1, s), NOW_MS);
        open_from_n1(&g, k, &seq(2000)).unwrap();
        assert_eq!(
            replay_why(open_from_n1(&g, k, &seq(2000 - REPLAY_WINDOW))),
            "too old for the replay window"
        );
        // The oldest number still inside the window is accepted, once.
        open_from_n1(&g, k, &seq(2000 - REPLAY_WINDOW + 1)).unwrap();
        assert_eq!(
            replay_why(open_from_n1(&g, k, &seq(2000 - REPLAY_WINDOW + 1))),
            "already accepted"
        );
    }
}

#[test]
fn a_stale_incarnation_is_refused_and_a_restart_starts_afresh() {
    for algo in ALGOS {
        let k = keys(algo);
        let g = gate("n2");
        let first_run = Sealer::new("n1".into(), 100);
        let old: Vec<_> = (0..3)
            .map(|_| first_run.seal(&k.n1.signer, "n2", 0, b"", at(NOW_MS)))
            .collect();
        for wire in &old[..2] {
            open_from_n1(&g, k, wire).unwrap();
        }

        // n1 restarts: numbering starts over, under a greater incarnation.
        let second_run = Sealer::new("n1".into(), 200);
        let new = second_run.seal(&k.n1.signer, "n2", 0, b"", at(NOW_MS));
        assert_eq!(open_from_n1(&g, k, &new).unwrap().seq, 1);

        // The first run's envelope that was still in flight is now stale.
        assert_eq!(
            open_from_n1(&g, k, &old[2]),
            Err(Rejection::StaleIncarnation {
                incarnation: 100,
                current: 200
            })
        );
        assert_eq!(
            open_from_n1(&g, k, &old[2]).unwrap_err().reason(),
            "stale_incarnation"
        );
        assert_eq!(replay_why(open_from_n1(&g, k, &new)), "already accepted");
    }
}

#[test]
fn a_send_time_far_from_the_receiver_s_clock_is_accepted_and_replays_still_are_not() {
    // Clock skew is reported, not refused (`clock_log.rs`): an hour either way, the epoch
    // and the end of time all pass; the sequence number still admits each envelope once.
    for algo in ALGOS {
        let k = keys(algo);
        let g = gate("n2");
        let sent = |seq, ms| craft(&k.n1.signer, "n1", "n2", (1, seq), ms);
        let hour = 3_600_000;
        for (seq, ms) in [
            (1, NOW_MS - hour),
            (2, NOW_MS + hour),
            (3, 0),
            (4, u64::MAX),
        ] {
            let wire = sent(seq, ms);
            let envelope = open_from_n1(&g, k, &wire).unwrap();
            assert_eq!(envelope.sent_at_ms, ms);
            assert_eq!(replay_why(open_from_n1(&g, k, &wire)), "already accepted");
        }
    }
}

#[test]
fn garbage_truncated_and_empty_input_is_malformed() {
    for algo in ALGOS {
        let k = keys(algo);
        let g = gate("n2");
        let is_malformed =
            |r: Result<Envelope, Rejection>| matches!(r, Err(Rejection::Malformed { .. }));
        assert!(is_malformed(open_from_n1(&g, k, b"")));
        assert!(is_malformed(open_from_n1(&g, k, b"\xff\xff\xff\xff\xff")));
        assert!(is_malformed(open_from_n1(
            &g,
            k,
            b"GET / HTTP/1.1\r\nHost: n2\r\n\r\n"
        )));
        let wire = craft(&k.n1.signer, "n1", "n2", (1, 1), NOW_MS);
        for len in 0..wire.len() {
            assert!(
                is_malformed(open_from_n1(&g, k, &wire[..len])),
                "{algo}: truncated to {len} of {} bytes",
                wire.len()
            );
        }
        let mut longer = wire.clone();
        longer.push(0);
        assert!(is_malformed(open_from_n1(&g, k, &longer)));
        // None of it disturbed the replay state.
        assert_eq!(g.tracked_senders(), 0);
        open_from_n1(&g, k, &wire).unwrap();
    }
}

#[test]
fn a_signed_body_that_is_not_an_envelope_is_malformed() {
    let k = keys(Algo::Ed25519);
    let body = b"\x02n1\x02n2 and then nothing sensible";
    let signature = k.n1.signer.sign(&[DOMAIN, &body[..]].concat());
    let wire = wire::encode_sealed(body, &signature);
    assert!(matches!(
        open_from_n1(&gate("n2"), k, &wire),
        Err(Rejection::Malformed { what, .. }) if what.contains("signed body")
    ));
}

#[test]
fn every_single_bit_flip_is_refused() {
    for algo in ALGOS {
        let k = keys(algo);
        let g = gate("n2");
        let wire = craft(&k.n1.signer, "n1", "n2", (9, 9), NOW_MS);
        for bit in 0..wire.len() * 8 {
            let mut flipped = wire.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(
                open_from_n1(&g, k, &flipped).is_err(),
                "{algo}: flipping bit {bit} went unnoticed"
            );
        }
        open_from_n1(&g, k, &wire).unwrap();
    }
}

#[test]
fn only_a_fully_verified_envelope_changes_the_replay_state() {
    for algo in ALGOS {
        let k = keys(algo);
        let g = gate("n2");
        let n1 = &k.n1.signer;
        // Sequence number 5, refused in every way but one.
        let refused = [
            (craft(n1, "n1", "n3", (1, 5), NOW_MS), "wrong_recipient"),
            (
                craft(&k.n2.signer, "n1", "n2", (1, 5), NOW_MS),
                "bad_signature",
            ),
        ];
        for (wire, reason) in &refused {
            assert_eq!(open_from_n1(&g, k, wire).unwrap_err().reason(), *reason);
        }
        // n2 naming itself sender over n1's connection, signed by n1: a sender mismatch.
        let mismatch = craft(n1, "n2", "n2", (1, 5), NOW_MS);
        assert_eq!(
            open_from_n1(&g, k, &mismatch).unwrap_err().reason(),
            "sender_mismatch"
        );
        assert_eq!(g.tracked_senders(), 0);
        // The genuine one is not mistaken for a replay, and a greater incarnation that was
        // refused did not make it stale.
        let higher = craft(n1, "n1", "n3", (2, 1), NOW_MS);
        assert_eq!(
            open_from_n1(&g, k, &higher).unwrap_err().reason(),
            "wrong_recipient"
        );
        open_from_n1(&g, k, &craft(n1, "n1", "n2", (1, 5), NOW_MS)).unwrap();
    }
}

#[test]
fn the_gate_remembers_a_bounded_number_of_senders() {
    let k = keys(Algo::Ed25519);
    let g = Gate::with_max_senders("hub".into(), 2);
    let nodes = [("n1", &k.n1), ("n2", &k.n2), ("n3", &k.n3)];
    let mut first = Vec::new();
    for (i, (name, node)) in nodes.iter().enumerate() {
        let wire = craft(&node.signer, name, "hub", (1, 1), NOW_MS + i as u64);
        g.open(&wire, name, &node.verifier).unwrap();
        first.push(wire);
        assert!(g.tracked_senders() <= 2);
    }
    // n1, the least recently seen, was forgotten; its envelope still cannot come back.
    assert_eq!(g.tracked_senders(), 2);
    assert_eq!(
        replay_why(g.open(&first[0], "n1", &k.n1.verifier)),
        "sent before this node last forgot a sender's replay state"
    );
    // n1's newer envelopes are accepted (and make room by forgetting n2).
    let newer = craft(&k.n1.signer, "n1", "hub", (1, 2), NOW_MS + 10);
    g.open(&newer, "n1", &k.n1.verifier).unwrap();
    assert_eq!(g.tracked_senders(), 2);
}

#[test]
fn a_new_key_continues_the_numbering() {
    let k = keys(Algo::Ed25519);
    let sealer = Sealer::new("n1".into(), 1);
    let g = gate("n2");
    open_from_n1(&g, k, &sealer.seal(&k.n1.signer, "n2", 0, b"", at(NOW_MS))).unwrap();
    // Stand-in for n1's rotated key: n3's key, verified with n3's certificate.
    let wire = sealer.seal(&k.n3.signer, "n2", 0, b"", at(NOW_MS));
    let envelope = g.open(&wire, "n1", &k.n3.verifier).unwrap();
    assert_eq!(envelope.seq, 2);
    assert_eq!(
        open_from_n1(&g, k, &wire).unwrap_err(),
        Rejection::BadSignature
    );
}

#[test]
fn sealer_and_gate_can_be_shared_by_concurrent_senders() {
    let k = keys(Algo::Ed25519);
    let sealer = Arc::new(Sealer::new("n1".into(), 1));
    let g = Arc::new(gate("n2"));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (sealer, g) = (Arc::clone(&sealer), Arc::clone(&g));
            thread::spawn(move || {
                let mut sealed = Vec::new();
                for i in 0..200u32 {
                    let wire = sealer.seal(&k.n1.signer, "n2", 0, &i.to_le_bytes(), at(NOW_MS));
                    open_from_n1(&g, k, &wire).unwrap();
                    sealed.push(wire);
                }
                sealed
            })
        })
        .collect();
    let all: Vec<_> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert_eq!(all.len(), 800);
    for wire in &all {
        assert_eq!(open_from_n1(&g, k, wire).unwrap_err().reason(), "replay");
    }
}

#[test]
fn rejections_feed_the_reject_log() {
    let k = keys(Algo::Ed25519);
    let g = gate("n2");
    let log = RejectLog::default();
    let t0 = std::time::Instant::now();
    for input in [&b""[..], &craft(&k.n2.signer, "n1", "n2", (1, 1), NOW_MS)] {
        let rejection = open_from_n1(&g, k, input).unwrap_err();
        assert_eq!(
            log.record("n1", &rejection, t0),
            Logged::Written { suppressed: 0 }
        );
    }
    assert_eq!(log.count(Reason::Malformed), 1);
    assert_eq!(log.count(Reason::BadSignature), 1);
}

/// A node of another cluster (same CA, same names) is refused, both ids named; a sender or
/// receiver that does not know its cluster yet is not (issue 24: cluster identity).
#[test]
fn an_envelope_of_another_cluster_is_refused_naming_both_ids() {
    use crate::cluster::{ClusterCell, ClusterId};
    let k = keys(Algo::Ed25519);
    let (ours, theirs) = (
        ClusterId::from_bytes([1; 16]),
        ClusterId::from_bytes([2; 16]),
    );
    let known = |id: ClusterId| -> ClusterCell { Arc::new(id.into()) };
    // Each its own run of n1 (a later incarnation), so none is refused as a replay.
    let sealer = |cell: ClusterCell, run: u64| Sealer::new("n1".into(), run).in_cluster(cell);
    let gate_of = |cell: ClusterCell| gate("n2").in_cluster(cell);

    let g = gate_of(known(ours));
    let wire = sealer(known(theirs), 1).seal(&k.n1.signer, "n2", 3, b"vote", at(NOW_MS));
    let refused = open_from_n1(&g, k, &wire).unwrap_err();
    assert_eq!(refused.kind(), Reason::OtherCluster);
    let said = refused.to_string();
    assert!(
        said.contains(&theirs.to_string()) && said.contains(&ours.to_string()),
        "{said}"
    );

    let same = sealer(known(ours), 2).seal(&k.n1.signer, "n2", 3, b"vote", at(NOW_MS));
    assert_eq!(open_from_n1(&g, k, &same).unwrap().cluster, Some(ours));
    let unknown = sealer(ClusterCell::default(), 3).seal(&k.n1.signer, "n2", 3, b"v", at(NOW_MS));
    assert_eq!(open_from_n1(&g, k, &unknown).unwrap().cluster, None);
    let fresh = gate_of(ClusterCell::default());
    assert!(
        open_from_n1(&fresh, k, &wire).is_ok(),
        "a new store takes any"
    );
}

//! Property tests: whatever bytes arrive, the gate answers without panicking; whatever a
//! sender seals, the receiver gets back exactly; and no single flipped bit gets through.
//!
//! They run proptest's default number of cases (256, or `PROPTEST_CASES`), each with both
//! key algorithms. For a long run: `PROPTEST_CASES=100000 cargo test --release --lib
//! envelope`.

use proptest::prelude::*;

use super::tests::{ALGOS, NOW_MS, gate, keys};
use super::wire::{self, EnvelopeRef};
use super::*;

/// Names as the PKI makes them, plus a few past its rule (still within [`MAX_NAME_LEN`]).
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z][a-z0-9-]{0,62}",
        1 => "\\PC{0,60}",
    ]
}

/// Everything in an envelope that a sender chooses, sender and recipient aside.
#[derive(Debug, Clone)]
struct Fields {
    incarnation: u64,
    seq: u64,
    /// How far `sent_at_ms` is from the receiver's clock (a day either way: any is accepted).
    offset_ms: i64,
    kind: u16,
    payload: Vec<u8>,
}

fn fields() -> impl Strategy<Value = Fields> {
    let skew = 86_400_000_i64;
    (
        any::<u64>(),
        any::<u64>(),
        -skew..=skew,
        any::<u16>(),
        prop::collection::vec(any::<u8>(), 0..2048),
    )
        .prop_map(|(incarnation, seq, offset_ms, kind, payload)| Fields {
            incarnation,
            seq,
            offset_ms,
            kind,
            payload,
        })
}

impl Fields {
    fn sent_at_ms(&self) -> u64 {
        NOW_MS.checked_add_signed(self.offset_ms).unwrap()
    }

    fn envelope<'a>(&'a self, sender: &'a str, recipient: &'a str) -> EnvelopeRef<'a> {
        EnvelopeRef {
            sender,
            recipient,
            cluster: None,
            incarnation: self.incarnation,
            seq: self.seq,
            sent_at_ms: self.sent_at_ms(),
            kind: self.kind,
            payload: &self.payload,
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_are_refused_without_panicking(
        bytes in prop::collection::vec(any::<u8>(), 0..1024),
    ) {
        let k = keys(pki_algo(bytes.first().copied()));
        let result = gate("n2").open(&bytes, "n1", &k.n1.verifier);
        prop_assert!(result.is_err());
    }

    #[test]
    fn arbitrary_bodies_and_signatures_are_refused_without_panicking(
        body in prop::collection::vec(any::<u8>(), 0..512),
        signature in prop::collection::vec(any::<u8>(), 0..160),
    ) {
        for algo in ALGOS {
            let wire = wire::encode_sealed(&body, &signature);
            let rejection = gate("n2")
                .open(&wire, "n1", &keys(algo).n1.verifier)
                .unwrap_err();
            prop_assert!(
                matches!(rejection.reason(), "malformed" | "bad_signature"),
                "{}", rejection
            );
        }
    }

    #[test]
    fn any_envelope_opens_as_sealed(recipient in name(), f in fields()) {
        for algo in ALGOS {
            let k = keys(algo);
            let sealed = seal::seal_envelope(&k.n1.signer, &f.envelope("n1", &recipient));
            let opened = gate(&recipient)
                .open(&sealed, "n1", &k.n1.verifier)
                .unwrap();
            prop_assert_eq!(opened, Envelope {
                sender: "n1".into(),
                recipient: recipient.clone(),
                cluster: None,
                incarnation: f.incarnation,
                seq: f.seq,
                sent_at_ms: f.sent_at_ms(),
                kind: f.kind,
                payload: f.payload.clone(),
            });
        }
    }

    #[test]
    fn any_body_decodes_as_encoded(sender in name(), recipient in name(), f in fields()) {
        let signed = wire::signed_message(&f.envelope(&sender, &recipient));
        let decoded = wire::decode_body(&signed[DOMAIN.len()..]).unwrap();
        prop_assert_eq!((decoded.sender, decoded.recipient), (sender, recipient));
        prop_assert_eq!(decoded.payload, f.payload);
    }

    #[test]
    fn any_single_bit_flip_is_refused(
        recipient in name(),
        f in fields(),
        bit in any::<prop::sample::Index>(),
    ) {
        for algo in ALGOS {
            let k = keys(algo);
            let mut sealed = seal::seal_envelope(&k.n1.signer, &f.envelope("n1", &recipient));
            let bit = bit.index(sealed.len() * 8);
            sealed[bit / 8] ^= 1 << (bit % 8);
            let result = gate(&recipient).open(&sealed, "n1", &k.n1.verifier);
            prop_assert!(result.is_err(), "{}: bit {} of {}", algo, bit, sealed.len() * 8);
        }
    }
}

/// One of the two algorithms, picked by a byte of the input.
fn pki_algo(byte: Option<u8>) -> crate::pki::Algo {
    ALGOS[usize::from(byte.unwrap_or(0) & 1)]
}

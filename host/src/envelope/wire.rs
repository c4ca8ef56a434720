//! The envelope and its bytes on the wire, in one place.
//!
//! Sealing and opening both go through this file, so the byte layout described in the
//! module essay is written down exactly once. The body has two Rust shapes that encode
//! alike: [`Envelope`], owned, which the receiver gets back, and `EnvelopeRef`, borrowed,
//! which lets the sender encode a payload without first copying it into an `Envelope`.
//!
//! Byte strings (`payload`, `body`, `signature`) are encoded with postcard's byte-string
//! call rather than serde's default sequence of `u8`. Both produce the same bytes (a varint
//! length, then the bytes); the byte-string call decodes as one slice of the input instead
//! of one call per byte, and never sizes an allocation by the announced length.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

use super::{DOMAIN, MAX_NAME_LEN, MAX_SIGNATURE_LEN, MAX_WIRE_LEN, Rejection};

/// A protocol message, with what a receiver needs to decide whether to trust it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// The sending node's name, as in its certificate.
    pub sender: String,
    /// The name of the node the message is for.
    pub recipient: String,
    /// The sender's cluster (`cluster/identity.rs`); `None` from a node that does not
    /// know it yet (a new store) and from operators.
    pub cluster: Option<crate::cluster::ClusterId>,
    /// The sender's run: greater after every restart of the sender (see [`super::Sealer::new`]).
    pub incarnation: u64,
    /// The message's number within the incarnation, counted from 1 per recipient.
    pub seq: u64,
    /// When the sender sealed the message: milliseconds since the Unix epoch, by its clock.
    pub sent_at_ms: u64,
    /// What the payload holds; the numbers are the transport's to assign.
    pub kind: u16,
    /// The message itself, encoded by the layer above.
    #[serde(with = "bytes")]
    pub payload: Vec<u8>,
}

/// Milliseconds since the Unix epoch at `t`: 0 before the epoch, `u64::MAX` past the year
/// 584 million. The unit of [`Envelope::sent_at_ms`].
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An [`Envelope`] that borrows its strings and payload; encodes to the same bytes.
#[derive(Serialize)]
pub(super) struct EnvelopeRef<'a> {
    pub sender: &'a str,
    pub recipient: &'a str,
    pub cluster: Option<crate::cluster::ClusterId>,
    pub incarnation: u64,
    pub seq: u64,
    pub sent_at_ms: u64,
    pub kind: u16,
    #[serde(serialize_with = "bytes::serialize")]
    pub payload: &'a [u8],
}

/// The outer layer: the encoded body and its signature, both borrowed from the input when
/// decoding.
#[derive(Serialize, Deserialize)]
struct Sealed<'a> {
    #[serde(serialize_with = "bytes::serialize")]
    body: &'a [u8],
    #[serde(serialize_with = "bytes::serialize")]
    signature: &'a [u8],
}

/// [`DOMAIN`] followed by the encoded body of `envelope`: the message to sign. The body is
/// `result[DOMAIN.len()..]`.
pub(super) fn signed_message(envelope: &EnvelopeRef<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(DOMAIN.len() + 64 + envelope.payload.len());
    out.extend_from_slice(DOMAIN);
    // Encoding into a Vec fails only for types postcard cannot represent (maps without a
    // length, for instance), and EnvelopeRef holds none.
    postcard::to_extend(envelope, out).expect("an EnvelopeRef always encodes")
}

/// The wire bytes of a sealed envelope.
pub(super) fn encode_sealed(body: &[u8], signature: &[u8]) -> Vec<u8> {
    let out = Vec::with_capacity(sealed_len(body.len(), signature.len()));
    postcard::to_extend(&Sealed { body, signature }, out).expect("a Sealed always encodes")
}

/// Splits wire bytes into body and signature, both borrowed from `wire`. Refuses input over
/// [`MAX_WIRE_LEN`], trailing bytes, non-canonical lengths and oversized signatures.
pub(super) fn decode_sealed(wire: &[u8]) -> Result<(&[u8], &[u8]), Rejection> {
    if wire.len() > MAX_WIRE_LEN {
        return Err(Rejection::malformed("larger than the 1 MiB limit"));
    }
    let (sealed, rest) = postcard::take_from_bytes::<Sealed<'_>>(wire)
        .map_err(|e| Rejection::malformed_by("not a sealed envelope", e))?;
    if !rest.is_empty() {
        return Err(Rejection::malformed(
            "trailing bytes after the sealed envelope",
        ));
    }
    // The two lengths were read as varints, which postcard also accepts with redundant
    // continuation bytes; requiring the shortest encoding leaves one encoding per envelope.
    if wire.len() != sealed_len(sealed.body.len(), sealed.signature.len()) {
        return Err(Rejection::malformed(
            "lengths not in their shortest encoding",
        ));
    }
    if sealed.signature.len() > MAX_SIGNATURE_LEN {
        return Err(Rejection::malformed("signature longer than any we make"));
    }
    Ok((sealed.body, sealed.signature))
}

/// Decodes an authenticated body into an [`Envelope`], bounding the names.
pub(super) fn decode_body(body: &[u8]) -> Result<Envelope, Rejection> {
    let (envelope, rest) = postcard::take_from_bytes::<Envelope>(body)
        .map_err(|e| Rejection::malformed_by("the signed body is not an envelope", e))?;
    if !rest.is_empty() {
        return Err(Rejection::malformed("trailing bytes after the signed body"));
    }
    if envelope.sender.len() > MAX_NAME_LEN || envelope.recipient.len() > MAX_NAME_LEN {
        return Err(Rejection::malformed("a name longer than 253 bytes"));
    }
    Ok(envelope)
}

/// The length of the canonical encoding of a `Sealed` with these field lengths.
fn sealed_len(body: usize, signature: usize) -> usize {
    varint_len(body) + body + varint_len(signature) + signature
}

/// The length of the shortest LEB128 varint for `n`: one byte per started 7 bits.
fn varint_len(n: usize) -> usize {
    let bits = (usize::BITS - n.leading_zeros()).max(1);
    bits.div_ceil(7) as usize
}

/// Serde glue that encodes a byte string as one (postcard: varint length, then the bytes,
/// exactly as serde's sequence of `u8` would) and decodes it from a slice of the input.
mod bytes {
    use super::*;

    pub fn serialize<S: Serializer>(value: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        deserializer.deserialize_bytes(BytesVisitor)
    }

    /// Copies a byte string, whose length is that of the slice the deserializer took from
    /// its input, into a `Vec`. Also accepts a sequence of `u8`, for self-describing formats.
    struct BytesVisitor;

    impl<'de> de::Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a byte string")
        }

        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            // Never trust the hint beyond a small preallocation.
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(b) = seq.next_element()? {
                out.push(b);
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Envelope {
        Envelope {
            sender: "n1".into(),
            recipient: "n2".into(),
            cluster: Some(crate::cluster::ClusterId::from_bytes([7; 16])),
            incarnation: 1_700_000_000_000,
            seq: 300,
            sent_at_ms: 1_700_000_000_123,
            kind: 7,
            payload: vec![0, 1, 2, 255],
        }
    }

    #[test]
    fn borrowed_and_owned_bodies_encode_alike_and_decode_back() {
        let env = sample();
        let by_ref = EnvelopeRef {
            sender: &env.sender,
            recipient: &env.recipient,
            cluster: env.cluster,
            incarnation: env.incarnation,
            seq: env.seq,
            sent_at_ms: env.sent_at_ms,
            kind: env.kind,
            payload: &env.payload,
        };
        let signed = signed_message(&by_ref);
        assert_eq!(&signed[..DOMAIN.len()], DOMAIN);
        let body = &signed[DOMAIN.len()..];
        assert_eq!(body, postcard::to_allocvec(&env).unwrap());
        assert_eq!(decode_body(body).unwrap(), env);
    }

    #[test]
    fn byte_strings_encode_like_serdes_default_sequence() {
        // A peer built with plain `Vec<u8>` fields must produce and accept the same bytes.
        #[derive(Serialize)]
        struct Plain {
            payload: Vec<u8>,
        }
        let payload = (0..=255u8).collect::<Vec<_>>();
        let plain = postcard::to_allocvec(&Plain {
            payload: payload.clone(),
        })
        .unwrap();
        let ours = encode_sealed(&payload, &[]);
        assert_eq!(&ours[..plain.len()], &plain[..]);
    }

    #[test]
    fn sealed_round_trips_and_rejects_trailing_and_overlong_input() {
        let wire = encode_sealed(b"body", b"sig");
        assert_eq!(wire, b"\x04body\x03sig");
        assert_eq!(decode_sealed(&wire).unwrap(), (&b"body"[..], &b"sig"[..]));

        let mut trailing = wire.clone();
        trailing.push(0);
        assert_eq!(decode_sealed(&trailing).unwrap_err().reason(), "malformed");
        // 4 written as the two-byte varint 0x84 0x00.
        let redundant = b"\x84\x00body\x03sig";
        assert!(matches!(
            decode_sealed(redundant),
            Err(Rejection::Malformed { what, .. }) if what.contains("shortest")
        ));
        let huge = vec![0u8; MAX_WIRE_LEN + 1];
        assert!(decode_sealed(&huge).is_err());
    }

    #[test]
    fn announced_lengths_beyond_the_input_are_refused() {
        // A body length of u64::MAX - 1 and nothing behind it.
        let mut wire = vec![0xFE; 9];
        wire.push(0x01);
        assert!(decode_sealed(&wire).is_err());
        // The same announced payload length inside a body.
        let mut body = postcard::to_allocvec(&sample()).unwrap();
        // Drop the payload and its length byte (the payload is the last field).
        body.truncate(body.len() - 5);
        body.extend_from_slice(&wire);
        assert!(decode_body(&body).is_err());
    }

    #[test]
    fn long_names_are_malformed() {
        let mut env = sample();
        env.recipient = "a".repeat(MAX_NAME_LEN);
        let body = postcard::to_allocvec(&env).unwrap();
        assert!(decode_body(&body).is_ok());
        env.recipient.push('a');
        let body = postcard::to_allocvec(&env).unwrap();
        assert_eq!(decode_body(&body).unwrap_err().reason(), "malformed");
    }

    #[test]
    fn varint_lengths() {
        for (n, len) in [(0, 1), (127, 1), (128, 2), (16_383, 2), (16_384, 3)] {
            assert_eq!(varint_len(n), len, "{n}");
            assert_eq!(postcard::to_allocvec(&(n as u64)).unwrap().len(), len);
        }
        assert_eq!(varint_len(usize::MAX), 10);
    }

    #[test]
    fn unix_ms_saturates() {
        assert_eq!(unix_ms(UNIX_EPOCH), 0);
        assert_eq!(unix_ms(UNIX_EPOCH - std::time::Duration::from_secs(1)), 0);
        assert_eq!(
            unix_ms(UNIX_EPOCH + std::time::Duration::from_millis(1234)),
            1234
        );
    }
}

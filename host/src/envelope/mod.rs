//! Signed envelopes: how one node proves to another that a protocol message is its own,
//! meant for that node, fresh, and not a replay.
//!
//! Every protocol message between nodes, Raft's votes and appends included, travels in an
//! [`Envelope`] (docs/design.md §5.2, "Transport and envelopes"). TLS already authenticates the
//! connection; the envelope adds what TLS cannot: a signature that stays attached to the
//! message (so the receiver can check that the node named as sender is the node the bytes
//! came from), the recipient's name (so a message for one node cannot be replayed to
//! another), and a sequence number (so the same message cannot be applied twice, whether
//! a transport retry or a misbehaving peer sends it again). Its send time is not checked
//! against the receiver's clock: replay protection rests on the incarnation and the
//! sequence, so a node whose clock is off keeps its place in the cluster, and the offset
//! is reported instead ([`ClockLog`], issue 24: two voters on a bad time source once lost
//! the quorum to a 30 s bound).
//!
//! This module is pure: no sockets, no files, no clock. Wall-clock time comes in as a
//! `SystemTime` argument and monotonic time as an `Instant`, so every decision can be
//! replayed in a test. The three pieces:
//!
//! - [`Sealer`] (sending side): encodes, numbers and signs envelopes.
//! - [`Gate`] (receiving side, one per node): checks an incoming envelope and remembers,
//!   per sender, what it has accepted.
//! - [`RejectLog`]: counts rejections per [`Reason`] for metrics and writes
//!   `security.rejected` lines at a bounded rate.
//!
//! # Wire format
//!
//! ```text
//! wire   = postcard(Sealed { body: bytes, signature: bytes })
//! body   = postcard(Envelope { sender, recipient, cluster, incarnation, seq, sent_at_ms, kind, payload })
//! signed = DOMAIN ("tenure/1 envelope\0") ‖ body
//! ```
//!
//! The signature covers the body *bytes*, not a re-encoding of the decoded struct, so
//! the receiver never has to trust that encoding is canonical. The domain prefix makes an
//! envelope signature useless as a signature of anything else the same key might ever
//! sign (and the reverse); the `1` is the format version. The outer layer must be the
//! canonical postcard encoding with no trailing bytes, so that the wire bytes of an
//! accepted envelope are exactly the bytes its sender produced.
//!
//! # The checks, in order
//!
//! [`Gate::open`] rejects with a [`Rejection`] at the first failure:
//!
//! 1. **Malformed**: larger than [`MAX_WIRE_LEN`], not a canonical `Sealed`, or a signature
//!    longer than [`MAX_SIGNATURE_LEN`]. Cheap, and done before any cryptography.
//! 2. **Bad signature** under the TLS peer's key. Only then is the body parsed (it may
//!    still be **malformed**, e.g. a name longer than [`MAX_NAME_LEN`]): untrusted bytes
//!    get no more parsing than it takes to find the signature.
//! 3. **Sender mismatch**: the envelope's sender is not the TLS peer. The signature only
//!    proves that the peer's key signed it; this proves the peer is not speaking for
//!    someone else.
//! 4. **Wrong recipient**: meant for another node. **Other cluster**: the sender's cluster
//!    id is not this node's (both known; `cluster/identity.rs`): a node of another cluster
//!    that trusts the same CA and uses the same names reached this one.
//! 5. **Stale incarnation** or **replay** (below). Last, so that only an envelope that
//!    passed every other check changes the replay state: a forged or misdirected envelope
//!    cannot burn a sequence number that a genuine one will need.
//!
//! # Replay protection
//!
//! A sender's envelopes carry `(incarnation, seq)`. The incarnation is chosen once per run
//! of the sender (see [`Sealer::new`]) and must grow from run to run; `seq` grows within a
//! run. The transport sends concurrent requests on separate QUIC streams, so envelopes
//! arrive out of order, and "strictly newer than the last one" would drop good messages.
//! The receiver therefore keeps, per sender, the highest incarnation seen and, for it, an
//! anti-replay sliding window as in IPsec and DTLS (RFC 4303 §3.4.3, RFC 6347 §4.1.2.6): the
//! highest `seq` accepted and a bitmap of the [`REPLAY_WINDOW`] sequence numbers below it.
//! A `seq` inside the window is accepted once; a duplicate, or one that fell below the
//! window, is a [`Rejection::Replay`]. A lower incarnation is a
//! [`Rejection::StaleIncarnation`]; a higher one means the sender restarted and starts a
//! fresh window.
//!
//! Sequence numbers are counted per (sender, recipient) pair, not per sender: a receiver
//! then sees its own numbers without gaps, so the window's 1024 positions all measure
//! reordering of messages to it, however much the sender talks to other nodes meanwhile.
//!
//! What keeps that reordering below the window is the order in which the sender seals and
//! sends, which is the transport's and `crate::rpc`'s: a request is sealed only once its
//! QUIC stream is open (`transport/dial.rs`), and a response once its handler answered, on
//! the stream the request came on. Opening a stream waits for the receiver's stream credit,
//! so a burst of calls waits *unsealed*; the envelopes sealed but not yet opened are those
//! on streams in flight, at most `max_streams_per_connection` (64, capped at 256) per
//! connection, and `crate::rpc` checks at compile time that four connections' worth fit in
//! the window (a sender's numbers to one receiver travel on two connections, its requests
//! on the one it dialed and its responses on the one the receiver dialed, and each may
//! have a retiring predecessor still draining). Sealing first and then waiting for a stream, as the transport once did, let a
//! burst of 3,000 calls to one peer have over half refused as replays. One thing can still
//! push an envelope out of the window: if its own packets are lost and it waits for
//! retransmission while more than 1024 later ones, sealed after it, are accepted. That is
//! a refused call (the caller's retry seals a new one), not a safety problem.
//!
//! # Bounded memory, and why forgetting a sender is safe
//!
//! The gate tracks at most [`DEFAULT_MAX_SENDERS`] senders (configurable) and, when a new
//! sender arrives at a full table, forgets the least recently accepted one. Forgetting a
//! sender's window would let its past envelopes in again, were it not for three things:
//!
//! - Only the sender itself can deliver them: an envelope must arrive over a TLS connection
//!   authenticated as its sender and be signed by that sender's key. A third party who
//!   recorded one cannot inject it into the sender's connection. What is left is the sender
//!   (or a bug in its transport) sending an old envelope again.
//! - Against the sender itself, the gate keeps a watermark: the highest `sent_at_ms` it
//!   had accepted from any sender it forgot. A sender first seen (or seen again) after that is held to
//!   `sent_at_ms > watermark`, so nothing accepted before a forgetting can be accepted
//!   after it. The cost falls only on the already abnormal case of more than 4096 live
//!   senders: a new sender whose clock lags the forgotten one's is refused (as a replay)
//!   until its clock passes the watermark, and an envelope delayed in flight across the
//!   forgetting is dropped. The senders that a full table evicts are by construction the
//!   ones quietest of late.
//!
//! **A removed member** is forgotten without raising the watermark ([`Gate::forget`],
//! called as the node applies the member's removal). Its name may come back as a new
//! member on an empty data dir, whose incarnation and send times come from a clock that
//! may be behind the old run's (the old run's clock may have been ahead: skew is only a
//! warning); holding it to the old run's numbers would refuse it until its clock caught
//! up. Forgetting lets the old run's envelopes in again only if the old run itself sends
//! them, and it could sign new ones as well: the removal, not the replay state, is what
//! keeps a removed member out (its Raft messages and proposals are refused as a
//! non-member's).
//!
//! A cluster has at most a few hundred nodes, each holding a certificate from the cluster
//! CA, so the bound is only reached by someone holding thousands of certificates; it exists
//! so that even then memory stays bounded (about 250 bytes per sender).
//!
//! # Sizes
//!
//! The transport refuses frames over 1 MiB before reading them; [`Gate::open`] checks
//! [`MAX_WIRE_LEN`] again so it is safe on its own. Decoding never allocates from a length
//! read off the wire beyond the input's length: postcard takes strings and byte strings
//! as slices of the input (failing if the input is shorter than the announced length), and
//! for sequences it withholds the length hint from serde when fewer bytes remain than the
//! length announces (postcard 1.1, `de/deserializer.rs`). Names are bounded to
//! [`MAX_NAME_LEN`] bytes (a DNS name); real names are shorter (one DNS label, see
//! [`crate::pki::validate_name`]) and are enforced by the equality checks against the TLS
//! peer and the receiver's own name.
//!
//! # What this module does not do
//!
//! - Find the verifier: the transport builds a [`crate::pki::Verifier`] from the peer's
//!   validated certificate and passes it, with the peer's name, to [`Gate::open`]. Nodes and
//!   operators share one namespace of names here, so the transport must decide which kinds
//!   of peer may send envelopes at all.
//! - Frame, send or retry; choose `kind` numbers; encrypt (TLS does).
//! - Read any clock, or log from [`Gate::open`]: the caller hands rejections to
//!   [`RejectLog::record`].
//!
//! # Tests
//!
//! Unit tests sit next to the code they test; `tests.rs` runs the whole path with real
//! keys of both algorithms, and `proptests.rs` has the property tests. Those run proptest's
//! default 256 cases; for a longer run:
//!
//! ```text
//! PROPTEST_CASES=100000 cargo test --release --lib envelope
//! ```

mod clock_log;
mod gate;
mod reject_log;
mod rejection;
mod replay;
mod seal;
mod window;
mod wire;

#[cfg(test)]
mod proptests;

/// Decodes sealed wire bytes and encodes them again (the golden-byte tests' check that
/// old bytes still read).
#[cfg(test)]
pub(crate) fn reencode_sealed(bytes: &[u8]) -> Result<Vec<u8>, Rejection> {
    let (body, signature) = wire::decode_sealed(bytes)?;
    let envelope = wire::decode_body(body)?;
    let body = postcard::to_allocvec(&envelope).expect("an envelope encodes");
    Ok(wire::encode_sealed(&body, signature))
}
#[cfg(test)]
mod tests;

pub use clock_log::ClockLog;
pub use gate::Gate;
pub use reject_log::{DEFAULT_LINES_PER_SECOND, Logged, RejectLog};
pub use rejection::{Reason, Rejection};
pub use seal::Sealer;
pub use wire::{Envelope, unix_ms};

/// The prefix signed before every envelope body: the format's name and version, and a
/// NUL that no name or version can contain.
pub const DOMAIN: &[u8] = b"tenure/1 envelope\0";

/// The largest sealed envelope [`Gate::open`] looks at, equal to the transport's frame
/// limit (1 MiB).
pub const MAX_WIRE_LEN: usize = 1 << 20;

/// The longest signature accepted: Ed25519 signatures are 64 bytes and DER-encoded ECDSA
/// P-256 signatures at most 72.
pub const MAX_SIGNATURE_LEN: usize = 128;

/// The longest sender or recipient name accepted, in bytes: the limit for a DNS name.
pub const MAX_NAME_LEN: usize = 253;

/// How many senders a [`Gate`] remembers before it forgets the least recently seen.
pub const DEFAULT_MAX_SENDERS: usize = 4096;

/// How many sequence numbers below the highest accepted one the replay window covers.
pub const REPLAY_WINDOW: u64 = 1024;

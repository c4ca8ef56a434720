//! The sending side: numbering, encoding and signing envelopes.
//!
//! A node has one [`Sealer`] for its whole run, shared by every task that sends. It owns
//! the two numbers a receiver's replay check relies on: the incarnation, fixed for the run,
//! and the sequence numbers, which it hands out per recipient so that each receiver sees
//! its own messages numbered without gaps (see the module essay for why that matters).
//!
//! Sequence numbers come from a small table of recipients under a mutex, taken only to
//! read and bump a counter; signing, the costly part, happens outside it. The table is
//! bounded: when it is full it is emptied, and every recipient then continues from one
//! past the highest number ever handed out to anyone, which is still above anything that
//! recipient has seen. Numbers jump forward, never back.
//!
//! The key can be replaced (certificate rotation) without restarting the numbering, which
//! a new `Sealer` with the same incarnation would do, to every receiver's refusal.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use crate::cluster::ClusterCell;
use crate::pki::Signer;

use super::wire::{self, EnvelopeRef};
use super::{DEFAULT_MAX_SENDERS, DOMAIN};

/// Seals this node's outgoing envelopes: one per node, shared (`Arc<Sealer>`) by all
/// senders.
pub struct Sealer {
    me: String,
    incarnation: u64,
    /// This node's cluster, stamped on every envelope once known.
    cluster: ClusterCell,
    state: Mutex<SealerState>,
}

/// What sealing changes, behind the sealer's mutex.
struct SealerState {
    /// The next sequence number for each recipient.
    next_seq: HashMap<String, u64>,
    /// One past the highest sequence number handed out to anyone: where a recipient that
    /// is not (or no longer) in `next_seq` starts.
    floor: u64,
}

impl Sealer {
    /// A sealer for node `me` in run `incarnation`. It holds no key: each envelope is signed
    /// with the key passed to [`Sealer::seal`], because which key a peer can verify depends
    /// on the certificate the connection carrying the envelope presented (after a rotation,
    /// old connections carry the old certificate and new ones the new), while the numbering
    /// must stay one sequence per recipient across both.
    ///
    /// The incarnation must be greater than that of every earlier run of this node that a
    /// peer may still remember, or peers refuse its envelopes as
    /// [`super::Rejection::StaleIncarnation`] until they forget it. Two good choices:
    /// - the node's start time in Unix milliseconds ([`super::unix_ms`]), which grows as
    ///   long as the wall clock is not stepped back by more than the node was down;
    /// - a counter kept on disk, incremented and synced before the first envelope is
    ///   sealed, which needs no clock but must survive with the node's data.
    pub fn new(me: String, incarnation: u64) -> Sealer {
        Sealer {
            me,
            incarnation,
            cluster: ClusterCell::default(),
            state: Mutex::new(SealerState {
                next_seq: HashMap::new(),
                floor: 1,
            }),
        }
    }

    /// The same sealer, stamping the cluster id `cluster` holds once it holds one.
    pub fn in_cluster(mut self, cluster: ClusterCell) -> Sealer {
        self.cluster = cluster;
        self
    }

    /// Numbers, encodes and signs (with `signer`, the key of the certificate the receiving
    /// connection saw) a message of `kind` for `recipient`, stamped with `now`, and returns
    /// the wire bytes. Each call for a recipient gets a greater sequence number
    /// than the call before.
    ///
    /// Nothing is checked here: a payload that makes the result larger than
    /// [`super::MAX_WIRE_LEN`] is the caller's to refuse before sending, and a recipient
    /// name that is not a node name will be refused by the receiver.
    ///
    /// # Panics
    /// Only if the system's random number generator fails while signing with a P-256 key
    /// (see [`Signer::sign`]).
    pub fn seal(
        &self,
        signer: &Signer,
        recipient: &str,
        kind: u16,
        payload: &[u8],
        now: SystemTime,
    ) -> Vec<u8> {
        let seq = self.next(recipient);
        let envelope = EnvelopeRef {
            sender: &self.me,
            recipient,
            cluster: self.cluster.get().copied(),
            incarnation: self.incarnation,
            seq,
            sent_at_ms: wire::unix_ms(now),
            kind,
            payload,
        };
        seal_envelope(signer, &envelope)
    }

    /// The name this sealer signs as.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// The incarnation stamped on every envelope.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The next sequence number for `recipient`.
    fn next(&self, recipient: &str) -> u64 {
        let mut state = self.lock();
        let floor = state.floor;
        let seq = match state.next_seq.get_mut(recipient) {
            Some(next) => {
                let seq = *next;
                *next = seq.saturating_add(1);
                seq
            }
            None => {
                if state.next_seq.len() >= DEFAULT_MAX_SENDERS {
                    state.next_seq.clear();
                }
                state
                    .next_seq
                    .insert(recipient.to_owned(), floor.saturating_add(1));
                floor
            }
        };
        state.floor = floor.max(seq.saturating_add(1));
        seq
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SealerState> {
        // Nothing panics while the lock is held, and the state is valid between any two
        // statements anyway, so a poisoned lock is safe to use.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealer")
            .field("me", &self.me)
            .field("incarnation", &self.incarnation)
            .finish_non_exhaustive()
    }
}

/// Encodes and signs `envelope` as it stands, numbers included. The sealer's numbering is
/// what makes envelopes acceptable; this is for it and for tests that need chosen numbers.
pub(super) fn seal_envelope(signer: &Signer, envelope: &EnvelopeRef<'_>) -> Vec<u8> {
    let signed = wire::signed_message(envelope);
    let signature = signer.sign(&signed);
    wire::encode_sealed(&signed[DOMAIN.len()..], &signature)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Numbering tests do not sign.
    fn sealer() -> Sealer {
        Sealer::new("n1".into(), 7)
    }

    #[test]
    fn numbers_grow_per_recipient_without_gaps() {
        let s = sealer();
        let seqs: Vec<_> = ["a", "a", "b", "a", "b", "c"]
            .iter()
            .map(|r| s.next(r))
            .collect();
        // `b` and `c` start above everything handed out so far.
        assert_eq!(seqs, [1, 2, 3, 3, 4, 5]);
    }

    #[test]
    fn a_full_table_restarts_every_recipient_above_all_numbers_handed_out() {
        let s = sealer();
        let mut last = HashMap::new();
        for round in 0..3 {
            for i in 0..DEFAULT_MAX_SENDERS + 10 {
                let name = format!("r{}", (i * 7 + round) % (DEFAULT_MAX_SENDERS + 10));
                let seq = s.next(&name);
                if let Some(prev) = last.insert(name.clone(), seq) {
                    assert!(seq > prev, "{name}: {seq} after {prev}");
                }
            }
        }
        assert!(s.lock().next_seq.len() <= DEFAULT_MAX_SENDERS);
    }
}

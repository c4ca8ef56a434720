//! Why an envelope was refused: the one error type of the receiving boundary.
//!
//! A [`Rejection`] is for people (its message says what was wrong, with the numbers that
//! show it); its [`Reason`] is for machines: a closed set of stable snake_case codes that
//! the `security.rejected` event and the rejection counters are keyed by. Codes are a
//! public contract, like event names: add new ones, never rename.
//!
//! Every rejection is the peer's doing, never a fault of this node, so
//! there is nothing to retry: the caller drops the envelope, records it, and carries on.

use std::fmt;

/// The stable code of a [`Rejection`], as written in logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// `malformed`: not a well-formed sealed envelope.
    Malformed,
    /// `bad_signature`: not signed by the TLS peer's key.
    BadSignature,
    /// `sender_mismatch`: signed by the TLS peer but naming someone else as sender.
    SenderMismatch,
    /// `wrong_recipient`: addressed to another node.
    WrongRecipient,
    /// `stale_incarnation`: from a run of the sender older than one already heard from.
    StaleIncarnation,
    /// `replay`: a sequence number already accepted, or too old to tell.
    Replay,
    /// `other_cluster`: from a node of another cluster (`cluster/identity.rs`).
    OtherCluster,
}

impl Reason {
    /// Every reason, in a fixed order (that of the rejection counters).
    pub const ALL: [Reason; 7] = [
        Reason::Malformed,
        Reason::BadSignature,
        Reason::SenderMismatch,
        Reason::WrongRecipient,
        Reason::StaleIncarnation,
        Reason::Replay,
        Reason::OtherCluster,
    ];

    /// The code: `malformed`, `bad_signature`, `sender_mismatch`, `wrong_recipient`,
    /// `stale_incarnation`, `replay` or `other_cluster`. (`skew` was retired when clock
    /// skew became a warning, `clock_log.rs`.)
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Malformed => "malformed",
            Reason::BadSignature => "bad_signature",
            Reason::SenderMismatch => "sender_mismatch",
            Reason::WrongRecipient => "wrong_recipient",
            Reason::StaleIncarnation => "stale_incarnation",
            Reason::Replay => "replay",
            Reason::OtherCluster => "other_cluster",
        }
    }

    /// The position of this reason in [`Reason::ALL`].
    pub(super) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why [`super::Gate::open`] refused an envelope.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// Not a well-formed sealed envelope: too large, cut short, trailing bytes, a signed
    /// body that is not an envelope, an overlong name.
    #[error("malformed envelope: {what}{}", Cause(.cause))]
    Malformed {
        /// What is wrong with it.
        what: &'static str,
        /// The decoder's complaint, when the decoder found the fault.
        cause: Option<postcard::Error>,
    },

    /// The signature does not verify under the TLS peer's key: tampered with, or signed by
    /// someone else.
    #[error("bad signature: the envelope is not signed by the TLS peer's key")]
    BadSignature,

    /// Correctly signed by the TLS peer, but naming another node as its sender.
    #[error("the envelope's sender {sender:?} is not the TLS peer {tls_peer:?}")]
    SenderMismatch {
        /// The sender the envelope names.
        sender: String,
        /// The name in the TLS peer's certificate.
        tls_peer: String,
    },

    /// Addressed to another node.
    #[error("the envelope is addressed to {recipient:?}, not to this node ({me:?})")]
    WrongRecipient {
        /// The recipient the envelope names.
        recipient: String,
        /// This node's name.
        me: String,
    },

    /// From an earlier run of the sender than one this node has already accepted from.
    #[error("stale incarnation {incarnation}: the sender has since sent as incarnation {current}")]
    StaleIncarnation {
        /// The envelope's incarnation.
        incarnation: u64,
        /// The highest incarnation accepted from the sender.
        current: u64,
    },

    /// A sequence number already accepted, or one too old to be sure it was not.
    #[error("replayed envelope (incarnation {incarnation}, seq {seq}): {why}")]
    Replay {
        /// The envelope's incarnation.
        incarnation: u64,
        /// The envelope's sequence number.
        seq: u64,
        /// Which of the replay rules refused it.
        why: &'static str,
    },

    /// From a node of another cluster: both nodes trust one CA and use the same names,
    /// and one reached the other's address.
    #[error(
        "the sender is a node of cluster {theirs}, and this node is of cluster {ours}: a node \
         of the cluster as it was before a `tenure recover` or `snapshot restore` came back \
         (empty its data dir and start it with `join`), or two clusters share a CA and node \
         names and one reached the other's address (fix the address, or give each cluster \
         its own CA)"
    )]
    OtherCluster {
        /// The sender's cluster.
        theirs: crate::cluster::ClusterId,
        /// This node's.
        ours: crate::cluster::ClusterId,
    },
}

impl Rejection {
    /// The stable code for logs and metrics, e.g. `bad_signature`.
    pub fn reason(&self) -> &'static str {
        self.kind().as_str()
    }

    /// The [`Reason`] this rejection is counted under.
    pub fn kind(&self) -> Reason {
        match self {
            Rejection::Malformed { .. } => Reason::Malformed,
            Rejection::BadSignature => Reason::BadSignature,
            Rejection::SenderMismatch { .. } => Reason::SenderMismatch,
            Rejection::WrongRecipient { .. } => Reason::WrongRecipient,
            Rejection::StaleIncarnation { .. } => Reason::StaleIncarnation,
            Rejection::Replay { .. } => Reason::Replay,
            Rejection::OtherCluster { .. } => Reason::OtherCluster,
        }
    }

    /// A malformed envelope that the decoder accepted but a check of ours refused.
    pub(super) fn malformed(what: &'static str) -> Rejection {
        Rejection::Malformed { what, cause: None }
    }

    /// A malformed envelope that the decoder refused.
    pub(super) fn malformed_by(what: &'static str, cause: postcard::Error) -> Rejection {
        Rejection::Malformed {
            what,
            cause: Some(cause),
        }
    }
}

/// Shows a decoder error after a colon, or nothing.
struct Cause<'a>(&'a Option<postcard::Error>);

impl fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(cause) => write!(f, " ({cause})"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_and_indices_match_all() {
        let codes: Vec<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            codes,
            [
                "malformed",
                "bad_signature",
                "sender_mismatch",
                "wrong_recipient",
                "stale_incarnation",
                "replay",
                "other_cluster"
            ]
        );
        for (i, reason) in Reason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), i);
        }
    }

    #[test]
    fn messages_carry_the_decoder_s_cause() {
        let malformed = Rejection::malformed_by(
            "not a sealed envelope",
            postcard::Error::DeserializeUnexpectedEnd,
        );
        assert!(
            malformed
                .to_string()
                .starts_with("malformed envelope: not a sealed envelope (")
        );
        assert_eq!(
            Rejection::malformed("x").to_string(),
            "malformed envelope: x"
        );
    }
}

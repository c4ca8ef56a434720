//! The receiving side: every check an incoming envelope must pass, in one function.
//!
//! A node has one [`Gate`], shared by its connections (`Arc<Gate>`). [`Gate::open`] runs the
//! checks in the order the module essay gives and explains: structure, signature, sender,
//! recipient, cluster, replay. The send time is not checked: a clock that is off is
//! reported (`clock_log.rs`), not refused. All but the last are pure functions of the envelope and the
//! arguments; the replay state is the only thing shared, behind a mutex held for a map
//! lookup and a few bit operations, never across a signature check.
//!
//! `open` has no failure mode of its own: it never panics on input, never blocks on
//! anything but that short lock, and never logs (the caller passes rejections to
//! [`super::RejectLog`]), so a flood of bad envelopes costs the node CPU and nothing else.

use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::cluster::ClusterCell;
use crate::pki::Verifier;

use super::replay::ReplayTable;
use super::wire::{self, Envelope};
use super::{DEFAULT_MAX_SENDERS, DOMAIN, Rejection};

/// Checks incoming envelopes for one receiving node and remembers what it accepted.
pub struct Gate {
    me: String,
    /// This node's cluster, once known: envelopes of another are refused.
    cluster: ClusterCell,
    replay: Mutex<ReplayTable>,
}

impl Gate {
    /// A gate for node `me`, remembering up to [`DEFAULT_MAX_SENDERS`] senders.
    pub fn new(me: String) -> Gate {
        Gate::with_max_senders(me, DEFAULT_MAX_SENDERS)
    }

    /// Like [`Gate::new`], remembering at most `max_senders` senders (at least one).
    pub fn with_max_senders(me: String, max_senders: usize) -> Gate {
        Gate {
            me,
            cluster: ClusterCell::default(),
            replay: Mutex::new(ReplayTable::new(max_senders)),
        }
    }

    /// The same gate, refusing envelopes of a cluster other than the one `cluster`
    /// holds once it holds one.
    pub fn in_cluster(mut self, cluster: ClusterCell) -> Gate {
        self.cluster = cluster;
        self
    }

    /// Checks `wire`, received over a TLS connection from `tls_peer` (the name in the
    /// peer's certificate, whose key `verifier` holds). Returns the envelope if it passes
    /// every check, and then remembers it so that it cannot pass again.
    pub fn open(
        &self,
        wire: &[u8],
        tls_peer: &str,
        verifier: &Verifier,
    ) -> Result<Envelope, Rejection> {
        let (body, signature) = wire::decode_sealed(wire)?;

        let mut signed = Vec::with_capacity(DOMAIN.len() + body.len());
        signed.extend_from_slice(DOMAIN);
        signed.extend_from_slice(body);
        verifier
            .verify(&signed, signature)
            .map_err(|_| Rejection::BadSignature)?;
        drop(signed);

        let envelope = wire::decode_body(body)?;
        if envelope.sender != tls_peer {
            return Err(Rejection::SenderMismatch {
                sender: envelope.sender,
                tls_peer: tls_peer.to_owned(),
            });
        }
        if envelope.recipient != self.me {
            return Err(Rejection::WrongRecipient {
                recipient: envelope.recipient,
                me: self.me.clone(),
            });
        }
        // Either side may not know its cluster yet (a new store, an operator): only two
        // known ids can disagree.
        if let (Some(theirs), Some(&ours)) = (envelope.cluster, self.cluster.get())
            && theirs != ours
        {
            return Err(Rejection::OtherCluster { theirs, ours });
        }
        self.lock().admit(
            &envelope.sender,
            envelope.incarnation,
            envelope.seq,
            envelope.sent_at_ms,
        )?;
        Ok(envelope)
    }

    /// The name of the node this gate admits envelopes for.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// Forgets the replay state of `sender`, a member the cluster removed, so that a new
    /// run under its name (a wiped node rejoining, perhaps with a clock behind the old
    /// run's) is not refused as a stale incarnation of the old one.
    pub fn forget(&self, sender: &str) {
        self.lock().forget(sender);
    }

    /// How many senders' replay state the gate holds (for metrics).
    pub fn tracked_senders(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, ReplayTable> {
        // Nothing panics while the lock is held; were it ever poisoned, the table would still
        // be consistent (each admission changes it only after its last check), so carry on
        // rather than turn one bug into a node that refuses everything.
        self.replay.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate")
            .field("me", &self.me)
            .field("tracked_senders", &self.tracked_senders())
            .finish()
    }
}

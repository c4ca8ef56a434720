//! Replicas agree (issue 25, item 7): a check that every member's applied state is the
//! leader's, like etcd's corruption check.
//!
//! Raft makes every replica apply the same entries in the same order, and
//! [`Cluster::apply`] is deterministic, so replicas at one index hold the same state. Two
//! things can still break that, and neither shows until owners disagree: a replica whose
//! store was damaged (a disk that returns other bytes, a file edited by hand), and two
//! builds whose `apply` rules differ on the same entry (the version skew issue 25's gate
//! exists to prevent). So:
//!
//! - Every replica hashes its applied state (SHA-256 of its postcard encoding: ordered
//!   maps only, so equal states give equal bytes) after each entry whose index is a
//!   multiple of [`EVERY`], and keeps the last [`KEPT`] of those hashes. The state is
//!   encoded under the apply lock (it must be the state at that index) and hashed on a
//!   blocking thread after the lock is let go, so readers of the state wait for a copy,
//!   not for SHA-256 over every saved state. A replica that installs a snapshot starts its
//!   list afresh.
//! - The leader asks every other member for its list ([`REPLICA_HASHES`]) every
//!   `replica_check` (config, default [`DEFAULT_CHECK_EVERY`]) and compares the indexes
//!   both lists hold. A difference is an alarm: a `replica.diverged` ERROR naming the
//!   member and the index, the `tenure_replica_diverged` metric and `tenure status`. The
//!   alarm stays until a later comparison finds the member's newest common hash equal
//!   again (its data dir was rebuilt, or a snapshot replaced its state).
//!
//! The alarm changes nothing else: which replica is wrong is for the operator to find
//! (the leader's is the one every grant comes from), and acting on a wrong guess would be
//! worse than the alarm.
//!
//! [`Cluster::apply`]: crate::cluster::Cluster::apply

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use tokio::sync::watch;

use super::Shared;
use super::kinds::REPLICA_HASHES;

/// A replica hashes its state at every log index that is a multiple of this.
pub const EVERY: u64 = 16;
/// How many hashes a replica keeps (the last [`EVERY`] × this indexes).
pub const KEPT: usize = 32;
/// How often the leader compares, by default.
pub const DEFAULT_CHECK_EVERY: Duration = Duration::from_secs(30);
/// How long the leader waits for one member's list.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// The test-only switch of a replica that goes wrong: this node drops every saved state
/// it applies, so its state differs from the others' (the check must catch it).
pub const UNSAFE_CORRUPT_REPLICA: &str = "TENURE_UNSAFE_CORRUPT_REPLICA";

/// One hash: the state after applying the entry at `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hashed {
    pub index: u64,
    pub sha256: [u8; 32],
}

/// A member whose replica differs from the leader's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// The first index whose hashes differ, in the last comparison.
    pub index: u64,
}

/// A replica's recent hashes, and (on the leader) the members found to differ.
#[derive(Debug, Default)]
pub(crate) struct Checksums {
    recent: Mutex<VecDeque<Hashed>>,
    diverged: Mutex<BTreeMap<String, Divergence>>,
}

impl Checksums {
    /// Whether the state after the entry at `index` is one to hash.
    pub(crate) fn due(index: u64) -> bool {
        index != 0 && index.is_multiple_of(EVERY)
    }

    /// Records the hash of `encoded`, the state after the entry at `index`.
    pub(crate) fn record(&self, index: u64, encoded: &[u8]) {
        let hashed = Hashed {
            index,
            sha256: Sha256::digest(encoded).into(),
        };
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.len() >= KEPT {
            recent.pop_front();
        }
        // Hashed off the apply path (`state_machine.rs`), so kept in index order here.
        let at = recent.partition_point(|h| h.index < index);
        recent.insert(at, hashed);
    }

    /// Forgets the hashes: the state was replaced (a snapshot was installed).
    pub(crate) fn replaced(&self) {
        self.recent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// The hashes kept, oldest first.
    pub(crate) fn list(&self) -> Vec<Hashed> {
        self.recent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied()
            .collect()
    }

    /// The members whose replicas differ from this leader's, as last compared.
    pub(crate) fn diverged(&self) -> BTreeMap<String, Divergence> {
        self.diverged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Takes the comparison of `member`'s list and reports a change of its alarm.
    fn judge(&self, member: &str, verdict: Comparison) {
        let mut diverged = self.diverged.lock().unwrap_or_else(PoisonError::into_inner);
        match verdict {
            Comparison::Differ { index } => {
                // Said once per divergence: the first differing index moves on as old
                // hashes roll out of the lists.
                let new = !diverged.contains_key(member);
                diverged.insert(member.to_owned(), Divergence { index });
                if new {
                    tracing::error!(
                        event = crate::events::REPLICA_DIVERGED,
                        node = member,
                        index,
                        "the replica of {member} differs from this leader's at log index {index}: \
                         the same entries applied gave another state (a damaged data dir, or \
                         builds whose rules differ). Grants go on from the leader's state; \
                         compare the builds (`tenure --version` on each node), and rebuild \
                         {member}'s data dir from the cluster (stop it, `tenure member remove \
                         {member}`, empty its data dir, start it with `join`)"
                    );
                }
            }
            Comparison::Agree => {
                if diverged.remove(member).is_some() {
                    tracing::info!(
                        event = crate::events::REPLICA_DIVERGED,
                        node = member,
                        "the replica of {member} agrees with this leader's again"
                    );
                }
            }
            Comparison::NothingInCommon => {}
        }
    }

    /// Keeps the alarms of `members` only: a member that left is no longer compared, and
    /// a node that stopped leading keeps none (another leader compares now).
    fn keep_alarms_of(&self, members: &[String]) {
        self.diverged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|name, _| members.contains(name));
    }
}

/// What two replicas' lists say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Comparison {
    /// Every index both hold has the same hash.
    Agree,
    /// The hashes of `index` (the first such index) differ.
    Differ { index: u64 },
    /// No index in both lists (one replica is far behind, or has just started).
    NothingInCommon,
}

/// Compares the indexes both lists hold. A member whose newest common hash agrees again
/// after an older difference (its state was rebuilt) agrees.
pub(crate) fn compare(ours: &[Hashed], theirs: &[Hashed]) -> Comparison {
    let ours: BTreeMap<u64, [u8; 32]> = ours.iter().map(|h| (h.index, h.sha256)).collect();
    let common: Vec<(u64, bool)> = theirs
        .iter()
        .filter_map(|h| ours.get(&h.index).map(|o| (h.index, *o == h.sha256)))
        .collect();
    match common.iter().max_by_key(|(index, _)| *index) {
        None => Comparison::NothingInCommon,
        Some((_, true)) => Comparison::Agree,
        Some(_) => {
            let first = common
                .iter()
                .filter(|(_, same)| !same)
                .map(|(index, _)| *index)
                .min()
                .unwrap_or_default();
            Comparison::Differ { index: first }
        }
    }
}

/// The leader's side: every `every`, while this node leads, compares each other member's
/// hashes with its own. Ends when `stop` turns true.
pub(crate) async fn check(shared: Arc<Shared>, every: Duration, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            _ = tokio::time::sleep(every) => {}
        }
        if !shared.is_leader() {
            shared.checksums.keep_alarms_of(&[]);
            continue;
        }
        let Ok(attached) = shared.attached() else {
            continue;
        };
        let members: Vec<(String, String)> = {
            let metrics = shared.metrics.borrow();
            metrics
                .membership_config
                .membership()
                .nodes()
                .filter(|(id, _)| **id != shared.me)
                .map(|(_, peer)| (peer.name.clone(), peer.addr.clone()))
                .collect()
        };
        let names: Vec<String> = members.iter().map(|(name, _)| name.clone()).collect();
        shared.checksums.keep_alarms_of(&names);
        for (name, addr) in members {
            let Ok(sock) = super::network::resolve(&addr).await else {
                continue;
            };
            let call = attached.rpc.call(&name, sock, REPLICA_HASHES, Vec::new());
            let Ok(Ok(bytes)) = tokio::time::timeout(ASK_TIMEOUT, call).await else {
                continue;
            };
            let Ok(theirs) = crate::rpc::decode::<Vec<Hashed>>(&bytes) else {
                continue;
            };
            let ours = shared.checksums.list();
            shared.checksums.judge(&name, compare(&ours, &theirs));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;

    fn digest(cluster: &Cluster) -> [u8; 32] {
        Sha256::digest(cluster.encode().unwrap()).into()
    }

    fn h(index: u64, byte: u8) -> Hashed {
        Hashed {
            index,
            sha256: [byte; 32],
        }
    }

    #[test]
    fn lists_are_compared_on_the_indexes_both_hold() {
        let ours = [h(16, 1), h(32, 2), h(48, 3)];
        assert_eq!(
            compare(&ours, &[h(32, 2), h(48, 3), h(64, 4)]),
            Comparison::Agree
        );
        assert_eq!(
            compare(&ours, &[h(32, 2), h(48, 9)]),
            Comparison::Differ { index: 48 }
        );
        assert_eq!(
            compare(&ours, &[h(16, 7), h(32, 8), h(48, 9)]),
            Comparison::Differ { index: 16 }
        );
        assert_eq!(compare(&ours, &[h(64, 4)]), Comparison::NothingInCommon);
        // Rebuilt since: the newest common hash agrees.
        assert_eq!(compare(&ours, &[h(16, 7), h(48, 3)]), Comparison::Agree);
    }

    #[test]
    fn a_replica_hashes_every_sixteenth_index_and_keeps_a_bounded_list_in_order() {
        let sums = Checksums::default();
        let mut cluster = Cluster::default();
        let encoded = cluster.encode().unwrap();
        for index in (1..=EVERY * (KEPT as u64 + 3)).rev() {
            if Checksums::due(index) {
                sums.record(index, &encoded);
            }
        }
        let list = sums.list();
        assert_eq!(list.len(), KEPT);
        assert!(list.iter().all(|h| h.index % EVERY == 0));
        assert!(
            list.windows(2).all(|w| w[0].index < w[1].index),
            "in index order"
        );
        // Equal states hash equal; a different one does not.
        assert_eq!(digest(&cluster), list[0].sha256);
        cluster.preferred.insert("r".into(), BTreeMap::new());
        assert_ne!(digest(&cluster), list[0].sha256);
        sums.replaced();
        assert!(sums.list().is_empty());
    }

    #[test]
    fn an_alarm_is_raised_once_and_lifted_when_the_member_agrees_again() {
        let sums = Checksums::default();
        sums.judge("n3", Comparison::Differ { index: 48 });
        sums.judge("n3", Comparison::Differ { index: 64 });
        assert_eq!(sums.diverged()["n3"], Divergence { index: 64 });
        sums.judge("n4", Comparison::Differ { index: 64 });
        sums.keep_alarms_of(&["n3".to_owned()]);
        assert!(
            !sums.diverged().contains_key("n4"),
            "n4 left: its alarm goes"
        );
        sums.judge("n3", Comparison::NothingInCommon);
        assert!(sums.diverged().contains_key("n3"));
        sums.judge("n3", Comparison::Agree);
        assert!(sums.diverged().is_empty());
    }
}

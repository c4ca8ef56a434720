//! A restarted voter waits to hear from the leader before it may start an election.
//!
//! openraft 0.9 has no PreVote. A voter that comes back after a crash has heard from no
//! leader in this run, so its election timer fires after one timeout; the leader, whose
//! link to the dead node is in backoff (`link.rs`) and whose old connection may still be
//! draining, often has not reached it by then. The restarted node then campaigns with a
//! higher term; it cannot win (its peers are within their leader lease), but the leader
//! sees the higher term in the next replication answer and steps down, and the whole
//! cluster waits for a new election: a node restart became a leader outage, and leases
//! lapse across the cluster when the TTL is short.
//!
//! So a node whose store already holds a group of several voters starts with elections
//! off, and turns them on when the first AppendEntries arrives (a leader exists and has
//! reached it) or after [`HOLD`] (there may be no leader at all: the whole cluster
//! restarted). A fresh node (it bootstraps, which elects at once, or joins as a learner,
//! which never campaigns) and a one-voter group elect as usual.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Shared;

/// The longest a restarted voter holds its elections: long enough for the leader's probe
/// of the dead peer that was in flight when it came back (a dial, at most 1 s), the
/// backoff after it (at most 250 ms, `link.rs`) and a new handshake.
pub(super) const HOLD: Duration = Duration::from_secs(2);

/// Whether the store's group needs a restarted node to hold its elections: its effective
/// membership (read inside Raft, which loaded it from the store) has several voters.
pub(super) async fn should_hold(shared: &Shared) -> bool {
    shared
        .raft
        .with_raft_state(|state| state.membership_state.effective().voter_ids().count() > 1)
        .await
        .unwrap_or(false)
}

/// Turns elections on once a leader has reached this node, or after [`HOLD`].
pub(super) async fn release(shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) {
    let mut appends = shared.appends.subscribe();
    appends.borrow_and_update();
    let heard = tokio::select! {
        changed = appends.changed() => changed.is_ok(),
        _ = tokio::time::sleep(HOLD) => false,
        _ = stopped.wait_for(|s| *s) => return,
    };
    tracing::info!(
        event = crate::events::CLUSTER_REJOINED,
        heard,
        "elections on: {}",
        if heard {
            "a leader reached this node"
        } else {
            "no leader reached this node in time"
        }
    );
    shared.raft.runtime_config().elect(true);
}

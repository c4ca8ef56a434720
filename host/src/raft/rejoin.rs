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
//! restarted). A one-voter group elects as usual, and so does a node that joins (as a
//! learner, which never campaigns).
//!
//! **Fresh initial members** (issue 30). Bootstrapping a group makes openraft campaign at
//! once (`Raft::initialize` elects), and a member whose peers formed the cluster while it
//! was not running yet campaigns into a cluster that has a leader: with a term-1 leader
//! its vote (1, itself) outranks the leader's when its node id is higher (openraft 0.9
//! orders votes of one term by node id), and every timed-out campaign after it raises the
//! term, so the leader's next append to it meets a higher vote and the leader steps down.
//! So of the initial members only one bootstraps at once: the one with the lowest node
//! id ([`campaigns_first`]), whose term-1 vote is below every other member's. Every other
//! fresh member first waits to be reached: a leader's first append brings it the
//! membership, and then it has nothing to bootstrap and joins that leader without a
//! campaign. It bootstraps itself only if no leader reached it within [`HOLD`] (the
//! first member is down, or this one is cut off). A new cluster is not slowed: the first
//! member campaigns as soon as it starts, a member waiting to be reached grants its vote
//! (a node without a membership votes), and the first append ends the wait. Only a
//! formation without the first member waits [`HOLD`] for its first election.
//!
//! The first member waits as well when it starts after the others formed the cluster
//! without it (they waited [`HOLD`] for it, then formed it): a peer's answer to
//! `forming.rs` says it formed a cluster, so a leader may exist. Its own campaign would
//! not win (its log is empty) but could depose that leader: its term-1 vote is below
//! the leader's, yet a campaign that times out raises its term, and openraft holds the
//! next one only an election timeout plus `2 × election_max` after it saw a longer log,
//! which at TTL 500 ms (about 190 ms) is as long as the leader's probe of a link in
//! backoff can take (up to 250 ms, `link.rs`, plus a dial). Seen once in 15 runs
//! (`tests/cluster.rs` `a_late_first_member_does_not_depose_the_leader`: the term went
//! from 1 to 4). What it does not do: hold a member that bootstrapped after [`HOLD`], or
//! a voter that campaigns after [`HOLD`] because it is cut off (a node returning from a
//! partition may force one election, as without PreVote anywhere).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{NodeId, Shared};

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
    shared
        .step_back
        .hold(&shared.raft, super::step_back::Hold::Rejoin, false);
}

/// Whether this node is the initial member that bootstraps at once: the lowest node id of
/// `members` (this node among them).
pub(super) fn campaigns_first(me: NodeId, members: impl IntoIterator<Item = NodeId>) -> bool {
    members.into_iter().min().is_none_or(|first| first == me)
}

/// Waits until a leader has brought this fresh node a membership, or [`HOLD`]; whether
/// one did.
pub(super) async fn reached(shared: &Shared) -> bool {
    let mut metrics = shared.metrics.clone();
    let has_members =
        |m: &super::Metrics| m.membership_config.membership().nodes().next().is_some();
    tokio::time::timeout(HOLD, metrics.wait_for(has_members))
        .await
        .is_ok_and(|r| r.is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_node_id_campaigns_first() {
        assert!(campaigns_first(3, [7, 3, 9]));
        assert!(!campaigns_first(7, [7, 3, 9]));
        assert!(campaigns_first(7, [7]));
    }
}

//! A candidate whose log is behind a voter's steps back for a while.
//!
//! openraft 0.9 has no PreVote, and orders the votes of one term by member id. A voter
//! that cannot win (its log is behind, or the voters of the membership it holds are gone:
//! it missed the change that replaced them, `healing_tests.rs`) still campaigns at every
//! election timeout, and so raises its term as fast as the candidate that could win. Seen
//! with member ids of a name and a store (`types.rs`): the stale voter's timer fired first
//! every round, it voted for itself in the term the other candidate asked for, and where
//! its id was the higher one it refused that candidate every round; no leader for 20 s
//! and more. With ids of names the order happened to favour the other candidate.
//!
//! So a vote that shows a voter with a longer log than this node's (this node's request
//! refused by it, or its request refused by this node) turns this node's elections off for
//! [`STEP_BACK`] election timeouts: the voters with the longer log campaign without it,
//! and it grants them its vote (their log is at least as long). It never stops a node that could win: a longer log than every voter's is never
//! refused for its log. Turning elections off is always safe; they come back on by
//! themselves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Notify, watch};

use super::Shared;
use super::types::{LogId, VoteResponse};

/// How many of the longest election timeouts a candidate that was behind stays back.
const STEP_BACK: u32 = 3;

/// Said when a vote shows this node's log is behind a voter's that it is in the way of;
/// and which of the two reasons to hold elections hold them now (this one, and a
/// restarted voter's wait for its leader, `rejoin.rs`): elections are on only when
/// neither does, so neither ends the other's early.
#[derive(Default)]
pub(crate) struct StepBack {
    asked: AtomicBool,
    notify: Notify,
    holds: std::sync::Mutex<Holds>,
}

/// What holds this node's elections.
#[derive(Default)]
struct Holds {
    rejoin: bool,
    step_back: bool,
}

/// A reason to hold elections.
#[derive(Clone, Copy)]
pub(crate) enum Hold {
    /// A restarted voter waits for its leader (`rejoin.rs`).
    Rejoin,
    /// A candidate behind a voter in its way (this module).
    StepBack,
}

impl StepBack {
    /// A voter's answer to this node's vote request of last log id `mine`: refused by a
    /// voter with a longer log, this node cannot win against it.
    pub(crate) fn answered(&self, mine: Option<LogId>, answer: &VoteResponse) {
        if !answer.vote_granted && answer.last_log_id > mine {
            self.ask();
        }
    }

    /// This node's answer (`answer`, its own last log id in it) to a candidate whose last
    /// log id is `theirs`: refused although the candidate's log is longer, this node is in
    /// its way (it voted for itself in that term). The case of a voter that missed a
    /// membership change: it asks only the voters it knows, never the candidate that
    /// could win, so only that candidate's request tells it.
    pub(crate) fn refused(&self, theirs: Option<LogId>, answer: &VoteResponse) {
        if !answer.vote_granted && theirs > answer.last_log_id {
            self.ask();
        }
    }

    fn ask(&self) {
        self.asked.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Sets or clears the hold `hold`, and turns `raft`'s elections on only when no hold
    /// remains.
    pub(crate) fn hold(&self, raft: &super::types::Raft, hold: Hold, on: bool) {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        match hold {
            Hold::Rejoin => holds.rejoin = on,
            Hold::StepBack => holds.step_back = on,
        }
        raft.runtime_config()
            .elect(!holds.rejoin && !holds.step_back);
    }

    /// Whether a restarted voter's wait holds elections now.
    fn rejoining(&self) -> bool {
        self.holds.lock().unwrap_or_else(|e| e.into_inner()).rejoin
    }
}

/// The background task: turns elections off for a while each time the network says so.
/// Ends when `stop` turns true.
pub(crate) async fn keep(
    shared: Arc<Shared>,
    step_back: Arc<StepBack>,
    mut stop: watch::Receiver<bool>,
) {
    let hold = shared.options.election_max * STEP_BACK;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = step_back.notify.notified() => {}
        }
        // Elections are off anyway while a restarted voter waits for its leader.
        if !step_back.asked.swap(false, Ordering::SeqCst) || step_back.rejoining() {
            continue;
        }
        step_back.hold(&shared.raft, Hold::StepBack, true);
        tracing::info!(
            event = crate::events::CLUSTER_REJOINED,
            hold_ms = hold.as_millis() as u64,
            "a voter's log is longer than this node's: elections off for {hold:?}, so that a candidate that can win does"
        );
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(hold) => {}
        }
        step_back.asked.store(false, Ordering::SeqCst);
        step_back.hold(&shared.raft, Hold::StepBack, false);
    }
}

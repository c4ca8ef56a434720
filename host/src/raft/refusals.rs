//! What the control plane refused from authenticated members, counted and logged.
//!
//! A member's certificate proves who it is; these are the messages it sent that were
//! not its business (see `service.rs` and `cluster/authorize.rs`):
//! - [`Refusal::Forbidden`]: a proposal it may not make (a command about another node,
//!   or one only the leader or an operator may make);
//! - [`Refusal::NotAMember`]: a Raft vote, append or snapshot from a node that is not a
//!   member this node knows of;
//! - [`Refusal::JoinForAnother`]: a join naming a node other than the sender;
//! - [`Refusal::OlderVersion`]: any message from a node whose connection speaks less than
//!   the cluster's version (an older build, `crate::version`);
//! - [`Refusal::Misaddressed`]: a Raft message that names another store of this node's
//!   name (`service.rs`): its sender's replica knows an earlier store of this name, one
//!   whose disk was wiped or replaced before this node rejoined;
//! - [`Refusal::RemovedStore`]: a join from a process whose store is not its name's
//!   member's: the member was removed with that store, or runs on another
//!   (`membership.rs`; the state machine refuses such a process's commands too:
//!   `cluster/once.rs`); or a Raft message from a store the member was removed with
//!   (`service.rs`).
//!
//! Each is counted (`tenure_control_refused_total`) and logged as `security.rejected`,
//! at most [`LOG_LIMIT`] lines a minute per reason: a hostile member could otherwise fill
//! the disk, and a node of an older build that keeps calling must not use up the lines
//! that would show a forbidden proposal.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::ratelimit::RateLimiter;

/// Log lines per minute, per reason.
const LOG_LIMIT: u32 = 20;

/// Why a member's message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Forbidden,
    NotAMember,
    JoinForAnother,
    OlderVersion,
    Misaddressed,
    RemovedStore,
}

impl Refusal {
    pub const ALL: [Refusal; 6] = [
        Refusal::Forbidden,
        Refusal::NotAMember,
        Refusal::JoinForAnother,
        Refusal::OlderVersion,
        Refusal::Misaddressed,
        Refusal::RemovedStore,
    ];

    /// The metric label and the log's `reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Forbidden => "forbidden",
            Refusal::NotAMember => "not-a-member",
            Refusal::JoinForAnother => "join-for-another",
            Refusal::OlderVersion => "older-version",
            Refusal::Misaddressed => "misaddressed",
            Refusal::RemovedStore => "removed-store",
        }
    }
}

/// The counters and the log's rate limit.
pub(crate) struct Refusals {
    counts: [AtomicU64; 6],
    logs: [Mutex<RateLimiter>; 6],
}

impl Default for Refusals {
    fn default() -> Refusals {
        Refusals {
            counts: Default::default(),
            logs: std::array::from_fn(|_| {
                Mutex::new(RateLimiter::new(LOG_LIMIT, Duration::from_secs(60)))
            }),
        }
    }
}

impl Refusals {
    /// Counts a refusal of `what` from `peer` and logs it if the rate allows.
    pub fn record(&self, why: Refusal, peer: &str, error: &str) {
        self.counts[why as usize].fetch_add(1, Ordering::Relaxed);
        let admitted = self.logs[why as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(Instant::now());
        if let Some(held_back) = admitted {
            tracing::warn!(
                event = crate::events::SECURITY_REJECTED,
                %peer,
                reason = why.as_str(),
                %error,
                held_back,
                "refused a member's message"
            );
        }
    }

    /// Each reason with its count.
    pub fn counts(&self) -> Vec<(Refusal, u64)> {
        Refusal::ALL
            .iter()
            .map(|why| (*why, self.counts[*why as usize].load(Ordering::Relaxed)))
            .collect()
    }
}

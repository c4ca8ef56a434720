//! The renewal round: a leader tells its voters when it received the renewals it is about
//! to acknowledge, so that its successor can start each session's clock from that
//! session's own last renewal (issue 30 item 4).
//!
//! **Why.** The lease handoff (`handoff.rs`) gives a new leader one base for every
//! session: the last time a majority heard the old leader. When the old leader was also
//! an owner and died, that is about its death, so its slots moved a whole TTL after the
//! kill, while a dead follower's slots move a TTL after its last renewal (T minus the
//! renewal's age). The old leader knew each renewal's receive time; openraft 0.9's
//! heartbeats cannot carry it, so this round of our own does.
//!
//! **The round.** A renewal is acknowledged (`session::answer`) only after the Raft
//! heartbeat round and this round both reached a quorum (a majority of each voter set)
//! that started after it arrived. This round carries, per session waiting on it, how long
//! before sending the leader received its renewal. A voter takes it only from the leader
//! it follows in that term, and records, under the same gate as its hearings, the receive
//! time it implies, erring late (`raft/heard.rs`, "Renewals"). The leader records its own
//! first. Rounds are shared as the Raft rounds are (`raft/rounds.rs`): a renewal that
//! arrives while one is in flight goes with the next.
//!
//! **The argument** (the handoff's, per session). Let a be the receive time of the last
//! renewal of session s that the old leader L1 acknowledged. Its owner's deadline is at
//! most a + T − m. Some quorum Q took a round of L1 that started after a and carried s;
//! each voter of Q recorded a time at or after a for s, of L1's term, and heard L1 then.
//! The new leader L2 asks a quorum M (`handoff.rs`); M meets Q in some voter w, which
//! answers after it moved past L1's term (so it took nothing of L1's after). w's answer
//! for s is either its record or, where it cannot say, its answer for the whole node,
//! which is later than a (it heard L1 after a). A record it answers with is of the
//! latest term below L2's that it heard: L1's, and then L1's latest record of s, at or
//! after a; or a later leader's, elected after a (its electing quorum met Q in a voter
//! that took L1's round before it voted), and a leader times a renewal only once it
//! leads. L2 takes
//! per session the latest over M, each erring late, so the session's clock starts at or
//! after a, and the session expires after its owner's deadline. A voter that only heard
//! a leader which acknowledged renewals without a round (its replica below
//! [`crate::version::RENEWAL_ROUNDS`]) keeps only records of an older term than that
//! hearing, which it then answers as "cannot say".
//!
//! Until the cluster's version is [`crate::version::RENEWAL_ROUNDS`], no round is sent
//! (a version 6 node does not know the kind), and renewals are acknowledged as before.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use super::handoff::quorum;
use super::shared::Shared;
use crate::raft::Rounds;

/// The message kind of a renewal round (see `crate::raft` for the numbering).
pub const RENEWAL_ROUND: u16 = 22;

/// A renewal round of the leader of `term`: per session, how many microseconds before
/// sending the leader received the renewal this round confirms. The answer is `()`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Carried {
    pub term: u64,
    pub renewals: Vec<(u64, u64)>,
}

/// The leader's rounds, and the renewals waiting for the next one.
#[derive(Default)]
pub struct RenewalRounds {
    waiting: Mutex<Vec<(u64, Instant)>>,
    rounds: Rounds<String>,
}

/// Confirms, on the leader of `term`, that a quorum of voters recorded the renewal of
/// `session` received at `received`, in a round that started after it arrived. Does
/// nothing while the cluster's version is below [`crate::version::RENEWAL_ROUNDS`].
pub async fn confirm(
    shared: &Arc<Shared>,
    term: u64,
    session: u64,
    received: Instant,
) -> Result<(), String> {
    if shared.read(|c| c.version) < crate::version::RENEWAL_ROUNDS {
        return Ok(());
    }
    let rounds = &shared.renewal_rounds;
    rounds
        .waiting
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((session, received));
    // After the push: a round that starts after this takes the renewal with it.
    let called = Instant::now();
    rounds.rounds.confirm(called, round(shared, term)).await
}

/// One round: takes every renewal waiting, records them here, and sends them to the other
/// voters until a majority of each voter set (this node counted) took them.
async fn round(shared: &Arc<Shared>, term: u64) -> Result<(), String> {
    let renewals = std::mem::take(
        &mut *shared
            .renewal_rounds
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner()),
    );
    if shared.control.term() != term || !shared.control.is_leader() {
        return Err(format!("no longer the leader of term {term}"));
    }
    let sets = shared.control.voter_sets();
    let voters = shared.control.members().voters;
    shared.control.record_renewals(term, &renewals);
    let sent = Instant::now();
    let carried = Arc::new(Carried {
        term,
        renewals: renewals
            .iter()
            .map(|&(session, at)| (session, micros(sent.saturating_duration_since(at))))
            .collect(),
    });
    let mut took = BTreeMap::from([(shared.me.clone(), ())]);
    let mut sends = JoinSet::new();
    for (name, addr) in voters.into_iter().filter(|(name, _)| *name != shared.me) {
        let (shared, carried) = (shared.clone(), carried.clone());
        sends.spawn(async move {
            let call = shared.call::<_, ()>(&name, &addr, RENEWAL_ROUND, &*carried);
            let answer = tokio::time::timeout(shared.timing.ttl, call).await;
            (
                name,
                answer.map_err(|_| "timed out".to_owned()).and_then(|a| a),
            )
        });
    }
    let mut refused = Vec::new();
    loop {
        if quorum(&sets, &took) {
            return Ok(());
        }
        match sends.join_next().await {
            Some(Ok((name, Ok(())))) => {
                took.insert(name, ());
            }
            Some(Ok((name, Err(why)))) => refused.push(format!("{name}: {why}")),
            Some(Err(e)) => refused.push(e.to_string()),
            None => {
                return Err(format!(
                    "the renewal round of term {term} reached no quorum: {}",
                    refused.join("; ")
                ));
            }
        }
    }
}

/// A voter's side: records the round if it comes from the leader this node follows in
/// its term (`raft::Control::take_renewals`).
pub async fn take(shared: &Shared, from: &str, carried: Carried) -> Result<(), String> {
    let renewals: Vec<(u64, Duration)> = carried
        .renewals
        .iter()
        .map(|&(session, us)| (session, Duration::from_micros(us)))
        .collect();
    shared
        .control
        .take_renewals(from, carried.term, &renewals, shared.timing.renew_every())
        .await
}

fn micros(d: Duration) -> u64 {
    d.as_micros().try_into().unwrap_or(u64::MAX)
}

//! The renewal round: the leader tells the voters when it received the renewals it is
//! about to acknowledge, and each voter keeps the latest per session (issue 30, item 4).
//!
//! Why: the lease handoff (`handoff.rs`) lets a new leader start the session clocks of
//! its term where a majority last heard the old leader. That is about when the old leader
//! died, so an owner that was also the leader lost its slot a whole T after its death,
//! while an owner that followed lost it T after its last renewal (up to T/4 earlier).
//! openraft 0.9's heartbeats carry no application data, so the receive times ride on a
//! round of our own, run beside Raft's leadership round ([`confirm`]): a renewal is
//! acknowledged only once Raft's round confirmed the leadership *and* a quorum of voters
//! kept its receive time. The new leader then asks a majority for, per session, the
//! latest renewal they kept, and starts each session's clock there.
//!
//! **What a voter keeps.** A round of the leader of term t carries, per session, the age
//! of its latest renewal when the round was sent (an elapsed time: the nodes' clocks are
//! not compared). The voter keeps `received − age` (the age shrunk by the clock-rate
//! margin, so a leader's clock that runs fast cannot move it early), per session and
//! term, the latest of each; it keeps the last [`TERMS_KEPT`] terms of a session and
//! remembers that it dropped one. It also records the round as a hearing of the leader of
//! t (`raft/heard.rs`), so its general answer is never earlier than a round it kept. A
//! voter refuses a round of a term below its own (or below the highest it kept): from
//! then on no round of the old leader can add a record it has not answered for. Records
//! live in memory: a restart loses them, which the general answer covers (below).
//!
//! **The argument** (the successor never starts before the owner's deadline: DESIGN's
//! successor-never-runs-before-predecessor-stopped rule). Take session s and the last
//! renewal of it that a leader L1 of a term below the new leader L2's acknowledged,
//! received by L1 at a. The owner's deadline is D ≤ a + T − m (it counts from its send
//! time, before a). L1 acknowledged it only after a round that carried it and that a
//! quorum Q of voters kept: each kept a record of s no earlier than a.
//! 1. L2's answers come from a quorum M (`handoff.rs`), which meets Q in some voter w.
//! 2. w answers only once its term is at least L2's and after every round it was keeping
//!    is kept ([`Witness::settle`]); it refuses rounds of lower terms from then on. So it
//!    kept L1's round before it answered.
//! 3. If w still holds a record of s of a term below L2's, and dropped none, the latest
//!    of them is no earlier than a (records only grow), and w answers its age. Otherwise
//!    (w restarted, dropped a term of s, or moved on to a later session of the same
//!    node) it answers nothing for s, and L2 takes w's general answer for s: the time w
//!    last heard a leader of a lower term, or started, which is no earlier than the round
//!    it kept or lost (`raft/heard.rs`, items 1–3 of `handoff.rs`), or no bound at all.
//! 4. L2 turns each answer into a time on its clock erring late (`handoff::estimate`),
//!    and takes, per session, the latest over M: no earlier than w's, so no earlier than
//!    a. The session's clock starts there, and L2 expires s no earlier than a + T > D.
//!
//! A voter that did not keep the round (not in Q) may answer an older record of s; the
//! latest over M ignores it. Per session and per voter, the general answer is the latest
//! that voter can give, so a session no voter answered for starts at the base of item 1.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::RwLock;
use tokio::task::JoinSet;

use super::shared::Shared;
use crate::raft::Rounds;

/// The message kind of a round (see `crate::raft` for the numbering).
pub const WITNESS: u16 = 22;

/// Terms kept per session; a lower one is dropped (only the latest below an asker's term
/// matters, and a leader's own rounds add its term).
const TERMS_KEPT: usize = 4;

/// A round: the leader of `term` received these renewals, each `age_us` before it sent
/// the round.
#[derive(Debug, Serialize, Deserialize)]
pub struct Round {
    pub term: u64,
    pub renewals: Vec<Renewal>,
}

/// One session's latest renewal in a round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewal {
    pub node: String,
    pub session: u64,
    pub age_us: u64,
}

/// A voter's answer to a round.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kept {
    /// The receive times are kept.
    Kept,
    /// Not kept: the voter knows a higher term.
    Refused(String),
}

/// The leader's rounds and the voter's records.
#[derive(Default)]
pub struct Witness {
    /// Renewal rounds, one at a time, each carrying the renewals waiting: the result is
    /// the term the round ran in.
    rounds: Rounds<Waiting, Result<u64, String>>,
    records: Mutex<Records>,
    /// Held shared while a round is being kept, taken exclusively by an answer (as
    /// `raft/heard.rs`'s gate; tokio's lock is fair).
    gate: RwLock<()>,
}

/// A renewal waiting for a round.
pub struct Waiting {
    node: String,
    session: u64,
    received: Instant,
}

#[derive(Default)]
struct Records {
    /// The highest term whose round this node kept.
    highest: u64,
    /// node → its latest session's records.
    nodes: HashMap<String, SessionRecords>,
}

struct SessionRecords {
    session: u64,
    /// term → the latest renewal kept from a round of that term.
    terms: BTreeMap<u64, Instant>,
    /// The lowest term dropped.
    first_dropped: Option<u64>,
}

/// One session's latest renewal kept below the asker's term, as the handoff's answer
/// carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHeard {
    pub node: String,
    pub session: u64,
    /// Microseconds since the renewal, on the answering voter's clock.
    pub elapsed_us: u64,
}

/// Acknowledgeable once this returns `Ok`: a round that started after this call carried
/// the renewal (received at `received` in `term`), Raft's leadership round confirmed this
/// node as the leader of `term` (and recorded the hearing first, `raft/heard.rs`), and a
/// quorum of voters kept the receive time.
pub async fn confirm(
    shared: &Arc<Shared>,
    term: u64,
    node: &str,
    session: u64,
    received: Instant,
) -> Result<(), String> {
    let waiting = Waiting {
        node: node.to_owned(),
        session,
        received,
    };
    let ran = shared
        .witness
        .rounds
        .carry(waiting, |items| round(shared.clone(), term, items))
        .await?;
    if ran != term {
        return Err(format!(
            "the renewal arrived in term {term}, its round ran in term {ran}"
        ));
    }
    Ok(())
}

/// One round: Raft's leadership round and ours to every voter, together; the term once
/// both have a quorum.
async fn round(shared: Arc<Shared>, term: u64, items: Vec<Waiting>) -> Result<u64, String> {
    let mut latest: BTreeMap<(String, u64), Instant> = BTreeMap::new();
    for item in items {
        let at = latest
            .entry((item.node, item.session))
            .or_insert(item.received);
        *at = (*at).max(item.received);
    }
    let sets = shared.control.voter_sets();
    let voters = shared.control.members().voters;
    let sent = Instant::now();
    let message = Arc::new(Round {
        term,
        renewals: latest
            .into_iter()
            .map(|((node, session), received)| Renewal {
                node,
                session,
                age_us: micros(sent.saturating_duration_since(received)),
            })
            .collect(),
    });
    let mut calls = JoinSet::new();
    for (name, addr) in voters {
        let (shared, message) = (shared.clone(), message.clone());
        calls.spawn(async move {
            let kept = if name == shared.me {
                Ok(shared.witness.keep(&shared.control, &message, sent).await)
            } else {
                let call = shared.call::<_, Kept>(&name, &addr, WITNESS, &*message);
                tokio::time::timeout(shared.timing.ttl, call)
                    .await
                    .unwrap_or_else(|_| Err("timed out".into()))
            };
            (name, kept)
        });
    }
    let quorum = |kept: &std::collections::BTreeSet<String>| {
        !sets.is_empty()
            && sets
                .iter()
                .all(|set| set.iter().filter(|v| kept.contains(*v)).count() > set.len() / 2)
    };
    let voters_kept = async {
        let mut kept = std::collections::BTreeSet::new();
        let mut refused = Vec::new();
        while !quorum(&kept) {
            match calls.join_next().await {
                Some(Ok((name, Ok(Kept::Kept)))) => {
                    kept.insert(name);
                }
                Some(Ok((name, Ok(Kept::Refused(why))))) => refused.push(format!("{name}: {why}")),
                Some(Ok((name, Err(error)))) => refused.push(format!("{name}: {error}")),
                Some(Err(error)) => refused.push(error.to_string()),
                None => {
                    return Err(format!(
                        "no quorum of voters kept the renewal round ({} kept; {})",
                        kept.len(),
                        refused.join("; ")
                    ));
                }
            }
        }
        Ok(())
    };
    let leadership = async {
        shared
            .control
            .confirm_leadership(term)
            .await
            .map_err(|e| e.to_string())
    };
    tokio::try_join!(leadership, voters_kept)?;
    Ok(term)
}

impl Witness {
    /// The voter's side of a round received at `received`: keeps its renewals unless this
    /// node knows a higher term.
    pub async fn keep(
        &self,
        control: &crate::raft::Control,
        round: &Round,
        received: Instant,
    ) -> Kept {
        let _keeping = self.gate.read().await;
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let known = control.term().max(records.highest);
        if round.term < known {
            return Kept::Refused(format!(
                "a round of term {} and this node knows term {known}",
                round.term
            ));
        }
        records.highest = round.term;
        control.record_leader_heard(round.term);
        for renewal in &round.renewals {
            let at = received
                .checked_sub(shrunk(Duration::from_micros(renewal.age_us)))
                .unwrap_or(received);
            records.keep(round.term, &renewal.node, renewal.session, at);
        }
        Kept::Kept
    }

    /// Waits until every round being kept now is kept.
    pub async fn settle(&self) {
        drop(self.gate.write().await);
    }

    /// Per session, the latest renewal kept from a round of a term below `term`, as time
    /// elapsed at `now`; a session whose record of such a term was dropped is left out
    /// (call [`Witness::settle`] first).
    pub fn below(&self, term: u64, now: Instant) -> Vec<SessionHeard> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records
            .nodes
            .iter()
            .filter(|(_, r)| r.first_dropped.is_none_or(|d| d >= term))
            .filter_map(|(node, r)| {
                let latest = r.terms.range(..term).map(|(_, at)| *at).max()?;
                Some(SessionHeard {
                    node: node.clone(),
                    session: r.session,
                    elapsed_us: micros(now.saturating_duration_since(latest)),
                })
            })
            .collect()
    }
}

impl Records {
    fn keep(&mut self, term: u64, node: &str, session: u64, at: Instant) {
        let records = self
            .nodes
            .entry(node.to_owned())
            .or_insert_with(|| SessionRecords {
                session,
                terms: BTreeMap::new(),
                first_dropped: None,
            });
        // One session per node: a later session replaces the records of the earlier
        // (which has ended: its node opened a new one only after its deadline passed),
        // and a round's record of an earlier session than the one kept is left out (the
        // general answer covers it).
        if session < records.session {
            return;
        }
        if session > records.session {
            *records = SessionRecords {
                session,
                terms: BTreeMap::new(),
                first_dropped: None,
            };
        }
        let entry = records.terms.entry(term).or_insert(at);
        *entry = (*entry).max(at);
        while records.terms.len() > TERMS_KEPT {
            if let Some((dropped, _)) = records.terms.pop_first() {
                records.first_dropped.get_or_insert(dropped);
            }
        }
    }
}

/// An elapsed time shrunk by the clock-rate margin (1/20, as m = T/20): the clock that
/// measured it may run fast, and an overestimate would move a time early.
pub fn shrunk(elapsed: Duration) -> Duration {
    elapsed - elapsed / 20
}

fn micros(d: Duration) -> u64 {
    d.as_micros().try_into().unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn elapsed(heard: &[SessionHeard], node: &str) -> Option<Duration> {
        heard
            .iter()
            .find(|h| h.node == node)
            .map(|h| Duration::from_micros(h.elapsed_us))
    }

    #[test]
    fn the_latest_below_the_asker_s_term_per_session() {
        let t0 = Instant::now();
        let mut records = Records::default();
        records.keep(3, "a", 1, t0 + MS(100));
        records.keep(3, "a", 1, t0 + MS(50));
        records.keep(4, "a", 1, t0 + MS(200));
        records.keep(5, "a", 1, t0 + MS(900));
        let witness = Witness {
            records: Mutex::new(records),
            ..Witness::default()
        };
        let now = t0 + MS(1000);
        assert_eq!(elapsed(&witness.below(5, now), "a"), Some(MS(800)));
        assert_eq!(elapsed(&witness.below(4, now), "a"), Some(MS(900)));
        assert_eq!(elapsed(&witness.below(6, now), "a"), Some(MS(100)));
        assert_eq!(elapsed(&witness.below(3, now), "a"), None);
    }

    #[test]
    fn a_dropped_term_or_a_replaced_session_leaves_the_session_out() {
        let t0 = Instant::now();
        let mut records = Records::default();
        for term in 1..=(TERMS_KEPT as u64 + 1) {
            records.keep(term, "a", 1, t0 + MS(term * 10));
        }
        records.keep(2, "b", 7, t0 + MS(20));
        records.keep(3, "b", 8, t0 + MS(30));
        // An earlier session's round is left out.
        records.keep(4, "b", 7, t0 + MS(40));
        let witness = Witness {
            records: Mutex::new(records),
            ..Witness::default()
        };
        let now = t0 + MS(1000);
        // Term 1 of a's session was dropped: below any term above it, no answer.
        assert_eq!(elapsed(&witness.below(9, now), "a"), None);
        assert_eq!(elapsed(&witness.below(1, now), "a"), None);
        let b = witness.below(9, now);
        assert_eq!(b.iter().find(|h| h.node == "b").map(|h| h.session), Some(8));
        assert_eq!(elapsed(&b, "b"), Some(MS(970)));
    }
}

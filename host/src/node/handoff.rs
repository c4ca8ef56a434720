//! The lease handoff: a new leader starts the session clocks of its term where the old
//! leader could last have acknowledged a renewal, learned from a majority of voters,
//! instead of at its own election. Losing the leader then costs about what losing any
//! owner costs (the owner's lease runs out on schedule), not election + a full TTL.
//!
//! **The argument.** Safety needs: the new leader L2 expires a session only after its
//! owner's deadline D. Take the owner's last renewal acknowledged by the old leader L1,
//! received by L1 at time a. Its D ≤ a + T − m (the owner counts from its send time,
//! which is earlier). L1 acknowledged only after a heartbeat round that began after a
//! (`session::answer`), so a quorum Q of voters accepted an append from L1 at or after a,
//! or, for L1 itself, recorded after a, before the round, that it led (`raft/heard.rs`).
//! 1. *Intersection.* L2 asks every voter "how long since you last heard a leader of a
//!    term below mine?" and waits for a quorum M of answers (itself included): a
//!    majority of its voter set, or of each set during a joint membership change, whose
//!    quorums intersect those of the configurations before it. M and Q intersect, so
//!    some voter w in M heard L1 at h_w ≥ a.
//! 2. *Answer only after adopting the new term.* A voter answers only once its own term
//!    is at least L2's, so it refuses L1's appends from then on: nothing it hears from L1
//!    after its answer can exist, and no quorum L1 completes later can avoid a voter of
//!    M, whose answer covers it. Before it answers, it waits until every message Raft
//!    took is recorded (a leader records its rounds before they start: `raft/heard.rs`).
//! 3. *A voter with no record still bounds the past.* If w has no record of a term below
//!    L2's and dropped none, it heard no leader of such a term since it started, at some
//!    time S_w (its record keeper is made before it can take a Raft message). Its
//!    hearing of L1 at h_w ≥ a was then in an earlier run, which ended before S_w, so
//!    h_w < S_w: w answers "nothing since I started, e_w ago", and S_w stands in for h_w
//!    in 4. A voter that dropped a record of such a term and kept none cannot tell, and
//!    answers "no bound"; L2 takes its receive time (the most cautious answer).
//! 4. *Conversion that errs late.* w answered elapsed e_w at its time s_w = h_w + e_w;
//!    L2 received the answer at r_w ≥ s_w, so r_w − e_w ≥ h_w ≥ a. The elapsed time is
//!    first shrunk by the clock-rate margin (1/20, as m = T/20), so a voter whose clock
//!    runs fast cannot move the estimate early.
//!
//! L2 takes base = the latest r_v − e_v over M and starts the clock of every session it
//! has not seen renewed in its term at base (so expires it at base + T ≥ a + T > D).
//! Until it has a majority of answers it expires nothing. A session opened after that
//! starts its clock at first sight, as before.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use super::shared::Shared;

/// The message kind of the question (see `crate::raft` for the numbering).
pub const LEADER_HEARD: u16 = 21;

/// The test-only switch of the deliberately broken handoff: the base is taken a whole TTL
/// earlier than the answers allow. The fault checker must catch it.
pub const UNSAFE_EARLY_HANDOFF: &str = "TENURE_UNSAFE_EARLY_HANDOFF";

/// "How long since you last heard a leader of a term below `term`?"
#[derive(Serialize, Deserialize)]
pub struct Ask {
    pub term: u64,
}

/// The answer: microseconds since the voter last heard a leader of a lower term, or
/// since it started if it heard none since (the same bound, `raft/heard.rs`); `None` if
/// it cannot bound the past (it dropped the record of such a term).
#[derive(Debug, Serialize, Deserialize)]
pub struct Heard {
    pub elapsed_us: Option<u64>,
}

/// The voter's side: answers once this node's term is at least the asker's.
pub async fn answer(shared: &Shared, term: u64) -> Result<Heard, String> {
    let mut metrics = shared.control.metrics();
    let bound = shared.timing.ttl * 2;
    tokio::time::timeout(bound, metrics.wait_for(|m| m.current_term >= term))
        .await
        .map_err(|_| format!("this node has not reached term {term}"))?
        .map_err(|_| "the control plane stopped".to_owned())?;
    let elapsed = shared.control.since_leader_below(term).await;
    Ok(Heard {
        elapsed_us: elapsed.map(|e| e.as_micros().try_into().unwrap_or(u64::MAX)),
    })
}

/// Where a term's session clocks start, and what set it there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inherited {
    /// The latest of the answers, as a time on this node's clock.
    pub base: Instant,
    /// What the latest answer was.
    pub from: BaseFrom,
}

/// What the base of a term's session clocks rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseFrom {
    /// The latest answer was an elapsed time (since the voter last heard a leader, or
    /// since it started): the base is a bound on the past.
    Answers,
    /// The latest answer was a voter's "no bound", taken at its receive time: the clocks
    /// start at this leader's election, a whole TTL from then.
    Election,
}

impl BaseFrom {
    /// The word the `lease.inherited` event carries (`from`).
    pub fn as_str(self) -> &'static str {
        match self {
            BaseFrom::Answers => "answers",
            BaseFrom::Election => "election",
        }
    }
}

/// One voter's answer as a time on this node's clock, erring late: `received` minus the
/// elapsed time shrunk by the clock-rate margin, or `received` itself if the voter could
/// not bound the past.
pub fn estimate(received: Instant, heard: &Heard) -> (Instant, BaseFrom) {
    match heard.elapsed_us {
        // Shrunk by the clock-rate margin: an overestimate would move the base early.
        Some(us) => (
            received
                .checked_sub(Duration::from_micros(us - us / 20))
                .unwrap_or(received),
            BaseFrom::Answers,
        ),
        None => (received, BaseFrom::Election),
    }
}

/// The leader's side: asks every voter of the membership and returns the base of its
/// term's session clocks once a quorum (a majority of each voter set) answered; `None`
/// if it stopped being the leader of `term` first.
pub async fn inherit(shared: Arc<Shared>, term: u64) -> Option<Inherited> {
    // A quorum is a majority of every voter set (two during a joint membership change):
    // the answers must intersect any quorum the old leader used.
    let sets = shared.control.voter_sets();
    let voters = shared.control.members().voters;
    let mut asks = JoinSet::new();
    for (name, addr) in voters {
        let shared = shared.clone();
        asks.spawn(async move {
            loop {
                if shared.control.term() != term || !shared.control.is_leader() {
                    return None;
                }
                match ask(&shared, &name, &addr, term).await {
                    Ok(base) => return Some((name, base)),
                    Err(error) => {
                        tracing::debug!(voter = %name, %error, "lease handoff: no answer yet");
                        tokio::time::sleep(shared.timing.renew_every()).await;
                    }
                }
            }
        });
    }
    let mut answered = std::collections::BTreeMap::new();
    let quorum = |answered: &std::collections::BTreeMap<String, (Instant, BaseFrom)>| {
        !sets.is_empty()
            && sets
                .iter()
                .all(|set| set.iter().filter(|v| answered.contains_key(*v)).count() > set.len() / 2)
    };
    while !quorum(&answered) {
        match asks.join_next().await {
            Some(Ok(Some((name, base)))) => {
                answered.insert(name, base);
            }
            _ => return None,
        }
    }
    let inherited = latest(answered.into_values())?;
    if std::env::var_os(UNSAFE_EARLY_HANDOFF).is_some() {
        return Some(early(inherited, shared.timing.ttl));
    }
    Some(inherited)
}

/// The base: the latest of a quorum's answers (as [`estimate`] made them).
pub fn latest(answers: impl IntoIterator<Item = (Instant, BaseFrom)>) -> Option<Inherited> {
    let (base, from) = answers.into_iter().max_by_key(|(at, _)| *at)?;
    Some(Inherited { base, from })
}

/// The deliberately broken base of [`UNSAFE_EARLY_HANDOFF`]: a TTL earlier.
fn early(inherited: Inherited, ttl: Duration) -> Inherited {
    Inherited {
        base: inherited.base.checked_sub(ttl).unwrap_or(inherited.base),
        ..inherited
    }
}

/// One voter's answer as a time on this node's clock: when it last heard a leader of an
/// older term, erring late.
async fn ask(
    shared: &Shared,
    name: &str,
    addr: &str,
    term: u64,
) -> Result<(Instant, BaseFrom), String> {
    let heard = if name == shared.me {
        answer(shared, term).await?
    } else {
        let ask = Ask { term };
        let call = shared.call::<_, Heard>(name, addr, LEADER_HEARD, &ask);
        tokio::time::timeout(shared.timing.ttl * 3, call)
            .await
            .map_err(|_| "timed out".to_owned())??
    };
    Ok(estimate(Instant::now(), &heard))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// The owner's deadline and the new leader's expiry, for an owner whose last renewal
    /// the old leader received at `a` (TTL 2 s, m = T/20): the owner's D ≤ a + T − m.
    fn deadline(a: Instant) -> Instant {
        a + MS(2000) - MS(100)
    }

    /// Three voters. The old leader L1 owned a slot and was killed; its last acknowledged
    /// renewal arrived at `a`, confirmed by a round that voter B heard at `a + 10 ms`.
    /// Voter C was never reached: it started at `a − 1 s` and heard no leader since. The
    /// new leader asks B and C one second after `a` (answers arrive 5 ms after they
    /// were given).
    #[test]
    fn an_answer_nothing_since_start_yields_a_base_after_the_last_acknowledgement() {
        let a = Instant::now() + MS(10_000);
        let (b_heard, c_started) = (a + MS(10), a - MS(1000));
        let asked = a + MS(1000);
        let answer = |since: Instant| Heard {
            elapsed_us: Some((asked - since).as_micros() as u64),
        };
        let received = asked + MS(5);
        // C alone: its start, shrunk by the margin, is the bound (earlier than a: a
        // voter that did not hear L1 does not push the base past a).
        let (c, from) = estimate(received, &answer(c_started));
        assert_eq!(from, BaseFrom::Answers);
        assert!(c >= c_started && c <= received);
        // With B, which heard L1's round: the base is B's hearing, at least a.
        let (b, _) = estimate(received, &answer(b_heard));
        let inherited = latest([(b, BaseFrom::Answers), (c, BaseFrom::Answers)]).unwrap();
        assert_eq!(inherited.from, BaseFrom::Answers);
        assert!(inherited.base >= b_heard && inherited.base >= a);
        // So no session expires before its owner's deadline, and the slot is free well
        // before election + T.
        let ttl = MS(2000);
        assert!(inherited.base + ttl > deadline(a));
        assert!(inherited.base + ttl < received + ttl - MS(900));
    }

    /// The case the argument is about: the voter that heard L1's last round is the one
    /// without a record. Q = {L1, C}: C heard L1's round at `a + 10 ms`, then restarted
    /// at `a + 400 ms` and has heard no one since; B, L2's other voter, last heard L1
    /// long before `a` (it was not in Q). L2 asks at `a + 1 s`.
    #[test]
    fn a_voter_that_lost_its_record_to_a_restart_answers_its_start() {
        let a = Instant::now() + MS(10_000);
        let (c_heard, c_restarted, b_heard) = (a + MS(10), a + MS(400), a - MS(1500));
        let asked = a + MS(1000);
        let received = asked + MS(5);
        let answer = |since: Instant| Heard {
            elapsed_us: Some((asked - since).as_micros() as u64),
        };
        let b = estimate(received, &answer(b_heard));
        let c = estimate(received, &answer(c_restarted));
        let inherited = latest([b, c]).unwrap();
        assert_eq!(inherited.from, BaseFrom::Answers);
        // The base is C's start (erring late by the margin and the answer's delay),
        // after its lost hearing, after a.
        assert!(inherited.base >= c_restarted && inherited.base <= c_restarted + MS(50));
        assert!(inherited.base >= c_heard && inherited.base >= a);
        assert!(inherited.base + MS(2000) > deadline(a));
        // Without C's answer (B's alone) the base would come before a: the bound rests
        // on the restarted voter's start.
        assert!(b.0 < a);
    }

    /// Had C answered as it did before (no record: "no bound"), the clocks would start at
    /// the election: safe, but a whole TTL after it.
    #[test]
    fn no_bound_starts_the_clocks_at_the_receive_time() {
        let received = Instant::now();
        let (base, from) = estimate(received, &Heard { elapsed_us: None });
        assert_eq!((base, from), (received, BaseFrom::Election));
        let (b, _) = estimate(
            received,
            &Heard {
                elapsed_us: Some(990_000),
            },
        );
        let inherited = latest([(b, BaseFrom::Answers), (base, from)]).unwrap();
        assert_eq!(inherited.from, BaseFrom::Election);
        assert_eq!(inherited.base, received);
    }

    /// An elapsed time is shrunk by the margin: a voter whose clock ran 5% fast still
    /// yields a base no earlier than its hearing.
    #[test]
    fn the_margin_absorbs_a_fast_voter_clock() {
        let heard_at = Instant::now();
        let true_elapsed = MS(1000);
        let fast = true_elapsed + true_elapsed / 20;
        let received = heard_at + true_elapsed;
        let (base, _) = estimate(
            received,
            &Heard {
                elapsed_us: Some(fast.as_micros() as u64),
            },
        );
        assert!(base >= heard_at - MS(3), "{:?}", heard_at - base);
    }

    /// The test-only switch's base (a TTL early) lets the new leader expire a session
    /// whose owner's deadline has not passed: what the fault checker must catch
    /// (`tests/faults.rs`, `an_early_handoff_after_an_unreached_voter_is_caught`).
    #[test]
    fn the_early_switch_breaks_the_bound() {
        let a = Instant::now() + MS(10_000);
        let received = a + MS(1000);
        let (b, from) = estimate(
            received,
            &Heard {
                elapsed_us: Some(990_000),
            },
        );
        let ttl = MS(2000);
        let inherited = latest([(b, from)]).unwrap();
        assert!(inherited.base + ttl > deadline(a));
        assert!(early(inherited, ttl).base + ttl < deadline(a));
    }
}

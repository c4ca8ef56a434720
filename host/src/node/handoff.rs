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
//!
//! **Per session** (issue 30 item 4). The base is about when the old leader died, a whole
//! T before an owner that led loses its slots. So the question also names the sessions
//! the new leader holds, and each voter answers per session when the old leader's
//! renewal rounds said its last renewal arrived, where it can say; the new leader takes
//! per session the latest over M (a voter that cannot say counting with its answer for
//! the node) and starts the session's clock there when that is before the base
//! ([`latest`]). `renewal_round.rs` has the argument for this part.

use std::collections::{BTreeMap, BTreeSet, HashMap};
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

/// The answer's tail, per session the asker named, in its order: microseconds since a
/// renewal of it reached the leader of the latest lower term the voter heard, as that
/// leader's renewal round said (`renewal_round.rs`); `None` where the voter cannot say,
/// and its [`Heard`] stands for that session.
pub type Renewals = Vec<Option<u64>>;

/// The voter's side: answers once this node's term is at least the asker's. An asker
/// that names sessions (after the [`Ask`], from [`crate::version::RENEWAL_ROUNDS`]) gets,
/// after the [`Heard`], one [`Renewals`] entry per session; a version 6 asker names none
/// and reads the [`Heard`] alone.
pub async fn answer(
    shared: &Shared,
    term: u64,
    sessions: Option<Vec<u64>>,
) -> Result<Vec<u8>, String> {
    let (heard, renewals) = answer_for(shared, term, sessions.as_deref().unwrap_or(&[])).await?;
    let encoded = match sessions {
        Some(_) => postcard::to_allocvec(&(heard, renewals)),
        None => postcard::to_allocvec(&heard),
    };
    encoded.map_err(|e| e.to_string())
}

/// [`answer`]'s values.
async fn answer_for(
    shared: &Shared,
    term: u64,
    sessions: &[u64],
) -> Result<(Heard, Renewals), String> {
    let mut metrics = shared.control.metrics();
    let bound = shared.timing.ttl * 2;
    tokio::time::timeout(bound, metrics.wait_for(|m| m.current_term >= term))
        .await
        .map_err(|_| format!("this node has not reached term {term}"))?
        .map_err(|_| "the control plane stopped".to_owned())?;
    let (elapsed, renewals) = shared.control.since_leader_below(term, sessions).await;
    let heard = Heard {
        elapsed_us: elapsed.map(micros),
    };
    Ok((heard, renewals.into_iter().map(|e| e.map(micros)).collect()))
}

/// A duration in whole microseconds, as the handoff's and the renewal round's messages
/// carry it.
pub(super) fn micros(d: Duration) -> u64 {
    d.as_micros().try_into().unwrap_or(u64::MAX)
}

/// Where a term's session clocks start, and what set it there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inherited {
    /// The latest of the answers, as a time on this node's clock.
    pub base: Instant,
    /// What the latest answer was.
    pub from: BaseFrom,
    /// Sessions whose clocks start earlier, at their own base: per session, the latest
    /// over the answers of the voter's answer for it, or where it could not say, of its
    /// answer for the whole node (`renewal_round.rs` has the argument).
    pub sessions: HashMap<u64, Instant>,
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
        Some(us) => (back(received, us), BaseFrom::Answers),
        None => (received, BaseFrom::Election),
    }
}

/// `received` minus `us` microseconds shrunk by the clock-rate margin: an overestimate
/// of an elapsed time would move a base early.
fn back(received: Instant, us: u64) -> Instant {
    received
        .checked_sub(Duration::from_micros(us - us / 20))
        .unwrap_or(received)
}

/// One voter's answer as times on this node's clock, erring late: for the whole node
/// (as [`estimate`] made it), and per session asked about where the voter could say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub node: (Instant, BaseFrom),
    pub sessions: HashMap<u64, Instant>,
}

impl Answer {
    /// A voter's answer received at `received`: `renewals` in the order of `sessions`.
    pub fn at(received: Instant, heard: &Heard, sessions: &[u64], renewals: &Renewals) -> Answer {
        let sessions = sessions
            .iter()
            .zip(renewals)
            .filter_map(|(session, us)| Some((*session, back(received, (*us)?))))
            .collect();
        Answer {
            node: estimate(received, heard),
            sessions,
        }
    }

    /// This voter's answer for `session`: its own, or where it could not say, the node's.
    fn for_session(&self, session: u64) -> Instant {
        self.sessions.get(&session).copied().unwrap_or(self.node.0)
    }
}

/// The leader's side: asks every voter of the membership and returns the base of its
/// term's session clocks once a quorum (a majority of each voter set) answered; `None`
/// if it stopped being the leader of `term` first. It asks about the sessions its
/// replica holds, once the cluster's version is [`crate::version::RENEWAL_ROUNDS`].
pub async fn inherit(shared: Arc<Shared>, term: u64) -> Option<Inherited> {
    // A quorum is a majority of every voter set (two during a joint membership change):
    // the answers must intersect any quorum the old leader used.
    let sets = shared.control.voter_sets();
    let voters = shared.control.members().voters;
    let sessions: Arc<Option<Vec<u64>>> = Arc::new(shared.read(|c| {
        (c.version >= crate::version::RENEWAL_ROUNDS).then(|| {
            c.members
                .values()
                .filter_map(|m| m.session.as_ref().map(|s| s.id))
                .collect()
        })
    }));
    let mut asks = JoinSet::new();
    for (name, addr) in voters {
        let (shared, sessions) = (shared.clone(), sessions.clone());
        asks.spawn(async move {
            loop {
                if shared.control.term() != term || !shared.control.is_leader() {
                    return None;
                }
                match ask(&shared, &name, &addr, term, sessions.as_ref().as_deref()).await {
                    Ok(answer) => return Some((name, answer)),
                    Err(error) => {
                        tracing::debug!(voter = %name, %error, "lease handoff: no answer yet");
                        tokio::time::sleep(shared.timing.renew_every()).await;
                    }
                }
            }
        });
    }
    let mut answered = BTreeMap::new();
    while !quorum(&sets, &answered) {
        match asks.join_next().await {
            Some(Ok(Some((name, answer)))) => {
                answered.insert(name, answer);
            }
            _ => return None,
        }
    }
    let asked = sessions.as_ref().as_deref().unwrap_or(&[]);
    let inherited = latest(answered.into_values(), asked)?;
    if std::env::var_os(UNSAFE_EARLY_HANDOFF).is_some() {
        return Some(early(inherited, shared.timing.ttl));
    }
    Some(inherited)
}

/// Whether `answered` holds a majority of every voter set (and there is one).
pub(super) fn quorum<V>(sets: &[BTreeSet<String>], answered: &BTreeMap<String, V>) -> bool {
    !sets.is_empty()
        && sets
            .iter()
            .all(|set| set.iter().filter(|v| answered.contains_key(*v)).count() > set.len() / 2)
}

/// The base: the latest of a quorum's answers for the whole node; and per session of
/// `sessions`, the latest of the answers for it, kept where it is earlier than the base.
pub fn latest(answers: impl IntoIterator<Item = Answer>, sessions: &[u64]) -> Option<Inherited> {
    let answers: Vec<Answer> = answers.into_iter().collect();
    let (base, from) = answers.iter().map(|a| a.node).max_by_key(|(at, _)| *at)?;
    let sessions = sessions
        .iter()
        .filter_map(|&session| {
            let at = answers.iter().map(|a| a.for_session(session)).max()?;
            (at < base).then_some((session, at))
        })
        .collect();
    Some(Inherited {
        base,
        from,
        sessions,
    })
}

/// The deliberately broken base of [`UNSAFE_EARLY_HANDOFF`]: a TTL earlier, for every
/// session too.
fn early(inherited: Inherited, ttl: Duration) -> Inherited {
    let earlier = |at: Instant| at.checked_sub(ttl).unwrap_or(at);
    Inherited {
        base: earlier(inherited.base),
        sessions: inherited
            .sessions
            .into_iter()
            .map(|(session, at)| (session, earlier(at)))
            .collect(),
        ..inherited
    }
}

/// One voter's answer as times on this node's clock, erring late.
async fn ask(
    shared: &Shared,
    name: &str,
    addr: &str,
    term: u64,
    sessions: Option<&[u64]>,
) -> Result<Answer, String> {
    let (heard, renewals) = if name == shared.me {
        answer_for(shared, term, sessions.unwrap_or(&[])).await?
    } else {
        let call = async {
            let ask = Ask { term };
            let bytes = match sessions {
                Some(sessions) => {
                    let asked = (ask, sessions);
                    shared.call_bytes(name, addr, LEADER_HEARD, &asked).await?
                }
                None => shared.call_bytes(name, addr, LEADER_HEARD, &ask).await?,
            };
            let (heard, renewals): (Heard, Option<Renewals>) = crate::rpc::decode_with_tail(&bytes)
                .map_err(|e| format!("bad answer from {name}: {e}"))?;
            Ok::<_, String>((heard, renewals.unwrap_or_default()))
        };
        tokio::time::timeout(shared.timing.ttl * 3, call)
            .await
            .map_err(|_| "timed out".to_owned())??
    };
    Ok(Answer::at(
        Instant::now(),
        &heard,
        sessions.unwrap_or(&[]),
        &renewals,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// [`latest`] of answers for the whole node only (no session asked about).
    fn node_only(answers: impl IntoIterator<Item = (Instant, BaseFrom)>) -> Option<Inherited> {
        let answers = answers.into_iter().map(|node| Answer {
            node,
            sessions: HashMap::new(),
        });
        latest(answers, &[])
    }

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
        let inherited = node_only([(b, BaseFrom::Answers), (c, BaseFrom::Answers)]).unwrap();
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
        let inherited = node_only([b, c]).unwrap();
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
        let inherited = node_only([(b, BaseFrom::Answers), (base, from)]).unwrap();
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

    /// Issue 30 item 4: the old leader L1 owned a slot itself and was killed at `k`. Its
    /// own last acknowledged renewal arrived at `a` = k − 400 ms; its renewal round told B
    /// and C (its quorum) so, and each recorded it erring late. B and C answer L2 at
    /// k + 1 s: for the whole node, when they last heard L1 (just before k); for L1's
    /// session, its renewal. The session's clock starts at its own base, at or after a,
    /// so it expires after its owner's deadline and 400 ms sooner than the node's base
    /// would have let it.
    #[test]
    fn a_session_reported_by_the_renewal_rounds_starts_at_its_own_renewal() {
        let k = Instant::now() + MS(10_000);
        let a = k - MS(400);
        let asked = k + MS(1000);
        let received = asked + MS(5);
        let us = |since: Instant| Some((asked - since).as_micros() as u64);
        // B and C recorded L1's session 9 at a + 2 ms and a + 3 ms (the round's transit);
        // C's record of session 10 is of an older term: it cannot say.
        let b = Answer::at(
            received,
            &Heard {
                elapsed_us: us(k - MS(20)),
            },
            &[9, 10],
            &vec![us(a + MS(2)), us(a - MS(100))],
        );
        let c = Answer::at(
            received,
            &Heard {
                elapsed_us: us(k - MS(30)),
            },
            &[9, 10],
            &vec![us(a + MS(3)), None],
        );
        let inherited = latest([b, c], &[9, 10]).unwrap();
        let own = inherited.sessions[&9];
        assert!(
            own >= a && own <= a + MS(80),
            "{:?}",
            own.checked_duration_since(a)
        );
        assert!(own + MS(2000) > deadline(a));
        assert!(own < inherited.base - MS(300));
        // Session 10: C could not say, so C's answer for the node (when it last heard
        // L1) stands for it, and that is the latest answer for it.
        let ten = inherited.sessions[&10];
        assert!(
            ten >= k - MS(30) && ten < inherited.base,
            "{:?}",
            ten.checked_duration_since(k - MS(30))
        );
        // Under the test-only switch every session's base is a TTL early too.
        let early = early(inherited, MS(2000));
        assert!(early.sessions[&9] + MS(2000) < deadline(a));
    }

    /// A voter's answer for a session is never taken over another voter's later answer
    /// for it, whether that answer is of the session or of the node: per session, the
    /// latest over the quorum.
    #[test]
    fn a_session_s_base_is_the_latest_over_the_quorum() {
        let received = Instant::now() + MS(10_000);
        let us = |ms: u64| Some(ms * 1000);
        // B's record of session 9 is 900 ms old; C has none and last heard a leader
        // 600 ms ago: C's node answer is the later one, and bounds session 9.
        let b = Answer::at(
            received,
            &Heard {
                elapsed_us: us(100),
            },
            &[9],
            &vec![us(900)],
        );
        let c = Answer::at(
            received,
            &Heard {
                elapsed_us: us(600),
            },
            &[9],
            &vec![None],
        );
        let inherited = latest([b.clone(), c], &[9]).unwrap();
        assert_eq!(inherited.base, b.node.0);
        let (c_node, _) = estimate(
            received,
            &Heard {
                elapsed_us: us(600),
            },
        );
        assert_eq!(inherited.sessions[&9], c_node);
        // A session no one was asked about, or none could say: the node's base.
        let d = Answer::at(
            received,
            &Heard {
                elapsed_us: us(100),
            },
            &[9],
            &vec![None],
        );
        assert!(latest([d], &[9]).unwrap().sessions.is_empty());
    }

    #[test]
    fn a_quorum_is_a_majority_of_every_voter_set() {
        let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
        let took = |names: &[&str]| {
            names
                .iter()
                .map(|n| (n.to_string(), ()))
                .collect::<BTreeMap<_, _>>()
        };
        let one = [set(&["a", "b", "c"])];
        assert!(!quorum(&one, &took(&["a"])));
        assert!(quorum(&one, &took(&["a", "c"])));
        // A joint change: a majority of each set.
        let joint = [set(&["a", "b", "c"]), set(&["c", "d", "e"])];
        assert!(!quorum(&joint, &took(&["a", "b", "c"])));
        assert!(quorum(&joint, &took(&["a", "c", "d"])));
        assert!(!quorum(&[], &took(&["a"])));
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
        let inherited = node_only([(b, from)]).unwrap();
        assert!(inherited.base + ttl > deadline(a));
        assert!(early(inherited, ttl).base + ttl < deadline(a));
    }
}

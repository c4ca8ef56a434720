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
//! **Per session** (issue 30, item 4). The base is about when L1 died, a whole T before
//! an owner that led loses its slot. Each answer also carries, per session, the latest
//! renewal the voter kept from L1's renewal rounds (`witness.rs`, which has the argument
//! for this part); L2 takes, per session, the latest over M, a voter that left the
//! session out counting with its general answer above, and starts the session's clock
//! there when that is earlier than the base ([`combine`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use super::shared::Shared;
pub use super::witness::SessionHeard;

/// The message kind of the question (see `crate::raft` for the numbering).
pub const LEADER_HEARD: u16 = 21;

/// The test-only switch of the deliberately broken handoff, which the fault checker must
/// catch: any value but `earliest` takes the base a whole TTL earlier than the answers
/// allow; `earliest` takes, per session, the earliest of the answers instead of the
/// latest (one voter's old record is then enough to expire a live lease).
pub const UNSAFE_EARLY_HANDOFF: &str = "TENURE_UNSAFE_EARLY_HANDOFF";

/// "How long since you last heard a leader of a term below `term`?"
#[derive(Serialize, Deserialize)]
pub struct Ask {
    pub term: u64,
}

/// The answer: microseconds since the voter last heard a leader of a lower term, or
/// since it started if it heard none since (the same bound, `raft/heard.rs`); `None` if
/// it cannot bound the past (it dropped the record of such a term). Then, per session,
/// the latest renewal it kept from a round of such a term (`witness.rs`); a session left
/// out is bounded by `elapsed_us`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Heard {
    pub elapsed_us: Option<u64>,
    pub sessions: Vec<SessionHeard>,
}

/// The voter's side: answers once this node's term is at least the asker's.
pub async fn answer(shared: &Shared, term: u64) -> Result<Heard, String> {
    let mut metrics = shared.control.metrics();
    let bound = shared.timing.ttl * 2;
    tokio::time::timeout(bound, metrics.wait_for(|m| m.current_term >= term))
        .await
        .map_err(|_| format!("this node has not reached term {term}"))?
        .map_err(|_| "the control plane stopped".to_owned())?;
    // Every round this node was keeping is kept (and so recorded as a hearing too)
    // before either part of the answer is read (`witness.rs`, step 2).
    shared.witness.settle().await;
    let sessions = shared.witness.below(term, Instant::now());
    let elapsed = shared.control.since_leader_below(term).await;
    Ok(Heard {
        elapsed_us: elapsed.map(|e| e.as_micros().try_into().unwrap_or(u64::MAX)),
        sessions,
    })
}

/// A session: its node and id.
pub type SessionKey = (String, u64);

/// Where a term's session clocks start, and what set it there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inherited {
    /// The latest of the answers, as a time on this node's clock.
    pub base: Instant,
    /// What the latest answer was.
    pub from: BaseFrom,
    /// Sessions whose clocks start earlier than `base`: per session, the latest of the
    /// answers about its renewals (`witness.rs`).
    pub sessions: BTreeMap<SessionKey, Instant>,
}

/// One voter's answer as times on this node's clock ([`estimate`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The general answer.
    pub general: (Instant, BaseFrom),
    /// The sessions it answered for.
    pub sessions: BTreeMap<SessionKey, Instant>,
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
pub fn estimate(received: Instant, heard: &Heard) -> Answer {
    // Shrunk by the clock-rate margin: an overestimate would move the base early.
    let before = |us: u64| {
        received
            .checked_sub(super::witness::shrunk(Duration::from_micros(us)))
            .unwrap_or(received)
    };
    let general = match heard.elapsed_us {
        Some(us) => (before(us), BaseFrom::Answers),
        None => (received, BaseFrom::Election),
    };
    let sessions = heard
        .sessions
        .iter()
        .map(|s| ((s.node.clone(), s.session), before(s.elapsed_us)))
        .collect();
    Answer { general, sessions }
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
    let mut answered = BTreeMap::new();
    let quorum = |answered: &BTreeMap<String, Answer>| {
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
    let answers: Vec<Answer> = answered.into_values().collect();
    match std::env::var(UNSAFE_EARLY_HANDOFF).ok().as_deref() {
        None => combine(&answers, Rule::Latest),
        Some("earliest") => combine(&answers, Rule::Earliest),
        Some(_) => Some(early(combine(&answers, Rule::Latest)?, shared.timing.ttl)),
    }
}

/// How the answers about a session are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The latest: the rule the argument needs.
    Latest,
    /// The earliest: the deliberately wrong rule of [`UNSAFE_EARLY_HANDOFF`]`=earliest`.
    Earliest,
}

/// The base: the latest of a quorum's general answers (as [`estimate`] made them).
pub fn latest(answers: impl IntoIterator<Item = (Instant, BaseFrom)>) -> Option<Inherited> {
    let (base, from) = answers.into_iter().max_by_key(|(at, _)| *at)?;
    Some(Inherited {
        base,
        from,
        sessions: BTreeMap::new(),
    })
}

/// The base of a quorum's answers ([`latest`]), and per session the latest of the
/// answers about it: a voter's record of the session, or, if it left the session out,
/// its general answer (`witness.rs`, steps 3–4). A session whose start that way is not
/// earlier than the base starts at the base (both bound the past; the earlier is kept).
pub fn combine(answers: &[Answer], rule: Rule) -> Option<Inherited> {
    let mut inherited = latest(answers.iter().map(|a| a.general))?;
    let keys: std::collections::BTreeSet<&SessionKey> =
        answers.iter().flat_map(|a| a.sessions.keys()).collect();
    for key in keys {
        let each = answers
            .iter()
            .map(|a| a.sessions.get(key).copied().unwrap_or(a.general.0));
        let start = match rule {
            Rule::Latest => each.max(),
            Rule::Earliest => each.min(),
        };
        if let Some(start) = start.filter(|s| *s < inherited.base) {
            inherited.sessions.insert(key.clone(), start);
        }
    }
    Some(inherited)
}

/// The deliberately broken base of [`UNSAFE_EARLY_HANDOFF`]: a TTL earlier.
fn early(inherited: Inherited, ttl: Duration) -> Inherited {
    let earlier = |at: Instant| at.checked_sub(ttl).unwrap_or(at);
    Inherited {
        base: earlier(inherited.base),
        from: inherited.from,
        sessions: inherited
            .sessions
            .into_iter()
            .map(|(k, at)| (k, earlier(at)))
            .collect(),
    }
}

/// One voter's answer as a time on this node's clock: when it last heard a leader of an
/// older term, erring late.
async fn ask(shared: &Shared, name: &str, addr: &str, term: u64) -> Result<Answer, String> {
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
    const TTL: Duration = Duration::from_secs(2);

    /// The owner's deadline, for an owner whose last renewal the old leader received at
    /// `a` (TTL 2 s, m = T/20): D ≤ a + T − m.
    fn deadline(a: Instant) -> Instant {
        a + TTL - MS(100)
    }

    /// A voter's answer, given at `asked`: it last heard a leader at `heard` (`None`: no
    /// bound), and kept these sessions' renewals at these times.
    fn answer(asked: Instant, heard: Option<Instant>, sessions: &[(&str, u64, Instant)]) -> Heard {
        Heard {
            elapsed_us: heard.map(|h| (asked - h).as_micros() as u64),
            sessions: sessions
                .iter()
                .map(|(node, session, at)| SessionHeard {
                    node: (*node).into(),
                    session: *session,
                    elapsed_us: (asked - *at).as_micros() as u64,
                })
                .collect(),
        }
    }

    fn general(received: Instant, heard: &Heard) -> (Instant, BaseFrom) {
        estimate(received, heard).general
    }

    fn key(node: &str, session: u64) -> SessionKey {
        (node.into(), session)
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
        let received = asked + MS(5);
        // C alone: its start, shrunk by the margin, is the bound (earlier than a: a
        // voter that did not hear L1 does not push the base past a).
        let (c, from) = general(received, &answer(asked, Some(c_started), &[]));
        assert_eq!(from, BaseFrom::Answers);
        assert!(c >= c_started && c <= received);
        // With B, which heard L1's round: the base is B's hearing, at least a.
        let (b, _) = general(received, &answer(asked, Some(b_heard), &[]));
        let inherited = latest([(b, BaseFrom::Answers), (c, BaseFrom::Answers)]).unwrap();
        assert_eq!(inherited.from, BaseFrom::Answers);
        assert!(inherited.base >= b_heard && inherited.base >= a);
        // So no session expires before its owner's deadline, and the slot is free well
        // before election + T.
        assert!(inherited.base + TTL > deadline(a));
        assert!(inherited.base + TTL < received + TTL - MS(900));
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
        let b = general(received, &answer(asked, Some(b_heard), &[]));
        let c = general(received, &answer(asked, Some(c_restarted), &[]));
        let inherited = latest([b, c]).unwrap();
        assert_eq!(inherited.from, BaseFrom::Answers);
        // The base is C's start (erring late by the margin and the answer's delay),
        // after its lost hearing, after a.
        assert!(inherited.base >= c_restarted && inherited.base <= c_restarted + MS(50));
        assert!(inherited.base >= c_heard && inherited.base >= a);
        assert!(inherited.base + TTL > deadline(a));
        // Without C's answer (B's alone) the base would come before a: the bound rests
        // on the restarted voter's start.
        assert!(b.0 < a);
    }

    /// Had C answered as it did before (no record: "no bound"), the clocks would start at
    /// the election: safe, but a whole TTL after it.
    #[test]
    fn no_bound_starts_the_clocks_at_the_receive_time() {
        let received = Instant::now();
        let asked = received - MS(5);
        let none = estimate(received, &answer(asked, None, &[]));
        assert_eq!(none.general, (received, BaseFrom::Election));
        let b = general(received, &answer(asked, Some(asked - MS(990)), &[]));
        let inherited = latest([b, none.general]).unwrap();
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
        let heard = Heard {
            elapsed_us: Some(fast.as_micros() as u64),
            sessions: vec![SessionHeard {
                node: "n1".into(),
                session: 1,
                elapsed_us: fast.as_micros() as u64,
            }],
        };
        let answer = estimate(received, &heard);
        assert!(
            answer.general.0 >= heard_at - MS(3),
            "{:?}",
            heard_at - answer.general.0
        );
        assert!(answer.sessions[&key("n1", 1)] >= heard_at - MS(3));
    }

    /// The test-only switch's base (a TTL early) lets the new leader expire a session
    /// whose owner's deadline has not passed: what the fault checker must catch
    /// (`tests/faults.rs`, `an_early_handoff_after_an_unreached_voter_is_caught`).
    #[test]
    fn the_early_switch_breaks_the_bound() {
        let a = Instant::now() + MS(10_000);
        let asked = a + MS(1000);
        let b = general(asked, &answer(asked, Some(a + MS(10)), &[]));
        let inherited = latest([b]).unwrap();
        assert!(inherited.base + TTL > deadline(a));
        assert!(early(inherited, TTL).base + TTL < deadline(a));
    }

    /// Issue 30, item 4: the owner n1 also led (L1) and was killed at `kill`. Its last
    /// acknowledged renewal of session 4 arrived at `a = kill − 400 ms`; the round that
    /// carried it was kept by B (at `a + 2 ms`) and by L1 itself, not by C, which was cut
    /// off since `a − 700 ms` and kept the renewal before (at `a − 700 ms`). Both heard
    /// L1's heartbeats up to the kill (C's general hearing is its last, before its cut).
    /// L2 asks B and C. Per session it takes the latest of the records: B's, at or after
    /// a, so n1's session expires at `a + T` > D, 400 ms before the general base + T.
    #[test]
    fn per_session_the_latest_renewal_over_a_majority() {
        let kill = Instant::now() + MS(10_000);
        let a = kill - MS(400);
        let asked = kill + MS(300);
        let received = asked + MS(5);
        let b = estimate(
            received,
            &answer(
                asked,
                Some(kill - MS(20)),
                &[("n1", 4, a + MS(2)), ("n2", 9, kill - MS(100))],
            ),
        );
        let c = estimate(
            received,
            &answer(asked, Some(a - MS(700)), &[("n1", 4, a - MS(700))]),
        );
        let inherited = combine(&[b.clone(), c.clone()], Rule::Latest).unwrap();
        assert_eq!(inherited.from, BaseFrom::Answers);
        // The general base: the latest hearing of L1, near the kill.
        assert!(inherited.base >= kill - MS(20));
        let n1 = inherited.sessions[&key("n1", 4)];
        assert!(n1 >= a, "{:?} before a", a - n1);
        assert!(n1 + TTL > deadline(a));
        assert!(n1 + TTL <= inherited.base + TTL - MS(350));
        // n2's session: C did not answer for it, so C's general answer stands in
        // (earlier than B's record): B's record is the latest.
        assert!(inherited.sessions[&key("n2", 9)] >= kill - MS(100));
        // The wrong rule takes C's old record: n1's session expires before D.
        let wrong = combine(&[b, c], Rule::Earliest).unwrap();
        assert!(wrong.sessions[&key("n1", 4)] + TTL < deadline(a));
    }

    /// The voter of the round's quorum lost the session's record (it restarted after
    /// keeping the round, at `a + 100 ms`) and answers for no session; the other voter
    /// has an old record. The restarted voter's general answer (its start) stands in for
    /// the session, so the session starts no earlier than a.
    #[test]
    fn a_voter_without_the_session_answers_its_general_bound() {
        let kill = Instant::now() + MS(10_000);
        let a = kill - MS(300);
        let asked = kill + MS(300);
        let received = asked + MS(5);
        let stale = estimate(
            received,
            &answer(asked, Some(a - MS(900)), &[("n1", 4, a - MS(900))]),
        );
        let restarted = estimate(received, &answer(asked, Some(a + MS(100)), &[]));
        let inherited = combine(&[stale.clone(), restarted.clone()], Rule::Latest).unwrap();
        let n1 = inherited
            .sessions
            .get(&key("n1", 4))
            .copied()
            .unwrap_or(inherited.base);
        assert!(
            n1 >= a + MS(100),
            "{:?}",
            (a + MS(100)).checked_duration_since(n1)
        );
        assert!(n1 + TTL > deadline(a));
        // Skipping the voter without a record (or taking the earliest) would not be.
        let wrong = combine(&[stale, restarted], Rule::Earliest).unwrap();
        assert!(wrong.sessions[&key("n1", 4)] + TTL < deadline(a));
    }

    /// A session no voter answered for starts at the base; one whose per-session start
    /// is not earlier than the base is left at the base.
    #[test]
    fn sessions_no_voter_answered_for_start_at_the_base() {
        let t = Instant::now() + MS(10_000);
        let asked = t + MS(500);
        let one = estimate(asked, &answer(asked, Some(t), &[("n1", 1, t - MS(300))]));
        let two = estimate(
            asked,
            &answer(asked, Some(t - MS(50)), &[("n1", 1, t + MS(10))]),
        );
        let inherited = combine(&[one, two], Rule::Latest).unwrap();
        assert!(inherited.sessions.is_empty(), "{:?}", inherited.sessions);
        assert!(inherited.base >= t);
    }
}

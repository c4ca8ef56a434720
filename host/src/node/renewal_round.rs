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
//! first, under the same gate and only while it still leads the term. One round runs at a
//! time and carries every renewal waiting when it starts; each renewal's caller takes the
//! result of the round that carried it ([`RenewalRounds`]). A renewal is timed only while
//! its leader leads its term (`session::answer` reads the term on both sides), and a
//! round carries only renewals of its own term, each session at the latest receive time
//! carried in that term so far.
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
//! leads. M and Q meet only if they are majorities of one membership: a voter answers
//! for a session only under the membership it recorded it under, and one that appended
//! a membership change since heard that change's leader after its record, so its answer
//! for the node (later) stands in. L2 takes per session the latest over M, each erring
//! late, so the session's clock starts at or after a, and the session expires after its
//! owner's deadline. A voter that only heard a leader which acknowledged renewals
//! without a round (its replica below [`crate::version::RENEWAL_ROUNDS`]) keeps only
//! records of an older term than that hearing, which it then answers as "cannot say".
//!
//! Until the cluster's version is [`crate::version::RENEWAL_ROUNDS`], no round is sent
//! (a version 6 node does not know the kind), and renewals are acknowledged as before.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use super::handoff::{micros, quorum};
use super::shared::Shared;

/// The message kind of a renewal round (see `crate::raft` for the numbering).
pub const RENEWAL_ROUND: u16 = 22;

/// A renewal round of the leader of `term`: per session, how many microseconds before
/// sending the leader received the renewal this round confirms. The answer is `()`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Carried {
    pub term: u64,
    pub renewals: Vec<(u64, u64)>,
}

/// Results kept for callers that come for them late (a caller whose round ran is
/// normally the next to take the lock, which is fair).
const RESULTS_KEPT: usize = 16;

/// The leader's rounds, and the renewals waiting for the next one.
///
/// Each renewal is numbered with the round that will carry it, under the same lock as
/// the rounds take the queue, and its caller takes the result of that round and of no
/// other: a round that carried a renewal and failed never lets a later round acknowledge
/// it. One round runs at a time; every renewal that arrives while one is in flight goes
/// with the next.
#[derive(Default)]
pub struct RenewalRounds {
    queue: Mutex<Queue>,
    /// The last rounds' terms and results, by number; held while a round runs.
    results: tokio::sync::Mutex<BTreeMap<u64, Ran>>,
}

/// A round's term and result.
type Ran = (u64, Result<(), String>);

#[derive(Default)]
struct Queue {
    /// The number of the round that carries what waits now.
    next: u64,
    /// (term, session, receive time) of the renewals waiting.
    waiting: Vec<(u64, u64, Instant)>,
    /// The term of `latest`, and per session the latest receive time carried in it.
    term: u64,
    latest: HashMap<u64, Instant>,
}

/// Confirms, on the leader of `term`, that a quorum of voters recorded the renewal of
/// `session` received at `received` (while this node led `term`), in a round that
/// started after it arrived. Does nothing while the cluster's version is below
/// [`crate::version::RENEWAL_ROUNDS`].
pub async fn confirm(
    shared: &Arc<Shared>,
    term: u64,
    session: u64,
    received: Instant,
) -> Result<(), String> {
    if shared.read(|c| c.version) < crate::version::RENEWAL_ROUNDS {
        return Ok(());
    }
    shared
        .renewal_rounds
        .confirm(term, session, received, |of, renewals| {
            round(shared, of, renewals)
        })
        .await
}

impl RenewalRounds {
    /// [`confirm`], with `run` for the round: `run(term, renewals)`.
    async fn confirm<F, R>(
        &self,
        term: u64,
        session: u64,
        received: Instant,
        run: R,
    ) -> Result<(), String>
    where
        R: FnOnce(u64, Vec<(u64, Instant)>) -> F,
        F: std::future::Future<Output = Result<(), String>>,
    {
        let mine = {
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.waiting.push((term, session, received));
            queue.next
        };
        let mut results = self.results.lock().await;
        if !results.contains_key(&mine) {
            if results.keys().next_back().is_some_and(|last| *last > mine) {
                return Err("the renewal round that carried this renewal is forgotten".into());
            }
            // No round numbered `mine` has a result, and none can start while the lock is
            // held: the next is `mine` itself, unless a caller that took `mine` was
            // dropped mid-round (its result never written). Then this runs a later one,
            // and `mine` is answered "forgotten" below: an error, never an
            // acknowledgement of a renewal no finished round carried.
            let (number, of, carried) = self.take();
            let result = run(of, carried).await;
            results.insert(number, (of, result));
            while results.len() > RESULTS_KEPT {
                results.pop_first();
            }
        }
        match results.get(&mine) {
            Some((of, result)) if *of == term => result.clone(),
            Some((of, _)) => Err(format!(
                "the renewal round of term {of} carried no renewal of term {term}"
            )),
            None => Err("the renewal round that carried this renewal is forgotten".into()),
        }
    }

    /// Takes what waits, with the number of the round that carries it. Per session, a
    /// round carries the latest receive time carried so far in its term: an older
    /// renewal whose caller gave up must not follow a newer one to a voter that lost its
    /// record of the newer one (a restart). Renewals of another term are dropped (their
    /// callers were refused).
    fn take(&self) -> (u64, u64, Vec<(u64, Instant)>) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let number = queue.next;
        queue.next += 1;
        let waiting = std::mem::take(&mut queue.waiting);
        // Terms only go up: a renewal of a term below the last one carried waited too
        // long and is dropped, and `latest` is kept until a higher term comes.
        let term = waiting
            .iter()
            .map(|(t, _, _)| *t)
            .max()
            .unwrap_or(queue.term)
            .max(queue.term);
        if term > queue.term {
            queue.term = term;
            queue.latest.clear();
        }
        let mut carried = Vec::new();
        for (of, session, received) in waiting {
            if of != term {
                continue;
            }
            let latest = queue.latest.entry(session).or_insert(received);
            *latest = (*latest).max(received);
            carried.push((session, *latest));
        }
        (number, term, carried)
    }
}

/// One round: records the renewals here (only while this node still leads their term),
/// and sends them to the other voters until a majority of each voter set (this node
/// counted) took them.
async fn round(
    shared: &Arc<Shared>,
    term: u64,
    renewals: Vec<(u64, Instant)>,
) -> Result<(), String> {
    let sets = shared.control.voter_sets();
    let voters = shared.control.members().voters;
    shared.control.record_renewals(term, &renewals).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Queues a renewal of `session` in `term`, received at `at`, with no caller.
    fn wait(rounds: &RenewalRounds, term: u64, session: u64, at: Instant) {
        rounds
            .queue
            .lock()
            .unwrap()
            .waiting
            .push((term, session, at));
    }

    /// A renewal that was waiting when a round took the queue gets that round's result,
    /// even when the round was started by another renewal's caller and a later round
    /// succeeds; a renewal that arrived while it ran goes with the next round.
    #[tokio::test]
    async fn each_renewal_gets_the_result_of_the_round_that_carried_it() {
        let rounds = Arc::new(RenewalRounds::default());
        let t0 = Instant::now();
        let (release, released) = oneshot::channel::<()>();
        let (carried_tx, mut carried) = tokio::sync::mpsc::unbounded_channel();
        // A's round (number 0) waits for `release`, then fails.
        let a = {
            let (rounds, carried_tx) = (rounds.clone(), carried_tx.clone());
            tokio::spawn(async move {
                rounds
                    .confirm(5, 1, t0, |term, renewals| async move {
                        carried_tx.send((term, renewals)).unwrap();
                        released.await.unwrap();
                        Err("no quorum".to_string())
                    })
                    .await
            })
        };
        let (term, first) = carried.recv().await.unwrap();
        assert_eq!((term, first), (5, vec![(1, t0)]));
        // B arrives while round 0 runs: it goes with round 1, which succeeds.
        let b = {
            let (rounds, carried_tx) = (rounds.clone(), carried_tx.clone());
            tokio::spawn(async move {
                rounds
                    .confirm(5, 2, t0 + MS(10), |term, renewals| async move {
                        carried_tx.send((term, renewals)).unwrap();
                        Ok(())
                    })
                    .await
            })
        };
        tokio::time::sleep(MS(20)).await;
        release.send(()).unwrap();
        assert_eq!(a.await.unwrap(), Err("no quorum".to_string()));
        assert_eq!(b.await.unwrap(), Ok(()));
        let (_, second) = carried.recv().await.unwrap();
        assert_eq!(second, vec![(2, t0 + MS(10))]);
    }

    /// Two renewals waiting when a round takes the queue both get that round's failure,
    /// whichever caller ran it, and a later round that succeeds acknowledges neither.
    #[tokio::test]
    async fn a_renewal_carried_by_a_failed_round_is_not_acknowledged_by_a_later_one() {
        let rounds = Arc::new(RenewalRounds::default());
        let t0 = Instant::now();
        let runs = Arc::new(Mutex::new(Vec::new()));
        let confirm = |session: u64, at: Instant, ok: bool| {
            let (rounds, runs) = (rounds.clone(), runs.clone());
            tokio::spawn(async move {
                rounds
                    .confirm(5, session, at, |term, renewals| async move {
                        runs.lock().unwrap().push((term, renewals));
                        if ok {
                            Ok(())
                        } else {
                            Err("no quorum".to_string())
                        }
                    })
                    .await
            })
        };
        // Both wait before any round takes the queue.
        let held = rounds.results.lock().await;
        let a = confirm(1, t0, false);
        let c = confirm(3, t0 + MS(5), false);
        while rounds.queue.lock().unwrap().waiting.len() < 2 {
            tokio::time::sleep(MS(1)).await;
        }
        drop(held);
        assert!(a.await.unwrap().is_err());
        assert!(c.await.unwrap().is_err());
        let d = confirm(4, t0 + MS(30), true);
        assert_eq!(d.await.unwrap(), Ok(()));
        let runs = runs.lock().unwrap().clone();
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert_eq!(runs[0], (5, vec![(1, t0), (3, t0 + MS(5))]));
        assert_eq!(runs[1], (5, vec![(4, t0 + MS(30))]));
    }

    /// Per session, a round carries the latest receive time carried in its term, never an
    /// older one that waited longer; renewals of another term are not carried, and their
    /// callers are refused.
    #[tokio::test]
    async fn a_round_carries_the_latest_renewal_of_its_term_only() {
        let rounds = RenewalRounds::default();
        let t0 = Instant::now();
        let ok = |_: u64, _: Vec<(u64, Instant)>| async { Ok(()) };
        assert_eq!(rounds.confirm(5, 1, t0 + MS(50), ok).await, Ok(()));
        // An older renewal of session 1 and one of an earlier term wait together.
        wait(&rounds, 4, 9, t0 + MS(60));
        wait(&rounds, 5, 1, t0 + MS(10));
        let (_, term, carried) = rounds.take();
        assert_eq!(term, 5);
        assert_eq!(carried, vec![(1, t0 + MS(50))]);
        // A caller of an older term, whose round carried a newer term's renewals.
        wait(&rounds, 6, 2, t0 + MS(70));
        let refused = rounds.confirm(5, 3, t0 + MS(80), ok).await;
        assert!(refused.is_err(), "{refused:?}");
        // A renewal of term 5 that waited past that round neither takes the round back
        // to term 5 nor clears what term 6 carried.
        wait(&rounds, 5, 4, t0 + MS(90));
        let (_, term, carried) = rounds.take();
        assert_eq!((term, carried), (6, vec![]));
        wait(&rounds, 6, 2, t0 + MS(65));
        let (_, _, carried) = rounds.take();
        assert_eq!(carried, vec![(2, t0 + MS(70))]);
    }
}

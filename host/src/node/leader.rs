//! The leader's duties: expire sessions whose renewals stopped, and carry out the
//! placement plan.
//!
//! Renewal receive times live only in the leader's memory ([`Liveness`]); they are not
//! replicated. A session expires at `receive time of its last renewal + T`; a new leader
//! (a new term) first gives every session a full T from the moment it sees it, because it
//! cannot know when the previous leader last heard from anyone. Expiry is a committed
//! command, `EndSession { expired_in: Some(term) }`, and only its application vacates the
//! slots, so reassignment always comes after it, with new tokens. It carries the term
//! whose renewal times it rests on and is refused from an entry of any other term: a
//! leader deposed between its decision and its proposal has the proposal forwarded to
//! its successor, which has heard renewals the deposed one has not (the fault run found
//! this: the successor granted a live node's slot away).
//!
//! Every node runs [`lead`]; it acts only while its Raft node is the leader, and on every
//! node it reports leader changes (`cluster.leader`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::shared::{Shared, now_ms};
use crate::cluster::{Command, Response};
use crate::events;
use crate::placement;

/// Most commands proposed in one log entry: keeps entries well under the frame limit.
const BATCH: usize = 500;
/// Placement also runs this often without any state change (cooldowns and the minimum
/// term before a rebalance pass with time).
const REPLAN_EVERY: Duration = Duration::from_secs(1);

/// Renewal receive times, for the current term only.
#[derive(Default)]
pub struct Liveness {
    inner: Mutex<Terms>,
}

#[derive(Default)]
struct Terms {
    term: u64,
    /// node → (session, receive time of its last acknowledged renewal).
    last: HashMap<String, (u64, Instant)>,
    /// Sessions decided expired in this term: no renewal of them is acknowledged again.
    ended: HashSet<(String, u64)>,
}

impl Liveness {
    /// Records a renewal received at `received` in `term`, before it is acknowledged.
    /// Returns false, recording nothing, if the session was already decided expired:
    /// the renewal must then be refused.
    pub fn renewed(&self, term: u64, node: &str, session: u64, received: Instant) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.enter(term);
        if inner.ended.contains(&(node.to_owned(), session)) {
            return false;
        }
        let entry = inner
            .last
            .entry(node.to_owned())
            .or_insert((session, received));
        if entry.0 != session || entry.1 < received {
            *entry = (session, received);
        }
        true
    }

    /// The sessions whose last renewal is older than `ttl` at `now`. A session seen for
    /// the first time in this term starts its clock at `now`.
    pub fn expired(
        &self,
        term: u64,
        sessions: &[(String, u64)],
        now: Instant,
        ttl: Duration,
    ) -> Vec<(String, u64)> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.enter(term);
        inner
            .last
            .retain(|node, (session, _)| sessions.iter().any(|(n, s)| n == node && s == session));
        let mut expired = Vec::new();
        for (node, session) in sessions {
            let (_, last) = *inner.last.entry(node.clone()).or_insert((*session, now));
            if now.saturating_duration_since(last) >= ttl {
                expired.push((node.clone(), *session));
            }
        }
        inner
            .ended
            .retain(|(node, session)| sessions.iter().any(|(n, s)| n == node && s == session));
        inner.ended.extend(expired.iter().cloned());
        expired
    }
}

impl Terms {
    fn enter(&mut self, term: u64) {
        if term != self.term {
            self.term = term;
            self.last.clear();
            self.ended.clear();
        }
    }
}

/// Runs the leader's duties whenever this node leads, until `stop` is set.
pub async fn lead(shared: Arc<Shared>, liveness: Arc<Liveness>, mut stop: watch::Receiver<bool>) {
    let ttl = shared.timing.ttl;
    let tick = (ttl / 16).min(Duration::from_millis(50));
    let mut applied = shared.control.applied();
    let mut seen_leader: Option<(String, u64)> = None;
    let mut planned_at: Option<(u64, Instant)> = None;
    let options = placement::Options::default();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            changed = applied.changed() => if changed.is_err() { return },
            _ = stop.wait_for(|s| *s) => return,
        }
        let leader = shared.control.leader().map(|(name, _)| name);
        let term = shared.control.term();
        if let Some(name) = leader
            && seen_leader.as_ref() != Some(&(name.clone(), term))
        {
            tracing::info!(event = events::CLUSTER_LEADER, node = %name, term, "leader is {name} (term {term})");
            seen_leader = Some((name, term));
        }
        if !shared.control.is_leader() {
            planned_at = None;
            continue;
        }

        let now = Instant::now();
        let sessions: Vec<(String, u64)> = shared.read(|c| {
            c.members
                .iter()
                .filter_map(|(n, m)| Some((n.clone(), m.session.as_ref()?.id)))
                .collect()
        });
        let expired = liveness.expired(term, &sessions, now, ttl);
        if !expired.is_empty() {
            let at_ms = now_ms();
            let commands = expired
                .iter()
                .map(|(node, session)| Command::EndSession {
                    node: node.clone(),
                    session: *session,
                    expired_in: Some(term),
                    at_ms,
                })
                .collect();
            match shared.propose_batch(commands).await {
                Ok(answers) => {
                    for ((node, session), answer) in expired.iter().zip(answers) {
                        if answer == Response::Done {
                            tracing::warn!(event = events::SESSION_EXPIRED, node = %node, session, "session of {node} expired: no renewal for {}", humantime::format_duration(ttl));
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(event = events::CONTROL_ERROR, %error, "cannot expire sessions")
                }
            }
        }

        let index = *applied.borrow_and_update();
        let due = planned_at.is_none_or(|(i, at)| i != index || at.elapsed() >= REPLAN_EVERY);
        if !due {
            continue;
        }
        planned_at = Some((index, Instant::now()));
        let plan = shared.read(|c| placement::plan(c, now_ms(), &options));
        for chunk in plan.commands.chunks(BATCH) {
            if let Err(error) = shared.propose_batch(chunk.to_vec()).await {
                tracing::warn!(event = events::CONTROL_ERROR, %error, "cannot carry out the placement plan");
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_session_expires_a_ttl_after_its_last_renewal() {
        let live = Liveness::default();
        let t0 = Instant::now();
        let ttl = ms(1000);
        let sessions = [("a".to_owned(), 5)];
        assert!(live.renewed(1, "a", 5, t0));
        assert!(live.expired(1, &sessions, t0 + ms(999), ttl).is_empty());
        assert!(live.renewed(1, "a", 5, t0 + ms(500)));
        assert!(live.expired(1, &sessions, t0 + ms(1499), ttl).is_empty());
        assert_eq!(live.expired(1, &sessions, t0 + ms(1500), ttl), sessions);
    }

    #[test]
    fn a_new_term_gives_every_session_a_full_ttl() {
        let live = Liveness::default();
        let t0 = Instant::now();
        let ttl = ms(1000);
        let sessions = [("a".to_owned(), 5), ("b".to_owned(), 6)];
        assert!(live.renewed(1, "a", 5, t0));
        // Term 2 begins long after a's last renewal in term 1: a is not expired at once.
        let later = t0 + ms(5000);
        assert!(live.expired(2, &sessions, later, ttl).is_empty());
        assert_eq!(live.expired(2, &sessions, later + ms(1000), ttl).len(), 2);
    }

    #[test]
    fn a_session_decided_expired_is_not_renewed_again() {
        let live = Liveness::default();
        let t0 = Instant::now();
        let ttl = ms(1000);
        let sessions = [("a".to_owned(), 5)];
        assert!(live.renewed(1, "a", 5, t0));
        assert_eq!(live.expired(1, &sessions, t0 + ms(1000), ttl), sessions);
        // A renewal that arrived before the decision but is answered after it is refused.
        assert!(!live.renewed(1, "a", 5, t0 + ms(999)));
        // The next session of the node is not affected, nor is a later term.
        assert!(live.renewed(1, "a", 6, t0 + ms(1001)));
        assert!(live.renewed(2, "a", 5, t0 + ms(1002)));
    }

    #[test]
    fn a_replaced_session_starts_a_fresh_clock() {
        let live = Liveness::default();
        let t0 = Instant::now();
        let ttl = ms(1000);
        assert!(live.renewed(1, "a", 5, t0));
        assert!(
            live.expired(1, &[("a".into(), 9)], t0 + ms(1500), ttl)
                .is_empty()
        );
        assert_eq!(
            live.expired(1, &[("a".into(), 9)], t0 + ms(2500), ttl),
            [("a".to_owned(), 9)]
        );
    }
}

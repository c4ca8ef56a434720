//! The leader's duties: expire sessions whose renewals stopped, and carry out the
//! placement plan.
//!
//! Renewal receive times live only in the leader's memory ([`Liveness`]); they are not
//! replicated. A session expires at `receive time of its last renewal + T`; a new leader
//! (a new term) cannot know when the previous leader last heard from anyone, so it starts
//! every session's clock at the base its lease handoff found (`handoff.rs`: what a
//! majority of voters last heard of a leader, and from cluster version 7 each session's
//! own last renewal as the renewal rounds told them), never later than its election plus
//! T. Expiry is a committed
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
use crate::cluster::{ClusterId, Command, Response};
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
    /// Where the clocks of the sessions held before this term start (`handoff.rs`):
    /// unknown until a majority of voters answered, and nothing expires until then.
    base: Option<Instant>,
    /// Sessions whose clocks start at a base of their own, earlier than `base`: their
    /// last renewal as the old leader's renewal rounds told a majority (`renewal_round.rs`).
    own: HashMap<u64, Instant>,
    /// Whether the sessions present when the base came were given it; sessions first
    /// seen later start their clock at first sight.
    seeded: bool,
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

    /// Sets the base of `term`'s session clocks, learned from a majority of voters, and
    /// the sessions whose clocks start at a base of their own.
    pub fn inherit(&self, term: u64, base: Instant, own: HashMap<u64, Instant>) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.enter(term);
        if inner.base.is_none() {
            inner.base = Some(base);
            inner.own = own;
        }
    }

    /// Whether `term`'s base is known.
    pub fn inherited(&self, term: u64) -> bool {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.term == term && inner.base.is_some()
    }

    /// The sessions whose last renewal is older than `ttl` at `now`; none before the
    /// term's base is known. A session not renewed in this term starts its clock at its
    /// own base or the term's if it was there when the base came, else at first sight.
    pub fn expired(
        &self,
        term: u64,
        sessions: &[(String, u64)],
        now: Instant,
        ttl: Duration,
    ) -> Vec<(String, u64)> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.enter(term);
        let Some(base) = inner.base else {
            return Vec::new();
        };
        let seeded = inner.seeded;
        let own = std::mem::take(&mut inner.own);
        let start = |session: u64| match seeded {
            true => now,
            false => own.get(&session).copied().unwrap_or(base),
        };
        inner.seeded = true;
        inner
            .last
            .retain(|node, (session, _)| sessions.iter().any(|(n, s)| n == node && s == session));
        let mut expired = Vec::new();
        for (node, session) in sessions {
            let (_, last) = *inner
                .last
                .entry(node.clone())
                .or_insert((*session, start(*session)));
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

impl Liveness {
    /// When the next session of `term` not yet decided expired would expire if no
    /// renewal came first (the earliest clock start + `ttl`), so the leader decides on
    /// time rather than up to a tick later; `None` before the base is known.
    pub fn next_expiry(&self, term: u64, ttl: Duration) -> Option<Instant> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.term != term {
            return None;
        }
        let base = inner.base?;
        let unseeded = (!inner.seeded)
            .then(|| inner.own.values().copied().chain([base]).min())
            .flatten();
        let earliest = inner
            .last
            .iter()
            .filter(|(node, (session, _))| !inner.ended.contains(&((*node).clone(), *session)))
            .map(|(_, (_, at))| *at)
            .chain(unseeded)
            .min()?;
        Some(earliest + ttl)
    }
}

impl Terms {
    fn enter(&mut self, term: u64) {
        if term != self.term {
            *self = Terms {
                term,
                ..Terms::default()
            };
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
    // The lease handoff's question to the voters, for the term it was asked in.
    let mut handoff: Option<(u64, tokio::task::JoinHandle<()>)> = None;
    let options = placement::Options::default();
    let mut removals = super::revocations::Removals::default();
    // A recovered store's hold (`raft/recover.rs`): from this node's first lead on.
    let mut hold_from: Option<Instant> = None;
    // The proposal of the cluster's id, while the cluster has none (`identify`); a
    // JoinSet, so that it is aborted when this loop ends.
    let mut identifying = tokio::task::JoinSet::new();
    loop {
        // Wake at the next expiry if it comes before the tick (at TTL 500 ms the tick is
        // 31 ms: up to that much failover otherwise).
        let mut wake = Instant::now() + tick;
        if let Some(at) = liveness.next_expiry(shared.control.term(), ttl) {
            wake = wake.min(at.max(Instant::now() + Duration::from_millis(1)));
        }
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => {}
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
        // Beside the other duties, not before them: a proposal that keeps failing must
        // not hold up expiries and placement.
        while identifying.try_join_next().is_some() {}
        if shared.read(|c| c.id.is_none()) && identifying.is_empty() {
            let shared = shared.clone();
            identifying.spawn(async move { identify(&shared).await });
        }
        if !liveness.inherited(term)
            && handoff
                .as_ref()
                .is_none_or(|(t, task)| *t != term || task.is_finished())
        {
            let (shared, liveness) = (shared.clone(), liveness.clone());
            handoff = Some((
                term,
                tokio::spawn(async move {
                    if let Some(inherited) = super::handoff::inherit(shared, term).await {
                        let base = inherited.base;
                        let ago = Duration::from_millis(base.elapsed().as_millis() as u64);
                        let whence = match inherited.from {
                            super::handoff::BaseFrom::Answers => "from the voters' answers",
                            super::handoff::BaseFrom::Election => {
                                "at this leader's election: a voter could not bound the past"
                            }
                        };
                        let earliest = inherited.sessions.values().min().copied().unwrap_or(base);
                        let own_ms_ago = earliest.elapsed().as_millis() as u64;
                        tracing::info!(
                            event = events::LEASE_INHERITED,
                            term,
                            base_ms_ago = ago.as_millis() as u64,
                            from = inherited.from.as_str(),
                            renewals = inherited.sessions.len(),
                            earliest_ms_ago = own_ms_ago,
                            "the session clocks of term {term} start {} ago, {whence}; {} of them at their own last renewal, the earliest {} ago",
                            humantime::format_duration(ago),
                            inherited.sessions.len(),
                            humantime::format_duration(Duration::from_millis(own_ms_ago))
                        );
                        liveness.inherit(term, base, inherited.sessions);
                    }
                }),
            ));
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

        if shared.control.hold() {
            let from = *hold_from.get_or_insert_with(|| {
                tracing::warn!(event = events::CLUSTER_RECOVERY_HOLD, phase = "start", ttl_ms = ttl.as_millis() as u64, "this node was recovered as the only voter: it grants nothing for {} (the lost nodes' plugins may run until their leases end)", humantime::format_duration(ttl));
                Instant::now()
            });
            if from.elapsed() < ttl {
                continue;
            }
            match shared.control.end_hold().await {
                Ok(()) => {
                    tracing::info!(
                        event = events::CLUSTER_RECOVERY_HOLD,
                        phase = "end",
                        ttl_ms = ttl.as_millis() as u64,
                        "the recovery hold is over: placement grants slots again"
                    )
                }
                Err(error) => {
                    tracing::warn!(event = events::CONTROL_ERROR, %error, "cannot clear the recovery hold; retrying");
                    continue;
                }
            }
        }
        let index = *applied.borrow_and_update();
        let due = planned_at.is_none_or(|(i, at)| i != index || at.elapsed() >= REPLAN_EVERY);
        if !due {
            continue;
        }
        planned_at = Some((index, Instant::now()));
        removals.tick(&shared);
        let plan = shared.read(|c| placement::plan(c, now_ms(), &options));
        for chunk in plan.commands.chunks(BATCH) {
            if let Err(error) = shared.propose_batch(chunk.to_vec()).await {
                tracing::warn!(event = events::CONTROL_ERROR, %error, "cannot carry out the placement plan");
                break;
            }
        }
    }
}

/// Gives a cluster without an id one (`cluster/identity.rs`): a new cluster's first
/// leader, or the first leader after an upgrade from a store without ids.
async fn identify(shared: &Shared) {
    let cluster = ClusterId::random();
    // Proposed here only, never forwarded (a member's proposal of it is refused): a node
    // that lost its leadership leaves the id to the next leader.
    match shared
        .control
        .propose_here(Command::Identify { cluster })
        .await
    {
        Ok(Response::Done) => {
            let id = shared.read(|c| c.id).unwrap_or(cluster);
            tracing::info!(event = events::CLUSTER_IDENTIFIED, cluster = %id, "the cluster's id is {id}");
        }
        // Another leader's id was applied first.
        Ok(_) if shared.read(|c| c.id.is_some()) => {}
        Ok(answer) => {
            tracing::warn!(
                event = events::CONTROL_ERROR,
                ?answer,
                "the cluster's id was not set"
            )
        }
        Err(crate::raft::ProposeError::NotLeader { .. }) => {}
        Err(error) => {
            tracing::warn!(event = events::CONTROL_ERROR, %error, "cannot set the cluster's id; retrying")
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
        live.inherit(1, t0, HashMap::new());
        assert!(live.renewed(1, "a", 5, t0));
        assert!(live.expired(1, &sessions, t0 + ms(999), ttl).is_empty());
        assert!(live.renewed(1, "a", 5, t0 + ms(500)));
        assert!(live.expired(1, &sessions, t0 + ms(1499), ttl).is_empty());
        assert_eq!(live.expired(1, &sessions, t0 + ms(1500), ttl), sessions);
    }

    #[test]
    fn a_new_term_expires_nothing_until_it_inherits_a_base_then_counts_from_it() {
        let live = Liveness::default();
        let t0 = Instant::now();
        let ttl = ms(1000);
        let sessions = [("a".to_owned(), 5), ("b".to_owned(), 6)];
        assert!(live.renewed(1, "a", 5, t0));
        // Term 2 begins long after a's last renewal in term 1: without the voters'
        // answers nothing expires, however late.
        let later = t0 + ms(5000);
        assert!(live.expired(2, &sessions, later, ttl).is_empty());
        assert!(live.expired(2, &sessions, later + ms(9000), ttl).is_empty());
        assert!(!live.inherited(2));
        // The voters last heard the old leader 300 ms before `later`.
        live.inherit(2, later - ms(300), HashMap::new());
        assert!(live.inherited(2));
        assert!(!live.inherited(3));
        // A renewal in term 2 moves its session's clock on; the other counts from the base.
        assert!(live.renewed(2, "b", 6, later + ms(100)));
        assert!(live.expired(2, &sessions, later + ms(699), ttl).is_empty());
        assert_eq!(
            live.expired(2, &sessions, later + ms(700), ttl),
            [("a".to_owned(), 5)]
        );
        assert_eq!(
            live.expired(2, &sessions, later + ms(1100), ttl),
            [("a".to_owned(), 5), ("b".to_owned(), 6)]
        );
        // A later base does not replace the first.
        live.inherit(2, later + ms(5000), HashMap::new());
        assert_eq!(live.expired(2, &sessions, later + ms(1100), ttl).len(), 2);
    }

    #[test]
    fn a_session_first_seen_after_the_base_came_counts_from_first_sight() {
        let live = Liveness::default();
        let t0 = Instant::now();
        let ttl = ms(1000);
        live.inherit(2, t0, HashMap::new());
        assert!(
            live.expired(2, &[("a".into(), 5)], t0 + ms(10), ttl)
                .is_empty()
        );
        // b opened its session in this term, long after the base.
        let both = [("a".to_owned(), 5), ("b".to_owned(), 7)];
        assert_eq!(
            live.expired(2, &both, t0 + ms(1500), ttl),
            [("a".to_owned(), 5)]
        );
        assert!(live.expired(2, &both[1..], t0 + ms(2499), ttl).is_empty());
        assert_eq!(live.expired(2, &both[1..], t0 + ms(2500), ttl).len(), 1);
    }

    #[test]
    fn the_next_expiry_is_the_earliest_clock_start_plus_the_ttl() {
        let live = Liveness::default();
        let t0 = Instant::now();
        let ttl = ms(1000);
        let sessions = [("a".to_owned(), 5), ("b".to_owned(), 6)];
        // Nothing before the base.
        assert!(live.renewed(2, "a", 5, t0 + ms(100)));
        assert_eq!(live.next_expiry(2, ttl), None);
        // Sessions present when the base came start at it.
        live.inherit(2, t0, HashMap::new());
        assert_eq!(live.next_expiry(2, ttl), Some(t0 + ttl));
        assert!(live.expired(2, &sessions, t0 + ms(50), ttl).is_empty());
        assert_eq!(
            live.next_expiry(2, ttl),
            Some(t0 + ttl),
            "b counts from the base"
        );
        assert!(live.renewed(2, "b", 6, t0 + ms(300)));
        assert_eq!(
            live.next_expiry(2, ttl),
            Some(t0 + ms(1100)),
            "a renewed at 100"
        );
        // Once a is decided expired, the next is b's.
        assert_eq!(live.expired(2, &sessions, t0 + ms(1100), ttl).len(), 1);
        assert_eq!(live.next_expiry(2, ttl), Some(t0 + ms(1300)));
        assert_eq!(live.next_expiry(3, ttl), None, "another term");
    }

    #[test]
    fn a_session_decided_expired_is_not_renewed_again() {
        let live = Liveness::default();
        let t0 = Instant::now();
        let ttl = ms(1000);
        let sessions = [("a".to_owned(), 5)];
        live.inherit(1, t0, HashMap::new());
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
        live.inherit(1, t0, HashMap::new());
        assert!(live.renewed(1, "a", 5, t0));
        assert!(live.expired(1, &[("a".into(), 5)], t0, ttl).is_empty());
        // a's session 5 is replaced by 9, first seen now: its clock starts now.
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

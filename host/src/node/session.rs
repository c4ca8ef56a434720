//! The node's session: open it, renew it every T/4 with the leader, and keep the lease
//! deadline (docs/design.md §5.4, "Sessions and leases").
//!
//! - A renewal is sent to the current leader with the session id every T/4, whether or
//!   not the previous one was answered, and at once when a new leader is known; the send
//!   time is taken before sending. Only an
//!   acknowledgement moves the deadline, to `send time + T − m`
//!   ([`Lease::acked`](crate::ownership::Lease::acked)), never back.
//! - The leader answers only after a quorum round that began after the renewal arrived
//!   ([`answer`]), so a deposed or partitioned leader cannot acknowledge.
//! - When the deadline passes, or the leader says the session is unknown (expired),
//!   the node has lost its lease: the engine stops its plugins by the deadline. It waits
//!   until the deadline has passed and every plugin of the session has stopped, then
//!   opens a new session, which vacates any slot still bound to the old one; new grants
//!   come with new tokens.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::handoff;
use super::leader::Liveness;
use super::renewal_round;
use super::shared::{Shared, now_ms};
use crate::cluster::{Command, Response};
use crate::events;

/// The message kind of a renewal (see `crate::raft` for the numbering).
pub const RENEW: u16 = 20;

/// A renewal: the session being renewed. The node is the authenticated caller.
#[derive(Serialize, Deserialize)]
pub struct Renew {
    pub session: u64,
}

/// The leader's answer.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Renewed {
    /// Acknowledged after a quorum round that began after the renewal arrived.
    Ok,
    /// The session is not the node's current one: it expired or was replaced.
    UnknownSession,
}

/// Keeps the node's session alive until `stop` is set.
pub async fn keep(
    shared: Arc<Shared>,
    liveness: Arc<Liveness>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let every = shared.timing.renew_every();
    // The session this process held before, which it knows is over.
    let mut ended = None;
    loop {
        // A new session only once the previous deadline has passed and every plugin of
        // the old session has stopped (`plugin.stopped` written): opening it vacates the
        // old session's slots, and a successor may start at once. The engine traps them
        // at the deadline, so this wait is short; a call abandoned after its backstop
        // ends it too, because its instance is dropped with it.
        if let Some(deadline) = shared.with_lease(|l| l.deadline()) {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline.into()) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        if shared.node_lease.enforced() {
            tokio::select! {
                _ = shared.live.none() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        let session = tokio::select! {
            session = open(&shared, every, ended) => session,
            _ = stop.wait_for(|s| *s) => return,
        };
        shared.with_lease(|l| l.opened(session));
        tracing::info!(event = events::SESSION_OPENED, node = %shared.me, session, "session opened");

        let why = renew_until_lost(&shared, &liveness, session, &mut stop).await;
        match why {
            Some(why) => lost(&shared, session, why),
            None => return,
        }
        // Over for this process once the wait at the top of the loop has passed.
        ended = Some(session);
    }
}

/// Renews `session` every T/4 until its lease is lost (returns why) or `stop` is set
/// (returns `None`).
///
/// A renewal goes out every T/4 whether or not the previous one has been answered: an
/// answer that takes longer than T/4 (a loaded leader, a slow quorum round) still moves
/// the deadline to its own send time + T − m, as long as it comes before that. Each
/// renewal is abandoned at that point, so at most four are in flight. (Waiting for each
/// answer before sending the next, as before, threw away every answer slower than T/4:
/// at TTL 500 ms on a busy machine, owners lost their slots in calm.)
async fn renew_until_lost(
    shared: &Arc<Shared>,
    liveness: &Arc<Liveness>,
    session: u64,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<&'static str> {
    let every = shared.timing.renew_every();
    let worth = shared.timing.ttl - shared.timing.margin();
    let mut inflight: tokio::task::JoinSet<(Instant, Result<Renewed, String>)> =
        tokio::task::JoinSet::new();
    let mut next = Instant::now();
    // A renewal sent while no leader is known fails at once; the next would wait up to
    // T/4. After a leader change, renew at once instead: an election has already used
    // most of the window the lease leaves (`ControlOptions::paced_for`).
    let mut metrics = shared.control.metrics();
    let mut leader = metrics.borrow_and_update().current_leader;
    loop {
        let now = Instant::now();
        if now >= next {
            let (shared, liveness) = (shared.clone(), liveness.clone());
            inflight.spawn(async move {
                let answer = tokio::time::timeout_at(
                    (now + worth).into(),
                    renew(&shared, &liveness, session),
                )
                .await
                .unwrap_or_else(|_| Err("timed out".into()));
                (now, answer)
            });
            next = now + every;
        }
        // Never sleep past the deadline: its passing is reported when it happens.
        let wake = shared
            .with_lease(|l| l.deadline())
            .map_or(next, |d| next.min(d));
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => return None,
            Some(done) = inflight.join_next() => match done {
                Ok((sent, Ok(Renewed::Ok))) => {
                    shared.with_lease(|l| l.acked(session, sent));
                    let took = sent.elapsed();
                    if took > every {
                        tracing::info!(event = events::LEASE_SLOW_RENEWAL, node = %shared.me, session, ms = took.as_millis() as u64, "a renewal was acknowledged {} ms after it was sent (renewals go every {} ms)", took.as_millis(), every.as_millis());
                    }
                }
                Ok((_, Ok(Renewed::UnknownSession))) => {
                    return Some("the leader no longer knows the session");
                }
                Ok((sent, Err(error))) => {
                    tracing::info!(event = events::LEASE_RENEWAL_FAILED, node = %shared.me, session, %error, after_ms = sent.elapsed().as_millis() as u64, "a renewal failed: {error}");
                }
                Err(error) => {
                    tracing::debug!(event = events::CONTROL_ERROR, %error, "renewal task failed");
                }
            },
            Ok(()) = metrics.changed() => {
                let now_leader = metrics.borrow_and_update().current_leader;
                if now_leader != leader {
                    leader = now_leader;
                    if leader.is_some() {
                        next = Instant::now();
                    }
                }
            }
            _ = tokio::time::sleep_until(wake.into()) => {}
        }
        if shared.with_lease(|l| l.deadline().is_some_and(|d| Instant::now() >= d)) {
            return Some("the lease deadline passed without a renewal");
        }
    }
}

fn lost(shared: &Shared, session: u64, why: &str) {
    shared.with_lease(|l| l.ended());
    tracing::warn!(event = events::LEASE_LOST, node = %shared.me, session, reason = why, "lease lost: {why}");
}

/// Opens a session for this process, retrying until it is committed; `ended` is the
/// session this process held before, whose deadline has passed and whose plugins have
/// stopped. A refusal (another process holds the session, `cluster/sessions.rs`) is
/// logged once per reason, and asked again.
async fn open(shared: &Shared, every: Duration, ended: Option<u64>) -> u64 {
    let mut told = String::new();
    loop {
        let command = Command::OpenSessionOf {
            node: shared.me.clone(),
            at_ms: now_ms(),
            process: shared.process,
            ended,
        };
        match shared.propose(command).await {
            Ok(Response::Session(id)) => return id,
            Ok(Response::Refused(why)) => {
                if why != told {
                    tracing::warn!(event = events::SESSION_WAITING, node = %shared.me, reason = %why, "no session yet: {why}");
                    told = why;
                }
            }
            Ok(other) => {
                tracing::warn!(event = events::CONTROL_ERROR, answer = %other, "cannot open a session: {other}")
            }
            Err(error) => {
                tracing::debug!(event = events::CONTROL_ERROR, %error, "cannot open a session yet")
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// Sends one renewal to the leader (or answers it here, on the leader).
async fn renew(shared: &Arc<Shared>, liveness: &Liveness, session: u64) -> Result<Renewed, String> {
    let (leader, addr) = shared
        .control
        .leader()
        .ok_or_else(|| "no leader known".to_owned())?;
    if leader == shared.me {
        return answer(shared, liveness, &shared.me, session).await;
    }
    shared.call(&leader, &addr, RENEW, &Renew { session }).await
}

/// The leader's side of a renewal from `node`.
///
/// Everything is decided after the quorum rounds: whether the session is still the
/// node's (the round also makes the replica current: a stale leader cannot answer
/// `UnknownSession` from an old replica and drop a live node's lease), and, under the
/// lock expiry decisions take, whether the session was already decided expired (then it
/// is refused: an acknowledgement must never extend a lease the leader is ending).
pub async fn answer(
    shared: &Arc<Shared>,
    liveness: &Liveness,
    node: &str,
    session: u64,
) -> Result<Renewed, String> {
    // The term read on both sides of the leadership check and of the receive time: the
    // renewal is timed while this node leads `term` (`renewal_round.rs` relies on it).
    let term = shared.control.term();
    if !shared.control.is_leader() {
        return Err("not the leader".into());
    }
    let received = Instant::now();
    if shared.control.term() != term {
        return Err("not the leader".into());
    }
    // Recorded for the handoff (after the renewal arrived), then a quorum round that
    // starts after it: a quorum heard this leader after the renewal arrived. Beside it,
    // the renewal round tells a quorum when this renewal arrived (`renewal_round.rs`).
    let heard = async {
        shared
            .control
            .confirm_leadership(term)
            .await
            .map_err(|e| e.to_string())
    };
    let told = renewal_round::confirm(shared, term, session, received);
    let (heard, told) = tokio::join!(heard, told);
    heard?;
    told?;
    let current = shared.read(|c| {
        c.members
            .get(node)
            .and_then(|m| m.session.as_ref())
            .map(|s| s.id)
    });
    // A session a newer run of the node's store asked for is renewed no more: it
    // expires by the ordinary rule (`cluster/sessions.rs`).
    let superseded = shared.read(|c| c.superseded(node, session));
    if current != Some(session) || superseded || !liveness.renewed(term, node, session, received) {
        return Ok(Renewed::UnknownSession);
    }
    Ok(Renewed::Ok)
}

/// The node's own signed-call kinds (renewals, the lease handoff's question), served
/// beside Raft's.
pub struct Renewals {
    node: std::sync::OnceLock<(Arc<Shared>, Arc<Liveness>)>,
}

impl Renewals {
    pub fn new() -> Self {
        Self {
            node: std::sync::OnceLock::new(),
        }
    }

    /// Connects the service to the node once it exists; calls before that are refused.
    pub fn attach(&self, shared: Arc<Shared>, liveness: Arc<Liveness>) {
        let _ = self.node.set((shared, liveness));
    }
}

impl crate::rpc::Service for Renewals {
    fn call(
        &self,
        from: &crate::transport::PeerInfo,
        kind: u16,
        payload: Vec<u8>,
    ) -> crate::future::BoxFuture<Result<Vec<u8>, String>> {
        let node = self.node.get().cloned();
        let caller = from.identity.name.clone();
        Box::pin(async move {
            let (shared, liveness) = node.ok_or_else(|| "the node is starting".to_owned())?;
            match kind {
                RENEW => {
                    let renew: Renew =
                        crate::rpc::decode(&payload).map_err(|e| format!("bad renewal: {e}"))?;
                    // The caller is authenticated: a node renews only its own session.
                    let answer = answer(&shared, &liveness, &caller, renew.session).await?;
                    postcard::to_allocvec(&answer).map_err(|e| e.to_string())
                }
                handoff::LEADER_HEARD => {
                    let (ask, sessions): (handoff::Ask, Option<Vec<u64>>) =
                        crate::rpc::decode_with_tail(&payload)
                            .map_err(|e| format!("bad question: {e}"))?;
                    handoff::answer(&shared, ask.term, sessions).await
                }
                renewal_round::RENEWAL_ROUND => {
                    let carried: renewal_round::Carried = crate::rpc::decode(&payload)
                        .map_err(|e| format!("bad renewal round: {e}"))?;
                    renewal_round::take(&shared, &caller, carried).await?;
                    postcard::to_allocvec(&()).map_err(|e| e.to_string())
                }
                _ => Err(format!("unknown message kind {kind}")),
            }
        })
    }
}

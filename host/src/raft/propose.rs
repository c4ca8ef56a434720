//! Proposals: committing a command wherever it is proposed.
//!
//! Only the leader appends to the log. A proposal made on the leader goes straight to
//! openraft's `client_write`; one made on a follower is forwarded to the leader it knows
//! (kind PROPOSE), which commits it and answers the state machine's [`Response`].
//!
//! **Retries are safe only when the command certainly was not appended.** Leaders change
//! (the leader dies, a partition heals), and a proposal retries, within
//! `propose_timeout`, exactly when it knows the command is not in anyone's log:
//! no leader known yet, the target said it is not the leader (it checked before
//! appending, or openraft told it the entry was truncated), or the request was never
//! sent (the dial failed). A request that was sent and then lost its answer (connection
//! lost, timeout, or this node stopped believing in that leader while waiting: a dead
//! leader's connection can take seconds to time out) may have been committed: that is
//! [`ProposeError::Unknown`], and the caller decides (re-read the state, or resend a
//! command that is safe to repeat).
//!
//! **Single commands proposed at once are combined** into one batch, one log entry
//! (`forwards.rs`): a command may travel in a batch another proposer on this node sends,
//! and its answer, or the batch's error, comes back to it from there.
//!
//! Proposals larger than a quarter of the Raft message limit are refused up front, so
//! every entry fits a replication message on its own. The leader applies the same bound
//! to the PROPOSE payloads it is sent (`service.rs`), before decoding them: a follower's
//! check is its own business, and an entry near the message limit would stall
//! replication for everyone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::RaftError as OpenRaftError;
use tokio::sync::oneshot;

use super::Shared;
use super::error::ProposeError;
use super::kinds::{PROPOSE, ProposeReply};
use super::network::resolve;
use super::refusals::Refusal;
use super::types::{ClientWriteError, Peer};
use crate::cluster::{Command, Outcome, Proposal, Response};
use crate::rpc::RpcError;
use crate::transport::TransportError;

/// The first wait before retrying; it doubles up to [`MAX_RETRY_WAIT`].
const FIRST_RETRY_WAIT: Duration = Duration::from_millis(20);
const MAX_RETRY_WAIT: Duration = Duration::from_millis(500);

/// One attempt's result.
pub(super) enum Attempt {
    Done(Result<Outcome, ProposeError>),
    /// Certainly not appended; try again (after a leader change or a short wait).
    Retry(String),
}

impl Attempt {
    /// This attempt at `count` combined commands (sent alone when one), or `Unknown` for
    /// every command if the answer does not have their shape: one answer for one
    /// command, a batch of `count` answers for more.
    fn checked(self, count: usize) -> Attempt {
        let fits = match &self {
            Attempt::Done(Ok(Outcome::One(_))) => count == 1,
            Attempt::Done(Ok(Outcome::Batch(answers))) => count > 1 && answers.len() == count,
            Attempt::Done(Err(_)) | Attempt::Retry(_) => true,
        };
        if fits {
            return self;
        }
        Attempt::Done(Err(ProposeError::Unknown(format!(
            "{count} combined commands were answered with {}",
            match self {
                Attempt::Done(Ok(Outcome::Batch(answers))) => format!("{} answers", answers.len()),
                _ => "one answer".into(),
            }
        ))))
    }

    /// What the command at `position` gets of a [`Attempt::checked`] attempt.
    fn part(&self, position: usize) -> Attempt {
        match self {
            Attempt::Done(Ok(Outcome::Batch(answers))) => {
                Attempt::Done(Ok(Outcome::One(answers[position].clone())))
            }
            Attempt::Done(Ok(one)) => Attempt::Done(Ok(one.clone())),
            Attempt::Done(Err(e)) => Attempt::Done(Err(e.clone())),
            Attempt::Retry(why) => Attempt::Retry(why.clone()),
        }
    }
}

/// Takes a proposer's command back from the queue when its wait ends, if still there.
struct Withdraw<'a> {
    forwards: &'a super::forwards::Forwards<Attempt>,
    ticket: u64,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.forwards.withdraw(self.ticket);
    }
}

/// Why a proposal found no slot before its deadline.
fn busy() -> String {
    format!(
        "{} other proposals were in flight all along",
        super::forwards::FORWARDS
    )
}

impl Shared {
    /// See [`super::Control::propose`].
    pub(crate) async fn propose(
        self: &Arc<Self>,
        command: Proposal,
    ) -> Result<Outcome, ProposeError> {
        let size = self.check_size(&command)?;
        let started = Instant::now();
        let deadline = started + self.options.propose_timeout;
        let mut metrics = self.metrics.clone();
        let mut wait = FIRST_RETRY_WAIT;
        loop {
            let attempt = match &command {
                Proposal::One(single) => self.combined(single, size, deadline).await,
                _ => self.alone(&command, deadline).await,
            };
            let last = match attempt {
                Attempt::Done(result) => return result,
                Attempt::Retry(why) => why,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(ProposeError::NoLeader {
                    waited: now - started,
                    last,
                });
            }
            tracing::debug!(event = crate::events::CONTROL_ERROR, %last, "proposal not taken; retrying");
            // A leader change wakes us at once; otherwise retry after a growing wait.
            metrics.borrow_and_update();
            let until = (now + wait).min(deadline);
            tokio::select! {
                _ = metrics.changed() => {}
                _ = tokio::time::sleep_until(until.into()) => {}
            }
            wait = (wait * 2).min(MAX_RETRY_WAIT);
        }
    }

    /// See [`super::Control::propose_here`].
    pub(crate) async fn propose_here(&self, command: Proposal) -> Result<Outcome, ProposeError> {
        self.check_size(&command)?;
        let not_leader = || ProposeError::NotLeader {
            leader: self.leader().map(|(_, p)| p),
        };
        if !self.is_leader() {
            return Err(not_leader());
        }
        let deadline = Instant::now() + self.options.propose_timeout;
        match self.write_locally(&command, deadline).await {
            Attempt::Done(result) => result,
            Attempt::Retry(_) => Err(not_leader()),
        }
    }

    /// Refuses a proposal larger than one entry may be; its encoded size.
    fn check_size(&self, command: &Proposal) -> Result<usize, ProposeError> {
        let max = self.options.max_command();
        let len = postcard::experimental::serialized_size(command)
            .map_err(|e| ProposeError::Refused(format!("cannot encode the command: {e}")))?;
        if len > max {
            return Err(ProposeError::TooLarge { len, max });
        }
        Ok(len)
    }

    /// One attempt at a proposal that is not combined with others (a batch already): on
    /// this node if it leads, else forwarded to the leader once a slot is free.
    async fn alone(&self, command: &Proposal, deadline: Instant) -> Attempt {
        if self.leader().is_some_and(|(id, _)| id == self.me) {
            return self.write_locally(command, deadline).await;
        }
        match self.forwards.slot(deadline).await {
            Some(_slot) => self.attempt(command, deadline).await,
            None => Attempt::Retry(busy()),
        }
    }

    /// One attempt at `command`: on this node if it leads, else forwarded to the leader.
    /// The caller holds one of the `forwards` slots.
    async fn attempt(&self, command: &Proposal, deadline: Instant) -> Attempt {
        match self.leader() {
            Some((id, _)) if id == self.me => self.write_locally(command, deadline).await,
            Some((_, leader)) => self.forward(&leader, command, deadline).await,
            None => Attempt::Retry("no leader is known".into()),
        }
    }

    /// One attempt at a single command, combined with whatever else is queued
    /// (`forwards.rs`): queued, then either taken into another proposer's batch or sent
    /// in a batch of our own once a slot is free. Answered by `deadline` in either case.
    async fn combined(
        self: &Arc<Self>,
        command: &Command,
        size: usize,
        deadline: Instant,
    ) -> Attempt {
        let (ticket, mut answered) = self.forwards.queue(command.clone(), size, deadline);
        // Whatever ends this wait (an answer, the deadline, the caller giving up), a
        // command still queued is taken back and never sent.
        let _withdraw = Withdraw {
            forwards: &self.forwards,
            ticket,
        };
        let unanswered = |_| {
            Attempt::Done(Err(ProposeError::Unknown(
                "the batch that carried the command ended without an answer".into(),
            )))
        };
        let taken_in = async |answered: oneshot::Receiver<Attempt>| match tokio::time::timeout_at(
            deadline.into(),
            answered,
        )
        .await
        {
            Ok(answer) => answer.unwrap_or_else(unanswered),
            Err(_) => Attempt::Done(Err(ProposeError::Unknown(
                "the batch that carried the command was not answered within the bound".into(),
            ))),
        };
        loop {
            let slot = tokio::select! {
                biased;
                answer = &mut answered => return answer.unwrap_or_else(unanswered),
                slot = self.forwards.slot(deadline) => slot,
            };
            let Some(slot) = slot else {
                if self.forwards.withdraw(ticket) {
                    return Attempt::Retry(busy());
                }
                return taken_in(answered).await;
            };
            // A batch's own framing (its tag and length) is left room for.
            let mut taken = self
                .forwards
                .take(self.options.max_command().saturating_sub(16));
            let Some(batch_deadline) = taken.deadline else {
                // Another proposer took ours; nothing is left to send.
                drop(slot);
                return taken_in(answered).await;
            };
            // The batch is sent from a task of its own, holding the slot: the proposers
            // in it must not lose their answers because this one's caller gave up.
            let shared = self.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let commands = std::mem::take(&mut taken.commands);
                let count = commands.len();
                let proposal = match <[Command; 1]>::try_from(commands) {
                    Ok([one]) => Proposal::One(one),
                    Err(commands) => Proposal::Batch(commands),
                };
                let attempt = shared.attempt(&proposal, batch_deadline).await;
                let attempt = attempt.checked(count);
                taken.answer(|i| attempt.part(i));
            });
        }
    }

    /// Commits on this node, the leader.
    async fn write_locally(&self, command: &Proposal, deadline: Instant) -> Attempt {
        let write = self.raft.client_write(command.clone());
        match tokio::time::timeout_at(deadline.into(), write).await {
            Ok(Ok(written)) => Attempt::Done(Ok(written.data)),
            Ok(Err(OpenRaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
                Attempt::Retry("this node is no longer the leader".into())
            }
            Ok(Err(OpenRaftError::APIError(e))) => {
                Attempt::Done(Err(ProposeError::Refused(e.to_string())))
            }
            Ok(Err(OpenRaftError::Fatal(f))) => {
                Attempt::Done(Err(ProposeError::Stopped(f.to_string())))
            }
            Err(_) => Attempt::Done(Err(ProposeError::Unknown(
                "appended but not committed within the bound".into(),
            ))),
        }
    }

    /// Sends the command to `leader`.
    async fn forward(&self, leader: &Peer, command: &Proposal, deadline: Instant) -> Attempt {
        let Some(attached) = self.endpoint.get() else {
            return Attempt::Done(Err(ProposeError::Stopped(
                "the RPC endpoint is not attached".into(),
            )));
        };
        let addr = match resolve(&leader.addr).await {
            Ok(addr) => addr,
            Err(e) => return Attempt::Retry(e),
        };
        let body = match postcard::to_allocvec(command) {
            Ok(body) => body,
            Err(e) => {
                return Attempt::Done(Err(ProposeError::Refused(format!(
                    "cannot encode the command: {e}"
                ))));
            }
        };
        let call = attached.rpc.call(&leader.name, addr, PROPOSE, body);
        // A leader that died mid-call never answers, and its connection may take seconds
        // to time out; once this node stops believing in it (an election began or
        // another leader won), waiting on is pointless.
        let mut metrics = self.metrics.clone();
        let deposed = async {
            while metrics.changed().await.is_ok() {
                if self.leader().is_none_or(|(_, now)| now.name != leader.name) {
                    return;
                }
            }
            std::future::pending::<()>().await
        };
        let answer = tokio::select! {
            answer = tokio::time::timeout_at(deadline.into(), call) => match answer {
                Ok(answer) => answer,
                Err(_) => {
                    return Attempt::Done(Err(ProposeError::Unknown(format!(
                        "no answer from the leader {leader} within the bound"
                    ))));
                }
            },
            () = deposed => {
                return Attempt::Done(Err(ProposeError::Unknown(format!(
                    "the leader {leader} was replaced while its answer was awaited"
                ))));
            }
        };
        match answer {
            Ok(bytes) => match crate::rpc::decode::<ProposeReply>(&bytes) {
                Ok(ProposeReply::Applied { response, index }) => {
                    Attempt::Done(self.applied_here(index, deadline).await.map(|()| response))
                }
                Ok(ProposeReply::NotLeader { .. }) => {
                    Attempt::Retry(format!("{} is not the leader", leader.name))
                }
                Ok(ProposeReply::Refused(m)) => Attempt::Done(Err(ProposeError::Refused(m))),
                Ok(ProposeReply::Failed(m)) => Attempt::Done(Err(ProposeError::Unknown(m))),
                Err(e) => Attempt::Done(Err(ProposeError::Unknown(format!(
                    "unreadable answer from {leader}: {e}"
                )))),
            },
            Err(e) => failed_call(e),
        }
    }

    /// Waits until this node's replica has applied `index`: a forwarded proposal returns
    /// only then, so a node reads its own writes (a `state.load` after an acknowledged
    /// `state.save` on the same node never returns older state).
    async fn applied_here(&self, index: u64, deadline: Instant) -> Result<(), ProposeError> {
        let mut applied = self.applied.clone();
        let caught_up = applied.wait_for(|at| *at >= index);
        match tokio::time::timeout_at(deadline.into(), caught_up).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(ProposeError::Stopped("the state machine stopped".into())),
            Err(_) => Err(ProposeError::Unknown(format!(
                "committed at index {index}, but not applied here within the bound"
            ))),
        }
    }

    /// Answers a PROPOSE from node `from`.
    pub(crate) async fn serve_propose(
        self: &Arc<Self>,
        from: &str,
        command: Proposal,
    ) -> ProposeReply {
        if !self.is_member(from) {
            return ProposeReply::Refused(format!("{from} is not a member of the Raft group"));
        }
        let Some(marked) = command.from_member(from) else {
            let error = format!("{from} sent a proposal that names its proposer");
            self.refusals.record(Refusal::Forbidden, from, &error);
            return ProposeReply::Refused(error);
        };
        if !self.is_leader() {
            return ProposeReply::NotLeader {
                leader: self.leader().map(|(_, p)| p),
            };
        }
        let write = self.raft.client_write(marked);
        match tokio::time::timeout(self.options.propose_timeout, write).await {
            Ok(Ok(written)) => {
                for forbidden in written.data.responses().filter_map(Response::forbidden) {
                    self.refusals.record(Refusal::Forbidden, from, forbidden);
                }
                ProposeReply::Applied {
                    response: written.data,
                    index: written.log_id.index,
                }
            }
            Ok(Err(OpenRaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                ProposeReply::NotLeader {
                    leader: f.leader_node,
                }
            }
            Ok(Err(OpenRaftError::APIError(e))) => ProposeReply::Refused(e.to_string()),
            Ok(Err(OpenRaftError::Fatal(f))) => ProposeReply::Failed(f.to_string()),
            Err(_) => ProposeReply::Failed("appended but not committed within the bound".into()),
        }
    }
}

/// What a PROPOSE call that got no reply means.
fn failed_call(e: RpcError) -> Attempt {
    match e {
        RpcError::Transport(TransportError::Closed) => Attempt::Done(Err(ProposeError::Stopped(
            "the RPC endpoint is closed".into(),
        ))),
        e if not_sent(&e) => Attempt::Retry(e.to_string()),
        // Anything else may have been committed. That includes an error answer: it is
        // not signed, and a leader whose answer failed after its commit sends one too, so
        // it cannot prove the command was not applied (issue 13).
        e => Attempt::Done(Err(ProposeError::Unknown(e.to_string()))),
    }
}

/// Whether a failed call certainly did not reach the peer's service.
fn not_sent(e: &RpcError) -> bool {
    match e {
        RpcError::Transport(t) => matches!(
            t,
            TransportError::DialTimeout { .. }
                | TransportError::Connect { .. }
                | TransportError::PeerRejected { .. }
                | TransportError::RejectedByPeer { .. }
                | TransportError::WrongPeer { .. }
                | TransportError::InvalidPeer { .. }
                | TransportError::TooLarge { .. }
        ),
        RpcError::NotANode { .. } => true,
        // Sent, or failed after sending: the answer was lost or refused.
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_answer_may_hide_a_commit() {
        let answer = RpcError::Remote {
            peer: "n1".into(),
            message: "cannot encode the answer".into(),
        };
        match failed_call(answer) {
            Attempt::Done(Err(e)) => assert!(e.may_have_applied(), "{e}"),
            Attempt::Done(Ok(_)) | Attempt::Retry(_) => panic!("an error answer is not a refusal"),
        }
        // A call refused before it was sent is retried.
        let unsent = RpcError::Transport(TransportError::DialTimeout {
            peer: "n1".into(),
            addr: "127.0.0.1:9".parse().unwrap(),
            timeout: Duration::from_secs(1),
        });
        assert!(matches!(failed_call(unsent), Attempt::Retry(_)));
    }
}

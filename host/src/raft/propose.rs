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
//! **"Not appended" is not always certain.** openraft 0.9 answers `ForwardToLeader` to a
//! write whose entry its leader truncated after losing leadership, and a node that holds
//! a copy of that entry may still commit it. So from cluster version
//! [`crate::version::STAMPS`] on, every command gets a number of this run's
//! (`stamps.rs`) before its first attempt and keeps it through its retries
//! ([`Proposal::Stamped`]); the state machine applies a number once and answers its
//! copies with the first answer (`cluster/once.rs`). The leader refuses a stamped
//! proposal while the cluster's version is below it: a member of the older build could
//! not read it.
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
use super::forwards::Numbered;
use super::kinds::{PROPOSE, ProposeReply};
use super::network::resolve;
use super::refusals::Refusal;
use super::types::{ClientWriteError, Peer};
use crate::cluster::{Command, Outcome, Process, Proposal, Response};
use crate::rpc::RpcError;
use crate::transport::TransportError;

/// The first wait before retrying; it doubles up to [`MAX_RETRY_WAIT`].
const FIRST_RETRY_WAIT: Duration = Duration::from_millis(20);
const MAX_RETRY_WAIT: Duration = Duration::from_millis(500);

/// Room left in an entry for a batch's framing: its tag and length, and a stamp's member
/// name (at most 63 bytes, `pki::validate_name`), run and low, with room to spare.
const BATCH_FRAMING: usize = 320;

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
        // Numbered once, before the first attempt: every retry carries the same numbers,
        // so the state machine applies the command once however many copies reach the
        // log (`stamps.rs`, `cluster/once.rs`). Settled when this call returns.
        let started = Instant::now();
        let deadline = started + self.options.propose_timeout;
        let run = self.stamping();
        let numbers = match run {
            Some(_) => Some(
                self.stamps
                    .take(command_count(&command), deadline)
                    .await
                    .ok_or_else(|| {
                        ProposeError::Refused(format!(
                            "this node has had commands in flight for {:?} with {} numbered after them, the most the cluster keeps answers for; nothing was proposed",
                            self.options.propose_timeout,
                            crate::cluster::MAX_ANSWERS
                        ))
                    })?,
            ),
            None => None,
        };
        let stamps = |low| match (&numbers, run) {
            (Some(numbers), Some(run)) => self.stamped(&command, run, low, &numbers.seqs),
            _ => None,
        };
        // The bound, on the proposal as it will be sent (a stamp's numbers at their
        // longest).
        let size = self.check_size(&stamps(u64::MAX).unwrap_or_else(|| command.clone()))?;
        let mut metrics = self.metrics.clone();
        let mut wait = FIRST_RETRY_WAIT;
        // An attempt whose outcome is unknown (the leader's answer was lost: it stopped,
        // or was deposed, after it may have appended the command) ends a plain proposal:
        // a second copy could apply twice. A numbered one is asked again until the
        // deadline: a copy of a number already applied is answered with its first answer
        // (`cluster/once.rs`), and the number stays in flight while this call waits, so
        // its answer is kept. What was unknown is said if the deadline comes first.
        let numbered = run.is_some() && numbers.is_some();
        let mut unknown: Option<String> = None;
        loop {
            let attempt = match &command {
                Proposal::One(single) => {
                    let numbered = Numbered {
                        stamp: run.zip(numbers.as_ref().map(|n| n.seqs[0])),
                        command: single.clone(),
                    };
                    self.combined(numbered, size, deadline).await
                }
                _ => {
                    let stamped = stamps(self.stamps.low());
                    self.alone(stamped.as_ref().unwrap_or(&command), deadline)
                        .await
                }
            };
            let last = match attempt {
                Attempt::Done(Err(ProposeError::Unknown(why))) if numbered => {
                    unknown = Some(why.clone());
                    why
                }
                // An earlier copy may still commit: whatever this attempt says, the
                // outcome is not known.
                Attempt::Done(Err(e)) if unknown.is_some() => {
                    let why = unknown.unwrap_or_default();
                    return Err(ProposeError::Unknown(format!("{why}; asked again: {e}")));
                }
                Attempt::Done(result) => return result.map(|o| batch_shaped(o, &command)),
                Attempt::Retry(why) => why,
            };
            let now = Instant::now();
            if now >= deadline {
                if let Some(why) = unknown {
                    return Err(ProposeError::Unknown(format!(
                        "{why}; asked again until the bound ({last})"
                    )));
                }
                return Err(ProposeError::NoLeader {
                    waited: now - started,
                    last,
                });
            }
            tracing::debug!(event = crate::events::CONTROL_ERROR, %last, "proposal not taken; retrying");
            // A leader change wakes us at once; otherwise retry after a growing wait. After
            // an unknown outcome only the wait does: the leader may be alive and appending
            // (every append changes the metrics), and each attempt adds a copy to the log.
            metrics.borrow_and_update();
            let until = (now + wait).min(deadline);
            let woken = async {
                if unknown.is_some() {
                    std::future::pending::<()>().await;
                }
                let _ = metrics.changed().await;
            };
            tokio::select! {
                () = woken => {}
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
        if let Some(why) = self.beyond_version(&command) {
            return Err(ProposeError::Refused(why));
        }
        let deadline = Instant::now() + self.options.propose_timeout;
        match self.write_locally(&command, deadline).await {
            Attempt::Done(result) => result,
            Attempt::Retry(_) => Err(not_leader()),
        }
    }

    /// Why `command` may not be appended yet, if so: it needs a cluster version above the
    /// one this node has applied (members of an older build could not read it).
    fn beyond_version(&self, command: &Proposal) -> Option<String> {
        let version = self
            .cluster_version
            .load(std::sync::atomic::Ordering::Acquire);
        let needs = command.needs_version();
        (version < needs).then(|| {
            format!(
                "this proposal needs cluster version {needs}; {} has applied {version} so far",
                self.name
            )
        })
    }

    /// This run, if this node stamps its proposals now: the cluster's version allows
    /// stamps ([`crate::version::STAMPS`]; a build before it cannot read them) and the
    /// RPC endpoint, which knows the run's incarnation, is attached.
    fn stamping(&self) -> Option<Process> {
        let version = self
            .cluster_version
            .load(std::sync::atomic::Ordering::Acquire);
        if version < crate::version::STAMPS {
            return None;
        }
        let attached = self.endpoint.get()?;
        Some(Process {
            store: self.store,
            incarnation: attached.rpc.incarnation(),
        })
    }

    /// `command`'s commands numbered `seqs` by this node's run `run`, whose lowest number
    /// in flight is `low`; `None` for a proposal of another shape (only `One` and `Batch`
    /// are proposed through [`Shared::propose`]).
    fn stamped(
        &self,
        command: &Proposal,
        run: Process,
        low: u64,
        seqs: &[u64],
    ) -> Option<Proposal> {
        let commands: Vec<Command> = match command {
            Proposal::One(one) => vec![one.clone()],
            Proposal::Batch(commands) => commands.clone(),
            _ => return None,
        };
        Some(Proposal::Stamped {
            member: self.name.clone(),
            run,
            low,
            commands: seqs.iter().copied().zip(commands).collect(),
        })
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
        command: Numbered,
        size: usize,
        deadline: Instant,
    ) -> Attempt {
        let (ticket, mut answered) = self.forwards.queue(command, size, deadline);
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
            // A batch's own framing (its tag and length, and a stamp's member, run and
            // low) is left room for.
            let mut taken = self
                .forwards
                .take(self.options.max_command().saturating_sub(BATCH_FRAMING));
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
                let proposal = shared.batch(commands);
                let attempt = shared.attempt(&proposal, batch_deadline).await;
                let attempt = attempt.checked(count);
                taken.answer(|i| attempt.part(i));
            });
        }
    }

    /// The proposal of combined commands: all stamped by this run, or none
    /// (`forwards.rs` takes them so).
    fn batch(&self, commands: Vec<Numbered>) -> Proposal {
        if let Some((run, _)) = commands.first().and_then(|c| c.stamp) {
            return Proposal::Stamped {
                member: self.name.clone(),
                run,
                low: self.stamps.low(),
                commands: commands
                    .into_iter()
                    .filter_map(|c| Some((c.stamp?.1, c.command)))
                    .collect(),
            };
        }
        let commands: Vec<Command> = commands.into_iter().map(|c| c.command).collect();
        match <[Command; 1]>::try_from(commands) {
            Ok([one]) => Proposal::One(one),
            Err(commands) => Proposal::Batch(commands),
        }
    }

    /// Commits on this node, the leader. Nothing the cluster's version does not reach is
    /// appended, whoever proposed it (a member's PROPOSE is checked in `serve_propose`
    /// too): members of an older build could not read it.
    async fn write_locally(&self, command: &Proposal, deadline: Instant) -> Attempt {
        if let Some(why) = self.beyond_version(command) {
            return Attempt::Retry(why);
        }
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
    pub(super) async fn forward(
        &self,
        leader: &Peer,
        command: &Proposal,
        deadline: Instant,
    ) -> Attempt {
        let Some(attached) = self.endpoint.get() else {
            return Attempt::Done(Err(ProposeError::Stopped(
                "the RPC endpoint is not attached".into(),
            )));
        };
        #[cfg(test)]
        if super::network::dropped(&attached.me.addr, &leader.addr, PROPOSE) {
            return Attempt::Retry("dropped by the test".into());
        }
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
                Ok(ProposeReply::NotYet(m)) => Attempt::Retry(m),
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
        // Whose proposal it is, before anything else: a member that stamps as another is
        // refused and counted.
        let stamped_as = match &command {
            Proposal::Stamped { member, .. } if member != from => Some(member.clone()),
            _ => None,
        };
        let Some(marked) = command.from_member(from) else {
            let error = match stamped_as {
                Some(member) => format!("{from} sent a proposal stamped as {member}'s"),
                None => format!("{from} sent a proposal that names its proposer"),
            };
            self.refusals.record(Refusal::Forbidden, from, &error);
            return ProposeReply::Refused(error);
        };
        if !self.is_leader() {
            return ProposeReply::NotLeader {
                leader: self.leader().map(|(_, p)| p),
            };
        }
        // A stamped proposal (or a slot's state save) before the cluster's version allows
        // it would reach members whose build cannot read it: not appended. An honest
        // member sends one once its own replica applied the raise, which may be before
        // this leader did (a new leader still applying what it committed): it retries.
        if let Some(why) = self.beyond_version(&marked) {
            return ProposeReply::NotYet(why);
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

/// `outcome` in the shape `command` expects: a batch is answered with a batch, even of
/// one command (a stamped proposal of one command is answered as one: `Outcome::of`).
fn batch_shaped(outcome: Outcome, command: &Proposal) -> Outcome {
    match (outcome, command) {
        (Outcome::One(answer), Proposal::Batch(_)) => Outcome::Batch(vec![answer]),
        (outcome, _) => outcome,
    }
}

/// How many commands a proposal holds.
fn command_count(command: &Proposal) -> usize {
    match command {
        Proposal::One(_) | Proposal::OneFrom { .. } => 1,
        Proposal::Batch(commands) | Proposal::BatchFrom { commands, .. } => commands.len(),
        Proposal::Stamped { commands, .. } | Proposal::StampedFrom { commands, .. } => {
            commands.len()
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

//! Proposals combined into batches, and a cap on how many a node has in flight.
//!
//! **The cap.** A follower that gives up thousands of slots at once (a rebalance moved
//! them away, or its plugins all stopped) proposes a release for each. All at once they
//! take every stream the connection to the leader allows, and the calls that keep the
//! node alive wait behind them for stream credit: its lease renewals go to the leader on
//! the same connection. In the 10,000-resource bench a node that released about 4,000
//! slots in a few seconds had its releases time out after 5 s and lost its lease. So at
//! most [`FORWARDS`] proposals are in flight at a time; the others wait here, before
//! anything is sent, so a wait that runs out is a proposal certainly not appended
//! (retried, then refused with the wait as the reason), never one that may have been.
//! [`FORWARDS`] is a quarter of the streams a connection allows
//! (`transport::TransportConfig`'s default), which leaves the rest to renewals and to
//! answering the leader's own calls. On the leader the same slots pace its own combined
//! batches (that is what lets commands queue up to be combined); a batch the leader
//! proposes itself (placement's grants, expiries) takes no slot.
//!
//! **Combining.** The cap bounds a burst but does not speed it up, and every log entry
//! costs every node a disk write and an apply, and wakes its owner and (on the leader)
//! placement. One entry per release kept the leader of the 10,000-resource bench so busy
//! that releases waited seconds and slots stayed vacant. So a single command is not sent
//! on its own: it joins a queue, and whichever proposer gets a slot takes everything
//! queued (up to [`BATCH`] commands and the size bound of one entry) and proposes it as
//! one batch, on the leader or forwarded to it; each proposer gets its own command's
//! answer. A batch applies its commands one after the other, each answered as if
//! proposed alone (`Cluster::apply_proposal`), so combining changes nothing but the entry
//! count. When nothing else is queued a command goes at once, alone: combining adds no
//! wait. A proposer whose command is still queued when its deadline passes takes it
//! back, so it was certainly not sent; one taken into another proposer's batch waits for
//! that batch's answer, which the taker's own deadline bounds.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::cluster::Command;

/// How many proposals (single or combined) one node has in flight at once.
pub(super) const FORWARDS: usize = 16;

/// Most commands combined into one batch (the leader's grant batches are as large).
pub(super) const BATCH: usize = 500;

/// The slots, and the commands waiting to be combined. `R` is what a proposer is
/// answered with.
pub(super) struct Forwards<R> {
    permits: Arc<Semaphore>,
    queue: Mutex<Queue<R>>,
    /// The most proposals seen in flight at once (the tests check the cap).
    #[cfg(test)]
    most: std::sync::atomic::AtomicUsize,
}

struct Queue<R> {
    next: u64,
    waiting: VecDeque<Waiting<R>>,
}

/// A queued command and where its answer goes.
struct Waiting<R> {
    ticket: u64,
    command: Command,
    /// Its encoded size.
    size: usize,
    answer: oneshot::Sender<R>,
}

/// Commands taken from the queue to be proposed together, and where each answer goes.
pub(super) struct Taken<R> {
    pub commands: Vec<Command>,
    answers: Vec<oneshot::Sender<R>>,
}

impl<R> Taken<R> {
    /// Answers each command, in order, with `answer(position)`.
    pub fn answer(self, answer: impl Fn(usize) -> R) {
        for (i, to) in self.answers.into_iter().enumerate() {
            // A proposer that stopped waiting (its own caller gave up) needs no answer.
            let _ = to.send(answer(i));
        }
    }
}

impl<R> Default for Forwards<R> {
    fn default() -> Self {
        Self {
            permits: Arc::new(Semaphore::new(FORWARDS)),
            queue: Mutex::new(Queue {
                next: 0,
                waiting: VecDeque::new(),
            }),
            #[cfg(test)]
            most: Default::default(),
        }
    }
}

impl<R> Forwards<R> {
    /// Waits for a slot until `deadline`; `None` if none came free by then.
    pub(super) async fn slot(&self, deadline: Instant) -> Option<OwnedSemaphorePermit> {
        let acquire = self.permits.clone().acquire_owned();
        let permit = tokio::time::timeout_at(deadline.into(), acquire)
            .await
            .ok()?
            .expect("the semaphore is never closed");
        #[cfg(test)]
        self.most.fetch_max(
            FORWARDS - self.permits.available_permits(),
            std::sync::atomic::Ordering::Relaxed,
        );
        Some(permit)
    }

    /// Queues `command` (`size` bytes encoded); its ticket, and where its answer comes.
    pub(super) fn queue(&self, command: Command, size: usize) -> (u64, oneshot::Receiver<R>) {
        let (answer, answered) = oneshot::channel();
        let mut queue = self.lock();
        let ticket = queue.next;
        queue.next += 1;
        queue.waiting.push_back(Waiting {
            ticket,
            command,
            size,
            answer,
        });
        (ticket, answered)
    }

    /// Takes the command of `ticket` back if it is still queued (then it was certainly
    /// not sent); false if a proposer has taken it.
    pub(super) fn withdraw(&self, ticket: u64) -> bool {
        let mut queue = self.lock();
        let before = queue.waiting.len();
        queue.waiting.retain(|w| w.ticket != ticket);
        queue.waiting.len() < before
    }

    /// Takes the oldest queued commands, at most [`BATCH`] and `max_bytes` together (the
    /// first whatever its size: each passed the bound of one entry on its own). Commands
    /// whose proposer stopped waiting are dropped, never sent.
    pub(super) fn take(&self, max_bytes: usize) -> Taken<R> {
        let mut queue = self.lock();
        let mut taken = Taken {
            commands: Vec::new(),
            answers: Vec::new(),
        };
        let mut bytes = 0;
        while let Some(next) = queue.waiting.front() {
            let full = taken.commands.len() >= BATCH
                || (!taken.commands.is_empty() && bytes + next.size > max_bytes);
            if full {
                break;
            }
            let waiting = queue.waiting.pop_front().expect("the front exists");
            if waiting.answer.is_closed() {
                continue;
            }
            bytes += waiting.size;
            taken.commands.push(waiting.command);
            taken.answers.push(waiting.answer);
        }
        taken
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue<R>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most proposals in flight at once so far.
    #[cfg(test)]
    pub(super) fn most(&self) -> usize {
        self.most.load(std::sync::atomic::Ordering::Relaxed)
    }
}

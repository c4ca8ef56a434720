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
//! (retried, then `ProposeError::NoLeader` with the wait as the reason), never one that
//! may have been.
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
//! proposed alone (`Cluster::apply_proposal`), so combining changes nothing about what a
//! command does. What it changes is that the batch's fate is every command's: a leader
//! change, a lost answer or a timeout makes all of them `ProposeError::Unknown` (they
//! may be applied) or all of them retried (certainly not appended), and each proposer
//! does what it would have done alone. When nothing else is queued a command goes at
//! once, alone: combining adds no wait.
//!
//! Deadlines: a batch is given the latest deadline of the commands in it, so a command
//! taken in by a proposer that had waited long is not cut short by that proposer's
//! deadline. A proposer waits for its answer only until its own deadline, then reports
//! `Unknown` (its command is in a batch in flight, and may be applied), as a proposal
//! sent alone does when its answer is late. A proposer whose command is still queued at
//! its deadline, or whose caller gives up, takes it back: it was certainly not sent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::cluster::{Command, Process};

/// A command to propose, with its stamp (the proposing run, and the command's number in
/// it: `stamps.rs`) once the cluster's version allows stamps.
#[derive(Clone, Debug)]
pub(super) struct Numbered {
    pub stamp: Option<(Process, u64)>,
    pub command: Command,
}

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
    command: Numbered,
    /// Its proposer's deadline.
    deadline: Instant,
    /// Its encoded size.
    size: usize,
    answer: oneshot::Sender<R>,
}

/// Commands taken from the queue to be proposed together, and where each answer goes.
pub(super) struct Taken<R> {
    pub commands: Vec<Numbered>,
    /// The latest deadline of the commands taken.
    pub deadline: Option<Instant>,
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

    /// Queues `command` (`size` bytes encoded, to be answered by `deadline`); its ticket,
    /// and where its answer comes.
    pub(super) fn queue(
        &self,
        command: Numbered,
        size: usize,
        deadline: Instant,
    ) -> (u64, oneshot::Receiver<R>) {
        let (answer, answered) = oneshot::channel();
        let mut queue = self.lock();
        let ticket = queue.next;
        queue.next += 1;
        queue.waiting.push_back(Waiting {
            ticket,
            command,
            deadline,
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
    /// first whatever its size: each passed the bound of one entry on its own), all
    /// stamped or all not, as the first (a stamped proposal is one run's; around a raise
    /// of the cluster's version both kinds may be queued). Commands whose proposer
    /// stopped waiting are dropped, never sent.
    pub(super) fn take(&self, max_bytes: usize) -> Taken<R> {
        let mut queue = self.lock();
        let mut taken = Taken {
            commands: Vec::new(),
            deadline: None,
            answers: Vec::new(),
        };
        let mut bytes = 0;
        let mut stamped = None;
        while let Some(next) = queue.waiting.front() {
            if next.answer.is_closed() {
                queue.waiting.pop_front();
                continue;
            }
            let full = taken.commands.len() >= BATCH
                || (!taken.commands.is_empty() && bytes + next.size > max_bytes);
            let other_kind = *stamped.get_or_insert(next.command.stamp.is_some())
                != next.command.stamp.is_some();
            if full || other_kind {
                break;
            }
            let waiting = queue.waiting.pop_front().expect("the front exists");
            bytes += waiting.size;
            taken.deadline = taken.deadline.max(Some(waiting.deadline));
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn join(node: &str) -> Numbered {
        Numbered {
            stamp: None,
            command: Command::Join {
                node: node.into(),
                addr: "a:1".into(),
                labels: Default::default(),
            },
        }
    }

    fn stamped(node: &str, seq: u64) -> Numbered {
        let run = Process {
            store: crate::cluster::StoreId::from_bytes([1; 16]),
            incarnation: 1,
        };
        Numbered {
            stamp: Some((run, seq)),
            ..join(node)
        }
    }

    fn names(taken: &Taken<u32>) -> Vec<String> {
        taken
            .commands
            .iter()
            .map(|c| match &c.command {
                Command::Join { node, .. } => node.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn commands_are_taken_oldest_first_within_the_bounds_and_answered_in_place() {
        let forwards = Forwards::<u32>::default();
        let now = Instant::now();
        let (_, a) = forwards.queue(join("a"), 100, now + Duration::from_secs(1));
        let (_, b) = forwards.queue(join("b"), 100, now + Duration::from_secs(3));
        let (_, c) = forwards.queue(join("c"), 100, now + Duration::from_secs(2));
        // The byte bound: the first always, then while the total fits.
        let taken = forwards.take(250);
        assert_eq!(names(&taken), ["a", "b"]);
        assert_eq!(
            taken.deadline,
            Some(now + Duration::from_secs(3)),
            "the latest"
        );
        taken.answer(|i| i as u32 + 10);
        assert_eq!((a.blocking_recv(), b.blocking_recv()), (Ok(10), Ok(11)));
        let taken = forwards.take(1);
        assert_eq!(
            names(&taken),
            ["c"],
            "one over the bound alone is still taken"
        );
        taken.answer(|_| 7);
        assert_eq!(c.blocking_recv(), Ok(7));
        assert!(forwards.take(1000).commands.is_empty());
        // The count bound.
        let receivers: Vec<_> = (0..BATCH + 1)
            .map(|i| forwards.queue(join(&format!("n{i}")), 1, now).1)
            .collect();
        assert_eq!(forwards.take(usize::MAX).commands.len(), BATCH);
        assert_eq!(forwards.take(usize::MAX).commands.len(), 1);
        drop(receivers);
    }

    #[test]
    fn a_batch_is_all_stamped_or_all_not() {
        let forwards = Forwards::<u32>::default();
        let now = Instant::now();
        let _a = forwards.queue(join("a"), 1, now);
        let _b = forwards.queue(stamped("b", 1), 1, now);
        let _c = forwards.queue(stamped("c", 2), 1, now);
        let _d = forwards.queue(join("d"), 1, now);
        assert_eq!(names(&forwards.take(usize::MAX)), ["a"]);
        assert_eq!(names(&forwards.take(usize::MAX)), ["b", "c"]);
        assert_eq!(names(&forwards.take(usize::MAX)), ["d"]);
    }

    #[test]
    fn a_withdrawn_command_or_one_whose_proposer_left_is_never_taken() {
        let forwards = Forwards::<u32>::default();
        let now = Instant::now();
        let (a, _a) = forwards.queue(join("a"), 1, now);
        let (_, b) = forwards.queue(join("b"), 1, now);
        let (_, _c) = forwards.queue(join("c"), 1, now);
        assert!(forwards.withdraw(a));
        assert!(!forwards.withdraw(a), "only once");
        drop(b);
        let taken = forwards.take(usize::MAX);
        assert_eq!(names(&taken), ["c"]);
        // Taken: it can no longer be withdrawn.
        let (d, _d) = forwards.queue(join("d"), 1, now);
        let _ = forwards.take(usize::MAX);
        assert!(!forwards.withdraw(d));
    }
}

//! Leadership rounds shared by everyone waiting for one.
//!
//! [`super::Control::ensure_leadership`] promises a heartbeat round to a quorum that
//! starts after the call. Every session renewal asks for one (the leader may only
//! acknowledge a renewal once a quorum has heard it as leader since the renewal arrived),
//! so a leader answering N nodes ran N quorum rounds at a time, with no bound (issue 13).
//!
//! Rounds now run one at a time, and a caller takes the result of the last round if that
//! round started after the caller called: every caller that arrived while a round was
//! waiting to start shares it. A caller that arrived while a round was in flight waits
//! for the next one, which starts as soon as the current one ends. So at most one round
//! is in flight, a burst of renewals costs two rounds, and the promise holds for each
//! caller.
//!
//! **Carrying.** A round can also carry what its callers hand it ([`Rounds::carry`]): the
//! node's renewal round carries the receive time of every renewal it acknowledges to the
//! voters (`node/witness.rs`, issue 30). A caller's item is added, and its call time
//! taken, under the same lock under which a round takes its start time and the items
//! waiting: so a round that started after a caller called always carries the caller's
//! item, and a caller never takes the result of a round that did not carry it.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::error::ControlError;

/// The last round and the lock that keeps rounds one at a time; `T` is what a round
/// carries, `R` its result.
pub(crate) struct Rounds<T = (), R = Result<(), ControlError>> {
    /// When the last round started, and its result.
    last: tokio::sync::Mutex<Option<(Instant, R)>>,
    /// Items handed in and not yet taken by a round.
    waiting: Mutex<Vec<T>>,
    /// Rounds run since the start.
    run: AtomicU64,
}

impl<T, R> Default for Rounds<T, R> {
    fn default() -> Self {
        Rounds {
            last: tokio::sync::Mutex::new(None),
            waiting: Mutex::new(Vec::new()),
            run: AtomicU64::new(0),
        }
    }
}

impl<T, R: Clone> Rounds<T, R> {
    /// The result of a round that started after `called`: the last one if it did, else
    /// a new one run with `round`.
    pub async fn confirm<F>(&self, called: Instant, round: F) -> R
    where
        F: Future<Output = R>,
    {
        self.share(called, |_| round).await
    }

    /// The result of a round that started after this call and carried `item`: the last
    /// one if it did, else a new one, run with `round` on every item waiting.
    pub async fn carry<F, Fut>(&self, item: T, round: F) -> R
    where
        F: FnOnce(Vec<T>) -> Fut,
        Fut: Future<Output = R>,
    {
        let called = {
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            waiting.push(item);
            Instant::now()
        };
        self.share(called, round).await
    }

    async fn share<F, Fut>(&self, called: Instant, round: F) -> R
    where
        F: FnOnce(Vec<T>) -> Fut,
        Fut: Future<Output = R>,
    {
        let mut last = self.last.lock().await;
        if let Some((started, result)) = &*last
            && *started > called
        {
            return result.clone();
        }
        let (started, items) = {
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            (Instant::now(), std::mem::take(&mut *waiting))
        };
        self.run.fetch_add(1, Ordering::Relaxed);
        let result = round(items).await;
        *last = Some((started, result.clone()));
        result
    }

    /// How many rounds have run.
    pub fn run(&self) -> u64 {
        self.run.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// Every caller's result comes from a round that carried its item, however the
    /// callers and rounds interleave.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_caller_s_result_comes_from_a_round_that_carried_its_item() {
        let rounds: Arc<Rounds<u32, Vec<u32>>> = Arc::default();
        let mut callers = tokio::task::JoinSet::new();
        for i in 0..200u32 {
            let rounds = rounds.clone();
            callers.spawn(async move {
                if i % 7 == 0 {
                    tokio::time::sleep(Duration::from_millis(u64::from(i % 5))).await;
                }
                let carried = rounds
                    .carry(i, |items| async move {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        items
                    })
                    .await;
                (i, carried)
            });
        }
        while let Some(done) = callers.join_next().await {
            let (i, carried) = done.unwrap();
            assert!(
                carried.contains(&i),
                "{i} not in the round it got: {carried:?}"
            );
        }
        assert!(
            rounds.run() < 200,
            "rounds were not shared: {}",
            rounds.run()
        );
    }
}

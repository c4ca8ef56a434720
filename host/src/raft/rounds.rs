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

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::error::ControlError;

/// The last round and the lock that keeps rounds one at a time.
#[derive(Default)]
pub(crate) struct Rounds {
    /// When the last round started, and its result.
    last: tokio::sync::Mutex<Option<(Instant, Result<(), ControlError>)>>,
    /// Rounds run since the start.
    run: AtomicU64,
}

impl Rounds {
    /// The result of a round that started after `called`: the last one if it did, else
    /// a new one run with `round`.
    pub async fn confirm<F>(&self, called: Instant, round: F) -> Result<(), ControlError>
    where
        F: Future<Output = Result<(), ControlError>>,
    {
        let mut last = self.last.lock().await;
        if let Some((started, result)) = &*last
            && *started > called
        {
            return result.clone();
        }
        let started = Instant::now();
        self.run.fetch_add(1, Ordering::Relaxed);
        let result = round.await;
        *last = Some((started, result.clone()));
        result
    }

    /// How many rounds have run.
    pub fn run(&self) -> u64 {
        self.run.load(Ordering::Relaxed)
    }
}

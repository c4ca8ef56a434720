//! {{name}}: a Tenure owned task. While this node owns the resource `{{name}}`, `start`
//! runs: every `INTERVAL_MS` it counts one step, keeps the count in the resource's state
//! (so the next owner goes on from it) and logs it with the lease's fencing token. It
//! returns when a stop is requested; `cleanup` then runs on the same instance.

use std::time::Duration;

use tenure_sdk::{self as tenure, CleanupReason, Lease, Level};

struct Task;

impl tenure::Task for Task {
    async fn start(lease: Lease) -> tenure::Result {
        let interval = match tenure::env("INTERVAL_MS") {
            Some(ms) => ms.parse().map_err(|e| format!("INTERVAL_MS {ms:?}: {e}"))?,
            None => 1000,
        };
        let mut count = match tenure::state::load()? {
            Some(bytes) => {
                u64::from_le_bytes(bytes.try_into().map_err(|_| "state is not a count")?)
            }
            None => 0,
        };
        tenure::log(
            Level::Info,
            &format!("started token={} count={count}", lease.token),
        );
        loop {
            // One step of work. Give lease.token to whatever you write to (an HTTP request
            // through tenure::http carries it as `tenure-token`), so it can refuse a
            // stale owner.
            count += 1;
            tenure::state::save(&count.to_le_bytes())?;
            tenure::log(Level::Info, &format!("tick {count} token={}", lease.token));
            if tenure::sleep(Duration::from_millis(interval))
                .await
                .stop_requested()
            {
                return Ok(());
            }
        }
    }

    fn cleanup(reason: CleanupReason) {
        // Release what `start` holds outside the plugin; keep it short (cleanup_timeout).
        tenure::log(Level::Info, &format!("cleanup reason={reason}"));
    }
}

tenure::export!(Task);

//! `sdk-poller`: a plugin written with the Rust SDK (`sdk/rust`) the way its docs show.
//!
//! Every `INTERVAL_MS` (default 100) it GETs `TARGET_URL` with wstd's client (re-exported
//! by the SDK) and logs `request seq={n} status={code}`; it waits with the SDK's `sleep`
//! and returns when that says a stop was requested. A failed request ends `start` with
//! the error's message. `cleanup` logs `cleanup reason={reason} fresh_instance={bool}`,
//! so the tests can tell on which instance it ran.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tenure_sdk::{self as tenure, CleanupReason, Lease, Level, http};

/// Set at the top of `start`: false in `cleanup` means it runs on a fresh instance.
static STARTED: AtomicBool = AtomicBool::new(false);

struct Poller;

impl tenure::Task for Poller {
    async fn start(lease: Lease) -> tenure::Result {
        STARTED.store(true, Ordering::SeqCst);
        let url = tenure::env("TARGET_URL").ok_or("TARGET_URL is not set")?;
        let interval = match tenure::env("INTERVAL_MS") {
            Some(ms) => ms.parse()?,
            None => 100,
        };
        tenure::log(Level::Info, &format!("start token={}", lease.token));
        let client = http::Client::new();
        for seq in 1.. {
            let request = http::Request::get(&url).body(http::Body::empty())?;
            let response = client.send(request).await?;
            let status = response.status().as_u16();
            tenure::log(Level::Info, &format!("request seq={seq} status={status}"));
            if tenure::sleep(Duration::from_millis(interval))
                .await
                .stop_requested()
            {
                tenure::log(Level::Info, "stop requested: returning");
                break;
            }
        }
        Ok(())
    }

    fn cleanup(reason: CleanupReason) {
        let fresh = !STARTED.load(Ordering::SeqCst);
        tenure::log(
            Level::Info,
            &format!("cleanup reason={reason} fresh_instance={fresh}"),
        );
    }
}

tenure::export!(Poller);

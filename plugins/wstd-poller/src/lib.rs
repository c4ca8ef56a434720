//! `wstd-poller`: a plugin written the way a Rust author writes async code with `wstd`
//! alone, no Tenure SDK: one `block_on` around the whole of `start`, `wstd`'s HTTP client,
//! and `wstd::task::sleep` between requests.
//!
//! Every `INTERVAL_MS` (default 5000) it GETs `TARGET_URL` and logs
//! `request seq={n} status={code}` (or `request seq={n} failed: …`); without a
//! `TARGET_URL` it only waits (the stop benchmark runs it so, with no HTTP grant). After each wait it
//! asks the host whether a stop was requested, and returns `Ok` if so: it never calls the
//! host's `sleep`, so while it waits it is blocked in `wasi:io/poll` on a monotonic-clock
//! pollable. The host must end that wait when it asks the instance to stop (issue 26),
//! else the plugin can only be interrupted.
//!
//! Every `cleanup` logs `cleanup reason={reason} fresh_instance={bool}` like `misbehave`,
//! so the tests can tell on which instance it ran.

wit_bindgen::generate!({
    world: "owned-task",
    path: "../../wit",
    // The world imports WASI interfaces too (0.2.0): bindings for them are generated
    // here; only what the plugin calls ends up imported.
    generate_all,
});

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tenure::plugin::host::{self, Level};
use wstd::http::{Body, Client, Request};

/// Set at the top of `start`: false in `cleanup` means it runs on a fresh instance.
static STARTED: AtomicBool = AtomicBool::new(false);

/// The wait between requests when `INTERVAL_MS` is not set.
const DEFAULT_INTERVAL_MS: u64 = 5000;

struct Poller;

impl Guest for Poller {
    fn start(lease: Lease) -> Result<(), String> {
        STARTED.store(true, Ordering::SeqCst);
        let target = std::env::var("TARGET_URL").ok();
        let interval = std::env::var("INTERVAL_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .unwrap_or(DEFAULT_INTERVAL_MS);
        host::log(Level::Info, &format!("start token={}", lease.token));
        wstd::runtime::block_on(run(target.as_deref(), Duration::from_millis(interval)))
    }

    fn cleanup(reason: CleanupReason) {
        let fresh = !STARTED.load(Ordering::SeqCst);
        let reason = match reason {
            CleanupReason::Moved => "moved",
            CleanupReason::LeaseLost => "lease-lost",
            CleanupReason::Shutdown => "shutdown",
            CleanupReason::PluginUpdated => "plugin-updated",
            CleanupReason::PluginRemoved => "plugin-removed",
            CleanupReason::Released => "released",
            CleanupReason::Failed => "failed",
        };
        host::log(
            Level::Info,
            &format!("cleanup reason={reason} fresh_instance={fresh}"),
        );
    }
}

async fn run(target: Option<&str>, interval: Duration) -> Result<(), String> {
    let client = Client::new();
    let mut seq: u64 = 0;
    loop {
        seq += 1;
        if let Some(target) = target {
            get(&client, target, seq).await?;
        }
        wstd::task::sleep(interval.into()).await;
        if host::stop_requested() {
            host::log(Level::Info, "stop requested: returning");
            return Ok(());
        }
    }
}

/// GETs `target` and logs how it went.
async fn get(client: &Client, target: &str, seq: u64) -> Result<(), String> {
    let request = Request::get(target)
        .body(Body::empty())
        .map_err(|e| format!("bad TARGET_URL {target:?}: {e}"))?;
    match client.send(request).await {
        Ok(response) => host::log(
            Level::Info,
            &format!("request seq={seq} status={}", response.status().as_u16()),
        ),
        Err(e) => host::log(Level::Warn, &format!("request seq={seq} failed: {e}")),
    }
    Ok(())
}

export!(Poller);

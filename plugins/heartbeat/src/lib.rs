//! `heartbeat`: the smallest useful Tenure plugin, and the one to copy.
//!
//! It demonstrates the shape every owned task should have:
//!
//! - `start` does the protected work in a loop and waits with the host's `sleep`, never
//!   with a busy loop or `std::thread::sleep`. `sleep` returns `stop-requested` as soon as
//!   the host wants the instance to stop (the slot moved, the node is shutting down, a new
//!   version arrived...), so a plugin written this way stops promptly by itself and never
//!   has to be interrupted.
//! - Every line of work carries the lease's fencing token. A real plugin passes the token
//!   to the external systems it writes to, so that they can refuse a stale owner.
//! - `cleanup` releases what the instance held. It may run on a fresh instance (when
//!   `start` trapped or was interrupted), so it must not rely on memory `start` set, and it
//!   should be idempotent.
//!
//! Build it with `cargo build --target wasm32-wasip2 --profile plugin -p heartbeat` (the
//! target emits a component directly), then copy
//! `target/wasm32-wasip2/plugin/heartbeat.wasm` into the node's plugins folder. Without a
//! manifest beside it, the resource is named after the file: `heartbeat`.

// Generates the Rust bindings for the plugin contract: the `Guest` trait to implement
// (the `start` and `cleanup` exports) and the host's imports (`host`, `state`).
wit_bindgen::generate!({
    world: "owned-task",
    path: "../../wit",
    // The world imports WASI interfaces too (0.2.0): bindings for them are generated
    // here; only what the plugin calls ends up imported.
    generate_all,
});

use tenure::plugin::host::{self, Level, Wake};

/// How long to wait between two heartbeats, in milliseconds.
const PERIOD_MS: u64 = 1000;

/// The plugin. It keeps no state of its own: everything it needs comes from the lease.
struct Heartbeat;

impl Guest for Heartbeat {
    fn start(lease: Lease) -> Result<(), String> {
        let token = lease.token;
        let mut n: u64 = 0;
        loop {
            n += 1;
            host::log(Level::Info, &format!("tick {n} token={token}"));
            // Wait for the next beat. If the host asks us to stop while we wait, `sleep`
            // returns early with `StopRequested`: returning `Ok` then is a clean stop.
            if host::sleep(PERIOD_MS) == Wake::StopRequested {
                return Ok(());
            }
        }
    }

    fn cleanup(reason: CleanupReason) {
        // Nothing to release here. A real plugin would close what it opened, or tell an
        // external system that this owner is gone, without assuming `start` ever ran on
        // this instance.
        host::log(Level::Info, &format!("cleanup reason={reason:?}"));
    }
}

export!(Heartbeat);

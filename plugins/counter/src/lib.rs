//! `counter`: an example of the resource's durable, fenced state.
//!
//! It counts, saving the count after every step with `state::save`, and picks the count
//! up again with `state::load` when it starts: after a restart, or on whichever node owns
//! the resource next. The count is a `u64` stored as 8 little-endian bytes.
//!
//! A save is accepted only while this instance's grant is current. When it fails (the
//! slot was granted again, the node's lease expired...) the plugin stops with an error
//! instead of going on as if the count were recorded.

wit_bindgen::generate!({
    world: "owned-task",
    path: "../../wit",
    // The world imports WASI interfaces too (0.2.0): bindings for them are generated
    // here; only what the plugin calls ends up imported.
    generate_all,
});

use tenure::plugin::host::{self, Level, Wake};
use tenure::plugin::state;

/// How long to wait between two counts, in milliseconds.
const PERIOD_MS: u64 = 500;

struct Counter;

impl Guest for Counter {
    fn start(lease: Lease) -> Result<(), String> {
        let token = lease.token;
        let mut n = load_count()?;
        loop {
            n += 1;
            if let Err(e) = state::save(&n.to_le_bytes()) {
                let message = format!("saving count={n} failed: {}", describe(&e));
                host::log(Level::Warn, &message);
                return Err(message);
            }
            host::log(Level::Info, &format!("count={n} token={token}"));
            if host::sleep(PERIOD_MS) == Wake::StopRequested {
                return Ok(());
            }
        }
    }

    fn cleanup(reason: CleanupReason) {
        // The count is saved after every step, so there is nothing left to flush.
        host::log(Level::Info, &format!("cleanup reason={reason:?}"));
    }
}

/// Loads the saved count: 0 when nothing was ever saved.
fn load_count() -> Result<u64, String> {
    match state::load() {
        Ok(None) => Ok(0),
        Ok(Some(bytes)) => {
            let bytes: [u8; 8] = bytes
                .try_into()
                .map_err(|b: Vec<u8>| format!("saved count has {} bytes, not 8", b.len()))?;
            Ok(u64::from_le_bytes(bytes))
        }
        Err(e) => {
            let message = format!("loading the count failed: {}", describe(&e));
            host::log(Level::Warn, &message);
            Err(message)
        }
    }
}

/// A human description of a state error.
fn describe(error: &state::Error) -> String {
    match error {
        state::Error::StaleToken => "this instance's token is no longer current".to_string(),
        state::Error::LeaseExpired => "the node's lease expired".to_string(),
        state::Error::TooLarge(limit) => format!("the blob is larger than {limit} bytes"),
        state::Error::Unavailable(why) => format!("the state store is unavailable: {why}"),
    }
}

export!(Counter);

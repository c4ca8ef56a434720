//! Write a Tenure owned task in Rust the way async Rust is written.
//!
//! ```ignore
//! use std::time::Duration;
//! use tenure_sdk::{self as tenure, CleanupReason, Lease, http};
//!
//! struct Poller;
//!
//! impl tenure::Task for Poller {
//!     async fn start(lease: Lease) -> tenure::Result {
//!         let url = tenure::env("TARGET_URL").ok_or("TARGET_URL is not set")?;
//!         let client = http::Client::new();
//!         loop {
//!             let request = http::Request::get(&url).body(http::Body::empty())?;
//!             client.send(request).await?; // carries tenure-token: the host stamps it
//!             if tenure::sleep(Duration::from_secs(1)).await.stop_requested() {
//!                 return Ok(());
//!             }
//!         }
//!     }
//!
//!     fn cleanup(reason: CleanupReason) {
//!         tenure::log(tenure::Level::Info, &format!("cleanup {reason}"));
//!     }
//! }
//!
//! tenure::export!(Poller);
//! ```
//!
//! What it gives, over the `tenure:plugin@0.2.0` world:
//! - **An async `start`** ([`Task`]), run by [`wstd`]'s executor (one `block_on` per start).
//!   Its errors are any `std::error::Error` or string; their message (with its causes)
//!   becomes `start`'s `err`, which the node reports in `plugin.stopped`.
//! - **[`sleep`] that ends early on a stop**, saying why it ended, and [`stopped`], a future
//!   that completes when a stop is requested (the host's stop pollable), for
//!   `select`-style code. Every timer of the instance ends on a stop anyway (the host sees
//!   to it), so wstd's own `sleep` and timeouts never hold a stop up.
//! - **The lease, the environment, state**: [`lease`], [`env`], [`state::load`] and
//!   [`state::save`].
//! - **Outbound HTTP** through wasi:http: [`http`] is wstd's client, re-exported. The host
//!   stamps every request with `tenure-token` and its siblings; a raw socket would not be
//!   stamped.
//!
//! Build with `cargo build --release --target wasm32-wasip2` (a `cdylib` crate).

use std::future::Future;
use std::time::Duration;

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "owned-task",
        path: "../../wit",
        // The world's WASI imports are wasip2's types, which wstd uses: a pollable from
        // `subscribe-stop` is one wstd's reactor can wait on.
        with: {
            "wasi:io/poll@0.2.12": wasip2::io::poll,
            "wasi:io/error@0.2.12": wasip2::io::error,
            "wasi:io/streams@0.2.12": wasip2::io::streams,
            "wasi:clocks/monotonic-clock@0.2.12": wasip2::clocks::monotonic_clock,
            "wasi:clocks/wall-clock@0.2.12": wasip2::clocks::wall_clock,
            "wasi:random/random@0.2.12": wasip2::random::random,
            "wasi:cli/environment@0.2.12": wasip2::cli::environment,
            "wasi:http/types@0.2.12": wasip2::http::types,
            "wasi:http/outgoing-handler@0.2.12": wasip2::http::outgoing_handler,
        },
        pub_export_macro: true,
        export_macro_name: "__export_owned_task",
        default_bindings_module: "::tenure_sdk::bindings",
    });
}

pub use bindings::tenure::plugin::host::Level;
pub use bindings::tenure::plugin::ownership::{CleanupReason, Lease};
/// The async runtime the tasks run on, for what this crate does not re-export.
pub use wstd;
/// wstd's HTTP client and types (`Client`, `Request`, `Body`, …), over wasi:http.
pub use wstd::http;

use bindings::tenure::plugin::host;

/// What `start` returns: `Ok`, or an error whose message the node reports.
pub type Result<T = (), E = Error> = std::result::Result<T, E>;

/// Any error: `?` converts every `std::error::Error` and every string into it.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// An owned task. `start` runs while this node owns the slot; return `Ok` when the work
/// is done or a stop was requested. `cleanup` runs after `start` can no longer run
/// (see the WIT for when, and on which instance).
pub trait Task {
    /// The protected work, async. Return within the manifest's `stop_grace` once a stop
    /// is requested ([`sleep`] says so, [`stopped`] completes).
    fn start(lease: Lease) -> impl Future<Output = Result>;

    /// Releases what this instance held. The default does nothing.
    fn cleanup(reason: CleanupReason) {
        let _ = reason;
    }
}

/// Exports a [`Task`] as the component's `start` and `cleanup`: `tenure_sdk::export!(MyTask);`
#[macro_export]
macro_rules! export {
    ($task:ty) => {
        #[doc(hidden)]
        type __TenureSdkTask = $crate::Adapter<$task>;
        $crate::bindings::__export_owned_task!(__TenureSdkTask with_types_in $crate::bindings);
    };
}

/// The bridge from a [`Task`] to the generated exports (used by [`export!`]).
#[doc(hidden)]
pub struct Adapter<T>(std::marker::PhantomData<T>);

impl<T: Task> bindings::Guest for Adapter<T> {
    fn start(lease: Lease) -> std::result::Result<(), String> {
        wstd::runtime::block_on(T::start(lease)).map_err(|e| message(&*e))
    }

    fn cleanup(reason: CleanupReason) {
        T::cleanup(reason)
    }
}

/// An error's message followed by its causes, `outer: inner: root`.
fn message(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The reason as the WIT spells it: `moved`, `lease-lost`, `shutdown`, …
impl std::fmt::Display for CleanupReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CleanupReason::Moved => "moved",
            CleanupReason::LeaseLost => "lease-lost",
            CleanupReason::Shutdown => "shutdown",
            CleanupReason::PluginUpdated => "plugin-updated",
            CleanupReason::PluginRemoved => "plugin-removed",
            CleanupReason::Released => "released",
            CleanupReason::Failed => "failed",
        })
    }
}

/// How a [`sleep`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// The whole time passed.
    Elapsed,
    /// The host asked this instance to stop: return from `start` soon.
    StopRequested,
}

impl Wake {
    pub fn stop_requested(self) -> bool {
        self == Wake::StopRequested
    }
}

/// Sleeps for `duration`, or less: it ends as soon as the host asks the instance to stop.
/// Other tasks of the executor run meanwhile.
pub async fn sleep(duration: Duration) -> Wake {
    if stop_requested() {
        return Wake::StopRequested;
    }
    // The host ends every timer of the instance on a stop request.
    wstd::task::sleep(duration.into()).await;
    if stop_requested() {
        Wake::StopRequested
    } else {
        Wake::Elapsed
    }
}

/// Completes once the host has asked this instance to stop.
pub async fn stopped() {
    if stop_requested() {
        return;
    }
    let stop = wstd::runtime::AsyncPollable::new(host::subscribe_stop());
    stop.wait_for().await;
}

/// Whether the host has asked this instance to stop.
pub fn stop_requested() -> bool {
    host::stop_requested()
}

/// The grant this instance runs under (the same value `start` receives).
pub fn lease() -> Lease {
    host::lease()
}

/// An environment variable the manifest grants (`env` or `secrets`).
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Writes a line to the node's log, tagged with the plugin, resource, slot and token.
pub fn log(level: Level, message: &str) {
    host::log(level, message)
}

/// The resource's state: one small durable blob, fenced by the grant's token.
pub mod state {
    use super::bindings::tenure::plugin::state;

    /// Why a state call failed (`stale-token`, `lease-expired`, `too-large`,
    /// `unavailable`); it is a `std::error::Error`, so `?` passes it on.
    pub use state::Error;

    /// The last saved blob, or `None` if nothing was ever saved.
    pub fn load() -> Result<Option<Vec<u8>>, Error> {
        state::load()
    }

    /// Replaces the blob; `Ok` once it is durable. Refused once the grant is stale.
    pub fn save(data: &[u8]) -> Result<(), Error> {
        state::save(data)
    }
}

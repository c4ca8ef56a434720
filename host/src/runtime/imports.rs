//! Tenure's host imports: `lease`, `sleep`, `stop-requested`, `subscribe-stop`, `log` and
//! `state`, written once, for the newest served version of `tenure:plugin` (0.2.0);
//! `versions.rs` adapts them to the older ones.
//!
//! `sleep` never outlives a stop request (nor any other wait of the instance: clocks.rs),
//! and `state` calls are bounded by the backend, so a plugin inside a host call can
//! always be stopped within about one epoch tick.

use std::time::Duration;

use wasmtime::component::Resource;
use wasmtime_wasi::p2::DynPollable;

use super::StateError;
use super::bindings::v0_2::tenure::plugin::host::{self, Level, Wake};
use super::bindings::v0_2::tenure::plugin::ownership::{self, Lease};
use super::bindings::v0_2::tenure::plugin::state;
use super::clocks::Waited;
use super::output::{self, Stream};
use super::store::HostState;
use crate::cluster::MAX_STATE_BYTES;
use crate::ownership::Grant;

/// The longest single sleep; a plugin wanting longer sleeps again.
const MAX_SLEEP: Duration = Duration::from_secs(24 * 3600);

impl ownership::Host for HostState {}

impl host::Host for HostState {
    fn lease(&mut self) -> Lease {
        wit_lease(&self.ctx.grant)
    }

    async fn sleep(&mut self, ms: u64) -> Wake {
        // Ends early on a stop request or at the instance's trap time, like every timer
        // of the instance (clocks.rs): the engine cannot interrupt code waiting in a host
        // call, so the call wakes it instead.
        let end = tokio::time::Instant::now() + Duration::from_millis(ms).min(MAX_SLEEP);
        match super::clocks::wait(&self.ctx, Some(end)).await {
            Waited::Elapsed => Wake::Elapsed,
            Waited::Stopped => Wake::StopRequested,
        }
    }

    fn stop_requested(&mut self) -> bool {
        self.ctx.signals.stop_requested()
    }

    fn subscribe_stop(&mut self) -> wasmtime::Result<Resource<DynPollable>> {
        // Fails (a trap) only when the instance's resource table is full.
        super::clocks::stop_pollable(self)
    }

    fn log(&mut self, level: Level, message: String) {
        output::emit(&self.ctx, Stream::Log, level, &message);
    }
}

impl state::Host for HostState {
    async fn load(&mut self) -> Result<Option<Vec<u8>>, state::Error> {
        self.ctx.state.load(&self.ctx.grant).await.map_err(into_wit)
    }

    async fn save(&mut self, data: Vec<u8>) -> Result<(), state::Error> {
        if data.len() > MAX_STATE_BYTES {
            return Err(into_wit(StateError::TooLarge(MAX_STATE_BYTES as u32)));
        }
        // Each save is a commit on every node: paced (guest_data.rs).
        if !self.save_pace.turn(&self.ctx.signals).await {
            return Err(into_wit(StateError::Unavailable(
                "the plugin is being stopped".into(),
            )));
        }
        // The one lease check every effect asks (lease.rs); the backend's token check
        // then fences a save that was proposed in time but committed late.
        if self.ctx.may_act().is_err() {
            return Err(into_wit(StateError::LeaseExpired));
        }
        self.ctx
            .state
            .save(&self.ctx.grant, data)
            .await
            .map_err(into_wit)
    }
}

/// The WIT form of a grant.
pub(super) fn wit_lease(grant: &Grant) -> Lease {
    Lease {
        resource: grant.resource.clone(),
        slot: grant.slot,
        node: grant.node.clone(),
        token: grant.token,
        term: grant.term,
    }
}

fn into_wit(err: StateError) -> state::Error {
    match err {
        StateError::StaleToken => state::Error::StaleToken,
        StateError::LeaseExpired => state::Error::LeaseExpired,
        StateError::TooLarge(limit) => state::Error::TooLarge(limit),
        StateError::Unavailable(why) => state::Error::Unavailable(why),
    }
}

//! `tenure:plugin@0.1.0` served by the 0.2.0 host imports: its generated traits call the
//! ones in `imports.rs`, with each type converted.
//!
//! The two versions have the same functions and types except for what 0.2.0 added
//! (`host.subscribe-stop`, the WASI imports of the world) and the name of the interface
//! that holds `lease` and `cleanup-reason` (`types`, now `ownership`). So every
//! conversion here is one-to-one, and a 0.1.0 plugin sees exactly what it saw from the
//! host it was built for. Supporting an older version never changes the newer one's
//! code: only this file grows.

use super::bindings::v0_1::tenure::plugin as old;
use super::bindings::v0_2::tenure::plugin as new;
use super::store::HostState;

impl old::types::Host for HostState {}

impl old::host::Host for HostState {
    fn lease(&mut self) -> old::types::Lease {
        lease(new::host::Host::lease(self))
    }

    async fn sleep(&mut self, ms: u64) -> old::host::Wake {
        match new::host::Host::sleep(self, ms).await {
            new::host::Wake::Elapsed => old::host::Wake::Elapsed,
            new::host::Wake::StopRequested => old::host::Wake::StopRequested,
        }
    }

    fn stop_requested(&mut self) -> bool {
        new::host::Host::stop_requested(self)
    }

    fn log(&mut self, level: old::host::Level, message: String) {
        new::host::Host::log(self, level.into(), message)
    }
}

impl old::state::Host for HostState {
    async fn load(&mut self) -> Result<Option<Vec<u8>>, old::state::Error> {
        new::state::Host::load(self).await.map_err(Into::into)
    }

    async fn save(&mut self, data: Vec<u8>) -> Result<(), old::state::Error> {
        new::state::Host::save(self, data).await.map_err(Into::into)
    }
}

/// The 0.1.0 form of a grant.
pub(super) fn lease(lease: new::ownership::Lease) -> old::types::Lease {
    let new::ownership::Lease {
        resource,
        slot,
        node,
        token,
        term,
    } = lease;
    old::types::Lease {
        resource,
        slot,
        node,
        token,
        term,
    }
}

/// The 0.1.0 form of a cleanup reason.
pub(super) fn cleanup_reason(reason: new::ownership::CleanupReason) -> old::types::CleanupReason {
    use new::ownership::CleanupReason as New;
    use old::types::CleanupReason as Old;
    match reason {
        New::Moved => Old::Moved,
        New::LeaseLost => Old::LeaseLost,
        New::Shutdown => Old::Shutdown,
        New::PluginUpdated => Old::PluginUpdated,
        New::PluginRemoved => Old::PluginRemoved,
        New::Released => Old::Released,
        New::Failed => Old::Failed,
    }
}

impl From<old::host::Level> for new::host::Level {
    fn from(level: old::host::Level) -> Self {
        use new::host::Level as New;
        use old::host::Level as Old;
        match level {
            Old::Trace => New::Trace,
            Old::Debug => New::Debug,
            Old::Info => New::Info,
            Old::Warn => New::Warn,
            Old::Error => New::Error,
        }
    }
}

impl From<new::state::Error> for old::state::Error {
    fn from(error: new::state::Error) -> Self {
        use new::state::Error as New;
        use old::state::Error as Old;
        match error {
            New::StaleToken => Old::StaleToken,
            New::LeaseExpired => Old::LeaseExpired,
            New::TooLarge(limit) => Old::TooLarge(limit),
            New::Unavailable(why) => Old::Unavailable(why),
        }
    }
}

//! One plugin instance: a store built for one grant, and the calls into its exports.
//!
//! The runtime reports how each call ended ([`Failure`]); the supervisor decides what
//! follows. A trap or interrupt poisons an instance, so after one the supervisor runs
//! `cleanup` on a fresh instance.

use std::sync::Arc;

use wasmtime::{Engine, Store, Trap};

use super::bindings::{Version, v0_1, v0_2};
use super::imports::wit_lease;
use super::output::sanitize;
use super::store::{self, HostState};
use super::{CleanupReason, InstanceContext};

/// How a call into a plugin ended, when it did not return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The plugin trapped (a panic, an unreachable, a bad memory access…).
    Trapped(String),
    /// The host interrupted it at an epoch tick.
    Interrupted,
    /// Its memory cap refused a growth, and it trapped.
    OutOfMemory {
        /// The cap, in bytes.
        limit: usize,
        /// The total the plugin asked for, in bytes.
        requested: usize,
        /// The trap that followed.
        error: String,
    },
}

impl Failure {
    /// The `outcome` field of `plugin.stopped`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Failure::Trapped(_) => "trapped",
            Failure::Interrupted => "interrupted",
            Failure::OutOfMemory { .. } => "oom",
        }
    }

    /// A one-line description for the log.
    pub fn describe(&self) -> String {
        match self {
            Failure::Trapped(error) => error.clone(),
            Failure::Interrupted => "interrupted by the host".to_string(),
            Failure::OutOfMemory {
                limit,
                requested,
                error,
            } => format!(
                "out of memory: asked for {requested} bytes, the limit is {limit} bytes ({error})"
            ),
        }
    }
}

/// A component checked against the world of the version it was built for, ready to
/// instantiate.
pub(super) enum Pre {
    V0_1(v0_1::OwnedTaskPre<HostState>),
    V0_2(v0_2::OwnedTaskPre<HostState>),
}

impl Pre {
    /// Checks `pre`'s exports against the world of `version`.
    pub(super) fn new(
        version: Version,
        pre: wasmtime::component::InstancePre<HostState>,
    ) -> wasmtime::Result<Self> {
        Ok(match version {
            Version::V0_1 => Pre::V0_1(v0_1::OwnedTaskPre::new(pre)?),
            Version::V0_2 => Pre::V0_2(v0_2::OwnedTaskPre::new(pre)?),
        })
    }
}

/// The exports of one instance, in the version it was built for.
enum Bindings {
    V0_1(v0_1::OwnedTask),
    V0_2(v0_2::OwnedTask),
}

/// A live plugin instance.
pub struct Instance {
    store: Store<HostState>,
    bindings: Bindings,
}

impl Instance {
    pub(super) async fn new(
        engine: &Engine,
        pre: &Pre,
        ctx: Arc<InstanceContext>,
    ) -> Result<Self, Failure> {
        let mut store = store::build(engine, ctx);
        let bindings = match pre {
            Pre::V0_1(pre) => pre.instantiate_async(&mut store).await.map(Bindings::V0_1),
            Pre::V0_2(pre) => pre.instantiate_async(&mut store).await.map(Bindings::V0_2),
        };
        match bindings {
            Ok(bindings) => Ok(Self { store, bindings }),
            Err(err) => Err(classify(&store, err)),
        }
    }

    /// Calls `start`: `Ok` with what the plugin returned, or how it failed.
    pub async fn start(&mut self) -> Result<Result<(), String>, Failure> {
        let lease = wit_lease(&self.store.data().ctx.grant);
        let result = match &self.bindings {
            Bindings::V0_1(b) => {
                let lease = super::versions::lease(lease);
                b.call_start(&mut self.store, &lease).await
            }
            Bindings::V0_2(b) => b.call_start(&mut self.store, &lease).await,
        };
        result.map_err(|err| classify(&self.store, err))
    }

    /// Calls `cleanup(reason)`.
    pub async fn cleanup(&mut self, reason: CleanupReason) -> Result<(), Failure> {
        let result = match &self.bindings {
            Bindings::V0_1(b) => {
                let reason = super::versions::cleanup_reason(reason);
                b.call_cleanup(&mut self.store, reason).await
            }
            Bindings::V0_2(b) => b.call_cleanup(&mut self.store, reason).await,
        };
        result.map_err(|err| classify(&self.store, err))
    }
}

fn classify(store: &Store<HostState>, err: wasmtime::Error) -> Failure {
    // A trap's own message ("wasm `unreachable` instruction executed") says what
    // happened; the wasm backtrace around it is noise in an event. Other errors (a host
    // call failing, instantiation) keep their whole chain.
    let error = match err.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => sanitize(&format!("{err:#}").replace('\n', " | ")),
    };
    if let Some(requested) = store.data().memory.refused {
        return Failure::OutOfMemory {
            limit: store.data().ctx.memory_limit,
            requested,
            error,
        };
    }
    if err.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        return Failure::Interrupted;
    }
    Failure::Trapped(error)
}

//! Waits that end on a stop: the host's `sleep`, and every `wasi:clocks/monotonic-clock`
//! timer an instance subscribes to.
//!
//! A plugin waits in one of two ways. A synchronous one calls the host's `sleep`; an
//! asynchronous one (Rust with `wstd`, JavaScript's event loop, Python's asyncio over
//! wasi:io) subscribes to a monotonic-clock timer and blocks in `wasi:io/poll` until it,
//! or another pollable, is ready. The engine cannot interrupt code blocked in a host call,
//! so a wait that outlived a stop request left the supervisor nothing but its backstop:
//! the call was dropped at the stop grace plus a second, the plugin reported
//! `interrupted`, and its cleanup ran on a fresh instance (issue 26).
//!
//! So every wait of an instance ends early, in the same way:
//! - **on a stop request**, at once: `sleep` returns `stop-requested`, a timer becomes
//!   ready (the plugin sees its wait end, checks `stop-requested`, and returns);
//! - **at the instance's trap time** (its interrupt time, or the node's lease deadline
//!   while it runs `start`): the plugin runs again, and the engine's epoch check traps it
//!   at its next tick, as it would have had it been computing.
//!
//! A timer that ended early says nothing about why; the clock's `now` is not moved, so a
//! plugin that compares times sees that the wait was short. After a stop request every
//! new timer is ready at once, and `cleanup` runs on the stopping instance, so a wait in
//! `cleanup` ends at once too: cleanup is bounded by its own budget, not by timers.
//!
//! `subscribe-duration` and `subscribe-instant` replace wasmtime-wasi's in the linker
//! (shadowing, as `tcp.rs` does for sockets); `now` and `resolution` stay its own. A
//! zero-length timer keeps wasmtime-wasi's behaviour of yielding to the executor once
//! (a guest polling in a loop must not starve the host's I/O).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::clocks::WasiClocksView;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host as _;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use super::InstanceContext;
use super::store::HostState;

/// The interface whose timers are replaced, at the version wasmtime-wasi links (a
/// component importing an older 0.2 version is served by these too).
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// How a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Waited {
    /// The whole time passed.
    Elapsed,
    /// A stop was requested, or the instance's trap time came.
    Stopped,
}

/// Waits until `end` (`None`: for ever), or less: until a stop is requested or the
/// instance's trap time comes.
pub(super) async fn wait(ctx: &InstanceContext, end: Option<Instant>) -> Waited {
    let signals = &ctx.signals;
    if signals.stop_requested() {
        return Waited::Stopped;
    }
    // Renewals move the lease deadline on while the plugin waits, so the trap time is
    // read again whenever it comes.
    loop {
        let trap_at = signals.trap_at(&ctx.lease, ctx.grant.session);
        let now = super::lease::now();
        if now >= trap_at {
            return Waited::Stopped;
        }
        let trap = Instant::now().checked_add(Duration::from_nanos(trap_at - now));
        let ends_first = match (end, trap) {
            (Some(end), Some(trap)) => end <= trap,
            (Some(_), None) => true,
            (None, _) => false,
        };
        let until = if ends_first { end } else { trap };
        tokio::select! {
            biased;
            _ = signals.stopping() => return Waited::Stopped,
            _ = sleep_until(until) => {
                if ends_first {
                    return Waited::Elapsed;
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Replaces wasmtime-wasi's monotonic-clock timers with [`StoppableTimer`]s.
pub(super) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    clock.func_wrap("subscribe-duration", subscribe_duration)?;
    clock.func_wrap("subscribe-instant", subscribe_instant)?;
    linker.allow_shadowing(false);
    Ok(())
}

fn subscribe_duration(
    mut store: StoreContextMut<'_, HostState>,
    (nanos,): (u64,),
) -> wasmtime::Result<(Resource<DynPollable>,)> {
    Ok((timer(store.data_mut(), nanos)?,))
}

fn subscribe_instant(
    mut store: StoreContextMut<'_, HostState>,
    (when,): (u64,),
) -> wasmtime::Result<(Resource<DynPollable>,)> {
    let state = store.data_mut();
    let now = state.clocks().now()?;
    Ok((timer(state, when.saturating_sub(now))?,))
}

/// A timer of `nanos` for the instance, as a pollable.
fn timer(state: &mut HostState, nanos: u64) -> wasmtime::Result<Resource<DynPollable>> {
    let timer = StoppableTimer {
        ctx: state.ctx.clone(),
        // Beyond what an `Instant` can hold: never (wasmtime-wasi does the same).
        end: Instant::now().checked_add(Duration::from_nanos(nanos)),
        yield_first: nanos == 0,
    };
    let timer = state.table.push(timer)?;
    subscribe(&mut state.table, timer)
}

/// The pollable of `host.subscribe-stop`: ready once the instance is asked to stop or
/// its trap time comes (a timer that never elapses).
pub(super) fn stop_pollable(state: &mut HostState) -> wasmtime::Result<Resource<DynPollable>> {
    let stop = StoppableTimer {
        ctx: state.ctx.clone(),
        end: None,
        yield_first: false,
    };
    let stop = state.table.push(stop)?;
    subscribe(&mut state.table, stop)
}

/// A monotonic-clock timer that is also ready once the instance is asked to stop or its
/// trap time comes ([`wait`]).
struct StoppableTimer {
    ctx: Arc<InstanceContext>,
    /// When it elapses; `None`: never.
    end: Option<Instant>,
    /// A zero-length timer not yet polled: yield to the executor once.
    yield_first: bool,
}

#[wasmtime_wasi::async_trait]
impl Pollable for StoppableTimer {
    async fn ready(&mut self) {
        if self.yield_first {
            self.yield_first = false;
            tokio::task::yield_now().await;
            return;
        }
        wait(&self.ctx, self.end).await;
    }
}

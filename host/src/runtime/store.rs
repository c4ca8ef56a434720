//! The one place a `Store` is built: its WASI context (granting only the manifest's
//! environment: `env.rs`; its sockets: `tcp.rs`), its wasi:http context (`http.rs`),
//! memory cap and epoch deadline.

use std::sync::Arc;

use wasmtime::{Engine, ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::{ResourceTable, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::WasiHttpCtx;

use super::InstanceContext;
use super::output::{OutputSink, Stream};

/// Table elements an instance may grow to; far above what a plugin needs, far below
/// what would hurt the host.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// The data of one plugin instance's store.
pub struct HostState {
    pub(super) ctx: Arc<InstanceContext>,
    pub(super) memory: MemoryCap,
    wasi: WasiCtx,
    pub(super) http: WasiHttpCtx,
    pub(super) http_hooks: super::http::Hooks,
    pub(super) tcp: super::tcp::Sockets,
    pub(super) save_pace: super::guest_data::SavePace,
    pub(super) table: ResourceTable,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Builds the store for one instance.
pub(super) fn build(engine: &Engine, ctx: Arc<InstanceContext>) -> Store<HostState> {
    let mut wasi = WasiCtxBuilder::new();
    // The builder's defaults grant no env, args, dirs or addresses; the sockets say
    // explicitly what they grant (tcp.rs), so a future default cannot widen it.
    wasi.stdout(OutputSink::new(ctx.clone(), Stream::Stdout))
        .stderr(OutputSink::new(ctx.clone(), Stream::Stderr));
    super::env::grant(&mut wasi, &ctx.granted);
    let tcp = super::tcp::Sockets::new(ctx.clone());
    tcp.grant(&mut wasi);
    let state = HostState {
        memory: MemoryCap::new(ctx.memory_limit),
        ctx: ctx.clone(),
        wasi: wasi.build(),
        http: WasiHttpCtx::new(),
        http_hooks: super::http::Hooks::new(ctx.clone()),
        tcp,
        save_pace: Default::default(),
        table: ResourceTable::new(),
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.memory);
    store.set_epoch_deadline(1);
    // The engine enforces the lease (lease.rs): at every tick the instance traps if its
    // interrupt time or, while it runs `start`, the node's lease deadline has come.
    let signals = ctx.signals.clone();
    let lease = ctx.lease.clone();
    let session = ctx.grant.session;
    store.epoch_deadline_callback(move |_| {
        let now = super::lease::now();
        Ok(if now >= signals.trap_at(&lease, session) {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Yield(1)
        })
    });
    store
}

/// A memory cap over the sum of an instance's linear memories, remembering whether a
/// growth was refused so the failure can be reported as out-of-memory.
pub(super) struct MemoryCap {
    limit: usize,
    total: usize,
    /// The total the instance asked for when it was refused.
    pub(super) refused: Option<usize>,
}

impl MemoryCap {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            total: 0,
            refused: None,
        }
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let next = self.total.saturating_sub(current).saturating_add(desired);
        if next > self.limit {
            self.refused = Some(next);
            return Ok(false);
        }
        self.total = next;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_counts_all_memories_and_remembers_a_refusal() {
        let mut cap = MemoryCap::new(100);
        assert!(cap.memory_growing(0, 60, None).unwrap());
        assert!(cap.memory_growing(0, 30, None).unwrap());
        assert_eq!(cap.refused, None);
        assert!(!cap.memory_growing(60, 80, None).unwrap());
        assert_eq!(cap.refused, Some(110));
        // Growing the other memory within what is left still works, up to the limit.
        assert!(cap.memory_growing(30, 40, None).unwrap());
        assert_eq!(cap.total, 100);
        assert!(!cap.memory_growing(40, 41, None).unwrap());
    }
}

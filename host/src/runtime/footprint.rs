//! What one instance of a component needs before it runs a line of code, known at load.
//!
//! A manifest memory limit below a component's initial memory cannot work: every
//! instantiation fails with out-of-memory, the supervisor restarts it until it gives up,
//! and the operator sees `plugin.failed` instead of the cause. So the limit is checked
//! against the footprint when the plugin is loaded, and refused there with the figure.
//!
//! The same figures tell placement how many instances of the plugin fit a node's
//! instance pool: the node advertises [`Footprint::pool`] with the plugin, and the leader
//! adds them up per node (`crate::cluster::Pool`).
//!
//! The memory and table figures are wasmtime's (`Component::resources_required`): the
//! number of linear memories and tables the component's core instances define, and the
//! initial size of the largest memory. That size is a lower bound of what one instance
//! needs (the other memories are usually small: a Python component's main memory is
//! 12.3 MiB of its total). A component that instantiates an imported module has no
//! static memory figures. wasmtime does not expose the number of core instances, so
//! `core_instances.rs` counts them from the binary.

use wasmtime::component::Component;

use super::LoadError;
use crate::cluster::Pool;

/// Bytes in one wasm page.
const PAGE: u64 = 64 * 1024;

/// What one instance of a component needs at instantiation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Core module instances one instantiation makes.
    pub core_instances: u32,
    /// Linear memories its core instances define.
    pub memories: u32,
    /// Tables its core instances define.
    pub tables: u32,
    /// The initial size of its largest memory, in bytes.
    pub initial_memory: u64,
}

impl Footprint {
    /// The footprint of `component`, compiled from `wasm` (memories and tables are
    /// zero if they cannot be known statically).
    pub(super) fn of(component: &Component, wasm: &[u8]) -> Result<Self, LoadError> {
        let core_instances = super::core_instances::count(wasm)
            .map_err(|e| LoadError::Invalid(format!("cannot count its core instances: {e}")))?;
        let mut footprint = component
            .resources_required()
            .map(|r| Self {
                core_instances: 0,
                memories: r.num_memories,
                tables: r.num_tables,
                initial_memory: r.max_initial_memory_size.unwrap_or(0) * PAGE,
            })
            .unwrap_or_default();
        footprint.core_instances = core_instances;
        Ok(footprint)
    }

    /// What one instance takes from a node's instance pool: one component instance (and
    /// its stack), its core instances, memories and tables.
    pub fn pool(&self) -> Pool {
        Pool {
            instances: 1,
            core_instances: self.core_instances,
            memories: self.memories,
            tables: self.tables,
        }
    }

    /// Why a memory limit of `limit` bytes cannot hold an instance, if it cannot.
    pub fn refuses(&self, limit: u64) -> Option<String> {
        (limit < self.initial_memory).then(|| {
            format!(
                "limits.memory is {} but the component's initial memory is {} (its largest \
                 memory before it runs): every start would fail out of memory; set \
                 limits.memory to at least {} (`tenure plugin check` suggests a value)",
                mib(limit),
                mib(self.initial_memory),
                mib(self.suggested_limit()),
            )
        })
    }

    /// A memory limit to start from: twice the initial memory (room for the heap to
    /// grow), at least 16 MiB, rounded up to a whole MiB.
    pub fn suggested_limit(&self) -> u64 {
        let mib = 1 << 20;
        (2 * self.initial_memory).max(16 * mib).div_ceil(mib) * mib
    }
}

/// `bytes` in MiB, e.g. `12.3MiB`.
pub fn mib(bytes: u64) -> String {
    let mib = bytes as f64 / (1 << 20) as f64;
    if mib.fract() == 0.0 {
        format!("{mib:.0}MiB")
    } else {
        format!("{mib:.1}MiB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_below_the_initial_memory_is_refused_with_both_figures() {
        let footprint = Footprint {
            core_instances: 14,
            memories: 2,
            tables: 1,
            initial_memory: 197 * PAGE,
        };
        let why = footprint.refuses(8 << 20).expect("refused");
        assert!(why.contains("limits.memory is 8MiB"), "{why}");
        assert!(why.contains("initial memory is 12.3MiB"), "{why}");
        assert!(why.contains("at least 25MiB"), "{why}");
        assert_eq!(footprint.refuses(13 << 20), None);
        assert_eq!(Footprint::default().suggested_limit(), 16 << 20);
    }
}

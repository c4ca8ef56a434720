//! The replicated cluster state and the commands that change it.
//!
//! This is the data model of the control plane (docs/design.md §5.3, "Control plane"): members
//! and their sessions, resources and their slots, fenced plugin state, revoked
//! certificates and a bounded history of ownership changes. Raft (`crate::raft`) orders
//! [`Command`]s into a log; every node applies the same commands in the same order to its
//! own [`Cluster`], so every node has the same view.
//!
//! [`Cluster::apply`] is deterministic: it reads no clock, does no I/O and depends only on
//! the state, the command and the log position it is applied at. Time enters only as
//! values carried in commands (`at_ms`, a proposer's wall clock, used for display and
//! for the minimum term before a rebalance), never as a reading. Decisions that need a
//! clock (session expiry, placement) are made by the leader and proposed as commands.
//!
//! **Fencing tokens** are the log index of the entry that granted a slot, so every grant
//! of a slot carries a strictly greater token than the one before, on every node.
//!
//! **Authorization.** A member's forwarded proposal is applied with that member's rights
//! only: it may speak for itself, never for another node (`authorize.rs`, the table).
//!
//! Files: `state.rs` (the types), `apply.rs` (the state transitions), `authorize.rs`
//! (what a member may propose), `identity.rs` (the cluster and store ids), `once.rs` (stamped commands, applied once), `sessions.rs` (which process may open a session), `pool.rs` (counts over a node's instance pool: plugin
//! footprints and node capacity).

mod apply;
mod authorize;
mod identity;
mod once;
mod pool;
mod sessions;
mod state;

pub use authorize::authorize;
pub use identity::{ClusterCell, ClusterId, Process, StoreId};
pub use once::MAX_ANSWERS;

/// The largest state blob a plugin may save: the replicated state holds every resource's
/// blob, so `apply` refuses a larger one whoever proposes it, and the runtime refuses it
/// before it is proposed.
pub const MAX_STATE_BYTES: usize = 64 * 1024;
pub use pool::{Dimension, Pool, thousands};
pub use state::*;

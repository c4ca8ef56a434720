//! Tenure: a WebAssembly plugin host for owned tasks.
//!
//! A node watches its plugins folder, owns the resources the plugins name, and runs
//! each owned slot's plugin in a sandboxed wasm instance under a supervisor. See
//! ARCHITECTURE.md for the map of modules and their invariants.
//!
//! These docs are for the engineers who work on Tenure, and are built with private items
//! (`cargo doc --document-private-items`, which CI runs with warnings denied): a public
//! item's doc may link to the private constant or function it rests on.
#![allow(rustdoc::private_intra_doc_links)]

pub mod api;
pub mod catalog;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod envelope;
pub mod events;
pub mod failures;
pub mod future;
#[cfg(test)]
mod golden;
pub mod metrics;
pub mod node;
pub mod ownership;
pub mod pki;
pub mod placement;
pub mod priority;
pub mod private_files;
pub mod raft;
mod ratelimit;
pub mod rpc;
pub mod runtime;
pub mod supervisor;
pub mod template;
pub mod terminal;
pub mod transport;
pub mod version;

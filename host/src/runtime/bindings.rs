//! The generated bindings for the `owned-task` world, one module per served version of
//! `tenure:plugin`: the one place `bindgen!` runs.
//!
//! The host serves every version it released (the WIT's own policy): [`v0_2`] from
//! `wit/owned-task.wit`, [`v0_1`] from `wit/v0.1.0/owned-task.wit`. Both are linked into
//! one linker (their import names differ by version), and a component is bound to the
//! version whose `tenure:plugin` interfaces it imports ([`Version::of`]). The host's
//! imports are written once, on neutral types (`imports.rs`), and each version's
//! generated traits adapt them (`versions.rs`).
//!
//! `sleep` and the `state` functions are async on the host so that they can wait on a
//! timer, a stop request or (later) a replicated commit without blocking a thread; to
//! the plugin they are ordinary blocking calls. Exports are async so that a running
//! plugin yields to the executor at every epoch tick.

/// `tenure:plugin@0.1.0`, the first release: served unchanged.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        world: "owned-task",
        path: "../wit/v0.1.0",
        imports: {
            "tenure:plugin/host.sleep": async,
            "tenure:plugin/state": async,
        },
        exports: { default: async },
    });
}

/// `tenure:plugin@0.2.0`: the world imports the WASI interfaces the host links (bound to
/// wasmtime-wasi's and wasmtime-wasi-http's own bindings, so nothing is generated twice),
/// and `host.subscribe-stop` returns a `wasi:io` pollable.
pub mod v0_2 {
    wasmtime::component::bindgen!({
        world: "owned-task",
        path: "../wit",
        imports: {
            "tenure:plugin/host.sleep": async,
            "tenure:plugin/host.subscribe-stop": trappable,
            "tenure:plugin/state": async,
        },
        exports: { default: async },
        with: {
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
            "wasi:cli": wasmtime_wasi::p2::bindings::cli,
            "wasi:random": wasmtime_wasi::p2::bindings::random,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        },
    });
}

/// A served version of `tenure:plugin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V0_1,
    V0_2,
}

impl Version {
    /// The version a component was built against: the one whose `tenure:plugin`
    /// interfaces it imports. A component that imports none of them (it never calls the
    /// host) is bound to the newest; its exports have the same types in both.
    pub fn of<'a>(imports: impl IntoIterator<Item = &'a str>) -> Version {
        let old = imports
            .into_iter()
            .any(|name| name.starts_with("tenure:plugin/") && name.ends_with("@0.1.0"));
        if old { Version::V0_1 } else { Version::V0_2 }
    }

    /// The version as the WIT spells it.
    pub fn name(self) -> &'static str {
        match self {
            Version::V0_1 => "0.1.0",
            Version::V0_2 => "0.2.0",
        }
    }
}

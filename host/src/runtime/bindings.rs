//! The generated bindings for the `owned-task` world: the one place `bindgen!` runs.
//!
//! `sleep` and the `state` functions are async on the host so that they can wait on a
//! timer, a stop request or (later) a replicated commit without blocking a thread; to
//! the plugin they are ordinary blocking calls. Exports are async so that a running
//! plugin yields to the executor at every epoch tick.

wasmtime::component::bindgen!({
    world: "owned-task",
    path: "../wit",
    imports: {
        "tenure:plugin/host.sleep": async,
        "tenure:plugin/state": async,
    },
    exports: { default: async },
});

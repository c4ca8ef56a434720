//! The environment capability: a manifest's `env` and `secrets` become the instance's
//! WASI environment (`std::env::var` in Rust, `os.environ` in Python, `process.env` in JS).
//!
//! The values reach the plugin and nothing else: [`Granted`] has no `Debug`, and no log
//! line, event or status field is made from it. Arguments and the working directory stay
//! empty.

use wasmtime_wasi::WasiCtxBuilder;

use super::Granted;

/// Puts the granted variables into the instance's WASI context.
pub(super) fn grant(wasi: &mut WasiCtxBuilder, granted: &Granted) {
    wasi.envs(&granted.env);
}

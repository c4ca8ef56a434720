//! `state.save` and `log`, the host calls that take a plugin's bytes, bounded before
//! anything is copied.
//!
//! The bindings `bindgen!` generates lift a `list<u8>` or a `string` into a `Vec` or a
//! `String` before the host function runs: a copy of whatever length the plugin names,
//! up to its whole linear memory. A plugin saving a 48 MiB blob (the limit is 64 KiB), or
//! logging a 48 MiB line (cut at 4 KiB, and dropped over the log budget), made the node
//! allocate 48 MiB per call to refuse it (issue 13). These two functions replace the
//! generated ones in the linker (shadowing, as `tcp.rs` does for sockets) and take the
//! arguments as [`WasmList`] and [`WasmStr`], views into the plugin's memory:
//! - `save` checks the length first and copies only a blob within the limit, then runs
//!   the same `state::Host::save` (lease check, pacing, the backend);
//! - `log` asks the log budget first, then reads (a UTF-8 string without copying it) at
//!   most [`MAX_READ`] bytes, which the log writer sanitises and cuts at a line's length.
//!
//! Saves are also paced ([`SavePace`]): each is a Raft commit on every node, so an
//! instance saves at most [`SAVES_PER_SECOND`] times a second; a faster one waits its turn.

use std::borrow::Cow;
use std::time::Duration;

use tokio::time::Instant;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, WasmList, WasmStr};

use crate::cluster::MAX_STATE_BYTES;
use wasmtime::component::{ComponentType, Lift, Lower};

use super::bindings::v0_1::tenure::plugin as v0_1;
use super::bindings::v0_2::tenure::plugin::host::Level;
use super::bindings::v0_2::tenure::plugin::state;
use super::output::{self, MAX_LINE, Stream};
use super::store::HostState;

/// The interfaces whose `save` and `log` are replaced, per served version.
const STATE_0_1: &str = "tenure:plugin/state@0.1.0";
const HOST_0_1: &str = "tenure:plugin/host@0.1.0";
const STATE_0_2: &str = "tenure:plugin/state@0.2.0";
const HOST_0_2: &str = "tenure:plugin/host@0.2.0";

/// The most of a log line read from the plugin: a line is cut at [`MAX_LINE`] bytes once
/// sanitised, and escape sequences that sanitising drops may come before that.
const MAX_READ: usize = 16 * MAX_LINE;

/// The most saves an instance makes in a second.
pub const SAVES_PER_SECOND: u32 = 20;

/// When an instance's next save may go: saves at least `1 / SAVES_PER_SECOND` apart.
#[derive(Default)]
pub(super) struct SavePace {
    next: Option<Instant>,
}

impl SavePace {
    /// Waits for this save's turn; `false` if a stop request came first.
    pub async fn turn(&mut self, signals: &super::lease::Signals) -> bool {
        let now = Instant::now();
        let at = self.next.map_or(now, |next| next.max(now));
        self.next = Some(at + Duration::from_secs(1) / SAVES_PER_SECOND);
        if at <= now {
            return true;
        }
        tokio::select! {
            biased;
            _ = signals.stopping() => false,
            _ = tokio::time::sleep_until(at) => true,
        }
    }
}

/// Replaces the generated `state.save` and `log` with the bounded ones, in every served
/// version (each with its own error and level types).
pub(super) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    linker
        .instance(STATE_0_1)?
        .func_wrap_async("save", save::<v0_1::state::Error>)?;
    linker
        .instance(HOST_0_1)?
        .func_wrap("log", log::<v0_1::host::Level>)?;
    linker
        .instance(STATE_0_2)?
        .func_wrap_async("save", save::<state::Error>)?;
    linker.instance(HOST_0_2)?.func_wrap("log", log::<Level>)?;
    linker.allow_shadowing(false);
    Ok(())
}

fn save<E>(
    mut store: StoreContextMut<'_, HostState>,
    (data,): (WasmList<u8>,),
) -> Box<dyn Future<Output = wasmtime::Result<(Result<(), E>,)>> + Send + '_>
where
    E: From<state::Error> + ComponentType + Lower + Send + Sync + 'static,
{
    Box::new(async move {
        if data.len() > MAX_STATE_BYTES {
            return Ok((Err(state::Error::TooLarge(MAX_STATE_BYTES as u32).into()),));
        }
        let bytes = data.as_le_slice(&store).to_vec();
        Ok((state::Host::save(store.data_mut(), bytes)
            .await
            .map_err(E::from),))
    })
}

fn log<L>(
    store: StoreContextMut<'_, HostState>,
    (level, message): (L, WasmStr),
) -> wasmtime::Result<()>
where
    L: Into<Level> + ComponentType + Lift + Send + Sync + 'static,
{
    let ctx = store.data().ctx.clone();
    output::emit_with(&ctx, Stream::Log, level.into(), || {
        match message.to_str(&store) {
            Ok(text) => Cow::Owned(prefix(&text, MAX_READ).to_owned()),
            Err(e) => Cow::Owned(format!("[not a valid string: {e}]")),
        }
    });
    Ok(())
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character.
fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

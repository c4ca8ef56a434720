//! Plugin output: the `log` import and the plugin's stdout/stderr, turned into host log
//! lines tagged with the plugin, resource, slot and token.
//!
//! Plugin text is untrusted. Terminal escape sequences are removed (a plugin must not be
//! able to rewrite an operator's terminal or forge log lines), other control characters
//! are dropped, and lines are cut at [`MAX_LINE`] bytes.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

use crate::events;
use crate::runtime::InstanceContext;
use crate::runtime::bindings::v0_2::tenure::plugin::host::Level;

/// Longest plugin line kept, in bytes; the rest is cut and marked.
pub const MAX_LINE: usize = 4096;

/// Which channel a plugin line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Log,
    Stdout,
    Stderr,
}

impl Stream {
    fn as_str(self) -> &'static str {
        match self {
            Stream::Log => "log",
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Writes one plugin line to the host log at `level`, within the instance's log budget.
/// Returns whether the line was written.
pub fn emit(ctx: &InstanceContext, stream: Stream, level: Level, raw: &str) -> bool {
    emit_with(ctx, stream, level, || raw.into())
}

/// [`emit`], reading the line with `raw` only if the budget admits it (a plugin's `log`
/// reads it from the plugin's memory: `guest_data.rs`).
pub fn emit_with<'a>(
    ctx: &InstanceContext,
    stream: Stream,
    level: Level,
    raw: impl FnOnce() -> std::borrow::Cow<'a, str>,
) -> bool {
    let Some(held_back) = ctx.admit_log_line() else {
        return false;
    };
    let lease = &ctx.grant;
    if held_back > 0 {
        tracing::warn!(
            event = events::PLUGIN_LOG_SUPPRESSED,
            plugin = %ctx.plugin,
            resource = %lease.resource,
            slot = lease.slot,
            token = lease.token,
            node = %lease.node,
            lines = held_back,
            "{held_back} plugin log lines over the limit of {} per second were dropped",
            crate::runtime::PLUGIN_LOG_LINES_PER_SECOND,
        );
    }
    let text = sanitize(&raw());
    macro_rules! line {
        ($lvl:ident) => {
            tracing::$lvl!(
                event = events::PLUGIN_LOG,
                plugin = %ctx.plugin,
                resource = %lease.resource,
                slot = lease.slot,
                token = lease.token,
                node = %lease.node,
                stream = stream.as_str(),
                "{text}"
            )
        };
    }
    match level {
        Level::Trace => line!(trace),
        Level::Debug => line!(debug),
        Level::Info => line!(info),
        Level::Warn => line!(warn),
        Level::Error => line!(error),
    }
    true
}

/// Removes terminal escape sequences and control characters (tab excepted), and cuts the
/// text at [`MAX_LINE`] bytes on a character boundary.
pub fn sanitize(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len().min(MAX_LINE));
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                // CSI: ESC [ parameters intermediates final-byte (0x40..=0x7e).
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC, DCS, SOS, PM, APC: a string ended by BEL or ESC \.
                Some(']' | 'P' | 'X' | '^' | '_') => {
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' {
                            break;
                        }
                        if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                            chars.next();
                            break;
                        }
                    }
                }
                // Two-character sequences (ESC c, ESC 7, ...): drop both.
                _ => {}
            },
            // C1 CSI as a single code point.
            '\u{9b}' => {
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
            '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
        if out.len() > MAX_LINE {
            let mut cut = MAX_LINE;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
            out.push_str(" [cut]");
            break;
        }
    }
    out
}

/// A plugin's stdout or stderr: complete lines go to the host log.
#[derive(Clone)]
pub struct OutputSink {
    ctx: Arc<InstanceContext>,
    stream: Stream,
}

impl OutputSink {
    pub fn new(ctx: Arc<InstanceContext>, stream: Stream) -> Self {
        Self { ctx, stream }
    }
}

impl IsTerminal for OutputSink {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for OutputSink {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(LineWriter {
            sink: self.clone(),
            pending: Vec::new(),
        })
    }
}

/// Buffers bytes until a newline (or [`MAX_LINE`] bytes), then logs the line.
struct LineWriter {
    sink: OutputSink,
    pending: Vec<u8>,
}

impl LineWriter {
    fn flush_line(&mut self) {
        let text = String::from_utf8_lossy(&self.pending);
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        if text.trim().is_empty() {
            // Blank lines (Rust's panic output starts with one) carry nothing.
            self.pending.clear();
            return;
        }
        let level = match self.sink.stream {
            Stream::Stderr => Level::Warn,
            _ => Level::Info,
        };
        emit(&self.sink.ctx, self.sink.stream, level, text);
        self.pending.clear();
    }
}

impl AsyncWrite for LineWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        for &byte in buf {
            this.pending.push(byte);
            if byte == b'\n' || this.pending.len() >= MAX_LINE {
                this.flush_line();
            }
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.pending.is_empty() {
            this.flush_line();
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            self.flush_line();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_csi_and_osc() {
        assert_eq!(
            sanitize("\u{1b}[31mred\u{1b}[0m text\u{1b}]0;title\u{7} end"),
            "red text end"
        );
        assert_eq!(
            sanitize("a\u{1b}]8;;http://x\u{1b}\\link\u{1b}]8;;\u{1b}\\b"),
            "alinkb"
        );
    }

    #[test]
    fn drops_control_characters_but_keeps_tabs_and_text() {
        assert_eq!(sanitize("a\tb\rc\u{7}d\u{0}e"), "a\tbcde");
        assert_eq!(sanitize("héllo ✓"), "héllo ✓");
        assert_eq!(sanitize("\u{9b}2Jclear"), "clear");
    }

    #[test]
    fn cuts_long_lines_on_a_char_boundary() {
        let long = "é".repeat(MAX_LINE);
        let cut = sanitize(&long);
        assert!(cut.len() <= MAX_LINE + " [cut]".len());
        assert!(cut.ends_with(" [cut]"));
    }

    #[test]
    fn a_flooding_instance_is_held_to_its_log_budget() {
        let lease = std::sync::Arc::new(crate::runtime::NodeLease::new(true));
        let ctx = crate::runtime::tests::context(lease);
        let written = (0..5_000)
            .filter(|i| emit(&ctx, Stream::Log, Level::Info, &format!("line {i}")))
            .count();
        // The loop takes far less than a second, so exactly one second's budget goes out.
        assert_eq!(
            written,
            crate::runtime::PLUGIN_LOG_LINES_PER_SECOND as usize
        );
    }

    #[test]
    fn an_unterminated_sequence_swallows_only_itself() {
        assert_eq!(sanitize("ok\u{1b}[31"), "ok");
        assert_eq!(sanitize("ok\u{1b}"), "ok");
    }
}

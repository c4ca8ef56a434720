//! The node's log on stdout: text for people or JSON lines for the event log, filtered by
//! `RUST_LOG` (default: INFO, with wasmtime's, cranelift's and openraft's chatter cut by
//! target, see `raft::LOG_FILTER`).
//!
//! One filter knows more than targets and levels: once a shutdown signal has arrived
//! ([`stopping`]), openraft's ERROR and WARN lines that report its own core as stopped
//! (`core_result=Err(Stopped)`, `error=Stopped`: a Raft call or a peer's AppendEntries
//! that reached the core after `Raft::shutdown`) are dropped. They are what a clean stop
//! looks like from inside openraft, not errors; said at ERROR they made every SIGTERM of
//! a follower look like a failure now and then (4 such lines in 25 stops). Before the
//! signal, and for any other cause (a storage error, a panic: `Fatal::StorageError`,
//! `Fatal::Panicked`), openraft's lines pass as before, and a node that stops on its own
//! (`node.failed`, a removed member) never marks itself stopping here.
//!
//! What it does not do: rewrite a line's level (tracing has no such hook; a line is kept
//! or dropped), or look at lines of any other crate.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, fmt as tfmt};

use super::LogFormat;

/// Set once the process received its shutdown signal: see [`stopping`].
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Says that a clean stop began (the first SIGTERM or SIGINT): from now on openraft's
/// reports of its stopped core are dropped from the log.
pub fn stopping() {
    STOPPING.store(true, Ordering::Relaxed);
}

/// Sets up logging to stdout: text for people, JSON lines for the event log.
/// `RUST_LOG` refines the default filter.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(format!(
            "info,wasmtime=warn,cranelift=warn,wasmtime_wasi=warn,{}",
            crate::raft::LOG_FILTER
        ))
    });
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(ShutdownNoise {
            stopping: &STOPPING,
        });
    match format {
        // Colours only on a terminal: a log piped to a file or a journal gets plain text.
        LogFormat::Text => {
            use std::io::IsTerminal as _;
            let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            registry
                .with(
                    tfmt::layer()
                        .with_writer(|| OneLine(std::io::stdout()))
                        .with_target(false)
                        .with_ansi(colour),
                )
                .init()
        }
        LogFormat::Json => registry
            .with(
                tfmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false)
                    .with_target(false)
                    .with_writer(std::io::stdout),
            )
            .init(),
    }
}

/// Drops openraft's reports of its stopped core once `stopping` is set (module doc).
struct ShutdownNoise {
    stopping: &'static AtomicBool,
}

impl<S: Subscriber> Layer<S> for ShutdownNoise {
    fn event_enabled(&self, event: &Event<'_>, _: Context<'_, S>) -> bool {
        !(self.stopping.load(Ordering::Relaxed) && reports_core_stopped(event))
    }
}

/// Whether `event` is openraft's, at WARN or ERROR, with a field whose value is the
/// `Fatal::Stopped` of a core that was shut down (`Stopped`, or `Err(Stopped)` for the
/// core task's result).
fn reports_core_stopped(event: &Event<'_>) -> bool {
    let meta = event.metadata();
    let openraft = meta.target() == "openraft" || meta.target().starts_with("openraft::");
    if !openraft || *meta.level() > Level::WARN {
        return false;
    }
    let mut visitor = StoppedField(false);
    event.record(&mut visitor);
    visitor.0
}

/// Finds a field whose Debug text is exactly `Stopped` or `Err(Stopped)`.
struct StoppedField(bool);

impl Visit for StoppedField {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" || self.0 {
            return;
        }
        let text = format!("{value:?}");
        self.0 = text == "Stopped" || text == "Err(Stopped)";
    }
}

/// A text log line as written: one event, one line. Field values hold text from peers,
/// configs and manifests (names, labels, addresses, error messages); tracing-subscriber
/// already shows ESC, BEL and the C1 controls in them escaped, and this writer escapes
/// what it leaves (CR, a LF before the line's end, the other C0 controls), so no value
/// can forge a log line. ESC itself passes: here it can only be the formatter's colours.
/// Each event reaches `write` whole (the formatter writes one buffer per event), so the
/// last LF of a write is the line's end.
struct OneLine<W>(W);

impl<W: std::io::Write> std::io::Write for OneLine<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut out = Vec::with_capacity(buf.len() + 8);
        for (i, &b) in buf.iter().enumerate() {
            match b {
                b'\n' if i + 1 == buf.len() => out.push(b),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' | 0x1b => out.push(b),
                0..0x20 => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                _ => out.push(b),
            }
        }
        self.0.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn a_text_log_line_cannot_be_split_or_rewritten_by_its_values() {
        let mut line = OneLine(Vec::new());
        line.write_all(b"WARN label=a\r\nFORGED ERROR x\x01 \x1b[1mbold\x1b[0m\n")
            .unwrap();
        assert_eq!(
            String::from_utf8(line.0).unwrap(),
            "WARN label=a\\r\\nFORGED ERROR x\\x01 \x1b[1mbold\x1b[0m\n"
        );
    }

    /// The messages of the events that reach a layer behind [`ShutdownNoise`].
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<String>>>);

    impl<S: Subscriber> Layer<S> for Seen {
        fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
            struct Message(String);
            impl Visit for Message {
                fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
                    if field.name() == "message" {
                        self.0 = format!("{value:?}");
                    }
                }
            }
            let mut message = Message(String::new());
            event.record(&mut message);
            self.0.lock().unwrap().push(message.0);
        }
    }

    /// The lines openraft 0.9.25 writes when a call reaches its stopped core, one line
    /// about a storage failure, and one of Tenure's own errors.
    fn log_the_lines() {
        #[derive(Debug)]
        #[allow(dead_code, reason = "only the Debug text is logged")]
        enum Fatal {
            Stopped,
            StorageError(&'static str),
        }
        let stopped: Result<(), Fatal> = Err(Fatal::Stopped);
        tracing::error!(
            target: "openraft::raft::raft_inner",
            core_result = ?stopped,
            "failure sending RaftMsg to RaftCore; message: AppendEntries"
        );
        tracing::error!(target: "openraft::raft::raft_inner", error = ?Fatal::Stopped, "core_call fatal error");
        let broken: Result<(), Fatal> = Err(Fatal::StorageError("disk full"));
        tracing::error!(
            target: "openraft::raft::raft_inner",
            core_result = ?broken,
            "failure receiving rx from RaftCore"
        );
        tracing::error!(error = ?Fatal::Stopped, "ours");
    }

    #[test]
    fn openraft_reports_of_its_stopped_core_are_dropped_only_once_stopping() {
        static FLAG: AtomicBool = AtomicBool::new(false);
        let seen = Seen::default();
        let subscriber = tracing_subscriber::registry()
            .with(ShutdownNoise { stopping: &FLAG })
            .with(seen.clone());
        tracing::subscriber::with_default(subscriber, || {
            log_the_lines();
            FLAG.store(true, Ordering::Relaxed);
            log_the_lines();
        });
        let seen = seen.0.lock().unwrap().clone();
        let (before, after) = seen.split_at(4);
        assert_eq!(
            before,
            [
                "failure sending RaftMsg to RaftCore; message: AppendEntries",
                "core_call fatal error",
                "failure receiving rx from RaftCore",
                "ours"
            ],
            "everything passes before the stop"
        );
        assert_eq!(
            after,
            ["failure receiving rx from RaftCore", "ours"],
            "a storage failure and Tenure's own lines pass while stopping"
        );
    }
}

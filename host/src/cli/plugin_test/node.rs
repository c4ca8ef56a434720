//! One node of the test cluster: a `tenure run --config FILE --log-format json` child of
//! this process, and what it wrote.
//!
//! Two reader threads take its stdout (one JSON event per line) and stderr; a step waits
//! on a condition over the events with a bound, woken by every new line, and fails at
//! once if the node exits meanwhile. The child is killed when the [`Node`] is dropped,
//! and by the kernel if this process dies first (`PR_SET_PDEATHSIG`), so no test leaves
//! a node running.

use std::io::{BufRead as _, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How many of a node's last lines a failure shows.
pub const TAIL_LINES: usize = 25;

/// A node and its current process, if it runs.
pub struct Node {
    pub name: String,
    pub addr: String,
    config: PathBuf,
    child: Option<Child>,
    log: Arc<Log>,
}

/// What every run of the node wrote.
#[derive(Default)]
struct Log {
    state: Mutex<Lines>,
    changed: Condvar,
}

#[derive(Default)]
struct Lines {
    /// Every line, stdout and stderr, for the tail of a failure.
    text: Vec<String>,
    /// The stdout lines that are JSON objects, every run's, in order.
    events: Vec<Value>,
    /// How many of the current run's stdout and stderr are still open.
    open: usize,
}

/// Why a wait ended without its condition.
#[derive(Debug)]
pub enum WaitError {
    /// The bound passed.
    Timeout(Duration),
    /// The node's process ended.
    Exited,
}

impl std::fmt::Display for WaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitError::Timeout(bound) => write!(f, "not within {bound:?}"),
            WaitError::Exited => write!(f, "the node exited"),
        }
    }
}

impl Node {
    pub fn new(name: &str, addr: &str, config: PathBuf) -> Node {
        Node {
            name: name.to_string(),
            addr: addr.to_string(),
            config,
            child: None,
            log: Arc::default(),
        }
    }

    /// Spawns `exe run` on the node's config.
    pub fn spawn(&mut self, exe: &std::path::Path) -> anyhow::Result<()> {
        let mut command = Command::new(exe);
        command
            .args(["run", "--log-format", "json", "--config"])
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The node reads TENURE_* (they override its config file) and RUST_LOG (a filter
        // could hide the plugin's lines): the developer's shell must not change the test.
        for (key, _) in std::env::vars_os() {
            let text = key.to_string_lossy();
            if text.starts_with("TENURE_") || text == "RUST_LOG" {
                command.env_remove(&key);
            }
        }
        die_with_parent(&mut command);
        let mut child = command
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot run {} run: {e}", exe.display()))?;
        self.log.state.lock().unwrap().open = 2;
        read(self.log.clone(), child.stdout.take().unwrap(), true);
        read(self.log.clone(), child.stderr.take().unwrap(), false);
        self.child = Some(child);
        Ok(())
    }

    /// Whether the node's process runs (spawned and not killed by the test).
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Sends `signal` to the node's process (SIGSTOP and SIGCONT freeze it and let it go
    /// on); false if it does not run.
    pub fn signal(&self, signal: libc::c_int) -> bool {
        let Some(child) = &self.child else {
            return false;
        };
        // SAFETY: kill(2) on the pid of a child this process spawned and has not reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, signal) == 0 }
    }

    /// Kills the node (SIGKILL) and waits until it is gone and its output read.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            let mut state = self.log.state.lock().unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            while state.open > 0 && Instant::now() < deadline {
                state = self
                    .log
                    .changed
                    .wait_timeout(state, Duration::from_millis(50))
                    .unwrap()
                    .0;
            }
        }
    }

    /// How many events the node wrote so far (every run).
    pub fn len(&self) -> usize {
        self.log.state.lock().unwrap().events.len()
    }

    /// The events from index `from` on.
    pub fn events_from(&self, from: usize) -> Vec<Value> {
        let state = self.log.state.lock().unwrap();
        state.events.get(from..).unwrap_or_default().to_vec()
    }

    /// Waits until `found` returns something for the events from index `from` on (given
    /// with their indexes), for at most `bound`.
    pub fn wait<T>(
        &self,
        from: usize,
        bound: Duration,
        mut found: impl FnMut(&[Value], usize) -> Option<T>,
    ) -> Result<T, WaitError> {
        let deadline = Instant::now() + bound;
        let mut state = self.log.state.lock().unwrap();
        loop {
            if let Some(events) = state.events.get(from..)
                && let Some(value) = found(events, from)
            {
                return Ok(value);
            }
            if state.open == 0 {
                return Err(WaitError::Exited);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(WaitError::Timeout(bound));
            }
            state = self
                .log
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap()
                .0;
        }
    }

    /// The node's last lines, each event shortened to its time, name, message and the
    /// fields that say which start it is about.
    pub fn tail(&self) -> String {
        let state = self.log.state.lock().unwrap();
        let start = state.text.len().saturating_sub(TAIL_LINES);
        let mut out = String::new();
        for line in &state.text[start..] {
            out.push_str("  ");
            out.push_str(&short(line));
            out.push('\n');
        }
        if out.is_empty() {
            out.push_str("  (no output)\n");
        }
        out
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A log line for people: a JSON event as `TIME LEVEL EVENT key=value … MESSAGE`, any
/// other line as it is.
fn short(line: &str) -> String {
    let Ok(Value::Object(event)) = serde_json::from_str::<Value>(line) else {
        return line.to_string();
    };
    let text = |key: &str| match event.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let time = text("timestamp");
    // 2026-11-27T12:03:04.123456Z → 12:03:04.123
    let time = time.get(11..23).unwrap_or(&time);
    let mut out = format!("{time} {:5} {}", text("level"), text("event"));
    for key in ["resource", "slot", "token", "reason", "outcome", "error"] {
        if event.contains_key(key) {
            out.push_str(&format!(" {key}={}", text(key)));
        }
    }
    out.push_str(&format!(" {:?}", text("message")));
    out
}

fn read(log: Arc<Log>, source: impl Read + Send + 'static, stdout: bool) {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(source);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let line = String::from_utf8_lossy(&buf)
                .trim_end_matches(['\n', '\r'])
                .to_string();
            let event = stdout
                .then(|| serde_json::from_str::<Value>(&line).ok())
                .flatten()
                .filter(Value::is_object);
            let mut state = log.state.lock().unwrap();
            state.text.push(line);
            state.events.extend(event);
            drop(state);
            log.changed.notify_all();
        }
        log.state.lock().unwrap().open -= 1;
        log.changed.notify_all();
    });
}

/// Has the kernel kill the child when the thread that spawned it ends.
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl,
    // which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

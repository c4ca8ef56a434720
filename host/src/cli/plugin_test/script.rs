//! The test script of `tenure plugin test`: a TOML file naming the plugin and the steps
//! to run on the local cluster, in order.
//!
//! ```toml
//! plugin = "my-task.wasm"   # beside this file; its manifest is the .toml beside it
//! ttl = "2s"                # the nodes' lease TTL
//!
//! [[step]]
//! do = "start"
//!
//! [[step]]
//! do = "wait-log"
//! line = "tick {n} token={token}"
//! ```
//!
//! Each step is a table with `do` naming what it does, and a `within` bound for the
//! steps that wait. The script is checked whole before anything runs (unknown keys, bad
//! durations, a step before `start`), so a typo costs no cluster start.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use super::pattern::Pattern;

/// The cleanup reasons of the WIT's `cleanup-reason`, as the event log names them.
pub const REASONS: [&str; 7] = [
    "moved",
    "lease-lost",
    "shutdown",
    "plugin-updated",
    "plugin-removed",
    "released",
    "failed",
];

/// A checked script.
#[derive(Debug)]
pub struct Script {
    /// The script's dir.
    pub dir: PathBuf,
    /// The plugin's wasm, resolved against the script's dir.
    pub wasm: PathBuf,
    /// The command that builds the plugin, run by `--watch` in the script's dir.
    pub build: Option<String>,
    /// The nodes' lease TTL.
    pub ttl: Duration,
    /// Where the recording HTTP server listens (`record_http`), if the script has one.
    pub record_http: Option<std::net::SocketAddr>,
    pub steps: Vec<Step>,
}

/// One step, with its bound where it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Starts both nodes with the plugin installed, waits until they formed the cluster
    /// and the plugin started on one of them.
    Start { within: Duration },
    /// Waits until the plugin's current start logs a line containing `line`.
    WaitLog { line: Pattern, within: Duration },
    /// Moves the slot to the other node (the admin `move`), and waits until it starts
    /// there.
    Handover { within: Duration },
    /// Kills the owner (SIGKILL) and waits until the plugin starts on the other node.
    CrashOwner { within: Duration },
    /// Starts the crashed nodes again on their data and waits until they are ready.
    Restart { within: Duration },
    /// Freezes the owner (SIGSTOP) until the plugin starts on the other node, then lets
    /// it go on (SIGCONT): its lease ran out while it was alive, and its plugin stops
    /// with `lease-lost` once it runs again.
    LoseLease { within: Duration },
    /// Puts `manifest` (a file beside the script) in place of the plugin's manifest on
    /// both plugin nodes, and waits until the plugin starts again with a higher token: a
    /// manifest change is a new version, handed over like a new wasm.
    ChangeManifest { manifest: PathBuf, within: Duration },
    /// The recording HTTP server (`record_http`) got a request of the current start, and
    /// what it got so far is fenced: every request carries a `tenure-token`, and none of
    /// an owner arrived after a newer owner's start began.
    ExpectRequests { within: Duration },
    /// The start before the current one had `count` cleanups (one, by default), each
    /// with `reason` and outcome ok (`reason` is empty when `count` is 0).
    ExpectCleanup {
        reason: String,
        count: u32,
        within: Duration,
    },
    /// Every start of the plugin had a higher fencing token than the one before.
    ExpectTokensIncrease,
    /// The number the current start logs first in a line matching `first` is at least
    /// the one the previous start logged last in a line matching `last`.
    ExpectStateCarried { last: Pattern, first: Pattern },
}

impl Step {
    /// The step's name as the script spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Step::Start { .. } => "start",
            Step::WaitLog { .. } => "wait-log",
            Step::Handover { .. } => "handover",
            Step::CrashOwner { .. } => "crash-owner",
            Step::Restart { .. } => "restart",
            Step::LoseLease { .. } => "lose-lease",
            Step::ChangeManifest { .. } => "change-manifest",
            Step::ExpectRequests { .. } => "expect-requests",
            Step::ExpectCleanup { .. } => "expect-cleanup",
            Step::ExpectTokensIncrease => "expect-tokens-increase",
            Step::ExpectStateCarried { .. } => "expect-state-carried",
        }
    }

    /// The step as a line of the report: its name and its arguments.
    pub fn describe(&self) -> String {
        match self {
            Step::WaitLog { line, .. } => format!("wait-log {line}"),
            Step::ChangeManifest { manifest, .. } => {
                format!("change-manifest {}", manifest.display())
            }
            Step::ExpectCleanup { count: 0, .. } => "expect-cleanup count=0".to_string(),
            Step::ExpectCleanup { reason, count, .. } => {
                format!("expect-cleanup reason={reason} count={count}")
            }
            Step::ExpectStateCarried { last, first } => {
                format!("expect-state-carried last={last} first={first}")
            }
            other => other.name().to_string(),
        }
    }
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    plugin: PathBuf,
    #[serde(default)]
    build: Option<String>,
    #[serde(default)]
    ttl: Option<String>,
    #[serde(default)]
    record_http: Option<std::net::SocketAddr>,
    #[serde(default)]
    step: Vec<RawStep>,
}

#[derive(Deserialize)]
#[serde(tag = "do", rename_all = "kebab-case", deny_unknown_fields)]
enum RawStep {
    Start {
        within: Option<String>,
    },
    WaitLog {
        line: String,
        within: Option<String>,
    },
    Handover {
        within: Option<String>,
    },
    CrashOwner {
        within: Option<String>,
    },
    Restart {
        within: Option<String>,
    },
    LoseLease {
        within: Option<String>,
    },
    ChangeManifest {
        manifest: PathBuf,
        within: Option<String>,
    },
    ExpectRequests {
        within: Option<String>,
    },
    ExpectCleanup {
        reason: Option<String>,
        count: Option<u32>,
        within: Option<String>,
    },
    ExpectTokensIncrease {},
    ExpectStateCarried {
        last: String,
        first: String,
    },
}

/// The default lease TTL: short, so a crash moves the slot in seconds.
const DEFAULT_TTL: Duration = Duration::from_secs(2);
/// The bound of a start: both nodes compile the plugin (a Python or JavaScript component
/// takes seconds alone, far more beside a build on a small machine).
const START_WITHIN: Duration = Duration::from_secs(180);
/// The bound of every other waiting step.
const WAIT_WITHIN: Duration = Duration::from_secs(30);

/// Reads and checks the script at `path`.
pub fn load(path: &Path) -> anyhow::Result<Script> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the test script {}", path.display()))?;
    // `test.toml`'s parent is "", which is no dir to run a build in.
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    parse(&text, dir).with_context(|| format!("the test script {}", path.display()))
}

/// Parses a script's text; relative paths are taken from `dir`.
pub fn parse(text: &str, dir: &Path) -> anyhow::Result<Script> {
    let file: File = toml::from_str(text)?;
    let ttl = match &file.ttl {
        Some(text) => duration("ttl", text)?,
        None => DEFAULT_TTL,
    };
    if file.step.is_empty() {
        bail!("no steps: add [[step]] tables, the first one `do = \"start\"`");
    }
    let mut steps = Vec::new();
    for (i, raw) in file.step.into_iter().enumerate() {
        let step = step(raw, dir).with_context(|| format!("step {}", i + 1))?;
        let first = i == 0;
        if first != matches!(step, Step::Start { .. }) {
            bail!(
                "step {}: `start` must be the first step, and only the first",
                i + 1
            );
        }
        if file.record_http.is_some_and(|a| a.port() == 0) {
            bail!("record_http: give a port (the plugin's manifest must grant it)");
        }
        if matches!(step, Step::ExpectRequests { .. }) && file.record_http.is_none() {
            bail!(
                "step {}: expect-requests needs a recording server: add record_http = \
                 \"127.0.0.1:PORT\" to the script, and grant http://127.0.0.1:PORT in the \
                 plugin's manifest",
                i + 1
            );
        }
        steps.push(step);
    }
    Ok(Script {
        dir: dir.to_path_buf(),
        wasm: dir.join(file.plugin),
        build: file.build,
        ttl,
        record_http: file.record_http,
        steps,
    })
}

fn step(raw: RawStep, dir: &Path) -> anyhow::Result<Step> {
    let within = |text: Option<String>, default| match text {
        Some(text) => duration("within", &text),
        None => Ok(default),
    };
    Ok(match raw {
        RawStep::Start { within: w } => Step::Start {
            within: within(w, START_WITHIN)?,
        },
        RawStep::WaitLog { line, within: w } => Step::WaitLog {
            line: Pattern::parse(&line)?,
            within: within(w, WAIT_WITHIN)?,
        },
        RawStep::Handover { within: w } => Step::Handover {
            within: within(w, WAIT_WITHIN)?,
        },
        RawStep::CrashOwner { within: w } => Step::CrashOwner {
            within: within(w, WAIT_WITHIN)?,
        },
        RawStep::Restart { within: w } => Step::Restart {
            within: within(w, START_WITHIN)?,
        },
        RawStep::ExpectRequests { within: w } => Step::ExpectRequests {
            within: within(w, WAIT_WITHIN)?,
        },
        RawStep::LoseLease { within: w } => Step::LoseLease {
            within: within(w, WAIT_WITHIN)?,
        },
        // Read when the step runs: a build between rounds of `--watch` may rewrite it.
        RawStep::ChangeManifest {
            manifest,
            within: w,
        } => Step::ChangeManifest {
            manifest: dir.join(manifest),
            // A new version is compiled (from the cache: the wasm did not change).
            within: within(w, START_WITHIN)?,
        },
        RawStep::ExpectCleanup {
            reason,
            count,
            within: w,
        } => {
            let count = count.unwrap_or(1);
            match &reason {
                None if count > 0 => bail!("expect-cleanup needs a `reason` (or count = 0)"),
                Some(reason) if !REASONS.contains(&reason.as_str()) => bail!(
                    "reason {reason:?} is not a cleanup reason: one of {}",
                    REASONS.join(", ")
                ),
                _ => {}
            }
            Step::ExpectCleanup {
                reason: reason.unwrap_or_default(),
                count,
                within: within(w, WAIT_WITHIN)?,
            }
        }
        RawStep::ExpectTokensIncrease {} => Step::ExpectTokensIncrease,
        RawStep::ExpectStateCarried { last, first } => {
            let (last, first) = (Pattern::parse(&last)?, Pattern::parse(&first)?);
            if !last.captures() || !first.captures() {
                bail!("`last` and `first` each need a {{n}}: the number compared");
            }
            Step::ExpectStateCarried { last, first }
        }
    })
}

fn duration(key: &str, text: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(text)
        .with_context(|| format!("{key} = {text:?} is not a duration (e.g. \"2s\", \"500ms\")"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = r#"
plugin = "t.wasm"
build = "./build.sh"
ttl = "3s"

[[step]]
do = "start"

[[step]]
do = "wait-log"
line = "tick {n} token={token}"
within = "5s"

[[step]]
do = "handover"

[[step]]
do = "expect-cleanup"
reason = "moved"

[[step]]
do = "crash-owner"

[[step]]
do = "expect-cleanup"
count = 0

[[step]]
do = "restart"

[[step]]
do = "expect-tokens-increase"

[[step]]
do = "expect-state-carried"
last = "tick {n} "
first = "count={n}"
"#;

    #[test]
    fn a_script_reads_with_its_defaults() {
        let script = parse(SCRIPT, Path::new("/p")).unwrap();
        assert_eq!(script.wasm, Path::new("/p/t.wasm"));
        assert_eq!(script.ttl, Duration::from_secs(3));
        assert_eq!(script.build.as_deref(), Some("./build.sh"));
        let names: Vec<&str> = script.steps.iter().map(Step::name).collect();
        assert_eq!(
            names,
            [
                "start",
                "wait-log",
                "handover",
                "expect-cleanup",
                "crash-owner",
                "expect-cleanup",
                "restart",
                "expect-tokens-increase",
                "expect-state-carried"
            ]
        );
        assert_eq!(
            script.steps[0],
            Step::Start {
                within: START_WITHIN
            }
        );
        assert!(matches!(
            script.steps[1],
            Step::WaitLog { within, .. } if within == Duration::from_secs(5)
        ));
        assert!(matches!(
            &script.steps[5],
            Step::ExpectCleanup { count: 0, .. }
        ));
    }

    #[test]
    fn the_templates_script_reads() {
        let text = crate::template::TEST_SCRIPT.replace("{{name}}", "my-task");
        let script = parse(&text, Path::new("/p")).unwrap();
        assert_eq!(script.wasm, Path::new("/p/my-task.wasm"));
        assert_eq!(script.steps.len(), 18);
        assert!(
            script
                .steps
                .iter()
                .any(|s| matches!(s, Step::LoseLease { .. }))
        );
        assert!(script.steps.iter().any(|s| matches!(
            s,
            Step::ChangeManifest { manifest, .. } if manifest == Path::new("/p/faster.toml")
        )));
    }

    fn error(text: &str) -> String {
        format!("{:#}", parse(text, Path::new(".")).unwrap_err())
    }

    #[test]
    fn a_bad_script_says_what_and_where() {
        let start = "plugin = \"t.wasm\"\n[[step]]\ndo = \"start\"\n";
        let err = error(&format!("{start}[[step]]\ndo = \"hand-over\"\n"));
        assert!(err.contains("hand-over") && err.contains("line 5"), "{err}");
        let err = error(&format!(
            "{start}[[step]]\ndo = \"wait-log\"\ntext = \"x\"\n"
        ));
        assert!(err.contains("text"), "{err}");
        let err = error(&format!(
            "{start}[[step]]\ndo = \"handover\"\nwithin = \"soon\"\n"
        ));
        assert!(err.contains("step 2") && err.contains("\"soon\""), "{err}");
        let err = error(&format!(
            "{start}[[step]]\ndo = \"expect-cleanup\"\nreason = \"stopped\"\n"
        ));
        assert!(err.contains("one of moved, lease-lost"), "{err}");
        let err = error("plugin = \"t.wasm\"\n[[step]]\ndo = \"handover\"\n");
        assert!(err.contains("step 1: `start` must be the first"), "{err}");
        let err = error(&format!("{start}[[step]]\ndo = \"start\"\n"));
        assert!(err.contains("step 2: `start` must be the first"), "{err}");
        let err = error(&format!("{start}[[step]]\ndo = \"expect-cleanup\"\n"));
        assert!(err.contains("needs a `reason`"), "{err}");
        let err = error("plugin = \"t.wasm\"\n");
        assert!(err.contains("no steps"), "{err}");
        let err = error(&format!(
            "{start}[[step]]\ndo = \"expect-state-carried\"\nlast = \"a\"\nfirst = \"b {{n}}\"\n"
        ));
        assert!(err.contains("need a {n}"), "{err}");
    }
}

//! Plugin manifests: `plugins/<name>.toml`, every key optional, unknown keys refused.
//!
//! ```toml
//! resource = "billing-sync"   # default: the file stem
//! tickets  = 1
//! version  = "1.4.0"
//! state    = "shared"         # or "per-slot": one state blob per ticket
//! [limits]
//! memory          = "64MiB"
//! stop_grace      = "500ms"
//! cleanup_timeout = "5s"
//! max_restarts    = 3
//! restart_window  = "5m"
//! [placement]
//! require = { zone = "a" }
//! [capabilities]              # see capabilities.rs; nothing is granted unless listed
//! allowed_outbound_hosts = ["https://api.example.com"]
//! env     = { TARGET_URL = "https://api.example.com/v1/sync" }
//! secrets = { API_TOKEN = "secrets/api-token" }
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::capabilities::{Capabilities, RawCapabilities};

/// A plugin's resolved manifest: defaults filled in, values checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The resource the plugin owns.
    pub resource: String,
    /// How many nodes may own the resource at once.
    pub tickets: u32,
    pub version: semver::Version,
    pub limits: Limits,
    /// Labels a node must carry to own the resource.
    pub require: BTreeMap<String, String>,
    /// What the plugin may reach beyond its lease, state and log.
    pub capabilities: Capabilities,
    /// Whether the slots share one state blob or each has its own.
    pub state: StateScope,
}

/// What a plugin's `state` import loads and saves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StateScope {
    /// One blob per resource: every slot loads what any slot saved last (`state =
    /// "shared"`, the default: a single-ticket resource needs no more).
    #[default]
    Shared,
    /// One blob per slot (`state = "per-slot"`): each ticket keeps its own checkpoint,
    /// which the next owner of that slot loads. Needs cluster version
    /// [`crate::version::SLOT_STATE`]: a node advertises such a plugin only from then on.
    PerSlot,
}

/// Per-instance limits and restart policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Cap on the instance's linear memory, in bytes.
    pub memory: u64,
    /// Time between the stop request and the interrupt.
    pub stop_grace: Duration,
    /// Budget for `cleanup`.
    pub cleanup_timeout: Duration,
    /// Failed starts tolerated within `restart_window` before the plugin is failed.
    pub max_restarts: u32,
    pub restart_window: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory: 64 << 20,
            stop_grace: Duration::from_millis(500),
            cleanup_timeout: Duration::from_secs(5),
            max_restarts: 3,
            restart_window: Duration::from_secs(300),
        }
    }
}

impl Manifest {
    /// The manifest of a plugin that has no `.toml`.
    pub fn defaults(stem: &str) -> Self {
        Self {
            resource: stem.to_string(),
            tickets: 1,
            version: semver::Version::new(0, 0, 0),
            limits: Limits::default(),
            require: BTreeMap::new(),
            capabilities: Capabilities::default(),
            state: StateScope::Shared,
        }
    }

    /// Parses and checks a manifest; errors say which key is wrong and why.
    pub fn parse(stem: &str, text: &str) -> Result<Self, String> {
        let raw: RawManifest = toml::from_str(text).map_err(|e| one_line(&e, text))?;
        let mut manifest = Self::defaults(stem);
        if let Some(resource) = raw.resource {
            manifest.resource = resource;
        }
        check_resource_name(&manifest.resource)?;
        if let Some(tickets) = raw.tickets {
            if !(1..=MAX_TICKETS).contains(&tickets) {
                return Err(format!(
                    "tickets: {tickets} is out of range 1..={MAX_TICKETS}"
                ));
            }
            manifest.tickets = tickets;
        }
        if let Some(version) = raw.version {
            manifest.version = semver::Version::parse(&version)
                .map_err(|e| format!("version: {version:?} is not a semantic version: {e}"))?;
        }
        let limits = &mut manifest.limits;
        if let Some(memory) = raw.limits.memory {
            limits.memory = parse_size(&memory).map_err(|e| format!("limits.memory: {e}"))?;
            if !(MIN_MEMORY..=MAX_MEMORY).contains(&limits.memory) {
                return Err(format!(
                    "limits.memory: {memory} is out of range 1MiB..=4GiB"
                ));
            }
        }
        if let Some(grace) = raw.limits.stop_grace {
            limits.stop_grace = duration("limits.stop_grace", &grace, MAX_TIMEOUT)?;
        }
        if let Some(timeout) = raw.limits.cleanup_timeout {
            limits.cleanup_timeout = duration("limits.cleanup_timeout", &timeout, MAX_TIMEOUT)?;
        }
        if let Some(restarts) = raw.limits.max_restarts {
            limits.max_restarts = restarts;
        }
        if let Some(window) = raw.limits.restart_window {
            limits.restart_window = duration("limits.restart_window", &window, MAX_WINDOW)?;
            if limits.restart_window.is_zero() {
                return Err("limits.restart_window: must be longer than zero".into());
            }
        }
        manifest.state = match raw.state.as_deref() {
            None | Some("shared") => StateScope::Shared,
            Some("per-slot") => StateScope::PerSlot,
            Some(other) => {
                return Err(format!(
                    "state: {other:?} is neither \"shared\" (one blob per resource, the \
                     default) nor \"per-slot\" (one blob per ticket)"
                ));
            }
        };
        manifest.require = raw.placement.require;
        manifest.capabilities = Capabilities::parse(raw.capabilities)?;
        Ok(manifest)
    }
}

const MAX_TICKETS: u32 = 1_000;
const MIN_MEMORY: u64 = 1 << 20;
const MAX_MEMORY: u64 = 4 << 30;
const MAX_TIMEOUT: Duration = Duration::from_secs(600);
const MAX_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    resource: Option<String>,
    tickets: Option<u32>,
    version: Option<String>,
    state: Option<String>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    placement: RawPlacement,
    #[serde(default)]
    capabilities: RawCapabilities,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory: Option<String>,
    stop_grace: Option<String>,
    cleanup_timeout: Option<String>,
    max_restarts: Option<u32>,
    restart_window: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlacement {
    #[serde(default)]
    require: BTreeMap<String, String>,
}

/// Resource names appear in commands (`tenure move RESOURCE/SLOT`) and logs: keep them
/// to a plain, printable alphabet.
pub fn check_resource_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "resource: {name:?} must be 1 to 128 characters of A-Z, a-z, 0-9, '-', '_' or '.'"
        ))
    }
}

/// Parses a duration such as `500ms`, `5s`, `2m`, at most `max`.
pub fn duration(key: &str, text: &str, max: Duration) -> Result<Duration, String> {
    let value = humantime::parse_duration(text).map_err(|e| {
        format!("{key}: {text:?} is not a duration ({e}); write e.g. \"500ms\" or \"5s\"")
    })?;
    if value > max {
        return Err(format!(
            "{key}: {text} is longer than the maximum {}",
            humantime::format_duration(max)
        ));
    }
    Ok(value)
}

/// Parses a byte size: a whole number with an optional unit B, KiB, MiB, GiB (powers of
/// 1024) or KB, MB, GB (powers of 1000).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size; write e.g. \"64MiB\""))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => {
            return Err(format!(
                "{text:?} has an unknown unit {other:?}; use B, KiB, MiB, GiB, KB, MB or GB"
            ));
        }
    };
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// A TOML error on one line: where (line and column) and what. toml's own text draws the
/// line with a caret under it over several lines, which a log line shows as literal `\n`s.
fn one_line(e: &toml::de::Error, text: &str) -> String {
    let what = e.message().trim().replace('\n', "; ");
    let Some(span) = e.span() else {
        return format!("TOML parse error: {what}");
    };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before[before.rfind('\n').map_or(0, |i| i + 1)..]
        .chars()
        .count()
        + 1;
    format!("TOML parse error at line {line}, column {column}: {what}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toml_error_is_one_line_naming_the_place_and_the_key() {
        let error = Manifest::parse("x", "resource = \"x\"\n[limits]\nbogus = 1\n").unwrap_err();
        assert!(!error.contains('\n'), "{error}");
        assert!(
            error.starts_with("TOML parse error at line 3, column 1: unknown field `bogus`"),
            "{error}"
        );
    }

    #[test]
    fn an_empty_manifest_gives_the_defaults() {
        assert_eq!(
            Manifest::parse("echo", "").unwrap(),
            Manifest::defaults("echo")
        );
        let m = Manifest::defaults("echo");
        assert_eq!(m.resource, "echo");
        assert_eq!(m.tickets, 1);
        assert_eq!(m.limits.memory, 64 << 20);
        assert_eq!(m.limits.stop_grace, Duration::from_millis(500));
    }

    #[test]
    fn every_key_is_read() {
        let m = Manifest::parse(
            "x",
            r#"
            resource = "billing-sync"
            tickets = 2
            version = "1.4.0"
            state = "per-slot"
            [limits]
            memory = "16MiB"
            stop_grace = "200ms"
            cleanup_timeout = "1s"
            max_restarts = 5
            restart_window = "1m"
            [placement]
            require = { zone = "a" }
            "#,
        )
        .unwrap();
        assert_eq!(m.resource, "billing-sync");
        assert_eq!(m.tickets, 2);
        assert_eq!(m.version, semver::Version::new(1, 4, 0));
        assert_eq!(m.limits.memory, 16 << 20);
        assert_eq!(m.limits.stop_grace, Duration::from_millis(200));
        assert_eq!(m.limits.cleanup_timeout, Duration::from_secs(1));
        assert_eq!(m.limits.max_restarts, 5);
        assert_eq!(m.limits.restart_window, Duration::from_secs(60));
        assert_eq!(m.require.get("zone").map(String::as_str), Some("a"));
        assert_eq!(m.state, StateScope::PerSlot);
    }

    #[test]
    fn state_is_shared_unless_per_slot_is_asked_for() {
        assert_eq!(Manifest::parse("x", "").unwrap().state, StateScope::Shared);
        let shared = Manifest::parse("x", "state = \"shared\"").unwrap();
        assert_eq!(shared.state, StateScope::Shared);
        let error = Manifest::parse("x", "state = \"per-ticket\"").unwrap_err();
        assert!(
            error.contains("state: \"per-ticket\"") && error.contains("per-slot"),
            "{error}"
        );
    }

    #[test]
    fn errors_name_the_key() {
        let err = Manifest::parse("x", "bogus = 1").unwrap_err();
        assert!(err.contains("bogus"), "{err}");
        let err = Manifest::parse("x", "[limits]\nstop_grace = \"soon\"").unwrap_err();
        assert!(err.contains("limits.stop_grace"), "{err}");
        let err = Manifest::parse("x", "[limits]\nmemory = \"12 parsecs\"").unwrap_err();
        assert!(err.contains("limits.memory"), "{err}");
        let err = Manifest::parse("x", "tickets = 0").unwrap_err();
        assert!(err.contains("tickets"), "{err}");
        let err = Manifest::parse("x", "version = \"one\"").unwrap_err();
        assert!(err.contains("version"), "{err}");
        let err = Manifest::parse("x", "resource = \"a/b\"").unwrap_err();
        assert!(err.contains("resource"), "{err}");
        let err = Manifest::parse("x", "[limits]\nmemory = \"64KiB\"").unwrap_err();
        assert!(err.contains("out of range"), "{err}");
        let err = Manifest::parse(
            "x",
            "[capabilities]\nallowed_outbound_hosts = [\"ftp://x\"]",
        )
        .unwrap_err();
        assert!(err.contains("capabilities.allowed_outbound_hosts"), "{err}");
        let err = Manifest::parse("x", "[capabilities]\nfiles = []").unwrap_err();
        assert!(err.contains("files"), "{err}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1 GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("2MB").unwrap(), 2_000_000);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("99999999999999999999GiB").is_err());
        assert!(parse_size("18446744073709551615GiB").is_err());
    }
}

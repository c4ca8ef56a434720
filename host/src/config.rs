//! Node configuration: one typed struct, defaults in one place, read from an optional
//! TOML file, then `TENURE_*` environment variables, then command-line flags (each later
//! source wins). Unknown keys are errors, reported with the file and the key.
//!
//! Relative paths in a config file are relative to the file's folder, so a config works
//! from any working directory; relative paths from flags or the environment are relative
//! to the working directory, as usual for command-line tools.
//!
//! Without `peers`, `join` and `[tls]` a node is the embedded single-node default: a
//! one-voter cluster with development certificates made in its data dir. The metrics
//! endpoint (`[metrics] listen`) is off unless configured: it serves plain HTTP, so it
//! is opened only on an address someone chose.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::catalog::manifest::check_resource_name;
use crate::ownership::LeaseTiming;

/// A node's resolved configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The node's name, in logs and leases.
    pub name: String,
    /// Where the node keeps its store and compile cache.
    pub data_dir: PathBuf,
    /// The plugins folder.
    pub plugins_dir: PathBuf,
    /// The node's labels, matched against manifests' `[placement] require`.
    pub labels: BTreeMap<String, String>,
    /// The UDP address the node listens on (port 0: any free port).
    pub listen: String,
    /// The address peers dial; defaults to the bound listen address.
    pub advertise: Option<String>,
    /// The initial members (other than this node): bootstrap the cluster once.
    pub peers: Vec<Peer>,
    /// Existing members to join through, for a node added later.
    pub join: Vec<Peer>,
    /// The node's certificate files; none: development certificates in the data dir.
    pub tls: Option<Tls>,
    /// The session lease TTL.
    pub ttl: Duration,
    /// Where to serve `/`, `/status`, `/metrics`, `/livez` (`/healthz`) and `/readyz` (plain HTTP);
    /// none: off.
    pub metrics: Option<SocketAddr>,
    /// `[voters] count`: how many members vote (1, 3, 5 or 7); none: the largest odd
    /// number up to the members present, at most 5.
    pub voters: Option<usize>,
    /// `[voters] replace_after`: a voter the leader cannot reach this long is replaced
    /// by a caught-up learner, or the voters shrink.
    pub replace_voter_after: Duration,
    /// The cap on the incremental compilation cache (`DATA_DIR/incremental/`), in bytes;
    /// 0: no incremental cache.
    pub incremental_cache: u64,
    /// `[replicas] check_every`: how often the leader compares the members' replicas
    /// with its own (`raft/checksums.rs`).
    pub replica_check: Duration,
}

/// Another node: its name (which its certificate must carry) and address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub name: String,
    pub addr: String,
}

/// Certificate files.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    /// CA bundle (may hold several CAs during a CA rotation).
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            name: "local".into(),
            data_dir: PathBuf::from("tenure-data"),
            plugins_dir: PathBuf::from("plugins"),
            labels: BTreeMap::new(),
            listen: DEFAULT_LISTEN.into(),
            advertise: None,
            peers: Vec::new(),
            join: Vec::new(),
            tls: None,
            ttl: LeaseTiming::DEFAULT_TTL,
            metrics: None,
            voters: None,
            replace_voter_after: DEFAULT_REPLACE_VOTER_AFTER,
            incremental_cache: DEFAULT_INCREMENTAL_CACHE_MIB << 20,
            replica_check: crate::raft::DEFAULT_REPLICA_CHECK,
        }
    }
}

/// The default of `[voters] replace_after`: far longer than a restart or a pause that a
/// lease survives, short enough that a dead voter does not leave the cluster one failure
/// from a stop for long (Consul's autopilot reaps dead servers on a similar scale).
pub const DEFAULT_REPLACE_VOTER_AFTER: Duration = Duration::from_secs(180);
/// The default cap on the incremental compilation cache, in MiB: the interpreters of
/// Python and JavaScript plugins take about 30 and 40 MiB, each further version or plugin
/// of a language a few MiB more (BENCHMARKS.md). A compile reads the whole cache into the
/// compiler process's memory.
pub const DEFAULT_INCREMENTAL_CACHE_MIB: u64 = 256;

/// The default listen address of a node with peers (docs/design.md §3).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:7400";
/// The default listen address of a node alone: loopback only.
pub const SINGLE_NODE_LISTEN: &str = "127.0.0.1:7400";

/// Values from flags or the environment, which override the file.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub name: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub plugins_dir: Option<PathBuf>,
    pub listen: Option<String>,
    /// The metrics listen address; `off` (or empty) turns a configured endpoint off.
    pub metrics_listen: Option<String>,
}

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid config: {key}: {message}")]
    Invalid { key: &'static str, message: String },
}

/// The config file's shape. Every key is optional.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    /// The node's name.
    name: Option<String>,
    /// Data folder (store, compile cache).
    data_dir: Option<PathBuf>,
    /// Plugins folder.
    plugins_dir: Option<PathBuf>,
    /// Node labels for placement.
    labels: Option<BTreeMap<String, String>>,
    listen: Option<String>,
    advertise: Option<String>,
    /// `NAME@HOST:PORT` each.
    peers: Option<Vec<String>>,
    /// `NAME@HOST:PORT` each.
    join: Option<Vec<String>>,
    tls: Option<Tls>,
    lease: Option<LeaseFile>,
    metrics: Option<MetricsFile>,
    voters: Option<VotersFile>,
    compile: Option<CompileFile>,
    replicas: Option<ReplicasFile>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplicasFile {
    /// e.g. "30s".
    check_every: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct VotersFile {
    /// 1, 3, 5 or 7.
    count: Option<usize>,
    /// e.g. "3m".
    replace_after: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompileFile {
    /// The incremental compilation cache's cap in MiB; 0: off.
    incremental_cache_mib: Option<u64>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsFile {
    /// e.g. "127.0.0.1:9464".
    listen: Option<String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseFile {
    /// e.g. "2s", "500ms".
    ttl: Option<String>,
}

impl Config {
    /// Builds the configuration: defaults, then `file`, then `overrides`.
    pub fn load(file: Option<&Path>, overrides: Overrides) -> Result<Self, ConfigError> {
        let mut config = Config::default();
        let mut listen_given = false;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            let parsed: ConfigFile = toml::from_str(&text).map_err(|e| ConfigError::Parse {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
            let base = path.parent().unwrap_or(Path::new(""));
            if let Some(name) = parsed.name {
                config.name = name;
            }
            if let Some(dir) = parsed.data_dir {
                config.data_dir = base.join(dir);
            }
            if let Some(dir) = parsed.plugins_dir {
                config.plugins_dir = base.join(dir);
            }
            if let Some(labels) = parsed.labels {
                config.labels = labels;
            }
            if let Some(listen) = parsed.listen {
                config.listen = listen;
                listen_given = true;
            }
            config.advertise = parsed.advertise;
            config.peers = peers("peers", parsed.peers.unwrap_or_default())?;
            config.join = peers("join", parsed.join.unwrap_or_default())?;
            config.tls = parsed.tls.map(|tls| Tls {
                ca: base.join(tls.ca),
                cert: base.join(tls.cert),
                key: base.join(tls.key),
            });
            if let Some(ttl) = parsed.lease.and_then(|l| l.ttl) {
                config.ttl = humantime::parse_duration(&ttl).map_err(|e| ConfigError::Invalid {
                    key: "lease.ttl",
                    message: format!("{ttl:?}: {e}"),
                })?;
            }
            if let Some(listen) = parsed.metrics.and_then(|m| m.listen) {
                config.metrics = metrics_listen(&listen)?;
            }
            if let Some(voters) = parsed.voters {
                voters_file(&mut config, voters)?;
            }
            if let Some(every) = parsed.replicas.and_then(|r| r.check_every) {
                config.replica_check = replica_check(&every)?;
            }
            if let Some(mib) = parsed.compile.and_then(|c| c.incremental_cache_mib) {
                config.incremental_cache =
                    mib.checked_mul(1 << 20)
                        .ok_or_else(|| ConfigError::Invalid {
                            key: "compile.incremental_cache_mib",
                            message: format!("{mib} MiB is more bytes than a u64 holds"),
                        })?;
            }
        }
        if let Some(name) = overrides.name {
            config.name = name;
        }
        if let Some(dir) = overrides.data_dir {
            config.data_dir = dir;
        }
        if let Some(dir) = overrides.plugins_dir {
            config.plugins_dir = dir;
        }
        if let Some(listen) = overrides.listen {
            config.listen = listen;
            listen_given = true;
        }
        // A node alone (no peers, nothing to join) is reachable from this machine only
        // unless told otherwise: the single-node default is for trying Tenure out.
        if !listen_given && config.peers.is_empty() && config.join.is_empty() {
            config.listen = SINGLE_NODE_LISTEN.into();
        }
        if let Some(listen) = overrides.metrics_listen {
            config.metrics = metrics_listen(&listen)?;
        }
        if !(LeaseTiming::MIN_TTL..=LeaseTiming::MAX_TTL).contains(&config.ttl) {
            return Err(ConfigError::Invalid {
                key: "lease.ttl",
                message: format!(
                    "{} is not from {} to {}",
                    humantime::format_duration(config.ttl),
                    humantime::format_duration(LeaseTiming::MIN_TTL),
                    humantime::format_duration(LeaseTiming::MAX_TTL)
                ),
            });
        }
        if config
            .peers
            .iter()
            .chain(&config.join)
            .any(|p| p.name == config.name)
        {
            return Err(ConfigError::Invalid {
                key: "peers",
                message: format!(
                    "lists this node ({}) itself; list only the others",
                    config.name
                ),
            });
        }
        check_resource_name(&config.name).map_err(|message| ConfigError::Invalid {
            key: "name",
            message: message.replacen("resource: ", "", 1),
        })?;
        Ok(config)
    }
}

/// Checks and applies the `[voters]` table.
fn voters_file(config: &mut Config, voters: VotersFile) -> Result<(), ConfigError> {
    if let Some(count) = voters.count {
        if ![1, 3, 5, 7].contains(&count) {
            return Err(ConfigError::Invalid {
                key: "voters.count",
                message: format!(
                    "{count} is not 1, 3, 5 or 7 (an even number of voters tolerates no more failures than the odd number below it)"
                ),
            });
        }
        config.voters = Some(count);
    }
    if let Some(after) = voters.replace_after {
        let parsed = humantime::parse_duration(&after).map_err(|e| ConfigError::Invalid {
            key: "voters.replace_after",
            message: format!("{after:?}: {e}"),
        })?;
        if parsed < MIN_REPLACE_VOTER_AFTER {
            return Err(ConfigError::Invalid {
                key: "voters.replace_after",
                message: format!(
                    "{after:?} is shorter than {}: a voter restarting would be replaced",
                    humantime::format_duration(MIN_REPLACE_VOTER_AFTER)
                ),
            });
        }
        config.replace_voter_after = parsed;
    }
    Ok(())
}

/// Parses `[replicas] check_every`: a duration of at least a second.
fn replica_check(every: &str) -> Result<Duration, ConfigError> {
    let invalid = |message| ConfigError::Invalid {
        key: "replicas.check_every",
        message,
    };
    let parsed =
        humantime::parse_duration(every).map_err(|e| invalid(format!("{every:?}: {e}")))?;
    if parsed < Duration::from_secs(1) {
        return Err(invalid(format!(
            "{every:?} is shorter than 1s: each check asks every member for its hashes"
        )));
    }
    Ok(parsed)
}

/// The shortest `[voters] replace_after`.
const MIN_REPLACE_VOTER_AFTER: Duration = Duration::from_secs(2);

/// Parses the metrics listen address: `IP:PORT`, or `off` / empty for none.
fn metrics_listen(text: &str) -> Result<Option<SocketAddr>, ConfigError> {
    let text = text.trim();
    if text.is_empty() || text == "off" {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| ConfigError::Invalid {
        key: "metrics.listen",
        message: format!("{text:?} is not IP:PORT (e.g. \"127.0.0.1:9464\")"),
    })
}

/// Parses `NAME@HOST:PORT` entries of `key`.
fn peers(key: &'static str, entries: Vec<String>) -> Result<Vec<Peer>, ConfigError> {
    entries
        .into_iter()
        .map(|entry| {
            let (name, addr) = entry.split_once('@').ok_or_else(|| ConfigError::Invalid {
                key,
                message: format!("{entry:?} is not NAME@HOST:PORT"),
            })?;
            check_resource_name(name).map_err(|message| ConfigError::Invalid {
                key,
                message: format!("{entry:?}: {}", message.replacen("resource: ", "", 1)),
            })?;
            if addr
                .rsplit_once(':')
                .is_none_or(|(_, port)| port.parse::<u16>().is_err())
            {
                return Err(ConfigError::Invalid {
                    key,
                    message: format!("{entry:?}: {addr:?} is not HOST:PORT"),
                });
            }
            Ok(Peer {
                name: name.to_owned(),
                addr: addr.to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_file_gives_the_single_node_defaults() {
        let config = Config::load(None, Overrides::default()).unwrap();
        assert_eq!(
            config,
            Config {
                listen: SINGLE_NODE_LISTEN.into(),
                ..Config::default()
            }
        );
        assert_eq!(config.data_dir, PathBuf::from("tenure-data"));
        assert_eq!(config.plugins_dir, PathBuf::from("plugins"));
    }

    #[test]
    fn a_node_alone_listens_on_loopback_unless_told_otherwise() {
        let alone = Config::load(None, Overrides::default()).unwrap();
        assert_eq!(alone.listen, "127.0.0.1:7400");
        let told = Overrides {
            listen: Some(DEFAULT_LISTEN.into()),
            ..Overrides::default()
        };
        assert_eq!(Config::load(None, told).unwrap().listen, "0.0.0.0:7400");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tenure.toml");
        std::fs::write(&path, "name = \"n1\"\npeers = [\"n2@10.0.0.2:7400\"]\n").unwrap();
        let clustered = Config::load(Some(&path), Overrides::default()).unwrap();
        assert_eq!(clustered.listen, "0.0.0.0:7400");
    }

    #[test]
    fn file_paths_are_relative_to_the_file_and_overrides_win() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tenure.toml");
        std::fs::write(
            &path,
            "name = \"n1\"\ndata_dir = \"data\"\nplugins_dir = \"/srv/plugins\"\nlabels = { zone = \"a\" }\n",
        )
        .unwrap();
        let config = Config::load(Some(&path), Overrides::default()).unwrap();
        assert_eq!(config.name, "n1");
        assert_eq!(config.data_dir, dir.path().join("data"));
        assert_eq!(config.plugins_dir, PathBuf::from("/srv/plugins"));
        assert_eq!(config.labels.get("zone").map(String::as_str), Some("a"));

        let overrides = Overrides {
            name: Some("n2".into()),
            data_dir: Some("elsewhere".into()),
            ..Overrides::default()
        };
        let config = Config::load(Some(&path), overrides).unwrap();
        assert_eq!(config.name, "n2");
        assert_eq!(config.data_dir, PathBuf::from("elsewhere"));
    }

    #[test]
    fn unknown_keys_and_bad_names_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tenure.toml");
        std::fs::write(&path, "bogus = 1\n").unwrap();
        let err = Config::load(Some(&path), Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("bogus") && err.contains("tenure.toml"),
            "{err}"
        );

        let overrides = Overrides {
            name: Some("has space".into()),
            ..Overrides::default()
        };
        let err = Config::load(None, overrides).unwrap_err().to_string();
        assert!(err.contains("name"), "{err}");
    }

    #[test]
    fn the_voters_table_is_parsed_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tenure.toml");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            Config::load(Some(&path), Overrides::default())
        };
        let config = load("").unwrap();
        assert_eq!(config.voters, None);
        assert_eq!(config.replace_voter_after, DEFAULT_REPLACE_VOTER_AFTER);
        let config = load("[voters]\ncount = 5\nreplace_after = \"90s\"\n").unwrap();
        assert_eq!(config.voters, Some(5));
        assert_eq!(config.replace_voter_after, Duration::from_secs(90));
        assert_eq!(config.replica_check, crate::raft::DEFAULT_REPLICA_CHECK);
        let config = load("[replicas]\ncheck_every = \"2s\"\n").unwrap();
        assert_eq!(config.replica_check, Duration::from_secs(2));
        for (text, says) in [
            (
                "[voters]\ncount = 4\n",
                "voters.count: 4 is not 1, 3, 5 or 7",
            ),
            (
                "[voters]\nreplace_after = \"1s\"\n",
                "voters.replace_after: \"1s\" is shorter than 2s",
            ),
            (
                "[voters]\nreplace_after = \"soon\"\n",
                "voters.replace_after: \"soon\"",
            ),
            (
                "[replicas]\ncheck_every = \"100ms\"\n",
                "replicas.check_every: \"100ms\" is shorter than 1s",
            ),
        ] {
            let err = load(text).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
    }

    #[test]
    fn cluster_keys_are_parsed_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tenure.toml");
        std::fs::write(
            &path,
            "name = \"n1\"\nlisten = \"127.0.0.1:7401\"\npeers = [\"n2@10.0.0.2:7400\"]\n\
             [tls]\nca = \"c/ca.pem\"\ncert = \"c/n1.pem\"\nkey = \"c/n1.key\"\n[lease]\nttl = \"500ms\"\n",
        )
        .unwrap();
        let config = Config::load(Some(&path), Overrides::default()).unwrap();
        assert_eq!(config.listen, "127.0.0.1:7401");
        assert_eq!(
            config.peers,
            [Peer {
                name: "n2".into(),
                addr: "10.0.0.2:7400".into()
            }]
        );
        assert_eq!(config.tls.unwrap().ca, dir.path().join("c/ca.pem"));
        assert_eq!(config.ttl, Duration::from_millis(500));
        assert_eq!(config.metrics, None, "metrics are off unless configured");

        assert_eq!(config.incremental_cache, 256 << 20, "the default cap");
        std::fs::write(&path, "[compile]\nincremental_cache_mib = 0\n").unwrap();
        let config = Config::load(Some(&path), Overrides::default()).unwrap();
        assert_eq!(
            config.incremental_cache, 0,
            "the incremental cache turned off"
        );

        std::fs::write(&path, "[metrics]\nlisten = \"127.0.0.1:9464\"\n").unwrap();
        let config = Config::load(Some(&path), Overrides::default()).unwrap();
        assert_eq!(config.metrics, Some("127.0.0.1:9464".parse().unwrap()));
        for (flag, expected) in [("0.0.0.0:9000", Some("0.0.0.0:9000")), ("off", None)] {
            let overrides = Overrides {
                metrics_listen: Some(flag.into()),
                ..Overrides::default()
            };
            let config = Config::load(Some(&path), overrides).unwrap();
            assert_eq!(
                config.metrics,
                expected.map(|a| a.parse().unwrap()),
                "{flag}"
            );
        }

        for (text, key) in [
            ("peers = [\"10.0.0.2:7400\"]", "peers"),
            ("peers = [\"n2@nowhere\"]", "peers"),
            ("name = \"n1\"\npeers = [\"n1@h:1\"]", "peers"),
            ("[lease]\nttl = \"100ms\"", "lease.ttl"),
            ("[lease]\nttl = \"soon\"", "lease.ttl"),
            ("[metrics]\nlisten = \"localhost\"", "metrics.listen"),
            ("[metrics]\nlisten = \"127.0.0.1:9464\"\nport = 1", "port"),
            (
                "[compile]\nincremental_cache_mib = -1",
                "incremental_cache_mib",
            ),
            (
                "[compile]\nincremental_cache_mib = 18000000000000",
                "incremental_cache_mib",
            ),
            ("[compile]\ncache = 1", "cache"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = Config::load(Some(&path), Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }
}

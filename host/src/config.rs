//! Node configuration: one typed struct, defaults in one place, read from an optional
//! TOML file, then `TENURE_*` environment variables, then command-line flags (each later
//! source wins). Unknown keys are errors, reported with the file and the key.
//!
//! Relative paths in a config file are relative to the file's folder, so a config works
//! from any working directory; relative paths from flags or the environment are relative
//! to the working directory, as usual for command-line tools.
//!
//! This is the configuration of the single-node host. The cluster keys of DESIGN.md
//! (`listen`, `peers`, `[tls]`, `[lease]`, ...) arrive with the cluster and are refused
//! as unknown until then, rather than accepted and ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::catalog::manifest::check_resource_name;

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
}

impl Default for Config {
    fn default() -> Self {
        Self {
            name: "local".into(),
            data_dir: PathBuf::from("tenure-data"),
            plugins_dir: PathBuf::from("plugins"),
            labels: BTreeMap::new(),
        }
    }
}

/// Values from flags or the environment, which override the file.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub name: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub plugins_dir: Option<PathBuf>,
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
}

impl Config {
    /// Builds the configuration: defaults, then `file`, then `overrides`.
    pub fn load(file: Option<&Path>, overrides: Overrides) -> Result<Self, ConfigError> {
        let mut config = Config::default();
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
        check_resource_name(&config.name).map_err(|message| ConfigError::Invalid {
            key: "name",
            message: message.replacen("resource: ", "", 1),
        })?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_file_gives_the_single_node_defaults() {
        let config = Config::load(None, Overrides::default()).unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(config.data_dir, PathBuf::from("tenure-data"));
        assert_eq!(config.plugins_dir, PathBuf::from("plugins"));
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
            plugins_dir: None,
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
}

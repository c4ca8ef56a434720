//! A manifest's `[capabilities]`: what a plugin may reach beyond its lease, its state and
//! its log. Nothing is granted unless listed.
//!
//! ```toml
//! [capabilities]
//! allowed_outbound_hosts = ["https://api.example.com", "http://127.0.0.1:8080", "https://*.example.com"]
//! env     = { TARGET_URL = "https://api.example.com/v1/sync" }
//! secrets = { API_TOKEN = "secrets/api-token" }   # relative to the plugins folder
//! ```
//!
//! - `allowed_outbound_hosts`: `scheme://host[:port]`, scheme `http`, `https` or `tcp`; the
//!   host a DNS name or an IP literal (IPv6 in brackets); the port defaults to 80 for http
//!   and 443 for https and is required for tcp. `*.example.com` matches subdomains of
//!   example.com, not example.com itself; no other wildcard is accepted, nor a path, a
//!   query, user info or any other scheme. Spin's `allowed_outbound_hosts` reads the same.
//! - `env`: variables set in the plugin's environment.
//! - `secrets`: variables whose values are read from files when the plugin is loaded
//!   (`catalog::read_plugin`); this module only checks the names and paths. A secret's
//!   value never passes through here, so it cannot reach a manifest error.
//!
//! This module parses and matches; it does no I/O. The runtime asks [`Capabilities::allows`]
//! for every outgoing request.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

/// What a plugin's manifest grants.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Where the plugin may connect; empty: nowhere.
    pub allowed_outbound_hosts: Vec<AllowedHost>,
    /// Plain environment variables.
    pub env: BTreeMap<String, String>,
    /// Environment variables read from files: name → path relative to the plugins folder.
    pub secrets: BTreeMap<String, PathBuf>,
}

/// One `allowed_outbound_hosts` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedHost {
    pub scheme: Scheme,
    pub host: HostPattern,
    pub port: u16,
}

/// The schemes an entry may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scheme {
    Http,
    Https,
    Tcp,
}

/// The host part of an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    /// One DNS name, lower case.
    Name(String),
    /// `*.suffix`: any name ending in `.suffix` (lower case, without the `*.`).
    Subdomains(String),
    /// One IP address.
    Ip(IpAddr),
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::Tcp => "tcp",
        }
    }

    fn default_port(self) -> Option<u16> {
        match self {
            Scheme::Http => Some(80),
            Scheme::Https => Some(443),
            Scheme::Tcp => None,
        }
    }
}

impl fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme.as_str())?;
        match &self.host {
            HostPattern::Name(name) => write!(f, "{name}")?,
            HostPattern::Subdomains(suffix) => write!(f, "*.{suffix}")?,
            HostPattern::Ip(IpAddr::V4(ip)) => write!(f, "{ip}")?,
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
        }
        write!(f, ":{}", self.port)
    }
}

impl AllowedHost {
    /// Parses one entry; the error says what is wrong with it (the caller names the key).
    pub fn parse(entry: &str) -> Result<Self, String> {
        let (scheme, rest) = entry
            .split_once("://")
            .ok_or("has no scheme; write e.g. \"https://api.example.com\"")?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            "tcp" => Scheme::Tcp,
            other => return Err(format!("scheme {other:?} is not http, https or tcp")),
        };
        // A trailing slash is harmless (people paste base URLs); anything after it is not.
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err("names a path, query or fragment; an entry is scheme://host[:port]".into());
        }
        if rest.contains('@') {
            return Err("has user info; an entry is scheme://host[:port]".into());
        }
        let (host, port) = split_port(rest)?;
        let port = match port {
            Some(port) => port,
            None => scheme
                .default_port()
                .ok_or("a tcp:// entry needs a port, e.g. \"tcp://db.internal:5432\"")?,
        };
        Ok(Self {
            scheme,
            host: parse_host(host)?,
            port,
        })
    }

    /// Whether a connection to `host:port` with `scheme` is within this entry. `host` is
    /// a name (any case, an optional final dot) or an IP literal (IPv6 with or without
    /// brackets).
    pub fn matches(&self, scheme: Scheme, host: &str, port: u16) -> bool {
        if self.scheme != scheme || self.port != port {
            return false;
        }
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = host.parse::<IpAddr>() {
            return self.host == HostPattern::Ip(ip);
        }
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        match &self.host {
            HostPattern::Name(name) => *name == host,
            HostPattern::Subdomains(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
            HostPattern::Ip(_) => false,
        }
    }
}

impl Capabilities {
    /// Whether any entry allows `scheme://host:port`.
    pub fn allows(&self, scheme: Scheme, host: &str, port: u16) -> bool {
        self.allowed_outbound_hosts
            .iter()
            .any(|entry| entry.matches(scheme, host, port))
    }

    /// Checks the raw table; errors name the key and the entry at fault.
    pub(super) fn parse(raw: RawCapabilities) -> Result<Self, String> {
        let mut allowed = Vec::with_capacity(raw.allowed_outbound_hosts.len());
        for entry in &raw.allowed_outbound_hosts {
            let host = AllowedHost::parse(entry)
                .map_err(|e| format!("capabilities.allowed_outbound_hosts: {entry:?} {e}"))?;
            allowed.push(host);
        }
        for name in raw.env.keys() {
            check_var_name(name).map_err(|e| format!("capabilities.env.{name}: {e}"))?;
        }
        for (name, value) in &raw.env {
            if value.contains('\0') {
                return Err(format!(
                    "capabilities.env.{name}: the value contains a NUL byte"
                ));
            }
        }
        let mut secrets = BTreeMap::new();
        for (name, path) in raw.secrets {
            check_var_name(&name).map_err(|e| format!("capabilities.secrets.{name}: {e}"))?;
            if raw.env.contains_key(&name) {
                return Err(format!(
                    "capabilities.secrets.{name}: {name} is also set in capabilities.env"
                ));
            }
            let path = PathBuf::from(path);
            check_secret_path(&path)
                .map_err(|e| format!("capabilities.secrets.{name}: {:?} {e}", path.display()))?;
            secrets.insert(name, path);
        }
        Ok(Self {
            allowed_outbound_hosts: allowed,
            env: raw.env,
            secrets,
        })
    }
}

/// `[capabilities]` as written.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCapabilities {
    #[serde(default)]
    allowed_outbound_hosts: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    secrets: BTreeMap<String, String>,
}

/// Splits `host[:port]`, the host possibly a bracketed IPv6 literal.
fn split_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (ip, after) = rest
            .split_once(']')
            .ok_or("has an IPv6 address without its closing ']'")?;
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or("has text after the IPv6 address that is not a port")?,
            ),
        };
        (ip, port)
    } else {
        match text.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => {
                return Err(
                    "has an IPv6 address without brackets; write e.g. \"http://[::1]:8080\"".into(),
                );
            }
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = port
        .map(|port| match port.parse::<u16>() {
            Ok(port) if port > 0 => Ok(port),
            _ => Err(format!("has port {port:?}, not a number from 1 to 65535")),
        })
        .transpose()?;
    Ok((host, port))
}

fn parse_host(host: &str) -> Result<HostPattern, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(HostPattern::Ip(ip));
    }
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let (pattern, name) = match host.strip_prefix("*.") {
        Some(suffix) => (HostPattern::Subdomains(suffix.to_string()), suffix),
        None => (HostPattern::Name(host.clone()), host.as_str()),
    };
    if name.contains('*') {
        return Err("has a wildcard other than a leading \"*.\" (subdomains only)".into());
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!(
            "has {name:?}, which is not a host name or IP address"
        ));
    }
    Ok(pattern)
}

/// Environment variable names: what every shell and runtime accepts.
fn check_var_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err("a variable name is letters, digits and '_', not starting with a digit".into())
    }
}

/// A secret file lives inside the plugins folder: relative, without `..`.
fn check_secret_path(path: &Path) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        return Err("is empty; name a file relative to the plugins folder".into());
    }
    let inside = path
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if inside {
        Ok(())
    } else {
        Err("must be relative to the plugins folder, without \"..\"".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(entry: &str) -> AllowedHost {
        AllowedHost::parse(entry).unwrap_or_else(|e| panic!("{entry}: {e}"))
    }

    #[test]
    fn entries_with_their_default_ports() {
        assert_eq!(
            host("https://api.example.com").to_string(),
            "https://api.example.com:443"
        );
        assert_eq!(
            host("http://API.Example.com/").to_string(),
            "http://api.example.com:80"
        );
        assert_eq!(
            host("http://127.0.0.1:8080").to_string(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(host("https://[::1]").to_string(), "https://[::1]:443");
        assert_eq!(host("https://[::1]:8443").to_string(), "https://[::1]:8443");
        assert_eq!(
            host("tcp://db.internal:5432").to_string(),
            "tcp://db.internal:5432"
        );
        assert_eq!(
            host("https://*.example.com").to_string(),
            "https://*.example.com:443"
        );
    }

    #[test]
    fn bad_entries_are_refused_with_the_reason() {
        for (entry, why) in [
            ("api.example.com", "no scheme"),
            ("ftp://example.com", "not http, https or tcp"),
            ("tcp://db.internal", "needs a port"),
            ("http://example.com:0", "not a number"),
            ("http://example.com:99999", "not a number"),
            ("http://example.com:http", "not a number"),
            ("https://example.com/v1", "path"),
            ("https://example.com?x=1", "path, query"),
            ("https://user@example.com", "user info"),
            ("https://*", "wildcard"),
            ("http://::1:8080", "brackets"),
            ("https://*.*.example.com", "wildcard"),
            ("https://api.*.com", "wildcard"),
            ("https://ex*.com", "wildcard"),
            ("https://", "not a host name"),
            ("https://exa mple.com", "not a host name"),
            ("https://[::1", "closing"),
            ("https://[::1]x", "not a port"),
        ] {
            let err = AllowedHost::parse(entry).unwrap_err();
            assert!(err.contains(why), "{entry}: {err}");
        }
    }

    #[test]
    fn matching_is_by_scheme_host_and_port() {
        let api = host("https://api.example.com");
        assert!(api.matches(Scheme::Https, "api.example.com", 443));
        assert!(api.matches(Scheme::Https, "API.example.com.", 443));
        assert!(!api.matches(Scheme::Http, "api.example.com", 443));
        assert!(!api.matches(Scheme::Https, "api.example.com", 8443));
        assert!(!api.matches(Scheme::Https, "evil-api.example.com", 443));
        assert!(!api.matches(Scheme::Https, "api.example.com.evil.net", 443));

        let sub = host("https://*.example.com");
        assert!(sub.matches(Scheme::Https, "api.example.com", 443));
        assert!(sub.matches(Scheme::Https, "a.b.example.com", 443));
        assert!(!sub.matches(Scheme::Https, "example.com", 443));
        assert!(!sub.matches(Scheme::Https, "notexample.com", 443));
        assert!(!sub.matches(Scheme::Https, ".example.com", 443));

        let ip = host("http://127.0.0.1:8080");
        assert!(ip.matches(Scheme::Http, "127.0.0.1", 8080));
        assert!(!ip.matches(Scheme::Http, "localhost", 8080));
        assert!(!ip.matches(Scheme::Http, "127.0.0.2", 8080));
        let v6 = host("http://[::1]:8080");
        assert!(v6.matches(Scheme::Http, "[::1]", 8080));
        assert!(v6.matches(Scheme::Http, "::1", 8080));
        assert!(v6.matches(Scheme::Http, "[0:0::1]", 8080));
    }

    fn parse(toml: &str) -> Result<Capabilities, String> {
        let raw: RawCapabilities = toml::from_str(toml).map_err(|e| e.to_string())?;
        Capabilities::parse(raw)
    }

    #[test]
    fn errors_name_the_key_and_the_entry() {
        let err = parse(r#"allowed_outbound_hosts = ["https://ok.example.com", "gopher://x"]"#)
            .unwrap_err();
        assert!(err.contains("capabilities.allowed_outbound_hosts"), "{err}");
        assert!(err.contains("gopher://x"), "{err}");
        let err = parse(r#"env = { "1X" = "a" }"#).unwrap_err();
        assert!(err.contains("capabilities.env.1X"), "{err}");
        let err = parse(r#"secrets = { KEY = "/etc/shadow" }"#).unwrap_err();
        assert!(
            err.contains("capabilities.secrets.KEY") && err.contains("/etc/shadow"),
            "{err}"
        );
        let err = parse(r#"secrets = { KEY = "../outside" }"#).unwrap_err();
        assert!(err.contains("capabilities.secrets.KEY"), "{err}");
        let err = parse("env = { KEY = \"a\" }\nsecrets = { KEY = \"k\" }").unwrap_err();
        assert!(err.contains("also set in capabilities.env"), "{err}");
        let err = parse("allowed_hosts = []").unwrap_err();
        assert!(err.contains("allowed_hosts"), "{err}");
    }

    #[test]
    fn nothing_listed_allows_nothing() {
        let caps = parse("").unwrap();
        assert_eq!(caps, Capabilities::default());
        assert!(!caps.allows(Scheme::Http, "127.0.0.1", 80));
        let caps = parse(
            r#"
            allowed_outbound_hosts = ["http://127.0.0.1:8080", "tcp://db.internal:5432"]
            env = { TARGET_URL = "http://127.0.0.1:8080/hook" }
            secrets = { API_TOKEN = "secrets/api-token" }
            "#,
        )
        .unwrap();
        assert!(caps.allows(Scheme::Http, "127.0.0.1", 8080));
        assert!(!caps.allows(Scheme::Http, "127.0.0.1", 8081));
        assert!(caps.allows(Scheme::Tcp, "db.internal", 5432));
        assert!(!caps.allows(Scheme::Http, "db.internal", 5432));
        assert_eq!(caps.env["TARGET_URL"], "http://127.0.0.1:8080/hook");
        assert_eq!(caps.secrets["API_TOKEN"], Path::new("secrets/api-token"));
    }
}

//! The files under `deploy/` say what the node accepts: the systemd unit passes
//! `systemd-analyze verify` (with its `ExecStart` pointed at the built binary), and every
//! node config in them (`deploy/systemd/tenure.toml`, each `tenure-N.toml` of the
//! Kubernetes ConfigMap) loads with the node's own config loader and names a certificate
//! of its own; the Kubernetes preStop hook is a command the binary accepts, within the
//! grace period. The Kubernetes schemas are checked by `deploy/kubernetes/validate.sh`
//! (CI), which needs kubernetes-validate from PyPI.

use std::path::{Path, PathBuf};
use std::process::Command;

use tenure::config::{Config, Overrides};

fn deploy(path: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy")).join(path)
}

#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(deploy("systemd/tenure.service")).unwrap();
    for line in [
        "Type=notify",
        "Restart=on-failure",
        "ProtectSystem=strict",
        "ReadWritePaths=/var/lib/tenure",
        "ExecStart=/usr/local/bin/tenure run --config /etc/tenure/tenure.toml",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit lacks {line}");
    }
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("tenure.service");
    let unit = unit.replace("/usr/local/bin/tenure", env!("CARGO_BIN_EXE_tenure"));
    std::fs::write(&copy, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run systemd-analyze ({e}): install systemd (Debian: apt-get install systemd; .ci/run does)")
        });
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    // It warns without failing (an unknown key, a bad value): none is expected.
    assert!(
        said.trim().is_empty(),
        "systemd-analyze verify said:\n{said}"
    );
}

#[test]
fn the_systemd_example_config_loads() {
    let config = Config::load(Some(&deploy("systemd/tenure.toml")), Overrides::default()).unwrap();
    assert_eq!(config.name, "n1");
    assert_eq!(config.data_dir, Path::new("/var/lib/tenure"));
    assert_eq!(config.peers.len(), 2);
    let tls = config.tls.expect("certificates configured");
    assert!(tls.cert.ends_with("certs/n1.pem"), "{tls:?}");
    assert!(config.metrics.is_some());
}

#[test]
fn each_kubernetes_node_config_loads_and_names_its_own_certificate() {
    let manifest = std::fs::read_to_string(deploy("kubernetes/tenure.yaml")).unwrap();
    assert!(
        manifest.contains(r#"args: ["run"]"#)
            && manifest.contains("value: /etc/tenure/config/$(POD_NAME).toml"),
        "the pod's config is named by the pod, in TENURE_CONFIG"
    );
    let configs = configmap_files(&manifest);
    assert_eq!(configs.len(), 3, "{configs:?}");
    let dir = tempfile::tempdir().unwrap();
    for (i, (file, text)) in configs.iter().enumerate() {
        let name = format!("tenure-{i}");
        assert_eq!(file, &format!("{name}.toml"));
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        let config = Config::load(Some(&path), Overrides::default())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(config.name, name);
        assert_eq!(
            config.advertise.as_deref(),
            Some(&*format!("{name}.tenure:7400"))
        );
        let peers: Vec<&str> = config.peers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(peers.len(), 2, "{file}: {peers:?}");
        assert!(!peers.contains(&name.as_str()), "{file}: {peers:?}");
        let tls = config.tls.expect("certificates configured");
        assert_eq!(
            tls.cert,
            Path::new(&format!("/etc/tenure/certs/{name}.pem"))
        );
        assert_eq!(tls.key, Path::new(&format!("/etc/tenure/certs/{name}.key")));
        assert_eq!(config.metrics.map(|m| m.port()), Some(9464));
        // The projected certs volume puts that node's Secret under those names.
        assert!(
            manifest.contains(&format!("name: {name}-tls")),
            "no Secret {name}-tls mounted"
        );
    }
}

/// The `NAME: |` blocks of the manifest's ConfigMap, dedented.
fn configmap_files(manifest: &str) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in manifest.lines() {
        if let Some(name) = line.strip_prefix("  ").and_then(|l| l.strip_suffix(": |")) {
            files.extend(current.take());
            current = Some((name.trim().to_string(), String::new()));
            continue;
        }
        if let Some((_, text)) = &mut current {
            match line.strip_prefix("    ") {
                Some(rest) => {
                    text.push_str(rest);
                    text.push('\n');
                }
                None => files.extend(current.take()),
            }
        }
    }
    files.extend(current);
    files
}

/// The preStop hook runs a command the binary accepts (`tenure drain --self`, reading the
/// pod's TENURE_CONFIG), within a grace period that leaves SIGTERM its own time after it.
#[test]
fn the_kubernetes_pre_stop_hook_drains_the_node_within_the_grace_period() {
    let manifest = std::fs::read_to_string(deploy("kubernetes/tenure.yaml")).unwrap();
    let hook = r#"command: ["/usr/local/bin/tenure", "drain", "--self", "--timeout", "60s"]"#;
    assert!(
        manifest.contains("preStop:") && manifest.contains(hook),
        "no {hook}"
    );
    let grace: u64 = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("terminationGracePeriodSeconds: "))
        .expect("terminationGracePeriodSeconds")
        .parse()
        .unwrap();
    // The hook's 60 s, then SIGTERM's bound with the default plugin limits (0.5 s stop
    // grace + 5 s cleanup + 5 s), with room to spare.
    assert!(
        grace >= 60 + 11 + 10,
        "terminationGracePeriodSeconds: {grace}"
    );

    // The hook's own arguments, with tenure-0's config as the pod sets it: the command
    // parses and gets as far as the node's certificate, which exists only in the pod.
    let (_, config) = configmap_files(&manifest).into_iter().next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tenure-0.toml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["drain", "--self", "--timeout", "60s"])
        .env("TENURE_CONFIG", &path)
        .env_remove("TENURE_NAME")
        .env_remove("TENURE_DATA_DIR")
        .env_remove("TENURE_LISTEN")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("no node certificate at /etc/tenure/certs/tenure-0.pem"),
        "{said}"
    );
}

//! Development certificates for the single-node default.
//!
//! `tenure run` without a config file is a one-node cluster that must work on the first
//! try, yet every node speaks mutual TLS and every admin command needs an operator
//! certificate. So on its first start the node makes a throwaway PKI in its data dir
//! ([`ensure_dev_certs`]): a CA, a certificate for the node, and one for a local operator,
//! which the admin commands (`tenure status`, …) use by default. Later starts reuse them.
//!
//! Choices, and why:
//! - **Long validity** ([`DEV_VALIDITY_DAYS`], ten years, for the CA and both leaves): a
//!   development node left running or restarted months later must not fail on an expired
//!   certificate nobody knew existed. A real cluster issues its own certificates
//!   (`tenure certs init` / `issue`, 90 days by default) and rotates them.
//! - **Never overwrite.** If some of the files exist but not all (a crash during the first
//!   start, or a file deleted by hand), nothing is made: a new CA would silently strand
//!   every certificate the old one signed. The error names the missing files and the way
//!   out. Files are written atomically, keys with mode 0600, the folder with mode 0700
//!   (see `files.rs`).
//! - **Checked on reuse.** The node certificate must still name this node (a changed
//!   `--name` otherwise shows up later as a puzzling handshake failure), and the operator
//!   files must hold an operator certificate.
//!
//! The CA key stays in the folder: it is a development CA, and keeping it lets an operator
//! issue more certificates from it (`tenure certs issue --ca DIR …`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::ca::{CA_CERT_FILE, CA_KEY_FILE, init_ca};
use super::identity::Kind;
use super::issue::issue_to;
use super::load::load_identity;
use super::names::validate_name;
use super::{Algo, IfExists, PkiError, Subject};
use crate::transport::TlsFiles;

/// The name in the development operator certificate.
pub const DEV_OPERATOR: &str = "local-operator";

/// The file stem of the development operator's certificate and key in the folder:
/// `operator.pem` and `operator.key`.
pub const DEV_OPERATOR_FILE: &str = "operator";

/// Validity of the development CA and certificates: ten years.
pub const DEV_VALIDITY_DAYS: u32 = 3650;

/// The development certificates in a folder.
#[derive(Clone, Debug)]
pub struct DevCerts {
    /// The folder (it holds `ca.key` too).
    pub dir: PathBuf,
    /// The node's files: `ca.pem`, `NODE.pem`, `NODE.key`.
    pub node: TlsFiles,
    /// The operator's files: `ca.pem`, `operator.pem`, `operator.key`.
    pub operator: TlsFiles,
    /// Whether this call made them (false: they existed and were reused).
    pub created: bool,
}

/// Makes development certificates for node `node` in `dir`, or reuses those there.
///
/// If none of `ca.pem`, `ca.key`, `NODE.pem`, `NODE.key`, `operator.pem` and
/// `operator.key` exists, creates a new Ed25519 CA and issues a node certificate for
/// `node` and an operator certificate for [`DEV_OPERATOR`], all valid for
/// [`DEV_VALIDITY_DAYS`]. If all exist, checks that the node certificate names `node` and
/// that the operator files hold an operator certificate, and returns them. If only some
/// exist, fails naming the missing ones and changes nothing.
pub fn ensure_dev_certs(dir: &Path, node: &str) -> Result<DevCerts, PkiError> {
    validate_name(node)?;
    if node == "ca" || node == DEV_OPERATOR_FILE {
        return Err(PkiError::BadName {
            name: node.to_owned(),
            reason: "its certificate file would collide with the development CA or operator \
                     files; choose another node name, or give the node certificates of its \
                     own ([tls] in the config)",
        });
    }
    let ca = dir.join(CA_CERT_FILE);
    let ca_key = dir.join(CA_KEY_FILE);
    let node_files = TlsFiles {
        ca: ca.clone(),
        cert: dir.join(format!("{node}.pem")),
        key: dir.join(format!("{node}.key")),
    };
    let operator_files = TlsFiles {
        ca: ca.clone(),
        cert: dir.join(format!("{DEV_OPERATOR_FILE}.pem")),
        key: dir.join(format!("{DEV_OPERATOR_FILE}.key")),
    };
    let all = [
        &ca,
        &ca_key,
        &node_files.cert,
        &node_files.key,
        &operator_files.cert,
        &operator_files.key,
    ];
    let mut missing = Vec::new();
    for path in all {
        if !exists(path)? {
            missing.push(path.clone());
        }
    }
    let certs = |created| DevCerts {
        dir: dir.to_owned(),
        node: node_files.clone(),
        operator: operator_files.clone(),
        created,
    };

    if missing.is_empty() {
        check_existing(node, &node_files, &operator_files)?;
        return Ok(certs(false));
    }
    if missing.len() < all.len() {
        let hint = if missing == [node_files.cert.clone(), node_files.key.clone()] {
            format!(
                "If the node was renamed, issue its certificate from the development CA: \
                 `tenure certs issue --ca {dir} --node {node} --out {dir} --days \
                 {DEV_VALIDITY_DAYS}`",
                dir = dir.display()
            )
        } else {
            "Restore the missing files, or move the folder away to have a new set made on \
             the next start"
                .to_owned()
        };
        return Err(PkiError::DevCertsIncomplete {
            dir: dir.to_owned(),
            missing,
            hint,
        });
    }

    // The CA first: a crash in between leaves an incomplete folder, reported next time.
    init_ca(dir, Algo::Ed25519, DEV_VALIDITY_DAYS, IfExists::Refuse)?;
    issue_to(
        dir,
        &Subject::Node(node.to_owned()),
        (&node_files.cert, &node_files.key),
        DEV_VALIDITY_DAYS,
        None,
        IfExists::Refuse,
    )?;
    issue_to(
        dir,
        &Subject::Operator(DEV_OPERATOR.to_owned()),
        (&operator_files.cert, &operator_files.key),
        DEV_VALIDITY_DAYS,
        None,
        IfExists::Refuse,
    )?;
    // They live in the node's data dir, where every file is owner-only: the certificates
    // (public, 0644 elsewhere) too. The folder is 0700, so nobody else saw them meanwhile.
    for cert in [&ca, &node_files.cert, &operator_files.cert] {
        crate::private_files::tighten(cert, crate::private_files::FILE_MODE).map_err(|source| {
            PkiError::Io {
                op: "setting permissions of",
                path: cert.clone(),
                source,
            }
        })?;
    }
    Ok(certs(true))
}

/// Whether `path` exists (a dangling symlink counts: it is not ours to replace).
fn exists(path: &Path) -> Result<bool, PkiError> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(PkiError::Io {
            op: "checking",
            path: path.to_owned(),
            source,
        }),
    }
}

/// Checks that existing development certificates are the node's and an operator's.
fn check_existing(node: &str, node_files: &TlsFiles, operator: &TlsFiles) -> Result<(), PkiError> {
    let found = load_identity(&node_files.cert, &node_files.key)?.identity;
    if found.kind != Kind::Node || found.name != node {
        return Err(PkiError::Certificate {
            origin: node_files.cert.display().to_string(),
            reason: format!(
                "is the certificate of {found}, not of node {node}; was the node renamed? \
                 Issue one for {node} from the development CA (`tenure certs issue --ca {} \
                 --node {node} --out {}`), or run the node under its old name",
                parent(&node_files.cert).display(),
                parent(&node_files.cert).display(),
            ),
        });
    }
    let found = load_identity(&operator.cert, &operator.key)?.identity;
    if found.kind != Kind::Operator {
        return Err(PkiError::Certificate {
            origin: operator.cert.display().to_string(),
            reason: format!(
                "is the certificate of {found}, not of an operator; the admin commands need \
                 an operator certificate there"
            ),
        });
    }
    Ok(())
}

fn parent(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, SystemTime};

    use tempfile::TempDir;

    use super::*;
    use crate::pki::load_ca_bundle;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn makes_a_ca_a_node_and_an_operator_once_then_reuses_them() {
        let tmp = TempDir::new().unwrap();
        let dir = tmp.path().join("data/certs");
        let made = ensure_dev_certs(&dir, "local").unwrap();
        assert!(made.created);
        assert_eq!(made.node.cert, dir.join("local.pem"));
        assert_eq!(made.node.key, dir.join("local.key"));
        assert_eq!(made.operator.cert, dir.join("operator.pem"));
        assert_eq!(made.operator.key, dir.join("operator.key"));
        assert_eq!(made.node.ca, dir.join("ca.pem"));
        for key in [&made.node.key, &made.operator.key, &dir.join("ca.key")] {
            assert_eq!(mode(key), 0o600, "{}", key.display());
        }
        assert_eq!(mode(&dir), 0o700);

        let node = load_identity(&made.node.cert, &made.node.key).unwrap();
        assert_eq!(
            (node.identity.kind, node.identity.name.as_str()),
            (Kind::Node, "local")
        );
        let operator = load_identity(&made.operator.cert, &made.operator.key).unwrap();
        assert_eq!(
            (operator.identity.kind, operator.identity.name.as_str()),
            (Kind::Operator, DEV_OPERATOR)
        );
        // Explicit, long validity: about ten years from now.
        let nine_years = Duration::from_secs(9 * 365 * 86_400);
        assert!(node.not_after > SystemTime::now() + nine_years);
        assert!(operator.not_after > SystemTime::now() + nine_years);
        assert_eq!(load_ca_bundle(&made.node.ca).unwrap().len(), 1);

        let before: Vec<Vec<u8>> = [&made.node.cert, &made.operator.cert, &made.node.ca]
            .iter()
            .map(|p| fs::read(p).unwrap())
            .collect();
        let again = ensure_dev_certs(&dir, "local").unwrap();
        assert!(!again.created);
        let after: Vec<Vec<u8>> = [&again.node.cert, &again.operator.cert, &again.node.ca]
            .iter()
            .map(|p| fs::read(p).unwrap())
            .collect();
        assert_eq!(before, after, "reused files must not change");
    }

    #[test]
    fn an_incomplete_folder_is_reported_and_left_alone() {
        let tmp = TempDir::new().unwrap();
        let dir = tmp.path().join("certs");
        let made = ensure_dev_certs(&dir, "local").unwrap();
        fs::remove_file(&made.operator.key).unwrap();
        fs::remove_file(&made.node.cert).unwrap();
        let ca_before = fs::read(&made.node.ca).unwrap();

        let err = ensure_dev_certs(&dir, "local").unwrap_err();
        let message = err.to_string();
        println!("{message}");
        assert!(
            matches!(err, PkiError::DevCertsIncomplete { ref missing, .. } if missing.len() == 2)
        );
        assert!(message.contains("operator.key"), "{message}");
        assert!(message.contains("local.pem"), "{message}");
        assert!(!message.contains("ca.pem"), "{message}");
        assert_eq!(fs::read(&made.node.ca).unwrap(), ca_before);
        assert!(!made.operator.key.exists() && !made.node.cert.exists());
    }

    #[test]
    fn a_renamed_node_is_told_what_to_do() {
        let tmp = TempDir::new().unwrap();
        let dir = tmp.path().join("certs");
        ensure_dev_certs(&dir, "local").unwrap();
        // Another name: its certificate is missing, the rest exists.
        let err = ensure_dev_certs(&dir, "n1").unwrap_err();
        println!("{err}");
        assert!(err.to_string().contains("n1.pem"), "{err}");
        assert!(err.to_string().contains("tenure certs issue"), "{err}");
        // A certificate of another node under this node's file name.
        fs::copy(dir.join("local.pem"), dir.join("n1.pem")).unwrap();
        fs::copy(dir.join("local.key"), dir.join("n1.key")).unwrap();
        let err = ensure_dev_certs(&dir, "n1").unwrap_err();
        println!("{err}");
        assert!(err.to_string().contains("not of node n1"), "{err}");
    }

    #[test]
    fn names_that_collide_with_the_fixed_files_are_refused() {
        let tmp = TempDir::new().unwrap();
        for name in ["ca", "operator", "Bad Name"] {
            let err = ensure_dev_certs(tmp.path(), name).unwrap_err();
            assert!(matches!(err, PkiError::BadName { .. }), "{err}");
        }
        assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0);
    }
}

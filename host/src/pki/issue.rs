//! Issuing leaf certificates, and rotating a node's key and certificate in place.
//!
//! Every issue or rotation makes a **new key**: a certificate is never re-signed over an old
//! key, so rotating also retires a key that may have leaked.
//!
//! Rotation replaces two files that a running node watches, and no file system renames two
//! files at once. So [`rotate`] writes both new files under temporary names first, then
//! renames the key into place and then the certificate. Between those two renames, a reader
//! sees the new key next to the old certificate; [`super::load_identity`] then fails with
//! [`PkiError::KeyMismatch`], which [`PkiError::is_transient`] classifies as worth a retry.
//! The key goes first so that a watcher woken by the certificate's change (the usual
//! trigger) finds a complete new pair; a watcher woken by the key's change may be early and
//! must retry on a mismatch, after a short delay, rather than give up or keep the half pair.

use std::path::{Path, PathBuf};

use time::OffsetDateTime;

use super::ca::{LoadedCa, load_ca};
use super::cert::{self, file_origin, invalid};
use super::files::{self, CERT_MODE, KEY_MODE};
use super::identity::{Identity, Kind, identity_in};
use super::load::read_certs;
use super::names::validate_name;
use super::{Algo, IfExists, PkiError, Subject, keys, params};

/// Issues a certificate for `subject`, signed by the CA in `ca_dir` (`ca.pem` + `ca.key`),
/// over a new key of `algo` (`None`: the CA's algorithm). Writes `NAME.pem` (the leaf
/// certificate alone) and `NAME.key` (mode 0600) atomically into `out_dir` (created, mode
/// 0700, if missing) and returns their paths, certificate first.
///
/// The certificate is valid from five minutes ago for `validity_days` (see
/// [`super::DEFAULT_LEAF_VALIDITY_DAYS`]), but never beyond the CA's own end. With
/// [`IfExists::Refuse`] existing files are left untouched and the call fails with
/// [`PkiError::Exists`].
pub fn issue(
    ca_dir: &Path,
    subject: &Subject,
    out_dir: &Path,
    validity_days: u32,
    algo: Option<Algo>,
    if_exists: IfExists,
) -> Result<(PathBuf, PathBuf), PkiError> {
    let name = subject.name();
    validate_name(name)?;
    let cert_path = out_dir.join(format!("{name}.pem"));
    let key_path = out_dir.join(format!("{name}.key"));
    issue_to(
        ca_dir,
        subject,
        (&cert_path, &key_path),
        validity_days,
        algo,
        if_exists,
    )?;
    Ok((cert_path, key_path))
}

/// [`issue`] into files of any name: `paths` is (certificate, key); their directory is
/// created (mode 0700) if missing.
pub(crate) fn issue_to(
    ca_dir: &Path,
    subject: &Subject,
    paths: (&Path, &Path),
    validity_days: u32,
    algo: Option<Algo>,
    if_exists: IfExists,
) -> Result<(), PkiError> {
    let (cert_path, key_path) = paths;
    validate_name(subject.name())?;
    if if_exists == IfExists::Refuse {
        files::refuse_existing(cert_path)?;
        files::refuse_existing(key_path)?;
    }

    let ca = load_ca(ca_dir)?;
    let leaf = make_leaf(&ca, subject, algo.unwrap_or(ca.algo), validity_days)?;

    if let Some(dir) = cert_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        files::ensure_dir(dir)?;
    }
    if let Some(dir) = key_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        files::ensure_dir(dir)?;
    }
    let staged_key = files::stage(key_path, leaf.key_pem.as_bytes(), KEY_MODE)?;
    let staged_cert = files::stage(cert_path, leaf.cert_pem.as_bytes(), CERT_MODE)?;
    staged_key.commit_as(if_exists)?;
    staged_cert.commit_as(if_exists)
}

/// Replaces node `node_name`'s key and certificate at `key_path` and `cert_path` with a new
/// key (of the same algorithm as the current certificate's) and a new certificate from the
/// CA in `ca_dir`, valid for `validity_days`.
///
/// The current certificate must exist and name node `node_name`, so that a mistyped path
/// cannot overwrite another node's files; the current key need not exist (rotating is also
/// how a lost key is replaced). Both files are replaced atomically, key first; see the
/// module documentation for what a concurrent reader may see, and why it must retry on
/// [`PkiError::KeyMismatch`]. The new files keep the owner and group of the old ones.
pub fn rotate(
    ca_dir: &Path,
    node_name: &str,
    cert_path: &Path,
    key_path: &Path,
    validity_days: u32,
) -> Result<(), PkiError> {
    validate_name(node_name)?;
    let subject = Subject::Node(node_name.to_owned());

    let current = read_certs(cert_path)?;
    let origin = file_origin(cert_path, 0, current.len());
    let x509 = cert::parse(&current[0], &origin)?;
    let identity = identity_in(&x509, &origin)?;
    let expected = Identity {
        kind: Kind::Node,
        name: node_name.to_owned(),
    };
    if identity != expected {
        return Err(invalid(
            &origin,
            format!("is the certificate of {identity}, not of {expected}; refusing to rotate it"),
        ));
    }
    let (algo, _) = cert::public_key(&x509, &origin)?;

    let ca = load_ca(ca_dir)?;
    let leaf = make_leaf(&ca, &subject, algo, validity_days)?;

    let staged_key = files::stage(key_path, leaf.key_pem.as_bytes(), KEY_MODE)?;
    let staged_cert = files::stage(cert_path, leaf.cert_pem.as_bytes(), CERT_MODE)?;
    staged_key.commit()?;
    staged_cert.commit()
}

/// A new key and the certificate for it, as PEM.
struct Leaf {
    key_pem: String,
    cert_pem: String,
}

/// Generates a key of `algo` and has `ca` sign a certificate for `subject` over it.
fn make_leaf(
    ca: &LoadedCa,
    subject: &Subject,
    algo: Algo,
    validity_days: u32,
) -> Result<Leaf, PkiError> {
    let params = params::leaf_params(
        subject,
        OffsetDateTime::now_utc(),
        validity_days,
        ca.not_after,
    )?;
    let key = keys::generate(algo)?;
    let cert = params
        .signed_by(&key, &ca.issuer)
        .map_err(|source| PkiError::Generate {
            what: format!("the certificate of {}", Identity::from(subject)),
            source,
        })?;
    Ok(Leaf {
        key_pem: key.serialize_pem(),
        cert_pem: cert.pem(),
    })
}

//! The cluster CA on disk: creating it, and loading it to sign with.
//!
//! A CA directory holds `ca.pem` (the self-signed CA certificate, which is also what goes
//! into every node's trust bundle) and `ca.key` (its private key, mode 0600, which should
//! live only where certificates are issued). Loading checks what rcgen would not: that the
//! certificate is a CA, that the key is its key, and that it has not expired, because a
//! certificate signed with the wrong key or by an expired CA fails much later, in a peer's
//! handshake, with a far less helpful message.

use std::path::{Path, PathBuf};

use rcgen::{Issuer, KeyPair};
use time::OffsetDateTime;

use super::cert::{self, file_origin, invalid};
use super::files::{self, CERT_MODE, KEY_MODE};
use super::load::read_certs;
use super::{Algo, IfExists, PkiError, keys, params};

/// The CA certificate's file name in a CA directory.
pub const CA_CERT_FILE: &str = "ca.pem";

/// The CA private key's file name in a CA directory.
pub const CA_KEY_FILE: &str = "ca.key";

/// Creates a self-signed cluster CA in `out_dir` (created, mode 0700, if missing): writes
/// `ca.pem` and `ca.key` (mode 0600) atomically and returns their paths, certificate first.
///
/// The CA is valid from five minutes ago for `validity_days` (see
/// [`super::DEFAULT_CA_VALIDITY_DAYS`]). With [`IfExists::Refuse`] an existing `ca.pem` or
/// `ca.key` is left untouched and the call fails with [`PkiError::Exists`].
pub fn init_ca(
    out_dir: &Path,
    algo: Algo,
    validity_days: u32,
    if_exists: IfExists,
) -> Result<(PathBuf, PathBuf), PkiError> {
    let cert_path = out_dir.join(CA_CERT_FILE);
    let key_path = out_dir.join(CA_KEY_FILE);
    if if_exists == IfExists::Refuse {
        files::refuse_existing(&cert_path)?;
        files::refuse_existing(&key_path)?;
    }

    let params = params::ca_params(OffsetDateTime::now_utc(), validity_days)?;
    let key = keys::generate(algo)?;
    let cert = params
        .self_signed(&key)
        .map_err(|source| PkiError::Generate {
            what: "the CA certificate".into(),
            source,
        })?;

    files::ensure_dir(out_dir)?;
    let staged_key = files::stage(&key_path, key.serialize_pem().as_bytes(), KEY_MODE)?;
    let staged_cert = files::stage(&cert_path, cert.pem().as_bytes(), CERT_MODE)?;
    // The key first: a `ca.pem` is only ever visible next to the key that signed it.
    staged_key.commit_as(if_exists)?;
    staged_cert.commit_as(if_exists)?;
    Ok((cert_path, key_path))
}

/// A CA loaded from its directory, ready to sign leaves.
pub(crate) struct LoadedCa {
    /// rcgen's issuer: the CA's name, key identifier and key.
    pub(crate) issuer: Issuer<'static, KeyPair>,
    /// The CA key's algorithm, the default for the keys of the leaves it signs.
    pub(crate) algo: Algo,
    /// When the CA expires; no leaf it signs ends later.
    pub(crate) not_after: OffsetDateTime,
}

/// Loads `ca_dir/ca.pem` (its first certificate) and `ca_dir/ca.key`, checking that the
/// certificate is an unexpired CA and that the key is its key.
pub(crate) fn load_ca(ca_dir: &Path) -> Result<LoadedCa, PkiError> {
    let cert_path = ca_dir.join(CA_CERT_FILE);
    let key_path = ca_dir.join(CA_KEY_FILE);
    let certs = read_certs(&cert_path)?;
    let ca_der = &certs[0];
    let origin = file_origin(&cert_path, 0, certs.len());
    let x509 = cert::parse(ca_der, &origin)?;
    if !cert::is_ca(&x509) {
        return Err(invalid(
            &origin,
            "is not a CA certificate (its basicConstraints do not say cA=TRUE)",
        ));
    }
    let (algo, public_key) = cert::public_key(&x509, &origin)?;
    let not_after = x509.validity().not_after;
    if not_after.to_datetime() <= OffsetDateTime::now_utc() {
        return Err(invalid(
            &origin,
            format!(
                "the CA expired on {not_after}; create a new CA (`tenure certs init`) \
                 and rotate to it"
            ),
        ));
    }

    let key = keys::load(&key_path)?;
    if key.signer.public_key() != public_key {
        return Err(PkiError::KeyMismatch {
            cert: cert_path,
            key: key_path,
        });
    }
    let signing_key = keys::to_rcgen(&key, &key_path)?;
    let issuer = Issuer::from_ca_cert_der(ca_der, signing_key)
        .map_err(|e| invalid(&origin, format!("rcgen cannot use it as an issuer ({e})")))?;
    Ok(LoadedCa {
        issuer,
        algo,
        not_after: not_after.to_datetime(),
    })
}

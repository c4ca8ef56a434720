//! What the module reads out of an X.509 certificate, with x509-parser.
//!
//! Only facts are extracted here (the key, the validity window, CA-ness, key usages); what
//! they mean for Tenure is decided by the callers. Errors name their `origin`: a file path
//! with the certificate's position, or `certificate sha256:…` for one that came over the
//! network, so that a message always says which certificate is meant.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use x509_parser::certificate::X509Certificate;
use x509_parser::oid_registry::{OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_SIG_ED25519};
use x509_parser::prelude::FromDer;
use x509_parser::time::ASN1Time;

use super::identity::fingerprint;
use super::{Algo, PkiError};

/// How to name a certificate that was not read from a file.
pub(crate) fn der_origin(cert_der: &[u8]) -> String {
    format!("certificate {}", fingerprint(cert_der))
}

/// How to name the `index`-th (0-based) certificate of a file holding `count` of them.
pub(crate) fn file_origin(path: &Path, index: usize, count: usize) -> String {
    if count == 1 {
        path.display().to_string()
    } else {
        format!("{} (certificate {} of {count})", path.display(), index + 1)
    }
}

/// A [`PkiError::Certificate`] about `origin`.
pub(crate) fn invalid(origin: &str, reason: impl Into<String>) -> PkiError {
    PkiError::Certificate {
        origin: origin.to_owned(),
        reason: reason.into(),
    }
}

/// Parses one DER certificate, refusing trailing bytes.
pub(crate) fn parse<'a>(der: &'a [u8], origin: &str) -> Result<X509Certificate<'a>, PkiError> {
    match X509Certificate::from_der(der) {
        Ok(([], x509)) => Ok(x509),
        Ok(_) => Err(invalid(origin, "trailing bytes after the certificate")),
        Err(e) => Err(invalid(
            origin,
            format!("not a valid X.509 certificate ({e})"),
        )),
    }
}

/// The certificate's key algorithm and raw public key (the SubjectPublicKeyInfo bit string).
pub(crate) fn public_key<'a>(
    x509: &'a X509Certificate<'_>,
    origin: &str,
) -> Result<(Algo, &'a [u8]), PkiError> {
    let spki = x509.public_key();
    let oid = &spki.algorithm.algorithm;
    let algo = if *oid == OID_SIG_ED25519 {
        Algo::Ed25519
    } else if *oid == OID_KEY_TYPE_EC_PUBLIC_KEY {
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok());
        match curve {
            Some(curve) if curve == OID_EC_P256 => Algo::P256,
            _ => {
                return Err(invalid(
                    origin,
                    "its key is ECDSA on a curve other than P-256; \
                     Tenure accepts Ed25519 and ECDSA P-256 keys",
                ));
            }
        }
    } else {
        return Err(invalid(
            origin,
            format!(
                "its key algorithm (OID {oid}) is not supported; \
                 Tenure accepts Ed25519 and ECDSA P-256 keys"
            ),
        ));
    };
    Ok((algo, spki.subject_public_key.data.as_ref()))
}

/// When the DER certificate `der` stops being valid; `None` if it does not parse.
pub fn not_after(der: &[u8]) -> Option<SystemTime> {
    parse(der, "certificate").ok().map(|x509| validity(&x509).1)
}

/// The validity window as system times.
pub(crate) fn validity(x509: &X509Certificate<'_>) -> (SystemTime, SystemTime) {
    let v = x509.validity();
    (system_time(v.not_before), system_time(v.not_after))
}

/// An ASN.1 time as a system time (dates before 1970 are possible in X.509).
pub(crate) fn system_time(t: ASN1Time) -> SystemTime {
    let secs = t.timestamp();
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
}

/// Whether the certificate says it is a CA (basicConstraints cA = true).
pub(crate) fn is_ca(x509: &X509Certificate<'_>) -> bool {
    matches!(x509.basic_constraints(), Ok(Some(bc)) if bc.value.ca)
}

/// The TLS roles the certificate's extended key usage allows, as (serverAuth, clientAuth).
/// A certificate without the extension (or with anyExtendedKeyUsage) allows both.
pub(crate) fn tls_usages(
    x509: &X509Certificate<'_>,
    origin: &str,
) -> Result<(bool, bool), PkiError> {
    match x509.extended_key_usage() {
        Ok(None) => Ok((true, true)),
        Ok(Some(eku)) => {
            let eku = eku.value;
            Ok((eku.any || eku.server_auth, eku.any || eku.client_auth))
        }
        Err(e) => Err(invalid(
            origin,
            format!("its extendedKeyUsage extension cannot be read ({e})"),
        )),
    }
}

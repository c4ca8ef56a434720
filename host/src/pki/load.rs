//! Loading a node's (or operator's) own identity and the cluster's trust bundle.
//!
//! Loading is where a misconfiguration can still be explained well: once the files are in a
//! rustls config, a wrong key or a missing SAN shows up as a handshake failure on some other
//! node. So [`load_identity`] checks everything Tenure relies on before it hands the pair
//! over: the certificate names a Tenure identity, its extended key usage allows the TLS
//! roles that identity plays, and the key is the certificate's key.
//!
//! It does not refuse an expired or not-yet-valid certificate: a node should start and say
//! so loudly ([`super::expiry_warning`]) rather than fail to start during an incident, and
//! the handshake refuses the certificate anyway.

use std::path::Path;
use std::time::SystemTime;

use rustls_pki_types::pem::SectionKind;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::cert::{self, file_origin, invalid};
use super::expiry::{ExpiryWarning, expiry_warning};
use super::identity::{Identity, Kind, fingerprint, identity_in};
use super::sign::Signer;
use super::{PkiError, files, keys};

/// A loaded certificate and key pair: what the TLS configuration and the envelope signer
/// need. The name is historical: an operator's pair loads into the same type, with
/// `identity.kind == Kind::Operator`.
#[derive(Debug)]
pub struct NodeIdentity {
    /// The certificate chain from the file, leaf first (intermediates, if any, follow).
    pub cert_chain: Vec<CertificateDer<'static>>,
    /// The private key as PKCS#8 DER (a SEC1 key from the file is converted).
    pub key: PrivateKeyDer<'static>,
    /// Who the leaf certificate speaks for.
    pub identity: Identity,
    /// Start of the leaf's validity.
    pub not_before: SystemTime,
    /// End of the leaf's validity.
    pub not_after: SystemTime,
    /// Signs protocol messages with the same key.
    pub signer: Signer,
}

impl NodeIdentity {
    /// The leaf certificate.
    pub fn leaf(&self) -> &CertificateDer<'static> {
        &self.cert_chain[0]
    }

    /// The leaf certificate's [`fingerprint`].
    pub fn fingerprint(&self) -> String {
        fingerprint(self.leaf())
    }

    /// Whether the leaf needs attention at wall-clock time `now` (see [`expiry_warning`]).
    pub fn expiry_warning(&self, now: SystemTime) -> Option<ExpiryWarning> {
        expiry_warning(self.not_before, self.not_after, now)
    }
}

/// Loads a certificate (chain) and its private key, checking that they belong together and
/// that the certificate carries a Tenure identity usable for its role: a node certificate
/// must allow serverAuth and clientAuth, an operator certificate clientAuth.
///
/// Keys may be PKCS#8 (Ed25519 or ECDSA P-256) or SEC1 (P-256). A failure during a rotation
/// of the files is [`PkiError::is_transient`]: retry shortly.
pub fn load_identity(cert_path: &Path, key_path: &Path) -> Result<NodeIdentity, PkiError> {
    let cert_chain = read_certs(cert_path)?;
    let origin = file_origin(cert_path, 0, cert_chain.len());
    let x509 = cert::parse(&cert_chain[0], &origin)?;
    if cert::is_ca(&x509) {
        return Err(invalid(
            &origin,
            "is a CA certificate, not a node or operator certificate (is this the CA bundle?)",
        ));
    }
    let identity = identity_in(&x509, &origin)?;
    let (server, client) = cert::tls_usages(&x509, &origin)?;
    let needed = match identity.kind {
        Kind::Node if !(server && client) => Some("serverAuth and clientAuth"),
        Kind::Operator if !client => Some("clientAuth"),
        _ => None,
    };
    if let Some(needed) = needed {
        return Err(invalid(
            &origin,
            format!(
                "it is the certificate of {identity}, which needs extendedKeyUsage {needed}; \
                 its extendedKeyUsage does not allow that"
            ),
        ));
    }
    let (_, public_key) = cert::public_key(&x509, &origin)?;
    let (not_before, not_after) = cert::validity(&x509);

    let key = keys::load(key_path)?;
    if key.signer.public_key() != public_key {
        return Err(PkiError::KeyMismatch {
            cert: cert_path.to_owned(),
            key: key_path.to_owned(),
        });
    }

    Ok(NodeIdentity {
        cert_chain,
        key: PrivateKeyDer::Pkcs8(key.pkcs8),
        identity,
        not_before,
        not_after,
        signer: key.signer,
    })
}

/// Loads a trust bundle: a PEM file holding one or more CA certificates (several while a CA
/// is being rotated). Fails, naming the file and the certificate, if the file holds no
/// certificate, one that does not parse, or one that is not a CA.
pub fn load_ca_bundle(path: &Path) -> Result<Vec<CertificateDer<'static>>, PkiError> {
    let certs = read_certs(path)?;
    for (index, der) in certs.iter().enumerate() {
        let origin = file_origin(path, index, certs.len());
        let x509 = cert::parse(der, &origin)?;
        if !cert::is_ca(&x509) {
            return Err(invalid(
                &origin,
                "is not a CA certificate (its basicConstraints do not say cA=TRUE); a trust \
                 bundle holds only CA certificates (is this a node certificate?)",
            ));
        }
    }
    Ok(certs)
}

/// The certificates in a PEM file, in file order; fails if there are none.
pub(crate) fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, PkiError> {
    let sections = files::pem_sections(path, &files::read(path)?)?;
    let certs: Vec<CertificateDer<'static>> = sections
        .iter()
        .filter(|(kind, _)| *kind == SectionKind::Certificate)
        .map(|(_, der)| CertificateDer::from(der.clone()))
        .collect();
    if !certs.is_empty() {
        return Ok(certs);
    }
    let holds_key = sections.iter().any(|(kind, _)| {
        matches!(
            kind,
            SectionKind::PrivateKey | SectionKind::EcPrivateKey | SectionKind::RsaPrivateKey
        )
    });
    let reason = if holds_key {
        "holds a private key, not a certificate (are the certificate and key paths swapped?)"
    } else {
        "no certificate found (expected \"-----BEGIN CERTIFICATE-----\" sections)"
    };
    Err(PkiError::Pem {
        path: path.to_owned(),
        reason: reason.into(),
    })
}

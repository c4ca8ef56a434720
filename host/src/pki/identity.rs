//! The identity a certificate speaks for, read from its subjectAltName.
//!
//! The subject's common name is free text that tools fill in differently, so Tenure ignores
//! it: the identity is the one `tenure://node/NAME` or `tenure://operator/NAME` URI in the
//! SAN. A node certificate must also carry `DNS:NAME`, because that is what webpki matches
//! when a peer dials the node by name (webpki ignores URI SANs), and the two must agree or a
//! certificate could pass the handshake as one node and be taken for another.
//!
//! Other URIs (e.g. SPIFFE IDs from a shared CA) are ignored, but more than one `tenure://`
//! URI is refused: a certificate speaks for exactly one name.

use std::fmt;

use sha2::{Digest, Sha256};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

use super::cert::{self, der_origin, invalid};
use super::names::validate_name;
use super::{PkiError, Subject};

/// The URI scheme of Tenure identities.
const SCHEME: &str = "tenure://";

/// Which kind of party a certificate identifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A cluster node (`tenure://node/NAME`).
    Node,
    /// An operator (`tenure://operator/NAME`).
    Operator,
}

impl Kind {
    /// The path segment of the identity URI: `node` or `operator`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Node => "node",
            Kind::Operator => "operator",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a certificate speaks for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    /// Node or operator.
    pub kind: Kind,
    /// The name (see [`super::validate_name`] for the rule).
    pub name: String,
}

impl Identity {
    /// The SAN URI that carries this identity, e.g. `tenure://node/n1`.
    pub fn uri(&self) -> String {
        format!("{SCHEME}{}/{}", self.kind, self.name)
    }
}

impl fmt::Display for Identity {
    /// Formats as `node n1` or `operator alice`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

impl From<&Subject> for Identity {
    fn from(subject: &Subject) -> Identity {
        Identity {
            kind: subject.kind(),
            name: subject.name().to_owned(),
        }
    }
}

/// The identity in a DER certificate's subjectAltName: exactly one `tenure://node/NAME` or
/// `tenure://operator/NAME` URI with a valid name, plus `DNS:NAME` for a node.
pub fn identity_of(cert_der: &[u8]) -> Result<Identity, PkiError> {
    let origin = der_origin(cert_der);
    identity_in(&cert::parse(cert_der, &origin)?, &origin)
}

/// The certificate's fingerprint, `sha256:` and the lower-case hex SHA-256 of its DER: the
/// key under which revocations are kept and the handle used in messages.
pub fn fingerprint(cert_der: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(cert_der)))
}

/// The fingerprint of the certificate's key, `sha256:` and the lower-case hex SHA-256 of
/// its DER SubjectPublicKeyInfo: what revocations are kept under. A certificate's own
/// fingerprint is not enough: the same key and the same signed contents can be encoded
/// as another valid certificate (with a P-256 CA, the signature (r, s) has the twin
/// (r, n − s), which verifies too), and a key whose certificate is reissued is the same
/// key.
pub fn key_fingerprint(cert_der: &[u8]) -> Result<String, PkiError> {
    let origin = der_origin(cert_der);
    let x509 = cert::parse(cert_der, &origin)?;
    Ok(format!(
        "sha256:{}",
        hex::encode(Sha256::digest(x509.public_key().raw))
    ))
}

/// [`identity_of`] for a parsed certificate, with errors naming `origin`.
pub(crate) fn identity_in(x509: &X509Certificate<'_>, origin: &str) -> Result<Identity, PkiError> {
    const MISSING: &str = "no tenure://node/NAME or tenure://operator/NAME URI in its \
         subjectAltName, so it names no Tenure node or operator (issue it with \
         `tenure certs issue`, or add e.g. `subjectAltName=URI:tenure://node/NAME,DNS:NAME`)";
    let names = match x509.subject_alternative_name() {
        Ok(Some(san)) => san.value.general_names.as_slice(),
        Ok(None) => return Err(invalid(origin, MISSING)),
        Err(e) => {
            return Err(invalid(
                origin,
                format!("its subjectAltName extension cannot be read ({e})"),
            ));
        }
    };

    let uris: Vec<&str> = names
        .iter()
        .filter_map(|n| match n {
            GeneralName::URI(uri) if uri.starts_with(SCHEME) => Some(*uri),
            _ => None,
        })
        .collect();
    let uri = match uris.as_slice() {
        [] => return Err(invalid(origin, MISSING)),
        [uri] => *uri,
        many => {
            return Err(invalid(
                origin,
                format!(
                    "its subjectAltName holds {} tenure:// URIs ({}); \
                     a certificate must name exactly one node or operator",
                    many.len(),
                    many.join(", ")
                ),
            ));
        }
    };

    let rest = &uri[SCHEME.len()..];
    let (kind, name) = if let Some(name) = rest.strip_prefix("node/") {
        (Kind::Node, name)
    } else if let Some(name) = rest.strip_prefix("operator/") {
        (Kind::Operator, name)
    } else {
        return Err(invalid(
            origin,
            format!(
                "its subjectAltName URI {uri:?} is neither tenure://node/NAME \
                 nor tenure://operator/NAME"
            ),
        ));
    };
    validate_name(name).map_err(|e| {
        invalid(
            origin,
            format!("its subjectAltName URI {uri:?} carries an {e}"),
        )
    })?;

    if kind == Kind::Node
        && !names
            .iter()
            .any(|n| matches!(n, GeneralName::DNSName(dns) if *dns == name))
    {
        return Err(invalid(
            origin,
            format!(
                "it names node {name:?} in its URI SAN but lacks the matching DNS:{name} SAN \
                 (peers dial nodes by that name; add `DNS:{name}` to the subjectAltName)"
            ),
        ));
    }

    Ok(Identity {
        kind,
        name: name.to_owned(),
    })
}

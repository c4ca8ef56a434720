//! The cluster PKI: who a node or an operator is, and how that is proven.
//!
//! A Tenure cluster trusts one (or, during a CA rotation, several) cluster CAs. The CA signs
//! two kinds of leaf certificates, and the name a leaf speaks for lives in its
//! subjectAltName (docs/design.md §5.1, "Identity"):
//!
//! | kind | SAN | extended key usage |
//! |---|---|---|
//! | node | `URI:tenure://node/NAME` and `DNS:NAME` | serverAuth, clientAuth |
//! | operator | `URI:tenure://operator/NAME` | clientAuth |
//!
//! The same key pair that authenticates a node in the TLS handshake signs its protocol
//! envelopes ([`Signer`], [`Verifier`]), so a receiver can check that an envelope's sender is
//! the TLS peer it arrived from without a second key distribution scheme.
//!
//! What this module provides:
//! - **Making certificates** ([`init_ca`], [`issue()`], [`rotate`]) with rcgen. Validity windows
//!   are always explicit (rcgen's default of 1975–4096 is never used), keys are written mode
//!   0600, and every file is written atomically (a temporary file in the same directory,
//!   fsync, rename), so a node that watches its files never reads half a PEM.
//! - **Loading certificates** ([`load_identity`], [`load_ca_bundle`]) made by us or by other
//!   tools: openssl, cfssl and step produce PKCS#8 or SEC1 keys, Ed25519 or ECDSA P-256.
//! - **Reading identities** out of certificates ([`identity_of`], [`fingerprint`]), for our
//!   own certificate at start-up and for a peer's after its handshake.
//! - **Expiry** bookkeeping ([`expiry_warning`]) so that a node can warn well ahead of time.
//! - **Development certificates** ([`ensure_dev_certs`]) for the single-node default.
//!
//! What it deliberately does not do:
//! - **Chain validation.** rustls/webpki validates the peer's chain against the CA bundle in
//!   the handshake; repeating it here would be a second, weaker implementation. Functions here
//!   trust that the certificate they are given has already been validated (or is our own).
//! - **Revocation.** Revoked fingerprints live in the replicated state (docs/design.md §5); this
//!   module only computes the [`fingerprint`] they are keyed by.
//! - **Watching files.** A watcher reloads with [`load_identity`]; see [`rotate`] for the
//!   window in which it may see a new key next to the old certificate, and
//!   [`PkiError::is_transient`] for which failures are worth a retry.
//! - **RSA, P-384, Ed448 and encrypted keys.** They are refused with a message that says how
//!   to make a key we accept.
//!
//! Platform: Unix only (file modes, ownership and directory fsync).

mod ca;
mod cert;
mod dev;
mod error;
mod expiry;
mod files;
mod identity;
mod issue;
mod keys;
mod load;
mod names;
mod params;
mod sign;

#[cfg(test)]
pub(crate) mod openssl_tests;
#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;

pub use ca::{CA_CERT_FILE, CA_KEY_FILE, init_ca};
pub use cert::not_after;
pub use dev::{DEV_OPERATOR, DEV_OPERATOR_FILE, DEV_VALIDITY_DAYS, DevCerts, ensure_dev_certs};
pub use error::PkiError;
pub use expiry::{EXPIRY_WARNING_FLOOR, ExpiryWarning, expiry_warning};
pub use identity::{Identity, Kind, fingerprint, identity_of, key_fingerprint};
pub use issue::{issue, rotate};
pub use load::{NodeIdentity, load_ca_bundle, load_identity};
pub use names::validate_name;
pub use sign::{Signer, Verifier, verify};

/// Validity of a new cluster CA when the caller has no opinion: ten years.
pub const DEFAULT_CA_VALIDITY_DAYS: u32 = 3650;

/// Validity of a new node or operator certificate when the caller has no opinion.
pub const DEFAULT_LEAF_VALIDITY_DAYS: u32 = 90;

/// The longest validity accepted for any certificate (100 years), which keeps the date
/// arithmetic far from overflow and catches a mistyped number of days.
pub const MAX_VALIDITY_DAYS: u32 = 36_500;

/// The key algorithms Tenure generates and accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    /// Ed25519 (RFC 8032): small keys, fast deterministic signatures. The default.
    Ed25519,
    /// ECDSA on NIST P-256 with SHA-256, for environments that require NIST curves.
    P256,
}

impl Algo {
    /// The spelling used on the command line and in messages: `ed25519` or `p256`.
    pub fn as_str(self) -> &'static str {
        match self {
            Algo::Ed25519 => "ed25519",
            Algo::P256 => "p256",
        }
    }
}

impl fmt::Display for Algo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algo {
    type Err = String;

    /// Parses `ed25519` or `p256` (also `p-256`, `ecdsa-p256`), case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "ed25519" => Ok(Algo::Ed25519),
            "p256" | "p-256" | "ecdsa-p256" => Ok(Algo::P256),
            other => Err(format!(
                "unknown key algorithm {other:?}: expected ed25519 or p256"
            )),
        }
    }
}

/// Whom a new leaf certificate speaks for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Subject {
    /// A cluster node: may serve and dial other nodes.
    Node(String),
    /// A person or tool acting on the cluster: may only dial nodes.
    Operator(String),
}

impl Subject {
    /// The name the certificate will carry.
    pub fn name(&self) -> &str {
        match self {
            Subject::Node(name) | Subject::Operator(name) => name,
        }
    }

    /// Node or operator.
    pub fn kind(&self) -> Kind {
        match self {
            Subject::Node(_) => Kind::Node,
            Subject::Operator(_) => Kind::Operator,
        }
    }
}

/// What to do when a file about to be created already exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfExists {
    /// Leave the existing file alone and fail with [`PkiError::Exists`]. Losing a CA key
    /// strands every certificate it signed, so this is what callers should pass by default.
    Refuse,
    /// Replace the existing file (atomically).
    Overwrite,
}

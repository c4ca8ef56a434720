//! The one error type of the PKI boundary.
//!
//! Certificate problems are configuration problems, and the person fixing them reads the
//! message, not the variant: every message names the file (or, for a certificate that came
//! over the network, its fingerprint) and says what is wrong with it, and where there is a
//! standard fix (an openssl conversion, a missing SAN) the message says it.
//!
//! [`PkiError::is_transient`] separates the failures a file watcher should retry (a pair
//! caught in the middle of a rotation, a file caught half written by a tool that does not
//! write atomically) from those that need a person.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong making, loading or checking certificates and signatures.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A file or directory could not be read, created, written or renamed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "reading" or "renaming into place".
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },

    /// A file that would be created already exists and the caller asked not to overwrite it.
    #[error(
        "{} already exists; refusing to overwrite it (move it away, or pass --force)",
        path.display()
    )]
    Exists {
        /// The existing file.
        path: PathBuf,
    },

    /// A PEM file is malformed, or holds nothing of the kind expected.
    #[error("{}: {reason}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A private key is in a format or of an algorithm Tenure does not accept.
    #[error("{}: {reason}", path.display())]
    UnsupportedKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong, and how to make a key Tenure accepts.
        reason: String,
    },

    /// A certificate cannot be parsed, or does not carry what Tenure requires of it.
    #[error("{origin}: {reason}")]
    Certificate {
        /// The file (with the certificate's position when it holds several) or, for a
        /// certificate not read from a file, `certificate sha256:…`.
        origin: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A private key is not the one whose public key a certificate carries.
    #[error(
        "the private key in {} does not belong to the certificate in {} \
         (their public keys differ); if a rotation is in progress this resolves itself, \
         otherwise the files are from different pairs",
        key.display(),
        cert.display()
    )]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },

    /// A node or operator name breaks the naming rules (see [`super::validate_name`]).
    #[error("invalid name {name:?}: {reason}")]
    BadName {
        /// The name as given.
        name: String,
        /// The rule it breaks.
        reason: &'static str,
    },

    /// A validity period of zero days or of more than [`super::MAX_VALIDITY_DAYS`].
    #[error(
        "validity of {days} days is out of range: expected 1 to {max}",
        max = super::MAX_VALIDITY_DAYS
    )]
    BadValidity {
        /// The number of days asked for.
        days: u32,
    },

    /// rcgen could not generate a key or build a certificate.
    #[error("cannot generate {what}: {source}")]
    Generate {
        /// What was being made, e.g. "the CA certificate".
        what: String,
        /// rcgen's error.
        source: rcgen::Error,
    },

    /// Some of the development certificate files exist but not all (see
    /// [`super::ensure_dev_certs`]); nothing was made or changed.
    #[error(
        "the development certificates in {} are incomplete: missing {}; refusing to make \
         new ones over the rest (a new CA would strand every certificate the old one \
         signed). {hint}",
        dir.display(),
        missing.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    DevCertsIncomplete {
        /// The folder.
        dir: PathBuf,
        /// The files that are missing.
        missing: Vec<PathBuf>,
        /// What to do about it.
        hint: String,
    },

    /// A signature did not verify against a certificate's public key.
    #[error("signature does not verify with the public key of certificate {fingerprint}")]
    BadSignature {
        /// The fingerprint of the certificate whose key was used.
        fingerprint: String,
    },
}

impl PkiError {
    /// Whether retrying the same operation shortly may succeed without anyone fixing
    /// anything: a key/certificate pair read between the two renames of a rotation, or a
    /// file read while a non-atomic tool (`cp`, an editor) was still writing it. A watcher
    /// retries these a few times before it reports them; everything else needs a person.
    pub fn is_transient(&self) -> bool {
        match self {
            PkiError::KeyMismatch { .. } | PkiError::Pem { .. } => true,
            PkiError::Io { source, .. } => source.kind() == io::ErrorKind::NotFound,
            PkiError::Exists { .. }
            | PkiError::UnsupportedKey { .. }
            | PkiError::Certificate { .. }
            | PkiError::BadName { .. }
            | PkiError::BadValidity { .. }
            | PkiError::Generate { .. }
            | PkiError::DevCertsIncomplete { .. }
            | PkiError::BadSignature { .. } => false,
        }
    }
}

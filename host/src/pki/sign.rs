//! Signing and verifying protocol messages with the keys of the TLS identities.
//!
//! Every envelope is signed by its sender's certificate key (docs/design.md §5.2, "Transport and
//! envelopes"), so that a message relayed or replayed by anyone else is caught by the
//! receiver. Both algorithms go through ring:
//!
//! - Ed25519: deterministic 64-byte signatures.
//! - ECDSA P-256 with SHA-256, signatures in ASN.1 DER (the encoding X.509 and TLS use),
//!   with a fresh nonce from the system RNG for every signature.
//!
//! A receiver verifies thousands of envelopes from the same few peers, so [`Verifier`] is
//! built once per peer certificate (parsing the certificate is the costly part) and then
//! only holds the algorithm and the raw public key.

use std::fmt;

use ring::error::KeyRejected;
use ring::rand::SystemRandom;
use ring::signature::{
    self, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair, UnparsedPublicKey,
};

use super::cert::{self, der_origin};
use super::identity::fingerprint;
use super::{Algo, PkiError};

/// A private key that signs protocol messages. Holds no copy of the key's DER.
pub struct Signer {
    key: SigningKey,
}

/// The ring key pair behind a [`Signer`].
enum SigningKey {
    Ed25519(Ed25519KeyPair),
    P256 {
        key: EcdsaKeyPair,
        rng: SystemRandom,
    },
}

impl Signer {
    /// Builds a signer from PKCS#8 DER holding an `algo` key.
    ///
    /// Ed25519 keys are accepted in PKCS#8 v1 (openssl) as well as v2 (rcgen, ring); v1
    /// carries no public key to check against, which is why callers compare the derived
    /// public key with the certificate's.
    pub(crate) fn from_pkcs8(algo: Algo, pkcs8: &[u8]) -> Result<Signer, KeyRejected> {
        let key = match algo {
            Algo::Ed25519 => {
                SigningKey::Ed25519(Ed25519KeyPair::from_pkcs8_maybe_unchecked(pkcs8)?)
            }
            Algo::P256 => {
                let rng = SystemRandom::new();
                let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8, &rng)?;
                SigningKey::P256 { key, rng }
            }
        };
        Ok(Signer { key })
    }

    /// Signs `msg`: 64 bytes for Ed25519, an ASN.1 DER `ECDSA-Sig-Value` for P-256.
    ///
    /// # Panics
    /// If the operating system's random number generator fails while making an ECDSA nonce
    /// (`getrandom` does not fail on Linux once the kernel's pool is initialised). Signing
    /// without a nonce is impossible and with a bad one would leak the key.
    pub fn sign(&self, msg: &[u8]) -> Vec<u8> {
        match &self.key {
            SigningKey::Ed25519(key) => key.sign(msg).as_ref().to_vec(),
            SigningKey::P256 { key, rng } => key
                .sign(rng, msg)
                .expect("the system random number generator failed while signing")
                .as_ref()
                .to_vec(),
        }
    }

    /// The key's algorithm.
    pub fn algorithm(&self) -> Algo {
        match self.key {
            SigningKey::Ed25519(_) => Algo::Ed25519,
            SigningKey::P256 { .. } => Algo::P256,
        }
    }

    /// The raw public key, as it appears in a certificate's SubjectPublicKeyInfo: 32 bytes
    /// for Ed25519, an uncompressed 65-byte point for P-256.
    pub fn public_key(&self) -> &[u8] {
        match &self.key {
            SigningKey::Ed25519(key) => key.public_key().as_ref(),
            SigningKey::P256 { key, .. } => key.public_key().as_ref(),
        }
    }
}

impl fmt::Debug for Signer {
    /// Shows the algorithm and public key only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("algorithm", &self.algorithm())
            .field("public_key", &hex::encode(self.public_key()))
            .finish()
    }
}

/// The public half of a certificate, ready to verify signatures made by its key.
#[derive(Clone, Debug)]
pub struct Verifier {
    algo: Algo,
    public_key: Vec<u8>,
    fingerprint: String,
}

impl Verifier {
    /// Reads the algorithm and public key out of a DER certificate. Fails if the certificate
    /// does not parse or its key is neither Ed25519 nor ECDSA P-256.
    pub fn from_cert(cert_der: &[u8]) -> Result<Verifier, PkiError> {
        let origin = der_origin(cert_der);
        let x509 = cert::parse(cert_der, &origin)?;
        let (algo, public_key) = cert::public_key(&x509, &origin)?;
        Ok(Verifier {
            algo,
            public_key: public_key.to_vec(),
            fingerprint: fingerprint(cert_der),
        })
    }

    /// Checks that `sig` is a signature of `msg` by the certificate's key.
    pub fn verify(&self, msg: &[u8], sig: &[u8]) -> Result<(), PkiError> {
        let algorithm: &'static dyn signature::VerificationAlgorithm = match self.algo {
            Algo::Ed25519 => &signature::ED25519,
            Algo::P256 => &signature::ECDSA_P256_SHA256_ASN1,
        };
        UnparsedPublicKey::new(algorithm, &self.public_key)
            .verify(msg, sig)
            .map_err(|_| PkiError::BadSignature {
                fingerprint: self.fingerprint.clone(),
            })
    }

    /// The algorithm of the certificate's key.
    pub fn algorithm(&self) -> Algo {
        self.algo
    }

    /// The [`fingerprint`] of the certificate this verifier was built from.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

/// Checks that `sig` is a signature of `msg` by the key of the DER certificate `cert_der`.
/// Parses the certificate every time: keep a [`Verifier`] for repeated checks.
pub fn verify(cert_der: &[u8], msg: &[u8], sig: &[u8]) -> Result<(), PkiError> {
    Verifier::from_cert(cert_der)?.verify(msg, sig)
}

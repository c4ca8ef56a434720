//! Private keys: generating ours, and reading keys made by any common tool.
//!
//! Tenure holds every private key as unencrypted PKCS#8 DER, the form ring loads and rustls
//! accepts. What tools write differs:
//!
//! - rcgen and `openssl genpkey` write PKCS#8 (`-----BEGIN PRIVATE KEY-----`). An Ed25519
//!   key from openssl is PKCS#8 v1 (no embedded public key), which ring loads only through
//!   `from_pkcs8_maybe_unchecked`; the key/certificate match check in `load` makes up for
//!   the consistency check that skips. Our own Ed25519 keys are written as v1 too, because
//!   OpenSSL 3.0 cannot read the v2 keys ring generates (see [`generate`]).
//! - `openssl ecparam -genkey`, cfssl and step write P-256 keys as SEC1
//!   (`-----BEGIN EC PRIVATE KEY-----`). ring reads only PKCS#8, but PKCS#8 is just SEC1
//!   wrapped in a fixed header naming the algorithm, so we add that header ourselves
//!   ([`sec1_to_pkcs8`]) instead of sending every cfssl user to openssl.
//! - RSA, other curves, Ed448, encrypted and OpenSSH keys are refused, with a message that
//!   says what the file holds and what to run instead.

use std::path::Path;

use rustls_pki_types::PrivatePkcs8KeyDer;
use rustls_pki_types::pem::SectionKind;
use x509_parser::asn1_rs::{Any, Class, FromDer, Oid, Tag};
use x509_parser::oid_registry::{
    OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_PKCS1_RSAENCRYPTION, OID_SIG_ED25519,
};
use x509_parser::x509::AlgorithmIdentifier;

use super::sign::Signer;
use super::{Algo, PkiError, files};

/// The command that turns any unencrypted key openssl can read into a key Tenure accepts.
const CONVERT_HINT: &str =
    "convert it with `openssl pkcs8 -topk8 -nocrypt -in OLD.key -out NEW.key`";

/// The command that makes a key Tenure accepts from scratch.
const GENERATE_HINT: &str = "make an Ed25519 or ECDSA P-256 key instead, e.g. \
     `openssl genpkey -algorithm ed25519 -out KEY` or \
     `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out KEY`";

/// A private key read from a file, in the one form the rest of the module uses.
pub(crate) struct LoadedKey {
    /// The key as PKCS#8 DER (converted if the file held SEC1).
    pub(crate) pkcs8: PrivatePkcs8KeyDer<'static>,
    /// The key, ready to sign; building it is what proves the DER is a usable key.
    pub(crate) signer: Signer,
}

/// Generates a fresh key pair for `algo`, in a PKCS#8 form that every common tool reads.
///
/// ring writes Ed25519 keys as PKCS#8 v2, with the public key appended, and OpenSSL 3.0
/// cannot read that (`openssl pkey` fails with "unsupported"), which would break
/// `curl --key` and every `openssl` inspection of our keys. So Ed25519 keys are rewritten
/// as PKCS#8 v1, the private seed alone, which is also what `openssl genpkey` writes.
pub(crate) fn generate(algo: Algo) -> Result<rcgen::KeyPair, PkiError> {
    let failed = |source| PkiError::Generate {
        what: format!("an {algo} key"),
        source,
    };
    let key = rcgen::KeyPair::generate_for(rcgen_algorithm(algo)).map_err(failed)?;
    match algo {
        Algo::P256 => Ok(key),
        Algo::Ed25519 => {
            let v1 = pkcs8_v1(key.serialized_der())
                .ok_or_else(|| failed(rcgen::Error::CouldNotParseKeyPair))?;
            rcgen::KeyPair::from_pkcs8_der_and_sign_algo(
                &PrivatePkcs8KeyDer::from(v1),
                &rcgen::PKCS_ED25519,
            )
            .map_err(failed)
        }
    }
}

/// A PKCS#8 key without the optional fields of v2 (RFC 5958 `OneAsymmetricKey`:
/// attributes and public key): version 0, the algorithm and the private key, unchanged.
fn pkcs8_v1(der: &[u8]) -> Option<Vec<u8>> {
    let (_, info) = Any::from_der(der).ok()?;
    let (after_version, _version) = Any::from_der(info.data).ok()?;
    let (after_algorithm, _) = Any::from_der(after_version).ok()?;
    let (after_key, _) = Any::from_der(after_algorithm).ok()?;
    let algorithm = &after_version[..after_version.len() - after_algorithm.len()];
    let private_key = &after_algorithm[..after_algorithm.len() - after_key.len()];
    let mut body = vec![0x02, 0x01, 0x00]; // INTEGER 0
    body.extend_from_slice(algorithm);
    body.extend_from_slice(private_key);
    Some(der_tlv(0x30, &body))
}

/// rcgen's name for the signature algorithm of an `algo` key.
pub(crate) fn rcgen_algorithm(algo: Algo) -> &'static rcgen::SignatureAlgorithm {
    match algo {
        Algo::Ed25519 => &rcgen::PKCS_ED25519,
        Algo::P256 => &rcgen::PKCS_ECDSA_P256_SHA256,
    }
}

/// The key as an rcgen key pair, to sign certificates with.
pub(crate) fn to_rcgen(key: &LoadedKey, path: &Path) -> Result<rcgen::KeyPair, PkiError> {
    let algo = key.signer.algorithm();
    rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&key.pkcs8, rcgen_algorithm(algo)).map_err(
        |source| PkiError::UnsupportedKey {
            path: path.to_owned(),
            reason: format!("rcgen cannot use this {algo} key for signing: {source}"),
        },
    )
}

/// Reads the one private key in a PEM file.
pub(crate) fn load(path: &Path) -> Result<LoadedKey, PkiError> {
    let refuse = |reason: String| PkiError::UnsupportedKey {
        path: path.to_owned(),
        reason,
    };
    let bytes = files::read(path)?;
    let sections = files::pem_sections(path, &bytes)?;
    let mut keys = sections.iter().filter(|(kind, _)| {
        matches!(
            kind,
            SectionKind::PrivateKey | SectionKind::EcPrivateKey | SectionKind::RsaPrivateKey
        )
    });
    let Some((kind, der)) = keys.next() else {
        return Err(explain_missing_key(path, &bytes, &sections));
    };
    if keys.next().is_some() {
        return Err(refuse(
            "holds more than one private key; expected exactly one".into(),
        ));
    }

    let (algo, pkcs8) = match kind {
        SectionKind::PrivateKey => (pkcs8_algorithm(der).map_err(refuse)?, der.clone()),
        SectionKind::EcPrivateKey => {
            check_sec1_curve(der).map_err(refuse)?;
            (Algo::P256, sec1_to_pkcs8(der))
        }
        _ => {
            return Err(refuse(format!(
                "holds an RSA key (\"RSA PRIVATE KEY\"); RSA is not supported: {GENERATE_HINT}"
            )));
        }
    };
    let signer = Signer::from_pkcs8(algo, &pkcs8).map_err(|rejected| {
        refuse(format!(
            "not a usable {algo} private key (ring says: {rejected}); {CONVERT_HINT}"
        ))
    })?;
    Ok(LoadedKey {
        pkcs8: PrivatePkcs8KeyDer::from(pkcs8),
        signer,
    })
}

/// Why a file without a `PRIVATE KEY` section is not a key, as precisely as its labels tell.
fn explain_missing_key(path: &Path, bytes: &[u8], sections: &[(SectionKind, Vec<u8>)]) -> PkiError {
    let labels = files::pem_labels(bytes);
    let has = |label: &str| labels.iter().any(|l| l == label);
    let reason = if has("ENCRYPTED PRIVATE KEY") {
        "the private key is encrypted; Tenure reads unencrypted keys (protect them with file \
         permissions): decrypt it with `openssl pkey -in OLD.key -out NEW.key`"
            .to_owned()
    } else if has("OPENSSH PRIVATE KEY") {
        format!("holds an OpenSSH key, not a PEM private key; {GENERATE_HINT}")
    } else if sections
        .iter()
        .any(|(kind, _)| *kind == SectionKind::Certificate)
    {
        "holds a certificate, not a private key (are the certificate and key paths swapped?)"
            .to_owned()
    } else {
        "no private key found (expected a \"-----BEGIN PRIVATE KEY-----\" section)".to_owned()
    };
    PkiError::UnsupportedKey {
        path: path.to_owned(),
        reason,
    }
}

/// The algorithm named in a PKCS#8 `PrivateKeyInfo`, if it is one Tenure supports.
fn pkcs8_algorithm(der: &[u8]) -> Result<Algo, String> {
    let malformed = || format!("not a valid PKCS#8 private key; {CONVERT_HINT}");
    let (_, info) = Any::from_der(der).map_err(|_| malformed())?;
    if info.header.tag() != Tag::Sequence {
        return Err(malformed());
    }
    // PrivateKeyInfo ::= SEQUENCE { version INTEGER, privateKeyAlgorithm AlgorithmIdentifier, … }
    let (rest, _version) = Any::from_der(info.data).map_err(|_| malformed())?;
    let (_, algorithm) = AlgorithmIdentifier::from_der(rest).map_err(|_| malformed())?;
    let oid = &algorithm.algorithm;
    if *oid == OID_SIG_ED25519 {
        Ok(Algo::Ed25519)
    } else if *oid == OID_KEY_TYPE_EC_PUBLIC_KEY {
        let curve = algorithm.parameters.as_ref().and_then(|p| p.as_oid().ok());
        match curve {
            Some(curve) if curve == OID_EC_P256 => Ok(Algo::P256),
            Some(curve) => Err(wrong_curve(&curve)),
            None => Err(malformed()),
        }
    } else if *oid == OID_PKCS1_RSAENCRYPTION {
        Err(format!(
            "holds an RSA key; RSA is not supported: {GENERATE_HINT}"
        ))
    } else {
        Err(format!(
            "holds a key of algorithm {} (OID {oid}), which is not supported: {GENERATE_HINT}",
            algorithm_name(oid)
        ))
    }
}

/// Checks that a SEC1 `ECPrivateKey` is on P-256. A key without the optional curve field
/// is assumed to be P-256; ring refuses it later if its length says otherwise.
fn check_sec1_curve(der: &[u8]) -> Result<(), String> {
    let malformed = || format!("not a valid SEC1 EC private key; {CONVERT_HINT}");
    let (_, key) = Any::from_der(der).map_err(|_| malformed())?;
    // ECPrivateKey ::= SEQUENCE { version, privateKey,
    //                             [0] parameters OPTIONAL, [1] publicKey OPTIONAL }
    let mut rest = key.data;
    while !rest.is_empty() {
        let (next, field) = Any::from_der(rest).map_err(|_| malformed())?;
        rest = next;
        if field.header.class() == Class::ContextSpecific && field.header.tag() == Tag(0) {
            let (_, curve) = Any::from_der(field.data).map_err(|_| malformed())?;
            let curve = curve.as_oid().map_err(|_| malformed())?;
            return if curve == OID_EC_P256 {
                Ok(())
            } else {
                Err(wrong_curve(&curve))
            };
        }
    }
    Ok(())
}

/// Wraps a SEC1 `ECPrivateKey` on P-256 in a PKCS#8 `PrivateKeyInfo` (RFC 5208, RFC 5915 §1).
pub(crate) fn sec1_to_pkcs8(sec1: &[u8]) -> Vec<u8> {
    // AlgorithmIdentifier { id-ecPublicKey (1.2.840.10045.2.1), prime256v1 (1.2.840.10045.3.1.7) }
    const P256_ALGORITHM_ID: &[u8] = &[
        0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86,
        0x48, 0xce, 0x3d, 0x03, 0x01, 0x07,
    ];
    const VERSION_0: &[u8] = &[0x02, 0x01, 0x00];
    let mut body = Vec::with_capacity(sec1.len() + 32);
    body.extend_from_slice(VERSION_0);
    body.extend_from_slice(P256_ALGORITHM_ID);
    body.extend(der_tlv(0x04, sec1)); // OCTET STRING
    der_tlv(0x30, &body) // SEQUENCE
}

/// One DER tag-length-value with a definite length (short or long form).
fn der_tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let len = content.len();
    let mut out = vec![tag];
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// The message for an EC key on a curve other than P-256.
fn wrong_curve(curve: &Oid<'_>) -> String {
    format!(
        "holds an ECDSA key on curve {} (OID {curve}); \
         only P-256 (prime256v1) is supported: {GENERATE_HINT}",
        curve_name(curve)
    )
}

/// Human names of curves people are likely to try.
fn curve_name(oid: &Oid<'_>) -> &'static str {
    match oid.to_id_string().as_str() {
        "1.3.132.0.34" => "P-384",
        "1.3.132.0.35" => "P-521",
        "1.3.132.0.10" => "secp256k1",
        _ => "unknown",
    }
}

/// Human names of key algorithms people are likely to try.
fn algorithm_name(oid: &Oid<'_>) -> &'static str {
    match oid.to_id_string().as_str() {
        "1.3.101.113" => "Ed448",
        "1.3.101.110" => "X25519",
        "1.3.101.111" => "X448",
        "1.2.840.113549.1.1.10" => "RSA-PSS",
        "1.2.840.10040.4.1" => "DSA",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_lengths_use_the_shortest_form() {
        assert_eq!(der_tlv(0x04, &[1, 2]), vec![0x04, 2, 1, 2]);
        let long = der_tlv(0x04, &[0; 200]);
        assert_eq!(&long[..3], &[0x04, 0x81, 200]);
        let longer = der_tlv(0x04, &[0; 300]);
        assert_eq!(&longer[..4], &[0x04, 0x82, 0x01, 0x2c]);
    }

    #[test]
    fn generated_keys_are_pkcs8_of_their_algorithm() {
        for algo in [Algo::Ed25519, Algo::P256] {
            let key = generate(algo).unwrap();
            assert_eq!(pkcs8_algorithm(key.serialized_der()), Ok(algo));
            let signer = Signer::from_pkcs8(algo, key.serialized_der()).unwrap();
            assert_eq!(signer.public_key(), key.public_key_raw());
        }
    }

    #[test]
    fn ed25519_keys_are_written_as_pkcs8_v1() {
        let der = generate(Algo::Ed25519).unwrap().serialized_der().to_vec();
        // SEQUENCE { INTEGER 0, { id-Ed25519 }, OCTET STRING { OCTET STRING seed } }: 48 bytes.
        assert_eq!(der.len(), 48);
        assert_eq!(
            &der[..16],
            &[
                0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
                0x04, 0x20
            ]
        );
    }
}

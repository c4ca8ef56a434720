//! Tests of the PKI with certificates that the module makes itself (rcgen). Certificates
//! made by the openssl command line are tested in `openssl_tests.rs`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{CertificateParams, KeyPair, SanType};
use rustls_pki_types::pem::{PemObject, SectionKind};
use tempfile::TempDir;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::*;

const DAY: Duration = Duration::from_secs(86_400);
const ALGOS: [Algo; 2] = [Algo::Ed25519, Algo::P256];

/// A CA in `dir/ca`.
fn make_ca(dir: &Path, algo: Algo) -> PathBuf {
    let ca_dir = dir.join("ca");
    init_ca(&ca_dir, algo, DEFAULT_CA_VALIDITY_DAYS, IfExists::Refuse).unwrap();
    ca_dir
}

/// A certificate for `subject` in `dir/certs`, with the CA's algorithm.
fn make_leaf(ca_dir: &Path, dir: &Path, subject: Subject) -> (PathBuf, PathBuf) {
    issue(
        ca_dir,
        &subject,
        &dir.join("certs"),
        DEFAULT_LEAF_VALIDITY_DAYS,
        None,
        IfExists::Refuse,
    )
    .unwrap()
}

fn node(name: &str) -> Subject {
    Subject::Node(name.into())
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn der_of(path: &Path) -> Vec<u8> {
    load_ca_bundle_unchecked(path).remove(0)
}

/// The certificates of a PEM file, without the CA check of `load_ca_bundle`.
fn load_ca_bundle_unchecked(path: &Path) -> Vec<Vec<u8>> {
    <(SectionKind, Vec<u8>)>::pem_file_iter(path)
        .unwrap()
        .map(|s| s.unwrap())
        .filter(|(kind, _)| *kind == SectionKind::Certificate)
        .map(|(_, der)| der)
        .collect()
}

fn seconds(d: Duration) -> i64 {
    d.as_secs() as i64
}

#[test]
fn node_and_operator_certificates_load_with_their_identity() {
    for algo in ALGOS {
        let dir = TempDir::new().unwrap();
        let ca_dir = make_ca(dir.path(), algo);
        assert_eq!(mode(&ca_dir.join(CA_KEY_FILE)), 0o600);
        assert_eq!(mode(&ca_dir), 0o700);

        let (cert, key) = make_leaf(&ca_dir, dir.path(), node("n1"));
        assert_eq!(cert, dir.path().join("certs/n1.pem"));
        assert_eq!(key, dir.path().join("certs/n1.key"));
        assert_eq!(mode(&key), 0o600);
        // The certificate file holds the leaf and nothing else.
        let sections: Vec<_> = <(SectionKind, Vec<u8>)>::pem_file_iter(&cert)
            .unwrap()
            .collect();
        assert_eq!(sections.len(), 1);

        let id = load_identity(&cert, &key).unwrap();
        assert_eq!(
            id.identity,
            Identity {
                kind: Kind::Node,
                name: "n1".into()
            }
        );
        assert_eq!(id.cert_chain.len(), 1);
        assert_eq!(id.signer.algorithm(), algo);
        assert!(matches!(id.key, rustls_pki_types::PrivateKeyDer::Pkcs8(_)));
        assert_eq!(identity_of(id.leaf()).unwrap(), id.identity);
        let fp = id.fingerprint();
        assert!(fp.starts_with("sha256:") && fp.len() == 7 + 64, "{fp}");

        let (cert, key) = make_leaf(&ca_dir, dir.path(), Subject::Operator("alice".into()));
        let op = load_identity(&cert, &key).unwrap();
        assert_eq!(op.identity.kind, Kind::Operator);
        assert_eq!(op.identity.name, "alice");
        assert_eq!(op.identity.uri(), "tenure://operator/alice");
    }
}

#[test]
fn signatures_verify_and_tampering_is_caught() {
    for algo in ALGOS {
        let dir = TempDir::new().unwrap();
        let ca_dir = make_ca(dir.path(), algo);
        let (c1, k1) = make_leaf(&ca_dir, dir.path(), node("n1"));
        let (c2, _) = make_leaf(&ca_dir, dir.path(), node("n2"));
        let n1 = load_identity(&c1, &k1).unwrap();
        let n2_cert = der_of(&c2);

        let msg = b"append-entries term=3 index=41";
        let sig = n1.signer.sign(msg);
        if algo == Algo::Ed25519 {
            assert_eq!(sig.len(), 64);
        }
        verify(n1.leaf(), msg, &sig).unwrap();
        let verifier = Verifier::from_cert(n1.leaf()).unwrap();
        assert_eq!(verifier.algorithm(), algo);
        assert_eq!(verifier.fingerprint(), n1.fingerprint());
        verifier.verify(msg, &sig).unwrap();

        let err = verifier
            .verify(b"append-entries term=3 index=42", &sig)
            .unwrap_err();
        assert!(matches!(err, PkiError::BadSignature { .. }), "{err}");
        assert!(err.to_string().contains(&n1.fingerprint()), "{err}");
        assert!(verify(&n2_cert, msg, &sig).is_err(), "another node's key");
        let mut bad = sig.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(verifier.verify(msg, &bad).is_err(), "flipped signature bit");
        assert!(verifier.verify(msg, &[]).is_err(), "empty signature");
    }
}

#[test]
fn a_leaf_key_may_differ_from_the_ca_key() {
    let dir = TempDir::new().unwrap();
    let ca_dir = make_ca(dir.path(), Algo::Ed25519);
    let (cert, key) = issue(
        &ca_dir,
        &node("n1"),
        dir.path(),
        30,
        Some(Algo::P256),
        IfExists::Refuse,
    )
    .unwrap();
    let id = load_identity(&cert, &key).unwrap();
    assert_eq!(id.signer.algorithm(), Algo::P256);
    verify(id.leaf(), b"m", &id.signer.sign(b"m")).unwrap();
}

#[test]
fn a_key_that_does_not_match_its_certificate_is_refused() {
    let dir = TempDir::new().unwrap();
    let ca_dir = make_ca(dir.path(), Algo::Ed25519);
    let (c1, _) = make_leaf(&ca_dir, dir.path(), node("n1"));
    let (_, k2) = make_leaf(&ca_dir, dir.path(), node("n2"));
    let err = load_identity(&c1, &k2).unwrap_err();
    assert!(matches!(err, PkiError::KeyMismatch { .. }), "{err}");
    assert!(err.is_transient());
    let msg = err.to_string();
    assert!(msg.contains("n1.pem") && msg.contains("n2.key"), "{msg}");

    // A key of the other algorithm is a mismatch too, not a parse error.
    let (_, p256_key) = issue(
        &ca_dir,
        &node("n3"),
        dir.path(),
        30,
        Some(Algo::P256),
        IfExists::Refuse,
    )
    .unwrap();
    let err = load_identity(&c1, &p256_key).unwrap_err();
    assert!(matches!(err, PkiError::KeyMismatch { .. }), "{err}");
}

#[test]
fn swapped_or_wrong_files_are_explained() {
    let dir = TempDir::new().unwrap();
    let ca_dir = make_ca(dir.path(), Algo::Ed25519);
    let (cert, key) = make_leaf(&ca_dir, dir.path(), node("n1"));

    let err = load_identity(&key, &cert).unwrap_err().to_string();
    assert!(err.contains("n1.key") && err.contains("swapped"), "{err}");

    let err = load_identity(&ca_dir.join(CA_CERT_FILE), &ca_dir.join(CA_KEY_FILE))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ca.pem") && err.contains("is a CA certificate"),
        "{err}"
    );

    let missing = dir.path().join("nope.pem");
    let err = load_identity(&missing, &key).unwrap_err();
    assert!(err.to_string().contains("nope.pem"), "{err}");
    assert!(err.is_transient(), "a file missing mid-rename may appear");

    let garbage = dir.path().join("garbage.key");
    fs::write(&garbage, "hello").unwrap();
    let err = load_identity(&cert, &garbage).unwrap_err().to_string();
    assert!(
        err.contains("garbage.key") && err.contains("no private key"),
        "{err}"
    );
}

#[test]
fn rotate_replaces_key_and_certificate_in_place() {
    for algo in ALGOS {
        let dir = TempDir::new().unwrap();
        let ca_dir = make_ca(dir.path(), Algo::Ed25519);
        let (cert, key) = issue(
            &ca_dir,
            &node("n1"),
            dir.path(),
            90,
            Some(algo),
            IfExists::Refuse,
        )
        .unwrap();
        let before = load_identity(&cert, &key).unwrap();
        let old_key = fs::read(&key).unwrap();

        rotate(&ca_dir, "n1", &cert, &key, 30).unwrap();

        let after = load_identity(&cert, &key).unwrap();
        assert_ne!(fs::read(&key).unwrap(), old_key, "a new key");
        assert_ne!(
            after.fingerprint(),
            before.fingerprint(),
            "a new certificate"
        );
        assert_ne!(after.signer.public_key(), before.signer.public_key());
        assert_eq!(after.identity, before.identity);
        assert_eq!(after.signer.algorithm(), algo, "the algorithm is kept");
        assert_eq!(mode(&key), 0o600);
        let lifetime = after.not_after.duration_since(after.not_before).unwrap();
        assert_eq!(
            seconds(lifetime),
            seconds(30 * DAY + Duration::from_secs(300))
        );
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
        // The old certificate no longer verifies signatures by the new key.
        let sig = after.signer.sign(b"m");
        assert!(verify(before.leaf(), b"m", &sig).is_err());
    }
}

#[test]
fn a_reader_during_rotations_sees_whole_files_only() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let dir = TempDir::new().unwrap();
    let ca_dir = make_ca(dir.path(), Algo::Ed25519);
    let (cert, key) = make_leaf(&ca_dir, dir.path(), node("n1"));
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (cert, key, done) = (cert.clone(), key.clone(), done.clone());
        std::thread::spawn(move || {
            let (mut loaded, mut mismatched) = (0, 0);
            while !done.load(Ordering::Relaxed) {
                match load_identity(&cert, &key) {
                    Ok(_) => loaded += 1,
                    // The documented window between the two renames.
                    Err(PkiError::KeyMismatch { .. }) => mismatched += 1,
                    Err(other) => panic!("a reader saw a partial file: {other}"),
                }
            }
            (loaded, mismatched)
        })
    };
    for _ in 0..30 {
        rotate(&ca_dir, "n1", &cert, &key, 30).unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let (loaded, _mismatched) = reader.join().unwrap();
    assert!(loaded > 0);
    load_identity(&cert, &key).unwrap();
}

#[test]
fn rotate_refuses_a_certificate_of_another_node() {
    let dir = TempDir::new().unwrap();
    let ca_dir = make_ca(dir.path(), Algo::Ed25519);
    let (cert, key) = make_leaf(&ca_dir, dir.path(), node("n1"));
    let original = fs::read(&cert).unwrap();
    let err = rotate(&ca_dir, "n2", &cert, &key, 30)
        .unwrap_err()
        .to_string();
    assert!(err.contains("node n1") && err.contains("node n2"), "{err}");
    assert_eq!(fs::read(&cert).unwrap(), original);

    let err = rotate(&ca_dir, "n1", &dir.path().join("none.pem"), &key, 30).unwrap_err();
    assert!(err.to_string().contains("none.pem"), "{err}");
}

#[test]
fn validity_is_the_requested_window() {
    let dir = TempDir::new().unwrap();
    let ca_dir = dir.path().join("ca");
    let started = std::time::SystemTime::now();
    init_ca(&ca_dir, Algo::P256, 400, IfExists::Refuse).unwrap();
    let (cert, key) = issue(&ca_dir, &node("n1"), dir.path(), 45, None, IfExists::Refuse).unwrap();
    let id = load_identity(&cert, &key).unwrap();

    let backdate = Duration::from_secs(300);
    let lifetime = id.not_after.duration_since(id.not_before).unwrap();
    assert_eq!(seconds(lifetime), seconds(45 * DAY + backdate));
    let lag = started.duration_since(id.not_before).unwrap();
    assert!(lag >= backdate - Duration::from_secs(1) && lag <= backdate + Duration::from_secs(60));
    assert_eq!(id.expiry_warning(std::time::SystemTime::now()), None);

    let ca_der = der_of(&ca_dir.join(CA_CERT_FILE));
    let (_, ca) = X509Certificate::from_der(&ca_der).unwrap();
    let v = ca.validity();
    assert_eq!(
        v.not_after.timestamp() - v.not_before.timestamp(),
        seconds(400 * DAY + backdate)
    );

    // A leaf asked to outlive its CA ends with it.
    let (cert, _) = issue(
        &ca_dir,
        &node("n2"),
        dir.path(),
        1000,
        None,
        IfExists::Refuse,
    )
    .unwrap();
    let leaf_der = der_of(&cert);
    let (_, leaf) = X509Certificate::from_der(&leaf_der).unwrap();
    assert_eq!(leaf.validity().not_after, v.not_after);

    let err = issue(&ca_dir, &node("n3"), dir.path(), 0, None, IfExists::Refuse).unwrap_err();
    assert!(matches!(err, PkiError::BadValidity { days: 0 }), "{err}");
    let err = init_ca(&dir.path().join("ca2"), Algo::P256, 0, IfExists::Refuse).unwrap_err();
    assert!(matches!(err, PkiError::BadValidity { days: 0 }), "{err}");
}

#[test]
fn certificates_have_the_tenure_profile() {
    let dir = TempDir::new().unwrap();
    let ca_dir = make_ca(dir.path(), Algo::Ed25519);
    let ca_der = der_of(&ca_dir.join(CA_CERT_FILE));
    let (_, ca) = X509Certificate::from_der(&ca_der).unwrap();
    assert_eq!(
        ca.subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap(),
        "Tenure cluster CA"
    );
    let bc = ca.basic_constraints().unwrap().unwrap().value;
    assert!(bc.ca && bc.path_len_constraint == Some(0));
    let ku = ca.key_usage().unwrap().unwrap().value;
    assert!(ku.key_cert_sign() && ku.crl_sign() && !ku.digital_signature());

    let (cert, _) = make_leaf(&ca_dir, dir.path(), node("n1"));
    let der = der_of(&cert);
    let (_, leaf) = X509Certificate::from_der(&der).unwrap();
    assert!(!leaf.is_ca());
    assert_eq!(leaf.issuer(), ca.subject());
    let eku = leaf.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && eku.client_auth);
    assert!(leaf.key_usage().unwrap().unwrap().value.digital_signature());
    let sans = &leaf
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names;
    let sans: Vec<String> = sans.iter().map(|n| n.to_string()).collect();
    assert!(
        sans.contains(&"URI(tenure://node/n1)".to_owned()),
        "{sans:?}"
    );
    assert!(sans.contains(&"DNSName(n1)".to_owned()), "{sans:?}");
    // The leaf's signature verifies with the CA's key.
    leaf.verify_signature(Some(ca.public_key())).unwrap();

    let (cert, _) = make_leaf(&ca_dir, dir.path(), Subject::Operator("alice".into()));
    let der = der_of(&cert);
    let (_, op) = X509Certificate::from_der(&der).unwrap();
    let eku = op.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);

    // Two certificates for the same name still differ in serial.
    let (again, _) = issue(
        &ca_dir,
        &node("n1"),
        &dir.path().join("again"),
        90,
        None,
        IfExists::Refuse,
    )
    .unwrap();
    let der2 = der_of(&again);
    let (_, leaf2) = X509Certificate::from_der(&der2).unwrap();
    assert_ne!(leaf.raw_serial(), leaf2.raw_serial());
}

#[test]
fn bad_names_are_refused() {
    for good in ["n1", "node-7", "a", &"a".repeat(63), "1a"] {
        validate_name(good).unwrap();
    }
    let bad = [
        ("", "empty"),
        (&"a".repeat(64) as &str, "63"),
        ("N1", "lower-case"),
        ("n_1", "lower-case"),
        ("n.1", "lower-case"),
        ("né", "lower-case"),
        ("-n1", "start or end"),
        ("n1-", "start or end"),
        ("123", "letter"),
    ];
    for (name, why) in bad {
        let err = validate_name(name).unwrap_err().to_string();
        assert!(err.contains(why), "{name:?}: {err}");
    }

    let dir = TempDir::new().unwrap();
    let ca_dir = make_ca(dir.path(), Algo::Ed25519);
    let out = dir.path().join("out");
    let err = issue(&ca_dir, &node("Bad_Name"), &out, 90, None, IfExists::Refuse).unwrap_err();
    assert!(matches!(err, PkiError::BadName { .. }), "{err}");
    assert!(err.to_string().contains("\"Bad_Name\""), "{err}");
    assert!(!out.exists(), "nothing is written for a refused name");
    let err = issue(
        &ca_dir,
        &Subject::Operator("../x".into()),
        &out,
        90,
        None,
        IfExists::Refuse,
    )
    .unwrap_err();
    assert!(matches!(err, PkiError::BadName { .. }), "{err}");
}

#[test]
fn existing_files_are_not_overwritten_unless_asked() {
    let dir = TempDir::new().unwrap();
    let ca_dir = make_ca(dir.path(), Algo::Ed25519);
    let ca_key = fs::read(ca_dir.join(CA_KEY_FILE)).unwrap();
    let err = init_ca(&ca_dir, Algo::Ed25519, 10, IfExists::Refuse).unwrap_err();
    assert!(matches!(err, PkiError::Exists { .. }), "{err}");
    assert!(err.to_string().contains("ca.pem"), "{err}");
    assert_eq!(fs::read(ca_dir.join(CA_KEY_FILE)).unwrap(), ca_key);

    init_ca(&ca_dir, Algo::P256, 10, IfExists::Overwrite).unwrap();
    assert_ne!(fs::read(ca_dir.join(CA_KEY_FILE)).unwrap(), ca_key);
    assert_eq!(mode(&ca_dir.join(CA_KEY_FILE)), 0o600);

    let (cert, key) = make_leaf(&ca_dir, dir.path(), node("n1"));
    let old = fs::read(&key).unwrap();
    let err = issue(
        &ca_dir,
        &node("n1"),
        &dir.path().join("certs"),
        90,
        None,
        IfExists::Refuse,
    )
    .unwrap_err();
    assert!(matches!(err, PkiError::Exists { .. }), "{err}");
    assert_eq!(fs::read(&key).unwrap(), old);
    issue(
        &ca_dir,
        &node("n1"),
        &dir.path().join("certs"),
        90,
        None,
        IfExists::Overwrite,
    )
    .unwrap();
    assert_ne!(fs::read(&key).unwrap(), old);
    load_identity(&cert, &key).unwrap();
}

#[test]
fn issuing_checks_the_ca() {
    let dir = TempDir::new().unwrap();
    let ca_dir = make_ca(dir.path(), Algo::Ed25519);
    let other = make_ca(&dir.path().join("other"), Algo::Ed25519);
    // A CA directory whose key is another CA's.
    fs::copy(other.join(CA_KEY_FILE), ca_dir.join(CA_KEY_FILE)).unwrap();
    let err = issue(&ca_dir, &node("n1"), dir.path(), 90, None, IfExists::Refuse).unwrap_err();
    assert!(matches!(err, PkiError::KeyMismatch { .. }), "{err}");

    let err = issue(
        &dir.path().join("nowhere"),
        &node("n1"),
        dir.path(),
        90,
        None,
        IfExists::Refuse,
    )
    .unwrap_err();
    assert!(err.to_string().contains("nowhere/ca.pem"), "{err}");

    // A leaf is not a CA.
    let (cert, key) = make_leaf(&other, dir.path(), node("n1"));
    let fake = dir.path().join("fake");
    fs::create_dir(&fake).unwrap();
    fs::copy(cert, fake.join(CA_CERT_FILE)).unwrap();
    fs::copy(key, fake.join(CA_KEY_FILE)).unwrap();
    let err = issue(&fake, &node("n2"), dir.path(), 90, None, IfExists::Refuse).unwrap_err();
    assert!(err.to_string().contains("not a CA"), "{err}");
}

#[test]
fn ca_bundles_hold_one_or_more_cas() {
    let dir = TempDir::new().unwrap();
    let a = make_ca(&dir.path().join("a"), Algo::Ed25519);
    let b = make_ca(&dir.path().join("b"), Algo::P256);
    let bundle = dir.path().join("bundle.pem");
    let both = fs::read_to_string(a.join(CA_CERT_FILE)).unwrap()
        + &fs::read_to_string(b.join(CA_CERT_FILE)).unwrap();
    fs::write(&bundle, both).unwrap();
    assert_eq!(load_ca_bundle(&bundle).unwrap().len(), 2);
    assert_eq!(load_ca_bundle(&a.join(CA_CERT_FILE)).unwrap().len(), 1);

    let empty = dir.path().join("empty.pem");
    fs::write(&empty, "").unwrap();
    let err = load_ca_bundle(&empty).unwrap_err().to_string();
    assert!(
        err.contains("empty.pem") && err.contains("no certificate"),
        "{err}"
    );

    let broken = dir.path().join("broken.pem");
    fs::write(
        &broken,
        "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let err = load_ca_bundle(&broken).unwrap_err().to_string();
    assert!(err.contains("broken.pem"), "{err}");

    let not_x509 = dir.path().join("not-x509.pem");
    fs::write(
        &not_x509,
        "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let err = load_ca_bundle(&not_x509).unwrap_err().to_string();
    assert!(
        err.contains("not-x509.pem") && err.contains("not a valid X.509"),
        "{err}"
    );

    let (leaf, _) = make_leaf(&a, dir.path(), node("n1"));
    let mixed = dir.path().join("mixed.pem");
    let text =
        fs::read_to_string(a.join(CA_CERT_FILE)).unwrap() + &fs::read_to_string(leaf).unwrap();
    fs::write(&mixed, text).unwrap();
    let err = load_ca_bundle(&mixed).unwrap_err().to_string();
    assert!(
        err.contains("certificate 2 of 2") && err.contains("not a CA"),
        "{err}"
    );
}

/// A self-signed certificate with exactly these SANs, for the identity rules.
fn cert_with_sans(sans: Vec<SanType>) -> Vec<u8> {
    let mut params = CertificateParams::default();
    params.subject_alt_names = sans;
    let key = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    params.self_signed(&key).unwrap().der().to_vec()
}

fn uri(s: &str) -> SanType {
    SanType::URI(s.try_into().unwrap())
}

fn dns(s: &str) -> SanType {
    SanType::DnsName(s.try_into().unwrap())
}

#[test]
fn identity_rules() {
    let ok = cert_with_sans(vec![
        uri("spiffe://example.org/ignored"),
        dns("n1.example.org"),
        uri("tenure://node/n1"),
        dns("n1"),
    ]);
    assert_eq!(
        identity_of(&ok).unwrap(),
        Identity {
            kind: Kind::Node,
            name: "n1".into()
        }
    );
    let op = cert_with_sans(vec![uri("tenure://operator/alice")]);
    assert_eq!(identity_of(&op).unwrap().kind, Kind::Operator);

    let refused = [
        (vec![], "no tenure://node/NAME"),
        (vec![dns("n1")], "no tenure://node/NAME"),
        (vec![uri("tenure://node/n1")], "DNS:n1"),
        (vec![uri("tenure://node/n1"), dns("n2")], "DNS:n1"),
        (
            vec![
                uri("tenure://node/n1"),
                uri("tenure://node/n2"),
                dns("n1"),
                dns("n2"),
            ],
            "2 tenure:// URIs",
        ),
        (vec![uri("tenure://admin/n1"), dns("n1")], "neither"),
        (vec![uri("tenure://node/N1"), dns("N1")], "invalid name"),
        (vec![uri("tenure://node/n1/x"), dns("n1")], "invalid name"),
        (vec![uri("tenure://node/"), dns("n1")], "invalid name"),
    ];
    for (sans, why) in refused {
        let der = cert_with_sans(sans.clone());
        let err = identity_of(&der).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(why), "{sans:?}: {msg}");
        assert!(
            msg.starts_with(&format!("certificate {}", fingerprint(&der))),
            "{msg}"
        );
        assert!(!err.is_transient());
    }
    assert!(identity_of(b"not a certificate").is_err());
}

#[test]
fn sec1_keys_are_wrapped_into_pkcs8() {
    // rcgen's P-256 PKCS#8 holds the SEC1 key as its last field; unwrap and re-wrap it.
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let pkcs8 = key.serialized_der();
    let (_, info) = x509_parser::asn1_rs::Any::from_der(pkcs8).unwrap();
    let (rest, _) = x509_parser::asn1_rs::Any::from_der(info.data).unwrap();
    let (rest, _) = x509_parser::asn1_rs::Any::from_der(rest).unwrap();
    let (_, octets) = x509_parser::asn1_rs::Any::from_der(rest).unwrap();
    let sec1 = octets.data;
    assert_eq!(keys::sec1_to_pkcs8(sec1), pkcs8);
}

#[test]
fn identities_and_verifiers_can_be_shared_between_threads() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<NodeIdentity>();
    shareable::<Signer>();
    shareable::<Verifier>();
    shareable::<PkiError>();
}

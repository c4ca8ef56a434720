//! Interoperability with the openssl command line (docs/design.md §3: certificates made by other
//! standard tools must work). Certificates and keys made by `openssl` load, carry the right
//! identity and sign; certificates we make verify with `openssl verify`; signatures cross
//! over in both directions. These tests need `/usr/bin/openssl` (OpenSSL 3) and fail, not
//! skip, without it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use super::*;

/// The `openssl genpkey` arguments for each key type used below.
pub(crate) const ED25519: &[&str] = &["genpkey", "-algorithm", "ed25519"];
pub(crate) const P256: &[&str] = &[
    "genpkey",
    "-algorithm",
    "EC",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
];
/// A P-256 key in SEC1 form (`EC PRIVATE KEY`, preceded by `EC PARAMETERS`).
const P256_SEC1: &[&str] = &["ecparam", "-name", "prime256v1", "-genkey"];

/// The extensions of a proper node certificate for `n1`.
const NODE_EXT: &str = "subjectAltName=URI:tenure://node/n1,DNS:n1\n\
                        extendedKeyUsage=serverAuth,clientAuth\n\
                        keyUsage=critical,digitalSignature\n\
                        basicConstraints=critical,CA:FALSE\n";

/// Runs `openssl ARGS` in `dir`; panics with its stderr if it fails.
fn openssl(dir: &Path, args: &[&str]) -> Vec<u8> {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `openssl` ({e}): these tests need the openssl command line \
                 (OpenSSL 3); install it, e.g. `apt-get install openssl`"
            )
        });
    assert!(
        output.status.success(),
        "openssl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// Writes a key to `dir/NAME` with `openssl KEYGEN... -out NAME`.
fn genkey(dir: &Path, keygen: &[&str], name: &str) -> PathBuf {
    let mut args = keygen.to_vec();
    args.extend(["-out", name]);
    openssl(dir, &args);
    dir.join(name)
}

/// An openssl-made CA in `dir` (`ca.pem`, `ca.key`), with a key from `keygen`.
pub(crate) fn openssl_ca(dir: &Path, keygen: &[&str]) {
    genkey(dir, keygen, "ca.key");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "30",
            "-subj",
            "/CN=openssl test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

/// An openssl-made leaf `NAME.pem` / `NAME.key` in `dir`, signed by `dir/ca.*`, with the
/// extensions in `ext`.
pub(crate) fn openssl_leaf(
    dir: &Path,
    keygen: &[&str],
    name: &str,
    ext: &str,
) -> (PathBuf, PathBuf) {
    let key = genkey(dir, keygen, &format!("{name}.key"));
    let csr = format!("{name}.csr");
    let ext_file = format!("{name}.ext");
    let cert = format!("{name}.pem");
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            &format!("{name}.key"),
            "-out",
            &csr,
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    fs::write(dir.join(&ext_file), ext).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &cert,
            "-days",
            "30",
            "-extfile",
            &ext_file,
        ],
    );
    (dir.join(cert), key)
}

/// Loads an openssl-made node `n1` and checks its identity and that it signs.
fn check_openssl_node(keygen: &[&str], algo: Algo) {
    let dir = TempDir::new().unwrap();
    openssl_ca(dir.path(), keygen);
    let (cert, key) = openssl_leaf(dir.path(), keygen, "n1", NODE_EXT);

    let id = load_identity(&cert, &key).unwrap();
    assert_eq!(
        id.identity,
        Identity {
            kind: Kind::Node,
            name: "n1".into()
        }
    );
    assert_eq!(id.signer.algorithm(), algo);
    let sig = id.signer.sign(b"vote term=7");
    verify(id.leaf(), b"vote term=7", &sig).unwrap();
    assert!(verify(id.leaf(), b"vote term=8", &sig).is_err());
    let lifetime = id.not_after.duration_since(id.not_before).unwrap();
    assert_eq!(lifetime.as_secs(), 30 * 86_400);
    assert_eq!(load_ca_bundle(&dir.path().join("ca.pem")).unwrap().len(), 1);

    // Our issue and rotate work with an openssl-made CA, and openssl accepts the result.
    let (ours, ours_key) = issue(
        dir.path(),
        &Subject::Node("n2".into()),
        &dir.path().join("ours"),
        10,
        None,
        IfExists::Refuse,
    )
    .unwrap();
    assert_eq!(
        load_identity(&ours, &ours_key).unwrap().signer.algorithm(),
        algo
    );
    rotate(dir.path(), "n2", &ours, &ours_key, 10).unwrap();
    load_identity(&ours, &ours_key).unwrap();
    openssl_verify(dir.path(), &dir.path().join("ca.pem"), &ours, "sslserver");
}

#[test]
fn openssl_ed25519_node_loads_and_signs() {
    check_openssl_node(ED25519, Algo::Ed25519);
}

#[test]
fn openssl_p256_node_loads_and_signs() {
    check_openssl_node(P256, Algo::P256);
}

#[test]
fn openssl_p256_sec1_node_loads_and_signs() {
    check_openssl_node(P256_SEC1, Algo::P256);
}

#[test]
fn openssl_cert_without_the_uri_san_is_refused() {
    let dir = TempDir::new().unwrap();
    openssl_ca(dir.path(), ED25519);
    let ext = "subjectAltName=DNS:n1\nextendedKeyUsage=serverAuth,clientAuth\n";
    let (cert, key) = openssl_leaf(dir.path(), ED25519, "n1", ext);
    let err = load_identity(&cert, &key).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, PkiError::Certificate { .. }), "{msg}");
    assert!(msg.contains("n1.pem"), "{msg}");
    assert!(
        msg.contains("no tenure://node/NAME or tenure://operator/NAME URI"),
        "{msg}"
    );
    assert!(
        msg.contains("subjectAltName=URI:tenure://node/NAME,DNS:NAME"),
        "{msg}"
    );

    // Nor is a node certificate without the DNS SAN, or without clientAuth.
    let (cert, key) = openssl_leaf(
        dir.path(),
        ED25519,
        "n2",
        "subjectAltName=URI:tenure://node/n2\n",
    );
    let msg = load_identity(&cert, &key).unwrap_err().to_string();
    assert!(msg.contains("DNS:n2"), "{msg}");
    let ext = "subjectAltName=URI:tenure://node/n3,DNS:n3\nextendedKeyUsage=serverAuth\n";
    let (cert, key) = openssl_leaf(dir.path(), ED25519, "n3", ext);
    let msg = load_identity(&cert, &key).unwrap_err().to_string();
    assert!(msg.contains("serverAuth and clientAuth"), "{msg}");
}

#[test]
fn unsupported_openssl_keys_are_refused_with_advice() {
    let dir = TempDir::new().unwrap();
    openssl_ca(dir.path(), ED25519);
    let (cert, key) = openssl_leaf(dir.path(), ED25519, "n1", NODE_EXT);
    let d = dir.path();

    let cases: Vec<(PathBuf, &str)> = vec![
        (
            genkey(
                d,
                &[
                    "genpkey",
                    "-algorithm",
                    "RSA",
                    "-pkeyopt",
                    "rsa_keygen_bits:2048",
                ],
                "rsa8.key",
            ),
            "RSA is not supported",
        ),
        (
            {
                openssl(
                    d,
                    &["rsa", "-in", "rsa8.key", "-traditional", "-out", "rsa1.key"],
                );
                d.join("rsa1.key")
            },
            "RSA is not supported",
        ),
        (
            genkey(
                d,
                &[
                    "genpkey",
                    "-algorithm",
                    "EC",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-384",
                ],
                "p384.key",
            ),
            "only P-256",
        ),
        (
            genkey(
                d,
                &["ecparam", "-name", "secp384r1", "-genkey"],
                "p384-sec1.key",
            ),
            "only P-256",
        ),
        (
            genkey(d, &["genpkey", "-algorithm", "ed448"], "ed448.key"),
            "Ed448",
        ),
        (
            {
                openssl(
                    d,
                    &[
                        "pkey",
                        "-in",
                        "n1.key",
                        "-aes256",
                        "-passout",
                        "pass:secret",
                        "-out",
                        "enc.key",
                    ],
                );
                d.join("enc.key")
            },
            "encrypted",
        ),
    ];
    for (bad_key, why) in cases {
        let err = load_identity(&cert, &bad_key).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, PkiError::UnsupportedKey { .. }), "{msg}");
        assert!(msg.contains(why), "{}: {msg}", bad_key.display());
        assert!(msg.contains(&bad_key.display().to_string()), "{msg}");
        assert!(
            msg.contains("openssl"),
            "the message says what to run: {msg}"
        );
    }
    // The original key still loads: the cases above did not disturb it.
    load_identity(&cert, &key).unwrap();
}

/// `openssl verify` of `cert` against `ca` for `purpose`.
fn openssl_verify(dir: &Path, ca: &Path, cert: &Path, purpose: &str) {
    let out = openssl(
        dir,
        &[
            "verify",
            "-CAfile",
            ca.to_str().unwrap(),
            "-purpose",
            purpose,
            cert.to_str().unwrap(),
        ],
    );
    assert!(
        String::from_utf8_lossy(&out).contains(": OK"),
        "{}",
        String::from_utf8_lossy(&out)
    );
}

#[test]
fn openssl_accepts_our_certificates_and_keys() {
    for algo in [Algo::Ed25519, Algo::P256] {
        let dir = TempDir::new().unwrap();
        let d = dir.path();
        let (ca, _) = init_ca(&d.join("ca"), algo, 30, IfExists::Refuse).unwrap();
        let (node, node_key) = issue(
            &d.join("ca"),
            &Subject::Node("n1".into()),
            d,
            30,
            None,
            IfExists::Refuse,
        )
        .unwrap();
        let (op, _) = issue(
            &d.join("ca"),
            &Subject::Operator("alice".into()),
            d,
            30,
            None,
            IfExists::Refuse,
        )
        .unwrap();
        openssl_verify(d, &ca, &node, "sslserver");
        openssl_verify(d, &ca, &node, "sslclient");
        openssl_verify(d, &ca, &op, "sslclient");
        // openssl reads our key files.
        openssl(d, &["pkey", "-in", node_key.to_str().unwrap(), "-noout"]);
        openssl(d, &["pkey", "-in", "ca/ca.key", "-noout"]);
    }
}

#[test]
fn signatures_cross_over_with_openssl() {
    for (keygen, algo) in [(ED25519, Algo::Ed25519), (P256, Algo::P256)] {
        let dir = TempDir::new().unwrap();
        let d = dir.path();
        openssl_ca(d, keygen);
        let (cert, key) = openssl_leaf(d, keygen, "n1", NODE_EXT);
        let id = load_identity(&cert, &key).unwrap();
        assert_eq!(id.signer.algorithm(), algo);
        let msg = b"heartbeat seq=9";
        fs::write(d.join("msg"), msg).unwrap();
        openssl(
            d,
            &[
                "x509", "-in", "n1.pem", "-pubkey", "-noout", "-out", "pub.pem",
            ],
        );

        // openssl signs, we verify.
        let sign: &[&str] = match algo {
            Algo::Ed25519 => &[
                "pkeyutl", "-sign", "-rawin", "-inkey", "n1.key", "-in", "msg", "-out", "sig",
            ],
            Algo::P256 => &["dgst", "-sha256", "-sign", "n1.key", "-out", "sig", "msg"],
        };
        openssl(d, sign);
        let theirs = fs::read(d.join("sig")).unwrap();
        verify(id.leaf(), msg, &theirs).unwrap();

        // We sign, openssl verifies.
        fs::write(d.join("oursig"), id.signer.sign(msg)).unwrap();
        let check: &[&str] = match algo {
            Algo::Ed25519 => &[
                "pkeyutl", "-verify", "-rawin", "-pubin", "-inkey", "pub.pem", "-in", "msg",
                "-sigfile", "oursig",
            ],
            Algo::P256 => &[
                "dgst",
                "-sha256",
                "-verify",
                "pub.pem",
                "-signature",
                "oursig",
                "msg",
            ],
        };
        let out = String::from_utf8_lossy(&openssl(d, check)).into_owned();
        assert!(
            out.contains("Verified") || out.contains("Successfully"),
            "{out}"
        );
    }
}

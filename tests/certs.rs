//! `tenure certs`: the commands on the real binary, checked with openssl's view of the
//! files they write. The certificate logic itself is unit-tested in `host/src/pki`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn tenure(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .output()
        .expect("running tenure")
}

fn ok(args: &[&str]) -> String {
    let out = tenure(args);
    assert!(
        out.status.success(),
        "tenure {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn openssl_text(cert: &Path) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(cert)
        .output()
        .expect("openssl is needed for this test: apt-get install openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn init_issue_and_rotate_write_what_they_say() {
    let dir = tempfile::tempdir().unwrap();
    let d = |p: &str| dir.path().join(p).to_string_lossy().into_owned();
    for algo in ["ed25519", "p256"] {
        let ca = d(&format!("ca-{algo}"));
        let out = d(&format!("out-{algo}"));
        std::fs::create_dir_all(&out).unwrap();
        ok(&["certs", "init", "--out", &ca, "--algo", algo]);
        assert_eq!(mode(&Path::new(&ca).join("ca.key")), 0o600);

        let said = ok(&["certs", "issue", "--ca", &ca, "--node", "n1", "--out", &out]);
        assert!(said.contains("tenure://node/n1"), "{said}");
        let node_pem = Path::new(&out).join("n1.pem");
        let text = openssl_text(&node_pem);
        assert!(text.contains("URI:tenure://node/n1"), "{text}");
        assert!(text.contains("DNS:n1"), "{text}");
        assert!(text.contains("TLS Web Server Authentication"), "{text}");
        assert!(text.contains("TLS Web Client Authentication"), "{text}");
        assert_eq!(mode(&Path::new(&out).join("n1.key")), 0o600);

        let said = ok(&[
            "certs",
            "issue",
            "--ca",
            &ca,
            "--operator",
            "alice",
            "--out",
            &out,
        ]);
        assert!(said.contains("tenure://operator/alice"), "{said}");
        let text = openssl_text(&Path::new(&out).join("alice.pem"));
        assert!(text.contains("URI:tenure://operator/alice"), "{text}");

        let key_before = std::fs::read(Path::new(&out).join("n1.key")).unwrap();
        let cert_before = std::fs::read(&node_pem).unwrap();
        let key = d(&format!("out-{algo}/n1.key"));
        let cert = node_pem.to_string_lossy().into_owned();
        ok(&[
            "certs", "rotate", "--ca", &ca, "--node", "n1", "--cert", &cert, "--key", &key,
        ]);
        assert_ne!(
            std::fs::read(&key).unwrap(),
            key_before,
            "rotate makes a new key"
        );
        assert_ne!(
            std::fs::read(&cert).unwrap(),
            cert_before,
            "rotate makes a new cert"
        );
        assert!(openssl_text(&node_pem).contains("URI:tenure://node/n1"));
    }
}

#[test]
fn mistakes_are_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca").to_string_lossy().into_owned();
    let out = dir.path().to_string_lossy().into_owned();
    ok(&["certs", "init", "--out", &ca]);

    let again = tenure(&["certs", "init", "--out", &ca]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("already exists") && err.contains("--force"),
        "{err}"
    );

    let bad = tenure(&[
        "certs", "issue", "--ca", &ca, "--node", "Bad Name", "--out", &out,
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("invalid name"), "{err}");

    let no_ca = dir.path().join("nowhere").to_string_lossy().into_owned();
    let missing = tenure(&[
        "certs", "issue", "--ca", &no_ca, "--node", "n1", "--out", &out,
    ]);
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("nowhere"),
        "the error names the missing CA: {err}"
    );

    ok(&["certs", "issue", "--ca", &ca, "--node", "n1", "--out", &out]);
    let cert = dir.path().join("n1.pem").to_string_lossy().into_owned();
    let key = dir.path().join("n1.key").to_string_lossy().into_owned();
    let wrong = tenure(&[
        "certs", "rotate", "--ca", &ca, "--node", "n2", "--cert", &cert, "--key", &key,
    ]);
    assert!(
        !wrong.status.success(),
        "rotate refuses another node's files"
    );
}

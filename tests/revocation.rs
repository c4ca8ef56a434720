//! Revocation means what the operator meant (issue 24, item 6), on real processes.
//!
//! `tenure revoke` takes a key out of the cluster: every node refuses every certificate
//! that carries it. Whether the node it was issued to leaves the Raft membership depends
//! on whether the node still uses that key: after `tenure certs rotate` it does not, and
//! it stays; when it is the leader that is revoked, it cannot replicate its own removal
//! (every node refuses it at once), so the next leader finishes it. A key that matches no
//! certificate anyone presented is most likely a typo (or a certificate's hash given for
//! a key's) and needs `--force`.

mod support;

use std::collections::BTreeSet;
use std::process::Output;

use serde_json::Value;
use support::*;

/// The Raft role `status` (asked of node `via`) gives `name`, if it lists it.
fn role(c: &Cluster, via: usize, name: &str) -> Option<String> {
    let status = c.status_via(via);
    status["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["name"] == name))
        .and_then(|n| n["role"].as_str().map(str::to_owned))
}

/// Runs `revoke ARGS` as the operator through node `via`, retrying while an election
/// leaves no leader (the machine may be loaded).
fn revoke(c: &Cluster, via: usize, args: &[&str]) -> Output {
    let mut all = vec!["revoke"];
    all.extend_from_slice(args);
    let mut attempts = 0;
    loop {
        let out = c.admin_as(via, OPERATOR, &all);
        attempts += 1;
        if out.status.success() || attempts == 3 || !stderr_of(&out).contains("no leader") {
            return out;
        }
    }
}

/// A node rotates its key; the operator then revokes the old certificate, as a rotation
/// runbook says. The node uses its new key and must stay: a voter, with its session and
/// its slots. And a key no one presented is refused without `--force`.
#[test]
fn revoking_a_key_a_node_no_longer_uses_leaves_the_node_a_member() {
    let mut c = Cluster::builder(3).build();
    let hb = plugins().heartbeat_bytes();
    c.install_plugin_everywhere("trio", &manifest("trio", 3, "1.0.0"), &hb);
    c.start();
    c.wait_owners("trio", 3, |o| {
        o.iter()
            .map(|o| o.node.clone())
            .collect::<BTreeSet<_>>()
            .len()
            == 3
    });
    let leader = c.wait_leader();
    let l = c.index(&leader);
    let r = (0..3).find(|&i| i != l).unwrap();
    let rotated = c.name(r).to_string();

    eprintln!("phase: a typo'd fingerprint is refused without --force");
    let typo = format!("sha256:{}", "ab".repeat(32));
    let refused = revoke(&c, l, &["--fingerprint", &typo]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr_of(&refused));
    assert!(
        stderr_of(&refused).contains("--force") && stderr_of(&refused).contains(&typo),
        "says why and how to insist: {}",
        stderr_of(&refused)
    );
    let status = c.status_via(l);
    assert_eq!(status["revoked"], Value::Array(vec![]), "nothing revoked");

    eprintln!("phase: a certificate's fingerprint given for a key's is named as such");
    let certificates = status["certificates"].as_array().unwrap().clone();
    let own = certificates
        .iter()
        .find(|v| v["name"] == leader.as_str())
        .expect("the leader's own certificate in status");
    let cert_hash = own["certificate"].as_str().unwrap();
    let key_hash = own["key"].as_str().unwrap();
    let refused = revoke(&c, l, &["--fingerprint", cert_hash]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr_of(&refused));
    assert!(
        stderr_of(&refused).contains("certificate") && stderr_of(&refused).contains(key_hash),
        "names the key of that certificate: {}",
        stderr_of(&refused)
    );

    eprintln!("phase: {rotated} rotates its key");
    let old = c.certs_dir().join(format!("{rotated}.old.pem"));
    std::fs::copy(c.certs_dir().join(format!("{rotated}.pem")), &old).unwrap();
    let from = c.node(r).events().len();
    c.rotate_cert(r);
    c.wait_event(
        r,
        "the new certificate loaded",
        from,
        is("tls.reloaded").f(),
    );
    // The leader sees the node on its new key (the old connections are retired).
    c.wait(
        "the leader to see the rotated node on its new key only",
        WAIT,
        |c| {
            let status = c.status_via(l);
            let keys: Vec<String> = status["certificates"]
                .as_array()?
                .iter()
                .filter(|v| v["name"] == rotated.as_str())
                .map(|v| v["certificate"].as_str().unwrap_or("").to_string())
                .collect();
            let old_hash = certificate_hash(&old);
            (!keys.is_empty() && !keys.contains(&old_hash)).then_some(())
        },
    );

    eprintln!("phase: the operator revokes {rotated}'s old certificate");
    let said = revoke(&c, l, &[old.to_str().unwrap()]);
    assert!(said.status.success(), "revoke: {}", stderr_of(&said));
    let text = stdout_of(&said);
    assert!(
        text.contains(&format!("{rotated} uses another key")),
        "says the node stays: {text}"
    );
    assert_eq!(
        role(&c, l, &rotated).as_deref(),
        Some("voter"),
        "{rotated} is still a voter"
    );
    let status = c.status_via(l);
    assert_eq!(status["revoked"].as_array().unwrap().len(), 1, "{status}");

    eprintln!("phase: {rotated} keeps its session and its slot");
    let node_status = |s: &Value| {
        s["nodes"].as_array().and_then(|nodes| {
            nodes
                .iter()
                .find(|n| n["name"] == rotated.as_str())
                .cloned()
        })
    };
    assert!(
        node_status(&status).is_some_and(|n| !n["session"].is_null()),
        "{rotated} has a session: {status}"
    );
    // One more renewal round trip through the leader on the new key: a later commit that
    // the rotated node's own replica applies.
    c.wait("the rotated node to apply a later entry", WAIT, |c| {
        let theirs = c.status_via(r);
        (theirs["revoked"].as_array().is_some_and(|r| r.len() == 1)).then_some(())
    });
    assert!(
        c.owner_names("trio").contains(&rotated),
        "{rotated} still owns a slot: {:?}",
        c.owner_names("trio")
    );
    assert!(
        !c.node(r)
            .events()
            .iter()
            .skip(from)
            .any(|e| is("lease.lost").f()(e)),
        "{rotated} never lost its lease"
    );
    c.stop_all();
    assert_safe(&c.merged(), "trio", 3);
}

/// The sha256 fingerprint of a PEM certificate file, as `status` prints certificates.
fn certificate_hash(pem: &std::path::Path) -> String {
    let out = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(pem)
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text
        .trim()
        .rsplit('=')
        .next()
        .unwrap_or("")
        .replace(':', "");
    format!("sha256:{}", hex.to_lowercase())
}

/// The operator revokes the leader's own certificate, through the leader. Every node
/// refuses the leader at once, so it cannot replicate its own removal: `revoke` still
/// succeeds (the revocation is committed), and the next leader takes it out of the voters
/// and keeps every slot owned.
#[test]
fn revoking_the_leader_s_key_takes_it_out_of_the_voters() {
    let mut c = Cluster::builder(3).build();
    let hb = plugins().heartbeat_bytes();
    c.install_plugin_everywhere("pair", &manifest("pair", 2, "1.0.0"), &hb);
    c.start();
    c.wait_owners("pair", 2, |_| true);
    let leader = c.wait_leader();
    let l = c.index(&leader);
    let other = (0..3).find(|&i| i != l).unwrap();

    eprintln!("phase: revoke {leader}'s certificate through {leader} itself");
    let cert = c.certs_dir().join(format!("{leader}.pem"));
    let said = revoke(&c, l, &[cert.to_str().unwrap()]);
    assert!(
        said.status.success(),
        "revoking the leader succeeds: {}",
        stderr_of(&said)
    );
    assert!(
        stdout_of(&said).contains("next leader"),
        "says who finishes the removal: {}",
        stdout_of(&said)
    );

    eprintln!("phase: a new leader takes {leader} out of the voters");
    c.wait("a new leader without the revoked node", WAIT, |c| {
        let status = c.status_via(other);
        let new = status["leader"].as_str()?.to_string();
        let gone = status["nodes"].as_array()?.iter().all(|n| {
            n["name"] != leader.as_str() || (n["role"] != "voter" && n["role"] != "learner")
        });
        (new != leader && gone).then_some(())
    });

    eprintln!("phase: every slot is owned by the other two");
    let others: BTreeSet<String> = (0..3)
        .filter(|&i| i != l)
        .map(|i| c.name(i).to_string())
        .collect();
    c.wait_owners("pair", 2, |owners| {
        owners.iter().all(|o| others.contains(&o.node))
    });
    c.stop_all();
    assert_safe(&c.merged(), "pair", 2);
}

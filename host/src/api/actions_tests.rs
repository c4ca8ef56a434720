//! `command_for` and `describe`: every action's command, and every refusal's message.

use super::fixture::{T0, digest, three_nodes};
use super::*;
use crate::cluster::{Command, Handover};

const NOW: u64 = T0 + 60_000;

fn mv(resource: &str, slot: Option<u32>, to: &str) -> AdminRequest {
    AdminRequest::Move {
        resource: resource.into(),
        slot,
        to: to.into(),
    }
}

/// The refusal of `request`; asserts it contains `expected`.
fn refused(w: &super::fixture::World, request: AdminRequest, expected: &str) {
    let message = command_for(&request, &w.cluster, NOW).unwrap_err();
    println!("{request}: {message}");
    assert!(message.contains(expected), "{request}: {message}");
}

#[test]
fn move_begins_a_handover_with_the_current_token_and_the_target() {
    let w = three_nodes();
    let token = w.cluster.slot("echo", 0).unwrap().token;
    let command = command_for(&mv("echo", Some(0), "c"), &w.cluster, NOW).unwrap();
    assert_eq!(
        command,
        Command::BeginHandover {
            resource: "echo".into(),
            slot: 0,
            token,
            reason: Handover::Moved,
            to: Some("c".into()),
            at_ms: NOW,
        }
    );
    let said = describe(&command, &w.cluster);
    assert!(said.contains("from a to c"), "{said}");
    // The slot may be omitted when the resource has exactly one granted slot.
    let command = command_for(&mv("solo", None, "b"), &w.cluster, NOW).unwrap();
    assert!(matches!(command, Command::BeginHandover { slot: 0, .. }));
}

#[test]
fn moves_that_placement_would_not_carry_out_are_refused() {
    let mut w = three_nodes();
    w.down_node("d");
    refused(&w, mv("nope", Some(0), "c"), "unknown resource \"nope\"");
    refused(&w, mv("nope", Some(0), "c"), "known: echo, solo");
    refused(&w, mv("echo", None, "c"), "name a slot: echo/0, echo/1");
    refused(&w, mv("echo", Some(5), "c"), "slots echo/0 to echo/1");
    refused(&w, mv("echo", Some(0), "zed"), "unknown node \"zed\"");
    refused(&w, mv("echo", Some(0), "a"), "a already owns echo/0");
    refused(&w, mv("echo", Some(0), "b"), "b already holds echo/1");
    refused(&w, mv("echo", Some(0), "d"), "node d has no live session");
    refused(
        &w,
        mv("solo", Some(0), "c"),
        "does not have the plugin for solo",
    );

    // A vacant slot.
    let token = w.cluster.slot("echo", 1).unwrap().token;
    w.apply(Command::Release {
        resource: "echo".into(),
        slot: 1,
        token,
        at_ms: T0,
    });
    refused(&w, mv("echo", Some(1), "c"), "echo/1 is vacant");

    // The target is draining.
    w.apply(Command::SetDraining {
        node: "c".into(),
        draining: true,
    });
    refused(&w, mv("echo", Some(0), "c"), "`tenure undrain c` first");
}

#[test]
fn a_target_needs_the_winning_version_and_the_required_labels() {
    let mut w = three_nodes();
    // c advertises an older echo than a and b.
    w.advertise("c", "echo", "0.9.0", 'f', 2);
    refused(
        &w,
        mv("echo", Some(0), "c"),
        "1.0.0 (sha256:eeeeeeeeeeee) is the version that runs",
    );
    // Same version, greater digest: the greater digest wins, so c's would run.
    w.advertise("c", "echo", "1.0.0", 'f', 2);
    let wins = winning_advert(&w.cluster, "echo").unwrap();
    assert_eq!(wins.digest, digest('f'));
    assert!(command_for(&mv("echo", Some(0), "c"), &w.cluster, NOW).is_ok());

    // Required labels.
    w.advertise_requiring("a", "zoned", "1.0.0", 'z', 1, &[("zone", "x")]);
    w.advertise_requiring("c", "zoned", "1.0.0", 'z', 1, &[("zone", "x")]);
    w.grant("zoned", 0, "a", T0);
    refused(
        &w,
        mv("zoned", None, "c"),
        "lacks the labels zoned requires: zone=x",
    );
}

#[test]
fn a_target_in_cooldown_is_refused_until_it_ends() {
    let mut w = three_nodes();
    let token = w.cluster.slot("solo", 0).unwrap().token;
    w.apply(Command::GiveUp {
        resource: "solo".into(),
        slot: 0,
        token,
        until_ms: NOW + 30_000,
        at_ms: T0,
    });
    w.grant("solo", 0, "b", T0);
    refused(
        &w,
        mv("solo", None, "a"),
        "skipped for solo for another 30s",
    );
    assert!(command_for(&mv("solo", None, "a"), &w.cluster, NOW + 30_000).is_ok());
}

#[test]
fn a_slot_being_handed_over_is_not_moved_or_released_again() {
    let mut w = three_nodes();
    w.hand_over("echo", 0, Handover::Moved, Some("c"), T0);
    refused(
        &w,
        mv("echo", Some(0), "c"),
        "already being handed over (moved to c)",
    );
    refused(
        &w,
        AdminRequest::Release {
            resource: "echo".into(),
            slot: Some(0),
        },
        "wait until a has released it",
    );
}

#[test]
fn release_drain_undrain_and_revoke() {
    let w = three_nodes();
    let release = AdminRequest::Release {
        resource: "solo".into(),
        slot: None,
    };
    let command = command_for(&release, &w.cluster, NOW).unwrap();
    assert!(matches!(
        &command,
        Command::BeginHandover { resource, slot: 0, reason: Handover::Released, to: None, at_ms, .. }
            if resource == "solo" && *at_ms == NOW
    ));
    assert!(describe(&command, &w.cluster).starts_with("releasing solo/0"));

    let drain = command_for(&AdminRequest::Drain { node: "a".into() }, &w.cluster, NOW).unwrap();
    assert_eq!(
        drain,
        Command::SetDraining {
            node: "a".into(),
            draining: true
        }
    );
    let said = describe(&drain, &w.cluster);
    assert!(said.contains("its 2 slot(s) move away"), "{said}");
    let undrain =
        command_for(&AdminRequest::Undrain { node: "a".into() }, &w.cluster, NOW).unwrap();
    assert_eq!(
        undrain,
        Command::SetDraining {
            node: "a".into(),
            draining: false
        }
    );
    refused(
        &w,
        AdminRequest::Drain { node: "q".into() },
        "members are a, b, c",
    );

    let upper = format!("SHA256:{}", "AB".repeat(32));
    let revoke = command_for(
        &AdminRequest::Revoke {
            key: upper.clone(),
            certificate: Some(upper),
            node: Some("c".into()),
            force: false,
        },
        &w.cluster,
        NOW,
    )
    .unwrap();
    assert_eq!(
        revoke,
        Command::Revoke {
            key: format!("sha256:{}", "ab".repeat(32)),
            certificate: Some(format!("sha256:{}", "ab".repeat(32))),
            node: Some("c".into()),
            at_ms: NOW,
        }
    );
    // A certificate's node that is no longer a member is not removed again.
    let gone = AdminRequest::Revoke {
        key: format!("sha256:{}", "cd".repeat(32)),
        certificate: None,
        node: Some("q".into()),
        force: false,
    };
    assert!(matches!(
        command_for(&gone, &w.cluster, NOW),
        Ok(Command::Revoke { node: None, .. })
    ));
    refused(
        &w,
        AdminRequest::Remove { node: "q".into() },
        "members are a, b, c",
    );
    refused(&w, AdminRequest::Status, "status is a question");
}

#[test]
fn fingerprints_are_checked_and_normalised() {
    let hex = "0123456789abcdef".repeat(4);
    let ok = format!("sha256:{hex}");
    assert_eq!(parse_fingerprint(&ok).unwrap(), ok);
    assert_eq!(parse_fingerprint(&format!("  {ok} ")).unwrap(), ok);
    // openssl's spelling: upper case with colons.
    let colons: Vec<String> = hex
        .to_ascii_uppercase()
        .as_bytes()
        .chunks(2)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect();
    assert_eq!(
        parse_fingerprint(&format!("sha256:{}", colons.join(":"))).unwrap(),
        ok
    );
    for bad in [
        hex.clone(),
        format!("sha1:{hex}"),
        format!("sha256:{}", &hex[1..]),
        format!("sha256:{}g", &hex[1..]),
        "sha256:".into(),
        "".into(),
        "sha25é:".into(),
    ] {
        let message = parse_fingerprint(&bad).unwrap_err();
        assert!(message.contains("is not a fingerprint"), "{message}");
    }
}

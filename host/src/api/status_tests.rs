//! `Status::build` and `Status::render` over the fixture cluster.

use std::collections::BTreeMap;

use super::fixture::{T0, digest, three_nodes};
use super::*;
use crate::cluster::{Command, Handover};

const NOW: u64 = T0 + 3_600_000;

fn raft() -> RaftView {
    RaftView {
        node: "b".into(),
        leader: Some("a".into()),
        term: 2,
        voters: vec!["a".into(), "b".into(), "e".into()],
        learners: vec!["c".into()],
    }
}

/// The fixture with a move of echo/1 under way, solo released (vacant, pending with a
/// reason), c draining, and a revoked certificate.
fn status() -> Status {
    let mut w = three_nodes();
    w.hand_over("echo", 1, Handover::Moved, Some("c"), T0 + 20_000);
    let token = w.cluster.slot("solo", 0).unwrap().token;
    w.hand_over("solo", 0, Handover::Released, None, T0 + 30_000);
    w.apply(Command::Release {
        resource: "solo".into(),
        slot: 0,
        token,
        at_ms: T0 + 31_000,
    });
    w.apply(Command::SetDraining {
        node: "c".into(),
        draining: true,
    });
    w.apply(Command::Revoke {
        key: digest('9'),
        certificate: Some(digest('8')),
        node: None,
        at_ms: T0,
    });
    let pending = vec![(
        "solo".into(),
        0,
        "no eligible node: a is in cooldown".into(),
    )];
    Status::build(&w.cluster, raft(), pending, NOW)
}

#[test]
fn build_reports_nodes_resources_slots_and_history() {
    let s = status();
    assert_eq!(
        (s.node.as_str(), s.leader.as_deref(), s.term),
        ("b", Some("a"), 2)
    );
    assert_eq!(s.at_ms, NOW);

    let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "e"]);
    let a = &s.nodes[0];
    assert_eq!(a.role, Role::Voter);
    assert_eq!(a.addr, "a:7400");
    assert_eq!(a.session.as_ref().unwrap().age_ms, NOW - T0);
    assert_eq!(a.slots, 1);
    assert_eq!(a.labels["zone"], "x");
    assert_eq!(a.plugins.len(), 2);
    let c = &s.nodes[2];
    assert_eq!((c.role, c.draining, c.slots), (Role::Learner, true, 0));
    // A Raft voter that has not joined the state yet.
    let e = &s.nodes[3];
    assert_eq!(
        (e.role, e.addr.as_str(), e.session.is_none()),
        (Role::Voter, "", true)
    );

    let echo = &s.resources[0];
    assert_eq!((echo.name.as_str(), echo.tickets), ("echo", 2));
    assert_eq!(echo.plugin.as_ref().unwrap().version.to_string(), "1.0.0");
    let [zero, one] = echo.slots.as_slice() else {
        panic!("{:?}", echo.slots)
    };
    assert_eq!(
        (zero.state, zero.owner.as_deref()),
        (SlotState::Owned, Some("a"))
    );
    assert_eq!(zero.since_ms, Some(T0 + 10_000));
    assert_eq!(one.state, SlotState::Releasing);
    let releasing = one.releasing.as_ref().unwrap();
    assert_eq!(
        (releasing.reason.as_str(), releasing.to.as_deref()),
        ("moved", Some("c"))
    );

    let solo = &s.resources[1];
    assert_eq!(solo.slots.len(), 1);
    assert_eq!(solo.slots[0].state, SlotState::Pending);
    assert_eq!(
        solo.slots[0].pending.as_deref(),
        Some("no eligible node: a is in cooldown")
    );
    assert_eq!(
        s.revoked,
        [RevokedView {
            key: digest('9'),
            certificate: Some(digest('8')),
            node: None,
            at_ms: T0,
        }]
    );

    let kinds: Vec<(&str, Option<&str>)> = s
        .history
        .iter()
        .map(|h| (h.what.as_str(), h.reason.as_deref()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("granted", None),
            ("granted", None),
            ("granted", None),
            ("handover-begun", Some("moved")),
            ("handover-begun", Some("released")),
            ("released", None),
        ]
    );
}

#[test]
fn history_is_the_most_recent_tail() {
    let mut w = three_nodes();
    for _ in 0..30 {
        let token = w.cluster.slot("echo", 0).unwrap().token;
        w.apply(Command::Regrant {
            resource: "echo".into(),
            slot: 0,
            token,
            at_ms: T0,
        });
    }
    let s = Status::build(&w.cluster, raft(), vec![], NOW);
    assert_eq!(s.history.len(), status::HISTORY_SHOWN);
    assert_eq!(s.history_len, 33);
    assert_eq!(
        s.history.last().unwrap().index,
        w.cluster.history.back().unwrap().index
    );
    assert!(s.render().contains("(the last 20 of 33 ownership changes)"));
}

#[test]
fn unadvertised_granted_and_unreported_pending_slots_are_shown() {
    let mut w = three_nodes();
    // Raise echo's tickets to 3 on every node: slot 2 is vacant, without a reason given.
    for node in ["a", "b", "c"] {
        w.advertise(node, "echo", "1.0.0", 'e', 3);
    }
    let s = Status::build(&w.cluster, raft(), vec![], NOW);
    let echo = &s.resources[0];
    assert_eq!(echo.slots.len(), 3);
    assert_eq!(
        echo.slots[2].pending.as_deref(),
        Some("waiting for placement")
    );
}

#[test]
fn status_travels_as_postcard_and_as_json() {
    let s = status();
    let bytes = postcard::to_stdvec(&AdminResponse::Status(s.clone())).unwrap();
    assert_eq!(
        decode_response(&bytes).unwrap(),
        AdminResponse::Status(s.clone())
    );
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["leader"], "a");
    assert_eq!(json["nodes"][0]["role"], "voter");
    assert_eq!(json["resources"][0]["slots"][1]["state"], "releasing");
    assert_eq!(json["resources"][0]["slots"][1]["releasing"]["to"], "c");
    assert_eq!(json["resources"][1]["slots"][0]["state"], "pending");
    assert_eq!(json["resources"][0]["plugin"]["version"], "1.0.0");
    let back: Status = serde_json::from_value(json).unwrap();
    assert_eq!(back, s);
}

#[test]
fn render_is_aligned_tables() {
    let text = status().render();
    println!("{text}");
    assert_eq!(text, RENDERED);
}

#[test]
fn the_cluster_id_leads_the_text_and_is_hex_in_json() {
    let mut s = status();
    let id = crate::cluster::ClusterId::from_bytes([0xc1; 16]);
    s.cluster = Some(id);
    let text = s.render();
    assert!(
        text.starts_with(&format!("cluster {id}: leader a, term 2; answered by b\n")),
        "{text}"
    );
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["cluster"], "c1".repeat(16));
    // Once raised, the cluster's version follows the id.
    s.version = 7;
    assert!(
        s.render()
            .starts_with(&format!("cluster {id} at version 7: leader a")),
        "{}",
        s.render()
    );
    assert_eq!(serde_json::to_value(&s).unwrap()["version"], 7);
}

#[test]
fn render_says_when_there_is_no_leader_and_nothing_to_show() {
    let s = Status::build(
        &crate::cluster::Cluster::default(),
        RaftView {
            node: "n1".into(),
            ..RaftView::default()
        },
        vec![],
        NOW,
    );
    let text = s.render();
    println!("{text}");
    assert!(text.starts_with("no leader known (term 0)"), "{text}");
    assert!(text.contains("no nodes\n"), "{text}");
    assert!(text.contains("no resources\n"), "{text}");
}

#[test]
fn render_escapes_control_characters_in_untrusted_text() {
    let clean = status().render();
    let mut s = status();
    s.nodes[0]
        .labels
        .insert("zone".into(), "\x1b[2J\nleader evil, term 99".into());
    s.nodes[0].addr = "10.0.0.1:7400\r\x1b]0;pwned\x07".into();
    s.leader = Some("a\x1b[31m".into());
    s.resources[0].name = "echo\u{9b}2J".into();
    let text = s.render();
    println!("{text}");
    for control in ['\x1b', '\r', '\x07', '\u{9b}'] {
        assert!(
            !text.contains(control),
            "{control:?} reached the terminal:\n{text}"
        );
    }
    assert!(
        text.contains("zone=\\x1b[2J\\nleader evil, term 99"),
        "the label is shown, escaped:\n{text}"
    );
    assert!(
        text.contains("10.0.0.1:7400\\r\\x1b]0;pwned\\x07"),
        "{text}"
    );
    assert!(text.starts_with("leader a\\x1b[31m, term 2"), "{text}");
    assert!(text.contains("echo\\u{9b}2J"), "{text}");
    assert!(
        !text.lines().any(|line| line.starts_with("leader evil")),
        "a label forged a line:\n{text}"
    );
    assert_eq!(text.lines().count(), clean.lines().count(), "{text}");
}

#[test]
fn ages_read_like_kubectl() {
    for (ms, text) in [
        (0, "0s"),
        (59_999, "59s"),
        (119_000, "119s"),
        (200_000, "3m20s"),
        (2_700_000, "45m"),
        (18_000_000, "5h"),
        (3 * 86_400_000, "3d"),
    ] {
        assert_eq!(status::age(ms), text, "{ms}");
    }
}

const RENDERED: &str = "\
leader a, term 2; answered by b

NODE  ADDRESS  ROLE     STATE     SESSION  AGE  SLOTS  LABELS  PLUGINS
a     a:7400   voter    ready     2        60m  1      zone=x  echo@1.0.0,solo@2.0.0
b     b:7400   voter    ready     4        59m  1      zone=x  echo@1.0.0,solo@2.0.0
c     c:7400   learner  draining  6        59m  0      zone=y  echo@1.0.0
e     -        voter    down      -        -    0      -       -

RESOURCE  PLUGIN  VERSION  DIGEST               TICKETS  REQUIRE
echo      echo    1.0.0    sha256:eeeeeeeeeeee  2        -
solo      solo    2.0.0    sha256:ssssssssssss  1        -

SLOT    STATE      OWNER  TOKEN  TERM  VERSION  HELD  NOTE
echo/0  owned      a      12     2     1.0.0    59m
echo/1  releasing  b      13     2     1.0.0    59m   moved → c
solo/0  pending    -      -      -     -        -     no eligible node: a is in cooldown

REVOKED KEY                                                              CERTIFICATE                                                              NODE
sha256:9999999999999999999999999999999999999999999999999999999999999999  sha256:8888888888888888888888888888888888888888888888888888888888888888  -

CHANGED  SLOT    NODE  TOKEN  CHANGE
59m      echo/0  a     12     granted
59m      echo/1  b     13     granted
59m      solo/0  a     14     granted
59m      echo/1  b     13     handover-begun (moved)
59m      solo/0  a     14     handover-begun (released)
59m      solo/0  a     14     released
";

/// Above `DETAIL_SLOTS` slots the text form leads with the slots that need a look (a
/// pending one, one still on the old version during a rollout) and counts the rest.
#[test]
fn a_large_status_is_summed_up_with_the_problems_first() {
    let mut w = super::fixture::many_resources(100);
    // A rollout of r00007 to 1.1.0 has begun: the slot still runs 1.0.0.
    for node in ["n1", "n2", "n3", "n4", "n5"] {
        w.advertise(node, "r00007", "1.1.0", 'b', 1);
    }
    let pending = vec![("r00099".into(), 1, "no eligible node".into())];
    let mut s = Status::build(&w.cluster, raft(), pending, NOW);
    s.certificates = vec![CertificateView {
        name: "n1".into(),
        kind: "node".into(),
        key: digest('7'),
        certificate: digest('6'),
        own: true,
    }];
    let text = s.render();
    println!("{text}");
    let problems = text.find("r00007/0").expect("the slot behind is listed");
    let nodes = text.find("NODE ").unwrap();
    assert!(problems < nodes, "problems come first");
    assert!(
        text.contains("older version: the plugin is now 1.1.0"),
        "{text}"
    );
    assert!(text.contains("r00099/1  pending"), "{text}");
    assert!(text.contains("no eligible node"), "{text}");
    assert!(
        !text.contains("r00042"),
        "owned, current slots are only counted"
    );
    assert!(
        text.contains("100 resources, 101 slots: 100 owned, 0 releasing, 1 pending; 1 on an older plugin version"),
        "{text}"
    );
    assert!(
        text.contains("100 plugins"),
        "a node's plugins are counted: {text}"
    );
    assert!(
        text.contains(&format!("n1              node  {}  own", digest('7'))),
        "{text}"
    );
}

#[test]
fn a_failed_plugin_s_row_says_its_last_error_and_when_it_is_tried_again() {
    let mut w = three_nodes();
    // a gave solo/0 up: it cools down for solo for 45 s more. Then a's session was replaced
    // (its echo/0 vacated as expired).
    let token = w.cluster.slot("solo", 0).unwrap().token;
    w.apply(Command::GiveUp {
        resource: "solo".into(),
        slot: 0,
        token,
        until_ms: NOW + 45_000,
        at_ms: NOW - 15_000,
    });
    w.apply(Command::OpenSession {
        node: "a".into(),
        at_ms: NOW - 5_000,
    });
    // b (which answers) restarts echo after a failure; it knows its own error only.
    let failures = BTreeMap::from([(
        "echo".to_owned(),
        crate::failures::LastFailure {
            plugin: "echo".into(),
            slot: 1,
            token: 5,
            outcome: "returned".into(),
            error: "cannot reach the database".into(),
            at_ms: NOW - 2_000,
            restart_ms: Some(NOW + 1_600),
            failures: 2,
            max_restarts: 3,
        },
    )]);
    let s = Status::build(&w.cluster, raft(), vec![], NOW).with_failures(&failures);

    let row = |node: &str, resource: &str| row_of(&s, node, resource);
    assert_eq!(row("a", "solo").cooldown_until_ms, Some(NOW + 45_000));
    assert_eq!(row("a", "solo").last_failure, None, "only a knows it");
    assert_eq!(row("b", "solo").cooldown_until_ms, None);
    let echo = row("b", "echo").last_failure.unwrap();
    assert_eq!(
        (echo.error.as_str(), echo.restart_ms, echo.failures),
        ("cannot reach the database", Some(NOW + 1_600), 2)
    );
    assert_eq!(row("a", "echo").last_failure, None, "a's failures are a's");
    assert_eq!(
        s.cooling_elsewhere(),
        [("a".to_owned(), "a:7400".to_owned())]
    );

    let text = s.render();
    let line = |start: &str| {
        text.lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line starting {start:?} in:\n{text}"))
            .to_owned()
    };
    assert!(text.contains("NODE  RESOURCE  PLUGIN"), "{text}");
    let b = line("b     echo");
    assert!(b.contains("2s ago"), "{b}");
    assert!(b.contains("returned: cannot reach the database"), "{b}");
    assert!(b.contains("restart 2 of 3 in 2s"), "{b}");
    let a = line("a     solo");
    assert!(a.contains("not known to b: see a's log"), "{a}");
    assert!(
        a.contains("gave the slot up; cooling down until ")
            && a.contains(" (in 45s), then eligible again"),
        "{a}"
    );
    // One word for one reason: the watch says session-expired, so does the text.
    assert!(text.contains("session-expired"), "{text}");
    assert!(
        s.history.iter().any(|h| h.what == "expired"),
        "the JSON keeps its value"
    );

    // Another node's answer fills in a's row.
    let mut theirs = Status::build(
        &w.cluster,
        RaftView {
            node: "a".into(),
            ..raft()
        },
        vec![],
        NOW,
    );
    theirs = theirs.with_failures(&BTreeMap::from([(
        "solo".to_owned(),
        crate::failures::LastFailure {
            plugin: "solo".into(),
            slot: 0,
            token,
            outcome: "trapped".into(),
            error: "wasm trap: unreachable".into(),
            at_ms: NOW - 15_000,
            restart_ms: None,
            failures: 4,
            max_restarts: 3,
        },
    )]));
    let mut s = s;
    s.take_failures_of(&theirs);
    assert_eq!(
        row_of(&s, "a", "solo").last_failure.map(|f| f.error),
        Some("wasm trap: unreachable".to_owned())
    );
    assert!(s.cooling_elsewhere().is_empty());
    assert!(s.render().contains("trapped: wasm trap: unreachable"));
}

fn row_of(s: &Status, node: &str, resource: &str) -> PluginView {
    let n = s.nodes.iter().find(|n| n.name == node).unwrap();
    n.plugins
        .iter()
        .find(|p| p.resource == resource)
        .unwrap()
        .clone()
}

/// Issue 26 item 6: nodes with other files for the running version are named in a
/// warning, with what runs and why; nodes on another version (a rollout) are not.
#[test]
fn render_warns_when_the_nodes_disagree_on_a_version_s_files() {
    let mut w = three_nodes();
    w.apply(Command::RaiseVersion {
        to: crate::version::INSTALL_ORDER,
    });
    // b installs another manifest of echo 1.0.0 with a smaller digest, later than a and
    // c did (so the greater digest would not choose it); c gets solo 3.0.0, a rollout,
    // not a disagreement.
    w.advertise("b", "echo", "1.0.0", '0', 2);
    w.advertise("c", "solo", "3.0.0", 't', 1);
    let text = Status::build(&w.cluster, raft(), Vec::new(), NOW).render();
    let warnings: Vec<&str> = text.lines().filter(|l| l.starts_with("warning:")).collect();
    assert_eq!(
        warnings,
        [
            "warning: the nodes disagree on echo 1.0.0: a has sha256:eeeeeeeeeeee tickets=2, \
          c has sha256:eeeeeeeeeeee tickets=2; sha256:000000000000 tickets=2 runs (installed \
          last). Nodes with another digest get none of its slots. Install the same plugin \
          and manifest on every node."
        ],
        "{text}"
    );

    // Before the version, the greater digest runs, and the warning says so.
    let mut w = three_nodes();
    w.advertise("b", "echo", "1.0.0", '0', 2);
    let text = Status::build(&w.cluster, raft(), Vec::new(), NOW).render();
    assert!(
        text.contains("warning: the nodes disagree on echo 1.0.0: b has sha256:000000000000 tickets=2; sha256:eeeeeeeeeeee tickets=2 runs (by digest, then tickets, until the cluster's version is raised). Nodes"),
        "{text}"
    );
    // Another spec of the same build: named, but its node runs the build (before the
    // version, the greater tickets win).
    let mut w = three_nodes();
    w.advertise("b", "echo", "1.0.0", 'e', 3);
    let text = Status::build(&w.cluster, raft(), Vec::new(), NOW).render();
    let warning = text
        .lines()
        .find(|l| l.starts_with("warning:"))
        .expect(&text);
    assert!(
        warning.contains(": a has sha256:eeeeeeeeeeee tickets=2, c has sha256:eeeeeeeeeeee tickets=2; sha256:eeeeeeeeeeee tickets=3 runs"),
        "{warning}"
    );
    assert!(!warning.contains("get none"), "{warning}");
    // Agreeing nodes: no warning.
    let text = Status::build(&three_nodes().cluster, raft(), Vec::new(), NOW).render();
    assert!(!text.contains("warning:"), "{text}");
}

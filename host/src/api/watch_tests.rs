//! The watch protocol without I/O: what a node answers from its replica, and how the
//! client resumes across nodes that are ahead, behind, or compacted.

use std::collections::BTreeMap;

use super::fixture::{T0, three_nodes};
use super::watch::*;
use super::{AdminRequest, encode};
use crate::cluster::{Cluster, Command, HISTORY_LEN, Handover};

fn changes(cluster: &Cluster, resource: Option<&str>, after: u64) -> (Vec<WatchEvent>, u64) {
    match since(cluster, resource, after) {
        Since::Changes { events, upto } => (events, upto),
        Since::Compacted => panic!("compacted after {after}"),
    }
}

/// The answer a node with `cluster` gives to a client at `after`.
fn answer(cluster: &Cluster, resource: Option<&str>, after: Option<u64>) -> WatchAnswer {
    let (batch, events, upto) = match after {
        None => (
            Batch::Listing,
            listing(cluster, resource, &BTreeMap::new()).unwrap(),
            last_change(cluster),
        ),
        Some(after) => match since(cluster, resource, after) {
            Since::Changes { events, upto } => (Batch::Changes, events, upto),
            Since::Compacted => (
                Batch::Resync,
                listing(cluster, resource, &BTreeMap::new()).unwrap(),
                last_change(cluster),
            ),
        },
    };
    WatchAnswer {
        node: "n".into(),
        batch,
        upto,
        events,
        members: Vec::new(),
    }
}

#[test]
fn a_listing_shows_every_slot_as_of_the_last_change_and_changes_follow_it() {
    let mut w = three_nodes();
    let listed = listing(&w.cluster, None, &BTreeMap::new()).unwrap();
    let as_of = last_change(&w.cluster);
    let lines: Vec<String> = listed.iter().map(WatchEvent::render).collect();
    assert_eq!(
        lines,
        [
            format!("index={as_of} current granted echo/0 node=a token=12 term=2"),
            format!("index={as_of} current granted echo/1 node=b token=13 term=2"),
            format!("index={as_of} current granted solo/0 node=a token=14 term=2"),
        ]
    );
    assert_eq!(changes(&w.cluster, None, as_of), (vec![], as_of));

    w.hand_over("solo", 0, Handover::Moved, Some("b"), T0 + 20_000);
    w.apply(Command::Release {
        resource: "solo".into(),
        slot: 0,
        token: 14,
        at_ms: T0 + 21_000,
    });
    let token = w.grant("solo", 0, "b", T0 + 22_000);
    let (events, upto) = changes(&w.cluster, None, as_of);
    let lines: Vec<String> = events.iter().map(WatchEvent::render).collect();
    assert_eq!(
        lines,
        [
            "index=15 change releasing solo/0 node=a token=14 term=2 reason=moved",
            "index=16 change released solo/0 node=a token=14 term=2",
            "index=17 change granted solo/0 node=b token=17 term=2",
        ]
    );
    assert_eq!((upto, token), (17, 17));
    let (events, _) = changes(&w.cluster, Some("echo"), as_of);
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn an_expiry_vacates_every_slot_of_the_node_at_one_index_and_terms_are_the_grants() {
    let mut w = three_nodes();
    let as_of = last_change(&w.cluster);
    let session = w.cluster.members["a"].session.as_ref().unwrap().id;
    w.apply(Command::EndSession {
        node: "a".into(),
        session,
        expired_in: Some(2),
        at_ms: T0 + 30_000,
    });
    // Granted again in term 5.
    let index = last_change(&w.cluster) + 1;
    let b_session = w.cluster.members["b"].session.as_ref().unwrap().id;
    w.cluster.apply(
        index,
        5,
        Command::Assign {
            resource: "solo".into(),
            slot: 0,
            node: "b".into(),
            session: b_session,
            version: "2.0.0".parse().unwrap(),
            digest: super::fixture::digest('s'),
            at_ms: T0 + 31_000,
        },
    );
    let (events, upto) = changes(&w.cluster, None, as_of);
    let summary: Vec<_> = events
        .iter()
        .map(|e| {
            (
                e.index,
                e.event,
                e.resource.as_str(),
                e.term,
                e.reason.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (15, Event::Vacant, "echo", Some(2), Some("session-expired")),
            (15, Event::Vacant, "solo", Some(2), Some("session-expired")),
            (16, Event::Granted, "solo", Some(5), None),
        ]
    );
    assert_eq!(upto, 16);
}

#[test]
fn a_client_neither_loses_nor_repeats_a_change_across_nodes_ahead_and_behind() {
    let mut w = three_nodes();
    let behind = w.cluster.clone();
    let mut resume = Resume::default();
    assert_eq!(
        resume.request(None),
        AdminRequest::Watch {
            resource: None,
            after: None
        }
    );
    let listed = resume.take(answer(&w.cluster, None, None));
    assert_eq!((listed.resync, listed.events.len()), (false, 3));
    let as_of = resume.after().unwrap();

    w.hand_over("echo", 0, Handover::Drained, None, T0 + 20_000);
    w.hand_over("echo", 1, Handover::Drained, None, T0 + 20_001);
    let middle = w.cluster.clone();
    w.hand_over("solo", 0, Handover::Drained, None, T0 + 20_002);

    // The first node is up to date: two changes, then the third.
    let got = resume.take(answer(&middle, None, Some(as_of)));
    assert_eq!(
        got.events.iter().map(|e| e.index).collect::<Vec<_>>(),
        [15, 16]
    );
    // It dies; the next node is behind the client: nothing, and the index stays.
    let got = resume.take(answer(&behind, None, resume.after()));
    assert!(got.events.is_empty());
    assert_eq!(resume.after(), Some(16));
    // A node that is ahead, asked from the client's index: only what is new.
    let got = resume.take(answer(&w.cluster, None, resume.after()));
    assert_eq!(got.events.iter().map(|e| e.index).collect::<Vec<_>>(), [17]);
    // A node that sends old changes anyway (e.g. asked with an older index) repeats none.
    let got = resume.take(answer(&w.cluster, None, Some(as_of)));
    assert!(got.events.is_empty(), "{:?}", got.events);
    assert_eq!(resume.after(), Some(17));
}

#[test]
fn a_filtered_watch_moves_past_other_resources_changes() {
    let mut w = three_nodes();
    let as_of = last_change(&w.cluster);
    let mut resume = Resume::default();
    resume.take(answer(&w.cluster, Some("solo"), None));
    w.hand_over("echo", 0, Handover::Drained, None, T0 + 20_000);
    let got = resume.take(answer(&w.cluster, Some("solo"), resume.after()));
    assert!(got.events.is_empty(), "{:?}", got.events);
    assert_eq!(
        resume.after(),
        Some(as_of + 1),
        "the answer covers the echo change"
    );
}

#[test]
fn a_client_older_than_the_history_resyncs() {
    let mut w = three_nodes();
    let as_of = last_change(&w.cluster);
    // Regrants of echo/0 until the history has dropped its oldest entries.
    for i in 0..HISTORY_LEN as u64 {
        let token = w.cluster.slot("echo", 0).unwrap().token;
        w.apply(Command::Regrant {
            resource: "echo".into(),
            slot: 0,
            token,
            at_ms: T0 + 40_000 + i,
        });
    }
    let oldest = w.cluster.history.front().unwrap().index;
    assert!(oldest > as_of);
    assert_eq!(since(&w.cluster, None, as_of), Since::Compacted);
    assert_eq!(since(&w.cluster, None, oldest - 1), Since::Compacted);
    let (events, _) = changes(&w.cluster, None, oldest);
    assert_eq!(events.len(), MAX_CHANGES, "the first answer of the rest");
    assert_eq!(events[0].index, oldest + 1);

    let mut resume = Resume::default();
    resume.take(answer(&three_nodes().cluster, None, None));
    let got = resume.take(answer(&w.cluster, None, resume.after()));
    assert!(got.resync);
    assert_eq!(got.events.len(), 3, "a fresh listing");
    assert_eq!(resume.after(), Some(last_change(&w.cluster)));
}

#[test]
fn an_answer_is_cut_between_indexes_and_fits_a_frame() {
    let mut w = three_nodes();
    let as_of = last_change(&w.cluster);
    for i in 0..(MAX_CHANGES as u64 + 10) {
        let token = w.cluster.slot("echo", 0).unwrap().token;
        w.apply(Command::Regrant {
            resource: "echo".into(),
            slot: 0,
            token,
            at_ms: T0 + 40_000 + i,
        });
    }
    let (events, upto) = changes(&w.cluster, None, as_of);
    assert_eq!(events.len(), MAX_CHANGES);
    assert_eq!(upto, events.last().unwrap().index);
    let (rest, _) = changes(&w.cluster, None, upto);
    assert_eq!(rest.len(), 10);

    // The largest answer: as many lines as a listing may carry, with the longest names
    // (node names are DNS labels: 63 bytes at most, `pki::validate_name`).
    let event = WatchEvent {
        listing: false,
        event: Event::Releasing,
        resource: "r".repeat(128),
        slot: u32::MAX,
        node: Some("n".repeat(63)),
        token: Some(u64::MAX),
        term: Some(u64::MAX),
        index: u64::MAX,
        reason: Some("plugin-updated".into()),
        at_ms: Some(u64::MAX),
    };
    let answer = WatchAnswer {
        node: "n".repeat(63),
        batch: Batch::Changes,
        upto: u64::MAX,
        events: vec![event.clone(); MAX_CHANGES.max(MAX_LISTED)],
        members: vec![("n".repeat(63), "h".repeat(260)); 64],
    };
    let bytes = encode(&super::AdminResponse::Watch(answer)).unwrap();
    assert!(bytes.len() < 1 << 20, "{} bytes", bytes.len());
}

#[test]
fn untrusted_names_are_escaped_in_text_lines() {
    let event = WatchEvent {
        listing: false,
        event: Event::Granted,
        resource: "r".into(),
        slot: 0,
        node: Some("n\x1b[2J\nforged".into()),
        token: Some(1),
        term: Some(1),
        index: 1,
        reason: None,
        at_ms: None,
    };
    assert_eq!(
        event.render(),
        "index=1 change granted r/0 node=n\\x1b[2J\\nforged token=1 term=1"
    );
}

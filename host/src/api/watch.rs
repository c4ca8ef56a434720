//! `tenure watch`: the current owners, then every ownership change as the cluster applies
//! it, resumable on any node.
//!
//! The protocol is a long poll over the admin API ([`AdminRequest::Watch`]), one request
//! one answer like every admin request, answered by any node from its own replica (no
//! leader needed: ownership changes are replicated state, and a follower's copy is a
//! prefix of the leader's):
//! - `after: None` asks for a **listing**: one [`WatchEvent`] per slot (granted,
//!   releasing, or pending with placement's reason) as of the index of the last
//!   ownership change the replica holds ([`WatchAnswer::upto`]);
//! - `after: Some(i)` asks for the **changes** with index > `i` (the replicated
//!   `Cluster::history`, each carrying the Raft log index that made it), waiting up to
//!   [`HOLD`] for the first; an answer with none still says how far the node looked
//!   (`upto`), so that a filtered watch moves on past other resources' changes;
//! - if `i` is older than the oldest change the history still keeps (it holds the last
//!   `HISTORY_LEN`), the changes in between are gone: the node answers a **resync**, a
//!   fresh listing, as etcd answers a compacted revision and an informer relists.
//!
//! Every slot change in the replicated state is recorded in the history at the index of
//! the entry that made it (`cluster/apply.rs`), so "the state of the replica" and "every
//! change up to the last recorded index" are the same thing: the listing's `upto` is an
//! exact resume point, not an approximation. Several changes may share an index (a batch,
//! or a session end that vacates several slots); an answer never splits an index, so
//! "every change with index > upto" is always the rest.
//!
//! The client side is [`Resume`]: it keeps the last index it has handed out, asks for
//! what follows it, and drops anything at or below it, so that switching nodes (a dead
//! node, a leader change, a node behind the others) neither loses nor repeats a change.
//! A node behind the client's index simply has nothing newer yet and waits.
//!
//! `pending` appears only in listings: placement's reasons for a vacant slot are each
//! node's own reading of the state, not replicated changes with an index, so a change
//! stream of them could not be resumed exactly. A slot that becomes vacant is a change
//! (`released` by its owner, `vacant` when its session expired or its owner gave up).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::AdminRequest;
use super::status::{SlotState, resources};
use crate::cluster::{Cluster, HISTORY_LEN, HistoryEntry, HistoryKind};
use crate::terminal::escape;

/// How long a node holds a watch request that has nothing new yet. Below the transport's
/// bound on a handler (5 s), with room for the answer.
pub const HOLD: Duration = Duration::from_secs(3);

/// The most slots one listing carries. A slot's line is at most ~350 bytes encoded (a
/// resource name of 128 bytes, a node name of 63, a reason), so this keeps a listing well
/// within a 1 MiB frame; a cluster with more slots is watched one resource at a time.
pub const MAX_LISTED: usize = 2000;

/// The most changes one answer carries (whole indexes only, so an index with more
/// changes than this, which needs a node holding as many slots, goes out whole). The
/// whole history fits a frame anyway; this keeps answers small.
pub const MAX_CHANGES: usize = 500;

/// What a [`WatchEvent`] says happened to, or is the state of, a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Event {
    /// The slot was granted to `node` (or, in a listing, is held by it): `token` and
    /// `term` are the grant's. A restart of a failed plugin is a new grant to the same
    /// node (reason `restarted`).
    Granted,
    /// A graceful handover began (`reason` says why): the owner stops and cleans up.
    Releasing,
    /// The owner gave the slot up after its cleanup, or closed its session: vacant now.
    Released,
    /// The slot became vacant without its owner's release: its session expired
    /// (`session-expired`), or its plugin kept failing (`gave-up`).
    Vacant,
    /// In a listing only: vacant, waiting for placement (`reason` says why).
    Pending,
}

impl Event {
    /// The name used in output: granted, releasing, released, vacant, pending.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Granted => "granted",
            Event::Releasing => "releasing",
            Event::Released => "released",
            Event::Vacant => "vacant",
            Event::Pending => "pending",
        }
    }
}

/// One line of `tenure watch`: a slot's state in a listing, or one change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEvent {
    /// Part of a listing (the slot's state as of `index`), not a change made at `index`.
    pub listing: bool,
    pub event: Event,
    pub resource: String,
    pub slot: u32,
    /// The owner (the former owner for `released` and `vacant`); `null` for `pending`.
    pub node: Option<String>,
    /// The fencing token of the grant concerned; `null` for `pending`.
    pub token: Option<u64>,
    /// The Raft term of that grant; `null` for `pending`.
    pub term: Option<u64>,
    /// The log index of the change, or that a listing is as of.
    pub index: u64,
    /// Why: a handover's reason, `session-expired`, `gave-up`, `restarted`, or
    /// placement's reason for a pending slot.
    pub reason: Option<String>,
    /// When (the proposer's wall clock, ms since the Unix epoch); for a listed slot,
    /// when it was granted.
    pub at_ms: Option<u64>,
}

/// What an answer carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Batch {
    /// Changes after the index asked for, up to `upto`.
    Changes,
    /// A listing as of `upto`, as asked (`after: None`).
    Listing,
    /// A listing as of `upto`, because changes after the index asked for are no longer
    /// kept: the client starts again from it.
    Resync,
}

/// A node's answer to [`AdminRequest::Watch`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchAnswer {
    /// The node that answered.
    pub node: String,
    pub batch: Batch,
    /// Listing: the index it is as of. Changes: every change up to this index (of the
    /// resource asked for) is in this answer or was after the index asked for.
    pub upto: u64,
    pub events: Vec<WatchEvent>,
    /// Every member of the cluster as (name, address), for a client to fail over to.
    pub members: Vec<(String, String)>,
}

/// The index of the last ownership change `cluster` holds (0 if none).
pub fn last_change(cluster: &Cluster) -> u64 {
    cluster.history.back().map_or(0, |h| h.index)
}

/// The listing of `cluster`'s slots (of `resource` only, if given) as of its last
/// change, with placement's `pending` reasons by (resource, slot); an error if there
/// are more than [`MAX_LISTED`].
pub fn listing(
    cluster: &Cluster,
    resource: Option<&str>,
    pending: &BTreeMap<(String, u32), String>,
) -> Result<Vec<WatchEvent>, String> {
    let index = last_change(cluster);
    let mut events = Vec::new();
    for view in resources(cluster, pending) {
        if resource.is_some_and(|r| r != view.name) {
            continue;
        }
        for slot in view.slots {
            if events.len() == MAX_LISTED {
                return Err(format!(
                    "the cluster has more than {MAX_LISTED} slots, more than one answer \
                     carries: watch one resource at a time (`tenure watch RESOURCE`)"
                ));
            }
            let (event, reason) = match slot.state {
                SlotState::Owned => (Event::Granted, None),
                SlotState::Releasing => (
                    Event::Releasing,
                    slot.releasing.as_ref().map(|r| r.reason.clone()),
                ),
                SlotState::Pending => (Event::Pending, slot.pending.clone()),
            };
            events.push(WatchEvent {
                listing: true,
                event,
                resource: view.name.clone(),
                slot: slot.slot,
                node: slot.owner,
                token: slot.token,
                term: slot.term,
                index,
                reason,
                at_ms: slot.since_ms,
            });
        }
    }
    Ok(events)
}

/// What a node has for a watch that resumes after index `after`.
#[derive(Debug, PartialEq, Eq)]
pub enum Since {
    /// The changes after `after` (possibly none yet), complete up to `upto`.
    Changes { events: Vec<WatchEvent>, upto: u64 },
    /// Changes after `after` are no longer kept: send a fresh listing.
    Compacted,
}

/// The changes of `cluster`'s history after index `after` (of `resource` only, if
/// given): at most [`MAX_CHANGES`], in whole indexes.
pub fn since(cluster: &Cluster, resource: Option<&str>, after: u64) -> Since {
    let history = &cluster.history;
    // A full history has dropped its oldest changes, some maybe at the index of the
    // oldest one kept; anything older than that may be gone.
    if history.len() >= HISTORY_LEN && history.front().is_some_and(|h| after < h.index) {
        return Since::Compacted;
    }
    let mut events = Vec::new();
    let mut upto = after.max(last_change(cluster));
    let start = history.partition_point(|h| h.index <= after);
    let mut scanned = after;
    for h in history.range(start..) {
        // Stop only between indexes: the next answer resumes after `scanned`.
        if events.len() >= MAX_CHANGES && h.index > scanned {
            upto = scanned;
            break;
        }
        scanned = h.index;
        if resource.is_none_or(|r| r == h.resource) {
            events.push(change(h));
        }
    }
    Since::Changes { events, upto }
}

/// A history entry as a watch event.
fn change(h: &HistoryEntry) -> WatchEvent {
    let (event, reason) = match &h.what {
        HistoryKind::Granted => (Event::Granted, None),
        HistoryKind::Regranted => (Event::Granted, Some("restarted".to_owned())),
        HistoryKind::HandoverBegun(why) => (Event::Releasing, Some(why.as_str().to_owned())),
        HistoryKind::Released => (Event::Released, None),
        HistoryKind::GaveUp => (Event::Vacant, Some("gave-up".to_owned())),
        HistoryKind::Expired => (Event::Vacant, Some("session-expired".to_owned())),
    };
    WatchEvent {
        listing: false,
        event,
        resource: h.resource.clone(),
        slot: h.slot,
        node: Some(h.node.clone()),
        token: Some(h.token),
        term: Some(h.term),
        index: h.index,
        reason,
        at_ms: Some(h.at_ms),
    }
}

/// The client's place in the stream: what to ask next, and which answers are new.
#[derive(Debug, Default)]
pub struct Resume {
    /// The index up to which every change has been handed out (the listing's, then the
    /// last change's or the furthest `upto`); `None` before the first listing.
    after: Option<u64>,
}

/// What [`Resume::take`] hands out from one answer.
#[derive(Debug, PartialEq, Eq)]
pub struct Taken {
    /// A fresh listing follows because changes were lost to compaction: say so.
    pub resync: bool,
    /// The lines to print, in order.
    pub events: Vec<WatchEvent>,
}

impl Resume {
    /// The request that continues the stream.
    pub fn request(&self, resource: Option<&str>) -> AdminRequest {
        AdminRequest::Watch {
            resource: resource.map(str::to_owned),
            after: self.after,
        }
    }

    /// The index up to which every change has been handed out, if any.
    pub fn after(&self) -> Option<u64> {
        self.after
    }

    /// Takes an answer to [`Resume::request`]: the lines not handed out before, and the
    /// next place to resume from. A listing is taken whole (it is a state, not changes);
    /// changes at or below the index already reached are dropped, whichever node sent
    /// them, and the index never goes back.
    pub fn take(&mut self, answer: WatchAnswer) -> Taken {
        let reached = self.after;
        let upto = reached.map_or(answer.upto, |r| r.max(answer.upto));
        match answer.batch {
            Batch::Listing | Batch::Resync => {
                self.after = Some(upto);
                Taken {
                    resync: answer.batch == Batch::Resync,
                    events: answer.events,
                }
            }
            Batch::Changes => {
                let events: Vec<WatchEvent> = answer
                    .events
                    .into_iter()
                    .filter(|e| reached.is_none_or(|r| e.index > r))
                    .collect();
                let last = events.last().map_or(0, |e| e.index);
                self.after = Some(upto.max(last));
                Taken {
                    resync: false,
                    events,
                }
            }
        }
    }
}

impl WatchEvent {
    /// The line `tenure watch` prints for people: untrusted names escaped.
    pub fn render(&self) -> String {
        let mut line = format!(
            "index={} {} {} {}/{}",
            self.index,
            if self.listing { "current" } else { "change" },
            self.event.as_str(),
            escape(&self.resource),
            self.slot
        );
        if let Some(node) = &self.node {
            line.push_str(&format!(" node={}", escape(node)));
        }
        if let Some(token) = self.token {
            line.push_str(&format!(" token={token}"));
        }
        if let Some(term) = self.term {
            line.push_str(&format!(" term={term}"));
        }
        if let Some(reason) = &self.reason {
            line.push_str(&format!(" reason={}", escape(reason)));
        }
        line
    }
}

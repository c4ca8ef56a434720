//! `tenure status` in pages: the answer for a large cluster does not fit in one frame.
//!
//! At 10,000 resources on five nodes a [`Status`] is about 6.7 MB in postcard, and a frame
//! carries 1 MiB. So the operator asks for a [`StatusQuery`] and gets a [`StatusPage`]: a
//! `Status` whose resources are those after `after` in name order, up to [`PAGE_BYTES`],
//! and whose nodes carry only their plugins for those resources; `next` names the last
//! resource of the page while more follow. [`merge`] puts the pages back together, so
//! the client ends with the same `Status` a small cluster gives in one page.
//!
//! **One moment, not several.** The first page builds the whole status once and keeps it
//! as a snapshot (at most [`SNAPSHOTS_KEPT`], for [`SNAPSHOT_TTL`]); later pages name it
//! and are cut from it, so the counts an operator reads add up even while ownership
//! changes. A page asked of a snapshot that is gone (expired, or evicted by other
//! operators) is answered from a fresh one, from the start; its new `snapshot` id tells
//! the client to begin again.
//!
//! Filters (`--resource`, `--node`) are applied to the snapshot before paging: a
//! resource filter keeps that resource, the nodes' plugins for it and its history; a node
//! filter keeps that node, the resources it advertises or holds a slot of, and its
//! history.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{NodeView, ResourceView, Status};

/// Resources (and the nodes' plugins for them) per page, in encoded bytes: a quarter of
/// the default frame, so a page fits with room to spare whatever the node's limit.
pub const PAGE_BYTES: usize = 256 << 10;
/// How long a snapshot serves later pages.
pub const SNAPSHOT_TTL: Duration = Duration::from_secs(30);
/// Snapshots kept at once (operators paging at the same time); the oldest goes first.
pub const SNAPSHOTS_KEPT: usize = 4;

/// Which part of the status to send.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusQuery {
    /// Only this resource.
    pub resource: Option<String>,
    /// Only this node, and the resources it advertises or holds.
    pub node: Option<String>,
    /// The snapshot the earlier pages came from; `None` for the first page.
    pub snapshot: Option<u64>,
    /// The last resource of the previous page; `None` for the first page.
    pub after: Option<String>,
}

/// One page of a status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusPage {
    /// The snapshot it was cut from: when it differs from the one asked for, the old one
    /// was gone and this is the first page of a new one.
    pub snapshot: u64,
    /// The page: the first carries the revoked keys, the certificates and the history;
    /// the others only their resources and plugins.
    pub status: Status,
    /// Ask again with `after` = this, while `Some`.
    pub next: Option<String>,
}

/// The statuses later pages are cut from.
#[derive(Default)]
pub(crate) struct Snapshots {
    /// The last id given, and the snapshots kept, oldest first.
    kept: Mutex<(u64, VecDeque<Kept>)>,
}

/// A snapshot: its id, when it was built, and the status.
type Kept = (u64, Instant, Arc<Status>);

impl Snapshots {
    /// The snapshot `id`, if it is still kept.
    pub(crate) fn get(&self, id: u64) -> Option<Arc<Status>> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.1.retain(|(_, at, _)| at.elapsed() < SNAPSHOT_TTL);
        kept.1
            .iter()
            .find(|(i, _, _)| *i == id)
            .map(|(_, _, s)| s.clone())
    }

    /// Keeps `status` and returns its id.
    pub(crate) fn keep(&self, status: Arc<Status>) -> u64 {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.0 += 1;
        let id = kept.0;
        if kept.1.len() == SNAPSHOTS_KEPT {
            kept.1.pop_front();
        }
        kept.1.push_back((id, Instant::now(), status));
        id
    }
}

/// The page of `full` that `query` asks for (its `snapshot` is not looked at), and the
/// `after` of the next page.
pub fn page(full: &Status, query: &StatusQuery) -> (Status, Option<String>) {
    let wanted_resource = |name: &str| query.resource.as_deref().is_none_or(|r| r == name);
    let wanted_node = |name: &str| query.node.as_deref().is_none_or(|n| n == name);
    let node_filter = query
        .node
        .as_deref()
        .and_then(|n| full.nodes.iter().find(|v| v.name == n));
    let node_has = |r: &ResourceView| match (&query.node, node_filter) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(n), Some(v)) => {
            r.slots.iter().any(|s| s.owner.as_ref() == Some(n))
                || plugin_index(v, &r.name).is_some()
        }
    };
    let candidates = full
        .resources
        .iter()
        .filter(|r| query.after.as_ref().is_none_or(|after| &r.name > after))
        .filter(|r| wanted_resource(&r.name) && node_has(r));
    let nodes: Vec<&NodeView> = full.nodes.iter().filter(|n| wanted_node(&n.name)).collect();

    let mut resources = Vec::new();
    let mut bytes = 0;
    let mut next = None;
    for r in candidates {
        let size = encoded_len(r)
            + nodes
                .iter()
                .filter_map(|n| plugin_index(n, &r.name).map(|i| encoded_len(&n.plugins[i])))
                .sum::<usize>();
        if !resources.is_empty() && bytes + size > PAGE_BYTES {
            next = resources.last().map(|r: &ResourceView| r.name.clone());
            break;
        }
        bytes += size;
        resources.push(r.clone());
    }
    // The plugins of this page: those whose resource falls in its range of names, so
    // that each plugin is in exactly one page, including plugins of resources the status
    // does not list (a node without a session).
    let in_range = |resource: &str| {
        wanted_resource(resource)
            && query.after.as_deref().is_none_or(|after| resource > after)
            && next.as_deref().is_none_or(|last| resource <= last)
    };
    let nodes = nodes
        .into_iter()
        .map(|n| NodeView {
            plugins: n
                .plugins
                .iter()
                .filter(|p| in_range(&p.resource))
                .cloned()
                .collect(),
            ..n.clone()
        })
        .collect();
    let first = query.after.is_none();
    let history = full
        .history
        .iter()
        .filter(|h| first && wanted_resource(&h.resource) && wanted_node(&h.node))
        .cloned()
        .collect();
    let status = Status {
        nodes,
        resources,
        revoked: if first { full.revoked.clone() } else { vec![] },
        certificates: if first {
            full.certificates
                .iter()
                .filter(|c| wanted_node(&c.name) || query.node.is_none())
                .cloned()
                .collect()
        } else {
            vec![]
        },
        history,
        history_len: full.history_len,
        diverged: if first { full.diverged.clone() } else { vec![] },
        cluster: full.cluster,
        version: full.version,
        node: full.node.clone(),
        at_ms: full.at_ms,
        leader: full.leader.clone(),
        term: full.term,
    };
    (status, next)
}

/// Adds a later page to the status put together so far.
pub fn merge(into: &mut Status, page: Status) {
    into.resources.extend(page.resources);
    for node in page.nodes {
        match into.nodes.iter_mut().find(|n| n.name == node.name) {
            Some(n) => n.plugins.extend(node.plugins),
            None => into.nodes.push(node),
        }
    }
}

/// Where `resource`'s plugin is in `node`'s list (sorted by resource).
fn plugin_index(node: &NodeView, resource: &str) -> Option<usize> {
    node.plugins
        .binary_search_by(|p| p.resource.as_str().cmp(resource))
        .ok()
}

fn encoded_len<T: Serialize>(value: &T) -> usize {
    postcard::experimental::serialized_size(value).unwrap_or(usize::MAX / 2)
}

//! The resources of the cluster, one at a time, as every member sees them.
//!
//! Placement looks at each resource's granted slots and at every node's advert of it.
//! Looking those up by name costs a walk down a 10,000-key map per lookup, comparing
//! strings on the way; instead [`Rows`] walks all those maps side by side, in key order
//! (a merge of sorted lists), so each resource costs one comparison per map and the
//! memory is read in order.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::collections::btree_map::Iter;
use std::iter::Peekable;

use crate::cluster::{Advert, Cluster, Slot};

use super::view::Node;

type Cursor<'a, V> = Peekable<Iter<'a, String, V>>;

/// A walk over every resource that has a granted slot or an advert, in name order. After
/// [`Rows::advance`] returns true the public fields describe the current resource.
pub(super) struct Rows<'a> {
    /// The current resource.
    pub resource: &'a str,
    /// Its granted slots, if any.
    pub slots: Option<&'a BTreeMap<u32, Slot>>,
    /// Per live node (in the order of the `nodes` given to [`Rows::new`]): its advert.
    pub adverts: Vec<Option<&'a Advert>>,
    /// Adverts of members without a session.
    pub down: Vec<&'a Advert>,
    live: Vec<Cursor<'a, Advert>>,
    dead: Vec<Cursor<'a, Advert>>,
    granted: Cursor<'a, BTreeMap<u32, Slot>>,
    /// Scratch: the maps whose head is the current resource.
    here: Vec<usize>,
}

impl<'a> Rows<'a> {
    pub fn new(cluster: &'a Cluster, nodes: &[Node<'a>]) -> Self {
        Rows {
            resource: "",
            slots: None,
            adverts: vec![None; nodes.len()],
            down: Vec::new(),
            live: nodes
                .iter()
                .map(|n| n.member.plugins.iter().peekable())
                .collect(),
            dead: cluster
                .members
                .values()
                .filter(|m| m.session.is_none())
                .map(|m| m.plugins.iter().peekable())
                .collect(),
            granted: cluster.resources.iter().peekable(),
            here: Vec::new(),
        }
    }

    /// Moves to the next resource; false when there is none.
    pub fn advance(&mut self) -> bool {
        // One comparison per map: the smallest head key, and which maps have it.
        let mut next: Option<&'a str> = None;
        let mut here = std::mem::take(&mut self.here);
        here.clear();
        let heads = self
            .live
            .iter_mut()
            .chain(self.dead.iter_mut())
            .map(|c| c.peek().map(|(k, _)| k.as_str()))
            .chain(std::iter::once(
                self.granted.peek().map(|(k, _)| k.as_str()),
            ));
        for (at, key) in heads.enumerate() {
            let Some(key) = key else {
                continue;
            };
            match next.map(|n| key.cmp(n)) {
                Some(Ordering::Greater) => {}
                Some(Ordering::Equal) => here.push(at),
                None | Some(Ordering::Less) => {
                    next = Some(key);
                    here.clear();
                    here.push(at);
                }
            }
        }
        let Some(resource) = next else {
            self.here = here;
            return false;
        };
        self.resource = resource;
        self.adverts.fill(None);
        self.down.clear();
        self.slots = None;
        let (live, dead) = (self.live.len(), self.dead.len());
        for &at in &here {
            if at < live {
                self.adverts[at] = self.live[at].next().map(|(_, a)| a);
            } else if at < live + dead {
                if let Some((_, advert)) = self.dead[at - live].next() {
                    self.down.push(advert);
                }
            } else {
                self.slots = self.granted.next().map(|(_, s)| s);
            }
        }
        self.here = here;
        true
    }
}

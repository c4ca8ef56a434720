//! The plan's working view of the cluster: live nodes, their loads, and eligibility.
//!
//! Built once per plan in one pass over the granted slots, then updated as the plan
//! grants and moves slots, so that no decision rescans the whole state: a node's load is
//! a counter, what its slots take from its pool is a sum, and "does this node hold a slot
//! of the resource being planned" is a mark set for that resource's holders and cleared
//! afterwards.

use std::collections::{BTreeMap, HashMap};

use crate::cluster::{Cluster, Command, Dimension, Member, Pool, Slot};

use super::winner::Win;

/// A member with a live session.
#[derive(Debug)]
pub(super) struct Node<'a> {
    pub name: &'a str,
    pub member: &'a Member,
    /// Its session id: smaller is older.
    pub session: u64,
}

/// The live members of `cluster`, in name order.
pub(super) fn live_nodes(cluster: &Cluster) -> Vec<Node<'_>> {
    cluster
        .members
        .iter()
        .filter_map(|(name, member)| {
            let session = member.session.as_ref()?.id;
            Some(Node {
                name,
                member,
                session,
            })
        })
        .collect()
}

pub(super) struct View<'a> {
    pub cluster: &'a Cluster,
    pub now_ms: u64,
    /// The live members, in name order; nodes are referred to by index into this.
    pub nodes: Vec<Node<'a>>,
    by_name: BTreeMap<&'a str, usize>,
    /// Per node: the slots it will hold once the handovers in flight finish (its granted
    /// slots not being handed over, plus those being handed over to it), plus this plan's
    /// grants and moves.
    pub load: Vec<usize>,
    /// Per node: its slots of settled resources (see `place`), in (resource, slot)
    /// order, as (index into the plan's settled list, slot): the candidates for
    /// rebalancing. Filled as the plan goes.
    pub owned: Vec<Vec<(usize, u32, &'a Slot)>>,
    /// Per node: what the slots counted in its load take from its pool (their builds'
    /// footprints, clamped), updated with it.
    pub used: Vec<Pool>,
    /// What a node's slots may take ([`super::Options::capacity`]).
    pub capacity: Pool,
    /// The footprint of each build by digest: the largest any live node advertises.
    footprints: HashMap<&'a str, Pool>,
    /// Granted slots in the state (any owner).
    pub granted: usize,
    /// Slots being handed over in the state.
    pub releasing: usize,
    /// Per node: the slot of the resource being planned it holds, if any.
    holder: Vec<Option<u32>>,
    /// The nodes with a `holder` mark, to clear them.
    marked: Vec<usize>,
}

impl<'a> View<'a> {
    pub fn new(cluster: &'a Cluster, now_ms: u64, capacity: Pool) -> Self {
        let nodes = live_nodes(cluster);
        let by_name = nodes.iter().enumerate().map(|(i, n)| (n.name, i)).collect();
        let mut footprints: HashMap<&str, Pool> = HashMap::new();
        for advert in nodes.iter().flat_map(|n| n.member.plugins.values()) {
            let footprint = footprints.entry(&advert.digest).or_default();
            *footprint = footprint.max(advert.footprint);
        }
        let mut view = View {
            cluster,
            now_ms,
            load: vec![0; nodes.len()],
            owned: vec![Vec::new(); nodes.len()],
            holder: vec![None; nodes.len()],
            marked: Vec::new(),
            used: vec![Pool::default(); nodes.len()],
            nodes,
            by_name,
            capacity,
            footprints,
            granted: 0,
            releasing: 0,
        };
        for (_, _, slot) in cluster.slots() {
            view.granted += 1;
            let counted = match &slot.releasing {
                Some(releasing) => {
                    view.releasing += 1;
                    releasing.to.as_deref()
                }
                None => Some(slot.owner.as_str()),
            };
            if let Some(node) = counted.and_then(|name| view.live(name)) {
                view.load[node] += 1;
                view.used[node] = view.used[node].plus(view.footprint(&slot.digest));
            }
        }
        view
    }

    /// The index of `name` if it is a live node.
    pub fn live(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// Whether node `i` carries every label the winner requires.
    pub fn has_labels(&self, i: usize, win: &Win<'_>) -> bool {
        let labels = &self.nodes[i].member.labels;
        win.advert
            .require
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    }

    /// Until when node `i` is cooling down for `resource`, if it is now.
    pub fn cooling(&self, i: usize, resource: &str) -> Option<u64> {
        let until = *self
            .cluster
            .cooldown
            .get(resource)?
            .get(self.nodes[i].name)?;
        (until > self.now_ms).then_some(until)
    }

    /// What one instance of the build with `digest` takes from a node's pool, as
    /// placement counts it: the largest footprint live nodes advertise for it, clamped
    /// to the capacity, or [`Pool::UNKNOWN`] if none does.
    pub fn footprint(&self, digest: &str) -> Pool {
        self.footprints
            .get(digest)
            .copied()
            .unwrap_or(Pool::UNKNOWN)
            .clamped(&self.capacity)
    }

    /// The dimension of node `i`'s pool that one more instance of the winner would
    /// exceed, if any: the node is full for that plugin.
    pub fn full(&self, i: usize, win: &Win<'_>) -> Option<Dimension> {
        self.footprint(&win.advert.digest)
            .overflows(&self.used[i], &self.capacity)
    }

    /// Whether node `i` could take a slot of `resource` if it held none: live (by
    /// construction), not draining, runs the winner, has the labels, not cooling down,
    /// not full for the winner.
    pub fn fit(&self, i: usize, resource: &str, win: &Win<'_>) -> bool {
        self.can_run(i, resource, win) && self.full(i, win).is_none()
    }

    /// [`View::fit`] without the load: not draining, runs the winner, has the labels,
    /// not cooling down.
    fn can_run(&self, i: usize, resource: &str, win: &Win<'_>) -> bool {
        !self.nodes[i].member.draining
            && win.runs(i)
            && self.has_labels(i, win)
            && self.cooling(i, resource).is_none()
    }

    /// Whether node `i` may be granted a slot of the resource being planned (the one
    /// [`View::mark_holders`] was called for).
    pub fn eligible(&self, i: usize, resource: &str, win: &Win<'_>) -> bool {
        self.holder[i].is_none() && self.fit(i, resource, win)
    }

    /// The slot of the resource being planned that node `i` holds, if any.
    pub fn holds(&self, i: usize) -> Option<u32> {
        self.holder[i]
    }

    /// The eligible node with the lowest load, then the oldest session, then the name.
    pub fn best(&self, resource: &str, win: &Win<'_>) -> Option<usize> {
        win.runners
            .iter()
            .copied()
            .filter(|&i| self.eligible(i, resource, win))
            .min_by_key(|&i| (self.load[i], self.nodes[i].session, self.nodes[i].name))
    }

    /// Whether a slot of `resource` held by `owner` has a successor after a handover: an
    /// eligible node, or the owner itself once it has released (which frees its place).
    pub fn successor_exists(&self, resource: &str, win: &Win<'_>, owner: usize) -> bool {
        self.can_run(owner, resource, win)
            || win.runners.iter().any(|&i| self.eligible(i, resource, win))
    }

    /// Records a grant of slot `n` of the resource being planned to node `i` and returns
    /// its `Assign`.
    pub fn grant(&mut self, i: usize, resource: &str, n: u32, win: &Win<'_>) -> Command {
        self.mark(i, n);
        self.load[i] += 1;
        self.used[i] = self.used[i].plus(self.footprint(&win.advert.digest));
        let node = &self.nodes[i];
        Command::Assign {
            resource: resource.to_owned(),
            slot: n,
            node: node.name.to_owned(),
            session: node.session,
            version: win.advert.version.clone(),
            digest: win.advert.digest.clone(),
            at_ms: self.now_ms,
        }
    }

    /// Counts a slot running the build `digest` at node `dst` instead of `src` (a
    /// rebalancing move).
    pub fn move_slot(&mut self, src: usize, dst: usize, digest: &str) {
        let footprint = self.footprint(digest);
        self.load[src] -= 1;
        self.load[dst] += 1;
        self.used[src] = self.used[src].minus(footprint);
        self.used[dst] = self.used[dst].plus(footprint);
    }

    /// Marks the live holders of the resource being planned, given its granted `slots`
    /// (being handed over or not).
    pub fn mark_holders(&mut self, slots: Option<&BTreeMap<u32, Slot>>) {
        for (&n, slot) in slots.into_iter().flatten() {
            if let Some(i) = self.live(&slot.owner) {
                self.mark(i, n);
            }
        }
    }

    /// Clears the marks of [`View::mark_holders`] and [`View::grant`].
    pub fn clear_holders(&mut self) {
        for i in self.marked.drain(..) {
            self.holder[i] = None;
        }
    }

    fn mark(&mut self, i: usize, n: u32) {
        if self.holder[i].is_none() {
            self.marked.push(i);
        }
        self.holder[i] = Some(n);
    }
}

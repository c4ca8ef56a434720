//! Rebalancing: moving slots from the most to the least loaded nodes.
//!
//! Only nodes that can run something take part (live, not draining, able to run the
//! winner of at least one resource); a node that runs nothing would otherwise always look
//! least loaded and keep a rebalance going that can never reach it.
//!
//! Each move goes from a node `src` to a node `dst` with `load[src] >= load[dst] + 2`
//! and leaves `load[src] - 1 >= load[dst] + 1`, so the sum of squared loads strictly
//! falls: repeated rounds cannot cycle. The search tries the most loaded source against
//! the least loaded target first, and falls back to other pairs when the resources of the
//! source cannot go to the target (labels, versions, a slot of it already there).
//!
//! **Young slots go only below the mean.** A slot held less than
//! [`Options::min_term_ms`] is *young*, one held longer *of age* (not to be confused with
//! the settled resources of `mod.rs`: those are the ones rebalancing may touch at all). A
//! young slot moves only to a node below the mean load of the able nodes (`load[dst] *
//! able < total`, from the plan's current loads), and like every move only from a source
//! holding two or more than the target. The minimum term is there so that one resource
//! is not interrupted again and again (churn). A node below the mean is one that arrived
//! (it started, or advertised its plugins, after the others had taken the slots) or lost
//! slots; waiting the term would leave it idle while others run more than their share.
//! In a forming cluster a node arrives while every slot it should take is young, and
//! still gets its share at once. A node at or above the mean takes only slots of age:
//! evening out between nodes that hold their share waits for the term. And a source
//! gives a slot of age whenever it has one the target can take; a young one only when it
//! has none.
//!
//! **Why this does not churn.** Every move lowers the sum of squared loads by at least
//! two, so between two events (a node arriving or leaving, a plugin added or removed)
//! the moves are finitely many and cannot cycle: the minimum term is not what prevents
//! flapping. What it still does is keep a slot where it landed while it is young. A young
//! slot lands on a node that was below the mean. To move it again, that node must hold
//! two more than another. In a calm cluster (no arrival, no removal) the total and the
//! number of able nodes stay, so the mean stays; when every node can take every
//! resource, each move goes to the least loaded node, the least load never falls, and a
//! node that received a slot stays within one of it: it never gives a slot again. Where
//! nodes cannot take everything (labels, versions, full nodes, a slot of the resource
//! already held), a move may go to a node that is not the least loaded, and there we have
//! no proof, only a search: `props.rs` plans random calm clusters of that kind and checks
//! that no slot moved young is moved again. What makes a node give slots again is the
//! mean falling below its load: a node arriving, or slots of other nodes going away.
//!
//! Cost: per pair of nodes a cursor walks the source's slots once per plan, slots of
//! age first (each node's slots are put in that order once per plan). A slot passed
//! over for a target stays unmovable to it for the rest of the plan (resources only
//! become busy, the target only gains slots of busy resources, a source only loses
//! slots, and time stands still), so no slot is looked at twice for the same pair. The
//! cursor stops at the first young slot while the target is not below the mean and
//! passes no young slot for that reason, so a target that falls below the mean later in
//! the plan (it gave slots away) still sees them.

use std::collections::BTreeMap;

use crate::cluster::{Command, Handover, Slot};

use super::view::View;
use super::{Options, Plan, Settled};

/// Adds up to `budget` `Rebalanced` handovers of slots of `settled` resources to `out`,
/// between the nodes marked `able`. A resource moves at most once per plan.
pub(super) fn run<'a>(
    view: &mut View<'a>,
    settled: &[Settled<'a>],
    able: &[bool],
    budget: usize,
    options: &Options,
    out: &mut Plan,
) {
    if budget == 0 {
        return;
    }
    let mut nodes: Vec<usize> = (0..view.nodes.len()).filter(|&i| able[i]).collect();
    let loads = nodes.iter().map(|&i| view.load[i]);
    if loads.clone().max().unwrap_or(0) < loads.min().unwrap_or(0) + 2 {
        // Already even: no move is possible, and the slots need not be ordered.
        return;
    }
    let mut search = Search {
        settled,
        moved: vec![false; settled.len()],
        min_term_ms: options.min_term_ms,
        // Moves keep both: they only shift slots between able nodes.
        total: nodes.iter().map(|&i| view.load[i]).sum(),
        able: nodes.len(),
    };
    for &i in &nodes {
        // Slots of age first, each part still in resource order (the sort is stable).
        let now_ms = view.now_ms;
        view.owned[i].sort_by_key(|&(_, _, slot)| search.young(now_ms, slot));
    }
    // Per (src, dst): how far src's slots have been searched; past the end: exhausted.
    let mut cursors: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for _ in 0..budget {
        // Least loaded first, then the oldest session, then the name: the order in
        // which vacant slots are granted, so a move goes where a grant would.
        nodes.sort_by_key(|&i| (view.load[i], view.nodes[i].session, view.nodes[i].name));
        let Some((src, dst, at, n, slot)) = pick(view, &nodes, &mut cursors, &search) else {
            return;
        };
        search.moved[at] = true;
        view.move_slot(src, dst, &slot.digest);
        out.commands.push(Command::BeginHandover {
            resource: settled[at].resource.to_owned(),
            slot: n,
            token: slot.token,
            reason: Handover::Rebalanced,
            to: Some(view.nodes[dst].name.to_owned()),
            at_ms: view.now_ms,
        });
    }
}

/// What a move may take, besides the nodes.
struct Search<'s, 'a> {
    settled: &'s [Settled<'a>],
    /// Per settled resource: moved in this plan.
    moved: Vec<bool>,
    min_term_ms: u64,
    /// The load of the able nodes, all together.
    total: usize,
    /// How many nodes are able.
    able: usize,
}

impl Search<'_, '_> {
    /// Whether `slot` has been held less than the minimum term at `now_ms`.
    fn young(&self, now_ms: u64, slot: &Slot) -> bool {
        now_ms.saturating_sub(slot.since_ms) < self.min_term_ms
    }

    /// Whether node `dst` is below the mean load of the able nodes, and so may take
    /// young slots (see the module doc).
    fn below_mean(&self, view: &View<'_>, dst: usize) -> bool {
        view.load[dst] * self.able < self.total
    }
}

/// A move: source, target, index of the settled resource, slot.
type Move<'a> = (usize, usize, usize, u32, &'a Slot);

/// The next move: the most loaded source and least loaded target (`nodes` is sorted
/// by load) that differ by two or more and have a movable slot.
fn pick<'a>(
    view: &View<'a>,
    nodes: &[usize],
    cursors: &mut BTreeMap<(usize, usize), usize>,
    search: &Search<'_, 'a>,
) -> Option<Move<'a>> {
    for &src in nodes.iter().rev() {
        for &dst in nodes {
            if view.load[src] < view.load[dst] + 2 {
                // Targets further on are loaded at least as much.
                break;
            }
            let cursor = cursors.entry((src, dst)).or_default();
            if let Some((at, n, slot)) = movable(view, src, dst, cursor, search) {
                return Some((src, dst, at, n, slot));
            }
        }
    }
    None
}

/// The next slot of `src`, from `cursor` on, that may move to `dst`; advances `cursor`
/// past it and past every slot that may not. `src`'s slots are settled first, so a
/// settled slot goes before any young one; the cursor stops, without passing them, at
/// the young slots while `dst` is not below the mean.
fn movable<'a>(
    view: &View<'a>,
    src: usize,
    dst: usize,
    cursor: &mut usize,
    search: &Search<'_, 'a>,
) -> Option<(usize, u32, &'a Slot)> {
    let slots = &view.owned[src];
    while let Some(&(at, n, slot)) = slots.get(*cursor) {
        if search.young(view.now_ms, slot) && !search.below_mean(view, dst) {
            return None;
        }
        *cursor += 1;
        if search.moved[at] {
            continue;
        }
        let resource = &search.settled[at];
        let name = view.nodes[dst].name;
        let holds = resource
            .slots
            .is_some_and(|slots| slots.values().any(|s| s.owner == name));
        if !holds && view.fit(dst, resource.resource, &resource.win) {
            return Some((at, n, slot));
        }
    }
    None
}

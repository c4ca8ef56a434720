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
//! **Slots go only below the mean; young ones only from above it.** A slot held less
//! than [`Options::min_term_ms`] is *young*, one held longer *of age* (not to be confused
//! with the settled resources of `mod.rs`: those are the ones rebalancing may touch at
//! all). Every move goes to a node below the mean load of the able nodes (`load[dst] *
//! able < total`, from the plan's current loads), so the target ends at most at the mean
//! rounded up. A young slot moves only from a node holding more than the mean rounded up
//! (`(load[src] - 1) * able >= total`). The minimum term is there so that one resource is
//! not interrupted again and again (churn). A node below the mean is one that arrived (it
//! started, or advertised its plugins, after the others had taken the slots) or lost
//! slots; waiting the term would leave it idle while others run more than their share.
//! In a forming cluster a node arrives while every slot it should take is young, and
//! still gets its share at once, give or take one slot: loads of 5, 5 and 3 wait the
//! term when all slots are young, as the fives are not above the mean rounded up. A
//! source gives a slot of age whenever it has one the target can take; a young one only
//! when it has none.
//!
//! **Why this does not churn.** Every move lowers the sum of squared loads by at least
//! two, so between two events (a node arriving or leaving, a plugin added or removed)
//! the moves are finitely many and cannot cycle: the minimum term is not what prevents
//! flapping. What it does is keep a slot where it landed while it is young. In a calm
//! cluster (no arrival, no removal) the total and the number of able nodes stay, so the
//! mean stays. A moved slot lands on a node that ends at most at the mean rounded up, and
//! no move takes a node above that, so the node never holds more than the mean rounded
//! up again: it never gives a young slot, and the slot stays its term. This holds where
//! nodes cannot take everything too (labels, versions, full nodes, a slot of the resource
//! already held), so a move may go to a node that is not the least loaded; `props.rs`
//! checks it on random calm clusters of that kind. Targets at or above the mean take
//! nothing: a node holding two more than one at the mean keeps them (with loads of 10, 8
//! and 3, where the 3 can take nothing of the 10, the 10 keeps its slots). What makes a
//! node give slots again is the mean falling below its load: a node arriving, or slots of
//! other nodes going away.
//!
//! Cost: per pair of nodes a cursor walks the source's slots once per plan, slots of
//! age first (each node's slots are put in that order once per plan). A slot passed
//! over for a target stays unmovable to it for the rest of the plan (resources only
//! become busy, the target only gains slots of busy resources, a source only loses
//! slots, and time stands still), so no slot is looked at twice for the same pair. The
//! cursor does not move while the target is not below the mean, so a target that falls
//! below the mean later in the plan (it gave slots away) still sees every slot; it
//! stops at the first young slot while the source is not above the mean rounded up
//! (a source only loses slots, so that stays so for the rest of the plan).

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

    /// Whether node `dst` is below the mean load of the able nodes, and so may take a
    /// slot: one more leaves it at most at the mean rounded up (see the module doc).
    fn below_mean(&self, view: &View<'_>, dst: usize) -> bool {
        view.load[dst] * self.able < self.total
    }

    /// Whether node `src` holds more than the mean rounded up, and so may give a young
    /// slot: one less leaves it at or above the mean. A node that took a slot never
    /// holds that much in a calm cluster (see the module doc).
    fn above_ceiling(&self, view: &View<'_>, src: usize) -> bool {
        view.load[src].saturating_sub(1) * self.able >= self.total
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
/// settled slot goes before any young one. Nothing moves to a `dst` not below the
/// mean, and no young slot from a `src` not above the mean rounded up; the cursor
/// passes no slot for either reason.
fn movable<'a>(
    view: &View<'a>,
    src: usize,
    dst: usize,
    cursor: &mut usize,
    search: &Search<'_, 'a>,
) -> Option<(usize, u32, &'a Slot)> {
    if !search.below_mean(view, dst) {
        return None;
    }
    let slots = &view.owned[src];
    while let Some(&(at, n, slot)) = slots.get(*cursor) {
        if search.young(view.now_ms, slot) && !search.above_ceiling(view, src) {
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

//! Rebalancing: moving settled slots from the most to the least loaded nodes.
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
//! **Young slots and arriving nodes.** A slot held less than [`Options::min_term_ms`]
//! moves only to a node that holds at most half as many slots as its owner. The minimum
//! term keeps a slot from being interrupted again soon after its grant when loads differ
//! a little, which is ordinary churn. A node holding half or less of what another holds
//! is not churn: it is arriving (it started, or advertised its plugins, after the others
//! had taken the slots), and waiting the term would leave it idle while others run
//! twice its share. So a node that arrives gets slots at once, until it holds half of
//! what the most loaded node holds; the rest of the evening-out waits for the term. A
//! young slot can be moved again only to a node holding at most half as many as its new
//! owner, that is when yet another node arrives. The anti-flapping guarantee does not
//! rest on the term: every move still lowers the sum of squared loads.
//!
//! Cost: per pair of nodes a cursor walks the source's slots once per plan. A slot passed
//! over for a target stays unmovable to it for the rest of the plan (resources only become
//! busy, the target only gains slots of busy resources, a source only loses slots, and
//! time stands still), so no slot is looked at twice for the same pair. (A node that took
//! slots in this plan and then becomes a source may have a young slot passed over that
//! it could now give: the next plan moves it.)

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
    // Per (src, dst): how far src's slots have been searched; past the end: exhausted.
    let mut cursors: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    let mut search = Search {
        settled,
        moved: vec![false; settled.len()],
        min_term_ms: options.min_term_ms,
    };
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
/// past it and past every slot that may not.
fn movable<'a>(
    view: &View<'a>,
    src: usize,
    dst: usize,
    cursor: &mut usize,
    search: &Search<'_, 'a>,
) -> Option<(usize, u32, &'a Slot)> {
    let slots = &view.owned[src];
    while let Some(&(at, n, slot)) = slots.get(*cursor) {
        *cursor += 1;
        let young = view.now_ms.saturating_sub(slot.since_ms) < search.min_term_ms;
        if search.moved[at] || (young && !arriving(view, src, dst)) {
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

/// Whether `dst` holds at most half as many slots as `src`: it is arriving, and young
/// slots of `src` may move to it (see the module doc).
fn arriving(view: &View<'_>, src: usize, dst: usize) -> bool {
    view.load[dst] * 2 <= view.load[src]
}

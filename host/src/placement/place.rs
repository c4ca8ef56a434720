//! Placing one resource: the handovers that must happen and the grants of its vacant
//! slots (the rules are in the module doc of `placement`).
//!
//! Each function sees one resource: its granted slots, every live node's advert of it and
//! the winner, with the resource's holders marked in the [`View`] while it is planned.

use std::collections::BTreeMap;

use crate::cluster::{Advert, Command, Handover, Slot};

use super::view::View;
use super::winner::Win;
use super::{MAX_TICKETS, Pending, Plan, explain};

/// Plans one resource, given its granted slots, the live nodes' adverts and the winner:
/// handovers that must happen, grants of vacant slots, pending slots. Returns the winner
/// back if the resource is settled (all its slots granted to fit owners, nothing
/// moving), which makes it a candidate for rebalancing.
pub(super) fn resource<'a>(
    view: &mut View<'a>,
    resource: &'a str,
    slots: Option<&'a BTreeMap<u32, Slot>>,
    adverts: &[Option<&'a Advert>],
    win: Option<Win<'a>>,
    out: &mut Plan,
) -> Option<Win<'a>> {
    let tickets = win
        .as_ref()
        .map_or(0, |w| w.advert.tickets.min(MAX_TICKETS));
    let first = out.commands.len();
    let mut settled = win.is_some();
    let mut releasing = false;
    let mut outdated: Vec<(u32, &Slot, usize)> = Vec::new();
    view.mark_holders(slots);
    for (&n, slot) in slots.into_iter().flatten() {
        if slot.releasing.is_some() {
            releasing = true;
            settled = false;
            continue;
        }
        // An owner without a session is about to lose the slot by expiry; it could not
        // hand it over anyway.
        let Some(owner) = view.live(&slot.owner) else {
            settled = false;
            continue;
        };
        let advertises = adverts[owner].is_some();
        match judge(view, win.as_ref(), tickets, n, slot, owner, advertises) {
            Verdict::Stay => {}
            Verdict::Move(reason) => {
                out.commands
                    .push(handover(resource, n, slot, reason, view.now_ms));
                settled = false;
            }
            Verdict::Update => {
                outdated.push((n, slot, owner));
                settled = false;
            }
        }
    }
    if let Some(win) = &win {
        if grant_vacant(view, resource, slots, win, tickets, out) {
            settled = false;
        }
        // A rolling update: one slot at a time, only when something can run the winner.
        let moving = releasing || out.commands[first..].iter().any(is_handover);
        let next = outdated
            .iter()
            .find(|(_, _, owner)| view.successor_exists(resource, win, *owner));
        if let (false, Some(&(n, slot, _))) = (moving, next) {
            out.commands.push(handover(
                resource,
                n,
                slot,
                Handover::PluginUpdated,
                view.now_ms,
            ));
        }
    }
    view.clear_holders();
    win.filter(|_| settled)
}

/// What a granted slot needs.
enum Verdict {
    Stay,
    /// A handover now, for this reason.
    Move(Handover),
    /// A `PluginUpdated` handover once a successor exists.
    Update,
}

fn judge(
    view: &View<'_>,
    win: Option<&Win<'_>>,
    tickets: u32,
    n: u32,
    slot: &Slot,
    owner: usize,
    advertises: bool,
) -> Verdict {
    let Some(win) = win else {
        return Verdict::Move(Handover::PluginRemoved);
    };
    if n >= tickets || !advertises {
        Verdict::Move(Handover::PluginRemoved)
    } else if view.nodes[owner].member.draining {
        Verdict::Move(Handover::Drained)
    } else if !win.runs(owner)
        || !win.matches(&slot.version, &slot.digest)
        || !view.has_labels(owner, win)
    {
        Verdict::Update
    } else {
        Verdict::Stay
    }
}

/// Grants the vacant slots of `resource` (preferred targets first) and lists those that
/// no node can take. Returns whether any slot was vacant.
fn grant_vacant<'a>(
    view: &mut View<'a>,
    resource: &'a str,
    slots: Option<&BTreeMap<u32, Slot>>,
    win: &Win<'a>,
    tickets: u32,
    out: &mut Plan,
) -> bool {
    let vacant: Vec<u32> = (0..tickets)
        .filter(|n| slots.is_none_or(|s| !s.contains_key(n)))
        .collect();
    if vacant.is_empty() {
        return false;
    }
    let preferred = view.cluster.preferred.get(resource);
    let mut rest = Vec::with_capacity(vacant.len());
    for n in vacant {
        let target = preferred
            .and_then(|p| p.get(&n))
            .and_then(|node| view.live(node))
            .filter(|&i| view.eligible(i, resource, win));
        match target {
            Some(i) => out.commands.push(view.grant(i, resource, n, win)),
            None => rest.push(n),
        }
    }
    let mut reason: Option<String> = None;
    for n in rest {
        match view.best(resource, win) {
            Some(i) => out.commands.push(view.grant(i, resource, n, win)),
            None => {
                let reason = reason
                    .get_or_insert_with(|| explain::pending(view, resource, win))
                    .clone();
                out.pending.push(Pending {
                    resource: resource.to_owned(),
                    slot: n,
                    reason,
                });
            }
        }
    }
    true
}

/// Lists the vacant slots of a resource that no live node advertises as pending.
pub(super) fn unrunnable(
    view: &View<'_>,
    resource: &str,
    slots: Option<&BTreeMap<u32, Slot>>,
    advert: &Advert,
    out: &mut Plan,
) {
    let reason = explain::unrunnable(view, resource, advert);
    for n in 0..advert.tickets.min(MAX_TICKETS) {
        if slots.is_none_or(|s| !s.contains_key(&n)) {
            out.pending.push(Pending {
                resource: resource.to_owned(),
                slot: n,
                reason: reason.clone(),
            });
        }
    }
}

pub(super) fn is_handover(command: &Command) -> bool {
    matches!(command, Command::BeginHandover { .. })
}

/// A `BeginHandover` of `slot` at its current token, with no target: placement grants
/// the slot again once it is released.
fn handover(resource: &str, n: u32, slot: &Slot, reason: Handover, now_ms: u64) -> Command {
    Command::BeginHandover {
        resource: resource.to_owned(),
        slot: n,
        token: slot.token,
        reason,
        to: None,
        at_ms: now_ms,
    }
}

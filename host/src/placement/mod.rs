//! Placement: the leader's plan for who owns which slot (docs/design.md §5.8, "Placement").
//!
//! [`plan`] reads the replicated [`Cluster`] and the leader's wall clock (`now_ms`, an
//! argument: this module reads no clock and does no I/O) and returns the [`Command`]s
//! that move the cluster one step towards its goal, plus the slots it cannot place and
//! why. The leader proposes the commands; `Cluster::apply` carries them out, and the next
//! call plans from the new state. A plan is a step, not a schedule: the same state and
//! time always give the same plan (maps are iterated in order), and a state that needs
//! nothing gives an empty one.
//!
//! # The rules
//!
//! **Which version runs.** Among the adverts of live nodes (members with a session,
//! draining ones included) the *winner* of a resource is the highest semver version,
//! then, among builds of one version, the one installed last, then the greatest digest,
//! so that two builds of one version still have exactly one winner ([`winning`],
//! `winner.rs`). Its `tickets` and `require` are the resource's spec. (Two nodes
//! with the same wasm but different manifests are ordered by tickets, then require,
//! then node name: arbitrary but deterministic.)
//!
//! **Who may own a slot** (*eligible*): a live, non-draining node that advertises the
//! winner's exact version and digest, carries every `require` label, holds no other slot
//! of the resource (counting grants made earlier in the same plan, and slots it is still
//! handing over) and is not cooling down for the resource (`cluster.cooldown`, set when
//! its plugin kept failing there).
//!
//! A node is also not eligible while one more instance of the winner would not fit its
//! [`Options::capacity`]: the slots it will hold (those counted in its load, below) add
//! up their builds' footprints, per dimension of the runtime's instance pool (component
//! instances, core instances, memories, tables; `cluster::Pool`), and the first
//! dimension to run out makes it full for that plugin. A Python plugin instance makes 14
//! core instances, so a node of them is full at about 1,000, where a node of small Rust
//! plugins (3 each) is full at its 3,600 instances. A slot without another eligible node
//! then waits, pending, rather than failing to start.
//!
//! **Footprints** come with the adverts: each node advertises, with a build, what one
//! instance of it takes, as its runtime counted it. The footprint of a build is the
//! largest (per dimension) that any live node advertises for its digest, so a node that
//! under-reports cannot over-fill another; a slot whose build no live node advertises
//! counts as `Pool::UNKNOWN` (larger than any plugin measured). Footprints are read
//! clamped (`Pool::clamped`): zero counts as one core instance, and no footprint takes
//! more than a whole node.
//!
//! **Vacant slots** `0..tickets` go first to the node `cluster.preferred` names (the
//! target of an operator move or a rebalance) if it is eligible, then to the eligible node
//! with the lowest *load*, then the oldest session, then the name. A node's load is the
//! number of slots it will hold once the handovers in flight finish: its granted slots
//! that are not being handed over, plus slots being handed over *to* it, plus this plan's
//! grants. A vacant slot without an eligible node is [`Pending`], with a sentence that
//! says, node by node, what is missing.
//!
//! **Slots that must move** are handed over (`BeginHandover`: the owner stops, cleans up
//! and releases; a later plan grants the vacant slot). Slots already being handed over
//! are left alone, as are slots whose owner has no session (its expiry vacates them).
//! - `PluginRemoved`: no live node advertises the resource any more, the owner no longer
//!   advertises it, or the slot number is at or above the winner's `tickets` (the
//!   tickets shrank: that slot has no successor, which is what the plugin's
//!   `cleanup(plugin-removed)` tells it).
//! - `Drained`: the owner is draining. Always, even when no other node can take the slot:
//!   the operator asked for the node to be emptied.
//! - `PluginUpdated`: the slot runs another version or digest than the winner, or the
//!   owner's advert differs from the winner, or the owner lacks a label the winner now
//!   requires. Only when a successor exists (an eligible node, or the owner itself once
//!   it has released, when it advertises the winner): a running old version is never
//!   stopped while nothing can run the new one. Updates roll one slot of a resource at a
//!   time, and not while another slot of it is being handed over, so with `tickets > 1`
//!   the other slots keep running.
//!
//! **Rebalancing** evens out the loads of the nodes that can run something (live,
//! non-draining, eligible for the winner of at least one resource apart from holding or
//! cooldown). While the most loaded of them holds two or more slots more than the least
//! loaded, a slot moves from the former to the latter by `BeginHandover { reason:
//! Rebalanced, to: Some(target) }`; the release leaves the target in
//! `cluster.preferred`, so the next plan grants it there. Only slots of resources where
//! nothing else moves (all slots granted, none being handed over, nothing to update), to a
//! target eligible for the resource; one slot per resource per plan. A slot moves only
//! to a target below the mean load of those nodes (one that arrived, or lost slots); a
//! slot held for less than [`Options::min_term_ms`] only from a source holding more than
//! the mean rounded up, and only when the source has no slot held longer that the
//! target can take (`rebalance.rs` says why a moved slot then stays its term). A move
//! is made only between loads that differ by two or more, so the sum of squared loads
//! strictly falls with each move and repeated plans
//! reach a fixed point: no ping-pong. The number of moves is bounded by
//! [`Options::max_moves`], and handovers in flight (of any reason, including those this
//! plan begins) count against it, so a drain or a rollout defers rebalancing.
//!
//! # What it does not do
//!
//! It does not expire sessions, give slots up after plugin failures (the node proposes
//! `GiveUp`; [`Options::cooldown_ms`] is the documented duration for it), or check that
//! its commands are still current when they commit: `apply` refuses stale ones (an
//! `Assign` to a session that ended, a `BeginHandover` with an old token) and the next
//! plan starts again from the state. It does not prefer a slot's previous owner, nor
//! keep slots of one resource in different zones: `require` is the only placement
//! constraint besides "one slot of a resource per node".
//!
//! # Cost
//!
//! The leader plans every few hundred milliseconds, so a plan is one ordered walk over
//! all resources (`rows.rs` merges the sorted maps instead of looking names up), with
//! loads kept as per-node counters: O(resources × nodes + slots), plus the moves it
//! makes. 10,000 resources on 5 nodes plan in about 8 ms (release build, on a busy
//! 2-core machine; `props.rs` prints it). The time goes mostly to reading every
//! advert's name and digest, which are separate heap strings. Capacity adds one pass
//! over the live adverts (the footprint of each digest, in a hash map) and a lookup of
//! the winner's footprint per eligibility check (that 8 ms figure predates it; on a
//! machine at load average 14 the two builds could not be told apart).
//!
//! Files: `rows.rs` (the walk), `winner.rs` (the winning advert), `view.rs` (live nodes,
//! loads, eligibility), `explain.rs` (why a slot is pending), `rebalance.rs` (evening
//! out), `place.rs` (handovers that must happen, grants of vacant slots). Tests:
//! `scenario.rs` (the script language), `tests.rs` (the scenarios), `props.rs` (random
//! clusters, determinism, scale).

mod explain;
mod place;
mod rebalance;
mod rows;
mod view;
mod winner;

#[cfg(test)]
mod props;
#[cfg(test)]
mod scenario;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub(crate) use explain::when;
pub use winner::{Winner, winning};

use crate::cluster::{Cluster, Command, Pool, Slot};
use rows::Rows;
use view::View;
use winner::Win;

/// Tickets above this are treated as this many. The manifest refuses more
/// (`catalog::manifest`), so only a corrupt state reaches the bound; it keeps a plan from
/// listing billions of pending slots.
pub const MAX_TICKETS: u32 = 1_000;

/// Tunables of the plan. `Default` gives the documented defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// A slot is moved by rebalancing to a node at or above the mean load only after it
    /// has been held this long (ms), so a fresh grant is not moved again at once while
    /// loads differ a little. A node below the mean (one arriving late) may take younger
    /// slots. Default 10 000.
    pub min_term_ms: u64,
    /// The bound on handovers in flight for rebalancing: a plan begins at most
    /// `max_moves - in_flight` rebalancing moves, where `in_flight` counts every
    /// handover under way or begun by the same plan, whatever its reason. `0` (the
    /// default) means automatic: a tenth of the granted slots, at least one. Handovers
    /// that must happen (drain, update, removal) are not bounded by it.
    pub max_moves: usize,
    /// How long a node is skipped for a resource after its plugin kept failing there
    /// (ms). Placement only reads `cluster.cooldown`; the node that gives a slot up sets
    /// `until_ms = now + cooldown_ms` in its `GiveUp`. Default 60 000.
    pub cooldown_ms: u64,
    /// What one node's slots may take from its instance pool, per dimension: a node
    /// where one more instance of a plugin would exceed it is not eligible for that
    /// plugin (and not a rebalancing target for it). Default [`CAPACITY`].
    pub capacity: Pool,
}

/// What placement gives a node: nine tenths of the runtime's instance pool
/// ([`crate::runtime::POOL`]) in every dimension. The tenth left over holds the
/// instances placement does not count: those of slots being handed away (the old owner
/// still runs or cleans up while the load already counts the slot at its successor) and
/// cleanups on fresh instances after a trap, each as large as the plugin's footprint.
pub const CAPACITY: Pool = crate::runtime::POOL.scaled(9, 10);

impl Default for Options {
    fn default() -> Self {
        Options {
            min_term_ms: 10_000,
            max_moves: 0,
            cooldown_ms: 60_000,
            capacity: CAPACITY,
        }
    }
}

impl Options {
    /// The move bound for a cluster with `granted` slots: [`Options::max_moves`], or the
    /// automatic one when it is 0.
    pub fn move_budget(&self, granted: usize) -> usize {
        match self.max_moves {
            0 => (granted / 10).max(1),
            n => n,
        }
    }
}

/// What the leader should propose now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// `Assign` and `BeginHandover` commands, in a deterministic order: resource by
    /// resource in name order, then rebalancing moves.
    pub commands: Vec<Command>,
    /// Vacant slots no node can take now, by resource and slot.
    pub pending: Vec<Pending>,
}

/// A vacant slot without an eligible node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub resource: String,
    pub slot: u32,
    /// Why, for `tenure status`: "no eligible node for r 1.2.0 (sha256:…): …".
    pub reason: String,
}

impl Plan {
    /// True when there is nothing to propose (pending slots may remain).
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }
}

/// The leader's plan for `cluster` at `now_ms` (its wall clock, ms since the Unix epoch,
/// the same clock as `since_ms` and cooldowns). Pure: no I/O, no clock reads.
pub fn plan(cluster: &Cluster, now_ms: u64, options: &Options) -> Plan {
    let mut view = View::new(cluster, now_ms, options.capacity);
    let mut out = Plan::default();
    // Resources where nothing moves and nothing is vacant: rebalancing may move them.
    let mut settled: Vec<Settled<'_>> = Vec::new();
    // Nodes that can run the winner of some resource: rebalancing evens out their loads.
    let mut able = vec![false; view.nodes.len()];
    let mut rows = Rows::new(cluster, &view.nodes);
    while rows.advance() {
        let resource = rows.resource;
        let win = Win::of(
            &rows.adverts,
            winner::installed_at(cluster, &view.nodes, resource),
        );
        if let Some(win) = &win {
            for &i in &win.runners {
                able[i] = able[i] || (!view.nodes[i].member.draining && view.has_labels(i, win));
            }
        } else if let Some(advert) = winner::best(&rows.down) {
            place::unrunnable(&view, resource, rows.slots, advert, &mut out);
        }
        let (slots, adverts) = (rows.slots, &rows.adverts);
        if let Some(win) = place::resource(&mut view, resource, slots, adverts, win, &mut out) {
            let at = settled.len();
            for (&n, slot) in slots.into_iter().flatten() {
                if let Some(owner) = view.live(&slot.owner) {
                    view.owned[owner].push((at, n, slot));
                }
            }
            settled.push(Settled {
                resource,
                slots,
                win,
            });
        }
    }
    let begun = out
        .commands
        .iter()
        .filter(|c| place::is_handover(c))
        .count();
    let budget = options
        .move_budget(view.granted)
        .saturating_sub(view.releasing + begun);
    rebalance::run(&mut view, &settled, &able, budget, options, &mut out);
    out
}

/// A resource where nothing moves and no slot is vacant.
struct Settled<'a> {
    resource: &'a str,
    slots: Option<&'a BTreeMap<u32, Slot>>,
    win: Win<'a>,
}

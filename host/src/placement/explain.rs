//! Why a vacant slot has no eligible node: the sentence `tenure status` shows.
//!
//! An operator reading "pending" needs to know what to change: start a node, upgrade a
//! plugin file, add a label, undrain, wait for a cooldown, or lower the tickets. So the
//! reason names the winning build and then, grouped by cause, every live node and why it
//! cannot take the slot: it holds one already, drains, lacks labels, cools down, is full,
//! has another build, or has no plugin for the resource at all.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use crate::cluster::{Advert, thousands};

use super::view::View;
use super::winner::Win;

/// The reason no node can take a vacant slot of `resource` now; called with the
/// resource's holders marked in `view`.
pub(super) fn pending(view: &View<'_>, resource: &str, win: &Win<'_>) -> String {
    let advert = win.advert;
    let mut holding = Vec::new();
    let mut draining = Vec::new();
    let mut lacking: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut cooling = Vec::new();
    let mut full = Vec::new();
    for &i in &win.runners {
        let name = view.nodes[i].name;
        if view.nodes[i].member.draining {
            draining.push(name);
        } else if !view.has_labels(i, win) {
            lacking.entry(missing(view, i, win)).or_default().push(name);
        } else if let Some(until) = view.cooling(i, resource) {
            cooling.push((name, until));
        } else if let Some(n) = view.holds(i) {
            holding.push(format!("{name} has {resource}/{n}"));
        } else if let Some(dimension) = view.full(i, win) {
            full.push((name, i, dimension));
        }
    }
    // Live nodes that advertise no build of the resource at all: the plugin file is not in
    // their folder (or did not load there; their own log says why).
    let without: Vec<&str> = (0..view.nodes.len())
        .filter(|&i| !win.runs(i) && win.others.binary_search(&i).is_err())
        .map(|i| view.nodes[i].name)
        .collect();
    let mut clauses = Vec::new();
    if !holding.is_empty() {
        let only = draining.is_empty()
            && lacking.is_empty()
            && cooling.is_empty()
            && full.is_empty()
            && without.is_empty();
        clauses.push(if only {
            format!(
                "every eligible node already holds a slot of {resource} ({}): {} tickets, {} \
                 eligible {}",
                holding.join(", "),
                advert.tickets,
                holding.len(),
                verb(holding.len(), "node", "nodes")
            )
        } else {
            format!(
                "{} (a node holds one slot of a resource)",
                holding.join(", ")
            )
        });
    }
    if !draining.is_empty() {
        let verb = verb(draining.len(), "is", "are");
        clauses.push(format!("{} {verb} draining", draining.join(", ")));
    }
    for (labels, nodes) in &lacking {
        let verb = verb(nodes.len(), "lacks", "lack");
        clauses.push(format!("{} {verb} labels {labels}", nodes.join(", ")));
    }
    let footprint = view.footprint(&advert.digest);
    for (name, i, dimension) in full {
        let used = view.used[i];
        clauses.push(format!(
            "{name} is full: {} instances use {} of its {} {}; one of {resource} takes {}",
            thousands(used.instances.into()),
            thousands(used.get(dimension).into()),
            thousands(view.capacity.get(dimension).into()),
            dimension.name(),
            thousands(footprint.get(dimension).into()),
        ));
    }
    for (name, until) in cooling {
        clauses.push(format!(
            "{name} is cooling down after repeated failures until {}",
            when(until, view.now_ms)
        ));
    }
    for &i in &win.others {
        let node = &view.nodes[i];
        if let Some(other) = node.member.plugins.get(resource) {
            let what = if other.version == advert.version {
                format!(
                    "{} with another digest ({})",
                    other.version,
                    short(&other.digest)
                )
            } else {
                format!("{} ({})", other.version, short(&other.digest))
            };
            clauses.push(format!("{} has {what}, not the winning build", node.name));
        }
    }
    if !without.is_empty() {
        let verb = verb(without.len(), "has", "have");
        clauses.push(format!(
            "{} {verb} no plugin for {resource} in {} plugins folder",
            some_of(&without),
            if without.len() == 1 { "its" } else { "their" }
        ));
    }
    let down: Vec<&str> = view
        .cluster
        .members
        .iter()
        .filter(|(_, m)| m.session.is_none() && m.plugins.contains_key(resource))
        .map(|(name, _)| name.as_str())
        .collect();
    if !down.is_empty() {
        let verb = verb(down.len(), "has", "have");
        clauses.push(format!("{} {verb} no live session", down.join(", ")));
    }
    if clauses.is_empty() {
        clauses.push("no live node can run it".to_owned());
    }
    format!(
        "no eligible node for {resource} {} ({}): {}",
        advert.version,
        short(&advert.digest),
        clauses.join("; ")
    )
}

/// The reason the slots of a resource that only down members advertise are vacant.
pub(super) fn unrunnable(view: &View<'_>, resource: &str, advert: &Advert) -> String {
    let down: Vec<&str> = view
        .cluster
        .members
        .iter()
        .filter(|(_, m)| m.session.is_none() && m.plugins.contains_key(resource))
        .map(|(name, _)| name.as_str())
        .collect();
    format!(
        "no live node has the plugin for {resource} ({} {}): {} {} no live session",
        advert.plugin,
        advert.version,
        down.join(", "),
        verb(down.len(), "has", "have")
    )
}

/// The labels node `i` lacks, as `k=v, k2=v2`.
fn missing(view: &View<'_>, i: usize, win: &Win<'_>) -> String {
    let labels = &view.nodes[i].member.labels;
    win.advert
        .require
        .iter()
        .filter(|(k, v)| labels.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Up to eight names, then how many more (a cluster of forty nodes need not be listed).
fn some_of(names: &[&str]) -> String {
    const SHOWN: usize = 8;
    if names.len() <= SHOWN {
        return names.join(", ");
    }
    format!(
        "{} and {} more",
        names[..SHOWN].join(", "),
        names.len() - SHOWN
    )
}

fn verb<'v>(count: usize, one: &'v str, many: &'v str) -> &'v str {
    if count == 1 { one } else { many }
}

/// A digest shortened for reading: `sha256:` and 12 hex digits.
fn short(digest: &str) -> String {
    const KEEP: usize = "sha256:".len() + 12;
    match digest.char_indices().nth(KEEP) {
        Some((cut, _)) => format!("{}…", &digest[..cut]),
        None => digest.to_owned(),
    }
}

/// `until` (ms since the Unix epoch) as RFC 3339 with the time left, e.g.
/// `2025-01-01T00:01:00Z (in 45s)`.
pub(crate) fn when(until: u64, now_ms: u64) -> String {
    // Beyond the year 9999 RFC 3339 has no form; a corrupt value is shown as a number.
    const LAST_MS: u64 = 253_402_300_799_000;
    let at = if until <= LAST_MS {
        humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(until)).to_string()
    } else {
        format!("{until} ms after the Unix epoch")
    };
    let left = Duration::from_secs(until.saturating_sub(now_ms).div_ceil(1000));
    format!("{at} (in {})", humantime::format_duration(left))
}

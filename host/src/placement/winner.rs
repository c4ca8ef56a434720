//! The winning advert of each resource: which plugin build runs, and its spec.
//!
//! Every node advertises the plugins in its folder; they may differ while a new version
//! is rolled out file by file. The one that runs is the highest semver version among live
//! nodes' adverts, then the greatest digest (two builds of one version still give exactly
//! one winner), then, for the same wasm with different manifests, the greatest tickets,
//! then require, then the first node by name: arbitrary, but every leader picks the same.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::cluster::{Advert, Cluster};

use super::rows::Rows;
use super::view::live_nodes;

/// The advert that runs for a resource, and who has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Winner {
    /// The winning advert: its version and digest are what runs; its `tickets` and
    /// `require` are the resource's spec.
    pub advert: Advert,
    /// Live nodes that advertise exactly the winning version and digest, by name.
    pub nodes: Vec<String>,
    /// Live nodes that advertise the resource with another version or digest, by name.
    pub others: Vec<String>,
}

/// The winning advert of every resource some live node advertises, by resource.
pub fn winning(cluster: &Cluster) -> BTreeMap<String, Winner> {
    let nodes = live_nodes(cluster);
    let names =
        |ids: &[usize]| -> Vec<String> { ids.iter().map(|&i| nodes[i].name.to_owned()).collect() };
    let mut rows = Rows::new(cluster, &nodes);
    let mut winners = BTreeMap::new();
    while rows.advance() {
        if let Some(win) = Win::of(&rows.adverts) {
            let winner = Winner {
                advert: win.advert.clone(),
                nodes: names(&win.runners),
                others: names(&win.others),
            };
            winners.insert(rows.resource.to_owned(), winner);
        }
    }
    winners
}

/// [`Winner`] without copies, with nodes as indexes into the live nodes.
#[derive(Debug)]
pub(super) struct Win<'a> {
    pub advert: &'a Advert,
    /// Live nodes advertising the winner's version and digest, ascending.
    pub runners: Vec<usize>,
    /// Live nodes advertising another version or digest, ascending.
    pub others: Vec<usize>,
}

impl<'a> Win<'a> {
    /// The winner among `adverts` (per live node), if any node advertises the resource.
    /// One pass, one comparison of builds per node: this runs for every resource.
    pub fn of(adverts: &[Option<&'a Advert>]) -> Option<Self> {
        let mut win: Option<Win<'a>> = None;
        for (i, advert) in adverts.iter().enumerate() {
            let Some(advert) = *advert else {
                continue;
            };
            let Some(win) = &mut win else {
                let mut runners = Vec::with_capacity(adverts.len() - i);
                runners.push(i);
                win = Some(Win {
                    advert,
                    runners,
                    others: Vec::new(),
                });
                continue;
            };
            match build(advert, win.advert) {
                Ordering::Equal => {
                    win.runners.push(i);
                    if manifest(advert, win.advert).is_gt() {
                        win.advert = advert;
                    }
                }
                Ordering::Greater => {
                    // A newer build: those seen so far (all before i) run another one.
                    win.others.append(&mut win.runners);
                    win.others.sort_unstable();
                    win.runners.push(i);
                    win.advert = advert;
                }
                Ordering::Less => win.others.push(i),
            }
        }
        win
    }

    /// Whether `version` and `digest` are the winner's.
    pub fn matches(&self, version: &semver::Version, digest: &str) -> bool {
        self.advert.version == *version && self.advert.digest == digest
    }

    /// Whether live node `i` advertises the winner's version and digest.
    pub fn runs(&self, i: usize) -> bool {
        self.runners.binary_search(&i).is_ok()
    }
}

/// The best of some adverts (in member name order), by the same order as the winner.
pub(super) fn best<'a>(adverts: &[&'a Advert]) -> Option<&'a Advert> {
    adverts
        .iter()
        .copied()
        .reduce(|best, a| if order(a, best).is_gt() { a } else { best })
}

/// The order of builds: version, then digest.
fn build(a: &Advert, b: &Advert) -> Ordering {
    a.version
        .cmp(&b.version)
        .then_with(|| a.digest.cmp(&b.digest))
}

/// The order of adverts: version, digest, tickets, require. Adverts equal in all four
/// (they may still differ in the plugin's file name) go to the first node by name.
fn order(a: &Advert, b: &Advert) -> Ordering {
    build(a, b).then_with(|| manifest(a, b))
}

/// The order of two manifests of one build: tickets, then require.
fn manifest(a: &Advert, b: &Advert) -> Ordering {
    a.tickets
        .cmp(&b.tickets)
        .then_with(|| a.require.cmp(&b.require))
}

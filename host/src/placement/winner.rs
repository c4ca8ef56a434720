//! The winning advert of each resource: which plugin build runs, and its spec.
//!
//! Every node advertises the plugins in its folder; they may differ while a new version
//! is rolled out file by file. The one that runs is the highest semver version among live
//! nodes' adverts. Of adverts of one version that differ (another build, another
//! manifest), the one its node installed last ([`Cluster::installed`], from cluster
//! version [`crate::version::INSTALL_ORDER`]): an operator who edits a manifest without
//! raising the version means the edit, whichever digest is greater. Then, as before that
//! version (when nothing is recorded), the greatest digest, then the greatest tickets,
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
        let installed = installed_at(cluster, &nodes, rows.resource);
        if let Some(win) = Win::of(&rows.adverts, installed) {
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
    /// The winner among `adverts` (per live node), if any node advertises the resource;
    /// `installed` gives the log index at which live node `i` installed its advert (0 if
    /// none is recorded), read only where adverts of one version differ.
    ///
    /// Two passes, because "installed last" belongs to a build, not to one node's
    /// advert of it: first the build (version, then the latest install among the nodes
    /// that advertise it, then digest), then, among the nodes that advertise that
    /// build, the spec (the latest install, then tickets, then require, then the first
    /// node by name). With nothing recorded this is the order of before: version,
    /// digest, tickets, require. Every node that advertises the winning build runs it,
    /// whatever its spec. This runs for every resource: with every node agreeing (the
    /// usual case) it reads no install and compares each advert with one other.
    pub fn of(adverts: &[Option<&'a Advert>], installed: impl Fn(usize) -> u64) -> Option<Self> {
        // The builds advertised, each with its latest install: read only where there
        // are two or more (nodes that agree, the usual case, need no look-up).
        let mut builds: Vec<(&'a Advert, u64)> = Vec::new();
        for advert in adverts.iter().flatten() {
            if !builds.iter().any(|(b, _)| same_build(b, advert)) {
                builds.push((advert, 0));
            }
        }
        if builds.len() > 1 {
            for (i, advert) in adverts.iter().enumerate() {
                let Some(advert) = *advert else {
                    continue;
                };
                if let Some(build) = builds.iter_mut().find(|(b, _)| same_build(b, advert)) {
                    build.1 = build.1.max(installed(i));
                }
            }
        }
        let (build, _) = builds.into_iter().reduce(|best, b| {
            let order = b.0.version.cmp(&best.0.version).then_with(|| {
                b.1.cmp(&best.1)
                    .then_with(|| b.0.digest.cmp(&best.0.digest))
            });
            if order.is_gt() { b } else { best }
        })?;
        let mut win = Win {
            advert: build,
            runners: Vec::new(),
            others: Vec::new(),
        };
        // The spec: of the adverts of the build that differ (another `tickets` or
        // `require`), the latest install, then the order of before; as for the builds,
        // read only where there are two or more.
        let mut specs: Vec<(&'a Advert, u64)> = Vec::new();
        for (i, advert) in adverts.iter().enumerate() {
            let Some(advert) = *advert else {
                continue;
            };
            if !same_build(advert, build) {
                win.others.push(i);
                continue;
            }
            win.runners.push(i);
            if !specs.iter().any(|(s, _)| *s == advert) {
                specs.push((advert, 0));
            }
        }
        if specs.len() > 1 {
            for (i, advert) in adverts.iter().enumerate() {
                let Some(advert) = *advert else {
                    continue;
                };
                if let Some(spec) = specs.iter_mut().find(|(s, _)| *s == advert) {
                    spec.1 = spec.1.max(installed(i));
                }
            }
        }
        let spec = specs.into_iter().reduce(|best, s| {
            let order = s.1.cmp(&best.1).then_with(|| manifest(s.0, best.0));
            if order.is_gt() { s } else { best }
        });
        win.advert = spec.map_or(build, |(s, _)| s);
        Some(win)
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

/// The log index at which each live node (by index into `nodes`) installed its advert of
/// `resource`, for [`Win::of`]; 0 where none is recorded.
pub(super) fn installed_at<'a>(
    cluster: &'a Cluster,
    nodes: &'a [super::view::Node<'a>],
    resource: &'a str,
) -> impl Fn(usize) -> u64 + 'a {
    move |i| {
        let installed = cluster.installed.get(nodes[i].name);
        installed
            .and_then(|by| by.get(resource))
            .map_or(0, |i| i.at)
    }
}

/// The best of some adverts (in member name order), by the same order as the winner
/// before [`crate::version::INSTALL_ORDER`] (the adverts of members that are down).
pub(super) fn best<'a>(adverts: &[&'a Advert]) -> Option<&'a Advert> {
    adverts
        .iter()
        .copied()
        .reduce(|best, a| if order(a, best).is_gt() { a } else { best })
}

/// Whether two adverts are of one build: the same version and digest.
fn same_build(a: &Advert, b: &Advert) -> bool {
    a.version == b.version && a.digest == b.digest
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Installed, Member, Session};

    fn advert(digest: &str, tickets: u32) -> Advert {
        Advert {
            plugin: "p".into(),
            version: semver::Version::new(1, 0, 0),
            digest: digest.into(),
            tickets,
            require: BTreeMap::new(),
            footprint: Default::default(),
        }
    }

    /// Three live nodes advertising `r` as given, installed at the given log indexes
    /// (none recorded where `None`).
    fn cluster(adverts: [(Advert, Option<u64>); 3]) -> Cluster {
        let mut cluster = Cluster::default();
        for (i, (advert, at)) in adverts.into_iter().enumerate() {
            let name = format!("n{i}");
            if let Some(at) = at {
                let installed = Installed {
                    at,
                    what: advert.installed(),
                };
                cluster
                    .installed
                    .insert(name.clone(), [("r".to_owned(), installed)].into());
            }
            let member = Member {
                addr: String::new(),
                labels: BTreeMap::new(),
                draining: false,
                plugins: [("r".to_owned(), advert)].into(),
                session: Some(Session {
                    id: i as u64 + 1,
                    opened_ms: 0,
                }),
            };
            cluster.members.insert(name, member);
        }
        cluster
    }

    /// Issue 26 item 6: of two builds or manifests of one version, the one installed
    /// last runs, whichever digest is greater; with nothing recorded (before the
    /// version), the greater digest, as 0.2.0 chooses.
    #[test]
    fn of_one_version_the_advert_installed_last_wins() {
        let winner = |c: &Cluster| winning(c).remove("r").unwrap();
        // Nothing recorded: the greater digest.
        let c = cluster([
            (advert("sha256:b", 1), None),
            (advert("sha256:a", 1), None),
            (advert("sha256:a", 1), None),
        ]);
        let w = winner(&c);
        assert_eq!(w.advert.digest, "sha256:b");
        assert_eq!(
            (w.nodes, w.others),
            (vec!["n0".into()], vec!["n1".into(), "n2".into()])
        );
        // The smaller digest installed last wins, on both nodes that have it.
        let c = cluster([
            (advert("sha256:b", 1), Some(10)),
            (advert("sha256:a", 1), Some(12)),
            (advert("sha256:a", 1), Some(5)),
        ]);
        let w = winner(&c);
        assert_eq!(w.advert.digest, "sha256:a");
        assert_eq!(
            (w.nodes, w.others),
            (vec!["n1".into(), "n2".into()], vec!["n0".into()])
        );
        // The same build with another spec: the spec installed last, whatever the
        // tickets; every node runs it.
        let c = cluster([
            (advert("sha256:a", 3), Some(10)),
            (advert("sha256:a", 1), Some(12)),
            (advert("sha256:a", 3), Some(11)),
        ]);
        let w = winner(&c);
        assert_eq!(w.advert.tickets, 1);
        assert_eq!(w.nodes.len(), 3);
        // "Installed last" is the build's latest install, whichever node has it, and
        // every node with the winning build runs it (the reviewer's cases).
        let c = cluster([
            (advert("sha256:a", 1), Some(5)),
            (advert("sha256:b", 1), Some(10)),
            (advert("sha256:a", 1), Some(12)),
        ]);
        let w = winner(&c);
        assert_eq!(w.advert.digest, "sha256:a");
        assert_eq!(
            (w.nodes, w.others),
            (vec!["n0".into(), "n2".into()], vec!["n1".into()])
        );
        let c = cluster([
            (advert("sha256:a", 1), Some(5)),
            (advert("sha256:a", 1), Some(12)),
            (advert("sha256:b", 1), Some(10)),
        ]);
        assert_eq!(winner(&c).advert.digest, "sha256:a");
        let c = cluster([
            (advert("sha256:a", 1), Some(5)),
            (advert("sha256:a", 1), Some(20)),
            (advert("sha256:a", 3), Some(10)),
        ]);
        assert_eq!(winner(&c).advert.tickets, 1);
        // A higher version still wins, however early it was installed.
        let mut c = cluster([
            (advert("sha256:a", 1), Some(10)),
            (advert("sha256:b", 1), Some(12)),
            (advert("sha256:b", 1), Some(13)),
        ]);
        c.members
            .get_mut("n0")
            .unwrap()
            .plugins
            .get_mut("r")
            .unwrap()
            .version = semver::Version::new(1, 1, 0);
        assert_eq!(winner(&c).advert.digest, "sha256:a");
    }

    /// Which node holds which advert does not change the winner, and its runners are
    /// exactly the nodes that advertise its build: every placement of three adverts
    /// (two builds, two specs, three install indexes) on three nodes.
    #[test]
    fn the_winner_does_not_depend_on_which_node_holds_which_advert() {
        let adverts = [
            (advert("sha256:a", 1), Some(5)),
            (advert("sha256:b", 2), Some(9)),
            (advert("sha256:a", 3), Some(7)),
        ];
        let mut seen = None;
        for order in [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ] {
            let c = cluster(order.map(|k| adverts[k].clone()));
            let w = winning(&c).remove("r").unwrap();
            let runners: Vec<String> = (0..3)
                .filter(|&i| adverts[order[i]].0.digest == w.advert.digest)
                .map(|i| format!("n{i}"))
                .collect();
            assert_eq!(w.nodes, runners, "{order:?}");
            let got = (w.advert.digest.clone(), w.advert.tickets);
            assert_eq!(*seen.get_or_insert(got.clone()), got, "{order:?}");
        }
        // b was installed last (9), so it runs, on one node.
        assert_eq!(seen, Some(("sha256:b".into(), 2)));
    }
}

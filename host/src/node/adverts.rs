//! Advertising the node's plugins to the cluster, in log entries of bounded size.
//!
//! The folder may hold thousands of plugins; their adverts together can exceed what one
//! Raft entry may carry (`ControlOptions::max_command`), and proposing the whole list on
//! every change would write O(n) bytes per loaded plugin, O(n²) in all, while a large
//! folder loads. So the node proposes only the difference between what it can run and what
//! the replicated state says it can run, as [`Command::AdvertiseChanges`] of at most
//! [`PART_BYTES`] each. After a start or a failed proposal it sends every advert again
//! and withdraws what its local replica shows and it no longer has (setting an advert to
//! its current value changes nothing); after that, only differences from what it has
//! had committed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::shared::Shared;
use crate::cluster::{Advert, Command, Response};
use crate::events;

/// The most encoded advert bytes in one command: well below `max_command` (a quarter of
/// the payload limit), so a part is never refused for its size.
const PART_BYTES: usize = 64 << 10;

/// How long to wait before retrying a failed proposal.
const RETRY: Duration = Duration::from_millis(200);

/// Proposes the latest adverts whenever they change, in parts, retrying failures.
pub async fn advertise_loop(
    shared: Arc<Shared>,
    mut adverts: watch::Receiver<Option<BTreeMap<String, Advert>>>,
) {
    // What the replicated state holds for this node, as far as this loop knows; `None`:
    // read it from the local replica.
    let mut known: Option<BTreeMap<String, Advert>> = None;
    loop {
        let Some(wanted) = adverts.borrow_and_update().clone() else {
            if adverts.changed().await.is_err() {
                return;
            }
            continue;
        };
        let mut committed = match known.take() {
            Some(known) => known,
            // After a start or a failed proposal the local replica may lag the leader (a
            // clean shutdown's withdrawal of every advert may not have been applied here
            // before the exit), so it is trusted only for what to withdraw: every wanted
            // advert is sent again.
            None => shared.read(|c| {
                c.members
                    .get(&shared.me)
                    .map(|m| m.plugins.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(resource, _)| !wanted.contains_key(resource))
                    .collect()
            }),
        };
        let mut failed = false;
        for part in parts(&committed, &wanted, PART_BYTES) {
            let command = Command::AdvertiseChanges {
                node: shared.me.clone(),
                set: part.set.clone(),
                remove: part.remove.clone(),
            };
            match shared.propose(command).await {
                Ok(Response::Done) => {
                    for resource in part.remove {
                        committed.remove(&resource);
                    }
                    committed.extend(part.set);
                }
                // Refused: this node's `Join` is not applied yet; retried below.
                Ok(other) => {
                    tracing::debug!(event = events::CONTROL_ERROR, answer = ?other, "the plugins are not advertised yet");
                    failed = true;
                    break;
                }
                Err(error) => {
                    tracing::debug!(event = events::CONTROL_ERROR, %error, "cannot advertise the plugins yet");
                    failed = true;
                    break;
                }
            }
        }
        if failed {
            tokio::time::sleep(RETRY).await;
            continue;
        }
        known = Some(committed);
        if adverts.changed().await.is_err() {
            return;
        }
    }
}

/// One command's worth of changes.
#[derive(Debug, Default, PartialEq)]
struct Part {
    set: BTreeMap<String, Advert>,
    remove: Vec<String>,
}

/// The changes that turn `committed` into `wanted`, split into parts of at most about
/// `max_bytes` encoded bytes (a single advert larger than that gets a part of its own).
/// Empty when nothing changed.
fn parts(
    committed: &BTreeMap<String, Advert>,
    wanted: &BTreeMap<String, Advert>,
    max_bytes: usize,
) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut part = Part::default();
    let mut bytes = 0;
    let mut add = |part: &mut Part, bytes: &mut usize, size: usize| {
        if *bytes + size > max_bytes && (!part.set.is_empty() || !part.remove.is_empty()) {
            parts.push(std::mem::take(part));
            *bytes = 0;
        }
        *bytes += size;
    };
    for resource in committed.keys().filter(|r| !wanted.contains_key(*r)) {
        add(&mut part, &mut bytes, resource.len() + 2);
        part.remove.push(resource.clone());
    }
    for (resource, advert) in wanted {
        if committed.get(resource) == Some(advert) {
            continue;
        }
        // The key's bytes and its length prefix (at most 2 bytes for a resource name).
        let size =
            resource.len() + 2 + postcard::experimental::serialized_size(advert).unwrap_or(0);
        add(&mut part, &mut bytes, size);
        part.set.insert(resource.clone(), advert.clone());
    }
    if !part.set.is_empty() || !part.remove.is_empty() {
        parts.push(part);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advert(digest: &str) -> Advert {
        Advert {
            plugin: "p".into(),
            version: semver::Version::new(1, 0, 0),
            digest: format!("sha256:{digest}"),
            tickets: 1,
            require: BTreeMap::new(),
            footprint: crate::cluster::Pool::default(),
        }
    }

    fn adverts(range: std::ops::Range<u32>, digest: &str) -> BTreeMap<String, Advert> {
        range
            .map(|i| (format!("r{i:05}"), advert(digest)))
            .collect()
    }

    /// Applies parts the way `Cluster::apply` does.
    fn apply(mut state: BTreeMap<String, Advert>, parts: Vec<Part>) -> BTreeMap<String, Advert> {
        for part in parts {
            for r in part.remove {
                state.remove(&r);
            }
            state.extend(part.set);
        }
        state
    }

    #[test]
    fn nothing_changed_means_no_command() {
        let a = adverts(0..100, "a");
        assert!(parts(&a, &a, PART_BYTES).is_empty());
    }

    #[test]
    fn only_the_difference_is_sent() {
        let old = adverts(0..10, "a");
        let mut new = adverts(1..11, "a");
        new.insert("r00005".into(), advert("b"));
        let parts = parts(&old, &new, PART_BYTES);
        assert_eq!(
            parts,
            [Part {
                set: [
                    ("r00005".to_owned(), advert("b")),
                    ("r00010".to_owned(), advert("a"))
                ]
                .into(),
                remove: vec!["r00000".to_owned()],
            }]
        );
        assert_eq!(apply(old, parts), new);
    }

    #[test]
    fn ten_thousand_adverts_go_in_parts_that_fit_a_log_entry() {
        let wanted = adverts(0..10_000, &"f".repeat(64));
        let parts = parts(&BTreeMap::new(), &wanted, PART_BYTES);
        assert!(parts.len() > 1, "{} parts", parts.len());
        for part in &parts {
            let command = Command::AdvertiseChanges {
                node: "n1".into(),
                set: part.set.clone(),
                remove: part.remove.clone(),
            };
            let len = postcard::experimental::serialized_size(&command).unwrap();
            assert!(
                len <= PART_BYTES + 64,
                "a part of {len} bytes ({} adverts)",
                part.set.len()
            );
        }
        assert_eq!(apply(BTreeMap::new(), parts), wanted);
    }

    #[test]
    fn withdrawing_everything_is_sent_in_parts_too() {
        let old = adverts(0..20_000, "a");
        let parts = parts(&old, &BTreeMap::new(), 1 << 10);
        assert!(parts.len() > 1);
        assert!(apply(old, parts).is_empty());
    }
}

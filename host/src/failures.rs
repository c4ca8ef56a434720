//! What a node remembers of its plugins' failed starts, for `tenure status`.
//!
//! When a plugin's start fails (it traps, returns an error, runs out of memory), the
//! supervisor restarts it after a backoff, and after too many failures gives the slot up
//! (`supervisor.rs`); the node then cools down for the resource for a while: placement
//! gives it no slot of it. The cooldown is replicated (`cluster.cooldown`, set by the
//! `GiveUp` command), so every node can say until when any node cools down. The error is not: it is the failing node's own
//! knowledge, written to its log (`plugin.stopped`), and putting it in a replicated
//! command would change the stored format for what is a diagnostic. So each node keeps
//! the last failure of each of its plugins here, in memory, and a status it answers shows
//! it on its own plugin rows (`Status::add_failures`); `tenure status` asks the other
//! nodes that cool down for a resource for theirs.
//!
//! What it does not do: survive a restart of the node (the log keeps every failure), or
//! say anything about a plugin that failed to load (`plugin.rejected` in the log; such a
//! plugin is not advertised, so it has no row).

use std::collections::BTreeMap;
use std::sync::Mutex;

/// The most failures kept: one per resource, so a folder would need more resources than
/// this, each failing, to reach it; then the oldest is forgotten.
const KEPT: usize = 1024;
/// The longest error text kept, in bytes (a trap's text can carry a long backtrace).
const ERROR_BYTES: usize = 2048;

/// A plugin's last failed start on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastFailure {
    /// The plugin's file stem.
    pub plugin: String,
    pub slot: u32,
    /// The token of the grant the failed start ran under.
    pub token: u64,
    /// How it ended, as `plugin.stopped` says: `trapped`, `returned` (an error), `oom`,
    /// `interrupted`.
    pub outcome: String,
    /// The error, in words (at most 2 KiB of it).
    pub error: String,
    /// When it failed (this node's clock, ms since the Unix epoch).
    pub at_ms: u64,
    /// When the supervisor starts it again, after its backoff (ms since the Unix epoch);
    /// `None` once it gave the slot up (the replicated skip then says when the node may
    /// be given a slot of the resource again).
    pub restart_ms: Option<u64>,
    /// How many failures there were within the manifest's restart window, this one
    /// included, and how many restarts the manifest allows in it: above that the slot
    /// was given up.
    pub failures: u32,
    pub max_restarts: u32,
}

/// The last failure of each resource's plugin on this node.
#[derive(Default)]
pub struct Failures {
    by_resource: Mutex<BTreeMap<String, LastFailure>>,
}

impl Failures {
    /// Records `failure` as the last of `resource`'s plugin.
    pub fn record(&self, resource: &str, mut failure: LastFailure) {
        if failure.error.len() > ERROR_BYTES {
            let mut cut = ERROR_BYTES;
            while !failure.error.is_char_boundary(cut) {
                cut -= 1;
            }
            failure.error.truncate(cut);
            failure.error.push('…');
        }
        let mut kept = self.by_resource.lock().unwrap_or_else(|e| e.into_inner());
        kept.insert(resource.to_owned(), failure);
        while kept.len() > KEPT {
            let oldest = kept
                .iter()
                .min_by_key(|(_, f)| f.at_ms)
                .map(|(r, _)| r.clone());
            match oldest {
                Some(resource) => kept.remove(&resource),
                None => break,
            };
        }
    }

    /// Every resource's last failure.
    pub fn all(&self) -> BTreeMap<String, LastFailure> {
        self.by_resource
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(at_ms: u64, error: &str) -> LastFailure {
        LastFailure {
            plugin: "p".into(),
            slot: 0,
            token: 7,
            outcome: "trapped".into(),
            error: error.into(),
            at_ms,
            restart_ms: None,
            failures: 3,
            max_restarts: 2,
        }
    }

    #[test]
    fn the_last_failure_of_each_resource_is_kept_and_long_errors_are_cut() {
        let failures = Failures::default();
        failures.record("a", failure(1, "first"));
        failures.record("a", failure(2, "second"));
        failures.record("b", failure(3, &"é".repeat(ERROR_BYTES)));
        let all = failures.all();
        assert_eq!(all.len(), 2);
        assert_eq!(all["a"].error, "second");
        assert!(all["b"].error.len() <= ERROR_BYTES + '…'.len_utf8());
        assert!(all["b"].error.ends_with('…'));
    }

    #[test]
    fn past_the_bound_the_oldest_is_forgotten() {
        let failures = Failures::default();
        for i in 0..=KEPT as u64 {
            failures.record(&format!("r{i}"), failure(i + 10, "x"));
        }
        let all = failures.all();
        assert_eq!(all.len(), KEPT);
        assert!(!all.contains_key("r0"), "the oldest goes first");
    }
}

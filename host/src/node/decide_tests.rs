//! Scenarios of the owner's rules (`decide.rs`): a node's grants, what runs and its lease
//! change step by step, and each step checks what the owner does. [`Owner`] below plays
//! `owner.rs`: it keeps what the real owner keeps and applies the actions as it would
//! (a start runs, a stop marks the instance stopping, a release is noted with its time, a
//! missing version is noted as reported), without tasks, Raft or a clock.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::decide::{Action, Changed, Files, Key, RELEASE_RETRY, Runs, View, decide};
use crate::cluster::{Handover, Releasing, Slot};
use crate::runtime::CleanupReason;

/// A loaded plugin version: its digest and which secret values it read.
#[derive(Clone, Debug, PartialEq)]
struct Version {
    digest: &'static str,
    secrets: u32,
}

impl Files for Version {
    fn digest(&self) -> &str {
        self.digest
    }

    fn same_secrets(&self, other: &Self) -> bool {
        self.secrets == other.secrets
    }
}

/// What `owner.rs` keeps between decisions, and the world it reads.
struct Owner {
    granted: BTreeMap<Key, Slot>,
    running: BTreeMap<Key, Runs<Version>>,
    ended: BTreeMap<Key, u64>,
    release_proposed: BTreeMap<Key, Instant>,
    reported: BTreeSet<(String, u32, u64)>,
    plugins: BTreeMap<(String, String), Version>,
    republished: bool,
    start: bool,
    valid: bool,
    now: Instant,
}

impl Owner {
    fn new() -> Self {
        Self {
            granted: BTreeMap::new(),
            running: BTreeMap::new(),
            ended: BTreeMap::new(),
            release_proposed: BTreeMap::new(),
            reported: BTreeSet::new(),
            plugins: BTreeMap::new(),
            republished: false,
            start: true,
            valid: true,
            now: Instant::now(),
        }
    }

    /// The folder holds `version` of `resource`.
    fn load(&mut self, resource: &str, version: Version) {
        self.plugins
            .insert((resource.into(), version.digest.into()), version);
        self.republished = true;
    }

    /// The replica grants slot `key` to this node under `token`, for version `digest`.
    fn grant(&mut self, key: &Key, token: u64, digest: &str) {
        self.granted.insert(key.clone(), slot(token, digest));
    }

    /// The supervisor of `key` ended (after a stop, a give-up or a lapse).
    fn end(&mut self, key: &Key) {
        self.running.remove(key);
        let token = self.granted[key].token;
        self.ended.insert(key.clone(), token);
    }

    /// One decision, its actions applied as `owner.rs` applies them.
    fn step(&mut self) -> Vec<Action<Version>> {
        let mine: Vec<(Key, Slot)> = self
            .granted
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        let actions = decide(&View {
            mine: &mine,
            running: &self.running,
            ended: &self.ended,
            release_proposed: &self.release_proposed,
            reported: &self.reported,
            plugins: &self.plugins,
            republished: self.republished,
            start: self.start,
            valid: self.valid,
            now: self.now,
        });
        self.republished = false;
        for action in &actions {
            match action {
                Action::Start { key, loaded, .. } => {
                    let runs = Runs {
                        loaded: loaded.clone(),
                        stopping: false,
                    };
                    self.running.insert(key.clone(), runs);
                }
                Action::Stop { key, .. } => self.running.get_mut(key).unwrap().stopping = true,
                Action::Release { key, .. } => {
                    self.release_proposed.insert(key.clone(), self.now);
                }
                Action::Missing { key, token, .. } => {
                    self.reported.insert((key.0.clone(), key.1, *token));
                }
            }
        }
        let keys: BTreeSet<Key> = self.granted.keys().cloned().collect();
        self.ended.retain(|key, _| keys.contains(key));
        self.release_proposed.retain(|key, _| keys.contains(key));
        actions
    }
}

fn slot(token: u64, digest: &str) -> Slot {
    Slot {
        owner: "n1".into(),
        session: 1,
        token,
        term: 1,
        since_ms: 0,
        version: semver::Version::new(1, 0, 0),
        digest: digest.into(),
        releasing: None,
    }
}

fn releasing(reason: Handover) -> Option<Releasing> {
    Some(Releasing {
        reason,
        to: None,
        at_ms: 0,
    })
}

fn key() -> Key {
    ("billing".into(), 0)
}

fn v1() -> Version {
    Version {
        digest: "d1",
        secrets: 1,
    }
}

fn start(token: u64) -> Action<Version> {
    Action::Start {
        key: key(),
        slot: slot(token, "d1"),
        loaded: v1(),
    }
}

fn stop(reason: CleanupReason, changed: Option<(Changed, u64)>) -> Action<Version> {
    Action::Stop {
        key: key(),
        reason,
        changed,
    }
}

fn release(token: u64) -> Action<Version> {
    Action::Release { key: key(), token }
}

#[test]
fn a_grant_starts_once_while_the_lease_holds_and_never_while_shutting_down() {
    let mut o = Owner::new();
    o.load("billing", v1());
    o.grant(&key(), 7, "d1");
    o.valid = false;
    assert_eq!(o.step(), [], "no start without a valid lease");
    o.valid = true;
    o.start = false;
    assert_eq!(o.step(), [], "no start while shutting down");
    o.start = true;
    assert_eq!(o.step(), [start(7)]);
    assert_eq!(o.step(), [], "started once");
}

#[test]
fn a_handover_stops_the_instance_once_with_its_reason_then_releases_once_it_ended() {
    let mut o = Owner::new();
    o.load("billing", v1());
    o.grant(&key(), 7, "d1");
    assert_eq!(o.step(), [start(7)]);
    o.granted.get_mut(&key()).unwrap().releasing = releasing(Handover::Drained);
    assert_eq!(o.step(), [stop(CleanupReason::Moved, None)]);
    assert_eq!(o.step(), [], "asked to stop once");
    // Its cleanup ran and its own release was lost: the owner hands it back.
    o.end(&key());
    assert_eq!(o.step(), [release(7)]);
    assert_eq!(o.step(), [], "not again within the retry interval");
    o.now += RELEASE_RETRY;
    assert_eq!(o.step(), [release(7)], "again after it");
}

#[test]
fn a_slot_marked_releasing_that_nothing_runs_is_released_even_without_a_lease() {
    let mut o = Owner::new();
    o.grant(&key(), 7, "d1");
    o.granted.get_mut(&key()).unwrap().releasing = releasing(Handover::Shutdown);
    o.valid = false;
    o.start = false;
    assert_eq!(o.step(), [release(7)]);
}

#[test]
fn a_token_whose_supervisor_ended_never_starts_again_and_is_handed_back_under_a_lease() {
    let mut o = Owner::new();
    o.load("billing", v1());
    o.grant(&key(), 7, "d1");
    assert_eq!(o.step(), [start(7)]);
    o.end(&key());
    o.valid = false;
    assert_eq!(
        o.step(),
        [],
        "no start under the same token, no release without a lease"
    );
    o.valid = true;
    assert_eq!(o.step(), [release(7)]);
    // Granted again under a new token: that is a new start.
    o.grant(&key(), 9, "d1");
    assert_eq!(o.step(), [start(9)]);
}

#[test]
fn new_files_under_the_running_version_stop_it_as_an_update_only_when_the_folder_changed() {
    let mut o = Owner::new();
    o.load("billing", v1());
    o.grant(&key(), 7, "d1");
    assert_eq!(o.step(), [start(7)]);
    assert_eq!(o.step(), [], "the same files");
    o.load(
        "billing",
        Version {
            digest: "d1",
            secrets: 2,
        },
    );
    assert_eq!(
        o.step(),
        [stop(
            CleanupReason::PluginUpdated,
            Some((Changed::Secrets, 7))
        )]
    );
    // A handover under way tells its own reason, and no files line.
    let mut o = Owner::new();
    o.load("billing", v1());
    o.grant(&key(), 7, "d1");
    o.step();
    o.granted.get_mut(&key()).unwrap().releasing = releasing(Handover::Released);
    o.load(
        "billing",
        Version {
            digest: "d1",
            secrets: 2,
        },
    );
    assert_eq!(o.step(), [stop(CleanupReason::Released, None)]);
}

#[test]
fn a_missing_version_is_reported_once_per_token_and_started_once_it_is_loaded() {
    let mut o = Owner::new();
    o.grant(&key(), 7, "d1");
    let missing = Action::Missing {
        key: key(),
        token: 7,
        digest: "d1".into(),
    };
    assert_eq!(o.step(), [missing]);
    assert_eq!(o.step(), []);
    o.load("billing", v1());
    assert_eq!(o.step(), [start(7)]);
}

#[test]
fn an_instance_whose_slot_is_no_longer_granted_here_stops_as_lease_lost_once() {
    let mut o = Owner::new();
    o.load("billing", v1());
    o.grant(&key(), 7, "d1");
    assert_eq!(o.step(), [start(7)]);
    o.granted.clear();
    assert_eq!(o.step(), [stop(CleanupReason::LeaseLost, None)]);
    assert_eq!(o.step(), [], "asked to stop once");
    // Granted here again later (a new session), under a new token: a new start.
    o.running.clear();
    o.now += Duration::from_secs(5);
    o.grant(&key(), 12, "d1");
    assert_eq!(o.step(), [start(12)]);
}

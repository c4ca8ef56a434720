//! What a member may propose: the control plane's authorization table.
//!
//! A node's certificate proves who sent a message, not that the message is the sender's
//! business. A node speaks for itself only: it may propose commands about its own
//! membership, adverts and session, and about the slots it holds under their current
//! token. Everything else is decided by the leader (grants, expiries, placement's
//! handovers) or by an operator (revoke, drain, move, release), and is proposed on the
//! leader itself, never accepted from another member.
//!
//! The leader wraps every proposal a member forwards to it (kind PROPOSE) as
//! [`Proposal::OneFrom`](super::Proposal::OneFrom)/[`Proposal::BatchFrom`](super::Proposal::BatchFrom) with the member's authenticated name, and
//! [`Cluster::apply_proposal`] runs [`authorize`] on each command against the state at
//! that log position, on every replica alike. Checking at apply time, not when the
//! leader receives the message, leaves no gap between the check and the change: a slot
//! that changes owner between the two is judged by its owner at the moment the command
//! takes effect. A refused command changes nothing and is answered
//! [`Response::Forbidden`](super::Response::Forbidden); the leader counts and logs it (`raft/propose.rs`).
//!
//! | command | a member may propose it when | otherwise |
//! |---|---|---|
//! | `Join`, `Advertise`, `AdvertiseChanges`, `OpenSession`, `OpenSessionOf` | it names the member itself | forbidden |
//! | `EndSession` without `expired_in` (a clean leave) | it names the member itself | forbidden |
//! | `EndSession` with `expired_in` (an expiry) | never: the leader's decision | forbidden |
//! | `Assign` | never: the leader's decision | forbidden |
//! | `Regrant`, `Release`, `GiveUp`, `SaveState`, `SaveSlotState` | the slot's grant under `token` is the member's | forbidden; a token that is not the slot's current one is applied, and answered `Stale` |
//! | `BeginHandover` with reason `shutdown` | the slot's grant under `token` is the member's | as above |
//! | `BeginHandover` for any other reason | never: placement (leader) or an operator | forbidden |
//! | `SetDraining`, `Revoke`, `Remove` | never: operators only | forbidden |
//! | `Identify` | never: the leader chooses the cluster id | forbidden |
//! | `RaiseVersion` | never: the leader raises it once every member speaks it | forbidden |
//! | `Probe` (the version gate's test command) | it names the member itself | forbidden |
//!
//! The leader's own proposals ([`Proposal::One`](super::Proposal::One)/[`Proposal::Batch`](super::Proposal::Batch)) are not checked:
//! they come from its own code (its placement, its expiry decisions, its node's own
//! commands) and from operators it authenticated itself (`node/admin.rs`). Raft trusts its
//! leader in any case; what this table takes away is every other member's power to speak
//! for someone else.

use super::state::{Cluster, Command, Handover};

/// Whether member `by` may have `command` applied. `Err` says why not, for the
/// proposer's error and the leader's log.
pub fn authorize(cluster: &Cluster, by: &str, command: &Command) -> Result<(), String> {
    let itself = |node: &str, what: &str| {
        if node == by {
            Ok(())
        } else {
            Err(format!("{by} may not propose {what} for {node}"))
        }
    };
    match command {
        Command::Join { node, .. } => itself(node, "a join"),
        Command::Advertise { node, .. } | Command::AdvertiseChanges { node, .. } => {
            itself(node, "adverts")
        }
        Command::OpenSession { node, .. } | Command::OpenSessionOf { node, .. } => {
            itself(node, "a session")
        }
        Command::EndSession {
            node,
            expired_in: None,
            ..
        } => itself(node, "the end of a session"),
        Command::EndSession {
            node,
            expired_in: Some(_),
            ..
        } => Err(format!(
            "{by} may not expire {node}'s session: expiries are the leader's decision"
        )),
        Command::Assign { resource, slot, .. } => Err(format!(
            "{by} may not grant {resource}/{slot}: grants are the leader's decision"
        )),
        Command::Regrant {
            resource,
            slot,
            token,
            ..
        }
        | Command::Release {
            resource,
            slot,
            token,
            ..
        }
        | Command::GiveUp {
            resource,
            slot,
            token,
            ..
        }
        | Command::SaveState {
            resource,
            slot,
            token,
            ..
        }
        | Command::SaveSlotState {
            resource,
            slot,
            token,
            ..
        }
        | Command::BeginHandover {
            resource,
            slot,
            token,
            reason: Handover::Shutdown,
            ..
        } => holds(cluster, by, resource, *slot, *token),
        Command::BeginHandover {
            resource,
            slot,
            reason,
            ..
        } => Err(format!(
            "{by} may not hand over {resource}/{slot} ({}): only placement or an operator may",
            reason.as_str()
        )),
        Command::SetDraining { node, .. } => Err(format!(
            "{by} may not drain or undrain {node}: operators only"
        )),
        Command::Revoke { .. } => Err(format!("{by} may not revoke a key: operators only")),
        Command::Remove { node, .. } => Err(format!("{by} may not remove {node}: operators only")),
        Command::Identify { .. } => Err(format!(
            "{by} may not set the cluster's id: its first leader does"
        )),
        Command::RaiseVersion { .. } => Err(format!(
            "{by} may not raise the cluster's version: its leader does, once every member speaks it"
        )),
        Command::Probe { node } => itself(node, "a probe"),
    }
}

/// Whether `by` holds `resource/slot` under `token`, or `token` is not the slot's current
/// grant at all (the command then changes nothing: it is applied and answered `Stale`,
/// as it would be from the owner).
fn holds(cluster: &Cluster, by: &str, resource: &str, slot: u32, token: u64) -> Result<(), String> {
    match cluster.slot(resource, slot) {
        Some(held) if held.token == token && held.owner != by => Err(format!(
            "{by} may not act on {resource}/{slot} under token {token}: {} holds it",
            held.owner
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cluster::{Advert, Proposal, Response};

    /// A cluster where n1 holds `r/0` under the returned token and n2 is a member.
    fn cluster() -> (Cluster, u64) {
        let mut c = Cluster::default();
        let mut index = 0;
        let mut apply = |c: &mut Cluster, command| {
            index += 1;
            c.apply(index, 1, command)
        };
        for node in ["n1", "n2"] {
            apply(
                &mut c,
                Command::Join {
                    node: node.into(),
                    addr: format!("{node}:7400"),
                    labels: BTreeMap::new(),
                },
            );
        }
        let Response::Session(session) = apply(
            &mut c,
            Command::OpenSession {
                node: "n1".into(),
                at_ms: 0,
            },
        ) else {
            panic!("no session");
        };
        apply(
            &mut c,
            Command::Advertise {
                node: "n1".into(),
                plugins: BTreeMap::from([(
                    "r".to_owned(),
                    Advert {
                        plugin: "r".into(),
                        version: semver::Version::new(1, 0, 0),
                        digest: "sha256:aa".into(),
                        tickets: 1,
                        require: BTreeMap::new(),
                        footprint: crate::cluster::Pool::default(),
                    },
                )]),
            },
        );
        let Response::Granted { token, .. } = apply(&mut c, assign(session)) else {
            panic!("not granted");
        };
        (c, token)
    }

    fn assign(session: u64) -> Command {
        Command::Assign {
            resource: "r".into(),
            slot: 0,
            node: "n1".into(),
            session,
            version: semver::Version::new(1, 0, 0),
            digest: "sha256:aa".into(),
            at_ms: 0,
        }
    }

    fn save(token: u64) -> Command {
        Command::SaveState {
            resource: "r".into(),
            slot: 0,
            token,
            data: b"mine".to_vec(),
        }
    }

    fn handover(token: u64, reason: Handover) -> Command {
        Command::BeginHandover {
            resource: "r".into(),
            slot: 0,
            token,
            reason,
            to: None,
            at_ms: 0,
        }
    }

    #[test]
    fn a_member_speaks_for_itself_only() {
        let (c, token) = cluster();
        let end = |node: &str, expired_in| Command::EndSession {
            node: node.into(),
            session: 3,
            expired_in,
            at_ms: 0,
        };
        let release = Command::Release {
            resource: "r".into(),
            slot: 0,
            token,
            at_ms: 0,
        };
        // (command, may n1 propose it, may n2 propose it)
        let table = [
            (
                Command::Join {
                    node: "n1".into(),
                    addr: "a:1".into(),
                    labels: BTreeMap::new(),
                },
                true,
                false,
            ),
            (
                Command::OpenSession {
                    node: "n1".into(),
                    at_ms: 0,
                },
                true,
                false,
            ),
            (
                Command::OpenSessionOf {
                    node: "n1".into(),
                    at_ms: 0,
                    process: crate::cluster::Process {
                        store: crate::cluster::StoreId::from_bytes([1; 16]),
                        incarnation: 1,
                    },
                    ended: None,
                },
                true,
                false,
            ),
            (
                Command::AdvertiseChanges {
                    node: "n1".into(),
                    set: BTreeMap::new(),
                    remove: vec![],
                },
                true,
                false,
            ),
            (end("n1", None), true, false),
            (end("n1", Some(1)), false, false),
            (assign(3), false, false),
            (save(token), true, false),
            (release, true, false),
            (handover(token, Handover::Shutdown), true, false),
            (handover(token, Handover::Moved), false, false),
            (
                Command::SetDraining {
                    node: "n1".into(),
                    draining: true,
                },
                false,
                false,
            ),
            (
                Command::Revoke {
                    key: "sha256:00".into(),
                    certificate: None,
                    node: None,
                    at_ms: 0,
                },
                false,
                false,
            ),
        ];
        for (command, n1, n2) in table {
            assert_eq!(authorize(&c, "n1", &command).is_ok(), n1, "n1: {command:?}");
            assert_eq!(authorize(&c, "n2", &command).is_ok(), n2, "n2: {command:?}");
        }
    }

    #[test]
    fn a_forwarded_proposal_is_applied_with_its_proposer_s_rights_only() {
        let (mut c, token) = cluster();
        let before = c.clone();
        let outcome = c.apply_proposal(
            10,
            1,
            Proposal::BatchFrom {
                by: "n2".into(),
                commands: vec![
                    save(token),
                    Command::Revoke {
                        key: "sha256:00".into(),
                        certificate: None,
                        node: None,
                        at_ms: 0,
                    },
                ],
            },
        );
        let crate::cluster::Outcome::Batch(responses) = outcome else {
            panic!("a batch is answered as a batch");
        };
        assert!(
            responses
                .iter()
                .all(|r| matches!(r, Response::Forbidden(_))),
            "{responses:?}"
        );
        assert_eq!(c, before, "a forbidden command changes nothing");

        // The owner's own save goes through; a stale token from anyone is only stale.
        let own = Proposal::OneFrom {
            by: "n1".into(),
            command: save(token),
        };
        assert_eq!(
            c.apply_proposal(11, 1, own),
            crate::cluster::Outcome::One(Response::Done)
        );
        let stale = Proposal::OneFrom {
            by: "n2".into(),
            command: save(token + 100),
        };
        assert_eq!(
            c.apply_proposal(12, 1, stale),
            crate::cluster::Outcome::One(Response::Stale)
        );
    }
}

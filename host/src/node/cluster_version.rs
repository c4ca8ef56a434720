//! The leader raises the cluster's version once every member speaks it (`crate::version`).
//!
//! What a member speaks is what its connection negotiates: the handshake picks the
//! highest node protocol both sides list, so the version of the leader's connection to a
//! member is the lower of the two builds' newest. The cluster's version may rise to the
//! lowest of those over every Raft member (voters and learners: every replica that
//! applies the log must understand what is committed) and the leader's own newest. A
//! member without a live connection may be an older build on its way back, so nothing is
//! raised while one is unreachable: like etcd, which decides its cluster version only
//! once it has heard every member's. Of two live connections to a member (one each way,
//! or one of a process that was just replaced), the lower counts.
//!
//! A live connection is evidence, not proof: after a `kill -9` the leader's connection to
//! the dead process looks live until QUIC's idle timeout, so a member replaced by an older
//! build within that time may be counted at its old version. Safety does not rest on it:
//! the older process is refused at every message, and a process that applies a raise it
//! does not speak stops before it applies anything after it (`raft/state_machine.rs`).
//!
//! The raise is a committed entry ([`Command::RaiseVersion`]) and is never undone, so a
//! member that is later replaced by an older build is refused (at every message, at join,
//! and at start: `raft/service.rs`, `raft/format.rs`) rather than handed entries it cannot
//! read. Between the leader's decision and the commit a member may restart on an older
//! build; it then meets exactly that refusal, which is the same as a downgrade after the
//! raise: the operator installs the newer build on it again. A node that asks to join in
//! that interval is held to the version being raised to (`Control::raising`), so no older
//! learner is admitted just before the raise.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::shared::Shared;
use crate::cluster::{Command, Response};
use crate::events;
use crate::pki::Kind;

/// How often the leader looks again.
const EVERY: Duration = Duration::from_secs(1);

/// What the leader does about the cluster's version.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// Raise it to this version.
    Raise(u32),
    /// Every member speaks the current version and no more.
    Stay,
    /// A member keeps it where it is (`why` names the member and what it speaks).
    Wait { member: String, why: String },
    /// A member speaks less than the cluster's version already: an older build put back
    /// on it, refused at every message until it runs a newer one.
    Behind { member: String, why: String },
}

/// Decides from the cluster's `current` version, the leader's own `newest`, and each
/// other member's negotiated version (`None`: no live connection).
pub(super) fn decide(
    current: u32,
    newest: u32,
    members: &BTreeMap<String, Option<u32>>,
) -> Decision {
    if let Some((member, version)) = members
        .iter()
        .find_map(|(m, v)| v.filter(|v| *v < current).map(|v| (m, v)))
    {
        return Decision::Behind {
            member: member.clone(),
            why: format!(
                "{member} speaks tenure/{version} at most, below the cluster's version {current}: every node refuses it until it runs a build that speaks tenure/{current}"
            ),
        };
    }
    let mut target = newest;
    let mut holding: Option<(String, String)> = None;
    for (member, negotiated) in members {
        match negotiated {
            None => {
                return Decision::Wait {
                    member: member.clone(),
                    why: format!(
                        "{member} has no live connection to the leader: it may run an older build"
                    ),
                };
            }
            Some(version) if *version < target => {
                target = *version;
                holding = Some((
                    member.clone(),
                    format!("{member} speaks tenure/{version} at most"),
                ));
            }
            Some(_) => {}
        }
    }
    if target > current {
        Decision::Raise(target)
    } else if let Some((member, why)) = holding.filter(|_| newest > current) {
        Decision::Wait { member, why }
    } else {
        Decision::Stay
    }
}

/// Every other Raft member's negotiated version, from the live connections.
fn negotiated(shared: &Shared) -> BTreeMap<String, Option<u32>> {
    let members = shared.control.members();
    let mut found: BTreeMap<String, Option<u32>> = members
        .voters
        .keys()
        .chain(members.learners.keys())
        .filter(|name| **name != shared.me)
        .map(|name| (name.clone(), None))
        .collect();
    for conn in shared.rpc().transport().connections() {
        if conn.retiring || conn.peer.identity.kind != Kind::Node {
            continue;
        }
        if let Some(slot) = found.get_mut(&conn.peer.identity.name) {
            let version = conn.peer.version;
            *slot = Some(slot.map_or(version, |v: u32| v.min(version)));
        }
    }
    found
}

/// While this node leads, raises the cluster's version whenever every member speaks a
/// newer one; until `stop` is set.
pub(super) async fn keep_raised(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let newest = *crate::version::protocols().end();
    // The last reason for waiting that was logged, so that it is said once.
    let mut said: Option<String> = None;
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(EVERY) => {}
        }
        if !shared.control.is_leader() {
            said = None;
            continue;
        }
        let current = shared.read(|c| c.version);
        match decide(current, newest, &negotiated(&shared)) {
            Decision::Stay => said = None,
            Decision::Wait { member, why } => say_once(&mut said, &member, current, why, false),
            Decision::Behind { member, why } => say_once(&mut said, &member, current, why, true),
            Decision::Raise(to) => {
                // Proposed here only, never forwarded: a node that lost its leadership
                // leaves the decision to the next leader. Joins are held to it first.
                shared.control.raising(to);
                match shared
                    .control
                    .propose_here(Command::RaiseVersion { to })
                    .await
                {
                    Ok(Response::Done) => {
                        said = None;
                        tracing::info!(
                            event = events::CLUSTER_VERSION_RAISED,
                            from = current,
                            to,
                            "raised the cluster's version from {current} to {to}: every member speaks tenure/{to}"
                        );
                    }
                    Ok(answer) => tracing::warn!(
                        event = events::CONTROL_ERROR,
                        %answer,
                        "the cluster's version was not raised"
                    ),
                    Err(crate::raft::ProposeError::NotLeader { .. }) => {}
                    Err(error) => tracing::warn!(
                        event = events::CONTROL_ERROR,
                        %error,
                        "cannot raise the cluster's version; retrying"
                    ),
                }
            }
        }
    }
}

/// Logs why the version stays at `current`, unless that was the last thing said; a
/// member behind the cluster's version at WARN.
fn say_once(said: &mut Option<String>, member: &str, current: u32, why: String, warn: bool) {
    if said.as_ref() == Some(&why) {
        return;
    }
    if warn {
        tracing::warn!(
            event = events::CLUSTER_VERSION_WAITING,
            member,
            version = current,
            "{why}"
        );
    } else {
        tracing::info!(
            event = events::CLUSTER_VERSION_WAITING,
            member,
            version = current,
            "the cluster's version stays {current}: {why}"
        );
    }
    *said = Some(why);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(list: &[(&str, Option<u32>)]) -> BTreeMap<String, Option<u32>> {
        list.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    #[test]
    fn raises_to_the_lowest_version_every_member_speaks() {
        let all = members(&[("n2", Some(7)), ("n3", Some(7))]);
        assert_eq!(decide(6, 7, &all), Decision::Raise(7));
        // The leader's own newest bounds it.
        assert_eq!(decide(0, 6, &all), Decision::Raise(6));
        assert_eq!(decide(7, 7, &all), Decision::Stay);
        // A single-node cluster raises to its own newest.
        assert_eq!(decide(0, 6, &members(&[])), Decision::Raise(6));
    }

    #[test]
    fn a_member_that_speaks_less_or_cannot_be_heard_holds_it() {
        let one_old = members(&[("n2", Some(7)), ("n3", Some(6))]);
        assert_eq!(
            decide(6, 7, &one_old),
            Decision::Wait {
                member: "n3".into(),
                why: "n3 speaks tenure/6 at most".into()
            }
        );
        // Raised as far as the old member allows.
        assert_eq!(decide(0, 7, &one_old), Decision::Raise(6));
        let unheard = members(&[("n2", Some(7)), ("n3", None)]);
        assert!(matches!(
            decide(6, 7, &unheard),
            Decision::Wait { member, .. } if member == "n3"
        ));
        // Never lowered: an older member after a raise is said to be behind (it is
        // refused at every message).
        assert!(matches!(
            decide(7, 7, &one_old),
            Decision::Behind { member, .. } if member == "n3"
        ));
    }
}

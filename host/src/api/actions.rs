//! Operator actions turned into cluster commands: pure, checked, explained.
//!
//! [`command_for`] reads the replicated state and the proposer's clock as arguments and
//! returns the [`Command`] to propose, or a message saying why the action makes no sense
//! now. It refuses what `apply` would accept but not carry out the way the operator
//! meant: a move to a node that placement would never choose (no session, draining,
//! without the winning plugin version or the required labels, in cooldown, already
//! holding a slot of the resource) would release the slot and then grant it elsewhere,
//! which is worse than a plain "no". [`describe`] is the sentence that tells the operator
//! what happens next, so they know what to watch for.
//!
//! Checks made here can be overtaken by later log entries (the target's session can end
//! between this check and the commit); `apply` then refuses or placement decides, and
//! `tenure status` shows the outcome. The command carries the slot's current token, so it
//! never acts on a later grant of the slot.

use crate::cluster::{Advert, Cluster, Command, Handover, Slot};

use super::AdminRequest;

/// The command that carries out `request` on `cluster` as it is now; `now_ms` is the
/// proposer's wall clock (ms since the Unix epoch), recorded in the command.
pub fn command_for(
    request: &AdminRequest,
    cluster: &Cluster,
    now_ms: u64,
) -> Result<Command, String> {
    match request {
        AdminRequest::Status
        | AdminRequest::StatusPage(_)
        | AdminRequest::Watch { .. }
        | AdminRequest::Snapshot { .. }
        | AdminRequest::Members
        | AdminRequest::Promote { .. } => Err(format!(
            "{request} is a question, not an action: it has no command"
        )),
        AdminRequest::Move { resource, slot, to } => {
            let (slot, held) = granted_slot(cluster, resource, *slot, "move")?;
            not_releasing(resource, slot, held)?;
            check_target(cluster, resource, slot, held, to, now_ms)?;
            Ok(Command::BeginHandover {
                resource: resource.clone(),
                slot,
                token: held.token,
                reason: Handover::Moved,
                to: Some(to.clone()),
                at_ms: now_ms,
            })
        }
        AdminRequest::Release { resource, slot } => {
            let (slot, held) = granted_slot(cluster, resource, *slot, "release")?;
            not_releasing(resource, slot, held)?;
            Ok(Command::BeginHandover {
                resource: resource.clone(),
                slot,
                token: held.token,
                reason: Handover::Released,
                to: None,
                at_ms: now_ms,
            })
        }
        AdminRequest::Drain { node } | AdminRequest::Undrain { node } => {
            member(cluster, node)?;
            Ok(Command::SetDraining {
                node: node.clone(),
                draining: matches!(request, AdminRequest::Drain { .. }),
            })
        }
        AdminRequest::Revoke {
            key,
            certificate,
            node,
            ..
        } => Ok(Command::Revoke {
            key: parse_fingerprint(key)?,
            certificate: certificate.as_deref().map(parse_fingerprint).transpose()?,
            // A certificate's node is removed if it is still a member.
            node: node.clone().filter(|n| cluster.members.contains_key(n)),
            at_ms: now_ms,
        }),
        AdminRequest::Remove { node } => {
            member(cluster, node)?;
            Ok(Command::Remove {
                node: node.clone(),
                at_ms: now_ms,
            })
        }
    }
}

/// What `command` (made by [`command_for`]) will do, for the operator; `cluster` is the
/// state before it is applied.
pub fn describe(command: &Command, cluster: &Cluster) -> String {
    match command {
        Command::BeginHandover {
            resource,
            slot,
            reason,
            to,
            ..
        } => {
            let owner = cluster
                .slot(resource, *slot)
                .map_or("its owner", |s| s.owner.as_str());
            match (reason, to) {
                (Handover::Moved, Some(to)) => format!(
                    "moving {resource}/{slot} from {owner} to {to}: {owner} stops the plugin \
                     and runs its cleanup, then {to} starts it (`tenure status` shows the \
                     handover)"
                ),
                _ => format!(
                    "releasing {resource}/{slot}: {owner} stops the plugin and runs its \
                     cleanup, then placement grants the slot again (possibly to {owner})"
                ),
            }
        }
        Command::SetDraining { node, draining } => {
            let was = cluster.members.get(node).is_some_and(|m| m.draining);
            let held = cluster.slots_of(node).count();
            match (draining, was) {
                (true, true) => format!("node {node} was already draining"),
                (true, false) => format!(
                    "draining node {node}: its {held} slot(s) move away by handover, and it \
                     gets no new ones until `tenure undrain {node}`"
                ),
                (false, false) => format!("node {node} was not draining; nothing changes"),
                (false, true) => format!(
                    "node {node} may take slots again (placement evens the counts out over time)"
                ),
            }
        }
        Command::Revoke { key, .. } if cluster.revoked.contains_key(key) => {
            format!("key {key} was already revoked")
        }
        Command::Revoke { key, node, .. } => {
            let removed = node.as_ref().map_or(String::new(), |node| {
                format!(
                    "; node {node} leaves the Raft membership, its session expires when its \
                     lease runs out and its slots move then (`tenure member remove {node}` forgets it \
                     after that)"
                )
            });
            format!(
                "revoked key {key}: every node refuses every certificate that carries it from \
                 now on and closes the connections that use one{removed}"
            )
        }
        Command::Remove { node, .. } => format!(
            "removed node {node}: it is forgotten and leaves the Raft membership; if it comes \
             back it joins again"
        ),
        other => format!("{other:?}"),
    }
}

/// A certificate fingerprint as typed: `sha256:` and 64 hex digits (upper or lower case,
/// with or without the colons `openssl x509 -fingerprint -sha256` prints), returned in
/// the form [`crate::pki::fingerprint`] makes (lower case, no colons).
pub fn parse_fingerprint(text: &str) -> Result<String, String> {
    let text = text.trim();
    let bad = |why: &str| {
        Err(format!(
            "{text:?} is not a fingerprint: {why} (expected sha256: and 64 hex digits, as \
             `tenure status` shows; or pass the certificate file instead)"
        ))
    };
    let Some(hex) = text
        .get(..7)
        .filter(|p| p.eq_ignore_ascii_case("sha256:"))
        .map(|_| &text[7..])
    else {
        return bad("it does not start with sha256:");
    };
    let hex: String = hex.chars().filter(|c| *c != ':').collect();
    if hex.len() != 64 {
        return bad(&format!("it has {} hex digits", hex.len()));
    }
    if !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return bad("it holds characters other than hex digits");
    }
    Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
}

/// The advert whose plugin runs for `resource`: placement's winner among the members
/// with a live session (highest version, then greatest digest; see
/// [`crate::placement::winning`]), so that what the operator is told matches what
/// placement does.
pub fn winning_advert(cluster: &Cluster, resource: &str) -> Option<Advert> {
    crate::placement::winning(cluster)
        .remove(resource)
        .map(|winner| winner.advert)
}

/// The granted slot an action names: `slot`, or the only granted one.
fn granted_slot<'a>(
    cluster: &'a Cluster,
    resource: &str,
    slot: Option<u32>,
    verb: &str,
) -> Result<(u32, &'a Slot), String> {
    let granted = cluster.resources.get(resource);
    let advert = winning_advert(cluster, resource);
    let advertised = cluster
        .members
        .values()
        .any(|m| m.plugins.contains_key(resource));
    if granted.is_none() && !advertised {
        let known: Vec<&str> = known_resources(cluster);
        return Err(if known.is_empty() {
            format!("unknown resource {resource:?}: the cluster has no resources")
        } else {
            format!(
                "unknown resource {resource:?}: no node has its plugin (known: {})",
                known.join(", ")
            )
        });
    }
    let Some(n) = slot else {
        let held: Vec<(&u32, &Slot)> = granted.map(|g| g.iter().collect()).unwrap_or_default();
        return match held.as_slice() {
            [(n, s)] => Ok((**n, *s)),
            [] => Err(format!(
                "{resource} has no granted slot: nothing to {verb} (`tenure status` shows why \
                 its slots are pending)"
            )),
            many => Err(format!(
                "{resource} has {} granted slots; name a slot: {}",
                many.len(),
                many.iter()
                    .map(|(n, _)| format!("{resource}/{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
    };
    if let Some(held) = granted.and_then(|g| g.get(&n)) {
        return Ok((n, held));
    }
    match advert {
        Some(a) if n >= a.tickets => Err(format!(
            "{resource} has no slot {n}: it has {} ticket(s), slots {resource}/0 to {resource}/{}",
            a.tickets,
            a.tickets.saturating_sub(1)
        )),
        _ => Err(format!(
            "{resource}/{n} is vacant (pending): there is nothing to {verb}; placement grants \
             it when a node is eligible"
        )),
    }
}

/// Refuses an action on a slot already being handed over.
fn not_releasing(resource: &str, slot: u32, held: &Slot) -> Result<(), String> {
    match &held.releasing {
        None => Ok(()),
        Some(r) => Err(format!(
            "{resource}/{slot} is already being handed over ({}{}); wait until {} has \
             released it",
            r.reason.as_str(),
            r.to.as_ref()
                .map_or(String::new(), |to| format!(" to {to}")),
            held.owner
        )),
    }
}

/// Checks that `to` is a node placement would grant `resource`/`slot` to.
fn check_target(
    cluster: &Cluster,
    resource: &str,
    slot: u32,
    held: &Slot,
    to: &str,
    now_ms: u64,
) -> Result<(), String> {
    let target = member(cluster, to)?;
    if held.owner == to {
        return Err(format!("{to} already owns {resource}/{slot}"));
    }
    if target.session.is_none() {
        return Err(format!(
            "node {to} has no live session (it is down, or has not joined yet): it cannot \
             take slots"
        ));
    }
    if target.draining {
        return Err(format!(
            "node {to} is draining and takes no slots; `tenure undrain {to}` first"
        ));
    }
    if let Some((other, _)) = cluster
        .resources
        .get(resource)
        .and_then(|g| g.iter().find(|(_, s)| s.owner == to))
    {
        return Err(format!(
            "{to} already holds {resource}/{other}: a node holds at most one slot of a resource"
        ));
    }
    let Some(has) = target.plugins.get(resource) else {
        return Err(format!(
            "node {to} does not have the plugin for {resource} in its plugins folder"
        ));
    };
    if let Some(wins) = winning_advert(cluster, resource) {
        if (&has.version, &has.digest) != (&wins.version, &wins.digest) {
            return Err(format!(
                "node {to} has {} {} ({}), but {} ({}) is the version that runs: it cannot \
                 take the slot until it has that version",
                has.plugin,
                has.version,
                short(&has.digest),
                wins.version,
                short(&wins.digest)
            ));
        }
        let missing: Vec<String> = wins
            .require
            .iter()
            .filter(|(k, v)| target.labels.get(*k) != Some(*v))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "node {to} lacks the labels {resource} requires: {}",
                missing.join(", ")
            ));
        }
    }
    if let Some(until) = cluster
        .cooldown
        .get(resource)
        .and_then(|c| c.get(to))
        .filter(|until| **until > now_ms)
    {
        return Err(format!(
            "node {to} is skipped for {resource} for another {}s, because the plugin kept \
             failing there",
            (until - now_ms).div_ceil(1000)
        ));
    }
    Ok(())
}

/// The member `node`, or a message listing the members.
fn member<'a>(cluster: &'a Cluster, node: &str) -> Result<&'a crate::cluster::Member, String> {
    cluster.members.get(node).ok_or_else(|| {
        let names: Vec<&str> = cluster.members.keys().map(String::as_str).collect();
        format!(
            "unknown node {node:?}: the members are {}",
            if names.is_empty() {
                "none yet".to_owned()
            } else {
                names.join(", ")
            }
        )
    })
}

/// Every resource some member advertises or some slot is granted for, sorted.
fn known_resources(cluster: &Cluster) -> Vec<&str> {
    let mut names: Vec<&str> = cluster
        .members
        .values()
        .flat_map(|m| m.plugins.keys())
        .chain(cluster.resources.keys())
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// A digest shortened for messages: `sha256:` and 12 hex digits.
pub(crate) fn short(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

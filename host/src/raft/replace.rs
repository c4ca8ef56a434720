//! A node that lost its disk comes back as a new member on its own (issue 24, item 2).
//!
//! A node whose Raft store is new, and whose name the cluster knows, forgot its old self
//! (`forming.rs`): it must never vote or act as that member again. The way back is the one
//! etcd operators know: the old member is removed, and the node joins as a new one, is
//! caught up as a learner, and only then votes. Before this module the node refused to
//! start and an operator did the removal by hand (`tenure member remove`). Now the node
//! asks the leader for it ([`REPLACE`], with its new store's id), and the leader does it
//! when it is safe:
//!
//! - **Only once the old member's session has ended.** While it is live, the old process
//!   may still run plugins (it may be paused or cut off rather than gone): the leader
//!   answers [`ReplaceReply::Wait`], and the node asks again. A process that is gone stops
//!   renewing, so its session ends by the ordinary rule within a TTL; a paused one stops
//!   its plugins by its own deadline before that. So the successor never runs before the
//!   predecessor's plugins can no longer execute (docs/design.md's safety argument, §5.4).
//! - **Only for a new store.** A request naming the store the cluster records for the
//!   name (`Cluster::stores`) is refused: that member did not lose its disk. So is one for
//!   a member whose store the cluster does not know (below version 7, or no session since
//!   the raise): a replica that missed the replacement would address the new node as the
//!   old member with no store named, and the new node could not tell (`service.rs`). A
//!   store the cluster retired with an earlier member of the name is refused too.
//! - **Asked again, the same answer.** A name that is neither a member nor in the Raft
//!   membership (the removal committed, but its answer was lost, or the node asked again
//!   because a replica that had not yet applied the removal still named it a member) is
//!   answered [`ReplaceReply::Removed`]: there is no old member left to remove, and the
//!   node joins as a new one.
//! - **Only the node itself.** The request's sender is the authenticated name; no member
//!   can have another replaced.
//!
//! The leader then takes the old member out as `tenure member remove` does
//! (`Shared::remove_for_good`: out of the Raft membership, then out of the members); the
//! node goes on to join (`membership.rs`). A replica that missed the removal still means
//! the old store, and the new node refuses its messages (`service.rs`). The old store is
//! retired for good (`Cluster::retired`): should the old process come back after all (it
//! was only paused or cut off), its commands are refused (`cluster/once.rs`), the leader
//! refuses its JOIN (`membership.rs`), and it learns from the voters that its name is
//! another store's, or no member's, and stops (`removed.rs`).
//!
//! A leader of an older build does not know the kind: the node then refuses to start as
//! before, saying how to do the removal by hand.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Shared;
use super::kinds::REPLACE;
use super::network::Attached;
use super::refusals::Refusal;
use super::types::Peer;
use crate::cluster::StoreId;

/// How long the leader may take to answer: the removal is a membership change and a
/// commit, retried while another change is under way (`remove_for_good`).
const ASK_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// The answer to [`REPLACE`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplaceReply {
    /// The old member is out of the cluster: the node may join as a new one.
    Removed,
    /// The receiver does not lead; `leader` is the one it knows of, if any.
    NotLeader { leader: Option<Peer> },
    /// Not now (the old member's session is live, or the removal did not commit): ask
    /// again.
    Wait(String),
    /// Never: why.
    Refused(String),
}

impl Shared {
    /// On the leader: removes the old member of `from`'s name for the node of the new
    /// store `store` (see the module doc).
    pub(crate) async fn serve_replace(
        self: &Arc<Self>,
        from: &str,
        store: StoreId,
    ) -> ReplaceReply {
        if !self.is_leader() {
            return ReplaceReply::NotLeader {
                leader: self.leader().map(|(_, p)| p),
            };
        }
        let (member, session, recorded, version, retired) = {
            let cluster = self.cluster.read().unwrap_or_else(|e| e.into_inner());
            let member = cluster.members.get(from);
            (
                member.is_some(),
                member.and_then(|m| m.session.as_ref()).map(|s| s.id),
                cluster.stores.get(from).copied(),
                cluster.version,
                cluster.is_retired(from, store),
            )
        };
        let addressed = version >= crate::version::ADDRESSED;
        if addressed && retired {
            let error = format!(
                "{from} asks to be replaced by its store {store}, which the cluster retired with an earlier member of that name"
            );
            self.refusals.record(Refusal::Forbidden, from, &error);
            return ReplaceReply::Refused(error);
        }
        // Asked again after the removal (its answer was lost, or a replica that had not
        // applied it yet still named the node a member): the old member is out already,
        // of the members and of Raft. A name that holds a Raft seat and never registered
        // (an initial member that never ran, or a joiner wiped before its registration
        // committed) is not: it falls to the refusal below.
        let seat = self.id_of(from);
        if addressed && !member && seat.is_none() {
            return ReplaceReply::Removed;
        }
        // The name's seat is this very store's (a new member that stopped before any
        // entry reached it, so its store is still new): nothing to replace; its JOIN
        // finds its seat.
        if addressed && seat == Some(super::types::member_id(from, store)) {
            return ReplaceReply::Removed;
        }
        // Only where a replica that missed the rejoin cannot take the new node for the
        // old member: its messages name the old store (`service.rs`). Elsewhere the way
        // back stays the operator's.
        if !addressed || recorded.is_none() {
            return ReplaceReply::Refused(format!(
                "the cluster does not know which store {from} ran on (its version is {version}; a store is recorded from version {} at a session's opening), so a replica that missed the replacement could take the new node for the old member: replace it by hand",
                crate::version::ADDRESSED
            ));
        }
        if recorded == Some(store) {
            let error = format!(
                "{from} asks to be replaced by its store {store}, which is the store the cluster knows for {from}: that member did not lose its disk"
            );
            self.refusals.record(Refusal::Forbidden, from, &error);
            return ReplaceReply::Refused(error);
        }
        if let Some(session) = session {
            return ReplaceReply::Wait(format!(
                "{from}'s old session {session} is live, so its old process may still run plugins; the session ends once that process has not renewed for a TTL. If another process under this name runs on purpose, stop this one"
            ));
        }
        if let Err(why) = self.remove_for_good(from).await {
            return ReplaceReply::Wait(why);
        }
        tracing::info!(
            event = crate::events::CLUSTER_MEMBERSHIP,
            peer = %from,
            store = %store,
            old_store = %recorded.map_or_else(|| "unknown".to_owned(), |s| s.to_string()),
            "replaced {from}: its old member is removed, and the node of the new store {store} joins as a new member"
        );
        ReplaceReply::Removed
    }
}

/// What asking to be replaced came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// The old member is gone: join as a new one.
    Replaced { by: String },
    /// Not now: why (each node asked, with its answer).
    Wait(String),
    /// Not this way: why. The node refuses to start, saying how to do it by hand.
    Cannot(String),
}

/// Asks the nodes `ask` (name, address) to replace this node's old member, following a
/// leader one of them names; see the module doc.
pub(crate) async fn ask(shared: &Shared, attached: &Attached, ask: &[(String, String)]) -> Asked {
    let body = match postcard::to_allocvec(&shared.store) {
        Ok(body) => body,
        Err(e) => return Asked::Cannot(format!("cannot encode the request: {e}")),
    };
    let mut ask = ask.to_vec();
    let (mut answers, mut refusals) = (Vec::new(), Vec::new());
    let mut next = 0;
    while let Some((name, addr)) = ask.get(next).cloned() {
        next += 1;
        let answer = match super::network::resolve(&addr).await {
            Ok(sock) => match tokio::time::timeout(
                ASK_WITHIN,
                attached.rpc.call(&name, sock, REPLACE, body.clone()),
            )
            .await
            {
                Ok(Ok(bytes)) => crate::rpc::decode::<ReplaceReply>(&bytes)
                    .map_err(|e| format!("unreadable answer: {e}")),
                // An answer that is an error: an older build does not know the kind.
                Ok(Err(e @ crate::rpc::RpcError::Remote { .. })) => {
                    refusals.push(format!("{name}: {e}"));
                    continue;
                }
                // Unreachable, or the connection failed: it may answer later.
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no answer in time".to_owned()),
            },
            Err(e) => Err(e),
        };
        match answer {
            Ok(ReplaceReply::Removed) => return Asked::Replaced { by: name },
            Ok(ReplaceReply::NotLeader {
                leader: Some(leader),
            }) => {
                // Asked next, unless it is on the list already (its own answer counts).
                if !ask
                    .iter()
                    .any(|(n, a)| *n == leader.name && *a == leader.addr)
                {
                    ask.insert(next, (leader.name, leader.addr));
                }
            }
            Ok(ReplaceReply::NotLeader { leader: None }) => {
                answers.push(format!("{name}: no leader yet"));
            }
            Ok(ReplaceReply::Wait(why)) => answers.push(format!("{name}: {why}")),
            Ok(ReplaceReply::Refused(why)) => refusals.push(format!("{name}: {why}")),
            Err(e) => answers.push(format!("{name}: {e}")),
        }
    }
    // Refused by every node that said anything (an older build, or a refusal): waiting
    // would not change it. Otherwise one of them may yet lead, or let the session end.
    if answers.is_empty() && !refusals.is_empty() {
        Asked::Cannot(refusals.join("; "))
    } else {
        answers.extend(refusals);
        Asked::Wait(answers.join("; "))
    }
}

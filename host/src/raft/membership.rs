//! Who is in the Raft group: joining, address updates, promotion to voter.
//!
//! **Joining.** A node added after the bootstrap asks any member (kind JOIN, with its
//! name and advertised address). A member that is not the leader answers with the leader
//! it knows, and the joining node asks that one. The leader:
//! - adds an unknown node as a *learner* (it receives the log but does not vote) and
//!   waits, up to `join_catch_up`, for it to catch up;
//! - updates the address of a known node that comes back from elsewhere (openraft's
//!   `SetNodes`; the name is authenticated by TLS and every message is signed, so a wrong
//!   address cannot make another node count as this one);
//! - does nothing for a known node at the same address (joining is idempotent, so a
//!   restarted node can always ask).
//!
//! Only the joining node itself may ask to join under its name, and it asks the leader
//! itself: no member forwards a join, so no member can add or move another node.
//!
//! **Stores.** A JOIN carries the joiner's store (after the `Peer` that 0.2.0 reads) and,
//! from this build on, the member id it asks for (`joiner_id`). Any node answers a store
//! the cluster retired `JoinReply::Removed`, naming the leader (the joiner asks it too,
//! and stops on the word of most of the nodes it asked). The leader decides every join
//! holding the lock that `remove_for_good` holds through its two steps (which run in a
//! task of their own), on a replica that has applied the entry holding the name's seat or,
//! failing that, after a leadership round that waits until it has applied all that was
//! committed; it admits neither a retired store nor a store other than the one recorded
//! for the name (retryable: that member's removal may still be on its way). A node whose
//! own replica applies the removal of its store stops (`removed.rs`); every node refuses
//! an addressed Raft message whose sender names a retired store (`service.rs`).
//!
//! **Voters.** Which members vote is the leader's upkeep (`autopilot.rs`: promote caught-up
//! learners up to the target, replace or shed voters that are gone). The JOIN handler
//! takes a step at once; a housekeeping task takes one every [`HOUSEKEEPING`] on
//! whichever node leads, so a learner that was slow to catch up, or whose leader changed,
//! is promoted anyway. The same task reports a fatal Raft error (openraft's own line is
//! filtered, see `LOG_FILTER`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::ChangeMembers;
use openraft::error::RaftError as OpenRaftError;
use tokio::sync::watch;

use super::Shared;
use super::error::ControlError;
use super::kinds::{JOIN, JoinReply};
use super::network::resolve;
use super::refusals::Refusal;
use super::types::{NodeId, Peer, node_id};
use crate::cluster::{Command, Outcome, Proposal, Response, StoreId};

/// How often the housekeeping task tends the voters.
const HOUSEKEEPING: Duration = Duration::from_millis(200);

/// The JOIN request of node `me` of store `store` and member id `id`: the [`Peer`] every
/// build reads, then the store, so that the leader can refuse a store a member of the
/// name was removed with, and the member id (`types.rs`). A 0.2.0 leader reads the `Peer`
/// alone (postcard reads no further than its type). So `Peer` can gain no field of its
/// own: it would be read as this tail.
pub(crate) fn join_request(
    me: &Peer,
    store: StoreId,
    id: NodeId,
) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_allocvec(&(me, (store, id)))
}

/// See [`super::Control::join`].
pub(crate) async fn join(shared: &Shared, via: &[(String, String)]) -> Result<(), ControlError> {
    let attached = shared.attached()?;
    let started = Instant::now();
    let deadline = started + shared.options.join_timeout;
    let body = join_request(&attached.me, shared.store, shared.me)
        .map_err(|e| ControlError::Options(format!("cannot encode the join request: {e}")))?;
    let mut wait = Duration::from_millis(100);
    // Whether the wait was said (once: the answers are the same each round).
    let mut told = false;
    loop {
        let mut failures = Vec::new();
        // The nodes that answered that this store was removed, with what they said.
        let mut removed: BTreeMap<String, String> = BTreeMap::new();
        // The members given, then each leader one of them names (once each).
        let mut ask: Vec<(String, String)> = via
            .iter()
            .filter(|(name, _)| *name != shared.name)
            .cloned()
            .collect();
        let mut next = 0;
        while let Some((name, addr)) = ask.get(next).cloned() {
            next += 1;
            // The id a `Joined` answer says it seated this node under, if it says.
            let mut seat = None;
            let outcome = match resolve(&addr).await {
                Ok(sock) => match attached.rpc.call(&name, sock, JOIN, body.clone()).await {
                    Ok(bytes) => crate::rpc::decode_with_tail::<JoinReply, NodeId>(&bytes)
                        .map(|(reply, seated)| {
                            seat = seated;
                            reply
                        })
                        .map_err(|e| format!("unreadable answer: {e}")),
                    Err(e) => Err(e.to_string()),
                },
                Err(e) => Err(e),
            };
            match outcome {
                Ok(JoinReply::Joined { voter }) => {
                    own_seat(shared, seat)?;
                    tracing::info!(event = crate::events::CLUSTER_JOINED, via = %name, voter, me = %attached.me, "joined the raft group");
                    return Ok(());
                }
                // Asked next, at the address the cluster knows it by: the list given may
                // name the leader at an address it no longer has (it was replaced), and
                // only that address reaches it.
                Ok(JoinReply::NotLeader {
                    leader: Some(leader),
                }) if leader.name != shared.name
                    && !ask
                        .iter()
                        .any(|(asked, addr)| *asked == leader.name && *addr == leader.addr) =>
                {
                    ask.insert(next, (leader.name, leader.addr));
                }
                Ok(JoinReply::NotLeader { leader }) => failures.push(format!(
                    "{name}: not the leader (leader: {})",
                    leader.map_or("unknown".into(), |p| p.to_string())
                )),
                Ok(JoinReply::Refused(why)) => failures.push(format!("{name}: {why}")),
                Ok(JoinReply::Removed { why, leader }) => {
                    failures.push(format!("{name}: {why}"));
                    removed.insert(name, why);
                    // The leader it names is asked too: one node's word is not enough.
                    if let Some(leader) = leader
                        && leader.name != shared.name
                        && !ask.iter().any(|(asked, _)| *asked == leader.name)
                    {
                        ask.push((leader.name, leader.addr));
                    }
                }
                Err(e) => failures.push(format!("{name}: {e}")),
            }
        }
        // A store removed for good, in the word of most of the nodes asked: asking again
        // would not change it. One node's word is not enough (any member may lie, and
        // must not make another node exit).
        let asked: std::collections::BTreeSet<&str> =
            ask.iter().map(|(name, _)| name.as_str()).collect();
        if removed.len() * 2 > asked.len()
            && let Some((_, why)) = removed.into_iter().next()
        {
            return Err(ControlError::Removed {
                name: shared.name.clone(),
                why,
            });
        }
        if via.iter().all(|(name, _)| *name == shared.name) {
            failures.push("no other member to ask".into());
        }
        let now = Instant::now();
        if now + wait > deadline {
            return Err(ControlError::Join {
                waited: now - started,
                failures,
            });
        }
        if !told {
            told = true;
            tracing::info!(
                event = crate::events::CLUSTER_WAITING,
                failures = %failures.join("; "),
                "not a member yet: no node asked admitted this node ({}); asking again until {}s have passed",
                failures.join("; "),
                shared.options.join_timeout.as_secs()
            );
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(1));
    }
}

/// The member id a JOIN of node `name` asks for: the one its tail names (`joiner`: its
/// store and id), or its name's from a 0.2.0 node, which sends no tail.
pub(crate) fn joiner_id(name: &str, joiner: Option<(StoreId, NodeId)>) -> NodeId {
    joiner.map_or_else(|| node_id(name), |(_, id)| id)
}

/// After a JOIN was answered `Joined`, seating this node's name under `seated` (the
/// answer's tail; `None` from a 0.2.0 leader, which reads no id in a JOIN and seats every
/// name under its name's id): the seat must be this node's own member id, or it would hold
/// no seat of its own and never vote or campaign. It stops, saying so.
fn own_seat(shared: &Shared, seated: Option<NodeId>) -> Result<(), ControlError> {
    let seated = seated.unwrap_or_else(|| node_id(&shared.name));
    if seated == shared.me {
        return Ok(());
    }
    Err(ControlError::Removed {
        name: shared.name.clone(),
        why: format!(
            "the cluster seated {} under member id {seated}, not this node's own {} (a leader of a build before tenure/{v} takes every id to be a name's): remove that member (`tenure member remove {}`), and start this node again once every member runs tenure/{v}",
            shared.name,
            shared.me,
            shared.name,
            v = crate::version::ADDRESSED
        ),
    })
}

impl Shared {
    /// Answers a JOIN for `peer` sent by node `from` from its store, as member id
    /// (`joiner`: `None` from a 0.2.0 node, whose id is its name's): on the leader, admits
    /// it; elsewhere, names the leader to ask.
    pub(crate) async fn serve_join(
        self: &Arc<Self>,
        from: &str,
        peer: Peer,
        joiner: Option<(StoreId, NodeId)>,
    ) -> JoinReply {
        let store = joiner.map(|(store, _)| store);
        let id = joiner_id(&peer.name, joiner);
        if from != peer.name {
            let error = format!(
                "{from} may not ask for {} to join: only a node itself may",
                peer.name
            );
            self.refusals.record(Refusal::JoinForAnother, from, &error);
            return JoinReply::Refused(error);
        }
        if let Err(e) = crate::pki::validate_name(&peer.name) {
            return JoinReply::Refused(e.to_string());
        }
        if let Err(e) = resolve(&peer.addr).await {
            return JoinReply::Refused(format!("{}'s address: {e}", peer.name));
        }
        // Any replica refuses a store that a member of the name was removed with, and
        // names the leader, so that the joiner asks it too. That record only grows, so a
        // replica that lags can fail to say so but never says so wrongly; and the joiner
        // stops only on the word of most of the nodes it asked.
        if let Some(removed) = self.refuse_removed(from, &peer.name, store) {
            return removed;
        }
        if !self.is_leader() {
            return JoinReply::NotLeader {
                leader: self.leader().map(|(_, p)| p),
            };
        }
        // Every join is decided under the lock `remove_for_good` holds through its two
        // steps, so none lands in the middle of a removal, and on a replica that holds
        // every removal committed before it: a removal of this name's seat comes before
        // any later seat of the name in the log (it is committed under the lock too), so
        // a replica that has applied the entry that gave the name its seat has applied
        // that removal. Otherwise a leadership round waits until the replica has applied
        // everything committed (a removal committed under an earlier leader, not yet
        // applied here, is never missed). The round is skipped only in the first case: a
        // voter that moved may be the quorum's missing answer.
        let _one = self.renaming.clone().lock_owned().await;
        if !self.seat_settled(&peer)
            && let Err(e) = self.ensure_leadership().await
        {
            return match e {
                ControlError::NotLeader(_) => JoinReply::NotLeader {
                    leader: self.leader().map(|(_, p)| p),
                },
                other => JoinReply::Refused(other.to_string()),
            };
        }
        if let Some(removed) = self.refuse_removed(from, &peer.name, store) {
            return removed;
        }
        if let Some(why) = store.and_then(|store| self.another_store(&peer.name, store)) {
            return JoinReply::Refused(why);
        }
        if let Some(why) = self.another_id(&peer.name, store, id) {
            return JoinReply::Refused(why);
        }
        self.admit(peer, id).await
    }

    /// Why node `name` of store `store` may not join as member `id`, if it may not: the
    /// id is not the name's, nor of the name and the store; or it is of a store made by
    /// this build while the cluster may still have 0.2.0 members, which take a member's
    /// id to be its name's; or the name holds a seat under another id (a store the
    /// cluster recorded no store for: the old member is removed first).
    fn another_id(&self, name: &str, store: Option<StoreId>, id: NodeId) -> Option<String> {
        if !super::types::may_be(name, store, id) {
            let error = format!(
                "{name} asks to join as member id {id}, which is not {name}'s (of its name, or of its name and store {})",
                store.map_or_else(|| "unnamed".to_owned(), |s| s.to_string())
            );
            self.refusals.record(Refusal::JoinForAnother, name, &error);
            return Some(error);
        }
        let version = self
            .cluster_version
            .load(std::sync::atomic::Ordering::SeqCst);
        if id != node_id(name) && version < crate::version::ADDRESSED {
            return Some(format!(
                "this cluster runs at version {version}, and {name} joins as a new member, with a member id of its name and store, which members of builds before tenure/{v} do not know: it is admitted once the cluster's version is {v}, which the leader raises once every member is reachable and speaks tenure/{v} (`tenure status` shows the version and the members; a member that is gone for good holds it back until it is removed with `tenure member remove`)",
                v = crate::version::ADDRESSED
            ));
        }
        match self.id_of(name) {
            Some(seat) if seat != id => Some(format!(
                "{name} holds a seat as member id {seat}, and this process (store {}) is member id {id}: another data dir of {name}'s. If the old one is gone for good, remove its member (`tenure member remove {name}` with an operator certificate), then start this one again",
                store.map_or_else(|| "unnamed".to_owned(), |s| s.to_string())
            )),
            _ => None,
        }
    }

    /// The answer to `from`'s JOIN as `name` from store `store`, if a member of `name` was
    /// removed with that store: counted, and naming the leader this node knows of.
    fn refuse_removed(&self, from: &str, name: &str, store: Option<StoreId>) -> Option<JoinReply> {
        let why = self.removed_with(name, store?)?;
        self.refusals.record(Refusal::RemovedStore, from, &why);
        Some(JoinReply::Removed {
            why,
            leader: self.leader().map(|(_, p)| p),
        })
    }

    /// Whether `peer`'s name holds a seat in the leader's Raft membership, and its
    /// replica has applied the membership entry that holds it (see `serve_join`).
    fn seat_settled(&self, peer: &Peer) -> bool {
        let metrics = self.metrics.borrow();
        let membership = &metrics.membership_config;
        super::types::id_of(membership.membership(), &peer.name).is_some()
            && metrics.last_applied.map(|id| id.index) >= membership.log_id().map(|id| id.index)
    }

    /// What a process of store `store` is told, if a member of `name` was removed with
    /// that store (`Cluster::retired`): admitted, it would be a member whose every
    /// numbered command is refused (`cluster/once.rs`).
    pub(crate) fn removed_with(&self, name: &str, store: StoreId) -> Option<String> {
        let cluster = self.cluster.read().unwrap_or_else(|e| e.into_inner());
        cluster
            .is_retired(name, store)
            .then(|| cluster.retired_why(name, store))
    }

    /// Why a process of store `store` may not join as `name` now, if the name is a
    /// member whose recorded store is another (`Cluster::stores`): admitting it would
    /// point the name's Raft address at a process that refuses every message meant for
    /// the member (`service.rs`). Not for good: that member may yet be replaced.
    fn another_store(&self, name: &str, store: StoreId) -> Option<String> {
        let cluster = self.cluster.read().unwrap_or_else(|e| e.into_inner());
        match cluster.stores.get(name) {
            Some(recorded) if *recorded != store => Some(format!(
                "{name} is a member on another data dir (store {recorded}); this process's data dir is store {store}: two processes with one name on different data dirs. Stop one of them. If the other is gone for good and this machine is to take its place, stop the other process, empty this data dir and start this one again: it is admitted as {name}'s new member once the old member's session has ended"
            )),
            _ => None,
        }
    }

    /// On the leader: makes `peer` member `id` at its address, then tries to promote.
    async fn admit(&self, peer: Peer, id: NodeId) -> JoinReply {
        let known = self
            .metrics
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .cloned();
        let bound = self.options.join_catch_up;
        let changed = match known {
            Some(known) if known == peer => Ok(()),
            Some(known) => {
                tracing::info!(event = crate::events::CLUSTER_MEMBERSHIP, from = %known, to = %peer, "raft member changed address");
                let change = ChangeMembers::SetNodes(BTreeMap::from([(id, peer.clone())]));
                match tokio::time::timeout(bound, self.raft.change_membership(change, true)).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(e),
                    Err(_) => {
                        return JoinReply::Refused(
                            "the address change did not commit in time".into(),
                        );
                    }
                }
            }
            None => {
                tracing::info!(event = crate::events::CLUSTER_MEMBERSHIP, peer = %peer, "adding a raft learner");
                // Waits until the learner has caught up; past the bound it is a learner
                // anyway (the membership entry committed first) and is promoted later.
                match tokio::time::timeout(bound, self.raft.add_learner(id, peer.clone(), true))
                    .await
                {
                    Ok(Ok(_)) | Err(_) => Ok(()),
                    Ok(Err(e)) => Err(e),
                }
            }
        };
        if let Err(e) = changed {
            return match e {
                OpenRaftError::APIError(openraft::error::ClientWriteError::ForwardToLeader(f)) => {
                    JoinReply::NotLeader {
                        leader: f.leader_node,
                    }
                }
                other => JoinReply::Refused(other.to_string()),
            };
        }
        self.tend().await;
        JoinReply::Joined {
            voter: self.is_voter(id),
        }
    }

    fn is_voter(&self, id: NodeId) -> bool {
        self.metrics
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == id)
    }
}

impl Shared {
    /// On the leader: takes node `name` out of the Raft membership (voter or learner);
    /// nothing if it is not in it. The remaining learners are promoted as usual if the
    /// voters fall below the target.
    pub(crate) async fn remove_member(&self, name: &str) -> Result<(), ControlError> {
        let Some(id) = self.id_of(name) else {
            return Ok(());
        };
        let (voter, member) = {
            let metrics = self.metrics.borrow();
            let membership = metrics.membership_config.membership();
            (
                membership.voter_ids().any(|v| v == id),
                membership.get_node(&id).is_some(),
            )
        };
        let change = match (voter, member) {
            (true, _) => ChangeMembers::RemoveVoters([id].into()),
            (false, true) => ChangeMembers::RemoveNodes([id].into()),
            (false, false) => return Ok(()),
        };
        match self.change_voters(change, false).await {
            Ok(()) => {
                tracing::info!(event = crate::events::CLUSTER_MEMBERSHIP, peer = %name, "removed a raft member");
                Ok(())
            }
            Err(e) => Err(ControlError::NotLeader(format!("removing {name}: {e}"))),
        }
    }
}

/// How long [`Shared::remove_for_good`] retries the Raft removal while another
/// membership change is under way.
const REMOVE_WITHIN: Duration = Duration::from_secs(5);

impl Shared {
    /// On the leader: takes member `name` out of the cluster for good (`tenure member
    /// remove`, and a node that lost its disk: `replace.rs`). First out of the Raft
    /// membership, then out of the replicated members (`Command::Remove`, which forgets
    /// its store: `Cluster::stores`). In this order a replica that has applied the second
    /// holds the first in its log, so it never again sends the name anything as a voter.
    /// In the other order, a replica between the two would still count the old member as
    /// a voter, with no store to name, and a node that rejoined under the name would
    /// answer for it. Refused while the member has a live session (its plugins may still
    /// run). A session can still open between that check and the Raft removal (the node
    /// was a member until then), and `Command::Remove` is then refused: the node is put
    /// back as a learner, or it would hold a session with no replica that follows.
    ///
    /// No join is decided between the two steps (`serve_join` takes the same lock), and
    /// the steps run in a task of their own: a caller that
    /// gives up (a request's handler is dropped at the transport's request timeout) does
    /// not leave the member out of Raft but still a member, with the lock free. A leader
    /// that loses its leadership between the steps does: the next `member remove` or
    /// replacement finishes the removal.
    pub(crate) async fn remove_for_good(self: &Arc<Self>, name: &str) -> Result<(), String> {
        let one = self.renaming.clone().lock_owned().await;
        let (shared, name) = (self.clone(), name.to_owned());
        tokio::spawn(async move {
            let removed = shared.remove_now(&name).await;
            drop(one);
            // Said here too: the caller may have given up.
            if let Err(why) = &removed {
                tracing::warn!(event = crate::events::CLUSTER_MEMBERSHIP, peer = %name, error = %why, "removing {name} did not complete: {why}");
            }
            removed
        })
        .await
        .map_err(|e| format!("the removal stopped: {e}"))?
    }

    /// [`Shared::remove_for_good`]'s two steps.
    async fn remove_now(&self, name: &str) -> Result<(), String> {
        let (member, session) = {
            let cluster = self.cluster.read().unwrap_or_else(|e| e.into_inner());
            let member = cluster.members.get(name);
            (
                member.is_some(),
                member.and_then(|m| m.session.as_ref()).map(|s| s.id),
            )
        };
        if let Some(session) = session {
            return Err(format!(
                "{name} has a session ({session}): it may still be running plugins; stop it \
                 (or revoke its certificate) and remove it once its session has expired"
            ));
        }
        let seat = {
            let metrics = self.metrics.borrow();
            let membership = metrics.membership_config.membership();
            super::types::id_of(membership, name)
                .and_then(|id| Some((id, membership.get_node(&id)?.clone())))
        };
        let deadline = Instant::now() + REMOVE_WITHIN;
        while let Err(e) = self.remove_member(name).await {
            if Instant::now() >= deadline || !self.is_leader() {
                return Err(format!("{name} is still in the Raft membership: {e}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !member {
            return Ok(());
        }
        let remove = Command::Remove {
            node: name.to_owned(),
            at_ms: crate::envelope::unix_ms(std::time::SystemTime::now()),
        };
        match self.propose_here(Proposal::One(remove)).await {
            Ok(Outcome::One(Response::Done)) => Ok(()),
            Ok(Outcome::One(Response::Refused(why))) => {
                if let Some((id, peer)) = seat {
                    // Bounded: the lock is held meanwhile.
                    let bound = self.options.join_catch_up;
                    match tokio::time::timeout(bound, self.raft.add_learner(id, peer, false)).await
                    {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => {
                            return Err(format!(
                                "{why}; and {name} could not be put back as a learner: {e}"
                            ));
                        }
                        Err(_) => {
                            return Err(format!(
                                "{why}; and putting {name} back as a learner did not commit within {bound:?}"
                            ));
                        }
                    }
                    tracing::info!(event = crate::events::CLUSTER_MEMBERSHIP, peer = %name, "put {name} back as a learner: it opened a session while it was being removed");
                }
                Err(why)
            }
            Ok(Outcome::One(Response::Forbidden(why))) => Err(why),
            Ok(other) => Err(format!("the removal was answered {other:?}")),
            Err(e) => Err(format!(
                "{name} is out of the Raft membership, but its removal from the members did not commit: {e}"
            )),
        }
    }
}

/// The background task: tends the voters while this node leads, and reports a fatal
/// Raft error once. Ends when `stop` turns true.
pub(crate) async fn housekeeping(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut reported = false;
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            _ = tokio::time::sleep(HOUSEKEEPING) => {}
        }
        if !reported && let Err(fatal) = &shared.metrics.borrow().running_state {
            reported = true;
            tracing::error!(event = crate::events::CONTROL_ERROR, error = %fatal, "raft stopped on a fatal error");
        }
        shared.tend().await;
    }
}

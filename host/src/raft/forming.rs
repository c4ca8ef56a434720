//! A node whose Raft store is new takes no part in Raft until it knows it is not a voter
//! that forgot.
//!
//! Raft's safety rests on voters that never forget: a vote once given in a term, and an
//! entry once acknowledged, must survive every restart. A node whose data dir was lost
//! (a replaced disk, a new volume, a wiped dir) and that starts again under the same name
//! with the same config has forgotten both. Were it to answer as its old self, a stale
//! node could win an election with its vote and commit over entries the cluster had
//! committed (seen: a counter went back from 18 to 7). So a node that opens a **new**
//! store (no vote, no log, no snapshot) refuses every vote request, append and snapshot
//! until it has decided what it is, by asking the nodes it was configured with
//! ([`STORE_INFO`]):
//!
//! - If any of them has this node's name among the cluster's members (the node has run
//!   in this cluster before: every node registers itself with a committed `Join` when it
//!   starts), this node forgot. It never answers as that member: it asks the leader to
//!   remove the old member once that member's session has ended, and then joins as a new
//!   one (`replace.rs`), whether it was given `peers` or `join`. Where the leader cannot
//!   (a leader of an older build), it refuses to start, saying what to do by hand.
//!   Where members of the formed cluster disagree (some know it, others no longer: its
//!   removal has not reached every replica yet), it asks again until they agree.
//! - With `peers` (the initial members): once a **majority** of the initial members (this
//!   node counted) have answered, none knows the node as a member, and every peer that
//!   already formed the cluster lists it among the initial voters, it forms the cluster
//!   (openraft's initialize with the same set as every other initial member). A peer that
//!   formed a cluster without this node means it is not an initial member of that cluster:
//!   it is told to use `join`. Without a majority of answers it waits: it never forms a
//!   cluster on its own word. Why a majority is enough: the `Join` that registered this
//!   node was committed by a majority, and any majority that answers contains one of its
//!   nodes; a majority is also what forming needs anyway (an initial member that is down
//!   does not hold the others back, as with etcd's initial cluster).
//! - Initial members given different `peers`: an answer of a node that has not formed a
//!   cluster names the initial members it was given, and, while no node asked has
//!   formed a cluster, a node given other names refuses to start, naming both lists
//!   (etcd's initial-cluster check). So the check holds between initial members that
//!   start together; a node that starts after the others formed is judged by whether
//!   their cluster lists it, as above. A fresh node that has not been given its list yet
//!   (or a 0.2.0 node, which never says it) counts as silent toward the majority.
//! - Answers of two clusters (their ids differ, `cluster/identity.rs`): the list names
//!   nodes of more than one cluster, and the node refuses to start, naming each.
//! - With `join`: once one member of a formed cluster has answered and none knows it (in
//!   the replicated members, or in the Raft membership: a member whose removal did not
//!   reach the Raft membership is still its old self), it asks to join; the leader adds it
//!   as a learner and replicates to it. Answers of nodes that have not formed a cluster
//!   themselves do not count: they cannot know it.
//!
//! A node whose store is not new (a restart) skips all this: its vote and log are on disk.
//!
//! Known gap: between a node's first start and the commit of its `Join` (normally well
//! under a second), the cluster does not yet list it, so a wipe in that window goes
//! unnoticed; etcd's "already bootstrapped" check (a member's published attributes) has
//! the same window. Once the node has rejoined, messages meant for its old self name the
//! old store and are refused (`service.rs`). Where the wiped node is seen (its name holds
//! a Raft seat but never registered), the leader does not replace it on its own
//! (`replace.rs`): the node refuses to start, saying how to remove the old member by hand.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Shared;
use super::error::ControlError;
use super::kinds::STORE_INFO;
use super::network::Attached;
use super::types::Peer;
use crate::cluster::{ClusterId, StoreId};

/// How often a node waiting for its peers asks again.
const ASK_AGAIN: Duration = Duration::from_millis(250);
/// How long one question may take.
pub(crate) const ASK_TIMEOUT: Duration = Duration::from_secs(1);

/// The answer to [`STORE_INFO`]: what the answering node's replica says of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreInfo {
    /// The answering node belongs to a formed cluster (its Raft membership is not empty).
    pub formed: bool,
    /// The names in that cluster's Raft membership (voters and learners).
    pub raft_members: Vec<String>,
    /// The names of the cluster's members as its replicated state knows them: every
    /// node that ever registered (and was not removed).
    pub members: Vec<String>,
    /// The cluster's id, once the answering replica has one (`cluster/identity.rs`).
    pub cluster: Option<ClusterId>,
    /// The store the answering replica records for the asker's name
    /// (`Cluster::stores`), if any. Not in this struct's encoding: it follows it on the
    /// wire (the answer is the pair, from this build on), so a 0.2.0 node reads the
    /// struct alone, and an answer of a 0.2.0 node reads as `None`. A process whose
    /// name is listed with another store is not that member (`removed.rs`).
    #[serde(skip)]
    pub yours: Option<StoreId>,
    /// The cluster removed a member of the asker's name with its store recorded
    /// (`Cluster::retired`): a node of that name whose store is new may join as a new
    /// member, even with `peers`. After the struct on the wire, as [`StoreInfo::yours`].
    #[serde(skip)]
    pub yours_removed: bool,
    /// The names of the initial members the answering node was started with (its
    /// `peers`, sorted), while it has not formed or joined a cluster; empty otherwise.
    /// After the struct on the wire, as [`StoreInfo::yours`].
    #[serde(skip)]
    pub peers: Vec<String>,
}

/// What follows [`StoreInfo`] in an answer from this build on: what the answering
/// replica says of the asker's name. A 0.2.0 node reads the struct alone; so `StoreInfo`
/// can gain no field on the wire of its own: it would be read as this tail.
#[derive(Serialize, Deserialize)]
pub(crate) struct AboutYou {
    pub(crate) recorded: Option<StoreId>,
    pub(crate) removed: bool,
    /// [`StoreInfo::peers`].
    pub(crate) peers: Vec<String>,
}

/// Whether this node is still deciding, and so refuses Raft's messages.
pub(crate) fn refuses_raft(shared: &Shared) -> Option<String> {
    shared.forming.load(Ordering::SeqCst).then(|| {
        format!(
            "{} has a new Raft store and has not yet formed or joined the cluster: it takes part in no election and accepts no log until then",
            shared.name
        )
    })
}

impl Shared {
    /// This node's answer to [`STORE_INFO`] asked by node `from`.
    pub(crate) fn store_info(&self, from: &str) -> StoreInfo {
        let raft_members: Vec<String> = {
            let metrics = self.metrics.borrow();
            metrics
                .membership_config
                .membership()
                .nodes()
                .map(|(_, peer)| peer.name.clone())
                .collect()
        };
        let (members, yours, yours_removed) = {
            let cluster = self.cluster.read().unwrap_or_else(|e| e.into_inner());
            (
                cluster.members.keys().cloned().collect(),
                cluster.stores.get(from).copied(),
                cluster.retired.contains_key(from),
            )
        };
        let formed = !raft_members.is_empty() && !self.forming.load(Ordering::SeqCst);
        let peers = match self.initial_peers.get() {
            Some(peers) if !formed => peers.clone(),
            _ => Vec::new(),
        };
        StoreInfo {
            formed,
            raft_members,
            members,
            cluster: self.cluster_id.get().copied(),
            yours,
            yours_removed,
            peers,
        }
    }
}

/// What the answers say this node may do.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Form the cluster (with `peers`) or ask to join (with `join`).
    Go,
    /// Not every node asked has answered yet.
    Wait(Vec<String>),
    /// This node ran in the cluster before and forgot: `by` know it as a member.
    Forgot { by: Vec<String> },
    /// Members of the formed cluster disagree: `knows` know this node as a member, `not`
    /// do not. A removal of it (the way back the refusal tells the operator to take) has
    /// reached some replicas and not yet the others: asked again until they agree.
    Disagree {
        knows: Vec<String>,
        not: Vec<String>,
    },
    /// The cluster formed without this node (with `peers` only): `by` say so.
    NotInitial { by: Vec<String> },
    /// The cluster formed without this node, and removed its name's old member with that
    /// member's store (`by` say both): this node, whose store is new, joins as a new
    /// member, as after a replacement. So a node whose old member was replaced, and that
    /// stopped before it had joined, still joins with its `peers` at its next start.
    Rejoin { by: Vec<String> },
    /// The nodes asked belong to more than one cluster: each id with who answered it.
    TwoClusters(BTreeMap<ClusterId, Vec<String>>),
}

/// The first node asked that has not formed a cluster and was started with other
/// initial members than `mine` (both sorted names), with its list, while no node asked
/// has formed one. Two such nodes would each form a cluster of their own list; neither
/// may form one (etcd refuses a member whose initial cluster differs, too). Once any
/// answer is of a formed cluster, the rules of [`verdict`] decide instead (a node that
/// forgot, or was removed, is not to be held back by a stale list of a fresh peer, and a
/// formed cluster must list this node).
pub(crate) fn peers_differ(
    mine: &[String],
    answers: &[(String, Option<StoreInfo>)],
) -> Option<(String, Vec<String>)> {
    if answers
        .iter()
        .any(|(_, a)| a.as_ref().is_some_and(|a| a.formed))
    {
        return None;
    }
    answers.iter().find_map(|(name, answer)| {
        let answer = answer.as_ref()?;
        (!answer.formed && !answer.peers.is_empty() && answer.peers != mine)
            .then(|| (name.clone(), answer.peers.clone()))
    })
}

/// The rule of the module doc, over the answers (`None`: no answer) of the nodes asked.
///
/// Known limit (found in review, open): the majority that lets a node with `peers` go on
/// counts this node and fresh peers (no store, their peers list given) as answers, though
/// neither can hold this node's registration (its own store is the one that was lost),
/// and a replica's members are those it has applied, not all it holds. So with initial
/// members that never started (five initial members, two never run, one wiped while two
/// others are down) the answers can make a majority that no node of the registering
/// majority is in. The sound rule counts as witnesses only formed peers that answered:
/// go on only if fewer than a majority of the initial members could have formed without
/// the fresh peers, or if enough formed peers answered to meet every such majority.
pub(crate) fn verdict(me: &str, joining: bool, answers: &[(String, Option<StoreInfo>)]) -> Verdict {
    // A config naming nodes of two clusters (staging's and production's, on one CA): no
    // answer can be trusted to say what this node is, and joining either would be a guess.
    let mut clusters: BTreeMap<ClusterId, Vec<String>> = BTreeMap::new();
    for (name, answer) in answers {
        if let Some(id) = answer.as_ref().and_then(|a| a.cluster) {
            clusters.entry(id).or_default().push(name.clone());
        }
    }
    if clusters.len() > 1 {
        return Verdict::TwoClusters(clusters);
    }
    let knows_me: Vec<String> = answers
        .iter()
        .filter(|(_, a)| {
            a.as_ref().is_some_and(|a| {
                a.members.iter().any(|m| m == me)
                    || (joining && a.formed && a.raft_members.iter().any(|m| m == me))
            })
        })
        .map(|(name, _)| name.clone())
        .collect();
    if !knows_me.is_empty() {
        let not: Vec<String> = answers
            .iter()
            .filter(|(name, a)| a.as_ref().is_some_and(|a| a.formed) && !knows_me.contains(name))
            .map(|(name, _)| name.clone())
            .collect();
        // Waiting is always safe: this node takes no part in Raft until the answers
        // agree. It never goes on while any answer knows it.
        if !not.is_empty() {
            return Verdict::Disagree {
                knows: knows_me,
                not,
            };
        }
        return Verdict::Forgot { by: knows_me };
    }
    // With `peers`, a node that has formed nothing and was given no initial members yet
    // (it has not begun to start as one) says nothing either: its list is not known, and
    // two lists must agree before either forms (`peers_differ`).
    let silent: Vec<String> = answers
        .iter()
        .filter(|(_, a)| match a {
            None => true,
            Some(a) => !joining && !a.formed && a.peers.is_empty(),
        })
        .map(|(name, _)| name.clone())
        .collect();
    if joining {
        // Waiting for a member of a formed cluster: every node that is not one.
        let unformed: Vec<String> = answers
            .iter()
            .filter(|(_, a)| !a.as_ref().is_some_and(|a| a.formed))
            .map(|(name, _)| name.clone())
            .collect();
        return if unformed.len() < answers.len() {
            Verdict::Go
        } else {
            Verdict::Wait(unformed)
        };
    }
    let without_me: Vec<String> = answers
        .iter()
        .filter(|(_, a)| {
            a.as_ref()
                .is_some_and(|a| a.formed && !a.raft_members.iter().any(|m| m == me))
        })
        .map(|(name, _)| name.clone())
        .collect();
    if !without_me.is_empty() {
        let removed = answers
            .iter()
            .filter(|(name, _)| without_me.contains(name))
            .all(|(_, a)| a.as_ref().is_some_and(|a| a.yours_removed));
        return if removed {
            Verdict::Rejoin { by: without_me }
        } else {
            Verdict::NotInitial { by: without_me }
        };
    }
    // A majority of the initial members, this node one of them.
    let (answered, members) = (answers.len() - silent.len() + 1, answers.len() + 1);
    if answered * 2 > members {
        Verdict::Go
    } else {
        Verdict::Wait(silent)
    }
}

/// Node `name` at `addr`'s answer to [`STORE_INFO`]; `None` if it gave none in time.
pub(crate) async fn ask(attached: &Attached, name: &str, addr: &str) -> Option<StoreInfo> {
    asked(attached, name, addr).await.ok()
}

/// Whether the cluster of `peers` (name, address) knows node `me`: it has the name among
/// its registered members, or removed a member of the name with its store. Then a node
/// on a new data dir is not an initial member, whatever its `peers` say, but comes back
/// as a new member, and takes a member id of its own before its Raft starts (`types.rs`,
/// `ControlOptions::new_member`). Asked through `rpc`, a transport bound for this
/// question only, by the rule [`decide`] applies later ([`verdict`]): until an answer
/// knows the node, or a majority of the initial members (this node counted) has answered
/// without knowing it. A cluster that is down as a whole is waited for, as forming waits
/// for it, so a node whose disk was replaced while its peers were away still comes back
/// as a new member once they answer, never under its old member's id. An initial member
/// that starts on a new data dir with the others hears their fresh answers
/// ([`fresh_store_info`]) and goes on at once.
pub async fn knows_me(rpc: Arc<crate::rpc::Rpc>, me: Peer, peers: &[(String, String)]) -> bool {
    let name = me.name.clone();
    let attached = Arc::new(Attached { rpc, me });
    let others: Vec<(String, String)> = peers
        .iter()
        .filter(|(peer, _)| *peer != name)
        .cloned()
        .collect();
    let mut waiting_told = false;
    loop {
        let mut asking = tokio::task::JoinSet::new();
        for (i, (peer, addr)) in others.iter().enumerate() {
            let (attached, peer, addr) = (attached.clone(), peer.clone(), addr.clone());
            asking.spawn(async move { (i, ask(&attached, &peer, &addr).await) });
        }
        let mut answers: Vec<(String, Option<StoreInfo>)> = others
            .iter()
            .map(|(peer, _)| (peer.clone(), None))
            .collect();
        // One answer that knows the node decides at once (it only ever makes the node a
        // new member). "Not known" waits for every answer of the round (or its timeout):
        // a majority that does not know the node proves nothing while a peer that holds
        // its registration may still answer (a fresh peer, or this node's own lost
        // store, counts toward the majority without being a witness: see the note on
        // `verdict`).
        let mut judged = verdict(&name, false, &answers);
        while let Some(answer) = asking.join_next().await {
            if let Ok((i, answer)) = answer {
                answers[i].1 = answer;
            }
            judged = verdict(&name, false, &answers);
            if matches!(judged, Verdict::Forgot { .. } | Verdict::Rejoin { .. }) {
                break;
            }
        }
        match judged {
            Verdict::Forgot { .. } | Verdict::Disagree { .. } | Verdict::Rejoin { .. } => {
                return true;
            }
            Verdict::Wait(silent) => {
                if !waiting_told {
                    tracing::info!(
                        event = crate::events::CLUSTER_WAITING,
                        waiting_for = %silent.join(", "),
                        "this node's data dir is new: waiting for {} to answer whether the cluster knows it, before its Raft starts (a node whose disk was replaced comes back as a new member)",
                        silent.join(", ")
                    );
                    waiting_told = true;
                }
                tokio::time::sleep(ASK_AGAIN).await;
            }
            // Forming judges these answers again and says what they mean.
            Verdict::Go | Verdict::NotInitial { .. } | Verdict::TwoClusters(_) => return false,
        }
    }
}

/// The answer to [`STORE_INFO`] of a node that has no Raft store yet and was started with
/// the initial members `peers` (names, this node's among them): it has formed nothing and
/// knows no one. Given while it asks [`knows_me`], so that initial members starting
/// together on new data dirs count each other's answers.
pub fn fresh_store_info(peers: Vec<String>) -> Vec<u8> {
    let mut peers = peers;
    peers.sort();
    peers.dedup();
    StoreInfo {
        formed: false,
        raft_members: Vec::new(),
        members: Vec::new(),
        cluster: None,
        yours: None,
        yours_removed: false,
        peers,
    }
    .encode()
    // Strings, lists and options only: postcard's encoding of them into a Vec cannot fail.
    .expect("a StoreInfo encodes")
}

/// Why a node gave no answer to [`STORE_INFO`].
enum NoAnswer {
    /// Unreachable, slow, or not understood: it may answer later.
    Silent,
    /// It refused this node (its answer was an error, or it refused the connection): it
    /// will go on refusing until an operator acts, so this is said.
    Refused(String),
}

/// As [`ask`], with why no answer came.
async fn asked(attached: &Attached, name: &str, addr: &str) -> Result<StoreInfo, NoAnswer> {
    let sock = super::network::resolve(addr)
        .await
        .map_err(|_| NoAnswer::Silent)?;
    let call = attached.rpc.call(name, sock, STORE_INFO, Vec::new());
    let bytes = match tokio::time::timeout(ASK_TIMEOUT, call).await {
        Err(_) => return Err(NoAnswer::Silent),
        Ok(Ok(bytes)) => bytes,
        Ok(Err(
            e @ (crate::rpc::RpcError::Remote { .. }
            | crate::rpc::RpcError::Transport(
                crate::transport::TransportError::RejectedByPeer { .. }
                | crate::transport::TransportError::PeerRejected { .. },
            )),
        )) => return Err(NoAnswer::Refused(e.to_string())),
        Ok(Err(_)) => return Err(NoAnswer::Silent),
    };
    let (info, about) = crate::rpc::decode_with_tail::<StoreInfo, AboutYou>(&bytes)
        .map_err(|_| NoAnswer::Silent)?;
    Ok(match about {
        Some(about) => StoreInfo {
            yours: about.recorded,
            yours_removed: about.removed,
            peers: about.peers,
            ..info
        },
        None => info,
    })
}

impl StoreInfo {
    /// The answer's bytes: the struct, then what it says of the asker ([`AboutYou`]).
    pub(crate) fn encode(&self) -> Result<Vec<u8>, postcard::Error> {
        let about = AboutYou {
            recorded: self.yours,
            removed: self.yours_removed,
            peers: self.peers.clone(),
        };
        postcard::to_allocvec(&(self, about))
    }
}

/// What [`decide`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Decided {
    /// An answer came from a node of a formed cluster: a leader may exist (`rejoin.rs`
    /// holds this node's campaign).
    pub(crate) formed: bool,
    /// This node's old member was removed for it (`replace.rs`): it joins as a new
    /// member, even if it was given `peers`.
    pub(crate) replaced: bool,
}

/// Asks `nodes` (name, address; this node left out) until the answers allow going on;
/// then lets Raft's messages in. At once, with nothing found, for a store that is not new.
pub(crate) async fn decide(
    shared: &Shared,
    nodes: &[(String, String)],
    joining: bool,
) -> Result<Decided, ControlError> {
    if !shared.forming.load(Ordering::SeqCst) {
        return Ok(Decided::default());
    }
    let mut joining = joining;
    let mut replaced = false;
    // The last answer to the replacement said, so that a wait is logged once per reason.
    let mut replace_told = String::new();
    let attached = shared.attached()?;
    let others: Vec<(String, String)> = nodes
        .iter()
        .filter(|(name, _)| *name != shared.name)
        .cloned()
        .collect();
    let mut waiting_told = false;
    let mut disagree_told = false;
    // Refusals said so far (a peer's answer that it will not talk to this node, such as
    // an older build than the cluster's version): each once, or the node would wait in
    // silence for ever.
    let mut refusals_told = std::collections::BTreeSet::new();
    let formed;
    loop {
        let mut answers = Vec::with_capacity(others.len());
        for (name, addr) in &others {
            let answer = match asked(&attached, name, addr).await {
                Ok(answer) => Some(answer),
                Err(NoAnswer::Refused(why)) => {
                    if refusals_told.insert(why.clone()) {
                        tracing::warn!(
                            event = crate::events::CLUSTER_WAITING,
                            peer = %name,
                            error = %why,
                            "{name} refuses this node: {why}"
                        );
                    }
                    None
                }
                Err(NoAnswer::Silent) => None,
            };
            answers.push((name.clone(), answer));
        }
        if !joining
            && let Some(mine) = shared.initial_peers.get()
            && let Some((by, theirs)) = peers_differ(mine, &answers)
        {
            return Err(ControlError::PeersDiffer {
                name: shared.name.clone(),
                mine: mine.clone(),
                by,
                theirs,
            });
        }
        match verdict(&shared.name, joining, &answers) {
            Verdict::Go => {
                formed = answers
                    .iter()
                    .any(|(_, a)| a.as_ref().is_some_and(|a| a.formed));
                break;
            }
            Verdict::Wait(silent) => {
                if !waiting_told {
                    tracing::info!(
                        event = crate::events::CLUSTER_WAITING,
                        waiting_for = %silent.join(", "),
                        "this node's Raft store is new: waiting for {} to answer before it forms or joins the cluster (it never does so on its own word)",
                        silent.join(", ")
                    );
                    waiting_told = true;
                }
                tokio::time::sleep(ASK_AGAIN).await;
            }
            Verdict::Disagree { knows, not } => {
                if !disagree_told {
                    tracing::info!(
                        event = crate::events::CLUSTER_WAITING,
                        knows = %knows.join(", "),
                        not = %not.join(", "),
                        "{} know this node as a member and {} do not (a removal of it still on its way to some replicas?): asking again until they agree",
                        knows.join(", "),
                        not.join(", ")
                    );
                    disagree_told = true;
                }
                tokio::time::sleep(ASK_AGAIN).await;
            }
            Verdict::Forgot { by } => {
                let ask: Vec<(String, String)> = others
                    .iter()
                    .filter(|(name, _)| by.contains(name))
                    .cloned()
                    .collect();
                match super::replace::ask(shared, &attached, &ask).await {
                    super::replace::Asked::Replaced { by } => {
                        // Asked again because a replica that has not applied the
                        // removal yet still names this node a member: it catches up.
                        if replaced {
                            tokio::time::sleep(ASK_AGAIN).await;
                            continue;
                        }
                        tracing::info!(
                            event = crate::events::CLUSTER_WAITING,
                            via = %by,
                            store = %shared.store,
                            "this node's old member was removed (its data dir was lost): it joins as a new member"
                        );
                        replaced = true;
                        joining = true;
                    }
                    super::replace::Asked::Wait(why) => {
                        if why != replace_told {
                            tracing::info!(
                                event = crate::events::CLUSTER_WAITING,
                                knows = %by.join(", "),
                                answers = %why,
                                "{} know this node as a member, and its Raft store is new (its data dir was lost): waiting for the leader to remove its old member, so that it joins as a new one: {why}",
                                by.join(", ")
                            );
                            replace_told = why;
                        }
                        tokio::time::sleep(ASK_AGAIN).await;
                    }
                    super::replace::Asked::Cannot(why) => {
                        return Err(ControlError::Forgot {
                            name: shared.name.clone(),
                            by,
                            store: super::db::path(&shared.options.data_dir),
                            why,
                        });
                    }
                }
            }
            Verdict::TwoClusters(clusters) => {
                return Err(ControlError::TwoClusters {
                    name: shared.name.clone(),
                    clusters: clusters
                        .iter()
                        .map(|(id, by)| format!("cluster {id} ({})", by.join(", ")))
                        .collect(),
                });
            }
            Verdict::Rejoin { by } => {
                tracing::info!(
                    event = crate::events::CLUSTER_WAITING,
                    by = %by.join(", "),
                    store = %shared.store,
                    "{} removed this node's old member with its store (it was replaced, or removed by an operator), and this node's store is new: it joins as a new member",
                    by.join(", ")
                );
                replaced = true;
                joining = true;
            }
            Verdict::NotInitial { by } => {
                return Err(ControlError::NotInitial {
                    name: shared.name.clone(),
                    by,
                });
            }
        }
    }
    shared.forming.store(false, Ordering::SeqCst);
    Ok(Decided { formed, replaced })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(formed: bool, raft: &[&str], members: &[&str]) -> Option<StoreInfo> {
        Some(StoreInfo {
            formed,
            raft_members: raft.iter().map(|s| s.to_string()).collect(),
            members: members.iter().map(|s| s.to_string()).collect(),
            cluster: None,
            yours: None,
            yours_removed: false,
            peers: Vec::new(),
        })
    }

    fn answers(list: Vec<(&str, Option<StoreInfo>)>) -> Vec<(String, Option<StoreInfo>)> {
        list.into_iter().map(|(n, a)| (n.to_string(), a)).collect()
    }

    #[test]
    fn a_node_the_cluster_knows_forgot_whoever_else_is_silent() {
        let a = answers(vec![
            ("n1", None),
            ("n3", info(true, &["n1", "n2", "n3"], &["n1", "n2", "n3"])),
        ]);
        assert_eq!(
            verdict("n2", false, &a),
            Verdict::Forgot {
                by: vec!["n3".into()]
            }
        );
        assert!(matches!(verdict("n2", true, &a), Verdict::Forgot { .. }));
    }

    /// A `join` (or `peers`) list naming nodes of two clusters is refused with each id
    /// and who answered it, even where one of them knows this node (issue 24, item 1).
    #[test]
    fn nodes_of_two_clusters_are_refused_naming_each_cluster() {
        let of = |id: u8, members: &[&str]| {
            let mut answer = info(true, members, members);
            if let Some(a) = answer.as_mut() {
                a.cluster = Some(ClusterId::from_bytes([id; 16]));
            }
            answer
        };
        let a = answers(vec![
            ("n1", of(1, &["n1", "n2"])),
            ("n2", of(1, &["n1", "n2"])),
            ("n5", of(2, &["n5", "n9"])),
            ("n6", None),
        ]);
        for joining in [true, false] {
            assert_eq!(
                verdict("n9", joining, &a),
                Verdict::TwoClusters(BTreeMap::from([
                    (
                        ClusterId::from_bytes([1; 16]),
                        vec!["n1".into(), "n2".into()]
                    ),
                    (ClusterId::from_bytes([2; 16]), vec!["n5".into()]),
                ]))
            );
        }
        // One cluster's answers, with or without an id yet (an upgraded replica): go on.
        let a = answers(vec![
            ("n1", of(1, &["n1"])),
            ("n2", info(true, &["n1"], &["n1"])),
        ]);
        assert_eq!(verdict("n9", true, &a), Verdict::Go);
    }

    #[test]
    fn initial_members_form_only_once_a_majority_answered() {
        // A fresh initial member says which initial members it was given.
        let fresh = info(false, &[], &[]).map(|a| StoreInfo {
            peers: vec!["n1".into(), "n2".into(), "n3".into()],
            ..a
        });
        let a = answers(vec![("n1", None), ("n3", None)]);
        assert_eq!(
            verdict("n2", false, &a),
            Verdict::Wait(vec!["n1".into(), "n3".into()])
        );
        // One that was given none yet (it has not begun to start as one) says nothing.
        let a = answers(vec![("n1", info(false, &[], &[])), ("n3", None)]);
        assert_eq!(
            verdict("n2", false, &a),
            Verdict::Wait(vec!["n1".into(), "n3".into()])
        );
        let a = answers(vec![("n1", fresh.clone()), ("n3", None)]);
        assert_eq!(verdict("n2", false, &a), Verdict::Go);
        let five = answers(vec![
            ("n1", fresh.clone()),
            ("n3", None),
            ("n4", None),
            ("n5", None),
        ]);
        assert!(matches!(verdict("n2", false, &five), Verdict::Wait(_)));
        let a = answers(vec![("n1", fresh.clone()), ("n3", fresh)]);
        assert_eq!(verdict("n2", false, &a), Verdict::Go);
        // A peer that formed first, with this node among its initial voters, before this
        // node registered: the ordinary start of a cluster.
        let a = answers(vec![
            ("n1", info(true, &["n1", "n2", "n3"], &["n1"])),
            ("n3", info(false, &[], &[])),
        ]);
        assert_eq!(verdict("n2", false, &a), Verdict::Go);
    }

    /// Right after `tenure member remove`, a replica that has not applied the removal yet
    /// still knows the node while the others no longer do: the node waits until they
    /// agree, rather than refusing to start as a node that forgot.
    #[test]
    fn replicas_that_disagree_whether_this_node_is_a_member_are_asked_again() {
        let removed = info(true, &["n1", "n3"], &["n1", "n3"]);
        let lagging = info(true, &["n1", "n2", "n3"], &["n1", "n2", "n3"]);
        let a = answers(vec![("n1", removed.clone()), ("n3", lagging.clone())]);
        for joining in [true, false] {
            assert_eq!(
                verdict("n2", joining, &a),
                Verdict::Disagree {
                    knows: vec!["n3".into()],
                    not: vec!["n1".into()]
                }
            );
        }
        let a = answers(vec![("n1", removed.clone()), ("n3", removed)]);
        assert_eq!(verdict("n2", true, &a), Verdict::Go);
        let a = answers(vec![("n1", lagging.clone()), ("n3", lagging)]);
        assert!(matches!(verdict("n2", true, &a), Verdict::Forgot { .. }));
    }

    #[test]
    fn a_cluster_formed_without_this_node_is_joined_not_formed() {
        let a = answers(vec![("n1", info(true, &["n1", "n3"], &["n1", "n3"]))]);
        assert!(matches!(
            verdict("n2", false, &a),
            Verdict::NotInitial { .. }
        ));
        assert_eq!(verdict("n2", true, &a), Verdict::Go);
    }

    /// A node whose old member was removed with its store (replaced, or removed by an
    /// operator) and whose store is new rejoins with `peers`, as after a replacement:
    /// every answer of the cluster formed without it must say so.
    #[test]
    fn a_node_whose_old_member_the_cluster_removed_rejoins_with_its_peers() {
        let removed = info(true, &["n1", "n3"], &["n1", "n3"]).map(|a| StoreInfo {
            yours_removed: true,
            peers: Vec::new(),
            ..a
        });
        let a = answers(vec![("n1", removed.clone()), ("n3", removed.clone())]);
        assert_eq!(
            verdict("n2", false, &a),
            Verdict::Rejoin {
                by: vec!["n1".into(), "n3".into()]
            }
        );
        // One answer that does not say so (a 0.2.0 node, or a replica that has not
        // applied the removal's record): not initial, as before.
        let a = answers(vec![
            ("n1", removed),
            ("n3", info(true, &["n1", "n3"], &["n1", "n3"])),
        ]);
        assert!(matches!(
            verdict("n2", false, &a),
            Verdict::NotInitial { .. }
        ));
    }

    /// Initial members given other names are found in their answers; a formed node, or
    /// one given no list yet, is not compared.
    #[test]
    fn initial_members_given_other_peers_are_found() {
        let mine: Vec<String> = vec!["n1".into(), "n2".into(), "n3".into()];
        let with = |formed: bool, peers: &[&str]| {
            info(formed, &[], &[]).map(|a| StoreInfo {
                peers: peers.iter().map(|p| p.to_string()).collect(),
                ..a
            })
        };
        let a = answers(vec![
            ("n2", with(false, &["n1", "n2", "n3"])),
            ("n3", with(false, &["n1", "n3", "n4"])),
        ]);
        assert_eq!(
            peers_differ(&mine, &a),
            Some(("n3".into(), vec!["n1".into(), "n3".into(), "n4".into()]))
        );
        let a = answers(vec![
            ("n2", with(false, &[])),
            ("n3", with(true, &["n1", "n3", "n4"])),
            ("n4", None),
        ]);
        assert_eq!(peers_differ(&mine, &a), None);
        // With a formed cluster among the answers, a fresh peer's list is not held
        // against this node (it may have forgotten, or been removed): `verdict` decides.
        let a = answers(vec![
            ("n2", with(false, &["n1", "n2", "n4"])),
            ("n3", with(true, &[])),
        ]);
        assert_eq!(peers_differ(&mine, &a), None);
    }

    /// The tails of this build's STORE_INFO answer and JOIN request are read by 0.2.0 as
    /// the message it knows, and their absence in 0.2.0's reads as nothing said.
    #[test]
    fn the_tails_are_ignored_by_0_2_0_and_absent_from_it() {
        let info = StoreInfo {
            yours: Some(StoreId::from_bytes([7; 16])),
            yours_removed: true,
            peers: Vec::new(),
            ..info(true, &["n1"], &["n1"]).unwrap()
        };
        let bytes = info.encode().unwrap();
        let old_reader: StoreInfo = crate::rpc::decode(&bytes).unwrap();
        assert_eq!(
            old_reader,
            StoreInfo {
                yours: None,
                yours_removed: false,
                peers: Vec::new(),
                ..info.clone()
            }
        );
        let (head, tail) = crate::rpc::decode_with_tail::<StoreInfo, AboutYou>(&bytes).unwrap();
        let tail = tail.expect("the tail");
        assert_eq!(
            (head, tail.recorded, tail.removed),
            (old_reader.clone(), info.yours, true)
        );
        let old_bytes = postcard::to_allocvec(&old_reader).unwrap();
        let (_, none) = crate::rpc::decode_with_tail::<StoreInfo, AboutYou>(&old_bytes).unwrap();
        assert!(none.is_none());

        let me = super::super::types::Peer::new("n3", "10.0.0.3:7400");
        let store = StoreId::from_bytes([8; 16]);
        let id = super::super::types::member_id("n3", store);
        let join = super::super::membership::join_request(&me, store, id).unwrap();
        let peer: super::super::types::Peer = crate::rpc::decode(&join).unwrap();
        assert_eq!(peer, me);
        type Tail = (StoreId, super::super::types::NodeId);
        let read = crate::rpc::decode_with_tail::<super::super::types::Peer, Tail>(&join);
        assert_eq!(read.unwrap(), (me.clone(), Some((store, id))));
        let old_join = postcard::to_allocvec(&me).unwrap();
        let read = crate::rpc::decode_with_tail::<super::super::types::Peer, Tail>(&old_join);
        assert_eq!(read.unwrap(), (me, None));
    }

    #[test]
    fn a_joining_node_needs_one_answer_of_a_formed_cluster() {
        let a = answers(vec![("n1", None), ("n3", None)]);
        assert!(matches!(verdict("n4", true, &a), Verdict::Wait(_)));
        // A node that is itself forming cannot know this one.
        let a = answers(vec![("n1", info(false, &[], &[])), ("n3", None)]);
        assert!(matches!(verdict("n4", true, &a), Verdict::Wait(_)));
        // Still in the Raft membership (its removal did not reach it): its old self.
        let a = answers(vec![("n1", info(true, &["n1", "n3", "n4"], &["n1", "n3"]))]);
        assert!(matches!(verdict("n4", true, &a), Verdict::Forgot { .. }));
        let a = answers(vec![
            ("n1", None),
            ("n3", info(true, &["n1", "n3"], &["n1", "n3"])),
        ]);
        assert_eq!(verdict("n4", true, &a), Verdict::Go);
    }
}

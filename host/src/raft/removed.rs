//! A node taken out of the cluster learns so, and stops.
//!
//! `tenure member remove` takes a node that is gone for good out of the Raft membership and
//! out of the replicated members. When such a node comes back anyway (its machine was only
//! down, or someone starts it again), it holds its old store: a membership that still lists
//! it, and no leader reaches it, since a leader replicates only to its members. Before this
//! module it campaigned for ever, refused by every member (seen at term 175), and nothing
//! it logged said why.
//!
//! So a node that has heard no leader for [`QUIET`] asks the other voters of the membership
//! it holds what their cluster says ([`super::kinds::STORE_INFO`], the question a new store
//! asks before it forms or joins: `forming.rs`). When more than half of those voters answer
//! that their cluster lists it neither in its Raft membership nor among its members, and no
//! answer lists it, it was removed: [`super::Control::failed`] resolves with what happened
//! and how to rejoin, and the node stops its plugins and exits non-zero, as on any failure
//! of its control plane. It changes nothing on disk.
//!
//! The name alone does not make a node the member: after a replacement (`replace.rs`) the
//! name is a member again, from a new store, while the old process may come back (it was
//! paused, or its machine only cut off). So each answer also says which store the
//! cluster records for the asker's name ([`forming::StoreInfo::yours`]), and an answer
//! that records another store counts as one that does not list this node.
//!
//! A node also reads its own replica each time it looks: if it applied the removal of a
//! member of its name with its own store (`Cluster::retired`), it stops at once. That is
//! how a process admitted while its removal was under way learns it.
//!
//! Why more than half: every member holds a valid certificate and may lie; one member must
//! not be able to make another node exit. Raft trusts a majority of its voters anyway. A
//! node that is merely cut off gets no answers and goes on waiting; a voter the leader's
//! upkeep stepped down is still a learner, and listed (`autopilot.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Shared;
use super::forming;
use crate::cluster::StoreId;

/// How long a node hears no leader before it asks whether it is still a member.
const QUIET: Duration = Duration::from_secs(5);
/// How often it looks.
const EVERY: Duration = Duration::from_secs(1);
/// The bound on one voter's answer, its address's resolution included.
const ASK_WITHIN: Duration = Duration::from_secs(2);

/// What the answers of the voters asked say: `Some(why)` if this node, of store `store`,
/// was removed. `voters` is how many voters the node's own membership has, itself
/// counted if it is one (it counts as a voter that lists itself: in a group of two, the
/// other one's word is never enough). An answer that lists the name with another store
/// (`StoreInfo::yours`) lists another process: the name's member was removed with this
/// store and the name rejoined from a new one (`replace.rs`).
pub(crate) fn verdict(
    me: &str,
    store: StoreId,
    voters: usize,
    answers: &[(String, Option<forming::StoreInfo>)],
) -> Option<String> {
    let formed: Vec<(&str, &forming::StoreInfo)> = answers
        .iter()
        .filter_map(|(name, a)| a.as_ref().filter(|a| a.formed).map(|a| (name.as_str(), a)))
        .collect();
    let names_me = |a: &forming::StoreInfo| {
        a.raft_members.iter().any(|m| m == me) || a.members.iter().any(|m| m == me)
    };
    let another = |a: &forming::StoreInfo| a.yours.is_some_and(|yours| yours != store);
    if formed.iter().any(|(_, a)| names_me(a) && !another(a)) {
        return None;
    }
    let without: Vec<&str> = formed.iter().map(|(name, _)| *name).collect();
    if without.len() * 2 <= voters {
        return None;
    }
    let replaced = formed.iter().any(|(_, a)| another(a));
    Some(if replaced {
        format!(
            "this node ({me}, store {store}) was removed from the cluster, and {me} is now a member on another data dir: {} record another store for {me} (this machine was taken for one that lost its disk, or a second process runs under this name). This data dir cannot be used again. Stop this process; if this machine is to be {me}, stop the other one first, then empty this data dir and start again",
            without.join(", ")
        )
    } else {
        format!(
            "this node ({me}) was removed from the cluster: {} no longer list it as a member (an operator ran `tenure member remove {me}`), so no leader will reach it again. Its data dir holds the old cluster's log and cannot be used to rejoin. To bring it back: stop it, empty its data dir, and start it with `join = [\"NAME@HOST:PORT\", ...]` (the current members) instead of `peers`; it joins as a new member",
            without.join(", ")
        )
    })
}

/// The background task: while no leader is heard, asks whether this node was removed,
/// and says so in `shared.removed`. Ends when `stop` turns true or the verdict is given.
pub(crate) async fn watch_membership(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut appends = shared.appends.subscribe();
    let mut heard_at = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            _ = appends.changed() => heard_at = tokio::time::Instant::now(),
            _ = tokio::time::sleep(EVERY) => {}
        }
        // Its own replica's word first: it applied the removal of its own store (it was
        // admitted while that removal was under way, or a leader's replica lagged). Its
        // commands are all refused from then on, so it must not stay (were it a voter,
        // or to lead, nothing it proposed would commit).
        if let Some(why) = shared.removed_with(&shared.name, shared.store) {
            shared.removed.send_replace(Some(why));
            return;
        }
        if shared.is_leader() || shared.forming.load(std::sync::atomic::Ordering::SeqCst) {
            heard_at = tokio::time::Instant::now();
        }
        if heard_at.elapsed() < QUIET {
            continue;
        }
        let Ok(attached) = shared.attached() else {
            continue;
        };
        let (others, voters) = {
            let metrics = shared.metrics.borrow();
            let membership = metrics.membership_config.membership();
            let others: Vec<(String, String)> = membership
                .voter_ids()
                .filter(|id| *id != shared.me)
                .filter_map(|id| membership.get_node(&id))
                .map(|peer| (peer.name.clone(), peer.addr.clone()))
                .collect();
            (others, membership.voter_ids().count())
        };
        if others.is_empty() {
            continue;
        }
        // All at once, and never holding up a shutdown.
        let mut asks = tokio::task::JoinSet::new();
        for (name, addr) in others {
            let attached = attached.clone();
            asks.spawn(async move {
                let ask = forming::ask(&attached, &name, &addr);
                let answer = tokio::time::timeout(ASK_WITHIN, ask).await.ok().flatten();
                (name, answer)
            });
        }
        let answers = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            answers = asks.join_all() => answers,
        };
        if let Some(why) = verdict(&shared.name, shared.store, voters, &answers) {
            shared.removed.send_replace(Some(why));
            return;
        }
        // Ask again only after another quiet spell.
        heard_at = tokio::time::Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use forming::StoreInfo;

    fn info(raft: &[&str], members: &[&str]) -> Option<StoreInfo> {
        Some(StoreInfo {
            formed: true,
            raft_members: raft.iter().map(|s| s.to_string()).collect(),
            members: members.iter().map(|s| s.to_string()).collect(),
            cluster: None,
            yours: None,
            yours_removed: false,
            peers: Vec::new(),
        })
    }

    /// This node's store.
    const MINE: StoreId = StoreId::from_bytes([3; 16]);

    /// n1, n2 and this node, n3.
    const VOTERS: usize = 3;

    #[test]
    fn a_majority_of_the_voters_must_say_the_node_is_gone() {
        let gone = info(&["n1", "n2"], &["n1", "n2"]);
        let both = vec![("n1".into(), gone.clone()), ("n2".into(), gone.clone())];
        let why = verdict("n3", MINE, VOTERS, &both).expect("removed");
        assert!(
            why.contains("n1, n2 no longer list it")
                && why.contains("`tenure member remove n3`")
                && why.contains("join"),
            "{why}"
        );
        // One voter's word is not enough (it may lie, or be alone in an old cluster).
        let one = vec![("n1".into(), gone.clone()), ("n2".into(), None)];
        assert_eq!(verdict("n3", MINE, VOTERS, &one), None);
        // Nor in a group of two voters, this node one of them.
        assert_eq!(verdict("n3", MINE, 2, &one[..1]), None);
        // A learner (not a voter itself) of two voters: both must say so.
        assert!(verdict("n3", MINE, 2, &both).is_some());
    }

    #[test]
    fn any_answer_that_lists_the_node_keeps_it() {
        let gone = info(&["n1", "n2"], &["n1", "n2"]);
        // A learner (stepped down by the leader's upkeep) is listed in the Raft membership.
        let learner = info(&["n1", "n2", "n3"], &["n1", "n2", "n3"]);
        let answers = vec![("n1".into(), gone.clone()), ("n2".into(), learner)];
        assert_eq!(verdict("n3", MINE, VOTERS, &answers), None);
        // Still among the replicated members (taken out of Raft only, as by a revocation).
        let member = info(&["n1", "n2"], &["n1", "n2", "n3"]);
        let answers = vec![("n1".into(), gone.clone()), ("n2".into(), member)];
        assert_eq!(verdict("n3", MINE, VOTERS, &answers), None);
        // Unformed answers say nothing.
        let unformed = Some(StoreInfo {
            formed: false,
            raft_members: vec![],
            members: vec![],
            cluster: None,
            yours: None,
            yours_removed: false,
            peers: Vec::new(),
        });
        let answers = vec![("n1".into(), gone), ("n2".into(), unformed)];
        assert_eq!(verdict("n3", MINE, VOTERS, &answers), None);
    }

    /// The name listed with another store is another process: this one was removed with
    /// its store and the name rejoined from a new one (`replace.rs`).
    #[test]
    fn a_name_listed_with_another_store_is_another_member() {
        let other = StoreId::from_bytes([9; 16]);
        let with = |yours: Option<StoreId>| {
            info(&["n1", "n2", "n3"], &["n1", "n2", "n3"])
                .map(|a| forming::StoreInfo { yours, ..a })
        };
        let replaced = vec![
            ("n1".into(), with(Some(other))),
            ("n2".into(), with(Some(other))),
        ];
        let why = verdict("n3", MINE, VOTERS, &replaced).expect("removed");
        assert!(
            why.contains("n3 is now a member on another data dir")
                && why.contains("empty this data dir"),
            "{why}"
        );
        // Its own store, or none recorded (a 0.2.0 answer, or no session yet): listed.
        for yours in [Some(MINE), None] {
            let answers = vec![("n1".into(), with(Some(other))), ("n2".into(), with(yours))];
            assert_eq!(verdict("n3", MINE, VOTERS, &answers), None, "{yours:?}");
        }
        // One voter's word is still not enough.
        let one = vec![("n1".into(), with(Some(other))), ("n2".into(), None)];
        assert_eq!(verdict("n3", MINE, VOTERS, &one), None);
    }
}

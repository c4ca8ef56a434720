//! Voters that follow the cluster: how many members vote, and what happens to a voter
//! that is gone.
//!
//! A Raft group survives the loss of a minority of its voters, and no more. With the
//! voters fixed at three, a five-node cluster survived one lost voter, not two, and a
//! voter that died for good stayed a voter: the cluster was one failure from a full stop
//! until an operator stepped in. So the leader, every housekeeping round, takes at most
//! one step ([`plan`]), in this order (like Consul's autopilot with dead-server cleanup):
//!
//! 1. **Replace a voter that is gone.** A voter this leader has not reached for
//!    `replace_voter_after` (default 3 minutes: far past any restart or pause a lease
//!    survives) is swapped for a caught-up learner that answers, in one membership
//!    change.
//! 2. **Or shrink.** With no such learner, the voters shrink to the largest odd number of
//!    the voters that remain, never below three: five voters with two gone become the
//!    three that remain, and five with one gone become three (the gone one and the most
//!    lagging of the others step down). An even number of voters tolerates no more
//!    failures than the odd number below it, and a gone voter left in place counts
//!    against every quorum. A group whose remaining voters are not a majority cannot
//!    commit any change, so it is left alone; three voters never shrink.
//! 3. **Grow.** While the voters are fewer than the target, a caught-up learner that
//!    answers is promoted, the first by name. The target is the configured `voters` (1,
//!    3, 5 or 7), or by default the largest odd number up to the members that are not
//!    gone, at most five: a cluster grows back to five voters as nodes join, or as gone
//!    ones come back.
//!
//! A voter that steps down stays a learner (openraft's `retain`): when it comes back it
//! catches up and may be promoted again; it never needs an operator to rejoin. Only
//! `tenure member remove` takes a member out for good.
//!
//! **Why this is safe.** Every step is one of openraft's joint-consensus membership
//! changes: it commits only with a majority of the old voters and of the new ones, so
//! no step can make two leaders possible, and a step that cannot reach those majorities
//! does not commit. A learner is promoted only once it holds the log up to
//! [`LAG_THRESHOLD`] entries behind the leader's last, so a new voter does not leave the
//! group short of a quorum of up-to-date voters. "Gone" is what this leader saw: its
//! Raft messages to the voter have failed for `replace_voter_after` without a single
//! answer at the transport (a refusal, or an error answer, is an answer; a peer whose
//! certificate no longer verifies does not answer). The clock starts at the first
//! failure, but never before this node began to lead in its term: an outage a node
//! recorded while it was a candidate long ago says nothing of now, so leader changes
//! only delay a step. A partitioned voter that is replaced is not harmed: it comes back
//! as a learner.
//!
//! **Half-done changes.** A membership change is two log entries (the joint step, then
//! the new voters alone), and openraft proposes the second from the caller of the
//! first. Each change therefore runs in a task of its own ([`Shared::change_voters`]),
//! so a caller that stops waiting does not cut it short; a leader that loses leadership
//! between the two leaves the joint step in the log, and the next leader, finding it
//! committed, finishes it ([`Step::Finish`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use openraft::ChangeMembers;
use serde::{Deserialize, Serialize};

use super::types::NodeId;
use super::{LAG_THRESHOLD, Shared};

/// The fewest voters the leader shrinks to.
const FLOOR: usize = 3;
/// The largest default number of voters.
const DEFAULT_MOST: usize = 5;

/// One member as the leader sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    pub id: NodeId,
    pub name: String,
    /// How long the leader's messages to it have failed; `None` while it answers.
    pub down_for: Option<Duration>,
    /// Its last answer came back (a learner must answer to be promoted).
    pub up: bool,
    /// The log index it holds, as the leader's replication knows it.
    pub matched: u64,
}

/// One step of the upkeep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Learner `0` becomes a voter.
    Promote(String),
    /// Voter `out` steps down for learner `with`.
    Replace { out: String, with: String },
    /// These voters step down.
    Shrink(Vec<String>),
    /// A joint membership that committed but whose second step never came (the leader
    /// that began it lost leadership or stopped): the voters become its new half (these
    /// ids).
    Finish(BTreeSet<NodeId>),
}

/// What the leader knows when it plans a step.
pub(crate) struct View<'a> {
    pub me: NodeId,
    pub voters: &'a [Seen],
    pub learners: &'a [Seen],
    /// The leader's last log index.
    pub last: u64,
    /// The configured number of voters, if any.
    pub configured: Option<usize>,
    pub replace_after: Duration,
}

impl View<'_> {
    fn gone(&self, member: &Seen) -> bool {
        member.id != self.me && member.down_for.is_some_and(|d| d >= self.replace_after)
    }

    /// How many members are not gone.
    fn present(&self) -> usize {
        self.voters
            .iter()
            .chain(self.learners)
            .filter(|m| !self.gone(m))
            .count()
    }

    /// The learners that may become voters, first by name.
    fn ready(&self) -> Vec<&Seen> {
        let mut ready: Vec<&Seen> = self
            .learners
            .iter()
            .filter(|l| l.up && l.matched + LAG_THRESHOLD >= self.last)
            .collect();
        ready.sort_by(|a, b| a.name.cmp(&b.name));
        ready
    }
}

/// The number of voters the leader aims for: `configured`, or the largest odd number up
/// to `present` (the members that are not gone), at most five, at least one.
pub(crate) fn target(configured: Option<usize>, present: usize) -> usize {
    configured.unwrap_or_else(|| largest_odd(present.clamp(1, DEFAULT_MOST)))
}

fn largest_odd(n: usize) -> usize {
    if n.is_multiple_of(2) { n - 1 } else { n }
}

/// The one step to take now, if any (see the module doc).
pub(crate) fn plan(view: &View<'_>) -> Option<Step> {
    let gone: Vec<&Seen> = view.voters.iter().filter(|v| view.gone(v)).collect();
    let ready = view.ready();
    if let Some(out) = gone.first() {
        if let Some(with) = ready.first() {
            return Some(Step::Replace {
                out: out.name.clone(),
                with: with.name.clone(),
            });
        }
        let remain = view.voters.len() - gone.len();
        if remain * 2 <= view.voters.len() || remain < FLOOR || view.voters.len() <= FLOOR {
            return None;
        }
        // Not below the target either, or a voter shed now would be promoted back.
        let keep = remain.min(largest_odd(remain).max(target(view.configured, view.present())));
        // The gone ones, then of the others (never this leader) those that do not answer,
        // then the most lagging.
        let mut others: Vec<&Seen> = view
            .voters
            .iter()
            .filter(|v| !view.gone(v) && v.id != view.me)
            .collect();
        others.sort_by(|a, b| {
            (a.up, a.matched)
                .cmp(&(b.up, b.matched))
                .then_with(|| b.name.cmp(&a.name))
        });
        let mut out: Vec<String> = gone.iter().map(|v| v.name.clone()).collect();
        out.extend(others.iter().take(remain - keep).map(|v| v.name.clone()));
        return Some(Step::Shrink(out));
    }
    if view.voters.len() < target(view.configured, view.present()) {
        return ready.first().map(|l| Step::Promote(l.name.clone()));
    }
    None
}

impl Shared {
    /// On the leader: takes the step [`plan`] gives, if any, and says whether one was
    /// committed. Nothing during a recovery's hold (a voter added then could lead
    /// without the hold: `recover.rs`) or while a membership change is under way.
    pub(crate) async fn tend(&self) -> bool {
        if self.hold.load(std::sync::atomic::Ordering::SeqCst) {
            return false;
        }
        let Some((step, voters)) = self.next_step() else {
            return false;
        };
        let (change, why) = match &step {
            Step::Finish(ids) => (
                Some(ChangeMembers::ReplaceAllVoters(ids.clone())),
                "finished a membership change left half done".to_string(),
            ),
            Step::Promote(name) => (
                self.voters_with(&voters, &[], &[name]),
                "promoted to voter: fewer voters than the target".to_string(),
            ),
            Step::Replace { out, with } => (
                self.voters_with(&voters, &[out], &[with]),
                format!(
                    "{out} stepped down for {with}: unreachable for over {}",
                    humantime::format_duration(self.options.replace_voter_after)
                ),
            ),
            Step::Shrink(out) => (
                self.voters_with(&voters, &out.iter().collect::<Vec<_>>(), &[]),
                format!(
                    "voters shrank to {}: {} unreachable for over {} and no learner to replace them",
                    voters.len() - out.len(),
                    out.join(", "),
                    humantime::format_duration(self.options.replace_voter_after)
                ),
            ),
        };
        let Some(change) = change else {
            return false;
        };
        let names: Vec<String> = match &step {
            Step::Promote(name) => vec![name.clone()],
            Step::Replace { out, with } => vec![out.clone(), with.clone()],
            Step::Shrink(out) => out.clone(),
            Step::Finish(_) => Vec::new(),
        };
        // The note goes in before the change commits, so `member list` never shows the
        // new voters without it; it is taken back if the change fails.
        let before = self.note(&names, Some(&why));
        match self.change_voters(change, true).await {
            Ok(()) => {
                tracing::info!(event = crate::events::CLUSTER_MEMBERSHIP, "{why}");
                true
            }
            Err(e) => {
                self.restore_notes(before);
                tracing::debug!(event = crate::events::CONTROL_ERROR, step = ?step, error = %e, "voter change not possible now");
                false
            }
        }
    }

    /// Sets the `member list` note of `names` to `why`; returns what they had.
    fn note(&self, names: &[String], why: Option<&str>) -> Vec<(String, Option<String>)> {
        let mut notes = self.replaced.lock().unwrap_or_else(|e| e.into_inner());
        names
            .iter()
            .map(|name| {
                let old = match why {
                    Some(why) => notes.insert(name.clone(), why.to_owned()),
                    None => notes.remove(name),
                };
                (name.clone(), old)
            })
            .collect()
    }

    /// Puts back the notes [`Shared::note`] returned.
    fn restore_notes(&self, before: Vec<(String, Option<String>)>) {
        for (name, old) in before {
            self.note(std::slice::from_ref(&name), old.as_deref());
        }
    }

    /// Commits a membership change, waiting at most `join_catch_up`. openraft proposes a
    /// change's second (uniform) step from the caller's future, so the change runs in a
    /// task of its own: a caller that stops waiting does not leave the group in its joint
    /// step. (A leader that loses leadership in between does; the next one finishes it:
    /// [`Step::Finish`].)
    /// `retain`: voters that step down stay learners.
    pub(crate) async fn change_voters(
        &self,
        change: ChangeMembers<NodeId, super::types::Peer>,
        retain: bool,
    ) -> Result<(), String> {
        let raft = self.raft.clone();
        let task = tokio::spawn(async move { raft.change_membership(change, retain).await });
        let bound = self.options.join_catch_up;
        match tokio::time::timeout(bound, task).await {
            Ok(Ok(Ok(_))) => Ok(()),
            Ok(Ok(Err(e))) => Err(e.to_string()),
            Ok(Err(e)) => Err(format!("the membership change's task failed: {e}")),
            Err(_) => Err(format!(
                "the membership change did not commit within {bound:?}"
            )),
        }
    }

    /// How long this node has led in its current term, as its own clock saw it start
    /// (zero when it does not lead). A peer's outage counts from then at the earliest:
    /// the links are kept across terms, and a follower sends no heartbeats, so an outage
    /// it recorded while campaigning long ago says nothing of now.
    fn leading_for(&self, metrics: &super::types::Metrics, now: Instant) -> Duration {
        let mut leading = self.leading.lock().unwrap_or_else(|e| e.into_inner());
        if !self.leads(metrics) {
            *leading = None;
            return Duration::ZERO;
        }
        let term = metrics.current_term;
        match *leading {
            Some((t, since)) if t == term => now.saturating_duration_since(since),
            _ => {
                *leading = Some((term, now));
                Duration::ZERO
            }
        }
    }

    /// The step to take and the current voters, or `None` when this node does not lead,
    /// a change is under way, or nothing is to be done.
    fn next_step(&self) -> Option<(Step, Vec<Seen>)> {
        let metrics = self.metrics.borrow();
        if !self.leads(&metrics) {
            return None;
        }
        let now = Instant::now();
        let leading_for = self.leading_for(&metrics, now);
        let membership = metrics.membership_config.membership();
        let joint = membership.get_joint_config();
        if joint.len() > 1 {
            // Under way, unless it committed and its second step never came.
            let at = metrics.membership_config.log_id().map(|id| id.index);
            let applied = metrics.last_applied.map(|id| id.index);
            if at.is_none() || at > applied {
                return None;
            }
            let ids = joint.last()?.clone();
            return Some((Step::Finish(ids), Vec::new()));
        }
        let replication = metrics.replication.as_ref()?;
        let last = metrics.last_log_index.unwrap_or(0);
        let links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let seen = |id: NodeId| -> Option<Seen> {
            let name = membership.get_node(&id)?.name.clone();
            let link = links.get(&id);
            let matched = if id == self.me {
                last
            } else {
                replication
                    .get(&id)
                    .and_then(|m| m.as_ref())
                    .map_or(0, |m| m.index)
            };
            Some(Seen {
                id,
                name,
                down_for: link
                    .and_then(|l| l.down_for(now))
                    .map(|d| d.min(leading_for)),
                up: id == self.me || link.is_some_and(|l| l.is_up()),
                matched,
            })
        };
        let voters: Vec<Seen> = membership.voter_ids().filter_map(seen).collect();
        let learners: Vec<Seen> = membership.learner_ids().filter_map(seen).collect();
        let step = plan(&View {
            me: self.me,
            voters: &voters,
            learners: &learners,
            last,
            configured: self.options.voters,
            replace_after: self.options.replace_voter_after,
        })?;
        Some((step, voters))
    }

    /// The change that makes the voters `voters` without `out` and with `add` (names).
    fn voters_with(
        &self,
        voters: &[Seen],
        out: &[&String],
        add: &[&String],
    ) -> Option<ChangeMembers<NodeId, super::types::Peer>> {
        let metrics = self.metrics.borrow();
        let membership = metrics.membership_config.membership();
        let id_of = |name: &String| {
            membership
                .nodes()
                .find(|(_, peer)| &peer.name == name)
                .map(|(id, _)| *id)
        };
        let mut ids: BTreeSet<NodeId> = voters
            .iter()
            .filter(|v| !out.contains(&&v.name))
            .map(|v| v.id)
            .collect();
        for name in add {
            ids.insert(id_of(name)?);
        }
        Some(ChangeMembers::ReplaceAllVoters(ids))
    }
}

/// The Raft members as the leader sees them: `tenure member list`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberList {
    /// The leader, which answers.
    pub leader: String,
    pub term: u64,
    /// The leader's last log index.
    pub last_index: u64,
    /// How many voters the leader aims for now.
    pub target: usize,
    /// Voters first, then learners, each by name.
    pub members: Vec<MemberRow>,
}

/// One member in a [`MemberList`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRow {
    pub name: String,
    /// Its Raft member id.
    pub id: u64,
    pub addr: String,
    pub voter: bool,
    /// The log index it holds, as the leader's replication knows it (none: not known
    /// yet).
    pub matched: Option<u64>,
    /// How long the leader's messages to it have failed (none: it answers).
    pub unreachable_ms: Option<u64>,
    /// The last voter change the leader made for it, and why.
    pub note: Option<String>,
}

impl Shared {
    /// On the leader: the members, their lag and reachability; `None` elsewhere.
    pub(crate) fn member_list(&self) -> Option<MemberList> {
        let metrics = self.metrics.borrow();
        if !self.leads(&metrics) {
            return None;
        }
        let membership = metrics.membership_config.membership();
        let last = metrics.last_log_index.unwrap_or(0);
        let now = Instant::now();
        let leading_for = self.leading_for(&metrics, now);
        let links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let notes = self.replaced.lock().unwrap_or_else(|e| e.into_inner());
        let mut members: Vec<MemberRow> = membership
            .nodes()
            .map(|(id, peer)| MemberRow {
                name: peer.name.clone(),
                id: *id,
                addr: peer.addr.clone(),
                voter: membership.voter_ids().any(|v| v == *id),
                matched: if *id == self.me {
                    Some(last)
                } else {
                    metrics
                        .replication
                        .as_ref()
                        .and_then(|r| r.get(id).cloned().flatten())
                        .map(|m| m.index)
                },
                unreachable_ms: links
                    .get(id)
                    .and_then(|l| l.down_for(now))
                    .map(|d| d.min(leading_for).as_millis() as u64),
                note: notes.get(&peer.name).cloned(),
            })
            .collect();
        members.sort_by(|a, b| b.voter.cmp(&a.voter).then_with(|| a.name.cmp(&b.name)));
        let present = members
            .iter()
            .filter(|m| {
                m.unreachable_ms
                    .is_none_or(|ms| Duration::from_millis(ms) < self.options.replace_voter_after)
            })
            .count();
        Some(MemberList {
            leader: self.name.clone(),
            term: metrics.current_term,
            last_index: last,
            target: target(self.options.voters, present),
            members,
        })
    }

    /// On the leader: makes learner `name` a voter now, at an operator's request; it
    /// must answer and be caught up, and the voters stay at most [`super::MAX_VOTERS`].
    pub(crate) async fn promote(&self, name: &str) -> Result<String, String> {
        if self.hold.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(
                "this node was recovered and holds its grants for a TTL after it first leads: no voter is added until then (a voter added now could lead without the hold)"
                    .into(),
            );
        }
        let change = {
            let metrics = self.metrics.borrow();
            if !self.leads(&metrics) {
                return Err("this node does not lead".into());
            }
            let membership = metrics.membership_config.membership();
            let Some((id, _)) = membership.nodes().find(|(_, p)| p.name == name) else {
                return Err(format!(
                    "{name} is not a Raft member (`tenure member list` shows them)"
                ));
            };
            let id = *id;
            if membership.voter_ids().any(|v| v == id) {
                return Ok(format!("{name} is a voter already"));
            }
            let voters = membership.voter_ids().count();
            if voters >= super::MAX_VOTERS {
                return Err(format!(
                    "the cluster has {voters} voters, the most there may be"
                ));
            }
            let last = metrics.last_log_index.unwrap_or(0);
            let matched = metrics
                .replication
                .as_ref()
                .and_then(|r| r.get(&id).cloned().flatten())
                .map_or(0, |m| m.index);
            let up = self
                .links
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&id)
                .is_some_and(|l| l.is_up());
            if !up || matched + LAG_THRESHOLD < last {
                return Err(format!(
                    "{name} is not caught up (it holds the log to {matched} of {last}{}): a voter that lags could leave the cluster without a quorum; try again once it has caught up",
                    if up { "" } else { ", and does not answer" }
                ));
            }
            ChangeMembers::AddVoterIds([id].into())
        };
        let why = "promoted to voter by an operator";
        let before = self.note(&[name.to_owned()], Some(why));
        match self.change_voters(change, true).await {
            Ok(()) => {
                tracing::info!(event = crate::events::CLUSTER_MEMBERSHIP, peer = %name, "{why}");
                Ok(format!("{name} is a voter"))
            }
            Err(e) => {
                self.restore_notes(before);
                Err(format!("promoting {name} failed: {e}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(180);

    fn member(name: &str, down_s: Option<u64>, matched: u64) -> Seen {
        Seen {
            id: super::super::types::node_id(name),
            name: name.into(),
            down_for: down_s.map(Duration::from_secs),
            up: down_s.is_none(),
            matched,
        }
    }

    fn plan_of(voters: &[Seen], learners: &[Seen], configured: Option<usize>) -> Option<Step> {
        plan(&View {
            me: voters[0].id,
            voters,
            learners,
            last: 100,
            configured,
            replace_after: AFTER,
        })
    }

    #[test]
    fn the_default_target_is_the_largest_odd_number_of_present_members_up_to_five() {
        let targets: Vec<usize> = (0..9).map(|n| target(None, n)).collect();
        assert_eq!(targets, [1, 1, 1, 3, 3, 5, 5, 5, 5]);
        assert_eq!(target(Some(7), 3), 7);
    }

    #[test]
    fn learners_are_promoted_up_to_the_target_once_caught_up_and_answering() {
        let voters = [
            member("a", None, 100),
            member("b", None, 100),
            member("c", None, 100),
        ];
        let learners = [
            member("d", None, 10),     // far behind
            member("e", Some(1), 100), // not answering
            member("f", None, 100 - LAG_THRESHOLD),
        ];
        assert_eq!(
            plan_of(&voters, &learners, None),
            Some(Step::Promote("f".into()))
        );
        // The configured target holds the voters at three.
        assert_eq!(plan_of(&voters, &learners, Some(3)), None);
        // Five present members but only three voters and nobody ready: nothing.
        assert_eq!(plan_of(&voters, &learners[..2], None), None);
    }

    #[test]
    fn a_voter_gone_past_the_bound_is_replaced_by_a_ready_learner() {
        let voters = [
            member("a", None, 100),
            member("b", Some(181), 40),
            member("c", None, 100),
        ];
        let learners = [member("d", None, 100)];
        assert_eq!(
            plan_of(&voters, &learners, None),
            Some(Step::Replace {
                out: "b".into(),
                with: "d".into()
            })
        );
        // Down for less than the bound: it may be restarting; nothing moves.
        let voters = [
            member("a", None, 100),
            member("b", Some(179), 40),
            member("c", None, 100),
        ];
        assert_eq!(plan_of(&voters, &learners, Some(3)), None);
    }

    #[test]
    fn without_a_learner_five_voters_shrink_to_three_but_three_never_shrink() {
        let five = |gone: &[&str]| -> Vec<Seen> {
            ["a", "b", "c", "d", "e"]
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let down = gone.contains(n).then_some(200);
                    member(n, down, 100 - i as u64)
                })
                .collect()
        };
        assert_eq!(
            plan_of(&five(&["d", "e"]), &[], None),
            Some(Step::Shrink(vec!["d".into(), "e".into()]))
        );
        // One gone: it and the most lagging of the others (never the leader, a).
        assert_eq!(
            plan_of(&five(&["b"]), &[], None),
            Some(Step::Shrink(vec!["b".into(), "e".into()]))
        );
        // Three gone of five: no majority to commit with; nothing is tried.
        assert_eq!(plan_of(&five(&["c", "d", "e"]), &[], None), None);
        let three = [
            member("a", None, 100),
            member("b", Some(500), 100),
            member("c", None, 100),
        ];
        assert_eq!(plan_of(&three, &[], None), None);
        // The leader is never gone to itself.
        let mut leader_down = five(&[]);
        leader_down[0].down_for = Some(Duration::from_secs(900));
        assert_eq!(plan_of(&leader_down, &[], None), None);
    }

    #[test]
    fn a_shrink_keeps_the_target_and_sheds_voters_that_do_not_answer_first() {
        let mut five: Vec<Seen> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| member(n, None, 100))
            .collect();
        five[1].down_for = Some(Duration::from_secs(200));
        five[1].up = false;
        // With `count = 5` only the gone one steps down: a healthy voter shed now would
        // be promoted back at once.
        assert_eq!(
            plan_of(&five, &[], Some(5)),
            Some(Step::Shrink(vec!["b".into()]))
        );
        // By default (four present: target three) one more goes: the one that does not
        // answer (down for less than the bound), not a healthy one by name.
        five[2].down_for = Some(Duration::from_secs(5));
        five[2].up = false;
        assert_eq!(
            plan_of(&five, &[], None),
            Some(Step::Shrink(vec!["b".into(), "c".into()]))
        );
    }

    #[test]
    fn after_a_shrink_the_voters_grow_back_as_members_return() {
        // Three voters; the two that stepped down are learners, one back and caught up.
        let voters = [
            member("a", None, 100),
            member("b", None, 100),
            member("c", None, 100),
        ];
        let learners = [member("d", None, 100), member("e", Some(400), 3)];
        // Four present members: the target is three, so no promotion yet.
        assert_eq!(plan_of(&voters, &learners, None), None);
        let learners = [member("d", None, 100), member("e", None, 100)];
        assert_eq!(
            plan_of(&voters, &learners, None),
            Some(Step::Promote("d".into()))
        );
    }
}

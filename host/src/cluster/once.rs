//! Stamped commands: each applied once, however often it is proposed (issue 24 item 8).
//!
//! A proposer retries a command that it knows was not appended (`raft/propose.rs`). One
//! answer does not know that for sure: openraft 0.9 answers `ForwardToLeader` to a write
//! its leader appended and then lost leadership over, and a follower that already holds
//! that entry may become leader and commit it (the Raft paper's figure 8). The retry is
//! then a second copy of a command that is applied anyway. Most commands are fenced or
//! idempotent; an `OpenSession` (a second session, vacating the first one's slots) or a
//! plugin's `SaveState` with another save in between are not.
//!
//! So, from cluster version [`crate::version::STAMPS`] on, a node numbers every command
//! it proposes through `propose` (sessions, grants, releases, saves, expiries, adverts;
//! one sequence per run of the node, from 1) and keeps the number across its retries
//! ([`super::Proposal::Stamped`]). The state machine keeps, per member, the run's answers
//! to the numbers it applied ([`super::Applied`], in snapshots too) and answers a number
//! it has seen with the first answer, changing nothing. Batches commit out of order, so
//! the answers are a set, not a counter. A command that was refused or forbidden leaves
//! a mark without its message (`keep_answer` says why). Answers are forgotten below `low`, the run's lowest
//! number still in flight when it proposed: the proposer has its answer, or stopped
//! waiting for it. A command that arrives with a forgotten number is refused, never
//! applied, so a copy that commits after its proposer stopped waiting changes nothing
//! either. A cap bounds a member that never raises `low`.
//!
//! What an operator's request proposes on the leader (`propose_here`: revoke, remove,
//! drain, the version raise) is not numbered: it is not retried, and an operator who
//! sends a request again sends a new command.
//!
//! A run is a process ([`super::Process`]: the store and its incarnation). A newer run, or
//! another store under the member's name (a wiped node), starts a fresh record; a command
//! of an older run of the same store is refused: that run has ended (its session was
//! superseded), and its record is gone. A removed member's record goes with it.

use std::collections::BTreeMap;

use super::{Applied, Cluster, Command, Process, Response, StoreId};

/// Most answers kept per member. A proposer never has more numbers in flight
/// (`raft/stamps.rs` waits for room), so an honest run's answers are never cut; the cap
/// bounds a member that never raises `low`: its lowest answers are forgotten, as if `low`
/// had passed them.
pub const MAX_ANSWERS: usize = 10_000;

/// What a stamped command meets: its first application, or a repeat.
enum Seen {
    New,
    Repeat(Response),
    Refused(String),
}

impl Cluster {
    /// Applies `commands`, numbered by `member`'s run `run` (`low`: its lowest number in
    /// flight), each once; `from` is the member whose rights apply (`None`: the leader's
    /// own proposal).
    pub(super) fn apply_stamped(
        &mut self,
        index: u64,
        term: u64,
        stamp: (&str, Process, u64),
        from: Option<&str>,
        commands: Vec<(u64, Command)>,
    ) -> Vec<Response> {
        let (member, run, low) = stamp;
        // Once per entry, before its commands: every command of the entry meets the same
        // rule, wherever it sits in the entry.
        if let Some(record) = self.applied.get_mut(member).filter(|r| r.run == run) {
            record.low = record.low.max(low);
            record.answers = record.answers.split_off(&record.low);
        }
        commands
            .into_iter()
            .map(|(seq, command)| match self.seen(member, run, seq) {
                Seen::Repeat(answer) => answer,
                Seen::Refused(why) => Response::Refused(why),
                Seen::New => {
                    let joins = matches!(&command, Command::Join { node, .. } if node == member)
                        && !self.members.contains_key(member);
                    let answer = match from {
                        Some(by) => self.apply_from(by, index, term, command),
                        None => self.apply(index, term, command),
                    };
                    // A name that joins is its proposer's store from now on: recorded at
                    // once, not only at its first session, so that Raft's messages name
                    // it and another store's process cannot take the name meanwhile.
                    if joins
                        && answer == Response::Done
                        && self.version >= crate::version::ADDRESSED
                    {
                        self.stores.insert(member.to_owned(), run.store);
                    }
                    self.keep_answer(member, run, low, seq, &answer);
                    answer
                }
            })
            .collect()
    }

    /// Whether a member of `name` was removed with store `store` (`Cluster::retired`).
    pub fn is_retired(&self, name: &str, store: StoreId) -> bool {
        self.retired
            .get(name)
            .is_some_and(|stores| stores.contains(&store))
    }

    /// What a process of `name`'s retired store `store` is told: that it is a member no
    /// more, and what to do, which depends on whether the name runs elsewhere now. If it
    /// does, emptying this data dir and starting again would only push out the process
    /// that runs as the name (`raft/replace.rs`), so the operator is told to stop that
    /// one first, if this machine is to be the name instead.
    pub fn retired_why(&self, name: &str, store: StoreId) -> String {
        match self.stores.get(name) {
            Some(now) => format!(
                "{name}'s member was removed from the cluster with this data dir (store {store}), and {name} is now a member on another data dir (store {now}): this process must not run as {name}; stop it. If this machine is to be {name} instead, stop the other process first, then empty this data dir and start this one again"
            ),
            None => format!(
                "{name}'s member was removed from the cluster with this data dir (store {store}), by `tenure member remove {name}` or because {name} came back on a new disk; a removed member is never taken back, as in etcd. To bring this machine back as a new member: stop it, empty its data dir, and start it again"
            ),
        }
    }

    /// Whether `member`'s run `run` had number `seq` applied. Reads only: a record is
    /// made or replaced when an answer is kept.
    fn seen(&self, member: &str, run: Process, seq: u64) -> Seen {
        if self.is_retired(member, run.store) {
            return Seen::Refused(format!(
                "a command of {member} from store {}: {}",
                run.store,
                self.retired_why(member, run.store)
            ));
        }
        let Some(record) = self.applied.get(member) else {
            return Seen::New;
        };
        if record.run != run {
            if record.run.store == run.store && run.incarnation < record.run.incarnation {
                return Seen::Refused(format!(
                    "a command of an earlier run of {member} (incarnation {}): incarnation {} has proposed since, so that run has ended",
                    run.incarnation, record.run.incarnation
                ));
            }
            return Seen::New;
        }
        if let Some(answer) = record.answers.get(&seq) {
            return Seen::Repeat(match answer {
                Response::Refused(mark) if mark.is_empty() => Response::Refused(format!(
                    "command {seq} of {member}'s run was applied before and refused then (it changed nothing); it is not applied again"
                )),
                answer => answer.clone(),
            });
        }
        if seq < record.low {
            return Seen::Refused(format!(
                "command {seq} of {member}'s run arrived after its proposer settled every command below {}: it was answered, or given up on, and is not applied now",
                record.low
            ));
        }
        Seen::New
    }

    /// Keeps `answer` for `seq` (a record of another run gives way to this one's).
    ///
    /// A refused or forbidden command is kept as a mark, an empty `Refused`, without its
    /// message: a member has no way to fill the replicated state with error messages, and
    /// every kept answer is fixed-size (`Done`, `Stale`, a session, a grant, the mark), so
    /// a record is at most [`MAX_ANSWERS`] small entries. The mark matters: such a
    /// command changed nothing, but a copy of it that commits later (a proposer that
    /// asked again after an unknown outcome, and was answered by another copy) would meet
    /// a state that has changed since, and could apply after its proposer was told it
    /// was refused. Keeping every number also records the run's `low` from its first
    /// command on.
    fn keep_answer(&mut self, member: &str, run: Process, low: u64, seq: u64, answer: &Response) {
        let answer = match answer {
            Response::Refused(_) | Response::Forbidden(_) => Response::Refused(String::new()),
            answer => answer.clone(),
        };
        let record = self
            .applied
            .entry(member.to_string())
            .or_insert_with(|| Applied {
                run,
                low,
                answers: BTreeMap::new(),
            });
        if record.run != run {
            *record = Applied {
                run,
                low,
                answers: BTreeMap::new(),
            };
        }
        record.answers.insert(seq, answer);
        while record.answers.len() > MAX_ANSWERS {
            let (lowest, _) = record.answers.pop_first().expect("not empty");
            record.low = lowest + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Proposal, StoreId};
    use crate::golden::samples;

    fn run(store: u8, incarnation: u64) -> Process {
        Process {
            store: StoreId::from_bytes([store; 16]),
            incarnation,
        }
    }

    fn stamped(member: &str, run: Process, low: u64, commands: Vec<(u64, Command)>) -> Proposal {
        Proposal::Stamped {
            member: member.into(),
            run,
            low,
            commands,
        }
    }

    fn answers(outcome: crate::cluster::Outcome) -> Vec<Response> {
        outcome.responses().cloned().collect()
    }

    /// Every command kind, applied once stamped and then again with the same number (a
    /// later entry): the second answer is the first, and the state is as after the
    /// first. The kinds come in the golden samples' order, which applies each cleanly on
    /// the state the ones before it built (a member with a session, a granted slot), so
    /// each first application changes something.
    #[test]
    fn every_command_kind_applied_twice_changes_the_state_once() {
        let mut cluster = Cluster::default();
        let me = run(1, 5);
        for (i, command) in samples::commands().into_iter().enumerate() {
            let seq = i as u64 + 1;
            let kind = format!("{command:?}");
            let probe = matches!(command, Command::Probe { .. });
            let before = cluster.clone();
            let first = cluster.apply_proposal(
                seq,
                3,
                stamped("n1", me, seq, vec![(seq, command.clone())]),
            );
            assert!(
                !matches!(
                    &answers(first.clone())[..],
                    [Response::Refused(_) | Response::Stale]
                ),
                "{kind}: {first:?}"
            );
            let mut changed = cluster.clone();
            changed.applied = before.applied.clone();
            // The version gate's probe only answers.
            if !probe {
                assert_ne!(changed, before, "{kind} changed nothing the first time");
            }
            let after_first = cluster.clone();
            let again =
                cluster.apply_proposal(1000 + seq, 4, stamped("n1", me, seq, vec![(seq, command)]));
            assert_eq!(answers(again), answers(first), "{kind}");
            assert_eq!(
                cluster, after_first,
                "{kind} applied twice changed the state"
            );
        }
        // Without stamps the same commands do apply twice: a session opened twice is two
        // sessions (the repeat vacates the first one's slots).
        let open = Command::OpenSession {
            node: "n2".into(),
            at_ms: 1,
        };
        let mut plain = Cluster::default();
        plain.apply(
            1,
            1,
            Command::Join {
                node: "n2".into(),
                addr: "a:1".into(),
                labels: Default::default(),
            },
        );
        assert_eq!(plain.apply(2, 1, open.clone()), Response::Session(2));
        assert_eq!(plain.apply(3, 1, open), Response::Session(3));
    }

    #[test]
    fn answers_are_forgotten_below_low_and_a_late_copy_is_refused() {
        let mut cluster = Cluster::default();
        let me = run(1, 5);
        let join = |n: &str| Command::Join {
            node: n.into(),
            addr: "a:1".into(),
            labels: Default::default(),
        };
        // Out of order, as batches commit: 3 then 1 then 2.
        for seq in [3, 1, 2] {
            cluster.apply_proposal(seq, 1, stamped("n1", me, 1, vec![(seq, join("x"))]));
        }
        assert_eq!(
            cluster.applied["n1"]
                .answers
                .keys()
                .copied()
                .collect::<Vec<_>>(),
            [1, 2, 3]
        );
        // The run settled everything below 3.
        cluster.apply_proposal(9, 1, stamped("n1", me, 3, vec![(4, join("y"))]));
        assert_eq!(
            cluster.applied["n1"]
                .answers
                .keys()
                .copied()
                .collect::<Vec<_>>(),
            [3, 4]
        );
        let late = cluster.apply_proposal(10, 1, stamped("n1", me, 3, vec![(2, join("late"))]));
        assert!(
            matches!(&answers(late)[..], [Response::Refused(m)] if m.contains("settled")),
            "a copy below low is refused"
        );
        assert!(!cluster.members.contains_key("late"));
    }

    /// A command refused once is not applied by a copy that commits after the state
    /// changed: the proposer was told it was refused.
    #[test]
    fn a_late_copy_of_a_refused_command_is_not_applied_when_it_would_now_succeed() {
        let mut cluster = Cluster::default();
        let me = run(1, 5);
        // A grant to n2's session 3, which the session opened at index 3 will be.
        let assign = Command::Assign {
            resource: "r".into(),
            slot: 0,
            node: "n2".into(),
            session: 3,
            version: semver::Version::new(1, 0, 0),
            digest: "d".into(),
            at_ms: 0,
        };
        cluster.apply(
            1,
            1,
            Command::Join {
                node: "n2".into(),
                addr: "a:1".into(),
                labels: Default::default(),
            },
        );
        let first = cluster.apply_proposal(2, 1, stamped("n1", me, 1, vec![(1, assign.clone())]));
        assert!(
            matches!(&answers(first)[..], [Response::Refused(_)]),
            "no session 3 yet: refused"
        );
        let open = Command::OpenSession {
            node: "n2".into(),
            at_ms: 0,
        };
        assert_eq!(cluster.apply(3, 1, open), Response::Session(3));
        // Without its number the same command would now be granted.
        let mut plain = cluster.clone();
        assert!(matches!(
            plain.apply(4, 1, assign.clone()),
            Response::Granted { .. }
        ));
        let late = cluster.apply_proposal(4, 1, stamped("n1", me, 1, vec![(1, assign)]));
        assert!(
            matches!(&answers(late.clone())[..], [Response::Refused(m)] if m.contains("applied before")),
            "{late:?}"
        );
        assert!(cluster.resources.is_empty());
    }

    #[test]
    fn a_newer_run_starts_afresh_and_an_older_one_is_refused() {
        let mut cluster = Cluster::default();
        let join = |n: &str| Command::Join {
            node: n.into(),
            addr: "a:1".into(),
            labels: Default::default(),
        };
        cluster.apply_proposal(1, 1, stamped("n1", run(1, 5), 1, vec![(1, join("a"))]));
        // The next run numbers from 1 again: a new command, applied.
        cluster.apply_proposal(2, 1, stamped("n1", run(1, 6), 1, vec![(1, join("b"))]));
        assert!(cluster.members.contains_key("b"));
        let old = cluster.apply_proposal(3, 1, stamped("n1", run(1, 5), 1, vec![(2, join("c"))]));
        assert!(matches!(&answers(old)[..], [Response::Refused(m)] if m.contains("earlier run")));
        assert!(!cluster.members.contains_key("c"));
        // Another store under the name (a wiped node) is another run, whatever its
        // incarnation.
        cluster.apply_proposal(4, 1, stamped("n1", run(2, 1), 1, vec![(1, join("d"))]));
        assert!(cluster.members.contains_key("d"));
        assert_eq!(cluster.applied["n1"].run, run(2, 1));
    }

    #[test]
    fn the_record_is_bounded_and_a_removed_member_takes_its_record_along() {
        let mut cluster = Cluster::default();
        let me = run(1, 5);
        let join = Command::Join {
            node: "n9".into(),
            addr: "a:1".into(),
            labels: Default::default(),
        };
        let commands: Vec<(u64, Command)> = (1..=MAX_ANSWERS as u64 + 5)
            .map(|seq| (seq, join.clone()))
            .collect();
        cluster.apply_proposal(1, 1, stamped("n1", me, 1, commands));
        assert_eq!(cluster.applied["n1"].answers.len(), MAX_ANSWERS);
        assert_eq!(cluster.applied["n1"].low, 6);
        cluster.apply(
            2,
            1,
            Command::Join {
                node: "n1".into(),
                addr: "a:1".into(),
                labels: Default::default(),
            },
        );
        let removed = cluster.apply(
            3,
            1,
            Command::Remove {
                node: "n1".into(),
                at_ms: 1,
            },
        );
        assert_eq!(removed, Response::Done);
        assert!(!cluster.applied.contains_key("n1"));
    }

    #[test]
    fn a_member_s_stamped_commands_have_its_rights_only() {
        let mut cluster = Cluster::default();
        let other = Command::SetDraining {
            node: "n2".into(),
            draining: true,
        };
        let proposal = stamped("n1", run(1, 5), 1, vec![(1, other)])
            .from_member("n1")
            .unwrap();
        let outcome = cluster.apply_proposal(1, 1, proposal);
        assert!(matches!(&answers(outcome)[..], [Response::Forbidden(_)]));
        // A forbidden (or refused) command is kept as a mark without its message, so a
        // member cannot fill the replicated state with its own errors.
        assert_eq!(
            cluster.applied["n1"].answers,
            BTreeMap::from([(1, Response::Refused(String::new()))])
        );
        // A member cannot stamp for another.
        assert!(
            stamped("n2", run(1, 5), 1, Vec::new())
                .from_member("n1")
                .is_none()
        );
    }
    /// A member removed with its store recorded leaves that store retired: its process's
    /// numbered commands are refused for good, before and after the name joins again
    /// with a new store, which is recorded at its join (issue 24, item 2).
    #[test]
    fn a_removed_member_s_store_is_refused_for_good_and_the_new_one_recorded_at_its_join() {
        let mut cluster = Cluster {
            version: crate::version::ADDRESSED,
            ..Cluster::default()
        };
        let (old, new) = (run(1, 10), run(2, 1));
        let join = |seq: u64| {
            (
                seq,
                Command::Join {
                    node: "a".into(),
                    addr: "a:1".into(),
                    labels: Default::default(),
                },
            )
        };
        let open = |seq: u64, process: Process| {
            (
                seq,
                Command::OpenSessionOf {
                    node: "a".into(),
                    at_ms: 0,
                    process,
                    ended: None,
                },
            )
        };
        let outcome = cluster.apply_proposal(1, 1, stamped("a", old, 1, vec![join(1)]));
        assert_eq!(answers(outcome), vec![Response::Done]);
        assert_eq!(
            cluster.stores.get("a"),
            Some(&old.store),
            "recorded at its join"
        );
        let outcome = cluster.apply_proposal(2, 1, stamped("a", old, 1, vec![open(2, old)]));
        let [Response::Session(session)] = answers(outcome)[..] else {
            panic!("no session")
        };
        cluster.apply(
            3,
            1,
            Command::EndSession {
                node: "a".into(),
                session,
                expired_in: None,
                at_ms: 0,
            },
        );
        assert_eq!(
            cluster.apply(
                4,
                1,
                Command::Remove {
                    node: "a".into(),
                    at_ms: 0
                }
            ),
            Response::Done
        );
        assert!(cluster.is_retired("a", old.store));

        // The old process, come back: refused, whether or not the name rejoined.
        for at in [5, 8] {
            let outcome = cluster.apply_proposal(at, 1, stamped("a", old, 1, vec![join(at)]));
            assert!(
                matches!(&answers(outcome)[..], [Response::Refused(why)] if why.contains("removed from the cluster with this data dir")),
                "at {at}"
            );
            if at == 5 {
                // The name joins again from a new store, which is recorded.
                let outcome = cluster.apply_proposal(6, 1, stamped("a", new, 1, vec![join(1)]));
                assert_eq!(answers(outcome), vec![Response::Done]);
                assert_eq!(cluster.stores.get("a"), Some(&new.store));
                let outcome =
                    cluster.apply_proposal(7, 1, stamped("a", new, 1, vec![open(2, new)]));
                assert!(matches!(answers(outcome)[..], [Response::Session(_)]));
            }
        }
        assert!(!cluster.members.is_empty());
        assert_eq!(cluster.stores.get("a"), Some(&new.store));
    }
}

//! When this node last heard a leader, per term: the voter's half of the lease handoff.
//!
//! A renewal the old leader acknowledged was received at some time a, and acknowledged
//! only after a quorum heartbeat round that began after a: every voter of that quorum
//! accepted an append from the old leader at or after a (and the old leader itself acted
//! as leader then). A new leader asks a majority how long ago each last heard a leader of
//! an older term; that majority contains a voter of every such quorum, so the latest of
//! the answers is no earlier than a, and a session clock started there expires no
//! session before its owner's deadline (`node/handoff.rs` has the whole argument).
//!
//! Recorded here: every AppendEntries and every snapshot chunk this node handed to Raft
//! (recorded once Raft has answered, whatever it answered: only the accepted ones matter,
//! and a record made after Raft took a message is later than every message Raft took
//! before it), and, on a leader, every quorum round it starts before acknowledging a
//! renewal (recorded before the round starts, after the renewal arrived; a round Raft
//! takes after this node adopted a higher term fails, so the record is in place before
//! any answer that round could matter to). Times are monotonic (`Instant`), so they mean
//! nothing across a restart.
//!
//! **The three answers** ([`Since`]), for a question from the leader of term t:
//! - *Heard*: the latest record of a term below t. Records of older terms may have been
//!   dropped ([`TERMS_KEPT`]); a kept one is still the latest, because this node took
//!   every message of a dropped (lower) term before the one it kept, and records it
//!   after Raft took it.
//! - *Started*: no record of a term below t, and none of such a term dropped. Then this node
//!   has heard no leader of a term below t since its run began (`ControlOptions::started`:
//!   once the run held its data dir, before it could take any Raft message; by default
//!   when this record keeper was made): everything it heard before, it heard in an
//!   earlier run, which ended before this one started. So "nothing since I started, e
//!   ago" bounds the past as well as a record would: a voter of the old leader's last
//!   quorum that answers so heard that leader before it started, and the answer's time is
//!   no earlier than the hearing. Two conditions make it hold: (a) no record of a term
//!   below t was dropped (a node that dropped one and kept none answers *Unknown*;
//!   one that kept one answers *Heard*, as above), and (b) every
//!   message Raft took is recorded before the node answers: a message is *in flight*
//!   from before Raft sees it until its record is written ([`Heard::hearing`]), and an
//!   answer first waits for every message in flight when it asked ([`Heard::settle`]).
//!   A leader's own round is recorded before it starts, so it needs no such wait.
//! - *Unknown*: a record of a term below t was dropped and none is kept; the asker takes
//!   its receive time (the most cautious answer).
//!
//! **Renewals** (issue 30 item 4). A leader's renewal round (`node/renewal_round.rs`)
//! also tells its voters, per session, when it received the renewals the round
//! confirms; a voter that takes the round records it as a hearing of its term, and keeps
//! per session the latest such time with its term ([`Heard::record_renewals`]). Asked by
//! the leader of term t, it answers per session the time since that record only if the
//! record is of the latest term below t it heard ([`Heard::renewals_below`]); otherwise
//! (no record, one of an older term, one made under another membership than this node's
//! now, one dropped past [`RENEWALS_KEPT`]) it answers nothing for the session and the
//! asker uses this node's answer above for it. Why the
//! latest term: a leader that acknowledged a renewal without telling its voters (its
//! replica had not yet applied the cluster version that allows the round) leaves only
//! older records behind, and each of its voters has heard it, in a later term than those
//! records. Why the same membership: the asker's majority meets the quorum of the round
//! that carried a session's last acknowledged renewal only if both are majorities of one
//! configuration; a voter that appended a membership change since its record heard that
//! change's leader later than the record, so its answer for the node stands in. A record
//! is never later than the hearing recorded with it, so a session's answer is never
//! later than the node's.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::{RwLock, RwLockReadGuard};

/// Terms remembered; older ones are dropped (only the latest below an asker's term
/// matters, and terms only grow).
const TERMS_KEPT: usize = 8;

/// Sessions whose renewals are remembered; the oldest records go first. A session whose
/// record went is answered as if it had none: the node's own answer stands for it.
const RENEWALS_KEPT: usize = 4096;

/// What this node can say about the past, for the leader of some term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Since {
    /// A leader of a lower term was last heard this long ago.
    Heard(Duration),
    /// No leader of a lower term was heard since this node started, this long ago.
    Started(Duration),
    /// A record of a lower term was dropped: no bound.
    Unknown,
}

impl Since {
    /// The answer's elapsed time, as the wire carries it: `None` when there is no bound.
    pub(crate) fn elapsed(self) -> Option<Duration> {
        match self {
            Since::Heard(e) | Since::Started(e) => Some(e),
            Since::Unknown => None,
        }
    }
}

pub(crate) struct Heard {
    records: Mutex<Records>,
    /// When this node's run began (`ControlOptions::started`, once it held its data dir),
    /// or when this record keeper was made: before the node could take a Raft message.
    started: Instant,
    /// Held shared by every message from before Raft sees it until it is recorded, and
    /// taken exclusively by an answer (see the module doc, condition (b)). Tokio's lock
    /// is fair: a waiting answer lets no later message in before it, so it cannot starve.
    gate: RwLock<()>,
}

#[derive(Default)]
struct Records {
    /// term → the latest time a leader of that term was heard (or this node led it).
    last: BTreeMap<u64, Instant>,
    /// The lowest term whose record was dropped (records go lowest first).
    first_dropped: Option<u64>,
    /// session → the term and time of the latest renewal of it a leader's round reported,
    /// and the membership this node had then (the log index of its configuration).
    renewals: HashMap<u64, (u64, Instant, u64)>,
}

impl Heard {
    /// A record keeper of a node starting now.
    pub(crate) fn new() -> Heard {
        Heard::started_at(Instant::now())
    }

    /// A record keeper of a node that started at `started`.
    pub(crate) fn started_at(started: Instant) -> Heard {
        Heard {
            records: Mutex::default(),
            started,
            gate: RwLock::new(()),
        }
    }

    /// Marks a hearing in flight: hold the guard from before Raft sees the message until
    /// [`Heard::record`] ran.
    pub(crate) async fn hearing(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().await
    }

    /// Waits until every hearing in flight now is recorded.
    pub(crate) async fn settle(&self) {
        drop(self.gate.write().await);
    }

    /// Records that a leader of `term` was heard at `at`.
    pub(crate) fn record(&self, term: u64, at: Instant) {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records.heard(term, at);
    }

    /// Records a leader's renewal round of `term`, heard at `at` while this node's
    /// membership was the configuration at log index `config`: a hearing, and per session
    /// the time its renewal reached the leader (no later than `at`).
    pub(crate) fn record_renewals(
        &self,
        term: u64,
        config: u64,
        at: Instant,
        renewals: &[(u64, Instant)],
    ) {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        records.heard(term, at);
        for &(session, received) in renewals {
            let received = received.min(at);
            let entry = records
                .renewals
                .entry(session)
                .or_insert((term, received, config));
            if (term, received) > (entry.0, entry.1) {
                *entry = (term, received, config);
            }
        }
        if records.renewals.len() > RENEWALS_KEPT {
            // The oldest go, an eighth more than needed, so a full table is sorted once
            // per eighth of it, not once per record.
            let mut kept: Vec<(u64, (u64, Instant, u64))> = records.renewals.drain().collect();
            kept.sort_unstable_by_key(|(_, (term, at, _))| std::cmp::Reverse((*term, *at)));
            kept.truncate(RENEWALS_KEPT - RENEWALS_KEPT / 8);
            records.renewals.extend(kept);
        }
    }

    /// What this node can say at `now` about leaders of terms below `term` (call
    /// [`Heard::settle`] first).
    pub(crate) fn since_below(&self, term: u64, now: Instant) -> Since {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        match records.last.range(..term).map(|(_, at)| *at).max() {
            Some(latest) => Since::Heard(now.saturating_duration_since(latest)),
            None if records.first_dropped.is_some_and(|d| d < term) => Since::Unknown,
            None => Since::Started(now.saturating_duration_since(self.started)),
        }
    }

    /// Per session of `sessions`, how long ago a renewal of it reached a leader of the
    /// latest term below `term` this node heard, as that leader's round reported it, if
    /// this node's membership is still the one it had then (`config`, the log index of its
    /// configuration); `None` where this node cannot say (see the module doc): the asker
    /// then uses [`Heard::since_below`]'s answer for it. Call [`Heard::settle`] first.
    pub(crate) fn renewals_below(
        &self,
        term: u64,
        config: u64,
        sessions: &[u64],
        now: Instant,
    ) -> Vec<Option<Duration>> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let latest = records.last.range(..term).next_back().map(|(t, _)| *t);
        sessions
            .iter()
            .map(|session| match records.renewals.get(session) {
                Some(&(of, at, under)) if Some(of) == latest && under == config => {
                    Some(now.saturating_duration_since(at))
                }
                _ => None,
            })
            .collect()
    }
}

impl Records {
    fn heard(&mut self, term: u64, at: Instant) {
        let entry = self.last.entry(term).or_insert(at);
        *entry = (*entry).max(at);
        while self.last.len() > TERMS_KEPT {
            if let Some((dropped, _)) = self.last.pop_first() {
                self.first_dropped.get_or_insert(dropped);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_older_terms_count_and_the_latest_of_them() {
        let t0 = Instant::now();
        let heard = Heard::started_at(t0);
        let ms = Duration::from_millis;
        heard.record(3, t0);
        heard.record(3, t0 + ms(100));
        heard.record(3, t0 + ms(50));
        heard.record(4, t0 + ms(30));
        // The new leader's own term (5) does not count against itself.
        heard.record(5, t0 + ms(400));
        assert_eq!(heard.since_below(5, t0 + ms(500)), Since::Heard(ms(400)));
        assert_eq!(heard.since_below(4, t0 + ms(500)), Since::Heard(ms(400)));
        assert_eq!(heard.since_below(6, t0 + ms(500)), Since::Heard(ms(100)));
        // Nothing below term 3 was ever heard: the start bounds the past.
        assert_eq!(heard.since_below(3, t0 + ms(500)), Since::Started(ms(500)));
    }

    #[test]
    fn a_node_that_heard_no_one_answers_the_time_since_it_started() {
        let t0 = Instant::now();
        let heard = Heard::started_at(t0);
        let ms = Duration::from_millis;
        assert_eq!(
            heard.since_below(7, t0 + ms(1200)),
            Since::Started(ms(1200))
        );
        assert_eq!(
            heard.since_below(7, t0 + ms(1200)).elapsed(),
            Some(ms(1200))
        );
        // Its own term's records do not count.
        heard.record(7, t0 + ms(1000));
        assert_eq!(
            heard.since_below(7, t0 + ms(1200)),
            Since::Started(ms(1200))
        );
    }

    #[test]
    fn a_node_that_dropped_a_lower_term_has_no_bound_unless_it_kept_one() {
        let t0 = Instant::now();
        let heard = Heard::started_at(t0);
        let ms = Duration::from_millis;
        for term in 1..=(TERMS_KEPT as u64 + 2) {
            heard.record(term, t0 + ms(term * 10));
        }
        // Terms 1 and 2 were dropped; 3.. are kept.
        let now = t0 + ms(1000);
        assert_eq!(heard.since_below(2, now), Since::Unknown);
        assert_eq!(heard.since_below(3, now), Since::Unknown);
        assert_eq!(heard.since_below(3, now).elapsed(), None);
        assert_eq!(heard.since_below(4, now), Since::Heard(ms(970)));
        // No term below 1 exists, so none was dropped: the start bounds it (vacuously).
        assert_eq!(heard.since_below(1, now), Since::Started(ms(1000)));
    }

    /// A session's answer rests on a round of the latest term below the asker's that
    /// this node heard; anything else is "cannot say", and the node's own answer stands.
    #[test]
    fn a_renewal_counts_only_if_its_term_is_the_last_one_heard() {
        let t0 = Instant::now();
        let heard = Heard::started_at(t0);
        let ms = Duration::from_millis;
        // Term 3's leader reported sessions 7 and 8; a later round of term 3, 7 again.
        heard.record_renewals(3, 0, t0 + ms(100), &[(7, t0 + ms(90)), (8, t0 + ms(95))]);
        heard.record_renewals(3, 0, t0 + ms(300), &[(7, t0 + ms(280))]);
        let now = t0 + ms(1000);
        assert_eq!(
            heard.renewals_below(4, 0, &[7, 8, 9], now),
            vec![Some(ms(720)), Some(ms(905)), None]
        );
        // A session's answer is never later than the node's own.
        assert_eq!(heard.since_below(4, now), Since::Heard(ms(700)));
        // An asker of term 3 itself: nothing below it was heard.
        assert_eq!(heard.renewals_below(3, 0, &[7], now), vec![None]);
        // Term 5's leader was heard with no renewal round (it could not send one): the
        // records of term 3 may be older than its last acknowledgement, so none counts.
        heard.record(5, t0 + ms(500));
        assert_eq!(heard.renewals_below(6, 0, &[7, 8], now), vec![None, None]);
        // Its round of 7 counts again, for askers above 5.
        heard.record_renewals(5, 0, t0 + ms(600), &[(7, t0 + ms(590))]);
        assert_eq!(
            heard.renewals_below(6, 0, &[7, 8], now),
            vec![Some(ms(410)), None]
        );
        assert_eq!(heard.renewals_below(4, 0, &[7], now), vec![None]);
        // A membership change appended since (configuration at log index 12): none
        // counts; a round under the new membership does.
        assert_eq!(heard.renewals_below(6, 12, &[7], now), vec![None]);
        heard.record_renewals(5, 12, t0 + ms(650), &[(7, t0 + ms(640))]);
        assert_eq!(heard.renewals_below(6, 12, &[7], now), vec![Some(ms(360))]);
    }

    /// A reported receive time is never taken as later than the round's own hearing, and a
    /// full table drops its oldest records, which are then answered as unknown.
    #[test]
    fn renewal_records_are_bounded_and_never_after_their_hearing() {
        let t0 = Instant::now();
        let heard = Heard::started_at(t0);
        let ms = Duration::from_millis;
        heard.record_renewals(1, 0, t0 + ms(10), &[(1, t0 + ms(50))]);
        assert_eq!(
            heard.renewals_below(2, 0, &[1], t0 + ms(100)),
            vec![Some(ms(90))]
        );
        let many: Vec<(u64, Instant)> = (0..RENEWALS_KEPT as u64)
            .map(|s| (s + 10, t0 + ms(20) + Duration::from_micros(s)))
            .collect();
        heard.record_renewals(1, 0, t0 + ms(30), &many);
        let newest = RENEWALS_KEPT as u64 + 9;
        let answers = heard.renewals_below(2, 0, &[1, 10, newest], t0 + ms(100));
        assert_eq!(answers[0], None, "the oldest record stayed");
        assert_eq!(answers[1], None, "the table did not drop a batch");
        assert!(answers[2].is_some(), "the newest record went");
        let kept = heard.records.lock().unwrap().renewals.len();
        assert_eq!(kept, RENEWALS_KEPT - RENEWALS_KEPT / 8);
    }

    #[tokio::test]
    async fn an_answer_waits_for_a_hearing_in_flight() {
        let heard = std::sync::Arc::new(Heard::new());
        let guard = heard.hearing().await;
        let settled = {
            let heard = heard.clone();
            tokio::spawn(async move { heard.settle().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!settled.is_finished(), "settled with a hearing in flight");
        heard.record(1, Instant::now());
        drop(guard);
        settled.await.unwrap();
        assert!(matches!(
            heard.since_below(2, Instant::now()),
            Since::Heard(_)
        ));
    }
}

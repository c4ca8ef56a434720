//! Opening a member's session: which process may, and what happens to the one before.
//!
//! A session is what a node's slots are bound to; while it lives, the node's plugins may
//! run, up to the node's own lease deadline (docs/design.md §5.4, "Sessions and leases"). So a new
//! session must never vacate an old one whose process may still be running plugins.
//! [`Command::OpenSessionOf`] names the process that asks (its store, and its run: the
//! incarnation) and the session that process held before and knows is over. The rules,
//! with the member's current session S opened by process P:
//!
//! - **No session:** a new one is opened.
//! - **The same process asks again** (P, a proposal retried after an answer was lost:
//!   openraft may say "forward to the leader" of an entry that still commits): answered
//!   with S, nothing changes. Opening twice would vacate the slots granted under the
//!   first, while the node runs their plugins.
//! - **P asks, naming S as over:** P's lease deadline passed and its plugins stopped (the
//!   node waits for both, `node/session.rs`), so S is vacated at once and a new one
//!   opened, as a restart within one process always did.
//! - **A newer run of P's store** (a restart of the node while the leader still counts S
//!   as live; a second process on a copy of the data dir; a machine that took over the
//!   disk while the old one may still run): S is marked superseded and the request is
//!   refused. Once a leader has applied that, it acknowledges no further renewal of S
//!   (`node/session.rs`; one that has not yet may still acknowledge one, which only
//!   delays the expiry: expiry follows acknowledgements), so S
//!   expires by the ordinary rule, a TTL after its last acknowledged renewal and so after
//!   P's own deadline; only then do its slots move, and the newer run's next request
//!   opens its session. Before, the new session vacated S at once: a successor could
//!   start while P's plugins still ran until P's deadline.
//! - **An older run of P's store, or the superseded P itself:** refused: a newer process
//!   of the store has asked for the session.
//! - **Another store** (a second process on another data dir under the same name): refused
//!   while S lives, naming the process that holds it. When S ends (its renewals stopped),
//!   the other store may open one.
//! - **S was opened with [`Command::OpenSession`]** (before this rule, by a build without
//!   store ids): superseded by whichever process asks, as an older run would be.

use super::Process;
use super::state::*;

impl Cluster {
    /// Applies [`Command::OpenSessionOf`] at log `index`.
    pub(super) fn open_session_of(
        &mut self,
        index: u64,
        node: String,
        at_ms: u64,
        process: Process,
        ended: Option<u64>,
    ) -> Response {
        let Some(member) = self.members.get(&node) else {
            return Response::Refused(format!("{node} is not a member"));
        };
        let Some(current) = member.session.as_ref().map(|s| s.id) else {
            return self.open(index, node, at_ms, process);
        };
        let record = self
            .session_processes
            .get(&node)
            .filter(|p| p.session == current)
            .cloned()
            .unwrap_or(SessionProcess {
                session: current,
                process: None,
                superseded_by: None,
            });
        if let Some(newer) = record.superseded_by
            && newer.store == process.store
            && (newer == process || newer.incarnation > process.incarnation)
        {
            return waiting(&node, current, &record, process == newer);
        }
        let Some(holder) = record.process else {
            // Opened by a build before this rule: an older run of this store.
            return self.supersede(&node, record, process);
        };
        if holder == process {
            if ended == Some(current) {
                self.vacate_node(&node, index, at_ms, HistoryKind::Expired);
                return self.open(index, node, at_ms, process);
            }
            return Response::Session(current);
        }
        if holder.store != process.store {
            return Response::Refused(format!(
                "{node} runs on another data dir: session {current} was opened by {holder} \
                 (this process: {process}); two processes under one name never hold a \
                 session at once: stop one of them (this one may open a session once the \
                 other's has ended)"
            ));
        }
        if process.incarnation > holder.incarnation {
            return self.supersede(&node, record, process);
        }
        Response::Refused(format!(
            "a newer run of {node}'s data dir ({holder}) holds session {current}; this \
             process ({process}) is an older one: stop it"
        ))
    }

    fn open(&mut self, index: u64, node: String, at_ms: u64, process: Process) -> Response {
        let Some(member) = self.members.get_mut(&node) else {
            return Response::Refused(format!("{node} is not a member"));
        };
        member.session = Some(Session {
            id: index,
            opened_ms: at_ms,
        });
        if self.version >= crate::version::ADDRESSED {
            self.stores.insert(node.clone(), process.store);
        }
        self.session_processes.insert(
            node,
            SessionProcess {
                session: index,
                process: Some(process),
                superseded_by: None,
            },
        );
        Response::Session(index)
    }

    /// At the raise to [`crate::version::ADDRESSED`]: records the store of each member
    /// whose live session a process of a known store opened ([`Cluster::stores`]), so
    /// that Raft's messages name it from the raise on, not only from its next session.
    pub(super) fn record_live_stores(&mut self) {
        for (name, member) in &self.members {
            let Some(session) = member.session.as_ref().map(|s| s.id) else {
                continue;
            };
            if let Some(process) = self
                .session_processes
                .get(name)
                .filter(|p| p.session == session)
                .and_then(|p| p.process)
            {
                self.stores.insert(name.clone(), process.store);
            }
        }
    }

    /// Marks the session of `record` superseded by `newer`, and refuses the request.
    fn supersede(&mut self, node: &str, mut record: SessionProcess, newer: Process) -> Response {
        record.superseded_by = Some(newer);
        let answer = waiting(node, record.session, &record, true);
        self.session_processes.insert(node.to_owned(), record);
        answer
    }

    /// Whether `node`'s session `session` was superseded by a newer run of its store: the
    /// leader acknowledges no renewal of it.
    pub fn superseded(&self, node: &str, session: u64) -> bool {
        self.session_processes
            .get(node)
            .is_some_and(|p| p.session == session && p.superseded_by.is_some())
    }
}

/// The refusal while the session of `record` runs out: to the run that superseded it
/// (`to_newer`), or to an older one.
fn waiting(node: &str, current: u64, record: &SessionProcess, to_newer: bool) -> Response {
    let old = record
        .process
        .map_or("a build before store ids".to_owned(), |p| p.to_string());
    let newer = record
        .superseded_by
        .map_or(String::new(), |p| p.to_string());
    Response::Refused(if to_newer {
        format!(
            "{node}'s session {current} was opened by an earlier run ({old}), which may \
             still be running plugins: it is no longer renewed and expires a TTL after its \
             last renewal; this run ({newer}) opens its session then"
        )
    } else {
        format!(
            "a newer run of {node}'s data dir ({newer}) has asked for {node}'s session \
             {current}: this process is superseded; stop it"
        )
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cluster::StoreId;

    const V1: semver::Version = semver::Version::new(1, 0, 0);

    fn process(store: u8, incarnation: u64) -> Process {
        Process {
            store: StoreId::from_bytes([store; 16]),
            incarnation,
        }
    }

    /// Member `a` with a slot of `r` granted under a session opened by `by`.
    struct Log {
        cluster: Cluster,
        index: u64,
    }

    impl Log {
        fn new() -> Self {
            let mut log = Log {
                cluster: Cluster::default(),
                index: 0,
            };
            log.apply(Command::Join {
                node: "a".into(),
                addr: "a:1".into(),
                labels: BTreeMap::new(),
            });
            log
        }
        fn apply(&mut self, command: Command) -> Response {
            self.index += 1;
            self.cluster.apply(self.index, 1, command)
        }
        fn open(&mut self, by: Process, ended: Option<u64>) -> Response {
            self.apply(Command::OpenSessionOf {
                node: "a".into(),
                at_ms: 0,
                process: by,
                ended,
            })
        }
        fn grant(&mut self, session: u64) -> u64 {
            match self.apply(Command::Assign {
                resource: "r".into(),
                slot: 0,
                node: "a".into(),
                session,
                version: V1,
                digest: "d".into(),
                at_ms: 0,
            }) {
                Response::Granted { token, .. } => token,
                other => panic!("{other:?}"),
            }
        }
        fn expire(&mut self, session: u64) {
            let answer = self.apply(Command::EndSession {
                node: "a".into(),
                session,
                expired_in: Some(1),
                at_ms: 0,
            });
            assert_eq!(answer, Response::Done);
        }
        fn held(&self) -> usize {
            self.cluster.slots_of("a").count()
        }
        fn session(&self) -> Option<u64> {
            self.cluster.members["a"].session.as_ref().map(|s| s.id)
        }
    }

    fn refused(answer: &Response, words: &str) {
        assert!(
            matches!(answer, Response::Refused(m) if m.contains(words)),
            "expected a refusal saying {words:?}: {answer:?}"
        );
    }

    /// A retried open (its first answer lost, the entry committed anyway) is answered with
    /// the session the first one opened, and the slots granted under it stay (issue 24,
    /// item 8: opening twice vacated them while the node ran their plugins).
    #[test]
    fn a_repeated_open_of_one_process_is_answered_with_its_session() {
        let mut log = Log::new();
        let p = process(1, 10);
        let Response::Session(s) = log.open(p, None) else {
            panic!("no session");
        };
        log.grant(s);
        assert_eq!(log.open(p, None), Response::Session(s));
        assert_eq!(log.held(), 1, "the retried open vacated the slot");
        assert_eq!(log.session(), Some(s));
    }

    /// A process whose lease ran out opens a new session at once: it names the old one
    /// as over.
    #[test]
    fn a_process_that_says_its_session_is_over_opens_a_new_one_at_once() {
        let mut log = Log::new();
        let p = process(1, 10);
        let Response::Session(s) = log.open(p, None) else {
            panic!("no session");
        };
        log.grant(s);
        let Response::Session(t) = log.open(p, Some(s)) else {
            panic!("no new session");
        };
        assert!(t > s);
        assert_eq!(log.held(), 0);
    }

    /// A newer run of the store (a restart, a copy of the data dir, a machine that took
    /// over the disk) waits for the old session to expire by the ordinary rule; until
    /// then the slots stay where they are, and the leader acknowledges no renewal of it
    /// (issue 24, item 7).
    #[test]
    fn a_newer_run_of_the_store_waits_for_the_old_session_to_expire() {
        let mut log = Log::new();
        let (old, new, newest) = (process(1, 10), process(1, 20), process(1, 30));
        let Response::Session(s) = log.open(old, None) else {
            panic!("no session");
        };
        log.grant(s);
        assert!(!log.cluster.superseded("a", s));
        refused(&log.open(new, None), "opens its session then");
        assert_eq!(
            log.held(),
            1,
            "the slot moved while the old run may still run it"
        );
        assert_eq!(log.session(), Some(s));
        assert!(log.cluster.superseded("a", s));
        refused(&log.open(new, None), "opens its session then");
        // The old run cannot take the session back, even once its own lease ran out.
        refused(&log.open(old, None), "superseded");
        refused(&log.open(old, Some(s)), "superseded");
        assert_eq!((log.held(), log.session()), (1, Some(s)));
        // An even newer run takes the place of the newer one.
        refused(&log.open(newest, None), "opens its session then");
        refused(&log.open(new, None), "superseded");
        log.expire(s);
        assert_eq!(log.held(), 0);
        let Response::Session(t) = log.open(newest, None) else {
            panic!("the newest run opens no session after the old one expired");
        };
        assert!(!log.cluster.superseded("a", t));
    }

    /// Another data dir under the same name is refused while the session lives, naming
    /// the process that holds it, and does not supersede it.
    #[test]
    fn another_store_is_refused_while_the_session_lives() {
        let mut log = Log::new();
        let (a, b) = (process(1, 10), process(2, 99));
        let Response::Session(s) = log.open(a, None) else {
            panic!("no session");
        };
        log.grant(s);
        refused(
            &log.open(b, None),
            &StoreId::from_bytes([1; 16]).to_string(),
        );
        assert!(!log.cluster.superseded("a", s));
        assert_eq!(log.open(a, None), Response::Session(s));
        log.expire(s);
        assert!(matches!(log.open(b, None), Response::Session(_)));
        assert!(log.cluster.session_processes["a"].process == Some(b));
    }

    /// A session an older build opened (no process recorded) is superseded like an older
    /// run's.
    #[test]
    fn a_session_of_an_older_build_is_superseded() {
        let mut log = Log::new();
        let Response::Session(s) = log.apply(Command::OpenSession {
            node: "a".into(),
            at_ms: 0,
        }) else {
            panic!("no session");
        };
        log.grant(s);
        refused(&log.open(process(1, 10), None), "a build before store ids");
        assert_eq!(log.held(), 1);
        assert!(log.cluster.superseded("a", s));
        log.expire(s);
        assert!(log.cluster.session_processes.is_empty());
        assert!(matches!(
            log.open(process(1, 10), None),
            Response::Session(_)
        ));
    }
    /// A member's store is recorded when a process opens its session from the version
    /// that addresses Raft's messages, and, at the raise itself, for the sessions open
    /// then; it stays when the session ends, and goes with the member.
    #[test]
    fn members_stores_are_recorded_from_the_raise_and_dropped_with_the_member() {
        let mut log = Log::new();
        let Response::Session(first) = log.open(process(1, 1), None) else {
            panic!()
        };
        assert!(log.cluster.stores.is_empty(), "before the version");
        log.apply(Command::RaiseVersion {
            to: crate::version::ADDRESSED,
        });
        assert_eq!(
            log.cluster.stores.get("a"),
            Some(&StoreId::from_bytes([1; 16])),
            "the live session's store, at the raise"
        );
        log.apply(Command::EndSession {
            node: "a".into(),
            session: first,
            expired_in: None,
            at_ms: 0,
        });
        assert!(
            log.cluster.stores.contains_key("a"),
            "kept past the session"
        );
        assert!(matches!(
            log.open(process(2, 1), None),
            Response::Session(_)
        ));
        assert_eq!(
            log.cluster.stores.get("a"),
            Some(&StoreId::from_bytes([2; 16]))
        );
        let Response::Session(second) = log.open(process(2, 1), None) else {
            panic!()
        };
        log.apply(Command::EndSession {
            node: "a".into(),
            session: second,
            expired_in: None,
            at_ms: 0,
        });
        assert_eq!(
            log.apply(Command::Remove {
                node: "a".into(),
                at_ms: 0
            }),
            Response::Done
        );
        assert!(log.cluster.stores.is_empty(), "gone with the member");
    }
}

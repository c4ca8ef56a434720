//! [`Cluster::apply`]: the state transitions. Deterministic: no clock, no I/O.

use std::collections::BTreeMap;

use super::state::*;
use super::{ClusterId, MAX_STATE_BYTES};

impl Cluster {
    /// Applies a log entry's `proposal`, committed at log `index` in Raft `term`: its
    /// commands one after the other, each answered.
    pub fn apply_proposal(&mut self, index: u64, term: u64, proposal: Proposal) -> Outcome {
        match proposal {
            Proposal::One(command) => Outcome::One(self.apply(index, term, command)),
            Proposal::Batch(commands) => Outcome::Batch(
                commands
                    .into_iter()
                    .map(|c| self.apply(index, term, c))
                    .collect(),
            ),
            Proposal::OneFrom { by, command } => {
                Outcome::One(self.apply_from(&by, index, term, command))
            }
            Proposal::BatchFrom { by, commands } => Outcome::Batch(
                commands
                    .into_iter()
                    .map(|c| self.apply_from(&by, index, term, c))
                    .collect(),
            ),
            Proposal::Stamped {
                member,
                run,
                low,
                commands,
            } => {
                let answers = self.apply_stamped(index, term, (&member, run, low), None, commands);
                Outcome::of(answers)
            }
            Proposal::StampedFrom {
                by,
                run,
                low,
                commands,
            } => {
                let answers = self.apply_stamped(index, term, (&by, run, low), Some(&by), commands);
                Outcome::of(answers)
            }
        }
    }

    /// Applies `command` proposed by member `by`, if it may ([`super::authorize()`]).
    pub(super) fn apply_from(
        &mut self,
        by: &str,
        index: u64,
        term: u64,
        command: Command,
    ) -> Response {
        match super::authorize(self, by, &command) {
            Ok(()) => self.apply(index, term, command),
            Err(why) => Response::Forbidden(why),
        }
    }

    /// Applies `command`, committed at log `index` in Raft `term`, and answers it: one
    /// method per command, below, in the order of [`Command`].
    pub fn apply(&mut self, index: u64, term: u64, command: Command) -> Response {
        match command {
            Command::Join { node, addr, labels } => self.join(node, addr, labels),
            Command::Advertise { node, plugins } => self.advertise_all(index, &node, plugins),
            Command::AdvertiseChanges { node, set, remove } => {
                self.advertise(index, &node, set, remove)
            }
            Command::OpenSession { node, at_ms } => self.open_session(index, node, at_ms),
            Command::OpenSessionOf {
                node,
                at_ms,
                process,
                ended,
            } => self.open_session_of(index, node, at_ms, process, ended),
            Command::EndSession {
                node,
                session,
                expired_in,
                at_ms,
            } => self.end_session(index, term, &node, session, expired_in, at_ms),
            Command::Assign {
                resource,
                slot,
                node,
                session,
                version,
                digest,
                at_ms,
            } => {
                let grant = Slot {
                    owner: node,
                    session,
                    token: index,
                    term,
                    since_ms: at_ms,
                    version,
                    digest,
                    releasing: None,
                };
                self.assign(index, resource, slot, grant)
            }
            Command::Regrant {
                resource,
                slot,
                token,
                at_ms,
            } => self.regrant(index, term, &resource, slot, token, at_ms),
            Command::BeginHandover {
                resource,
                slot,
                token,
                reason,
                to,
                at_ms,
            } => self.begin_handover(
                index,
                &resource,
                slot,
                token,
                Releasing { reason, to, at_ms },
            ),
            Command::Release {
                resource,
                slot,
                token,
                at_ms,
            } => self.release(index, &resource, slot, token, at_ms),
            Command::GiveUp {
                resource,
                slot,
                token,
                until_ms,
                at_ms,
            } => self.give_up(index, &resource, slot, token, until_ms, at_ms),
            Command::SaveState {
                resource,
                slot,
                token,
                data,
            } => self.save_state(resource, slot, token, data),
            Command::SaveSlotState {
                resource,
                slot,
                token,
                data,
            } => self.save_slot_state(resource, slot, token, data),
            Command::SetDraining { node, draining } => self.set_draining(&node, draining),
            Command::Revoke {
                key,
                certificate,
                node,
                at_ms,
            } => self.revoke(
                key,
                Revocation {
                    certificate,
                    node,
                    at_ms,
                },
            ),
            Command::RaiseVersion { to } => self.raise_version(index, to),
            Command::Probe { node } => self.probe(&node),
            Command::Identify { cluster } => self.identify(cluster),
            Command::Remove { node, .. } => self.remove(&node),
        }
    }

    /// `Join`: a member's address and labels (a member is known from its first join).
    fn join(&mut self, node: String, addr: String, labels: BTreeMap<String, String>) -> Response {
        let member = self.members.entry(node).or_default();
        member.addr = addr;
        member.labels = labels;
        Response::Done
    }

    /// `Advertise`: a member's whole set of adverts; what it no longer lists is removed.
    fn advertise_all(
        &mut self,
        index: u64,
        node: &str,
        plugins: BTreeMap<String, Advert>,
    ) -> Response {
        let remove = self.members.get(node).map_or_else(Vec::new, |member| {
            let gone = member.plugins.keys().filter(|r| !plugins.contains_key(*r));
            gone.cloned().collect()
        });
        self.advertise(index, node, plugins, remove)
    }

    /// `OpenSession` (before cluster version 7: no process named): the node's new
    /// session, numbered by its entry; an old one of the node is over, and what it held
    /// is vacated.
    fn open_session(&mut self, index: u64, node: String, at_ms: u64) -> Response {
        let Some(member) = self.members.get_mut(&node) else {
            return unknown(&node);
        };
        let old = member.session.replace(Session {
            id: index,
            opened_ms: at_ms,
        });
        self.session_processes.remove(&node);
        if old.is_some() {
            self.vacate_node(&node, index, at_ms, HistoryKind::Expired);
        }
        Response::Session(index)
    }

    /// `EndSession`: the node released its session, or the leader of `expired_in` saw its
    /// renewals stop (refused from an entry of any other term: only that leader heard
    /// them stop). Its slots are vacated only now.
    fn end_session(
        &mut self,
        index: u64,
        term: u64,
        node: &str,
        session: u64,
        expired_in: Option<u64>,
        at_ms: u64,
    ) -> Response {
        let Some(member) = self.members.get_mut(node) else {
            return unknown(node);
        };
        if member.session.as_ref().map(|s| s.id) != Some(session) {
            return Response::Stale;
        }
        if expired_in.is_some_and(|decided| decided != term) {
            return Response::Stale;
        }
        member.session = None;
        self.session_processes.remove(node);
        let kind = if expired_in.is_some() {
            HistoryKind::Expired
        } else {
            HistoryKind::Released
        };
        self.vacate_node(node, index, at_ms, kind);
        Response::Done
    }

    /// `Assign`: grants `resource`/`slot` to `grant.owner` under `grant.session`, with
    /// the entry's index as its token, if the session is the node's current one, the
    /// slot exists, is free, and the node holds no other slot of the resource.
    fn assign(&mut self, index: u64, resource: String, slot: u32, grant: Slot) -> Response {
        let node = grant.owner.clone();
        let session = grant.session;
        let current = self.members.get(&node).and_then(|m| m.session.as_ref());
        if current.map(|s| s.id) != Some(session) {
            return Response::Refused(format!(
                "node {node} has no session {session} (it expired or was replaced)"
            ));
        }
        // A slot at or above the resource's tickets has no business being owned: the
        // most tickets any member advertises for it bounds the slot numbers.
        let tickets = self
            .members
            .values()
            .filter_map(|m| m.plugins.get(&resource))
            .map(|a| a.tickets)
            .max();
        if let Some(tickets) = tickets
            && slot >= tickets
        {
            return Response::Refused(format!(
                "{resource}/{slot} does not exist: the resource has {tickets} ticket(s)"
            ));
        }
        let slots = self.resources.entry(resource.clone()).or_default();
        if let Some(held) = slots.get(&slot) {
            return Response::Refused(format!(
                "{resource}/{slot} is held by {} (token {})",
                held.owner, held.token
            ));
        }
        if let Some((other, _)) = slots.iter().find(|(_, s)| s.owner == node) {
            return Response::Refused(format!(
                "{node} already holds {resource}/{other}: a node holds at most one slot of a resource"
            ));
        }
        if let Some(preferred) = self.preferred.get_mut(&resource) {
            preferred.remove(&slot);
            if preferred.is_empty() {
                self.preferred.remove(&resource);
            }
        }
        let (token, term, at_ms) = (grant.token, grant.term, grant.since_ms);
        let slots = self.resources.entry(resource.clone()).or_default();
        slots.insert(slot, grant);
        self.record(
            index,
            at_ms,
            (&resource, slot, &node, token, term),
            HistoryKind::Granted,
        );
        Response::Granted { token, term }
    }

    /// `Regrant`: the same slot to the same node after a failed start, under a new token
    /// (the entry's index); not while it is handed over.
    fn regrant(
        &mut self,
        index: u64,
        term: u64,
        resource: &str,
        slot: u32,
        token: u64,
        at_ms: u64,
    ) -> Response {
        let Some(held) = self.current_mut(resource, slot, token) else {
            return Response::Stale;
        };
        if held.releasing.is_some() {
            return Response::Refused(format!(
                "{resource}/{slot} is being handed over; it is not restarted"
            ));
        }
        held.token = index;
        held.term = term;
        let owner = held.owner.clone();
        self.record(
            index,
            at_ms,
            (resource, slot, &owner, index, term),
            HistoryKind::Regranted,
        );
        Response::Granted { token: index, term }
    }

    /// `BeginHandover`: marks the slot releasing (once); its owner stops, cleans up and
    /// releases, and only then is a successor assigned.
    fn begin_handover(
        &mut self,
        index: u64,
        resource: &str,
        slot: u32,
        token: u64,
        releasing: Releasing,
    ) -> Response {
        let Some(held) = self.current_mut(resource, slot, token) else {
            return Response::Stale;
        };
        if held.releasing.is_some() {
            return Response::Done;
        }
        let (reason, at_ms) = (releasing.reason, releasing.at_ms);
        held.releasing = Some(releasing);
        let (owner, granted_in) = (held.owner.clone(), held.term);
        self.record(
            index,
            at_ms,
            (resource, slot, &owner, token, granted_in),
            HistoryKind::HandoverBegun(reason),
        );
        Response::Done
    }

    /// `Release`: the owner gives the slot back under its current token; a move's target
    /// is remembered as the slot's preferred next owner.
    fn release(
        &mut self,
        index: u64,
        resource: &str,
        slot: u32,
        token: u64,
        at_ms: u64,
    ) -> Response {
        let to = self
            .slot(resource, slot)
            .filter(|s| s.token == token)
            .and_then(|s| s.releasing.as_ref()?.to.clone());
        match self.remove_slot(resource, slot, token) {
            Some((owner, granted_in)) => {
                if let Some(to) = to {
                    self.preferred
                        .entry(resource.to_owned())
                        .or_default()
                        .insert(slot, to);
                }
                self.record(
                    index,
                    at_ms,
                    (resource, slot, &owner, token, granted_in),
                    HistoryKind::Released,
                );
                Response::Done
            }
            None => Response::Stale,
        }
    }

    /// `GiveUp`: the owner gives the slot back after repeated failures, and is skipped
    /// for the resource until `until_ms`.
    fn give_up(
        &mut self,
        index: u64,
        resource: &str,
        slot: u32,
        token: u64,
        until_ms: u64,
        at_ms: u64,
    ) -> Response {
        match self.remove_slot(resource, slot, token) {
            Some((owner, granted_in)) => {
                let cooldown = self.cooldown.entry(resource.to_owned()).or_default();
                cooldown.retain(|_, until| *until > at_ms);
                cooldown.insert(owner.clone(), until_ms);
                self.record(
                    index,
                    at_ms,
                    (resource, slot, &owner, token, granted_in),
                    HistoryKind::GaveUp,
                );
                Response::Done
            }
            None => Response::Stale,
        }
    }

    /// `SaveState`: the resource's one blob, fenced by the slot's current token.
    fn save_state(&mut self, resource: String, slot: u32, token: u64, data: Vec<u8>) -> Response {
        if let Some(refused) = self.refuse_save(&resource, slot, token, &data) {
            return refused;
        }
        self.state.insert(resource, Blob { token, data });
        Response::Done
    }

    /// `SaveSlotState` (from [`crate::version::SLOT_STATE`]): the slot's own blob, fenced
    /// by its current token.
    fn save_slot_state(
        &mut self,
        resource: String,
        slot: u32,
        token: u64,
        data: Vec<u8>,
    ) -> Response {
        if self.version < crate::version::SLOT_STATE {
            return Response::Refused(format!(
                "a state per slot needs cluster version {}; it is {}",
                crate::version::SLOT_STATE,
                self.version
            ));
        }
        if let Some(refused) = self.refuse_save(&resource, slot, token, &data) {
            return refused;
        }
        self.slot_state
            .entry(resource)
            .or_default()
            .insert(slot, Blob { token, data });
        Response::Done
    }

    /// `SetDraining`: a member takes no new slots (or does again).
    fn set_draining(&mut self, node: &str, draining: bool) -> Response {
        match self.members.get_mut(node) {
            Some(member) => {
                member.draining = draining;
                Response::Done
            }
            None => unknown(node),
        }
    }

    /// `Revoke`: `key` is refused everywhere from now on (the first revocation of a key
    /// is kept).
    fn revoke(&mut self, key: String, revocation: Revocation) -> Response {
        // The node's session is left to expire: its renewals stop (every node refuses its
        // key), and its slots are vacated only once its lease has run out, as for any
        // node that went silent. Ending it here would grant its slots while its plugins
        // may still run.
        self.revoked.entry(key).or_insert(revocation);
        Response::Done
    }

    /// `RaiseVersion`: the cluster's version, never lowered: a member may already rely on
    /// what the higher version allows. Crossing a version records what it starts to keep.
    fn raise_version(&mut self, index: u64, to: u32) -> Response {
        let before = self.version;
        self.version = self.version.max(to);
        if before < crate::version::ADDRESSED && self.version >= crate::version::ADDRESSED {
            self.record_live_stores();
        }
        if before < crate::version::INSTALL_ORDER && self.version >= crate::version::INSTALL_ORDER {
            self.record_installed(index);
        }
        Response::Done
    }

    /// `Probe`: a test command that only a cluster at [`crate::version::PROBE_VERSION`]
    /// applies (the version gate's own test).
    fn probe(&self, node: &str) -> Response {
        if self.version >= crate::version::PROBE_VERSION {
            Response::Done
        } else {
            Response::Refused(format!(
                "{node}'s probe needs cluster version {}; the cluster runs at {}",
                crate::version::PROBE_VERSION,
                self.version
            ))
        }
    }

    /// `Identify`: the cluster's id, set once by its first leader and never changed.
    fn identify(&mut self, cluster: ClusterId) -> Response {
        match self.id {
            None => {
                self.id = Some(cluster);
                Response::Done
            }
            Some(id) if id == cluster => Response::Done,
            Some(id) => Response::Refused(format!(
                "the cluster's id is {id} already; it never changes"
            )),
        }
    }

    /// `Remove`: a member whose session is over leaves the cluster; its store, if
    /// recorded, is retired for good.
    fn remove(&mut self, node: &str) -> Response {
        let Some(member) = self.members.get(node) else {
            return unknown(node);
        };
        // Only a node whose lease is over: its slots went with its session.
        if member.session.is_some() {
            return Response::Refused(format!(
                "{node} has a session: it may still be running plugins; stop it (or revoke \
                 its certificate) and remove it once its session has expired"
            ));
        }
        self.members.remove(node);
        self.applied.remove(node);
        self.installed.remove(node);
        if let Some(store) = self.stores.remove(node) {
            self.retired
                .entry(node.to_owned())
                .or_default()
                .insert(store);
        }
        for skipped in self.cooldown.values_mut() {
            skipped.remove(node);
        }
        Response::Done
    }

    /// The slot if `token` is its current grant.
    fn current_mut(&mut self, resource: &str, slot: u32, token: u64) -> Option<&mut Slot> {
        self.resources
            .get_mut(resource)?
            .get_mut(&slot)
            .filter(|s| s.token == token)
    }

    /// Removes the slot if `token` is its current grant; returns its owner and the term
    /// of that grant.
    fn remove_slot(&mut self, resource: &str, slot: u32, token: u64) -> Option<(String, u64)> {
        let slots = self.resources.get_mut(resource)?;
        if slots.get(&slot)?.token != token {
            return None;
        }
        let removed = slots.remove(&slot)?;
        if slots.is_empty() {
            self.resources.remove(resource);
        }
        Some((removed.owner, removed.term))
    }

    /// Sets and removes the adverts of a known member, committed at `index`. A new digest
    /// ends the member's cooldown for the resource (a new build gets a fresh chance on a
    /// node that gave up on the old one), and (from [`crate::version::INSTALL_ORDER`]) an
    /// advert of something the member had not installed before is recorded as installed
    /// at `index` ([`Cluster::installed`]).
    fn advertise(
        &mut self,
        index: u64,
        node: &str,
        set: BTreeMap<String, Advert>,
        remove: Vec<String>,
    ) -> Response {
        let Some(member) = self.members.get_mut(node) else {
            return unknown(node);
        };
        for resource in remove {
            member.plugins.remove(&resource);
        }
        let ordered = self.version >= crate::version::INSTALL_ORDER;
        for (resource, advert) in set {
            let changed = member
                .plugins
                .get(&resource)
                .is_none_or(|old| old.digest != advert.digest);
            if changed && let Some(cooldown) = self.cooldown.get_mut(&resource) {
                cooldown.remove(node);
                if cooldown.is_empty() {
                    self.cooldown.remove(&resource);
                }
            }
            if ordered {
                let what = advert.installed();
                let installed = self.installed.entry(node.to_owned()).or_default();
                if installed.get(&resource).is_none_or(|i| i.what != what) {
                    installed.insert(resource.clone(), Installed { at: index, what });
                }
            }
            member.plugins.insert(resource, advert);
        }
        Response::Done
    }

    /// Records every advert as installed at `index`, when the version that orders
    /// installs is reached: all at once, so adverts that stay as they are keep the order
    /// they had (the greater digest), and a member that advertises the same files again
    /// later is not taken for one that installed them. (A plugin with manifest terms is
    /// advertised again under its whole digest right after, `catalog::Entry::digest_at`:
    /// that counts as an install, in the order the members' adverts commit.)
    fn record_installed(&mut self, index: u64) {
        for (node, member) in &self.members {
            let installed = self.installed.entry(node.clone()).or_default();
            for (resource, advert) in &member.plugins {
                let what = advert.installed();
                installed.insert(resource.clone(), Installed { at: index, what });
            }
        }
        self.installed.retain(|_, adverts| !adverts.is_empty());
    }

    /// Vacates every slot `node` holds.
    pub(super) fn vacate_node(&mut self, node: &str, index: u64, at_ms: u64, kind: HistoryKind) {
        let held: Vec<(String, u32, u64, u64)> = self
            .slots_of(node)
            .map(|(r, n, s)| (r.to_owned(), n, s.token, s.term))
            .collect();
        for (resource, slot, token, term) in held {
            self.remove_slot(&resource, slot, token);
            self.record(
                index,
                at_ms,
                (&resource, slot, node, token, term),
                kind.clone(),
            );
        }
    }

    /// Appends to the bounded history; `at` is (resource, slot, node, token, and the
    /// term of the grant that token names).
    fn record(
        &mut self,
        index: u64,
        at_ms: u64,
        at: (&str, u32, &str, u64, u64),
        what: HistoryKind,
    ) {
        let (resource, slot, node, token, term) = at;
        if self.history.len() == HISTORY_LEN {
            self.history.pop_front();
        }
        self.history.push_back(HistoryEntry {
            index,
            at_ms,
            resource: resource.to_owned(),
            slot,
            node: node.to_owned(),
            token,
            what,
            term,
        });
    }
}

impl Cluster {
    /// Why a state save of `(resource, slot)` under `token` is not applied, if it is not:
    /// a blob over the limit, or a token that is not the slot's current grant.
    fn refuse_save(
        &mut self,
        resource: &str,
        slot: u32,
        token: u64,
        data: &[u8],
    ) -> Option<Response> {
        if data.len() > MAX_STATE_BYTES {
            return Some(Response::Refused(format!(
                "state blob of {} bytes exceeds the limit of {MAX_STATE_BYTES}",
                data.len()
            )));
        }
        if self.current_mut(resource, slot, token).is_none() {
            return Some(Response::Stale);
        }
        None
    }
}

fn unknown(node: &str) -> Response {
    Response::Refused(format!("{node} is not a member of the cluster"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cluster::ClusterId;

    const V1: semver::Version = semver::Version::new(1, 0, 0);

    /// Applies commands at consecutive indexes from `start`, in term 1.
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
            for node in ["a", "b"] {
                log.apply(Command::Join {
                    node: node.into(),
                    addr: format!("{node}:1"),
                    labels: BTreeMap::new(),
                });
            }
            log
        }
        fn apply(&mut self, command: Command) -> Response {
            self.index += 1;
            self.cluster.apply(self.index, 1, command)
        }
        fn session(&mut self, node: &str) -> u64 {
            match self.apply(Command::OpenSession {
                node: node.into(),
                at_ms: 0,
            }) {
                Response::Session(id) => id,
                other => panic!("{other:?}"),
            }
        }
        fn assign(&mut self, resource: &str, slot: u32, node: &str, session: u64) -> Response {
            self.apply(Command::Assign {
                resource: resource.into(),
                slot,
                node: node.into(),
                session,
                version: V1,
                digest: "d".into(),
                at_ms: 0,
            })
        }
        fn save(&mut self, token: u64, data: &[u8]) -> Response {
            self.apply(Command::SaveState {
                resource: "r".into(),
                slot: 0,
                token,
                data: data.to_vec(),
            })
        }
    }

    /// An advert of plugin `p` 1.0.0 with `digest`.
    fn advert(digest: &str) -> Advert {
        Advert {
            plugin: "p".into(),
            version: V1,
            digest: digest.into(),
            tickets: 1,
            require: BTreeMap::new(),
            footprint: crate::cluster::Pool::default(),
        }
    }

    fn token(response: Response) -> u64 {
        match response {
            Response::Granted { token, .. } => token,
            other => panic!("not granted: {other:?}"),
        }
    }

    #[test]
    fn a_member_is_removed_only_once_its_session_is_over() {
        let mut log = Log::new();
        let session = log.session("a");
        let token = token(log.assign("r", 0, "a", session));
        let remove = || Command::Remove {
            node: "a".into(),
            at_ms: 9,
        };
        // While its session lives, its plugins may run: refused, nothing changes.
        assert!(matches!(log.apply(remove()), Response::Refused(m) if m.contains("session")));
        assert_eq!(log.cluster.slot("r", 0).map(|s| s.token), Some(token));
        // Revoking its key does not end the session either: it expires when renewals stop.
        log.apply(Command::Revoke {
            key: "sha256:aa".into(),
            certificate: None,
            node: Some("a".into()),
            at_ms: 9,
        });
        assert!(log.cluster.members["a"].session.is_some());
        log.apply(Command::EndSession {
            node: "a".into(),
            session,
            expired_in: Some(1),
            at_ms: 10,
        });
        assert_eq!(log.apply(remove()), Response::Done);
        assert!(!log.cluster.members.contains_key("a"));
        assert!(log.cluster.revoked.contains_key("sha256:aa"));
    }

    /// Issue 26 item 6: from [`crate::version::INSTALL_ORDER`] each member's adverts
    /// record when it installed them; the same files advertised again (a restart, which
    /// withdraws every advert first) keep their index, anything else gets a new one.
    #[test]
    fn adverts_record_when_their_member_installed_them() {
        let mut log = Log::new();
        let at = |log: &Log, node: &str| log.cluster.installed.get(node)?.get("r").map(|i| i.at);
        let set = |node: &str, advert: Advert| Command::AdvertiseChanges {
            node: node.into(),
            set: [("r".to_owned(), advert)].into(),
            remove: Vec::new(),
        };
        log.cluster.version = crate::version::INSTALL_ORDER - 1;
        log.apply(set("a", advert("d")));
        assert!(
            log.cluster.installed.is_empty(),
            "nothing before the version"
        );

        // Raising the version records what every member advertises then, at once.
        log.apply(Command::RaiseVersion {
            to: crate::version::INSTALL_ORDER,
        });
        let first = log.index;
        assert_eq!(at(&log, "a"), Some(first));
        assert_eq!(at(&log, "b"), None, "b advertises nothing");
        log.apply(set("a", advert("d")));
        log.apply(Command::Advertise {
            node: "a".into(),
            plugins: BTreeMap::new(),
        });
        log.apply(set("a", advert("d")));
        assert_eq!(
            at(&log, "a"),
            Some(first),
            "the same files, withdrawn and back"
        );
        let footprint = Advert {
            footprint: crate::cluster::Pool {
                core_instances: 9,
                ..Default::default()
            },
            ..advert("d")
        };
        log.apply(set("a", footprint));
        assert_eq!(at(&log, "a"), Some(first), "a footprint is not installed");

        for changed in [
            advert("e"),
            Advert {
                tickets: 2,
                ..advert("e")
            },
            Advert {
                require: [("zone".to_owned(), "x".to_owned())].into(),
                ..advert("e")
            },
            Advert {
                version: semver::Version::new(2, 0, 0),
                ..advert("e")
            },
        ] {
            let before = at(&log, "a");
            log.apply(set("a", changed));
            assert_eq!(at(&log, "a"), Some(log.index));
            assert_ne!(at(&log, "a"), before);
        }
        log.apply(set("b", advert("d")));
        assert_eq!(at(&log, "b"), Some(log.index));
        log.session("b");
        let session = log.cluster.members["b"].session.as_ref().unwrap().id;
        log.apply(Command::EndSession {
            node: "b".into(),
            session,
            expired_in: Some(1),
            at_ms: 10,
        });
        log.apply(Command::Remove {
            node: "b".into(),
            at_ms: 11,
        });
        assert_eq!(at(&log, "b"), None, "dropped with the member");
        assert!(at(&log, "a").is_some());
    }

    #[test]
    fn adverts_are_replaced_whole_or_changed_in_parts() {
        let mut log = Log::new();
        let held = |log: &Log| -> Vec<(String, String)> {
            log.cluster.members["a"]
                .plugins
                .iter()
                .map(|(r, a)| (r.clone(), a.digest.clone()))
                .collect()
        };
        let changes = |set: &[(&str, &str)], remove: &[&str]| Command::AdvertiseChanges {
            node: "a".into(),
            set: set
                .iter()
                .map(|(r, d)| (r.to_string(), advert(d)))
                .collect(),
            remove: remove.iter().map(|r| r.to_string()).collect(),
        };
        assert_eq!(
            log.apply(changes(&[("r1", "d"), ("r2", "d")], &[])),
            Response::Done
        );
        assert_eq!(
            log.apply(changes(&[("r3", "d"), ("r2", "e")], &["r1"])),
            Response::Done
        );
        assert_eq!(
            held(&log),
            [("r2".into(), "e".into()), ("r3".into(), "d".into())]
        );
        log.apply(Command::Advertise {
            node: "a".into(),
            plugins: [("r4".to_owned(), advert("d"))].into(),
        });
        assert_eq!(held(&log), [("r4".into(), "d".into())], "replaced whole");
        let unknown = Command::AdvertiseChanges {
            node: "zz".into(),
            set: BTreeMap::new(),
            remove: Vec::new(),
        };
        assert_ne!(
            log.apply(unknown),
            Response::Done,
            "an unknown node is refused"
        );
    }

    #[test]
    fn tokens_are_log_indexes_and_increase_per_slot() {
        let mut log = Log::new();
        let a = log.session("a");
        let b = log.session("b");
        let first = token(log.assign("r", 0, "a", a));
        assert_eq!(first, log.index);
        assert_eq!(
            log.apply(Command::Release {
                resource: "r".into(),
                slot: 0,
                token: first,
                at_ms: 0
            }),
            Response::Done
        );
        let second = token(log.assign("r", 0, "b", b));
        assert!(second > first);
        let third = token(log.apply(Command::Regrant {
            resource: "r".into(),
            slot: 0,
            token: second,
            at_ms: 0,
        }));
        assert!(third > second);
        assert_eq!(log.cluster.slot("r", 0).unwrap().owner, "b");
    }

    #[test]
    fn a_slot_is_granted_once_and_a_node_holds_one_slot_per_resource() {
        let mut log = Log::new();
        let a = log.session("a");
        let b = log.session("b");
        token(log.assign("r", 0, "a", a));
        assert!(matches!(log.assign("r", 0, "b", b), Response::Refused(_)));
        assert!(matches!(log.assign("r", 1, "a", a), Response::Refused(_)));
        token(log.assign("r", 1, "b", b));
    }

    #[test]
    fn a_slot_at_or_above_the_tickets_is_never_assigned() {
        let mut log = Log::new();
        let a = log.session("a");
        let b = log.session("b");
        let mut two = advert("d");
        two.tickets = 2;
        log.apply(Command::Advertise {
            node: "a".into(),
            plugins: BTreeMap::from([("r".to_owned(), two)]),
        });
        token(log.assign("r", 1, "a", a));
        assert!(matches!(log.assign("r", 2, "b", b), Response::Refused(_)));
        assert!(log.cluster.slot("r", 2).is_none());
    }

    #[test]
    fn assign_needs_the_current_session() {
        let mut log = Log::new();
        let old = log.session("a");
        let new = log.session("a");
        assert!(matches!(log.assign("r", 0, "a", old), Response::Refused(_)));
        token(log.assign("r", 0, "a", new));
        assert!(matches!(
            log.assign("q", 0, "ghost", 1),
            Response::Refused(_)
        ));
    }

    #[test]
    fn saves_are_fenced_by_the_current_token() {
        let mut log = Log::new();
        let a = log.session("a");
        let b = log.session("b");
        let old = token(log.assign("r", 0, "a", a));
        assert_eq!(log.save(old, b"1"), Response::Done);
        log.apply(Command::EndSession {
            node: "a".into(),
            session: a,
            expired_in: Some(1),
            at_ms: 0,
        });
        assert_eq!(log.save(old, b"zombie"), Response::Stale);
        let new = token(log.assign("r", 0, "b", b));
        assert_eq!(log.save(old, b"zombie"), Response::Stale);
        assert_eq!(log.cluster.state["r"].data, b"1");
        assert_eq!(log.save(new, b"2"), Response::Done);
        assert_eq!(
            log.cluster.state["r"],
            Blob {
                token: new,
                data: b"2".to_vec()
            }
        );
        let big = vec![0; MAX_STATE_BYTES + 1];
        assert!(matches!(log.save(new, &big), Response::Refused(_)));
    }

    #[test]
    fn a_state_per_slot_is_kept_per_slot_fenced_and_only_from_its_version() {
        let mut log = Log::new();
        let a = log.session("a");
        let b = log.session("b");
        let zero = token(log.assign("r", 0, "a", a));
        let one = token(log.assign("r", 1, "b", b));
        let save = |slot: u32, token: u64, data: &[u8]| Command::SaveSlotState {
            resource: "r".into(),
            slot,
            token,
            data: data.to_vec(),
        };
        let early = log.apply(save(0, zero, b"0"));
        assert!(
            matches!(&early, Response::Refused(why) if why.contains("needs cluster version 7")),
            "{early:?}"
        );
        log.apply(Command::RaiseVersion {
            to: crate::version::SLOT_STATE,
        });
        assert_eq!(log.apply(save(0, zero, b"zero")), Response::Done);
        assert_eq!(log.apply(save(1, one, b"one")), Response::Done);
        // Each slot's own token fences it: slot 1's token does not save slot 0.
        assert_eq!(log.apply(save(0, one, b"not mine")), Response::Stale);
        let blobs = &log.cluster.slot_state["r"];
        assert_eq!((&blobs[&0].data[..], blobs[&0].token), (&b"zero"[..], zero));
        assert_eq!((&blobs[&1].data[..], blobs[&1].token), (&b"one"[..], one));
        // The shared blob is another thing altogether.
        assert!(log.cluster.state.is_empty());
        let big = vec![0; MAX_STATE_BYTES + 1];
        assert!(matches!(
            log.apply(save(1, one, &big)),
            Response::Refused(_)
        ));
        // A member saves only a slot it holds.
        let forwarded = log.cluster.apply_proposal(
            99,
            1,
            Proposal::OneFrom {
                by: "a".into(),
                command: save(1, one, b"a's"),
            },
        );
        assert!(
            matches!(forwarded, Outcome::One(Response::Forbidden(_))),
            "{forwarded:?}"
        );
        assert_eq!(log.cluster.slot_state["r"][&1].data, b"one");
    }

    #[test]
    fn a_releasing_slot_still_saves_then_releases_and_never_restarts() {
        let mut log = Log::new();
        let a = log.session("a");
        let t = token(log.assign("r", 0, "a", a));
        let begin = Command::BeginHandover {
            resource: "r".into(),
            slot: 0,
            token: t,
            reason: Handover::Moved,
            to: Some("b".into()),
            at_ms: 0,
        };
        assert_eq!(log.apply(begin.clone()), Response::Done);
        assert_eq!(log.apply(begin), Response::Done, "idempotent");
        assert_eq!(log.save(t, b"last words"), Response::Done);
        assert!(matches!(
            log.apply(Command::Regrant {
                resource: "r".into(),
                slot: 0,
                token: t,
                at_ms: 0
            }),
            Response::Refused(_)
        ));
        let release = Command::Release {
            resource: "r".into(),
            slot: 0,
            token: t,
            at_ms: 0,
        };
        assert_eq!(log.apply(release.clone()), Response::Done);
        assert_eq!(log.apply(release), Response::Stale);
        assert!(log.cluster.resources.is_empty());
        assert_eq!(
            log.cluster.preferred["r"][&0], "b",
            "the move's target is kept"
        );
        let b = log.session("b");
        token(log.assign("r", 0, "b", b));
        assert!(log.cluster.preferred.is_empty(), "a grant clears it");
        assert_eq!(log.cluster.state["r"].data, b"last words");
    }

    #[test]
    fn ending_or_replacing_a_session_vacates_its_slots() {
        let mut log = Log::new();
        let a = log.session("a");
        token(log.assign("r", 0, "a", a));
        token(log.assign("q", 0, "a", a));
        log.session("a");
        assert_eq!(log.cluster.slots_of("a").count(), 0);
        let kinds: Vec<_> = log.cluster.history.iter().map(|h| h.what.clone()).collect();
        assert_eq!(
            kinds,
            [
                HistoryKind::Granted,
                HistoryKind::Granted,
                HistoryKind::Expired,
                HistoryKind::Expired
            ]
        );
        let stale = log.apply(Command::EndSession {
            node: "a".into(),
            session: a,
            expired_in: Some(1),
            at_ms: 0,
        });
        assert_eq!(
            stale,
            Response::Stale,
            "an old session cannot end the new one"
        );
        assert!(log.cluster.members["a"].session.is_some());
    }

    #[test]
    fn an_expiry_counts_only_in_the_term_that_decided_it() {
        let mut log = Log::new();
        let a = log.session("a");
        let r = token(log.assign("r", 0, "a", a));
        let expire = |term| Command::EndSession {
            node: "a".into(),
            session: a,
            expired_in: Some(term),
            at_ms: 0,
        };
        // Decided by the leader of term 1, appended by the leader of term 2 (forwarded).
        log.index += 1;
        assert_eq!(log.cluster.apply(log.index, 2, expire(1)), Response::Stale);
        assert!(log.cluster.members["a"].session.is_some());
        assert_eq!(log.cluster.slot("r", 0).map(|s| s.token), Some(r));
        log.index += 1;
        assert_eq!(log.cluster.apply(log.index, 2, expire(2)), Response::Done);
        assert!(log.cluster.members["a"].session.is_none());
        assert!(log.cluster.slot("r", 0).is_none());
    }

    #[test]
    fn give_up_vacates_and_records_a_cooldown() {
        let mut log = Log::new();
        let a = log.session("a");
        let t = token(log.assign("r", 0, "a", a));
        let give_up = Command::GiveUp {
            resource: "r".into(),
            slot: 0,
            token: t,
            until_ms: 5_000,
            at_ms: 1_000,
        };
        assert_eq!(log.apply(give_up), Response::Done);
        assert!(log.cluster.slot("r", 0).is_none());
        assert_eq!(log.cluster.cooldown["r"]["a"], 5_000);

        let advertise = |digest: &str| Command::Advertise {
            node: "a".into(),
            plugins: [("r".to_owned(), advert(digest))].into(),
        };
        log.apply(advertise("d"));
        assert!(
            log.cluster.cooldown.is_empty(),
            "first advert of r on a: new"
        );
        log.cluster
            .cooldown
            .entry("r".into())
            .or_default()
            .insert("a".into(), 5_000);
        log.apply(advertise("d"));
        assert_eq!(
            log.cluster.cooldown["r"]["a"], 5_000,
            "same version: still cooling down"
        );
        log.apply(advertise("e"));
        assert!(
            log.cluster.cooldown.is_empty(),
            "a new version gets a fresh chance"
        );
    }

    #[test]
    fn a_batch_answers_each_command_and_history_is_bounded() {
        let mut log = Log::new();
        let a = log.session("a");
        let commands = (0..HISTORY_LEN as u32 + 10)
            .map(|i| Command::Assign {
                resource: format!("r{i}"),
                slot: 0,
                node: "a".into(),
                session: a,
                version: V1,
                digest: "d".into(),
                at_ms: 0,
            })
            .collect();
        log.index += 1;
        let Outcome::Batch(answers) =
            log.cluster
                .apply_proposal(log.index, 1, Proposal::Batch(commands))
        else {
            panic!()
        };
        assert!(
            answers
                .iter()
                .all(|r| matches!(r, Response::Granted { .. }))
        );
        assert_eq!(log.cluster.history.len(), HISTORY_LEN);
        assert_eq!(log.cluster.slots_of("a").count(), HISTORY_LEN + 10);
    }

    #[test]
    fn apply_is_deterministic() {
        let run = || {
            let mut log = Log::new();
            let a = log.session("a");
            let t = token(log.assign("r", 0, "a", a));
            log.save(t, b"x");
            log.cluster
        };
        assert_eq!(run(), run());
        let cluster = run();
        let bytes = postcard::to_allocvec(&cluster).unwrap();
        assert_eq!(postcard::from_bytes::<Cluster>(&bytes).unwrap(), cluster);
    }

    #[test]
    fn a_cluster_is_identified_once_and_its_id_never_changes() {
        let mut log = Log::new();
        let (first, other) = (
            ClusterId::from_bytes([1; 16]),
            ClusterId::from_bytes([2; 16]),
        );
        assert_eq!(log.cluster.id, None);
        assert_eq!(
            log.apply(Command::Identify { cluster: first }),
            Response::Done
        );
        assert_eq!(
            log.apply(Command::Identify { cluster: first }),
            Response::Done
        );
        let again = log.apply(Command::Identify { cluster: other });
        assert!(
            matches!(&again, Response::Refused(why) if why.contains(&first.to_string())),
            "{again:?}"
        );
        assert_eq!(log.cluster.id, Some(first));
        let forwarded = log.cluster.apply_proposal(
            99,
            1,
            Proposal::OneFrom {
                by: "a".into(),
                command: Command::Identify { cluster: other },
            },
        );
        assert!(
            matches!(forwarded, Outcome::One(Response::Forbidden(_))),
            "{forwarded:?}"
        );
        assert_eq!(log.cluster.id, Some(first));
    }

    #[test]
    fn the_cluster_version_only_rises_and_the_probe_needs_it() {
        let mut log = Log::new();
        let probe = || Command::Probe { node: "a".into() };
        let probe_version = crate::version::PROBE_VERSION;
        let early = log.apply(probe());
        assert!(
            matches!(&early, Response::Refused(why) if why.contains(&format!("needs cluster version {probe_version}"))),
            "{early:?}"
        );
        assert_eq!(
            log.apply(Command::RaiseVersion { to: probe_version }),
            Response::Done
        );
        assert_eq!(log.cluster.version, probe_version);
        // Never lowered: a leader of an older build cannot take it back.
        assert_eq!(log.apply(Command::RaiseVersion { to: 6 }), Response::Done);
        assert_eq!(log.cluster.version, probe_version);
        assert_eq!(log.apply(probe()), Response::Done);
        // A member may not raise it, and probes only for itself.
        for command in [
            Command::RaiseVersion { to: 9 },
            Command::Probe { node: "b".into() },
        ] {
            let forwarded = log.cluster.apply_proposal(
                99,
                1,
                Proposal::OneFrom {
                    by: "a".into(),
                    command,
                },
            );
            assert!(
                matches!(forwarded, Outcome::One(Response::Forbidden(_))),
                "{forwarded:?}"
            );
        }
        assert_eq!(log.cluster.version, probe_version);
    }
}

//! What the node's tasks share: its name, the control-plane handle and its lease.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::cluster::{Cluster, Command, Process, Response};
use crate::failures::Failures;
use crate::ownership::{Lease, LeaseTiming};
use crate::raft::{Control, ProposeError};
use crate::rpc::Rpc;
use crate::runtime::NodeLease;
use crate::supervisor::LiveStarts;

pub struct Shared {
    pub me: String,
    /// This process: the node's store and this run's incarnation. It opens the node's
    /// sessions (`cluster/sessions.rs`).
    pub process: Process,
    pub control: Control,
    pub timing: LeaseTiming,
    lease: Mutex<Lease>,
    /// D, published for the tasks that time stops by it.
    deadline: watch::Sender<Option<Instant>>,
    /// The session and D, published for the engine and the effect check (atomics read
    /// at every epoch tick of every instance).
    pub node_lease: Arc<NodeLease>,
    /// Instances that may still execute `start`: a new session opens only once the old
    /// one's are all stopped.
    pub live: LiveStarts,
    /// Its plugins' last failed starts, for the status it answers (`crate::failures`).
    pub failures: Arc<Failures>,
    /// The node's signed-call endpoint, set once bound (it serves this node's tasks, so
    /// it is created after them).
    rpc: OnceLock<Arc<Rpc>>,
    /// On the leader: the renewal rounds (`renewal_round.rs`).
    pub renewal_rounds: super::renewal_round::RenewalRounds,
}

impl Shared {
    pub fn new(
        me: String,
        control: Control,
        timing: LeaseTiming,
        enforced: bool,
        incarnation: u64,
    ) -> Self {
        Self {
            me,
            process: Process {
                store: control.store_id(),
                incarnation,
            },
            control,
            timing,
            lease: Mutex::new(Lease::new(timing)),
            deadline: watch::Sender::new(None),
            node_lease: Arc::new(NodeLease::new(enforced)),
            live: LiveStarts::default(),
            failures: Arc::default(),
            rpc: OnceLock::new(),
            renewal_rounds: Default::default(),
        }
    }

    pub fn set_rpc(&self, rpc: Arc<Rpc>) {
        let _ = self.rpc.set(rpc);
    }

    /// The signed-call endpoint. Tasks that call peers start after it is set.
    pub fn rpc(&self) -> &Arc<Rpc> {
        self.rpc
            .get()
            .expect("the node binds its endpoint before starting its tasks")
    }

    /// Sends `request` as a signed call of `kind` to node `name` at `addr` (resolved now;
    /// the first address wins) and decodes its answer.
    pub async fn call<Q: serde::Serialize, A: serde::de::DeserializeOwned>(
        &self,
        name: &str,
        addr: &str,
        kind: u16,
        request: &Q,
    ) -> Result<A, String> {
        let reply = self.call_bytes(name, addr, kind, request).await?;
        crate::rpc::decode(&reply).map_err(|e| format!("bad answer from {name}: {e}"))
    }

    /// As [`Shared::call`], returning the answer's bytes undecoded (for an answer a newer
    /// build extends at its end: `crate::rpc::decode_with_tail`).
    pub async fn call_bytes<Q: serde::Serialize>(
        &self,
        name: &str,
        addr: &str,
        kind: u16,
        request: &Q,
    ) -> Result<Vec<u8>, String> {
        let addr = tokio::net::lookup_host(addr)
            .await
            .map_err(|e| format!("{addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("{addr}: no address"))?;
        let payload = postcard::to_allocvec(request).map_err(|e| e.to_string())?;
        self.rpc()
            .call(name, addr, kind, payload)
            .await
            .map_err(|e| e.to_string())
    }

    /// Proposes a command through the leader and waits until it is applied here. The
    /// error says whether the command may have been applied and whether to try again.
    pub async fn propose(&self, command: Command) -> Result<Response, ProposeError> {
        self.control.propose(command).await
    }

    /// Proposes several commands as one log entry; one answer per command, in order.
    pub async fn propose_batch(
        &self,
        commands: Vec<Command>,
    ) -> Result<Vec<Response>, ProposeError> {
        self.control.propose_batch(commands).await
    }

    /// Reads the local replica of the cluster state.
    pub fn read<T>(&self, f: impl FnOnce(&Cluster) -> T) -> T {
        let state = self.control.state();
        let cluster = state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&cluster)
    }

    /// Changes the lease and publishes its deadline.
    pub fn with_lease<T>(&self, f: impl FnOnce(&mut Lease) -> T) -> T {
        let mut lease = self.lease.lock().unwrap_or_else(|p| p.into_inner());
        let out = f(&mut lease);
        let deadline = lease.deadline();
        self.node_lease.publish(lease.session(), deadline);
        self.deadline.send_if_modified(|current| {
            let changed = *current != deadline;
            *current = deadline;
            changed
        });
        out
    }

    /// The current session, if the node has one.
    pub fn session(&self) -> Option<u64> {
        self.with_lease(|lease| lease.session())
    }

    /// Whether the node may act at `now`: a current session and before its deadline.
    pub fn lease_valid(&self, now: Instant) -> bool {
        self.with_lease(|lease| lease.session().is_some_and(|s| lease.valid_for(s, now)))
    }

    pub fn deadline(&self) -> watch::Receiver<Option<Instant>> {
        self.deadline.subscribe()
    }
}

/// Wall-clock milliseconds since the Unix epoch, for the `at_ms` of commands (display
/// and minimum-term checks only; safety never depends on it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

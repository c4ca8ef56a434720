//! [`Rpc`]: a node's endpoint for signed calls, both ways.
//!
//! `bind` starts a transport whose handler is the serving side (`server.rs`); `call`
//! seals the request per attempt with the signer of the connection the attempt uses, and
//! opens the response with the certificate of the peer that answered on that connection.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use super::counts::KindCount;
use super::error::RpcError;
use super::operator::OperatorService;
use super::server::{Core, Inbound, Operators};
use super::service::Service;
use super::verifiers::Verifiers;
use crate::cluster::ClusterCell;
use crate::envelope::{ClockLog, Gate, REPLAY_WINDOW, Reason, RejectLog, Sealer, unix_ms};
use crate::pki::{self, Kind};
use crate::transport::{
    Local, MAX_STREAMS_PER_CONNECTION, TlsFiles, Transport, TransportConfig, TransportError,
};

// Why the peer's replay window cannot overflow: a call is sealed (numbered) only once its
// attempt holds a stream, so the numbers a peer can receive out of order from us are those
// on streams in flight, at most `MAX_STREAMS_PER_CONNECTION` per connection. Our requests
// on our connection and our responses on the peer's share one numbering, and a retiring
// connection may drain next to its successor: four connections' worth must fit.
const _: () = assert!(4 * MAX_STREAMS_PER_CONNECTION as u64 <= REPLAY_WINDOW);

/// One node's signed-call endpoint: serves its [`Service`] and calls other nodes.
pub struct Rpc {
    me: String,
    transport: Arc<Transport>,
    pub(super) core: Arc<Core>,
}

impl Rpc {
    /// Binds a transport for `files` (which must hold a node certificate) that answers
    /// signed calls with `service`. `incarnation` must grow from run to run of this node
    /// (see [`Sealer::new`]). Its envelopes carry, and those of another cluster are
    /// refused by, the cluster id `cluster` holds once it holds one.
    pub async fn bind(
        config: TransportConfig,
        files: TlsFiles,
        incarnation: u64,
        cluster: ClusterCell,
        service: Arc<dyn Service>,
    ) -> Result<Rpc, RpcError> {
        let identity = pki::load_identity(&files.cert, &files.key)
            .map_err(TransportError::from)?
            .identity;
        if identity.kind != Kind::Node {
            return Err(RpcError::NotANode { identity });
        }
        let me = identity.name;
        let core = Arc::new(Core {
            sealer: Sealer::new(me.clone(), incarnation).in_cluster(cluster.clone()),
            gate: Gate::new(me.clone()).in_cluster(cluster),
            rejects: RejectLog::default(),
            clocks: ClockLog::default(),
            counts: Default::default(),
            verifiers: Verifiers::default(),
            service,
            operators: Default::default(),
        });
        let handler = Arc::new(Inbound { core: core.clone() });
        let transport = Transport::bind(config, files, handler).await?;
        Ok(Rpc {
            me,
            transport: Arc::new(transport),
            core,
        })
    }

    /// This run's incarnation, as its envelopes carry it.
    pub fn incarnation(&self) -> u64 {
        self.core.sealer.incarnation()
    }

    /// Calls node `peer` at `addr` with a message of `kind` and returns the payload of its
    /// verified answer.
    pub async fn call(
        &self,
        peer: &str,
        addr: SocketAddr,
        kind: u16,
        payload: Vec<u8>,
    ) -> Result<Vec<u8>, RpcError> {
        self.core.counts.sent(kind);
        let answer = self.exchange(peer, addr, kind, payload).await;
        if answer.is_err() {
            self.core.counts.failed(kind);
        }
        answer
    }

    /// One call, uncounted.
    async fn exchange(
        &self,
        peer: &str,
        addr: SocketAddr,
        kind: u16,
        payload: Vec<u8>,
    ) -> Result<Vec<u8>, RpcError> {
        let sealer = &self.core.sealer;
        let seal =
            |local: &Local| sealer.seal(&local.signer, peer, kind, &payload, SystemTime::now());
        let (response, answered) = match self.transport.request_with(peer, addr, seal).await {
            Ok(found) => found,
            Err(TransportError::Remote { peer, message }) => {
                return Err(RpcError::Remote { peer, message });
            }
            Err(e) => return Err(e.into()),
        };
        let verifier = self
            .core
            .verifiers
            .get(&answered)
            .map_err(|reason| RpcError::Verifier {
                peer: peer.to_owned(),
                reason,
            })?;
        let envelope = self
            .core
            .gate
            .open(&response, &answered.identity.name, &verifier)
            .map_err(|rejection| {
                self.core
                    .rejects
                    .record(&answered.identity.name, &rejection, Instant::now());
                RpcError::Rejected {
                    peer: peer.to_owned(),
                    rejection,
                }
            })?;
        self.core.clocks.observe(
            &answered.identity.name,
            envelope.sent_at_ms,
            unix_ms(SystemTime::now()),
            Instant::now(),
        );
        if envelope.kind != kind {
            return Err(RpcError::WrongKind {
                peer: peer.to_owned(),
                sent: kind,
                received: envelope.kind,
            });
        }
        Ok(envelope.payload)
    }

    /// Starts answering operator requests with `handler` (replacing any earlier one).
    /// Until this is called, operators get a refusal saying the node does not serve them
    /// yet; node peers are never affected.
    pub fn serve_operators(&self, handler: Arc<dyn OperatorService>) {
        self.core
            .operators
            .store(Some(Arc::new(Operators(handler))));
    }

    /// Forgets what the envelope gate remembers of node `name`, which the cluster removed
    /// ([`Gate::forget`]).
    pub fn forget_sender(&self, name: &str) {
        self.core.gate.forget(name);
    }

    /// Sets the revoked certificate fingerprints (see [`Transport::set_revoked`]).
    pub fn set_revoked(&self, fingerprints: BTreeSet<String>) {
        self.transport.set_revoked(fingerprints);
    }

    /// Our node name.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// The address the transport is bound to.
    pub fn local_addr(&self) -> Result<SocketAddr, RpcError> {
        Ok(self.transport.local_addr()?)
    }

    /// The transport, e.g. for its connections, TLS state and counters.
    pub fn transport(&self) -> &Arc<Transport> {
        &self.transport
    }

    /// Rejected envelopes (requests and responses) per reason since `bind`.
    pub fn rejections(&self) -> [(Reason, u64); Reason::ALL.len()] {
        self.core.rejects.counts()
    }

    /// Calls sent, failed and served per message kind since `bind` (kinds with traffic).
    pub fn counts(&self) -> Vec<KindCount> {
        self.core.counts.snapshot()
    }

    /// Rejected envelopes for one `reason` since `bind`.
    pub fn rejected(&self, reason: Reason) -> u64 {
        self.core.rejects.count(reason)
    }

    /// Shuts the transport down (see [`Transport::close`]).
    pub async fn close(&self) {
        self.transport.close().await;
    }
}

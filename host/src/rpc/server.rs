//! The serving side: opens each request envelope, calls the service, seals the answer.
//!
//! The request is opened with the gate and the verifier of the connection's peer
//! certificate; a rejection is counted and logged (rate-limited) and answered with an
//! error, and the service never sees it. The answer is sealed for the requester with the
//! signer of the identity we presented on that same connection ([`Local`]), which is the
//! certificate the requester will verify it with.
//!
//! Operator peers take another path (`operator.rs`): no envelope, the body goes to the
//! [`OperatorService`] registered with [`super::Rpc::serve_operators`], if any.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwapOption;

use super::counts::Counts;
use super::operator::{OPERATOR_PREFIX, OPERATOR_PREFIX_ANY, OperatorService};
use super::service::Service;
use super::verifiers::Verifiers;
use crate::envelope::{ClockLog, Gate, RejectLog, Sealer, unix_ms};
use crate::future::BoxFuture;
use crate::pki::Kind;
use crate::transport::{Handler, Local, PeerInfo};

/// What both sides of one node's calls share.
pub(crate) struct Core {
    /// Numbers and signs our envelopes, requests and responses alike.
    pub(crate) sealer: Sealer,
    /// Checks incoming envelopes, requests and responses alike.
    pub(crate) gate: Gate,
    /// Counts and logs rejections.
    pub(crate) rejects: RejectLog,
    /// Reports peers whose clocks are off.
    pub(crate) clocks: ClockLog,
    /// Calls sent, failed and served, per kind.
    pub(crate) counts: Counts,
    /// Verifiers of peer certificates.
    pub(crate) verifiers: Verifiers,
    /// Answers verified requests.
    pub(crate) service: Arc<dyn Service>,
    /// Answers operator requests, once the node registered a service for them.
    pub(crate) operators: ArcSwapOption<Operators>,
}

/// The registered operator service (a sized wrapper, for `ArcSwapOption`).
pub(crate) struct Operators(pub(crate) Arc<dyn OperatorService>);

/// The transport handler.
pub(crate) struct Inbound {
    pub(crate) core: Arc<Core>,
}

impl Handler for Inbound {
    fn handle(
        &self,
        peer: PeerInfo,
        local: Local,
        body: Vec<u8>,
    ) -> BoxFuture<Result<Vec<u8>, String>> {
        let core = self.core.clone();
        Box::pin(async move { core.answer(peer, local, body).await })
    }
}

impl Core {
    async fn answer(&self, peer: PeerInfo, local: Local, body: Vec<u8>) -> Result<Vec<u8>, String> {
        if peer.identity.kind == Kind::Operator {
            return self.answer_operator(peer, body).await;
        }
        // A node's own certificate may ask one thing of the admin service: to drain or
        // undrain that node (`tenure drain --self`, a Kubernetes preStop hook). The
        // service refuses everything else with NODE_CERT_REFUSAL.
        if body.starts_with(OPERATOR_PREFIX_ANY) {
            return self.answer_operator(peer, body).await;
        }
        let name = peer.identity.name.as_str();
        let verifier = self
            .verifiers
            .get(&peer)
            .map_err(|e| format!("no verifier for your certificate: {e}"))?;
        let envelope = match self.gate.open(&body, name, &verifier) {
            Ok(envelope) => {
                self.clocks.observe(
                    name,
                    envelope.sent_at_ms,
                    unix_ms(SystemTime::now()),
                    Instant::now(),
                );
                envelope
            }
            Err(rejection) => {
                self.rejects.record(name, &rejection, Instant::now());
                return Err(format!(
                    "envelope rejected ({}): {rejection}",
                    rejection.reason()
                ));
            }
        };
        let kind = envelope.kind;
        self.counts.served(kind);
        let reply = self.service.call(&peer, kind, envelope.payload).await?;
        Ok(self
            .sealer
            .seal(&local.signer, name, kind, &reply, SystemTime::now()))
    }

    /// An operator's request: to the operator service, unsigned both ways.
    async fn answer_operator(&self, peer: PeerInfo, body: Vec<u8>) -> Result<Vec<u8>, String> {
        let Some(request) = body.strip_prefix(OPERATOR_PREFIX) else {
            if let Some(rest) = body.strip_prefix(OPERATOR_PREFIX_ANY) {
                let theirs: String = rest
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .map(|&b| b as char)
                    .take(8)
                    .collect();
                return Err(format!(
                    "this node speaks operator protocol tenure-operator/{}, the client \
                     tenure-operator/{theirs}: use the `tenure` binary of the release the \
                     node runs (`tenure --version` prints both)",
                    crate::version::ADMIN_VERSION
                ));
            }
            return Err(format!(
                "{} may not send envelopes: only nodes can (operators send admin requests, \
                 e.g. with `tenure status`)",
                peer.identity
            ));
        };
        let Some(operators) = self.operators.load_full() else {
            return Err(format!(
                "node {} does not serve operator requests (yet): it is still starting, \
                 or runs without the admin service",
                self.sealer.me()
            ));
        };
        operators.0.call(&peer, request.to_vec()).await
    }
}

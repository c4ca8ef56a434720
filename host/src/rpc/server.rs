//! The serving side: opens each request envelope, calls the service, seals the answer.
//!
//! The request is opened with the gate and the verifier of the connection's peer
//! certificate; a rejection is counted and logged (rate-limited) and answered with an
//! error, and the service never sees it. The answer is sealed for the requester with the
//! signer of the identity we presented on that same connection ([`Local`]), which is the
//! certificate the requester will verify it with.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use super::service::Service;
use super::verifiers::Verifiers;
use crate::envelope::{Gate, RejectLog, Sealer};
use crate::pki::Kind;
use crate::runtime::BoxFuture;
use crate::transport::{Handler, Local, PeerInfo};

/// What both sides of one node's calls share.
pub(crate) struct Core {
    /// Numbers and signs our envelopes, requests and responses alike.
    pub(crate) sealer: Sealer,
    /// Checks incoming envelopes, requests and responses alike.
    pub(crate) gate: Gate,
    /// Counts and logs rejections.
    pub(crate) rejects: RejectLog,
    /// Verifiers of peer certificates.
    pub(crate) verifiers: Verifiers,
    /// Answers verified requests.
    pub(crate) service: Arc<dyn Service>,
}

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
        if peer.identity.kind != Kind::Node {
            return Err(format!(
                "{} may not send envelopes: only nodes can (operator requests are not supported yet)",
                peer.identity
            ));
        }
        let name = peer.identity.name.as_str();
        let verifier = self
            .verifiers
            .get(&peer)
            .map_err(|e| format!("no verifier for your certificate: {e}"))?;
        let envelope = match self.gate.open(&body, name, &verifier, SystemTime::now()) {
            Ok(envelope) => envelope,
            Err(rejection) => {
                self.rejects.record(name, &rejection, Instant::now());
                return Err(format!(
                    "envelope rejected ({}): {rejection}",
                    rejection.reason()
                ));
            }
        };
        let kind = envelope.kind;
        let reply = self.service.call(&peer, kind, envelope.payload).await?;
        Ok(self
            .sealer
            .seal(&local.signer, name, kind, &reply, SystemTime::now()))
    }
}

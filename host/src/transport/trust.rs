//! The CA bundle turned into the two webpki verifiers a node needs, and re-verification of
//! established connections against them.
//!
//! A node verifies servers when it dials (chain to a CA in the bundle, and the name dialed
//! in a `DNS:` SAN) and clients when it accepts (chain only; the identity comes from the
//! URI SAN afterwards). Both verifiers are built from the same bundle, which may hold
//! several CAs so that a CA can be rotated; a [`Trust`] is immutable and replaced whole.
//!
//! When the bundle changes, TLS does not revisit connections already established, so
//! [`Trust::check`] runs the new verifier over a connection's stored peer chain: that is
//! how a peer whose CA was removed loses its connection. It also catches a peer
//! certificate that expired while its connection was up, but only at such a moment.
//!
//! Not here: revocation lists (revoked fingerprints are replicated state, checked above
//! this layer) and name checks beyond webpki's `DNS:` matching (see `peer.rs`).

use std::sync::Arc;
use std::time::SystemTime;

use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use super::registry::Direction;
use crate::pki;

/// Verifiers built from one CA bundle.
pub(crate) struct Trust {
    /// Verifies the certificates of clients that dial us.
    pub(crate) clients: Arc<dyn ClientCertVerifier>,
    /// Verifies the certificates of servers we dial.
    pub(crate) servers: Arc<WebPkiServerVerifier>,
    /// The fingerprints of the bundle's CAs, in file order.
    pub(crate) ca_fingerprints: Vec<String>,
    /// Each CA's fingerprint and end of validity, in file order (for the metrics).
    pub(crate) ca_expiries: Vec<(String, SystemTime)>,
}

impl Trust {
    /// Verifiers trusting exactly the CAs in `bundle`.
    pub(crate) fn from_bundle(
        bundle: &[CertificateDer<'static>],
        provider: &Arc<CryptoProvider>,
    ) -> Result<Trust, String> {
        let mut roots = RootCertStore::empty();
        for (index, ca) in bundle.iter().enumerate() {
            roots.add(ca.clone()).map_err(|e| {
                format!(
                    "CA certificate {} of {} ({}) cannot be a trust anchor: {e}",
                    index + 1,
                    bundle.len(),
                    pki::fingerprint(ca)
                )
            })?;
        }
        let roots = Arc::new(roots);
        let clients = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| format!("cannot build the client certificate verifier: {e}"))?;
        let servers = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| format!("cannot build the server certificate verifier: {e}"))?;
        Ok(Trust {
            clients,
            servers,
            ca_fingerprints: bundle.iter().map(|ca| pki::fingerprint(ca)).collect(),
            // A trust anchor rustls took is a certificate that parses: `not_after` has it.
            ca_expiries: bundle
                .iter()
                .filter_map(|ca| Some((pki::fingerprint(ca), pki::not_after(ca)?)))
                .collect(),
        })
    }

    /// Verifies a peer chain as the handshake would now: as a client's if the peer dialed
    /// us, as the server `peer_name`'s if we dialed it.
    pub(crate) fn check(
        &self,
        direction: Direction,
        peer_name: &str,
        chain: &[CertificateDer<'static>],
    ) -> Result<(), rustls::Error> {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Err(rustls::Error::NoCertificatesPresented);
        };
        let now = UnixTime::now();
        match direction {
            Direction::Accepted => self
                .clients
                .verify_client_cert(leaf, intermediates, now)
                .map(drop),
            Direction::Dialed => {
                let name = ServerName::try_from(peer_name.to_owned())
                    .map_err(|e| rustls::Error::General(e.to_string()))?;
                self.servers
                    .verify_server_cert(leaf, intermediates, &name, &[], now)
                    .map(drop)
            }
        }
    }
}

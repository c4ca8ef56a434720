//! Our own certificate, swappable under running TLS configurations.
//!
//! rustls asks a resolver for the certificate at every handshake, in both roles. So one
//! [`OwnCert`] implements both `ResolvesServerCert` and `ResolvesClientCert` over an
//! `ArcSwap`: storing a new [`Own`] makes every later handshake, dialed or accepted, present
//! the new certificate, while connections already established keep theirs (TLS never
//! re-authenticates a connection), so nothing in flight fails.
//!
//! It deliberately ignores the CA hints and signature schemes a peer offers: a node has
//! exactly one certificate, and a peer that cannot accept it must refuse it loudly rather
//! than get a handshake without client authentication.

use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use rustls::SignatureScheme;
use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::pki::{Identity, NodeIdentity};

/// A loaded certificate and key, ready for rustls, with what we report about it.
#[derive(Debug)]
pub(crate) struct Own {
    /// The chain and signing key rustls presents.
    pub(crate) key: Arc<CertifiedKey>,
    /// Who the certificate speaks for.
    pub(crate) identity: Identity,
    /// The leaf's fingerprint.
    pub(crate) fingerprint: String,
    /// Start of the leaf's validity.
    pub(crate) not_before: SystemTime,
    /// End of the leaf's validity.
    pub(crate) not_after: SystemTime,
}

impl Own {
    /// Converts a loaded identity; rustls checks again that the key is the certificate's
    /// (`CertifiedKey::from_der`), with the provider that will sign with it.
    pub(crate) fn new(id: NodeIdentity, provider: &CryptoProvider) -> Result<Own, rustls::Error> {
        let fingerprint = id.fingerprint();
        let key = CertifiedKey::from_der(id.cert_chain, id.key, provider)?;
        Ok(Own {
            key: Arc::new(key),
            identity: id.identity,
            fingerprint,
            not_before: id.not_before,
            not_after: id.not_after,
        })
    }
}

/// The current [`Own`], read by rustls at every handshake.
#[derive(Debug)]
pub(crate) struct OwnCert {
    current: ArcSwap<Own>,
}

impl OwnCert {
    pub(crate) fn new(own: Own) -> OwnCert {
        OwnCert {
            current: ArcSwap::from_pointee(own),
        }
    }

    /// The certificate new handshakes present.
    pub(crate) fn current(&self) -> Arc<Own> {
        self.current.load_full()
    }

    /// Makes every later handshake present `own`.
    pub(crate) fn replace(&self, own: Own) {
        self.current.store(Arc::new(own));
    }
}

impl ResolvesServerCert for OwnCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load().key.clone())
    }
}

impl ResolvesClientCert for OwnCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load().key.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

//! Our own certificate, swappable under running TLS configurations.
//!
//! rustls asks a resolver for the certificate at every handshake, in both roles. So one
//! [`OwnCert`] implements both `ResolvesServerCert` and `ResolvesClientCert` over an
//! `ArcSwap`: storing a new [`Own`] makes every later handshake, dialed or accepted, present
//! the new certificate, while connections already established keep theirs (TLS never
//! re-authenticates a connection), so nothing in flight fails.
//!
//! Each [`Own`] carries a generation number, one more than the one it replaced, and the
//! [`Local`] identity (fingerprint and signing key) it presents. A handshake notes the
//! generation before it starts and checks it again once it completed (`Registry::admit`):
//! if it did not change, the resolver can only have served that [`Own`], so the connection
//! knows exactly which key the peer will verify its envelopes with. If it changed, the
//! handshake raced a rotation and the connection is not used (see `registry.rs`).
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

use crate::pki::{self, Identity, NodeIdentity};

/// The identity we presented on one connection: what the peer saw in our certificate, and
/// the key that matches it. Envelopes sent on (or answered over) that connection must be
/// signed with this key, because the peer verifies them with the certificate of the
/// connection they arrived on. Cheap to clone.
#[derive(Clone)]
pub struct Local {
    /// The fingerprint of the certificate presented.
    pub fingerprint: String,
    /// The key of that certificate.
    pub signer: Arc<pki::Signer>,
    /// Our name (node or operator) in that certificate.
    pub name: String,
}

impl std::fmt::Debug for Local {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Local")
            .field("name", &self.name)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

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
    /// What a connection whose handshake presented this certificate signs with.
    pub(crate) local: Local,
    /// One more than that of the [`Own`] this one replaced (set by [`OwnCert::replace`]).
    pub(crate) generation: u64,
}

impl Own {
    /// Converts a loaded identity; rustls checks again that the key is the certificate's
    /// (`CertifiedKey::from_der`), with the provider that will sign with it.
    pub(crate) fn new(id: NodeIdentity, provider: &CryptoProvider) -> Result<Own, rustls::Error> {
        let fingerprint = id.fingerprint();
        let key = CertifiedKey::from_der(id.cert_chain, id.key, provider)?;
        let local = Local {
            fingerprint: fingerprint.clone(),
            signer: Arc::new(id.signer),
            name: id.identity.name.clone(),
        };
        Ok(Own {
            local,
            generation: 0,
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

    /// Makes every later handshake present `own`, under the next generation. Called by
    /// the watcher only, so there is one writer and generations never repeat.
    pub(crate) fn replace(&self, mut own: Own) {
        own.generation = self.current.load().generation + 1;
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

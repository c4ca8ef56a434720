//! Verifiers by certificate fingerprint, so that a signature check does not parse the
//! peer's certificate every time.
//!
//! Keyed by fingerprint, not by name: after a rotation a peer has two certificates in use
//! at once (old and new connections), and each envelope must be checked with the one of
//! its own connection. Bounded: when full, the cache is emptied (a cluster has far fewer
//! live certificates than the bound; only churn beyond it costs a re-parse).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::pki::Verifier;
use crate::transport::PeerInfo;

/// How many verifiers are kept at most.
pub(crate) const MAX_VERIFIERS: usize = 1024;

/// The cache.
#[derive(Default)]
pub(crate) struct Verifiers {
    map: Mutex<HashMap<String, Arc<Verifier>>>,
}

impl Verifiers {
    /// The verifier of `peer`'s certificate.
    pub(crate) fn get(&self, peer: &PeerInfo) -> Result<Arc<Verifier>, String> {
        if let Some(found) = self.lock().get(&peer.fingerprint) {
            return Ok(found.clone());
        }
        let verifier = Arc::new(Verifier::from_cert(&peer.cert).map_err(|e| e.to_string())?);
        let mut map = self.lock();
        if map.len() >= MAX_VERIFIERS {
            map.clear();
        }
        map.insert(peer.fingerprint.clone(), verifier.clone());
        Ok(verifier)
    }

    /// How many are cached.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Verifier>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

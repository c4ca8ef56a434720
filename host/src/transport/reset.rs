//! Stateless resets that survive a restart.
//!
//! A node killed with `kill -9` sends no CONNECTION_CLOSE, so its peers keep their
//! connections to it. When it comes back on the same address, their next packets on
//! those connections reach the new process, which knows none of their connection IDs.
//! QUIC's answer is the stateless reset (RFC 9000 §10.3): the new process replies with a
//! token derived from the connection ID and a secret, and the peer, which was given the
//! same token by the previous run, drops the connection at once and dials again. Without
//! it the peer keeps sending into the dead connection until its idle timeout (seconds),
//! which is exactly when a restarted Raft voter is needed for an election.
//!
//! That needs two things to be the same across runs, both derived here from the node's
//! [`ResetKey`] (kept in its data dir): the HMAC key of the reset tokens, and the key
//! that validates connection IDs (quinn drops a packet whose connection ID fails its
//! generator's check before it would consider a reset).

use std::sync::Arc;

use quinn_proto::HashedConnectionIdGenerator;
use ring::hmac;

/// The secret of QUIC stateless resets: 32 bytes, kept by the node across restarts.
#[derive(Clone)]
pub struct ResetKey(pub [u8; 32]);

impl std::fmt::Debug for ResetKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResetKey(..)")
    }
}

/// The endpoint settings for `key`; quinn's defaults (random per endpoint) without one.
pub(super) fn endpoint_config(key: Option<&ResetKey>) -> quinn::EndpointConfig {
    let mut config = quinn::EndpointConfig::default();
    if let Some(key) = key {
        config.reset_key(Arc::new(hmac::Key::new(hmac::HMAC_SHA256, &key.0)));
        let cids = cid_key(key);
        config.cid_generator(move || Box::new(HashedConnectionIdGenerator::from_key(cids)));
    }
    config
}

/// The key of quinn's connection-ID check (a keyed hash of a random nonce), derived from
/// `key` so that it never equals the reset secret, and the same in every run.
fn cid_key(key: &ResetKey) -> u64 {
    let tag = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, &key.0),
        b"tenure connection ids",
    );
    let mut out = [0; 8];
    out.copy_from_slice(&tag.as_ref()[..8]);
    u64::from_le_bytes(out)
}

#[cfg(test)]
mod tests {
    use quinn_proto::ConnectionIdGenerator;

    use super::*;

    #[test]
    fn every_run_with_the_key_recognises_the_ids_of_the_others() {
        let key = ResetKey([3; 32]);
        let mut first = HashedConnectionIdGenerator::from_key(cid_key(&key));
        let second = HashedConnectionIdGenerator::from_key(cid_key(&key));
        let stranger = HashedConnectionIdGenerator::from_key(cid_key(&ResetKey([4; 32])));
        let strangers = (0..100)
            .filter(|_| {
                let id = first.generate_cid();
                assert!(second.validate(&id).is_ok());
                stranger.validate(&id).is_err()
            })
            .count();
        // A 5-byte check: a stranger accepts one ID in 2^40 by chance.
        assert_eq!(strangers, 100);
    }

    #[test]
    fn the_key_is_not_printed() {
        assert_eq!(format!("{:?}", ResetKey([9; 32])), "ResetKey(..)");
    }
}

//! Who is on the other end of a connection, established once per handshake.
//!
//! rustls/webpki has verified the peer's chain against our CA bundle (and, when we dialed,
//! the node name against its `DNS:` SAN) by the time a connection exists. webpki ignores
//! URI SANs, so the Tenure identity is read here, from the `tenure://` URI, with
//! [`crate::pki::identity_of`]; the caller then decides whether that identity is the one it
//! wanted (the dialer wants exactly the node it dialed; the server takes any node or
//! operator and reports which, so the layer above can authorize).
//!
//! The chain is kept for the life of the connection: after a CA bundle change the registry
//! verifies it again, and the leaf is what the envelope layer builds its
//! `pki::Verifier` from.

use std::net::SocketAddr;

use quinn::Connection;
use quinn::crypto::rustls::HandshakeData;
use rustls_pki_types::CertificateDer;

use crate::pki::{self, Identity};

/// The authenticated peer of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// Who the peer's certificate speaks for (node or operator, and the name).
    pub identity: Identity,
    /// The peer's leaf certificate, e.g. for `pki::Verifier::from_cert`.
    pub cert: CertificateDer<'static>,
    /// The leaf's [`pki::fingerprint`], the handle used in messages and caches.
    pub fingerprint: String,
    /// The leaf's key's [`pki::key_fingerprint`], the handle under which revocations are
    /// kept (every encoding and every reissue of a certificate for the same key has it).
    pub key: String,
    /// The peer's UDP address as we see it.
    pub remote: SocketAddr,
    /// The node protocol version the handshake negotiated (`crate::version`): the
    /// highest both sides speak.
    pub version: u32,
}

/// A verified connection's peer chain and identity, or why it is unacceptable.
pub(crate) fn authenticate(
    conn: &Connection,
) -> Result<(Vec<CertificateDer<'static>>, PeerInfo), String> {
    let alpn = conn
        .handshake_data()
        .and_then(|data| data.downcast::<HandshakeData>().ok())
        .and_then(|data| data.protocol);
    let Some(version) = alpn.as_deref().and_then(crate::version::parse_label) else {
        return Err(format!(
            "the peer negotiated no Tenure protocol (ALPN {:?})",
            alpn.as_deref().map(String::from_utf8_lossy)
        ));
    };
    let chain = conn
        .peer_identity()
        .and_then(|any| any.downcast::<Vec<CertificateDer<'static>>>().ok())
        .map(|chain| *chain)
        .unwrap_or_default();
    let Some(leaf) = chain.first().cloned() else {
        return Err("the peer presented no certificate".into());
    };
    let identity = pki::identity_of(&leaf).map_err(|e| e.to_string())?;
    // Nodes must share a protocol version. An operator's requests carry a version of
    // their own (`rpc/operator.rs`), which names both when they differ.
    if identity.kind == pki::Kind::Node {
        crate::version::check_negotiated(version).map_err(|why| format!("{identity}: {why}"))?;
    }
    let info = PeerInfo {
        identity,
        fingerprint: pki::fingerprint(&leaf),
        key: pki::key_fingerprint(&leaf).map_err(|e| e.to_string())?,
        cert: leaf,
        remote: conn.remote_address(),
        version,
    };
    Ok((chain, info))
}

//! The rustls and quinn configurations, and the one place they are (re)built.
//!
//! Fixed choices, for every configuration this builds:
//! - the ring provider, passed to every builder (no process-wide default is installed,
//!   so nothing else in the process can change what we negotiate);
//! - TLS 1.3 only (QUIC requires it anyway), ALPN `tenure/1` to the newest version this build speaks, the negotiated one checked against its window (`crate::version`);
//! - mutual authentication: the server requires a client certificate verified against
//!   the bundle, the client verifies the server against the bundle and the name dialed;
//! - no session resumption and no 0-RTT, on either side: a resumed session skips
//!   certificate verification, which would let a peer whose CA was removed back in.
//!
//! Our certificate comes from the shared [`OwnCert`] resolver, so a rotated certificate
//! needs no new configuration. A new CA bundle does: the server configuration is replaced
//! on the endpoint (quinn shares it with every clone of the endpoint), and the client
//! configuration is kept here, in an `ArcSwap`, and passed to each `connect_with` (quinn's
//! default client configuration is per handle and would silently go stale). Each bundle
//! gets a generation number so that a handshake that raced a reload can be re-checked.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::server::NoServerSessionStorage;

use super::frame::HEADER_LEN;
use super::resolver::OwnCert;
use super::trust::Trust;
use super::{TransportConfig, TransportError};

/// The verifiers and client configuration of one CA bundle.
pub(crate) struct TrustGen {
    /// Increases by one with every bundle installed.
    pub(crate) generation: u64,
    /// The verifiers.
    pub(crate) trust: Trust,
    /// What new dials use.
    pub(crate) client: quinn::ClientConfig,
}

/// Everything TLS: the provider, our certificate, the current bundle.
pub(crate) struct TlsState {
    pub(crate) provider: Arc<CryptoProvider>,
    pub(crate) own: Arc<OwnCert>,
    current: ArcSwap<TrustGen>,
    server_transport: Arc<quinn::TransportConfig>,
    /// The key of our Retry tokens, one for the endpoint's life: a server configuration
    /// rebuilt for a new bundle must still accept the tokens the previous one handed out,
    /// or a dial that raced a reload would be refused.
    token_key: Arc<dyn quinn::crypto::HandshakeTokenKey>,
    client_transport: Arc<quinn::TransportConfig>,
}

impl TlsState {
    /// The state for `own` and `trust`, and the first server configuration.
    pub(crate) fn new(
        config: &TransportConfig,
        provider: Arc<CryptoProvider>,
        own: Arc<OwnCert>,
        trust: Trust,
    ) -> Result<(TlsState, quinn::ServerConfig), TransportError> {
        let server_transport =
            Arc::new(transport_config(config, config.max_streams_per_connection)?);
        // Streams only ever flow from dialer to server: a server may not open any on a
        // connection we dialed.
        let client_transport = Arc::new(transport_config(config, 0)?);
        let client = client_config(&provider, &own, &trust, &client_transport)?;
        let token_key = token_key()?;
        let server = server_config(&provider, &own, &trust, &server_transport, &token_key)?;
        let state = TlsState {
            provider,
            own,
            current: ArcSwap::from_pointee(TrustGen {
                generation: 0,
                trust,
                client,
            }),
            server_transport,
            token_key,
            client_transport,
        };
        Ok((state, server))
    }

    /// The current bundle's verifiers and client configuration.
    pub(crate) fn current(&self) -> Arc<TrustGen> {
        self.current.load_full()
    }

    /// Installs a new bundle: first the endpoint's server configuration, then the client
    /// configuration and generation, so that a handshake that saw the new generation was
    /// also verified with the new server configuration.
    pub(crate) fn install(
        &self,
        endpoint: &quinn::Endpoint,
        trust: Trust,
    ) -> Result<Arc<TrustGen>, TransportError> {
        let server = server_config(
            &self.provider,
            &self.own,
            &trust,
            &self.server_transport,
            &self.token_key,
        )?;
        let client = client_config(&self.provider, &self.own, &trust, &self.client_transport)?;
        endpoint.set_server_config(Some(server));
        let generation = self.current.load().generation + 1;
        let next = Arc::new(TrustGen {
            generation,
            trust,
            client,
        });
        self.current.store(next.clone());
        Ok(next)
    }
}

fn tls_error(e: impl std::fmt::Display) -> TransportError {
    TransportError::Tls(e.to_string())
}

/// QUIC settings shared by all connections of one role.
///
/// The receive windows are what a peer may have sent us that we have not read yet:
/// quinn's defaults are about 1.25 MB per stream and no limit per connection, so a peer
/// could park 64 × 1.25 MB in every connection. Here a stream may carry one whole
/// message ahead of our reading (a status byte, a header and `max_frame` bytes: one
/// request or response never waits on its own window) and a connection two.
fn transport_config(
    config: &TransportConfig,
    incoming_streams: u32,
) -> Result<quinn::TransportConfig, TransportError> {
    let mut t = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(config.idle_timeout)
        .map_err(|_| TransportError::Config("idle_timeout is too long".into()))?;
    let (stream_window, connection_window) = receive_windows(config.max_frame);
    t.stream_receive_window(stream_window)
        .receive_window(connection_window);
    t.max_idle_timeout(Some(idle))
        .initial_rtt(
            config
                .initial_rtt
                .unwrap_or_else(|| initial_rtt(config.dial_timeout)),
        )
        .keep_alive_interval(Some(config.keep_alive))
        .max_concurrent_bidi_streams(incoming_streams.into())
        .max_concurrent_uni_streams(0u32.into())
        .datagram_receive_buffer_size(None);
    Ok(t)
}

/// The RTT a connection assumes before it has measured one, which sets when a lost
/// handshake packet is resent: after about three of it, then twice as long each time.
/// quinn's default (333 ms) suits the internet; here it resent a first Initial lost to a
/// peer that had not bound its port yet after about 1 s, just as a 1 s dial gave up, so
/// a node started beside its peers often failed its first dial and then backed off
/// (issue 30). A sixteenth of the dial timeout (62.5 ms at the default 1 s, a LAN's
/// worth with room) resends after about 190 and 560 ms, both well inside the dial
/// timeout; never more than quinn's default. The RTT is measured from the first answer
/// on, so this only decides how soon a lost handshake packet is resent.
pub(crate) fn initial_rtt(dial_timeout: Duration) -> Duration {
    (dial_timeout / 16).clamp(Duration::from_millis(1), Duration::from_millis(333))
}

/// The stream and connection receive windows for frames of at most `max_frame` bytes.
pub(crate) fn receive_windows(max_frame: usize) -> (quinn::VarInt, quinn::VarInt) {
    // `max_frame` is at most `MAX_FRAME_LIMIT` (64 MiB), far below a VarInt's range.
    let stream = (max_frame + HEADER_LEN + 1) as u32;
    (
        quinn::VarInt::from_u32(stream),
        quinn::VarInt::from_u32(2 * stream),
    )
}

/// A random key for Retry tokens (what quinn's `ServerConfig::with_crypto` makes, kept).
fn token_key() -> Result<Arc<dyn quinn::crypto::HandshakeTokenKey>, TransportError> {
    use ring::rand::SecureRandom;
    let mut secret = [0u8; 64];
    ring::rand::SystemRandom::new()
        .fill(&mut secret)
        .map_err(|_| TransportError::Tls("no randomness for the Retry token key".into()))?;
    Ok(Arc::new(
        ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[]).extract(&secret),
    ))
}

fn server_config(
    provider: &Arc<CryptoProvider>,
    own: &Arc<OwnCert>,
    trust: &Trust,
    transport: &Arc<quinn::TransportConfig>,
    token_key: &Arc<dyn quinn::crypto::HandshakeTokenKey>,
) -> Result<quinn::ServerConfig, TransportError> {
    let mut tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_error)?
        .with_client_cert_verifier(trust.clients.clone())
        .with_cert_resolver(own.clone());
    tls.alpn_protocols = crate::version::alpn_labels();
    tls.session_storage = Arc::new(NoServerSessionStorage {});
    tls.send_tls13_tickets = 0;
    tls.max_early_data_size = 0;
    let crypto = QuicServerConfig::try_from(Arc::new(tls)).map_err(tls_error)?;
    let mut server = quinn::ServerConfig::new(Arc::new(crypto), token_key.clone());
    server.transport_config(transport.clone());
    Ok(server)
}

fn client_config(
    provider: &Arc<CryptoProvider>,
    own: &Arc<OwnCert>,
    trust: &Trust,
    transport: &Arc<quinn::TransportConfig>,
) -> Result<quinn::ClientConfig, TransportError> {
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_error)?
        .with_webpki_verifier(trust.servers.clone())
        .with_client_cert_resolver(own.clone());
    tls.alpn_protocols = crate::version::alpn_labels();
    tls.resumption = Resumption::disabled();
    tls.enable_early_data = false;
    let crypto = QuicClientConfig::try_from(Arc::new(tls)).map_err(tls_error)?;
    let mut client = quinn::ClientConfig::new(Arc::new(crypto));
    client.transport_config(transport.clone());
    Ok(client)
}

#[cfg(test)]
pub(crate) fn raw_client_config(
    provider: &Arc<CryptoProvider>,
    own: &Arc<OwnCert>,
    trust: &Trust,
) -> quinn::ClientConfig {
    let transport = Arc::new(transport_config(&TransportConfig::default(), 0).unwrap());
    client_config(provider, own, trust, &transport).unwrap()
}

/// A node's client and server configs that offer only the ALPN `labels`, as another
/// build would (the version window's tests).
#[cfg(test)]
pub(crate) fn configs_speaking(
    provider: &Arc<CryptoProvider>,
    own: &Arc<OwnCert>,
    trust: &Trust,
    labels: &[&[u8]],
) -> (quinn::ClientConfig, quinn::ServerConfig) {
    let transport = Arc::new(transport_config(&TransportConfig::default(), 0).unwrap());
    let labels: Vec<Vec<u8>> = labels.iter().map(|l| l.to_vec()).collect();
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_webpki_verifier(trust.servers.clone())
        .with_client_cert_resolver(own.clone());
    tls.alpn_protocols = labels.clone();
    let mut client =
        quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(Arc::new(tls)).unwrap()));
    client.transport_config(transport.clone());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_client_cert_verifier(trust.clients.clone())
        .with_cert_resolver(own.clone());
    tls.alpn_protocols = labels;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(
        QuicServerConfig::try_from(Arc::new(tls)).unwrap(),
    ));
    server.transport_config(transport);
    (client, server)
}

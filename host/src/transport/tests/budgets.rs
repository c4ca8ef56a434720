//! What one peer, or a stranger, can make a server hold: memory for frames, connection
//! slots, handshake slots (issue 13, "connection budgets" and "memory amplification").
//! Real QUIC connections on loopback; the misbehaving side is a raw quinn client (or a
//! relay in front of one) that does what the transport's own dialer never would.

use super::*;

/// A frame that announces `max_frame` bytes and then sends nothing costs the receiver
/// nothing: its buffer grows with the bytes that arrive, not with the announcement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_announced_but_not_sent_is_not_allocated() {
    init_logs();
    let certs = Certs::new();
    let files = certs.node("n1");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let own = resolver::Own::new(
        pki::load_identity(&files.cert, &files.key).unwrap(),
        &provider,
    )
    .unwrap();
    let trust =
        trust::Trust::from_bundle(&pki::load_ca_bundle(&files.ca).unwrap(), &provider).unwrap();
    let own = Arc::new(resolver::OwnCert::new(own));
    let (_tls, server_config) = tls::TlsState::new(&config(), provider, own, trust).unwrap();
    // A bare quinn server with the transport's TLS and QUIC settings, so that the test
    // holds the receiving end of the stream and can look at the buffer.
    let server = quinn::Endpoint::server(server_config, "127.0.0.1:0".parse().unwrap()).unwrap();
    let server_addr = server.local_addr().unwrap();
    let accepting = tokio::spawn(async move {
        let conn = server.accept().await.unwrap().await.unwrap();
        (server, conn)
    });
    let (_client, connecting) = raw_connect(&certs.node("n3"), server_addr, "n1");
    let client = connecting.await.unwrap();
    let (_server, server_conn) = accepting.await.unwrap();

    let max = TransportConfig::default().max_frame;
    let (mut send, _recv) = client.open_bi().await.unwrap();
    send.write_all(&frame::header(max)).await.unwrap();
    // The stream exists at the receiver once its first bytes (the header) are there.
    let (_send, mut recv) = server_conn.accept_bi().await.unwrap();
    let mut body = Vec::new();
    // Nothing more is coming, so the read cannot finish; how long it is given does not
    // change what it may have allocated by then.
    let read = tokio::time::timeout(
        Duration::from_millis(300),
        frame::read_frame_into(&mut recv, max, &mut body),
    )
    .await;
    assert!(read.is_err(), "a frame was read that was never sent");
    assert!(
        body.capacity() < 64 << 10,
        "a frame announced at {max} bytes with none sent holds a buffer of {} bytes",
        body.capacity()
    );
}

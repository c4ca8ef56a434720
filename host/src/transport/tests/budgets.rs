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
    let (provider, own, trust) = tls_parts(&files);
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

/// Streams that announce full frames and never finish them: however many one peer opens,
/// the server takes in only what its budget for that peer allows (requests read at once,
/// each at most a frame, plus the connection's receive window); the rest waits at the
/// peer, under QUIC flow control.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_cannot_make_the_server_buffer_more_than_its_budget() {
    init_logs();
    const FRAME: usize = 64 << 10;
    const STREAMS: usize = 64;
    let certs = Certs::new();
    let mut cfg = config();
    cfg.max_frame = FRAME;
    cfg.max_requests_per_peer = 4;
    // Stalled streams are held, not timed out, while the test looks.
    cfg.stream_read_timeout = Duration::from_secs(60);
    let n1 = Node::start_with("n1", certs.node("n1"), cfg).await;
    let good = Node::start("n2", certs.node("n2")).await;
    let (_endpoint, conn) = raw_connection(&certs.node("n3"), &n1).await;

    let written = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..STREAMS)
        .map(|_| {
            let (conn, written) = (conn.clone(), written.clone());
            tokio::spawn(async move {
                let (mut send, recv) = conn.open_bi().await.unwrap();
                send.write_all(&frame::header(FRAME)).await.unwrap();
                written.fetch_add(frame::HEADER_LEN as u64, Ordering::Relaxed);
                let chunk = [0u8; 4096];
                // One byte short: the request is never complete.
                let mut left = FRAME - 1;
                while left > 0 {
                    let n = send.write(&chunk[..left.min(chunk.len())]).await.unwrap();
                    written.fetch_add(n as u64, Ordering::Relaxed);
                    left -= n;
                }
                // Kept, so that the streams stay open.
                (send, recv)
            })
        })
        .collect();

    // What the server may hold for one peer: 4 requests being read, a frame each, and
    // a connection receive window of two frames; a little slack for the headers.
    let (_, window) = tls::receive_windows(FRAME);
    let budget = (4 * (FRAME + 64)) as u64 + window.into_inner();
    // Watch until the peer has pushed more than the budget, or its writes stall: a
    // stall, not a time, ends the watch, so a slow machine only makes it watch longer.
    let began = Instant::now();
    let mut last = (0, Instant::now());
    loop {
        let now = written.load(Ordering::Relaxed);
        if now > budget || writers.iter().all(|w| w.is_finished()) {
            break;
        }
        if now != last.0 {
            last = (now, Instant::now());
        } else if now > 0 && last.1.elapsed() > Duration::from_secs(1) {
            break;
        }
        assert!(
            began.elapsed() < PATIENCE,
            "the writes neither stalled nor ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pushed = written.load(Ordering::Relaxed);
    println!("one peer pushed {pushed} bytes of unfinished requests (budget {budget})");
    assert!(
        pushed <= budget,
        "one peer made the server take in {pushed} bytes of {STREAMS} unfinished requests; \
         its budget is {budget}"
    );
    // Everyone else is served meanwhile.
    good.assert_serves(&n1).await;
    for writer in writers {
        writer.abort();
    }
}

/// One certificate cannot take every connection slot: its connections beyond its share
/// are refused, and other peers still get in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_identity_cannot_hold_every_connection() {
    init_logs();
    let certs = Certs::new();
    let mut cfg = config();
    cfg.max_connections = 4;
    cfg.max_connections_per_peer = 2;
    let n1 = Node::start_with("n1", certs.node("n1"), cfg).await;
    let good = Node::start("n2", certs.node("n2")).await;

    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(raw_connection(&certs.node("n3"), &n1).await);
    }
    // The handshakes complete (the server learns who it is only then); two of the four
    // are closed right after, as over n3's share.
    let closed = |held: &[(quinn::Endpoint, quinn::Connection)]| {
        held.iter()
            .filter(|(_, conn)| conn.close_reason().is_some())
            .count()
    };
    wait_until("two of n3's connections to be refused", || {
        closed(&held) >= 2
    })
    .await;
    for (_, conn) in &held {
        if let Some(reason) = conn.close_reason() {
            assert!(
                matches!(&reason, quinn::ConnectionError::ApplicationClosed(ac) if ac.error_code == wire::CLOSE_BUSY),
                "{reason}"
            );
        }
    }
    assert_eq!(n1.transport.stats().connections_refused, 2);
    // Another identity gets in, and n3's admitted connections are served.
    good.assert_serves(&n1).await;
    for (_, conn) in held
        .iter()
        .filter(|(_, conn)| conn.close_reason().is_none())
    {
        let ok = raw_exchange(conn, &request_frame(b"ping"), true)
            .await
            .unwrap();
        assert_eq!(ok[0], wire::STATUS_OK);
    }
    assert_eq!(closed(&held), 2);
}

/// A UDP relay in front of the server for one client: it forwards everything the client
/// sends, and of the server's answers only Retry packets. So the client proves its
/// address (if asked to), the server begins a handshake, and the handshake never ends.
struct StallingRelay {
    addr: SocketAddr,
    /// Set once the server answered with anything but a Retry: it is handshaking.
    handshaking: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl StallingRelay {
    async fn start(server: SocketAddr) -> StallingRelay {
        let front = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let back = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        back.connect(server).await.unwrap();
        let addr = front.local_addr().unwrap();
        let handshaking = Arc::new(AtomicBool::new(false));
        let seen = handshaking.clone();
        let task = tokio::spawn(async move {
            let mut client = None;
            let (mut up, mut down) = ([0u8; 2048], [0u8; 2048]);
            loop {
                tokio::select! {
                    r = front.recv_from(&mut up) => {
                        let Ok((n, from)) = r else { continue };
                        client = Some(from);
                        let _ = back.send(&up[..n]).await;
                    }
                    r = back.recv(&mut down) => {
                        let Ok(n) = r else { continue };
                        // QUIC v1 long header, packet type 3: a Retry.
                        let retry = n > 0 && down[0] & 0xb0 == 0xb0;
                        match client {
                            Some(client) if retry => {
                                let _ = front.send_to(&down[..n], client).await;
                            }
                            _ => seen.store(true, Ordering::Relaxed),
                        }
                    }
                }
            }
        });
        StallingRelay {
            addr,
            handshaking,
            task,
        }
    }
}

impl Drop for StallingRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Strangers that start handshakes (from addresses they really hold) and never finish
/// them cannot keep a peer with a good certificate out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_handshakes_do_not_keep_a_good_peer_out() {
    init_logs();
    const STALLED: usize = 8;
    let certs = Certs::new();
    let mut cfg = config();
    // Stalled handshakes would be held this long: longer than the test.
    cfg.dial_timeout = Duration::from_secs(30);
    cfg.max_handshakes = STALLED / 2;
    let n1 = Node::start_with("n1", certs.node("n1"), cfg).await;
    let mut good_cfg = config();
    good_cfg.dial_timeout = Duration::from_secs(5);
    let good = Node::start_with("n2", certs.node("n2"), good_cfg).await;

    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        let relay = StallingRelay::start(n1.addr).await;
        let (endpoint, connecting) = raw_connect(&certs.node("n3"), relay.addr, "n1");
        stalled.push((relay, endpoint, tokio::spawn(connecting)));
    }
    wait_until("every stalled client's handshake to have begun", || {
        stalled
            .iter()
            .all(|(relay, _, _)| relay.handshaking.load(Ordering::Relaxed))
    })
    .await;
    good.assert_serves(&n1).await;
    let stats = n1.transport.stats();
    println!("stalled handshakes: {stats:?}");
    // Every client, the good one included, was asked to prove its address first, and
    // stalled handshakes gave way to newer ones.
    assert!(stats.retries > STALLED as u64, "{stats:?}");
    assert!(stats.handshakes_evicted >= 1, "{stats:?}");
    drop(stalled);
}

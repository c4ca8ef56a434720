//! A loopback server that accepts one connection and reads nothing until told to: the
//! tests' way to make the kernel hold a plugin's bytes when its lease ends.
//!
//! The listener's receive buffer is 4 KiB (accepted sockets inherit it, and it fixes the
//! window the handshake offers), so a client writing a few MiB gets most of them stuck in
//! its own send queue: accepted by its kernel, not yet on the wire. When the test has
//! seen the abort it calls [`StalledServer::drain`], which reads everything that still
//! arrives and says how the connection ended. Bytes queued before the abort that arrive
//! after it, ended by a clean EOF, are the late effect the lease forbids; a reset that
//! cuts them off is the fence working.

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::time::Duration;

use socket2::{Domain, Socket, Type};

/// How long a drain waits for the connection to end before it gives up.
const BOUND: Duration = Duration::from_secs(10);

/// The server: its address, and the way to let it read.
pub(super) struct StalledServer {
    pub(super) addr: SocketAddr,
    go: mpsc::Sender<()>,
    done: mpsc::Receiver<(usize, std::io::Result<()>)>,
}

impl StalledServer {
    pub(super) fn start() -> StalledServer {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        socket.bind(&any.into()).unwrap();
        socket.listen(8).unwrap();
        let listener: TcpListener = socket.into();
        let addr = listener.local_addr().unwrap();
        let (go, wait) = mpsc::channel();
        let (report, done) = mpsc::channel();
        std::thread::spawn(move || {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            if wait.recv().is_err() {
                return;
            }
            stream.set_read_timeout(Some(BOUND)).unwrap();
            let mut buffer = vec![0; 64 << 10];
            let mut received = 0;
            let end = loop {
                match stream.read(&mut buffer) {
                    Ok(0) => break Ok(()),
                    Ok(n) => received += n,
                    Err(e) => break Err(e),
                }
            };
            let _ = report.send((received, end));
        });
        StalledServer { addr, go, done }
    }

    /// Starts reading and waits until the connection ends (or [`BOUND`] passes without
    /// an end): the bytes received, and `Ok` for a clean EOF or the read's error.
    pub(super) fn drain(self) -> (usize, std::io::Result<()>) {
        self.go
            .send(())
            .expect("the server accepted the connection");
        self.done
            .recv_timeout(BOUND + Duration::from_secs(5))
            .expect("the server reports how the connection ended")
    }
}

/// Asserts what the fence promises of a connection that still held `queued` bytes at D:
/// the server got fewer than that, and then a reset, not a clean end.
pub(super) fn assert_cut_off(received: usize, end: &std::io::Result<()>, queued: usize) {
    assert!(
        end.as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "after D the server read {received} of the {queued} bytes queued for it and then \
         {end:?}: the bytes queued at D reached it after D"
    );
    assert!(received < queued, "{received} of {queued}");
}

//! The TCP socket under one outbound request: closed with a FIN when the exchange ended,
//! reset when the request was abandoned.
//!
//! A close is not the end of a connection's bytes. The kernel keeps what it accepted and
//! has not had acknowledged, and goes on retransmitting it (with backoff) from an
//! orphaned socket after the last descriptor is gone; a partition that heals later
//! delivers it then. That is how an HTTP request aborted at D reached its server 397 ms
//! after a heal, after the successor's write with a higher token. With `SO_LINGER` set to
//! zero, the last close discards whatever is still queued and sends the peer an RST
//! instead, so nothing of the request leaves after the abort.
//!
//! So the socket decides when it is dropped. It resets the connection when the instance
//! may no longer act (the fence dropping the request at D or at the instance's interrupt
//! time, or anything else dropping it after), and when the kernel still holds bytes of
//! it the peer has not acknowledged, unless hyper ended the connection itself (its
//! `poll_shutdown`: the FIN, or TLS's close_notify, then sits in that queue, after every
//! byte of the exchange). Any other drop closes with a FIN: nothing is left to arrive
//! late. The socket does not need to know who dropped it or why (the fence, a timeout,
//! the plugin dropping the response, the store going away with the request in it), so
//! there is no ordering between a drop and a flag to get wrong. A normally completed
//! request closes with a FIN even when the plugin drops the response body before hyper
//! had its last poll: the response arriving acknowledged the whole request.

use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Whether the instance may no longer act, asked when the socket is dropped.
pub(super) type MayNoLongerAct = Arc<dyn Fn() -> bool + Send + Sync>;

/// A connected socket that resets the connection when it is dropped abandoned.
pub(super) struct Socket {
    stream: TcpStream,
    /// Hyper shut the connection down itself: its FIN (or close_notify) is queued after
    /// the exchange's last byte.
    ended: bool,
    may_no_longer_act: MayNoLongerAct,
}

impl Socket {
    pub(super) fn new(stream: TcpStream, may_no_longer_act: MayNoLongerAct) -> Self {
        Self {
            stream,
            ended: false,
            may_no_longer_act,
        }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        if (self.may_no_longer_act)() || (!self.ended && unacknowledged(&self.stream)) {
            // The stream's own drop closes the descriptor right after this; socket2's
            // setter rather than tokio's, which is deprecated for the very reason that a
            // zero linger loses data: here that is the point.
            let _ = socket2::SockRef::from(&self.stream).set_linger(Some(Duration::ZERO));
        }
    }
}

/// Whether the kernel still holds bytes sent on `stream` that the peer has not
/// acknowledged (or cannot say).
fn unacknowledged(stream: &TcpStream) -> bool {
    let mut queued: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ on a TCP socket) writes one int through the pointer,
    // which is valid for it, on a descriptor the stream keeps open during the call.
    let failed = unsafe { libc::ioctl(stream.as_raw_fd(), libc::TIOCOUTQ, &mut queued) } != 0;
    failed || queued > 0
}

impl AsyncRead for Socket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl Socket {
    /// Refuses a write once the instance may no longer act. The fence also drops the
    /// request then (`http.rs` `send`), but which of the two a task polls first after a
    /// pause (a frozen process, a long stall) is not ordered: without this check a request
    /// admitted before D could write its first bytes after D.
    fn fenced(&self) -> Option<std::io::Error> {
        (self.may_no_longer_act)().then(|| {
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the instance may no longer act (its lease ended or it is being stopped)",
            )
        })
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if let Some(error) = self.fenced() {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if let Some(error) = self.fenced() {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let result = ready!(Pin::new(&mut self.stream).poll_shutdown(cx));
        self.ended = result.is_ok();
        Poll::Ready(result)
    }
}

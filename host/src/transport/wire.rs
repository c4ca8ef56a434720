//! The wire protocol's constants: the ALPN name, the response status byte, and the QUIC
//! error codes with which Tenure closes connections and refuses streams.
//!
//! One request is one bidirectional stream. The dialer writes one frame (see `frame.rs`)
//! and finishes its side; the server answers with a status byte followed by one frame and
//! finishes its side. Nothing else ever travels on a stream, and a stream carries exactly
//! one request: there is no multiplexing, pipelining or streaming of bodies above QUIC's.
//!
//! The codes matter for one decision above all: whether a failed request may be sent again
//! on a new connection without the risk of running it twice. Only two signals promise that
//! the server did not process the request, and the dialer retries (at most twice) only on those:
//! [`STREAM_REFUSED`] (the server refused the stream because the connection is being
//! retired) and [`CLOSE_RETIRED`] (the server closed a retiring connection with no request
//! in flight). Every other failure may have happened after the handler ran.
//!
//! This file deliberately holds no logic: codes are part of the node protocol (ALPN
//! `tenure/N`, `crate::version`) and must not change meaning without a new version.

use quinn::VarInt;

/// Response status: the handler answered; the frame is its response body.
pub(crate) const STATUS_OK: u8 = 0;
/// Response status: the handler failed; the frame is its UTF-8 error message.
pub(crate) const STATUS_ERROR: u8 = 1;

/// Connection close: the endpoint is shutting down.
pub(crate) const CLOSE_SHUTDOWN: VarInt = VarInt::from_u32(0);
/// Connection close: retired (peer certificate no longer trusted, our certificate changed, or
/// dropped after a failure) with no
/// request in flight. Whatever the peer sent that is still unanswered was not processed.
pub(crate) const CLOSE_RETIRED: VarInt = VarInt::from_u32(1);
/// Connection close: retired, but requests were still in flight when the grace ran out.
pub(crate) const CLOSE_RETIRED_FORCED: VarInt = VarInt::from_u32(2);
/// Connection close: the peer's certificate verified but names no acceptable identity (or
/// no longer verifies against a bundle loaded during the handshake).
pub(crate) const CLOSE_IDENTITY: VarInt = VarInt::from_u32(3);

/// Connection close: refused after the handshake because a budget is full: the node's
/// established connections, or the peer identity's share of them. Nothing was processed,
/// but a new connection would meet the same limit, so the dialer does not retry at once.
pub(crate) const CLOSE_BUSY: VarInt = VarInt::from_u32(4);

/// Stream refused unprocessed: the connection is being retired; retry on a new one.
pub(crate) const STREAM_REFUSED: VarInt = VarInt::from_u32(1);
/// Stream refused: the frame's length prefix exceeds the receiver's limit.
pub(crate) const STREAM_TOO_LARGE: VarInt = VarInt::from_u32(2);
/// Stream refused: the stream ended inside the frame, or carried bytes after it.
pub(crate) const STREAM_MALFORMED: VarInt = VarInt::from_u32(3);
/// Stream refused: the request was not delivered within the server's time limit.
pub(crate) const STREAM_TOO_SLOW: VarInt = VarInt::from_u32(4);

/// A name for a stream code in messages.
pub(crate) fn stream_code_name(code: VarInt) -> &'static str {
    match code.into_inner() {
        1 => "refused: connection retiring",
        2 => "frame too large",
        3 => "malformed frame",
        4 => "request not delivered in time",
        _ => "unknown code",
    }
}

/// A name for an application close code in messages.
pub(crate) fn close_code_name(code: VarInt) -> &'static str {
    match code.into_inner() {
        0 => "shutting down",
        1 => "connection retired",
        2 => "connection retired with requests in flight",
        3 => "identity refused",
        4 => "connection limit reached",
        _ => "unknown code",
    }
}

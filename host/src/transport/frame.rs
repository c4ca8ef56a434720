//! Length-prefixed frames: a `u32` big-endian length, then that many bytes.
//!
//! The length is checked against the receiver's limit **before** any buffer is allocated,
//! so a peer that announces 4 GiB costs four bytes of reading, not 4 GiB of memory. Within
//! the limit, the buffer still follows the bytes, not the announcement: it grows as they
//! arrive (at most doubling, never past the announced length), so a peer that announces
//! a full frame and sends nothing costs nothing, and one that sends half of it costs
//! about half. A frame
//! must also be the last thing on its side of the stream: a stream that ends inside a frame
//! or carries bytes after it is malformed, which keeps the protocol free of ambiguity.
//!
//! What this does not do: time limits (the caller wraps reads in a timeout) or any
//! interpretation of the bytes (they are opaque envelopes for the layer above).

use quinn::{ReadError, ReadExactError, RecvStream, SendStream, WriteError};

/// Size of the length prefix.
pub(crate) const HEADER_LEN: usize = 4;

/// Why a frame could not be read or written.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The length prefix announces more than the limit; nothing was allocated.
    TooLarge {
        /// The announced length.
        len: u64,
        /// The receiver's limit.
        max: usize,
    },
    /// The stream ended inside the length prefix or the body.
    Truncated,
    /// The stream carried bytes after the frame.
    Trailing,
    /// The stream or connection failed (reset by the peer, connection lost).
    Read(ReadError),
    /// Writing failed (stopped by the peer, connection lost).
    Write(WriteError),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge { len, max } => {
                write!(f, "frame of {len} bytes exceeds the limit of {max} bytes")
            }
            FrameError::Truncated => f.write_str("the stream ended inside a frame"),
            FrameError::Trailing => f.write_str("bytes after the frame"),
            FrameError::Read(e) => write!(f, "{e}"),
            FrameError::Write(e) => write!(f, "{e}"),
        }
    }
}

/// The length a header announces, if it is within `max`.
pub(crate) fn check_header(header: [u8; HEADER_LEN], max: usize) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(header);
    match usize::try_from(len) {
        Ok(len) if len <= max => Ok(len),
        _ => Err(FrameError::TooLarge {
            len: u64::from(len),
            max,
        }),
    }
}

/// The header for a body of `len` bytes; callers have checked `len` against their limit,
/// which is far below `u32::MAX`.
pub(crate) fn header(len: usize) -> [u8; HEADER_LEN] {
    u32::try_from(len)
        .expect("frame lengths are checked against max_frame before encoding")
        .to_be_bytes()
}

/// Reads one frame of at most `max` bytes.
pub(crate) async fn read_frame(recv: &mut RecvStream, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut body = Vec::new();
    read_frame_into(recv, max, &mut body).await?;
    Ok(body)
}

/// Reads one frame of at most `max` bytes into `body` (emptied first). Kept apart from
/// [`read_frame`] so that a test can look at the buffer of a read that has not finished.
pub(crate) async fn read_frame_into(
    recv: &mut RecvStream,
    max: usize,
    body: &mut Vec<u8>,
) -> Result<(), FrameError> {
    let mut head = [0u8; HEADER_LEN];
    read_exact(recv, &mut head).await?;
    let len = check_header(head, max)?;
    body.clear();
    while body.len() < len {
        match recv.read_chunk(len - body.len(), true).await {
            Ok(Some(chunk)) => {
                make_room(body, chunk.bytes.len(), len);
                body.extend_from_slice(&chunk.bytes);
            }
            Ok(None) => return Err(FrameError::Truncated),
            Err(e) => return Err(FrameError::Read(e)),
        }
    }
    Ok(())
}

/// Makes room in `body` for `more` bytes of a frame of `len` bytes: at least double the
/// capacity when it grows (so copying stays linear), never more than `len`.
fn make_room(body: &mut Vec<u8>, more: usize, len: usize) {
    let need = body.len() + more;
    if need > body.capacity() {
        let target = need.max(body.capacity() * 2).min(len).max(need);
        body.reserve_exact(target - body.len());
    }
}

/// Reads one byte (the response status).
pub(crate) async fn read_byte(recv: &mut RecvStream) -> Result<u8, FrameError> {
    let mut byte = [0u8; 1];
    read_exact(recv, &mut byte).await?;
    Ok(byte[0])
}

/// Succeeds if the peer finished its side of the stream with nothing more to read.
pub(crate) async fn read_end(recv: &mut RecvStream) -> Result<(), FrameError> {
    let mut probe = [0u8; 1];
    loop {
        match recv.read(&mut probe).await {
            Ok(None) => return Ok(()),
            Ok(Some(0)) => continue,
            Ok(Some(_)) => return Err(FrameError::Trailing),
            Err(e) => return Err(FrameError::Read(e)),
        }
    }
}

/// Writes `prefix` (empty for a request, the status byte for a response) and one frame.
pub(crate) async fn write_frame(
    send: &mut SendStream,
    prefix: &[u8],
    body: &[u8],
) -> Result<(), FrameError> {
    let mut head = Vec::with_capacity(prefix.len() + HEADER_LEN);
    head.extend_from_slice(prefix);
    head.extend_from_slice(&header(body.len()));
    send.write_all(&head).await.map_err(FrameError::Write)?;
    send.write_all(body).await.map_err(FrameError::Write)
}

async fn read_exact(recv: &mut RecvStream, buf: &mut [u8]) -> Result<(), FrameError> {
    recv.read_exact(buf).await.map_err(|e| match e {
        ReadExactError::FinishedEarly(_) => FrameError::Truncated,
        ReadExactError::ReadError(e) => FrameError::Read(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn header_round_trips_within_the_limit(len in 0usize..=1 << 20, max in 0usize..=1 << 21) {
            let checked = check_header(header(len), max);
            if len <= max {
                prop_assert_eq!(checked.unwrap(), len);
            } else {
                let refused = matches!(checked, Err(FrameError::TooLarge { len: l, .. }) if l == len as u64);
                prop_assert!(refused);
            }
        }
    }

    proptest! {
        /// However the bytes of a frame arrive, its buffer ends at most its length and,
        /// on the way, at most twice what arrived.
        #[test]
        fn buffers_follow_the_bytes(len in 1usize..=1 << 20, chunks in proptest::collection::vec(1usize..=70_000, 1..200)) {
            let mut body = Vec::new();
            for chunk in chunks {
                let more = chunk.min(len - body.len());
                make_room(&mut body, more, len);
                body.resize(body.len() + more, 0);
                prop_assert!(body.capacity() <= len);
                prop_assert!(body.capacity() <= 2 * body.len().max(more));
                if body.len() == len {
                    break;
                }
            }
        }
    }

    #[test]
    fn a_huge_announcement_is_refused_without_allocating() {
        assert!(matches!(
            check_header([0xff; 4], 1 << 20),
            Err(FrameError::TooLarge {
                len: 0xffff_ffff,
                ..
            })
        ));
        assert_eq!(header(258), [0, 0, 1, 2]);
    }
}

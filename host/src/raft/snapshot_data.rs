//! [`SnapshotData`]: the bytes of one snapshot in memory, built here or received from the
//! leader, and the guard on receiving them.
//!
//! openraft 0.9 receives a snapshot as chunks (`InstallSnapshotRequest { offset, data }`,
//! one INSTALL_SNAPSHOT call each) and, for a chunk that does not start where the last one
//! ended, *seeks* the snapshot data to the chunk's offset and writes there. Over a
//! `Cursor<Vec<u8>>`, one chunk at offset 2^40 from any node certificate made the receiver
//! zero-fill a terabyte (in practice: abort on the failed allocation). This type refuses
//! that before anything is allocated:
//! - a seek past the bytes received is refused as out of order, so the bytes held never
//!   have a gap and never grow by more than what was actually sent;
//! - a seek back is allowed and the next write truncates there: the leader resends a
//!   chunk whose answer it lost, or restarts the transfer of the same snapshot from 0
//!   (openraft keeps the receiving state while the snapshot id is unchanged, so refusing
//!   a resend would wedge the transfer until the leader builds a new snapshot);
//! - the bytes held never exceed a cap (`ControlOptions::max_snapshot`), so a peer that
//!   streams in-order chunks forever costs at most that much memory.
//!
//! Snapshots this node built or stored are read (and seeked) by the sender the same way;
//! they are never written to.

use std::io::{self, Cursor, SeekFrom};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

/// One snapshot's bytes, with a read/write position.
#[derive(Debug)]
pub struct SnapshotData {
    bytes: Cursor<Vec<u8>>,
    /// The most bytes writes may make it hold.
    cap: usize,
}

impl SnapshotData {
    /// An empty snapshot to receive into, holding at most `cap` bytes.
    pub(crate) fn receiving(cap: usize) -> SnapshotData {
        SnapshotData {
            bytes: Cursor::new(Vec::new()),
            cap,
        }
    }

    /// A complete snapshot (built here or loaded from the store), to be read.
    pub(crate) fn holding(bytes: Vec<u8>) -> SnapshotData {
        let cap = bytes.len();
        SnapshotData {
            bytes: Cursor::new(bytes),
            cap,
        }
    }

    /// The bytes held.
    pub(crate) fn into_inner(self) -> Vec<u8> {
        self.bytes.into_inner()
    }

    fn len(&self) -> u64 {
        self.bytes.get_ref().len() as u64
    }
}

impl AsyncRead for SnapshotData {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.bytes).poll_read(cx, buf)
    }
}

impl AsyncSeek for SnapshotData {
    fn start_seek(mut self: Pin<&mut Self>, position: SeekFrom) -> io::Result<()> {
        let len = self.len();
        let target = match position {
            SeekFrom::Start(offset) => Some(offset),
            SeekFrom::End(delta) => len.checked_add_signed(delta),
            SeekFrom::Current(delta) => self.bytes.position().checked_add_signed(delta),
        };
        match target {
            Some(target) if target <= len => {
                self.bytes.set_position(target);
                Ok(())
            }
            Some(target) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "snapshot chunk out of order: it starts at offset {target}, but {len} bytes \
                     are received so far"
                ),
            )),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("snapshot seek out of range: {position:?} with {len} bytes held"),
            )),
        }
    }

    fn poll_complete(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<u64>> {
        Poll::Ready(Ok(self.bytes.position()))
    }
}

impl AsyncWrite for SnapshotData {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        // `start_seek` keeps the position within the bytes held.
        let at = usize::try_from(self.bytes.position()).expect("the position is within the bytes");
        let end = at.saturating_add(buf.len());
        if end > self.cap {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the snapshot exceeds the limit of {} bytes (a chunk would end at {end})",
                    self.cap
                ),
            )));
        }
        // A write after a seek back rewrites the snapshot from there: what followed is
        // dropped, so the bytes held stay a gapless prefix of what the leader sends.
        let bytes = self.bytes.get_mut();
        bytes.truncate(at);
        bytes.extend_from_slice(buf);
        self.bytes.set_position(end as u64);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn chunks_are_taken_in_order_resent_ones_rewrite_and_the_cap_holds() {
        let mut data = SnapshotData::receiving(10);
        data.write_all(b"abcd").await.unwrap();
        let gap = data.seek(SeekFrom::Start(1 << 40)).await.unwrap_err();
        assert!(gap.to_string().contains("out of order"), "{gap}");
        assert_eq!(data.len(), 4, "nothing was allocated for the gap");

        // A resend of the second half, then the next chunk.
        data.seek(SeekFrom::Start(2)).await.unwrap();
        data.write_all(b"CD").await.unwrap();
        data.write_all(b"efgh").await.unwrap();
        let over = data.write_all(b"ijk").await.unwrap_err();
        assert!(over.to_string().contains("limit of 10 bytes"), "{over}");
        assert_eq!(data.into_inner(), b"abCDefgh");
    }

    #[tokio::test]
    async fn a_held_snapshot_reads_from_any_offset_within_it() {
        let mut data = SnapshotData::holding(b"0123456789".to_vec());
        assert_eq!(data.seek(SeekFrom::End(0)).await.unwrap(), 10);
        data.seek(SeekFrom::Start(4)).await.unwrap();
        let mut rest = String::new();
        data.read_to_string(&mut rest).await.unwrap();
        assert_eq!(rest, "456789");
        assert!(data.seek(SeekFrom::Current(-20)).await.is_err());
    }
}

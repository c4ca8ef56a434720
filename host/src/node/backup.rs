//! `tenure snapshot save` on the node's side: a snapshot taken once, then served in pages.
//!
//! A snapshot can be larger than one answer, so the operator reads it in pages of
//! [`PAGE`] bytes. The first page takes the snapshot (`raft/backup.rs`) and keeps it for
//! [`KEEP`] under an id; the following pages name that id, so every page comes from the
//! same image. One snapshot is kept at a time: a second `save` meanwhile starts over.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::shared::{Shared, now_ms};
use crate::api::SnapshotPage;
use crate::raft::TakenSnapshot;

/// The most image bytes in one answer: well under the operator connection's frame limit.
pub const PAGE: usize = 256 * 1024;
/// How long a snapshot is kept for its next pages.
const KEEP: Duration = Duration::from_secs(60);

/// The snapshot being read, if any.
#[derive(Default)]
pub struct Kept {
    inner: Mutex<Option<(u64, Instant, std::sync::Arc<TakenSnapshot>)>>,
    /// The id of the last snapshot taken.
    taken: std::sync::atomic::AtomicU64,
}

/// The page at `offset` of the snapshot `id`, or of a new one (from the start) when `id`
/// is not the one kept.
pub async fn page(
    shared: &Shared,
    kept: &Kept,
    id: Option<u64>,
    offset: u64,
) -> Result<SnapshotPage, String> {
    let found = {
        let inner = kept.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .as_ref()
            .filter(|(kid, at, _)| Some(*kid) == id && at.elapsed() < KEEP)
            .map(|(kid, _, taken)| (*kid, taken.clone()))
    };
    let (id, taken, offset) = match found {
        Some((id, taken)) => (id, taken, offset),
        None => {
            let taken = shared
                .control
                .take_snapshot(now_ms())
                .await
                .map_err(|e| format!("cannot take a snapshot: {e}"))?;
            let taken = std::sync::Arc::new(taken);
            let id = kept
                .taken
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            *kept.inner.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((id, Instant::now(), taken.clone()));
            (id, taken, 0)
        }
    };
    let total = taken.image.len() as u64;
    let start = offset.min(total) as usize;
    let end = (start + PAGE).min(taken.image.len());
    Ok(SnapshotPage {
        id,
        header: serde_json::to_string(&taken.header).map_err(|e| e.to_string())?,
        offset: start as u64,
        total,
        bytes: taken.image[start..end].to_vec(),
    })
}

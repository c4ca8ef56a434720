//! Snapshot files: `tenure snapshot save` writes one, `status` reads its header, and
//! `restore` seeds a new cluster from it (`recover.rs` does the seeding).
//!
//! **The image.** A snapshot file holds the state machine's image at one log index, the
//! same bytes as the store's snapshot (`state_machine::Image`): it is taken by having
//! openraft build a snapshot at (or after) the index applied when the operator asked,
//! and reading it back, so it is consistent by construction.
//!
//! **The file.** A text line `tenure snapshot`, a JSON header line ([`Header`]: the index
//! and term, the store format the image is encoded in, who wrote it and when, its length
//! and SHA-256), then the image. The header is readable with `head -2`; the checksum
//! catches a truncated or damaged copy before anything is restored from it. A reader
//! refuses a file of a newer file format or store format, naming both. Files are
//! written to a temporary name, fsynced and renamed, so a crash never leaves half a
//! snapshot under the name asked for.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use redb::ReadableDatabase;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Control;
use super::db::{self, CURRENT, SNAPSHOT};
use super::error::ControlError;
use super::state_machine::{Image, Stored};

/// The first line of every snapshot file.
const MAGIC: &str = "tenure snapshot\n";
/// The version of the file's layout (not of the image: see [`Header::store_format`]).
pub const FILE_FORMAT: u32 = 1;
/// How long [`Control::take_snapshot`] waits for openraft to build the snapshot.
const BUILD_WITHIN: Duration = Duration::from_secs(20);

/// What a snapshot file says about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub file_format: u32,
    /// The store format the image is encoded in (`format.rs`).
    pub store_format: u32,
    /// The log index of the last entry the image includes.
    pub index: u64,
    /// That entry's term.
    pub term: u64,
    /// The voters of the membership the image holds.
    pub voters: Vec<String>,
    /// The node that took it, and when (ms since the Unix epoch, its clock).
    pub taken_by: String,
    pub taken_ms: u64,
    /// The build that wrote it.
    pub writer: String,
    /// The image's length and `sha256:<hex>`.
    pub bytes: u64,
    pub sha256: String,
    /// The id of the cluster it was taken from (`cluster/identity.rs`); `None` for a
    /// cluster without one yet, and in files written before ids.
    #[serde(default)]
    pub cluster: Option<crate::cluster::ClusterId>,
}

/// A snapshot as taken: its header and its image's bytes.
#[derive(Clone, Debug)]
pub struct Taken {
    pub header: Header,
    pub image: Vec<u8>,
}

impl Control {
    /// Has openraft build a snapshot that includes everything applied so far, and returns
    /// it (see the module doc). `now_ms` stamps it.
    pub async fn take_snapshot(&self, now_ms: u64) -> Result<Taken, ControlError> {
        let wanted = *self.shared.applied.borrow();
        self.shared
            .raft
            .trigger()
            .snapshot()
            .await
            .map_err(|e| ControlError::Stopped(e.to_string()))?;
        let mut metrics = self.shared.metrics.clone();
        let built = metrics.wait_for(|m| m.snapshot.is_some_and(|s| s.index >= wanted));
        match tokio::time::timeout(BUILD_WITHIN, built).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return Err(ControlError::Stopped("raft stopped".into())),
            Err(_) => {
                return Err(ControlError::Stopped(format!(
                    "no snapshot at index {wanted} was built within {BUILD_WITHIN:?}"
                )));
            }
        }
        let Some(db) = self.db.upgrade() else {
            return Err(ControlError::Stopped("the store is closed".into()));
        };
        let stored: Stored = tokio::task::spawn_blocking(move || -> Result<Stored, String> {
            let tx = db.begin_read().map_err(|e| e.to_string())?;
            let table = tx.open_table(SNAPSHOT).map_err(|e| e.to_string())?;
            let value = table
                .get(CURRENT)
                .map_err(|e| e.to_string())?
                .ok_or("no snapshot stored")?;
            db::decode(value.value()).map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| ControlError::Stopped(e.to_string()))?
        .map_err(ControlError::Stopped)?;
        let last = stored.meta.last_log_id;
        let voters = {
            let membership = stored.meta.last_membership.membership();
            membership
                .voter_ids()
                .filter_map(|id| membership.get_node(&id).map(|p| p.name.clone()))
                .collect()
        };
        let image = Image::decode(&stored.data).ok();
        Ok(Taken {
            header: Header {
                file_format: FILE_FORMAT,
                // The format of the image as the cluster's version has it: format 5 until
                // version 7, so that 0.2.0 restores a backup taken before the raise.
                store_format: super::format::format_for(
                    image.as_ref().map_or(0, |image| image.cluster.version),
                ),
                index: last.map_or(0, |l| l.index),
                term: last.map_or(0, |l| l.leader_id.term),
                voters,
                taken_by: self.shared.name.clone(),
                taken_ms: now_ms,
                writer: super::format::writer(),
                bytes: stored.data.len() as u64,
                sha256: sha256(&stored.data),
                // The image's own (it may predate the `Identify` this replica applied).
                cluster: image.and_then(|image| image.cluster.id),
            },
            image: stored.data,
        })
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Writes `taken` to `path` atomically (temporary name, fsync, rename, directory fsync).
pub fn write_file(path: &Path, taken: &Taken) -> std::io::Result<()> {
    let header = serde_json::to_string(&taken.header).map_err(std::io::Error::other)?;
    let partial = path.with_extension("partial");
    {
        let mut file = std::fs::File::create(&partial)?;
        file.write_all(MAGIC.as_bytes())?;
        file.write_all(header.as_bytes())?;
        file.write_all(b"\n")?;
        file.write_all(&taken.image)?;
        file.sync_all()?;
    }
    std::fs::rename(&partial, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Reads a snapshot file's header, checking the layout only.
pub fn read_header(path: &Path) -> Result<(Header, Vec<u8>), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let not_one = || format!("{} is not a Tenure snapshot file", path.display());
    let rest = bytes.strip_prefix(MAGIC.as_bytes()).ok_or_else(not_one)?;
    let end = rest.iter().position(|&b| b == b'\n').ok_or_else(not_one)?;
    let header: Header = serde_json::from_slice(&rest[..end])
        .map_err(|e| format!("{}: unreadable header: {e}", path.display()))?;
    if header.file_format > FILE_FORMAT || header.store_format > super::STORE_FORMAT {
        return Err(format!(
            "{} is a snapshot of file format {} and store format {}, written by {}; this build \
             reads file format {FILE_FORMAT} and store formats up to {}: use a build at least \
             as new as the one that wrote it",
            path.display(),
            header.file_format,
            header.store_format,
            header.writer,
            super::STORE_FORMAT
        ));
    }
    Ok((header, rest[end + 1..].to_vec()))
}

/// Reads a whole snapshot file: its header, and its image once the length and checksum
/// match.
pub(super) fn read_file(path: &Path) -> Result<(Header, Image), String> {
    let (header, image) = read_header(path)?;
    if image.len() as u64 != header.bytes || sha256(&image) != header.sha256 {
        return Err(format!(
            "{} is damaged or truncated: its image has {} bytes and {}, the header says {} \
             bytes and {}",
            path.display(),
            image.len(),
            sha256(&image),
            header.bytes,
            header.sha256
        ));
    }
    let image = super::format::image_from(header.store_format, image);
    let image =
        Image::decode(&image).map_err(|e| format!("{}: unreadable image: {e}", path.display()))?;
    Ok((header, image))
}

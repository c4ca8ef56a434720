//! `tenure snapshot save | status | restore`: backups of the replicated state, and a new
//! cluster seeded from one (`raft/backup.rs`, `raft/recover.rs`).

use std::path::PathBuf;

use anyhow::Context;

use super::Connection;
use crate::api::{AdminClient, AdminRequest, AdminResponse};
use crate::config::{Config, Overrides};
use crate::raft::{SnapshotHeader, TakenSnapshot};

/// `tenure snapshot …`.
#[derive(Debug, clap::Subcommand)]
pub enum SnapshotCommand {
    /// Save a consistent snapshot of the replicated state (every member, session, slot,
    /// token, saved plugin state, revocation and history entry) to FILE, from any node.
    Save {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        #[command(flatten)]
        conn: Connection,
    },
    /// Print a snapshot file's header (index, term, voters, who took it and when, size,
    /// checksum), and check its checksum.
    Status {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Seed a new cluster from FILE into the empty data dir of the node of --config, which
    /// becomes its only voter: every session ended, the other members forgotten (they
    /// join as new members), fencing tokens moved --bump-token further on, and nothing
    /// granted until a full lease TTL after it leads.
    Restore {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// The node's config file (its name, data dir and address).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// How far on the first new log index (every new fencing token) is placed.
        #[arg(long, value_name = "N", default_value_t = crate::raft::DEFAULT_BUMP)]
        bump_token: u64,
    },
}

/// Runs a `tenure snapshot` command.
pub fn snapshot(command: SnapshotCommand) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match command {
        SnapshotCommand::Save { file, conn } => {
            let taken = runtime.block_on(fetch(&conn))?;
            crate::raft::write_snapshot_file(&file, &taken)
                .with_context(|| format!("cannot write {}", file.display()))?;
            let h = &taken.header;
            println!(
                "saved {}: index {} (term {}), {} bytes, {}, taken by {}",
                file.display(),
                h.index,
                h.term,
                h.bytes,
                h.sha256,
                h.taken_by
            );
        }
        SnapshotCommand::Status { file } => {
            let (header, image) =
                crate::raft::read_snapshot_header(&file).map_err(anyhow::Error::msg)?;
            let intact = image.len() as u64 == header.bytes
                && crate::raft::snapshot_sha256(&image) == header.sha256;
            let taken = humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + std::time::Duration::from_millis(header.taken_ms),
            );
            println!(
                "cluster {}\nindex {}\nterm {}\nvoters {}\ntaken by {} at {taken}\nwritten by {} (store format {}, file format {})\nbytes {}\nchecksum {} ({})",
                header
                    .cluster
                    .map_or("without an id".to_string(), |id| id.to_string()),
                header.index,
                header.term,
                header.voters.join(", "),
                header.taken_by,
                header.writer,
                header.store_format,
                header.file_format,
                header.bytes,
                header.sha256,
                if intact { "matches" } else { "DOES NOT MATCH" }
            );
            if !intact {
                anyhow::bail!("{} is damaged or truncated", file.display());
            }
        }
        SnapshotCommand::Restore {
            file,
            config,
            bump_token,
        } => {
            super::check_bump(bump_token)?;
            let config = Config::load(Some(&config), Overrides::default())?;
            let done = runtime.block_on(crate::node::restore(&config, &file, bump_token))?;
            println!(
                "{name} holds a new cluster, {id}, seeded from {file} (a snapshot of {was}), \
                 and is its only voter.\n\
                 the snapshot's voters: {before}; every fencing token from now on is above \
                 {index}.\nsessions ended: {sessions}.\nmembers forgotten: {forgotten} (other \
                 nodes join as new members: an empty data dir and `join = [\"{name}@ADDR\"]`).\n\
                 once it runs and leads, it grants nothing for a full lease TTL.",
                name = config.name,
                file = file.display(),
                id = done.cluster,
                was = super::cluster_before(done.cluster_before),
                before = super::list(&done.voters_before),
                index = done.index,
                sessions = super::list(&done.sessions),
                forgotten = super::list(&done.forgotten),
            );
        }
    }
    Ok(())
}

/// Reads a snapshot from the node `conn` names, page by page.
async fn fetch(conn: &Connection) -> anyhow::Result<TakenSnapshot> {
    let (node, addr) = conn.target()?;
    let client = AdminClient::new(conn.files(), addr, conn.timeout).await?;
    let result = async {
        let mut id = None;
        let mut image = Vec::new();
        let header = loop {
            let request = AdminRequest::Snapshot {
                id,
                offset: image.len() as u64,
            };
            let page = match client.request(&node, addr, &request).await? {
                AdminResponse::Snapshot(page) => page,
                other => anyhow::bail!("the node answered a snapshot page with {other:?}"),
            };
            if id.is_some_and(|id| id != page.id) || page.offset != image.len() as u64 {
                // The node took a new snapshot (the kept one expired): start over.
                image.clear();
            }
            id = Some(page.id);
            image.extend_from_slice(&page.bytes);
            if image.len() as u64 >= page.total {
                break page.header;
            }
            if page.bytes.is_empty() {
                anyhow::bail!(
                    "the node sent an empty page at {} of {}",
                    page.offset,
                    page.total
                );
            }
        };
        let header: SnapshotHeader =
            serde_json::from_str(&header).context("the node sent an unreadable header")?;
        if crate::raft::snapshot_sha256(&image) != header.sha256 {
            anyhow::bail!("the snapshot read does not match its checksum; try again");
        }
        Ok(TakenSnapshot { header, image })
    }
    .await;
    client.close().await;
    result
}

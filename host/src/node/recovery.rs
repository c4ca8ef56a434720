//! `tenure recover` on a stopped node: the checks a start makes, then the store rewritten
//! (`raft/recover.rs` says what and why).

use super::NodeError;
use super::preflight;
use crate::config::Config;
use crate::raft::{Peer, Recovered};

/// Makes the node of `config` the only voter of its cluster, its tokens `bump` further
/// on. Refused while the node runs (the data dir's lock, held throughout) or when its
/// store is of a newer format.
pub async fn recover(config: &Config, bump: u64) -> Result<Recovered, NodeError> {
    preflight::data_dir_free(&config.data_dir)?;
    preflight::store_format(&config.data_dir)?;
    let _lock = preflight::lock_data_dir(&config.data_dir)?;
    let now = super::shared::now_ms();
    Ok(crate::raft::recover(&config.data_dir, &me(config), bump, now).await?)
}

/// Seeds a new cluster in the node's empty data dir from the snapshot file `file`, the
/// node of `config` its only voter, tokens `bump` further on (`raft/recover.rs`).
pub async fn restore(
    config: &Config,
    file: &std::path::Path,
    bump: u64,
) -> Result<Recovered, NodeError> {
    preflight::data_dir_free(&config.data_dir)?;
    super::datadir::prepare(&config.data_dir).map_err(|source| NodeError::Folder {
        what: "data",
        path: config.data_dir.clone(),
        source,
    })?;
    let _lock = preflight::lock_data_dir(&config.data_dir)?;
    let now = super::shared::now_ms();
    Ok(crate::raft::restore(&config.data_dir, file, &me(config), bump, now).await?)
}

/// This node as the new membership lists it: its name and the address peers dial.
fn me(config: &Config) -> Peer {
    let addr = config
        .advertise
        .clone()
        .unwrap_or_else(|| config.listen.clone());
    Peer::new(config.name.clone(), addr)
}

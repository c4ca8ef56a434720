//! Whether this node starts as a new member of its cluster (issue 24), decided before its
//! Raft starts, since Raft takes the member id once (`raft/types.rs`).
//!
//! A node given `join` is a new member. A node given `peers` is an initial member, known
//! by its name's id, unless its data dir is new and its cluster already knows the name:
//! the disk was lost or replaced, and the node comes back as a new member, with a member
//! id of its own, never the id of the member that forgot its votes and log (etcd learns a
//! member's id from the cluster before it starts Raft for the same reason). It asks its
//! peers once, over a transport bound for the question and closed after it, which answers
//! no one (a peer asking meanwhile hears "starting" and asks again). A peer that gives no
//! answer in time counts as not knowing the name: a cluster that is down as a whole looks
//! like one not formed yet, and the node then starts under its name's id, as before;
//! what it may do as that member is still decided by its peers once they answer
//! (`raft/forming.rs`), and every message to it names the store it is for.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::config::Config;
use crate::raft::Peer;
use crate::rpc::{Rpc, Service};
use crate::runtime::BoxFuture;
use crate::transport::{PeerInfo, TlsFiles, TransportConfig};

use super::NodeError;

/// Whether the node of `config` joins as a new member (see the module doc); `listen` is
/// the address it binds, `files` its certificate.
pub(super) async fn is_new_member(
    config: &Config,
    files: &TlsFiles,
    listen: SocketAddr,
) -> Result<bool, NodeError> {
    if !config.join.is_empty() {
        return Ok(true);
    }
    if config.peers.is_empty() || config.data_dir.join("raft.redb").exists() {
        return Ok(false);
    }
    let transport = TransportConfig {
        listen,
        reset_key: Some(super::reset_key(&config.data_dir)?),
        ..TransportConfig::default()
    };
    let incarnation = super::next_incarnation(&config.data_dir)?;
    let rpc = Arc::new(
        Rpc::bind(
            transport,
            files.clone(),
            incarnation,
            crate::cluster::ClusterCell::default(),
            Arc::new(Starting),
        )
        .await?,
    );
    let advertise = config
        .advertise
        .clone()
        .unwrap_or_else(|| super::advertised(listen).to_string());
    let peers: Vec<(String, String)> = config
        .peers
        .iter()
        .map(|p| (p.name.clone(), p.addr.clone()))
        .collect();
    let known = crate::raft::knows_me(
        rpc.clone(),
        Peer::new(config.name.clone(), advertise),
        &peers,
    )
    .await;
    rpc.close().await;
    if known {
        tracing::info!(
            event = crate::events::CLUSTER_WAITING,
            "this node's data dir is new and its cluster knows its name: it comes back as a new member, with a member id of its own"
        );
    }
    Ok(known)
}

/// The service of the transport that only asks: it answers no one.
struct Starting;

impl Service for Starting {
    fn call(
        &self,
        _from: &PeerInfo,
        _kind: u16,
        _payload: Vec<u8>,
    ) -> BoxFuture<Result<Vec<u8>, String>> {
        Box::pin(async { Err("starting: asking its peers whether they know it".to_owned()) })
    }
}

//! Whether this node starts as a new member of its cluster (issue 24), decided before its
//! Raft starts, since Raft takes the member id once (`raft/types.rs`).
//!
//! A node given `join` is a new member. A node given `peers` is an initial member, known
//! by its name's id, unless its data dir is new and its cluster already knows the name:
//! the disk was lost or replaced, and the node comes back as a new member, with a member
//! id of its own, never the id of the member that forgot its votes and log (etcd learns a
//! member's id from the cluster before it starts Raft for the same reason). It asks its
//! peers over a transport bound for the question and closed after it, until an answer
//! knows it or a majority of the initial members has answered without knowing it
//! (`raft::knows_me`): a cluster that is down as a whole is waited for, as forming waits
//! for it. That transport answers the same question of its peers for this node (it has
//! formed nothing), so initial members starting together on new data dirs count each
//! other, and every other question with "starting" (the peer asks again).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use crate::config::Config;
use crate::future::BoxFuture;
use crate::raft::Peer;
use crate::rpc::{Rpc, Service};
use crate::transport::{PeerInfo, TlsFiles, TransportConfig};

use super::NodeError;

/// The RTT the asking transport assumes before it measures one (see where it is used):
/// a LAN's, so a dial nobody answered drains in about 140 ms; a lost first packet is
/// only resent sooner.
const QUESTION_RTT: std::time::Duration = std::time::Duration::from_millis(15);

/// Whether the node of `config` joins as a new member (see the module doc); `listen` is
/// the address it binds, `files` its certificate. `None` when `shutdown` came first.
pub(super) async fn is_new_member(
    config: &Config,
    files: &TlsFiles,
    listen: SocketAddr,
    shutdown: Pin<&mut impl Future<Output = ()>>,
    probe: &super::probe::LateProbe,
) -> Result<Option<bool>, NodeError> {
    if !config.join.is_empty() {
        return Ok(Some(true));
    }
    if config.peers.is_empty() || config.data_dir.join("raft.redb").exists() {
        return Ok(Some(false));
    }
    let transport = TransportConfig {
        listen,
        // Its close waits until its connections have drained, and a dial of a peer that
        // had not bound yet (initial members start together) drains for nine times the
        // assumed RTT: 560 ms at the default, which every initial member's start paid.
        initial_rtt: Some(QUESTION_RTT),
        reset_key: Some(super::reset_key(&config.data_dir)?),
        ..TransportConfig::default()
    };
    let incarnation = super::next_incarnation(&config.data_dir)?;
    let names = config
        .peers
        .iter()
        .map(|p| p.name.clone())
        .chain(std::iter::once(config.name.clone()))
        .collect();
    let rpc = Arc::new(
        Rpc::bind(
            transport,
            files.clone(),
            incarnation,
            crate::cluster::ClusterCell::default(),
            Arc::new(Starting {
                store_info: crate::raft::fresh_store_info(names),
            }),
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
    probe.asking(Some(rpc.clone()));
    let known = tokio::select! {
        known = crate::raft::knows_me(rpc.clone(), Peer::new(config.name.clone(), advertise), &peers) => Some(known),
        _ = shutdown => None,
    };
    probe.asking(None);
    rpc.close().await;
    if known == Some(true) {
        tracing::info!(
            event = crate::events::CLUSTER_WAITING,
            "this node's data dir is new and its cluster knows its name: it comes back as a new member, with a member id of its own"
        );
    }
    Ok(known)
}

/// The service of the transport that asks: it answers [`crate::raft::STORE_INFO`] as a
/// node with no Raft store, and nothing else.
struct Starting {
    /// The encoded answer ([`crate::raft::fresh_store_info`]).
    store_info: Vec<u8>,
}

impl Service for Starting {
    fn call(
        &self,
        _from: &PeerInfo,
        kind: u16,
        _payload: Vec<u8>,
    ) -> BoxFuture<Result<Vec<u8>, String>> {
        let answer = if kind == crate::raft::STORE_INFO {
            Ok(self.store_info.clone())
        } else {
            Err("starting: asking its peers whether they know it".to_owned())
        };
        Box::pin(async move { answer })
    }
}

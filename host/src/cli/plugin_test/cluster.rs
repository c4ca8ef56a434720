//! The local cluster of `tenure plugin test`: three nodes on loopback in a temporary
//! dir, of which two (`n1`, `n2`) have the plugin and one (`n3`, the witness) has none.
//!
//! Why a witness: a slot moves to a surviving node only if the survivors still form a
//! Raft majority. Of two nodes, one alone is no majority (and with two members only one
//! votes), so killing the wrong one would stop the cluster, not move the slot. With a
//! third voter that never runs the plugin, any one plugin node can be killed and the
//! other takes the slot over, as in a real three-node deployment; the plugin still only
//! ever moves between `n1` and `n2`.
//!
//! Everything is real and made here: a CA, a certificate per node and an operator
//! certificate (the project's `pki`), free UDP ports, a config per node naming the other
//! two as peers, and `tenure run` processes of this very binary. Admin requests (`move`)
//! go through [`AdminClient`] to the witness, which is never killed, and on to the leader.

use std::fmt::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::node::Node;
use crate::api::{AdminClient, AdminRequest, AdminResponse, StatusQuery};
use crate::pki;
use crate::transport::TlsFiles;

/// The operator certificate's name.
const OPERATOR: &str = "plugin-test";
/// The bound of one admin request.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The plugin's two files, to install on `n1` and `n2`.
pub struct Plugin {
    /// The file name stem (`NAME` of `NAME.wasm`).
    pub stem: String,
    pub wasm: Vec<u8>,
    pub manifest: Option<Vec<u8>>,
    /// The files the manifest's `secrets` name, by their path relative to the plugins
    /// folder, as they were beside the wasm.
    pub secrets: Vec<(PathBuf, Vec<u8>)>,
}

/// The nodes and their temporary dir.
pub struct Cluster {
    /// `n1`, `n2` (with the plugin) and `n3` (the witness). Dropped, and so killed,
    /// before the dir goes.
    pub nodes: Vec<Node>,
    /// The plugin's file name stem.
    pub stem: String,
    exe: PathBuf,
    operator: TlsFiles,
    runtime: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
}

/// How many of the nodes have the plugin.
pub const PLUGIN_NODES: usize = 2;

impl Cluster {
    /// Makes the dir, the certificates and the configs, and installs the plugin on `n1`
    /// and `n2`. Nothing runs yet.
    pub fn new(plugin: &Plugin, ttl: Duration) -> anyhow::Result<Cluster> {
        let dir = tempfile::Builder::new()
            .prefix("tenure-plugin-test-")
            .tempdir()
            .context("cannot make a temporary dir")?;
        let root = dir.path();
        let ca = root.join("ca");
        let certs = root.join("certs");
        // The usual validities: shorter ones would only add expiry warnings to the logs.
        pki::init_ca(
            &ca,
            pki::Algo::Ed25519,
            pki::DEFAULT_CA_VALIDITY_DAYS,
            pki::IfExists::Refuse,
        )?;
        let (cert, key) = pki::issue(
            &ca,
            &pki::Subject::Operator(OPERATOR.into()),
            &certs,
            pki::DEFAULT_LEAF_VALIDITY_DAYS,
            None,
            pki::IfExists::Refuse,
        )?;
        let operator = TlsFiles {
            ca: ca.join(pki::CA_CERT_FILE),
            cert,
            key,
        };
        let addrs = free_ports(3)?;
        let names: Vec<String> = (1..=addrs.len()).map(|i| format!("n{i}")).collect();
        let mut nodes = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let (cert, key) = pki::issue(
                &ca,
                &pki::Subject::Node(name.clone()),
                &certs,
                pki::DEFAULT_LEAF_VALIDITY_DAYS,
                None,
                pki::IfExists::Refuse,
            )?;
            let home = root.join(name);
            std::fs::create_dir_all(home.join("plugins"))?;
            let peers: Vec<String> = (0..addrs.len())
                .filter(|&j| j != i)
                .map(|j| format!("{}@{}", names[j], addrs[j]))
                .collect();
            let config = config(name, &addrs[i], &peers, &operator.ca, &cert, &key, ttl);
            let file = home.join("tenure.toml");
            std::fs::write(&file, config)?;
            if i < PLUGIN_NODES {
                install(&home.join("plugins"), plugin)?;
            }
            nodes.push(Node::new(name, &addrs[i].to_string(), file));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        Ok(Cluster {
            nodes,
            stem: plugin.stem.clone(),
            exe: std::env::current_exe().context("cannot find this program's file")?,
            operator,
            runtime,
            dir,
        })
    }

    /// Puts `manifest` in place of the plugin's manifest on the plugin nodes: written beside
    /// it, then renamed over it, so a node never reads half a file.
    pub fn replace_manifest(&self, manifest: &[u8]) -> anyhow::Result<()> {
        let stem = &self.stem;
        for node in &self.nodes[..PLUGIN_NODES] {
            let plugins = self.dir.path().join(&node.name).join("plugins");
            let temp = plugins.join(format!(".{stem}.toml.partial"));
            std::fs::write(&temp, manifest)?;
            std::fs::rename(&temp, plugins.join(format!("{stem}.toml")))?;
        }
        Ok(())
    }

    /// The plugin's manifest as installed on the first plugin node, if any.
    pub fn installed_manifest(&self) -> Option<Vec<u8>> {
        let plugins = self.dir.path().join(&self.nodes[0].name).join("plugins");
        std::fs::read(plugins.join(format!("{}.toml", self.stem))).ok()
    }

    /// The temporary dir.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Keeps the temporary dir after the test (the nodes are killed all the same).
    pub fn keep(self) -> PathBuf {
        let Cluster { nodes, dir, .. } = self;
        drop(nodes);
        dir.keep()
    }

    /// Spawns node `i`.
    pub fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        self.nodes[i].spawn(&self.exe)
    }

    /// The nodes that hold a session and whose plugin for `resource` the cluster knows
    /// (per the witness's replica): those a slot can be granted or moved to.
    pub fn advertising(&self, resource: &str) -> anyhow::Result<Vec<String>> {
        let (witness, addr) = self.witness()?;
        let filter = StatusQuery {
            resource: Some(resource.to_string()),
            ..StatusQuery::default()
        };
        let status = self.runtime.block_on(async {
            let client = AdminClient::new(self.operator.clone(), addr, ADMIN_TIMEOUT).await?;
            let status = client.status(witness, addr, &filter).await;
            client.close().await;
            status
        })?;
        Ok(status
            .nodes
            .into_iter()
            .filter(|n| n.session.is_some() && n.plugins.iter().any(|p| p.resource == resource))
            .map(|n| n.name)
            .collect())
    }

    fn witness(&self) -> anyhow::Result<(&str, SocketAddr)> {
        let witness = self.nodes.last().expect("a witness");
        Ok((&witness.name, witness.addr.parse()?))
    }

    /// Asks the cluster (through the witness, on to the leader) to move the resource's
    /// slot to node `to`; returns the node's answer.
    pub fn move_slot(&self, resource: &str, to: &str) -> anyhow::Result<String> {
        let (witness, addr) = self.witness()?;
        let request = AdminRequest::Move {
            resource: resource.to_string(),
            slot: None,
            to: to.to_string(),
        };
        let answer = self.runtime.block_on(async {
            let client = AdminClient::new(self.operator.clone(), addr, ADMIN_TIMEOUT).await?;
            let answer = client.request(witness, addr, &request).await;
            client.close().await;
            answer
        })?;
        match answer {
            AdminResponse::Done(message) => Ok(message),
            other => anyhow::bail!("the cluster answered the move with {other:?}"),
        }
    }
}

/// A node's config file.
fn config(
    name: &str,
    addr: &SocketAddr,
    peers: &[String],
    ca: &Path,
    cert: &Path,
    key: &Path,
    ttl: Duration,
) -> String {
    let q = |s: &str| toml::Value::String(s.to_string()).to_string();
    let p = |p: &Path| q(&p.to_string_lossy());
    let peers: Vec<String> = peers.iter().map(|s| q(s)).collect();
    let mut text = String::new();
    // Relative paths are relative to the config's folder: the node's own dir.
    writeln!(text, "name = {}", q(name)).unwrap();
    writeln!(text, "data_dir = \"data\"\nplugins_dir = \"plugins\"").unwrap();
    writeln!(text, "listen = {}", q(&addr.to_string())).unwrap();
    writeln!(text, "peers = [{}]", peers.join(", ")).unwrap();
    writeln!(
        text,
        "\n[tls]\nca = {}\ncert = {}\nkey = {}",
        p(ca),
        p(cert),
        p(key)
    )
    .unwrap();
    writeln!(text, "\n[lease]\nttl = \"{}ms\"", ttl.as_millis()).unwrap();
    text
}

/// Writes the secret files (owner-only), the manifest, then the wasm into a plugins folder.
fn install(plugins: &Path, plugin: &Plugin) -> anyhow::Result<()> {
    for (relative, bytes) in &plugin.secrets {
        let path = plugins.join(relative);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        crate::private_files::write_atomic(&path, bytes)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(manifest) = &plugin.manifest {
        std::fs::write(plugins.join(format!("{}.toml", plugin.stem)), manifest)?;
    }
    std::fs::write(plugins.join(format!("{}.wasm", plugin.stem)), &plugin.wasm)?;
    Ok(())
}

/// `n` free UDP ports on loopback, held together while picked so that they differ.
fn free_ports(n: usize) -> anyhow::Result<Vec<SocketAddr>> {
    let sockets = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .context("cannot pick a free UDP port on 127.0.0.1")?;
    Ok(sockets
        .iter()
        .map(|s| s.local_addr())
        .collect::<Result<_, _>>()?)
}

/// How long something took, for the report: `1.2s`.
pub fn took(since: Instant) -> String {
    format!("{:.1}s", since.elapsed().as_secs_f64())
}

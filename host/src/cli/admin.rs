//! The admin commands: `tenure status`, `move`, `drain`, `undrain`, `release`, `revoke`,
//! `member` (`member.rs`).
//!
//! Each sends one [`AdminRequest`] to one node as an operator ([`AdminClient`]) and prints
//! the answer: the status as aligned tables (or JSON with `--json`), an action's outcome
//! as one sentence. Errors go to stderr through `main`, with exit code 1.
//!
//! The connection flags default to the single-node default's development certificates
//! (`tenure-data/certs/{ca,operator}.pem`, `operator.key`) and its address
//! (`127.0.0.1:7400`, node `local`), so on one machine `tenure status` just works. For a
//! cluster, point them at the operator's files and any node (flags or `TENURE_ADMIN_*`).
//! `--addr` may name the node too (`NAME@HOST:PORT`); only `tenure watch` (`watch.rs`)
//! takes several, to fail over between them.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::api::{
    AdminClient, AdminRequest, AdminResponse, StatusQuery, parse_fingerprint, parse_slot_ref,
};
use crate::pki;
use crate::terminal::escape;
use crate::transport::TlsFiles;

/// The operator commands (each also takes the connection flags).
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Show the cluster: leader, term, nodes (sessions, labels, draining), resources with
    /// their slots, owners, tokens and pending slots, plugin versions, certificates in
    /// use, recent changes. Above 50 slots the tables give way to a summary: the slots
    /// that need a look, then counts.
    Status {
        /// Print JSON instead of tables (the whole status, whatever its size).
        #[arg(long)]
        json: bool,
        /// Only this resource: its plugin, every slot, its history.
        #[arg(long, value_name = "NAME")]
        resource: Option<String>,
        /// Only this node: its plugins and the resources it holds or can run. (`--node`
        /// names the node to ask.)
        #[arg(long, value_name = "NODE")]
        on: Option<String>,
        #[command(flatten)]
        conn: Connection,
    },
    /// Move a slot to another node by graceful handover (the owner stops and cleans up,
    /// then NODE starts it).
    Move {
        /// RESOURCE or RESOURCE/SLOT (the slot may be omitted when only one is granted).
        #[arg(value_name = "RESOURCE[/SLOT]")]
        target: String,
        /// The node to move it to.
        #[arg(long, value_name = "NODE")]
        to: String,
        #[command(flatten)]
        conn: Connection,
    },
    /// Move every slot away from a node and give it no new ones.
    ///
    /// With --self, on the node's own host (a Kubernetes preStop hook): the node of the
    /// config file (`tenure run`'s: --config or TENURE_CONFIG) drains itself, asked with
    /// its own certificate, and the command ends once the node holds no slots. A drain the
    /// node put on itself is lifted by the node once it is ready again after a restart; an
    /// operator's drain stays.
    Drain {
        /// The node to drain.
        #[arg(value_name = "NODE", required_unless_present = "own")]
        name: Option<String>,
        /// Drain the node of this host's config, with its own certificate, and wait until
        /// its slots moved (bounded by --timeout).
        #[arg(long = "self", id = "own", conflicts_with = "name")]
        own: bool,
        /// With --self: the node's config file.
        #[arg(long, env = "TENURE_CONFIG", value_name = "FILE")]
        config: Option<PathBuf>,
        #[command(flatten)]
        conn: Connection,
    },
    /// Let a drained node take slots again.
    Undrain {
        /// The node to undrain.
        #[arg(value_name = "NODE")]
        name: String,
        #[command(flatten)]
        conn: Connection,
    },
    /// Have a slot's owner stop, clean up and give it up; placement grants it again.
    Release {
        /// RESOURCE or RESOURCE/SLOT (the slot may be omitted when only one is granted).
        #[arg(value_name = "RESOURCE[/SLOT]")]
        target: String,
        #[command(flatten)]
        conn: Connection,
    },
    /// Revoke a certificate's key: every node refuses every certificate that carries it,
    /// for good, and a node it was issued to is removed from the cluster.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["fingerprint", "certificate"])))]
    Revoke {
        /// The key's fingerprint, sha256:<64 hex digits> of its SubjectPublicKeyInfo (as
        /// `tenure status` and `security.rejected` lines show).
        #[arg(long, value_name = "SHA256")]
        fingerprint: Option<String>,
        /// Or the certificate file (PEM) itself. (Its id is not `cert`, which the
        /// connection's `--cert` already uses.)
        #[arg(id = "certificate", value_name = "CERT.pem")]
        certificate: Option<PathBuf>,
        /// Revoke the fingerprint even if no member or operator presented a certificate
        /// with that key (a key that was never used, or one used before every node last
        /// started).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        conn: Connection,
    },
    /// The Raft members: list them, promote a learner, remove a node gone for good.
    #[command(subcommand)]
    Member(super::member::MemberCommand),
    /// The same as `tenure member remove` (kept for scripts written before it).
    #[command(hide = true)]
    Remove {
        /// The node to remove.
        #[arg(value_name = "NODE")]
        name: String,
        #[command(flatten)]
        conn: Connection,
    },
}

/// Which node to ask, and as whom.
#[derive(Debug, Args)]
pub struct Connection {
    /// The node's address (host:port), or NAME@host:port to name the node too. `tenure
    /// watch` takes it more than once (nodes to fail over to); the other commands once.
    #[arg(
        long,
        env = "TENURE_ADMIN_ADDR",
        default_value = "127.0.0.1:7400",
        value_delimiter = ','
    )]
    pub addr: Vec<String>,
    /// The node's name (its certificate must carry it).
    #[arg(
        long = "node",
        value_name = "NAME",
        env = "TENURE_ADMIN_NODE",
        default_value = "local"
    )]
    pub node_name: String,
    /// The base of the default certificate paths: DIR/certs/{ca.pem,operator.pem,operator.key}.
    #[arg(long, env = "TENURE_ADMIN_DATA_DIR", default_value = "tenure-data")]
    pub data_dir: PathBuf,
    /// The cluster's CA bundle (default: DATA_DIR/certs/ca.pem).
    #[arg(long, env = "TENURE_ADMIN_CA")]
    pub ca: Option<PathBuf>,
    /// The operator certificate (default: DATA_DIR/certs/operator.pem).
    #[arg(long, env = "TENURE_ADMIN_CERT")]
    pub cert: Option<PathBuf>,
    /// The operator key (default: DATA_DIR/certs/operator.key).
    #[arg(long, env = "TENURE_ADMIN_KEY")]
    pub key: Option<PathBuf>,
    /// How long to wait for the node's answer, e.g. 10s.
    #[arg(long, env = "TENURE_ADMIN_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

impl Connection {
    /// The certificate files: the flags, else the development ones under the data dir.
    pub fn files(&self) -> TlsFiles {
        let certs = self.data_dir.join("certs");
        TlsFiles {
            ca: self
                .ca
                .clone()
                .unwrap_or_else(|| certs.join(pki::CA_CERT_FILE)),
            cert: self
                .cert
                .clone()
                .unwrap_or_else(|| certs.join(format!("{}.pem", pki::DEV_OPERATOR_FILE))),
            key: self
                .key
                .clone()
                .unwrap_or_else(|| certs.join(format!("{}.key", pki::DEV_OPERATOR_FILE))),
        }
    }

    /// The nodes `--addr` names, in order: NAME@host:port, or host:port for the node
    /// named by `--node`.
    pub fn targets(&self) -> anyhow::Result<Vec<Target>> {
        self.addr
            .iter()
            .map(|text| {
                let (name, addr) = match text.split_once('@') {
                    Some((name, addr)) => {
                        pki::validate_name(name)
                            .with_context(|| format!("--addr {text:?}: the node name"))?;
                        (name.to_owned(), addr.to_owned())
                    }
                    None => (self.node_name.clone(), text.clone()),
                };
                Ok(Target { name, addr })
            })
            .collect()
    }

    /// The one node to ask, its address resolved (the first address a host name
    /// resolves to).
    pub fn target(&self) -> anyhow::Result<(String, SocketAddr)> {
        let mut targets = self.targets()?;
        if targets.len() != 1 {
            anyhow::bail!(
                "--addr is given {} times: only `tenure watch` takes several nodes",
                targets.len()
            );
        }
        let Target { name, addr } = targets.remove(0);
        let resolved = addr
            .to_socket_addrs()
            .with_context(|| format!("--addr {addr:?} is not a host:port address"))?
            .next()
            .with_context(|| format!("--addr {addr:?} resolves to no address"))?;
        Ok((name, resolved))
    }
}

/// A node to ask: its name (its certificate must carry it) and address (host:port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub name: String,
    pub addr: String,
}

/// Runs one admin command.
pub fn admin(command: AdminCommand) -> anyhow::Result<()> {
    if let AdminCommand::Drain {
        own: true,
        config,
        conn,
        ..
    } = command
    {
        return super::own_drain::drain_self(config, conn.timeout);
    }
    let (request, conn, json) = request_of(command)?;
    if let AdminRequest::StatusPage(filter) = request {
        return status(json, filter, conn);
    }
    let (node, addr) = conn.target()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let answer = runtime.block_on(async {
        let client = AdminClient::new(conn.files(), addr, conn.timeout).await?;
        let answer = client.request(&node, addr, &request).await;
        client.close().await;
        answer
    })?;
    match answer {
        AdminResponse::Status(status) if json => {
            println!("{}", serde_json::to_string_pretty(&status)?);
        }
        AdminResponse::Status(status) => print!("{}", status.render()),
        // The node's own words: shown escaped, like everything a node sends.
        AdminResponse::Done(message) => println!("{}", escape(&message)),
        AdminResponse::StatusPage(_) => anyhow::bail!("the node answered with a status page"),
        AdminResponse::Watch(_) => anyhow::bail!("the node answered with a watch"),
        AdminResponse::Snapshot(_) => anyhow::bail!("the node answered with a snapshot"),
        AdminResponse::Members(list) if json => {
            println!("{}", serde_json::to_string_pretty(&list)?);
        }
        AdminResponse::Members(list) => print!("{}", super::member::render(&list)),
        AdminResponse::Leader { node, addr } => {
            anyhow::bail!(
                "{} at {} is the leader: send the request there",
                escape(&node),
                escape(&addr)
            )
        }
    }
    Ok(())
}

/// `tenure status`: the status, read page by page, narrowed and printed.
fn status(json: bool, filter: StatusQuery, conn: Connection) -> anyhow::Result<()> {
    let (node, addr) = conn.target()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let status = runtime.block_on(async {
        let client = AdminClient::new(conn.files(), addr, conn.timeout).await?;
        let answer = client.status(&node, addr, &filter).await;
        let answer = match answer {
            Ok(status) => Ok(with_failures_elsewhere(&client, status, &filter).await),
            Err(e) => Err(e),
        };
        client.close().await;
        answer
    })?;
    if let Some(resource) = &filter.resource
        && status.resources.is_empty()
    {
        anyhow::bail!(
            "{} knows no resource {}: no live node has a plugin for it and no slot of it \
             is granted (`tenure status` lists them)",
            escape(&status.node),
            escape(resource)
        );
    }
    if let Some(node) = &filter.node
        && status.nodes.is_empty()
    {
        anyhow::bail!(
            "{} knows no node {} (`tenure status` lists them)",
            escape(&status.node),
            escape(node)
        );
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", status.render());
    }
    Ok(())
}

/// The most other nodes `tenure status` asks for their plugins' errors.
const FAILURES_ASKED: usize = 8;

/// `status` with the last failures of the other nodes that cool down for a resource:
/// only a node knows its plugins' errors (`crate::failures`), so each is asked for its
/// own rows (at most [`FAILURES_ASKED`]). A node that cannot be asked is said on stderr;
/// its rows then say where the error is.
async fn with_failures_elsewhere(
    client: &AdminClient,
    mut status: crate::api::Status,
    filter: &StatusQuery,
) -> crate::api::Status {
    for (name, addr) in status.cooling_elsewhere().into_iter().take(FAILURES_ASKED) {
        let query = StatusQuery {
            node: Some(name.clone()),
            resource: filter.resource.clone(),
            ..StatusQuery::default()
        };
        let asked = match tokio::net::lookup_host(&addr).await.map(|mut a| a.next()) {
            Ok(Some(at)) => client
                .status(&name, at, &query)
                .await
                .map_err(|e| e.to_string()),
            Ok(None) => Err(format!("{addr} resolves to no address")),
            Err(e) => Err(format!("cannot resolve {addr}: {e}")),
        };
        match asked {
            Ok(theirs) => status.take_failures_of(&theirs),
            Err(e) => eprintln!(
                "tenure: cannot ask {} for its plugins' last errors: {}",
                escape(&name),
                escape(&e)
            ),
        }
    }
    status
}

/// The request a command sends, its connection flags, and whether JSON is wanted.
fn request_of(command: AdminCommand) -> anyhow::Result<(AdminRequest, Connection, bool)> {
    let slot_ref = |text: &str| parse_slot_ref(text).map_err(anyhow::Error::msg);
    Ok(match command {
        AdminCommand::Status {
            json,
            resource,
            on,
            conn,
        } => {
            if let Some(resource) = &resource {
                crate::catalog::manifest::check_resource_name(resource)
                    .map_err(anyhow::Error::msg)?;
            }
            if let Some(node) = &on {
                pki::validate_name(node)?;
            }
            let filter = StatusQuery {
                resource,
                node: on,
                ..StatusQuery::default()
            };
            (AdminRequest::StatusPage(filter), conn, json)
        }
        AdminCommand::Move { target, to, conn } => {
            let (resource, slot) = slot_ref(&target)?;
            pki::validate_name(&to)?;
            (AdminRequest::Move { resource, slot, to }, conn, false)
        }
        AdminCommand::Drain { name, conn, .. } => {
            let node = name.context("name the node to drain, or pass --self")?;
            (AdminRequest::Drain { node }, conn, false)
        }
        AdminCommand::Undrain { name, conn } => (AdminRequest::Undrain { node: name }, conn, false),
        AdminCommand::Release { target, conn } => {
            let (resource, slot) = slot_ref(&target)?;
            (AdminRequest::Release { resource, slot }, conn, false)
        }
        AdminCommand::Revoke {
            fingerprint,
            certificate,
            force,
            conn,
        } => {
            let request = match (fingerprint, certificate) {
                (Some(text), None) => AdminRequest::Revoke {
                    key: parse_fingerprint(&text).map_err(anyhow::Error::msg)?,
                    certificate: None,
                    node: None,
                    force,
                },
                (None, Some(path)) => revocation_of(&path, force)?,
                _ => anyhow::bail!("give either --fingerprint or a certificate file, not both"),
            };
            (request, conn, false)
        }
        AdminCommand::Remove { name, conn } => {
            pki::validate_name(&name)?;
            (AdminRequest::Remove { node: name }, conn, false)
        }
        AdminCommand::Member(command) => command.request()?,
    })
}

/// The revocation of the key of the first certificate in a PEM file, with the
/// certificate's fingerprint and its node; says whose it is on stderr.
fn revocation_of(path: &PathBuf, force: bool) -> anyhow::Result<AdminRequest> {
    let der = CertificateDer::from_pem_file(path)
        .with_context(|| format!("cannot read a PEM certificate from {}", path.display()))?;
    let key = pki::key_fingerprint(&der)?;
    let certificate = pki::fingerprint(&der);
    let identity = pki::identity_of(&der).ok();
    match &identity {
        Some(identity) => eprintln!("revoking the key of {identity}: {key}"),
        None => eprintln!("revoking key {key}"),
    }
    let node = identity
        .filter(|i| i.kind == pki::Kind::Node)
        .map(|i| i.name);
    Ok(AdminRequest::Revoke {
        key,
        certificate: Some(certificate),
        node,
        force,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<AdminCommand, clap::Error> {
        let mut argv = vec!["tenure"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Admin(command) => Ok(command),
            other => panic!("not an admin command: {other:?}"),
        }
    }

    fn request(args: &[&str]) -> AdminRequest {
        request_of(parse(args).unwrap()).unwrap().0
    }

    #[test]
    fn commands_become_requests() {
        assert_eq!(
            request(&["status"]),
            AdminRequest::StatusPage(StatusQuery::default())
        );
        assert_eq!(
            request(&["status", "--resource", "billing", "--on", "n2"]),
            AdminRequest::StatusPage(StatusQuery {
                resource: Some("billing".into()),
                node: Some("n2".into()),
                ..StatusQuery::default()
            })
        );
        assert!(request_of(parse(&["status", "--resource", "a b"]).unwrap()).is_err());
        assert_eq!(
            request(&["move", "billing/1", "--to", "n2"]),
            AdminRequest::Move {
                resource: "billing".into(),
                slot: Some(1),
                to: "n2".into()
            }
        );
        assert_eq!(
            request(&["release", "billing"]),
            AdminRequest::Release {
                resource: "billing".into(),
                slot: None
            }
        );
        assert_eq!(
            request(&["drain", "n1"]),
            AdminRequest::Drain { node: "n1".into() }
        );
        assert_eq!(
            request(&["undrain", "n1", "--node", "n3"]),
            AdminRequest::Undrain { node: "n1".into() }
        );
        let fp = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            request(&["revoke", "--fingerprint", &fp]),
            AdminRequest::Revoke {
                key: fp.clone(),
                certificate: None,
                node: None,
                force: false,
            }
        );
        assert_eq!(
            request(&["revoke", "--fingerprint", &fp, "--force"]),
            AdminRequest::Revoke {
                key: fp,
                certificate: None,
                node: None,
                force: true,
            }
        );
        assert_eq!(
            request(&["remove", "n4"]),
            AdminRequest::Remove { node: "n4".into() }
        );
        assert!(parse(&["revoke"]).is_err());
        assert!(parse(&["move", "billing"]).is_err(), "--to is required");
        assert!(request_of(parse(&["move", "b/x", "--to", "n2"]).unwrap()).is_err());
        assert!(request_of(parse(&["revoke", "--fingerprint", "sha256:12"]).unwrap()).is_err());
    }

    #[test]
    fn connection_flags_default_to_the_single_node_development_files() {
        let AdminCommand::Status { json, conn, .. } = parse(&["status", "--json"]).unwrap() else {
            panic!()
        };
        assert!(json);
        assert_eq!(
            conn.target().unwrap(),
            ("local".into(), "127.0.0.1:7400".parse().unwrap())
        );
        let files = conn.files();
        assert_eq!(files.ca, PathBuf::from("tenure-data/certs/ca.pem"));
        assert_eq!(files.cert, PathBuf::from("tenure-data/certs/operator.pem"));
        assert_eq!(files.key, PathBuf::from("tenure-data/certs/operator.key"));

        let AdminCommand::Drain { conn, .. } = parse(&[
            "drain",
            "n1",
            "--data-dir",
            "/srv/t",
            "--cert",
            "/o/alice.pem",
            "--addr",
            "10.0.0.1:7401",
            "--timeout",
            "2s",
        ])
        .unwrap() else {
            panic!()
        };
        let files = conn.files();
        assert_eq!(files.ca, PathBuf::from("/srv/t/certs/ca.pem"));
        assert_eq!(files.cert, PathBuf::from("/o/alice.pem"));
        assert_eq!(files.key, PathBuf::from("/srv/t/certs/operator.key"));
        assert_eq!(conn.timeout, Duration::from_secs(2));
        assert_eq!(
            conn.target().unwrap(),
            ("local".into(), "10.0.0.1:7401".parse().unwrap())
        );
    }

    #[test]
    fn several_addrs_name_nodes_for_a_watch_and_are_refused_elsewhere() {
        let Command::Watch(args) = Cli::try_parse_from([
            "tenure",
            "watch",
            "billing",
            "--json",
            "--addr",
            "n1@10.0.0.1:7400",
            "--addr",
            "10.0.0.2:7400",
            "--node",
            "n2",
        ])
        .unwrap()
        .command
        else {
            panic!("not a watch")
        };
        assert_eq!(args.resource.as_deref(), Some("billing"));
        assert!(args.json);
        let targets = args.conn.targets().unwrap();
        let pairs: Vec<(&str, &str)> = targets
            .iter()
            .map(|t| (t.name.as_str(), t.addr.as_str()))
            .collect();
        assert_eq!(pairs, [("n1", "10.0.0.1:7400"), ("n2", "10.0.0.2:7400")]);
        let AdminCommand::Status { conn, .. } =
            parse(&["status", "--addr", "a:1", "--addr", "b:2"]).unwrap()
        else {
            panic!()
        };
        let err = conn.target().unwrap_err().to_string();
        assert!(err.contains("only `tenure watch`"), "{err}");
        let AdminCommand::Status { conn, .. } =
            parse(&["status", "--addr", "bad name@a:1"]).unwrap()
        else {
            panic!()
        };
        assert!(conn.targets().is_err());
    }

    #[test]
    fn revoking_by_file_revokes_the_leaf_s_key_and_names_its_node() {
        let certs = crate::transport::tests::Certs::new();
        let files = certs.node("n1");
        let path = files.cert.to_str().unwrap();
        let der = CertificateDer::from_pem_file(&files.cert).unwrap();
        assert_eq!(
            request(&["revoke", path]),
            AdminRequest::Revoke {
                key: pki::key_fingerprint(&der).unwrap(),
                certificate: Some(crate::transport::tests::fingerprint_of(&files.cert)),
                node: Some("n1".into()),
                force: false,
            }
        );
        assert!(parse(&["revoke", path, "--fingerprint", "sha256:00"]).is_err());
    }
}

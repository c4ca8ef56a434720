//! `tenure drain --self`: the node of this host drains itself before it stops.
//!
//! Meant for a Kubernetes `preStop` hook (or a systemd `ExecStop=` before the signal): it
//! needs nothing the node does not already hold. It reads the node's config the way
//! `tenure run` does (--config or `TENURE_CONFIG`, and `TENURE_NAME`, `TENURE_DATA_DIR`,
//! `TENURE_LISTEN`), dials the node on this host at its listen port, and asks with the
//! node's own certificate, which may drain or undrain that node and do nothing else
//! (`api::node_may_ask`): no operator certificate has to sit in the pod. The node marks
//! itself draining through the leader and answers once it holds no slots
//! (`node/self_drain.rs`), so the command ends when SIGTERM has nothing left to hand over,
//! or fails at --timeout.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::api::{AdminClient, AdminRequest, AdminResponse};
use crate::config::{Config, Overrides};
use crate::terminal::escape;
use crate::transport::TlsFiles;

/// Runs `tenure drain --self`.
pub fn drain_self(config: Option<PathBuf>, timeout: Duration) -> anyhow::Result<()> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let overrides = Overrides {
        name: env("TENURE_NAME").map(|v| v.to_string_lossy().into_owned()),
        data_dir: env("TENURE_DATA_DIR").map(PathBuf::from),
        listen: env("TENURE_LISTEN").map(|v| v.to_string_lossy().into_owned()),
        ..Overrides::default()
    };
    let config = Config::load(config.as_deref(), overrides)?;
    let files = own_files(&config);
    for (what, path) in [
        ("certificate", &files.cert),
        ("key", &files.key),
        ("CA bundle", &files.ca),
    ] {
        if !path.exists() {
            anyhow::bail!(
                "no node {what} at {} (the {what} of node {} per its config): `tenure drain \
                 --self` runs where the node runs, with the node's config (--config or \
                 TENURE_CONFIG) and its files",
                path.display(),
                config.name
            );
        }
    }
    let addr = local_addr(&config.listen)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let request = AdminRequest::Drain {
        node: config.name.clone(),
    };
    let answer = runtime.block_on(async {
        let client = AdminClient::new(files, addr, timeout).await?;
        let answer = client.request(&config.name, addr, &request).await;
        client.close().await;
        answer
    })?;
    match answer {
        AdminResponse::Done(message) => println!("{}", escape(&message)),
        other => anyhow::bail!("node {} answered {other:?}", config.name),
    }
    Ok(())
}

/// The node's own certificate files: `[tls]`, else the development ones its data dir holds.
fn own_files(config: &Config) -> TlsFiles {
    match &config.tls {
        Some(tls) => TlsFiles {
            ca: tls.ca.clone(),
            cert: tls.cert.clone(),
            key: tls.key.clone(),
        },
        None => {
            let dir = config.data_dir.join("certs");
            TlsFiles {
                ca: dir.join(crate::pki::CA_CERT_FILE),
                cert: dir.join(format!("{}.pem", config.name)),
                key: dir.join(format!("{}.key", config.name)),
            }
        }
    }
}

/// Where the node of `listen` answers on this host: the address itself, or the loopback
/// address of its family when it listens on all of them (`0.0.0.0`, `[::]`).
fn local_addr(listen: &str) -> anyhow::Result<SocketAddr> {
    let addr = listen
        .to_socket_addrs()
        .with_context(|| format!("the node's listen address {listen:?} is not host:port"))?
        .next()
        .with_context(|| format!("the node's listen address {listen:?} resolves to nothing"))?;
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    Ok(SocketAddr::new(ip, addr.port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_listening_everywhere_is_asked_on_loopback() {
        assert_eq!(
            local_addr("0.0.0.0:7400").unwrap(),
            "127.0.0.1:7400".parse().unwrap()
        );
        assert_eq!(
            local_addr("[::]:7400").unwrap(),
            "[::1]:7400".parse().unwrap()
        );
        assert_eq!(
            local_addr("10.1.2.3:7401").unwrap(),
            "10.1.2.3:7401".parse().unwrap()
        );
    }
}

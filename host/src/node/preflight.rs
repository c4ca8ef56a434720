//! What a node checks before it writes anything: a node that refuses to start changes
//! nothing on disk. Its addresses must be free (probed by binding and letting go), its
//! configured TLS files must load, and its data dir must not be in use by another running
//! node; then it takes the data dir's lock for as long as it runs.
//!
//! The lock is an exclusive `flock` on `DATA_DIR/lock`, held by the open file until the
//! process ends (a killed node's lock goes with it). A data dir that exists but has no
//! lock file (made by an older build) is checked through its Raft store, which redb locks
//! the same way while it is open.

use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Why a node may not start here; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(
        "cannot listen on {addr} ({what}): another process already uses it; stop it, or give this node another address"
    )]
    AddressInUse {
        addr: SocketAddr,
        what: &'static str,
        source: std::io::Error,
    },
    #[error(
        "another node uses the data dir {path}: give each node its own (`data_dir` in the config, or --data-dir)"
    )]
    DataDirInUse { path: PathBuf },
    #[error("cannot lock the data dir {path}: {source}")]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    StoreFormat(#[from] crate::raft::FormatError),
    #[error(
        "the file system of the data dir {path} has {free_mib} MiB free, less than the {need_mib} MiB a node needs to keep its Raft store growing: free some space there, or give the node a data dir on another file system"
    )]
    DiskFull {
        path: PathBuf,
        free_mib: u64,
        need_mib: u64,
    },
    #[error("cannot load the TLS files: {0}")]
    Tls(crate::pki::PkiError),
    #[error(
        "the certificate {cert} is for node {carries}, but this node is named {name}: either \
         name the node {carries} (`name` in the config, or --name), or give it a certificate \
         for {name} (`tenure certs issue --ca CA_DIR --node {name} --out DIR`, then `tls.cert` \
         and `tls.key`)"
    )]
    OtherNode {
        cert: PathBuf,
        carries: String,
        name: String,
    },
    #[error(
        "the certificate {cert} is for operator {carries}, not for a node: give node {name} a \
         node certificate (`tenure certs issue --ca CA_DIR --node {name} --out DIR`, then \
         `tls.cert` and `tls.key`)"
    )]
    OperatorCertificate {
        cert: PathBuf,
        carries: String,
        name: String,
    },
}

/// The free space a node needs at start. Below it, the next Raft appends would soon fail,
/// and a node whose store fails stops (`Control::failed`): better to say so before it
/// takes any slot.
pub const MIN_FREE_MIB: u64 = 16;

/// Refuses a data dir on a file system with less than [`MIN_FREE_MIB`] free (measured at
/// the data dir, or its nearest existing parent for a data dir not yet made).
pub fn disk_space(data_dir: &Path) -> Result<(), Refused> {
    let mut at = data_dir;
    while !at.exists() {
        match at.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => at = parent,
            _ => return Ok(()),
        }
    }
    let Ok(path) = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()) else {
        return Ok(());
    };
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `stat` a valid out-parameter.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        // Not knowing the free space is no reason to refuse a start.
        return Ok(());
    }
    let free_mib = (stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64) >> 20;
    if free_mib < MIN_FREE_MIB {
        return Err(Refused::DiskFull {
            path: data_dir.to_path_buf(),
            free_mib,
            need_mib: MIN_FREE_MIB,
        });
    }
    Ok(())
}

/// Refuses a data dir whose Raft store this build cannot read (a newer format), reading
/// only; an older store is migrated later, when the control plane opens it.
pub fn store_format(data_dir: &Path) -> Result<(), Refused> {
    let found = crate::raft::inspect_format(data_dir)?;
    crate::raft::check_format(&found, data_dir)?;
    Ok(())
}

/// Loads the configured certificate, key and CA bundle once, reading only, so that a bad
/// file is reported before anything is written (the transport loads them again), and
/// checks that the certificate is a node certificate for `name`: with another's, every
/// handshake would fail.
pub fn tls_usable(tls: Option<&crate::config::Tls>, name: &str) -> Result<(), Refused> {
    if let Some(tls) = tls {
        let identity = crate::pki::load_identity(&tls.cert, &tls.key)
            .map_err(Refused::Tls)?
            .identity;
        crate::pki::load_ca_bundle(&tls.ca).map_err(Refused::Tls)?;
        let (cert, name) = (tls.cert.clone(), name.to_owned());
        match identity.kind {
            crate::pki::Kind::Operator => {
                return Err(Refused::OperatorCertificate {
                    cert,
                    carries: identity.name,
                    name,
                });
            }
            crate::pki::Kind::Node if identity.name != name => {
                return Err(Refused::OtherNode {
                    cert,
                    carries: identity.name,
                    name,
                });
            }
            crate::pki::Kind::Node => {}
        }
    }
    Ok(())
}

/// Checks that the node's UDP listen address (and its metrics TCP address, if any) can be
/// bound; a port of 0 always can.
pub fn addresses_free(listen: SocketAddr, metrics: Option<SocketAddr>) -> Result<(), Refused> {
    if listen.port() != 0 {
        std::net::UdpSocket::bind(listen).map_err(|source| Refused::AddressInUse {
            addr: listen,
            what: "the node's QUIC port, UDP",
            source,
        })?;
    }
    if let Some(addr) = metrics.filter(|a| a.port() != 0) {
        std::net::TcpListener::bind(addr).map_err(|source| Refused::AddressInUse {
            addr,
            what: "the metrics endpoint, TCP",
            source,
        })?;
    }
    Ok(())
}

/// Checks, writing nothing, that no running node uses `data_dir`.
pub fn data_dir_free(data_dir: &Path) -> Result<(), Refused> {
    for name in ["lock", "raft.redb"] {
        let path = data_dir.join(name);
        // Opened for reading only: probing changes nothing.
        let Ok(file) = File::open(&path) else {
            continue;
        };
        if !try_lock(&file).map_err(|source| Refused::Lock {
            path: path.clone(),
            source,
        })? {
            return Err(Refused::DataDirInUse {
                path: data_dir.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// Takes the data dir's lock (creating the lock file), for as long as the returned file
/// is kept open. Call once the node is sure to start, after creating the data dir.
pub fn lock_data_dir(data_dir: &Path) -> Result<File, Refused> {
    let path = data_dir.join("lock");
    let error = |source| Refused::Lock {
        path: path.clone(),
        source,
    };
    let file = crate::private_files::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(error)?;
    if !try_lock(&file).map_err(error)? {
        return Err(Refused::DataDirInUse {
            path: data_dir.to_path_buf(),
        });
    }
    Ok(file)
}

/// An exclusive, non-blocking `flock`: false if another open file holds it.
fn try_lock(file: &File) -> std::io::Result<bool> {
    // SAFETY: flock on a valid open descriptor has no other preconditions.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let error = std::io::Error::last_os_error();
    if error.kind() == std::io::ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(error)
    }
}

//! Network namespaces that give each node of a test cluster its own address, so that a
//! test can cut one node off from the others for real.
//!
//! The layout: one "hub" namespace holds a bridge; every node has its own namespace with
//! loopback up and an `eth0` (`10.213.0.<i+1>/24`) whose veth peer (`p<i>`) is a port of
//! the bridge. The subnet exists only inside these namespaces, so it cannot clash with the
//! machine's own networks, and the root namespace gets no interfaces at all. Cutting node
//! `i` off is `ip link set p<i> down` in the hub; healing is setting it up again.
//!
//! The bridge itself has an address, [`Net::DOWNSTREAM`]: a test server listening there
//! ([`Net::listen_on_bridge`]) plays a service the nodes' plugins write to, reachable from
//! every node whose link is up.
//!
//! Names carry the test process's pid and a sequence number (`tnp-<pid>-<seq>-…`), so a
//! namespace left behind by a killed run cannot collide with a new one; namespaces of
//! earlier runs whose process is gone are deleted when a new [`Net`] is made. Dropping a
//! [`Net`] deletes its namespaces, which deletes the veths and the bridge with them: kill
//! the processes running inside first.
//!
//! What it does not do: delay, drop or reorder packets (`tc netem` is not available in
//! this kernel); a link is either up or down.

use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::wait_output;

/// The prefix of every namespace this harness creates.
const PREFIX: &str = "tnp-";

/// How long one `ip` command may take.
const IP_TIMEOUT: Duration = Duration::from_secs(10);

/// A set of namespaces on one bridge, deleted on drop.
pub struct Net {
    hub: String,
    nodes: Vec<String>,
}

impl Net {
    /// Why this machine cannot run partition tests, if it cannot: not root, or no `ip`.
    pub fn unavailable() -> Option<String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        if uid != 0 {
            return Some(format!(
                "network namespaces need root (running as uid {uid})"
            ));
        }
        match Command::new("ip")
            .args(["netns", "list"])
            .stdin(Stdio::null())
            .output()
        {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(format!(
                "`ip netns list` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => Some(format!("cannot run `ip` (iproute2): {e}")),
        }
    }

    /// Creates a hub and `n` node namespaces wired to it. An `Err` says why the machine
    /// refused (e.g. no permission to create namespaces); whatever was created is removed.
    pub fn create(n: usize) -> Result<Net, String> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        remove_stale();
        let base = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let mut net = Net {
            hub: format!("{base}-hub"),
            nodes: Vec::new(),
        };
        ip(&["netns", "add", &net.hub])?;
        ip(&["-n", &net.hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &net.hub, "link", "set", "br0", "up"])?;
        let bridge = format!("{}/24", Net::DOWNSTREAM);
        ip(&["-n", &net.hub, "addr", "add", &bridge, "dev", "br0"])?;
        for i in 0..n {
            let ns = format!("{base}-n{}", i + 1);
            ip(&["netns", "add", &ns])?;
            net.nodes.push(ns.clone());
            let port = format!("p{i}");
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&[
                "-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns",
                &net.hub,
            ])?;
            ip(&["-n", &net.hub, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &net.hub, "link", "set", &port, "up"])?;
            let cidr = format!("{}/24", net.ip(i));
            ip(&["-n", &ns, "addr", "add", &cidr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        }
        eprintln!(
            "[netns] created {} and {} node namespaces on 10.213.0.0/24",
            net.hub, n
        );
        Ok(net)
    }

    /// The bridge's address, for a downstream service the nodes can reach.
    pub const DOWNSTREAM: &str = "10.213.0.254";

    /// A TCP listener on the bridge's address (port chosen by the kernel). The socket is
    /// made in the hub namespace by a thread that enters it; it stays there whichever
    /// thread accepts on it.
    pub fn listen_on_bridge(&self) -> std::net::TcpListener {
        in_namespace(&self.hub, || {
            std::net::TcpListener::bind((Net::DOWNSTREAM, 0))
                .expect("binding on the bridge's address")
        })
    }

    /// A TCP connection from node `i`'s namespace to `addr`, made by a thread that enters
    /// the namespace (a socket stays in the namespace it was made in).
    pub fn connect_from(&self, i: usize, addr: std::net::SocketAddr) -> std::net::TcpStream {
        in_namespace(&self.nodes[i], || {
            std::net::TcpStream::connect(addr)
                .unwrap_or_else(|e| panic!("connecting from node {} to {addr}: {e}", i + 1))
        })
    }

    /// Node `i`'s address.
    pub fn ip(&self, i: usize) -> String {
        format!("10.213.0.{}", i + 1)
    }

    /// Node `i`'s namespace.
    pub fn namespace(&self, i: usize) -> &str {
        &self.nodes[i]
    }

    /// The command prefix that runs a program in node `i`'s namespace. `ip netns exec`
    /// execs the program in place, so the child's pid is the program's.
    pub fn wrapper(&self, i: usize) -> Vec<OsString> {
        ["ip", "netns", "exec", self.nodes[i].as_str()]
            .into_iter()
            .map(OsString::from)
            .collect()
    }

    /// Cuts node `i` off: its bridge port goes down (both ends lose carrier).
    pub fn cut(&self, i: usize) {
        let port = format!("p{i}");
        ip(&["-n", &self.hub, "link", "set", &port, "down"]).expect("taking the link down");
        eprintln!("[netns] cut node {} off ({} down)", i + 1, port);
    }

    /// Connects node `i` again.
    pub fn heal(&self, i: usize) {
        let port = format!("p{i}");
        ip(&["-n", &self.hub, "link", "set", &port, "up"]).expect("bringing the link up");
        eprintln!("[netns] healed node {} ({} up)", i + 1, port);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.nodes.iter().chain(std::iter::once(&self.hub)) {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("[netns] cannot delete {ns}: {e}");
            }
        }
        eprintln!("[netns] deleted {} and its node namespaces", self.hub);
    }
}

/// Runs `make` on a thread that entered the network namespace `ns`, and returns what it
/// made (a socket made there stays there).
fn in_namespace<T: Send>(ns: &str, make: impl FnOnce() -> T + Send) -> T {
    let path = format!("/var/run/netns/{ns}");
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let file =
                    std::fs::File::open(&path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
                // SAFETY: setns on an open namespace file moves only this thread, which
                // ends right after `make`.
                let entered = unsafe {
                    libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET)
                };
                assert_eq!(
                    entered,
                    0,
                    "setns into {path}: {}",
                    std::io::Error::last_os_error()
                );
                make()
            })
            .join()
            .expect("the namespace thread")
    })
}

/// Runs `ip ARGS`; an `Err` carries its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let child = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    let out = wait_output(child, IP_TIMEOUT, &format!("ip {}", args.join(" ")));
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Deletes this harness's namespaces left by test processes that no longer exist.
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("[netns] deleting {name}, left by a test process that is gone");
            let _ = ip(&["netns", "del", name]);
        }
    }
}

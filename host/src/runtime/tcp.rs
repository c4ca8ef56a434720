//! The outbound TCP capability: `wasi:sockets`, fenced by the lease.
//!
//! wasmtime-wasi implements the sockets; this file narrows them for one instance and ties
//! them to its lease:
//! - A TCP socket can be created only when the manifest has a `tcp://` entry; UDP never.
//! - A name can be looked up only when a `tcp://` entry names it (or a `*.` entry covers
//!   it); the addresses it resolves to become connectable on the ports those entries
//!   grant. An entry with an IP literal is connectable without a lookup.
//! - A connect must go to such an address and port, and asks the one lease check
//!   ([`InstanceContext::may_act`]) first. Binding happens only implicitly (the wildcard
//!   address, port 0); listening and accepting never.
//! - Every write on a connection asks the lease check again, so bytes handed to the host
//!   after D are refused even before the reset below lands.
//! - At D (or the instance's interrupt time) every connection the instance opened is
//!   reset: the bytes the kernel still queues for it are discarded, the peer gets an RST,
//!   the plugin's reads end and its writes fail, whether the plugin is running, blocked in
//!   a poll, or idle after `start` returned. A frozen-then-resumed owner cannot keep
//!   writing to a connection it opened before.
//!
//! Refusals fail in the plugin (`access-denied`, or a failed write) and write
//! `plugin.effect_refused` with `effect = tcp`. A connect the network fails (refused,
//! reset, aborted, unreachable, timed out) fails in the plugin with its error code and
//! writes `plugin.effect_failed` with the address (remembered at start-connect).
//!
//! How a connection is found at D: wasmtime-wasi keeps its file descriptor private, so the
//! instance records each connection's local and remote address when it connects; at D it
//! walks the process's open descriptors, duplicates each socket, and resets those whose
//! address pair matches. An established TCP connection's address pair is unique while it
//! is open, and checking the duplicate (not the number) means a descriptor closed and
//! reused in between is never touched. Nothing is held open on the plugin's behalf: a
//! connection the plugin already closed is simply not found.
//!
//! Why a reset, and how: the kernel accepts a write long before the bytes leave (a slow
//! or partitioned peer leaves them in the send queue, retransmitted with backoff), so
//! ending a connection with a FIN (`shutdown`, or a close) still delivers everything
//! queued before it, possibly long after D: a stale write. `shutdown` ignores
//! `SO_LINGER`, and linger 0 acts only on the last close, which wasmtime makes when the
//! plugin drops the socket. So the fence `connect`s the duplicate to an `AF_UNSPEC`
//! address, which Linux turns into `tcp_disconnect`: the send and receive queues are
//! purged, an RST goes out, and the socket is left unconnected for every descriptor of it
//! ([`reset`]). `runtime::tcp::tests` checks it on this kernel against a peer that does
//! not read: it receives less than was queued, then a reset. What the peer had already
//! received before D stays received; nothing still queued at D leaves after it.
//!
//! The wasi:sockets functions replaced here (lookup, its results, start-connect,
//! finish-connect) call
//! wasmtime-wasi's own implementation and add the checks around it.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use wasmtime::component::{Linker, Resource};
use wasmtime::{StoreContextMut, format_err};
use wasmtime_wasi::p2::bindings::sockets::ip_name_lookup::{
    Host as _, HostResolveAddressStream as _, ResolveAddressStream,
};
use wasmtime_wasi::p2::bindings::sockets::network::{
    ErrorCode, IpAddress, IpSocketAddress, Network,
};
use wasmtime_wasi::p2::bindings::sockets::tcp::{HostTcpSocket, ShutdownType, TcpSocket};
use wasmtime_wasi::p2::{
    DynInputStream, DynOutputStream, OutputStream, Pollable, StreamError, StreamResult,
};
use wasmtime_wasi::sockets::{SocketAddrUse, WasiSocketsView};
use wasmtime_wasi::{WasiCtxBuilder, async_trait};

use super::InstanceContext;
use super::refused::{Why, failed, may_no_longer_act, refused};
use super::store::HostState;
use crate::catalog::capabilities::Scheme;

/// The wasi:sockets interfaces whose functions are replaced, at the version wasmtime-wasi
/// links (a component importing an older 0.2 version is served by these too).
const TCP: &str = "wasi:sockets/tcp@0.2.12";
const LOOKUP: &str = "wasi:sockets/ip-name-lookup@0.2.12";

/// Connections an instance may have open at once (closed ones are pruned first).
const MAX_OPEN: usize = 256;
/// Resolved addresses an instance remembers as connectable; past this the oldest
/// lookups are forgotten (the plugin looks the name up again).
const MAX_RESOLVED: usize = 1024;

/// One instance's sockets state, kept in its store.
pub(super) struct Sockets {
    fence: Arc<Fence>,
    /// Lookups in progress: the resolve stream's handle, and the ports its name grants.
    lookups: HashMap<u32, Vec<u16>>,
    /// Connects in progress: the socket's handle and the address it connects to, which
    /// wasmtime-wasi no longer tells once the connect failed (for `plugin.effect_failed`).
    connecting: HashMap<u32, SocketAddr>,
    /// The task that resets the connections at D; aborted with the store.
    watchdog: Option<tokio::task::AbortHandle>,
}

/// What the socket-address check, the connections' writers and the watchdog share.
struct Fence {
    ctx: Arc<InstanceContext>,
    inner: Mutex<Known>,
}

#[derive(Default)]
struct Known {
    /// Addresses (with a granted port) the plugin's permitted lookups resolved to.
    resolved: HashSet<SocketAddr>,
    /// (local, remote) of every connection the instance opened and may still hold.
    open: Vec<(SocketAddr, SocketAddr)>,
}

impl Sockets {
    pub(super) fn new(ctx: Arc<InstanceContext>) -> Self {
        Self {
            fence: Arc::new(Fence {
                ctx,
                inner: Mutex::default(),
            }),
            lookups: HashMap::new(),
            connecting: HashMap::new(),
            watchdog: None,
        }
    }

    /// Configures the instance's WASI sockets: TCP and lookups only with a `tcp://`
    /// grant, UDP never, and every address the socket layer uses checked here.
    pub(super) fn grant(&self, wasi: &mut WasiCtxBuilder) {
        let tcp = self.fence.ctx.granted.tcp();
        let fence = self.fence.clone();
        wasi.allow_tcp(tcp)
            .allow_ip_name_lookup(tcp)
            .allow_udp(false)
            .socket_addr_check(move |addr, usage| {
                let allowed = fence.check(addr, usage);
                Box::pin(std::future::ready(allowed))
            });
    }

    /// Starts the watchdog unless it runs: false if there is no runtime to run it on
    /// (then no connection may be kept).
    fn watch(&mut self) -> bool {
        if self.watchdog.is_some() {
            return true;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let fence = self.fence.clone();
        let task = runtime.spawn(async move {
            let refusal = may_no_longer_act(&fence.ctx).await;
            fence.reset_all(refusal.into());
        });
        self.watchdog = Some(task.abort_handle());
        true
    }
}

impl Drop for Sockets {
    fn drop(&mut self) {
        if let Some(task) = &self.watchdog {
            task.abort();
        }
    }
}

impl Fence {
    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// wasmtime-wasi's socket-address check: whether the socket layer may use `addr`.
    fn check(&self, addr: SocketAddr, usage: SocketAddrUse) -> bool {
        let verdict = match usage {
            // The implicit bind before a connect names the wildcard address and port 0.
            SocketAddrUse::TcpBind if addr.ip().is_unspecified() && addr.port() == 0 => {
                return true;
            }
            SocketAddrUse::TcpConnect if self.connectable(addr) => {
                self.ctx.may_act().map_err(Why::from)
            }
            SocketAddrUse::TcpConnect if self.ctx.granted.http_only(&addr.ip().to_string()) => {
                Err(Why::HttpOnly)
            }
            _ => Err(Why::NotAllowed),
        };
        match verdict {
            Ok(()) => true,
            Err(why) => {
                refused(&self.ctx, "tcp", &addr.to_string(), why, false);
                false
            }
        }
    }

    /// Whether an entry grants `addr`: an IP-literal `tcp://` entry, or an address a
    /// permitted lookup resolved to on a port its entries grant.
    fn connectable(&self, addr: SocketAddr) -> bool {
        let ip = addr.ip().to_string();
        self.ctx.granted.allows(Scheme::Tcp, &ip, addr.port())
            || self.known().resolved.contains(&addr)
    }

    /// Records a resolved address on the ports granted for the name.
    fn resolved(&self, ip: IpAddr, ports: &[u16]) {
        let mut known = self.known();
        if known.resolved.len() + ports.len() > MAX_RESOLVED {
            known.resolved.clear();
        }
        known
            .resolved
            .extend(ports.iter().map(|&port| SocketAddr::new(ip, port)));
    }

    /// Records a new connection, if the instance may keep it.
    fn connected(&self, local: SocketAddr, remote: SocketAddr) -> Result<(), Why> {
        self.ctx.may_act()?;
        let mut known = self.known();
        if known.open.len() >= MAX_OPEN {
            let still = find_connections(&known.open, false);
            known.open.retain(|pair| still.contains(pair));
        }
        if known.open.len() >= MAX_OPEN {
            return Err(Why::TooManyConnections);
        }
        known.open.push((local, remote));
        Ok(())
    }

    /// Resets every connection the instance opened and still holds.
    fn reset_all(&self, why: Why) {
        let open = std::mem::take(&mut self.known().open);
        for (_, remote) in find_connections(&open, true) {
            refused(&self.ctx, "tcp", &remote.to_string(), why, true);
        }
    }
}

/// The process's open TCP connections whose (local, remote) pair is in `pairs`; with
/// `cut`, each is reset on the way ([`reset`]).
fn find_connections(
    pairs: &[(SocketAddr, SocketAddr)],
    cut: bool,
) -> Vec<(SocketAddr, SocketAddr)> {
    let mut found = Vec::new();
    if pairs.is_empty() {
        return found;
    }
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return found;
    };
    for entry in entries.flatten() {
        let is_socket = std::fs::read_link(entry.path()).is_ok_and(|target| {
            target
                .as_os_str()
                .as_encoded_bytes()
                .starts_with(b"socket:")
        });
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if !is_socket {
            continue;
        }
        // A duplicate of whatever the number names now: it is checked, and reset,
        // only through the duplicate.
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) on any number is sound; it fails on a closed one.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            continue;
        }
        // SAFETY: `dup` is a new descriptor that nothing else owns.
        let dup = unsafe { OwnedFd::from_raw_fd(dup) };
        let socket = socket2::SockRef::from(&dup);
        let pair = (
            socket.local_addr().ok().and_then(|a| a.as_socket()),
            socket.peer_addr().ok().and_then(|a| a.as_socket()),
        );
        let (Some(local), Some(remote)) = pair else {
            continue;
        };
        if pairs.contains(&(local, remote)) && !found.contains(&(local, remote)) {
            if cut && reset(dup.as_fd()).is_err() {
                // Not expected on Linux for a TCP socket; shutting down at least ends the
                // plugin's use of the connection, though its queued bytes then still leave.
                let _ = socket.shutdown(std::net::Shutdown::Both);
            }
            found.push((local, remote));
        }
    }
    found
}

/// Resets a TCP connection through any descriptor of its socket: the kernel drops the
/// bytes it still queues for sending (and those received but unread), sends the peer an
/// RST, and leaves the socket unconnected, so every descriptor of it sees the reset.
///
/// This is `connect` with an `AF_UNSPEC` address, which Linux turns into `tcp_disconnect`
/// on a TCP socket. `shutdown` cannot do it (it sends the queue, then a FIN, whatever
/// `SO_LINGER` says), and `SO_LINGER` 0 acts only on the last close, which is
/// wasmtime's to make, not ours.
fn reset(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    // SAFETY: all zeroes is a valid `sockaddr`; only its family is read for AF_UNSPEC.
    let mut unspecified: libc::sockaddr = unsafe { std::mem::zeroed() };
    unspecified.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
    let len = std::mem::size_of::<libc::sockaddr>() as libc::socklen_t;
    // SAFETY: `fd` is open for the call, and the address is valid for `len` bytes.
    if unsafe { libc::connect(fd.as_raw_fd(), &unspecified, len) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A connection's output stream, asking the lease check before every write.
struct FencedOutput {
    inner: DynOutputStream,
    fence: Arc<Fence>,
    remote: SocketAddr,
}

impl FencedOutput {
    fn may_write(&self) -> StreamResult<()> {
        self.fence.ctx.may_act().map_err(|refusal| {
            let host = self.remote.to_string();
            refused(&self.fence.ctx, "tcp", &host, refusal.into(), true);
            StreamError::LastOperationFailed(format_err!(
                "the node's lease on this plugin's slot has ended: the connection is closed"
            ))
        })
    }
}

#[async_trait]
impl OutputStream for FencedOutput {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.may_write()?;
        self.inner.write(bytes)
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.may_write()?;
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.may_write()?;
        self.inner.check_write()
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await
    }
}

#[async_trait]
impl Pollable for FencedOutput {
    async fn ready(&mut self) {
        self.inner.ready().await
    }
}

/// Replaces the lookup and connect functions of wasi:sockets with the fenced ones.
pub(super) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut lookup = linker.instance(LOOKUP)?;
    lookup.func_wrap("resolve-addresses", resolve_addresses)?;
    lookup.func_wrap(
        "[method]resolve-address-stream.resolve-next-address",
        resolve_next_address,
    )?;
    let mut tcp = linker.instance(TCP)?;
    tcp.func_wrap("[method]tcp-socket.start-connect", start_connect)?;
    tcp.func_wrap("[method]tcp-socket.finish-connect", finish_connect)?;
    linker.allow_shadowing(false);
    Ok(())
}

type Returned<T> = wasmtime::Result<(Result<T, ErrorCode>,)>;

/// A socket error for the plugin, or a trap if it is not one.
fn error<T>(error: wasmtime_wasi::p2::SocketError) -> Returned<T> {
    Ok((Err(error.downcast()?),))
}

fn resolve_addresses(
    mut store: StoreContextMut<'_, HostState>,
    (network, name): (Resource<Network>, String),
) -> Returned<Resource<ResolveAddressStream>> {
    let state = store.data_mut();
    let ports = state.ctx.granted.tcp_ports(&name);
    let verdict = if state.ctx.granted.http_only(&name) {
        Err(Why::HttpOnly)
    } else if ports.is_empty() {
        Err(Why::NotAllowed)
    } else {
        state.ctx.may_act().map_err(Why::from)
    };
    if let Err(why) = verdict {
        refused(&state.ctx, "tcp", &name, why, false);
        return Ok((Err(ErrorCode::AccessDenied),));
    }
    match state.sockets().resolve_addresses(network, name) {
        Ok(stream) => {
            if state.tcp.lookups.len() >= MAX_RESOLVED {
                state.tcp.lookups.clear();
            }
            state.tcp.lookups.insert(stream.rep(), ports);
            Ok((Ok(stream),))
        }
        Err(e) => error(e),
    }
}

fn resolve_next_address(
    mut store: StoreContextMut<'_, HostState>,
    (stream,): (Resource<ResolveAddressStream>,),
) -> Returned<Option<IpAddress>> {
    let state = store.data_mut();
    let rep = stream.rep();
    match state.sockets().resolve_next_address(stream) {
        Ok(address) => {
            if let (Some(address), Some(ports)) = (&address, state.tcp.lookups.get(&rep)) {
                state.tcp.fence.resolved(ip(address), ports);
            }
            Ok((Ok(address),))
        }
        Err(e) => error(e),
    }
}

/// wasmtime-wasi's start-connect (the address check runs inside it), remembering where
/// the socket connects to.
fn start_connect(
    mut store: StoreContextMut<'_, HostState>,
    (socket, network, remote): (Resource<TcpSocket>, Resource<Network>, IpSocketAddress),
) -> Returned<()> {
    let state = store.data_mut();
    let rep = socket.rep();
    let addr = SocketAddr::from(remote);
    match state.sockets().start_connect(socket, network, remote) {
        Ok(()) => {
            if state.tcp.connecting.len() >= MAX_OPEN {
                // Sockets dropped while connecting leave their entry: forget them all.
                state.tcp.connecting.clear();
            }
            state.tcp.connecting.insert(rep, addr);
            Ok((Ok(()),))
        }
        Err(e) => error(e),
    }
}

/// The words for a connect the network failed, or `None` for the other errors
/// (`would-block` while in progress, and the plugin's own mistakes).
fn network_failure(code: ErrorCode) -> Option<&'static str> {
    Some(match code {
        ErrorCode::ConnectionRefused => "connection refused",
        ErrorCode::ConnectionReset => "connection reset",
        ErrorCode::ConnectionAborted => "connection aborted",
        ErrorCode::RemoteUnreachable => "the remote host is unreachable",
        ErrorCode::Timeout => "timed out",
        _ => return None,
    })
}

fn finish_connect(
    mut store: StoreContextMut<'_, HostState>,
    (socket,): (Resource<TcpSocket>,),
) -> Returned<(Resource<DynInputStream>, Resource<DynOutputStream>)> {
    let state = store.data_mut();
    let rep = socket.rep();
    let this = || Resource::<TcpSocket>::new_borrow(rep);
    let (input, output) = match state.sockets().finish_connect(this()) {
        Ok(streams) => {
            state.tcp.connecting.remove(&rep);
            streams
        }
        Err(e) => {
            let code: ErrorCode = e.downcast()?;
            if let Some(words) = network_failure(code)
                && let Some(remote) = state.tcp.connecting.remove(&rep)
            {
                failed(&state.ctx, "tcp", &remote.to_string(), words);
            }
            return Ok((Err(code),));
        }
    };
    let mut view = state.sockets();
    let local = view.local_address(this()).map(SocketAddr::from);
    let remote = view.remote_address(this()).map(SocketAddr::from);
    let (Ok(local), Ok(remote)) = (local, remote) else {
        return Ok((Err(ErrorCode::InvalidState),));
    };
    let verdict = if state.tcp.watch() {
        state.tcp.fence.connected(local, remote)
    } else {
        Err(Why::NotAllowed)
    };
    let fence = state.tcp.fence.clone();
    let mut view = state.sockets();
    if let Err(why) = verdict {
        // Connected after all may act (the lease ended during the handshake): close it
        // before the plugin can use it.
        let _ = view.shutdown(this(), ShutdownType::Both);
        view.table.delete(input)?;
        view.table.delete(output)?;
        refused(&fence.ctx, "tcp", &remote.to_string(), why, false);
        return Ok((Err(ErrorCode::AccessDenied),));
    }
    let inner = view.table.delete(output)?;
    let fenced: DynOutputStream = Box::new(FencedOutput {
        inner,
        fence,
        remote,
    });
    let output = view.table.push_child(fenced, &this())?;
    Ok((Ok((input, output)),))
}

fn ip(address: &IpAddress) -> IpAddr {
    match *address {
        IpAddress::Ipv4((a, b, c, d)) => IpAddr::from([a, b, c, d]),
        IpAddress::Ipv6((a, b, c, d, e, f, g, h)) => IpAddr::from([a, b, c, d, e, f, g, h]),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::Sockets;
    use crate::runtime::NodeLease;
    use crate::runtime::stalled::{StalledServer, assert_cut_off};
    use crate::runtime::tests::context;

    /// The fence on a real connection, held open the way wasmtime holds the plugin's
    /// socket: at D the bytes the kernel still queues for it must never reach the peer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_cut_at_d_is_reset_and_its_queued_bytes_never_arrive() {
        let server = StalledServer::start();
        let lease = Arc::new(NodeLease::new(true));
        let deadline = Instant::now() + Duration::from_millis(300);
        lease.publish(Some(7), Some(deadline));
        let mut sockets = Sockets::new(context(lease));
        let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
        let pair = (stream.local_addr().unwrap(), stream.peer_addr().unwrap());
        sockets.fence.connected(pair.0, pair.1).unwrap();
        assert!(sockets.watch());
        // Writes until the kernel takes no more: everything written sits in the send
        // queue or the server's small receive buffer.
        stream.set_nonblocking(true).unwrap();
        let chunk = vec![b'x'; 64 << 10];
        let mut written = 0;
        loop {
            match stream.write(&chunk) {
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("writing before D: {e}"),
            }
        }
        assert!(Instant::now() < deadline, "the writes took past D");
        let watchdog = sockets.watchdog.clone().unwrap();
        let bound = Instant::now() + Duration::from_secs(10);
        while !watchdog.is_finished() {
            assert!(Instant::now() < bound, "the fence did not act by D + 10 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (received, end) = tokio::task::spawn_blocking(move || server.drain())
            .await
            .unwrap();
        assert_cut_off(received, &end, written);
        // The plugin's own socket is dead too: its writes fail.
        assert!(stream.write(b"late").is_err());
    }
}

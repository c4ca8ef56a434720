//! A real network partition: three nodes, each in its own network namespace on a bridge
//! (see `support/netns.rs`), and the owner of a resource cut off by taking its link down.
//! The promise under test (docs/design.md §5.4, "Sessions and leases"): the cut-off owner stops
//! its plugin by its own lease deadline, before the majority side can start a successor;
//! once the link is back the cluster is whole again, and fencing tokens only grew.
//!
//! A second test pins down what a cut does to bytes already handed to the kernel, which
//! the fault checker's `stale-write` rule rests on (`support/checker.rs` `downstream`).
//!
//! Needs root and iproute2; without them the test says why and passes without running.

mod support;

use std::io::{Read, Write};
use std::time::{Duration, Instant, SystemTime};

use support::netns::Net;
use support::*;

#[test]
fn a_cut_off_owner_stops_before_the_majority_starts_a_successor() {
    if let Some(why) = Net::unavailable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let net = match Net::create(3) {
        Ok(net) => net,
        Err(why) => {
            eprintln!("SKIPPED: cannot create network namespaces: {why}");
            return;
        }
    };
    // Declared after `net`, so dropped before it (also when a check fails): the nodes
    // are killed before their namespaces are deleted.
    let mut c = Cluster::builder(3)
        .hosts((0..3).map(|i| net.ip(i)).collect())
        .wrappers((0..3).map(|i| net.wrapper(i)).collect())
        .build();
    c.install_plugin_everywhere(
        "solo",
        &manifest("solo", 1, "1.0.0"),
        &plugins().heartbeat_bytes(),
    );
    eprintln!("phase: three nodes in three namespaces form a cluster");
    c.start();
    let owner = c.wait_owners("solo", 1, |_| true).remove(0);
    let x = c.index(&owner.node);
    let from = c.node(x).events().len();

    eprintln!("phase: cut {} off", owner.node);
    let cut_at = us(SystemTime::now());
    net.cut(x);
    let successor = c.wait("a successor on the majority side", WAIT + c.ttl(), |c| {
        c.owners("solo")
            .into_iter()
            .find(|o| o.node != owner.node && timestamp_us(&o.started) > cut_at)
    });
    let t = owner.token;
    let stopped = c.wait_event(x, "the cut-off owner's plugin.stopped", from, move |e| {
        is("plugin.stopped")
            .with("resource", "solo")
            .with("token", t)
            .matches(e)
    });
    let lost = c.wait_event(
        x,
        "the cut-off owner's lease.lost",
        from,
        is("lease.lost").f(),
    );
    eprintln!(
        "cut at 0; {} stopped at {} ms, lease.lost at {} ms; {} started at {} ms",
        owner.node,
        (timestamp_us(&stopped) - cut_at) / 1000,
        (timestamp_us(&lost) - cut_at) / 1000,
        successor.node,
        (timestamp_us(&successor.started) - cut_at) / 1000
    );
    assert!(
        timestamp_us(&stopped) < timestamp_us(&successor.started),
        "the successor started before the cut-off owner stopped:\n  {stopped}\n  {}",
        successor.started
    );
    assert!(
        timestamp_us(&lost) < timestamp_us(&successor.started),
        "the successor started before the cut-off owner's lease.lost:\n  {lost}\n  {}",
        successor.started
    );
    assert!(successor.token > owner.token);

    eprintln!("phase: heal; {} opens a session again", owner.node);
    let from = c.node(x).events().len();
    net.heal(x);
    c.wait_event(
        x,
        "a new session after the heal",
        from,
        is("session.opened").f(),
    );
    c.wait_leader();

    eprintln!("phase: stop the successor; the slot moves on by handover");
    let s = c.index(&successor.node);
    assert!(c.stop(s).success());
    let next = c.wait_owners("solo", 1, |o| o[0].token > successor.token);
    eprintln!("solo now on {} with token {}", next[0].node, next[0].token);

    c.stop_all();
    assert_safe(&c.merged(), "solo", 1);
}

/// Bytes a node wrote while it was cut off arrive after the heal, although the socket was
/// reset (`SO_LINGER` 0) before the heal, as the host's does when a request is aborted at
/// the lease's end (`runtime/http/socket.rs`). The cut took the link's carrier away, which
/// flushed the node's neighbour (ARP) entries; the segment written then waits in the
/// kernel's queue of an unresolved neighbour, not in the socket, so the reset cannot
/// discard it, and the queue is sent when the neighbour resolves after the heal (for up to
/// `mcast_solicit` × `retrans_time`, 3 s by default). Seen in the seeded fault run: a
/// webhook write of a cut-off owner reached the downstream about 90 ms after the heal,
/// after its successor's. The write left while the owner still held its lease; the
/// downstream's token check (`tenure-token`) is what refuses such a write, and the checker
/// excuses it only when its connection was open before the cut.
#[test]
fn bytes_written_while_cut_off_arrive_after_the_heal_although_the_socket_was_reset() {
    if let Some(why) = Net::unavailable() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let net = match Net::create(1) {
        Ok(net) => net,
        Err(why) => {
            eprintln!("SKIPPED: cannot create network namespaces: {why}");
            return;
        }
    };
    let listener = net.listen_on_bridge();
    let addr = listener.local_addr().unwrap();
    let mut client = net.connect_from(0, addr);
    let (mut server, _) = listener.accept().expect("accepting the node's connection");

    net.cut(0);
    client
        .write_all(b"written while cut off")
        .expect("the kernel takes the bytes");
    // Until the kernel has sent the segment (into the neighbour's queue): bytes it has
    // not sent yet would be discarded by the reset.
    let sent_by = Instant::now() + Duration::from_secs(10);
    while unsent(&client) > 0 {
        assert!(Instant::now() < sent_by, "the kernel never sent the bytes");
        std::thread::sleep(Duration::from_millis(5));
    }
    socket2::SockRef::from(&client)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(client);
    net.heal(0);
    let healed = Instant::now();

    server
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = [0u8; 64];
    let n = server
        .read(&mut got)
        .expect("the bytes (or the reset) arrive after the heal");
    assert_eq!(
        &got[..n],
        b"written while cut off",
        "the bytes written during the cut reached the server after the heal"
    );
    eprintln!(
        "the bytes written while cut off arrived {} ms after the heal",
        healed.elapsed().as_millis()
    );
}

/// Bytes of `stream` the kernel has not sent even once (`SIOCOUTQNSD`).
fn unsent(stream: &std::net::TcpStream) -> libc::c_int {
    let mut unsent: libc::c_int = 0;
    // SAFETY: SIOCOUTQNSD writes one int through the pointer, valid for it, on a
    // descriptor the stream keeps open during the call.
    let failed = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(stream),
            libc::SIOCOUTQNSD,
            &mut unsent,
        )
    } != 0;
    assert!(!failed, "SIOCOUTQNSD: {}", std::io::Error::last_os_error());
    unsent
}

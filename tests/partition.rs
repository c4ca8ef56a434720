//! A real network partition: three nodes, each in its own network namespace on a bridge
//! (see `support/netns.rs`), and the owner of a resource cut off by taking its link down.
//! The promise under test (DESIGN.md §4, "Sessions and leases"): the cut-off owner stops
//! its plugin by its own lease deadline, before the majority side can start a successor;
//! once the link is back the cluster is whole again, and fencing tokens only grew.
//!
//! Needs root and iproute2; without them the test says why and passes without running.

mod support;

use std::time::SystemTime;

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

//! Snapshots and restore (issue 25, item 5), on real processes.
//!
//! `tenure snapshot save` takes a consistent image of the replicated state from a running
//! node; after every node and every data dir is lost, `tenure snapshot restore` seeds a
//! new cluster from it on one node. The counter resumes at or above its count at the save,
//! every new token is above every token seen before, nothing starts during the first TTL
//! after the restored node leads, and the other machines join as new members.

mod support;

use std::time::Duration;

use support::*;

#[test]
fn a_cluster_is_restored_from_a_snapshot_after_every_node_is_lost() {
    let ttl = Duration::from_secs(2);
    let mut c = counting_cluster(ttl);
    // A count logged a period before the save is in the leader's applied state.
    let saved_at_least = {
        let all = counts(&c.merged());
        all[all.len() - 2]
    };

    eprintln!("phase: snapshot save through the leader");
    let leader = c.index(&c.wait_leader());
    let old_id = c.wait("the cluster's id", WAIT, |c| c.cluster_id(leader));
    let file = c.node(leader).dir().parent().unwrap().join("backup.snap");
    let file_arg = file.to_str().unwrap().to_string();
    let saved = c.admin_as(leader, OPERATOR, &["snapshot", "save", &file_arg]);
    assert!(saved.status.success(), "save: {}", stderr_of(&saved));
    assert!(stdout_of(&saved).contains("index"), "{}", stdout_of(&saved));
    let dir = c.node(0).dir().to_path_buf();
    let status = tenure(&["snapshot", "status", &file_arg], &dir);
    assert!(status.status.success(), "status: {}", stderr_of(&status));
    assert!(
        stdout_of(&status).contains("(matches)")
            && stdout_of(&status).contains(&format!("cluster {old_id}\n")),
        "{}",
        stdout_of(&status)
    );

    eprintln!("phase: a damaged copy is refused");
    let damaged = file.with_extension("damaged");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&damaged, &bytes).unwrap();
    let refused = tenure(&["snapshot", "status", damaged.to_str().unwrap()], &dir);
    assert_eq!(refused.status.code(), Some(1), "{}", stdout_of(&refused));

    eprintln!("phase: every node and every data dir is lost");
    for i in 0..3 {
        c.kill(i);
        c.wipe(i);
    }
    let before = c.merged();
    let max_token = highest_token(&before);

    eprintln!("phase: restore into n1's empty data dir");
    let config = c.node(0).dir().join("tenure.toml");
    let config = config.to_str().unwrap();
    let restored = tenure(
        &["snapshot", "restore", &file_arg, "--config", config],
        &dir,
    );
    assert!(
        restored.status.success(),
        "restore: {}",
        stderr_of(&restored)
    );
    eprintln!("restore said:\n{}", stdout_of(&restored));
    assert!(
        stdout_of(&restored).contains("only voter")
            && stdout_of(&restored).contains(&format!("(a snapshot of cluster {old_id})")),
        "{}",
        stdout_of(&restored)
    );
    let again = tenure(
        &["snapshot", "restore", &file_arg, "--config", config],
        &dir,
    );
    assert_eq!(
        again.status.code(),
        Some(1),
        "a second restore into the same dir"
    );
    assert!(
        stderr_of(&again).contains("already has a Raft store"),
        "{}",
        stderr_of(&again)
    );

    eprintln!("phase: n1 leads the restored cluster and grants nothing for a TTL");
    c.spawn(0);
    let led = c.wait_event(
        0,
        "n1 to lead",
        0,
        is("cluster.leader").with("node", "n1").f(),
    );
    let counter = c.wait_event(
        0,
        "the counter to start on n1",
        0,
        is("plugin.started").with("resource", "counter").f(),
    );
    let first = c
        .node(0)
        .events()
        .iter()
        .filter(|e| is("plugin.started").matches(e))
        .map(timestamp_us)
        .min()
        .unwrap();
    eprintln!(
        "first grant {} ms after the restored node led (TTL {} ms)",
        (first - timestamp_us(&led)) / 1000,
        ttl.as_millis()
    );
    assert!(
        first - timestamp_us(&led) >= ttl.as_micros() as i64,
        "a plugin started within the first TTL after the restored node led"
    );
    assert!(
        token(&counter) > max_token,
        "new token {} is not above {max_token}",
        token(&counter)
    );
    let new_id = c.status_via(0)["cluster"].clone();
    assert!(
        new_id.is_string() && new_id != old_id.as_str(),
        "the restored cluster's id is {new_id}, the old one {old_id}"
    );
    c.wait("the counter to resume", WAIT, |c| {
        counts(&c.node(0).events()).first().map(|&n| {
            assert!(
                n > saved_at_least,
                "the count went back: {n} after {saved_at_least} at the save"
            );
        })
    });

    eprintln!("phase: the other machines join as new members and take their share");
    for i in 1..3 {
        c.switch_to_join(i);
        c.spawn(i);
    }
    for i in 1..3 {
        c.wait_event(i, "the new member to be ready", 0, is("node.ready").f());
    }
    c.wait_owners("pair", 2, |owners| owners.iter().any(|o| o.node != "n1"));
    c.stop_all();
    assert_safe(&c.merged(), "counter", 1);
    assert_safe(&c.merged(), "pair", 2);
}

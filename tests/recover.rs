//! Recovery from a lost majority (issue 25, item 6), on real processes.
//!
//! Two of three nodes are lost for good (killed, their data dirs deleted). The survivor,
//! which holds every committed entry, is made the only voter of the cluster with
//! `tenure recover` while it is stopped: it keeps its state, ends every session, takes
//! fencing tokens far above every earlier one, and grants nothing until a full TTL after
//! it leads (the lost nodes' plugins may still run for all it knows). Fresh nodes then
//! join it.

mod support;

use std::time::Duration;

use support::*;

#[test]
fn a_survivor_recovers_the_cluster_after_the_majority_is_lost() {
    let ttl = Duration::from_secs(2);
    let mut c = counting_cluster(ttl);
    // The leader holds every committed entry.
    let survivor = c.index(&c.wait_leader());
    let name = c.name(survivor).to_string();
    let lost: Vec<usize> = (0..3).filter(|&i| i != survivor).collect();
    let old_id = c.wait("the cluster's id", WAIT, |c| c.cluster_id(survivor));

    eprintln!("phase: {name} survives; the two others are lost for good");
    for &i in &lost {
        c.kill(i);
        c.wipe(i);
    }
    let config = c.node(survivor).dir().join("tenure.toml");
    let config = config.to_str().unwrap().to_string();
    let dir = c.node(survivor).dir().to_path_buf();
    eprintln!("phase: recover is refused while the node runs");
    let running = tenure(&["recover", "--config", &config, "--lost-majority"], &dir);
    assert_eq!(running.status.code(), Some(1), "{}", stderr_of(&running));
    assert!(
        stderr_of(&running).contains("uses the data dir"),
        "says the node runs: {}",
        stderr_of(&running)
    );
    c.kill(survivor);
    let before = c.merged();
    let last_count = *counts(&before).last().unwrap();
    let max_token = highest_token(&before);
    eprintln!("before: count {last_count}, highest token {max_token}");

    eprintln!("phase: recover refuses without confirmation");
    let config = config.as_str();
    let unconfirmed = tenure(&["recover", "--config", config], &dir);
    assert_eq!(
        unconfirmed.status.code(),
        Some(1),
        "{}",
        stderr_of(&unconfirmed)
    );
    assert!(
        stderr_of(&unconfirmed).contains("--lost-majority"),
        "asks for the confirmation: {}",
        stderr_of(&unconfirmed)
    );

    eprintln!("phase: tenure recover on {name}");
    let recovered = tenure(&["recover", "--config", config, "--lost-majority"], &dir);
    assert!(
        recovered.status.success(),
        "recover: {}",
        stderr_of(&recovered)
    );
    let said = stdout_of(&recovered);
    eprintln!("recover said:\n{said}");
    assert!(said.contains("only voter"), "{said}");
    // A new cluster: its id is new, and the old one is named.
    assert!(said.contains(&format!("it was cluster {old_id}")), "{said}");
    let new_id = new_cluster(&said);
    assert_ne!(new_id, old_id);
    let again = tenure(&["recover", "--config", config, "--lost-majority"], &dir);
    assert!(
        again.status.success(),
        "recover twice: {}",
        stderr_of(&again)
    );
    let said = stdout_of(&again);
    assert!(said.contains(&format!("it was cluster {new_id}")), "{said}");
    let new_id = new_cluster(&said);

    eprintln!("phase: {name} starts alone, leads, and grants nothing for a full TTL");
    c.spawn(survivor);
    // The events of this run (`events` is per run).
    let from = 0;
    let led = c.wait_event(
        survivor,
        "the survivor to lead",
        from,
        is("cluster.leader").with("node", name.as_str()).f(),
    );
    let counter = c.wait_event(
        survivor,
        "the counter to start on the survivor",
        from,
        is("plugin.started").with("resource", "counter").f(),
    );
    let held_ms = ms_between(&led, &counter);
    eprintln!(
        "first grant {held_ms} ms after it led (TTL {} ms)",
        ttl.as_millis()
    );
    let first = c.node(survivor).events()[from..]
        .iter()
        .filter(|e| is("plugin.started").matches(e))
        .map(timestamp_us)
        .min()
        .unwrap();
    assert!(
        first - timestamp_us(&led) >= ttl.as_micros() as i64,
        "a plugin started {} ms after the recovered node led, within the TTL",
        (first - timestamp_us(&led)) / 1000
    );

    assert_eq!(c.status_via(survivor)["cluster"], new_id.as_str());

    eprintln!("phase: tokens above every earlier one, the count goes on");
    assert!(
        token(&counter) > max_token,
        "new token {} is not above {max_token}",
        token(&counter)
    );
    c.wait("the counter to count past its last value", WAIT, |c| {
        counts(&c.node(survivor).events()[from..])
            .first()
            .map(|&n| {
                assert!(
                    n > last_count,
                    "the count went back: {n} after {last_count}"
                );
            })
            .map(|_| ())
    });

    eprintln!("phase: the lost nodes come back as new members and take their share");
    for &i in &lost {
        c.switch_to_join(i);
        c.spawn(i);
    }
    for &i in &lost {
        c.wait_event(i, "the new member to be ready", 0, is("node.ready").f());
    }
    let others: Vec<String> = lost.iter().map(|&i| c.name(i).to_string()).collect();
    c.wait_owners("pair", 2, |owners| {
        owners.iter().any(|o| others.contains(&o.node))
    });
    c.stop_all();
    assert_safe(&c.merged(), "counter", 1);
    assert_safe(&c.merged(), "pair", 2);
}

/// The new cluster id `tenure recover` printed.
fn new_cluster(said: &str) -> String {
    said.split_once("only voter of a new cluster, ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map(|id| id.to_string())
        .unwrap_or_else(|| panic!("no new cluster id in: {said}"))
}

//! Placement scenarios (see `scenario.rs` for the language), and checks over many states.

use super::scenario::run;

#[test]
fn tickets_spread_over_distinct_nodes() {
    run("
        node a
        node b
        node c
        plugin r on a b c tickets=2
        plan
        expect assign r/0 a
        expect assign r/1 b
        apply
        expect owners r a b
        plan
        expect nothing
    ");
}

#[test]
fn fewest_slots_then_oldest_session() {
    run("
        node b      # b's session is the oldest
        node a
        node c
        plugin q on a b c
        plugin r on a b c
        plugin s on a b c
        plugin t on a b c
        grant q/0 c
        plan
        expect assign r/0 b   # a and b hold nothing; b is older
        expect assign s/0 a   # a holds nothing
        expect assign t/0 b   # all hold one; b is the oldest
        apply
        expect load a=1 b=2 c=1
    ");
}

#[test]
fn a_full_node_gets_no_more_slots() {
    run("
        options instances=2
        node a
        node b
        plugin p on a b
        plugin q on a b
        plugin r on a b
        plugin s on a b
        plugin t on a
        plan
        expect assign p/0 a
        expect assign q/0 b
        expect assign r/0 a
        expect assign s/0 b
        expect pending t/0 \"a is full: 2 instances use 2 of its 2 instances; one of t takes 1\"
        apply
        plan
        expect pending t/0 \"a is full\"
        options instances=3
        plan
        expect assign t/0 a
    ");
}

/// The default capacity is nine tenths of the runtime's pool: 3,600 instances, 14,400
/// core instances. A Python plugin instance makes 14 core instances, so a node is full
/// of them at 1,028, long before 3,600 (issue 11).
#[test]
fn a_node_of_python_plugins_is_full_at_its_core_instances() {
    run("
        node a
        plugins py 1100 on a core=14 memories=1 tables=2   # counter-py's footprint
        plan
        expect count assign=1028
        expect pending py1028/0 \"a is full: 1,028 instances use 14,392 of its 14,400 core instances; one of py1028 takes 14\"
        ...
    ");
}

/// Footprints add up per node: a node with room for a small plugin may have none for a
/// large one, and a full node's slot goes to the next node.
#[test]
fn mixed_footprints_fill_a_node_by_what_each_takes() {
    run("
        options instances=10 core_instances=42
        node a
        plugin a1 on a core=14 digest=py
        plugin a2 on a core=14 digest=py
        plugin b1 on a core=3 digest=rs
        plugin b2 on a core=3 digest=rs
        plugin b3 on a core=3 digest=rs
        plugin c1 on a core=14 digest=py
        plugin d1 on a core=3 digest=rs
        plan
        expect assign a1/0 a
        expect assign a2/0 a
        expect assign b1/0 a
        expect assign b2/0 a
        expect assign b3/0 a
        expect pending c1/0 \"a is full: 5 instances use 37 of its 42 core instances; one of c1 takes 14\"
        expect assign d1/0 a    # 40 of 42: a Rust-size instance still fits
        apply
        node b
        plugin c1 on b core=14 digest=py
        plan
        expect assign c1/0 b
    ");
}

/// Nodes that advertise one build with different footprints (another version of the
/// host, or a peer lying low): placement counts the largest.
#[test]
fn when_advertisers_disagree_the_largest_footprint_counts() {
    run("
        options core_instances=28
        node a
        node b draining    # live, so its adverts count; it takes no slots
        plugin p on a core=3 digest=d
        plugin p on b core=14 digest=d
        plugin q on a core=3 digest=d
        plugin r on a core=3 digest=d
        plan
        expect assign p/0 a
        expect assign q/0 a
        expect pending r/0 \"a is full: 2 instances use 28 of its 28 core instances; one of r takes 14\"
    ");
}

/// A footprint of zero or of billions, from a peer: zero counts as one core instance,
/// billions as a whole node, and placement goes on around it.
#[test]
fn nonsense_footprints_are_clamped() {
    run("
        options instances=10 core_instances=28
        node a
        node b
        plugin huge on a b core=4294967295 memories=4294967295 tables=4294967295 digest=h
        plugin small on a b core=3 digest=s
        plugin zero on a b core=0 memories=0 tables=0 digest=z
        plan
        expect assign huge/0 a
        expect assign small/0 b
        expect assign zero/0 b    # a is full: the huge one took all its core instances
        apply
        plugin more on a core=1 digest=m
        plan
        expect pending more/0 \"a is full: 1 instances use 28 of its 28 core instances; one of more takes 1\"
    ");
}

/// A slot whose build no live node advertises any more (here its owner now advertises
/// another one) counts as `Pool::UNKNOWN`, larger than any plugin measured.
#[test]
fn a_slot_of_a_build_nobody_advertises_counts_as_large() {
    run("
        options core_instances=18
        node a
        plugin p on a core=3 digest=old
        grant p/0 a
        plugin p on a core=3 digest=new
        plugin q on a core=3 digest=q
        plan
        expect pending q/0 \"a is full: 1 instances use 16 of its 18 core instances; one of q takes 3\"
        ...
    ");
}

#[test]
fn a_node_holds_one_slot_of_a_resource_and_the_rest_is_pending() {
    run("
        node a
        node b
        plugin r on a b tickets=3
        plan
        expect assign r/0 a
        expect assign r/1 b
        expect pending r/2 \"no eligible node for r 1.0.0\" \"every eligible node already holds a slot of r (a has r/0, b has r/1): 3 tickets, 2 eligible nodes\"
        apply
        plan
        expect pending r/2 \"every eligible node already holds\"
        node c
        plan
        expect pending r/2 \"a has r/0, b has r/1 (a node holds one slot of a resource); c has no plugin for r in its plugins folder\"
        plugin r on c tickets=3
        plan
        expect assign r/2 c
    ");
}

#[test]
fn required_labels() {
    run("
        node a zone=a
        node b zone=b
        node c zone=a draining
        node d
        plugin r on a b c d tickets=2 require=zone=a
        plan
        expect assign r/0 a
        expect pending r/1 \"no eligible node for r 1.0.0 (sha256:1.0.0): a has r/0 (a node holds one slot of a resource); c is draining; b, d lack labels zone=a\"
    ");
}

#[test]
fn draining_moves_slots_away_and_takes_none() {
    run("
        node a
        node b
        plugin r on a b
        plugin s on a b
        grant r/0 a
        grant s/0 a
        drain a
        plan
        expect handover r/0 drained
        expect handover s/0 drained
        apply
        plan
        expect nothing   # they are being handed over
        release all
        plan
        expect assign r/0 b
        expect assign s/0 b
        apply
        plan
        expect nothing
    ");
}

#[test]
fn draining_the_only_node_still_stops_its_slots() {
    run("
        node a
        plugin r on a
        grant r/0 a
        drain a
        plan
        expect handover r/0 drained
        apply
        release all
        plan
        expect pending r/0 \"a is draining\"
        undrain a
        plan
        expect assign r/0 a
    ");
}

#[test]
fn an_ineligible_move_target_is_passed_over() {
    run("
        node a
        node b
        node c
        plugin r on a b c
        plugin s on a b c
        grant r/0 a
        grant s/0 a
        handover r/0 moved to=c
        handover s/0 moved to=c
        release r/0
        drain c
        release s/0
        plan
        expect assign r/0 a   # c is draining: fewest slots, oldest session
        expect assign s/0 b
    ");
}

#[test]
fn an_operator_move_lands_on_its_target() {
    run("
        node a
        node b
        node c
        plugin r on a b c
        grant r/0 a
        handover r/0 moved to=c
        plan
        expect nothing
        release r/0
        plan
        expect assign r/0 c   # a (oldest, now empty) would win without the target
    ");
}

#[test]
fn a_new_version_rolls_out_where_it_can_run() {
    run("
        node a
        node b
        node c
        plugin r on a b c version=1.0.0
        grant r/0 a
        plugin r on c version=1.1.0
        plan
        expect handover r/0 plugin-updated
        apply
        release all
        plan
        expect assign r/0 c
        apply
        plan
        expect nothing
    ");
}

#[test]
fn an_old_version_keeps_running_while_nothing_can_run_the_new_one() {
    run("
        node a
        node b zone=a draining
        node c zone=b
        plugin r on a version=1.0.0 require=zone=a
        node d zone=a
        plugin r on d version=1.0.0 require=zone=a
        grant r/0 d
        plugin r on b c version=2.0.0 require=zone=a
        plan
        expect nothing   # b is draining, c lacks zone=a: d keeps running 1.0.0
        undrain b
        plan
        expect handover r/0 plugin-updated
    ");
}

#[test]
fn old_version_nodes_are_no_longer_eligible() {
    run("
        node a
        node b
        node c
        plugin r on a b version=1.0.0 tickets=2
        plugin r on c version=1.2.0 tickets=2 digest=sha256:0123456789abcdef
        plan
        expect assign r/0 c
        expect pending r/1 \"no eligible node for r 1.2.0 (sha256:0123456789ab…)\" \"a has 1.0.0 (sha256:1.0.0), not the winning build\" \"b has 1.0.0\"
    ");
}

#[test]
fn updates_roll_one_slot_at_a_time() {
    run("
        node a
        node b
        node c
        node d
        plugin r on a b c d version=1.0.0 tickets=2
        round
        expect owners r a b
        plugin r on c d version=2.0.0 tickets=2
        plan
        expect handover r/0 plugin-updated
        apply
        plan
        expect nothing   # r/0 is being handed over: r/1 keeps running
        release all
        plan
        expect assign r/0 c
        expect handover r/1 plugin-updated
        apply
        release all
        plan
        expect assign r/1 d
    ");
}

#[test]
fn a_changed_plugin_file_restarts_the_slot_on_the_same_node() {
    run("
        node a
        plugin r on a version=1.0.0
        round
        plugin r on a version=1.0.0 digest=sha256:rebuilt
        plan
        expect handover r/0 plugin-updated   # a itself can run the new build
        apply
        release all
        plan
        expect assign r/0 a
    ");
}

#[test]
fn a_plugin_removed_everywhere_stops() {
    run("
        node a
        node b
        plugin r on a b tickets=2
        round
        unplug r from a b
        plan
        expect handover r/0 plugin-removed
        expect handover r/1 plugin-removed
        apply
        release all
        plan
        expect nothing
    ");
}

#[test]
fn a_plugin_removed_from_its_owner_moves() {
    run("
        node a
        node b
        plugin r on a b
        grant r/0 a
        unplug r from a
        plan
        expect handover r/0 plugin-removed
        apply
        release all
        plan
        expect assign r/0 b
    ");
}

#[test]
fn shrinking_tickets_removes_the_top_slots() {
    run("
        node a
        node b
        node c
        plugin r on a b c tickets=3
        round
        expect owners r a b c
        plugin r on a b c tickets=1
        plan
        expect handover r/1 plugin-removed
        expect handover r/2 plugin-removed
        apply
        release all
        plan
        expect nothing
        expect owners r a
    ");
}

#[test]
fn a_cooling_down_node_is_skipped_until_it_passes() {
    run("
        node a
        node b
        plugin r on a b
        grant r/0 a
        giveup r/0 until=60000
        kill b
        time 15000
        plan
        expect pending r/0 \"a is cooling down after repeated failures until 1970-01-01T00:01:00Z (in 45s)\" \"b has no live session\"
        start b
        plan
        expect assign r/0 b
        kill b
        time 60000
        plan
        expect assign r/0 a
    ");
}

#[test]
fn nodes_without_sessions_own_nothing_and_get_nothing() {
    run("
        node a
        node b down
        plugin r on a b tickets=2
        plan
        expect assign r/0 a
        expect pending r/1 \"every eligible node already holds\" \"b has no live session\"
        apply
        kill a
        expect owners r - -
        plan
        expect pending r/0 \"no live node has the plugin for r (r 1.0.0): a, b have no live session\"
        expect pending r/1
        start b
        plan
        expect assign r/0 b
        expect pending r/1
    ");
}

#[test]
fn rebalancing_after_a_node_joins_is_bounded_and_settles() {
    run("
        options max_moves=1 min_term=10000
        node a
        node b
        plugin p1 on a b
        plugin p2 on a b
        plugin p3 on a b
        plugin p4 on a b
        plugin p5 on a b
        plugin p6 on a b
        round
        expect load a=3 b=3
        node c
        plugin p1 on c
        plugin p2 on c
        plugin p3 on c
        plugin p4 on c
        plugin p5 on c
        plugin p6 on c
        time 5000
        plan
        # Held 5 s, less than the minimum term, but c holds nothing: it is arriving.
        expect handover p2/0 rebalanced to=c   # b: as loaded as a, younger session
        apply
        plan
        expect nothing   # one move in flight: the bound
        release all
        plan
        expect assign p2/0 c
        expect handover p1/0 rebalanced to=c
        apply
        release all
        plan
        expect assign p1/0 c
        apply
        expect load a=2 b=2 c=2
        plan
        expect nothing
    ");
}

#[test]
fn rebalancing_reaches_a_fixed_point() {
    run("
        options max_moves=3 min_term=10000
        node a
        node b
        plugin p1 on a b tickets=2
        plugin p2 on a b tickets=2
        plugin p3 on a b tickets=2
        plugin p4 on a b
        plugin p5 on a b
        plugin p6 on a b
        plugin p7 on a b
        round
        expect load a=5 b=5
        node c
        node d
        plugin p1 on c d tickets=2
        plugin p2 on c d tickets=2
        plugin p3 on c d tickets=2
        plugin p4 on c d
        plugin p5 on c d
        plugin p6 on c d
        plugin p7 on c d
        time 20000
        plan
        expect count handover=3   # the bound
        converge within=30 step=11000
        expect balanced
        expect load a=3 b=3 c=2 d=2
        plan
        expect nothing
    ");
}

#[test]
fn rebalancing_leaves_fresh_grants_and_moving_resources_alone() {
    run("
        options max_moves=10 min_term=10000
        node a
        node b
        plugin p on a b
        plugin q on a b
        plugin r on a b
        grant p/0 a since=0
        grant q/0 a since=0
        time 20000
        grant r/0 a
        plugin p on a b version=2.0.0   # p must update: it is not rebalanced
        plan
        expect handover p/0 plugin-updated
        expect handover q/0 rebalanced to=b   # r/0 is too fresh
    ");
}

#[test]
fn rebalancing_ignores_nodes_that_can_run_nothing() {
    run("
        node a
        node b zone=b
        plugin p on a b require=zone=a
        plugin q on a b require=zone=a
        grant p/0 a since=0
        grant q/0 a since=0
        time 100000
        plan
        expect nothing
    ");
}

#[test]
fn handovers_in_flight_count_against_the_move_bound() {
    run("
        options max_moves=2
        node a
        node b
        node c
        plugin p1 on a b c
        plugin p2 on a b c
        plugin p3 on a b c
        plugin p4 on a b c
        plugin q on a b c
        grant p1/0 a since=0
        grant p2/0 a since=0
        grant p3/0 a since=0
        grant p4/0 a since=0
        grant q/0 c since=0
        drain c
        time 20000
        plan
        expect handover q/0 drained
        expect handover p1/0 rebalanced to=b   # one more within the bound of two
        apply
        plan
        expect nothing   # two in flight
        release q/0
        plan
        expect assign q/0 b   # then b has 2 (p1 is coming), a 3 (p1 is leaving): even
        apply
        release all
        plan
        expect assign p1/0 b
        apply
        expect load a=3 b=2 c=0
    ");
}

#[test]
fn a_node_handing_a_slot_over_gets_no_other_slot_of_it() {
    run("
        node a
        plugin r on a tickets=2
        grant r/0 a
        handover r/0 released
        plan
        expect pending r/1 \"every eligible node already holds a slot of r (a has r/0): 2 tickets, 1 eligible node\"
    ");
}

/// `plugin` lines for resources `p00`… `p{count-1}` on `nodes`.
fn plugins(count: usize, nodes: &str) -> String {
    (0..count)
        .map(|i| format!("plugin p{i:02} on {nodes}\n"))
        .collect()
}

#[test]
fn vacant_slots_spread_over_the_eligible_nodes_in_one_plan() {
    let script = format!(
        "
        node a
        node b
        {}
        plan
        expect count assign=100
        apply
        expect load a=50 b=50
        ",
        plugins(100, "a b")
    );
    run(&script);
}

#[test]
fn a_node_that_arrives_late_gets_young_slots_at_once() {
    // a advertised first and was granted everything; b advertises the same plugins a
    // second later. Waiting for the minimum term would leave b empty for 10 s: young
    // slots move to a node below the mean load, so b gets its fair share at once.
    let script = format!(
        "
        options min_term=10000 max_moves=4
        node a
        node b
        {}
        round
        expect load a=20 b=0
        {}
        advance 1000
        converge within=20 step=100
        expect load a=10 b=10
        ",
        plugins(20, "a"),
        plugins(20, "b"),
    );
    run(&script);
}

/// `grant` lines giving `p{from}` … `p{to-1}` (as [`plugins`] names them) to `node`, held
/// since `since`.
fn grants(from: usize, to: usize, node: &str, since: u64) -> String {
    (from..to)
        .map(|i| format!("grant p{i:02}/0 {node} since={since}\n"))
        .collect()
}

#[test]
fn young_slots_go_to_a_node_below_the_mean() {
    // All slots are young. c holds more than half of what a holds, so it is not
    // "arriving" by the old rule, but it is below the mean (10): it gets slots at once
    // from the node above it, until every node is within one.
    let script = format!(
        "
        node a
        node b
        node c
        {}
        {}{}{}
        time 1000
        plan
        expect handover p00/0 rebalanced to=c
        expect handover p01/0 rebalanced to=c
        expect handover p02/0 rebalanced to=c
        apply
        release all
        plan
        expect count assign=3
        apply
        expect load a=10 b=10 c=10
        time 5000
        plan
        expect nothing
        time 20000   # past the minimum term: nothing more moves
        plan
        expect nothing
        ",
        plugins(30, "a b c"),
        grants(0, 13, "a", 0),
        grants(13, 23, "b", 0),
        grants(23, 30, "c", 0),
    );
    run(&script);
}

#[test]
fn settled_slots_move_before_young_ones() {
    // p0 is first in resource order but young; p1 has been held past the minimum term.
    // b may take either (it is below the mean), and it takes the settled one: a fresh
    // grant is not interrupted while an old one can go instead.
    let script = format!(
        "
        options min_term=10000
        node a
        node b
        {}
        grant p00/0 a since=15000
        grant p01/0 a since=0
        grant p02/0 a since=15000
        time 20000
        plan
        expect handover p01/0 rebalanced to=b
        ",
        plugins(3, "a b"),
    );
    run(&script);
}

#[test]
fn young_slots_within_one_of_each_other_stay() {
    let script = format!(
        "
        node a
        node b
        node c
        {}
        {}{}{}
        time 1000
        plan
        expect nothing
        ",
        plugins(10, "a b c"),
        grants(0, 4, "a", 0),
        grants(4, 7, "b", 0),
        grants(7, 10, "c", 0),
    );
    run(&script);
}

#[test]
fn young_slots_even_out_once_and_then_stay() {
    // 11, 10, 9, all young: the mean is 10, c is below it and a holds two more than c.
    // One move, then every node is at the mean and no young slot may go anywhere: the
    // moved slot, young again at c, is not moved on.
    let script = format!(
        "
        node a
        node b
        node c
        {}
        {}{}{}
        time 1000
        plan
        expect handover p00/0 rebalanced to=c
        apply
        release all
        plan
        expect assign p00/0 c
        apply
        expect load a=10 b=10 c=10
        time 5000   # p00 is young at c again
        plan
        expect nothing
        time 20000   # every slot settled
        plan
        expect nothing
        ",
        plugins(30, "a b c"),
        grants(0, 11, "a", 0),
        grants(11, 21, "b", 0),
        grants(21, 30, "c", 0),
    );
    run(&script);
}

#[test]
fn a_forming_cluster_is_balanced_before_the_minimum_term() {
    // Five nodes load the same 100 plugins and advertise them one after the other, a
    // second apart, as nodes of a forming cluster finish loading at different times. Each
    // arrival takes its share of young slots at once, so the cluster is balanced without
    // any slot coming of age (the minimum term is a minute here, longer than the run).
    let mut script = String::from("options min_term=60000\n");
    for node in ["a", "b", "c", "d", "e"] {
        script.push_str(&format!("node {node}\n"));
    }
    for node in ["a", "b", "c", "d", "e"] {
        script.push_str(&plugins(100, node));
        script.push_str("converge within=30 step=100\nadvance 1000\n");
    }
    script.push_str("expect balanced\nexpect load a=20 b=20 c=20 d=20 e=20\n");
    run(&script);
}

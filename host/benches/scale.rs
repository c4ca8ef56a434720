//! Where one Raft group stops: the costs that grow with the cluster, measured on the
//! replicated state machine itself (the code every node runs), in one process.
//!
//! Run with `cargo bench -p tenure --bench scale`. For each size (nodes × resources, one
//! ticket each, every node advertising every resource as a shared plugins folder does)
//! it builds the state by applying real commands, then prints:
//! - **plan, all vacant**: one `placement::plan` of the leader over the whole state
//!   (its time, and the grants it proposes);
//! - **grant**: the time to apply one `Assign` (every node applies every grant);
//! - **plan, steady**: one plan with every slot granted and nothing to do. The leader
//!   plans after every applied entry and once a second, so this bounds how many
//!   state-changing entries per second the leader can follow with a plan;
//! - **state**: the encoded size of the whole state (what a snapshot carries and every
//!   node holds in memory, before plugin state blobs) and the time to encode and decode
//!   it (a snapshot sent to a joining or lagging node).
//!
//! `TENURE_SCALE` sets the sizes, e.g. `TENURE_SCALE=5x10000,50x100000` (default
//! `5x10000,10x20000,20x50000,40x100000`). Sizes above what the pool lets nodes run
//! (`placement::CAPACITY` per node) leave slots pending, as a real cluster would.
//! Nothing here is timed against a target: it prints figures, and the extrapolation is
//! in docs/design.md (§8, "Scale").

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use common::{Summary, load_average, micros, millis, print_machine};
use tenure::cluster::{Advert, Cluster, Command, Pool, Response};
use tenure::placement;

mod common;

/// The wall clock the commands carry.
const T0: u64 = 1_000_000;

fn main() -> anyhow::Result<()> {
    let sizes = std::env::var("TENURE_SCALE")
        .unwrap_or_else(|_| "5x10000,10x20000,20x50000,40x100000".into());
    print_machine("before");
    for size in sizes.split(',') {
        let (nodes, resources) = size
            .split_once('x')
            .and_then(|(n, r)| Some((n.trim().parse().ok()?, r.trim().parse().ok()?)))
            .with_context(|| format!("TENURE_SCALE: {size:?} is not NODESxRESOURCES"))?;
        measure(nodes, resources)?;
    }
    print_machine("after");
    Ok(())
}

struct World {
    cluster: Cluster,
    index: u64,
}

impl World {
    fn apply(&mut self, command: Command) -> Response {
        self.index += 1;
        self.cluster.apply(self.index, 2, command)
    }
}

fn measure(nodes: usize, resources: usize) -> anyhow::Result<()> {
    println!("\n== {nodes} nodes, {resources} resources ==");
    let mut world = World {
        cluster: Cluster::default(),
        index: 0,
    };
    let plugins: BTreeMap<String, Advert> = (0..resources)
        .map(|r| {
            let name = format!("r{r:06}");
            let advert = Advert {
                plugin: name.clone(),
                version: semver::Version::new(1, 0, 0),
                digest: format!("sha256:{}", "a".repeat(64)),
                tickets: 1,
                require: BTreeMap::new(),
                // The Rust heartbeat's footprint, as `plugin check` reports it.
                footprint: Pool {
                    instances: 1,
                    core_instances: 3,
                    memories: 1,
                    tables: 2,
                },
            };
            (name, advert)
        })
        .collect();
    let built = Instant::now();
    for n in 0..nodes {
        let node = format!("n{n:03}");
        world.apply(Command::Join {
            node: node.clone(),
            addr: format!("10.0.0.{n}:7400"),
            labels: BTreeMap::new(),
        });
        world.apply(Command::OpenSession {
            node: node.clone(),
            at_ms: T0 + n as u64,
        });
        world.apply(Command::Advertise {
            node,
            plugins: plugins.clone(),
        });
    }
    println!("  built in {:.1} s", built.elapsed().as_secs_f64());
    drop(plugins);

    let options = placement::Options::default();
    let mut plans = Vec::new();
    let mut grants = 0usize;
    let mut apply_time = Duration::ZERO;
    let now_ms = T0 + 60_000;
    loop {
        let started = Instant::now();
        let plan = placement::plan(&world.cluster, now_ms, &options);
        plans.push((started.elapsed(), plan.commands.len()));
        if plan.commands.is_empty() {
            break;
        }
        let started = Instant::now();
        for command in plan.commands {
            let response = world.apply(command);
            ensure!(
                matches!(response, Response::Granted { .. }),
                "a grant was refused: {response:?}"
            );
            grants += 1;
        }
        apply_time += started.elapsed();
    }
    let (first, first_commands) = plans[0];
    println!(
        "  plan, all vacant: {} ms, {first_commands} grants proposed",
        ms(first)
    );
    println!(
        "  grant: {:.2} µs per Assign applied ({grants} grants in {} ms, {} plans)",
        micros(apply_time) / grants.max(1) as f64,
        ms(apply_time),
        plans.len()
    );
    let steady: Vec<f64> = (0..5)
        .map(|_| {
            let started = Instant::now();
            let plan = placement::plan(&world.cluster, now_ms, &options);
            assert!(plan.commands.is_empty(), "a settled state plans nothing");
            millis(started.elapsed())
        })
        .collect();
    println!("  plan, steady: {}", Summary::of(steady).describe("ms", 1));
    let started = Instant::now();
    let bytes = postcard::to_allocvec(&world.cluster)?;
    let encode = started.elapsed();
    let started = Instant::now();
    let decoded: Cluster = postcard::from_bytes(&bytes)?;
    let decode = started.elapsed();
    ensure!(decoded == world.cluster, "the state round-trips");
    println!(
        "  state: {:.1} MiB encoded ({:.0} bytes per resource, {:.0} per advert), encode {} ms, decode {} ms",
        bytes.len() as f64 / (1 << 20) as f64,
        bytes.len() as f64 / resources as f64,
        bytes.len() as f64 / (resources * nodes) as f64,
        ms(encode),
        ms(decode)
    );
    println!("  load average: {}", load_average());
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.1}", millis(d))
}

//! A new version of a Python (or JavaScript) plugin rolled out across three nodes on one
//! host (issue 29, item 4): how long from the new wasm's arrival in the last node's folder
//! to the last slot running it, and where that time goes.
//!
//! A benchmark, not a timed test: it is `#[ignore]`d and prints figures (median and range
//! over [`runs`]) and asserts nothing about time. Run it in release (the nodes'
//! compiler is the test's `tenure` binary, and a debug Cranelift is many times slower):
//!
//! ```sh
//! cargo test --release --test rollout -- --ignored --nocapture
//! TENURE_ROLLOUT_LANGS=py TENURE_ROLLOUT_RUNS=5 TENURE_ROLLOUT_CACHE=on \
//!   cargo test --release --test rollout -- --ignored --nocapture
//! ```
//!
//! Each language is measured with the nodes' incremental compilation cache (the default)
//! and without it (`[compile] incremental_cache_mib = 0`: every compile from nothing, as
//! before issue 29), side by side.
//!
//! Each run: three fresh nodes (own data dirs: own compile cache, own incremental cache)
//! with `counter` at 1.0.0 (the example counter, `tickets = 3`, one slot per node). Each
//! node compiles it cold, which also fills its incremental cache with the language's
//! interpreter. Once every slot runs 1.0.0, version 2.0.0 (the same app with one line of
//! its source changed, built by the plugin's build script) is renamed into each node's
//! folder, one node right after the other. The figures, from the nodes' event logs (all
//! on one clock):
//! - **rollout**: the last drop → the last `plugin.started` of 2.0.0;
//! - **compile**: per node, the drop → its `plugin.loaded` of 2.0.0 (the median node and
//!   the slowest), and the compiles' CPU (the `tenure __compile` children's user + system
//!   time, from the nodes' `cutime`/`cstime`);
//! - **handovers**: the last `plugin.loaded` → the last `plugin.started`: what the rolling
//!   update adds once every node has the version;
//! - how many slots ran 2.0.0 before the last node had loaded it (a node that is ready is
//!   not held back by one that is not).
//!
//! Each run also checks what issue 29's item 4 asks of a rollout: every node began
//! compiling 2.0.0 before any had loaded it (side by side, not one after another), and
//! each node's 1.0.0 slot ran until that node had loaded 2.0.0.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use support::*;

/// How long a cold compile of three Python components side by side may take on a busy
/// two-core machine.
const COMPILE_WAIT: Duration = Duration::from_secs(300);

/// Runs per language (`TENURE_ROLLOUT_RUNS`, default 3).
fn runs() -> usize {
    std::env::var("TENURE_ROLLOUT_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

/// The languages to measure (`TENURE_ROLLOUT_LANGS`: `py`, `js` or `py,js`, the default).
fn languages() -> Vec<String> {
    std::env::var("TENURE_ROLLOUT_LANGS")
        .unwrap_or_else(|_| "py,js".to_owned())
        .split(',')
        .map(str::to_owned)
        .collect()
}

/// Whether the nodes keep an incremental compilation cache, per setting measured
/// (`TENURE_ROLLOUT_CACHE`: `on`, `off` or `on,off`, the default; `off` is
/// `[compile] incremental_cache_mib = 0`, the compile before issue 29).
fn settings() -> Vec<bool> {
    std::env::var("TENURE_ROLLOUT_CACHE")
        .unwrap_or_else(|_| "on,off".to_owned())
        .split(',')
        .map(|s| s == "on")
        .collect()
}

/// The counter of `lang` (`py`, `js`) with one line of its app changed: a new version, as
/// an author's edit makes it. Built with the plugin's own build script from a copy of
/// its folder (the script keeps the result under the digest of its inputs, so a second
/// call is quick).
fn edited_counter(lang: &str) -> PathBuf {
    let workspace = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let plugin = workspace.join("plugins").join(format!("counter-{lang}"));
    let (app, from, to) = match lang {
        "py" => ("app.py", "PERIOD_MS = 500", "PERIOD_MS = 501"),
        "js" => ("app.js", "PERIOD_MS = 500n", "PERIOD_MS = 501n"),
        other => panic!("no counter in {other:?}"),
    };
    let dir = target_dir()
        .join("polyglot")
        .join(format!("counter-{lang}-v2"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&plugin).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
        }
    }
    let source = std::fs::read_to_string(dir.join(app)).unwrap();
    assert!(source.contains(from), "{app} has no {from:?} to edit");
    std::fs::write(dir.join(app), source.replacen(from, to, 1)).unwrap();
    let out = dir.with_extension("wasm");
    let status = Command::new("bash")
        .arg(plugin.join("build.sh"))
        .arg(&out)
        .arg(&dir)
        .status()
        .expect("running the build script");
    assert!(status.success(), "building the edited counter-{lang}");
    out
}

/// The children's CPU time (user + system, clock ticks) of a running node: the compiles
/// it has reaped.
fn children_cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // cutime and cstime are fields 16 and 17 of stat; `rest` starts at field 3.
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    field(16).unwrap_or(0) + field(17).unwrap_or(0)
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

/// One run's figures, in seconds.
struct Rollout {
    rollout: f64,
    compile_began: f64,
    compile_median: f64,
    compile_slowest: f64,
    compile_cpu: f64,
    handovers: f64,
    early: usize,
}

fn one_run(lang: &str, v1: &[u8], v2: &[u8], incremental: bool) -> Rollout {
    let mut builder = Cluster::builder(3);
    if !incremental {
        builder = builder.config("\n[compile]\nincremental_cache_mib = 0\n");
    }
    let mut c = builder.build();
    c.install_plugin_everywhere("counter", &manifest("counter", 3, "1.0.0"), v1);
    // Not `start`: its bound on the nodes' readiness does not allow for three cold
    // compiles side by side on a busy machine; the wait below does.
    for i in 0..3 {
        c.spawn(i);
    }
    let old = c.wait("every slot runs 1.0.0", COMPILE_WAIT, |c| {
        let owners = c.owners("counter");
        (owners.len() == 3 && owners.iter().all(|o| o.version == "1.0.0")).then_some(owners)
    });
    let cpu_before: Vec<u64> = (0..3)
        .map(|i| children_cpu_ticks(c.node(i).pid()))
        .collect();
    let v2_manifest = manifest("counter", 3, "2.0.0");
    for i in 0..3 {
        c.install_plugin(i, "counter", &v2_manifest, v2);
    }
    let dropped = system_time_us(SystemTime::now());
    let loaded: Vec<Value> = (0..3)
        .map(|i| {
            c.node(i).wait_for(
                "2.0.0 loaded",
                |e| is("plugin.loaded").matches(e) && e["version"] == "2.0.0",
                COMPILE_WAIT,
            )
        })
        .collect();
    // The node's compile of 2.0.0: its last `plugin.compiling` (the first was 1.0.0's).
    let compiling: Vec<Value> = (0..3)
        .map(|i| {
            c.node(i)
                .events()
                .into_iter()
                .rfind(|e| is("plugin.compiling").with("plugin", "counter").matches(e))
                .expect("2.0.0 was compiled")
        })
        .collect();
    let owners = c.wait("every slot runs 2.0.0", COMPILE_WAIT, |c| {
        let owners = c.owners("counter");
        (owners.len() == 3 && owners.iter().all(|o| o.version == "2.0.0")).then_some(owners)
    });
    // A compile's CPU is counted in its node's cutime/cstime once the node has reaped the
    // child, which it does before it writes `plugin.loaded`.
    let cpu_after: Vec<u64> = (0..3)
        .map(|i| children_cpu_ticks(c.node(i).pid()))
        .collect();
    let compile_cpu = cpu_after
        .iter()
        .zip(&cpu_before)
        .map(|(a, b)| a - b)
        .sum::<u64>() as f64
        / ticks_per_second();
    let last_start = owners
        .iter()
        .map(|o| timestamp_us(&o.started))
        .max()
        .unwrap();
    let mut load_times: Vec<i64> = loaded.iter().map(timestamp_us).collect();
    load_times.sort_unstable();
    let last_loaded = *load_times.last().unwrap();
    let early = owners
        .iter()
        .filter(|o| timestamp_us(&o.started) < last_loaded)
        .count();
    // What item 4 asks of a rollout, checked here because only this test has compiles
    // long enough to show it: every node began compiling before any had finished (in
    // parallel, not one after another), and each node's 1.0.0 slot ran until that node
    // had loaded 2.0.0 (nothing holds a slot that cannot run the new version yet).
    let first_loaded = load_times[0];
    for (i, e) in compiling.iter().enumerate() {
        assert!(
            timestamp_us(e) < first_loaded,
            "{} began compiling 2.0.0 only after another node had loaded it: {e}",
            c.name(i)
        );
    }
    for (i, loaded) in loaded.iter().enumerate() {
        let slot = old
            .iter()
            .find(|o| o.node == c.name(i))
            .expect("every node ran a slot of 1.0.0");
        let stopped = c.node(i).wait_for(
            "1.0.0 stopped",
            |e| is("plugin.stopped").matches(e) && token(e) == slot.token,
            WAIT,
        );
        assert!(
            timestamp_us(&stopped) >= timestamp_us(loaded),
            "{}'s 1.0.0 slot stopped before the node had loaded 2.0.0: {stopped} before {loaded}",
            c.name(i)
        );
    }
    let compile_began = compiling.iter().map(timestamp_us).max().unwrap() - dropped;
    let secs = |us: i64| us as f64 / 1e6;
    let run = Rollout {
        compile_began: secs(compile_began),
        rollout: secs(last_start - dropped),
        compile_median: secs(load_times[1] - dropped),
        compile_slowest: secs(last_loaded - dropped),
        compile_cpu,
        handovers: secs(last_start - last_loaded),
        early,
    };
    eprintln!(
        "[rollout {lang}, incremental cache {}] rollout {:.2} s; last compile began {:.2} s; loaded (median, slowest node) {:.2} / {:.2} s; \
         compile CPU (3 nodes) {:.2} s; last loaded -> last started {:.2} s; \
         slots on 2.0.0 before the last node loaded it: {}; functions reused/compiled: {}",
        if incremental { "on" } else { "off" },
        run.rollout,
        run.compile_began,
        run.compile_median,
        run.compile_slowest,
        run.compile_cpu,
        run.handovers,
        run.early,
        loaded
            .iter()
            .map(|e| format!("{}/{}", e["reused_functions"], e["compiled_functions"]))
            .collect::<Vec<_>>()
            .join(", "),
    );
    c.stop_all();
    assert_safe(&c.merged(), "counter", 3);
    run
}

/// "median (min–max)" of `values`.
fn summary(values: &mut [f64]) -> String {
    values.sort_by(f64::total_cmp);
    format!(
        "{:.2} s ({:.2}–{:.2})",
        values[values.len() / 2],
        values[0],
        values[values.len() - 1]
    )
}

#[test]
#[ignore = "a benchmark: prints figures (cargo test --release --test rollout -- --ignored --nocapture)"]
fn a_new_version_rolled_out_across_three_nodes() {
    let built = polyglot_plugins();
    for lang in languages() {
        let v1_path = match lang.as_str() {
            "py" => &built.counter_py,
            "js" => &built.counter_js,
            other => panic!("TENURE_ROLLOUT_LANGS: no counter in {other:?}"),
        };
        let v1 = std::fs::read(v1_path).unwrap();
        let v2 = std::fs::read(edited_counter(&lang)).unwrap();
        assert_ne!(v1, v2, "the edit makes another component");
        for incremental in settings() {
            let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
            let runs: Vec<Rollout> = (0..runs())
                .map(|_| one_run(&lang, &v1, &v2, incremental))
                .collect();
            let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
            let pick =
                |f: fn(&Rollout) -> f64| summary(&mut runs.iter().map(f).collect::<Vec<_>>());
            let three = |l: &str| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
            println!(
                "counter-{lang}, incremental cache {}, {} runs (load average before {}, after {}):",
                if incremental { "on" } else { "off" },
                runs.len(),
                three(&load),
                three(&load_after),
            );
            type Figure = fn(&Rollout) -> f64;
            let figures: [(&str, Figure); 6] = [
                ("rollout, last drop -> last 2.0.0 plugin.started", |r| {
                    r.rollout
                }),
                ("drop -> plugin.compiling, last node", |r| r.compile_began),
                ("drop -> plugin.loaded, median node", |r| r.compile_median),
                ("drop -> plugin.loaded, slowest node", |r| r.compile_slowest),
                ("compile CPU, three nodes together", |r| r.compile_cpu),
                ("last plugin.loaded -> last plugin.started", |r| r.handovers),
            ];
            for (what, figure) in figures {
                println!("  {what}: {}", pick(figure));
            }
            println!(
                "  slots on 2.0.0 before the last node loaded it: {:?}",
                runs.iter().map(|r| r.early).collect::<Vec<_>>()
            );
        }
    }
}

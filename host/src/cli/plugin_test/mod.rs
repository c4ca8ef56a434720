//! `tenure plugin test [SCRIPT]`: runs a plugin on a real local cluster and checks, step
//! by step, what it does when its ownership moves.
//!
//! What matters most in an owned task is what it does when it loses the slot: does its
//! cleanup run once, does the next owner go on from its state, does every owner work
//! under a higher fencing token. Those cannot be seen by running the plugin alone, so
//! this command builds the smallest cluster where a slot can move (`cluster.rs`: two
//! nodes with the plugin and a witness, in a temporary dir, this binary's own `tenure
//! run`), and runs a TOML script (`script.rs`, lines matched by `pattern.rs`) against
//! it (`run.rs`): start, wait for a log line, hand over, crash the owner, restart, lose
//! the lease while alive (a frozen node), change the manifest, and assertions on the
//! event log and on what a recording HTTP server got (`recorder.rs`: every request
//! fenced, none of a stale owner). Each step prints what happened; the first step that
//! fails prints what it expected, what it found and the last lines of both plugin
//! nodes, and the command exits non-zero.
//!
//! `--watch` (`watch.rs`) builds and runs the script again on every change of the
//! project's sources. The nodes are killed at the end (or when this process dies); the
//! dir is removed unless `--keep`.

mod cluster;
mod node;
mod pattern;
mod recorder;
mod run;
mod script;
mod watch;

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::catalog;
use cluster::{Cluster, Plugin, took};
use run::Runner;

/// The script `tenure plugin test` reads when given none.
pub const DEFAULT_SCRIPT: &str = "test.toml";

/// `tenure plugin test`: runs `script`; `keep` keeps the cluster's dir; `watch` builds
/// and runs it again on every change of the project's sources.
pub fn plugin_test(script: &Path, keep: bool, watch: bool) -> anyhow::Result<()> {
    if watch {
        return watch::watch(script, || run(script, keep));
    }
    run(script, keep)
}

/// One run of the script.
fn run(script: &Path, keep: bool) -> anyhow::Result<()> {
    let began = Instant::now();
    let script = script::load(script)?;
    let plugin = read_plugin(&script.wasm)?;
    let resource = plugin.1;
    let recorder = match script.record_http {
        Some(addr) => Some(recorder::Recorder::start(addr)?),
        None => None,
    };
    let cluster = Cluster::new(&plugin.0, script.ttl)?;
    let nodes: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("{}@{}", n.name, n.addr))
        .collect();
    println!(
        "testing {} (resource {resource}) on {} and {} (the plugin nodes) and {} (a \
         witness voter), lease TTL {:?}, in {}",
        script.wasm.display(),
        nodes[0],
        nodes[1],
        nodes[2],
        script.ttl,
        cluster.dir().display()
    );
    if let Some(recorder) = &recorder {
        println!("recording HTTP requests to http://{}", recorder.addr);
    }
    let mut runner = Runner::new(cluster, &resource, recorder);
    let total = script.steps.len();
    let mut failed = None;
    for (i, step) in script.steps.iter().enumerate() {
        let n = i + 1;
        match runner.step(step) {
            Ok(what) => println!("[{n}/{total}] {}: ok: {what}", step.describe()),
            Err(failure) => {
                println!("[{n}/{total}] {}: FAILED", step.describe());
                println!("  expected: {}", failure.expected);
                println!("  found:    {}", failure.found);
                for node in &runner.cluster.nodes[..cluster::PLUGIN_NODES] {
                    println!("last lines of {}:\n{}", node.name, node.tail());
                }
                failed = Some(format!("step {n} ({}) failed", step.name()));
                break;
            }
        }
    }
    if failed.is_none() {
        println!("passed: {total} steps in {}", took(began));
    }
    if keep {
        let dir = runner.cluster.keep();
        println!(
            "kept {} (the nodes' configs, data and certificates)",
            dir.display()
        );
    }
    match failed {
        Some(message) => bail!("{message}"),
        None => Ok(()),
    }
}

/// Reads the plugin and its manifest (the `.toml` beside the `.wasm`, if any) as a node
/// would, and returns them with the resource's name.
fn read_plugin(wasm: &Path) -> anyhow::Result<(Plugin, String)> {
    let beside = wasm.with_extension("toml");
    let manifest_path = beside.exists().then_some(beside.as_path());
    let entry = catalog::read_plugin(wasm, manifest_path).map_err(|(path, error)| {
        anyhow::anyhow!(
            "{}: {error} (build the plugin first; the script's `plugin` names it)",
            path.display()
        )
    })?;
    let manifest = &entry.manifest;
    if manifest.tickets != 1 {
        bail!(
            "{}: tickets = {}: `tenure plugin test` moves one slot between two nodes; \
             test with tickets = 1",
            wasm.display(),
            manifest.tickets
        );
    }
    let stem = wasm
        .file_stem()
        .and_then(|s| s.to_str())
        .context("the plugin's file name")?
        .to_string();
    let manifest_bytes = match manifest_path {
        Some(path) => Some(std::fs::read(path)?),
        None => None,
    };
    // The secret files go to the nodes too (their paths are relative to the plugins
    // folder, which is the wasm's dir here); `read_plugin` above has read each.
    let dir = wasm.parent().unwrap_or(Path::new("."));
    let mut secrets = Vec::new();
    for relative in manifest.capabilities.secrets.values() {
        let path = dir.join(relative);
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        secrets.push((relative.clone(), bytes));
    }
    Ok((
        Plugin {
            stem,
            wasm: entry.wasm.to_vec(),
            manifest: manifest_bytes,
            secrets,
        },
        manifest.resource.clone(),
    ))
}

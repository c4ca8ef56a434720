//! `tenure plugin test --watch`: build, test, and again on every change, like `spin
//! watch`.
//!
//! The script's `build` command runs in the script's dir, then the script (read again,
//! so a changed script counts too); then the command waits for a change. A change is a
//! different *content* of a source file in the project, not an event: builds touch files
//! and write their outputs, and neither must start another round. So inotify (the `notify` crate, which
//! the catalog already uses) only wakes the loop, and a digest of every source file
//! decides. Sources are the project's files except `*.wasm`, hidden entries and the
//! output dirs of the usual tools (`target`, `node_modules`, `__pycache__`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, bail};
use notify::{RecursiveMode, Watcher as _};
use sha2::{Digest as _, Sha256};

use super::script;

/// Dirs that hold what tools wrote, not sources.
const OUTPUT_DIRS: [&str; 3] = ["target", "node_modules", "__pycache__"];
/// How long the loop waits for an editor's writes to settle after the first event.
const SETTLE: Duration = Duration::from_millis(300);

/// Runs `round` (build and test) at once and again after every change, until killed.
pub fn watch(
    script_path: &Path,
    mut round: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    // A script that cannot serve is refused at once, not after a first round.
    if script::load(script_path)?.build.is_none() {
        bail!(
            "{}: --watch needs the command that builds the plugin: add e.g. \
             build = \"./build.sh\"",
            script_path.display()
        );
    }
    let dir = script_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .canonicalize()
        .with_context(|| format!("the test script {}", script_path.display()))?;
    let (tx, rx) = mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |event| {
        let _ = tx.send(event);
    })
    .context("cannot watch the project (inotify)")?;
    // The project's top dir, and each of its source dirs with what is below: not the
    // output dirs, whose thousands of files a build rewrites.
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.is_dir() && is_source(&path) {
            watcher.watch(&path, RecursiveMode::Recursive)?;
        }
    }
    loop {
        let built = build(script_path);
        if let Err(e) = built.and_then(|()| round()) {
            println!("{}", crate::cli::describe_error(&e));
        }
        let before = sources(&dir);
        println!("watching {} for changes (Ctrl-C to stop)", dir.display());
        loop {
            rx.recv().context("the project watch ended")?.ok();
            while rx.recv_timeout(SETTLE).is_ok() {}
            if sources(&dir) != before {
                break;
            }
        }
        println!("\nchanged: building and testing again");
    }
}

/// Runs the script's `build` command in its dir.
fn build(script_path: &Path) -> anyhow::Result<()> {
    let script = script::load(script_path)?;
    let Some(command) = &script.build else {
        bail!(
            "{}: the script has no `build` any more",
            script_path.display()
        );
    };
    println!("building: {command}");
    let status = Command::new("sh")
        .args(["-c", command])
        .current_dir(&script.dir)
        .status()
        .with_context(|| format!("cannot run `{command}`"))?;
    if !status.success() {
        bail!("the build `{command}` failed ({status}); waiting for a change");
    }
    Ok(())
}

fn is_source(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !(name.starts_with('.') || OUTPUT_DIRS.contains(&name) || name.ends_with(".wasm"))
}

/// The digest of every source file under `dir`.
fn sources(dir: &Path) -> BTreeMap<PathBuf, [u8; 32]> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if !is_source(&path) {
                continue;
            }
            match entry.file_type() {
                Ok(t) if t.is_dir() => dirs.push(path),
                Ok(t) if t.is_file() => {
                    if let Ok(bytes) = std::fs::read(&path) {
                        found.insert(path, Sha256::digest(&bytes).into());
                    }
                }
                _ => {}
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_changed_source_counts() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("target/release")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "a").unwrap();
        std::fs::write(root.join("tenure.js"), "sdk").unwrap();
        let before = sources(root);
        assert_eq!(before.len(), 2);
        // Outputs, hidden files, and a file rewritten with the same content.
        std::fs::write(root.join("target/release/x.wasm"), "out").unwrap();
        std::fs::write(root.join("my-task.wasm"), "out").unwrap();
        std::fs::write(root.join(".swp"), "x").unwrap();
        std::fs::write(root.join("tenure.js"), "sdk").unwrap();
        assert_eq!(sources(root), before);
        std::fs::write(root.join("src/lib.rs"), "b").unwrap();
        assert_ne!(sources(root), before);
    }
}

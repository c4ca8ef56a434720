//! The previous release's `tenure` binary, built from its source for the rolling-upgrade
//! test (issue 25: "CI builds the previous release from its tag").
//!
//! `tests/fixtures/previous-release` names the release: its tag and the commit the tag
//! points at. The commit, not the tag, is what is built, so a clone that did not fetch
//! tags still has it (it is in main's history). Its tree is exported with `git archive`
//! (the checkout itself is not touched) into a target dir of its own beside this build's
//! (`<target>-<tag>`), kept between runs: the first run on a machine builds the release
//! (about as long as a clean build of this tree), later runs find it built. The source is
//! exported once per commit, so that cargo's fingerprints (file times) stay valid.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

/// The previous release: its tag, and the commit the tag points at.
pub struct Release {
    pub tag: String,
    pub commit: String,
}

/// What `tests/fixtures/previous-release` names.
pub fn named() -> Release {
    let workspace = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let file = workspace.join("tests/fixtures/previous-release");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .unwrap_or_else(|| panic!("{} names no release", file.display()));
    let mut words = line.split_whitespace();
    match (words.next(), words.next()) {
        (Some(tag), Some(commit)) => Release {
            tag: tag.to_string(),
            commit: commit.to_string(),
        },
        _ => panic!("{}: a line is `TAG COMMIT`: {line:?}", file.display()),
    }
}

/// The previous release's binary, built on first use.
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let release = named();
        let workspace = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        let ours = super::target_dir();
        let target = ours.with_file_name(format!(
            "{}-{}",
            ours.file_name().unwrap().to_string_lossy(),
            release.tag
        ));
        let source = target.join(format!("source-{}", release.commit));
        if !source.join("Cargo.lock").is_file() {
            export(workspace, &release.commit, &source);
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        eprintln!(
            "[harness] building release {} ({}) into {}",
            release.tag,
            release.commit,
            target.display()
        );
        let started = Instant::now();
        let mut build = Command::new(&cargo);
        // The outer `cargo test` gives this process `CARGO_*` variables that name this
        // checkout (CARGO_MANIFEST_DIR, CARGO_PKG_*, …); left in, a clone at another path
        // would not find the release built by the last one. Only CARGO_HOME is kept.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if name.starts_with("CARGO") && name != "CARGO_HOME" {
                build.env_remove(name.as_ref());
            }
        }
        let output = build
            .args(["build", "--release", "--locked", "-p", "tenure"])
            .current_dir(&source)
            .env("CARGO_TARGET_DIR", &target)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cargo}: {e}"));
        assert!(
            output.status.success(),
            "building release {} failed ({}):\n{}",
            release.tag,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!(
            "[harness] release {} built in {:?}",
            release.tag,
            started.elapsed()
        );
        let binary = target.join("release/tenure");
        assert!(binary.is_file(), "cargo built no {}", binary.display());
        binary
    })
}

/// Exports the tree of `commit` into `into` (made afresh).
fn export(workspace: &Path, commit: &str, into: &Path) {
    let _ = std::fs::remove_dir_all(into);
    std::fs::create_dir_all(into).unwrap();
    let archive = into.with_extension("tar");
    let status = Command::new("git")
        .args(["archive", "--format=tar", "-o"])
        .arg(&archive)
        .arg(commit)
        .current_dir(workspace)
        .status()
        .unwrap_or_else(|e| panic!("cannot run git: {e}"));
    assert!(
        status.success(),
        "git archive {commit} failed: the previous release's commit is not in this clone's history"
    );
    let status = Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(into)
        .status()
        .unwrap();
    assert!(status.success(), "unpacking {}", archive.display());
    std::fs::remove_file(&archive).unwrap();
}

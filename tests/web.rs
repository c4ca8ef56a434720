//! The page at `/` of the metrics listener, in a real headless Chromium: three real nodes
//! with metrics listeners run a one-ticket resource; the page served by a node that does
//! not own it shows the owner; after `kill -9` of the owner, it shows the new owner (the
//! one the event log names). Screenshots of both states are written under the build's
//! temp dir and their paths printed.
//!
//! Chromium is driven from the command line (`--dump-dom` and `--screenshot`, with a
//! virtual-time budget so that the page's first fetch of `/status` has been drawn): each
//! look is a fresh browser, so the test polls by loading the page again. Chromium must be
//! installed (the Debian package `chromium`; `.ci/run` installs it): without it the test
//! fails, it does not skip.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

/// How long Chromium lets the page run (virtual time) before it dumps or shoots it:
/// enough for the first `/status` and its drawing, and a refresh or two.
const VIRTUAL_TIME_MS: u32 = 2500;

/// The browser: `TENURE_CHROMIUM`, else the first of the usual names on the `PATH`.
fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("TENURE_CHROMIUM") {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "Chromium was not found on the PATH (chromium, chromium-browser or google-chrome): \
         this test needs a real headless browser. Install the Debian package \
         (`apt-get install chromium`; .ci/run does) or set TENURE_CHROMIUM to its path."
    );
}

/// Runs headless Chromium on `url` with `args` (`--dump-dom` or `--screenshot=…`), in a
/// fresh profile; returns its stdout.
fn browse(url: &str, args: &[String]) -> String {
    let profile = tempfile::Builder::new()
        .prefix("tenure-chromium-")
        .tempdir()
        .unwrap();
    let mut command = Command::new(chromium());
    command
        .args([
            "--headless",
            // The test runs as root in CI, where Chromium's sandbox cannot start.
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--window-size=1280,900",
        ])
        .arg(format!("--virtual-time-budget={VIRTUAL_TIME_MS}"))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url);
    let output = run_bounded(command, "chromium");
    assert!(
        output.status.success(),
        "chromium failed on {url}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A slot's row in the page's DOM: (state, owner, token) from its data attributes.
fn slot_row(dom: &str, resource: &str, slot: u32) -> Option<(String, String, String)> {
    let key = format!("data-resource=\"{resource}\" data-slot=\"{slot}\" ");
    let start = dom.find(&key)?;
    let tag = &dom[start..start + dom[start..].find('>')?];
    let attribute = |name: &str| -> Option<String> {
        let from = tag.find(&format!("{name}=\""))? + name.len() + 2;
        Some(tag[from..from + tag[from..].find('"')?].to_string())
    };
    Some((
        attribute("data-state")?,
        attribute("data-owner")?,
        attribute("data-token")?,
    ))
}

/// Loads the page until `accept` holds for the row of `solo`'s slot 0; returns the row
/// and the DOM. Panics after `timeout`, with the last DOM.
fn wait_page(
    url: &str,
    what: &str,
    timeout: Duration,
    accept: impl Fn(&(String, String, String)) -> bool,
) -> (String, String, String) {
    let started = Instant::now();
    loop {
        let dom = browse(url, &["--dump-dom".to_string()]);
        if let Some(row) = slot_row(&dom, "solo", 0)
            && accept(&row)
        {
            eprintln!(
                "[web] the page shows {what}: {row:?} after {:?}",
                started.elapsed()
            );
            return row;
        }
        assert!(
            started.elapsed() < timeout,
            "the page did not show {what} within {timeout:?}; its last DOM:\n{dom}"
        );
    }
}

/// Writes a screenshot of `url` to `path`, checks it is a PNG and prints where it is.
fn screenshot(url: &str, path: &Path) {
    let _ = std::fs::remove_file(path);
    browse(url, &[format!("--screenshot={}", path.display())]);
    let png = std::fs::read(path).unwrap_or_else(|e| panic!("no screenshot at {path:?}: {e}"));
    assert!(png.starts_with(b"\x89PNG"), "{path:?} is not a PNG");
    eprintln!("[web] screenshot: {} ({} bytes)", path.display(), png.len());
}

#[test]
fn the_page_shows_the_new_owner_after_the_owner_is_killed() {
    let browser = chromium();
    eprintln!("[web] browser: {}", browser.display());
    let mut c = Cluster::builder(3).ttl(Duration::from_secs(2)).build();
    for i in 0..3 {
        c.node_mut(i)
            .set_env("TENURE_METRICS_LISTEN", "127.0.0.1:0");
    }
    c.install_plugin_everywhere(
        "solo",
        &manifest("solo", 1, "1.0.0"),
        &plugins().heartbeat_bytes(),
    );
    eprintln!("phase: three nodes with metrics listeners form a cluster");
    c.start();
    let owner = c.wait_owners("solo", 1, |_| true).remove(0);

    // The page is read from a node that survives the kill.
    let viewer = (0..3).find(|&i| c.name(i) != owner.node).unwrap();
    let listening = c.wait_event(
        viewer,
        "the metrics listener",
        0,
        is("metrics.listening").f(),
    );
    let url = format!("http://{}/", str_field(&listening, "addr"));
    eprintln!(
        "phase: {} owns solo (token {}); the page at {url} (on {})",
        owner.node,
        owner.token,
        c.name(viewer)
    );
    let shown = wait_page(&url, "the owner", WAIT, |(state, node, token)| {
        state == "owned" && *node == owner.node && *token == owner.token.to_string()
    });
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    screenshot(&url, &shots.join("web-before-kill.png"));

    eprintln!(
        "phase: kill -9 {}; the page should show the successor",
        owner.node
    );
    c.kill(c.index(&owner.node));
    let successor = c
        .wait_owners("solo", 1, |o| o[0].node != owner.node)
        .remove(0);
    let (_, node, token) = wait_page(&url, "the new owner", WAIT + c.ttl(), |(state, node, _)| {
        state == "owned" && *node != owner.node
    });
    assert_eq!(
        node, successor.node,
        "the page shows the owner the event log names"
    );
    assert_eq!(token, successor.token.to_string());
    assert!(
        successor.token > owner.token,
        "{shown:?} then {successor:?}"
    );
    screenshot(&url, &shots.join("web-after-kill.png"));

    c.stop_all();
    assert_safe(&c.merged(), "solo", 1);
}

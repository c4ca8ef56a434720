//! A node whose Raft store fails (a full disk) is no zombie owner (issue 24): it stops
//! renewing, stops its plugins by its deadline and exits non-zero with the cause, and its
//! slots move. Needs root (a small tmpfs holds the node's data dir); skips otherwise.

mod support;

use std::process::Command;
use std::time::Duration;

use support::*;

/// A tmpfs of `size` mounted on `dir`, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &std::path::Path, size: &str) -> Option<Tmpfs> {
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .ok()?;
        status.success().then(|| Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_node_whose_store_fills_up_stops_its_plugins_and_exits_and_its_slots_move() {
    let mut cluster = Cluster::builder(3).ttl(Duration::from_secs(2)).build();
    let Some(_tmpfs) = Tmpfs::mount(&cluster.node(0).data_dir(), "24m") else {
        eprintln!("skipped: cannot mount a tmpfs (needs root)");
        return;
    };
    // Compiled plugins live outside the small file system.
    let cache = tempfile::tempdir().unwrap();
    std::fs::create_dir(cache.path().join("cache")).unwrap();
    for i in 0..3 {
        cluster
            .node(i)
            .share_compile_cache(&cache.path().join("cache"));
    }
    cluster.install_plugin_everywhere(
        "counter",
        &manifest("counter", 1, "1.0.0"),
        &plugins().counter_bytes(),
    );
    cluster.start();
    cluster.wait("n1 runs the counter", WAIT, |c| {
        if c.owner_names("counter").contains("n1") {
            return Some(());
        }
        let _ = c.admin(&["move", "counter", "--to", "n1"]);
        None
    });

    // The disk fills up: every later write of n1's store fails.
    let fill = cluster.node(0).data_dir().join("fill");
    let mut file = std::fs::File::create(&fill).unwrap();
    for size in [1 << 20, 1 << 12, 1] {
        let chunk = vec![0u8; size];
        while std::io::Write::write_all(&mut file, &chunk).is_ok() {}
    }
    drop(file);
    eprintln!("[test] n1's data dir is full");
    // Big saves make every store grow at once (redb reuses its freed pages, so small
    // entries alone may take minutes to need a new one).
    cluster.install_plugin_everywhere(
        "save-big",
        &format!("[limits]\n{FAST_LIMITS}"),
        &plugins().misbehave_bytes(),
    );

    let (status, stderr) = cluster.wait_refused(0);
    assert!(!status.success(), "n1 exited cleanly with a failed store");
    assert!(
        stderr.contains("Raft has stopped"),
        "the cause is not in n1's stderr: {stderr}"
    );
    eprintln!("[test] n1 said: {stderr}");
    let failed = cluster.events_of(0);
    assert!(failed.iter().any(|e| is("node.failed").matches(e)));
    cluster.wait("the counter runs on another node", WAIT, |c| {
        c.owner_names("counter")
            .iter()
            .any(|n| n != "n1")
            .then_some(())
    });
    assert_safe(&cluster.merged(), "counter", 1);
}

#[test]
fn a_data_dir_on_a_nearly_full_disk_is_refused_at_start_with_the_free_space() {
    let mut node = Node::new("full");
    let Some(_tmpfs) = Tmpfs::mount(&node.data_dir(), "8m") else {
        eprintln!("skipped: cannot mount a tmpfs (needs root)");
        return;
    };
    node.spawn();
    let status = node.wait_exit(WAIT);
    assert!(!status.success(), "the node started with 8 MiB free");
    let stderr = node.stderr();
    assert!(
        stderr.contains("has 8 MiB free, less than the 16 MiB"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(node.data_dir()).unwrap().collect();
    assert!(left.is_empty(), "the refused node wrote {left:?}");
}

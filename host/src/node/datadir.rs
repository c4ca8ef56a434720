//! The data dir made owner-only, and a warning for configured key files others can read.
//!
//! A new data dir is made 0700 (and everything the node writes there 0600: see
//! [`crate::private_files`]). An existing data dir that gives group or others access (made by
//! an older build under the umask, or by hand) is narrowed to 0700 when it is evidently
//! the node's own: owned by this user, not sticky, and either empty or holding the node's
//! lock file or Raft store. Everything in it is a secret or code the node runs, and an
//! open dir is what older builds left behind, so fixing it quietly (with one log line) is
//! what an operator wants. Any other dir is left as is, with a warning: a data dir pointed
//! at a shared place by mistake (`/tmp`, `/var/lib`, a home dir) must not be chmod-ed under
//! the other programs that use it.
//!
//! Configured key files (`[tls] key`) belong to the operator: the node warns about a key
//! group or others can reach, naming the fix, and starts anyway (a refusal would take a
//! cluster down over a mode a config tool may set on purpose, e.g. a group for a sidecar).

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::events;
use crate::private_files::{self, GROUP_OR_OTHER};

/// Makes `data_dir` (0700) or narrows an existing one that is the node's own; see the
/// module documentation. Call only once the node is sure to start.
pub(super) fn prepare(data_dir: &Path) -> io::Result<()> {
    let meta = match fs::metadata(data_dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return private_files::create_dir(data_dir);
        }
        Err(e) => return Err(e),
    };
    let mode = meta.permissions().mode() & 0o7777;
    if !meta.is_dir() || mode & GROUP_OR_OTHER == 0 {
        return Ok(());
    }
    let why_not = if meta.uid() != current_uid() {
        Some("it belongs to another user")
    } else if mode & 0o1000 != 0 {
        Some("it is a shared (sticky) directory")
    } else if !looks_like_a_node_s(data_dir)? {
        Some("it holds files that are not a node's")
    } else {
        None
    };
    let path = data_dir.display();
    let shown = format!("{mode:04o}");
    match why_not {
        None => {
            private_files::tighten(data_dir, private_files::DIR_MODE)?;
            tracing::warn!(
                event = events::DATA_DIR_MODE,
                path = %path,
                mode = %shown,
                action = "tightened",
                "the data dir {path} had mode {shown} (group or others had access); narrowed it to 0700",
            );
        }
        Some(why) => tracing::warn!(
            event = events::DATA_DIR_MODE,
            path = %path,
            mode = %shown,
            action = "left",
            why,
            "the data dir {path} has mode {shown}: group or others can reach the node's keys and compile cache; left as is because {why}; give the node a dir of its own, or run `chmod 700 {path}`",
        ),
    }
    Ok(())
}

/// Warns (once, at start) if the private key file at `path` gives group or others access.
pub(super) fn warn_if_key_readable(path: &Path) {
    let Ok(meta) = fs::metadata(path) else {
        // A missing key is refused by the preflight checks, with a better message.
        return;
    };
    let mode = meta.permissions().mode() & 0o7777;
    if mode & GROUP_OR_OTHER != 0 {
        let (path, shown) = (path.display(), format!("{mode:04o}"));
        tracing::warn!(
            event = events::KEY_FILE_MODE,
            path = %path,
            mode = %shown,
            "the private key file {path} has mode {shown}: group or others can read it; run `chmod 600 {path}`",
        );
    }
}

/// Whether `dir` is empty or holds a node's lock file or Raft store.
fn looks_like_a_node_s(dir: &Path) -> io::Result<bool> {
    let mut entries = fs::read_dir(dir)?.peekable();
    if entries.peek().is_none() {
        return Ok(true);
    }
    Ok(entries.flatten().any(|e| {
        let name = e.file_name();
        name == "lock" || name == "raft.redb"
    }))
}

fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

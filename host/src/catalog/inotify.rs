//! Being told that the plugins folder changed, through inotify (the `notify` crate).
//!
//! This only wakes the folder watch ([`super::watch`]); it never says *what* changed.
//! The watch then looks at the folder as it always does and applies the "read once
//! stable" rule, so a missed, merged or overflowed event costs at most a look, never a
//! wrong answer: every event, and every error the watcher reports (a queue overflow
//! among them), is one wake-up, and wake-ups coalesce into one stored permit, so a flood
//! of events holds no memory and, with the watch's floor between looks, no CPU.
//!
//! The watch is on the folder itself, not recursive. It follows the folder by identity
//! (device and inode): when the path names another folder (removed and created again,
//! or renamed over), [`FolderEvents::follow`] moves the watch to it; while the folder is
//! missing there is no watch, and the watch's slow poll is what notices it come back.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use notify::event::{AccessKind, EventKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};
use tokio::sync::Notify;

/// An inotify instance watching (at most) the plugins folder.
pub(super) struct FolderEvents {
    watcher: RecommendedWatcher,
    wake: Arc<Notify>,
    /// The folder being watched: its path and its (device, inode).
    watched: Option<(PathBuf, (u64, u64))>,
    /// Whether a failure to watch an existing folder was logged (once, not at every look).
    warned: bool,
}

impl FolderEvents {
    /// A new inotify instance. Fails where inotify cannot be had (no kernel support, or
    /// the per-user limit of instances is reached); the caller then polls.
    pub(super) fn new() -> notify::Result<FolderEvents> {
        let wake = Arc::new(Notify::new());
        let waker = wake.clone();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            // Opening a file changes nothing, and the watch's own reads open files:
            // waking for them would make every read cost one more look.
            if let Ok(event) = &event
                && matches!(event.kind, EventKind::Access(AccessKind::Open(_)))
            {
                return;
            }
            waker.notify_one();
        })?;
        Ok(FolderEvents {
            watcher,
            wake,
            watched: None,
            warned: false,
        })
    }

    /// Makes sure the watch is on the folder that `dir` names now. Called before each
    /// look, so a change made after the look wakes the next one.
    pub(super) fn follow(&mut self, dir: &Path) {
        let Ok(meta) = std::fs::metadata(dir) else {
            // Missing or unreadable: the look reports it; nothing to watch.
            self.unwatch();
            return;
        };
        let identity = (meta.dev(), meta.ino());
        if self
            .watched
            .as_ref()
            .is_some_and(|(path, id)| path == dir && *id == identity)
        {
            return;
        }
        self.unwatch();
        match self.watcher.watch(dir, RecursiveMode::NonRecursive) {
            Ok(()) => {
                self.watched = Some((dir.to_path_buf(), identity));
                self.warned = false;
            }
            Err(error) if !self.warned => {
                self.warned = true;
                tracing::warn!(
                    event = crate::events::CATALOG_POLLING,
                    path = %dir.display(),
                    %error,
                    "cannot watch the plugins folder with inotify; polling it instead"
                );
            }
            Err(_) => {}
        }
    }

    /// Resolves at the next change (at once if one came since the last call).
    pub(super) async fn changed(&self) {
        self.wake.notified().await
    }

    fn unwatch(&mut self) {
        if let Some((path, _)) = self.watched.take() {
            // The kernel drops the watch of a deleted folder itself; an error here only
            // says it is already gone.
            let _ = self.watcher.unwatch(&path);
        }
    }
}

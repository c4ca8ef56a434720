//! systemd's service notifications (`sd_notify(3)`), for a node run as a `Type=notify`
//! unit (`deploy/systemd/tenure.service`).
//!
//! systemd passes a Unix datagram socket in `NOTIFY_SOCKET`; the node tells it:
//! - `READY=1` once, the first time the node is ready as `/readyz` means it (Raft runs, a
//!   leader is known, it is a member with a caught-up replica, its plugins folder is
//!   loaded and its lease is valid), which is after `node.ready`. So `systemctl start`
//!   returns when the node can own slots, and units ordered `After=` it start then;
//! - `STOPPING=1` when a shutdown signal arrives, before the slots are handed over;
//! - `WATCHDOG=1` every half of `WATCHDOG_USEC` (the unit's `WatchdogSec=`), from the
//!   node's main loop, which turns at least once a second: a wedged loop stops the pings
//!   and systemd restarts the node. A timer task of its own would go on pinging for a
//!   node whose loop is stuck. So a `WatchdogSec=` below 3 s is too short (the unit
//!   file sets 30 s).
//!
//! Without `NOTIFY_SOCKET` (not under systemd) every call does nothing. The protocol is
//! the `sd-notify` crate's; a failed send is logged once and otherwise ignored: the node
//! runs the same whether or not anyone listens.

use std::time::{Duration, Instant};

use sd_notify::NotifyState;

use crate::events;

/// What this node has told systemd, and when it last pinged the watchdog.
pub struct Notifier {
    ready_sent: bool,
    watchdog: Option<Watchdog>,
    warned: bool,
}

struct Watchdog {
    every: Duration,
    last: Option<Instant>,
}

impl Notifier {
    /// Reads `WATCHDOG_USEC` (and `WATCHDOG_PID`, if set, must be this process).
    pub fn from_env() -> Self {
        let watchdog = sd_notify::watchdog_enabled().map(|timeout| Watchdog {
            every: timeout / 2,
            last: None,
        });
        Self {
            ready_sent: false,
            watchdog,
            warned: false,
        }
    }

    /// Whether `READY=1` was sent.
    pub fn ready_sent(&self) -> bool {
        self.ready_sent
    }

    /// Sends `READY=1` (once).
    pub fn ready(&mut self) {
        if !self.ready_sent {
            self.ready_sent = true;
            self.send(&[NotifyState::Ready, NotifyState::Status("ready")]);
        }
    }

    /// Sends `WATCHDOG=1` if half the watchdog interval has passed since the last one.
    pub fn tick(&mut self) {
        let Some(watchdog) = &mut self.watchdog else {
            return;
        };
        let now = Instant::now();
        if watchdog
            .last
            .is_some_and(|last| now < last + watchdog.every)
        {
            return;
        }
        watchdog.last = Some(now);
        self.send(&[NotifyState::Watchdog]);
    }

    /// Sends `STOPPING=1`: the node is shutting down.
    pub fn stopping(&mut self) {
        self.send(&[
            NotifyState::Stopping,
            NotifyState::Status("stopping: handing the slots over"),
        ]);
    }

    fn send(&mut self, states: &[NotifyState]) {
        if let Err(error) = sd_notify::notify(states)
            && !self.warned
        {
            self.warned = true;
            tracing::warn!(
                event = events::NODE_NOTIFY_FAILED,
                %error,
                "cannot notify systemd (NOTIFY_SOCKET); the node runs on without it"
            );
        }
    }
}

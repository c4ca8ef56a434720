//! The version gate's test: a process acting as the next build
//! (`crate::version::UNSAFE_NEXT_PROTOCOL`) uses that build's command
//! ([`Command::Probe`]) only once the cluster's version allows it.
//!
//! Until a tagged release gives a real older build to upgrade from, this is how the gate
//! is proved on real processes: a cluster of this build, replaced one node at a time by
//! "next" processes, must not see the probe before its last member is replaced, and must
//! see it applied after. The probe is proposed once per process, after the wait.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::shared::Shared;
use crate::cluster::{Command, Response};
use crate::events;
use crate::version::{PROBE_VERSION, UNSAFE_NEXT_PROTOCOL};

/// Whether this process acts as the next build.
pub(super) fn enabled() -> bool {
    std::env::var_os(UNSAFE_NEXT_PROTOCOL).is_some()
}

/// Waits for the cluster's version to reach [`PROBE_VERSION`], then proposes the probe
/// (retried until it is answered); until `stop` is set.
pub(super) async fn probe(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut applied = shared.control.applied();
    let current = shared.read(|c| c.version);
    if current < PROBE_VERSION {
        tracing::info!(
            event = events::VERSION_PROBE,
            phase = "waiting",
            version = current,
            "the probe of tenure/{PROBE_VERSION} waits for the cluster's version to reach {PROBE_VERSION}; it is {current}"
        );
    }
    loop {
        if shared.read(|c| c.version) >= PROBE_VERSION {
            break;
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            changed = applied.changed() => if changed.is_err() { return },
        }
    }
    loop {
        let command = Command::Probe {
            node: shared.me.clone(),
        };
        match shared.control.propose(command).await {
            Ok(Response::Done) => {
                tracing::info!(
                    event = events::VERSION_PROBE,
                    phase = "applied",
                    "the probe of tenure/{PROBE_VERSION} was applied"
                );
                return;
            }
            Ok(answer) => {
                tracing::error!(event = events::VERSION_PROBE, phase = "refused", %answer, "the probe was not applied");
                return;
            }
            Err(error) => {
                tracing::warn!(event = events::CONTROL_ERROR, %error, "cannot propose the probe; retrying");
            }
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

//! What every capability does when the lease or the grant says no: the
//! `plugin.effect_refused` event, and the wait for the moment an instance may no longer
//! act (to abort what is in flight then). And when the network says no: the
//! `plugin.effect_failed` event.

use std::time::{Duration, Instant};

use super::{InstanceContext, Refusal};
use crate::events;

/// Why an effect was refused, as the `reason` field of `plugin.effect_refused` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Why {
    /// Not in the manifest's `allowed_outbound_hosts`.
    NotAllowed,
    /// A socket to a host granted for HTTP only (`http://` or `https://`): the same
    /// refusal, explained, because HTTP over a raw socket would lose the fence.
    HttpOnly,
    /// The lease check said no.
    Lease(Refusal),
    /// The instance already holds as many connections as one may.
    TooManyConnections,
}

impl Why {
    fn as_str(self) -> &'static str {
        match self {
            Why::NotAllowed | Why::HttpOnly => "not-allowed",
            Why::Lease(Refusal::LeaseExpired) => "lease-expired",
            Why::Lease(Refusal::Stopping) => "stopping",
            Why::TooManyConnections => "too-many-connections",
        }
    }

    fn explain(self) -> &'static str {
        match self {
            Why::NotAllowed => "the host is not in the manifest's allowed_outbound_hosts",
            Why::HttpOnly => {
                "the host is granted for HTTP only: send HTTP through wasi:http (fetch, the SDKs' clients, urllib with tenure.install_urllib()), which the host fences with tenure-token; a raw socket needs a tcp:// grant and carries no fencing headers"
            }
            Why::Lease(Refusal::LeaseExpired) => {
                "the node's lease deadline has passed (or, for HTTP, comes before the request's first-byte timeout)"
            }
            Why::Lease(Refusal::Stopping) => "the plugin is being stopped",
            Why::TooManyConnections => "the plugin already holds 256 open connections",
        }
    }
}

impl From<Refusal> for Why {
    fn from(refusal: Refusal) -> Self {
        Why::Lease(refusal)
    }
}

/// Writes `plugin.effect_refused` for an `effect` (`http`, `tcp`) towards `host`, within
/// the instance's log budget (a plugin retrying in a tight loop cannot flood the log).
/// `in_flight`: the effect had started and was cut off, rather than refused up front.
pub(super) fn refused(ctx: &InstanceContext, effect: &str, host: &str, why: Why, in_flight: bool) {
    if ctx.admit_log_line().is_none() {
        return;
    }
    let grant = &ctx.grant;
    let what = match (effect, in_flight) {
        ("http", false) => "an outbound HTTP request was refused",
        ("http", true) => "an outbound HTTP request in flight was aborted",
        (_, false) => "an outbound TCP connection was refused",
        (_, true) => "an outbound TCP connection was shut down",
    };
    tracing::warn!(
        event = events::PLUGIN_EFFECT_REFUSED,
        plugin = %ctx.plugin,
        resource = %grant.resource,
        slot = grant.slot,
        token = grant.token,
        node = %grant.node,
        effect,
        host = %super::output::sanitize(host),
        reason = why.as_str(),
        in_flight,
        "{what}: {}",
        why.explain(),
    );
}

/// Writes `plugin.effect_failed` for an `effect` (`http`, `tcp`) towards `host` that the
/// network or the peer failed (`error`, in words), within the instance's log budget. The
/// plugin sees the error as well; this line is for the operator, who otherwise could not
/// tell which plugin's downstream is down.
pub(super) fn failed(ctx: &InstanceContext, effect: &str, host: &str, error: &str) {
    if ctx.admit_log_line().is_none() {
        return;
    }
    let grant = &ctx.grant;
    let host = super::output::sanitize(host);
    let error = super::output::sanitize(error);
    let what = if effect == "http" {
        "an outbound HTTP request"
    } else {
        "an outbound TCP connection"
    };
    tracing::warn!(
        event = events::PLUGIN_EFFECT_FAILED,
        plugin = %ctx.plugin,
        resource = %grant.resource,
        slot = grant.slot,
        token = grant.token,
        node = %grant.node,
        effect,
        host = %host,
        error = %error,
        "{what} to {host} failed: {error}",
    );
}

/// Resolves once the instance may no longer act: at D (as it stands when the time
/// comes; a renewal moves it), or at the instance's interrupt time.
pub(super) async fn may_no_longer_act(ctx: &InstanceContext) -> Refusal {
    /// How long to sleep when neither D nor an interrupt time bounds the wait.
    const IDLE: Duration = Duration::from_secs(3600);
    loop {
        if let Err(refusal) = ctx.may_act() {
            return refusal;
        }
        let now = Instant::now();
        let own = ctx.signals.trap_at(&ctx.lease, ctx.grant.session);
        let until_own = Duration::from_nanos(own.saturating_sub(super::nanos(now)));
        let until_deadline = ctx.lease.time_left(now).unwrap_or(IDLE);
        let wait = until_own.min(until_deadline).min(IDLE);
        tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
    }
}

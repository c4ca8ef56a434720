//! What this build is, and which formats and protocols it reads, writes and speaks:
//! printed by `tenure --version`, recorded in the stores it writes (`raft/format.rs`), and
//! pinned by the golden-byte tests (`golden/`), which fail when an encoding changes
//! without its version.
//!
//! **Protocol versions and rolling upgrades.** A build speaks a window of node protocol
//! versions, [`WIRE_OLDEST`] to [`WIRE_VERSION`] ([`protocols`]). The handshake offers
//! every ALPN label `tenure/1` up to the build's newest ([`alpn_labels`]); the server
//! picks the highest label both list, so the handshake always completes, and each side
//! then refuses a connection whose version is outside its own window
//! ([`check_negotiated`]), with both versions named: a bare TLS alert would name neither.
//! Builds before 0.2.0 spoke one version each (`tenure/1` to `tenure/5`) and can never
//! run beside a versioned one.
//!
//! The cluster's version ([`crate::cluster::Cluster::version`]) is the newest protocol
//! every member speaks: the leader raises it by a committed entry once every member's
//! connection negotiates it (`node/cluster_version.rs`), and it never decreases. A
//! command, an encoding or an `apply` rule newer than the oldest protocol a build speaks
//! is used only once the cluster's version reaches it; a node that speaks less than the
//! cluster's version is refused at join and at every message, and a data dir whose
//! cluster runs a newer version than this build speaks is refused at start
//! (`raft/format.rs`). docs/operating.md, "Upgrading", gives the policy.

use std::ops::RangeInclusive;
use std::sync::OnceLock;

/// The newest node protocol this build speaks: the `N` of ALPN `tenure/N`.
pub const WIRE_VERSION: u32 = 7;

/// The oldest node protocol this build speaks. 6 is the first with a version window; the
/// builds before it spoke one version each, and cannot run beside this one. 0.2.0 speaks
/// 6, so this build runs beside it.
pub const WIRE_OLDEST: u32 = 6;

/// The version from which proposers stamp their commands ([`crate::cluster::Proposal::Stamped`],
/// applied once however often they are proposed: `cluster/once.rs`). Version 6 builds
/// cannot read a stamped proposal.
pub const STAMPS: u32 = 7;

/// The version from which a plugin may keep one state blob per slot
/// ([`crate::cluster::Command::SaveSlotState`], a manifest's `state = "per-slot"`).
/// Version 6 builds cannot read the command; the same release as [`STAMPS`].
pub const SLOT_STATE: u32 = 7;

/// The version from which Raft's messages name the store of the member they are for
/// ([`crate::cluster::Cluster::stores`], the kinds `raft::kinds::APPEND_ENTRIES_TO`,
/// `VOTE_TO` and `INSTALL_SNAPSHOT_TO`), and a node of another store under that name
/// refuses them. Version 6 builds (0.2.0) know neither the kinds nor the map; the same
/// release as [`STAMPS`].
pub const ADDRESSED: u32 = 7;

/// The version from which a leader's renewal rounds tell its voters when it received the
/// renewals they confirm (`node/renewal_round.rs`, message kind 22), and a new leader
/// starts each session's clock from them (issue 30 item 4). Version 6 builds (0.2.0)
/// know neither the kind nor the tails of the handoff's question and answer; the same
/// release as [`STAMPS`].
pub const RENEWAL_ROUNDS: u32 = 7;

/// The version from which the state records when each member last installed something
/// new for a resource ([`crate::cluster::Cluster::installed`]), and of two adverts of one
/// plugin version that differ, the one installed last runs, not the greater digest
/// (issue 26 item 6). Before it, every leader must choose as 0.2.0 does; the same release
/// as [`STAMPS`].
pub const INSTALL_ORDER: u32 = 7;

/// The version of the operator protocol: the `N` of the request prefix `tenure-operator/N`.
pub const ADMIN_VERSION: u32 = 8;

/// Test-only: this process acts as the next build, which speaks one protocol version
/// more ([`WIRE_VERSION`] + 1) and knows the probe command of that version
/// ([`crate::cluster::Command::Probe`]). It proves the version gate until a tagged
/// release gives a real older build to upgrade from; said at ERROR.
pub const UNSAFE_NEXT_PROTOCOL: &str = "TENURE_UNSAFE_NEXT_PROTOCOL";

/// The protocol version of the probe command: only the next build uses it.
pub const PROBE_VERSION: u32 = WIRE_VERSION + 1;

/// The node protocol versions this process speaks.
pub fn protocols() -> RangeInclusive<u32> {
    static NEWEST: OnceLock<u32> = OnceLock::new();
    let newest = *NEWEST.get_or_init(|| {
        if std::env::var_os(UNSAFE_NEXT_PROTOCOL).is_some() {
            tracing::error!(
                event = crate::events::NODE_UNSAFE,
                "{UNSAFE_NEXT_PROTOCOL} is set: this process acts as a build that speaks tenure/{PROBE_VERSION} (the version gate's test only)"
            );
            PROBE_VERSION
        } else {
            WIRE_VERSION
        }
    });
    WIRE_OLDEST..=newest
}

/// The ALPN labels offered and accepted, newest first: every `tenure/N` up to the newest
/// this process speaks, so that a handshake with any Tenure build completes with the
/// highest version both list, and [`check_negotiated`] can name both.
pub fn alpn_labels() -> Vec<Vec<u8>> {
    (1..=*protocols().end())
        .rev()
        .map(|n| format!("tenure/{n}").into_bytes())
        .collect()
}

/// The version of a negotiated ALPN label, if it is a `tenure/N` one.
pub fn parse_label(label: &[u8]) -> Option<u32> {
    std::str::from_utf8(label)
        .ok()?
        .strip_prefix("tenure/")?
        .parse()
        .ok()
}

/// Whether a connection negotiated at `version` may be used: refused, with both versions
/// named, when it is below the window this process speaks. (A peer whose window starts
/// above it refuses the connection itself.)
pub fn check_negotiated(version: u32) -> Result<(), String> {
    let ours = protocols();
    if ours.contains(&version) {
        return Ok(());
    }
    let speaks = describe_window(&ours);
    if version <= 5 {
        return Err(format!(
            "the peer speaks the node protocol tenure/{version} at most, a build before 0.2.0 (which spoke one version each); this node speaks {speaks}: the two cannot run side by side, so stop every node to upgrade from that version (docs/operating.md, \"Upgrading\")"
        ));
    }
    Err(format!(
        "the peer speaks the node protocol tenure/{version} at most; this node speaks {speaks}: upgrade the peer to a build that speaks tenure/{oldest} or newer (docs/operating.md, \"Upgrading\")",
        oldest = ours.start()
    ))
}

/// "tenure/6" or "tenure/6 to tenure/7".
pub fn describe_window(window: &RangeInclusive<u32>) -> String {
    if window.start() == window.end() {
        format!("tenure/{}", window.start())
    } else {
        format!("tenure/{} to tenure/{}", window.start(), window.end())
    }
}

/// What `tenure --version` prints after the name: the version, then the formats and
/// protocols, a line each.
pub fn long() -> &'static str {
    static LONG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    LONG.get_or_init(describe)
}

fn describe() -> String {
    let store = crate::raft::STORE_FORMAT;
    let oldest = crate::raft::FORMATS[0].0;
    format!(
        "{version}\nstore format {store} (reads formats {oldest} to {store}; writes format {before} until the cluster's version is {STAMPS})\nnode protocol tenure/{WIRE_VERSION} (speaks {window})\noperator protocol tenure-operator/{ADMIN_VERSION}",
        version = env!("CARGO_PKG_VERSION"),
        before = crate::raft::BEFORE_STAMPS,
        window = describe_window(&protocols()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_run_from_the_newest_down_to_the_first() {
        let labels = alpn_labels();
        assert_eq!(labels[0], format!("tenure/{WIRE_VERSION}").into_bytes());
        assert_eq!(labels.last().unwrap(), b"tenure/1");
        assert_eq!(labels.len(), WIRE_VERSION as usize);
        assert_eq!(parse_label(b"tenure/12"), Some(12));
        assert_eq!(parse_label(b"tenure/x"), None);
        assert_eq!(parse_label(b"h3"), None);
    }

    #[test]
    fn a_version_below_the_window_is_refused_naming_both() {
        assert!(check_negotiated(WIRE_VERSION).is_ok());
        let old = check_negotiated(5).unwrap_err();
        assert!(old.contains("tenure/5"), "{old}");
        assert!(old.contains(&format!("tenure/{WIRE_VERSION}")), "{old}");
        assert!(old.contains("stop every node"), "{old}");
    }
}

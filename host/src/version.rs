//! What this build is, and which formats and protocols it reads, writes and speaks:
//! printed by `tenure --version`, recorded in the stores it writes (`raft/format.rs`), and
//! pinned by the golden-byte tests (`golden/`), which fail when an encoding changes
//! without its version.

/// The version of the node-to-node protocol: the `N` of ALPN `tenure/N`.
pub const WIRE_VERSION: u32 = 5;

/// The version of the operator protocol: the `N` of the request prefix `tenure-operator/N`.
pub const ADMIN_VERSION: u32 = 7;

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
        "{version}\nstore format {store} (reads formats {oldest} to {store})\nnode protocol tenure/{WIRE_VERSION}\noperator protocol tenure-operator/{ADMIN_VERSION}",
        version = env!("CARGO_PKG_VERSION"),
    )
}

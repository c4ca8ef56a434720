//! The cluster id: which cluster a replica, and every message a node sends, belongs to.
//!
//! Node names are the operator's handles, and the same names (`n1`, `n2`, `n3`) are
//! used by every cluster an operator runs; the Raft member ids are derived from them
//! (`raft/types.rs`). Two clusters whose nodes trust one CA (staging and production on one
//! company CA, say) therefore look alike to each other: when a machine of one cluster
//! takes over an address a node of the other had (a replaced VM, a reused IP), the
//! other cluster's leader reaches it, and its appends and votes are those of a member it
//! knows. Raft then mixes two histories on one replica.
//!
//! So each cluster has an id, chosen at random by its first leader and committed
//! ([`super::Command::Identify`]) as soon as it leads; a store of an
//! older format, which has none, gets one the same way from its first leader after the
//! upgrade. Every envelope carries its sender's cluster id (`envelope/wire.rs`), and a
//! node refuses one of another cluster, naming both ids (`envelope/gate.rs`). A node
//! that does not know its cluster yet (a new store waiting to form or join) sends none
//! and takes any: it trusts only its bootstrap peers or the leader its join names
//! (`raft/forming.rs`). `tenure recover` and `snapshot restore` make a new cluster out of
//! an old one's state, so they choose a new id: the lost nodes of the old cluster, should
//! one come back, are refused instead of merging their history into the new one.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

/// Defines a 128-bit random id type: 16 bytes in postcard (fixed, no length), 32
/// lowercase hex digits in JSON and in messages.
macro_rules! random_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name([u8; 16]);

        impl $name {
            /// A new random id.
            ///
            /// # Panics
            /// If the system's random number generator fails.
            pub fn random() -> $name {
                let mut bytes = [0; 16];
                SystemRandom::new()
                    .fill(&mut bytes)
                    .expect("the system random number generator works");
                $name(bytes)
            }

            /// The id with these bytes (stores, tests and golden samples).
            pub const fn from_bytes(bytes: [u8; 16]) -> $name {
                $name(bytes)
            }

            /// Its 16 bytes.
            pub const fn bytes(&self) -> [u8; 16] {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&hex::encode(self.0))
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({self})", stringify!($name))
            }
        }

        impl FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<$name, String> {
                let mut bytes = [0; 16];
                hex::decode_to_slice(s, &mut bytes)
                    .map_err(|_| format!("{s:?} is not a {} id (32 hex digits)", $what))?;
                Ok($name(bytes))
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                if serializer.is_human_readable() {
                    serializer.collect_str(self)
                } else {
                    self.0.serialize(serializer)
                }
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<$name, D::Error> {
                if deserializer.is_human_readable() {
                    let text = String::deserialize(deserializer)?;
                    text.parse().map_err(de::Error::custom)
                } else {
                    <[u8; 16]>::deserialize(deserializer).map($name)
                }
            }
        }
    };
}

random_id!(
    /// A cluster's id: 128 random bits, chosen by its first leader.
    ClusterId,
    "cluster"
);

random_id!(
    /// A store's id: 128 random bits, chosen when a node's Raft store is made (or, for a
    /// store of format 3 or older, when it is migrated) and kept in its format record
    /// (`raft/format.rs`). A data dir that is emptied or replaced gets a new one, so two
    /// processes under one name are told apart by it: a restart keeps the store, a second
    /// process on another data dir does not (`sessions.rs`).
    StoreId,
    "store"
);

/// The process behind a member's session: its store and its run (the incarnation, chosen
/// at each start, never below the wall clock in microseconds: `node/mod.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    pub store: StoreId,
    pub incarnation: u64,
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "store {} incarnation {}", self.store, self.incarnation)
    }
}

/// The cluster id of this node's replica, once it has one, shared by the state machine
/// (which sets it when it applies or installs one) and the envelope layer (which stamps
/// and checks it). It is set once per run: a replica's id never changes, and the
/// offline tools that choose a new one (`recover`, `snapshot restore`) run while the
/// node is stopped.
pub type ClusterCell = Arc<OnceLock<ClusterId>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_hex_in_json_and_sixteen_bytes_in_postcard() {
        let id = ClusterId::from_bytes([0xab; 16]);
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            format!("\"{}\"", "ab".repeat(16))
        );
        assert_eq!(postcard::to_allocvec(&id).unwrap(), vec![0xab; 16]);
        let back: ClusterId = serde_json::from_str(&serde_json::to_string(&id).unwrap()).unwrap();
        assert_eq!(back, id);
        assert!(
            "xyz"
                .parse::<ClusterId>()
                .unwrap_err()
                .contains("32 hex digits")
        );
        assert_ne!(ClusterId::random(), ClusterId::random());
    }
}

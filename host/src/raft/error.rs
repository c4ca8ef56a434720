//! The errors of the control plane's boundary: [`ControlError`] for starting, joining and
//! leading, [`ProposeError`] for proposals.
//!
//! A proposal's error says above all whether the command **may have been applied**
//! ([`ProposeError::may_have_applied`]): a caller may resend a command that certainly was
//! not, but must check the state before resending one that may have been (Raft cannot
//! tell a lost answer from a lost request).

use std::path::PathBuf;
use std::time::Duration;

/// Starting the control plane, bootstrapping or joining a cluster, or checking leadership
/// failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ControlError {
    /// The options are inconsistent.
    #[error("invalid control plane options: {0}")]
    Options(String),
    /// The Raft store could not be opened or read.
    #[error("cannot use the Raft store {}: {reason}", path.display())]
    Storage {
        /// The store's file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The Raft store is in a format this build cannot use (newer, or damaged); nothing
    /// on disk was changed.
    #[error(transparent)]
    Format(#[from] super::format::FormatError),
    /// This node has a new Raft store, but the cluster knows it as a member: it ran here
    /// before and lost its data dir, so it must not vote or act as that member again; and
    /// the leader could not remove the old member for it (`replace.rs`): `why`.
    #[error(
        "node {name} has run in this cluster before ({by} know it as a member), but its Raft store {} is new: the log and the votes it gave are gone, and answering as its old self could let the cluster lose committed entries, so it does not start. Its old member could not be removed for it ({why}). To bring this machine back: remove the old member first (`tenure member remove {name}` with an operator certificate, while the other voters run), then start this node with `join = [\"NAME@HOST:PORT\", ...]` (the other members) instead of `peers`; it joins as a new member, is caught up as a learner, and only then votes. If its data dir was not lost but moved, put it back and start again",
        store.display(), by = by.join(", ")
    )]
    Forgot {
        name: String,
        by: Vec<String>,
        store: PathBuf,
        why: String,
    },
    /// The leader refused this node's store for good: the member of its name was removed
    /// with this store (or runs on another): `why`, with what to do.
    #[error("node {name} may not join with this data dir: {why}")]
    Removed { name: String, why: String },
    /// Two initial members were given different `peers`.
    #[error(
        "node {name} was started with peers [{}], and {by} with [{}]: every initial member must be given the same `peers` (the same names), as with etcd's initial cluster. Nothing was formed or changed: give every initial member the same list and start them again",
        mine.join(", "), theirs.join(", ")
    )]
    PeersDiffer {
        name: String,
        mine: Vec<String>,
        by: String,
        theirs: Vec<String>,
    },
    /// A node with `peers` and a new store found the cluster formed without it.
    #[error(
        "the cluster of {by} was formed without node {name}, so {name} cannot form it with them: start {name} with `join = [\"NAME@HOST:PORT\", ...]` (the members) instead of `peers`",
        by = by.join(", ")
    )]
    NotInitial { name: String, by: Vec<String> },
    /// A node with a new store was given nodes of more than one cluster.
    #[error(
        "the nodes node {name} was given (`peers` or `join`) belong to more than one cluster: {}; a node belongs to one cluster: list only its nodes, and nothing was changed",
        clusters.join(", ")
    )]
    TwoClusters { name: String, clusters: Vec<String> },
    /// openraft refused to start.
    #[error("cannot start Raft: {0}")]
    Start(String),
    /// `bootstrap` or `join` was called before `attach`.
    #[error("the control plane has no RPC endpoint yet: call attach first")]
    NotAttached,
    /// `bootstrap` was given a member set that cannot form this cluster.
    #[error("cannot bootstrap: {0}")]
    Bootstrap(String),
    /// No member accepted the join within the bound; the last failures are listed.
    #[error("could not join the cluster within {waited:?}: {}", failures.join("; "))]
    Join {
        /// How long it tried.
        waited: Duration,
        /// The last failure per member asked.
        failures: Vec<String>,
    },
    /// This node is not the leader (or lost leadership while checking it).
    #[error("not the leader: {0}")]
    NotLeader(String),
    /// Raft has stopped (shut down, or a fatal storage error).
    #[error("Raft has stopped: {0}")]
    Stopped(String),
}

impl ControlError {
    /// Whether trying again later, unchanged, may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ControlError::Join { .. } | ControlError::NotLeader(_) => true,
            ControlError::Options(_)
            | ControlError::Storage { .. }
            | ControlError::Format(_)
            | ControlError::Forgot { .. }
            | ControlError::Removed { .. }
            | ControlError::PeersDiffer { .. }
            | ControlError::NotInitial { .. }
            | ControlError::TwoClusters { .. }
            | ControlError::Start(_)
            | ControlError::NotAttached
            | ControlError::Bootstrap(_)
            | ControlError::Stopped(_) => false,
        }
    }
}

/// A proposal failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// The encoded command exceeds the limit (it must fit one Raft message); not applied.
    #[error("the command is {len} bytes encoded; the limit is {max}; it was not applied")]
    TooLarge {
        /// Its encoded size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// No leader took the command within the bound; not applied.
    #[error("no leader took the command within {waited:?} ({last}); it was not applied")]
    NoLeader {
        /// How long it tried.
        waited: Duration,
        /// The last reason.
        last: String,
    },
    /// The leader (or the RPC layer) refused the command before appending it; not applied.
    #[error("the command was refused: {0}; it was not applied")]
    Refused(String),
    /// The command reached a leader but its outcome is unknown: it may be applied.
    #[error("the outcome of the command is unknown (it may have been applied): {0}")]
    Unknown(String),
    /// Raft has stopped on this node.
    #[error("Raft has stopped: {0}")]
    Stopped(String),
    /// The command must be proposed on the leader, and this node is not (or no longer)
    /// the leader; not applied. `leader` is the one it knows of, if any.
    #[error("this node is not the leader (the leader is {}); it was not applied", leader.as_ref().map_or("unknown".into(), |p| p.to_string()))]
    NotLeader { leader: Option<super::types::Peer> },
}

impl ProposeError {
    /// Whether the command may have been applied despite the error.
    pub fn may_have_applied(&self) -> bool {
        matches!(self, ProposeError::Unknown(_))
    }

    /// Whether proposing again later may succeed (after checking the state, if the
    /// command may have been applied).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProposeError::NoLeader { .. }
                | ProposeError::Unknown(_)
                | ProposeError::NotLeader { .. }
        )
    }
}

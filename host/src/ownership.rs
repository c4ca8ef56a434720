//! Ownership as the node sees it: the grants it holds.
//!
//! A [`Grant`] is one slot of one resource, granted to this node with a fencing token.
//! On the single-node default the node grants itself every slot it can hold; the
//! tokens come from the node's durable store, so they keep increasing across restarts.

/// One grant of a slot to a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub resource: String,
    /// The ticket: `0..tickets`.
    pub slot: u32,
    /// The owning node's name.
    pub node: String,
    /// Fencing token: strictly greater for every grant of the slot.
    pub token: u64,
    /// The term in which the grant was made (0 on the single-node default, which has
    /// no elections yet).
    pub term: u64,
}

//! What the transport writes to the event log, and how often.
//!
//! Every line carries an `event` field with a name from `crate::events`. Refusals are
//! logged through a `crate::ratelimit::RateLimiter`: a peer that hammers us with bad
//! handshakes or garbage streams must not be able to turn our log into its amplifier. Refusals are
//! always *counted* (see `stats.rs`); only the lines are limited, and the first line after
//! a quiet spell says how many were suppressed.
//!
//! Reload and expiry lines are not limited: they are rare by construction (once per file
//! version, once per certificate).

/// Refusal lines per second the transport writes at most.
pub(crate) const REJECTION_LINES_PER_SECOND: u32 = 10;

//! The naming rule for nodes and operators.
//!
//! A node's name is also its `DNS:` SAN and the server name a peer dials it by, so it must be
//! a name that rustls accepts as a `ServerName`: one DNS label. The rule is that of RFC 1123
//! labels, narrowed to lower case (so that `N1` and `n1` cannot be two nodes) and with at
//! least one letter (webpki refuses an all-digit name, which could be mistaken for an IPv4
//! address). Operators follow the same rule, so that one rule covers every name in the
//! cluster's replicated state and in its messages.

use super::PkiError;

/// The longest name: the DNS limit for one label.
pub const MAX_NAME_LEN: usize = 63;

/// Checks a node or operator name: 1 to 63 characters of `a-z`, `0-9` and `-`, neither
/// starting nor ending with `-`, with at least one letter.
pub fn validate_name(name: &str) -> Result<(), PkiError> {
    let refuse = |reason| {
        Err(PkiError::BadName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return refuse("a name must not be empty");
    }
    if name.len() > MAX_NAME_LEN {
        return refuse("a name must be at most 63 characters (one DNS label)");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return refuse("a name may only contain lower-case letters a-z, digits 0-9 and '-'");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return refuse("a name must not start or end with '-'");
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        return refuse(
            "a name must contain at least one letter \
             (an all-digit name is not a valid server name)",
        );
    }
    Ok(())
}

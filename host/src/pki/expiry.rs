//! When to start warning that a certificate needs renewing.
//!
//! Certificates expire on wall-clock time, so this compares wall-clock times; it is a pure
//! function of the window and `now` so that the node decides when to log and tests can
//! pick any moment. The rule: warn once less than a third of the certificate's lifetime is
//! left (30 days of a 90-day certificate, the point at which ACME clients renew), or less
//! than [`EXPIRY_WARNING_FLOOR`] whatever the lifetime, so that even a short-lived
//! certificate gets a week's notice when it can.

use std::time::{Duration, SystemTime};

/// Warn at the latest when this little validity remains.
pub const EXPIRY_WARNING_FLOOR: Duration = Duration::from_secs(7 * 24 * 3600);

/// Why a certificate's validity needs attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpiryWarning {
    /// `now` is before the start of the validity (a clock behind, or a certificate from the
    /// future); peers refuse the certificate until then.
    NotYetValid {
        /// How long until it becomes valid.
        starts_in: Duration,
    },
    /// Valid, but less than a third of its lifetime, or less than a week, remains.
    ExpiresSoon {
        /// How long it remains valid.
        remaining: Duration,
    },
    /// Past the end of the validity: peers refuse the certificate.
    Expired {
        /// How long ago it expired.
        since: Duration,
    },
}

/// Whether a certificate valid from `not_before` to `not_after` needs attention at `now`;
/// `None` while it is comfortably valid.
pub fn expiry_warning(
    not_before: SystemTime,
    not_after: SystemTime,
    now: SystemTime,
) -> Option<ExpiryWarning> {
    if let Ok(starts_in) = not_before.duration_since(now)
        && !starts_in.is_zero()
    {
        return Some(ExpiryWarning::NotYetValid { starts_in });
    }
    let remaining = match not_after.duration_since(now) {
        Ok(remaining) => remaining,
        Err(past) => {
            return Some(ExpiryWarning::Expired {
                since: past.duration(),
            });
        }
    };
    let lifetime = not_after.duration_since(not_before).unwrap_or_default();
    if remaining < lifetime / 3 || remaining < EXPIRY_WARNING_FLOOR {
        Some(ExpiryWarning::ExpiresSoon { remaining })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn warns_in_the_last_third_or_last_week() {
        let start = SystemTime::UNIX_EPOCH + 1000 * DAY;
        let end = start + 90 * DAY;
        assert_eq!(expiry_warning(start, end, start + DAY), None);
        assert_eq!(expiry_warning(start, end, start + 59 * DAY), None);
        assert_eq!(
            expiry_warning(start, end, start + 61 * DAY),
            Some(ExpiryWarning::ExpiresSoon {
                remaining: 29 * DAY
            })
        );
        // A ten-day certificate is in its last week after three days, before its last third.
        let short_end = start + 10 * DAY;
        assert_eq!(expiry_warning(start, short_end, start + 2 * DAY), None);
        assert_eq!(
            expiry_warning(start, short_end, start + 4 * DAY),
            Some(ExpiryWarning::ExpiresSoon { remaining: 6 * DAY })
        );
    }

    #[test]
    fn outside_the_window() {
        let start = SystemTime::UNIX_EPOCH + 1000 * DAY;
        let end = start + 90 * DAY;
        assert_eq!(
            expiry_warning(start, end, start - DAY),
            Some(ExpiryWarning::NotYetValid { starts_in: DAY })
        );
        assert_eq!(
            expiry_warning(start, end, end + DAY),
            Some(ExpiryWarning::Expired { since: DAY })
        );
    }
}

//! What goes into a Tenure certificate: the rcgen parameters for the CA and for leaves.
//!
//! Pure functions of the subject, the clock reading and the validity asked for, so the
//! profile can be read in one place:
//!
//! - **CA**: CN "Tenure cluster CA", basicConstraints `cA=TRUE, pathLen=0` (it signs leaves
//!   only, never another CA), key usage keyCertSign + cRLSign.
//! - **Node**: CN and `DNS:` SAN = name, `URI:tenure://node/NAME`, basicConstraints
//!   `cA=FALSE`, key usage digitalSignature, EKU serverAuth + clientAuth.
//! - **Operator**: CN = name, `URI:tenure://operator/NAME`, key usage digitalSignature,
//!   EKU clientAuth (an operator dials nodes but never serves).
//! - **Validity**: from five minutes before now (so a peer whose clock is a little behind
//!   accepts a fresh certificate) to now + the days asked for, at whole seconds. A leaf never
//!   outlives its CA: its end is clamped to the CA's, since a chain is worthless after the
//!   CA expires anyway and a silent clamp beats a rotation that fails near the CA's end.
//! - **Serial**: 127 random bits (positive, under the 20-byte limit of RFC 5280), so two
//!   certificates from one CA never share a serial even if a key were reused.
//! - Leaves carry an authorityKeyIdentifier, so that during a CA rotation, when two CAs have
//!   the same name, tools other than webpki (openssl) can tell which one signed a leaf.

use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyUsagePurpose, SanType, SerialNumber,
};
use ring::rand::{SecureRandom, SystemRandom};
use time::OffsetDateTime;

use super::identity::Identity;
use super::names::validate_name;
use super::{MAX_VALIDITY_DAYS, PkiError, Subject};

/// The common name of every cluster CA.
pub(crate) const CA_COMMON_NAME: &str = "Tenure cluster CA";

/// How far before "now" a new certificate starts, to absorb clock skew between nodes.
pub(crate) const BACKDATE: time::Duration = time::Duration::minutes(5);

/// The parameters of a new self-signed cluster CA.
pub(crate) fn ca_params(
    now: OffsetDateTime,
    validity_days: u32,
) -> Result<CertificateParams, PkiError> {
    let mut params = CertificateParams::default();
    (params.not_before, params.not_after) = window(now, validity_days)?;
    params.serial_number = Some(random_serial()?);
    params.distinguished_name = common_name(CA_COMMON_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

/// The parameters of a new node or operator certificate, ending no later than `ca_not_after`.
pub(crate) fn leaf_params(
    subject: &Subject,
    now: OffsetDateTime,
    validity_days: u32,
    ca_not_after: OffsetDateTime,
) -> Result<CertificateParams, PkiError> {
    let name = subject.name();
    validate_name(name)?;
    let mut params = CertificateParams::default();
    let (not_before, not_after) = window(now, validity_days)?;
    params.not_before = not_before;
    params.not_after = not_after.min(ca_not_after);
    params.serial_number = Some(random_serial()?);
    params.distinguished_name = common_name(name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;

    let uri = SanType::URI(ia5(&Identity::from(subject).uri())?);
    match subject {
        Subject::Node(_) => {
            params.subject_alt_names = vec![uri, SanType::DnsName(ia5(name)?)];
            params.extended_key_usages = vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ];
        }
        Subject::Operator(_) => {
            params.subject_alt_names = vec![uri];
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
    }
    Ok(params)
}

/// `(now − BACKDATE, now + days)`, truncated to whole seconds (what X.509 can encode).
pub(crate) fn window(
    now: OffsetDateTime,
    validity_days: u32,
) -> Result<(OffsetDateTime, OffsetDateTime), PkiError> {
    if validity_days == 0 || validity_days > MAX_VALIDITY_DAYS {
        return Err(PkiError::BadValidity {
            days: validity_days,
        });
    }
    let now = now.replace_nanosecond(0).unwrap_or(now);
    Ok((
        now - BACKDATE,
        now + time::Duration::days(i64::from(validity_days)),
    ))
}

/// A distinguished name holding only a common name.
fn common_name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

/// A SAN string; names have been validated, so this fails only on a bug.
fn ia5(s: &str) -> Result<Ia5String, PkiError> {
    Ia5String::try_from(s).map_err(|source| PkiError::Generate {
        what: format!("the subjectAltName {s:?}"),
        source,
    })
}

/// 16 random bytes with the top bit clear: a positive 127-bit serial number.
fn random_serial() -> Result<SerialNumber, PkiError> {
    let mut bytes = [0u8; 16];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| PkiError::Generate {
            what: "a serial number".into(),
            source: rcgen::Error::RingUnspecified,
        })?;
    bytes[0] &= 0x7f;
    Ok(SerialNumber::from_slice(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_is_backdated_and_whole_seconds() {
        let now = OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_789).unwrap();
        let (from, to) = window(now, 90).unwrap();
        assert_eq!(from.unix_timestamp(), 1_700_000_000 - 300);
        assert_eq!(to.unix_timestamp(), 1_700_000_000 + 90 * 86_400);
        assert_eq!(to.nanosecond(), 0);
    }

    #[test]
    fn validity_bounds() {
        let now = OffsetDateTime::now_utc();
        assert!(matches!(
            window(now, 0),
            Err(PkiError::BadValidity { days: 0 })
        ));
        assert!(window(now, MAX_VALIDITY_DAYS).is_ok());
        assert!(window(now, MAX_VALIDITY_DAYS + 1).is_err());
    }

    #[test]
    fn leaf_never_outlives_its_ca() {
        let now = OffsetDateTime::now_utc();
        let ca_end = now + time::Duration::days(10);
        let params = leaf_params(&Subject::Node("n1".into()), now, 90, ca_end).unwrap();
        assert_eq!(params.not_after, ca_end);
    }
}

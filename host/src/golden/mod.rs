//! Golden bytes: every encoding Tenure stores or sends, compared with bytes checked into
//! `host/golden/`, so that a change of format cannot slip in unnoticed.
//!
//! postcard, which encodes everything here, is positional and carries no version: a field
//! added to a struct, an enum variant inserted before another, a type swapped for one
//! that encodes differently, each silently changes what stored and sent bytes mean. A
//! build that reads another's bytes (a node after an upgrade reading its own store, two
//! nodes of different builds talking) then fails to decode them or, worse, decodes them
//! to something else. These tests make every such change visible:
//!
//! - each sample value is encoded and compared with its file (`DOMAIN/NAME.hex`), and the
//!   file's bytes are decoded and encoded again, so old bytes must still read;
//! - each domain's files together have a digest, and `host/golden/FORMATS` records the
//!   digest of each version of the domain: the files of the current version must match
//!   its line. A changed encoding is therefore a new version ([`crate::raft::STORE_FORMAT`]
//!   with a migration in `raft/format.rs`; [`crate::version::WIRE_VERSION`] with the ALPN and the version
//!   window; [`crate::version::ADMIN_VERSION`] with the operator prefix), recorded in the same commit.
//!
//! To record an intended change: raise the domain's version, run the golden tests with
//! `TENURE_GOLDEN=write` (it rewrites the files and appends the new version's line to
//! `FORMATS`; it never rewrites an existing line), and review the diff. The domains:
//!
//! | domain | what | version |
//! |---|---|---|
//! | `store` | what `raft.redb` holds: log entries of every command kind, the vote, log ids, snapshots | [`crate::raft::STORE_FORMAT`] |
//! | `wire` | what nodes send each other: the sealed envelope, every message kind's request and answer (Raft's entries are the store's) | [`crate::version::WIRE_VERSION`] |
//! | `admin` | what operators and nodes say: every admin request and answer | [`crate::version::ADMIN_VERSION`] |

pub(crate) mod samples;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::version::{ADMIN_VERSION, WIRE_VERSION};

/// One sample: its file name, and its bytes with a check that they decode.
pub(crate) struct Sample {
    name: String,
    bytes: Vec<u8>,
    /// Decodes golden bytes and encodes them again.
    again: fn(&[u8]) -> Result<Vec<u8>, String>,
}

impl Sample {
    /// A sample of a postcard-encoded value of type `T`.
    pub(crate) fn of<T: Serialize + DeserializeOwned>(
        name: impl Into<String>,
        value: &T,
    ) -> Sample {
        Sample {
            name: name.into(),
            bytes: postcard::to_allocvec(value).expect("a sample encodes"),
            again: |bytes| {
                let value: T = postcard::from_bytes(bytes).map_err(|e| e.to_string())?;
                postcard::to_allocvec(&value).map_err(|e| e.to_string())
            },
        }
    }

    /// A sample whose bytes are made otherwise (a sealed envelope): `again` re-reads them.
    pub(crate) fn raw(
        name: impl Into<String>,
        bytes: Vec<u8>,
        again: fn(&[u8]) -> Result<Vec<u8>, String>,
    ) -> Sample {
        Sample {
            name: name.into(),
            bytes,
            again,
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

fn writing() -> bool {
    std::env::var("TENURE_GOLDEN").is_ok_and(|v| v == "write")
}

/// The text of a golden file: 32 bytes of hex a line.
fn to_hex(bytes: &[u8]) -> String {
    let mut out = String::new();
    for line in bytes.chunks(32) {
        out.push_str(&hex::encode(line));
        out.push('\n');
    }
    if bytes.is_empty() {
        out.push('\n');
    }
    out
}

fn from_hex(text: &str) -> Vec<u8> {
    let joined: String = text.split_whitespace().collect();
    hex::decode(joined).expect("a golden file holds hex")
}

/// Checks (or, with `TENURE_GOLDEN=write`, writes) the samples of `domain` at `version`.
fn check(domain: &str, version: u32, samples: Vec<Sample>) {
    let dir = root().join(domain);
    let mut failures = Vec::new();
    let mut names = BTreeMap::new();
    for sample in &samples {
        assert!(
            names.insert(sample.name.clone(), ()).is_none(),
            "two samples are named {domain}/{}",
            sample.name
        );
        let path = dir.join(format!("{}.hex", sample.name));
        if writing() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, to_hex(&sample.bytes)).unwrap();
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            failures.push(format!("{}: no golden file", path.display()));
            continue;
        };
        let golden = from_hex(&text);
        if golden != sample.bytes {
            failures.push(format!(
                "{domain}/{}: the encoding changed\n  golden: {}\n  now:    {}",
                sample.name,
                hex::encode(&golden),
                hex::encode(&sample.bytes)
            ));
        }
        match (sample.again)(&golden) {
            Ok(again) if again == golden => {}
            Ok(again) => failures.push(format!(
                "{domain}/{}: the golden bytes decode, but encode again as {}",
                sample.name,
                hex::encode(again)
            )),
            Err(e) => failures.push(format!(
                "{domain}/{}: the golden bytes no longer decode: {e}",
                sample.name
            )),
        }
    }
    // A file no sample writes is a type that is no longer checked.
    for entry in std::fs::read_dir(&dir).into_iter().flatten() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".hex")
            && !names.contains_key(stem)
        {
            if writing() {
                std::fs::remove_file(dir.join(&name)).unwrap();
            } else {
                failures.push(format!("{domain}/{name}: no sample writes it any more"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} golden-byte failures (an encoding changed: if on purpose, see the doc of crate::golden):\n{}",
        failures.len(),
        failures.join("\n")
    );
    check_version(domain, version, &samples);
}

/// The domain's digest must be the one `FORMATS` records for `version`.
fn check_version(domain: &str, version: u32, samples: &[Sample]) {
    let mut sorted: Vec<&Sample> = samples.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut hasher = Sha256::new();
    for sample in sorted {
        hasher.update(sample.name.as_bytes());
        hasher.update([0]);
        hasher.update((sample.bytes.len() as u64).to_le_bytes());
        hasher.update(&sample.bytes);
    }
    let digest = format!("sha256:{}", hex::encode(hasher.finalize()));
    let formats = root().join("FORMATS");
    let text = std::fs::read_to_string(&formats).unwrap_or_default();
    let mut recorded = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            fields.len(),
            3,
            "a FORMATS line is `DOMAIN VERSION DIGEST`: {line:?}"
        );
        if fields[0] == domain {
            let v: u32 = fields[1].parse().expect("a version number");
            assert!(
                recorded.insert(v, fields[2].to_owned()).is_none(),
                "FORMATS records {domain} {v} twice"
            );
        }
    }
    match recorded.get(&version) {
        Some(d) if *d == digest => {}
        Some(d) => panic!(
            "the {domain} encodings changed, but {domain} version {version} is recorded with other bytes ({d}, now {digest}): a version's bytes never change; raise the version, add its migration, and run with TENURE_GOLDEN=write (see crate::golden)"
        ),
        None if writing() => {
            let mut text = text;
            let _ = writeln!(text, "{domain} {version} {digest}");
            std::fs::write(&formats, text).unwrap();
        }
        None => panic!(
            "{} records no {domain} version {version}: run the golden tests with TENURE_GOLDEN=write and review the diff",
            formats.display()
        ),
    }
}

#[test]
fn the_store_s_encodings_are_those_of_its_format() {
    check(
        "store",
        crate::raft::STORE_FORMAT,
        crate::raft::golden_store_samples(),
    );
}

#[test]
fn the_wire_s_encodings_are_those_of_its_version() {
    let mut samples = samples::wire();
    samples.extend(crate::raft::golden_wire_samples());
    check("wire", WIRE_VERSION, samples);
}

#[test]
fn the_admin_api_s_encodings_are_those_of_its_version() {
    check("admin", ADMIN_VERSION, samples::admin());
}

#[test]
fn the_versions_match_the_protocol_names() {
    assert_eq!(
        crate::version::alpn_labels()[0],
        format!("tenure/{WIRE_VERSION}").into_bytes()
    );
    assert_eq!(
        crate::rpc::OPERATOR_PREFIX,
        format!("\0tenure-operator/{ADMIN_VERSION}\0").as_bytes()
    );
}

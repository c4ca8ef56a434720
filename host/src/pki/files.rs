//! Reading PEM files and writing certificate files atomically.
//!
//! A running node watches its certificate and key files and reloads them (docs/design.md §5), so
//! a reader must never see a half-written file. Every file is therefore written to a
//! temporary file in the destination's directory (same file system, so rename is atomic),
//! flushed to disk, and renamed over the destination; the directory is then fsynced so the
//! rename itself survives a crash. Writing happens in two steps, [`stage`] and
//! [`Staged::commit`], so that a caller replacing two files (a key and its certificate) can
//! prepare both before it exposes either, which keeps the window in which a reader sees a
//! mismatched pair as short as two renames.
//!
//! New files that must not replace an existing one are committed with a hard link rather
//! than a rename: `link` fails if the destination exists, so even a concurrent writer cannot
//! make us clobber a CA key.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt, fchown};
use std::path::{Path, PathBuf};

use ring::rand::{SecureRandom, SystemRandom};
use rustls_pki_types::pem::{PemObject, SectionKind};

use super::{IfExists, PkiError};

/// Mode of private key files: readable by their owner only.
pub(crate) const KEY_MODE: u32 = 0o600;
/// Mode of certificate files: public information.
pub(crate) const CERT_MODE: u32 = 0o644;
/// Mode of directories this module creates: they hold private keys.
const DIR_MODE: u32 = 0o700;

/// Reads a whole file, naming it in the error.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, PkiError> {
    fs::read(path).map_err(|source| PkiError::Io {
        op: "reading",
        path: path.to_owned(),
        source,
    })
}

/// The PEM sections that rustls-pki-types knows (certificates, keys, …) in `bytes`, read
/// from `path`, in file order. Sections with other labels (`EC PARAMETERS`, comments) are
/// skipped.
pub(crate) fn pem_sections(
    path: &Path,
    bytes: &[u8],
) -> Result<Vec<(SectionKind, Vec<u8>)>, PkiError> {
    <(SectionKind, Vec<u8>)>::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PkiError::Pem {
            path: path.to_owned(),
            reason: format!("not a valid PEM file ({e})"),
        })
}

/// The labels of the PEM sections in `bytes` (`PRIVATE KEY`, `ENCRYPTED PRIVATE KEY`, …),
/// including those rustls-pki-types skips, so that messages can say what a file holds.
pub(crate) fn pem_labels(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|line| {
            line.trim()
                .strip_prefix("-----BEGIN ")
                .and_then(|rest| rest.strip_suffix("-----"))
                .map(str::to_owned)
        })
        .collect()
}

/// Creates `dir` (mode 0700) and its parents if it does not exist yet.
pub(crate) fn ensure_dir(dir: &Path) -> Result<(), PkiError> {
    if dir.is_dir() {
        return Ok(());
    }
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|source| PkiError::Io {
            op: "creating directory",
            path: dir.to_owned(),
            source,
        })
}

/// Fails with [`PkiError::Exists`] if `path` exists (or is a dangling symlink).
pub(crate) fn refuse_existing(path: &Path) -> Result<(), PkiError> {
    match fs::symlink_metadata(path) {
        Ok(_) => Err(PkiError::Exists {
            path: path.to_owned(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(PkiError::Io {
            op: "checking",
            path: path.to_owned(),
            source,
        }),
    }
}

/// A file written and flushed under a temporary name next to its destination, not yet
/// visible there. Dropping it without committing removes the temporary file.
#[derive(Debug)]
pub(crate) struct Staged {
    temp: PathBuf,
    dest: PathBuf,
    committed: bool,
}

/// Writes `contents` to a temporary file beside `dest` with `mode`, flushed to disk.
///
/// If `dest` already exists, the temporary file takes its owner and group, so that an
/// operator who rotates a node's certificate as root leaves files the node can still read.
pub(crate) fn stage(dest: &Path, contents: &[u8], mode: u32) -> Result<Staged, PkiError> {
    let dir = parent(dest);
    let file_name = dest
        .file_name()
        .ok_or_else(|| PkiError::Io {
            op: "writing",
            path: dest.to_owned(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "not a file path"),
        })?
        .to_string_lossy()
        .into_owned();
    let temp = dir.join(format!(".{file_name}.tmp-{}", random_suffix()));
    let io_err = |op: &'static str| {
        let temp = temp.clone();
        move |source| PkiError::Io {
            op,
            path: temp,
            source,
        }
    };

    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&temp)
        .map_err(io_err("creating"))?;
    // From here on, dropping `staged` removes the temporary file on every error path.
    let staged = Staged {
        temp: temp.clone(),
        dest: dest.to_owned(),
        committed: false,
    };
    // The umask may have narrowed `mode`; set it exactly.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(io_err("setting permissions of"))?;
    copy_owner(dest, &file).map_err(io_err("setting the owner of"))?;
    file.write_all(contents).map_err(io_err("writing"))?;
    file.sync_all().map_err(io_err("flushing"))?;
    Ok(staged)
}

impl Staged {
    /// Moves the file into place, replacing an existing file only if `if_exists` says so.
    pub(crate) fn commit_as(self, if_exists: IfExists) -> Result<(), PkiError> {
        match if_exists {
            IfExists::Overwrite => self.commit(),
            IfExists::Refuse => self.commit_new(),
        }
    }

    /// Moves the file into place, replacing whatever was there.
    pub(crate) fn commit(mut self) -> Result<(), PkiError> {
        fs::rename(&self.temp, &self.dest).map_err(|source| PkiError::Io {
            op: "renaming into place",
            path: self.dest.clone(),
            source,
        })?;
        self.committed = true;
        sync_dir(parent(&self.dest))
    }

    /// Moves the file into place only if nothing is there yet.
    pub(crate) fn commit_new(self) -> Result<(), PkiError> {
        fs::hard_link(&self.temp, &self.dest).map_err(|source| {
            if source.kind() == io::ErrorKind::AlreadyExists {
                PkiError::Exists {
                    path: self.dest.clone(),
                }
            } else {
                PkiError::Io {
                    op: "linking into place",
                    path: self.dest.clone(),
                    source,
                }
            }
        })?;
        // The destination now holds the data; dropping `self` removes the temporary name.
        sync_dir(parent(&self.dest))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.temp);
        }
    }
}

/// The directory of `path`, `.` for a bare file name.
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Makes a rename in `dir` durable.
fn sync_dir(dir: &Path) -> Result<(), PkiError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| PkiError::Io {
            op: "flushing directory",
            path: dir.to_owned(),
            source,
        })
}

/// Gives `file` the owner and group of `dest`, if `dest` exists and they differ.
fn copy_owner(dest: &Path, file: &File) -> io::Result<()> {
    let Ok(existing) = fs::metadata(dest) else {
        return Ok(());
    };
    let ours = file.metadata()?;
    if (existing.uid(), existing.gid()) == (ours.uid(), ours.gid()) {
        return Ok(());
    }
    fchown(file, Some(existing.uid()), Some(existing.gid()))
}

/// Sixteen random hex digits, so concurrent writers never share a temporary name.
fn random_suffix() -> String {
    let mut bytes = [0u8; 8];
    // The system RNG does not fail on Linux after boot; the pid keeps names apart if it did.
    let _ = SystemRandom::new().fill(&mut bytes);
    format!("{}-{}", std::process::id(), hex::encode(bytes))
}

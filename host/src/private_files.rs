//! Files and folders only the node's own user may read or write: the data dir is 0700 and
//! everything the node creates in it is 0600 (dirs 0700), whatever the process umask.
//!
//! The data dir holds the node's secrets (the development CA and keys, the transport's
//! reset key, the compile cache's key) and the code it runs (the compile cache, which is
//! native code): another local user must be able to neither read nor plant anything there.
//! Modes are given when a file is created (`O_CREAT` with the mode), never set afterwards,
//! so there is no window in which a file is readable by others. Files are replaced by
//! writing a temporary file beside them and renaming it, so readers never see half a file.
//!
//! This module does not decide what to do with an existing dir whose modes are looser
//! (the node does: see `node::datadir`), and it does not touch files outside the data dir
//! (the configured TLS files are the operator's; the node only warns about them).

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use ring::rand::{SecureRandom, SystemRandom};

/// Mode of every directory the node creates in its data dir, and of the data dir itself.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file the node creates in its data dir.
pub const FILE_MODE: u32 = 0o600;
/// The permission bits that give group or others any access.
pub const GROUP_OR_OTHER: u32 = 0o077;

/// Creates `dir` and any missing parents with mode 0700. An existing dir is left as is.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Open options that create a file with mode 0600 (an existing file keeps its mode).
pub fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE);
    options
}

/// If `path` gives group or others any access, narrows it to `mode` and returns the old
/// permission bits; `None` if it was already owner-only.
pub fn tighten(path: &Path, mode: u32) -> io::Result<Option<u32>> {
    let old = fs::metadata(path)?.permissions().mode() & 0o7777;
    if old & GROUP_OR_OTHER == 0 {
        return Ok(None);
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    Ok(Some(old))
}

/// Writes `contents` to `path` atomically and durably: a 0600 temporary file beside it,
/// flushed, renamed over `path`, then the directory flushed.
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let temp = temp_beside(path)?;
    let result = (|| {
        let mut file = options().write(true).create_new(true).open(&temp)?;
        file.write_all(contents)?;
        file.sync_all()?;
        fs::rename(&temp, path)?;
        sync_parent(path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// A 32-byte secret kept in `path` (0600), made from the system random source the first
/// time. It is never replaced once made: a concurrent maker's key wins and is read back.
pub fn secret(path: &Path) -> Result<[u8; 32], String> {
    let read = |bytes: Vec<u8>| -> Result<[u8; 32], String> {
        bytes.as_slice().try_into().map_err(|_| {
            format!(
                "expected 32 bytes, found {}; delete the file to make a new key",
                bytes.len()
            )
        })
    };
    match fs::read(path) {
        Ok(bytes) => return read(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.to_string()),
    }
    let mut key = [0u8; 32];
    SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| "the system random source failed".to_owned())?;
    let temp = temp_beside(path).map_err(|e| e.to_string())?;
    let made = (|| {
        let mut file = options().write(true).create_new(true).open(&temp)?;
        file.write_all(&key)?;
        file.sync_all()?;
        // A link, not a rename: it fails if another process made the key meanwhile.
        fs::hard_link(&temp, path)?;
        sync_parent(path)
    })();
    let _ = fs::remove_file(&temp);
    match made {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            read(fs::read(path).map_err(|e| e.to_string())?)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// A fresh temporary name in `path`'s directory (same file system, so a rename is atomic).
fn temp_beside(path: &Path) -> io::Result<std::path::PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file path"))?
        .to_string_lossy();
    let mut suffix = [0u8; 8];
    // The pid keeps names apart even if the random source failed.
    let _ = SystemRandom::new().fill(&mut suffix);
    Ok(path.with_file_name(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        hex::encode(suffix)
    )))
}

/// Removes the temporary files that process `pid` made beside `path` with
/// [`write_atomic`]: what a writer killed before its rename leaves behind.
pub fn remove_temps_of(path: &Path, pid: u32) {
    let Some(name) = path.file_name() else { return };
    let prefix = format!(".{}.tmp-{pid}-", name.to_string_lossy());
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Removes the temporary files in `dir` whose writing process no longer runs (a writer
/// killed before its rename). Files of live processes are left alone: several nodes may
/// share a directory.
pub fn remove_dead_temps(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((_, after)) = name.split_once(".tmp-") else {
            continue;
        };
        let Some(pid) = after.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if name.starts_with('.') && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Makes a rename or link in `path`'s directory durable.
fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => File::open(dir)?.sync_all(),
        _ => File::open(".")?.sync_all(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn created_files_and_dirs_are_private_files_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("a/b");
        create_dir(&sub).unwrap();
        write_atomic(&sub.join("f"), b"x").unwrap();
        let key = secret(&sub.join("k")).unwrap();
        assert_eq!(secret(&sub.join("k")).unwrap(), key, "the key is made once");
        assert_eq!(mode(&dir.path().join("a")), DIR_MODE);
        assert_eq!(mode(&sub), DIR_MODE);
        assert_eq!(mode(&sub.join("f")), FILE_MODE);
        assert_eq!(mode(&sub.join("k")), FILE_MODE);
        let names: Vec<_> = fs::read_dir(&sub).unwrap().flatten().collect();
        assert_eq!(names.len(), 2, "no temporary file is left behind");
    }

    #[test]
    fn tighten_narrows_only_what_others_can_reach() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        fs::write(&file, b"x").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(tighten(&file, FILE_MODE).unwrap(), Some(0o640));
        assert_eq!(mode(&file), FILE_MODE);
        assert_eq!(tighten(&file, FILE_MODE).unwrap(), None);
    }
}

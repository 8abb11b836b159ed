//! flock(2) on files under the data dir, and how one is unlinked without breaking the lock.
//!
//! A file is unlinked only by a process that opened it itself and took its lock without
//! waiting. flock locks belong to the open file description, which every process that inherited
//! the descriptor shares, so holding the lock on a description of one's own proves that no one
//! else does.
//!
//! Temp files of atomic writes follow this protocol: the writer locks its temp file from its
//! creation to its rename, so a temp file no one holds is one whose writer is gone, whatever
//! pid namespace the process looking at it runs in.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Takes the lock without waiting: false when another open file description holds it.
pub(crate) fn try_lock(file: &File) -> io::Result<bool> {
    // Not nix's `Flock`: it unlocks (LOCK_UN) on drop, which would also release the lock that
    // processes inherited with the descriptor; closing the fd drops only this reference.
    let rc = unsafe { nix::libc::flock(file.as_raw_fd(), nix::libc::LOCK_EX | nix::libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() == Some(nix::libc::EWOULDBLOCK) {
        true => Ok(false),
        false => Err(err),
    }
}

/// Whether `path` still names the file open as `file` (not unlinked, not replaced since).
pub(crate) fn still_named(path: &Path, file: &File) -> io::Result<bool> {
    let held = file.metadata()?;
    match fs::symlink_metadata(path) {
        Ok(named) => Ok(named.dev() == held.dev() && named.ino() == held.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Unlinks the file at `path` when no one holds its lock, by the protocol of the module doc.
/// Whether it is gone (absent already counts).
pub(crate) fn remove_if_free(path: &Path) -> io::Result<bool> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(e),
    };
    if !try_lock(&file)? {
        return Ok(false);
    }
    if still_named(path, &file)? {
        match fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn a_file_locked_elsewhere_is_not_removed() {
        let tmp = TempDir::new("lock-file-held");
        let path = tmp.path().join("a");
        fs::write(&path, b"").unwrap();
        let held = File::open(&path).unwrap();
        assert!(try_lock(&held).unwrap());
        assert!(!remove_if_free(&path).unwrap());
        assert!(path.exists(), "a held file stays");
        // An inherited descriptor (a duplicate here) shares the lock: its holder is not us.
        let inherited = held.try_clone().unwrap();
        drop(held);
        assert!(!remove_if_free(&path).unwrap());
        drop(inherited);
        assert!(remove_if_free(&path).unwrap());
        assert!(!path.exists(), "a free file goes");
        assert!(remove_if_free(&path).unwrap(), "absent counts as gone");
    }

    #[test]
    fn a_file_unlinked_or_replaced_is_no_longer_named() {
        let tmp = TempDir::new("lock-file-unlinked");
        let path = tmp.path().join("a");
        let before = File::create(&path).unwrap();
        assert!(still_named(&path, &before).unwrap());
        assert!(remove_if_free(&path).unwrap());
        assert!(!still_named(&path, &before).unwrap());
        fs::write(&path, b"").unwrap();
        assert!(
            !still_named(&path, &before).unwrap(),
            "replaced is not ours"
        );
    }

    #[test]
    fn files_are_never_opened_through_a_symlink() {
        let tmp = TempDir::new("lock-file-symlink");
        let target = tmp.path().join("target");
        fs::write(&target, b"keep").unwrap();
        let path = tmp.path().join("a");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(remove_if_free(&path).is_err());
        assert_eq!(fs::read(&target).unwrap(), b"keep");
    }
}

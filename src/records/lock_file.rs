//! flock(2) files under the data dir, and how one is unlinked without breaking the lock.
//!
//! A lock file unlinked while another process has it open would let two processes hold "the"
//! lock at once: the one that opened it before the unlink locks a file no one else can open any
//! more, while a newcomer creates and locks a new one. So, as every program that removes its
//! lock files must:
//! - a locker, once its flock succeeded, checks that the path still names the file it locked
//!   (its descriptor's device and inode against the path's), and opens the path anew otherwise;
//! - a file is unlinked only by a process that opened it itself and took its lock without
//!   waiting. flock locks belong to the open file description, which every process that
//!   inherited the descriptor shares (an IPAM plugin orphaned by a killed ADD, and anything it
//!   started), so holding the lock on a description of one's own proves that no one else does.
//!
//! Temp files of atomic writes follow the same protocol: the writer locks its temp file from
//! its creation to its rename, so a temp file no one holds is one whose writer is gone, whatever
//! pid namespace the process looking at it runs in.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

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

/// The lock file at `path` (created 0600 if missing, never through a symlink), locked: polled
/// until `timeout` rather than waited for, so that a stuck holder turns into "try again later"
/// for the runtime, never into a hung pod start. None when it stayed busy.
pub(crate) fn acquire(path: &Path, timeout: Duration) -> io::Result<Option<File>> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)?;
        loop {
            if try_lock(&file)? {
                break;
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        if still_named(path, &file)? {
            return Ok(Some(file));
        }
        // Unlinked by the process that held it before us: ours is a lock no one else can see.
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
    fn a_lock_held_elsewhere_is_neither_taken_nor_removed() {
        let tmp = TempDir::new("lock-file-held");
        let path = tmp.path().join("a.lock");
        let held = acquire(&path, Duration::from_millis(10)).unwrap().unwrap();
        assert!(acquire(&path, Duration::from_millis(30)).unwrap().is_none());
        assert!(!remove_if_free(&path).unwrap());
        assert!(path.exists(), "a held lock file stays");
        drop(held);
        assert!(remove_if_free(&path).unwrap());
        assert!(!path.exists(), "a free lock file goes");
        assert!(remove_if_free(&path).unwrap(), "absent counts as gone");
    }

    #[test]
    fn a_shared_description_counts_as_held() {
        // An inherited descriptor (a duplicate here) shares the lock: its holder is not us.
        let tmp = TempDir::new("lock-file-shared");
        let path = tmp.path().join("a.lock");
        let ours = acquire(&path, Duration::from_millis(10)).unwrap().unwrap();
        let inherited = ours.try_clone().unwrap();
        drop(ours);
        assert!(!remove_if_free(&path).unwrap());
        assert!(acquire(&path, Duration::from_millis(30)).unwrap().is_none());
        drop(inherited);
        assert!(acquire(&path, Duration::from_millis(10)).unwrap().is_some());
    }

    #[test]
    fn a_locker_of_an_unlinked_file_opens_the_path_anew() {
        let tmp = TempDir::new("lock-file-unlinked");
        let path = tmp.path().join("a.lock");
        // Opened before the unlink, as a locker racing the remover would have it.
        let stale = File::create(&path).unwrap();
        assert!(still_named(&path, &stale).unwrap());
        assert!(remove_if_free(&path).unwrap());
        assert!(!still_named(&path, &stale).unwrap());
        fs::write(&path, b"").unwrap();
        assert!(!still_named(&path, &stale).unwrap(), "replaced is not ours");

        let lock = acquire(&path, Duration::from_millis(10)).unwrap().unwrap();
        assert!(still_named(&path, &lock).unwrap());
        assert!(
            try_lock(&stale).unwrap(),
            "the unlinked file's lock is no one's"
        );
    }

    #[test]
    fn lock_files_are_never_opened_through_a_symlink() {
        let tmp = TempDir::new("lock-file-symlink");
        let target = tmp.path().join("target");
        fs::write(&target, b"keep").unwrap();
        let path = tmp.path().join("a.lock");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(acquire(&path, Duration::from_millis(10)).is_err());
        assert!(remove_if_free(&path).is_err());
        assert_eq!(fs::read(&target).unwrap(), b"keep");
    }
}

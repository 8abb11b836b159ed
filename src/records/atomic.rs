//! Writing a record file so that a crash at any instant leaves the old file or the new one:
//! [`write_atomic`] (temp file, fsync, rename, fsync the directory), the temp files a killed
//! writer leaves and how they are told from a live writer's, and the bounded file names every
//! file under the data dir gets.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::records::lock_file;

/// Writes `path` atomically: a temp file in the same dir (never through a symlink), fsync,
/// rename over the target, fsync the directory. A crash leaves the old file or the new one, and
/// at most a temp file, which the next operation on the same file removes.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = create_locked_temp(&tmp, mode)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// How often a temp file is created anew when a sweeper removed it before it was locked.
const TEMP_ATTEMPTS: u32 = 3;

/// Creates `tmp` and locks it until the writer is done, so that no sweeper takes it for one
/// left by a killed writer (see `lock_file`); one that opened it before the lock removes it, and
/// it is created anew.
fn create_locked_temp(tmp: &Path, mode: u32) -> io::Result<File> {
    for _ in 0..TEMP_ATTEMPTS {
        // A temp file left by a killed run with a recycled pid is ours to replace.
        match fs::remove_file(tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(tmp)?;
        if lock_file::try_lock(&f)? && lock_file::still_named(tmp, &f)? {
            return Ok(f);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::WouldBlock,
        format!("temp file {} kept being removed", tmp.display()),
    ))
}

/// The longest file name written under the data dir: NAME_MAX (255) less what a temp file of
/// [`write_atomic`] adds (`.`, `.tmp-`, a pid of up to 7 digits).
pub const MAX_FILE_NAME: usize = 240;

/// `stem` + `suffix` when it fits in [`MAX_FILE_NAME`], else a prefix of `stem` and a hash of
/// all of it. The CNI spec puts no length limit on container IDs, and runtimes send 64-char
/// ones; a long one would fail every open(2) with ENAMETOOLONG and so every DEL forever.
/// Names that fit are the ones every earlier version wrote, so their records are still found;
/// the full ID is inside the record.
pub fn bounded_file_name(stem: &str, suffix: &str) -> String {
    if stem.len() + suffix.len() <= MAX_FILE_NAME {
        return format!("{stem}{suffix}");
    }
    let hash = stable_hash(stem.bytes());
    let keep = MAX_FILE_NAME - suffix.len() - 17;
    let mut cut = keep;
    while !stem.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}~{hash:016x}{suffix}", &stem[..cut])
}

/// FNV-1a (64 bits) of `bytes`, for names that must be the same for every future binary
/// (std's hasher promises no stable output): bounded file names here, Soft-RoCE device names.
pub fn stable_hash(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The file a temp file of [`write_atomic`] (`.<name>.tmp-<pid>`) is written for, or `None`
/// when `name` is not one.
pub fn temp_target(name: &str) -> Option<&str> {
    name.strip_prefix('.')
        .and_then(|n| n.rsplit_once(".tmp-"))
        .filter(|(_, pid)| pid.parse::<u32>().is_ok())
        .map(|(target, _)| target)
}

/// Temp files of `path` left by writers that are gone (a plugin killed mid-write).
pub fn remove_stale_temps(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            remove_stale_temp(&entry.path());
        }
    }
}

/// Removes `path` if it is a temp file of [`write_atomic`] whose writer is gone: no one holds
/// its lock (see `lock_file`). Its lock, not the pid in its name, tells: a pid means nothing in
/// another pid namespace (`reconcile` in the installer's container) and names another process
/// after a reboot.
pub fn remove_stale_temp(path: &Path) {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    if temp_target(&name).is_none() {
        return;
    }
    if let Err(e) = lock_file::remove_if_free(path) {
        crate::log_warn!("removing temp file {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn a_temp_file_is_locked_while_it_is_written() {
        let tmp = TempDir::new("state-temp-lock");
        let path = tmp.path().join("file");
        let mut f = create_locked_temp(&tmp.path().join(".file.tmp-1"), 0o600).unwrap();
        assert!(!lock_file::remove_if_free(&tmp.path().join(".file.tmp-1")).unwrap());
        f.write_all(b"x").unwrap();
        drop(f);
        assert!(lock_file::remove_if_free(&tmp.path().join(".file.tmp-1")).unwrap());
        write_atomic(&path, b"done", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"done");
        assert_eq!(
            fs::read_dir(tmp.path()).unwrap().count(),
            1,
            "no temp file left"
        );
    }
}

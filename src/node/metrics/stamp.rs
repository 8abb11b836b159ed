//! What the data dirs hold, entry by entry, as `fstatat` sees it: each dir's entries and the
//! entries of the directories in it (a network's records). The store replaces a record by
//! rename (a new inode) or appends to it (a new size), and both change its ctime; adding or
//! removing one changes the list. So while the stamp is the same, the records read last are
//! the records, and a scrape need not read and parse them again.

use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;

use nix::sys::stat::{fstatat, FileStat};

use crate::kernel::sysfs::{for_each_entry, open_dir};

/// An entry: its depth (0 in a data dir, 1 in a directory there), name and the fields of its
/// stat that a change to it moves.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    depth: u8,
    name: String,
    stat: [i64; 8],
}

fn fields(s: &FileStat) -> [i64; 8] {
    [
        s.st_dev as i64,
        s.st_ino as i64,
        i64::from(s.st_mode),
        s.st_size,
        s.st_mtime,
        s.st_mtime_nsec,
        s.st_ctime,
        s.st_ctime_nsec,
    ]
}

#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Stamp(Vec<Entry>);

impl Stamp {
    /// The stamp of `dirs`; None when one of them or an entry could not be read (nothing can
    /// be trusted to stay then).
    pub(super) fn take(dirs: &[PathBuf]) -> Option<Stamp> {
        let mut entries = Vec::new();
        walk(dirs, &mut |depth, name, stat| {
            entries.push(Entry {
                depth,
                name: name.to_string(),
                stat,
            });
            true
        })
        .ok()?;
        Some(Stamp(entries))
    }

    /// Whether `dirs` hold what they held when this stamp was taken; nothing is allocated.
    pub(super) fn holds(&self, dirs: &[PathBuf]) -> bool {
        let mut next = self.0.iter();
        let same = walk(dirs, &mut |depth, name, stat| {
            next.next()
                .is_some_and(|e| e.depth == depth && e.name == name && e.stat == stat)
        });
        same.is_ok_and(|s| s) && next.next().is_none()
    }
}

/// Calls `f` with each entry of each dir and of the directories in it, in order, until it
/// says false; Ok(false) then. An absent dir is an entry of its own (depth 0, no name).
fn walk(dirs: &[PathBuf], f: &mut dyn FnMut(u8, &str, [i64; 8]) -> bool) -> io::Result<bool> {
    for dir in dirs {
        let d = match open_dir(dir) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !f(0, "", [0; 8]) {
                    return Ok(false);
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        if !walk_dir(&d, 0, f)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The entries of `dir` at `depth`, each directory's own after it when `depth` is 0.
fn walk_dir(
    dir: &fs::File,
    depth: u8,
    f: &mut dyn FnMut(u8, &str, [i64; 8]) -> bool,
) -> io::Result<bool> {
    use nix::fcntl::{openat, AtFlags, OFlag};
    let mut result = Ok(true);
    for_each_entry(dir, |name, cname| {
        if !matches!(result, Ok(true)) {
            return;
        }
        result = (|| {
            let stat = fstatat(dir.as_fd(), cname, AtFlags::AT_SYMLINK_NOFOLLOW)?;
            if !f(depth, name, fields(&stat)) {
                return Ok(false);
            }
            if depth > 0 || stat.st_mode & nix::libc::S_IFMT != nix::libc::S_IFDIR {
                return Ok(true);
            }
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
            let sub = openat(dir.as_fd(), cname, flags, nix::sys::stat::Mode::empty())?;
            walk_dir(&fs::File::from(sub), 1, f)
        })();
    })?;
    result
}

//! How the topology readers read sysfs files: what counts as an absent value, how symlinks are
//! followed, and one read(2) per attribute where a reader is on a hot path. Errors name the
//! file.

use std::fmt;
use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

use crate::kernel::sysfs::{self, SysRoot};

/// EINVAL: what read(2) of `gid_attrs/{types,ndevs}/N` returns for an empty GID entry, and of
/// `ndevs/N` for a GID without a netdev (every GID of an IB port). K:drivers/infiniband/core/
/// sysfs.c `_show_port_gid_attr` keeps -EINVAL "for user space compatibility reasons".
pub(super) const EINVAL: i32 = nix::libc::EINVAL;

/// Refuses names that would leave their sysfs directory.
pub(super) fn plain_name(name: &str) -> io::Result<&str> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a device name"),
        ));
    }
    Ok(name)
}

/// `ports/<port>` of an ib device, relative to the sysfs root.
pub(super) fn port_dir(ibdev: &str, port: u32) -> PathBuf {
    Path::new("class/infiniband")
        .join(ibdev)
        .join("ports")
        .join(port.to_string())
}

pub(super) fn invalid(path: &Path, msg: impl fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {msg}", path.display()),
    )
}

pub(super) fn parse_field<T: FromStr<Err = String>>(path: &Path, text: &str) -> io::Result<T> {
    text.parse().map_err(|m: String| invalid(path, m))
}

pub(super) fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// A missing attribute and one whose read(2) fails with EINVAL both mean "no value": empty GID
/// entries and IB ports' ndevs answer EINVAL, and fixtures stand for those by leaving the file
/// out.
pub(super) fn absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(EINVAL)
}

pub(super) fn read_opt(sys: &SysRoot, rel: &Path) -> io::Result<Option<String>> {
    match sys.read_attr(rel) {
        Ok(v) => Ok(Some(v)),
        Err(e) if absent(&e) => Ok(None),
        Err(e) => Err(with_path(e, &sys.path(rel))),
    }
}

pub(super) fn read_opt_abs(path: &Path) -> io::Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(v) => Ok(Some(v.trim_end_matches('\n').to_string())),
        Err(e) if absent(&e) => Ok(None),
        Err(e) => Err(with_path(e, path)),
    }
}

/// Follows a (relative) sysfs symlink to the real directory; None when it does not exist.
/// The kernel writes these links relative (`device -> ../../../0000:3b:00.0`), so they are
/// resolved by the OS, never joined by hand.
pub(super) fn resolve(path: &Path) -> io::Result<Option<PathBuf>> {
    match fs::canonicalize(path) {
        Ok(p) => Ok(Some(p)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(with_path(e, path)),
    }
}

/// The last component of a symlink's target (`physfn -> ../0000:3b:00.0` → `0000:3b:00.0`).
pub(super) fn link_name(path: &Path) -> io::Result<Option<String>> {
    match fs::read_link(path) {
        Ok(t) => Ok(t.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        // Not a symlink: not the link we look for.
        Err(e) if e.raw_os_error() == Some(EINVAL) => Ok(None),
        Err(e) => Err(with_path(e, path)),
    }
}

/// Entry names of a directory, sorted; an absent directory gives none.
pub(super) fn list_abs(dir: &Path) -> io::Result<Vec<String>> {
    sysfs::list_names(dir).map_err(|e| with_path(e, dir))
}

pub(super) fn numeric_entries_abs(dir: &Path) -> io::Result<Vec<u32>> {
    let mut out: Vec<u32> = list_abs(dir)?
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// Numbered entries of a directory (ports, GID indexes) in numeric order.
pub(super) fn numeric_entries(sys: &SysRoot, rel: &Path) -> io::Result<Vec<u32>> {
    numeric_entries_abs(&sys.path(rel))
}

/// Opens a directory for the `*_at` reads below.
pub(super) fn open_dir(path: &Path) -> io::Result<fs::File> {
    let fd = nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    Ok(fs::File::from(fd))
}

/// Opens `name` relative to `dir` and reads it with one read(2) into `buf`, returning the
/// file (for a caller whose buffer filled) and the length read. sysfs hands out an attribute
/// whole on the first read(2) (the `show` output is produced at once), so a read that does
/// not fill the buffer has it all; the read to EOF that read_to_string adds would be one more
/// syscall per attribute. Opening relative to the directory spares the walk of the class
/// symlink and every component of the full path for each attribute.
pub(super) fn read_once_at<P: ?Sized + nix::NixPath>(
    dir: &fs::File,
    name: &P,
    buf: &mut [u8],
) -> io::Result<(fs::File, usize)> {
    use std::io::Read;
    let fd = openat(
        dir.as_fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mut f = fs::File::from(fd);
    loop {
        match f.read(buf) {
            Ok(n) => return Ok((f, n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

//! sysfs access through one root.
//!
//! Every sysfs path the plugin reads goes through [`SysRoot`], so tests can point the whole
//! plugin at a fixture tree (env `RDMA_NS_SYSFS_ROOT`, the directory that stands for `/sys`,
//! read by debug builds only).
//! The host's /sys is tagged with the host's netns (it was mounted there): it answers questions
//! about host devices and PCI topology, never about what is inside a pod.

use std::ffi::CStr;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Environment variable naming the directory that stands in for `/sys` (debug builds only).
pub const SYSFS_ROOT_ENV: &str = "RDMA_NS_SYSFS_ROOT";

#[derive(Debug, Clone)]
pub struct SysRoot {
    root: PathBuf,
}

impl Default for SysRoot {
    fn default() -> Self {
        SysRoot {
            root: PathBuf::from("/sys"),
        }
    }
}

impl SysRoot {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SysRoot { root: root.into() }
    }

    /// `/sys`; in debug builds the directory named by `RDMA_NS_SYSFS_ROOT` when set and
    /// non-empty. A release build never reads the variable: whoever sets a shipped plugin's
    /// environment must not be able to make device selection read a tree of their own.
    pub fn from_env() -> Self {
        #[cfg(debug_assertions)]
        if let Some(v) = std::env::var_os(SYSFS_ROOT_ENV).filter(|v| !v.is_empty()) {
            return SysRoot::new(PathBuf::from(v));
        }
        SysRoot::default()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Joins a path relative to the sysfs root (`class/net/eth0` → `/sys/class/net/eth0`).
    pub fn path(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.root.join(rel)
    }

    /// Reads a sysfs attribute and trims the trailing newline every `show` adds.
    pub fn read_attr(&self, rel: impl AsRef<Path>) -> io::Result<String> {
        let text = fs::read_to_string(self.path(rel))?;
        Ok(text.trim_end_matches('\n').to_string())
    }

    /// Names of the entries of a sysfs directory, sorted; an absent directory gives none.
    pub fn list_dir(&self, rel: impl AsRef<Path>) -> io::Result<Vec<String>> {
        list_names(&self.path(rel))
    }

    /// Netdevs of a PCI function: `bus/pci/devices/<BDF>/net/*` (one lookup, no link dump).
    pub fn pci_netdevs(&self, pci_address: &str) -> io::Result<Vec<String>> {
        self.device_netdevs(&Path::new("bus/pci/devices").join(pci_address))
    }

    /// Netdevs of an auxiliary device such as an mlx5 SF: `bus/auxiliary/devices/<name>/net/*`.
    pub fn aux_netdevs(&self, aux_name: &str) -> io::Result<Vec<String>> {
        self.device_netdevs(&Path::new("bus/auxiliary/devices").join(aux_name))
    }

    /// Netdevs under a kernel device path such as `/sys/devices/pci0000:00/0000:00:02.0`:
    /// the path may be given with or without the `/sys` prefix.
    pub fn kernelpath_netdevs(&self, kernel_path: &str) -> io::Result<Vec<String>> {
        let rel = Path::new(kernel_path)
            .strip_prefix("/sys")
            .unwrap_or(Path::new(kernel_path.trim_start_matches('/')));
        self.device_netdevs(rel)
    }

    /// Whether `<device>` exists at all (to tell "no such device" from "device has no netdev").
    pub fn device_exists(&self, rel: impl AsRef<Path>) -> bool {
        self.path(rel).exists()
    }

    fn device_netdevs(&self, device_rel: &Path) -> io::Result<Vec<String>> {
        if !is_plain_relative(device_rel) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a plain sysfs path", device_rel.display()),
            ));
        }
        let dir = self.path(device_rel);
        if !dir.exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} does not exist", dir.display()),
            ));
        }
        list_names(&dir.join("net"))
    }
}

/// True when the path has only normal components: no `..`, no root, so it cannot escape.
fn is_plain_relative(p: &Path) -> bool {
    p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// Entry names of a directory, sorted; an absent directory gives none.
pub(crate) fn list_names(dir: &Path) -> io::Result<Vec<String>> {
    match open_dir(dir) {
        Ok(d) => entry_names(&d),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Opens a directory for listing ([`entry_names`]) and for reading files relative to it.
pub fn open_dir(dir: &Path) -> io::Result<fs::File> {
    use nix::fcntl::{open, OFlag};
    let fd = open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    Ok(fs::File::from(fd))
}

/// The entry names of an open directory but `.` and `..`, sorted. Read with getdents64 into a
/// buffer on the stack rather than through a C library DIR stream, whose buffer is a heap
/// allocation per directory that musl's allocator maps and unmaps each time: a metrics scrape
/// lists a hundred directories.
pub fn entry_names(dir: &fs::File) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match getdents(dir, &mut buf)? {
            0 => break,
            len => dirent_names(&buf[..len], &mut names),
        }
    }
    names.sort();
    Ok(names)
}

/// Calls `f` with each entry name of an open directory but `.` and `..` (as text, and with its
/// NUL for openat), in the order the kernel lists them (the same from one listing of an
/// unchanged directory to the next), without allocating: the names stay in the buffer
/// getdents64 wrote, on the stack. A directory too large for it is listed by
/// [`entry_names`], sorted.
pub fn for_each_entry(dir: &fs::File, mut f: impl FnMut(&str, &CStr)) -> io::Result<()> {
    // Room for about a hundred counters' names.
    let mut buf = [0u8; 4096];
    let mut len = 0;
    // Until getdents64 says the end (0); a full buffer means the directory is too large.
    loop {
        match getdents(dir, &mut buf[len..])? {
            0 => break,
            n => len += n,
        }
        if buf.len() - len < MAX_DIRENT {
            return for_each_name(&entry_names_from_start(dir)?, f);
        }
    }
    for name in dirent_cstrs(&buf[..len]) {
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        match std::str::from_utf8(bytes) {
            Ok(text) => f(text, name),
            Err(_) => f(&String::from_utf8_lossy(bytes), name),
        }
    }
    Ok(())
}

fn for_each_name(names: &[String], mut f: impl FnMut(&str, &CStr)) -> io::Result<()> {
    for name in names {
        // A name the kernel listed has no NUL in it.
        let c = std::ffi::CString::new(name.as_bytes()).map_err(io::Error::other)?;
        f(name, &c);
    }
    Ok(())
}

/// The largest record getdents64 writes: its 19-byte head and a 255-byte name with its NUL,
/// rounded up to 8 bytes.
const MAX_DIRENT: usize = 280;

fn entry_names_from_start(dir: &fs::File) -> io::Result<Vec<String>> {
    use std::io::Seek;
    let mut d = dir;
    d.seek(std::io::SeekFrom::Start(0))?;
    entry_names(dir)
}

/// One getdents64 call into `buf`: the bytes written, 0 at the end of the directory.
fn getdents(dir: &fs::File, buf: &mut [u8]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: getdents64 writes at most `buf.len()` bytes into `buf`, which outlives the
        // call; the fd is an open directory borrowed for the call.
        let n = unsafe {
            nix::libc::syscall(
                nix::libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        match usize::try_from(n) {
            Ok(len) => return Ok(len),
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// The names in a getdents64 answer, but `.` and `..`.
fn dirent_names(records: &[u8], names: &mut Vec<String>) {
    names.reserve(dirents(records).count());
    for name in dirents(records) {
        if name != b"." && name != b".." {
            names.push(match std::str::from_utf8(name) {
                Ok(text) => text.to_owned(),
                Err(_) => String::from_utf8_lossy(name).into_owned(),
            });
        }
    }
}

/// The names of the records of a getdents64 answer, each a `struct linux_dirent64` (d_ino u64,
/// d_off i64, d_reclen u16, d_type u8, then the NUL-terminated name).
fn dirents(records: &[u8]) -> impl Iterator<Item = &[u8]> {
    dirent_cstrs(records).map(CStr::to_bytes)
}

/// The same names with their NUL, as the kernel wrote them: they can be handed to openat
/// without a copy.
fn dirent_cstrs(mut records: &[u8]) -> impl Iterator<Item = &CStr> {
    const NAME: usize = 19;
    std::iter::from_fn(move || {
        if records.len() <= NAME {
            return None;
        }
        let reclen = usize::from(u16::from_ne_bytes([records[16], records[17]]));
        let name = CStr::from_bytes_until_nul(records.get(NAME..reclen)?).ok()?;
        records = &records[reclen..];
        Some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    fn fixture() -> (TempDir, SysRoot) {
        let dir = TempDir::new("sysfs");
        let root = SysRoot::new(dir.path());
        let pci = dir
            .path()
            .join("devices/pci0000:00/0000:00:02.0/0000:3b:00.2");
        fs::create_dir_all(pci.join("net/ens1f0v0")).unwrap();
        fs::create_dir_all(dir.path().join("bus/pci/devices")).unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:00/0000:00:02.0/0000:3b:00.2",
            dir.path().join("bus/pci/devices/0000:3b:00.2"),
        )
        .unwrap();
        let sf = dir
            .path()
            .join("devices/pci0000:00/0000:00:03.0/0000:06:00.0/mlx5_core.sf.4");
        fs::create_dir_all(sf.join("net/enp6s0f0s88")).unwrap();
        fs::create_dir_all(dir.path().join("bus/auxiliary/devices")).unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:00/0000:00:03.0/0000:06:00.0/mlx5_core.sf.4",
            dir.path().join("bus/auxiliary/devices/mlx5_core.sf.4"),
        )
        .unwrap();
        (dir, root)
    }

    #[test]
    fn pci_and_aux_lookups_follow_relative_symlinks() {
        let (_d, root) = fixture();
        assert_eq!(root.pci_netdevs("0000:3b:00.2").unwrap(), vec!["ens1f0v0"]);
        assert_eq!(
            root.aux_netdevs("mlx5_core.sf.4").unwrap(),
            vec!["enp6s0f0s88"]
        );
        assert_eq!(
            root.kernelpath_netdevs("/sys/devices/pci0000:00/0000:00:02.0/0000:3b:00.2")
                .unwrap(),
            vec!["ens1f0v0"]
        );
    }

    #[test]
    fn missing_device_is_not_found_and_escapes_are_refused() {
        let (_d, root) = fixture();
        let err = root.pci_netdevs("0000:99:00.0").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        let err = root.pci_netdevs("../../etc").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn listing_takes_every_entry_across_getdents_calls_and_sorts_them() {
        let dir = TempDir::new("sysfs-list");
        let mut want: Vec<String> = (0..300)
            .map(|i| format!("counter_with_a_long_name_{i:03}"))
            .collect();
        for n in &want {
            fs::write(dir.path().join(n), "0\n").unwrap();
        }
        fs::create_dir(dir.path().join("sub")).unwrap();
        want.push("sub".into());
        want.sort();
        let root = SysRoot::new(dir.path());
        // 300 names of 28 bytes do not fit one 4 KiB getdents64 answer.
        assert_eq!(root.list_dir("").unwrap(), want);
        assert_eq!(root.list_dir("absent").unwrap(), Vec::<String>::new());
        let err = root.list_dir(&want[0]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(nix::libc::ENOTDIR));
    }

    #[test]
    fn for_each_entry_gives_what_entry_names_does_in_the_kernels_order() {
        for count in [3, 30, 1000] {
            let dir = TempDir::new("sysfs-each");
            for i in 0..count {
                fs::write(
                    dir.path()
                        .join(format!("a_counter_name_of_some_length_{i:04}")),
                    "0",
                )
                .unwrap();
            }
            let open = open_dir(dir.path()).unwrap();
            let mut seen = Vec::new();
            for_each_entry(&open, |n, _| seen.push(n.to_string())).unwrap();
            let mut again = Vec::new();
            for_each_entry(&open_dir(dir.path()).unwrap(), |n, _| {
                again.push(n.to_string())
            })
            .unwrap();
            assert_eq!(
                again, seen,
                "an unchanged directory lists in the same order"
            );
            let want = SysRoot::new(dir.path()).list_dir("").unwrap();
            assert_eq!(want.len(), count);
            // 1000 names of 38 bytes do not fit the 4 KiB it reads on the stack.
            seen.sort();
            assert_eq!(seen, want, "{count} entries");
        }
    }
}

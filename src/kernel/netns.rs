//! Network namespace handles.
//!
//! A namespace is held by an open fd on its nsfs file (`/run/netns/X`, `/proc/PID/ns/net`),
//! checked to really be a network namespace before anything is moved into it. The one thing
//! that must happen *inside* a namespace, creating a netlink socket there, is a setns(2) of
//! the calling thread, the socket(2), and a setns(2) back ([`Netns::run_in`]); every request
//! is then sent from the host namespace over sockets that act where they were created.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::sched::{setns, CloneFlags};
use nix::sys::statfs::{fstatfs, PROC_SUPER_MAGIC};

/// NSFS_MAGIC from linux/magic.h: bind-mounted namespace files (/run/netns/X) live on nsfs.
const NSFS_MAGIC: i64 = 0x6e73_6673;

#[derive(Debug)]
pub struct Netns {
    file: OwnedFd,
    path: PathBuf,
}

impl Netns {
    /// Opens `path` and checks that it is a network namespace (nsfs or procfs file whose
    /// setns type is CLONE_NEWNET).
    pub fn open(path: &Path) -> io::Result<Netns> {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NONBLOCK: a FIFO (or a device) named as a netns must be refused, not block open(2)
        // until a writer appears. nsfs files ignore the flag; setns(2) needs a real open file,
        // so O_PATH will not do.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
            .open(path)?;
        let fs = fstatfs(&file).map_err(io::Error::from)?;
        let magic = fs.filesystem_type().0 as i64;
        if magic != NSFS_MAGIC && fs.filesystem_type() != PROC_SUPER_MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is not a namespace file (filesystem magic {magic:#x}, expected nsfs)",
                    path.display()
                ),
            ));
        }
        // NS_GET_NSTYPE tells which kind of namespace the fd refers to. Other procfs files
        // (/proc/self/status) pass the magic check and fail the ioctl (ENOTTY): that failure
        // is a refusal too. The ioctl exists since Linux 4.11.
        // SAFETY: the ioctl takes no argument, and `file` is an open fd for the whole call.
        let nstype = unsafe { ns_get_nstype(file.as_raw_fd()) }.map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is not a namespace file (NS_GET_NSTYPE: {})",
                    path.display(),
                    io::Error::from(e)
                ),
            )
        })?;
        if nstype != CloneFlags::CLONE_NEWNET.bits() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is a namespace but not a network namespace",
                    path.display()
                ),
            ));
        }
        Ok(Netns {
            file: file.into(),
            path: path.to_path_buf(),
        })
    }

    /// The namespace of the calling thread.
    pub fn current() -> io::Result<Netns> {
        Netns::open(Path::new("/proc/thread-self/ns/net"))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Whether this is the namespace the calling thread is in (the host's, for the plugin).
    pub fn is_current(&self) -> io::Result<bool> {
        Ok(self.identity()? == Netns::current()?.identity()?)
    }

    /// (device, inode) of the nsfs file: equal for two handles on the same namespace.
    pub fn identity(&self) -> io::Result<(u64, u64)> {
        let meta = File::from(self.file.try_clone()?).metadata()?;
        Ok((meta.dev(), meta.ino()))
    }

    /// Runs `f` with the calling thread inside this namespace, then switches the thread back
    /// to `home` (the namespace it was in, held open by the caller). Sockets created by `f`
    /// keep acting in this namespace afterwards, from any thread.
    ///
    /// Keep `f` to a syscall or two (the netlink socket(2)): nothing else happens while the
    /// thread is away, and a panic inside `f` would leave it away (release builds abort on
    /// panic, and `f` does not panic). If switching back fails the process aborts at once:
    /// continuing in the wrong namespace could change the wrong devices, while an abort
    /// before anything was changed is an ordinary failed invocation for the runtime. (This
    /// replaces a short-lived thread per pod socket: its spawn and join wait on the scheduler,
    /// which on a loaded machine costs far more than the two setns calls; docs/benchmarks.md,
    /// "Measured once".)
    pub fn run_in<T>(&self, home: &Netns, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        setns(self.fd(), CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
        let out = f();
        if let Err(e) = setns(home.fd(), CloneFlags::CLONE_NEWNET) {
            eprintln!(
                "rdma-ns: cannot switch back to the host network namespace after entering {} \
                 ({e}); aborting before acting in the wrong namespace",
                self.path.display()
            );
            std::process::abort();
        }
        out
    }
}

impl Netns {
    /// Runs `f` with a sysfs mounted fresh inside this namespace, so it shows the namespace's
    /// own netdevs and (in exclusive RDMA mode) ib devices: a sysfs mount is tagged with the
    /// netns of whoever mounted it, so the host's /sys never shows a pod's devices. The mount
    /// goes over /sys in a private mount namespace of a short-lived thread (unshare
    /// CLONE_FS|CLONE_NEWNS is allowed per thread, and `/` is made a slave first, so nothing
    /// propagates back) and disappears with it; the host never sees it.
    pub fn with_own_sysfs<T: Send>(
        &self,
        f: impl FnOnce(&crate::kernel::sysfs::SysRoot) -> io::Result<T> + Send,
    ) -> io::Result<T> {
        use nix::mount::{mount, umount2, MntFlags, MsFlags};
        use nix::sched::unshare;
        let fd = self.fd();
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    unshare(CloneFlags::CLONE_FS | CloneFlags::CLONE_NEWNS)
                        .map_err(io::Error::from)?;
                    // Keep our mounts out of the host's mount namespace.
                    mount(
                        None::<&str>,
                        "/",
                        None::<&str>,
                        MsFlags::MS_REC | MsFlags::MS_SLAVE,
                        None::<&str>,
                    )
                    .map_err(io::Error::from)?;
                    setns(fd, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
                    // Over /sys, which is there already: a directory made for the mount would
                    // outlive a process killed while it works.
                    let sys = crate::kernel::sysfs::SysRoot::default();
                    mount(
                        Some("sysfs"),
                        sys.root(),
                        Some("sysfs"),
                        MsFlags::MS_RDONLY
                            | MsFlags::MS_NOSUID
                            | MsFlags::MS_NODEV
                            | MsFlags::MS_NOEXEC,
                        None::<&str>,
                    )
                    .map_err(io::Error::from)
                    .and_then(|_| {
                        let r = f(&sys);
                        let _ = umount2(sys.root(), MntFlags::MNT_DETACH);
                        r
                    })
                })
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("sysfs worker thread panicked")))
        })
    }
}

// NS_GET_NSTYPE = _IO(NSIO, 0x3), NSIO = 0xb7 (linux/nsfs.h): the CLONE_NEW* type of the
// namespace an fd refers to.
nix::ioctl_none!(ns_get_nstype, 0xb7, 0x3);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_that_are_no_network_namespace_are_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("rdma-ns-netns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let plain = dir.join("plain");
        std::fs::write(&plain, b"x").unwrap();
        for path in [
            fifo.as_path(),
            plain.as_path(),
            Path::new("/proc/self/status"),
            Path::new("/proc/self/ns/uts"),
        ] {
            let e = Netns::open(path).unwrap_err();
            assert_eq!(
                e.kind(),
                io::ErrorKind::InvalidInput,
                "{}: {e}",
                path.display()
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
        // The same check takes a real network namespace.
        assert!(Netns::open(Path::new("/proc/self/ns/net")).is_ok());
    }

    #[test]
    fn the_own_namespace_is_recognised_by_identity() {
        assert!(Netns::open(Path::new("/proc/self/ns/net"))
            .unwrap()
            .is_current()
            .unwrap());
        // A namespace of its own, made by a thread that then exits, is not the caller's.
        let other = std::thread::spawn(|| {
            nix::sched::unshare(CloneFlags::CLONE_NEWNET).unwrap();
            Netns::current().unwrap()
        })
        .join()
        .unwrap();
        assert!(!other.is_current().unwrap());
    }

    #[test]
    fn current_namespace_opens_and_is_network() {
        let ns = Netns::current().expect("own netns");
        let again = Netns::open(Path::new("/proc/self/ns/net")).unwrap();
        assert_eq!(ns.identity().unwrap(), again.identity().unwrap());
    }

    #[test]
    fn run_in_enters_another_namespace_and_comes_back() {
        // A second netns: entering the one the thread is already in would pass even if run_in
        // never switched at all, or never switched back.
        struct Scratch(String);
        impl Drop for Scratch {
            fn drop(&mut self) {
                let _ = std::process::Command::new("ip")
                    .args(["netns", "del", &self.0])
                    .status();
            }
        }
        let scratch = Scratch(format!("rdmans-runin-{}", std::process::id()));
        let ok = std::process::Command::new("ip")
            .args(["netns", "add", &scratch.0])
            .status()
            .unwrap()
            .success();
        assert!(ok, "ip netns add {}", scratch.0);
        let home = Netns::current().unwrap();
        let other = Netns::open(Path::new(&format!("/run/netns/{}", scratch.0))).unwrap();
        let inside = other
            .run_in(&home, || Netns::current().and_then(|n| n.identity()))
            .unwrap();
        assert_eq!(
            inside,
            other.identity().unwrap(),
            "ran inside the other netns"
        );
        assert_ne!(inside, home.identity().unwrap());
        assert_eq!(
            Netns::current().unwrap().identity().unwrap(),
            home.identity().unwrap(),
            "came back home"
        );
    }

    #[test]
    fn other_namespace_kinds_are_refused() {
        let err = Netns::open(Path::new("/proc/self/ns/mnt")).unwrap_err();
        assert!(err.to_string().contains("not a network namespace"), "{err}");
    }

    #[test]
    fn own_sysfs_shows_the_namespace_netdevs_not_the_hosts() {
        let name = format!("rdmans-sysfs-{}", std::process::id());
        let ip = |args: &[&str]| {
            std::process::Command::new("ip")
                .args(args)
                .status()
                .unwrap()
                .success()
        };
        // Removes the namespace even when an assertion below panics, so a failed run
        // leaves nothing on the host for the next one to trip over.
        struct RemoveOnDrop(String);
        impl Drop for RemoveOnDrop {
            fn drop(&mut self) {
                let _ = std::process::Command::new("ip")
                    .args(["netns", "del", &self.0])
                    .status();
            }
        }
        assert!(ip(&["netns", "add", &name]));
        let _remove = RemoveOnDrop(name.clone());
        assert!(ip(&[
            "-n", &name, "link", "add", "podonly0", "type", "veth", "peer", "name", "podonly1"
        ]));
        let ns = Netns::open(Path::new(&format!("/run/netns/{name}"))).unwrap();
        let mut mounted_on = PathBuf::new();
        let seen = ns.with_own_sysfs(|sys| {
            mounted_on = sys.root().to_path_buf();
            sys.list_dir("class/net")
        });
        drop(ns);
        let seen = seen.unwrap();
        assert!(seen.contains(&"podonly0".to_string()), "{seen:?}");
        // A directory made for the mount would outlive a process killed while it works (the
        // random-kill tests left some in /tmp): the mount goes over /sys, which is there
        // already, in the thread's own mount namespace.
        assert_eq!(
            mounted_on,
            Path::new("/sys"),
            "mounted on a directory made for it"
        );
        assert!(
            !Path::new("/sys/class/net/podonly0").exists(),
            "the host's /sys does not show it"
        );
        let host: Vec<String> = std::fs::read_dir("/sys/class/net")
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            host.iter().all(|h| h == "lo" || !seen.contains(h)),
            "no host netdev but lo: {seen:?}"
        );
    }

    #[test]
    fn ordinary_files_are_refused() {
        let err = Netns::open(Path::new("/etc/hostname")).unwrap_err();
        assert!(err.to_string().contains("not a namespace file"), "{err}");
    }
}

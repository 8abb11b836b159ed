//! RDMA CM's defaults per ib device port, in configfs (`drivers/infiniband/core/cma_configfs.c`):
//! `<configfs>/rdma_cm/<ibdev>/ports/<port>/default_roce_tos`, the traffic class of every RDMA
//! CM connection on that RoCE port that did not set one itself (`RDMA_OPTION_ID_TOS`).
//!
//! What the kernel does, and what the callers rely on:
//! - A group is made with mkdir under the device's name, global to the node (configfs is not
//!   per netns, so the host writes a pod's moved device under its name): ENODEV when no ib
//!   device has the name, EEXIST when the group is there already. The group holds only the
//!   name; the kernel creates its `ports/<N>` subgroups for the device's ports.
//! - The value lives in the device's RDMA CM client (`struct cma_device`), not in the group:
//!   rmdir of the group leaves it, and a read through a group of a device that went is ENODEV.
//!   The client is allocated, with 0, when the device registers, and again when it moves to
//!   another netns (the core removes and adds its clients), so a move resets the value to 0.
//! - Files read `"%u\n"` and take a number `kstrtou8` accepts.
//!
//! Everything goes through one root that stands for `/sys` ([`SysRoot`]), so tests point it
//! at a tree of their own as they do for sysfs; configfs is `kernel/config` below it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nix::sys::statfs::FsType;

use crate::kernel::sysfs::SysRoot;
use crate::kernel::{KResult, KernelError, Ns};

/// CONFIGFS_MAGIC (fs/configfs/mount.c; not in the uapi headers): what `stat -f
/// /sys/kernel/config` printed once configfs was mounted on Linux 7.3.
const CONFIGFS_MAGIC: FsType = FsType(0x6265_6570);

/// What the node offers to write RDMA CM defaults with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmFs {
    /// configfs with its `rdma_cm` directory.
    Ready,
    /// Nothing mounted at `/sys/kernel/config`.
    NoConfigfs,
    /// configfs is mounted, but RDMA CM registered nothing there (module `rdma_cm` not loaded,
    /// or a kernel built without CONFIG_INFINIBAND_ADDR_TRANS_CONFIGFS).
    NoRdmaCm,
}

/// The `rdma_cm` configfs directory of the node, under a sysfs root.
#[derive(Debug, Clone)]
pub struct RdmaCmFs {
    /// `<root>/kernel/config`.
    configfs: PathBuf,
}

impl RdmaCmFs {
    /// The one below `sys` (`/sys/kernel/config/rdma_cm` on a node).
    pub fn new(sys: &SysRoot) -> RdmaCmFs {
        RdmaCmFs {
            configfs: sys.path("kernel/config"),
        }
    }

    /// `<configfs>/rdma_cm`.
    pub fn dir(&self) -> PathBuf {
        self.configfs.join("rdma_cm")
    }

    fn group(&self, ibdev: &str) -> PathBuf {
        self.dir().join(ibdev)
    }

    fn tos_file(&self, ibdev: &str, port: u32) -> PathBuf {
        self.group(ibdev)
            .join("ports")
            .join(port.to_string())
            .join("default_roce_tos")
    }

    /// Whether the directory is there, else what is missing: configfs itself (its mount point
    /// is not a configfs) or RDMA CM's part of it.
    pub fn availability(&self) -> CmFs {
        if self.dir().is_dir() {
            return CmFs::Ready;
        }
        match nix::sys::statfs::statfs(&self.configfs) {
            Ok(fs) if fs.filesystem_type() == CONFIGFS_MAGIC => CmFs::NoRdmaCm,
            _ => CmFs::NoConfigfs,
        }
    }

    /// Whether the device has a group (someone, or an earlier ADD, made one).
    pub fn group_exists(&self, ibdev: &str) -> KResult<bool> {
        check_name(ibdev, "look up the rdma_cm group")?;
        match fs::symlink_metadata(self.group(ibdev)) {
            Ok(m) => Ok(m.is_dir()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(error("look up the rdma_cm group", ibdev, &e)),
        }
    }

    /// mkdir of the device's group: ENODEV when no ib device has the name, EEXIST when the
    /// group exists, ENOENT when there is no `rdma_cm` directory.
    pub fn make_group(&self, ibdev: &str) -> KResult<()> {
        let op = "make the rdma_cm group";
        check_name(ibdev, op)?;
        fs::create_dir(self.group(ibdev)).map_err(|e| error(op, ibdev, &e))
    }

    /// rmdir of the device's group (its values stay with the device): ENOENT when it is gone.
    pub fn remove_group(&self, ibdev: &str) -> KResult<()> {
        let op = "remove the rdma_cm group";
        check_name(ibdev, op)?;
        fs::remove_dir(self.group(ibdev)).map_err(|e| error(op, ibdev, &e))
    }

    /// The port's default ToS, read through the device's group: ENOENT without a group (or
    /// port), ENODEV when the device is gone.
    pub fn default_tos(&self, ibdev: &str, port: u32) -> KResult<u8> {
        let op = format!("read RDMA CM's default_roce_tos of port {port}");
        check_name(ibdev, &op)?;
        let path = self.tos_file(ibdev, port);
        let text = fs::read_to_string(&path).map_err(|e| error(&op, ibdev, &e))?;
        text.trim_end_matches('\n').parse().map_err(|_| {
            let mut e = KernelError::new(op.clone(), ibdev, Ns::Host, 0);
            e.ext_ack = Some(format!("{} holds {text:?}, not a byte", path.display()));
            e
        })
    }

    /// Writes the port's default ToS through the device's group.
    pub fn set_default_tos(&self, ibdev: &str, port: u32, tos: u8) -> KResult<()> {
        let op = format!("write {tos} to RDMA CM's default_roce_tos of port {port}");
        check_name(ibdev, &op)?;
        write_existing(&self.tos_file(ibdev, port), &tos.to_string())
            .map_err(|e| error(&op, ibdev, &e))
    }
}

/// Writes `value` into a file that must exist (configfs attributes are made by the kernel;
/// creating one in a fixture tree would hide a missing group).
fn write_existing(path: &Path, value: &str) -> io::Result<()> {
    use std::io::Write;
    let mut file = fs::OpenOptions::new().write(true).open(path)?;
    file.write_all(value.as_bytes())
}

/// An ib device name is one path component: the kernel allows no `/`, and `.`/`..` are no
/// device's.
fn check_name(ibdev: &str, op: &str) -> KResult<()> {
    let plain = !ibdev.is_empty() && ibdev != "." && ibdev != ".." && !ibdev.contains('/');
    match plain {
        true => Ok(()),
        false => Err(KernelError::new(op, ibdev, Ns::Host, nix::libc::EINVAL)),
    }
}

fn error(op: &str, ibdev: &str, e: &io::Error) -> KernelError {
    let mut k = KernelError::new(
        op,
        format!("ib device {ibdev} (configfs)"),
        Ns::Host,
        e.raw_os_error().unwrap_or(0),
    );
    if k.errno == 0 {
        k.ext_ack = Some(e.to_string());
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    /// A configfs stand-in with the group of `dev` made as the kernel makes it.
    fn tree_with_group(dev: &str, tos: &str) -> (TempDir, RdmaCmFs) {
        let dir = TempDir::new("rdma-cm");
        let fs = RdmaCmFs::new(&SysRoot::new(dir.path()));
        let port = fs.dir().join(dev).join("ports/1");
        std::fs::create_dir_all(&port).unwrap();
        std::fs::write(port.join("default_roce_tos"), tos).unwrap();
        (dir, fs)
    }

    #[test]
    fn a_group_reads_and_writes_its_ports_value() {
        let (_dir, fs) = tree_with_group("mlx5_2", "0\n");
        assert_eq!(fs.availability(), CmFs::Ready);
        assert!(fs.group_exists("mlx5_2").unwrap());
        assert_eq!(fs.default_tos("mlx5_2", 1).unwrap(), 0);
        fs.set_default_tos("mlx5_2", 1, 106).unwrap();
        assert_eq!(fs.default_tos("mlx5_2", 1).unwrap(), 106);
    }

    #[test]
    fn without_a_group_nothing_is_read_or_written() {
        let (_dir, fs) = tree_with_group("mlx5_2", "0\n");
        assert!(!fs.group_exists("mlx5_3").unwrap());
        let read = fs.default_tos("mlx5_3", 1).unwrap_err();
        assert_eq!(read.errno, nix::libc::ENOENT, "{read}");
        let write = fs.set_default_tos("mlx5_3", 1, 106).unwrap_err();
        assert_eq!(write.errno, nix::libc::ENOENT, "{write}");
        assert!(!fs.dir().join("mlx5_3").exists(), "the write made nothing");
        assert!(write.to_string().contains("mlx5_3"), "{write}");
    }

    #[test]
    fn groups_are_made_and_removed_by_name_only() {
        let (_dir, fs) = tree_with_group("mlx5_2", "0\n");
        fs.make_group("rxe_0123").unwrap();
        assert!(fs.group_exists("rxe_0123").unwrap());
        let again = fs.make_group("rxe_0123").unwrap_err();
        assert_eq!(again.errno, nix::libc::EEXIST);
        fs.remove_group("rxe_0123").unwrap();
        assert_eq!(
            fs.remove_group("rxe_0123").unwrap_err().errno,
            nix::libc::ENOENT
        );
        for bad in ["", "..", "a/b"] {
            assert_eq!(fs.make_group(bad).unwrap_err().errno, nix::libc::EINVAL);
        }
    }

    #[test]
    fn a_value_that_is_no_byte_is_named() {
        let (_dir, fs) = tree_with_group("mlx5_2", "300\n");
        let e = fs.default_tos("mlx5_2", 1).unwrap_err();
        assert!(e.to_string().contains("\"300\\n\""), "{e}");
    }

    #[test]
    fn a_tree_without_configfs_says_so() {
        let dir = TempDir::new("rdma-cm-none");
        let fs = RdmaCmFs::new(&SysRoot::new(dir.path()));
        // A plain directory is no configfs: the mount point is there, nothing is mounted.
        std::fs::create_dir_all(dir.path().join("kernel/config")).unwrap();
        assert_eq!(fs.availability(), CmFs::NoConfigfs);
    }
}

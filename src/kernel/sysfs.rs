//! sysfs access through one root.
//!
//! Every sysfs path the plugin reads goes through [`SysRoot`], so tests can point the whole
//! plugin at a fixture tree (env `RDMA_NS_SYSFS_ROOT`, the directory that stands for `/sys`,
//! read by debug builds only).
//! The host's /sys is tagged with the host's netns (it was mounted there): it answers questions
//! about host devices and PCI topology, never about what is inside a pod.

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
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for entry in entries {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
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
}

//! Where attachment records live, and per-device locks.
//!
//! Layout under the data dir (default `/var/lib/cni/rdma-ns`, conf `dataDir`), directories
//! 0700:
//! - `<network>/<containerID>:<ifname>.json`: one record per attachment (record.rs). Network
//!   names and container ids match `[a-zA-Z0-9][a-zA-Z0-9_.-]*` and neither they nor ifnames
//!   may hold `/` or `:`, so the name is unique and cannot escape the directory (checked again
//!   here).
//! - `<network>/.<containerID>:<ifname>.json.tmp-<pid>`: a record being written
//!   ([`write_atomic`]), locked by its writer until renamed into place. One that no one holds
//!   was left by a killed writer: the next operation on the attachment and [`Store::sweep`]
//!   remove it.
//! - `locks/<device-key>.lock`: flock(2) files serializing attachments that contend for one
//!   device. Different devices never wait for each other. Bounded by the devices, they stay.
//! - `locks/ipam-<network>-<containerID>-<ifname>.lock`: one attachment's, which its IPAM
//!   plugins inherit (`lifecycle`). It goes with its attachment: DEL, a failed ADD and
//!   [`Store::sweep`] remove it when no one holds it (see `lock_file`).
//!
//! A record file holds one JSON document per line, the last readable one counting:
//! - the intent ("adding"), written *before* the device is moved, atomically and durably
//!   (temp file, fsync, rename, fsync dir), so even a plugin killed mid-ADD, or a node that
//!   lost power, leaves DEL everything it needs to bring the device back;
//! - the final state ("ready", with the pod ifindex, MTU and IPAM result), appended when ADD
//!   completes, without fsync. If a crash loses or tears that line, the intent line before it
//!   still reads, and DEL/GC work from it (they only need what the intent holds; the pod
//!   ifindex saves one lookup by name, the MTU serves CHECK). Syncing it too would cost two more
//!   fsyncs per ADD (file and directory) for no gain in what survives a crash.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::marker::PhantomData;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::records::atomic::{
    bounded_file_name, remove_stale_temp, remove_stale_temps, write_atomic,
};
use crate::records::attachment::{Attachment, RawMode, RecordedMode, Unreadable};
use crate::records::claim::ClaimStore;
use crate::records::lock::{attachment_lock_key, claim_lock_key};
use crate::records::lock_file;

pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/rdma-ns";

/// A component that may become a file or directory name: non-empty, no `/`, no NUL, not `.`
/// or `..`. Everything written under the data dir passes through this.
fn safe_component(kind: &str, s: &str) -> Result<()> {
    if s.is_empty() || s == "." || s == ".." || s.contains(['/', '\0']) {
        return Err(Error::State(format!(
            "{kind} {s:?} cannot be used in a state file name"
        )));
    }
    Ok(())
}

/// The records of a data dir, read with their mode state as `M` (the CNI's modes, or
/// [`RawMode`] for readers that act on no mode).
#[derive(Debug)]
pub struct Store<M = RawMode> {
    dir: PathBuf,
    mode: PhantomData<fn() -> M>,
}

impl<M> Clone for Store<M> {
    fn clone(&self) -> Self {
        Store::new(self.dir.clone())
    }
}

impl<M> Store<M> {
    pub fn new(dir: impl Into<PathBuf>) -> Store<M> {
        Store {
            dir: dir.into(),
            mode: PhantomData,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn network_dir(&self, network: &str) -> Result<PathBuf> {
        safe_component("network name", network)?;
        Ok(self.dir.join(network))
    }

    fn record_path(&self, network: &str, container_id: &str, ifname: &str) -> Result<PathBuf> {
        safe_component("container id", container_id)?;
        safe_component("interface name", ifname)?;
        if container_id.contains(':') || ifname.contains(':') {
            return Err(Error::State(format!(
                "container id {container_id:?} or ifname {ifname:?} contains ':'"
            )));
        }
        Ok(self
            .network_dir(network)?
            .join(bounded_file_name(container_id, &format!(":{ifname}.json"))))
    }

    /// Whether the attachment a [`crate::records::cdi::PodReport`] names
    /// (`<network>/<containerID>:<ifname>`) has a record.
    pub fn has_record_of(&self, name: &str) -> bool {
        let Some((network, rest)) = name.split_once('/') else {
            return false;
        };
        let Some((container_id, ifname)) = rest.rsplit_once(':') else {
            return false;
        };
        self.record_path(network, container_id, ifname)
            .is_ok_and(|p| p.exists())
    }

    /// Creates the data dir (0700) if needed. The data dir and its subdirectories must be real
    /// directories, not symlinks (a record or lock written through one lands wherever it
    /// points), and are kept 0700: a directory others can write lets a local user plant
    /// records or symlinks for the root plugin to follow.
    pub fn ensure_dir(&self, sub: Option<&str>) -> Result<PathBuf> {
        let dir = match sub {
            Some(s) => {
                safe_component("state subdirectory", s)?;
                self.dir.join(s)
            }
            None => self.dir.clone(),
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| {
                Error::io(
                    format!(
                        "creating state directory {} (set `dataDir` to a writable directory)",
                        dir.display()
                    ),
                    e,
                )
            })?;
        // The data dir itself may be a symlink the operator made; what rdma-ns creates under it
        // may not.
        private_dir(&self.dir, true)?;
        if sub.is_some() {
            private_dir(&dir, false)?;
        }
        Ok(dir)
    }

    pub fn remove(&self, network: &str, container_id: &str, ifname: &str) -> Result<()> {
        let path = self.record_path(network, container_id, ifname)?;
        remove_stale_temps(&path);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(
                format!("removing state file {}", path.display()),
                e,
            )),
        }
    }

    /// Clears what gone attachments and claims left under the data dir: temp files whose writer
    /// is gone (a plugin killed mid-write) in every network's directory, and lock files no one
    /// holds and no record names (also those of earlier releases). `rdma-ns list`, `reconcile`,
    /// GC and the DRA driver's unprepare run it; ADD, DEL and CHECK remove their own.
    pub fn sweep(&self) {
        self.remove_stale_temps_of_every_network();
        self.remove_free_lock_files_no_record_names();
    }

    fn remove_stale_temps_of_every_network(&self) {
        let Ok(networks) = fs::read_dir(&self.dir) else {
            return;
        };
        for network in networks.flatten() {
            if network.file_name() == LOCKS || !network.path().is_dir() {
                continue;
            }
            for entry in fs::read_dir(network.path()).into_iter().flatten().flatten() {
                remove_stale_temp(&entry.path());
            }
        }
    }

    /// Lock files no one holds, unless a record names them: an attachment's own lock and its
    /// device's, a prepared claim's and its devices'. A free lock file protects nothing, and
    /// by `lock_file`'s protocol the next locker creates it anew, so one of an unreadable
    /// record may go too, harmlessly; the names kept only spare their owners that churn.
    fn remove_free_lock_files_no_record_names(&self) {
        let Some(locks) = self.existing_locks_dir() else {
            return;
        };
        let named = self.lock_file_names_of_records();
        for entry in fs::read_dir(locks).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".lock") && !named.contains(&name) {
                if let Err(e) = lock_file::remove_if_free(&entry.path()) {
                    crate::log_warn!("removing lock file {}: {e}", entry.path().display());
                }
            }
        }
    }

    fn lock_file_names_of_records(&self) -> std::collections::HashSet<String> {
        let (attachments, _) = Store::<RawMode>::new(&self.dir).list_all();
        let (claims, _) = ClaimStore::new(&self.dir).list();
        let attachment_keys = attachments.iter().flat_map(|a| {
            [
                attachment_lock_key(&a.network, &a.container_id, &a.ifname),
                a.device_key.clone(),
            ]
        });
        let claim_keys = claims.iter().flat_map(|c| {
            let devices = c.devices.iter().map(|d| d.lock_key.clone());
            std::iter::once(claim_lock_key(&c.claim.uid)).chain(devices)
        });
        attachment_keys
            .chain(claim_keys)
            .map(|key| bounded_file_name(&key, ".lock"))
            .collect()
    }

    /// Checks the data dir is writable: creates and removes a probe file.
    pub fn probe_writable(&self) -> Result<()> {
        self.ensure_dir(None)?;
        let probe = self.dir.join(format!(".probe-{}", std::process::id()));
        write_atomic(&probe, b"ok", 0o600)
            .and_then(|_| fs::remove_file(&probe))
            .map_err(|e| {
                Error::io(
                    format!("state directory {} is not writable", self.dir.display()),
                    e,
                )
            })
    }

    /// Takes the lock of `device_key`, waiting at most `timeout`; code 11 when it stays busy.
    pub fn lock_device(&self, device_key: &str, timeout: Duration) -> Result<DeviceLock> {
        safe_component("device key", device_key)?;
        let path = self.lock_path(device_key)?;
        self.lock(&path, timeout, || {
            format!(
                "device {device_key} is locked by another rdma-ns invocation for more than {} ms \
                 (lock file {}); retry, or find the stuck process with `fuser {}`",
                timeout.as_millis(),
                path.display(),
                path.display()
            )
        })
    }

    /// Runs `f` under the lock of `device_key` (see `lock_device`). When `f` fails, its ADD was
    /// rolled back, so the lock file goes as after DEL, unless someone holds it.
    pub fn under_device_lock<T>(
        &self,
        device_key: &str,
        timeout: Duration,
        f: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let lock = self.lock_device(device_key, timeout)?;
        let outcome = f();
        drop(lock);
        if outcome.is_err() {
            self.remove_lock(device_key);
        }
        outcome
    }

    /// Takes the lock of one attachment, which its IPAM plugins inherit (`lifecycle`), waiting
    /// at most `timeout`; code 11 when it stays busy.
    pub fn lock_attachment(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
        timeout: Duration,
    ) -> Result<DeviceLock> {
        let path = self.attachment_lock_path(network, container_id, ifname)?;
        self.lock(&path, timeout, || {
            format!(
                "an IPAM plugin of {container_id}:{ifname} (network {network}) started by an \
                 earlier ADD still runs after {} ms (it holds lock file {}); retry once it has \
                 ended, or find it with `fuser {}`",
                timeout.as_millis(),
                path.display(),
                path.display()
            )
        })
    }

    /// Removes the lock file of an attachment that is gone, unless someone holds it (an IPAM
    /// plugin still running, an operation on the same attachment): see `lock_file`.
    pub fn remove_attachment_lock(&self, network: &str, container_id: &str, ifname: &str) {
        let (Ok(()), Some(dir)) = (
            self.record_path(network, container_id, ifname).map(drop),
            self.existing_locks_dir(),
        ) else {
            return;
        };
        let key = attachment_lock_key(network, container_id, ifname);
        let path = dir.join(bounded_file_name(&key, ".lock"));
        if let Err(e) = lock_file::remove_if_free(&path) {
            crate::log_warn!("removing lock file {}: {e}", path.display());
        }
    }

    /// Removes the lock file of `key` unless someone holds it: a device's once its attachment
    /// is released, a DRA claim's once it is unprepared.
    pub fn remove_lock(&self, key: &str) {
        let (Ok(()), Some(dir)) = (safe_component("lock key", key), self.existing_locks_dir())
        else {
            return;
        };
        let path = dir.join(bounded_file_name(key, ".lock"));
        if let Err(e) = lock_file::remove_if_free(&path) {
            crate::log_warn!("removing lock file {}: {e}", path.display());
        }
    }

    /// The lock file of `key`, its directory created (a real one, 0700) when missing.
    fn lock_path(&self, key: &str) -> Result<PathBuf> {
        let dir = self.ensure_dir(Some(LOCKS))?;
        Ok(dir.join(bounded_file_name(key, ".lock")))
    }

    /// The lock directory when it exists and is a real directory: where lock files are
    /// removed, never through a symlink, and never created for that.
    fn existing_locks_dir(&self) -> Option<PathBuf> {
        let dir = self.dir.join(LOCKS);
        fs::symlink_metadata(&dir)
            .is_ok_and(|m| m.file_type().is_dir())
            .then_some(dir)
    }

    /// `locks/ipam-<network>-<containerID>-<ifname>.lock`, as every release has named it.
    fn attachment_lock_path(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<PathBuf> {
        self.record_path(network, container_id, ifname)?;
        self.lock_path(&attachment_lock_key(network, container_id, ifname))
    }

    fn lock(
        &self,
        path: &Path,
        timeout: Duration,
        busy: impl FnOnce() -> String,
    ) -> Result<DeviceLock> {
        match lock_file::acquire(path, timeout) {
            Ok(Some(file)) => Ok(DeviceLock { _file: file }),
            Ok(None) => Err(Error::TryAgainLater(busy())),
            Err(e) => Err(Error::io(format!("locking {}", path.display()), e)),
        }
    }
}

/// Reading and writing records, whose mode state is read as `M`.
impl<M: RecordedMode> Store<M> {
    /// Writes `att` as the whole record, atomically and durably: done before anything changes
    /// in the kernel.
    pub fn save(&self, att: &Attachment<M>) -> Result<()> {
        let path = self.record_path(&att.network, &att.container_id, &att.ifname)?;
        self.ensure_dir(Some(&att.network))?;
        remove_stale_temps(&path);
        write_atomic(&path, &record_line(att)?, 0o600)
            .map_err(|e| Error::io(format!("writing state file {}", path.display()), e))
    }

    /// Appends `att` to its existing record as the new current state, without fsync (see the
    /// module doc: losing it leaves the durable intent line). Falls back to [`Store::save`]
    /// when there is no record to append to.
    pub fn update(&self, att: &Attachment<M>) -> Result<()> {
        let path = self.record_path(&att.network, &att.container_id, &att.ifname)?;
        let line = record_line(att)?;
        let file = OpenOptions::new().append(true).open(&path);
        match file {
            Ok(mut f) => f
                .write_all(&line)
                .map_err(|e| Error::io(format!("appending to state file {}", path.display()), e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => self.save(att),
            Err(e) => Err(Error::io(
                format!("opening state file {}", path.display()),
                e,
            )),
        }
    }

    pub fn load(
        &self,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<Attachment<M>>> {
        let path = self.record_path(network, container_id, ifname)?;
        // DEL and CHECK start here: a record written by a plugin killed mid-write is theirs
        // to clear, also when there is no record.
        remove_stale_temps(&path);
        read_record(&path)
    }

    /// Every attachment of `network` (for GC). Unreadable records are reported, not skipped.
    /// Reading changes nothing (the doctor and the exporter list too): see [`Store::sweep`].
    pub fn list(&self, network: &str) -> Result<(Vec<Attachment<M>>, Vec<Error>)> {
        let dir = self.network_dir(network)?;
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
            Err(e) => return Err(Error::io(format!("listing {}", dir.display()), e)),
        };
        let mut found = Vec::new();
        let mut errors = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
            let name = entry.file_name();
            // Temp files end in `.tmp-<pid>`.
            if !name.to_string_lossy().ends_with(".json") {
                continue;
            }
            match read_record(&entry.path()) {
                Ok(Some(a)) => found.push(a),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        found.sort_by_cached_key(|a| a.id());
        Ok((found, errors))
    }

    /// Every attachment of every network (to find who holds a device), and the records that
    /// could not be read: a caller deciding what no one holds must count those as holding
    /// anything.
    pub fn list_all(&self) -> (Vec<Attachment<M>>, Vec<Error>) {
        let mut all = Vec::new();
        let mut unreadable = Vec::new();
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return (all, unreadable),
            Err(e) => {
                unreadable.push(Error::io(format!("listing {}", self.dir.display()), e));
                return (all, unreadable);
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == LOCKS || name == crate::records::claim::CLAIMS_DIR || !entry.path().is_dir()
            {
                continue;
            }
            match self.list(&name) {
                Ok((atts, errors)) => {
                    all.extend(atts);
                    unreadable.extend(errors);
                }
                Err(e) => unreadable.push(e),
            }
        }
        (all, unreadable)
    }
}

/// The subdirectory of lock files.
const LOCKS: &str = "locks";

/// `dir` is a directory (with `follow` false, a real one, not a symlink) with no access for
/// group or others; wider modes are narrowed to 0700, with a warning.
fn private_dir(dir: &Path, follow: bool) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = if follow {
        fs::metadata(dir)
    } else {
        fs::symlink_metadata(dir)
    }
    .map_err(|e| Error::io(format!("checking state directory {}", dir.display()), e))?;
    if !meta.file_type().is_dir() {
        return Err(Error::State(format!(
            "state directory {} is a symlink or not a directory; remove it, or set `dataDir` to a \
             real directory",
            dir.display()
        )));
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        crate::log_warn!(
            "state directory {} had mode {mode:04o}; narrowing it to 0700",
            dir.display()
        );
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| Error::io(format!("narrowing {} to 0700", dir.display()), e))?;
    }
    Ok(())
}

/// Held while an attachment changes its device; released on drop (the fd closes) and when
/// every process that inherited it is gone.
#[derive(Debug)]
pub struct DeviceLock {
    _file: File,
}

impl DeviceLock {
    /// Clears FD_CLOEXEC, so processes spawned while the lock is held keep it locked for as
    /// long as they run: flock(2) locks belong to the open file, shared across fork and exec.
    pub fn inherit_by_children(&self) -> io::Result<()> {
        use nix::fcntl::{fcntl, FcntlArg, FdFlag};
        fcntl(&self._file, FcntlArg::F_SETFD(FdFlag::empty()))
            .map(drop)
            .map_err(io::Error::from)
    }
}

fn read_record<M: RecordedMode>(path: &Path) -> Result<Option<Attachment<M>>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::io(
                format!("reading state file {}", path.display()),
                e,
            ))
        }
    };
    Attachment::from_record_file(&bytes)
        .map(Some)
        .map_err(|e| match e {
            Unreadable::Corrupt(whole) => Error::State(format!(
                "state file {} is corrupt ({whole}); inspect it, then remove it to let DEL proceed",
                path.display()
            )),
            Unreadable::Mismatch(e) => Error::State(format!(
                "state file {} is unusable: {e}; inspect it, then remove it to let DEL proceed \
                 (what it attached must then be released by hand)",
                path.display()
            )),
        })
}

/// One record line of `att`.
fn record_line<M: RecordedMode>(att: &Attachment<M>) -> Result<Vec<u8>> {
    att.record_line()
        .map_err(|e| Error::State(format!("encoding state for {}: {e}", att.id())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::atomic::MAX_FILE_NAME;
    use crate::records::attachment::{
        HostDevice, ModeWire, NetnsId, Phase, PodInterface, PodRef, SCHEMA,
    };
    use crate::testutil::TempDir;

    /// The store of data dir `dir`, its records read as they are on disk.
    fn store_at(dir: impl Into<PathBuf>) -> Store {
        Store::new(dir)
    }

    fn sample() -> Attachment {
        Attachment {
            schema: SCHEMA,
            written_by: Some("0.1.0".into()),
            network: "rdma-net".into(),
            container_id: "abc123".into(),
            ifname: "net1".into(),
            pod: Some(PodRef {
                namespace: Some("default".into()),
                name: Some("trainer".into()),
                uid: None,
            }),
            phase: Phase::Ready,
            netns: "/run/netns/p1".into(),
            netns_id: Some(NetnsId {
                dev: 4,
                ino: 4026532801,
            }),
            device_key: "mac-02_00_00_00_00_01".into(),
            mode_state: RawMode {
                mode: "move".into(),
                wire: ModeWire::new(
                    HostDevice {
                        name: "ens1f0v0".into(),
                        ifindex: 7,
                        mtu: 1500,
                        hwaddr: "02:00:00:00:00:01".into(),
                        perm_hwaddr: None,
                        pci: Some("0000:3b:00.2".into()),
                        was_up: true,
                        addresses: vec!["192.0.2.1/24".into()],
                    },
                    None,
                ),
                pod: PodInterface {
                    ifindex: Some(7),
                    mtu: Some(9000),
                    ..PodInterface::default()
                },
            },
            perm_changes: Vec::new(),
            device_info_file: None,
            device_id: Some("0".into()),
            conf: None,
            cni_path: Vec::new(),
            steps: Default::default(),
        }
    }

    #[test]
    fn a_container_id_longer_than_a_file_name_still_saves_loads_and_removes() {
        let tmp = TempDir::new("state-long");
        let store = store_at(tmp.path().join("data"));
        let mut att = sample();
        att.container_id = "c".repeat(300);
        store.save(&att).unwrap();
        let names: Vec<String> = fs::read_dir(tmp.path().join("data/rdma-net"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].len() <= MAX_FILE_NAME, "{}", names[0].len());
        assert!(names[0].ends_with(":net1.json"));
        let loaded = store
            .load("rdma-net", &att.container_id, "net1")
            .unwrap()
            .unwrap();
        assert_eq!(
            loaded.container_id, att.container_id,
            "the full ID is inside"
        );
        // Another long ID with the same prefix gets its own file.
        let mut other = att.clone();
        other.container_id = format!("{}d", "c".repeat(299));
        store.save(&other).unwrap();
        assert_eq!(
            fs::read_dir(tmp.path().join("data/rdma-net"))
                .unwrap()
                .count(),
            2
        );
        store.remove("rdma-net", &att.container_id, "net1").unwrap();
        store
            .remove("rdma-net", &other.container_id, "net1")
            .unwrap();
        assert_eq!(
            fs::read_dir(tmp.path().join("data/rdma-net"))
                .unwrap()
                .count(),
            0
        );
        // Names that fit keep the form every earlier version wrote.
        assert_eq!(bounded_file_name("abc", ":eth0.json"), "abc:eth0.json");
        // A bounded name is the same for every binary, so a newer one finds the file.
        let bounded = bounded_file_name(&"x".repeat(300), ".lock");
        assert_eq!(
            bounded,
            format!("{}~e78ddf9f1ba85555.lock", "x".repeat(218))
        );
        let lock = store.lock_device(
            &format!("child-n-{}-net1", "x".repeat(300)),
            Duration::from_secs(1),
        );
        assert!(lock.is_ok(), "{lock:?}");
    }

    /// A pid no process has: `pid_max` itself (the kernel hands out pids below it). Not a
    /// spawned and reaped child: a fork while other tests of this binary hold locks would share
    /// their lock files' descriptions until its exec, and fail their removal.
    fn dead_pid() -> u32 {
        let max = fs::read_to_string("/proc/sys/kernel/pid_max").unwrap();
        max.trim().parse().unwrap()
    }

    #[test]
    fn temp_files_of_killed_writers_are_removed_and_live_ones_kept() {
        let tmp = TempDir::new("state-temps");
        let store = store_at(tmp.path().join("data"));
        let att = sample();
        store.save(&att).unwrap();
        let dir = tmp.path().join("data/rdma-net");
        let record = bounded_file_name(&att.container_id, ":net1.json");
        // The pid in a name tells nothing: a killed writer's may name a live process (a reboot
        // recycled it), a live writer's may name none here (another pid namespace).
        let stale = dir.join(format!(".{record}.tmp-{}", std::process::id() + 1));
        let live = dir.join(format!(".{record}.tmp-{}", dead_pid()));
        let other_stale = dir.join(format!(".other:eth1.json.tmp-{}", dead_pid()));
        for f in [&stale, &live, &other_stale] {
            fs::write(f, b"{").unwrap();
        }
        // A writer at work holds its temp file's lock.
        let writer = File::open(&live).unwrap();
        assert!(lock_file::try_lock(&writer).unwrap());

        // Listing reads only, and skips them as records.
        let (found, errors) = store.list("rdma-net").unwrap();
        assert_eq!((found.len(), errors.len()), (1, 0));
        assert!(stale.exists() && other_stale.exists());

        // The next operation on the attachment removes its own.
        store.load("rdma-net", &att.container_id, "net1").unwrap();
        assert!(!stale.exists(), "DEL and CHECK remove their record's");
        assert!(other_stale.exists(), "another attachment's is not theirs");
        assert!(live.exists(), "a running writer's temp file stays");
        fs::write(&stale, b"{").unwrap();
        store.save(&att).unwrap();
        assert!(!stale.exists(), "ADD removes its record's");
        fs::write(&stale, b"{").unwrap();
        store.remove("rdma-net", &att.container_id, "net1").unwrap();
        assert!(!stale.exists());

        // A sweep removes every network's.
        store.sweep();
        assert!(!other_stale.exists());
        assert!(live.exists());
        drop(writer);
        store.sweep();
        assert!(!live.exists(), "its writer gone");
    }

    /// The sorted names of the lock files under data dir `data`.
    fn lock_names(data: &Path) -> Vec<String> {
        let mut n: Vec<String> = fs::read_dir(data.join("locks"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn attachment_locks_go_with_their_attachment_and_stay_while_held() {
        let tmp = TempDir::new("state-attachment-locks");
        let data = tmp.path().join("data");
        let store = store_at(&data);
        let names = || lock_names(&data);
        store.save(&sample()).unwrap();
        let wait = Duration::from_millis(10);
        for id in ["abc123", "gone1"] {
            drop(store.lock_attachment("rdma-net", id, "net1", wait).unwrap());
        }
        let held = store
            .lock_attachment("rdma-net", "gone2", "net1", wait)
            .unwrap();
        // A file an earlier release left, found by its name alone.
        fs::write(data.join("locks/ipam-old-net-c9-eth0.lock"), b"").unwrap();
        assert_eq!(
            names(),
            [
                "ipam-old-net-c9-eth0.lock",
                "ipam-rdma-net-abc123-net1.lock",
                "ipam-rdma-net-gone1-net1.lock",
                "ipam-rdma-net-gone2-net1.lock",
            ]
        );
        let e = store
            .lock_attachment("rdma-net", "gone2", "net1", wait)
            .unwrap_err();
        assert_eq!(e.code(), 11);
        assert!(e.to_string().contains("IPAM plugin of gone2:net1"), "{e}");

        store.sweep();
        assert_eq!(
            names(),
            [
                "ipam-rdma-net-abc123-net1.lock",
                "ipam-rdma-net-gone2-net1.lock",
            ],
            "a recorded attachment's and a held one's stay"
        );
        store.remove_attachment_lock("rdma-net", "gone2", "net1");
        assert!(names().contains(&"ipam-rdma-net-gone2-net1.lock".to_string()));
        drop(held);
        store.remove_attachment_lock("rdma-net", "gone2", "net1");
        store.remove("rdma-net", "abc123", "net1").unwrap();
        store.sweep();
        assert_eq!(names(), Vec::<String>::new());
    }

    #[test]
    fn device_locks_stay_while_a_record_names_them_or_someone_holds_them() {
        let tmp = TempDir::new("state-device-locks");
        let data = tmp.path().join("data");
        let store = store_at(&data);
        let att = sample();
        store.save(&att).unwrap();
        let wait = Duration::from_millis(10);
        let held = store.lock_device("pci-0000_3b_00.7", wait).unwrap();
        for key in [att.device_key.as_str(), "pci-0000_3b_00.2"] {
            drop(store.lock_device(key, wait).unwrap());
        }
        store.sweep();
        let mut kept = vec![
            format!("{}.lock", att.device_key),
            "pci-0000_3b_00.7.lock".to_string(),
        ];
        kept.sort();
        assert_eq!(lock_names(&data), kept, "a free one no record names goes");

        drop(held);
        store
            .remove(&att.network, &att.container_id, &att.ifname)
            .unwrap();
        store.sweep();
        assert_eq!(lock_names(&data), Vec::<String>::new());
    }

    #[test]
    fn a_prepared_claims_lock_files_stay_until_it_is_gone() {
        let tmp = TempDir::new("state-claim-locks");
        let data = tmp.path().join("data");
        let store = store_at(&data);
        let claims = ClaimStore::new(&data);
        let claim: crate::records::claim::PreparedClaim =
            serde_json::from_value(serde_json::json!({
                "claim": {"namespace": "ns", "name": "c", "uid": "uid-1"},
                "devices": [{"request": "rdma", "pool": "node-a", "device": "eth-rail0",
                             "kind": "soft-roce", "netdev": "rail0",
                             "lockKey": "mac-52:54:00:1a:02:01"}]
            }))
            .unwrap();
        claims.save(&claim).unwrap();
        let wait = Duration::from_millis(10);
        for key in ["claim-uid-1", "mac-52:54:00:1a:02:01", "claim-uid-2"] {
            drop(store.lock_device(key, wait).unwrap());
        }
        let names = || lock_names(&data);
        store.sweep();
        assert_eq!(names(), ["claim-uid-1.lock", "mac-52:54:00:1a:02:01.lock"]);
        claims.remove("uid-1").unwrap();
        store.sweep();
        assert_eq!(names(), Vec::<String>::new());
    }

    #[test]
    fn symlinks_and_open_modes_under_the_data_dir_are_refused_or_narrowed() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = TempDir::new("state-links");
        let data = tmp.path().join("data");
        fs::create_dir_all(&data).unwrap();
        fs::set_permissions(&data, fs::Permissions::from_mode(0o777)).unwrap();
        let store = store_at(&data);
        store.save(&sample()).unwrap();
        let mode = fs::metadata(&data).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "a 0777 data dir is narrowed");

        let elsewhere = tmp.path().join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, data.join("evil-net")).unwrap();
        let mut att = sample();
        att.network = "evil-net".into();
        let e = store.save(&att).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);

        let target = tmp.path().join("lock-target");
        std::os::unix::fs::symlink(&target, data.join("locks/dev-x.lock")).unwrap_or_else(|_| {
            fs::create_dir_all(data.join("locks")).unwrap();
            std::os::unix::fs::symlink(&target, data.join("locks/dev-x.lock")).unwrap()
        });
        assert!(store
            .lock_device("dev-x", Duration::from_millis(10))
            .is_err());
        assert!(
            !target.exists(),
            "the lock's symlink target was not created"
        );
        assert!(store
            .lock_device("dev-y", Duration::from_millis(10))
            .is_ok());
    }

    #[test]
    fn save_load_list_remove_round_trip_with_private_dirs() {
        let tmp = TempDir::new("state");
        let store = store_at(tmp.path().join("data"));
        let att = sample();
        store.save(&att).unwrap();
        let back = store.load("rdma-net", "abc123", "net1").unwrap().unwrap();
        assert_eq!(back, att);
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(tmp.path().join("data/rdma-net"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let (all, errs) = store.list("rdma-net").unwrap();
        assert_eq!(all.len(), 1);
        assert!(errs.is_empty());
        assert_eq!(store.list_all().0.len(), 1);
        store.remove("rdma-net", "abc123", "net1").unwrap();
        store.remove("rdma-net", "abc123", "net1").unwrap();
        assert!(store.load("rdma-net", "abc123", "net1").unwrap().is_none());
        let leftovers: Vec<_> = fs::read_dir(tmp.path().join("data/rdma-net"))
            .unwrap()
            .collect();
        assert!(leftovers.is_empty(), "no temp files left behind");
    }

    #[test]
    fn the_appended_final_state_wins_and_a_torn_tail_leaves_the_intent() {
        let tmp = TempDir::new("state-update");
        let store = store_at(tmp.path());
        let mut att = sample();
        att.phase = Phase::Adding;
        att.pod_interface_mut().unwrap().ifindex = None;
        store.save(&att).unwrap();
        let intent = att.clone();
        att.phase = Phase::Ready;
        att.pod_interface_mut().unwrap().ifindex = Some(9);
        store.update(&att).unwrap();
        assert_eq!(store.load("rdma-net", "abc123", "net1").unwrap(), Some(att));

        // What a crash may leave of an unsynced append: part of the line, or zeros.
        let path = tmp.path().join("rdma-net/abc123:net1.json");
        let text = fs::read(&path).unwrap();
        let first = text.iter().position(|&b| b == b'\n').unwrap() + 1;
        for tail in [&text[first..text.len() - 20], &[0u8; 64][..]] {
            let mut torn = text[..first].to_vec();
            torn.extend_from_slice(tail);
            fs::write(&path, torn).unwrap();
            assert_eq!(
                store.load("rdma-net", "abc123", "net1").unwrap(),
                Some(intent.clone())
            );
        }

        // A record written by an earlier version: one pretty-printed document.
        fs::write(&path, serde_json::to_vec_pretty(&intent).unwrap()).unwrap();
        assert_eq!(
            store.load("rdma-net", "abc123", "net1").unwrap(),
            Some(intent.clone())
        );

        // No record to append to: written whole.
        store.remove("rdma-net", "abc123", "net1").unwrap();
        store.update(&intent).unwrap();
        assert_eq!(
            store.load("rdma-net", "abc123", "net1").unwrap(),
            Some(intent)
        );
    }

    #[test]
    fn names_cannot_escape_the_data_dir() {
        let tmp = TempDir::new("state-escape");
        let store = store_at(tmp.path());
        assert!(store.load("..", "abc", "net1").is_err());
        assert!(store.load("net", "../x", "net1").is_err());
        assert!(store.load("net", "abc", "a/b").is_err());
        assert!(store.load("net", "a:b", "x").is_err());
        assert!(store.lock_device("../x", Duration::from_millis(1)).is_err());
    }

    #[test]
    fn corrupt_records_are_reported_with_their_path() {
        let tmp = TempDir::new("state-corrupt");
        let store = store_at(tmp.path());
        store.ensure_dir(Some("n")).unwrap();
        fs::write(tmp.path().join("n/c:eth0.json"), b"{not json").unwrap();
        let err = store.load("n", "c", "eth0").unwrap_err();
        assert!(err.to_string().contains("c:eth0.json"), "{err}");
        let (ok, errs) = store.list("n").unwrap();
        assert!(ok.is_empty());
        assert_eq!(errs.len(), 1);
    }

    #[test]
    fn a_held_device_lock_times_out_with_code_11_and_frees_on_drop() {
        let tmp = TempDir::new("state-lock");
        let store = store_at(tmp.path());
        let held = store
            .lock_device("pci-0000_3b_00.2", Duration::from_millis(10))
            .unwrap();
        let err = store
            .lock_device("pci-0000_3b_00.2", Duration::from_millis(30))
            .unwrap_err();
        assert_eq!(err.code(), 11, "{err}");
        // A different device is not blocked.
        store
            .lock_device("pci-0000_3b_00.3", Duration::from_millis(10))
            .unwrap();
        drop(held);
        store
            .lock_device("pci-0000_3b_00.2", Duration::from_millis(10))
            .unwrap();
    }
}

//! What wakes the daemon between resyncs: rtnetlink link events (a VF appears, a netdev moves
//! away or is renamed, a port's carrier goes: RoCE and IPoIB port state follows it), RDMA
//! netlink notifications (an ib device registered, renamed or moved: the NOTIFY group of
//! kernels with RDMA_NLDEV_CMD_MONITOR), and inotify on the data dir (attachment records
//! written or removed by the CNI, prepared claims, failed ADDs).
//!
//! One blocking thread polls the three descriptors and pokes the daemon; the daemon coalesces
//! what arrives while it works. A source that cannot be opened (no RDMA netlink, an old
//! kernel without the NOTIFY group) is logged, and the resync covers it.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use netlink_sys::{Socket, SocketAddr};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::sync::Notify;

/// rtnetlink's link group (RTNLGRP_LINK).
const RTNLGRP_LINK: u32 = 1;
/// RDMA netlink's notification group (RDMA_NL_GROUP_NOTIFY, Linux 6.10's uapi; Debian 12's
/// headers predate it).
const RDMA_NL_GROUP_NOTIFY: u32 = 4;
const NETLINK_RDMA: isize = 20;

fn netlink(protocol: isize, group: u32, what: &str) -> Option<Socket> {
    let open = || -> std::io::Result<Socket> {
        let mut s = Socket::new(protocol)?;
        s.bind(&SocketAddr::new(0, 0))?;
        s.add_membership(group)?;
        s.set_non_blocking(true)?;
        Ok(s)
    };
    match open() {
        Ok(s) => Some(s),
        Err(e) => {
            crate::log_warn!("{what} events unavailable ({e}); relying on the periodic resync");
            None
        }
    }
}

/// Watches every directory of `data_dir` (and the dir itself, when it exists); new ones are added
/// as they come.
fn watch_dirs(inotify: &Inotify, data_dir: &Path) {
    let flags = AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MODIFY;
    let _ = inotify.add_watch(data_dir, flags);
    for entry in std::fs::read_dir(data_dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = inotify.add_watch(&entry.path(), flags);
        }
    }
}

/// Whether an inotify event names the driver's own note of a status it wrote: a pass that
/// writes one would otherwise wake the next, which finds nothing to do (on a one-vCPU node a
/// pass's sysfs reads and slice list are CPU a starting pod waits for). An event without a
/// name (the queue overflowed) is news.
fn own_status_note(name: Option<&std::ffi::OsStr>) -> bool {
    name.and_then(|n| n.to_str())
        .is_some_and(crate::records::claim::is_status_note)
}

/// Starts the watcher thread; `wake` is notified on every event but the driver's own status
/// notes.
pub fn spawn(data_dir: PathBuf, wake: Arc<Notify>) -> std::io::Result<()> {
    let route = netlink(
        netlink_sys::protocols::NETLINK_ROUTE,
        RTNLGRP_LINK,
        "rtnetlink",
    );
    let rdma = netlink(NETLINK_RDMA, RDMA_NL_GROUP_NOTIFY, "RDMA netlink");
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
        .map_err(std::io::Error::from)?;
    // Made here once, so that a node's first start has something to watch; the thread only
    // adds watches, or it would make again a dir that someone removed.
    let _ = std::fs::create_dir_all(&data_dir);
    watch_dirs(&inotify, &data_dir);
    std::thread::Builder::new()
        .name("rdma-ns-dra-events".into())
        .spawn(move || loop {
            let mut fds = vec![PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
            for s in [&route, &rdma].into_iter().flatten() {
                // The socket outlives this poll: it is owned by the thread's closure.
                let fd = unsafe { BorrowedFd::borrow_raw(s.as_raw_fd()) };
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
            }
            if nix::poll::poll(&mut fds, PollTimeout::NONE).is_err() {
                std::thread::sleep(std::time::Duration::from_millis(200));
                continue;
            }
            drop(fds);
            let mut buf = vec![0u8; 64 * 1024];
            let mut news = false;
            for s in [&route, &rdma].into_iter().flatten() {
                while matches!(s.recv(&mut &mut buf[..], 0), Ok(n) if n > 0) {
                    news = true;
                }
            }
            if let Ok(events) = inotify.read_events() {
                watch_dirs(&inotify, &data_dir);
                news |= events.iter().any(|e| !own_status_note(e.name.as_deref()));
            }
            if news {
                wake.notify_one();
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::claim::{ClaimRef, ClaimStore, StatusEntry, WrittenStatus};
    use crate::testutil::TempDir;
    use std::time::Duration;

    fn note(uid: &str) -> WrittenStatus {
        WrittenStatus {
            claim: ClaimRef {
                namespace: "team".into(),
                name: "rdma".into(),
                uid: uid.into(),
            },
            entries: vec![StatusEntry {
                pool: "node-a".into(),
                device: "rxe-eth1".into(),
                share_id: None,
            }],
        }
    }

    /// Whether `wake` is notified within `within`.
    fn woken(wake: &Arc<Notify>, within: Duration) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async { tokio::time::timeout(within, wake.notified()).await.is_ok() })
    }

    /// A pass that writes a claim's status notes it in the data dir first; that note must not
    /// wake the next pass, which would find nothing to do and only take a node's CPU (a pass
    /// reads sysfs and lists the slices). The CNI's records (the presence twin) still wake it.
    #[test]
    fn the_drivers_own_status_notes_do_not_wake_it_the_records_of_others_do() {
        let tmp = TempDir::new("dra-events-own");
        let store = ClaimStore::new(tmp.path());
        store.note_written_status(&note("c1")).unwrap();
        let wake = Arc::new(Notify::new());
        spawn(tmp.path().to_path_buf(), wake.clone()).unwrap();
        // Anything the watcher saw while it started is spent here.
        woken(&wake, Duration::from_millis(300));

        store.note_written_status(&note("c2")).unwrap();
        store.forget_written_status("c1").unwrap();
        assert!(
            !woken(&wake, Duration::from_secs(1)),
            "a status note the driver wrote woke it"
        );

        std::fs::write(store.dir().join("c3.add-error.json"), b"{}").unwrap();
        assert!(
            woken(&wake, Duration::from_secs(5)),
            "a failed ADD's record did not wake the driver"
        );
    }

    /// The data dir is made when the watcher starts (a node's first driver start), and never
    /// again by the watcher: a dir someone removed stays removed (the tests' own dirs were made
    /// again after their drop, and left in /tmp).
    #[test]
    fn the_data_dir_is_made_at_start_and_not_again_once_removed() {
        let tmp = TempDir::new("dra-events-made");
        let data_dir = tmp.path().join("data");
        let wake = Arc::new(Notify::new());
        spawn(data_dir.clone(), wake.clone()).unwrap();
        assert!(data_dir.is_dir(), "not made at start");

        std::fs::write(data_dir.join("c1.add-error.json"), b"{}").unwrap();
        assert!(
            woken(&wake, Duration::from_secs(5)),
            "the record did not wake it"
        );
        std::fs::remove_dir_all(&data_dir).unwrap();
        woken(&wake, Duration::from_secs(1));
        assert!(
            !data_dir.exists(),
            "the watcher made the removed data dir again"
        );
    }
}

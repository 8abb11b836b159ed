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

/// Watches every directory of `data_dir` (and the dir itself); new ones are added as they come.
fn watch_dirs(inotify: &Inotify, data_dir: &Path) {
    let flags = AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MODIFY;
    let _ = std::fs::create_dir_all(data_dir);
    let _ = inotify.add_watch(data_dir, flags);
    for entry in std::fs::read_dir(data_dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = inotify.add_watch(&entry.path(), flags);
        }
    }
}

/// Starts the watcher thread; `wake` is notified on every event.
pub fn spawn(data_dir: PathBuf, wake: Arc<Notify>) -> std::io::Result<()> {
    let route = netlink(
        netlink_sys::protocols::NETLINK_ROUTE,
        RTNLGRP_LINK,
        "rtnetlink",
    );
    let rdma = netlink(NETLINK_RDMA, RDMA_NL_GROUP_NOTIFY, "RDMA netlink");
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
        .map_err(std::io::Error::from)?;
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
            for s in [&route, &rdma].into_iter().flatten() {
                while matches!(s.recv(&mut &mut buf[..], 0), Ok(n) if n > 0) {}
            }
            if inotify.read_events().is_ok() {
                watch_dirs(&inotify, &data_dir);
            }
            wake.notify_one();
        })?;
    Ok(())
}

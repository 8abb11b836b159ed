//! SIGTERM and SIGINT as a readable fd (a self-pipe), for the subcommands that loop until
//! stopped: the exporter polls it beside its listener, `doctor --nfd --every` sleeps on it. A
//! pod is deleted with SIGTERM, so both end at once, between requests or refreshes.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The write end of the self-pipe, for the signal handler (async-signal-safe: an atomic load
/// and write(2)).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_stop_signal(_: nix::libc::c_int) {
    let fd = WAKE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: write(2) is async-signal-safe; the buffer is a live one-byte array. A full
        // pipe (EAGAIN) means a wake-up is already pending, which is all that is needed.
        unsafe {
            nix::libc::write(fd, [1u8].as_ptr().cast(), 1);
        }
    }
}

/// SIGTERM/SIGINT turned into a readable fd, so loops that poll can stop between requests.
pub struct Stop {
    read: OwnedFd,
    _write: OwnedFd,
}

impl Stop {
    /// Installs the handlers (once per process; a second call re-points them at its pipe).
    pub fn install() -> std::io::Result<Stop> {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
        let (read, write) = nix::unistd::pipe()?;
        for fd in [read.as_fd(), write.as_fd()] {
            fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
            fcntl(fd, FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
        }
        WAKE_FD.store(write.as_raw_fd(), Ordering::Relaxed);
        let action = SigAction::new(
            SigHandler::Handler(on_stop_signal),
            SaFlags::SA_RESTART,
            SigSet::empty(),
        );
        for sig in [Signal::SIGTERM, Signal::SIGINT] {
            // SAFETY: the handler only does async-signal-safe work (see on_stop_signal).
            unsafe { sigaction(sig, &action) }?;
        }
        Ok(Stop {
            read,
            _write: write,
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// Sleeps up to `timeout`; true when a stop signal came.
    pub fn wait(&self, timeout: Duration) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut fds = [PollFd::new(self.read.as_fd(), PollFlags::POLLIN)];
            match poll(
                &mut fds,
                PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX),
            ) {
                Ok(0) => return false,
                Ok(_) => return true,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return false,
            }
        }
    }
}

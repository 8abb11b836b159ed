//! The thread on which the daemon's passes read the node (sysfs, the records), at the lowest CPU
//! priority: nice 19.
//!
//! Nothing of a starting pod waits for a pass: the kubelet's prepare and the CNI's ADD do not,
//! and a claim's status names the pod's network seconds later either way. Yet passes run while
//! pods start, since a pod's links and records are what wake them. On the lab's one-vCPU TCG
//! node each took 70 to 200 ms of the CPU that the pod's runtime, kubelet and CNI were waiting
//! for (docs/benchmarks.md, kube-start). At nice 19 a pass takes the CPU they leave. On a node
//! that is never idle it still gets its share (a nice-19 thread weighs 1.5 % of a nice-0 one in
//! the scheduler), which is milliseconds a pass on a real node.
//!
//! A thread of its own, not tokio's blocking pool: Linux keeps the nice value per thread
//! (setpriority(2), NOTES), and a pool thread lowered once would later run a prepare, which the
//! kubelet waits for, at the same low priority; raising it again needs CAP_SYS_NICE, which the
//! driver's container drops. A pass's reads take no lock that the CNI or a prepare takes (the
//! records are read without one), so a pass held back by the scheduler holds nobody up.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;

/// The niceness of the passes' thread: the lowest priority.
pub const PASS_NICE: i32 = 19;

type Job = Box<dyn FnOnce() + Send>;

/// The low-priority thread, fed through a channel; it ends when this handle is dropped.
pub struct Background {
    jobs: mpsc::Sender<Job>,
}

impl Background {
    /// Starts the thread. A kernel that refuses the lower priority (it does not: raising one's
    /// own nice needs no privilege) leaves it at the process's, with a warning.
    pub fn spawn() -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("rdma-ns-dra-pass".into())
            .spawn(move || {
                lower_own_priority();
                for job in queue {
                    job();
                }
            })?;
        Ok(Background { jobs })
    }

    /// Runs `work` on the thread and returns what it returned; a panic in `work` is an error
    /// here, and the thread goes on.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(std::panic::catch_unwind(AssertUnwindSafe(work)));
        });
        self.jobs
            .send(job)
            .map_err(|_| "the passes' thread has ended".to_string())?;
        match result.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(_)) => Err("a pass's node read panicked".into()),
            Err(_) => Err("the passes' thread has ended".into()),
        }
    }
}

fn lower_own_priority() {
    let tid = nix::unistd::gettid().as_raw() as nix::libc::id_t;
    // SAFETY: setpriority reads its three integer arguments only.
    let rc = unsafe { nix::libc::setpriority(nix::libc::PRIO_PROCESS, tid, PASS_NICE) };
    if rc != 0 {
        crate::log_warn!(
            "the passes' thread stays at the driver's priority (setpriority to nice {PASS_NICE}: \
             {})",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Work runs on the thread and its value comes back; a panic is an error, and the thread
    /// runs the next work (a pass that panicked must not stop every later one).
    #[tokio::test]
    async fn work_comes_back_and_a_panic_does_not_end_the_thread() {
        let bg = Background::spawn().unwrap();
        assert_eq!(bg.run(|| 6 * 7).await.unwrap(), 42);
        let failed = bg.run(|| -> u32 { panic!("sysfs went away") }).await;
        assert_eq!(failed.unwrap_err(), "a pass's node read panicked");
        assert_eq!(bg.run(|| "again").await.unwrap(), "again");
    }
}

//! Waiting for work completions by kind, the way `ibv_rc_pingpong` does: each wait polls no
//! more completions than it still needs, counts sends and receives apart, and keeps a
//! completion that came before a wait wanted it for the wait that does.
//!
//! A ping-pong peer has a send and a receive outstanding at once, and one CQ serves both: the
//! completion of its reply and the peer's next message can be ready in the same poll. Counted
//! as one number, the receive would satisfy the wait for the send and then be gone.

use std::io;
use std::time::{Duration, Instant};

use crate::verbs::VerbsError;

/// What a completion finished, told apart by the `wr_id` its work request was posted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// From the send queue: a SEND or an RDMA WRITE.
    Send,
    /// From the receive queue: a posted receive that a peer's SEND filled.
    Recv,
}

/// A number of completions of each kind: what a wait wants, or what came before it was wanted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Completions {
    pub sends: usize,
    pub recvs: usize,
}

impl Completions {
    pub fn sends(n: usize) -> Self {
        Completions { sends: n, recvs: 0 }
    }

    pub fn recvs(n: usize) -> Self {
        Completions { sends: 0, recvs: n }
    }

    fn total(&self) -> usize {
        self.sends + self.recvs
    }

    fn of(&mut self, kind: Work) -> &mut usize {
        match kind {
            Work::Send => &mut self.sends,
            Work::Recv => &mut self.recvs,
        }
    }

    /// Takes from `self` as many of each kind as `missing` lacks.
    fn hand_over(&mut self, missing: &mut Completions) {
        for kind in [Work::Send, Work::Recv] {
            let n = (*self.of(kind)).min(*missing.of(kind));
            *self.of(kind) -= n;
            *missing.of(kind) -= n;
        }
    }
}

/// A completion queue to poll: `ibv_poll_cq` for an endpoint.
pub trait PollCq {
    /// Fills `room` with the kinds of at most `room.len()` completions, oldest first, and says
    /// how many it took off the queue. A completion with an error status is an error.
    fn poll(&mut self, room: &mut [Work]) -> Result<usize, VerbsError>;

    /// The device the queue belongs to, for errors.
    fn device(&self) -> &str;
}

/// The completions one CQ delivered before any wait wanted them.
#[derive(Debug, Default)]
pub struct Waiter {
    early: Completions,
}

impl Waiter {
    /// Waits until `want` completions of each kind have come from `cq` (or from earlier polls),
    /// busy polling, bounded by `deadline`.
    pub fn wait(
        &mut self,
        cq: &mut impl PollCq,
        want: Completions,
        deadline: Instant,
    ) -> Result<(), VerbsError> {
        let mut missing = want;
        self.early.hand_over(&mut missing);
        let mut slots = [Work::Send; 8];
        let spinning_until = Instant::now() + SPIN;
        while missing.total() > 0 {
            let room_len = missing.total().min(slots.len());
            let room = &mut slots[..room_len];
            let got = cq.poll(room)?;
            for kind in &room[..got] {
                let slot = missing.of(*kind);
                if *slot > 0 {
                    *slot -= 1;
                } else {
                    *self.early.of(*kind) += 1;
                }
            }
            if got == 0 {
                if Instant::now() >= deadline {
                    return Err(timed_out(cq.device(), want, missing));
                }
                idle(spinning_until);
            }
        }
        Ok(())
    }
}

/// How long a completion wait busy-polls before it starts sleeping between polls.
const SPIN: Duration = Duration::from_millis(2);

/// Spin briefly for latency, then sleep between polls: a software RDMA device (rxe) produces
/// its completions on the machine's own CPUs, and on few of them (a VM, a busy node) a waiter
/// that never yields takes a CPU from the kernel workers it waits for.
fn idle(spinning_until: Instant) {
    if Instant::now() < spinning_until {
        std::hint::spin_loop();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

fn timed_out(dev: &str, want: Completions, missing: Completions) -> VerbsError {
    let mut counts = Vec::new();
    for (kind, wanted, lacking) in [
        ("send", want.sends, missing.sends),
        ("receive", want.recvs, missing.recvs),
    ] {
        if wanted > 0 {
            counts.push(format!("{} of {wanted} {kind}", wanted - lacking));
        }
    }
    VerbsError {
        call: "ibv_poll_cq",
        dev: dev.to_string(),
        err: io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{} completions before the deadline", counts.join(" and ")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// A CQ holding the completions a test put there; it notes how many each poll asked for.
    #[derive(Default)]
    struct ScriptedCq {
        ready: VecDeque<Work>,
        asked: Vec<usize>,
    }

    impl ScriptedCq {
        fn holding(kinds: &[Work]) -> Self {
            ScriptedCq {
                ready: kinds.iter().copied().collect(),
                asked: Vec::new(),
            }
        }
    }

    impl PollCq for ScriptedCq {
        fn poll(&mut self, room: &mut [Work]) -> Result<usize, VerbsError> {
            self.asked.push(room.len());
            let n = room.len().min(self.ready.len());
            for slot in &mut room[..n] {
                *slot = self.ready.pop_front().expect("counted");
            }
            Ok(n)
        }

        fn device(&self) -> &str {
            "rxe0"
        }
    }

    /// A deadline already passed: a wait that needs one more poll than the CQ can answer
    /// fails at once instead of hanging the test.
    fn now() -> Instant {
        Instant::now()
    }

    #[test]
    fn a_send_and_the_next_receive_in_one_poll_are_both_kept() {
        // The listener's iteration: the peer's message, then its reply's send completion, which
        // the same poll can return together with the peer's next message.
        let mut waiter = Waiter::default();
        let mut cq = ScriptedCq::holding(&[Work::Recv]);
        waiter.wait(&mut cq, Completions::recvs(1), now()).unwrap();
        cq.ready.extend([Work::Send, Work::Recv]);
        waiter.wait(&mut cq, Completions::sends(1), now()).unwrap();
        waiter
            .wait(&mut cq, Completions::recvs(1), now())
            .expect("the next iteration's receive was not lost");
        assert!(cq.ready.is_empty());
    }

    #[test]
    fn a_receive_polled_while_waiting_for_a_send_serves_the_next_wait() {
        let mut waiter = Waiter::default();
        let mut cq = ScriptedCq::holding(&[Work::Recv, Work::Send]);
        waiter.wait(&mut cq, Completions::sends(1), now()).unwrap();
        assert_eq!(cq.asked, [1, 1], "one completion asked for at a time");
        assert!(cq.ready.is_empty());
        waiter.wait(&mut cq, Completions::recvs(1), now()).unwrap();
        assert_eq!(cq.asked, [1, 1], "the kept receive needed no poll");
        // Kept once, used once: the next receive must come from the CQ again.
        let err = waiter
            .wait(&mut cq, Completions::recvs(1), now())
            .unwrap_err();
        assert_eq!(err.err.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn a_wait_never_polls_more_than_it_still_needs() {
        let mut waiter = Waiter::default();
        let mut cq = ScriptedCq::holding(&[Work::Send; 12]);
        let want = Completions {
            sends: 10,
            recvs: 1,
        };
        let err = waiter.wait(&mut cq, want, now()).unwrap_err();
        // 8 at most per poll, then what is left: 3 (2 sends and the receive), then 1.
        assert_eq!(cq.asked, [8, 3, 1, 1]);
        assert_eq!(
            err.to_string(),
            "ibv_poll_cq on rxe0: 10 of 10 send and 0 of 1 receive completions before the \
             deadline"
        );
        // The two sends beyond the ten wanted were kept, not dropped.
        waiter.wait(&mut cq, Completions::sends(2), now()).unwrap();
    }

    #[test]
    fn the_timeout_names_only_the_kinds_waited_for() {
        let mut waiter = Waiter::default();
        let mut cq = ScriptedCq::default();
        let err = waiter
            .wait(&mut cq, Completions::recvs(1), now())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "ibv_poll_cq on rxe0: 0 of 1 receive completions before the deadline"
        );
        let mut cq = ScriptedCq::holding(&[Work::Send]);
        let both = Completions { sends: 1, recvs: 1 };
        let err = waiter.wait(&mut cq, both, now()).unwrap_err();
        assert!(
            err.to_string()
                .contains("1 of 1 send and 0 of 1 receive completions"),
            "{err}"
        );
    }
}

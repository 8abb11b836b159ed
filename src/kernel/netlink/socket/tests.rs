//! The exchange loop over a datagram socketpair whose other end plays the kernel.

use std::os::fd::{FromRawFd, IntoRawFd};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use netlink_packet_core::{NLMSG_DONE, NLMSG_ERROR, NLM_F_MULTIPART};

use super::*;

const DATA_TYPE: u16 = 0x1401;

fn nlmsg(message_type: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&(16 + payload.len() as u32).to_ne_bytes());
    m.extend_from_slice(&message_type.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(payload);
    m
}

/// A request as the plugin frames one: a bare header, its sequence number at bytes 8..12.
fn request(seq: u32) -> Vec<u8> {
    nlmsg(DATA_TYPE, 0, seq, &[])
}

fn seq_of(msg: &[u8]) -> u32 {
    u32::from_ne_bytes(msg[8..12].try_into().unwrap())
}

fn done(seq: u32) -> Vec<u8> {
    nlmsg(NLMSG_DONE, NLM_F_MULTIPART, seq, &0i32.to_ne_bytes())
}

/// Our socket on one end of a pair; the other end is the fake kernel.
fn pair() -> (NlSocket<Rdma>, UnixDatagram) {
    let (ours, kernel) = UnixDatagram::pair().unwrap();
    // SAFETY: the fd was just taken out of `ours`, so the Socket is its only owner.
    let sock = unsafe { Socket::from_raw_fd(ours.into_raw_fd()) };
    (NlSocket::wrap(sock), kernel)
}

/// Answers each request with one dump part (flagged interrupted for the first `interrupted`
/// requests, its payload the request's number) and NLMSG_DONE; returns the sequence numbers
/// it was sent.
fn fake_dumps(kernel: UnixDatagram, requests: usize, interrupted: usize) -> Vec<u32> {
    let mut seqs = Vec::new();
    let mut buf = [0u8; 256];
    for n in 0..requests {
        let len = kernel.recv(&mut buf).unwrap();
        let seq = seq_of(&buf[..len]);
        seqs.push(seq);
        let mut flags = NLM_F_MULTIPART;
        if n < interrupted {
            flags |= NLM_F_DUMP_INTR;
        }
        // A leftover of an older request first, as after an error mid-dump.
        kernel
            .send(&nlmsg(DATA_TYPE, flags, seq - 1, b"old!"))
            .unwrap();
        let number = (n as u32).to_ne_bytes();
        kernel.send(&nlmsg(DATA_TYPE, flags, seq, &number)).unwrap();
        kernel.send(&done(seq)).unwrap();
    }
    seqs
}

#[test]
fn an_interrupted_dump_is_sent_again_under_a_new_sequence_number() {
    let (mut sock, kernel) = pair();
    let fake = std::thread::spawn(move || fake_dumps(kernel, 3, 2));
    let replies = sock.request(request).unwrap();
    assert_eq!(fake.join().unwrap(), vec![1, 2, 3]);
    // Only the third, uninterrupted answer comes back, without the leftovers.
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].message_type, DATA_TYPE);
    assert_eq!(replies[0].payload, 2u32.to_ne_bytes());
}

#[test]
fn a_dump_interrupted_every_time_fails_with_eintr() {
    let (mut sock, kernel) = pair();
    let fake = std::thread::spawn(move || fake_dumps(kernel, DUMP_ATTEMPTS, DUMP_ATTEMPTS));
    let err = sock.request(request).unwrap_err();
    assert_eq!(fake.join().unwrap().len(), DUMP_ATTEMPTS);
    assert_eq!(err.errno, libc::EINTR);
    assert!(err.ext_ack.unwrap().contains("NLM_F_DUMP_INTR"));
}

#[test]
fn replies_the_caller_does_not_keep_are_dropped_but_still_checked_for_interruption() {
    let (mut sock, kernel) = pair();
    let fake = std::thread::spawn(move || fake_dumps(kernel, 2, 1));
    let replies = sock.request_keeping(request, |_, _| false).unwrap();
    assert_eq!(fake.join().unwrap(), vec![1, 2]);
    assert!(replies.is_empty());
}

#[test]
fn an_error_reply_ends_the_exchange_with_its_errno() {
    let (mut sock, kernel) = pair();
    let fake = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        let len = kernel.recv(&mut buf).unwrap();
        let mut payload = (-libc::EBUSY).to_ne_bytes().to_vec();
        payload.extend_from_slice(&buf[..16]);
        let capped = 0x100; // NLM_F_CAPPED
        kernel
            .send(&nlmsg(NLMSG_ERROR, capped, seq_of(&buf[..len]), &payload))
            .unwrap();
    });
    let err = sock.request(request).unwrap_err();
    fake.join().unwrap();
    assert_eq!(
        err,
        NlError {
            errno: libc::EBUSY,
            ext_ack: None
        }
    );
}

#[test]
fn retry_eintr_repeats_only_interrupted_calls() {
    let mut calls = 0;
    let out = retry_eintr(|| {
        calls += 1;
        if calls < 3 {
            Err(io::Error::from_raw_os_error(libc::EINTR))
        } else {
            Ok(calls)
        }
    });
    assert_eq!(out.unwrap(), 3);
    let mut calls = 0;
    let err = retry_eintr(|| -> io::Result<()> {
        calls += 1;
        Err(io::Error::from_raw_os_error(libc::EAGAIN))
    })
    .unwrap_err();
    assert_eq!((calls, err.raw_os_error()), (1, Some(libc::EAGAIN)));
}

static SIGNALS: AtomicUsize = AtomicUsize::new(0);

extern "C" fn count_signal(_: libc::c_int) {
    SIGNALS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn a_signal_while_waiting_for_the_reply_does_not_fail_the_request() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    // No SA_RESTART: the blocked recv(2) returns EINTR instead of being restarted by libc.
    let action = SigAction::new(
        SigHandler::Handler(count_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler only touches an atomic; no other test uses SIGUSR2.
    unsafe { sigaction(Signal::SIGUSR2, &action) }.unwrap();
    let (mut sock, kernel) = pair();
    /// musl's pthread_t is a pointer, which is not Send; the id is only handed to pthread_kill.
    struct Thread(libc::pthread_t);
    // SAFETY: the id is never dereferenced, only passed back to pthread_kill.
    unsafe impl Send for Thread {}
    // SAFETY: pthread_self has no preconditions.
    let waiting = Thread(unsafe { libc::pthread_self() });
    let fake = std::thread::spawn(move || {
        let waiting = waiting;
        let mut buf = [0u8; 64];
        let len = kernel.recv(&mut buf).unwrap();
        let seq = seq_of(&buf[..len]);
        // The requester is blocked in recv by now; interrupt it twice, then answer.
        for _ in 0..2 {
            std::thread::sleep(Duration::from_millis(50));
            // SAFETY: the requesting thread outlives this one (it joins it).
            let rc = unsafe { libc::pthread_kill(waiting.0, libc::SIGUSR2) };
            assert_eq!(rc, 0);
        }
        std::thread::sleep(Duration::from_millis(50));
        let mut ack = 0i32.to_ne_bytes().to_vec();
        ack.extend_from_slice(&buf[..16]);
        kernel.send(&nlmsg(NLMSG_ERROR, 0x100, seq, &ack)).unwrap();
    });
    let before = SIGNALS.load(Ordering::SeqCst);
    let replies = sock.request(request).unwrap();
    fake.join().unwrap();
    assert!(replies.is_empty());
    assert_eq!(SIGNALS.load(Ordering::SeqCst) - before, 2);
}

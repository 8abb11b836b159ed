//! `rdma-ns exporter [--listen ADDR] [--sysfs DIR] [--data-dir DIR]...`: serves the
//! Prometheus text format of [`rdma_ns::node::metrics`] on `GET /metrics`.
//!
//! One thread, blocking sockets, one request per connection (`Connection: close`): a scrape
//! every few seconds needs no more, and the CNI binary links no async runtime. Every request is
//! bounded: a read timeout, a write timeout and a cap on the request head, so a client that
//! stalls or sends too much costs at most those bounds. SIGTERM and SIGINT stop it between
//! requests (a self-pipe wakes the poll on the listener), so the pod ends at once on delete.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::stop::Stop;
use rdma_ns::kernel::sysfs::SysRoot;
use rdma_ns::node::metrics::{Scraper, Sources};

/// The request head (request line and headers) a scrape needs fits easily; anything longer is
/// refused with 431 before it is read further.
pub const MAX_REQUEST: usize = 8192;
/// How long a client may take to send its request, and to take the response.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

const USAGE: &str = "usage: rdma-ns exporter [--listen ADDR] [--sysfs DIR] [--data-dir DIR]...\n\
  --listen ADDR   where to serve /metrics: `:9100` (default, every address), `127.0.0.1:9100`, `[::]:9100`\n\
  --sysfs DIR     read this tree instead of /sys (a copy or a test fixture)\n\
  --data-dir DIR  attachment records (default /var/lib/cni/rdma-ns; repeat for each conf dataDir)";

pub fn run(args: &[OsString]) -> ExitCode {
    let mut listen = ":9100".to_string();
    let mut sys = SysRoot::default();
    let mut data_dirs = Vec::new();
    let read = super::read_flags("exporter", USAGE, args, |flag, flags| {
        match flag {
            "--listen" => listen = flags.value()?.to_string(),
            "--sysfs" => sys = SysRoot::new(flags.value()?),
            "--data-dir" => data_dirs.push(flags.value()?.into()),
            _ => return Err(flags.unknown()),
        }
        Ok(())
    });
    if let Err(exit) = read {
        return exit;
    }
    if data_dirs.is_empty() {
        data_dirs.push(PathBuf::from(rdma_ns::attach::store::DEFAULT_DATA_DIR));
    }
    let addr = match parse_listen(&listen) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rdma-ns exporter: --listen {listen:?}: {e}");
            return ExitCode::from(2);
        }
    };
    let stop = match Stop::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rdma-ns exporter: cannot install the SIGTERM handler: {e}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "rdma-ns exporter: cannot listen on {addr}: {e} (another exporter on the port? \
                 pick another with --listen)"
            );
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "rdma-ns exporter: serving http://{}/metrics",
        listener.local_addr().unwrap_or(addr)
    );
    let src = Sources { sys, data_dirs };
    match serve(&listener, stop.fd(), src) {
        Ok(()) => {
            eprintln!("rdma-ns exporter: stopped by signal");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rdma-ns exporter: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `:9100` listens on every IPv4 address (as Prometheus exporters conventionally do); anything
/// else is a host:port.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_string(),
    };
    full.to_socket_addrs()
        .map_err(|e| format!("not host:port ({e})"))?
        .next()
        .ok_or_else(|| "resolves to no address".to_string())
}

/// Serves until `stop` becomes readable. Errors of one connection are logged and the loop goes
/// on; only a failing listener ends it.
pub fn serve(listener: &TcpListener, stop: BorrowedFd<'_>, src: Sources) -> std::io::Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    // Reused between scrapes: the text has about the same size every time, so after the first
    // scrape no buffer grows.
    let mut body = Vec::new();
    let mut scraper = Scraper::new(src);
    let mut head = Vec::with_capacity(MAX_REQUEST);
    loop {
        let mut fds = [
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop, PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        if fds[1].any().unwrap_or(false) {
            return Ok(());
        }
        if !fds[0].any().unwrap_or(false) {
            continue;
        }
        let (stream, peer) = match listener.accept() {
            Ok(s) => s,
            // A client that went away between poll and accept, or fd exhaustion: wait for the
            // next one rather than stop serving.
            Err(e) => {
                eprintln!("rdma-ns exporter: accept: {e}");
                continue;
            }
        };
        if let Err(e) = handle(stream, &mut scraper, &mut head, &mut body) {
            eprintln!("rdma-ns exporter: {peer}: {e}");
        }
    }
}

/// How reading a request head ended.
enum Head {
    /// The blank line that ends it came.
    Complete,
    /// [`MAX_REQUEST`] bytes and still no end.
    TooLarge,
    /// The client closed before the end.
    Closed,
}

fn handle(
    mut stream: TcpStream,
    scraper: &mut Scraper,
    head: &mut Vec<u8>,
    body: &mut Vec<u8>,
) -> std::io::Result<()> {
    // A response larger than the socket's buffer goes out in several writes: with Nagle's
    // algorithm the last segment would wait for the client's delayed ACK of the previous one.
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    match read_head(&mut stream, head)? {
        Head::Complete => {}
        Head::TooLarge => {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"request too large\n",
                false,
            )
        }
        Head::Closed => return Ok(()),
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end().split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    answer(&mut stream, method, path, scraper, body)
}

/// Reads into `head` until the blank line that ends it, within the size cap and the deadline
/// (the per-read timeout alone would let a client trickle one byte at a time forever).
fn read_head(stream: &mut TcpStream, head: &mut Vec<u8>) -> std::io::Result<Head> {
    head.clear();
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut buf = [0u8; 1024];
    loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Ok(Head::Complete);
        }
        if head.len() >= MAX_REQUEST {
            return Ok(Head::TooLarge);
        }
        if Instant::now() >= deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "request head not complete in time",
            ));
        }
        let room = (MAX_REQUEST - head.len()).min(buf.len());
        match stream.read(&mut buf[..room]) {
            Ok(0) => return Ok(Head::Closed),
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The response to `method` on `path`: the metrics, a pointer to them, 404 or 405.
fn answer(
    stream: &mut TcpStream,
    method: &str,
    path: &str,
    scraper: &mut Scraper,
    body: &mut Vec<u8>,
) -> std::io::Result<()> {
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return respond(
            stream,
            "405 Method Not Allowed",
            "text/plain",
            b"GET /metrics\n",
            false,
        );
    }
    match path {
        "/metrics" => {
            scraper.render(body);
            respond(
                stream,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                body,
                head_only,
            )
        }
        "/" => respond(
            stream,
            "200 OK",
            "text/plain; charset=utf-8",
            b"rdma-ns exporter: metrics at /metrics\n",
            head_only,
        ),
        _ => respond(
            stream,
            "404 Not Found",
            "text/plain",
            b"not found; try /metrics\n",
            head_only,
        ),
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    let header = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let body = if head_only { b"" } else { body };
    write_all_vectored(stream, [header.as_bytes(), body])?;
    stream.flush()
}

/// Writes both parts in as few writev(2) calls as the socket takes: header and body leave in
/// one go, so the client is woken for the response once rather than for its header first.
fn write_all_vectored(stream: &mut TcpStream, mut parts: [&[u8]; 2]) -> std::io::Result<()> {
    use std::io::IoSlice;
    while !parts[0].is_empty() || !parts[1].is_empty() {
        let n = match stream.write_vectored(&[IoSlice::new(parts[0]), IoSlice::new(parts[1])]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let first = n.min(parts[0].len());
        parts = [&parts[0][first..], &parts[1][n - first..]];
    }
    Ok(())
}

#[cfg(test)]
mod tests;

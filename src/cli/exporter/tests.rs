//! The exporter scraped over HTTP on 127.0.0.1 (an ephemeral port, loopback only), with every
//! wait bounded: client timeouts, and the server thread joined through a channel with a
//! deadline.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc;
use std::time::Duration;

use rdma_ns::kernel::topology::fixtures::SysfsFixture;

use super::*;

const PF_PORT: &str = "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/infiniband/mlx5_0/ports/1";

struct Server {
    addr: SocketAddr,
    wake: OwnedFd,
    done: mpsc::Receiver<std::io::Result<()>>,
}

impl Server {
    fn start(fx: &SysfsFixture) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (read, wake) = nix::unistd::pipe().unwrap();
        let src = Sources {
            sys: fx.root().clone(),
            data_dirs: vec![fx.path().join("no-records")],
        };
        let (tx, done) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(serve(&listener, read.as_fd(), src));
        });
        Server { addr, wake, done }
    }

    /// Sends `request` raw and returns the whole response (the server closes after one).
    fn send(&self, request: &[u8]) -> String {
        let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        // The server may answer and close before taking all of an oversized request.
        let _ = s.write_all(request);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8(out).unwrap()
    }

    fn get(&self, path: &str) -> (String, String) {
        let resp = self.send(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        let (head, body) = resp
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("{resp:?}"));
        (head.to_string(), body.to_string())
    }

    fn stop(self) {
        nix::unistd::write(&self.wake, &[1]).unwrap();
        let r = self
            .done
            .recv_timeout(Duration::from_secs(10))
            .expect("the server stops within 10 s of the stop signal");
        r.unwrap();
    }
}

fn set_counters(fx: &SysfsFixture, words: u64) {
    fx.write_attr(
        format!("{PF_PORT}/counters/port_xmit_data"),
        &words.to_string(),
    )
    .unwrap();
    fx.write_attr(
        format!("{PF_PORT}/counters/port_rcv_data"),
        &words.to_string(),
    )
    .unwrap();
    fx.write_attr(
        format!("{PF_PORT}/hw_counters/out_of_buffer"),
        &(words / 10).to_string(),
    )
    .unwrap();
}

/// Every sample line's family was announced by `# HELP` and `# TYPE` lines before it, once.
fn samples(body: &str) -> Vec<(String, String, f64)> {
    let mut types = std::collections::BTreeMap::new();
    let mut out = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "{line}"
            );
        } else if !line.starts_with("# HELP ") {
            let (series, v) = line.rsplit_once(' ').unwrap();
            let name = series.split('{').next().unwrap();
            let kind = types
                .get(name)
                .unwrap_or_else(|| panic!("no TYPE before {line}"));
            out.push((series.to_string(), kind.clone(), v.parse().unwrap()));
        }
    }
    out
}

#[test]
fn metrics_over_http_and_counters_grow_between_scrapes() {
    let fx = SysfsFixture::all().unwrap();
    set_counters(&fx, 100);
    let server = Server::start(&fx);
    let (head, first) = server.get("/metrics");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(
        head.contains(&format!("Content-Length: {}", first.len())),
        "{head}"
    );
    assert!(first.contains("rdma_port_transmit_bytes_total{device=\"mlx5_0\",port=\"1\"} 400\n"));
    set_counters(&fx, 250);
    let (_, second) = server.get("/metrics?x=1");
    let before = samples(&first);
    let after: std::collections::BTreeMap<String, f64> = samples(&second)
        .into_iter()
        .map(|(s, _, v)| (s, v))
        .collect();
    let mut grew = 0;
    for (series, kind, v) in &before {
        if kind == "counter" {
            assert!(after[series] >= *v, "{series} went back");
            grew += usize::from(after[series] > *v);
        }
    }
    assert_eq!(grew, 3, "xmit, rcv and out_of_buffer grew");
    server.stop();
}

#[test]
fn other_paths_methods_and_oversized_requests_are_refused() {
    let fx = SysfsFixture::all().unwrap();
    let server = Server::start(&fx);
    assert!(server.get("/nope").0.starts_with("HTTP/1.1 404 "));
    assert!(server.get("/").0.starts_with("HTTP/1.1 200 "));
    let post = server.send(b"POST /metrics HTTP/1.1\r\n\r\n");
    assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
    let head = server.send(b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert!(
        head.starts_with("HTTP/1.1 200 ") && head.ends_with("\r\n\r\n"),
        "{head}"
    );
    let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    big.resize(MAX_REQUEST + 4096, b'a');
    let resp = server.send(&big);
    assert!(resp.starts_with("HTTP/1.1 431 "), "{resp}");
    // A client that connects and leaves without a request does not stop the server.
    drop(TcpStream::connect(server.addr).unwrap());
    assert!(server.get("/metrics").0.starts_with("HTTP/1.1 200 "));
    server.stop();
}

#[test]
fn listen_addresses() {
    assert_eq!(parse_listen(":9100").unwrap().to_string(), "0.0.0.0:9100");
    assert_eq!(
        parse_listen("127.0.0.1:9200").unwrap().to_string(),
        "127.0.0.1:9200"
    );
    assert_eq!(
        parse_listen("[::1]:9100").unwrap().to_string(),
        "[::1]:9100"
    );
    assert!(parse_listen("nonsense").is_err());
}

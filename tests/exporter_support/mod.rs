//! A long-running subcommand as its tests drive it: the exporter started on an ephemeral
//! loopback port (its first stderr line names the address it bound), scraped over HTTP, and
//! stopped by SIGTERM; and the bounded wait for any child to exit. Shared by `node_cli` (root
//! tier, fixture sysfs) and `vm_node` (VM tier, real rxe), so both read the exporter alike.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// A running `rdma-ns exporter`, killed and reaped on drop whatever the test did.
pub struct Exporter {
    child: Child,
    addr: String,
}

impl Exporter {
    /// Runs `bin exporter --listen 127.0.0.1:0` with `args` and waits for the line naming the
    /// bound address.
    pub fn start<S: AsRef<OsStr>>(bin: impl AsRef<Path>, args: &[S]) -> Exporter {
        let mut child = Command::new(bin.as_ref())
            .args(["exporter", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("exec rdma-ns exporter");
        let mut line = String::new();
        BufReader::new(child.stderr.as_mut().expect("stderr is piped"))
            .read_line(&mut line)
            .expect("read the exporter's first line");
        let addr = line
            .trim()
            .strip_prefix("rdma-ns exporter: serving http://")
            .and_then(|r| r.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("want `serving http://ADDR/metrics`, got {line:?}"))
            .to_string();
        Exporter { child, addr }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// One `GET /metrics`: the whole HTTP response, head and body.
    pub fn get(&self, timeout: Duration) -> String {
        let mut s = TcpStream::connect(&self.addr).expect("connect to the exporter");
        s.set_read_timeout(Some(timeout)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// One scrape that must answer 200: each series (name and labels) with its value.
    pub fn series(&self, timeout: Duration) -> BTreeMap<String, f64> {
        let text = self.get(timeout);
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let (k, v) = l.rsplit_once(' ').unwrap_or_else(|| panic!("{l:?}"));
                (k.to_string(), v.parse().unwrap_or_else(|_| panic!("{l:?}")))
            })
            .collect()
    }

    /// SIGTERM, then its exit status within `within`.
    pub fn stop(mut self, within: Duration) -> ExitStatus {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM).unwrap();
        wait_exit(&mut self.child, within)
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The exit status of `child` within `within`; past it the child is killed and the test fails.
pub fn wait_exit(child: &mut Child, within: Duration) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

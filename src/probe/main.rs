//! `rdma-ns-probe`: a verbs readiness probe for a pod's RDMA (built with `--features verbs`;
//! links libibverbs through rdma-sys, which the CNI binary never does).
//!
//! Without `--listen`/`--connect` it checks every usable ib port `rdma-ns env` would name (or
//! the one `--device`/`--gid-index` name): opens the device, queries the port (state, active
//! MTU) and its GID table, checks that the GID at the chosen index is the one the kernel's
//! sysfs table holds for the pod's address, and brings an RC QP through INIT and RTR (aimed
//! at itself) to RTS on that index. With `--listen PORT` / `--connect HOST:PORT` two probes
//! exchange QP numbers and GIDs over TCP, then run a SEND ping-pong (latency) and an RDMA
//! WRITE stream (bandwidth) whose data the listener verifies.
//!
//! Prints one JSON document on stdout. Exit status: 0 ready (or the exchange succeeded), 1 not
//! ready (each problem named on stderr), 2 usage: what a Kubernetes exec readiness probe wants.

mod completions;
mod verbs;

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv6Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rdma_ns::discover::{self, ProblemKind};
use rdma_ns::kernel::rtnetlink::RealKernel;
use rdma_ns::kernel::sysfs::SysRoot;
use rdma_ns::kernel::topology::RdmaSysfs;
use serde_json::{json, Value};

use completions::Completions;
use verbs::{Context, Endpoint, PeerInfo};

const USAGE: &str = "usage: rdma-ns-probe [--device DEV --gid-index N [--ib-port P]] \
    [--listen PORT | --connect HOST:PORT] [--iters N] [--size BYTES] [--timeout-ms MS]";

struct Args {
    device: Option<String>,
    gid_index: Option<u32>,
    ib_port: u8,
    listen: Option<u16>,
    connect: Option<String>,
    iters: usize,
    size: usize,
    timeout: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        device: None,
        gid_index: None,
        ib_port: 1,
        listen: None,
        connect: None,
        iters: 1000,
        size: 65536,
        timeout: Duration::from_secs(10),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        let num = |v: String| {
            v.parse::<u64>()
                .map_err(|_| format!("{arg} {v}: not a number"))
        };
        match arg.as_str() {
            "--device" => a.device = Some(val()?),
            "--gid-index" => a.gid_index = Some(num(val()?)? as u32),
            "--ib-port" => a.ib_port = num(val()?)? as u8,
            "--listen" => a.listen = Some(num(val()?)? as u16),
            "--connect" => a.connect = Some(val()?),
            "--iters" => a.iters = num(val()?)?.max(1) as usize,
            "--size" => a.size = num(val()?)?.clamp(64, 1 << 30) as usize,
            "--timeout-ms" => a.timeout = Duration::from_millis(num(val()?)?),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.device.is_some() != a.gid_index.is_some() {
        return Err("--device and --gid-index go together".into());
    }
    if a.listen.is_some() && a.connect.is_some() {
        return Err("--listen or --connect, not both".into());
    }
    Ok(a)
}

/// One ib port to check, with what rdma-ns read from sysfs for it.
struct Target {
    dev: String,
    port: u8,
    gid_index: u32,
    /// The GID the kernel's sysfs table holds at `gid_index`.
    sysfs_gid: Option<Ipv6Addr>,
    ifname: Option<String>,
    netdev_mtu: Option<u32>,
    roce: bool,
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(m) if m.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(m) => {
            eprintln!("rdma-ns-probe: {m}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut problems: Vec<String> = Vec::new();
    let targets = match targets(&args, &mut problems) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("rdma-ns-probe: {e}");
            return ExitCode::from(1);
        }
    };
    let mut report = json!({"ports": [], "problems": []});
    let exchange = args.listen.is_some() || args.connect.is_some();
    if exchange {
        match targets.first() {
            Some(t) => match run_exchange(&args, t) {
                Ok(v) => report["exchange"] = v,
                Err(e) => problems.push(e),
            },
            None => problems.push("no usable ib port to run the exchange on".into()),
        }
    } else {
        for t in &targets {
            match check_port(t) {
                Ok((v, mut p)) => {
                    report["ports"].as_array_mut().unwrap().push(v);
                    problems.append(&mut p);
                }
                Err(e) => problems.push(e),
            }
        }
        if targets.is_empty() && problems.is_empty() {
            problems.push("no usable ib port".into());
        }
    }
    for p in &problems {
        eprintln!("rdma-ns-probe: {p}");
    }
    report["problems"] = json!(problems);
    println!("{report:#}");
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The ports to check: the one named, or every usable one `rdma-ns env` would name, once
/// each, in its order. Discovery's problems are the probe's too.
fn targets(args: &Args, problems: &mut Vec<String>) -> Result<Vec<Target>, String> {
    let sys = SysRoot::from_env();
    if let (Some(dev), Some(index)) = (&args.device, args.gid_index) {
        let topo = RdmaSysfs::new(&sys);
        let entry = topo
            .gid_entry(dev, u32::from(args.ib_port), index)
            .map_err(|e| format!("reading GID {index} of {dev}: {e}"))?;
        let brief = topo
            .port_state(dev, u32::from(args.ib_port))
            .map_err(|e| format!("reading {dev} port {}: {e}", args.ib_port))?
            .ok_or_else(|| format!("{dev} has no port {}", args.ib_port))?;
        return Ok(vec![Target {
            dev: dev.clone(),
            port: args.ib_port,
            gid_index: index,
            sysfs_gid: entry.map(|e| e.gid),
            ifname: None,
            netdev_mtu: None,
            roce: brief.link_layer == rdma_ns::kernel::topology::LinkLayer::Ethernet,
        }]);
    }
    let kernel = RealKernel::new().map_err(|e| format!("cannot open rtnetlink: {e}"))?;
    let found = discover::discover_netns(&kernel, None, &sys, &PathBuf::from("/dev/infiniband"))
        .map_err(|e| e.to_string())?;
    for p in &found.problems {
        // Without any RDMA interface there is nothing to probe: said once, below.
        if p.kind != ProblemKind::NoRdmaInterface {
            problems.push(p.to_string());
        }
    }
    let mut out: Vec<Target> = Vec::new();
    for f in found.interfaces.iter().filter(|f| f.usable()) {
        if out
            .iter()
            .any(|t| t.dev == f.ibdev && u32::from(t.port) == f.port)
        {
            continue;
        }
        out.push(Target {
            dev: f.ibdev.clone(),
            port: f.port as u8,
            gid_index: f.gid_index.expect("usable"),
            sysfs_gid: f.gid,
            ifname: Some(f.ifname.clone()),
            netdev_mtu: Some(f.mtu),
            roce: f.is_roce(),
        });
    }
    if out.is_empty() {
        if let Some(p) = found
            .problems
            .iter()
            .find(|p| p.kind == ProblemKind::NoRdmaInterface)
        {
            problems.push(p.to_string());
        }
    }
    Ok(out)
}

/// The largest IB MTU a RoCE packet carried by a netdev of MTU `mtu` can have: the kernel's
/// rule (include/rdma/ib_addr.h `iboe_get_mtu`) leaves 96 bytes for GRH/IP, UDP, BTH and the
/// largest extended headers and ICRC.
fn roce_mtu_for(netdev_mtu: u32) -> u32 {
    let room = netdev_mtu.saturating_sub(96);
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| *m <= room)
        .unwrap_or(0)
}

fn open(dev: &str) -> Result<Context, String> {
    Context::open(dev)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "libibverbs lists no device {dev}: its uverbs node is not visible here, or \
                 the provider for its driver is not installed (ibverbs-providers)"
            )
        })
}

fn check_port(t: &Target) -> Result<(Value, Vec<String>), String> {
    let mut problems = Vec::new();
    let ctx = open(&t.dev)?;
    let attr = ctx.query_port(t.port).map_err(|e| e.to_string())?;
    let active_mtu = verbs::mtu_bytes(attr.active_mtu);
    let state = verbs::port_state_str(attr.state);
    if attr.state != rdma_sys::ibv_port_state::IBV_PORT_ACTIVE {
        problems.push(format!(
            "{}:{} is {state} for verbs: not usable",
            t.dev, t.port
        ));
    }
    let table = ctx
        .gid_table(t.port, attr.gid_tbl_len.max(0) as u32)
        .map_err(|e| e.to_string())?;
    let verbs_gid = ctx
        .query_gid(t.port, t.gid_index)
        .map_err(|e| e.to_string())?;
    if t.sysfs_gid != Some(verbs_gid) {
        problems.push(format!(
            "{}:{} GID {}: verbs reads {verbs_gid}, the kernel's sysfs table {}",
            t.dev,
            t.port,
            t.gid_index,
            t.sysfs_gid.map_or("nothing".into(), |g| g.to_string())
        ));
    }
    if let (true, Some(mtu), Some(ifname)) = (t.roce, t.netdev_mtu, &t.ifname) {
        if roce_mtu_for(mtu) > active_mtu {
            problems.push(format!(
                "{ifname}: MTU {mtu} carries RDMA MTU {} but {}:{}'s active MTU is \
                 {active_mtu}: RDMA runs at the smaller one. Raise the MTU of the port's \
                 netdev on the node (and its peers')",
                roce_mtu_for(mtu),
                t.dev,
                t.port
            ));
        }
    }
    let ep = Endpoint::new(&ctx, t.port, t.gid_index as u8, 4096).map_err(|e| e.to_string())?;
    // RTR needs a destination: the QP itself, over the same GID (no packet is sent).
    let me = ep.info(0x1234, verbs_gid, attr.active_mtu);
    ep.connect(0x1234, &me, attr.active_mtu)
        .map_err(|e| e.to_string())?;
    let qp_state = ep.state().map_err(|e| e.to_string())?;
    if qp_state != rdma_sys::ibv_qp_state::IBV_QPS_RTS {
        problems.push(format!(
            "{}:{} QP is in state {qp_state}, not RTS",
            t.dev, t.port
        ));
    }
    Ok((
        json!({
            "hca": format!("{}:{}", t.dev, t.port),
            "ifname": t.ifname,
            "portState": state,
            "activeMtu": active_mtu,
            "netdevMtu": t.netdev_mtu,
            "gidTableLen": attr.gid_tbl_len,
            "gidEntries": table.len(),
            "gidIndex": t.gid_index,
            "gid": verbs_gid.to_string(),
            "qpn": ep.qpn(),
            "qpState": if qp_state == rdma_sys::ibv_qp_state::IBV_QPS_RTS { "RTS".to_string() } else { qp_state.to_string() },
        }),
        problems,
    ))
}

/// The TCP connection two probes exchange their endpoints and their progress over.
struct Control {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Control {
    /// Connects to the listener (`--connect`) or accepts the connector (`--listen`).
    fn open(args: &Args) -> Result<Control, String> {
        let stream = match (&args.connect, args.listen) {
            (Some(addr), _) => {
                TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?
            }
            (None, Some(port)) => {
                let l = TcpListener::bind(("::", port))
                    .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
                    .map_err(|e| format!("listening on port {port}: {e}"))?;
                l.accept().map_err(|e| format!("accepting: {e}"))?.0
            }
            _ => unreachable!("checked by the caller"),
        };
        stream
            .set_read_timeout(Some(args.timeout * 4))
            .map_err(|e| e.to_string())?;
        let reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
        Ok(Control { stream, reader })
    }

    fn send(&mut self, line: &str) -> Result<(), String> {
        writeln!(self.stream, "{line}").map_err(|e| format!("sending to the peer: {e}"))
    }

    fn read_line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .map_err(|e| format!("reading from the peer: {e}"))?;
        if line.is_empty() {
            return Err("the peer closed the connection".into());
        }
        Ok(line.trim_end().to_string())
    }

    /// Says `step` is done here and waits until the peer says it too.
    fn sync(&mut self, step: &str) -> Result<(), String> {
        self.send(step)?;
        self.read_line().map(drop)
    }

    /// Sends this endpoint's info and reads the peer's.
    fn swap_info(&mut self, mine: &PeerInfo) -> Result<PeerInfo, String> {
        self.send(&info_line(mine))?;
        parse_info(&self.read_line()?)
    }
}

fn info_line(i: &PeerInfo) -> String {
    format!(
        "{} {} {} {} {} {}",
        i.qpn, i.psn, i.gid, i.rkey, i.addr, i.active_mtu
    )
}

fn parse_info(line: &str) -> Result<PeerInfo, String> {
    let f: Vec<&str> = line.split(' ').collect();
    let bad = || format!("bad peer info {line:?}");
    if f.len() != 6 {
        return Err(bad());
    }
    Ok(PeerInfo {
        qpn: f[0].parse().map_err(|_| bad())?,
        psn: f[1].parse().map_err(|_| bad())?,
        gid: f[2].parse().map_err(|_| bad())?,
        rkey: f[3].parse().map_err(|_| bad())?,
        addr: f[4].parse().map_err(|_| bad())?,
        active_mtu: f[5].parse().map_err(|_| bad())?,
    })
}

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// Ping-pong and RDMA WRITE stream between two probes, on `t`'s GID index.
fn run_exchange(args: &Args, t: &Target) -> Result<Value, String> {
    let ctx = open(&t.dev)?;
    let attr = ctx.query_port(t.port).map_err(|e| e.to_string())?;
    let gid = ctx
        .query_gid(t.port, t.gid_index)
        .map_err(|e| e.to_string())?;
    let mut ep =
        Endpoint::new(&ctx, t.port, t.gid_index as u8, args.size).map_err(|e| e.to_string())?;
    let psn = std::process::id() & 0xff_ffff;
    let server = args.listen.is_some();
    let mut control = Control::open(args)?;
    let peer = control.swap_info(&ep.info(psn, gid, attr.active_mtu))?;
    let path_mtu = attr.active_mtu.min(peer.active_mtu);
    ep.connect(psn, &peer, path_mtu)
        .map_err(|e| e.to_string())?;
    // Both sides post their first receive before either sends.
    ep.post_recv(64).map_err(|e| e.to_string())?;
    control.sync("ready")?;
    let rtts = ping_pong(&mut ep, args, server)?;
    control.sync("pingpong-done")?;

    let mut out = json!({
        "role": if server { "listen" } else { "connect" },
        "hca": format!("{}:{}", t.dev, t.port),
        "gidIndex": t.gid_index,
        "gid": gid.to_string(),
        "peerGid": peer.gid.to_string(),
        "pathMtu": verbs::mtu_bytes(path_mtu),
        "iters": args.iters,
    });
    if server {
        verify_writes(&ep, &mut control, &mut out)?;
    } else {
        let median = median(rtts);
        out["rttMedianUs"] = json!(median.as_secs_f64() * 1e6);
        stream_writes(&mut ep, args, &peer, &mut control, &mut out)?;
    }
    Ok(out)
}

/// `args.iters` SEND round trips: the connector sends and waits for the reply, the listener
/// answers each message. Each side's receive is posted before the peer can send to it. Returns
/// the connector's round-trip times (none for the listener).
fn ping_pong(ep: &mut Endpoint, args: &Args, server: bool) -> Result<Vec<Duration>, String> {
    let deadline = || Instant::now() + args.timeout;
    let mut rtts = Vec::with_capacity(args.iters);
    for i in 0..args.iters {
        let at = |e: verbs::VerbsError| format!("ping-pong iteration {i}: {e}");
        if server {
            ep.wait(Completions::recvs(1), deadline()).map_err(at)?;
            ep.post_recv(64).map_err(at)?;
            ep.post_send(64, None).map_err(at)?;
            ep.wait(Completions::sends(1), deadline()).map_err(at)?;
        } else {
            let t0 = Instant::now();
            ep.post_send(64, None).map_err(at)?;
            let reply = Completions { sends: 1, recvs: 1 };
            ep.wait(reply, deadline()).map_err(at)?;
            rtts.push(t0.elapsed());
            ep.post_recv(64).map_err(at)?;
        }
    }
    Ok(rtts)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The listener's side of the WRITE stream: the writer's data lands in this buffer, checked
/// once it says it is done.
fn verify_writes(ep: &Endpoint, control: &mut Control, out: &mut Value) -> Result<(), String> {
    control.read_line()?;
    let ok = ep.buf().iter().enumerate().all(|(i, b)| *b == pattern(i));
    control.send(if ok { "verified" } else { "corrupt" })?;
    out["writeVerified"] = json!(ok);
    if !ok {
        return Err("the RDMA WRITE data that arrived differs from what was sent".into());
    }
    Ok(())
}

/// The connector's side of the WRITE stream: a tenth as many writes as ping-pongs (at least
/// ten) of the pattern into the peer's buffer, half the send queue in flight at most.
fn stream_writes(
    ep: &mut Endpoint,
    args: &Args,
    peer: &PeerInfo,
    control: &mut Control,
    out: &mut Value,
) -> Result<(), String> {
    let deadline = || Instant::now() + args.timeout;
    let writes = (args.iters / 10).max(10);
    for (i, b) in ep.buf_mut().iter_mut().enumerate() {
        *b = pattern(i);
    }
    let t0 = Instant::now();
    let mut outstanding = 0;
    for _ in 0..writes {
        if outstanding == (verbs::MAX_SEND as usize) / 2 {
            ep.wait(Completions::sends(1), deadline())
                .map_err(|e| e.to_string())?;
            outstanding -= 1;
        }
        ep.post_send(args.size, Some((peer.addr, peer.rkey)))
            .map_err(|e| e.to_string())?;
        outstanding += 1;
    }
    ep.wait(Completions::sends(outstanding), deadline())
        .map_err(|e| e.to_string())?;
    let secs = t0.elapsed().as_secs_f64();
    control.send("writes-done")?;
    let verdict = control.read_line()?;
    out["writeBytes"] = json!(writes * args.size);
    out["writeGbitPerS"] = json!((writes * args.size) as f64 * 8.0 / secs / 1e9);
    out["writeVerified"] = json!(verdict == "verified");
    if verdict != "verified" {
        return Err(format!("the listener found the written data {verdict}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roce_mtu_follows_the_kernels_rule() {
        assert_eq!(roce_mtu_for(1500), 1024);
        assert_eq!(roce_mtu_for(9000), 4096);
        assert_eq!(roce_mtu_for(4200), 4096);
        assert_eq!(roce_mtu_for(4191), 2048);
        assert_eq!(roce_mtu_for(100), 0);
        assert_eq!(verbs::mtu_bytes(3), 1024);
    }

    #[test]
    fn peer_info_round_trips_and_garbage_is_refused() {
        let i = PeerInfo {
            qpn: 17,
            psn: 0x1234,
            gid: "::ffff:10.9.0.5".parse().unwrap(),
            rkey: 99,
            addr: 0xdead_beef,
            active_mtu: 3,
        };
        assert_eq!(parse_info(&info_line(&i)).unwrap(), i);
        assert!(parse_info("17 1 x 1 1 3").is_err());
        assert!(parse_info("17 1").is_err());
    }
}

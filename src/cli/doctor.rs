//! `rdma-ns doctor`: runs [`rdma_ns::node::doctor`] and prints a table (or `--json`); the exit
//! code is the worst finding (0 OK, 1 WARN, 2 FAIL; 3 for a usage error), so it can serve as a
//! DaemonSet readiness probe. `--nfd FILE` also writes Node Feature Discovery labels, once or
//! every `--every SECONDS` until SIGTERM.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use super::flags::{Flags, Next, UsageError};
use rdma_ns::kernel::sysfs::SysRoot;
use rdma_ns::nad::Form;
use rdma_ns::node::confs::{peer_entries, rdma_networks, ConfError, PeerEntry, RdmaNetwork};
use rdma_ns::node::doctor::{self, Options, Report, Severity};
use rdma_ns::node::{nfd, KernelView, Node};

const USAGE: &str = "usage: rdma-ns doctor [--pod] [--json] [--conf FILE]... [--conf-dir DIR] \
[--data-dir DIR]... [--nfd FILE [--every SECONDS] [--expiry SECONDS]]\n\
  --pod           check from inside a pod: its ib devices, /dev/infiniband and limits only\n\
  --json          findings as JSON on stdout instead of the table\n\
  --conf FILE     also check this conf, conflist or NetworkAttachmentDefinition (JSON or YAML)\n\
  --conf-dir DIR  the runtime's CNI conf dir (default /etc/cni/net.d)\n\
  --data-dir DIR  attachment records (default /var/lib/cni/rdma-ns, plus every conf's dataDir)\n\
  --nfd FILE      write NFD labels to FILE (e.g. /etc/kubernetes/node-feature-discovery/features.d/rdma-ns)\n\
  --every SECONDS with --nfd: rewrite it every SECONDS until SIGTERM (labels expire after 3 periods)\n\
  --expiry SECONDS with --nfd: let NFD drop the labels SECONDS after writing\n\
  --sysfs DIR, --dev DIR, --proc DIR: read these instead of /sys, /dev/infiniband, /proc\n\
exit: 0 all OK, 1 a WARN, 2 a FAIL, 3 usage or I/O error";

#[derive(Debug, Default)]
struct Args {
    pod: bool,
    json: bool,
    confs: Vec<PathBuf>,
    conf_dir: Option<PathBuf>,
    data_dirs: Vec<PathBuf>,
    nfd: Option<PathBuf>,
    every: Option<Duration>,
    expiry: Option<Duration>,
    sysfs: Option<PathBuf>,
    dev: Option<PathBuf>,
    proc: Option<PathBuf>,
}

/// The arguments, or None for `--help`.
fn parse_args(args: &[OsString]) -> Result<Option<Args>, UsageError> {
    let mut a = Args::default();
    let mut flags = Flags::new(args);
    loop {
        match flags.next()? {
            Next::End => break,
            Next::Help => return Ok(None),
            Next::Flag("--pod") => a.pod = true,
            Next::Flag("--json") => a.json = true,
            Next::Flag("--conf") => a.confs.push(flags.value()?.into()),
            Next::Flag("--conf-dir") => a.conf_dir = Some(flags.value()?.into()),
            Next::Flag("--data-dir") => a.data_dirs.push(flags.value()?.into()),
            Next::Flag("--nfd") => a.nfd = Some(flags.value()?.into()),
            Next::Flag("--every") => a.every = Some(flags.seconds()?),
            Next::Flag("--expiry") => a.expiry = Some(flags.seconds()?),
            Next::Flag("--sysfs") => a.sysfs = Some(flags.value()?.into()),
            Next::Flag("--dev") => a.dev = Some(flags.value()?.into()),
            Next::Flag("--proc") => a.proc = Some(flags.value()?.into()),
            Next::Flag(_) => return Err(flags.unknown()),
        }
    }
    if a.nfd.is_none() && (a.every.is_some() || a.expiry.is_some()) {
        return Err(UsageError("--every and --expiry go with --nfd".into()));
    }
    Ok(Some(a))
}

pub fn run(args: &[OsString]) -> ExitCode {
    let args = match parse_args(args) {
        Ok(Some(a)) => a,
        Ok(None) => return super::help(USAGE),
        // 1 and 2 are the findings' severities.
        Err(e) => return super::refuse("doctor", &e, USAGE, 3),
    };
    let mut node = Node::system();
    if let Some(s) = &args.sysfs {
        node.sys = SysRoot::new(s);
    }
    if let Some(d) = &args.dev {
        node.dev_dir = d.clone();
    }
    if let Some(p) = &args.proc {
        node.proc_dir = p.clone();
    }
    let Some(nfd_path) = args.nfd.clone() else {
        let report = check(&args, &mut node);
        print(&report, &args);
        return ExitCode::from(report.worst().exit_code());
    };
    let Some(every) = args.every else {
        let report = check(&args, &mut node);
        print(&report, &args);
        if let Err(code) = write_nfd(&nfd_path, &report, args.expiry) {
            return code;
        }
        return ExitCode::from(report.worst().exit_code());
    };
    let stop = match super::stop::Stop::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rdma-ns doctor: cannot install the SIGTERM handler: {e}");
            return ExitCode::from(3);
        }
    };
    // Labels outlive two missed refreshes, then NFD drops them.
    let expiry = args.expiry.or(Some(every * 3));
    loop {
        let report = check(&args, &mut node);
        if write_nfd(&nfd_path, &report, expiry).is_ok() {
            eprintln!(
                "rdma-ns doctor: wrote {} ({} OK, {} WARN, {} FAIL)",
                nfd_path.display(),
                report.count(Severity::Ok),
                report.count(Severity::Warn),
                report.count(Severity::Fail)
            );
        }
        if stop.wait(every) {
            return ExitCode::SUCCESS;
        }
    }
}

fn write_nfd(path: &Path, report: &Report, expiry: Option<Duration>) -> Result<(), ExitCode> {
    let text = nfd::render(&report.facts, SystemTime::now(), expiry);
    nfd::write(path, &text).map_err(|e| {
        eprintln!(
            "rdma-ns doctor: cannot write {}: {e} (does NFD's features.d directory exist and is \
             it mounted writable?)",
            path.display()
        );
        ExitCode::from(3)
    })
}

fn check(args: &Args, node: &mut Node) -> Report {
    let mut opts = Options {
        pod: args.pod,
        ..Options::default()
    };
    if !args.pod {
        let dir = args
            .conf_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("/etc/cni/net.d"));
        let mut files = conf_files(&dir);
        files.extend(args.confs.iter().cloned());
        for f in files {
            let loaded = load_conf(&f);
            opts.networks.extend(loaded.networks);
            opts.conf_errors.extend(loaded.errors);
            opts.peer_entries.extend(loaded.peers);
        }
        let mut dirs = args.data_dirs.clone();
        if dirs.is_empty() {
            dirs.push(PathBuf::from(rdma_ns::attach::store::DEFAULT_DATA_DIR));
        }
        for n in &opts.networks {
            if !dirs.contains(&n.data_dir) {
                dirs.push(n.data_dir.clone());
            }
        }
        node.data_dirs = dirs;
    }
    doctor::run(node, &KernelView::default(), &opts)
}

/// The files a runtime reads from its conf dir (libcni: `.conf`, `.conflist`, `.json`).
fn conf_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| ["conf", "conflist", "json"].contains(&e))
        })
        .collect();
    out.sort();
    out
}

/// What one conf file holds for the doctor: its rdma-ns networks, the entries the plugin
/// would refuse, and the entries of peer plugins.
#[derive(Default)]
struct Loaded {
    networks: Vec<RdmaNetwork>,
    errors: Vec<ConfError>,
    peers: Vec<PeerEntry>,
}

/// A conf, conflist or NetworkAttachmentDefinition (JSON, or YAML with `spec.config`).
fn load_conf(path: &Path) -> Loaded {
    let file = path.display().to_string();
    let refused = |msg: String| Loaded {
        errors: vec![ConfError {
            source: file.clone(),
            network: None,
            msg,
        }],
        ..Loaded::default()
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return refused(format!("cannot read it: {e}")),
    };
    let (conf, form) = match rdma_ns::nad::read(&text) {
        Ok(read) => read,
        Err(e) => return refused(e),
    };
    let source = match form {
        Form::Conf => file.clone(),
        Form::Nad => format!("{file} (spec.config)"),
    };
    let (networks, errors) = rdma_networks(&source, &conf);
    Loaded {
        networks,
        errors,
        peers: peer_entries(&source, &file, &conf),
    }
}

fn print(report: &Report, args: &Args) {
    if args.json {
        let out = serde_json::json!({
            "mode": if args.pod { "pod" } else { "node" },
            "findings": report.findings,
            "summary": {
                "ok": report.count(Severity::Ok),
                "warn": report.count(Severity::Warn),
                "fail": report.count(Severity::Fail),
                "na": report.count(Severity::NotApplicable),
            },
            "exitCode": report.worst().exit_code(),
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return;
    }
    print!("{}", table(report));
}

/// The human table: status, check, object, finding; the fix on the next line.
fn table(report: &Report) -> String {
    let w_check = report
        .findings
        .iter()
        .map(|f| f.check.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let w_obj = report
        .findings
        .iter()
        .map(|f| f.object.chars().count())
        .max()
        .unwrap_or(6)
        .clamp(6, 40);
    let mut s = format!(
        "{:<4}  {:<w_check$}  {:<w_obj$}  FINDING\n",
        "", "CHECK", "OBJECT"
    );
    for f in &report.findings {
        s.push_str(&format!(
            "{:<4}  {:<w_check$}  {:<w_obj$}  {}\n",
            f.severity.to_string(),
            f.check,
            f.object,
            f.finding
        ));
        if let Some(fix) = &f.fix {
            s.push_str(&format!(
                "{:<4}  {:<w_check$}  {:<w_obj$}  fix: {fix}\n",
                "", "", ""
            ));
        }
    }
    s.push_str(&format!(
        "{} OK, {} WARN, {} FAIL",
        report.count(Severity::Ok),
        report.count(Severity::Warn),
        report.count(Severity::Fail)
    ));
    match report.count(Severity::NotApplicable) {
        0 => s.push('\n'),
        n => s.push_str(&format!(", {n} N/A\n")),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let a = |v: &[&str]| parse_args(&v.iter().map(OsString::from).collect::<Vec<_>>());
        let args = a(&[
            "--pod", "--json", "--conf", "x.yaml", "--nfd", "f", "--every", "60",
        ])
        .unwrap()
        .unwrap();
        assert!(args.pod && args.json);
        assert_eq!(args.confs, vec![PathBuf::from("x.yaml")]);
        assert_eq!(args.every, Some(Duration::from_secs(60)));
        assert!(a(&["--every", "60"]).is_err(), "--every needs --nfd");
        assert!(a(&["--nfd", "f", "--every", "0"]).is_err());
        assert!(a(&["--conf"]).is_err());
        assert!(a(&["--bogus"]).is_err());
    }

    #[test]
    fn confs_from_json_yaml_nads_and_conflists() {
        let dir = std::env::temp_dir().join(format!("rdma-ns-doctor-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = r#"{"cniVersion":"1.0.0","name":"roce","plugins":[{"type":"rdma-ns","mode":"macvlan","master":"ens1f0np0"}]}"#;
        std::fs::write(dir.join("10-roce.conflist"), conf).unwrap();
        std::fs::write(dir.join("ignored.txt"), "x").unwrap();
        let yaml = format!(
            "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: roce\nspec:\n  config: '{conf}'\n"
        );
        std::fs::write(dir.join("nad.yaml"), yaml).unwrap();
        std::fs::write(dir.join("broken.conf"), "{").unwrap();
        let files = conf_files(&dir);
        assert_eq!(files.len(), 2, "{files:?}");
        let counts = |l: &Loaded| (l.networks.len(), l.errors.len(), l.peers.len());
        assert_eq!(counts(&load_conf(&dir.join("10-roce.conflist"))), (1, 0, 0));
        let nad = load_conf(&dir.join("nad.yaml"));
        assert_eq!(counts(&nad), (1, 0, 0), "{:?}", nad.errors);
        assert!(nad.networks[0].source.ends_with("nad.yaml (spec.config)"));
        assert_eq!(counts(&load_conf(&dir.join("broken.conf"))), (0, 1, 0));
        // ipoib-cni's own README conf, in a NAD: a peer, found in its spec.config.
        let ipoib = r#"{"cniVersion":"0.3.1","name":"ib","type":"ipoib","master":"ib0","ipam":{"type":"host-local","subnet":"192.168.5.0/24"}}"#;
        std::fs::write(
            dir.join("ib.yaml"),
            format!("kind: NetworkAttachmentDefinition\nspec:\n  config: '{ipoib}'\n"),
        )
        .unwrap();
        let ib = load_conf(&dir.join("ib.yaml"));
        assert_eq!(counts(&ib), (0, 0, 1));
        assert_eq!(ib.peers[0].peer.plugin_type, "ipoib");
        assert_eq!(ib.peers[0].file, dir.join("ib.yaml").display().to_string());
        assert!(ib.peers[0].source.ends_with("ib.yaml (spec.config)"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_table_puts_each_fix_under_its_finding() {
        let mut r = Report::default();
        r.findings.push(doctor::Finding {
            check: "port",
            severity: Severity::Fail,
            object: "rxe0/1".into(),
            finding: "1: DOWN".into(),
            fix: Some("ip link set rxev0 up".into()),
        });
        let t = table(&r);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[1].starts_with("FAIL  port   rxe0/1  1: DOWN"), "{t}");
        assert!(
            lines[2]
                .trim_start()
                .starts_with("fix: ip link set rxev0 up"),
            "{t}"
        );
        assert_eq!(lines[3], "0 OK, 0 WARN, 1 FAIL");
    }
}

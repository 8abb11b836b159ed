//! Delegation to the IPAM plugin named by `ipam.type` (spec "Delegated plugins (IPAM)").
//!
//! The spec has the delegating plugin run the IPAM binary found in CNI_PATH with the same
//! environment and the same stdin, changing only CNI_COMMAND, and pass its errors up.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cni::{CniResult, Command, Request};
use crate::error::{Error, Result};

/// How much of a misbehaving plugin's stdout goes into our error message.
const EXCERPT_BYTES: usize = 512;

/// Attempts to start a plugin that is briefly "text file busy": libcni retries the same way,
/// since a binary being installed or just written can be open for writing in another process.
const SPAWN_ATTEMPTS: u32 = 5;

/// The first executable `ipam_type` in `dirs`, searched in order as CNI_PATH lists them.
pub fn find_plugin(ipam_type: &str, dirs: &[PathBuf]) -> Result<PathBuf> {
    if ipam_type.is_empty()
        || ipam_type.contains(['/', '\0'])
        || ipam_type == "."
        || ipam_type == ".."
    {
        return Err(Error::config(
            "ipam.type",
            format!("{ipam_type:?} must be a plugin file name (found in CNI_PATH), not a path"),
        ));
    }
    let mut not_executable = Vec::new();
    for dir in dirs {
        let candidate = dir.join(ipam_type);
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                return Ok(candidate)
            }
            Ok(_) => not_executable.push(candidate.display().to_string()),
            Err(_) => {}
        }
    }
    let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let mut msg = format!(
        "IPAM plugin `{ipam_type}` not found in CNI_PATH ({})",
        searched.join(":")
    );
    if !not_executable.is_empty() {
        msg.push_str(&format!(
            "; present but not an executable file: {}",
            not_executable.join(", ")
        ));
    }
    msg.push_str(
        "; install it into one of those directories (the reference plugins ship host-local, \
         static, dhcp; Debian's containernetworking-plugins package puts them in \
         /usr/lib/cni) or add its directory to the runtime's CNI bin dirs",
    );
    Err(Error::IpamExec(msg))
}

/// Runs `plugin` for `command` with this process's environment (CNI_COMMAND replaced) and
/// `stdin`. Ok(None) when it succeeded and printed nothing (DEL, CHECK, STATUS, GC). A plugin
/// still running after `timeout` is killed and reaped, and that is an error naming both. If
/// this process dies first, the plugin runs on to its own end (see `spawn`).
pub fn exec(
    plugin: &Path,
    command: Command,
    stdin: &[u8],
    timeout: Duration,
) -> Result<Option<Value>> {
    exec_with(plugin, command, stdin, timeout, &[])
}

/// [`exec`] with `vars` set on the plugin over this process's environment.
pub fn exec_with(
    plugin: &Path,
    command: Command,
    stdin: &[u8],
    timeout: Duration,
    vars: &[(&str, OsString)],
) -> Result<Option<Value>> {
    let name = plugin_name(plugin);
    crate::log::timed(
        || format!("IPAM plugin {name} {command}"),
        || run_plugin(plugin, &name, command, stdin, timeout, vars),
    )
}

fn run_plugin(
    plugin: &Path,
    name: &str,
    command: Command,
    stdin: &[u8],
    timeout: Duration,
    vars: &[(&str, OsString)],
) -> Result<Option<Value>> {
    let mut child = spawn(plugin, command, vars)?;
    let writer = feed_stdin(&mut child, stdin);
    let outcome = read_until_exit(&mut child, Instant::now() + timeout);
    if outcome.is_err() {
        // SIGKILL and reap: nothing of the plugin outlives this call, and the caller's undo (IPAM
        // DEL included) runs after it is gone.
        let _ = child.kill();
        let _ = child.wait();
    }
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    let (status, stdout) = outcome.map_err(|e| match e {
        Wait::TimedOut => Error::IpamExec(format!(
            "IPAM plugin `{name}` ({command}) did not finish within ipamTimeoutMs={} and was \
             killed; check the plugin and what it depends on (whereabouts: the Kubernetes API; \
             dhcp: its daemon) or raise ipamTimeoutMs",
            timeout.as_millis()
        )),
        Wait::Io(e) => {
            Error::IpamExec(format!("waiting for IPAM plugin `{name}` ({command}): {e}"))
        }
    })?;
    if status.success() {
        success_output(name, command, &stdout)
    } else {
        Err(failure(name.to_string(), command, status, &stdout))
    }
}

/// Starts `plugin` for `command`, its stdin and stdout piped, retrying while its binary is
/// "text file busy".
fn spawn(
    plugin: &Path,
    command: Command,
    vars: &[(&str, OsString)],
) -> Result<std::process::Child> {
    let mut attempt = 1;
    loop {
        // No death signal: a plugin outlives a delegating plugin that is killed, and finishes.
        // Killed at an arbitrary instant it can corrupt its own store instead (host-local
        // creates a reservation file, then writes its owner into it; an empty one matches no
        // owner, so no IPAM DEL ever releases it). Whatever it allocated is left for the
        // delegating plugin's DEL to release once it is done.
        let spawned = std::process::Command::new(plugin)
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .env("CNI_COMMAND", command.as_str())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        match spawned {
            Ok(child) => return Ok(child),
            Err(e)
                if e.raw_os_error() == Some(nix::errno::Errno::ETXTBSY as i32)
                    && attempt < SPAWN_ATTEMPTS =>
            {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(50 * u64::from(attempt)));
            }
            Err(e) => {
                return Err(Error::IpamExec(format!(
                    "cannot run IPAM plugin {} for {command}: {e}",
                    plugin.display()
                )))
            }
        }
    }
}

/// Hands `stdin` to the plugin and closes its end; the thread still writing, when one was
/// needed. A plugin may legitimately exit without reading stdin (broken pipe): write errors
/// are ignored, its exit status and output decide the outcome.
fn feed_stdin(
    child: &mut std::process::Child,
    stdin: &[u8],
) -> Option<std::thread::JoinHandle<std::io::Result<()>>> {
    let mut pipe = child.stdin.take().expect("stdin was requested as a pipe");
    if stdin.len() <= pipe_capacity(&pipe) {
        // The conf fits in the empty pipe, so this write cannot block whatever the plugin
        // does; no thread needed (a thread is the costliest part of a spawn here).
        let _ = pipe.write_all(stdin);
        return None;
    }
    // Written from a thread: a plugin that prints before reading all of stdin would
    // otherwise deadlock against us on a full pipe.
    let input = stdin.to_vec();
    Some(std::thread::spawn(move || pipe.write_all(&input)))
}

/// What a plugin that exited 0 printed: nothing (DEL, CHECK, STATUS, GC) or a JSON result.
fn success_output(name: &str, command: Command, stdout: &[u8]) -> Result<Option<Value>> {
    if stdout.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(stdout).map(Some).map_err(|e| {
        Error::IpamExec(format!(
            "IPAM plugin `{name}` ({command}) succeeded but its output is not JSON ({e}): {}",
            excerpt(stdout)
        ))
    })
}

/// The error of a plugin that failed: its own CNI error passed up, else what it did instead.
fn failure(name: String, command: Command, status: ExitStatus, stdout: &[u8]) -> Error {
    let status = match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => format!("was killed ({status})"),
    };
    match parse_error(stdout) {
        Some((code, msg, details)) => Error::Delegated {
            plugin: name,
            code,
            msg,
            details,
        },
        None if stdout.iter().all(u8::is_ascii_whitespace) => Error::IpamExec(format!(
            "IPAM plugin `{name}` ({command}) {status} without printing a CNI error; see its \
             stderr"
        )),
        None => Error::IpamExec(format!(
            "IPAM plugin `{name}` ({command}) {status} and printed no CNI error: {}",
            excerpt(stdout)
        )),
    }
}

enum Wait {
    TimedOut,
    Io(std::io::Error),
}

/// The plugin's stdout up to EOF and its exit status, or `TimedOut` at `deadline`. Polls the
/// pipe rather than sleeping, so a plugin that answers at once costs no extra latency.
fn read_until_exit(
    child: &mut std::process::Child,
    deadline: Instant,
) -> std::result::Result<(ExitStatus, Vec<u8>), Wait> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut pipe = child.stdout.take().expect("stdout was requested as a pipe");
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Wait::TimedOut);
        }
        let wait = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(pipe.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, wait) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(Wait::Io(e.into())),
        }
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Wait::Io(e)),
        }
    }
    // EOF: the plugin closed stdout, almost always by exiting. One that lingers after that is
    // still held to the deadline.
    let mut pause = Duration::from_micros(200);
    loop {
        if let Some(status) = child.try_wait().map_err(Wait::Io)? {
            return Ok((status, out));
        }
        if Instant::now() >= deadline {
            return Err(Wait::TimedOut);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// How many bytes the (empty) pipe takes without blocking the writer; 0 when unknown.
fn pipe_capacity(pipe: &std::process::ChildStdin) -> usize {
    use nix::fcntl::{fcntl, FcntlArg};
    fcntl(pipe, FcntlArg::F_GETPIPE_SZ)
        .map(|n| usize::try_from(n).unwrap_or(0))
        .unwrap_or(0)
}

/// `{code, msg, details}` from a failed plugin; code 0 is not an error code, so such output
/// counts as unreadable.
fn parse_error(stdout: &[u8]) -> Option<(u32, String, String)> {
    let value: Value = serde_json::from_slice(stdout).ok()?;
    let code = u32::try_from(value.get("code")?.as_u64()?).ok()?;
    if code == 0 {
        return None;
    }
    let text = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Some((code, text("msg"), text("details")))
}

fn excerpt(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(EXCERPT_BYTES)];
    let text = String::from_utf8_lossy(cut);
    if bytes.len() > EXCERPT_BYTES {
        format!("{:?}... ({} bytes in all)", text, bytes.len())
    } else {
        format!("{text:?}")
    }
}

fn plugin_name(plugin: &Path) -> String {
    plugin
        .file_name()
        .unwrap_or(OsStr::new(""))
        .to_string_lossy()
        .into_owned()
}

/// The request's CNI variables, set on the IPAM plugin explicitly: the spec gives a delegated
/// plugin the delegating plugin's environment, and a request need not come from this process's
/// environment (`rdma-ns reconcile` replays a recorded attachment's DEL).
fn cni_vars(env: &crate::cni::CniEnv) -> Vec<(&'static str, OsString)> {
    let args: Vec<String> = env
        .args
        .pairs()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let path: Vec<&OsStr> = env.path.iter().map(|p| p.as_os_str()).collect();
    vec![
        ("CNI_CONTAINERID", env.container_id.clone().into()),
        (
            "CNI_NETNS",
            env.netns
                .as_ref()
                .map(|p| p.as_os_str().to_owned())
                .unwrap_or_default(),
        ),
        ("CNI_IFNAME", env.ifname.clone().into()),
        ("CNI_ARGS", args.join(";").into()),
        ("CNI_PATH", path.join(OsStr::new(":"))),
    ]
}

/// The IPAM plugin this request's conf names, located in its CNI_PATH.
pub fn plugin_for(req: &Request) -> Result<PathBuf> {
    let ipam_type = req.conf.ipam_type().ok_or_else(|| {
        Error::config(
            "ipam",
            "this network has no IPAM section; add one with a `type` naming the IPAM plugin",
        )
    })?;
    find_plugin(ipam_type, &req.env.path)
}

/// Runs the request's IPAM plugin for `command` with `stdin` (normally `req.stdin`; a plugin
/// may pass a rewritten conf).
pub fn delegate(req: &Request, command: Command, stdin: &[u8]) -> Result<Option<Value>> {
    exec_with(
        &plugin_for(req)?,
        command,
        stdin,
        req.conf.ipam_timeout()?,
        &cni_vars(&req.env),
    )
}

/// ADD: allocates addresses; the IPAM result is read in its own cniVersion.
pub fn add(req: &Request) -> Result<CniResult> {
    add_with_stdin(req, &req.stdin)
}

pub fn add_with_stdin(req: &Request, stdin: &[u8]) -> Result<CniResult> {
    let plugin = plugin_for(req)?;
    let name = plugin_name(&plugin);
    let value = exec_with(
        &plugin,
        Command::Add,
        stdin,
        req.conf.ipam_timeout()?,
        &cni_vars(&req.env),
    )?
    .ok_or_else(|| {
        Error::IpamExec(format!(
            "IPAM plugin `{name}` (ADD) succeeded but printed no result"
        ))
    })?;
    CniResult::parse(&value, &req.conf.cni_version).map_err(|e| match e {
        Error::Decode { msg, .. } => Error::decode(format!("IPAM plugin `{name}` result"), msg),
        other => other,
    })
}

pub fn del(req: &Request) -> Result<()> {
    delegate(req, Command::Del, &req.stdin).map(drop)
}

pub fn check(req: &Request) -> Result<()> {
    delegate(req, Command::Check, &req.stdin).map(drop)
}

/// STATUS: the IPAM plugin's own 50/51 pass through; an IPAM plugin we cannot run means
/// ADDs would fail, which STATUS reports as 51.
pub fn status(req: &Request) -> Result<()> {
    match delegate(req, Command::Status, &req.stdin) {
        Ok(_) => Ok(()),
        Err(Error::IpamExec(msg)) => Err(Error::IpamNotAvailable(msg)),
        Err(e) => Err(e),
    }
}

pub fn gc(req: &Request) -> Result<()> {
    delegate(req, Command::Gc, &req.stdin).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::args::CniArgs;
    use crate::cni::{CniEnv, NetConf};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A directory removed when the test ends.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let path = std::env::temp_dir().join(format!(
                "rdma-ns-ipam-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }

        fn script(&self, name: &str, body: &str) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A timeout no test plugin gets near.
    const LONG: Duration = Duration::from_secs(60);

    const RESULT_040: &str = r#"{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.9.0.5/24","gateway":"10.9.0.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.9.0.1"}],"dns":{"nameservers":["10.9.0.53"]}}"#;

    /// Records its command and stdin beside itself, then prints `output` and exits `status`.
    fn recording_plugin(dir: &TempDir, name: &str, output: &str, status: u8) -> PathBuf {
        dir.script(
            name,
            &format!(
                "cat > \"$0.stdin\"\nprintf '%s' \"$CNI_COMMAND\" > \"$0.cmd\"\n\
                 cat <<'EOF'\n{output}\nEOF\nexit {status}"
            ),
        )
    }

    fn request(dir: &Path, ipam_type: &str, version: &str) -> Request {
        let stdin = format!(
            r#"{{"cniVersion":"{version}","name":"net","type":"rdma-ns","ipam":{{"type":"{ipam_type}","subnet":"10.9.0.0/24"}}}}"#
        )
        .into_bytes();
        Request {
            env: CniEnv {
                command: Command::Add,
                container_id: "c1".into(),
                netns: Some("/proc/self/ns/net".into()),
                ifname: "net1".into(),
                args: CniArgs::default(),
                path: vec![dir.join("missing"), dir.to_path_buf()],
            },
            conf: NetConf::parse(&stdin, Command::Add).unwrap(),
            stdin,
        }
    }

    #[test]
    fn find_plugin_takes_the_first_executable_in_order() {
        let first = TempDir::new();
        let second = TempDir::new();
        std::fs::write(first.0.join("host-local"), "not executable").unwrap();
        std::fs::create_dir(first.0.join("static")).unwrap();
        let good = second.script("host-local", "exit 0");
        let dirs = [first.0.clone(), second.0.clone()];
        assert_eq!(find_plugin("host-local", &dirs).unwrap(), good);

        let also = first.script("whereabouts", "exit 0");
        second.script("whereabouts", "exit 0");
        assert_eq!(find_plugin("whereabouts", &dirs).unwrap(), also);

        let e = find_plugin("static", &dirs).unwrap_err();
        assert_eq!(e.code(), 107);
        let text = e.to_string();
        assert!(text.contains(&first.0.display().to_string()), "{text}");
        assert!(text.contains(&second.0.display().to_string()), "{text}");
        assert!(text.contains("/usr/lib/cni"), "{text}");
        assert!(text.contains("not an executable"), "{text}");
    }

    #[test]
    fn find_plugin_refuses_paths() {
        for bad in [
            "",
            "../host-local",
            "/usr/bin/host-local",
            "a\0b",
            ".",
            "..",
        ] {
            let e = find_plugin(bad, &[PathBuf::from("/usr/lib/cni")]).unwrap_err();
            assert_eq!(e.code(), 7, "{bad:?}");
        }
    }

    #[test]
    fn exec_passes_command_and_stdin_and_reads_json() {
        let dir = TempDir::new();
        let plugin = recording_plugin(&dir, "ipam", RESULT_040, 0);
        let stdin = br#"{"cniVersion":"0.4.0","name":"n"}"#;
        let out = exec(&plugin, Command::Check, stdin, LONG).unwrap().unwrap();
        assert_eq!(out["ips"][0]["address"], "10.9.0.5/24");
        assert_eq!(std::fs::read(dir.0.join("ipam.stdin")).unwrap(), stdin);
        assert_eq!(
            std::fs::read_to_string(dir.0.join("ipam.cmd")).unwrap(),
            "CHECK"
        );

        let quiet = dir.script("quiet", "cat >/dev/null\nexit 0");
        assert_eq!(exec(&quiet, Command::Del, b"{}", LONG).unwrap(), None);
    }

    #[test]
    fn a_plugin_that_hangs_is_killed_and_reaped_at_the_timeout() {
        let dir = TempDir::new();
        let hang = dir.script("whereabouts", "echo $$ > \"$0.pid\"\nexec sleep 30");
        let started = Instant::now();
        let e = exec(&hang, Command::Add, b"{}", Duration::from_millis(300)).unwrap_err();
        let took = started.elapsed();
        assert_eq!(e.code(), 107, "{e}");
        let msg = e.to_string();
        assert!(msg.contains("`whereabouts` (ADD)"), "{msg}");
        assert!(msg.contains("ipamTimeoutMs=300"), "{msg}");
        assert!(took >= Duration::from_millis(300), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
        let pid: i32 = std::fs::read_to_string(dir.0.join("whereabouts.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Reaped, not merely signalled: the pid no longer names any process, not even a zombie.
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "IPAM plugin {pid} outlived the timeout"
        );

        // The same probe finds the plugin while it runs: one that hangs past this test's own
        // short wait still has its /proc entry.
        let probe = dir.script("probe", "echo $$ > \"$0.pid\"\nexec sleep 30");
        // Through sh: exec of a script just written can meet ETXTBSY while another test thread
        // forks with the write fd still open.
        let mut running = std::process::Command::new("sh")
            .arg(&probe)
            .spawn()
            .unwrap();
        let pid_file = dir.0.join("probe.pid");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !pid_file.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        assert!(Path::new(&format!("/proc/{}", pid.trim())).exists());
        running.kill().unwrap();
        running.wait().unwrap();
    }

    #[test]
    fn a_slow_plugin_within_the_timeout_succeeds() {
        let dir = TempDir::new();
        let slow = dir.script(
            "slow",
            &format!("sleep 0.2\ncat <<'EOF'\n{RESULT_040}\nEOF"),
        );
        let out = exec(&slow, Command::Add, b"{}", Duration::from_secs(20))
            .unwrap()
            .unwrap();
        assert_eq!(out["ips"][0]["address"], "10.9.0.5/24");
    }

    #[test]
    fn ipam_timeout_defaults_and_refuses_zero() {
        let conf = |extra: &str| {
            NetConf::parse(
                format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"rdma-ns"{extra}}}"#)
                    .as_bytes(),
                Command::Add,
            )
            .unwrap()
        };
        assert_eq!(
            conf("").ipam_timeout().unwrap(),
            Duration::from_millis(crate::cni::conf::DEFAULT_IPAM_TIMEOUT_MS)
        );
        assert_eq!(
            conf(r#","ipamTimeoutMs":1500"#).ipam_timeout().unwrap(),
            Duration::from_millis(1500)
        );
        for bad in [r#","ipamTimeoutMs":0"#, r#","ipamTimeoutMs":"5s""#] {
            let e = conf(bad).ipam_timeout().unwrap_err();
            assert_eq!(e.code(), 7, "{bad}");
            assert!(e.to_string().contains("ipamTimeoutMs"), "{e}");
        }
    }

    #[test]
    fn exec_maps_a_cni_error_to_delegated() {
        let dir = TempDir::new();
        let plugin = dir.script(
            "busy",
            r#"echo '{"cniVersion":"1.0.0","code":11,"msg":"lock busy","details":"retry soon"}'
exit 1"#,
        );
        match exec(&plugin, Command::Add, b"{}", LONG).unwrap_err() {
            e @ Error::Delegated { .. } => {
                assert_eq!(e.code(), 11);
                assert_eq!(e.details(), "retry soon");
                assert_eq!(e.to_string(), "IPAM plugin `busy` failed: lock busy");
            }
            other => panic!("expected Delegated, got {other:?}"),
        }
    }

    #[test]
    fn exec_bad_output_is_107_with_a_bounded_excerpt() {
        let dir = TempDir::new();
        let crash = dir.script("crash", "echo 'panic: runtime error'\nexit 2");
        let e = exec(&crash, Command::Add, b"{}", LONG).unwrap_err();
        assert_eq!(e.code(), 107);
        let text = e.to_string();
        assert!(
            text.contains("status 2") && text.contains("panic: runtime error"),
            "{text}"
        );

        let zero = dir.script("zero", r#"echo '{"code":0,"msg":"?"}'; exit 1"#);
        assert_eq!(
            exec(&zero, Command::Add, b"{}", LONG).unwrap_err().code(),
            107
        );

        let silent = dir.script("silent", "exit 3");
        let e = exec(&silent, Command::Add, b"{}", LONG).unwrap_err();
        assert!(e.code() == 107 && e.to_string().contains("stderr"), "{e}");

        let flood = dir.script("flood", "head -c 5000 /dev/zero | tr '\\0' x\nexit 0");
        let e = exec(&flood, Command::Add, b"{}", LONG).unwrap_err();
        let text = e.to_string();
        assert_eq!(e.code(), 107);
        assert!(text.contains("5000 bytes in all"), "{text}");
        assert!(text.len() < 1000, "{}", text.len());

        let e = exec(&dir.0.join("absent"), Command::Add, b"{}", LONG).unwrap_err();
        assert_eq!(e.code(), 107);
    }

    #[test]
    fn exec_survives_a_plugin_that_ignores_stdin() {
        let dir = TempDir::new();
        let plugin = dir.script("noread", "exit 0");
        // Larger than any pipe (written from a thread), and small (written inline).
        let big = vec![b' '; 1 << 20];
        assert_eq!(exec(&plugin, Command::Del, &big, LONG).unwrap(), None);
        assert_eq!(exec(&plugin, Command::Del, b"{}", LONG).unwrap(), None);
    }

    #[test]
    fn add_converts_an_older_ipam_result() {
        let dir = TempDir::new();
        recording_plugin(&dir, "fake-ipam", RESULT_040, 0);
        let req = request(&dir.0, "fake-ipam", "1.1.0");
        let result = add(&req).unwrap();
        assert_eq!(
            std::fs::read(dir.0.join("fake-ipam.stdin")).unwrap(),
            req.stdin
        );
        assert_eq!(
            std::fs::read_to_string(dir.0.join("fake-ipam.cmd")).unwrap(),
            "ADD"
        );
        assert_eq!(
            result.to_json("1.1.0").unwrap(),
            r#"{"cniVersion":"1.1.0","ips":[{"address":"10.9.0.5/24","gateway":"10.9.0.1"}],"routes":[{"dst":"0.0.0.0/0","gw":"10.9.0.1"}],"dns":{"nameservers":["10.9.0.53"]}}"#
        );

        let custom = br#"{"cniVersion":"1.1.0","name":"net","type":"x"}"#;
        add_with_stdin(&req, custom).unwrap();
        assert_eq!(
            std::fs::read(dir.0.join("fake-ipam.stdin")).unwrap(),
            custom
        );
    }

    #[test]
    fn add_rejects_missing_or_bad_results() {
        let dir = TempDir::new();
        dir.script("empty", "exit 0");
        let e = add(&request(&dir.0, "empty", "1.1.0")).unwrap_err();
        assert!(
            e.code() == 107 && e.to_string().contains("no result"),
            "{e}"
        );

        recording_plugin(
            &dir,
            "badip",
            r#"{"cniVersion":"1.0.0","ips":[{"address":"x"}]}"#,
            0,
        );
        let e = add(&request(&dir.0, "badip", "1.1.0")).unwrap_err();
        assert!(e.code() == 6 && e.to_string().contains("badip"), "{e}");

        recording_plugin(&dir, "ancient", r#"{"cniVersion":"0.2.0","ip4":{}}"#, 0);
        assert_eq!(
            add(&request(&dir.0, "ancient", "1.1.0"))
                .unwrap_err()
                .code(),
            1
        );
    }

    #[test]
    fn other_commands_delegate_with_their_own_name() {
        let dir = TempDir::new();
        recording_plugin(&dir, "rec", "", 0);
        let req = request(&dir.0, "rec", "1.1.0");
        type Delegation = fn(&Request) -> Result<()>;
        let calls: [(Delegation, &str); 4] = [
            (del, "DEL"),
            (check, "CHECK"),
            (status, "STATUS"),
            (gc, "GC"),
        ];
        for (call, name) in calls {
            call(&req).unwrap();
            assert_eq!(
                std::fs::read_to_string(dir.0.join("rec.cmd")).unwrap(),
                name
            );
        }
    }

    #[test]
    fn the_ipam_plugin_gets_the_requests_cni_variables() {
        let dir = TempDir::new();
        dir.script(
            "envrec",
            "printf '%s|%s|%s|%s|%s' \"$CNI_CONTAINERID\" \"$CNI_NETNS\" \"$CNI_IFNAME\" \
             \"$CNI_ARGS\" \"$CNI_PATH\" > \"$0.env\"\nexit 0",
        );
        let mut req = request(&dir.0, "envrec", "1.1.0");
        req.env.args = CniArgs::parse("K8S_POD_NAME=p;IgnoreUnknown=1").unwrap();
        del(&req).unwrap();
        let seen = std::fs::read_to_string(dir.0.join("envrec.env")).unwrap();
        assert_eq!(
            seen,
            format!(
                "c1|/proc/self/ns/net|net1|K8S_POD_NAME=p;IgnoreUnknown=1|{}:{}",
                dir.0.join("missing").display(),
                dir.0.display()
            ),
            "from the request, not this process's environment"
        );
    }

    #[test]
    fn status_passes_ipam_codes_through_and_maps_missing_plugin_to_51() {
        let dir = TempDir::new();
        dir.script(
            "full",
            r#"echo '{"code":51,"msg":"no free addresses in 10.9.0.0/24"}'; exit 1"#,
        );
        let e = status(&request(&dir.0, "full", "1.1.0")).unwrap_err();
        assert_eq!(e.code(), 51);
        assert!(e.to_string().contains("no free addresses"), "{e}");

        let e = status(&request(&dir.0, "not-installed", "1.1.0")).unwrap_err();
        assert!(matches!(e, Error::IpamNotAvailable(_)), "{e:?}");
        assert_eq!(e.code(), 51);
        // ADD, by contrast, reports the missing binary as an exec failure.
        assert_eq!(
            add(&request(&dir.0, "not-installed", "1.1.0"))
                .unwrap_err()
                .code(),
            107
        );
    }

    #[test]
    fn no_ipam_section_is_a_config_error() {
        let dir = TempDir::new();
        let mut req = request(&dir.0, "x", "1.1.0");
        req.conf.ipam = None;
        assert_eq!(del(&req).unwrap_err().code(), 7);
    }
}

//! `rdma-ns env`: the NCCL and UCX variables of the pod's RDMA, from the kernel's own tables
//! (see [`rdma_ns::discover`]). Run inside the pod (an init container, or as the entrypoint's
//! wrapper with `--exec`), or on the node with `--netns PATH`.
//!
//! Exit status: 0 with the variables on stdout; 1 when a problem was found (each named on
//! stderr with what to do; stdout stays empty unless `--best-effort`, which prints what is
//! known and exits 0); 2 for a usage error; 3 when the netns, rtnetlink or sysfs could not be
//! read. With `--exec` the command replaces this process, or 126/127 when it cannot be run.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::flags::{Flags, Next, UsageError};
use rdma_ns::discover::{self, vars, Discovery, Problem};
use rdma_ns::kernel::rtnetlink::RealKernel;
use rdma_ns::kernel::sysfs::SysRoot;

const USAGE: &str =
    "usage: rdma-ns env [--netns PATH] [--format sh|json|env-file] [--best-effort] \
                     [--exec -- CMD [ARG...]]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Sh,
    Json,
    EnvFile,
}

#[derive(Debug, PartialEq, Eq)]
struct Args {
    netns: Option<PathBuf>,
    format: Format,
    best_effort: bool,
    exec: Option<Vec<OsString>>,
}

/// The arguments, or None for `--help`.
fn parse_args(args: &[OsString]) -> Result<Option<Args>, UsageError> {
    let mut out = Args {
        netns: None,
        format: Format::Sh,
        best_effort: false,
        exec: None,
    };
    let mut flags = Flags::new(args);
    loop {
        match flags.next()? {
            Next::End => break,
            Next::Help => return Ok(None),
            Next::Flag("--netns") => out.netns = Some(PathBuf::from(flags.value()?)),
            Next::Flag("--format") => {
                out.format = match flags.value()? {
                    "sh" => Format::Sh,
                    "json" => Format::Json,
                    "env-file" => Format::EnvFile,
                    other => {
                        return Err(UsageError(format!(
                            "--format {other:?}: use sh, json or env-file"
                        )))
                    }
                }
            }
            Next::Flag("--best-effort") => out.best_effort = true,
            Next::Flag("--exec") => {
                let cmd = match flags.rest() {
                    [dashes, cmd @ ..] if dashes == "--" => cmd,
                    _ => return Err(UsageError("--exec takes `-- CMD [ARG...]`".into())),
                };
                if cmd.is_empty() {
                    return Err(UsageError("--exec -- needs a command".into()));
                }
                out.exec = Some(cmd.to_vec());
            }
            Next::Flag(_) => return Err(flags.unknown()),
        }
    }
    if out.exec.is_some() && out.format != Format::Sh {
        return Err(UsageError("--format does not apply to --exec".into()));
    }
    Ok(Some(out))
}

/// Where uverbs nodes are looked for. Debug builds let tests point it elsewhere with
/// `RDMA_NS_DEV_DIR`, as the plugin's device permissions do; release builds never read it.
fn dev_dir() -> PathBuf {
    #[cfg(debug_assertions)]
    if let Some(dir) = std::env::var_os("RDMA_NS_DEV_DIR").filter(|v| !v.is_empty()) {
        return dir.into();
    }
    PathBuf::from("/dev/infiniband")
}

pub fn run(args: &[OsString]) -> ExitCode {
    let args = match parse_args(args) {
        Ok(Some(a)) => a,
        Ok(None) => return super::help(USAGE),
        Err(e) => return super::refuse("env", &e, USAGE, 2),
    };
    let kernel = match RealKernel::new() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("rdma-ns env: cannot open an rtnetlink socket: {e}");
            return ExitCode::from(3);
        }
    };
    let found = match discover::discover_netns(
        &kernel,
        args.netns.as_deref(),
        &SysRoot::from_env(),
        &dev_dir(),
    ) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rdma-ns env: {e}");
            return ExitCode::from(3);
        }
    };
    let (vars, more) = vars::variables(&found);
    let problems: Vec<&Problem> = found.problems.iter().chain(more.iter()).collect();
    for p in &problems {
        eprintln!("rdma-ns env: {p}");
    }
    if !problems.is_empty() && !args.best_effort {
        eprintln!(
            "rdma-ns env: {} problem(s); nothing printed (--best-effort prints what is known)",
            problems.len()
        );
        return ExitCode::from(1);
    }
    if let Some(cmd) = &args.exec {
        return exec(cmd, &vars);
    }
    let text = match args.format {
        Format::Sh => render_sh(&vars),
        Format::EnvFile => render_env_file(&vars),
        Format::Json => render_json(&vars, &found, &problems),
    };
    print!("{text}");
    ExitCode::SUCCESS
}

fn exec(cmd: &[OsString], vars: &[(&str, String)]) -> ExitCode {
    let mut c = std::process::Command::new(&cmd[0]);
    c.args(&cmd[1..]);
    for (k, v) in vars {
        if let Some(old) = std::env::var_os(k).filter(|o| o.as_os_str() != OsStr::new(v)) {
            eprintln!(
                "rdma-ns env: {k}={} from the environment replaced by {v}",
                old.to_string_lossy()
            );
        }
        c.env(k, v);
    }
    let err = c.exec();
    eprintln!(
        "rdma-ns env: cannot run {}: {err}",
        Path::new(&cmd[0]).display()
    );
    ExitCode::from(if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}

/// `export NAME='value'` lines for `eval`.
fn render_sh(vars: &[(&str, String)]) -> String {
    vars.iter()
        .map(|(k, v)| format!("export {k}='{}'\n", v.replace('\'', r"'\''")))
        .collect()
}

/// `NAME=value` lines, as `docker run --env-file`/`podman --env-file` read them (no quoting:
/// the whole rest of the line is the value).
fn render_env_file(vars: &[(&str, String)]) -> String {
    vars.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

fn render_json(vars: &[(&str, String)], found: &Discovery, problems: &[&Problem]) -> String {
    let env: serde_json::Map<String, serde_json::Value> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.clone())))
        .collect();
    let doc = serde_json::json!({
        "env": env,
        "rails": discover::vars::rails(found),
        "interfaces": found.interfaces,
        "problems": problems,
    });
    format!("{doc:#}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn arguments_parse_and_bad_ones_are_refused() {
        let a = parse_args(&os(&[
            "--netns",
            "/run/netns/p",
            "--format",
            "json",
            "--best-effort",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(a.netns.as_deref(), Some(Path::new("/run/netns/p")));
        assert_eq!((a.format, a.best_effort), (Format::Json, true));
        let a = parse_args(&os(&["--exec", "--", "torchrun", "--nproc", "8"]))
            .unwrap()
            .unwrap();
        assert_eq!(a.exec.unwrap(), os(&["torchrun", "--nproc", "8"]));
        for bad in [
            &["--format", "yaml"][..],
            &["--netns"],
            &["--exec", "torchrun"],
            &["--exec", "--"],
            &["--format", "json", "--exec", "--", "x"],
            &["--frob"],
        ] {
            assert!(parse_args(&os(bad)).is_err(), "{bad:?}");
        }
        assert_eq!(parse_args(&os(&["--netns", "/x", "--help"])).unwrap(), None);
        let err = parse_args(&os(&["--exec=torchrun"])).unwrap_err();
        assert_eq!(err.0, "--exec takes `-- CMD [ARG...]`");
    }

    #[test]
    fn formats_quote_for_their_reader() {
        let vars = vec![
            ("NCCL_IB_HCA", "=rxe0:1".to_string()),
            ("NCCL_SOCKET_IFNAME", "=it's".to_string()),
        ];
        assert_eq!(
            render_sh(&vars),
            "export NCCL_IB_HCA='=rxe0:1'\nexport NCCL_SOCKET_IFNAME='=it'\\''s'\n"
        );
        assert_eq!(
            render_env_file(&vars),
            "NCCL_IB_HCA==rxe0:1\nNCCL_SOCKET_IFNAME==it's\n"
        );
        let doc: serde_json::Value =
            serde_json::from_str(&render_json(&vars, &Discovery::default(), &[])).unwrap();
        assert_eq!(doc["env"]["NCCL_IB_HCA"], "=rxe0:1");
        assert!(doc["interfaces"].as_array().unwrap().is_empty());
        assert!(doc["rails"].as_array().unwrap().is_empty());
    }

    /// conf/trainer-env.yaml: the init container copies the binary from the installer image
    /// into the volume the trainer runs it from, wrapping its entrypoint with `env --exec --`.
    #[test]
    fn the_trainer_example_wraps_its_entrypoint_with_the_binary_the_init_container_copies() {
        let root = env!("CARGO_MANIFEST_DIR");
        let read = |p: &str| std::fs::read_to_string(format!("{root}/{p}")).unwrap();
        let pod: serde_json::Value =
            serde_norway::from_str(&read("conf/trainer-env.yaml")).unwrap();
        let daemonset: serde_json::Value =
            serde_norway::from_str(&read("install/daemonset.yaml")).unwrap();
        let installer = &daemonset["spec"]["template"]["spec"]["initContainers"][0]["image"];
        assert_eq!(pod["kind"], "Pod");
        let init = &pod["spec"]["initContainers"][0];
        assert_eq!(
            &init["image"], installer,
            "the installer image gives the binary"
        );
        let cp: Vec<&str> = init["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(cp[..2], ["cp", "/usr/local/bin/rdma-ns"], "{cp:?}");
        let volume = |c: &serde_json::Value, dest: &str| -> String {
            let m = c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| dest.starts_with(m["mountPath"].as_str().unwrap()))
                .unwrap_or_else(|| panic!("{dest} is on no volume of {c}"));
            m["name"].as_str().unwrap().to_string()
        };
        let trainer = &pod["spec"]["containers"][0];
        let cmd: Vec<&str> = trainer["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(cmd[0], cp[2], "the trainer runs the copied binary");
        assert_eq!(volume(init, cp[2]), volume(trainer, cmd[0]));
        let args: Vec<OsString> = cmd[2..].iter().map(OsString::from).collect();
        assert_eq!(cmd[1], "env");
        let parsed = parse_args(&args).unwrap().expect("not --help");
        assert_eq!(parsed.exec.unwrap()[0], "torchrun");
        let vol = &pod["spec"]["volumes"][0];
        assert!(vol["emptyDir"].is_object(), "{vol}");
        assert_eq!(
            trainer["resources"]["limits"]["rdma/hca_shared"], 1,
            "the device plugin's resource mounts the uverbs node"
        );
        let nad: serde_json::Value =
            serde_norway::from_str(&read("conf/nad-macvlan.yaml")).unwrap();
        assert_eq!(
            pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"],
            nad["metadata"]["name"]
        );
    }
}

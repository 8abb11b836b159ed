//! The CNI protocol (spec 1.1.0), knowing nothing about RDMA.
//!
//! [`run`] reads the environment and stdin, validates them per command, dispatches to a
//! [`Plugin`], and writes the result or error JSON on stdout. The plugin sees only parsed,
//! validated requests.

pub mod args;
pub mod conf;
pub mod decode;
pub mod env;
pub mod ipam;
pub mod result;
pub mod version;
pub mod wire;

#[cfg(test)]
mod fuzz_tests;

use std::io::{Read, Write};

use crate::error::{Error, Result};

pub use conf::NetConf;
pub use env::{CniEnv, Command};
pub use result::CniResult;

/// One validated CNI invocation.
#[derive(Debug)]
pub struct Request {
    pub env: CniEnv,
    pub conf: NetConf,
    /// stdin exactly as received: delegated plugins (IPAM) get these same bytes.
    pub stdin: Vec<u8>,
}

/// What a CNI plugin implements. The protocol layer handles VERSION itself.
pub trait Plugin {
    /// ADD: returns the result to print (in the conf's cniVersion).
    fn add(&self, req: &Request) -> Result<CniResult>;
    /// DEL: best effort, idempotent; reports every error met.
    fn del(&self, req: &Request) -> Result<()>;
    /// CHECK: Ok when the attachment is as ADD left it.
    fn check(&self, req: &Request) -> Result<()>;
    /// STATUS: Ok when ready for ADDs (errors 50/51 otherwise).
    fn status(&self, req: &Request) -> Result<()>;
    /// GC: release every attachment of this network not in `cni.dev/valid-attachments`.
    fn gc(&self, req: &Request) -> Result<()>;
}

/// Entry point for a CNI invocation (CNI_COMMAND set). Returns the process exit code.
pub fn run(plugin: &dyn Plugin) -> i32 {
    let mut stdin = Vec::new();
    let read = std::io::stdin().read_to_end(&mut stdin);
    let outcome = match read {
        Ok(_) => dispatch(plugin, std::env::vars_os(), stdin),
        Err(e) => Err((
            version::DEFAULT_ERROR_VERSION.to_string(),
            Error::io("reading the network configuration from stdin", e),
        )),
    };
    let mut out = std::io::stdout().lock();
    match outcome {
        Ok(Some(json)) => {
            let _ = writeln!(out, "{json}");
            0
        }
        Ok(None) => 0,
        Err((cni_version, err)) => {
            crate::log_error!("{err}");
            let _ = writeln!(out, "{}", wire::error_json(&cni_version, &err));
            1
        }
    }
}

/// Parses env and stdin and runs the command. Ok(Some(json)) is printed on stdout; an error
/// carries the cniVersion to report it in.
pub fn dispatch(
    plugin: &dyn Plugin,
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    stdin: Vec<u8>,
) -> std::result::Result<Option<String>, (String, Error)> {
    crate::log::began();
    let raw_env = env::RawEnv::from_vars(vars);
    let command = raw_env
        .command()
        .map_err(|e| (version::DEFAULT_ERROR_VERSION.to_string(), e))?;
    if command == Command::Version {
        return Ok(Some(version::version_reply(&stdin)));
    }
    let conf =
        NetConf::parse(&stdin, command).map_err(|e| (version::error_version_of(&stdin), e))?;
    crate::log::init(
        conf.log_file.as_deref(),
        conf.log_level.as_deref(),
        conf.log_format.as_deref(),
    );
    let reply_version = conf.cni_version.clone();
    let fail = |e: Error| (reply_version.clone(), e);
    let env = raw_env.validate(command).map_err(fail)?;
    crate::log::set_context(crate::log::LogContext {
        container: env.container_id.clone(),
        network: conf.name.clone(),
        ifname: env.ifname.clone(),
        pod: match (
            env.args.get("K8S_POD_NAMESPACE"),
            env.args.get("K8S_POD_NAME"),
        ) {
            (Some(ns), Some(name)) => Some(format!("{ns}/{name}")),
            (None, Some(name)) => Some(name.to_string()),
            _ => None,
        },
    });
    let req = Request { env, conf, stdin };
    crate::log_debug!(
        "{:?} container={} ifname={} netns={:?}",
        req.env.command,
        req.env.container_id,
        req.env.ifname,
        req.env.netns
    );
    crate::log::timed(
        || format!("{command:?}"),
        || run_command(plugin, &req, command),
    )
    .map_err(fail)
}

fn run_command(plugin: &dyn Plugin, req: &Request, command: Command) -> Result<Option<String>> {
    match command {
        Command::Add => {
            let result = plugin.add(req)?;
            Ok(Some(result.to_json(&req.conf.cni_version)?))
        }
        Command::Del => plugin.del(req).map(|_| None),
        Command::Check => plugin.check(req).map(|_| None),
        Command::Status => plugin.status(req).map(|_| None),
        Command::Gc => plugin.gc(req).map(|_| None),
        Command::Version => unreachable!("handled above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::result::IpConfig;
    use std::cell::RefCell;
    use std::ffi::OsString;

    /// Records what each call saw and returns a fixed result or error.
    #[derive(Default)]
    struct Fake {
        calls: RefCell<Vec<(Command, CniEnv, NetConf)>>,
        fail_with: Option<fn() -> Error>,
    }

    impl Fake {
        fn record(&self, req: &Request) -> Result<()> {
            self.calls
                .borrow_mut()
                .push((req.env.command, req.env.clone(), req.conf.clone()));
            match self.fail_with {
                Some(make) => Err(make()),
                None => Ok(()),
            }
        }
    }

    impl Plugin for Fake {
        fn add(&self, req: &Request) -> Result<CniResult> {
            self.record(req)?;
            Ok(CniResult {
                interfaces: vec![result::Interface {
                    name: req.env.ifname.clone(),
                    mtu: Some(4092),
                    sandbox: req.env.netns.as_ref().map(|p| p.display().to_string()),
                    ..Default::default()
                }],
                ips: vec![IpConfig {
                    address: result::parse_cidr("192.168.5.7/24").unwrap(),
                    gateway: None,
                    interface: Some(0),
                }],
                ..Default::default()
            })
        }
        fn del(&self, req: &Request) -> Result<()> {
            self.record(req)
        }
        fn check(&self, req: &Request) -> Result<()> {
            self.record(req)
        }
        fn status(&self, req: &Request) -> Result<()> {
            self.record(req)
        }
        fn gc(&self, req: &Request) -> Result<()> {
            self.record(req)
        }
    }

    fn vars(command: &str, netns: &str) -> Vec<(OsString, OsString)> {
        [
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", "0123abcd"),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "net1"),
            ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=web;FOO=bar"),
            ("CNI_PATH", "/opt/cni/bin"),
            ("HOME", "/root"),
        ]
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
    }

    fn conf(version: &str) -> Vec<u8> {
        format!(r#"{{"cniVersion":"{version}","name":"rdma","type":"rdma-ns","mode":"move"}}"#)
            .into_bytes()
    }

    fn code_of(outcome: std::result::Result<Option<String>, (String, Error)>) -> (String, u32) {
        let (version, err) = outcome.expect_err("dispatch should fail");
        (version, err.code())
    }

    #[test]
    fn version_is_answered_without_the_plugin() {
        let fake = Fake::default();
        let out = dispatch(
            &fake,
            vars("VERSION", ""),
            br#"{"cniVersion":"0.4.0"}"#.to_vec(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            out,
            r#"{"cniVersion":"0.4.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}"#
        );
        let only_command = vec![(OsString::from("CNI_COMMAND"), OsString::from("VERSION"))];
        let out = dispatch(&fake, only_command, Vec::new()).unwrap().unwrap();
        assert!(out.starts_with(r#"{"cniVersion":"1.1.0","#), "{out}");
        assert!(fake.calls.borrow().is_empty());
    }

    #[test]
    fn missing_variables_are_all_named() {
        let fake = Fake::default();
        let only_command = vec![(OsString::from("CNI_COMMAND"), OsString::from("ADD"))];
        let (version, err) = dispatch(&fake, only_command, conf("1.0.0")).unwrap_err();
        assert_eq!(version, "1.0.0");
        let json = wire::error_json(&version, &err);
        for var in ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"] {
            assert!(json.contains(var), "{json}");
        }
        assert!(json.contains(r#""code":4"#), "{json}");
        assert!(fake.calls.borrow().is_empty());

        let (version, code) = code_of(dispatch(&fake, vars("", ""), conf("1.1.0")));
        assert_eq!((version.as_str(), code), ("1.1.0", 4));
        let (_, code) = code_of(dispatch(&fake, vars("UP", ""), conf("1.1.0")));
        assert_eq!(code, 4);
    }

    #[test]
    fn bad_confs_map_to_6_7_and_1() {
        let fake = Fake::default();
        let add = || vars("ADD", "/proc/1/ns/net");
        assert_eq!(
            code_of(dispatch(&fake, add(), b"not json".to_vec())),
            ("1.1.0".to_string(), 6)
        );
        let no_name = br#"{"cniVersion":"0.3.1","type":"rdma-ns"}"#.to_vec();
        assert_eq!(
            code_of(dispatch(&fake, add(), no_name)),
            ("0.3.1".to_string(), 7)
        );
        assert_eq!(
            code_of(dispatch(&fake, add(), conf("0.2.0"))),
            ("0.2.0".to_string(), 1)
        );
        assert_eq!(code_of(dispatch(&fake, vars("GC", ""), conf("1.0.0"))).1, 1);
        assert!(fake.calls.borrow().is_empty());
    }

    #[test]
    fn add_prints_the_result_in_the_conf_version() {
        let fake = Fake::default();
        let old = dispatch(&fake, vars("ADD", "/run/netns/p"), conf("0.4.0"))
            .unwrap()
            .unwrap();
        assert_eq!(
            old,
            r#"{"cniVersion":"0.4.0","interfaces":[{"name":"net1","sandbox":"/run/netns/p"}],"ips":[{"version":"4","interface":0,"address":"192.168.5.7/24"}]}"#
        );
        let new = dispatch(&fake, vars("ADD", "/run/netns/p"), conf("1.1.0"))
            .unwrap()
            .unwrap();
        assert_eq!(
            new,
            r#"{"cniVersion":"1.1.0","interfaces":[{"name":"net1","mtu":4092,"sandbox":"/run/netns/p"}],"ips":[{"interface":0,"address":"192.168.5.7/24"}]}"#
        );
        let calls = fake.calls.borrow();
        let (command, env, conf) = &calls[0];
        assert_eq!(*command, Command::Add);
        assert_eq!(env.container_id, "0123abcd");
        assert_eq!(env.args.get("FOO"), Some("bar"));
        assert_eq!(&*conf.text, self::conf("0.4.0").as_slice());
    }

    #[test]
    fn del_with_empty_netns_reaches_the_plugin() {
        let fake = Fake::default();
        assert_eq!(
            dispatch(&fake, vars("DEL", ""), conf("1.1.0")).unwrap(),
            None
        );
        let calls = fake.calls.borrow();
        assert_eq!(calls[0].0, Command::Del);
        assert_eq!(calls[0].1.netns, None);
    }

    #[test]
    fn check_status_gc_print_nothing() {
        let fake = Fake::default();
        let gc_conf = br#"{"cniVersion":"1.1.0","name":"rdma","type":"rdma-ns","cni.dev/valid-attachments":[{"containerID":"0123abcd","ifname":"net1"}]}"#;
        for (command, stdin) in [
            ("CHECK", conf("1.1.0")),
            ("STATUS", conf("1.1.0")),
            ("GC", gc_conf.to_vec()),
        ] {
            assert_eq!(
                dispatch(&fake, vars(command, "/proc/1/ns/net"), stdin).unwrap(),
                None
            );
        }
        let calls = fake.calls.borrow();
        let seen: Vec<Command> = calls.iter().map(|c| c.0).collect();
        assert_eq!(seen, [Command::Check, Command::Status, Command::Gc]);
        assert_eq!(calls[1].1.container_id, "");
        assert_eq!(calls[2].2.valid_attachments.len(), 1);
    }

    #[test]
    fn unknown_runtime_config_keys_are_ignored_in_either_spelling() {
        let fake = Fake::default();
        for rc in [
            r#"{"deviceID":"0000:3b:00.2","portMappings":[],"someFutureKey":{"a":1}}"#,
            r#"{"DeviceID":"0000:3b:00.2","PortMappings":[],"SomeFutureKey":"x"}"#,
        ] {
            let stdin = format!(
                r#"{{"cniVersion":"1.1.0","name":"rdma","type":"rdma-ns","runtimeConfig":{rc}}}"#
            );
            dispatch(&fake, vars("ADD", "/proc/1/ns/net"), stdin.into_bytes()).unwrap();
        }
        let calls = fake.calls.borrow();
        // One call per spelling: an empty list would pass the loop below.
        assert_eq!(calls.len(), 2);
        for (_, _, conf) in calls.iter() {
            assert_eq!(
                conf.runtime_config.device_id.as_deref(),
                Some("0000:3b:00.2")
            );
        }
    }

    #[test]
    fn plugin_errors_are_reported_in_the_conf_version() {
        let fake = Fake {
            fail_with: Some(|| Error::DeviceInUse("mlx5_0 is held by pod a/b".into())),
            ..Fake::default()
        };
        let (version, err) =
            dispatch(&fake, vars("ADD", "/proc/1/ns/net"), conf("1.0.0")).unwrap_err();
        assert_eq!(
            wire::error_json(&version, &err),
            r#"{"cniVersion":"1.0.0","code":102,"msg":"mlx5_0 is held by pod a/b","details":""}"#
        );
    }
}

//! The CNI protocol (spec 1.1.0), knowing nothing about RDMA.
//!
//! [`run`] reads the environment and stdin, validates them per command, dispatches to a
//! [`Plugin`], and writes the result or error JSON on stdout. The plugin sees only parsed,
//! validated requests.

pub mod args;
pub mod conf;
pub mod env;
pub mod ipam;
pub mod result;
pub mod version;
pub mod wire;

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
            crate::log::error(&format!("{err}"));
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
    let raw_env = env::RawEnv::from_vars(vars);
    let command = raw_env
        .command()
        .map_err(|e| (version::DEFAULT_ERROR_VERSION.to_string(), e))?;
    if command == Command::Version {
        return Ok(Some(version::version_reply(&stdin)));
    }
    let conf = NetConf::parse(&stdin, command)
        .map_err(|e| (version::error_version_of(&stdin), e))?;
    crate::log::init(conf.log_file.as_deref(), conf.log_level.as_deref());
    let reply_version = conf.cni_version.clone();
    let fail = |e: Error| (reply_version.clone(), e);
    let env = raw_env.validate(command).map_err(fail)?;
    let req = Request { env, conf, stdin };
    crate::log::debug(&format!(
        "{:?} container={} ifname={} netns={:?}",
        req.env.command, req.env.container_id, req.env.ifname, req.env.netns
    ));
    match command {
        Command::Add => {
            let result = plugin.add(&req).map_err(fail)?;
            let json = result
                .to_json(&req.conf.cni_version)
                .map_err(fail)?;
            Ok(Some(json))
        }
        Command::Del => plugin.del(&req).map(|_| None).map_err(fail),
        Command::Check => plugin.check(&req).map(|_| None).map_err(fail),
        Command::Status => plugin.status(&req).map(|_| None).map_err(fail),
        Command::Gc => plugin.gc(&req).map(|_| None).map_err(fail),
        Command::Version => unreachable!("handled above"),
    }
}

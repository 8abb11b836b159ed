//! The `CNI_*` environment variables (spec "Parameters") and their per-command requirements.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use crate::cni::args::CniArgs;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Status,
    Gc,
    Version,
}

impl Command {
    pub const ALL: [Command; 6] = [
        Command::Add,
        Command::Del,
        Command::Check,
        Command::Status,
        Command::Gc,
        Command::Version,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Status => "STATUS",
            Command::Gc => "GC",
            Command::Version => "VERSION",
        }
    }

    /// The spec spells commands in upper case and runtimes send them so.
    pub fn parse(text: &str) -> Option<Command> {
        Command::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The CNI_* variables as found, before any per-command check.
#[derive(Debug, Clone, Default)]
pub struct RawEnv {
    command: Option<OsString>,
    container_id: Option<OsString>,
    netns: Option<OsString>,
    ifname: Option<OsString>,
    args: Option<OsString>,
    path: Option<OsString>,
}

/// The validated environment of one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniEnv {
    pub command: Command,
    /// Empty for STATUS and GC, which carry no attachment.
    pub container_id: String,
    /// None for STATUS and GC, and for a DEL whose namespace is already gone.
    pub netns: Option<PathBuf>,
    /// Empty for STATUS and GC.
    pub ifname: String,
    pub args: CniArgs,
    pub path: Vec<PathBuf>,
}

impl RawEnv {
    pub fn from_vars(vars: impl IntoIterator<Item = (OsString, OsString)>) -> RawEnv {
        let mut env = RawEnv::default();
        for (key, value) in vars {
            // libcni exports every variable, leaving the ones it has no value for empty.
            if value.is_empty() {
                continue;
            }
            let slot = match key.to_str() {
                Some("CNI_COMMAND") => &mut env.command,
                Some("CNI_CONTAINERID") => &mut env.container_id,
                Some("CNI_NETNS") => &mut env.netns,
                Some("CNI_IFNAME") => &mut env.ifname,
                Some("CNI_ARGS") => &mut env.args,
                Some("CNI_PATH") => &mut env.path,
                _ => continue,
            };
            *slot = Some(value);
        }
        env
    }

    pub fn command(&self) -> Result<Command> {
        let valid = Command::ALL.map(Command::as_str).join(", ");
        let msg = match &self.command {
            None => format!("CNI_COMMAND is not set; expected one of {valid}"),
            Some(raw) => match raw.to_str().and_then(Command::parse) {
                Some(c) => return Ok(c),
                None => format!("CNI_COMMAND {raw:?} is not one of {valid}"),
            },
        };
        Err(Error::InvalidEnv {
            vars: vec!["CNI_COMMAND".into()],
            msg,
        })
    }

    /// Checks the variables `command` needs and reports every problem at once, so one failed
    /// run shows the operator everything to fix.
    pub fn validate(&self, command: Command) -> Result<CniEnv> {
        // STATUS and GC concern the whole network, so the spec gives them only CNI_PATH; any
        // attachment variables a runtime leaves set are ignored, not validated.
        let attachment = matches!(command, Command::Add | Command::Del | Command::Check);
        let mut problems = Problems::default();
        let (container_id, ifname) = if attachment {
            (
                self.container_id_for(command, &mut problems),
                self.ifname_for(command, &mut problems),
            )
        } else {
            (String::new(), String::new())
        };
        let netns = self.netns_for(command, &mut problems);
        let path = self.path_for(command, &mut problems);
        let args = if attachment {
            self.args_for(&mut problems)?
        } else {
            CniArgs::default()
        };
        problems.into_result()?;
        Ok(CniEnv {
            command,
            container_id,
            netns,
            ifname,
            args,
            path,
        })
    }

    fn container_id_for(&self, command: Command, problems: &mut Problems) -> String {
        problems
            .utf8("CNI_CONTAINERID", self.container_id.as_deref(), command)
            .filter(|id| {
                let ok = is_valid_name(id);
                if !ok {
                    problems.push(
                        "CNI_CONTAINERID",
                        format!(
                            "CNI_CONTAINERID {id:?} must start with a letter or digit and hold \
                             only letters, digits, '_', '.' and '-'"
                        ),
                    );
                }
                ok
            })
            .unwrap_or_default()
    }

    fn ifname_for(&self, command: Command, problems: &mut Problems) -> String {
        problems
            .utf8("CNI_IFNAME", self.ifname.as_deref(), command)
            .filter(|name| match ifname_problem(name) {
                None => true,
                Some(why) => {
                    problems.push("CNI_IFNAME", format!("CNI_IFNAME {name:?} {why}"));
                    false
                }
            })
            .unwrap_or_default()
    }

    /// DEL keeps CNI_NETNS optional: runtimes send it empty once the namespace is gone, and
    /// DEL must still release everything else.
    fn netns_for(&self, command: Command, problems: &mut Problems) -> Option<PathBuf> {
        match command {
            Command::Add | Command::Check => {
                if self.netns.is_none() {
                    problems.missing("CNI_NETNS", command);
                }
                self.netns.clone().map(PathBuf::from)
            }
            Command::Del => self.netns.clone().map(PathBuf::from),
            _ => None,
        }
    }

    fn path_for(&self, command: Command, problems: &mut Problems) -> Vec<PathBuf> {
        let Some(raw) = &self.path else {
            problems.missing("CNI_PATH", command);
            return Vec::new();
        };
        let dirs: Vec<PathBuf> = split_path(raw);
        if dirs.is_empty() {
            problems.push("CNI_PATH", format!("CNI_PATH {raw:?} names no directory"));
        }
        dirs
    }

    /// CNI_ARGS, whose syntax problems join the others. An unknown key is a different failure
    /// (code 2), the error itself when the environment is otherwise sound.
    fn args_for(&self, problems: &mut Problems) -> Result<CniArgs> {
        let Some(raw) = self.args.as_deref() else {
            return Ok(CniArgs::default());
        };
        let Some(text) = raw.to_str() else {
            problems.push("CNI_ARGS", format!("CNI_ARGS {raw:?} is not UTF-8"));
            return Ok(CniArgs::default());
        };
        match CniArgs::parse(text) {
            Ok(a) => Ok(a),
            Err(Error::InvalidEnv { msg, .. }) => {
                problems.push("CNI_ARGS", msg);
                Ok(CniArgs::default())
            }
            Err(other) if problems.is_empty() => Err(other),
            Err(_) => Ok(CniArgs::default()),
        }
    }
}

#[derive(Default)]
struct Problems {
    vars: Vec<String>,
    msgs: Vec<String>,
}

impl Problems {
    fn push(&mut self, var: &str, msg: String) {
        if !self.vars.iter().any(|v| v == var) {
            self.vars.push(var.to_string());
        }
        self.msgs.push(msg);
    }

    fn missing(&mut self, var: &str, command: Command) {
        self.push(var, format!("{var} is required for {command} but not set"));
    }

    fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }

    /// A required variable as a string; records why when absent or not UTF-8.
    fn utf8(&mut self, var: &str, value: Option<&OsStr>, command: Command) -> Option<String> {
        match value {
            None => {
                self.missing(var, command);
                None
            }
            Some(raw) => match raw.to_str() {
                Some(s) => Some(s.to_string()),
                None => {
                    self.push(var, format!("{var} {raw:?} is not UTF-8"));
                    None
                }
            },
        }
    }

    fn into_result(self) -> Result<()> {
        if self.vars.is_empty() {
            return Ok(());
        }
        Err(Error::InvalidEnv {
            vars: self.vars,
            msg: self.msgs.join("; "),
        })
    }
}

fn split_path(raw: &OsStr) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    raw.as_bytes()
        .split(|&b| b == b':')
        .filter(|part| !part.is_empty())
        .map(|part| PathBuf::from(OsStr::from_bytes(part)))
        .collect()
}

/// The spec's pattern for container IDs and network names: `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`.
pub fn is_valid_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    match bytes.next() {
        Some(first) if first.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Why `name` cannot be a Linux interface name (the kernel's dev_valid_name rules, which the
/// spec defers to), or None when it can.
pub fn ifname_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.len() > 15 {
        Some("is longer than 15 bytes (IFNAMSIZ - 1)")
    } else if name == "." || name == ".." {
        Some("cannot be '.' or '..'")
    } else if name.contains(['/', ':']) {
        Some("cannot contain '/' or ':'")
    } else if name.chars().any(char::is_whitespace) {
        Some("cannot contain whitespace")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(vars: &[(&str, &str)]) -> RawEnv {
        RawEnv::from_vars(
            vars.iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        )
    }

    fn full(command: &str) -> Vec<(&'static str, String)> {
        vec![
            ("CNI_COMMAND", command.to_string()),
            ("CNI_CONTAINERID", "abc123".into()),
            ("CNI_NETNS", "/var/run/netns/pod".into()),
            ("CNI_IFNAME", "net1".into()),
            ("CNI_ARGS", "K8S_POD_NAME=web".into()),
            ("CNI_PATH", "/opt/cni/bin::/usr/lib/cni".into()),
        ]
    }

    fn env_of(vars: &[(&str, String)]) -> RawEnv {
        let borrowed: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        raw(&borrowed)
    }

    fn invalid_vars(e: Error) -> Vec<String> {
        match e {
            Error::InvalidEnv { vars, .. } => vars,
            other => panic!("expected InvalidEnv, got {other:?}"),
        }
    }

    #[test]
    fn commands_parse_and_print() {
        for c in Command::ALL {
            assert_eq!(Command::parse(c.as_str()), Some(c));
        }
        assert_eq!(
            raw(&[("CNI_COMMAND", "GC")]).command().unwrap(),
            Command::Gc
        );
        let e = raw(&[("CNI_COMMAND", "add")]).command().unwrap_err();
        assert_eq!(e.code(), 4);
        assert!(e.to_string().contains("CNI_COMMAND") && e.to_string().contains("\"add\""));
        let e = raw(&[("CNI_COMMAND", "")]).command().unwrap_err();
        assert!(e.to_string().contains("not set"), "{e}");
    }

    #[test]
    fn add_takes_everything() {
        let env = env_of(&full("ADD")).validate(Command::Add).unwrap();
        assert_eq!(env.container_id, "abc123");
        assert_eq!(env.netns, Some(PathBuf::from("/var/run/netns/pod")));
        assert_eq!(env.ifname, "net1");
        assert_eq!(env.args.get("K8S_POD_NAME"), Some("web"));
        assert_eq!(
            env.path,
            [PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")]
        );
    }

    #[test]
    fn every_missing_variable_is_named_once() {
        let e = raw(&[("CNI_COMMAND", "ADD"), ("CNI_NETNS", "")])
            .validate(Command::Add)
            .unwrap_err();
        assert_eq!(e.code(), 4);
        assert_eq!(
            invalid_vars(e),
            ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS", "CNI_PATH"]
        );
        let e = raw(&[]).validate(Command::Del).unwrap_err();
        assert_eq!(
            invalid_vars(e),
            ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"]
        );
    }

    #[test]
    fn del_tolerates_an_empty_netns() {
        let mut vars = full("DEL");
        vars[2].1 = String::new();
        let env = env_of(&vars).validate(Command::Del).unwrap();
        assert_eq!(env.netns, None);
        assert_eq!(env.ifname, "net1");
    }

    #[test]
    fn status_and_gc_need_only_cni_path() {
        for c in [Command::Status, Command::Gc] {
            let env = raw(&[("CNI_PATH", "/opt/cni/bin"), ("CNI_IFNAME", "bad/name")])
                .validate(c)
                .unwrap();
            assert_eq!(env.container_id, "");
            assert_eq!(env.ifname, "");
            assert_eq!(env.netns, None);
            assert_eq!(
                invalid_vars(raw(&[]).validate(c).unwrap_err()),
                ["CNI_PATH"]
            );
        }
    }

    #[test]
    fn malformed_values_are_reported_together() {
        let mut vars = full("CHECK");
        vars[1].1 = "-leading-dash".into();
        vars[3].1 = "eth0:1".into();
        vars[4].1 = "novalue".into();
        vars[5].1 = ":::".into();
        let e = env_of(&vars).validate(Command::Check).unwrap_err();
        let text = e.to_string();
        assert_eq!(
            invalid_vars(e),
            ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH", "CNI_ARGS"]
        );
        assert!(
            text.contains("-leading-dash") && text.contains("eth0:1"),
            "{text}"
        );
    }

    #[test]
    fn unknown_args_key_is_code_2_when_env_is_otherwise_fine() {
        let mut vars = full("ADD");
        vars[4].1 = "FOO=1".into();
        assert_eq!(env_of(&vars).validate(Command::Add).unwrap_err().code(), 2);
        vars[3].1 = String::new();
        assert_eq!(
            invalid_vars(env_of(&vars).validate(Command::Add).unwrap_err()),
            ["CNI_IFNAME"]
        );
    }

    #[test]
    fn names_follow_the_spec_pattern() {
        for ok in ["a", "0", "abc-DEF_1.2", "3f6940ab5ab4"] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in ["", "-a", "_a", ".a", "a b", "a/b", "ä", "a:b"] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn ifnames_follow_the_kernel_rules() {
        for ok in ["eth0", "net1", "a", "ib0.8001", "fifteen-chars-x"] {
            assert_eq!(ifname_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a:b",
            "a b",
            "a\tb",
            "sixteen-chars-xx",
        ] {
            assert!(ifname_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn non_utf8_values_are_invalid() {
        use std::os::unix::ffi::OsStringExt;
        let vars = vec![
            (OsString::from("CNI_COMMAND"), OsString::from("ADD")),
            (
                OsString::from("CNI_CONTAINERID"),
                OsString::from_vec(vec![0xff]),
            ),
            (
                OsString::from("CNI_NETNS"),
                OsString::from("/proc/1/ns/net"),
            ),
            (OsString::from("CNI_IFNAME"), OsString::from("eth0")),
            (OsString::from("CNI_PATH"), OsString::from("/opt/cni/bin")),
        ];
        let e = RawEnv::from_vars(vars).validate(Command::Add).unwrap_err();
        assert_eq!(invalid_vars(e), ["CNI_CONTAINERID"]);
    }
}

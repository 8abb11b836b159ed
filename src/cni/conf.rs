//! The network configuration on stdin (spec "Network configuration" and "Execution
//! parameters"): the fields the protocol defines, plus the whole object for the plugin's own.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::cni::env::{is_valid_name, Command};
use crate::cni::result::{CniResult, Dns};
use crate::cni::version;
use crate::error::{Error, Result};

/// Default `ipamTimeoutMs`. Long enough for a cluster IPAM that retries against the Kubernetes API
/// (whereabouts) under load; short enough that a hung one fails the ADD with a named error well
/// before the kubelet gives up on the sandbox (its CRI calls for sandboxes time out after twice
/// runtime-request-timeout, 4 minutes by default) and retries the pod.
pub const DEFAULT_IPAM_TIMEOUT_MS: u64 = 60_000;

#[derive(Debug, Clone, PartialEq)]
pub struct NetConf {
    pub cni_version: String,
    pub name: String,
    /// The conf's `type`: the plugin binary's name.
    pub plugin_type: String,
    /// The `ipam` section, None when absent or empty (`{}`).
    pub ipam: Option<Value>,
    pub dns: Option<Dns>,
    pub prev_result: Option<CniResult>,
    pub runtime_config: RuntimeConfig,
    pub capabilities: BTreeMap<String, bool>,
    pub log_file: Option<String>,
    pub log_level: Option<String>,
    pub data_dir: Option<String>,
    /// GC's `cni.dev/valid-attachments`; empty for other commands.
    pub valid_attachments: Vec<Attachment>,
    /// The whole object, for the plugin's own fields.
    pub raw: Map<String, Value>,
}

/// `runtimeConfig`: the runtime's answers to the conf's `capabilities`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeConfig {
    /// Device-plugin allocation (Multus, SR-IOV network device plugin): a PCI address or
    /// auxiliary device name.
    pub device_id: Option<String>,
    pub cni_device_info_file: Option<String>,
    pub ips: Vec<String>,
    pub mac: Option<String>,
    /// The whole object as sent, in its own spelling.
    pub raw: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub container_id: String,
    pub ifname: String,
}

const VALID_ATTACHMENTS: &str = "cni.dev/valid-attachments";
/// The key an earlier 1.1.0 draft used; libcni still sends both.
const VALID_ATTACHMENTS_DRAFT: &str = "cni.dev/attachments";

impl NetConf {
    pub fn parse(stdin: &[u8], command: Command) -> Result<NetConf> {
        let value: Value = serde_json::from_slice(stdin)
            .map_err(|e| Error::decode("network configuration on stdin", e.to_string()))?;
        let Value::Object(raw) = value else {
            return Err(Error::decode(
                "network configuration on stdin",
                format!("expected a JSON object, got {}", kind(&value)),
            ));
        };

        let cni_version = match raw.get("cniVersion") {
            Some(Value::String(v)) if !v.is_empty() => v.clone(),
            None | Some(Value::Null) => {
                return Err(Error::config("cniVersion", "is required"));
            }
            Some(other) => {
                return Err(Error::config(
                    "cniVersion",
                    format!("must be a version string such as \"1.1.0\", got {other}"),
                ))
            }
        };
        if !version::is_supported(&cni_version) {
            return Err(Error::IncompatibleVersion {
                version: cni_version,
                msg: format!(
                    "this plugin supports {}",
                    version::SUPPORTED_VERSIONS.join(", ")
                ),
            });
        }
        // STATUS and GC were introduced in 1.1.0; a runtime must not send them for an older
        // network version.
        if matches!(command, Command::Status | Command::Gc)
            && version::compare(&cni_version, "1.1.0") == Some(std::cmp::Ordering::Less)
        {
            return Err(Error::IncompatibleVersion {
                msg: format!(
                    "{command} exists only since CNI 1.1.0; set the network's cniVersion to \
                     1.1.0"
                ),
                version: cni_version,
            });
        }

        let name = required_str(&raw, "name")?;
        if !is_valid_name(&name) {
            return Err(Error::config(
                "name",
                format!(
                    "{name:?} must start with a letter or digit and hold only letters, digits, \
                     '_', '.' and '-'"
                ),
            ));
        }
        let plugin_type = required_str(&raw, "type")?;

        let ipam = parse_ipam(raw.get("ipam"))?;
        let dns = match raw.get("dns") {
            None | Some(Value::Null) => None,
            Some(v) => Some(Dns::from_value(v, "dns").map_err(|m| Error::config("dns", m))?),
        };
        let prev_result = match raw.get("prevResult") {
            None | Some(Value::Null) => None,
            Some(v) => Some(CniResult::parse(v, &cni_version).map_err(|e| match e {
                Error::Decode { msg, .. } => Error::decode("prevResult", msg),
                other => other,
            })?),
        };
        let runtime_config = parse_runtime_config(raw.get("runtimeConfig"))?;
        let capabilities = parse_capabilities(raw.get("capabilities"))?;
        let valid_attachments = if command == Command::Gc {
            parse_attachments(&raw)?
        } else {
            Vec::new()
        };

        Ok(NetConf {
            log_file: opt_str(&raw, "logFile")?,
            log_level: opt_str(&raw, "logLevel")?,
            data_dir: opt_str(&raw, "dataDir")?,
            cni_version,
            name,
            plugin_type,
            ipam,
            dns,
            prev_result,
            runtime_config,
            capabilities,
            valid_attachments,
            raw,
        })
    }

    /// The IPAM plugin's name, from `ipam.type`.
    pub fn ipam_type(&self) -> Option<&str> {
        self.ipam.as_ref()?.get("type")?.as_str()
    }

    /// `ipamTimeoutMs`: how long a delegated IPAM plugin may run before it is killed.
    pub fn ipam_timeout(&self) -> Result<std::time::Duration> {
        match self.raw_u32("ipamTimeoutMs")? {
            None => Ok(std::time::Duration::from_millis(DEFAULT_IPAM_TIMEOUT_MS)),
            Some(0) => Err(Error::config(
                "ipamTimeoutMs",
                "0 would kill every IPAM plugin at once; give milliseconds, at least 1 (default \
                 60000)",
            )),
            Some(ms) => Ok(std::time::Duration::from_millis(u64::from(ms))),
        }
    }

    /// A plugin-specific string field; null counts as absent.
    pub fn raw_str(&self, key: &str) -> Result<Option<String>> {
        opt_str(&self.raw, key)
    }

    /// A plugin-specific non-negative integer field that fits in 32 bits.
    pub fn raw_u32(&self, key: &str) -> Result<Option<u32>> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    Error::config(
                        key,
                        format!("must be an integer from 0 to {}, got {v}", u32::MAX),
                    )
                }),
        }
    }

    pub fn raw_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.raw.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(Error::config(
                key,
                format!("must be true or false, got {v}"),
            )),
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn opt_str(obj: &Map<String, Value>, key: &str) -> Result<Option<String>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(Error::config(key, format!("must be a string, got {v}"))),
    }
}

fn required_str(obj: &Map<String, Value>, key: &str) -> Result<String> {
    match opt_str(obj, key)? {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(Error::config(key, "is required")),
    }
}

fn parse_ipam(value: Option<&Value>) -> Result<Option<Value>> {
    let obj = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(obj)) => obj,
        Some(v) => {
            return Err(Error::config(
                "ipam",
                format!("must be an object, got {}", kind(v)),
            ))
        }
    };
    // `"ipam": {}` is how many published confs (SR-IOV, Multus examples) say "no IPAM"; the
    // reference plugins skip IPAM when its type is empty, so we do too.
    if obj.is_empty() {
        return Ok(None);
    }
    match obj.get("type") {
        Some(Value::String(t)) if !t.is_empty() => Ok(Some(Value::Object(obj.clone()))),
        Some(Value::String(_)) | None | Some(Value::Null) => Err(Error::config(
            "ipam.type",
            "is required when ipam has other fields (the IPAM plugin's name, e.g. \
             \"host-local\")",
        )),
        Some(v) => Err(Error::config(
            "ipam.type",
            format!("must be a string, got {v}"),
        )),
    }
}

/// Runtimes disagree on spelling (containerd's CRI capitalizes, e.g. `DeviceID`), so known
/// keys match case-insensitively; when two spellings of one key disagree we refuse to guess.
fn parse_runtime_config(value: Option<&Value>) -> Result<RuntimeConfig> {
    let raw = match value {
        None | Some(Value::Null) => return Ok(RuntimeConfig::default()),
        Some(Value::Object(obj)) => obj.clone(),
        Some(v) => {
            return Err(Error::config(
                "runtimeConfig",
                format!("must be an object, got {}", kind(v)),
            ))
        }
    };
    let lookup = |wanted: &str| -> Result<Option<(&String, &Value)>> {
        let mut found: Option<(&String, &Value)> = None;
        for (key, value) in raw.iter().filter(|(k, _)| k.eq_ignore_ascii_case(wanted)) {
            if value.is_null() {
                continue;
            }
            match found {
                Some((first, v)) if v != value => {
                    return Err(Error::config(
                        format!("runtimeConfig.{wanted}"),
                        format!("given twice with different values, as `{first}` and `{key}`"),
                    ))
                }
                Some(_) => {}
                None => found = Some((key, value)),
            }
        }
        Ok(found)
    };
    let string = |wanted: &str| -> Result<Option<String>> {
        match lookup(wanted)? {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(s.clone())),
            Some((key, v)) => Err(Error::config(
                format!("runtimeConfig.{key}"),
                format!("must be a string, got {v}"),
            )),
        }
    };
    let ips = match lookup("ips")? {
        None => Vec::new(),
        Some((key, Value::Array(items))) => items
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    Error::config(
                        format!("runtimeConfig.{key}"),
                        format!("must be an array of strings, got an element {v}"),
                    )
                })
            })
            .collect::<Result<_>>()?,
        Some((key, v)) => {
            return Err(Error::config(
                format!("runtimeConfig.{key}"),
                format!("must be an array of strings, got {v}"),
            ))
        }
    };
    Ok(RuntimeConfig {
        device_id: string("deviceID")?,
        cni_device_info_file: string("CNIDeviceInfoFile")?,
        ips,
        mac: string("mac")?,
        raw,
    })
}

fn parse_capabilities(value: Option<&Value>) -> Result<BTreeMap<String, bool>> {
    match value {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(obj)) => obj
            .iter()
            .map(|(k, v)| match v {
                Value::Bool(b) => Ok((k.clone(), *b)),
                other => Err(Error::config(
                    format!("capabilities.{k}"),
                    format!("must be true or false, got {other}"),
                )),
            })
            .collect(),
        Some(v) => Err(Error::config(
            "capabilities",
            format!("must be an object of booleans, got {}", kind(v)),
        )),
    }
}

/// GC releases everything not listed, so a conf without the list is refused rather than read
/// as "nothing is valid". An explicit null is an empty list: that is how libcni encodes a
/// network with no remaining attachments.
fn parse_attachments(raw: &Map<String, Value>) -> Result<Vec<Attachment>> {
    let (key, value) = match (raw.get(VALID_ATTACHMENTS), raw.get(VALID_ATTACHMENTS_DRAFT)) {
        (Some(v), _) => (VALID_ATTACHMENTS, v),
        (None, Some(v)) => (VALID_ATTACHMENTS_DRAFT, v),
        (None, None) => {
            return Err(Error::config(
                VALID_ATTACHMENTS,
                "is required for GC (the attachments to keep); without it every attachment of \
                 this network would be released",
            ))
        }
    };
    let items = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        v => {
            return Err(Error::config(
                key,
                format!("must be an array, got {}", kind(v)),
            ))
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let field = |name: &str| {
                item.get(name)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .ok_or_else(|| {
                        Error::config(
                            format!("{key}[{i}].{name}"),
                            format!("must be a non-empty string in {item}"),
                        )
                    })
            };
            Ok(Attachment {
                container_id: field("containerID")?,
                ifname: field("ifname")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value, command: Command) -> Result<NetConf> {
        NetConf::parse(v.to_string().as_bytes(), command)
    }

    fn base() -> Value {
        json!({"cniVersion": "1.1.0", "name": "rdma-net", "type": "rdma-ns"})
    }

    fn with(key: &str, value: Value) -> Value {
        let mut v = base();
        v[key] = value;
        v
    }

    fn field_of(e: &Error) -> &str {
        match e {
            Error::InvalidConfig { field, .. } => field,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn minimal_conf() {
        let c = parse(base(), Command::Add).unwrap();
        assert_eq!(
            (
                c.cni_version.as_str(),
                c.name.as_str(),
                c.plugin_type.as_str()
            ),
            ("1.1.0", "rdma-net", "rdma-ns")
        );
        assert_eq!(c.ipam, None);
        assert_eq!(c.prev_result, None);
        assert_eq!(c.runtime_config, RuntimeConfig::default());
        assert!(c.capabilities.is_empty() && c.valid_attachments.is_empty());
        assert_eq!(c.raw.len(), 3);
    }

    #[test]
    fn undecodable_stdin_is_code_6() {
        for stdin in [&b""[..], b"{", b"[]", b"\"x\"", b"null"] {
            let e = NetConf::parse(stdin, Command::Add).unwrap_err();
            assert_eq!(e.code(), 6, "{stdin:?}");
        }
    }

    #[test]
    fn version_rules() {
        let mut v = base();
        v.as_object_mut().unwrap().remove("cniVersion");
        assert_eq!(field_of(&parse(v, Command::Add).unwrap_err()), "cniVersion");
        assert_eq!(
            parse(with("cniVersion", json!(1)), Command::Add)
                .unwrap_err()
                .code(),
            7
        );

        let e = parse(with("cniVersion", json!("0.2.0")), Command::Add).unwrap_err();
        assert_eq!(e.code(), 1);
        assert!(
            e.to_string().contains("0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"),
            "{e}"
        );

        for old in ["0.4.0", "1.0.0"] {
            assert!(parse(with("cniVersion", json!(old)), Command::Add).is_ok());
            let e = parse(with("cniVersion", json!(old)), Command::Status).unwrap_err();
            assert_eq!(e.code(), 1, "{old}");
            assert!(e.to_string().contains("STATUS"), "{e}");
        }
    }

    #[test]
    fn name_and_type_are_required_and_checked() {
        for (key, value) in [
            ("name", json!(null)),
            ("name", json!("")),
            ("name", json!("-bad")),
            ("name", json!("a b")),
            ("name", json!(5)),
            ("type", json!(null)),
            ("type", json!(true)),
        ] {
            let e = parse(with(key, value.clone()), Command::Add).unwrap_err();
            assert_eq!(field_of(&e), key, "{value}");
        }
    }

    #[test]
    fn ipam_section() {
        let c = parse(
            with(
                "ipam",
                json!({"type": "host-local", "subnet": "10.0.0.0/24"}),
            ),
            Command::Add,
        )
        .unwrap();
        assert_eq!(c.ipam_type(), Some("host-local"));
        assert_eq!(c.ipam.unwrap()["subnet"], "10.0.0.0/24");
        assert_eq!(
            parse(with("ipam", json!({})), Command::Add).unwrap().ipam,
            None
        );
        for bad in [
            json!("host-local"),
            json!({"subnet": "x"}),
            json!({"type": ""}),
            json!({"type": 1}),
        ] {
            let e = parse(with("ipam", bad.clone()), Command::Add).unwrap_err();
            assert_eq!(e.code(), 7, "{bad}");
            assert!(field_of(&e).starts_with("ipam"), "{bad}");
        }
    }

    #[test]
    fn dns_and_capabilities() {
        let c = parse(
            with("dns", json!({"nameservers": ["1.1.1.1"]})),
            Command::Add,
        )
        .unwrap();
        assert_eq!(c.dns.unwrap().nameservers, ["1.1.1.1"]);
        assert_eq!(
            field_of(&parse(with("dns", json!([])), Command::Add).unwrap_err()),
            "dns"
        );

        let c = parse(
            with("capabilities", json!({"deviceID": true, "ips": false})),
            Command::Add,
        )
        .unwrap();
        assert_eq!(c.capabilities.get("deviceID"), Some(&true));
        assert_eq!(c.capabilities.get("ips"), Some(&false));
        let e = parse(with("capabilities", json!({"mac": "yes"})), Command::Add).unwrap_err();
        assert_eq!(field_of(&e), "capabilities.mac");
    }

    #[test]
    fn prev_result_uses_the_conf_version_and_bad_ones_are_code_6() {
        let prev = json!({"ips": [{"version": "4", "address": "10.0.0.2/24"}]});
        let c = parse(
            json!({"cniVersion": "0.4.0", "name": "n", "type": "t", "prevResult": prev}),
            Command::Check,
        )
        .unwrap();
        assert_eq!(
            c.prev_result.unwrap().ips[0].address.to_string(),
            "10.0.0.2/24"
        );

        let e = parse(
            with("prevResult", json!({"ips": [{"address": "nope"}]})),
            Command::Add,
        )
        .unwrap_err();
        assert_eq!(e.code(), 6);
        assert!(
            e.to_string().contains("prevResult") && e.to_string().contains("ips[0]"),
            "{e}"
        );
    }

    #[test]
    fn runtime_config_keys_match_in_any_case() {
        let lower = json!({"deviceID": "0000:3b:00.2", "CNIDeviceInfoFile": "/run/x.json",
                           "ips": ["10.0.0.5/24"], "mac": "02:00:00:00:00:01",
                           "portMappings": [], "whatever": 1});
        let upper = json!({"DeviceID": "0000:3b:00.2", "CniDeviceInfoFile": "/run/x.json",
                           "IPs": ["10.0.0.5/24"], "Mac": "02:00:00:00:00:01",
                           "PortMappings": [], "Bandwidth": {}});
        let mut seen = Vec::new();
        for rc in [lower, upper] {
            let c = parse(with("runtimeConfig", rc.clone()), Command::Add).unwrap();
            let r = c.runtime_config;
            assert_eq!(r.device_id.as_deref(), Some("0000:3b:00.2"), "{rc}");
            assert_eq!(
                r.cni_device_info_file.as_deref(),
                Some("/run/x.json"),
                "{rc}"
            );
            assert_eq!(r.ips, ["10.0.0.5/24"], "{rc}");
            assert_eq!(r.mac.as_deref(), Some("02:00:00:00:00:01"), "{rc}");
            assert_eq!(Value::Object(r.raw.clone()), rc);
            seen.push((r.device_id, r.ips, r.mac));
        }
        assert_eq!(seen[0], seen[1]);
    }

    #[test]
    fn runtime_config_type_errors_and_conflicts() {
        for (rc, field) in [
            (json!({"DeviceID": 3}), "runtimeConfig.DeviceID"),
            (json!({"ips": "10.0.0.1"}), "runtimeConfig.ips"),
            (json!({"IPs": [1]}), "runtimeConfig.IPs"),
            (
                json!({"deviceID": "a", "DeviceID": "b"}),
                "runtimeConfig.deviceID",
            ),
            (json!([]), "runtimeConfig"),
        ] {
            let e = parse(with("runtimeConfig", rc.clone()), Command::Add).unwrap_err();
            assert_eq!(field_of(&e), field, "{rc}");
        }
        let same = json!({"deviceID": "a", "DeviceID": "a"});
        let c = parse(with("runtimeConfig", same), Command::Add).unwrap();
        assert_eq!(c.runtime_config.device_id.as_deref(), Some("a"));
    }

    #[test]
    fn gc_attachments() {
        let list = json!([{"containerID": "c1", "ifname": "net1"}, {"containerID": "c2", "ifname": "net2"}]);
        for key in [VALID_ATTACHMENTS, VALID_ATTACHMENTS_DRAFT] {
            let c = parse(with(key, list.clone()), Command::Gc).unwrap();
            assert_eq!(
                c.valid_attachments,
                [
                    Attachment {
                        container_id: "c1".into(),
                        ifname: "net1".into()
                    },
                    Attachment {
                        container_id: "c2".into(),
                        ifname: "net2".into()
                    },
                ],
                "{key}"
            );
        }
        let mut both = with(VALID_ATTACHMENTS, json!([]));
        both[VALID_ATTACHMENTS_DRAFT] = list.clone();
        assert!(parse(both, Command::Gc)
            .unwrap()
            .valid_attachments
            .is_empty());
        assert!(parse(with(VALID_ATTACHMENTS, json!(null)), Command::Gc)
            .unwrap()
            .valid_attachments
            .is_empty());

        let e = parse(base(), Command::Gc).unwrap_err();
        assert_eq!(field_of(&e), VALID_ATTACHMENTS);
        let e = parse(
            with(VALID_ATTACHMENTS, json!([{"containerID": "c1"}])),
            Command::Gc,
        )
        .unwrap_err();
        assert_eq!(field_of(&e), "cni.dev/valid-attachments[0].ifname");
        // Other commands do not read the list, so a stray one is not an error.
        assert!(parse(with(VALID_ATTACHMENTS, json!(3)), Command::Add).is_ok());
    }

    #[test]
    fn logging_and_plugin_fields() {
        let mut v = base();
        v["logFile"] = json!("/var/log/rdma-ns.log");
        v["logLevel"] = json!("debug");
        v["dataDir"] = json!("/var/lib/cni/rdma-ns");
        v["mode"] = json!("move");
        v["mtu"] = json!(9000);
        v["strict"] = json!(false);
        v["unknownThing"] = json!({"nested": true});
        let c = parse(v, Command::Add).unwrap();
        assert_eq!(c.log_file.as_deref(), Some("/var/log/rdma-ns.log"));
        assert_eq!(c.log_level.as_deref(), Some("debug"));
        assert_eq!(c.data_dir.as_deref(), Some("/var/lib/cni/rdma-ns"));
        assert_eq!(c.raw_str("mode").unwrap().as_deref(), Some("move"));
        assert_eq!(c.raw_str("device").unwrap(), None);
        assert_eq!(c.raw_u32("mtu").unwrap(), Some(9000));
        assert_eq!(c.raw_bool("strict").unwrap(), Some(false));
        assert_eq!(field_of(&c.raw_str("mtu").unwrap_err()), "mtu");
        assert_eq!(field_of(&c.raw_u32("mode").unwrap_err()), "mode");
        assert_eq!(field_of(&c.raw_bool("mode").unwrap_err()), "mode");

        assert_eq!(
            field_of(&parse(with("logFile", json!(1)), Command::Add).unwrap_err()),
            "logFile"
        );
        let e = parse(with("mtu", json!(-1)), Command::Add)
            .unwrap()
            .raw_u32("mtu")
            .unwrap_err();
        assert_eq!(e.code(), 7);
        let e = parse(with("mtu", json!(1u64 << 32)), Command::Add)
            .unwrap()
            .raw_u32("mtu")
            .unwrap_err();
        assert_eq!(e.code(), 7);
    }
}

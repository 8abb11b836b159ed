//! The network configuration on stdin (spec "Network configuration" and "Execution
//! parameters"): the fields the protocol defines, decoded into derived types; the plugin's own
//! fields are decoded by the plugin from the same text ([`NetConf::fields`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::cni::decode::{self, objects_only, Failure};
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
    pub ipam: Option<Ipam>,
    pub dns: Option<Dns>,
    pub prev_result: Option<CniResult>,
    pub runtime_config: RuntimeConfig,
    pub capabilities: BTreeMap<String, bool>,
    pub log_file: Option<String>,
    pub log_level: Option<String>,
    /// `logFormat`: `text` (default) or `json`.
    pub log_format: Option<String>,
    pub data_dir: Option<String>,
    /// GC's `cni.dev/valid-attachments`; empty for other commands.
    pub valid_attachments: Vec<Attachment>,
    /// The conf as received, for [`NetConf::fields`].
    pub text: Arc<[u8]>,
}

/// The `ipam` section as this plugin reads it: only the plugin to run. The IPAM plugin gets the
/// whole conf as received and reads the rest itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipam {
    pub plugin_type: String,
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub container_id: String,
    pub ifname: String,
}

const VALID_ATTACHMENTS: &str = "cni.dev/valid-attachments";
/// The key an earlier 1.1.0 draft used; libcni still sends both.
const VALID_ATTACHMENTS_DRAFT: &str = "cni.dev/attachments";

/// The protocol's fields as sent. Type errors surface here with their path; the rules that
/// need several fields (or the command) are applied in [`NetConf::parse`].
#[derive(Deserialize)]
struct WireConf<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: Option<String>,
    name: Option<String>,
    #[serde(rename = "type")]
    plugin_type: Option<String>,
    ipam: Option<WireIpam>,
    dns: Option<Dns>,
    /// Kept as text: its layout depends on a version that may come later in the object.
    #[serde(rename = "prevResult", borrow)]
    prev_result: Option<&'a RawValue>,
    #[serde(rename = "runtimeConfig")]
    runtime_config: Option<WireRuntimeConfig>,
    capabilities: Option<BTreeMap<String, bool>>,
    #[serde(rename = "logFile")]
    log_file: Option<String>,
    #[serde(rename = "logLevel")]
    log_level: Option<String>,
    #[serde(rename = "logFormat")]
    log_format: Option<String>,
    #[serde(rename = "dataDir")]
    data_dir: Option<String>,
    /// Read by GC only (a stray value elsewhere is not an error), and `null` differs from
    /// absent, so both are kept as text.
    #[serde(
        rename = "cni.dev/valid-attachments",
        borrow,
        default,
        deserialize_with = "present"
    )]
    valid_attachments: Option<&'a RawValue>,
    #[serde(
        rename = "cni.dev/attachments",
        borrow,
        default,
        deserialize_with = "present"
    )]
    valid_attachments_draft: Option<&'a RawValue>,
}

/// Some(value) for a present field, `null` included.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    de: D,
) -> std::result::Result<Option<T>, D::Error> {
    T::deserialize(de).map(Some)
}

impl NetConf {
    pub fn parse(stdin: &[u8], command: Command) -> Result<NetConf> {
        let wire = WireConf::decode(stdin)?;
        let cni_version = version_for(wire.cni_version, command)?;
        let name = required("name", wire.name)?;
        if !is_valid_name(&name) {
            return Err(Error::config(
                "name",
                format!(
                    "{name:?} must start with a letter or digit and hold only letters, digits, \
                     '_', '.' and '-'"
                ),
            ));
        }
        let plugin_type = required("type", wire.plugin_type)?;
        let ipam = ipam_of(wire.ipam)?;
        let prev_result = match wire.prev_result {
            None => None,
            Some(raw) => Some(prev_result_of(raw, &cni_version)?),
        };
        let runtime_config = wire.runtime_config.unwrap_or_default().resolve()?;
        let valid_attachments = if command == Command::Gc {
            attachments(wire.valid_attachments, wire.valid_attachments_draft)?
        } else {
            Vec::new()
        };

        Ok(NetConf {
            cni_version,
            name,
            plugin_type,
            ipam,
            dns: wire.dns,
            prev_result,
            runtime_config,
            capabilities: wire.capabilities.unwrap_or_default(),
            log_file: wire.log_file,
            log_level: wire.log_level,
            log_format: wire.log_format,
            data_dir: wire.data_dir,
            valid_attachments,
            text: Arc::from(stdin),
        })
    }

    /// The IPAM plugin's name, from `ipam.type`.
    pub fn ipam_type(&self) -> Option<&str> {
        self.ipam.as_ref().map(|i| i.plugin_type.as_str())
    }

    /// `ipamTimeoutMs`: how long a delegated IPAM plugin may run before it is killed.
    pub fn ipam_timeout(&self) -> Result<std::time::Duration> {
        #[derive(Deserialize)]
        struct Fields {
            #[serde(rename = "ipamTimeoutMs")]
            ipam_timeout_ms: Option<u32>,
        }
        match self.fields::<Fields>()?.ipam_timeout_ms {
            None => Ok(std::time::Duration::from_millis(DEFAULT_IPAM_TIMEOUT_MS)),
            Some(0) => Err(Error::config(
                "ipamTimeoutMs",
                "0 would kill every IPAM plugin at once; give milliseconds, at least 1 (default \
                 60000)",
            )),
            Some(ms) => Ok(std::time::Duration::from_millis(u64::from(ms))),
        }
    }

    /// The plugin's own fields, decoded from the conf into `T` (unknown fields ignored). A value
    /// of the wrong type is code 7 naming its field path.
    pub fn fields<'a, T: Deserialize<'a>>(&'a self) -> Result<T> {
        #[cfg(test)]
        crate::testutil::serde_fields::read_log::note::<T>("");
        decode::from_slice(&self.text, "").map_err(|f| match f {
            Failure::Field { path, msg } => Error::config(path, msg),
            Failure::Syntax(msg) => Error::decode("network configuration on stdin", msg),
        })
    }
}

impl<'a> WireConf<'a> {
    fn decode(stdin: &'a [u8]) -> Result<WireConf<'a>> {
        const WHAT: &str = "network configuration on stdin";
        // A derived struct would also take an array of its fields in order.
        let first = stdin.iter().find(|b| !b" \t\r\n".contains(b));
        if first.is_some_and(|b| *b != b'{') {
            return Err(Error::decode(WHAT, "expected a JSON object"));
        }
        #[cfg(test)]
        crate::testutil::serde_fields::read_log::note::<WireConf>("");
        decode::from_slice(stdin, "").map_err(|f| match f {
            Failure::Field { path, msg } if !path.is_empty() => Error::config(path, msg),
            other => Error::decode(WHAT, other.joined()),
        })
    }
}

/// `cniVersion`: present, one this plugin speaks, and new enough for `command`.
fn version_for(cni_version: Option<String>, command: Command) -> Result<String> {
    let cni_version = match cni_version {
        Some(v) if !v.is_empty() => v,
        None => return Err(Error::config("cniVersion", "is required")),
        Some(v) => {
            return Err(Error::config(
                "cniVersion",
                format!("must be a version string such as \"1.1.0\", got {v:?}"),
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
                "{command} exists only since CNI 1.1.0; set the network's cniVersion to 1.1.0"
            ),
            version: cni_version,
        });
    }
    Ok(cni_version)
}

/// The IPAM plugin to delegate to, None for no IPAM.
fn ipam_of(wire: Option<WireIpam>) -> Result<Option<Ipam>> {
    match wire {
        // `"ipam": {}` is how many published confs (SR-IOV, Multus examples) say "no IPAM";
        // the reference plugins skip IPAM when its type is empty, so we do too.
        None | Some(WireIpam { fields: 0, .. }) => Ok(None),
        Some(WireIpam {
            plugin_type: Some(t),
            ..
        }) if !t.is_empty() => Ok(Some(Ipam { plugin_type: t })),
        Some(_) => Err(Error::config(
            "ipam.type",
            "is required when ipam has other fields (the IPAM plugin's name, e.g. \
             \"host-local\")",
        )),
    }
}

/// `prevResult`, read in the layout of the conf's version; its syntax errors name it.
fn prev_result_of(raw: &RawValue, cni_version: &str) -> Result<CniResult> {
    CniResult::from_json(raw.get().as_bytes(), cni_version).map_err(|e| match e {
        Error::Decode { msg, .. } => Error::decode("prevResult", msg),
        other => other,
    })
}

fn required(key: &str, value: Option<String>) -> Result<String> {
    value
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::config(key, "is required"))
}

/// The `ipam` section's `type` and how many fields it has (`{}` means no IPAM).
struct WireIpam {
    plugin_type: Option<String>,
    fields: usize,
}

impl<'de> Deserialize<'de> for WireIpam {
    fn deserialize<D: Deserializer<'de>>(de: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WireIpam;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<WireIpam, A::Error> {
                let mut ipam = WireIpam {
                    plugin_type: None,
                    fields: 0,
                };
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    ipam.fields += 1;
                    if key == "type" {
                        ipam.plugin_type = map.next_value()?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(ipam)
            }
        }
        de.deserialize_map(V)
    }
}

/// One of runtimeConfig's known keys as found, in the spelling it was sent in.
struct Spelled<T> {
    key: String,
    value: T,
}

/// The keys of `runtimeConfig` this plugin reads, as it names them (the capabilities
/// `deviceID`, `CNIDeviceInfoFile`, `ips`, `mac`); any other is ignored.
pub const RUNTIME_CONFIG_KEYS: [&str; 4] = ["deviceID", "CNIDeviceInfoFile", "ips", "mac"];

/// `runtimeConfig` as sent. Runtimes disagree on spelling (containerd's CRI capitalizes, e.g.
/// `DeviceID`), so known keys match case-insensitively, which a derive cannot do.
#[derive(Default)]
struct WireRuntimeConfig {
    device_id: Option<Spelled<String>>,
    cni_device_info_file: Option<Spelled<String>>,
    ips: Option<Spelled<Vec<String>>>,
    mac: Option<Spelled<String>>,
    /// Two spellings of one key with different values: (key as we name it, first, second).
    conflict: Option<(&'static str, String, String)>,
}

impl WireRuntimeConfig {
    /// When two spellings of one key disagree we refuse to guess.
    fn resolve(self) -> Result<RuntimeConfig> {
        if let Some((wanted, first, second)) = self.conflict {
            return Err(Error::config(
                format!("runtimeConfig.{wanted}"),
                format!("given twice with different values, as `{first}` and `{second}`"),
            ));
        }
        Ok(RuntimeConfig {
            device_id: self.device_id.map(|s| s.value),
            cni_device_info_file: self.cni_device_info_file.map(|s| s.value),
            ips: self.ips.map(|s| s.value).unwrap_or_default(),
            mac: self.mac.map(|s| s.value),
        })
    }
}

/// Keeps the first non-null value of a key; a later spelling must agree with it.
fn keep<'de, A: MapAccess<'de>, T: Deserialize<'de> + PartialEq>(
    slot: &mut Option<Spelled<T>>,
    conflict: &mut Option<(&'static str, String, String)>,
    wanted: &'static str,
    key: String,
    map: &mut A,
) -> std::result::Result<(), A::Error> {
    let Some(value) = map.next_value::<Option<T>>()? else {
        return Ok(());
    };
    match slot {
        Some(first) if first.value != value => {
            conflict.get_or_insert((wanted, first.key.clone(), key));
        }
        Some(_) => {}
        None => *slot = Some(Spelled { key, value }),
    }
    Ok(())
}

impl<'de> Deserialize<'de> for WireRuntimeConfig {
    fn deserialize<D: Deserializer<'de>>(de: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WireRuntimeConfig;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<WireRuntimeConfig, A::Error> {
                let mut rc = WireRuntimeConfig::default();
                let c = &mut rc.conflict;
                while let Some(key) = map.next_key::<String>()? {
                    let known = RUNTIME_CONFIG_KEYS
                        .iter()
                        .find(|wanted| key.eq_ignore_ascii_case(wanted));
                    match known.copied() {
                        Some(k @ "deviceID") => keep(&mut rc.device_id, c, k, key, &mut map)?,
                        Some(k @ "CNIDeviceInfoFile") => {
                            keep(&mut rc.cni_device_info_file, c, k, key, &mut map)?
                        }
                        Some(k @ "ips") => keep(&mut rc.ips, c, k, key, &mut map)?,
                        Some(k @ "mac") => keep(&mut rc.mac, c, k, key, &mut map)?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(rc)
            }
        }
        de.deserialize_map(V)
    }
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct WireAttachment {
    #[serde(rename = "containerID")]
    container_id: String,
    ifname: String,
}
objects_only!(WireAttachment);

/// GC releases everything not listed, so a conf without the list is refused rather than read
/// as "nothing is valid". An explicit null is an empty list: that is how libcni encodes a
/// network with no remaining attachments.
fn attachments(valid: Option<&RawValue>, draft: Option<&RawValue>) -> Result<Vec<Attachment>> {
    let (key, raw) = match (valid, draft) {
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
    let items: Option<Vec<WireAttachment>> = decode::from_slice(raw.get().as_bytes(), key)
        .map_err(|f| match f {
            Failure::Field { path, msg } => Error::config(path, msg),
            Failure::Syntax(msg) => Error::config(key, msg),
        })?;
    items
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let nonempty = |name: &str, value: String| {
                if value.is_empty() {
                    Err(Error::config(
                        format!("{key}[{i}].{name}"),
                        "must be a non-empty string",
                    ))
                } else {
                    Ok(value)
                }
            };
            Ok(Attachment {
                container_id: nonempty("containerID", item.container_id)?,
                ifname: nonempty("ifname", item.ifname)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

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
        assert_eq!(&*c.text, base().to_string().as_bytes());
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
            seen.push((r.device_id, r.ips, r.mac));
        }
        assert_eq!(seen[0], seen[1]);
    }

    #[test]
    fn runtime_config_type_errors_and_conflicts() {
        for (rc, field) in [
            (json!({"DeviceID": 3}), "runtimeConfig.DeviceID"),
            (json!({"ips": "10.0.0.1"}), "runtimeConfig.ips"),
            (json!({"IPs": [1]}), "runtimeConfig.IPs[0]"),
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

        #[derive(Deserialize)]
        struct Own {
            mode: Option<String>,
            device: Option<String>,
            mtu: Option<u32>,
            strict: Option<bool>,
        }
        let own: Own = c.fields().unwrap();
        assert_eq!(own.mode.as_deref(), Some("move"));
        assert_eq!(own.device, None);
        assert_eq!(own.mtu, Some(9000));
        assert_eq!(own.strict, Some(false));
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct MtuAsText {
            mtu: Option<String>,
        }
        assert_eq!(field_of(&c.fields::<MtuAsText>().unwrap_err()), "mtu");
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct ModeAsNumber {
            mode: Option<u32>,
        }
        assert_eq!(field_of(&c.fields::<ModeAsNumber>().unwrap_err()), "mode");

        assert_eq!(
            field_of(&parse(with("logFile", json!(1)), Command::Add).unwrap_err()),
            "logFile"
        );
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Mtu {
            mtu: Option<u32>,
        }
        for bad in [json!(-1), json!(1u64 << 32)] {
            let e = parse(with("mtu", bad.clone()), Command::Add)
                .unwrap()
                .fields::<Mtu>()
                .unwrap_err();
            assert_eq!(e.code(), 7, "{bad}");
            assert_eq!(field_of(&e), "mtu", "{bad}");
        }
    }
}

//! This plugin's own fields of the network configuration.

use std::path::PathBuf;
use std::time::Duration;

use crate::attach::select::Selector;
use crate::attach::state::DEFAULT_DATA_DIR;
use crate::cni::NetConf;
use crate::error::{Error, Result};
use crate::kernel::{parse_hwaddr, MacvlanMode};

/// How long an ADD/DEL waits for another invocation holding the same device.
pub const DEFAULT_LOCK_TIMEOUT_MS: u64 = 10_000;

/// Also the mode an attachment record keeps, by the same names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// An existing host netdev is moved into the pod (the host-device class).
    Move,
    /// A macvlan child of a RoCE netdev, created in the pod (shared netns mode).
    Macvlan,
    /// An IPoIB child (P_Key partition) of an IPoIB netdev, created in the pod.
    Ipoib,
    /// Chained after sriov/host-device: the pod interface's ib device follows it (rdma-cni).
    Rdma,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Move => "move",
            Mode::Macvlan => "macvlan",
            Mode::Ipoib => "ipoib",
            Mode::Rdma => "rdma",
        }
    }
}

/// `ipoibMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpoibModeConf {
    /// Connected with MTU 65520 when the parent can do it, else datagram with the parent's MTU.
    Auto,
    Datagram,
    Connected,
}

/// Fields of the child-interface modes (`macvlan`, `ipoib`).
#[derive(Debug, Clone, Default)]
pub struct ChildConf {
    /// `master`: the parent netdev's name.
    pub master: Option<String>,
    /// `macvlanMode`.
    pub macvlan_mode: Option<MacvlanMode>,
    /// `mac` (also runtimeConfig.mac and CNI_ARGS MAC, which win).
    pub mac: Option<Vec<u8>>,
    /// `pkey`: the 16-bit value as given (the kernel ORs in the full-membership bit 0x8000).
    pub pkey: Option<u16>,
    pub ipoib_mode: Option<IpoibModeConf>,
    pub umcast: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct PluginConf {
    pub mode: Mode,
    /// MTU to set in the pod; None keeps the device's MTU.
    pub mtu: Option<u32>,
    pub data_dir: PathBuf,
    pub lock_timeout: Duration,
    /// Child-interface settings (modes macvlan and ipoib).
    pub child: ChildConf,
    /// Conf `rdma`: what to do with the netdev's ib device (move mode).
    pub rdma: crate::attach::ib_device::RdmaConf,
    /// Conf `gidTimeoutMs`: how long ADD waits for the kernel to add the pod IPs' RoCE GIDs.
    pub gid_timeout: Duration,
}

/// Static selectors an operator writes in the conf.
const STATIC_SELECTORS: [&str; 4] = ["device", "hwaddr", "kernelpath", "rdmaDevice"];

impl PluginConf {
    pub fn from_conf(conf: &NetConf) -> Result<PluginConf> {
        let mode = match conf.raw_str("mode")?.as_deref() {
            None | Some("move") => Mode::Move,
            Some("macvlan") => Mode::Macvlan,
            Some("ipoib") => Mode::Ipoib,
            Some("rdma") => Mode::Rdma,
            Some(other) => {
                return Err(Error::UnsupportedField {
                    field: "mode".into(),
                    value: other.into(),
                    msg: "supported modes: \"move\", \"macvlan\", \"ipoib\", \"rdma\"".into(),
                })
            }
        };
        let mtu = conf.raw_u32("mtu").map_err(|_| {
            Error::config(
                "mtu",
                format!(
                    "must be an integer from 68 to 65535, got {}",
                    conf.raw
                        .get("mtu")
                        .map(|v| v.to_string())
                        .unwrap_or_default()
                ),
            )
        })?;
        if let Some(m) = mtu {
            if !(68..=65535).contains(&m) {
                return Err(Error::config(
                    "mtu",
                    format!("{m} is outside 68..=65535 (68 is IPv4's minimum)"),
                ));
            }
        }
        let lock_timeout = Duration::from_millis(
            conf.raw_u32("lockTimeoutMs")?
                .map(u64::from)
                .unwrap_or(DEFAULT_LOCK_TIMEOUT_MS),
        );
        let data_dir = conf
            .data_dir
            .as_deref()
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
        if !crate::log::is_plain_absolute(&data_dir.to_string_lossy()) {
            return Err(Error::config(
                "dataDir",
                format!(
                    "{} must be an absolute path without `..`",
                    data_dir.display()
                ),
            ));
        }
        if let Some(log_file) = conf.log_file.as_deref().filter(|f| !f.is_empty()) {
            if !crate::log::is_plain_absolute(log_file) {
                return Err(Error::config(
                    "logFile",
                    format!("{log_file:?} must be an absolute path without `..`"),
                ));
            }
        }
        let child = match mode {
            Mode::Move | Mode::Rdma => ChildConf::default(),
            Mode::Macvlan | Mode::Ipoib => child_conf(conf, mode)?,
        };
        let rdma = crate::attach::ib_device::RdmaConf::parse(conf.raw_str("rdma")?.as_deref())?;
        if matches!(mode, Mode::Macvlan | Mode::Ipoib)
            && rdma == crate::attach::ib_device::RdmaConf::Exclusive
        {
            return Err(Error::UnsupportedField {
                field: "rdma".into(),
                value: "exclusive".into(),
                msg: format!(
                    "mode {} shares the parent's ib device and never moves one: use auto \
                     (default; refused in exclusive netns mode) or off",
                    mode.as_str()
                ),
            });
        }
        // Checked here so a bad value fails before anything changes, not at the first IPAM call.
        conf.ipam_timeout()?;
        let gid_timeout = Duration::from_millis(
            conf.raw_u32("gidTimeoutMs")?
                .map(u64::from)
                .unwrap_or(crate::attach::gids::DEFAULT_GID_TIMEOUT_MS),
        );
        Ok(PluginConf {
            mode,
            mtu,
            data_dir,
            lock_timeout,
            child,
            rdma,
            gid_timeout,
        })
    }
}

/// What a device plugin allocated to the pod, as Multus passes it on.
///
/// Multus v4 writes the kubelet's device ID into `deviceID` and `pciBusID` of every plugin of
/// the delegate config (older releases: `deviceID` of the first plugin only), and libcni adds
/// `runtimeConfig.deviceID` where the conf declares the `deviceID` capability. What the ID is
/// depends on the device plugin: the SR-IOV network device plugin and ib-sriov pass a PCI
/// address (or an auxiliary SF name for auxNetDevice pools); the RDMA shared device plugin
/// names its devices `"0"`, `"1"`, ... up to its `rdmaHcaMax`, which select nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceId {
    pub field: &'static str,
    pub value: String,
}

impl DeviceId {
    /// The device this ID selects: a PCI function or an auxiliary device. None for an ID that is
    /// neither, such as a shared device plugin's index.
    pub fn selector(&self) -> Option<Selector> {
        Selector::from_device_id(self.field, &self.value)
    }

    /// The conf field and value, for messages.
    pub fn describe(&self) -> String {
        format!("{}={}", self.field, self.value)
    }

    /// Why this ID selects nothing, for the log and errors.
    pub fn not_a_selector(&self) -> String {
        let looks_like = if !self.value.is_empty() && self.value.bytes().all(|b| b.is_ascii_digit())
        {
            " (it looks like an index of the RDMA shared device plugin, which names its devices \
             0, 1, ... up to rdmaHcaMax)"
        } else {
            ""
        };
        format!(
            "{:?} in {} is neither a PCI address (0000:3b:00.2) nor an auxiliary device name \
             (mlx5_core.sf.4){looks_like}",
            self.value, self.field
        )
    }
}

/// The device plugin's allocation, in the one order of precedence every mode uses:
/// `runtimeConfig.deviceID` (the capability), then `deviceID`, then `pciBusID`. Empty values
/// count as absent.
pub fn device_plugin_id(conf: &NetConf) -> Result<Option<DeviceId>> {
    if let Some(id) = conf
        .runtime_config
        .device_id
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        return Ok(Some(DeviceId {
            field: "runtimeConfig.deviceID",
            value: id.to_string(),
        }));
    }
    for field in ["deviceID", "pciBusID"] {
        if let Some(value) = conf.raw_str(field)?.filter(|s| !s.is_empty()) {
            return Ok(Some(DeviceId { field, value }));
        }
    }
    Ok(None)
}

/// The move-mode device selector (read by ADD only: DEL, CHECK and GC work from the record).
///
/// A device plugin's ID that names a PCI function or an auxiliary device wins over the static
/// selectors, because Multus adds it to whatever the conf holds. An ID that names neither (the
/// RDMA shared device plugin's index) gives way to a static selector; alone it is an error,
/// since move mode needs a whole device. Among the static selectors exactly one may be given.
pub fn selector(conf: &NetConf) -> Result<Selector> {
    let id = device_plugin_id(conf)?;
    if let Some(s) = id.as_ref().and_then(DeviceId::selector) {
        return Ok(s);
    }
    match (static_selector(conf)?, id) {
        (Some(s), Some(id)) => {
            crate::log_info!(
                "{}; selecting the device by {} instead",
                id.not_a_selector(),
                s.describe()
            );
            Ok(s)
        }
        (Some(s), None) => Ok(s),
        (None, Some(id)) => Err(Error::config(
            id.field,
            format!(
                "{}: move mode moves a whole netdev and needs a device of its own, such as a VF \
                 from the SR-IOV network device plugin (whose deviceID is the VF's PCI address), \
                 or a `device` (or hwaddr, kernelpath, rdmaDevice) in the conf; for the shared \
                 device plugin use mode macvlan or ipoib",
                id.not_a_selector()
            ),
        )),
        (None, None) => Err(Error::config(
            "device",
            "move mode needs one of device, hwaddr, kernelpath, rdmaDevice, pciBusID or \
             deviceID (or runtimeConfig.deviceID from a device plugin)",
        )),
    }
}

/// The one static selector of the conf (`device`, `hwaddr`, `kernelpath`, `rdmaDevice`), if
/// any; several is an error.
fn static_selector(conf: &NetConf) -> Result<Option<Selector>> {
    let mut given = Vec::new();
    for field in STATIC_SELECTORS {
        if let Some(v) = conf.raw_str(field)?.filter(|s| !s.is_empty()) {
            given.push((field, v));
        }
    }
    match given.as_slice() {
        [] => Ok(None),
        [(field, value)] => static_value(field, value).map(Some),
        several => Err(Error::config(
            several[0].0,
            format!(
                "give only one of device, hwaddr, kernelpath, rdmaDevice; got {}",
                several
                    .iter()
                    .map(|(f, v)| format!("{f}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// Parses one static selector's value; `device` and `master` are netdev names.
fn static_value(field: &'static str, value: &str) -> Result<Selector> {
    match field {
        "device" | "master" => {
            if value.len() > 15 || value.contains(['/', ':']) || value.contains(char::is_whitespace)
            {
                return Err(Error::config(
                    field,
                    format!("{value:?} is not a valid netdev name"),
                ));
            }
            Ok(Selector::Name {
                field,
                name: value.to_string(),
            })
        }
        "rdmaDevice" => {
            if value.is_empty()
                || value.len() > 64
                || value.contains(['/', '\0'])
                || value == ".."
                || value == "."
            {
                return Err(Error::config(
                    "rdmaDevice",
                    format!("{value:?} is not an ib device name"),
                ));
            }
            Ok(Selector::IbDevice(value.to_string()))
        }
        "hwaddr" => parse_hwaddr(value).map(Selector::HwAddr).ok_or_else(|| {
            Error::config(
                "hwaddr",
                format!("{value:?} is not a hardware address like 02:00:00:00:00:01"),
            )
        }),
        _ => {
            if !value.starts_with("/sys/") || value.contains("/../") || value.ends_with("/..") {
                return Err(Error::config(
                    "kernelpath",
                    format!("{value:?} must be a path under /sys/ such as /sys/devices/pci0000:00/0000:00:02.0/0000:3b:00.2"),
                ));
            }
            Ok(Selector::KernelPath(value.to_string()))
        }
    }
}

/// The parent of a macvlan or ipoib child, as every selector given names it: a device plugin's
/// PCI or auxiliary ID, `master` (a name or altname) and `rdmaDevice` (an ib device: its RoCE or
/// IPoIB netdev). Each one given must name the same netdev; the caller resolves and compares
/// them. A device plugin ID that selects nothing (a shared device plugin's index) is returned
/// apart, to be logged and recorded.
pub fn parent_selectors(conf: &NetConf) -> Result<(Vec<Selector>, Option<DeviceId>)> {
    let mut selectors = Vec::new();
    let mut opaque = None;
    if let Some(id) = device_plugin_id(conf)? {
        match id.selector() {
            Some(s) => selectors.push(s),
            None => opaque = Some(id),
        }
    }
    for field in ["master", "rdmaDevice"] {
        if let Some(v) = conf.raw_str(field)?.filter(|s| !s.is_empty()) {
            selectors.push(static_value(field, &v)?);
        }
    }
    Ok((selectors, opaque))
}

fn child_conf(conf: &NetConf, mode: Mode) -> Result<ChildConf> {
    let mut c = ChildConf {
        master: conf.raw_str("master")?.filter(|s| !s.is_empty()),
        ..Default::default()
    };
    match mode {
        Mode::Macvlan => {
            c.macvlan_mode = Some(match conf.raw_str("macvlanMode")?.as_deref() {
                None | Some("bridge") => MacvlanMode::Bridge,
                Some("private") => MacvlanMode::Private,
                Some("vepa") => MacvlanMode::Vepa,
                Some("passthru") => MacvlanMode::Passthru,
                Some(other) => {
                    return Err(Error::UnsupportedField {
                        field: "macvlanMode".into(),
                        value: other.into(),
                        msg: "use bridge (default), private, vepa or passthru".into(),
                    })
                }
            });
            let mac = match conf.runtime_config.mac.as_deref().filter(|m| !m.is_empty()) {
                Some(m) => Some(("runtimeConfig.mac", m.to_string())),
                None => conf
                    .raw_str("mac")?
                    .filter(|m| !m.is_empty())
                    .map(|m| ("mac", m)),
            };
            if let Some((field, text)) = mac {
                c.mac = Some(parse_unicast_mac(field, &text)?);
            }
        }
        Mode::Ipoib => {
            c.pkey = match conf.raw.get("pkey") {
                None | Some(serde_json::Value::Null) => None,
                Some(v) => Some(parse_pkey(v)?),
            };
            c.ipoib_mode = Some(match conf.raw_str("ipoibMode")?.as_deref() {
                None | Some("auto") => IpoibModeConf::Auto,
                Some("datagram") => IpoibModeConf::Datagram,
                Some("connected") => IpoibModeConf::Connected,
                Some(other) => {
                    return Err(Error::UnsupportedField {
                        field: "ipoibMode".into(),
                        value: other.into(),
                        msg: "use auto (default), datagram or connected".into(),
                    })
                }
            });
            c.umcast = conf.raw_bool("umcast")?;
        }
        Mode::Move | Mode::Rdma => {}
    }
    Ok(c)
}

/// A MAC for a macvlan child: 6 bytes, unicast (the kernel refuses multicast addresses).
pub fn parse_unicast_mac(field: &str, text: &str) -> Result<Vec<u8>> {
    match parse_hwaddr(text) {
        Some(b) if b.len() == 6 && b[0] & 1 == 0 => Ok(b),
        _ => Err(Error::config(
            field,
            format!("{text:?} is not a unicast MAC address like 02:00:00:00:00:01"),
        )),
    }
}

/// `pkey` as a hex string (`"0x8001"`, `"8001"`) or a JSON number. The kernel takes any 16-bit
/// value but 0 and 0x8000 (the full-membership bit alone), and ORs 0x8000 into the result
/// (ipoib_netlink.c `ipoib_new_child_link`), so `0x0001` and `0x8001` name the same partition.
pub fn parse_pkey(value: &serde_json::Value) -> Result<u16> {
    let bad = |shown: String| {
        Error::config(
            "pkey",
            format!("{shown} is not a P_Key: give 0x0001..0x7fff, optionally with the full-membership bit 0x8000 (e.g. \"0x8001\")"),
        )
    };
    let number = match value {
        serde_json::Value::Number(n) => n.as_u64().ok_or_else(|| bad(n.to_string()))?,
        serde_json::Value::String(s) => {
            let digits = s.trim().trim_start_matches("0x").trim_start_matches("0X");
            u64::from_str_radix(digits, 16).map_err(|_| bad(format!("{s:?}")))?
        }
        other => return Err(bad(other.to_string())),
    };
    match number {
        0 | 0x8000 => Err(bad(format!("{number:#06x}"))),
        n if n > 0xffff => Err(bad(format!("{n:#x}"))),
        n => Ok(n as u16),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(fields: serde_json::Value) -> NetConf {
        let mut base = json!({"cniVersion": "1.1.0", "name": "n", "type": "rdma-ns"});
        for (k, v) in fields.as_object().unwrap() {
            base[k] = v.clone();
        }
        NetConf::parse(base.to_string().as_bytes(), crate::cni::Command::Add).unwrap()
    }

    #[test]
    fn move_mode_takes_a_pci_or_aux_device_id_over_static_selectors() {
        let pci = |field| Selector::Pci {
            field,
            address: "0000:3b:00.2".into(),
        };
        // Multus v4: deviceID and pciBusID, plus runtimeConfig.deviceID with the capability.
        let v4 = conf(
            json!({"deviceID": "0000:3b:00.2", "pciBusID": "0000:3b:00.2",
                             "runtimeConfig": {"deviceID": "3b:00.2"}, "device": "eth9"}),
        );
        assert_eq!(selector(&v4).unwrap(), pci("runtimeConfig.deviceID"));
        let legacy = conf(json!({"deviceID": "0000:3b:00.2"}));
        assert_eq!(selector(&legacy).unwrap(), pci("deviceID"));
        let bus_id = conf(json!({"pciBusID": "0000:3b:00.2"}));
        assert_eq!(selector(&bus_id).unwrap(), pci("pciBusID"));
        let aux = conf(json!({"deviceID": "mlx5_core.sf.4"}));
        assert_eq!(
            selector(&aux).unwrap(),
            Selector::Aux {
                field: "deviceID",
                name: "mlx5_core.sf.4".into()
            }
        );
    }

    #[test]
    fn move_mode_lets_an_explicit_selector_win_over_a_shared_plugin_index() {
        for fields in [
            json!({"deviceID": "0", "pciBusID": "0", "device": "ens1f0v0"}),
            json!({"runtimeConfig": {"deviceID": "1"}, "device": "ens1f0v0"}),
        ] {
            assert_eq!(
                selector(&conf(fields.clone())).unwrap(),
                Selector::Name {
                    field: "device",
                    name: "ens1f0v0".into()
                },
                "{fields}"
            );
        }
        assert_eq!(
            selector(&conf(json!({"deviceID": "0", "rdmaDevice": "mlx5_2"}))).unwrap(),
            Selector::IbDevice("mlx5_2".into())
        );
    }

    #[test]
    fn move_mode_with_only_a_shared_plugin_index_says_what_to_use() {
        let e = selector(&conf(json!({"deviceID": "0", "pciBusID": "0"}))).unwrap_err();
        assert_eq!(e.code(), 7);
        let msg = e.to_string();
        for needle in [
            "deviceID",
            "\"0\"",
            "RDMA shared device plugin",
            "SR-IOV network device plugin",
            "`device`",
        ] {
            assert!(msg.contains(needle), "{needle}: {msg}");
        }
        let e = selector(&conf(json!({"deviceID": "eth0"}))).unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(!e.to_string().contains("index"), "{e}");
    }

    #[test]
    fn child_parent_selectors_collect_every_given_one() {
        let (sel, opaque) = parent_selectors(&conf(
            json!({"deviceID": "0", "pciBusID": "0", "master": "ens1f0np0"}),
        ))
        .unwrap();
        assert_eq!(
            sel,
            vec![Selector::Name {
                field: "master",
                name: "ens1f0np0".into()
            }]
        );
        assert_eq!(opaque.unwrap().value, "0");
        let (sel, opaque) = parent_selectors(&conf(
            json!({"deviceID": "0000:3b:00.0", "master": "ens1f0np0", "rdmaDevice": "mlx5_0"}),
        ))
        .unwrap();
        assert_eq!(sel.len(), 3);
        assert!(opaque.is_none());
        assert_eq!(
            parent_selectors(&conf(json!({"master": "a/b"})))
                .unwrap_err()
                .code(),
            7
        );
    }

    #[test]
    fn an_mtu_of_the_wrong_type_names_the_real_range() {
        let e = PluginConf::from_conf(&conf(json!({"mtu": "9000"}))).unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(e.to_string().contains("68 to 65535"), "{e}");
    }

    #[test]
    fn pkeys_parse_as_the_kernel_takes_them() {
        assert_eq!(parse_pkey(&json!("0x8001")).unwrap(), 0x8001);
        assert_eq!(parse_pkey(&json!("0x0001")).unwrap(), 0x0001);
        assert_eq!(parse_pkey(&json!("7fff")).unwrap(), 0x7fff);
        assert_eq!(parse_pkey(&json!(32769)).unwrap(), 0x8001);
        for bad in [
            json!("0x0"),
            json!("0x8000"),
            json!("0x10000"),
            json!("zz"),
            json!(-1),
            json!(true),
        ] {
            let err = parse_pkey(&bad).unwrap_err();
            assert_eq!(err.code(), 7, "{bad}");
            assert!(err.to_string().contains("pkey"), "{err}");
        }
    }

    #[test]
    fn macs_must_be_unicast_ethernet() {
        assert_eq!(
            parse_unicast_mac("mac", "02:00:00:00:00:01").unwrap(),
            vec![2, 0, 0, 0, 0, 1]
        );
        assert!(parse_unicast_mac("mac", "01:00:5e:00:00:01").is_err());
        assert!(parse_unicast_mac("mac", "02:00:00:00:00").is_err());
    }
}

//! This plugin's own fields of the network configuration.

use std::path::PathBuf;
use std::time::Duration;

use crate::attach::select::{normalize_pci, Selector};
use crate::attach::state::DEFAULT_DATA_DIR;
use crate::cni::NetConf;
use crate::error::{Error, Result};
use crate::kernel::{parse_hwaddr, MacvlanMode};

/// How long an ADD/DEL waits for another invocation holding the same device.
pub const DEFAULT_LOCK_TIMEOUT_MS: u64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    pub rdma: crate::attach::rdma_dev::RdmaConf,
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
        let mtu = conf.raw_u32("mtu")?;
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
        if !data_dir.is_absolute() {
            return Err(Error::config(
                "dataDir",
                format!("{} must be an absolute path", data_dir.display()),
            ));
        }
        let child = match mode {
            Mode::Move | Mode::Rdma => ChildConf::default(),
            Mode::Macvlan | Mode::Ipoib => child_conf(conf, mode)?,
        };
        let rdma = crate::attach::rdma_dev::RdmaConf::parse(conf.raw_str("rdma")?.as_deref())?;
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

/// The move-mode device selector (read by ADD only: DEL, CHECK and GC work from the record).
///
/// Device-plugin selectors (what Multus passes for an allocated device) win over static ones:
/// `runtimeConfig.deviceID`, then top-level `deviceID`, then `pciBusID`. Among the static
/// ones exactly one may be given.
pub fn selector(conf: &NetConf) -> Result<Selector> {
    if let Some(id) = conf
        .runtime_config
        .device_id
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        return Selector::from_device_id("runtimeConfig.deviceID", id);
    }
    if let Some(id) = conf.raw_str("deviceID")?.filter(|s| !s.is_empty()) {
        return Selector::from_device_id("deviceID", &id);
    }
    if let Some(id) = conf.raw_str("pciBusID")?.filter(|s| !s.is_empty()) {
        let address = normalize_pci(&id).ok_or_else(|| {
            Error::config(
                "pciBusID",
                format!("{id:?} is not a PCI address like 0000:3b:00.2"),
            )
        })?;
        return Ok(Selector::Pci {
            field: "pciBusID",
            address,
        });
    }
    let mut given = Vec::new();
    for field in STATIC_SELECTORS {
        if let Some(v) = conf.raw_str(field)?.filter(|s| !s.is_empty()) {
            given.push((field, v));
        }
    }
    match given.as_slice() {
        [] => Err(Error::config(
            "device",
            "move mode needs one of device, hwaddr, kernelpath, rdmaDevice, pciBusID or \
             deviceID (or runtimeConfig.deviceID from a device plugin)",
        )),
        [(field, value)] => match *field {
            "device" => {
                if value.len() > 15
                    || value.contains(['/', ':'])
                    || value.contains(char::is_whitespace)
                {
                    return Err(Error::config(
                        "device",
                        format!("{value:?} is not a valid netdev name"),
                    ));
                }
                Ok(Selector::Name(value.clone()))
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
                Ok(Selector::IbDevice(value.clone()))
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
                Ok(Selector::KernelPath(value.clone()))
            }
        },
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

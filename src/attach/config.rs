//! This plugin's own fields of the network configuration.

use std::path::PathBuf;
use std::time::Duration;

use crate::attach::select::{normalize_pci, Selector};
use crate::attach::state::DEFAULT_DATA_DIR;
use crate::cni::NetConf;
use crate::error::{Error, Result};
use crate::kernel::parse_hwaddr;

/// How long an ADD/DEL waits for another invocation holding the same device.
pub const DEFAULT_LOCK_TIMEOUT_MS: u64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// An existing host netdev is moved into the pod (the host-device class).
    Move,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Move => "move",
        }
    }
}

#[derive(Debug, Clone)]
pub struct PluginConf {
    pub mode: Mode,
    /// MTU to set in the pod; None keeps the device's MTU.
    pub mtu: Option<u32>,
    pub data_dir: PathBuf,
    pub lock_timeout: Duration,
}

/// Static selectors an operator writes in the conf.
const STATIC_SELECTORS: [&str; 3] = ["device", "hwaddr", "kernelpath"];

impl PluginConf {
    pub fn from_conf(conf: &NetConf) -> Result<PluginConf> {
        let mode = match conf.raw_str("mode")?.as_deref() {
            None | Some("move") => Mode::Move,
            Some(other) => {
                return Err(Error::UnsupportedField {
                    field: "mode".into(),
                    value: other.into(),
                    msg: "this build supports \"move\"".into(),
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
        Ok(PluginConf {
            mode,
            mtu,
            data_dir,
            lock_timeout,
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
            "move mode needs one of device, hwaddr, kernelpath, pciBusID or deviceID \
             (or runtimeConfig.deviceID from a device plugin)",
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
                "give only one of device, hwaddr, kernelpath; got {}",
                several
                    .iter()
                    .map(|(f, v)| format!("{f}={v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

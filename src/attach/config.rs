//! This plugin's own fields of the network configuration, decoded from the conf into derived
//! types: the fields every mode reads, then the chosen mode's own.
//!
//! Device selectors (`device`, `master`, `deviceID`, ...) are decoded apart, by ADD only: DEL,
//! CHECK and GC work from the record, so a broken selector never stops a release.

use std::path::PathBuf;
use std::time::Duration;

use serde::de::{Deserializer, Unexpected, Visitor};
use serde::Deserialize;

use crate::attach::ib_device::RdmaConf;
use crate::attach::store::DEFAULT_DATA_DIR;
use crate::cni::NetConf;
use crate::error::{Error, Result};
use crate::kernel::{parse_hwaddr, MacvlanMode};

/// How long an ADD/DEL waits for another invocation holding the same device.
pub const DEFAULT_LOCK_TIMEOUT_MS: u64 = 10_000;

/// Which mode, without its settings: what records and messages name (an attachment record
/// keeps it by the same names).
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

    /// Conf `mode`; absent or null is move.
    fn parse(value: Option<&str>) -> Result<Mode> {
        match value {
            None | Some("move") => Ok(Mode::Move),
            Some("macvlan") => Ok(Mode::Macvlan),
            Some("ipoib") => Ok(Mode::Ipoib),
            Some("rdma") => Ok(Mode::Rdma),
            Some(other) => Err(Error::UnsupportedField {
                field: "mode".into(),
                value: other.into(),
                msg: "supported modes: \"move\", \"macvlan\", \"ipoib\", \"rdma\"".into(),
            }),
        }
    }
}

/// The mode with the settings only it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeConf {
    Move,
    Macvlan(MacvlanConf),
    Ipoib(IpoibConf),
    Rdma,
}

impl ModeConf {
    pub fn kind(&self) -> Mode {
        match self {
            ModeConf::Move => Mode::Move,
            ModeConf::Macvlan(_) => Mode::Macvlan,
            ModeConf::Ipoib(_) => Mode::Ipoib,
            ModeConf::Rdma => Mode::Rdma,
        }
    }

    pub fn as_str(&self) -> &'static str {
        self.kind().as_str()
    }
}

/// Mode macvlan's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MacvlanConf {
    /// `macvlanMode`; bridge when absent.
    pub macvlan_mode: MacvlanMode,
    /// `mac`, or runtimeConfig.mac (the `mac` capability), which wins; CNI_ARGS MAC sits
    /// between the two (see child::macvlan_mac).
    pub mac: Option<Vec<u8>>,
}

/// `ipoibMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IpoibModeConf {
    /// Connected with MTU 65520 when the parent can do it, else datagram with the parent's MTU.
    #[default]
    Auto,
    Datagram,
    Connected,
}

/// Mode ipoib's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpoibConf {
    /// `pkey`: the 16-bit value as given (the kernel ORs in the full-membership bit 0x8000).
    pub pkey: Option<u16>,
    pub ipoib_mode: IpoibModeConf,
    pub umcast: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct PluginConf {
    pub mode: ModeConf,
    /// MTU to set in the pod; None keeps the device's MTU.
    pub mtu: Option<u32>,
    pub data_dir: PathBuf,
    pub lock_timeout: Duration,
    /// Conf `rdma`: what to do with the netdev's ib device.
    pub rdma: RdmaConf,
    /// Conf `gidTimeoutMs`: how long ADD waits for the kernel to add the pod IPs' RoCE GIDs.
    pub gid_timeout: Duration,
}

/// The fields every mode reads, as sent.
#[derive(Deserialize)]
struct CommonFields {
    mode: Option<String>,
    mtu: Option<Mtu>,
    #[serde(rename = "lockTimeoutMs")]
    lock_timeout_ms: Option<u32>,
    rdma: Option<String>,
    #[serde(rename = "gidTimeoutMs")]
    gid_timeout_ms: Option<u32>,
}

#[derive(Deserialize)]
struct MacvlanFields {
    #[serde(rename = "macvlanMode")]
    macvlan_mode: Option<String>,
    mac: Option<String>,
}

#[derive(Deserialize)]
struct IpoibFields {
    pkey: Option<Pkey>,
    #[serde(rename = "ipoibMode")]
    ipoib_mode: Option<String>,
    umcast: Option<bool>,
}

impl PluginConf {
    pub fn from_conf(conf: &NetConf) -> Result<PluginConf> {
        let common: CommonFields = conf.fields()?;
        let kind = Mode::parse(common.mode.as_deref())?;
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
        let mode = match kind {
            Mode::Move => ModeConf::Move,
            Mode::Macvlan => ModeConf::Macvlan(MacvlanConf::from_fields(conf, conf.fields()?)?),
            Mode::Ipoib => ModeConf::Ipoib(IpoibConf::from_fields(conf.fields()?)?),
            Mode::Rdma => ModeConf::Rdma,
        };
        let rdma = RdmaConf::parse(common.rdma.as_deref())?;
        if matches!(kind, Mode::Macvlan | Mode::Ipoib) && rdma == RdmaConf::Exclusive {
            return Err(Error::UnsupportedField {
                field: "rdma".into(),
                value: "exclusive".into(),
                msg: format!(
                    "mode {} shares the parent's ib device and never moves one: use auto \
                     (default; refused in exclusive netns mode) or off",
                    kind.as_str()
                ),
            });
        }
        // Checked here so a bad value fails before anything changes, not at the first IPAM call.
        conf.ipam_timeout()?;
        let millis = |ms: Option<u32>, default: u64| {
            Duration::from_millis(ms.map(u64::from).unwrap_or(default))
        };
        Ok(PluginConf {
            mode,
            mtu: common.mtu.map(|m| m.0),
            data_dir,
            lock_timeout: millis(common.lock_timeout_ms, DEFAULT_LOCK_TIMEOUT_MS),
            rdma,
            gid_timeout: millis(
                common.gid_timeout_ms,
                crate::attach::gids::DEFAULT_GID_TIMEOUT_MS,
            ),
        })
    }
}

impl MacvlanConf {
    fn from_fields(conf: &NetConf, fields: MacvlanFields) -> Result<MacvlanConf> {
        let macvlan_mode = match fields.macvlan_mode.as_deref() {
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
        };
        let mac = match conf.runtime_config.mac.as_deref().filter(|m| !m.is_empty()) {
            Some(m) => Some(("runtimeConfig.mac", m)),
            None => fields
                .mac
                .as_deref()
                .filter(|m| !m.is_empty())
                .map(|m| ("mac", m)),
        };
        Ok(MacvlanConf {
            macvlan_mode,
            mac: mac
                .map(|(field, text)| parse_unicast_mac(field, text))
                .transpose()?,
        })
    }
}

impl IpoibConf {
    fn from_fields(fields: IpoibFields) -> Result<IpoibConf> {
        let ipoib_mode = match fields.ipoib_mode.as_deref() {
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
        };
        Ok(IpoibConf {
            pkey: fields.pkey.map(|p| p.0),
            ipoib_mode,
            umcast: fields.umcast,
        })
    }
}

/// `mtu`: 68 is IPv4's minimum, 65535 the largest an IPv4 packet can be.
struct Mtu(u32);

impl<'de> Deserialize<'de> for Mtu {
    fn deserialize<D: Deserializer<'de>>(de: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Mtu;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer from 68 to 65535")
            }
            fn visit_u64<E: serde::de::Error>(self, m: u64) -> std::result::Result<Mtu, E> {
                match u32::try_from(m) {
                    Ok(m) if (68..=65535).contains(&m) => Ok(Mtu(m)),
                    _ => Err(E::custom(format!(
                        "{m} is outside 68..=65535 (68 is IPv4's minimum)"
                    ))),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, m: i64) -> std::result::Result<Mtu, E> {
                match u64::try_from(m) {
                    Ok(m) => self.visit_u64(m),
                    Err(_) => Err(E::invalid_value(Unexpected::Signed(m), &self)),
                }
            }
        }
        de.deserialize_u64(V)
    }
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
struct Pkey(u16);

const PKEY_HINT: &str =
    "give 0x0001..0x7fff, optionally with the full-membership bit 0x8000 (e.g. \"0x8001\")";

impl<'de> Deserialize<'de> for Pkey {
    fn deserialize<D: Deserializer<'de>>(de: D) -> std::result::Result<Self, D::Error> {
        struct V;
        fn bad<E: serde::de::Error>(shown: impl std::fmt::Display) -> E {
            E::custom(format!("{shown} is not a P_Key: {PKEY_HINT}"))
        }
        impl Visitor<'_> for V {
            type Value = Pkey;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "a P_Key: {PKEY_HINT}")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> std::result::Result<Pkey, E> {
                match n {
                    0 | 0x8000 => Err(bad(format!("{n:#06x}"))),
                    n => u16::try_from(n)
                        .map(Pkey)
                        .map_err(|_| bad(format!("{n:#x}"))),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> std::result::Result<Pkey, E> {
                match u64::try_from(n) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(bad(n)),
                }
            }
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> std::result::Result<Pkey, E> {
                Err(bad(n))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<Pkey, E> {
                let digits = s.trim().trim_start_matches("0x").trim_start_matches("0X");
                let n = u64::from_str_radix(digits, 16).map_err(|_| bad(format!("{s:?}")))?;
                self.visit_u64(n)
            }
        }
        de.deserialize_any(V)
    }
}

/// [`Pkey`] from an already parsed value.
pub fn parse_pkey(value: &serde_json::Value) -> Result<u16> {
    crate::cni::decode::from_value::<Pkey>(value, "pkey")
        .map(|p| p.0)
        .map_err(|f| Error::config("pkey", f.joined()))
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

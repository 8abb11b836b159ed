//! Mode `ipoib`: an IPoIB child (a P_Key partition) of a host IPoIB netdev, created in the pod,
//! in connected mode with MTU 65520 when the parent can do it. What is decided here is the child;
//! child.rs does the rest.

use serde::de::{Deserializer, Visitor};
use serde::Deserialize;

use crate::attach::addresses::Addresses;
use crate::attach::device_info::DeviceInfoFile;
use crate::attach::gids::GidWait;
use crate::attach::ib_device::RdmaConf;
use crate::attach::modes::child::{ChildKind, ChildMode, ChildPlan, ARPHRD_INFINIBAND};
use crate::attach::permissions::Permissions;
use crate::attach::qos::Qos;
use crate::attach::rail::Rail;
use crate::attach::steps::Step;
use crate::cni::{NetConf, Request};
use crate::error::{Error, Result};
use crate::kernel::rtnetlink::{Link, LinkKind};

/// IPOIB_CM_MTU (ipoib.h): the largest MTU, reachable only in connected mode.
pub const IPOIB_CM_MTU: u32 = 65520;
const IPOIB_MODE_DATAGRAM: u16 = 0;
const IPOIB_MODE_CONNECTED: u16 = 1;

pub struct Ipoib;

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

/// Mode ipoib's fields, as sent.
#[derive(Deserialize)]
struct IpoibFields {
    pkey: Option<Pkey>,
    #[serde(rename = "ipoibMode")]
    ipoib_mode: Option<String>,
    umcast: Option<bool>,
}

impl ChildMode for Ipoib {
    const NAME: &'static str = "ipoib";
    const KIND: ChildKind = ChildKind::Ipoib;
    const EXAMPLE_PARENT: &'static str = "ib0";
    const STEPS: &'static [&'static dyn Step] = &[
        &Rail,
        &Addresses,
        &Qos,
        &Permissions,
        &GidWait,
        &DeviceInfoFile,
    ];
    type Settings = IpoibConf;

    fn settings(conf: &NetConf) -> Result<IpoibConf> {
        IpoibConf::from_fields(conf.fields()?)
    }

    fn plan(
        parent: &Link,
        settings: &IpoibConf,
        mtu: Option<u32>,
        _req: &Request,
    ) -> Result<ChildPlan> {
        plan_ipoib(parent, settings, mtu)
    }

    /// IPoIB has no RoCE GIDs to wait for.
    fn waits_for_gids(_rdma: RdmaConf) -> bool {
        false
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

/// Decides IPoIB mode and MTU of a child of `parent` with conf `mtu`.
pub fn plan_ipoib(parent: &Link, settings: &IpoibConf, mtu: Option<u32>) -> Result<ChildPlan> {
    if parent.link_type != ARPHRD_INFINIBAND || parent.hwaddr.len() != 20 {
        return Err(Error::ParentUnsuitable(format!(
            "ipoib needs an IPoIB parent (link type 32, 20-byte address), but {} has link type \
             {} and a {}-byte address; give the IPoIB netdev of an InfiniBand port as `master`",
            parent.name,
            parent.link_type,
            parent.hwaddr.len()
        )));
    }
    if !parent.up {
        return Err(Error::ParentUnsuitable(format!(
            "the IPoIB parent {} is down; bring it up (ip link set {} up) first",
            parent.name, parent.name
        )));
    }
    let connected = connected_mode(parent, settings.ipoib_mode)?;
    let mtu = ipoib_mtu(parent, connected, mtu)?;
    let how = match settings.ipoib_mode {
        IpoibModeConf::Auto => " (auto)",
        _ => "",
    };
    Ok(ChildPlan {
        kind: LinkKind::Ipoib {
            pkey: settings.pkey,
            mode: Some(if connected {
                IPOIB_MODE_CONNECTED
            } else {
                IPOIB_MODE_DATAGRAM
            }),
            umcast: settings.umcast.map(u16::from),
        },
        mtu: Some(mtu),
        hwaddr: None,
        expected_hwaddr: None,
        summary: format!(
            "ipoib {} on {}, MTU {mtu}{how}",
            if connected { "connected" } else { "datagram" },
            parent.name
        ),
    })
}

/// Whether the child runs connected mode. Byte 0 of the parent's 20-byte address carries the RC
/// flag (0x80, `IPOIB_CM_SUPPORTED`); Enhanced IPoIB (mlx5, ConnectX-4+) leaves it 0 and
/// supports datagram only, where asking for connected mode fails with EINVAL.
fn connected_mode(parent: &Link, requested: IpoibModeConf) -> Result<bool> {
    let cm_capable = parent.hwaddr[0] & 0x80 != 0;
    match requested {
        IpoibModeConf::Connected if !cm_capable => Err(Error::ParentUnsuitable(format!(
            "ipoibMode connected was asked, but {} runs Enhanced IPoIB (address byte 0 is \
             {:#04x}, no RC flag): ConnectX-4 and later are datagram-only there. Use ipoibMode \
             datagram or auto; to get connected mode load MLNX_OFED's ib_ipoib with \
             ipoib_enhanced=0 (upstream kernels have no such parameter)",
            parent.name, parent.hwaddr[0]
        ))),
        IpoibModeConf::Connected => Ok(true),
        IpoibModeConf::Datagram => Ok(false),
        IpoibModeConf::Auto => Ok(cm_capable),
    }
}

/// The child's MTU: conf `mtu` within the mode's limit, else the limit (connected mode's
/// maximum, or the parent's MTU in datagram mode).
fn ipoib_mtu(parent: &Link, connected: bool, mtu: Option<u32>) -> Result<u32> {
    let limit = if connected { IPOIB_CM_MTU } else { parent.mtu };
    match mtu {
        Some(m) if m > limit => Err(Error::config(
            "mtu",
            format!(
                "{m} is above the {} limit {limit} for a child of {} (connected mode allows up \
                 to 65520; datagram mode up to the parent's MTU)",
                if connected {
                    "connected-mode"
                } else {
                    "datagram-mode"
                },
                parent.name
            ),
        )),
        Some(m) => Ok(m),
        None => Ok(limit),
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
}

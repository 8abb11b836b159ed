//! Mode `macvlan`: a macvlan child of a host RoCE netdev, created in the pod (shared netns mode:
//! the pod shares the parent's ib device and gets GIDs of its own). What is decided here is the
//! child; child.rs does the rest.

use serde::Deserialize;

use crate::attach::ib_device::RdmaConf;
use crate::attach::modes::child::{
    ChildKind, ChildMode, ChildPlan, ARPHRD_ETHER, ARPHRD_INFINIBAND,
};
use crate::attach::modes::move_dev::MoveDevice;
use crate::attach::modes::ModeDriver;
use crate::attach::steps::Step;
use crate::cni::{NetConf, Request};
use crate::error::{Error, Result};
use crate::kernel::rtnetlink::{format_hwaddr, parse_hwaddr, Link, LinkKind, MacvlanMode};

pub struct Macvlan;

/// Mode macvlan's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MacvlanConf {
    /// `macvlanMode`; bridge when absent.
    pub macvlan_mode: MacvlanMode,
    /// `mac`, or runtimeConfig.mac (the `mac` capability), which wins; CNI_ARGS MAC sits
    /// between the two (see [`macvlan_mac`]).
    pub mac: Option<Vec<u8>>,
}

/// Mode macvlan's fields, as sent.
#[derive(Deserialize)]
struct MacvlanFields {
    #[serde(rename = "macvlanMode")]
    macvlan_mode: Option<String>,
    mac: Option<String>,
}

impl ChildMode for Macvlan {
    const NAME: &'static str = "macvlan";
    const KIND: ChildKind = ChildKind::Macvlan;
    const EXAMPLE_PARENT: &'static str = "ens1f0np0";
    /// Move mode's, `softRoce` included (see there for the order).
    const STEPS: &'static [&'static dyn Step] = MoveDevice::STEPS;
    type Settings = MacvlanConf;

    fn settings(conf: &NetConf) -> Result<MacvlanConf> {
        MacvlanConf::from_fields(conf, conf.fields()?)
    }

    fn plan(
        parent: &Link,
        settings: &MacvlanConf,
        mtu: Option<u32>,
        req: &Request,
    ) -> Result<ChildPlan> {
        plan_macvlan(parent, settings, mtu, macvlan_mac(req, settings)?)
    }

    /// The pod's IPs get RoCE GIDs on the parent's ports, unless the conf asks for no RDMA.
    fn waits_for_gids(rdma: RdmaConf) -> bool {
        rdma != RdmaConf::Off
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

/// The MAC for a macvlan child: runtimeConfig.mac (the `mac` capability), then CNI_ARGS MAC (as
/// podman sends it), then the conf's `mac`.
fn macvlan_mac(req: &Request, settings: &MacvlanConf) -> Result<Option<Vec<u8>>> {
    if req
        .conf
        .runtime_config
        .mac
        .as_deref()
        .is_some_and(|m| !m.is_empty())
    {
        return Ok(settings.mac.clone());
    }
    if let Some(text) = req.env.args.mac()? {
        return parse_unicast_mac("CNI_ARGS MAC", &text).map(Some);
    }
    Ok(settings.mac.clone())
}

/// Decides kind, MTU and address of a macvlan child of `parent`, with conf `mtu` and the MAC
/// `mac` asked for.
pub fn plan_macvlan(
    parent: &Link,
    settings: &MacvlanConf,
    mtu: Option<u32>,
    mac: Option<Vec<u8>>,
) -> Result<ChildPlan> {
    if parent.link_type != ARPHRD_ETHER {
        return Err(Error::ParentUnsuitable(format!(
            "macvlan needs an Ethernet (RoCE) parent, but {} has link type {}{}; for IPoIB use \
             mode \"ipoib\"",
            parent.name,
            parent.link_type,
            if parent.link_type == ARPHRD_INFINIBAND {
                " (InfiniBand)"
            } else {
                ""
            }
        )));
    }
    if let Some(m) = mtu.filter(|&m| m > parent.mtu) {
        return Err(Error::config(
            "mtu",
            format!(
                "{m} is above the parent {}'s MTU {}: a macvlan child cannot exceed its parent",
                parent.name, parent.mtu
            ),
        ));
    }
    let mode = settings.macvlan_mode;
    // The address is decided here, before the intent record, so that the record identifies the
    // child from its first instant: a plugin killed right after the create still leaves DEL the
    // address to find it by. A passthru child takes its parent's address (and setting one would
    // change the parent's), so it is predicted, not set.
    let hwaddr = match (mac, mode) {
        (Some(m), _) => Some(m),
        (None, MacvlanMode::Passthru) => None,
        (None, _) => Some(random_local_mac()?),
    };
    let expected_hwaddr = match &hwaddr {
        Some(a) => format_hwaddr(a),
        None => parent.hwaddr_string(),
    };
    Ok(ChildPlan {
        kind: LinkKind::Macvlan { mode },
        mtu,
        summary: format!(
            "macvlan {mode:?} on {}, MTU {}",
            parent.name,
            mtu.unwrap_or(parent.mtu)
        ),
        hwaddr,
        expected_hwaddr: Some(expected_hwaddr),
    })
}

/// A random unicast, locally administered MAC, as the kernel picks for a macvlan by default
/// (eth_hw_addr_random).
fn random_local_mac() -> Result<Vec<u8>> {
    use std::io::Read;
    let mut mac = vec![0u8; 6];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut mac))
        .map_err(|e| Error::io("reading /dev/urandom for the child's MAC", e))?;
    mac[0] = (mac[0] & 0xfe) | 0x02;
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

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

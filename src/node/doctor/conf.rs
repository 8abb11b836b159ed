//! `conf`: each network decodes as ADD would, and what it names exists and suits its mode
//! (the parent's link type, an ib device behind it, the port's link layer).

use super::{Options, Report, Severity};
use crate::attach::ib_device::RdmaConf;
use crate::attach::modes::Mode;
use crate::kernel::topology::{IbDevice, IbPortRef, LinkLayer, RdmaSysfs, SysfsNetdev};
use crate::node::confs::RdmaNetwork;
use crate::node::NetView;

/// ARPHRD_ETHER and ARPHRD_INFINIBAND.
const ETHER: u16 = 1;
const INFINIBAND: u16 = 32;

fn type_name(t: u16) -> String {
    match t {
        ETHER => "Ethernet".to_string(),
        INFINIBAND => "InfiniBand (IPoIB)".to_string(),
        other => format!("ARPHRD {other}"),
    }
}

fn names<'a>(it: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = it.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// What a child mode needs of its parent, and the mode that would suit the other kind.
struct ParentNeeds {
    link_type: u16,
    layer: LinkLayer,
    other_mode: &'static str,
}

impl ParentNeeds {
    fn of(mode: Mode) -> Option<ParentNeeds> {
        match mode {
            Mode::Macvlan => Some(ParentNeeds {
                link_type: ETHER,
                layer: LinkLayer::Ethernet,
                other_mode: "ipoib",
            }),
            Mode::Ipoib => Some(ParentNeeds {
                link_type: INFINIBAND,
                layer: LinkLayer::InfiniBand,
                other_mode: "macvlan",
            }),
            _ => None,
        }
    }
}

/// One network's netdev as the check found it.
struct Named<'n> {
    network: &'n RdmaNetwork,
    object: String,
    /// `master` or `device`: the field that named it.
    field: &'static str,
    /// Its name in the host (an altname resolved).
    name: String,
}

pub(super) struct ConfCheck<'a> {
    pub(super) topo: &'a RdmaSysfs<'a>,
    pub(super) net: &'a dyn NetView,
    pub(super) devices: &'a [IbDevice],
    pub(super) opts: &'a Options,
}

impl ConfCheck<'_> {
    pub(super) fn check(&self, r: &mut Report) {
        self.refused(r);
        for n in &self.opts.networks {
            self.network(n, r);
        }
    }

    /// Confs, or entries, that the plugin's own decoders refuse.
    fn refused(&self, r: &mut Report) {
        for e in &self.opts.conf_errors {
            r.push(
                "conf",
                Severity::Fail,
                match &e.network {
                    Some(n) => format!("network {n} ({})", e.source),
                    None => e.source.clone(),
                },
                format!("the plugin would refuse it: {}", e.msg),
                Some(format!("correct the field named above in {}", e.source)),
            );
        }
    }

    fn network(&self, n: &RdmaNetwork, r: &mut Report) {
        let object = format!("network {} ({})", n.name, n.source);
        if let Some(ib) = &n.rdma_device {
            self.rdma_device(ib, &object, r);
            if n.netdev().is_none() {
                return;
            }
        }
        let Some(wanted) = n.netdev() else {
            let how = if n.mode == Mode::Rdma {
                "chained: the ib device follows the interface the plugin before it made"
            } else {
                "no netdev named: the device plugin's deviceID selects it per pod"
            };
            r.push("conf", Severity::Ok, object, how, None);
            return;
        };
        let field = if n.master.is_some() {
            "master"
        } else {
            "device"
        };
        let Some(name) = self.host_name(n, wanted, field, &object, r) else {
            return;
        };
        let Ok(Some(dev)) = self.topo.netdev(&name) else {
            return;
        };
        let named = Named {
            network: n,
            object,
            field,
            name,
        };
        self.parent(&named, &dev, r);
    }

    fn rdma_device(&self, ib: &str, object: &str, r: &mut Report) {
        if self.devices.iter().any(|d| d.name == ib) {
            r.push(
                "conf",
                Severity::Ok,
                object,
                format!("rdmaDevice {ib} exists"),
                None,
            );
        } else {
            r.push(
                "conf",
                Severity::Fail,
                object,
                format!(
                    "rdmaDevice {ib}: no such ib device (have: {})",
                    names(self.devices.iter().map(|d| d.name.as_str()))
                ),
                Some("name one of the ib devices `rdma link show` lists".into()),
            );
        }
    }

    /// The netdev's name in the host, its altname resolved; None (with a FAIL) when no netdev
    /// has it.
    fn host_name(
        &self,
        n: &RdmaNetwork,
        wanted: &str,
        field: &str,
        object: &str,
        r: &mut Report,
    ) -> Option<String> {
        if let Ok(Some(_)) = self.topo.netdev(wanted) {
            return Some(wanted.to_string());
        }
        let resolved = self.net.resolve_name(wanted);
        if resolved.is_none() {
            r.push(
                "conf",
                Severity::Fail,
                object,
                format!("{field} {wanted}: no such netdev in the host"),
                Some(format!(
                    "ip -br link lists the netdevs; set {field} in {} to one of them",
                    n.source
                )),
            );
        }
        resolved
    }

    /// The parent's link type, the ib device behind it and its port's link layer.
    fn parent(&self, named: &Named<'_>, dev: &SysfsNetdev, r: &mut Report) {
        let Named {
            network: n,
            field,
            name,
            ..
        } = named;
        let object = named.object.clone();
        let needs = ParentNeeds::of(n.mode);
        if let Some(want) = needs.as_ref().filter(|w| w.link_type != dev.link_type) {
            r.push(
                "conf",
                Severity::Fail,
                object,
                format!(
                    "{field} {name} is {}, mode {} needs {}: ADD fails with code 110",
                    type_name(dev.link_type),
                    n.mode.as_str(),
                    type_name(want.link_type)
                ),
                Some(format!(
                    "use mode {} for this parent, or name a {} netdev",
                    want.other_mode,
                    type_name(want.link_type)
                )),
            );
            return;
        }
        let ports = self.topo.ib_ports_for_netdev(name).unwrap_or_default();
        let Some(first) = ports.first() else {
            Self::no_ib_device(named, r);
            return;
        };
        let port_layer = self.port_layer(first);
        if let Some(want) = needs.filter(|w| Some(&w.layer) != port_layer.as_ref()) {
            r.push(
                "conf",
                Severity::Fail,
                object,
                format!(
                    "{field} {name} is on {}/{} whose link layer is {:?}, mode {} needs {:?}",
                    first.ibdev,
                    first.port,
                    port_layer,
                    n.mode.as_str(),
                    want.layer
                ),
                Some(format!("use mode {}, or another parent", want.other_mode)),
            );
            return;
        }
        r.push(
            "conf",
            Severity::Ok,
            object,
            format!(
                "{field} {name}: {}, ib device {} port {}",
                type_name(dev.link_type),
                first.ibdev,
                first.port
            ),
            None,
        );
    }

    fn port_layer(&self, port: &IbPortRef) -> Option<LinkLayer> {
        self.devices
            .iter()
            .find(|d| d.name == port.ibdev)
            .and_then(|d| d.port(port.port))
            .map(|p| p.link_layer.clone())
    }

    /// A netdev without RDMA is what `"rdma": "off"` asks for, and a FAIL otherwise.
    fn no_ib_device(named: &Named<'_>, r: &mut Report) {
        let n = named.network;
        r.push(
            "conf",
            if n.rdma == RdmaConf::Off {
                Severity::Ok
            } else {
                Severity::Fail
            },
            named.object.clone(),
            format!(
                "{} {} has no ib device behind it: pods get a netdev without RDMA",
                named.field, named.name
            ),
            Some(format!(
                "name the netdev of an RDMA port (rdma link show lists port → netdev), or set \
                 \"rdma\": \"off\" in {} if no RDMA is meant",
                n.source
            )),
        );
    }
}

//! The fake host of the unit tests: one [`FakeState`] behind both kernel seams, [`FakeKernel`]
//! ([`NetOps`]) and [`FakeRdma`] ([`RdmaOps`]).
//!
//! The fake keeps links and ib devices per namespace and mimics the kernel behaviour the steps
//! depend on: a netns move keeps the ifindex, flushes addresses and sets the link down; a name
//! (or altname) already used in the target netns gives EEXIST; an IPoIB netdev is re-created in
//! the target netns when its ib device moves; a Soft-RoCE (rxe) link added from a netns binds
//! the netdev of that name there, registers in the host, opens its UDP socket in the netdev's
//! netns (Linux 7.1 and later; the host's before) and goes when its netdev leaves that netns.
//! The scenarios of `conformance.rs` hold it to the real kernel's behaviour. Every call of either
//! seam is recorded as a typed [`Call`] in one sequence, so a test can check the order of netdev
//! and ib device operations, and any call matching a predicate given to
//! [`FakeKernel::fail_when`] fails with its errno.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

use ipnetwork::IpNetwork;

use crate::kernel::nldev::NetnsMode;
use crate::kernel::rdma_ops::PORT_ACTIVE;
use crate::kernel::rtnetlink::{
    Ipv4Conf, Ipv4Setting, Link, LinkChange, LinkKind, MacvlanMode, NetOps, NewLink, RouteSpec,
    RuleSpec,
};
use crate::kernel::{KResult, KernelError, Ns};

mod rdma;
mod rdma_cm;
mod routing;

pub use rdma::FakeRdma;
pub use rdma_cm::FakeCm;

/// Any real netns file works as the pod for the fake: only its path is used, as a key.
pub const POD: &str = "/proc/self/ns/net";

/// A namespace as the fake tells them apart: the host, or a pod by its netns path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NsKey {
    Host,
    Pod(String),
}

impl NsKey {
    pub fn of(ns: Ns<'_>) -> NsKey {
        match ns {
            Ns::Host => NsKey::Host,
            Ns::Pod(n) => NsKey::Pod(n.path().display().to_string()),
        }
    }

    /// The tests' pod, [`POD`].
    pub fn pod() -> NsKey {
        NsKey::Pod(POD.to_string())
    }
}

impl fmt::Display for NsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NsKey::Host => write!(f, "host"),
            NsKey::Pod(path) => write!(f, "{path}"),
        }
    }
}

/// One call into the fake host, through either seam. `ns` is the namespace the request was
/// sent in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    LinkByName {
        ns: NsKey,
        name: String,
    },
    LinkByIndex {
        ns: NsKey,
        index: u32,
    },
    Links {
        ns: NsKey,
    },
    /// The parts of one [`LinkChange`] request.
    SetLink {
        ns: NsKey,
        index: u32,
        netns: Option<NsKey>,
        name: Option<String>,
        mtu: Option<u32>,
        up: Option<bool>,
    },
    DelAltname {
        ns: NsKey,
        index: u32,
        altname: String,
    },
    SetAlias {
        ns: NsKey,
        index: u32,
        alias: String,
    },
    Addresses {
        ns: NsKey,
        index: u32,
    },
    AddAddress {
        ns: NsKey,
        index: u32,
        addr: IpNetwork,
    },
    DelAddress {
        ns: NsKey,
        index: u32,
        addr: IpNetwork,
    },
    AddRoute {
        ns: NsKey,
        dst: IpNetwork,
    },
    DelRoute {
        ns: NsKey,
        dst: IpNetwork,
    },
    /// `target` is where the child is created; None keeps it beside its parent.
    CreateLink {
        ns: NsKey,
        name: String,
        parent: u32,
        target: Option<NsKey>,
    },
    DeleteLink {
        ns: NsKey,
        index: u32,
    },
    Routes {
        ns: NsKey,
        table: u32,
    },
    AddRule {
        ns: NsKey,
        rule: RuleSpec,
    },
    DelRule {
        ns: NsKey,
        rule: RuleSpec,
    },
    Rules {
        ns: NsKey,
    },
    SetIpv4Conf {
        ns: NsKey,
        index: u32,
    },
    Ipv4Conf {
        ns: NsKey,
        index: u32,
    },
    NetnsMode,
    IbDeviceIndex {
        ns: NsKey,
        name: String,
    },
    MoveIb {
        ns: NsKey,
        index: u32,
        target: NsKey,
    },
    IbPortState {
        ns: NsKey,
        index: u32,
        port: u32,
    },
    AddRdmaLink {
        ns: NsKey,
        name: String,
        link_type: String,
        netdev: String,
    },
    DeleteRdmaLink {
        ns: NsKey,
        index: u32,
    },
    UdpPortBound {
        ns: NsKey,
        port: u16,
    },
    /// RDMA CM's configfs, which is the node's: no netns.
    CmGroupExists {
        name: String,
    },
    CmMakeGroup {
        name: String,
    },
    CmRemoveGroup {
        name: String,
    },
    CmDefaultTos {
        name: String,
        port: u32,
    },
    CmSetDefaultTos {
        name: String,
        port: u32,
        tos: u8,
    },
}

impl Call {
    /// A call that adds or deletes a software RDMA link, or looks for its socket.
    pub fn is_rdma_link(&self) -> bool {
        matches!(
            self,
            Call::AddRdmaLink { .. } | Call::DeleteRdmaLink { .. } | Call::UdpPortBound { .. }
        )
    }

    /// A call through the RDMA seam rather than the netdev one.
    pub fn is_rdma(&self) -> bool {
        matches!(
            self,
            Call::NetnsMode
                | Call::IbDeviceIndex { .. }
                | Call::MoveIb { .. }
                | Call::IbPortState { .. }
        ) || self.is_rdma_link()
            || self.is_rdma_cm()
    }

    /// A call into RDMA CM's configfs.
    pub fn is_rdma_cm(&self) -> bool {
        matches!(
            self,
            Call::CmGroupExists { .. }
                | Call::CmMakeGroup { .. }
                | Call::CmRemoveGroup { .. }
                | Call::CmDefaultTos { .. }
                | Call::CmSetDefaultTos { .. }
        )
    }
}

/// For error texts and assertion messages; tests match on the variants, never on this text.
impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::LinkByName { ns, name } => write!(f, "link_by_name {ns} {name}"),
            Call::LinkByIndex { ns, index } => write!(f, "link_by_index {ns} {index}"),
            Call::Links { ns } => write!(f, "links {ns}"),
            Call::SetLink {
                ns,
                index,
                netns,
                name,
                mtu,
                up,
            } => {
                write!(f, "set_link {ns} {index}")?;
                optional(f, " netns=", netns)?;
                optional(f, " name=", name)?;
                optional(f, " mtu=", mtu)?;
                optional(f, " up=", up)
            }
            Call::DelAltname { ns, index, altname } => {
                write!(f, "del_altname {ns} {index} {altname}")
            }
            Call::SetAlias { ns, index, alias } => write!(f, "set_alias {ns} {index} {alias:?}"),
            Call::Addresses { ns, index } => write!(f, "addresses {ns} {index}"),
            Call::AddAddress { ns, index, addr } => write!(f, "add_address {ns} {index} {addr}"),
            Call::DelAddress { ns, index, addr } => write!(f, "del_address {ns} {index} {addr}"),
            Call::AddRoute { ns, dst } => write!(f, "add_route {ns} {dst}"),
            Call::DelRoute { ns, dst } => write!(f, "del_route {ns} {dst}"),
            Call::CreateLink {
                ns,
                name,
                parent,
                target,
            } => {
                write!(f, "create_link {ns} {name} parent={parent}")?;
                optional(f, " netns=", target)
            }
            Call::DeleteLink { ns, index } => write!(f, "delete_link {ns} {index}"),
            Call::Routes { ns, table } => write!(f, "routes {ns} table {table}"),
            Call::AddRule { ns, rule } => write!(f, "add_rule {ns} {}", routing::text(rule)),
            Call::DelRule { ns, rule } => write!(f, "del_rule {ns} {}", routing::text(rule)),
            Call::Rules { ns } => write!(f, "rules {ns}"),
            Call::SetIpv4Conf { ns, index } => write!(f, "set_ipv4_conf {ns} {index}"),
            Call::Ipv4Conf { ns, index } => write!(f, "ipv4_conf {ns} {index}"),
            Call::NetnsMode => write!(f, "netns_mode"),
            Call::IbDeviceIndex { ns, name } => write!(f, "ib_device_index {ns} {name}"),
            Call::MoveIb { ns, index, target } => write!(f, "move_ib {ns} {index} -> {target}"),
            Call::IbPortState { ns, index, port } => {
                write!(f, "ib_port_state {ns} {index} port {port}")
            }
            Call::AddRdmaLink {
                ns,
                name,
                link_type,
                netdev,
            } => write!(
                f,
                "add_rdma_link {ns} {name} type {link_type} netdev {netdev}"
            ),
            Call::DeleteRdmaLink { ns, index } => write!(f, "delete_rdma_link {ns} {index}"),
            Call::UdpPortBound { ns, port } => write!(f, "udp_port_bound {ns} {port}"),
            Call::CmGroupExists { name } => write!(f, "cm_group_exists {name}"),
            Call::CmMakeGroup { name } => write!(f, "cm_make_group {name}"),
            Call::CmRemoveGroup { name } => write!(f, "cm_remove_group {name}"),
            Call::CmDefaultTos { name, port } => write!(f, "cm_default_tos {name} port {port}"),
            Call::CmSetDefaultTos { name, port, tos } => {
                write!(f, "cm_set_default_tos {name} port {port} = {tos}")
            }
        }
    }
}

/// `label` and the value, when there is one.
fn optional(f: &mut fmt::Formatter<'_>, label: &str, v: &Option<impl fmt::Display>) -> fmt::Result {
    match v {
        Some(v) => write!(f, "{label}{v}"),
        None => Ok(()),
    }
}

type CallPredicate = Box<dyn Fn(&Call) -> bool>;

/// A Soft-RoCE device the fake host made for `add_link`: its ib device and the netdev it is
/// bound to (the netns the netdev is in, and its ifindex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeRxe {
    pub name: String,
    pub index: u32,
    pub netdev_ns: NsKey,
    pub netdev: u32,
}

/// The fake host: netdevs, addresses, routes and ib devices per namespace, the RDMA subsystem's
/// settings, and the one sequence of calls made through either seam.
pub struct FakeState {
    pub links: Vec<(NsKey, Link)>,
    pub addrs: HashMap<u32, Vec<IpNetwork>>,
    pub routes: Vec<(NsKey, RouteSpec)>,
    pub rules: Vec<(NsKey, RuleSpec)>,
    /// Per-interface IPv4 values by ifindex; a link without an entry has the defaults (all 0).
    pub ipv4_conf: HashMap<u32, Ipv4Conf>,
    /// (namespace, ib device name, index)
    pub ib_devices: Vec<(NsKey, String, u32)>,
    /// None: the kernel has no RDMA netns support to ask.
    pub netns_mode: Option<NetnsMode>,
    pub port_state: u8,
    /// When set, moving an ib device also moves the IPoIB netdev whose address carries this GID
    /// (bytes 4-19), re-created with a new name and QPN, as the kernel does.
    pub ipoib_gid: Option<Vec<u8>>,
    /// The Soft-RoCE devices `add_link` made (each also in `ib_devices`).
    pub rxe: Vec<FakeRxe>,
    /// Whether the kernel has the rdma_rxe module: without it NEWLINK of type rxe is EINVAL.
    pub rxe_module: bool,
    /// Linux 7.1 and later: rxe opens its UDP socket in the netns of each device's netdev and
    /// can be moved in exclusive mode. Before (6.1): one socket in the host netns, opened when
    /// the module loads, and a move is EOPNOTSUPP.
    pub rxe_netns_sockets: bool,
    /// RDMA CM's configfs: groups, and the defaults of the devices.
    pub cm: FakeCm,
    pub calls: Vec<Call>,
    fail: Vec<(CallPredicate, i32)>,
    partial_rename_failure: Option<CallPredicate>,
}

impl Default for FakeState {
    fn default() -> Self {
        FakeState {
            links: Vec::new(),
            addrs: HashMap::new(),
            routes: Vec::new(),
            rules: Vec::new(),
            ipv4_conf: HashMap::new(),
            ib_devices: Vec::new(),
            netns_mode: Some(NetnsMode::Shared),
            port_state: PORT_ACTIVE,
            ipoib_gid: None,
            rxe: Vec::new(),
            rxe_module: true,
            rxe_netns_sockets: true,
            cm: FakeCm::default(),
            calls: Vec::new(),
            fail: Vec::new(),
            partial_rename_failure: None,
        }
    }
}

impl FakeState {
    /// Logs `call`, then fails it if a configured predicate matches it.
    fn record(&mut self, call: Call, ns: Ns<'_>, target: &str) -> KResult<()> {
        let errno = self
            .fail
            .iter()
            .find(|(matches, _)| matches(&call))
            .map(|(_, errno)| *errno);
        let op = call.to_string();
        self.calls.push(call);
        match errno {
            Some(errno) => Err(KernelError::new(op, target, ns, errno)),
            None => Ok(()),
        }
    }

    fn name_taken(&self, ns: &NsKey, name: &str, except: u32) -> bool {
        self.links.iter().any(|(k, l)| {
            k == ns && l.index != except && (l.name == name || l.altnames.iter().any(|a| a == name))
        })
    }

    /// rxe deletes a device whose netdev leaves its netns or is deleted (NETDEV_UNREGISTER).
    fn netdev_gone(&mut self, ns: &NsKey, index: u32) {
        let gone: Vec<u32> = self
            .rxe
            .iter()
            .filter(|r| r.netdev_ns == *ns && r.netdev == index)
            .map(|r| r.index)
            .collect();
        self.rxe.retain(|r| !gone.contains(&r.index));
        self.ib_devices.retain(|(_, _, i)| !gone.contains(i));
        for index in gone {
            self.cm.client_removed(index);
        }
    }

    /// The part of a combined change the kernel applies before a failed rename: the link is in
    /// `target` under its old name, down, with the new MTU and no addresses.
    fn move_keeping_name(&mut self, pos: usize, target: NsKey, mtu: Option<u32>) {
        let index = self.links[pos].1.index;
        let from = self.links[pos].0.clone();
        if from != target {
            self.netdev_gone(&from, index);
        }
        let entry = &mut self.links[pos];
        entry.0 = target;
        entry.1.up = false;
        if let Some(m) = mtu {
            entry.1.mtu = m;
        }
        self.left_its_netns(index);
    }
}

/// An up Ethernet link as a NIC or veth end shows itself to the fake host: MTU 1500 and a
/// locally administered MAC whose last byte is the ifindex, so tests can find it again by address.
pub fn ethernet_link(index: u32, name: &str) -> Link {
    Link {
        index,
        name: name.into(),
        mtu: 1500,
        hwaddr: vec![2, 0, 0, 0, 0, index as u8],
        up: true,
        link_type: 1,
        ..Default::default()
    }
}

/// The netdev seam of the fake host.
#[derive(Default)]
pub struct FakeKernel {
    pub state: Rc<RefCell<FakeState>>,
}

impl FakeKernel {
    pub fn with_host_links(links: Vec<Link>) -> FakeKernel {
        let k = FakeKernel::default();
        k.state.borrow_mut().links = links.into_iter().map(|l| (NsKey::Host, l)).collect();
        k
    }

    /// The RDMA seam of the same host.
    pub fn rdma(&self) -> FakeRdma {
        FakeRdma {
            state: Rc::clone(&self.state),
        }
    }

    /// Every call, through either seam, for which `matches` holds fails with `errno`.
    pub fn fail_when(&self, matches: impl Fn(&Call) -> bool + 'static, errno: nix::errno::Errno) {
        self.state
            .borrow_mut()
            .fail
            .push((Box::new(matches), errno as i32));
    }

    /// `set_link` calls for which `matches` holds apply the netns move and MTU, then fail the
    /// rename with EEXIST, as the kernel does when the new name is taken in the target netns.
    pub fn fail_rename_after_move_when(&self, matches: impl Fn(&Call) -> bool + 'static) {
        self.state.borrow_mut().partial_rename_failure = Some(Box::new(matches));
    }

    /// Every call so far, through either seam, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state.borrow().calls.clone()
    }

    /// (namespace, link) for the link with this hwaddr, wherever it is.
    pub fn locate(&self, hwaddr: &[u8]) -> Option<(NsKey, Link)> {
        self.state
            .borrow()
            .links
            .iter()
            .find(|(_, l)| l.hwaddr == hwaddr)
            .cloned()
    }

    pub fn addrs_of(&self, index: u32) -> Vec<IpNetwork> {
        self.state
            .borrow()
            .addrs
            .get(&index)
            .cloned()
            .unwrap_or_default()
    }

    fn record(&self, call: Call, ns: Ns<'_>, target: &str) -> KResult<()> {
        self.state.borrow_mut().record(call, ns, target)
    }
}

impl NetOps for FakeKernel {
    fn link_by_name(&self, ns: Ns<'_>, name: &str) -> KResult<Option<Link>> {
        let key = NsKey::of(ns);
        self.record(
            Call::LinkByName {
                ns: key.clone(),
                name: name.to_string(),
            },
            ns,
            name,
        )?;
        Ok(self.state.borrow().links.iter().find_map(|(k, l)| {
            (k == &key && (l.name == name || l.altnames.iter().any(|a| a == name)))
                .then(|| l.clone())
        }))
    }

    fn link_by_index(&self, ns: Ns<'_>, index: u32) -> KResult<Option<Link>> {
        let key = NsKey::of(ns);
        self.record(
            Call::LinkByIndex {
                ns: key.clone(),
                index,
            },
            ns,
            "",
        )?;
        Ok(self
            .state
            .borrow()
            .links
            .iter()
            .find_map(|(k, l)| (k == &key && l.index == index).then(|| l.clone())))
    }

    fn links(&self, ns: Ns<'_>) -> KResult<Vec<Link>> {
        let key = NsKey::of(ns);
        self.record(Call::Links { ns: key.clone() }, ns, "")?;
        Ok(self
            .state
            .borrow()
            .links
            .iter()
            .filter(|(k, _)| k == &key)
            .map(|(_, l)| l.clone())
            .collect())
    }

    fn set_link(&self, ns: Ns<'_>, index: u32, c: &LinkChange<'_>) -> KResult<()> {
        let key = NsKey::of(ns);
        let target_ns = c.netns.map(NsKey::of).unwrap_or_else(|| key.clone());
        let call = Call::SetLink {
            ns: key.clone(),
            index,
            netns: c.netns.map(NsKey::of),
            name: c.name.clone(),
            mtu: c.mtu,
            up: c.up,
        };
        let op = call.to_string();
        let mut st = self.state.borrow_mut();
        let partial = st
            .partial_rename_failure
            .as_ref()
            .is_some_and(|matches| matches(&call));
        st.record(call, ns, "")?;
        let pos = st
            .links
            .iter()
            .position(|(k, l)| k == &key && l.index == index)
            .ok_or_else(|| KernelError::new(op.clone(), "", ns, nix::libc::ENODEV))?;
        if partial {
            st.move_keeping_name(pos, target_ns, c.mtu);
            return Err(KernelError::new(op, "", ns, nix::libc::EEXIST));
        }
        let new_name = c
            .name
            .clone()
            .unwrap_or_else(|| st.links[pos].1.name.clone());
        let moving = target_ns != key;
        let clash = st.name_taken(&target_ns, &new_name, index)
            || st.links[pos]
                .1
                .altnames
                .iter()
                .any(|a| a == &new_name && a != &st.links[pos].1.name)
                && c.name.is_some();
        if clash {
            // The kernel moves first, under the current name when that is free in the target,
            // then fails the rename: the link ends up moved, down, flushed, with its old name.
            let old_name = st.links[pos].1.name.clone();
            if moving && !st.name_taken(&target_ns, &old_name, index) {
                st.move_keeping_name(pos, target_ns, c.mtu);
            }
            return Err(KernelError::new(op, "", ns, nix::libc::EEXIST));
        }
        if moving {
            st.netdev_gone(&key, index);
        }
        let entry = &mut st.links[pos];
        entry.0 = target_ns;
        entry.1.name = new_name;
        if let Some(m) = c.mtu {
            entry.1.mtu = m;
        }
        if moving {
            entry.1.up = false;
        }
        if let Some(u) = c.up {
            entry.1.up = u;
        }
        if moving {
            st.left_its_netns(index);
        }
        Ok(())
    }

    fn del_altname(&self, ns: Ns<'_>, index: u32, altname: &str) -> KResult<()> {
        let key = NsKey::of(ns);
        self.record(
            Call::DelAltname {
                ns: key.clone(),
                index,
                altname: altname.to_string(),
            },
            ns,
            "",
        )?;
        let mut st = self.state.borrow_mut();
        for (k, l) in st.links.iter_mut() {
            if k == &key && l.index == index {
                l.altnames.retain(|a| a != altname);
            }
        }
        Ok(())
    }

    /// As the kernel: an empty alias is none; a missing link is ENODEV.
    fn set_alias(&self, ns: Ns<'_>, index: u32, alias: &str) -> KResult<()> {
        let key = NsKey::of(ns);
        let call = Call::SetAlias {
            ns: key.clone(),
            index,
            alias: alias.to_string(),
        };
        let op = call.to_string();
        self.record(call, ns, "")?;
        let mut st = self.state.borrow_mut();
        let link = st
            .links
            .iter_mut()
            .find(|(k, l)| k == &key && l.index == index)
            .ok_or_else(|| KernelError::new(op, "", ns, nix::libc::ENODEV))?;
        link.1.alias = (!alias.is_empty()).then(|| alias.to_string());
        Ok(())
    }

    fn addresses(&self, ns: Ns<'_>, index: u32) -> KResult<Vec<IpNetwork>> {
        self.record(
            Call::Addresses {
                ns: NsKey::of(ns),
                index,
            },
            ns,
            "",
        )?;
        Ok(self.addrs_of(index))
    }

    fn add_address(&self, ns: Ns<'_>, index: u32, addr: IpNetwork) -> KResult<()> {
        let call = Call::AddAddress {
            ns: NsKey::of(ns),
            index,
            addr,
        };
        let mut st = self.state.borrow_mut();
        st.record(call, ns, "")?;
        let list = st.addrs.entry(index).or_default();
        if list.contains(&addr) {
            return Err(KernelError::new("add_address", "", ns, nix::libc::EEXIST));
        }
        list.push(addr);
        Ok(())
    }

    fn del_address(&self, ns: Ns<'_>, index: u32, addr: IpNetwork) -> KResult<()> {
        let call = Call::DelAddress {
            ns: NsKey::of(ns),
            index,
            addr,
        };
        let mut st = self.state.borrow_mut();
        st.record(call, ns, "")?;
        if let Some(list) = st.addrs.get_mut(&index) {
            list.retain(|a| *a != addr);
        }
        Ok(())
    }

    fn add_route(&self, ns: Ns<'_>, route: &RouteSpec) -> KResult<()> {
        let key = NsKey::of(ns);
        let mut st = self.state.borrow_mut();
        st.record(
            Call::AddRoute {
                ns: key.clone(),
                dst: route.dst,
            },
            ns,
            "",
        )?;
        st.add_route(key, route)
            .map_err(|errno| KernelError::new("add_route", "", ns, errno))
    }

    fn del_route(&self, ns: Ns<'_>, route: &RouteSpec) -> KResult<()> {
        let key = NsKey::of(ns);
        let mut st = self.state.borrow_mut();
        st.record(
            Call::DelRoute {
                ns: key.clone(),
                dst: route.dst,
            },
            ns,
            "",
        )?;
        st.del_route(&key, route)
            .map_err(|errno| KernelError::new("del_route", "", ns, errno))
    }

    fn create_link(&self, ns: Ns<'_>, spec: &NewLink<'_>) -> KResult<()> {
        let mut st = self.state.borrow_mut();
        st.record(
            Call::CreateLink {
                ns: NsKey::of(ns),
                name: spec.name.clone(),
                parent: spec.parent_index,
                target: spec.target_netns.map(NsKey::of),
            },
            ns,
            &spec.name,
        )?;
        let target = NsKey::of(spec.target_netns.unwrap_or(ns));
        if st.name_taken(&target, &spec.name, 0) {
            return Err(KernelError::new(
                "create_link",
                &spec.name,
                ns,
                nix::libc::EEXIST,
            ));
        }
        let index = st.links.iter().map(|(_, l)| l.index).max().unwrap_or(0) + 1;
        // A passthru macvlan takes its lower device's address, as the kernel's does.
        let inherited = match spec.kind {
            LinkKind::Macvlan {
                mode: MacvlanMode::Passthru,
            } => st
                .links
                .iter()
                .find(|(_, l)| l.index == spec.parent_index)
                .map(|(_, l)| l.hwaddr.clone()),
            _ => None,
        };
        st.links.push((
            target,
            Link {
                index,
                name: spec.name.clone(),
                mtu: spec.mtu.unwrap_or(1500),
                hwaddr: spec
                    .hwaddr
                    .clone()
                    .or(inherited)
                    .unwrap_or_else(|| vec![2, 0, 0, 0, 1, index as u8]),
                link: Some(spec.parent_index),
                kind: Some(spec.kind.kind_name().to_string()),
                ..Default::default()
            },
        ));
        Ok(())
    }

    fn delete_link(&self, ns: Ns<'_>, index: u32) -> KResult<()> {
        let key = NsKey::of(ns);
        let mut st = self.state.borrow_mut();
        st.record(
            Call::DeleteLink {
                ns: key.clone(),
                index,
            },
            ns,
            "",
        )?;
        let before = st.links.len();
        st.links.retain(|(k, l)| !(k == &key && l.index == index));
        if st.links.len() == before {
            return Err(KernelError::new("delete_link", "", ns, nix::libc::ENODEV));
        }
        st.netdev_gone(&key, index);
        st.left_its_netns(index);
        Ok(())
    }

    fn routes(&self, ns: Ns<'_>, table: u32) -> KResult<Vec<RouteSpec>> {
        let key = NsKey::of(ns);
        let call = Call::Routes {
            ns: key.clone(),
            table,
        };
        let mut st = self.state.borrow_mut();
        st.record(call, ns, "")?;
        Ok(st.routes_of(&key, table))
    }

    fn add_rule(&self, ns: Ns<'_>, rule: &RuleSpec) -> KResult<()> {
        let key = NsKey::of(ns);
        let call = Call::AddRule {
            ns: key.clone(),
            rule: *rule,
        };
        let mut st = self.state.borrow_mut();
        st.record(call, ns, "")?;
        st.add_rule(key, rule)
            .map_err(|errno| KernelError::new("add_rule", "", ns, errno))
    }

    fn del_rule(&self, ns: Ns<'_>, rule: &RuleSpec) -> KResult<()> {
        let key = NsKey::of(ns);
        let call = Call::DelRule {
            ns: key.clone(),
            rule: *rule,
        };
        let mut st = self.state.borrow_mut();
        st.record(call, ns, "")?;
        st.del_rule(&key, rule)
            .map_err(|errno| KernelError::new("del_rule", "", ns, errno))
    }

    fn rules(&self, ns: Ns<'_>) -> KResult<Vec<RuleSpec>> {
        let key = NsKey::of(ns);
        let mut st = self.state.borrow_mut();
        st.record(Call::Rules { ns: key.clone() }, ns, "")?;
        Ok(st.rules_of(&key))
    }

    fn set_ipv4_conf(&self, ns: Ns<'_>, index: u32, values: &[(Ipv4Setting, u32)]) -> KResult<()> {
        let key = NsKey::of(ns);
        let call = Call::SetIpv4Conf {
            ns: key.clone(),
            index,
        };
        let mut st = self.state.borrow_mut();
        st.record(call, ns, "")?;
        st.set_ipv4_conf(&key, index, values)
            .map_err(|errno| KernelError::new("set_ipv4_conf", "", ns, errno))
    }

    fn ipv4_conf(&self, ns: Ns<'_>, index: u32) -> KResult<Option<Ipv4Conf>> {
        let key = NsKey::of(ns);
        let call = Call::Ipv4Conf {
            ns: key.clone(),
            index,
        };
        let mut st = self.state.borrow_mut();
        st.record(call, ns, "")?;
        Ok(st.ipv4_conf_of(&key, index))
    }
}

//! A fake kernel and a fake IPAM for unit tests of the attachment steps.
//!
//! The fake keeps links per namespace and mimics the kernel behaviour the steps depend on: a
//! netns move keeps the ifindex, flushes addresses and sets the link down; a name (or altname)
//! already used in the target netns gives EEXIST. Every call is logged, and any call whose log
//! line contains a configured substring fails with a configured errno.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

use ipnetwork::IpNetwork;

use crate::attach::IpamOps;
use crate::cni::result::CniResult;
use crate::cni::Request;
use crate::error::{Error, Result};
use crate::kernel::{KResult, KernelError, Link, LinkChange, NetOps, NewLink, Ns, RouteSpec};

pub fn ns_key(ns: Ns<'_>) -> String {
    match ns {
        Ns::Host => "host".into(),
        Ns::Pod(n) => n.path().display().to_string(),
    }
}

#[derive(Default)]
pub struct FakeState {
    /// (namespace key, link)
    pub links: Vec<(String, Link)>,
    pub addrs: HashMap<u32, Vec<IpNetwork>>,
    pub routes: Vec<(String, RouteSpec)>,
    pub calls: Vec<String>,
    pub fail: Vec<(String, i32)>,
    /// set_link calls matching this apply the netns move and MTU, then fail the rename with
    /// EEXIST, as the kernel does when the new name is taken in the target netns.
    pub partial_rename_failure: Option<String>,
}

#[derive(Default)]
pub struct FakeKernel {
    /// Shared with a [`FakeRdma`] that re-creates IPoIB netdevs when their ib device moves: one
    /// fake host, two seams.
    pub state: std::rc::Rc<RefCell<FakeState>>,
}

impl FakeKernel {
    pub fn with_host_links(links: Vec<Link>) -> FakeKernel {
        let k = FakeKernel::default();
        k.state.borrow_mut().links = links.into_iter().map(|l| ("host".to_string(), l)).collect();
        k
    }

    /// The part of a combined change the kernel applies before a failed rename: the link is in
    /// `target` under its old name, down, with the new MTU and no addresses.
    fn move_keeping_name(st: &mut FakeState, pos: usize, target: String, mtu: Option<u32>) {
        let index = st.links[pos].1.index;
        let entry = &mut st.links[pos];
        entry.0 = target;
        entry.1.up = false;
        if let Some(m) = mtu {
            entry.1.mtu = m;
        }
        st.addrs.remove(&index);
    }

    /// Every call whose log line contains `pattern` fails with `errno`.
    pub fn fail_on(&self, pattern: &str, errno: nix::errno::Errno) {
        self.state
            .borrow_mut()
            .fail
            .push((pattern.to_string(), errno as i32));
    }

    pub fn calls(&self) -> Vec<String> {
        self.state.borrow().calls.clone()
    }

    /// (namespace key, link) for the link with this hwaddr, wherever it is.
    pub fn locate(&self, hwaddr: &[u8]) -> Option<(String, Link)> {
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

    fn record(&self, line: String, ns: Ns<'_>, target: &str) -> KResult<()> {
        let mut st = self.state.borrow_mut();
        st.calls.push(line.clone());
        if let Some((_, errno)) = st.fail.iter().find(|(p, _)| line.contains(p.as_str())) {
            return Err(KernelError::new(line, target, ns, *errno));
        }
        Ok(())
    }

    fn name_taken(st: &FakeState, ns: &str, name: &str, except: u32) -> bool {
        st.links.iter().any(|(k, l)| {
            k == ns && l.index != except && (l.name == name || l.altnames.iter().any(|a| a == name))
        })
    }
}

impl NetOps for FakeKernel {
    fn link_by_name(&self, ns: Ns<'_>, name: &str) -> KResult<Option<Link>> {
        self.record(format!("link_by_name {} {name}", ns_key(ns)), ns, name)?;
        let key = ns_key(ns);
        Ok(self.state.borrow().links.iter().find_map(|(k, l)| {
            (k == &key && (l.name == name || l.altnames.iter().any(|a| a == name)))
                .then(|| l.clone())
        }))
    }

    fn link_by_index(&self, ns: Ns<'_>, index: u32) -> KResult<Option<Link>> {
        self.record(format!("link_by_index {} {index}", ns_key(ns)), ns, "")?;
        let key = ns_key(ns);
        Ok(self
            .state
            .borrow()
            .links
            .iter()
            .find_map(|(k, l)| (k == &key && l.index == index).then(|| l.clone())))
    }

    fn links(&self, ns: Ns<'_>) -> KResult<Vec<Link>> {
        self.record(format!("links {}", ns_key(ns)), ns, "")?;
        let key = ns_key(ns);
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
        let line = format!(
            "set_link {} {index}{}{}{}{}",
            ns_key(ns),
            c.netns
                .map(|n| format!(" netns={}", ns_key(n)))
                .unwrap_or_default(),
            c.name
                .as_ref()
                .map(|n| format!(" name={n}"))
                .unwrap_or_default(),
            c.mtu.map(|m| format!(" mtu={m}")).unwrap_or_default(),
            c.up.map(|u| format!(" up={u}")).unwrap_or_default(),
        );
        self.record(line.clone(), ns, "")?;
        let key = ns_key(ns);
        let mut st = self.state.borrow_mut();
        let target_ns = c.netns.map(ns_key).unwrap_or_else(|| key.clone());
        let pos = st
            .links
            .iter()
            .position(|(k, l)| k == &key && l.index == index)
            .ok_or_else(|| KernelError::new(line.clone(), "", ns, nix::libc::ENODEV))?;
        if st
            .partial_rename_failure
            .as_ref()
            .is_some_and(|p| line.contains(p.as_str()))
        {
            Self::move_keeping_name(&mut st, pos, target_ns, c.mtu);
            return Err(KernelError::new(line, "", ns, nix::libc::EEXIST));
        }
        let new_name = c
            .name
            .clone()
            .unwrap_or_else(|| st.links[pos].1.name.clone());
        let moving = target_ns != key;
        let clash = Self::name_taken(&st, &target_ns, &new_name, index)
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
            if moving && !Self::name_taken(&st, &target_ns, &old_name, index) {
                Self::move_keeping_name(&mut st, pos, target_ns, c.mtu);
            }
            return Err(KernelError::new(line, "", ns, nix::libc::EEXIST));
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
            st.addrs.remove(&index);
        }
        Ok(())
    }

    fn del_altname(&self, ns: Ns<'_>, index: u32, altname: &str) -> KResult<()> {
        self.record(
            format!("del_altname {} {index} {altname}", ns_key(ns)),
            ns,
            "",
        )?;
        let key = ns_key(ns);
        let mut st = self.state.borrow_mut();
        for (k, l) in st.links.iter_mut() {
            if k == &key && l.index == index {
                l.altnames.retain(|a| a != altname);
            }
        }
        Ok(())
    }

    fn addresses(&self, ns: Ns<'_>, index: u32) -> KResult<Vec<IpNetwork>> {
        self.record(format!("addresses {} {index}", ns_key(ns)), ns, "")?;
        Ok(self.addrs_of(index))
    }

    fn add_address(&self, ns: Ns<'_>, index: u32, addr: IpNetwork) -> KResult<()> {
        self.record(format!("add_address {} {index} {addr}", ns_key(ns)), ns, "")?;
        let mut st = self.state.borrow_mut();
        let list = st.addrs.entry(index).or_default();
        if list.contains(&addr) {
            return Err(KernelError::new("add_address", "", ns, nix::libc::EEXIST));
        }
        list.push(addr);
        Ok(())
    }

    fn del_address(&self, ns: Ns<'_>, index: u32, addr: IpNetwork) -> KResult<()> {
        self.record(format!("del_address {} {index} {addr}", ns_key(ns)), ns, "")?;
        if let Some(list) = self.state.borrow_mut().addrs.get_mut(&index) {
            list.retain(|a| *a != addr);
        }
        Ok(())
    }

    fn add_route(&self, ns: Ns<'_>, route: &RouteSpec) -> KResult<()> {
        self.record(format!("add_route {} {}", ns_key(ns), route.dst), ns, "")?;
        self.state
            .borrow_mut()
            .routes
            .push((ns_key(ns), route.clone()));
        Ok(())
    }

    fn del_route(&self, ns: Ns<'_>, route: &RouteSpec) -> KResult<()> {
        self.record(format!("del_route {} {}", ns_key(ns), route.dst), ns, "")?;
        let key = ns_key(ns);
        self.state
            .borrow_mut()
            .routes
            .retain(|(k, r)| !(k == &key && r == route));
        Ok(())
    }

    fn create_link(&self, ns: Ns<'_>, spec: &NewLink<'_>) -> KResult<()> {
        self.record(
            format!(
                "create_link {} {} parent={}",
                ns_key(ns),
                spec.name,
                spec.parent_index
            ),
            ns,
            &spec.name,
        )?;
        let target = spec.target_netns.map(ns_key).unwrap_or_else(|| ns_key(ns));
        let mut st = self.state.borrow_mut();
        if Self::name_taken(&st, &target, &spec.name, 0) {
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
            crate::kernel::LinkKind::Macvlan {
                mode: crate::kernel::MacvlanMode::Passthru,
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
        self.record(format!("delete_link {} {index}", ns_key(ns)), ns, "")?;
        let key = ns_key(ns);
        let mut st = self.state.borrow_mut();
        let before = st.links.len();
        st.links.retain(|(k, l)| !(k == &key && l.index == index));
        if st.links.len() == before {
            return Err(KernelError::new("delete_link", "", ns, nix::libc::ENODEV));
        }
        Ok(())
    }
}

/// An IPAM that hands out a fixed result and logs what it was asked.
#[derive(Default)]
pub struct FakeIpam {
    pub result: Option<CniResult>,
    pub fail_add: bool,
    pub fail_del: bool,
    pub calls: Mutex<Vec<&'static str>>,
}

impl IpamOps for FakeIpam {
    fn add(&self, _req: &Request) -> Result<Option<CniResult>> {
        self.calls.lock().unwrap().push("add");
        if self.fail_add {
            return Err(Error::Delegated {
                plugin: "fake".into(),
                code: 11,
                msg: "pool exhausted".into(),
                details: String::new(),
            });
        }
        Ok(self.result.clone())
    }
    fn del(&self, _req: &Request) -> Result<()> {
        self.calls.lock().unwrap().push("del");
        if self.fail_del {
            return Err(Error::Delegated {
                plugin: "fake".into(),
                code: 11,
                msg: "store locked".into(),
                details: String::new(),
            });
        }
        Ok(())
    }
    fn check(&self, _req: &Request) -> Result<()> {
        self.calls.lock().unwrap().push("check");
        Ok(())
    }
    fn status(&self, _req: &Request) -> Result<()> {
        self.calls.lock().unwrap().push("status");
        Ok(())
    }
    fn gc(&self, _req: &Request) -> Result<()> {
        self.calls.lock().unwrap().push("gc");
        Ok(())
    }
}

/// A fake RDMA subsystem: ib devices per namespace, and optionally the kernel's re-creation of
/// an IPoIB netdev in the target netns when its ib device moves.
pub struct FakeRdma {
    pub mode: Option<crate::kernel::nldev::NetnsMode>,
    /// (namespace key, ib device name, index)
    pub devices: RefCell<Vec<(String, String, u32)>>,
    pub refuse: Option<nix::errno::Errno>,
    pub port_state: u8,
    pub calls: RefCell<Vec<String>>,
    /// When set, moving an ib device also moves the IPoIB netdev whose address carries this GID
    /// (bytes 4-19), re-created with a new name and QPN, as the kernel does.
    pub ipoib: Option<(std::rc::Rc<RefCell<FakeState>>, Vec<u8>)>,
    /// When set, ib device moves are also logged into the fake kernel's call log, so a test can
    /// compare the order of netdev and ib device operations (one host, one sequence).
    pub log_to: Option<std::rc::Rc<RefCell<FakeState>>>,
}

impl FakeRdma {
    pub fn new(mode: Option<crate::kernel::nldev::NetnsMode>, devices: &[(&str, u32)]) -> Self {
        FakeRdma {
            mode,
            devices: RefCell::new(
                devices
                    .iter()
                    .map(|(n, i)| ("host".to_string(), n.to_string(), *i))
                    .collect(),
            ),
            refuse: None,
            port_state: 4,
            calls: RefCell::new(Vec::new()),
            ipoib: None,
            log_to: None,
        }
    }

    pub fn location(&self, name: &str) -> Option<String> {
        self.devices
            .borrow()
            .iter()
            .find(|(_, n, _)| n == name)
            .map(|(k, _, _)| k.clone())
    }
}

impl crate::kernel::rdma_ops::RdmaOps for FakeRdma {
    fn netns_mode(&self) -> KResult<Option<crate::kernel::nldev::NetnsMode>> {
        self.calls.borrow_mut().push("netns_mode".into());
        Ok(self.mode)
    }

    fn device_index(&self, ns: Ns<'_>, name: &str) -> KResult<Option<u32>> {
        let key = ns_key(ns);
        Ok(self
            .devices
            .borrow()
            .iter()
            .find(|(k, n, _)| *k == key && n == name)
            .map(|(_, _, i)| *i))
    }

    fn move_device(&self, ns: Ns<'_>, index: u32, target: Ns<'_>) -> KResult<()> {
        let line = format!("move_ib {} {index} -> {}", ns_key(ns), ns_key(target));
        self.calls.borrow_mut().push(line.clone());
        if let Some(host) = &self.log_to {
            host.borrow_mut().calls.push(line.clone());
        }
        if let Some(errno) = self.refuse {
            return Err(KernelError::new(line, "ib", ns, errno as i32));
        }
        let key = ns_key(ns);
        let mut devs = self.devices.borrow_mut();
        let dev = devs
            .iter_mut()
            .find(|(k, _, i)| *k == key && *i == index)
            .ok_or_else(|| KernelError::new(line.clone(), "ib", ns, nix::libc::ENODEV))?;
        dev.0 = ns_key(target);
        if let Some((host, gid_addr)) = &self.ipoib {
            let mut st = host.borrow_mut();
            if let Some((k, l)) = st
                .links
                .iter_mut()
                .find(|(_, l)| l.hwaddr.len() == 20 && l.hwaddr[4..] == gid_addr[4..])
            {
                *k = ns_key(target);
                l.name = format!("ib{}", l.index);
                l.hwaddr[1] = l.hwaddr[1].wrapping_add(1);
                l.up = false;
            }
        }
        Ok(())
    }

    fn port_state(&self, _ns: Ns<'_>, _index: u32, _port: u32) -> KResult<Option<u8>> {
        Ok(Some(self.port_state))
    }
}

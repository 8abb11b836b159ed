//! rtnetlink: [`RealKernel`], the [`NetOps`] implementation on NETLINK_ROUTE sockets.
//!
//! One socket per namespace. A netlink socket acts in the namespace it was created in, so
//! the host socket is opened at construction and each pod's socket is created once, by a
//! bare socket(2) while the thread is briefly inside the pod's namespace ([`Netns::run_in`]),
//! then configured and used from the host namespace. An open socket holds a reference on its
//! namespace, so the namespace (and the nsfs inode the cache is keyed by) cannot be freed and
//! reused while it is cached.

mod decode;
mod request;

#[cfg(test)]
pub(crate) mod fuzz_tests;

use std::cell::RefCell;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

use ipnetwork::IpNetwork;
use nix::libc;

use self::request::{CreateLink, SetLink};
use super::netlink::{NlError, NlSocket, Reply, Route};
use super::{
    format_hwaddr, KResult, KernelError, Link, LinkChange, NetOps, Netns, NewLink, Ns, RouteSpec,
};

const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
/// IFNAMSIZ - 1: the longest primary interface name.
const IFNAME_MAX: usize = 15;
/// ALTIFNAMSIZ - 1: the longest name (an altname) the kernel can hold.
const ALTIFNAME_MAX: usize = 127;

/// [`NetOps`] against the running kernel.
pub struct RealKernel {
    host: RefCell<NlSocket<Route>>,
    /// The namespace the plugin started in, held open so a link can be moved back to it
    /// by fd (IFLA_NET_NS_FD) from a socket inside a pod.
    host_ns: Netns,
    pods: RefCell<HashMap<(u64, u64), NlSocket<Route>>>,
}

impl RealKernel {
    /// Opens the host socket and a handle on the host namespace, both in the calling
    /// thread's namespace.
    pub fn new() -> io::Result<RealKernel> {
        Ok(RealKernel {
            host: RefCell::new(NlSocket::open()?),
            host_ns: Netns::current()?,
            pods: RefCell::new(HashMap::new()),
        })
    }

    /// Runs `f` with the socket of `ns`, opening it inside the namespace on first use.
    fn with_socket<T>(
        &self,
        ns: Ns<'_>,
        f: impl FnOnce(&mut NlSocket<Route>) -> Result<T, NlError>,
    ) -> Result<T, NlError> {
        match ns {
            Ns::Host => f(&mut self.host.borrow_mut()),
            Ns::Pod(netns) => {
                let key = netns
                    .identity()
                    .map_err(|e| io_error("cannot identify the namespace (fstat on its fd)", e))?;
                let mut pods = self.pods.borrow_mut();
                let sock = match pods.entry(key) {
                    Entry::Occupied(e) => e.into_mut(),
                    Entry::Vacant(e) => {
                        e.insert(NlSocket::open_in(netns, &self.host_ns).map_err(|e| {
                            io_error("cannot open a netlink socket inside the namespace", e)
                        })?)
                    }
                };
                f(sock)
            }
        }
    }

    fn request(&self, ns: Ns<'_>, req: request::Request) -> Result<Vec<Reply>, NlError> {
        let (msg, flags) = req;
        self.with_socket(ns, |sock| {
            sock.request(|seq| request::frame(msg.clone(), flags, seq))
        })
    }

    fn decode_links(replies: &[Reply]) -> Result<Vec<Link>, NlError> {
        replies
            .iter()
            .filter(|r| r.message_type == RTM_NEWLINK)
            .map(|r| decode::link(&r.payload).map_err(NlError::decode))
            .collect()
    }

    /// The fd the kernel resolves IFLA_NET_NS_FD with. The kernel looks the fd up in the
    /// sending task's fd table, not the socket's namespace, so these fds (opened in this
    /// process) work from every socket.
    fn netns_fd(&self, ns: Ns<'_>) -> RawFd {
        match ns {
            Ns::Host => self.host_ns.fd().as_raw_fd(),
            Ns::Pod(netns) => netns.fd().as_raw_fd(),
        }
    }

    /// `name (ifindex N)` for error messages; only looked up once something has failed.
    fn describe(&self, ns: Ns<'_>, index: u32) -> String {
        match self.link_by_index(ns, index) {
            Ok(Some(link)) => format!("{} (ifindex {index})", link.name),
            Ok(None) => format!("ifindex {index} (no such link in {ns} after the failure)"),
            Err(_) => format!("ifindex {index}"),
        }
    }

    fn get_one_link(&self, ns: Ns<'_>, req: request::Request) -> Result<Option<Link>, NlError> {
        let replies = match self.request(ns, req) {
            Ok(r) => r,
            Err(e) if e.errno == libc::ENODEV => return Ok(None),
            Err(e) => return Err(e),
        };
        match replies.iter().find(|r| r.message_type == RTM_NEWLINK) {
            Some(reply) => decode::link(&reply.payload)
                .map(Some)
                .map_err(NlError::decode),
            None => Err(NlError::decode("RTM_GETLINK answered without a link")),
        }
    }
}

fn io_error(what: &str, e: io::Error) -> NlError {
    NlError::errno(
        e.raw_os_error().unwrap_or(libc::EIO),
        format!("{what}: {e}"),
    )
}

fn change_text(change: &LinkChange<'_>) -> String {
    let mut parts = Vec::new();
    if let Some(ns) = change.netns {
        parts.push(format!("move to {ns}"));
    }
    if let Some(mtu) = change.mtu {
        parts.push(format!("mtu {mtu}"));
    }
    if let Some(name) = &change.name {
        parts.push(format!("rename to {name}"));
    }
    match change.up {
        Some(true) => parts.push("set up".to_string()),
        Some(false) => parts.push("set down".to_string()),
        None => {}
    }
    if parts.is_empty() {
        "set link (no change)".to_string()
    } else {
        format!("set link: {}", parts.join(", "))
    }
}

fn route_text(verb: &str, route: &RouteSpec) -> String {
    let mut text = format!("{verb} route {}", route.dst);
    if let Some(gw) = route.gateway {
        text.push_str(&format!(" via {gw}"));
    }
    if let Some(metric) = route.metric {
        text.push_str(&format!(" metric {metric}"));
    }
    if let Some(mtu) = route.mtu {
        text.push_str(&format!(" mtu {mtu}"));
    }
    if let Some(table) = route.table {
        text.push_str(&format!(" table {table}"));
    }
    text
}

/// Interface names reach the kernel as C strings: an embedded NUL would silently cut the
/// name short and could match a different link.
fn check_name(name: &str, max: usize) -> Result<(), NlError> {
    if name.is_empty() || name.contains('\0') || name.len() > max {
        return Err(NlError::errno(
            libc::EINVAL,
            format!("invalid interface name {name:?} (1 to {max} bytes, no NUL)"),
        ));
    }
    Ok(())
}

impl NetOps for RealKernel {
    fn link_by_name(&self, ns: Ns<'_>, name: &str) -> KResult<Option<Link>> {
        check_name(name, ALTIFNAME_MAX)
            .and_then(|()| self.get_one_link(ns, request::get_link_by_name(name)))
            .map_err(|e| KernelError::netlink("look up link by name", name, ns, e))
    }

    fn link_by_index(&self, ns: Ns<'_>, index: u32) -> KResult<Option<Link>> {
        // ifindex 0 means "by name" to the kernel, and is never a link.
        if index == 0 {
            return Ok(None);
        }
        self.get_one_link(ns, request::get_link_by_index(index))
            .map_err(|e| {
                KernelError::netlink("look up link by index", format!("ifindex {index}"), ns, e)
            })
    }

    fn links(&self, ns: Ns<'_>) -> KResult<Vec<Link>> {
        let fail = |e| KernelError::netlink("list links", "all links", ns, e);
        let replies = self.request(ns, request::dump_links()).map_err(fail)?;
        Self::decode_links(&replies).map_err(fail)
    }

    fn links_with_hwaddr(&self, ns: Ns<'_>, addr: &[u8]) -> KResult<Vec<Link>> {
        let fail = |e| {
            KernelError::netlink(
                "list links",
                format!("hwaddr {}", format_hwaddr(addr)),
                ns,
                e,
            )
        };
        let (msg, flags) = request::dump_links();
        let replies = self
            .with_socket(ns, |sock| {
                sock.request_keeping(
                    |seq| request::frame(msg.clone(), flags, seq),
                    |kind, payload| kind == RTM_NEWLINK && decode::link_has_hwaddr(payload, addr),
                )
            })
            .map_err(fail)?;
        Self::decode_links(&replies).map_err(fail)
    }

    fn set_link(&self, ns: Ns<'_>, index: u32, change: &LinkChange<'_>) -> KResult<()> {
        let name = change.name.as_deref();
        let result = match name.map(|n| check_name(n, IFNAME_MAX)) {
            Some(Err(e)) => Err(e),
            _ => {
                let req = request::set_link(
                    index,
                    &SetLink {
                        netns_fd: change.netns.map(|n| self.netns_fd(n)),
                        name,
                        mtu: change.mtu,
                        up: change.up,
                    },
                );
                self.request(ns, req).map(drop)
            }
        };
        result.map_err(|e| {
            let target = match (self.link_by_index(ns, index), change.netns) {
                // do_setlink moves the link before it sets the MTU or renames it, and does
                // not move it back when a later step fails.
                (Ok(None), Some(to)) => {
                    format!("ifindex {index} (gone from {ns}: probably already moved to {to})")
                }
                _ => self.describe(ns, index),
            };
            KernelError::netlink(change_text(change), target, ns, e)
        })
    }

    fn del_altname(&self, ns: Ns<'_>, index: u32, altname: &str) -> KResult<()> {
        check_name(altname, ALTIFNAME_MAX)
            .and_then(|()| {
                self.request(ns, request::del_altname(index, altname))
                    .map(drop)
            })
            .map_err(|e| {
                KernelError::netlink(
                    format!("delete altname {altname}"),
                    self.describe(ns, index),
                    ns,
                    e,
                )
            })
    }

    fn addresses(&self, ns: Ns<'_>, index: u32) -> KResult<Vec<IpNetwork>> {
        let fail = |e| KernelError::netlink("list addresses", self.describe(ns, index), ns, e);
        let replies = self
            .request(ns, request::dump_addresses(index))
            .map_err(fail)?;
        let mut out = Vec::new();
        for reply in replies.iter().filter(|r| r.message_type == RTM_NEWADDR) {
            let (ifindex, addr) = decode::address(&reply.payload)
                .map_err(NlError::decode)
                .map_err(fail)?;
            // The kernel filters on ifa_index under strict checking; this keeps the
            // answer right even if it did not.
            if ifindex == index {
                out.push(addr);
            }
        }
        Ok(out)
    }

    fn add_address(&self, ns: Ns<'_>, index: u32, addr: IpNetwork) -> KResult<()> {
        self.request(ns, request::add_address(index, addr))
            .map(drop)
            .map_err(|e| {
                KernelError::netlink(
                    format!("add address {addr}"),
                    self.describe(ns, index),
                    ns,
                    e,
                )
            })
    }

    fn del_address(&self, ns: Ns<'_>, index: u32, addr: IpNetwork) -> KResult<()> {
        self.request(ns, request::del_address(index, addr))
            .map(drop)
            .map_err(|e| {
                KernelError::netlink(
                    format!("delete address {addr}"),
                    self.describe(ns, index),
                    ns,
                    e,
                )
            })
    }

    fn add_route(&self, ns: Ns<'_>, route: &RouteSpec) -> KResult<()> {
        check_route(route)
            .and_then(|()| self.request(ns, request::add_route(route)).map(drop))
            .map_err(|e| {
                KernelError::netlink(
                    route_text("add", route),
                    self.describe(ns, route.oif),
                    ns,
                    e,
                )
            })
    }

    fn del_route(&self, ns: Ns<'_>, route: &RouteSpec) -> KResult<()> {
        check_route(route)
            .and_then(|()| self.request(ns, request::del_route(route)).map(drop))
            .map_err(|e| {
                KernelError::netlink(
                    route_text("delete", route),
                    self.describe(ns, route.oif),
                    ns,
                    e,
                )
            })
    }

    fn create_link(&self, ns: Ns<'_>, spec: &NewLink<'_>) -> KResult<()> {
        let result = check_name(&spec.name, IFNAME_MAX).and_then(|()| {
            let req = request::create_link(&CreateLink {
                name: &spec.name,
                kind: spec.kind,
                parent_index: spec.parent_index,
                netns_fd: spec.target_netns.map(|n| self.netns_fd(n)),
                mtu: spec.mtu,
                hwaddr: spec.hwaddr.as_deref(),
            });
            self.request(ns, req).map(drop)
        });
        result.map_err(|e| {
            let mut op = format!("create {} link {}", spec.kind.kind_name(), spec.name);
            if let Some(target) = spec.target_netns {
                op.push_str(&format!(" in {target}"));
            }
            let parent = self.describe(ns, spec.parent_index);
            KernelError::netlink(op, format!("parent {parent}"), ns, e)
        })
    }

    fn delete_link(&self, ns: Ns<'_>, index: u32) -> KResult<()> {
        self.request(ns, request::delete_link(index))
            .map(drop)
            .map_err(|e| KernelError::netlink("delete link", self.describe(ns, index), ns, e))
    }
}

/// RTA_GATEWAY must be of the destination's family (a v6 next hop for a v4 route needs
/// RTA_VIA, which this plugin does not send); the kernel would only say EINVAL.
fn check_route(route: &RouteSpec) -> Result<(), NlError> {
    match route.gateway {
        Some(gw) if gw.is_ipv4() != route.dst.is_ipv4() => Err(NlError::errno(
            libc::EINVAL,
            format!(
                "gateway {gw} is not of the same address family as destination {}",
                route.dst
            ),
        )),
        _ => Ok(()),
    }
}

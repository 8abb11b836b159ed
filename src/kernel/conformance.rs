//! The [`NetOps`] and [`RdmaOps`] behaviour the attachment steps rely on, written once: unit
//! tests run these scenarios against the fake host (src/kernel/fake.rs), the root tier the
//! netdev ones against the real kernel (tests/netlink_root.rs) and the VM tier the Soft-RoCE
//! ones against kernels with rdma_rxe (tests/vm_soft_roce.rs), so the fake cannot drift from the
//! kernel unnoticed.
//!
//! Each netdev scenario gets a host link to work on (up, with an address, its name free in the
//! pod) and the pod namespace, and leaves the link in the pod under `ifname` (or where the
//! scenario says); it returns what went wrong as text, to be asserted by the caller.

use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;

use crate::kernel::rdma_ops::{RdmaOps, ROCE_V2_PORT};
use crate::kernel::rtnetlink::{
    Ipv4Setting, Link, LinkChange, LinkKind, MacvlanMode, NetOps, NewLink, RouteSpec, RuleSpec,
};
use crate::kernel::{KResult, Ns};

type Outcome = Result<(), String>;

fn find(k: &dyn NetOps, ns: Ns<'_>, index: u32) -> Result<Option<Link>, String> {
    k.link_by_index(ns, index).map_err(|e| e.to_string())
}

/// A name clash fails with EEXIST; `if_ok` says what went wrong when the request succeeded.
fn expect_eexist(result: KResult<()>, if_ok: &str) -> Outcome {
    expect_errno(result, nix::errno::Errno::EEXIST, if_ok)
}

fn expect_errno(result: KResult<()>, errno: nix::errno::Errno, if_ok: &str) -> Outcome {
    match result {
        Ok(()) => Err(if_ok.to_string()),
        Err(e) if e.is_errno(errno) => Ok(()),
        Err(e) => Err(format!("want {errno}, got {e}")),
    }
}

fn ok<T>(what: &str, result: KResult<T>) -> Result<T, String> {
    result.map_err(|e| format!("{what}: {e}"))
}

/// `dev` moved into the pod as `ifname` (see [`a_move_keeps_the_ifindex`]), with 10.77.0.2/24
/// and, when `up`, set up.
fn addressed_in_pod(k: &dyn NetOps, pod: Ns<'_>, dev: &Link, ifname: &str, up: bool) -> Outcome {
    a_move_keeps_the_ifindex(k, pod, dev, ifname)?;
    ok(
        "address",
        k.add_address(pod, dev.index, "10.77.0.2/24".parse().unwrap()),
    )?;
    if up {
        let change = LinkChange {
            up: Some(true),
            ..Default::default()
        };
        ok("up", k.set_link(pod, dev.index, &change))?;
    }
    Ok(())
}

/// Back to the host under its host name (the pod's name may be taken there).
fn back_to_host(dev: &Link) -> LinkChange<'static> {
    LinkChange {
        netns: Some(Ns::Host),
        name: Some(dev.name.clone()),
        ..Default::default()
    }
}

fn route_via(dev: &Link, gateway: &str, table: Option<u32>) -> RouteSpec {
    RouteSpec {
        dst: "10.100.0.0/14".parse().unwrap(),
        gateway: Some(gateway.parse().unwrap()),
        oif: dev.index,
        metric: None,
        mtu: None,
        table,
        scope: None,
    }
}

/// Which routes of `table` leave by `dev`, as (destination, gateway).
fn table_of(k: &dyn NetOps, pod: Ns<'_>, table: u32) -> Result<Vec<String>, String> {
    Ok(ok("routes", k.routes(pod, table))?
        .iter()
        .map(|r| format!("{} via {:?} oif {}", r.dst, r.gateway, r.oif))
        .collect())
}

/// A move with a new name and MTU in one request keeps the ifindex, and the link is no longer
/// in the host.
pub fn a_move_keeps_the_ifindex(k: &dyn NetOps, pod: Ns<'_>, dev: &Link, ifname: &str) -> Outcome {
    k.set_link(
        Ns::Host,
        dev.index,
        &LinkChange {
            netns: Some(pod),
            name: Some(ifname.to_string()),
            mtu: Some(1400),
            up: None,
        },
    )
    .map_err(|e| format!("move: {e}"))?;
    let moved = find(k, pod, dev.index)?.ok_or("the ifindex changed in the move")?;
    if moved.name != ifname || moved.mtu != 1400 || moved.hwaddr != dev.hwaddr {
        return Err(format!("moved as {moved:?}"));
    }
    if find(k, Ns::Host, dev.index)?.is_some_and(|l| l.hwaddr == dev.hwaddr) {
        return Err("still in the host after the move".into());
    }
    Ok(())
}

/// A move flushes the link's addresses and sets it down: the pod starts from a bare link.
pub fn a_move_flushes_addresses_and_sets_the_link_down(
    k: &dyn NetOps,
    pod: Ns<'_>,
    dev: &Link,
    ifname: &str,
) -> Outcome {
    let before = k
        .addresses(Ns::Host, dev.index)
        .map_err(|e| e.to_string())?;
    if before.is_empty() || !dev.up {
        return Err("the scenario needs an up link with an address".into());
    }
    a_move_keeps_the_ifindex(k, pod, dev, ifname)?;
    let moved = find(k, pod, dev.index)?.ok_or("gone")?;
    let after = k.addresses(pod, dev.index).map_err(|e| e.to_string())?;
    let global: Vec<&IpNetwork> = after
        .iter()
        .filter(|a| !matches!(a, IpNetwork::V6(v6) if v6.ip().segments()[0] & 0xffc0 == 0xfe80))
        .collect();
    if moved.up || !global.is_empty() {
        return Err(format!(
            "after the move: up={} addresses={after:?}",
            moved.up
        ));
    }
    Ok(())
}

/// A move whose new name is taken in the pod fails with EEXIST after the move itself: the link
/// is in the pod under its host name, same ifindex (callers roll back from there).
pub fn a_rename_that_fails_leaves_the_link_moved(
    k: &dyn NetOps,
    pod: Ns<'_>,
    dev: &Link,
    taken_in_pod: &str,
) -> Outcome {
    let rename = k.set_link(
        Ns::Host,
        dev.index,
        &LinkChange {
            netns: Some(pod),
            name: Some(taken_in_pod.to_string()),
            mtu: None,
            up: None,
        },
    );
    expect_eexist(rename, "a rename to a taken name succeeded")?;
    let moved = find(k, pod, dev.index)?.ok_or("the link did not move before the rename failed")?;
    if moved.name != dev.name {
        return Err(format!(
            "in the pod as {}, want its host name {}",
            moved.name, dev.name
        ));
    }
    Ok(())
}

/// Creating a child under a name the pod already has is EEXIST, and nothing is created.
pub fn a_taken_name_is_eexist(
    k: &dyn NetOps,
    pod: Ns<'_>,
    parent: &Link,
    taken_in_pod: &str,
) -> Outcome {
    let before = k.links(pod).map_err(|e| e.to_string())?.len();
    let create = k.create_link(
        Ns::Host,
        &NewLink {
            name: taken_in_pod.to_string(),
            kind: LinkKind::Macvlan {
                mode: MacvlanMode::Bridge,
            },
            parent_index: parent.index,
            target_netns: Some(pod),
            mtu: None,
            hwaddr: None,
        },
    );
    expect_eexist(create, "a child was created under a taken name")?;
    let after = k.links(pod).map_err(|e| e.to_string())?.len();
    if after != before {
        return Err(format!("{before} links in the pod before, {after} after"));
    }
    Ok(())
}

/// A table holds one route per destination (and metric): a second one through another gateway
/// is EEXIST, while another table takes it; an on-link route on a link that is down is
/// ENETDOWN. What a rail's table of its own is for, and why its routes go in after the link is
/// up.
pub fn a_table_holds_one_route_per_destination(
    k: &dyn NetOps,
    pod: Ns<'_>,
    dev: &Link,
    ifname: &str,
) -> Outcome {
    addressed_in_pod(k, pod, dev, ifname, false)?;
    let connected = RouteSpec {
        dst: "10.77.0.0/24".parse().unwrap(),
        gateway: None,
        ..route_via(dev, "10.77.0.1", Some(1005))
    };
    let down = k.add_route(pod, &connected);
    expect_errno(down, nix::errno::Errno::ENETDOWN, "a route on a down link")?;
    let up = LinkChange {
        up: Some(true),
        ..Default::default()
    };
    ok("up", k.set_link(pod, dev.index, &up))?;
    ok(
        "route",
        k.add_route(pod, &route_via(dev, "10.77.0.1", None)),
    )?;
    let again = k.add_route(pod, &route_via(dev, "10.77.0.3", None));
    expect_eexist(again, "a second route to one destination in one table")?;
    ok(
        "the same in table 1005",
        k.add_route(pod, &route_via(dev, "10.77.0.3", Some(1005))),
    )?;
    let listed = table_of(k, pod, 1005)?;
    let want = format!("10.100.0.0/14 via Some(10.77.0.3) oif {}", dev.index);
    if listed != [want.clone()] {
        return Err(format!("table 1005 lists {listed:?}, want [{want}]"));
    }
    if !table_of(k, pod, 1006)?.is_empty() {
        return Err("a table nothing was added to lists routes".into());
    }
    Ok(())
}

/// Routes go with their link and rules stay with their netns: a route in table 1005 and a rule
/// looking that table up; the link moved out of the pod takes the route with it (deleting it is
/// then ESRCH), the rule stays until it is deleted (a second delete is ENOENT, a second add of
/// it EEXIST).
pub fn routes_go_with_their_link_and_rules_stay(
    k: &dyn NetOps,
    pod: Ns<'_>,
    dev: &Link,
    ifname: &str,
) -> Outcome {
    addressed_in_pod(k, pod, dev, ifname, true)?;
    let route = route_via(dev, "10.77.0.1", Some(1005));
    ok("route", k.add_route(pod, &route))?;
    let rule = RuleSpec {
        src: "10.77.0.2/32".parse().unwrap(),
        table: 1005,
        priority: 1000,
    };
    ok("rule", k.add_rule(pod, &rule))?;
    expect_eexist(k.add_rule(pod, &rule), "the same rule twice")?;
    if ok("rules", k.rules(pod))? != [rule] {
        return Err(format!("rules: {:?}, want [{rule:?}]", k.rules(pod)));
    }
    ok("move out", k.set_link(pod, dev.index, &back_to_host(dev)))?;
    if !table_of(k, pod, 1005)?.is_empty() {
        return Err("a route stayed in the pod's table without its link".into());
    }
    let gone = k.del_route(pod, &route);
    expect_errno(gone, nix::errno::Errno::ESRCH, "deleting a route that went")?;
    if ok("rules", k.rules(pod))? != [rule] {
        return Err("the rule went with the link".into());
    }
    ok("delete rule", k.del_rule(pod, &rule))?;
    expect_errno(
        k.del_rule(pod, &rule),
        nix::errno::Errno::ENOENT,
        "deleting a deleted rule",
    )
}

/// Per-interface IPv4 values set over netlink read back as set, and a link that leaves its netns
/// and comes back starts again from the netns's defaults.
pub fn ipv4_conf_is_the_links_until_it_moves(
    k: &dyn NetOps,
    pod: Ns<'_>,
    dev: &Link,
    ifname: &str,
) -> Outcome {
    a_move_keeps_the_ifindex(k, pod, dev, ifname)?;
    let read = |what: &str| -> Result<Vec<Option<u32>>, String> {
        let conf = ok(what, k.ipv4_conf(pod, dev.index))?.ok_or("the link is not in the pod")?;
        Ok(Ipv4Setting::ALL.iter().map(|s| conf.get(*s)).collect())
    };
    let defaults = read("defaults")?;
    let want = [
        (Ipv4Setting::ArpIgnore, 2),
        (Ipv4Setting::ArpAnnounce, 1),
        (Ipv4Setting::RpFilter, 1),
    ];
    ok("set", k.set_ipv4_conf(pod, dev.index, &want))?;
    let set = read("after set")?;
    if set != want.iter().map(|(_, v)| Some(*v)).collect::<Vec<_>>() {
        return Err(format!("set {want:?}, read back {set:?}"));
    }
    ok("move out", k.set_link(pod, dev.index, &back_to_host(dev)))?;
    let into_pod = LinkChange {
        netns: Some(pod),
        name: Some(ifname.to_string()),
        ..Default::default()
    };
    ok("move back", k.set_link(Ns::Host, dev.index, &into_pod))?;
    if read("after the moves")? != defaults {
        return Err(format!(
            "after leaving the pod and coming back: {:?}, the pod's defaults are {defaults:?}",
            read("again")?
        ));
    }
    if ok("no such link", k.ipv4_conf(pod, 0x7fff_fff0))?.is_some() {
        return Err("a link that does not exist has IPv4 values".into());
    }
    Ok(())
}

/// A link's alias is the link's: set in the host, it is there after a move into the pod as
/// `ifname` (the kernel keeps it, so whoever set it must put it back), reads back as set, and
/// an empty one removes it.
pub fn an_alias_goes_with_its_link(
    k: &dyn NetOps,
    pod: Ns<'_>,
    dev: &Link,
    ifname: &str,
) -> Outcome {
    let alias_in = |ns: Ns<'_>| -> Result<Option<String>, String> {
        Ok(find(k, ns, dev.index)?.ok_or("the link is gone")?.alias)
    };
    let text = "rdma-ns roceQos dscp=26 ecn=1 priority=3";
    ok("set the alias", k.set_alias(Ns::Host, dev.index, text))?;
    if alias_in(Ns::Host)?.as_deref() != Some(text) {
        return Err(format!("the alias reads {:?}", alias_in(Ns::Host)?));
    }
    a_move_keeps_the_ifindex(k, pod, dev, ifname)?;
    if alias_in(pod)?.as_deref() != Some(text) {
        return Err(format!("moved, the alias reads {:?}", alias_in(pod)?));
    }
    ok("remove the alias", k.set_alias(pod, dev.index, ""))?;
    match alias_in(pod)? {
        None => Ok(()),
        Some(a) => Err(format!("an empty alias left {a:?}")),
    }
}

fn device_index(rdma: &dyn RdmaOps, ns: Ns<'_>, name: &str) -> Result<Option<u32>, String> {
    rdma.device_index(ns, name).map_err(|e| e.to_string())
}

fn port_bound(rdma: &dyn RdmaOps, ns: Ns<'_>) -> Result<bool, String> {
    rdma.udp_port_bound(ns, ROCE_V2_PORT)
        .map_err(|e| e.to_string())
}

/// A rxe link added from the pod's socket on the pod's netdev `netdev` (up, no rxe yet)
/// registers the ib device `name` in the host netns, and the RoCE v2 port is bound in the pod
/// exactly when the kernel opens rxe's socket in the netdev's netns (`per_netns`: Linux 7.1 and
/// later); before the link, nothing is bound there. The device stays.
pub fn a_rxe_link_added_in_the_pod_registers_in_the_host(
    rdma: &dyn RdmaOps,
    pod: Ns<'_>,
    netdev: &str,
    name: &str,
    per_netns: bool,
) -> Outcome {
    if port_bound(rdma, pod)? {
        return Err("UDP 4791 is bound in the pod before any rxe link".into());
    }
    rdma.add_link(pod, name, "rxe", netdev)
        .map_err(|e| format!("add: {e}"))?;
    if device_index(rdma, Ns::Host, name)?.is_none() {
        return Err(format!("{name} is not in the host netns after the add"));
    }
    match (port_bound(rdma, pod)?, per_netns) {
        (true, true) | (false, false) => Ok(()),
        (bound, _) => Err(format!("UDP 4791 bound in the pod after the add: {bound}")),
    }
}

/// A rxe link under a name that is taken (the ib device `name` exists) is refused, EEXIST on
/// Linux 7 and ENFILE on 6.1 (the core's answer to a duplicate name); a second one on the same
/// netdev is EEXIST, rxe's.
pub fn a_taken_name_or_netdev_is_refused(
    rdma: &dyn RdmaOps,
    pod: Ns<'_>,
    netdev: &str,
    other_netdev: &str,
    name: &str,
) -> Outcome {
    match rdma.add_link(pod, name, "rxe", other_netdev) {
        Ok(()) => return Err("a rxe link was added under a taken name".into()),
        Err(e)
            if e.is_errno(nix::errno::Errno::EEXIST) || e.is_errno(nix::errno::Errno::ENFILE) => {}
        Err(e) => return Err(format!("taken name: want EEXIST or ENFILE, got {e}")),
    }
    let second = format!("{name}x");
    expect_eexist(
        rdma.add_link(pod, &second, "rxe", netdev),
        "a second rxe link was added on the same netdev",
    )
}

/// DELLINK of the device `name` from the host's socket removes it.
pub fn deleting_a_rxe_link_removes_its_device(rdma: &dyn RdmaOps, name: &str) -> Outcome {
    let index = device_index(rdma, Ns::Host, name)?.ok_or("no device to delete")?;
    rdma.delete_link(Ns::Host, index)
        .map_err(|e| format!("delete: {e}"))?;
    match device_index(rdma, Ns::Host, name)? {
        None => Ok(()),
        Some(i) => Err(format!("{name} still there (index {i}) after DELLINK")),
    }
}

/// Deleting the netdev (`netdev_index` in the pod) a rxe link is bound to removes the ib
/// device `name` too, within `within` (rxe unregisters it from a workqueue).
pub fn a_rxe_device_goes_with_its_netdev(
    rdma: &dyn RdmaOps,
    net: &dyn NetOps,
    pod: Ns<'_>,
    netdev_index: u32,
    name: &str,
    within: Duration,
) -> Outcome {
    if device_index(rdma, Ns::Host, name)?.is_none() {
        return Err(format!("{name} is not there to begin with"));
    }
    net.delete_link(pod, netdev_index)
        .map_err(|e| format!("deleting the netdev: {e}"))?;
    let deadline = Instant::now() + within;
    while device_index(rdma, Ns::Host, name)?.is_some() {
        if Instant::now() > deadline {
            return Err(format!("{name} outlived its netdev by {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn cm_read(rdma: &dyn RdmaOps, name: &str, what: &str) -> Result<u8, String> {
    rdma.cm_default_tos(name, 1)
        .map_err(|e| format!("{what}: reading {name}'s default: {e}"))
}

fn cm_expect(rdma: &dyn RdmaOps, name: &str, want: u8, what: &str) -> Outcome {
    match cm_read(rdma, name, what)? {
        got if got == want => Ok(()),
        got => Err(format!(
            "{what}: {name}'s default_roce_tos is {got}, want {want}"
        )),
    }
}

/// RDMA CM's default ToS of the ib device `name` (in the host netns, port 1, no configfs
/// group yet, never moved): 0 at first; kept by the device, not its group, so a group removed
/// and made again reads what was written; reset to 0 by a move into `pod` and by the move
/// back; a group for a name no device has is ENODEV, a second group EEXIST. Leaves the device
/// in the host without a group.
pub fn rdma_cm_defaults_stay_with_the_device_until_it_moves(
    rdma: &dyn RdmaOps,
    pod: Ns<'_>,
    name: &str,
) -> Outcome {
    let step = |what: &str, r: KResult<()>| r.map_err(|e| format!("{what}: {e}"));
    if rdma.cm_availability() != crate::kernel::rdma_cm::CmFs::Ready {
        return Err("no rdma_cm directory in configfs".into());
    }
    step("make the group", rdma.cm_make_group(name))?;
    cm_expect(rdma, name, 0, "a fresh device")?;
    step("write", rdma.cm_set_default_tos(name, 1, 104))?;
    cm_expect(rdma, name, 104, "after the write")?;
    expect_eexist(rdma.cm_make_group(name), "a second group was made")?;
    step("remove the group", rdma.cm_remove_group(name))?;
    step("make it again", rdma.cm_make_group(name))?;
    cm_expect(rdma, name, 104, "a group made again")?;
    let index = device_index(rdma, Ns::Host, name)?.ok_or("the device is not in the host")?;
    step("move into the pod", rdma.move_device(Ns::Host, index, pod))?;
    cm_expect(rdma, name, 0, "moved into the pod")?;
    step("write in the pod", rdma.cm_set_default_tos(name, 1, 96))?;
    cm_expect(rdma, name, 96, "written in the pod")?;
    step("move back", rdma.move_device(pod, index, Ns::Host))?;
    cm_expect(rdma, name, 0, "moved back")?;
    step("remove the group", rdma.cm_remove_group(name))?;
    expect_errno(
        rdma.cm_make_group("rdmans_nosuchdev"),
        nix::errno::Errno::ENODEV,
        "a group was made for a device that does not exist",
    )
}

/// The group of the ib device `name` outlives the device: a read through it is ENODEV once the
/// device is deleted, and the group can still be removed.
pub fn a_deleted_devices_group_reads_enodev(rdma: &dyn RdmaOps, name: &str) -> Outcome {
    rdma.cm_make_group(name)
        .map_err(|e| format!("make the group: {e}"))?;
    cm_expect(rdma, name, 0, "before the delete")?;
    deleting_a_rxe_link_removes_its_device(rdma, name)?;
    let read = rdma.cm_default_tos(name, 1).map(drop);
    let outcome = expect_errno(
        read,
        nix::errno::Errno::ENODEV,
        "a gone device's default read",
    );
    rdma.cm_remove_group(name)
        .map_err(|e| format!("remove the group of a gone device: {e}"))?;
    outcome
}

/// The scenarios against the fake host; tests/netlink_root.rs runs them against the real kernel.
#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::kernel::fake::{ethernet_link, FakeKernel, NsKey, POD};
    use crate::kernel::rdma_ops::RdmaOps;
    use crate::kernel::rtnetlink::Link;
    use crate::kernel::{Netns, Ns};

    fn nic() -> Link {
        ethernet_link(7, "ens1f0v0")
    }

    /// A fake host with the NIC (up, with an address) and a link called `net9` in the pod.
    fn host() -> FakeKernel {
        let k = FakeKernel::with_host_links(vec![nic()]);
        k.state
            .borrow_mut()
            .addrs
            .insert(7, vec!["192.0.2.7/24".parse().unwrap()]);
        k.state.borrow_mut().links.push((
            NsKey::pod(),
            Link {
                index: 30,
                name: "net9".into(),
                hwaddr: vec![2, 0, 0, 0, 0, 30],
                ..Default::default()
            },
        ));
        k
    }

    #[test]
    fn the_fake_kernel_behaves_as_the_scenarios_say() {
        let ns = Netns::open(std::path::Path::new(POD)).unwrap();
        let pod = Ns::Pod(&ns);
        super::a_move_keeps_the_ifindex(&host(), pod, &nic(), "net1").unwrap();
        super::a_move_flushes_addresses_and_sets_the_link_down(&host(), pod, &nic(), "net1")
            .unwrap();
        super::a_rename_that_fails_leaves_the_link_moved(&host(), pod, &nic(), "net9").unwrap();
        super::a_taken_name_is_eexist(&host(), pod, &nic(), "net9").unwrap();
        super::a_table_holds_one_route_per_destination(&host(), pod, &nic(), "net1").unwrap();
        super::routes_go_with_their_link_and_rules_stay(&host(), pod, &nic(), "net1").unwrap();
        super::ipv4_conf_is_the_links_until_it_moves(&host(), pod, &nic(), "net1").unwrap();
        super::an_alias_goes_with_its_link(&host(), pod, &nic(), "net1").unwrap();
    }

    /// The pod's `net9` and a second netdev `net8` there, for the Soft-RoCE scenarios.
    fn pod_with_two_netdevs(k: &FakeKernel) {
        k.state.borrow_mut().links.push((
            NsKey::pod(),
            Link {
                index: 31,
                name: "net8".into(),
                ..Default::default()
            },
        ));
    }

    #[test]
    fn the_fake_soft_roce_behaves_as_the_scenarios_say() {
        let ns = Netns::open(std::path::Path::new(POD)).unwrap();
        let pod = Ns::Pod(&ns);
        for per_netns in [true, false] {
            let k = host();
            pod_with_two_netdevs(&k);
            k.state.borrow_mut().rxe_netns_sockets = per_netns;
            let rdma = k.rdma();
            let name = "rxe_conformance";
            super::a_rxe_link_added_in_the_pod_registers_in_the_host(
                &rdma, pod, "net9", name, per_netns,
            )
            .unwrap();
            super::a_taken_name_or_netdev_is_refused(&rdma, pod, "net9", "net8", name).unwrap();
            super::deleting_a_rxe_link_removes_its_device(&rdma, name).unwrap();
            rdma.add_link(pod, name, "rxe", "net9").unwrap();
            let within = Duration::from_millis(100);
            super::a_rxe_device_goes_with_its_netdev(&rdma, &k, pod, 30, name, within).unwrap();
        }
    }

    #[test]
    fn the_fake_rdma_cm_behaves_as_the_scenarios_say() {
        let ns = Netns::open(std::path::Path::new(POD)).unwrap();
        let pod = Ns::Pod(&ns);
        let k = host();
        k.state.borrow_mut().netns_mode = Some(crate::kernel::nldev::NetnsMode::Exclusive);
        let rdma = k.rdma();
        let name = "rxe_conformance";
        rdma.add_link(pod, name, "rxe", "net9").unwrap();
        super::rdma_cm_defaults_stay_with_the_device_until_it_moves(&rdma, pod, name).unwrap();
        super::a_deleted_devices_group_reads_enodev(&rdma, name).unwrap();
    }
}

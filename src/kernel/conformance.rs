//! The [`NetOps`] behaviour the attachment steps rely on, written once: unit tests run these
//! scenarios against the fake host (src/kernel/fake.rs) and the root tier against the real
//! one (tests/netlink_root.rs), so the fake cannot drift from the kernel unnoticed.
//!
//! Each scenario gets a host link to work on (up, with an address, its name free in the pod) and
//! the pod namespace, and leaves the link in the pod under `ifname` (or where the scenario says);
//! it returns what went wrong as text, to be asserted by the caller.

use ipnetwork::IpNetwork;

use crate::kernel::rtnetlink::{Link, LinkChange, LinkKind, MacvlanMode, NetOps, NewLink};
use crate::kernel::{KResult, Ns};

type Outcome = Result<(), String>;

fn find(k: &dyn NetOps, ns: Ns<'_>, index: u32) -> Result<Option<Link>, String> {
    k.link_by_index(ns, index).map_err(|e| e.to_string())
}

/// A name clash fails with EEXIST; `if_ok` says what went wrong when the request succeeded.
fn expect_eexist(result: KResult<()>, if_ok: &str) -> Outcome {
    match result {
        Ok(()) => Err(if_ok.to_string()),
        Err(e) if e.is_errno(nix::errno::Errno::EEXIST) => Ok(()),
        Err(e) => Err(format!("want EEXIST, got {e}")),
    }
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

/// The scenarios against the fake host; tests/netlink_root.rs runs them against the real kernel.
#[cfg(test)]
mod tests {
    use crate::kernel::fake::{FakeKernel, NsKey, POD};
    use crate::kernel::rtnetlink::Link;
    use crate::kernel::{Netns, Ns};

    fn nic() -> Link {
        Link {
            index: 7,
            name: "ens1f0v0".into(),
            mtu: 1500,
            hwaddr: vec![2, 0, 0, 0, 0, 7],
            up: true,
            link_type: 1,
            ..Default::default()
        }
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
    }
}

//! The NetOps conformance scenarios (kernel::conformance) against the fake kernel; the root tier
//! runs the same ones against the real kernel (tests/netlink_root.rs).

use crate::attach::testkit::{FakeKernel, NsKey, POD};
use crate::kernel::conformance;
use crate::kernel::{Link, Netns, Ns};

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
    conformance::a_move_keeps_the_ifindex(&host(), pod, &nic(), "net1").unwrap();
    conformance::a_move_flushes_addresses_and_sets_the_link_down(&host(), pod, &nic(), "net1")
        .unwrap();
    conformance::a_rename_that_fails_leaves_the_link_moved(&host(), pod, &nic(), "net9").unwrap();
    conformance::a_taken_name_is_eexist(&host(), pod, &nic(), "net9").unwrap();
}

use super::*;
use crate::dra::inventory;
use crate::kernel::topology::fixtures::SysfsFixture;

fn fixture_devices(netns_mode: &str) -> (SysfsFixture, Vec<InvDevice>, DriverConfig) {
    let fx = SysfsFixture::all().unwrap();
    fx.write_attr("module/ib_core/parameters/netns_mode", netns_mode)
        .unwrap();
    fx.write_attr("class/net/v1/carrier", "1").unwrap();
    let cfg = DriverConfig {
        soft_roce_netdevs: vec!["v1".into()],
        rails: [("ens1f0np0".to_string(), "rail0".to_string())].into(),
        ..DriverConfig::default()
    };
    let devs = inventory::read(fx.root(), &cfg).unwrap();
    (fx, devs, cfg)
}

fn node() -> NodeRef {
    NodeRef {
        name: "node-a".into(),
        uid: Some("6b1f0c1e-0000-4000-8000-000000000001".into()),
    }
}

fn attr<'a>(d: &'a Device, name: &str) -> &'a DeviceAttribute {
    d.attributes
        .as_ref()
        .unwrap()
        .get(name)
        .unwrap_or_else(|| panic!("{} has no {name}: {:?}", d.name, d.attributes))
}

/// The slice of the fixture node, as JSON the API server gets: every device with the standard
/// topology attributes, the RDMA facts, the rail and Multus's two attributes; shared devices
/// allow several allocations; the slice is the node's, owned by its Node, and the pool's only one.
#[test]
fn the_slice_holds_one_device_per_port_with_topology_rdma_facts_and_multus_attributes() {
    let (_fx, devs, cfg) = fixture_devices("Y");
    let slices = desired_slices(&node(), &devs, &cfg, Sharing::MultipleAllocations);
    assert_eq!(slices.len(), 1);
    let slice = &slices[0];
    let json = serde_json::to_value(slice).unwrap();
    assert_eq!(json["metadata"]["name"], "node-a.rdma-ns.io");
    assert_eq!(json["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(json["spec"]["driver"], "rdma-ns.io");
    assert_eq!(json["spec"]["nodeName"], "node-a");
    assert_eq!(json["spec"]["pool"]["name"], "node-a");
    assert_eq!(json["spec"]["pool"]["resourceSliceCount"], 1);
    let devices = slice.spec.devices.as_ref().unwrap();
    assert_eq!(devices.len(), devs.len());
    let pf = devices.iter().find(|d| d.name == "mlx5-0-p1").unwrap();
    assert_eq!(
        attr(pf, "resource.kubernetes.io/pcieRoot")
            .string
            .as_deref(),
        Some("pci0000:3a")
    );
    assert_eq!(attr(pf, "resource.kubernetes.io/numaNode").int, Some(0));
    assert_eq!(
        attr(pf, "resource.kubernetes.io/pciBusID")
            .string
            .as_deref(),
        Some("0000:3b:00.0")
    );
    for (name, value) in [
        ("kind", "roce"),
        ("netdev", "ens1f0np0"),
        ("ibDevice", "mlx5_0"),
        ("linkLayer", "Ethernet"),
        ("portState", "4: ACTIVE"),
        ("nodeGuid", "0c42:a103:003b:0000"),
        ("firmware", "16.35.2000"),
        ("driver", "mlx5_core"),
        ("rdmaNetnsMode", "shared"),
        ("rail", "rail0"),
        ("k8s.cni.cncf.io/deviceID", "rdma-ns:mlx5-0-p1"),
        ("k8s.cni.cncf.io/resourceName", "rdma-ns.io/roce"),
    ] {
        assert_eq!(attr(pf, name).string.as_deref(), Some(value), "{name}");
    }
    assert_eq!(attr(pf, "speedMbps").int, Some(100_000));
    assert_eq!(pf.allow_multiple_allocations, Some(true));
    let ib = devices.iter().find(|d| d.name == "ibp94s0-p1").unwrap();
    assert_eq!(attr(ib, "linkLayer").string.as_deref(), Some("InfiniBand"));
    assert_eq!(
        attr(ib, "k8s.cni.cncf.io/resourceName").string.as_deref(),
        Some("rdma-ns.io/ipoib")
    );
    let soft = devices.iter().find(|d| d.name == "softroce-v1").unwrap();
    assert_eq!(attr(soft, "kind").string.as_deref(), Some("soft-roce"));
    assert!(soft.attributes.as_ref().unwrap().get("ibDevice").is_none());
}

/// Exclusive netns mode: hardware devices are whole (one allocation, a move), Soft-RoCE still
/// shared; without consumable capacity each shared device becomes N devices of one allocation
/// each, which map back to the inventory device.
#[test]
fn exclusive_devices_are_whole_and_old_servers_get_shares() {
    let (_fx, devs, cfg) = fixture_devices("N");
    let slice = desired_slices(&node(), &devs, &cfg, Sharing::MultipleAllocations).remove(0);
    let devices = slice.spec.devices.as_ref().unwrap();
    let pf = devices.iter().find(|d| d.name == "mlx5-0-p1").unwrap();
    assert_eq!(pf.allow_multiple_allocations, None);
    assert_eq!(
        attr(pf, "rdmaNetnsMode").string.as_deref(),
        Some("exclusive")
    );

    let (_fx, devs, cfg) = fixture_devices("Y");
    let shares = desired_slices(&node(), &devs, &cfg, Sharing::Replicas(3)).remove(0);
    let names: Vec<&str> = shares
        .spec
        .devices
        .iter()
        .flatten()
        .map(|d| d.name.as_str())
        .collect();
    assert!(
        names.contains(&"mlx5-0-p1-s0") && names.contains(&"mlx5-0-p1-s2"),
        "{names:?}"
    );
    assert!(!names.contains(&"mlx5-0-p1-s3"), "{names:?}");
    assert_eq!(names.len(), devs.len() * 3);
    let d = shares
        .spec
        .devices
        .as_ref()
        .unwrap()
        .iter()
        .find(|d| d.name == "mlx5-0-p1-s1")
        .unwrap();
    assert_eq!(d.allow_multiple_allocations, None);
    assert_eq!(
        attr(d, "k8s.cni.cncf.io/deviceID").string.as_deref(),
        Some("rdma-ns:mlx5-0-p1-s1")
    );
    assert_eq!(
        inventory_device(&devs, "mlx5-0-p1-s1").unwrap().name,
        "mlx5-0-p1"
    );
    assert_eq!(
        inventory_device(&devs, "mlx5-0-p1").unwrap().name,
        "mlx5-0-p1"
    );
    assert!(inventory_device(&devs, "mlx5-9-p1-s1").is_none());
    assert!(inventory_device(&devs, "mlx5-0-p1-sx").is_none());
}

/// What the publisher compares: contents, not the generation; and a server that dropped
/// `allowMultipleAllocations` is told apart from one that kept it.
#[test]
fn contents_compare_without_generation_and_dropped_sharing_is_seen() {
    let (_fx, devs, cfg) = fixture_devices("Y");
    let a = desired_slices(&node(), &devs, &cfg, Sharing::MultipleAllocations);
    let mut b = a.clone();
    b[0].spec.pool.generation = 7;
    assert!(same_contents(&a[0], &b[0]) && same_pool(&a, &b));
    assert!(server_kept_sharing(&a, &b));
    for d in b[0].spec.devices.iter_mut().flatten() {
        d.allow_multiple_allocations = None;
    }
    assert!(!same_contents(&a[0], &b[0]) && !same_pool(&a, &b));
    assert!(!server_kept_sharing(&a, &b));
    let fewer = desired_slices(&node(), &devs[1..], &cfg, Sharing::MultipleAllocations);
    assert!(!same_contents(&a[0], &fewer[0]));
}

/// The devices published across `slices`, by name, each once; and the slices' names.
fn published(slices: &[ResourceSlice]) -> (Vec<String>, Vec<String>) {
    let mut names: Vec<String> = slices
        .iter()
        .flat_map(|s| s.spec.devices.iter().flatten().map(|d| d.name.clone()))
        .collect();
    let before = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), before, "a device in two slices");
    let slice_names = slices
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect();
    (names, slice_names)
}

/// §7 of issue 39: a pool of more than 128 devices spans as many slices as it needs, each of at
/// most 128, every one saying how many the pool has, with nothing dropped: 8 PFs with 64 VFs
/// each (520 ports, each whole in exclusive netns mode), and 9 shared ports offered 16 times
/// each to a server without consumable capacity (144).
#[test]
fn a_pool_of_more_than_128_devices_spans_slices_with_nothing_dropped() {
    let big = SysfsFixture::new().unwrap();
    big.roce_pfs_with_vfs(8, 64).unwrap();
    big.write_attr("module/ib_core/parameters/netns_mode", "N")
        .unwrap();
    let cfg = DriverConfig::default();
    let devs = inventory::read(big.root(), &cfg).unwrap();
    assert_eq!(devs.len(), 520);
    let slices = desired_slices(&node(), &devs, &cfg, Sharing::MultipleAllocations);
    let (names, slice_names) = published(&slices);
    let inventory: Vec<String> = devs.iter().map(|d| d.name.clone()).collect();
    assert_eq!(names, inventory, "every device published");
    assert_eq!(
        slice_names,
        [
            "node-a.rdma-ns.io",
            "node-a.rdma-ns.io-1",
            "node-a.rdma-ns.io-2",
            "node-a.rdma-ns.io-3",
            "node-a.rdma-ns.io-4"
        ]
    );
    for s in &slices {
        assert!(s.spec.devices.as_ref().unwrap().len() <= MAX_DEVICES);
        assert_eq!(s.spec.pool.resource_slice_count, 5);
        assert_eq!(s.spec.pool.name, "node-a");
    }

    let shared = SysfsFixture::new().unwrap();
    shared.roce_pfs_with_vfs(9, 0).unwrap();
    shared
        .write_attr("module/ib_core/parameters/netns_mode", "Y")
        .unwrap();
    let devs = inventory::read(shared.root(), &cfg).unwrap();
    assert_eq!(devs.len(), 9);
    let slices = desired_slices(&node(), &devs, &cfg, Sharing::Replicas(16));
    let (names, slice_names) = published(&slices);
    assert_eq!(names.len(), 144);
    assert!(names.contains(&"mlx5-8-p1-s15".to_string()), "{names:?}");
    assert_eq!(slice_names, ["node-a.rdma-ns.io", "node-a.rdma-ns.io-1"]);
    assert_eq!(slices[1].spec.devices.as_ref().unwrap().len(), 16);
    // Its presence twin: one slice while the pool fits.
    assert_eq!(
        desired_slices(&node(), &devs, &cfg, Sharing::MultipleAllocations).len(),
        1
    );
}

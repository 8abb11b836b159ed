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
/// allow several allocations; the slice is the node's, owned by its Node.
#[test]
fn the_slice_holds_one_device_per_port_with_topology_rdma_facts_and_multus_attributes() {
    let (_fx, devs, cfg) = fixture_devices("Y");
    let slice = desired_slice(&node(), &devs, &cfg, Sharing::MultipleAllocations);
    let json = serde_json::to_value(&slice).unwrap();
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
    let slice = desired_slice(&node(), &devs, &cfg, Sharing::MultipleAllocations);
    let devices = slice.spec.devices.as_ref().unwrap();
    let pf = devices.iter().find(|d| d.name == "mlx5-0-p1").unwrap();
    assert_eq!(pf.allow_multiple_allocations, None);
    assert_eq!(
        attr(pf, "rdmaNetnsMode").string.as_deref(),
        Some("exclusive")
    );

    let (_fx, devs, cfg) = fixture_devices("Y");
    let shares = desired_slice(&node(), &devs, &cfg, Sharing::Replicas(3));
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
    let a = desired_slice(&node(), &devs, &cfg, Sharing::MultipleAllocations);
    let mut b = a.clone();
    b.spec.pool.generation = 7;
    assert!(same_contents(&a, &b));
    assert!(server_kept_sharing(&a, &b));
    for d in b.spec.devices.iter_mut().flatten() {
        d.allow_multiple_allocations = None;
    }
    assert!(!same_contents(&a, &b));
    assert!(!server_kept_sharing(&a, &b));
    let fewer = desired_slice(&node(), &devs[1..], &cfg, Sharing::MultipleAllocations);
    assert!(!same_contents(&a, &fewer));
}

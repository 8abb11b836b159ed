//! The pod's Soft-RoCE device as the later steps see it: its GID table is where the pod IP's
//! GID is waited for and recorded, `devicePermissions` covers its uverbs node, and the
//! device-info file names it.

use super::*;
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use std::os::unix::fs::PermissionsExt;

/// The pod's device in sysfs as the kernel shows it once added on net1 with 10.9.0.5: GID 0
/// the link-local one, GID 1 (with `pod_ip_gid`) the pod's IPv4, and its uverbs9 (231:201).
fn fixture(pod_ip_gid: bool) -> SysfsFixture {
    let fx = SysfsFixture::new().unwrap();
    let name = name();
    let v2 = "RoCE v2";
    let gids = [
        GidSpec {
            index: 0,
            gid: "fe80:0000:0000:0000:0000:00ff:fe00:0007",
            gid_type: v2,
            ndev: Some("net1"),
        },
        GidSpec {
            index: 1,
            gid: "0000:0000:0000:0000:0000:ffff:0a09:0005",
            gid_type: v2,
            ndev: Some("net1"),
        },
    ];
    let gids = if pod_ip_gid { &gids[..] } else { &gids[..1] };
    fx.add_ib_device(&IbDeviceSpec {
        name: &name,
        parent: IbParentSpec::Netdev("net1"),
        node_type: "1: CA",
        node_guid: "0000:00ff:fe00:0007",
        sys_image_guid: "0000:00ff:fe00:0007",
        fw_ver: "",
        ports: &[PortSpec::active(
            "Ethernet",
            "10 Gb/sec (1X FDR10)",
            4,
            gids,
        )],
    })
    .unwrap();
    fx.add_char_dev(&CharDevSpec {
        kind: CharDevKind::Uverbs,
        name: "uverbs9",
        ibdev: &name,
        port: None,
        parent: None,
        major: 231,
        minor: 201,
        abi_version: Some(2),
    })
    .unwrap();
    fx
}

#[test]
fn the_pod_ips_gid_is_recorded_on_the_pods_own_device() {
    for (mode, netns_mode) in SHAPES {
        let w = host(mode)
            .rdma(Some(netns_mode), &[])
            .sysfs(fixture(true))
            .build();
        w.add(None).unwrap();
        let att = w.store.load("cn", "c1", "net1").unwrap().unwrap();
        let gids = att.gids();
        assert_eq!(gids.len(), 1, "{mode}");
        assert_eq!(
            (gids[0].ibdev.as_str(), gids[0].port, gids[0].index),
            (name().as_str(), 1, 1),
            "{mode} {netns_mode:?}"
        );
        let view = att.pod_interface().unwrap().gid_view;
        let want = match netns_mode {
            NetnsMode::Exclusive => GidView::Pod,
            NetnsMode::Shared => GidView::Host,
        };
        assert_eq!(view, Some(want), "{mode} {netns_mode:?}");
        w.run(Command::Check, POD, None).unwrap();
        w.run(Command::Del, POD, None).unwrap();
    }
}

#[test]
fn a_gid_that_never_appears_on_the_device_fails_add_and_leaves_nothing() {
    let w = host(r#""mode":"macvlan","master":"vnic","gidTimeoutMs":30"#)
        .sysfs(fixture(false))
        .build();
    refused(&w, 121, &[&name()], "no GID");
}

#[test]
fn device_permissions_cover_the_pods_device_and_are_restored_on_del() {
    let dev = TempDir::new("softroce-dev");
    let uverbs = dev.path().join("uverbs9");
    let mode_of = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    mknod(&uverbs, SFlag::S_IFCHR, Mode::empty(), makedev(231, 201))
        .unwrap_or_else(|e| panic!("mknod (tests need root): {e}"));
    std::fs::set_permissions(&uverbs, std::fs::Permissions::from_mode(0o600)).unwrap();
    let fields = format!(r#"{MACVLAN},"devicePermissions":{{"uverbs":"0666"}}"#);
    let w = host(&fields)
        .sysfs(fixture(true))
        .dev_dir(dev.path())
        .build();
    w.add(None).unwrap();
    assert_eq!(mode_of(&uverbs), 0o666);
    let att = w.store.load("cn", "c1", "net1").unwrap().unwrap();
    assert_eq!(att.perm_changes.len(), 1);
    assert_eq!(att.perm_changes[0].rdev, (231, 201));
    w.run(Command::Del, POD, None).unwrap();
    assert_eq!(mode_of(&uverbs), 0o600, "restored on DEL");
    // Without the device's uverbs in sysfs the step is what names it missing.
    let w = host(&fields).dev_dir(dev.path()).build();
    refused(&w, 111, &[&name()], "no uverbs");
}

#[test]
fn the_device_info_file_names_the_pods_device() {
    let tmp = TempDir::devinfo("softroce");
    let file = tmp.path().join("devinfo/pod-net1.json");
    let fields = format!(
        r#"{MACVLAN},"runtimeConfig":{{"CNIDeviceInfoFile":"{}"}}"#,
        file.display()
    );
    let w = host(&fields).sysfs(fixture(true)).build();
    w.add(None).unwrap();
    let info: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(info["pci"]["rdma-device"], name().as_str(), "{info}");
    w.run(Command::Del, POD, None).unwrap();
    assert!(!file.exists());
}

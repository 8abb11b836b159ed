//! Property-based fuzz tests of this plugin's own readers: its conf fields (mode, selectors,
//! child settings, device permissions), the device-info file and the attachment record. Case
//! counts and the deep mode: docs/testing.md, "Fuzzing".

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::config::PluginConf;
use super::device_info::{self, DeviceInfo};
use super::modes::ModeConf;
use super::permissions;
use super::rail;
use super::record::Attachment;
use super::select;
use super::store::Store;
use crate::cni::{Command, NetConf};
use crate::testutil::fuzz::{self, check_rejection};
use crate::testutil::TempDir;

/// A record using every field, as ADD writes it.
fn record_doc() -> Value {
    json!({
        "network": "rdma-net", "containerId": "abc123", "ifname": "net1", "mode": "ipoib",
        "phase": "ready", "netns": "/run/netns/p1", "deviceKey": "mac-02_00_00_00_00_01",
        "host": {"name": "ens1f0", "ifindex": 7, "mtu": 1500, "hwaddr": "02:00:00:00:00:01",
                 "permHwaddr": "02:00:00:00:00:01", "pci": "0000:3b:00.2", "wasUp": true,
                 "addresses": ["192.0.2.1/24"]},
        "podIfindex": 9, "podMtu": 9000,
        "ipamResult": {"cniVersion": "1.1.0", "ips": [{"address": "10.0.0.5/24"}]},
        "child": {"kind": "ipoib", "hwaddr": "00:00:00:00:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:3b:00:01",
                  "ipoib": {"pkey": 32769, "mode": 0, "umcast": null}, "macvlanMode": 4,
                  "summary": "ipoib datagram on ib0"},
        "rdma": {"ibdev": "mlx5_0", "index": 1, "port": 1, "infiniband": false, "driver": "mlx5_core"},
        "gids": [{"ip": "10.0.0.5", "ibdev": "mlx5_0", "port": 1, "index": 3, "gidType": "RoCE v2"}],
        "gidView": "host",
        "permChanges": [{"path": "/dev/infiniband/uverbs0", "rdev": [231, 192], "oldMode": 384,
                         "oldGid": 0, "newMode": 438, "newGid": 0}],
        "deviceInfoFile": "/var/run/k8s.cni.cncf.io/devinfo/cni/x",
        "deviceId": "0000:3b:00.2"
    })
}

fn devinfo_doc() -> Value {
    json!({"type": "pci", "version": "1.1.0",
           "pci": {"pci-address": "0000:3b:00.2", "rdma-device": "mlx5_2",
                   "pf-pci-address": "0000:3b:00.0", "vhost-net": "/dev/vhost-net",
                   "representor-device": "pf0vf2", "future": [1]},
           "vdpa": {"parent-device": "vdpa:0000:3b:00.2"}})
}

/// One record file's content: the intent line and maybe a final line, as ADD appends them.
fn record_bytes() -> impl Strategy<Value = Vec<u8>> {
    let line = || fuzz::mutated_json(Just(record_doc()));
    (line(), prop::option::of(line()), any::<bool>()).prop_map(|(a, b, newline)| {
        let mut out = a;
        if let Some(b) = b {
            out.push(b'\n');
            out.extend(b);
        }
        if newline {
            out.push(b'\n');
        }
        out
    })
}

/// Found by `plugin_conf_never_panics`: a plugin field holding a lone surrogate escape passes
/// the conf parse (it keeps plugin fields as text) and fails when the field is decoded: code 6,
/// as for any stdin that does not decode, never a panic.
#[test]
fn regression_a_lone_surrogate_in_a_plugin_field_is_code_6() {
    let stdin =
        br#"{"cniVersion":"1.0.0","name":"n","type":"rdma-ns","mode":"macvlan","master":"\ud800"}"#;
    let conf = NetConf::parse(stdin, Command::Add).unwrap();
    let e = PluginConf::from_conf(&conf)
        .and_then(|_| select::device_plugin_id(&conf))
        .and_then(|id| select::parent_selectors(&conf, id.as_ref()).map(drop))
        .unwrap_err();
    assert_eq!(e.code(), 6, "{e}");
}

proptest! {
    #![proptest_config(fuzz::config(1000))]

    /// This plugin's fields of a near-valid conf: refused with 2 (unsupported value), 7
    /// (invalid field) or 6 (a field the conf parse kept as text does not decode, such as a
    /// lone UTF-16 surrogate escape), or accepted within their documented ranges.
    #[test]
    fn plugin_conf_never_panics(stdin in fuzz::mutated_json(fuzz::conf_doc())) {
        let Ok(conf) = NetConf::parse(&stdin, Command::Add) else {
            return Ok(());
        };
        match PluginConf::from_conf(&conf) {
            Ok(pc) => {
                if let Some(m) = pc.mtu {
                    prop_assert!((68..=65535).contains(&m));
                }
                prop_assert!(pc.data_dir.is_absolute());
                match &pc.mode {
                    ModeConf::Macvlan(m) => {
                        if let Some(mac) = &m.mac {
                            prop_assert!(mac.len() == 6 && mac[0] & 1 == 0);
                        }
                    }
                    ModeConf::Ipoib(i) => {
                        if let Some(p) = i.pkey {
                            prop_assert!(p != 0 && p != 0x8000);
                        }
                    }
                    // The other modes have no settings with a range to hold.
                    _ => {}
                }
            }
            Err(e) => check_rejection(&e, &[2, 6, 7])?,
        }
        match select::device_plugin_id(&conf) {
            Ok(id) => {
                if let Err(e) = select::device_selector(&conf, id.as_ref()) {
                    check_rejection(&e, &[2, 6, 7])?;
                }
                if let Err(e) = select::parent_selectors(&conf, id.as_ref()) {
                    check_rejection(&e, &[2, 6, 7])?;
                }
            }
            Err(e) => check_rejection(&e, &[2, 6, 7])?,
        }
        steps_hold(&conf)?;
    }

    /// The device-info file as Multus or a device plugin may have left it: refused with code
    /// 6, or read into a map that writes back to itself (unknown keys kept).
    #[test]
    fn devinfo_read_never_panics(
        bytes in prop_oneof![4 => fuzz::mutated_json(Just(devinfo_doc())), 1 => fuzz::bytes()],
    ) {
        let dir = TempDir::devinfo("fuzz");
        let path = dir.path().join("info");
        fs::write(&path, &bytes).unwrap();
        match device_info::read(&path) {
            Ok(Some(info)) => {
                let again: DeviceInfo =
                    serde_json::from_value(serde_json::to_value(&info).unwrap()).unwrap();
                prop_assert_eq!(&again, &info);
                let ours = DeviceInfo::pci(device_info::PciDevice::new("0000:3b:00.2"));
                let _ = ours.merged_over(Some(&info));
            }
            Ok(None) => prop_assert!(false, "the file exists"),
            Err(e) => check_rejection(&e, &[6])?,
        }
    }

    /// A device-info path from the conf: refused with code 7, or absolute without `..` and in
    /// the device-info directory.
    #[test]
    fn devinfo_path_check(
        path in prop_oneof![
            1 => fuzz::text(),
            1 => fuzz::text().prop_map(|t| format!("{}/{t}", device_info::DIR)),
            1 => fuzz::text().prop_map(|t| format!("/run/k8s.cni.cncf.io/devinfo/{t}")),
        ],
    ) {
        match device_info::check_path(Path::new(&path)) {
            Ok(p) => {
                prop_assert!(p.is_absolute());
                prop_assert!(!p.components().any(|c| c == std::path::Component::ParentDir));
                prop_assert!(
                    p.starts_with(device_info::DIR)
                        || p.starts_with("/run/k8s.cni.cncf.io/devinfo"),
                    "{}", p.display()
                );
            }
            Err(e) => check_rejection(&e, &[7])?,
        }
    }
}

proptest! {
    // Each case rewrites a record file; fewer cases keep the suite quick.
    #![proptest_config(fuzz::config(500))]

    /// An attachment record, torn, edited or corrupt: DEL's reader refuses it with code 106
    /// (naming the file and what to do), or reads a record that encodes back to itself.
    #[test]
    fn record_read_never_panics(bytes in prop_oneof![6 => record_bytes(), 1 => fuzz::bytes()]) {
        let dir = TempDir::new("fuzz-record");
        // A private dir, as the store would narrow it to (with a warning per case).
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
        let store = Store::new(dir.path());
        let valid: Attachment = serde_json::from_value(record_doc()).unwrap();
        store.save(&valid).unwrap();
        let path = record_path(dir.path());
        fs::write(&path, &bytes).unwrap();
        match store.load("rdma-net", "abc123", "net1") {
            Ok(Some(att)) => {
                let again: Attachment =
                    serde_json::from_value(serde_json::to_value(&att).unwrap()).unwrap();
                prop_assert_eq!(again, att);
            }
            Ok(None) => prop_assert!(false, "the record exists"),
            Err(e) => {
                check_rejection(&e, &[106])?;
                prop_assert!(e.to_string().contains(&path.display().to_string()), "{}", e);
            }
        }
        let (_, errors) = store.list("rdma-net").unwrap();
        for e in &errors {
            check_rejection(e, &[106])?;
        }
    }
}

/// The one record file under `data_dir`.
fn record_path(data_dir: &Path) -> std::path::PathBuf {
    let mut found = Vec::new();
    let mut stack = vec![data_dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                found.push(p);
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    found.pop().unwrap()
}

/// The steps' own fields of a decoded conf: refused with 6 or 7, or accepted within their
/// documented ranges.
fn steps_hold(conf: &NetConf) -> Result<(), TestCaseError> {
    match permissions::from_conf(conf) {
        Ok(Some(p)) => {
            for mode in [p.uverbs, p.umad, p.issm, p.rdma_cm].into_iter().flatten() {
                prop_assert!(mode <= 0o777);
            }
        }
        Ok(None) => {}
        Err(e) => check_rejection(&e, &[6, 7])?,
    }
    match device_info::path_from_conf(conf) {
        Ok(Some(p)) => prop_assert!(p.is_absolute()),
        Ok(None) => {}
        Err(e) => check_rejection(&e, &[6, 7])?,
    }
    match crate::attach::qos::from_conf(conf) {
        Ok(Some(q)) => {
            prop_assert!(q.dscp <= 63 && q.priority <= 7);
            prop_assert!(q.fifo_dscp.map_or(true, |d| d <= 63));
            let alias = q.to_alias();
            prop_assert_eq!(crate::qos::RoceQos::from_alias(&alias), Ok(Some(q)));
        }
        Ok(None) => {}
        Err(e) => check_rejection(&e, &[6, 7])?,
    }
    match rail::from_conf(conf) {
        Ok(Some(r)) => {
            prop_assert!((1..32766).contains(&r.priority));
            prop_assert!(r
                .table
                .map_or(true, |t| t != 0 && !(252..=255).contains(&t)));
            prop_assert!(matches!(r.arp_ignore, 0..=3 | 8));
            prop_assert!(r.arp_announce <= 2 && r.rp_filter <= 2);
        }
        Ok(None) => {}
        Err(e) => check_rejection(&e, &[6, 7])?,
    }
    Ok(())
}

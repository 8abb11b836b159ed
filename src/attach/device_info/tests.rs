use std::fs;
use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::*;
use crate::kernel::topology::fixtures::SysfsFixture;
use crate::testutil::TempDir;

fn fixture() -> SysfsFixture {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_roce_pf_with_vfs().unwrap();
    fx.mlx5_sf().unwrap();
    fx
}

fn to_json(info: &DeviceInfo) -> serde_json::Value {
    serde_json::to_value(info).unwrap()
}

// ---- from sysfs ----

#[test]
fn a_vf_names_its_rdma_device_and_its_pf() {
    let fx = fixture();
    let info = for_pci(&RdmaSysfs::new(fx.root()), "0000:3b:00.2").unwrap();
    assert_eq!(
        to_json(&info),
        json!({"type": "pci", "version": "1.1.0",
               "pci": {"pci-address": "0000:3b:00.2", "rdma-device": "mlx5_2",
                       "pf-pci-address": "0000:3b:00.0"}})
    );
}

#[test]
fn absent_fields_are_left_out() {
    let fx = fixture();
    let rdma = RdmaSysfs::new(fx.root());
    // The PF has no physfn.
    assert_eq!(
        to_json(&for_pci(&rdma, "0000:3b:00.0").unwrap()),
        json!({"type": "pci", "version": "1.1.0",
               "pci": {"pci-address": "0000:3b:00.0", "rdma-device": "mlx5_0"}})
    );
    // A VF bound to vfio-pci has no ib device.
    assert_eq!(
        to_json(&for_pci(&rdma, "0000:3b:00.3").unwrap()),
        json!({"type": "pci", "version": "1.1.0",
               "pci": {"pci-address": "0000:3b:00.3", "pf-pci-address": "0000:3b:00.0"}})
    );
}

#[test]
fn several_rdma_devices_are_joined_with_commas() {
    let fx = fixture();
    fs::create_dir_all(
        fx.path()
            .join("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.2/infiniband/mlx5_9"),
    )
    .unwrap();
    let info = for_pci(&RdmaSysfs::new(fx.root()), "0000:3b:00.2").unwrap();
    assert_eq!(
        info.pci.unwrap().rdma_device.as_deref(),
        Some("mlx5_2,mlx5_9")
    );
}

#[test]
fn an_unknown_pci_function_is_code_100() {
    let fx = fixture();
    let err = for_pci(&RdmaSysfs::new(fx.root()), "0000:99:00.0").unwrap_err();
    assert_eq!(err.code(), 100, "{err}");
    assert!(err.to_string().contains("0000:99:00.0"), "{err}");
}

#[test]
fn an_sf_gets_no_device_info_and_its_pf_does_not_claim_its_rdma_device() {
    let fx = fixture();
    let rdma = RdmaSysfs::new(fx.root());
    let sf = rdma.netdev("enp6s0f0s88").unwrap().unwrap();
    let parent = sf.device.expect("the SF netdev has a parent device");
    assert!(matches!(parent, BusDevice::Auxiliary { .. }), "{parent:?}");
    assert_eq!(for_bus_device(&rdma, &parent).unwrap(), None);
    // The SF's ib device mlx5_3 hangs under the aux device, not under the PF.
    let pf = for_pci(&rdma, "0000:06:00.0").unwrap();
    assert_eq!(pf.pci.unwrap().rdma_device, None);
    // A VF's netdev goes through the PCI path.
    let vf = rdma.netdev("ens1f0v0").unwrap().unwrap().device.unwrap();
    let info = for_bus_device(&rdma, &vf).unwrap().unwrap();
    assert_eq!(
        info.pci.unwrap().pci_address.as_deref(),
        Some("0000:3b:00.2")
    );
}

// ---- the file ----

#[test]
fn write_creates_a_private_dir_and_a_complete_file_then_replaces_it() {
    let tmp = TempDir::devinfo("write");
    let dir = tmp.path().join("sub/cni");
    let path = dir.join("abc-net1");
    let mut pci = PciDevice::new("0000:3b:00.2");
    pci.rdma_device = Some("mlx5_2".into());
    let info = DeviceInfo::pci(pci);
    write(&path, &info).unwrap();
    for d in [tmp.path().join("sub"), dir.clone()] {
        let mode = fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o444
    );
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        json!({"type": "pci", "version": "1.1.0",
               "pci": {"pci-address": "0000:3b:00.2", "rdma-device": "mlx5_2"}})
    );
    assert_eq!(read(&path).unwrap(), Some(info.clone()));

    // Replacing keeps no temp file and no stale content.
    let other = DeviceInfo::pci(PciDevice::new("0000:3b:00.3"));
    write(&path, &other).unwrap();
    assert_eq!(read(&path).unwrap(), Some(other));
    let names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["abc-net1".to_string()]);
}

#[test]
fn a_symlink_at_the_path_is_replaced_not_followed() {
    let outside = TempDir::new("devinfo-victim");
    let victim = outside.path().join("victim");
    fs::write(&victim, br#"{"type":"pci","version":"1.1.0"}"#).unwrap();
    let tmp = TempDir::devinfo("symlink");
    let path = tmp.path().join("net1");
    std::os::unix::fs::symlink(&victim, &path).unwrap();
    let err = read(&path).unwrap_err();
    assert_eq!(err.code(), 7, "not read through: {err}");
    assert!(err.to_string().contains("symlink"), "{err}");
    write(&path, &DeviceInfo::pci(PciDevice::new("0000:3b:00.2"))).unwrap();
    assert_eq!(
        fs::read(&victim).unwrap(),
        br#"{"type":"pci","version":"1.1.0"}"#
    );
    assert!(!fs::symlink_metadata(&path)
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn a_symlinked_directory_below_the_devinfo_dir_is_refused() {
    let outside = TempDir::new("devinfo-elsewhere");
    let tmp = TempDir::devinfo("linked-dir");
    std::os::unix::fs::symlink(outside.path(), tmp.path().join("cni")).unwrap();
    let path = tmp.path().join("cni/net1");
    let info = DeviceInfo::pci(PciDevice::new("0000:3b:00.2"));
    for err in [
        write(&path, &info).unwrap_err(),
        read(&path).unwrap_err(),
        remove(&path).unwrap_err(),
    ] {
        assert_eq!(err.code(), 7, "{err}");
        assert!(err.to_string().contains("is a symlink"), "{err}");
    }
    assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
    // The same path through a real directory is written.
    fs::remove_file(tmp.path().join("cni")).unwrap();
    write(&path, &info).unwrap();
    assert_eq!(read(&path).unwrap(), Some(info));
}

#[test]
fn remove_is_fine_when_absent() {
    let tmp = TempDir::devinfo("remove");
    let path = tmp.path().join("net1");
    remove(&path).unwrap();
    write(&path, &DeviceInfo::pci(PciDevice::new("0000:3b:00.2"))).unwrap();
    remove(&path).unwrap();
    assert!(!path.exists());
    remove(&path).unwrap();
    assert_eq!(read(&path).unwrap(), None);
}

#[test]
fn remove_takes_the_temp_file_of_a_killed_write_along() {
    let tmp = TempDir::devinfo("remove-temp");
    let path = tmp.path().join("net1");
    let killed = tmp.path().join(".net1.tmp-1");
    let writing = tmp.path().join(".net1.tmp-2");
    for f in [&killed, &writing] {
        fs::write(f, b"{").unwrap();
    }
    // A writer at work holds its temp file's lock.
    let writer = fs::File::open(&writing).unwrap();
    assert!(crate::records::lock_file::try_lock(&writer).unwrap());
    remove(&path).unwrap();
    assert!(!killed.exists(), "a killed write's temp file goes");
    assert!(writing.exists(), "a running write's stays");
}

/// Writing and removing at `bad` are both code 7, and the message names the field.
fn assert_refused(bad: &str, info: &DeviceInfo) {
    let err = write(Path::new(bad), info).unwrap_err();
    assert_eq!(err.code(), 7, "{bad}: {err}");
    assert!(
        err.to_string().contains("runtimeConfig.CNIDeviceInfoFile"),
        "{err}"
    );
    assert_eq!(remove(Path::new(bad)).unwrap_err().code(), 7, "{bad}");
}

#[test]
fn bad_paths_are_code_7_and_nothing_is_written() {
    let tmp = TempDir::devinfo("paths");
    let info = DeviceInfo::pci(PciDevice::new("0000:3b:00.2"));
    let escaping = format!("{}/a/../b", tmp.path().display());
    let trailing = format!("{}/dir/", tmp.path().display());
    for bad in ["relative/file", "file", &escaping, &trailing, "/"] {
        assert_refused(bad, &info);
    }
    assert!(!tmp.path().join("a").exists());
    assert!(!tmp.path().join("b").exists());
    assert!(!tmp.path().join("dir").exists());
}

#[test]
fn only_the_devinfo_directory_holds_device_info_files() {
    let info = DeviceInfo::pci(PciDevice::new("0000:3b:00.2"));
    let outside = TempDir::new("devinfo-outside");
    let elsewhere = outside.path().join("net1");
    for bad in [
        elsewhere.to_str().unwrap(),
        "/etc/cni/net.d/00-rdma.conflist",
        "/var/run/k8s.cni.cncf.io/devinfo",
        "/var/run/k8s.cni.cncf.io/devinfo2/cni/net1",
        "/var/run/k8s.cni.cncf.io/net1",
        "/run/k8s.cni.cncf.io/devinfo-x",
        "/var/run/k8s.cni.cncf.io/devinfo/../devinfo2/net1",
    ] {
        assert_refused(bad, &info);
        assert_eq!(read(Path::new(bad)).unwrap_err().code(), 7, "{bad}");
    }
    let err = check_path(&elsewhere).unwrap_err();
    assert!(err.to_string().contains(DIR), "names the directory: {err}");
    assert!(!elsewhere.exists());

    // /run is /var/run: the same directory by either name.
    let tmp = TempDir::devinfo("run");
    let name = tmp.path().file_name().unwrap().to_str().unwrap();
    for dir in [DIR, "/run/k8s.cni.cncf.io/devinfo"] {
        let path = Path::new(dir).join(name).join("cni/net1");
        write(&path, &info).unwrap();
        assert_eq!(
            read(&path).unwrap(),
            Some(info.clone()),
            "{}",
            path.display()
        );
        remove(&path).unwrap();
    }
    for ok in [
        "/var/run/k8s.cni.cncf.io/devinfo/cni/abc-net1",
        "/run/k8s.cni.cncf.io/devinfo/cni/abc-net1",
        "/var/run/k8s.cni.cncf.io/devinfo/dp/x",
    ] {
        assert!(check_path(Path::new(ok)).is_ok(), "{ok}");
    }
}

#[test]
fn the_path_comes_from_runtime_config() {
    use crate::cni::{Command, NetConf};
    let conf = |rc: &str| {
        NetConf::parse(
            format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"rdma-ns","runtimeConfig":{rc}}}"#)
                .as_bytes(),
            Command::Add,
        )
        .unwrap()
    };
    assert_eq!(
        path_from_conf(&conf(
            r#"{"CNIDeviceInfoFile":"/var/run/k8s.cni.cncf.io/devinfo/cni/x-net1"}"#
        ))
        .unwrap(),
        Some(PathBuf::from("/var/run/k8s.cni.cncf.io/devinfo/cni/x-net1"))
    );
    assert_eq!(path_from_conf(&conf("{}")).unwrap(), None);
    assert_eq!(
        path_from_conf(&conf(r#"{"CNIDeviceInfoFile":""}"#)).unwrap(),
        None
    );
    let err = path_from_conf(&conf(r#"{"CNIDeviceInfoFile":"devinfo/x"}"#)).unwrap_err();
    assert_eq!(err.code(), 7);
}

#[test]
fn a_corrupt_file_is_code_6_naming_it() {
    let tmp = TempDir::devinfo("corrupt");
    let path = tmp.path().join("net1");
    fs::write(&path, b"{not json").unwrap();
    let err = read(&path).unwrap_err();
    assert_eq!(err.code(), 6, "{err}");
    assert!(err.to_string().contains("net1"), "{err}");
}

// ---- updating a device plugin's file ----

#[test]
fn an_existing_file_for_the_same_function_keeps_what_this_plugin_does_not_know() {
    let tmp = TempDir::devinfo("merge");
    let path = tmp.path().join("net1");
    // As Multus copies it from a device plugin's file.
    fs::write(
        &path,
        json!({"type": "pci", "version": "1.0.0",
               "pci": {"pci-address": "0000:3b:00.2", "representor-device": "eth3",
                       "rdma-device": "stale", "x-vendor": 1}})
        .to_string(),
    )
    .unwrap();
    let existing = read(&path).unwrap().unwrap();
    let fx = fixture();
    let ours = for_pci(&RdmaSysfs::new(fx.root()), "0000:3b:00.2").unwrap();
    let merged = ours.merged_over(Some(&existing));
    assert_eq!(
        to_json(&merged),
        json!({"type": "pci", "version": "1.1.0",
               "pci": {"pci-address": "0000:3b:00.2", "rdma-device": "mlx5_2",
                       "pf-pci-address": "0000:3b:00.0", "representor-device": "eth3",
                       "x-vendor": 1}})
    );
    // Written back, read again: nothing lost.
    write(&path, &merged).unwrap();
    assert_eq!(read(&path).unwrap(), Some(merged));
}

#[test]
fn an_existing_file_for_another_device_or_type_is_replaced() {
    let fx = fixture();
    let ours = for_pci(&RdmaSysfs::new(fx.root()), "0000:3b:00.2").unwrap();
    let other_fn: DeviceInfo = serde_json::from_value(json!({"type": "pci", "version": "1.1.0",
        "pci": {"pci-address": "0000:3b:00.3", "representor-device": "eth9"}}))
    .unwrap();
    assert_eq!(ours.clone().merged_over(Some(&other_fn)), ours);
    let vdpa: DeviceInfo = serde_json::from_value(json!({"type": "vdpa", "version": "1.1.0",
        "vdpa": {"parent-device": "vdpa3", "driver": "vhost", "path": "/dev/vhost-vdpa0"}}))
    .unwrap();
    // Other types round-trip through `extra`.
    assert_eq!(to_json(&vdpa)["vdpa"]["parent-device"], json!("vdpa3"));
    assert_eq!(ours.clone().merged_over(Some(&vdpa)), ours);
    assert_eq!(ours.clone().merged_over(None), ours);
}

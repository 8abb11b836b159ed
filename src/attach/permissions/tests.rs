//! Run as root (CI does): they mknod char devices and chown them in temp dirs.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use serde_json::json;

use super::*;
use crate::kernel::topology::fixtures::SysfsFixture;
use crate::testutil::TempDir;

/// A char device node `major:minor` with exactly `mode` (mknod's mode passes the umask).
fn node(dir: &Path, name: &str, major: u64, minor: u64, mode: u32) {
    let p = dir.join(name);
    mknod(&p, SFlag::S_IFCHR, Mode::empty(), makedev(major, minor))
        .unwrap_or_else(|e| panic!("mknod {} (tests need root): {e}", p.display()));
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
}

fn mode_of(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn gid_of(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().gid()
}

fn perms(v: serde_json::Value) -> DevicePermissions {
    parse(&v).unwrap()
}

/// The nodes the mlx5 RoCE preset lists for `mlx5_2` (uverbs1 231:193, umad1 231:1, issm1
/// 231:65) and `mlx5_0` (uverbs0 231:192, ...), plus rdma_cm 10:124, all 0600 root:root.
fn dev_dir_like_the_fixture(dir: &Path) {
    for (name, major, minor) in [
        ("uverbs0", 231, 192),
        ("umad0", 231, 0),
        ("issm0", 231, 64),
        ("uverbs1", 231, 193),
        ("umad1", 231, 1),
        ("issm1", 231, 65),
        ("rdma_cm", 10, 124),
    ] {
        node(dir, name, major, minor, 0o600);
    }
}

fn devs_of(fx: &SysfsFixture, ibdevs: &[&str], p: &DevicePermissions) -> Vec<CharDev> {
    char_devs_for(&RdmaSysfs::new(fx.root()), ibdevs, p).unwrap()
}

// ---- parse ----

#[test]
fn parses_every_key_with_a_group_name_or_gid() {
    let p = perms(
        json!({"uverbs": "0666", "umad": "0660", "issm": "600", "rdma_cm": "0666",
                         "group": "daemon"}),
    );
    assert_eq!(
        p,
        DevicePermissions {
            uverbs: Some(0o666),
            umad: Some(0o660),
            issm: Some(0o600),
            rdma_cm: Some(0o666),
            group: Some(1),
        }
    );
    assert_eq!(
        perms(json!({"uverbs": "0", "group": "4242"})).group,
        Some(4242)
    );
    assert_eq!(
        perms(json!({"uverbs": "0660", "group": 77})).group,
        Some(77)
    );
    let only_cm = perms(json!({"rdma_cm": "0666"}));
    assert_eq!(only_cm.mode_for(CharDevKind::RdmaCm), Some(0o666));
    assert_eq!(only_cm.mode_for(CharDevKind::Uverbs), None);
    assert!(perms(json!({})).is_empty());
    assert!(!only_cm.is_empty());
}

#[test]
fn parse_errors_name_the_key_with_code_7() {
    let cases = [
        (
            json!({"uverbs": "0666", "ucm": "0666"}),
            "devicePermissions.ucm",
            "unknown key",
        ),
        (
            json!({"uverbs": "0888"}),
            "devicePermissions.uverbs",
            "not an octal mode",
        ),
        (
            json!({"uverbs": ""}),
            "devicePermissions.uverbs",
            "not an octal mode",
        ),
        (
            json!({"uverbs": "0o666"}),
            "devicePermissions.uverbs",
            "not an octal mode",
        ),
        (json!({"umad": "4755"}), "devicePermissions.umad", "setuid"),
        (json!({"umad": "1777"}), "devicePermissions.umad", "sticky"),
        (
            json!({"issm": "17777"}),
            "devicePermissions.issm",
            "out of range",
        ),
        (
            json!({"uverbs": 666}),
            "devicePermissions.uverbs",
            "octal string",
        ),
        (
            json!({"uverbs": "0666", "group": "no-such-group-rdma-ns"}),
            "devicePermissions.group",
            "no group named",
        ),
        (
            json!({"uverbs": "0666", "group": ""}),
            "devicePermissions.group",
            "group name or a gid",
        ),
        (
            json!({"uverbs": "0666", "group": 4294967295u64}),
            "devicePermissions.group",
            "not a usable gid",
        ),
        (
            json!({"uverbs": "0666", "group": -1}),
            "devicePermissions.group",
            "not a gid",
        ),
        (
            json!({"group": "daemon"}),
            "devicePermissions.group",
            "at least one",
        ),
        (json!("0666"), "devicePermissions", "must be an object"),
    ];
    for (value, field, why) in cases {
        let err = parse(&value).unwrap_err();
        assert_eq!(err.code(), 7, "{value}: {err}");
        let text = err.to_string();
        assert!(text.contains(&format!("`{field}`")), "{value}: {text}");
        assert!(text.contains(why), "{value}: expected {why:?} in {text}");
    }
}

#[test]
fn from_conf_reads_the_field_and_treats_null_as_absent() {
    use crate::cni::{Command, NetConf};
    let conf = |extra: &str| {
        NetConf::parse(
            format!(r#"{{"cniVersion":"1.0.0","name":"n","type":"rdma-ns"{extra}}}"#).as_bytes(),
            Command::Add,
        )
        .unwrap()
    };
    assert_eq!(from_conf(&conf("")).unwrap(), None);
    assert_eq!(
        from_conf(&conf(r#","devicePermissions":null"#)).unwrap(),
        None
    );
    let p = from_conf(&conf(r#","devicePermissions":{"uverbs":"0660"}"#))
        .unwrap()
        .unwrap();
    assert_eq!(p.uverbs, Some(0o660));
    let err = from_conf(&conf(r#","devicePermissions":{"verbs":"0660"}"#)).unwrap_err();
    assert_eq!(err.code(), 7);
}

// ---- which char devices ----

#[test]
fn char_devs_are_those_of_the_pods_ib_device_plus_rdma_cm() {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_roce_pf_with_vfs().unwrap();
    let p = perms(json!({"uverbs": "0666", "umad": "0660", "rdma_cm": "0666"}));
    let devs = devs_of(&fx, &["mlx5_2"], &p);
    let names: Vec<(&str, u32, u32)> = devs
        .iter()
        .map(|d| (d.name.as_str(), d.major, d.minor))
        .collect();
    // mlx5_2 has uverbs1/umad1 (numbers differ from the ib device's), no issm (no mode).
    assert_eq!(
        names,
        vec![
            ("uverbs1", 231, 193),
            ("umad1", 231, 1),
            ("rdma_cm", 10, 124)
        ]
    );
    let only_uverbs = devs_of(
        &fx,
        &["mlx5_2", "mlx5_2"],
        &perms(json!({"uverbs": "0666"})),
    );
    assert_eq!(only_uverbs.len(), 1, "{only_uverbs:?}");
}

#[test]
fn a_kind_missing_from_sysfs_names_the_module_to_load() {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_roce_pf_with_vfs().unwrap();
    let rdma = RdmaSysfs::new(fx.root());
    fx.remove("class/infiniband_mad/umad1").unwrap();
    let err = char_devs_for(&rdma, &["mlx5_2"], &perms(json!({"umad": "0660"}))).unwrap_err();
    assert_eq!(err.code(), 111, "{err}");
    assert!(err.to_string().contains("modprobe ib_umad"), "{err}");
    assert!(err.to_string().contains("mlx5_2"), "{err}");
    fx.remove("class/infiniband_verbs/uverbs1").unwrap();
    let err = char_devs_for(&rdma, &["mlx5_2"], &perms(json!({"uverbs": "0660"}))).unwrap_err();
    assert!(err.to_string().contains("modprobe ib_uverbs"), "{err}");
    fx.remove("class/misc/rdma_cm").unwrap();
    let err = char_devs_for(&rdma, &["mlx5_2"], &perms(json!({"rdma_cm": "0666"}))).unwrap_err();
    assert!(err.to_string().contains("modprobe rdma_ucm"), "{err}");
    // Kinds without a mode are not required.
    let issm = char_devs_for(&rdma, &["mlx5_2"], &perms(json!({"issm": "0600"}))).unwrap();
    assert_eq!(issm.len(), 1);
}

// ---- plan and apply ----

#[test]
fn applies_mode_and_group_to_exactly_the_matching_nodes() {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_roce_pf_with_vfs().unwrap();
    let tmp = TempDir::new("devperm-apply");
    let dir = tmp.path();
    dev_dir_like_the_fixture(dir);
    let p = perms(
        json!({"uverbs": "0666", "umad": "0660", "issm": "0640", "rdma_cm": "0666",
                         "group": "4242"}),
    );
    let changes = plan(dir, &devs_of(&fx, &["mlx5_2"], &p), &p, &[]).unwrap();
    // Planning changes nothing.
    assert_eq!(mode_of(&dir.join("uverbs1")), 0o600);
    assert_eq!(changes.len(), 4);
    assert_eq!(
        changes[0],
        PermChange {
            path: dir.join("uverbs1"),
            rdev: (231, 193),
            old_mode: 0o600,
            old_gid: 0,
            new_mode: 0o666,
            new_gid: 4242,
        }
    );
    apply(&changes).unwrap();
    for (name, mode) in [
        ("uverbs1", 0o666),
        ("umad1", 0o660),
        ("issm1", 0o640),
        ("rdma_cm", 0o666),
    ] {
        assert_eq!(mode_of(&dir.join(name)), mode, "{name}");
        assert_eq!(gid_of(&dir.join(name)), 4242, "{name}");
    }
    // mlx5_0's nodes are not the pod's.
    for name in ["uverbs0", "umad0", "issm0"] {
        assert_eq!(mode_of(&dir.join(name)), 0o600, "{name}");
        assert_eq!(gid_of(&dir.join(name)), 0, "{name}");
    }
    restore(&changes, |_| false).unwrap();
    for name in ["uverbs1", "umad1", "issm1", "rdma_cm"] {
        assert_eq!(mode_of(&dir.join(name)), 0o600, "{name}");
        assert_eq!(gid_of(&dir.join(name)), 0, "{name}");
    }
}

#[test]
fn without_a_group_the_group_stays() {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_roce_pf_with_vfs().unwrap();
    let tmp = TempDir::new("devperm-nogroup");
    let dir = tmp.path();
    dev_dir_like_the_fixture(dir);
    std::os::unix::fs::chown(dir.join("uverbs1"), None, Some(55)).unwrap();
    let p = perms(json!({"uverbs": "0660"}));
    let changes = plan(dir, &devs_of(&fx, &["mlx5_2"], &p), &p, &[]).unwrap();
    assert_eq!((changes[0].old_gid, changes[0].new_gid), (55, 55));
    apply(&changes).unwrap();
    assert_eq!(
        (mode_of(&dir.join("uverbs1")), gid_of(&dir.join("uverbs1"))),
        (0o660, 55)
    );
}

#[test]
fn a_node_with_another_device_number_is_refused_and_nothing_changes() {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_roce_pf_with_vfs().unwrap();
    let tmp = TempDir::new("devperm-rdev");
    let dir = tmp.path();
    dev_dir_like_the_fixture(dir);
    fs::remove_file(dir.join("umad1")).unwrap();
    node(dir, "umad1", 231, 7, 0o600);
    let p = perms(json!({"uverbs": "0666", "umad": "0666"}));
    let err = plan(dir, &devs_of(&fx, &["mlx5_2"], &p), &p, &[]).unwrap_err();
    assert_eq!(err.code(), 111, "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&dir.join("umad1").display().to_string()),
        "{text}"
    );
    assert!(text.contains("char device 231:7"), "{text}");
    assert!(text.contains("231:1"), "{text}");
    assert_eq!(mode_of(&dir.join("uverbs1")), 0o600);
    assert_eq!(mode_of(&dir.join("umad1")), 0o600);
}

#[test]
fn a_symlink_named_like_the_device_is_refused_and_its_target_untouched() {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_roce_pf_with_vfs().unwrap();
    let tmp = TempDir::new("devperm-symlink");
    let dir = tmp.path();
    dev_dir_like_the_fixture(dir);
    let target = dir.join("precious");
    fs::write(&target, b"x").unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o600)).unwrap();
    fs::remove_file(dir.join("uverbs1")).unwrap();
    std::os::unix::fs::symlink(&target, dir.join("uverbs1")).unwrap();
    let p = perms(json!({"uverbs": "0666", "group": "4242"}));
    let devs = devs_of(&fx, &["mlx5_2"], &p);
    let err = plan(dir, &devs, &p, &[]).unwrap_err();
    assert_eq!(err.code(), 111, "{err}");
    assert!(err.to_string().contains("is a symlink"), "{err}");
    // Also when the symlink appears between plan and apply.
    fs::remove_file(dir.join("uverbs1")).unwrap();
    node(dir, "uverbs1", 231, 193, 0o600);
    let changes = plan(dir, &devs, &p, &[]).unwrap();
    fs::remove_file(dir.join("uverbs1")).unwrap();
    std::os::unix::fs::symlink(&target, dir.join("uverbs1")).unwrap();
    let err = apply(&changes).unwrap_err();
    assert!(err.to_string().contains("now a symlink"), "{err}");
    assert_eq!(mode_of(&target), 0o600);
    assert_eq!(gid_of(&target), 0);
    // And restore leaves it alone too.
    restore(&changes, |_| false).unwrap();
    assert_eq!(mode_of(&target), 0o600);
}

#[test]
fn a_regular_file_or_directory_named_like_the_device_is_refused() {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_roce_pf_with_vfs().unwrap();
    let tmp = TempDir::new("devperm-file");
    let dir = tmp.path();
    dev_dir_like_the_fixture(dir);
    fs::remove_file(dir.join("rdma_cm")).unwrap();
    fs::write(dir.join("rdma_cm"), b"").unwrap();
    let p = perms(json!({"rdma_cm": "0666"}));
    let devs = devs_of(&fx, &["mlx5_2"], &p);
    let err = plan(dir, &devs, &p, &[]).unwrap_err();
    assert!(err.to_string().contains("is a regular file"), "{err}");
    fs::remove_file(dir.join("rdma_cm")).unwrap();
    fs::create_dir(dir.join("rdma_cm")).unwrap();
    let err = plan(dir, &devs, &p, &[]).unwrap_err();
    assert!(err.to_string().contains("is a directory"), "{err}");
}

#[test]
fn a_missing_node_names_the_module() {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_roce_pf_with_vfs().unwrap();
    let tmp = TempDir::new("devperm-missing");
    let dir = tmp.path();
    dev_dir_like_the_fixture(dir);
    for (name, key, module) in [
        ("uverbs1", "uverbs", "ib_uverbs"),
        ("umad1", "umad", "ib_umad"),
        ("issm1", "issm", "ib_umad"),
        ("rdma_cm", "rdma_cm", "rdma_ucm"),
    ] {
        fs::remove_file(dir.join(name)).unwrap();
        let p = parse(&json!({ key: "0666" })).unwrap();
        let err = plan(dir, &devs_of(&fx, &["mlx5_2"], &p), &p, &[]).unwrap_err();
        assert_eq!(err.code(), 111, "{err}");
        let text = err.to_string();
        assert!(text.contains(&format!("modprobe {module}")), "{text}");
        assert!(
            text.contains(&dir.join(name).display().to_string()),
            "{text}"
        );
    }
}

// ---- restore and reference counting ----

#[test]
fn shared_nodes_are_restored_by_the_last_attachment_to_the_original() {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_roce_pf_with_vfs().unwrap();
    let tmp = TempDir::new("devperm-refcount");
    let dir = tmp.path();
    dev_dir_like_the_fixture(dir);
    let cm = dir.join("rdma_cm");

    // A: mlx5_2 (uverbs1) + rdma_cm.
    let pa = perms(json!({"uverbs": "0666", "rdma_cm": "0666", "group": "4242"}));
    let a = plan(dir, &devs_of(&fx, &["mlx5_2"], &pa), &pa, &[]).unwrap();
    apply(&a).unwrap();
    // B: mlx5_0 (uverbs0) + rdma_cm, planned while A is live.
    let pb = perms(json!({"uverbs": "0660", "rdma_cm": "0666", "group": "4242"}));
    let b = plan(dir, &devs_of(&fx, &["mlx5_0"], &pb), &pb, &a).unwrap();
    let b_cm = b.iter().find(|c| c.path == cm).unwrap();
    assert_eq!(
        (b_cm.old_mode, b_cm.old_gid),
        (0o600, 0),
        "the original, not A's mode"
    );
    apply(&b).unwrap();
    // C: a second pod on mlx5_2 (shared mode), planned while A and B are live.
    let others: Vec<PermChange> = a.iter().chain(&b).cloned().collect();
    let c = plan(dir, &devs_of(&fx, &["mlx5_2"], &pa), &pa, &others).unwrap();
    apply(&c).unwrap();

    // A goes: uverbs1 is still C's, rdma_cm still B's and C's.
    let others: Vec<PermChange> = b.iter().chain(&c).cloned().collect();
    restore(&a, used_by(&others)).unwrap();
    assert_eq!(mode_of(&dir.join("uverbs1")), 0o666);
    assert_eq!(mode_of(&cm), 0o666);
    // C goes: uverbs1 back to the original; rdma_cm still B's.
    restore(&c, used_by(&b)).unwrap();
    assert_eq!(mode_of(&dir.join("uverbs1")), 0o600);
    assert_eq!(gid_of(&dir.join("uverbs1")), 0);
    assert_eq!(mode_of(&cm), 0o666);
    assert_eq!(mode_of(&dir.join("uverbs0")), 0o660);
    // B goes last: everything is as before A.
    restore(&b, used_by(&[])).unwrap();
    for name in ["uverbs0", "uverbs1", "rdma_cm"] {
        assert_eq!(mode_of(&dir.join(name)), 0o600, "{name}");
        assert_eq!(gid_of(&dir.join(name)), 0, "{name}");
    }
}

#[test]
fn used_by_matches_path_and_device_number() {
    let change = |path: &str, rdev| PermChange {
        path: path.into(),
        rdev,
        old_mode: 0o600,
        old_gid: 0,
        new_mode: 0o666,
        new_gid: 0,
    };
    let others = [change("/dev/infiniband/rdma_cm", (10, 124))];
    let used = used_by(&others);
    assert!(used(&change("/dev/infiniband/rdma_cm", (10, 124))));
    assert!(!used(&change("/dev/infiniband/rdma_cm", (10, 58))));
    assert!(!used(&change("/dev/infiniband/uverbs0", (10, 124))));
}

#[test]
fn a_recreated_node_is_skipped_on_restore() {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_roce_pf_with_vfs().unwrap();
    let tmp = TempDir::new("devperm-recreated");
    let dir = tmp.path();
    dev_dir_like_the_fixture(dir);
    let p = perms(json!({"uverbs": "0666", "umad": "0666"}));
    let changes = plan(dir, &devs_of(&fx, &["mlx5_2"], &p), &p, &[]).unwrap();
    apply(&changes).unwrap();
    // uverbs1 re-created with another minor (device re-registered), umad1 gone.
    fs::remove_file(dir.join("uverbs1")).unwrap();
    node(dir, "uverbs1", 231, 199, 0o644);
    fs::remove_file(dir.join("umad1")).unwrap();
    restore(&changes, |_| false).unwrap();
    assert_eq!(mode_of(&dir.join("uverbs1")), 0o644);
}

#[test]
fn restore_with_nothing_to_do_succeeds_and_repeats() {
    let fx = SysfsFixture::new().unwrap();
    fx.mlx5_roce_pf_with_vfs().unwrap();
    let tmp = TempDir::new("devperm-repeat");
    let dir = tmp.path();
    dev_dir_like_the_fixture(dir);
    let p = perms(json!({"rdma_cm": "0666"}));
    let changes = plan(dir, &devs_of(&fx, &["mlx5_2"], &p), &p, &[]).unwrap();
    // Undo of an ADD that failed before apply: restoring is harmless.
    restore(&changes, |_| false).unwrap();
    apply(&changes).unwrap();
    restore(&changes, |_| false).unwrap();
    restore(&changes, |_| false).unwrap();
    assert_eq!(mode_of(&dir.join("rdma_cm")), 0o600);
}

#[test]
fn perm_changes_round_trip_in_camel_case() {
    let c = PermChange {
        path: "/dev/infiniband/uverbs1".into(),
        rdev: (231, 193),
        old_mode: 0o600,
        old_gid: 0,
        new_mode: 0o666,
        new_gid: 4242,
    };
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(
        v,
        json!({"path": "/dev/infiniband/uverbs1", "rdev": [231, 193], "oldMode": 384,
               "oldGid": 0, "newMode": 438, "newGid": 4242})
    );
    assert_eq!(serde_json::from_value::<PermChange>(v).unwrap(), c);
}

use super::*;

/// The plugins of the migrated conflist of `plugins`, and the warnings.
fn chain(plugins: Value) -> (Vec<Value>, Vec<String>) {
    let m = convert(json!({"cniVersion": "1.0.0", "name": "n", "plugins": plugins})).unwrap();
    let Value::Array(out) = m.conflist["plugins"].clone() else {
        panic!("{}", m.conflist)
    };
    (out, m.warnings)
}

/// Some warning holds all of `words`.
fn assert_mentions(warnings: &[String], words: &[&str]) {
    assert!(
        warnings.iter().any(|w| words.iter().all(|x| w.contains(x))),
        "no warning has {words:?}: {warnings:#?}"
    );
}

/// Go's decoder reads keys ignoring case, so a conf ipoib-cni ran with may spell them so;
/// migrate writes rdma-ns's spelling. A key the plugin has no field for is named, not carried.
#[test]
fn keys_are_read_as_the_peer_read_them() {
    let (out, warnings) = chain(json!([{
        "type": "ipoib", "Master": "ib0", "IPAM": {"type": "static"}, "vf": 0
    }]));
    assert_eq!(
        out,
        [
            json!({"type": "rdma-ns", "mode": "ipoib", "master": "ib0", "umcast": true,
                "ipam": {"type": "static"}})
        ]
    );
    assert_eq!(
        warnings,
        ["ipoib.vf: not carried: ipoib-cni has no such field and ignored it"]
    );
    let (out, warnings) = chain(json!([{"type": "ipoib", "MASTER": "ib1", "master": "ib0"}]));
    assert_eq!(out[0]["master"], "ib0");
    assert_mentions(
        &warnings,
        &["ipoib.MASTER: not carried", "another spelling"],
    );
}

#[test]
fn infiniband_with_master_is_ipoib_cni_of_its_first_releases() {
    let (out, warnings) = chain(json!([{"type": "infiniband", "master": "ib0", "mtu": 2044}]));
    assert_eq!(
        out,
        [
            json!({"type": "rdma-ns", "mode": "ipoib", "master": "ib0", "pkey": "0x7fff",
                "ipoibMode": "datagram", "umcast": true})
        ]
    );
    assert_mentions(
        &warnings,
        &["infiniband: read as ipoib-cni, first releases"],
    );
    assert_mentions(&warnings, &["infiniband.mtu: not carried", "never read"]);
}

/// ib-sriov-cni moves an IB VF's ib device before its IPoIB netdev when asked with
/// `rdmaIsolation`; no rdma-ns entry may follow it, so an rdma entry becomes that field.
#[test]
fn ib_sriov_isolates_the_ib_device_itself() {
    let vf = json!({"type": "ib-sriov", "deviceID": "0000:3b:00.2"});
    let isolated = json!({"type": "ib-sriov", "deviceID": "0000:3b:00.2", "rdmaIsolation": true});

    let (out, warnings) = chain(json!([vf, {"type": "rdma", "args": {"cni": {"debug": true}}}]));
    assert_eq!(out, std::slice::from_ref(&isolated));
    assert_mentions(
        &warnings,
        &[
            "rdma: dropped (with args)",
            "\"rdmaIsolation\": true written",
        ],
    );

    let (out, warnings) =
        chain(json!([{"type": "ib-sriov", "RdmaIsolation": false}, {"type": "rdma"}]));
    assert_eq!(out, [json!({"type": "ib-sriov", "rdmaIsolation": true})]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");

    let (out, warnings) = chain(json!([isolated, {"type": "rdma"}]));
    assert_eq!(out, std::slice::from_ref(&isolated));
    assert_mentions(&warnings, &["rdma: dropped", "a second move would fail"]);

    let (out, warnings) = chain(json!([isolated]));
    assert_eq!(out, std::slice::from_ref(&isolated));
    assert_mentions(&warnings, &["ib-sriov: kept as it is", "rdmaIsolation"]);

    let (out, warnings) = chain(json!([vf]));
    assert_eq!(out, std::slice::from_ref(&vf));
    assert_mentions(
        &warnings,
        &["ib-sriov: kept", "set \"rdmaIsolation\": true"],
    );

    let vfio = json!({"type": "ib-sriov", "vfioPciMode": true});
    let (out, warnings) = chain(json!([vfio, {"type": "rdma"}]));
    assert_eq!(out, std::slice::from_ref(&vfio));
    assert_mentions(&warnings, &["rdma: dropped", "vfioPciMode"]);
}

#[test]
fn an_rdma_entry_after_the_first_ib_sriov_or_an_ipoib_child_is_dropped() {
    let first = json!({"type": "infiniband", "deviceID": "0000:3b:00.2"});
    let (out, warnings) = chain(json!([first, {"type": "rdma"}]));
    assert_eq!(out, std::slice::from_ref(&first));
    assert_mentions(
        &warnings,
        &["infiniband: read as ib-sriov-cni, first releases"],
    );
    assert_mentions(&warnings, &["rdma: dropped", "type `ib-sriov`"]);

    let (out, warnings) = chain(json!([{"type": "ipoib", "master": "ib0"}, {"type": "rdma"}]));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_mentions(&warnings, &["rdma: dropped", "IPoIB child"]);
}

/// sriov-cni stays (it sets up the VF through the PF) and mode `rdma` follows it, right after
/// it, unless sriov-cni v1's `dpdk` binds the VF away from its RDMA driver.
#[test]
fn sriov_is_followed_by_mode_rdma_unless_its_vf_is_dpdk() {
    let sriov = json!({"type": "sriov", "deviceID": "0000:3b:00.2", "vlan": 7});
    let tuning = json!({"type": "tuning", "sysctl": {}});
    let (out, warnings) = chain(json!([sriov, tuning]));
    assert_eq!(
        out,
        [
            sriov.clone(),
            json!({"type": "rdma-ns", "mode": "rdma"}),
            tuning.clone()
        ]
    );
    assert_mentions(&warnings, &["sriov: no rdma plugin after it"]);

    let (out, _) =
        chain(json!([sriov, tuning, {"type": "rdma", "args": {"cni": {"debug": true}}}]));
    assert_eq!(
        out,
        [
            sriov.clone(),
            tuning.clone(),
            json!({"type": "rdma-ns", "mode": "rdma", "logLevel": "debug"})
        ]
    );

    let dpdk = json!({"type": "sriov", "dpdk": {"dpdk_driver": "igb_uio"}});
    let (out, warnings) = chain(json!([dpdk]));
    assert_eq!(out, std::slice::from_ref(&dpdk));
    assert_mentions(
        &warnings,
        &["sriov: kept; no rdma-ns entry after it", "DPDK"],
    );
    let (out, warnings) = chain(json!([dpdk, {"type": "rdma"}]));
    assert_eq!(out, std::slice::from_ref(&dpdk));
    assert_mentions(&warnings, &["rdma: dropped", "DPDK"]);
}

/// host-device then rdma-cni is move mode alone; rdma-cni's refusal outside exclusive netns
/// mode stays as `"rdma": "exclusive"`.
#[test]
fn rdma_after_host_device_folds_into_the_move_entry() {
    let (out, warnings) = chain(json!([
        {"type": "host-device", "device": "ens1f0v0", "ipam": {"type": "static"}},
        {"type": "rdma", "deviceID": "0000:3b:00.2", "args": {"cni": {"debug": true}}}
    ]));
    assert_eq!(
        out,
        [
            json!({"type": "rdma-ns", "mode": "move", "device": "ens1f0v0", "rdma": "exclusive",
                "logLevel": "debug", "ipam": {"type": "static"}})
        ]
    );
    assert_mentions(
        &warnings,
        &["rdma: folded into the move entry", "exclusive"],
    );
    assert_mentions(
        &warnings,
        &["rdma.deviceID: not carried: the move entry has its own"],
    );
}

#[test]
fn host_device_keeps_the_selector_it_used() {
    let (out, warnings) = chain(json!([{
        "type": "host-device", "pciBusID": "0000:3b:00.2", "hwaddr": "02:00:00:00:00:01"
    }]));
    assert_eq!(
        out,
        [json!({"type": "rdma-ns", "mode": "move", "hwaddr": "02:00:00:00:00:01"})]
    );
    assert_eq!(
        warnings,
        ["host-device.pciBusID: not carried: host-device used `hwaddr` and ignored it"]
    );
}

#[test]
fn rdma_alone_is_mode_rdma_with_a_warning() {
    let (out, warnings) = chain(json!([{"type": "rdma", "ipam": {"type": "static"}}]));
    assert_eq!(out, [json!({"type": "rdma-ns", "mode": "rdma"})]);
    assert_mentions(
        &warnings,
        &["rdma: no sriov, ib-sriov or host-device before it"],
    );
    assert_mentions(&warnings, &["rdma.ipam: not carried", "never ran IPAM"]);
}

#[test]
fn a_version_rdma_ns_does_not_speak_becomes_1_0_0() {
    let m = convert(json!({"cniVersion": "0.2.0", "name": "n", "type": "ipoib", "master": "ib0"}))
        .unwrap();
    assert_eq!(m.conflist["cniVersion"], "1.0.0");
    assert_mentions(
        &m.warnings,
        &["cniVersion: \"0.2.0\" is not a version rdma-ns speaks"],
    );
    let m = convert(json!({"cniVersion": "0.3.1", "type": "ipoib", "master": "ib0"})).unwrap();
    assert_eq!(m.conflist["cniVersion"], "0.3.1");
    assert_eq!(m.conflist["name"], "rdma-net");
}

#[test]
fn a_conf_with_nothing_to_migrate_is_refused() {
    let e = migrate("x", r#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#).unwrap_err();
    assert!(
        e.to_string()
            .contains("no plugin of type rdma, ipoib, infiniband, host-device, sriov, ib-sriov"),
        "{e}"
    );
    assert!(migrate("x", "[1]").is_err());
    assert!(migrate("x", r#"{"plugins": [1]}"#).is_err());
    assert!(migrate("x", r#"{"plugins": {}}"#).is_err());
    assert!(migrate("x", "not json, not yaml").is_err());
}

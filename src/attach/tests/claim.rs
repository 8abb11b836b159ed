//! The CNI's side of DRA (attach/claim.rs): the pod's prepared claim resolved to its device
//! (K8S_POD_UID, or Multus's DRA deviceID), the claim's attach settings applied over the conf,
//! the device selected through `draDevice`, and a pod without a prepared claim refused with
//! nothing changed.

use std::ffi::OsString;

use serde_json::json;

use crate::attach::claim::{
    resolve_add, AddFailure, ClaimRef, ClaimStore, PreparedClaim, PreparedDevice,
};
use crate::attach::modes::child::ChildState;
use crate::attach::select::{device_selector, parent_selectors, Selector};
use crate::attach::tests::kit::{one_address, TestHost, World};
use crate::cni::env::RawEnv;
use crate::cni::{Command, NetConf, Request};
use crate::kernel::fake::{Call, POD};
use crate::kernel::rtnetlink::Link;

fn parent(name: &str, index: u32) -> Link {
    Link {
        index,
        name: name.into(),
        mtu: 9000,
        hwaddr: vec![2, 0, 0, 0, 0, index as u8],
        up: true,
        link_type: 1,
        ..Default::default()
    }
}

fn device(request: &str, name: &str, netdev: &str, attach: serde_json::Value) -> PreparedDevice {
    PreparedDevice {
        request: request.into(),
        pool: "node-a".into(),
        device: name.into(),
        share_id: None,
        kind: "roce".into(),
        netdev: netdev.into(),
        ibdev: Some("mlx5_0".into()),
        port: Some(1),
        pci_address: None,
        lock_key: format!("mac-{netdev}"),
        cdi_device_ids: vec![format!("rdma-ns.io/rdma=uid-1-{name}")],
        attach: attach.as_object().unwrap().clone(),
        umad: false,
        rail: None,
        pods: Vec::new(),
    }
}

fn prepared(uid: &str, pods: &[&str], devices: Vec<PreparedDevice>) -> PreparedClaim {
    PreparedClaim {
        claim: ClaimRef {
            namespace: "team".into(),
            name: format!("claim-{uid}"),
            uid: uid.into(),
        },
        pod_uids: pods.iter().map(|p| p.to_string()).collect(),
        extended_resource: false,
        devices,
        allocation: String::new(),
        written_by: None,
    }
}

fn world(fields: &str) -> World {
    TestHost::new("rdma-dra", "c1")
        .links(vec![parent("ens1f0np0", 4), parent("ens2f0np0", 5)])
        .fields(fields)
        .ipam(one_address("10.9.0.5/24"))
        .build()
}

/// ADD of `w`'s conf as the runtime sends it, with CNI_ARGS `args`.
fn add_request(w: &World, args: &str) -> Request {
    let conf = w.conf(Command::Add);
    let vars: Vec<(OsString, OsString)> = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", POD),
        ("CNI_IFNAME", "net1"),
        ("CNI_PATH", "/nonexistent"),
        ("CNI_ARGS", args),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| (k.into(), v.into()))
    .collect();
    Request {
        env: RawEnv::from_vars(vars).validate(Command::Add).unwrap(),
        conf: NetConf::parse(conf.as_bytes(), Command::Add).unwrap(),
        stdin: conf.into_bytes(),
    }
}

fn claims_of(w: &World) -> ClaimStore {
    ClaimStore::new(w.store.dir())
}

/// The pod's claim found by K8S_POD_UID: its mode (macvlan, from the claim) replaces the conf's,
/// its netdev is the parent the child is made on, and the record's conf names the claim, which
/// is how the driver learns of the ADD.
#[test]
fn a_pods_claim_is_found_by_its_uid_and_attached_with_the_claims_mode() {
    let w = world(r#""dra":true"#);
    let claims = claims_of(&w);
    claims
        .save(&prepared(
            "uid-1",
            &["pod-1"],
            vec![device(
                "rdma",
                "mlx5-0-p1",
                "ens2f0np0",
                json!({"mode": "macvlan", "mtu": 1500}),
            )],
        ))
        .unwrap();
    claims
        .save(&prepared(
            "uid-2",
            &["pod-2"],
            vec![device(
                "rdma",
                "mlx5-1-p1",
                "ens1f0np0",
                json!({"mode": "macvlan"}),
            )],
        ))
        .unwrap();
    let req = add_request(
        &w,
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=team;K8S_POD_NAME=p;K8S_POD_UID=pod-1",
    );
    let (resolved, dra) = resolve_add(&req, &claims).unwrap().expect("a DRA network");
    assert_eq!(
        (dra.claim.uid.as_str(), dra.netdev.as_str()),
        ("uid-1", "ens2f0np0")
    );
    assert_eq!(
        device_selector(&resolved.conf, None).unwrap(),
        Selector::Claim(dra.clone())
    );
    assert_eq!(
        parent_selectors(&resolved.conf, None).unwrap(),
        vec![Selector::Claim(dra.clone())]
    );
    w.dispatch(&resolved, None).unwrap();
    let created: Vec<_> = w
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::CreateLink { parent, .. } => Some(parent),
            _ => None,
        })
        .collect();
    assert_eq!(
        created,
        vec![5],
        "the child is made on the claim's netdev, ens2f0np0"
    );
    let att = w.store.load("rdma-dra", "c1", "net1").unwrap().unwrap();
    let state = att
        .state::<ChildState>()
        .expect("macvlan, as the claim says");
    assert_eq!(
        (state.parent.name.as_str(), state.pod_interface.mtu),
        ("ens2f0np0", Some(1500))
    );
    let recorded = crate::attach::claim::DraDevice::of_record(att.conf.as_ref()).unwrap();
    assert_eq!(recorded, dra);
}

/// Multus's DRA path: the device's `k8s.cni.cncf.io/deviceID` arrives as deviceID; it picks
/// the device among the pod's claims, also without K8S_POD_UID, and is kept in the record.
#[test]
fn multus_device_id_picks_the_device_of_the_pods_claims() {
    let w = world(r#""deviceID":"rdma-ns:mlx5-1-p1","pciBusID":"rdma-ns:mlx5-1-p1""#);
    let claims = claims_of(&w);
    claims
        .save(&prepared(
            "uid-1",
            &["pod-1"],
            vec![
                device(
                    "rail0",
                    "mlx5-0-p1",
                    "ens2f0np0",
                    json!({"mode": "macvlan"}),
                ),
                device(
                    "rail1",
                    "mlx5-1-p1",
                    "ens1f0np0",
                    json!({"mode": "macvlan"}),
                ),
            ],
        ))
        .unwrap();
    for args in ["K8S_POD_UID=pod-1", ""] {
        let req = add_request(&w, args);
        let (resolved, dra) = resolve_add(&req, &claims).unwrap().unwrap();
        assert_eq!(
            (dra.device.as_str(), dra.request.as_str()),
            ("mlx5-1-p1", "rail1"),
            "{args}"
        );
        assert_eq!(dra.netdev, "ens1f0np0");
        let id = crate::attach::select::device_plugin_id(&resolved.conf)
            .unwrap()
            .unwrap();
        assert_eq!(id.value, "rdma-ns:mlx5-1-p1");
    }
    let other_pod = add_request(&w, "K8S_POD_UID=pod-9");
    let e = resolve_add(&other_pod, &claims).unwrap_err();
    assert_eq!(e.code(), 122, "{e}");
}

/// A pod without a prepared claim gets code 122 naming the pod and what to check, and nothing
/// is made; with its claim prepared the same ADD goes through. A pod with several devices and
/// no way to choose gets 101 naming them; `dra.request` chooses.
#[test]
fn a_pod_without_a_prepared_claim_is_refused_and_nothing_changes() {
    let w = world(r#""dra":true"#);
    let claims = claims_of(&w);
    let req = add_request(&w, "K8S_POD_UID=pod-1");
    let e = resolve_add(&req, &claims).unwrap_err();
    assert_eq!(e.code(), 122);
    let msg = e.to_string();
    for part in [
        "pod-1",
        "K8S_POD_UID",
        "kubectl get resourceclaim",
        "nothing was changed",
    ] {
        assert!(msg.contains(part), "{part}: {msg}");
    }
    assert!(w.calls().is_empty(), "{:?}", w.calls());

    claims
        .save(&prepared(
            "uid-1",
            &["pod-1"],
            vec![
                device(
                    "rail0",
                    "mlx5-0-p1",
                    "ens2f0np0",
                    json!({"mode": "macvlan"}),
                ),
                device(
                    "rail1",
                    "mlx5-1-p1",
                    "ens1f0np0",
                    json!({"mode": "macvlan"}),
                ),
            ],
        ))
        .unwrap();
    let e = resolve_add(&req, &claims).unwrap_err();
    assert_eq!(e.code(), 101);
    assert!(
        e.to_string().contains("mlx5-0-p1") && e.to_string().contains("dra"),
        "{e}"
    );

    let w2 = world(r#""dra":{"request":"rail0"}"#);
    claims_of(&w2)
        .save(&claims.load("uid-1").unwrap().unwrap())
        .unwrap();
    let (_, dra) = resolve_add(&add_request(&w2, "K8S_POD_UID=pod-1"), &claims_of(&w2))
        .unwrap()
        .unwrap();
    assert_eq!(dra.device, "mlx5-0-p1");
}

/// A conf that is no DRA network is left alone; one that names a device beside its claim, or
/// finds no pod UID and no deviceID, is refused naming the field.
#[test]
fn dra_confs_refuse_static_selectors_and_need_a_way_to_the_pod() {
    let plain = world(r#""mode":"macvlan","master":"ens1f0np0""#);
    assert!(
        resolve_add(&add_request(&plain, "K8S_POD_UID=p"), &claims_of(&plain))
            .unwrap()
            .is_none()
    );

    let both = world(r#""dra":true,"master":"ens1f0np0""#);
    claims_of(&both)
        .save(&prepared(
            "uid-1",
            &["p"],
            vec![device("r", "mlx5-0-p1", "ens2f0np0", json!({}))],
        ))
        .unwrap();
    let e = resolve_add(&add_request(&both, "K8S_POD_UID=p"), &claims_of(&both)).unwrap_err();
    assert_eq!(e.code(), 7);
    assert!(e.to_string().contains("`master`"), "{e}");

    let no_uid = world(r#""dra":true"#);
    let e = resolve_add(&add_request(&no_uid, ""), &claims_of(&no_uid)).unwrap_err();
    assert_eq!(e.code(), 4);
    assert!(e.to_string().contains("K8S_POD_UID"), "{e}");
    let e =
        crate::attach::claim::DraConf::from_conf(&add_request(&world(r#""dra":"yes""#), "").conf)
            .unwrap_err();
    assert_eq!(e.code(), 7);
}

/// The records the driver and the CNI share: a prepared claim round-trips, failures are kept
/// and cleared per claim, the claims directory is never read as a network's, and removal is
/// idempotent.
#[test]
fn prepared_claims_and_add_failures_round_trip_beside_the_attachment_records() {
    let w = world(r#""dra":true"#);
    let claims = claims_of(&w);
    let c = prepared(
        "uid-1",
        &["p"],
        vec![device(
            "r",
            "mlx5-0-p1",
            "ens2f0np0",
            json!({"mode": "macvlan"}),
        )],
    );
    claims.save(&c).unwrap();
    assert_eq!(claims.load("uid-1").unwrap(), Some(c.clone()));
    let f = AddFailure {
        container_id: "c1".into(),
        ifname: "net1".into(),
        device: "mlx5-0-p1".into(),
        code: 110,
        message: "parent down".into(),
    };
    claims.record_add_failure("uid-1", &f).unwrap();
    assert_eq!(claims.add_failure("uid-1").unwrap(), Some(f));
    let (listed, errors) = claims.list();
    assert_eq!(
        (listed, errors.len()),
        (vec![c], 0),
        "the failure file is no claim"
    );
    let (atts, unreadable) = w.store.list_all();
    assert!(atts.is_empty() && unreadable.is_empty(), "{unreadable:?}");
    claims.clear_add_failure("uid-1").unwrap();
    assert_eq!(claims.add_failure("uid-1").unwrap(), None);
    claims.remove("uid-1").unwrap();
    claims.remove("uid-1").unwrap();
    assert_eq!(claims.load("uid-1").unwrap(), None);
    assert_eq!(claims.load("../x").unwrap_err().code(), 106);
}

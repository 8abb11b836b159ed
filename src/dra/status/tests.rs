use super::*;
use serde_json::{json, Value};

fn claim() -> PreparedClaim {
    let device = |request: &str, name: &str| PreparedDevice {
        request: request.into(),
        pool: "node-a".into(),
        device: name.into(),
        share_id: None,
        kind: "roce".into(),
        netdev: "ens1f0np0".into(),
        ibdev: Some("mlx5_0".into()),
        port: Some(1),
        pci_address: Some("0000:3b:00.0".into()),
        lock_key: "pci-0000:3b:00.0".into(),
        cdi_device_ids: vec![],
        attach: Default::default(),
        umad: false,
        rail: None,
        pods: Vec::new(),
    };
    PreparedClaim {
        claim: ClaimRef {
            namespace: "team".into(),
            name: "trainer-rdma".into(),
            uid: "uid-1".into(),
        },
        pod_uids: vec!["pod-1".into()],
        extended_resource: false,
        devices: vec![device("rail0", "mlx5-0-p1"), device("rail1", "mlx5-1-p1")],
        allocation: String::new(),
        written_by: None,
    }
}

/// The frozen macvlan record of the record tests (net1 on ens1f0np0, 10.9.0.5/24, GID index
/// 6 on mlx5_0), as the CNI writes it for a DRA network: its conf names the claim's device.
fn attachment(claim_uid: &str, device: &str) -> Attachment {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/attach/testdata/records-schema-2/macvlan/c1:net1.json"
    ))
    .unwrap();
    let mut last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let dra = DraDevice {
        claim: ClaimRef {
            namespace: "team".into(),
            name: "trainer-rdma".into(),
            uid: claim_uid.into(),
        },
        request: "rail0".into(),
        pool: "node-a".into(),
        device: device.into(),
        share_id: None,
        netdev: "ens1f0np0".into(),
    };
    last["conf"] =
        json!({"cniVersion": "1.1.0", "name": "cn", "type": "rdma-ns", "draDevice": dra});
    serde_json::from_value(last).unwrap()
}

/// The status of claim uid-1 (prepared as `claim()`, or not prepared) with `atts` on the node
/// and `failure` left by its last ADD.
fn status_of(
    prepared: Option<&PreparedClaim>,
    atts: &[Attachment],
    failure: Option<&AddFailure>,
    now: &Time,
) -> Vec<AllocatedDeviceStatus> {
    let prepared: Vec<PreparedClaim> = prepared.into_iter().cloned().collect();
    let failures: BTreeMap<String, AddFailure> = failure
        .map(|f| ("uid-1".to_string(), f.clone()))
        .into_iter()
        .collect();
    let written = [WrittenStatus {
        claim: claim().claim,
        entries: vec![],
    }];
    let all = facts(&prepared, &written, atts, &failures);
    let one = all
        .iter()
        .find(|f| f.claim.uid == "uid-1")
        .expect("uid-1's facts");
    desired(one, now)
}

fn now() -> Time {
    Time("2026-12-03T10:00:00Z".parse().unwrap())
}

/// After ADD: the attached device's entry says Ready with the pod interface, its IP and MAC,
/// and the RDMA facts in `data`; the claim's other device (not attached) has no entry, and an
/// attachment of another claim counts for nothing.
#[test]
fn an_attached_device_shows_its_interface_ips_mac_and_rdma_facts() {
    let atts = [
        attachment("uid-1", "mlx5-0-p1"),
        attachment("uid-9", "mlx5-1-p1"),
    ];
    let got = status_of(Some(&claim()), &atts, None, &now());
    let json = serde_json::to_value(&got).unwrap();
    assert_eq!(
        json,
        json!([{
            "driver": "rdma-ns.io",
            "pool": "node-a",
            "device": "mlx5-0-p1",
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "Attached",
                "message": "net1 in the pod (macvlan of ens1f0np0), ib device mlx5_0",
                "lastTransitionTime": "2026-12-03T10:00:00Z"
            }],
            "networkData": {
                "interfaceName": "net1",
                "ips": ["10.9.0.5/24"],
                "hardwareAddress": "42:75:18:bf:af:c2"
            },
            "data": {
                "ibDevice": "mlx5_0",
                "port": 1,
                "gidIndex": 6,
                "gids": [{"ip": "10.9.0.5", "ibDevice": "mlx5_0", "port": 1, "gidIndex": 6, "gidType": "RoCE v2"}],
                "netdev": "ens1f0np0",
                "mode": "macvlan",
                "network": "cn"
            }
        }])
    );
}

/// A failed ADD shows Ready False with rdma-ns's code and message; with no attachment and no
/// failure (before ADD, after DEL) the driver's entries are empty, which the apply patch
/// turns into their removal.
#[test]
fn a_failed_add_shows_its_code_and_del_clears_the_entries() {
    let failure = AddFailure {
        container_id: "c1".into(),
        ifname: "net1".into(),
        device: "mlx5-1-p1".into(),
        code: 110,
        message: "parent ens1f0np0 is down".into(),
    };
    let got = status_of(Some(&claim()), &[], Some(&failure), &now());
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].device, "mlx5-1-p1");
    let c = &got[0].conditions.as_ref().unwrap()[0];
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "AddFailed")
    );
    assert!(
        c.message.contains("rdma-ns code 110") && c.message.contains("is down"),
        "{}",
        c.message
    );
    assert!(got[0].network_data.is_none());

    let cleared = status_of(Some(&claim()), &[], None, &now());
    assert!(cleared.is_empty());
    let patch = crate::dra::api::status_patch(&claim().claim, &cleared);
    assert_eq!(patch["status"], json!({"devices": []}));
    assert_eq!(
        patch["metadata"]["uid"], "uid-1",
        "the claim's UID, a precondition"
    );
}

/// A reconcile that finds the same status, at another time, writes nothing; a changed one does.
#[test]
fn the_same_status_at_another_time_is_the_same() {
    let atts = [attachment("uid-1", "mlx5-0-p1")];
    let a = status_of(Some(&claim()), &atts, None, &now());
    let b = status_of(
        Some(&claim()),
        &atts,
        None,
        &Time("2026-12-03T11:00:00Z".parse().unwrap()),
    );
    assert!(same(&a, &b));
    assert!(!same(&a, &[]));
    let c = status_of(
        Some(&claim()),
        &[attachment("uid-1", "mlx5-1-p1")],
        None,
        &now(),
    );
    assert!(!same(&a, &c));
}

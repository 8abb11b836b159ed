//! What each prepared claim's `status.devices` (KEP-4817) should say, derived from the
//! attachment records the CNI writes, and its write to the API server.
//!
//! How the driver learns of ADD and DEL: from the records themselves. The CNI writes an
//! attachment record (conf `draDevice` names the claim) before it answers ADD, removes it when
//! DEL is done, and leaves `_claims/<uid>.add-error.json` on a failed ADD; the daemon watches
//! the data dir with inotify and derives every claim's status again on each change (and every
//! `resyncSeconds`, for an event inotify dropped). The CNI never talks to the driver: a pod's
//! attach never waits for it, and a driver restart loses nothing, since the records are the
//! state.
//!
//! Per device: attached → condition `Ready` True (reason `Attached`), `networkData` (the pod
//! interface, its IPs, its hardware address) and `data` with the RDMA facts (ib device, port,
//! GID indexes); a failed ADD → `Ready` False (reason `AddFailed`, rdma-ns's code and message);
//! neither (prepared, not attached yet, or detached by DEL) → no entry: DEL clears it.

use k8s_openapi::api::resource::v1::{AllocatedDeviceStatus, NetworkDeviceData};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::{json, Value};

use crate::attach::claim::{dra_device_of_record, AddFailure, PreparedClaim, PreparedDevice};
use crate::attach::record::{Attachment, Phase};
use crate::dra::config::DRIVER_NAME;

/// The status entries `claim` should have, given every attachment record of the node and the
/// failure its last ADD recorded. `now` stamps conditions that change.
pub fn desired(
    claim: &PreparedClaim,
    attachments: &[Attachment],
    failure: Option<&AddFailure>,
    now: &Time,
) -> Vec<AllocatedDeviceStatus> {
    let mut out = Vec::new();
    for device in &claim.devices {
        let attached = attachments.iter().find(|a| {
            a.phase == Phase::Ready
                && dra_device_of_record(a.conf.as_ref())
                    .is_some_and(|d| d.claim.uid == claim.claim.uid && d.device == device.device)
        });
        if let Some(att) = attached {
            out.push(attached_status(device, att, now));
        } else if let Some(f) = failure.filter(|f| f.device == device.device) {
            out.push(failed_status(device, f, now));
        }
    }
    out
}

fn entry(device: &PreparedDevice) -> AllocatedDeviceStatus {
    AllocatedDeviceStatus {
        driver: DRIVER_NAME.into(),
        pool: device.pool.clone(),
        device: device.device.clone(),
        share_id: device.share_id.clone(),
        ..Default::default()
    }
}

fn condition(status: &str, reason: &str, message: String, now: &Time) -> Condition {
    Condition {
        type_: "Ready".into(),
        status: status.into(),
        reason: reason.into(),
        message: message.chars().take(32_000).collect(),
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

fn attached_status(device: &PreparedDevice, att: &Attachment, now: &Time) -> AllocatedDeviceStatus {
    // The record's on-disk form: the stable layout every release reads (record.rs).
    let wire: Value = att
        .record_line()
        .ok()
        .and_then(|l| serde_json::from_slice(&l).ok())
        .unwrap_or(Value::Null);
    let ips: Vec<String> = wire["ipamResult"]["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["address"].as_str().map(str::to_string))
        .collect();
    let hwaddr = wire["child"]["hwaddr"]
        .as_str()
        .or(wire["host"]["hwaddr"].as_str())
        .map(str::to_string);
    let ibdev = wire["steps"]["softRoce"]["ibdev"]
        .as_str()
        .or(wire["rdma"]["ibdev"].as_str())
        .map(str::to_string)
        .or_else(|| device.ibdev.clone());
    let gids: Vec<Value> = att
        .gids()
        .iter()
        .map(|g| json!({"ip": g.ip.to_string(), "ibDevice": g.ibdev, "port": g.port, "gidIndex": g.index, "gidType": g.gid_type}))
        .collect();
    let data = json!({
        "ibDevice": ibdev,
        "port": att.gids().first().map(|g| g.port).or(device.port),
        "gidIndex": att.gids().first().map(|g| g.index),
        "gids": gids,
        "netdev": device.netdev,
        "mode": att.mode().as_str(),
        "network": att.network,
    });
    AllocatedDeviceStatus {
        conditions: Some(vec![condition(
            "True",
            "Attached",
            format!(
                "{} in the pod ({} of {}), ib device {}",
                att.ifname,
                att.mode().as_str(),
                device.netdev,
                ibdev.as_deref().unwrap_or("none")
            ),
            now,
        )]),
        network_data: Some(NetworkDeviceData {
            interface_name: Some(att.ifname.clone()),
            ips: (!ips.is_empty()).then_some(ips),
            hardware_address: hwaddr,
        }),
        data: Some(RawExtension(data)),
        ..entry(device)
    }
}

fn failed_status(device: &PreparedDevice, f: &AddFailure, now: &Time) -> AllocatedDeviceStatus {
    AllocatedDeviceStatus {
        conditions: Some(vec![condition(
            "False",
            "AddFailed",
            format!(
                "rdma-ns code {} on {} ({}): {}",
                f.code, f.ifname, f.container_id, f.message
            ),
            now,
        )]),
        ..entry(device)
    }
}

/// Whether two status lists say the same, condition times aside (a reconcile that finds
/// nothing new writes nothing).
pub fn same(a: &[AllocatedDeviceStatus], b: &[AllocatedDeviceStatus]) -> bool {
    let strip = |v: &[AllocatedDeviceStatus]| -> Vec<AllocatedDeviceStatus> {
        let mut v = v.to_vec();
        for d in &mut v {
            for c in d.conditions.iter_mut().flatten() {
                c.last_transition_time = Time(Default::default());
            }
        }
        v.sort_by(|x, y| (&x.pool, &x.device, &x.share_id).cmp(&(&y.pool, &y.device, &y.share_id)));
        v
    };
    strip(a) == strip(b)
}

/// The server-side apply patch that makes this driver's entries of the claim's status exactly
/// `devices` (an empty list removes what the driver set before: DEL clears them).
pub fn apply_patch(devices: &[AllocatedDeviceStatus]) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "status": { "devices": devices },
    })
}

#[cfg(test)]
mod tests;

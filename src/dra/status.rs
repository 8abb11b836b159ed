//! What each claim's `status.devices` (KEP-4817) should say, derived from the attachment
//! records the CNI writes, and its writer.
//!
//! How the driver learns of ADD and DEL: from the records themselves. The CNI writes an
//! attachment record (conf `draDevice` names the claim) before it answers ADD, removes it when
//! DEL is done, and leaves `_claims/<uid>.add-error.json` on a failed ADD; the daemon watches
//! the data dir with inotify and derives every claim's status again on each change (and every
//! `resyncSeconds`, for an event inotify dropped). The CNI never talks to the driver: a pod's
//! attach never waits for it, and a driver restart loses nothing, since the records are the
//! state.
//!
//! Which claims: every prepared claim, every claim an attachment names (unprepare may come
//! before the pod's DEL: the kubelet unprepares once the pod is gone, and a DEL that failed is
//! retried later), and every claim whose status holds entries the driver wrote and has not
//! cleared (`_claims/<uid>.status.json`, noted before the write): so an entry goes when its
//! attachment goes, whatever came first, also across a driver restart.
//!
//! Per device: attached → condition `Ready` True (reason `Attached`), `networkData` (the pod
//! interface, its IPs, its hardware address) and `data` with the RDMA facts (ib device, port,
//! GID indexes); a failed ADD of a prepared claim → `Ready` False (reason `AddFailed`,
//! rdma-ns's code and message); neither → no entry. A device that several pods of a shared
//! claim attached shows the first attachment's interface (by container ID): KEP-4817 has one
//! entry per device.
//!
//! Every write carries the claim's UID as a precondition: a claim deleted and made again under
//! the same name is another claim, and gets none of the old one's entries.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::resource::v1::{AllocatedDeviceStatus, NetworkDeviceData};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::json;

use crate::dra::api::{ApiError, DriverApi};
use crate::dra::config::DRIVER_NAME;
use crate::records::attachment::{Attachment, Phase};
use crate::records::claim::{
    AddFailure, ClaimRef, ClaimStore, DraDevice, PreparedClaim, PreparedDevice, StatusEntry,
    WrittenStatus,
};

/// Everything one claim's status is derived from.
#[derive(Debug)]
pub struct ClaimFacts<'a> {
    pub claim: ClaimRef,
    /// Its record, while it is prepared.
    pub prepared: Option<&'a PreparedClaim>,
    /// The ready attachments of its devices, with the device each names.
    pub attachments: Vec<(DraDevice, &'a Attachment)>,
    /// What its last failed ADD left, while it is prepared.
    pub failure: Option<AddFailure>,
}

/// The facts of every claim the status writer must look at: prepared ones, ones an attachment
/// names, ones whose status holds the driver's entries.
pub fn facts<'a>(
    prepared: &'a [PreparedClaim],
    written: &[WrittenStatus],
    attachments: &'a [Attachment],
    failures: &BTreeMap<String, AddFailure>,
) -> Vec<ClaimFacts<'a>> {
    let mut out: BTreeMap<String, ClaimFacts<'a>> = BTreeMap::new();
    let mut add = |claim: &ClaimRef| -> String {
        out.entry(claim.uid.clone()).or_insert_with(|| ClaimFacts {
            claim: claim.clone(),
            prepared: None,
            attachments: Vec::new(),
            failure: None,
        });
        claim.uid.clone()
    };
    let mut sorted: Vec<&Attachment> = attachments
        .iter()
        .filter(|a| a.phase == Phase::Ready)
        .collect();
    sorted.sort_by_key(|a| a.id());
    let named: Vec<(DraDevice, &Attachment)> = sorted
        .into_iter()
        .filter_map(|a| DraDevice::of_record(a.conf.as_ref()).map(|d| (d, a)))
        .collect();
    for w in written {
        add(&w.claim);
    }
    for p in prepared {
        add(&p.claim);
    }
    for (d, _) in &named {
        add(&d.claim);
    }
    for p in prepared {
        let f = out.get_mut(&p.claim.uid).expect("added");
        f.claim = p.claim.clone();
        f.prepared = Some(p);
        f.failure = failures.get(&p.claim.uid).cloned();
    }
    for (d, a) in named {
        out.get_mut(&d.claim.uid)
            .expect("added")
            .attachments
            .push((d, a));
    }
    out.into_values().collect()
}

/// The status entries of `facts`' claim. `now` stamps conditions that change.
pub fn desired(facts: &ClaimFacts<'_>, now: &Time) -> Vec<AllocatedDeviceStatus> {
    let mut out: BTreeMap<StatusEntry, AllocatedDeviceStatus> = BTreeMap::new();
    for (dra, att) in &facts.attachments {
        let key = entry_key(&dra.pool, &dra.device, dra.share_id.as_deref());
        out.entry(key).or_insert_with(|| {
            let device = facts.prepared.and_then(|p| p.device(dra));
            attached_status(dra, device, att, now)
        });
    }
    if let (Some(prepared), Some(f)) = (facts.prepared, &facts.failure) {
        for device in prepared.devices.iter().filter(|d| d.device == f.device) {
            let key = entry_key(&device.pool, &device.device, device.share_id.as_deref());
            out.entry(key)
                .or_insert_with(|| failed_status(device, f, now));
        }
    }
    out.into_values().collect()
}

fn entry_key(pool: &str, device: &str, share_id: Option<&str>) -> StatusEntry {
    StatusEntry {
        pool: pool.to_string(),
        device: device.to_string(),
        share_id: share_id.map(str::to_string),
    }
}

fn entry(pool: &str, device: &str, share_id: Option<&str>) -> AllocatedDeviceStatus {
    AllocatedDeviceStatus {
        driver: DRIVER_NAME.into(),
        pool: pool.to_string(),
        device: device.to_string(),
        share_id: share_id.map(str::to_string),
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

fn attached_status(
    dra: &DraDevice,
    device: Option<&PreparedDevice>,
    att: &Attachment,
    now: &Time,
) -> AllocatedDeviceStatus {
    let pod = att.mode_state.pod.clone();
    let ips: Vec<String> = pod
        .ipam_result
        .as_ref()
        .and_then(|r| r["ips"].as_array().cloned())
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["address"].as_str().map(str::to_string))
        .collect();
    let ibdev = att
        .soft_roce()
        .map(|s| s.ibdev)
        .or_else(|| att.ib_device().map(|r| r.ibdev.clone()))
        .or_else(|| att.gids().first().map(|g| g.ibdev.clone()))
        .or_else(|| device.and_then(|d| d.ibdev.clone()));
    let gids: Vec<serde_json::Value> = att
        .gids()
        .iter()
        .map(|g| json!({"ip": g.ip.to_string(), "ibDevice": g.ibdev, "port": g.port, "gidIndex": g.index, "gidType": g.gid_type}))
        .collect();
    let data = json!({
        "ibDevice": ibdev,
        "port": att.gids().first().map(|g| g.port).or(device.and_then(|d| d.port)),
        "gidIndex": att.gids().first().map(|g| g.index),
        "gids": gids,
        "netdev": dra.netdev,
        "mode": att.mode_name(),
        "network": att.network,
    });
    let message = format!(
        "{} in the pod ({} of {}), ib device {}",
        att.ifname,
        att.mode_name(),
        dra.netdev,
        ibdev.as_deref().unwrap_or("none")
    );
    AllocatedDeviceStatus {
        conditions: Some(vec![condition("True", "Attached", message, now)]),
        network_data: Some(NetworkDeviceData {
            interface_name: Some(att.ifname.clone()),
            ips: (!ips.is_empty()).then_some(ips),
            hardware_address: att.mode_state.pod_hwaddr().map(str::to_string),
        }),
        data: Some(RawExtension(data)),
        ..entry(&dra.pool, &dra.device, dra.share_id.as_deref())
    }
}

fn failed_status(device: &PreparedDevice, f: &AddFailure, now: &Time) -> AllocatedDeviceStatus {
    let message = format!(
        "rdma-ns code {} on {} ({}): {}",
        f.code, f.ifname, f.container_id, f.message
    );
    AllocatedDeviceStatus {
        conditions: Some(vec![condition("False", "AddFailed", message, now)]),
        ..entry(&device.pool, &device.device, device.share_id.as_deref())
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

/// Writes claims' statuses, keeping only what spares writes: what it last wrote per claim UID,
/// and the claims it found gone or replaced (a restart derives both again).
#[derive(Default)]
pub struct StatusWriter {
    written: BTreeMap<String, Vec<AllocatedDeviceStatus>>,
    gone: BTreeSet<String>,
}

impl StatusWriter {
    /// Writes the status of each of `facts` where it changed; the failures, joined.
    pub async fn write(
        &mut self,
        api: &dyn DriverApi,
        node: &str,
        claims: &ClaimStore,
        facts: &[ClaimFacts<'_>],
        now: &Time,
    ) -> Result<(), Vec<ApiError>> {
        let mut errors = Vec::new();
        for f in facts {
            let uid = &f.claim.uid;
            let want = desired(f, now);
            if self.gone.contains(uid) || self.written.get(uid).is_some_and(|w| same(w, &want)) {
                continue;
            }
            if let Err(e) = self.write_one(api, node, claims, &f.claim, &want).await {
                errors.push(e);
            }
        }
        let known: BTreeSet<&String> = facts.iter().map(|f| &f.claim.uid).collect();
        self.written.retain(|uid, _| known.contains(uid));
        self.gone.retain(|uid| known.contains(uid));
        match errors.is_empty() {
            true => Ok(()),
            false => Err(errors),
        }
    }

    async fn write_one(
        &mut self,
        api: &dyn DriverApi,
        node: &str,
        claims: &ClaimStore,
        claim: &ClaimRef,
        want: &[AllocatedDeviceStatus],
    ) -> Result<(), ApiError> {
        let failed = |e: crate::error::Error| ApiError::Failed {
            what: format!("the status record of claim {claim}"),
            message: e.to_string(),
        };
        if !want.is_empty() {
            // Noted first, durably: a driver killed after the write still knows to clear it.
            let entries = want
                .iter()
                .map(|d| entry_key(&d.pool, &d.device, d.share_id.as_deref()))
                .collect();
            let note = WrittenStatus {
                claim: claim.clone(),
                entries,
            };
            claims.note_written_status(&note).map_err(failed)?;
            crate::records::kill_point("dra-status");
        }
        match api.apply_status(node, claim, want).await {
            Ok(()) => {
                self.written.insert(claim.uid.clone(), want.to_vec());
                if want.is_empty() {
                    claims.forget_written_status(&claim.uid).map_err(failed)?;
                }
                Ok(())
            }
            // Gone, or another claim under its name: nothing of ours is on it to clear.
            Err(ApiError::NotFound { .. } | ApiError::Conflict { .. }) => {
                self.gone.insert(claim.uid.clone());
                claims.forget_written_status(&claim.uid).map_err(failed)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests;

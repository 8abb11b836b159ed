//! Pods written for the RDMA shared device plugin, served by DRA: a pod that asks for the
//! extended resource `rdma/hca_shared` (conf/pod.yaml) on a node where a DeviceClass maps that
//! resource to this driver (`extendedResourceName`, Kubernetes 1.37) gets a claim the scheduler
//! made for it (records/claim.rs `extended_resource`), and its containers get that claim's CDI
//! devices. Its network is still the device plugin's NAD, whose conf names no claim: it
//! attaches by its own selectors (`master`), as before.
//!
//! After such an ADD, the attachment is tied to the claim's device on the same netdev: its
//! record names the device (`draDevice`, so the driver writes the claim's status) and its
//! report goes into the claim's CDI spec (the pod's own Soft-RoCE node, its variables). A pod
//! whose claim's devices are all on other netdevs than the NAD's is refused, naming both: its
//! containers would get a device its interface is not on. The DeviceClass must then select
//! the NAD's netdev, as the device plugin's `ifNames` selected it.

use crate::attach::claim::kubelet;
use crate::attach::record::Attachment;
use crate::error::{Error, Result};
use crate::records::claim::{ClaimStore, DraDevice, PreparedClaim};

/// The device of the pod's extended-resource claims that `att` attached (the same netdev);
/// None when the pod has no such claim. A pod with such claims none of whose devices is on
/// `att`'s netdev is refused.
pub fn device_of(
    claims: &ClaimStore,
    kubelet_dir: &std::path::Path,
    pod_uid: &str,
    att: &Attachment,
) -> Result<Option<DraDevice>> {
    let kubelet_claims = kubelet::claims_of_pod(kubelet_dir, pod_uid);
    let (all, _) = claims.list();
    let pods: Vec<&PreparedClaim> = all
        .iter()
        .filter(|c| c.extended_resource)
        .filter(|c| {
            c.pod_uids.iter().any(|p| p == pod_uid) || kubelet_claims.contains(&c.claim.uid)
        })
        .collect();
    let netdev = att.netdev_name();
    let mut found = pods.iter().flat_map(|c| {
        c.devices
            .iter()
            .filter(|d| d.netdev == netdev)
            .map(|d| DraDevice {
                claim: c.claim.clone(),
                request: d.request.clone(),
                pool: d.pool.clone(),
                device: d.device.clone(),
                share_id: d.share_id.clone(),
                netdev: d.netdev.clone(),
            })
    });
    if let Some(dra) = found.next() {
        return Ok(Some(dra));
    }
    if pods.is_empty() {
        return Ok(None);
    }
    let held: Vec<String> = pods
        .iter()
        .flat_map(|c| {
            c.devices
                .iter()
                .map(move |d| format!("{} on {} (claim {})", d.device, d.netdev, c.claim))
        })
        .collect();
    Err(Error::config(
        "master",
        format!(
            "pod {pod_uid} has its RDMA device from an extended resource backed by DRA ({}), but \
             network {} attaches {netdev}: its containers would get a device its interface is \
             not on. Give the DeviceClass of that extended resource a selector on netdev \
             {netdev} (`device.attributes[\"rdma-ns.io\"].netdev == \"{netdev}\"`), as the device \
             plugin's ifNames selected it",
            held.join(", "),
            att.network
        ),
    ))
}

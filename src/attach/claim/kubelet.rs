//! Which DRA claims the kubelet prepared for a pod, from its own checkpoint
//! (`<kubeletDir>/dra_manager_state`).
//!
//! The kubelet calls a driver's NodePrepareResources once per claim and node; a second pod that
//! shares a prepared claim is only added to the claim's entry in the kubelet's cache, which the
//! kubelet checkpoints before it creates the pod's sandbox (Kubernetes v1.37.2,
//! pkg/kubelet/cm/dra/manager.go `prepareResources`: `addPodReference`, then
//! `syncToCheckpoint`, then the sandbox). So at the sandbox's CNI ADD the checkpoint already
//! names the pod, whatever the driver has seen of the claim since.
//!
//! The format (pkg/kubelet/cm/dra/state/checkpoint.go): `{"Data": "<JSON>", "Checksum": <CRC-32
//! IEEE of Data's bytes>}`, Data being `{"kind": "DRACheckpoint", "apiVersion":
//! "checkpoint.dra.kubelet.k8s.io/v1", "ClaimInfoStateList": [{"ClaimUID", "ClaimName",
//! "Namespace", "PodUIDs": {"<pod UID>": {}}, "DriverState": ...}]}`; the kubelet writes it
//! atomically (pkg/kubelet/util/store/filestore.go: a temp file renamed). It is the kubelet's
//! internal state, so anything else (no file, another version, a bad checksum) is logged and
//! counts as naming no claim: the driver's records still do.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The checkpoint's file under the kubelet's root (manager.go `draManagerStateFileName`).
pub const CHECKPOINT_FILE: &str = "dra_manager_state";

/// The one checkpoint version this reader knows.
const API_VERSION: &str = "checkpoint.dra.kubelet.k8s.io/v1";

#[derive(Deserialize)]
struct Checkpoint {
    #[serde(rename = "Data")]
    data: String,
    #[serde(rename = "Checksum")]
    checksum: u32,
}

#[derive(Deserialize)]
struct CheckpointData {
    #[serde(rename = "apiVersion")]
    api_version: String,
    #[serde(rename = "ClaimInfoStateList", default)]
    claims: Vec<ClaimInfoState>,
}

#[derive(Deserialize)]
struct ClaimInfoState {
    #[serde(rename = "ClaimUID")]
    claim_uid: String,
    #[serde(rename = "PodUIDs", default)]
    pod_uids: Option<BTreeMap<String, serde_json::Value>>,
}

/// The UIDs of the claims the kubelet's checkpoint under `kubelet_dir` lists for `pod_uid`.
pub fn claims_of_pod(kubelet_dir: &Path, pod_uid: &str) -> Vec<String> {
    let path = kubelet_dir.join(CHECKPOINT_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            crate::log_warn!(
                "reading the kubelet's DRA checkpoint {}: {e}",
                path.display()
            );
            return Vec::new();
        }
    };
    match parse(&bytes, pod_uid) {
        Ok(uids) => uids,
        Err(why) => {
            crate::log_warn!(
                "the kubelet's DRA checkpoint {} is not one this rdma-ns reads ({why}); \
                 finding the pod's claims by the driver's records alone",
                path.display()
            );
            Vec::new()
        }
    }
}

/// The claims `bytes` (a checkpoint file) lists for `pod_uid`.
pub fn parse(bytes: &[u8], pod_uid: &str) -> Result<Vec<String>, String> {
    let cp: Checkpoint = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let sum = crc32_ieee(cp.data.as_bytes());
    if sum != cp.checksum {
        return Err(format!(
            "checksum {} where its data sums to {sum}",
            cp.checksum
        ));
    }
    let data: CheckpointData = serde_json::from_str(&cp.data).map_err(|e| e.to_string())?;
    if data.api_version != API_VERSION {
        return Err(format!("apiVersion {:?}", data.api_version));
    }
    Ok(data
        .claims
        .into_iter()
        .filter(|c| c.pod_uids.as_ref().is_some_and(|p| p.contains_key(pod_uid)))
        .map(|c| c.claim_uid)
        .collect())
}

/// CRC-32 with the IEEE polynomial (reflected, 0xEDB88320), as Go's `crc32.ChecksumIEEE`.
fn crc32_ieee(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (!(crc & 1)).wrapping_add(1));
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_the_ieee_one() {
        // The standard check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32_ieee(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32_ieee(b""), 0);
    }
}

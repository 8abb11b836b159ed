//! The pods a prepared claim is reserved for, kept in its record as the claim's
//! `status.reservedFor` says.
//!
//! The kubelet prepares a claim once per node: a second pod that shares it (one ResourceClaim
//! named by several pods) is only added to the kubelet's own cache, and the driver hears of it
//! from the API server, where the scheduler put the pod into `reservedFor` before binding it.
//! So the driver watches each claim it prepared (one watch per claim, by name: no node reads
//! another node's claims) and writes the record's `podUids` when they change, under the claim's
//! lock. The CNI also reads the kubelet's checkpoint (attach/claim/kubelet.rs), so a pod's ADD
//! does not wait for this; the record keeps the API's view for every other reader.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt;

use crate::dra::api::DriverApi;
use crate::error::Result;
use crate::records::claim::{ClaimRef, ClaimStore, PreparedClaim};

/// The pods `claim` is reserved for, sorted.
pub fn reserved_pods(claim: &ResourceClaim) -> Vec<String> {
    let mut uids: Vec<String> = claim
        .status
        .iter()
        .flat_map(|s| s.reserved_for.iter().flatten())
        .filter(|r| r.resource == "pods")
        .map(|r| r.uid.clone())
        .collect();
    uids.sort();
    uids.dedup();
    uids
}

/// Writes `claim`'s reserved pods into its record, when it is the prepared one (same UID) and
/// they changed; whether it wrote.
pub fn set_pods(claims: &ClaimStore, claim: &ResourceClaim) -> Result<bool> {
    let Some(uid) = claim.metadata.uid.as_deref() else {
        return Ok(false);
    };
    let _lock = claims.lock(uid)?;
    let Some(mut record) = claims.load(uid)? else {
        return Ok(false);
    };
    let pods = reserved_pods(claim);
    if record.pod_uids == pods {
        return Ok(false);
    }
    record.pod_uids = pods;
    claims.save(&record)?;
    Ok(true)
}

/// One watch per prepared claim.
#[derive(Default)]
pub struct PodWatches {
    running: BTreeMap<String, JoinHandle<()>>,
}

impl PodWatches {
    /// Starts a watch for each of `prepared` without one, and stops those of claims gone.
    pub fn sync(&mut self, api: &Arc<dyn DriverApi>, data_dir: &Path, prepared: &[PreparedClaim]) {
        self.running.retain(|uid, task| {
            let keep = prepared.iter().any(|p| &p.claim.uid == uid) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        for p in prepared {
            if !self.running.contains_key(&p.claim.uid) {
                let task =
                    tokio::spawn(follow(api.clone(), data_dir.to_path_buf(), p.claim.clone()));
                self.running.insert(p.claim.uid.clone(), task);
            }
        }
    }

    /// How many watches run.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }
}

impl Drop for PodWatches {
    fn drop(&mut self) {
        for task in self.running.values() {
            task.abort();
        }
    }
}

/// Follows `claim` until it is deleted or its name holds another claim.
async fn follow(api: Arc<dyn DriverApi>, data_dir: PathBuf, claim: ClaimRef) {
    let mut events = api.watch_claim(&claim.namespace, &claim.name);
    while let Some(event) = events.next().await {
        let current = match event {
            Ok(Some(c)) => c,
            Ok(None) => return,
            Err(e) => {
                crate::log_warn!("{e}; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        if current.metadata.uid.as_deref() != Some(claim.uid.as_str()) {
            return;
        }
        let dir = data_dir.clone();
        let wrote =
            tokio::task::spawn_blocking(move || set_pods(&ClaimStore::new(&dir), &current)).await;
        match wrote {
            Ok(Ok(true)) => crate::log_info!("claim {claim}: its pods changed"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => crate::log_warn!("claim {claim}: {e}"),
            Err(e) => crate::log_warn!("claim {claim}: {e}"),
        }
    }
}

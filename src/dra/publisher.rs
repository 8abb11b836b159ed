//! Publishing the node's pool: the slices [`slices::desired_slices`] derives from the
//! inventory, written through the API seam when they differ from what the server holds.

use k8s_openapi::api::resource::v1::ResourceSlice;

use crate::dra::api::{ApiError, DriverApi};
use crate::dra::config::DriverConfig;
use crate::dra::inventory::InvDevice;
use crate::dra::slices::{self, NodeRef, Sharing};

/// The node's slices as the API server last returned them, to a LIST or to this driver's own
/// writes. A pass compares the pool it wants with these rather than listing again: every pass
/// listed, and a pod's start wakes passes with its links and records (7.5 lists of 12.5
/// requests of the driver per DRA pod started on the lab, docs/benchmarks.md, kube-dra-api),
/// while only this driver writes its node's slices. The daemon forgets them on each resync and
/// a failed publish forgets them too, so a slice that someone else changed or deleted is seen,
/// and put right, within `resyncSeconds`. The kubelet's plugin helper watches its slices with an informer and
/// puts such a change right at once; a standing watch for slices that nobody else should write
/// was not worth it here (docs/dra.md, "What it publishes").
#[derive(Debug, Default)]
pub struct KnownPool(Option<Vec<ResourceSlice>>);

impl KnownPool {
    /// The next publish lists the slices again.
    pub fn forget(&mut self) {
        self.0 = None;
    }
}

/// Makes the node's pool what `devices` say, shared devices offered by `sharing`; returns the
/// sharing to use from now on (a server that dropped `allowMultipleAllocations` gets shares).
/// Lists the node's slices only when `known` holds none; `known` holds what the server returned
/// afterwards, and nothing after an error.
pub async fn publish(
    api: &dyn DriverApi,
    node: &NodeRef,
    devices: &[InvDevice],
    cfg: &DriverConfig,
    sharing: Sharing,
    known: &mut KnownPool,
) -> Result<Sharing, ApiError> {
    let desired = slices::desired_slices(node, devices, cfg, sharing);
    let stored = match known.0.take() {
        Some(stored) => stored,
        None => api.slices(&node.name).await?,
    };
    let kept = if slices::same_pool(&desired, &stored) {
        stored
    } else {
        write_pool(api, desired.clone(), &stored).await?
    };
    let sharing_kept = slices::server_kept_sharing(&desired, &kept);
    known.0 = Some(kept);
    if sharing == Sharing::MultipleAllocations && !sharing_kept {
        let n = cfg.shares_per_device;
        crate::log_warn!(
            "the API server dropped allowMultipleAllocations (no consumable capacity, KEP-5075): \
             publishing each shared device {n} times instead"
        );
        let replicas = Sharing::Replicas(n);
        return Box::pin(publish(api, node, devices, cfg, replicas, known)).await;
    }
    Ok(sharing)
}

/// Writes every slice of `desired` with the pool's next generation, and deletes the stored
/// slices it no longer has; returns the slices as the server stored them.
async fn write_pool(
    api: &dyn DriverApi,
    desired: Vec<ResourceSlice>,
    stored: &[ResourceSlice],
) -> Result<Vec<ResourceSlice>, ApiError> {
    let generation = stored
        .iter()
        .map(|s| s.spec.pool.generation)
        .max()
        .map_or(0, |g| g + 1);
    let mut written = Vec::new();
    for mut slice in desired {
        slice.spec.pool.generation = generation;
        let current = stored
            .iter()
            .find(|s| s.metadata.name == slice.metadata.name);
        written.push(match current {
            Some(cur) => {
                slice.metadata.resource_version = cur.metadata.resource_version.clone();
                api.replace_slice(&slice).await?
            }
            None => api.create_slice(&slice).await?,
        });
    }
    for old in stored {
        let name = old.metadata.name.clone().unwrap_or_default();
        if !written
            .iter()
            .any(|w| w.metadata.name.as_deref() == Some(&name))
        {
            match api.delete_slice(&name).await {
                Ok(()) | Err(ApiError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(written)
}

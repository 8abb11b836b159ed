//! Every call the driver makes to the API server, behind one trait ([`DriverApi`]): the real
//! one over kube-rs ([`KubeApi`]) and, in tests, a fake that holds the objects in memory and
//! counts the calls (api/fake.rs). The driver's logic (publishing, status, the pods of a claim,
//! prepare) sees only the trait, as dranet's `pluginHelper` seam keeps its driver apart from
//! the kubelet plugin library.
//!
//! Errors are typed ([`ApiError`]): what the driver does depends on which (a claim gone is no
//! failure; a claim made again under the same name is not the one the driver prepared).

use std::pin::Pin;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{AllocatedDeviceStatus, ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use tokio_stream::{Stream, StreamExt};

use crate::dra::config::DRIVER_NAME;
use crate::records::claim::ClaimRef;

/// Why a call failed, by what the driver does about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 404: the object is gone.
    #[error("{what}: not found")]
    NotFound { what: String },
    /// 409, or 422 for an immutable field (a UID precondition): the object changed, or is
    /// another object under the same name.
    #[error("{what}: conflict: {message}")]
    Conflict { what: String, message: String },
    /// 401 or 403: the driver's RBAC (or an admission policy) refuses it.
    #[error("{what}: refused: {message}")]
    Refused { what: String, message: String },
    /// Anything else: the server, the network, a bad response.
    #[error("{what}: {message}")]
    Failed { what: String, message: String },
}

impl ApiError {
    fn from_kube(what: String, e: kube::Error) -> ApiError {
        match e {
            kube::Error::Api(s) => match s.code {
                404 => ApiError::NotFound { what },
                409 | 422 => ApiError::Conflict {
                    what,
                    message: s.message,
                },
                401 | 403 => ApiError::Refused {
                    what,
                    message: s.message,
                },
                _ => ApiError::Failed {
                    what,
                    message: format!("{} ({})", s.message, s.code),
                },
            },
            other => ApiError::Failed {
                what,
                message: other.to_string(),
            },
        }
    }
}

/// One event of a claim's watch: the claim as it is now, or None once it was deleted.
pub type ClaimEvent = Result<Option<ResourceClaim>, ApiError>;

/// A claim's watch, as a stream of [`ClaimEvent`]s; it ends only when dropped.
pub type ClaimEvents = Pin<Box<dyn Stream<Item = ClaimEvent> + Send>>;

/// The API server as the driver uses it.
#[tonic::async_trait]
pub trait DriverApi: Send + Sync + 'static {
    /// The claim, as prepare reads its allocation.
    async fn claim(&self, namespace: &str, name: &str) -> Result<ResourceClaim, ApiError>;

    /// The UID of Node `name` (its slices' owner).
    async fn node_uid(&self, name: &str) -> Result<String, ApiError>;

    /// This driver's slices of node `node`.
    async fn slices(&self, node: &str) -> Result<Vec<ResourceSlice>, ApiError>;

    async fn create_slice(&self, slice: &ResourceSlice) -> Result<ResourceSlice, ApiError>;

    /// Replaces the slice of `slice`'s name (its resourceVersion set: a conflict otherwise).
    async fn replace_slice(&self, slice: &ResourceSlice) -> Result<ResourceSlice, ApiError>;

    async fn delete_slice(&self, name: &str) -> Result<(), ApiError>;

    /// Makes this driver's entries of `claim`'s `status.devices` exactly `devices` (server-side
    /// apply, field manager `rdma-ns.io/<node>`), on the claim of `claim.uid` only: a claim
    /// deleted and made again under the same name is a [`ApiError::Conflict`].
    async fn apply_status(
        &self,
        node: &str,
        claim: &ClaimRef,
        devices: &[AllocatedDeviceStatus],
    ) -> Result<(), ApiError>;

    /// Watches claim `namespace/name`: its state now, then each change.
    fn watch_claim(&self, namespace: &str, name: &str) -> ClaimEvents;
}

/// The API server over kube-rs.
#[derive(Clone)]
pub struct KubeApi(pub Client);

impl KubeApi {
    fn claims(&self, namespace: &str) -> Api<ResourceClaim> {
        Api::namespaced(self.0.clone(), namespace)
    }

    fn slice_api(&self) -> Api<ResourceSlice> {
        Api::all(self.0.clone())
    }
}

/// The server-side apply body that makes this driver's entries of a claim's status `devices`,
/// with the claim's UID as a precondition (an apply may not change `metadata.uid`: the server
/// refuses it for another object of the same name).
pub fn status_patch(claim: &ClaimRef, devices: &[AllocatedDeviceStatus]) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim.name, "namespace": claim.namespace, "uid": claim.uid},
        "status": { "devices": devices },
    })
}

#[tonic::async_trait]
impl DriverApi for KubeApi {
    async fn claim(&self, namespace: &str, name: &str) -> Result<ResourceClaim, ApiError> {
        let what = || format!("ResourceClaim {namespace}/{name}");
        self.claims(namespace)
            .get(name)
            .await
            .map_err(|e| ApiError::from_kube(what(), e))
    }

    async fn node_uid(&self, name: &str) -> Result<String, ApiError> {
        let what = || format!("Node {name}");
        let node = Api::<Node>::all(self.0.clone())
            .get(name)
            .await
            .map_err(|e| ApiError::from_kube(what(), e))?;
        node.metadata.uid.ok_or_else(|| ApiError::Failed {
            what: what(),
            message: "no UID".into(),
        })
    }

    async fn slices(&self, node: &str) -> Result<Vec<ResourceSlice>, ApiError> {
        let fields = format!("spec.nodeName={node},spec.driver={DRIVER_NAME}");
        let list = self
            .slice_api()
            .list(&ListParams::default().fields(&fields))
            .await
            .map_err(|e| ApiError::from_kube(format!("listing node {node}'s ResourceSlices"), e))?;
        Ok(list.items)
    }

    async fn create_slice(&self, slice: &ResourceSlice) -> Result<ResourceSlice, ApiError> {
        let what = format!("creating ResourceSlice {}", name_of(slice));
        self.slice_api()
            .create(&PostParams::default(), slice)
            .await
            .map_err(|e| ApiError::from_kube(what, e))
    }

    async fn replace_slice(&self, slice: &ResourceSlice) -> Result<ResourceSlice, ApiError> {
        let name = name_of(slice);
        self.slice_api()
            .replace(&name, &PostParams::default(), slice)
            .await
            .map_err(|e| ApiError::from_kube(format!("updating ResourceSlice {name}"), e))
    }

    async fn delete_slice(&self, name: &str) -> Result<(), ApiError> {
        self.slice_api()
            .delete(name, &DeleteParams::default())
            .await
            .map(drop)
            .map_err(|e| ApiError::from_kube(format!("deleting ResourceSlice {name}"), e))
    }

    async fn apply_status(
        &self,
        node: &str,
        claim: &ClaimRef,
        devices: &[AllocatedDeviceStatus],
    ) -> Result<(), ApiError> {
        let params = PatchParams::apply(&format!("{DRIVER_NAME}/{node}")).force();
        let body = status_patch(claim, devices);
        self.claims(&claim.namespace)
            .patch_status(&claim.name, &params, &Patch::Apply(&body))
            .await
            .map(drop)
            .map_err(|e| ApiError::from_kube(format!("the status of ResourceClaim {claim}"), e))
    }

    fn watch_claim(&self, namespace: &str, name: &str) -> ClaimEvents {
        use kube::runtime::watcher::{self, Event};
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let what = format!("watching ResourceClaim {namespace}/{name}");
        let stream =
            watcher::watcher(self.claims(namespace), config).filter_map(move |e| match e {
                Ok(Event::Apply(c) | Event::InitApply(c)) => Some(Ok(Some(c))),
                Ok(Event::Delete(_)) => Some(Ok(None)),
                Ok(Event::Init | Event::InitDone) => None,
                Err(e) => Some(Err(ApiError::Failed {
                    what: what.clone(),
                    message: e.to_string(),
                })),
            });
        Box::pin(stream)
    }
}

fn name_of(slice: &ResourceSlice) -> String {
    slice.metadata.name.clone().unwrap_or_default()
}

#[cfg(test)]
pub mod fake;

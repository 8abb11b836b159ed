//! An API server in memory, for the driver's unit tests: claims, one node, slices with
//! resourceVersions, status applies with the real server's UID check, claim watches, and every
//! call counted. What it does is what tests/dra_apiserver.rs sees the real one do.

use std::collections::BTreeMap;
use std::sync::Mutex;

use k8s_openapi::api::resource::v1::{AllocatedDeviceStatus, ResourceClaim, ResourceSlice};
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::StreamExt;

use super::{ApiError, ClaimEvents, DriverApi};
use crate::records::claim::ClaimRef;

#[derive(Default)]
struct State {
    claims: BTreeMap<(String, String), ResourceClaim>,
    slices: BTreeMap<String, ResourceSlice>,
    version: u64,
    calls: Vec<String>,
}

/// The fake server. `drops_sharing` makes it act as a server without consumable capacity
/// (KEP-5075): it drops `allowMultipleAllocations` from the slices it stores.
pub struct FakeApi {
    state: Mutex<State>,
    node_uid: String,
    pub drops_sharing: bool,
    /// Each claim change: its key and the claim now (None: deleted).
    changes: broadcast::Sender<((String, String), Option<ResourceClaim>)>,
}

impl Default for FakeApi {
    fn default() -> Self {
        FakeApi {
            state: Mutex::default(),
            node_uid: "6b1f0c1e-0000-4000-8000-000000000001".into(),
            drops_sharing: false,
            changes: broadcast::channel(64).0,
        }
    }
}

impl FakeApi {
    fn call(&self, what: String) {
        self.state.lock().unwrap().calls.push(what);
    }

    /// Every call so far, as `verb what`.
    pub fn calls(&self) -> Vec<String> {
        self.state.lock().unwrap().calls.clone()
    }

    /// Creates or replaces a claim (a new UID is the caller's), telling its watches.
    pub fn put_claim(&self, claim: ResourceClaim) {
        let key = (
            claim.metadata.namespace.clone().unwrap_or_default(),
            claim.metadata.name.clone().unwrap_or_default(),
        );
        self.state
            .lock()
            .unwrap()
            .claims
            .insert(key.clone(), claim.clone());
        let _ = self.changes.send((key, Some(claim)));
    }

    pub fn delete_claim(&self, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        self.state.lock().unwrap().claims.remove(&key);
        let _ = self.changes.send((key, None));
    }

    pub fn stored_claim(&self, namespace: &str, name: &str) -> Option<ResourceClaim> {
        let key = (namespace.to_string(), name.to_string());
        self.state.lock().unwrap().claims.get(&key).cloned()
    }

    /// The claim's `status.devices`.
    pub fn status_of(&self, namespace: &str, name: &str) -> Vec<AllocatedDeviceStatus> {
        self.stored_claim(namespace, name)
            .and_then(|c| c.status)
            .and_then(|s| s.devices)
            .unwrap_or_default()
    }

    /// The stored slices, by name.
    pub fn stored_slices(&self) -> BTreeMap<String, ResourceSlice> {
        self.state.lock().unwrap().slices.clone()
    }

    /// Another client deletes slice `name` (no call of the driver's).
    pub fn delete_slice_elsewhere(&self, name: &str) {
        self.state.lock().unwrap().slices.remove(name);
    }

    /// Another client updates slice `name`: a new resourceVersion, the same content.
    pub fn update_slice_elsewhere(&self, name: &str) {
        let slice = self.state.lock().unwrap().slices.get(name).cloned();
        self.store_slice(slice.expect("a stored slice"));
    }

    fn store_slice(&self, mut slice: ResourceSlice) -> ResourceSlice {
        let mut s = self.state.lock().unwrap();
        s.version += 1;
        slice.metadata.resource_version = Some(s.version.to_string());
        if self.drops_sharing {
            for d in slice.spec.devices.iter_mut().flatten() {
                d.allow_multiple_allocations = None;
            }
        }
        let name = slice.metadata.name.clone().unwrap_or_default();
        s.slices.insert(name, slice.clone());
        slice
    }
}

fn not_found(what: String) -> ApiError {
    ApiError::NotFound { what }
}

#[tonic::async_trait]
impl DriverApi for FakeApi {
    async fn claim(&self, namespace: &str, name: &str) -> Result<ResourceClaim, ApiError> {
        self.call(format!("get claim {namespace}/{name}"));
        self.stored_claim(namespace, name)
            .ok_or_else(|| not_found(format!("ResourceClaim {namespace}/{name}")))
    }

    async fn node_uid(&self, name: &str) -> Result<String, ApiError> {
        self.call(format!("get node {name}"));
        Ok(self.node_uid.clone())
    }

    async fn slices(&self, node: &str) -> Result<Vec<ResourceSlice>, ApiError> {
        self.call(format!("list slices {node}"));
        let s = self.state.lock().unwrap();
        Ok(s.slices
            .values()
            .filter(|sl| sl.spec.node_name.as_deref() == Some(node))
            .filter(|sl| sl.spec.driver == crate::dra::config::DRIVER_NAME)
            .cloned()
            .collect())
    }

    async fn create_slice(&self, slice: &ResourceSlice) -> Result<ResourceSlice, ApiError> {
        let name = slice.metadata.name.clone().unwrap_or_default();
        self.call(format!("create slice {name}"));
        if self.state.lock().unwrap().slices.contains_key(&name) {
            return Err(ApiError::Conflict {
                what: format!("creating ResourceSlice {name}"),
                message: "already exists".into(),
            });
        }
        Ok(self.store_slice(slice.clone()))
    }

    async fn replace_slice(&self, slice: &ResourceSlice) -> Result<ResourceSlice, ApiError> {
        let name = slice.metadata.name.clone().unwrap_or_default();
        self.call(format!("replace slice {name}"));
        let current = self.state.lock().unwrap().slices.get(&name).cloned();
        match current {
            None => Err(not_found(format!("ResourceSlice {name}"))),
            Some(c) if c.metadata.resource_version != slice.metadata.resource_version => {
                Err(ApiError::Conflict {
                    what: format!("updating ResourceSlice {name}"),
                    message: "the object has been modified".into(),
                })
            }
            Some(_) => Ok(self.store_slice(slice.clone())),
        }
    }

    async fn delete_slice(&self, name: &str) -> Result<(), ApiError> {
        self.call(format!("delete slice {name}"));
        match self.state.lock().unwrap().slices.remove(name) {
            Some(_) => Ok(()),
            None => Err(not_found(format!("ResourceSlice {name}"))),
        }
    }

    async fn apply_status(
        &self,
        _node: &str,
        claim: &ClaimRef,
        devices: &[AllocatedDeviceStatus],
    ) -> Result<(), ApiError> {
        self.call(format!("apply status {}/{}", claim.namespace, claim.name));
        let key = (claim.namespace.clone(), claim.name.clone());
        let mut s = self.state.lock().unwrap();
        let Some(stored) = s.claims.get_mut(&key) else {
            return Err(not_found(format!("ResourceClaim {claim}")));
        };
        if stored.metadata.uid.as_deref() != Some(claim.uid.as_str()) {
            return Err(ApiError::Conflict {
                what: format!("the status of ResourceClaim {claim}"),
                message: "metadata.uid: field is immutable".into(),
            });
        }
        let status = stored.status.get_or_insert_with(Default::default);
        status.devices = (!devices.is_empty()).then(|| devices.to_vec());
        Ok(())
    }

    fn watch_claim(&self, namespace: &str, name: &str) -> ClaimEvents {
        self.call(format!("watch claim {namespace}/{name}"));
        let key = (namespace.to_string(), name.to_string());
        let now = tokio_stream::iter(std::iter::once(Ok(self.stored_claim(namespace, name))));
        let later = BroadcastStream::new(self.changes.subscribe()).filter_map(move |change| {
            let (changed, claim) = change.ok()?;
            (changed == key).then_some(Ok(claim))
        });
        Box::pin(now.chain(later))
    }
}

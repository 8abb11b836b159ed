//! The driver's loop, in the shape of kube-rs's controllers: one reconcile function that
//! derives what should exist from the node (sysfs), the records (attachment and prepared
//! claims) and the API server, every time, and an error policy (log, then retry after a
//! growing pause). It wakes on an event ([`crate::dra::events`]), after a prepare or unprepare,
//! and every `resyncSeconds`. What it keeps between passes is only what spares writes: the
//! sharing the server supports and the status it last wrote per claim; a restart derives both
//! again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{AllocatedDeviceStatus, ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use tokio::sync::{watch, Notify};

use crate::attach::claim::ClaimStore;
use crate::attach::store::Store;
use crate::dra::claims::Claims;
use crate::dra::config::DRIVER_NAME;
use crate::dra::inventory::{self, InvDevice};
use crate::dra::proto::health_v1::NodeWatchResourcesResponse;
use crate::dra::slices::{self, NodeRef, Sharing};
use crate::dra::{health, status};

/// The reconciler's inputs and the little it keeps between passes.
pub struct Daemon {
    pub client: Client,
    pub claims: Arc<Claims>,
    pub node: NodeRef,
    pub sharing: Sharing,
    pub health: watch::Sender<NodeWatchResourcesResponse>,
    /// The status entries last written per claim UID.
    pub written: BTreeMap<String, Vec<AllocatedDeviceStatus>>,
}

/// A reconcile's failure: what failed, for the log.
type Failure = String;

impl Daemon {
    /// The node's Node object's UID, for the slice's owner reference.
    pub async fn node_ref(client: &Client, name: &str) -> NodeRef {
        let uid = match Api::<Node>::all(client.clone()).get(name).await {
            Ok(n) => n.metadata.uid,
            Err(e) => {
                crate::log_warn!("reading Node {name} ({e}): the slice gets no owner reference");
                None
            }
        };
        NodeRef {
            name: name.into(),
            uid,
        }
    }

    /// Runs until `stop` turns true.
    pub async fn run(mut self, wake: Arc<Notify>, mut stop: watch::Receiver<bool>) {
        let resync = Duration::from_secs(self.claims.cfg.resync_seconds.max(1));
        let mut backoff = Duration::from_secs(1);
        loop {
            match self.reconcile().await {
                Ok(()) => backoff = Duration::from_secs(1),
                Err(e) => {
                    crate::log_error!("reconcile: {e}; retrying in {}s", backoff.as_secs());
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            }
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(resync) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            // Events come in bursts (a netns move is a dozen): take them as one.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// One pass: the node's devices published and their health sent, every prepared claim's
    /// status written, CDI specs without a claim removed.
    pub async fn reconcile(&mut self) -> Result<(), Failure> {
        let claims = self.claims.clone();
        let devices = tokio::task::spawn_blocking(move || {
            claims.sweep_specs();
            inventory::read(&claims.sys, &claims.cfg)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("reading the node's RDMA devices from sysfs: {e}"))?;
        self.send_health(&devices);
        let published = self.publish(&devices).await;
        let statuses = self.write_statuses().await;
        published.and(statuses)
    }

    fn send_health(&self, devices: &[InvDevice]) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let timeout = health::timeout_seconds(self.claims.cfg.resync_seconds);
        self.health.send_replace(health::report(
            &self.node.name,
            devices,
            self.sharing,
            now,
            timeout,
        ));
    }

    /// Makes the node's slice what the devices say; drops any other slice of this driver on
    /// this node.
    async fn publish(&mut self, devices: &[InvDevice]) -> Result<(), Failure> {
        let api: Api<ResourceSlice> = Api::all(self.client.clone());
        let name = slices::slice_name(&self.node.name);
        let mut desired =
            slices::desired_slice(&self.node, devices, &self.claims.cfg, self.sharing);
        let current = api
            .get_opt(&name)
            .await
            .map_err(|e| format!("reading {name}: {e}"))?;
        let stored = match current {
            Some(cur) if slices::same_contents(&cur, &desired) => cur,
            Some(cur) => {
                desired.metadata.resource_version = cur.metadata.resource_version.clone();
                desired.spec.pool.generation = cur.spec.pool.generation + 1;
                let s = api.replace(&name, &PostParams::default(), &desired).await;
                s.map_err(|e| format!("updating ResourceSlice {name}: {e}"))?
            }
            None => {
                let s = api.create(&PostParams::default(), &desired).await;
                s.map_err(|e| format!("creating ResourceSlice {name}: {e}"))?
            }
        };
        if !slices::server_kept_sharing(&desired, &stored) {
            let n = self.claims.cfg.shares_per_device;
            crate::log_warn!(
                "the API server dropped allowMultipleAllocations (no consumable capacity, \
                 KEP-5075): publishing each shared device {n} times instead"
            );
            self.sharing = Sharing::Replicas(n);
            return Box::pin(self.publish(devices)).await;
        }
        self.drop_other_slices(&api, &name).await
    }

    async fn drop_other_slices(&self, api: &Api<ResourceSlice>, keep: &str) -> Result<(), Failure> {
        let fields = format!("spec.nodeName={},spec.driver={DRIVER_NAME}", self.node.name);
        let list = api
            .list(&ListParams::default().fields(&fields))
            .await
            .map_err(|e| format!("listing this node's ResourceSlices: {e}"))?;
        for s in list.items {
            let Some(name) = s.metadata.name.filter(|n| n != keep) else {
                continue;
            };
            api.delete(&name, &DeleteParams::default())
                .await
                .map_err(|e| format!("deleting stale ResourceSlice {name}: {e}"))?;
        }
        Ok(())
    }

    /// Every prepared claim's status from the records; written where it changed.
    async fn write_statuses(&mut self) -> Result<(), Failure> {
        let data_dir = self.claims.cfg.data_dir.clone();
        let read = tokio::task::spawn_blocking(move || {
            let (claims, _) = ClaimStore::new(&data_dir).list();
            let (attachments, _) = Store::new(&data_dir).list_all();
            let failures: Vec<_> = claims
                .iter()
                .map(|c| {
                    ClaimStore::new(&data_dir)
                        .add_failure(&c.claim.uid)
                        .ok()
                        .flatten()
                })
                .collect();
            (claims, attachments, failures)
        })
        .await
        .map_err(|e| e.to_string())?;
        let (claims, attachments, failures) = read;
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let mut errors = Vec::new();
        for (claim, failure) in claims.iter().zip(&failures) {
            let want = status::desired(claim, &attachments, failure.as_ref(), &now);
            let uid = &claim.claim.uid;
            if self
                .written
                .get(uid)
                .is_some_and(|w| status::same(w, &want))
            {
                continue;
            }
            match self
                .patch_status(&claim.claim.namespace, &claim.claim.name, &want)
                .await
            {
                Ok(()) => {
                    self.written.insert(uid.clone(), want);
                }
                Err(e) => errors.push(e),
            }
        }
        self.written
            .retain(|uid, _| claims.iter().any(|c| &c.claim.uid == uid));
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    async fn patch_status(
        &self,
        namespace: &str,
        name: &str,
        devices: &[AllocatedDeviceStatus],
    ) -> Result<(), Failure> {
        let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), namespace);
        let mut body = status::apply_patch(devices);
        body["metadata"] = serde_json::json!({"name": name, "namespace": namespace});
        let params = PatchParams::apply(&format!("{DRIVER_NAME}/{}", self.node.name)).force();
        match api.patch_status(name, &params, &Patch::Apply(&body)).await {
            Ok(_) => Ok(()),
            // The claim is gone: the kubelet unprepares it, which removes the record.
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(format!(
                "writing the status of ResourceClaim {namespace}/{name}: {e}"
            )),
        }
    }
}

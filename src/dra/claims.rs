//! Prepare and unprepare: a claim's allocation turned into the node's prepared-claim record
//! (attach/claim.rs, beside the attachment records) and its CDI spec, and taken back.
//!
//! Both are idempotent and safe to kill at any instant: prepare derives everything from the
//! claim and the node (the same input writes the same bytes), takes the claim's lock and its
//! devices' locks (the keys the CNI locks them by), writes the record first, durably, and the
//! CDI spec after it; unprepare removes the spec, then the record. A driver killed between the
//! two leaves a record naming the spec's path, which the kubelet's retry (prepare again, or
//! unprepare) completes or removes, and a spec without a record is removed by the daemon's
//! sweep. Nothing is kept in memory.

use std::time::Duration;

use k8s_openapi::api::resource::v1::{DeviceRequestAllocationResult, ResourceClaim};
use serde_json::{Map, Value};

use crate::attach::claim::{
    claim_lock_key, ClaimRef, ClaimStore, PreparedClaim, PreparedDevice, ATTACH_FIELDS,
};
use crate::attach::store::Store;
use crate::dra::cdi::{self, CdiDevice};
use crate::dra::config::{DriverConfig, DRIVER_NAME};
use crate::dra::inventory::{self, InvDevice, Kind};
use crate::error::{Error, Result};
use crate::kernel::sysfs::SysRoot;
use crate::kernel::topology::RdmaSysfs;

/// How long prepare waits for a device an ADD holds.
const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// The driver's config keys beside the CNI's attach fields.
const DRIVER_FIELDS: &[&str] = &["umad"];

/// What prepare and unprepare work on: the driver's config, the node's sysfs and name.
pub struct Claims {
    pub cfg: DriverConfig,
    pub sys: SysRoot,
    pub node: String,
}

impl Claims {
    fn store(&self) -> Store {
        Store::new(&self.cfg.data_dir)
    }

    fn claim_store(&self) -> ClaimStore {
        ClaimStore::new(&self.cfg.data_dir)
    }

    /// Prepares `claim`: its devices of this driver, recorded and given a CDI spec.
    pub fn prepare(&self, claim: &ResourceClaim) -> Result<PreparedClaim> {
        let claim_ref = claim_ref(claim)?;
        let results = our_results(claim, &claim_ref)?;
        let inventory = inventory::read(&self.sys, &self.cfg)
            .map_err(|e| Error::io("reading the node's RDMA devices from sysfs", e))?;
        let configs = configs(claim, &claim_ref)?;
        let mut devices = Vec::new();
        let mut cdi_devices = Vec::new();
        for r in &results {
            let inv = self.device_of(r, &inventory, &claim_ref)?;
            let params = params_for(&configs, &r.request);
            let attach = attach_settings(inv, &params, &claim_ref, &r.device)?;
            let umad = params.get("umad").and_then(Value::as_bool).unwrap_or(false);
            devices.push(PreparedDevice {
                request: r.request.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
                share_id: r.share_id.clone(),
                kind: inv.kind.as_str().into(),
                netdev: inv.netdev.clone(),
                ibdev: inv.ibdev.clone(),
                port: inv.port,
                pci_address: inv.pci_address.clone(),
                lock_key: inv.lock_key.clone(),
                cdi_device_ids: vec![cdi::device_id(&claim_ref.uid, &r.device)],
                attach,
            });
            cdi_devices.push((r, inv, umad));
        }
        let prepared = PreparedClaim {
            cdi_spec: Some(
                cdi::spec_path(&self.cfg.cdi_dir, &claim_ref.uid)
                    .display()
                    .to_string(),
            ),
            pod_uids: pod_uids(claim),
            claim: claim_ref,
            devices,
            written_by: Some(env!("CARGO_PKG_VERSION").to_string()),
        };
        let cdi: Vec<CdiDevice<'_>> = cdi_devices
            .iter()
            .map(|(r, inv, umad)| CdiDevice {
                published: &r.device,
                request: &r.request,
                inv,
                umad: *umad,
            })
            .collect();
        let rdma_cm = RdmaSysfs::new(&self.sys)
            .rdma_cm()
            .map_err(|e| Error::io("reading rdma_cm from sysfs", e))?;
        let spec = cdi::spec(&prepared.claim.uid, &cdi, rdma_cm.as_ref());
        self.write_locked(&prepared, &spec)?;
        Ok(prepared)
    }

    /// Record, then spec, under the claim's lock and its devices'.
    fn write_locked(&self, prepared: &PreparedClaim, spec: &Value) -> Result<()> {
        let store = self.store();
        let _claim = store.lock_device(&claim_lock_key(&prepared.claim.uid), LOCK_TIMEOUT)?;
        let mut keys: Vec<&str> = prepared
            .devices
            .iter()
            .map(|d| d.lock_key.as_str())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let _devices = keys
            .iter()
            .map(|k| store.lock_device(k, LOCK_TIMEOUT))
            .collect::<Result<Vec<_>>>()?;
        self.claim_store().save(prepared)?;
        kill_point("dra-record");
        cdi::write(&self.cfg.cdi_dir, &prepared.claim.uid, spec)?;
        kill_point("dra-cdi");
        Ok(())
    }

    /// Unprepares claim `uid`: its CDI spec, then its record; a claim never prepared here is
    /// no error (the kubelet retries and repeats).
    pub fn unprepare(&self, uid: &str) -> Result<()> {
        let store = self.store();
        {
            let _claim = store.lock_device(&claim_lock_key(uid), LOCK_TIMEOUT)?;
            cdi::remove(&self.cfg.cdi_dir, uid)?;
            kill_point("dra-uncdi");
            self.claim_store().remove(uid)?;
        }
        // The claim's lock file and its devices' go with it, unless someone holds them. A sweep
        // rather than the record's keys: a retry after a kill past the record's removal must
        // still find them.
        store.sweep();
        Ok(())
    }

    /// Removes the CDI specs this driver wrote whose claim has no record. Prepare writes the
    /// record first and unprepare removes it last, so a kill leaves none such; this clears a
    /// spec whose record was removed by hand, or by a driver of another data dir.
    pub fn sweep_specs(&self) {
        let claims = self.claim_store();
        for uid in cdi::spec_uids(&self.cfg.cdi_dir) {
            if matches!(claims.load(&uid), Ok(None)) {
                if let Err(e) = cdi::remove(&self.cfg.cdi_dir, &uid) {
                    crate::log_warn!("{e}");
                }
            }
        }
    }

    /// The inventory device a result names, on this node.
    fn device_of<'a>(
        &self,
        r: &DeviceRequestAllocationResult,
        inventory: &'a [InvDevice],
        claim: &ClaimRef,
    ) -> Result<&'a InvDevice> {
        if r.pool != self.node {
            return Err(Error::DeviceNotFound(format!(
                "claim {claim}: device {} of pool {} belongs to node {}, not to this node {}: \
                 the claim was allocated elsewhere; delete the pod so that it is scheduled with \
                 its claim",
                r.device, r.pool, r.pool, self.node
            )));
        }
        crate::dra::slices::inventory_device(inventory, &r.device).ok_or_else(|| {
            Error::DeviceNotFound(format!(
                "claim {claim}: device {} is not on node {} now (its netdev or ib device went \
                 away since it was published); the driver republishes the node's devices, and \
                 a new claim gets a present one",
                r.device, self.node
            ))
        })
    }
}

/// Debug builds kill the driver at a named point (`RDMA_NS_TEST_KILL_AT`), as the CNI's steps do.
fn kill_point(name: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("RDMA_NS_TEST_KILL_AT").is_ok_and(|v| v == name) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
    let _ = name;
}

fn claim_ref(claim: &ResourceClaim) -> Result<ClaimRef> {
    let m = &claim.metadata;
    match (&m.namespace, &m.name, &m.uid) {
        (Some(namespace), Some(name), Some(uid)) => Ok(ClaimRef {
            namespace: namespace.clone(),
            name: name.clone(),
            uid: uid.clone(),
        }),
        _ => Err(Error::State(
            "a ResourceClaim without namespace, name or UID".into(),
        )),
    }
}

/// The allocation results of this driver.
fn our_results(claim: &ResourceClaim, c: &ClaimRef) -> Result<Vec<DeviceRequestAllocationResult>> {
    let allocation = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .ok_or_else(|| {
            Error::State(format!(
                "claim {c} is not allocated; the kubelet prepares only allocated claims"
            ))
        })?;
    Ok(allocation
        .devices
        .iter()
        .flat_map(|d| d.results.iter().flatten())
        .filter(|r| r.driver == DRIVER_NAME)
        .cloned()
        .collect())
}

/// The pods the claim is reserved for.
fn pod_uids(claim: &ResourceClaim) -> Vec<String> {
    let mut uids: Vec<String> = claim
        .status
        .iter()
        .flat_map(|s| s.reserved_for.iter().flatten())
        .filter(|r| r.resource == "pods")
        .map(|r| r.uid.clone())
        .collect();
    uids.sort();
    uids
}

/// One opaque config of this driver: the requests it applies to (empty: all), its parameters.
type Config = (Vec<String>, Map<String, Value>);

/// This driver's opaque configs, class configs first.
fn configs(claim: &ResourceClaim, c: &ClaimRef) -> Result<Vec<Config>> {
    let mut out = Vec::new();
    let allocation = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
    let mut all: Vec<_> = allocation
        .iter()
        .flat_map(|a| a.devices.iter())
        .flat_map(|d| d.config.iter().flatten())
        .collect();
    all.sort_by_key(|cfg| cfg.source != "FromClass");
    for cfg in all {
        let Some(opaque) = cfg.opaque.as_ref().filter(|o| o.driver == DRIVER_NAME) else {
            continue;
        };
        let params = match &opaque.parameters.0 {
            Value::Object(m) => m.clone(),
            Value::Null => Map::new(),
            other => {
                return Err(Error::config(
                    "parameters",
                    format!(
                        "claim {c}: the {DRIVER_NAME} config {} is {other}, not an object",
                        cfg.source
                    ),
                ))
            }
        };
        for key in params.keys() {
            if !ATTACH_FIELDS.contains(&key.as_str()) && !DRIVER_FIELDS.contains(&key.as_str()) {
                return Err(Error::config(
                    key,
                    format!(
                        "claim {c}: the {DRIVER_NAME} config ({}) has an unknown key `{key}`; \
                         known: {}, {}",
                        cfg.source,
                        ATTACH_FIELDS.join(", "),
                        DRIVER_FIELDS.join(", ")
                    ),
                ));
            }
        }
        out.push((cfg.requests.clone().unwrap_or_default(), params));
    }
    Ok(out)
}

/// The merged parameters for `request`: later configs (the claim's) over earlier (the class's).
fn params_for(configs: &[Config], request: &str) -> Map<String, Value> {
    let mut out = Map::new();
    for (requests, params) in configs {
        let applies = requests.is_empty()
            || requests
                .iter()
                .any(|r| r == request || request.starts_with(&format!("{r}/")));
        if applies {
            out.extend(params.clone());
        }
    }
    out
}

/// What the CNI applies over the conf: the kind's defaults (a child of a shared device, a move
/// of a whole one; a Soft-RoCE device on a soft-roce child), then the configs.
fn attach_settings(
    inv: &InvDevice,
    params: &Map<String, Value>,
    claim: &ClaimRef,
    device: &str,
) -> Result<Map<String, Value>> {
    let mut attach = Map::new();
    let mode = match (inv.kind, inv.shared()) {
        (_, false) => "move",
        (Kind::Ipoib, true) => "ipoib",
        _ => "macvlan",
    };
    attach.insert("mode".into(), mode.into());
    if inv.kind == Kind::SoftRoce {
        attach.insert("softRoce".into(), true.into());
    }
    for (k, v) in params {
        if ATTACH_FIELDS.contains(&k.as_str()) {
            attach.insert(k.clone(), v.clone());
        }
    }
    let moved = attach.get("mode").and_then(Value::as_str) == Some("move");
    if moved && inv.shared() {
        return Err(Error::config(
            "mode",
            format!(
                "claim {claim}: device {device} ({}) is shared by several pods' children here \
                 (shared RDMA netns mode, or a Soft-RoCE netdev), so mode move cannot take it \
                 into one pod; use macvlan or ipoib, or run the node in exclusive netns mode",
                inv.netdev
            ),
        ));
    }
    Ok(attach)
}

#[cfg(test)]
mod tests;

//! Prepare and unprepare: a claim's allocation turned into the node's prepared-claim record
//! (records/claim.rs) and its CDI spec (records/cdi.rs, rendered from the record), and taken
//! back.
//!
//! - A claim's own config may set only the keys a claim may (records::claim::CONFIG_KEYS); a
//!   class-only key in it refuses the claim, naming the key, the claim and the DeviceClass to
//!   use instead, and nothing on the node changes.
//! - Preparing a claim already prepared with the same allocation (the kubelet prepares a
//!   restored claim again after a restart, when it makes a pod's sandbox again) answers from the
//!   record and rewrites nothing: by then a device may have moved into the pod and the CNI may
//!   have reported the pod's nodes. Only a spec that is gone (the node rebooted: /var/run is a
//!   tmpfs) is rendered again, from the same record.
//! - Both are idempotent and safe to kill at any instant: prepare takes the claim's lock and its
//!   devices' locks (the keys the CNI locks them by), writes the record first, durably, and the
//!   spec after it; unprepare removes the spec, then the record. A driver killed between the two
//!   leaves a record, which the kubelet's retry (prepare again, or unprepare) completes or
//!   removes, and a spec without a record is removed by the daemon's sweep. Nothing is kept in
//!   memory.

use std::time::Duration;

use k8s_openapi::api::resource::v1::{DeviceRequestAllocationResult, ResourceClaim};
use serde_json::{Map, Value};

use crate::dra::config::{DriverConfig, DRIVER_NAME};
use crate::dra::inventory::{self, InvDevice, Kind};
use crate::error::{Error, Result};
use crate::kernel::sysfs::SysRoot;
use crate::records::attachment::RawMode;
use crate::records::cdi;
use crate::records::claim::{
    is_attach_field, ClaimRef, ClaimStore, PreparedClaim, PreparedDevice, EXTENDED_RESOURCE_CLAIM,
};
use crate::records::store::Store;

/// How long prepare waits for a device an ADD holds.
const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// What prepare and unprepare work on: the driver's config, the node's sysfs and name.
pub struct Claims {
    pub cfg: DriverConfig,
    pub sys: SysRoot,
    pub node: String,
}

impl Claims {
    fn store(&self) -> Store<RawMode> {
        Store::new(&self.cfg.data_dir)
    }

    fn claim_store(&self) -> ClaimStore {
        ClaimStore::new(&self.cfg.data_dir)
    }

    /// Prepares `claim`: its devices of this driver, recorded and given a CDI spec; a claim
    /// prepared already with the same allocation gets the recorded answer.
    pub fn prepare(&self, claim: &ResourceClaim) -> Result<PreparedClaim> {
        let claim_ref = claim_ref(claim)?;
        let results = our_results(claim, &claim_ref)?;
        let configs = configs(claim, &claim_ref)?;
        let allocation = allocation_of(&results, &configs);
        let claims = self.claim_store();
        let _claim_lock = claims.lock(&claim_ref.uid)?;
        if let Some(recorded) = claims
            .load(&claim_ref.uid)?
            .filter(|r| r.allocation == allocation)
        {
            crate::records::kill_point("dra-reprepare");
            cdi::write(
                &self.cfg.cdi_dir,
                &recorded.claim.uid,
                &cdi::render(&recorded, &self.sys)?,
            )?;
            return Ok(recorded);
        }
        let prepared = self.derive(claim, claim_ref, &results, &configs, allocation)?;
        self.write_locked(&prepared)?;
        Ok(prepared)
    }

    /// The record of a claim prepared for the first time (or with another allocation).
    fn derive(
        &self,
        claim: &ResourceClaim,
        claim_ref: ClaimRef,
        results: &[DeviceRequestAllocationResult],
        configs: &[Config],
        allocation: String,
    ) -> Result<PreparedClaim> {
        let inventory = inventory::read(&self.sys, &self.cfg)
            .map_err(|e| Error::io("reading the node's RDMA devices from sysfs", e))?;
        let mut devices = Vec::new();
        for r in results {
            let inv = self.device_of(r, &inventory, &claim_ref)?;
            let params = params_for(configs, &r.request);
            let name = cdi::device_name(&claim_ref.uid, &r.device, r.share_id.as_deref());
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
                cdi_device_ids: vec![cdi::device_id(&name)],
                attach: attach_settings(inv, &params, &claim_ref, &r.device)?,
                umad: params.get("umad").and_then(Value::as_bool).unwrap_or(false),
                rail: inv.rail.clone(),
                pods: Vec::new(),
            });
        }
        refuse_repeated_names(&claim_ref, &devices)?;
        let extended = claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(EXTENDED_RESOURCE_CLAIM));
        Ok(PreparedClaim {
            pod_uids: crate::dra::pods::reserved_pods(claim),
            extended_resource: extended.is_some_and(|v| v == "true"),
            claim: claim_ref,
            devices,
            allocation,
            written_by: Some(env!("CARGO_PKG_VERSION").to_string()),
        })
    }

    /// Record, then spec, under its devices' locks (the claim's is the caller's).
    fn write_locked(&self, prepared: &PreparedClaim) -> Result<()> {
        let store = self.store();
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
        crate::records::kill_point("dra-record");
        let spec = cdi::render(prepared, &self.sys)?;
        cdi::write(&self.cfg.cdi_dir, &prepared.claim.uid, &spec)?;
        crate::records::kill_point("dra-cdi");
        Ok(())
    }

    /// Unprepares claim `uid`: its CDI spec, then its record; a claim never prepared here is
    /// no error (the kubelet retries and repeats).
    pub fn unprepare(&self, uid: &str) -> Result<()> {
        let store = self.store();
        {
            let claims = self.claim_store();
            let _claim = claims.lock(uid)?;
            cdi::remove(&self.cfg.cdi_dir, uid)?;
            crate::records::kill_point("dra-uncdi");
            claims.remove(uid)?;
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
        if is_attach_field(k) {
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

/// Refuses a claim whose devices would get one CDI name twice (the same device twice without
/// shares): a CDI registry refuses a spec whose names repeat, so no container would start.
fn refuse_repeated_names(claim: &ClaimRef, devices: &[PreparedDevice]) -> Result<()> {
    for (i, d) in devices.iter().enumerate() {
        if let Some(other) = devices[..i]
            .iter()
            .find(|o| o.cdi_device_ids == d.cdi_device_ids)
        {
            return Err(Error::config(
                "requests",
                format!(
                    "claim {claim}: requests {} and {} were both allocated device {} without \
                     a share of it, and one device cannot be given twice; the scheduler \
                     allocates a device twice only with consumable capacity (shares): delete \
                     the pod so that the claim is allocated again",
                    other.request, d.request, d.device
                ),
            ));
        }
    }
    Ok(())
}

mod opaque;
use opaque::{allocation_of, configs, params_for, Config};

#[cfg(test)]
mod tests;

//! This node's ResourceSlice: the inventory as the scheduler sees it, and publishing it.
//!
//! One pool per node (pool = the node's name), in as many slices as its devices need: at most
//! 128 devices a slice (resource.k8s.io/v1 ResourceSliceMaxDevices), by device name, slice `i`
//! named `<node>.rdma-ns.io` for the first and `<node>.rdma-ns.io-<i>` after it, each saying
//! how many the pool has (`resourceSliceCount`). Derived from the inventory on every reconcile
//! and written only when the pool differs from the one the API server holds; then every slice
//! of the pool is written with the pool's generation one higher (the scheduler counts a pool's
//! slices of its highest generation only, so a slice left at the old one would hide its
//! devices). No state is kept here, so a restarted driver publishes what the node has, and
//! nothing more.
//!
//! Sharing: a shared device (shared RDMA netns mode, where many pods' children share a port,
//! and every Soft-RoCE netdev) is published with `allowMultipleAllocations: true` (consumable
//! capacity, KEP-5075, beta and on by default since 1.36). An API server without it drops the
//! field; the publisher sees that in what the server returns and publishes each shared device
//! `sharesPerDevice` times instead (`<device>-s<N>`), each allocatable once, as the RDMA shared
//! device plugin's `rdmaHcaMax` did.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    Device, DeviceAttribute, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::dra::config::{DriverConfig, DRIVER_NAME};
use crate::dra::inventory::InvDevice;
use crate::kernel::nldev::NetnsMode;
use crate::records::claim::DEVICE_ID_PREFIX;

/// The most devices one ResourceSlice may hold (resource.k8s.io/v1 ResourceSliceMaxDevices).
pub const MAX_DEVICES: usize = 128;

/// How shared devices are offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// `allowMultipleAllocations` (KEP-5075).
    MultipleAllocations,
    /// `n` copies of each shared device, each allocatable once (servers without KEP-5075).
    Replicas(u32),
}

/// The node the slice is for: its name and UID (the slice's owner, so it goes with the Node).
#[derive(Debug, Clone)]
pub struct NodeRef {
    pub name: String,
    pub uid: Option<String>,
}

/// The object name of slice `index` of the node's pool.
pub fn slice_name(node: &str, index: usize) -> String {
    match index {
        0 => format!("{node}.{DRIVER_NAME}"),
        i => format!("{node}.{DRIVER_NAME}-{i}"),
    }
}

/// The slices this node should have, in order. The pool's generation is the caller's.
pub fn desired_slices(
    node: &NodeRef,
    devices: &[InvDevice],
    cfg: &DriverConfig,
    sharing: Sharing,
) -> Vec<ResourceSlice> {
    let mut published: Vec<Device> = Vec::new();
    for d in devices {
        match (d.shared(), sharing) {
            (true, Sharing::MultipleAllocations) => {
                let mut dev = device(d, &d.name, cfg);
                dev.allow_multiple_allocations = Some(true);
                published.push(dev);
            }
            (true, Sharing::Replicas(n)) => {
                published.extend((0..n).map(|i| device(d, &share_name(&d.name, i), cfg)));
            }
            (false, _) => published.push(device(d, &d.name, cfg)),
        }
    }
    published.sort_by(|a, b| a.name.cmp(&b.name));
    let chunks: Vec<Vec<Device>> = match published.is_empty() {
        true => vec![Vec::new()],
        false => published
            .chunks(MAX_DEVICES)
            .map(<[Device]>::to_vec)
            .collect(),
    };
    let count = chunks.len() as i64;
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, devices)| slice(node, i, count, devices))
        .collect()
}

fn slice(node: &NodeRef, index: usize, count: i64, devices: Vec<Device>) -> ResourceSlice {
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(slice_name(&node.name, index)),
            owner_references: node.uid.as_ref().map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: node.name.clone(),
                    uid: uid.clone(),
                    controller: Some(true),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: ResourceSliceSpec {
            driver: DRIVER_NAME.into(),
            node_name: Some(node.name.clone()),
            pool: ResourcePool {
                name: node.name.clone(),
                generation: 0,
                resource_slice_count: count,
            },
            devices: Some(devices),
            ..Default::default()
        },
    }
}

/// The name of share `i` of shared device `base` (servers without consumable capacity).
pub fn share_name(base: &str, i: u32) -> String {
    let suffix = format!("-s{i}");
    let keep = crate::dra::inventory::MAX_NAME - suffix.len();
    format!(
        "{}{suffix}",
        &base[..base.len().min(keep)].trim_end_matches('-')
    )
}

/// The inventory device a published name stands for: itself, or the device a share belongs to.
pub fn inventory_device<'a>(devices: &'a [InvDevice], published: &str) -> Option<&'a InvDevice> {
    if let Some(d) = devices.iter().find(|d| d.name == published) {
        return Some(d);
    }
    let (base, n) = published.rsplit_once("-s")?;
    n.parse::<u32>().ok()?;
    devices
        .iter()
        .find(|d| d.shared() && share_name(&d.name, 0).strip_suffix("-s0") == Some(base))
}

fn string(v: impl Into<String>) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(v.into()),
        ..Default::default()
    }
}

fn int(v: i64) -> DeviceAttribute {
    DeviceAttribute {
        int: Some(v),
        ..Default::default()
    }
}

/// Attribute values are at most 64 characters; longer ones are left out rather than refused.
fn put(attrs: &mut BTreeMap<String, DeviceAttribute>, name: &str, v: Option<DeviceAttribute>) {
    let fits = |a: &DeviceAttribute| a.string.as_ref().map_or(true, |s| s.len() <= 64);
    if let Some(v) = v.filter(fits) {
        attrs.insert(name.to_string(), v);
    }
}

/// One published device: `name` (the inventory's, or a share's) with `d`'s attributes.
fn device(d: &InvDevice, name: &str, cfg: &DriverConfig) -> Device {
    let mut a = BTreeMap::new();
    put(
        &mut a,
        "resource.kubernetes.io/pcieRoot",
        d.pcie_root.clone().map(string),
    );
    put(
        &mut a,
        "resource.kubernetes.io/pciBusID",
        d.pci_address.clone().map(string),
    );
    put(
        &mut a,
        "resource.kubernetes.io/numaNode",
        d.numa_node.map(|n| int(n.into())),
    );
    put(&mut a, "kind", Some(string(d.kind.as_str())));
    put(&mut a, "netdev", Some(string(&d.netdev)));
    put(&mut a, "ibDevice", d.ibdev.clone().map(string));
    put(&mut a, "port", d.port.map(|p| int(p.into())));
    put(&mut a, "linkLayer", Some(string(link_layer(d))));
    put(&mut a, "portState", d.port_state.clone().map(string));
    put(&mut a, "speedMbps", d.speed_mbps.map(int));
    put(&mut a, "nodeGuid", d.node_guid.clone().map(string));
    put(&mut a, "firmware", d.firmware.clone().map(string));
    put(&mut a, "driver", d.driver.clone().map(string));
    put(&mut a, "function", d.function.map(string));
    put(
        &mut a,
        "rdmaNetnsMode",
        d.netns_mode.map(|m| string(netns_mode(m))),
    );
    put(&mut a, "rail", d.rail.clone().map(string));
    put(
        &mut a,
        "k8s.cni.cncf.io/deviceID",
        Some(string(format!("{DEVICE_ID_PREFIX}{name}"))),
    );
    put(
        &mut a,
        "k8s.cni.cncf.io/resourceName",
        Some(string(cfg.resource_name(d.kind.as_str()))),
    );
    Device {
        name: name.to_string(),
        attributes: Some(a),
        ..Default::default()
    }
}

fn link_layer(d: &InvDevice) -> &'static str {
    match d.kind {
        crate::dra::inventory::Kind::Ipoib => "InfiniBand",
        _ => "Ethernet",
    }
}

fn netns_mode(m: NetnsMode) -> &'static str {
    crate::node::values::netns_mode_name(m)
}

/// Whether two slices publish the same thing (the generation aside).
pub fn same_contents(a: &ResourceSlice, b: &ResourceSlice) -> bool {
    a.metadata.name == b.metadata.name
        && a.spec.devices == b.spec.devices
        && a.spec.node_name == b.spec.node_name
        && a.spec.pool.name == b.spec.pool.name
        && a.spec.pool.resource_slice_count == b.spec.pool.resource_slice_count
        && a.spec.driver == b.spec.driver
}

/// Whether the stored slices are the desired ones, of one generation (the generation aside).
pub fn same_pool(desired: &[ResourceSlice], stored: &[ResourceSlice]) -> bool {
    let mut stored: Vec<&ResourceSlice> = stored.iter().collect();
    stored.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut desired: Vec<&ResourceSlice> = desired.iter().collect();
    desired.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let one_generation = stored
        .windows(2)
        .all(|w| w[0].spec.pool.generation == w[1].spec.pool.generation);
    one_generation
        && stored.len() == desired.len()
        && stored
            .iter()
            .zip(&desired)
            .all(|(s, d)| same_contents(s, d))
}

/// Whether the server kept `allowMultipleAllocations` on the shared devices it was sent: a
/// server without consumable capacity drops the field.
pub fn server_kept_sharing(sent: &[ResourceSlice], stored: &[ResourceSlice]) -> bool {
    let shared = |slices: &[ResourceSlice]| -> Vec<String> {
        let mut names: Vec<String> = slices
            .iter()
            .flat_map(|s| s.spec.devices.iter().flatten())
            .filter(|d| d.allow_multiple_allocations == Some(true))
            .map(|d| d.name.clone())
            .collect();
        names.sort();
        names
    };
    shared(sent) == shared(stored)
}

#[cfg(test)]
mod tests;

//! `rdma-ns-dra`, the DRA driver (feature `dra`; nothing here reaches the CNI binary): a
//! DaemonSet process on every RDMA node that
//! - publishes the node's RDMA ports as ResourceSlices ([`inventory`] → [`slices`] →
//!   [`publisher`]) and republishes them within seconds of a change ([`events`]: rtnetlink, RDMA
//!   netlink, the records directory);
//! - is the kubelet's DRA plugin ([`plugin`]: registration, NodePrepareResources and
//!   NodeUnprepareResources over [`claims`]; the health stream of [`health`]);
//! - keeps each prepared claim's pods as its `reservedFor` says ([`pods`]);
//! - writes each claim's `status.devices` from the attachment records the CNI writes
//!   ([`status`]).
//!
//! Every call to the API server goes through [`api::DriverApi`], which the unit tests fake; the
//! records the CNI and the driver share are `crate::records`. The binary is src/bin/rdma-ns-dra.rs.
//!
//! The CNI attaches the pod's device itself, synchronously, from the prepared-claim record
//! (`attach::claim`): the driver never sits between the runtime and the pod's interface.
//! Every loop derives what should exist from the kernel, the records and the API, each time
//! ([`daemon`]): a restart loses nothing.

pub mod api;
pub mod background;
pub mod claims;
pub mod config;
pub mod daemon;
pub mod events;
pub mod health;
pub mod inventory;
pub mod plugin;
pub mod pods;
pub mod publisher;
pub mod slices;
pub mod status;

/// The kubelet's gRPC APIs, compiled from proto/ (k8s.io/kubelet v0.37.2) by build.rs.
pub mod proto {
    /// `pluginregistration` (v1): GetInfo, NotifyRegistrationStatus.
    pub mod registration {
        tonic::include_proto!("pluginregistration");
    }
    /// `k8s.io.kubelet.pkg.apis.dra.v1`: NodePrepareResources, NodeUnprepareResources.
    pub mod dra_v1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
    }
    /// `v1` of dra-health (KEP-4680): NodeWatchResources.
    pub mod health_v1 {
        tonic::include_proto!("v1");
    }
}

//! `rdma-ns-dra`, the DRA driver (feature `dra`; nothing here reaches the CNI binary): a
//! DaemonSet process on every RDMA node that
//! - publishes the node's RDMA ports as a ResourceSlice ([`inventory`] → [`slices`]) and
//!   republishes it within seconds of a change ([`events`]: rtnetlink, RDMA netlink, the
//!   records directory);
//! - is the kubelet's DRA plugin ([`plugin`]: registration, NodePrepareResources and
//!   NodeUnprepareResources over [`claims`] and [`cdi`]; the health stream of [`health`]);
//! - writes each claim's `status.devices` from the attachment records the CNI writes
//!   ([`status`]).
//!
//! The CNI attaches the pod's device itself, synchronously, from the prepared-claim record
//! (`attach::claim`): the driver never sits between the runtime and the pod's interface.
//! Every loop derives what should exist from the kernel, the records and the API, each time
//! ([`daemon`]): a restart loses nothing.

pub mod cdi;
pub mod claims;
pub mod config;
pub mod daemon;
pub mod events;
pub mod health;
pub mod inventory;
pub mod plugin;
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

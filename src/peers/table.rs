//! The peers' schemas, read from each plugin's own sources (named per peer in `source`). A
//! field is listed under the name its Go struct's json tag gives it (an untagged field under
//! its Go name, which encoding/json matches ignoring case).

use serde_json::{json, Value};

use super::Action::{Carries, Drops, Maps, MapsWith};
use super::{Converted, Field, Implied, Matching, Peer, Role};

/// Fields of the conflist (or of a single conf's top level), the same for every peer.
pub static CONFLIST_FIELDS: &[Field] = &[
    Field {
        name: "cniVersion",
        action: Carries,
        why: "missing, or a version rdma-ns does not speak (0.1.0, 0.2.0), gives `1.0.0` and a \
              warning",
    },
    Field {
        name: "name",
        action: Carries,
        why: "missing gives `rdma-net` and a warning",
    },
];

/// rdma-cni's `args.cni.debug` switches its log to debug.
fn debug_log_level(debug: &Value) -> Converted {
    (
        (debug == &Value::Bool(true)).then(|| json!("debug")),
        Vec::new(),
    )
}

/// Mellanox's rdma-cni fork's `rdmaQoS: {"tos", "tc"}` (types.go `RDMAQoS`, two uint32 that
/// Go matches ignoring case): `tos` is a whole traffic class byte, which the fork writes into
/// RDMA CM's default_roce_tos in the pod; `tc` is MLNX_OFED's per-device
/// `tc/1/traffic_class`, which forces a class on every QP of the device, and has no rdma-ns
/// field. roceQos has a priority, the fork none: DSCP's class (dscp >> 3) is written, the map
/// an mlx5 port trusting DSCP starts with.
fn roce_qos_of_rdma_qos(v: &Value) -> Converted {
    let get = |key: &str| {
        v.as_object()?
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_u64())
    };
    let tos = match get("tos") {
        Some(Some(tos)) if tos <= 255 => tos as u8,
        _ => {
            return (
                None,
                vec![format!(
                    "not carried: {v} has no `tos` byte (0 to 255) to read a DSCP from"
                )],
            )
        }
    };
    let dscp = tos >> 2;
    let mut notes = vec![format!(
        "`tos` {tos} is DSCP {dscp}; `priority` {} written, DSCP {dscp}'s class (dscp >> 3, \
         the map an mlx5 port trusting DSCP starts with): check it against the node's \
         (`rdma-ns doctor`)",
        dscp >> 3
    )];
    if matches!(tos & 3, 1 | 3) {
        notes.push(format!(
            "`tos` {tos} has ECN bits {:02b}, not ECT(0) (10): `ecn` false written",
            tos & 3
        ));
    }
    if let Some(Some(tc)) = get("tc") {
        notes.push(format!(
            "`tc` {tc} not carried: MLNX_OFED's global traffic class of the device, which \
             rdma-ns does not write (`rdma-ns doctor` reports one that differs from the \
             network's)"
        ));
    }
    let qos = json!({"dscp": dscp, "ecn": tos & 3 == 2, "priority": dscp >> 3});
    (Some(qos), notes)
}

const CAPABILITIES: Field = Field {
    name: "capabilities",
    action: Carries,
    why: "the runtime answers them in `runtimeConfig`, which the IPAM plugin reads too",
};
const RUNTIME_CONFIG: Field = Field {
    name: "runtimeConfig",
    action: Carries,
    why: "rdma-ns reads its `deviceID` first, and its `mac` and `ips`",
};
const DNS_FROM_IPAM: Field = Field {
    name: "dns",
    action: Drops,
    why: "the plugin copied the conf's `dns` into its result; rdma-ns reports the DNS its IPAM \
          plugin returns: put the nameservers in the IPAM config (static takes `dns`)",
};

static RDMA_CNI: &[Field] = &[
    Field {
        name: "deviceID",
        action: Maps("deviceID"),
        why: "the VF's PCI address; without it both find the VF from the pod interface",
    },
    Field {
        name: "rdmaQoS",
        action: MapsWith("roceQos", roce_qos_of_rdma_qos),
        why: "Mellanox's fork (network-operator branches): `tos` becomes `dscp` (tos >> 2) and \
         `ecn` (ECN bits 10), `priority` is DSCP's class (dscp >> 3), with a warning; \
         `tc`, MLNX_OFED's global traffic class, is not carried",
    },
    Field {
        name: "args.cni.debug",
        action: MapsWith("logLevel", debug_log_level),
        why: "`true` becomes `\"debug\"`; `false` leaves rdma-ns's default",
    },
    Field {
        name: "args.cni.rdmaDeviceName",
        action: Drops,
        why: "declared by one rdma-cni release and never read: the ib device keeps its name",
    },
    Field {
        name: "args.cni.IgnoreUnknown",
        action: Drops,
        why: "rdma-ns reads `IgnoreUnknown` from CNI_ARGS only",
    },
    CAPABILITIES,
    RUNTIME_CONFIG,
    Field {
        name: "ipam",
        action: Drops,
        why: "chained, rdma-cni never ran IPAM (the plugin before it did); mode `rdma` does not \
              either",
    },
    Field {
        name: "dns",
        action: Drops,
        why: "rdma-cni passed the previous result on, DNS included; so does mode `rdma`",
    },
];

static IPOIB_CNI: &[Field] = &[
    Field {
        name: "master",
        action: Maps("master"),
        why: "the parent IPoIB netdev (an altname works too)",
    },
    Field {
        name: "ipam",
        action: Carries,
        why: "ipoib-cni's `{}` for no address means the same to rdma-ns",
    },
    CAPABILITIES,
    RUNTIME_CONFIG,
    DNS_FROM_IPAM,
];

static IPOIB_CNI_FIRST: &[Field] = &[
    Field {
        name: "master",
        action: Maps("master"),
        why: "the parent IPoIB netdev (an altname works too)",
    },
    Field {
        name: "mtu",
        action: Drops,
        why: "documented, never read (its NetConf has no MTU): the child got the kernel's MTU; \
              set `mtu` on the rdma-ns entry to choose one",
    },
    Field {
        name: "ipam",
        action: Carries,
        why: "`{}` for no address means the same to rdma-ns",
    },
    CAPABILITIES,
    RUNTIME_CONFIG,
    DNS_FROM_IPAM,
];

static HOST_DEVICE: &[Field] = &[
    Field {
        name: "device",
        action: Maps("device"),
        why: "host-device's first choice: of several selectors given, only the one host-device \
              used is carried",
    },
    Field {
        name: "hwaddr",
        action: Maps("hwaddr"),
        why: "host-device's second choice",
    },
    Field {
        name: "kernelpath",
        action: Maps("kernelpath"),
        why: "host-device's third choice",
    },
    Field {
        name: "pciBusID",
        action: Maps("pciBusID"),
        why: "host-device's last choice, replaced by `runtimeConfig.deviceID` in both",
    },
    Field {
        name: "DPDKMode",
        action: Drops,
        why: "host-device sets it itself from the driver of the `pciBusID` device: one bound to \
              vfio-pci, uio_pci_generic or igb_uio has no netdev and stays put; rdma-ns moves \
              netdevs, so keep host-device for DPDK devices",
    },
    Field {
        name: "useInterfaceNetwork",
        action: Drops,
        why: "rdma-ns does not copy the host device's addresses, routes and rules into the pod: \
              put them in the IPAM config (static)",
    },
    Field {
        name: "ipam",
        action: Carries,
        why: "as in host-device, delegated after the move",
    },
    CAPABILITIES,
    Field {
        name: "runtimeConfig",
        action: Carries,
        why: "its `deviceID` (a PCI or auxiliary device) comes first, as in host-device",
    },
    DNS_FROM_IPAM,
];

const SRIOV_VF_SETTING: &str = "stays on the sriov entry: a VF setting made through the PF, \
                                which rdma-ns does not make";

static SRIOV_CNI: &[Field] = &[
    Field {
        name: "deviceID",
        action: Carries,
        why: "stays on the sriov entry; mode `rdma` after it reads the same VF from it",
    },
    Field {
        name: "vlan",
        action: Carries,
        why: SRIOV_VF_SETTING,
    },
    Field {
        name: "vlanQoS",
        action: Carries,
        why: SRIOV_VF_SETTING,
    },
    Field {
        name: "vlanProto",
        action: Carries,
        why: SRIOV_VF_SETTING,
    },
    Field {
        name: "mac",
        action: Carries,
        why: SRIOV_VF_SETTING,
    },
    Field {
        name: "spoofchk",
        action: Carries,
        why: SRIOV_VF_SETTING,
    },
    Field {
        name: "trust",
        action: Carries,
        why: SRIOV_VF_SETTING,
    },
    Field {
        name: "link_state",
        action: Carries,
        why: SRIOV_VF_SETTING,
    },
    Field {
        name: "min_tx_rate",
        action: Carries,
        why: SRIOV_VF_SETTING,
    },
    Field {
        name: "max_tx_rate",
        action: Carries,
        why: SRIOV_VF_SETTING,
    },
    Field {
        name: "mtu",
        action: Carries,
        why: "stays on the sriov entry, which sets the VF netdev's MTU",
    },
    Field {
        name: "logLevel",
        action: Carries,
        why: "stays on the sriov entry, for its own log (its `warning` and `panic` are no rdma-ns \
              levels)",
    },
    Field {
        name: "logFile",
        action: Carries,
        why: "stays on the sriov entry, for its own log",
    },
    Field {
        name: "ipam",
        action: Carries,
        why: "stays on the sriov entry; mode `rdma` passes its result on",
    },
    Field {
        name: "capabilities",
        action: Carries,
        why: "stays on the sriov entry",
    },
    Field {
        name: "runtimeConfig",
        action: Carries,
        why: "stays on the sriov entry (its `mac`)",
    },
    Field {
        name: "dns",
        action: Carries,
        why: "stays on the sriov entry",
    },
];

const SRIOV_V1_STAYS: &str = "stays on the sriov entry";

static SRIOV_CNI_V1_DPDK: &[Field] = &[
    Field {
        name: "dpdk",
        action: Carries,
        why: "stays on the sriov entry: sriov-cni v1 binds the VF to its `dpdk_driver` instead of \
              moving the netdev, so no ib device reaches the pod: no rdma-ns entry after it, an \
              `rdma` entry after it is dropped",
    },
    Field {
        name: "master",
        action: Carries,
        why: SRIOV_V1_STAYS,
    },
    Field {
        name: "deviceID",
        action: Carries,
        why: SRIOV_V1_STAYS,
    },
    Field {
        name: "deviceinfo",
        action: Carries,
        why: SRIOV_V1_STAYS,
    },
    Field {
        name: "vlan",
        action: Carries,
        why: SRIOV_V1_STAYS,
    },
    Field {
        name: "l2enable",
        action: Carries,
        why: SRIOV_V1_STAYS,
    },
    Field {
        name: "cniDir",
        action: Carries,
        why: SRIOV_V1_STAYS,
    },
    Field {
        name: "Sharedvf",
        action: Carries,
        why: SRIOV_V1_STAYS,
    },
    Field {
        name: "DPDKMode",
        action: Carries,
        why: SRIOV_V1_STAYS,
    },
    Field {
        name: "ipam",
        action: Carries,
        why: SRIOV_V1_STAYS,
    },
    Field {
        name: "capabilities",
        action: Carries,
        why: SRIOV_V1_STAYS,
    },
    Field {
        name: "dns",
        action: Carries,
        why: SRIOV_V1_STAYS,
    },
];

static IB_SRIOV_CNI: &[Field] = &[
    Field {
        name: "deviceID",
        action: Carries,
        why: "stays on the ib-sriov entry",
    },
    Field {
        name: "rdmaIsolation",
        action: Carries,
        why: "`true`: ib-sriov-cni moves the VF's ib device into the pod before the IPoIB \
              netdev (moved after it, the kernel re-creates the netdev), so nothing follows it \
              and an `rdma` entry after it is dropped; unset or `false` with an `rdma` entry \
              after it: set to `true`, the `rdma` entry dropped",
    },
    Field {
        name: "vfioPciMode",
        action: Carries,
        why: "stays on the ib-sriov entry; `true`: the VF is bound to vfio-pci, has no netdev, \
              and an `rdma` entry after it is dropped",
    },
    Field {
        name: "pkey",
        action: Carries,
        why: "stays on the ib-sriov entry, for ib-kubernetes to program the subnet manager",
    },
    Field {
        name: "guid",
        action: Carries,
        why: "stays on the ib-sriov entry (documented; the plugin takes the GUID from \
              `runtimeConfig.infinibandGUID` or `args.cni.guid`)",
    },
    Field {
        name: "link_state",
        action: Carries,
        why: "stays on the ib-sriov entry: a VF setting made through the PF",
    },
    Field {
        name: "ibKubernetesEnabled",
        action: Carries,
        why: "stays on the ib-sriov entry",
    },
    Field {
        name: "publishPfGuid",
        action: Carries,
        why: "stays on the ib-sriov entry",
    },
    Field {
        name: "kubeconfig",
        action: Carries,
        why: "stays on the ib-sriov entry",
    },
    Field {
        name: "args",
        action: Carries,
        why: "stays on the ib-sriov entry (`cni.guid` and `cni.mellanox.infiniband.app` from \
              ib-kubernetes)",
    },
    Field {
        name: "runtimeConfig",
        action: Carries,
        why: "stays on the ib-sriov entry (its `infinibandGUID`)",
    },
    Field {
        name: "ipam",
        action: Carries,
        why: "stays on the ib-sriov entry",
    },
    Field {
        name: "capabilities",
        action: Carries,
        why: "stays on the ib-sriov entry",
    },
    Field {
        name: "dns",
        action: Carries,
        why: "stays on the ib-sriov entry",
    },
];

static IB_SRIOV_CNI_FIRST: &[Field] = &[
    Field {
        name: "deviceID",
        action: Carries,
        why: "stays on the entry",
    },
    Field {
        name: "link_state",
        action: Carries,
        why: "stays on the entry",
    },
    Field {
        name: "ipam",
        action: Carries,
        why: "stays on the entry",
    },
];

static IB_SRIOV_FIRST_IMPLIED: &[Implied] = &[Implied {
    behaviour: "the ib device stays in the host (no `rdmaIsolation` yet)",
    writes: None,
    why: "an `rdma` entry after it is dropped: move to type `ib-sriov` and set `rdmaIsolation`",
}];

static IPOIB_IMPLIED: &[Implied] = &[
    Implied {
        behaviour: "the child gets its parent's P_Key",
        writes: None,
        why: "rdma-ns's `pkey` defaults to the parent's as well",
    },
    Implied {
        behaviour: "the child gets its parent's mode",
        writes: None,
        why: "`ipoibMode` `auto` picks connected when the parent's address has the RC flag: set \
              it to the parent's mode to keep that",
    },
    Implied {
        behaviour: "user-space multicast on (umcast 1)",
        writes: Some(("umcast", "true")),
        why: "ipoib-cni set it on every child",
    },
];

static IPOIB_FIRST_IMPLIED: &[Implied] = &[
    Implied {
        behaviour: "P_Key 0x7fff",
        writes: Some(("pkey", "\"0x7fff\"")),
        why: "the default partition, whatever the parent's",
    },
    Implied {
        behaviour: "datagram mode",
        writes: Some(("ipoibMode", "\"datagram\"")),
        why: "these releases never made connected-mode children",
    },
    Implied {
        behaviour: "user-space multicast on (umcast 1)",
        writes: Some(("umcast", "true")),
        why: "set on every child",
    },
];

static HOST_DEVICE_IMPLIED: &[Implied] = &[Implied {
    behaviour: "the ib device stays in the host",
    writes: None,
    why: "with `rdma` `auto` move mode moves it too in exclusive netns mode; with an `rdma` \
          entry after host-device, migrate writes `\"rdma\": \"exclusive\"`",
}];

static SRIOV_IMPLIED: &[Implied] = &[Implied {
    behaviour: "a VF bound to vfio-pci gets no netdev (DPDK mode, decided from the driver)",
    writes: None,
    why: "such a VF has no ib device for mode `rdma` to move, which migrate cannot see in a \
          conf: drop the rdma-ns entry for DPDK pools",
}];

pub static PEERS: &[Peer] = &[
    Peer {
        plugin: "rdma-cni",
        plugin_type: "rdma",
        matching: Matching::Type,
        role: Role::Replaced("rdma"),
        source: "k8snetworkplumbingwg/rdma-cni `pkg/types/types.go` (RdmaNetConf, \
                 RdmaCNIArgs), `cmd/rdma/main.go`, `README.md`; `rdmaQoS` (RDMAQoS) from \
                 Mellanox's fork of network-operator 26.4/26.7",
        fields: RDMA_CNI,
        implied: &[],
    },
    Peer {
        plugin: "ipoib-cni",
        plugin_type: "ipoib",
        matching: Matching::Type,
        role: Role::Replaced("ipoib"),
        source: "Mellanox/ipoib-cni `pkg/types/types.go` (NetConf), `pkg/ipoib/ipoib.go`, \
                 `cmd/ipoib/main.go`, `README.md`",
        fields: IPOIB_CNI,
        implied: IPOIB_IMPLIED,
    },
    Peer {
        plugin: "ipoib-cni, first releases",
        plugin_type: "infiniband",
        matching: Matching::With("master"),
        role: Role::Replaced("ipoib"),
        source: "Mellanox/ipoib-cni at 1690f85 `infiniband.go` (NetConf, createIpoibLink), \
                 `build.sh` (builds `bin/infiniband`), `README.md`",
        fields: IPOIB_CNI_FIRST,
        implied: IPOIB_FIRST_IMPLIED,
    },
    Peer {
        plugin: "host-device",
        plugin_type: "host-device",
        matching: Matching::Type,
        role: Role::Replaced("move"),
        source: "containernetworking/plugins `plugins/main/host-device/host-device.go` \
                 (NetConf), `host-network-state.go`; containernetworking/cni.dev \
                 `content/plugins/v1.1/main/host-device.md`",
        fields: HOST_DEVICE,
        implied: HOST_DEVICE_IMPLIED,
    },
    Peer {
        plugin: "sriov-cni",
        plugin_type: "sriov",
        matching: Matching::Type,
        role: Role::KeptWithRdmaAfter,
        source: "k8snetworkplumbingwg/sriov-cni `pkg/types/types.go` (SriovNetConf), \
                 `pkg/config/config.go`, `docs/configuration-reference.md`, `README.md`",
        fields: SRIOV_CNI,
        implied: SRIOV_IMPLIED,
    },
    Peer {
        plugin: "sriov-cni v1, DPDK",
        plugin_type: "sriov",
        matching: Matching::With("dpdk"),
        role: Role::Kept,
        source: "k8snetworkplumbingwg/sriov-cni v1 `pkg/types/types.go` (NetConf), \
                 `pkg/dpdk/dpdk.go`, `sriov/sriov.go` (setupVF)",
        fields: SRIOV_CNI_V1_DPDK,
        implied: &[],
    },
    Peer {
        plugin: "ib-sriov-cni",
        plugin_type: "ib-sriov",
        matching: Matching::Type,
        role: Role::Kept,
        source: "k8snetworkplumbingwg/ib-sriov-cni `pkg/types/types.go` (IbSriovNetConf), \
                 `cmd/ib-sriov-cni/main.go` (doVFConfig), `README.md`",
        fields: IB_SRIOV_CNI,
        implied: &[],
    },
    Peer {
        plugin: "ib-sriov-cni, first releases",
        plugin_type: "infiniband",
        matching: Matching::Without("master"),
        role: Role::Kept,
        source: "k8snetworkplumbingwg/ib-sriov-cni at 001d3f7 `cmd/infiniband/main.go`, \
                 `pkg/types/types.go`, `README.md`",
        fields: IB_SRIOV_CNI_FIRST,
        implied: IB_SRIOV_FIRST_IMPLIED,
    },
];

//! The device-plugin half of the recipe (conf/device-plugins/, conf/operators/): each file is
//! checked against the fields its consuming project accepts, and the names are checked to agree
//! end to end: pod → NAD → device-plugin resource, and operator objects → the same resources and
//! the NAD they render. Needs no root.
//!
//! The schemas below are written by hand from each project's source, where the JSON/YAML is
//! decoded:
//! - RDMA shared device plugin: Mellanox/k8s-rdma-shared-dev-plugin `pkg/types/types.go`
//!   (`UserConfigList`, `UserConfig`, `Selectors`), its rules from `ValidateConfigs` in
//!   `pkg/resources/resources_manager.go` (resource name `^[a-zA-Z0-9_]+$` and unique,
//!   `rdmaHcaMax` >= 0, `selectors` or the deprecated `devices` but not both, default prefix
//!   `rdma`), `kubeletRootDir` from its `deployment/k8s/base/configmap.yaml`;
//! - SR-IOV network device plugin: k8snetworkplumbingwg/sriov-network-device-plugin
//!   `pkg/types/types.go` (`ResourceConfList`, `ResourceConfig`, `NetDeviceSelectors`,
//!   `AuxNetDeviceSelectors` with `auxTypes`; `IsRdma`/`NeedVhostNet` carry no json tag, so
//!   Go's decoder takes `isRdma`/`needVhostNet`);
//! - network-operator: Mellanox/network-operator `api/v1alpha1/nicclusterpolicy_types.go`
//!   (`NicClusterPolicySpec`, `DevicePluginSpec`, `ImageSpec`, `SecondaryNetworkSpec`);
//! - sriov-network-operator: k8snetworkplumbingwg/sriov-network-operator
//!   `api/v1/sriovnetwork_types.go`, `api/v1/sriovnetworknodepolicy_types.go`,
//!   `api/v1/sriovnetworkpoolconfig_types.go` (kubebuilder enums included), and the NAD it
//!   renders from a SriovNetwork as in `api/v1/testdata/TestRendering/chained.golden`.
//!
//! The check is stricter than the projects' decoders, which ignore unknown keys: an unknown key
//! here is a typo the plugin would silently drop.

use std::collections::BTreeSet;

use serde_json::{json, Value};

#[derive(Clone, Copy)]
enum T {
    Str,
    Bool,
    Int {
        min: i64,
        max: i64,
    },
    Strs,
    StrMap,
    /// Any JSON: a Kubernetes type this recipe does not use (affinity, tolerations, ...).
    Any,
    OneOf(&'static [&'static str]),
    Obj(&'static [F]),
    List(&'static T),
    /// A string holding JSON of this shape.
    Json(&'static T),
}

struct F(&'static str, T, bool);

const NONNEG: T = T::Int {
    min: 0,
    max: i64::MAX,
};

const META: T = T::Obj(&[
    F("name", T::Str, true),
    F("namespace", T::Str, false),
    F("labels", T::StrMap, false),
    F("annotations", T::StrMap, false),
]);

// Mellanox/k8s-rdma-shared-dev-plugin pkg/types/types.go
const SHARED_SELECTORS: T = T::Obj(&[
    F("vendors", T::Strs, false),
    F("deviceIDs", T::Strs, false),
    F("drivers", T::Strs, false),
    F("ifNames", T::Strs, false),
    F("linkTypes", T::Strs, false),
]);
const SHARED_CONFIG: T = T::Obj(&[
    F("kubeletRootDir", T::Str, false),
    F("periodicUpdateInterval", NONNEG, false),
    F(
        "configList",
        T::List(&T::Obj(&[
            F("resourceName", T::Str, true),
            F("resourcePrefix", T::Str, false),
            F("rdmaHcaMax", NONNEG, false),
            F("devices", T::Strs, false),
            F("selectors", SHARED_SELECTORS, false),
        ])),
        true,
    ),
]);

// k8snetworkplumbingwg/sriov-network-device-plugin pkg/types/types.go
const NET_SELECTORS: T = T::Obj(&[
    F("vendors", T::Strs, false),
    F("devices", T::Strs, false),
    F("drivers", T::Strs, false),
    F("pciAddresses", T::Strs, false),
    F("pfNames", T::Strs, false),
    F("rootDevices", T::Strs, false),
    F("linkTypes", T::Strs, false),
    F("isRdma", T::Bool, false),
    F("acpiIndexes", T::Strs, false),
    F("ddpProfiles", T::Strs, false),
    F("needVhostNet", T::Bool, false),
    F("vdpaType", T::OneOf(&["virtio", "vhost"]), false),
    F("pKeys", T::Strs, false),
]);
const AUX_SELECTORS: T = T::Obj(&[
    F("vendors", T::Strs, false),
    F("devices", T::Strs, false),
    F("drivers", T::Strs, false),
    F("pfNames", T::Strs, false),
    F("rootDevices", T::Strs, false),
    F("linkTypes", T::Strs, false),
    F("isRdma", T::Bool, false),
    F("acpiIndexes", T::Strs, false),
    F("auxTypes", T::Strs, false),
]);
const SRIOVDP_RESOURCE: T = T::Obj(&[
    F("resourcePrefix", T::Str, false),
    F("resourceName", T::Str, true),
    F(
        "deviceType",
        T::OneOf(&["netDevice", "accelerator", "auxNetDevice"]),
        false,
    ),
    F("excludeTopology", T::Bool, false),
    // Checked per deviceType in sriovdp_errors: its selectors' shape depends on it.
    F("selectors", T::Any, false),
    F("additionalInfo", T::Any, false),
]);
const SRIOVDP_CONFIG: T = T::Obj(&[F("resourceList", T::List(&SRIOVDP_RESOURCE), true)]);

// Mellanox/network-operator api/v1alpha1/nicclusterpolicy_types.go
const IMAGE: &[F] = &[
    F("image", T::Str, true),
    F("repository", T::Str, true),
    F("version", T::Str, true),
    F("imagePullSecrets", T::Strs, false),
    F("containerResources", T::Any, false),
];
const IMAGE_SPEC: T = T::Obj(IMAGE);
const IMAGE_WITH_CONFIG: T = T::Obj(&[
    F("image", T::Str, true),
    F("repository", T::Str, true),
    F("version", T::Str, true),
    F("imagePullSecrets", T::Strs, false),
    F("containerResources", T::Any, false),
    F("config", T::Str, false),
]);
fn device_plugin(config: &'static T) -> T {
    T::Obj(Box::leak(Box::new([
        F("image", T::Str, true),
        F("repository", T::Str, true),
        F("version", T::Str, true),
        F("imagePullSecrets", T::Strs, false),
        F("containerResources", T::Any, false),
        F("config", T::Json(config), false),
        F("useCdi", T::Bool, false),
    ])))
}

fn nic_cluster_policy() -> T {
    let spec: &'static [F] = Box::leak(Box::new([
        F("ofedDriver", T::Any, false),
        F(
            "rdmaSharedDevicePlugin",
            device_plugin(&SHARED_CONFIG),
            false,
        ),
        F("sriovDevicePlugin", device_plugin(&SRIOVDP_CONFIG), false),
        F("ibKubernetes", T::Any, false),
        F(
            "secondaryNetwork",
            T::Obj(&[
                F("multus", IMAGE_WITH_CONFIG, false),
                F("cniPlugins", IMAGE_SPEC, false),
                F("ipoib", IMAGE_SPEC, false),
            ]),
            false,
        ),
        F("nvIpam", T::Any, false),
        F("nicFeatureDiscovery", T::Any, false),
        F("docaTelemetryService", T::Any, false),
        F("nicConfigurationOperator", T::Any, false),
        F("spectrumXOperator", T::Any, false),
        F("nodeAffinity", T::Any, false),
        F("tolerations", T::Any, false),
        F("deploymentNodeAffinity", T::Any, false),
        F("deploymentTolerations", T::Any, false),
    ]));
    object("mellanox.com/v1alpha1", "NicClusterPolicy", T::Obj(spec))
}

fn object(api: &'static str, kind: &'static str, spec: T) -> T {
    T::Obj(Box::leak(Box::new([
        F("apiVersion", T::OneOf(Box::leak(Box::new([api]))), true),
        F("kind", T::OneOf(Box::leak(Box::new([kind]))), true),
        F("metadata", META, true),
        F("spec", spec, true),
    ])))
}

// k8snetworkplumbingwg/sriov-network-operator api/v1/*_types.go
const SRIOV_API: &str = "sriovnetwork.openshift.io/v1";
const ON_OFF: T = T::OneOf(&["on", "off"]);
const SRIOV_NETWORK_SPEC: T = T::Obj(&[
    F("networkNamespace", T::Str, false),
    F("resourceName", T::Str, true),
    F("capabilities", T::Json(&T::Any), false),
    F("ipam", T::Json(&T::Any), false),
    F("vlan", T::Int { min: 0, max: 4096 }, false),
    F("vlanQoS", T::Int { min: 0, max: 7 }, false),
    F("spoofChk", ON_OFF, false),
    F("trust", ON_OFF, false),
    F("allMulticast", ON_OFF, false),
    F("linkState", T::OneOf(&["auto", "enable", "disable"]), false),
    F("minTxRate", NONNEG, false),
    F("maxTxRate", NONNEG, false),
    F("metaPlugins", T::Str, false),
]);
const NODE_POLICY_SPEC: T = T::Obj(&[
    F("resourceName", T::Str, true),
    F("nodeSelector", T::StrMap, true),
    F("priority", T::Int { min: 0, max: 99 }, false),
    F(
        "mtu",
        T::Int {
            min: 1,
            max: i64::MAX,
        },
        false,
    ),
    F("numVfs", NONNEG, true),
    F(
        "nicSelector",
        T::Obj(&[
            F("vendor", T::Str, false),
            F("deviceID", T::Str, false),
            F("rootDevices", T::Strs, false),
            F("pfNames", T::Strs, false),
            F("netFilter", T::Str, false),
        ]),
        true,
    ),
    F("deviceType", T::OneOf(&["netdevice", "vfio-pci"]), false),
    F("isRdma", T::Bool, false),
    F("needVhostNet", T::Bool, false),
    F("linkType", T::OneOf(&["eth", "ETH", "ib", "IB"]), false),
    F("eSwitchMode", T::OneOf(&["legacy", "switchdev"]), false),
    F("vdpaType", T::OneOf(&["virtio", "vhost"]), false),
    F("excludeTopology", T::Bool, false),
    F("externallyManaged", T::Bool, false),
    F("bridge", T::Any, false),
    F("devlinkParams", T::Any, false),
]);
const POOL_CONFIG_SPEC: T = T::Obj(&[
    F("ovsHardwareOffloadConfig", T::Any, false),
    F(
        "nodeSelector",
        T::Obj(&[
            F("matchLabels", T::StrMap, false),
            F("matchExpressions", T::Any, false),
        ]),
        false,
    ),
    F("maxUnavailable", T::Any, false),
    F("rdmaMode", T::OneOf(&["shared", "exclusive"]), false),
]);

/// Every way `v` departs from `t`, as "path: what" lines.
fn errors(path: &str, v: &Value, t: T, out: &mut Vec<String>) {
    let mut bad = |what: String| out.push(format!("{path}: {what}"));
    match t {
        T::Any => {}
        T::Str => {
            if !v.is_string() {
                bad(format!("want a string, got {v}"));
            }
        }
        T::Bool => {
            if !v.is_boolean() {
                bad(format!("want true or false, got {v}"));
            }
        }
        T::Int { min, max } => match v.as_i64() {
            Some(n) if (min..=max).contains(&n) => {}
            _ => bad(format!("want an integer in {min}..={max}, got {v}")),
        },
        T::Strs => {
            if !v.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
                bad(format!("want a list of strings, got {v}"));
            }
        }
        T::StrMap => {
            if !v
                .as_object()
                .is_some_and(|m| m.values().all(Value::is_string))
            {
                bad(format!("want a map of strings, got {v}"));
            }
        }
        T::OneOf(allowed) => {
            if !v.as_str().is_some_and(|s| allowed.contains(&s)) {
                bad(format!("want one of {allowed:?}, got {v}"));
            }
        }
        T::List(item) => match v.as_array() {
            Some(a) => {
                for (i, x) in a.iter().enumerate() {
                    errors(&format!("{path}[{i}]"), x, *item, out);
                }
            }
            None => bad(format!("want a list, got {v}")),
        },
        T::Json(inner) => match v.as_str().map(serde_json::from_str::<Value>) {
            Some(Ok(parsed)) => errors(&format!("{path}(json)"), &parsed, *inner, out),
            Some(Err(e)) => bad(format!("not JSON: {e}")),
            None => bad(format!("want a string of JSON, got {v}")),
        },
        T::Obj(fields) => {
            let Some(m) = v.as_object() else {
                return bad(format!("want an object, got {v}"));
            };
            for key in m.keys() {
                if !fields.iter().any(|f| f.0 == key) {
                    let known: Vec<&str> = fields.iter().map(|f| f.0).collect();
                    out.push(format!("{path}: unknown key {key:?} (known: {known:?})"));
                }
            }
            for F(key, ft, required) in fields {
                match m.get(*key) {
                    Some(x) => errors(&format!("{path}.{key}"), x, *ft, out),
                    None if *required => out.push(format!("{path}: missing {key:?}")),
                    None => {}
                }
            }
        }
    }
}

fn conf(rel: &str) -> String {
    let path = format!("{}/conf/{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(rel: &str) -> Value {
    serde_norway::from_str(&conf(rel)).unwrap_or_else(|e| panic!("conf/{rel}: {e}"))
}

fn config_json(configmap: &Value, file: &str) -> Value {
    assert_eq!(configmap["apiVersion"], "v1", "{file}");
    assert_eq!(configmap["kind"], "ConfigMap", "{file}");
    let text = configmap["data"]["config.json"]
        .as_str()
        .unwrap_or_else(|| panic!("{file}: data.config.json"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{file}: config.json: {e}"))
}

/// The RDMA shared device plugin's config, checked as `ValidateConfigs` does beyond the shape.
fn shared_errors(c: &Value) -> Vec<String> {
    let mut out = Vec::new();
    errors("config.json", c, SHARED_CONFIG, &mut out);
    let list = c["configList"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        out.push("configList: no resources configuration found".into());
    }
    let mut names = BTreeSet::new();
    for (i, r) in list.iter().enumerate() {
        let name = r["resourceName"].as_str().unwrap_or("");
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.push(format!(
                "configList[{i}]: resource name {name:?} contains invalid characters"
            ));
        }
        if !names.insert(name.to_string()) {
            out.push(format!(
                "configList[{i}]: resource name {name:?} already exists"
            ));
        }
        let selectors = r["selectors"].as_object().is_some_and(|m| {
            m.values()
                .any(|v| v.as_array().is_some_and(|a| !a.is_empty()))
        });
        let devices = r["devices"].as_array().is_some_and(|a| !a.is_empty());
        if selectors == devices {
            out.push(format!(
                "configList[{i}]: exactly one of \"selectors\" and \"devices\" (selectors preferred)"
            ));
        }
    }
    out
}

/// The SR-IOV network device plugin's config; selectors by deviceType, as a single object or a
/// list of them.
fn sriovdp_errors(c: &Value) -> Vec<String> {
    let mut out = Vec::new();
    errors("config.json", c, SRIOVDP_CONFIG, &mut out);
    for (i, r) in c["resourceList"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let shape = match r["deviceType"].as_str().unwrap_or("netDevice") {
            "auxNetDevice" => AUX_SELECTORS,
            "netDevice" => NET_SELECTORS,
            _ => T::Any,
        };
        let path = format!("resourceList[{i}].selectors");
        match &r["selectors"] {
            Value::Array(a) => {
                for (j, s) in a.iter().enumerate() {
                    errors(&format!("{path}[{j}]"), s, shape, &mut out);
                }
            }
            s => errors(&path, s, shape, &mut out),
        }
    }
    out
}

fn assert_clean(file: &str, errs: Vec<String>) {
    assert!(errs.is_empty(), "{file}:\n  {}", errs.join("\n  "));
}

/// Resources the shared plugin advertises (`rdma/` unless `resourcePrefix` says otherwise), with
/// each one's ifNames selector.
fn shared_resources(c: &Value) -> Vec<(String, Vec<String>)> {
    c["configList"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let prefix = r["resourcePrefix"].as_str().unwrap_or("rdma");
            let ifnames = r["selectors"]["ifNames"]
                .as_array()
                .or(r["devices"].as_array())
                .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
                .unwrap_or_default();
            (
                format!("{prefix}/{}", r["resourceName"].as_str().unwrap()),
                ifnames,
            )
        })
        .collect()
}

/// Resources the SR-IOV plugin advertises. Its own default prefix (a command-line flag) differs
/// between deployments, so the recipe names it in every entry.
fn sriovdp_resources(c: &Value) -> Vec<(String, Value)> {
    c["resourceList"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let prefix = r["resourcePrefix"]
                .as_str()
                .expect("every recipe resource names its resourcePrefix");
            (
                format!("{prefix}/{}", r["resourceName"].as_str().unwrap()),
                r.clone(),
            )
        })
        .collect()
}

/// conf/nad-*.yaml: (file, NAD, its conflist).
fn nads() -> Vec<(String, Value, Value)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/conf");
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        if file.starts_with("nad-") && file.ends_with(".yaml") {
            let nad = yaml(&file);
            let conflist: Value =
                serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
            out.push((file, nad, conflist));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 4, "{}", out.len());
    out
}

fn rdma_ns_entry(conflist: &Value) -> Value {
    conflist["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "rdma-ns")
        .cloned()
        .expect("an rdma-ns plugin")
}

#[test]
fn device_plugin_configmaps_are_what_the_plugins_accept() {
    let f = "device-plugins/rdma-shared-dev-plugin.yaml";
    let cm = yaml(f);
    assert_eq!(
        cm["metadata"]["name"], "rdma-devices",
        "the plugin's manifests mount this ConfigMap"
    );
    assert_clean(f, shared_errors(&config_json(&cm, f)));

    let f = "device-plugins/sriov-device-plugin.yaml";
    let cm = yaml(f);
    assert_eq!(
        cm["metadata"]["name"], "sriovdp-config",
        "the plugin's manifests mount this ConfigMap"
    );
    let c = config_json(&cm, f);
    assert_clean(f, sriovdp_errors(&c));
    // Every pool hands out RDMA-capable functions with their char devices; the SF pool is an
    // auxiliary-device pool of SFs.
    for (name, r) in sriovdp_resources(&c) {
        let sel = &r["selectors"];
        assert_eq!(sel["isRdma"], true, "{name}");
        if r["deviceType"] == "auxNetDevice" {
            assert_eq!(sel["auxTypes"], json!(["sf"]), "{name}");
        }
    }
}

#[test]
fn operator_objects_are_what_the_operators_accept() {
    let mut errs = Vec::new();
    errors(
        "nicclusterpolicy.yaml",
        &yaml("operators/nicclusterpolicy.yaml"),
        nic_cluster_policy(),
        &mut errs,
    );
    let sriov = |kind, spec| object(SRIOV_API, kind, spec);
    errors(
        "sriovnetwork-chained.yaml",
        &yaml("operators/sriovnetwork-chained.yaml"),
        sriov("SriovNetwork", SRIOV_NETWORK_SPEC),
        &mut errs,
    );
    errors(
        "sriovnetworknodepolicy.yaml",
        &yaml("operators/sriovnetworknodepolicy.yaml"),
        sriov("SriovNetworkNodePolicy", NODE_POLICY_SPEC),
        &mut errs,
    );
    errors(
        "sriovnetworkpoolconfig.yaml",
        &yaml("operators/sriovnetworkpoolconfig.yaml"),
        sriov("SriovNetworkPoolConfig", POOL_CONFIG_SPEC),
        &mut errs,
    );
    assert_clean("conf/operators", errs);

    // The operator deploys the same plugins with the same configs as the ConfigMaps.
    let ncp = yaml("operators/nicclusterpolicy.yaml");
    for (key, file) in [
        (
            "rdmaSharedDevicePlugin",
            "device-plugins/rdma-shared-dev-plugin.yaml",
        ),
        (
            "sriovDevicePlugin",
            "device-plugins/sriov-device-plugin.yaml",
        ),
    ] {
        let from_ncp: Value =
            serde_json::from_str(ncp["spec"][key]["config"].as_str().unwrap()).unwrap();
        assert_eq!(
            from_ncp,
            config_json(&yaml(file), file),
            "NicClusterPolicy {key}.config and {file}"
        );
    }
    assert_clean(
        "nicclusterpolicy rdmaSharedDevicePlugin",
        shared_errors(
            &serde_json::from_str(
                ncp["spec"]["rdmaSharedDevicePlugin"]["config"]
                    .as_str()
                    .unwrap(),
            )
            .unwrap(),
        ),
    );
    assert_clean(
        "nicclusterpolicy sriovDevicePlugin",
        sriovdp_errors(
            &serde_json::from_str(ncp["spec"]["sriovDevicePlugin"]["config"].as_str().unwrap())
                .unwrap(),
        ),
    );
}

#[test]
fn pod_nads_and_device_plugins_agree_end_to_end() {
    let shared = shared_resources(&config_json(
        &yaml("device-plugins/rdma-shared-dev-plugin.yaml"),
        "rdma-shared-dev-plugin.yaml",
    ));
    let sriov = sriovdp_resources(&config_json(
        &yaml("device-plugins/sriov-device-plugin.yaml"),
        "sriov-device-plugin.yaml",
    ));
    let nads = nads();
    for (file, nad, conflist) in &nads {
        let resource = nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
            .as_str()
            .unwrap_or_else(|| panic!("{file}: resourceName annotation"));
        let entry = rdma_ns_entry(conflist);
        let mode = entry["mode"].as_str().unwrap_or("move");
        let in_shared = shared.iter().find(|(r, _)| r == resource);
        let in_sriov = sriov.iter().any(|(r, _)| r == resource);
        assert!(
            in_shared.is_some() != in_sriov,
            "{file}: {resource} must be served by exactly one device plugin (shared: {shared:?}, sriov: {:?})",
            sriov.iter().map(|(r, _)| r).collect::<Vec<_>>()
        );
        match mode {
            // The shared plugin needs shared netns mode and hands out an index, not a device:
            // only child modes, whose parent is `master`, fit it; and that parent must be one
            // of the HCAs the plugin gives the pod.
            "macvlan" | "ipoib" => {
                let (_, ifnames) = in_shared.unwrap_or_else(|| {
                    panic!("{file}: {mode} needs the shared plugin, not {resource}")
                });
                let master = entry["master"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{file}: master"));
                assert!(
                    ifnames.iter().any(|i| i == master),
                    "{file}: master {master} is not among {resource}'s ifNames {ifnames:?}"
                );
            }
            // A whole VF (or SF) per pod from the SR-IOV plugin, passed as deviceID.
            "move" | "rdma" => {
                assert!(
                    in_sriov,
                    "{file}: {mode} needs a VF from the SR-IOV plugin, not {resource}"
                );
                assert_eq!(
                    entry["capabilities"]["deviceID"], true,
                    "{file}: Multus passes the VF as deviceID"
                );
            }
            other => panic!("{file}: mode {other}"),
        }
    }

    // The pod requests a served resource and a network that uses it.
    let pod = yaml("pod.yaml");
    let network = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
        .as_str()
        .unwrap();
    let (file, nad, _) = nads
        .iter()
        .find(|(_, n, _)| n["metadata"]["name"] == network)
        .unwrap_or_else(|| panic!("pod.yaml: no NAD named {network}"));
    let resource = nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
        .as_str()
        .unwrap();
    let limits = pod["spec"]["containers"][0]["resources"]["limits"]
        .as_object()
        .unwrap();
    assert!(
        limits.contains_key(resource),
        "pod.yaml requests {:?}, but network {network} ({file}) needs {resource}",
        limits.keys()
    );

    // sriov-network-operator: the node policy makes the VFs of the sriovdp pool, the pool config
    // puts the same nodes in exclusive mode, the SriovNetwork renders nad-rdma-chained.yaml.
    let policy = yaml("operators/sriovnetworknodepolicy.yaml");
    let vf = sriov
        .iter()
        .find(|(r, _)| r == "nvidia.com/rdma_vf")
        .expect("nvidia.com/rdma_vf in sriovdp-config");
    assert_eq!(
        format!(
            "nvidia.com/{}",
            policy["spec"]["resourceName"].as_str().unwrap()
        ),
        vf.0
    );
    assert_eq!(policy["spec"]["isRdma"], true);
    let dp_pfs: Vec<&str> = vf.1["selectors"]["pfNames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().split('#').next().unwrap())
        .collect();
    for pf in policy["spec"]["nicSelector"]["pfNames"].as_array().unwrap() {
        assert!(
            dp_pfs.contains(&pf.as_str().unwrap()),
            "policy PF {pf} not in the device plugin's pfNames {dp_pfs:?}"
        );
    }
    let pool = yaml("operators/sriovnetworkpoolconfig.yaml");
    assert_eq!(pool["spec"]["rdmaMode"], "exclusive");
    assert_eq!(
        pool["spec"]["nodeSelector"]["matchLabels"], policy["spec"]["nodeSelector"],
        "the pool is the policy's nodes"
    );

    let net = yaml("operators/sriovnetwork-chained.yaml");
    let spec = &net["spec"];
    let ipam: Value = serde_json::from_str(spec["ipam"].as_str().unwrap()).unwrap();
    let meta: Value = serde_json::from_str(spec["metaPlugins"].as_str().unwrap()).unwrap();
    let name = net["metadata"]["name"].as_str().unwrap();
    let (file, nad, conflist) = nads
        .iter()
        .find(|(_, n, _)| n["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no conf/nad-*.yaml for SriovNetwork {name}"));
    assert_eq!(
        nad["metadata"]["namespace"], spec["networkNamespace"],
        "{file}"
    );
    assert_eq!(
        nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"],
        json!(format!(
            "nvidia.com/{}",
            spec["resourceName"].as_str().unwrap()
        )),
        "{file}"
    );
    let plugins = conflist["plugins"].as_array().unwrap();
    assert_eq!(plugins.len(), 2, "{file}: sriov, then the metaPlugins");
    assert_eq!(
        (&plugins[0]["type"], &plugins[0]["ipam"]),
        (&json!("sriov"), &ipam),
        "{file}"
    );
    assert_eq!(
        plugins[1], meta,
        "{file}: the metaPlugins entry is the chained rdma-ns"
    );
}

#[test]
fn the_checks_reject_what_the_plugins_would_misread() {
    let shared = config_json(&yaml("device-plugins/rdma-shared-dev-plugin.yaml"), "x");
    let sriov = config_json(&yaml("device-plugins/sriov-device-plugin.yaml"), "x");
    let mut broken = Vec::new();
    let mut s = shared.clone();
    s["configList"][0]["rdmaHcaMax"] = json!(-1);
    broken.push(("negative rdmaHcaMax", shared_errors(&s)));
    let mut s = shared.clone();
    s["configList"][0]["resourceName"] = json!("hca-shared");
    broken.push(("a '-' in resourceName", shared_errors(&s)));
    let mut s = shared.clone();
    s["configList"][0]["devices"] = json!(["ib0"]);
    broken.push(("devices beside selectors", shared_errors(&s)));
    let mut s = shared.clone();
    s["configList"][0]["selectors"]["ifname"] = json!(["ib0"]);
    broken.push(("a misspelt selector", shared_errors(&s)));
    let mut s = sriov.clone();
    s["resourceList"][0]["selectors"]["auxTypes"] = json!(["sf"]);
    broken.push(("auxTypes in a netDevice pool", sriovdp_errors(&s)));
    let mut s = sriov.clone();
    s["resourceList"][1]["selectors"]["isRdma"] = json!("true");
    broken.push(("isRdma as a string", sriovdp_errors(&s)));
    let mut s = sriov.clone();
    s["resourceList"][0]
        .as_object_mut()
        .unwrap()
        .remove("resourceName");
    broken.push(("no resourceName", sriovdp_errors(&s)));
    let mut pool = yaml("operators/sriovnetworkpoolconfig.yaml");
    pool["spec"]["rdmaMode"] = json!("Exclusive");
    let mut e = Vec::new();
    errors(
        "pool",
        &pool,
        object(SRIOV_API, "SriovNetworkPoolConfig", POOL_CONFIG_SPEC),
        &mut e,
    );
    broken.push(("rdmaMode outside its enum", e));
    let mut ncp = yaml("operators/nicclusterpolicy.yaml");
    ncp["spec"]["rdmaSharedDevicePlugin"]["config"] = json!("{not json");
    let mut e = Vec::new();
    errors("ncp", &ncp, nic_cluster_policy(), &mut e);
    broken.push(("a device-plugin config that is not JSON", e));
    for (what, errs) in broken {
        assert!(!errs.is_empty(), "{what} was accepted");
    }
}

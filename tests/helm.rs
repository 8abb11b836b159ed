//! The Helm chart install/helm/rdma-ns (issue 40 §3), with the lab's helm
//! (`install/lab/build.sh helm`: `$RDMA_NS_LAB_CACHE`, default ~/.cache/rdma-ns/lab,
//! `bin/helm-<version>/helm`, the version pinned in install/lab/versions):
//! - `helm lint --strict` passes with the default values and with everything on;
//! - values.schema.json refuses bad values with helm's message naming the value, and agrees
//!   with the driver's own parser (src/dra/config.rs) on every limit of its config, both ways;
//! - what the chart renders is what install/ and conf/ hold: the same objects, RBAC rules,
//!   policy, DeviceClass selectors, DaemonSet specs (security contexts, mounts), driver config,
//!   NADs and device plugin ConfigMap, compared as parsed YAML; values reach where they should;
//! - a real kube-apiserver v1.37.2 (the lab's, tests/common/apiserver.rs) accepts the rendered
//!   manifests in a server-side dry run, with Multus's own NetworkAttachmentDefinition CRD from
//!   the lab's build (`install/lab/build.sh multus`).

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::apiserver::{kube_bin, lab_bin_dir, lab_kube_dir, repo, run, ApiServer};
use rdma_ns::dra::config::DriverConfig;
use serde::Deserialize;
use serde_json::{json, Value};

const CHART: &str = "install/helm/rdma-ns";
const EVERYTHING_ON: &str = "install/helm/rdma-ns/ci/everything-on-values.yaml";
/// The parts that are off by default, on, with every other value at its default.
const OPTIONAL_PARTS_ON: &[&str] = &[
    "--set",
    "extendedResourceClass.enabled=true",
    "--set",
    "nads.enabled=true",
    "--set",
    "devicePluginConfig.enabled=true",
];

/// The lab's helm, with its cache, config and data dirs in a directory of its own (removed on
/// drop), so that a test run writes nothing under HOME.
struct Helm {
    bin: PathBuf,
    home: PathBuf,
}

impl Helm {
    fn new() -> Helm {
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let bin = lab_bin_dir("helm").join("helm");
        assert!(
            bin.exists(),
            "{} is missing: build it with install/lab/build.sh helm (tests/run.sh does)",
            bin.display()
        );
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let home = std::env::temp_dir().join(format!("rdma-ns-helm-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).unwrap();
        Helm { bin, home }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        for (var, dir) in [
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_DATA_HOME", "data"),
        ] {
            c.env(var, self.home.join(dir));
        }
        c.current_dir(repo("")).args(args);
        c
    }

    fn output(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("helm")
    }

    /// `helm template rdma-ns CHART ARGS...`: the rendered manifests.
    fn template(&self, args: &[&str]) -> String {
        run(self.cmd(&["template", "rdma-ns", CHART]).args(args))
    }

    /// A values file in the helm's dir, for `-f`.
    fn values_file(&self, name: &str, values: &Value) -> String {
        let path = self.home.join(name);
        std::fs::write(&path, values.to_string()).unwrap();
        path.display().to_string()
    }
}

impl Drop for Helm {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The YAML documents of `text`, empty ones left out.
fn docs(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{e}: {text}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// Objects by "Kind/name".
fn by_name(docs: Vec<Value>) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for d in docs {
        let (kind, name) = (&d["kind"], &d["metadata"]["name"]);
        let key = format!("{}/{}", kind.as_str().unwrap(), name.as_str().unwrap());
        assert!(out.insert(key.clone(), d).is_none(), "{key} twice");
    }
    out
}

fn project_file(path: &str) -> Vec<Value> {
    docs(&std::fs::read_to_string(repo(path)).unwrap())
}

/// What the cluster recipe installs today: install/daemonset.yaml and install/dra/*.yaml.
fn project_objects() -> BTreeMap<String, Value> {
    let files = [
        "install/daemonset.yaml",
        "install/dra/rbac.yaml",
        "install/dra/configmap.yaml",
        "install/dra/deviceclasses.yaml",
        "install/dra/daemonset.yaml",
    ];
    by_name(files.iter().flat_map(|f| project_file(f)).collect())
}

#[test]
fn lint_strict_passes_with_default_values_and_with_everything_on() {
    let helm = Helm::new();
    for extra in [&[][..], &["-f", EVERYTHING_ON]] {
        let mut args = vec!["lint", "--strict", CHART];
        args.extend_from_slice(extra);
        let out = helm.output(&args);
        assert!(out.status.success(), "helm {args:?}: {}", text(&out));
        assert!(
            text(&out).contains("1 chart(s) linted, 0 chart(s) failed"),
            "{}",
            text(&out)
        );
    }
    // The same lint fails the chart on a bad value.
    let out = helm.output(&[
        "lint",
        "--strict",
        CHART,
        "--set",
        "driver.config.sharesPerDevice=0",
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("sharesPerDevice"), "{}", text(&out));
}

/// `helm template` with `values` (merged over the defaults): Ok, or Err with helm's message.
fn render_with(helm: &Helm, values: &Value) -> Result<String, String> {
    let file = helm.values_file("case.json", values);
    let out = helm.output(&["template", "rdma-ns", CHART, "-f", &file]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(text(&out))
    }
}

/// Driver config fragments at and past each limit of src/dra/config.rs, and whether the
/// driver takes them; the field is the one its refusal names.
fn driver_config_limits() -> Vec<(&'static str, Value, bool)> {
    let r = |n| "r".repeat(n);
    vec![
        ("sharesPerDevice", json!({"sharesPerDevice": 0}), false),
        ("sharesPerDevice", json!({"sharesPerDevice": 1}), true),
        ("sharesPerDevice", json!({"sharesPerDevice": 64}), true),
        ("sharesPerDevice", json!({"sharesPerDevice": 65}), false),
        ("sharesPerDevice", json!({"sharesPerDevice": "16"}), false),
        ("resyncSeconds", json!({"resyncSeconds": -1}), false),
        ("resyncSeconds", json!({"resyncSeconds": 0}), true),
        ("resyncSeconds", json!({"resyncSeconds": 1.5}), false),
        ("rails", json!({"rails": {"mlx5_0": ""}}), false),
        ("rails", json!({"rails": {"mlx5_0": r(64)}}), true),
        ("rails", json!({"rails": {"mlx5_0": r(65)}}), false),
        ("rails", json!({"rails": {"mlx5_0": 7}}), false),
        (
            "resourceNames",
            json!({"resourceNames": {"gpu": "x.io/gpu"}}),
            false,
        ),
        (
            "resourceNames",
            json!({"resourceNames": {"soft-roce": r(64)}}),
            true,
        ),
        (
            "resourceNames",
            json!({"resourceNames": {"ipoib": r(65)}}),
            false,
        ),
        ("softRoceNetdevs", json!({"softRoceNetdevs": "eth1"}), false),
        (
            "softRoceNetdevs",
            json!({"softRoceNetdevs": ["eth1", "eth2"]}),
            true,
        ),
        ("dataDir", json!({"dataDir": "var/lib/cni/rdma-ns"}), false),
        ("dataDir", json!({"dataDir": "/var/lib/../cni"}), false),
        ("dataDir", json!({"dataDir": "/var/lib/..cni"}), true),
        ("cdiDir", json!({"cdiDir": "/var/run/cdi/.."}), false),
        (
            "kubeletDir",
            json!({"kubeletDir": "/var/lib/kubelet/"}),
            true,
        ),
        ("kubeletDir", json!({"kubeletDir": ".."}), false),
        ("rail", json!({"rail": {}}), false),
    ]
}

#[test]
fn the_schema_takes_exactly_what_the_driver_takes() {
    let helm = Helm::new();
    for (field, fragment, driver_takes) in driver_config_limits() {
        let parsed = DriverConfig::parse(fragment.to_string().as_bytes(), "case");
        assert_eq!(
            parsed.is_ok(),
            driver_takes,
            "the driver on {fragment}: {parsed:?}"
        );
        match render_with(&helm, &json!({"driver": {"config": fragment}})) {
            Ok(out) => {
                assert!(
                    driver_takes,
                    "the chart took {fragment}, the driver does not"
                );
                // What the chart renders is what the driver then reads: the values merged as
                // helm merges them.
                let want = merged(default_values()["driver"]["config"].clone(), &fragment);
                let want = DriverConfig::parse(want.to_string().as_bytes(), "want").unwrap();
                assert_eq!(rendered_driver_config(&out), want, "{fragment}");
            }
            Err(msg) => {
                assert!(!driver_takes, "the chart refused {fragment}: {msg}");
                assert!(
                    msg.contains(field) && msg.contains("schema"),
                    "{fragment}: {msg}"
                );
            }
        }
    }
}

fn default_values() -> Value {
    project_file("install/helm/rdma-ns/values.yaml").remove(0)
}

/// `over` merged into `base` the way helm merges values: maps key by key, anything else replaced.
fn merged(mut base: Value, over: &Value) -> Value {
    match (base.as_object_mut(), over.as_object()) {
        (Some(b), Some(o)) => {
            for (k, v) in o {
                let inner = b.remove(k).unwrap_or(Value::Null);
                b.insert(k.clone(), merged(inner, v));
            }
            base
        }
        _ => over.clone(),
    }
}

/// The driver's config as rdma-ns-dra parses it from the rendered ConfigMap.
fn rendered_driver_config(rendered: &str) -> DriverConfig {
    let objects = by_name(docs(rendered));
    let cm = &objects["ConfigMap/rdma-ns-dra"];
    let text = cm["data"]["config.json"].as_str().unwrap();
    DriverConfig::parse(text.as_bytes(), "the rendered ConfigMap")
        .unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn bad_values_are_refused_naming_the_value() {
    let helm = Helm::new();
    let cases = [
        (
            "/installer/image/tag",
            json!({"installer": {"image": {"tag": 0.2}}}),
        ),
        (
            "/driver/image/tag",
            json!({"driver": {"image": {"tag": 1}}}),
        ),
        (
            "/driver/image/pullPolicy",
            json!({"driver": {"image": {"pullPolicy": "Sometimes"}}}),
        ),
        ("'colour'", json!({"colour": "blue"})),
        ("'extra'", json!({"driver": {"extra": true}})),
        ("/namespace", json!({"namespace": "Kube_System"})),
        ("/driver/logLevel", json!({"driver": {"logLevel": "loud"}})),
        (
            "/installer/cniBinDir",
            json!({"installer": {"cniBinDir": "opt/cni/bin"}}),
        ),
        (
            "/extendedResourceClass/kinds",
            json!({"extendedResourceClass": {"kinds": []}}),
        ),
        (
            "/extendedResourceClass/kinds/0",
            json!({"extendedResourceClass": {"kinds": ["gpu"]}}),
        ),
        (
            "/extendedResourceClass/extendedResourceName",
            json!({"extendedResourceClass": {"extendedResourceName": "hca shared"}}),
        ),
        (
            "Bad_Net",
            json!({"nads": {"networks": {"Bad_Net": {"enabled": true, "config": {"cniVersion": "1.0.0", "plugins": [{"type": "rdma-ns"}]}}}}}),
        ),
        (
            "/nads/networks/rdma-dra/config",
            json!({"nads": {"networks": {"rdma-dra": {"config": {"plugins": null}}}}}),
        ),
        (
            "/installer/resources",
            json!({"installer": {"resources": {"install": {"limit": {}}}}}),
        ),
    ];
    for (named, values) in cases {
        let msg = render_with(&helm, &values)
            .err()
            .unwrap_or_else(|| panic!("{values} was taken"));
        assert!(
            msg.contains(named),
            "{values}: the message does not name {named}: {msg}"
        );
    }
    // Their twins: the same values, well formed, are taken.
    for values in [
        json!({"installer": {"image": {"tag": "0.2"}}, "driver": {"image": {"tag": "1", "pullPolicy": "Always"}, "logLevel": "debug"}}),
        json!({"namespace": "rdma-ns", "installer": {"cniBinDir": "/usr/lib/cni"}}),
        json!({"extendedResourceClass": {"enabled": true, "kinds": ["ipoib"], "extendedResourceName": "example.com/hca"}}),
    ] {
        render_with(&helm, &values).unwrap_or_else(|e| panic!("{values}: {e}"));
    }
}

/// `got` (rendered) is `want` (the project's file): name, namespace and labels (the chart adds
/// its own), and everything beside metadata; the driver's config as the driver parses it, and
/// the DaemonSets' pod template without the chart's config checksum.
fn assert_same_object(key: &str, got: &Value, want: &Value) {
    for field in ["name", "namespace"] {
        assert_eq!(
            got["metadata"][field], want["metadata"][field],
            "{key}: {field}"
        );
    }
    let labels = got["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (k, v) in want["metadata"]["labels"].as_object().into_iter().flatten() {
        assert_eq!(labels.get(k), Some(v), "{key}: label {k}");
    }
    let (mut got, mut want) = (got.clone(), want.clone());
    for v in [&mut got, &mut want] {
        v.as_object_mut().unwrap().remove("metadata");
    }
    if key == "ConfigMap/rdma-ns-dra" {
        let parse = |v: &Value| {
            let text = v["data"]["config.json"].as_str().unwrap().to_string();
            DriverConfig::parse(text.as_bytes(), key).unwrap()
        };
        assert_eq!(parse(&got), parse(&want), "{key}");
        return;
    }
    if got["kind"] == "DaemonSet" {
        let annotations = got["spec"]["template"]["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        if key == "DaemonSet/rdma-ns-dra" {
            assert!(annotations.unwrap()["checksum/config"].is_string(), "{key}");
        }
    }
    assert_eq!(got, want, "{key}");
}

/// conf/'s NADs and the device plugin's ConfigMap, by "Kind/name", their JSON configs parsed.
fn conf_objects() -> BTreeMap<String, Value> {
    let mut files: Vec<String> = std::fs::read_dir(repo("conf"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("nad-") && n.ends_with(".yaml"))
        .map(|n| format!("conf/{n}"))
        .collect();
    files.push("conf/dra/nad-dra.yaml".into());
    files.push("conf/device-plugins/rdma-shared-dev-plugin.yaml".into());
    let objects = by_name(files.iter().flat_map(|f| project_file(f)).collect());
    objects
        .into_iter()
        .map(|(k, v)| (k, with_parsed_json(v)))
        .collect()
}

/// A NAD's spec.config or a ConfigMap's config.json parsed, and what only the chart adds to
/// metadata (its labels) left out.
fn with_parsed_json(mut v: Value) -> Value {
    for field in ["/spec/config", "/data/config.json"] {
        if let Some(s) = v.pointer_mut(field) {
            *s = serde_json::from_str(s.as_str().unwrap()).unwrap();
        }
    }
    v["metadata"].as_object_mut().unwrap().remove("labels");
    v
}

#[test]
fn the_rendered_chart_is_the_projects_manifests() {
    let helm = Helm::new();
    let project = project_objects();
    // By default: exactly what install/ holds.
    let default = by_name(docs(&helm.template(&[])));
    assert_eq!(
        default.keys().collect::<Vec<_>>(),
        project.keys().collect::<Vec<_>>()
    );
    for (key, want) in &project {
        assert_same_object(key, &default[key], want);
    }
    // With the optional parts: conf/'s NADs and device plugin ConfigMap too, and the extended
    // resource class.
    let all = by_name(docs(&helm.template(OPTIONAL_PARTS_ON)));
    let conf = conf_objects();
    let hca = "DeviceClass/rdma-ns-hca-shared".to_string();
    let mut want_keys: Vec<&String> = project.keys().chain(conf.keys()).chain([&hca]).collect();
    want_keys.sort();
    assert_eq!(all.keys().collect::<Vec<_>>(), want_keys);
    for (key, want) in &conf {
        assert_eq!(&with_parsed_json(all[key].clone()), want, "{key}");
    }
    assert_eq!(
        all[&hca]["spec"],
        json!({"extendedResourceName": "rdma/hca_shared", "selectors": [{"cel": {"expression":
            r#"device.driver == "rdma-ns.io" && device.attributes["rdma-ns.io"].kind in ["roce","soft-roce"]"#}}]})
    );
    let mut roce_only = OPTIONAL_PARTS_ON.to_vec();
    roce_only.extend(["--set", "extendedResourceClass.kinds={roce}"]);
    let all = by_name(docs(&helm.template(&roce_only)));
    let expr = &all[&hca]["spec"]["selectors"][0]["cel"]["expression"];
    assert!(
        expr.as_str().unwrap().ends_with(r#".kind in ["roce"]"#),
        "{expr}"
    );
}

/// The host paths of a DaemonSet's volumes by name, and its containers' mounts (name, path).
fn pod_paths(ds: &Value) -> (BTreeMap<String, Value>, Vec<(String, Value)>) {
    let spec = &ds["spec"]["template"]["spec"];
    let host = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_string(),
                v["hostPath"]["path"].clone(),
            )
        })
        .collect();
    let mounts = ["initContainers", "containers"]
        .iter()
        .flat_map(|c| spec[c].as_array().cloned().unwrap_or_default())
        .flat_map(|c| c["volumeMounts"].as_array().cloned().unwrap_or_default())
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["mountPath"].clone(),
            )
        })
        .collect();
    (host, mounts)
}

#[test]
fn values_reach_the_objects_they_set() {
    let helm = Helm::new();
    let sets = [
        "namespace=rdma-ns-system",
        "installer.image.repository=mirror.example/rdma-ns-installer",
        "installer.image.tag=0.2.0",
        "installer.cniBinDir=/usr/libexec/cni",
        "installer.priorityClassName=",
        "installer.nodeSelector.rdma=yes",
        "driver.image.tag=0.2.1",
        "driver.priorityClassName=rdma-critical",
        "driver.tolerations=null",
        "driver.resources.limits.memory=256Mi",
        "driver.config.kubeletDir=/data/kubelet/",
        "driver.config.dataDir=/data/rdma-ns",
        "driver.config.cdiDir=/etc/cdi",
    ];
    let args: Vec<&str> = sets.iter().flat_map(|s| ["--set", s]).collect();
    let objects = by_name(docs(&helm.template(&args)));
    for (key, o) in &objects {
        let namespaced = !["ClusterRole", "ClusterRoleBinding", "DeviceClass"]
            .iter()
            .any(|k| key.starts_with(k))
            && !key.starts_with("ValidatingAdmissionPolicy");
        let want = if namespaced {
            json!("rdma-ns-system")
        } else {
            Value::Null
        };
        assert_eq!(o["metadata"]["namespace"], want, "{key}");
    }
    assert_eq!(
        objects["ClusterRoleBinding/rdma-ns-dra"]["subjects"][0]["namespace"],
        "rdma-ns-system"
    );
    let policy = &objects["ValidatingAdmissionPolicy/rdma-ns-dra-own-node-slices"]["spec"];
    assert_eq!(
        policy["matchConditions"][0]["expression"],
        r#"request.userInfo.username == "system:serviceaccount:rdma-ns-system:rdma-ns-dra""#
    );
    let installer = &objects["DaemonSet/rdma-ns-installer"];
    let pod = &installer["spec"]["template"]["spec"];
    assert_eq!(
        pod["initContainers"][0]["image"],
        "mirror.example/rdma-ns-installer:0.2.0"
    );
    assert_eq!(
        pod["containers"][0]["image"],
        "mirror.example/rdma-ns-installer:0.2.0"
    );
    assert_eq!(
        pod["nodeSelector"],
        json!({"kubernetes.io/os": "linux", "rdma": "yes"})
    );
    assert_eq!(pod["priorityClassName"], Value::Null);
    assert_eq!(pod_paths(installer).0["cni-bin"], "/usr/libexec/cni");
    let driver = &objects["DaemonSet/rdma-ns-dra"];
    let pod = &driver["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        "registry.example.com/rdma-ns-dra:0.2.1"
    );
    assert_eq!(pod["priorityClassName"], "rdma-critical");
    assert_eq!(pod["tolerations"], Value::Null);
    assert_eq!(
        pod["containers"][0]["resources"],
        json!({"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}})
    );
    // The driver's dirs: mounted from the node at the paths its config names.
    let (host, mounts) = pod_paths(driver);
    let want = [
        ("plugins-registry", "/data/kubelet/plugins_registry"),
        ("plugin-dir", "/data/kubelet/plugins/rdma-ns.io"),
        ("data-dir", "/data/rdma-ns"),
        ("cdi-dir", "/etc/cdi"),
    ];
    for (name, path) in want {
        assert_eq!(host[name], path, "{name}");
        assert!(
            mounts.contains(&(name.to_string(), json!(path))),
            "{name}: {mounts:?}"
        );
    }
    let config = rendered_driver_config(&helm.template(&args));
    assert_eq!(
        config.registration_socket(),
        PathBuf::from("/data/kubelet/plugins_registry/rdma-ns.io-reg.sock")
    );
    assert_eq!(config.cdi_dir, PathBuf::from("/etc/cdi"));
}

#[test]
fn a_changed_driver_config_rolls_the_driver_and_nothing_else_does() {
    let helm = Helm::new();
    let checksum = |args: &[&str]| {
        let objects = by_name(docs(&helm.template(args)));
        objects["DaemonSet/rdma-ns-dra"]["spec"]["template"]["metadata"]["annotations"]
            ["checksum/config"]
            .clone()
    };
    let base = checksum(&[]);
    assert_eq!(checksum(&[]), base);
    assert_eq!(checksum(&["--set", "driver.logLevel=debug"]), base);
    assert_ne!(checksum(&["--set", "driver.config.resyncSeconds=31"]), base);
    assert_ne!(
        checksum(&["--set", "driver.config.softRoceNetdevs={eth1}"]),
        base
    );
}

/// Multus's NetworkAttachmentDefinition CRD, from its own deployments/multus-daemonset.yml as
/// the lab's build keeps it.
fn nad_crd() -> Value {
    let file = lab_bin_dir("multus").join("multus-daemonset.yml");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: build it with install/lab/build.sh multus (tests/run.sh does)",
            file.display()
        )
    });
    docs(&text)
        .into_iter()
        .find(|d| d["kind"] == "CustomResourceDefinition")
        .unwrap_or_else(|| panic!("no CustomResourceDefinition in {}", file.display()))
}

/// `kubectl apply --dry-run=server -f -` of `manifests`.
fn server_dry_run(api: &ApiServer, manifests: &str) -> Output {
    let mut child = api
        .kubectl(&["apply", "--dry-run=server", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifests.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn the_api_server_accepts_the_rendered_chart() {
    let helm = Helm::new();
    let crd = nad_crd();
    let bin = kube_bin().unwrap_or_else(|| {
        panic!(
            "no kube-apiserver, etcd and kubectl in {} (or $RDMA_NS_KUBE_BIN): build them with \
             install/lab/build.sh kubernetes",
            lab_kube_dir().display()
        )
    });
    let api = ApiServer::start(bin);
    api.create_json(&crd);
    let crd_name = format!("crd/{}", crd["metadata"]["name"].as_str().unwrap());
    run(&mut api.kubectl(&[
        "wait",
        "--for=condition=Established",
        &crd_name,
        "--timeout=60s",
    ]));
    api.create_json(
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rdma-ns-system"}}),
    );
    let everything = ["-f", EVERYTHING_ON];
    let elsewhere = ["-f", EVERYTHING_ON, "--set", "namespace=rdma-ns-system"];
    for args in [&[][..], &everything, &elsewhere] {
        let manifests = helm.template(args);
        let out = server_dry_run(&api, &manifests);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        let accepted = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.ends_with("created (server dry run)"))
            .count();
        assert_eq!(accepted, docs(&manifests).len(), "{args:?}: {}", text(&out));
    }
    // The dry run is the server's validation: a DeviceClass whose CEL does not compile is
    // refused, naming the class.
    let broken = helm
        .template(&[])
        .replace(r#"kind == "ipoib""#, r#"kind == "#);
    let out = server_dry_run(&api, &broken);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("rdma-ns-ipoib"), "{}", text(&out));
}

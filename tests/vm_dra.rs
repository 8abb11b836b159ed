//! VM tier (Linux 7, where rxe devices move between netns): DRA claims in exclusive netns
//! mode, end to end on real devices. The driver's prepare (the library's `Claims`, over the
//! VM's own sysfs) makes each claim's record and CDI spec; the plugin, exec'd as a runtime does
//! for two pods at once, moves a veth end into each pod and its Soft-RoCE device after it.
//! A move registers the device's char devices again, under new numbers: each claim's spec must
//! then give exactly the pod's own device's node, with the numbers the kernel gave it in the
//! pod, and the pod's NCCL and UCX variables as `rdma-ns env` prints them in the pod (issue 39
//! §3, issue 40 §1).
//!
//! What a container would see is built as the runtime builds it: a mount namespace in the pod's
//! netns whose /dev/infiniband holds only the spec's nodes (mknod with the spec's numbers).
//! Verbs open the device there (`ibv_devinfo`), and `rdma-ns env` there prints the variables.

mod common;
mod vm_support;

use std::collections::BTreeMap;

use common::{scratch, state_dir, Call, PLUGIN};
use rdma_ns::dra::claims::Claims;
use rdma_ns::dra::config::DriverConfig;
use rdma_ns::kernel::sysfs::SysRoot;
use rdma_ns::records::cdi::{self, Spec};
use serde_json::{json, Value};
use vm_support::{in_pod, record, require_per_netns_rxe, require_vm, run, Exclusive, VethPair};

/// One pod with a claim of one Soft-RoCE-capable netdev.
struct DraPod {
    netns: &'static str,
    claim_uid: &'static str,
    pod_uid: &'static str,
    conf: Value,
}

fn cdi_dir() -> String {
    format!("{}/cdi", scratch())
}

impl DraPod {
    fn new(
        netns: &'static str,
        claim_uid: &'static str,
        pod_uid: &'static str,
        ip: &str,
    ) -> DraPod {
        run("ip", &["netns", "add", netns]);
        let conf = json!({"cniVersion": "1.0.0", "name": "dra", "type": "rdma-ns",
            "dra": {"cdiDir": cdi_dir()}, "dataDir": state_dir(), "logLevel": "debug",
            "ipam": {"type": "static", "addresses": [{"address": format!("{ip}/24")}]}});
        DraPod {
            netns,
            claim_uid,
            pod_uid,
            conf,
        }
    }

    /// The claim as the API server holds it once the scheduler allocated `device`.
    fn claim(&self, device: &str) -> k8s_openapi::api::resource::v1::ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"namespace": "team", "name": self.netns, "uid": self.claim_uid},
            "spec": {},
            "status": {
                "allocation": {"devices": {"results": [
                    {"request": "rdma", "driver": "rdma-ns.io", "pool": "vm", "device": device}
                ]}},
                "reservedFor": [{"resource": "pods", "name": self.netns, "uid": self.pod_uid}]
            }
        }))
        .unwrap()
    }

    fn call(&self, command: &str) -> Call {
        let mut c = Call::new(
            command,
            self.netns,
            &format!("/run/netns/{}", self.netns),
            "net1",
        );
        c.args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=team;K8S_POD_NAME={};K8S_POD_UID={}",
            self.netns, self.pod_uid
        );
        c
    }

    fn spec(&self) -> Spec {
        cdi::read(std::path::Path::new(&cdi_dir()), self.claim_uid)
            .unwrap()
            .expect("the claim's spec")
    }

    /// The pod's own Soft-RoCE device, as its record names it.
    fn ibdev(&self) -> String {
        let rec = record("dra", self.netns, "net1");
        rec["steps"]["softRoce"]["ibdev"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

impl Drop for DraPod {
    fn drop(&mut self) {
        let _ = self.call("DEL").run(&self.conf);
        let _ = std::process::Command::new("ip")
            .args(["netns", "delete", self.netns])
            .output();
    }
}

/// A claim prepared here, unprepared when dropped (after its pod's DEL: declare it after the
/// pod), so that a failing case leaves no record behind.
struct Prepared<'a>(&'a Claims, &'static str);

impl Drop for Prepared<'_> {
    fn drop(&mut self) {
        let _ = self.0.unprepare(self.1);
    }
}

/// The uverbs node of `ibdev` as the kernel has it now (`uverbsN major:minor`): the class is
/// not tagged by netns, so the VM's own sysfs lists a device moved into a pod too.
fn kernel_uverbs(ibdev: &str) -> String {
    let base = std::path::Path::new("/sys/class/infiniband_verbs");
    for e in std::fs::read_dir(base).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let of = std::fs::read_to_string(e.path().join("ibdev")).unwrap_or_default();
        if of.trim() == ibdev {
            let dev = std::fs::read_to_string(e.path().join("dev")).unwrap();
            return format!("{name} {}", dev.trim());
        }
    }
    panic!("no uverbs node of {ibdev}");
}

/// `cmd` in the pod's netns and a mount namespace whose /dev/infiniband holds the spec's nodes
/// and nothing else, as a container the runtime made from the spec; its stdout.
fn in_container(pod: &DraPod, spec: &Spec, cmd: &str) -> String {
    let mut script = String::from("mount -t tmpfs cdi /dev/infiniband && ");
    for n in &spec.devices[0].container_edits.device_nodes {
        script.push_str(&format!("mknod {} c {} {} && ", n.path, n.major, n.minor));
    }
    script.push_str(cmd);
    in_pod(pod.netns, "unshare", &["-m", "sh", "-c", &script])
}

/// The NCCL and UCX variables of the spec, by name.
fn spec_vars(spec: &Spec) -> BTreeMap<String, String> {
    spec.devices[0]
        .container_edits
        .env
        .iter()
        .filter(|e| e.starts_with("NCCL_") || e.starts_with("UCX_"))
        .filter_map(|e| e.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn vm_dra_exclusive_claims_give_each_pod_its_moved_devices_nodes_and_variables() {
    require_vm();
    require_per_netns_rxe();
    let _mode = Exclusive::switch();
    let _veth = VethPair::new("drva", "drvb");
    let cfg = DriverConfig {
        data_dir: state_dir().into(),
        cdi_dir: cdi_dir().into(),
        soft_roce_netdevs: vec!["drva".into(), "drvb".into()],
        ..DriverConfig::default()
    };
    let driver = Claims {
        cfg,
        sys: SysRoot::from_env(),
        node: "vm".into(),
    };
    let a = DraPod::new(
        "dra-a",
        "0d6b0000-0000-4000-8000-00000000000a",
        "pod-a",
        "10.94.0.1",
    );
    let b = DraPod::new(
        "dra-b",
        "0d6b0000-0000-4000-8000-00000000000b",
        "pod-b",
        "10.94.0.2",
    );
    let mut prepared = Vec::new();
    for (pod, dev) in [(&a, "softroce-drva"), (&b, "softroce-drvb")] {
        let p = driver.prepare(&pod.claim(dev)).unwrap();
        prepared.push(Prepared(&driver, pod.claim_uid));
        assert_eq!(
            serde_json::Value::Object(p.devices[0].attach.clone()),
            json!({"mode": "move", "softRoce": true}),
            "exclusive mode moves the netdev, and the pod gets its own Soft-RoCE device"
        );
    }
    // Both devices move at once.
    let adds: Vec<_> = [&a, &b]
        .map(|pod| {
            let (call, conf) = (pod.call("ADD"), pod.conf.clone());
            std::thread::spawn(move || call.run(&conf).ok().json())
        })
        .into_iter()
        .collect();
    for add in adds {
        add.join().unwrap();
    }
    for (pod, other) in [(&a, &b), (&b, &a)] {
        let (spec, ibdev) = (pod.spec(), pod.ibdev());
        let uverbs: Vec<String> = spec.devices[0]
            .container_edits
            .device_nodes
            .iter()
            .filter(|n| n.path.contains("uverbs"))
            .map(|n| {
                format!(
                    "{} {}:{}",
                    n.path.trim_start_matches("/dev/infiniband/"),
                    n.major,
                    n.minor
                )
            })
            .collect();
        assert_eq!(
            uverbs,
            [kernel_uverbs(&ibdev)],
            "{}: its own device's node, numbered as the kernel numbers it now",
            pod.netns
        );
        assert_ne!(
            kernel_uverbs(&other.ibdev()),
            uverbs[0],
            "not the other pod's"
        );
        let info = in_container(pod, &spec, &format!("ibv_devinfo -d {ibdev}"));
        assert!(info.contains("PORT_ACTIVE"), "{}: {info}", pod.netns);
        let env = in_container(pod, &spec, &format!("{PLUGIN} env --format env-file"));
        let printed: BTreeMap<String, String> = env
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert!(printed.contains_key("NCCL_IB_HCA"), "{}: {env}", pod.netns);
        assert_eq!(
            spec_vars(&spec),
            printed,
            "{}: the spec's variables are env's in the pod",
            pod.netns
        );
    }
    for pod in [&a, &b] {
        pod.call("DEL").run(&pod.conf).ok();
        let nodes = pod.spec().devices[0].container_edits.device_nodes.clone();
        assert!(
            nodes.iter().all(|n| !n.path.contains("uverbs")),
            "{}: DEL took the pod's node back: {nodes:?}",
            pod.netns
        );
        driver.unprepare(pod.claim_uid).unwrap();
    }
}

/// The Soft-RoCE devices of the VM's host netns and of `pod`'s.
fn rxe_devices(pod: &DraPod) -> Vec<String> {
    let list = |out: String| -> Vec<String> {
        out.lines()
            .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
            .filter(|d| d.starts_with("rxe_"))
            .collect()
    };
    let mut all = list(run("rdma", &["dev"]));
    all.extend(list(in_pod(pod.netns, "rdma", &["dev"])));
    all
}

/// Issue 39 §10 on a real kernel: the plugin killed while it reports an exclusive-mode pod's
/// moved Soft-RoCE device to its claim (after the record took the report, after the spec did).
/// The runtime's DEL then leaves no device and a claim without the pod; the ADD after gives the
/// claim the pod's new device's node.
#[test]
fn vm_dra_an_add_killed_while_reporting_leaves_no_device_and_no_report_after_del() {
    require_vm();
    require_per_netns_rxe();
    let _mode = Exclusive::switch();
    let _veth = VethPair::new("drka", "drkb");
    let driver = Claims {
        cfg: DriverConfig {
            data_dir: state_dir().into(),
            cdi_dir: cdi_dir().into(),
            soft_roce_netdevs: vec!["drka".into()],
            ..DriverConfig::default()
        },
        sys: SysRoot::from_env(),
        node: "vm".into(),
    };
    let pod = DraPod::new(
        "dra-k",
        "0d6b0000-0000-4000-8000-00000000000c",
        "pod-k",
        "10.94.1.1",
    );
    driver.prepare(&pod.claim("softroce-drka")).unwrap();
    let _prepared = Prepared(&driver, pod.claim_uid);
    let uverbs = |pod: &DraPod| -> Vec<String> {
        let spec = pod.spec();
        spec.devices[0]
            .container_edits
            .device_nodes
            .iter()
            .filter(|n| n.path.contains("uverbs"))
            .map(|n| {
                format!(
                    "{} {}:{}",
                    n.path.trim_start_matches("/dev/infiniband/"),
                    n.major,
                    n.minor
                )
            })
            .collect()
    };
    for point in ["claim-report-record", "claim-report-spec"] {
        let killed = pod
            .call("ADD")
            .env("RDMA_NS_TEST_KILL_AT", point)
            .run(&pod.conf);
        assert_eq!(killed.code, -1, "{point}: {}", killed.stdout);
        pod.call("DEL").run(&pod.conf).ok();
        assert_eq!(
            rxe_devices(&pod),
            Vec::<String>::new(),
            "{point}: a device left"
        );
        assert!(
            uverbs(&pod).is_empty(),
            "{point}: the gone pod's node stayed in the spec"
        );
        pod.call("ADD").run(&pod.conf).ok();
        assert_eq!(
            uverbs(&pod),
            [kernel_uverbs(&pod.ibdev())],
            "{point}: the ADD after"
        );
        pod.call("DEL").run(&pod.conf).ok();
    }
}

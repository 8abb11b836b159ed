//! The DRA driver against the API server of [`super::apiserver`]: the driver started on a
//! fixture node, a claim the scheduler would have allocated, the kubelet's gRPC calls, and the
//! attachment records the CNI writes (tests/dra_apiserver.rs, tests/dra_status_kills.rs).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rdma_ns::dra::proto::dra_v1::dra_plugin_client::DraPluginClient;
use rdma_ns::dra::proto::dra_v1::{Claim, NodePrepareResourcesRequest};
use rdma_ns::kernel::topology::fixtures::SysfsFixture;
use serde_json::{json, Value};
use tonic::transport::{Channel, Endpoint, Uri};

use super::apiserver::{repo, run, ApiServer};

/// An attachment record as the CNI writes it for the claim's device (the frozen macvlan record
/// of the record tests, its conf naming the claim), under the driver's data dir.
pub fn write_attachment(data: &Path, uid: &str, device: &str) -> PathBuf {
    write_attachment_of_share(data, uid, device, None)
}

/// [`write_attachment`] of a share of the device (consumable capacity): the CNI names it in
/// `draDevice` as the prepared claim does.
pub fn write_attachment_of_share(
    data: &Path,
    uid: &str,
    device: &str,
    share: Option<&str>,
) -> PathBuf {
    let text = std::fs::read_to_string(repo(
        "src/attach/testdata/records-schema-2/macvlan/c1:net1.json",
    ))
    .unwrap();
    let mut rec: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    rec["conf"] = json!({"cniVersion": "1.1.0", "name": "cn", "type": "rdma-ns", "dra": true,
        "draDevice": {"claim": {"namespace": "default", "name": "rdma", "uid": uid},
                      "request": "rdma", "pool": "node-a", "device": device, "shareId": share, "netdev": "ens1f0np0"}});
    let dir = data.join("cn");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c1:net1.json");
    std::fs::write(&path, format!("{rec}\n")).unwrap();
    path
}

pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The driver of node `node` on fixture `fx`, its config and records under `dir`.
pub fn start_driver(
    api: &ApiServer,
    node: &str,
    fx: &SysfsFixture,
    dir: &Path,
    log: &str,
) -> Child {
    start_driver_with(api, node, fx, dir, log, &[])
}

/// [`start_driver`] with `env` added (RDMA_NS_TEST_KILL_AT: killed at a named point).
pub fn start_driver_with(
    api: &ApiServer,
    node: &str,
    fx: &SysfsFixture,
    dir: &Path,
    log: &str,
    env: &[(&str, &str)],
) -> Child {
    let cfg = json!({"dataDir": dir.join("data"), "cdiDir": dir.join("cdi"), "kubeletDir": dir.join("kubelet"), "resyncSeconds": 2});
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    Command::new(env!("CARGO_BIN_EXE_rdma-ns-dra"))
        .arg("--config")
        .arg(dir.join("config.json"))
        .args(["--node-name", node, "--log-level", "debug"])
        .env("KUBECONFIG", api.kubeconfig())
        .env("RDMA_NS_SYSFS_ROOT", fx.path())
        .envs(env.iter().copied())
        .stderr(std::fs::File::create(api.dir.join(log)).unwrap())
        .spawn()
        .unwrap()
}

/// A gRPC channel to the driver's socket `sock`, as the kubelet dials it.
pub async fn kubelet_channel(sock: PathBuf) -> Channel {
    Endpoint::try_from("http://[::1]:1")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let sock = sock.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(sock).await?,
                ))
            }
        }))
        .await
        .unwrap()
}

/// NodePrepareResources (or NodeUnprepareResources) of claim default/rdma over `sock`, as the
/// kubelet calls it; the claim's error, empty on success.
pub async fn kubelet_call(sock: PathBuf, uid: &str, unprepare: bool) -> String {
    use rdma_ns::dra::proto::dra_v1::NodeUnprepareResourcesRequest;
    let channel = kubelet_channel(sock).await;
    let claims = vec![Claim {
        namespace: "default".into(),
        name: "rdma".into(),
        uid: uid.into(),
    }];
    let mut client = DraPluginClient::new(channel);
    if unprepare {
        let r = client.node_unprepare_resources(NodeUnprepareResourcesRequest { claims });
        r.await.unwrap().into_inner().claims[uid].error.clone()
    } else {
        let r = client.node_prepare_resources(NodePrepareResourcesRequest { claims });
        r.await.unwrap().into_inner().claims[uid].error.clone()
    }
}

/// Claim default/rdma allocated node-a's mlx5-0-p1, reserved for `pods`; its UID.
pub fn allocated_claim(api: &ApiServer, pods: &[&str]) -> String {
    let _ = api
        .kubectl(&[
            "delete",
            "resourceclaim",
            "rdma",
            "-n",
            "default",
            "--ignore-not-found",
        ])
        .output();
    let uid = create_rdma_claim(api);
    set_reserved(api, pods);
    uid
}

/// Claim default/rdma, one request of class rdma-ns-roce, as a user writes it (no status yet); its UID.
pub fn create_rdma_claim(api: &ApiServer) -> String {
    api.create_json(&json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "rdma", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "rdma", "exactly": {"deviceClassName": "rdma-ns-roce"}}]}}}));
    api.get(&["resourceclaim", "rdma", "-n", "default"])["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string()
}

pub fn set_reserved(api: &ApiServer, pods: &[&str]) {
    let reserved: Vec<Value> = pods
        .iter()
        .map(|p| json!({"resource": "pods", "name": p, "uid": p}))
        .collect();
    let status = json!({"status": {
        "allocation": {"devices": {"results": [{"request": "rdma", "driver": "rdma-ns.io", "pool": "node-a", "device": "mlx5-0-p1"}]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}},
        "reservedFor": reserved}});
    patch_claim_status(api, &status);
}

/// Merges `status` (`{"status": {...}}`) into claim default/rdma's status subresource, as the
/// scheduler and the controller write it.
pub fn patch_claim_status(api: &ApiServer, status: &Value) {
    run(&mut api.kubectl(&[
        "patch",
        "resourceclaim",
        "rdma",
        "-n",
        "default",
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        &status.to_string(),
    ]));
}

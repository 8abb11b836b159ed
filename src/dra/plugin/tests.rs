//! The plugin's services driven as the kubelet drives them: a gRPC client over the unix
//! sockets, registration first (GetInfo, then NotifyRegistrationStatus), then prepare and
//! unprepare of claims and the health stream.

use super::*;
use crate::dra::config::DriverConfig;
use crate::dra::proto::dra_v1::dra_plugin_client::DraPluginClient;
use crate::dra::proto::health_v1::dra_resource_health_client::DraResourceHealthClient;
use crate::dra::proto::health_v1::{DeviceHealth, DeviceIdentifier, HealthStatus};
use crate::dra::proto::registration::registration_client::RegistrationClient;
use crate::kernel::topology::fixtures::SysfsFixture;
use crate::testutil::TempDir;
use serde_json::json;
use std::collections::BTreeMap;
use tonic::transport::{Channel, Endpoint, Uri};

/// A connection to the unix socket `path`, as the kubelet's gRPC client makes one.
pub async fn connect(path: &Path) -> Channel {
    let path = path.to_path_buf();
    Endpoint::try_from("http://[::1]:1")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let s = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
            }
        }))
        .await
        .unwrap()
}

/// The API server's claims, by namespace/name.
struct Claims_(BTreeMap<String, ResourceClaim>);

#[tonic::async_trait]
impl ClaimSource for Claims_ {
    async fn get(&self, namespace: &str, name: &str) -> Result<ResourceClaim, String> {
        self.0
            .get(&format!("{namespace}/{name}"))
            .cloned()
            .ok_or_else(|| format!("resourceclaims.resource.k8s.io \"{name}\" not found"))
    }
}

fn allocated(name: &str, uid: &str, pool: &str, device: &str) -> ResourceClaim {
    serde_json::from_value(json!({
        "metadata": {"namespace": "team", "name": name, "uid": uid},
        "spec": {},
        "status": {
            "allocation": {"devices": {"results": [
                {"request": "rdma", "driver": DRIVER_NAME, "pool": pool, "device": device}
            ]}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-1"}]
        }
    }))
    .unwrap()
}

fn claim(name: &str, uid: &str) -> Claim {
    Claim {
        namespace: "team".into(),
        name: name.into(),
        uid: uid.into(),
    }
}

/// The driver's two servers on sockets in a temp dir, over a fixture node, with a stand-in
/// API server holding a claim of this node ("good") and one of another ("elsewhere").
struct Driver {
    _tmp: TempDir,
    _fx: SysfsFixture,
    cfg: DriverConfig,
    health: watch::Sender<NodeWatchResourcesResponse>,
    registered: watch::Receiver<Option<Result<(), String>>>,
    stop: watch::Sender<bool>,
    servers: Vec<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl Driver {
    fn start() -> Driver {
        let tmp = TempDir::new("dra-plugin");
        let fx = SysfsFixture::all().unwrap();
        let cfg = DriverConfig {
            data_dir: tmp.path().join("data"),
            cdi_dir: tmp.path().join("cdi"),
            kubelet_dir: tmp.path().join("kubelet"),
            ..DriverConfig::default()
        };
        let claims = Arc::new(Claims {
            cfg: cfg.clone(),
            sys: fx.root().clone(),
            node: "node-a".into(),
        });
        let source = Claims_(
            [
                (
                    "team/good".to_string(),
                    allocated("good", "uid-good", "node-a", "mlx5-0-p1"),
                ),
                (
                    "team/elsewhere".to_string(),
                    allocated("elsewhere", "uid-else", "node-b", "mlx5-0-p1"),
                ),
            ]
            .into(),
        );
        let (health, health_rx) = watch::channel(NodeWatchResourcesResponse::default());
        let (registered_tx, registered) = watch::channel(None);
        let (stop, stopped) = watch::channel(false);
        let until = |mut s: watch::Receiver<bool>| async move {
            let _ = s.wait_for(|v| *v).await;
        };
        let dra = DraService {
            claims,
            source,
            changed: Arc::new(tokio::sync::Notify::new()),
        };
        // A stale socket of a killed driver is replaced.
        std::fs::create_dir_all(cfg.registration_socket().parent().unwrap()).unwrap();
        std::fs::write(cfg.registration_socket(), "stale").unwrap();
        let servers = vec![
            tokio::spawn(serve_plugin(
                bind(&cfg.plugin_socket()).unwrap(),
                dra,
                HealthService { health: health_rx },
                until(stopped.clone()),
            )),
            tokio::spawn(serve_registration(
                bind(&cfg.registration_socket()).unwrap(),
                RegistrationService {
                    endpoint: cfg.plugin_socket(),
                    registered: registered_tx,
                },
                until(stopped),
            )),
        ];
        Driver {
            _tmp: tmp,
            _fx: fx,
            cfg,
            health,
            registered,
            stop,
            servers,
        }
    }

    /// Stops both servers; each must end cleanly.
    async fn stop(self) {
        self.stop.send_replace(true);
        for s in self.servers {
            s.await.unwrap().unwrap();
        }
    }
}

/// The plugin watcher's calls: GetInfo, then the outcome, accepted or refused.
#[tokio::test]
async fn the_plugin_watcher_gets_the_drivers_info_and_tells_the_outcome() {
    let d = Driver::start();
    let mut r = RegistrationClient::new(connect(&d.cfg.registration_socket()).await);
    let info = r.get_info(InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(info.name, "rdma-ns.io");
    assert_eq!(info.endpoint, d.cfg.plugin_socket().display().to_string());
    assert_eq!(
        info.supported_versions,
        ["v1.DRAPlugin", "v1.DRAResourceHealth"]
    );
    r.notify_registration_status(RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    })
    .await
    .unwrap();
    assert_eq!(*d.registered.borrow(), Some(Ok(())));
    let refused = r
        .notify_registration_status(RegistrationStatus {
            plugin_registered: false,
            error: "version".into(),
        })
        .await;
    assert!(refused.is_err());
    assert_eq!(*d.registered.borrow(), Some(Err("version".into())));
    d.stop().await;
}

/// The DRA manager's calls: one prepare with three claims gets an entry for each (prepared,
/// another node's, unknown to the API server); its retry the same answer; unprepare of the
/// prepared claim and of one never prepared succeeds and leaves nothing.
#[tokio::test]
async fn the_dra_manager_prepares_and_unprepares_with_an_entry_per_claim() {
    let drv = Driver::start();
    let cfg = drv.cfg.clone();
    let mut d = DraPluginClient::new(connect(&cfg.plugin_socket()).await);
    let req = NodePrepareResourcesRequest {
        claims: vec![
            claim("good", "uid-good"),
            claim("elsewhere", "uid-else"),
            claim("gone", "uid-gone"),
        ],
    };
    let out = d
        .node_prepare_resources(req.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(out.claims.len(), 3);
    let good = &out.claims["uid-good"];
    assert_eq!(good.error, "");
    assert_eq!(good.devices.len(), 1);
    let dev = &good.devices[0];
    assert_eq!(
        (dev.pool_name.as_str(), dev.device_name.as_str()),
        ("node-a", "mlx5-0-p1")
    );
    assert_eq!(dev.request_names, ["rdma"]);
    assert_eq!(dev.cdi_device_ids, ["rdma-ns.io/rdma=uid-good-mlx5-0-p1"]);
    assert!(
        out.claims["uid-else"].error.contains("node-b"),
        "{}",
        out.claims["uid-else"].error
    );
    assert!(out.claims["uid-else"].devices.is_empty());
    assert!(
        out.claims["uid-gone"].error.contains("not found"),
        "{}",
        out.claims["uid-gone"].error
    );
    assert!(crate::dra::cdi::spec_path(&cfg.cdi_dir, "uid-good").exists());
    let again = d.node_prepare_resources(req).await.unwrap().into_inner();
    assert_eq!(again.claims["uid-good"], *good);

    let un = d
        .node_unprepare_resources(NodeUnprepareResourcesRequest {
            claims: vec![claim("good", "uid-good"), claim("never", "uid-never")],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            un.claims["uid-good"].error.as_str(),
            un.claims["uid-never"].error.as_str()
        ),
        ("", "")
    );
    assert!(!crate::dra::cdi::spec_path(&cfg.cdi_dir, "uid-good").exists());
    assert!(crate::attach::claim::ClaimStore::new(&cfg.data_dir)
        .load("uid-good")
        .unwrap()
        .is_none());
    drv.stop().await;
}

/// The health stream: the current list at once, then each change.
#[tokio::test]
async fn the_health_stream_sends_the_list_then_each_change() {
    let drv = Driver::start();
    let health = |h: HealthStatus| NodeWatchResourcesResponse {
        devices: vec![DeviceHealth {
            device: Some(DeviceIdentifier {
                pool_name: "node-a".into(),
                device_name: "mlx5-0-p1".into(),
            }),
            health: h as i32,
            ..Default::default()
        }],
    };
    drv.health.send_replace(health(HealthStatus::Healthy));
    let mut h = DraResourceHealthClient::new(connect(&drv.cfg.plugin_socket()).await);
    let mut stream = h
        .node_watch_resources(NodeWatchResourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.devices[0].health, HealthStatus::Healthy as i32);
    drv.health.send_replace(health(HealthStatus::Unhealthy));
    let next = stream.message().await.unwrap().unwrap();
    assert_eq!(next.devices[0].health, HealthStatus::Unhealthy as i32);
    drop(stream);
    drv.stop().await;
}

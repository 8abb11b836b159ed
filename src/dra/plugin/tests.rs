//! The plugin's services driven as the kubelet drives them: a gRPC client over the unix
//! sockets, registration first (GetInfo, then NotifyRegistrationStatus), then prepare and
//! unprepare of claims and the health stream.

use super::*;
use crate::dra::api::fake::FakeApi;
use crate::dra::config::DriverConfig;
use crate::dra::proto::dra_v1::dra_plugin_client::DraPluginClient;
use crate::dra::proto::health_v1::dra_resource_health_client::DraResourceHealthClient;
use crate::dra::proto::health_v1::{DeviceHealth, DeviceIdentifier, HealthStatus};
use crate::dra::proto::registration::registration_client::RegistrationClient;
use crate::kernel::topology::fixtures::SysfsFixture;
use crate::testutil::TempDir;
use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::json;
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
        let api = FakeApi::default();
        api.put_claim(allocated("good", "uid-good", "node-a", "mlx5-0-p1"));
        api.put_claim(allocated("elsewhere", "uid-else", "node-b", "mlx5-0-p1"));
        let (health, health_rx) = watch::channel(NodeWatchResourcesResponse::default());
        let (registered_tx, registered) = watch::channel(None);
        let (stop, stopped) = watch::channel(false);
        let until = |mut s: watch::Receiver<bool>| async move {
            let _ = s.wait_for(|v| *v).await;
        };
        let dra = DraService {
            claims,
            api: Arc::new(api),
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
    assert!(crate::records::cdi::spec_path(&cfg.cdi_dir, "uid-good").exists());
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
    assert!(!crate::records::cdi::spec_path(&cfg.cdi_dir, "uid-good").exists());
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

/// The kubelet's plugin watcher dials the registration socket's bare path, and grpc-go sends
/// that path as `:authority` (seen on the lab's kubelet 1.37: RST_STREAM PROTOCOL_ERROR from
/// tonic, and no registration). These are its first frames, byte for byte as grpc-go's HPACK
/// encoder lays them out (literal values, not Huffman-coded): the registration socket answers
/// them, and the same bytes sent to a socket tonic serves directly are refused.
#[tokio::test]
async fn the_kubelets_request_with_the_socket_path_as_authority_is_answered() {
    let d = Driver::start();
    let reg = d.cfg.registration_socket();
    let authority = reg.display().to_string();
    let answer = raw_get_info(&reg, authority.as_bytes()).await;
    assert_eq!(
        answer,
        Some(HEADERS_FRAME),
        "the registration socket must answer"
    );
    let refused = raw_get_info(&d.cfg.plugin_socket(), authority.as_bytes()).await;
    assert_eq!(
        refused,
        Some(RST_STREAM_FRAME),
        "tonic alone refuses the path as authority"
    );
    d.stop().await;
}

const HEADERS_FRAME: u8 = 0x1;
const RST_STREAM_FRAME: u8 = 0x3;

/// Sends GetInfo as the kubelet's first request and returns the type of the first HEADERS or
/// RST_STREAM frame the server sends on stream 1.
async fn raw_get_info(sock: &Path, authority: &[u8]) -> Option<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::UnixStream::connect(sock).await.unwrap();
    let mut block = vec![0x83, 0x86, 0x44];
    let path = b"/pluginregistration.Registration/GetInfo";
    block.push(path.len() as u8);
    block.extend_from_slice(path);
    block.push(0x41);
    block.push(authority.len() as u8);
    block.extend_from_slice(authority);
    block.extend_from_slice(&[0x5f, 16]); // content-type (static 31), incremental indexing
    block.extend_from_slice(b"application/grpc");
    block.extend_from_slice(&[0x00, 2, b't', b'e', 8]);
    block.extend_from_slice(b"trailers");
    let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    out.extend(frame(HEADERS_FRAME, 0x4, 1, &block));
    out.extend(frame(0x0, 0x1, 1, &[0, 0, 0, 0, 0])); // an empty InfoRequest, END_STREAM
    s.write_all(&out).await.unwrap();
    let read = async {
        loop {
            let mut head = [0u8; 9];
            s.read_exact(&mut head).await.ok()?;
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            s.read_exact(&mut payload).await.ok()?;
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
            if stream == 1 && (head[3] == HEADERS_FRAME || head[3] == RST_STREAM_FRAME) {
                return Some(head[3]);
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .ok()
        .flatten()
}

//! `rdma-ns-dra`: the DRA driver's binary (feature `dra`; its logic is the library's `dra`
//! module, its API calls `dra::api::KubeApi`).
//!
//! ```text
//! rdma-ns-dra [--config FILE] [--node-name NAME] [--log-level LEVEL]
//! ```
//! `--config` defaults to /etc/rdma-ns-dra/config.json (absent: every default); the node name
//! to `$NODE_NAME` (the DaemonSet sets it from `spec.nodeName`). The API server is reached
//! with the pod's service account, or `$KUBECONFIG`. SIGTERM and SIGINT stop it: its sockets
//! are removed, its slice and the node's records stay (a restart takes them over).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{AllocatedDeviceStatus, ResourceClaim, ResourceSlice};
use kube::Client;
use rdma_ns::dra::api::{ApiError, ClaimEvents, DriverApi, KubeApi};
use rdma_ns::dra::claims::Claims;
use rdma_ns::dra::config::DriverConfig;
use rdma_ns::dra::daemon::Daemon;
use rdma_ns::dra::plugin::{self, DraService, HealthService, RegistrationService};
use rdma_ns::kernel::sysfs::SysRoot;
use rdma_ns::records::claim::ClaimRef;
use tokio::sync::{watch, Notify};

const USAGE: &str = "usage: rdma-ns-dra [--config FILE] [--node-name NAME] [--log-level LEVEL]";

struct Args {
    config: Option<PathBuf>,
    node: Option<String>,
    level: String,
}

fn args() -> Result<Args, String> {
    let mut out = Args {
        config: None,
        node: std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()),
        level: "info".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--config" => out.config = Some(value()?.into()),
            "--node-name" => out.node = Some(value()?),
            "--log-level" => out.level = value()?,
            "--help" | "-h" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(out)
}

fn main() -> ExitCode {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    rdma_ns::log::init(None, Some(&args.level), None);
    let cfg = match &args.config {
        Some(p) => DriverConfig::load(p),
        None => match DriverConfig::load(std::path::Path::new("/etc/rdma-ns-dra/config.json")) {
            Err(rdma_ns::error::Error::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                Ok(DriverConfig::default())
            }
            other => other,
        },
    };
    let cfg = match cfg {
        Ok(c) => c,
        Err(e) => {
            rdma_ns::log_error!("{e}");
            return ExitCode::from(1);
        }
    };
    let Some(node) = args.node else {
        rdma_ns::log_error!(
            "no node name: set NODE_NAME (the DaemonSet sets it from spec.nodeName) or --node-name"
        );
        return ExitCode::from(2);
    };
    // One thread serves the kubelet and the API server: prepare and the sysfs reads run on
    // tokio's blocking pool, the event sources on a thread of their own.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            rdma_ns::log_error!("starting the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(run(cfg, node)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            rdma_ns::log_error!("{e}");
            ExitCode::from(1)
        }
    }
}

/// Claims read from `<dir>/<namespace>/<name>.json` in place of the API server: the seam of
/// the tests that kill the driver while the kubelet prepares (debug builds only, like
/// RDMA_NS_SYSFS_ROOT; a release build never reads it). It serves claims and nothing else.
struct FileClaims(PathBuf);

fn not_served(what: &str) -> ApiError {
    ApiError::Failed {
        what: what.into(),
        message: "claims come from files here (RDMA_NS_DRA_TEST_CLAIMS)".into(),
    }
}

#[tonic::async_trait]
impl DriverApi for FileClaims {
    async fn claim(&self, namespace: &str, name: &str) -> Result<ResourceClaim, ApiError> {
        let path = self.0.join(namespace).join(format!("{name}.json"));
        let failed = |message: String| ApiError::Failed {
            what: format!("ResourceClaim {namespace}/{name}"),
            message,
        };
        let bytes = std::fs::read(&path).map_err(|e| failed(format!("{}: {e}", path.display())))?;
        serde_json::from_slice(&bytes).map_err(|e| failed(format!("{}: {e}", path.display())))
    }
    async fn node_uid(&self, _: &str) -> Result<String, ApiError> {
        Err(not_served("Node"))
    }
    async fn slices(&self, _: &str) -> Result<Vec<ResourceSlice>, ApiError> {
        Err(not_served("ResourceSlices"))
    }
    async fn create_slice(&self, _: &ResourceSlice) -> Result<ResourceSlice, ApiError> {
        Err(not_served("ResourceSlices"))
    }
    async fn replace_slice(&self, _: &ResourceSlice) -> Result<ResourceSlice, ApiError> {
        Err(not_served("ResourceSlices"))
    }
    async fn delete_slice(&self, _: &str) -> Result<(), ApiError> {
        Err(not_served("ResourceSlices"))
    }
    async fn apply_status(
        &self,
        _: &str,
        _: &ClaimRef,
        _: &[AllocatedDeviceStatus],
    ) -> Result<(), ApiError> {
        Err(not_served("claim status"))
    }
    fn watch_claim(&self, _: &str, _: &str) -> ClaimEvents {
        Box::pin(tokio_stream::empty())
    }
}

fn test_claims() -> Option<PathBuf> {
    #[cfg(debug_assertions)]
    if let Some(dir) = std::env::var_os("RDMA_NS_DRA_TEST_CLAIMS").filter(|v| !v.is_empty()) {
        return Some(dir.into());
    }
    None
}

async fn run(cfg: DriverConfig, node: String) -> Result<(), String> {
    if let Some(dir) = test_claims() {
        return serve_only(cfg, node, Arc::new(FileClaims(dir))).await;
    }
    let client = Client::try_default().await.map_err(|e| {
        format!("connecting to the API server (service account or KUBECONFIG): {e}")
    })?;
    let api: Arc<dyn DriverApi> = Arc::new(KubeApi(client));
    let claims = Arc::new(Claims {
        cfg: cfg.clone(),
        sys: SysRoot::from_env(),
        node: node.clone(),
    });
    let wake = Arc::new(Notify::new());
    let (stop_tx, stop) = watch::channel(false);
    rdma_ns::dra::events::spawn(cfg.data_dir.clone(), wake.clone())
        .map_err(|e| format!("watching {}: {e}", cfg.data_dir.display()))?;
    let (health_tx, health_rx) = watch::channel(Default::default());
    let (registered, _) = watch::channel(None);
    let plugin_listener = plugin::bind(&cfg.plugin_socket())
        .map_err(|e| format!("binding {}: {e}", cfg.plugin_socket().display()))?;
    let reg_listener = plugin::bind(&cfg.registration_socket())
        .map_err(|e| format!("binding {}: {e}", cfg.registration_socket().display()))?;
    let dra = DraService {
        claims: claims.clone(),
        api: api.clone(),
        changed: wake.clone(),
    };
    let stopped = |mut s: watch::Receiver<bool>| async move {
        let _ = s.wait_for(|v| *v).await;
    };
    let plugin_server = tokio::spawn(plugin::serve_plugin(
        plugin_listener,
        dra,
        HealthService { health: health_rx },
        stopped(stop.clone()),
    ));
    let registration = RegistrationService {
        endpoint: cfg.plugin_socket(),
        registered,
    };
    let reg_server = tokio::spawn(plugin::serve_registration(
        reg_listener,
        registration,
        stopped(stop.clone()),
    ));
    let node_ref = Daemon::node_ref(api.as_ref(), &node).await;
    let daemon = Daemon::new(api, claims, node_ref, health_tx)
        .map_err(|e| format!("starting the passes' thread: {e}"))?;
    rdma_ns::log_info!(
        "rdma-ns-dra on node {node}: serving {}",
        cfg.plugin_socket().display()
    );
    let signals = tokio::spawn(signalled(stop_tx));
    daemon.run(wake, stop.clone()).await;
    let _ = signals.await;
    for s in [cfg.registration_socket(), cfg.plugin_socket()] {
        let _ = std::fs::remove_file(s);
    }
    let _ = plugin_server.await;
    let _ = reg_server.await;
    Ok(())
}

/// The kubelet plugin alone, claims from `source`, until SIGTERM: no slice, no status.
async fn serve_only(
    cfg: DriverConfig,
    node: String,
    api: Arc<dyn DriverApi>,
) -> Result<(), String> {
    let claims = Arc::new(Claims {
        cfg: cfg.clone(),
        sys: SysRoot::from_env(),
        node,
    });
    let (stop_tx, mut stop) = watch::channel(false);
    let (_health_tx, health_rx) = watch::channel(Default::default());
    let (registered, _) = watch::channel(None);
    let listener = plugin::bind(&cfg.plugin_socket()).map_err(|e| e.to_string())?;
    let reg_listener = plugin::bind(&cfg.registration_socket()).map_err(|e| e.to_string())?;
    let dra = DraService {
        claims,
        api,
        changed: Arc::new(Notify::new()),
    };
    let mut s1 = stop.clone();
    let mut s2 = stop.clone();
    let plugin_server = plugin::serve_plugin(
        listener,
        dra,
        HealthService { health: health_rx },
        async move {
            let _ = s1.wait_for(|v| *v).await;
        },
    );
    let registration = RegistrationService {
        endpoint: cfg.plugin_socket(),
        registered,
    };
    let reg_server = plugin::serve_registration(reg_listener, registration, async move {
        let _ = s2.wait_for(|v| *v).await;
    });
    tokio::spawn(signalled(stop_tx));
    let (a, b) = tokio::join!(plugin_server, reg_server);
    let _ = stop.wait_for(|v| *v).await;
    a.and(b).map_err(|e| e.to_string())
}

/// Turns `stop` true at SIGTERM or SIGINT.
async fn signalled(stop: watch::Sender<bool>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    rdma_ns::log_info!("stopping");
    stop.send_replace(true);
}

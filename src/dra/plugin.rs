//! The kubelet plugin: registration (pluginregistration v1) on
//! `<kubelet>/plugins_registry/rdma-ns.io-reg.sock`, and the DRA v1 and health v1 services on
//! `<kubelet>/plugins/rdma-ns.io/dra.sock`, as the kubelet's plugin watcher and DRA manager
//! call them (k8s.io/dynamic-resource-allocation's kubeletplugin helper is the reference for
//! what the kubelet expects: the `v1.DRAPlugin` and `v1.DRAResourceHealth` versions, a
//! response entry for every claim, per-claim errors in the entry).
//!
//! NodePrepareResources gets a claim's namespace, name and UID only: the allocation comes from
//! the API server ([`DriverApi::claim`]), as the Go helper fetches it.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_stream::wrappers::{UnixListenerStream, WatchStream};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use crate::dra::api::DriverApi;
use crate::dra::claims::Claims;
use crate::dra::config::DRIVER_NAME;
use crate::dra::proto::dra_v1::dra_plugin_server::{DraPlugin, DraPluginServer};
use crate::dra::proto::dra_v1::{
    Claim, Device, NodePrepareResourceResponse, NodePrepareResourcesRequest,
    NodePrepareResourcesResponse, NodeUnprepareResourceResponse, NodeUnprepareResourcesRequest,
    NodeUnprepareResourcesResponse,
};
use crate::dra::proto::health_v1::dra_resource_health_server::{
    DraResourceHealth, DraResourceHealthServer,
};
use crate::dra::proto::health_v1::{NodeWatchResourcesRequest, NodeWatchResourcesResponse};
use crate::dra::proto::registration::registration_server::{Registration, RegistrationServer};
use crate::dra::proto::registration::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};

/// The gRPC services the driver offers the kubelet, as it lists them in GetInfo.
pub const SUPPORTED_SERVICES: &[&str] = &["v1.DRAPlugin", "v1.DRAResourceHealth"];

/// The registration service the plugin watcher calls.
pub struct RegistrationService {
    pub endpoint: PathBuf,
    /// Set by NotifyRegistrationStatus: what the kubelet said of the registration.
    pub registered: watch::Sender<Option<Result<(), String>>>,
}

#[tonic::async_trait]
impl Registration for RegistrationService {
    async fn get_info(&self, _: Request<InfoRequest>) -> Result<Response<PluginInfo>, Status> {
        Ok(Response::new(PluginInfo {
            r#type: "DRAPlugin".into(),
            name: DRIVER_NAME.into(),
            endpoint: self.endpoint.display().to_string(),
            supported_versions: SUPPORTED_SERVICES.iter().map(|s| s.to_string()).collect(),
        }))
    }

    async fn notify_registration_status(
        &self,
        req: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = req.into_inner();
        let outcome = if status.plugin_registered {
            crate::log_info!("registered with the kubelet as {DRIVER_NAME}");
            Ok(())
        } else {
            crate::log_error!("the kubelet refused the registration: {}", status.error);
            Err(status.error.clone())
        };
        self.registered.send_replace(Some(outcome.clone()));
        match outcome {
            Ok(()) => Ok(Response::new(RegistrationStatusResponse {})),
            Err(e) => Err(Status::failed_precondition(format!(
                "registration failed: {e}"
            ))),
        }
    }
}

/// The DRA v1 service: prepare and unprepare.
pub struct DraService {
    pub claims: Arc<Claims>,
    pub api: Arc<dyn DriverApi>,
    /// Poked after every prepare and unprepare: the daemon's status and health follow.
    pub changed: Arc<tokio::sync::Notify>,
}

impl DraService {
    async fn prepare_one(&self, claim: &Claim) -> NodePrepareResourceResponse {
        let failed = |error: String| NodePrepareResourceResponse {
            devices: Vec::new(),
            error,
        };
        let object = match self.api.claim(&claim.namespace, &claim.name).await {
            Ok(o) => o,
            Err(e) => return failed(format!("reading {e}")),
        };
        if object.metadata.uid.as_deref() != Some(claim.uid.as_str()) {
            return failed(format!(
                "ResourceClaim {}/{} has UID {:?}, the kubelet asked for {}: it was deleted and \
                 made again; the kubelet retries with the new one",
                claim.namespace, claim.name, object.metadata.uid, claim.uid
            ));
        }
        let claims = self.claims.clone();
        let prepared = tokio::task::spawn_blocking(move || claims.prepare(&object)).await;
        match prepared {
            Ok(Ok(p)) => NodePrepareResourceResponse {
                devices: p
                    .devices
                    .into_iter()
                    .map(|d| Device {
                        request_names: vec![d.request],
                        pool_name: d.pool,
                        device_name: d.device,
                        cdi_device_ids: d.cdi_device_ids,
                        share_id: d.share_id,
                    })
                    .collect(),
                error: String::new(),
            },
            Ok(Err(e)) => failed(format!("rdma-ns code {}: {e}", e.code())),
            Err(e) => failed(format!("prepare did not finish: {e}")),
        }
    }
}

#[tonic::async_trait]
impl DraPlugin for DraService {
    async fn node_prepare_resources(
        &self,
        req: Request<NodePrepareResourcesRequest>,
    ) -> Result<Response<NodePrepareResourcesResponse>, Status> {
        let mut out = NodePrepareResourcesResponse::default();
        for claim in &req.get_ref().claims {
            let started = std::time::Instant::now();
            let answer = self.prepare_one(claim).await;
            if answer.error.is_empty() {
                crate::log_info!(
                    "prepared claim {}/{} ({}) in {}",
                    claim.namespace,
                    claim.name,
                    claim.uid,
                    crate::log::millis(started.elapsed())
                );
            } else {
                crate::log_error!("claim {}/{}: {}", claim.namespace, claim.name, answer.error);
            }
            out.claims.insert(claim.uid.clone(), answer);
        }
        self.changed.notify_one();
        Ok(Response::new(out))
    }

    async fn node_unprepare_resources(
        &self,
        req: Request<NodeUnprepareResourcesRequest>,
    ) -> Result<Response<NodeUnprepareResourcesResponse>, Status> {
        let mut out = NodeUnprepareResourcesResponse::default();
        for claim in &req.get_ref().claims {
            let claims = self.claims.clone();
            let uid = claim.uid.clone();
            let done = tokio::task::spawn_blocking(move || claims.unprepare(&uid)).await;
            let error = match done {
                Ok(Ok(())) => String::new(),
                Ok(Err(e)) => format!("rdma-ns code {}: {e}", e.code()),
                Err(e) => format!("unprepare did not finish: {e}"),
            };
            if error.is_empty() {
                crate::log_info!(
                    "unprepared claim {}/{} ({})",
                    claim.namespace,
                    claim.name,
                    claim.uid
                );
            } else {
                crate::log_error!("claim {}/{}: {error}", claim.namespace, claim.name);
            }
            out.claims
                .insert(claim.uid.clone(), NodeUnprepareResourceResponse { error });
        }
        self.changed.notify_one();
        Ok(Response::new(out))
    }
}

/// The health service: the daemon's latest device health, sent whole on every change.
pub struct HealthService {
    pub health: watch::Receiver<NodeWatchResourcesResponse>,
}

type HealthStream = Pin<Box<dyn Stream<Item = Result<NodeWatchResourcesResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DraResourceHealth for HealthService {
    type NodeWatchResourcesStream = HealthStream;

    async fn node_watch_resources(
        &self,
        _: Request<NodeWatchResourcesRequest>,
    ) -> Result<Response<HealthStream>, Status> {
        let stream = WatchStream::new(self.health.clone()).map(Ok);
        Ok(Response::new(Box::pin(stream)))
    }
}

/// Binds a unix socket at `path`, replacing a stale one (a driver killed before it could
/// remove its own), its directory created.
pub fn bind(path: &Path) -> std::io::Result<UnixListenerStream> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    Ok(UnixListenerStream::new(UnixListener::bind(path)?))
}

/// Serves the DRA and health services on `listener` until `stop` resolves.
pub async fn serve_plugin(
    listener: UnixListenerStream,
    dra: DraService,
    health: HealthService,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    tonic::transport::Server::builder()
        .add_service(DraPluginServer::new(dra))
        .add_service(DraResourceHealthServer::new(health))
        .serve_with_incoming_shutdown(listener, stop)
        .await
}

/// Serves registration on `listener` until `stop` resolves, each connection read through
/// [`authority::AuthorityRewriting`]: the kubelet's registration client sends the socket's path
/// as `:authority`, which tonic's HTTP/2 refuses.
pub async fn serve_registration(
    listener: UnixListenerStream,
    registration: RegistrationService,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let incoming = listener.map(|conn| conn.map(authority::AuthorityRewriting::new));
    tonic::transport::Server::builder()
        .add_service(RegistrationServer::new(registration))
        .serve_with_incoming_shutdown(incoming, stop)
        .await
}

mod authority;
#[cfg(test)]
mod tests;

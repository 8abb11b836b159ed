//! The driver's loop, in the shape of kube-rs's controllers: one reconcile function that
//! derives what should exist from the node (sysfs), the records (attachment and prepared
//! claims) and the API server, every time, and an error policy (log, then retry after a
//! growing pause). It wakes on an event ([`crate::dra::events`]), after a prepare or unprepare,
//! and every `resyncSeconds`. What it keeps between passes only spares requests (the sharing
//! the server supports, the statuses it last wrote, the slices the server last returned, which
//! each resync reads again) or holds watches ([`PodWatches`]); a restart derives all of it
//! again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::{watch, Notify};

use crate::dra::api::{ApiError, DriverApi};
use crate::dra::background::Background;
use crate::dra::claims::Claims;
use crate::dra::inventory::{self, InvDevice};
use crate::dra::pods::PodWatches;
use crate::dra::proto::health_v1::NodeWatchResourcesResponse;
use crate::dra::publisher::KnownPool;
use crate::dra::slices::{NodeRef, Sharing};
use crate::dra::status::{self, StatusWriter};
use crate::dra::{health, publisher};
use crate::records::attachment::Attachment;
use crate::records::claim::{AddFailure, ClaimStore, PreparedClaim, WrittenStatus};
use crate::records::store::Store;

/// Why a pass failed: each step's failure, typed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("reading the node's RDMA devices from sysfs: {0}")]
    Inventory(std::io::Error),
    #[error("publishing the node's devices: {0}")]
    Publish(ApiError),
    #[error("writing claims' status: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Status(Vec<ApiError>),
    #[error("a blocking task did not finish: {0}")]
    Task(String),
}

/// The reconciler's inputs and the little it keeps between passes.
pub struct Daemon {
    pub api: Arc<dyn DriverApi>,
    pub claims: Arc<Claims>,
    pub node: NodeRef,
    pub sharing: Sharing,
    pub health: watch::Sender<NodeWatchResourcesResponse>,
    pub statuses: StatusWriter,
    pub pods: PodWatches,
    /// The node's slices as the server last returned them; forgotten on each resync.
    pub pool: KnownPool,
    /// Where a pass reads the node: at the lowest CPU priority ([`crate::dra::background`]).
    pub background: Background,
}

/// What one pass reads from the node, off the async runtime.
struct NodeState {
    devices: Vec<InvDevice>,
    prepared: Vec<PreparedClaim>,
    written: Vec<WrittenStatus>,
    attachments: Vec<Attachment>,
    failures: BTreeMap<String, AddFailure>,
}

/// How long events must stop before a pass, and the longest a pass waits for them to stop.
/// A pod's start is a series of bursts of events: the default network's veth, the CNI's
/// records, a netns move's dozen link events, a Soft-RoCE device registered. On a real node
/// they all come within a fraction of a second; on the lab's TCG nodes they came 1.5 to 2.5 s
/// apart for 10 to 30 s, and each pass they woke took 70 to 200 ms of the one vCPU that the
/// pod's start was waiting for (docs/benchmarks.md, kube-start). So one pass once they stop,
/// which only a pod's status waits for (it names the pod's network a second or two later);
/// nothing waits for a pass while the pod's ADD is still under way. The cap bounds what a device
/// that never stops changing (a flapping link) delays: its health and statuses, by 10 s, far
/// within the kubelet's health timeout of three resyncs.
const SETTLE_QUIET: Duration = Duration::from_secs(2);
const SETTLE_MAX: Duration = Duration::from_secs(10);

/// Returns once `wake` has had no notification for [`SETTLE_QUIET`], or [`SETTLE_MAX`] after
/// it was called.
async fn settle(wake: &Notify) {
    let deadline = tokio::time::Instant::now() + SETTLE_MAX;
    loop {
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(SETTLE_QUIET) => return,
            _ = tokio::time::sleep_until(deadline) => return,
        }
    }
}

impl Daemon {
    /// A daemon as a start makes it: sharing as the driver offers it first, nothing written
    /// or published yet as far as it knows, the passes' thread started.
    pub fn new(
        api: Arc<dyn DriverApi>,
        claims: Arc<Claims>,
        node: NodeRef,
        health: watch::Sender<NodeWatchResourcesResponse>,
    ) -> std::io::Result<Self> {
        Ok(Daemon {
            api,
            claims,
            node,
            sharing: Sharing::MultipleAllocations,
            health,
            statuses: StatusWriter::default(),
            pods: PodWatches::default(),
            pool: KnownPool::default(),
            background: Background::spawn()?,
        })
    }

    /// The node's Node object's UID, for the slices' owner reference.
    pub async fn node_ref(api: &dyn DriverApi, name: &str) -> NodeRef {
        let uid = match api.node_uid(name).await {
            Ok(uid) => Some(uid),
            Err(e) => {
                crate::log_warn!("{e}: the slices get no owner reference");
                None
            }
        };
        NodeRef {
            name: name.into(),
            uid,
        }
    }

    /// Runs until `stop` turns true.
    pub async fn run(mut self, wake: Arc<Notify>, mut stop: watch::Receiver<bool>) {
        let resync = Duration::from_secs(self.claims.cfg.resync_seconds.max(1));
        let mut backoff = Duration::from_secs(1);
        loop {
            match self.reconcile().await {
                Ok(()) => backoff = Duration::from_secs(1),
                Err(e) => {
                    crate::log_error!("reconcile: {e}; retrying in {}s", backoff.as_secs());
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            }
            let woken = tokio::select! {
                _ = wake.notified() => true,
                _ = tokio::time::sleep(resync) => false,
                _ = stop.wait_for(|s| *s) => return,
            };
            if woken {
                tokio::select! {
                    _ = settle(&wake) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
            } else {
                self.pool.forget();
            }
        }
    }

    /// One pass: the node's devices published and their health sent, a watch on every prepared
    /// claim, every claim's status written, CDI specs without a claim removed.
    pub async fn reconcile(&mut self) -> Result<(), ReconcileError> {
        let claims = self.claims.clone();
        let state = self
            .background
            .run(move || read_node(&claims))
            .await
            .map_err(ReconcileError::Task)??;
        self.send_health(&state.devices);
        let published = publisher::publish(
            self.api.as_ref(),
            &self.node,
            &state.devices,
            &self.claims.cfg,
            self.sharing,
            &mut self.pool,
        )
        .await;
        let published = published.map(|sharing| self.sharing = sharing);
        self.pods
            .sync(&self.api, &self.claims.cfg.data_dir, &state.prepared);
        let facts = status::facts(
            &state.prepared,
            &state.written,
            &state.attachments,
            &state.failures,
        );
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let store = ClaimStore::new(&self.claims.cfg.data_dir);
        let statuses = self
            .statuses
            .write(self.api.as_ref(), &self.node.name, &store, &facts, &now)
            .await;
        published.map_err(ReconcileError::Publish)?;
        statuses.map_err(ReconcileError::Status)
    }

    fn send_health(&self, devices: &[InvDevice]) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let timeout = health::timeout_seconds(self.claims.cfg.resync_seconds);
        self.health.send_replace(health::report(
            &self.node.name,
            devices,
            self.sharing,
            now,
            timeout,
        ));
    }
}

/// The nice value of the thread of the last node read (tests: which priority a pass runs at).
#[cfg(test)]
static LAST_READ_NICE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(i32::MIN);

/// This thread's nice value (Linux keeps it per thread; field 19 of /proc/thread-self/stat).
#[cfg(test)]
pub(crate) fn own_nice() -> i32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[16].parse().unwrap()
}

fn read_node(claims: &Claims) -> Result<NodeState, ReconcileError> {
    #[cfg(test)]
    LAST_READ_NICE.store(own_nice(), std::sync::atomic::Ordering::SeqCst);
    claims.sweep_specs();
    let devices = inventory::read(&claims.sys, &claims.cfg).map_err(ReconcileError::Inventory)?;
    let data_dir = &claims.cfg.data_dir;
    let store = ClaimStore::new(data_dir);
    let (prepared, _) = store.list();
    let (written, _) = store.written_statuses();
    let (attachments, _) = Store::new(data_dir).list_all();
    let failures = prepared
        .iter()
        .filter_map(|c| {
            let f = store.add_failure(&c.claim.uid).ok().flatten()?;
            Some((c.claim.uid.clone(), f))
        })
        .collect();
    Ok(NodeState {
        devices,
        prepared,
        written,
        attachments,
        failures,
    })
}

#[cfg(test)]
mod tests;

//! The daemon's passes against the fake API server (dra/api/fake.rs): what it publishes and
//! how often it writes, the pods of a claim, and the claims' status through unprepare and a
//! claim made again.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::json;

use super::*;
use crate::dra::api::fake::FakeApi;
use crate::dra::config::DriverConfig;
use crate::kernel::topology::fixtures::SysfsFixture;
use crate::testutil::TempDir;

struct Node {
    _tmp: TempDir,
    fx: SysfsFixture,
    api: Arc<FakeApi>,
    daemon: Daemon,
}

fn node(fx: SysfsFixture, api: FakeApi) -> Node {
    let tmp = TempDir::new("dra-daemon");
    let cfg = DriverConfig {
        data_dir: tmp.path().join("data"),
        cdi_dir: tmp.path().join("cdi"),
        kubelet_dir: tmp.path().join("kubelet"),
        ..DriverConfig::default()
    };
    let api = Arc::new(api);
    let claims = Arc::new(Claims {
        cfg,
        sys: fx.root().clone(),
        node: "node-a".into(),
    });
    let node_ref = NodeRef {
        name: "node-a".into(),
        uid: Some("6b1f0c1e-0000-4000-8000-000000000001".into()),
    };
    let health = watch::channel(Default::default()).0;
    let daemon = Daemon::new(api.clone(), claims, node_ref, health).unwrap();
    Node {
        _tmp: tmp,
        fx,
        api,
        daemon,
    }
}

/// A node with every fixture device (SysfsFixture::all) in exclusive RDMA netns mode.
fn exclusive_node(api: FakeApi) -> Node {
    let fx = SysfsFixture::all().unwrap();
    fx.write_attr("module/ib_core/parameters/netns_mode", "Y")
        .unwrap();
    node(fx, api)
}

fn writes(calls: &[String]) -> Vec<&String> {
    calls
        .iter()
        .filter(|c| !c.starts_with("list ") && !c.starts_with("get ") && !c.starts_with("watch "))
        .collect()
}

/// A node's pool published over several slices, all of one generation; a pass that finds
/// nothing new neither lists the slices again nor writes; a device gone moves every slice to
/// the next generation, and a slice the pool no longer needs is deleted.
#[tokio::test]
async fn the_pool_is_written_when_it_changes_every_slice_at_the_next_generation() {
    let mut n = published_130_devices().await;
    let stored = n.api.stored_slices();
    assert_eq!(stored.len(), 2, "130 devices: two slices");
    assert!(stored.values().all(|s| s.spec.pool.generation == 0));
    let first = n.api.calls().len();
    n.daemon.reconcile().await.unwrap();
    let again: Vec<String> = n.api.calls()[first..].to_vec();
    assert!(writes(&again).is_empty(), "{again:?}");
    assert!(!again.iter().any(|c| c.starts_with("list ")), "{again:?}");

    remove_two_vfs(&n);
    n.daemon.reconcile().await.unwrap();
    assert_one_slice_of_128_at_generation_1(&n.api);
}

/// A node of two RoCE PFs with 64 VFs each (130 devices), its pool published by a first pass.
async fn published_130_devices() -> Node {
    let fx = SysfsFixture::new().unwrap();
    fx.roce_pfs_with_vfs(2, 64).unwrap();
    fx.write_attr("module/ib_core/parameters/netns_mode", "N")
        .unwrap();
    let mut n = node(fx, FakeApi::default());
    n.daemon.reconcile().await.unwrap();
    n
}

/// The ib devices of two VFs of the second PF go away: 128 devices, one slice.
fn remove_two_vfs(n: &Node) {
    for ib in ["mlx5_128", "mlx5_129"] {
        std::fs::remove_file(n.fx.path().join("class/infiniband").join(ib)).unwrap();
    }
}

fn assert_one_slice_of_128_at_generation_1(api: &FakeApi) {
    let stored = api.stored_slices();
    assert_eq!(stored.keys().collect::<Vec<_>>(), ["node-a.rdma-ns.io"]);
    let s = &stored["node-a.rdma-ns.io"];
    assert_eq!(
        (s.spec.pool.generation, s.spec.pool.resource_slice_count),
        (1, 1)
    );
    assert_eq!(s.spec.devices.as_ref().unwrap().len(), 128);
}

/// A slice another client updated turns the driver's next write of it into a conflict (a pass
/// woken by an event compares with the slices the server last returned): that pass fails, and
/// the one after lists the slices again and writes the pool.
#[tokio::test]
async fn a_slice_updated_elsewhere_fails_one_publish_and_the_next_pass_writes_the_pool() {
    let mut n = published_130_devices().await;
    n.api.update_slice_elsewhere("node-a.rdma-ns.io");
    remove_two_vfs(&n);
    let refused = n.daemon.reconcile().await;
    assert!(
        matches!(
            refused,
            Err(ReconcileError::Publish(ApiError::Conflict { .. }))
        ),
        "{refused:?}"
    );
    let first = n.api.calls().len();
    n.daemon.reconcile().await.unwrap();
    assert!(n.api.calls()[first..].contains(&"list slices node-a".to_string()));
    assert_one_slice_of_128_at_generation_1(&n.api);
}

/// A slice another client deleted is published again at the next resync, which lists the
/// slices again; the passes that events wake do not list them (the twin, in
/// [`the_pool_is_written_when_it_changes_every_slice_at_the_next_generation`]).
#[tokio::test]
async fn a_slice_deleted_elsewhere_is_published_again_at_the_next_resync() {
    let mut n = exclusive_node(FakeApi::default());
    Arc::get_mut(&mut n.daemon.claims)
        .unwrap()
        .cfg
        .resync_seconds = 1;
    let looping = Looping::start(n, Arc::new(Notify::new())).await;
    let api = looping.api.clone();
    let name = api.stored_slices().keys().next().unwrap().clone();
    api.delete_slice_elsewhere(&name);
    assert!(!api.stored_slices().contains_key(&name));
    eventually_within("the slice published again", 3, || {
        api.stored_slices().contains_key(&name)
    })
    .await;
    looping.stop().await;
}

/// A server without consumable capacity drops `allowMultipleAllocations`: the next write
/// offers each shared device `sharesPerDevice` times, and the daemon keeps to that.
#[tokio::test]
async fn a_server_that_drops_sharing_gets_shares() {
    let mut api = FakeApi::default();
    api.drops_sharing = true;
    let mut n = exclusive_node(api);
    n.daemon.reconcile().await.unwrap();
    assert_eq!(n.daemon.sharing, Sharing::Replicas(16));
    let names: Vec<String> = n
        .api
        .stored_slices()
        .values()
        .flat_map(|s| s.spec.devices.clone().unwrap_or_default())
        .map(|d| d.name)
        .collect();
    assert!(names.contains(&"mlx5-0-p1-s15".to_string()), "{names:?}");
}

fn allocated(uid: &str, pods: &[&str]) -> ResourceClaim {
    let reserved: Vec<_> = pods
        .iter()
        .map(|p| json!({"resource": "pods", "name": p, "uid": p}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": "team", "name": "shared-rdma", "uid": uid},
        "spec": {"devices": {"requests": [{"name": "rdma", "exactly": {"deviceClassName": "rdma-ns-roce"}}]}},
        "status": {
            "allocation": {"devices": {"results": [
                {"request": "rdma", "driver": "rdma-ns.io", "pool": "node-a", "device": "mlx5-0-p1"}
            ]}},
            "reservedFor": reserved
        }
    }))
    .unwrap()
}

async fn eventually(what: &str, f: impl FnMut() -> bool) {
    eventually_within(what, 2, f).await
}

async fn eventually_within(what: &str, seconds: u64, mut f: impl FnMut() -> bool) {
    for _ in 0..seconds * 100 {
        if f() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{what}: not within {seconds} s");
}

/// §4 of issue 39: a pod the scheduler added to a prepared claim's `reservedFor` (the kubelet
/// prepares a claim once per node) is written into the claim's record, from the claim's watch;
/// a pod that left goes; a claim made again under the name is another's.
#[tokio::test]
async fn a_pod_added_to_a_prepared_claim_is_written_into_its_record() {
    let mut n = exclusive_node(FakeApi::default());
    let uid = "0d6b5c1e-aaaa-4bbb-8ccc-000000000001";
    n.api.put_claim(allocated(uid, &["pod-1"]));
    n.daemon
        .claims
        .prepare(&allocated(uid, &["pod-1"]))
        .unwrap();
    n.daemon.reconcile().await.unwrap();
    assert_eq!(n.daemon.pods.len(), 1);
    let store = ClaimStore::new(&n.daemon.claims.cfg.data_dir);
    let pods = || store.load(uid).unwrap().unwrap().pod_uids;
    n.api.put_claim(allocated(uid, &["pod-1", "pod-2"]));
    eventually("pod-2 in the record", || pods() == ["pod-1", "pod-2"]).await;
    n.api.put_claim(allocated(uid, &["pod-2"]));
    eventually("pod-1 gone from the record", || pods() == ["pod-2"]).await;
    // A claim made again under the name: its pods are not this record's.
    n.api.put_claim(allocated(
        "9f9f9f9f-0000-4000-8000-000000000009",
        &["pod-7"],
    ));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(pods(), ["pod-2"]);
    n.daemon.claims.unprepare(uid).unwrap();
    n.daemon.reconcile().await.unwrap();
    assert_eq!(n.daemon.pods.len(), 0, "no watch for an unprepared claim");
}

/// An attachment record of claim `uid`'s mlx5-0-p1, as the CNI writes it, under `data`.
fn attach(data: &std::path::Path, uid: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/attach/testdata/records-schema-2/macvlan/c1:net1.json"
    ))
    .unwrap();
    let mut rec: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    rec["conf"] = json!({"cniVersion": "1.1.0", "name": "cn", "type": "rdma-ns",
        "draDevice": {"claim": {"namespace": "team", "name": "shared-rdma", "uid": uid},
                      "request": "rdma", "pool": "node-a", "device": "mlx5-0-p1", "netdev": "ens1f0np0"}});
    std::fs::create_dir_all(data.join("cn")).unwrap();
    let path = data.join("cn/c1:net1.json");
    std::fs::write(&path, format!("{rec}\n")).unwrap();
    path
}

/// §8 of issue 39: the entries go when the pod's attachment goes, also when unprepare came
/// first and the driver restarted in between; a claim deleted and made again under the same
/// name never gets the old pod's entries (the claim's UID is each write's precondition).
#[tokio::test]
async fn status_entries_go_with_the_attachment_and_never_reach_a_claim_made_again() {
    let mut n = exclusive_node(FakeApi::default());
    let uid = "0d6b5c1e-aaaa-4bbb-8ccc-000000000001";
    let data = n.daemon.claims.cfg.data_dir.clone();
    n.api.put_claim(allocated(uid, &["pod-1"]));
    n.daemon
        .claims
        .prepare(&allocated(uid, &["pod-1"]))
        .unwrap();
    let record = attach(&data, uid);
    n.daemon.reconcile().await.unwrap();
    assert_eq!(n.api.status_of("team", "shared-rdma").len(), 1);

    // Unprepare first, and a driver restart: the attachment still holds the entry.
    n.daemon.claims.unprepare(uid).unwrap();
    n.daemon.statuses = Default::default();
    n.daemon.reconcile().await.unwrap();
    assert_eq!(n.api.status_of("team", "shared-rdma").len(), 1);
    // Then DEL: the entry goes, and so does the note of it.
    std::fs::remove_file(&record).unwrap();
    n.daemon.reconcile().await.unwrap();
    assert!(n.api.status_of("team", "shared-rdma").is_empty());
    let store = ClaimStore::new(&data);
    assert!(store.written_statuses().0.is_empty());

    // The claim deleted and made again under its name, while the old pod's attachment (of the
    // old UID) is still on the node.
    n.api.put_claim(allocated(uid, &["pod-1"]));
    n.daemon
        .claims
        .prepare(&allocated(uid, &["pod-1"]))
        .unwrap();
    attach(&data, uid);
    n.daemon.reconcile().await.unwrap();
    assert_eq!(n.api.status_of("team", "shared-rdma").len(), 1);
    n.api.delete_claim("team", "shared-rdma");
    let again = "9f9f9f9f-0000-4000-8000-000000000009";
    n.api.put_claim(allocated(again, &["pod-2"]));
    n.daemon.statuses = Default::default();
    n.daemon.reconcile().await.unwrap();
    assert!(
        n.api.status_of("team", "shared-rdma").is_empty(),
        "the new claim got none"
    );
    assert!(store.written_statuses().0.is_empty());
    let before = n.api.calls().len();
    n.daemon.reconcile().await.unwrap();
    let applies = n.api.calls()[before..]
        .iter()
        .filter(|c| c.starts_with("apply status"))
        .count();
    assert_eq!(applies, 0, "a replaced claim is not written again");
}

/// A node's daemon running its loop, its passes counted by the health each one sends to the
/// kubelet.
struct Looping {
    _tmp: TempDir,
    _fx: SysfsFixture,
    api: Arc<FakeApi>,
    passes: Arc<std::sync::atomic::AtomicUsize>,
    stop: watch::Sender<bool>,
    daemon: tokio::task::JoinHandle<()>,
}

impl Looping {
    /// Starts `n`'s loop, woken by `wake`; returns after its first pass.
    async fn start(n: Node, wake: Arc<Notify>) -> Looping {
        let passes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = passes.clone();
        let mut health = n.daemon.health.subscribe();
        tokio::spawn(async move {
            while health.changed().await.is_ok() {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let (stop, stopped) = watch::channel(false);
        let looping = Looping {
            daemon: tokio::spawn(n.daemon.run(wake, stopped)),
            _tmp: n._tmp,
            _fx: n.fx,
            api: n.api,
            passes,
            stop,
        };
        eventually("the first pass", || looping.passes() == 1).await;
        looping
    }

    fn passes(&self) -> usize {
        self.passes.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn stop(self) {
        self.stop.send(true).unwrap();
        self.daemon.await.unwrap();
    }
}

/// The daemon's loop on a fixture node with the fake API, woken once per entry of `gaps` (after
/// its first pass), each wake followed by a sleep of that many ms: the passes while the wakes
/// came, and the passes until 700 ms after the first pass that followed them.
async fn passes_for(gaps: &[u64]) -> (usize, usize) {
    let wake = Arc::new(Notify::new());
    let looping = Looping::start(exclusive_node(FakeApi::default()), wake.clone()).await;
    for ms in gaps {
        wake.notify_one();
        tokio::time::sleep(std::time::Duration::from_millis(*ms)).await;
    }
    let during = looping.passes() - 1;
    eventually_within("a pass after the wakes", 5, || looping.passes() > 1).await;
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let after = looping.passes() - 1;
    looping.stop().await;
    (during, after)
}

/// A pod's ADD on the node is a second or more of events (its records written, links made and
/// moved, a Soft-RoCE device registered): they wake one pass after they settle, not a pass
/// every 200 ms while they last. On a one-vCPU node those passes were CPU the pod's own start
/// waited for (docs/benchmarks.md, kube-start).
#[tokio::test]
async fn a_burst_of_events_wakes_one_pass_after_it_settles() {
    let (during, after) = passes_for(&[50; 20]).await;
    assert!(during <= 1, "{during} passes while the events came");
    assert!(after <= 2, "{after} passes for one burst of events");
}

/// A DRA pod's start on the lab's TCG node wakes the driver in bursts 1.5 to 2.5 s apart for
/// 10 to 30 s (the default network's veth, the CNI's records, the macvlan's parent), and each
/// pass took 70 to 200 ms of the one vCPU the pod's start was waiting for: a series of bursts
/// that close together is one pass, after it, not one per burst (docs/benchmarks.md,
/// kube-start).
#[tokio::test]
async fn bursts_a_second_and_a_half_apart_wake_one_pass_after_the_last() {
    let bursts = [50, 50, 1550].repeat(4);
    let (during, after) = passes_for(&bursts).await;
    assert!(during <= 1, "{during} passes while the bursts came");
    assert!(after <= 2, "{after} passes for four bursts close together");
}

/// A pass reads sysfs and the records on the node's CPU while a pod may be starting there, and
/// nothing of that pod waits for it (the prepare and the CNI's ADD do not; the claim's status
/// does, by seconds). On the lab's one-vCPU node each pass was 70 to 200 ms of CPU that the
/// pod's runtime, kubelet and CNI waited behind (docs/benchmarks.md, kube-start): the read runs
/// at the lowest priority, nice 19. The blocking pool the prepare uses keeps the process's own
/// priority (the twin): a prepare is on the pod's path.
#[tokio::test]
async fn a_pass_reads_the_node_at_the_lowest_priority_and_the_prepare_pool_keeps_its_own() {
    let fx = SysfsFixture::all().unwrap();
    let mut n = node(fx, FakeApi::default());
    let own = tokio::task::spawn_blocking(own_nice).await.unwrap();
    n.daemon.reconcile().await.unwrap();
    let read_at = LAST_READ_NICE.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(read_at, 19, "a pass read the node at nice {read_at}");
    for _ in 0..4 {
        let pool = tokio::task::spawn_blocking(own_nice).await.unwrap();
        assert_eq!(
            pool, own,
            "the blocking pool's priority changed after a pass"
        );
    }
}

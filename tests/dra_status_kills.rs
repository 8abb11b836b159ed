//! Issue 39 §10: the driver's status writer killed at the named point and at random instants,
//! against a real kube-apiserver (v1.37.2) and etcd, as tests/dra_kills.rs kills prepare.
//!
//! The writer notes the entries it is about to write (`_claims/<uid>.status.json`) before the
//! server-side apply, and forgets the note once it has cleared them. Killed anywhere in
//! between, the driver started again must end where an unkilled one ends:
//! - the pod's attachment present: the claim's `status.devices` entry, the same as an unkilled
//!   run's (the condition's time aside), and the note;
//! - the attachment gone (DEL): no entry and no note, whether the kill fell before the apply,
//!   between the apply and the note's removal, or after it; also when the claim was
//!   unprepared before DEL (§8);
//! - the pod keeps its device: the prepared claim's record, its CDI spec and the attachment
//!   record stay byte for byte;
//! - after unprepare nothing of the claim is left under the data and CDI dirs.
//!
//! The binaries come from the lab's build (`install/lab/build.sh kubernetes`), as for
//! tests/dra_apiserver.rs.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use common::apiserver::{kube_bin, lab_kube_dir, repo, ApiServer};
use common::dra::{allocated_claim, kubelet_call, start_driver_with, write_attachment};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::config::{KubeConfigOptions, Kubeconfig};
use rdma_ns::kernel::topology::fixtures::SysfsFixture;
use serde_json::Value;

const NODE: &str = "node-a";
const DEVICE: &str = "mlx5-0-p1";

/// One node's driver, its claim prepared, and a client that reads the claim's status.
struct Bench {
    api: ApiServer,
    fx: SysfsFixture,
    dir: PathBuf,
    uid: String,
    claims: kube::Api<ResourceClaim>,
    driver: Option<Child>,
    starts: u32,
}

impl Bench {
    async fn new() -> Bench {
        let Some(bin) = kube_bin() else {
            panic!(
                "no kube-apiserver, etcd and kubectl in {}: build them with install/lab/build.sh \
                 kubernetes",
                lab_kube_dir().display()
            );
        };
        let api = ApiServer::start(bin);
        for f in ["deviceclasses.yaml", "rbac.yaml", "configmap.yaml"] {
            api.apply(&repo("install/dra").join(f));
        }
        api.create_json(
            &serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}),
        );
        let fx = SysfsFixture::all().unwrap();
        fx.write_attr("module/ib_core/parameters/netns_mode", "Y")
            .unwrap();
        let kubeconfig = Kubeconfig::read_from(api.kubeconfig()).unwrap();
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let dir = api.dir.join(NODE);
        let uid = allocated_claim(&api, &["pod-1"]);
        let mut bench = Bench {
            claims: kube::Api::namespaced(client, "default"),
            api,
            fx,
            dir,
            uid,
            driver: None,
            starts: 0,
        };
        bench.start(&[]);
        let error = kubelet_call(bench.socket(), &bench.uid, false).await;
        assert_eq!(error, "", "{}", bench.log());
        bench
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("kubelet/plugins/rdma-ns.io/dra.sock")
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn note(&self) -> PathBuf {
        self.data()
            .join("_claims")
            .join(format!("{}.status.json", self.uid))
    }

    fn log_name(&self) -> String {
        format!("driver-{}.log", self.starts)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.api.dir.join(self.log_name())).unwrap_or_default()
    }

    /// A driver, once it answers on its socket; `env` as [`start_driver_with`]'s.
    fn start(&mut self, env: &[(&str, &str)]) {
        self.starts += 1;
        let _ = std::fs::remove_file(self.socket());
        let log = self.log_name();
        let child = start_driver_with(&self.api, NODE, &self.fx, &self.dir, &log, env);
        self.driver = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(self.socket()).is_err() {
            assert!(Instant::now() < deadline, "no socket: {}", self.log());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn kill(&mut self) {
        if let Some(mut d) = self.driver.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }

    /// The claim's `status.devices` as the server holds it, each condition's time removed.
    async fn entries(&self) -> Vec<Value> {
        let claim = self.claims.get_status("rdma").await.unwrap();
        let devices = claim.status.and_then(|s| s.devices).unwrap_or_default();
        let mut v = serde_json::to_value(devices).unwrap();
        for d in v.as_array_mut().unwrap() {
            for c in d["conditions"].as_array_mut().into_iter().flatten() {
                c.as_object_mut().unwrap().remove("lastTransitionTime");
            }
        }
        v.as_array().unwrap().clone()
    }

    async fn wait_entries(&self, what: &str, want: impl Fn(&[Value]) -> bool) -> Duration {
        let start = Instant::now();
        loop {
            let got = self.entries().await;
            if want(&got) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{what}: not within 30 s; the claim's entries: {got:?}; {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Waits for the note to go: the writer removes it just after the apply that clears.
    fn wait_note_gone(&self, when: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.note().exists() {
            assert!(
                Instant::now() < deadline,
                "a note stranded {when}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The files that keep the pod's device: the prepared claim's record, its CDI spec, the
    /// attachment record.
    fn device_files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut files = vec![self
            .data()
            .join("_claims")
            .join(format!("{}.json", self.uid))];
        files.extend(files_under(&self.dir.join("cdi")));
        files.extend(files_under(&self.data().join("cn")));
        files
            .into_iter()
            .map(|p| {
                let bytes = std::fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect()
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.kill();
    }
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

/// A small xorshift: the instants, reproducible from the seed the test prints.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn ready(e: &[Value]) -> bool {
    e.len() == 1 && e[0]["conditions"][0]["status"] == "True"
}

/// Where the kills fell, from what each left, by stage; `applied` names the stages after the
/// server-side apply.
#[derive(Debug, Default)]
struct Cuts(std::collections::BTreeMap<&'static str, u32>);

impl Cuts {
    fn count(&mut self, stage: &'static str) {
        *self.0.entry(stage).or_default() += 1;
    }

    /// At least one kill before the apply and one after it.
    fn both_sides(&self, applied: &[&str]) -> bool {
        let after = self.0.keys().filter(|k| applied.contains(k)).count();
        after > 0 && after < self.0.len()
    }
}

/// ADD's stages: the note is written before the apply.
fn add_stage(noted: bool, entry: bool) -> &'static str {
    match (noted, entry) {
        (false, false) => "before the note",
        (true, false) => "between the note and the apply",
        (_, true) => "after the apply",
    }
}
const ADD_APPLIED: &[&str] = &["after the apply"];

/// DEL's stages: the note is removed after the apply that clears the entry.
fn del_stage(noted: bool, entry: bool) -> &'static str {
    match (entry, noted) {
        (true, _) => "before the apply",
        (false, true) => "between the apply and the note's removal",
        (false, false) => "after the note's removal",
    }
}
const DEL_APPLIED: &[&str] = &[
    "between the apply and the note's removal",
    "after the note's removal",
];

#[tokio::test]
async fn the_status_writer_killed_at_any_instant_ends_as_an_unkilled_one() {
    let mut b = Bench::new().await;

    // The unkilled reference: ADD's record makes the entry, DEL's removal clears it.
    let added = Instant::now();
    let record = write_attachment(&b.data(), &b.uid, DEVICE);
    b.wait_entries("Ready after ADD", ready).await;
    let to_written = added.elapsed();
    let reference = b.entries().await;
    let kept = b.device_files();
    assert!(b.note().exists(), "the note of the entry written");
    let removed = Instant::now();
    std::fs::remove_file(&record).unwrap();
    b.wait_entries("cleared after DEL", <[Value]>::is_empty)
        .await;
    let to_cleared = removed.elapsed();
    b.wait_note_gone("after DEL");

    // The named point: killed between the note and the apply.
    b.kill();
    b.start(&[("RDMA_NS_TEST_KILL_AT", "dra-status")]);
    write_attachment(&b.data(), &b.uid, DEVICE);
    let mut d = b.driver.take().unwrap();
    let status = d.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "not killed at dra-status: {}",
        b.log()
    );
    assert!(b.note().exists() && b.entries().await.is_empty());
    b.start(&[]);
    b.wait_entries("Ready after the kill at dra-status", |e| e == reference)
        .await;
    assert_eq!(b.device_files(), kept);

    // Random instants, within twice what an unkilled write and clear took.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("seed {seed}; written in {to_written:?}, cleared in {to_cleared:?}");
    let mut rng = Rng(seed);
    let window = |d: Duration| (2 * d.as_micros() as u64).max(5_000);
    let (mut adds, mut dels) = (Cuts::default(), Cuts::default());
    let mut rounds = 0;
    while rounds < 10 || !(adds.both_sides(ADD_APPLIED) && dels.both_sides(DEL_APPLIED)) {
        assert!(
            rounds < 60,
            "60 rounds did not cut both before and after the apply (seed {seed}): ADD {adds:?}, \
             DEL {dels:?}"
        );
        rounds += 1;
        // DEL, then a kill.
        std::fs::remove_file(&record).unwrap();
        std::thread::sleep(Duration::from_micros(rng.below(window(to_cleared))));
        b.kill();
        let entry = !b.entries().await.is_empty();
        dels.count(del_stage(b.note().exists(), entry));
        b.start(&[]);
        b.wait_entries(
            "cleared after a kill during DEL's clear",
            <[Value]>::is_empty,
        )
        .await;
        b.wait_note_gone(&format!("after a kill during DEL's clear (seed {seed})"));
        // ADD, then a kill.
        write_attachment(&b.data(), &b.uid, DEVICE);
        std::thread::sleep(Duration::from_micros(rng.below(window(to_written))));
        b.kill();
        let entry = !b.entries().await.is_empty();
        adds.count(add_stage(b.note().exists(), entry));
        b.start(&[]);
        b.wait_entries("Ready after a kill during ADD's write", |e| e == reference)
            .await;
        assert!(b.note().exists());
        assert_eq!(
            b.device_files(),
            kept,
            "the pod's device files (seed {seed})"
        );
    }
    eprintln!("{rounds} rounds: ADD {adds:?}, DEL {dels:?}");

    // Unprepare before DEL (the kubelet unprepares once the pod is gone; a failed DEL is
    // retried later), then DEL and a kill: the entry still goes, with its note.
    let mut cuts = Cuts::default();
    let mut rounds = 0;
    while rounds < 4 || !cuts.both_sides(DEL_APPLIED) {
        assert!(
            rounds < 30,
            "30 rounds did not cut both sides (seed {seed}): {cuts:?}"
        );
        rounds += 1;
        assert_eq!(kubelet_call(b.socket(), &b.uid, true).await, "");
        std::fs::remove_file(&record).unwrap();
        std::thread::sleep(Duration::from_micros(rng.below(window(to_cleared))));
        b.kill();
        let entry = !b.entries().await.is_empty();
        cuts.count(del_stage(b.note().exists(), entry));
        b.start(&[]);
        b.wait_entries(
            "cleared after unprepare, DEL and a kill",
            <[Value]>::is_empty,
        )
        .await;
        b.wait_note_gone(&format!("after unprepare, DEL and a kill (seed {seed})"));
        assert_eq!(kubelet_call(b.socket(), &b.uid, false).await, "");
        write_attachment(&b.data(), &b.uid, DEVICE);
        b.wait_entries("Ready again", |e| e == reference).await;
    }
    eprintln!("{rounds} rounds of unprepare first: {cuts:?}");

    // DEL, unprepare: nothing of the claim is left, temp files of killed writes included.
    std::fs::remove_file(&record).unwrap();
    b.wait_entries("cleared at the end", <[Value]>::is_empty)
        .await;
    assert_eq!(kubelet_call(b.socket(), &b.uid, true).await, "");
    let left: Vec<PathBuf> = files_under(&b.data().join("_claims"))
        .into_iter()
        .chain(files_under(&b.dir.join("cdi")))
        .collect();
    assert!(left.is_empty(), "left after unprepare: {left:?}");
    assert!(!b.log().contains("reconcile:"), "{}", b.log());
}

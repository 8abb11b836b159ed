//! Crash safety at random instants: the test SIGKILLs the real binary's ADD at instants spread
//! over a clean ADD's duration (measured first, on the same devices), with Debian's host-local
//! as IPAM, so kills land inside steps too, the IPAM plugin's exec among them, and not only
//! between steps as in tests/crash_safety.rs. One kill in three lands instead the moment
//! host-local's reservation file appears (see `next_instant`). Each kill is followed by two
//! DELs, as a runtime sends them, and must leave nothing: no host-local reservation, no record,
//! no temp file, no per-attachment lock file, no process of the attachment, no child and no
//! stranded device.
//!
//! It counts the kills that landed while the IPAM plugin ran, seen right after the kill: a
//! process of this attachment still alive (its environment holds the attachment's
//! CNI_CONTAINERID, which is unique to the kill), or a host-local reservation file still empty
//! (created, its owner not written yet). It fails when none did: it would no longer test what
//! it is for.
//!
//! `RDMA_NS_KILLS=N` sets the kills per mode (default 300); `RDMA_NS_KILL_SEED=S` replays a run's
//! spread instants (each run prints its seed).

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// Clean ADD/DEL cycles whose median ADD duration spans the kill instants; the first, which
/// pages in the binaries, is not counted.
const CLEAN_RUNS: usize = 8;

/// What `Child::kill` sends.
const SIGKILL: i32 = 9;

struct Bench {
    mode: &'static str,
    veth: Veth,
    ns: TestNetns,
    data: DataDir,
    conf: Value,
    before: HostView,
}

fn bench(mode: &'static str, subnet: &str) -> Bench {
    let veth = Veth::new();
    let ns = TestNetns::new();
    let data = DataDir::new();
    // host-local speaks CNI up to 1.0.0.
    let mut conf = json!({"cniVersion": "1.0.0", "name": "kills", "type": "rdma-ns",
        "mode": mode, "dataDir": data.state(),
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                 "dataDir": data.path().join("host-local")}});
    set_parent(&mut conf, mode, &veth.nic);
    let before = host_view(&veth.nic);
    Bench {
        mode,
        veth,
        ns,
        data,
        conf,
        before,
    }
}

/// Files directly under `dir` (none when it does not exist).
fn files_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect()
}

/// Pids of the processes, but `except`, whose environment holds `CNI_CONTAINERID=id`: the
/// plugin and the IPAM plugin it runs both do, nothing else does.
fn processes_of(id: &str, except: Option<u32>) -> Vec<u32> {
    let needle = format!("CNI_CONTAINERID={id}\0").into_bytes();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| Some(pid) != except)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

impl Bench {
    fn call(&self, command: &str, id: &str) -> Call {
        Call::new(command, id, &self.ns.path(), "net1")
    }

    fn host_local_dir(&self) -> PathBuf {
        self.data.path().join("host-local")
    }

    /// host-local's reservations (one file per address, named by it, holding its owner) and
    /// what each holds.
    fn allocations(&self) -> Vec<(PathBuf, String)> {
        leases(&self.host_local_dir())
            .into_iter()
            .map(|p| {
                let owner = std::fs::read_to_string(&p).unwrap_or_default();
                (p, owner)
            })
            .collect()
    }

    fn network_dir(&self) -> PathBuf {
        Path::new(&self.data.state()).join("kills")
    }

    fn records(&self) -> Vec<PathBuf> {
        files_in(&self.network_dir())
            .into_iter()
            .filter(|p| !is_temp(p) && p.extension().is_some_and(|x| x == "json"))
            .collect()
    }

    fn temp_files(&self) -> Vec<PathBuf> {
        files_in(&self.network_dir())
            .into_iter()
            .filter(|p| is_temp(p))
            .collect()
    }

    /// Lock files naming this attachment's container (device locks name devices).
    fn locks_of(&self, id: &str) -> Vec<PathBuf> {
        files_in(&Path::new(&self.data.state()).join("locks"))
            .into_iter()
            .filter(|p| p.file_name().unwrap().to_string_lossy().contains(id))
            .collect()
    }

    /// What attachment `id` left behind, by kind, after its DELs.
    fn leftovers(&self, id: &str) -> Vec<(&'static str, String)> {
        let mut left = Vec::new();
        let mut found = |kind, what: String| left.push((kind, what));
        let pids = processes_of(id, None);
        if !pids.is_empty() {
            found("process", format!("pids {pids:?}"));
        }
        for (path, owner) in self.allocations() {
            found(
                "allocation",
                format!("{} holding {owner:?}", path.display()),
            );
        }
        for path in self.records() {
            found("record", path.display().to_string());
        }
        for path in self.temp_files() {
            found("temp file", path.display().to_string());
        }
        for path in self.locks_of(id) {
            found("lock file", path.display().to_string());
        }
        if let Err(e) = back_in_host(&self.veth.nic, &self.before) {
            found("device", e);
        }
        if let Err(e) = child_gone(&self.ns, "net1", &self.veth.nic) {
            found("child", e);
        }
        left
    }
}

fn is_temp(path: &Path) -> bool {
    path.file_name()
        .unwrap()
        .to_string_lossy()
        .contains(".tmp-")
}

/// xorshift64*: instants that a seed replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

fn seed() -> u64 {
    match std::env::var("RDMA_NS_KILL_SEED") {
        Ok(s) => s.parse().expect("RDMA_NS_KILL_SEED is a number"),
        Err(_) => {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        }
    }
}

fn kills_per_mode() -> usize {
    std::env::var("RDMA_NS_KILLS")
        .map(|s| s.parse().expect("RDMA_NS_KILLS is a number"))
        .unwrap_or(300)
}

/// What the kills of one mode did and left.
#[derive(Default)]
struct Tally {
    mode: &'static str,
    seed: u64,
    /// Kill instants are drawn from 0 to this after exec.
    span: Duration,
    killed: usize,
    /// Kills aimed at host-local's reservation (see `next_instant`).
    aimed: usize,
    /// ADDs that finished before their kill (an instant past their end).
    completed: usize,
    /// ADDs that failed on their own: nothing here should make one fail.
    failed: Vec<String>,
    /// Kills that landed while the IPAM plugin ran, and how each was seen.
    during_ipam: usize,
    ipam_alive: usize,
    reservation_empty: usize,
    /// Per kind of leftover, the cycles that left one, and the first seen.
    leaks: BTreeMap<&'static str, usize>,
    first: BTreeMap<&'static str, String>,
}

impl Tally {
    fn leak(&mut self, kind: &'static str, what: String) {
        *self.leaks.entry(kind).or_default() += 1;
        self.first.entry(kind).or_insert(what);
    }

    fn summary(&self) -> String {
        let (mode, seed, span) = (self.mode, self.seed, self.span);
        let leaks: Vec<String> = self.leaks.iter().map(|(k, n)| format!("{k} {n}")).collect();
        format!(
            "{mode}: {} kills ({} at host-local's reservation, the others at instants 0-{:.1} ms \
             after exec, RDMA_NS_KILL_SEED={seed}), {} during the IPAM exec ({} with the IPAM \
             plugin alive after the kill, {} with an empty reservation), {} ADDs completed \
             first, {} failed; cycles leaving something: {}",
            self.killed,
            self.aimed,
            span.as_secs_f64() * 1e3,
            self.during_ipam,
            self.ipam_alive,
            self.reservation_empty,
            self.completed,
            self.failed.len(),
            if leaks.is_empty() {
                "none".to_string()
            } else {
                leaks.join(", ")
            }
        )
    }
}

/// The probes of a process and of a temp file find one while it exists (the records,
/// allocations and lock files are found in the clean cycles), and a DEL removes a temp file of
/// its attachment, with no record to go by.
fn probes_find_what_exists(b: &Bench) {
    let id = unique("rkp");
    let mut holder = std::process::Command::new("sleep")
        .arg("30")
        .env("CNI_CONTAINERID", &id)
        .spawn()
        .unwrap();
    // Its environment is readable once exec has laid it out, which can be just after spawn
    // returns (the parent is released before the new stack is built).
    let deadline = Instant::now() + Duration::from_secs(5);
    while processes_of(&id, None).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(processes_of(&id, None), vec![holder.id()]);
    assert!(processes_of(&id, Some(holder.id())).is_empty());
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(processes_of(&id, None).is_empty());

    // A temp record as the plugin names it, of a writer that is gone.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(b.network_dir())
        .unwrap();
    let temp = b.network_dir().join(format!(".{id}:net1.json.tmp-{pid}"));
    std::fs::write(&temp, b"{").unwrap();
    assert_eq!(b.temp_files(), vec![temp.clone()]);
    b.call("DEL", &id).run(&b.conf).ok();
    assert!(b.temp_files().is_empty(), "DEL removes it");
}

/// Clears what a leaking cycle left, so that the next one starts from nothing too. A stranded
/// device or child cannot be cleared here: the run stops.
fn mop_up(b: &Bench, id: &str, left: &[(&'static str, String)], t: &Tally) {
    if let Some((kind, what)) = left.iter().find(|(k, _)| matches!(*k, "device" | "child")) {
        panic!(
            "{}: stopped at a stranded {kind}: {what}\n{}",
            b.mode,
            t.summary()
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !processes_of(id, None).is_empty() {
        assert!(Instant::now() < deadline, "processes of {id} do not end");
        std::thread::sleep(Duration::from_millis(10));
    }
    let paths = b.allocations().into_iter().map(|(p, _)| p);
    for path in paths
        .chain(b.records())
        .chain(b.temp_files())
        .chain(b.locks_of(id))
    {
        let _ = std::fs::remove_file(path);
    }
}

/// DEL twice, as a runtime does, then count what attachment `id` left.
fn settle(b: &Bench, id: &str, t: &mut Tally) {
    for _ in 0..2 {
        let del = b.call("DEL", id).run(&b.conf);
        if del.code != 0 {
            t.leak("failed DEL", format!("{id}: {}", del.stdout));
        }
    }
    let left = b.leftovers(id);
    let mut kinds: Vec<&'static str> = left.iter().map(|(k, _)| *k).collect();
    kinds.dedup();
    for kind in kinds {
        let what: Vec<&str> = left
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, w)| w.as_str())
            .collect();
        t.leak(kind, format!("{id}: {}", what.join("; ")));
    }
    if !left.is_empty() {
        mop_up(b, id, &left, t);
    }
}

/// Clean ADD/DEL cycles: the median ADD duration (exec to exit), with every probe of a leak
/// first finding what a live attachment has.
fn clean_add_duration(b: &Bench, t: &mut Tally) -> Duration {
    let mut took = Vec::new();
    for _ in 0..CLEAN_RUNS {
        let id = unique("rkc");
        let mut add = b.call("ADD", &id).spawn(&b.conf);
        let started = Instant::now();
        let status = add.wait().unwrap();
        took.push(started.elapsed());
        assert!(status.success(), "{}: a clean ADD failed: {status}", b.mode);
        let owners: Vec<String> = b.allocations().into_iter().map(|(_, o)| o).collect();
        assert!(
            owners.len() == 1 && owners[0].contains(&id),
            "{}: host-local's reservation of {id}: {owners:?}",
            b.mode
        );
        assert_eq!(b.records().len(), 1, "{}: the record of {id}", b.mode);
        assert_eq!(b.locks_of(&id).len(), 1, "{}: the lock of {id}", b.mode);
        assert!(b.ns.link("net1").is_some(), "{}: the pod interface", b.mode);
        match b.mode {
            "move" => assert!(back_in_host(&b.veth.nic, &b.before).is_err()),
            _ => assert!(child_gone(&b.ns, "net1", &b.veth.nic).is_err()),
        }
        settle(b, &id, t);
    }
    let mut took = took.split_off(1);
    took.sort();
    took[took.len() / 2]
}

/// When a kill lands.
#[derive(Clone, Copy, Debug)]
enum KillAt {
    /// This long after exec.
    After(Duration),
    /// The moment host-local's reservation file is seen (polling its directory), or this long
    /// after exec when none is.
    Reservation(Duration),
}

impl Bench {
    /// Waits until `when`, from `started`.
    fn wait_for(&self, when: KillAt, started: Instant) {
        match when {
            KillAt::After(delay) => {
                if let Some(rest) = (started + delay).checked_duration_since(Instant::now()) {
                    std::thread::sleep(rest);
                }
            }
            KillAt::Reservation(limit) => {
                let dir = self.host_local_dir().join("kills");
                while started.elapsed() < limit && !files_in(&dir).iter().any(|p| is_reservation(p))
                {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

/// A host-local reservation: a file named by its address (host-local's `lock` and
/// `last_reserved_ip.*` files are not).
fn is_reservation(path: &Path) -> bool {
    let name = path.file_name().unwrap().to_string_lossy();
    name != "lock" && !name.starts_with("last_reserved_ip")
}

/// One ADD killed at `when`, then settled. The IPAM probes look right after the kill, before
/// the plugin is reaped: an IPAM plugin that outlives it has not been waited for.
fn kill_at(b: &Bench, when: KillAt, t: &mut Tally) {
    let id = unique("rk");
    let mut add = b.call("ADD", &id).spawn(&b.conf);
    b.wait_for(when, Instant::now());
    add.kill().unwrap();
    let ipam_alive = !processes_of(&id, Some(add.id())).is_empty();
    let reservation_empty = b.allocations().iter().any(|(_, o)| o.trim().is_empty());
    let status = add.wait().unwrap();
    if status.signal() == Some(SIGKILL) {
        t.killed += 1;
        t.aimed += usize::from(matches!(when, KillAt::Reservation(_)));
        t.ipam_alive += usize::from(ipam_alive);
        t.reservation_empty += usize::from(reservation_empty);
        t.during_ipam += usize::from(ipam_alive || reservation_empty);
    } else if status.success() {
        t.completed += 1;
    } else {
        t.failed.push(format!("{id}: {status}"));
    }
    settle(b, &id, t);
}

/// Two kills in three land at an instant spread over the clean ADD's duration. The third lands
/// the moment host-local's reservation file appears: host-local creates the file, then writes
/// its owner into it, a window of microseconds that instants spread over the whole ADD reach
/// too seldom to catch a plugin killed inside it.
fn next_instant(t: &Tally, rng: &mut Rng, cycle: usize) -> KillAt {
    match cycle % 3 {
        0 => KillAt::Reservation(t.span * 3),
        _ => KillAt::After(Duration::from_micros(rng.below(t.span.as_micros() as u64))),
    }
}

fn kills_at_random_instants(mode: &'static str, subnet: &str) {
    let b = bench(mode, subnet);
    probes_find_what_exists(&b);
    let mut t = Tally {
        mode,
        seed: seed(),
        ..Tally::default()
    };
    t.span = clean_add_duration(&b, &mut t);
    let mut rng = Rng(t.seed);
    let kills = kills_per_mode();
    let mut cycles = 0;
    while t.killed < kills {
        cycles += 1;
        assert!(cycles <= 3 * kills, "{}", t.summary());
        let when = next_instant(&t, &mut rng, cycles);
        kill_at(&b, when, &mut t);
    }
    let summary = t.summary();
    println!("{summary}");
    assert!(
        t.failed.is_empty(),
        "{summary}\nfailed ADDs: {:?}",
        t.failed
    );
    assert!(
        t.during_ipam > 0,
        "{summary}\nno kill landed during the IPAM exec: this run tested nothing it is for"
    );
    assert!(
        t.leaks.is_empty(),
        "{summary}\nthe first of each kind: {:#?}",
        t.first
    );
}

#[test]
fn move_mode_leaves_nothing_after_a_kill_at_any_instant() {
    kills_at_random_instants("move", "10.97.0.0/24");
}

#[test]
fn macvlan_mode_leaves_nothing_after_a_kill_at_any_instant() {
    kills_at_random_instants("macvlan", "10.98.0.0/24");
}

"""Section `kube` of the benchmark (asked by name: `tests/bench/run.sh --only kube`): the two
figures of the Kubernetes lab (docs/lab.md), on a lab that is up or that this
section brings up with `install/lab.sh up` (RDMA_NS_LAB_PODS=0) and takes down again.

- Pod start to Ready: a pod shaped like conf/pod.yaml on node1 with the `roce-shared` network
  (Multus, rdma-ns with a Soft-RoCE device, whereabouts) against the same pod with the default
  network only, alternating, from `kubectl apply` to the Ready condition as `kubectl wait` sees
  it; the median of each and their ratio.
- Bandwidth across the nodes: `ib_write_bw` between two pods on the two nodes (their own
  Soft-RoCE devices on macvlan children of rail0, through `rdma-ns env --exec`) against the same
  between the two nodes' hosts (a Soft-RoCE device on rail0 itself, an address on it in the
  host netns), alternating; the ratio of the medians, target >= 0.9.

Under TCG the absolute figures are an emulated machine's; the ratios, measured alternately on the
same two VMs, are what the section reports.
"""

import os
import statistics
import subprocess
import sys
import time

from node_bench import verdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "kube"))

from lab import Fail, Lab  # noqa: E402
import cases_traffic  # noqa: E402

BW_TARGET = 0.9
START_PAIRS = 5
BW_RUNS = 3
SIZE, ITERS = 65536, 2000
HOST_IPS = {1: "192.168.250.1", 2: "192.168.250.2"}


def lab_up(repo):
    """The running lab, or one brought up here; (Lab, whether this section owns it)."""
    lab_sh = os.path.join(repo, "install", "lab.sh")
    status = subprocess.run(["bash", lab_sh, "status"], capture_output=True, text=True)
    if status.stdout.startswith("lab: up"):
        return Lab(lab_sh, None), False
    env = dict(os.environ, RDMA_NS_LAB_PODS="0")
    up = subprocess.run(["bash", lab_sh, "up"], env=env, stdout=subprocess.PIPE, text=True)
    if up.returncode != 0:
        raise Fail(f"install/lab.sh up failed (exit {up.returncode})")
    return Lab(lab_sh, None), True


def start_time(lab, name, networks):
    start = time.monotonic()
    if networks:
        lab.lab_pod(name, "node1")
    else:
        manifest = lab.manifests("pod", os.path.join(lab_repo(lab), "conf/pod.yaml"), name, "node1",
                                 lab.image("lab-tools"), "")
        lab.apply(manifest)
    lab.wait_ready(name)
    seconds = time.monotonic() - start
    lab.delete_pods(name)
    return seconds


def lab_repo(lab):
    return os.path.dirname(os.path.dirname(os.path.abspath(lab.lab_sh)))


def pod_start(lab, out, failures):
    rdma, plain = [], []
    for i in range(START_PAIRS):
        rdma.append(start_time(lab, f"bench-rdma-{i}", True))
        plain.append(start_time(lab, f"bench-plain-{i}", False))
    m_rdma, m_plain = statistics.median(rdma), statistics.median(plain)
    out("kube pod start to Ready (node1, %d alternating pairs): with roce-shared median %.1f s, "
        "default network only %.1f s, ratio %.2f (samples %s / %s)" % (
            START_PAIRS, m_rdma, m_plain, m_rdma / m_plain,
            " ".join("%.1f" % s for s in rdma), " ".join("%.1f" % s for s in plain)))


class HostSide:
    """A Soft-RoCE device on each node's rail0 in the host netns, with an address on rail0."""

    def __init__(self, lab):
        self.lab = lab
        for n, ip in HOST_IPS.items():
            lab.sh(n, f"ip addr add {ip}/24 dev rail0 && rdma link add hostrxe0 type rxe netdev rail0")

    def bandwidth(self):
        tool = (f"timeout -s KILL {cases_traffic.TOOL_TIMEOUT} ib_write_bw -d hostrxe0 -x 1 -F "
                f"--report_gbits -s {SIZE} -n {ITERS} -p 18516")
        server = subprocess.Popen(["bash", self.lab.lab_sh, "node", "2", "sh", "-c", tool],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(3)
        client = self.lab.sh(1, f"{tool} {HOST_IPS[2]}", timeout=cases_traffic.TOOL_TIMEOUT + 30)
        cases_traffic.finish(server, "host ib_write_bw server on node2")
        rows = [line.split() for line in client.splitlines() if line.strip().startswith(str(SIZE))]
        if not rows:
            raise Fail(f"host ib_write_bw: no result row: {client[-800:]}")
        return float(rows[-1][3])

    def remove(self):
        for n, ip in HOST_IPS.items():
            self.lab.sh(n, f"rdma link delete hostrxe0; ip addr del {ip}/24 dev rail0", check=False)


def bandwidth(lab, out, failures):
    lab.lab_pod("bench-a", "node1")
    lab.lab_pod("bench-b", "node2")
    lab.wait_ready("bench-a", "bench-b")
    host = HostSide(lab)
    try:
        a, b = cases_traffic.PodView(lab, "bench-a", 1), cases_traffic.PodView(lab, "bench-b", 2)
        pods, hosts = [], []
        for _ in range(BW_RUNS):
            hosts.append(host.bandwidth())
            pods.append(cases_traffic.ib_write_bw(lab, a, b, SIZE, ITERS))
    finally:
        host.remove()
        lab.delete_pods("bench-a", "bench-b")
    ratio = statistics.median(pods) / statistics.median(hosts)
    ok = ratio >= BW_TARGET
    out("kube ib_write_bw node1 -> node2 over rail0 (%d alternating runs, %d x %d B): pod to pod "
        "median %.3f Gb/s, host to host %.3f Gb/s, ratio %.2f [target >= %.1f: %s]" % (
            BW_RUNS, ITERS, SIZE, statistics.median(pods), statistics.median(hosts), ratio,
            BW_TARGET, verdict(ok)))
    if not ok:
        failures.append("kube: pod-to-pod bandwidth %.2f of host-to-host" % ratio)


def on_lab(repo, section, failures, body):
    """body(lab) on the running lab, or on one brought up for it and taken down after; a Fail
    is the section's failure."""
    try:
        lab, owned = lab_up(repo)
    except Fail as e:
        failures.append(f"{section}: {e}")
        return
    try:
        body(lab)
    except Fail as e:
        failures.append(f"{section}: {e}")
    finally:
        if owned:
            subprocess.run(["bash", lab.lab_sh, "down"], capture_output=True)


def run(repo, out, failures):
    def body(lab):
        pod_start(lab, out, failures)
        bandwidth(lab, out, failures)
    on_lab(repo, "kube", failures, body)

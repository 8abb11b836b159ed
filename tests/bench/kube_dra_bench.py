"""Section `kube-dra` of the benchmark (asked by name: `tests/bench/run.sh --only kube-dra`):
issue 31's two figures for rdma-ns-dra, on the Kubernetes lab (up already, or brought up here
with RDMA_NS_LAB_PODS=0 and taken down again, as section `kube` does).

- Claim allocation to Ready: a pod on node1 whose RDMA device comes from a ResourceClaimTemplate
  (rdma-ns-dra, conf/dra/nad-dra.yaml's network) against the same pod on the device-plugin
  path (the `roce-shared` NAD), alternating. Each time runs from the pod's PodScheduled
  condition (the scheduler allocates a pod's claims as it binds it; the device-plugin pod is
  bound at the same step) to its Ready condition, both as the API server stamped them (1 s
  resolution); the median of each and their ratio.
- The driver's cost: rdma-ns-dra's RSS and CPU on node1, read from its /proc (VmRSS, VmHWM,
  utime + stime) over a minute at idle, then while RDMA_NS_BENCH_DRA_PODS (default 20) claim
  pods come and go on node1, in waves of RDMA_NS_BENCH_DRA_WAVE (default 4: each wave created,
  all Ready, all deleted and their claims gone, then the next). Waves, not all 20 at once: the
  lab's node is one emulated vCPU, and 20 sandboxes at once there ran past the kubelet's CRI
  timeouts into retries (18 of 20 still ContainerCreating after 18 minutes), which measures
  the node's backlog rather than the driver.

The DRA cases' helpers set the driver up (tests/kube/cases_dra.py: the device plugin's
DaemonSet deleted first, as there; the `roce-shared` pods do not use it, since the lab's pods
request no rdma/hca_shared). Under TCG the absolute figures are an emulated machine's.
"""

import json
import os
import statistics
import sys
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "kube"))

from lab import Fail, wait_until  # noqa: E402
import cases_dra  # noqa: E402
from kube_bench import on_lab  # noqa: E402

START_PAIRS = 3
IDLE_SECONDS = 60
CHURN_PODS = int(os.environ.get("RDMA_NS_BENCH_DRA_PODS", "20"))
CHURN_WAVE = max(1, int(os.environ.get("RDMA_NS_BENCH_DRA_WAVE", "4")))
CHURN_WAIT = 1800


def condition_time(pod, kind):
    conds = [c for c in pod["status"].get("conditions", []) if c.get("type") == kind and c.get("status") == "True"]
    if not conds:
        raise Fail(f"{pod['metadata']['name']}: no {kind} condition")
    return datetime.fromisoformat(conds[0]["lastTransitionTime"].replace("Z", "+00:00"))


def scheduled_to_ready(lab, name):
    pod = lab.kjson("get", "pod", name)
    return (condition_time(pod, "Ready") - condition_time(pod, "PodScheduled")).total_seconds()


def start_pair(lab, i):
    """One DRA pod and one device-plugin-path pod on node1, one after the other."""
    times = []
    for name, make in ((f"bench-dra-{i}", lambda n: cases_dra.dra_pod(lab, n, "node1")),
                       (f"bench-dp-{i}", lambda n: lab.lab_pod(n, "node1"))):
        make(name)
        lab.wait_ready(name, seconds=1800)
        times.append(scheduled_to_ready(lab, name))
        lab.delete_pods(name, seconds=1800)
    return times


def allocation_to_ready(lab, out):
    dra, dp = [], []
    for i in range(START_PAIRS):
        d, p = start_pair(lab, i)
        dra.append(d)
        dp.append(p)
    m_dra, m_dp = statistics.median(dra), statistics.median(dp)
    out("kube-dra claim allocation to Ready (node1, %d alternating pairs, PodScheduled to Ready): "
        "DRA claim median %.0f s, device-plugin path median %.0f s, ratio %.2f (samples %s / %s)" % (
            START_PAIRS, m_dra, m_dp, m_dra / m_dp if m_dp else float("nan"),
            " ".join("%.0f" % s for s in dra), " ".join("%.0f" % s for s in dp)))


class DriverProc:
    """rdma-ns-dra's process on node n, read through its /proc."""

    def __init__(self, lab, n):
        self.lab, self.n = lab, n
        out = lab.sh(n, "getconf CLK_TCK; pgrep -x rdma-ns-dra || true").split()
        self.hz, pids = int(out[0]), out[1:]
        if len(pids) != 1:
            raise Fail(f"node{n}: {len(pids)} rdma-ns-dra processes ({pids})")
        self.pid = pids[0]

    def sample(self):
        """(CPU seconds so far, VmRSS kB, VmHWM kB, the node's clock)."""
        text = self.lab.sh(self.n, f"cat /proc/{self.pid}/stat; grep -E '^Vm(RSS|HWM):' /proc/{self.pid}/status; date +%s.%N")
        lines = text.splitlines()
        fields = lines[0].rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / self.hz  # utime, stime (fields 14, 15)
        vm = {l.split(":")[0]: int(l.split()[1]) for l in lines[1:3]}
        return cpu, vm["VmRSS"], vm["VmHWM"], float(lines[3])


def cpu_share(before, after):
    return 100.0 * (after[0] - before[0]) / (after[3] - before[3])


def churn(lab):
    for first in range(0, CHURN_PODS, CHURN_WAVE):
        churn_wave(lab, [f"bench-churn-{i}" for i in range(first, min(first + CHURN_WAVE, CHURN_PODS))])


def churn_wave(lab, names):
    for name in names:
        cases_dra.dra_pod(lab, name, "node1")
    lab.wait_ready(*names, seconds=CHURN_WAIT)
    claims = [cases_dra.claim_of(lab, n)["metadata"]["name"] for n in names]
    lab.delete_pods(*names, seconds=CHURN_WAIT)
    wait_until("the churn pods' claims deleted", CHURN_WAIT,
               lambda: not lab.kubectl("get", "resourceclaim", "--ignore-not-found", "-o", "name", *claims).strip(),
               step=10.0)


def driver_cost(lab, out):
    proc = DriverProc(lab, 1)
    start = proc.sample()
    time.sleep(IDLE_SECONDS)
    idle = proc.sample()
    churn(lab)
    end = proc.sample()
    out("kube-dra rdma-ns-dra on node1: idle %.0f s: CPU %.2f %%, RSS %d kB; while %d claim pods "
        "came and went in waves of %d (%.0f s): CPU %.2f %%, RSS %d kB after, peak (VmHWM) %d kB" % (
            idle[3] - start[3], cpu_share(start, idle), idle[1], CHURN_PODS, CHURN_WAVE, end[3] - idle[3],
            cpu_share(idle, end), end[1], end[2]))


def run(repo, out, failures):
    def body(lab):
        cases_dra.ensure_driver(lab)
        lab.apply(json.dumps(cases_dra.TEMPLATE))
        lab.apply(open(cases_dra.NAD_FILE).read())
        allocation_to_ready(lab, out)
        driver_cost(lab, out)
    on_lab(repo, "kube-dra", failures, body)

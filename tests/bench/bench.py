#!/usr/bin/env python3
"""rdma-ns benchmark driver (run through tests/bench/run.sh, as root).

Every plugin is exec'd exactly as a runtime does it: a fresh process, the CNI_* variables in its
environment, the network configuration on stdin, its stdout read to the end. Each timed sample is
time.perf_counter_ns() around that one subprocess (or around the `ip` processes of the floor).
Setup and teardown are never timed.
"""

import argparse
import ctypes
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import env_bench
import node_bench
import kube_bench
import kube_dra_bench
import kube_dra_api_bench
import kube_start_bench
import softroce_bench
from node_bench import verdict

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RDMA_NS = os.path.join(REPO, "target", "release", "rdma-ns")  # --plugin overrides
CNI_DIR = "/usr/lib/cni"
HOST_DEVICE = os.path.join(CNI_DIR, "host-device")
MACVLAN = os.path.join(CNI_DIR, "macvlan")
STATIC = os.path.join(CNI_DIR, "static")
ADDRESS = "10.10.0.2/24"
POD_MTU = 9000
HOST_MTU = 1500
PCI = "0000:3b:00.2"
PCI_DEVICES = "/sys/bus/pci/devices"
# Production-like: the default dataDir is /var/lib/cni/rdma-ns; the bench uses a sibling on the
# same filesystem so fsync costs are the real ones.
DATA_DIR = "/var/lib/cni/rdma-ns-bench"
TAG = "rb%x" % (os.getpid() % 0xFFF)
# Idle time between a cycle's ADD and its DEL (untimed; --phase-gap-ms). A netns move waits in
# the kernel for an RCU grace period (rcu_barrier() in __dev_change_net_namespace, under RTNL);
# a move issued within ~10-15 ms of the previous one also waits out the grace period that the
# previous one's tail started (docs/benchmarks.md, "What a move waits for"). A pod's DEL does not
# follow its ADD within milliseconds, so by default the DEL is not charged for its ADD's tail,
# as no timing is charged for the previous cycle's netns cleanup (settle). The section
# `compare-b2b` measures the same with no gap.
PHASE_GAP = 0.1

failures = []


def ip_batch(lines, netns=None, check=True):
    """Runs one `ip -batch -` (setup, teardown and the floor)."""
    cmd = ["ip"] + (["-n", netns] if netns else []) + ["-batch", "-"]
    p = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), p.stderr.strip()))
    return p


def link_exists(name):
    return os.path.exists("/sys/class/net/" + name)


class Pod:
    """A fresh pod netns, a fresh veth pair whose `nic` end stands for the NIC (its peer stays in
    the host, up), and a sentinel veth whose one end lives in the pod: it disappears from the host
    only when the kernel's deferred netns cleanup (cleanup_net) has destroyed the pod's devices,
    which is what `settle` waits for. `nic_up`: the nic is up too (a macvlan master, as a RoCE
    port in use is)."""

    seq = 0

    def __init__(self, nic_up=False):
        Pod.seq += 1
        n = "%s%x" % (TAG, Pod.seq)
        self.ns, self.nic, self.peer, self.sentinel = n, n + "n", n + "p", n + "s"
        ip_batch([
            "netns add " + self.ns,
            "link add %s type veth peer name %s" % (self.nic, self.peer),
            "link set %s up" % self.peer,
        ] + (["link set %s up" % self.nic] if nic_up else []) + [
            "link add %s type veth peer name %sq netns %s" % (self.sentinel, self.sentinel, self.ns),
        ])
        self.path = "/run/netns/" + self.ns
        with open("/sys/class/net/%s/address" % self.nic) as f:
            self.mac = f.read().strip()

    def teardown(self):
        # The peer takes the nic with it wherever the nic is; the sentinel goes with the netns.
        subprocess.run(["ip", "-force", "-batch", "-"], capture_output=True, text=True,
                       input="link del %s\nnetns del %s\n" % (self.peer, self.ns))

    def settled(self):
        return not link_exists(self.sentinel)


def settle(pods, timeout=10.0):
    """Waits until the deferred cleanup of the deleted pod netns has run (their sentinels are gone),
    then 5 ms more for its RCU tail, so that it does not run under the next timed sample."""
    deadline = time.monotonic() + timeout
    while not all(p.settled() for p in pods):
        if time.monotonic() > deadline:
            raise RuntimeError("netns cleanup did not finish within %.0f s" % timeout)
        time.sleep(0.001)
    time.sleep(0.005)


def cni_env(command, pod, cid):
    # What libcni sets (some empty), nothing else but PATH.
    return {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": pod.path if pod else "",
        "CNI_IFNAME": "net1",
        "CNI_ARGS": "",
        "CNI_PATH": CNI_DIR,
    }


def timed_exec(binary, env, stdin):
    t0 = time.perf_counter_ns()
    p = subprocess.run([binary], input=stdin, env=env, capture_output=True)
    t1 = time.perf_counter_ns()
    return t1 - t0, p


def ipam_conf():
    return {"type": "static", "addresses": [{"address": ADDRESS}]}


def rdma_conf(selector, pod):
    conf = {"cniVersion": "1.0.0", "name": "bench", "type": "rdma-ns", "mode": "move",
            "mtu": POD_MTU, "dataDir": DATA_DIR, "ipam": ipam_conf()}
    if selector == "device":
        conf["device"] = pod.nic
    elif selector == "hwaddr":
        conf["hwaddr"] = pod.mac
    elif selector == "pci":
        # What Multus passes from a device plugin; resolved through own_pci_sysfs()'s tmpfs.
        conf["deviceID"] = PCI
        fixture_point_pci_at(pod.nic)
    return conf


def fixture_point_pci_at(netdev):
    """<PCI>/net/<netdev> in the /sys/bus/pci/devices that own_pci_sysfs() made: the one
    directory a deviceID lookup reads."""
    net = os.path.join(PCI_DEVICES, PCI, "net")
    os.makedirs(net, exist_ok=True)
    for old in os.listdir(net):
        os.rmdir(os.path.join(net, old))
    os.mkdir(os.path.join(net, netdev))


def own_pci_sysfs():
    """Release builds read only the real /sys (RDMA_NS_SYSFS_ROOT is a debug-build seam), so an
    empty tmpfs is mounted over /sys/bus/pci/devices in a mount namespace of the benchmark's own:
    every process it starts inherits it, nothing outside sees it, and it goes with the process.
    Called before any thread exists (unshare(CLONE_NEWNS) refuses a process whose threads share
    its fs)."""
    CLONE_NEWNS = 0x00020000
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "unshare(CLONE_NEWNS): " + os.strerror(err))
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "rdma-ns-bench", PCI_DEVICES],
                   check=True)


def nic_back(pod):
    """After a move DEL: the device is back in the host under its own name with its own MAC, and
    no longer in the pod (a device with that name but another MAC, or one left in the pod as
    well, is not "DEL undid the ADD")."""
    try:
        with open("/sys/class/net/%s/address" % pod.nic) as f:
            if f.read().strip() != pod.mac:
                return False
    except OSError:
        return False
    in_pod = subprocess.run(["ip", "-n", pod.ns, "-o", "link", "show"], capture_output=True, text=True)
    return in_pod.returncode == 0 and pod.mac not in in_pod.stdout


def run_plugin_cycle(binary, conf, pod, cid, extra_env=None, gone=nic_back):
    """ADD then DEL (with the ADD's result as prevResult, as libcni passes it); `gone` checks,
    untimed, that DEL undid the ADD."""
    env = cni_env("ADD", pod, cid)
    env.update(extra_env or {})
    add_ns, p = timed_exec(binary, env, json.dumps(conf).encode())
    ok = p.returncode == 0
    if not ok:
        failures.append("%s ADD %s: %s %s" % (os.path.basename(binary), cid, p.stdout, p.stderr))
        result = None
    else:
        result = json.loads(p.stdout)
    time.sleep(PHASE_GAP)
    del_conf = dict(conf)
    if result is not None:
        del_conf["prevResult"] = result
    env["CNI_COMMAND"] = "DEL"
    del_ns, p = timed_exec(binary, env, json.dumps(del_conf).encode())
    if p.returncode != 0:
        ok = False
        failures.append("%s DEL %s: %s %s" % (os.path.basename(binary), cid, p.stdout, p.stderr))
    elif ok and not gone(pod):
        ok = False
        failures.append("%s DEL %s: %s did not undo the ADD" % (binary, cid, pod.nic))
    return add_ns, del_ns, ok


def variant_rdma(pod, i, selector="device"):
    conf = rdma_conf(selector, pod)
    return run_plugin_cycle(RDMA_NS, conf, pod, "bench%d" % i)


def variant_host_device(pod, i):
    conf = {"cniVersion": "1.0.0", "name": "bench", "type": "host-device", "device": pod.nic,
            "ipam": ipam_conf()}
    return run_plugin_cycle(HOST_DEVICE, conf, pod, "bench%d" % i)


HOST_NS_NAME = "%sh" % TAG  # /run/netns entry for the host netns (the floor moves back to it)


def variant_floor(pod, i):
    """The same kernel operations from iproute2, one `ip -batch` per netns touched: ADD is the
    move+rename+MTU in the host, then address and up in the pod (a batch cannot switch netns);
    DEL is one move+rename+MTU back from the pod."""
    t0 = time.perf_counter_ns()
    a = ip_batch(["link set dev %s netns %s name net1 mtu %d" % (pod.nic, pod.ns, POD_MTU)],
                 check=False)
    b = ip_batch(["addr add %s dev net1" % ADDRESS, "link set dev net1 up"], netns=pod.ns,
                 check=False)
    t1 = time.perf_counter_ns()
    time.sleep(PHASE_GAP)
    t1g = time.perf_counter_ns()
    c = ip_batch(["link set dev net1 netns %s name %s mtu %d" % (HOST_NS_NAME, pod.nic, HOST_MTU)],
                 netns=pod.ns, check=False)
    t2 = time.perf_counter_ns()
    ok = a.returncode == 0 and b.returncode == 0 and c.returncode == 0 and link_exists(pod.nic)
    if not ok:
        failures.append("floor %d: %s %s %s" % (i, a.stderr, b.stderr, c.stderr))
    return t1 - t0, t2 - t1g, ok


def variant_ipam(pod, i):
    """The static IPAM plugin alone, ADD then DEL, with the conf rdma-ns hands it."""
    conf = {"cniVersion": "1.0.0", "name": "bench", "type": "rdma-ns", "mode": "move",
            "device": pod.nic, "mtu": POD_MTU, "dataDir": DATA_DIR, "ipam": ipam_conf()}
    return run_plugin_cycle_ipam(conf, pod, "bench%d" % i)


def run_plugin_cycle_ipam(conf, pod, cid):
    env = cni_env("ADD", pod, cid)
    add_ns, p = timed_exec(STATIC, env, json.dumps(conf).encode())
    ok = p.returncode == 0
    time.sleep(PHASE_GAP)
    env["CNI_COMMAND"] = "DEL"
    del_ns, q = timed_exec(STATIC, env, json.dumps(conf).encode())
    ok = ok and q.returncode == 0
    if not ok:
        failures.append("static IPAM %s: %s %s" % (cid, p.stdout, q.stdout))
    return add_ns, del_ns, ok


# MACVLAN-MODE: shared-mode children. The veth `nic` end stands for the RoCE netdev (up, as a
# port in use is); each ADD creates a macvlan child `net1` of it in a fresh pod netns, DEL deletes
# it. There is no RDMA on a veth: rdma-ns's RoCE port lookup in sysfs finds no ib device, so its
# GID wait is skipped (the lookup itself is a few failing sysfs lookups; see docs/benchmarks.md).
def macvlan_conf(plugin, pod):
    conf = {"cniVersion": "1.0.0", "name": "bench", "type": plugin, "master": pod.nic,
            "ipam": ipam_conf()}
    if plugin == "rdma-ns":
        conf.update({"mode": "macvlan", "dataDir": DATA_DIR})
    return conf


def child_gone(pod):
    """After a child DEL: net1 is no longer in the pod (untimed check)."""
    p = subprocess.run(["ip", "-n", pod.ns, "-o", "link", "show", "dev", "net1"],
                       capture_output=True, text=True)
    return p.returncode != 0


def variant_rdma_macvlan(pod, i):
    return run_plugin_cycle(RDMA_NS, macvlan_conf("rdma-ns", pod), pod, "bench%d" % i,
                            gone=child_gone)


def variant_debian_macvlan(pod, i):
    return run_plugin_cycle(MACVLAN, macvlan_conf("macvlan", pod), pod, "bench%d" % i,
                            gone=child_gone)


def variant_floor_macvlan(pod, i):
    """iproute2 doing the same kernel operations: ADD creates the child directly in the pod (one
    request with IFLA_NET_NS_FD, run in the host where the master is), then address and up in
    the pod; DEL is `ip -n pod link del net1`, the kernel's macvlan delete in a netns."""
    t0 = time.perf_counter_ns()
    a = ip_batch(["link add link %s name net1 netns %s type macvlan mode bridge"
                  % (pod.nic, pod.ns)], check=False)
    b = ip_batch(["addr add %s dev net1" % ADDRESS, "link set dev net1 up"], netns=pod.ns,
                 check=False)
    t1 = time.perf_counter_ns()
    time.sleep(PHASE_GAP)
    t1g = time.perf_counter_ns()
    c = ip_batch(["link del net1"], netns=pod.ns, check=False)
    t2 = time.perf_counter_ns()
    ok = a.returncode == 0 and b.returncode == 0 and c.returncode == 0 and child_gone(pod)
    if not ok:
        failures.append("macvlan floor %d: %s %s %s" % (i, a.stderr, b.stderr, c.stderr))
    return t1 - t0, t2 - t1g, ok


MACVLAN_VARIANTS = {
    "rdma-ns-mv": variant_rdma_macvlan,
    "macvlan": variant_debian_macvlan,
    "floor-mv": variant_floor_macvlan,
    "ipam-static": variant_ipam,
}


VARIANTS = {
    "rdma-ns": variant_rdma,
    "host-device": variant_host_device,
    "floor": variant_floor,
    "ipam-static": variant_ipam,
}


def pct(samples, q):
    s = sorted(samples)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def ms(ns):
    return ns / 1e6


class Samples:
    def __init__(self, path):
        self.rows = []
        self.f = open(path, "w", newline="")
        self.w = csv.writer(self.f)
        self.w.writerow(["section", "variant", "links", "selector", "iteration", "add_ns",
                         "del_ns", "cycle_ns", "ok"])

    def add(self, section, variant, links, selector, i, add_ns, del_ns, ok):
        row = (section, variant, links, selector, i, add_ns, del_ns, add_ns + del_ns, int(ok))
        self.rows.append(row)
        self.w.writerow(row)

    def get(self, section, variant, field, links=None, selector=None):
        idx = {"add": 5, "del": 6, "cycle": 7}[field]
        return [r[idx] for r in self.rows if r[0] == section and r[1] == variant
                and (links is None or r[2] == links) and (selector is None or r[3] == selector)]


def rotate(seq, i):
    k = i % len(seq)
    return seq[k:] + seq[:k]


def compare(samples, cycles, section="compare"):
    names = list(VARIANTS)
    for i in range(cycles):
        for name in rotate(names, i):
            pod = Pod()
            try:
                a, d, ok = VARIANTS[name](pod, i)
            finally:
                pod.teardown()
            settle([pod])
            samples.add(section, name, 0, "device", i, a, d, ok)
        # What one `ip` process costs with nothing to do, started the way the floor starts it:
        # the floor's ADD needs two (a batch cannot switch netns), a one-process floor one.
        t0 = time.perf_counter_ns()
        ip_batch([])
        samples.add(section, "ip-start", 0, "", i, time.perf_counter_ns() - t0, 0, True)


GAP_DELAYS_MS = [0, 2, 5, 10, 20, 50, 100]


def gap_effect(samples, cycles):
    """Why --phase-gap-ms: the floor's DEL move (iproute2, no plugin) issued d ms after its ADD,
    for several d. A move waits in rcu_barrier() for the callbacks queued before it; right after
    another move the grace period that move's tail started is still running, so the second waits
    out the rest of it and then its own: the move shrinks as d grows while d + move stays about
    the same, until d passes a grace period."""
    for i in range(cycles):
        for d in rotate(GAP_DELAYS_MS, i):
            pod = Pod()
            try:
                a = ip_batch(["link set dev %s netns %s name net1 mtu %d"
                              % (pod.nic, pod.ns, POD_MTU)], check=False)
                b = ip_batch(["addr add %s dev net1" % ADDRESS, "link set dev net1 up"],
                             netns=pod.ns, check=False)
                t_add = time.perf_counter_ns()
                time.sleep(d / 1000)
                t0 = time.perf_counter_ns()
                c = ip_batch(["link set dev net1 netns %s name %s mtu %d"
                              % (HOST_NS_NAME, pod.nic, HOST_MTU)], netns=pod.ns, check=False)
                t1 = time.perf_counter_ns()
                ok = not (a.returncode or b.returncode or c.returncode) and link_exists(pod.nic)
                if not ok:
                    failures.append("gap %d ms: %s %s %s" % (d, a.stderr, b.stderr, c.stderr))
            finally:
                pod.teardown()
            settle([pod])
            # add_ns holds the wait since the ADD (d plus the sleep's own overshoot).
            samples.add("gap", "floor", 0, str(d), i, t0 - t_add, t1 - t0, ok)


def report_gap(s, out):
    out("")
    out("a move right after a move (floor DEL issued d ms after its ADD; ms):")
    out("  %-6s %12s %14s" % ("d", "DEL med/p95", "d + DEL med"))
    for d in GAP_DELAYS_MS:
        dels = s.get("gap", "floor", "del", selector=str(d))
        both = s.get("gap", "floor", "cycle", selector=str(d))
        out("  %-6d %5.1f/%5.1f %14.1f" % (d, ms(statistics.median(dels)), ms(pct(dels, 0.95)),
                                           ms(statistics.median(both))))


def macvlan(samples, cycles):
    """The macvlan variants, interleaved in rotating order, each cycle in a fresh pod whose nic
    is up; settled like compare."""
    names = list(MACVLAN_VARIANTS)
    for i in range(cycles):
        for name in rotate(names, i):
            pod = Pod(nic_up=True)
            try:
                a, d, ok = MACVLAN_VARIANTS[name](pod, i)
            finally:
                pod.teardown()
            settle([pod])
            samples.add("macvlan", name, 0, "master", i, a, d, ok)
        t0 = time.perf_counter_ns()
        ip_batch([])
        samples.add("macvlan", "ip-start", 0, "", i, time.perf_counter_ns() - t0, 0, True)


# RAILS: an 8-rail pod against 8 pods of one rail each. Every attachment asks for `rail` (its
# own table, rule and ARP values) with its own subnet and the same east-west route through its
# own gateway, as the rails of a rail-optimized fabric do. "8 rails, one pod": 8 sequential ADDs
# of net1..net8 into one pod netns, the gap, 8 DELs. "8 x one rail": the same 8 ADDs, each into a
# pod of its own as net1, then the 8 DELs. A cost that grows with the rails already in the pod
# (rules, tables, links to look through) shows as the first's sum over the second's.
RAILS = 8


class RailPod:
    """A fresh pod netns with `n` NICs (veth pairs whose peers stay in the host, up; the NICs up
    too, as macvlan masters are) and a sentinel, as Pod has."""

    seq = 0

    def __init__(self, n):
        RailPod.seq += 1
        base = "%sr%x" % (TAG, RailPod.seq)
        self.ns, self.sentinel = base, base + "s"
        self.nics = ["%sn%d" % (base, k) for k in range(n)]
        lines = ["netns add " + self.ns]
        for nic in self.nics:
            lines += ["link add %s type veth peer name %sp" % (nic, nic),
                      "link set %sp up" % nic, "link set %s up" % nic]
        lines.append("link add %s type veth peer name %sq netns %s"
                     % (self.sentinel, self.sentinel, self.ns))
        ip_batch(lines)
        self.path = "/run/netns/" + self.ns

    def teardown(self):
        lines = ["link del %sp" % nic for nic in self.nics] + ["netns del " + self.ns]
        subprocess.run(["ip", "-force", "-batch", "-"], capture_output=True, text=True,
                       input="\n".join(lines) + "\n")

    def settled(self):
        return not link_exists(self.sentinel)


def rail_conf(mode, nic, r):
    gw = "10.%d.0.1" % (100 + r)
    conf = {"cniVersion": "1.0.0", "name": "rail%d" % r, "type": "rdma-ns", "mode": mode,
            "dataDir": DATA_DIR, "rail": True,
            "ipam": {"type": "static",
                     "addresses": [{"address": "10.%d.0.2/24" % (100 + r), "gateway": gw}],
                     "routes": [{"dst": "10.96.0.0/12", "gw": gw}]}}
    conf["device" if mode == "move" else "master"] = nic
    return conf


def rail_phase(command, steps):
    """Runs the (pod, rail, ifname, conf) `steps` one after another with `command`; the summed
    time and whether all succeeded. DEL gets the ADD's conf (its record holds the rest)."""
    total, ok = 0, True
    for pod, r, ifname, conf in steps:
        env = cni_env(command, pod, "c" + pod.ns)
        env["CNI_IFNAME"] = ifname
        t, p = timed_exec(RDMA_NS, env, json.dumps(conf).encode())
        total += t
        if p.returncode != 0:
            ok = False
            failures.append("rails %s %s %s: %s %s" % (command, pod.ns, ifname, p.stdout, p.stderr))
    return total, ok


def rails_cycle(mode, one_pod):
    pods = [RailPod(RAILS)] if one_pod else [RailPod(1) for _ in range(RAILS)]
    try:
        steps = []
        for r in range(RAILS):
            pod, k = (pods[0], r) if one_pod else (pods[r], 0)
            steps.append((pod, r, "net%d" % (k + 1), rail_conf(mode, pod.nics[k], r)))
        add_ns, ok_add = rail_phase("ADD", steps)
        time.sleep(PHASE_GAP)
        del_ns, ok_del = rail_phase("DEL", list(reversed(steps)))
        ok = ok_add and ok_del
        for pod in pods:
            left = subprocess.run(["ip", "-n", pod.ns, "rule", "show"], capture_output=True,
                                  text=True).stdout
            if "from 10." in left:
                ok = False
                failures.append("rails DEL left rules in %s: %s" % (pod.ns, left))
    finally:
        for pod in pods:
            pod.teardown()
    settle(pods)
    return add_ns, del_ns, ok


def rails(samples, cycles):
    variants = [(mode, shape) for mode in ("macvlan", "move") for shape in ("one-pod", "8-pods")]
    for i in range(cycles):
        for mode, shape in rotate(variants, i):
            a, d, ok = rails_cycle(mode, shape == "one-pod")
            samples.add("rails", shape, RAILS, mode, i, a, d, ok)


def report_rails(s, out):
    out("")
    out("rails: %d rail attachments (rail: true), summed ADD and DEL (ms, median of cycles)" % RAILS)
    out("%-8s %22s %22s   %s" % ("mode", "8 rails, one pod", "8 x one rail", "ratio ADD/DEL"))
    for mode in ("macvlan", "move"):
        med = {(v, f): statistics.median(s.get("rails", v, f, selector=mode))
               for v in ("one-pod", "8-pods") for f in ("add", "del")}
        ra = med["one-pod", "add"] / med["8-pods", "add"]
        rd = med["one-pod", "del"] / med["8-pods", "del"]
        out("%-8s %10.1f / %9.1f %10.1f / %9.1f   %.3f / %.3f [target <= 1.1: %s]" % (
            mode, ms(med["one-pod", "add"]), ms(med["one-pod", "del"]),
            ms(med["8-pods", "add"]), ms(med["8-pods", "del"]), ra, rd,
            verdict(ra <= 1.1 and rd <= 1.1)))


class ExtraLinks:
    """`count` macvlans on a spare veth in the host netns, made with one `ip -batch`."""

    def __init__(self, count):
        self.lower = TAG + "x"
        lines = ["link add %s type veth peer name %sy" % (self.lower, self.lower)]
        lines += ["link add %s%x link %s type macvlan mode bridge" % (TAG + "m", j, self.lower)
                  for j in range(count)]
        ip_batch(lines)

    def remove(self):
        ip_batch(["link del " + self.lower], check=False)


def scale(samples, cycles, levels):
    selectors = ["device", "hwaddr", "pci"]
    for links in levels:
        extra = ExtraLinks(links)
        try:
            for i in range(cycles):
                for sel in rotate(selectors, i):
                    pod = Pod()
                    try:
                        a, d, ok = variant_rdma(pod, i, sel)
                    finally:
                        pod.teardown()
                    settle([pod])
                    samples.add("scale", "rdma-ns", links, sel, i, a, d, ok)
        finally:
            extra.remove()


def concurrency(rounds, n, out):
    """n ADDs on distinct devices started at once, then n DELs; vs the same n one after another."""
    conf_of = {}
    results = []
    for r in range(rounds):
        for mode in rotate(["parallel", "serial"], r):
            pods = [Pod() for _ in range(n)]
            try:
                phases = {}
                for command in ["ADD", "DEL"]:
                    if command == "DEL":
                        time.sleep(PHASE_GAP)
                    envs, stdins = [], []
                    for j, pod in enumerate(pods):
                        cid = "conc%d" % j
                        conf = conf_of.get(j) or rdma_conf("device", pod)
                        conf["device"] = pod.nic
                        conf_of[j] = conf
                        envs.append(cni_env(command, pod, cid))
                        stdins.append(json.dumps(conf).encode())
                    t0 = time.perf_counter_ns()
                    if mode == "parallel":
                        procs = [subprocess.Popen([RDMA_NS], env=e, stdin=subprocess.PIPE,
                                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                                 for e in envs]
                        outs = [p.communicate(s) for p, s in zip(procs, stdins)]
                        codes = [p.returncode for p in procs]
                    else:
                        outs, codes = [], []
                        for e, s in zip(envs, stdins):
                            p = subprocess.run([RDMA_NS], env=e, input=s, capture_output=True)
                            outs.append((p.stdout, p.stderr))
                            codes.append(p.returncode)
                    t1 = time.perf_counter_ns()
                    bad = [(j, o) for j, (c, o) in enumerate(zip(codes, outs)) if c != 0]
                    for j, o in bad:
                        failures.append("concurrency %s %s pod %d: %s" % (mode, command, j, o))
                    phases[command] = (t1 - t0, len(bad))
                results.append((r, mode, phases["ADD"][0], phases["DEL"][0],
                                phases["ADD"][1] + phases["DEL"][1]))
            finally:
                for pod in pods:
                    pod.teardown()
            settle(pods)
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "mode", "add_wall_ns", "del_wall_ns", "failures"])
        w.writerows(results)
    return results


def floor_concurrency(rounds, n, out):
    """The floor's kernel operations for n pods at once vs one after another: how far the kernel
    itself lets moves overlap (they are serialized under the RTNL lock)."""
    results = []
    for r in range(rounds):
        for mode in rotate(["parallel", "serial"], r):
            pods = [Pod() for _ in range(n)]
            try:
                steps = {
                    "ADD": [[(["ip", "-batch", "-"], "link set dev %s netns %s name net1 mtu %d\n"
                              % (p.nic, p.ns, POD_MTU)) for p in pods],
                            [(["ip", "-n", p.ns, "-batch", "-"],
                              "addr add %s dev net1\nlink set dev net1 up\n" % ADDRESS)
                             for p in pods]],
                    "DEL": [[(["ip", "-n", p.ns, "-batch", "-"],
                              "link set dev net1 netns %s name %s mtu %d\n"
                              % (HOST_NS_NAME, p.nic, HOST_MTU)) for p in pods]],
                }
                walls, bad = {}, 0
                for command, waves in steps.items():
                    if command == "DEL":
                        time.sleep(PHASE_GAP)
                    t0 = time.perf_counter_ns()
                    for wave in waves:
                        if mode == "parallel":
                            procs = [subprocess.Popen(argv, stdin=subprocess.PIPE, text=True,
                                                      stdout=subprocess.DEVNULL,
                                                      stderr=subprocess.DEVNULL)
                                     for argv, _ in wave]
                            for p, (_, text) in zip(procs, wave):
                                p.communicate(text)
                            bad += sum(p.returncode != 0 for p in procs)
                        else:
                            for argv, text in wave:
                                bad += subprocess.run(argv, input=text, text=True,
                                                      capture_output=True).returncode != 0
                    walls[command] = time.perf_counter_ns() - t0
                if bad:
                    failures.append("floor concurrency %s: %d ip runs failed" % (mode, bad))
                results.append((r, mode, walls["ADD"], walls["DEL"], bad))
            finally:
                for pod in pods:
                    pod.teardown()
            settle(pods)
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "mode", "add_wall_ns", "del_wall_ns", "failures"])
        w.writerows(results)
    return results


def spawn_wait(argv, env, stdin_path):
    fa = [(os.POSIX_SPAWN_OPEN, 0, stdin_path, os.O_RDONLY, 0),
          (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
          (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)]
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=fa)
    _, status = os.waitpid(pid, 0)
    t1 = time.perf_counter_ns()
    if os.waitstatus_to_exitcode(status) != 0:
        failures.append("%s exited %d" % (argv[0], os.waitstatus_to_exitcode(status)))
    return t1 - t0


def process_start(runs, out, tmpdir):
    stdin_path = os.path.join(tmpdir, "version-stdin.json")
    with open(stdin_path, "w") as f:
        f.write('{"cniVersion":"1.0.0"}')
    env = cni_env("VERSION", None, "")
    cases = {"rdma-ns VERSION": [RDMA_NS], "/bin/true": ["/bin/true"],
             "ip -batch (empty)": ["/usr/sbin/ip", "-batch", "/dev/null"]}
    times = {k: [] for k in cases}
    for i in range(runs):
        for k in rotate(list(cases), i):
            times[k].append(spawn_wait(cases[k], env, stdin_path))
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["case", "iteration", "ns"])
        for k, v in times.items():
            w.writerows((k, i, t) for i, t in enumerate(v))
    return times


def peak_rss(with_ipam):
    """/usr/bin/time -v of one ADD (then an untimed DEL). Max RSS of a process that waited for a
    child includes the child's, so the IPAM-less ADD is the plugin's own."""
    pod = Pod()
    try:
        conf = rdma_conf("device", pod)
        if not with_ipam:
            del conf["ipam"]
        env = cni_env("ADD", pod, "rss")
        p = subprocess.run(["/usr/bin/time", "-v", RDMA_NS], input=json.dumps(conf).encode(),
                           env=env, capture_output=True)
        if p.returncode != 0:
            failures.append("RSS ADD: %s" % p.stdout)
        kb = None
        for line in p.stderr.decode().splitlines():
            if "Maximum resident set size" in line:
                kb = int(line.split(":")[1])
        env["CNI_COMMAND"] = "DEL"
        d = subprocess.run([RDMA_NS], input=json.dumps(conf).encode(), env=env, capture_output=True)
        if d.returncode != 0:
            failures.append("RSS DEL: %s %s" % (d.stdout, d.stderr))
        elif p.returncode == 0 and not nic_back(pod):
            failures.append("RSS DEL did not bring %s back" % pod.nic)
        return kb
    finally:
        pod.teardown()
        settle([pod])


def true_rss():
    p = subprocess.run(["/usr/bin/time", "-v", "/bin/true"], capture_output=True)
    for line in p.stderr.decode().splitlines():
        if "Maximum resident set size" in line:
            return int(line.split(":")[1])


def main():
    global RDMA_NS, PHASE_GAP
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--results", default=os.path.join(REPO, "results"))
    # softroce boots the VM tier's Linux 7 kernel (tests/bench/softroce_bench.py), kube,
    # kube-dra, kube-dra-api and kube-start the Kubernetes lab (tests/bench/kube_bench.py,
    # kube_dra_bench.py, kube_dra_api_bench.py, kube_start_bench.py): asked by name.
    ap.add_argument("--only",
                    default="compare,compare-b2b,gap,macvlan,rails,scale,concurrency,start,rss,env,node")
    ap.add_argument("--phase-gap-ms", type=float, default=PHASE_GAP * 1000,
                    help="idle time between a cycle's ADD and DEL (untimed)")
    ap.add_argument("--plugin", default=RDMA_NS, help="the rdma-ns binary to measure")
    args = ap.parse_args()
    only = set(args.only.split(","))
    RDMA_NS = os.path.abspath(args.plugin)
    PHASE_GAP = args.phase_gap_ms / 1000

    if args.smoke:
        cycles, levels, start_runs, conc_rounds = min(args.cycles, 5), [10, 100], 100, 1
        scale_cycles, env_runs = 3, 5
        doctor_runs, scrapes = 3, 100
    else:
        cycles, levels, start_runs, conc_rounds = args.cycles, [10, 500, 2000], 1000, 3
        scale_cycles, env_runs = args.cycles, 500
        doctor_runs, scrapes = 20, 1000
    stamp = time.strftime("%Y%m%d-%H%M%S")
    outdir = os.path.join(args.results, "bench-" + stamp + ("-smoke" if args.smoke else ""))
    os.makedirs(outdir, exist_ok=True)
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    os.makedirs(DATA_DIR, mode=0o700)

    if "scale" in only:
        own_pci_sysfs()
    subprocess.run(["ip", "netns", "attach", HOST_NS_NAME, str(os.getpid())], check=True,
                   capture_output=True)
    samples = Samples(os.path.join(outdir, "samples.csv"))
    lines = []

    def out(line):
        # Printed as it comes: a section cut short by the caller's timeout (a lab bench runs
        # for many minutes) still shows the parts it measured.
        lines.append(line)
        print(line, flush=True)

    t_start = time.monotonic()
    try:
        out("rdma-ns benchmark: kernel %s, %d cpus, %d cycles%s; raw samples in %s" % (
            os.uname().release, os.cpu_count(), cycles, " (smoke)" if args.smoke else "",
            os.path.relpath(outdir, REPO)))
        out("plugin %s; load average at start %s" % (
            os.path.relpath(RDMA_NS, REPO), loadavg()))
        if "compare" in only:
            compare(samples, cycles)
            report_compare(samples, out)
        if "compare-b2b" in only:
            gap, PHASE_GAP = PHASE_GAP, 0
            compare(samples, cycles, "compare-b2b")
            PHASE_GAP = gap
            report_compare(samples, out, "compare-b2b")
        if "gap" in only:
            gap_effect(samples, min(cycles, 40))
            report_gap(samples, out)
        if "macvlan" in only:
            macvlan(samples, cycles)
            report_macvlan(samples, out)
        if "rails" in only:
            rails(samples, min(cycles, 40))
            report_rails(samples, out)
        write_summary(samples, os.path.join(outdir, "summary.csv"))
        if "scale" in only:
            scale(samples, scale_cycles, levels)
            report_scale(samples, levels, out)
        samples.f.flush()
        if "concurrency" in only:
            res = concurrency(conc_rounds, 32, os.path.join(outdir, "concurrency.csv"))
            floor = floor_concurrency(conc_rounds, 32,
                                      os.path.join(outdir, "concurrency-floor.csv"))
            report_concurrency(res, floor, out)
        if "start" in only:
            times = process_start(start_runs, os.path.join(outdir, "start.csv"), outdir)
            report_start(times, out)
        if "env" in only:
            env_bench.run(RDMA_NS, TAG, env_runs, out, failures, os.path.join(outdir, "env.csv"))
        if "rss" in only:
            own, with_ipam, true_kb = peak_rss(False), peak_rss(True), true_rss()
            size = os.path.getsize(RDMA_NS)
            stripped = b".symtab" not in open(RDMA_NS, "rb").read()
            out("peak RSS of one ADD: rdma-ns alone %s kB [target <= 2560: %s]; with static "
                "IPAM (its child's peak counts) %s kB; /bin/true %s kB" % (
                    own, verdict(own is not None and own <= 2560), with_ipam, true_kb))
            out("release binary: %d bytes (%.2f MiB)%s" % (
                size, size / 2**20, ", stripped" if stripped else ", NOT stripped"))
        if "node" in only:
            node_bench.run(RDMA_NS, REPO, outdir, doctor_runs, scrapes, out, failures)
        if "softroce" in only:
            softroce_bench.run(REPO, out, failures)
        if "kube" in only:
            kube_bench.run(REPO, out, failures)
        if "kube-dra" in only:
            kube_dra_bench.run(REPO, out, failures)
        if "kube-dra-api" in only:
            kube_dra_api_bench.run(REPO, out, failures)
        if "kube-start" in only:
            kube_start_bench.run(REPO, out, failures)
    finally:
        samples.f.close()
        subprocess.run(["ip", "netns", "delete", HOST_NS_NAME], capture_output=True)
    out("failures: %d; wall %.0f s; load average at end %s" % (
        len(failures), time.monotonic() - t_start, loadavg()))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(outdir, "summary.txt"), "w") as f:
        f.write(text)
        for fail in failures:
            f.write("FAIL " + fail + "\n")
    for fail in failures[:20]:
        print("FAIL", fail, file=sys.stderr)
    return 1 if failures else 0


def report_compare(s, out, section="compare"):
    floor = {f: statistics.median(s.get(section, "floor", f)) for f in ("add", "del", "cycle")}
    out("")
    if section == "compare":
        out("move mode, DEL %.0f ms after ADD (--phase-gap-ms)" % (PHASE_GAP * 1000))
    else:
        out("move mode, back to back: DEL right after ADD (each DEL waits out its ADD's RCU tail)")
    out("%-12s %15s %15s %15s   %-20s" % ("variant", "ADD med/p95", "DEL med/p95",
                                          "cycle med/p95", "x floor (ADD/DEL/cyc)"))
    for v in VARIANTS:
        cols, ratios = [], []
        for f in ("add", "del", "cycle"):
            xs = s.get(section, v, f)
            cols.append("%6.2f/%6.2f" % (ms(statistics.median(xs)), ms(pct(xs, 0.95))))
            ratios.append("%.2f" % (statistics.median(xs) / floor[f]))
        out("%-12s %15s %15s %15s   %s" % (v, cols[0], cols[1], cols[2], "/".join(ratios)))
    rd = statistics.median(s.get(section, "rdma-ns", "cycle"))
    hd = statistics.median(s.get(section, "host-device", "cycle"))
    ipam = statistics.median(s.get(section, "ipam-static", "cycle"))
    over = rd - floor["cycle"] - ipam
    out("(ms; floor = iproute2 doing the same kernel operations: ADD is two `ip -batch` runs, "
        "host then pod, DEL one)")
    out("rdma-ns cycle / host-device cycle = %.3f [target <= 0.95: %s]" % (
        rd / hd, verdict(rd / hd <= 0.95)))
    ip_start = statistics.median(s.get(section, "ip-start", "add"))
    strict = over + ip_start
    out("plugin overhead per cycle = rdma-ns - floor - static IPAM = %.2f - %.2f - %.2f = %.2f ms; "
        "against a one-process-per-phase floor (minus one ip start, %.2f ms): %.2f ms "
        "[target <= 3: %s]" % (ms(rd), ms(floor["cycle"]), ms(ipam), ms(over), ms(ip_start),
                                ms(strict), verdict(ms(strict) <= 3)))


def report_macvlan(s, out):
    floor = {f: statistics.median(s.get("macvlan", "floor-mv", f)) for f in ("add", "del", "cycle")}
    out("")
    out("macvlan mode: a child net1 of the veth nic (up) in a fresh pod netns, static IPAM %s"
        % ADDRESS)
    out("%-12s %15s %15s %15s   %-20s" % ("variant", "ADD med/p95", "DEL med/p95",
                                          "cycle med/p95", "x floor-mv (ADD/DEL/cyc)"))
    for v in MACVLAN_VARIANTS:
        cols, ratios = [], []
        for f in ("add", "del", "cycle"):
            xs = s.get("macvlan", v, f)
            cols.append("%6.2f/%6.2f" % (ms(statistics.median(xs)), ms(pct(xs, 0.95))))
            ratios.append("%.2f" % (statistics.median(xs) / floor[f]))
        out("%-12s %15s %15s %15s   %s" % (v, cols[0], cols[1], cols[2], "/".join(ratios)))
    out("(ms; rdma-ns-mv = rdma-ns mode macvlan, macvlan = Debian's /usr/lib/cni/macvlan; "
        "floor-mv = iproute2: ADD `ip link add ... netns pod type macvlan` in the host, then "
        "address and up in the pod; DEL one `ip -n pod link del net1`)")
    med = {(v, f): statistics.median(s.get("macvlan", v, f))
           for v in ("rdma-ns-mv", "macvlan", "ipam-static") for f in ("add", "del", "cycle")}
    ra = med["rdma-ns-mv", "add"] / med["macvlan", "add"]
    rd = med["rdma-ns-mv", "del"] / med["macvlan", "del"]
    rc = med["rdma-ns-mv", "cycle"] / med["macvlan", "cycle"]
    out("rdma-ns macvlan / Debian macvlan: ADD %.3f [target <= 0.7: %s], DEL %.3f "
        "[target <= 0.9: %s], cycle %.3f" % (ra, verdict(ra <= 0.7), rd, verdict(rd <= 0.9), rc))
    ip_start = statistics.median(s.get("macvlan", "ip-start", "add"))
    out("kernel floor of DEL (`ip -n pod link del net1` minus one ip start, %.2f ms): %.2f ms; "
        "rdma-ns DEL - that floor - static IPAM DEL = %.2f ms" % (
            ms(ip_start), ms(floor["del"] - ip_start),
            ms(med["rdma-ns-mv", "del"] - (floor["del"] - ip_start) - med["ipam-static", "del"])))
    over = med["rdma-ns-mv", "cycle"] - floor["cycle"] - med["ipam-static", "cycle"]
    out("plugin overhead per cycle = rdma-ns-mv - floor-mv - static IPAM = %.2f ms; against a "
        "one-process-per-phase floor: %.2f ms" % (ms(over), ms(over + ip_start)))


def write_summary(s, path):
    """Medians and p95 of every compared variant (ms), and rdma-ns's ratios to the Debian
    plugin of its class."""
    ref = {("compare", "rdma-ns"): "host-device", ("compare-b2b", "rdma-ns"): "host-device",
           ("macvlan", "rdma-ns-mv"): "macvlan"}
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["section", "variant", "n", "add_med_ms", "add_p95_ms", "del_med_ms",
                    "del_p95_ms", "cycle_med_ms", "cycle_p95_ms", "vs", "add_ratio",
                    "del_ratio", "cycle_ratio"])
        seen = []
        for r in s.rows:
            if r[0] in ("compare", "compare-b2b", "macvlan") and (r[0], r[1]) not in seen:
                seen.append((r[0], r[1]))
        for sec, v in seen:
            row = [sec, v, len(s.get(sec, v, "add"))]
            for fld in ("add", "del", "cycle"):
                xs = s.get(sec, v, fld)
                row += ["%.3f" % ms(statistics.median(xs)), "%.3f" % ms(pct(xs, 0.95))]
            other = ref.get((sec, v))
            if other and s.get(sec, other, "add"):
                row.append(other)
                row += ["%.3f" % (statistics.median(s.get(sec, v, fld)) /
                                  statistics.median(s.get(sec, other, fld)))
                        for fld in ("add", "del", "cycle")]
            else:
                row += ["", "", "", ""]
            w.writerow(row)


def report_scale(s, levels, out):
    base = levels[0]
    out("")
    out("scale: rdma-ns cycle median (ms) by extra host links, ratio to %d links" % base)
    out("%-9s" % "selector" + "".join("%16s" % ("%d links" % n) for n in levels) + "   target")
    for sel, limit in (("device", 1.1), ("hwaddr", 1.3), ("pci", 1.1)):
        b = statistics.median(s.get("scale", "rdma-ns", "cycle", base, sel))
        cells, worst = [], 0.0
        for n in levels:
            m = statistics.median(s.get("scale", "rdma-ns", "cycle", n, sel))
            worst = max(worst, m / b)
            cells.append("%16s" % ("%.2f (%.2fx)" % (ms(m), m / b)))
        out("%-9s" % sel + "".join(cells) + "   <= %.1fx: %s" % (limit, verdict(worst <= limit)))
    for sel in ("device", "hwaddr", "pci"):
        parts = []
        for n in levels:
            a = statistics.median(s.get("scale", "rdma-ns", "add", n, sel))
            d = statistics.median(s.get("scale", "rdma-ns", "del", n, sel))
            parts.append("%d: %.2f/%.2f" % (n, ms(a), ms(d)))
        out("  %-7s ADD/DEL med ms  %s" % (sel, "  ".join(parts)))


def report_concurrency(res, floor, out):
    def summary(rows):
        def med(mode, k):
            return statistics.median(r[k] for r in rows if r[1] == mode)
        pa, pd = med("parallel", 2), med("parallel", 3)
        sa, sd = med("serial", 2), med("serial", 3)
        return pa, pd, sa, sd, (pa + pd) / (sa + sd), sum(r[4] for r in rows)
    out("")
    pa, pd, sa, sd, ratio, fails = summary(res)
    out("concurrency, 32 devices (%d rounds, median wall): rdma-ns parallel ADD %.0f + DEL %.0f "
        "ms, serial ADD %.0f + DEL %.0f ms; parallel/serial %.2f (ADD %.2f, DEL %.2f); "
        "failures %d [target 0 and <= 0.6: %s]" % (
            len(res) // 2, ms(pa), ms(pd), ms(sa), ms(sd), ratio, pa / sa, pd / sd, fails,
            verdict(fails == 0 and ratio <= 0.6)))
    pa, pd, sa, sd, ratio, fails = summary(floor)
    out("  floor (same kernel operations by ip): parallel ADD %.0f + DEL %.0f ms, serial ADD %.0f "
        "+ DEL %.0f ms; parallel/serial %.2f (ADD %.2f, DEL %.2f)" % (
            ms(pa), ms(pd), ms(sa), ms(sd), ratio, pa / sa, pd / sd))


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def report_start(times, out):
    med = {k: statistics.median(v) for k, v in times.items()}
    r = med["rdma-ns VERSION"] / med["/bin/true"]
    out("process start (%d runs, median): rdma-ns VERSION %.3f ms, /bin/true %.3f ms, ratio %.2f "
        "[target <= 1.3: %s]; ip -batch (empty) %.3f ms" % (
            len(times["/bin/true"]), ms(med["rdma-ns VERSION"]), ms(med["/bin/true"]), r,
            verdict(r <= 1.3), ms(med["ip -batch (empty)"])))


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("the benchmark must run as root (network namespaces, links)")
    sys.exit(main())

"""Section `softroce` of the benchmark: RDMA bandwidth and latency between two pods whose
Soft-RoCE devices rdma-ns made (move mode, `softRoce`, shared netns mode) against the same
between two rxe devices in the host netns over the same kind of link (the two ends of a veth),
at MTU 1500 and 9000.

This machine's kernel has no RDMA, and pods' rxe devices carry RoCE only from Linux 7.1 on, so
the section boots the VM tier's Linux 7 kernel under QEMU TCG (`tests/vm/run.sh --kernel 7
--manifest tests/bench/vm-cases softroce-bench`) and runs tests/bench/softroce_vm.sh there,
which alternates host and pod runs of perftest's `ib_write_bw` and `ib_send_lat` and prints one
`SRBENCH` line a run. The absolute figures are an emulated machine's and mean little; the ratio
of the medians, pod to host, measured alternately in one VM, is what the section reports and
holds to its target (bandwidth at least 0.9 of the host's).
"""

import os
import re
import statistics
import subprocess

from node_bench import verdict

CASE = "softroce-bench"
BW_TARGET = 0.9
LINE = re.compile(r"^SRBENCH mtu=(\d+) kind=(host|pod) run=(\d+) bw_mbps=([\d.]+) lat_us=([\d.]+)$")


def boot(repo, failures):
    """Runs the VM case; the path of its log, or None (with a failure) when it did not pass."""
    vm = subprocess.run(
        ["bash", os.path.join(repo, "tests", "vm", "run.sh"), "--kernel", "7", "--manifest",
         os.path.join(repo, "tests", "bench", "vm-cases"), CASE],
        capture_output=True, text=True)
    found = re.search(r"^results and logs: (.*)$", vm.stdout, re.M)
    if vm.returncode != 0 or not found:
        failures.append("softroce: the VM case failed (exit %d): %s" % (
            vm.returncode, vm.stdout[-2000:] + vm.stderr[-1000:]))
        return None
    return os.path.join(found.group(1), "cases", CASE + ".log")


def parse(log):
    """{(mtu, kind): {"bw": [MB/s...], "lat": [us...]}} from the case log's SRBENCH lines."""
    runs = {}
    with open(log) as f:
        for line in f:
            m = LINE.match(line.strip())
            if m:
                r = runs.setdefault((int(m.group(1)), m.group(2)), {"bw": [], "lat": []})
                r["bw"].append(float(m.group(4)))
                r["lat"].append(float(m.group(5)))
    return runs


def run(repo, out, failures):
    log = boot(repo, failures)
    if log is None:
        return
    runs = parse(log)
    out("")
    out("softroce: pod to pod (rxe devices rdma-ns made) against host to host (rxe on host "
        "veth ends), Linux 7 under TCG, medians of %s; log %s" % (
            "/".join(str(len(v["bw"])) for v in runs.values()), os.path.relpath(log, repo)))
    out("%-6s %22s %22s   %s" % ("MTU", "ib_write_bw MB/s", "ib_send_lat us", "pod/host"))
    mtus = sorted({mtu for mtu, _ in runs})
    if not mtus:
        failures.append("softroce: no SRBENCH lines in %s" % log)
    for mtu in mtus:
        host, pod = runs.get((mtu, "host")), runs.get((mtu, "pod"))
        if not host or not pod:
            failures.append("softroce: MTU %d lacks host or pod runs" % mtu)
            continue
        med = {(k, f): statistics.median(r[f]) for k, r in (("host", host), ("pod", pod))
               for f in ("bw", "lat")}
        bw_ratio = med["pod", "bw"] / med["host", "bw"]
        lat_ratio = med["pod", "lat"] / med["host", "lat"]
        out("%-6d %9.1f / %9.1f %9.1f / %9.1f   bandwidth %.2f [target >= %.1f: %s], latency %.2f"
            % (mtu, med["pod", "bw"], med["host", "bw"], med["pod", "lat"], med["host", "lat"],
               bw_ratio, BW_TARGET, verdict(bw_ratio >= BW_TARGET), lat_ratio))

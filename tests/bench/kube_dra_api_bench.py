"""Section `kube-dra-api` of the benchmark (asked by name: `tests/bench/run.sh --only kube-dra-api`):
rdma-ns-dra's requests to the API server, as the API server counts them (issue 39, section 11),
on the Kubernetes lab (up already, or brought up here and taken down again, as `kube` does).

The API server labels its request counters by verb and resource, not by client; its
flow-control counters are by FlowSchema. So the section adds a FlowSchema that matches the
driver's service account alone (`rdma-ns-dra-bench`, priority level `workload-low`, the one the
driver's requests would get anyway) and reads `apiserver_flowcontrol_dispatched_requests_total`
of that schema from the server's /metrics: every request of the two nodes' drivers, a watch
counted once when it starts.

- At rest: the driver up on both nodes with nothing to do, over RDMA_NS_BENCH_API_REST seconds
  (default 300): requests a minute (the resync of every `resyncSeconds`, the claim watches'
  restarts).
- Per pod started: RDMA_NS_BENCH_API_PODS (default 8) DRA pods on node1 in waves of 4, from their
  creation to Ready, and their deletion until their claims are gone: requests per pod for each
  (prepare's claim read, the claim's watch, status writes as ADD and DEL land; the slices when
  a device's use changes nothing, since a shared device is published once).
- Of each, the LISTs of ResourceSlices (`apiserver_request_total`, by verb and resource, of every
  client: after start-up only the drivers list slices, the other clients keep informers), per
  minute at rest and per pod.
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "kube"))

from lab import wait_until  # noqa: E402
import cases_dra  # noqa: E402
from kube_bench import on_lab  # noqa: E402

SCHEMA = "rdma-ns-dra-bench"
REST_SECONDS = int(os.environ.get("RDMA_NS_BENCH_API_REST", "300"))
PODS = int(os.environ.get("RDMA_NS_BENCH_API_PODS", "8"))
WAVE = 4

FLOW_SCHEMA = {
    "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
    "metadata": {"name": SCHEMA},
    "spec": {
        "priorityLevelConfiguration": {"name": "workload-low"},
        "matchingPrecedence": 100,
        "distinguisherMethod": {"type": "ByUser"},
        "rules": [{
            "subjects": [{"kind": "ServiceAccount",
                          "serviceAccount": {"name": "rdma-ns-dra", "namespace": "kube-system"}}],
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                               "clusterScope": True, "namespaces": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        }],
    },
}


def request_counts(lab):
    """The driver's requests so far: the schema's dispatched counter, summed over its labels;
    and the LISTs of ResourceSlices so far by any client, which after start-up are the drivers'
    (the scheduler and the controller manager keep informers, which list when they start)."""
    total = lists = 0.0
    for line in lab.kubectl("get", "--raw", "/metrics").splitlines():
        if line.startswith("apiserver_flowcontrol_dispatched_requests_total{") and f'flow_schema="{SCHEMA}"' in line:
            total += float(line.rsplit(" ", 1)[1])
        elif (line.startswith("apiserver_request_total{") and 'resource="resourceslices"' in line
              and 'verb="LIST"' in line):
            lists += float(line.rsplit(" ", 1)[1])
    return total, lists


def started_and_stopped(lab):
    """Requests while PODS DRA pods start (creation to Ready), and while they go (deletion until
    their claims are gone), in waves."""
    start = stop = (0.0, 0.0)
    for first in range(0, PODS, WAVE):
        names = [f"bench-api-{i}" for i in range(first, min(first + WAVE, PODS))]
        before = request_counts(lab)
        for name in names:
            cases_dra.dra_pod(lab, name, "node1")
        lab.wait_ready(*names, seconds=1800)
        ready = request_counts(lab)
        claims = [cases_dra.claim_of(lab, n)["metadata"]["name"] for n in names]
        lab.delete_pods(*names, seconds=1800)
        wait_until("the bench pods' claims deleted", 1800,
                   lambda: not lab.kubectl("get", "resourceclaim", "--ignore-not-found", "-o", "name", *claims).strip(),
                   step=5.0)
        # The drivers write the status of a claim that goes as they see it go: let them.
        time.sleep(10)
        gone = request_counts(lab)
        start = added(start, ready, before)
        stop = added(stop, gone, ready)
    return start, stop


def added(sums, now, then):
    """`sums` plus the counters' growth from `then` to `now`."""
    return tuple(s + n - t for s, n, t in zip(sums, now, then))


def run(repo, out, failures):
    def body(lab):
        cases_dra.ensure_driver(lab)
        lab.apply(json.dumps(cases_dra.TEMPLATE))
        lab.apply(open(cases_dra.NAD_FILE).read())
        lab.apply(json.dumps(FLOW_SCHEMA))
        # The drivers restart to be counted from their first request on: list, watches, slices.
        lab.kubectl("-n", "kube-system", "delete", "pod", "-l", "app=rdma-ns-dra", "--wait=true", timeout=330)
        t0, (c0, _) = time.time(), request_counts(lab)
        lab.kubectl("-n", "kube-system", "rollout", "status", "ds/rdma-ns-dra", "--timeout=900s", timeout=930)
        for node in ("node1", "node2"):
            wait_until(f"{node}'s slice", 300, lambda: cases_dra.published(lab, node))
        t1, (c1, l1) = time.time(), request_counts(lab)
        time.sleep(REST_SECONDS)
        t2, (c2, l2) = time.time(), request_counts(lab)
        start, stop = started_and_stopped(lab)
        out("kube-dra-api rdma-ns-dra's requests (both nodes' drivers, the API server's flow-control "
            "counter of a FlowSchema of their service account): start-up %.0f requests in %.0f s; at rest "
            "%.1f a minute over %.0f s (slice lists %.1f); per DRA pod started (node1, %d pods in waves "
            "of %d) %.1f (slice lists %.1f), per pod deleted %.1f (slice lists %.1f)"
            % (c1 - c0, t1 - t0, 60.0 * (c2 - c1) / (t2 - t1), t2 - t1, 60.0 * (l2 - l1) / (t2 - t1),
               PODS, WAVE, start[0] / PODS, start[1] / PODS, stop[0] / PODS, stop[1] / PODS))
        lab.kubectl("delete", "flowschema", SCHEMA, "--ignore-not-found")
    on_lab(repo, "kube-dra-api", failures, body)

"""The DRA path under the kubelet's real lifecycle and under tenants (issue 39, section 11), and
pods that need nothing of rdma-ns inside (issue 40, sections 1 and 2):

- dra-kubelet-restart: the kubelet restarted, then a pod's sandbox killed: the kubelet makes
  the sandbox again and prepares the claim a second time (a claim restored from its checkpoint
  is not "prepared"); the pod comes back with its device, and RDMA crosses the nodes;
- dra-tenant-class-only: a claim of a tenant's namespace whose config sets a class-only key is
  refused, the pod's events name the key, and nothing on the node changes;
- dra-shared-claim: one ResourceClaim used by two pods on one node: both get net1;
- dra-exclusive: node2 in exclusive netns mode, its DRA pod's netdev and Soft-RoCE device moved
  into it, RDMA across the nodes;
- dra-env-plain-image: pods from an image without rdma-ns run ib_write_bw and ucx_perftest
  across the nodes with nothing but the environment their claim's CDI edits gave them;
- dra-extended-resource: pods written for the device plugin (conf/pod.yaml, unchanged) on nodes
  without it, served by rdma-ns-dra through a DeviceClass's extendedResourceName.
"""
import contextlib
import json
import os

import yaml

from cases_dra import (DRIVER, NAD_FILE, POD_FILE, TEMPLATE, attribute, cdi_specs, check_claim_status,
                       dra_pair, dra_pod, driver_log, ensure_driver, published)
from cases_lifecycle import node_ready
from cases_traffic import (PodView, TOOL_TIMEOUT, gid_text, ib_write_bw, ib_write_bw_on_rail0, rping,
                           server_client, ucx_perftest)
from lab import REPO, Fail, case, wait_until

NODE_SH = os.path.join(REPO, "install/lab/node.sh")


def sandbox_of(lab, n, pod):
    """The sandbox (container ID) of pod's one attachment on node n."""
    ids = sorted({a["containerId"] for a in lab.pod_attachments(n, pod)})
    if len(ids) != 1:
        raise Fail(f"{pod}: attachments of sandboxes {ids} on node{n}")
    return ids[0]


def container_id(lab, pod):
    """The container ID of pod's one container, as its status gives it."""
    statuses = lab.kjson("get", "pod", pod)["status"].get("containerStatuses", [])
    return statuses[0].get("containerID") if len(statuses) == 1 else None


def running_again(lab, pod, old_container):
    """True once pod's one container is another than old_container, running, and the pod Ready."""
    status = lab.kjson("get", "pod", pod)["status"]
    statuses = status.get("containerStatuses", [])
    ready = [c for c in status.get("conditions", []) if c.get("type") == "Ready"]
    return (len(statuses) == 1 and statuses[0].get("containerID") not in (None, old_container)
            and "running" in statuses[0].get("state", {}) and bool(ready) and ready[0].get("status") == "True")


def prepares_logged(lab, node, claim):
    """How many times node's driver logged a prepare of claim (default/<name>)."""
    return driver_log(lab, node).count(f"prepared claim default/{claim} ")


@case
def dra_kubelet_restart(lab):
    a, b = dra_pair(lab, "t-drk-a", "t-drk-b")
    claim, _ = check_claim_status(lab, a)
    old = sandbox_of(lab, 1, a.pod)
    old_container = container_id(lab, a.pod)
    before = prepares_logged(lab, "node1", claim)
    if before < 1:
        raise Fail(f"node1's driver logged no prepare of {claim}: {driver_log(lab, 'node1')[-600:]}")
    lab.node(1, "bash", NODE_SH, "restart", "kubelet", timeout=600)
    wait_until("node1 Ready after the kubelet restart", 600, lambda: node_ready(lab, "node1"), step=5)
    # The pod's sandbox dies (its pause process killed): the kubelet makes it again, and with the
    # claim restored from its checkpoint, prepares the claim again first.
    lab.node(1, "ctr", "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", old)
    wait_until(f"{a.pod}'s new sandbox attached", 900,
               lambda: (lambda ids: ids and ids != [old])(
                   sorted({x["containerId"] for x in lab.pod_attachments(1, a.pod)})), step=5)
    # The pod's Ready condition stays True from before until the kubelet notices the dead
    # sandbox: wait for the container made in the new sandbox instead.
    wait_until(f"{a.pod}'s container running again in its new sandbox, the pod Ready", 900,
               lambda: running_again(lab, a.pod, old_container), step=5)
    after = wait_until("the second prepare in node1's driver log", 300,
                       lambda: (lambda n: n if n > before else None)(prepares_logged(lab, "node1", claim)))
    again = PodView(lab, a.pod, 1)
    check_claim_status(lab, again)
    gbps, sent, got, _ = ib_write_bw_on_rail0(lab, again, b)
    print(f"      {claim} prepared {after} times; ib_write_bw {a.pod} -> {b.pod} after its sandbox came back: "
          f"{gbps} Gb/s, rail0 +{sent}/+{got}")
    rping(lab, again, b)
    lab.delete_pods(a.pod, b.pod)
    for n in (1, 2):
        wait_until(f"node{n}'s CDI specs removed", 300, lambda: cdi_specs(lab, n) == 0)


TENANT = "t-tenant"


@case
def dra_tenant_class_only(lab):
    ensure_driver(lab)
    lab.kubectl("create", "namespace", TENANT, check=False)
    template = json.loads(json.dumps(TEMPLATE))
    template["metadata"] = {"name": "t-tenant-perms", "namespace": TENANT}
    template["spec"]["spec"]["devices"]["config"] = [{"requests": ["rdma"], "opaque": {
        "driver": DRIVER, "parameters": {"devicePermissions": {"rdma_cm": "0606"}}}}]
    lab.apply(json.dumps(template))
    mode = lambda: lab.sh(1, "stat -c %a /dev/infiniband/rdma_cm").strip()
    before = mode()
    spec = lab.manifests("pod", POD_FILE, "t-tenant-pod", "node1", lab.image("lab-tools"), "")
    spec = spec.replace("resourceClaimTemplateName: rdma-soft-roce", "resourceClaimTemplateName: t-tenant-perms")
    spec = spec.replace("namespace: default", f"namespace: {TENANT}")
    lab.apply(spec)
    events = wait_until("t-tenant-pod's prepare refusal in its events", 600, lambda: (
        lambda e: e if "devicePermissions" in e and "only a DeviceClass" in e else None)(
        pod_events_in(lab, TENANT, "t-tenant-pod")), step=5)
    print(f"      events: {events[:400]}")
    if mode() != before:
        raise Fail(f"node1's /dev/infiniband/rdma_cm went from {before} to {mode()}")
    if cdi_specs(lab, 1):
        raise Fail("node1 wrote a CDI spec for the refused claim")
    lab.kubectl("delete", "namespace", TENANT, "--wait=true", "--timeout=600s", timeout=630)


def pod_events_in(lab, namespace, pod):
    events = lab.kjson("-n", namespace, "get", "events", f"--field-selector=involvedObject.name={pod}")["items"]
    return " | ".join(f"{e.get('reason')}: {e.get('message')}" for e in events)


SHARED_CLAIM = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
    "metadata": {"name": "t-shared", "namespace": "default"},
    "spec": TEMPLATE["spec"]["spec"],
}


def claim_user(lab, name, node, claim):
    """A pod on node using the ResourceClaim `claim` (not a template) and the DRA NAD."""
    spec = lab.manifests("pod", POD_FILE, name, node, lab.image("lab-tools"), "rdma-dra")
    lab.apply(spec.replace("resourceClaimTemplateName: rdma-soft-roce", f"resourceClaimName: {claim}"))


@case
def dra_shared_claim(lab):
    ensure_driver(lab)
    lab.apply(open(NAD_FILE).read())
    lab.apply(json.dumps(SHARED_CLAIM))
    claim_user(lab, "t-sh-a", "node1", "t-shared")
    lab.wait_ready("t-sh-a", seconds=900)
    # The second pod: the kubelet only adds it to the prepared claim.
    claim_user(lab, "t-sh-b", "node1", "t-shared")
    lab.wait_ready("t-sh-b", seconds=900)
    a, b = PodView(lab, "t-sh-a", 1), PodView(lab, "t-sh-b", 1)
    if a.ibdev == b.ibdev:
        raise Fail(f"both pods name {a.ibdev}: each gets a Soft-RoCE device of its own")
    uid = lab.kjson("get", "resourceclaim", "t-shared")["metadata"]["uid"]
    record = json.loads(lab.sh(1, f"cat /var/lib/cni/rdma-ns/_claims/{uid}.json"))
    pods = sorted(lab.kjson("get", "pod", p)["metadata"]["uid"] for p in ("t-sh-a", "t-sh-b"))
    wait_until("both pods in the claim's record", 120, lambda: sorted(
        json.loads(lab.sh(1, f"cat /var/lib/cni/rdma-ns/_claims/{uid}.json"))["podUids"]) == pods)
    print(f"      t-shared ({uid}) on node1: pods {record['podUids']} -> {pods}; devices {a.ibdev}, {b.ibdev}")
    rping(lab, a, b)
    lab.delete_pods("t-sh-a", "t-sh-b")
    lab.kubectl("delete", "resourceclaim", "t-shared", "--wait=true", timeout=330)
    wait_until("node1's CDI specs removed", 300, lambda: cdi_specs(lab, 1) == 0)


def set_netns_mode(lab, n, mode):
    """The node's RDMA netns mode: the kernel switches only while the node has no netns but its
    own (EBUSY otherwise), so retried while pods' namespaces go."""
    wait_until(f"node{n} in {mode} netns mode", 300, lambda: lab.node(
        n, "rdma", "system", "set", "netns", mode, check=False).returncode == 0, step=3)


def pod_network_owners(lab, node):
    """The workloads (namespace, kind, name) whose pods on node have a netns of their own (not
    hostNetwork), the tests' pods aside: on the lab, NFD's worker and master."""
    owners = set()
    for pod in lab.kjson("get", "pods", "-A", f"--field-selector=spec.nodeName={node}")["items"]:
        meta = pod["metadata"]
        if pod["spec"].get("hostNetwork") or meta["name"].startswith("t-"):
            continue
        for ref in meta.get("ownerReferences", []):
            kind, name = ref["kind"], ref["name"]
            if kind == "ReplicaSet":
                above = lab.kjson("-n", meta["namespace"], "get", "replicaset", name)["metadata"]
                kind, name = next(((r["kind"], r["name"]) for r in above.get("ownerReferences", [])), (kind, name))
            owners.add((meta["namespace"], kind.lower(), name))
    return sorted(owners)


def patch_affinity(lab, namespace, kind, name, affinity):
    op = {"op": "add", "path": "/spec/template/spec/affinity", "value": affinity} if affinity else \
        {"op": "remove", "path": "/spec/template/spec/affinity"}
    lab.kubectl("-n", namespace, "patch", kind, name, "--type=json", "-p", json.dumps([op]))


def netns_of(lab, n):
    return lab.sh(n, "ls /run/netns 2>/dev/null || true").split()


@contextlib.contextmanager
def without_pod_netns(lab, n):
    """Node n without a netns but its own while the block runs: the workloads with pods there in
    a netns of their own get a required node affinity away from it, and their own affinity back
    afterwards. The kernel switches the RDMA netns mode only then (EBUSY otherwise); an operator
    sets exclusive mode at boot instead (docs/modes.md)."""
    node, saved = f"node{n}", []
    try:
        for namespace, kind, name in pod_network_owners(lab, node):
            spec = lab.kjson("-n", namespace, "get", kind, name)["spec"]["template"]["spec"]
            saved.append((namespace, kind, name, spec.get("affinity")))
            patch_affinity(lab, namespace, kind, name, {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [node]}]}]}}})
        wait_until(f"{node} without the pods' network namespaces ({', '.join(w for _, _, w, _ in saved)} moved away)",
                   300, lambda: not netns_of(lab, n), step=3)
        yield
    finally:
        for namespace, kind, name, affinity in saved:
            patch_affinity(lab, namespace, kind, name, affinity)


@case
def dra_exclusive(lab):
    ensure_driver(lab)
    lab.apply(json.dumps(TEMPLATE))
    lab.apply(open(NAD_FILE).read())
    with without_pod_netns(lab, 2):
        set_netns_mode(lab, 2, "exclusive")
        try:
            exclusive_pair(lab)
        finally:
            lab.delete_pods("t-dx-a", "t-dx-b")
            set_netns_mode(lab, 2, "shared")
            wait_until("node2's slice shared again", 300, lambda: (
                lambda d: d and attribute(d["softroce-rail0"], "rdmaNetnsMode") == "shared")(published(lab, "node2")))


def exclusive_pair(lab):
    """A DRA pod on node1 (shared) and one on node2 (exclusive): the netdev and its Soft-RoCE
    device moved into the second, RDMA between them."""
    wait_until("node2's slice in exclusive mode", 300, lambda: (
        lambda d: d and attribute(d["softroce-rail0"], "rdmaNetnsMode") == "exclusive"
        and not d["softroce-rail0"].get("allowMultipleAllocations"))(published(lab, "node2")))
    dra_pod(lab, "t-dx-a", "node1")
    dra_pod(lab, "t-dx-b", "node2")
    lab.wait_ready("t-dx-a", "t-dx-b", seconds=900)
    a, b = PodView(lab, "t-dx-a", 1), PodView(lab, "t-dx-b", 2)
    moved = lab.pod_attachments(2, "t-dx-b")
    if [m["mode"] for m in moved] != ["move"]:
        raise Fail(f"t-dx-b's attachment {moved}: exclusive mode moves the netdev")
    devices = lab.pod_exec("t-dx-b", "ls", "/dev/infiniband").stdout.split()
    print(f"      t-dx-b: {b.ibdev} moved in with rail0, its nodes {devices}")
    # Verbs only: RDMA CM does not work on a moved rxe device (the MAD layer's second GSI QP is
    # refused; docs/soft-roce.md, tests/vm_soft_roce.rs). On the lab, rping to t-dx-b timed out
    # with RDMA_CM_EVENT_UNREACHABLE.
    size, iters = 65536, 200
    sent, got = exclusive_bytes(lab, "t-dx-b")
    gbps = ib_write_bw(lab, a, b, size, iters)
    sent, got = (now - then for now, then in zip(exclusive_bytes(lab, "t-dx-b"), (sent, got)))
    if sent < size * iters or got < size * iters:
        raise Fail(f"ib_write_bw's {size * iters} bytes: node1's rail0 sent {sent}, t-dx-b's net1 got {got}")
    print(f"      ib_write_bw node1 (shared) -> node2 (exclusive): {gbps} Gb/s, rail0 +{sent}, net1 +{got}")


def exclusive_bytes(lab, pod):
    """Bytes node1's rail0 sent and pod's net1 (node2's rail0, moved into it) received: the
    host of node2 no longer sees rail0."""
    sent = int(lab.sh(1, "cat /sys/class/net/rail0/statistics/tx_bytes"))
    got = int(lab.pod_exec(pod, "cat", "/sys/class/net/net1/statistics/rx_bytes").stdout)
    return sent, got


def plain_pod(lab, name, node):
    """A DRA pod on the image without rdma-ns in it (install/lab/images.sh lab-tools-plain)."""
    spec = lab.manifests("pod", POD_FILE, name, node, lab.image("lab-tools-plain"), "rdma-dra")
    lab.apply(spec.replace("resourceClaimTemplateName: rdma-soft-roce",
                           f"resourceClaimTemplateName: {TEMPLATE['metadata']['name']}"))


def container_env(lab, pod):
    """The NCCL_/UCX_ variables a container of pod started with."""
    out = lab.pod_exec(pod, "sh", "-c", "env").stdout
    return {k: v for k, v in (l.split("=", 1) for l in out.splitlines() if "=" in l)
            if k.startswith(("NCCL_", "UCX_"))}


def env_from_node(lab, n, pod):
    """`rdma-ns env` for pod's netns, run on the node (the image has no rdma-ns)."""
    netns = lab.pod_attachments(n, pod)[0]["netns"]
    out = lab.sh(n, f"/opt/cni/bin/rdma-ns env --netns {netns} --format json")
    return json.loads(out)["env"]


def kill_container(lab, n, pod):
    """SIGKILLs pod's container from node n (a signal from inside cannot end its pid 1)."""
    cid = lab.kjson("get", "pod", pod)["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    lab.node(n, "ctr", "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", cid)


def net1_ip(lab, pod):
    """The IPv4 address of pod's net1."""
    out = lab.pod_exec(pod, "ip", "-4", "-o", "addr", "show", "net1").stdout.split()
    return out[out.index("inet") + 1].split("/")[0]


@case
def dra_env_plain_image(lab):
    ensure_driver(lab)
    lab.apply(json.dumps(TEMPLATE))
    lab.apply(open(NAD_FILE).read())
    plain_pod(lab, "t-pl-a", "node1")
    plain_pod(lab, "t-pl-b", "node2")
    lab.wait_ready("t-pl-a", "t-pl-b", seconds=900)
    for pod, n in (("t-pl-a", 1), ("t-pl-b", 2)):
        if lab.pod_exec(pod, "sh", "-c", "command -v rdma-ns", check=False).returncode == 0:
            raise Fail(f"{pod}: the image has rdma-ns in it")
        got, want = container_env(lab, pod), env_from_node(lab, n, pod)
        if got != want:
            raise Fail(f"{pod}: its containers' variables {got}, rdma-ns env in its netns {want}")
    a_ip, b_ip = (net1_ip(lab, p) for p in ("t-pl-a", "t-pl-b"))
    tool = (f"timeout -s KILL {TOOL_TIMEOUT} ib_write_bw -d \"${{UCX_NET_DEVICES%%:*}}\" -x \"$UCX_IB_GID_INDEX\" "
            f"-F --report_gbits -s 65536 -n 200 -p 18515")
    server, client = server_client(lab, "t-pl-b", tool, 18515, "t-pl-a", tool + f" {b_ip}", "ib_write_bw (plain)")
    if gid_text(a_ip) not in client:
        raise Fail(f"ib_write_bw in t-pl-a did not use its own address's GID: {client[-600:]}")
    perf = f"UCX_LOG_LEVEL=info timeout -s KILL {TOOL_TIMEOUT} ucx_perftest -p 13337"
    server, client = server_client(lab, "t-pl-b", perf, 13337, "t-pl-a",
                                   perf + f" {b_ip} -t tag_bw -n 200 -s 65536 -w 10", "ucx_perftest (plain)")
    if "rc_verbs/" not in client:
        raise Fail(f"ucx_perftest in t-pl-a did not use rc_verbs: {client[-800:]}")
    print("      ib_write_bw and ucx_perftest ran on their containers' environment only")
    # The variables survive a container restart (the runtime reads the claim's spec again) and
    # a kubelet restart (the claim prepared again changes nothing).
    before = container_env(lab, "t-pl-a")
    same_env_after_restart(lab, "t-pl-a", before, "a container restart")
    lab.node(1, "bash", NODE_SH, "restart", "kubelet", timeout=600)
    wait_until("node1 Ready after the kubelet restart", 600, lambda: node_ready(lab, "node1"), step=5)
    same_env_after_restart(lab, "t-pl-a", before, "a kubelet restart")
    lab.delete_pods("t-pl-a", "t-pl-b")


def same_env_after_restart(lab, pod, before, after_what):
    """pod's container (on node1) killed and restarted by the kubelet starts with the same
    NCCL_/UCX_ variables as `before`."""
    restarts = lambda: lab.kjson("get", "pod", pod)["status"]["containerStatuses"][0]["restartCount"]
    count = restarts()
    kill_container(lab, 1, pod)
    wait_until(f"{pod}'s container restarted after {after_what}", 600, lambda: restarts() > count, step=3)
    lab.wait_ready(pod, seconds=600)
    after = container_env(lab, pod)
    if after != before:
        raise Fail(f"{pod}'s variables after {after_what}: {after}, before {before}")


HCA_SHARED_CLASS = os.path.join(REPO, "install/dra/deviceclass-hca-shared.yaml")


def written_for_the_device_plugin(lab, name, node):
    """conf/pod.yaml as written (its rdma/hca_shared request, its IPC_LOCK, no privilege), with
    the lab's image and a sleep, on node (a nodeSelector: the scheduler backs the extended
    resource with a claim), on the NAD the lab's recipe made of conf/nad-macvlan.yaml."""
    with open(os.path.join(REPO, "conf/pod.yaml")) as f:
        pod = yaml.safe_load(f)
    pod["metadata"]["name"] = name
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    for c in pod["spec"]["containers"]:
        c["image"], c["imagePullPolicy"], c["command"] = lab.image("lab-tools"), "IfNotPresent", ["sleep", "1000000000"]
    lab.apply(json.dumps(pod))


@case
def dra_extended_resource(lab):
    ensure_driver(lab)
    with open(HCA_SHARED_CLASS) as f:
        cls = yaml.safe_load(f)
    # The lab's roce-shared NAD (conf/nad-macvlan.yaml) attaches rail0.
    cls["spec"]["selectors"][0]["cel"]["expression"] = (
        f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].netdev in ["rail0"]')
    lab.apply(json.dumps(cls))
    try:
        written_for_the_device_plugin(lab, "t-xr-a", "node1")
        written_for_the_device_plugin(lab, "t-xr-b", "node2")
        lab.wait_ready("t-xr-a", "t-xr-b", seconds=900)
        views = []
        for pod, n in (("t-xr-a", 1), ("t-xr-b", 2)):
            c = lab.kjson("get", "pod", pod)["spec"]["containers"][0]
            if (c.get("securityContext") or {}).get("privileged"):
                raise Fail(f"{pod} runs privileged")
            claim = lab.kjson("get", "pod", pod)["status"].get("extendedResourceClaimStatus", {})
            if not claim.get("resourceClaimName"):
                raise Fail(f"{pod}: no extended-resource claim in its status: {claim}")
            view = PodView(lab, pod, n)
            nodes = lab.pod_exec(pod, "ls", "/dev/infiniband").stdout.split()
            own = lab.sh(n, f"for d in /sys/class/infiniband_verbs/uverbs*; do "
                            f"[ \"$(cat $d/ibdev)\" = {view.ibdev} ] && basename $d; done").split()
            if sorted(nodes) != sorted(own + ["rdma_cm"]):
                raise Fail(f"{pod}: /dev/infiniband has {nodes}, want its own {view.ibdev}'s {own} and rdma_cm")
            print(f"      {pod}: claim {claim['resourceClaimName']}, {view.ibdev} ({own}), not privileged")
            views.append(view)
        gbps, sent, got, _ = ib_write_bw_on_rail0(lab, *views)
        print(f"      ib_write_bw between pods written for the device plugin: {gbps} Gb/s")
        ucx_perftest(lab, *views)
        lab.delete_pods("t-xr-a", "t-xr-b")
    finally:
        lab.delete_pods("t-xr-a", "t-xr-b")
        lab.kubectl("delete", "deviceclass", cls["metadata"]["name"], "--ignore-not-found")

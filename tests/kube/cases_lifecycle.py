"""Pods and nodes living and dying under the real kubelet: each case ends with nothing of any
attachment left (lab.Lab.assert_clean runs after every case)."""
import os
import subprocess
import time

from cases_traffic import PodView, rping
from lab import NODES, REPO, Fail, case, wait_until


def records_of(lab, n, pod):
    return lab.pod_attachments(n, pod)


def allocations_of(lab, pod):
    return [a for a in lab.ip_allocations() if a[2] == f"default/{pod}"]


def sandbox_ids(lab, n, pod):
    return sorted(a["containerId"] for a in records_of(lab, n, pod))


@case
def pod_deleted(lab):
    lab.lab_pod("t-del", "node1")
    lab.wait_ready("t-del")
    # The presence twins of what assert_clean then finds gone.
    if len(records_of(lab, 1, "t-del")) != 1 or len(allocations_of(lab, "t-del")) != 1:
        raise Fail(f"t-del: records {records_of(lab, 1, 't-del')}, leases {allocations_of(lab, 't-del')}")
    _, devices, files = lab.node_state(1)
    if len(devices) != 1 or not files:
        raise Fail(f"t-del: Soft-RoCE devices {devices}, files {files}")
    lab.delete_pods("t-del")


# Kills the kubelet (SIGKILL) the moment an rdma-ns ADD starts on the node: a busy loop on the
# node itself, since a round trip from the host takes longer than an ADD under TCG.
KILL_KUBELET_AT_ADD = r"""
end=$(( $(date +%s) + 300 ))
while [ "$(date +%s)" -lt "$end" ]; do
  for p in $(pgrep -x rdma-ns); do
    if tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx CNI_COMMAND=ADD; then
      kill -KILL "$(cat /run/lab-kubelet.pid)" && echo "killed kubelet during ADD of pid $p" && exit 0
    fi
  done
done
echo "no rdma-ns ADD seen"; exit 1
"""


@case
def kubelet_killed_during_add(lab):
    watcher = subprocess.Popen(["bash", lab.lab_sh, "node", "1", "sh", "-c", KILL_KUBELET_AT_ADD],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(2)
    lab.lab_pod("t-kill", "node1")
    out, _ = watcher.communicate(timeout=330)
    if watcher.returncode != 0:
        raise Fail(f"the watcher did not kill the kubelet: {out}")
    lab.node(1, "bash", os.path.join(REPO, "install/lab/node.sh"), "start", "kubelet")
    # The pod comes up (the kubelet's sync retries the sandbox), with one attachment and one
    # lease, whatever happened to the ADD that was running.
    lab.wait_ready("t-kill")
    wait_until("one record and one lease for t-kill", 120,
               lambda: len(records_of(lab, 1, "t-kill")) == 1 and len(allocations_of(lab, "t-kill")) == 1)
    print(f"      {out.strip()}")
    lab.delete_pods("t-kill")


@case
def containerd_restarted(lab):
    lab.lab_pod("t-cd-a", "node1")
    lab.lab_pod("t-cd-b", "node2")
    lab.wait_ready("t-cd-a", "t-cd-b")
    before = lab.kjson("get", "pod", "t-cd-a")["status"]["containerStatuses"][0]
    # node.sh returns once the new containerd serves; the kubelet's CRI client then redials
    # with its own backoff, and until it has, exec fails with "dial unix ...containerd.sock".
    lab.node(1, "bash", os.path.join(REPO, "install/lab/node.sh"), "restart", "containerd")
    wait_until("kubectl exec into t-cd-a after the containerd restart", 180,
               lambda: lab.pod_exec("t-cd-a", "true", check=False).returncode == 0, step=5)
    after = lab.kjson("get", "pod", "t-cd-a")["status"]["containerStatuses"][0]
    if after["containerID"] != before["containerID"] or after["restartCount"] != before["restartCount"]:
        raise Fail(f"t-cd-a's container changed across the containerd restart: {before} -> {after}")
    # The running pod keeps its attachment and its RDMA; a new pod starts.
    rping(lab, PodView(lab, "t-cd-a", 1), PodView(lab, "t-cd-b", 2))
    lab.lab_pod("t-cd-c", "node1")
    lab.wait_ready("t-cd-c")
    PodView(lab, "t-cd-c", 1)
    lab.delete_pods("t-cd-a", "t-cd-b", "t-cd-c")


@case
def node_rebooted(lab):
    # node2 connects to node1's rails, so its restart reconnects them (install/lab.sh).
    lab.lab_pod("t-boot", "node2")
    lab.wait_ready("t-boot")
    old_ids = sandbox_ids(lab, 2, "t-boot")
    old_leases = allocations_of(lab, "t-boot")
    if len(old_ids) != 1 or len(old_leases) != 1:
        raise Fail(f"t-boot before the reboot: records {old_ids}, leases {old_leases}")
    lab.node(2, "sh", "-c", "sync; (sleep 1; echo b > /proc/sysrq-trigger) >/dev/null 2>&1 &", check=False)
    wait_until("node2 NotReady or gone", 300, lambda: not node_ready(lab, "node2"), step=3)
    wait_until("node2 Ready again", 900, lambda: node_ready(lab, "node2"), step=5)
    lab.wait_ready("t-boot", seconds=900)
    # What the pod had before the reboot is released: its old record and lease; the pod's new
    # sandbox has exactly one of each.
    wait_until("only t-boot's new attachment on node2", 300,
               lambda: (ids := sandbox_ids(lab, 2, "t-boot")) and len(ids) == 1 and ids != old_ids
               and len(allocations_of(lab, "t-boot")) == 1, step=5)
    PodView(lab, "t-boot", 2)
    lab.delete_pods("t-boot")


def node_ready(lab, node):
    try:
        conds = lab.kjson("get", "node", node)["status"]["conditions"]
    except Fail:
        return False
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


BAD_NAD = """
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: t-bad
spec:
  config: |
    {"cniVersion": "1.0.0", "name": "t-bad", "plugins": [{"type": "rdma-ns", "mode": "macvlan",
     "master": "nosuchnic0", "softRoce": true, "ipam": {"type": "whereabouts", "range": "192.168.101.0/24"}}]}
"""


@case
def bad_nad(lab):
    lab.apply(BAD_NAD)
    lab.lab_pod("t-bad", "node1", networks="t-bad")

    def sandbox_failure():
        events = lab.kjson("get", "events", "--field-selector", "involvedObject.name=t-bad")["items"]
        msgs = [e["message"] for e in events if e["reason"] == "FailedCreatePodSandBox"]
        return msgs[-1] if msgs else None

    msg = wait_until("a FailedCreatePodSandBox event for t-bad", 300, sandbox_failure, step=3)
    if "nosuchnic0" not in msg or "rdma-ns" not in msg:
        raise Fail(f"the pod's event does not name rdma-ns's error: {msg}")
    print(f"      event: {msg[-300:]}")
    lab.delete_pods("t-bad")
    lab.kubectl("delete", "network-attachment-definitions", "t-bad")


@case
def installer_updated(lab):
    lab.lab_pod("t-up-a", "node1")
    lab.lab_pod("t-up-b", "node2")
    lab.wait_ready("t-up-a", "t-up-b")
    ids = {n: sandbox_ids(lab, n, p) for n, p in ((1, "t-up-a"), (2, "t-up-b"))}
    old = lab.image("installer")
    new = lab.image("installer-next")
    for n in (1, 2):
        lab.node(n, "ctr", "-n", "k8s.io", "images", "import", images_tar("installer-next"), timeout=600)
    try:
        lab.kubectl("-n", "kube-system", "set", "image", "ds/rdma-ns-installer", f"*={new}")
        lab.kubectl("-n", "kube-system", "rollout", "status", "ds/rdma-ns-installer", "--timeout=600s", timeout=630)
        for n in (1, 2):
            version = lab.node(n, "/opt/cni/bin/rdma-ns", "--version").stdout
            if "-next" not in version:
                raise Fail(f"node{n}: after the update /opt/cni/bin/rdma-ns says {version}")
        # The running pods keep their attachments, and their RDMA works.
        for n, p in ((1, "t-up-a"), (2, "t-up-b")):
            if sandbox_ids(lab, n, p) != ids[n]:
                raise Fail(f"{p}: records changed across the update: {ids[n]} -> {sandbox_ids(lab, n, p)}")
        rping(lab, PodView(lab, "t-up-a", 1), PodView(lab, "t-up-b", 2))
        lab.delete_pods("t-up-a", "t-up-b")
    finally:
        lab.kubectl("-n", "kube-system", "set", "image", "ds/rdma-ns-installer", f"*={old}")
        lab.kubectl("-n", "kube-system", "rollout", "status", "ds/rdma-ns-installer", "--timeout=600s", timeout=630)


def images_tar(name):
    cache = os.environ.get("RDMA_NS_LAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rdma-ns/lab")
    return os.path.join(cache, "images", f"{name}.tar")

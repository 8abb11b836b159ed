"""The lab as the Kubernetes tier's cases see it: kubectl and node commands through
install/lab.sh (its `kubectl` and `node` verbs, exactly as users have them), and the checks every
case shares.
"""
import json
import os
import shlex
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NODES = ("node1", "node2")
CASES = []
# What the leftover checks read on a node: the shell command and its parser, by name.
NODE_READS = {
    "attachments": ("/opt/cni/bin/rdma-ns list --json", lambda out: json.loads(out or "[]")),
    "soft_roce_devices": ("rdma -j dev show", lambda out: sorted(
        d["ifname"] for d in json.loads(out or "[]") if d["ifname"].startswith("rxe_"))),
    "data_dir_files": ("find /var/lib/cni/rdma-ns -type f 2>/dev/null | sort", lambda out: [f for f in out.split() if f]),
}


def case(fn):
    """Registers a case; cases run in the order their modules define them."""
    CASES.append(fn)
    return fn


class Fail(Exception):
    pass


def wait_until(what, seconds, probe, step=1.0):
    """Calls probe() until it returns something true; fails naming `what` and the last value."""
    deadline = time.time() + seconds
    last = None
    while True:
        try:
            last = probe()
            if last:
                return last
        except Fail as e:
            last = f"(probe failed: {e})"
        if time.time() > deadline:
            raise Fail(f"{what}: not within {seconds} s (last: {str(last)[:400]})")
        time.sleep(step)


class Lab:
    def __init__(self, lab_sh, logs):
        self.lab_sh = lab_sh
        self.logs = logs

    def _run(self, argv, input=None, check=True, timeout=300):
        try:
            p = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Fail(f"{shlex.join(argv)}: no answer within {timeout} s")
        if check and p.returncode != 0:
            raise Fail(f"{shlex.join(argv[1:])}: exit {p.returncode}: {(p.stderr or p.stdout).strip()[-600:]}")
        return p

    def kubectl(self, *args, input=None, check=True, timeout=300):
        return self._run(["bash", self.lab_sh, "kubectl", *args], input, check, timeout).stdout

    def helm(self, *args, check=True, timeout=300):
        """helm against the lab (install/lab.sh helm); its stdout, or with check=False the
        CompletedProcess."""
        p = self._run(["bash", self.lab_sh, "helm", *args], None, check, timeout)
        return p.stdout if check else p

    def kjson(self, *args):
        return json.loads(self.kubectl(*args, "-o", "json"))

    def apply(self, manifest):
        self.kubectl("apply", "-f", "-", input=manifest)

    def node(self, n, *cmd, check=True, timeout=300, input=None):
        """Runs cmd as root on node n (1 or 2); returns the CompletedProcess."""
        return self._run(["bash", self.lab_sh, "node", str(n), *cmd], input, check, timeout)

    def sh(self, n, script, check=True, timeout=300):
        return self.node(n, "sh", "-c", script, check=check, timeout=timeout).stdout

    def pod_exec(self, pod, *cmd, check=True, timeout=300, container=None):
        args = ["exec", pod] + (["-c", container] if container else []) + ["--", *cmd]
        return self._run(["bash", self.lab_sh, "kubectl", *args], None, check, timeout)

    def save_node_logs(self, case):
        """After a failed case, the tail of each node's component logs (containerd, kubelet,
        kube-proxy, dropbear) into the logs dir: /var/log/lab is in the VM's memory overlay and
        goes with the lab, and a reset exec stream is explained only by the kubelet's log."""
        if not self.logs:
            return
        for n in (1, 2):
            into = os.path.join(self.logs, case, f"node{n}")
            os.makedirs(into, exist_ok=True)
            try:
                for name in self.sh(n, "ls /var/log/lab").split():
                    text = self.sh(n, f"tail -n 20000 /var/log/lab/{name}")
                    with open(os.path.join(into, name), "w") as f:
                        f.write(text)
            except Fail as e:
                with open(os.path.join(into, "unreadable"), "w") as f:
                    f.write(f"{e}\n")

    def manifests(self, *args):
        p = self._run(["python3", os.path.join(REPO, "install/lab/manifests.py"), *args])
        return p.stdout

    def image(self, name):
        """The reference of one of the lab's images (install/lab/images.sh's refs file)."""
        cache = os.environ.get("RDMA_NS_LAB_CACHE") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rdma-ns/lab")
        with open(os.path.join(cache, "images/refs")) as f:
            for line in f:
                k, ref = line.split()
                if k == name:
                    return ref
        raise Fail(f"no image {name} in the lab's refs")

    # ---- pods ----------------------------------------------------------------------------
    def lab_pod(self, name, node, networks="roce-shared", shape="conf/pod.yaml"):
        """A pod shaped like conf/pod.yaml on node N, as install/lab/recipe.sh starts them."""
        self.apply(self.manifests("pod", os.path.join(REPO, shape), name, node, self.image("lab-tools"), networks))

    def wait_ready(self, *pods, seconds=600):
        self.kubectl("wait", "--for=condition=Ready", *[f"pod/{p}" for p in pods], f"--timeout={seconds}s",
                     timeout=seconds + 30)

    def delete_pods(self, *pods, seconds=300):
        # A 1 s grace period: the test pods' PID 1 (`sleep infinity`, conf/pod.yaml's command)
        # ignores SIGTERM, so the default 30 s was only a wait before the same SIGKILL and the
        # same CNI DEL.
        if pods:
            self.kubectl("delete", "pod", "--ignore-not-found", "--wait=true", "--grace-period=1",
                         f"--timeout={seconds}s", *pods, timeout=seconds + 30)

    def network_status(self, pod):
        meta = self.kjson("get", "pod", pod)["metadata"]
        raw = meta.get("annotations", {}).get("k8s.v1.cni.cncf.io/network-status")
        if not raw:
            raise Fail(f"pod {pod} has no k8s.v1.cni.cncf.io/network-status annotation")
        return json.loads(raw)

    # ---- node state ----------------------------------------------------------------------
    def attachments(self, n):
        return self._read_node(n, "attachments")

    def pod_attachments(self, n, pod, namespace="default"):
        """The attachments of one pod on node n (`rdma-ns list --json`'s pod: name, namespace, uid)."""
        return [a for a in self.attachments(n)
                if (a.get("pod") or {}).get("name") == pod and a["pod"].get("namespace") == namespace]

    def soft_roce_devices(self, n):
        return self._read_node(n, "soft_roce_devices")

    def data_dir_files(self, n):
        return self._read_node(n, "data_dir_files")

    def node_state(self, n):
        """attachments, soft_roce_devices and data_dir_files of node n, in one node call (each
        call is an SSH handshake on a TCG vCPU, about a second)."""
        return self._read_node(n, *NODE_READS)

    def _read_node(self, n, *names):
        """The NODE_READS `names` of node n, run in one shell, each parsed; one value for one name."""
        script = " && echo @@ && ".join(f"{{ {NODE_READS[k][0]}; }}" for k in names)
        out = self.sh(n, script)
        parts = out.split("@@\n")
        if len(parts) != len(names):
            raise Fail(f"node{n}: unexpected output of {' '.join(names)}: {out[-600:]!r}")
        values = tuple(NODE_READS[k][1](part) for k, part in zip(names, parts))
        return values[0] if len(values) == 1 else values

    def ip_allocations(self):
        """Every whereabouts allocation: (pool, ip offset, pod reference)."""
        pools = self.kjson("get", "ippools.whereabouts.cni.cncf.io", "-A").get("items", [])
        return [(p["metadata"]["name"], k, v.get("podref", ""))
                for p in pools for k, v in (p.get("spec", {}).get("allocations") or {}).items()]

    def leftovers(self):
        found = []
        for i, node in enumerate(NODES, 1):
            atts, devs, files = self.node_state(i)
            if atts:
                found.append(f"{node}: rdma-ns list: " + ", ".join(f"{a['pod']} {a['network']} {a['phase']}" for a in atts))
            if devs:
                found.append(f"{node}: Soft-RoCE devices {devs}")
            if files:
                found.append(f"{node}: files in /var/lib/cni/rdma-ns: {files}")
        allocs = self.ip_allocations()
        if allocs:
            found.append(f"whereabouts allocations {allocs}")
        return found

    def assert_clean(self, seconds=120):
        """The end of every case: nothing of any attachment left on either node."""
        deadline = time.time() + seconds
        while True:
            left = self.leftovers()
            if not left:
                return
            if time.time() > deadline:
                raise Fail("left behind: " + "; ".join(left))
            time.sleep(2)

    def cleanup(self):
        """After a failed case: remove the test's pods, so the next case starts clean."""
        pods = [p["metadata"]["name"] for p in self.kjson("get", "pods")["items"]
                if p["metadata"].get("labels", {}).get("rdma-ns-test") or p["metadata"]["name"].startswith("t-")]
        self.delete_pods(*pods)
        self.assert_clean()

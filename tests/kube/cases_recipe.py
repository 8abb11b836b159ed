"""docs/install.md's "Install on a cluster", as install/lab.sh up carried it out: what each step should
have left on the nodes and in the API."""
import json
import re

from lab import NODES, Fail, case, wait_until
from cases_traffic import PodView, ib_write_bw_on_rail0


def installer_binary_version(lab):
    """`rdma-ns --version` of the binary inside the installer image the DaemonSet runs."""
    ds = lab.kjson("-n", "kube-system", "get", "ds", "rdma-ns-installer")
    image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
    if image != lab.image("installer"):
        raise Fail(f"the installer DaemonSet runs {image}, not the lab's installer image {lab.image('installer')}")
    pods = lab.kjson("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component=cni-installer")["items"]
    if len(pods) != len(NODES):
        raise Fail(f"{len(pods)} installer pods for {len(NODES)} nodes")
    name = pods[0]["metadata"]["name"]
    return lab.kubectl("-n", "kube-system", "exec", name, "-c", "reconcile", "--",
                       "/usr/local/bin/rdma-ns", "--version").strip()


@case
def recipe(lab):
    # Step 1: the DaemonSet put the image's rdma-ns into each node's /opt/cni/bin.
    want = installer_binary_version(lab)
    for n, node in enumerate(NODES, 1):
        got = lab.node(n, "/opt/cni/bin/rdma-ns", "--version").stdout.strip()
        if got != want:
            raise Fail(f"{node}: /opt/cni/bin/rdma-ns says {got!r}, the installer image's {want!r}")
        for plugin in ("multus", "whereabouts", "bridge", "host-local"):
            lab.node(n, "test", "-x", f"/opt/cni/bin/{plugin}")
        conf = lab.sh(n, "ls /etc/cni/net.d")
        if "00-multus.conf" not in conf:
            raise Fail(f"{node}: Multus wrote no 00-multus.conf: {conf.split()}")
    # Step 3's device plugin: registered with both kubelets under rdma/hca_shared. With no RDMA
    # device under any PCI function (the rails are virtio NICs; Soft-RoCE devices have no
    # parent device), it advertises none: docs/lab.md, "Soft-RoCE and the device plugin".
    for node in NODES:
        status = lab.kjson("get", "node", node)["status"]
        cap = status.get("capacity", {}).get("rdma/hca_shared")
        if cap is None:
            raise Fail(f"{node}: the device plugin's rdma/hca_shared is not in the node's capacity: {status.get('capacity')}")
        if cap != "0":
            raise Fail(f"{node}: rdma/hca_shared capacity {cap}: the plugin found an RDMA device under a PCI function")
    logs = lab.kubectl("-n", "kube-system", "logs", "ds/rdma-shared-dp-ds")
    if "no Rdma Devices were found" not in logs and "no devices in device pool" not in logs:
        raise Fail(f"the device plugin's log does not say why it has no device: {logs[-800:]}")
    # Step 3: the networks, with softRoce and the lab's masters.
    for nad, master in (("roce-shared", "rail0"), ("rail0", "rail0"), ("rail1", "rail1")):
        conf = json.loads(lab.kjson("get", "network-attachment-definitions", nad)["spec"]["config"])
        plugin = [p for p in conf["plugins"] if p["type"] == "rdma-ns"][0]
        if plugin.get("master") != master or plugin.get("softRoce") is not True:
            raise Fail(f"NAD {nad}: {plugin}")
    # Step 4: the two pods `up` started, each Ready with net1 from rdma-ns on its own node.
    for pod, n in (("rdma-a", 1), ("rdma-b", 2)):
        p = lab.kjson("get", "pod", pod)
        if p["spec"]["nodeName"] != NODES[n - 1]:
            raise Fail(f"{pod} runs on {p['spec']['nodeName']}")
        records = lab.pod_attachments(n, pod)
        if len(records) != 1 or records[0]["phase"] != "ready" or records[0]["ifname"] != "net1":
            raise Fail(f"{pod}: records on {NODES[n - 1]}: {records}")
        addr = lab.pod_exec(pod, "ip", "-o", "addr", "show", "dev", "net1").stdout
        if "192.168.100." not in addr:
            raise Fail(f"{pod}: net1 has no roce-shared address: {addr}")
    # And they carry RDMA across the nodes on what `rdma-ns env` names: the device plugin, Multus and
    # rdma-ns path of the default run (traffic-across-nodes adds rping and UCX, by name or --kube).
    a, b = PodView(lab, "rdma-a", 1), PodView(lab, "rdma-b", 2)
    gbps, sent, got, other = ib_write_bw_on_rail0(lab, a, b)
    print(f"      ib_write_bw rdma-a -> rdma-b: {gbps} Gb/s; rail0 node1 tx +{sent}, node2 rx +{got}; rail1 +{other}")
    lab.delete_pods("rdma-a", "rdma-b")


@case
def node_labels(lab):
    # rdma-ns doctor --nfd (install/node-agent.yaml) -> features.d -> nfd-worker -> nfd-master
    # -> the Node object. A pod makes a Soft-RoCE device, an ACTIVE RDMA port on the node.
    lab.lab_pod("t-label-a", "node1")
    lab.lab_pod("t-label-b", "node2")
    lab.wait_ready("t-label-a", "t-label-b")

    def labelled():
        found = {}
        for node in NODES:
            labels = lab.kjson("get", "node", node)["metadata"].get("labels", {})
            found[node] = {k: v for k, v in labels.items() if k.startswith("feature.node.kubernetes.io/rdma-")}
        return found if all(f.get("feature.node.kubernetes.io/rdma-capable") == "true" for f in found.values()) else None

    found = wait_until("rdma-ns's NFD labels on both nodes", 420, labelled, step=5)
    for node, labels in found.items():
        if labels.get("feature.node.kubernetes.io/rdma-netns-mode") != "shared":
            raise Fail(f"{node}: labels {labels}")
    print(f"      labels: {found['node1']}")
    lab.delete_pods("t-label-a", "t-label-b")


@case
def exporter_metrics(lab):
    lab.lab_pod("t-metrics-a", "node1")
    lab.lab_pod("t-metrics-b", "node2")
    lab.lab_pod("t-metrics-c", "node2")
    lab.wait_ready("t-metrics-a", "t-metrics-b", "t-metrics-c")
    pods = lab.kjson("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component=node-agent")["items"]
    by_node = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in pods}
    for node, want in (("node1", 1), ("node2", 2)):
        text = lab.kubectl("get", "--raw", f"/api/v1/namespaces/kube-system/pods/{by_node[node]}:9100/proxy/metrics")
        count = attachments_metric(text)
        if count != want:
            raise Fail(f"{node}: the exporter counts {count} attachments, want {want}: "
                       + " | ".join(l for l in text.splitlines() if "attachment" in l)[:800])
    lab.delete_pods("t-metrics-a", "t-metrics-b", "t-metrics-c")


def attachments_metric(text):
    """How many attachments the exporter's rdma_ns_attachment_info samples count."""
    return sum(1 for line in text.splitlines()
               if line.startswith("rdma_ns_attachment_info{") and line.endswith(" 1"))


def readme_pod():
    """README's "A pod of your own" example, as README gives it (the YAML block after that line)."""
    import os
    from lab import REPO
    text = open(os.path.join(REPO, "README.md")).read()
    start = text.index("A pod of your own")
    block = re.search(r"```yaml\n(.*?)```", text[start:], re.S)
    if not block:
        raise Fail("README has no YAML block after \"A pod of your own\"")
    return block.group(1)


@case
def readme_own_pod(lab):
    """A user's own pod, exactly as README writes it (`image: rdma-ns/lab-tools`, the name README
    gives): Ready on the lab's network, and `rdma-ns env` in it names its own device."""
    manifest = readme_pod().replace("name: mine", "name: t-mine")
    lab.apply(manifest)
    lab.wait_ready("t-mine", seconds=900)
    env = json.loads(lab.pod_exec("t-mine", "rdma-ns", "env", "--format", "json").stdout)
    if not env["env"].get("NCCL_IB_HCA"):
        raise Fail(f"t-mine: rdma-ns env names no device: {env}")
    print(f"      t-mine: {env['env']['NCCL_IB_HCA']} GID {env['env'].get('NCCL_IB_GID_INDEX')}")
    lab.delete_pods("t-mine")

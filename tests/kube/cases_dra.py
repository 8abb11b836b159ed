"""rdma-ns as a DRA driver on the lab (issue 31, section 7): rdma-ns-dra deployed as docs/dra.md says
(install/dra/: RBAC, ConfigMap, DeviceClasses, DaemonSet), the RDMA shared device plugin
gone, and pods that get their RDMA device from a ResourceClaimTemplate and their net1 from
rdma-ns through the claim (a NAD with "dra": true, called by Multus with the pod's UID).

The driver's configuration names both rails as Soft-RoCE-capable netdevs, with their rails;
the cases' claims select rail0, so that two pods on different nodes share a segment.
"""
import json
import os

from lab import REPO, Fail, case, wait_until
from cases_lifecycle import images_tar
from cases_traffic import PodView, ib_write_bw_on_rail0, rping

DRIVER = "rdma-ns.io"
# aux0 (no rail) shares rail1's PCIe root: dra-topology's pair under one root.
DRIVER_CONFIG = {"rails": {"rail0": "rail0", "rail1": "rail1"}, "softRoceNetdevs": ["rail0", "rail1", "aux0"]}
DEVICE_PLUGIN = "rdma-shared-dp-ds"
# The claim every DRA pod here gets: one Soft-RoCE-capable netdev on rail0 (conf/dra's
# rdma-soft-roce, narrowed to a rail).
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "lab-soft-roce-rail0", "namespace": "default"},
    "spec": {"spec": {"devices": {"requests": [{"name": "rdma", "exactly": {
        "deviceClassName": "rdma-ns-soft-roce",
        # Guarded: aux0 has no rail, and an unguarded read fails the scheduler's filter.
        "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].?rail.orValue("") == "rail0"'}}],
    }}]}}},
}
NAD_FILE = os.path.join(REPO, "conf/dra/nad-dra.yaml")
POD_FILE = os.path.join(REPO, "conf/dra/pod-dra.yaml")


def driver_image_on_nodes(lab):
    """The driver's image on both nodes' containerd: the lab seeds it into every disk; a lab
    that came up before the image existed gets it imported."""
    ref = lab.image("dra")
    tar = images_tar("dra")
    for n in (1, 2):
        listed = lab.node(n, "ctr", "-n", "k8s.io", "images", "ls", "-q").stdout.split()
        if ref not in listed:
            lab.node(n, "ctr", "-n", "k8s.io", "images", "import", tar, timeout=900)
    return ref


def ensure_driver(lab):
    """rdma-ns-dra running on both nodes and publishing, and no device plugin: once per run."""
    if lab.kubectl("-n", "kube-system", "get", "ds", DEVICE_PLUGIN, "--ignore-not-found", "-o", "name").strip():
        lab.kubectl("-n", "kube-system", "delete", "ds", DEVICE_PLUGIN, "--wait=true", "--timeout=600s", timeout=630)
    ref = driver_image_on_nodes(lab)
    lab.kubectl("apply", "-f", os.path.join(REPO, "install/dra/rbac.yaml"),
                "-f", os.path.join(REPO, "install/dra/deviceclasses.yaml"))
    config = lab.kjson("create", "--dry-run=client", "-f", os.path.join(REPO, "install/dra/configmap.yaml"))
    config["data"]["config.json"] = json.dumps(dict(json.loads(config["data"]["config.json"]), **DRIVER_CONFIG))
    lab.apply(json.dumps(config))
    lab.apply(lab.manifests("image", os.path.join(REPO, "install/dra/daemonset.yaml"), ref))
    lab.kubectl("-n", "kube-system", "rollout", "status", "ds/rdma-ns-dra", "--timeout=900s", timeout=930)
    for node in ("node1", "node2"):
        wait_until(f"{node}'s ResourceSlice with softroce-rail0", 120, lambda: published(lab, node))


def published(lab, node):
    """The devices of node's slice from the driver, by name, once it has both rails with the
    attributes the claims and the scheduler use."""
    slices = lab.kjson("get", "resourceslices", f"--field-selector=spec.nodeName={node},spec.driver={DRIVER}")
    devices = {d["name"]: d for s in slices["items"] for d in s["spec"].get("devices", [])}
    for rail in ("rail0", "rail1"):
        dev = devices.get(f"softroce-{rail}")
        if not dev:
            return None
        got = {k: attribute(dev, k) for k in ("kind", "rail", "netdev", "resource.kubernetes.io/pcieRoot")}
        if got["kind"] != "soft-roce" or got["rail"] != rail or got["netdev"] != rail or not got["resource.kubernetes.io/pcieRoot"]:
            raise Fail(f"{node}: softroce-{rail}'s attributes {got}")
    return devices


def attribute(device, name):
    """An attribute's value; unqualified names are the driver's (stored with or without it)."""
    attrs = device.get("attributes", {})
    value = attrs.get(name) or attrs.get(f"{DRIVER}/{name}") or {}
    return next(iter(value.values()), None) if value else None


def claim_of(lab, pod):
    """The ResourceClaim made for pod from its template (status.resourceClaimStatuses)."""
    statuses = lab.kjson("get", "pod", pod)["status"].get("resourceClaimStatuses", [])
    if len(statuses) != 1 or not statuses[0].get("resourceClaimName"):
        raise Fail(f"{pod}: resourceClaimStatuses {statuses}")
    return lab.kjson("get", "resourceclaim", statuses[0]["resourceClaimName"])


def check_claim_status(lab, view):
    """The claim's status.devices (KEP-4817) names what the pod got: net1, its IP, the ib device."""
    claim = claim_of(lab, view.pod)
    devices = [d for d in claim.get("status", {}).get("devices", []) if d.get("driver") == DRIVER]
    if len(devices) != 1:
        raise Fail(f"{view.pod}: claim {claim['metadata']['name']} status.devices {devices}")
    dev = devices[0]
    net = dev.get("networkData", {})
    if net.get("interfaceName") != "net1" or not any(ip.split("/")[0] == view.ip for ip in net.get("ips", [])):
        raise Fail(f"{view.pod}: claim networkData {net}, want net1 with {view.ip}")
    if view.ibdev not in json.dumps(dev.get("data", {})):
        raise Fail(f"{view.pod}: claim device data {dev.get('data')} does not name {view.ibdev}")
    ready = [c for c in dev.get("conditions", []) if c.get("type") == "Ready"]
    if not ready or ready[0].get("status") != "True":
        raise Fail(f"{view.pod}: claim conditions {dev.get('conditions')}")
    return claim["metadata"]["name"], dev


def dra_pod(lab, name, node):
    spec = lab.manifests("pod", POD_FILE, name, node, lab.image("lab-tools"), "rdma-dra")
    docs = [d for d in spec.split("\n---\n") if d.strip()]
    lab.apply("\n---\n".join(docs).replace("resourceClaimTemplateName: rdma-soft-roce",
                                           f"resourceClaimTemplateName: {TEMPLATE['metadata']['name']}"))


def dra_pair(lab, on_node1, on_node2):
    """The driver up, the template and the NAD applied, and a DRA pod Ready on each node:
    their PodViews."""
    ensure_driver(lab)
    lab.apply(json.dumps(TEMPLATE))
    lab.apply(open(NAD_FILE).read())
    dra_pod(lab, on_node1, "node1")
    dra_pod(lab, on_node2, "node2")
    lab.wait_ready(on_node1, on_node2, seconds=900)
    return PodView(lab, on_node1, 1), PodView(lab, on_node2, 2)


@case
def dra_across_nodes(lab):
    a, b = dra_pair(lab, "t-dra-a", "t-dra-b")
    claims = [check_claim_status(lab, v)[0] for v in (a, b)]
    gbps, sent, got, _ = ib_write_bw_on_rail0(lab, a, b)
    print(f"      ib_write_bw t-dra-a -> t-dra-b: {gbps} Gb/s; rail0 node1 tx +{sent}, node2 rx +{got}")
    rping(lab, a, b)
    for n in (1, 2):
        if cdi_specs(lab, n) < 1:
            raise Fail(f"node{n}: no rdma-ns.io CDI spec in /var/run/cdi while its pod runs")
    lab.delete_pods("t-dra-a", "t-dra-b")
    # The pods' claims go with them (made from a template), and the driver unprepares them.
    wait_until("the pods' claims deleted", 300,
               lambda: not lab.kubectl("get", "resourceclaim", "--ignore-not-found", "-o", "name", *claims).strip())
    for n in (1, 2):
        wait_until(f"node{n}'s CDI specs removed", 120, lambda: cdi_specs(lab, n) == 0)


def cdi_specs(lab, n):
    """How many CDI specs of the driver node n has (install/dra: rdma-ns.io-<claim UID>.json)."""
    return int(lab.sh(n, "ls /var/run/cdi 2>/dev/null | grep -c '^rdma-ns.io-' || true").strip())


def claim_template(name, count=1, selector=None, match_root=False):
    """A ResourceClaimTemplate for `count` Soft-RoCE-capable netdevs of one node."""
    exactly = {"deviceClassName": "rdma-ns-soft-roce", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    devices = {"requests": [{"name": "rdma", "exactly": exactly}]}
    if match_root:
        devices["constraints"] = [{"requests": ["rdma"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"spec": {"devices": devices}}}


def claim_pod(lab, name, node, template):
    """A pod on node with a claim from template and the default network only."""
    spec = lab.manifests("pod", POD_FILE, name, node, lab.image("lab-tools"), "")
    lab.apply(spec.replace("resourceClaimTemplateName: rdma-soft-roce", f"resourceClaimTemplateName: {template}"))


def unschedulable_reason(lab, pod):
    """The scheduler's reason while pod stays Pending (its PodScheduled condition)."""
    p = lab.kjson("get", "pod", pod)
    if p["status"].get("phase") != "Pending":
        raise Fail(f"{pod} is {p['status'].get('phase')}, not Pending")
    cond = [c for c in p["status"].get("conditions", []) if c.get("type") == "PodScheduled"]
    return cond[0].get("message") if cond and cond[0].get("status") == "False" else None


@case
def dra_topology(lab):
    """The node VMs have two PCIe roots (install/lab.sh, node_qemu_opts): rail0 alone under
    pci0000:00, rail1 and aux0 under pci0000:40 on NUMA node 1. Two devices with matchAttribute
    on pcieRoot can only be rail1 and aux0; three cannot be met, and the pod stays Pending with
    the scheduler's reason."""
    ensure_driver(lab)
    devices = published(lab, "node1")
    roots = {n: attribute(d, "resource.kubernetes.io/pcieRoot") for n, d in devices.items()}
    want = {"softroce-rail0": "pci0000:00", "softroce-rail1": "pci0000:40", "softroce-aux0": "pci0000:40"}
    if any(roots.get(n) != r for n, r in want.items()):
        raise Fail(f"node1's pcieRoot attributes {roots}, want {want}")
    numa = attribute(devices["softroce-rail1"], "resource.kubernetes.io/numaNode")
    if numa != 1:
        raise Fail(f"softroce-rail1's numaNode is {numa}, want 1 (the pxb-pcie's)")
    lab.apply(json.dumps(claim_template("lab-pair-same-root", 2, match_root=True)))
    lab.apply(json.dumps(claim_template("lab-trio-same-root", 3, match_root=True)))
    claim_pod(lab, "t-dra-pair", "node1", "lab-pair-same-root")
    claim_pod(lab, "t-dra-trio", "node1", "lab-trio-same-root")
    lab.wait_ready("t-dra-pair", seconds=900)
    claim = claim_of(lab, "t-dra-pair")
    got = sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"])
    if got != ["softroce-aux0", "softroce-rail1"]:
        raise Fail(f"t-dra-pair's claim got {got}, want the two under pci0000:40")
    reason = wait_until("t-dra-trio's scheduler reason", 300, lambda: unschedulable_reason(lab, "t-dra-trio"))
    if "claim" not in reason:
        raise Fail(f"t-dra-trio Pending for another reason: {reason}")
    print(f"      t-dra-pair: {got}; t-dra-trio Pending: {reason}")
    lab.delete_pods("t-dra-pair", "t-dra-trio")


@case
def dra_driver_restarted(lab):
    """A driver restart while pods run loses nothing: the claims keep their status, the pods
    their RDMA, and deleting them afterwards still unprepares everything."""
    a, b = dra_pair(lab, "t-dra-r1", "t-dra-r2")
    before = {v.pod: check_claim_status(lab, v) for v in (a, b)}
    lab.kubectl("-n", "kube-system", "delete", "pod", "-l", "app=rdma-ns-dra", "--wait=true", "--timeout=300s",
                timeout=330)
    lab.kubectl("-n", "kube-system", "rollout", "status", "ds/rdma-ns-dra", "--timeout=900s", timeout=930)
    after = {v.pod: check_claim_status(lab, v) for v in (a, b)}
    for pod in before:
        if before[pod][1].get("networkData") != after[pod][1].get("networkData"):
            raise Fail(f"{pod}: the claim's networkData changed across the restart: {before[pod]} -> {after[pod]}")
    rping(lab, a, b)
    lab.delete_pods("t-dra-r1", "t-dra-r2")
    for n in (1, 2):
        wait_until(f"node{n}'s CDI specs removed", 120, lambda: cdi_specs(lab, n) == 0)


def pod_events(lab, pod):
    events = lab.kjson("get", "events", f"--field-selector=involvedObject.name={pod}")["items"]
    return " | ".join(f"{e.get('reason')}: {e.get('message')}" for e in events)


@case
def dra_bad_input(lab):
    """A claim allocated a device of another node, a selector that matches nothing and a
    malformed driver config: each message lands where the user looks, and nothing is left."""
    ensure_driver(lab)
    # A selector that matches nothing: the pod's PodScheduled condition says why.
    lab.apply(json.dumps(claim_template("lab-no-such-rail", selector=f'device.attributes["{DRIVER}"].?rail.orValue("") == "rail9"')))
    claim_pod(lab, "t-dra-none", "node1", "lab-no-such-rail")
    reason = wait_until("t-dra-none's scheduler reason", 300, lambda: unschedulable_reason(lab, "t-dra-none"))
    if "claim" not in reason:
        raise Fail(f"t-dra-none Pending for another reason: {reason}")
    lab.delete_pods("t-dra-none")
    print(f"      no matching device: {reason}")

    # node2's device in a claim that a pod on node1 uses: an allocation written by hand (as an
    # admin or a broken controller could), which the scheduler never checks for a pod with
    # nodeName. The driver on node1 refuses it, and the kubelet shows that on the pod.
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "t-other-node", "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "rdma", "exactly": {"deviceClassName": "rdma-ns-soft-roce"}}]}}}
    lab.apply(json.dumps(claim))
    status = {"status": {"allocation": {
        "devices": {"results": [{"request": "rdma", "driver": DRIVER, "pool": "node2", "device": "softroce-rail0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["node1"]}]}]}}}}
    lab.kubectl("patch", "resourceclaim", "t-other-node", "--subresource=status", "--type=merge", "-p",
                json.dumps(status))
    # The resourceclaim controller reserves an allocated claim for a pod that has a node.
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t-dra-other", "namespace": "default"},
           "spec": {"nodeName": "node1", "terminationGracePeriodSeconds": 1,
                    "resourceClaims": [{"name": "rdma", "resourceClaimName": "t-other-node"}],
                    "containers": [{"name": "c", "image": lab.image("lab-tools"), "command": ["sleep", "1000000000"],
                                    "resources": {"claims": [{"name": "rdma"}]}}]}}
    lab.apply(json.dumps(pod))
    events = wait_until("t-dra-other's prepare error in its events", 600,
                        lambda: (lambda e: e if "belongs to node node2" in e else None)(pod_events(lab, "t-dra-other")))
    print(f"      another node's device: {events[:300]}")
    if cdi_specs(lab, 1):
        raise Fail("node1 wrote a CDI spec for the refused claim")
    lab.delete_pods("t-dra-other")
    lab.kubectl("delete", "resourceclaim", "t-other-node", "--ignore-not-found")

    # A malformed driver config: the driver's log names the field and the value.
    config = lab.kjson("-n", "kube-system", "get", "configmap", "rdma-ns-dra")
    good = config["data"]["config.json"]
    bad = json.dumps(dict(json.loads(good), sharesPerDevice=0))
    try:
        set_driver_config(lab, bad)
        log = wait_until("node1's driver log naming sharesPerDevice", 600,
                         lambda: (lambda out: out if "sharesPerDevice" in out else None)(driver_log(lab, "node1")))
        print(f"      malformed config: {[l for l in log.splitlines() if 'sharesPerDevice' in l][0][:300]}")
    finally:
        set_driver_config(lab, good)
        lab.kubectl("-n", "kube-system", "rollout", "status", "ds/rdma-ns-dra", "--timeout=900s", timeout=930)


def set_driver_config(lab, text):
    """The driver's config.json replaced, and node1's driver restarted to read it."""
    lab.kubectl("-n", "kube-system", "patch", "configmap", "rdma-ns-dra", "--type=merge", "-p",
                json.dumps({"data": {"config.json": text}}))
    # The DaemonSet's new pod mounts the ConfigMap as it is now.
    lab.kubectl("-n", "kube-system", "delete", "pod", "-l", "app=rdma-ns-dra",
                "--field-selector=spec.nodeName=node1", "--wait=true", "--timeout=300s", timeout=330)


def driver_log(lab, node):
    """The log of node's driver pod, and of its previous container (a crash loop)."""
    pods = lab.kubectl("-n", "kube-system", "get", "pods", "-l", "app=rdma-ns-dra",
                       f"--field-selector=spec.nodeName={node}", "-o", "name").split()
    out = ""
    for pod in pods:
        for previous in ("--previous=true", "--previous=false"):
            out += lab.kubectl("-n", "kube-system", "logs", pod, previous, "--tail=50", check=False)
    return out

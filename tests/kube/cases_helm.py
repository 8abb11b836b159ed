"""rdma-ns installed with its Helm chart (install/helm/rdma-ns, issue 40 §3) through
`install/lab.sh helm`: an upgrade keeps the running pods' attachments, an uninstall leaves
nothing of rdma-ns on the nodes but the CNI binary (the chart's README says why), and a second
install of the same release fails with helm's own message and installs nothing.

The release holds the installer, the driver with the DRA cases' config and the DeviceClasses,
on the lab's images. The lab's recipe applies rdma-ns with kubectl (install/daemonset.yaml; the
DRA cases apply install/dra/), so the first helm case takes those objects into the release
(`--take-ownership --force-conflicts`: the chart's README, moving a cluster from the manifests
to the chart). The upgrade case rolls the release back and the uninstall case installs it again
at their ends, so whatever runs after them finds rdma-ns as before.
"""
import json
import os
import tempfile

import yaml

from cases_dra import (DEVICE_PLUGIN, DRIVER, DRIVER_CONFIG, NAD_FILE, TEMPLATE, cdi_specs, dra_pod,
                       driver_image_on_nodes, published)
from lab import NODES, REPO, Fail, case, wait_until

RELEASE = "rdma-ns"
NAMESPACE = "kube-system"
CHART = os.path.join(REPO, "install/helm/rdma-ns")
# The chart's DaemonSets' pods, by label selector.
POD_SELECTORS = ("app.kubernetes.io/component=cni-installer", "app=rdma-ns-dra")
# What the driver leaves on a node while it runs: its kubelet sockets (it removes them at exit).
DRIVER_SOCKETS = ("/var/lib/kubelet/plugins_registry/rdma-ns.io-reg.sock",
                  "/var/lib/kubelet/plugins/rdma-ns.io/dra.sock")
HELM_WAIT = ("--wait", "--timeout", "15m")


def image_value(ref):
    repository, tag = ref.rsplit(":", 1)
    return {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"}


def values_file(lab):
    """The lab's values: its images, the DRA cases' driver config; written to a file for -f."""
    values = {"installer": {"enabled": True, "image": image_value(lab.image("installer"))},
              "driver": {"enabled": True, "image": image_value(lab.image("dra")), "config": DRIVER_CONFIG},
              "deviceClasses": {"enabled": True}}
    path = os.path.join(tempfile.gettempdir(), "rdma-ns-lab-helm-values.json")
    with open(path, "w") as f:
        json.dump(values, f)
    return path


def release_manifest(lab):
    """The objects the deployed release holds, as YAML."""
    return lab.helm("get", "manifest", RELEASE, "-n", NAMESPACE)


def existing(lab, manifest):
    """The objects of `manifest` the API server has, as kind/name (kubectl maps each by its
    apiVersion and kind, a CRD's too)."""
    return lab.kubectl("get", "-f", "-", "--ignore-not-found", "-o", "name", input=manifest).split()


def release_status(lab):
    p = lab.helm("status", RELEASE, "-n", NAMESPACE, "-o", "json", check=False)
    return json.loads(p.stdout)["info"]["status"] if p.returncode == 0 else None


def ensure_release(lab):
    """The release deployed with the lab's values, the device plugin gone as for the DRA cases,
    and the driver publishing on both nodes."""
    if lab.kubectl("-n", NAMESPACE, "get", "ds", DEVICE_PLUGIN, "--ignore-not-found", "-o", "name").strip():
        lab.kubectl("-n", NAMESPACE, "delete", "ds", DEVICE_PLUGIN, "--wait=true", "--timeout=600s", timeout=630)
    driver_image_on_nodes(lab)
    # A release the recipe made keeps its own values (its networks, say); the lab's go over them.
    reuse = ["--reuse-values"] if release_status(lab) == "deployed" else []
    # The objects kubectl applied (the recipe, the DRA cases) are taken into the release: helm 4
    # applies server-side, and kubectl's client-side apply owns the fields the chart sets.
    lab.helm("upgrade", "--install", RELEASE, CHART, "-n", NAMESPACE, *reuse, "-f", values_file(lab),
             "--take-ownership", "--force-conflicts", *HELM_WAIT, timeout=960)
    wait_published(lab)


def wait_published(lab):
    for node in NODES:
        wait_until(f"{node}'s ResourceSlice with softroce-rail0", 180, lambda: published(lab, node))


def chart_pods(lab):
    """The chart's DaemonSets' pods: name -> uid."""
    pods = {}
    for selector in POD_SELECTORS:
        for p in lab.kjson("-n", NAMESPACE, "get", "pods", "-l", selector)["items"]:
            pods[p["metadata"]["name"]] = p["metadata"]["uid"]
    return pods


def net1(lab, pod):
    """net1 in the pod as `ip -j addr` shows it: name, MAC, MTU, addresses."""
    out = lab.pod_exec(pod, "ip", "-j", "addr", "show", "dev", "net1").stdout
    link = json.loads(out)[0]
    return (link["ifname"], link.get("address"), link.get("mtu"),
            sorted(a["local"] for a in link.get("addr_info", [])))


def pods_with_rdma(lab, on_node1, on_node2):
    """A pod of the recipe's roce-shared network on node1 and a DRA pod on node2, both Ready."""
    lab.lab_pod(on_node1, "node1")
    lab.apply(json.dumps(TEMPLATE))
    lab.apply(open(NAD_FILE).read())
    dra_pod(lab, on_node2, "node2")
    lab.wait_ready(on_node1, on_node2, seconds=900)


@case
def helm_upgrade_keeps_attachments(lab):
    ensure_release(lab)
    pods_with_rdma(lab, "t-helm-a", "t-helm-b")
    before = {n: lab.attachments(n) for n in (1, 2)}
    if len(lab.pod_attachments(1, "t-helm-a")) != 1 or len(lab.pod_attachments(2, "t-helm-b")) != 1:
        raise Fail(f"the pods' attachments before the upgrade: {before}")
    nets = {p: net1(lab, p) for p in ("t-helm-a", "t-helm-b")}
    daemons = chart_pods(lab)
    revision = json.loads(lab.helm("status", RELEASE, "-n", NAMESPACE, "-o", "json"))["version"]
    # A changed driver config and installer resources: both DaemonSets roll.
    lab.helm("upgrade", RELEASE, CHART, "-n", NAMESPACE, "--reuse-values", "--set", "driver.config.resyncSeconds=45",
             "--set", "installer.resources.reconcile.limits.memory=96Mi", *HELM_WAIT, timeout=960)
    status = json.loads(lab.helm("status", RELEASE, "-n", NAMESPACE, "-o", "json"))
    if status["version"] != revision + 1 or status["info"]["status"] != "deployed":
        raise Fail(f"after the upgrade: revision {status['version']} (was {revision}), {status['info']['status']}")
    config = json.loads(lab.kjson("-n", NAMESPACE, "get", "configmap", "rdma-ns-dra")["data"]["config.json"])
    if config.get("resyncSeconds") != 45:
        raise Fail(f"the driver's config after the upgrade: {config}")
    for ds in ("ds/rdma-ns-installer", "ds/rdma-ns-dra"):
        lab.kubectl("-n", NAMESPACE, "rollout", "status", ds, "--timeout=900s", timeout=930)
    replaced = set(daemons) - set(chart_pods(lab))
    if replaced != set(daemons):
        raise Fail(f"not every DaemonSet pod was replaced by the upgrade: kept {set(daemons) - replaced}")
    after = {n: lab.attachments(n) for n in (1, 2)}
    if after != before:
        raise Fail(f"rdma-ns list changed across the upgrade: {before} -> {after}")
    for pod, net in nets.items():
        if net1(lab, pod) != net:
            raise Fail(f"{pod}: net1 was {net}, is {net1(lab, pod)} after the upgrade")
    print(f"      revision {revision} -> {status['version']}, {len(daemons)} DaemonSet pods replaced, "
          f"{sum(len(a) for a in after.values())} attachments kept")
    lab.delete_pods("t-helm-a", "t-helm-b")
    wait_until("node2's CDI specs removed", 120, lambda: cdi_specs(lab, 2) == 0)
    # The release as it was, for the cases after this one.
    lab.helm("rollback", RELEASE, str(revision), "-n", NAMESPACE, *HELM_WAIT, timeout=960)
    wait_published(lab)


def release_footprint(lab):
    """What a helm command could have touched: the release's history (helm keeps one Secret a
    revision), and every chart object's resourceVersion."""
    history = json.loads(lab.helm("history", RELEASE, "-n", NAMESPACE, "-o", "json"))
    secrets = lab.kubectl("-n", NAMESPACE, "get", "secrets", "-l", f"owner=helm,name={RELEASE}", "-o", "name").split()
    items = json.loads(lab.kubectl("get", "-f", "-", "-o", "json", input=release_manifest(lab)))["items"]
    versions = {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in items}
    return [(h["revision"], h["status"]) for h in history], sorted(secrets), versions


@case
def helm_second_install_fails(lab):
    ensure_release(lab)
    before = release_footprint(lab)
    daemons = chart_pods(lab)
    p = lab.helm("install", RELEASE, CHART, "-n", NAMESPACE, "-f", values_file(lab), *HELM_WAIT, check=False,
                 timeout=960)
    # helm 4's wording (helm 3 said "re-use").
    if p.returncode == 0 or "cannot reuse a name that is still in use" not in p.stderr:
        raise Fail(f"a second helm install: exit {p.returncode}: {(p.stderr or p.stdout)[-600:]}")
    after = release_footprint(lab)
    if after != before:
        raise Fail(f"the refused install changed the release or its objects: {before} -> {after}")
    if chart_pods(lab) != daemons:
        raise Fail(f"the refused install replaced DaemonSet pods: {daemons} -> {chart_pods(lab)}")
    if before[0][-1][1] != "deployed":
        raise Fail(f"the release is not deployed: {before[0]}")
    print(f"      refused: {p.stderr.strip()[-200:]}; history {before[0]} unchanged")


def node_leftovers(lab, n):
    """What of the chart is on node n: its pods, the driver's sockets and CDI specs, records."""
    pods = [p["metadata"]["name"] for s in POD_SELECTORS for p in lab.kjson(
        "-n", NAMESPACE, "get", "pods", "-l", s, f"--field-selector=spec.nodeName={NODES[n - 1]}")["items"]]
    sockets = lab.sh(n, " ".join(["ls"] + list(DRIVER_SOCKETS) + ["2>/dev/null; true"])).split()
    return {"pods": pods, "sockets": sockets, "cdi specs": cdi_specs(lab, n), "records": lab.data_dir_files(n)}


def slices(lab):
    return lab.kubectl("get", "resourceslices", f"--field-selector=spec.driver={DRIVER}", "-o", "name").split()


@case
def helm_uninstall_leaves_nothing(lab):
    ensure_release(lab)
    manifest = release_manifest(lab)
    objects = [d for d in yaml.safe_load_all(manifest) if d]
    # What the release is installed with again at the end.
    saved = os.path.join(tempfile.gettempdir(), "rdma-ns-lab-helm-release.json")
    with open(saved, "w") as f:
        f.write(lab.helm("get", "values", RELEASE, "-n", NAMESPACE, "-o", "json"))
    # The presence twins: a pod of each kind leaves records and a CDI spec while it runs, and
    # the release's pods, sockets and slices are on both nodes.
    pods_with_rdma(lab, "t-helm-u1", "t-helm-u2")
    if not lab.pod_attachments(1, "t-helm-u1") or not lab.pod_attachments(2, "t-helm-u2") or not cdi_specs(lab, 2):
        raise Fail(f"the pods' records or CDI spec missing: {node_leftovers(lab, 1)} {node_leftovers(lab, 2)}")
    for n in (1, 2):
        left = node_leftovers(lab, n)
        if len(left["pods"]) != 2 or len(left["sockets"]) != 2:
            raise Fail(f"node{n} before the uninstall: {left}")
    if len(slices(lab)) < len(NODES):
        raise Fail(f"ResourceSlices before the uninstall: {slices(lab)}")
    if len(existing(lab, manifest)) != len(objects):
        raise Fail(f"the release's {len(objects)} objects before the uninstall: {existing(lab, manifest)}")
    lab.delete_pods("t-helm-u1", "t-helm-u2")
    wait_until("the pods' records and CDI specs gone", 180,
               lambda: all(not lab.data_dir_files(n) and cdi_specs(lab, n) == 0 for n in (1, 2)))
    lab.helm("uninstall", RELEASE, "-n", NAMESPACE, *HELM_WAIT, timeout=960)
    empty = {"pods": [], "sockets": [], "cdi specs": 0, "records": []}
    for n in (1, 2):
        wait_until(f"node{n} without rdma-ns", 300, lambda: (lambda left: left == empty or None)(node_leftovers(lab, n)))
    # The kubelet removes an unregistered driver's slices after a grace period.
    wait_until("no ResourceSlice of rdma-ns.io", 300, lambda: not slices(lab))
    kept = existing(lab, manifest)
    if kept:
        raise Fail(f"objects of the chart left after helm uninstall: {kept}")
    if release_status(lab) is not None:
        raise Fail(f"helm still has the release: {release_status(lab)}")
    # What helm uninstall leaves by design (the chart's README): the CNI binary on each node.
    for n in (1, 2):
        lab.node(n, "test", "-x", "/opt/cni/bin/rdma-ns")
    print(f"      {len(objects)} objects removed; /opt/cni/bin/rdma-ns kept on both nodes")
    # The release again, as it was, for the cases after this one.
    lab.helm("install", RELEASE, CHART, "-n", NAMESPACE, "-f", saved, *HELM_WAIT, timeout=960)
    wait_published(lab)

#!/usr/bin/env python3
"""The edits a user makes to a manifest before applying it, done the same way every time for
the lab (install/lab/recipe.sh). Each reads YAML documents from FILE and prints them to stdout.

    manifests.py image FILE REF [OLD=NEW...]
        every container and init container: image REF, or with OLD=NEW pairs only images whose
        name (without tag) is OLD become NEW
    manifests.py nad FILE KEY=JSON...
        the rdma-ns plugin of each NetworkAttachmentDefinition's config: KEY set to the JSON
        value (`master="rail0"`, `softRoce=true`); `capabilities.X=true` sets one capability
    manifests.py chart-nads VALUES NAME=MASTER...
        values for install/helm/rdma-ns (VALUES: its values.yaml) that turn its NADs on, only
        the NAMEs, each rdma-ns plugin of theirs with that master and softRoce
    manifests.py pod FILE NAME NODE IMAGE [NETWORKS]
        a pod shaped like FILE (conf/pod.yaml), for the lab: named NAME, on node NODE, its
        containers on IMAGE running `sleep`, privileged (a Soft-RoCE device is made at the pod's
        CNI ADD, after any device plugin's allocation, so only a privileged container sees its
        uverbs node: docs/soft-roce.md, "What the pod's containers need"), without the device plugin's
        resources (it has no Soft-RoCE device to give) but with its DRA claims, and on NETWORKS
        when given (empty: the default network only). A pod with claims gets a nodeSelector for
        NODE instead of nodeName, so that the scheduler allocates its claims
"""
import json
import sys

import yaml


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def containers(doc):
    spec = doc.get("spec", {})
    if doc.get("kind") in ("DaemonSet", "Deployment", "StatefulSet", "Job"):
        spec = spec["template"]["spec"]
    return spec.get("initContainers", []) + spec.get("containers", [])


def image(path, ref, *pairs):
    swaps = dict(p.split("=", 1) for p in pairs)
    docs = load(path)
    for doc in docs:
        for c in containers(doc):
            name = c["image"].rsplit("@", 1)[0]
            base = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
            if not swaps:
                c["image"] = ref
            elif base in swaps:
                c["image"] = swaps[base]
    return docs


def nad(path, *settings):
    docs = load(path)
    for doc in docs:
        if doc.get("kind") != "NetworkAttachmentDefinition":
            continue
        conf = json.loads(doc["spec"]["config"])
        plugins = [p for p in conf.get("plugins", [conf]) if p.get("type") == "rdma-ns"]
        if not plugins:
            sys.exit(f"manifests.py: {path}: no rdma-ns plugin in {doc['metadata']['name']}")
        for setting in settings:
            key, _, value = setting.partition("=")
            for p in plugins:
                target = p
                *parents, leaf = key.split(".")
                for parent in parents:
                    target = target.setdefault(parent, {})
                target[leaf] = json.loads(value)
        doc["spec"]["config"] = json.dumps(conf, indent=2) + "\n"
    return docs


def chart_nads(path, *pairs):
    masters = dict(p.split("=", 1) for p in pairs)
    networks = load(path)[0]["nads"]["networks"]
    unknown = set(masters) - set(networks)
    if unknown:
        sys.exit(f"manifests.py: {path} has no network {', '.join(sorted(unknown))}")
    # --reuse-values merges maps but replaces lists: each chosen network's plugins go whole.
    out = {}
    for name, net in networks.items():
        out[name] = {"enabled": name in masters}
        if name in masters:
            plugins = net["config"]["plugins"]
            for p in plugins:
                if p.get("type") == "rdma-ns":
                    p.update(master=masters[name], softRoce=True)
            out[name]["config"] = {"plugins": plugins}
    return [{"nads": {"enabled": True, "networks": out}}]


def pod(path, name, node, ref, networks=None):
    docs = load(path)
    pods = [d for d in docs if d.get("kind") == "Pod"]
    if len(pods) != 1:
        sys.exit(f"manifests.py: {path} holds {len(pods)} pods, not one")
    p = pods[0]
    p["metadata"]["name"] = name
    if networks:
        p["metadata"].setdefault("annotations", {})["k8s.v1.cni.cncf.io/networks"] = networks
    elif networks == "":  # the default network only
        p["metadata"].get("annotations", {}).pop("k8s.v1.cni.cncf.io/networks", None)
    spec = p["spec"]
    if spec.get("resourceClaims"):
        # A pod with nodeName bypasses the scheduler, and only the scheduler allocates claims:
        # the kubelet would wait for an allocation forever.
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    else:
        spec["nodeName"] = node
    spec.pop("initContainers", None)
    spec.pop("volumes", None)
    spec["terminationGracePeriodSeconds"] = 1
    for c in spec["containers"]:
        c["image"] = ref
        c["imagePullPolicy"] = "IfNotPresent"
        c["command"] = ["sleep", "1000000000"]
        c.pop("volumeMounts", None)
        c.setdefault("securityContext", {})["privileged"] = True
        for kind in ("limits", "requests"):
            res = c.get("resources", {}).get(kind, {})
            for key in [k for k in res if k.startswith("rdma/")]:
                del res[key]
        claims = c.get("resources", {}).get("claims")
        c.pop("resources", None)
        if claims:
            c["resources"] = {"claims": claims}
    return [p]


def literal_blocks(dumper, value):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def main(argv):
    if len(argv) < 2 or argv[0] not in ("image", "nad", "chart-nads", "pod"):
        sys.exit(__doc__)
    docs = globals()[argv[0].replace("-", "_")](*argv[1:])
    yaml.SafeDumper.add_representer(str, literal_blocks)
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main(sys.argv[1:])

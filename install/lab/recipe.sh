#!/usr/bin/env bash
# README's "Install with Helm" and docs/install.md's "Install on a cluster", carried out on the lab
# as a user would, plus what they assume a cluster already has (Multus, whereabouts for conf/'s
# IPAM, the device plugin, NFD). install/lab.sh up runs it with LAB_KUBECTL and LAB_HELM set to
# its own `kubectl` and `helm` verbs; each step says which docs/install.md step or which
# project's own instructions it follows. Images are the lab's local builds
# (install/lab/images.sh): setting the images is the one edit the chart asks for. rdma-ns's own
# parts come from its chart (install/helm/rdma-ns), one release that each step adds its part to.
set -euo pipefail
. "$(dirname "$0")/common.sh"

read -r -a KUBECTL <<<"${LAB_KUBECTL:?set by install/lab.sh}"
read -r -a HELM <<<"${LAB_HELM:?set by install/lab.sh}"
CHART=$LAB_REPO/install/helm/rdma-ns
MANIFESTS=(python3 "$LAB_DIR/manifests.py")
ref() { awk -v n="$1" '$1 == n { print $2 }' "$LAB_CACHE/images/refs"; }
k() { "${KUBECTL[@]}" "$@"; }
apply() { k apply -f - >&2; }
rollout() { k -n "$1" rollout status "$2" --timeout "${3:-1200s}" >&2; }
# The release with ARGS over the values it has so far.
release() { "${HELM[@]}" upgrade --install rdma-ns "$CHART" -n kube-system --reuse-values "$@" >&2; }

# docs/install.md step 1: the chart's installer DaemonSet, with its image set; rdma-ns lands in each
# node's /opt/cni/bin. Its `reconcile` container runs too. The driver is the DRA cases' to
# install (tests/kube/cases_dra.py), so the release starts without it.
installer() {
    local r
    r=$(ref installer)
    say "recipe 1: install/helm/rdma-ns, the installer with image $r"
    release --set installer.image.repository="${r%:*}" --set-string installer.image.tag="${r##*:}" \
        --set driver.enabled=false --set deviceClasses.enabled=false
}

# Multus, thin plugin: deployments/multus-daemonset.yml of its module, image set.
multus() {
    say "multus $(lab_version multus) (thin): its deployments/multus-daemonset.yml"
    "${MANIFESTS[@]}" image "$(lab_bin_dir multus)/multus-daemonset.yml" "$(ref multus)" | apply
}

# whereabouts, conf/'s IPAM: its CRDs and doc/crds/daemonset-install.yaml, image set.
whereabouts() {
    local d
    d=$(lab_bin_dir whereabouts)/crds
    say "whereabouts $(lab_version whereabouts): its CRDs and daemonset-install.yaml"
    k apply -f "$d/whereabouts.cni.cncf.io_ippools.yaml" \
        -f "$d/whereabouts.cni.cncf.io_overlappingrangeipreservations.yaml" \
        -f "$d/whereabouts.cni.cncf.io_nodeslicepools.yaml" >&2
    "${MANIFESTS[@]}" image "$d/daemonset-install.yaml" "$(ref whereabouts)" | apply
}

# docs/install.md step 3's device plugin: the chart's ConfigMap (conf/device-plugins'), then the plugin
# as its README deploys it (deployment/k8s/base: its DaemonSet; its example ConfigMap of the
# same name is what the chart's replaces, so it is not applied).
device_plugin() {
    say "the RDMA shared device plugin $(lab_version rdma-shared-dp): the chart's ConfigMap, its DaemonSet"
    release --set devicePluginConfig.enabled=true
    "${MANIFESTS[@]}" image "$(lab_bin_dir rdma-shared-dp)/deployment/k8s/base/daemonset.yaml" "$(ref rdma-shared-dp)" | apply
}

# NFD: its deployment/overlays/default (kubectl apply -k), image set by a kustomization, and
# its probes given TCG's time: with their 1 s timeout a busy lab node missed the health checks,
# kubelet killed nfd-worker again and again, and its rollout flapped for over 15 minutes.
SLOW_PROBES='[{"op": "add", "path": "/spec/template/spec/containers/0/livenessProbe/timeoutSeconds", "value": 30}, {"op": "add", "path": "/spec/template/spec/containers/0/livenessProbe/failureThreshold", "value": 10}, {"op": "add", "path": "/spec/template/spec/containers/0/readinessProbe/timeoutSeconds", "value": 30}]'
# and its worker told to read only the local source (features.d, where rdma-ns's node agent
# writes): its default, every source rescanned each minute (CPU, kernel, PCI, USB, storage...),
# is a steady load on a TCG node, and the lab needs none of those labels.
LOCAL_SOURCES_ONLY='[{"op": "replace", "path": "/data/nfd-worker.conf", "value": "core:\n  featureSources: [local]\n  labelSources: [local]\n"}]'
nfd() {
    local d work=$LAB_STATE/nfd-kustomize
    d=$(lab_bin_dir nfd)/deployment
    say "node feature discovery $(lab_version nfd): its deployment/overlays/default"
    rm -rf "$work" && mkdir -p "$work" && cp -r "$d" "$work/deployment"
    cat >"$work/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- deployment/overlays/default
images:
- name: registry.k8s.io/nfd/node-feature-discovery
  newName: $(ref nfd | cut -d: -f1)
  newTag: $(ref nfd | cut -d: -f2)
patches:
$(for target in DaemonSet:nfd-worker Deployment:nfd-master Deployment:nfd-gc; do
    printf -- "- target: {kind: %s, name: %s}\\n  patch: '%s'\\n" "${target%%:*}" "${target#*:}" "$SLOW_PROBES"
done)
- target: {kind: ConfigMap, name: nfd-worker-conf}
  patch: '$LOCAL_SOURCES_ONLY'
EOF
    k apply -k "$work" >&2
}

# rdma-ns's node agent (exporter, doctor --nfd), same image as the installer.
node_agent() {
    say "install/node-agent.yaml"
    "${MANIFESTS[@]}" image "$LAB_REPO/install/node-agent.yaml" "$(ref installer)" | apply
}

# docs/install.md step 3: the chart's NADs (conf/'s) roce-shared, roce-lossless, rail0 and rail1 with the
# lab's masters and softRoce (the rails have no RDMA device of their own: every pod gets its own
# Soft-RoCE device); the others off. After Multus, whose CRD they need.
networks() {
    say "recipe 3: install/helm/rdma-ns's NADs roce-shared, roce-lossless, rail0, rail1: masters rail0/rail1, softRoce"
    "${MANIFESTS[@]}" chart-nads "$CHART/values.yaml" roce-shared=rail0 roce-lossless=rail0 rail0=rail0 rail1=rail1 \
        >"$LAB_STATE/recipe-nads.yaml"
    release -f "$LAB_STATE/recipe-nads.yaml"
}

# docs/install.md step 4: two pods shaped like conf/pod.yaml, one on each node.
pods() {
    say "recipe 4: two pods shaped like conf/pod.yaml, rdma-a on node1 and rdma-b on node2"
    "${MANIFESTS[@]}" pod "$LAB_REPO/conf/pod.yaml" rdma-a node1 "$(ref lab-tools)" | apply
    "${MANIFESTS[@]}" pod "$LAB_REPO/conf/pod.yaml" rdma-b node2 "$(ref lab-tools)" | apply
    k wait --for=condition=Ready pod/rdma-a pod/rdma-b --timeout 1200s >&2
}

# One workload at a time, each waited for before the next: with all of them started at once a
# 1-vCPU TCG node ran at load 15, containerd's 10 s deadline for handling a container's exit
# expired again and again, and the init containers that had long finished stayed "running" for
# over 15 minutes (kubelet never saw them end), so the rollouts timed out.
installer
rollout kube-system ds/rdma-ns-installer
multus
rollout kube-system ds/kube-multus-ds
whereabouts
rollout kube-system ds/whereabouts
device_plugin
rollout kube-system ds/rdma-shared-dp-ds
# NFD and the node agent are the lab's own additions, not docs/install.md's: only the cases that
# read node labels or the exporter need them (tests/kube/run.sh sets RDMA_NS_LAB_NODE_FEATURES=0
# otherwise), and on a 1-vCPU TCG node they cost minutes of rollout and a steady load after.
if [[ ${RDMA_NS_LAB_NODE_FEATURES:-1} != 0 ]]; then
    nfd
    rollout node-feature-discovery ds/nfd-worker
    rollout node-feature-discovery deploy/nfd-master
    node_agent
    rollout kube-system ds/rdma-ns-node
fi
networks
[[ ${RDMA_NS_LAB_PODS:-1} == 0 ]] || pods

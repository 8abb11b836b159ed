#!/usr/bin/env bash
# The Kubernetes tier: rdma-ns under a real Kubernetes. It brings the lab up the way users do
# (install/lab.sh up: components built from the Go module proxy at pinned versions, two Linux 7
# node VMs under TCG, the install recipe of docs/install.md), runs the cases of tests/kube/cases.py
# against it, and takes it down again. See docs/testing.md, "Kubernetes tier".
#
#   tests/kube/run.sh [CASE...]         every case, or these (names as cases.py --list prints)
#   tests/kube/run.sh --list            the cases
#   tests/kube/run.sh --keep            leave the lab up afterwards (for debugging)
#   tests/kube/run.sh --build [CASE...] only build what the lab for these cases needs
#                                       (install/lab.sh build), boot nothing: tests/run.sh does
#                                       this in the background while the VM tier runs
#   tests/kube/run.sh --print-packages  the Debian packages this tier needs
#
# Prints one line per case ("PASS <case> (N s)" or "FAIL <case>: why"), the times of the lab's
# steps, and as the last line "N passed, N failed". A lab that cannot be built or booted is one
# failure naming why (never a skip). The lab's logs stay in $LOGS (printed) on failure.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
LAB=$repo/install/lab.sh
VNG_PIP=virtme-ng==1.42
keep=0
build_only=0
cases=()
for arg in "$@"; do
    case $arg in
    --print-packages) exec bash "$LAB" --print-packages ;;
    --list) exec python3 "$here/cases.py" --list ;;
    --keep) keep=1 ;;
    --build) build_only=1 ;;
    -*) echo "usage: tests/kube/run.sh [--keep|--build] [--list] [--print-packages] [CASE...]" >&2; exit 2 ;;
    *) cases+=("$arg") ;;
    esac
done

say() { echo "kube: $*" >&2; }
fail_tier() {
    echo "FAIL lab: $*"
    echo "0 passed, 1 failed"
    exit 1
}

[[ $(id -u) == 0 ]] || fail_tier "the kube tier needs root"
# Whether case $1 runs: every case runs when none is named.
chosen() { ((${#cases[@]} == 0)) || printf '%s\n' "${cases[@]}" | grep -qx "$1"; }
# installer-updated rolls the installer DaemonSet to a second image, which install/lab/images.sh
# builds (one more static build) only when asked.
chosen installer-updated && export RDMA_NS_LAB_NEXT_INSTALLER=1
# up's own pods rdma-a and rdma-b are the recipe case's to check and delete; without that case
# they would be left behind after every other case.
chosen recipe || export RDMA_NS_LAB_PODS=0
# NFD and the node agent (install/lab/recipe.sh) only for the cases that read what they make.
chosen node-labels || chosen exporter-metrics || export RDMA_NS_LAB_NODE_FEATURES=0
# Building boots nothing, so it needs no virtme-ng (and installs none: the VM tier, which runs
# beside it, may be installing it).
((build_only)) && exec bash "$LAB" build

# virtme-ng, as the VM tier installs it (pip; Debian's python refuses without the flag, PEP 668).
if ! command -v vng >/dev/null; then
    say "installing $VNG_PIP"
    python3 -m pip install -q "$VNG_PIP" 2>/dev/null || python3 -m pip install -q --break-system-packages "$VNG_PIP" ||
        fail_tier "pip install $VNG_PIP failed"
    hash -r
fi
if bash "$LAB" status | grep -q '^lab: up'; then
    fail_tier "a lab is up already ($(bash "$LAB" status | head -1)): install/lab.sh down first"
fi

LOGS=$(mktemp -d /tmp/rdma-ns-kube.XXXXXX)
start=$(date +%s)
say "install/lab.sh up (log: $LOGS/up.log)"
if ! kubeconfig=$(bash "$LAB" up 2> >(tee "$LOGS/up.log" >&2) | tail -n1); then
    cp -r /var/lib/rdma-ns-lab/nodes "$LOGS/" 2>/dev/null
    cp -r /var/lib/rdma-ns-lab/cp "$LOGS/" 2>/dev/null
    bash "$LAB" down >/dev/null 2>&1
    fail_tier "install/lab.sh up failed after $(($(date +%s) - start)) s: $(grep -E '^lab: ' "$LOGS/up.log" | tail -n1) (logs: $LOGS)"
fi
say "lab up in $(($(date +%s) - start)) s; kubeconfig $kubeconfig"
grep -E 'done in|built in|\(cached\)' "$LOGS/up.log" | sed 's/^/kube: /' >&2

python3 "$here/cases.py" --lab "$LAB" --logs "$LOGS" "${cases[@]}"
rc=$?

if ((keep)); then
    say "--keep: the lab stays up (install/lab.sh down to remove it)"
else
    if ((rc != 0)); then
        cp -r /var/lib/rdma-ns-lab/nodes "$LOGS/" 2>/dev/null
        cp -r /var/lib/rdma-ns-lab/cp "$LOGS/" 2>/dev/null
        say "logs of the failed run: $LOGS"
    fi
    bash "$LAB" down >&2 || say "install/lab.sh down failed"
fi
exit $rc

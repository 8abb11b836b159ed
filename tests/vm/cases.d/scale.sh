#!/bin/bash
# VM case "scale": the host netns holds many links (a big node); the rxe setup must keep
# working among them, and everything made here must go away again.
# Runs inside the VM with the environment tests/vm/guest.sh gives every case
# (RDMA_NS_IN_VM=1, RDMA_NS_BIN, RDMA_NS_VM_NETNS, RDMA_NS_VM_SCRATCH; rxe0 over rxev0).
set -euo pipefail

N=${SCALE_LINKS:-2000}
PREFIX=vmscale
GROUP=7113      # device group of the links made here: one request deletes them all
[[ ${RDMA_NS_IN_VM:-} == 1 ]] || { echo "VM-only case: run tests/vm/run.sh scale"; exit 1; }
work=${RDMA_NS_VM_SCRATCH:?}

fail() { echo "FAIL: $*"; exit 1; }
names() { ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }'; }

seq 0 $((N - 1)) | sed "s/^/$PREFIX/" | sort >"$work/want"

# One rtnetlink session for all of them: `ip -batch`.
sed "s/.*/link add & group $GROUP type dummy/" "$work/want" >"$work/add.batch"
ip -batch "$work/add.batch"
echo "added $N dummy links"

names | grep "^$PREFIX" | sort >"$work/have"
diff -q "$work/want" "$work/have" >/dev/null ||
    fail "links after adding differ from the $N expected: $(diff "$work/want" "$work/have" | head -n 5 | tr '\n' ' ')"
[[ $(ip -o link show type dummy | wc -l) -eq $N ]] || fail "expected $N dummy links"
grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state || fail "rxe0 port not ACTIVE among $N links"
[[ $(cat /sys/class/infiniband/rxe0/parent) == rxev0 ]] || fail "rxe0 no longer over rxev0"
echo "all $N links present; rxe0 still ACTIVE over rxev0"

# ==== PLUGIN ADD/DEL AMONG MANY LINKS: extend here =======================================
# When the plugin's ADD/DEL exist, run them here against "$RDMA_NS_BIN" with
# CNI_NETNS="$RDMA_NS_VM_NETNS" while the $N dummy links exist: ADD must find rxev0/rxe0
# among them, DEL must undo it. Leave nothing behind (the runner checks after the case).
# ==========================================================================================

# One request for all: the kernel unregisters the whole group at once. (2000 single deletes
# cost minutes under TCG, each waiting for RCU.)
ip link del group "$GROUP"
left=$(names | grep -c "^$PREFIX" || true)
[[ $left -eq 0 ]] || fail "$left $PREFIX links left after deleting them"
echo "deleted all $N dummy links"

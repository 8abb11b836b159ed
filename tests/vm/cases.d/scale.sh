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

# ==== PLUGIN ADD/DEL AMONG MANY LINKS =====================================================
# With the $N dummy links present: move mode selects one of them by name and another by hwaddr
# (the selector that dumps every link), macvlan mode creates a child of rxev0 and finds its GID
# on rxe0. ADD and DEL must both be right; nothing may be left behind.
state=$work/state
echo "$state" >>"${RDMA_NS_VM_STATE_DIRS:?}"
cni() { # cni COMMAND CONTAINER IFNAME CONF -> stdout of the plugin, exit status kept
    CNI_COMMAND=$1 CNI_CONTAINERID=$2 CNI_NETNS=$RDMA_NS_VM_NETNS CNI_IFNAME=$3 CNI_ARGS='' \
        CNI_PATH=/usr/lib/cni "$RDMA_NS_BIN" <<<"$4"
}
move_conf() { # move_conf SELECTOR-FIELD VALUE ADDRESS
    printf '{"cniVersion":"1.0.0","name":"scale","type":"rdma-ns","%s":"%s","dataDir":"%s","ipam":{"type":"static","addresses":[{"address":"%s"}]}}' \
        "$1" "$2" "$state" "$3"
}
by_name=${PREFIX}17
by_mac=${PREFIX}1999
mac=$(cat "/sys/class/net/$by_mac/address")
# What "back in the host" means after DEL: the same name, MAC, ifindex, MTU, flags, addresses.
view() { ip -d -o link show dev "$1" | sed 's/^[0-9]*: //'; cat "/sys/class/net/$1/ifindex"; ip -o addr show dev "$1" | awk '{ print $3, $4 }'; }
before_name=$(view "$by_name")
before_mac=$(view "$by_mac")
c1=$(move_conf device "$by_name" 10.30.0.2/24)
c2=$(move_conf hwaddr "$mac" 10.30.1.2/24)
cni ADD s1 net1 "$c1" >"$work/add1.json" || fail "ADD by name among $N links: $(cat "$work/add1.json")"
cni ADD s2 net2 "$c2" >"$work/add2.json" || fail "ADD by hwaddr among $N links: $(cat "$work/add2.json")"
# No `| grep -q` under pipefail: grep exiting at the first match can SIGPIPE ip and fail the pipe.
[[ $(ip -n vmpod -o addr show dev net1) == *" 10.30.0.2/24 "* ]] || fail "net1 lacks its address in the pod"
[[ $(cat "/sys/class/net/$by_mac/address" 2>/dev/null) == "" ]] || fail "$by_mac is still in the host"
[[ $(ip -n vmpod -o link show dev net2 | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2) == "$mac" ]] ||
    fail "the device selected by hwaddr is not the one in the pod"
c3=$(printf '{"cniVersion":"1.0.0","name":"scalemv","type":"rdma-ns","mode":"macvlan","master":"rxev0","dataDir":"%s","ipam":{"type":"static","addresses":[{"address":"10.30.2.2/24"}]}}' "$state")
cni ADD s3 net3 "$c3" >"$work/add3.json" || fail "macvlan ADD among $N links: $(cat "$work/add3.json")"
grep -q '"index"' "$state"/scalemv/s3:net3.json || fail "no GID index recorded for the macvlan pod IP"
# The presence twin of the "nothing left in the pod" check below, through the same count.
[[ $(ip -n vmpod -o link show | grep -vc ' lo:') -eq 3 ]] || fail "expected net1, net2, net3 in the pod"
for args in "s1 net1 $c1" "s2 net2 $c2" "s3 net3 $c3"; do
    read -r cid ifn conf <<<"$args"
    cni DEL "$cid" "$ifn" "$conf" >"$work/del.json" || fail "DEL $cid: $(cat "$work/del.json")"
done
[[ $(view "$by_name" 2>&1) == "$before_name" ]] || fail "$by_name is not back as before: was '$before_name', now '$(view "$by_name" 2>&1)'"
[[ $(view "$by_mac" 2>&1) == "$before_mac" ]] || fail "$by_mac is not back as before: was '$before_mac', now '$(view "$by_mac" 2>&1)'"
[[ $(ip -n vmpod -o link show | grep -vc ' lo:') -eq 0 ]] || fail "links left in the pod netns"
echo "ADD/DEL by name, by hwaddr and macvlan+GID correct among $N links"
# ==========================================================================================

# One request for all: the kernel unregisters the whole group at once. (2000 single deletes
# cost minutes under TCG, each waiting for RCU.)
ip link del group "$GROUP"
left=$(names | grep -c "^$PREFIX" || true)
[[ $left -eq 0 ]] || fail "$left $PREFIX links left after deleting them"
echo "deleted all $N dummy links"

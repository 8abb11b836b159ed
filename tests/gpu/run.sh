#!/bin/bash
# NCCL all-reduce between the two GPUs of one machine, each rank in its own pod netns attached
# by the rdma-ns binary, launched through `rdma-ns env --best-effort --exec`. Run by hand on the
# GPU machine (CI never runs it), as root, from a directory holding: rdma-ns (static musl build,
# install/build.sh), static (Debian's CNI static IPAM), ip and lib/ (Debian's iproute2 `ip` and
# its shared libraries: that machine has no iproute2), and allreduce.py. Writes results.jsonl and
# logs to $OUT (or ./out).
#
# Modes: move (one veth pair, an end moved into each pod as net1) and macvlan (two children of
# one veth end, bridge mode), each at MTU 1500 and 9000. That machine has no RDMA device: NCCL is
# forced onto sockets (P2P, SHM and IB off) and NVLink multicast stays off.
set -uo pipefail
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$D/out}
mkdir -p "$OUT"
ip() { LD_LIBRARY_PATH="$D/lib" "$D/ip" "$@"; }
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0 \
    TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCL_SOCKET_IFNAME==net1
SIZE_MIB=${SIZE_MIB:-256}
mkdir -p "$D/cni" /var/lib/cni
cp "$D/static" "$D/cni/static"

cni() { # cni CMD pod conf-json
    printf '%s' "$3" | env CNI_COMMAND="$1" CNI_CONTAINERID="gpu-$2" CNI_NETNS="/run/netns/$2" \
        CNI_IFNAME=net1 CNI_PATH="$D/cni" "$D/rdma-ns"
}
conf() { # mode device-key device mtu address
    printf '{"cniVersion":"1.0.0","name":"gpu-%s","type":"rdma-ns","mode":"%s","%s":"%s","mtu":%s,"dataDir":"/var/lib/cni/rdma-ns-gpu","ipam":{"type":"static","addresses":[{"address":"%s/24"}]}}' \
        "$1" "$1" "$2" "$3" "$4" "$5"
}

one() { # mode mtu
    local mode=$1 mtu=$2 tag="$1-$2" c1 c2
    ip netns add pod1 && ip netns add pod2 || return 1
    ip -n pod1 link set lo up; ip -n pod2 link set lo up
    if [[ $mode == move ]]; then
        ip link add gpv0 mtu "$mtu" type veth peer name gpv1 mtu "$mtu"
        c1=$(conf move device gpv0 "$mtu" 10.77.0.1); c2=$(conf move device gpv1 "$mtu" 10.77.0.2)
    else
        ip link add gpm0 mtu "$mtu" type veth peer name gpm1 mtu "$mtu"
        ip link set gpm0 up; ip link set gpm1 up
        c1=$(conf macvlan master gpm0 "$mtu" 10.77.0.1); c2=$(conf macvlan master gpm0 "$mtu" 10.77.0.2)
    fi
    cni ADD pod1 "$c1" >"$OUT/add-$tag-1.json" 2>&1 && cni ADD pod2 "$c2" >"$OUT/add-$tag-2.json" 2>&1 ||
        { echo "ADD failed: $(cat "$OUT"/add-"$tag"-*.json)"; }
    echo "== $tag: pod1 $(ip -n pod1 -br addr show net1) / pod2 $(ip -n pod2 -br addr show net1)"
    # What rdma-ns env says in a pod here (no RDMA device on this machine).
    ip netns exec pod1 "$D/rdma-ns" env --best-effort --format json >"$OUT/env-$tag.json" 2>"$OUT/env-$tag.err"
    echo "rdma-ns env --best-effort: exit $?, stdout $(tr -d ' \n' <"$OUT/env-$tag.json"), stderr: $(cat "$OUT/env-$tag.err")"
    for r in 0 1; do
        ip netns exec "pod$((r + 1))" "$D/rdma-ns" env --best-effort --exec -- \
            python3 "$D/allreduce.py" "$r" 10.77.0.1 "$SIZE_MIB" >"$OUT/rank$r-$tag.log" 2>&1 &
    done
    wait
    for r in 0 1; do
        grep -h '^{' "$OUT/rank$r-$tag.log" | sed "s/^{/{\"mode\":\"$mode\",\"mtu\":$mtu,/" >>"$OUT/results.jsonl" ||
            { echo "rank $r of $tag printed no result:"; tail -n 20 "$OUT/rank$r-$tag.log"; }
    done
    cni DEL pod1 "$c1" >/dev/null 2>&1; cni DEL pod2 "$c2" >/dev/null 2>&1
    ip netns del pod1; ip netns del pod2
    if [[ $mode == move ]]; then
        ip link show gpv0 >/dev/null 2>&1 && echo "$tag: gpv0 back in the host after DEL" || echo "$tag: gpv0 NOT back"
        ip link del gpv0 2>/dev/null
    else
        echo "$tag: macvlan children left on gpm0: $(ip -o link show | grep -c '@gpm0')"
        ip link del gpm0
    fi
}

: >"$OUT/results.jsonl"
for mode in move macvlan; do
    for mtu in 1500 9000; do one "$mode" "$mtu"; done
done
cat "$OUT/results.jsonl"

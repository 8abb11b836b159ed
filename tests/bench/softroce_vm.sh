#!/bin/bash
# Bench section `softroce`, run inside the Linux 7 VM as case softroce-bench of
# tests/bench/vm-cases (tests/bench/bench.py boots it through tests/vm/run.sh --manifest). perftest's
# ib_write_bw and ib_send_lat between two rxe devices over one veth pair, at each MTU:
#   host: both devices in the initial netns, made by hand (`rdma link add`) on the two ends, the
#         traffic between their addresses sent over the veth by policy routing (the local table
#         after a rule that routes each address's own traffic out of its end);
#   pod:  the two ends moved into two pods by the plugin (move mode, `softRoce`, shared netns
#         mode), each with the rxe device the plugin made, on what `rdma-ns env` names.
# Prints one line a measurement, "SRBENCH mtu=<M> kind=<host|pod> run=<n> bw_mbps=<average
# MB/s> lat_us=<typical>", for bench.py (softroce_bench.py) to read from the case log. TCG: the figures are an emulated
# machine's; only the ratio between the kinds, measured alternately in one VM, means something.
set -euo pipefail
[[ ${RDMA_NS_IN_VM:-} == 1 ]] || { echo "VM-only: tests/bench/run.sh --only softroce"; exit 1; }
RUNS=4
MTUS=(1500 9000)
BOUND=(timeout -s KILL 120)
PERFTEST_PORT=18515
bin=${RDMA_NS_BIN:?}
state=${RDMA_NS_VM_SCRATCH:?}/state
echo "$state" >>"${RDMA_NS_VM_STATE_DIRS:?}"

fail() { echo "FAIL: $*"; exit 1; }

# ---- host: two rxe devices in the initial netns over the ends of one veth -------------------
host_up() {
    local mtu=$1
    ip link add hba type veth peer name hbb
    ip link set hba mtu "$mtu" up
    ip link set hbb mtu "$mtu" up
    ip addr add 10.94.0.1/32 dev hba
    ip addr add 10.94.0.2/32 dev hbb
    # Both addresses are local: a packet between them arrives on the other end only if the
    # kernel accepts a local source there and the sender's route is not the local table's.
    for k in net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.hba.rp_filter=0 \
        net.ipv4.conf.hbb.rp_filter=0 net.ipv4.conf.hba.accept_local=1 \
        net.ipv4.conf.hbb.accept_local=1; do
        sysctl -qw "$k"
    done
    ip route add 10.94.0.2 dev hba table 94
    ip route add 10.94.0.1 dev hbb table 94
    ip rule add pref 10 from 10.94.0.1 iif lo lookup 94
    ip rule add pref 11 from 10.94.0.2 iif lo lookup 94
    ip rule add pref 100 lookup local
    ip rule del pref 0
    rdma link add rxh1 type rxe netdev hba
    rdma link add rxh2 type rxe netdev hbb
}

host_down() {
    rdma link delete rxh1 2>/dev/null || true
    rdma link delete rxh2 2>/dev/null || true
    ip rule add pref 0 lookup local 2>/dev/null || true
    ip rule del pref 100 2>/dev/null || true
    ip rule del pref 10 2>/dev/null || true
    ip rule del pref 11 2>/dev/null || true
    ip route flush table 94 2>/dev/null || true
    ip link del hba 2>/dev/null || true
}

# ---- pod: two pods from the plugin, their veth ends moved in ---------------------------------
conf() { # pod-ip device mtu
    printf '{"cniVersion":"1.0.0","name":"srbench","type":"rdma-ns","mode":"move","device":"%s","mtu":%s,"softRoce":true,"dataDir":"%s","ipam":{"type":"static","addresses":[{"address":"%s/24"}]}}' \
        "$2" "$3" "$state" "$1"
}

cni() { # command pod device ip mtu
    CNI_COMMAND=$1 CNI_CONTAINERID=$2 CNI_NETNS=/run/netns/$2 CNI_IFNAME=net1 CNI_ARGS= \
        CNI_PATH=/usr/lib/cni "$bin" <<<"$(conf "$4" "$3" "$5")"
}

# The MTU of the pods up now, empty when none are: the loop below tears one MTU's pods down
# before it makes the next's, so cleanup has at most these to DEL, with the conf of their ADD.
pods_mtu=""

pods_up() {
    local mtu=$1
    pods_mtu=$mtu
    ip netns add bpa
    ip netns add bpb
    ip link add pva type veth peer name pvb
    ip link set pvb up
    cni ADD bpa pva 10.95.0.1 "$mtu" >/dev/null || fail "ADD bpa"
    cni ADD bpb pvb 10.95.0.2 "$mtu" >/dev/null || fail "ADD bpb"
}

pods_down() {
    local mtu=$1
    cni DEL bpa pva 10.95.0.1 "$mtu" >/dev/null 2>&1 || true
    cni DEL bpb pvb 10.95.0.2 "$mtu" >/dev/null 2>&1 || true
    ip netns del bpa 2>/dev/null || true
    ip netns del bpb 2>/dev/null || true
    ip link del pva 2>/dev/null || true
    pods_mtu=""
}

cleanup() {
    [[ -z $pods_mtu ]] || pods_down "$pods_mtu"
    host_down
}
trap cleanup EXIT

# "<device> <gid index>" as `rdma-ns env` names them in pod $1.
env_pick() {
    local vars dev gid
    vars=$(ip netns exec "$1" "$bin" env --format env-file) || fail "env in $1"
    dev=$(sed -n 's/^UCX_NET_DEVICES=\(.*\):1$/\1/p' <<<"$vars")
    gid=$(sed -n 's/^UCX_IB_GID_INDEX=//p' <<<"$vars")
    [[ -n $dev && -n $gid ]] || fail "env in $1 named no device and index: $vars"
    echo "$dev $gid"
}

# The index of ::ffff:<ip> on <dev> port 1, from sysfs (the kernel adds GIDs from a workqueue).
sysfs_gid() { # dev ip
    local want n f
    want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${2//./ })
    for _ in $(seq 1 100); do
        for f in /sys/class/infiniband/"$1"/ports/1/gids/*; do
            n=${f##*/}
            [[ $(cat "$f" 2>/dev/null) == "$want" ]] && { echo "$n"; return 0; }
        done
        sleep 0.1
    done
    fail "no GID for $2 on $1"
}

in_ns() { # netns-or-empty cmd...
    local ns=$1
    shift
    if [[ -n $ns ]]; then ip netns exec "$ns" "$@"; else "$@"; fi
}

listening() { # netns or "" for the host
    local i
    for i in $(seq 1 300); do
        in_ns "$1" ss -Htln "sport = :$PERFTEST_PORT" | grep -q . && return 0
        sleep 0.1
    done
    fail "perftest server never listened"
}

# One perftest tool between (server ns, dev, gid) and (client ns, dev, gid, server ip); the
# client's result row.
perftest() { # tool sns sdev sgid cns cdev cgid sip args...
    local tool=$1 sns=$2 sdev=$3 sgid=$4 cns=$5 cdev=$6 cgid=$7 sip=$8 out
    shift 8
    in_ns "$sns" "${BOUND[@]}" "$tool" -d "$sdev" -x "$sgid" -F "$@" >/dev/null 2>&1 &
    local server=$!
    listening "$sns"
    out=$(in_ns "$cns" "${BOUND[@]}" "$tool" -d "$cdev" -x "$cgid" -F "$@" "$sip" 2>&1) ||
        fail "$tool client: $out"
    wait "$server" || fail "$tool server failed"
    awk '$1 ~ /^[0-9]+$/ && NF >= 5 { row = $0 } END { print row }' <<<"$out"
}

tx_bytes() { # netns-or-empty ifname
    in_ns "$1" cat "/sys/class/net/$2/statistics/tx_bytes"
}

# 1000 WRITEs of 64 KiB (ib_write_bw) and 2000 2-byte SEND round trips (ib_send_lat); the
# client's end of the veth must have carried at least the written bytes, or the traffic took
# another way (the host's loopback).
measure() { # mtu kind run sns sdev sgid cns cdev cgid sip cifname
    local mtu=$1 kind=$2 run=$3 cns=$7 cif=${11} bw lat before after
    shift 3
    set -- "${@:1:7}"
    before=$(tx_bytes "$cns" "$cif")
    bw=$(perftest ib_write_bw "$@" -n 1000 -s 65536 | awk '{ print $4 }')
    after=$(tx_bytes "$cns" "$cif")
    ((after - before >= 1000 * 65536)) || fail "$kind: $cif sent $((after - before)) bytes"
    lat=$(perftest ib_send_lat "$@" -n 2000 -s 2 | awk '{ print $5 }')
    [[ -n $bw && -n $lat ]] || fail "no result for $kind at MTU $mtu"
    echo "SRBENCH mtu=$mtu kind=$kind run=$run bw_mbps=$bw lat_us=$lat"
}

for mtu in "${MTUS[@]}"; do
    host_up "$mtu"
    pods_up "$mtu"
    read -r pdev_a pgid_a < <(env_pick bpa)
    read -r pdev_b pgid_b < <(env_pick bpb)
    hgid_1=$(sysfs_gid rxh1 10.94.0.1)
    hgid_2=$(sysfs_gid rxh2 10.94.0.2)
    echo "MTU $mtu: host rxh2 (GID $hgid_2) <- rxh1 (GID $hgid_1); pod $pdev_b (GID $pgid_b) <- $pdev_a (GID $pgid_a)"
    ibv_devinfo -d rxh1 | grep -E 'active_mtu'
    ip netns exec bpa ibv_devinfo -d "$pdev_a" | grep -E 'active_mtu'
    for run in $(seq 1 "$RUNS"); do
        # Alternate which kind goes first, so a drift in the machine's load hits both alike.
        if ((run % 2)); then order=(host pod); else order=(pod host); fi
        for kind in "${order[@]}"; do
            if [[ $kind == host ]]; then
                measure "$mtu" host "$run" "" rxh2 "$hgid_2" "" rxh1 "$hgid_1" 10.94.0.2 hba
            else
                measure "$mtu" pod "$run" bpb "$pdev_b" "$pgid_b" bpa "$pdev_a" "$pgid_a" 10.95.0.2 net1
            fi
        done
    done
    pods_down "$mtu"
    host_down
done
echo "SRBENCH done"

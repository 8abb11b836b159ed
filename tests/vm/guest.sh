#!/bin/bash
# Runs inside the VM, as root, started by tests/vm/run.sh:
#     guest.sh <results-dir> <rdma-ns> <kernel release> <kernel name>
# (the release run.sh meant to boot: the guest refuses to run cases on another one; the name,
# 6.1 or 7, as tests/vm/cases names kernels, goes to each case as RDMA_NS_VM_KERNEL_NAME)
#
# <results-dir> is the host directory shared read-write (vng --rwdir); it holds the plan
# written by run.sh, one case a line:
#     <name> test <test-binary> <expected test count> [libtest args...]
#     <name> script <script-path>
# For each case this script builds a fresh rxe setup, runs the case, checks that it leaked
# nothing, and tears everything down again. Results go to <results-dir>/results, one line a
# case ("VMCASE <name> PASS|FAIL [note]"), then "VMDONE"; case output to cases/<name>.log.
# Nothing here measures time: under TCG emulation guest time means little.
set -uo pipefail

results=$1
bin=$2
release=$3
kernel_name=$4
plan=$results/plan
out=$results/results
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

MODULES=(rdma_rxe ib_umad rdma_ucm ib_uverbs veth macvlan dummy ipvlan)
STATE_DIR=/var/lib/cni/rdma-ns        # the plugin's default state dir, checked after each case
POD_NETNS=vmpod                       # the fresh netns each case gets
RXE_LINKS=(rxev0 rxev1)               # the netdevs of the rxe setup

emit() {
    echo "$*" >>"$out"
    echo "$*"
}
fatal() {
    emit "VMERROR $*"
    exit 1
}

# ---- the environment every case relies on ------------------------------------------------
basics() {
    local m t
    # No udev while cases run: device nodes come from devtmpfs alone, no udev link policy
    # (MACAddressPolicy=persistent rewriting virtual links' MACs, renames) races with a test,
    # and thousands of link events cost no emulated CPU. vng's init has settled coldplug.
    if command -v udevadm >/dev/null && [[ -e /run/udev/control ]]; then
        udevadm control --exit || fatal "could not stop udevd"
    fi
    modprobe -a "${MODULES[@]}" || fatal "modprobe ${MODULES[*]} failed"
    for m in ib_core "${MODULES[@]}"; do
        grep -q "^$m " /proc/modules || fatal "module $m is not in /proc/modules"
    done
    for t in ip rdma; do
        command -v "$t" >/dev/null || fatal "$t not found"
    done
    [[ -r /sys/module/ib_core/parameters/netns_mode ]] || fatal "ib_core netns_mode not readable"
    [[ -c /dev/infiniband/rdma_cm ]] || fatal "/dev/infiniband/rdma_cm missing"
    [[ -x $bin ]] || fatal "rdma-ns binary $bin is not visible in the VM"
    [[ -w $results ]] || fatal "results dir $results is not writable"
    # libibverbs must see the rxe device through its provider (ibverbs-providers); without it
    # every verbs tool reports no device, and that must not first show up inside a case.
    setup >/tmp/vm-probe.log 2>&1 || fatal "rxe setup failed: $(tr '\n' ' ' </tmp/vm-probe.log)"
    command -v ibv_devices >/dev/null || fatal "ibv_devices not found (install ibverbs-utils on the host)"
    ibv_devices 2>&1 | awk '$1 == "rxe0" { found = 1 } END { exit !found }' ||
        fatal "ibv_devices does not list rxe0 (install ibverbs-providers on the host: the rxe provider and /etc/libibverbs.d): $(ibv_devices 2>&1 | tr '\n' ' ')"
    teardown
    echo "VMGUEST basics ok: kernel $(uname -r), netns_mode $(cat /sys/module/ib_core/parameters/netns_mode)"
}

# ---- state between cases ----------------------------------------------------------------
netns_names() { ip netns list | awk '{ print $1 }'; }
# link names, without the @peer suffix; optional: "-n NETNS"
link_names() { ip "$@" -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }'; }

# Removes everything a case may have made: every netns, every ib device made by
# `rdma link add`, every link but lo; restores shared netns mode and empties the state dirs.
teardown() {
    local ns d batch=/tmp/vm-teardown.batch
    for ns in $(netns_names); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
        ip netns del "$ns"
    done
    for d in /sys/class/infiniband/*; do
        [[ -e $d ]] && rdma link delete "${d##*/}"
    done
    link_names | awk '$1 != "lo" { print "link del dev " $1 }' >"$batch"
    # -force: go on past errors (a veth's peer is gone with it)
    [[ -s $batch ]] && ip -force -batch "$batch" >/dev/null 2>&1
    # Netns are freed asynchronously; until they are, the mode change answers EBUSY.
    for _ in $(seq 1 100); do
        [[ $(cat /sys/module/ib_core/parameters/netns_mode) == Y ]] && break
        rdma system set netns shared 2>/dev/null || sleep 0.1
    done
    rm -rf "${STATE_DIR:?}"
    return 0
}

# The fresh setup each case starts with: veth rxev0/rxev1 up, rxe0 over rxev0 with its port
# ACTIVE, no netns but a fresh empty $POD_NETNS, shared netns mode, empty state dir.
setup() {
    ip link add rxev0 type veth peer name rxev1 || return 1
    ip link set rxev0 up || return 1
    ip link set rxev1 up || return 1
    rdma link add rxe0 type rxe netdev rxev0 || return 1
    # the port follows the veth's carrier; poll a bounded number of times
    for _ in $(seq 1 200); do
        grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null && break
        sleep 0.05
    done
    grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state || {
        echo "rxe0 port not ACTIVE: $(cat /sys/class/infiniband/rxe0/ports/1/state)"
        return 1
    }
    compgen -G '/dev/infiniband/uverbs*' >/dev/null || { echo "no uverbs device"; return 1; }
    ip netns add "$POD_NETNS" || return 1
    return 0
}

# Prints one line for each thing the case left behind.
leaks() {
    local state_dirs_file=$1 ns name d keep
    for ns in $(netns_names); do
        if [[ $ns == "$POD_NETNS" ]]; then
            for name in $(link_names -n "$ns"); do
                [[ $name == lo ]] || echo "link $name left in netns $POD_NETNS"
            done
        else
            echo "netns $ns left"
        fi
    done
    keep=" lo ${RXE_LINKS[*]} "
    link_names | awk -v keep="$keep" 'index(keep, " " $1 " ") == 0 { n++; if (n <= 5) l = l " " $1 }
        END { if (n) printf "%d link(s) left in the host netns:%s%s\n", n, l, (n > 5 ? " ..." : "") }'
    for d in /sys/class/infiniband/*; do
        [[ -e $d && ${d##*/} != rxe0 ]] && echo "ib device ${d##*/} left"
    done
    while IFS= read -r d; do
        [[ -n $d && -d $d ]] || continue
        # Attachment records must be gone; lock files (locks/) and empty network dirs are kept
        # by design (unlinking a lock file another process may hold would break the lock).
        if [[ -n $(find "$d" -mindepth 1 -type f -not -path "$d/locks/*" -print -quit) ]]; then
            echo "state dir $d still has records: $(find "$d" -mindepth 1 -type f -not -path "$d/locks/*" -printf '%P ' | head -c 200)"
        fi
    done < <(echo "$STATE_DIR"; cat "$state_dirs_file" 2>/dev/null)
}

# ---- one case ----------------------------------------------------------------------------
failed=0
record() { # name PASS|FAIL [note]
    emit "VMCASE $1 $2${3:+ $3}"
    [[ $2 == PASS ]] || failed=$((failed + 1))
}

run_case() {
    local name=$1 kind=$2
    shift 2
    local log=$results/cases/$name.log scratch=/tmp/vmcase/$name rc note="" leaked
    mkdir -p "$results/cases" "$scratch"
    : >"$scratch/state-dirs"
    echo "VMCASE-BEGIN $name"
    teardown
    if ! setup >"$log" 2>&1; then
        record "$name" FAIL "rxe setup failed (see log)"
        teardown
        return
    fi
    (
        cd "$repo" || exit 1
        export RDMA_NS_IN_VM=1 RDMA_NS_BIN="$bin" RDMA_NS_VM_NETNS="/run/netns/$POD_NETNS" \
            RDMA_NS_VM_SCRATCH="$scratch" RDMA_NS_VM_STATE_DIRS="$scratch/state-dirs" \
            RDMA_NS_VM_KERNEL_NAME="$kernel_name" RUST_BACKTRACE=1
        case $kind in
        test) exec "$1" --test-threads=1 "${@:3}" ;;
        script) exec bash "$1" ;;
        *) echo "unknown case kind $kind"; exit 1 ;;
        esac
    ) >>"$log" 2>&1 </dev/null
    rc=$?
    if ((rc != 0)); then
        note="exit $rc"
    elif [[ $kind == test ]]; then
        # libtest's one result line: "test result: ok. N passed; 0 failed; K ignored; ...".
        local ran ignored
        read -r ran ignored < <(awk '/^test result: / { for (i = 1; i <= NF; i++) {
            if ($(i + 1) ~ /^passed;?$/) p += $i; if ($(i + 1) ~ /^ignored;?$/) g += $i } }
            END { print p + 0, g + 0 }' "$log")
        if [[ $ran != "$2" ]]; then
            note="ran $ran test(s), tests/vm/cases expects $2 (a test renamed, removed or added? update the case)"
        elif [[ $ignored != 0 ]]; then
            note="$ignored test(s) ignored"
        fi
    fi
    leaked=$(leaks "$scratch/state-dirs")
    if [[ -n $leaked ]]; then
        { echo "---- leaked by this case:"; echo "$leaked"; } >>"$log"
        note="${note:+$note; }leaked: $(head -n 1 <<<"$leaked")$( (($(wc -l <<<"$leaked") > 1)) && echo ' ...')"
    fi
    teardown
    rm -rf "$scratch"
    if [[ -z $note ]]; then record "$name" PASS; else record "$name" FAIL "$note"; fi
}

# ---- main --------------------------------------------------------------------------------
: >"$out"
echo "VMGUEST start $(uname -r)"
[[ $(uname -r) == "$release" ]] || fatal "booted kernel $(uname -r), not $release"
[[ -r $plan ]] || fatal "no plan at $plan"
basics
[[ -z $(netns_names) ]] || fatal "netns present at boot: $(netns_names | tr '\n' ' ')"

# fd 3, so that nothing a case runs can read the plan
while read -r -u 3 -a words; do
    ((${#words[@]})) || continue
    run_case "${words[@]}"
done 3<"$plan"

teardown
left="$(netns_names)$(link_names | grep -vx lo)$(ls /sys/class/infiniband 2>/dev/null)"
[[ -z $left ]] || emit "VMERROR teardown left: $(echo "$left" | tr '\n' ' ')"
emit VMDONE
((failed == 0)) && ! grep -q '^VMERROR' "$out"

#!/usr/bin/env bash
# rdma-ns's lab: a two-node Kubernetes cluster of Linux 7 VMs on one Linux machine, where pods
# get RDMA from rdma-ns over Soft-RoCE and send it from one node to the other. docs/lab.md says
# what it is, docs/benchmarks.md what it costs.
#
#   install/lab.sh up              build or reuse everything, boot the nodes, install rdma-ns as
#                                  docs/install.md says, start two RDMA pods; the last line of
#                                  stdout is the kubeconfig's path (usable from this machine)
#   install/lab.sh build           build or reuse everything `up` needs (components, kernel,
#                                  images, the node disks' seed) and start nothing; `up` then
#                                  finds it all cached (tests/run.sh builds this way in the
#                                  background while the VM tier runs)
#   install/lab.sh kubectl ARGS... kubectl against the lab
#   install/lab.sh helm ARGS...    helm against the lab (install/lab/build.sh helm builds it)
#   install/lab.sh node N CMD...   run CMD as root on node N (1 or 2); its exit status is ours
#   install/lab.sh status          what is running
#   install/lab.sh down            stop and remove everything the lab made but its cache
#   install/lab.sh prerequisites   install what `up` needs: the Debian packages (apt-get) and
#                                  virtme-ng at its pinned version (pip); then check the rest
#   install/lab.sh --print-packages   the Debian packages the lab needs
#
# Progress goes to stderr, a step a line with its time. Runs as root. `up` checks every
# prerequisite before it builds anything. Environment:
#   RDMA_NS_LAB_CACHE   builds, images (default ~/.cache/rdma-ns/lab); kept by `down`
#   RDMA_NS_LAB_STATE   the running lab (default /var/lib/rdma-ns-lab); removed by `down`
#   RDMA_NS_VM_CACHE    the Linux 7 kernel, shared with the VM tier (~/.cache/rdma-ns/vm-kernels)
#   RDMA_NS_LAB_PORT    the host's loopback port for the API server (default 16443)
#   RDMA_NS_LAB_MEMORY  memory per node VM (default 3G); RDMA_NS_LAB_CPUS vCPUs (default 1)
#   RDMA_NS_LAB_PODS=0  `up` starts no RDMA pods (the test tier starts its own)
#   RDMA_NS_LAB_NODE_FEATURES=0  `up` leaves out (and builds no) NFD and the node agent (the kube tier does when
#                       no chosen case reads node labels or the exporter)
set -euo pipefail
. "$(dirname "$0")/lab/common.sh"

NETNS=rdmans-lab
BRIDGE=labbr0
API=10.251.0.1
NODES=(node1 node2)
NODE_IPS=(10.251.0.11 10.251.0.12)
POD_CIDRS=(10.244.1.0/24 10.244.2.0/24)
SERVICE_CIDR=10.96.0.0/16
# Each rail is a QEMU socket netdev over the lab netns's 127.0.0.1: node1 listens, node2
# connects. The listening side must be up first; a node2 restart reconnects, a node1 restart
# leaves node2's rails down until node2 restarts too (QEMU 7.2's socket netdev does not
# reconnect).
RAIL_PORTS=(40100 40101)
PORT=${RDMA_NS_LAB_PORT:-16443}
MEMORY=${RDMA_NS_LAB_MEMORY:-3G}
# One vCPU a node: under multi-threaded TCG a guest with two vCPUs can hit the int3 that the
# kernel's text patching leaves while it flips a static key (seen: "Oops: int3" in
# __kmalloc_cache_noprof as kubelet made the first memory cgroup, a panic and a reboot). On a
# 2-core machine two 2-vCPU nodes had no more CPU than two 1-vCPU nodes anyway.
CPUS=${RDMA_NS_LAB_CPUS:-1}
VNG_PIP=virtme-ng==1.42

# Debian packages the lab runs (the nodes run this machine's own root, so their tools too) and
# builds with: gcc, libc6-dev, pkg-config and libseccomp-dev for install/lab/build.sh's
# components, protobuf-compiler (protoc) for rdma-ns-dra's image (the kubelet's protos in
# proto/), python3-pip for virtme-ng.
PACKAGES=(qemu-system-x86 busybox-static file iproute2 socat openssl dropbear-bin openssh-client
    e2fsprogs python3 python3-yaml iptables conntrack kmod util-linux containernetworking-plugins
    rdma-core ibverbs-utils ibverbs-providers rdmacm-utils perftest ucx-utils tcpdump pci.ids
    gcc libc6-dev pkg-config libseccomp-dev protobuf-compiler python3-pip)
# Neither Debian 12 package gives these at the version the lab needs: they are checked, and
# named with where to get them, never installed here.
GO_NEEDED="Go 1.26 or later (go.dev/dl, with its bin/ on PATH)"
RUST_NEEDED="a Rust toolchain (rustup, with cargo on PATH)"

usage() { sed -n '2,/^set -euo/{/^set -euo/d; s/^# \{0,1\}//; p}' "$0"; }

# ---- prerequisites ------------------------------------------------------------------------
missing_packages() {
    local p
    for p in "${PACKAGES[@]}"; do
        [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || echo "$p"
    done
}

vng_pinned() { [[ $(vng --version 2>/dev/null) == "virtme-ng ${VNG_PIP#*==}" ]]; }

# Everything `up` needs, checked before it builds anything: a missing one is named with its fix.
# With "build", what `build` needs: no VM boots, so neither virtme-ng nor /dev/net/tun.
check_prerequisites() {
    [[ $(id -u) == 0 ]] || die "the lab needs root (network namespaces, VMs, node disks)"
    local missing=() packages goversion for=${1:-up}
    packages=$(missing_packages | tr '\n' ' ')
    [[ -z $packages ]] || missing+=("Debian packages ${packages% }")
    command -v protoc >/dev/null || missing+=("protoc (protobuf-compiler)")
    [[ $for == build ]] || vng_pinned || missing+=("virtme-ng ${VNG_PIP#*==} (pip install $VNG_PIP)")
    if ! command -v go >/dev/null; then
        missing+=("go: $GO_NEEDED")
    else
        goversion=$(go env GOVERSION)
        [[ $goversion =~ ^go1\.(2[6-9]|[3-9][0-9]) ]] || missing+=("go: $goversion is too old, the lab needs $GO_NEEDED")
    fi
    command -v cargo >/dev/null || missing+=("cargo: $RUST_NEEDED")
    [[ $for == build || -e /dev/net/tun ]] || missing+=("/dev/net/tun (the node VMs' management links are tap devices: modprobe tun)")
    ((${#missing[@]} == 0)) && return 0
    printf 'lab: missing: %s\n' "${missing[@]}" >&2
    die "install/lab.sh prerequisites installs the Debian packages and virtme-ng; Go and Rust are yours to install"
}

# Installs what a package manager can give at the version the lab needs, then checks the rest.
prerequisites() {
    [[ $(id -u) == 0 ]] || die "installing the lab's prerequisites needs root (apt-get, pip)"
    local packages
    mapfile -t packages < <(missing_packages)
    if ((${#packages[@]})); then
        say "apt-get install ${packages[*]}"
        apt-get update -q >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}" >&2
    fi
    if ! vng_pinned; then
        say "pip install $VNG_PIP"
        # Debian's own python refuses system-wide pip installs (PEP 668) without the flag; its
        # refusal says nothing the second try's outcome does not.
        python3 -m pip install -q "$VNG_PIP" >/dev/null 2>&1 ||
            python3 -m pip install -q --break-system-packages "$VNG_PIP" >&2
    fi
    check_prerequisites
    say "every prerequisite of install/lab.sh up is there"
}

# ---- state --------------------------------------------------------------------------------
is_up() { [[ -f $LAB_STATE/lab.env ]]; }
pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
in_netns() { nsenter --net="/run/netns/$NETNS" "$@"; }

step() {
    STEP_NAME=$1
    STEP_START=$(lab_now)
    say "$STEP_NAME ..."
}
done_step() { say "$STEP_NAME: done in $(lab_since "$STEP_START") s"; }

# ---- up -----------------------------------------------------------------------------------
build_everything() {
    step "components (install/lab/build.sh)"
    "$LAB_DIR/build.sh" >&2
    done_step
    step "Linux 7 kernel (tests/vm/fetch-kernel.sh)"
    KIMG=$(bash "$LAB_REPO/tests/vm/fetch-kernel.sh" "$LAB_KERNEL_CACHE") || die "no Linux 7 kernel (above)"
    done_step
    step "images (install/lab/images.sh)"
    "$LAB_DIR/images.sh" >&2
    done_step
    step "the node disks' seed: containerd's store with the images (install/lab/seed.sh)"
    SEED=$("$LAB_DIR/seed.sh" 2> >(grep -v 'cgroup v1 is deprecated' >&2)) || die "no seed (above)"
    done_step
}

bin_path() {
    local c dirs=()
    for c in kubernetes containerd runc cri-tools; do dirs+=("$(lab_bin_dir "$c")"); done
    local IFS=:
    echo "${dirs[*]}"
}

make_state() {
    step "certificates, keys and node disks ($LAB_STATE)"
    mkdir -p "$LAB_STATE"/{pki,ssh,cp,nodes}
    chmod 700 "$LAB_STATE"
    bash "$LAB_DIR/pki.sh" "$LAB_STATE/pki" "$API" "$PORT" "${NODES[@]}" >&2
    ssh-keygen -q -t ed25519 -N '' -f "$LAB_STATE/ssh/id_ed25519"
    dropbearkey -t ed25519 -f "$LAB_STATE/ssh/hostkey" >/dev/null 2>&1
    local i
    for i in 0 1; do node_files "$i"; done
    {
        echo "KIMG=$KIMG"
        echo "PORT=$PORT"
        echo "BIN=$(bin_path)"
    } >"$LAB_STATE/lab.env"
    done_step
}

mac_of() { printf '52:54:00:1a:%02x:%02x' "$2" "$(($1 + 1))"; }

node_files() {
    local i=$1 n=${NODES[$1]} o=$((1 - $1)) d=$LAB_STATE/nodes/${NODES[$1]}
    mkdir -p "$d"
    truncate -s 20G "$d/disk.img"
    # The seed is var/lib/containerd with the images unpacked (install/lab/seed.sh).
    mkfs.ext4 -q -F -L "$n" -d "$SEED" "$d/disk.img"
    cat >"$d/node.env" <<EOF
NODE=$n
NODE_IP=${NODE_IPS[$i]}
API=$API
POD_CIDR=${POD_CIDRS[$i]}
OTHER_POD_CIDR=${POD_CIDRS[$o]}
OTHER_NODE_IP=${NODE_IPS[$o]}
MAC_MGMT=$(mac_of "$i" 0)
MAC_RAIL0=$(mac_of "$i" 1)
MAC_RAIL1=$(mac_of "$i" 2)
MAC_AUX=$(mac_of "$i" 3)
BIN=$(bin_path)
PKI=$LAB_STATE/pki
IMAGES=$LAB_CACHE/images
PAUSE_IMAGE=$(awk '$1 == "pause" { print $2 }' "$LAB_CACHE/images/refs")
LAB_SSH_PUB=$LAB_STATE/ssh/id_ed25519.pub
LAB_SSH_HOSTKEY=$LAB_STATE/ssh/hostkey
EOF
}

make_network() {
    step "network namespace $NETNS: bridge $BRIDGE ($API/24), taps, routes to the pod networks"
    ip netns add "$NETNS"
    in_netns ip link set lo up
    in_netns ip link add "$BRIDGE" type bridge
    in_netns ip addr add "$API/24" dev "$BRIDGE"
    in_netns ip link set "$BRIDGE" up
    local i
    for i in 0 1; do
        in_netns ip tuntap add dev "labtap$((i + 1))" mode tap
        in_netns ip link set "labtap$((i + 1))" master "$BRIDGE" up
        in_netns ip route add "${POD_CIDRS[$i]}" via "${NODE_IPS[$i]}"
    done
    done_step
}

# start NAME CMD...: a daemon in the lab netns, its own session, log and pid under cp/.
start_daemon() {
    local name=$1
    shift
    setsid nsenter --net="/run/netns/$NETNS" "$@" >>"$LAB_STATE/cp/$name.log" 2>&1 </dev/null &
    echo $! >"$LAB_STATE/cp/$name.pid"
}

wait_for() {
    local what=$1 seconds=$2 i
    shift 2
    for ((i = 0; i < seconds * 5; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    die "$what did not happen within $seconds s"
}

control_plane() {
    step "control plane in $NETNS: etcd, kube-apiserver, kube-controller-manager, kube-scheduler"
    local b p=$LAB_STATE/pki
    b=$(lab_bin_dir kubernetes)
    start_daemon etcd "$b/etcd" --data-dir "$LAB_STATE/cp/etcd" --listen-client-urls http://127.0.0.1:2379 \
        --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
        --unsafe-no-fsync --log-level warn
    start_daemon kube-apiserver "$b/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
        --bind-address 0.0.0.0 --advertise-address "$API" --secure-port 6443 \
        --service-cluster-ip-range "$SERVICE_CIDR" --client-ca-file "$p/ca.crt" \
        --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
        --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" \
        --kubelet-client-key "$p/apiserver-kubelet-client.key" \
        --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$p/sa.pub" \
        --service-account-signing-key-file "$p/sa.key" --authorization-mode Node,RBAC \
        --enable-admission-plugins NodeRestriction --allow-privileged=true --profiling=false \
        --kubelet-preferred-address-types InternalIP
    wait_for "the API server's readiness" 120 in_netns "$b/kubectl" --kubeconfig "$p/admin.conf" get --raw /readyz
    start_daemon kube-controller-manager "$b/kube-controller-manager" --kubeconfig "$p/controller-manager.conf" \
        --authentication-kubeconfig "$p/controller-manager.conf" --authorization-kubeconfig "$p/controller-manager.conf" \
        --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
        --use-service-account-credentials --leader-elect=false --controllers '*,-nodeipam'
    start_daemon kube-scheduler "$b/kube-scheduler" --kubeconfig "$p/scheduler.conf" \
        --authentication-kubeconfig "$p/scheduler.conf" --authorization-kubeconfig "$p/scheduler.conf" \
        --leader-elect=false
    # The host's way in: 127.0.0.1:$PORT, relayed into the netns (the API server's certificate
    # names 127.0.0.1). Loopback only: nothing is routed to the lab's addresses from here.
    setsid socat "TCP-LISTEN:$PORT,bind=127.0.0.1,reuseaddr,fork" \
        "EXEC:nsenter --net=/run/netns/$NETNS socat STDIO TCP\:$API\:6443" \
        >>"$LAB_STATE/cp/forwarder.log" 2>&1 </dev/null &
    echo $! >"$LAB_STATE/cp/forwarder.pid"
    wait_for "the API server through 127.0.0.1:$PORT" 30 kubectl_ get --raw /readyz
    done_step
}

# ---- nodes --------------------------------------------------------------------------------
# The QEMU options of node $1: its management link on the bridge, its two rails, and a third
# NIC (aux0) on a hub of its own, laid out over two NUMA nodes and two PCIe root complexes so
# that the DRA driver's topology attributes have something to tell apart (issue 31, section 7):
#   pci0000:00 (the q35 host bridge; the kernel gives its functions no NUMA node): mgmt0, rail0
#   pci0000:40 (a pxb-pcie on NUMA node 1, one root port per NIC):           rail1, aux0
# NUMA node 0 has the vCPU and half the memory, node 1 the other half.
node_qemu_opts() {
    local i=$1 opts r half
    half=$(($(mem_mib "$MEMORY") / 2))
    opts="-object memory-backend-ram,id=mem0,size=${half}M -numa node,nodeid=0,cpus=0-$((CPUS - 1)),memdev=mem0"
    opts+=" -object memory-backend-ram,id=mem1,size=${half}M -numa node,nodeid=1,memdev=mem1"
    opts+=" -device pxb-pcie,id=pcie.1,bus_nr=64,numa_node=1,bus=pcie.0"
    opts+=" -netdev tap,id=mgmt,ifname=labtap$((i + 1)),script=no,downscript=no"
    # Devices without bus= go to the newest bus, which is now the pxb-pcie's, and QEMU refuses
    # anything but a bridge there ("Only PCI/PCIe bridges can be plugged into pxb-pcie").
    opts+=" -device virtio-net-pci,bus=pcie.0,netdev=mgmt,mac=$(mac_of "$i" 0)"
    for r in 0 1; do
        if ((i == 0)); then
            opts+=" -netdev socket,id=rail$r,listen=127.0.0.1:${RAIL_PORTS[$r]}"
        else
            opts+=" -netdev socket,id=rail$r,connect=127.0.0.1:${RAIL_PORTS[$r]}"
        fi
        if ((r == 0)); then
            opts+=" -device virtio-net-pci,bus=pcie.0,netdev=rail$r,mac=$(mac_of "$i" $((r + 1)))"
        else
            opts+=" -device pcie-root-port,id=rp$r,bus=pcie.1,chassis=$((10 + r))"
            opts+=" -device virtio-net-pci,bus=rp$r,netdev=rail$r,mac=$(mac_of "$i" $((r + 1)))"
        fi
    done
    opts+=" -netdev hubport,id=aux,hubid=1 -device pcie-root-port,id=rpaux,bus=pcie.1,chassis=13"
    opts+=" -device virtio-net-pci,bus=rpaux,netdev=aux,mac=$(mac_of "$i" 3)"
    echo "$opts"
}

# MiB in a QEMU size (3G, 3072M).
mem_mib() {
    case $1 in
    *G) echo $((${1%G} * 1024)) ;;
    *M) echo "${1%M}" ;;
    *) die "RDMA_NS_LAB_MEMORY=$1: give it in G or M (3G, 3072M)" ;;
    esac
}

# The node's supervisor: boots the VM again whenever it ends, until `down` asks it to stop (a
# reboot inside the guest ends QEMU, as vng runs it with -no-reboot).
supervise_node() {
    local i=$1 n=${NODES[$1]} d=$LAB_STATE/nodes/${NODES[$1]}
    while [[ ! -e $d/stop ]]; do
        echo "---- boot $(date -u +%FT%TZ)" >>"$d/console.log"
        in_netns vng -r "$KIMG" --disable-kvm --force-9p --verbose --user root --name "$n" \
            --memory "$MEMORY" --cpus "$CPUS" --disk "$d/disk.img" --qemu-opts="$(node_qemu_opts "$i")" \
            --exec "LAB_NODE_ENV=$d/node.env bash $LAB_DIR/node.sh boot" \
            </dev/null > >(cat >>"$d/console.log") 2>&1 &
        echo $! >"$d/vm.pid"
        wait $! || true
        sleep 2
    done
}

boot_node() {
    local i=$1 d=$LAB_STATE/nodes/${NODES[$1]}
    rm -f "$d/stop"
    setsid "$LAB_REPO/install/lab.sh" __supervise "$i" </dev/null >>"$d/supervisor.log" 2>&1 &
    echo $! >"$d/supervisor.pid"
}

boot_nodes() {
    step "node VMs (Linux $(basename "$(dirname "$KIMG")"), TCG, $CPUS vCPUs and $MEMORY each)"
    boot_node 0
    # node2 connects to node1's rails: they must listen first.
    wait_for "node1's rails listening" 120 in_netns bash -c "ss -ltn | grep -q ':${RAIL_PORTS[1]} '"
    boot_node 1
    local n
    for n in "${NODES[@]}"; do
        wait_for "$n to boot (see $LAB_STATE/nodes/$n/console.log)" 600 grep -q "LABNODE $n UP" "$LAB_STATE/nodes/$n/console.log"
        ! grep -q "LABNODE $n FAILED" "$LAB_STATE/nodes/$n/console.log" || die "$n failed to boot: $(grep "LABNODE $n FAILED" "$LAB_STATE/nodes/$n/console.log")"
    done
    wait_for "both nodes Ready" 600 nodes_ready
    done_step
}

nodes_ready() {
    local ready
    ready=$(kubectl_ get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}')
    [[ $(grep -c True <<<"$ready") == "${#NODES[@]}" ]]
}

# ---- the install recipe (README's chart, docs/install.md) -----------------------------------
recipe() {
    step "README's \"Install with Helm\" and docs/install.md (install/lab/recipe.sh)"
    LAB_KUBECTL="$0 kubectl" LAB_HELM="$0 helm" bash "$LAB_DIR/recipe.sh" >&2
    done_step
}

# ---- verbs --------------------------------------------------------------------------------
kubectl_() {
    local b
    b=$(lab_bin_dir kubernetes)
    "$b/kubectl" --kubeconfig "$LAB_STATE/pki/admin-host.conf" "$@"
}

# helm's cache, config and release-repository files live with the lab (`down` removes them).
helm_() {
    local b
    b=$(lab_bin_dir helm)
    [[ -x $b/helm ]] || die "no helm in $b: install/lab/build.sh helm builds it"
    HELM_CACHE_HOME=$LAB_STATE/helm/cache HELM_CONFIG_HOME=$LAB_STATE/helm/config HELM_DATA_HOME=$LAB_STATE/helm/data \
        "$b/helm" --kubeconfig "$LAB_STATE/pki/admin-host.conf" "$@"
}

up() {
    check_prerequisites
    is_up && die "the lab is up already (install/lab.sh down first, or status)"
    local start
    start=$(lab_now)
    build_everything
    trap 'say "up failed: the lab is half made; install/lab.sh down removes it"' ERR
    make_state
    echo $$ >"$LAB_STATE/up.pid"
    make_network
    control_plane
    boot_nodes
    recipe
    trap - ERR
    say "the lab is up in $(lab_since "$start") s: install/lab.sh kubectl get pods -A -o wide"
    echo "$LAB_STATE/pki/admin-host.conf"
}

node() {
    is_up || die "the lab is not up"
    local n=${1:-}
    [[ $n == 1 || $n == 2 ]] || die "node takes 1 or 2, then a command (not '${n}')"
    shift
    (($#)) || die "node $n: no command"
    . "$LAB_STATE/lab.env"
    local cmd
    cmd="export PATH=$BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin; $(printf '%q ' "$@")"
    in_netns ssh -q -i "$LAB_STATE/ssh/id_ed25519" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
        -o LogLevel=ERROR -o BatchMode=yes "root@${NODE_IPS[$((n - 1))]}" "$cmd"
}

status() {
    if ! is_up; then
        echo "lab: down"
        return 0
    fi
    echo "lab: up (state $LAB_STATE, kubeconfig $LAB_STATE/pki/admin-host.conf)"
    local f
    for f in "$LAB_STATE"/cp/*.pid; do
        printf '  %-24s %s\n' "$(basename "$f" .pid)" "$(pid_alive "$f" && echo "running ($(cat "$f"))" || echo stopped)"
    done
    local n
    for n in "${NODES[@]}"; do
        printf '  %-24s %s\n' "$n VM" "$(pid_alive "$LAB_STATE/nodes/$n/vm.pid" && echo "running" || echo stopped)"
    done
    kubectl_ get nodes -o wide 2>/dev/null | sed 's/^/  /' || echo "  (the API server does not answer)"
}

stop_pidfile() {
    local f=$1 pid
    pid_alive "$f" || return 0
    pid=$(cat "$f")
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
}

down() {
    [[ $(id -u) == 0 ]] || die "the lab needs root"
    if ! is_up && [[ ! -d $LAB_STATE ]] && ! ip netns list | grep -qw "$NETNS"; then
        die "the lab is not up: nothing to take down"
    fi
    local n f
    # An `up` still running (from another shell) would go on making what this removes.
    stop_pidfile "$LAB_STATE/up.pid"
    for n in "${NODES[@]}"; do
        [[ -d $LAB_STATE/nodes/$n ]] && touch "$LAB_STATE/nodes/$n/stop"
    done
    for n in "${NODES[@]}"; do
        stop_pidfile "$LAB_STATE/nodes/$n/supervisor.pid"
        stop_pidfile "$LAB_STATE/nodes/$n/vm.pid"
    done
    # QEMU runs in the netns: whatever is left there goes.
    if ip netns list | grep -qw "$NETNS"; then
        ip netns pids "$NETNS" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    fi
    for f in "$LAB_STATE"/cp/*.pid; do [[ -e $f ]] && stop_pidfile "$f"; done
    ip netns del "$NETNS" 2>/dev/null || true
    rm -rf "$LAB_STATE"
    say "down: VMs, control plane, $NETNS and $LAB_STATE removed (the cache $LAB_CACHE stays)"
}

case ${1:-} in
up) up ;;
build)
    # images.sh rewrites the image references a running lab's manifests are made from.
    is_up && die "the lab is up, and build would rewrite the image references it runs on: install/lab.sh down first"
    check_prerequisites build
    build_everything
    ;;
down) down ;;
status) status ;;
kubectl)
    shift
    is_up || die "the lab is not up"
    kubectl_ "$@"
    ;;
helm)
    shift
    is_up || die "the lab is not up"
    helm_ "$@"
    ;;
# The node VMs' supervisors run this (boot_node), in a session of their own.
__supervise) . "$LAB_STATE/lab.env" && supervise_node "$2" ;;
node) shift && node "$@" ;;
prerequisites) prerequisites ;;
--print-packages) echo "${PACKAGES[*]}" ;;
-h | --help) usage ;;
"") usage >&2 && exit 2 ;;
*) usage >&2 && die "unknown verb '$1'" ;;
esac

#!/usr/bin/env bash
# Runs inside a lab node VM, as root (install/lab.sh boots the VM with virtme-ng, whose guest
# sees this machine's root read-only under writable overlays):
#
#   node.sh boot                  make the node: disk, network, modules, CNI, containerd,
#                                 images, kubelet, kube-proxy, the exec server; then wait
#   node.sh start|stop|restart SERVICE   containerd, kubelet or kube-proxy
#   node.sh status                each service and its pid
#
# The node's own settings come from $LAB_NODE_ENV (written by lab.sh before the boot, read
# through the VM's view of the host). What must survive a reboot lives on the node's disk
# (ext4, labelled with the node's name by lab.sh): kubelet's, containerd's and CNI's state, /etc/cni/net.d,
# /opt/cni/bin and NFD's features.d, bind-mounted where a real node keeps them. Everything
# else (logs, /run) is the VM's memory and goes with a reboot, as on a real node.
set -uo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# boot is given its node.env by lab.sh and keeps a copy for the commands run later on the node.
LAB_NODE_ENV=${LAB_NODE_ENV:-/run/lab/node.env}
# shellcheck source=/dev/null
. "$LAB_NODE_ENV" || { echo "node.sh: cannot read $LAB_NODE_ENV" >&2; exit 1; }
# From node.env: NODE (name), NODE_IP, API (address), POD_CIDR, OTHER_POD_CIDR, OTHER_NODE_IP,
# MAC_MGMT, MAC_RAIL0, MAC_RAIL1, BIN (a colon list of component bin dirs), PKI, IMAGES, LOGS_NOTE.

LOGDIR=/var/log/lab
# vng gives the guest writable (memory) overlays on /etc, /opt, /srv, /var ...; / itself is read-only.
DISK=/srv/node
# The disk starts as install/lab/seed.sh's tree: var/lib/containerd with every image unpacked.
PERSIST=(/var/lib/kubelet /var/lib/containerd /var/lib/cni /etc/cni/net.d /opt/cni/bin
    /etc/kubernetes/node-feature-discovery /var/log/pods /var/log/containers /etc/containerd /var/lib/nfd)
SERVICES=(containerd kubelet kube-proxy)
export PATH=$BIN:$PATH

say() { echo "node $NODE: $*"; }
fail() {
    say "FAILED: $*"
    echo "LABNODE $NODE FAILED $*" >/dev/console 2>/dev/null
    exit 1
}

mount_disk() {
    local dev
    mkdir -p "$DISK"
    # lab.sh labels the disk with the node's name; its device name depends on the bus.
    dev=$(blkid -L "$NODE") || fail "no disk labelled $NODE (blkid -L)"
    mount -t ext4 "$dev" "$DISK" || fail "cannot mount the node disk $dev"
    local d
    for d in "${PERSIST[@]}"; do
        mkdir -p "$DISK$d" "$d"
        mount --bind "$DISK$d" "$d" || fail "bind $d"
    done
    # kubelet and containerd need mount propagation for volumes and the pod netns.
    mount --make-rshared /
    drop_truncated_serving_cert
}

# A VM that ends hard (a guest panic, a test's reboot) right after kubelet wrote its self-signed
# serving pair can leave both files empty (ext4 delayed allocation), and kubelet then refuses to
# start ("missing content for serving cert"). It makes the pair anew when none is there.
drop_truncated_serving_cert() {
    local f
    for f in /var/lib/kubelet/pki/kubelet.crt /var/lib/kubelet/pki/kubelet.key; do
        if [[ -f $f && ! -s $f ]]; then
            say "kubelet's $f is empty (the VM ended while it was written): removed, kubelet makes a new pair"
            rm -f /var/lib/kubelet/pki/kubelet.crt /var/lib/kubelet/pki/kubelet.key
        fi
    done
}

link_by_mac() {
    local mac=$1 name=$2 dev
    dev=$(ip -o link | awk -v m="$mac" 'tolower($0) ~ m { sub(/:$/, "", $2); sub(/@.*/, "", $2); print $2 }')
    [[ -n $dev ]] || fail "no link with MAC $mac"
    [[ $dev == "$name" ]] || ip link set dev "$dev" name "$name" || fail "rename $dev to $name"
    ip link set dev "$name" up
}

network() {
    hostname "$NODE"
    ip link set lo up
    link_by_mac "$MAC_MGMT" mgmt0
    link_by_mac "$MAC_RAIL0" rail0
    link_by_mac "$MAC_RAIL1" rail1
    # A NIC on the second PCIe root with no segment behind it (install/lab.sh, node_qemu_opts).
    [[ -z ${MAC_AUX:-} ]] || link_by_mac "$MAC_AUX" aux0
    ip addr add "$NODE_IP/24" dev mgmt0
    ip route add default via "$API"
    ip route add "$OTHER_POD_CIDR" via "$OTHER_NODE_IP"
    sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
    printf '127.0.0.1 localhost\n%s %s\n' "$NODE_IP" "$NODE" >/etc/hosts
    : >/etc/resolv.conf
}

# khugepaged runs at nice 19 and can be preempted inside an RCU read-side section; on one busy
# TCG vCPU it then waits minutes for the CPU, every synchronize_rcu() with it (seen: "rcu_preempt
# detected stalls ... P36" = khugepaged, and containerd's task deletes, which wait on cgroup and
# netns teardown, timing out for half an hour). A lab node does not need huge pages.
no_huge_page_scans() {
    local t=/sys/kernel/mm/transparent_hugepage
    [[ -w $t/enabled ]] || return 0
    echo never >"$t/enabled"
    echo never >"$t/defrag"
}

modules() {
    modprobe -a rdma_rxe ib_uverbs rdma_ucm ib_umad macvlan veth bridge overlay nf_tables \
        nf_conntrack br_netfilter configfs || fail "modprobe failed"
    mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config
}

cni_defaults() {
    local p
    for p in bridge host-local loopback portmap; do
        [[ -e /opt/cni/bin/$p ]] || cp "/usr/lib/cni/$p" /opt/cni/bin/ || fail "no /usr/lib/cni/$p (containernetworking-plugins)"
    done
    [[ -e /etc/cni/net.d/10-bridge.conflist ]] && return
    cat >/etc/cni/net.d/10-bridge.conflist <<EOF
{
  "cniVersion": "1.0.0",
  "name": "lab-pods",
  "plugins": [
    { "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "$POD_CIDR" }]],
                "routes": [{ "dst": "0.0.0.0/0" }] } },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
}

containerd_config() {
    mkdir -p /etc/containerd /etc/cdi /var/run/cdi
    cat >/etc/containerd/config.toml <<EOF
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  # Every snapshot's disk usage is walked this often (10 s by default); only stats use it.
  stats_collect_period = 300
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "$PAUSE_IMAGE"
[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "$(command -v runc)"
  SystemdCgroup = false
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["/opt/cni/bin"]
  conf_dir = "/etc/cni/net.d"
EOF
}

kubelet_config() {
    mkdir -p /var/lib/kubelet
    cat >/var/lib/kubelet/config.yaml <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: true }
  x509: { clientCAFile: $PKI/ca.crt }
authorization: { mode: Webhook }
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
clusterDomain: cluster.local
failSwapOn: false
failCgroupV1: true
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# Under TCG a container's create and start through containerd and runc take minutes when a
# node starts its DaemonSets' pods at once (CPU-bound: runc --version alone takes 2 s, from the
# 9p root or from memory alike); the default 2m made kubelet give up on calls
# containerd went on with, and retry them, which only added load ("context deadline exceeded").
runtimeRequestTimeout: 10m
registerNode: true
# A lab node is small and its disk is a file: no evictions for space or memory. With every
# threshold off ("0%" is ignored, eviction.parseThresholdStatement) and no local-storage
# accounting, the eviction manager's 10 s loop returns at once (managerImpl.synchronize)
# instead of gathering the stats of every container through CRI and cAdvisor, a steady load on
# a TCG node. The pods set no ephemeral-storage limits, so nothing here needs that accounting.
evictionHard: { memory.available: "0%", nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%", imagefs.inodesFree: "0%" }
localStorageCapacityIsolation: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
}

start_service() {
    local name=$1 pid
    if pid=$(pidof_service "$name"); then
        say "$name is running ($pid)"
        return
    fi
    mkdir -p "$LOGDIR"
    case $name in
    containerd) setsid containerd --config /etc/containerd/config.toml >>"$LOGDIR/containerd.log" 2>&1 </dev/null & ;;
    kubelet) setsid kubelet --config /var/lib/kubelet/config.yaml --kubeconfig "$PKI/$NODE.conf" \
        --hostname-override "$NODE" --node-ip "$NODE_IP" --v=1 >>"$LOGDIR/kubelet.log" 2>&1 </dev/null & ;;
    kube-proxy) setsid kube-proxy --kubeconfig "$PKI/kube-proxy.conf" --proxy-mode iptables \
        --hostname-override "$NODE" --cluster-cidr 10.244.0.0/16 >>"$LOGDIR/kube-proxy.log" 2>&1 </dev/null & ;;
    *) fail "unknown service $name (one of ${SERVICES[*]})" ;;
    esac
    echo $! >"/run/lab-$name.pid"
    say "$name started ($!)"
}

pidof_service() {
    local pid
    pid=$(cat "/run/lab-$1.pid" 2>/dev/null) || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

stop_service() {
    local pid
    pid=$(pidof_service "$1") || { say "$1 is not running"; return 0; }
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    rm -f "/run/lab-$1.pid"
    say "$1 stopped"
}

wait_containerd() {
    local i
    for i in $(seq 300); do
        ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    fail "containerd does not answer (see $LOGDIR/containerd.log)"
}

# A started service returns once it serves: the kubelet and the cases dial containerd's socket.
wait_serving() {
    [[ $1 != containerd ]] || wait_containerd
}

# The images came with the disk (install/lab/seed.sh); one that did not is imported here.
import_images() {
    local name ref have
    have=$(ctr -n k8s.io images ls -q 2>/dev/null)
    while read -r name ref; do
        grep -qxF "$ref" <<<"$have" && continue
        ctr -n k8s.io images import --no-unpack=false "$IMAGES/$name.tar" >/dev/null ||
            fail "ctr images import $IMAGES/$name.tar failed"
    done <"$IMAGES/refs"
}

exec_server() {
    # dropbear reads root's ~/.ssh/authorized_keys only; /root is the host's, read-only here,
    # so it gets a memory overlay (the host's files, /root/.cache among them, stay visible).
    mkdir -p /run/root-overlay/upper /run/root-overlay/work
    mount -t overlay overlay -o lowerdir=/root,upperdir=/run/root-overlay/upper,workdir=/run/root-overlay/work /root ||
        fail "cannot overlay /root"
    mkdir -p /root/.ssh && cp "$LAB_SSH_PUB" /root/.ssh/authorized_keys || fail "cannot write /root/.ssh/authorized_keys"
    chmod 700 /root /root/.ssh && chmod 600 /root/.ssh/authorized_keys
    # dropbear runs a command with root's shell, and Debian's bash (built with SSH_SOURCE_BASHRC)
    # then sources ~/.bashrc: the host's, which may run anything. One running `pyenv init` made
    # each `install/lab.sh node` call take 20 to 50 s under TCG. The node's root has its own.
    printf '# the lab node: nothing, see install/lab/node.sh exec_server\n' | tee /root/.bashrc >/root/.profile ||
        fail "cannot write /root/.bashrc"
    dropbear -r "$LAB_SSH_HOSTKEY" -p "$NODE_IP:22" -s -E 2>>"$LOGDIR/dropbear.log" ||
        fail "dropbear did not start"
}

boot() {
    mkdir -p "$LOGDIR" /run/lab
    cp "$LAB_NODE_ENV" /run/lab/node.env
    mount_disk
    no_huge_page_scans
    network
    modules
    cni_defaults
    containerd_config
    kubelet_config
    exec_server
    start_service containerd
    wait_containerd
    import_images
    start_service kube-proxy
    start_service kubelet
    echo "LABNODE $NODE UP"
    echo "LABNODE $NODE UP" >/dev/console 2>/dev/null
    # The VM lives as long as this script: lab.sh stops it by powering it off.
    while :; do sleep 3600; done
}

case ${1:-} in
boot) boot ;;
start) start_service "${2:?service}" && wait_serving "$2" ;;
stop) stop_service "${2:?service}" ;;
restart) stop_service "${2:?service}" && start_service "$2" && wait_serving "$2" ;;
status) for s in "${SERVICES[@]}"; do echo "$s $(pidof_service "$s" || echo stopped)"; done ;;
*) echo "usage: node.sh boot | start|stop|restart SERVICE | status" >&2; exit 2 ;;
esac

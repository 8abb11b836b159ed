# Shared by install/lab.sh and the scripts of install/lab/ (sourced, never run).
# LAB_CACHE holds what is built once and kept between labs (components, images, the Linux 7
# kernel): `lab.sh down` leaves it, `rm -rf` of it is the whole purge. LAB_STATE holds one
# running lab (certificates, logs, node disks, pids); `lab.sh down` removes it.

LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_REPO=$(cd "$LAB_DIR/../.." && pwd)
LAB_CACHE=${RDMA_NS_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-ns/lab}
LAB_STATE=${RDMA_NS_LAB_STATE:-/var/lib/rdma-ns-lab}
# The Linux 7 kernel is the VM tier's (docs/testing.md, "VM tier"): same cache, same fetch.
LAB_KERNEL_CACHE=${RDMA_NS_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-ns/vm-kernels}

lab_now() { date +%s.%N; }
lab_since() { awk -v a="$1" -v b="$(lab_now)" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "lab: $*" >&2; }
die() {
    echo "lab: $*" >&2
    exit 1
}

# The pinned version of a component of install/lab/versions.
lab_version() {
    local v
    v=$(awk -v n="$1" '$1 == n { print $3 }' "$LAB_DIR/versions")
    [[ -n $v ]] || die "install/lab/versions names no component '$1'"
    echo "$v"
}
lab_module() { awk -v n="$1" '$1 == n { print $2 }' "$LAB_DIR/versions"; }

# Where a component's binaries are kept: one directory per name and version.
lab_bin_dir() { echo "$LAB_CACHE/bin/$1-$(lab_version "$1")"; }
# The components `up` builds and makes images of: all of install/lab/versions, but NFD when
# RDMA_NS_LAB_NODE_FEATURES=0 leaves NFD out of the recipe (install/lab/recipe.sh).
lab_components() {
    awk '!/^#/ && NF { print $1 }' "$LAB_DIR/versions" |
        if [[ ${RDMA_NS_LAB_NODE_FEATURES:-1} == 0 ]]; then grep -vx nfd; else cat; fi
}
# Whether `up` builds component $1 (lab_components names it).
lab_has_component() {
    local c
    for c in $(lab_components); do [[ $c == "$1" ]] && return 0; done
    return 1
}

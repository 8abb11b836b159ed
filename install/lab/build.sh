#!/usr/bin/env bash
# Builds the lab's Kubernetes components from the Go module proxy at the versions pinned in
# install/lab/versions, each into $LAB_CACHE/bin/<name>-<version>/ (install/lab/common.sh). A
# component whose directory holds a stamp of the same recipe is not built again, so a second run
# builds nothing. Prints one line per component, "<name> <version> (built in N s|cached)", on
# stdout.
#
#   install/lab/build.sh [COMPONENT...]    (default: all of install/lab/versions, less NFD with
#                                           RDMA_NS_LAB_NODE_FEATURES=0: lab_components)
#   install/lab/build.sh --check           only check the prerequisites
#
# Go's module and build caches live under the lab cache too (GOMODCACHE, GOCACHE), so the
# user's own are never touched and removing the lab cache removes everything this built. The
# proxy is the one `go env GOPROXY` names on this machine; no address is written here.
# GOTOOLCHAIN=local: a module that needs a newer Go than the machine's fails with Go's message
# instead of fetching a toolchain.
set -euo pipefail
. "$(dirname "$0")/common.sh"

export GOMODCACHE=$LAB_CACHE/go/mod GOCACHE=$LAB_CACHE/go/build GOPATH=$LAB_CACHE/go/path
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0

check_prerequisites() {
    local missing=() t
    for t in go:"Go 1.26 (golang, or the machine's own Go)" gcc:gcc pkg-config:pkg-config; do
        command -v "${t%%:*}" >/dev/null || missing+=("${t%%:*} (${t#*:})")
    done
    pkg-config --exists libseccomp 2>/dev/null || missing+=("libseccomp for runc's seccomp support (libseccomp-dev)")
    [[ -e /usr/lib/x86_64-linux-gnu/libc.a ]] || missing+=("a static libc for the pause binary (libc6-dev)")
    ((${#missing[@]} == 0)) || die "build prerequisites missing: ${missing[*]}"
    local goversion
    goversion=$(go env GOVERSION)
    [[ $goversion =~ ^go1\.(2[6-9]|[3-9][0-9]) ]] || die "Go $goversion is too old: the pinned Kubernetes needs Go 1.26"
}

# The directory `go mod download` unpacked MODULE@VERSION into (read-only).
module_dir() {
    local out
    out=$(go mod download -json "$1@$2") || die "go mod download $1@$2 failed: $out"
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p' <<<"$out"
}

# A writable copy of a module's tree, where its own go.mod (with its replace and exclude
# directives, which `go install MOD@VER` refuses) is the main module.
module_copy() {
    local name=$1 src dst=$LAB_CACHE/src/$1-$(lab_version "$1")
    src=$(module_dir "$(lab_module "$name")" "$(lab_version "$name")")
    [[ -d $src ]] || die "$name: no module directory from go mod download"
    rm -rf "$dst"
    mkdir -p "$(dirname "$dst")"
    cp -r "$src" "$dst"
    chmod -R u+w "$dst"
    echo "$dst"
}

build_kubernetes() {
    local out=$1 v src=$LAB_DIR/kube
    v=$(lab_version kubernetes)
    grep -q "k8s.io/kubernetes $v\$" "$src/go.mod" || die "install/lab/kube/go.mod does not require k8s.io/kubernetes $v"
    grep -q "go.etcd.io/etcd/server/v3 $(lab_version etcd)\$" "$src/go.mod" ||
        die "install/lab/kube/go.mod does not require go.etcd.io/etcd/server/v3 $(lab_version etcd)"
    local minor=${v#v1.}
    minor=${minor%%.*}
    local ld="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ld+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
        ld+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    # One binary for every program: they share most of their code, so it links once.
    go build -C "$src" -mod=readonly -trimpath -ldflags "$ld" -o "$out/kube" .
    local program
    for program in etcd kubectl kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
        ln -sf kube "$out/$program"
    done
}

build_containerd() {
    local out=$1 src v pkg=github.com/containerd/containerd/v2
    v=$(lab_version containerd)
    src=$(module_copy containerd)
    # The lab's one change to a component: CRI gives the handling of one task event (TaskExit
    # among them: stop the container, `runc delete`) a fixed 10 s and then requeues it. On a TCG
    # node under load `runc delete` takes longer than that every time, so a pod whose
    # containers had exited stayed Terminating for over 85 minutes, through containerd restarts
    # (stop 35). 2 minutes is enough under TCG; events stay serial, as upstream's are.
    local f patched=0
    while IFS= read -r f; do
        sed -i 's/handleEventTimeout = 10 \* time\.Second/handleEventTimeout = 2 * time.Minute/' "$f"
        patched=$((patched + 1))
    done < <(grep -rl --include='*.go' 'handleEventTimeout = 10 \* time\.Second' "$src/internal/cri")
    ((patched > 0)) || die "containerd $v: no handleEventTimeout = 10 * time.Second in internal/cri to raise (the lab's patch needs a new look)"
    local ld="-s -w -X $pkg/version.Version=$v+lab -X $pkg/version.Package=$pkg"
    for cmd in containerd containerd-shim-runc-v2 ctr; do
        go build -C "$src" -trimpath -tags "no_btrfs no_devmapper no_zfs" -ldflags "$ld" -o "$out/$cmd" "./cmd/$cmd"
    done
}

build_runc() {
    local out=$1 src v
    v=$(lab_version runc)
    src=$(module_copy runc)
    # runc's own default tags less libpathrs (a Rust library Debian 12 does not have); its
    # nsenter is C, so cgo; seccomp through Debian's libseccomp.
    CGO_ENABLED=1 go build -C "$src" -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs" \
        -ldflags "-X main.gitCommit=$v" -o "$out/runc" .
}

build_cri_tools() {
    local out=$1 src v
    v=$(lab_version cri-tools)
    src=$(module_copy cri-tools)
    go build -C "$src" -trimpath -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$v" \
        -o "$out/crictl" ./cmd/crictl
}

build_multus() {
    local out=$1 src v pkg=gopkg.in/k8snetworkplumbingwg/multus-cni.v4/pkg/multus
    v=$(lab_version multus)
    src=$(module_copy multus)
    # The programs of its hack/build-go.sh that the thin plugin's DaemonSet runs or copies
    # (install_multus copies passthru beside multus).
    for cmd in multus install_multus thin_entrypoint kubeconfig_generator passthru-cni; do
        go build -C "$src" -trimpath -ldflags "-s -w -X $pkg.version=$v -X $pkg.releaseStatus=,released" \
            -o "$out/${cmd/passthru-cni/passthru}" "./cmd/$cmd"
    done
    cp "$src/deployments/multus-daemonset.yml" "$out/"
}

build_whereabouts() {
    local out=$1 src v
    v=$(lab_version whereabouts)
    src=$(module_copy whereabouts)
    local ld="-s -w -X github.com/k8snetworkplumbingwg/whereabouts/pkg/version.Version=$v"
    go build -C "$src" -trimpath -ldflags "$ld" -o "$out/whereabouts" ./cmd/whereabouts.go
    go build -C "$src" -trimpath -ldflags "$ld" -o "$out/ip-control-loop" ./cmd/controlloop
    cp -r "$src/script" "$src/doc/crds" "$out/"
}

build_rdma_shared_dp() {
    local out=$1 src
    src=$(module_copy rdma-shared-dp)
    go build -C "$src" -trimpath -ldflags "-s -w" -o "$out/k8s-rdma-shared-dp" ./cmd/k8s-rdma-shared-dp
    cp -r "$src/deployment" "$out/"
}

build_nfd() {
    local out=$1 src v
    v=$(lab_version nfd)
    src=$(module_copy nfd)
    # Its API is a module of its own, which go.mod replaces by ./api/nfd: a directory the
    # module's zip leaves out (nested modules never ride along). The same version of it goes there.
    rm -rf "$src/api/nfd"
    cp -r "$(module_dir sigs.k8s.io/node-feature-discovery/api/nfd "$v")" "$src/api/nfd"
    chmod -R u+w "$src/api/nfd"
    for cmd in nfd-master nfd-worker nfd-gc; do
        go build -C "$src" -trimpath -ldflags "-s -w -X sigs.k8s.io/node-feature-discovery/pkg/version.version=$v" \
            -o "$out/$cmd" "./cmd/$cmd"
    done
    cp -r "$src/deployment" "$out/"
}

# libcni-run (tests/support/libcni): libcni's ADD, DEL and GC of a conflist, as runtimes call
# them, for the root tier (tests/dra_attach.rs).
build_libcni() {
    local out=$1 v src=$LAB_REPO/tests/support/libcni
    v=$(lab_version libcni)
    grep -q "github.com/containernetworking/cni $v\$" "$src/go.mod" ||
        die "tests/support/libcni/go.mod does not require github.com/containernetworking/cni $v"
    go build -C "$src" -mod=readonly -trimpath -ldflags "-s -w" -o "$out/libcni-run" .
}

# helm, for the chart of install/helm/rdma-ns (lab.sh helm, tests/helm.rs). Its Makefile's
# ldflags for a tagged release: the version, no "unreleased" metadata.
build_helm() {
    local out=$1 src v pkg=helm.sh/helm/v4/internal/version
    v=$(lab_version helm)
    src=$(module_copy helm)
    go build -C "$src" -trimpath -ldflags "-s -w -X $pkg.version=$v -X $pkg.metadata= -X $pkg.gitTreeState=clean" \
        -o "$out/helm" ./cmd/helm
}

# The stamp: the component's recipe (its build function, as bash prints it) and what went into
# the build (the version, the Go version, and for kubernetes its go.mod, go.sum and main.go), so
# a changed pin or recipe rebuilds that component and nothing else does.
stamp_of() {
    local name=$1
    declare -f "build_${name//-/_}" | sha256sum
    printf '%s %s %s\n' "$name" "$(lab_version "$name")" "$(go env GOVERSION)"
    [[ $name != kubernetes ]] || cat "$LAB_DIR/kube/go.mod" "$LAB_DIR/kube/go.sum" "$LAB_DIR/kube/main.go" | sha256sum
    [[ $name != libcni ]] || cat "$LAB_REPO/tests/support/libcni/"{go.mod,go.sum,main.go} | sha256sum
}

build_one() {
    local name=$1 out start
    out=$(lab_bin_dir "$name")
    if [[ -f $out/.stamp ]] && cmp -s "$out/.stamp" <(stamp_of "$name"); then
        echo "$name $(lab_version "$name") (cached)"
        return
    fi
    start=$(lab_now)
    say "building $name $(lab_version "$name") from $(lab_module "$name")"
    rm -rf "$out"
    mkdir -p "$out"
    # Any failing command of a recipe stops here (set -e), with this message.
    trap 'die "building $name $(lab_version "$name") failed (output above)"' ERR
    "build_${name//-/_}" "$out"
    trap - ERR
    stamp_of "$name" >"$out/.stamp"
    rm -rf "$LAB_CACHE/src/$name-$(lab_version "$name")"
    echo "$name $(lab_version "$name") (built in $(lab_since "$start") s)"
}

main() {
    check_prerequisites
    [[ ${1:-} != --check ]] || return 0
    local names=("$@") name built=0
    ((${#names[@]})) || mapfile -t names < <(lab_components)
    for name in "${names[@]}"; do
        [[ $name == etcd ]] && continue # inside the kubernetes binary
        cmp -s "$(lab_bin_dir "$name")/.stamp" <(stamp_of "$name") 2>/dev/null || built=1
        build_one "$name"
    done
    # Go's build cache (6.7 GB after Kubernetes) serves nothing once every binary is stamped; the
    # module cache (2.2 GB) stays, so a changed pin downloads only what changed.
    if ((built)) && [[ ${RDMA_NS_LAB_KEEP_GOCACHE:-0} != 1 ]]; then
        go clean -cache
        say "Go's build cache removed (RDMA_NS_LAB_KEEP_GOCACHE=1 keeps it)"
    fi
}

main "$@"

#!/usr/bin/env bash
# Builds the lab's container images as OCI image tars in $LAB_CACHE/images/ (install/lab/oci.py;
# there is no registry: the nodes import the tars into containerd). Each image is rebuilt only
# when what goes into it changed (a key of its inputs is kept beside it). Prints
# "<name> <reference>" for each image on stdout, and writes the same lines to
# $LAB_CACHE/images/refs, which install/lab.sh reads to set the manifests' images.
#
#   install/lab/images.sh            all images (install/lab/build.sh must have run)
#
# The images:
#   pause            Kubernetes' own pause.c (from the k8s.io/kubernetes module), static
#   installer        install/Containerfile's final stage, read and carried out here (below)
#   lab-tools        rdma-ns/lab-tools: Debian's ibverbs-utils, rdmacm-utils, perftest,
#                    ucx-utils, iproute2 and tcpdump, as this machine has them (debs.py), busybox
#                    for a shell, rdma-ns at /usr/local/bin/rdma-ns; also named
#                    rdma-ns/lab-tools:latest, the name a user's own pod gives
#   lab-tools-plain  the same without rdma-ns: a training image that knows nothing of it
#   dra              install/dra/Containerfile's final stage: rdma-ns-dra (release, feature
#                    dra) with the glibc libraries it links (ldd) in place of Debian's slim base
#   multus, whereabouts, rdma-shared-dp, nfd
#                    each project's binaries at the paths its own Dockerfile puts them, on
#                    Debian's busybox-static in place of its base image
set -euo pipefail
. "$(dirname "$0")/common.sh"

IMAGES=$LAB_CACHE/images
OCI=(python3 "$LAB_DIR/oci.py")
BUSYBOX=/bin/busybox
TOOLS_PACKAGES=(ibverbs-utils ibverbs-providers rdmacm-utils perftest ucx-utils iproute2 tcpdump)

# key_of FILE...: one hash of the files' contents and the words after --. Contents only, never a
# path on this machine (`sha256sum <FILE`; an image's sources by content, its destinations by
# name), so a clone in another directory finds the images already built.
key_of() {
    local files=() words=()
    while (($#)); do
        [[ $1 == -- ]] && { shift; words=("$@"); break; }
        files+=("$1")
        shift
    done
    { cat "${files[@]}"; printf '%s\n' "${words[@]}" "$(sha256sum <"$LAB_DIR/oci.py")"; } | sha256sum | cut -c1-12
}

# image NAME KEY REF -- OCI-ARGS...: builds $IMAGES/NAME.tar unless its key is the same.
image() {
    local name=$1 key=$2 ref=$3
    shift 4
    if [[ -f $IMAGES/$name.tar && $(cat "$IMAGES/$name.key" 2>/dev/null) == "$key" ]]; then
        echo "$name $ref"
        return
    fi
    say "image $name ($ref)"
    "${OCI[@]}" --ref "$ref" --out "$IMAGES/$name.tar" "$@"
    echo "$key" >"$IMAGES/$name.key"
    echo "$name $ref"
}

pause_image() {
    local src out=$IMAGES/work/pause k8s tag
    k8s=$(lab_version kubernetes)
    src=$(GOMODCACHE=$LAB_CACHE/go/mod GOFLAGS= go mod download -json "k8s.io/kubernetes@$k8s" |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')/build/pause
    tag=$(sed -n 's/^TAG ?= //p' "$src/Makefile")
    [[ -n $tag ]] || die "no TAG in $src/Makefile"
    mkdir -p "$out"
    # The flags of build/pause/Makefile.
    gcc -Os -Wall -Werror -static -DVERSION="v$tag-lab" -o "$out/pause" "$src/linux/pause.c"
    image pause "$(key_of "$out/pause")" "registry.k8s.io/pause:$tag" -- \
        --files /pause="$out/pause" --entrypoint '["/pause"]' --user 65535:65535
}

# The static musl rdma-ns, as install/Containerfile's build stage makes it (RDMA_NS_GIT_COMMIT
# in the environment names the commit its --version prints, as for the Containerfile).
musl_binary() {
    local bin
    bin=$(cd "$LAB_REPO" && install/build.sh --target amd64 2>/dev/null) || die "install/build.sh --target amd64 failed"
    bin=$LAB_REPO/$bin
    if ldd "$bin" 2>/dev/null | grep -q '=>'; then die "$bin is not static"; fi
    echo "$bin"
}

# The lines of a Containerfile's final stage (after its last FROM), comments left out.
final_stage() {
    awk '/^FROM /{stage=""} {stage = stage $0 "\n"} END {printf "%s", stage}' "$1" | grep -v '^#'
}

# install/Containerfile's final stage (after its last FROM), carried out: COPY from the build
# stage (its only artifact, /rdma-ns, is the musl binary) or from the repository, and
# ENTRYPOINT. Any other instruction stops the build, so the image cannot silently drift from
# the Containerfile. Busybox is Debian's busybox-static in place of busybox:1.36-musl.
installer_image() {
    local bin=$1 tag=$2 line args=() files=() entry=""
    while read -r line; do
        case $line in
        "COPY --from=build /rdma-ns "*) files+=("${line##* }=$bin") ;;
        "COPY "*) set -- $line && files+=("$3=$LAB_REPO/$2") ;;
        "ENTRYPOINT "*) entry=${line#ENTRYPOINT } ;;
        "FROM "* | "") ;;
        *) die "install/Containerfile's final stage has '$line', which images.sh cannot carry out" ;;
        esac
    done < <(final_stage "$LAB_REPO/install/Containerfile")
    [[ -n $entry ]] || die "install/Containerfile's final stage has no ENTRYPOINT"
    args=(--busybox "$BUSYBOX" --files "${files[@]}" --entrypoint "$entry")
    image "${NAME:-installer}" "$(key_of "$LAB_REPO/install/Containerfile" "${files[@]#*=}" -- "$tag" "${files[@]%%=*}")" \
        "localhost/rdma-ns-installer:$tag" -- "${args[@]}"
}

# install/dra/Containerfile's final stage, carried out like the installer's: its COPY of the
# build stage's /rdma-ns-dra and its ENTRYPOINT. The driver links glibc dynamically, so the
# image holds the libraries ldd names (the node's glibc is never mounted into a container) where
# Debian's slim base would have them.
driver_image() {
    local tag=$1 commit bin line files=() entry="" lib
    commit=$(git -C "$LAB_REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
    # A target dir of its own: tests/run.sh runs this build beside the VM tier's cargo, which
    # would otherwise wait on the lock of the shared one for the minutes of a release build.
    (cd "$LAB_REPO" && RDMA_NS_GIT_COMMIT=$commit CARGO_TARGET_DIR=$LAB_REPO/target/lab-driver \
        cargo build -q --release --locked --features dra --bin rdma-ns-dra) >&2 ||
        die "cargo build --release --features dra --bin rdma-ns-dra failed"
    bin=$LAB_REPO/target/lab-driver/release/rdma-ns-dra
    while read -r line; do
        case $line in
        "COPY --from=build /rdma-ns-dra "*) files+=("${line##* }=$bin") ;;
        "ENTRYPOINT "*) entry=${line#ENTRYPOINT } ;;
        "FROM "* | "") ;;
        *) die "install/dra/Containerfile's final stage has '$line', which images.sh cannot carry out" ;;
        esac
    done < <(final_stage "$LAB_REPO/install/dra/Containerfile")
    [[ -n $entry && ${#files[@]} == 1 ]] || die "install/dra/Containerfile's final stage has no COPY of /rdma-ns-dra or no ENTRYPOINT"
    for lib in $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
        files+=("$lib=$(readlink -f "$lib")")
    done
    image dra "$(key_of "$LAB_REPO/install/dra/Containerfile" "${files[@]#*=}" -- "$tag" "${files[@]%%=*}")" \
        "localhost/rdma-ns-dra:$tag" -- --files "${files[@]}" --entrypoint "$entry"
}

tools_image() {
    local bin=$1 root=$IMAGES/work/lab-tools list uris key
    list=$(python3 "$LAB_DIR/debs.py" "${TOOLS_PACKAGES[@]}") || die "the tools image's packages are not all installed"
    # What the sources serve now: file names and checksums, known without downloading.
    uris=$(apt-get download --print-uris $list) || die "apt-get download --print-uris of the tools image's packages failed"
    key=$(key_of "$bin" -- "$(awk '{ print $2, $4 }' <<<"$uris")")
    if [[ -f $IMAGES/lab-tools.tar && $(cat "$IMAGES/lab-tools.key" 2>/dev/null) == "$key" &&
        -f $IMAGES/lab-tools-plain.tar && $(cat "$IMAGES/lab-tools-plain.key" 2>/dev/null) == "$key" ]]; then
        echo "lab-tools docker.io/rdma-ns/lab-tools:$key"
        echo "lab-tools-plain docker.io/rdma-ns/lab-tools-plain:$key"
        return
    fi
    mkdir -p "$LAB_CACHE/debs"
    # apt-get download checks each package against the signed index.
    (cd "$LAB_CACHE/debs" && apt-get download -q -o APT::Sandbox::User=root $list >/dev/null) || die "apt-get download of the tools image's packages failed"
    rm -rf "$root" && mkdir -p "$root"
    local deb
    for deb in $(awk '{ print $2 }' <<<"$uris"); do
        dpkg-deb -x "$LAB_CACHE/debs/$deb" "$root"
    done
    mkdir -p "$root/usr/local/bin" "$root/bin" "$root/tmp" "$root/root" "$root/etc"
    chmod 1777 "$root/tmp"
    cp "$BUSYBOX" "$root/bin/busybox"
    local applet
    for applet in $("$BUSYBOX" --list); do
        [[ -e $root/bin/$applet || -e $root/usr/bin/$applet || -e $root/sbin/$applet || -e $root/usr/sbin/$applet ]] ||
            ln -s busybox "$root/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
    printf 'root:x:0:\n' >"$root/etc/group"
    ldconfig -r "$root"
    image lab-tools-plain "$key" "docker.io/rdma-ns/lab-tools-plain:$key" -- --tree "$root" --cmd '["/bin/sh"]'
    cp "$bin" "$root/usr/local/bin/rdma-ns"
    image lab-tools "$key" "docker.io/rdma-ns/lab-tools:$key" -- --ref docker.io/rdma-ns/lab-tools:latest \
        --tree "$root" --cmd '["/bin/sh"]'
    rm -rf "$root"
}

component_images() {
    local d
    d=$(lab_bin_dir multus)
    local m=/usr/src/multus-cni/bin
    image multus "$(key_of "$d/.stamp")" "localhost/multus-cni:$(lab_version multus)" -- --busybox "$BUSYBOX" \
        --files $m/="$d/multus" $m/="$d/passthru" $m/="$d/install_multus" $m/="$d/thin_entrypoint" \
        $m/="$d/kubeconfig_generator" /install_multus=@$m/install_multus /thin_entrypoint=@$m/thin_entrypoint \
        /kubeconfig_generator=@$m/kubeconfig_generator --entrypoint '["/thin_entrypoint"]'
    d=$(lab_bin_dir whereabouts)
    image whereabouts "$(key_of "$d/.stamp")" "localhost/whereabouts:$(lab_version whereabouts)" -- --busybox "$BUSYBOX" \
        --files /="$d/whereabouts" /="$d/ip-control-loop" /install-cni.sh="$d/script/install-cni.sh" \
        /lib.sh="$d/script/lib.sh" /token-watcher.sh="$d/script/token-watcher.sh" --cmd '["/install-cni.sh"]'
    d=$(lab_bin_dir rdma-shared-dp)
    image rdma-shared-dp "$(key_of "$d/.stamp" /usr/share/misc/pci.ids)" \
        "localhost/k8s-rdma-shared-dev-plugin:$(lab_version rdma-shared-dp)" -- --busybox "$BUSYBOX" \
        --files /bin/="$d/k8s-rdma-shared-dp" /usr/share/hwdata/pci.ids=/usr/share/misc/pci.ids \
        --cmd '["/bin/k8s-rdma-shared-dp"]'
    lab_has_component nfd || return 0
    d=$(lab_bin_dir nfd)
    image nfd "$(key_of "$d/.stamp")" "localhost/node-feature-discovery:$(lab_version nfd)" -- \
        --files /usr/bin/="$d/nfd-master" /usr/bin/="$d/nfd-worker" /usr/bin/="$d/nfd-gc" \
        /etc/kubernetes/node-feature-discovery/nfd-worker.conf="$d/deployment/components/worker-config/nfd-worker.conf.example" \
        --user 65534:65534 --env GRPC_GO_LOG_SEVERITY_LEVEL=INFO
}

# A second installer image whose binary says "<commit>-next" (RDMA_NS_LAB_NEXT_INSTALLER=1):
# the Kubernetes tier updates the installer DaemonSet to it. Built before the real one, since
# both builds write the same target path.
next_installer() {
    local bin commit
    commit=$(git -C "$LAB_REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
    bin=$(RDMA_NS_GIT_COMMIT="$commit-next" musl_binary)
    cp "$bin" "$IMAGES/work/rdma-ns-next"
    NAME=installer-next installer_image "$IMAGES/work/rdma-ns-next" "$("$bin" --version | awk '{ gsub(/[()]/, ""); print $2 "-" $4 }')"
}

main() {
    mkdir -p "$IMAGES/work"
    local bin tag next=""
    [[ ${RDMA_NS_LAB_NEXT_INSTALLER:-0} == 1 ]] && next=$(next_installer)
    bin=$(musl_binary)
    tag=$("$bin" --version | awk '{ gsub(/[()]/, ""); print $2 "-" $4 }')
    {
        [[ -z $next ]] || echo "$next"
        pause_image
        installer_image "$bin" "$tag"
        driver_image "$tag"
        tools_image "$bin"
        component_images
    } | tee "$IMAGES/refs.tmp"
    mv "$IMAGES/refs.tmp" "$IMAGES/refs"
}

main "$@"

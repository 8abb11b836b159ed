#!/usr/bin/env bash
# Makes the tree every node disk starts from: containerd's store (/var/lib/containerd) with the
# lab's images imported and unpacked, by the lab's own containerd running here on the host, in
# a private root. install/lab.sh writes it into each node's disk with `mkfs.ext4 -d`.
#
#   install/lab/seed.sh      prints the seed directory ($LAB_CACHE/seed/<key>) on stdout
#
# Why not import on the node: under TCG every byte of an import is hashed twice and unpacked by
# an emulated CPU over 9p, about 20 minutes for the lab's images on a busy 2-core machine; here
# it takes seconds, and the node's containerd (the same version, the same snapshotter) finds the
# images as if it had pulled them. Cached by the images' keys.
set -euo pipefail
. "$(dirname "$0")/common.sh"

IMAGES=$LAB_CACHE/images
# This script's contents, not its path (`sha256sum <`), so a clone elsewhere finds the seed; the
# refs sorted, so that the order images.sh printed them in (it differed between a build of the
# tools images and a cached run) cannot make a new seed.
key=$({ cat "$IMAGES"/*.key; sort "$IMAGES/refs"; lab_version containerd; sha256sum <"$0"; } | sha256sum | cut -c1-12)
seed=$LAB_CACHE/seed/$key
if [[ -f $seed/.done ]]; then
    echo "$seed"
    exit 0
fi
rm -rf "$LAB_CACHE/seed"
mkdir -p "$seed/var/lib/containerd"
run=$(mktemp -d /tmp/rdma-ns-lab-seed.XXXXXX)
bin=$(lab_bin_dir containerd)
cat >"$run/config.toml" <<EOF
version = 3
root = "$seed/var/lib/containerd"
state = "$run/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing", "io.containerd.nri.v1.nri"]
[grpc]
  address = "$run/containerd.sock"
[ttrpc]
  address = "$run/containerd.sock.ttrpc"
EOF
"$bin/containerd" --config "$run/config.toml" >"$run/containerd.log" 2>&1 &
cd_pid=$!
trap 'kill "$cd_pid" 2>/dev/null; wait "$cd_pid" 2>/dev/null; rm -rf "$run"' EXIT
for _ in $(seq 100); do
    "$bin/ctr" --address "$run/containerd.sock" version >/dev/null 2>&1 && break
    sleep 0.1
done
"$bin/ctr" --address "$run/containerd.sock" version >/dev/null 2>&1 || die "the seeding containerd did not start: $(tail -5 "$run/containerd.log")"
while read -r name ref; do
    # CRI lists only images with this label as its own; the node's kubelet then sees them.
    "$bin/ctr" --address "$run/containerd.sock" -n k8s.io images import --snapshotter overlayfs \
        --label io.cri-containerd.image=managed "$IMAGES/$name.tar" >/dev/null ||
        die "ctr images import $IMAGES/$name.tar failed ($ref)"
done <"$IMAGES/refs"
touch "$seed/.done"
echo "$seed"

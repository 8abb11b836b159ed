#!/bin/sh
# Installs rdma-ns on a host: the binary into the CNI bin dir and, optionally, a network
# configuration from conf/ into the CNI conf dir. Both are placed atomically: written to a temp
# name in the target directory, then renamed over the final name, so a runtime exec'ing the
# plugin or reading the conf dir never sees a half-written file.
#
#   install/install.sh [options]
#     --binary PATH      install this binary (default: build the shipped static musl binary with
#                        install/build.sh)
#     --bin-dir DIR      CNI bin dir (default /opt/cni/bin)
#     --conf NAME|PATH   also install a network configuration: a name from conf/ (e.g. `move`
#                        for conf/move.conflist) or a path to a .conflist/.conf file
#     --conf-dir DIR     CNI conf dir (default /etc/cni/net.d)
#     --conf-name FILE   file name in the conf dir (default: 90-rdma-ns-<conf file name>, sorted
#                        after the usual primary network so it never becomes the default one)
#     --force            replace an existing, different conf file (the binary is always replaced)
#     -h, --help
#
# POSIX sh and coreutils/busybox only: the installer image runs it too.
set -eu

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; }
die() { echo "install.sh: $*" >&2; exit 1; }

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
binary=""
bin_dir=/opt/cni/bin
conf=""
conf_dir=/etc/cni/net.d
conf_name=""
force=0

while [ $# -gt 0 ]; do
  case "$1" in
    --binary) [ $# -ge 2 ] || die "--binary needs a path"; binary=$2; shift 2 ;;
    --bin-dir) [ $# -ge 2 ] || die "--bin-dir needs a directory"; bin_dir=$2; shift 2 ;;
    --conf) [ $# -ge 2 ] || die "--conf needs a name or path"; conf=$2; shift 2 ;;
    --conf-dir) [ $# -ge 2 ] || die "--conf-dir needs a directory"; conf_dir=$2; shift 2 ;;
    --conf-name) [ $# -ge 2 ] || die "--conf-name needs a file name"; conf_name=$2; shift 2 ;;
    --force) force=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

# place SRC DIR NAME MODE: copy SRC to DIR/.NAME.tmp.PID, set MODE, fsync where possible, then
# rename(2) it over DIR/NAME (same directory, so same filesystem: the rename is atomic).
place() {
  src=$1 dir=$2 name=$3 mode=$4
  tmp="$dir/.$name.tmp.$$"
  trap 'rm -f "$tmp"' EXIT INT TERM
  cp "$src" "$tmp"
  chmod "$mode" "$tmp"
  sync "$tmp" 2>/dev/null || sync
  mv -f "$tmp" "$dir/$name"
  trap - EXIT INT TERM
}

# --- the binary
if [ -z "$binary" ]; then
  command -v cargo >/dev/null 2>&1 || die "no --binary given and cargo is not on PATH"
  echo "building rdma-ns (install/build.sh: release, static musl) in $repo"
  binary=$repo/$("$repo/install/build.sh")
fi
[ -f "$binary" ] || die "binary not found: $binary"
[ -x "$binary" ] || die "binary is not executable: $binary"
mkdir -p "$bin_dir"
place "$binary" "$bin_dir" rdma-ns 0755
# The placed binary must answer VERSION as a runtime would ask it.
version=$(CNI_COMMAND=VERSION "$bin_dir/rdma-ns" </dev/null) ||
  die "$bin_dir/rdma-ns does not run on this host (a static musl build runs anywhere)"
case "$version" in
  *supportedVersions*) ;;
  *) die "$bin_dir/rdma-ns answered VERSION with: $version" ;;
esac
echo "installed $bin_dir/rdma-ns ($version)"

# --- the network configuration
[ -n "$conf" ] || exit 0
case "$conf" in
  */*) conf_src=$conf ;;
  *) conf_src=$repo/conf/$conf.conflist ;;
esac
[ -f "$conf_src" ] || die "conf not found: $conf_src (names in $repo/conf: $(cd "$repo/conf" 2>/dev/null && ls | sed 's/\.conflist$//' | tr '\n' ' '))"
if command -v python3 >/dev/null 2>&1; then
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); assert any(p.get("type")=="rdma-ns" for p in c.get("plugins",[c]))' "$conf_src" 2>/dev/null ||
    die "$conf_src is not JSON with an rdma-ns plugin"
fi
[ -n "$conf_name" ] || conf_name=90-rdma-ns-$(basename "$conf_src")
case "$conf_name" in */*|.*|"") die "bad --conf-name: $conf_name" ;; esac
mkdir -p "$conf_dir"
if [ -e "$conf_dir/$conf_name" ] && ! cmp -s "$conf_src" "$conf_dir/$conf_name" && [ "$force" != 1 ]; then
  die "$conf_dir/$conf_name exists and differs from $conf_src; use --force to replace it"
fi
place "$conf_src" "$conf_dir" "$conf_name" 0644
echo "installed $conf_dir/$conf_name (from $conf_src); edit its device selector for this host"

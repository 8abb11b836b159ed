#!/bin/sh
# Removes rdma-ns from a host in an order that never strands a device: a moved VF or ib device,
# a pod's child interface or changed char-device permissions are put back only by a DEL, and a
# DEL needs the binary and the attachment record. So it refuses while attachments remain
# (`rdma-ns list`), then removes the conf files (no new attachment), the data dir, the modprobe
# snippet and, last, the binary.
#
#   install/uninstall.sh [options]
#     --bin-dir DIR      CNI bin dir (default /opt/cni/bin)
#     --conf-dir DIR     CNI conf dir (default /etc/cni/net.d): its 90-rdma-ns-* files go
#     --data-dir DIR     attachment records (default /var/lib/cni/rdma-ns)
#     --modprobe FILE    also remove this modprobe snippet (e.g. /etc/modprobe.d/ib_core.conf,
#                        installed for exclusive RDMA netns mode; takes effect at the next boot)
#     --force            remove rdma-ns although attachments remain (they are then stranded:
#                        their devices stay where they are until handled by hand)
#     -h, --help
#
# POSIX sh and coreutils/busybox only, like install.sh.
set -eu

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; }
die() { echo "uninstall.sh: $*" >&2; exit 1; }

bin_dir=/opt/cni/bin
conf_dir=/etc/cni/net.d
data_dir=/var/lib/cni/rdma-ns
modprobe=""
force=0

while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) [ $# -ge 2 ] || die "--bin-dir needs a directory"; bin_dir=$2; shift 2 ;;
    --conf-dir) [ $# -ge 2 ] || die "--conf-dir needs a directory"; conf_dir=$2; shift 2 ;;
    --data-dir) [ $# -ge 2 ] || die "--data-dir needs a directory"; data_dir=$2; shift 2 ;;
    --modprobe) [ $# -ge 2 ] || die "--modprobe needs a file"; modprobe=$2; shift 2 ;;
    --force) force=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
bin=$bin_dir/rdma-ns

# remaining: how many attachments the data dir still records (the binary's own count when it is
# there; without it, the record files, which no DEL can use any more).
remaining() {
  [ -d "$data_dir" ] || { echo 0; return; }
  if [ -x "$bin" ]; then
    "$bin" list --json --data-dir "$data_dir" | grep -c '"containerId"' || true
  else
    find "$data_dir" -mindepth 2 -maxdepth 2 -name '*.json' ! -path "$data_dir/locks/*" | wc -l
  fi
}

check_none_left() {
  n=$(remaining)
  [ "$n" -eq 0 ] && return 0
  [ -x "$bin" ] && "$bin" list --data-dir "$data_dir" >&2 || true
  if [ "$force" = 1 ]; then
    echo "uninstall.sh: warning: $n attachment(s) remain and are stranded by --force" >&2
    return 0
  fi
  die "$n attachment(s) remain in $data_dir: delete their pods (their DEL releases them), or run
  \`rdma-ns reconcile\` for those whose netns is gone, then run this again; --force removes
  rdma-ns anyway and leaves their devices where they are"
}

check_none_left
for f in "$conf_dir"/90-rdma-ns-*; do
  [ -e "$f" ] || continue
  rm -f "$f"
  echo "removed $f"
done
# A conf removed above can no longer start an attachment; one that started before is seen here.
check_none_left
if [ -d "$data_dir" ]; then
  rm -rf "$data_dir"
  echo "removed $data_dir"
fi
if [ -n "$modprobe" ] && [ -e "$modprobe" ]; then
  grep -q 'netns_mode' "$modprobe" || die "$modprobe does not set ib_core netns_mode: not removed"
  rm -f "$modprobe"
  echo "removed $modprobe (the RDMA netns mode changes at the next boot)"
fi
if [ -e "$bin" ]; then
  rm -f "$bin"
  echo "removed $bin"
fi

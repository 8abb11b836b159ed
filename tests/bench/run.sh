#!/usr/bin/env bash
# Benchmark of move mode against Debian's host-device, macvlan mode against Debian's macvlan, each
# with an iproute2 floor (see docs/benchmarks.md).
#   tests/bench/run.sh [--cycles N] [--smoke] [--only compare,macvlan,rails,scale,concurrency,start,rss,env,node,softroce,kube,kube-dra,kube-dra-api,kube-start]
# (softroce, asked by name only, boots the VM tier's Linux 7 kernel: tests/bench/softroce_bench.py)
# (kube, kube-dra, kube-dra-api and kube-start, asked by name only, run on the Kubernetes lab:
# tests/bench/kube_bench.py, kube_dra_bench.py, kube_dra_api_bench.py, kube_start_bench.py)
# As root on the machine's own kernel. Prints a table; raw samples go to results/bench-*/.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$HOME/.cargo/bin:$PATH"

# time: /usr/bin/time -v for peak RSS; containernetworking-plugins: host-device, macvlan, static IPAM;
# gcc and libc6-dev: the exporter scrape's floor (scrape_floor.c); strace: checks that the floor
# reads the files a scrape reads, and counts the sysfs files `rdma-ns env` opens (section env).
PKGS=(time containernetworking-plugins iproute2 python3 gcc libc6-dev strace)
if [ "${1:-}" = --print-packages ]; then
  echo "${PKGS[*]}"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "tests/bench/run.sh must run as root (it creates network namespaces and links)" >&2
  exit 1
fi

need=()
for pkg in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi

missing=()
[ -x /usr/bin/time ] || missing+=("/usr/bin/time (time)")
for p in host-device macvlan static; do
  [ -x /usr/lib/cni/$p ] || missing+=("/usr/lib/cni/$p (containernetworking-plugins)")
done
command -v ip >/dev/null || missing+=("ip (iproute2)")
[ -x /usr/bin/python3 ] || missing+=("/usr/bin/python3 (python3)")
command -v cc >/dev/null || missing+=("cc (gcc)")
[ -x /usr/bin/strace ] || missing+=("/usr/bin/strace (strace)")
if [ "${#missing[@]}" -gt 0 ]; then
  echo "benchmark prerequisites missing: ${missing[*]}" >&2
  exit 1
fi

# The binary as it ships (install/build.sh: release profile, static musl).
plugin=$(install/build.sh)
# Debian's python3, not whatever a shell's PATH prefers: only the standard library is used.
exec /usr/bin/python3 tests/bench/bench.py --plugin "$plugin" "$@"

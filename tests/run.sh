#!/usr/bin/env bash
# Runs every test tier; as root on a fresh Debian 12 it first installs what the tests need.
#   tests/run.sh            all tiers: lint, unit, root integration, VM (real RDMA kernel)
#   tests/run.sh --no-vm    skip the VM tier (quick local runs)
#   tests/run.sh --no-bench skip the benchmark smoke run
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

run_vm=1
run_bench=1
for arg in "$@"; do
  case "$arg" in
    --no-vm) run_vm=0 ;;
    --no-bench) run_bench=0 ;;
    *) echo "usage: tests/run.sh [--no-vm] [--no-bench]" >&2; exit 2 ;;
  esac
done

if [ "$(id -u)" != 0 ]; then
  echo "tests/run.sh must run as root (it creates network namespaces and links)" >&2
  exit 1
fi

# Debian packages the root tier uses: iproute2 to set up and inspect, host-local/static IPAM
# from containernetworking-plugins (/usr/lib/cni), python3 for the 1.1.0 test IPAM, flock.
need=()
for pkg in iproute2 containernetworking-plugins python3 util-linux; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi

echo "== lint"
cargo fmt --check
cargo clippy --all-targets -- -D warnings

echo "== unit and root integration tests (host kernel $(uname -r))"
# vm_* tests need the VM tier's kernel (RDMA); they run there, not here.
cargo test -- --skip vm_

if [ -x tests/e2e/run.sh ]; then
  echo "== e2e tier: podman, containerd (ctr and CRI), installer (tests/e2e/run.sh)"
  tests/e2e/run.sh
fi

if [ "$run_bench" = 1 ] && [ -x tests/bench/run.sh ]; then
  echo "== benchmark smoke run (proves the benchmark works; asserts no timing)"
  tests/bench/run.sh --smoke
fi

if [ "$run_vm" = 1 ] && [ -x tests/vm/run.sh ]; then
  echo "== VM tier (Debian kernel with RDMA, Soft-RoCE)"
  tests/vm/run.sh
fi

#!/usr/bin/env bash
# Runs every test tier; as root on a fresh Debian 12 it first installs what the tiers need.
#   tests/run.sh            all tiers: lint, unit, root integration, e2e, benchmark smoke, VM
#                           (one tier, vm: Linux 6.1 and Linux 7 booted at once)
#   tests/run.sh --no-vm    leave out the VM tiers (quick local runs; reported as skipped)
#   tests/run.sh --kube     the Kubernetes tier (kube: tests/kube/run.sh) with all its cases; by
#                           default it runs KUBE_SMOKE only, since all of them on 2 cores under
#                           TCG take longer than CI allows (docs/testing.md, "Kubernetes tier")
#   tests/run.sh --no-kube  leave out the Kubernetes tier (reported as skipped)
#   tests/run.sh --no-bench leave out the benchmark smoke run (reported as skipped)
# Every tier runs even when an earlier one failed. The end is one table (tier, passed, failed,
# skipped), then one line per skip, then as the very last line "N passed, N failed" (with
# ", N skipped" when something was skipped), counting tests and cases over all tiers. The exit
# code is non-zero when anything failed. A skip is never silent: a tier or case may skip only
# because the caller opted in (--no-vm, --no-bench, RDMA_NS_ALLOW_SKIP); CI opts into nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
export PATH="$HOME/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin:$PATH"

run_vm=1
# kube: smoke (the default: KUBE_SMOKE's cases), all (--kube) or none (--no-kube).
run_kube=smoke
run_bench=1
for arg in "$@"; do
  case "$arg" in
    --no-vm) run_vm=0 ;;
    --kube) run_kube=all ;;
    --no-kube) run_kube=none ;;
    --no-bench) run_bench=0 ;;
    *) echo "usage: tests/run.sh [--no-vm] [--no-bench] [--kube | --no-kube]" >&2; exit 2 ;;
  esac
done

if [ "$(id -u)" != 0 ]; then
  echo "tests/run.sh must run as root (it creates network namespaces and links)" >&2
  exit 1
fi

# The tier scripts are run with `bash PATH`, so a lost exec bit cannot drop a tier; a missing
# script is a failure of its tier, reported like any other.
E2E=tests/e2e/run.sh
BENCH=tests/bench/run.sh
VM=tests/vm/run.sh
KUBE=tests/kube/run.sh
LAB_BUILD=install/lab/build.sh
# The kube cases of the default run: the install recipe (docs/install.md), whose pods send RDMA
# across the nodes through the device plugin, Multus and rdma-ns, and RDMA across the nodes
# through rdma-ns-dra's claims. traffic-across-nodes (the same path, plus rping and UCX) runs
# with --kube: it took 5 to 10 minutes of a run that overran CI's 90 (docs/testing.md).
KUBE_SMOKE=(recipe dra-across-nodes)

# The root-integration test targets the host tier runs, by exact cargo target name. Every
# tests/*.rs (and tests/*/main.rs) target must be here or be a vm_* target (the VM tier runs
# those: tests/vm/cases); the check below fails the root tier otherwise, so a new test file
# cannot silently run nowhere.
ROOT_TARGETS=(capabilities child_modes cli conf_examples crash_safety device_plugins dra_apiserver dra_attach dra_build dra_kills dra_status_kills fault_detection fuzz_binary hardening helm move_mode multus netlink_root node_cli operations probe_build random_kills rails soft_roce)

# ---------------------------------------------------------------- packages
# The unit and root tiers: iproute2 to set up and inspect, host-local/static IPAM from
# containernetworking-plugins (/usr/lib/cni), python3 for the 1.1.0 test IPAM, flock
# (util-linux), linux-libc-dev for the uapi headers the NLDEV constants (src/kernel/nldev.rs) are checked against.
# libibverbs-dev, librdmacm-dev, clang, libclang-dev and pkg-config build rdma-ns-probe (feature
# verbs: rdma-sys links libibverbs and runs bindgen); every cargo tier builds with the feature.
# iputils-arping and iputils-ping: tests/rails.rs asks a rail's segment which MACs answer ARP
# for an address, and pings across a rail fabric from a rail's address.
# protobuf-compiler: protoc compiles the kubelet's protos (proto/) for rdma-ns-dra (feature
# dra, which every cargo tier builds with); openssl: the certificates of
# tests/common/apiserver.rs (dra_apiserver, helm).
ROOT_PKGS=(iproute2 containernetworking-plugins python3 util-linux linux-libc-dev libibverbs-dev
  librdmacm-dev clang libclang-dev pkg-config iputils-arping iputils-ping protobuf-compiler openssl
  gcc libc6-dev libseccomp-dev)
# gcc, libc6-dev and libseccomp-dev: the lab's components (install/lab/build.sh, tier lab-build:
# Kubernetes, etcd and containerd from the Go module proxy), which the root tier's
# dra_apiserver runs and the kube tier boots.
# The other tiers name their own packages (--print-packages); all are installed here in one go,
# and each tier checks its own again before it runs a case.
pkgs=("${ROOT_PKGS[@]}")
pkg_errors=()
for t in "$E2E" "$BENCH" "$VM" "$KUBE"; do
  case $t in
    "$BENCH") [ "$run_bench" = 1 ] || continue ;;
    "$VM") [ "$run_vm" = 1 ] || continue ;;
    "$KUBE") [ "$run_kube" != none ] || continue ;;
  esac
  if [ -f "$t" ] && list=$(bash "$t" --print-packages); then
    read -r -a more <<<"$list"
    pkgs+=("${more[@]}")
  else
    pkg_errors+=("$t --print-packages failed")
  fi
done
need=()
for pkg in $(printf '%s\n' "${pkgs[@]}" | sort -u); do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "== installing: ${need[*]}"
  apt-get update -q || pkg_errors+=("apt-get update failed")
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" ||
    pkg_errors+=("apt-get install ${need[*]} failed")
fi

# ---------------------------------------------------------------- tier bookkeeping
TIERS=()
declare -A PASS=() FAIL=() SKIP=() NOTE=()
SKIP_LINES=()
LOGDIR=$(mktemp -d /tmp/rdma-ns-tests.XXXXXX)

# The libtest "test result:" lines of a cargo log, summed: "passed failed ignored".
cargo_counts() {
  awk '/^test result: / {
         for (i = 1; i <= NF; i++) {
           if ($(i + 1) ~ /^passed;?$/) p += $i
           if ($(i + 1) ~ /^failed;?$/) f += $i
           if ($(i + 1) ~ /^ignored;?$/) s += $i
         }
       }
       END { print p + 0, f + 0, s + 0 }' "$1"
}
# The last "N passed, N failed[, N skipped]" line of a tier script's log.
summary_counts() {
  grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$1" | tail -n 1 |
    awk -F'[ ,]+' '{ print $1, $3, ($5 == "" ? 0 : $5) }'
}

# run_tier NAME COUNTER CMD...: runs CMD with its output shown and kept; COUNTER reads the
# tier's counts: cargo (libtest's result lines), summary (the script's last line), or exit (the
# tier is one check: its exit status). A non-zero exit with no failure counted, or a
# zero exit that ran nothing, is counted as one failure of the tier, so no tier passes unseen.
run_tier() {
  local name=$1 counter=$2 log=$LOGDIR/$1.log rc p f s start
  shift 2
  TIERS+=("$name")
  start=$(date +%s)
  echo "== tier $name: $*"
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  read -r p f s < <(
    case $counter in
      cargo) cargo_counts "$log" ;;
      summary) summary_counts "$log" ;;
      exit) if [ "$rc" = 0 ]; then echo 1 0 0; else echo 0 1 0; fi ;;
    esac
  )
  p=${p:-0} f=${f:-0} s=${s:-0}
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    f=1
    NOTE[$name]="exit $rc"
  elif [ "$rc" = 0 ] && [ "$p" = 0 ]; then
    f=1
    NOTE[$name]="ran nothing"
  fi
  PASS[$name]=$p FAIL[$name]=$f SKIP[$name]=$s
  NOTE[$name]="${NOTE[$name]:+${NOTE[$name]}, }$(($(date +%s) - start))s"
  if [ "$counter" = summary ]; then
    # The tier script's own SKIP rows, named on the last lines.
    while IFS= read -r line; do SKIP_LINES+=("$name: $line"); done < <(grep -E '^SKIP  [^ ]+: ' "$log" | sed 's/^SKIP  //')
  elif [ "$s" != 0 ]; then
    SKIP_LINES+=("$name: $s ignored test(s): $(grep -E '^test .* \.\.\. ignored' "$log" | awk '{print $2}' | tr '\n' ' ')")
  fi
}
# A tier left out by the caller's explicit option.
skip_tier() {
  TIERS+=("$1")
  PASS[$1]=0 FAIL[$1]=0 SKIP[$1]=1 NOTE[$1]="left out ($2)"
  SKIP_LINES+=("$1: the whole tier, left out by $2")
}
# A tier that could not start (its prerequisites are missing).
fail_tier() {
  TIERS+=("$1")
  PASS[$1]=0 FAIL[$1]=1 SKIP[$1]=0 NOTE[$1]=$2
  echo "== tier $1: FAIL: $2"
}

# ---------------------------------------------------------------- prerequisites
if [ "${#pkg_errors[@]}" -gt 0 ]; then
  fail_tier packages "${pkg_errors[*]}"
fi
# What the unit and root tiers use, named by the package that brings it.
root_missing=()
command -v cargo >/dev/null || root_missing+=("cargo (a Rust toolchain: rustup)")
command -v ip >/dev/null || root_missing+=("ip (iproute2)")
command -v flock >/dev/null || root_missing+=("flock (util-linux)")
command -v arping >/dev/null || root_missing+=("arping (iputils-arping)")
command -v ping >/dev/null || root_missing+=("ping (iputils-ping)")
[ -x /usr/bin/python3 ] || root_missing+=("/usr/bin/python3 (python3)")
for p in static host-local; do
  [ -x /usr/lib/cni/$p ] || root_missing+=("/usr/lib/cni/$p (containernetworking-plugins)")
done
[ -f /usr/include/rdma/rdma_netlink.h ] || root_missing+=("/usr/include/rdma/rdma_netlink.h (linux-libc-dev)")

# Every test target is either listed in ROOT_TARGETS or a vm_* target.
target_errors=()
for f in tests/*.rs tests/*/main.rs; do
  [ -e "$f" ] || continue
  t=${f#tests/}
  t=${t%.rs}
  t=${t%/main}
  [[ $t == vm_* ]] && continue
  [[ " ${ROOT_TARGETS[*]} " == *" $t "* ]] ||
    target_errors+=("test target $t ($f) is neither in ROOT_TARGETS of tests/run.sh nor a vm_* target")
done
for t in "${ROOT_TARGETS[@]}"; do
  [ -f "tests/$t.rs" ] || [ -f "tests/$t/main.rs" ] || target_errors+=("ROOT_TARGETS names $t, but there is no tests/$t.rs")
done

# ---------------------------------------------------------------- tiers
# The shape rules (docs/architecture.md): functions of at most 70 lines, files of at most 900
# lines before their inline tests (tests/lint/shape.py). Clippy runs without features and with
# both: no code is under `cfg(feature = "verbs")` alone (the feature only adds the rdma-ns-probe
# binary, which verbs,dra checks too), so a verbs-only pass checked nothing new.
lint() {
  cargo fmt --check && cargo clippy --all-targets -- -D warnings &&
    cargo clippy --all-targets --features verbs,dra -- -D warnings && python3 tests/lint/shape.py
}
if command -v cargo >/dev/null; then
  run_tier lint exit lint
else
  fail_tier lint "cargo not found (a Rust toolchain: rustup)"
fi

# The lab's components, built from the Go module proxy at install/lab/versions' pins (cached by
# version: a second run builds nothing). The root tier needs Kubernetes and etcd
# (dra_apiserver, helm), libcni's harness (dra_attach), helm and Multus's NetworkAttachmentDefinition
# CRD (helm), the kube tier all of them; its time is the cold build's share of a fresh run.
if [ ! -f "$LAB_BUILD" ]; then
  fail_tier lab-build "$LAB_BUILD is missing"
elif [ "$run_kube" = all ]; then
  run_tier lab-build exit bash "$LAB_BUILD"
elif [ "$run_kube" = smoke ]; then
  # KUBE_SMOKE reads no node labels: the lab leaves NFD out (tests/kube/run.sh), so it is not built.
  run_tier lab-build exit env RDMA_NS_LAB_NODE_FEATURES=0 bash "$LAB_BUILD"
else
  run_tier lab-build exit bash "$LAB_BUILD" kubernetes libcni helm multus
fi

if [ "${#root_missing[@]}" -gt 0 ]; then
  fail_tier unit "missing: ${root_missing[*]}"
  fail_tier root "missing: ${root_missing[*]}"
else
  # --no-fail-fast: a failing test target must not hide the targets after it (a fresh
  # machine's run once counted 33 root tests of 105, after one failed).
  run_tier unit cargo cargo test --no-fail-fast --features verbs,dra --lib --bins
  if [ "${#target_errors[@]}" -gt 0 ]; then
    fail_tier root "${target_errors[*]}"
  else
    args=()
    for t in "${ROOT_TARGETS[@]}"; do args+=(--test "$t"); done
    run_tier root cargo cargo test --no-fail-fast --features verbs,dra "${args[@]}"
  fi
fi

if [ -f "$E2E" ]; then run_tier e2e summary bash "$E2E"; else fail_tier e2e "$E2E is missing"; fi

if [ "$run_bench" = 0 ]; then
  skip_tier bench --no-bench
elif [ -f "$BENCH" ]; then
  run_tier bench exit bash "$BENCH" --smoke
else
  fail_tier bench "$BENCH is missing"
fi

# The kube tier's lab is built (tests/kube/run.sh --build: its release driver, images and node
# disks' seed, minutes of CPU) while the VM tier runs, at the lowest priority: it takes what the
# two VMs leave, above all the core the shorter kernel's VM frees when it is done. The kube tier
# then finds it all cached. Its log is kube-build.log; its time is in the kube tier's note.
# The kube tier's cases, for its build and its run: none named is every case (--kube).
kube_cases=()
[ "$run_kube" = smoke ] && kube_cases=("${KUBE_SMOKE[@]}")
KUBE_BUILD_PID=""
if [ "$run_kube" != none ] && [ -f "$KUBE" ]; then
  KUBE_BUILD_START=$(date +%s)
  # setsid: a process group of its own, which the kube tier raises back to nice 0 (below).
  setsid nice -n 19 bash "$KUBE" --build "${kube_cases[@]}" >"$LOGDIR/kube-build.log" 2>&1 &
  KUBE_BUILD_PID=$!
fi

# One VM tier for both kernels (tests/vm/cases names the kernels each case runs on): tests/vm/run.sh
# boots the two VMs at once, which on 2 cores takes little more than the longer alone. The
# tier's note gives each kernel's counts and VM time.
if [ "$run_vm" = 0 ]; then
  skip_tier vm --no-vm
elif [ -f "$VM" ]; then
  run_tier vm summary bash "$VM"
  NOTE[vm]="${NOTE[vm]}; $(grep -E '^kernel [0-9.]+: [0-9]+ passed, [0-9]+ failed$' "$LOGDIR/vm.log" | paste -sd ';' | sed 's/;/; /g')"
else
  fail_tier vm "$VM is missing"
fi

# The build goes on at nice 0 once nothing else runs; a failure there is the kube tier's own
# `up` failing at the same step (it builds whatever the background build did not).
# Its time runs to its log's last write: it may have ended long before the VM tier did.
kube_build_note=""
if [ -n "$KUBE_BUILD_PID" ]; then
  renice -n 0 -g "$KUBE_BUILD_PID" >/dev/null 2>&1
  waited=$(date +%s)
  if wait "$KUBE_BUILD_PID"; then
    kube_build_note="its lab built beside the VM tier in $(($(stat -c %Y "$LOGDIR/kube-build.log") - KUBE_BUILD_START)) s"
    kube_build_note+=", $(($(date +%s) - waited)) s of it after the VM tier"
  else
    kube_build_note="its lab's background build failed (kube-build.log)"
  fi
fi

if [ "$run_kube" = none ]; then
  skip_tier kube --no-kube
elif [ ! -f "$KUBE" ]; then
  fail_tier kube "$KUBE is missing"
else
  NOTE[kube]=$kube_build_note
  run_tier kube summary bash "$KUBE" "${kube_cases[@]}"
fi

# ---------------------------------------------------------------- summary
tp=0 tf=0 ts=0
echo
echo "== summary (logs: $LOGDIR)"
printf '%-10s %7s %7s %8s  %s\n' TIER PASSED FAILED SKIPPED NOTE
for t in "${TIERS[@]}"; do
  printf '%-10s %7s %7s %8s  %s\n' "$t" "${PASS[$t]}" "${FAIL[$t]}" "${SKIP[$t]}" "${NOTE[$t]:-}"
  tp=$((tp + PASS[$t])) tf=$((tf + FAIL[$t])) ts=$((ts + SKIP[$t]))
done
for line in "${SKIP_LINES[@]}"; do echo "SKIPPED $line"; done
if [ "$ts" -gt 0 ]; then
  echo "$tp passed, $tf failed, $ts skipped"
else
  echo "$tp passed, $tf failed"
fi
[ "$tf" = 0 ]

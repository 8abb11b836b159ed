#!/usr/bin/env bash
# VM test tier: boots Debian kernels that have RDMA / Soft-RoCE under QEMU TCG with virtme-ng and
# runs the cases of tests/vm/cases inside them: Debian 12's 6.1 ("6.1") and the newest kernel of
# trixie-backports ("7", >= 7.1, fetched by tests/vm/fetch-kernel.sh). Each case names the
# kernels it runs on. See docs/testing.md, "VM tier".
#
# usage: tests/vm/run.sh [--list] [--no-install] [--kernel 6.1|7]... [--manifest FILE] [CASE...]
#   (no CASE)     run every case of the manifest, on each kernel it names
#   CASE...       run only these cases, in manifest order
#   --kernel K    boot only kernel K (6.1 or 7; may be repeated); default: both
#   --list        print "<case> on=<kernels>" for each case and exit
#   --no-install  do not install packages (they are still checked)
#   --manifest F  read the cases from F instead of tests/vm/cases (the bench's VM sections,
#                 tests/bench/vm-cases); the check that every vm_* test is in a case applies to
#                 tests/vm/cases only
#   --print-packages  print the Debian packages this tier needs and exit
# env: RDMA_NS_VM_TIMEOUT  seconds for each VM run (default 2400; a kernel takes minutes, several times longer while other builds or the other kernel's VM load the cores; this only stops a hang)
#      RDMA_NS_VM_KERNEL   kernel image to boot as "6.1" (default: newest /boot/vmlinuz-6.1.*-amd64)
#      RDMA_NS_VM_CACHE    where the Linux 7 packages are kept, unpacked (default: ~/.cache/rdma-ns/vm-kernels)
#      RDMA_NS_VM_MEMORY   guest memory (default 2G)
#      RDMA_NS_VM_CPUS     guest vCPUs (default: the host's cores for one kernel, 1 each for kernels booted at once)
# Boots one VM per kernel, all of them at once (RDMA_NS_VM_SERIAL=1: one after the other); their
# console lines are tagged "[vm <kernel> <seconds>]". Prints a summary table per kernel and, as its last line,
# "N passed, N failed" over all of them. Exits non-zero on any failed case, a kernel that could
# not be fetched, a boot failure, a guest error, or a timeout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
default_manifest=$here/cases
manifest=$default_manifest

# `file`: vng runs it to check that busybox is static (absent from a minimal Debian 12);
# ibverbs-providers: libibverbs' rxe provider and /etc/libibverbs.d (without it ibv_devices and
# ibv_devinfo see no rxe device); python3-pip: to install virtme-ng.
# libibverbs-dev librdmacm-dev clang libclang-dev pkg-config: rdma-ns-probe (feature verbs,
# rdma-sys runs bindgen); the VM tests are built with it (tests/vm_env_probe.rs).
# The Linux 7 kernel is not installed: fetch-kernel.sh downloads and unpacks it (apt, dpkg-deb
# and depmod are on every Debian). strace, rdmacm-utils (rping), perftest and ucx-utils: the
# verbs, RDMA CM and UCX tools run against Linux 7's rxe between pods
# (shared/notes/rdma-kernel-facts.md) and strace for its RDMA netlink messages.
APT_PACKAGES=(linux-image-amd64 qemu-system-x86 rdma-core ibverbs-utils ibverbs-providers iproute2
    busybox-static file python3-pip util-linux libibverbs-dev librdmacm-dev clang libclang-dev
    pkg-config strace rdmacm-utils perftest ucx-utils tcpdump)
# The kernels a case may name, in boot order.
KERNELS=(6.1 7)
VNG_PIP=virtme-ng==1.42
VM_TIMEOUT=${RDMA_NS_VM_TIMEOUT:-2400}
VM_CACHE=${RDMA_NS_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdma-ns/vm-kernels}
VM_MEMORY=${RDMA_NS_VM_MEMORY:-2G}
# Empty: vng's default, as many vCPUs as the host has cores. Kernels booted at once get one each.
VM_CPUS=${RDMA_NS_VM_CPUS:-}

die() { echo "run.sh: $*" >&2; exit 2; }
say() { echo "run.sh: $*" >&2; }
now() { echo "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# ---- manifest ---------------------------------------------------------------------------
# One case a line (the format is described at the top of tests/vm/cases):
#   "<name> on=<kernels> <test-target> <test-name>...",
#   "<name> on=<kernels> <test-target> tests=<N> [skip=<test-name>...]"
#   or "<name> on=<kernels> script <path>", <kernels> a comma list of KERNELS.
#   '#' starts a comment; blank lines are ignored. CASE_LINE holds the line without on=.
CASE_NAMES=()
declare -A CASE_LINE=() CASE_KERNELS=()
read_manifest() {
    [[ -f $manifest ]] || die "no manifest at $manifest"
    local line name on kind lineno=0
    while IFS= read -r line || [[ -n $line ]]; do
        lineno=$((lineno + 1))
        line=${line%%#*}
        read -r name on _ <<<"$line" || true
        [[ -z ${name:-} ]] && continue
        [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || die "$manifest:$lineno: bad case name '$name'"
        [[ -z ${CASE_LINE[$name]:-} ]] || die "$manifest:$lineno: case '$name' listed twice"
        CASE_KERNELS[$name]=$(parse_kernels "${on:-}") ||
            die "$manifest:$lineno: case '$name' must name its kernels next: on=<kernels>, a comma list of ${KERNELS[*]} (not '${on:-}')"
        read -r _ _ kind _ <<<"$line" || true
        line="$name ${line#*"$on"}"
        [[ -n ${kind:-} ]] || die "$manifest:$lineno: case '$name' names no test target"
        if [[ $kind == script ]]; then
            local script
            read -r _ _ script _ <<<"$line"
            [[ -n ${script:-} ]] || die "$manifest:$lineno: script case '$name' names no script"
            [[ -f $repo/$script ]] || die "$manifest:$lineno: no script $script"
        fi
        local words w
        read -r -a words <<<"$line"
        if [[ $kind != script ]]; then
            ((${#words[@]} > 2)) || die "$manifest:$lineno: case '$name' names no test (give test names or tests=<N>)"
            if [[ ${words[2]} == tests=* ]]; then
                [[ ${words[2]} =~ ^tests=[1-9][0-9]*$ ]] || die "$manifest:$lineno: bad count '${words[2]}'"
                for w in "${words[@]:3}"; do
                    [[ $w =~ ^skip=[A-Za-z_][A-Za-z0-9_]*$ ]] || die "$manifest:$lineno: after tests=<N> only skip=<test-name> may follow, not '$w'"
                done
            else
                for w in "${words[@]:2}"; do
                    [[ $w =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "$manifest:$lineno: '$w' is not a test name (exact names only; tests=<N> for the whole binary)"
                done
            fi
        fi
        CASE_NAMES+=("$name")
        CASE_LINE[$name]=${words[*]}
    done <"$manifest"
}

# Prints the kernels of an "on=" word, space-separated, in KERNELS order; fails on an unknown
# or repeated kernel.
parse_kernels() {
    local on=$1 k seen=() out=()
    [[ $on == on=?* ]] || return 1
    IFS=, read -r -a seen <<<"${on#on=}"
    for k in "${seen[@]}"; do
        [[ " ${KERNELS[*]} " == *" $k "* ]] || return 1
    done
    (($(printf '%s\n' "${seen[@]}" | sort -u | wc -l) == ${#seen[@]})) || return 1
    for k in "${KERNELS[@]}"; do
        [[ " ${seen[*]} " == *" $k "* ]] && out+=("$k")
    done
    echo "${out[*]}"
}

# Every `fn vm_*` of tests/*.rs must run in some case: named on a line of its target, or in a
# whole-binary line (tests=<N>) of its target that does not skip it. The host tiers never run
# vm_* tests, so one left out of the manifest would run nowhere.
check_coverage() {
    local f target fn name words covered missing=()
    for f in "$repo"/tests/*.rs; do
        target=$(basename "$f" .rs)
        for fn in $(grep -oE '^\s*(pub\s+)?fn vm_[A-Za-z0-9_]+' "$f" | sed -E 's/.*fn //'); do
            covered=0
            for name in "${CASE_NAMES[@]}"; do
                read -r -a words <<<"${CASE_LINE[$name]}"
                [[ ${words[1]} == "$target" ]] || continue
                if [[ ${words[2]} == tests=* ]]; then
                    [[ " ${words[*]:3} " == *" skip=$fn "* ]] || covered=1
                elif [[ " ${words[*]:2} " == *" $fn "* ]]; then
                    covered=1
                fi
            done
            ((covered)) || missing+=("$target::$fn")
        done
    done
    ((${#missing[@]} == 0)) || die "VM tests in no case of $manifest (they would run nowhere): ${missing[*]}"
}

# ---- packages ---------------------------------------------------------------------------
ensure_packages() {
    local missing=() p
    for p in "${APT_PACKAGES[@]}"; do
        [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
    done
    if ((${#missing[@]})); then
        [[ $(id -u) == 0 ]] || die "missing packages (${missing[*]}): run as root to install them"
        say "installing ${missing[*]}"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
    if ! command -v vng >/dev/null; then
        say "installing $VNG_PIP"
        # Debian's own python refuses system-wide pip installs (PEP 668) without the flag.
        python3 -m pip install -q "$VNG_PIP" ||
            python3 -m pip install -q --break-system-packages "$VNG_PIP"
        hash -r
        command -v vng >/dev/null || die "vng is not on PATH after installing $VNG_PIP"
    fi
}

# Everything the tier uses on the host, named by its package, before the VM boots (the kernels
# are checked by resolve_kernel; inside the guest, guest.sh checks that ibv_devices lists the
# rxe device before any case).
check_prerequisites() {
    local missing=() t
    for t in qemu-system-x86_64:qemu-system-x86 rdma:iproute2 ip:iproute2 ibv_devices:ibverbs-utils \
        ibv_devinfo:ibverbs-utils busybox:busybox-static file:file flock:util-linux \
        vng:"virtme-ng (pip)" cargo:"a Rust toolchain (rustup)"; do
        command -v "${t%%:*}" >/dev/null || missing+=("${t%%:*} (${t#*:})")
    done
    [[ -d /etc/libibverbs.d ]] && compgen -G '/usr/lib/*/libibverbs/librxe-rdmav*.so' >/dev/null ||
        missing+=("libibverbs rxe provider and /etc/libibverbs.d (ibverbs-providers)")
    pkg-config --exists libibverbs librdmacm 2>/dev/null ||
        missing+=("pkg-config libibverbs librdmacm (libibverbs-dev librdmacm-dev pkg-config)")
    compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' >/dev/null || compgen -G '/usr/lib/*/libclang*.so*' >/dev/null ||
        missing+=("libclang for rdma-sys's bindgen (libclang-dev)")
    ((${#missing[@]} == 0)) || die "prerequisites missing: ${missing[*]}"
}

# ---- kernels ----------------------------------------------------------------------------
# Sets KIMG (the image to boot) and KREL (its release, `uname -r` in the guest) for kernel $1,
# or prints why it cannot and fails.
resolve_kernel() {
    KIMG="" KREL=""
    case $1 in
    6.1)
        if [[ -n ${RDMA_NS_VM_KERNEL:-} ]]; then
            KIMG=$RDMA_NS_VM_KERNEL
        else
            # shellcheck disable=SC2012 # version sort of a glob; names have no odd characters
            KIMG=$(ls -1 /boot/vmlinuz-6.1.*-amd64 2>/dev/null | sort -V | tail -n1)
            [[ -n $KIMG ]] || { say "kernel 6.1: no /boot/vmlinuz-6.1.*-amd64: install linux-image-amd64 (Debian 12)"; return 1; }
        fi
        [[ -r $KIMG ]] || { say "kernel 6.1: cannot read $KIMG (Debian installs it 0600: run as root)"; return 1; }
        KREL=$(image_release "$KIMG") || { say "kernel 6.1: $KIMG names no kernel version (file -bL)"; return 1; }
        [[ -d /lib/modules/$KREL ]] || { say "kernel 6.1: no modules for $KIMG in /lib/modules/$KREL"; return 1; }
        ;;
    7)
        # The VM must see the unpacked tree: its modules are linked into the guest's /lib/modules.
        visible_in_vm "$VM_CACHE" || {
            say "kernel 7: RDMA_NS_VM_CACHE $VM_CACHE is not visible inside the VM (a fresh tmpfs there): choose another"
            return 1
        }
        KIMG=$(bash "$here/fetch-kernel.sh" "$VM_CACHE") || {
            say "kernel 7: could not fetch the newest trixie-backports kernel (above: what failed); the tier needs it"
            return 1
        }
        KREL=$(image_release "$KIMG") || { say "kernel 7: $KIMG names no kernel version (file -bL)"; return 1; }
        ;;
    *) die "unknown kernel $1" ;;
    esac
}
# Whether path $1 is the host's inside the VM: there / is the host's root read-only over 9p, but
# these directories are fresh tmpfs.
visible_in_vm() {
    case $1/ in
    /var/tmp/* | /var/log/* | /var/cache/* | /run/* | /var/lib/apt/* | /var/lib/private/*) return 1 ;;
    esac
}
# The release a kernel image says it is (what `uname -r` will print), as vng reads it too.
image_release() {
    file -bL "$1" | sed -n 's/.*, version \([^ ]*\) .*/\1/p' | grep .
}

# ---- build ------------------------------------------------------------------------------
# Prints "<kind> <target-name> <is-test> <executable>" for each executable cargo reports.
artifacts() {
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        t = m["target"]
        print(t["kind"][0], t["name"], int(m["profile"]["test"]), m["executable"])
'
}

target_dir() {
    cargo metadata --format-version 1 --no-deps --manifest-path "$repo/Cargo.toml" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}

# ---- main -------------------------------------------------------------------------------
main() {
    local list=0 install=1 want=() only=()
    while (($#)); do
        case $1 in
        --print-packages) echo "${APT_PACKAGES[*]}"; exit 0 ;;
        --list) list=1 ;;
        --no-install) install=0 ;;
        --manifest)
            (($# > 1)) && [[ -f $2 ]] || die "--manifest takes a cases file"
            manifest=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
            shift
            ;;
        --kernel)
            (($# > 1)) && [[ " ${KERNELS[*]} " == *" $2 "* ]] || die "--kernel takes one of: ${KERNELS[*]}"
            only+=("$2")
            shift
            ;;
        -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
        -*) die "unknown option $1" ;;
        *) want+=("$1") ;;
        esac
        shift
    done

    read_manifest
    [[ $manifest != "$default_manifest" ]] || check_coverage
    local name w k
    if ((list)); then
        for name in "${CASE_NAMES[@]}"; do
            k=${CASE_KERNELS[$name]}
            echo "$name on=${k// /,}"
        done
        exit 0
    fi

    local selected=()
    if ((${#want[@]})); then
        for w in "${want[@]}"; do
            [[ -n ${CASE_LINE[$w]:-} ]] || die "no case '$w' in $manifest (see --list)"
        done
        for name in "${CASE_NAMES[@]}"; do
            for w in "${want[@]}"; do [[ $w == "$name" ]] && selected+=("$name") && break; done
        done
    else
        selected=("${CASE_NAMES[@]}")
    fi
    ((${#selected[@]})) || die "no cases in $manifest"
    # The kernels to boot: those asked for (all by default) that a selected case runs on, and
    # the selected cases each runs (on_kernel[K], space-separated); only the cases of a kernel
    # booted now are built (running, in manifest order).
    local boot=() cases=() running=()
    local -A on_kernel=() runs=()
    for k in "${KERNELS[@]}"; do
        ((${#only[@]} == 0)) || [[ " ${only[*]} " == *" $k "* ]] || continue
        cases=()
        for name in "${selected[@]}"; do
            [[ " ${CASE_KERNELS[$name]} " == *" $k "* ]] && cases+=("$name") && runs[$name]=1
        done
        ((${#cases[@]})) || continue
        boot+=("$k")
        on_kernel[$k]=${cases[*]}
    done
    ((${#boot[@]})) || die "none of the cases ${selected[*]} runs on kernel ${only[*]} (see --list)"
    for name in "${selected[@]}"; do
        [[ -z ${runs[$name]:-} ]] || running+=("$name")
    done

    local t0
    t0=$(now)
    if ((install)); then ensure_packages; fi
    check_prerequisites
    command -v cargo >/dev/null || die "cargo not found: the VM tier needs a Rust toolchain"

    # Build output must be visible in the VM.
    local tdir
    tdir=$(target_dir)
    if ! visible_in_vm "$tdir"; then
        say "CARGO_TARGET_DIR $tdir is not visible inside the VM; building in $repo/target"
        export CARGO_TARGET_DIR=$repo/target
        tdir=$repo/target
    fi

    local results=$tdir/vm-results
    mkdir -p "$tdir"
    exec 9>"$tdir/vm-results.lock"
    flock -n 9 || die "another tests/vm/run.sh is using $results"
    # Only the kernels booted now lose their old results (tests/run.sh runs one kernel a tier).
    mkdir -p "$results"
    for k in "${boot[@]}"; do rm -rf "${results:?}/$k"; done
    build "$results" "${running[@]}"
    say "times (host wall clock): build $(elapsed "$t0" "$(now)") s"

    TOTAL_PASSED=0 TOTAL_FAILED=0
    if ((${#boot[@]} > 1)) && [[ ${RDMA_NS_VM_SERIAL:-0} != 1 ]]; then
        boot_all_at_once "$results" on_kernel "${boot[@]}"
    else
        for k in "${boot[@]}"; do
            read -r -a cases <<<"${on_kernel[$k]}"
            boot_kernel "$k" "$results/$k" "${cases[@]}"
        done
    fi
    # The tables come after every VM has ended, in boot order, from what each boot left in its
    # results directory (a boot that left no status counts as vng's 255).
    for k in "${boot[@]}"; do
        read -r -a cases <<<"${on_kernel[$k]}"
        KREL=$(cat "$results/$k/release" 2>/dev/null || true)
        report "$k" "$results/$k" "$(cat "$results/$k/rc" 2>/dev/null || echo 255)" "${cases[@]}"
    done
    echo
    say "times (host wall clock): all $(elapsed "$t0" "$(now)") s"
    echo "$TOTAL_PASSED passed, $TOTAL_FAILED failed"
    ((TOTAL_FAILED == 0))
}

# Builds rdma-ns and the test targets of the given cases; sets BIN and EXE[target].
declare -A EXE=()
BIN=""
build() {
    local results=$1 name kind tgt
    shift
    say "building rdma-ns"
    (cd "$repo" && cargo build --bin rdma-ns --message-format=json-render-diagnostics) \
        >"$results/build.json" || die "cargo build failed"
    BIN=$(artifacts <"$results/build.json" | awk '$1 == "bin" && $2 == "rdma-ns" && $3 == 0 { print $4 }' | tail -n1)
    [[ -x $BIN ]] || die "cargo build reported no rdma-ns binary"

    local targets=()
    for name in "$@"; do
        read -r _ kind _ <<<"${CASE_LINE[$name]}"
        [[ $kind == script ]] && continue
        [[ " ${targets[*]} " == *" $kind "* ]] || targets+=("$kind")
    done
    ((${#targets[@]})) || return 0
    say "building test targets: ${targets[*]}"
    local args=()
    for tgt in "${targets[@]}"; do args+=(--test "$tgt"); done
    (cd "$repo" && cargo test --no-run --features verbs,dra --message-format=json-render-diagnostics "${args[@]}") \
        >"$results/test-build.json" || die "cargo test --no-run failed"
    local k n t e
    while read -r k n t e; do
        [[ $k == test && $t == 1 ]] && EXE[$n]=$e
    done < <(artifacts <"$results/test-build.json")
    for tgt in "${targets[@]}"; do
        [[ -n ${EXE[$tgt]:-} ]] || die "cargo built no test binary '$tgt'"
    done
}

# The plan the guest runs, one case a line: "<name> test <binary> <expected count> <libtest
# args...>" (names matched exactly) or "<name> script <path>".
write_plan() {
    local plan=$1 name words expected args w
    shift
    : >"$plan"
    for name in "$@"; do
        read -r -a words <<<"${CASE_LINE[$name]}"
        if [[ ${words[1]} == script ]]; then
            echo "$name script $repo/${words[2]}" >>"$plan"
            continue
        fi
        args=(--exact)
        if [[ ${words[2]} == tests=* ]]; then
            expected=${words[2]#tests=}
            for w in "${words[@]:3}"; do args+=(--skip "${w#skip=}"); done
        else
            expected=$((${#words[@]} - 2))
            args+=("${words[@]:2}")
        fi
        echo "$name test ${EXE[${words[1]}]} $expected ${args[*]}" >>"$plan"
    done
}

# Boots kernel $1 once for the cases $3..., results in $2: the VM's exit status (or "nokernel")
# goes to $2/rc and the kernel's release to $2/release, for report.
boot_kernel() {
    local kernel=$1 results=$2 t_start
    shift 2
    mkdir -p "$results"
    echo
    t_start=$(now)
    : >"$results/release"
    if ! resolve_kernel "$kernel"; then
        echo nokernel >"$results/rc"
        return 0
    fi
    echo "$KREL" >"$results/release"
    say "kernel $kernel: $KREL ($KIMG)"
    write_plan "$results/plan" "$@"
    say "booting $KREL (TCG, timeout ${VM_TIMEOUT}s) for ${#} case(s): $*"
    local guest_cmd
    guest_cmd="$(printf '%q ' "$here/guest.sh" "$results" "$BIN" "$KREL" "$kernel")"
    # timeout signals its whole process group (vng and its qemu); setsid keeps the VM off any
    # terminal; no stdin. Each console line is echoed with the host's elapsed seconds.
    # vng finds the modules beside the image: /lib/modules/<release> for 6.1, the unpacked
    # tree of fetch-kernel.sh for 7.
    local t_boot
    rm -f "$results/boot-retry"
    t_boot=$(now)
    boot_vm "$results" "$guest_cmd" "$t_boot" "$kernel"
    # Once, a fresh machine's first boot of kernel 7 exited 255 within seconds having printed
    # nothing (vng's code for a guest that wrote no exit status; without --verbose the kernel's
    # own console is not shown), and every later boot of the same image worked. A boot that
    # printed nothing ran no case and changed nothing, so it is booted once more with the
    # kernel's console kept, and the report says so; cases are never retried.
    if ((rc != 0)) && [[ ! -s $results/console.log ]]; then
        say "kernel $kernel: the VM exited $rc before the guest printed anything; booting once more with the kernel console (--verbose) to see why"
        echo "first boot: vng exit $rc, nothing printed" >"$results/boot-retry"
        rm -f "$results/results"
        t_boot=$(now)
        boot_vm "$results" "$guest_cmd" "$t_boot" "$kernel" --verbose
    fi
    echo "$rc" >"$results/rc"
    say "times (host wall clock), kernel $kernel ($KREL): fetch $(elapsed "$t_start" "$t_boot") s, boot $(cat "$results/boot-seconds" 2>/dev/null || echo '?') s, VM total $(elapsed "$t_boot" "$(now)") s"
}

# Boots every kernel $3... at once, each in a subshell of its own, and waits for them all.
# The guests share nothing writable (each writes only its own results directory; / is the host's,
# read-only). Each gets one vCPU (RDMA_NS_VM_CPUS): two 2-vCPU TCG guests on 2 cores ran slower
# together than one after the other (multi-threaded TCG's vCPUs wait on each other when the host
# has no core for them), one vCPU each keeps each guest on a core of its own.
# Their consoles interleave, each line tagged with its kernel; main reports once all have ended.
# $2 names the caller's associative array of each kernel's cases.
boot_all_at_once() {
    local results=$1 k
    local -n cases_of=$2
    shift 2
    local pids=() cases=()
    for k in "$@"; do
        read -r -a cases <<<"${cases_of[$k]}"
        (
            trap 'stop_vm; exit 143' TERM
            trap 'stop_vm; exit 130' INT
            trap 'stop_vm; exit 129' HUP
            VM_CPUS=${RDMA_NS_VM_CPUS:-1}
            boot_kernel "$k" "$results/$k" "${cases[@]}"
        ) &
        pids+=($!)
    done
    trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait; exit 143' TERM
    trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait; exit 130' INT
    trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait; exit 129' HUP
    wait "${pids[@]}" || true
}

# The process group of the VM being booted (empty between boots). setsid puts the VM in a
# session of its own, out of reach of a terminal's ^C and of a signal to this script's group, so
# a signal that stops this script ends the VM through it.
VM_PGID=""
VM_FIFO=""
stop_vm() {
    if [[ -n $VM_PGID ]]; then
        kill -TERM -- "-$VM_PGID" 2>/dev/null || true
    fi
    if [[ -n $VM_FIFO ]]; then
        rm -f "$VM_FIFO"
    fi
}
trap 'stop_vm; exit 129' HUP
trap 'stop_vm; exit 130' INT
trap 'stop_vm; exit 143' TERM

# One vng run of the guest command $2 (results in $1, boot start $3, kernel $4, more vng flags after); its
# exit status in rc. The VM runs in the background and is waited for, because bash runs a trap
# only once the foreground command has ended; its console reaches `console` through a fifo.
boot_vm() {
    local results=$1 guest_cmd=$2 t_boot=$3 kernel=$4
    shift 4
    VM_FIFO=$(mktemp -u "${TMPDIR:-/tmp}/rdma-ns-vm-console.XXXXXX")
    mkfifo -m 600 "$VM_FIFO"
    console "$t_boot" "$results" "$kernel" <"$VM_FIFO" &
    local reader=$!
    set +e
    # A background job of a script is not a process group leader, so setsid makes it one
    # without a fork: its pid is the VM's process group.
    setsid timeout --kill-after=15 "$VM_TIMEOUT" \
        vng -r "$KIMG" --disable-kvm --force-9p --user root --memory "$VM_MEMORY" ${VM_CPUS:+--cpus "$VM_CPUS"} "$@" \
        --rwdir="$results" --cwd "$repo" --exec "$guest_cmd" \
        </dev/null >"$VM_FIFO" 2>&1 &
    VM_PGID=$!
    wait "$VM_PGID"
    rc=$?
    VM_PGID=""
    wait "$reader"
    set -e
    rm -f "$VM_FIFO"
    VM_FIFO=""
}

# Copies the console to stdout and console.log, prefixed with host seconds since boot start;
# notes how long the guest took to start running guest.sh.
console() {
    local start=$1 results=$2 kernel=$3 line booted=0
    while IFS= read -r line; do
        line=${line%$'\r'}
        printf '%s\n' "$line" >>"$results/console.log"
        if ((!booted)) && [[ $line == "VMGUEST start"* ]]; then
            booted=1
            elapsed "$start" "$(now)" >"$results/boot-seconds"
        fi
        printf '[vm %-3s %6ss] %s\n' "$kernel" "$(elapsed "$start" "$(now)")" "$line"
    done
}

# Reads the guest's results for kernel $1, prints the logs of failed cases, the table and
# "kernel K: N passed, N failed", and adds them to the totals. A kernel that could not be had
# (rc "nokernel"), a guest error, a guest that did not reach its end, or a timeout adds a failed
# row "(vm K)".
report() {
    local kernel=$1 results=$2 rc=$3
    shift 3
    local -A status=() note=()
    local tag name st rest passed=0 failed=0 vmnote=""
    local res=$results/results
    [[ -f $res ]] || : >"$res"
    while read -r tag name st rest; do
        [[ $tag == VMCASE ]] || continue
        status[$name]=$st
        note[$name]=$rest
    done <"$res"
    for name in "$@"; do
        if [[ ${status[$name]:-} == FAIL && -f $results/cases/$name.log ]]; then
            echo "---- kernel $kernel: log of failed case $name (last 60 lines of $results/cases/$name.log)"
            tail -n 60 "$results/cases/$name.log"
        fi
    done
    if grep -q '^VMERROR' "$res"; then
        echo "---- kernel $kernel: guest errors"
        grep '^VMERROR' "$res"
        vmnote="guest error"
    fi
    if [[ $rc == nokernel ]]; then
        vmnote="kernel $kernel could not be had (its message is above)"
    elif ((rc == 124 || rc == 137)); then
        echo "---- kernel $kernel: TIMEOUT: the VM run was killed after ${VM_TIMEOUT}s"
        vmnote="timed out after ${VM_TIMEOUT}s"
    elif ((${#status[@]} == 0)); then
        echo "---- kernel $kernel: BOOT FAILURE or the guest ran no case (vng exit $rc); console tail:"
        if [[ -s $results/console.log ]]; then tail -n 40 "$results/console.log"; else echo "(the VM printed nothing)"; fi
        vmnote=${vmnote:-"boot failure (vng exit $rc)"}
    elif ! grep -q '^VMDONE' "$res"; then
        vmnote=${vmnote:-"guest did not finish (vng exit $rc)"}
    fi
    if [[ -f $results/boot-retry ]]; then
        echo "---- kernel $kernel: booted twice: $(cat "$results/boot-retry"); the console of the second boot is in $results/console.log"
    fi
    echo
    echo "kernel $kernel${KREL:+ ($KREL)}:"
    printf '%-24s %-8s %s\n' CASE RESULT NOTE
    for name in "$@"; do
        st=${status[$name]:-}
        if [[ -z $st ]]; then
            st=FAIL
            if grep -qx "VMCASE-BEGIN $name" "$results/console.log" 2>/dev/null; then
                note[$name]="started, no result (hung or crashed)"
            else
                note[$name]="not run"
            fi
        fi
        if [[ $st == PASS ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
        printf '%-24s %-8s %s\n' "$name" "$st" "${note[$name]:-}"
    done
    if [[ -z $vmnote && $rc != 0 ]] && ((failed == 0)); then
        vmnote="vng exited $rc"
    fi
    if [[ -n $vmnote ]]; then
        failed=$((failed + 1))
        printf '%-24s %-8s %s\n' "(vm $kernel)" FAIL "$vmnote"
    fi
    echo "results and logs: $results"
    echo "kernel $kernel: $passed passed, $failed failed"
    TOTAL_PASSED=$((TOTAL_PASSED + passed)) TOTAL_FAILED=$((TOTAL_FAILED + failed))
}

main "$@"

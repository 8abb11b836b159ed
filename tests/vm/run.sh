#!/usr/bin/env bash
# VM test tier: boots Debian's 6.1 kernel (which has RDMA / Soft-RoCE) under QEMU TCG with
# virtme-ng and runs the cases of tests/vm/cases inside it. See tests/README.md, "VM tier".
#
# usage: tests/vm/run.sh [--list] [--no-install] [CASE...]
#   (no CASE)     run every case of the manifest
#   CASE...       run only these cases, in manifest order
#   --list        print the case names and exit
#   --no-install  do not install packages (they are still checked)
#   --print-packages  print the Debian packages this tier needs and exit
# env: RDMA_NS_VM_TIMEOUT  seconds for the whole VM run (default 540: the tier takes 3-5 min on an idle 2-core machine; this only stops a hang)
#      RDMA_NS_VM_KERNEL   kernel image to boot (default: newest /boot/vmlinuz-*-amd64)
#      RDMA_NS_VM_MEMORY   guest memory (default 2G)
# Prints a summary table and, as its last line, "N passed, N failed". Exits non-zero on any
# failed case, a boot failure, a guest error, or a timeout.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
manifest=$here/cases

# `file`: vng runs it to check that busybox is static (absent from a minimal Debian 12);
# ibverbs-providers: libibverbs' rxe provider and /etc/libibverbs.d (without it ibv_devices and
# ibv_devinfo see no rxe device); python3-pip: to install virtme-ng.
# libibverbs-dev librdmacm-dev clang libclang-dev pkg-config: rdma-ns-probe (feature verbs,
# rdma-sys runs bindgen); the VM tests are built with it (tests/vm_env_probe.rs).
APT_PACKAGES=(linux-image-amd64 qemu-system-x86 rdma-core ibverbs-utils ibverbs-providers iproute2
    busybox-static file python3-pip util-linux libibverbs-dev librdmacm-dev clang libclang-dev
    pkg-config)
VNG_PIP=virtme-ng==1.42
VM_TIMEOUT=${RDMA_NS_VM_TIMEOUT:-540}
VM_MEMORY=${RDMA_NS_VM_MEMORY:-2G}

die() { echo "run.sh: $*" >&2; exit 2; }
say() { echo "run.sh: $*" >&2; }
now() { echo "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# ---- manifest ---------------------------------------------------------------------------
# One case a line (the format is described at the top of tests/vm/cases):
#   "<name> <test-target> <test-name>...", "<name> <test-target> tests=<N> [skip=<test-name>...]"
#   or "<name> script <path>". '#' starts a comment; blank lines are ignored.
CASE_NAMES=()
declare -A CASE_LINE=()
read_manifest() {
    [[ -f $manifest ]] || die "no manifest at $manifest"
    local line name kind lineno=0
    while IFS= read -r line || [[ -n $line ]]; do
        lineno=$((lineno + 1))
        line=${line%%#*}
        read -r name kind _ <<<"$line" || true
        [[ -z ${name:-} ]] && continue
        [[ $name =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || die "$manifest:$lineno: bad case name '$name'"
        [[ -n ${kind:-} ]] || die "$manifest:$lineno: case '$name' names no test target"
        [[ -z ${CASE_LINE[$name]:-} ]] || die "$manifest:$lineno: case '$name' listed twice"
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

# Everything the tier uses on the host, named by its package, before the VM boots. (Inside the
# guest, guest.sh checks that ibv_devices lists the rxe device before any case.)
check_prerequisites() {
    local missing=() t
    for t in qemu-system-x86_64:qemu-system-x86 rdma:iproute2 ip:iproute2 ibv_devices:ibverbs-utils \
        ibv_devinfo:ibverbs-utils busybox:busybox-static file:file flock:util-linux \
        vng:"virtme-ng (pip)" cargo:"a Rust toolchain (rustup)"; do
        command -v "${t%%:*}" >/dev/null || missing+=("${t%%:*} (${t#*:})")
    done
    [[ -d /etc/libibverbs.d ]] && compgen -G '/usr/lib/*/libibverbs/librxe-rdmav*.so' >/dev/null ||
        missing+=("libibverbs rxe provider and /etc/libibverbs.d (ibverbs-providers)")
    compgen -G '/boot/vmlinuz-*-amd64' >/dev/null || [[ -n ${RDMA_NS_VM_KERNEL:-} ]] ||
        missing+=("/boot/vmlinuz-*-amd64 (linux-image-amd64)")
    pkg-config --exists libibverbs librdmacm 2>/dev/null ||
        missing+=("pkg-config libibverbs librdmacm (libibverbs-dev librdmacm-dev pkg-config)")
    compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' >/dev/null || compgen -G '/usr/lib/*/libclang*.so*' >/dev/null ||
        missing+=("libclang for rdma-sys's bindgen (libclang-dev)")
    ((${#missing[@]} == 0)) || die "prerequisites missing: ${missing[*]}"
}

pick_kernel() {
    if [[ -n ${RDMA_NS_VM_KERNEL:-} ]]; then
        echo "$RDMA_NS_VM_KERNEL"
        return
    fi
    local k
    # shellcheck disable=SC2012 # version sort of a glob; names have no odd characters
    k=$(ls -1 /boot/vmlinuz-*-amd64 2>/dev/null | sort -V | tail -n1)
    [[ -n $k ]] || die "no /boot/vmlinuz-*-amd64: install linux-image-amd64"
    echo "$k"
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
    local list=0 install=1 want=()
    while (($#)); do
        case $1 in
        --print-packages) echo "${APT_PACKAGES[*]}"; exit 0 ;;
        --list) list=1 ;;
        --no-install) install=0 ;;
        -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
        -*) die "unknown option $1" ;;
        *) want+=("$1") ;;
        esac
        shift
    done

    read_manifest
    check_coverage
    if ((list)); then
        printf '%s\n' "${CASE_NAMES[@]}"
        exit 0
    fi

    local selected=() name w
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

    local t0
    t0=$(now)
    if ((install)); then ensure_packages; fi
    check_prerequisites
    local kernel
    kernel=$(pick_kernel)
    [[ -r $kernel ]] || die "cannot read $kernel (Debian installs it 0600: run as root)"
    [[ -d /lib/modules/${kernel#/boot/vmlinuz-} ]] || die "no modules for $kernel"

    command -v cargo >/dev/null || die "cargo not found: the VM tier needs a Rust toolchain"

    # Build output must be visible in the VM: there / is the host's root read-only over 9p,
    # but /var/tmp, /var/log, /var/cache and /run are fresh tmpfs.
    local tdir
    tdir=$(target_dir)
    case $tdir/ in
    /var/tmp/* | /var/log/* | /var/cache/* | /run/* | /var/lib/apt/* | /var/lib/private/*)
        say "CARGO_TARGET_DIR $tdir is not visible inside the VM; building in $repo/target"
        export CARGO_TARGET_DIR=$repo/target
        tdir=$repo/target
        ;;
    esac

    local results=$tdir/vm-results
    mkdir -p "$tdir"
    exec 9>"$tdir/vm-results.lock"
    flock -n 9 || die "another tests/vm/run.sh is using $results"
    rm -rf "$results"
    mkdir -p "$results"

    say "building rdma-ns"
    local bin
    (cd "$repo" && cargo build --bin rdma-ns --message-format=json-render-diagnostics) \
        >"$results/build.json" || die "cargo build failed"
    bin=$(artifacts <"$results/build.json" | awk '$1 == "bin" && $2 == "rdma-ns" && $3 == 0 { print $4 }' | tail -n1)
    [[ -x $bin ]] || die "cargo build reported no rdma-ns binary"

    local targets=() tgt kind
    for name in "${selected[@]}"; do
        read -r _ kind _ <<<"${CASE_LINE[$name]}"
        [[ $kind == script ]] && continue
        [[ " ${targets[*]} " == *" $kind "* ]] || targets+=("$kind")
    done
    declare -A exe=()
    if ((${#targets[@]})); then
        say "building test targets: ${targets[*]}"
        local args=()
        for tgt in "${targets[@]}"; do args+=(--test "$tgt"); done
        (cd "$repo" && cargo test --no-run --features verbs --message-format=json-render-diagnostics "${args[@]}") \
            >"$results/test-build.json" || die "cargo test --no-run failed"
        local k n t e
        while read -r k n t e; do
            [[ $k == test && $t == 1 ]] && exe[$n]=$e
        done < <(artifacts <"$results/test-build.json")
    fi

    # The plan the guest runs: "<name> test <executable> [args...]" or "<name> script <path>".
    local plan=$results/plan words
    : >"$plan"
    for name in "${selected[@]}"; do
        read -r -a words <<<"${CASE_LINE[$name]}"
        if [[ ${words[1]} == script ]]; then
            echo "$name script $repo/${words[2]}" >>"$plan"
        else
            [[ -n ${exe[${words[1]}]:-} ]] || die "cargo built no test binary '${words[1]}' for case $name"
            # "<name> test <binary> <expected count> <libtest args...>", names matched exactly
            local expected args=(--exact) w
            if [[ ${words[2]} == tests=* ]]; then
                expected=${words[2]#tests=}
                for w in "${words[@]:3}"; do args+=(--skip "${w#skip=}"); done
            else
                expected=$((${#words[@]} - 2))
                args+=("${words[@]:2}")
            fi
            echo "$name test ${exe[${words[1]}]} $expected ${args[*]}" >>"$plan"
        fi
    done
    local t_built
    t_built=$(now)

    say "booting $kernel (TCG, timeout ${VM_TIMEOUT}s) for ${#selected[@]} case(s): ${selected[*]}"
    local guest_cmd rc
    guest_cmd="$(printf '%q' "$here/guest.sh") $(printf '%q' "$results") $(printf '%q' "$bin")"
    # timeout signals its whole process group (vng and its qemu); setsid keeps the VM off any
    # terminal; no stdin. Each console line is echoed with the host's elapsed seconds.
    set +e
    setsid timeout --kill-after=15 "$VM_TIMEOUT" \
        vng -r "$kernel" --disable-kvm --force-9p --user root --memory "$VM_MEMORY" \
        --rwdir="$results" --cwd "$repo" --exec "$guest_cmd" \
        </dev/null 2>&1 | console "$t_built" "$results"
    rc=${PIPESTATUS[0]}
    set -e
    local t_end
    t_end=$(now)
    say "times (host wall clock): build $(elapsed "$t0" "$t_built") s, boot $(cat "$results/boot-seconds" 2>/dev/null || echo '?') s, VM total $(elapsed "$t_built" "$t_end") s, all $(elapsed "$t0" "$t_end") s"
    report "$results" "$rc" "${selected[@]}"
}

# Copies the console to stdout and console.log, prefixed with host seconds since boot start;
# notes how long the guest took to start running guest.sh.
console() {
    local start=$1 results=$2 line booted=0
    while IFS= read -r line; do
        line=${line%$'\r'}
        printf '%s\n' "$line" >>"$results/console.log"
        if ((!booted)) && [[ $line == "VMGUEST start"* ]]; then
            booted=1
            elapsed "$start" "$(now)" >"$results/boot-seconds"
        fi
        printf '[vm %6ss] %s\n' "$(elapsed "$start" "$(now)")" "$line"
    done
}

# Reads the guest's results, prints the logs of failed cases, the table and the final
# "N passed, N failed" line; fails when anything failed. A guest error, a guest that did not
# reach its end, or a timeout adds a failed row "(vm)".
report() {
    local results=$1 rc=$2
    shift 2
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
            echo "---- log of failed case $name (last 60 lines of $results/cases/$name.log)"
            tail -n 60 "$results/cases/$name.log"
        fi
    done
    if grep -q '^VMERROR' "$res"; then
        echo "---- guest errors"
        grep '^VMERROR' "$res"
        vmnote="guest error"
    fi
    if ((rc == 124 || rc == 137)); then
        echo "---- TIMEOUT: the VM run was killed after ${VM_TIMEOUT}s"
        vmnote="timed out after ${VM_TIMEOUT}s"
    elif ((${#status[@]} == 0)); then
        echo "---- BOOT FAILURE or the guest ran no case (vng exit $rc); console tail:"
        if [[ -s $results/console.log ]]; then tail -n 40 "$results/console.log"; else echo "(the VM printed nothing)"; fi
        vmnote=${vmnote:-"boot failure (vng exit $rc)"}
    elif ! grep -q '^VMDONE' "$res"; then
        vmnote=${vmnote:-"guest did not finish (vng exit $rc)"}
    fi
    echo
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
    if [[ -z $vmnote ]] && ((rc != 0 && failed == 0)); then
        vmnote="vng exited $rc"
    fi
    if [[ -n $vmnote ]]; then
        failed=$((failed + 1))
        printf '%-24s %-8s %s\n' "(vm)" FAIL "$vmnote"
    fi
    echo "results and logs: $results"
    echo "$passed passed, $failed failed"
    ((failed == 0 && rc == 0))
}

main "$@"

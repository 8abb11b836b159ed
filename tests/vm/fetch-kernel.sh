#!/usr/bin/env bash
# Fetches the newest Linux kernel of Debian's trixie-backports for the VM tier, unpacked (never
# installed as the host's kernel), and prints the path of its image on stdout.
#
# usage: tests/vm/fetch-kernel.sh CACHE-DIR
#
# The sources entry for trixie-backports is built from the mirror of the machine's own Debian
# apt sources (the entry whose suite is this machine's release), and apt runs on a private
# configuration under CACHE-DIR/apt: the host's sources, lists and package cache stay untouched.
# "Newest" is what the index's linux-image-amd64 metapackage depends on. Its three packages
# (linux-binary-*, linux-base-*, linux-modules-*) are downloaded with `apt-get download`, which
# checks them against the signed index, unpacked with `dpkg-deb -x` into
# CACHE-DIR/<release>/root, and `depmod` runs for that tree; vng finds the modules there (it
# looks for lib/modules beside the image), so nothing is written to /usr/lib/modules. A tree
# already unpacked for the same package versions is reused; older ones are removed.
# Progress and the version go to stderr. Exits non-zero, saying what failed, when the kernel
# cannot be had (no Debian mirror in the sources, index or download failure, an unexpected
# package layout, a kernel older than MIN_VERSION).
set -euo pipefail

SUITE=trixie-backports
COMPONENT=main
MIN_VERSION=7.1 # rxe's per-netns UDP sockets (drivers/infiniband/sw/rxe/rxe_ns.c)
META=linux-image-amd64

say() { echo "fetch-kernel: $*" >&2; }
die() { echo "fetch-kernel: $*" >&2; exit 1; }

# "<uri> [<signed-by path>]" of the first enabled deb entry whose suite is $1, from the deb822
# files (sources.list.d/*.sources) and the one-line files (sources.list, sources.list.d/*.list).
# Only a Signed-By that names a file is passed on; else apt's trusted keyrings verify it.
mirror_for() {
    local release=$1 f
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f $f ]] || continue
        awk -v rel="$release" '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && suites ~ ("(^| )" rel "( |$)") && enabled !~ /^(no|false)$/ && uri != "") {
                    print uri, signed; found = 1; exit
                }
                types = suites = uri = signed = enabled = ""
            }
            /^#/ { next }
            /^[ \t]*$/ { flush(); next }
            /^[ \t]/ { next }  # continuation (an inline key)
            {
                key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
                if (key == "types") types = $0
                else if (key == "suites") suites = $0
                else if (key == "uris") { split($0, u, " "); uri = u[1] }
                else if (key == "enabled") enabled = tolower($0)
                else if (key == "signed-by" && $0 ~ /^\//) signed = $0
            }
            END { if (!found) flush() }' "$f" | head -n1 | grep . && return 0
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f $f ]] || continue
        awk -v rel="$release" '
            $1 != "deb" { next }
            {
                i = 2; signed = ""
                if ($2 ~ /^\[/) {
                    for (; i <= NF; i++) {
                        if ($i ~ /^\[?signed-by=\//) { s = $i; sub(/^\[?signed-by=/, "", s); sub(/\]$/, "", s); signed = s }
                        if ($i ~ /\]$/) { i++; break }
                    }
                }
                if ($(i + 1) == rel) { print $i, signed; exit }
            }' "$f" | head -n1 | grep . && return 0
    done
    return 1
}

# Prints the names of $2's dependencies (apt-cache depends) in the private configuration.
depends_of() {
    apt-cache "${APT_OPTS[@]}" depends --no-recommends --no-suggests --no-conflicts --no-breaks \
        --no-replaces --no-enhances "$1" 2>/dev/null |
        awk '$1 ~ /^\|?(Pre)?Depends:$/ && $2 !~ /^</ { print $2 }'
}

main() {
    (($# == 1)) || die "usage: $0 CACHE-DIR"
    local cache=$1
    for t in apt-get apt-cache dpkg-deb depmod flock awk; do
        command -v "$t" >/dev/null || die "$t not found"
    done
    mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial" "$cache/debs" ||
        die "cannot create the cache $cache"
    exec 8>"$cache/lock"
    flock 8

    local release
    release=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [[ -n $release ]] || die "/etc/os-release names no VERSION_CODENAME: cannot find this machine's Debian release"
    local entry uri signed
    entry=$(mirror_for "$release") ||
        die "no enabled 'deb' entry with suite '$release' in /etc/apt/sources.list or /etc/apt/sources.list.d/*.{sources,list}: cannot build a $SUITE entry from this machine's Debian mirror"
    read -r uri signed <<<"$entry"
    echo "deb ${signed:+[signed-by=$signed] }$uri $SUITE $COMPONENT" >"$cache/apt/sources.list"
    : >"$cache/apt/status"
    APT_OPTS=(-o "Dir::Etc::SourceList=$cache/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$cache/apt/lists" -o "Dir::Cache=$cache/apt/cache"
        -o "Dir::State::status=$cache/apt/status" -o Dir::Etc::Preferences=/dev/null
        -o Dir::Etc::PreferencesParts=/dev/null -o APT::Sandbox::User=root -q)

    say "updating the $SUITE index from $uri (the mirror of this machine's '$release' entry)"
    local log=$cache/apt/update.log
    # apt-get update exits 0 when an index could not be fetched or verified ("ignored, or old
    # ones used instead"): its warnings say so.
    local failed='^E: |^W: .*(Failed to fetch|failed to download|GPG|signature|NO_PUBKEY|not signed)'
    apt-get "${APT_OPTS[@]}" update >"$log" 2>&1 && ! grep -qE "$failed" "$log" ||
        die "apt-get update of $SUITE from $uri failed: $(grep -E "$failed" "$log" | tr '\n' ' ' || tail -n 3 "$log")"

    local image abi
    image=$(depends_of "$META" | grep -E '^linux-image-[0-9]' | head -n1 || true)
    [[ -n $image ]] || die "$META in $SUITE depends on no linux-image-<version> package"
    abi=${image#linux-image-}
    local kver=${abi%%[-+]*}
    [[ $(printf '%s\n%s\n' "$MIN_VERSION" "$kver" | sort -V | head -n1) == "$MIN_VERSION" ]] ||
        die "$SUITE's newest kernel is $kver, older than $MIN_VERSION (rxe has no per-netns socket before it)"
    local pkgs=() p image_depends
    image_depends=$(depends_of "$image" || true)
    for p in linux-binary linux-base linux-modules; do
        grep -qx "$p-$abi" <<<"$image_depends" || die "$image does not depend on $p-$abi: the package split changed"
        pkgs+=("$p-$abi")
    done
    # One apt-cache show for the three: it prints their stanzas, each opened by its Package: line,
    # and exits 0 even when some name has none, hence the check of each version.
    local shown versions=() version
    shown=$(apt-cache "${APT_OPTS[@]}" show --no-all-versions "${pkgs[@]}")
    for p in "${pkgs[@]}"; do
        version=$(awk -v p="$p" '$1 == "Package:" { ours = $2 == p } ours && $1 == "Version:" { print $2; exit }' <<<"$shown")
        [[ -n $version ]] || die "apt-cache show names no version of $p in $SUITE's index"
        versions+=("$p=$version")
    done
    local stamp="${versions[*]}"

    local dir=$cache/$abi
    local kimg=$dir/root/usr/lib/modules/$abi/vmlinuz
    if [[ -f $dir/complete && $(cat "$dir/complete") == "$stamp" && -f $kimg ]]; then
        say "using the cached $abi ($stamp)"
    else
        say "downloading ${pkgs[*]}"
        rm -rf "${cache:?}/debs" && mkdir -p "$cache/debs"
        (cd "$cache/debs" && apt-get "${APT_OPTS[@]}" download "${pkgs[@]}") >"$cache/apt/download.log" 2>&1 ||
            die "apt-get download ${pkgs[*]} from $uri failed: $(tail -n 3 "$cache/apt/download.log" | tr '\n' ' ')"
        rm -rf "$dir" && mkdir -p "$dir/root"
        for p in "$cache"/debs/*.deb; do
            dpkg-deb -x "$p" "$dir/root" || die "dpkg-deb -x $p failed"
        done
        [[ -f $kimg ]] || die "no kernel image at ${kimg#"$dir/root"} in ${pkgs[*]}"
        # The packages ship no modules.dep (their postinst runs depmod); vng and modprobe in the
        # guest need it.
        depmod -b "$dir/root/usr" "$abi" || die "depmod for $dir/root/usr/lib/modules/$abi failed"
        echo "$stamp" >"$dir/complete"
    fi
    for p in "$cache"/*/complete; do
        [[ ${p%/complete} == "$dir" ]] || rm -rf "${p%/complete}"
    done
    say "kernel $abi ($stamp)"
    echo "$kimg"
}

main "$@"

#!/usr/bin/env bash
# Builds the release binary as it ships and prints its path:
#   install/build.sh   →  target/<host triple>/release/rdma-ns
# glibc is linked statically (crt-static). A runtime execs the plugin for every pod ADD and DEL;
# a static binary skips the dynamic loader (libc and libgcc_s lookups and relocations). On the
# benchmark machine (tests/bench/) that took rdma-ns VERSION from 1.64x to 1.20x the start of
# /bin/true, and its peak RSS in an ADD from 2.7 to 2.0 MB. The plugin uses no NSS or dlopen, the
# parts of glibc that need dynamic linking.
# `cargo build --release` still works and gives the dynamically linked binary in target/release/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
host=$(rustc -vV | sed -n 's/^host: //p')
case "$host" in
  *-linux-gnu*) ;;
  *) echo "install/build.sh: unexpected host $host (expected a *-linux-gnu toolchain)" >&2; exit 1 ;;
esac
# Target-specific flags: with an explicit --target, cargo keeps them off build scripts and
# proc-macros (serde_derive, thiserror-impl), which cannot be built with crt-static.
var="CARGO_TARGET_$(echo "$host" | tr 'a-z-' 'A-Z_')_RUSTFLAGS"
export "$var"="${!var:-} -C target-feature=+crt-static"
cargo build --release --quiet --target "$host"
echo "target/$host/release/rdma-ns"

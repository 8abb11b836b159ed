#!/usr/bin/env bash
# Builds the release binary as it ships and prints its path, one line per architecture:
#   install/build.sh                    the host's architecture:
#                                       target/<arch>-unknown-linux-musl/release/rdma-ns
#   install/build.sh --target ARCH      ARCH: x86_64 or aarch64 (a full musl triple works too);
#                                       repeatable
#   install/build.sh --all              x86_64 and aarch64, in that order
# Other scripts rely on the default: no argument, one line, the host's binary.
#
# The one shipped build is static musl, the same as install/Containerfile makes for the installer
# image, because:
# - it runs on any node whatever its libc, with no ELF interpreter;
# - `devicePermissions.group` resolves group names with getgrnam. Static glibc would route that
#   through NSS, which dlopens the node's own libnss modules of another glibc version; musl reads
#   /etc/group itself, the same on every node;
# - a static binary skips the dynamic loader on every exec (a runtime execs the plugin for every
#   pod ADD and DEL): tests/bench/ measures its start against /bin/true.
#
# Cross builds (aarch64 on x86_64 and the reverse) link with rust-lld, which every rustup
# toolchain ships: the musl targets bring their own C runtime and libc.a, so no cross gcc,
# sysroot or Debian package is needed. A CARGO_TARGET_<TRIPLE>_LINKER already set is kept.
# `RDMA_NS_GIT_COMMIT` names the commit in `--version` for a build without .git (build.rs).
# `cargo build --release` still works and gives a dynamically linked binary in target/release/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; }
die() { echo "install/build.sh: $*" >&2; exit 1; }

triple_of() { # ARCH or TRIPLE -> the musl triple
  case "$1" in
    x86_64 | amd64 | x86_64-unknown-linux-musl) echo x86_64-unknown-linux-musl ;;
    aarch64 | arm64 | aarch64-unknown-linux-musl) echo aarch64-unknown-linux-musl ;;
    *) die "no musl build for $1 (x86_64 and aarch64 are supported)" ;;
  esac
}

targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --all) targets+=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl); shift ;;
    --target)
      [ $# -ge 2 ] || die "--target needs an architecture (x86_64, aarch64)"
      targets+=("$(triple_of "$2")"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
host_arch=$(uname -m)
[ "${#targets[@]}" -gt 0 ] || targets=("$(triple_of "$host_arch")")

installed=$(rustup target list --installed)
for target in "${targets[@]}"; do
  if ! grep -x "$target" >/dev/null <<<"$installed"; then
    # The standard library for the target comes from the rustup distribution server.
    rustup target add "$target" >&2
  fi
done

declare -A seen=()
for target in "${targets[@]}"; do
  [ -z "${seen[$target]:-}" ] || continue
  seen[$target]=1
  env_linker="CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$target")_LINKER"
  if [ "${target%%-*}" != "$host_arch" ] && [ -z "${!env_linker:-}" ]; then
    export "$env_linker=rust-lld"
  fi
  cargo build --release --locked --quiet --target "$target"
  echo "target/$target/release/rdma-ns"
done

#!/usr/bin/env bash
# Builds the release binary as it ships and prints its path:
#   install/build.sh   →  target/<arch>-unknown-linux-musl/release/rdma-ns
# The one shipped build is static musl, the same as install/Containerfile makes for the installer
# image, because:
# - it runs on any node whatever its libc, with no ELF interpreter;
# - `devicePermissions.group` resolves group names with getgrnam. Static glibc would route that
#   through NSS, which dlopens the node's own libnss modules of another glibc version; musl reads
#   /etc/group itself, the same on every node;
# - a static binary skips the dynamic loader on every exec (a runtime execs the plugin for every
#   pod ADD and DEL): tests/bench/ measures its start against /bin/true.
# `cargo build --release` still works and gives a dynamically linked binary in target/release/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
case "$(uname -m)" in
  x86_64 | aarch64) target="$(uname -m)-unknown-linux-musl" ;;
  *) echo "install/build.sh: no musl build for $(uname -m) (x86_64 and aarch64 are supported)" >&2; exit 1 ;;
esac
if ! rustup target list --installed | grep -x "$target" >/dev/null; then
  # The standard library for the target comes from the rustup distribution server.
  rustup target add "$target" >&2
fi
cargo build --release --locked --quiet --target "$target"
echo "target/$target/release/rdma-ns"

#!/usr/bin/env bash
# Tests install/install.sh against temp dirs (never /opt/cni/bin or /etc/cni/net.d).
#   tests/e2e/install_sh_test.sh PLUGIN_BINARY WORKDIR
# Run by tests/e2e/run.sh (case install-sh); exits non-zero on the first failed check.
set -euo pipefail
cd "$(dirname "$0")/../.."
plugin=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
inst=install/install.sh

ok() { printf '    - %s\n' "$*"; }
die() { printf '    FAIL: %s\n' "$*"; exit 1; }
no_temp_files() { # DIR: nothing but the final files (no .NAME.tmp.PID left)
  local left
  left=$(find "$1" -name '.*.tmp.*')
  [ -z "$left" ] || die "temp files left in $1: $left"
}

# 1. binary into a bin dir that does not exist yet
bin=$work/opt/cni/bin
"$inst" --binary "$plugin" --bin-dir "$bin" >"$work/out1" || die "install.sh --binary failed: $(cat "$work/out1")"
cmp -s "$plugin" "$bin/rdma-ns" || die "$bin/rdma-ns differs from $plugin"
[ "$(stat -c %a "$bin/rdma-ns")" = 755 ] || die "mode $(stat -c %a "$bin/rdma-ns"), want 755"
grep -q supportedVersions "$work/out1" || die "no VERSION answer reported: $(cat "$work/out1")"
no_temp_files "$bin"
ok "binary placed in a new --bin-dir, mode 0755, identical, answers VERSION, no temp file left"

# 2. a second install replaces the file by rename (new inode), not by rewriting it in place: a
#    runtime exec'ing the old one is never handed a half-written file (nor ETXTBSY).
before=$(stat -c %i "$bin/rdma-ns")
"$inst" --binary "$plugin" --bin-dir "$bin" >/dev/null || die "re-install failed"
after=$(stat -c %i "$bin/rdma-ns")
[ "$before" != "$after" ] || die "re-install rewrote the file in place (inode $before kept)"
no_temp_files "$bin"
ok "re-install swaps the file atomically (inode $before -> $after)"

# 3. a conf from conf/ by name
nd=$work/etc/cni/net.d
"$inst" --binary "$plugin" --bin-dir "$bin" --conf move --conf-dir "$nd" >/dev/null || die "--conf move failed"
cmp -s conf/move.conflist "$nd/90-rdma-ns-move.conflist" || die "conf not placed as $nd/90-rdma-ns-move.conflist"
[ "$(stat -c %a "$nd/90-rdma-ns-move.conflist")" = 644 ] || die "conf mode $(stat -c %a "$nd/90-rdma-ns-move.conflist")"
no_temp_files "$nd"
ok "--conf move placed conf/move.conflist as 90-rdma-ns-move.conflist (0644)"

# 4. same conf again: fine; a different existing file: refused without --force, replaced with it
"$inst" --binary "$plugin" --bin-dir "$bin" --conf move --conf-dir "$nd" >/dev/null || die "identical conf re-install failed"
echo '{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"rdma-ns","device":"x"}]}' >"$nd/90-rdma-ns-move.conflist"
if "$inst" --binary "$plugin" --bin-dir "$bin" --conf move --conf-dir "$nd" >/dev/null 2>"$work/err4"; then
  die "a different existing conf was overwritten without --force"
fi
grep -q -- --force "$work/err4" || die "refusal does not mention --force: $(cat "$work/err4")"
"$inst" --binary "$plugin" --bin-dir "$bin" --conf move --conf-dir "$nd" --force >/dev/null || die "--force failed"
cmp -s conf/move.conflist "$nd/90-rdma-ns-move.conflist" || die "--force did not replace the conf"
ok "a different existing conf is kept unless --force"

# 5. a conf by path, under a chosen name
cp conf/move.conflist "$work/my.conflist"
"$inst" --binary "$plugin" --bin-dir "$bin" --conf "$work/my.conflist" --conf-dir "$nd" --conf-name 95-rdma.conflist >/dev/null ||
  die "--conf PATH --conf-name failed"
cmp -s conf/move.conflist "$nd/95-rdma.conflist" || die "--conf-name not honoured"
ok "--conf PATH with --conf-name"

# 6. errors change nothing
if "$inst" --binary "$work/missing" --bin-dir "$work/b6" >/dev/null 2>&1; then die "a missing binary was accepted"; fi
[ ! -e "$work/b6/rdma-ns" ] || die "something was placed for a missing binary"
if "$inst" --binary "$plugin" --bin-dir "$bin" --conf nosuch --conf-dir "$work/n6" >/dev/null 2>"$work/err6"; then
  die "an unknown conf name was accepted"
fi
grep -q 'move' "$work/err6" || die "the error does not list the available confs: $(cat "$work/err6")"
[ ! -e "$work/n6" ] || [ -z "$(ls -A "$work/n6")" ] || die "something was placed for an unknown conf"
echo 'not json' >"$work/bad.conflist"
if "$inst" --binary "$plugin" --bin-dir "$bin" --conf "$work/bad.conflist" --conf-dir "$work/n6b" >/dev/null 2>&1; then
  die "a conf that is not JSON was accepted"
fi
if "$inst" --bogus >/dev/null 2>&1; then die "an unknown option was accepted"; fi
"$inst" --help | grep -q -- --bin-dir || die "--help does not describe the options"
ok "missing binary, unknown conf, invalid JSON, unknown option: refused, nothing placed"

# 7. the same script under busybox sh with only busybox applets on PATH (the installer image)
bb=$work/busybox-bin
mkdir -p "$bb"
for a in sh cp mv chmod sync mkdir rm cmp dirname basename sed tr ls cat; do ln -s /bin/busybox "$bb/$a"; done
env -i PATH="$bb" /bin/busybox sh "$inst" --binary "$plugin" --bin-dir "$work/bb/bin" --conf move --conf-dir "$work/bb/net.d" \
  >"$work/out7" 2>&1 || die "install.sh under busybox sh failed: $(cat "$work/out7")"
cmp -s "$plugin" "$work/bb/bin/rdma-ns" && cmp -s conf/move.conflist "$work/bb/net.d/90-rdma-ns-move.conflist" ||
  die "busybox run placed wrong files"
no_temp_files "$work/bb"
ok "works under busybox sh with busybox applets only (as in the installer image)"
# 8. uninstall: refused while an attachment is recorded (a fake record of a live pod), then
# everything goes, the binary last; installed twice first, as an upgrade would.
un=install/uninstall.sh
u=$work/un
"$inst" --binary "$plugin" --bin-dir "$u/bin" --conf move --conf-dir "$u/net.d" >/dev/null
"$inst" --binary "$plugin" --bin-dir "$u/bin" --conf move --conf-dir "$u/net.d" >/dev/null
mkdir -p "$u/data/rdma-move" "$u/modprobe.d"
echo 'options ib_core netns_mode=0' >"$u/modprobe.d/ib_core.conf"
cat >"$u/data/rdma-move/c0ffee:net1.json" <<'REC'
{"schema":2,"network":"rdma-move","containerId":"c0ffee","ifname":"net1","mode":"move","phase":"ready","netns":"/proc/1/ns/net","deviceKey":"pci-0000:3b:00.2","host":{"name":"ens1f0v0","ifindex":7,"mtu":1500,"hwaddr":"02:00:00:00:00:07","wasUp":true}}
REC
"$u/bin/rdma-ns" list --data-dir "$u/data" | grep -q rdma-move || die "rdma-ns list does not show the planted record"
un_args="--bin-dir $u/bin --conf-dir $u/net.d --data-dir $u/data --modprobe $u/modprobe.d/ib_core.conf"
# shellcheck disable=SC2086 # the options are words
if "$un" $un_args >"$work/out8" 2>&1; then die "uninstall went ahead with an attachment recorded"; fi
grep -q "1 attachment(s) remain" "$work/out8" || die "the refusal does not say why: $(cat "$work/out8")"
[ -x "$u/bin/rdma-ns" ] && [ -e "$u/net.d/90-rdma-ns-move.conflist" ] && [ -e "$u/data/rdma-move/c0ffee:net1.json" ] ||
  die "a refused uninstall removed something"
rm "$u/data/rdma-move/c0ffee:net1.json"
# shellcheck disable=SC2086
"$un" $un_args >"$work/out9" 2>&1 || die "uninstall with no attachment failed: $(cat "$work/out9")"
for gone in "$u/bin/rdma-ns" "$u/net.d/90-rdma-ns-move.conflist" "$u/data" "$u/modprobe.d/ib_core.conf"; do
  [ ! -e "$gone" ] || die "uninstall left $gone"
done
[ "$(tail -n1 "$work/out9")" = "removed $u/bin/rdma-ns" ] || die "the binary was not removed last: $(cat "$work/out9")"
ok "uninstall refuses while rdma-ns list shows an attachment, then removes confs, data dir, modprobe snippet and, last, the binary"
rm -rf "$work"

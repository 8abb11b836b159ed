#!/usr/bin/env bash
# A throwaway demonstration of move mode on any Debian 12 root shell, no RDMA hardware needed:
# builds rdma-ns, makes a pod netns and a veth whose host end stands in for a NIC, then runs
# ADD (printing the result and the pod's `ip addr`), CHECK and DEL (showing the device back).
# Uses conf/move.conflist with the device replaced by the demo veth.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

[ "$(id -u)" = 0 ] || { echo "run as root: it creates a network namespace and links" >&2; exit 1; }
need=()
for pkg in iproute2 containernetworking-plugins python3; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi

echo "== building rdma-ns (release, as it ships: install/build.sh)"
plugin=$(install/build.sh)
plugin_dir=$(mktemp -d /tmp/rdma-ns-demo.XXXXXX)
cp "$plugin" "$plugin_dir/rdma-ns"

pod=rdmans-demo
nic=demo-nic0
data="$plugin_dir/state"
cleanup() {
  ip netns del "$pod" 2>/dev/null || true
  ip link del "$nic-p" 2>/dev/null || true
  rm -rf "$plugin_dir"
}
trap cleanup EXIT
cleanup_quiet() { ip netns del "$pod" 2>/dev/null || true; ip link del "$nic-p" 2>/dev/null || true; }
cleanup_quiet
ip netns add "$pod"
ip link add "$nic" type veth peer name "$nic-p"
ip link set "$nic-p" up

# What a runtime does with a conflist: each plugin gets cniVersion and name injected.
conf=$(python3 - "$nic" "$data" <<'PY'
import json, sys
nl = json.load(open("conf/move.conflist"))
plugin = dict(nl["plugins"][0], cniVersion=nl["cniVersion"], name=nl["name"])
plugin["device"], plugin["dataDir"] = sys.argv[1], sys.argv[2]
print(json.dumps(plugin))
PY
)

cni() {  # cni COMMAND [stdin-conf]
  CNI_COMMAND=$1 CNI_CONTAINERID=demo-container CNI_NETNS=/run/netns/$pod CNI_IFNAME=net1 \
    CNI_PATH="$plugin_dir:/usr/lib/cni" "$plugin_dir/rdma-ns" <<<"$2"
}

echo "== host before: $nic"
ip -o link show dev "$nic" | cut -d" " -f2-5
echo "== ADD (conf/move.conflist, device=$nic)"
result=$(cni ADD "$conf")
echo "$result" | python3 -m json.tool
echo "== inside the pod"
ip -n "$pod" addr show net1
echo "== CHECK"
with_prev=$(python3 -c 'import json,sys; c=json.loads(sys.argv[1]); c["prevResult"]=json.loads(sys.argv[2]); print(json.dumps(c))' "$conf" "$result")
cni CHECK "$with_prev" && echo "CHECK ok"
echo "== DEL"
cni DEL "$with_prev" && echo "DEL ok"
echo "== host after: the device is back, original name and MTU, admin down"
ip -o link show dev "$nic" | cut -d" " -f2-5

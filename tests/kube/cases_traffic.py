"""RDMA between pods on the two nodes, through the real stack: kubelet, containerd, Multus,
whereabouts, rdma-ns with a Soft-RoCE device per pod, and the rail segments between the VMs."""
import json
import re
import subprocess
import time

from lab import Fail, case, wait_until

TOOL_TIMEOUT = 300
# How long a server gets to listen: each `ss` through kubectl exec takes tens of seconds on a TCG
# node, and 60 s (two or three looks) ran out before ib_write_bw listened (qos-on-the-rail's
# second real run).
LISTEN_WAIT = 240
# The verbs tools run through `rdma-ns env --exec`, on the device and GID index env names.
ON_ENV = "rdma-ns env --exec -- sh -c "


class PodView:
    """What `rdma-ns env` names in a pod, checked against the node's record and Multus's
    network-status annotation."""

    def __init__(self, lab, pod, node, iface="net1"):
        self.pod, self.node = pod, node
        doc = json.loads(lab.pod_exec(pod, "rdma-ns", "env", "--format", "json").stdout)
        rails = {r["netdev"]: r for r in doc["rails"]}
        if iface not in rails:
            raise Fail(f"{pod}: rdma-ns env names no rail on {iface}: {doc}")
        rail = rails[iface]
        self.env = doc["env"]
        self.ibdev, self.gid, self.ip = rail["ibdev"], rail["gidIndex"], rail["ip"]
        record = [a for a in lab.pod_attachments(node, pod) if a["ifname"] == iface]
        if len(record) != 1:
            raise Fail(f"{pod}: {len(record)} records for {iface} on node{node}")
        if record[0]["ibDevice"] != self.ibdev or self.gid not in record[0]["gidIndexes"]:
            raise Fail(f"{pod}: env names {self.ibdev} GID {self.gid}, the record {record[0]}")
        if not self.ibdev.startswith("rxe_"):
            raise Fail(f"{pod}: {iface}'s device {self.ibdev} is not a Soft-RoCE device of the pod's own")


def background(lab, pod, script):
    """A tool started in a pod through kubectl exec, left running; returns the Popen."""
    argv = ["bash", lab.lab_sh, "kubectl", "exec", pod, "--", "sh", "-c", script]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc, what):
    try:
        out, _ = proc.communicate(timeout=TOOL_TIMEOUT + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise Fail(f"{what}: still running after {TOOL_TIMEOUT + 30} s")
    if proc.returncode != 0:
        raise Fail(f"{what}: exit {proc.returncode}: {out[-1500:]}")
    return out


class InPod:
    """A tool run in a pod whose output and exit status go to files in the pod, not down the
    exec stream. A CI run lost an exec stream when the tool had done its work: the kubelet reset
    the connection (apiserver: "read tcp ...:10250: connection reset by peer", kubectl: "websocket:
    close 1006 (abnormal closure)"), and with it the server's output and exit status. The process
    in the container outlives a dropped stream, so the files still say how it ended."""

    def __init__(self, lab, pod, script, tag):
        self.lab, self.pod, self.tag = lab, pod, tag
        files = f"/tmp/rdma-ns-test.{tag}"
        self.out_file, self.rc_file = files + ".out", files + ".rc"
        wrapped = f"rm -f {self.rc_file}; ( {script} ) >{self.out_file} 2>&1; echo $? >{self.rc_file}"
        self.proc = background(lab, pod, wrapped)

    def kill(self):
        self.proc.kill()

    def wait(self, what):
        """The tool's output; a Fail naming its exit status when that is not 0."""
        try:
            self.proc.communicate(timeout=TOOL_TIMEOUT + 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise Fail(f"{what}: still running after {TOOL_TIMEOUT + 30} s")
        stream = "" if self.proc.returncode == 0 else f" (its exec stream ended with exit {self.proc.returncode})"
        # The tool is bounded by its own `timeout -s KILL`, so the status file comes.
        rc = wait_until(f"{what}: exit status in {self.rc_file}{stream}", TOOL_TIMEOUT + 30,
                        lambda: self.lab.pod_exec(self.pod, "cat", self.rc_file, check=False).stdout.strip(),
                        step=10)
        # The read is an exec too, and its stream can be reset like the tool's: asked again.
        out = wait_until(f"{what}: {self.out_file} read", 60, self._read_out, step=5).stdout
        if rc != "0":
            raise Fail(f"{what}: exit {rc}{stream}: {out[-1500:]}")
        return out

    def _read_out(self):
        got = self.lab.pod_exec(self.pod, "cat", self.out_file, check=False)
        return got if got.returncode == 0 else None


def listening(lab, pod, port):
    out = lab.pod_exec(pod, "ss", "-Hltn", check=False).stdout
    return f":{port} " in out


def rail_bytes(lab):
    """rx and tx bytes of each node's rails, from the nodes' own counters."""
    counts = {}
    for n in (1, 2):
        for rail in ("rail0", "rail1"):
            out = lab.sh(n, f"cat /sys/class/net/{rail}/statistics/rx_bytes /sys/class/net/{rail}/statistics/tx_bytes")
            rx, tx = (int(v) for v in out.split())
            counts[(n, rail)] = (rx, tx)
    return counts


def crossed(before, after, rail, at_least):
    """node1 sent and node2 received at least `at_least` bytes on `rail`."""
    sent = after[(1, rail)][1] - before[(1, rail)][1]
    got = after[(2, rail)][0] - before[(2, rail)][0]
    return sent >= at_least and got >= at_least, sent, got


def cm_listening(lab, pod):
    out = lab.pod_exec(pod, "rdma", "res", "show", "cm_id", check=False).stdout
    return any("LISTEN" in line and "rping" in line for line in out.splitlines())


def server_client(lab, server_pod, server_script, port, client_pod, client_script, what, cm=False):
    server = InPod(lab, server_pod, server_script, "server")
    try:
        if cm:
            # rping's server listens through RDMA CM, no TCP port: its cm_id in LISTEN, as
            # `rdma res` shows it. A client started on a guess (3 s) often came before the
            # server's own kubectl exec had started it, gave up, and left the server waiting
            # until its timeout killed it (exit 137).
            wait_until(f"{what} server listening (RDMA CM)", LISTEN_WAIT, lambda: cm_listening(lab, server_pod))
        else:
            wait_until(f"{what} server listening on {port}", LISTEN_WAIT, lambda: listening(lab, server_pod, port))
        client = InPod(lab, client_pod, client_script, "client")
        client_out = client.wait(f"{what} client in {client_pod}")
    except Fail:
        server.kill()
        raise
    server_out = server.wait(f"{what} server in {server_pod}")
    return server_out, client_out


def ib_write_bw(lab, a, b, size=65536, iters=2000, tclass=False):
    """ib_write_bw from pod a to pod b on env's device and GID index (and with tclass, env's
    traffic class); Gb/s reported."""
    tool = f"timeout -s KILL {TOOL_TIMEOUT} ib_write_bw -d \"${{UCX_NET_DEVICES%%:*}}\" -x \"$UCX_IB_GID_INDEX\" -F --report_gbits -s {size} -n {iters} -p 18515"
    if tclass:
        tool += ' --tclass="$NCCL_IB_TC"'
    server, client = server_client(lab, b.pod, ON_ENV + repr(tool), 18515, a.pod,
                                   ON_ENV + repr(tool + f" {b.ip}"), "ib_write_bw")
    for out, view, peer in ((client, a, b), (server, b, a)):
        gids = [line for line in out.splitlines() if "GID:" in line]
        want_local, want_peer = f"{gid_text(view.ip)}", f"{gid_text(peer.ip)}"
        if len(gids) < 2 or want_local not in gids[0] or want_peer not in gids[1]:
            raise Fail(f"ib_write_bw in {view.pod}: local/remote GIDs {gids}, want {want_local} / {want_peer}")
    rows = [line.split() for line in client.splitlines() if line.strip().startswith(str(size))]
    if not rows:
        raise Fail(f"ib_write_bw: no result row: {client[-800:]}")
    return float(rows[-1][3])


def ib_write_bw_on_rail0(lab, a, b, size=65536, iters=200):
    """ib_write_bw from a (node1) to b (node2), whose bytes must leave node1 and reach node2 on
    rail0 (the nodes' counters) and not on rail1: Gb/s, bytes sent, got, and rail1's."""
    before = rail_bytes(lab)
    gbps = ib_write_bw(lab, a, b, size, iters)
    after = rail_bytes(lab)
    ok, sent, got = crossed(before, after, "rail0", size * iters)
    if not ok:
        raise Fail(f"ib_write_bw's {size * iters} bytes did not cross rail0: node1 sent {sent}, node2 got {got}")
    other = after[(1, "rail1")][1] - before[(1, "rail1")][1]
    if other > size * iters // 100:
        raise Fail(f"rail1 carried {other} bytes during ib_write_bw on rail0")
    return gbps, sent, got, other


def gid_text(ip):
    """How perftest prints the RoCE GID of an IPv4 address: 00:00:...:ff:ff:a:b:c:d in decimal."""
    return ":".join(["00"] * 10 + ["255", "255"] + [f"{int(o):02d}" for o in ip.split(".")])


def rping(lab, a, b, count=10):
    tool = f"timeout -s KILL {TOOL_TIMEOUT} rping"
    server, client = server_client(lab, b.pod, f"{tool} -s -a {b.ip} -C {count}", None, a.pod,
                                   f"{tool} -c -v -a {b.ip} -C {count}", "rping", cm=True)
    pings = client.count("ping data:")
    if pings != count:
        raise Fail(f"rping from {a.pod} to {b.ip}: {pings} of {count} pings: {client[-800:]}")


def ucx_perftest(lab, a, b):
    tool = f"UCX_LOG_LEVEL=info timeout -s KILL {TOOL_TIMEOUT} rdma-ns env --exec -- ucx_perftest -p 13337"
    server, client = server_client(lab, b.pod, tool, 13337, a.pod,
                                   tool + f" {b.ip} -t tag_bw -n 200 -s 65536 -w 10", "ucx_perftest")
    for out, view in ((server, b), (client, a)):
        if f"rc_verbs/{view.ibdev}:1" not in out:
            raise Fail(f"ucx_perftest in {view.pod}: UCX did not use rc_verbs on {view.ibdev}: {out[-1500:]}")
    if "Final:" not in client:
        raise Fail(f"ucx_perftest: no Final line: {client[-800:]}")


def check_network_status(lab, view):
    entries = [e for e in lab.network_status(view.pod) if e.get("interface") == "net1"]
    if len(entries) != 1:
        raise Fail(f"{view.pod}: network-status has {len(entries)} entries for net1: {lab.network_status(view.pod)}")
    e = entries[0]
    if view.ip not in e.get("ips", []):
        raise Fail(f"{view.pod}: network-status net1 IPs {e.get('ips')} lack {view.ip}")
    # Multus v4 passes CNIDeviceInfoFile only with a device ID (a device plugin's resource on the
    # NAD, which the lab's pods do not request: rdma/hca_shared is 0 for Soft-RoCE), so the lab's
    # roce-shared entries carry no device-info (docs/device-permissions.md, "Device-info file"); its presence twin,
    # a NAD with a device plugin's device ID, is the root tier's tests/multus.rs.
    if "device-info" in e:
        raise Fail(f"{view.pod}: network-status has device-info {e['device-info']} though Multus had no device ID for net1")
    if not e.get("mac"):
        raise Fail(f"{view.pod}: network-status net1 has no MAC: {e}")


@case
def traffic_across_nodes(lab):
    lab.lab_pod("t-a", "node1")
    lab.lab_pod("t-b", "node2")
    lab.wait_ready("t-a", "t-b")
    a, b = PodView(lab, "t-a", 1), PodView(lab, "t-b", 2)
    for v in (a, b):
        check_network_status(lab, v)
    gbps, sent, got, other = ib_write_bw_on_rail0(lab, a, b)
    print(f"      ib_write_bw t-a -> t-b: {gbps} Gb/s; rail0 node1 tx +{sent}, node2 rx +{got}; rail1 +{other}")
    rping(lab, a, b)
    ucx_perftest(lab, a, b)
    lab.delete_pods("t-a", "t-b")


def rping_between(lab, a_pod, a_ip, b_pod, b_ip, count=10):
    """rping from a_ip (bound with -I) in a_pod to the server on b_ip in b_pod."""
    tool = f"timeout -s KILL {TOOL_TIMEOUT} rping"
    _, client = server_client(lab, b_pod, f"{tool} -s -a {b_ip} -C {count}", None, a_pod,
                              f"{tool} -c -v -I {a_ip} -a {b_ip} -C {count}", "rping", cm=True)
    if client.count("ping data:") != count:
        raise Fail(f"rping {a_ip} -> {b_ip}: {client.count('ping data:')} of {count}: {client[-800:]}")


@case
def two_rails(lab):
    # A pod shaped like conf/trainer-rails.yaml on rail0 and rail1, on each node: net1 on rail0,
    # net2 on rail1, each with a Soft-RoCE device of its own and its own routing table.
    for pod, node in (("t-rails-a", "node1"), ("t-rails-b", "node2")):
        lab.lab_pod(pod, node, networks="rail0,rail1", shape="conf/trainer-rails.yaml")
    lab.wait_ready("t-rails-a", "t-rails-b")
    views = {}
    for pod, n in (("t-rails-a", 1), ("t-rails-b", 2)):
        views[pod] = [PodView(lab, pod, n, iface) for iface in ("net1", "net2")]
        hca = views[pod][0].env.get("NCCL_IB_HCA", "")
        if not all(v.ibdev in hca for v in views[pod]):
            raise Fail(f"{pod}: NCCL_IB_HCA {hca!r} does not name both rails' devices")
    for i, (rail, other) in enumerate((("rail0", "rail1"), ("rail1", "rail0"))):
        a, b = views["t-rails-a"][i], views["t-rails-b"][i]
        before = rail_bytes(lab)
        rping_between(lab, "t-rails-a", a.ip, "t-rails-b", b.ip, count=50)
        after = rail_bytes(lab)
        ok, sent, got = crossed(before, after, rail, 50 * 64)
        moved = after[(1, other)][1] - before[(1, other)][1]
        if not ok:
            raise Fail(f"rping on {rail} ({a.ip} -> {b.ip}): node1 sent {sent}, node2 got {got} on {rail}")
        if moved >= sent:
            raise Fail(f"rping on {rail} moved {moved} bytes on {other}, {sent} on {rail}")
        print(f"      {rail}: {a.ip} -> {b.ip} on {a.ibdev}: {rail} +{sent} bytes, {other} +{moved}")
    lab.delete_pods("t-rails-a", "t-rails-b")


def rail_capture_start(lab, n, rail, path):
    """tcpdump on node n's rail (the host side of the segment between the VMs), RoCE v2 only,
    printing each packet's IP header (-v: the TOS byte) as it comes (-l)."""
    lab.sh(n, f"rm -f {path}; (setsid timeout -s INT 300 tcpdump -i {rail} -n -v -l udp port 4791 > {path} 2>{path}.err &) ;"
              f" for i in $(seq 50); do grep -q 'listening on' {path}.err && exit 0; sleep 0.2; done; cat {path}.err; exit 1")


def rail_capture_stop(lab, n, path):
    """Stops the capture and returns {(src, dst): {tos, ...}} over the packets it printed."""
    # "[t]cpdump": the pattern must not match this very `sh -c`, whose command line holds it
    # (pkill -f sent the shell SIGINT and the node call ended with 255).
    text = lab.sh(n, f"pkill -INT -f '[t]cpdump -i rail' ; sleep 1; cat {path}")
    seen, tos = {}, None
    for line in text.splitlines():
        # "11:38:08.237756 IP (tos 0x6a,ECT(0), ttl 64, ...": each packet's first line starts
        # with its time; IPv6 names the byte "class".
        if re.search(r"\bIP6? \(", line):
            m = re.search(r"\b(?:tos|class) 0x([0-9a-f]+)", line)
            tos = int(m.group(1), 16) if m else None
        elif " > " in line and tos is not None:
            src, dst = line.split(" > ")[:2]
            key = (src.strip().rsplit(".", 1)[0], dst.split(":")[0].rsplit(".", 1)[0])
            seen.setdefault(key, set()).add(tos)
            tos = None
    return seen


@case
def qos_on_the_rail(lab):
    # conf/nad-macvlan-qos.yaml (roceQos DSCP 26 with ECN, priority 3: traffic class 106) on
    # rail0: what env hands the pods, and the TOS byte of every RoCE packet between the nodes,
    # captured on node1's rail0, for perftest given env's values and RDMA CM's default (rping).
    lab.lab_pod("t-qos-a", "node1", networks="roce-lossless")
    lab.lab_pod("t-qos-b", "node2", networks="roce-lossless")
    lab.wait_ready("t-qos-a", "t-qos-b")
    a, b = PodView(lab, "t-qos-a", 1), PodView(lab, "t-qos-b", 2)
    want = {"NCCL_IB_TC": "106", "UCX_IB_TRAFFIC_CLASS": "106", "NCCL_IB_SL": "3", "UCX_IB_SL": "3"}
    for v in (a, b):
        got = {k: v.env.get(k) for k in want}
        if got != want:
            raise Fail(f"{v.pod}: rdma-ns env gives {got}, the network's roceQos means {want}")
    path = "/tmp/qos-rail0.txt"
    for what, run in (("ib_write_bw --tclass", lambda: ib_write_bw(lab, a, b, 4096, 200, tclass=True)),
                      ("rping", lambda: rping(lab, a, b))):
        rail_capture_start(lab, 1, "rail0", path)
        try:
            run()
        finally:
            seen = rail_capture_stop(lab, 1, path)
        for key in ((a.ip, b.ip), (b.ip, a.ip)):
            if seen.get(key) != {106}:
                raise Fail(f"{what}: RoCE packets {key[0]} -> {key[1]} on rail0 carried TOS {seen.get(key)}, want {{106}} (all: {seen})")
        print(f"      {what}: rail0 TOS 0x6a both ways ({a.ip} <-> {b.ip})")
    lab.delete_pods("t-qos-a", "t-qos-b")

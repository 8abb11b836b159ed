"""Section `env` of the benchmark: `rdma-ns env` on a fixture node with 16 ib devices, 2 RoCE ports
each and 256 GIDs in every port's table (all entries in use: the worst case for a table search),
run inside a pod netns the way a container runs it.

The release binary reads only the real /sys and /dev/infiniband, so a forked child of the
benchmark unshares a mount namespace of its own, mounts the fixture tree (a tmpfs, as sysfs is
memory too) over /sys and a tmpfs over /dev holding /dev/null and the pod's uverbs nodes, enters
the pod netns and spawns `rdma-ns env` there: process start to exit, output read, per run,
interleaved with `/bin/true` spawned the same way (the floor any process start pays).

Beside the wall time, a figure that does not move between machines: the sysfs files one run
opens for reading, counted with strace (`openat` calls that returned a file under /sys, not a
directory or an O_PATH handle), per RDMA interface: the shape's count minus that of a bare pod
(eth0 only) on the same fixture, divided by the shape's rails. A count above its bound fails the
section, in --smoke too.

Shapes (each env run must name the kernel-table GID index planted for it, or the section fails):
- `macvlan`: net1 and net2, macvlan children of two host veths (the rails' parents), whose
  addresses' GIDs are the last entries (255) of port 2 of mlx5_14 and mlx5_15, the two devices
  whose uverbs nodes the pod has, and whose default GIDs (entry 0 of those ports) name the
  parents. env runs as root, as from the node or a pod with CAP_NET_ADMIN: it looks each parent
  up in the host netns (IFLA_LINK_NETNSID) and reads only that port's table. Bound: one table
  (256 entries) plus 24 files per interface.
- `macvlan-unpriv`: the same pod, env run as nobody without capabilities, as in an ordinary pod:
  the kernel refuses the parent lookup, and env searches the tables of the devices the pod can
  open (all 4 ports of mlx5_14 and mlx5_15 before the second rail is found). Bound: those 4
  tables shared by the 2 rails (2 x 256 entries) plus 24 files per interface.
- `move`: two VF netdevs moved in (their sysfs `device` is the VF with its ib device), GIDs at
  entry 255 of port 1 of mlx5_0 and mlx5_1: found through their own device, one table each.
  Bound: one table plus 24 files per interface.
"""

import ctypes
import os
import shutil
import statistics
import subprocess
import time

DEVICES = 16
PORTS = 2
GIDS = 256
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000


def gid_text(a, b, c, d):
    return "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % (a, b, c, d)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text + "\n")


def rel_symlink(root, link, target):
    """A link written relative, as the kernel writes sysfs links."""
    lp = os.path.join(root, link)
    os.makedirs(os.path.dirname(lp), exist_ok=True)
    os.symlink(os.path.relpath(os.path.join(root, target), os.path.dirname(lp)), lp)


def build_fixture(root, pod, port_netdevs):
    """The fixture /sys. `pod` maps (device, port) -> [(index, ip octets, ndev)] of the pod's
    GIDs; every other entry holds another netdev's address, but entry 0, the default GID of the
    port's netdev: `port_netdevs` names it for the pod's ports, `ens<d>f<p-1>np<p-1>` elsewhere."""
    for d in range(DEVICES):
        name = "mlx5_%d" % d
        pci = "devices/pci0000:00/0000:00:%02x.0/0000:%02x:00.0" % (d + 1, d + 0x10)
        dev = pci + "/infiniband/" + name
        rel_symlink(root, "class/infiniband/" + name, dev)
        rel_symlink(root, dev + "/device", pci)
        rel_symlink(root, pci + "/subsystem", "bus/pci")
        rel_symlink(root, "bus/pci/devices/0000:%02x:00.0" % (d + 0x10), pci)
        write(os.path.join(root, pci, "numa_node"), str(d // 8))
        write(os.path.join(root, dev, "node_type"), "1: CA")
        for p in range(1, PORTS + 1):
            pd = os.path.join(root, dev, "ports", str(p))
            write(os.path.join(pd, "state"), "4: ACTIVE")
            write(os.path.join(pd, "phys_state"), "5: LinkUp")
            write(os.path.join(pd, "link_layer"), "Ethernet")
            planted = {i: (ip, ndev) for i, ip, ndev in pod.get((d, p), [])}
            for i in range(GIDS):
                if i in planted:
                    ip, ndev = planted[i]
                    g = gid_text(*ip)
                elif i == 0:
                    g = "fe80:0000:0000:0000:0e42:a1ff:fe%02x:%04x" % (d, p)
                    ndev = port_netdevs.get((d, p), "ens%df%dnp%d" % (d, p - 1, p - 1))
                else:
                    g, ndev = gid_text(172, 16 + d, p, i), "host%d" % (i % 8)
                write(os.path.join(pd, "gids", str(i)), g)
                write(os.path.join(pd, "gid_attrs/types", str(i)), "RoCE v2")
                write(os.path.join(pd, "gid_attrs/ndevs", str(i)), ndev)
        uv = pci + "/infiniband_verbs/uverbs%d" % d
        rel_symlink(root, "class/infiniband_verbs/uverbs%d" % d, uv)
        write(os.path.join(root, uv, "dev"), "231:%d" % (192 + d))
        write(os.path.join(root, uv, "ibdev"), name)
    write(os.path.join(root, "class/infiniband_verbs/abi_version"), "6")


def moved_netdev(root, name, d):
    """class/net/<name> under the PCI function of mlx5_<d> (a VF moved into the pod)."""
    pci = "devices/pci0000:00/0000:00:%02x.0/0000:%02x:00.0" % (d + 1, d + 0x10)
    net = pci + "/net/" + name
    rel_symlink(root, "class/net/" + name, net)
    rel_symlink(root, net + "/device", pci)
    write(os.path.join(root, net, "dev_port"), "0")


MACVLAN = {
    # (name, kind, address, the rail parent's suffix in the host)
    "links": [("net1", "macvlan", "10.20.14.2/16", "r1"), ("net2", "macvlan", "10.21.15.2/16", "r2")],
    "gids": {(14, 2): [(255, (10, 20, 14, 2), "net1")],
             (15, 2): [(255, (10, 21, 15, 2), "net2")]},
    "port_netdevs": {(14, 2): "r1", (15, 2): "r2"},
    "uverbs": [14, 15],
    "expect": "NCCL_IB_HCA='=mlx5_14:2,mlx5_15:2'",
}

SHAPES = {
    "macvlan": dict(MACVLAN, code="mv", privileged=True, tables_per_rail=1),
    "macvlan-unpriv": dict(MACVLAN, code="mu", privileged=False, tables_per_rail=2),
    "move": {
        "code": "mo",
        "links": [("ens1f0v0", "veth", "10.30.0.2/16", None),
                  ("ens1f1v0", "veth", "10.31.0.2/16", None)],
        "gids": {(0, 1): [(255, (10, 30, 0, 2), "ens1f0v0")],
                 (1, 1): [(255, (10, 31, 0, 2), "ens1f1v0")]},
        "port_netdevs": {},
        "moved": [("ens1f0v0", 0), ("ens1f1v0", 1)],
        "uverbs": [0, 1],
        "expect": "NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1'",
        "privileged": True,
        "tables_per_rail": 1,
    },
}
# Files per interface besides its share of GID tables (the port's state, its default GID, the
# PCI function's NUMA node, GID types and netdevs of hits).
FILES_PER_RAIL = 24


def ip(*args):
    subprocess.run(["ip"] + list(args), check=True, capture_output=True)


def make_pod(tag, code, links):
    """A pod netns with `links` (up, addressed), and its eth0 (a veth, never searched); a
    macvlan's parent is a veth of its own in the host (one per rail). Returns the netns and the
    host links to delete."""
    ns = tag + "e" + code
    ip("netns", "add", ns)
    host = ns + "h"
    ip("link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
    ip("link", "set", host, "up")
    ip("-n", ns, "addr", "add", "10.244.0.5/24", "dev", "eth0")
    ip("-n", ns, "link", "set", "eth0", "up")
    hosts = [host]
    for name, kind, addr, parent in links:
        if kind == "macvlan":
            ip("link", "add", ns + parent, "type", "veth", "peer", "name", ns + "p" + parent)
            ip("link", "set", ns + parent, "up")
            hosts.append(ns + parent)
            ip("link", "add", "link", ns + parent, "name", name, "netns", ns, "type", "macvlan")
        else:
            ip("link", "add", ns + name[-3:], "type", "veth", "peer", "name", name, "netns", ns)
        ip("-n", ns, "addr", "add", addr, "dev", name)
        ip("-n", ns, "link", "set", name, "up")
    return ns, hosts


def delete_pod(ns, hosts):
    """Deletes what make_pod made: its host links, then its netns."""
    for h in hosts:
        subprocess.run(["ip", "link", "del", h], capture_output=True)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def setns(libc, ns):
    fd = os.open("/run/netns/" + ns, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            os._exit(4)
    finally:
        os.close(fd)


def sysfs_opens(binary, trace):
    """Runs `binary env` once under strace and counts the files under /sys it opened for
    reading (directories and O_PATH handles left out); returns (count, exit code, stdout)."""
    p = subprocess.run(["strace", "-f", "-qq", "-y", "-e", "trace=open,openat", "-o", trace,
                        binary, "env"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin"})
    count = 0
    with open(trace) as f:
        for line in f:
            if "O_DIRECTORY" in line or "O_PATH" in line:
                continue
            _, sep, ret = line.rpartition(") = ")
            if sep and ret.split("<", 1)[-1].startswith("/sys/"):
                count += 1
    return count, p.returncode, p.stdout


def spawn_timed(binary, args, out_fd):
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(binary, [binary] + args, {"PATH": "/usr/bin:/bin"},
                         file_actions=[(os.POSIX_SPAWN_DUP2, out_fd, 1),
                                       (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)])
    _, status = os.waitpid(pid, 0)
    return time.perf_counter_ns() - t0, os.waitstatus_to_exitcode(status)


def mount_fixture(shape, spec):
    """In the child's own mount namespace: the fixture over /sys, the pod's uverbs nodes in a
    tmpfs over /dev. Returns a directory every user may write to (outputs, traces)."""
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    work = "/run/rdma-ns-bench-env-%d" % os.getpid()
    os.makedirs(work)
    subprocess.run(["mount", "-t", "tmpfs", "rdma-ns-bench-env", work], check=True)
    sysroot, devroot = os.path.join(work, "sys"), os.path.join(work, "dev")
    names = {k: shape["ns"] + v for k, v in spec["port_netdevs"].items()}
    build_fixture(sysroot, spec["gids"], names)
    for name, d in spec.get("moved", []):
        moved_netdev(sysroot, name, d)
    os.makedirs(os.path.join(devroot, "infiniband"))
    nodes = [("null", os.makedev(1, 3))] + [
        ("infiniband/uverbs%d" % d, os.makedev(231, 192 + d)) for d in spec["uverbs"]]
    for node, number in nodes:
        os.mknod(os.path.join(devroot, node), 0o666 | 0o020000, number)
        # mknod's mode goes through the umask; an unprivileged env must open these.
        os.chmod(os.path.join(devroot, node), 0o666)
    subprocess.run(["mount", "--bind", sysroot, "/sys"], check=True)
    subprocess.run(["mount", "--bind", devroot, "/dev"], check=True)
    scratch = os.path.join(work, "scratch")
    os.makedirs(scratch)
    os.chmod(scratch, 0o1777)
    return scratch


def child(binary, shape, runs, result_path):
    """Runs in the forked child: own mount namespace, fixture mounts, then the pod netns (the
    bare pod first, for the count every pod pays)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        os._exit(3)
    spec = SHAPES[shape["name"]]
    scratch = mount_fixture(shape, spec)
    result = open(result_path, "w")
    setns(libc, shape["bare"])
    bare, _, _ = sysfs_opens(binary, os.path.join(scratch, "bare.trace"))
    setns(libc, shape["ns"])
    if not spec["privileged"]:
        # The checkout may sit where nobody cannot reach (a clone under /root, or in a
        # `mktemp -d` directory, mode 0700): nobody runs a copy in the fixture's own tmpfs.
        copy = os.path.join(scratch, "rdma-ns")
        shutil.copy(binary, copy)
        os.chmod(copy, 0o755)
        binary = copy
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    times, true_times, fails = [], [], []
    out_path = os.path.join(scratch, "out")
    for i in range(runs):
        with open(out_path, "w") as out:
            t, code = spawn_timed(binary, ["env"], out.fileno())
            true_times.append(spawn_timed("/bin/true", [], out.fileno())[0])
        text = open(out_path).read()
        if code != 0 or spec["expect"] not in text or "NCCL_IB_GID_INDEX='255'" not in text:
            fails.append("run %d exit %d: %r" % (i, code, text))
        times.append(t)
    opens, code, text = sysfs_opens(binary, os.path.join(scratch, "shape.trace"))
    if code != 0 or spec["expect"] not in text:
        fails.append("the traced run exited %d: %r" % (code, text))
    p = subprocess.run(["/usr/bin/time", "-v", binary, "env"], capture_output=True, text=True)
    rss = None
    for line in p.stderr.splitlines():
        if "Maximum resident set size" in line:
            rss = int(line.split(":")[1])
    result.write("%s %d %d\n" % (rss, bare, opens))
    result.write(",".join(str(t) for t in times) + "\n")
    result.write(",".join(str(t) for t in true_times) + "\n")
    for fl in fails[:5]:
        result.write("FAIL %s\n" % fl)
    result.close()
    os._exit(0)


def measure(binary, tag, name, bare, runs, failures):
    """One shape in a forked child; returns (times, /bin/true times, rss, bare opens, opens)."""
    spec = SHAPES[name]
    ns, hosts = make_pod(tag, spec["code"], spec["links"])
    result = "/run/rdma-ns-bench-env-%s.txt" % name
    try:
        pid = os.fork()
        if pid == 0:
            try:
                child(binary, {"name": name, "ns": ns, "bare": bare}, runs, result)
            finally:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            failures.append("env %s: the fixture child exited %d" % (
                name, os.waitstatus_to_exitcode(status)))
            return None
        lines = open(result).read().splitlines()
        os.unlink(result)
        rss, bare_opens, opens = lines[0].split()
        failures.extend("env %s: %s" % (name, l[5:]) for l in lines[3:])
        return ([int(t) for t in lines[1].split(",")], [int(t) for t in lines[2].split(",")],
                None if rss == "None" else int(rss), int(bare_opens), int(opens))
    finally:
        delete_pod(ns, hosts)


def run(binary, tag, runs, out, failures, csv_path):
    """The section: each shape's median and p95 wall beside /bin/true's, peak RSS, and the
    sysfs files opened per interface, against the targets."""
    bare, hosts = make_pod(tag, "ba", [])
    rows = []
    try:
        for name in SHAPES:
            got = measure(binary, tag, name, bare, runs, failures)
            if got is not None:
                rows.append((name,) + got)
    finally:
        delete_pod(bare, hosts)
    with open(csv_path, "w") as f:
        f.write("shape,run,env_ns,true_ns\n")
        for name, times, true_times, *_ in rows:
            f.writelines("%s,%d,%d,%d\n" % (name, i, t, u)
                         for i, (t, u) in enumerate(zip(times, true_times)))
    report(rows, runs, out, failures)


def report(rows, runs, out, failures):
    out("")
    out("rdma-ns env in a pod on a fixture node (%d ib devices x %d ports x %d GIDs, all used), "
        "%d runs each, interleaved with /bin/true" % (DEVICES, PORTS, GIDS, runs))
    for name, times, true_times, rss, bare, opens in rows:
        spec = SHAPES[name]
        med = statistics.median(times) / 1e6
        p95 = sorted(times)[int(0.95 * (len(times) - 1))] / 1e6
        rails = len(spec["links"])
        per_rail = (opens - bare) / rails
        bound = spec["tables_per_rail"] * GIDS + FILES_PER_RAIL
        out("  %-14s wall median %.2f ms, p95 %.2f ms [target <= 5 ms: %s]; /bin/true %.2f ms; "
            "peak RSS %s kB [target <= 3072: %s]" % (
                name, med, p95, "ok" if med <= 5 else "MISS",
                statistics.median(true_times) / 1e6, rss,
                "ok" if rss is not None and rss <= 3072 else "MISS"))
        out("  %-14s sysfs files opened: %d (a bare pod: %d), %.0f per interface "
            "[bound %d: %s]" % ("", opens, bare, per_rail, bound,
                                "ok" if per_rail <= bound else "MISS"))
        if per_rail > bound:
            failures.append("env %s: %.0f sysfs files per interface, above %d" % (
                name, per_rail, bound))

"""Section `env` of the benchmark: `rdma-ns env` on a fixture node with 16 ib devices, 2 RoCE
ports each and 256 GIDs in every port's table (all entries in use: the worst case for a table
search), run inside a pod netns the way a container runs it.

The release binary reads only the real /sys and /dev/infiniband, so a forked child of the
benchmark unshares a mount namespace of its own, mounts the fixture tree (a tmpfs, as sysfs is
memory too) over /sys and a tmpfs over /dev holding /dev/null and the pod's uverbs nodes, enters
the pod netns and spawns `rdma-ns env` there: process start to exit, output read, per run.

Two pod shapes (each env run must name the kernel-table GID index planted for it, or the
section fails):
- `macvlan`: net1 and net2, macvlan children (of a veth in the host) whose addresses' GIDs are
  the last entries (255) of port 2 of mlx5_14 and mlx5_15, the two devices whose uverbs nodes the
  pod has: every entry of both devices' four ports is read before the second is found;
- `move`: two VF netdevs moved in (their sysfs `device` is the VF with its ib device), GIDs at
  entry 255 of port 1 of mlx5_0 and mlx5_1: found through their own device, one table each.
"""

import ctypes
import os
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


def build_fixture(root, pod):
    """The fixture /sys. `pod` maps (device, port) -> [(index, ip octets, ndev)] of the pod's
    GIDs; every other entry holds another netdev's address."""
    for d in range(DEVICES):
        name = "mlx5_%d" % d
        pci = "devices/pci0000:00/0000:00:%02x.0/0000:%02x:00.0" % (d + 1, d + 0x10)
        dev = pci + "/infiniband/" + name
        rel_symlink(root, "class/infiniband/" + name, dev)
        rel_symlink(root, dev + "/device", pci)
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


SHAPES = {
    "macvlan": {
        "links": [("net1", "macvlan", "10.20.14.2/16"), ("net2", "macvlan", "10.21.15.2/16")],
        "gids": {(14, 2): [(255, (10, 20, 14, 2), "net1")],
                 (15, 2): [(255, (10, 21, 15, 2), "net2")]},
        "uverbs": [14, 15],
        "expect": "NCCL_IB_HCA='=mlx5_14:2,mlx5_15:2'",
    },
    "move": {
        "links": [("ens1f0v0", "veth", "10.30.0.2/16"), ("ens1f1v0", "veth", "10.31.0.2/16")],
        "gids": {(0, 1): [(255, (10, 30, 0, 2), "ens1f0v0")],
                 (1, 1): [(255, (10, 31, 0, 2), "ens1f1v0")]},
        "moved": [("ens1f0v0", 0), ("ens1f1v0", 1)],
        "uverbs": [0, 1],
        "expect": "NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1'",
    },
}


def ip(*args):
    subprocess.run(["ip"] + list(args), check=True, capture_output=True)


def make_pod(tag, shape):
    """A pod netns with the shape's links (up, addressed), and its eth0 (a veth, never searched)."""
    ns = tag + "e" + shape[:2]
    ip("netns", "add", ns)
    host = ns + "h"
    ip("link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
    ip("link", "set", host, "up")
    ip("-n", ns, "addr", "add", "10.244.0.5/24", "dev", "eth0")
    ip("-n", ns, "link", "set", "eth0", "up")
    for name, kind, addr in SHAPES[shape]["links"]:
        if kind == "macvlan":
            ip("link", "add", "link", host, "name", name, "netns", ns, "type", "macvlan")
        else:
            ip("link", "add", ns + name[-3:], "type", "veth", "peer", "name", name, "netns", ns)
        ip("-n", ns, "addr", "add", addr, "dev", name)
        ip("-n", ns, "link", "set", name, "up")
    return ns, host


def child(binary, shape, ns, runs, result_path):
    """Runs in the forked child: own mount namespace, fixture mounts, then the pod netns."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        os._exit(3)
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    work = "/run/rdma-ns-bench-env-%d" % os.getpid()
    os.makedirs(work)
    subprocess.run(["mount", "-t", "tmpfs", "rdma-ns-bench-env", work], check=True)
    sysroot, devroot = os.path.join(work, "sys"), os.path.join(work, "dev")
    spec = SHAPES[shape]
    build_fixture(sysroot, spec["gids"])
    for name, d in spec.get("moved", []):
        moved_netdev(sysroot, name, d)
    os.makedirs(os.path.join(devroot, "infiniband"))
    os.mknod(os.path.join(devroot, "null"), 0o666 | 0o020000, os.makedev(1, 3))
    for d in spec["uverbs"]:
        os.mknod(os.path.join(devroot, "infiniband", "uverbs%d" % d), 0o666 | 0o020000,
                 os.makedev(231, 192 + d))
    subprocess.run(["mount", "--bind", sysroot, "/sys"], check=True)
    subprocess.run(["mount", "--bind", devroot, "/dev"], check=True)
    fd = os.open("/run/netns/" + ns, os.O_RDONLY)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        os._exit(4)
    times, fails = [], []
    out_path = os.path.join(work, "out")
    for i in range(runs):
        with open(out_path, "w") as out:
            t0 = time.perf_counter_ns()
            pid = os.posix_spawn(binary, [binary, "env"], {"PATH": "/usr/bin:/bin"},
                                 file_actions=[(os.POSIX_SPAWN_DUP2, out.fileno(), 1),
                                               (os.POSIX_SPAWN_OPEN, 2, "/dev/null",
                                                os.O_WRONLY, 0)])
            _, status = os.waitpid(pid, 0)
            t1 = time.perf_counter_ns()
        text = open(out_path).read()
        if os.waitstatus_to_exitcode(status) != 0 or spec["expect"] not in text \
                or "NCCL_IB_GID_INDEX='255'" not in text:
            fails.append("run %d exit %d: %r" % (i, os.waitstatus_to_exitcode(status), text))
        times.append(t1 - t0)
    p = subprocess.run(["/usr/bin/time", "-v", binary, "env"], capture_output=True, text=True)
    rss = None
    for line in p.stderr.splitlines():
        if "Maximum resident set size" in line:
            rss = int(line.split(":")[1])
    with open(result_path, "w") as f:
        f.write("%s\n" % rss)
        f.write(",".join(str(t) for t in times) + "\n")
        for fl in fails[:5]:
            f.write("FAIL %s\n" % fl)
    os._exit(0)


def run(binary, tag, runs, out, failures, csv_path):
    """The section: each shape's median and p95 wall and peak RSS, against the targets."""
    rows = []
    for shape in SHAPES:
        ns, host = make_pod(tag, shape)
        result = "/run/rdma-ns-bench-env-%s.txt" % shape
        try:
            pid = os.fork()
            if pid == 0:
                try:
                    child(binary, shape, ns, runs, result)
                finally:
                    os._exit(2)
            _, status = os.waitpid(pid, 0)
            if os.waitstatus_to_exitcode(status) != 0:
                failures.append("env %s: the fixture child exited %d" % (
                    shape, os.waitstatus_to_exitcode(status)))
                continue
            lines = open(result).read().splitlines()
            os.unlink(result)
            rss = int(lines[0]) if lines[0] != "None" else None
            times = [int(t) for t in lines[1].split(",")]
            failures.extend("env %s: %s" % (shape, l[5:]) for l in lines[2:])
            rows.append((shape, times, rss))
        finally:
            subprocess.run(["ip", "link", "del", host], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    with open(csv_path, "w") as f:
        f.write("shape,run,ns\n")
        for shape, times, _ in rows:
            f.writelines("%s,%d,%d\n" % (shape, i, t) for i, t in enumerate(times))
    out("")
    out("rdma-ns env in a pod on a fixture node (%d ib devices x %d ports x %d GIDs, all used), "
        "%d runs each" % (DEVICES, PORTS, GIDS, runs))
    for shape, times, rss in rows:
        med = statistics.median(times) / 1e6
        p95 = sorted(times)[int(0.95 * (len(times) - 1))] / 1e6
        out("  %-8s wall median %.2f ms, p95 %.2f ms [target <= 5 ms: %s]; peak RSS %s kB "
            "[target <= 3072: %s]" % (shape, med, p95, "ok" if med <= 5 else "MISS", rss,
                                       "ok" if rss is not None and rss <= 3072 else "MISS"))

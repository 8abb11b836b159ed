"""Runs on a lab node (the kube-start bench sends it on stdin): the CPU every process of the node
used in a window, by command, so that a pod start's cost is seen process by process.

`start`: BSD process accounting on (acct(2), into ACCT), and a snapshot of every live process's
CPU and of /proc/stat. `stop`: accounting off, and one JSON line on stdout:
- `busy_ms` / `idle_ms`: the node's CPU busy and idle (with iowait) in the window, from /proc/stat;
- `ms`: {command: CPU ms}, processes that exited in the window from the accounting file (one
  acct_v3 record each, written at exit: rdma-ns, the IPAM and chain plugins, runc...), those
  alive at the end from /proc (their growth since `start`). Kernel workers (`kworker/...`, whose
  name changes with the work they do) count as one `kworker`, matched by pid. A process that
  exited in the window is in the accounting file only, with all its CPU (a process that old
  and that short of life at once is rare: the bench's pods start on a quiet node).

Why acct(2): a CNI plugin lives for a second, too short for a /proc snapshot to see, and its CPU
lands in containerd's children's counts only once reaped, mixed with every other child's.
"""

import ctypes
import json
import os
import struct
import sys

ACCT = "/run/rdma-ns-bench.pacct"
SNAPSHOT = "/run/rdma-ns-bench.cpu.json"
# include/uapi/linux/acct.h, struct acct_v3: 64 bytes; ac_utime and ac_stime are comp_t at 32
# and 34 (AHZ = USER_HZ = 100 for version 3), ac_comm the last 16 bytes.
RECORD = 64
USER_HZ_MS = 10


def comp_t(value):
    """comp_t: a 13-bit mantissa, and a base-8 exponent in the top 3 bits."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def group(name):
    return "kworker" if name.startswith("kworker/") else name


def live():
    """{pid: [command, CPU ticks]} of every process now (utime + stime)."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        out[pid] = [group(stat[stat.find("(") + 1:stat.rfind(")")]), int(fields[11]) + int(fields[12])]
    return out


def node_cpu():
    """(busy, idle) ticks from /proc/stat's first line; iowait counts as idle."""
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, open("/proc/stat").readline().split()[1:9])
    return user + nice + system + irq + softirq + steal, idle + iowait


def exited(data):
    """{command: CPU ms} from acct_v3 records."""
    out = {}
    for at in range(0, len(data) - RECORD + 1, RECORD):
        utime, stime = struct.unpack_from("<HH", data, at + 32)
        name = group(data[at + 48:at + RECORD].split(b"\0")[0].decode(errors="replace"))
        out[name] = out.get(name, 0) + (comp_t(utime) + comp_t(stime)) * USER_HZ_MS
    return out


def acct(path):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(path) != 0:
        sys.exit(f"acct({path!r}): errno {ctypes.get_errno()}: is BSD process accounting in this kernel?")


def start():
    open(ACCT, "wb").close()
    acct(ACCT.encode())
    json.dump({"live": live(), "cpu": node_cpu()}, open(SNAPSHOT, "w"))


def stop():
    now, cpu = live(), node_cpu()
    acct(None)
    before = json.load(open(SNAPSHOT))
    ms = exited(open(ACCT, "rb").read())
    for pid, (name, ticks) in now.items():
        was = before["live"].get(pid)
        grown = ticks - (was[1] if was and was[0] == name else 0)
        if grown > 0:
            ms[name] = ms.get(name, 0) + grown * USER_HZ_MS
    busy, idle = (n - b for n, b in zip(cpu, before["cpu"]))
    print(json.dumps({"busy_ms": busy * USER_HZ_MS, "idle_ms": idle * USER_HZ_MS, "ms": ms}))


if __name__ == "__main__":
    {"start": start, "stop": stop}[sys.argv[1]]()

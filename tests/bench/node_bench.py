"""Section `node` of the benchmark: `rdma-ns doctor` and `rdma-ns exporter` (the shipped
binary, pointed at a fixture node with --sysfs, --dev, --proc, --data-dir, --conf-dir).

The fixture node (16 ib devices x 2 RoCE ports, 64 attachment records) is written by the
library's own fixture builders (tests/bench/node_fixture.rs, a cargo example); untimed.

A scrape is timed against two references measured in the same run, interleaved with it:
- the floor: one process (tests/bench/scrape_floor.c) that opens and reads exactly the files a
  scrape reads, each directory opened once and each file relative to it, one read(2) a file,
  and nothing else: no directory listing, no parsing, no text. Its pass is timed as a request
  over a pipe; the scrape as Prometheus sees it, over TCP. The file list is built by walking the
  fixture the way the exporter does (`scrape_files`) and, where strace is installed, checked
  against the files a scrape opens once the first has read the records;
- `/bin/true`'s start (posix_spawn and wait), which says how fast this machine is for the
  wall-time target.
"""

import csv
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import time

FLOOR_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scrape_floor.c")


def ms(ns):
    return ns / 1e6


def verdict(ok):
    return "ok" if ok else "MISS"


def build_fixture(repo, outdir):
    fx = os.path.join(outdir, "node-fixture")
    subprocess.run(["cargo", "run", "-q", "--features", "test-support", "--example",
                    "node_fixture", "--", fx], cwd=repo, check=True, stdout=subprocess.DEVNULL)
    return fx


def build_floor(outdir):
    binary = os.path.join(outdir, "scrape_floor")
    subprocess.run(["cc", "-O2", "-Wall", "-o", binary, FLOOR_SOURCE], check=True)
    return binary


def counter_files(d):
    """What the exporter reads of a counter directory: every file but `lifespan` (a setting)."""
    if not os.path.isdir(d):
        return []
    return [c for c in sorted(os.listdir(d))
            if c != "lifespan" and os.path.isfile(os.path.join(d, c))]


def scrape_files(sys_root):
    """(directory, [file names]) of every file a scrape reads: per ib device its netdevs'
    dev_port (or rxe's `parent`), per port state, phys_state, link_layer and rate, the port's
    counters and hw_counters, the device's hw_counters. The attachment records are read again
    only when one changed (between scrapes the exporter only stats them), so they are not in
    the list: the bench's records do not change."""
    out = []
    cls = os.path.join(sys_root, "class", "infiniband")
    for dev in sorted(os.listdir(cls)):
        ddir = os.path.realpath(os.path.join(cls, dev))
        net = os.path.join(ddir, "device", "net")
        if os.path.isdir(os.path.join(ddir, "device")):
            for n in sorted(os.listdir(net)) if os.path.isdir(net) else []:
                if os.path.exists(os.path.join(net, n, "dev_port")):
                    out.append((os.path.join(net, n), ["dev_port"]))
        elif os.path.exists(os.path.join(ddir, "parent")):
            out.append((ddir, ["parent"]))
        ports = os.path.join(ddir, "ports")
        for p in sorted(os.listdir(ports), key=int):
            pdir = os.path.join(ports, p)
            out.append((pdir, [a for a in ("state", "phys_state", "link_layer", "rate")
                               if os.path.exists(os.path.join(pdir, a))]))
            for sub in ("counters", "hw_counters"):
                files = counter_files(os.path.join(pdir, sub))
                if files:
                    out.append((os.path.join(pdir, sub), files))
        files = counter_files(os.path.join(ddir, "hw_counters"))
        if files:
            out.append((os.path.join(ddir, "hw_counters"), files))
    return out


def write_list(path, dirs):
    with open(path, "w") as f:
        for d, files in dirs:
            f.write("D %s\n" % d)
            f.writelines("F %s\n" % name for name in files)


def listed(dirs):
    return {os.path.realpath(os.path.join(d, f)) for d, files in dirs for f in files}


def opened_files(trace):
    """The regular files an strace of open/openat shows opened, as real paths."""
    fds, files = {}, set()
    pattern = re.compile(r'(?:\d+ +)?(open|openat)\((?:(AT_FDCWD|\d+), )?"([^"]+)".*\) = (\d+)$')
    for line in trace.splitlines():
        m = pattern.match(line)
        if not m:
            continue
        _, base, path, fd = m.groups()
        if base and base != "AT_FDCWD":
            path = os.path.join(fds.get(base, "?"), path)
        fds[fd] = path
        files.add(path)
    return {os.path.realpath(f) for f in files if not os.path.isdir(f)}


class Exporter:
    def __init__(self, argv):
        self.proc = subprocess.Popen(argv + ["--listen", "127.0.0.1:0"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        line = self.proc.stderr.readline().decode().strip()
        host, port = line.rsplit("http://", 1)[-1].rsplit("/metrics", 1)[0].rsplit(":", 1)
        self.sockaddr = (host, int(port))
        self.buf = bytearray(1 << 20)

    def get(self, path="/metrics"):
        """One scrape as Prometheus does it: connect, GET, read to the server's close. The
        client does no more than that (an address parsed once, one receive buffer), so that
        what is timed is the exporter's, as what the floor's pass times is the floor's."""
        request = ("GET %s HTTP/1.1\r\nHost: bench\r\n\r\n" % path).encode()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as c:
            c.settimeout(10)
            c.connect(self.sockaddr)
            c.sendall(request)
            view, got = memoryview(self.buf), 0
            while True:
                n = c.recv_into(view[got:])
                if not n:
                    break
                got += n
                if got == len(self.buf):
                    self.buf.extend(bytes(len(self.buf)))
                    view = memoryview(self.buf)
        return bytes(view[:got])

    def stop(self):
        """SIGTERM; the exit code, None when it did not stop within 5 s."""
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


def check_list(exporter, dirs, failures):
    """The floor's list against the files one scrape opens, traced with strace (attached to the
    running exporter after a first scrape, so that neither its start nor its first reading of
    the records is in the trace) when strace is installed."""
    strace = shutil.which("strace")
    if not strace:
        return "not checked (no strace)"
    exporter.get()
    trace_file = "/tmp/rdma-ns-bench-%d.strace" % os.getpid()
    st = subprocess.Popen([strace, "-f", "-p", str(exporter.proc.pid), "-e", "trace=open,openat",
                           "-o", trace_file], stderr=subprocess.PIPE)
    try:
        st.stderr.readline()  # "strace: Process N attached": tracing from here on
        exporter.get()
    finally:
        st.send_signal(signal.SIGINT)
        st.wait(timeout=10)
    with open(trace_file) as f:
        opened = opened_files(f.read())
    os.unlink(trace_file)
    want = listed(dirs)
    if opened != want:
        failures.append("the floor's files differ from the scrape's: only the scrape %s, only "
                        "the floor %s" % (sorted(opened - want)[:5], sorted(want - opened)[:5]))
        return "DIFFERS from the scrape's"
    return "the same %d files as one scrape opens (strace)" % len(want)


def spawn_true():
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn("/bin/true", ["/bin/true"], {})
    os.waitpid(pid, 0)
    return time.perf_counter_ns() - t0


def render_seconds(resp):
    m = re.search(rb"\nrdma_ns_exporter_render_seconds ([0-9.e+-]+)\n", resp)
    return float(m.group(1)) * 1e9 if m else None


def doctor(plugin, fx, runs, failures):
    argv = [plugin, "doctor", "--sysfs", os.path.join(fx, "sys"), "--dev", os.path.join(fx, "dev"),
            "--proc", os.path.join(fx, "proc"), "--data-dir", os.path.join(fx, "data"),
            "--conf-dir", os.path.join(fx, "confs")]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        times.append(time.perf_counter_ns() - t0)
        if p.returncode not in (0, 1, 2) or not p.stdout.endswith(b" FAIL\n"):
            failures.append("doctor exited %d: %s" % (p.returncode, p.stderr.decode()[-300:]))
    return times


def scrapes(exporter, floor, n, failures):
    """n scrapes, each followed by a floor pass and a /bin/true start; RSS after 100 and n."""
    t = {"scrape": [], "render": [], "floor": [], "true": []}
    rss, size, floor_bytes = {}, None, None
    for i in range(1, n + 1):
        t0 = time.perf_counter_ns()
        resp = exporter.get()
        t["scrape"].append(time.perf_counter_ns() - t0)
        if not resp.startswith(b"HTTP/1.1 200 OK") or b"rdma_ns_attachment_info" not in resp:
            failures.append("scrape %d: %r" % (i, resp[:200]))
            break
        t["render"].append(render_seconds(resp))
        size = size or len(resp)
        t0 = time.perf_counter_ns()
        floor.stdin.write(b"\n")
        floor.stdin.flush()
        answer = floor.stdout.readline()
        t["floor"].append(time.perf_counter_ns() - t0)
        if floor_bytes is None:
            floor_bytes = int(answer or -1)
            if floor_bytes <= 0:
                failures.append("the floor could not read its files: %r" % answer)
        t["true"].append(spawn_true())
        if i in (100, n):
            rss[i] = vm_rss_kb(exporter.proc.pid)
    return t, rss, size


def vm_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def run(plugin, repo, outdir, doctor_runs, n_scrapes, out, failures):
    fx = build_fixture(repo, outdir)
    floor_bin = build_floor(outdir)
    dirs = scrape_files(os.path.join(fx, "sys"))
    list_path = os.path.join(outdir, "scrape-floor-files.txt")
    write_list(list_path, dirs)
    doctor_ns = doctor(plugin, fx, doctor_runs, failures)
    exporter_argv = [plugin, "exporter", "--sysfs", os.path.join(fx, "sys"), "--data-dir",
                     os.path.join(fx, "data")]
    exporter = Exporter(exporter_argv)
    floor = subprocess.Popen([floor_bin, list_path], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    try:
        checked = check_list(exporter, dirs, failures)
        t, rss, size = scrapes(exporter, floor, n_scrapes, failures)
    finally:
        code = exporter.stop()
        floor.stdin.close()
        floor.wait()
    if code != 0:
        failures.append("exporter did not exit 0 on SIGTERM: %r" % code)
    with open(os.path.join(outdir, "node.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["what", "i", "ns"])
        w.writerows(("doctor", i, v) for i, v in enumerate(doctor_ns))
        for what in ("scrape", "render", "floor", "true"):
            w.writerows((what, i, v) for i, v in enumerate(t[what]))
    report(out, doctor_ns, t, rss, size, n_scrapes, len(listed(dirs)), checked)


def report(out, doctor_ns, t, rss, size, n, files, checked):
    out("")
    out("node: 16 ib devices x 2 ports, 64 attachment records (fixture sysfs, --sysfs)")
    if doctor_ns:
        out("doctor wall, %d runs: median %.1f ms, max %.1f ms [target <= 200: %s]" % (
            len(doctor_ns), ms(statistics.median(doctor_ns)), ms(max(doctor_ns)),
            verdict(max(doctor_ns) <= 200e6)))
    if len(t["scrape"]) < 100:
        return
    med = {k: statistics.median(v) for k, v in t.items() if v and None not in v}
    out("floor: one process reading the scrape's %d files, %s" % (files, checked))
    ratio = med["scrape"] / med["floor"]
    out("scrape (%d bytes), median of %d: %.2f ms (render %.2f ms in the exporter); floor "
        "%.2f ms; ratio %.2f [target <= 1.5: %s]" % (
            size or 0, len(t["scrape"]), ms(med["scrape"]), ms(med.get("render", 0)),
            ms(med["floor"]), ratio, verdict(ratio <= 1.5)))
    out("scrape wall median %.2f ms [target <= 10: %s], /bin/true start %.3f ms in the same run"
        % (ms(med["scrape"]), verdict(med["scrape"] <= 10e6), ms(med["true"])))
    if 100 in rss and n in rss:
        out("exporter RSS after scrape 100: %s kB, after %d: %s kB [target <= 5120 and no "
            "growth: %s]" % (rss[100], n, rss[n], verdict(rss[n] <= 5120 and rss[n] <= rss[100])))

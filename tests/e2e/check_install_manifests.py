#!/usr/bin/env python3
"""Static checks of the install manifests (Debian's python3-yaml; run by tests/e2e/run.sh).

    check_install_manifests.py daemonset [PATH]  install/daemonset.yaml (or PATH: run.sh feeds
                                              broken copies to show the checks catch them)
    check_install_manifests.py containerfile [PATH]  install/Containerfile (or PATH) and its
                                              agreement with the DaemonSet (binary path, mount
                                              path); base images pinned by digest or marked
                                              `unpinned:`
    check_install_manifests.py init-script    print the DaemonSet init container's shell script
                                              (run.sh executes it in the locally built image)
    check_install_manifests.py node-agent [PATH]  install/node-agent.yaml (or PATH) and
                                              install/prometheus-scrape.yaml; `daemonset` without
                                              PATH checks them too

Exits non-zero with one line per failed check.
"""
import os
import re
import shlex
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DAEMONSET = os.path.join(REPO, "install", "daemonset.yaml")
CONTAINERFILE = os.path.join(REPO, "install", "Containerfile")
DAEMONSET_PATH = [DAEMONSET]
NODE_AGENT_PATH = [os.path.join(REPO, "install", "node-agent.yaml")]
SCRAPE = os.path.join(REPO, "install", "prometheus-scrape.yaml")
NFD_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
CONTAINERFILE_PATH = [CONTAINERFILE]
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
    return cond


def ok(msg):
    print(f"    - {msg}")


def load_daemonset():
    with open(DAEMONSET_PATH[0]) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    ds = [d for d in docs if d.get("kind") == "DaemonSet"]
    if len(ds) != 1:
        sys.exit(f"    FAIL: expected exactly one DaemonSet in {DAEMONSET_PATH[0]}, found {len(ds)}")
    return ds[0]


def init_container(ds):
    inits = ds["spec"]["template"]["spec"].get("initContainers") or []
    if len(inits) != 1:
        sys.exit(f"    FAIL: expected one init container, found {len(inits)}")
    return inits[0]


def init_script(c):
    """The init container's shell script: command + args, `sh -c SCRIPT` form."""
    argv = list(c.get("command") or []) + list(c.get("args") or [])
    if len(argv) >= 3 and argv[0] in ("/bin/sh", "sh", "/bin/bash") and argv[1] == "-c":
        return argv[2]
    return None


def expand(text, variables):
    for _ in range(3):
        text = re.sub(r'\$\{?(\w+)\}?', lambda m: variables.get(m.group(1), m.group(0)), text)
    return text


def copy_then_rename(script, mount):
    """Finds `cp SRC TMP` then `mv [-f] TMP DEST/rdma-ns` with TMP in the same directory as the
    destination (so the rename is atomic) and DEST the hostPath mount. Returns (src, tmp) or None."""
    variables = {"$": "PID"}
    cp = None
    for raw in script.splitlines():
        line = raw.strip()
        m = re.match(r'^(\w+)=(.*)$', line)
        if m:
            value = shlex.split(m.group(2))[0] if m.group(2) else ""
            variables[m.group(1)] = expand(value, variables)
            continue
        try:
            words = [expand(w, variables) for w in shlex.split(line)]
        except ValueError:
            continue
        if not words:
            continue
        if words[0] == "cp" and len(words) == 3:
            cp = (words[1], words[2])
        elif words[0] == "mv" and cp:
            args = [w for w in words[1:] if not w.startswith("-")]
            if len(args) == 2 and args[0] == cp[1]:
                tmp, dest = args
                same_dir = os.path.dirname(tmp) == os.path.dirname(dest) == mount
                hidden = os.path.basename(tmp).startswith(".")
                if same_dir and hidden and os.path.basename(dest) == "rdma-ns":
                    return cp
    return None


def check_daemonset():
    ds = load_daemonset()
    check(ds.get("apiVersion") == "apps/v1", f"apiVersion is {ds.get('apiVersion')!r}, want apps/v1")
    check(ds.get("kind") == "DaemonSet", "kind is not DaemonSet")
    meta = ds.get("metadata") or {}
    check(meta.get("namespace") == "kube-system", f"metadata.namespace is {meta.get('namespace')!r}")
    check(bool(meta.get("name")), "metadata.name missing")
    spec = ds.get("spec") or {}
    tmpl = spec.get("template") or {}
    sel = (spec.get("selector") or {}).get("matchLabels") or {}
    labels = (tmpl.get("metadata") or {}).get("labels") or {}
    check(sel and all(labels.get(k) == v for k, v in sel.items()),
          "spec.selector.matchLabels do not match the template labels")
    pod = tmpl.get("spec") or {}
    check(any(t.get("operator") == "Exists" and "key" not in t for t in pod.get("tolerations") or []),
          "no toleration for every taint (operator: Exists): tainted nodes would get no plugin")
    check((pod.get("nodeSelector") or {}).get("kubernetes.io/os") == "linux", "nodeSelector kubernetes.io/os: linux missing")
    check(pod.get("containers"), "no long-running container (the pod would complete and restart)")
    ok("DaemonSet apps/v1 in kube-system, selector matches, tolerates all taints, linux nodes")

    vols = {v["name"]: v for v in pod.get("volumes") or []}
    host = [n for n, v in vols.items() if (v.get("hostPath") or {}).get("path") == "/opt/cni/bin"]
    if not check(len(host) == 1, "no hostPath volume with path /opt/cni/bin"):
        return None
    c = init_container(ds)
    mounts = [m for m in c.get("volumeMounts") or [] if m.get("name") == host[0]]
    if not check(len(mounts) == 1, "the init container does not mount the /opt/cni/bin hostPath"):
        return None
    mount = mounts[0]["mountPath"].rstrip("/")
    check(not mounts[0].get("readOnly"), "the /opt/cni/bin mount is read-only")
    ok(f"hostPath /opt/cni/bin (volume {host[0]}) mounted at {mount} in init container {c['name']}")

    script = init_script(c)
    if not check(script is not None, "the init container's command is not `/bin/sh -c SCRIPT`"):
        return None
    found = copy_then_rename(script, mount)
    if check(found, f"the init script does not copy to a hidden temp name in {mount} and then "
                    f"rename it over {mount}/rdma-ns:\n{script}"):
        ok(f"init command copies {found[0]} to {found[1]}, then renames it over {mount}/rdma-ns")
        check(re.search(r"set -e", script), "the init script does not stop on the first error (set -e)")
    check_reconcile_container(pod, vols)
    return {"mount": mount, "source": found[0] if found else None, "image": c.get("image")}


def check_reconcile_container(pod, vols):
    """The reconcile sidecar: `rdma-ns reconcile --interval N --data-dir D`, privileged in the
    host netns, with the data dir, the CNI bin dir, the CNI conf dir and the netns dir at their
    host paths (the records name host paths: CNI_PATH, netns, IPAM files)."""
    found = [c for c in pod.get("containers") or []
             if "reconcile" in (c.get("command") or []) + (c.get("args") or [])]
    if not check(len(found) == 1, "no container runs `rdma-ns reconcile`"):
        return
    c = found[0]
    argv = (c.get("command") or []) + (c.get("args") or [])
    def opt(name):
        return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None
    interval = opt("--interval")
    check(interval is not None and interval.isdigit() and int(interval) > 0,
          f"reconcile runs once (no --interval SECONDS): {argv}")
    data_dir = opt("--data-dir") or "/var/lib/cni/rdma-ns"
    check(pod.get("hostNetwork") is True, "the reconcile container is not in the host network namespace")
    check((c.get("securityContext") or {}).get("privileged") is True,
          "the reconcile container is not privileged (it moves host devices and enters netns)")
    mounts = {m["mountPath"].rstrip("/"): vols.get(m["name"], {}) for m in c.get("volumeMounts") or []}
    for path in [data_dir, "/opt/cni/bin", "/etc/cni/net.d", "/var/run/netns"]:
        host = (mounts.get(path) or {}).get("hostPath", {}).get("path")
        check(host == path, f"the reconcile container does not mount the host's {path} at {path} (got {host!r})")
    netns = [m for m in c.get("volumeMounts") or [] if m["mountPath"].rstrip("/") == "/var/run/netns"]
    check(netns and netns[0].get("mountPropagation") == "HostToContainer",
          "the netns dir is mounted without HostToContainer propagation: netns created later are invisible")
    ok(f"container {c['name']} runs reconcile every {interval} s, privileged in the host netns, "
       f"with {data_dir}, /opt/cni/bin, /etc/cni/net.d and /var/run/netns at their host paths")


def containerfile_parse():
    """(global ARGs as {name: (default, comment lines above)}, stages)."""
    args, stages, comments = {}, [], []
    with open(CONTAINERFILE_PATH[0]) as f:
        text = re.sub(r"\\\n", " ", f.read())
    for line in text.splitlines():
        line = line.strip()
        if not line:
            comments = []
            continue
        if line.startswith("#"):
            comments.append(line)
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name.strip()] = (default.strip(), comments)
        elif word == "FROM":
            m = re.match(r"(--platform=(\S+)\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            stages.append({"platform": m.group(2), "from": m.group(3), "name": m.group(4), "lines": []})
        elif stages:
            stages[-1]["lines"].append((word, rest))
        comments = []
    return args, stages


def check_containerfile():
    ds = check_daemonset()
    args, stages = containerfile_parse()
    if not check(len(stages) >= 2, f"Containerfile has {len(stages)} stage(s), want a build stage and an image stage"):
        return
    # Every base image: a digest, or an ARG default that says why it is not pinned.
    for st in stages:
        ref = st["from"]
        m = re.fullmatch(r"\$\{?(\w+)\}?", ref)
        if m:
            if not check(m.group(1) in args, f"FROM {ref}: no global ARG {m.group(1)}"):
                continue
            default, comments = args[m.group(1)]
            unpinned = [c for c in comments if re.match(r"#\s*unpinned:\s*\S", c)]
            check(DIGEST.search(default) or unpinned,
                  f"ARG {m.group(1)}={default} floats: pin it (name:tag@sha256:<digest>) or say why not on an `# unpinned:` line above it")
            how = "digest" if DIGEST.search(default) else "unpinned, says why"
            ok(f"FROM {ref}: default {default} ({how}); a release passes --build-arg {m.group(1)}=...@sha256:...")
        elif not any(st2["name"] == ref for st2 in stages):
            check(DIGEST.search(ref), f"FROM {ref} floats: pin it by digest or take it from an ARG with an `# unpinned:` reason")
    build, final = stages[0], stages[-1]
    check(build["name"], "the build stage has no name (FROM ... AS build)")
    check(build["platform"] in ("$BUILDPLATFORM", "${BUILDPLATFORM}"),
          "the build stage does not run on --platform=$BUILDPLATFORM (it would build under emulation)")
    words = [w for w, _ in build["lines"]]
    check(("ARG", "TARGETARCH") in build["lines"], "the build stage does not take ARG TARGETARCH")
    runs = " ".join(rest for word, rest in build["lines"] if word == "RUN")
    check(re.search(r'install/build\.sh --target "?\$\{?TARGETARCH', runs),
          "the build stage does not build with install/build.sh --target $TARGETARCH (the one shipped build)")
    copied = set()
    for word, rest in build["lines"]:
        if word == "COPY":
            for src in rest.split()[:-1]:
                copied.add(src)
                check(os.path.exists(os.path.join(REPO, src)), f"COPY source {src} does not exist in the repository")
    for need in ("Cargo.toml", "Cargo.lock", "build.rs", "src", "install/build.sh"):
        check(need in copied, f"the build stage does not copy {need}")
    check("RUN" in words, "the build stage runs nothing")
    ok(f"build stage {build['name']} on $BUILDPLATFORM: install/build.sh --target $TARGETARCH (amd64, arm64)")

    copies = [rest.split() for word, rest in final["lines"] if word == "COPY"]
    from_build = [c for c in copies if c and c[0] == f"--from={build['name']}"]
    check(from_build, "the image stage copies nothing from the build stage")
    binary_dest = from_build[0][-1] if from_build else None
    check(any(c[-2:] == ["install/install.sh", "/usr/local/bin/install.sh"] for c in copies),
          "the image stage does not ship install/install.sh as the copy script")
    check(not any(word == "RUN" for word, _ in final["lines"]), "the image stage runs commands (keep it a plain copy)")
    entry = [rest for word, rest in final["lines"] if word == "ENTRYPOINT"]
    check(entry and "install.sh" in entry[0], "the ENTRYPOINT is not the copy script")
    ok(f"image stage ({final['from']}): the static binary at {binary_dest}, install.sh as ENTRYPOINT")
    if ds:
        check(ds["source"] == binary_dest,
              f"the DaemonSet copies {ds['source']} but the image has the binary at {binary_dest}")
        check(entry and f"--bin-dir {ds['mount']}" in entry[0].replace('", "', " "),
              f"the ENTRYPOINT's --bin-dir is not the DaemonSet's mount path {ds['mount']}")
        ok("Containerfile and DaemonSet agree on the binary path and the host mount path")


def check_node_agent():
    """install/node-agent.yaml: the exporter on the host network's port 9100, the doctor as
    readiness probe tolerating WARN (exit 1) but not FAIL (2), the NFD refresher writing into the
    hostPath NFD reads, every other host mount read-only; and the scrape example keeping exactly
    this DaemonSet's pods."""
    path = NODE_AGENT_PATH[0]
    print(f"  node agent ({os.path.relpath(path, REPO)})")
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    ds = [d for d in docs if d.get("kind") == "DaemonSet"]
    if not check(len(ds) == 1, f"{path}: expected one DaemonSet, found {len(ds)}"):
        return
    ds = ds[0]
    check(ds["metadata"].get("namespace") == "kube-system", "node agent not in kube-system")
    spec = ds["spec"]["template"]["spec"]
    labels = ds["spec"]["template"]["metadata"].get("labels", {})
    check(labels == ds["spec"]["selector"]["matchLabels"], "selector does not match the pod labels")
    check(spec.get("hostNetwork") is True, "node agent without hostNetwork: the exporter would "
          "not listen on the node's address and the doctor would see the pod's netdevs")
    check(not spec.get("initContainers"), "node agent has init containers: it installs nothing")
    host_paths = {v["name"]: v.get("hostPath", {}).get("path") for v in spec.get("volumes", [])}
    containers = spec.get("containers", [])
    argv = {c["name"]: list(c.get("command") or []) + list(c.get("args") or []) for c in containers}
    exporter = [c for c in containers if argv[c["name"]][1:2] == ["exporter"]]
    nfd = [c for c in containers if "--nfd" in argv[c["name"]]]
    if check(len(exporter) == 1, "no single container runs `rdma-ns exporter`"):
        c = exporter[0]
        a = argv[c["name"]]
        check(a[0] == "/usr/local/bin/rdma-ns", f"exporter runs {a[0]}, not the image's binary")
        check(a[2:4] == ["--listen", ":9100"], f"exporter not on :9100: {a}")
        ports = c.get("ports", [])
        check(any(p.get("containerPort") == 9100 and p.get("name") == "metrics" for p in ports),
              "exporter does not declare containerPort 9100 named metrics")
        probe = ((c.get("readinessProbe") or {}).get("exec") or {}).get("command") or []
        script = " ".join(probe)
        check("rdma-ns doctor" in script and "-lt 2" in script,
              f"readiness is not `rdma-ns doctor` accepting exit < 2: {script!r}")
        ok("exporter on :9100, readiness = doctor without FAIL")
    if check(len(nfd) == 1, "no single container runs `rdma-ns doctor --nfd`"):
        c = nfd[0]
        a = argv[c["name"]]
        target = a[a.index("--nfd") + 1]
        check("--every" in a, "the NFD refresher writes once and exits (no --every)")
        mounts = [m for m in c.get("volumeMounts", []) if target.startswith(m["mountPath"] + "/")]
        if check(len(mounts) == 1, f"--nfd {target} is not under a volume mount"):
            m = mounts[0]
            check(host_paths.get(m["name"]) == NFD_DIR and m["mountPath"] == NFD_DIR,
                  f"--nfd writes to {m['name']}, not the host's {NFD_DIR}")
            check(not m.get("readOnly"), "NFD's features.d is mounted read-only")
        ok(f"NFD labels refreshed into {NFD_DIR}")
    for c in containers:
        for m in c.get("volumeMounts", []):
            if host_paths.get(m["name"]) != NFD_DIR:
                check(m.get("readOnly") is True,
                      f"{c['name']} mounts {m['name']} writable: the agent must change nothing")
        sc = c.get("securityContext") or {}
        check((sc.get("capabilities") or {}).get("drop") == ["ALL"] and
              not (sc.get("capabilities") or {}).get("add"),
              f"{c['name']} keeps capabilities: it only reads")
    ok("host mounts read-only but features.d; no capabilities")
    with open(SCRAPE) as f:
        scrape = yaml.safe_load(f)
    jobs = scrape.get("scrape_configs", [])
    if check(len(jobs) == 1, f"{SCRAPE}: expected one scrape job"):
        keep = [r for r in jobs[0].get("relabel_configs", []) if r.get("action") == "keep"]
        want = f"{labels.get('app.kubernetes.io/name')};{labels.get('app.kubernetes.io/component')}"
        check(any(r.get("regex") == want for r in keep),
              f"the scrape job does not keep pods labelled {want}")
        check(any(r.get("regex") == "metrics" for r in keep),
              "the scrape job does not keep the `metrics` port")
        ok("scrape example keeps the agent's pods and metrics port")


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "daemonset":
        if len(sys.argv) > 2:
            DAEMONSET_PATH[0] = sys.argv[2]
        check_daemonset()
        if len(sys.argv) == 2:
            check_node_agent()
    elif what == "node-agent":
        if len(sys.argv) > 2:
            NODE_AGENT_PATH[0] = sys.argv[2]
        check_node_agent()
    elif what == "containerfile":
        if len(sys.argv) > 2:
            CONTAINERFILE_PATH[0] = sys.argv[2]
        check_containerfile()
    elif what == "init-script":
        script = init_script(init_container(load_daemonset()))
        if script is None:
            sys.exit("the init container's command is not `/bin/sh -c SCRIPT`")
        sys.stdout.write(script)
        return
    else:
        sys.exit(__doc__)
    for f in failures:
        print(f"    FAIL: {f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Prints the packages an image made of Debian packages needs, as this machine has them.

    debs.py PACKAGE...

One line per package, `name[:arch]`, for the given packages and everything they depend on
(Pre-Depends and Depends), resolved against what dpkg has installed here: of alternatives the
installed one, of a virtual package its installed provider, so the set is one that works (it
works here). The lab's tools image is made of these packages as the machine's apt sources serve
them now (`apt-get download`; the installed versions may be gone from the mirror). A package, or
a dependency, that is not installed is an error naming it: install it first.
"""
import re
import subprocess
import sys

FIELDS = ["Package", "Version", "db:Status-Status", "Provides", "Pre-Depends", "Depends", "Architecture"]


def installed():
    fmt = "\t".join("${%s}" % f for f in FIELDS) + "\n"
    out = subprocess.run(["dpkg-query", "-W", "-f", fmt], check=True, capture_output=True, text=True).stdout
    pkgs, providers = {}, {}
    for line in out.splitlines():
        name, version, status, provides, pre, deps, arch = line.split("\t")
        if status != "installed":
            continue
        pkgs[name] = (version, pre, deps, arch)
        for p in filter(None, (x.strip() for x in provides.split(","))):
            providers.setdefault(bare(p), []).append(name)
    return pkgs, providers


def bare(dep):
    """`libc6 (>= 2.34)` or `python3:any` -> the package name."""
    return re.split(r"[\s(:]", dep.strip(), maxsplit=1)[0]


def pick(group, pkgs, providers):
    alts = [bare(a) for a in group.split("|")]
    for name in alts:
        if name in pkgs:
            return name
    for name in alts:
        for provider in sorted(providers.get(name, [])):
            return provider
    return None


def closure(roots, pkgs, providers):
    seen, queue, missing = {}, list(roots), []
    while queue:
        name = queue.pop()
        if name in seen:
            continue
        if name not in pkgs:
            missing.append(name)
            continue
        version, pre, deps, arch = pkgs[name]
        seen[name] = (version, arch)
        for group in filter(None, (g.strip() for g in (pre + "," + deps).split(","))):
            chosen = pick(group, pkgs, providers)
            if chosen is None:
                missing.append(f"{group} (a dependency of {name})")
            else:
                queue.append(chosen)
    return seen, missing


def main(roots):
    if not roots:
        sys.exit(__doc__)
    pkgs, providers = installed()
    seen, missing = closure(roots, pkgs, providers)
    if missing:
        sys.exit("debs.py: not installed here: " + ", ".join(sorted(set(missing))))
    for name in sorted(seen):
        _, arch = seen[name]
        print(f"{name}:{arch}" if arch not in ("all", "") else name)


if __name__ == "__main__":
    main(sys.argv[1:])

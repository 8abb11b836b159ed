#!/usr/bin/env python3
"""The Kubernetes tier's cases, run by tests/kube/run.sh against a lab that install/lab.sh
brought up (two Linux 7 node VMs, the install recipe (docs/install.md) applied, pods rdma-a on node1 and rdma-b
on node2 on the roce-shared network).

    cases.py --lab install/lab.sh --logs DIR [CASE...]
    cases.py --list

Each case prints "PASS <name> (N s)" or "FAIL <name>: <why>" and ends with the nodes clean:
`rdma-ns list` empty on both, no Soft-RoCE device, no record or lock file in the data dir and
no whereabouts allocation left (checked after every case; a leftover fails the case). The last
line is "N passed, N failed".
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from lab import CASES, Fail, Lab  # noqa: E402


def run_case(lab, fn):
    start = time.time()
    try:
        fn(lab)
        lab.assert_clean()
    except Fail as e:
        name = fn.__name__.replace('_', '-')
        print(f"FAIL {name}: {e}", flush=True)
        lab.save_node_logs(name)
        try:
            lab.cleanup()
        except Fail as e2:
            print(f"      cleanup after it failed too: {e2}", flush=True)
        return False
    print(f"PASS {fn.__name__.replace('_', '-')} ({time.time() - start:.0f} s)", flush=True)
    return True


# Case modules register themselves with @case when imported.
import cases_recipe  # noqa: E402,F401
import cases_traffic  # noqa: E402,F401
import cases_lifecycle  # noqa: E402,F401
import cases_dra  # noqa: E402,F401
import cases_dra_life  # noqa: E402,F401
import cases_helm  # noqa: E402,F401


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lab")
    p.add_argument("--logs")
    p.add_argument("--list", action="store_true")
    p.add_argument("names", nargs="*")
    args = p.parse_args()
    names = [fn.__name__.replace("_", "-") for fn in CASES]
    if args.list:
        print("\n".join(names))
        return 0
    unknown = [n for n in args.names if n not in names]
    if unknown:
        sys.exit(f"cases.py: no case {', '.join(unknown)} (cases: {' '.join(names)})")
    lab = Lab(args.lab, args.logs)
    chosen = [fn for fn in CASES if not args.names or fn.__name__.replace("_", "-") in args.names]
    results = [run_case(lab, fn) for fn in chosen]
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())

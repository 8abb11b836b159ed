"""One rank of an NCCL all-reduce between two pods (tests/gpu/run.sh starts both, each inside
its pod netns through `rdma-ns env --best-effort --exec`). Prints one JSON line: the size,
per-iteration time, algorithm and bus bandwidth, and whether every element is right."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

rank, master, size_mib = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
iters, warmup = 20, 5
torch.cuda.set_device(rank)
dist.init_process_group("nccl", init_method="tcp://%s:29500" % master, rank=rank, world_size=2)
n = size_mib * 2**20 // 4
x = torch.empty(n, dtype=torch.float32, device="cuda")
for _ in range(warmup):
    x.fill_(rank + 1)
    dist.all_reduce(x)
torch.cuda.synchronize()
times = []
ok = True
for i in range(iters):
    x.fill_(rank + 1 + i)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    dist.all_reduce(x)
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
    # Sum over ranks of (rank + 1 + i): 1 + 2 + 2i.
    ok = ok and bool(torch.all(x == float(3 + 2 * i)).item())
times.sort()
med = times[len(times) // 2]
algbw = n * 4 / med / 1e9
seen = {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "UCX_"))}
print(json.dumps({"rank": rank, "bytes": n * 4, "median_s": med, "algbw_GBps": algbw,
                  # busbw = algbw * 2(n-1)/n for all-reduce; n = 2 ranks.
                  "busbw_GBps": algbw * 2 * (2 - 1) / 2, "correct": ok, "env": seen}),
      flush=True)
dist.destroy_process_group()

"""The DDP hook with its defaults (algorithm="auto", tuned online) and codec="int8", on
the emulated cluster: does auto compress, and what does each step take once it learned?

    benchmarks/cluster/cluster.sh up 2 --rate 1gbit
    benchmarks/cluster/cluster.sh run -n 4 --ranks-per-node 2 -- python ddp_int8.py
    benchmarks/cluster/cluster.sh down

A 4.2 M-parameter MLP (16.8 MB of float32 gradients; DDP buckets of 4 MiB), 40 steps.
Prints rank 0's tuning log (what each kind tried, dropped and settled on), then each
kind's best plan as the tuning measured it, and the median step of the last 20 (slowest
rank).
"""
import logging
import statistics
import sys
import time

import torch
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel as DDP

import zipcoll.torch as ztorch
from zipcoll.collectives.context import context_for

comm = MPI.COMM_WORLD
torch.set_num_threads(1)
if comm.rank == 0:
    logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(message)s")
    logging.getLogger("zipcoll.tuning").setLevel(logging.INFO)
ztorch.init_process_group()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 1024)),
            bucket_cap_mb=4, gradient_as_bucket_view=True)
model.register_comm_hook(*ztorch.ddp_comm_hook(codec="int8"))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
steps = []
x = torch.randn(32, 1024)
for step in range(40):
    comm.Barrier()
    began = time.perf_counter()
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    steps.append(comm.allreduce(time.perf_counter() - began, op=MPI.MAX))
kinds = context_for(comm).tuner.kinds.values()
if comm.rank == 0:
    for kind in [k for k in kinds if k is not None]:
        best = kind.best()  # None: no call timed (DDP's first pass has buckets of its own)
        took = "untimed" if best is None else f"{kind.estimate(best) * 1e3:.1f} ms"
        print(f"{kind.label}: best {best} ({took}), "
              f"{'still learning' if kind.learning else 'settled'}, {kind.calls} calls")
    print(f"median step, last 20: {statistics.median(steps[20:]) * 1e3:.1f} ms")

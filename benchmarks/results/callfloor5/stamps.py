"""Where one blocking call's time goes, 2 ranks: stamps inside the call, medians of 3000.

    mpiexec -n 2 python stamps.py NBYTES ALGORITHM      # e.g. 1048576 ring

A barrier before each call; the phases: from the call to its agreement posted, to the
agreement's answer read, to the schedule's first step, the schedule's steps, and back.
It wraps `Transport.iagree`, `Agreement.lows` and `api.steps_for` for the stamps.
"""
import numpy as np, time, sys
from mpi4py import MPI
import zipcoll
from zipcoll import transport
from zipcoll.collectives import api
comm = MPI.COMM_WORLD
n = int(sys.argv[1]) // 4
x = np.ones(n, np.float32); y = np.empty_like(x)
pc = time.perf_counter
marks = {}
o_iagree = transport.Transport.iagree
def iagree(self, v):
    marks["post"] = pc(); return o_iagree(self, v)
transport.Transport.iagree = iagree
o_lows = transport.Agreement.lows
def lows(self):
    marks["read"] = pc(); return o_lows(self)
transport.Agreement.lows = lows
o_steps = api.steps_for
def steps_for(*a, **k):
    marks["steps0"] = pc()
    inner = o_steps(*a, **k)
    def g():
        marks["run0"] = pc()
        yield from inner
        marks["run1"] = pc()
    return g()
api.steps_for = steps_for
f = lambda: zipcoll.allreduce(x, y, comm=comm, algorithm=sys.argv[2])
for _ in range(100): f()
rows = []
for _ in range(3000):
    comm.Barrier()
    t0 = pc(); f(); t1 = pc()
    m = marks
    rows.append([m["post"]-t0, m["read"]-m["post"], m["run0"]-m["read"], m["run1"]-m["run0"], t1-m["run1"], t1-t0])
a = np.median(np.array(rows), axis=0) * 1e6
names = ["start->post", "post->read(agree wait)", "read->run", "run (steps)", "run end->return", "total"]
for r in range(2):
    if comm.rank == r: print(f"rank {r}: " + ", ".join(f"{k} {v:.1f}" for k, v in zip(names, a)), flush=True)
    comm.Barrier()

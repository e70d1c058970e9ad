"""Where a blocking ring call spends its time before its agreement is posted, 2 ranks,
medians of 3000 calls (after 200), a barrier before each: from the call to its checks
(`Started._prepare`), to `make_plan`, `make_plan` itself, to the signature, to the
agreement posted. Wrappers stamp each point (they add a little of their own).

    mpiexec -n 2 python pre_agreement.py NBYTES
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
m = {}
def wrap(obj, name, key, after=False):
    orig = getattr(obj, name)
    def f(*a, **k):
        if not after: m[key] = pc()
        r = orig(*a, **k)
        if after: m[key] = pc()
        return r
    setattr(obj, name, f)
wrap(transport.Transport, "iagree", "post")
wrap(api, "make_plan", "plan0")
wrap(api, "make_plan", "plan1", after=True)
wrap(api, "_signature", "sig")
import zipcoll.collectives.call as callmod
wrap(callmod.Started, "_prepare", "prep0")
rows = []
for i in range(3200):
    comm.Barrier()
    t0 = pc(); zipcoll.allreduce(x, y, algorithm="ring", comm=comm); t9 = pc()
    if i >= 200:
        rows.append([m["prep0"] - t0, m["plan0"] - m["prep0"], m["plan1"] - m["plan0"], m["sig"] - m["plan1"], m["post"] - m["sig"], t9 - t0])
r = np.median(np.array(rows), axis=0) * 1e6
print(f"rank {comm.rank} n={n*4}: to _prepare {r[0]:.1f}, to make_plan {r[1]:.1f}, make_plan {r[2]:.1f}, to signature {r[3]:.1f}, signature->posted {r[4]:.1f}, total {r[5]:.1f}")

"""auto with int8 allowed beside the plan its tuning picked, named, call by call: 20
learning calls, then 25 blocks of 4 auto calls and 4 calls of the pick, each call timed
alone (a barrier before it; the slowest rank's time).

    benchmarks/cluster/cluster.sh up 2 --rate 1gbit
    benchmarks/cluster/cluster.sh run -n 4 --ranks-per-node 2 -- python auto_vs_named.py 4194304
    benchmarks/cluster/cluster.sh down
"""
import sys, time, numpy as np
from mpi4py import MPI
import zipcoll
from zipcoll.collectives.context import context_for
from zipcoll.collectives.planning.tuning import key_of
comm = MPI.COMM_WORLD
nbytes = int(sys.argv[1])
x = np.random.default_rng(comm.rank).standard_normal(nbytes // 4, dtype=np.float32); y = np.empty_like(x)
ctx = context_for(comm)
for _ in range(20): zipcoll.allreduce(x, y, comm=comm, codec="int8")
kind = ctx.tuner.kinds[key_of(nbytes, "float32", "sum", "int8", ctx.topology, True)]
pick = kind.best()
def one(f):
    comm.Barrier(); t = time.perf_counter(); f(); return comm.allreduce(time.perf_counter() - t, op=MPI.MAX)
auto, fixed, plans = [], [], []
for block in range(25):
    for _ in range(4):
        auto.append(one(lambda: zipcoll.allreduce(x, y, comm=comm, codec="int8")))
    for _ in range(4):
        fixed.append(one(lambda: zipcoll.allreduce(x, y, comm=comm, algorithm=pick.name, codec=pick.inter_codec)))
if comm.rank == 0:
    print("pick", pick, "now best", kind.best(), "calls", kind.calls, "rechecks", kind.rechecks)
    print("auto  ms:", " ".join(f"{t*1e3:.0f}" for t in auto))
    print("fixed ms:", " ".join(f"{t*1e3:.0f}" for t in fixed))
    print("median auto %.1f fixed %.1f; mean auto %.1f fixed %.1f" % (np.median(auto)*1e3, np.median(fixed)*1e3, np.mean(auto)*1e3, np.mean(fixed)*1e3))

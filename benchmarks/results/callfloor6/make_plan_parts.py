"""make_plan's parts for a cached 2-item float32 ring call, timeit in one process (1 rank).

    python make_plan_parts.py
"""
import timeit, numpy as np
from mpi4py import MPI
import zipcoll
from zipcoll.collectives import context, plan as P
from zipcoll import buffers, settings
from zipcoll.collectives.ops import lookup
comm = MPI.COMM_WORLD
x = np.ones(2, np.float32); y = np.empty_like(x)
zipcoll.allreduce(x, y, algorithm="ring")
ctx = context.context_for(comm)
topo = ctx.layout(None)
send, recv = P._buffers(x, y)
key = P._cache_key(send, recv, MPI.SUM, "ring", None, None, topo)
tmpl = ctx.plans.get(key)
n = 100000
for name, stmt in [
    ("_buffers", lambda: P._buffers(x, y)),
    ("as_array(x)", lambda: buffers.as_array(x)),
    ("as_array(y,w)", lambda: buffers.as_array(y, writable=True)),
    ("_cache_key", lambda: P._cache_key(send, recv, MPI.SUM, "ring", None, None, topo)),
    ("lookup(op)", lambda: lookup(MPI.SUM)),
    ("settings.get", settings.get),
    ("cache.get", lambda: ctx.plans.get(key)),
    ("hash key", lambda: hash(key)),
    ("_check_matching", lambda: P._check_matching(send, recv)),
    ("_with_buffers", lambda: P._with_buffers(tmpl, send, recv, y)),
]:
    t = timeit.timeit(stmt, number=n) / n * 1e6
    print(f"{name:22s} {t:.3f} us")

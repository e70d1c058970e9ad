"""Timed by sweep.sh: Median and min of a compressed all-reduce (slowest rank a call) at given sizes; settings from env."""
import os, sys, time, statistics, numpy as np
from mpi4py import MPI
import zipcoll
comm = MPI.COMM_WORLD
alg, codec = sys.argv[1], sys.argv[2]
sizes = [int(s) << 20 for s in sys.argv[3].split(",")]
iters = int(sys.argv[4])
tag = " ".join(f"{k[8:].lower()}={v}" for k, v in sorted(os.environ.items()) if k.startswith("ZIPCOLL_") and k != "ZIPCOLL_PROFILE")
for nbytes in sizes:
    x = np.random.default_rng(comm.rank).standard_normal(nbytes // 4).astype(np.float32)
    out = np.empty_like(x)
    times = []
    for i in range(iters + 2):
        comm.Barrier(); t = time.perf_counter()
        zipcoll.allreduce(x, out, comm=comm, algorithm=alg, codec=codec)
        dt = comm.allreduce(time.perf_counter() - t, op=MPI.MAX)
        if i >= 2: times.append(dt)
    if comm.rank == 0:
        wire = 2 * zipcoll.get_codec(codec).wire_bytes(nbytes // 8) / (125e6 * 1448 / 1514)
        med = statistics.median(times)
        print(f"{alg}+{codec} {nbytes>>20}M [{tag}] median {med*1e3:.1f} ms min {min(times)*1e3:.1f} ms wire {wire*1e3:.1f} ms -> {med/wire:.2f}x (min {min(times)/wire:.2f}x)", flush=True)

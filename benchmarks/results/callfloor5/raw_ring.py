"""A ring all-reduce of 2 ranks in mpi4py alone (Isend/Irecv, then numpy add; and with
Sendrecv), beside MPI's Allreduce: medians of 400 calls, a barrier before each, twice.

    mpiexec -n 2 python raw_ring.py 1048576
"""
import sys, numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD; r = comm.rank; p = comm.size
n = int(sys.argv[1]) // 4
x = np.ones(n, np.float32); y = np.empty_like(x); tmp = np.empty(n // 2, np.float32)
peer = 1 - r
def ring():
    h = n // 2
    mine = slice(r*h, (r+1)*h); theirs = slice(peer*h, (peer+1)*h)
    # reduce-scatter: send their half of x, receive my half from peer
    rq = [comm.Irecv(tmp, peer, 5), comm.Isend(x[theirs], peer, 5)]
    MPI.Request.Waitall(rq)
    np.add(x[mine], tmp, out=y[mine])
    rq = [comm.Irecv(y[theirs], peer, 6), comm.Isend(y[mine], peer, 6)]
    MPI.Request.Waitall(rq)
def ring_sr():
    h = n // 2
    mine = slice(r*h, (r+1)*h); theirs = slice(peer*h, (peer+1)*h)
    comm.Sendrecv(x[theirs], peer, 5, tmp, peer, 5)
    np.add(x[mine], tmp, out=y[mine])
    comm.Sendrecv(y[mine], peer, 6, y[theirs], peer, 6)
def loop(f, k=400):
    for _ in range(30): f()
    ts = []
    for _ in range(k):
        comm.Barrier(); t = MPI.Wtime(); f(); ts.append(MPI.Wtime() - t)
    ts.sort(); return ts[len(ts)//2]*1e6
for _ in range(2):
  a = loop(ring); b = loop(ring_sr); c = loop(lambda: comm.Allreduce(x, y))
  if r == 0: print(f"n={n*4}: raw ring {a:.1f} sendrecv ring {b:.1f} native {c:.1f} us")

"""The cost model's low-rank step against the measured one: `zipcoll.lowrank.allreduce`
on the gradients of a model, each rank at once, beside `lowrank_cost`'s prediction.

    source scripts/mpienv.sh
    flock /tmp/zipcoll-heavy.lock mpiexec -n 2 -x OPENBLAS_NUM_THREADS=1 \\
        .venv/bin/python benchmarks/lowrank_cost.py --out lowrank-cost.json

First it calibrates this job (`zipcoll-bench calibrate --quick`: links, reduction) so the
prediction uses this machine's figures, measured in the same run. Then, --rounds times
over, for each setting: the low-rank speeds measured again (`measure_lowrank`, 5 s: a
shared machine's speed drifts), the whole step on the communicator (slowest rank's median
over --steps after --warmup), and the same step on MPI.COMM_SELF (each rank alone: no
wire, the local work and one rank's call overheads), beside the predicted total and the
predicted local work. The table's figures are the medians over rounds. Float32 matrices of the shapes of step_time.py's 25 M-parameter MLP
(--width 4096), filled with fresh normal draws each step.
"""
import argparse
import json
import os
import statistics
import time

import numpy as np
from mpi4py import MPI

from zipcoll import lowrank
from dataclasses import replace

from zipcoll.bench.calibrate import calibrate, measure_lowrank
from zipcoll.collectives.planning import PlanShape, Shape
from zipcoll.collectives.planning.lowrank import lowrank_cost
from zipcoll.topologies import Topology

SETTINGS = {"rank 1": (1, None), "rank 4": (4, None), "rank 8": (8, None),
            "rank 4 fp16": (4, "fp16"), "rank 32": (32, None)}


def mlp_shapes(width: int) -> list[tuple]:
    """Weights and biases of step_time.py's MLP: 1024 -> width -> width -> 1024 -> 10."""
    dims = [1024, width, width, 1024, 10]
    return [s for a, b in zip(dims, dims[1:]) for s in ((b, a), (b,))]


def timed_steps(comm, rank: int, codec, shapes, steps: int, warmup: int) -> float:
    """The slowest rank's median seconds of one `lowrank.allreduce` step."""
    state = lowrank.PowerSGDState(rank=rank, codec=codec, algorithm="ring", comm=comm)
    rng = np.random.default_rng(comm.rank)
    grads = [np.empty(s, np.float32) for s in shapes]
    times = []
    for step in range(warmup + steps):
        for g in grads:
            g[...] = rng.standard_normal(g.shape, dtype=np.float32)
        comm.Barrier()
        start = time.perf_counter()
        lowrank.allreduce(state, grads)
        seconds = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
        if step >= warmup:
            times.append(seconds)
    return statistics.median(times)


def measure(comm, rank: int, codec, shapes, topology, profile, args) -> dict:
    """One setting: measured on the communicator and alone, and predicted."""
    plan = PlanShape("ring", inter_codec=codec)
    predicted = lowrank_cost(shapes, rank, topology, profile, plan)
    alone = lowrank_cost(shapes, rank, Shape(1, 1, 1), profile, plan)
    return {"rank": rank, "codec": codec,
            "measured_s": timed_steps(comm, rank, codec, shapes, args.steps, args.warmup),
            "measured_alone_s": timed_steps(MPI.COMM_SELF, rank, codec, shapes, args.steps,
                                            args.warmup),
            "predicted_s": predicted.total, "predicted_alone_s": alone.total,
            "predicted_compute_s": predicted.compute,
            "predicted_rounds_s": predicted.p_round + predicted.q_round,
            "sent_elements": predicted.sent, "elements": predicted.elements,
            "lowrank_speed": profile.lowrank.to_dict()}


def summarize(rows: list[dict]) -> dict:
    """A setting's medians over rounds."""
    out = {k: rows[0][k] for k in ("setting", "rank", "codec", "sent_elements", "elements")}
    for key in ("measured_s", "measured_alone_s", "predicted_s", "predicted_alone_s",
                "predicted_compute_s", "predicted_rounds_s"):
        out[key] = statistics.median(r[key] for r in rows)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated names")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    profile, _ = calibrate(comm, quick=True, codecs=["none", "fp16"])
    topology = Topology.from_comm(comm)
    shapes = mlp_shapes(args.width)
    rows = []
    for round_ in range(args.rounds):
        for name in args.settings.split(","):
            rank, codec = SETTINGS[name.strip()]
            profile = replace(profile, lowrank=measure_lowrank(comm, 5))
            rows.append(dict(measure(comm, rank, codec, shapes, topology, profile, args),
                             setting=name, round=round_))
    summary = [summarize([r for r in rows if r["setting"] == name])
               for name in args.settings.split(",")]
    if comm.rank == 0:
        for row in summary:
            print(f"{row['setting']:12s} measured {row['measured_s'] * 1e3:7.1f} ms (alone "
                  f"{row['measured_alone_s'] * 1e3:6.1f}), predicted {row['predicted_s'] * 1e3:7.1f} "
                  f"ms (alone {row['predicted_alone_s'] * 1e3:6.1f}; rounds "
                  f"{row['predicted_rounds_s'] * 1e3:.1f}); predicted/measured "
                  f"{row['predicted_s'] / row['measured_s']:.2f}", flush=True)
    if comm.rank == 0 and args.out:
        meta = {"command": "mpiexec -n %d python %s" % (comm.size, " ".join(os.sys.argv)),
                "ranks": comm.size, "layout": Shape.of(topology).label,
                "load_average": os.getloadavg(), "profile": profile.to_dict()}
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "summary": summary, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

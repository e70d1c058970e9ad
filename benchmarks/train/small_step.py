"""Per-step time of a small CNN (scikit-learn's digits) under DDP: gloo against zipcoll's hook.

The model most people try first is small: here a two-layer CNN on 8x8 digits (~12 k
parameters, 47 KB of gradients), batch 32 a rank, SGD with momentum, CPU. With so little
to send, the step is torch's forward and backward; anything that slows those (another
OpenMP runtime spinning in the same process) shows at once, where step_time.py's 25 M
parameters hide it behind 137 ms of compute. Each CONFIG runs DDP on a fresh model, in
turn, --rounds times over; its time is the median over all rounds of the slowest rank's
step, --steps steps after --warmup each round.

    source scripts/mpienv.sh
    flock /tmp/zipcoll-heavy.lock timeout 300 mpiexec -n 2 .venv/bin/python \\
        benchmarks/train/small_step.py --out small_step.json
"""
import argparse
import json
import os
import shlex
import statistics

# No OMP_WAIT_POLICY or thread settings of its own: the step a user's script gets.
import numpy as np
import torch
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel as DDP

import zipcoll.torch as ztorch
from hooks import timed_training

# name -> hook arguments; None: DDP's own all-reduce through the gloo process group.
# One node: algorithm="auto" sends lossless, so the compressed configs name a schedule.
CONFIGS = {
    "DDP (gloo allreduce)": None,
    "zipcoll lossless": {"codec": None, "algorithm": "ring"},
    "zipcoll defaults (auto; tuned online)": {},  # ddp_comm_hook() as a user first calls it
    "zipcoll int8": {"codec": "int8", "algorithm": "ring", "error_feedback": False},
    "zipcoll sign+EF": {"codec": "sign", "algorithm": "allgather"},
}


def make_cnn(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * 4 * 4, 10))


def digits_batch(rank: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    pick = np.random.default_rng(rank).choice(len(y), batch, replace=False)
    xs = torch.from_numpy((x[pick] / 16.0).astype(np.float32)).reshape(batch, 1, 8, 8)
    return xs, torch.from_numpy(y[pick])


def timed_steps(comm, model, x, y, args) -> list[float]:
    """The slowest rank's seconds for each of --steps steps after --warmup."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return timed_training(comm, model, opt, x, y, args.warmup, args.steps)


def make_mlp(seed: int = 0, width: int = 4096) -> torch.nn.Module:
    """step_time.py's model: ~25 M parameters, 100 MB of float32 gradients."""
    torch.manual_seed(seed)
    widths = [1024, width, width, 1024]
    layers = [m for a, b in zip(widths, widths[1:]) for m in (torch.nn.Linear(a, b),
                                                              torch.nn.ReLU())]
    return torch.nn.Sequential(*layers, torch.nn.Linear(1024, 10))


def mlp_batch(rank: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(rank)
    return torch.randn(batch, 1024, generator=g), torch.randint(0, 10, (batch,), generator=g)


MODELS = {"cnn": (make_cnn, digits_batch), "mlp25m": (make_mlp, mlp_batch)}


def timed_config(comm, hook_args, x, y, args) -> list[float]:
    model = DDP(MODELS[args.model][0](), gradient_as_bucket_view=True)
    if hook_args is not None:
        state, hook = ztorch.ddp_comm_hook(**hook_args)
        model.register_comm_hook(state, hook)
    return timed_steps(comm, model, x, y, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--model", choices=MODELS, default="cnn")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--torch-threads", type=int, default=0)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", default="small_step.json")
    parser.add_argument("--report", metavar="DIR",
                        help="print the table of small_step.sh's launches in DIR, then exit")
    args = parser.parse_args()
    if args.report:
        print(report(args.report))
        return

    comm = MPI.COMM_WORLD
    if args.torch_threads:  # default: torch's own choice, as a user's script gets it
        torch.set_num_threads(args.torch_threads)
    ztorch.init_process_group(comm)
    x, y = MODELS[args.model][1](comm.rank, args.batch)
    names = args.configs.split(",")
    steps = {name: [] for name in names}
    for _ in range(args.rounds):
        for name in names:
            steps[name] += timed_config(comm, CONFIGS[name], x, y, args)
    # gloo's threads left to the interpreter's exit can abort it ("terminate called
    # without an active exception"), once seen after the DDP config
    torch.distributed.destroy_process_group()
    import numba

    if comm.rank:
        return
    base = statistics.median(steps[names[0]])
    for name in names:
        median = statistics.median(steps[name])
        print(f"{args.label}{name:24s} step {1e3 * median:7.2f} ms  "
              f"({median / base:4.2f}x {names[0]})", flush=True)
    meta = {"command": "python " + shlex.join(os.sys.argv), "ranks": comm.size,
            "args": vars(args), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "numba_threads": numba.get_num_threads(),
            "numba_threading_layer": _layer(), "load_average": os.getloadavg(),
            "environment": {k: os.environ.get(k) for k in (
                "OMP_WAIT_POLICY", "NUMBA_THREADING_LAYER", "NUMBA_NUM_THREADS")}}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "steps": steps}, f, indent=1)


def report(folder: str) -> str:
    """A markdown table: each config's median step (all launches, all rounds) per label."""
    import glob

    steps, layers = {}, {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            run = json.load(f)
        label = run["meta"]["args"]["label"].strip() or "-"
        for name, times in run["steps"].items():
            steps.setdefault(name, {}).setdefault(label, []).extend(times)
            if name != "DDP (gloo allreduce)":
                layers.setdefault(label, set()).add(run["meta"]["numba_threading_layer"])
    labels = sorted({label for by_label in steps.values() for label in by_label})
    base = {label: statistics.median(steps["DDP (gloo allreduce)"][label]) for label in labels}
    lines = ["| config | " + " | ".join(
                f"{label} (Numba layer: {', '.join(sorted(layers.get(label, ())))})"
                for label in labels) + " |",
             "|---" * (len(labels) + 1) + "|"]
    for name, by_label in steps.items():
        cells = []
        for label in labels:
            median = statistics.median(by_label[label])
            cells.append(f"{1e3 * median:.2f} ms ({median / base[label]:.2f}x)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _layer() -> str:
    import numba

    try:
        return numba.threading_layer()
    except ValueError:  # no parallel kernel ran in this process
        return "not started"


if __name__ == "__main__":
    main()

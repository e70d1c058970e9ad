"""Time to a fixed test accuracy: DDP's own gloo all-reduce against zipcoll's hook.

The committed step-time model (step_time.py: an MLP of 25.2 M parameters, 101 MB of
float32 gradients) learns scikit-learn's bundled digits, each 8x8 image scaled up to
32x32 = 1024 inputs (bilinear), nothing downloaded: 1437 training images, 360 test
images (a fixed stratified split). Each rank draws its own batches (--batch a rank, with
replacement); SGD with momentum 0.9 at --lr; the same initial weights for every config.

For each config, in turn: two throwaway steps on a scratch model (Numba compiles zipcoll's
kernels once a process; DDP settles its buckets), then training from the initial weights
until the test accuracy, evaluated every --eval-every steps, first reaches --target (or
--max-steps). The clock is the sum of the training steps (the slowest rank's time of each
step); evaluation is not on it. DDP runs with gradient_as_bucket_view=True, as in
step_time.py. On the emulated cluster, 2 nodes x 1 rank at 1 Gbit/s (as root):

    export PATH=$PWD/.venv/bin:$PATH
    SCRIPT=benchmarks/train/time_to_accuracy.py flock /tmp/zipcoll-heavy.lock \\
        bash benchmarks/train/step_time_cluster.sh \\
        --out benchmarks/results/train/time_to_accuracy.json
    python benchmarks/train/report.py benchmarks/results/train/time_to_accuracy.json
"""
import json
import os
import shlex
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: see convergence.py

import numpy as np  # noqa: E402
import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hooks import make_hook, reset  # noqa: E402
from step_time import CONFIGS, make_model, model_arguments, start_job  # noqa: E402

DEFAULT_CONFIGS = ["DDP (gloo allreduce)", "zipcoll lossless (hierarchical)",
                   "zipcoll int8 (hierarchical)", "zipcoll sign+EF (hierarchical)",
                   "zipcoll topk1%+EF (hierarchical)"]


def digits_1024() -> tuple[torch.Tensor, ...]:
    """(train x, train y, test x, test y): digits at 32x32, standardised."""
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = zoom(digits.images, (1, 4, 4), order=1).reshape(len(digits.images), -1)
    x = ((x - x.mean()) / x.std()).astype(np.float32)
    parts = train_test_split(x, digits.target, test_size=360, random_state=0,
                             stratify=digits.target)
    return tuple(torch.as_tensor(p) for p in parts)  # x_train, x_test, y_train, y_test


def accuracy(comm, net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Test accuracy over all ranks, each scoring its share of the test set."""
    mine = slice(comm.rank, None, comm.size)
    with torch.no_grad():
        right = int((net(x[mine]).argmax(1) == y[mine]).sum())
    return comm.allreduce(right) / len(y)


def model_for(name: str, width: int, seed: int):
    """(DDP model, hook state or None) for a config, from the seed's initial weights."""
    state, hook, ddp_args = make_hook(CONFIGS[name]) if CONFIGS[name] else (None, None, {})
    model = DDP(make_model(width, seed), gradient_as_bucket_view=True, **ddp_args)
    if state is not None:
        model.register_comm_hook(state, hook)
    return model, state


def train(comm, name: str, data: tuple, args) -> list[tuple[int, float, float]]:
    """[(step, seconds of training so far, test accuracy)] until --target or --max-steps."""
    x_train, x_test, y_train, y_test = data
    model, state = model_for(name, args.width, args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    batches = torch.Generator().manual_seed(1000 * args.seed + comm.rank)
    clock, curve = 0.0, [(0, 0.0, accuracy(comm, model.module, x_test, y_test))]
    for step in range(1, args.max_steps + 1):
        idx = torch.randint(0, len(y_train), (args.batch,), generator=batches)
        comm.Barrier()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        torch.nn.functional.cross_entropy(model(x_train[idx]), y_train[idx]).backward()
        opt.step()
        clock += comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
        if step % args.eval_every == 0:
            curve.append((step, clock, accuracy(comm, model.module, x_test, y_test)))
            if curve[-1][2] >= args.target:
                break
    if state is not None:
        reset(state)
    return curve


def warm_up(comm, name: str, data: tuple, args) -> None:
    """Two steps on a scratch model: compile the config's kernels off the clock."""
    model, state = model_for(name, args.width, args.seed + 1)
    for _ in range(2):
        model.zero_grad()
        x, y = data[0][:args.batch], data[2][:args.batch]
        torch.nn.functional.cross_entropy(model(x), y).backward()
    if state is not None:
        state.reset()


def main() -> None:
    parser = model_arguments(__doc__)
    parser.add_argument("--lr", type=float, default=0.03)
    parser.add_argument("--target", type=float, default=0.92)
    parser.add_argument("--max-steps", type=int, default=150)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    parser.add_argument("--out", default="time_to_accuracy.json")
    args = parser.parse_args()

    comm, load_at_start = start_job()
    data = digits_1024()
    runs = []
    for name in args.configs.split(","):
        warm_up(comm, name, data, args)
        curve = train(comm, name, data, args)
        runs.append({"config": name, "hook": CONFIGS[name], "curve": curve})
        if comm.rank == 0:
            step, seconds, acc = curve[-1]
            print(f"{name:34s} {100 * acc:5.1f}% after {step} steps, {seconds:6.1f} s "
                  f"({1e3 * seconds / max(1, step):.0f} ms a step)", flush=True)
    if comm.rank == 0:
        meta = {"command": "python " + shlex.join(sys.argv), "ranks": comm.size,
                "args": vars(args), "torch": torch.__version__,
                "torch_threads": torch.get_num_threads(), "load_average_at_start": load_at_start,
                "load_average": os.getloadavg()}
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "runs": runs, "kind": "time_to_accuracy"}, f, indent=1)


if __name__ == "__main__":
    main()

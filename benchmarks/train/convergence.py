"""Does a model trained through zipcoll's compressed all-reduce reach lossless accuracy?

Data-parallel training under mpiexec: DistributedDataParallel (gloo process group, which
only sets DDP up) with zipcoll.torch's communication hook, for every codec in CONFIGS,
several seeds each, on two tasks whose data never leaves this machine:

- digits: scikit-learn's bundled load_digits (1797 8x8 images, 10 classes), 80/20 split;
- blobs: scikit-learn's make_classification (generated: 6000 samples, 32 features,
  6 classes, one Gaussian cluster each), 80/20 split.

One process per rank runs the whole matrix (one launch: torch and DDP start once). Each
rank trains on its own shard of the training set (global batch = ranks x --batch), SGD
with momentum, fixed steps; every rank evaluates the whole test set every --eval-every
steps (parameters are identical on every rank: the hook test checks that).
Bytes sent per step count what this rank hands MPI point to point (zipcoll's schedules
send nothing else but the agreement check's 16 integers, not counted). Step time is the
slowest rank's mean over the run (forward, backward, all-reduce, optimizer), evaluation
excluded.

    source scripts/mpienv.sh
    flock /tmp/zipcoll-heavy.lock mpiexec -n 4 .venv/bin/python benchmarks/train/convergence.py \\
        --out benchmarks/results/train/convergence.json
    .venv/bin/python benchmarks/train/report.py benchmarks/results/train/convergence.json

`--fsdp`: the same tasks, models and steps sharded with PyTorch FSDP2 instead (each Linear
layer its own FSDP module, then the model; FSDP_CONFIGS): FSDP's own collectives on gloo,
and zipcoll's reduce-scatter and all-gather (`zipcoll.torch.fsdp_collectives`). Every
zipcoll config routes the weights' all-gather through zipcoll too (lossless unless the
config compresses it), so the bytes counted are all the step sends; the all-gathers of
evaluation's forward are not counted. `--append` adds the runs to an existing --out
(one task per launch, so that others can take the lock between them):

    flock /tmp/zipcoll-heavy.lock mpiexec -n 4 .venv/bin/python benchmarks/train/convergence.py \
        --fsdp --tasks digits --seeds 0,1,2,3,4 --out benchmarks/results/train/convergence_fsdp.json
    flock /tmp/zipcoll-heavy.lock mpiexec -n 4 .venv/bin/python benchmarks/train/convergence.py \
        --fsdp --tasks blobs --seeds 0,1,2,3,4 --append --out benchmarks/results/train/convergence_fsdp.json
"""
import argparse
import json
import os
import time

# Before torch loads OpenMP: idle OpenMP threads that spin steal the core a waiting MPI
# peer needs when ranks outnumber cores (steps measured 10x slower, 4 ranks on 2 cores).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import zipcoll.torch as ztorch  # noqa: E402
from hooks import ByteCounter, compression, is_fsdp, make_hook, reset, schedule, \
    shard  # noqa: E402

# name -> hook arguments (codec None: zipcoll's lossless ring). Quantizers run per hop on
# the ring; sign and the sparsifiers encode each rank's own gradient once (allgather),
# with error feedback keyed per bucket: EF-signSGD / EF top-k as published.
CONFIGS = {
    "lossless": {"codec": None, "algorithm": "ring"},
    "fp16": {"codec": "fp16", "algorithm": "ring", "error_feedback": False},
    "int8": {"codec": "int8", "algorithm": "ring", "error_feedback": False},
    "int4": {"codec": "int4", "algorithm": "ring", "error_feedback": False},
    "qsgd": {"codec": "qsgd", "algorithm": "ring", "error_feedback": False},
    "terngrad": {"codec": "terngrad", "algorithm": "ring", "error_feedback": False},
    "sign": {"codec": "sign", "algorithm": "allgather", "error_feedback": False},
    "sign+EF": {"codec": "sign", "algorithm": "allgather"},
    "topk1%+EF": {"codec": "topk:ratio=0.01", "algorithm": "allgather"},
    "topk0.1%+EF": {"codec": "topk:ratio=0.001", "algorithm": "allgather"},
    # unscaled: with error feedback the residual carries what was not sent (scaling by
    # 1/ratio, the unbiased form, makes each step 100x too large and training diverges)
    "randomk1%+EF": {"codec": "randomk:ratio=0.01,scaled=false", "algorithm": "allgather"},
    # PowerSGD (hooks.py): PyTorch's own hook on gloo, zipcoll's over the lossless ring;
    # compressed from iteration 2 (the earliest PyTorch allows with error feedback)
    "pytorch-powersgd4": {"hook": "pytorch-powersgd", "matrix_approximation_rank": 4,
                          "start_powerSGD_iter": 2},
    **{f"powersgd{r}": {"hook": "powersgd", "matrix_approximation_rank": r,
                        "start_powerSGD_iter": 2, "algorithm": "ring"} for r in (1, 2, 4, 8)},
    "powersgd4-fp16": {"hook": "powersgd", "matrix_approximation_rank": 4,
                       "start_powerSGD_iter": 2, "algorithm": "ring", "codec": "fp16"},
}

# --fsdp: name -> hooks.shard's config. zipcoll's gradients always carry error feedback
# (fsdp_collectives keys it per FSDP module); its weights have none (their error does not
# build up across steps) and each rank keeps its own shard exact.
FSDP_CONFIGS = {
    "fsdp-gloo": {"hook": "fsdp-gloo"},
    "lossless": {"hook": "fsdp", "gradients": None, "weights": "lossless", "algorithm": "ring"},
    "int8": {"hook": "fsdp", "gradients": "int8", "weights": "lossless", "algorithm": "ring"},
    "int4+EF": {"hook": "fsdp", "gradients": "int4", "weights": "lossless", "algorithm": "ring"},
    "int8+int8 weights": {"hook": "fsdp", "gradients": "int8", "weights": "int8",
                          "algorithm": "ring"},
}


def load_task(name: str):
    """(x_train, y_train, x_test, y_test) as float32 / int64 tensors, standardized."""
    from sklearn.datasets import load_digits, make_classification
    from sklearn.model_selection import train_test_split

    if name == "digits":
        x, y = load_digits(return_X_y=True)
    elif name == "blobs":
        x, y = make_classification(n_samples=6000, n_features=32, n_informative=16,
                                   n_redundant=8, n_classes=6, n_clusters_per_class=1,
                                   class_sep=1.5, flip_y=0.01, random_state=0)
    else:
        raise ValueError(f"unknown task {name!r}")
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0,
                                                        stratify=y)
    mean, std = x_train.mean(axis=0), x_train.std(axis=0) + 1e-6
    as_x = lambda a: torch.from_numpy(((a - mean) / std).astype(np.float32))  # noqa: E731
    return as_x(x_train), torch.from_numpy(y_train), as_x(x_test), torch.from_numpy(y_test)


def make_model(features: int, classes: int, hidden: int, seed: int,
               kind: str = "mlp") -> torch.nn.Module:
    """An MLP of two hidden layers, or ("cnn", digits only) two conv layers on the 8x8 image."""
    torch.manual_seed(seed)
    if kind == "cnn":
        return torch.nn.Sequential(
            torch.nn.Unflatten(1, (1, 8, 8)),
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(32 * 4 * 4, classes))
    return torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, classes))


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


def wrapped(net: torch.nn.Module, config: dict) -> tuple:
    """(model to train, hook state or None): `net` under DDP with the config's hook, or
    sharded by FSDP2 in place."""
    if is_fsdp(config):
        shard(net, config)
        return net, None
    state, hook, ddp_args = make_hook(config)
    model = DDP(net, **ddp_args)
    model.register_comm_hook(state, hook)
    return model, state


def run(comm, task, config: dict, name: str, seed: int, args, counter: ByteCounter) -> dict:
    """Train one (task, codec, seed); the curve, bytes and times."""
    x_train, y_train, x_test, y_test = task
    net = make_model(x_train.shape[1], int(y_train.max()) + 1, args.hidden, seed, args.model)
    model, state = wrapped(net, config)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    mine = torch.arange(comm.rank, len(x_train), comm.size)  # this rank's examples
    g = torch.Generator().manual_seed(seed * 1000 + comm.rank)
    curve, step_seconds = [], 0.0
    sent_before, sent_evaluating = counter.bytes, 0  # FSDP's forward all-gathers
    for step in range(1, args.steps + 1):
        batch = mine[torch.randint(len(mine), (args.batch,), generator=g)]
        start = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x_train[batch]), y_train[batch]).backward()
        opt.step()
        step_seconds += time.perf_counter() - start
        if step % args.eval_every == 0 or step == args.steps:
            before = counter.bytes
            curve.append((step, accuracy(net, x_test, y_test)))
            sent_evaluating += counter.bytes - before
    rate = compression(state)
    reset(state)
    gloo = schedule(config) == "gloo"  # bytes on gloo are not counted
    sent = counter.bytes - sent_before - sent_evaluating
    return {"config": name, "seed": seed, "curve": curve, "final_accuracy": curve[-1][1],
            "bytes_per_step": None if gloo else sent / args.steps,
            "compression": rate,
            "seconds_per_step": comm.allreduce(step_seconds / args.steps, op=MPI.MAX),
            "parameters": sum(p.numel() for p in net.parameters())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="digits,blobs")
    parser.add_argument("--fsdp", action="store_true",
                        help="train sharded with FSDP2: FSDP_CONFIGS instead of CONFIGS")
    parser.add_argument("--configs", default=None, help="default: every config")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32, help="per rank")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp",
                        help="cnn: small_step.py's CNN (digits only)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--out", default="convergence.json")
    parser.add_argument("--append", action="store_true",
                        help="add the runs to --out's (same ranks, configs and arguments)")
    args = parser.parse_args()
    configs = FSDP_CONFIGS if args.fsdp else CONFIGS
    names = args.configs.split(",") if args.configs else list(configs)

    torch.set_num_threads(1)  # ranks share the cores
    comm = MPI.COMM_WORLD
    ztorch.init_process_group(comm)
    counter = ByteCounter()
    results = []
    started = time.time()
    for task_name in args.tasks.split(","):
        task = load_task(task_name)
        for name in names:
            for seed in map(int, args.seeds.split(",")):
                result = run(comm, task, configs[name], name, seed, args, counter)
                result["task"] = task_name
                results.append(result)
                if comm.rank == 0:
                    print(f"{task_name:7s} {name:13s} seed {seed}: accuracy "
                          f"{result['final_accuracy']:.4f}, {result['bytes_per_step'] or 0:.0f} B/step, "
                          f"{1e3 * result['seconds_per_step']:.2f} ms/step "
                          f"({time.time() - started:.0f} s)", flush=True)
    if comm.rank == 0:
        meta = {"command": "mpiexec -n %d python %s" % (comm.size, " ".join(os.sys.argv)),
                "ranks": comm.size, "args": vars(args), "configs": configs,
                "fsdp": args.fsdp, "load_average": os.getloadavg(),
                "torch": torch.__version__, "seconds": time.time() - started}
        data = {"meta": meta, "runs": results}
        if args.append:
            data = appended(args.out, data)
        with open(args.out, "w") as f:
            json.dump(data, f, indent=1)


def appended(path: str, data: dict) -> dict:
    """`path`'s results with `data`'s runs added; the meta keeps every part's command, load
    average and seconds ("parts"), and their total seconds."""
    with open(path) as f:
        old = json.load(f)
    meta, new = old["meta"], data["meta"]
    if meta["ranks"] != new["ranks"] or meta.get("fsdp") != new["fsdp"]:
        raise SystemExit(f"--append: {path} has other ranks or another kind of training")
    parts = meta.pop("parts", None) or [_part(meta)]
    meta.update(new, parts=parts + [_part(new)],
                seconds=sum(p["seconds"] for p in parts) + new["seconds"])
    meta["command"] = parts[0]["command"]
    return {"meta": meta, "runs": old["runs"] + data["runs"]}


def _part(meta: dict) -> dict:
    return {key: meta[key] for key in ("command", "load_average", "seconds")}


if __name__ == "__main__":
    main()

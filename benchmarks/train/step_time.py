"""What compression buys per training step: DDP's own gloo all-reduce against zipcoll's hook.

One launch times, for a model whose gradients dominate the step (an MLP of ~25 M
parameters, 100 MB of float32 gradients, batch 32 a rank, SGD with momentum, CPU):

- compute: the same step on the bare module (forward, backward, optimizer), no DDP, no
  communication, timed before and after the configs (the smaller median is used);
- each CONFIG: the step under DDP, with DDP's own all-reduce (gloo, over TCP) or with
  zipcoll.torch's hook (MPI). Communication = step - compute; for the hook also the time
  spent inside it, measured. DDP runs with `gradient_as_bucket_view=True` (for gloo too):
  the gradients live in the buckets, so DDP copies 100 MB neither into the buckets before
  the all-reduce nor back out after it (`--no-bucket-view`: DDP's default, the copies).

The configs run in turn, --rounds times over (so a burst of other load on a shared
machine hits every config alike); each is the slowest rank's median over its --steps
steps after --warmup, of all rounds. Run on the emulated cluster, 2 nodes x 1 rank at
1 Gbit/s, or 2 x 2 with NODES=2 PER_NODE=2 (as root; see benchmarks/cluster/README.md):

    export PATH=$PWD/.venv/bin:$PATH
    flock /tmp/zipcoll-heavy.lock bash benchmarks/train/step_time_cluster.sh \\
        --out benchmarks/results/train/step_time.json

`--fsdp`: the same model sharded by PyTorch FSDP2 (each Linear layer its own FSDP module,
then the model; FSDP_CONFIGS), FSDP's own collectives on gloo against zipcoll's
(`zipcoll.torch.fsdp_collectives`); "in the collectives" is the time spent in zipcoll's
reduce-scatters and all-gathers, forward's and backward's:

    flock /tmp/zipcoll-heavy.lock bash benchmarks/train/step_time_cluster.sh --fsdp \\
        --rounds 2 --out benchmarks/results/train/step_time_fsdp.json
"""
import argparse
import json
import os
import shlex
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: see convergence.py

import torch  # noqa: E402
from mpi4py import MPI  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import zipcoll.torch as ztorch  # noqa: E402
from hooks import ByteCounter, collective_seconds, compression, is_fsdp, make_hook, reset, \
    schedule, shard, timed_training  # noqa: E402

# name -> hook arguments; None: DDP's own all-reduce through the gloo process group.
CONFIGS = {
    "DDP (gloo allreduce)": None,
    "zipcoll lossless": {"codec": None, "algorithm": "ring"},
    "zipcoll int8": {"codec": "int8", "algorithm": "ring", "error_feedback": False},
    "zipcoll sign+EF": {"codec": "sign", "algorithm": "allgather"},
    "zipcoll topk1%+EF": {"codec": "topk:ratio=0.01", "algorithm": "allgather"},
    # the two-level schedule runs the inter-node level in pipelined 2 MiB slices, so one
    # slice encodes while another is on the wire (one rank a node: just that level)
    "zipcoll lossless (hierarchical)": {"codec": None, "algorithm": "hierarchical"},
    "zipcoll int8 (hierarchical)": {"codec": "int8", "algorithm": "hierarchical",
                                   "error_feedback": False},
    "zipcoll sign+EF (hierarchical)": {"codec": "sign", "algorithm": "hierarchical"},
    "zipcoll topk1%+EF (hierarchical)": {"codec": "topk:ratio=0.01",
                                        "algorithm": "hierarchical:allgather"},
    # overlap: the hook returns each bucket's future unfinished, backward goes on
    "zipcoll lossless (hierarchical; overlap)": {"codec": None, "algorithm": "hierarchical",
                                                "overlap": True},
    "zipcoll int8 (hierarchical; overlap)": {"codec": "int8", "algorithm": "hierarchical",
                                            "error_feedback": False, "overlap": True},
    "zipcoll sign+EF (hierarchical; overlap)": {"codec": "sign", "algorithm": "hierarchical",
                                               "overlap": True},
    "zipcoll topk1%+EF (hierarchical; overlap)": {"codec": "topk:ratio=0.01",
                                                 "algorithm": "hierarchical:allgather",
                                                 "overlap": True},
    # PowerSGD at rank 4 from iteration 2 (inside --warmup): PyTorch's hook on gloo (one
    # bucket, see hooks.py), zipcoll's over MPI's ring
    "PyTorch powerSGD_hook rank 4 (gloo)": {"hook": "pytorch-powersgd",
                                            "matrix_approximation_rank": 4,
                                            "start_powerSGD_iter": 2},
    "zipcoll PowerSGD rank 4": {"hook": "powersgd", "matrix_approximation_rank": 4,
                                "start_powerSGD_iter": 2, "algorithm": "ring"},
    "zipcoll PowerSGD rank 4 fp16": {"hook": "powersgd", "matrix_approximation_rank": 4,
                                     "start_powerSGD_iter": 2, "algorithm": "ring",
                                     "codec": "fp16"},
    "zipcoll PowerSGD rank 4 (overlap)": {"hook": "powersgd", "matrix_approximation_rank": 4,
                                          "start_powerSGD_iter": 2, "algorithm": "ring",
                                          "overlap": True},
}

# --fsdp: name -> hooks.shard's config; weights None: FSDP's own all-gather (gloo). With a
# codec the gradients carry error feedback (fsdp_collectives keys it per FSDP module).
FSDP_CONFIGS = {
    "FSDP (gloo)": {"hook": "fsdp-gloo"},
    "zipcoll lossless": {"hook": "fsdp", "gradients": None, "weights": "lossless",
                         "algorithm": "ring"},
    "zipcoll int8 gradients": {"hook": "fsdp", "gradients": "int8", "weights": None,
                               "algorithm": "ring"},
    "zipcoll int8 gradients + int8 weights": {"hook": "fsdp", "gradients": "int8",
                                              "weights": "int8", "algorithm": "ring"},
    "zipcoll int4+EF gradients": {"hook": "fsdp", "gradients": "int4", "weights": None,
                                  "algorithm": "ring"},
    # two-level: lossless inside a node, compressed across (ZeRO++'s qgZ for gradients)
    "zipcoll int8 gradients + int8 weights (hierarchical)": {
        "hook": "fsdp", "gradients": "int8", "weights": "int8", "algorithm": "hierarchical"},
}


def make_model(width: int, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(1024, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 10))


def timed_steps(comm, model: torch.nn.Module, args, hook_seconds: list,
                counted: dict | None = None, fsdp_set_up: dict | None = None) -> list[float]:
    """Per-step seconds (slowest rank) of --steps steps after --warmup; `hook_seconds` gets
    the time in the hook (or in zipcoll's FSDP collectives, `fsdp_set_up`) during those
    steps only, `counted` the bytes zipcoll sent a step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(comm.rank)
    x, y = torch.randn(args.batch, 1024, generator=g), torch.randint(0, 10, (args.batch,))
    start_of_round, sent, in_collectives = len(hook_seconds), [], []

    def warmed_up() -> None:
        del hook_seconds[start_of_round:]
        sent.append(COUNTER.bytes)
        in_collectives.append(collective_seconds(fsdp_set_up))

    times = timed_training(comm, model, opt, x, y, args.warmup, args.steps, warmed_up)
    if fsdp_set_up is not None:
        hook_seconds.append(collective_seconds(fsdp_set_up) - in_collectives[0])
    del opt
    if counted is not None:
        counted["bytes_per_step"] = (COUNTER.bytes - sent[0]) / args.steps
    return times


def timed_config(comm, hook_args: dict | None, args, hook_seconds: list,
                 counted: dict) -> list[float]:
    """One config's step times on a fresh model (the same initial weights every time);
    `counted` gets the bytes zipcoll sent a step and PowerSGD's compression."""
    if is_fsdp(hook_args):
        model = make_model(args.width)
        set_up = shard(model, hook_args)
        return timed_steps(comm, model, args, hook_seconds, counted, set_up)
    state, hook, ddp_args = make_hook(hook_args) if hook_args is not None else (None, None, {})
    model = DDP(make_model(args.width), gradient_as_bucket_view=args.bucket_view, **ddp_args)
    if hook_args is not None:
        model.register_comm_hook(state, timing_hook(hook, hook_seconds))
    step = timed_steps(comm, model, args, hook_seconds, counted)
    if hook_args is not None:
        counted["compression"] = compression(state)
        reset(state)
    return step


COUNTER = ByteCounter()  # zipcoll's bytes; gloo's are not counted


def timing_hook(hook, seconds: list):
    """The hook, timing each call into `seconds` (DDP checks the annotations)."""
    def timed(state, bucket: torch.distributed.GradBucket) -> torch.futures.Future[torch.Tensor]:
        start = time.perf_counter()
        done = hook(state, bucket)
        seconds.append(time.perf_counter() - start)
        return done
    return timed


def model_arguments(doc: str) -> argparse.ArgumentParser:
    """The options both training benchmarks share: the model's width, the batch a rank."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=32)
    return parser


def start_job() -> tuple[MPI.Intracomm, tuple]:
    """COMM_WORLD with torch's threads shared among its ranks here, DDP's process group set
    up, and the load average at the start (the machine may be shared)."""
    comm = MPI.COMM_WORLD
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // comm.Get_size()))
    ztorch.init_process_group(comm)
    return comm, os.getloadavg()


def main() -> None:
    parser = model_arguments(__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-bucket-view", dest="bucket_view", action="store_false",
                        help="DDP's default: gradients copied into and out of the buckets")
    parser.add_argument("--fsdp", action="store_true",
                        help="FSDP2, FSDP_CONFIGS, instead of DDP and CONFIGS")
    parser.add_argument("--configs", default=None, help="default: every config")
    parser.add_argument("--out", default="step_time.json")
    args = parser.parse_args()
    configs = FSDP_CONFIGS if args.fsdp else CONFIGS

    comm, load_at_start = start_job()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    per_node = node.Get_size()
    node.Free()
    net = make_model(args.width)
    params = sum(p.numel() for p in net.parameters())
    before = timed_steps(comm, net, args, [])
    names = args.configs.split(",") if args.configs else list(configs)
    steps = {name: [] for name in names}
    hook_seconds = {name: [] for name in names}
    counted = {name: {} for name in names}
    for _ in range(args.rounds):
        for name in names:
            steps[name] += timed_config(comm, configs[name], args, hook_seconds[name],
                                        counted[name])
    rows = [{"config": name, "hook": configs[name], "step": steps[name],
             "bytes_per_step": (counted[name]["bytes_per_step"]
                                if schedule(configs[name]) != "gloo" else None),
             "compression": counted[name].get("compression"),
             "in_hook_per_step": (comm.allreduce(sum(hook_seconds[name]) / len(steps[name]),
                                                 op=MPI.MAX)
                                  if hook_seconds[name] else None)}
            for name in names]
    after = timed_steps(comm, net, args, [])
    compute = min(statistics.median(before), statistics.median(after))
    rows.insert(0, {"config": f"compute only (no {'FSDP' if args.fsdp else 'DDP'})",
                    "step": before + after})
    for row in rows:
        report(comm, row, compute, params)
    if comm.rank == 0:
        meta = {"command": "python " + shlex.join(os.sys.argv), "ranks": comm.size,
                "ranks_per_node": per_node, "fsdp": args.fsdp,
                "baseline": "FSDP (gloo)" if args.fsdp else "DDP (gloo allreduce)",
                "args": vars(args), "parameters": params, "torch": torch.__version__,
                "torch_threads": torch.get_num_threads(),
                "load_average_at_start": load_at_start, "load_average": os.getloadavg()}
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


def report(comm, row: dict, compute: float, params: int) -> None:
    if comm.rank:
        return
    step = compute if row["config"].startswith("compute") else statistics.median(row["step"])
    hook = row.get("in_hook_per_step")
    where = "collectives" if is_fsdp(row.get("hook")) else "hook"
    print(f"{row['config']:34s} step {1e3 * step:8.1f} ms  compute {1e3 * compute:7.1f} ms  "
          f"communication {1e3 * (step - compute):8.1f} ms"
          + (f"  (in {where} {1e3 * hook:7.1f} ms)" if hook is not None else "")
          + f"  [{params / 1e6:.1f} M parameters]", flush=True)


if __name__ == "__main__":
    main()

"""The DDP communication hook a benchmark config names, for convergence.py and step_time.py,
and the timed training steps step_time.py and small_step.py share (`timed_training`).

A config is a dict of hook arguments; its "hook" entry says which hook takes them:
"zipcoll" (default: zipcoll.torch.ddp_comm_hook), "powersgd" (zipcoll.torch.powersgd_hook)
or "pytorch-powersgd" (PyTorch's own powerSGD_hook on the gloo process group). Two kinds
train sharded instead of under DDP (`is_fsdp`, `shard`): "fsdp" (FSDP2 with
zipcoll.torch.fsdp_collectives, the rest of the dict its arguments) and "fsdp-gloo"
(FSDP2's own collectives on the gloo process group).

PyTorch's hook runs with one bucket: it posts each bucket's next gloo all-reduce from a
future's callback, on whichever thread completed the last one, so with several buckets
the ranks can post them in different orders and gloo aborts ("Received data size doesn't
match expected size"; seen with the tests' models).
"""
import time

import torch
from mpi4py import MPI
from torch.distributed.fsdp import fully_shard
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as pytorch_powersgd

import zipcoll.torch as ztorch
from zipcoll.transport import Transport

ONE_BUCKET_MB = 1024


class ByteCounter:
    """Counts the bytes zipcoll's transport hands MPI to send (wraps Transport.isend)."""

    def __init__(self):
        self.bytes = 0
        original = Transport.isend

        def counting(transport, arr, dest, tag):
            self.bytes += arr.nbytes
            return original(transport, arr, dest, tag)

        Transport.isend = counting


def make_hook(config: dict) -> tuple:
    """(state, hook, DDP keyword arguments) of a config."""
    spec = dict(config)
    kind = spec.pop("hook", "zipcoll")
    if kind == "zipcoll":
        return (*ztorch.ddp_comm_hook(**spec), {})
    if kind == "powersgd":
        return (*ztorch.powersgd_hook(**spec), {})
    if kind == "pytorch-powersgd":
        return (pytorch_powersgd.PowerSGDState(process_group=None, **spec),
                pytorch_powersgd.powerSGD_hook, {"bucket_cap_mb": ONE_BUCKET_MB})
    raise ValueError(f"unknown hook {kind!r}")


def compression(state) -> float | None:
    """Elements given over elements sent, for the PowerSGD hooks (else None)."""
    if isinstance(state, ztorch.PowerSGDHookState):
        return state.powersgd.compression_stats()[0]
    if isinstance(state, pytorch_powersgd.PowerSGDState):
        return state.compression_stats()[0]
    return None


def reset(state) -> None:
    """Free a zipcoll hook's residuals (PyTorch's state is dropped with the model)."""
    if hasattr(state, "reset"):
        state.reset()


def schedule(config: dict | None) -> str:
    """The collectives a config runs on: zipcoll's algorithm, or gloo."""
    if config is None or config.get("hook") in ("pytorch-powersgd", "fsdp-gloo"):
        return "gloo"
    return config.get("algorithm", "auto")


def is_fsdp(config: dict | None) -> bool:
    """Whether a config trains with FSDP2 (`shard`) rather than under DDP (`make_hook`)."""
    return config is not None and config.get("hook") in ("fsdp", "fsdp-gloo")


def shard(net: torch.nn.Module, config: dict) -> dict | None:
    """`net` made an FSDP2 model in place, as examples/fsdp_train.py does it: each Linear
    layer its own FSDP module (so every rank holds a 1/p shard of each weight), then the
    whole model. Kind "fsdp": zipcoll's collectives set on every module (the rest of the
    config is fsdp_collectives' arguments), their {name: (reduce-scatter, all-gather)}
    returned; "fsdp-gloo": FSDP's own, None."""
    for layer in net.modules():
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(net)
    spec = dict(config)
    if spec.pop("hook") == "fsdp-gloo":
        return None
    return ztorch.fsdp_collectives(net, **spec)


def collective_seconds(set_up: dict | None) -> float | None:
    """Seconds spent in zipcoll's FSDP collectives so far (None: FSDP's own)."""
    if set_up is None:
        return None
    return sum(c.seconds for pair in set_up.values() for c in pair if c is not None)


__all__ = ["ByteCounter", "collective_seconds", "compression", "is_fsdp", "make_hook", "reset",
           "schedule", "shard"]


def timed_training(comm, model, opt, x, y, warmup: int, steps: int, at_warmup_end=None) -> list[float]:
    """Seconds of each of `steps` training steps after `warmup` untimed ones, the slowest
    rank's (a barrier before each step); `at_warmup_end()` runs before the first timed one."""
    times = []
    for step in range(warmup + steps):
        comm.Barrier()
        if step == warmup and at_warmup_end is not None:
            at_warmup_end()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=False)  # no fresh gradient memory each step
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        elapsed = time.perf_counter() - start
        if step >= warmup:
            times.append(comm.allreduce(elapsed, op=MPI.MAX))
    return times

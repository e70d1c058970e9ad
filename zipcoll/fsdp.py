"""PyTorch FSDP2: every FSDP module's reduce-scatter (and optionally its all-gather) through
zipcoll, compressed.

    from torch.distributed.fsdp import fully_shard
    import zipcoll.torch

    zipcoll.torch.init_process_group()          # gloo, ranks from MPI: FSDP's setup only
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    zipcoll.torch.fsdp_collectives(model, gradients="int8", weights="int8")

`fsdp_collectives` sets `FSDPModule.set_custom_reduce_scatter` (and, with `weights`,
`set_custom_all_gather`) on every FSDP module of `model`. FSDP hands them its flat
buffers (`torch.distributed.fsdp._fully_shard._fsdp_api`): the reduce-scatter's input
is the padded gradients of the module's parameters, one equal block a rank; its output
this rank's shard, which the optimizer updates. The all-gather's input is this rank's
shard, a view into its block of the output (zipcoll's all-gather in place).

- `gradients`: a codec spec (compressed reduce-scatter, SUM or mean as FSDP asks: AVG
  for float32/bfloat16 gradients) with error feedback per FSDP module, keyed by this
  call and the module's name, so that wrapping anew never mixes residuals; None:
  lossless through zipcoll.
- `weights`: None leaves FSDP's own all-gather; "lossless" routes it through zipcoll; a
  codec spec compresses it (ZeRO++'s qwZ): each rank's shard encoded once, decoded alike
  by every other rank, for forward and again for backward's re-gather. The sharded
  parameters the optimizer updates stay exact: a rank keeps its own shard as it is. No
  error feedback on weights (their error does not accumulate across steps).

The calls are blocking (FSDP on CPU waits for them at once); the MPI communicator's ranks
must be the process group's (`init_process_group` makes them so).
"""
import itertools
import time
from typing import Any

import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

from zipcoll.collectives import allgather, reduce_scatter

_wraps = itertools.count()  # one number per fsdp_collectives call: its feedback keys


class _Alloc:
    """FSDP's buffers as plain tensors (as its default collectives allocate them)."""

    def allocate(self, size: Any, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)


def _check_group(group: dist.ProcessGroup, comm: MPI.Intracomm) -> None:
    if group.size() != comm.Get_size() or group.rank() != comm.Get_rank():
        raise ValueError(f"the FSDP process group (rank {group.rank()} of {group.size()}) is "
                         f"not zipcoll's communicator (rank {comm.Get_rank()} of "
                         f"{comm.Get_size()}); pass comm= with the same ranks")


class ZipcollReduceScatter(_Alloc, ReduceScatter):
    """FSDP's gradient reduce-scatter as `zipcoll.reduce_scatter` (sum or mean)."""

    def __init__(self, codec: Any, algorithm: str, comm: MPI.Intracomm, key: Any):
        self.codec, self.algorithm, self.comm, self.key = codec, algorithm, comm, key
        self.calls, self.seconds = 0, 0.0

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                 group: dist.ProcessGroup, op: Any, async_op: bool = False) -> None:
        _check_group(group, self.comm)
        if op == dist.ReduceOp.AVG:
            how = "mean"
        elif op == dist.ReduceOp.SUM:
            how = "sum"
        else:
            raise ValueError(f"zipcoll's FSDP reduce-scatter takes SUM and AVG, not {op} "
                             "(a gradient_divide_factor FSDP cannot fold into AVG)")
        self.calls += 1
        start = time.perf_counter()
        reduce_scatter(input_tensor.detach(), output_tensor.detach(), op=how,
                       codec=self.codec, key=None if self.codec is None else self.key,
                       algorithm=self.algorithm, comm=self.comm)
        self.seconds += time.perf_counter() - start
        return None


class ZipcollAllGather(_Alloc, AllGather):
    """FSDP's parameter all-gather as `zipcoll.allgather` (in place where FSDP's input is
    this rank's block of the output, as it always is in FSDP2)."""

    def __init__(self, codec: Any, algorithm: str, comm: MPI.Intracomm):
        self.codec, self.algorithm, self.comm = codec, algorithm, comm
        self.calls, self.seconds = 0, 0.0

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                 group: dist.ProcessGroup, async_op: bool = False) -> None:
        _check_group(group, self.comm)
        out, mine = output_tensor.detach(), input_tensor.detach()
        where = out.data_ptr() + self.comm.Get_rank() * mine.numel() * mine.element_size()
        codec = self.codec if mine.is_floating_point() else None  # uint8: mixed dtypes
        self.calls += 1
        sendbuf = MPI.IN_PLACE if mine.data_ptr() == where else mine
        start = time.perf_counter()
        allgather(sendbuf, out, codec=codec, algorithm=self.algorithm, comm=self.comm)
        self.seconds += time.perf_counter() - start
        return None


def fsdp_collectives(model: torch.nn.Module, gradients: Any = "int8", weights: Any = None,
                     algorithm: str = "auto", comm: MPI.Intracomm | None = None) -> dict:
    """Make every FSDP module of `model` reduce-scatter its gradients (and with `weights`,
    all-gather its parameters) through zipcoll; returns {module name: (reduce-scatter,
    all-gather or None)}, the collectives set (their `calls` count what ran, `seconds`
    how long it took).

    Call it after `fully_shard`, on every rank. ValueError if `model` holds no FSDP module.
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    wrap = next(_wraps)
    weights_codec = None if weights in (None, "lossless") else weights
    set_up = {}
    for name, module in model.named_modules():
        if not isinstance(module, FSDPModule):
            continue
        rs = ZipcollReduceScatter(gradients, algorithm, comm, ("fsdp", wrap, name, "grads"))
        module.set_custom_reduce_scatter(rs)
        ag = None
        if weights is not None:
            ag = ZipcollAllGather(weights_codec, algorithm, comm)
            module.set_custom_all_gather(ag)
        set_up[name] = (rs, ag)
    if not set_up:
        raise ValueError("the model holds no FSDP module: call fully_shard on it first")
    return set_up


__all__ = ["ZipcollAllGather", "ZipcollReduceScatter", "fsdp_collectives"]

"""PyTorch: a DistributedDataParallel communication hook that all-reduces through zipcoll.

    from torch.nn.parallel import DistributedDataParallel as DDP
    import zipcoll.torch

    zipcoll.torch.init_process_group()        # gloo, ranks from MPI: it only sets DDP up
    model = DDP(net, gradient_as_bucket_view=True)
    model.register_comm_hook(*zipcoll.torch.ddp_comm_hook(codec="int8", algorithm="ring"))

Each gradient bucket DDP hands the hook is averaged over the MPI communicator by
`zipcoll.allreduce(MPI.IN_PLACE, bucket, op="mean", ...)`, in place in the bucket's own
memory, so the process group carries no gradients. With a lossy codec, error feedback
keeps each bucket's compression error and adds it to the next step's gradient.

`gradient_as_bucket_view=True` (as for PyTorch's own PowerSGD hook): the gradients then
are views into the buckets, so DDP copies them neither into a bucket before the hook nor
out of the result after it (the hook returns the bucket itself). Without it DDP makes
both copies of every gradient each step, outside the hook and, unlike its own
all-reduce, not hidden behind the backward pass.

Buckets and error feedback: DDP rebuilds its buckets once after the first iteration (in
the order gradients became ready), so bucket index 3 may hold other parameters from then
on, possibly of the same total size. Residuals are therefore keyed by the identities of
the bucket's parameters, in order, never by index or size: a rebuilt bucket starts fresh
and the residuals of the bucket it replaced are freed (PyTorch's PowerSGD hook instead
refuses error feedback before iteration 2).

Checkpoints: `state.state_dict()` holds this rank's residuals as tensors (and only plain
types: `torch.load(..., weights_only=True)` reads it); save one per rank, next to the
model's and the optimizer's, and `state.load_state_dict(...)` in the resumed process
before its first step. Parameters are named by the order the hook first sees them
(the first backward pass, which DDP's initial buckets make the same in every run of the
same model), so each residual goes back to the bucket of the same parameters.

Overlap (`overlap=True`): each bucket's all-reduce is started (`zipcoll.iallreduce`) and
its future returned unfinished, so the backward pass computes the next layers' gradients
while the bucket is on the wire. zipcoll's progress engine runs no thread of its own (each
thread that calls zipcoll advances its own calls), so nothing runs in the background: the
calls advance when the next bucket's hook starts its own,
and the hook of the last bucket (`bucket.is_last()`) finishes every call of the pass
and completes their futures, all on the thread that runs backward. DDP waits on the
futures only after that, when backward ends. MPI moves data only inside MPI calls
(Open MPI's TCP and shared-memory transports have no progress thread), so a call moves
between hooks only what its posted sends have handed the kernel.

PowerSGD (`powersgd_hook`, PyTorch's `powerSGD_hook` arguments plus zipcoll's): each
bucket's matrices at low rank through `zipcoll.lowrank`, its state kept per parameter
number, so DDP's rebuild moves nothing; the first iterations go through `allreduce_hook`
(docs/lowrank.md).

This module is `zipcoll.torch`; it imports PyTorch absolutely (`import torch`), which is
the real package, never this module. (No `from __future__ import annotations` here:
DDP checks the hook's annotations as objects, dist.GradBucket and Future[Tensor].)
"""
import itertools
import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

import torch
import torch.distributed as dist
from mpi4py import MPI

from zipcoll import lowrank
from zipcoll.codecs import get_codec
from zipcoll.collectives import allreduce, iallreduce
from zipcoll.collectives.encoding import FEEDBACK
from zipcoll.topologies import Topology
from zipcoll.transport import allgather_objects, bcast_object
from zipcoll.fsdp import fsdp_collectives  # zipcoll.torch.fsdp_collectives: FSDP2 through zipcoll

_hooks = itertools.count()  # each hook's residuals live under its own number


@dataclass
class HookState:
    """What one `ddp_comm_hook` keeps: how to all-reduce, and each bucket's feedback key."""

    comm: MPI.Intracomm
    algorithm: str
    codec: Any
    error_feedback: bool
    topology: Topology | None = None
    overlap: bool = False
    hook_id: int = field(default_factory=lambda: next(_hooks))
    keys: dict[int, Hashable] = field(default_factory=dict)  # bucket index -> key in use
    in_flight: list = field(default_factory=list)  # (request, future, bucket) of this pass
    numbers: dict[int, int] = field(default_factory=dict)  # id(param) -> order first seen
    loaded: dict[tuple, list] = field(default_factory=dict)  # numbers -> saved entries
    loaded_from: dict = field(default_factory=dict)  # the saved state's format, rank, size
    layout: list = field(default_factory=list)  # saved buckets (numbers) not yet seen again
    saved_order: list = field(default_factory=list)  # every saved bucket, by index

    def key_for(self, bucket: dist.GradBucket) -> Hashable:
        """The bucket's feedback key: its parameters, by identity and in order.

        Identities, not index or size: after DDP's rebuild a bucket at the same index, even
        of the same size, may hold other parameters. A replaced key's residuals are freed.
        """
        return self._key(bucket.index(), tuple(id(p) for p in bucket.parameters()))

    def _key(self, index: int, ids: tuple) -> Hashable:
        """The key of parameters `ids` reduced as bucket `index`; a checkpoint's residuals
        of these parameters are put under it."""
        key = ("zipcoll.torch", self.hook_id, ids)
        old = self.keys.get(index)
        if old is not None and old != key:
            FEEDBACK.reset(old)
        self.keys[index] = key
        numbers = self.numbers_of(ids)
        if numbers in self.layout:
            self.layout.remove(numbers)
        saved = self.loaded.pop(numbers, None)
        if saved is not None:
            entries = [dict(e, residuals={site: r.numpy() for site, r in e["residuals"].items()})
                       for e in saved]
            FEEDBACK.load_state_dict(dict(self.loaded_from, entries=entries),
                                     rename=lambda _: key)
        return key

    def numbers_of(self, ids: tuple) -> tuple:
        """The parameters' numbers: the order this hook first saw them in."""
        for i in ids:
            self.numbers.setdefault(i, len(self.numbers))
        return tuple(self.numbers[i] for i in ids)

    def saved_inside(self, bucket: dist.GradBucket) -> list:
        """(index, numbers) of the saved buckets this bucket holds whole, when it is none
        of them: DDP's first iteration puts every parameter in one bucket, and rebuilds
        its buckets after it (as they were when the checkpoint was taken)."""
        if not self.layout or not self.error_feedback:
            return []
        numbers = self.numbers_of(tuple(id(p) for p in bucket.parameters()))
        if numbers in self.layout:
            return []
        inside, taken = [], set(numbers)
        for index, group in enumerate(self.saved_order):
            if group in self.layout and set(group) <= taken:
                inside.append((index, group))
                taken -= set(group)
        return inside

    def finish(self) -> None:
        """Finish every bucket's all-reduce of this backward pass; complete their futures."""
        in_flight, self.in_flight = self.in_flight, []
        for request, future, grad in in_flight:
            request.wait()
            future.set_result(grad)

    def reset(self) -> None:
        """Drop every bucket's residuals."""
        for key in self.keys.values():
            FEEDBACK.reset(key)
        self.keys.clear()
        self.loaded.clear()
        self.layout.clear()

    def state_dict(self) -> dict:
        """This rank's hook state for a checkpoint, plain types only: the buckets (their
        parameters' numbers, alike on every rank) and each one's residuals (tensors)."""
        mine = {key: self.numbers_of(key[2]) for key in self.keys.values()}
        state = FEEDBACK.state_dict(keys=list(mine))
        for entry in state["entries"]:
            entry["key"] = mine[entry["key"]]
            entry["residuals"] = {site: torch.from_numpy(r)
                                  for site, r in entry["residuals"].items()}
        state["entries"] += [e for entries in self.loaded.values() for e in entries]
        buckets = [mine[self.keys[i]] for i in sorted(self.keys)]
        codec = self.codec if isinstance(self.codec, (str, type(None))) else repr(self.codec)
        return {"zipcoll.torch": 1, "algorithm": self.algorithm, "codec": codec,
                "error_feedback": self.error_feedback, "buckets": buckets, "feedback": state}

    def load_state_dict(self, state: dict) -> None:
        """Take this rank's `state_dict()`: each saved residual goes back to the bucket of
        the same parameters when the hook first sees it (see `saved_inside`)."""
        feedback = state["feedback"]
        FEEDBACK.load_state_dict(dict(feedback, entries=[]))  # checks format, rank and size
        self.loaded_from = {k: v for k, v in feedback.items() if k != "entries"}
        self.loaded.clear()
        for entry in feedback["entries"]:
            self.loaded.setdefault(tuple(int(n) for n in entry["key"]), []).append(entry)
        self.saved_order = [tuple(int(n) for n in group) for group in state["buckets"]]
        self.layout = list(self.saved_order)


def ddp_comm_hook(codec: Any = None, algorithm: str = "auto", comm: MPI.Intracomm | None = None,
                  *, error_feedback: bool = True, topology: Topology | None = None,
                  overlap: bool = False
                  ) -> tuple[HookState, Callable[..., torch.futures.Future[torch.Tensor]]]:
    """(state, hook) for `DistributedDataParallel.register_comm_hook(state, hook)`.

    `codec`, `algorithm`, `topology`: as `zipcoll.allreduce` ("auto" compresses only
    where the cost model says it pays, which is between nodes, and where it sends lossless
    says so once per communicator with a `zipcoll.CodecNotApplied` warning; on one node
    name a schedule, e.g. "ring", to compress there).
    `comm`: the MPI communicator of the DDP ranks, in the same rank order as the process
    group (default COMM_WORLD). `error_feedback`: with a lossy codec, keep each bucket's
    compression error and send it with the next step's gradient (topk and randomk need it
    to converge; sign keeps half of it a step, see `zipcoll.codecs.sign`). `overlap`: return each bucket's future unfinished, so backward
    goes on while it is on the wire; the last bucket's hook finishes them all (above).

    >>> model.register_comm_hook(*ddp_comm_hook(codec="int8", algorithm="ring"))  # doctest: +SKIP
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    lossy = codec is not None and not _lossless(codec)
    state = HookState(comm, algorithm, codec, error_feedback and lossy, topology, overlap)
    return state, allreduce_hook


def _lossless(codec: Any) -> bool:
    """Whether a codec spec sends exact values (a per-level spec: at every level)."""
    if isinstance(codec, dict) and "id" not in codec:
        return all(_lossless(level) for level in codec.values())
    return get_codec(codec).lossless


def allreduce_hook(state: HookState,
                   bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The hook: average the bucket's flat gradient over `state.comm`, in place, through zipcoll."""
    grad = bucket.buffer()
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    inside = state.saved_inside(bucket)
    if bucket.is_last():
        state.layout.clear()  # the saved buckets are re-formed in the first pass only
    if inside:
        _reduce_as_saved(state, bucket, inside)
        if bucket.is_last():
            state.finish()
        future.set_result(grad)
        return future
    key = state.key_for(bucket) if state.error_feedback else None
    args = dict(_call_args(state), key=key)
    if not state.overlap:
        allreduce(MPI.IN_PLACE, grad, **args)
        future.set_result(grad)
        return future
    request = iallreduce(MPI.IN_PLACE, grad, **args)
    state.in_flight.append((request, future, grad))
    if bucket.is_last():
        state.finish()
    else:
        request.test()  # advances the earlier buckets' calls too
    return future


def _call_args(state: HookState) -> dict:
    return dict(op="mean", comm=state.comm, algorithm=state.algorithm, codec=state.codec,
                topology=state.topology)


def _reduce_as_saved(state: HookState, bucket: dist.GradBucket, inside: list) -> None:
    """The first step after a checkpoint: each saved bucket's gradients, in their saved
    order and with their residuals, all-reduced as that bucket was before the checkpoint
    (as the uninterrupted run does, bit for bit); the parameters of no saved bucket
    together, without feedback for this step."""
    grad, params = bucket.buffer(), bucket.parameters()
    spans, start = {}, 0
    for p in params:
        spans[id(p)], start = (start, start + p.numel()), start + p.numel()
    by_number = {state.numbers[id(p)]: id(p) for p in params}
    rest = dict(spans)
    for index, numbers in inside:
        ids = tuple(by_number[n] for n in numbers)
        _reduce_spans(grad, [rest.pop(i) for i in ids], state, state._key(index, ids))
    if rest:
        _reduce_spans(grad, list(rest.values()), state, None)


def _reduce_spans(grad: torch.Tensor, spans: list, state: HookState, key: Hashable) -> None:
    """All-reduce grad's slices `spans`, concatenated in that order, under `key`."""
    flat = torch.cat([grad[a:b] for a, b in spans])
    allreduce(MPI.IN_PLACE, flat, key=key, **_call_args(state))
    start = 0
    for a, b in spans:
        grad[a:b] = flat[start:start + b - a]
        start += b - a


@dataclass
class PowerSGDHookState(HookState):
    """What one `powersgd_hook` keeps: PowerSGD's own state (`powersgd`, a
    `zipcoll.lowrank.PowerSGDState`, keyed by parameter number), the iteration, and the
    bucket bookkeeping it shares with `ddp_comm_hook`'s state (parameter numbers, the
    calls in flight under overlap, the saved buckets a resumed run replays)."""

    powersgd: lowrank.PowerSGDState | None = None
    start_powerSGD_iter: int = 1_000
    iter: int = 0
    stats_every: int = 10_000
    next_stats: int = 0

    def reset(self) -> None:
        """Drop every Q and residual."""
        super().reset()
        self.powersgd.reset()

    def state_dict(self) -> dict:
        """This rank's state for a checkpoint (tensors and plain types: `torch.load(...,
        weights_only=True)` reads it): the iteration, the buckets of the last pass (their
        parameters' numbers), and PowerSGD's Qs, residuals and generator."""
        inner = self.powersgd.state_dict()
        for name in ("qs", "residuals"):
            inner[name] = [[k, torch.from_numpy(a)] for k, a in inner[name]]
        buckets = [self.numbers_of(self.keys[i][2]) for i in sorted(self.keys)]
        return {"zipcoll.torch.powersgd": 1, "iter": self.iter, "buckets": buckets,
                "powersgd": inner}

    def load_state_dict(self, state: dict) -> None:
        """Take this rank's `state_dict()`, before the resumed run's first step. Its first
        pass all-reduces each saved bucket on its own, as the saved run did."""
        if state.get("zipcoll.torch.powersgd") != 1:
            raise ValueError("not a state_dict of zipcoll.torch.powersgd_hook")
        inner = dict(state["powersgd"])
        for name in ("qs", "residuals"):
            inner[name] = [[k, a.numpy()] for k, a in inner[name]]
        self.powersgd.load_state_dict(inner)
        self.iter = int(state["iter"])
        self.saved_order = [tuple(int(n) for n in group) for group in state["buckets"]]
        self.layout = list(self.saved_order)


def powersgd_hook(matrix_approximation_rank: int = 1, start_powerSGD_iter: int = 1_000,
                  min_compression_rate: float = 2, use_error_feedback: bool = True,
                  warm_start: bool = True, orthogonalization_epsilon: float = 0,
                  random_seed: int = 0, compression_stats_logging_frequency: int = 10_000,
                  batch_tensors_with_same_shape: bool = False, *, algorithm: str = "auto",
                  codec: Any = None, comm: MPI.Intracomm | None = None,
                  topology: Topology | None = None, overlap: bool = False
                  ) -> tuple[PowerSGDHookState, Callable[..., torch.futures.Future[torch.Tensor]]]:
    """(state, hook) for `DistributedDataParallel.register_comm_hook`: PowerSGD over zipcoll.

    The arguments before `*` are PyTorch's `PowerSGDState`'s, with its meanings and
    defaults: a plain mean all-reduce for the first `start_powerSGD_iter` iterations, then
    each bucket's matrices (conv weights as dim 0 x the rest) at rank
    `matrix_approximation_rank` (`zipcoll.lowrank`). Unlike PyTorch's, the state is kept
    per parameter, not per bucket index, so it survives DDP's bucket rebuild and
    `start_powerSGD_iter` may be 0 or 1 with error feedback and warm start.
    `algorithm`, `topology`: as `zipcoll.allreduce`, for every all-reduce; `codec`: for
    P and Q (the dense tensors and the first iterations go exactly). `comm`: the MPI
    communicator of the DDP ranks (default COMM_WORLD). `overlap`: start each bucket's
    rounds and return its future unfinished; later buckets' hooks advance them, and the
    last bucket's finishes them all.

    >>> model.register_comm_hook(*powersgd_hook(4, start_powerSGD_iter=10, codec="fp16"))  # doctest: +SKIP
    """
    if start_powerSGD_iter < 0:
        raise ValueError(f"start_powerSGD_iter must be >= 0, not {start_powerSGD_iter}")
    comm = MPI.COMM_WORLD if comm is None else comm
    inner = lowrank.PowerSGDState(
        matrix_approximation_rank, min_compression_rate=min_compression_rate,
        use_error_feedback=use_error_feedback, warm_start=warm_start,
        orthogonalization_epsilon=orthogonalization_epsilon, random_seed=random_seed,
        batch_tensors_with_same_shape=batch_tensors_with_same_shape, algorithm=algorithm,
        codec=codec, comm=comm, topology=topology, init=_torch_normal)
    # error_feedback=True: state is kept across steps, so a resumed run replays the saved
    # buckets (`saved_inside`); the plain all-reduces carry no codec
    state = PowerSGDHookState(comm, algorithm, None, True, topology, overlap, powersgd=inner,
                              start_powerSGD_iter=start_powerSGD_iter,
                              stats_every=max(1, compression_stats_logging_frequency))
    return state, powersgd_ddp_hook


def _torch_normal(seed: int, shapes: list, dtype: Any) -> list:
    """The initial Qs as PyTorch's hook draws them: torch's generator seeded `seed`, one
    randn a shape, without touching the caller's generator."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return [torch.randn(*shape, dtype=_TORCH_DTYPES[str(dtype)]).numpy() for shape in shapes]


_TORCH_DTYPES = {"float16": torch.float16, "float32": torch.float32, "float64": torch.float64}


def powersgd_ddp_hook(state: PowerSGDHookState,
                      bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The hook: PowerSGD on the bucket's gradients, in place, through zipcoll."""
    numbers = state.numbers_of(tuple(id(p) for p in bucket.parameters()))
    if state.iter < state.start_powerSGD_iter:
        future = allreduce_hook(state, bucket)  # lossless: the codec is P's and Q's
    else:
        future = _powersgd_bucket(state, bucket, numbers)
    if bucket.is_last():
        state.iter += 1
        _log_stats(state)
    return future


def _powersgd_bucket(state: PowerSGDHookState, bucket: dist.GradBucket,
                     numbers: tuple) -> torch.futures.Future[torch.Tensor]:
    grad = bucket.buffer()
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    inside = state.saved_inside(bucket)
    if bucket.is_last():
        state.layout.clear()  # the saved buckets are re-formed in the first pass only
    ids = tuple(id(p) for p in bucket.parameters())
    if inside:  # the first step after a checkpoint: each saved bucket as it was reduced
        views = dict(zip(numbers, bucket.gradients()))
        for index, group in inside:
            state._key(index, tuple(ids[numbers.index(n)] for n in group))
            lowrank.allreduce(state.powersgd, [views.pop(n) for n in group], list(group))
        if views:
            lowrank.allreduce(state.powersgd, list(views.values()), list(views))
        if bucket.is_last():
            state.finish()
        future.set_result(grad)
        return future
    state._key(bucket.index(), ids)  # the bucket layout a checkpoint records
    request = lowrank.iallreduce(state.powersgd, bucket.gradients(), list(numbers))
    if not state.overlap:
        request.wait()
        future.set_result(grad)
        return future
    state.in_flight.append((request, future, grad))  # the next bucket's call starts its next round
    if bucket.is_last():
        state.finish()
    return future


def _log_stats(state: PowerSGDHookState) -> None:
    if state.iter > state.start_powerSGD_iter and state.iter >= state.next_stats:
        rate, before, after = state.powersgd.compression_stats()
        logging.getLogger(__name__).info(
            "PowerSGD: iteration %s, %s elements before compression, %s after, rate %.3g",
            state.iter, before, after, rate)
        state.next_stats = state.iter + state.stats_every


def init_process_group(comm: MPI.Intracomm | None = None, backend: str = "gloo",
                       master_addr: str | None = None, port: int | None = None) -> None:
    """Start torch.distributed with the ranks and size of an MPI communicator.

    The process group only sets DDP up (it broadcasts the initial parameters); with the
    hook the gradients go through zipcoll. Rank 0 listens, at an address it finds itself
    and broadcasts over MPI (`rendezvous`), so `mpirun`/`srun` across nodes needs no
    MASTER_ADDR. `master_addr`: where rank 0 listens (default the MASTER_ADDR environment
    variable, else found). `port`: default MASTER_PORT, else a free port rank 0 picks.
    Collective: call it on every rank of `comm`.
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    addr, port = rendezvous(comm, master_addr, port)
    host = f"[{addr}]" if ":" in addr else addr  # an IPv6 address in a URL
    dist.init_process_group(backend, init_method=f"tcp://{host}:{port}",
                            rank=comm.Get_rank(), world_size=comm.Get_size())


def rendezvous(comm: MPI.Intracomm, master_addr: str | None = None,
               port: int | None = None) -> tuple[str, int]:
    """(address, port) where rank 0 of `comm` listens, the same on every rank.

    Rank 0 decides and broadcasts it, so every rank uses rank 0's `master_addr` /
    MASTER_ADDR and `port` / MASTER_PORT where given. Otherwise: 127.0.0.1 if every rank
    runs on rank 0's host (one host name), else an address of rank 0 that other hosts can
    reach (`reachable_address`); a free port rank 0 picks. If rank 0 finds no address,
    every rank raises RuntimeError. Collective over `comm`.
    """
    hosts = allgather_objects(comm, socket.gethostname())
    answer = None
    if comm.Get_rank() == 0:
        try:
            addr = master_addr or os.environ.get("MASTER_ADDR") or (
                "127.0.0.1" if len(set(hosts)) == 1 else reachable_address())
            answer = (addr, port or int(os.environ.get("MASTER_PORT", 0)) or _free_port())
        except (OSError, RuntimeError, ValueError) as e:
            answer = f"rank 0 found no address to listen at for the process group: {e}"
    answer = bcast_object(comm, answer)
    if isinstance(answer, str):
        raise RuntimeError(answer)
    return answer


def reachable_address() -> str:
    """An IPv4 address of this host that other hosts can reach, never a loopback one.

    In order: the address of the interface GLOO_SOCKET_IFNAME names (where gloo sends,
    if set), the host name's address (as `hostname -i`; Debian's /etc/hosts maps it to
    127.0.1.1, which is skipped), the first interface that has a non-loopback address.
    Raises RuntimeError naming MASTER_ADDR if there is none.
    """
    wanted = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]
    if wanted:
        return _interface_address(wanted)
    try:
        named = socket.gethostbyname_ex(socket.gethostname())[2]
    except OSError:
        named = []
    interfaces = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    for addr in named + [a for a in map(_interface_address_or_none, interfaces) if a]:
        if not addr.startswith("127."):
            return addr
    raise RuntimeError(f"host {socket.gethostname()!r} has no non-loopback IPv4 address; "
                       "set MASTER_ADDR to an address of rank 0 the other ranks reach")


def _interface_address(name: str) -> str:
    """The IPv4 address of network interface `name` (Linux: the SIOCGIFADDR ioctl)."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            ifreq = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
        except OSError as e:
            raise RuntimeError(f"interface {name!r} has no IPv4 address ({e})") from None
    return socket.inet_ntoa(ifreq[20:24])


def _interface_address_or_none(name: str) -> str | None:
    try:
        return _interface_address(name)
    except (RuntimeError, ImportError):
        return None


def _free_port() -> int:
    """A TCP port free on every address of this host just now."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


__all__ = ["HookState", "PowerSGDHookState", "allreduce_hook", "ddp_comm_hook", "fsdp_collectives",
           "init_process_group", "powersgd_ddp_hook", "powersgd_hook", "rendezvous"]

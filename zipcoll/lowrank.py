"""Low-rank all-reduce (PowerSGD) over zipcoll's all-reduce, for any array framework.

    import numpy as np, zipcoll.lowrank as lowrank

    state = lowrank.PowerSGDState(rank=4, algorithm="ring", codec="fp16")
    for step in range(steps):
        grads = [w1_grad, b1_grad, w2_grad]           # NumPy, CuPy or torch (DLPack)
        lowrank.allreduce(state, grads)               # each averaged in place, approximately

Each matrix M (n x m; a tensor of more dimensions is dim 0 x the rest) is approximated by
one step of power iteration with a warm-started factor Q (m x r), as in Vogels et al.,
"PowerSGD" (NeurIPS 2019) and PyTorch's `powerSGD_hook`:

    M += residual (error feedback)   P = M Q    all-reduce P (sum)    orthogonalize P
    Q = Mᵀ P    all-reduce Q (mean)    M ≈ P Qᵀ    residual = M - P Qᵀ    keep Q (warm start)

so r (n + m) numbers go on the wire instead of n m (the planner prices the step:
`zipcoll.collectives.planning.lowrank`, `zipcoll-bench simulate --codec powersgd:rank=4`). Matrices too small to gain (PyTorch's
rule: compressed only where (n + m) r x `min_compression_rate` < n m) and tensors of one
dimension or none are averaged exactly, in one all-reduce that runs beside P's. Matrices
of the same shape go in one batched matmul with `batch_tensors_with_same_shape`. P and Q
are each one flat all-reduce per call, through `zipcoll.iallreduce` with any `algorithm`
and an optional `codec` for them (fp16, bf16, int8, ...; no error feedback of the codec's
own: P and Q change meaning every step, and PowerSGD's residual covers their error).

Every rank ends with the same bits: P and Q are all-reduced, and each rank orthogonalizes
the same P with the same arithmetic (on machines that compute alike: nodes whose BLAS
rounds differently would orthogonalize differently, as PyTorch's hook would).

Orthogonalization follows PyTorch: Gram-Schmidt for rank <= 2 and half precision, QR
above; a column of zeros stays zeros (PyTorch's divides by its norm, giving NaN, unless
`orthogonalization_epsilon` is set).

The state (`PowerSGDState`) is the caller's: per matrix key, its Q and residual, and the
random generator of the initial Qs. Keys name the matrices across calls (default: the
position in the list, for one call a step over the same tensors); several calls a step
(buckets) give each tensor its own key. `state_dict()` / `load_state_dict()` save and
restore it (host NumPy arrays and plain types).

Failures: a call whose arguments this rank rejects (not float, mixed dtypes, read-only,
keys) still joins one all-reduce that fails there, so every rank raises before data
moves; the first call that sees a key not in the state compares, in one small all-reduce,
every rank's shapes, dtype, settings and random generator, and raises MismatchError on
every rank where they differ (a permutation of shapes has the same sizes on the wire).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator, Sequence

import numpy as np
from mpi4py import MPI

from zipcoll.codecs import get_codec
from zipcoll.codecs.backend import cupy as _cupy
from zipcoll.collectives import allreduce as _allreduce
from zipcoll.collectives import iallreduce as _iallreduce
from zipcoll.collectives.planning.lowrank import compressible, matrix_shape
from zipcoll.errors import MismatchError, MissingDependencyError
from zipcoll.topologies import Topology

FORMAT = 1  # of state_dict()
FLOATS = (np.float16, np.float32, np.float64)

# init(seed, shapes, dtype) -> one array a shape: the standard normal initial Qs
Init = Callable[[int, list, np.dtype], list]


def normal_init(seed: int, shapes: list, dtype: np.dtype) -> list:
    """NumPy's standard normal draws for each shape, from one generator seeded `seed`."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for shape in shapes]


@dataclass
class PowerSGDState:
    """PowerSGD's settings and memory, owned by the caller (one per model).

    `rank`: r, the columns of P and Q (PyTorch's `matrix_approximation_rank`); a matrix
    gets min(n, m, r). `min_compression_rate`, `use_error_feedback`, `warm_start`,
    `orthogonalization_epsilon`, `random_seed`, `batch_tensors_with_same_shape`: as
    PyTorch's `PowerSGDState`. `algorithm`, `codec` (for P and Q), `comm`, `topology`:
    as `zipcoll.allreduce`. `init`: the initial Qs' random draws (`normal_init`; the DDP
    hook passes torch's, so its runs match PyTorch's hook).
    """

    rank: int = 1
    min_compression_rate: float = 2
    use_error_feedback: bool = True
    warm_start: bool = True
    orthogonalization_epsilon: float = 0.0
    random_seed: int = 0
    batch_tensors_with_same_shape: bool = False
    algorithm: str = "auto"
    codec: Any = None
    comm: MPI.Intracomm | None = None
    topology: Topology | None = None
    init: Init = normal_init
    rng: np.random.RandomState = field(init=False, repr=False)
    qs: dict = field(default_factory=dict, repr=False)  # key -> Q (m x r) of the last call
    residuals: dict = field(default_factory=dict, repr=False)  # key -> M - P Qᵀ
    numel_before: int = field(default=0, repr=False)  # elements given (compression_stats)
    numel_after: int = field(default=0, repr=False)  # elements sent
    checked: set = field(default_factory=set, repr=False)  # keys every rank has compared
    in_flight: list = field(default_factory=list, repr=False)  # LowRankRequests, oldest first
    spare: dict = field(default_factory=dict, repr=False)  # key -> array for M + residual

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"rank must be a positive int, not {self.rank!r}")
        if not self.min_compression_rate >= 0:
            raise ValueError(f"min_compression_rate must be >= 0, not {self.min_compression_rate!r}")
        if not self.orthogonalization_epsilon >= 0:
            raise ValueError("orthogonalization_epsilon must be >= 0, "
                             f"not {self.orthogonalization_epsilon!r}")
        if self.codec is not None:
            get_codec(self.codec)  # an unknown spec fails here, not in the first call
        self.comm = MPI.COMM_WORLD if self.comm is None else self.comm
        self.rng = np.random.RandomState(self.random_seed)

    def compression_stats(self) -> tuple[float, int, int]:
        """(rate, elements before, elements after) over every call so far, as PyTorch's."""
        rate = self.numel_before / self.numel_after if self.numel_after else 0
        return rate, self.numel_before, self.numel_after

    def reset(self) -> None:
        """Forget every Q and residual (the generator goes on)."""
        self.qs.clear()
        self.residuals.clear()
        self.spare.clear()

    def state_dict(self) -> dict:
        """This rank's state, host NumPy arrays and plain types: the settings that must
        match when loaded, the generator, each key's Q and residual."""
        name, keys, pos, has_gauss, gauss = self.rng.get_state()
        return {"zipcoll.lowrank": FORMAT, "settings": self._settings(),
                "rng": [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)],
                "qs": [[k, _host(q)] for k, q in self.qs.items()],
                "residuals": [[k, _host(r)] for k, r in self.residuals.items()],
                "stats": [self.numel_before, self.numel_after]}

    def load_state_dict(self, state: dict) -> None:
        """Take a `state_dict()` of a state with the same settings (ValueError otherwise)."""
        if state.get("zipcoll.lowrank") != FORMAT:
            raise ValueError("not a zipcoll.lowrank state_dict of format "
                             f"{FORMAT}: {sorted(state)[:4]}")
        if list(state["settings"]) != list(self._settings()):
            raise ValueError(f"the saved state's settings {state['settings']} differ from "
                             f"this state's {self._settings()}")
        name, keys, pos, has_gauss, gauss = state["rng"]
        self.rng.set_state((name, np.asarray(keys, np.uint32), pos, has_gauss, gauss))
        self.qs = {_hashable(k): np.asarray(q) for k, q in state["qs"]}
        self.residuals = {_hashable(k): np.asarray(r) for k, r in state["residuals"]}
        self.spare.clear()
        self.numel_before, self.numel_after = (int(n) for n in state["stats"])
        self.checked.clear()  # every rank compares again: they may have loaded different states

    def _settings(self) -> list:
        return [self.rank, float(self.min_compression_rate), bool(self.use_error_feedback),
                bool(self.warm_start), float(self.orthogonalization_epsilon),
                bool(self.batch_tensors_with_same_shape)]


def allreduce(state: PowerSGDState, tensors: Sequence[Any],
              keys: Sequence[Hashable] | None = None) -> None:
    """Average `tensors` over `state.comm` in place, each matrix approximated at low rank.

    `keys`: one a tensor, naming it in `state` (default 0, 1, ...). Collective.
    """
    _start(state, tensors, keys, blocking=True).wait()


def iallreduce(state: PowerSGDState, tensors: Sequence[Any],
               keys: Sequence[Hashable] | None = None) -> "LowRankRequest":
    """Start `allreduce`; the request finishes on wait() (see `LowRankRequest`).

    Its rounds are zipcoll non-blocking calls, which any zipcoll wait or test on this
    thread advances. A round starts only at a point of the program that every rank
    reaches in the same order: this call first starts the next round of each earlier
    call on `state` still in flight, waiting for its current round (the one wait of a
    non-blocking call here: it orders the rounds alike on every rank, so other zipcoll
    calls on the communicator may go between them).
    """
    return _start(state, tensors, keys, blocking=False)


def _start(state: PowerSGDState, tensors: Sequence[Any], keys: Sequence[Hashable] | None,
           blocking: bool) -> "LowRankRequest":
    for earlier in list(state.in_flight):
        earlier.step()  # before this call's checks: a rejecting rank starts the same rounds
    try:
        work = _prepare(state, tensors, keys)
    except (TypeError, ValueError) as e:
        _reject_everywhere(state.comm, blocking)
        raise e from None
    return LowRankRequest(state, _rounds(state, work), work.keys)


class LowRankRequest:
    """A low-rank all-reduce in flight: its rounds (check, P and dense, Q) one after another.

    MPI matches calls on a communicator by the order they start in, so a round never
    starts when its predecessor happens to end: each later call on the same state first
    starts the next round of every earlier one (waiting for its current round), and
    `wait()` finishes the earlier calls, then this one. `test()` starts nothing.
    """

    def __init__(self, state: PowerSGDState, rounds: Iterator[tuple], keys: list):
        self._state, self._rounds, self.keys = state, rounds, keys
        self._waiting: list = []
        self._final = False  # the current round is the last: only local work follows
        self._done = False
        state.in_flight.append(self)
        self.step()

    def step(self) -> None:
        """Wait for the current round, then start the next one (or finish)."""
        if self._done:
            return
        try:
            for r in self._waiting:
                r.wait()
            requests, self._final = next(self._rounds)
            self._waiting = [r for r in requests if r is not None]
        except StopIteration:
            self._done, self._waiting = True, []
        except BaseException:
            self._done, self._waiting = True, []
            self._state.in_flight.remove(self)
            raise
        if self._done:
            self._state.in_flight.remove(self)

    def test(self) -> bool:
        """Whether the all-reduce has ended (then the tensors hold the result); advances
        zipcoll's calls, and ends the last round's local work, but starts no round."""
        if not self._done and self._final and all(r.test() for r in self._waiting):
            self.step()
        return self._done

    def wait(self) -> None:
        """Finish the earlier calls on the state, then this one."""
        for earlier in list(self._state.in_flight):
            while not earlier._done:
                earlier.step()
            if earlier is self:
                break


@dataclass
class _Item:
    """Matrices of one shape computed together (one matrix unless batched)."""

    keys: list
    arrays: list  # the caller's arrays, written in place at the end
    n: int
    m: int
    r: int


@dataclass
class _Work:
    xp: Any
    dtype: np.dtype
    items: list
    dense: list
    keys: list
    stats: tuple  # elements given, elements sent


def _prepare(state: PowerSGDState, tensors: Sequence[Any], keys: Sequence | None) -> _Work:
    """This rank's checks and the call's items; raises TypeError/ValueError before any data moves."""
    arrays = [_as_array(t) for t in tensors]
    if not arrays:
        raise ValueError("no tensors to all-reduce")
    keys = list(range(len(arrays))) if keys is None else list(keys)
    if len(keys) != len(arrays):
        raise ValueError(f"{len(keys)} keys for {len(arrays)} tensors")
    if len(set(keys)) != len(keys):
        raise ValueError("keys must be distinct")
    busy = {k for request in state.in_flight for k in request.keys}.intersection(keys)
    if busy:
        raise ValueError(f"keys {sorted(map(repr, busy))} are in a call still in flight")
    xps = {xp for xp, _ in arrays}
    dtypes = {a.dtype for _, a in arrays}
    if len(xps) > 1 or len(dtypes) > 1:
        raise TypeError(f"tensors of one kind and dtype in a call, not {sorted(map(str, dtypes))} "
                        f"on {len(xps)} kinds of device")
    (xp,), (dtype,) = xps, dtypes
    groups: dict[tuple, list] = {}  # (n, m) -> [(key, array)], in first-seen order (PyTorch's)
    dense, sent = [], 0
    for key, (_, a) in zip(keys, arrays):
        nm = matrix_shape(a.shape)
        if nm is not None and compressible(*nm, state.rank, state.min_compression_rate):
            groups.setdefault(nm, []).append((key, a))
            sent += sum(nm) * min(*nm, state.rank)
        else:
            dense.append(a)
            sent += a.size
    items = []
    for (n, m), members in groups.items():
        batches = [members] if state.batch_tensors_with_same_shape else [[k] for k in members]
        for batch in batches:
            items.append(_Item([k for k, _ in batch], [a for _, a in batch], n, m,
                               min(n, m, state.rank)))
    for item in items:
        for key in item.keys:
            held = state.qs.get(key)
            if held is not None and held.shape != (item.m, item.r):
                raise ValueError(f"key {key!r} held a matrix of {held.shape[0]} columns at "
                                 f"rank {held.shape[1]}; this call gives {item.n} x {item.m}")
    return _Work(xp, dtype, items, dense, keys, (sum(a.size for _, a in arrays), sent))


def _as_array(t: Any) -> tuple[Any, Any]:
    """(namespace, array) over the caller's memory: NumPy, CuPy, or DLPack (torch, ...)."""
    if isinstance(t, np.ndarray):
        a, xp = t, np
    elif type(t).__module__.startswith("cupy"):
        a, xp = t, _cupy()
    elif hasattr(t, "__dlpack__"):
        t = t.detach() if callable(getattr(t, "detach", None)) else t
        device = t.__dlpack_device__()[0]
        if device in (2, 13):  # kDLCUDA, kDLCUDAManaged
            try:
                xp = _cupy()
            except MissingDependencyError as e:
                raise TypeError(f"GPU tensors need CuPy: {e}") from None
            a = xp.from_dlpack(t)
        else:
            try:
                a, xp = np.from_dlpack(t), np
            except (BufferError, TypeError, RuntimeError) as e:
                raise TypeError(f"cannot read {type(t).__name__} as an array: {e}") from None
    else:
        raise TypeError(f"tensors must be NumPy, CuPy or DLPack arrays, not {type(t).__name__}")
    if a.dtype not in FLOATS:
        raise TypeError(f"tensors must be float16, float32 or float64, not {a.dtype}")
    if not a.flags.writeable:
        raise TypeError("tensors are averaged in place: a read-only array cannot be")
    return xp, a


def _reject_everywhere(comm: MPI.Intracomm, blocking: bool) -> None:
    """Join one all-reduce that this rank's plan rejects: every rank's call of this turn
    then fails (zipcoll's agreement), so no rank waits for this one. Non-blocking: it
    raises here at once, and its agreement goes on in this thread's later zipcoll calls."""
    start = _allreduce if blocking else _iallreduce
    try:
        start(np.zeros(0, object), op="sum", comm=comm, algorithm="ring")
    except (TypeError, ValueError, MismatchError):
        pass


def _rounds(state: PowerSGDState, work: _Work) -> Iterator[tuple]:
    """The call's rounds, each yielding the requests it started and whether it is the last."""
    xp, call = work.xp, dict(comm=state.comm, algorithm=state.algorithm,
                             topology=state.topology)
    if not state.checked.issuperset(work.keys):
        check = _check_buffer(state, work)
        yield [_iallreduce(MPI.IN_PLACE, check, op="max", comm=state.comm,
                           algorithm="ring")], False
        if check[0] != -check[1]:
            raise MismatchError("ranks gave the low-rank all-reduce different matrices "
                                "(shapes, dtype), settings or random generators; nothing "
                                "was sent")
        state.checked.update(work.keys)
    ms, ps, qs, p_flat, q_flat = _start_ps(state, work)
    dense = xp.concatenate([a.reshape(-1) for a in work.dense]) if work.dense else None
    dense_done = (_iallreduce(MPI.IN_PLACE, dense, op="mean", **call)
                  if dense is not None else None)  # beside P's rounds
    if work.items:
        yield [_iallreduce(MPI.IN_PLACE, p_flat, op="sum", codec=state.codec, **call)], False
        for m, p, q in zip(ms, ps, qs):
            orthogonalize(xp, p, state.orthogonalization_epsilon)
            _bmm(xp, m.transpose(0, 2, 1), p, q)
        yield [_iallreduce(MPI.IN_PLACE, q_flat, op="mean", codec=state.codec, **call),
               dense_done], True
        for item, m, p, q in zip(work.items, ms, ps, qs):
            _decompress(state, xp, item, m, p, q)
    else:
        yield [dense_done], True
    if dense is not None:
        start = 0
        for a in work.dense:
            a[...] = dense[start:start + a.size].reshape(a.shape)
            start += a.size
    state.numel_before += work.stats[0]
    state.numel_after += work.stats[1]


def _start_ps(state: PowerSGDState, work: _Work) -> tuple:
    """Each item's M (with its residual added), and P = M Q in one flat buffer."""
    xp, dtype = work.xp, work.dtype
    ms = [_with_residual(state, item, xp) for item in work.items]
    sizes = [(len(it.keys) * it.n * it.r, len(it.keys) * it.m * it.r) for it in work.items]
    p_flat = xp.empty(sum(s for s, _ in sizes), dtype)
    q_flat = xp.empty(sum(s for _, s in sizes), dtype)
    ps, qs, p0, q0 = [], [], 0, 0
    for item, (ps_n, qs_n) in zip(work.items, sizes):
        b = len(item.keys)
        ps.append(p_flat[p0:p0 + ps_n].reshape(b, item.n, item.r))
        qs.append(q_flat[q0:q0 + qs_n].reshape(b, item.m, item.r))
        p0, q0 = p0 + ps_n, q0 + qs_n
    fresh = [(item, q) for item, q in zip(work.items, qs)
             if not all(k in state.qs for k in item.keys)]
    if fresh:  # one seed a call, then every fresh Q in order (as PyTorch's hook)
        seed = int(state.rng.randint(1_000_000_000))
        draws = state.init(seed, [q.shape for _, q in fresh], np.dtype(dtype))
        for (_, q), drawn in zip(fresh, draws):
            q[...] = xp.asarray(drawn, dtype=dtype)
    for item, q in zip(work.items, qs):
        if all(k in state.qs for k in item.keys):
            for i, key in enumerate(item.keys):
                q[i] = xp.asarray(state.qs[key])
        orthogonalize(xp, q, state.orthogonalization_epsilon)
    for m, p, q in zip(ms, ps, qs):
        _bmm(xp, m, q, p)
    return ms, ps, qs, p_flat, q_flat


def _with_residual(state: PowerSGDState, item: _Item, xp: Any) -> Any:
    """The item's matrices (b x n x m), with error feedback last call's residuals added.

    Into a second array a key (`state.spare`, last call's residual array): the state
    changes only once the call has ended, and no new memory is touched each step.
    """
    matrices = [a.reshape(item.n, item.m) for a in item.arrays]
    if state.use_error_feedback:
        for i, key in enumerate(item.keys):
            held = state.residuals.get(key)
            if held is None or held.shape != (item.n, item.m):
                matrices[i] = xp.array(matrices[i])
                continue
            held = state.residuals[key] = xp.asarray(held)  # a loaded state's, on this device
            spare = state.spare.get(key)
            if spare is None or spare.shape != held.shape or type(spare) is not type(held):
                spare = xp.empty_like(held)
            matrices[i] = xp.add(held, matrices[i], out=spare)
    if len(matrices) == 1:
        return matrices[0][None]
    return xp.stack(matrices)


def _decompress(state: PowerSGDState, xp: Any, item: _Item, m: Any, p: Any, q: Any) -> None:
    """M ≈ P Qᵀ into the caller's arrays; residual = (M + residual) - P Qᵀ; keep Q."""
    for i, (key, a) in enumerate(zip(item.keys, item.arrays)):
        direct = a.flags.c_contiguous  # then reshape is a view: the product goes in place
        approx = a.reshape(item.n, item.m) if direct else xp.empty((item.n, item.m), a.dtype)
        xp.matmul(p[i], q[i].T, out=approx)
        if not direct:
            a[...] = approx.reshape(a.shape)
        if state.use_error_feedback:
            m[i] -= approx
            old = state.residuals.get(key)
            if len(item.keys) == 1 and old is not None and old.shape == m[i].shape:
                state.spare[key] = old  # the next call's M + residual goes there
            state.residuals[key] = m[i]
        if state.warm_start:
            state.qs[key] = q[i].copy()


def _bmm(xp: Any, a: Any, b: Any, out: Any) -> Any:
    """out[i] = a[i] @ b[i], one 2-D matmul a matrix: NumPy hands 2-D products of
    transposed views to BLAS, but computes some 3-D ones in its own loop (100x slower
    here for a 256 x 8 by 8 x 256 product)."""
    for i in range(a.shape[0]):
        xp.matmul(a[i], b[i], out=out[i])
    return out


def orthogonalize(xp: Any, batch: Any, epsilon: float = 0.0) -> None:
    """Orthonormal columns for each matrix of `batch` (b x n x r, r <= n), in place.

    Gram-Schmidt for r <= 2 and half precision (LAPACK has no float16), QR above, as
    PyTorch's PowerSGD hook chooses.
    """
    if batch.shape[2] <= 2 or batch.dtype == np.float16:
        gram_schmidt(xp, batch, epsilon)
    else:
        batch[...] = xp.linalg.qr(batch)[0]


def gram_schmidt(xp: Any, batch: Any, epsilon: float = 0.0) -> None:
    """Modified Gram-Schmidt on each matrix's columns, in place, each column divided by its
    norm + `epsilon`; a column of zeros stays zeros (divided by 1, not by 0)."""
    for i in range(batch.shape[2]):
        col = batch[:, :, i:i + 1]
        norm = xp.sqrt(xp.sum(col * col, axis=1, keepdims=True))
        norm = norm + epsilon if epsilon else norm
        col /= xp.where(norm == 0, 1, norm)  # 0 / 0 would be NaN (an epsilon can underflow)
        if i + 1 < batch.shape[2]:
            rest = batch[:, :, i + 1:]
            rest -= xp.sum(col * rest, axis=1, keepdims=True) * col


def _check_buffer(state: PowerSGDState, work: _Work) -> np.ndarray:
    """(digest, -digest) of what every rank must give alike (shapes, dtype, settings,
    generator): their maxima over the ranks are opposites only where every rank agrees."""
    text = repr(([tuple(a.shape) for it in work.items for a in it.arrays],
                 [tuple(a.shape) for a in work.dense], str(work.dtype), state._settings(),
                 repr(state.codec), state.algorithm))
    digest = zlib.crc32(state.rng.get_state()[1].tobytes(), zlib.crc32(text.encode()))
    return np.array([digest, -digest], np.int64)


def _host(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.array(a)


def _hashable(key: Any) -> Hashable:
    """A saved key as it was given: lists (what some loaders make of tuples) back to tuples."""
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


__all__ = ["LowRankRequest", "PowerSGDState", "allreduce", "gram_schmidt", "iallreduce",
           "normal_init", "orthogonalize"]

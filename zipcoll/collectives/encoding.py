"""A codec as the compressed schedules use it: seeds per encode site, error feedback per key.

A schedule names each place it encodes (its *site*: e.g. ``"ring/rs/3"``, the partial
sum of chunk 3 in the reduce-scatter). Stochastic codecs get a different random stream at
every (call, rank, site); with a `key`, each site keeps its own residual (error
feedback), so repeated calls on the same tensor cancel the compression bias.

Checkpoints: `FEEDBACK.state_dict()` is this rank's residuals as plain data (lists,
dicts, strings, numbers, NumPy arrays), `load_state_dict` puts them back in a fresh
process; each rank saves and loads its own.
"""
from __future__ import annotations

import json
import weakref
import zlib
from collections import OrderedDict
from typing import Any, Hashable

import numpy as np
from mpi4py import MPI

from zipcoll import settings
from zipcoll.codecs import Codec, ErrorFeedback, get_codec

STATE_FORMAT = "zipcoll.feedback/1"


class Identity(int):
    """An object's id used as a key: meaningful in this process only, so never saved."""


class FeedbackStore:
    """Error-feedback residuals of every key, for every encode site that key has used.

    Memory: per live key, one array the size of what this rank encodes for that key in
    one call (about the message size for ring, tree and two-phase; the whole message
    for allgather). A key whose shape, dtype, codec or algorithm changes starts over.
    A key not used in the last `idle_calls` look-ups (ZIPCOLL_FEEDBACK_IDLE_CALLS,
    default 10000: far more tensors than a model has) is dropped, so the store holds
    memory only for keys still in use. `reset(key)` frees one key, `reset()` all.

    An ErrorFeedback object a caller passed as the codec (`adopt`) holds its key's
    residuals itself, so its own reset(), keys() and nbytes() see what the calls stored;
    the store keeps it only weakly (its residuals go with it).
    """

    def __init__(self, idle_calls: int | None = None) -> None:
        self._idle_calls = idle_calls  # None: the setting, read at each look-up
        self._by_key: OrderedDict[Hashable, tuple[tuple, ErrorFeedback, int]] = OrderedDict()
        self._clock = 0
        self._gone: list = []  # keys whose owner died, dropped at the next look-up
        self._owners: dict[Hashable, weakref.ref] = {}  # caller's key -> its ErrorFeedback

    def adopt(self, key: Hashable, owner: ErrorFeedback) -> None:
        """Keep the residuals of `key` in the caller's own `owner` from now on."""
        self._drop_gone()  # a dead object's key, which a new object's id may reuse, goes first
        self._owners[key] = weakref.ref(owner)

    @property
    def idle_calls(self) -> int:
        """Look-ups a key may go unused before it is dropped."""
        held = self._idle_calls
        return settings.get().feedback_idle_calls if held is None else held

    def forget_later(self, key: Hashable) -> None:
        """Drop `key`'s residuals at the next use of the store: safe from a finalizer, which
        may run in the middle of any other method (a list append is atomic)."""
        self._gone.append(key)

    def _drop_gone(self) -> None:
        while self._gone:
            key = self._gone.pop()
            self.reset(key)
            self._owners.pop(key, None)

    def feedback(self, key: Hashable, codec: Codec, context: tuple) -> ErrorFeedback:
        """The ErrorFeedback holding `key`'s residuals, fresh if the context changed."""
        self._drop_gone()
        self._clock += 1
        held = self._by_key.pop(key, None)
        feedback = None if held is None or held[0] != (codec, context) else _live(held[1])
        kept = None if feedback is None else held[1]
        if feedback is None:  # new, or its context changed: start over
            feedback = self._owned(key)
            if feedback is None:
                feedback = kept = ErrorFeedback(codec)
            else:
                feedback.reset()
                kept = weakref.ref(feedback)
        self._by_key[key] = ((codec, context), kept, self._clock)  # most recent last
        self._drop_idle()
        return feedback

    def _owned(self, stored: Hashable) -> ErrorFeedback | None:
        """The caller's ErrorFeedback for a stored (key, level), unless another level of the
        key holds it already."""
        ref = self._owners.get(_user_key(stored))
        owner = None if ref is None else ref()
        if owner is None or any(_live(held[1]) is owner for held in self._by_key.values()):
            return None
        return owner

    def _drop_idle(self) -> None:
        while self._by_key:
            oldest = next(iter(self._by_key.values()))
            if oldest[2] >= self._clock - self.idle_calls:
                return
            self._by_key.popitem(last=False)

    def reset(self, key: Hashable = ...) -> None:
        """Free the residuals of `key` (every level of it), or of every key without one."""
        stored = list(self._by_key) if key is ... else [
            k for k in self._by_key if k == key or _names(k, key)]
        for held in stored:
            _, kept, _ = self._by_key.pop(held)
            if isinstance(kept, weakref.ref) and kept() is not None:
                kept().reset()  # a caller's object: its residuals are these

    def keys(self) -> list:
        """The keys that hold residuals (as given to allreduce)."""
        self._drop_gone()
        return list(dict.fromkeys(_user_key(k) for k in self._by_key))

    def nbytes(self) -> int:
        """Bytes held by all residuals."""
        self._drop_gone()
        return sum(_live(kept).nbytes() for _, kept, _ in self._by_key.values()
                   if _live(kept) is not None)

    def state_dict(self, keys: list | None = None) -> dict:
        """This rank's residuals (of `keys`, default all) as plain data, for a checkpoint.

        Each entry: the caller's key, the level, the codec's config (JSON), the call's
        context (algorithm, count, dtype, ranks, level) and the residual of every encode
        site, copied to host memory. Keys are what allreduce was given, and must be
        made of strings, numbers, None and tuples to be saved; keys of an ErrorFeedback
        object's identity are not saved (they mean nothing in another process).
        """
        self._drop_gone()
        entries = []
        for stored, ((codec, context), kept, _) in self._by_key.items():
            user_key, level = stored
            feedback = _live(kept)
            if (keys is not None and user_key not in keys) or not _portable(user_key) or \
                    feedback is None:
                continue
            entries.append({"key": user_key, "level": level,
                            "codec": json.dumps(codec.get_config(), sort_keys=True),
                            "context": list(context),
                            "residuals": {site: _host_copy(r)
                                          for site, r in feedback.residuals().items()}})
        world = MPI.COMM_WORLD
        return {"format": STATE_FORMAT, "rank": world.Get_rank(), "size": world.Get_size(),
                "entries": entries}

    def load_state_dict(self, state: dict, rename: Any = None) -> None:
        """Hold the residuals of `state` (from `state_dict`, this rank's own) from now on;
        `rename(key)`: the key to file each entry under (default: as saved). They are used
        by the next call whose key, codec and context match, as if this process had made
        the calls that left them."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a zipcoll feedback state ({state.get('format')!r})")
        world = MPI.COMM_WORLD
        if (state["rank"], state["size"]) != (world.Get_rank(), world.Get_size()):
            raise ValueError(f"residuals of rank {state['rank']} of {state['size']} loaded on "
                             f"rank {world.Get_rank()} of {world.Get_size()}: residuals are "
                             "per rank, each rank loads its own")
        self._drop_gone()
        for entry in state["entries"]:
            key = as_key(entry["key"]) if rename is None else rename(as_key(entry["key"]))
            codec = get_codec(json.loads(entry["codec"]))
            feedback = ErrorFeedback(codec)
            feedback.load_residuals({site: np.array(r) for site, r in entry["residuals"].items()})
            self._clock += 1
            self._by_key.pop((key, entry["level"]), None)
            self._by_key[(key, entry["level"])] = ((codec, as_key(entry["context"])), feedback,
                                                   self._clock)


def _live(kept: Any) -> ErrorFeedback | None:
    """A stored ErrorFeedback: the store's own, or a caller's (None once it is gone)."""
    return kept() if isinstance(kept, weakref.ref) else kept


def as_key(value: Any) -> Hashable:
    """A saved key as it was given: lists (as some formats return tuples) back to tuples."""
    return tuple(as_key(v) for v in value) if isinstance(value, (list, tuple)) else value


def _portable(key: Any) -> bool:
    """Whether a key means the same in another process: strings, numbers, None, tuples."""
    if isinstance(key, tuple):
        return all(_portable(k) for k in key)
    return not isinstance(key, Identity) and (key is None or isinstance(key, (str, int, float)))


def _host_copy(residual: Any) -> np.ndarray:
    """A residual's values in host memory, owned by the copy."""
    get = getattr(residual, "get", None)  # CuPy
    return np.array(get() if callable(get) else residual)


def _names(stored: Hashable, key: Hashable) -> bool:
    """Whether a stored (key, level) entry belongs to the caller's `key`."""
    return isinstance(stored, tuple) and len(stored) == 2 and stored[0] == key


def _user_key(stored: Hashable) -> Hashable:
    return stored[0] if isinstance(stored, tuple) and len(stored) == 2 else stored


FEEDBACK = FeedbackStore()


class Encoder:
    """One call's codec at one level: encode at named sites, decode, size payloads."""

    def __init__(self, codec: Codec, *, rank: int, call: int, key: Hashable = None,
                 context: tuple = (), prefix: str = ""):
        self.codec = codec
        self._rank = rank
        self._call = call
        self._prefix = prefix
        self._feedback = None if key is None else FEEDBACK.feedback(key, codec, context)

    def encode(self, x: Any, site: str, out: Any = None) -> Any:
        """Payload of `x` at `site` (with that site's residual added, under a key)."""
        site = self._prefix + site
        seed = self._seed(site) if self.codec.stochastic else None
        if self._feedback is None:
            return self.codec.encode(x, out=out, seed=seed)
        return self._feedback.encode(x, out=out, seed=seed, key=site)

    def _seed(self, site: str) -> int:
        words = [self._call, self._rank, zlib.crc32(site.encode())]
        return int(np.random.SeedSequence(words).generate_state(2, np.uint64)[0] >> 1)

    def decode(self, payload: Any, out: Any) -> None:
        """out <- decode(payload)."""
        self.codec.decode(payload, out=out)

    def decode_add(self, payload: Any, acc: Any) -> None:
        """acc += decode(payload)."""
        self.codec.decode_add(payload, acc)

    def wire_bytes(self, n: int, dtype: Any) -> int:
        """Payload bytes of `n` elements (the most, for variable-size codecs)."""
        return self.codec.wire_bytes(n, np.dtype(dtype).name)

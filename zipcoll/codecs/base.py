"""The codec contract, the wire header, and the registry.

A codec maps a contiguous 1-D float16/float32/float64 array to one contiguous ``uint8``
array, its *payload*, and back. The payload is self-describing: a 32-byte header
(magic ``b"ZC"``, format version, codec tag, input dtype, flags, element count and two
codec parameters, all little-endian), then the codec's sections (scales, packed codes,
indices, values), each starting at a multiple of 8 bytes. Receivers need only the bytes:
``decode`` checks the header against the codec and the payload's length against the
header, and raises ``ValueError`` before reading anything it does not have.

Codecs register themselves by defining ``codec_id`` (numcodecs style); ``get_codec``
builds one from an instance, a config dict or a short string such as ``"int4:block=128"``.
``Codec`` is the contract; ``WireCodec`` adds the payload format above, and its tag byte
comes from the one table ``WIRE_TAGS``: a new codec with a format of its own is one file
plus one line there.
"""
from __future__ import annotations

import abc
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from .backend import Backend, backend_of

HEADER_BYTES = 32
MAGIC = 0x435A  # b"ZC" little-endian
VERSION = 2  # 2: +-Inf kept by the block codecs (marked blocks), any width packed
FLAG_LOST_NONFINITE = 1  # a NaN/Inf was not sent: unsent elements decode to NaN

_HEADER = np.dtype([("magic", "<u2"), ("version", "u1"), ("tag", "u1"), ("dtype", "u1"),
                    ("flags", "u1"), ("reserved", "<u2"), ("n", "<u8"), ("p0", "<u8"),
                    ("p1", "<u8")])
_DTYPES = {1: np.dtype(np.float16), 2: np.dtype(np.float32), 3: np.dtype(np.float64)}
_DTYPE_CODES = {dt: code for code, dt in _DTYPES.items()}

#: what ``encode`` returns and ``decode`` takes: a 1-D uint8 array (NumPy, or CuPy on a GPU)
Payload = Any

#: the tag byte of each codec's payloads. A tag is never reused, so a payload of a codec
#: that was removed cannot be read as another's; a new codec takes an unused number.
WIRE_TAGS: dict[str, int] = {
    "fp16": 1, "bf16": 2, "none": 3,
    "int8": 10, "int4": 11, "int2": 12, "qsgd": 13, "terngrad": 14, "sign": 15,
    "topk": 20, "randomk": 21, "threshold": 22,
}

_REGISTRY: dict[str, type["Codec"]] = {}


class UnknownCodecError(ValueError):
    """No codec is registered under this id."""

    def __init__(self, codec_id):
        super().__init__(f"unknown codec {codec_id!r}; known: {', '.join(list_codecs())}")
        self.codec_id = codec_id


@dataclass(frozen=True)
class Header:
    """The parsed header of a payload."""

    tag: int
    dtype: np.dtype
    flags: int
    n: int
    p0: int
    p1: int


def align8(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of 8, so the next section can be viewed typed."""
    return (nbytes + 7) & ~7


def write_header(payload, header: Header, bk: Backend) -> None:
    """Write ``header`` into the first ``HEADER_BYTES`` of ``payload``."""
    h = np.zeros(1, _HEADER)
    h[0] = (MAGIC, VERSION, header.tag, _DTYPE_CODES[header.dtype], header.flags, 0,
            header.n, header.p0, header.p1)
    payload[:HEADER_BYTES] = bk.xp.asarray(h.view(np.uint8))


def read_header(payload, bk: Backend) -> Header:
    """Parse and check the header of ``payload``; ``ValueError`` if it is not one."""
    if payload.dtype != np.uint8 or payload.ndim != 1:
        raise ValueError(f"a payload is a 1-D uint8 array, got {payload.dtype} {payload.shape}")
    if payload.size < HEADER_BYTES:
        raise ValueError(f"payload of {payload.size} bytes is shorter than its header")
    h = bk.to_host(payload[:HEADER_BYTES]).copy().view(_HEADER)[0]
    if int(h["magic"]) != MAGIC or int(h["version"]) != VERSION:
        raise ValueError("not a zipcoll payload (bad magic or version)")
    if int(h["dtype"]) not in _DTYPES or int(h["n"]) >= 1 << 48:
        raise ValueError("corrupt payload header (dtype or element count)")
    return Header(int(h["tag"]), _DTYPES[int(h["dtype"])], int(h["flags"]), int(h["n"]),
                  int(h["p0"]), int(h["p1"]))


def check_float_array(x, what: str) -> None:
    """``TypeError`` unless ``x`` is float16/32/64; ``ValueError`` unless 1-D contiguous."""
    if x.dtype not in _DTYPE_CODES:
        raise TypeError(f"{what}: expected float16, float32 or float64, got {x.dtype}")
    if x.ndim != 1 or not x.flags.c_contiguous:
        raise ValueError(f"{what}: expected a contiguous 1-D array, got shape {x.shape}")


def register_codec(cls: type["Codec"]) -> type["Codec"]:
    """Add a codec class to the registry (done by ``Codec.__init_subclass__``)."""
    owner = _REGISTRY.get(cls.codec_id)
    if owner is not None and owner is not cls:
        raise ValueError(f"codec id {cls.codec_id!r} of {cls.__name__} already used by "
                         f"{owner.__name__}")
    if issubclass(cls, WireCodec):
        tag = WIRE_TAGS.get(cls.codec_id)
        if tag is None:
            raise ValueError(f"codec {cls.codec_id!r} has a wire format but no tag: add it to "
                             f"zipcoll.codecs.base.WIRE_TAGS")
        if not 0 <= tag < 256 or list(WIRE_TAGS.values()).count(tag) > 1:
            raise ValueError(f"wire tag {tag} of codec {cls.codec_id!r} is not one unique byte")
    _REGISTRY[cls.codec_id] = cls
    return cls


def list_codecs() -> list[str]:
    """The ids of the registered codecs, sorted."""
    return sorted(_REGISTRY)


def parse_spec(spec: str) -> dict:
    """Config dict of a command-line spec: ``"topk:ratio=0.01,values=float16"``.

    Values are read as JSON where they parse (numbers, true/false/null), else as strings;
    ``"feedback:int8:block=128"`` wraps the spec after ``feedback:``, and
    ``"feedback:decay=0.5:sign"`` sets the feedback's decay.
    """
    codec_id, _, rest = spec.strip().partition(":")
    if codec_id == "feedback":
        decay = None
        if rest.startswith("decay="):
            setting, _, rest = rest.partition(":")
            decay = parse_spec(f"feedback_decay:{setting}")["decay"]
        if not rest.strip():
            raise ValueError(f"codec spec {spec!r}: feedback wraps another codec; write "
                             "'feedback:X' (error feedback around codec X), e.g. 'feedback:sign'")
        return {"id": "feedback", "codec": rest} | ({} if decay is None else {"decay": decay})
    config: dict[str, Any] = {"id": codec_id}
    for item in filter(None, rest.replace(":", ",").split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"codec spec {spec!r}: expected key=value, got {item!r}")
        try:
            config[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            config[key.strip()] = value.strip()
    return config


def _spec_value(value: Any) -> str:
    """A setting as ``parse_spec`` reads it back: strings bare, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def get_codec(spec) -> "Codec":
    """A codec from an instance, a config dict (``{"id": "topk", "ratio": 0.01}``) or a string."""
    if isinstance(spec, Codec):
        return spec
    if isinstance(spec, str):
        spec = parse_spec(spec)
    if not isinstance(spec, Mapping):
        raise TypeError(f"a codec spec is a Codec, dict or str, got {type(spec).__name__}")
    cls = _REGISTRY.get(spec.get("id"))
    if cls is None:
        raise UnknownCodecError(spec.get("id"))
    return cls.from_config(spec)


class Codec(abc.ABC):
    """The contract: a 1-D float array <-> one ``uint8`` payload. Subclasses set ``codec_id``.

    Properties the schedules may ask: ``lossless`` (decode(encode(x)) == x), ``unbiased``
    (E[decode(encode(x))] == x), ``stochastic`` (uses random numbers: takes ``seed``),
    ``fixed_size`` (``wire_bytes(n)`` is the exact payload size for every input of n
    elements), ``sparse`` (sends a subset of the elements; the rest decode to 0).
    ``feedback_decay``: what ``ErrorFeedback`` keeps of a residual from one step to the
    next by default (1: all of it). ``named_settings``: the settings a codec is made from
    when nothing else is given (``threshold``'s tau, ``topk``'s ratio or k); its spec
    names them whenever they are set.
    """

    codec_id: ClassVar[str]
    lossless: ClassVar[bool] = False
    unbiased: ClassVar[bool] = False
    stochastic: ClassVar[bool] = False
    fixed_size: ClassVar[bool] = True
    sparse: ClassVar[bool] = False
    feedback_decay: ClassVar[float] = 1.0
    named_settings: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "codec_id" in cls.__dict__:
            register_codec(cls)

    # -- configuration -----------------------------------------------------------------
    def get_config(self) -> dict:
        """The id and the public attributes: JSON-serialisable, ``from_config`` inverts it."""
        public = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        return {"id": self.codec_id, **public}

    @classmethod
    def from_config(cls, config: Mapping) -> "Codec":
        """The codec of ``config`` (the inverse of ``get_config``)."""
        config = dict(config)
        codec_id = config.pop("id", cls.codec_id)
        if codec_id != cls.codec_id:
            raise ValueError(f"config of codec {codec_id!r} given to {cls.codec_id!r}")
        return cls(**config)

    def spec(self) -> str:
        """The short spec string: the id, the ``named_settings`` that are set, then each other
        setting that differs from a codec made from those alone; ``get_codec(c.spec()) == c``.

        >>> get_codec({"id": "topk", "ratio": 0.01}).spec(), get_codec("int8:block=256").spec()
        ('topk:ratio=0.01', 'int8')
        """
        config = self.get_config()
        codec_id = config.pop("id")
        plain = type(self).from_config({k: config[k] for k in self.named_settings}).get_config()
        items = [f"{k}={_spec_value(v)}" for k, v in sorted(config.items())
                 if (v is not None if k in self.named_settings else plain.get(k, ...) != v)]
        return codec_id + (":" + ",".join(items) if items else "")

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.get_config() == other.get_config()

    def __hash__(self) -> int:
        return hash(json.dumps(self.get_config(), sort_keys=True))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items() if k != "id")
        return f"{type(self).__name__}({args})"

    # -- the contract ------------------------------------------------------------------
    @abc.abstractmethod
    def encode(self, x, out=None, seed: int | None = None) -> Payload:
        """Payload of 1-D float array ``x``; into ``out`` (uint8, ``wire_bytes`` long) if given.

        ``seed`` overrides the codec's random stream for this call (stochastic codecs).
        """

    @abc.abstractmethod
    def decode(self, payload: Payload, out=None):
        """The array that ``payload`` encodes, written into ``out`` if given."""

    @abc.abstractmethod
    def decode_add(self, payload: Payload, acc):
        """``acc += decode(payload)`` without a temporary: the reduce step's hot path."""

    @abc.abstractmethod
    def wire_bytes(self, n: int, dtype="float32") -> int:
        """Payload bytes for ``n`` elements of ``dtype`` (the maximum if not ``fixed_size``)."""

    @abc.abstractmethod
    def error_bound(self, x) -> np.ndarray:
        """Largest |decode(encode(x)) - x| per element (float64, host); inf where unbounded."""

    def encode_with_residual(self, x, residual, out=None, seed: int | None = None) -> Payload:
        """Payload of ``t = x + residual``; ``residual`` becomes ``t - decode(payload)``.

        The step of error feedback. ``residual`` (same shape and dtype as ``x``) is
        updated in place. Codecs that can fuse it into their encode pass override this
        (no second pass to decode); this is the plain way: encode, then decode.
        """
        target = x + residual
        payload = self.encode(target, out=out, seed=seed)
        self.decode(payload, out=residual)
        residual *= -1
        with np.errstate(invalid="ignore"):  # Inf - Inf: a NaN residual, as it should be
            residual += target  # target - decoded, in place
        return payload

    def encode_feedback(self, x, residual, out=None, seed: int | None = None) -> tuple[Payload, bool]:
        """``encode_with_residual``, and whether the new residual is all finite (error
        feedback keeps it only then). Codecs that see every residual element while
        encoding tell without a second pass over it."""
        payload = self.encode_with_residual(x, residual, out=out, seed=seed)
        bk, residual = backend_of(residual)
        return payload, count_nonfinite(bk.xp, residual) == 0


class WireCodec(Codec):
    """A codec with a payload format of its own: the header above, then its sections.

    Subclasses write ``_encode``, ``_decode`` and ``_payload_bytes``; the checks of the
    input, of the header and of the payload's length are done here, once.
    """

    @property
    def wire_tag(self) -> int:
        """The tag byte of this codec's payloads (``WIRE_TAGS``)."""
        return WIRE_TAGS[self.codec_id]

    def encode(self, x, out=None, seed: int | None = None) -> Payload:
        """Payload of 1-D float array ``x``; into ``out`` (uint8, ``wire_bytes`` long) if given.

        ``seed`` overrides the codec's random stream for this call (stochastic codecs).
        """
        bk, x = backend_of(x)
        check_float_array(x, f"{self.codec_id}.encode")
        if out is not None:
            out = self._as(bk, out)
        return self._encode(bk, x, out, self._call_seed(seed))

    def decode(self, payload: Payload, out=None):
        """The array that ``payload`` encodes, written into ``out`` if given."""
        bk, p, h = self._open(payload, out)
        if out is None:
            out = bk.xp.empty(h.n, h.dtype)
        else:
            out = self._as(bk, out)
        self._decode_checked(bk, h, p, out, accumulate=False)
        return out

    def decode_add(self, payload: Payload, acc):
        """``acc += decode(payload)`` without a temporary: the reduce step's hot path."""
        bk, p, h = self._open(payload, acc)
        acc = self._as(bk, acc)
        self._decode_checked(bk, h, p, acc, accumulate=True)
        return acc

    # -- for subclasses ----------------------------------------------------------------
    @abc.abstractmethod
    def _encode(self, bk: Backend, x, out, seed: int):
        """Write the payload of ``x`` (checked) into ``out`` or a new array and return it."""

    @abc.abstractmethod
    def _decode(self, bk: Backend, h: Header, payload, out, accumulate: bool) -> None:
        """Decode ``payload`` (header checked) into float32/float64 ``out`` (``+=`` if accumulate)."""

    @abc.abstractmethod
    def _payload_bytes(self, h: Header) -> int:
        """Exact payload length that header ``h`` announces; checked before decoding."""

    def _call_seed(self, seed: int | None) -> int:
        """Seed of this call's random stream: the override, else the next of the codec's."""
        if not self.stochastic:
            return 0
        if seed is not None:
            return int(seed) & 0x7FFFFFFFFFFFFFFF
        if getattr(self, "_rng", None) is None:
            self._rng = np.random.default_rng(getattr(self, "seed", None))
        return int(self._rng.integers(0, 1 << 63))

    def _new_payload(self, bk: Backend, x, nbytes: int, out, p0=0, p1=0, flags=0):
        """A payload of ``nbytes`` (a view of ``out`` if given) with its header written."""
        if out is None:
            out = bk.xp.empty(nbytes, np.uint8)
        elif out.dtype != np.uint8 or out.ndim != 1 or out.size < nbytes:
            raise ValueError(f"out must be a 1-D uint8 array of at least {nbytes} bytes")
        payload = out[:nbytes]
        write_header(payload, Header(self.wire_tag, x.dtype, flags, x.size, p0, p1), bk)
        return payload

    @staticmethod
    def _as(bk: Backend, a):
        """``a`` as an array of ``bk``'s namespace (no copy where it already is one)."""
        other, a = backend_of(a)
        return a if other.xp is bk.xp else bk.xp.asarray(other.to_host(a))

    def _open(self, payload, target):
        """Backend (of ``target`` if given), payload as its array, and the checked header."""
        bk, _ = backend_of(payload if target is None else target)
        p = self._as(bk, payload)
        h = read_header(p, bk)
        if h.tag != self.wire_tag:
            owner = next((i for i, tag in WIRE_TAGS.items() if tag == h.tag), h.tag)
            raise ValueError(f"payload of codec {owner!r} given to {self.codec_id!r}")
        expected = self._payload_bytes(h)
        if p.size != expected:
            raise ValueError(f"{self.codec_id} payload of {p.size} bytes, header says {expected}")
        return bk, p, h

    def _decode_checked(self, bk: Backend, h: Header, p, out, accumulate: bool) -> None:
        """Check ``out`` against the header; float16 goes through a float32 temporary."""
        if out.ndim != 1 or out.size != h.n or not out.flags.c_contiguous:
            raise ValueError(f"output must be contiguous 1-D of {h.n} elements, got {out.shape}")
        check_float_array(out, f"{self.codec_id}.decode")
        if out.dtype != np.float16:  # the CPU kernels have no float16
            return self._decode(bk, h, p, out, accumulate)
        tmp = bk.xp.zeros(h.n, np.float32)
        self._decode(bk, h, p, tmp, False)
        if accumulate:
            out += tmp
        else:
            out[...] = tmp


def kernel_input(bk: Backend, x):
    """``x`` in a dtype the kernels take: float16 widens to float32 (exactly)."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def eps_of(dtype) -> float:
    """Relative rounding slack of a result in ``dtype`` computed through float32."""
    return float(max(np.finfo(dtype).eps, np.finfo(np.float32).eps))


def overflow_at(maxexp: int, nmant: int) -> float:
    """The smallest |x| that rounds to +-Inf in a binary float format with ``maxexp``
    and ``nmant`` (NumPy's ``finfo`` names): its largest value plus half an ulp, where
    round-to-nearest-even goes up (the largest value's last bit is odd)."""
    return 2.0**maxexp - 2.0**(maxexp - nmant - 2)


def overflow_of(dtype) -> float:
    """``overflow_at`` of a NumPy float dtype (Inf for float64: nothing finite rounds past it)."""
    info = np.finfo(dtype)
    return math.inf if info.bits == 64 else overflow_at(info.maxexp, info.nmant)


def finite_as_float32(x) -> np.ndarray:
    """Where ``x`` stays finite cast to float32 (a float64 |x| at float32's overflow is not):
    what the block codecs code as finite."""
    with np.errstate(invalid="ignore"):
        return np.abs(np.asarray(x, dtype=np.float64)) < overflow_of(np.float32)


def half_subnormal(dtype) -> float:
    """Half the smallest subnormal of ``dtype``: the most rounding into it moves a tiny value."""
    return float(np.finfo(dtype).smallest_subnormal) / 2


def cpu_kernels():
    """The CPU kernel module (imported on first use, as the backends do)."""
    from .kernels import cpu

    return cpu


def count_nonfinite(xp, a) -> int:
    """Number of NaN/Inf elements of ``a``: one pass and no temporary on the host."""
    if isinstance(a, np.ndarray) and a.dtype != np.float16:
        return int(cpu_kernels().count_nonfinite(a))
    return int(a.size - xp.count_nonzero(xp.isfinite(a)))

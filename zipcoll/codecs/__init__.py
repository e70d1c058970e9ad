"""zipcoll.codecs: a 1-D float array <-> one compact ``uint8`` wire message.

    >>> from zipcoll.codecs import get_codec
    >>> codec = get_codec("int8")                       # or {"id": "int8", "block": 256}
    >>> payload = codec.encode(x)                       # uint8, codec.wire_bytes(x.size) long
    >>> codec.decode_add(payload, acc)                  # acc += decode(payload)

Codecs: ``none``, ``fp16``, ``bf16``, ``int8``, ``int4``, ``int2``, ``qsgd``, ``terngrad``,
``sign``, ``topk``, ``randomk``, ``threshold``, and ``feedback`` (``ErrorFeedback``).
No MPI here: the collectives move the payloads.

Adding a codec: one module in this package defining a ``WireCodec`` subclass with a
``codec_id`` (it registers itself: every module here is imported below), and its tag
in ``base.WIRE_TAGS``.
"""
import importlib as _importlib
import pkgutil as _pkgutil

from .base import (FLAG_LOST_NONFINITE, HEADER_BYTES, WIRE_TAGS, Codec, Header, Payload,
                   UnknownCodecError, WireCodec, get_codec, list_codecs, parse_spec, read_header,
                   register_codec)
from .cast import BF16, FP16, Raw
from .feedback import ErrorFeedback
from .quantize import QSGD, BlockQuantizer, Int2, Int4, Int8, TernGrad
from .sign import Sign
from .sparsify import RandomK, Threshold, TopK

__all__ = [
    "Codec", "WireCodec", "WIRE_TAGS", "Header", "Payload", "UnknownCodecError", "get_codec", "list_codecs", "parse_spec",
    "read_header", "register_codec", "HEADER_BYTES", "FLAG_LOST_NONFINITE",
    "Raw", "FP16", "BF16", "BlockQuantizer", "Int8", "Int4", "Int2", "QSGD", "TernGrad",
    "Sign", "TopK", "RandomK", "Threshold", "ErrorFeedback",
]

for _module in _pkgutil.iter_modules(__path__):  # each codec module registers its codecs
    _importlib.import_module(f"{__name__}.{_module.name}")

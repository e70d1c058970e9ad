"""Every codec's Numba kernels compile once: a second process loads them from the disk cache.

For each codec, two fresh processes run the same encode / decode / decode_add / error
feedback calls with one NUMBA_CACHE_DIR (a temporary directory shared by this module).
The second must compile nothing (numba's "numba:compile" event, which fires only when a
function is compiled, not when it is loaded from the cache), must load something from
the cache (else the check says nothing), and must leave the cache directory as it was
(no new entry, no index rewritten). Serial pytest; the children are this file run as a
script.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# one codec spec a codec; "feedback" wraps a block codec, whose feedback kernel it runs
SPECS = {"bf16": "bf16", "feedback": {"id": "feedback", "codec": "int4"}, "fp16": "fp16",
         "int2": "int2", "int4": "int4", "int8": "int8", "none": "none", "qsgd": "qsgd",
         "randomk": "randomk:ratio=0.01", "sign": "sign", "terngrad": "terngrad",
         "threshold": "threshold:tau=1.5", "topk": "topk:ratio=0.01"}
# codecs whose calls run no Numba kernel at all: nothing to load either
NO_KERNELS = {"none"}

pytestmark = pytest.mark.timeout(900)


def test_every_codec_is_covered():
    sys.path.insert(0, str(REPO))
    try:
        import zipcoll
        assert sorted(SPECS) == sorted(zipcoll.list_codecs())
    finally:
        sys.path.remove(str(REPO))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("numba-cache")


def run_codec(spec, cache_dir: Path) -> dict:
    """Run `spec`'s calls in a fresh process; what it compiled and loaded."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("NUMBA_DISABLE_JIT", None)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    res = subprocess.run([sys.executable, __file__, json.dumps(spec)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.splitlines()[-1])


def listing(cache_dir: Path) -> dict:
    """Every file of the cache directory: its size and modification time."""
    return {str(p.relative_to(cache_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(cache_dir.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_second_process_compiles_nothing(name, cache_dir):
    first = run_codec(SPECS[name], cache_dir)
    before = listing(cache_dir)
    second = run_codec(SPECS[name], cache_dir)
    assert second["compiled"] == [], f"{name}: the second process compiled {second['compiled']}"
    assert listing(cache_dir) == before, f"{name}: the second process changed the cache"
    if name not in NO_KERNELS:
        assert first["compiled"] or first["loaded"], f"{name}: the first process ran no kernel"
        assert second["loaded"] > 0, f"{name}: the second process loaded nothing from the cache"


# --- the child: this file run as a script ------------------------------------------

def _child(spec) -> None:
    """Encode, decode, decode_add and encode with a residual, float32 on both kernel
    paths (serial and parallel) and float64; print what numba compiled and loaded."""
    import gc

    from numba.core import event
    from numba.core.dispatcher import Dispatcher

    compiled = []

    class Compiles(event.Listener):
        def on_start(self, ev):
            dispatcher = (ev.data or {}).get("dispatcher")
            compiled.append(getattr(getattr(dispatcher, "py_func", None), "__qualname__",
                                    repr(dispatcher)))

        def on_end(self, ev):
            pass

    event.register("numba:compile", Compiles())
    import numpy as np

    import zipcoll
    from zipcoll.codecs.kernels.cpu import PARALLEL_MIN

    codec = zipcoll.get_codec(spec)
    rng = np.random.default_rng(0)
    for dtype, n in ((np.float32, 1000), (np.float32, PARALLEL_MIN), (np.float64, 1000)):
        x = rng.standard_normal(n).astype(dtype)
        if codec.codec_id == "feedback":  # a key a shape: the second call adds a residual
            codec.encode(x, key=(x.dtype.str, n))
            p = codec.encode(x, key=(x.dtype.str, n))
        else:
            p = codec.encode(x)
        codec.decode(p)
        codec.decode_add(p, np.zeros_like(x))
        if not codec.lossless and codec.codec_id != "feedback":
            codec.encode_with_residual(x, np.zeros_like(x))
    loaded = sum(sum(o.stats.cache_hits.values()) for o in gc.get_objects()
                 if isinstance(o, Dispatcher) and o._cache is not None)
    print(json.dumps({"compiled": compiled, "loaded": loaded}))


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))

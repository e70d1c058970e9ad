"""Every codec's Numba kernels compile once: a second process loads them from the disk cache.

Two fresh processes run every codec's encode / decode / decode_add / error feedback
calls, one codec after another, on the cache the test suite itself uses (NUMBA_CACHE_DIR
if set, else Numba's `__pycache__` beside the kernels: what earlier tests compiled is
loaded, the rest compiled). The second must compile nothing for any codec (numba's
"numba:compile" event, which fires only when a function is compiled, not when it is
loaded from the cache), must load something from the cache for each codec that has
kernels (else the check says nothing), and must leave the cache's files as they were (no
new entry, no index rewritten). Serial pytest; the children are this file run as a script.
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


def run_codecs(specs: dict) -> dict:
    """Run every codec's calls in one fresh process; per codec, what it compiled and loaded."""
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("NUMBA_DISABLE_JIT", None)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    res = subprocess.run([sys.executable, __file__, json.dumps(specs)], env=env,
                         capture_output=True, text=True, timeout=800)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.splitlines()[-1])


def cache_files() -> dict:
    """Every file of Numba's caches of zipcoll's kernels: its size and modification time."""
    root = Path(os.environ["NUMBA_CACHE_DIR"]) if os.environ.get("NUMBA_CACHE_DIR") else REPO
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns)
            for pattern in ("*.nbi", "*.nbc") for p in sorted(root.rglob(pattern))}


@pytest.fixture(scope="module")
def two_runs() -> tuple[dict, dict, dict, dict]:
    """(first run, cache files after it, second run, cache files after it)."""
    first = run_codecs(SPECS)
    before = cache_files()
    second = run_codecs(SPECS)
    return first, before, second, cache_files()


def test_the_second_process_leaves_the_cache_as_it_was(two_runs):
    first, before, second, after = two_runs
    assert before, "no kernel cache files found"
    assert after == before, sorted(set(after.items()) ^ set(before.items()))[:5]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_second_process_compiles_nothing(name, two_runs):
    first, _, second, _ = two_runs
    assert second[name]["compiled"] == [], \
        f"{name}: the second process compiled {second[name]['compiled']}"


def test_the_second_process_loads_what_the_first_compiled_or_loaded(two_runs):
    """The check is not vacuous: kernels ran, and the second process took them from the
    cache (a codec whose kernels an earlier codec of the same process loaded loads none)."""
    first, _, second, _ = two_runs
    assert sum(len(r["compiled"]) + r["loaded"] for r in first.values()) > 0
    assert sum(r["loaded"] for r in second.values()) > 0
    assert all(second[name]["loaded"] == 0 for name in NO_KERNELS)


THREADS_THEN_SERIAL = """
import sys, numpy as np
from zipcoll.codecs.kernels import cpu
kernel = cpu._narrow(False, sys.argv[1] == "threads")
kernel(np.arange(8, dtype=np.uint32), np.empty(8, np.uint16))
print(sum(kernel.stats.cache_hits.values()))
"""


def test_a_kernel_without_threads_never_loads_the_threaded_build(tmp_path):
    """Numba keys its disk cache on a function's name, code and cells, not on `parallel`:
    one body compiled both ways must be cached under two names, or the next process's
    serial launch would run the threaded machine code."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("NUMBA_DISABLE_JIT", None)

    def hits(way: str) -> int:
        res = subprocess.run([sys.executable, "-c", THREADS_THEN_SERIAL, way], env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        return int(res.stdout.split()[-1])

    assert hits("threads") == 0  # compiled into the empty cache
    assert hits("serial") == 0  # its own entry: compiled, not the threaded one loaded
    assert hits("serial") == 1 and hits("threads") == 1  # each loads its own


# --- the child: this file run as a script ------------------------------------------

def _child(specs: dict) -> None:
    """For each codec: encode, decode, decode_add and encode with a residual, float32 on
    both kernel paths (serial and parallel) and float64; print what numba compiled and
    loaded while that codec ran."""
    import gc

    from numba.core import event
    from numba.core.dispatcher import Dispatcher

    compiled: list = []

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

    def hits() -> int:
        return sum(sum(o.stats.cache_hits.values()) for o in gc.get_objects()
                   if isinstance(o, Dispatcher) and o._cache is not None)

    report = {}
    for name, spec in specs.items():
        compiled.clear()
        loaded = hits()
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
        report[name] = {"compiled": list(compiled), "loaded": hits() - loaded}
    print(json.dumps(report))


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))

"""Numba's threading layer: workqueue unless the user chose one, and safe from two threads.

Each case runs in a fresh process: the layer is fixed by a process's first parallel
launch, and workqueue aborts the whole process when two threads launch at once.
"""
import os
import subprocess
import sys

# two threads encode, decode and count large arrays (parallel kernels) at the same time
_TWO_THREADS = """
import threading, numpy as np, numba
from zipcoll.codecs.base import get_codec
x = np.linspace(-1, 1, 1 << 20, dtype=np.float32)
codecs = [get_codec(name) for name in ("int8", "sign", "fp16", "topk:ratio=0.01")]
def work(errors):
    try:
        for _ in range(20):
            for codec in codecs:
                codec.decode(codec.encode(x))
                codec.encode_feedback(x, np.zeros_like(x))
    except Exception as exc:
        errors.append(repr(exc))
errors = []
threads = [threading.Thread(target=work, args=(errors,)) for _ in range(2)]
[t.start() for t in threads]; [t.join() for t in threads]
assert not errors, errors
print(numba.threading_layer())
"""


# a communicator's first call sets the kernels' thread count before any kernel runs:
# that starts Numba's threads, which fixes the layer
_THREADS_SET_FIRST = """
import numba
from zipcoll.codecs.backend import share_machine_cores, machine_identity
share_machine_cores([machine_identity()], 0)
print(numba.threading_layer())
"""


def _run(code: str, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    environ.update(env, NUMBA_NUM_THREADS="2")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=environ, timeout=600)


def test_workqueue_by_default_and_two_threads_at_once_do_not_abort():
    done = _run(_TWO_THREADS)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "workqueue"


def test_the_users_threading_layer_is_kept():
    done = _run(_TWO_THREADS, NUMBA_THREADING_LAYER="threadsafe")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] != "workqueue"


def test_workqueue_when_the_thread_count_is_set_before_any_kernel():
    done = _run(_THREADS_SET_FIRST)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "workqueue"

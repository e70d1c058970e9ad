"""Every CUDA kernel compiles for a real GPU, with no GPU here.

The simulator runs the kernels as Python, so it cannot see what the CUDA target fails to
type or lower (a NumPy function it lacks, say). Here each kernel is compiled for sm_90 (an
H100's or H200's), for the dtypes the codecs launch it with: to PTX where NVVM is found
(numba-cuda's CUDA extra brings it: pip install -e ".[dev,cuda12]"), else to LLVM IR
(typing and lowering, all but NVVM's last step). Either way numba-cuda then links its
helpers with NVRTC: without it (plain numba-cuda, as `[dev]` installs) a kernel that was
typed and lowered but not linked counts as compiled (what a GPU build could fail on past
that is NVRTC's, not ours). Numba compiles the njit rules called
from a kernel for the current device, which needs a driver: that device is stood in for
by one of the same compute capability.

Run in a subprocess: the CUDA target must be loaded without the simulator, and the
stand-in must not outlive the test.
"""
import os
import subprocess
import sys

import pytest

CC = (9, 0)


def kernel_signatures():
    """(kernel name, argument types) for each way the codecs launch a kernel."""
    from numba import types as t

    floats = {"float16": (t.float16, t.uint16), "float32": (t.float32, t.uint32),
              "float64": (t.float64, t.uint64)}
    i64, u64, f64, flag = t.int64, t.uint64, t.float64, t.boolean
    u8, u16, f32 = t.uint8[::1], t.uint16[::1], t.float32[::1]
    cases = [("_bf16_encode", (t.uint32[::1], u16))]
    for name, (value, bits) in floats.items():
        x, xb = value[::1], bits[::1]
        cases += [
            ("_block_encode", (x, xb, u8, f32, i64, i64, i64, i64, flag, u64, f64)),
            ("_block_encode_feedback", (x, x, xb, u8, f32, i64, i64, i64, i64, flag, u64,
                                        f64)),
            ("_block_decode", (u8, f32, x, i64, i64, flag)),
            ("_randomk_gather", (x, x, i64, u64)),
            ("_randomk_scatter", (x, x, i64, u64, flag, flag)),
        ]
        if name != "float16":  # the sparse codecs accumulate float32 or float64
            cases += [("_scatter", (t.int64[::1], x, x, flag)),
                      ("_scatter", (t.int32[::1], t.float16[::1], x, flag))]
    return cases


def compile_all() -> tuple[int, int]:
    """Compile every kernel; print one line each; how many failed, and how many were typed
    and lowered but could not be linked for want of NVRTC."""
    import types

    import numba.cuda.dispatcher
    from numba import cuda
    from numba.cuda.cudadrv import nvvm

    from zipcoll.codecs.kernels import cuda as kernels

    numba.cuda.dispatcher.get_current_device = lambda: types.SimpleNamespace(
        compute_capability=CC)
    to_ptx = nvvm.is_available()
    print(f"numba.cuda: {cuda.implementation}; output: {'PTX' if to_ptx else 'LLVM IR'}")
    failed = unlinked = 0
    for name, signature in kernel_signatures():
        py_func = getattr(kernels, name).py_func
        try:
            if to_ptx:
                cuda.compile_ptx(py_func, signature, cc=CC)
            else:
                from numba.cuda.compiler import compile_cuda
                compile_cuda(py_func, None, signature, cc=CC)
            print(f"ok     {name}{signature}")
        except Exception as error:  # noqa: BLE001 - each kernel's failure is reported
            if "nvrtc" in str(error).lower():  # typed and lowered; the last link missing
                unlinked += 1
                print(f"NO NVRTC {name}{signature}: {type(error).__name__}: {error}"[:300])
                continue
            failed += 1
            print(f"FAILED {name}{signature}: {type(error).__name__}: {error}"[:2000])
    return failed, unlinked


@pytest.mark.timeout(400)  # ~40 s to PTX on a quiet 2-core machine
def test_every_cuda_kernel_compiles_for_sm90():
    pytest.importorskip("numba_cuda", reason="numba-cuda not installed")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    run = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    compiled = run.stdout.count("\nok ") + run.stdout.count("\nNO NVRTC ")
    assert "FAILED" not in run.stdout and compiled == len(kernel_signatures())


if __name__ == "__main__":
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "0":
        sys.exit(2)
    failed, _ = compile_all()
    sys.exit(min(failed, 1))

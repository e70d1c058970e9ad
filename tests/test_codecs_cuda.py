"""The CUDA kernels agree with the CPU kernels, run by the Numba CUDA simulator.

The simulator must be chosen before numba.cuda is first imported, so a plain pytest run
collects one test that reruns this file in a subprocess with NUMBA_ENABLE_CUDASIM=1.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"

SPECS = ["fp16", "bf16", "none", "int8", "int8:block=16", "int4", "int2",
         "int8:stochastic=true", "int4:stochastic=true,block=24", "qsgd", "qsgd:levels=100",
         "qsgd:levels=3", "qsgd:levels=20,block=16",
         "terngrad", "sign", "sign:block=24", "topk:ratio=0.2", "topk:k=3,values=float16",
         "randomk:ratio=0.2", "randomk:k=4,values=float16,scaled=false", "threshold:tau=2"]


if not SIMULATED:
    def test_cuda_kernels_under_the_simulator():
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        # the inner run is this one test, not hundreds: keep it out of tests/run.py's log
        env.pop("ZIPCOLL_TEST_LOG", None)
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              __file__], env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]

else:
    from numba import cuda

    from zipcoll.codecs import get_codec

    def data(n, dtype, nonfinite):
        """Test vector, with NaN and +-Inf when ``nonfinite``."""
        x = np.random.default_rng(n).standard_normal(n) * 4
        if nonfinite and n > 5:
            x[[1, n // 2, n - 1]] = [np.nan, np.inf, -np.inf]
        return x.astype(dtype)

    @pytest.mark.filterwarnings("ignore::RuntimeWarning")  # uint64 hashing wraps on purpose
    @pytest.mark.parametrize("nonfinite", [False, True])
    @pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
    @pytest.mark.parametrize("n", [0, 1, 9, 77])
    @pytest.mark.parametrize("spec", SPECS)
    def test_device_matches_host_bit_for_bit(spec, n, dtype, nonfinite):
        codec = get_codec(spec)
        x = data(n, dtype, nonfinite)
        host = codec.encode(x, seed=11)
        device = codec.encode(cuda.to_device(x), seed=11)
        np.testing.assert_array_equal(device, host)
        acc_host = data(n, dtype, False)
        acc_device = cuda.to_device(acc_host)
        codec.decode_add(host, acc_host)
        codec.decode_add(cuda.to_device(host), acc_device)
        np.testing.assert_array_equal(acc_device.copy_to_host(), acc_host)
        out = cuda.device_array(n, dtype)
        codec.decode(cuda.to_device(host), out=out)
        np.testing.assert_array_equal(out.copy_to_host(), codec.decode(host))

    @pytest.mark.filterwarnings("ignore::RuntimeWarning")
    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    @pytest.mark.parametrize("n", [9, 77])
    @pytest.mark.parametrize("spec", ["int8", "int4:block=24", "int2", "qsgd:levels=3",
                                      "terngrad", "sign", "sign:block=24"])
    def test_residual_written_while_encoding_matches_host(spec, n, dtype):
        codec = get_codec(spec)
        x = data(n, dtype, True)
        residual = data(n + 1, dtype, False)[1:]
        device_residual = cuda.to_device(residual)
        host = codec.encode_with_residual(x, residual, seed=5)
        device = codec.encode_with_residual(cuda.to_device(x), device_residual, seed=5)
        np.testing.assert_array_equal(device, host)
        np.testing.assert_array_equal(device_residual.copy_to_host(), residual)

    from test_codecs_edges import EDGE_CASES, edge_case

    EDGE_SPECS = ["int8:block=8", "int4:block=8", "int2:block=8", "int8:stochastic=true,block=8",
                  "qsgd:block=8", "qsgd:levels=1,block=8", "qsgd:levels=100,block=8",
                  "terngrad:block=8", "sign:block=8", "fp16", "bf16", "topk:k=5",
                  "randomk:k=5", "threshold:tau=1e-40"]

    @pytest.mark.filterwarnings("ignore::RuntimeWarning")
    @pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
    @pytest.mark.parametrize("case", EDGE_CASES)
    @pytest.mark.parametrize("spec", EDGE_SPECS)
    def test_edges_of_float_match_host_and_hold_the_bound(spec, case, dtype):
        codec = get_codec(spec)
        x = edge_case(case, dtype, n=24)
        host = codec.encode(x, seed=7)
        device = codec.encode(cuda.to_device(x), seed=7)
        np.testing.assert_array_equal(device, host)
        out = cuda.device_array(x.size, dtype)
        codec.decode(cuda.to_device(host), out=out)
        y = out.copy_to_host()
        np.testing.assert_array_equal(y, codec.decode(host))
        bound = codec.error_bound(x)
        err = np.abs(y.astype(np.float64) - x.astype(np.float64))
        limited = np.isfinite(bound)
        assert np.all(err[limited] <= bound[limited]), (x[limited], y[limited])

    @pytest.mark.filterwarnings("ignore::RuntimeWarning")
    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    @pytest.mark.parametrize("case", ["subnormal", "scale=1e-38", "scale=3e38", "huge_and_tiny",
                                      "scale=1e300"])
    @pytest.mark.parametrize("spec", ["int8:block=8", "qsgd:block=8", "sign:block=8"])
    def test_edges_of_float_residual_matches_host(spec, case, dtype):
        codec = get_codec(spec)
        x = edge_case(case, dtype, n=24)
        residual = np.zeros_like(x)
        device_residual = cuda.to_device(residual)
        host = codec.encode_with_residual(x, residual, seed=5)
        device = codec.encode_with_residual(cuda.to_device(x), device_residual, seed=5)
        np.testing.assert_array_equal(device, host)
        np.testing.assert_array_equal(device_residual.copy_to_host(), residual)
